//! The README's first example as a program: eager ops, a traced and
//! cached function, and an input signature. `tests/plugin_fetch.rs` copies
//! it to a fresh folder with a fresh `HOME` to show that a built program
//! finds (or fetches) its plugin at run time.
//!
//! ```text
//! cargo run --example quickstart
//! ```

use xlafn::prelude::*;

fn main() -> xlafn::Result<()> {
    let a = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2])?;
    let b = Tensor::ones(&[2, 2], DType::F32);
    let c = &a + &b; // eager: runs now, stays on the device
    assert_eq!(c.to_vec::<f32>()?, vec![2., 3., 4., 5.]);
    println!("{}", c.tanh()? * 2.0);

    let add = function(|a: Tensor, b: Tensor| a + b);
    let y = add.call((&a, &b))?; // traces, compiles, runs
    assert_eq!(y.to_vec::<f32>()?, vec![2., 3., 4., 5.]);
    add.call((&a, &b))?; // cached: runs only
    assert_eq!(add.tracing_count(), 1);

    let g = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None], DType::I32)])
        .build(|x: Tensor| x * 2); // one trace for every length
    let doubled = g.call((&Tensor::from_vec(vec![1i32, 2, 3], &[3])?,))?;
    assert_eq!(doubled.to_vec::<i32>()?, vec![2, 4, 6]);
    println!("quickstart: ok");
    Ok(())
}
