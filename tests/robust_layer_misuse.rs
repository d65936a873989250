//! Layers and ops misused as a new user would misuse them: each gives an
//! error that names the layer and says what to change, instead of an
//! abort, an empty result or a silent no-op.

use xlafn::module::Module;
use xlafn::nn::layers::{BatchNorm, Conv2d, Gru, Layer, Lstm, Mode, MultiHeadAttention, Recurrent};
use xlafn::prelude::*;

fn key(seed: u64) -> Tensor {
    xlafn::random::key(seed).unwrap()
}

#[test]
fn batch_norm_sizes_are_checked_before_anything_is_allocated() {
    for channels in [-1, 0] {
        let e = BatchNorm::new(channels, DType::F32)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("BatchNorm") && e.contains("channels must be >= 1"),
            "{e}"
        );
    }
    // 2^40 float32 channels: 4 TiB, refused rather than allocated.
    let e = BatchNorm::new(1 << 40, DType::F32).unwrap_err().to_string();
    assert!(e.contains("too large") || e.contains("memory"), "{e}");
    let bn = BatchNorm::new(3, DType::F32).unwrap();
    assert_eq!(bn.gamma.read().to_vec::<f32>().unwrap(), vec![1.0; 3]);
    assert_eq!(
        bn.moving_variance.read().to_vec::<f32>().unwrap(),
        vec![1.0; 3]
    );
    assert!(!bn.moving_mean.trainable());
}

#[test]
fn a_window_larger_than_the_input_is_refused_with_the_layout_hint() {
    // A PyTorch-layout [2, 1, 1024, 1] (N, C, H, W) into a 512-tall kernel.
    let conv = Conv2d::lazy(&key(1), 4, [512, 3]).unwrap();
    let x = Tensor::zeros(&[2, 1, 1024, 1], DType::F32);
    let e = conv.call(&x, &Mode::inference()).unwrap_err().to_string();
    assert!(
        e.contains("Conv2d") && e.contains("fewer than the window") && e.contains("channels-first"),
        "{e}"
    );
    // Refused before the lazy layer built a kernel for the wrong channels:
    // the right layout then works.
    assert!(conv.kernel().is_none());
    let y = conv.call(
        &x.transpose(&[0, 2, 3, 1])
            .unwrap()
            .reshape(&[2, 1024, 1, 1])
            .unwrap(),
        &Mode::inference(),
    );
    assert!(y.is_err()); // a 3-wide window over 1 column, still refused
    let ok = Conv2d::lazy(&key(1), 4, [3, 3]).unwrap();
    let y = ok
        .call(
            &Tensor::zeros(&[2, 5, 6, 1], DType::F32),
            &Mode::inference(),
        )
        .unwrap();
    assert_eq!(y.dims(), vec![2, 3, 4, 4]);
}

#[test]
fn recurrent_and_attention_layers_name_themselves_on_a_new_feature_size() {
    let lstm = Lstm::new(&key(2), 3).unwrap();
    lstm.run(&Tensor::zeros(&[1, 2, 4], DType::F32), None, None)
        .unwrap();
    let e = lstm
        .run(&Tensor::zeros(&[1, 2, 5], DType::F32), None, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Lstm") && e.contains("built for 4 input features"),
        "{e}"
    );
    let gru = Gru::new(&key(3), 3).unwrap();
    gru.run(&Tensor::zeros(&[1, 2, 4], DType::F32), None, None)
        .unwrap();
    let e = gru
        .run(&Tensor::zeros(&[1, 2, 6], DType::F32), None, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Gru") && e.contains("built for 4 input features"),
        "{e}"
    );
    let mha = MultiHeadAttention::new(&key(4), 2, 4).unwrap();
    let q = Tensor::zeros(&[1, 3, 8], DType::F32);
    mha.call(&q, &Mode::inference()).unwrap();
    let q = Tensor::zeros(&[1, 3, 6], DType::F32);
    let e = mha.call(&q, &Mode::inference()).unwrap_err().to_string();
    assert!(
        e.contains("MultiHeadAttention") && e.contains("query inputs of 8 features"),
        "{e}"
    );
}

#[test]
fn freezing_a_built_layers_variable_takes_effect() {
    let lstm = Lstm::new(&key(5), 2).unwrap();
    lstm.run(&Tensor::zeros(&[1, 1, 3], DType::F32), None, None)
        .unwrap();
    let (_, kernel) = lstm.named_variables().remove(0);
    assert!(kernel.trainable());
    let _ = kernel.clone().non_trainable();
    assert!(!kernel.trainable());
    assert_eq!(
        lstm.trainable_variables().len(),
        lstm.named_variables().len() - 1
    );
}

#[test]
fn mixed_dtypes_say_to_cast() {
    let a = Tensor::vector(&[1f32, 2.]).unwrap();
    let b = a.cast(DType::BF16).unwrap();
    let e = a.add(&b).unwrap_err().to_string();
    assert!(
        e.contains("not promoted") && e.contains(".cast(DType::F32)"),
        "{e}"
    );
    let panic = std::panic::catch_unwind(|| &a + &b).unwrap_err();
    let text = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(text.contains(".cast(DType::F32)"), "{text}");
}

#[test]
fn an_eager_scan_refuses_a_carry_that_changes_type() {
    let xs = Tensor::vector(&[1f32, 2., 3.]).unwrap();
    let grow = |c: Tensor, x: Tensor| -> Result<(Tensor, Tensor)> {
        Ok((Tensor::concat(&[c.clone(), x.reshape(&[1])?], 0)?, x))
    };
    let e = xlafn::control::scan(grow, Tensor::vector(&[0f32]).unwrap(), xs.clone())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("changes the carry") && e.contains("f32(1,)"),
        "{e}"
    );
    let recast =
        |c: Tensor, x: Tensor| -> Result<(Tensor, Tensor)> { Ok(((c + &x).cast(DType::F64)?, x)) };
    let e = xlafn::control::scan(recast, Tensor::scalar(0f32), xs.clone())
        .unwrap_err()
        .to_string();
    assert!(e.contains("changes the carry"), "{e}");
    // The same as the compiled scan says.
    let compiled =
        function(move |xs: Tensor| xlafn::control::scan(recast, Tensor::scalar(0f32), xs));
    assert!(
        compiled
            .call((&xs,))
            .unwrap_err()
            .to_string()
            .contains("carry")
    );
}
