//! Devices: the device list, `Tensor::device`, `to_device`,
//! the scoped default device, the placement rule of eager ops and
//! functions (one compile per device), the mixed-device error and the
//! configurable CPU device count.

#[path = "common/child.rs"]
mod child;

use std::time::Duration;
use xlafn::prelude::*;
use xlafn::{Device, Variable};

fn four() -> Vec<Device> {
    let devices = xlafn::devices().unwrap();
    assert!(
        devices.len() >= 4,
        "the CPU plugin has 4 devices: {devices:?}"
    );
    devices
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn the_cpu_plugin_has_four_named_devices_by_default() {
    let d = four();
    let names: Vec<String> = d.iter().map(|d| d.to_string()).collect();
    assert_eq!(names[..4], ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]);
    assert_eq!(xlafn::default_device().unwrap(), d[0]);
    assert_ne!(d[0], d[1]);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn to_device_moves_the_value_and_commits_it() {
    let d = four();
    let x = Tensor::from_vec(vec![1f32, 2., 3.], &[3]).unwrap();
    assert_eq!(x.device().unwrap(), d[0]);
    assert!(!x.is_committed());
    let y = x.to_device(d[2]).unwrap();
    assert_eq!(y.device().unwrap(), d[2]);
    assert!(y.is_committed());
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1., 2., 3.]);
    // The plugin agrees about where the copy lives.
    let on_device = y.to_device(d[2]).unwrap();
    assert_eq!(on_device.device().unwrap(), d[2]);
    let back = y.to_device(d[0]).unwrap();
    assert_eq!(back.to_vec::<f32>().unwrap(), vec![1., 2., 3.]);
    assert!(back.is_committed());
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn eager_ops_run_where_their_committed_inputs_are() {
    let d = four();
    let x = Tensor::from_vec(vec![1f32, -2., 3.], &[3])
        .unwrap()
        .to_device(d[1])
        .unwrap();
    // An uncommitted operand (on cpu:0) follows the committed one.
    let y = Tensor::from_vec(vec![10f32, 20., 30.], &[3]).unwrap();
    let z = (&x + &y).abs().unwrap();
    assert_eq!(z.device().unwrap(), d[1]);
    assert!(z.is_committed());
    assert_eq!(z.to_vec::<f32>().unwrap(), vec![11., 18., 33.]);
    // Scalars made by the op methods follow too.
    let w = x.mul_scalar(2.0).unwrap();
    assert_eq!(
        (w.device().unwrap(), w.to_vec::<f32>().unwrap()),
        (d[1], vec![2., -4., 6.])
    );
    // Uncommitted values stay uncommitted and on the first device.
    let u = (&y + &y).to_vec::<f32>().unwrap();
    assert_eq!(u, vec![20., 40., 60.]);
    assert_eq!((&y + &y).device().unwrap(), d[0]);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn inputs_committed_to_two_devices_are_an_error_naming_both() {
    let d = four();
    let a = Tensor::from_vec(vec![1f32, 2.], &[2])
        .unwrap()
        .to_device(d[1])
        .unwrap();
    let b = Tensor::from_vec(vec![3f32, 4.], &[2])
        .unwrap()
        .to_device(d[3])
        .unwrap();
    let e = a.add(&b).unwrap_err().to_string();
    assert!(
        e.contains("cpu:1") && e.contains("cpu:3") && e.contains("to_device"),
        "{e}"
    );
    let f = function(|a: Tensor, b: Tensor| a.mul(&b));
    let e = f.call((&a, &b)).unwrap_err().to_string();
    assert!(e.contains("cpu:1") && e.contains("cpu:3"), "{e}");
    // Moving one fixes it.
    let b1 = b.to_device(d[1]).unwrap();
    assert_eq!(a.add(&b1).unwrap().to_vec::<f32>().unwrap(), vec![4., 6.]);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn a_device_scope_places_new_values_and_nests() {
    let d = four();
    let (inner, outer) = xlafn::with_device(d[2], || {
        let a = Tensor::from_vec(vec![1f32], &[1]).unwrap();
        let inner = xlafn::with_device(d[3], || {
            assert_eq!(xlafn::default_device().unwrap(), d[3]);
            Tensor::scalar(5f32)
        });
        assert_eq!(xlafn::default_device().unwrap(), d[2]);
        (inner, a)
    });
    assert_eq!(outer.device().unwrap(), d[2]);
    assert!(outer.is_committed());
    assert_eq!(inner.device().unwrap(), d[3]);
    assert_eq!(xlafn::default_device().unwrap(), d[0]);
    // A panic inside a scope restores the device.
    let caught = std::panic::catch_unwind(|| xlafn::with_device(d[1], || panic!("inside")));
    assert!(caught.is_err());
    assert_eq!(xlafn::default_device().unwrap(), d[0]);
    // Ops with only uncommitted inputs run on the scope's device.
    let x = Tensor::from_vec(vec![1f32, 2.], &[2]).unwrap();
    let y = xlafn::with_device(d[2], || x.exp().unwrap());
    assert_eq!(y.device().unwrap(), d[2]);
    let want: Vec<f32> = vec![1f32.exp(), 2f32.exp()];
    assert_eq!(y.to_vec::<f32>().unwrap(), want);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn a_function_compiles_once_per_device_and_runs_on_its_inputs_device() {
    let d = four();
    let f = function(|x: Tensor| x.square()?.reduce_sum(&[], false));
    let x = Tensor::from_vec(vec![1f32, 2., 3.], &[3]).unwrap();
    let on = |i: usize| x.to_device(d[i]).unwrap();
    let r1 = f.call((&on(1),)).unwrap();
    assert_eq!(r1.device().unwrap(), d[1]);
    assert_eq!(r1.to_vec::<f32>().unwrap(), vec![14.]);
    let r2 = f.call((&on(2),)).unwrap();
    assert_eq!(r2.device().unwrap(), d[2]);
    let r0 = f.call((&x,)).unwrap();
    assert_eq!(r0.device().unwrap(), d[0]);
    assert!(!r0.is_committed());
    f.call((&on(1),)).unwrap();
    // One trace, one compile per device.
    assert_eq!(f.tracing_count(), 1);
    assert_eq!(f.compile_count(), 3);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn a_variable_follows_the_call_to_its_committed_arguments() {
    let d = four();
    let w = Variable::new(Tensor::from_vec(vec![1f32, 1.], &[2]).unwrap());
    let step = {
        let w = w.clone();
        function(move |x: Tensor| {
            w.assign_add(&x)?;
            w.read().reduce_sum(&[], false)
        })
    };
    let x = Tensor::from_vec(vec![2f32, 3.], &[2])
        .unwrap()
        .to_device(d[3])
        .unwrap();
    let s = step.call((&x,)).unwrap();
    assert_eq!(s.device().unwrap(), d[3]);
    assert_eq!(s.to_vec::<f32>().unwrap(), vec![7.]);
    assert_eq!(w.read().device().unwrap(), d[3]);
    assert_eq!(w.read().to_vec::<f32>().unwrap(), vec![3., 4.]);
    step.call((&x,)).unwrap();
    assert_eq!(w.read().to_vec::<f32>().unwrap(), vec![5., 7.]);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn the_cpu_device_count_is_configurable() {
    let run = child::assert_child_passes(
        "child_with_two_devices",
        &[("XLAFN_CPU_DEVICES", "2")],
        Duration::from_secs(60),
    );
    assert!(run.stdout.contains("1 passed"), "{}", run.stdout);
    let bad = child::run_child(
        "child_with_bad_count",
        &[("XLAFN_CPU_DEVICES", "0")],
        Duration::from_secs(60),
    );
    assert!(bad.success, "{}\n{}", bad.stdout, bad.stderr);
    assert!(bad.stdout.contains("1 passed"), "{}", bad.stdout);
    // Once the client exists, another count is refused.
    four();
    let e = xlafn::set_cpu_device_count(3).unwrap_err().to_string();
    assert!(e.contains("already exists"), "{e}");
    assert!(xlafn::set_cpu_device_count(0).is_err());
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn child_with_two_devices() {
    if !child::is_child("child_with_two_devices") {
        return;
    }
    assert_eq!(xlafn::devices().unwrap().len(), 2);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn child_with_bad_count() {
    if !child::is_child("child_with_bad_count") {
        return;
    }
    let e = xlafn::devices().unwrap_err().to_string();
    assert!(e.contains("XLAFN_CPU_DEVICES"), "{e}");
}

#[test]
fn cuda_without_a_plugin_is_an_error_not_a_cpu_fallback() {
    // An empty cache, so that a CUDA plugin `xlafn fetch --cuda` left in
    // the user's cache is not found either, and offline, so that the
    // store says how to get one instead of fetching it.
    let cache = tempfile::tempdir().unwrap();
    let run = child::run_child(
        "child_cuda_without_plugin",
        &[
            ("XLAFN_DEVICE", "cuda"),
            ("XLAFN_CUDA_PLUGIN", ""),
            ("XLAFN_CUDA_PACKAGE", ""),
            ("XLAFN_OFFLINE", "1"),
            ("XDG_CACHE_HOME", cache.path().to_str().unwrap()),
        ],
        Duration::from_secs(60),
    );
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("1 passed"), "{}", run.stdout);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn child_cuda_without_plugin() {
    if !child::is_child("child_cuda_without_plugin") {
        return;
    }
    let e = Tensor::from_vec(vec![1f32], &[1]).unwrap_err().to_string();
    for way in [
        "XLAFN_CUDA_PLUGIN",
        "does not fall back",
        "xlafn fetch --cuda jax-cuda13-pjrt",
        "--wheel",
        "XLAFN_DEVICE=cpu",
    ] {
        assert!(e.contains(way), "{way} missing from {e}");
    }
    let e = xlafn::devices().unwrap_err().to_string();
    assert!(e.contains("XLAFN_DEVICE=cuda"), "{e}");
}

/// A broken CUDA setup (`XLAFN_DEVICE=cuda` with `XLAFN_CUDA_PLUGIN`
/// naming a missing file, or a file that is not a plugin): the first
/// fallible call returns the typed error, and the infallible
/// constructors panic at the caller's line with a message naming the
/// variable that named the file (not `XLAFN_PJRT_PLUGIN`) and the
/// setting that runs on the CPU instead.
#[test]
fn a_broken_cuda_setup_names_the_variable_to_fix() {
    let dir = std::env::temp_dir().join(format!("xlafn-broken-cuda-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.so");
    let not_a_plugin = dir.join("not_a_plugin.so");
    std::fs::write(&not_a_plugin, "this is text, not a shared library\n").unwrap();
    for (plugin, why) in [(&missing, "no such file"), (&not_a_plugin, "cannot load")] {
        let run = child::run_child(
            "child_with_a_broken_cuda_plugin",
            &[
                ("XLAFN_DEVICE", "cuda"),
                ("XLAFN_CUDA_PLUGIN", plugin.to_str().unwrap()),
                ("XLAFN_EXPECTED_WHY", why),
            ],
            Duration::from_secs(60),
        );
        assert!(
            run.success,
            "{}: {}\n{}",
            plugin.display(),
            run.stdout,
            run.stderr
        );
        assert!(run.stdout.contains("1 passed"), "{}", run.stdout);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn child_with_a_broken_cuda_plugin() {
    if !child::is_child("child_with_a_broken_cuda_plugin") {
        return;
    }
    let plugin = std::env::var("XLAFN_CUDA_PLUGIN").unwrap();
    let why = std::env::var("XLAFN_EXPECTED_WHY").unwrap();
    let says_what_to_fix = |m: &str| {
        m.contains(&plugin)
            && m.contains(&why)
            && m.contains("XLAFN_CUDA_PLUGIN names this file")
            && m.contains("XLAFN_DEVICE=cpu")
            && !m.contains("XLAFN_PJRT_PLUGIN")
    };
    // The first fallible call: the typed error.
    let e = Tensor::from_vec(vec![1f32], &[1]).unwrap_err();
    assert!(matches!(&e, Error::Plugin(m) if says_what_to_fix(m)), "{e}");
    assert!(says_what_to_fix(&xlafn::devices().unwrap_err().to_string()));
    // The infallible constructors: a panic saying the same, located at
    // the line that called them.
    let location = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let seen = location.clone();
    std::panic::set_hook(Box::new(move |info| {
        *seen.lock().unwrap() = info.location().map(|l| l.to_string()).unwrap_or_default();
    }));
    let line = line!() + 1;
    let panic = std::panic::catch_unwind(|| Tensor::ones(&[2], DType::F32)).unwrap_err();
    let _ = std::panic::take_hook();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(says_what_to_fix(&message), "{message}");
    let location = location.lock().unwrap().clone();
    assert!(
        location.starts_with(&format!("tests/devices.rs:{line}:")),
        "the panic names the caller's line {line}, not xlafn's: {location}"
    );
    let panic = std::panic::catch_unwind(|| Tensor::scalar(1f32)).unwrap_err();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(says_what_to_fix(&message), "{message}");
}
