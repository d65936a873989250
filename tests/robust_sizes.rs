//! Shapes too large for XLA, programs whose arrays cannot fit in memory,
//! and XLA flags known to abort it: each is a typed error before anything
//! reaches the plugin. These used to abort the
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

/// `v` doubled `n` times by `concat(x, x)`: each array stays far under the
/// per-array bound, but 38 of them need terabytes.
fn doubled(v: Tensor, n: usize) -> Result<Tensor> {
    let mut x = v;
    for _ in 0..n {
        x = Tensor::concat(&[x.clone(), x], 0)?;
    }
    Ok(x)
}

in_child!(
    /// 38 chained `concat(v, v)` aborted the process inside XLA when its
    /// memory ran out; now refused before compiling, traced or loaded
    /// from an export's graph.
    programs_whose_arrays_cannot_fit_are_refused / memory_child, &[], {
    let v = Tensor::vector(&[1f32, 2.]).unwrap();
    let f = function(|v: Tensor| doubled(v, 38));
    let e = f.call((&v,)).unwrap_err().to_string();
    assert!(
        e.contains("cannot compile the program") && e.contains("of memory a program may use"),
        "{e}"
    );
    assert!(e.contains("XLAFN_PROGRAM_MEMORY_BYTES"), "{e}");
    // Eager: one op whose result is larger than the machine.
    assert_err(Tensor::try_zeros(&[1 << 40], DType::F32), "of memory a program may use");

    // The same chain in a re-signed export's graph: the program compiled
    // for a shape it did not list goes through the same check.
    let once = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None], DType::F32)])
        .build(|v: Tensor| doubled(v, 1));
    let cf = once
        .get_concrete_function((TensorSpec::new(&[None], DType::F32),))
        .unwrap();
    let scratch = scratch::scratch_dir("robust-sizes-memory");
    let dir = scratch.join("export");
    cf.export(&dir, &[vec![vec![2]]]).unwrap();
    let path = dir.join("graph.json");
    let mut graph: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let nodes = graph["nodes"].as_array_mut().unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    for k in 1..38u32 {
        let mut node = nodes[0].clone();
        node["inputs"] = serde_json::json!([k, k]);
        nodes.push(node);
    }
    graph["results"] = serde_json::json!([38]);
    std::fs::write(&path, serde_json::to_vec(&graph).unwrap()).unwrap();
    xlafn::export::testing::resign(&dir).unwrap();
    let loaded = xlafn::load(&dir).unwrap();
    let e = loaded.call(&[&Tensor::vector(&[1f32, 2., 3.]).unwrap()]).unwrap_err();
    assert!(e.to_string().contains("of memory a program may use"), "{e}");
});

in_child!(
    /// `XLAFN_PROGRAM_MEMORY_BYTES` sets the memory programs are measured
    /// against: an array over it is refused, and so are arrays adding up
    /// to over 16 times it; smaller programs run.
    the_memory_bound_is_configurable / memory_bound_child,
    &[("XLAFN_PROGRAM_MEMORY_BYTES", "1M")],
    {
    assert_err(Tensor::try_zeros(&[1 << 19], DType::F32), "more than the 1048576 bytes");
    assert_eq!(Tensor::try_zeros(&[1 << 17], DType::F32).unwrap().dims(), vec![1 << 17]);
    // Each step makes two 512 KiB arrays (the splat 1.0 and the sum): 40
    // steps (40 MiB) are over 16 MiB, 10 (10.5 MiB) are not.
    let chain = |n: usize| {
        function(move |x: Tensor| {
            let mut y = x;
            for _ in 0..n {
                y = y.add_scalar(1.0)?;
            }
            Ok(y)
        })
    };
    let x = Tensor::try_zeros(&[1 << 17], DType::F32).unwrap();
    let e = chain(40).call((&x,)).unwrap_err().to_string();
    assert!(e.contains("together, more than 16 times the 1048576 bytes"), "{e}");
    let y = chain(10).call((&x,)).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap()[0], 10.);
});

in_child!(
    /// 20 chained `concat(v, v)` compiled for over 120 s (XLA's time grows
    /// exponentially with the depth when a concat names one value again);
    /// repeated operands are lowered as a tiling, which compiles at once
    /// and computes the same values, along any axis and beside other
    /// operands.
    repeated_concat_operands_compile_quickly / repeated_concat_child,
    &[("XLAFN_COMPILE_CACHE", "off")],
    {
    let v = Tensor::vector(&[1f32, 2.]).unwrap();
    let f = function(|v: Tensor| doubled(v, 20));
    let start = std::time::Instant::now();
    let y = f.call((&v,)).unwrap().to_vec::<f32>().unwrap();
    assert!(start.elapsed() < Duration::from_secs(60), "{:?}", start.elapsed());
    assert_eq!(y.len(), 1 << 21);
    assert!(y.chunks(2).all(|p| p == [1., 2.]));

    let m = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2]).unwrap();
    let b = Tensor::from_vec(vec![9i32, 8], &[2, 1]).unwrap();
    let cols = Tensor::concat(&[m.clone(), m.clone(), b.clone(), m.clone()], 1).unwrap();
    assert_eq!(cols.dims(), vec![2, 7]);
    assert_eq!(
        cols.to_vec::<i32>().unwrap(),
        [1, 2, 1, 2, 9, 1, 2, 3, 4, 3, 4, 8, 3, 4]
    );
    let traced = function(|m: Tensor, b: Tensor| Tensor::concat(&[b.clone(), m.clone(), m], 1));
    assert_eq!(
        traced.call((&m, &b)).unwrap().to_vec::<i32>().unwrap(),
        [9, 1, 2, 1, 2, 8, 3, 4, 3, 4]
    );
    let rows = Tensor::concat(&[m.clone(), m.clone(), m.clone()], 0).unwrap();
    assert_eq!(rows.dims(), vec![6, 2]);
    assert_eq!(rows.to_vec::<i32>().unwrap(), [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]);
    let one = Tensor::concat(std::slice::from_ref(&m), 0).unwrap();
    assert_eq!(one.to_vec::<i32>().unwrap(), [1, 2, 3, 4]);
});

/// Sizes, strides and paddings whose arithmetic would wrap an `i64` (a
/// panic in a debug build, a wrong shape in a release one) or that XLA's
/// compiler refuses with its own error: each is an error naming the op
/// before anything is emitted.
#[test]
fn size_arithmetic_from_arguments_never_wraps() {
    let v = Tensor::vector(&[1f32, 2., 3., 4.]).unwrap();
    let mx = i64::MAX;
    assert_err(
        v.pad(&[[0, mx]], PadMode::Constant, 0.0),
        "past the largest dimension",
    );
    assert_err(
        v.pad_general(&[0], &[0], &[mx], 0.0),
        "past the largest dimension",
    );
    assert_err(v.pad_general(&[i64::MIN], &[0], &[0], 0.0), "negative size");
    assert_err(
        v.split_sizes(&[mx, mx, 2], 0),
        "add up to 18446744073709551616",
    );
    assert_err(v.split_sizes(&[mx, -1], 0), "split");

    let x = Tensor::zeros(&[1, 8, 1], DType::F32);
    let k = Tensor::zeros(&[2, 1, 1], DType::F32);
    assert_err(
        x.conv1d(&k, 0, Padding::Same, 1),
        "strides and dilations must be >= 1",
    );
    assert_err(x.conv1d(&k, 1, Padding::Same, mx), "out of range");
    assert_err(
        x.conv1d(&k, 1, Padding::Explicit(vec![(i64::MIN, 0)]), 1),
        "out of range",
    );
    // A stride past the input is one output, as in TensorFlow and JAX.
    assert_eq!(
        x.conv1d(&k, mx, Padding::Same, 1).unwrap().dims(),
        vec![1, 1, 1]
    );
    let mut dilated_input = xlafn::ConvOptions::channels_last(1).unwrap();
    dilated_input.lhs_dilation = vec![mx];
    dilated_input.padding = Padding::Explicit(vec![(1, 1)]);
    assert!(x.conv_general(&k, &dilated_input).is_err());
    let images = Tensor::zeros(&[1, 5, 5, 3], DType::F32);
    let kernel = Tensor::zeros(&[3, 3, 3, 8], DType::F32);
    assert_err(
        images.conv2d(&kernel, [0, 1], Padding::Same, [1, 1]),
        "must be >= 1",
    );

    assert_err(
        x.max_pool(&[0], &[1], Padding::Valid),
        "window sizes, strides and dilations must be >= 1",
    );
    assert_err(x.max_pool(&[2], &[0], Padding::Same), "must be >= 1");
    assert_err(x.max_pool(&[mx], &[1], Padding::Same), "out of range");
    assert_err(
        x.max_pool(&[2], &[1], Padding::Explicit(vec![(i64::MIN, 0)])),
        "out of range",
    );
    assert_eq!(
        x.avg_pool(&[2], &[mx], Padding::Same).unwrap().dims(),
        vec![1, 1, 1]
    );
}
