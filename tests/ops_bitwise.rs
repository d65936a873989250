//! Bitwise ops, shifts and population count on every integer dtype
//! against Rust's own operators, eagerly and traced.

use xlafn::prelude::*;

// ---------------------------------------------------------------- bitwise

macro_rules! bitwise_case {
    ($t:ty, $bits:expr) => {{
        let a: Vec<$t> = vec![
            0 as $t,
            1 as $t,
            <$t>::MAX,
            <$t>::MIN,
            0x5a as $t,
            77 as $t,
            (<$t>::MAX / 3) as $t,
        ];
        let b: Vec<$t> = vec![
            <$t>::MAX,
            3 as $t,
            0x0f as $t,
            1 as $t,
            0x33 as $t,
            0 as $t,
            5 as $t,
        ];
        let shifts: Vec<$t> = vec![
            0 as $t,
            1 as $t,
            3 as $t,
            ($bits - 1) as $t,
            2 as $t,
            7 as $t,
            4 as $t,
        ];
        let ta = Tensor::vector(&a).unwrap();
        let tb = Tensor::vector(&b).unwrap();
        let ts = Tensor::vector(&shifts).unwrap();
        let zip = |f: fn($t, $t) -> $t, y: &[$t]| {
            a.iter().zip(y).map(|(x, y)| f(*x, *y)).collect::<Vec<$t>>()
        };
        let name = stringify!($t);
        assert_eq!(
            ta.bitwise_and(&tb).unwrap().to_vec::<$t>().unwrap(),
            zip(|x, y| x & y, &b),
            "and {name}"
        );
        assert_eq!(
            ta.bitwise_or(&tb).unwrap().to_vec::<$t>().unwrap(),
            zip(|x, y| x | y, &b),
            "or {name}"
        );
        assert_eq!(
            ta.bitwise_xor(&tb).unwrap().to_vec::<$t>().unwrap(),
            zip(|x, y| x ^ y, &b),
            "xor {name}"
        );
        assert_eq!(
            ta.bitwise_not().unwrap().to_vec::<$t>().unwrap(),
            a.iter().map(|x| !x).collect::<Vec<$t>>(),
            "not {name}"
        );
        assert_eq!(
            ta.left_shift(&ts).unwrap().to_vec::<$t>().unwrap(),
            zip(|x, s| x << s, &shifts),
            "<< {name}"
        );
        assert_eq!(
            ta.right_shift(&ts).unwrap().to_vec::<$t>().unwrap(),
            zip(|x, s| x >> s, &shifts),
            ">> {name}"
        );
        let pc = ta.population_count().unwrap();
        assert_eq!(pc.dtype(), DType::U8);
        assert_eq!(
            pc.to_vec::<u8>().unwrap(),
            a.iter().map(|x| x.count_ones() as u8).collect::<Vec<u8>>(),
            "popcount {name}"
        );
        // Scalars, and the same inside a traced function.
        assert_eq!(
            ta.bitwise_and_scalar(6).unwrap().to_vec::<$t>().unwrap(),
            a.iter().map(|x| x & 6).collect::<Vec<$t>>()
        );
        assert_eq!(
            ta.right_shift_scalar(1).unwrap().to_vec::<$t>().unwrap(),
            a.iter().map(|x| x >> 1).collect::<Vec<$t>>()
        );
        let f = function(|a: Tensor, b: Tensor, s: Tensor| -> Result<Vec<Tensor>> {
            Ok(vec![
                a.bitwise_and(&b)?,
                a.bitwise_or(&b)?,
                a.bitwise_xor(&b)?,
                a.bitwise_not()?,
                a.left_shift(&s)?,
                a.right_shift(&s)?,
                a.population_count()?.cast(a.dtype())?,
            ])
        });
        let traced = f.call((ta.clone(), tb.clone(), ts.clone())).unwrap();
        let eager = [
            ta.bitwise_and(&tb).unwrap(),
            ta.bitwise_or(&tb).unwrap(),
            ta.bitwise_xor(&tb).unwrap(),
            ta.bitwise_not().unwrap(),
            ta.left_shift(&ts).unwrap(),
            ta.right_shift(&ts).unwrap(),
            ta.population_count().unwrap().cast(ta.dtype()).unwrap(),
        ];
        for (t, e) in traced.iter().zip(&eager) {
            assert_eq!(
                t.to_vec::<$t>().unwrap(),
                e.to_vec::<$t>().unwrap(),
                "traced {name}"
            );
        }
    }};
}

#[test]
fn bitwise_ops_match_rust_on_every_integer_dtype() {
    bitwise_case!(i8, 8);
    bitwise_case!(i16, 16);
    bitwise_case!(i32, 32);
    bitwise_case!(i64, 64);
    bitwise_case!(u8, 8);
    bitwise_case!(u16, 16);
    bitwise_case!(u32, 32);
    bitwise_case!(u64, 64);
}

#[test]
fn right_shift_is_arithmetic_for_signed_and_logical_for_unsigned() {
    let s = Tensor::vector(&[-16i32, -1, 16]).unwrap();
    assert_eq!(
        s.right_shift_scalar(2).unwrap().to_vec::<i32>().unwrap(),
        vec![-4, -1, 4]
    );
    let u = Tensor::vector(&[0xF000_0000u32, 16]).unwrap();
    assert_eq!(
        u.right_shift_scalar(4).unwrap().to_vec::<u32>().unwrap(),
        vec![0x0F00_0000, 1]
    );
}

// ----------------------------------------------------------------- dtypes

fn expect_invalid(r: xlafn::Result<Tensor>, op: &str, wanted: &str) {
    match r {
        Err(Error::InvalidArgument { op: o, message }) => {
            assert_eq!(o, op, "{message}");
            assert!(message.contains(wanted), "{op}: {message}");
        }
        other => panic!("{op}: expected an InvalidArgument error, got {other:?}"),
    }
}

#[test]
fn bitwise_ops_refuse_floats_and_bools_with_the_op_named() {
    let f = Tensor::vector(&[1.0f32, 2.0]).unwrap();
    let b = Tensor::vector(&[true, false]).unwrap();
    let i = Tensor::vector(&[1i32, 2]).unwrap();
    // Bitwise ops on floats and bools.
    expect_invalid(f.bitwise_and(&f), "bitwise_and", "integer");
    expect_invalid(b.bitwise_or(&b), "bitwise_or", "integer");
    expect_invalid(f.bitwise_xor(&f), "bitwise_xor", "integer");
    expect_invalid(b.bitwise_not(), "bitwise_not", "integer");
    expect_invalid(f.left_shift(&f), "left_shift", "integer");
    expect_invalid(f.right_shift(&f), "right_shift", "integer");
    expect_invalid(f.population_count(), "population_count", "integer");
    // Mixed dtypes are refused, as for every binary op.
    let i64s = Tensor::vector(&[1i64, 2]).unwrap();
    assert!(matches!(
        i.bitwise_and(&i64s),
        Err(Error::InvalidArgument { .. })
    ));
    let g = function(|x: Tensor| x.left_shift(&x));
    let msg = g.call((f.clone(),)).unwrap_err().to_string();
    assert!(msg.contains("left_shift"), "{msg}");
}
