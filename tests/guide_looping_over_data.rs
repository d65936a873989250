//! The guide's "Looping over Python data" (in "Better performance with
//! tf.function"), in Rust: a loop over host data inside a traced function
//! runs while tracing and copies the model into the program once per
//! element; a host loop over an `xlafn::data` pipeline calls one compiled
//! step per batch; data already on the device can be looped over inside
//! one program with `for_range`. All three compute the same thing.

use xlafn::data::{Dataset, Placement};
use xlafn::prelude::*;
use xlafn::runtime::HostArray;

const BATCHES: usize = 4;

/// Four batches `[2, 3]` of host data and a weight `[3, 1]`.
fn host_batches() -> Vec<Vec<f32>> {
    (0..BATCHES)
        .map(|b| (0..6).map(|i| (b * 6 + i) as f32 / 10.0).collect())
        .collect()
}

fn weight() -> Tensor {
    Tensor::from_vec(vec![0.5f32, -1.0, 2.0], &[3, 1]).unwrap()
}

/// The reference: the sum of every batch's `sum(x @ w)`, by a host loop.
fn expected() -> f32 {
    let w = [0.5f32, -1.0, 2.0];
    host_batches()
        .iter()
        .map(|b| {
            b.chunks(3)
                .map(|r| r.iter().zip(&w).map(|(x, w)| x * w).sum::<f32>())
                .sum::<f32>()
        })
        .sum()
}

#[test]
fn a_loop_over_host_data_inside_a_function_unrolls_into_the_program() {
    let data = host_batches();
    let unrolled = function(move |w: Tensor| {
        let mut total = Tensor::scalar(0f32);
        for batch in &data {
            // Runs while tracing: each batch becomes a constant and its
            // own copy of the matmul.
            let x = Tensor::from_vec(batch.clone(), &[2, 3])?;
            total = total + x.matmul(&w)?.reduce_sum(&[], false)?;
        }
        Ok(total)
    });
    let w = weight();
    assert!((unrolled.call((&w,)).unwrap().item::<f32>().unwrap() - expected()).abs() < 1e-5);
    let text = unrolled.lower((&w,)).unwrap().as_text().to_string();
    assert_eq!(
        text.matches("stablehlo.dot_general").count(),
        BATCHES,
        "one copy per batch"
    );
}

#[test]
fn a_host_loop_over_a_dataset_calls_one_compiled_step_per_batch() {
    let flat: Vec<f32> = host_batches().concat();
    let rows = HostArray::from_vec(flat, &[(BATCHES * 2) as i64, 3]);
    let batches = Dataset::from_tensor_slices(rows)
        .unwrap()
        .batch(2, true)
        .prefetch_to_device(2, Placement::Default);
    let step = function(|x: Tensor, w: Tensor| x.matmul(&w)?.reduce_sum(&[], false));
    let w = weight();
    let mut total = 0f32;
    for x in batches.iter() {
        total += step.call((&x.unwrap(), &w)).unwrap().item::<f32>().unwrap();
    }
    assert!((total - expected()).abs() < 1e-5);
    assert_eq!(step.tracing_count(), 1);
    let text = step
        .lower((&Tensor::zeros(&[2, 3], DType::F32), &w))
        .unwrap()
        .as_text()
        .to_string();
    assert_eq!(text.matches("stablehlo.dot_general").count(), 1);
}

#[test]
fn data_on_the_device_loops_inside_one_program_with_for_range() {
    let flat: Vec<f32> = host_batches().concat();
    let all = Tensor::from_vec(flat, &[BATCHES as i64, 2, 3]).unwrap();
    let whole_loop = function(|all: Tensor, w: Tensor| {
        let n = Tensor::scalar(all.dims()[0] as i32);
        let zero = Tensor::scalar(0i32);
        for_range(
            0,
            &n,
            1,
            Tensor::scalar(0f32),
            |i, total| -> Result<Tensor> {
                let x = all
                    .dynamic_slice(&[i, zero.clone(), zero.clone()], &[1, 2, 3])?
                    .reshape(&[2, 3])?;
                Ok(total + x.matmul(&w)?.reduce_sum(&[], false)?)
            },
        )
    });
    let w = weight();
    let total = whole_loop.call((&all, &w)).unwrap().item::<f32>().unwrap();
    assert!((total - expected()).abs() < 1e-5);
    let text = whole_loop.lower((&all, &w)).unwrap().as_text().to_string();
    assert_eq!(text.matches("stablehlo.while").count(), 1);
    assert_eq!(text.matches("stablehlo.dot_general").count(), 1);
}
