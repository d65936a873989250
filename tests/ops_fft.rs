//! fft, ifft, rfft and irfft over the innermost 1, 2 and 3 axes
//! against direct-loop DFTs written here (sums of `x_v e^{-+2 pi i
//! u.v/n}`, no FFT), in c128/f64 and c64/f32, eagerly and traced; round
//! trips; gradients (JAX's transposes) against finite differences of the
//! real and imaginary parts in f64; clear errors for bad inputs (wrong
//! dtypes, lengths that do not match the operand, too small a rank), also
//! for shapes only known when a traced function is called; an export.

#[path = "common/scratch.rs"]
mod scratch;

#[path = "common/gradcheck.rs"]
mod gradcheck;

use gradcheck::check_gradient;
use std::f64::consts::PI;
use xlafn::ops::complex::complex;
use xlafn::ops::fft::{FftType, fft_op};
use xlafn::prelude::*;

type C = Complex64;

/// Deterministic values in (-1, 1).
fn reals(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn complexes(n: usize, seed: u64) -> Vec<C> {
    let v = reals(2 * n, seed);
    (0..n).map(|i| C::new(v[2 * i], v[2 * i + 1])).collect()
}

/// Row-major multi-index of `flat` in `dims`.
fn unravel(mut flat: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for a in (0..dims.len()).rev() {
        idx[a] = flat % dims[a];
        flat /= dims[a];
    }
    idx
}

/// `sum_a u_a v_a / n_a`, reduced mod 1 (the phase in turns).
fn turns(u: &[usize], v: &[usize], n: &[usize]) -> f64 {
    u.iter()
        .zip(v)
        .zip(n)
        .map(|((&a, &b), &m)| ((a * b) % m) as f64 / m as f64)
        .sum()
}

/// The DFT over the innermost `tail.len()` axes by direct sums; the
/// inverse (`+` sign) divides by the number of points.
fn dft(x: &[C], tail: &[usize], inverse: bool) -> Vec<C> {
    let n: usize = tail.iter().product();
    let sign = if inverse { 1.0 } else { -1.0 };
    let mut out = vec![C::new(0.0, 0.0); x.len()];
    for b in 0..x.len() / n {
        for u in 0..n {
            let ui = unravel(u, tail);
            let mut s = C::new(0.0, 0.0);
            for v in 0..n {
                let phase = sign * 2.0 * PI * turns(&ui, &unravel(v, tail), tail);
                s += x[b * n + v] * C::from_polar(1.0, phase);
            }
            out[b * n + u] = if inverse { s / n as f64 } else { s };
        }
    }
    out
}

/// The first `keep` entries of every row of length `row`.
fn crop_rows(x: &[C], row: usize, keep: usize) -> Vec<C> {
    x.chunks(row).flat_map(|r| r[..keep].to_vec()).collect()
}

/// `rfft`: the forward DFT of real values, last axis cut to `n/2 + 1`.
fn rdft(x: &[f64], tail: &[usize]) -> Vec<C> {
    let z: Vec<C> = x.iter().map(|&v| C::new(v, 0.0)).collect();
    let n = tail[tail.len() - 1];
    crop_rows(&dft(&z, tail, false), n, n / 2 + 1)
}

/// `irfft` to output lengths `tail` from half spectra (last axis `n/2 +
/// 1`): `x_v = 1/N sum_u c(u_last) Re(z_u e^{2 pi i u.v/n})` over `u_last
/// <= n/2`, `c` 1 at 0 and (even `n`) `n/2`, else 2: the inverse DFT of
/// the Hermitian extension, ignoring the imaginary parts that must be 0
/// after the inverse over the outer axes.
fn irdft(z: &[C], tail: &[usize]) -> Vec<f64> {
    let k = tail.len();
    let n = tail[k - 1];
    let mut half = tail.to_vec();
    half[k - 1] = n / 2 + 1;
    let (points, inputs) = (
        tail.iter().product::<usize>(),
        half.iter().product::<usize>(),
    );
    let mut out = Vec::new();
    for b in 0..z.len() / inputs {
        for v in 0..points {
            let vi = unravel(v, tail);
            let mut s = 0.0;
            for u in 0..inputs {
                let ui = unravel(u, &half);
                let last = ui[k - 1];
                let c = if last == 0 || 2 * last == n { 1.0 } else { 2.0 };
                let phase = 2.0 * PI * turns(&ui, &vi, tail);
                s += c * (z[b * inputs + u] * C::from_polar(1.0, phase)).re;
            }
            out.push(s / points as f64);
        }
    }
    out
}

fn close(got: &[C], want: &[C], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = 1.0 + want.iter().map(|w| w.norm()).fold(0.0, f64::max);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).norm() <= tol * scale,
            "{what}: element {i}: {g} vs {w}"
        );
    }
}

fn to_c(v: &[f64]) -> Vec<C> {
    v.iter().map(|&x| C::new(x, 0.0)).collect()
}

/// A tensor's values as c128 (real tensors with imaginary part 0).
fn values(t: &Tensor) -> Vec<C> {
    if t.dtype().is_complex() {
        t.cast(DType::C128).unwrap().to_vec::<C>().unwrap()
    } else {
        to_c(&t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap())
    }
}

/// `f(x)` eagerly and inside `function`, both against `want`.
fn check_both(
    f: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + Clone + 'static,
    x: &Tensor,
    want: &[C],
    tol: f64,
    what: &str,
) {
    close(&values(&f(x).unwrap()), want, tol, &format!("{what} eager"));
    let g = f.clone();
    let traced = function(move |x: Tensor| g(&x)).call((x,)).unwrap();
    close(&values(&traced), want, tol, &format!("{what} traced"));
}

/// Shapes and how many innermost axes are transformed.
const CASES: &[(&[usize], usize)] = &[
    (&[8], 1),
    (&[3, 5], 1),
    (&[4, 6], 2),
    (&[2, 3, 5], 2),
    (&[2, 3, 4], 3),
    (&[2, 2, 3, 5], 3),
];

fn as_i64(dims: &[usize]) -> Vec<i64> {
    dims.iter().map(|&d| d as i64).collect()
}

fn tail(dims: &[usize], k: usize) -> Vec<usize> {
    dims[dims.len() - k..].to_vec()
}

/// (dtype, tolerance relative to the largest value).
const PRECISIONS: &[(DType, f64)] = &[(DType::C128, 1e-12), (DType::C64, 1e-5)];

#[test]
fn fft_and_ifft_match_direct_sums() {
    for (s, &(dims, k)) in CASES.iter().enumerate() {
        let n: usize = dims.iter().product();
        let x = complexes(n, s as u64 + 1);
        let t = tail(dims, k);
        let (fwd, inv) = (dft(&x, &t, false), dft(&x, &t, true));
        for &(dtype, tol) in PRECISIONS {
            let xt = Tensor::from_vec(x.clone(), &as_i64(dims))
                .unwrap()
                .cast(dtype)
                .unwrap();
            let what = format!("{dims:?} over {k} {dtype}");
            check_both(move |x| x.fftn(k), &xt, &fwd, tol, &format!("fft {what}"));
            check_both(move |x| x.ifftn(k), &xt, &inv, tol, &format!("ifft {what}"));
            check_both(
                move |x| x.fftn(k)?.ifftn(k),
                &xt,
                &x,
                tol,
                &format!("round trip {what}"),
            );
            assert_eq!(xt.fftn(k).unwrap().dtype(), dtype);
        }
    }
    // The 1-D shorthands, and real input made complex first (as NumPy).
    let x = reals(6, 7);
    let xt = Tensor::vector(&x).unwrap();
    let want = dft(&to_c(&x), &[6], false);
    close(&values(&xt.fft().unwrap()), &want, 1e-12, "fft of f64");
    assert_eq!(xt.fft().unwrap().dtype(), DType::C128);
    let x32 = xt.cast(DType::F32).unwrap();
    assert_eq!(x32.ifft().unwrap().dtype(), DType::C64);
    let inv = dft(&to_c(&x), &[6], true);
    close(&values(&x32.ifft().unwrap()), &inv, 1e-6, "ifft of f32");
}

#[test]
fn rfft_and_irfft_match_direct_sums() {
    for (s, &(dims, k)) in CASES.iter().enumerate() {
        let n: usize = dims.iter().product();
        let x = reals(n, s as u64 + 20);
        let t = tail(dims, k);
        let last = t[k - 1];
        let spectrum = rdft(&x, &t);
        // A half spectrum that is no rfft (imaginary parts everywhere).
        let mut half_dims = dims.to_vec();
        *half_dims.last_mut().unwrap() = last / 2 + 1;
        let z = complexes(half_dims.iter().product(), s as u64 + 40);
        let back = to_c(&irdft(&z, &t));
        for &(dtype, tol) in PRECISIONS {
            let real = if dtype == DType::C64 {
                DType::F32
            } else {
                DType::F64
            };
            let xt = Tensor::from_vec(x.clone(), &as_i64(dims))
                .unwrap()
                .cast(real)
                .unwrap();
            let zt = Tensor::from_vec(z.clone(), &as_i64(&half_dims))
                .unwrap()
                .cast(dtype)
                .unwrap();
            let what = format!("{dims:?} over {k} {dtype}");
            check_both(
                move |x| x.rfftn(k),
                &xt,
                &spectrum,
                tol,
                &format!("rfft {what}"),
            );
            assert_eq!(xt.rfftn(k).unwrap().dims(), as_i64(&half_dims));
            let n_last = last as i64;
            check_both(
                move |z| z.irfftn(k, Some(n_last)),
                &zt,
                &back,
                tol,
                &format!("irfft {what}"),
            );
            check_both(
                move |x| x.rfftn(k)?.irfftn(k, Some(n_last)),
                &xt,
                &to_c(&x),
                tol,
                &format!("round trip {what}"),
            );
            assert_eq!(zt.irfftn(k, Some(n_last)).unwrap().dtype(), real);
        }
    }
}

#[test]
fn irfft_output_lengths_default_crop_and_pad_as_numpy() {
    // np.fft.irfft(z) has n = 2 (m - 1); a given n uses the first n/2 + 1
    // entries of z, zero-padded when there are fewer.
    let z = complexes(5, 3);
    let zt = Tensor::vector(&z).unwrap();
    for (n, used) in [
        (None, 5),
        (Some(9), 5),
        (Some(5), 3),
        (Some(12), 7),
        (Some(1), 1),
    ] {
        let len = n.unwrap_or(8) as usize;
        let mut half: Vec<C> = z.iter().copied().take(used).collect();
        half.resize(len / 2 + 1, C::new(0.0, 0.0));
        let want = to_c(&irdft(&half, &[len]));
        let got = zt.irfft(n).unwrap();
        assert_eq!(got.dims(), vec![len as i64], "n = {n:?}");
        close(&values(&got), &want, 1e-12, &format!("irfft n = {n:?}"));
    }
    // The 1-D rfft shorthand.
    let x = reals(7, 9);
    let got = Tensor::vector(&x).unwrap().rfft().unwrap();
    close(&values(&got), &rdft(&x, &[7]), 1e-12, "rfft 1-D");
}

/// `f` of `complex(xy[0], xy[1])` (shape `dims`) as the real tensor of
/// its real parts then its imaginary parts, for the shared gradient check.
fn via_parts(
    f: impl Fn(&Tensor) -> Result<Tensor>,
    dims: &[i64],
) -> impl Fn(&Tensor) -> Result<Tensor> {
    let dims = dims.to_vec();
    move |xy: &Tensor| {
        let n: i64 = dims.iter().product();
        let flat = xy.reshape(&[2, n])?;
        let re = flat.slice(&[0, 0], &[1, n])?.reshape(&dims)?;
        let im = flat.slice(&[1, 0], &[1, n])?.reshape(&dims)?;
        flatten_parts(&f(&complex(&re, &im)?)?)
    }
}

/// Real parts then imaginary parts, as one real vector.
fn flatten_parts(out: &Tensor) -> Result<Tensor> {
    let m = out.size();
    Tensor::concat(&[out.real()?.reshape(&[m])?, out.imag()?.reshape(&[m])?], 0)
}

#[test]
fn gradients_match_finite_differences() {
    let cases: &[(&[i64], usize)] = &[(&[5], 1), (&[2, 4], 1), (&[3, 4], 2), (&[2, 2, 3], 3)];
    for (s, &(dims, k)) in cases.iter().enumerate() {
        let n: i64 = dims.iter().product();
        let xy = reals(2 * n as usize, s as u64 + 60);
        let what = format!("{dims:?} over {k}");
        check_gradient(
            &via_parts(move |z| z.fftn(k), dims),
            &xy,
            &[2 * n],
            1e-6,
            &format!("fft {what}"),
        );
        check_gradient(
            &via_parts(move |z| z.ifftn(k), dims),
            &xy,
            &[2 * n],
            1e-6,
            &format!("ifft {what}"),
        );
        // rfft of a real input; the output's parts.
        let x = reals(n as usize, s as u64 + 70);
        check_gradient(
            &move |x: &Tensor| flatten_parts(&x.rfftn(k)?),
            &x,
            dims,
            1e-6,
            &format!("rfft {what}"),
        );
        // irfft to even and odd output lengths, from every part of the
        // input (also those the transform ignores: their gradient is 0).
        for n_last in [dims[dims.len() - 1], dims[dims.len() - 1] + 1] {
            let mut half = dims.to_vec();
            *half.last_mut().unwrap() = n_last / 2 + 1;
            let m: i64 = half.iter().product();
            let zy = reals(2 * m as usize, s as u64 + 80);
            check_gradient(
                &via_parts(move |z| z.irfftn(k, Some(n_last)), &half),
                &zy,
                &[2 * m],
                1e-6,
                &format!("irfft {what} n = {n_last}"),
            );
        }
    }
    // Higher order: the gradient of a gradient through fft and rfft.
    let x = reals(6, 90);
    check_gradient(
        &|x: &Tensor| {
            let tape = GradientTape::new();
            tape.watch(x);
            let y = x.rfft()?.abs()?.square()?.reduce_sum(&[], false)?;
            Ok(tape.gradient(&y, &[x.into()])?[0].clone().unwrap())
        },
        &x,
        &[6],
        1e-5,
        "second order rfft",
    );
}

#[test]
fn bad_inputs_are_clear_errors() {
    let z = Tensor::from_vec(complexes(12, 1), &[2, 6]).unwrap();
    let x = Tensor::from_vec(reals(12, 2), &[2, 6]).unwrap();
    let expect = |r: Result<Tensor>, words: &[&str]| {
        let e = r.unwrap_err().to_string();
        assert!(words.iter().all(|w| e.contains(w)), "{words:?}: {e}");
    };
    // Dtypes.
    expect(Tensor::vector(&[1i32, 2]).unwrap().fft(), &["fft", "i32"]);
    expect(z.rfft(), &["rfft", "f32 or f64", "c128"]);
    expect(x.cast(DType::F16).unwrap().rfft(), &["rfft", "f16"]);
    expect(fft_op(&x, FftType::Fft, &[6]), &["fft", "complex", "f64"]);
    expect(
        fft_op(&x, FftType::Irfft, &[10]),
        &["irfft", "complex", "f64"],
    );
    // Lengths that do not match the operand.
    expect(
        fft_op(&z, FftType::Fft, &[8]),
        &["fft", "[8]", "c128(2, 6)"],
    );
    expect(fft_op(&z, FftType::Ifft, &[3, 6]), &["ifft", "[3, 6]"]);
    expect(fft_op(&x, FftType::Rfft, &[5]), &["rfft", "[5]"]);
    expect(fft_op(&z, FftType::Irfft, &[6]), &["irfft", "[6]", "[4]"]);
    expect(fft_op(&z, FftType::Fft, &[]), &["fft", "1 to 3"]);
    expect(fft_op(&z, FftType::Fft, &[1, 1, 2, 6]), &["fft", "1 to 3"]);
    expect(fft_op(&z, FftType::Fft, &[0]), &["fft", ">= 1"]);
    // Too small a rank.
    expect(z.fftn(3), &["fft", "rank >= 3"]);
    expect(
        Tensor::scalar(C::new(1.0, 0.0)).fft(),
        &["fft", "rank >= 1"],
    );
    expect(fft_op(&z, FftType::Fft, &[1, 2, 6]), &["fft", "rank >= 3"]);
    expect(z.fftn(4), &["fft", "1 to 3"]);
    expect(z.irfft(Some(0)), &["irfft", ">= 1"]);
    // The good cases still work.
    assert_eq!(
        fft_op(&z, FftType::Irfft, &[10]).unwrap().dims(),
        vec![2, 10]
    );
    assert_eq!(
        fft_op(&z, FftType::Irfft, &[11]).unwrap().dims(),
        vec![2, 11]
    );
}

#[test]
fn shapes_known_only_at_call_time_are_checked_before_xla() {
    // The lengths are fixed when tracing; the operand's last axis is not.
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None], DType::C64)])
        .build(|z: Tensor| fft_op(&z, FftType::Fft, &[4]));
    let ok = Tensor::from_vec(vec![Complex32::new(1.0, 0.0); 4], &[4]).unwrap();
    assert_eq!(
        f.call((&ok,)).unwrap().to_vec::<Complex32>().unwrap(),
        vec![
            Complex32::new(4.0, 0.0),
            Complex32::new(0.0, 0.0),
            Complex32::new(0.0, 0.0),
            Complex32::new(0.0, 0.0)
        ]
    );
    let bad = Tensor::from_vec(vec![Complex32::new(1.0, 0.0); 6], &[6]).unwrap();
    let e = f.call((&bad,)).unwrap_err().to_string();
    assert!(e.contains("fft") && e.contains("[4]"), "{e}");
    // The NumPy-style methods need the transformed axes known.
    let g = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None], DType::C64)])
        .build(|z: Tensor| z.fft());
    let e = g.call((&ok,)).unwrap_err().to_string();
    assert!(e.contains("fft") && e.contains("known"), "{e}");
}

#[test]
fn empty_batches_transform_to_empty_results() {
    let z = Tensor::from_vec(Vec::<C>::new(), &[0, 4]).unwrap();
    assert_eq!(z.fft().unwrap().dims(), vec![0, 4]);
    assert_eq!(z.irfft(None).unwrap().dims(), vec![0, 6]);
    let x = Tensor::from_vec(Vec::<f32>::new(), &[0, 3, 4]).unwrap();
    assert_eq!(x.rfftn(2).unwrap().dims(), vec![0, 3, 3]);
}

#[test]
fn a_function_with_transforms_exports_and_loads() {
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None, Some(8)], DType::F32)])
        .build(|x: Tensor| -> Result<Tensor> {
            let spectrum = x.rfft()?;
            let smoothed = spectrum.mul(&spectrum.conj()?)?.irfft(Some(8))?;
            Tensor::concat(&[smoothed, x.fft()?.ifft()?.real()?], 0)
        });
    let cf = f
        .get_concrete_function((TensorSpec::new(&[None, Some(8)], DType::F32),))
        .unwrap();
    let scratch = scratch::scratch_dir("fft-export");
    let dir = scratch.join("fft-export");
    let _ = std::fs::remove_dir_all(&dir);
    cf.export(&dir, &[vec![vec![2, 8]]]).unwrap();
    let graph = std::fs::read_to_string(dir.join("graph.json")).unwrap();
    assert!(
        graph.contains("irfft") || graph.contains("Irfft"),
        "{graph}"
    );
    let loaded = xlafn::load(&dir).unwrap();
    for rows in [2i64, 3] {
        let x: Vec<f32> = reals(8 * rows as usize, 5)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let xt = Tensor::from_vec(x, &[rows, 8]).unwrap();
        let want = f.call((&xt,)).unwrap().to_vec::<f32>().unwrap();
        let got = loaded.call(&[&xt]).unwrap()[0].to_vec::<f32>().unwrap();
        assert_eq!(got, want, "rows = {rows}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// NumPy's `norm`: `ortho` scales each way by `1/sqrt(n)` and `forward`
/// moves the `1/n` to the forward transform, against the direct sums; each
/// pair still round-trips, and `ortho` keeps the sum of squares
/// (Parseval).
#[test]
fn norm_modes_scale_as_numpy() {
    let dims = [2usize, 3, 4];
    let (n2, tail2) = (12.0f64, [3usize, 4]);
    let x = complexes(24, 9);
    let xt = Tensor::from_vec(x.clone(), &as_i64(&dims)).unwrap();
    let scaled = |v: &[C], k: f64| -> Vec<C> { v.iter().map(|z| z * k).collect() };
    let forward = dft(&x, &tail2, false);
    let inverse = dft(&x, &tail2, true);
    for (norm, fwd, inv) in [
        (FftNorm::Backward, 1.0, 1.0 / n2),
        (FftNorm::Ortho, 1.0 / n2.sqrt(), 1.0 / n2.sqrt()),
        (FftNorm::Forward, 1.0 / n2, 1.0),
    ] {
        let what = format!("{norm:?}");
        check_both(
            move |t| t.fftn_norm(2, norm),
            &xt,
            &scaled(&forward, fwd),
            1e-12,
            &what,
        );
        check_both(
            move |t| t.ifftn_norm(2, norm),
            &xt,
            &scaled(&inverse, inv * n2),
            1e-12,
            &what,
        );
        let back = xt.fftn_norm(2, norm).unwrap().ifftn_norm(2, norm).unwrap();
        close(&values(&back), &x, 1e-12, &format!("{what} round trip"));
        let r = reals(24, 3);
        let rt = Tensor::from_vec(r.clone(), &as_i64(&dims)).unwrap();
        let spectrum = rt.rfftn_norm(2, norm).unwrap();
        close(
            &values(&spectrum),
            &scaled(&rdft(&r, &tail2), fwd),
            1e-12,
            &format!("{what} rfft"),
        );
        let again = spectrum.irfftn_norm(2, Some(4), norm).unwrap();
        close(
            &values(&again),
            &to_c(&r),
            1e-12,
            &format!("{what} irfft round trip"),
        );
    }
    let energy = |v: &[C]| v.iter().map(|z| z.norm_sqr()).sum::<f64>();
    let unitary = values(&xt.fftn_norm(2, FftNorm::Ortho).unwrap());
    assert!((energy(&unitary) - energy(&x)).abs() < 1e-12 * energy(&x));
}
