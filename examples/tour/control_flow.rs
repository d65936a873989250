//! The guide's control-flow sections: AutoGraph, conditionals, loops,
//! looping over host data, and accumulating values in a loop.

use xlafn::prelude::*;

use super::section;

// `while reduce_sum(x) > 1: x = tanh(x)`, written as plain Rust: the macro
// turns the tensor condition into an in-graph while_loop.
#[xlafn::function]
fn shrink(x: Tensor) -> Result<Tensor> {
    let mut x = x;
    while x.reduce_sum(&[], false)?.gt_scalar(1.0)? {
        x = x.tanh()?;
    }
    Ok(x)
}

pub fn autograph() -> Result<()> {
    section("AutoGraph transformations");
    let x = Tensor::random_uniform(&[5], 0, DType::F32)?;
    println!("x = {x}");
    println!("shrink(x) = {}", shrink(&x)?);
    println!(
        "the rewritten source (tf.autograph.to_code):\n{}",
        shrink::AUTOGRAPH_CODE
    );
    Ok(())
}

// The guide's fizzbuzz: `println!` runs while tracing (once per branch),
// `xlafn::print` on every iteration of the compiled loop.
#[xlafn::function]
fn fizzbuzz(n: Tensor) -> Result<()> {
    for i in xlafn::autograph::range_with(1, n.add_scalar(1)?, 1)? {
        println!("Tracing for loop");
        if i.floormod_scalar(15)?.eq_scalar(0)? {
            println!("Tracing fizzbuzz branch");
            xlafn::print("fizzbuzz", &[])?;
        } else if i.floormod_scalar(3)?.eq_scalar(0)? {
            println!("Tracing fizz branch");
            xlafn::print("fizz", &[])?;
        } else if i.floormod_scalar(5)?.eq_scalar(0)? {
            println!("Tracing buzz branch");
            xlafn::print("buzz", &[])?;
        } else {
            println!("Tracing default branch");
            xlafn::print("", &[&i])?;
        }
    }
    Ok(())
}

pub fn conditionals() -> Result<()> {
    section("Conditionals");
    fizzbuzz(Tensor::scalar(5i32))?;
    fizzbuzz(Tensor::scalar(20i32))?;
    println!(
        "fizzbuzz traced {} time(s)",
        fizzbuzz::function().tracing_count()
    );
    Ok(())
}

// `for _ in range(num_steps)` over a tensor: one while op, whatever n is.
#[xlafn::function]
fn train(num_steps: Tensor, x: Tensor) -> Result<Tensor> {
    let mut x = x;
    for _ in xlafn::autograph::range(&num_steps)? {
        x = &x * 0.99 + 0.01;
    }
    Ok(x)
}

// The same loop over a host number unrolls while tracing.
#[xlafn::function]
fn train_unrolled(num_steps: i64, x: Tensor) -> Tensor {
    let mut x = x;
    for _ in 0..num_steps {
        x = &x * 0.99 + 0.01;
    }
    x
}

pub fn loops() -> Result<()> {
    section("Loops");
    let x = Tensor::vector(&[1f32, 0.0])?;
    for n in [10i64, 20] {
        train(Tensor::scalar(n as i32), &x)?;
        train_unrolled(n, &x)?;
    }
    let graph_loop = train::function().concrete_functions()[0]
        .graph()
        .operations()
        .len();
    let sizes: Vec<usize> = train_unrolled::function()
        .concrete_functions()
        .iter()
        .map(|c| c.graph().operations().len())
        .collect();
    println!(
        "in-graph loop: {graph_loop} nodes for any num_steps ({} trace)",
        train::function().tracing_count()
    );
    println!("host loop unrolled: {sizes:?} nodes for num_steps 10 and 20");
    println!(
        "first index over 2.5 in [0.5, 2, 3, 7]: {} (a `return` inside a tensor loop)",
        first_index_over(
            Tensor::vector(&[0.5f32, 2.0, 3.0, 7.0])?,
            Tensor::scalar(2.5f32)
        )?
    );
    Ok(())
}

// `return` inside a tensor `while`: a return flag stops the device loop and
// a return slot carries the value out, as AutoGraph does.
#[xlafn::function]
fn first_index_over(xs: Tensor, limit: Tensor) -> Result<Tensor> {
    let mut i = Tensor::scalar(0i32);
    while i.lt_scalar(xs.dims()[0])? {
        if xs
            .dynamic_slice(&[i.clone()], &[1])?
            .squeeze(&[0])?
            .gt(&limit)?
        {
            return Ok(i);
        }
        i = i + 1;
    }
    Ok(Tensor::scalar(-1i32))
}

pub fn looping_over_host_data() -> Result<()> {
    section("Looping over host data");
    let data: Vec<Tensor> = (0..6).map(|i| Tensor::scalar(i as f32)).collect();
    let sum_list = function(|xs: Vec<Tensor>| {
        let mut total = Tensor::scalar(0f32);
        for x in &xs {
            total = &total + x;
        }
        total
    });
    let sum_tensor = function(|xs: Tensor| xs.reduce_sum(&[], false));
    println!(
        "sum over a Vec<Tensor>: {}",
        sum_list.call((data.clone(),))?
    );
    println!(
        "graph nodes: {} (one add per element: the loop unrolled)",
        sum_list.concrete_functions()[0].graph().operations().len()
    );
    let stacked = Tensor::stack(&data, 0)?;
    println!("sum over one tensor: {}", sum_tensor.call((&stacked,))?);
    println!(
        "graph nodes: {}",
        sum_tensor.concrete_functions()[0]
            .graph()
            .operations()
            .len()
    );
    Ok(())
}

pub fn accumulating() -> Result<()> {
    section("Accumulating values in a loop");
    // dynamic_rnn: states[i] = tanh(states[i - 1] + inputs[i]).
    let dynamic_rnn = function(|inputs: Tensor| -> Result<Tensor> {
        let (steps, width) = (inputs.dims()[0], inputs.dims()[1]);
        let rows = TensorArray::unstack(&inputs)?;
        let states = TensorArray::new(DType::F32, steps).with_element_shape(&[width])?;
        let state0 = Tensor::fill(&[width], 0.0, DType::F32)?;
        let (states, _) = for_range(
            0,
            steps,
            1,
            (states, state0),
            |i, (states, state): (TensorArray, Tensor)| {
                let next = (&state + &rows.read(&i)?).tanh()?;
                Ok::<_, Error>((states.write(&i, &next)?, next))
            },
        )?;
        states.stack()
    });
    let inputs = Tensor::random_uniform(&[3, 4], 7, DType::F32)?;
    println!("dynamic_rnn(inputs) = {}", dynamic_rnn.call((&inputs,))?);
    Ok(())
}
