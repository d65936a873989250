//! Multi-process runs: processes of this test binary join
//! over loopback, exchange values and pass barriers; the coordination
//! service survives hostile peers; mistakes give the documented errors;
//! and the CPU plugin is refused for multi-process clients.
//!
//! Whatever initializes the process-wide distributed state runs in a child
//! process (`common/child.rs`), so tests never share it. Every wait has a
//! timeout, and a child that outlives its limit is killed.

#[path = "common/child.rs"]
mod child;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use xlafn::distributed::frame::{self, MAGIC, Reply, Request};
use xlafn::distributed::{self, DistributedOptions, KvClient, KvService};
use xlafn::runtime::{CPU_MULTI_PROCESS_MESSAGE, Client, KeyValueStore, default_plugin_path};
use xlafn::{Error, ErrorCode};

const LIMIT: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(30);

/// The CPU plugin's refusal, as the module docs and the book's multi-process chapter quote it.
const CPU_REFUSAL: &str = "UnimplementedError: multi-process execution needs a plugin with \
    cross-process collectives (the CUDA plugin); the CPU plugin has only in-process collectives \
    and ignores node_id/num_nodes and the key-value store";

/// A loopback address with a port that was free a moment ago.
fn free_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", listener.local_addr().unwrap().port())
}

fn quick() -> DistributedOptions {
    DistributedOptions {
        initialization_timeout: WAIT,
        shutdown_timeout: WAIT,
        ..Default::default()
    }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

fn code_of(e: &Error) -> ErrorCode {
    match e {
        Error::Distributed { code, .. } => *code,
        other => panic!("expected a distributed error, got {other:?}"),
    }
}

// ------------------------------------------------------- whole runs

/// One process of a run: started by `run_processes` with its id, the
/// process count and the coordinator in the environment.
#[test]
fn one_process_of_a_run() {
    if !child::is_child("one_process_of_a_run") {
        return;
    }
    let coordinator = env("XLAFN_TEST_COORDINATOR");
    let n: usize = env("XLAFN_TEST_PROCESSES").parse().unwrap();
    let id: usize = env("XLAFN_TEST_PROCESS_ID").parse().unwrap();
    let delay: u64 = env("XLAFN_TEST_START_DELAY_MS").parse().unwrap();
    assert_eq!(
        (distributed::process_index(), distributed::process_count()),
        (0, 1)
    );
    std::thread::sleep(Duration::from_millis(delay));
    distributed::initialize_with(&coordinator, n, id, &quick()).unwrap();
    assert!(distributed::is_initialized());
    assert_eq!(distributed::process_index(), id);
    assert_eq!(distributed::process_count(), n);
    let store = distributed::store().unwrap();
    store
        .set(
            &format!("greeting/{id}"),
            format!("hello from {id}").as_bytes(),
        )
        .unwrap();
    if id == n - 1 {
        // Set late, so that the others' gets wait for it.
        std::thread::sleep(Duration::from_millis(300));
        store.set("late", b"worth the wait").unwrap();
    }
    for other in 0..n {
        let value = store.get(&format!("greeting/{other}"), WAIT).unwrap();
        assert_eq!(value, format!("hello from {other}").as_bytes());
    }
    assert_eq!(store.get("late", WAIT).unwrap(), b"worth the wait");
    store.barrier("exchanged", WAIT).unwrap();
    // Everything set before the barrier is there without waiting.
    assert!(
        store
            .try_get(&format!("greeting/{}", (id + 1) % n))
            .unwrap()
            .is_some()
    );
    assert_eq!(store.try_get("never set").unwrap(), None);
    println!(
        "process {} of {} passed",
        distributed::process_index(),
        distributed::process_count()
    );
    distributed::shutdown().unwrap();
    assert!(!distributed::is_initialized());
    assert_eq!(
        (distributed::process_index(), distributed::process_count()),
        (0, 1)
    );
}

/// Runs `n` processes of one run; process 0 (which serves) starts last,
/// so the others must retry until its service is up.
fn run_processes(n: usize) {
    let coordinator = free_addr();
    let env = |id: usize| {
        vec![
            ("XLAFN_TEST_COORDINATOR".to_string(), coordinator.clone()),
            ("XLAFN_TEST_PROCESSES".to_string(), n.to_string()),
            ("XLAFN_TEST_PROCESS_ID".to_string(), id.to_string()),
            // Process 0, the coordinator, comes up late: the others retry.
            (
                "XLAFN_TEST_START_DELAY_MS".to_string(),
                if id == 0 { "300" } else { "0" }.to_string(),
            ),
        ]
    };
    child::assert_processes_pass("one_process_of_a_run", n, env, LIMIT);
}

#[test]
fn two_processes_join_exchange_values_and_pass_a_barrier() {
    run_processes(2);
}

#[test]
fn three_processes_join_exchange_values_and_pass_a_barrier() {
    run_processes(3);
}

// ------------------------------------------------------- hostile peers

/// Sends `bytes` on a raw connection (closing our side after them if
/// `close`), and returns the reply the service sent before it closed the
/// connection, checking that it did close it.
fn raw_exchange(addr: &str, bytes: &[u8], close: bool) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(bytes).unwrap();
    if close {
        stream.shutdown(Shutdown::Write).unwrap();
    }
    let body = frame::read_frame(&mut stream).unwrap().expect("no reply");
    let reply = Reply::decode(&body).unwrap();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "the service sent more: {rest:?}");
    reply
}

fn expect_failure(reply: Reply, code: ErrorCode, text: &str) {
    match reply {
        Reply::Failed { code: c, message } => {
            assert_eq!(c, code, "{message}");
            assert!(message.contains(text), "{message:?} lacks {text:?}");
        }
        other => panic!("expected a failure containing {text:?}, got {other:?}"),
    }
}

fn header(len: u32) -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    h.extend_from_slice(&len.to_be_bytes());
    h
}

/// A one-process service and its joined client.
fn service_and_client() -> (KvService, KvClient) {
    let service = KvService::start("127.0.0.1:0", 1).unwrap();
    let addr = service.local_addr().to_string();
    let client = KvClient::join(&addr, 0, 1, WAIT).unwrap();
    (service, client)
}

#[test]
fn hostile_frames_get_an_error_and_a_closed_connection_and_the_service_goes_on() {
    let (service, client) = service_and_client();
    service.set_frame_timeout(Duration::from_millis(500));
    let addr = service.local_addr().to_string();
    client.set("before", b"1").unwrap();

    let garbage = raw_exchange(&addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false);
    expect_failure(
        garbage,
        ErrorCode::InvalidArgument,
        "not a coordination frame",
    );
    let oversized = raw_exchange(&addr, &header(u32::MAX), false);
    expect_failure(
        oversized,
        ErrorCode::InvalidArgument,
        "4294967295 bytes exceeds the limit",
    );
    let mut truncated = header(100);
    truncated.extend_from_slice(&[0x0a; 10]);
    let cut = raw_exchange(&addr, &truncated, true);
    expect_failure(
        cut,
        ErrorCode::InvalidArgument,
        "the connection ended after 10",
    );
    // A body that is no protocol buffer (field 8, length 0, then tag 0).
    let mut bad_body = header(3);
    bad_body.extend_from_slice(&[0x42, 0, 0]);
    let unknown = raw_exchange(&addr, &bad_body, false);
    expect_failure(unknown, ErrorCode::InvalidArgument, "not a request");
    // A protocol buffer that names no request.
    let empty = raw_exchange(&addr, &header(0), false);
    expect_failure(
        empty,
        ErrorCode::InvalidArgument,
        "the request names no kind",
    );

    // A frame that stalls half-way is cut off at the frame timeout, and
    // the service answers others meanwhile.
    let start = Instant::now();
    let mut stalled = TcpStream::connect(&addr).unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stalled.write_all(&truncated).unwrap();
    client.set("during", b"2").unwrap();
    assert_eq!(client.get("during", WAIT).unwrap(), b"2");
    let body = frame::read_frame(&mut stalled).unwrap().unwrap();
    expect_failure(
        Reply::decode(&body).unwrap(),
        ErrorCode::DeadlineExceeded,
        "timed out",
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );

    assert_eq!(client.get("before", WAIT).unwrap(), b"1");
    client.set("after", b"3").unwrap();
    assert_eq!(client.try_get("after").unwrap().unwrap(), b"3");
}

/// A fake coordination service on loopback that answers each of the next
/// `n` requests with the reply `reply_to` gives for it.
fn fake_service(
    n: usize,
    reply_to: impl Fn(&Request) -> Reply + Send + 'static,
) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        for _ in 0..n {
            let (mut stream, _) = listener.accept().unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let body = frame::read_frame(&mut stream).unwrap().unwrap();
            let request = Request::decode(&body).unwrap();
            frame::write_frame(&mut stream, &reply_to(&request).encode()).unwrap();
        }
    });
    (addr, handle)
}

/// A reply of the wrong kind is a DataLoss error naming the service and
/// the reply, for joining (which took any reply as a registration) as for
/// every other call.
#[test]
fn replies_of_the_wrong_kind_are_errors() {
    let wrong = |what: Result<(), Error>, reply: &str, addr: &str| {
        let e = what.unwrap_err();
        assert!(
            matches!(
                e,
                Error::Distributed {
                    code: ErrorCode::DataLoss,
                    ..
                }
            ),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.contains(&format!(
                "the coordination service at {addr} sent an unexpected reply: {reply}"
            )),
            "{text}"
        );
    };
    for (reply, shown) in [
        (Reply::Value(b"hi".to_vec()), "Value([104, 105])"),
        (Reply::NotFound, "NotFound"),
    ] {
        let (addr, fake) = fake_service(1, move |_| reply.clone());
        let joined = KvClient::join(&addr, 0, 1, WAIT).map(|_| ());
        wrong(joined, shown, &addr);
        fake.join().unwrap();
    }

    // Joined for real (the fake says Done), then every call is answered
    // with a reply of another kind.
    let (addr, fake) = fake_service(5, |request| match request {
        Request::Register { .. } => Reply::Done,
        Request::Set { .. } | Request::Barrier { .. } => Reply::NotFound,
        _ => Reply::Done,
    });
    let client = KvClient::join(&addr, 0, 1, WAIT).unwrap();
    wrong(client.set("k", b"v"), "NotFound", &addr);
    wrong(client.barrier("b", WAIT), "NotFound", &addr);
    wrong(client.get("k", WAIT).map(|_| ()), "Done", &addr);
    wrong(client.try_get("k").map(|_| ()), "Done", &addr);
    fake.join().unwrap();
}

#[test]
fn random_bytes_never_stop_the_service() {
    let (service, client) = service_and_client();
    service.set_frame_timeout(Duration::from_millis(300));
    let addr = service.local_addr().to_string();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..40 {
        let len = (next() % 300) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if round % 2 == 0 && bytes.len() >= 8 {
            // Half the rounds get past the magic to the length and body.
            bytes[..4].copy_from_slice(&MAGIC);
        }
        let mut stream = TcpStream::connect(&addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = stream.write_all(&bytes);
        let _ = stream.shutdown(Shutdown::Write);
        // Whatever comes back (a reply, an error, a reset) ends in time.
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink);
        client.set(&format!("round/{round}"), &bytes).unwrap();
    }
    assert_eq!(
        client.try_get("round/39").unwrap().map(|v| v.len() < 300),
        Some(true)
    );
}

#[test]
fn connections_beyond_the_limit_are_refused_and_later_ones_served() {
    let (service, client) = service_and_client();
    let addr = service.local_addr().to_string();
    let idle: Vec<TcpStream> = (0..distributed::MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    let start = Instant::now();
    while service.open_connections() < distributed::MAX_CONNECTIONS {
        assert!(
            start.elapsed() < WAIT,
            "{} open",
            service.open_connections()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let refused = raw_exchange(&addr, &[], false);
    expect_failure(refused, ErrorCode::Unavailable, "too many open connections");
    drop(idle);
    while service.open_connections() > 0 {
        assert!(
            start.elapsed() < WAIT,
            "{} still open",
            service.open_connections()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    client.set("served", b"yes").unwrap();
}

#[test]
fn a_register_request_out_of_range_or_for_another_count_is_refused_by_the_service() {
    let service = KvService::start("127.0.0.1:0", 2).unwrap();
    let addr = service.local_addr().to_string();
    let send = |request: Request| {
        let mut bytes = Vec::new();
        frame::write_frame(&mut bytes, &request.encode()).unwrap();
        let mut stream = TcpStream::connect(&addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(&bytes).unwrap();
        Reply::decode(&frame::read_frame(&mut stream).unwrap().unwrap()).unwrap()
    };
    let register = |process_id, num_processes| Request::Register {
        process_id,
        num_processes,
        token: 7,
    };
    let out_of_range = send(register(5, 2));
    expect_failure(
        out_of_range,
        ErrorCode::InvalidArgument,
        "process_id 5 is out of range for 2 processes",
    );
    let other_count = send(register(0, 3));
    expect_failure(
        other_count,
        ErrorCode::InvalidArgument,
        "num_processes=3, but the coordinator serves 2",
    );
    let not_joined = send(Request::Barrier {
        name: "b".into(),
        process_id: 1,
        timeout_ms: 10,
    });
    expect_failure(not_joined, ErrorCode::FailedPrecondition, "without joining");
    // The same process repeating its registration is not a duplicate.
    assert_eq!(send(register(1, 2)), Reply::Done);
    assert_eq!(send(register(1, 2)), Reply::Done);
}

// ------------------------------------------------------- documented errors

#[test]
fn a_duplicate_process_id_is_already_exists() {
    let service = KvService::start("127.0.0.1:0", 2).unwrap();
    let addr = service.local_addr().to_string();
    let _first = KvClient::join(&addr, 1, 2, WAIT).unwrap();
    let e = KvClient::join(&addr, 1, 2, WAIT).unwrap_err();
    assert_eq!(code_of(&e), ErrorCode::AlreadyExists);
    assert_eq!(
        e.to_string(),
        "AlreadyExistsError: process_id 1 has already joined: two processes were started \
         with the same process_id"
    );
}

#[test]
fn initialize_with_a_duplicate_id_fails_and_leaves_nothing_initialized() {
    child::isolated(
        "initialize_with_a_duplicate_id_fails_and_leaves_nothing_initialized",
        LIMIT,
        || {
            let service = KvService::start("127.0.0.1:0", 2).unwrap();
            let addr = service.local_addr().to_string();
            let _first = KvClient::join(&addr, 1, 2, WAIT).unwrap();
            let e = distributed::initialize_with(&addr, 2, 1, &quick()).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("AlreadyExistsError: process_id 1 has already joined"),
                "{e}"
            );
            assert!(!distributed::is_initialized());
            assert_eq!(distributed::process_count(), 1);
        },
    );
}

#[test]
fn an_out_of_range_process_id_is_invalid_argument() {
    let e = distributed::initialize("127.0.0.1:1", 2, 2).unwrap_err();
    assert_eq!(
        e.to_string(),
        "InvalidArgumentError: process_id 2 is out of range for 2 processes"
    );
    let e = KvClient::join("127.0.0.1:1", 0, 0, WAIT).unwrap_err();
    assert_eq!(code_of(&e), ErrorCode::InvalidArgument);
    assert!(!distributed::is_initialized());
}

#[test]
fn getting_a_key_nobody_sets_times_out_naming_the_key() {
    let (_service, client) = service_and_client();
    let start = Instant::now();
    let e = client
        .get("never/set", Duration::from_millis(200))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "DeadlineExceededError: key \"never/set\" was not set within 200ms"
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_barrier_nobody_else_reaches_times_out_naming_the_missing_processes() {
    let service = KvService::start("127.0.0.1:0", 3).unwrap();
    let addr = service.local_addr().to_string();
    let zero = KvClient::join(&addr, 0, 3, WAIT).unwrap();
    let _two = KvClient::join(&addr, 2, 3, WAIT).unwrap();
    let e = zero
        .barrier("lonely", Duration::from_millis(200))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "DeadlineExceededError: barrier \"lonely\" timed out after 200ms: 1 of 3 processes \
         arrived (missing: [1, 2])"
    );
}

#[test]
fn joining_a_coordinator_that_never_comes_up_times_out() {
    let addr = free_addr();
    let start = Instant::now();
    let e = KvClient::join(&addr, 1, 2, Duration::from_millis(300)).unwrap_err();
    assert_eq!(code_of(&e), ErrorCode::DeadlineExceeded);
    assert!(
        e.to_string().contains(&format!(
            "could not join the coordination service at {addr}"
        )),
        "{e}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    let e = KvClient::join("no port here", 1, 2, WAIT).unwrap_err();
    assert!(e.to_string().contains("is not host:port"), "{e}");
}

#[test]
fn initialize_waits_for_every_process_and_fails_cleanly_when_one_never_comes() {
    child::isolated(
        "initialize_waits_for_every_process_and_fails_cleanly_when_one_never_comes",
        LIMIT,
        || {
            let addr = free_addr();
            let short = DistributedOptions {
                initialization_timeout: Duration::from_millis(500),
                shutdown_timeout: WAIT,
                ..Default::default()
            };
            let e = distributed::initialize_with(&addr, 2, 0, &short).unwrap_err();
            // The barrier gets what the join left of the 500 ms.
            let e = e.to_string();
            assert!(
                e.starts_with(
                    "DeadlineExceededError: distributed::initialize: waiting for all processes \
                     to join: barrier \"xlafn/initialize\" timed out after "
                ) && e.ends_with(": 1 of 2 processes arrived (missing: [1])"),
                "{e}"
            );
            assert!(!distributed::is_initialized());
            // The failed attempt stopped its service: the address is free.
            distributed::initialize_with(&addr, 1, 0, &quick()).unwrap();
            distributed::shutdown().unwrap();
        },
    );
}

#[test]
fn initializing_twice_is_an_error_until_shutdown() {
    child::isolated(
        "initializing_twice_is_an_error_until_shutdown",
        LIMIT,
        || {
            distributed::shutdown().unwrap(); // without initialize: nothing to do
            let e = distributed::store().unwrap_err();
            assert!(e.to_string().contains("has not been called"), "{e}");
            let addr = free_addr();
            distributed::initialize(&addr, 1, 0).unwrap();
            assert_eq!(
                (distributed::process_index(), distributed::process_count()),
                (0, 1)
            );
            let e = distributed::initialize(&addr, 1, 0).unwrap_err();
            assert!(
                e.to_string().starts_with(
                    "FailedPreconditionError: distributed::initialize was already called \
                 (this is process 0 of 1"
                ),
                "{e}"
            );
            assert!(distributed::is_initialized());
            distributed::shutdown().unwrap();
            assert!(!distributed::is_initialized());
            distributed::initialize(&free_addr(), 1, 0).unwrap();
            distributed::shutdown().unwrap();
        },
    );
}

// ------------------------------------------------------- PJRT clients

#[derive(Default)]
struct NoStore;

impl KeyValueStore for NoStore {
    fn get(&self, key: &str, _timeout: Duration) -> xlafn::Result<Vec<u8>> {
        panic!("the CPU refusal must come before any key-value call ({key})")
    }
    fn try_get(&self, key: &str) -> xlafn::Result<Option<Vec<u8>>> {
        panic!("the CPU refusal must come before any key-value call ({key})")
    }
    fn put(&self, key: &str, _value: &[u8]) -> xlafn::Result<()> {
        panic!("the CPU refusal must come before any key-value call ({key})")
    }
}

#[test]
fn the_cpu_plugin_is_refused_for_multi_process_clients() {
    assert_eq!(
        format!("UnimplementedError: {CPU_MULTI_PROCESS_MESSAGE}"),
        CPU_REFUSAL
    );
    let cpu = default_plugin_path().unwrap();
    let e = distributed::client(&cpu, &[]).unwrap_err();
    assert_eq!(e.to_string(), CPU_REFUSAL);
    assert_eq!(code_of(&e), ErrorCode::Unimplemented);
    let e = Client::distributed(&cpu, &[], 0, 2, Arc::new(NoStore)).unwrap_err();
    assert_eq!(e.to_string(), CPU_REFUSAL);
    // The process is fine: single-process clients still work.
    assert_eq!(Client::cpu().unwrap().platform_name(), "cpu");
}

#[test]
fn an_initialized_process_is_refused_a_cpu_client_too() {
    child::isolated(
        "an_initialized_process_is_refused_a_cpu_client_too",
        LIMIT,
        || {
            distributed::initialize_with(&free_addr(), 1, 0, &quick()).unwrap();
            let e = distributed::client(&default_plugin_path().unwrap(), &[]).unwrap_err();
            assert_eq!(e.to_string(), CPU_REFUSAL);
            assert_eq!(Client::cpu().unwrap().platform_name(), "cpu");
            distributed::shutdown().unwrap();
        },
    );
}

#[test]
fn a_cpu_plugin_under_another_name_is_refused_after_it_reports_its_platform() {
    child::isolated(
        "a_cpu_plugin_under_another_name_is_refused_after_it_reports_its_platform",
        LIMIT,
        || {
            let dir = scratch_dir("renamed");
            let renamed = dir.join("libpjrt_renamed.so");
            let _ = std::fs::remove_file(&renamed);
            std::os::unix::fs::symlink(default_plugin_path().unwrap(), &renamed).unwrap();
            let e = Client::distributed(&renamed, &[], 0, 2, Arc::new(NoStore)).unwrap_err();
            assert_eq!(e.to_string(), CPU_REFUSAL);
            let _ = std::fs::remove_dir_all(&dir);
        },
    );
}

/// A per-process folder under cargo's scratch folder for tests (kept out
/// of the system's temporary directory, and removed by the caller).
fn scratch_dir(what: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("distributed-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Builds `tests/data/fake_multi_process_plugin.c` against the pinned
/// plugin's header; `None` where that header is not beside the plugin.
fn fake_multi_process_plugin() -> Option<PathBuf> {
    let include = default_plugin_path().ok()?.parent()?.join("include");
    if !include.join("pjrt_c_api.h").is_file() {
        eprintln!("skipped: no pjrt_c_api.h in {}", include.display());
        return None;
    }
    let dir = scratch_dir("fake-plugin");
    let library = dir.join("fake_multi_process_pjrt.so");
    let source =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fake_multi_process_plugin.c");
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-std=c11", "-I"])
        .arg(&include)
        .arg("-o")
        .arg(&library)
        .arg(&source)
        .status()
        .expect("this test builds a fake plugin with a C compiler (cc)");
    assert!(status.success(), "cc failed on {}", source.display());
    Some(library)
}

#[test]
fn a_multi_process_plugin_gets_node_ids_and_a_working_key_value_store() {
    child::isolated(
        "a_multi_process_plugin_gets_node_ids_and_a_working_key_value_store",
        LIMIT,
        || {
            let Some(plugin) = fake_multi_process_plugin() else {
                return;
            };
            let e = distributed::client(&plugin, &[]).unwrap_err();
            assert!(e.to_string().contains("has not been called"), "{e}");
            distributed::initialize_with(&free_addr(), 1, 0, &quick()).unwrap();
            let e = distributed::client(&plugin, &[]).unwrap_err().to_string();
            // The fake fails on purpose, reporting what it saw.
            assert!(e.starts_with("XLA Unimplemented error in PJRT_Client_Create: fake plugin saw node_id=0 num_nodes=1 put=ok get=from the plugin "), "{e}");
            assert!(
                e.contains(" try_get_absent=error5:"),
                "NOT_FOUND expected: {e}"
            );
            assert!(e.contains(" get_absent=error4:DeadlineExceededError: key \"xlafn/pjrt/fake_multi_process_pjrt.so/absent\" was not set within 100ms"), "{e}");
            // The plugin's keys live under its own prefix in the run's store.
            let store = distributed::store().unwrap();
            let put = store
                .try_get("xlafn/pjrt/fake_multi_process_pjrt.so/probe")
                .unwrap();
            assert_eq!(put.as_deref(), Some(&b"from the plugin"[..]));
            assert_eq!(store.try_get("probe").unwrap(), None);
            distributed::shutdown().unwrap();
            let _ = std::fs::remove_dir_all(plugin.parent().unwrap());
        },
    );
}

#[test]
fn node_ids_are_checked_before_the_plugin_is_loaded() {
    let plugin = Path::new("/nonexistent/fake_multi_process_pjrt.so");
    let e = Client::distributed(plugin, &[], 2, 2, Arc::new(NoStore)).unwrap_err();
    assert!(
        e.to_string()
            .contains("node_id 2 is out of range for 2 processes"),
        "{e}"
    );
    let node_id = [("node_id".to_string(), xlafn::runtime::OptionValue::Int(0))];
    let e = Client::distributed(plugin, &node_id, 0, 2, Arc::new(NoStore)).unwrap_err();
    assert!(e.to_string().contains("pass node_id as an argument"), "{e}");
}
