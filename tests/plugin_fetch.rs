//! The plugin store end to end: `xlafn fetch` (and a program's first run)
//! fetching the real pinned wheel with pip from a loopback package index
//! this test serves, into a fresh cache. Cases: a clean fetch and a
//! second run that asks nothing of the network; a corrupt download; a
//! truncated `.so` repaired from the kept wheel; a fetch killed halfway;
//! two processes fetching at once; the offline switch with its message;
//! a wheel installed with no Python at all; and a program copied to a
//! fresh folder with a fresh `HOME`.
//!
//! The wheel served is the one this machine's own cache keeps
//! (`<cache>/wheels/`), put there by the first use of the plugin. pip is
//! pointed at the loopback index through its own variables (`PIP_*`),
//! the way a user points it at a mirror.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

const XLAFN: &str = env!("CARGO_BIN_EXE_xlafn");

/// What the loopback index serves for the wheel.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Serve {
    Good = 0,
    /// The real wheel with one byte changed.
    Corrupt = 1,
    /// Half the wheel, then nothing for a minute.
    Stall = 2,
}

/// A package index on 127.0.0.1 holding one wheel.
struct Index {
    url: String,
    mode: Arc<AtomicU8>,
    wheel_requests: Arc<AtomicUsize>,
}

impl Index {
    fn start(wheel: Arc<Vec<u8>>, wheel_name: String) -> Index {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/simple/", listener.local_addr().unwrap());
        let mode = Arc::new(AtomicU8::new(Serve::Good as u8));
        let wheel_requests = Arc::new(AtomicUsize::new(0));
        let (m, w) = (mode.clone(), wheel_requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (wheel, name, m, w) = (wheel.clone(), wheel_name.clone(), m.clone(), w.clone());
                std::thread::spawn(move || serve(stream, &wheel, &name, &m, &w));
            }
        });
        Index {
            url,
            mode,
            wheel_requests,
        }
    }

    fn set(&self, serve: Serve) {
        self.mode.store(serve as u8, Ordering::SeqCst);
    }

    fn wheel_requests(&self) -> usize {
        self.wheel_requests.load(Ordering::SeqCst)
    }
}

fn serve(stream: TcpStream, wheel: &[u8], name: &str, mode: &AtomicU8, requests: &AtomicUsize) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    loop {
        let mut header = String::new();
        match reader.read_line(&mut header) {
            Ok(0) | Err(_) => return,
            Ok(_) if header.trim().is_empty() => break,
            Ok(_) => {}
        }
    }
    let path = request.split_whitespace().nth(1).unwrap_or("");
    let mut out = stream;
    let respond = |out: &mut TcpStream, status: &str, kind: &str, body: &[u8], len: usize| {
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len}\r\n\
             Connection: close\r\n\r\n"
        );
        let _ = out.write_all(head.as_bytes());
        let _ = out.write_all(body);
    };
    if path.trim_end_matches('/') == "/simple/xla-cpu-pjrt" {
        let page = format!("<html><body><a href=\"/files/{name}\">{name}</a></body></html>");
        respond(&mut out, "200 OK", "text/html", page.as_bytes(), page.len());
    } else if path == format!("/files/{name}") {
        requests.fetch_add(1, Ordering::SeqCst);
        let kind = "application/octet-stream";
        match mode.load(Ordering::SeqCst) {
            0 => respond(&mut out, "200 OK", kind, wheel, wheel.len()),
            1 => {
                let mut bad = wheel.to_vec();
                let at = bad.len() / 2;
                bad[at] ^= 0x40;
                respond(&mut out, "200 OK", kind, &bad, bad.len());
            }
            _ => {
                respond(
                    &mut out,
                    "200 OK",
                    kind,
                    &wheel[..wheel.len() / 2],
                    wheel.len(),
                );
                std::thread::sleep(Duration::from_secs(60));
            }
        }
    } else {
        respond(&mut out, "404 Not Found", "text/plain", b"not here", 8);
    }
}

/// The real wheel, from this machine's cache (the first use of the plugin
/// fetches and keeps it), and the index serving it.
fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| {
        let plugin = xlafn::runtime::fetch_cpu_plugin().expect("the plugin for this test suite");
        assert!(plugin.is_file());
        let wheels = xlafn::runtime::plugin_cache_dir().unwrap().join("wheels");
        let wheel = std::fs::read_dir(&wheels)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                let n = p.file_name().unwrap().to_string_lossy().into_owned();
                n.starts_with("xla_cpu_pjrt-0.0.1-") && n.contains(std::env::consts::ARCH)
            })
            .expect("the cache keeps the wheel it installed");
        let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
        Index::start(Arc::new(std::fs::read(&wheel).unwrap()), name)
    })
}

/// A fresh home and cache, and a command for `program` that sees only
/// them and the loopback index.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join(".cache/xlafn")
    }

    fn entry(&self) -> PathBuf {
        self.cache().join("xla-cpu-pjrt-0.0.1")
    }

    fn plugin(&self) -> PathBuf {
        self.entry()
            .join("xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so")
    }

    fn command(&self, program: &Path) -> Command {
        let mut c = Command::new(program);
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("PIP_INDEX_URL", &index().url)
            .env("PIP_TRUSTED_HOST", "127.0.0.1")
            .env("PIP_CONFIG_FILE", "/dev/null")
            .env("PIP_NO_CACHE_DIR", "1")
            .env("PIP_RETRIES", "0")
            .env("PIP_TIMEOUT", "5")
            .env("TF_CPP_MIN_LOG_LEVEL", "1")
            .stdin(Stdio::null());
        c
    }

    fn fetch(&self) -> Output {
        self.command(Path::new(XLAFN))
            .arg("fetch")
            .output()
            .unwrap()
    }

    /// Names in the cache folder that a killed or failed install leaves.
    fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(self.cache())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".partial-") || n.contains(".broken-"))
            .collect()
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The index's state is shared, so the cases run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn a_fresh_cache_is_filled_once_and_then_asks_nothing_of_the_network() {
    let _one = serial();
    let index = index();
    index.set(Serve::Good);
    let home = Home::new();
    let before = index.wheel_requests();
    let first = home.fetch();
    assert!(first.status.success(), "{}", text(&first));
    let printed = String::from_utf8_lossy(&first.stdout).trim().to_string();
    assert_eq!(PathBuf::from(printed), home.plugin());
    assert!(String::from_utf8_lossy(&first.stderr).contains("fetching the XLA CPU plugin"));
    assert_eq!(index.wheel_requests(), before + 1);
    assert!(home.entry().join(".xlafn-installed.json").is_file());
    assert!(home.leftovers().is_empty(), "{:?}", home.leftovers());
    let again = home.fetch();
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(
        index.wheel_requests(),
        before + 1,
        "the second run fetched again"
    );
    let verified = home
        .command(Path::new(XLAFN))
        .args(["fetch", "--verify"])
        .output()
        .unwrap();
    assert!(verified.status.success(), "{}", text(&verified));
}

#[test]
fn a_corrupt_download_is_refused_and_leaves_nothing_behind() {
    let _one = serial();
    let index = index();
    index.set(Serve::Corrupt);
    let home = Home::new();
    let out = home.fetch();
    index.set(Serve::Good);
    assert!(!out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("is not the pinned") && said.contains("refusing it"),
        "{said}"
    );
    assert!(!home.entry().exists());
    assert!(home.leftovers().is_empty(), "{:?}", home.leftovers());
    assert!(
        !home
            .cache()
            .join("wheels")
            .read_dir()
            .is_ok_and(|mut d| d.next().is_some())
    );
}

#[test]
fn a_truncated_plugin_is_repaired_from_the_kept_wheel_before_it_is_loaded() {
    let _one = serial();
    let index = index();
    index.set(Serve::Good);
    let home = Home::new();
    assert!(home.fetch().status.success());
    let size = std::fs::metadata(home.plugin()).unwrap().len();
    let so = std::fs::OpenOptions::new()
        .write(true)
        .open(home.plugin())
        .unwrap();
    so.set_len(size / 3).unwrap();
    drop(so);
    let requests = index.wheel_requests();
    // A program's first use of the plugin checks the entry and repairs it
    // (a truncated library would otherwise die with SIGBUS when loaded).
    let run = home
        .command(&quickstart())
        .env("XLAFN_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run));
    assert!(String::from_utf8_lossy(&run.stdout).contains("quickstart: ok"));
    assert_eq!(std::fs::metadata(home.plugin()).unwrap().len(), size);
    assert_eq!(
        index.wheel_requests(),
        requests,
        "the repair used the network"
    );
    assert!(home.leftovers().is_empty(), "{:?}", home.leftovers());
}

#[test]
fn a_fetch_killed_halfway_leaves_no_entry_and_the_next_one_completes() {
    let _one = serial();
    let index = index();
    index.set(Serve::Stall);
    let home = Home::new();
    let requests = index.wheel_requests();
    let mut child: Child = home
        .command(Path::new(XLAFN))
        .arg("fetch")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while index.wheel_requests() == requests || home.leftovers().is_empty() {
        assert!(Instant::now() < deadline, "the fetch never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    index.set(Serve::Good);
    assert!(!home.entry().exists(), "a killed fetch left an entry");
    let out = home.fetch();
    assert!(out.status.success(), "{}", text(&out));
    assert!(home.plugin().is_file());
    assert!(home.leftovers().is_empty(), "{:?}", home.leftovers());
}

#[test]
fn two_processes_fetching_at_once_fetch_once_and_both_succeed() {
    let _one = serial();
    let index = index();
    index.set(Serve::Good);
    let home = Home::new();
    let requests = index.wheel_requests();
    let spawn = || {
        home.command(Path::new(XLAFN))
            .arg("fetch")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(a.status.success(), "{}", text(&a));
    assert!(b.status.success(), "{}", text(&b));
    assert_eq!(a.stdout, b.stdout);
    assert_eq!(
        index.wheel_requests(),
        requests + 1,
        "both processes downloaded"
    );
    assert!(home.leftovers().is_empty(), "{:?}", home.leftovers());
}

#[test]
fn offline_the_first_run_lists_every_way_out_and_a_wheel_installs_without_python() {
    let _one = serial();
    let home = Home::new();
    let requests = index().wheel_requests();
    let out = home
        .command(&quickstart())
        .env("XLAFN_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    for way in [
        "xlafn fetch",
        "--wheel",
        "XLAFN_PJRT_PLUGIN",
        "XLAFN_OFFLINE",
        "beside this program",
    ] {
        assert!(said.contains(way), "{way} missing from: {said}");
    }
    assert_eq!(index().wheel_requests(), requests);
    // No python3 on PATH: the wheel is checked and unpacked in Rust.
    let wheels = xlafn::runtime::plugin_cache_dir().unwrap().join("wheels");
    let out = home
        .command(Path::new(XLAFN))
        .env("PATH", "/nonexistent")
        .args(["fetch", "--wheel"])
        .arg(&wheels)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(home.plugin().is_file());
    let run = home
        .command(&quickstart())
        .env("XLAFN_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run));
}

#[test]
fn a_wheel_that_is_not_the_pinned_one_is_refused() {
    let _one = serial();
    let home = Home::new();
    let fake = home
        .dir
        .path()
        .join("xla_cpu_pjrt-0.0.1-py3-none-manylinux_2_27_x86_64.whl");
    std::fs::write(&fake, b"PK\x05\x06 not a wheel").unwrap();
    let out = home
        .command(Path::new(XLAFN))
        .args(["fetch", "--wheel"])
        .arg(&fake)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not the pinned"));
    assert!(!home.entry().exists());
}

#[test]
fn a_program_copied_to_a_fresh_folder_and_home_fetches_its_plugin_and_runs() {
    let _one = serial();
    index().set(Serve::Good);
    let home = Home::new();
    let bin = home.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let copy = bin.join("quickstart");
    std::fs::copy(quickstart(), &copy).unwrap();
    let run = home.command(&copy).current_dir(&bin).output().unwrap();
    assert!(run.status.success(), "{}", text(&run));
    assert!(String::from_utf8_lossy(&run.stdout).contains("quickstart: ok"));
    assert!(home.plugin().is_file());
}

/// The `quickstart` example, which `cargo test` builds beside the tests.
fn quickstart() -> PathBuf {
    let debug = Path::new(XLAFN).parent().unwrap();
    let exe = debug.join("examples/quickstart");
    assert!(
        exe.is_file(),
        "{} is missing: `cargo test` builds the examples; run it at the root",
        exe.display()
    );
    exe
}
