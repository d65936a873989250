//! Complex dtypes (c64, c128): host round trips, printing
//! (the strings NumPy 2.x prints for the same arrays), `.npy` files and
//! exports, `complex`/`real`/`imag`/`conj`/`angle`, arithmetic and
//! elementwise functions against `num-complex` (a reference independent of
//! xlafn), eagerly and traced; clear errors for what complex numbers do
//! not have (order, promotion); gradients (JAX's convention) against
//! finite differences of the real and imaginary parts in f64.

#[path = "common/scratch.rs"]
mod scratch;

#[path = "common/gradcheck.rs"]
mod gradcheck;

use gradcheck::check_gradient;
use xlafn::export::npy;
use xlafn::ops::complex::complex;
use xlafn::prelude::*;

type C = Complex64;

/// Values off the branch cuts of log, sqrt and pow (no negative reals).
fn samples() -> Vec<C> {
    [
        (0.5, 0.25),
        (-1.2, 0.8),
        (2.0, -1.5),
        (-0.3, -0.9),
        (1.1, 0.4),
        (0.7, -2.1),
    ]
    .iter()
    .map(|&(re, im)| C::new(re, im))
    .collect()
}

fn c128(v: &[C], dims: &[i64]) -> Tensor {
    Tensor::from_slice(v, dims).unwrap()
}

/// Values of a c64 or c128 tensor as c128.
fn values(t: &Tensor) -> Vec<C> {
    t.cast(DType::C128).unwrap().to_vec::<C>().unwrap()
}

fn close(a: C, b: C, tol: f64) -> bool {
    (a - b).norm() <= tol * (1.0 + b.norm())
}

fn assert_close(got: &[C], want: &[C], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(close(*g, *w, tol), "{what}: element {i}: {g} vs {w}");
    }
}

/// `f` eagerly and inside `function`, each against `want`.
fn check_both(
    f: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + Clone + 'static,
    x: &Tensor,
    want: &[C],
    tol: f64,
    what: &str,
) {
    assert_close(&values(&f(x).unwrap()), want, tol, &format!("{what} eager"));
    let g = f.clone();
    let traced = function(move |x: Tensor| g(&x)).call((x,)).unwrap();
    assert_close(&values(&traced), want, tol, &format!("{what} traced"));
}

#[test]
fn names_sizes_and_host_round_trips() {
    for (d, names, size) in [
        (DType::C64, ["c64", "complex64"], 8),
        (DType::C128, ["c128", "complex128"], 16),
    ] {
        assert!(d.is_complex() && d.is_inexact() && !d.is_float() && !d.is_numeric());
        assert_eq!(d.size_in_bytes().unwrap(), size);
        assert_eq!(d.name(), names[0]);
        for n in names {
            assert_eq!(DType::from_name(n).unwrap(), d);
        }
    }
    let v = vec![Complex32::new(1.0, -2.0), Complex32::new(0.5, 3.25)];
    let t = Tensor::from_vec(v.clone(), &[2]).unwrap();
    assert_eq!(t.dtype(), DType::C64);
    assert_eq!(t.to_vec::<Complex32>().unwrap(), v);
    let z = c128(&samples(), &[2, 3]);
    assert_eq!(z.dtype(), DType::C128);
    assert_eq!(z.to_vec::<C>().unwrap(), samples());
    assert_eq!(
        Tensor::scalar(C::new(1.5, -0.5)).item::<C>().unwrap(),
        C::new(1.5, -0.5)
    );
    // Reading complex values as f64 or f32 is refused, not reinterpreted.
    assert!(z.to_vec::<f64>().is_err());
    let e = z.to_f64_vec().unwrap_err().to_string();
    assert!(e.contains("complex") && e.contains("to_vec"), "{e}");
    // Host scalars given to complex ops are real numbers; fills too.
    let w = z.mul_scalar(2.0).unwrap().add_scalar(1.0).unwrap();
    let want: Vec<C> = samples().iter().map(|s| s * 2.0 + 1.0).collect();
    assert_close(&values(&w), &want, 0.0, "scalar ops");
    let ones = Tensor::ones(&[2], DType::C64);
    assert_eq!(
        ones.to_vec::<Complex32>().unwrap(),
        vec![Complex32::new(1.0, 0.0); 2]
    );
    assert_eq!(values(&z.zeros_like().unwrap()), vec![C::new(0.0, 0.0); 6]);
}

#[test]
fn complex_tensors_print_as_numpy_does() {
    let show = |v: &[C], dims: &[i64]| c128(v, dims).to_string();
    assert_eq!(
        show(&[C::new(1.0, 2.0), C::new(3.5, -4.0)], &[2]),
        "tf.Tensor([1. +2.j 3.5-4.j], shape=(2,), dtype=c128)"
    );
    let c64 = Tensor::from_vec(
        vec![Complex32::new(1.0, 2.0), Complex32::new(3.5, -4.0)],
        &[2],
    )
    .unwrap();
    assert_eq!(
        c64.to_string(),
        "tf.Tensor([1. +2.j 3.5-4.j], shape=(2,), dtype=c64)"
    );
    for (z, want) in [
        (C::new(1.0, 2.0), "(1+2j)"),
        (C::new(0.0, 2.0), "2j"),
        (C::new(1.5, -0.25), "(1.5-0.25j)"),
        (C::new(f64::NAN, f64::INFINITY), "(nan+infj)"),
    ] {
        assert_eq!(
            show(&[z], &[]),
            format!("tf.Tensor({want}, shape=(), dtype=c128)")
        );
    }
    assert_eq!(
        Tensor::scalar(Complex32::new(1e-5, 1e20)).to_string(),
        "tf.Tensor((1e-05+1e+20j), shape=(), dtype=c64)"
    );
    let m = [
        C::new(0.1, 0.0),
        C::new(-0.0, -1e-5),
        C::new(f64::NAN, 1.0),
        C::new(2.0, f64::INFINITY),
    ];
    assert_eq!(
        show(&m, &[2, 2]),
        "tf.Tensor(\n[[ 0.1+0.e+00j -0. -1.e-05j]\n [ nan+1.e+00j  2.    +infj]], \
         shape=(2, 2), dtype=c128)"
    );
    assert_eq!(
        show(&[C::new(1e10, 1.0), C::new(1.0, -1.0)], &[2]),
        "tf.Tensor([1.e+10+1.j 1.e+00-1.j], shape=(2,), dtype=c128)"
    );
    let wide = show(&[C::new(1.0, 1.0); 30], &[30]);
    let row = ["1.+1.j"; 10].join(" ");
    assert_eq!(
        wide,
        format!("tf.Tensor(\n[{row}\n {row}\n {row}], shape=(30,), dtype=c128)")
    );
}

#[test]
fn npy_files_hold_complex_arrays() {
    for t in [
        c128(&samples(), &[3, 2]),
        Tensor::from_vec(vec![Complex32::new(1.0, -1.0); 4], &[4]).unwrap(),
    ] {
        let bytes = npy::encode(&t.to_host_array().unwrap()).unwrap();
        let header = String::from_utf8_lossy(&bytes[..64]).to_string();
        let descr = if t.dtype() == DType::C64 {
            "<c8"
        } else {
            "<c16"
        };
        assert!(header.contains(&format!("'descr': '{descr}'")), "{header}");
        let back = npy::decode(&bytes).unwrap();
        assert_eq!(back, t.to_host_array().unwrap());
        let u = Tensor::from_host_bytes(back.dtype, &back.dims, &back.bytes).unwrap();
        assert_eq!(values(&u), values(&t));
    }
}

#[test]
fn parts_conjugate_and_angle() {
    let z = samples();
    let zt = c128(&z, &[6]);
    let re: Vec<f64> = z.iter().map(|v| v.re).collect();
    let im: Vec<f64> = z.iter().map(|v| v.im).collect();
    assert_eq!(zt.real().unwrap().to_vec::<f64>().unwrap(), re);
    assert_eq!(zt.imag().unwrap().to_vec::<f64>().unwrap(), im);
    let conj: Vec<C> = z.iter().map(|v| v.conj()).collect();
    check_both(|z| z.conj(), &zt, &conj, 0.0, "conj");
    let angle: Vec<C> = z.iter().map(|v| C::new(v.arg(), 0.0)).collect();
    check_both(
        |z| z.angle()?.cast(DType::C128),
        &zt,
        &angle,
        1e-15,
        "angle",
    );
    // complex(re, im) with broadcasting, and back; f32 parts give c64.
    let rt = Tensor::from_vec(re.clone(), &[6, 1]).unwrap();
    let it = Tensor::from_vec(vec![1.0f64, -2.0], &[2]).unwrap();
    let c = complex(&rt, &it).unwrap();
    assert_eq!(c.dims(), vec![6, 2]);
    let want: Vec<C> = re
        .iter()
        .flat_map(|&r| [C::new(r, 1.0), C::new(r, -2.0)])
        .collect();
    assert_eq!(values(&c), want);
    let c32 = rt
        .cast(DType::F32)
        .unwrap()
        .complex(&rt.cast(DType::F32).unwrap());
    assert_eq!(c32.unwrap().dtype(), DType::C64);
    // Of real tensors: the tensor, zeros, the tensor, 0 or pi.
    let x = Tensor::vector(&[2.0f32, -3.0]).unwrap();
    assert_eq!(x.real().unwrap().to_vec::<f32>().unwrap(), vec![2.0, -3.0]);
    assert_eq!(x.imag().unwrap().to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
    assert_eq!(x.conj().unwrap().to_vec::<f32>().unwrap(), vec![2.0, -3.0]);
    let pi = std::f32::consts::PI;
    assert_eq!(x.angle().unwrap().to_vec::<f32>().unwrap(), vec![0.0, pi]);
    // Casts: real to complex has imaginary part 0; complex to real keeps
    // the real part; c64 <-> c128.
    assert_eq!(
        values(&x.cast(DType::C64).unwrap()),
        vec![C::new(2.0, 0.0), C::new(-3.0, 0.0)]
    );
    assert_eq!(
        zt.cast(DType::F32).unwrap().to_vec::<f32>().unwrap(),
        re.iter().map(|&v| v as f32).collect::<Vec<_>>()
    );
    assert_eq!(
        zt.cast(DType::I32).unwrap().to_vec::<i32>().unwrap(),
        vec![0, -1, 2, 0, 1, 0]
    );
    assert_eq!(
        zt.cast(DType::Bool).unwrap().to_vec::<bool>().unwrap(),
        vec![true; 6]
    );
    assert_close(
        &values(&zt.cast(DType::C64).unwrap()),
        &z,
        1e-7,
        "c128 -> c64",
    );
}

type Reference = fn(C) -> C;
type Reference2 = fn(C, C) -> C;
type TensorFn = fn(&Tensor) -> Result<Tensor>;
type BinaryFn = fn(&Tensor, &Tensor) -> Result<Tensor>;
type BoxedFn = Box<dyn Fn(&Tensor) -> Result<Tensor>>;

#[test]
fn elementwise_functions_match_num_complex() {
    let unary: Vec<(&str, TensorFn, Reference)> = vec![
        ("neg", |z| z.neg(), |z| -z),
        ("exp", |z| z.exp(), |z| z.exp()),
        ("log", |z| z.log(), |z| z.ln()),
        ("log1p", |z| z.log1p(), |z| (z + 1.0).ln()),
        ("expm1", |z| z.expm1(), |z| z.exp() - 1.0),
        ("sqrt", |z| z.sqrt(), |z| z.sqrt()),
        ("rsqrt", |z| z.rsqrt(), |z| z.sqrt().inv()),
        ("square", |z| z.square(), |z| z * z),
        ("reciprocal", |z| z.reciprocal(), |z| z.inv()),
        ("sign", |z| z.sign(), |z| z / z.norm()),
        ("tanh", |z| z.tanh(), |z| z.tanh()),
        ("sin", |z| z.sin(), |z| z.sin()),
        ("cos", |z| z.cos(), |z| z.cos()),
        (
            "abs",
            |z| z.abs()?.cast(z.dtype()),
            |z| C::new(z.norm(), 0.0),
        ),
    ];
    let z = samples();
    for dtype in [DType::C128, DType::C64] {
        let tol = if dtype == DType::C64 { 2e-6 } else { 1e-13 };
        let zt = c128(&z, &[2, 3]).cast(dtype).unwrap();
        for (name, f, reference) in &unary {
            let want: Vec<C> = z.iter().map(|&v| reference(v)).collect();
            check_both(*f, &zt, &want, tol, &format!("{name} {dtype}"));
        }
        assert_eq!(
            zt.abs().unwrap().dtype(),
            if dtype == DType::C64 {
                DType::F32
            } else {
                DType::F64
            }
        );
    }
}

#[test]
fn arithmetic_matches_num_complex_with_broadcasting() {
    let ops: Vec<(&str, BinaryFn, Reference2)> = vec![
        ("add", |a, b| a.add(b), |a, b| a + b),
        ("sub", |a, b| a.sub(b), |a, b| a - b),
        ("mul", |a, b| a.mul(b), |a, b| a * b),
        ("div", |a, b| a.div(b), |a, b| a / b),
        ("pow", |a, b| a.pow(b), |a, b| a.powc(b)),
    ];
    let a = samples();
    let b = [C::new(0.3, -0.6), C::new(-1.5, 0.25)];
    for dtype in [DType::C128, DType::C64] {
        let tol = if dtype == DType::C64 { 5e-6 } else { 1e-13 };
        let at = c128(&a, &[3, 2]).cast(dtype).unwrap();
        let bt = c128(&b, &[2]).cast(dtype).unwrap();
        for (name, f, reference) in &ops {
            let want: Vec<C> = (0..6).map(|i| reference(a[i], b[i % 2])).collect();
            let eager = values(&f(&at, &bt).unwrap());
            assert_close(&eager, &want, tol, &format!("{name} {dtype} eager"));
            let g = *f;
            let traced = function(move |x: Tensor, y: Tensor| g(&x, &y))
                .call((&at, &bt))
                .unwrap();
            assert_close(&values(&traced), &want, tol, &format!("{name} {dtype}"));
        }
        // Equality compares both parts.
        let same = at.eq(&at.conj().unwrap()).unwrap();
        assert_eq!(same.to_vec::<bool>().unwrap(), vec![false; 6]);
        assert_eq!(
            at.ne(&at).unwrap().to_vec::<bool>().unwrap(),
            vec![false; 6]
        );
    }
    // Sums, means and products over axes.
    let at = c128(&a, &[3, 2]);
    let sum: Vec<C> = (0..2).map(|j| (0..3).map(|i| a[2 * i + j]).sum()).collect();
    assert_close(
        &values(&at.reduce_sum(&[0], false).unwrap()),
        &sum,
        1e-15,
        "sum",
    );
    let mean: Vec<C> = sum.iter().map(|s| s / 3.0).collect();
    assert_close(
        &values(&at.reduce_mean(&[0], false).unwrap()),
        &mean,
        1e-15,
        "mean",
    );
    let prod: Vec<C> = (0..3).map(|i| a[2 * i] * a[2 * i + 1]).collect();
    assert_close(
        &values(&at.reduce_prod(&[1], false).unwrap()),
        &prod,
        1e-15,
        "prod",
    );
}

#[test]
fn what_complex_numbers_lack_is_refused_clearly() {
    let z = c128(&samples(), &[6]);

    let ordering: Vec<(&str, TensorFn)> = vec![
        ("less", |z| z.lt(z)),
        ("greater_equal", |z| z.ge(z)),
        ("maximum", |z| z.maximum(z)),
        ("minimum", |z| z.minimum(z)),
        ("floor", |z| z.floor()),
        ("round", |z| z.round()),
        ("relu", |z| z.relu()),
        ("reduce_max", |z| z.reduce_max(&[], false)),
        ("reduce_min", |z| z.reduce_min(&[], false)),
    ];
    for (name, f) in ordering {
        let e = f(&z).unwrap_err().to_string();
        assert!(
            e.contains(name) && e.contains("no order") && e.contains("c128"),
            "{name}: {e}"
        );
    }
    let unsupported: Vec<(&str, TensorFn)> = vec![
        ("floordiv", |z| z.floordiv(z)),
        ("is_nan", |z| z.is_nan()),
        ("erf", |z| z.erf()),
        ("atan2", |z| z.atan2(z)),
    ];
    for (name, f) in unsupported {
        let e = f(&z).unwrap_err().to_string();
        assert!(
            e.contains(name) && e.contains("complex") && e.contains("c128"),
            "{name}: {e}"
        );
    }
    // No promotion between complex and real, or between c64 and c128.
    let x = Tensor::vector(&[1.0f64; 6]).unwrap();
    let e = z.add(&x).unwrap_err().to_string();
    assert!(e.contains("c128") && e.contains("f64"), "{e}");
    let e = z.mul(&z.cast(DType::C64).unwrap()).unwrap_err().to_string();
    assert!(e.contains("c64") && e.contains("c128"), "{e}");
    // complex() takes f32 or f64 parts; real/imag/conj ops complex input.
    let i = Tensor::vector(&[1i32, 2]).unwrap();
    let e = complex(&i, &i).unwrap_err().to_string();
    assert!(e.contains("complex") && e.contains("i32"), "{e}");
    let h = Tensor::vector(&[1.0f32]).unwrap().cast(DType::F16).unwrap();
    assert!(complex(&h, &h).is_err());
    // A complex loss has no gradient in JAX's convention.
    let tape = GradientTape::new();
    tape.watch(&z);
    let loss = z.square().unwrap().reduce_sum(&[], false).unwrap();
    let e = tape
        .gradient(&loss, &[(&z).into()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("complex") && e.contains(".real()"), "{e}");
}

/// `f` of the complex tensor `complex(xy[0], xy[1])`, as the real tensor
/// of its real parts followed by its imaginary parts: what the shared
/// gradient check differentiates (JAX's convention makes the gradient of
/// the real and imaginary parts of the input exactly these derivatives).
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
        let out = f(&complex(&re, &im)?)?;
        let m = out.size();
        Tensor::concat(&[out.real()?.reshape(&[m])?, out.imag()?.reshape(&[m])?], 0)
    }
}

fn parts(z: &[C]) -> Vec<f64> {
    z.iter()
        .map(|v| v.re)
        .chain(z.iter().map(|v| v.im))
        .collect()
}

/// `tan` ... `atanh` of `samples()`, principal branches, from Python's
/// `cmath` (an independent reference).
const CMATH: [(&str, [(f64, f64); 6]); 9] = [
    (
        "tan",
        [
            (0.504500702698564, 0.31242069250258875),
            (-0.36708543868532323, 1.291019894697673),
            (-0.08039101531016819, -1.064144399176537),
            (-0.14357231774262788, -0.7481101788266167),
            (1.07952982287592, 1.1858270353667335),
            (0.029398305363207602, -0.9944821228828966),
        ],
    ),
    (
        "sinh",
        [
            (0.504895714387995, 0.2789791283502615),
            (-1.0516518538159267, 1.2988847997412711),
            (0.2565539560904818, -3.752771340479298),
            (-0.1892928499474517, -0.8188417877871457),
            (1.2302127864700132, 0.64975172934069),
            (-0.38296802688662823, -1.083473642387983),
        ],
    ),
    (
        "cosh",
        [
            (1.0925708047319176, 0.12892104172809826),
            (1.26149588207169, -1.0828212972823714),
            (0.26612719531354573, -3.6177750739401375),
            (0.6497928405997444, 0.2385389403848046),
            (1.536807357695784, 0.5201256237244998),
            (-0.6336671831072582, -0.6548165568150617),
        ],
    ),
    (
        "asin",
        [
            (0.5016088532755008, 0.28139605624529274),
            (-0.8604858014283674, 1.0330578378621589),
            (0.887765146183905, -1.6004100552346137),
            (-0.22230829868815763, -0.8256497577388225),
            (1.0406293280307743, 0.7256392060791159),
            (0.29450420514593645, -1.5273742561709232),
        ],
    ),
    (
        "acos",
        [
            (1.069187473519396, -0.28139605624529274),
            (2.431282128223264, -1.0330578378621589),
            (0.6830311806109914, 1.6004100552346137),
            (1.7931046254830543, 0.8256497577388225),
            (0.5301669987641223, -0.7256392060791159),
            (1.27629212164896, 1.5273742561709232),
        ],
    ),
    (
        "atan",
        [
            (0.4842544903299662, 0.20058661813123432),
            (-0.9968251264639186, 0.28781400553838293),
            (1.2452579660726568, -0.22008968066202295),
            (-0.7028238246901349, -0.9027294781610562),
            (0.8687094212469383, 0.17566399213224312),
            (1.3984726689858835, -0.4454767931962608),
        ],
    ),
    (
        "asinh",
        [
            (0.4926756834207706, 0.2243284526346675),
            (-1.1158812664599942, 0.4931343701154453),
            (1.6224941488715938, -0.6065115181997547),
            (-0.48489484567067836, -0.9334124028332983),
            (0.9772333881748545, 0.2668834297135648),
            (1.4460707181848123, -1.2142406543769817),
        ],
    ),
    (
        "acosh",
        [
            (0.28139605624529274, 1.069187473519396),
            (1.0330578378621589, 2.431282128223264),
            (1.6004100552346137, -0.6830311806109914),
            (0.8256497577388225, -1.7931046254830543),
            (0.7256392060791159, 0.5301669987641223),
            (1.5273742561709232, -1.27629212164896),
        ],
    ),
    (
        "atanh",
        [
            (0.5003700000525311, 0.3143981432077165),
            (-0.5216918954429771, 1.082272996752834),
            (0.3104282830771958, -1.311223269671635),
            (-0.16348161685166598, -0.75764891077459),
            (0.8228675117094971, 1.0019982476132658),
            (0.12094923784451785, -1.1595871871592074),
        ],
    ),
];

#[test]
fn trigonometric_and_hyperbolic_functions_match_cmath() {
    let z = c128(&samples(), &[6]);
    let f = function(|z: Tensor| {
        Ok(vec![
            z.tan()?,
            z.sinh()?,
            z.cosh()?,
            z.asin()?,
            z.acos()?,
            z.atan()?,
            z.asinh()?,
            z.acosh()?,
            z.atanh()?,
        ])
    });
    let compiled = f.call((&z,)).unwrap();
    let eager = [
        z.tan(),
        z.sinh(),
        z.cosh(),
        z.asin(),
        z.acos(),
        z.atan(),
        z.asinh(),
        z.acosh(),
        z.atanh(),
    ];
    for (((name, want), e), c) in CMATH.iter().zip(eager).zip(&compiled) {
        let want: Vec<C> = want.iter().map(|&(re, im)| C::new(re, im)).collect();
        assert_close(&values(&e.unwrap()), &want, 1e-13, name);
        assert_close(&values(c), &want, 1e-13, name);
    }
    // c64 too, to single precision.
    let z64 = z.cast(DType::C64).unwrap();
    let want: Vec<C> = CMATH[0].1.iter().map(|&(re, im)| C::new(re, im)).collect();
    assert_close(&values(&z64.tan().unwrap()), &want, 1e-5, "tan c64");
}

#[test]
fn complex_systems_and_determinants_match_hand_worked_values() {
    let c = C::new;
    // A = [[i, 2], [3, 1 - i]] needs a row exchange (|3| > |i|);
    // det = i (1 - i) - 6 = -5 + i; x = [1, i] gives b = [3i, 4 + i].
    let a = c128(&[c(0., 1.), c(2., 0.), c(3., 0.), c(1., -1.)], &[2, 2]);
    let b = c128(&[c(0., 3.), c(4., 1.)], &[2]);
    assert_close(&values(&a.det().unwrap()), &[c(-5., 1.)], 1e-14, "det");
    assert_close(
        &values(&a.solve(&b).unwrap()),
        &[c(1., 0.), c(0., 1.)],
        1e-14,
        "solve",
    );
    let eye = a.matmul(&a.inv().unwrap()).unwrap();
    let want = [c(1., 0.), c(0., 0.), c(0., 0.), c(1., 0.)];
    assert_close(&values(&eye), &want, 1e-14, "A inv(A)");
    let f = function(|a: Tensor, b: Tensor| Ok((a.solve(&b)?, a.det()?)));
    let (x, d) = f.call((&a, &b)).unwrap();
    assert_close(
        &values(&x),
        &[c(1., 0.), c(0., 1.)],
        1e-14,
        "compiled solve",
    );
    assert_close(&values(&d), &[c(-5., 1.)], 1e-14, "compiled det");
    let e = a.slogdet().unwrap_err().to_string();
    assert!(e.contains("float matrices"), "{e}");
    // Gradients of the real and imaginary parts, JAX's convention.
    let z = samples()[..4].to_vec();
    let rhs = c128(&[c(0.3, -0.2), c(-1.1, 0.6)], &[2]);
    let cases: Vec<(&str, BoxedFn)> = vec![
        ("solve", Box::new(move |z| z.solve(&rhs))),
        ("det", Box::new(|z| z.det())),
        ("inv", Box::new(|z| z.inv())),
    ];
    for (name, f) in cases {
        check_gradient(&via_parts(f, &[2, 2]), &parts(&z), &[2, 2, 2], 1e-6, name);
    }
}

#[test]
fn complex_products_match_hand_computed_values() {
    let c = C::new;
    let a = c128(&[c(1., 1.), c(2., 0.), c(0., 0.), c(0., 1.)], &[2, 2]);
    let b = c128(&[c(1., 0.), c(0., -1.), c(0., 1.), c(1., 0.)], &[2, 2]);
    // By hand: A B and A Bᵀ.
    let ab = [c(1., 3.), c(3., -1.), c(-1., 0.), c(0., 1.)];
    let abt = [c(1., -1.), c(1., 1.), c(1., 0.), c(0., 1.)];
    assert_close(&values(&a.matmul(&b).unwrap()), &ab, 1e-15, "matmul");
    assert_close(
        &values(&a.matmul_t(&b, false, true).unwrap()),
        &abt,
        1e-15,
        "matmul_t",
    );
    let e = xlafn::einsum("ij,jk->ik", &[&a, &b]).unwrap();
    assert_close(&values(&e), &ab, 1e-15, "einsum");
    let f = function(|a: Tensor, b: Tensor| a.matmul(&b));
    assert_close(&values(&f.call((&a, &b)).unwrap()), &ab, 1e-15, "compiled");
    // c64 operands accumulated in c128 (`preferred_element_type`).
    let (a64, b64) = (a.cast(DType::C64).unwrap(), b.cast(DType::C64).unwrap());
    let wide = a64.matmul_preferred(&b64, DType::C128).unwrap();
    assert_eq!(wide.dtype(), DType::C128);
    assert_close(&values(&wide), &ab, 1e-7, "c64 -> c128");
}

#[test]
fn gradients_match_finite_differences() {
    let z = samples();
    let w = c128(&[C::new(0.4, -1.3), C::new(-0.7, 0.2)], &[2]);
    let cases: Vec<(&str, BoxedFn)> = vec![
        ("real", Box::new(|z| z.real())),
        ("imag", Box::new(|z| z.imag())),
        ("conj", Box::new(|z| z.conj())),
        ("abs", Box::new(|z| z.abs())),
        ("angle", Box::new(|z| z.angle())),
        ("neg", Box::new(|z| z.neg())),
        ("exp", Box::new(|z| z.exp())),
        ("log", Box::new(|z| z.log())),
        ("log1p", Box::new(|z| z.log1p())),
        ("expm1", Box::new(|z| z.expm1())),
        ("sqrt", Box::new(|z| z.sqrt())),
        ("rsqrt", Box::new(|z| z.rsqrt())),
        ("square", Box::new(|z| z.square())),
        ("reciprocal", Box::new(|z| z.reciprocal())),
        ("tanh", Box::new(|z| z.tanh())),
        ("sin", Box::new(|z| z.sin())),
        ("cos", Box::new(|z| z.cos())),
        ("tan", Box::new(|z| z.tan())),
        ("sinh", Box::new(|z| z.sinh())),
        ("cosh", Box::new(|z| z.cosh())),
        ("asin", Box::new(|z| z.asin())),
        ("acos", Box::new(|z| z.acos())),
        ("atan", Box::new(|z| z.atan())),
        ("asinh", Box::new(|z| z.asinh())),
        ("acosh", Box::new(|z| z.acosh())),
        ("atanh", Box::new(|z| z.atanh())),
        ("mul", Box::new(move |z| z.mul(&w))),
        (
            "div",
            Box::new({
                let w = c128(&[C::new(0.4, -1.3), C::new(-0.7, 0.2)], &[2]);
                move |z| w.div(z)
            }),
        ),
        ("pow", Box::new(|z| z.pow(&z.conj()?))),
        (
            "matmul",
            Box::new(|z| {
                let w = c128(
                    &[
                        C::new(0.4, -1.3),
                        C::new(-0.7, 0.2),
                        C::new(1.1, 0.5),
                        C::new(0.3, 0.9),
                    ],
                    &[2, 2],
                );
                z.matmul(&w)?
                    .add(&w.matmul_t(&z.exp()?, false, true)?.reduce_sum(&[], false)?)
            }),
        ),
        (
            "einsum",
            Box::new(|z| xlafn::einsum("ij,kj->ik", &[z, &z.conj()?])),
        ),
        ("sum", Box::new(|z| z.reduce_sum(&[0], false))),
        ("mean", Box::new(|z| z.reduce_mean(&[1], true))),
        ("prod", Box::new(|z| z.reduce_prod(&[0], false))),
        ("cast f64", Box::new(|z| z.cast(DType::F64))),
        (
            "transpose",
            Box::new(|z| z.transpose(&[1, 0])?.mul(&z.transpose(&[1, 0])?)),
        ),
        (
            "slice+pad",
            Box::new(|z| {
                z.slice(&[1, 0], &[2, 2])?
                    .square()?
                    .pad(&[[0, 1], [1, 0]], PadMode::Constant, 0.0)
            }),
        ),
        (
            "where",
            Box::new(|z| {
                let keep = z.real()?.gt_scalar(0.0)?;
                keep.where_(&z.exp()?, &z.conj()?)
            }),
        ),
    ];
    for (name, f) in cases {
        check_gradient(&via_parts(f, &[3, 2]), &parts(&z), &[2, 3, 2], 1e-6, name);
    }
}

#[test]
fn gradients_with_respect_to_complex_values_follow_jax() {
    // jax.grad(lambda z: abs(z) ** 2)(3 + 4j) == 6 - 8j: dL/dx - i dL/dy.
    let z = Tensor::scalar(C::new(3.0, 4.0));
    let tape = GradientTape::new();
    tape.watch(&z);
    let loss = z.abs().unwrap().square().unwrap();
    let g = tape.gradient(&loss, &[(&z).into()]).unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(g.dtype(), DType::C128);
    assert!(close(g.item::<C>().unwrap(), C::new(6.0, -8.0), 1e-14));
    // jax.grad(lambda z: (z * z).real)(1 + 2j) == 2 * (1 + 2j): for a
    // holomorphic f, the gradient of Re f is f'(z), unconjugated.
    let z = Tensor::scalar(C::new(1.0, 2.0));
    let tape = GradientTape::new();
    tape.watch(&z);
    let loss = z.square().unwrap().real().unwrap();
    let g = tape.gradient(&loss, &[(&z).into()]).unwrap()[0]
        .clone()
        .unwrap();
    assert!(close(g.item::<C>().unwrap(), C::new(2.0, 4.0), 1e-14));
    // Through c64 and back (finite differences in f32 would say little):
    // L = Im(conj(z)) = -y, so dL/dx - i dL/dy = i, exactly.
    let tape = GradientTape::new();
    tape.watch(&z);
    let loss = z
        .cast(DType::C64)
        .unwrap()
        .conj()
        .unwrap()
        .cast(DType::C128)
        .unwrap()
        .imag()
        .unwrap();
    let g = tape.gradient(&loss, &[(&z).into()]).unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(g.item::<C>().unwrap(), C::new(0.0, 1.0));
}

#[test]
fn gradients_flow_through_traced_control_flow_over_complex_values() {
    // d/dx of Re(loop_3(z -> z * w)) + Im(cond(...)) inside a function,
    // against central differences of the same function.
    let f = function(|x: Tensor, n: Tensor| -> Result<(Tensor, Tensor)> {
        let tape = GradientTape::new();
        tape.watch(&x);
        let w = Tensor::scalar(C::new(0.8, 0.5));
        let z = complex(&x, &x.square()?)?;
        let looped = for_range(0, &n, 1, z.clone(), |_i, s: Tensor| s.mul(&w))?;
        let branch: Tensor = cond(
            &x.reduce_sum(&[], false)?.gt_scalar(0.0)?,
            || z.exp(),
            || z.conj(),
        )?;
        let loss = looped
            .real()?
            .add(&branch.imag()?)?
            .reduce_sum(&[], false)?;
        let g = tape.gradient(&loss, &[(&x).into()])?[0].clone().unwrap();
        Ok((loss, g))
    });
    let n = Tensor::scalar(3i32);
    for x0 in [vec![0.3f64, -0.1], vec![-0.5, 0.2]] {
        let (_, g) = f.call((Tensor::vector(&x0).unwrap(), &n)).unwrap();
        let g = g.to_vec::<f64>().unwrap();
        for i in 0..2 {
            let at = |d: f64| {
                let mut v = x0.clone();
                v[i] += d;
                let (l, _) = f.call((Tensor::vector(&v).unwrap(), &n)).unwrap();
                l.item::<f64>().unwrap()
            };
            let numeric = (at(1e-6) - at(-1e-6)) / 2e-6;
            assert!((g[i] - numeric).abs() < 1e-6, "{i}: {} vs {numeric}", g[i]);
        }
    }
}

#[test]
fn a_function_on_complex_values_exports_and_loads() {
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None], DType::C64)])
        .build(|z: Tensor| -> Result<Tensor> {
            let w = z.mul(&z.conj()?)?.add(&z.exp()?)?;
            Tensor::concat(&[w, complex(&z.abs()?, &z.angle()?)?], 0)
        });
    let cf = f
        .get_concrete_function((TensorSpec::new(&[None], DType::C64),))
        .unwrap();
    let scratch = scratch::scratch_dir("complex-export");
    let dir = scratch.join("complex-export");
    let _ = std::fs::remove_dir_all(&dir);
    cf.export(&dir, &[vec![vec![3]]]).unwrap();
    let loaded = xlafn::load(&dir).unwrap();
    for n in [3usize, 5] {
        let z: Vec<Complex32> = samples()
            .iter()
            .cycle()
            .take(n)
            .map(|v| Complex32::new(v.re as f32, v.im as f32))
            .collect();
        let zt = Tensor::from_vec(z, &[n as i64]).unwrap();
        let want = f.call((&zt,)).unwrap().to_vec::<Complex32>().unwrap();
        let got = loaded.call(&[&zt]).unwrap()[0]
            .to_vec::<Complex32>()
            .unwrap();
        assert_eq!(got, want, "n = {n}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
