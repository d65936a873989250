//! `control::scan` (`lax.scan`, `tf.scan`): carries and stacked outputs
//! against host loops, `reverse`, `unroll` (with a remainder), structured
//! `xs` and outputs, eager and traced alike, one `while` in the program,
//! gradients against finite differences and against the same recurrence
//! written with `for_range`, and clear errors.

#[path = "common/gradcheck.rs"]
mod gradcheck;

use xlafn::control::{ScanOptions, scan, scan_with};
use xlafn::prelude::*;

/// `h' = tanh(w * h + x)`, output `2 h'`, by a host loop over `xs`, in
/// `order`.
fn host_rnn(w: f64, h0: f64, xs: &[f64], reverse: bool) -> (f64, Vec<f64>) {
    let mut h = h0;
    let mut ys = vec![0.0; xs.len()];
    let order: Vec<usize> = if reverse {
        (0..xs.len()).rev().collect()
    } else {
        (0..xs.len()).collect()
    };
    for t in order {
        h = (w * h + xs[t]).tanh();
        ys[t] = 2.0 * h;
    }
    (h, ys)
}

fn rnn(w: &Tensor, h0: Tensor, xs: Tensor, options: ScanOptions) -> Result<(Tensor, Tensor)> {
    scan_with(
        |h: Tensor, x: Tensor| {
            let next = (w * &h + x).tanh()?;
            Ok((next.clone(), next.mul_scalar(2.0)?))
        },
        h0,
        xs,
        options,
    )
}

const XS: [f64; 7] = [0.3, -0.2, 0.5, 0.1, -0.4, 0.25, 0.05];

#[test]
fn carries_and_stacked_outputs_match_a_host_loop_eagerly_and_traced() {
    for reverse in [false, true] {
        for unroll in [1, 2, 3, 7, 10] {
            let options = ScanOptions::new().reverse(reverse).unroll(unroll);
            let (h, ys) = host_rnn(0.7, 0.1, &XS, reverse);
            let w = Tensor::scalar(0.7f64);
            let xs = Tensor::vector(&XS).unwrap();
            let (eh, eys) = rnn(&w, Tensor::scalar(0.1f64), xs.clone(), options).unwrap();
            let f =
                function(move |w: Tensor, xs: Tensor| rnn(&w, Tensor::scalar(0.1f64), xs, options));
            let (th, tys) = f.call((&w, &xs)).unwrap();
            for (got_h, got_ys) in [(eh, eys), (th, tys)] {
                assert!(
                    (got_h.item::<f64>().unwrap() - h).abs() < 1e-12,
                    "reverse {reverse} unroll {unroll}"
                );
                let got = got_ys.to_vec::<f64>().unwrap();
                for (a, b) in got.iter().zip(&ys) {
                    assert!(
                        (a - b).abs() < 1e-12,
                        "reverse {reverse} unroll {unroll}: {got:?} vs {ys:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn the_program_holds_one_loop_with_unroll_copies_of_the_step() {
    let w = Tensor::scalar(0.7f32);
    let xs = Tensor::from_vec((0..64).map(|i| i as f32 / 64.0).collect(), &[64]).unwrap();
    for unroll in [1usize, 4] {
        let f = function(move |w: Tensor, xs: Tensor| {
            rnn(
                &w,
                Tensor::scalar(0f32),
                xs,
                ScanOptions::new().unroll(unroll),
            )
        });
        let text = f.lower((&w, &xs)).unwrap().as_text().to_string();
        assert_eq!(text.matches("stablehlo.while").count(), 1);
        assert_eq!(
            text.matches("stablehlo.tanh").count(),
            unroll,
            "unroll {unroll}"
        );
    }
}

#[test]
fn structured_xs_carries_and_outputs() {
    // Carry (sum, count); xs (a [4, 2] matrix, a [4] vector); outputs a
    // tuple (row sums, running max of the vector).
    let f = function(|m: Tensor, v: Tensor| {
        let init = (Tensor::scalar(0f32), Tensor::scalar(f32::NEG_INFINITY));
        scan(
            |(sum, best): (Tensor, Tensor), (row, x): (Tensor, Tensor)| {
                let row_sum = row.reduce_sum(&[], false)?;
                let best = best.maximum(&x)?;
                Ok(((sum + &row_sum, best.clone()), (row_sum, best)))
            },
            init,
            (m, v),
        )
    });
    let m = Tensor::from_vec(vec![1f32, 2., 3., 4., 5., 6., 7., 8.], &[4, 2]).unwrap();
    let v = Tensor::vector(&[0.5f32, 3.0, 1.0, 4.0]).unwrap();
    let ((sum, best), (row_sums, maxima)) = f.call((&m, &v)).unwrap();
    assert_eq!(sum.item::<f32>().unwrap(), 36.0);
    assert_eq!(best.item::<f32>().unwrap(), 4.0);
    assert_eq!(row_sums.to_vec::<f32>().unwrap(), vec![3., 7., 11., 15.]);
    assert_eq!(maxima.to_vec::<f32>().unwrap(), vec![0.5, 3., 3., 4.]);
    // No xs: the length option alone.
    let (n, evens) = scan_with(
        |i: Tensor, (): ()| Ok((&i + 1, i.mul_scalar(2)?)),
        Tensor::scalar(0i32),
        (),
        ScanOptions::new().length(4),
    )
    .unwrap();
    assert_eq!(
        (n.item::<i32>().unwrap(), evens.to_vec::<i32>().unwrap()),
        (4, vec![0, 2, 4, 6])
    );
}

#[test]
fn gradients_match_finite_differences_and_the_for_range_form() {
    let xs = Tensor::vector(&XS).unwrap();
    let loss_scan = |w: &Tensor, xs: &Tensor| -> Result<Tensor> {
        let (h, ys) = rnn(w, Tensor::scalar(0.1f64), xs.clone(), ScanOptions::new())?;
        (ys.square()?.reduce_sum(&[], false)? + h).cast(DType::F64)
    };
    let loss_loop = |w: &Tensor, xs: &Tensor| -> Result<Tensor> {
        let ta = TensorArray::unstack(xs)?;
        let (h, total) = for_range(
            0i64,
            XS.len() as i64,
            1i64,
            (Tensor::scalar(0.1f64), Tensor::scalar(0f64)),
            |i, (h, total): (Tensor, Tensor)| -> Result<(Tensor, Tensor)> {
                let next = (w * &h + ta.read(&i)?).tanh()?;
                let y = next.mul_scalar(2.0)?;
                Ok((next, total + y.square()?))
            },
        )?;
        Ok(total + h)
    };
    fn grad(
        loss: impl Fn(&Tensor, &Tensor) -> Result<Tensor> + Send + Sync + 'static,
        xs: &Tensor,
    ) -> (Tensor, Tensor, Tensor) {
        let f = function(move |w: Tensor, xs: Tensor| {
            let tape = GradientTape::new();
            tape.watch(&w);
            let l = loss(&w, &xs)?;
            let g = tape.gradient(&l, &[(&w).into(), (&xs).into()])?;
            Ok((l, g[0].clone().unwrap(), g[1].clone().unwrap()))
        });
        f.call((&Tensor::scalar(0.7f64), xs)).unwrap()
    }
    let (l1, gw1, gx1) = grad(loss_scan, &xs);
    let (l2, gw2, gx2) = grad(loss_loop, &xs);
    assert!((l1.item::<f64>().unwrap() - l2.item::<f64>().unwrap()).abs() < 1e-12);
    assert!((gw1.item::<f64>().unwrap() - gw2.item::<f64>().unwrap()).abs() < 1e-10);
    for (a, b) in gx1
        .to_vec::<f64>()
        .unwrap()
        .iter()
        .zip(gx2.to_vec::<f64>().unwrap())
    {
        assert!((a - b).abs() < 1e-10);
    }
    // Central differences in w.
    let at = |w: f64| {
        loss_scan(&Tensor::scalar(w), &xs)
            .unwrap()
            .item::<f64>()
            .unwrap()
    };
    let eps = 1e-6;
    let fd = (at(0.7 + eps) - at(0.7 - eps)) / (2.0 * eps);
    assert!(
        (gw1.item::<f64>().unwrap() - fd).abs() < 1e-6,
        "{} vs {fd}",
        gw1.item::<f64>().unwrap()
    );
}

#[test]
fn bad_scans_are_clear_errors() {
    let a = Tensor::zeros(&[3, 2], DType::F32);
    let b = Tensor::zeros(&[4], DType::F32);
    let step = |c: Tensor, (x, _y): (Tensor, Tensor)| Ok((c, x));
    let e = scan(step, Tensor::scalar(0f32), (a.clone(), b))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("leading dimension 4") && e.contains("length is 3"),
        "{e}"
    );
    let e = scan_with(
        |c: Tensor, x: Tensor| Ok((c, x)),
        Tensor::scalar(0f32),
        a.clone(),
        ScanOptions::new().length(5),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("must agree"), "{e}");
    let e = scan(
        |c: Tensor, (): ()| Ok((c.clone(), c)),
        Tensor::scalar(0f32),
        (),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("ScanOptions::length"), "{e}");
    let scalar = Tensor::scalar(1f32);
    let e = scan(
        |c: Tensor, x: Tensor| Ok((c, x)),
        Tensor::scalar(0f32),
        scalar,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("leading dimension"), "{e}");
    // A carry whose dtype changes.
    let f = function(|xs: Tensor| {
        scan(
            |c: Tensor, x: Tensor| Ok((c.cast(DType::F64)?, x)),
            Tensor::scalar(0f32),
            xs,
        )
    });
    let e = f
        .call((Tensor::vector(&[1f32, 2.]).unwrap(),))
        .unwrap_err()
        .to_string();
    assert!(e.contains("dtype"), "{e}");
}
