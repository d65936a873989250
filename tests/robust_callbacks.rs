//! Host callbacks' scope (issue 13, group 4): a program reaches only the
//! callbacks registered for it. Exports declare their callbacks and the
//! loader binds the loading process's own (print, or a closure supplied
//! by name); crafted callback ids are refused; closures are freed with
//! their programs.

#[path = "common/scratch.rs"]
mod scratch;

#[path = "common/captured.rs"]
mod captured;

use captured::Captured;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use xlafn::ArraySpec;
use xlafn::prelude::*;
use xlafn::runtime::{HostArray, HostCallbackFn};

/// The tests here count the process's live callbacks (`live_host_callbacks`),
/// which any other test registering one would change: they run one at a
/// time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn temp_dir(tag: &str) -> scratch::ScratchDir {
    scratch::scratch_dir(&format!("cb-{tag}"))
}

/// A function of this process whose callback counts its runs and returns
/// a "secret" (what a crafted program must not be able to obtain).
fn victim(runs: &Arc<AtomicUsize>) -> Function<(Tensor,), Tensor> {
    let runs = runs.clone();
    function(move |x: Tensor| -> Result<Tensor> {
        let runs = runs.clone();
        let out = host_callback(&[&x], &[ArraySpec::new(DType::F32, &[])], move |_| {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(vec![HostArray::from_vec(vec![1234.5f32], &[])])
        })?;
        Ok(out[0].clone())
    })
}

/// An exported `print` runs the loading process's print with its message,
/// and no callback of the loading process.
#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn an_exported_print_is_bound_to_the_loading_process_print() -> Result<()> {
    let _serial = serial();
    let runs = Arc::new(AtomicUsize::new(0));
    let v = victim(&runs);
    v.call((Tensor::scalar(0f32),))?;
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let f = function(|x: Tensor| -> Result<Tensor> {
        xlafn::print("exported print sees", &[&x])?;
        x.mul_scalar(2.0)
    });
    let dir = temp_dir("print");
    let cf = f.get_concrete_function((Tensor::vector(&[1f32, 2.])?,))?;
    cf.export(&dir, &[])?;
    let manifest = std::fs::read_to_string(dir.join("xlafn_export.json")).unwrap();
    assert!(manifest.contains("\"kind\": \"print\""), "{manifest}");
    let program = std::fs::read_to_string(dir.join("program_0.mlir")).unwrap();
    assert!(
        program.contains("callback_id = 0 : i64"),
        "ids are exported as indices"
    );

    let out = Captured::default();
    xlafn::set_print_output(out.clone());
    let loaded = xlafn::load(&dir)?;
    let y = loaded.call(&[&Tensor::vector(&[3f32, 4.])?])?;
    xlafn::reset_print_output();
    assert_eq!(y[0].to_vec::<f32>()?, vec![6., 8.]);
    let printed = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    assert!(
        printed.contains("exported print sees [3. 4.]"),
        "{printed:?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the victim's callback never ran"
    );
    Ok(())
}

/// Rewrites `program_0.mlir` with `edit` and updates its checksum in the
/// manifest, as someone crafting an export would.
fn craft(dir: &Path, edit: impl Fn(&str) -> String) {
    let path = dir.join("program_0.mlir");
    let old = std::fs::read_to_string(&path).unwrap();
    let new = edit(&old);
    assert_ne!(old, new, "the edit changed the program");
    std::fs::write(&path, &new).unwrap();
    // Re-signed, so the edit gets past the digests to the loader's checks.
    xlafn::export::testing::resign(dir).unwrap();
}

/// The id of the (only) host callback in a program's text.
fn callback_id(text: &str) -> String {
    let at = text.find("callback_id = ").expect("a callback") + "callback_id = ".len();
    text[at..].split(' ').next().unwrap().to_string()
}

/// An edit of a program's text.
type Edit = Box<dyn Fn(&str) -> String>;

/// Crafted exports naming another callback (the id an old export carried,
/// the real id of a callback of this process, or a new spelling) are
/// refused before compiling; the victim's callback never runs.
#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn crafted_callback_ids_cannot_reach_other_callbacks() -> Result<()> {
    let _serial = serial();
    let runs = Arc::new(AtomicUsize::new(0));
    let v = victim(&runs);
    v.call((Tensor::scalar(0f32),))?;
    let victim_text = v
        .get_concrete_function((Tensor::scalar(0f32),))?
        .stablehlo(&[ArraySpec::new(DType::F32, &[])])?;
    let victim_id = callback_id(&victim_text);
    assert!(
        victim_id.parse::<i64>().unwrap().unsigned_abs() > 1 << 20,
        "ids are not small counters: {victim_id}"
    );

    let f = function(|x: Tensor| -> Result<Tensor> {
        xlafn::print("", &[&x])?;
        Ok(x)
    });
    let cf = f.get_concrete_function((Tensor::scalar(0f32),))?;
    let edits: Vec<(&str, Edit)> = vec![
        (
            "undeclared",
            Box::new(|t: &str| t.replace("callback_id = 0 :", "callback_id = 1 :")),
        ),
        (
            "victim",
            Box::new(move |t: &str| {
                t.replace("callback_id = 0 :", &format!("callback_id = {victim_id} :"))
            }),
        ),
        (
            "hex",
            Box::new(|t: &str| t.replace("callback_id = 0 :", "callback_id = 0x0 :")),
        ),
    ];
    for (tag, edit) in edits {
        let dir = temp_dir(&format!("crafted-{tag}"));
        cf.export(&dir, &[])?;
        craft(&dir, edit);
        let e = xlafn::load(&dir).expect_err("a crafted export is refused");
        assert!(matches!(e, Error::Value(_)), "{tag}: {e:?}");
        assert!(e.to_string().contains("callback"), "{tag}: {e}");
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the victim's callback never ran"
    );
    Ok(())
}

fn scaled(factor: f32) -> Arc<HostCallbackFn> {
    Arc::new(move |args: &[HostArray]| {
        let v = args[0].to_vec::<f32>().map_err(|e| e.to_string())?;
        let out: Vec<f32> = v.iter().map(|x| x * factor).collect();
        Ok(vec![HostArray::from_vec(out, &args[0].dims)])
    })
}

/// A named user callback is refused unless the loader is given a closure
/// under its name, which is then what runs; an unnamed one cannot be
/// exported at all.
#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn user_callbacks_load_only_when_supplied_by_name() -> Result<()> {
    let _serial = serial();
    let f = function(|x: Tensor| -> Result<Tensor> {
        let spec = ArraySpec::new(DType::F32, &[2]);
        let out = xlafn::named_host_callback("scale", &[&x], &[spec], |args| {
            let v = args[0].to_vec::<f32>().map_err(|e| e.to_string())?;
            Ok(vec![HostArray::from_vec(
                v.iter().map(|x| x * 10.0).collect::<Vec<f32>>(),
                &[2],
            )])
        })?;
        Ok(out[0].clone())
    });
    let x = Tensor::vector(&[1f32, 2.])?;
    assert_eq!(f.call((&x,))?.to_vec::<f32>()?, vec![10., 20.]);
    let dir = temp_dir("named");
    f.get_concrete_function((&x,))?.export(&dir, &[])?;

    let e = xlafn::load(&dir).expect_err("the callback is not supplied");
    assert!(e.to_string().contains("'scale'"), "{e}");
    let e = xlafn::load_with_callbacks(&dir, &[("other", scaled(3.0))]).expect_err("wrong name");
    assert!(e.to_string().contains("'scale'"), "{e}");

    let supplied = scaled(100.0);
    let loaded = xlafn::load_with_callbacks(&dir, &[("scale", supplied.clone())])?;
    assert_eq!(loaded.call(&[&x])?[0].to_vec::<f32>()?, vec![100., 200.]);
    assert!(Arc::strong_count(&supplied) > 1, "bound while loaded");
    drop(loaded);
    assert_eq!(
        Arc::strong_count(&supplied),
        1,
        "released with the loaded function"
    );

    let unnamed = function(|x: Tensor| -> Result<Tensor> {
        host_callback(&[&x], &[], |_| Ok(Vec::new()))?;
        Ok(x)
    });
    let e = unnamed
        .get_concrete_function((&x,))?
        .export(temp_dir("unnamed"), &[])
        .expect_err("an unnamed callback cannot be bound by a loader");
    assert!(e.to_string().contains("named_host_callback"), "{e}");
    Ok(())
}

/// Counts drops of the data a callback owns.
struct Owned {
    _data: Vec<u8>,
    drops: Arc<AtomicUsize>,
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// 500 functions each owning a 1 MiB callback, called and dropped: every
/// closure (and its MiB) is freed with its function (they used to stay
/// registered for the life of the process, +582 MiB).
#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn callback_closures_are_freed_with_their_functions() -> Result<()> {
    let _serial = serial();
    let drops = Arc::new(AtomicUsize::new(0));
    let x = Tensor::scalar(1f32);
    for _ in 0..500 {
        let owned = Arc::new(Owned {
            _data: vec![1u8; 1 << 20],
            drops: drops.clone(),
        });
        let f = function(move |x: Tensor| -> Result<Tensor> {
            let owned = owned.clone();
            host_callback(&[&x], &[], move |_| {
                let _ = &owned;
                Ok(Vec::new())
            })?;
            Ok(x)
        });
        f.call((&x,))?;
    }
    assert_eq!(drops.load(Ordering::SeqCst), 500);
    Ok(())
}

/// A program whose callback has been freed (its function dropped) fails
/// with an error if it is somehow run, rather than calling anything else.
#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn a_freed_callback_id_is_an_error_not_another_callback() -> Result<()> {
    let _serial = serial();
    let runs = Arc::new(AtomicUsize::new(0));
    let v = victim(&runs);
    let cf = v.get_concrete_function((Tensor::scalar(0f32),))?;
    let exe = cf.compiled(&[ArraySpec::new(DType::F32, &[])])?;
    drop(cf);
    drop(v);
    let before = xlafn::runtime::live_host_callbacks();
    let client = xlafn::runtime::Client::default_client()?;
    let input = xlafn::runtime::Buffer::from_bytes(
        &client,
        client.default_device(),
        DType::F32,
        &[0u8; 4],
        &[],
    )?;
    let Err(e) = exe.execute(&[&input]) else {
        panic!("the callback is gone, so the run must fail");
    };
    assert!(e.to_string().contains("no host callback"), "{e}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(xlafn::runtime::live_host_callbacks() <= before);
    Ok(())
}
