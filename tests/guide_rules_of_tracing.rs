//! The guide's "Rules of tracing" section: which argument changes make a
//! `Function` trace again. Tensors are typed by dtype and
//! shape, host literals by value, tuples and lists by their element types in
//! order, maps by key regardless of insertion order, `Option`s by
//! None/Some, plain user values by equality (`ByValue`), and user types by
//! their own trace type (`CustomTraceType`).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use xlafn::function::{Arg, ByValue, CustomTraceType, TraceType};
use xlafn::prelude::*;

/// A shared log of what the closure saw while tracing.
fn log() -> Arc<Mutex<Vec<String>>> {
    Arc::new(Mutex::new(Vec::new()))
}

fn entries(log: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    log.lock().unwrap().clone()
}

#[test]
fn tensors_are_typed_by_dtype_and_shape() -> Result<()> {
    let seen = log();
    let s = seen.clone();
    let f = function(move |x: Tensor| {
        s.lock()
            .unwrap()
            .push(format!("{} {}", x.dtype(), x.shape()));
        &x * 2i64
    });
    assert_eq!(
        f.call((Tensor::vector(&[1f32, 2.])?,))?.to_vec::<f32>()?,
        vec![2., 4.]
    );
    // Same dtype and shape, other values: reused.
    assert_eq!(
        f.call((Tensor::vector(&[-3f32, 0.5])?,))?.to_vec::<f32>()?,
        vec![-6., 1.]
    );
    assert_eq!(f.tracing_count(), 1);
    // Another length, another dtype, another rank: a trace each.
    assert_eq!(
        f.call((Tensor::vector(&[1f32, 2., 3.])?,))?
            .to_vec::<f32>()?,
        vec![2., 4., 6.]
    );
    assert_eq!(
        f.call((Tensor::vector(&[7i32, 8])?,))?.to_vec::<i32>()?,
        vec![14, 16]
    );
    assert_eq!(
        f.call((Tensor::from_vec(vec![1f32, 2.], &[1, 2])?,))?
            .to_vec::<f32>()?,
        vec![2., 4.]
    );
    // A scalar and a one-element vector differ too.
    assert_eq!(f.call((Tensor::scalar(4f32),))?.item::<f32>()?, 8.0);
    assert_eq!(
        f.call((Tensor::vector(&[4f32])?,))?.to_vec::<f32>()?,
        vec![8.0]
    );
    assert_eq!(f.tracing_count(), 6);
    assert_eq!(
        entries(&seen),
        vec![
            "f32 (2,)",
            "f32 (3,)",
            "i32 (2,)",
            "f32 (1, 2)",
            "f32 ()",
            "f32 (1,)"
        ]
    );
    // All earlier types are still cached.
    f.call((Tensor::vector(&[0f32, 0.])?,))?;
    f.call((Tensor::vector(&[0i32, 0])?,))?;
    assert_eq!(f.tracing_count(), 6);
    Ok(())
}

#[test]
fn literals_are_typed_by_value() -> Result<()> {
    let seen = log();
    let s = seen.clone();
    let f = function(
        move |x: Tensor, n: i64, scale: f64, negate: bool, tag: String| {
            s.lock()
                .unwrap()
                .push(format!("{n} {scale} {negate} {tag}"));
            let y = &x * n * scale;
            if negate { -y } else { y }
        },
    );
    let x = Tensor::scalar(2f32);
    let call = |n: i64, scale: f64, negate: bool, tag: &str| -> Result<f32> {
        f.call((&x, n, scale, negate, tag.to_string()))?
            .item::<f32>()
    };
    assert_eq!(call(3, 0.5, false, "a")?, 3.0);
    assert_eq!(call(3, 0.5, false, "a")?, 3.0);
    assert_eq!(f.tracing_count(), 1);
    // Each literal that changes value retraces.
    assert_eq!(call(4, 0.5, false, "a")?, 4.0);
    assert_eq!(call(4, 0.25, false, "a")?, 2.0);
    assert_eq!(call(4, 0.25, true, "a")?, -2.0);
    assert_eq!(call(4, 0.25, true, "b")?, -2.0);
    assert_eq!(f.tracing_count(), 5);
    // Going back to an earlier value reuses its trace.
    assert_eq!(call(3, 0.5, false, "a")?, 3.0);
    assert_eq!(call(4, 0.25, true, "a")?, -2.0);
    assert_eq!(f.tracing_count(), 5);
    assert_eq!(
        entries(&seen),
        vec![
            "3 0.5 false a",
            "4 0.5 false a",
            "4 0.25 false a",
            "4 0.25 true a",
            "4 0.25 true b",
        ]
    );
    // Literals appear in the signature by value.
    let c = &f.concrete_functions()[0];
    assert_eq!(
        c.function_type(),
        "(a: TensorSpec(shape=(), dtype=f32, name=None), b: Literal[3], c: Literal[0.5], \
         d: Literal[False], e: Literal['a']) -> TensorSpec(shape=(), dtype=f32, name=None)"
    );
    Ok(())
}

#[test]
fn other_literal_kinds_are_typed_by_value() -> Result<()> {
    let f = function(|x: Tensor, k: i32, j: usize, w: f32, name: &'static str| {
        let y = &x * (k as i64) + (j as i64) + (w as f64);
        (y, name.len() as i64)
    });
    let x = Tensor::scalar(1.0f32);
    let (y, len) = f.call((&x, 2i32, 3usize, 0.5f32, "abc"))?;
    assert_eq!(y.item::<f32>()?, 5.5);
    assert_eq!(len, 3);
    f.call((&x, 2i32, 3usize, 0.5f32, "abc"))?;
    assert_eq!(f.tracing_count(), 1);
    let (y, len) = f.call((&x, 2i32, 3usize, 0.5f32, "hello"))?;
    assert_eq!((y.item::<f32>()?, len), (5.5, 5));
    f.call((&x, 1i32, 3usize, 0.5f32, "abc"))?;
    f.call((&x, 2i32, 4usize, 0.5f32, "abc"))?;
    let (y, _) = f.call((&x, 2i32, 3usize, 1.5f32, "abc"))?;
    assert_eq!(y.item::<f32>()?, 6.5);
    assert_eq!(f.tracing_count(), 5);
    Ok(())
}

#[test]
fn tuples_and_lists_are_typed_by_element_types_in_order() -> Result<()> {
    let pair = function(|p: (Tensor, Tensor)| {
        let (a, b) = p;
        let a = a.cast(DType::F32).unwrap();
        let b = b.cast(DType::F32).unwrap();
        a - b
    });
    let fi = || (Tensor::scalar(5f32), Tensor::scalar(2i32));
    assert_eq!(pair.call((fi(),))?.item::<f32>()?, 3.0);
    assert_eq!(pair.call((fi(),))?.item::<f32>()?, 3.0);
    assert_eq!(pair.tracing_count(), 1);
    // The same element types in the other order: a new type.
    let r = pair.call(((Tensor::scalar(2i32), Tensor::scalar(5f32)),))?;
    assert_eq!(r.item::<f32>()?, -3.0);
    assert_eq!(pair.tracing_count(), 2);

    let total = function(|xs: Vec<Tensor>| {
        xs.iter().fold(Tensor::scalar(0f32), |acc, x| {
            acc + x.cast(DType::F32).unwrap()
        })
    });
    let list = |v: &[f32]| v.iter().map(|&x| Tensor::scalar(x)).collect::<Vec<_>>();
    assert_eq!(total.call((list(&[1., 2.]),))?.item::<f32>()?, 3.0);
    assert_eq!(total.call((list(&[10., 20.]),))?.item::<f32>()?, 30.0);
    assert_eq!(total.tracing_count(), 1);
    // Another length.
    assert_eq!(total.call((list(&[1., 2., 3.]),))?.item::<f32>()?, 6.0);
    assert_eq!(total.tracing_count(), 2);
    // Same length, other element types: f32 then i32 vs i32 then f32.
    let mixed = vec![Tensor::scalar(1f32), Tensor::scalar(2i32)];
    let swapped = vec![Tensor::scalar(1i32), Tensor::scalar(2f32)];
    assert_eq!(total.call((mixed,))?.item::<f32>()?, 3.0);
    assert_eq!(total.call((swapped,))?.item::<f32>()?, 3.0);
    assert_eq!(total.tracing_count(), 4);
    assert_eq!(total.call((list(&[5., 5.]),))?.item::<f32>()?, 10.0);
    assert_eq!(total.tracing_count(), 4);

    // Lists of literals are typed by their values.
    let poly = function(|x: Tensor, coeffs: Vec<i64>| {
        coeffs
            .iter()
            .rev()
            .fold(x.zeros_like().unwrap(), |acc, &c| acc * &x + c)
    });
    let x = Tensor::scalar(2i32);
    // 1 + 2x + 3x^2 at x=2: 17.
    assert_eq!(poly.call((&x, vec![1i64, 2, 3]))?.item::<i32>()?, 17);
    assert_eq!(poly.call((&x, vec![1i64, 2, 3]))?.item::<i32>()?, 17);
    assert_eq!(poly.tracing_count(), 1);
    // 3 + 2x + x^2 at x=2: 11.
    assert_eq!(poly.call((&x, vec![3i64, 2, 1]))?.item::<i32>()?, 11);
    assert_eq!(poly.tracing_count(), 2);
    Ok(())
}

#[test]
fn maps_are_typed_by_key_regardless_of_insertion_order() -> Result<()> {
    let f = function(|m: HashMap<String, Tensor>| &m["a"] - &m["b"]);
    let mut ab_order = HashMap::new();
    ab_order.insert("a".to_string(), Tensor::scalar(1i32));
    ab_order.insert("b".to_string(), Tensor::scalar(10i32));
    assert_eq!(f.call((ab_order,))?.item::<i32>()?, -9);
    // Insertion order b, a; many entries so the hash order varies too.
    for i in 0..5i32 {
        let mut ba = HashMap::new();
        ba.insert("b".to_string(), Tensor::scalar(i));
        ba.insert("a".to_string(), Tensor::scalar(100 + i));
        assert_eq!(f.call((ba,))?.item::<i32>()?, 100);
    }
    assert_eq!(f.tracing_count(), 1);
    // A value of another type under the same key: a new trace.
    let mut wide = HashMap::new();
    wide.insert("a".to_string(), Tensor::vector(&[1i32, 2])?);
    wide.insert("b".to_string(), Tensor::scalar(1i32));
    assert_eq!(f.call((wide,))?.to_vec::<i32>()?, vec![0, 1]);
    assert_eq!(f.tracing_count(), 2);

    // The same with BTreeMap, and an extra key retraces.
    let g = function(|m: BTreeMap<String, Tensor>| {
        m.values()
            .fold(Tensor::scalar(0i32), |acc, t| acc * 10i64 + t)
    });
    let make = |pairs: &[(&str, i32)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Tensor::scalar(*v)))
            .collect::<BTreeMap<_, _>>()
    };
    // Values are combined in key order: a, b, c.
    assert_eq!(g.call((make(&[("b", 2), ("a", 1)]),))?.item::<i32>()?, 12);
    assert_eq!(g.call((make(&[("a", 3), ("b", 4)]),))?.item::<i32>()?, 34);
    assert_eq!(g.tracing_count(), 1);
    assert_eq!(
        g.call((make(&[("c", 3), ("a", 1), ("b", 2)]),))?
            .item::<i32>()?,
        123
    );
    assert_eq!(g.tracing_count(), 2);
    // Other keys, same count: a new type.
    assert_eq!(g.call((make(&[("a", 1), ("z", 9)]),))?.item::<i32>()?, 19);
    assert_eq!(g.tracing_count(), 3);
    Ok(())
}

#[test]
fn none_and_some_are_different_types() -> Result<()> {
    let seen = log();
    let s = seen.clone();
    let f = function(move |x: Tensor, bias: Option<Tensor>| {
        s.lock()
            .unwrap()
            .push(if bias.is_some() { "Some" } else { "None" }.to_string());
        match bias {
            Some(b) => &x + &b,
            None => x,
        }
    });
    let x = Tensor::vector(&[1f32, 2.])?;
    assert_eq!(f.call((&x, None))?.to_vec::<f32>()?, vec![1., 2.]);
    assert_eq!(
        f.call((&x, Some(Tensor::vector(&[10f32, 20.])?)))?
            .to_vec::<f32>()?,
        vec![11., 22.]
    );
    assert_eq!(f.call((&x, None))?.to_vec::<f32>()?, vec![1., 2.]);
    assert_eq!(
        f.call((&x, Some(Tensor::vector(&[-1f32, -1.])?)))?
            .to_vec::<f32>()?,
        vec![0., 1.]
    );
    assert_eq!(f.tracing_count(), 2);
    // Some of another type traces again.
    assert_eq!(
        f.call((&x, Some(Tensor::scalar(0.5f32))))?
            .to_vec::<f32>()?,
        vec![1.5, 2.5]
    );
    assert_eq!(f.tracing_count(), 3);
    assert_eq!(entries(&seen), vec!["None", "Some", "Some"]);
    Ok(())
}

/// A plain configuration object: no tracing rules of its own.
#[derive(Clone, Debug, PartialEq, Hash)]
struct Config {
    factor: i64,
    name: String,
}

#[test]
fn plain_objects_are_typed_by_equality() -> Result<()> {
    let seen = log();
    let s = seen.clone();
    let f = function(move |x: Tensor, cfg: ByValue<Config>| {
        s.lock().unwrap().push(cfg.0.name.clone());
        &x * cfg.0.factor
    });
    let cfg = |factor, name: &str| {
        ByValue(Config {
            factor,
            name: name.to_string(),
        })
    };
    let x = Tensor::vector(&[1i32, 2])?;
    assert_eq!(f.call((&x, cfg(3, "three")))?.to_vec::<i32>()?, vec![3, 6]);
    // An equal (not identical) object reuses the trace.
    assert_eq!(f.call((&x, cfg(3, "three")))?.to_vec::<i32>()?, vec![3, 6]);
    assert_eq!(f.tracing_count(), 1);
    // Any field that differs retraces, even one the body barely uses.
    assert_eq!(f.call((&x, cfg(3, "THREE")))?.to_vec::<i32>()?, vec![3, 6]);
    assert_eq!(f.call((&x, cfg(4, "four")))?.to_vec::<i32>()?, vec![4, 8]);
    assert_eq!(f.tracing_count(), 3);
    assert_eq!(entries(&seen), vec!["three", "THREE", "four"]);
    Ok(())
}

// ------------------------------------------------ a user tracing protocol

/// A user type carrying a tensor and configuration. Its trace type keeps
/// the tensor's spec and `factor`, and ignores `note` (a label for humans),
/// like the guide's `FruitTraceType` keeps the fruit but compares by class.
#[derive(Clone, Debug)]
struct Scaled {
    x: Tensor,
    factor: i64,
    note: String,
}

struct ScaledType {
    spec: TensorSpec,
    factor: i64,
    /// The note of the value this type was made from; not part of the type.
    note: String,
}

impl ScaledType {
    fn of(other: &dyn CustomTraceType) -> Option<&ScaledType> {
        other.as_any().downcast_ref::<ScaledType>()
    }
}

impl CustomTraceType for ScaledType {
    fn type_name(&self) -> &'static str {
        "Scaled"
    }
    fn is_subtype_of(&self, other: &dyn CustomTraceType) -> bool {
        ScaledType::of(other)
            .is_some_and(|o| self.factor == o.factor && self.spec.is_subtype_of(&o.spec))
    }
    fn most_specific_common_supertype(
        &self,
        other: &dyn CustomTraceType,
    ) -> Option<Arc<dyn CustomTraceType>> {
        let o = ScaledType::of(other)?;
        if self.factor != o.factor {
            return None;
        }
        Some(Arc::new(ScaledType {
            spec: self.spec.common_supertype(&o.spec)?,
            factor: self.factor,
            note: self.note.clone(),
        }))
    }
    fn equals(&self, other: &dyn CustomTraceType) -> bool {
        ScaledType::of(other).is_some_and(|o| self.factor == o.factor && self.spec == o.spec)
    }
    fn hash_value(&self) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        // Only has to agree with `equals`: the note is left out.
        BuildHasherDefault::<DefaultHasher>::default().hash_one((&self.spec, self.factor))
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Signatures print custom types with `Debug`.
impl fmt::Debug for ScaledType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scaled[{}, factor={}]", self.spec, self.factor)
    }
}

impl Arg for Scaled {
    fn trace_type(&self) -> Result<TraceType> {
        let TraceType::Tensor(spec) = self.x.trace_type()? else {
            unreachable!("a tensor's trace type is a TensorSpec")
        };
        Ok(TraceType::Custom(Arc::new(ScaledType {
            spec,
            factor: self.factor,
            note: self.note.clone(),
        })))
    }
    fn flatten(&self, out: &mut Vec<Tensor>) {
        self.x.flatten(out);
    }
    fn placeholder(ty: &TraceType) -> Result<Self> {
        let TraceType::Custom(c) = ty else {
            return Err(Error::Type(format!("expected a Scaled type, got {ty}")));
        };
        let t = ScaledType::of(c.as_ref())
            .ok_or_else(|| Error::Type(format!("expected a Scaled type, got {ty}")))?;
        Ok(Scaled {
            x: Tensor::placeholder(&TraceType::Tensor(t.spec.clone()))?,
            factor: t.factor,
            note: t.note.clone(),
        })
    }
}

fn scaled(x: &[i32], factor: i64, note: &str) -> Scaled {
    Scaled {
        x: Tensor::vector(x).unwrap(),
        factor,
        note: note.to_string(),
    }
}

type ScaledFn = Function<(Scaled,), Tensor>;

fn scale_function(reduce_retracing: bool) -> (ScaledFn, Arc<Mutex<Vec<String>>>) {
    let seen = log();
    let s = seen.clone();
    let f = FunctionOptions::new()
        .name("scale")
        .reduce_retracing(reduce_retracing)
        .build(move |s_: Scaled| -> Result<Tensor> {
            s.lock()
                .unwrap()
                .push(format!("{} {} x{}", s_.note, s_.x.shape(), s_.factor));
            s_.x.mul_scalar(s_.factor)
        });
    (f, seen)
}

#[test]
fn a_user_trace_type_decides_what_retraces() -> Result<()> {
    let (f, seen) = scale_function(false);
    assert_eq!(
        f.call((scaled(&[1, 2], 3, "first"),))?.to_vec::<i32>()?,
        vec![3, 6]
    );
    // The note is not part of the type: no retrace, and the closure sees the
    // traced value's note only at trace time.
    assert_eq!(
        f.call((scaled(&[5, 7], 3, "second"),))?.to_vec::<i32>()?,
        vec![15, 21]
    );
    assert_eq!(f.tracing_count(), 1);
    // The factor is: a new trace.
    assert_eq!(
        f.call((scaled(&[5, 7], -1, "third"),))?.to_vec::<i32>()?,
        vec![-5, -7]
    );
    // And so is the tensor's shape.
    assert_eq!(
        f.call((scaled(&[1, 2, 3], 3, "fourth"),))?
            .to_vec::<i32>()?,
        vec![3, 6, 9]
    );
    assert_eq!(f.tracing_count(), 3);
    assert_eq!(
        entries(&seen),
        vec!["first (2,) x3", "third (2,) x-1", "fourth (3,) x3"]
    );
    assert_eq!(
        f.concrete_functions()[0].input_types()[0].to_string(),
        "Scaled[TensorSpec(shape=(2,), dtype=i32, name=None), factor=3]"
    );
    Ok(())
}

#[test]
fn a_user_trace_type_takes_part_in_subtype_dispatch() -> Result<()> {
    // Under reduce_retracing the user's most_specific_common_supertype
    // generalizes [2] and [3] to [None]; calls then go to the most specific
    // cached type they fit.
    let (f, seen) = scale_function(true);
    assert_eq!(
        f.call((scaled(&[1, 2], 2, "a"),))?.to_vec::<i32>()?,
        vec![2, 4]
    );
    assert_eq!(
        f.call((scaled(&[1, 2, 3], 2, "b"),))?.to_vec::<i32>()?,
        vec![2, 4, 6]
    );
    assert_eq!(f.tracing_count(), 2);
    assert_eq!(entries(&seen), vec!["a (2,) x2", "b (None,) x2"]);
    let cfs = f.concrete_functions();
    let (exact, general) = (&cfs[0], &cfs[1]);
    assert_eq!((exact.compile_count(), general.compile_count()), (1, 1));

    // Length 4 fits only the general trace: compiled, not traced.
    assert_eq!(
        f.call((scaled(&[1, 2, 3, 4], 2, "c"),))?.to_vec::<i32>()?,
        vec![2, 4, 6, 8]
    );
    assert_eq!((exact.compile_count(), general.compile_count()), (1, 2));
    // Length 2 fits both; the more specific [2] trace serves it.
    assert_eq!(
        f.call((scaled(&[9, 9], 2, "d"),))?.to_vec::<i32>()?,
        vec![18, 18]
    );
    assert_eq!((exact.compile_count(), general.compile_count()), (1, 2));
    assert_eq!(f.tracing_count(), 2);

    // A different factor has no common supertype with the cached ones.
    assert_eq!(
        f.call((scaled(&[1, 2], 5, "e"),))?.to_vec::<i32>()?,
        vec![5, 10]
    );
    assert_eq!(f.tracing_count(), 3);
    assert_eq!(entries(&seen).last().unwrap(), "e (2,) x5");
    Ok(())
}

#[test]
fn separate_functions_never_share_traces() -> Result<()> {
    let body = |x: Tensor| &x + 1i64;
    let f = function(body);
    let g = function(body);
    let x = Tensor::scalar(1i32);
    assert_eq!(f.call((&x,))?.item::<i32>()?, 2);
    assert_eq!(g.call((&x,))?.item::<i32>()?, 2);
    assert_eq!(f.tracing_count(), 1);
    assert_eq!(g.tracing_count(), 1);
    assert_eq!(g.call((&x,))?.item::<i32>()?, 2);
    assert_eq!(g.tracing_count(), 1);

    // A clone is the same function: it shares the cache.
    let f2 = f.clone();
    assert_eq!(f2.call((Tensor::scalar(41i32),))?.item::<i32>()?, 42);
    assert_eq!(f.tracing_count(), 1);
    assert_eq!(f2.tracing_count(), 1);

    // Making a fresh Function for every call traces every time (the
    // guide's warning about creating functions in a loop).
    for v in 0..3i32 {
        let fresh = function(body);
        assert_eq!(fresh.call((Tensor::scalar(v),))?.item::<i32>()?, v + 1);
        assert_eq!(fresh.tracing_count(), 1);
    }
    Ok(())
}
