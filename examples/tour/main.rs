//! The xlafn tour: the guide "Better performance with tf.function", walked
//! through in Rust. Each section prints what the guide prints, with Rust
//! spellings: eager tensors and ops, then functions (basics, tracing, the
//! rules of tracing, controlling retracing, concrete functions, graphs,
//! debugging) and the limitations about captured host values, objects,
//! leaked tensors and recursion. Control flow, variables and gradients
//! arrive with the features that make them possible; devices and
//! sharding close the tour.
//!
//! `cargo run --release --example tour`

#[path = "../common/logging.rs"]
mod logging;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use xlafn::ArraySpec;
use xlafn::function::{Arg, ByValue};
use xlafn::prelude::*;

mod control_flow;
mod devices;
mod gradients;
mod state;

pub(crate) fn section(title: &str) {
    println!("\n== {title} ==");
}

fn eager_tensors() -> Result<()> {
    section("Eager tensors");
    let a = Tensor::from_vec(vec![4i32, 1], &[2])?;
    println!("{a}");
    let b = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2])?;
    println!("{b}");
    println!("{}", Tensor::scalar(2.0f32));
    println!("{}", Tensor::vector(&[true, false])?);
    println!("shape={} dtype={} rank={}", b.shape(), b.dtype(), b.rank());
    Ok(())
}

fn eager_ops() -> Result<()> {
    section("Ops run eagerly, one XLA program each");
    let x = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2])?;
    let y = Tensor::from_vec(vec![10f32, 20.], &[2])?;
    println!("x + y (broadcast) = {}", &x + &y);
    println!("x * 2.0 = {}", &x * 2.0);
    println!("1.0 - x = {}", 1.0 - &x);
    println!("tanh(x) = {}", x.tanh()?);
    println!("x > 2 = {}", x.gt_scalar(2.0)?);
    let i = Tensor::vector(&[7i32, -7, 7, -7])?;
    let j = Tensor::vector(&[2i32, 2, -2, -2])?;
    println!("floordiv (Python //) = {}", i.floordiv(&j)?);
    println!("floormod (Python %)  = {}", &i % &j);
    println!("true division of ints = {}", i.div(&j)?);
    let stats = xlafn::tensor::eager_cache_stats();
    println!("eager programs compiled so far: {}", stats.compiles);
    Ok(())
}

fn errors() {
    section("Errors name the op and the operands");
    let a = Tensor::from_vec(vec![1f32, 2.], &[2]).unwrap();
    let b = Tensor::from_vec(vec![1i32, 2], &[2]).unwrap();
    println!("{}", a.add(&b).unwrap_err());
    let c = Tensor::from_vec(vec![1f32, 2., 3.], &[3]).unwrap();
    println!("{}", a.mul(&c).unwrap_err());
    println!("{}", Tensor::from_strings(&["hello"]).unwrap_err());
}

/// Many small ops: 50 times `x = tanh(x) * 0.5 + 0.1` (150 ops once traced).
fn small_ops(x: Tensor) -> Result<Tensor> {
    let mut x = x;
    for _ in 0..50 {
        x = x.tanh()? * 0.5 + 0.1;
    }
    Ok(x)
}

fn basics() -> Result<()> {
    section("Basics");
    // @tf.function
    // def add(a, b): return a + b
    let add = FunctionOptions::new()
        .name("add")
        .build(|a: Tensor, b: Tensor| a + b);
    let ones = |dims: &[i64]| Tensor::ones(dims, DType::F32);
    println!("{}", add.call((ones(&[2, 2]), ones(&[2, 2])))?);

    // A function can be used inside other functions: its graph is inlined.
    // @tf.function
    // def dense_layer(x, w, b): return add(tf.matmul(x, w), b)
    let dense_layer = FunctionOptions::new().name("dense_layer").build({
        let add = add.clone();
        move |x: Tensor, w: Tensor, b: Tensor| add.call((x.matmul(&w)?, b))
    });
    println!(
        "{}",
        dense_layer.call((ones(&[3, 2]), ones(&[2, 2]), ones(&[2])))?
    );

    // Functions can be faster than eager code with many small ops.
    let x = Tensor::random_normal(&[1000], 1, DType::F32)?;
    let fast = FunctionOptions::new().name("small_ops").build(small_ops);
    small_ops(x.clone())?.block_until_ready()?;
    fast.call((&x,))?.block_until_ready()?;
    let time10 = |f: &dyn Fn() -> Result<Tensor>| -> Result<f64> {
        let start = Instant::now();
        for _ in 0..10 {
            f()?.block_until_ready()?;
        }
        Ok(start.elapsed().as_secs_f64())
    };
    let eager = time10(&|| small_ops(x.clone()))?;
    let graph = time10(&|| fast.call((&x,)))?;
    println!("Eager small ops (10 runs): {eager:.6} s");
    println!("Function small ops (10 runs): {graph:.6} s");
    println!(
        "The function runs one fused XLA program per call instead of 150 programs ({:.0}x faster here)",
        eager / graph
    );
    Ok(())
}

/// `@tf.function def double(a): print("Tracing with", a); return a + a`
fn double_function() -> Function<(Tensor,), Tensor> {
    FunctionOptions::new().name("double").build(|a: Tensor| {
        println!("Tracing with {a}");
        &a + &a
    })
}

fn tracing(double: &Function<(Tensor,), Tensor>) -> Result<()> {
    section("Tracing");
    // A Function traces its closure once per new input type: Rust code in
    // the closure (the println!) runs only while tracing.
    println!("{}", double.call((Tensor::scalar(1i32),))?);
    println!();
    println!("{}", double.call((Tensor::scalar(1.1f32),))?);
    println!();
    // TensorFlow's third call uses a string tensor; XLA cannot compile
    // strings, and xlafn says so when the tensor is made.
    println!("{}", Tensor::from_strings(&["a"]).unwrap_err());
    println!();
    // The same type again: no trace, the cached graph just runs.
    println!("{}", double.call((Tensor::scalar(2i32),))?);
    println!("tracing_count = {}", double.tracing_count());
    println!();
    print!("{}", double.pretty_printed_concrete_signatures());
    Ok(())
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Fruit {
    Apple,
    Mango,
}

impl Fruit {
    fn flavor(&self) -> Result<Tensor> {
        match self {
            Fruit::Apple => Tensor::vector(&[1i32, 2]),
            Fruit::Mango => Tensor::vector(&[3i32, 4]),
        }
    }
}

fn rules_of_tracing() -> Result<()> {
    section("Rules of tracing");
    // Each argument has a trace type: tensors by dtype and shape, host
    // literals by value, containers by their elements, maps regardless of
    // insertion order, user types by their own rules.
    let t = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2])?;
    println!("tensor       -> {}", t.trace_type()?);
    println!("2i64         -> {}", 2i64.trace_type()?);
    println!("0.5f64       -> {}", 0.5f64.trace_type()?);
    println!("\"relu\"       -> {}", "relu".trace_type()?);
    println!("(tensor, 3)  -> {}", (t.clone(), 3i64).trace_type()?);
    println!("vec![1, 2]   -> {}", vec![1i64, 2].trace_type()?);
    println!("None::<i64>  -> {}", None::<i64>.trace_type()?);
    let mut ab = HashMap::new();
    ab.insert("a".to_string(), Tensor::scalar(1f32));
    ab.insert("b".to_string(), Tensor::scalar(2i32));
    let mut ba = HashMap::new();
    ba.insert("b".to_string(), Tensor::scalar(2i32));
    ba.insert("a".to_string(), Tensor::scalar(1f32));
    println!("{{a, b}}       -> {}", ab.trace_type()?);
    println!(
        "{{b, a}} has the same type: {}",
        ab.trace_type()? == ba.trace_type()?
    );

    // Literals are part of the type: a new value retraces.
    let scale = FunctionOptions::new()
        .name("scale")
        .build(|x: Tensor, n: i64| {
            println!("Tracing scale with n = {n}");
            x * n
        });
    let x = Tensor::vector(&[1f32, 2.])?;
    println!("{}", scale.call((&x, 2i64))?);
    println!("{}", scale.call((Tensor::vector(&[5f32, 6.])?, 2i64))?);
    println!("{}", scale.call((&x, 3i64))?);
    println!("scale traced {} times", scale.tracing_count());

    // Maps are typed by key -> type regardless of insertion order.
    let sum = FunctionOptions::new()
        .name("sum")
        .build(|m: HashMap<String, Tensor>| {
            println!("Tracing sum");
            m["a"].add(&m["b"].cast(DType::F32)?)
        });
    println!("{}", sum.call((ab,))?);
    println!("{}", sum.call((ba,))?);
    println!("sum traced {} time(s)", sum.tracing_count());
    Ok(())
}

fn controlling_retracing() -> Result<()> {
    section("Controlling retracing");
    println!("-- Pass a fixed input_signature");
    // @tf.function(input_signature=(tf.TensorSpec(shape=[None], dtype=tf.int32),))
    // def next_collatz(x): return tf.where(x % 2 == 0, x // 2, 3 * x + 1)
    let next_collatz = FunctionOptions::new()
        .name("next_collatz")
        .arg_names(&["x"])
        .input_signature(vec![TensorSpec::new(&[None], DType::I32)])
        .build(|x: Tensor| {
            println!("Tracing with {x}");
            where_(
                &(&x % 2).eq_scalar(0)?,
                &x.floordiv_scalar(2)?,
                &(3 * &x + 1),
            )
        });
    println!("{}", next_collatz.call((Tensor::vector(&[1i32, 2])?,))?);
    // A 2-D tensor does not fit the 1-D signature.
    let matrix = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2])?;
    println!("{}", next_collatz.call((matrix,)).unwrap_err());
    // A float tensor does not fit the int32 signature.
    let floats = Tensor::vector(&[1f32, 2.])?;
    println!("{}", next_collatz.call((floats,)).unwrap_err());

    println!("-- Use unknown dimensions for flexibility");
    let g = FunctionOptions::new()
        .name("g")
        .input_signature(vec![TensorSpec::new(&[None], DType::I32)])
        .build(|x: Tensor| {
            println!("Tracing with {x}");
            x
        });
    // No retrace!
    println!("{}", g.call((Tensor::vector(&[1i32, 2, 3])?,))?);
    println!("{}", g.call((Tensor::vector(&[1i32, 2, 3, 4, 5])?,))?);
    println!(
        "traces: {}, compiles: {} (XLA needs static shapes: one compile per length)",
        g.tracing_count(),
        g.compile_count()
    );

    println!("-- Use reduce_retracing");
    let g = FunctionOptions::new()
        .name("g")
        .reduce_retracing(true)
        .build(|x: Tensor| {
            println!("Tracing with {x}");
            x
        });
    // Traces once.
    println!("{}", g.call((Tensor::vector(&[1i32, 2, 3])?,))?);
    // Traces again, but more generalized this time.
    println!("{}", g.call((Tensor::vector(&[1i32, 2, 3, 4, 5])?,))?);
    // No more tracing!
    println!("{}", g.call((Tensor::vector(&[1i32, 2, 3, 4, 5, 6, 7])?,))?);
    println!(
        "{}",
        g.call((Tensor::vector(&[1i32, 2, 3, 4, 5, 6, 7, 8, 9])?,))?
    );
    println!("traces: {}", g.tracing_count());

    println!("-- Pass tensors instead of host literals");
    let train_literal = FunctionOptions::new()
        .name("train")
        .build(|num_steps: i64| {
            println!("Tracing with num_steps = {num_steps}");
            Tensor::fill(&[], num_steps, DType::I32)
        });
    // A `Tensor` parameter turns host numbers into tensors.
    let train_tensor = FunctionOptions::new()
        .name("train")
        .build(|num_steps: Tensor| {
            println!("Tracing with num_steps = {num_steps}");
            num_steps
        });
    println!("Retracing occurs for different host literal arguments.");
    for n in [10i64, 20] {
        let steps = train_literal.call((n,))?.item::<i32>()?;
        println!("Executing with num_steps = {steps}");
    }
    println!();
    println!("Traces are reused for Tensor arguments.");
    for n in [10i64, 20] {
        let steps = train_tensor.call((n,))?.item::<i32>()?;
        println!("Executing with num_steps = {steps}");
    }
    println!(
        "literal version traced {} times, tensor version {} time",
        train_literal.tracing_count(),
        train_tensor.tracing_count()
    );

    println!("-- Use the tracing protocol (user types)");
    // ByValue types a user value by equality: equal values share a trace,
    // which is what TensorFlow's `__tf_tracing_type__` example builds.
    let get_mixed_flavor = FunctionOptions::new().name("get_mixed_flavor").build(
        |a: ByValue<Fruit>, b: ByValue<Fruit>| {
            println!("Tracing get_mixed_flavor({:?}, {:?})", a.0, b.0);
            a.0.flavor()?.add(&b.0.flavor()?)
        },
    );
    println!(
        "{}",
        get_mixed_flavor.call((ByValue(Fruit::Apple), ByValue(Fruit::Mango)))?
    );
    println!(
        "{}",
        get_mixed_flavor.call((ByValue(Fruit::Apple), ByValue(Fruit::Mango)))?
    );
    println!("traces: {}", get_mixed_flavor.tracing_count());
    Ok(())
}

fn concrete_functions(double: &Function<(Tensor,), Tensor>) -> Result<()> {
    section("Obtaining concrete functions");
    println!("Obtaining concrete trace");
    // The guide uses strings; xlafn uses f32 (already traced above, so no
    // new trace happens here).
    let double_f32 = double.get_concrete_function((Tensor::scalar(1f32),))?;
    println!("Executing traced function");
    println!("{}", double_f32.call((Tensor::scalar(1f32),))?);
    println!("{}", double_f32.call((Tensor::scalar(2f32),))?);
    // get_concrete_function also takes a TensorSpec.
    let from_spec = double.get_concrete_function((TensorSpec::known(&[], DType::F32),))?;
    println!("{}", from_spec.call((Tensor::scalar(3f32),))?);
    println!("double traced {} times so far", double.tracing_count());
    println!();
    print!("{double_f32}");
    println!("{}", double_f32.function_type());
    // A concrete function accepts only compatible inputs.
    println!("{}", double_f32.call((Tensor::scalar(1i32),)).unwrap_err());
    println!();

    // @tf.function def pow(a, b): return a ** b
    // square = pow.get_concrete_function(a=tf.TensorSpec(None, tf.float32), b=2)
    let pow = FunctionOptions::new()
        .name("pow")
        .build(|a: Tensor, b: i64| a.pow_scalar(b));
    let square = pow.get_concrete_function((TensorSpec::unknown_rank(DType::F32), 2i64))?;
    print!("{square}");
    let hundred = square.call((Tensor::scalar(10f32), 2i64))?;
    assert_eq!(hundred.item::<f32>()?, 100.0);
    println!("square(10.0) = {hundred}");
    // The literal b=2 is part of the signature: b=3 fails.
    println!(
        "{}",
        square.call((Tensor::scalar(10f32), 3i64)).unwrap_err()
    );
    // The fast path: flat tensors in and out, no signature processing.
    let out = double_f32.call_flat(&[Tensor::scalar(21f32)])?;
    println!("call_flat: {}", out[0]);
    Ok(())
}

fn graphs(double: &Function<(Tensor,), Tensor>) -> Result<()> {
    section("Obtaining graphs");
    let double_f32 = double.get_concrete_function((TensorSpec::known(&[], DType::F32),))?;
    let graph = double_f32.graph();
    // for node in graph.as_graph_def().node: print(f'{node.input} -> {node.name}')
    for (i, p) in graph.params().iter().enumerate() {
        println!("[] -> {p} (parameter {i})");
    }
    for node in graph.operations() {
        let inputs: Vec<String> = node.inputs().iter().map(|v| format!("'{v}'")).collect();
        let outputs: Vec<String> = node.outputs().iter().map(|v| v.to_string()).collect();
        println!(
            "[{}] -> {} = {}",
            inputs.join(", "),
            outputs.join(", "),
            node.op_type()
        );
    }
    let results: Vec<String> = graph.results().iter().map(|v| format!("'{v}'")).collect();
    println!("[{}] -> results", results.join(", "));
    println!();
    println!("The full listing:");
    print!("{graph}");
    println!();
    println!("The StableHLO compiled for a scalar f32:");
    println!(
        "{}",
        double_f32.stablehlo(&[ArraySpec::scalar(DType::F32)])?
    );

    // A host loop unrolls while tracing: the graph grows with it.
    let unrolled = FunctionOptions::new().name("small_ops").build(small_ops);
    let c = unrolled.get_concrete_function((TensorSpec::known(&[1000], DType::F32),))?;
    println!(
        "50 host-loop iterations of tanh(x) * 0.5 + 0.1 traced into {} nodes",
        c.graph().operations().len()
    );
    Ok(())
}

fn debugging() -> Result<()> {
    section("Debugging");
    // @tf.function
    // def get_MSE(y_true, y_pred):
    //   print("Calculating MSE!")
    //   return tf.reduce_mean(tf.pow(y_true - y_pred, 2))
    let get_mse = FunctionOptions::new()
        .name("get_MSE")
        .build(|y_true: Tensor, y_pred: Tensor| {
            println!("Calculating MSE!");
            (&y_true - &y_pred).pow_scalar(2)?.reduce_mean(&[], false)
        });
    let y_true = Tensor::vector(&[4i32, 9, 2, 0, 7])?;
    let y_pred = Tensor::vector(&[6i32, 1, 2, 8, 5])?;
    println!("{y_true}");
    println!("{y_pred}");
    println!("Three calls as a function:");
    for _ in 0..3 {
        get_mse.call((&y_true, &y_pred))?;
    }
    // tf.config.run_functions_eagerly(True)
    run_functions_eagerly(true);
    println!("Three calls with run_functions_eagerly(true):");
    for _ in 0..3 {
        let error = get_mse.call((&y_true, &y_pred))?;
        println!("{error}");
    }
    run_functions_eagerly(false);

    // xlafn logs through `tracing` (JAX's explain_cache_misses and
    // log_compiles). Shown here at info level for one call with new types;
    // RUST_LOG=xlafn=info shows the same for the whole program.
    println!("At info level, a trace says why the cache missed, a compile what it cost:");
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .without_time()
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || -> Result<()> {
        get_mse.call((&y_true.cast(DType::F32)?, &y_pred.cast(DType::F32)?))?;
        Ok(())
    })?;

    // Errors raised while tracing name the op and its operands.
    let bad = FunctionOptions::new()
        .name("bad")
        .build(|a: Tensor, b: Tensor| a + b);
    let err = bad
        .call((
            Tensor::vector(&[1f32, 2.])?,
            Tensor::vector(&[1f32, 2., 3.])?,
        ))
        .unwrap_err();
    println!("{err}");
    Ok(())
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SimpleModel {
    weight: i64,
    bias: i64,
}

static RECURSIVE_FN: OnceLock<Function<(Tensor,), Tensor>> = OnceLock::new();
static SUM_TO: OnceLock<Function<(Tensor, i64), Tensor>> = OnceLock::new();

fn limitations() -> Result<()> {
    section("Limitations: host side effects run only while tracing");
    let external_list: Arc<Mutex<Vec<i64>>> = Arc::default();
    let side_effect = FunctionOptions::new().name("side_effect").build({
        let list = external_list.clone();
        move |x: i64| {
            println!("Rust side effect");
            list.lock().unwrap().push(x);
        }
    });
    for _ in 0..3 {
        side_effect.call((1i64,))?;
    }
    // The push happened only once!
    println!("external_list = {:?}", external_list.lock().unwrap());

    section("Limitations: depending on captured host values");
    // A closure reads a host value while tracing; later changes are not
    // seen by the traced graph. Pass the value as an argument instead.
    // (The guide calls the global `foo`.)
    let value = Arc::new(Mutex::new(1i64));
    let buggy_add = FunctionOptions::new().name("buggy_add").build({
        let value = value.clone();
        move || Tensor::fill(&[], 1 + *value.lock().unwrap(), DType::I32)
    });
    let recommended_add = FunctionOptions::new()
        .name("recommended_add")
        .build(|value: Tensor| 1 + value);
    println!("Buggy: {}", buggy_add.call(())?);
    println!(
        "Correct: {}",
        recommended_add.call((*value.lock().unwrap(),))?
    );
    println!("Updating the captured value to 100!");
    *value.lock().unwrap() = 100;
    println!("Buggy: {}", buggy_add.call(())?); // Did not change!
    println!(
        "Correct: {}",
        recommended_add.call((*value.lock().unwrap(),))?
    );

    section("Limitations: depending on host objects");
    let model = Arc::new(Mutex::new(SimpleModel { weight: 1, bias: 2 }));
    let call_model = FunctionOptions::new().name("simple_model").build({
        let model = model.clone();
        move |x: Tensor| {
            let m = model.lock().unwrap().clone();
            m.weight * x + m.bias
        }
    });
    let x = Tensor::scalar(10f32);
    println!("{}", call_model.call((&x,))?);
    model.lock().unwrap().bias = 100;
    println!("{}", call_model.call((&x,))?); // Didn't change :(
    // Passing the object as an argument makes it part of the type: a
    // changed object retraces and the result follows it.
    let evaluate =
        FunctionOptions::new()
            .name("evaluate")
            .build(|model: ByValue<SimpleModel>, x: Tensor| {
                println!("Tracing evaluate with {:?}", model.0);
                model.0.weight * x + model.0.bias
            });
    let mut new_model = SimpleModel { weight: 1, bias: 0 };
    println!("{}", evaluate.call((ByValue(new_model.clone()), &x))?);
    new_model.bias += 5;
    println!("{}", evaluate.call((ByValue(new_model.clone()), &x))?);
    println!("evaluate traced {} times", evaluate.tracing_count());

    section("Limitations: leaked tensors");
    let leaked: Arc<Mutex<Option<Tensor>>> = Arc::default();
    let leaky_function = FunctionOptions::new().name("leaky_function").build({
        let leaked = leaked.clone();
        move |a: Tensor| {
            *leaked.lock().unwrap() = Some(&a + 1); // Bad - leaks a symbolic tensor
            &a + 2
        }
    });
    let correct_a = leaky_function.call((Tensor::scalar(1i32),))?;
    println!("{}", correct_a.item::<i32>()?); // Good - value from the returns
    let x = leaked
        .lock()
        .unwrap()
        .clone()
        .expect("stored while tracing");
    // Bad - the tensor leaked from inside the function has no value here.
    println!("{}", x.to_vec::<i32>().unwrap_err());
    let captures_leaked_tensor = FunctionOptions::new()
        .name("captures_leaked_tensor")
        .build(move |b: Tensor| b.add(&x)); // Bad - uses the leaked tensor
    println!(
        "{}",
        captures_leaked_tensor
            .call((Tensor::scalar(2i32),))
            .unwrap_err()
    );

    section("Known issues: recursive functions");
    // @tf.function
    // def recursive_fn(n): return recursive_fn(n - 1) if n > 0 else 1
    // A tensor condition cannot stop tracing, so the recursion re-enters
    // the same trace: xlafn stops it with an error naming the function.
    let recursive_fn = RECURSIVE_FN.get_or_init(|| {
        FunctionOptions::new()
            .name("recursive_fn")
            .build(|n: Tensor| -> Result<Tensor> {
                RECURSIVE_FN.get().expect("initialized").call((&n - 1,))
            })
    });
    println!(
        "{}",
        recursive_fn.call((Tensor::scalar(5i32),)).unwrap_err()
    );
    // Recursion on a host value works: one trace per level.
    let sum_to = SUM_TO.get_or_init(|| {
        FunctionOptions::new()
            .name("sum_to")
            .build(|x: Tensor, n: i64| -> Result<Tensor> {
                if n == 0 {
                    x.zeros_like()
                } else {
                    Ok(&x + &SUM_TO.get().expect("initialized").call((&x, n - 1))?)
                }
            })
    });
    println!(
        "sum_to(2.0, 3) = {}",
        sum_to.call((Tensor::scalar(2f32), 3i64))?
    );
    println!("sum_to traced {} times", sum_to.tracing_count());
    Ok(())
}

fn main() -> Result<()> {
    logging::init(); // RUST_LOG=xlafn=info shows traces and compiles
    println!("xlafn tour");
    eager_tensors()?;
    eager_ops()?;
    errors();
    basics()?;
    let double = double_function();
    tracing(&double)?;
    rules_of_tracing()?;
    controlling_retracing()?;
    concrete_functions(&double)?;
    graphs(&double)?;
    debugging()?;
    limitations()?;
    control_flow::autograph()?;
    control_flow::conditionals()?;
    control_flow::loops()?;
    control_flow::looping_over_host_data()?;
    control_flow::accumulating()?;
    state::side_effects()?;
    state::creating_variables()?;
    state::deleting_variables()?;
    gradients::gradient_through_a_function()?;
    gradients::optimizers()?;
    devices::placing_values_on_devices()?;
    devices::sharded_functions()?;
    devices::per_device_code()?;
    Ok(())
}
