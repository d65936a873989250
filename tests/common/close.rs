//! The largest elementwise difference between an xlafn output and a
//! framework's saved one, checked against a tolerance.

use xlafn::prelude::*;

/// Asserts `got` has `want`'s shape and differs from it by less than
/// `tolerance` anywhere, naming `peer` (the framework) when not.
pub fn assert_close_to(peer: &str, name: &str, got: &Tensor, want: &Tensor, tolerance: f32) {
    assert_eq!(got.dims(), want.dims(), "{name}: shapes");
    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    let worst = g
        .iter()
        .zip(&w)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < tolerance, "{name}: differs from {peer} by {worst}");
}
