//! The etcd coordination store against a real etcd that each test starts
//! on loopback (Debian's `etcd-server`; `XLAFN_TEST_ETCD` names another
//! binary), with the scenarios of the built-in service: join and exchange,
//! a duplicate id, barriers, timeouts, and a process that dies. Where no
//! etcd is installed each test prints one `skipped:` line and passes;
//! `scripts/setup.sh` installs it where it can.

#[path = "common/child.rs"]
mod child;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xlafn::distributed::{
    self, CoordinationStore, DistributedOptions, ETCD_MAX_VALUE_BYTES, EtcdStore, Heartbeats,
    StoreBackend,
};
use xlafn::{Error, ErrorCode};

const WAIT: Duration = Duration::from_secs(30);
/// The lease of the killed-process tests; etcd's shortest is about 2 s.
const LEASE: Duration = Duration::from_secs(2);
/// How soon a survivor must hear of a death: the lease, etcd's expiry
/// sweep (up to a second more) and room for a loaded machine.
const NOTICED_WITHIN: Duration = Duration::from_secs(15);

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn etcd_binary() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("XLAFN_TEST_ETCD") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("etcd"))
        .find(|p| p.is_file())
}

/// An etcd serving on loopback until dropped, with its data in a scratch
/// folder.
struct Etcd {
    child: Child,
    dir: PathBuf,
    endpoint: String,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts an etcd, or prints why not (and the test then passes).
fn start_etcd(test: &str) -> Option<Etcd> {
    let Some(binary) = etcd_binary() else {
        println!(
            "skipped: {test}: no etcd binary on PATH (Debian: apt-get install etcd-server, or set \
             XLAFN_TEST_ETCD)"
        );
        return None;
    };
    let (client, peer) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("xlafn-etcd-{}-{client}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let log = std::fs::File::create(dir.join("etcd.log")).unwrap();
    let child = Command::new(&binary)
        .args(["--name", "xlafn-test", "--data-dir"])
        .arg(dir.join("data"))
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("xlafn-test={peer_url}")])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let etcd = Etcd {
        child,
        dir,
        endpoint: format!("127.0.0.1:{client}"),
    };
    let deadline = Instant::now() + WAIT;
    while !healthy(&etcd.endpoint) {
        assert!(
            Instant::now() < deadline,
            "etcd did not become healthy: {}",
            std::fs::read_to_string(etcd.dir.join("etcd.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(etcd)
}

/// Does etcd's `/health` say so?
fn healthy(endpoint: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(endpoint) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /health HTTP/1.0\r\nHost: {endpoint}\r\n\r\n");
    let mut reply = String::new();
    stream.write_all(request.as_bytes()).is_ok()
        && stream.read_to_string(&mut reply).is_ok()
        && reply.contains("\"health\":\"true\"")
}

fn join(etcd: &Etcd, run: &str, id: usize, n: usize) -> xlafn::Result<(EtcdStore, Heartbeats)> {
    join_within(&etcd.endpoint, run, id, n, WAIT)
}

fn join_within(
    endpoint: &str,
    run: &str,
    id: usize,
    n: usize,
    timeout: Duration,
) -> xlafn::Result<(EtcdStore, Heartbeats)> {
    let beat = Duration::from_millis(200);
    EtcdStore::join(&[endpoint.to_string()], run, id, n, LEASE, beat, timeout)
}

fn code_and_message(e: &Error) -> (ErrorCode, &str) {
    match e {
        Error::Distributed { code, message } => (*code, message),
        other => panic!("expected a distributed error, got {other}"),
    }
}

/// Runs `body(id, store)` as each of `n` processes (threads), all joined.
fn run_all(etcd: &Etcd, run: &str, n: usize, body: fn(usize, &EtcdStore)) {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|id| {
                s.spawn(move || {
                    let (store, _beats) = join(etcd, run, id, n).unwrap();
                    body(id, &store);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}

#[test]
fn processes_join_exchange_values_and_pass_barriers() {
    let Some(etcd) = start_etcd("exchange") else {
        return;
    };
    run_all(&etcd, "exchange", 3, |id, store| {
        assert_eq!((store.process_id(), store.num_processes()), (id, 3));
        store
            .set(&format!("hello/{id}"), format!("from {id}").as_bytes())
            .unwrap();
        for other in 0..3 {
            let got = store.get(&format!("hello/{other}"), WAIT).unwrap();
            assert_eq!(got, format!("from {other}").as_bytes());
        }
        store.barrier("greeted", WAIT).unwrap();
        // The largest value round-trips; a larger one is refused.
        let big: Vec<u8> = (0..ETCD_MAX_VALUE_BYTES)
            .map(|i| (i * 7 + id) as u8)
            .collect();
        store.set(&format!("big/{id}"), &big).unwrap();
        assert_eq!(store.get(&format!("big/{id}"), WAIT).unwrap(), big);
        let mut bigger = big;
        bigger.push(0);
        let e = store.set("bigger", &bigger).unwrap_err();
        assert_eq!(code_and_message(&e).0, ErrorCode::InvalidArgument, "{e}");
        assert_eq!(store.try_get("nobody sets this").unwrap(), None);
        // A second pass of the same barrier is refused.
        store.barrier("again", WAIT).unwrap();
        let e = store.barrier("again", WAIT).unwrap_err();
        assert!(e.to_string().contains("single-use"), "{e}");
    });
}

#[test]
fn a_duplicate_process_id_is_already_exists_and_spares_the_first() {
    let Some(etcd) = start_etcd("duplicate") else {
        return;
    };
    let (zero, _zero_beats) = join(&etcd, "duplicate", 0, 2).unwrap();
    let (one, _one_beats) = join(&etcd, "duplicate", 1, 2).unwrap();
    let e = join(&etcd, "duplicate", 1, 2).unwrap_err();
    let (code, message) = code_and_message(&e);
    assert_eq!(code, ErrorCode::AlreadyExists, "{e}");
    assert!(message.contains("process_id 1 has already joined"), "{e}");
    // The failed join left the first process 1 registered and working.
    std::thread::scope(|s| {
        s.spawn(|| zero.barrier("after", WAIT).unwrap());
        one.barrier("after", WAIT).unwrap();
    });
    let e = join(&etcd, "duplicate", 0, 3).unwrap_err();
    assert_eq!(code_and_message(&e).0, ErrorCode::AlreadyExists, "{e}");
}

#[test]
fn another_process_count_and_an_id_out_of_range_are_invalid_arguments() {
    let Some(etcd) = start_etcd("counts") else {
        return;
    };
    let (_zero, _beats) = join(&etcd, "counts", 0, 2).unwrap();
    let e = join(&etcd, "counts", 1, 3).unwrap_err();
    let (code, message) = code_and_message(&e);
    assert_eq!(code, ErrorCode::InvalidArgument, "{e}");
    assert!(message.contains("num_processes=2"), "{e}");
    let e = join(&etcd, "counts", 2, 2).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    // The refused process left no registration behind: id 1 joins.
    let (_one, _one_beats) = join(&etcd, "counts", 1, 2).unwrap();
}

#[test]
fn waits_time_out_naming_the_key_or_the_missing_processes() {
    let Some(etcd) = start_etcd("timeouts") else {
        return;
    };
    let (zero, _beats) = join(&etcd, "timeouts", 0, 3).unwrap();
    let short = Duration::from_millis(300);
    let began = Instant::now();
    let e = zero.get("never", short).unwrap_err();
    let (code, message) = code_and_message(&e);
    assert_eq!(code, ErrorCode::DeadlineExceeded, "{e}");
    assert!(
        message.contains("key \"never\" was not set within 300ms"),
        "{e}"
    );
    let e = zero.barrier("alone", short).unwrap_err();
    let (code, message) = code_and_message(&e);
    assert_eq!(code, ErrorCode::DeadlineExceeded, "{e}");
    assert!(
        message.contains("1 of 3 processes arrived (missing: [1, 2])"),
        "{e}"
    );
    assert!(began.elapsed() < Duration::from_secs(10));
}

#[test]
fn joining_waits_for_process_zero_and_gives_up_on_time() {
    let Some(etcd) = start_etcd("zero") else {
        return;
    };
    let began = Instant::now();
    let e = join_within(&etcd.endpoint, "zero", 1, 2, Duration::from_millis(500)).unwrap_err();
    let (code, message) = code_and_message(&e);
    assert_eq!(code, ErrorCode::DeadlineExceeded, "{e}");
    assert!(message.contains("process 0 did not join"), "{e}");
    assert!(began.elapsed() < Duration::from_secs(10));
    // Its registration went with it: process 1 can join again.
    let (_zero, _b0) = join(&etcd, "zero", 0, 2).unwrap();
    let (_one, _b1) = join(&etcd, "zero", 1, 2).unwrap();
}

#[test]
fn an_etcd_nobody_serves_times_out_and_a_bad_endpoint_is_refused() {
    let endpoint = format!("127.0.0.1:{}", free_port());
    let began = Instant::now();
    let e = join_within(&endpoint, "none", 0, 1, Duration::from_millis(500)).unwrap_err();
    let (code, message) = code_and_message(&e);
    assert_eq!(code, ErrorCode::DeadlineExceeded, "{e}");
    assert!(message.contains("could not reach etcd"), "{e}");
    assert!(began.elapsed() < Duration::from_secs(15));
    for (bad, text) in [
        ("etcd", "not host:port"),
        ("https://etcd:2379", "TLS is not supported"),
    ] {
        let e = EtcdStore::join(&[bad.into()], "x", 0, 1, LEASE, LEASE, LEASE).unwrap_err();
        assert!(e.to_string().contains(text), "{bad}: {e}");
    }
}

#[test]
fn a_run_reusing_a_run_id_after_shutdown_sees_none_of_the_last_runs_keys() {
    let Some(etcd) = start_etcd("rerun") else {
        return;
    };
    run_all(&etcd, "rerun", 2, |id, store| {
        store
            .set("result", format!("first run {id}").as_bytes())
            .unwrap();
        store.barrier("done", WAIT).unwrap();
    });
    // The heartbeats were dropped (a clean leave): the ids are free again,
    // and the new run starts empty.
    run_all(&etcd, "rerun", 2, |_, store| {
        assert_eq!(store.try_get("result").unwrap(), None);
        store.barrier("done", WAIT).unwrap();
    });
}

const CHILD: &str = "one_process_of_an_etcd_run_that_loses_one";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// One process of a two-process run over etcd, through
/// `distributed::initialize_with`, in which process 1 is killed after both
/// passed a first barrier while process 0 waits in what `XLAFN_TEST_WAIT`
/// names (a `barrier`, a `get` of a key the victim would have set, or the
/// store's `await_death`).
#[test]
fn one_process_of_an_etcd_run_that_loses_one() {
    if !child::is_child(CHILD) {
        return;
    }
    let id: usize = env("XLAFN_TEST_PROCESS_ID").parse().unwrap();
    let options = DistributedOptions {
        initialization_timeout: WAIT,
        shutdown_timeout: Duration::from_secs(5),
        heartbeat_interval: Duration::from_millis(200),
        heartbeat_timeout: LEASE,
        store: StoreBackend::Etcd {
            endpoints: vec![env("XLAFN_TEST_ETCD_ENDPOINT")],
            run_id: "killed".into(),
        },
    };
    distributed::initialize_with("unused:1", 2, id, &options).unwrap();
    let store = distributed::store().unwrap();
    store.barrier("both here", WAIT).unwrap();
    if id == 1 {
        std::thread::sleep(Duration::from_millis(300));
        let _ = std::io::stdout().flush();
        Command::new("kill")
            .args(["-9", &std::process::id().to_string()])
            .status()
            .unwrap();
        std::thread::sleep(WAIT);
        unreachable!("still alive after kill -9");
    }
    let began = Instant::now();
    if env("XLAFN_TEST_WAIT") == "death" {
        // What the run's death watch waits on, to tell the plugins.
        let dead = store.await_death(&[], WAIT).unwrap().expect("a death");
        let took = began.elapsed();
        assert_eq!(dead.id, 1, "{dead:?}");
        assert!(took < NOTICED_WITHIN, "noticed after {took:?}: {dead:?}");
        assert_eq!(
            store.await_death(&[1], Duration::from_millis(300)).unwrap(),
            None
        );
        println!(
            "process 0 saw after {took:?}: process 1 is dead: {}",
            dead.why
        );
        return;
    }
    let failure = match env("XLAFN_TEST_WAIT").as_str() {
        "barrier" => store.barrier("after the step", WAIT).unwrap_err(),
        _ => store.get("the victim's result", WAIT).unwrap_err(),
    };
    let took = began.elapsed();
    let (code, message) = code_and_message(&failure);
    assert_eq!(code, ErrorCode::Unavailable, "{failure}");
    assert!(took < NOTICED_WITHIN, "noticed after {took:?}: {message}");
    assert!(message.contains("process 1 is dead"), "{message}");
    println!("process 0 saw after {took:?}: {message}");
}

fn lose_one(wait: &str) {
    let Some(etcd) = start_etcd(&format!("killed mid-{wait}")) else {
        return;
    };
    let runs: Vec<_> = (0..2)
        .map(|id| {
            let env = [
                ("XLAFN_TEST_ETCD_ENDPOINT", etcd.endpoint.clone()),
                ("XLAFN_TEST_PROCESS_ID", id.to_string()),
                ("XLAFN_TEST_WAIT", wait.to_string()),
            ];
            std::thread::spawn(move || {
                let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
                child::run_child(CHILD, &env, Duration::from_secs(120))
            })
        })
        .collect();
    let runs: Vec<_> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    assert!(!runs[1].success, "the victim was not killed");
    let run = &runs[0];
    assert!(
        run.success && run.stdout.contains("process 0 saw after "),
        "the survivor failed ({}):\n{}\n{}",
        run.status,
        run.stdout,
        run.stderr
    );
    let saw = run.stdout.lines().find(|l| l.contains("saw after"));
    println!("{}", saw.unwrap_or_default());
}

#[test]
fn killing_a_process_fails_the_others_etcd_barrier_naming_it() {
    lose_one("barrier");
}

#[test]
fn killing_a_process_fails_the_others_etcd_get_naming_it() {
    lose_one("get");
}

#[test]
fn a_killed_process_is_reported_dead_by_the_etcd_store() {
    lose_one("death");
}

const FROM_ENV: &str = "one_process_of_an_etcd_run_from_the_environment";

/// One process of a two-process run that `initialize_from_env` joins
/// through the etcd `XLAFN_ETCD_ENDPOINTS` names, under `XLAFN_RUN_ID`.
#[test]
fn one_process_of_an_etcd_run_from_the_environment() {
    if !child::is_child(FROM_ENV) {
        return;
    }
    let id: usize = env("XLAFN_PROCESS_ID").parse().unwrap();
    distributed::initialize_from_env().unwrap();
    let store = distributed::store().unwrap();
    assert!(
        store.coordinator().contains("(xlafn/runs/from-env/)"),
        "{}",
        store.coordinator()
    );
    assert_eq!(store.max_value_bytes(), ETCD_MAX_VALUE_BYTES);
    store.set(&format!("hello/{id}"), b"hi").unwrap();
    assert_eq!(
        store.get(&format!("hello/{}", 1 - id), WAIT).unwrap(),
        b"hi"
    );
    distributed::shutdown().unwrap();
    println!("process {id} of 2 passed");
}

#[test]
fn initialize_from_env_joins_through_the_etcd_the_environment_names() {
    let Some(etcd) = start_etcd("from the environment") else {
        return;
    };
    let endpoints = format!(" {} ,", etcd.endpoint);
    child::assert_processes_pass(
        FROM_ENV,
        2,
        |id| {
            [
                ("XLAFN_COORDINATOR", "unused:1".to_string()),
                ("XLAFN_NUM_PROCESSES", "2".into()),
                ("XLAFN_PROCESS_ID", id.to_string()),
                ("XLAFN_ETCD_ENDPOINTS", endpoints.clone()),
                ("XLAFN_RUN_ID", "from-env".into()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
        },
        Duration::from_secs(120),
    );
}
