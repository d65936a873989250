//! Multi-process runs started by a launcher: each detector of
//! `distributed::cluster` (explicit, torchrun, SLURM, Open MPI,
//! Kubernetes) read from its variables, malformed values refused by name,
//! and two processes started by a tiny SLURM-like and torchrun-like
//! launcher (`tests/data/launch.sh`) joining one run over loopback with
//! `initialize_from_env()`, no arguments given, each logging the detector
//! that fired.

#[path = "common/child.rs"]
mod child;

use std::collections::HashMap;
use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;
use xlafn::distributed::cluster::{self, KUBERNETES_PORT, first_slurm_host};
use xlafn::distributed::{self, Cluster, DistributedOptions, Launcher};
use xlafn::{Error, ErrorCode};

const WAIT: Duration = Duration::from_secs(30);
const CHILD: &str = "one_process_of_a_launched_run";

/// Every variable a detector reads (besides HOSTNAME).
const LAUNCHER_VARIABLES: [&str; 23] = [
    "XLAFN_COORDINATOR",
    "XLAFN_NUM_PROCESSES",
    "XLAFN_PROCESS_ID",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_MCA_orte_hnp_uri",
    "JOB_COMPLETION_INDEX",
    "JOB_INDEX",
    "JOBSET_NAME",
    "REPLICATED_JOB_NAME",
];

/// Detects the run described by `vars` (and `/etc/hosts` text `hosts`).
fn detect_in(vars: &[(&str, &str)], hosts: Option<&str>) -> xlafn::Result<Option<Cluster>> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let hosts = hosts.map(str::to_string);
    cluster::detect_from(&|name| map.get(name).cloned(), &|| hosts.clone())
}

fn detected(vars: &[(&str, &str)]) -> Cluster {
    detect_in(vars, None)
        .unwrap()
        .unwrap_or_else(|| panic!("nothing detected in {vars:?}"))
}

fn refused(vars: &[(&str, &str)], hosts: Option<&str>) -> String {
    match detect_in(vars, hosts) {
        Err(e @ Error::Distributed { code, .. }) => {
            assert_eq!(code, ErrorCode::InvalidArgument, "{e}");
            e.to_string()
        }
        other => panic!("{vars:?} should be refused, got {other:?}"),
    }
}

fn cluster(launcher: Launcher, addr: &str, n: usize, id: usize, local: Option<usize>) -> Cluster {
    Cluster {
        launcher,
        coordinator: addr.to_string(),
        num_processes: n,
        process_id: id,
        local_rank: local,
    }
}

#[test]
fn no_launcher_variables_detect_nothing() {
    assert_eq!(detect_in(&[], None).unwrap(), None);
    assert_eq!(
        detect_in(&[("HOSTNAME", "box-3"), ("RANK", "1")], None).unwrap(),
        None
    );
}

#[test]
fn slurm_is_detected_from_its_variables() {
    let vars = [
        ("SLURM_JOB_ID", "123456"),
        ("SLURM_PROCID", "5"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_STEP_NODELIST", "gpu[017-020,031],login2"),
    ];
    // The port: 123456 % 4096 + 61440, as JAX draws it.
    let port = 123_456 % 4096 + 61_440;
    assert_eq!(
        detected(&vars),
        cluster(Launcher::Slurm, &format!("gpu017:{port}"), 8, 5, Some(1))
    );
    // sbatch scripts see only the job's list.
    let job_list = [
        ("SLURM_JOB_ID", "7"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_JOB_NODELIST", "node3"),
    ];
    assert_eq!(detected(&job_list).coordinator, "node3:61447");
    assert_eq!(first_slurm_host("node07"), Some("node07".into()));
    assert_eq!(first_slurm_host("node07,gpu2"), Some("node07".into()));
    assert_eq!(first_slurm_host("node[07-12],gpu2"), Some("node07".into()));
    assert_eq!(first_slurm_host("node[07,09-12]"), Some("node07".into()));
    assert_eq!(first_slurm_host("[1-2]"), Some("1".into()));
    assert_eq!(first_slurm_host("node["), None);
    assert_eq!(first_slurm_host(""), None);
}

#[test]
fn torchrun_is_detected_and_comes_before_slurm() {
    let vars = [
        ("MASTER_ADDR", "10.1.2.3"),
        ("MASTER_PORT", "29500"),
        ("RANK", "3"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_RANK", "1"),
        // `srun torchrun ...`: SLURM's task is not the process.
        ("SLURM_JOB_ID", "99"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
        ("SLURM_STEP_NODELIST", "n1"),
    ];
    assert_eq!(
        detected(&vars),
        cluster(Launcher::Torchrun, "10.1.2.3:29500", 4, 3, Some(1))
    );
    // Under torchrun itself its agent's store holds MASTER_PORT.
    let mut agent = vars.to_vec();
    agent.push(("TORCHELASTIC_RUN_ID", "job-1"));
    assert_eq!(detected(&agent).coordinator, "10.1.2.3:29501");
    let v6 = [
        ("MASTER_ADDR", "fd00::1"),
        ("MASTER_PORT", "1234"),
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
    ];
    assert_eq!(detected(&v6).coordinator, "[fd00::1]:1234");
}

#[test]
fn open_mpi_is_detected_from_its_variables() {
    let vars = [
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_RANK", "2"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        (
            "OMPI_MCA_orte_hnp_uri",
            "2596339713.0;tcp://10.0.0.1,172.17.0.1:45435",
        ),
    ];
    let port = 61_441; // 2596339713 % 4096 + 61440
    assert_eq!(
        detected(&vars),
        cluster(
            Launcher::OpenMpi,
            &format!("10.0.0.1:{port}"),
            4,
            2,
            Some(0)
        )
    );
    // Open MPI 5 says nowhere where mpirun runs.
    let five = &vars[..3];
    assert!(refused(five, None).contains("set XLAFN_COORDINATOR"));
    let mut given = five.to_vec();
    given.push(("XLAFN_COORDINATOR", "head:7000"));
    assert_eq!(detected(&given).coordinator, "head:7000");
}

#[test]
fn kubernetes_jobs_are_detected_from_their_variables() {
    // A JobSet of one job: process 0 is pod 0 of job 0, in the JobSet's
    // default subdomain.
    let jobset = [
        ("JOB_COMPLETION_INDEX", "2"),
        ("JOB_INDEX", "0"),
        ("JOBSET_NAME", "train"),
        ("REPLICATED_JOB_NAME", "workers"),
        ("XLAFN_NUM_PROCESSES", "4"),
    ];
    assert_eq!(
        detected(&jobset),
        cluster(
            Launcher::Kubernetes,
            &format!("train-workers-0-0.train:{KUBERNETES_PORT}"),
            4,
            2,
            None
        )
    );
    // An Indexed Job with a headless service: the domain comes from
    // this pod's line in /etc/hosts.
    let indexed = [
        ("JOB_COMPLETION_INDEX", "3"),
        ("HOSTNAME", "sweep-3"),
        ("XLAFN_NUM_PROCESSES", "8"),
    ];
    let hosts = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n\
                 10.4.0.9\tsweep-3.svc1.team.svc.cluster.local\tsweep-3\n";
    let found = detect_in(&indexed, Some(hosts)).unwrap().unwrap();
    assert_eq!(
        found.coordinator,
        format!("sweep-0.svc1.team.svc.cluster.local:{KUBERNETES_PORT}")
    );
    assert_eq!((found.num_processes, found.process_id), (8, 3));
    // No subdomain: say what to do.
    let bare = "127.0.0.1 localhost\n10.4.0.9 sweep-3\n";
    assert!(refused(&indexed, Some(bare)).contains("XLAFN_COORDINATOR"));
    // Kubernetes keeps the completion count to itself.
    let message = refused(&indexed[..2], Some(hosts));
    assert!(message.contains("XLAFN_NUM_PROCESSES"), "{message}");
    // Several jobs of a JobSet number their pods per job.
    let mut second_job = jobset.to_vec();
    second_job[1] = ("JOB_INDEX", "1");
    assert!(refused(&second_job, None).contains("JOB_INDEX"));
}

#[test]
fn explicit_variables_win_and_a_coordinator_alone_overrides() {
    let vars = [
        ("XLAFN_COORDINATOR", "10.9.9.9:4000"),
        ("XLAFN_NUM_PROCESSES", "3"),
        ("XLAFN_PROCESS_ID", "1"),
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "x"),
        ("MASTER_PORT", "1"),
    ];
    assert_eq!(
        detected(&vars),
        cluster(Launcher::Explicit, "10.9.9.9:4000", 3, 1, None)
    );
    let slurm = [
        ("SLURM_JOB_ID", "1"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_STEP_NODELIST", "n[1-2]"),
        ("XLAFN_COORDINATOR", "n1.cluster:5555"),
    ];
    let found = detected(&slurm);
    assert_eq!(
        (found.launcher, found.coordinator.as_str()),
        (Launcher::Slurm, "n1.cluster:5555")
    );
}

#[test]
fn malformed_launcher_variables_are_refused_by_name() {
    let cases: [(&[(&str, &str)], &str); 6] = [
        (
            &[
                ("SLURM_JOB_ID", "12"),
                ("SLURM_PROCID", "one"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_STEP_NODELIST", "n1"),
            ],
            "SLURM_PROCID=\"one\"",
        ),
        (
            &[
                ("SLURM_JOB_ID", "x7"),
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_STEP_NODELIST", "n1"),
            ],
            "SLURM_JOB_ID=\"x7\"",
        ),
        (
            &[
                ("SLURM_JOB_ID", "7"),
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
            ],
            "SLURM_STEP_NODELIST",
        ),
        (
            &[
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "70000"),
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
            ],
            "above 65535",
        ),
        (
            &[
                ("MASTER_ADDR", "h"),
                ("RANK", "0"),
                ("WORLD_SIZE", "-2"),
                ("MASTER_PORT", "1"),
            ],
            "WORLD_SIZE=\"-2\"",
        ),
        (
            &[
                ("OMPI_COMM_WORLD_SIZE", "2"),
                ("OMPI_COMM_WORLD_RANK", "0"),
                ("OMPI_MCA_orte_hnp_uri", "garbage"),
            ],
            "OMPI_MCA_orte_hnp_uri=\"garbage\"",
        ),
    ];
    for (vars, named) in cases {
        let message = refused(vars, None);
        assert!(message.contains(named), "{message} should name {named}");
    }
}

#[test]
fn initialize_from_env_without_a_launcher_says_what_it_looked_for() {
    child::isolated(
        "initialize_from_env_without_a_launcher_says_what_it_looked_for",
        Duration::from_secs(60),
        || {
            if cluster::detect().unwrap().is_some() {
                println!("skipped: this test runs under a launcher");
                return;
            }
            let e = distributed::initialize_from_env().unwrap_err();
            let text = e.to_string();
            assert!(
                text.starts_with("FailedPreconditionError: distributed::initialize_from_env: no launcher detected")
                    && text.contains("SLURM_JOB_ID")
                    && text.contains("MASTER_ADDR")
                    && text.contains("JOB_COMPLETION_INDEX"),
                "{text}"
            );
            assert!(!distributed::is_initialized());
        },
    );
}

// ------------------------------------------------------- launched runs

/// One process of a run started by `tests/data/launch.sh`: it joins with
/// no arguments, checks which launcher was detected, passes a barrier with
/// the other and leaves.
#[test]
fn one_process_of_a_launched_run() {
    if !child::is_child(CHILD) {
        return;
    }
    // The detector's log line goes to stdout, where the launcher test
    // looks for it.
    tracing_subscriber::fmt()
        .with_writer(std::io::stdout)
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .init();
    let options = DistributedOptions {
        initialization_timeout: WAIT,
        shutdown_timeout: WAIT,
        ..Default::default()
    };
    let found = distributed::initialize_from_env_with(&options).unwrap();
    assert_eq!(
        found.launcher.name(),
        std::env::var("XLAFN_TEST_LAUNCHER").unwrap()
    );
    let (id, n) = (distributed::process_index(), distributed::process_count());
    assert_eq!((id, n), (found.process_id, found.num_processes));
    assert_eq!(found.local_rank, Some(id));
    let store = distributed::store().unwrap();
    store.set(&format!("hello/{id}"), b"hi").unwrap();
    assert_eq!(
        store.get(&format!("hello/{}", 1 - id), WAIT).unwrap(),
        b"hi"
    );
    store.barrier("greeted", WAIT).unwrap();
    println!("process {id} of {n} passed");
    distributed::shutdown().unwrap();
}

/// A port in 61440..=65535 (SLURM's range) that was free a moment ago.
fn free_job_port() -> u16 {
    (61_440..=65_535)
        .find(|&p| TcpListener::bind(("127.0.0.1", p)).is_ok())
        .expect("no free port in 61440..=65535")
}

fn launch(kind: &str, key: u32, launcher: Launcher) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/launch.sh"))
        .args([kind, "2", &key.to_string()])
        .arg(&exe)
        .args([CHILD, "--exact", "--nocapture", "--test-threads=1"])
        .env("XLAFN_TEST_CHILD", CHILD)
        .env("XLAFN_TEST_LAUNCHER", launcher.name());
    // Whatever launched this test must not be what the children detect.
    for name in LAUNCHER_VARIABLES {
        cmd.env_remove(name);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{kind} launch failed:\n{stdout}");
    let logged = format!("distributed: detected a {} launch", launcher.name());
    for id in 0..2 {
        let mine = format!("[{id}] ");
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&mine) && l.contains(&logged)),
            "process {id} did not log {logged:?}:\n{stdout}"
        );
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&mine) && l.contains(&format!("process {id} of 2 passed"))),
            "{stdout}"
        );
    }
}

#[test]
fn a_slurm_like_launch_initializes_without_arguments() {
    let port = free_job_port();
    // SLURM's coordinator port is the job id's: pick the job whose port is free.
    launch("slurm", u32::from(port) - 61_440, Launcher::Slurm);
}

#[test]
fn a_torchrun_like_launch_initializes_without_arguments() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    launch("torchrun", u32::from(port), Launcher::Torchrun);
}
