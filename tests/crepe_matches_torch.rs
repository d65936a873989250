//! W16 (tools/workloads/crepe_infer.rs), the CREPE-sized inference of
//! the bench report, computes what PyTorch computes: from the numpy draw
//! `scripts/peers_w16.py` makes, the compiled forward pass of the 22 M
//! parameter stack (explicit padding, a stride-4 512-tap convolution,
//! batch norms at inference, max pools, a sigmoid head) gives PyTorch's
//! output sums, traced once.

#[path = "../tools/workloads/crepe_infer.rs"]
mod crepe_infer;
#[path = "../examples/common/real_models.rs"]
mod real_models;

use crepe_infer::{W16, W16_B, W16_BINS, W16_PEER_CHECK, w16_check};
use std::sync::Arc;
use xlafn::module::Module;
use xlafn::prelude::*;

#[test]
fn the_w16_forward_pass_gives_pytorchs_outputs() {
    let w = W16::new().unwrap();
    assert_eq!(w.model.parameter_count().0, 22_244_328);
    let model = Arc::new(w.model);
    let forward = {
        let model = model.clone();
        function(move |x: Tensor| model.forward(&x))
    };
    let y = forward.call((&w.frames,)).unwrap();
    assert_eq!(y.dims(), vec![W16_B, W16_BINS]);
    let got = w16_check(&y).unwrap();
    for (g, p) in got.iter().zip(W16_PEER_CHECK) {
        assert!(
            (g - p).abs() / p < 1e-5,
            "{got:?} vs PyTorch's {W16_PEER_CHECK:?}"
        );
    }
    forward.call((&w.frames,)).unwrap();
    assert_eq!(forward.tracing_count(), 1);
}
