//! Shapes too large for XLA and XLA flags known to abort it: each is a
//! typed error before anything reaches the plugin. These used to abort the
//! process ("Rust cannot catch foreign exceptions"), so each case runs in a
//! child process (see `common/child.rs`).

#[path = "common/scratch.rs"]
mod scratch;

#[path = "common/child.rs"]
mod child;

use std::time::Duration;
use xlafn::prelude::*;

/// A parent test that runs `$child` (holding `$body`) in a new process.
macro_rules! in_child {
    ($(#[$doc:meta])* $name:ident / $child:ident, $env:expr, $body:block) => {
        $(#[$doc])*
        #[test]
        fn $name() {
            child::assert_child_passes(stringify!($child), $env, Duration::from_secs(120));
        }

        #[test]
        fn $child() {
            if !child::is_child(stringify!($child)) {
                return;
            }
            $body
        }
    };
}

/// Asserts `r` is an error whose text contains `needle`.
fn assert_err<T: std::fmt::Debug>(r: Result<T>, needle: &str) {
    match r {
        Ok(v) => panic!("expected an error containing {needle:?}, got Ok({v:?})"),
        Err(e) => assert!(
            e.to_string().contains(needle),
            "expected {needle:?} in: {e}"
        ),
    }
}

const HUGE: i64 = 1 << 62;

in_child!(
    /// Constants, iotas and random draws of impossible sizes.
    constants_too_large_are_errors / constants_child, &[], {
    assert_err(Tensor::try_zeros(&[1 << 61], DType::F32), "too large");
    assert_err(Tensor::fill(&[HUGE, 4], 1.5, DType::F32), "too large");
    assert_err(Tensor::iota(&[HUGE, 4], 0, DType::I32), "too large");
    assert_err(Tensor::random_uniform(&[HUGE, 4], 7, DType::F32), "too large");
    assert_err(Tensor::try_zeros(&[0, HUGE, 4], DType::F32), "too large");
    assert_err(Tensor::try_zeros(&[i64::MAX, i64::MAX], DType::F64), "too large");
    assert_err(Tensor::try_zeros(&[-3], DType::F32), "");
    // The largest accepted shape is still an ordinary, lazily checked size:
    // one byte short of the bound does not reach XLA here (an empty array).
    let empty = Tensor::try_zeros(&[0, 4], DType::F32).unwrap();
    assert_eq!(empty.dims(), vec![0, 4]);
});

in_child!(
    /// Ops whose results would be too large.
    op_results_too_large_are_errors / op_results_child, &[], {
    let labels = Tensor::from_vec(vec![0i32, 1, 2], &[3]).unwrap();
    assert_err(labels.one_hot(HUGE, 1.0, 0.0, DType::F32), "one_hot");
    let x = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[4]).unwrap();
    assert_err(x.reshape(&[HUGE, HUGE, -1]), "reshape");
    assert_err(x.reshape(&[i64::MAX, 2]), "reshape");
    // Host data cannot claim a shape larger than XLA holds either.
    assert_err(Tensor::from_vec(Vec::<f32>::new(), &[0, HUGE, 4]), "too large");
});

in_child!(
    /// Traced programs over oversized parameter types: refused while
    /// tracing (a reduce) or before compiling (an identity).
    traced_programs_too_large_are_errors / traced_child, &[], {
    let spec = || TensorSpec::new(&[Some(0), Some(HUGE), Some(4)], DType::F32);
    let reduce = FunctionOptions::new()
        .input_signature(vec![spec()])
        .build(|x: Tensor| x.reduce_sum(&[0], false));
    assert_err(reduce.get_concrete_function((spec(),)).map(|_| ()), "too large");
    let identity = FunctionOptions::new()
        .input_signature(vec![spec()])
        .build(|x: Tensor| x);
    let scratch = scratch::scratch_dir("robust-sizes");
    let dir = scratch.join("robust-sizes");
    let exported = identity
        .get_concrete_function((spec(),))
        .and_then(|cf| cf.export(&dir, &[]));
    let _ = std::fs::remove_dir_all(&dir);
    assert_err(exported, "too large");
});

in_child!(
    /// `XLAFN_XLA_FLAGS` values that abort XLA are refused with the flag's name.
    fatal_xla_flags_are_refused / fatal_flags_child,
    &[("XLAFN_XLA_FLAGS", "xla_cpu_parallel_codegen_split_count=-5"), ("XLAFN_COMPILE_CACHE", "off")],
    {
    let x = Tensor::from_vec(vec![1f32, 2., 3.], &[3]).unwrap();
    assert_err(x.sin(), "xla_cpu_parallel_codegen_split_count=-5");
    let f = function(|x: Tensor| x.cos());
    assert_err(f.call((&x,)), "xla_cpu_parallel_codegen_split_count");
});

in_child!(
    /// A huge split count made the compile hang (10^6 took 8 s and 1.9 GB;
    /// 2^31 - 1 never ended): it is refused, naming the flag and the bound.
    huge_xla_flags_are_refused / huge_flags_child,
    &[("XLAFN_XLA_FLAGS", "xla_cpu_parallel_codegen_split_count=2147483647"), ("XLAFN_COMPILE_CACHE", "off")],
    {
    let x = Tensor::from_vec(vec![1f32, 2., 3.], &[3]).unwrap();
    assert_err(
        x.sin(),
        "XLA flag xla_cpu_parallel_codegen_split_count=2147483647 is refused: it must be in 0..=1024",
    );
    let f = function(|x: Tensor| x.cos());
    assert_err(f.call((&x,)), "must be in 0..=1024");
});

in_child!(
    /// The bound's edge compiles and runs.
    largest_allowed_split_count_compiles / largest_split_count_child,
    &[("XLAFN_XLA_FLAGS", "xla_cpu_parallel_codegen_split_count=1024"), ("XLAFN_COMPILE_CACHE", "off")],
    {
    let x = Tensor::from_vec(vec![0f32, 1., 2.], &[3]).unwrap();
    let f = function(|x: Tensor| x.mul_scalar(2.0)?.exp());
    let y = f.call((&x,)).unwrap().to_vec::<f32>().unwrap();
    for (got, want) in y.iter().zip([0f32, 2., 4.].map(f32::exp)) {
        assert!((got - want).abs() <= 1e-5 * want, "{y:?}");
    }
});
