//! Fuzzes the export loader past its digests: each input is a list of
//! byte edits (`xlafn::export::testing::mutate`) applied to a real export
//! (a training step with a variable, a captured constant and a loop),
//! which is then re-signed, so the edits reach the `.npy` reader, the
//! manifest and program checks and XLA's compiler instead of stopping at
//! a digest mismatch. Loading and calling must end in a value or an error,
//! never a crash or a hang. The raw input also goes to the `.npy` reader.
//!
//! Run with `cargo fuzz run load_export`; a bounded deterministic version
//! runs in `cargo test` (tests/robust_export.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use xlafn::prelude::*;

/// Writes the export every input starts from, once per process.
fn base() -> &'static Path {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("xlafn-fuzz-base-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let w = Variable::new(Tensor::vector(&[0.5f32, -0.5]).unwrap());
        let c = Tensor::vector(&[1f32, 2.0]).unwrap();
        let step = FunctionOptions::new()
            .name("step")
            .arg_names(&["x", "y"])
            .build(move |x: Tensor, y: Tensor| -> Result<Tensor> {
                let loss = x.mul(&w.read())?.add(&c)?.reduce_sum(&[], false)?.sub(&y)?;
                w.assign_sub(&x.mul_scalar(0.1)?)?;
                let n = Tensor::scalar(3i32);
                for_range(0, &n, 1, loss, |_i, l: Tensor| &l * 0.5)
            });
        let x = Tensor::vector(&[1f32, 2.0]).unwrap();
        let y = Tensor::scalar(3f32);
        step.get_concrete_function((&x, &y))
            .unwrap()
            .export(&dir, &[])
            .unwrap();
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = xlafn::export::npy::decode(data);
    let dir = std::env::temp_dir().join(format!("xlafn-fuzz-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(base()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    xlafn::export::testing::mutate(&dir, data).unwrap();
    if let Ok(f) = xlafn::load(&dir) {
        let x = Tensor::vector(&[1f32, 2.0]).unwrap();
        let y = Tensor::scalar(3f32);
        let _ = f.call(&[&x, &y]);
    }
});
