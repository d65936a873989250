//! Multi-controller execution: two processes of this test
//! binary join one run, see every device of it, lay arrays out over a mesh
//! that spans both, hold only their own blocks, and run sharded programs
//! that each feeds with its own blocks.
//!
//! The CPU plugin cannot run one program across processes, so each
//! process loads `data/two_process_shim_plugin.c`: the real CPU plugin of
//! 4 devices, presented as node k of 2 driving devices 2k and 2k+1. The
//! shim executes the real compiled program with zeros in the other
//! node's partitions, so every expected value below is the run's result
//! with the other process's blocks taken as zeros, computed by hand.

#[path = "common/child.rs"]
mod child;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;
use xlafn::distributed::{self, DistributedOptions};
use xlafn::prelude::*;
use xlafn::runtime::{CPU_MULTI_PROCESS_MESSAGE, default_plugin_path};
use xlafn::sharding::{Mesh, NamedSharding, PartitionSpec, psum, shard_map};

const LIMIT: Duration = Duration::from_secs(180);
const CHILD: &str = "one_process_of_a_two_process_run";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

fn rows(mesh: &std::sync::Arc<Mesh>) -> NamedSharding {
    NamedSharding::new(mesh, PartitionSpec::new([Some("data")])).unwrap()
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// What process `id` of 2 checks; the other process runs the same steps.
/// Each drives the same number of devices; every device holds a block of
/// 2 elements of `values`. Under the shim (`others_are_zeros`) the other
/// process's blocks count as zeros, so what the program sees is
/// `effective`.
fn run_as(id: usize, others_are_zeros: bool) {
    let options = DistributedOptions {
        initialization_timeout: Duration::from_secs(60),
        shutdown_timeout: Duration::from_secs(60),
        ..Default::default()
    };
    distributed::initialize_with(&env("XLAFN_TEST_COORDINATOR"), 2, id, &options).unwrap();

    // Every device of the run, and this process's own.
    let all = xlafn::devices().unwrap();
    let local = xlafn::local_devices().unwrap();
    let n = all.len();
    assert_eq!(n, 2 * local.len(), "both processes drive as many devices");
    let owned: Vec<_> = all
        .iter()
        .filter(|d| d.process_index() == id)
        .copied()
        .collect();
    assert_eq!(owned, local);
    assert!(
        all.iter()
            .all(|d| d.is_addressable() == (d.process_index() == id))
    );
    let remote = *all.iter().find(|d| d.process_index() != id).unwrap();
    assert_eq!(xlafn::default_device().unwrap(), local[0]);

    // Another process's device holds none of this one's values.
    let e = Tensor::from_vec(vec![1f32], &[1])
        .unwrap()
        .to_device(remote)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("belongs to process {}", 1 - id)) && e.contains("local_devices()"),
        "{e}"
    );

    // A mesh over both processes; each holds its own blocks.
    let mesh = Mesh::new(&[("data", n)]).unwrap();
    assert!(!mesh.is_fully_addressable());
    let partitions = mesh.addressable_partitions();
    let in_mesh: Vec<_> = partitions.iter().map(|&p| mesh.devices()[p]).collect();
    assert_eq!(in_mesh, local);
    let values: Vec<f32> = (0..2 * n).map(|i| i as f32).collect();
    let mine: Vec<f32> = partitions
        .iter()
        .flat_map(|&p| values[2 * p..2 * p + 2].to_vec())
        .collect();
    let effective: Vec<f32> = match others_are_zeros {
        false => values.clone(),
        true => (0..2 * n)
            .map(|i| match partitions.contains(&(i / 2)) {
                true => values[i],
                false => 0.0,
            })
            .collect(),
    };
    let concat = |blocks: &[Tensor]| -> Vec<f32> { blocks.iter().flat_map(f32s).collect() };
    let x = Tensor::from_vec(values.clone(), &[2 * n as i64])
        .unwrap()
        .shard(&rows(&mesh))
        .unwrap();
    let blocks = x.addressable_shards().unwrap();
    assert_eq!(blocks.len(), local.len());
    assert_eq!(concat(&blocks), mine);
    let placed: Vec<_> = blocks.iter().map(|b| b.device().unwrap()).collect();
    assert_eq!(placed, local);
    // The whole value is not this process's to read.
    let e = x.to_vec::<f32>().unwrap_err().to_string();
    let holds = format!("holds {} of its {n}", local.len());
    assert!(
        e.contains("spans the devices of several processes") && e.contains(&holds),
        "{e}"
    );

    // The same layout from a value on one device, and from local blocks.
    let from_device = Tensor::from_vec(values.clone(), &[2 * n as i64])
        .unwrap()
        .to_device(local[local.len() - 1])
        .unwrap()
        .shard(&rows(&mesh))
        .unwrap();
    assert_eq!(concat(&from_device.addressable_shards().unwrap()), mine);
    let pieces: Vec<Tensor> = mine
        .chunks(2)
        .map(|c| Tensor::from_vec(c.to_vec(), &[2]).unwrap())
        .collect();
    let assembled = Tensor::from_shards(&[2 * n as i64], &rows(&mesh), &pieces).unwrap();
    assert_eq!(concat(&assembled.addressable_shards().unwrap()), mine);
    let e = Tensor::from_shards(&[2 * n as i64], &rows(&mesh), &pieces[1..])
        .unwrap_err()
        .to_string();
    let count = format!(
        "one block per mesh device of this process ({}), got {}",
        local.len(),
        local.len() - 1
    );
    assert!(e.contains(&count), "{e}");

    // Each process gives only its own part of the batch
    // (`jax.make_array_from_process_local_data`).
    let local_part = Tensor::from_vec(mine.clone(), &[mine.len() as i64]).unwrap();
    let global = [2 * n as i64];
    let from_local = Tensor::from_process_local_data(&rows(&mesh), &local_part, &global).unwrap();
    assert_eq!(concat(&from_local.addressable_shards().unwrap()), mine);
    let e =
        Tensor::from_process_local_data(&rows(&mesh), &x.addressable_shards().unwrap()[0], &global)
            .unwrap_err()
            .to_string();
    assert!(
        e.contains(&format!("must be a one-device f32[{}]", mine.len())),
        "{e}"
    );

    // An input pipeline: each process reads its share of the examples
    // (`shard` by process), batches it, and `prefetch_to_device` lays the
    // global batch out over the mesh, this process's part in its blocks.
    let examples = xlafn::runtime::HostArray::from_vec(values.clone(), &[2 * n as i64]);
    let batches = xlafn::data::Dataset::from_tensor_slices(examples)
        .unwrap()
        .shard(2, id as u64)
        .batch(n, true)
        .prefetch_to_device(1, xlafn::data::Placement::Sharded(rows(&mesh)))
        .collect_epoch(0)
        .unwrap();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].dims(), vec![2 * n as i64], "the global batch");
    let share: Vec<f32> = values.iter().skip(id).step_by(2).copied().collect();
    assert_eq!(concat(&batches[0].addressable_shards().unwrap()), share);

    // A sharded function: every process compiles the global program and
    // feeds its own blocks. The sum is replicated, so each process can
    // read it.
    let f = FunctionOptions::new()
        .in_shardings(vec![Some(rows(&mesh))])
        .build(|x: Tensor| -> Result<Vec<Tensor>> {
            Ok(vec![x.reduce_sum(&[0], false)?, x.mul_scalar(2.0)?])
        });
    // It is compiled once for the run: process 0 compiles and publishes
    // it, process 1 loads what process 0 compiled. (With the disk cache
    // off, so that process 0 compiles rather than loads from an earlier
    // run.)
    xlafn::runtime::set_disk_cache_enabled(false);
    let counts = || {
        (
            xlafn::runtime::xla_compile_count(),
            xlafn::runtime::shared_executables_loaded(),
        )
    };
    let before = counts();
    let out = f.call((&x,)).unwrap();
    let after = counts();
    let (compiled, loaded) = (after.0 - before.0, after.1 - before.1);
    match id {
        0 => assert_eq!((compiled, loaded), (1, 0), "process 0 compiles"),
        _ => assert_eq!((compiled, loaded), (0, 1), "process 1 loads"),
    }
    println!("process {id}: the sharded function: {compiled} compiles, {loaded} loaded");
    assert_eq!(f32s(&out[0]), [effective.iter().sum::<f32>()]);
    let want: Vec<f32> = mine.iter().map(|v| v * 2.0).collect();
    assert_eq!(concat(&out[1].addressable_shards().unwrap()), want);

    // An eager op on the sharded value runs partitioned over the mesh.
    let tripled = x.mul_scalar(3.0).unwrap().addressable_shards().unwrap();
    let want: Vec<f32> = mine.iter().map(|v| v * 3.0).collect();
    assert_eq!(concat(&tripled), want);

    // Resharding to replicated all-gathers across the processes.
    let replicated = NamedSharding::replicated(&mesh);
    let whole = x.shard(&replicated).unwrap();
    assert_eq!(f32s(&whole), effective);

    // Onto another mesh: the devices rotated by one, so blocks move
    // between devices and between the processes (on the devices: a trip
    // through the host could not read the other process's blocks).
    let rotated: Vec<_> = all[1..].iter().chain(&all[..1]).copied().collect();
    let flipped = Mesh::with_devices(rotated, &[("data", n)]).unwrap();
    let moved = x.shard(&rows(&flipped)).unwrap();
    let want: Vec<f32> = flipped
        .addressable_partitions()
        .iter()
        .flat_map(|&q| effective[2 * q..2 * q + 2].to_vec())
        .collect();
    assert_eq!(concat(&moved.addressable_shards().unwrap()), want);
    assert!(want.iter().any(|v| *v != 0.0));
    // On that mesh, a process's devices may hold no single box of the
    // array (process 0 holds its first and last block when n = 4).
    let parts = flipped.addressable_partitions();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    let box_values = Tensor::from_vec(
        values[2 * first..2 * last + 2].to_vec(),
        &[2 * (last - first + 1) as i64],
    )
    .unwrap();
    let placed = Tensor::from_process_local_data(&rows(&flipped), &box_values, &global);
    match parts.windows(2).all(|w| w[1] == w[0] + 1) {
        true => {
            let mine_there: Vec<f32> = parts
                .iter()
                .flat_map(|&q| values[2 * q..2 * q + 2].to_vec())
                .collect();
            assert_eq!(
                concat(&placed.unwrap().addressable_shards().unwrap()),
                mine_there
            );
        }
        false => {
            let e = placed.unwrap_err().to_string();
            assert!(e.contains("do not form one box of the array"), "{e}");
        }
    }

    // A mesh of the other process's devices only is not this process's to
    // run on.
    let theirs = Mesh::with_devices(vec![remote], &[("data", 1)]).unwrap();
    let elsewhere = FunctionOptions::new()
        .in_shardings(vec![Some(NamedSharding::replicated(&theirs))])
        .build(|x: Tensor| x.mul_scalar(2.0));
    let e = elsewhere
        .call((&Tensor::scalar(1f32),))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("runs on mesh[data=1], none of whose devices belongs to this process"),
        "{e}"
    );

    // shard_map with an explicit psum across the run.
    let g = {
        let mesh = mesh.clone();
        function(move |x: Tensor| -> Result<Vec<Tensor>> {
            let spec = PartitionSpec::new([Some("data")]);
            shard_map(
                &mesh,
                std::slice::from_ref(&spec),
                &[PartitionSpec::replicated()],
                &[&x],
                |local| Ok(vec![psum(&local[0], "data")?]),
            )
        })
    };
    let summed = g.call((&x,)).unwrap();
    // The blocks of 2, summed elementwise over every device.
    let column = |c: usize| effective.iter().skip(c).step_by(2).sum::<f32>();
    assert_eq!(f32s(&summed[0]), [column(0), column(1)]);

    // A data-parallel SGD step on a replicated variable: XLA's all-reduce
    // of the gradient spans the processes, and each updates its copies.
    let w = Variable::new(Tensor::scalar(1f32).shard(&replicated).unwrap());
    let step = function(|w: Variable, x: Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        let loss = x.mul(&w.read())?.square()?.reduce_sum(&[0], false)?;
        let g = tape
            .gradient(&loss, &[(&w).into()])?
            .remove(0)
            .expect("w is watched");
        w.assign_sub(&g.mul_scalar(0.01)?)?;
        Ok(loss)
    });
    let squares: f32 = effective.iter().map(|v| v * v).sum();
    let loss = step.call((w.clone(), &x)).unwrap();
    assert_eq!(f32s(&loss), [squares]);
    // d loss / dw = 2 w sum(x^2), with w = 1.
    assert_eq!(w.read().sharding(), Some(replicated.clone()));
    assert_eq!(f32s(&w.read()), [1.0 - 0.01 * 2.0 * squares]);

    distributed::shutdown().unwrap();
    println!("process {id} of 2 passed");
}

/// The CPU plugin, asked to be one process of a run, refuses.
fn run_on_the_cpu_plugin_as(id: usize) {
    let options = DistributedOptions {
        initialization_timeout: Duration::from_secs(60),
        shutdown_timeout: Duration::from_secs(60),
        ..Default::default()
    };
    distributed::initialize_with(&env("XLAFN_TEST_COORDINATOR"), 2, id, &options).unwrap();
    let e = xlafn::devices().unwrap_err().to_string();
    assert_eq!(
        e,
        format!("UnimplementedError: {CPU_MULTI_PROCESS_MESSAGE}")
    );
    distributed::shutdown().unwrap();
    println!("process {id} of 2 passed");
}

/// How long a process of the killed-mid-step run may take to be taken
/// for dead: its heartbeat timeout.
const DEATH_BOUND: Duration = Duration::from_secs(5);

/// A step over both processes during which process 1 is killed: process
/// 0's execution, blocked in the collective (the shim, with
/// `SHIM_EXECUTE_WAITS_FOR_PEER=2`, blocks the second one), fails within
/// the heartbeat timeout with an error naming process 1, because the run's
/// death watch told the plugin, which aborted the collective.
fn run_killed_mid_step_as(id: usize) {
    let options = DistributedOptions {
        initialization_timeout: Duration::from_secs(60),
        shutdown_timeout: Duration::from_secs(10),
        heartbeat_interval: Duration::from_millis(500),
        heartbeat_timeout: DEATH_BOUND,
        ..Default::default()
    };
    distributed::initialize_with(&env("XLAFN_TEST_COORDINATOR"), 2, id, &options).unwrap();
    let store = distributed::store().unwrap();
    if id == 1 {
        store.get("test/stepping", Duration::from_secs(60)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        println!("process 1 kills itself mid-step");
        let _ = std::process::Command::new("kill")
            .args(["-9", &std::process::id().to_string()])
            .status();
        std::thread::sleep(Duration::from_secs(60));
        unreachable!("kill -9 did not kill process 1");
    }
    let n = xlafn::devices().unwrap().len();
    let mesh = Mesh::new(&[("data", n)]).unwrap();
    let x = Tensor::from_vec(vec![1f32; 2 * n], &[2 * n as i64])
        .unwrap()
        .shard(&rows(&mesh))
        .unwrap();
    let f = FunctionOptions::new()
        .in_shardings(vec![Some(rows(&mesh))])
        .build(|x: Tensor| x.reduce_sum(&[0], false));
    // The first step runs (and compiles); the second waits on process 1.
    assert_eq!(f32s(&f.call((&x,)).unwrap()), [n as f32]);
    store.set("test/stepping", b"").unwrap();
    let started = std::time::Instant::now();
    let e = f.call((&x,)).unwrap_err().to_string();
    let waited = started.elapsed();
    assert!(
        e.starts_with(
            "UnavailableError: a program over the run's processes failed because \
             process 1 is dead: "
        ) && e.contains("collective aborted"),
        "{e}"
    );
    assert!(waited < DEATH_BOUND + Duration::from_secs(2), "{waited:?}");
    println!("process 0: the step failed after {waited:?}: {e}");
    // Leaving a run whose other process died is an error, not a hang.
    let e = distributed::shutdown().unwrap_err().to_string();
    assert!(e.contains("process 1 is dead"), "{e}");
    println!("process 0 of 2 passed");
}

#[test]
fn one_process_of_a_two_process_run() {
    if !child::is_child(CHILD) {
        return;
    }
    let id = env("XLAFN_TEST_PROCESS_ID").parse().unwrap();
    match env("XLAFN_TEST_SCENARIO").as_str() {
        "shim" => run_as(id, true),
        "gpus" => run_as(id, false),
        "killed_mid_step" => run_killed_mid_step_as(id),
        _ => run_on_the_cpu_plugin_as(id),
    }
}

/// Runs `one_process_of_a_two_process_run` as processes 0 and 1 with
/// `env` besides their ids, and checks that both passed.
fn run_two(scenario: &str, env: &[(&str, &str)]) {
    run_two_with(scenario, env, |_| Vec::new());
}

/// `run_two`, with `per_process(id)` adding to process `id`'s environment.
fn run_two_with(
    scenario: &str,
    env: &[(&str, &str)],
    per_process: impl Fn(usize) -> Vec<(String, String)>,
) {
    let coordinator = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:{}", listener.local_addr().unwrap().port())
    };
    let env_of = |id: usize| {
        let mut all: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        all.push(("XLAFN_TEST_SCENARIO".into(), scenario.into()));
        all.push(("XLAFN_TEST_COORDINATOR".into(), coordinator.clone()));
        all.push(("XLAFN_TEST_PROCESS_ID".into(), id.to_string()));
        all.extend(per_process(id));
        all
    };
    child::assert_processes_pass(CHILD, 2, env_of, LIMIT);
}

#[cfg_attr(xlafn_device_cuda, ignore = "runs on the CPU plugin")]
#[test]
fn the_cpu_plugin_refuses_to_be_one_process_of_a_run() {
    run_two("cpu", &[("XLAFN_DEVICE", "cpu")]);
}

#[test]
fn joining_a_run_after_using_a_device_is_an_error() {
    const NAME: &str = "joining_a_run_after_using_a_device_is_an_error";
    if !child::is_child(NAME) {
        let run = child::run_child(NAME, &[], LIMIT);
        assert!(run.success, "{}\n{}", run.stdout, run.stderr);
        return;
    }
    let _ = Tensor::scalar(1f32).exp().unwrap();
    let e = distributed::initialize("127.0.0.1:1", 2, 0)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("FailedPreconditionError: distributed::initialize must come before"),
        "{e}"
    );
    assert!(!distributed::is_initialized());
}

/// Builds the shim against the pinned plugin's header; `None` where that
/// header is not beside the plugin.
fn shim_plugin(dir: &Path) -> Option<PathBuf> {
    let include = default_plugin_path().ok()?.parent()?.join("include");
    if !include.join("pjrt_c_api.h").is_file() {
        eprintln!("skipped: no pjrt_c_api.h in {}", include.display());
        return None;
    }
    let library = dir.join("libxlafn_two_process_shim.so");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/two_process_shim_plugin.c");
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-std=c11", "-I"])
        .arg(&include)
        .arg("-o")
        .arg(&library)
        .arg(&source)
        .arg("-ldl")
        .status()
        .expect("this test builds a shim plugin with a C compiler (cc)");
    assert!(status.success(), "cc failed on {}", source.display());
    Some(library)
}

#[cfg_attr(xlafn_device_cuda, ignore = "wraps the CPU plugin")]
#[test]
fn two_processes_lay_out_and_run_one_program_over_a_mesh_spanning_both() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("multi-process-shim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(shim) = shim_plugin(&dir) else {
        return;
    };
    let real = default_plugin_path().unwrap();
    run_two(
        "shim",
        &[
            ("XLAFN_DEVICE", "cuda"),
            ("XLAFN_CUDA_PLUGIN", shim.to_str().unwrap()),
            ("SHIM_REAL_PJRT_PLUGIN", real.to_str().unwrap()),
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg_attr(xlafn_device_cuda, ignore = "wraps the CPU plugin")]
#[test]
fn a_process_killed_mid_step_fails_the_others_step_naming_it() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("multi-process-killed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(shim) = shim_plugin(&dir) else {
        return;
    };
    let real = default_plugin_path().unwrap();
    let coordinator = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:{}", listener.local_addr().unwrap().port())
    };
    let runs: Vec<_> = (0..2)
        .map(|id| {
            let env: Vec<(String, String)> = [
                ("XLAFN_DEVICE", "cuda"),
                ("XLAFN_CUDA_PLUGIN", shim.to_str().unwrap()),
                ("SHIM_REAL_PJRT_PLUGIN", real.to_str().unwrap()),
                ("SHIM_EXECUTE_WAITS_FOR_PEER", "2"),
                ("XLAFN_TEST_SCENARIO", "killed_mid_step"),
                ("XLAFN_TEST_COORDINATOR", &coordinator),
                ("XLAFN_TEST_PROCESS_ID", &id.to_string()),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            std::thread::spawn(move || {
                let env: Vec<(&str, &str)> =
                    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                child::run_child(CHILD, &env, LIMIT)
            })
        })
        .collect();
    let runs: Vec<_> = runs.into_iter().map(|h| h.join().unwrap()).collect();
    let (zero, one) = (&runs[0], &runs[1]);
    assert!(
        zero.success && zero.stdout.contains("process 0 of 2 passed"),
        "process 0 ({}):\n{}\n{}",
        zero.status,
        zero.stdout,
        zero.stderr
    );
    // Asked of a CUDA plugin, so that XLA aborts such collectives.
    assert!(
        zero.stderr
            .contains("two_process_shim: create option abort_collectives_on_failure=1"),
        "{}",
        zero.stderr
    );
    for line in zero.stdout.lines().filter(|l| l.contains("process 0:")) {
        println!("{line}");
    }
    assert!(
        !one.success && one.stdout.contains("process 1 kills itself mid-step"),
        "process 1 ({}):\n{}\n{}",
        one.status,
        one.stdout,
        one.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same run on two GPUs, one per process, through the CUDA plugin and
/// NCCL (`XLAFN_DEVICE=cuda cargo test`, e.g. `scripts/cuda-suite.sh`).
/// Here the other process's blocks are real, so the expected values are
/// the whole array's.
#[cfg_attr(
    not(xlafn_device_cuda),
    ignore = "needs XLAFN_DEVICE=cuda and two GPUs"
)]
#[test]
fn two_processes_on_two_gpus_run_one_program() {
    let gpus = std::process::Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(0);
    if gpus < 2 {
        eprintln!("skipped: {gpus} GPU(s) listed by nvidia-smi -L; this run needs two");
        return;
    }
    run_two_with("gpus", &[("XLAFN_DEVICE", "cuda")], |id| {
        vec![("CUDA_VISIBLE_DEVICES".into(), id.to_string())]
    });
}
