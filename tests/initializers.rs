//! Initializers against Keras' definitions: fans worked out by hand, the
//! bounds and sample variances of large draws against the formulas, an
//! orthogonal weight's `Q^T Q` against the identity, the same key giving
//! the same weights eagerly and compiled, and bad arguments refused.

use xlafn::initializers::{self, FanMode};
use xlafn::prelude::*;
use xlafn::random;

fn stats(t: &Tensor) -> (f64, f64, f64) {
    let v: Vec<f64> = t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    let max = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    (mean, var, max)
}

#[test]
fn fans_follow_keras() {
    assert_eq!(initializers::fans(&[]), (1.0, 1.0));
    assert_eq!(initializers::fans(&[7]), (7.0, 7.0));
    assert_eq!(initializers::fans(&[3, 5]), (3.0, 5.0));
    // A 3x3 convolution kernel from 4 to 8 features: receptive field 9.
    assert_eq!(initializers::fans(&[3, 3, 4, 8]), (36.0, 72.0));
}

#[test]
fn draws_have_the_documented_bounds_and_variances() {
    let key = random::key(7).unwrap();
    let dims = [200, 300]; // fan_in 200, fan_out 300: 60 000 draws
    type Init = fn(&Tensor, &[i64], DType) -> Result<Tensor>;
    let cases: [(&str, Init, f64, Option<f64>); 6] = [
        (
            "glorot_uniform",
            initializers::glorot_uniform,
            2.0 / 500.0,
            Some((6.0f64 / 500.0).sqrt()),
        ),
        (
            "glorot_normal",
            initializers::glorot_normal,
            2.0 / 500.0,
            None,
        ),
        (
            "he_uniform",
            initializers::he_uniform,
            2.0 / 200.0,
            Some((6.0f64 / 200.0).sqrt()),
        ),
        ("he_normal", initializers::he_normal, 2.0 / 200.0, None),
        (
            "lecun_uniform",
            initializers::lecun_uniform,
            1.0 / 200.0,
            Some((3.0f64 / 200.0).sqrt()),
        ),
        (
            "lecun_normal",
            initializers::lecun_normal,
            1.0 / 200.0,
            None,
        ),
    ];
    for (name, init, variance, limit) in cases {
        let w = init(&key, &dims, DType::F32).unwrap();
        assert_eq!(w.dims(), vec![200, 300], "{name}");
        let (mean, var, max) = stats(&w);
        let sd = variance.sqrt();
        assert!(mean.abs() < 0.02 * sd, "{name}: mean {mean}");
        assert!(
            (var / variance - 1.0).abs() < 0.03,
            "{name}: variance {var} vs {variance}"
        );
        match limit {
            Some(l) => assert!(max <= l * (1.0 + 1e-6), "{name}: {max} beyond {l}"),
            // Truncated at two standard deviations of the untruncated draw.
            None => assert!(
                max <= 2.0 * sd / 0.879_625_661 * (1.0 + 1e-5),
                "{name}: {max}"
            ),
        }
    }
    let w = initializers::truncated_normal(&key, &[50_000], DType::F64, 1.0, 0.5).unwrap();
    let (mean, _, _) = stats(&w);
    assert!((mean - 1.0).abs() < 0.01, "{mean}");
    let v = w.to_vec::<f64>().unwrap();
    assert!(v.iter().all(|x| (x - 1.0).abs() <= 1.0 + 1e-12));
}

#[test]
fn orthogonal_weights_have_orthonormal_columns_or_rows() {
    let key = random::key(3).unwrap();
    for (dims, rows, cols) in [
        (vec![6i64, 4], 6, 4),
        (vec![3, 7], 3, 7),
        (vec![2, 2, 3, 5], 12, 5),
    ] {
        let w = initializers::orthogonal(&key, &dims, DType::F64, 2.0).unwrap();
        assert_eq!(w.dims(), dims);
        let m = w.reshape(&[rows, cols]).unwrap();
        // Q^T Q (tall) or Q Q^T (wide) is gain^2 times the identity.
        let gram = if rows >= cols {
            m.matmul_t(&m, true, false).unwrap()
        } else {
            m.matmul_t(&m, false, true).unwrap()
        };
        let n = rows.min(cols) as usize;
        let g = gram.to_vec::<f64>().unwrap();
        for i in 0..n {
            for j in 0..n {
                let want = if i == j { 4.0 } else { 0.0 };
                assert!(
                    (g[i * n + j] - want).abs() < 1e-10,
                    "{dims:?} [{i},{j}] {}",
                    g[i * n + j]
                );
            }
        }
    }
}

#[test]
fn the_same_key_gives_the_same_weights_eagerly_and_compiled() {
    let key = random::key(11).unwrap();
    let eager = initializers::he_normal(&key, &[4, 6], DType::F32).unwrap();
    let f = function(|k: Tensor| initializers::he_normal(&k, &[4, 6], DType::F32));
    let compiled = f.call((&key,)).unwrap();
    // The same draws; XLA may fuse the inverse-CDF arithmetic differently
    // (an ulp).
    let pairs = eager.to_vec::<f32>().unwrap().into_iter();
    for (a, b) in pairs.zip(compiled.to_vec::<f32>().unwrap()) {
        assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0), "{a} vs {b}");
    }
    let other = initializers::he_normal(&random::key(12).unwrap(), &[4, 6], DType::F32).unwrap();
    assert_ne!(
        eager.to_vec::<f32>().unwrap(),
        other.to_vec::<f32>().unwrap()
    );
    let o = initializers::orthogonal(&key, &[4, 6], DType::BF16, 1.0).unwrap();
    assert_eq!(o.dtype(), DType::BF16);
}

#[test]
fn constants_and_bad_arguments() {
    assert_eq!(
        initializers::zeros(&[2], DType::F32)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![0.0; 2]
    );
    assert_eq!(
        initializers::ones(&[2], DType::F64)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        vec![1.0; 2]
    );
    assert_eq!(
        initializers::constant(&[3], 0.5, DType::F32)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![0.5; 3]
    );
    let key = random::key(0).unwrap();
    let e = initializers::glorot_uniform(&key, &[2, 2], DType::I32).unwrap_err();
    assert!(e.to_string().contains("float dtype"), "{e}");
    let e = initializers::variance_scaling(&key, &[2], DType::F32, -1.0, FanMode::In, true)
        .unwrap_err();
    assert!(e.to_string().contains("positive scale"), "{e}");
    let e = initializers::orthogonal(&key, &[5], DType::F32, 1.0).unwrap_err();
    assert!(e.to_string().contains("rank >= 2"), "{e}");
}
