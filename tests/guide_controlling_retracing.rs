//! The guide's "Controlling retracing" section: `input_signature`,
//! unknown dimensions that trace once and compile per shape,
//! `reduce_retracing`, tensors instead of host literals, the
//! tracing protocol for user types, and dispatch of explicitly made
//! concrete functions by subtyping.

use std::sync::{Arc, Mutex};
use xlafn::function::{Arg, CustomTraceType, TraceType};
use xlafn::prelude::*;

type Log = Arc<Mutex<Vec<String>>>;

fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

/// The guide's `next_collatz` with
/// `input_signature=(tf.TensorSpec(shape=[None], dtype=tf.int32),)`.
fn next_collatz() -> (Function<(Tensor,), Tensor>, Log) {
    let log: Log = Arc::default();
    let seen = log.clone();
    let f = FunctionOptions::new()
        .name("next_collatz")
        .arg_names(&["x"])
        .input_signature(vec![TensorSpec::new(&[None], DType::I32)])
        .build(move |x: Tensor| -> Result<Tensor> {
            seen.lock().unwrap().push(format!("Tracing with {x}"));
            let even = x.floormod_scalar(2)?.eq_scalar(0)?;
            let half = x.floordiv_scalar(2)?;
            let up = x.mul_scalar(3)?.add_scalar(1)?;
            where_(&even, &half, &up)
        });
    (f, log)
}

#[test]
fn input_signature_traces_once_and_compiles_per_shape() -> Result<()> {
    let (f, log) = next_collatz();
    assert_eq!(
        f.call((Tensor::vector(&[1i32, 2])?,))?.to_vec::<i32>()?,
        vec![4, 1]
    );
    assert_eq!(
        f.call((Tensor::vector(&[1i32, 2, 3])?,))?.to_vec::<i32>()?,
        vec![4, 1, 10]
    );
    assert_eq!(
        f.call((Tensor::vector(&[1i32, 2, 3, 4, 5])?,))?
            .to_vec::<i32>()?,
        vec![4, 1, 10, 2, 16]
    );
    assert_eq!(
        f.call((Tensor::vector(&[7i32, 22, 11])?,))?
            .to_vec::<i32>()?,
        vec![22, 11, 34]
    );
    assert_eq!(f.tracing_count(), 1);
    // Lengths 2, 3 and 5: three specializations of the one trace.
    assert_eq!(f.compile_count(), 3);
    let cfs = f.concrete_functions();
    assert_eq!(cfs.len(), 1);
    assert_eq!(cfs[0].compile_count(), 3);
    // The trace saw the signature's shape, not the first call's.
    assert_eq!(
        entries(&log),
        vec!["Tracing with Tensor(\"next_collatz:0\", shape=(None,), dtype=i32)"]
    );
    assert_eq!(
        cfs[0].function_type(),
        "(x: TensorSpec(shape=(None,), dtype=i32, name=None)) -> \
         TensorSpec(shape=(None,), dtype=i32, name=None)"
    );
    Ok(())
}

#[test]
fn input_signature_traces_once_for_lengths_three_and_five() -> Result<()> {
    // The guide's `g` with an input signature of [None]: no retrace.
    let log: Log = Arc::default();
    let seen = log.clone();
    let g = FunctionOptions::new()
        .name("g")
        .input_signature(vec![TensorSpec::new(&[None], DType::I32)])
        .build(move |x: Tensor| {
            seen.lock().unwrap().push(x.shape().to_string());
            x
        });
    assert_eq!(
        g.call((Tensor::vector(&[1i32, 2, 3])?,))?.to_vec::<i32>()?,
        vec![1, 2, 3]
    );
    assert_eq!(
        g.call((Tensor::vector(&[1i32, 2, 3, 4, 5])?,))?
            .to_vec::<i32>()?,
        vec![1, 2, 3, 4, 5]
    );
    assert_eq!(g.tracing_count(), 1);
    assert_eq!(g.compile_count(), 2);
    // Repeating a length compiles nothing new.
    g.call((Tensor::vector(&[9i32, 9, 9])?,))?;
    assert_eq!(g.compile_count(), 2);
    assert_eq!(entries(&log), vec!["(None,)"]);
    Ok(())
}

#[test]
fn input_signature_rejects_other_shapes_and_dtypes() -> Result<()> {
    let (f, _) = next_collatz();
    let signature = "TensorSpec(shape=(None,), dtype=i32, name=None)";

    // A 1-D tensor was specified, so a matrix fails.
    let err = f
        .call((Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2])?,))
        .unwrap_err();
    let Error::Type(msg) = &err else {
        panic!("expected a TypeError, got {err:?}");
    };
    assert!(
        msg.contains(&format!(
            "Can not cast TensorSpec(shape=(2, 2), dtype=i32, name=None) to {signature}"
        )),
        "{msg}"
    );
    assert_eq!(
        msg,
        &format!(
            "Binding inputs to function 'next_collatz' failed due to `Can not cast \
             TensorSpec(shape=(2, 2), dtype=i32, name=None) to {signature}` for argument x. \
             Signature: (x: {signature})"
        )
    );
    assert!(err.to_string().starts_with("TypeError: Binding inputs"));

    // An i32 dtype was specified, so f32 fails.
    let err = f.call((Tensor::vector(&[1f32, 2.])?,)).unwrap_err();
    assert!(
        matches!(&err, Error::Type(m) if m.contains(&format!(
            "Can not cast TensorSpec(shape=(2,), dtype=f32, name=None) to {signature}"
        ))),
        "{err:?}"
    );
    // A scalar is not a vector either.
    let err = f.call((Tensor::scalar(1i32),)).unwrap_err();
    assert!(
        matches!(&err, Error::Type(m) if m.contains("Can not cast TensorSpec(shape=(), dtype=i32")),
        "{err:?}"
    );
    // Failed bindings neither trace nor compile.
    assert_eq!(f.tracing_count(), 0);
    assert_eq!(f.compile_count(), 0);

    // get_concrete_function is bound to the signature the same way.
    let err = f
        .get_concrete_function((TensorSpec::new(&[None, None], DType::I32),))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Type(m) if m.contains("Can not cast TensorSpec(shape=(None, None), dtype=i32, name=None)")),
        "{err:?}"
    );
    let c = f.get_concrete_function((TensorSpec::known(&[4], DType::I32),))?;
    assert_eq!(c.input_types()[0].to_string(), signature);
    assert_eq!(f.tracing_count(), 1);
    Ok(())
}

#[test]
fn input_signature_of_the_wrong_length_is_a_type_error() -> Result<()> {
    let f = FunctionOptions::new()
        .name("one_arg")
        .input_signature(vec![
            TensorSpec::new(&[None], DType::F32),
            TensorSpec::new(&[None], DType::F32),
        ])
        .build(|x: Tensor| x);
    let err = f.call((Tensor::vector(&[1f32])?,)).unwrap_err();
    assert!(
        matches!(&err, Error::Type(m) if m.contains("one_arg") && m.contains("takes 2 argument(s), got 1")),
        "{err:?}"
    );
    assert_eq!(f.tracing_count(), 0);
    Ok(())
}

#[test]
fn reduce_retracing_traces_twice_for_lengths_3_5_7_9() -> Result<()> {
    let log: Log = Arc::default();
    let seen = log.clone();
    let g = FunctionOptions::new()
        .name("g")
        .reduce_retracing(true)
        .build(move |x: Tensor| {
            seen.lock().unwrap().push(format!("Tracing with {x}"));
            x
        });
    for n in [3, 5, 7, 9] {
        let v: Vec<i32> = (1..=n).collect();
        assert_eq!(g.call((Tensor::vector(&v)?,))?.to_vec::<i32>()?, v);
    }
    assert_eq!(g.tracing_count(), 2);
    assert_eq!(
        entries(&log),
        vec![
            "Tracing with Tensor(\"g:0\", shape=(3,), dtype=i32)",
            "Tracing with Tensor(\"g:0\", shape=(None,), dtype=i32)",
        ]
    );
    let cfs = g.concrete_functions();
    assert_eq!(cfs.len(), 2);
    // [3] was compiled for the first trace; 5, 7 and 9 by the general one.
    assert_eq!(cfs[0].compile_count(), 1);
    assert_eq!(cfs[1].compile_count(), 3);
    // Length 3 again goes to its own, more specific trace.
    g.call((Tensor::vector(&[0i32, 0, 0])?,))?;
    assert_eq!((cfs[0].compile_count(), cfs[1].compile_count()), (1, 3));
    // A new rank has no common supertype of known rank: the general trace
    // becomes one of unknown rank.
    let m = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2])?;
    assert_eq!(g.call((&m,))?.to_vec::<i32>()?, vec![1, 2, 3, 4]);
    assert_eq!(g.tracing_count(), 3);
    assert_eq!(
        entries(&log)[2],
        "Tracing with Tensor(\"g:0\", shape=<unknown>, dtype=i32)"
    );
    Ok(())
}

#[test]
#[allow(deprecated)]
fn experimental_relax_shapes_is_the_old_name_of_reduce_retracing() -> Result<()> {
    let g = FunctionOptions::new()
        .experimental_relax_shapes(true)
        .build(|x: Tensor| x.mul_scalar(3));
    for n in [3, 5, 7, 9] {
        let v: Vec<i32> = (1..=n).collect();
        let want: Vec<i32> = v.iter().map(|x| x * 3).collect();
        assert_eq!(g.call((Tensor::vector(&v)?,))?.to_vec::<i32>()?, want);
    }
    assert_eq!(g.tracing_count(), 2);
    Ok(())
}

#[test]
fn without_reduce_retracing_every_length_traces() -> Result<()> {
    let g = function(|x: Tensor| x.mul_scalar(2));
    for n in [3, 5, 7, 9] {
        let v: Vec<i32> = (1..=n).collect();
        let want: Vec<i32> = v.iter().map(|x| x * 2).collect();
        assert_eq!(g.call((Tensor::vector(&v)?,))?.to_vec::<i32>()?, want);
    }
    assert_eq!(g.tracing_count(), 4);
    assert_eq!(g.compile_count(), 4);
    Ok(())
}

#[test]
fn pass_tensors_instead_of_host_literals() -> Result<()> {
    // The guide's `train(num_steps)`: a host literal retraces per value, a
    // tensor does not. Here the body sums 0..num_steps.
    let literal_log: Log = Arc::default();
    let seen = literal_log.clone();
    let train_literal = function(move |num_steps: i64| -> Result<Tensor> {
        seen.lock()
            .unwrap()
            .push(format!("Tracing with num_steps = {num_steps}"));
        Tensor::range(0.0, num_steps as f64, 1.0, DType::I32)?.reduce_sum(&[0], false)
    });
    assert_eq!(train_literal.call((10i64,))?.item::<i32>()?, 45);
    assert_eq!(train_literal.call((20i64,))?.item::<i32>()?, 190);
    assert_eq!(train_literal.call((10i64,))?.item::<i32>()?, 45);
    assert_eq!(train_literal.tracing_count(), 2);
    assert_eq!(
        entries(&literal_log),
        vec!["Tracing with num_steps = 10", "Tracing with num_steps = 20"]
    );

    let tensor_log: Log = Arc::default();
    let seen = tensor_log.clone();
    let train_tensor = function(move |num_steps: Tensor| -> Result<Tensor> {
        seen.lock()
            .unwrap()
            .push(format!("Tracing with num_steps = {num_steps}"));
        // n * (n - 1) / 2
        num_steps.mul(&num_steps.sub_scalar(1)?)?.floordiv_scalar(2)
    });
    assert_eq!(
        train_tensor.call((Tensor::scalar(10i32),))?.item::<i32>()?,
        45
    );
    assert_eq!(
        train_tensor.call((Tensor::scalar(20i32),))?.item::<i32>()?,
        190
    );
    // Host numbers given for a Tensor parameter become tensors: an
    // i64 that fits is an i32 scalar, the same type as above.
    assert_eq!(train_tensor.call((30i64,))?.item::<i32>()?, 435);
    assert_eq!(train_tensor.call((4i64,))?.item::<i32>()?, 6);
    assert_eq!(train_tensor.tracing_count(), 1);
    assert_eq!(train_tensor.compile_count(), 1);
    assert_eq!(
        entries(&tensor_log),
        vec!["Tracing with num_steps = Tensor(\"f:0\", shape=(), dtype=i32)"]
    );
    Ok(())
}

#[test]
fn host_numbers_for_tensor_parameters_convert_like_convert_to_tensor() -> Result<()> {
    let log: Log = Arc::default();
    let seen = log.clone();
    let f = function(move |x: Tensor| {
        seen.lock().unwrap().push(x.dtype().to_string());
        &x + &x
    });
    // Floats become f32 scalars: one trace for every float value.
    assert_eq!(f.call((1.5f64,))?.item::<f32>()?, 3.0);
    assert_eq!(f.call((-0.25f64,))?.item::<f32>()?, -0.5);
    assert_eq!(f.call((Tensor::scalar(4f32),))?.item::<f32>()?, 8.0);
    assert_eq!(f.tracing_count(), 1);
    // Ints that fit are i32.
    assert_eq!(f.call((7i64,))?.item::<i32>()?, 14);
    assert_eq!(f.call((-8i64,))?.item::<i32>()?, -16);
    assert_eq!(f.tracing_count(), 2);
    // Ints that do not fit are i64: another dtype, another trace.
    let big = 1i64 << 40;
    let y = f.call((big,))?;
    assert_eq!(y.dtype(), DType::I64);
    assert_eq!(y.item::<i64>()?, big * 2);
    assert_eq!(f.call((big + 1,))?.item::<i64>()?, 2 * big + 2);
    assert_eq!(f.tracing_count(), 3);
    // Bools become bool scalars.
    let not = function(|x: Tensor| x.logical_not());
    assert!(!not.call((true,))?.item::<bool>()?);
    assert!(not.call((false,))?.item::<bool>()?);
    assert_eq!(not.tracing_count(), 1);
    assert_eq!(entries(&log), vec!["f32", "i32", "i64"]);
    Ok(())
}

#[test]
fn literal_parameters_retrace_per_value() -> Result<()> {
    let f = function(|x: Tensor, times: i64| {
        let mut acc = x.clone();
        for _ in 1..times {
            acc = &acc + &x;
        }
        acc
    });
    let x = Tensor::scalar(3i32);
    for (round, times) in [1i64, 2, 3, 2, 1, 4].into_iter().enumerate() {
        assert_eq!(f.call((&x, times))?.item::<i32>()?, 3 * times as i32);
        let distinct = [1, 2, 3, 2, 1, 4][..=round]
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        assert_eq!(f.tracing_count(), distinct);
    }
    assert_eq!(f.tracing_count(), 4);
    Ok(())
}

/// `reduce_sum` over axis 1, logging the traced shape.
fn row_sums(log: &Log) -> Function<(Tensor,), Tensor> {
    let seen = log.clone();
    function(move |x: Tensor| -> Result<Tensor> {
        seen.lock().unwrap().push(x.shape().to_string());
        x.reduce_sum(&[1], false)
    })
}

#[test]
fn get_concrete_function_reuses_a_cached_supertype() -> Result<()> {
    // As in TensorFlow, get_concrete_function looks the cache up by
    // subtyping first: once [None, None] is cached, asking for [1, None]
    // returns it instead of tracing.
    let log: Log = Arc::default();
    let f = row_sums(&log);
    let wide = f.get_concrete_function((TensorSpec::new(&[None, None], DType::F32),))?;
    let again = f.get_concrete_function((TensorSpec::new(&[Some(1), None], DType::F32),))?;
    assert_eq!(f.tracing_count(), 1);
    assert_eq!(entries(&log), vec!["(None, None)"]);
    assert_eq!(again.input_types(), wide.input_types());
    let x12 = Tensor::from_vec(vec![1f32, 2.], &[1, 2])?;
    assert_eq!(again.call((&x12,))?.to_vec::<f32>()?, vec![3.0]);
    // Both handles are the same concrete function (one compile cache).
    assert_eq!(wide.compile_count(), 1);
    Ok(())
}

#[test]
fn concrete_functions_dispatch_to_the_most_specific_supertype() -> Result<()> {
    let log: Log = Arc::default();
    let f = row_sums(&log);
    // The narrow one first (the wide one is no subtype of it, so it is
    // traced too).
    let narrow = f.get_concrete_function((TensorSpec::new(&[Some(1), None], DType::F32),))?;
    let wide = f.get_concrete_function((TensorSpec::new(&[None, None], DType::F32),))?;
    assert_eq!(f.tracing_count(), 2);
    assert_eq!(entries(&log), vec!["(1, None)", "(None, None)"]);
    // Made from specs: traced, nothing compiled yet.
    assert_eq!((wide.compile_count(), narrow.compile_count()), (0, 0));
    // Asking again returns the cached ones.
    f.get_concrete_function((TensorSpec::new(&[None, None], DType::F32),))?;
    f.get_concrete_function((TensorSpec::new(&[Some(1), None], DType::F32),))?;
    assert_eq!(f.tracing_count(), 2);

    // [1, 2] fits both; [1, None] is more specific and serves it.
    let x12 = Tensor::from_vec(vec![1f32, 2.], &[1, 2])?;
    assert_eq!(f.call((&x12,))?.to_vec::<f32>()?, vec![3.0]);
    assert_eq!(f.tracing_count(), 2);
    assert_eq!((wide.compile_count(), narrow.compile_count()), (0, 1));
    // [1, 3] too (a new specialization of the narrow one).
    let x13 = Tensor::from_vec(vec![1f32, 2., 4.], &[1, 3])?;
    assert_eq!(f.call((&x13,))?.to_vec::<f32>()?, vec![7.0]);
    assert_eq!((wide.compile_count(), narrow.compile_count()), (0, 2));
    // [3, 2] fits only [None, None].
    let x32 = Tensor::from_vec(vec![1f32, 2., 3., 4., 5., 6.], &[3, 2])?;
    assert_eq!(f.call((&x32,))?.to_vec::<f32>()?, vec![3.0, 7.0, 11.0]);
    assert_eq!((wide.compile_count(), narrow.compile_count()), (1, 2));
    assert_eq!(f.tracing_count(), 2);
    assert_eq!(f.compile_count(), 3);

    // The wide concrete function, called directly, takes [1, 2] as well.
    assert_eq!(wide.call((&x12,))?.to_vec::<f32>()?, vec![3.0]);
    assert_eq!((wide.compile_count(), narrow.compile_count()), (2, 2));
    // The narrow one refuses [3, 2].
    let err = narrow.call((&x32,)).unwrap_err();
    assert!(
        matches!(&err, Error::Type(m) if m.contains("TensorSpec(shape=(3, 2), dtype=f32, name=None)")),
        "{err:?}"
    );

    // A rank-1 input fits neither: traced anew (and reduce_sum over axis 1
    // of a vector is an op error at trace time).
    let res = f.call((Tensor::vector(&[1f32, 2.])?,));
    assert!(matches!(res, Err(Error::InvalidArgument { .. })), "{res:?}");
    assert_eq!(f.tracing_count(), 3);
    assert_eq!(entries(&log).last().unwrap(), "(2,)");
    Ok(())
}

#[test]
fn first_inserted_wins_among_incomparable_matches() -> Result<()> {
    let f = function(|x: Tensor| x.reduce_sum(&[0, 1], false));
    let first = f.get_concrete_function((TensorSpec::new(&[Some(1), None], DType::I32),))?;
    let second = f.get_concrete_function((TensorSpec::new(&[None, Some(2)], DType::I32),))?;
    let x = Tensor::from_vec(vec![5i32, 6], &[1, 2])?;
    assert_eq!(f.call((&x,))?.item::<i32>()?, 11);
    assert_eq!((first.compile_count(), second.compile_count()), (1, 0));
    let y = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2])?;
    assert_eq!(f.call((&y,))?.item::<i32>()?, 10);
    assert_eq!((first.compile_count(), second.compile_count()), (1, 1));
    assert_eq!(f.tracing_count(), 2);
    Ok(())
}

// ------------------------------------------- the guide's tracing protocol

/// The guide's `Fruit` classes: each kind has a fixed flavor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Apple,
    Mango,
}

fn flavor(kind: Kind) -> Tensor {
    match kind {
        Kind::Apple => Tensor::vector(&[1i32, 2]).unwrap(),
        Kind::Mango => Tensor::vector(&[3i32, 4]).unwrap(),
    }
}

/// A fruit without a tracing type: every instance is its own type (the
/// guide's "identity" rule), so each new fruit retraces.
#[derive(Clone, Debug)]
struct Fruit {
    id: u64,
    kind: Kind,
}

impl Fruit {
    fn new(kind: Kind) -> Fruit {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Fruit {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            kind,
        }
    }
}

#[derive(Debug)]
struct FruitIdentity(Fruit);

impl CustomTraceType for FruitIdentity {
    fn type_name(&self) -> &'static str {
        "Fruit"
    }
    fn is_subtype_of(&self, other: &dyn CustomTraceType) -> bool {
        self.equals(other)
    }
    fn most_specific_common_supertype(
        &self,
        other: &dyn CustomTraceType,
    ) -> Option<Arc<dyn CustomTraceType>> {
        self.equals(other)
            .then(|| Arc::new(FruitIdentity(self.0.clone())) as Arc<dyn CustomTraceType>)
    }
    fn equals(&self, other: &dyn CustomTraceType) -> bool {
        other
            .as_any()
            .downcast_ref::<FruitIdentity>()
            .is_some_and(|o| o.0.id == self.0.id)
    }
    fn hash_value(&self) -> u64 {
        self.0.id
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Arg for Fruit {
    fn trace_type(&self) -> Result<TraceType> {
        Ok(TraceType::Custom(Arc::new(FruitIdentity(self.clone()))))
    }
    fn flatten(&self, _out: &mut Vec<Tensor>) {}
    fn placeholder(ty: &TraceType) -> Result<Self> {
        match ty {
            TraceType::Custom(c) => c
                .as_any()
                .downcast_ref::<FruitIdentity>()
                .map(|f| f.0.clone())
                .ok_or_else(|| Error::Type(format!("not a Fruit: {ty}"))),
            _ => Err(Error::Type(format!("not a Fruit: {ty}"))),
        }
    }
}

/// The guide's `FruitWithTraceType`: typed by its kind (its class), and
/// the placeholder is the fruit itself.
#[derive(Clone, Debug)]
struct FruitWithTraceType {
    kind: Kind,
}

#[derive(Debug)]
struct FruitTraceType {
    fruit: FruitWithTraceType,
}

impl CustomTraceType for FruitTraceType {
    fn type_name(&self) -> &'static str {
        "FruitWithTraceType"
    }
    fn is_subtype_of(&self, other: &dyn CustomTraceType) -> bool {
        self.equals(other)
    }
    fn most_specific_common_supertype(
        &self,
        other: &dyn CustomTraceType,
    ) -> Option<Arc<dyn CustomTraceType>> {
        self.equals(other).then(|| {
            Arc::new(FruitTraceType {
                fruit: self.fruit.clone(),
            }) as Arc<dyn CustomTraceType>
        })
    }
    fn equals(&self, other: &dyn CustomTraceType) -> bool {
        other
            .as_any()
            .downcast_ref::<FruitTraceType>()
            .is_some_and(|o| o.fruit.kind == self.fruit.kind)
    }
    fn hash_value(&self) -> u64 {
        self.fruit.kind as u64
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Arg for FruitWithTraceType {
    fn trace_type(&self) -> Result<TraceType> {
        Ok(TraceType::Custom(Arc::new(FruitTraceType {
            fruit: self.clone(),
        })))
    }
    fn flatten(&self, _out: &mut Vec<Tensor>) {}
    fn placeholder(ty: &TraceType) -> Result<Self> {
        match ty {
            TraceType::Custom(c) => c
                .as_any()
                .downcast_ref::<FruitTraceType>()
                .map(|t| t.fruit.clone())
                .ok_or_else(|| Error::Type(format!("not a FruitWithTraceType: {ty}"))),
            _ => Err(Error::Type(format!("not a FruitWithTraceType: {ty}"))),
        }
    }
}

#[test]
fn the_tracing_protocol_avoids_retracing_custom_objects() -> Result<()> {
    // get_mixed_flavor(fruit_a, fruit_b) = fruit_a.flavor + fruit_b.flavor
    let get_mixed_flavor = function(|a: Fruit, b: Fruit| &flavor(a.kind) + &flavor(b.kind));
    let y = get_mixed_flavor.call((Fruit::new(Kind::Apple), Fruit::new(Kind::Mango)))?;
    assert_eq!(y.to_vec::<i32>()?, vec![4, 6]);
    let y = get_mixed_flavor.call((Fruit::new(Kind::Apple), Fruit::new(Kind::Mango)))?;
    assert_eq!(y.to_vec::<i32>()?, vec![4, 6]);
    // New objects: a new trace each time.
    assert_eq!(get_mixed_flavor.tracing_count(), 2);
    // The same objects again: reused.
    let (apple, mango) = (Fruit::new(Kind::Apple), Fruit::new(Kind::Mango));
    get_mixed_flavor.call((apple.clone(), mango.clone()))?;
    get_mixed_flavor.call((apple, mango))?;
    assert_eq!(get_mixed_flavor.tracing_count(), 3);

    let get_mixed_flavor =
        function(|a: FruitWithTraceType, b: FruitWithTraceType| &flavor(a.kind) + &flavor(b.kind));
    let apple = || FruitWithTraceType { kind: Kind::Apple };
    let mango = || FruitWithTraceType { kind: Kind::Mango };
    // Traces a new concrete function...
    assert_eq!(
        get_mixed_flavor.call((apple(), mango()))?.to_vec::<i32>()?,
        vec![4, 6]
    );
    // ...and re-uses it for other fruits of the same kinds.
    assert_eq!(
        get_mixed_flavor.call((apple(), mango()))?.to_vec::<i32>()?,
        vec![4, 6]
    );
    assert_eq!(get_mixed_flavor.tracing_count(), 1);
    assert_eq!(
        get_mixed_flavor.call((mango(), mango()))?.to_vec::<i32>()?,
        vec![6, 8]
    );
    assert_eq!(
        get_mixed_flavor.call((apple(), apple()))?.to_vec::<i32>()?,
        vec![2, 4]
    );
    assert_eq!(get_mixed_flavor.tracing_count(), 3);
    Ok(())
}

#[test]
fn a_function_that_keeps_retracing_still_works() -> Result<()> {
    // Past five traces xlafn warns (through `tracing`) naming the argument
    // that changed; the calls themselves are unaffected.
    let f = FunctionOptions::new()
        .name("scaled")
        .arg_names(&["x", "n"])
        .build(|x: Tensor, n: i64| &x * n);
    for n in 0..8i64 {
        assert_eq!(
            f.call((Tensor::scalar(3i32), n))?.item::<i32>()?,
            3 * n as i32
        );
    }
    assert_eq!(f.tracing_count(), 8);
    Ok(())
}

#[test]
fn retracing_with_fewer_arg_names_than_parameters_does_not_panic() {
    let f = FunctionOptions::new()
        .arg_names(&["x"])
        .build(|x: Tensor, n: i64| &x * n);
    for n in 0..8i64 {
        // Either the call works or it reports a typed error; never a panic.
        match f.call((Tensor::scalar(3i32), n)) {
            Ok(y) => assert_eq!(y.item::<i32>().unwrap(), 3 * n as i32),
            Err(e) => assert!(matches!(e, Error::Type(_) | Error::Value(_)), "{e:?}"),
        }
    }
}

/// A function with an input_signature, called while another function
/// is traced with a compatible but less specific tensor, binds it as
/// TensorFlow does: the inner trace sees the signature's shape, and a
/// concrete shape that turns out incompatible is an error when the program
/// is specialized.
#[test]
fn a_less_specific_traced_tensor_binds_to_an_input_signature() -> Result<()> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let inner = FunctionOptions::new()
        .name("inner")
        .input_signature(vec![TensorSpec::new(&[Some(1)], DType::F32)])
        .build({
            let seen = seen.clone();
            move |x: Tensor| {
                seen.lock().unwrap().push(x.shape().to_string());
                &x * 2.0
            }
        });
    for outer_spec in [
        TensorSpec::new(&[None], DType::F32),
        TensorSpec::unknown_rank(DType::F32),
    ] {
        let outer = FunctionOptions::new()
            .input_signature(vec![outer_spec])
            .build({
                let inner = inner.clone();
                move |x: Tensor| inner.call((&x,))
            });
        let y = outer.call((Tensor::vector(&[5f32])?,))?;
        assert_eq!(y.to_vec::<f32>()?, [10.0]);
        // The traced result has the signature's shape.
        let cf = outer.get_concrete_function((Tensor::vector(&[5f32])?,))?;
        assert!(
            cf.function_type()
                .ends_with("TensorSpec(shape=(1,), dtype=f32, name=None)"),
            "{}",
            cf.function_type()
        );
        // A concrete shape the signature does not allow fails when the
        // program is specialized, naming both shapes.
        let e = outer.call((Tensor::vector(&[1f32, 2.])?,)).unwrap_err();
        assert!(
            e.to_string()
                .contains("Shape of tensor f32(2,) is not compatible with expected shape (1,)"),
            "{e}"
        );
    }
    // The inner function traced once, and saw the signature's shape.
    assert_eq!(inner.tracing_count(), 1);
    assert_eq!(*seen.lock().unwrap(), vec!["(1,)".to_string()]);
    // A dtype mismatch is still the binding error.
    let wrong = function({
        let inner = inner.clone();
        move |x: Tensor| inner.call((&x,))
    });
    let e = wrong.call((Tensor::vector(&[1i32])?,)).unwrap_err();
    assert!(e.to_string().contains("Can not cast"), "{e}");
    // Outside a trace a less specific spec does not bind (TensorFlow's
    // TypeError for get_concrete_function).
    let e = inner
        .get_concrete_function((TensorSpec::new(&[None], DType::F32),))
        .map(|_| ())
        .unwrap_err();
    assert!(e.to_string().contains("Can not cast"), "{e}");
    Ok(())
}
