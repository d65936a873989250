//! Layer: the `xlafn` tool (`--input-expr`). A small expression language
//! for inputs typed on the command line, close to the Python a
//! `saved_model_cli --input_exprs` user writes:
//!
//! ```text
//! EXPR   := VALUE [':' DTYPE]
//! VALUE  := LIST | SCALAR | CALL
//! LIST   := '[' [VALUE {',' VALUE} [',']] ']'      (or '(' ... ')')
//! SCALAR := an integer or float (1, -2, 0.5, 1e-3, nan, inf, -inf),
//!           a complex number (2j, 1+2j, 1.5-0.5j), True or False
//! CALL   := [np. | numpy.] zeros(SHAPE) | ones(SHAPE) | full(SHAPE, SCALAR)
//! SHAPE  := INT | '(' [INT {',' INT} [',']] ')' | '[' ... ']'
//! ```
//!
//! Nested lists give the shape (`[[1,2],[3,4]]` is 2x2; ragged lists are
//! errors). Without `:DTYPE` the value takes the dtype the function
//! declares for that input, so `x=[1,2]` is f32 for an f32 input; a
//! `DTYPE` is any name `DType::from_name` knows (`f32`, `float32`, ...).
//! Values that the dtype cannot hold exactly (3.5 as an integer, 300 as
//! u8) are errors, never rounded or wrapped. Imports `values` for the
//! scalars and xlafn's `DType`/`HostArray`; no Python is run.

use crate::values::{Scalar, push};
use xlafn::runtime::HostArray;
use xlafn::{DType, Error, Result};

/// The largest array an expression may build (in elements): typing
/// `zeros((100000, 100000))` by mistake must not fill memory.
const MAX_ELEMENTS: i64 = 1 << 26;

/// The deepest nesting an expression may have, counting every value
/// inside another (a list's items, a call's shape and fill): far beyond
/// any real input, and low enough that the recursive parser's stack stays
/// small. One counter covers the whole parse, so `zeros(zeros(...` or a
/// list inside a shape cannot restart it (12 000 nested `zeros(` once
/// overflowed the stack and aborted the process).
const MAX_DEPTH: usize = 64;

/// A parsed value: a scalar, nested lists of values, or an array of one
/// value (`zeros`, `ones`, `full`) kept as its shape until encoded.
enum Value {
    Scalar(Scalar),
    List(Vec<Value>),
    Filled(Vec<i64>, Scalar),
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
    /// How many values enclose the one being parsed (see [`MAX_DEPTH`]).
    depth: usize,
}

fn bad(expr: &str, why: impl std::fmt::Display) -> Error {
    Error::Value(format!("--input-expr {expr:?}: {why}"))
}

impl Parser<'_> {
    fn skip_space(&mut self) {
        while self.text[self.at..].starts_with(char::is_whitespace) {
            self.at += self.text[self.at..]
                .chars()
                .next()
                .map_or(1, char::len_utf8);
        }
    }

    fn eat(&mut self, s: &str) -> bool {
        self.skip_space();
        if self.text[self.at..].starts_with(s) {
            self.at += s.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, s: &str) -> Result<()> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.error(format!("expected '{s}'")))
        }
    }

    fn error(&self, why: impl std::fmt::Display) -> Error {
        bad(self.text, format!("{why} at character {}", self.at + 1))
    }

    /// A run of characters that may form a number or a name.
    fn token(&mut self) -> &str {
        self.skip_space();
        let start = self.at;
        let rest = &self.text[start..];
        let mut len = 0;
        for (i, c) in rest.char_indices() {
            let sign_ok = matches!(c, '+' | '-')
                && (i == 0
                    || rest[..i].ends_with(['e', 'E'])
                    || rest[..i].ends_with(|c: char| c.is_ascii_digit() || c == '.'));
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || sign_ok {
                len = i + c.len_utf8();
            } else {
                break;
            }
        }
        self.at += len;
        &self.text[start..start + len]
    }

    /// Every value, at any depth, is parsed here, so the one depth check
    /// sees all nesting: lists, calls and shapes alike.
    fn value(&mut self) -> Result<Value> {
        if self.depth > MAX_DEPTH {
            return Err(self.error(format!(
                "values (lists and calls) nested over {MAX_DEPTH} deep"
            )));
        }
        self.depth += 1;
        let value = self.unnested_value();
        self.depth -= 1;
        value
    }

    fn unnested_value(&mut self) -> Result<Value> {
        for (open, close) in [("[", "]"), ("(", ")")] {
            if self.eat(open) {
                return self.list(close);
            }
        }
        let token = self.token().to_string();
        match token
            .strip_prefix("np.")
            .or(token.strip_prefix("numpy."))
            .unwrap_or(&token)
        {
            "zeros" => self.filled(Scalar::Int(0)),
            "ones" => self.filled(Scalar::Int(1)),
            "full" => self.full(),
            "" => Err(self.error("expected a value")),
            _ => scalar(&token)
                .map(Value::Scalar)
                .map_err(|why| self.error(why)),
        }
    }

    fn list(&mut self, close: &str) -> Result<Value> {
        let mut items = Vec::new();
        while !self.eat(close) {
            items.push(self.value()?);
            if !self.eat(",") && !self.text[self.at..].trim_start().starts_with(close) {
                return Err(self.error(format!("expected ',' or '{close}'")));
            }
        }
        Ok(Value::List(items))
    }

    fn shape(&mut self) -> Result<Vec<i64>> {
        let dims = match self.value()? {
            Value::List(items) => items,
            other => vec![other],
        };
        dims.iter()
            .map(|d| match d {
                Value::Scalar(Scalar::Int(n)) if (0..=MAX_ELEMENTS as i128).contains(n) => {
                    Ok(*n as i64)
                }
                _ => Err(self.error("a shape holds non-negative integers")),
            })
            .collect()
    }

    /// `zeros(SHAPE)` / `ones(SHAPE)`, the name already read.
    fn filled(&mut self, fill: Scalar) -> Result<Value> {
        self.expect("(")?;
        let shape = self.shape()?;
        self.expect(")")?;
        self.build(&shape, fill)
    }

    fn full(&mut self) -> Result<Value> {
        self.expect("(")?;
        let shape = self.shape()?;
        self.expect(",")?;
        let fill = match self.value()? {
            Value::Scalar(s) => s,
            _ => return Err(self.error("full() fills with a scalar")),
        };
        self.expect(")")?;
        self.build(&shape, fill)
    }

    fn build(&self, shape: &[i64], fill: Scalar) -> Result<Value> {
        let n = shape.iter().try_fold(1i64, |n, d| {
            n.checked_mul(*d).filter(|n| *n <= MAX_ELEMENTS)
        });
        if n.is_none() {
            return Err(self.error(format!(
                "the shape {shape:?} has over {MAX_ELEMENTS} elements"
            )));
        }
        Ok(Value::Filled(shape.to_vec(), fill))
    }
}

/// One scalar token: `True`, `False`, `nan`, `inf`, an integer, a float,
/// or a complex number written Python's way (`2j`, `1+2j`).
fn scalar(token: &str) -> std::result::Result<Scalar, String> {
    let float = |t: &str| match t.trim_start_matches('+') {
        "nan" | "-nan" => Some(f64::NAN),
        "inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        t if t.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '.') => t.parse().ok(),
        _ => None,
    };
    match token {
        "True" | "true" => return Ok(Scalar::Bool(true)),
        "False" | "false" => return Ok(Scalar::Bool(false)),
        _ => {}
    }
    if let Some(imag) = token.strip_suffix('j') {
        // The last sign that is not an exponent's splits real from imaginary.
        let split = imag
            .char_indices()
            .rev()
            .find(|&(i, c)| i > 0 && matches!(c, '+' | '-') && !imag[..i].ends_with(['e', 'E']))
            .map(|(i, _)| i);
        let (re, im) = match split {
            Some(i) => (float(&imag[..i]), float(&imag[i..])),
            None => (Some(0.0), float(imag)),
        };
        return match (re, im) {
            (Some(re), Some(im)) => Ok(Scalar::Complex(re, im)),
            _ => Err(format!("{token:?} is not a complex number")),
        };
    }
    if let Ok(i) = token.parse::<i128>() {
        return Ok(Scalar::Int(i));
    }
    float(token)
        .map(Scalar::Float)
        .ok_or_else(|| format!("{token:?} is not a number, True or False"))
}

/// The shape of a value, erroring on ragged lists.
fn shape_of(value: &Value) -> std::result::Result<Vec<i64>, String> {
    match value {
        Value::Scalar(_) => Ok(Vec::new()),
        Value::Filled(shape, _) => Ok(shape.clone()),
        Value::List(items) => {
            let inner = match items.first() {
                Some(first) => shape_of(first)?,
                None => Vec::new(),
            };
            for item in items.iter().skip(1) {
                if shape_of(item)? != inner {
                    return Err("the lists are ragged (their lengths or depths differ)".into());
                }
            }
            Ok([vec![items.len() as i64], inner].concat())
        }
    }
}

/// Appends the elements of `value` in C order as `dtype`.
fn encode(value: &Value, dtype: DType, out: &mut Vec<u8>) -> Result<()> {
    match value {
        Value::Scalar(s) => push(*s, dtype, out),
        Value::List(items) => items.iter().try_for_each(|v| encode(v, dtype, out)),
        Value::Filled(shape, s) => {
            let mut one = Vec::new();
            push(*s, dtype, &mut one)?;
            let n: i64 = shape.iter().product();
            out.extend(one.repeat(n as usize));
            Ok(())
        }
    }
}

/// Evaluates `expr` (see the module docs) as an array; `declared` is the
/// dtype used when the expression names none.
pub fn evaluate(expr: &str, declared: DType) -> Result<HostArray> {
    let (body, dtype) = match expr.rsplit_once(':') {
        Some((body, name)) => (
            body,
            DType::from_name(name.trim()).map_err(|e| bad(expr, e))?,
        ),
        None => (expr, declared),
    };
    let mut parser = Parser {
        text: body,
        at: 0,
        depth: 0,
    };
    let value = parser.value()?;
    parser.skip_space();
    if parser.at != body.len() {
        return Err(parser.error("unexpected text"));
    }
    let dims = shape_of(&value).map_err(|why| bad(expr, why))?;
    let elements = dims.iter().try_fold(1i64, |n, d| n.checked_mul(*d));
    if elements.is_none_or(|n| n > MAX_ELEMENTS) {
        return Err(bad(
            expr,
            format!("the shape {dims:?} has over {MAX_ELEMENTS} elements"),
        ));
    }
    let mut bytes = Vec::new();
    encode(&value, dtype, &mut bytes).map_err(|e| bad(expr, e))?;
    Ok(HostArray { dtype, dims, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(expr: &str) -> (Vec<i64>, Vec<f32>) {
        let a = evaluate(expr, DType::F32).unwrap();
        (a.dims.clone(), a.to_vec::<f32>().unwrap())
    }

    #[test]
    fn lists_scalars_and_calls() {
        assert_eq!(
            f32s("[[1, 2], [3, 4.5]]"),
            (vec![2, 2], vec![1., 2., 3., 4.5])
        );
        assert_eq!(f32s(" -2.5e1 "), (vec![], vec![-25.]));
        assert_eq!(f32s("[]"), (vec![0], vec![]));
        assert_eq!(f32s("np.ones((2, 1))"), (vec![2, 1], vec![1., 1.]));
        assert_eq!(f32s("zeros(3)"), (vec![3], vec![0.; 3]));
        assert_eq!(
            f32s("full([2], -inf)"),
            (vec![2], vec![f32::NEG_INFINITY; 2])
        );
        let i = evaluate("[1, -2]:int64", DType::F32).unwrap();
        assert_eq!(i.to_vec::<i64>().unwrap(), vec![1, -2]);
        let c = evaluate("[1+2j, -0.5j, 3]", DType::C64).unwrap();
        let c = c.to_vec::<xlafn::Complex32>().unwrap();
        assert_eq!((c[0].re, c[0].im, c[1].im, c[2].re), (1., 2., -0.5, 3.));
        let b = evaluate("[True, False]", DType::Bool).unwrap();
        assert_eq!(b.bytes, vec![1, 0]);
    }

    #[test]
    fn bad_expressions_name_the_problem() {
        for (expr, dtype, why) in [
            ("[[1, 2], [3]]", DType::F32, "ragged"),
            ("[1, 2", DType::F32, "expected ','"),
            ("3.5", DType::I32, "not an integer"),
            ("300", DType::U8, "outside 0..=255"),
            ("[1]:f33", DType::F32, "unknown dtype"),
            ("zeros((100000, 100000))", DType::F32, "elements"),
            ("hello", DType::F32, "not a number"),
            ("1 2", DType::F32, "unexpected text"),
            ("2", DType::Bool, "True or False"),
        ] {
            let e = evaluate(expr, dtype).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("--input-expr"), "{expr}: {e}");
        }
    }

    /// `n` copies of `open`, then `inner`, then `n` copies of `close`.
    fn nest(open: &str, inner: &str, close: &str, n: usize) -> String {
        [open.repeat(n), inner.to_string(), close.repeat(n)].concat()
    }

    #[test]
    fn nesting_is_bounded_across_lists_calls_and_shapes() {
        // 64 levels around a value are fine, 65 are not.
        let deep = evaluate(&nest("[", "1", "]", 64), DType::F32).unwrap();
        assert_eq!((deep.dims, deep.bytes.len()), (vec![1; 64], 4));
        let why = "values (lists and calls) nested over 64 deep";
        for expr in [
            nest("[", "1", "]", 65),
            nest("(", "1", ")", 65),
            // Calls nest through their shapes and fills; a shape's own
            // lists count on top of the call's depth. (Thousands of levels,
            // which overflowed the stack, are tested through the CLI, in a
            // process of their own: tests/cli.rs.)
            nest("zeros(", "1", ")", 100),
            nest("full(", "1, 1", ")", 100),
            nest("zeros([", "1", "])", 40),
            nest("full((1,), ", "1", ")", 65),
            nest("ones(", &nest("[", "1", "]", 40), ")", 30),
            nest("[", "(", "", 200),
        ] {
            let e = evaluate(&expr, DType::F32).unwrap_err().to_string();
            assert!(e.contains(why), "{}: {e}", &expr[..20]);
        }
    }
}

#[cfg(test)]
mod any_text {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever is typed ends in an array or an error, never a panic.
        #[test]
        fn any_expression_evaluates_or_errors(
            text in "[\\[\\]()0-9a-z.,:+\\- e_j\u{e9}]{0,40}",
        ) {
            for dtype in [DType::F32, DType::U8, DType::Bool, DType::C64] {
                if let Ok(a) = evaluate(&text, dtype) {
                    let n: i64 = a.dims.iter().product();
                    prop_assert_eq!(a.bytes.len() as i64, n * a.dtype.size_in_bytes().unwrap() as i64);
                }
            }
        }
    }
}
