//! A run whose process dies or hangs fails loudly instead of stalling:
//! each process sends heartbeats on a connection of its own, the
//! coordinator takes a process whose connection closes (it exited or was
//! killed) or whose heartbeats stop for the configured bound for dead,
//! and every barrier or get that needs it then fails with an
//! `UnavailableError` naming it. A run whose coordinator (process 0) died
//! fails its waits and its shutdown instead of hanging.

#[path = "common/child.rs"]
mod child;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use xlafn::distributed::frame::{self, Reply, Request};
use xlafn::distributed::{self, DistributedOptions, KvClient, KvService};
use xlafn::{Error, ErrorCode};

const WAIT: Duration = Duration::from_secs(60);
/// How soon a survivor must hear of a death (a killed process is noticed
/// at once; this leaves room for a loaded machine).
const NOTICED_WITHIN: Duration = Duration::from_secs(15);
const CHILD: &str = "one_process_of_a_run_that_loses_one";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

fn free_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", listener.local_addr().unwrap().port())
}

fn kill_self() -> ! {
    let _ = std::io::stdout().flush();
    std::process::Command::new("kill")
        .args(["-9", &std::process::id().to_string()])
        .status()
        .unwrap();
    std::thread::sleep(WAIT);
    unreachable!("still alive after kill -9");
}

fn unavailable(e: &Error) -> &str {
    match e {
        Error::Distributed {
            code: ErrorCode::Unavailable,
            message,
        } => message,
        other => panic!("expected an UnavailableError, got {other}"),
    }
}

/// One process of a two-process run in which `XLAFN_TEST_VICTIM` is
/// killed after both passed a first barrier, while the other waits in
/// what `XLAFN_TEST_WAIT` names: a `barrier`, or a `get` of a key the
/// victim would have set.
#[test]
fn one_process_of_a_run_that_loses_one() {
    if !child::is_child(CHILD) {
        return;
    }
    let id: usize = env("XLAFN_TEST_PROCESS_ID").parse().unwrap();
    let victim: usize = env("XLAFN_TEST_VICTIM").parse().unwrap();
    let options = DistributedOptions {
        initialization_timeout: WAIT,
        shutdown_timeout: Duration::from_secs(20),
        ..Default::default()
    };
    distributed::initialize_with(&env("XLAFN_TEST_COORDINATOR"), 2, id, &options).unwrap();
    let store = distributed::store().unwrap();
    store.barrier("both here", WAIT).unwrap();
    if id == victim {
        // Mid-step: killed while the other waits on it.
        std::thread::sleep(Duration::from_millis(300));
        kill_self();
    }
    let began = Instant::now();
    let failure = match env("XLAFN_TEST_WAIT").as_str() {
        "barrier" => store.barrier("after the step", WAIT).unwrap_err(),
        _ => store.get("the victim's result", WAIT).unwrap_err(),
    };
    let took = began.elapsed();
    let message = unavailable(&failure).to_string();
    assert!(took < NOTICED_WITHIN, "noticed after {took:?}: {message}");
    if victim == 0 {
        // The coordinator itself is gone: the wait failed on its closed
        // connection, and shutdown is an error, not a hang.
        assert!(message.contains("coordination service"), "{message}");
        let began = Instant::now();
        assert!(distributed::shutdown().is_err());
        assert!(began.elapsed() < NOTICED_WITHIN);
    } else {
        assert!(
            message.contains(&format!("process {victim} is dead"))
                && message.contains("connection to the coordinator closed"),
            "{message}"
        );
    }
    println!("process {id} saw: {message}");
}

fn lose_one(victim: usize, wait: &str) {
    let coordinator = free_addr();
    let runs: Vec<_> = (0..2)
        .map(|id| {
            let env = [
                ("XLAFN_TEST_COORDINATOR", coordinator.clone()),
                ("XLAFN_TEST_PROCESS_ID", id.to_string()),
                ("XLAFN_TEST_VICTIM", victim.to_string()),
                ("XLAFN_TEST_WAIT", wait.to_string()),
            ];
            std::thread::spawn(move || {
                let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
                child::run_child(CHILD, &env, Duration::from_secs(120))
            })
        })
        .collect();
    let runs: Vec<_> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    let survivor = 1 - victim;
    assert!(!runs[victim].success, "the victim was not killed");
    let run = &runs[survivor];
    assert!(
        run.success && run.stdout.contains(&format!("process {survivor} saw: ")),
        "the survivor failed ({}):\n{}\n{}",
        run.status,
        run.stdout,
        run.stderr
    );
}

#[test]
fn killing_a_process_fails_the_others_barrier_naming_it() {
    lose_one(1, "barrier");
}

#[test]
fn killing_a_process_fails_the_others_get_naming_it() {
    lose_one(1, "get");
}

#[test]
fn killing_the_coordinator_fails_the_others_wait_and_shutdown() {
    lose_one(0, "barrier");
}

/// A process that stays connected but stops sending heartbeats (hung, or
/// cut off) is taken for dead once its bound passes.
#[test]
fn a_process_whose_heartbeats_stop_is_taken_for_dead_after_its_bound() {
    let service = KvService::start("127.0.0.1:0", 2).unwrap();
    let addr = service.local_addr().to_string();
    let survivor = KvClient::join(&addr, 0, 2, WAIT).unwrap();
    let _beats = survivor
        .start_heartbeats(Duration::from_millis(50), WAIT)
        .unwrap();
    // Process 1, by hand: registers, sends one heartbeat that promises the
    // next within 300 ms, then goes silent with its connection open.
    let call = |stream: &mut TcpStream, request: Request| {
        frame::write_frame(stream, &request.encode()).unwrap();
        let body = frame::read_frame(stream).unwrap().unwrap();
        Reply::decode(&body).unwrap()
    };
    let mut register = TcpStream::connect(&addr).unwrap();
    let joined = Request::Register {
        process_id: 1,
        num_processes: 2,
        token: 77,
    };
    assert_eq!(call(&mut register, joined), Reply::Done);
    let mut silent = TcpStream::connect(&addr).unwrap();
    let beat = Request::Heartbeat {
        process_id: 1,
        token: 77,
        timeout_ms: 300,
    };
    assert_eq!(call(&mut silent, beat), Reply::Done);
    let began = Instant::now();
    let e = survivor.barrier("waits on 1", WAIT).unwrap_err();
    let message = unavailable(&e);
    assert!(
        message.contains("process 1 is dead: no heartbeat for 300ms"),
        "{message}"
    );
    assert!(began.elapsed() < NOTICED_WITHIN);
    // The death watch hears of it once: a second wait that knows of
    // process 1 finds nobody else dead.
    let dead = survivor.await_death(&[], WAIT).unwrap().expect("a death");
    assert_eq!(dead.id, 1);
    assert_eq!(dead.why, "no heartbeat for 300ms");
    let none = survivor.await_death(&[1], Duration::from_millis(200));
    assert_eq!(none.unwrap(), None);
    // A heartbeat with someone else's token is refused.
    let mut stranger = TcpStream::connect(&addr).unwrap();
    let forged = Request::Heartbeat {
        process_id: 0,
        token: 1,
        timeout_ms: 300,
    };
    match call(&mut stranger, forged) {
        Reply::Failed { code, .. } => assert_eq!(code, ErrorCode::FailedPrecondition),
        other => panic!("a forged heartbeat was answered {other:?}"),
    }
    drop(silent);
}

/// A process that leaves (its heartbeats dropped after `Leave`) is not a
/// death: the service goes on serving the others.
#[test]
fn a_process_that_leaves_is_not_taken_for_dead() {
    let service = KvService::start("127.0.0.1:0", 2).unwrap();
    let addr = service.local_addr().to_string();
    let a = KvClient::join(&addr, 0, 2, WAIT).unwrap();
    let b = KvClient::join(&addr, 1, 2, WAIT).unwrap();
    let beats = b
        .start_heartbeats(Duration::from_millis(20), Duration::from_millis(500))
        .unwrap();
    b.set("from b", b"1").unwrap();
    drop(beats);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(a.get("from b", WAIT).unwrap(), b"1");
    assert_eq!(
        a.await_death(&[], Duration::from_millis(200)).unwrap(),
        None
    );
    let e = a.get("never set", Duration::from_millis(200)).unwrap_err();
    assert!(matches!(
        e,
        Error::Distributed {
            code: ErrorCode::DeadlineExceeded,
            ..
        }
    ));
}

/// For every process but 0, the coordination service going away is
/// process 0's death (it served the service); process 0 itself gets an
/// error instead.
#[test]
fn the_service_gone_is_process_zeros_death_to_the_others() {
    let mut service = KvService::start("127.0.0.1:0", 2).unwrap();
    let addr = service.local_addr().to_string();
    let zero = KvClient::join(&addr, 0, 2, WAIT).unwrap();
    let one = KvClient::join(&addr, 1, 2, WAIT).unwrap();
    service.stop();
    let dead = one
        .await_death(&[], WAIT)
        .unwrap()
        .expect("process 0 is dead");
    assert_eq!(dead.id, 0);
    assert!(
        dead.why
            .starts_with("it served the coordination service, which is gone"),
        "{}",
        dead.why
    );
    assert!(zero.await_death(&[], WAIT).is_err());
}
