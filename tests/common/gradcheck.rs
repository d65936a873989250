//! The shared gradient check of the op tests: the tape's gradient of
//! `sum(f(x) * w)` (fixed, distinct weights `w`) against central finite
//! differences of the same forward pass, whose values each test checks
//! against its own independent reference.

use xlafn::prelude::*;

/// Checks d/dx `sum(f(x) * w)` at `x` (shape `dims`, f64) element by
/// element, within `tol` relative (plus `tol` absolute).
#[allow(dead_code)]
pub fn check_gradient(
    f: &dyn Fn(&Tensor) -> Result<Tensor>,
    x: &[f64],
    dims: &[i64],
    tol: f64,
    what: &str,
) {
    let at = |v: &[f64]| Tensor::from_vec(v.to_vec(), dims).unwrap();
    let xt = at(x);
    let out = f(&xt).unwrap();
    let w: Vec<f64> = (0..out.size() as usize)
        .map(|i| 0.5 + (i as f64 * 0.37) % 1.0)
        .collect();
    let w = Tensor::from_vec(w, &out.dims()).unwrap();
    let loss = |x: &Tensor| f(x)?.mul(&w)?.reduce_sum(&[], false);
    let tape = GradientTape::new();
    tape.watch(&xt);
    let l = loss(&xt).unwrap();
    let analytic = tape.gradient(&l, &[Source::from(&xt)]).unwrap()[0]
        .clone()
        .unwrap_or_else(|| panic!("{what}: no gradient"))
        .to_vec::<f64>()
        .unwrap();
    let h = 1e-6;
    for i in 0..x.len() {
        let shifted = |d: f64| {
            let mut v = x.to_vec();
            v[i] += d;
            loss(&at(&v)).unwrap().item::<f64>().unwrap()
        };
        let numeric = (shifted(h) - shifted(-h)) / (2.0 * h);
        assert!(
            (analytic[i] - numeric).abs() <= tol * (1.0 + numeric.abs()),
            "{what}: element {i}: analytic {} vs numeric {numeric}",
            analytic[i]
        );
    }
}
