//! The guide's "Basics" section ("Better performance with tf.function"): a
//! `Function` is callable like an op, usable inside another `Function`
//! (its graph is inlined), with any arity and nested structures as inputs
//! and outputs, `Result` outputs and `()` outputs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use xlafn::prelude::*;

fn add_function() -> Function<(Tensor, Tensor), Tensor> {
    FunctionOptions::new()
        .name("add")
        .build(|a: Tensor, b: Tensor| a + b)
}

#[test]
fn a_function_is_callable_like_an_op() -> Result<()> {
    // add(tf.ones([2, 2]), tf.ones([2, 2]))  # [[2., 2.], [2., 2.]]
    let add = add_function();
    let ones = Tensor::ones(&[2, 2], DType::F32);
    let y = add.call((&ones, &ones))?;
    assert_eq!(y.dims(), vec![2, 2]);
    assert_eq!(y.dtype(), DType::F32);
    assert_eq!(y.to_vec::<f32>()?, vec![2.0; 4]);
    assert!(!y.is_symbolic());

    // Its result is an ordinary eager tensor: feed it to eager ops and back.
    let eager = &y * 3.0;
    assert_eq!(eager.to_vec::<f32>()?, vec![6.0; 4]);
    let again = add.call((y, eager))?;
    assert_eq!(again.to_vec::<f32>()?, vec![8.0; 4]);

    // Same values as the eager op, element for element.
    let a = Tensor::from_vec(vec![1.5f32, -2., 3.25, 0.], &[2, 2])?;
    let b = Tensor::from_vec(vec![0.5f32, 2., -1., 7.], &[2, 2])?;
    assert_eq!(
        add.call((&a, &b))?.to_vec::<f32>()?,
        vec![2.0, 0.0, 2.25, 7.0]
    );
    assert_eq!((&a + &b).to_vec::<f32>()?, vec![2.0, 0.0, 2.25, 7.0]);
    assert_eq!(add.tracing_count(), 1);
    Ok(())
}

#[test]
fn a_function_inside_another_function_is_inlined() -> Result<()> {
    // dense_layer(x, w, b) = add(tf.matmul(x, w), b)
    let add = add_function();
    let inner = add.clone();
    let dense_layer = FunctionOptions::new().name("dense_layer").build(
        move |x: Tensor, w: Tensor, b: Tensor| -> Result<Tensor> { inner.call((x.matmul(&w)?, b)) },
    );
    let x = Tensor::ones(&[3, 2], DType::F32);
    let w = Tensor::ones(&[2, 2], DType::F32);
    let b = Tensor::ones(&[2], DType::F32);
    let y = dense_layer.call((&x, &w, &b))?;
    assert_eq!(y.dims(), vec![3, 2]);
    assert_eq!(y.to_vec::<f32>()?, vec![3.0; 6]);
    assert_eq!(dense_layer.tracing_count(), 1);
    assert_eq!(add.tracing_count(), 1);

    // The outer graph holds matmul and the inlined add, nothing else.
    let outer = dense_layer.get_concrete_function((&x, &w, &b))?;
    let ops: Vec<String> = outer
        .graph()
        .operations()
        .iter()
        .map(|n| n.describe())
        .collect();
    assert_eq!(ops.len(), 2, "{ops:?}");
    assert!(ops[0].starts_with("matmul"), "{ops:?}");
    assert_eq!(ops[1], "add");
    assert_eq!(outer.graph().params().len(), 3);
    assert_eq!(outer.num_captures(), 0);
    // The add consumes the matmul's result and the bias parameter.
    let nodes = outer.graph().operations();
    assert_eq!(
        nodes[1].inputs(),
        vec![nodes[0].outputs()[0], outer.graph().params()[2]]
    );

    // The inner function kept its own cache: calling it directly with the
    // types it saw inside the trace does not retrace.
    let direct = add.call((Tensor::ones(&[3, 2], DType::F32), &b))?;
    assert_eq!(direct.to_vec::<f32>()?, vec![2.0; 6]);
    assert_eq!(add.tracing_count(), 1);

    // Real numbers: [[1, 2], [3, 4], [5, 6]] @ [[1, 0], [1, 2]] + [10, 20].
    let x = Tensor::from_vec(vec![1f32, 2., 3., 4., 5., 6.], &[3, 2])?;
    let w = Tensor::from_vec(vec![1f32, 0., 1., 2.], &[2, 2])?;
    let b = Tensor::vector(&[10f32, 20.])?;
    let y = dense_layer.call((x, w, b))?;
    assert_eq!(y.to_vec::<f32>()?, vec![13., 24., 17., 28., 21., 32.]);
    assert_eq!(dense_layer.tracing_count(), 1);
    Ok(())
}

#[test]
fn nested_function_captures_are_carried_into_the_outer_graph() -> Result<()> {
    let bias = Tensor::vector(&[100i32, 200])?;
    let add_bias = FunctionOptions::new()
        .name("add_bias")
        .build(move |x: Tensor| &x + &bias);
    let inner = add_bias.clone();
    let outer = function(move |x: Tensor| -> Result<Tensor> {
        let once = inner.call((&x,))?;
        let twice = inner.call((&once,))?;
        twice.mul_scalar(2)
    });
    let y = outer.call((Tensor::vector(&[1i32, 2])?,))?;
    // ((x + b) + b) * 2
    assert_eq!(y.to_vec::<i32>()?, vec![402, 804]);
    // The inner function traced once for both calls inside the outer trace.
    assert_eq!(add_bias.tracing_count(), 1);
    let c = outer.get_concrete_function((TensorSpec::known(&[2], DType::I32),))?;
    // add, add, mul (by a scalar constant, however the op spells it).
    let adds = c
        .graph()
        .operations()
        .iter()
        .filter(|n| n.describe() == "add")
        .count();
    assert_eq!(adds, 2);
    // The bias is captured once, through the inlined graph.
    assert_eq!(c.num_captures(), 1);
    Ok(())
}

#[test]
fn an_inner_function_traced_with_unknown_dims_serves_later_calls() -> Result<()> {
    let add = add_function();
    let inner = add.clone();
    let outer = FunctionOptions::new()
        .name("outer")
        .input_signature(vec![TensorSpec::new(&[None], DType::F32)])
        .build(move |x: Tensor| -> Result<Tensor> {
            let y = inner.call((&x, &x))?;
            inner.call((&y, &x))
        });
    // 3x for lengths 2 and 4: one trace each, two compiles of the outer.
    assert_eq!(
        outer
            .call((Tensor::vector(&[1f32, 2.])?,))?
            .to_vec::<f32>()?,
        vec![3., 6.]
    );
    assert_eq!(
        outer
            .call((Tensor::vector(&[0.5f32, -1., 2., 10.])?,))?
            .to_vec::<f32>()?,
        vec![1.5, -3., 6., 30.]
    );
    assert_eq!(outer.tracing_count(), 1);
    assert_eq!(outer.compile_count(), 2);
    // Inside the trace the inner function saw [None] f32 twice: one trace.
    assert_eq!(add.tracing_count(), 1);
    assert_eq!(
        add.concrete_functions()[0].input_types()[0].to_string(),
        "TensorSpec(shape=(None,), dtype=f32, name=None)"
    );
    // That trace serves eager calls of any length, compiled on demand.
    let y = add.call((
        Tensor::vector(&[1f32, 2., 3.])?,
        Tensor::vector(&[1f32, 1., 1.])?,
    ))?;
    assert_eq!(y.to_vec::<f32>()?, vec![2., 3., 4.]);
    assert_eq!(add.tracing_count(), 1);
    assert_eq!(add.compile_count(), 1);
    Ok(())
}

#[test]
fn an_inner_function_error_is_the_outer_call_error() -> Result<()> {
    let strict = FunctionOptions::new()
        .name("strict")
        .input_signature(vec![TensorSpec::new(&[None], DType::I32)])
        .build(|x: Tensor| x.mul_scalar(3));
    let inner = strict.clone();
    let outer = function(move |x: Tensor| -> Result<Tensor> { inner.call((&x,)) });
    let y = outer.call((Tensor::vector(&[1i32, 2])?,))?;
    assert_eq!(y.to_vec::<i32>()?, vec![3, 6]);
    let err = outer.call((Tensor::vector(&[1f32])?,)).unwrap_err();
    assert!(
        matches!(&err, Error::Type(m) if m.contains("Can not cast TensorSpec(shape=(1,), dtype=f32, name=None) to TensorSpec(shape=(None,), dtype=i32, name=None)")),
        "{err:?}"
    );
    assert_eq!(strict.tracing_count(), 1);
    Ok(())
}

#[test]
fn functions_of_zero_to_eight_parameters() -> Result<()> {
    let f0 = function(|| Tensor::range(0.0, 5.0, 1.0, DType::I32));
    assert_eq!(f0.call(())?.to_vec::<i32>()?, vec![0, 1, 2, 3, 4]);
    let c0 = function(|| Tensor::scalar(7i64));
    assert_eq!(c0.call(())?.item::<i64>()?, 7);
    assert_eq!(c0.call(())?.item::<i64>()?, 7);
    assert_eq!(c0.tracing_count(), 1);

    // f_n(a1, ..., an) = 1*a1 + 2*a2 + ... + n*an; with ai = i the result
    // is 1 + 4 + ... + n^2. Host numbers become i32 tensors.
    let s = |i: i32| Tensor::scalar(i);
    let f1 = function(|a: Tensor| a.mul_scalar(1));
    assert_eq!(f1.call((s(1),))?.item::<i32>()?, 1);
    let f2 = function(|a: Tensor, b: Tensor| a + b * 2i64);
    assert_eq!(f2.call((s(1), 2i64))?.item::<i32>()?, 5);
    let f3 = function(|a: Tensor, b: Tensor, c: Tensor| a + b * 2i64 + c * 3i64);
    assert_eq!(f3.call((s(1), s(2), 3i64))?.item::<i32>()?, 14);
    let f4 =
        function(|a: Tensor, b: Tensor, c: Tensor, d: Tensor| a + b * 2i64 + c * 3i64 + d * 4i64);
    assert_eq!(f4.call((s(1), s(2), s(3), s(4)))?.item::<i32>()?, 30);
    let f5 = function(|a: Tensor, b: Tensor, c: Tensor, d: Tensor, e: Tensor| {
        a + b * 2i64 + c * 3i64 + d * 4i64 + e * 5i64
    });
    assert_eq!(f5.call((s(1), s(2), s(3), s(4), s(5)))?.item::<i32>()?, 55);
    let f6 = function(
        |a: Tensor, b: Tensor, c: Tensor, d: Tensor, e: Tensor, f: Tensor| {
            a + b * 2i64 + c * 3i64 + d * 4i64 + e * 5i64 + f * 6i64
        },
    );
    assert_eq!(
        f6.call((s(1), s(2), s(3), s(4), s(5), s(6)))?
            .item::<i32>()?,
        91
    );
    let f7 = function(
        |a: Tensor, b: Tensor, c: Tensor, d: Tensor, e: Tensor, f: Tensor, g: Tensor| {
            a + b * 2i64 + c * 3i64 + d * 4i64 + e * 5i64 + f * 6i64 + g * 7i64
        },
    );
    assert_eq!(
        f7.call((s(1), s(2), s(3), s(4), s(5), s(6), s(7)))?
            .item::<i32>()?,
        140
    );
    let f8 = function(
        |a: Tensor, b: Tensor, c: Tensor, d: Tensor, e: Tensor, f: Tensor, g: Tensor, h: Tensor| {
            a + b * 2i64 + c * 3i64 + d * 4i64 + e * 5i64 + f * 6i64 + g * 7i64 + h * 8i64
        },
    );
    assert_eq!(
        f8.call((s(1), s(2), s(3), s(4), s(5), s(6), s(7), s(8)))?
            .item::<i32>()?,
        204
    );
    // Every parameter is an input of the graph, in order.
    let c8 = &f8.concrete_functions()[0];
    assert_eq!(c8.graph().params().len(), 8);
    assert_eq!(c8.input_types().len(), 8);
    Ok(())
}

#[test]
fn eight_parameters_of_mixed_kinds() -> Result<()> {
    type Args = (
        Tensor,
        i64,
        Tensor,
        bool,
        Tensor,
        f64,
        Vec<Tensor>,
        Option<Tensor>,
    );
    let f: Function<Args, Tensor> = function(
        |a: Tensor,
         b: i64,
         c: Tensor,
         negate: bool,
         e: Tensor,
         scale: f64,
         terms: Vec<Tensor>,
         minus: Option<Tensor>|
         -> Result<Tensor> {
            let mut acc = a.add_scalar(b)?.mul(&c)?;
            if negate {
                acc = acc.neg()?;
            }
            acc = acc.add(&e)?.mul_scalar(scale)?;
            for t in &terms {
                acc = acc.add(t)?;
            }
            if let Some(m) = minus {
                acc = acc.sub(&m)?;
            }
            Ok(acc)
        },
    );
    let v = |x: &[f32]| Tensor::vector(x).unwrap();
    // a=[1,2] b=2 -> [3,4]; *c=[3,4] -> [9,16]; neg -> [-9,-16];
    // +e=[10,10] -> [1,-6]; *0.5 -> [0.5,-3]; +[1,1]+[2,2] -> [3.5,0];
    // -[0.5,0.5] -> [3,-0.5].
    let y = f.call((
        v(&[1., 2.]),
        2i64,
        v(&[3., 4.]),
        true,
        v(&[10., 10.]),
        0.5f64,
        vec![v(&[1., 1.]), v(&[2., 2.])],
        Some(v(&[0.5, 0.5])),
    ))?;
    assert_eq!(y.to_vec::<f32>()?, vec![3.0, -0.5]);
    // Same kinds and values of the literals, new tensor values: no trace.
    let y = f.call((
        v(&[0., 0.]),
        2i64,
        v(&[1., 1.]),
        true,
        v(&[0., 4.]),
        0.5f64,
        vec![v(&[1., 1.]), v(&[0., 0.])],
        Some(v(&[1., 0.])),
    ))?;
    // [2,2]*[1,1] -> [2,2] -> [-2,-2] -> +[0,4] -> [-2,2] -> [-1,1] -> +[1,1] -> [0,2] -> -[1,0] -> [-1,2]
    assert_eq!(y.to_vec::<f32>()?, vec![-1.0, 2.0]);
    assert_eq!(f.tracing_count(), 1);
    // A different bool literal and no `minus`: a new trace.
    let y = f.call((
        v(&[0., 0.]),
        2i64,
        v(&[1., 1.]),
        false,
        v(&[0., 4.]),
        0.5f64,
        vec![v(&[1., 1.]), v(&[0., 0.])],
        None,
    ))?;
    // [2,2] -> +[0,4] -> [2,6] -> [1,3] -> +[1,1] -> [2,4]
    assert_eq!(y.to_vec::<f32>()?, vec![2.0, 4.0]);
    assert_eq!(f.tracing_count(), 2);
    Ok(())
}

#[test]
fn nested_tuple_vec_option_and_map_inputs_and_outputs() -> Result<()> {
    type In = (
        (Tensor, (Tensor, i64)),
        Option<BTreeMap<String, Vec<Tensor>>>,
    );
    type Out = (
        Tensor,
        Option<Vec<Tensor>>,
        BTreeMap<String, Tensor>,
        String,
    );
    let f: Function<In, Out> = function(
        |pair: (Tensor, (Tensor, i64)), extra: Option<BTreeMap<String, Vec<Tensor>>>| {
            let (x, (y, k)) = pair;
            let head = &x * k + &y;
            let listed = extra.as_ref().map(|m| {
                m.values()
                    .map(|ts| ts.iter().fold(x.zeros_like().unwrap(), |acc, t| acc + t))
                    .collect::<Vec<Tensor>>()
            });
            let mut named = BTreeMap::new();
            named.insert("diff".to_string(), &x - &y);
            named.insert("prod".to_string(), &x * &y);
            let note = format!("k={k}, keys={}", extra.map_or(0, |m| m.len()));
            (head, listed, named, note)
        },
    );

    let x = Tensor::vector(&[1i32, 2, 3])?;
    let y = Tensor::vector(&[10i32, 20, 30])?;
    let mut m = BTreeMap::new();
    m.insert(
        "b".to_string(),
        vec![
            Tensor::vector(&[1i32, 1, 1])?,
            Tensor::vector(&[2i32, 2, 2])?,
        ],
    );
    m.insert("a".to_string(), vec![Tensor::vector(&[5i32, 6, 7])?]);

    let (head, listed, named, note) = f.call(((x.clone(), (y.clone(), 2i64)), Some(m)))?;
    assert_eq!(head.to_vec::<i32>()?, vec![12, 24, 36]);
    let listed = listed.expect("Some in, Some out");
    assert_eq!(listed.len(), 2);
    // BTreeMap order: "a" then "b".
    assert_eq!(listed[0].to_vec::<i32>()?, vec![5, 6, 7]);
    assert_eq!(listed[1].to_vec::<i32>()?, vec![3, 3, 3]);
    assert_eq!(named.keys().collect::<Vec<_>>(), vec!["diff", "prod"]);
    assert_eq!(named["diff"].to_vec::<i32>()?, vec![-9, -18, -27]);
    assert_eq!(named["prod"].to_vec::<i32>()?, vec![10, 40, 90]);
    assert_eq!(note, "k=2, keys=2");

    let (head, listed, named, note) = f.call(((x, (y, 3i64)), None))?;
    assert_eq!(head.to_vec::<i32>()?, vec![13, 26, 39]);
    assert!(listed.is_none());
    assert_eq!(named["prod"].to_vec::<i32>()?, vec![10, 40, 90]);
    assert_eq!(note, "k=3, keys=0");
    assert_eq!(f.tracing_count(), 2);
    Ok(())
}

#[test]
fn vec_in_vec_out_keeps_order_and_length() -> Result<()> {
    let reversed_doubles =
        function(|xs: Vec<Tensor>| xs.iter().rev().map(|x| x * 2i64).collect::<Vec<Tensor>>());
    let out = reversed_doubles.call((vec![
        Tensor::scalar(1i32),
        Tensor::scalar(2i32),
        Tensor::scalar(3i32),
    ],))?;
    let got: Vec<i32> = out.iter().map(|t| t.item::<i32>().unwrap()).collect();
    assert_eq!(got, vec![6, 4, 2]);
    let out = reversed_doubles.call((vec![Tensor::scalar(5i32)],))?;
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].item::<i32>()?, 10);
    let out = reversed_doubles.call((vec![],))?;
    assert!(out.is_empty());
    assert_eq!(reversed_doubles.tracing_count(), 3);
    Ok(())
}

#[test]
fn outputs_may_repeat_or_pass_through_inputs() -> Result<()> {
    let f = function(|x: Tensor, y: Tensor| {
        let s = &x + &y;
        (x, s.clone(), s, y)
    });
    let (a, b, c, d) = f.call((Tensor::scalar(1.5f32), Tensor::scalar(2.0f32)))?;
    assert_eq!(a.item::<f32>()?, 1.5);
    assert_eq!(b.item::<f32>()?, 3.5);
    assert_eq!(c.item::<f32>()?, 3.5);
    assert_eq!(d.item::<f32>()?, 2.0);
    Ok(())
}

#[test]
fn an_err_returned_while_tracing_is_the_call_error() -> Result<()> {
    let traces = Arc::new(AtomicUsize::new(0));
    let seen = traces.clone();
    let f =
        FunctionOptions::new()
            .name("checked")
            .build(move |x: Tensor, n: i64| -> Result<Tensor> {
                seen.fetch_add(1, Ordering::SeqCst);
                if n < 0 {
                    return Err(Error::Value(format!("n must be >= 0, got {n}")));
                }
                x.mul_scalar(n)
            });
    let err = f.call((Tensor::scalar(2i32), -1i64)).unwrap_err();
    assert!(
        matches!(&err, Error::Value(m) if m == "n must be >= 0, got -1"),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "ValueError: n must be >= 0, got -1");
    // A failed trace is not cached: the same call traces (and fails) again.
    assert!(f.call((Tensor::scalar(2i32), -1i64)).is_err());
    assert_eq!(f.tracing_count(), 2);
    assert_eq!(traces.load(Ordering::SeqCst), 2);
    assert!(f.concrete_functions().is_empty());

    assert_eq!(f.call((Tensor::scalar(2i32), 3i64))?.item::<i32>()?, 6);
    assert_eq!(f.call((Tensor::scalar(-5i32), 3i64))?.item::<i32>()?, -15);
    assert_eq!(f.tracing_count(), 3);
    Ok(())
}

#[test]
fn an_op_error_while_tracing_is_the_call_error() -> Result<()> {
    // With `?`: the op's own error.
    let mm = function(|a: Tensor, b: Tensor| -> Result<Tensor> { a.matmul(&b) });
    let ones = Tensor::ones(&[2, 3], DType::F32);
    let err = mm.call((&ones, &ones)).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { op, .. } if op == "matmul"),
        "{err:?}"
    );
    let ok = mm.call((&ones, Tensor::ones(&[3, 1], DType::F32)))?;
    assert_eq!(ok.dims(), vec![2, 1]);
    assert_eq!(ok.to_vec::<f32>()?, vec![3.0, 3.0]);

    // With operator sugar, which cannot return a Result: the error is
    // recorded in the trace and returned by the call, not a panic.
    let add = function(|a: Tensor, b: Tensor| &a + &b);
    let err = add
        .call((
            Tensor::vector(&[1f32, 2.])?,
            Tensor::vector(&[1f32, 2., 3.])?,
        ))
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { op, .. } if op == "add"),
        "{err:?}"
    );
    let err = add
        .call((Tensor::vector(&[1f32])?, Tensor::vector(&[1i32])?))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert_eq!(
        add.call((Tensor::vector(&[1f32])?, Tensor::vector(&[2f32])?))?
            .to_vec::<f32>()?,
        vec![3.0]
    );
    Ok(())
}

#[test]
fn unit_output() -> Result<()> {
    let traces = Arc::new(AtomicUsize::new(0));
    let seen = traces.clone();
    let f = function(move |x: Tensor| {
        seen.fetch_add(1, Ordering::SeqCst);
        let _unused = &x * 2.0;
    });
    f.call((Tensor::scalar(1f32),))?;
    f.call((Tensor::scalar(2f32),))?;
    let () = f.call((Tensor::scalar(3f32),))?;
    assert_eq!(traces.load(Ordering::SeqCst), 1);
    assert_eq!(f.tracing_count(), 1);
    assert!(
        f.concrete_functions()[0]
            .to_string()
            .contains("Output Type:\n  None\n")
    );

    let nothing = function(|| {});
    nothing.call(())?;
    nothing.call(())?;
    assert_eq!(nothing.tracing_count(), 1);
    Ok(())
}

#[test]
fn a_function_is_shared_across_threads_and_traces_once() -> Result<()> {
    let traces = Arc::new(AtomicUsize::new(0));
    let seen = traces.clone();
    let square_sum = function(move |x: Tensor| -> Result<Tensor> {
        seen.fetch_add(1, Ordering::SeqCst);
        x.square()?.reduce_sum(&[0], false)
    });
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let f = square_sum.clone();
            std::thread::spawn(move || -> Result<i32> {
                let x = Tensor::vector(&[i, i + 1])?;
                f.call((x,))?.item::<i32>()
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let i = i as i32;
        assert_eq!(h.join().unwrap()?, i * i + (i + 1) * (i + 1));
    }
    assert_eq!(square_sum.tracing_count(), 1);
    assert_eq!(traces.load(Ordering::SeqCst), 1);
    Ok(())
}
