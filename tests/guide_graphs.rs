//! Guide "Better performance with tf.function", section "Obtaining graphs"
//! (and the node-count demonstration of loops over host data): a concrete
//! function's graph lists its nodes with their inputs; a host loop unrolls
//! at trace time, so the graph grows with the data; the compiled StableHLO
//! is inspectable; unknown dimensions are compiled, not traced, once per
//! concrete shape.

use xlafn::ArraySpec;
use xlafn::prelude::*;

fn double() -> Function<(Tensor,), Tensor> {
    FunctionOptions::new()
        .name("double")
        .build(|a: Tensor| &a + &a)
}

#[test]
fn graph_lists_nodes_with_their_inputs() -> Result<()> {
    // graph = double.get_concrete_function(tf.constant(1)).graph
    // for node in graph.as_graph_def().node: print(f'{node.input} -> {node.name}')
    let c = double().get_concrete_function((Tensor::scalar(1i32),))?;
    let g = c.graph();
    assert_eq!(g.params().len(), 1);
    let a = g.params()[0];
    assert_eq!(g.operations().len(), 1);
    let add = &g.operations()[0];
    assert_eq!(add.describe(), "add");
    assert_eq!(add.inputs(), vec![a, a]);
    assert_eq!(g.results(), add.outputs());
    assert_eq!(
        g.to_string(),
        "%0 = param : i32()\n%1 = add(%0, %0) : i32()\nreturn %1"
    );
    Ok(())
}

#[test]
fn graph_of_a_longer_function_chains_node_inputs() -> Result<()> {
    let f = FunctionOptions::new()
        .name("poly")
        .build(|x: Tensor, y: Tensor| -> Result<Tensor> { (&x * &y).add(&x)?.tanh() });
    let c = f.get_concrete_function((
        TensorSpec::new(&[None], DType::F32),
        TensorSpec::new(&[None], DType::F32),
    ))?;
    let g = c.graph();
    let names: Vec<String> = g.operations().iter().map(|n| n.describe()).collect();
    assert_eq!(names, vec!["mul", "add", "tanh"]);
    let (x, y) = (g.params()[0], g.params()[1]);
    let nodes = g.operations();
    assert_eq!(nodes[0].inputs(), vec![x, y]);
    assert_eq!(nodes[1].inputs(), vec![nodes[0].outputs()[0], x]);
    assert_eq!(nodes[2].inputs(), vec![nodes[1].outputs()[0]]);
    assert_eq!(
        g.to_string(),
        "%0 = param : f32(None,)\n\
         %1 = param : f32(None,)\n\
         %2 = mul(%0, %1) : f32(None,)\n\
         %3 = add(%2, %0) : f32(None,)\n\
         %4 = tanh(%3) : f32(None,)\n\
         return %4"
    );
    Ok(())
}

/// The guide's `train(dataset)`: a host loop over host data.
/// ```python
/// @tf.function
/// def train(dataset):
///   loss = tf.constant(0)
///   for x, y in dataset:
///     loss += tf.abs(y - x)
///   return loss
/// ```
fn train() -> Function<(Vec<(i64, i64)>,), Tensor> {
    FunctionOptions::new()
        .name("train")
        .build(|dataset: Vec<(i64, i64)>| -> Result<Tensor> {
            let mut loss = Tensor::fill(&[], 0i64, DType::I32)?;
            for (x, y) in dataset {
                let diff = Tensor::fill(&[], y - x, DType::I32)?;
                loss = loss.add(&diff.abs()?)?;
            }
            Ok(loss)
        })
}

#[test]
fn host_loop_unrolls_so_the_graph_grows_with_the_data() -> Result<()> {
    let train = train();
    let small = vec![(1i64, 1i64); 3];
    let big = vec![(1i64, 1i64); 10];
    let small_graph = train.get_concrete_function((small.clone(),))?;
    let big_graph = train.get_concrete_function((big.clone(),))?;
    // One constant, then (constant, abs, add) per element.
    assert_eq!(small_graph.graph().operations().len(), 1 + 3 * 3);
    assert_eq!(big_graph.graph().operations().len(), 1 + 10 * 3);
    assert_eq!(train.tracing_count(), 2);

    let count = |text: &str, op: &str| text.matches(&format!("\"stablehlo.{op}\"")).count();
    let hlo = small_graph.stablehlo(&[])?;
    assert!(
        hlo.contains("func.func public @main() -> tensor<i32>"),
        "{hlo}"
    );
    assert_eq!(count(&hlo, "abs"), 3, "{hlo}");
    assert_eq!(count(&hlo, "add"), 3, "{hlo}");
    assert_eq!(count(&hlo, "constant"), 4, "{hlo}");
    let hlo = big_graph.stablehlo(&[])?;
    assert_eq!(count(&hlo, "abs"), 10, "{hlo}");
    assert_eq!(count(&hlo, "add"), 10, "{hlo}");

    // The unrolled programs compute the right losses.
    let data: Vec<(i64, i64)> = vec![(1, 4), (5, 2), (0, 0), (-3, 3)];
    assert_eq!(train.call((data,))?.to_vec::<i32>()?, vec![3 + 3 + 6]);
    assert_eq!(train.call((small,))?.to_vec::<i32>()?, vec![0]);
    assert_eq!(train.tracing_count(), 3);
    Ok(())
}

#[test]
fn loop_over_a_list_of_tensors_unrolls_too() -> Result<()> {
    let sum_sq = FunctionOptions::new()
        .name("sum_sq")
        .build(|xs: Vec<Tensor>| -> Result<Tensor> {
            let mut acc = xs[0].square()?;
            for x in &xs[1..] {
                acc = acc.add(&x.square()?)?;
            }
            Ok(acc)
        });
    // Nested TensorSpecs are not accepted for a Vec<Tensor> parameter;
    // example values give the same trace types.
    let zeros = Tensor::zeros(&[2], DType::F32);
    let two = sum_sq.get_concrete_function((vec![zeros.clone(); 2],))?;
    let five = sum_sq.get_concrete_function((vec![zeros.clone(); 5],))?;
    assert_eq!(two.graph().operations().len(), 2 + 1);
    assert_eq!(five.graph().operations().len(), 5 + 4);
    assert_eq!(five.graph().params().len(), 5);

    let specs = vec![ArraySpec::new(DType::F32, &[2]); 5];
    let hlo = five.stablehlo(&specs)?;
    assert!(
        hlo.contains("@main(%arg0: tensor<2xf32>, %arg1: tensor<2xf32>, %arg2: tensor<2xf32>"),
        "{hlo}"
    );
    assert_eq!(hlo.matches("\"stablehlo.multiply\"").count(), 5, "{hlo}");
    assert_eq!(hlo.matches("\"stablehlo.add\"").count(), 4, "{hlo}");

    let xs = vec![
        Tensor::vector(&[1f32, 2.])?,
        Tensor::vector(&[3f32, 0.])?,
        Tensor::vector(&[0f32, -1.])?,
    ];
    let y = sum_sq.call((xs,))?;
    assert_eq!(y.to_vec::<f32>()?, vec![10., 5.]);
    Ok(())
}

#[test]
fn stablehlo_of_a_specialization_has_concrete_shapes() -> Result<()> {
    let f = FunctionOptions::new()
        .name("scale")
        .build(|x: Tensor| -> Result<Tensor> { x.mul_scalar(3.0)?.exp() });
    let c = f.get_concrete_function((TensorSpec::new(&[None, Some(2)], DType::F32),))?;
    let hlo = c.stablehlo(&[ArraySpec::new(DType::F32, &[4, 2])])?;
    assert!(
        hlo.contains("func.func public @main(%arg0: tensor<4x2xf32>) -> tensor<4x2xf32>"),
        "{hlo}"
    );
    assert!(hlo.contains("\"stablehlo.multiply\""), "{hlo}");
    assert!(hlo.contains("\"stablehlo.exponential\""), "{hlo}");
    let hlo3 = c.stablehlo(&[ArraySpec::new(DType::F32, &[3, 2])])?;
    assert!(hlo3.contains("tensor<3x2xf32>"), "{hlo3}");
    // Producing the text compiles nothing.
    assert_eq!(c.compile_count(), 0);
    Ok(())
}

#[test]
fn unknown_dims_trace_once_and_compile_per_shape() -> Result<()> {
    let f = FunctionOptions::new()
        .name("double_vec")
        .input_signature(vec![TensorSpec::new(&[None], DType::I32)])
        .build(|x: Tensor| &x + &x);
    for n in [3usize, 5, 7, 3, 5] {
        let data: Vec<i32> = (0..n as i32).collect();
        let y = f.call((Tensor::vector(&data)?,))?;
        let want: Vec<i32> = data.iter().map(|v| 2 * v).collect();
        assert_eq!(y.to_vec::<i32>()?, want);
    }
    assert_eq!(f.tracing_count(), 1);
    assert_eq!(f.compile_count(), 3);
    let concrete = f.concrete_functions();
    assert_eq!(concrete.len(), 1);
    assert_eq!(concrete[0].compile_count(), 3);

    // Asking for an already compiled specialization compiles nothing;
    // a new shape compiles once more.
    concrete[0].compiled(&[ArraySpec::new(DType::I32, &[7])])?;
    assert_eq!(f.compile_count(), 3);
    concrete[0].compiled(&[ArraySpec::new(DType::I32, &[9])])?;
    assert_eq!(f.compile_count(), 4);
    assert_eq!(f.tracing_count(), 1);
    Ok(())
}

#[test]
fn reduce_retracing_compiles_each_shape_under_two_traces() -> Result<()> {
    // The guide's example: lengths 3, 5, 7, 9 trace twice.
    let f = FunctionOptions::new()
        .name("sum_all")
        .reduce_retracing(true)
        .build(|x: Tensor| -> Result<Tensor> { x.reduce_sum(&[0], false) });
    for n in [3i64, 5, 7, 9] {
        let x = Tensor::range(0.0, n as f64, 1.0, DType::F32)?;
        let y = f.call((x,))?;
        assert_eq!(y.to_vec::<f32>()?, vec![(n * (n - 1) / 2) as f32]);
    }
    assert_eq!(f.tracing_count(), 2);
    // (3,) under the first trace; 5, 7, 9 under the generalized one.
    let concrete = f.concrete_functions();
    assert_eq!(concrete.len(), 2);
    assert_eq!(concrete[0].compile_count(), 1);
    assert_eq!(concrete[1].compile_count(), 3);
    assert_eq!(f.compile_count(), 4);
    assert_eq!(
        concrete[1].input_types()[0].to_string(),
        "TensorSpec(shape=(None,), dtype=f32, name=None)"
    );
    Ok(())
}
