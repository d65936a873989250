//! What the `vmap` tests share: one example's function type, the host
//! loop over the examples that is their reference, and the batch they map.
//! Use with `#[path = "common/mapping.rs"] mod mapping;`.
#![allow(dead_code)]

use xlafn::prelude::*;

pub type Example = fn(&[Tensor]) -> Result<Vec<Tensor>>;

pub fn f64s(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// The reference: `f` on each example (row `i` of every input), eagerly,
/// stacked.
pub fn host_loop(f: Example, inputs: &[Tensor]) -> Vec<Tensor> {
    let n = inputs[0].dims()[0];
    let per: Vec<Vec<Tensor>> = (0..n)
        .map(|i| {
            let args: Vec<Tensor> = inputs
                .iter()
                .map(|t| {
                    let mut begin = vec![0; t.rank()];
                    begin[0] = i;
                    let mut size = t.dims();
                    size[0] = 1;
                    t.slice(&begin, &size).unwrap().squeeze(&[0]).unwrap()
                })
                .collect();
            f(&args).unwrap()
        })
        .collect();
    (0..per[0].len())
        .map(|k| Tensor::stack(&per.iter().map(|o| o[k].clone()).collect::<Vec<_>>(), 0).unwrap())
        .collect()
}

/// The batch: four examples of `x` `[3]` and `y` `[2, 3]`.
pub fn batch_inputs(dtype: DType) -> [Tensor; 2] {
    let x = Tensor::from_vec((0..12).map(|i| (i as f64 - 5.5) / 4.0).collect(), &[4, 3]).unwrap();
    let y = Tensor::from_vec(
        (0..24).map(|i| ((i * 7 % 11) as f64 - 5.0) / 5.0).collect(),
        &[4, 2, 3],
    )
    .unwrap();
    [x.cast(dtype).unwrap(), y.cast(dtype).unwrap()]
}
