//! `XLAFN_DEFAULT_MATMUL_PRECISION` (JAX's `jax_default_matmul_precision`):
//! every `dot_general` and `convolution` asks the compiler for it, exports
//! made with it load back, and a value that names no precision is a clear
//! error at the first compile. The variable is read once per process, so
//! each case runs in a child process with its own setting.

#[path = "common/child.rs"]
mod child;
#[path = "common/scratch.rs"]
mod scratch;

use std::time::Duration;
use xlafn::prelude::*;

/// A product and a convolution, compiled; their StableHLO text and values.
fn products() -> (String, Vec<f32>) {
    let f = function(|a: Tensor, k: Tensor| -> Result<Tensor> {
        let y = a.matmul(&a)?.reshape(&[1, 2, 2, 1])?;
        y.conv2d(&k, [1, 1], xlafn::Padding::Valid, [1, 1])
    });
    let a = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2]).unwrap();
    let k = Tensor::from_vec(vec![1f32, -1., 2., 0.5], &[2, 2, 1, 1]).unwrap();
    let text = f
        .get_concrete_function((&a, &k))
        .unwrap()
        .stablehlo(&[
            xlafn::ArraySpec::new(DType::F32, &[2, 2]),
            xlafn::ArraySpec::new(DType::F32, &[2, 2, 1, 1]),
        ])
        .unwrap();
    let y = f.call((&a, &k)).unwrap().to_vec::<f32>().unwrap();
    // [[1,2],[3,4]]^2 = [[7,10],[15,22]]; 7 - 10 + 2*15 + 0.5*22, by hand.
    assert_eq!(y, vec![38.0]);
    (text, y)
}

#[test]
fn the_default_writes_no_precision() {
    child::isolated(
        "the_default_writes_no_precision",
        Duration::from_secs(120),
        || {
            if std::env::var_os("XLAFN_DEFAULT_MATMUL_PRECISION").is_some() {
                return; // the whole run asks for one (scripts/cuda-suite.sh does)
            }
            let (text, _) = products();
            assert!(!text.contains("precision"), "{text}");
        },
    );
}

#[test]
fn highest_marks_every_product_and_its_export_loads() {
    let name = "child_highest";
    child::assert_child_passes(
        name,
        &[("XLAFN_DEFAULT_MATMUL_PRECISION", "highest")],
        Duration::from_secs(120),
    );
}

#[test]
fn child_highest() {
    if !child::is_child("child_highest") {
        return;
    }
    let (text, _) = products();
    let marked =
        "precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]";
    // Every product asks for it (the convolution of one input feature is
    // lowered as a product over patches, so both may be dots).
    let products: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("stablehlo.dot_general") || l.contains("stablehlo.convolution"))
        .collect();
    assert!(products.len() >= 2, "{text}");
    assert!(products.iter().all(|l| l.contains(marked)), "{text}");

    // An export holding the attribute passes the loader's program check.
    let f = function(|a: Tensor| a.matmul(&a));
    let a = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2]).unwrap();
    let dir = scratch::scratch_dir("precision-export");
    let export = dir.join("f");
    f.get_concrete_function((&a,))
        .unwrap()
        .export(&export, &[])
        .unwrap();
    let loaded = xlafn::load(&export).unwrap();
    let got = loaded.call(&[&a]).unwrap().remove(0);
    assert_eq!(got.to_vec::<f32>().unwrap(), vec![7., 10., 15., 22.]);
}

#[test]
fn a_value_naming_no_precision_is_an_error_at_the_first_compile() {
    child::assert_child_passes(
        "child_bad_precision",
        &[("XLAFN_DEFAULT_MATMUL_PRECISION", "fp64")],
        Duration::from_secs(120),
    );
}

#[test]
fn child_bad_precision() {
    if !child::is_child("child_bad_precision") {
        return;
    }
    let f = function(|a: Tensor| a.matmul(&a));
    let a = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2]).unwrap();
    let e = f.call((&a,)).unwrap_err().to_string();
    assert!(
        e.contains("XLAFN_DEFAULT_MATMUL_PRECISION=\"fp64\"") && e.contains("highest"),
        "{e}"
    );
}
