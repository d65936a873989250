//! The ahead-of-time stages. `Function::lower` and
//! `Lowered::compile` give the StableHLO, XLA's cost and memory analyses
//! and the optimized program's text. The flops of a matrix product and a
//! convolution equal the counts worked out by hand; the memory analysis'
//! argument and output bytes equal the arrays' sizes; stages served from
//! the function's caches say so, and a call after `compile` compiles
//! nothing more. Eager ops' cached programs answer the same questions.
use xlafn::ArraySpec;
use xlafn::prelude::*;
use xlafn::runtime::{Client, Platform};

/// XLA's count, where the plugin can make one: the CPU plugin counts
/// everything; XLA's CUDA analysis cannot count the cuBLAS and cuDNN calls
/// products and convolutions become there, and the figure is unknown.
fn counted(got: Option<f64>, want: f64) {
    match Client::default_client().unwrap().platform() {
        Platform::Cpu => assert_eq!(got, Some(want)),
        _ => assert!(got.is_none() || got == Some(want), "{got:?} against {want}"),
    }
}

#[test]
fn a_matmuls_flops_and_bytes_are_the_hand_counts() {
    let (m, k, n) = (32i64, 48, 16);
    let f = function(|a: Tensor, b: Tensor| a.matmul(&b));
    let a = Tensor::ones(&[m, k], DType::F32);
    let b = Tensor::ones(&[k, n], DType::F32);
    let compiled = f.lower((&a, &b)).unwrap().compile().unwrap();
    let cost = compiled.cost_analysis().unwrap();
    // One multiply and one add per (row, column, inner index).
    counted(cost.flops(), (2 * m * n * k) as f64);
    counted(cost.transcendentals(), 0.0);
    // Both operands read and the result written, 4 bytes each.
    counted(cost.bytes_accessed(), (4 * (m * k + k * n + m * n)) as f64);
    let memory = compiled.memory_analysis().unwrap();
    assert_eq!(memory.argument_bytes, 4 * (m * k + k * n), "{memory:?}");
    assert_eq!(memory.output_bytes, 4 * m * n, "{memory:?}");
    assert_eq!(memory.alias_bytes, 0);
    let text = compiled.as_text().unwrap();
    assert!(text.contains("ENTRY "), "{text}");
    assert!(text.contains("f32[32,48] parameter(0)"), "{text}");
    // The CPU runs XLA's own dot; CUDA a cuBLAS call (a custom call whose
    // result is the product and cuBLAS's workspace).
    let product = match Client::default_client().unwrap().platform() {
        Platform::Cpu => "f32[32,16] dot(",
        _ => "(f32[32,16], s8[",
    };
    assert!(text.contains(product), "{text}");
    let report = compiled.to_string();
    let flops = cost
        .flops()
        .map_or("unknown".to_string(), |f| f.to_string());
    assert!(report.contains(&format!("{flops} flops")), "{report}");
}

#[test]
fn a_convolutions_flops_are_the_hand_count() {
    // NHWC [2, 9, 9, 3] by a [3, 3, 3, 5] kernel, VALID, stride 1: a
    // [2, 7, 7, 5] result whose every element is 27 multiply-adds.
    let x = Tensor::ones(&[2, 9, 9, 3], DType::F32);
    let kernel = Tensor::ones(&[3, 3, 3, 5], DType::F32);
    let f = function(|x: Tensor, k: Tensor| x.conv2d(&k, [1, 1], Padding::Valid, [1, 1]));
    let compiled = f.lower((&x, &kernel)).unwrap().compile().unwrap();
    let outputs = 2 * 7 * 7 * 5;
    let cost = compiled.cost_analysis().unwrap();
    counted(cost.flops(), (2 * outputs * 27) as f64);
    let memory = compiled.memory_analysis().unwrap();
    assert_eq!(memory.argument_bytes, 4 * (2 * 9 * 9 * 3 + 27 * 5));
    assert_eq!(memory.output_bytes, 4 * outputs);
}

#[test]
fn transcendentals_count_each_element() {
    let f = function(|x: Tensor| x.tanh()?.exp());
    let x = Tensor::ones(&[10, 3], DType::F32);
    let cost = f
        .lower((&x,))
        .unwrap()
        .compile()
        .unwrap()
        .cost_analysis()
        .unwrap();
    // Elementwise ops are XLA's own on every platform.
    assert_eq!(cost.transcendentals(), Some(60.0), "{cost:?}");
}

#[test]
fn cached_stages_say_so_and_calls_reuse_the_compiled_program() {
    let f = function(|x: Tensor| x.square()?.reduce_sum(&[], false));
    let x = Tensor::ones(&[5], DType::F64);
    let first = f.lower((&x,)).unwrap();
    assert!(first.times().trace.is_some());
    assert!(
        first.as_text().contains("stablehlo.multiply"),
        "{}",
        first.as_text()
    );
    assert_eq!(first.argument_specs(), &[ArraySpec::new(DType::F64, &[5])]);
    let compiled = first.compile().unwrap();
    assert!(compiled.times().compile.is_some());
    assert_eq!(f.compile_count(), 1);
    // The call runs the executable the stage compiled.
    assert_eq!(f.call((&x,)).unwrap().to_vec::<f64>().unwrap(), vec![5.0]);
    assert_eq!((f.tracing_count(), f.compile_count()), (1, 1));
    let again = f.lower((&x,)).unwrap();
    assert_eq!(again.times().trace, None);
    assert_eq!(again.compile().unwrap().times().compile, None);
}

#[test]
fn relaxed_shapes_need_lower_for() {
    let f = function(|x: Tensor| x.mul_scalar(2.0));
    let spec = TensorSpec::new(&[None], DType::F32);
    let err = f.lower((spec.clone(),)).err().expect("not fully known");
    assert!(err.to_string().contains("not fully known"), "{err}");
    let concrete = f.get_concrete_function((spec,)).unwrap();
    let compiled = concrete
        .lower_for(&[ArraySpec::new(DType::F32, &[7])])
        .unwrap()
        .compile()
        .unwrap();
    assert_eq!(compiled.memory_analysis().unwrap().argument_bytes, 28);
}

#[test]
fn eager_ops_programs_can_be_asked_the_same() {
    // A shape no other test multiplies: its program is this test's own.
    let a = Tensor::ones(&[3, 5], DType::F32);
    let b = Tensor::ones(&[5, 7], DType::F32);
    a.matmul(&b).unwrap().to_vec::<f32>().unwrap();
    let specs = vec![
        ArraySpec::new(DType::F32, &[3, 5]),
        ArraySpec::new(DType::F32, &[5, 7]),
    ];
    let programs = xlafn::tensor::eager_programs();
    let program = programs
        .iter()
        .find(|p| p.op.starts_with("matmul") && p.inputs == specs)
        .expect("the eager matmul's program is cached");
    counted(program.executable.cost_analysis().unwrap().flops(), 210.0);
    assert_eq!(
        program.executable.memory_stats().unwrap().output_bytes,
        3 * 7 * 4
    );
}
