//! TensorFlow-style printing: `tf.Tensor([4 1], shape=(2,), dtype=i32)`.
//!
//! The value part follows NumPy's `str(array)`, which is what TensorFlow
//! prints: elements padded to a common width, floats in the shortest form
//! that reads back to the same value (at most 8 fractional digits in
//! arrays), scientific notation when magnitudes call for it, lines wrapped at
//! 75 columns, and arrays over 1000 elements summarised with `...` keeping
//! 3 items at each edge of every axis. Scalars print like NumPy scalars
//! (`2.0`, `1e-05`, `(1+2j)`). Complex arrays print as NumPy's do: the
//! real parts laid out as one float array, the imaginary parts as another
//! with an explicit sign, then `j` (`[1. +2.j 3.5-4.j]`). Multi-line
//! values start on a new line, as in TensorFlow. A tensor that cannot be
//! read prints the error instead.

use super::Tensor;
use crate::dtype::DType;
use crate::error::Result;
use std::fmt;

/// Line width NumPy wraps at.
const LINE_WIDTH: usize = 75;
/// Arrays with more elements than this are summarised.
const THRESHOLD: usize = 1000;
/// Items kept at each edge of a summarised axis.
const EDGE_ITEMS: usize = 3;
/// Most fractional digits an array element shows.
const PRECISION: usize = 8;

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(sym) = self.symbol() {
            // TensorFlow prints graph tensors by name, without a value.
            let name = format!("{}:{}", sym.function, sym.value.0);
            return write!(
                f,
                "Tensor(\"{name}\", shape={}, dtype={})",
                self.shape(),
                self.dtype()
            );
        }
        let text = match render(self) {
            Ok(text) if text.contains('\n') => format!("\n{text}"),
            Ok(text) => text,
            Err(e) => format!("<error reading the value: {e}>"),
        };
        write!(
            f,
            "tf.Tensor({text}, shape={}, dtype={})",
            self.shape(),
            self.dtype()
        )
    }
}

/// Short, and never reads the device: `Tensor(shape=(2, 2), dtype=f32)`
/// (a graph tensor adds its name). `{}` (Display) prints the values, as
/// TensorFlow's `print` does; a `{:?}` in a log line or a panic message
/// should not copy a large array back to the host.
impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.symbol() {
            Some(sym) => write!(
                f,
                "Tensor(\"{}:{}\", shape={}, dtype={})",
                sym.function,
                sym.value.0,
                self.shape(),
                self.dtype()
            ),
            None => write!(f, "Tensor(shape={}, dtype={})", self.shape(), self.dtype()),
        }
    }
}

/// Host values read for printing; ints are widened losslessly.
enum Values {
    Bool(Vec<bool>),
    Int(Vec<i128>),
    Float(Vec<f64>),
    /// Real and imaginary parts.
    Complex(Vec<f64>, Vec<f64>),
}

fn values_from_bytes(dtype: DType, bytes: &[u8]) -> Result<Values> {
    use crate::runtime::element::{Element, from_bytes};
    fn ints<T: Element + Into<i128>>(b: &[u8]) -> Values {
        Values::Int(from_bytes::<T>(b).into_iter().map(Into::into).collect())
    }
    fn floats<T: Element>(b: &[u8]) -> Values {
        Values::Float(
            from_bytes::<T>(b)
                .into_iter()
                .map(Element::to_f64)
                .collect(),
        )
    }
    Ok(match dtype {
        DType::Bool => Values::Bool(from_bytes::<bool>(bytes)),
        DType::I8 => ints::<i8>(bytes),
        DType::I16 => ints::<i16>(bytes),
        DType::I32 => ints::<i32>(bytes),
        DType::I64 => ints::<i64>(bytes),
        DType::U8 => ints::<u8>(bytes),
        DType::U16 => ints::<u16>(bytes),
        DType::U32 => ints::<u32>(bytes),
        DType::U64 => ints::<u64>(bytes),
        DType::F16 => floats::<half::f16>(bytes),
        DType::BF16 => floats::<half::bf16>(bytes),
        DType::F32 => floats::<f32>(bytes),
        DType::F64 => floats::<f64>(bytes),
        // Complex numbers are (re, im) pairs of their part's dtype.
        DType::C64 | DType::C128 => {
            let Values::Float(parts) = values_from_bytes(dtype.real_part(), bytes)? else {
                unreachable!("a complex dtype's parts are floats")
            };
            let (re, im) = parts.chunks_exact(2).map(|p| (p[0], p[1])).unzip();
            Values::Complex(re, im)
        }
        DType::String => return Err(dtype.unsupported("no string tensors exist")),
    })
}

/// The value part of the printout.
fn render(t: &Tensor) -> Result<String> {
    render_array(t.dtype(), &t.dims(), &t.to_host_array()?.bytes)
}

/// NumPy-style text of a dense row-major array given as raw bytes (also
/// what the print op shows for values that live only on the host).
pub(crate) fn render_array(dtype: DType, dims: &[i64], bytes: &[u8]) -> Result<String> {
    let values = values_from_bytes(dtype, bytes)?;
    let dims: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
    if dims.is_empty() {
        return Ok(scalar_text(&values, dtype));
    }
    let size: usize = dims.iter().product();
    if size == 0 {
        return Ok("[]".to_string());
    }
    let layout = Layout::new(dims, size > THRESHOLD);
    let shown = layout.shown();
    let format = ElementFormat::new(&values, dtype, &shown);
    Ok(layout.render(&|i| format.format(i)))
}

fn scalar_text(values: &Values, dtype: DType) -> String {
    match values {
        Values::Bool(v) => (if v[0] { "True" } else { "False" }).to_string(),
        Values::Int(v) => v[0].to_string(),
        Values::Float(v) => float_scalar(v[0], dtype),
        Values::Complex(re, im) => complex_scalar(re[0], im[0], dtype.real_part()),
    }
}

// ---------------------------------------------------------------- layout

/// The nesting of brackets, line wrapping and summarisation of NumPy's
/// `_formatArray`, over flat row-major element indices.
struct Layout {
    dims: Vec<usize>,
    strides: Vec<usize>,
    summarize: bool,
}

impl Layout {
    fn new(dims: Vec<usize>, summarize: bool) -> Layout {
        let mut strides = vec![1; dims.len()];
        for i in (0..dims.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * dims[i + 1];
        }
        Layout {
            dims,
            strides,
            summarize,
        }
    }

    /// The indices printed along an axis of length `n`, and whether `...`
    /// goes after the first `EDGE_ITEMS` of them.
    fn axis_items(&self, n: usize) -> (Vec<usize>, bool) {
        if self.summarize && 2 * EDGE_ITEMS < n {
            let items = (0..EDGE_ITEMS).chain(n - EDGE_ITEMS..n).collect();
            return (items, true);
        }
        ((0..n).collect(), false)
    }

    /// Flat indices of every printed element (they set the common width).
    fn shown(&self) -> Vec<usize> {
        let mut flat = vec![0];
        for (axis, &n) in self.dims.iter().enumerate() {
            let (items, _) = self.axis_items(n);
            flat = flat
                .iter()
                .flat_map(|base| items.iter().map(move |i| base + i * self.strides[axis]))
                .collect();
        }
        flat
    }

    fn render(&self, word: &dyn Fn(usize) -> String) -> String {
        self.recurse(0, 0, " ", LINE_WIDTH, word)
    }

    fn recurse(
        &self,
        axis: usize,
        offset: usize,
        hanging: &str,
        width: usize,
        word: &dyn Fn(usize) -> String,
    ) -> String {
        let (items, summary) = self.axis_items(self.dims[axis]);
        let child = |i: usize| offset + i * self.strides[axis];
        let body = if axis + 1 == self.dims.len() {
            let words: Vec<String> = items.iter().map(|&i| word(child(i))).collect();
            wrap_row(&words, summary, hanging, width - 1)
        } else {
            let next = format!("{hanging} ");
            let rows: Vec<String> = items
                .iter()
                .map(|&i| self.recurse(axis + 1, child(i), &next, width - 1, word))
                .collect();
            stack_rows(rows, summary, hanging, self.dims.len() - axis - 1)
        };
        format!("[{}]", &body[hanging.len()..])
    }
}

/// Puts the `...` marker after the leading edge items when summarising.
fn with_summary(mut words: Vec<String>, summary: bool) -> Vec<String> {
    if summary {
        words.insert(EDGE_ITEMS, "...".to_string());
    }
    words
}

/// The innermost axis: words separated by spaces, wrapped before `width`.
fn wrap_row(words: &[String], summary: bool, hanging: &str, width: usize) -> String {
    let words = with_summary(words.to_vec(), summary);
    let mut text = String::new();
    let mut line = hanging.to_string();
    for (i, w) in words.iter().enumerate() {
        let wrap = line.len() + w.len() > width && line.len() > hanging.len();
        if wrap {
            text.push_str(line.trim_end());
            text.push('\n');
            line = hanging.to_string();
        }
        line.push_str(w);
        if i + 1 < words.len() {
            line.push(' ');
        }
    }
    text + &line
}

/// Outer axes: one sub-array per line, with `newlines - 1` blank lines
/// between blocks of rank `newlines`.
fn stack_rows(rows: Vec<String>, summary: bool, hanging: &str, newlines: usize) -> String {
    let sep = "\n".repeat(newlines);
    with_summary(rows, summary)
        .iter()
        .map(|r| format!("{hanging}{r}"))
        .collect::<Vec<_>>()
        .join(&sep)
}

// --------------------------------------------------------------- elements

/// How every element of one array is formatted: NumPy's per-dtype format
/// functions, with widths taken over the printed elements.
enum ElementFormat<'a> {
    Bool(&'a [bool]),
    Int(&'a [i128], usize),
    Float(&'a [f64], FloatFormat),
    /// Real parts, imaginary parts, and a format for each.
    Complex(&'a [f64], &'a [f64], FloatFormat, FloatFormat),
}

impl<'a> ElementFormat<'a> {
    fn new(values: &'a Values, dtype: DType, shown: &[usize]) -> ElementFormat<'a> {
        match values {
            Values::Bool(v) => ElementFormat::Bool(v),
            Values::Int(v) => {
                let width = shown.iter().map(|&i| v[i].to_string().len()).max();
                ElementFormat::Int(v, width.unwrap_or(0))
            }
            Values::Float(v) => {
                let shown: Vec<f64> = shown.iter().map(|&i| v[i]).collect();
                ElementFormat::Float(v, FloatFormat::new(&shown, dtype, false))
            }
            Values::Complex(re, im) => {
                let part = dtype.real_part();
                let shown_re: Vec<f64> = shown.iter().map(|&i| re[i]).collect();
                let shown_im: Vec<f64> = shown.iter().map(|&i| im[i]).collect();
                ElementFormat::Complex(
                    re,
                    im,
                    FloatFormat::new(&shown_re, part, false),
                    FloatFormat::new(&shown_im, part, true),
                )
            }
        }
    }

    fn format(&self, i: usize) -> String {
        match self {
            ElementFormat::Bool(v) => (if v[i] { " True" } else { "False" }).to_string(),
            ElementFormat::Int(v, width) => format!("{:>width$}", v[i]),
            ElementFormat::Float(v, f) => f.format(v[i]),
            ElementFormat::Complex(re, im, fr, fi) => {
                // NumPy puts the `j` before the imaginary part's padding.
                let imag = fi.format(im[i]);
                let end = imag.trim_end().len();
                format!("{}{}j{}", fr.format(re[i]), &imag[..end], &imag[end..])
            }
        }
    }
}

/// A finite float as decimal digits: `digits[0].digits[1..] x 10^exp`.
struct Decimal {
    negative: bool,
    digits: String,
    exp: i32,
}

impl Decimal {
    /// Parses Rust's `{:e}` output (`-1.25e-3`), dropping trailing zeros.
    fn parse_sci(text: &str) -> Decimal {
        let mut d = Decimal::parse_sci_raw(text);
        let trimmed = d.digits.trim_end_matches('0');
        d.digits = if trimmed.is_empty() { "0" } else { trimmed }.to_string();
        d
    }

    /// Parses Rust's `{:e}` output keeping every digit.
    fn parse_sci_raw(text: &str) -> Decimal {
        let (mantissa, exp) = text.split_once('e').unwrap_or((text, "0"));
        Decimal {
            negative: mantissa.starts_with('-'),
            digits: mantissa.chars().filter(char::is_ascii_digit).collect(),
            exp: exp.parse().unwrap_or(0),
        }
    }

    /// The shortest digits that read back as the same `dtype` value.
    fn shortest(v: f64, dtype: DType) -> Decimal {
        match dtype {
            DType::F64 => Decimal::parse_sci(&format!("{v:e}")),
            DType::F16 | DType::BF16 => Decimal::shortest_by_search(v, dtype),
            _ => Decimal::parse_sci(&format!("{:e}", v as f32)),
        }
    }

    /// Half-precision types have no shortest printer: try more and more
    /// digits until the text rounds back to the same half value.
    fn shortest_by_search(v: f64, dtype: DType) -> Decimal {
        let same = |text: &str| {
            let back: f64 = text.parse().unwrap_or(f64::NAN);
            let back = match dtype {
                DType::F16 => half::f16::from_f64(back).to_f64(),
                _ => half::bf16::from_f64(back).to_f64(),
            };
            back.to_bits() == v.to_bits()
        };
        (0..17)
            .map(|p| format!("{v:.p$e}"))
            .find(|text| same(text))
            .map_or_else(
                || Decimal::parse_sci(&format!("{v:e}")),
                |t| Decimal::parse_sci(&t),
            )
    }

    /// Shortest digits, rounded to at most `cap` fractional digits
    /// (positional) when given.
    fn positional_parts(v: f64, dtype: DType, cap: Option<usize>) -> (String, String) {
        let d = Decimal::shortest(v, dtype);
        let (int, frac) = d.positional();
        match cap {
            Some(p) if frac.len() > p => {
                let rounded = format!("{:.p$}", v.abs());
                let (i, f) = rounded.split_once('.').unwrap_or((&rounded, ""));
                let sign = if v.is_sign_negative() { "-" } else { "" };
                (format!("{sign}{i}"), f.trim_end_matches('0').to_string())
            }
            _ => (int, frac),
        }
    }

    /// Integer part (with sign) and fractional digits, without trailing
    /// zeros.
    fn positional(&self) -> (String, String) {
        let sign = if self.negative { "-" } else { "" };
        let n = self.digits.len() as i32;
        let (int, frac) = if self.exp >= 0 {
            let split = (self.exp + 1).min(n) as usize;
            let zeros = "0".repeat((self.exp + 1 - n).max(0) as usize);
            let int = format!("{}{zeros}", &self.digits[..split]);
            (int, self.digits[split..].to_string())
        } else {
            let zeros = "0".repeat((-self.exp - 1) as usize);
            ("0".to_string(), format!("{zeros}{}", self.digits))
        };
        (
            format!("{sign}{int}"),
            frac.trim_end_matches('0').to_string(),
        )
    }

    /// Shortest scientific digits, rounded to at most `cap` fractional
    /// digits.
    fn scientific(v: f64, dtype: DType, cap: usize) -> Decimal {
        let d = Decimal::shortest(v, dtype);
        if d.digits.len() - 1 <= cap {
            return d;
        }
        Decimal::parse_sci(&format!("{v:.cap$e}"))
    }
}

/// `e+05`, `e-120`: NumPy's exponent with a sign and at least `digits`.
fn exponent(exp: i32, digits: usize) -> String {
    let sign = if exp < 0 { '-' } else { '+' };
    format!("e{sign}{:0digits$}", exp.unsigned_abs())
}

fn non_finite(v: f64) -> &'static str {
    match v {
        v if v.is_nan() => "nan",
        v if v > 0.0 => "inf",
        _ => "-inf",
    }
}

/// `non_finite` with an explicit `+` when `plus` (imaginary parts).
fn non_finite_signed(v: f64, plus: bool) -> String {
    match non_finite(v) {
        t if plus && !t.starts_with('-') => format!("+{t}"),
        t => t.to_string(),
    }
}

/// A NumPy (2.x) complex scalar, as Python writes complex numbers:
/// `(1+2j)`, `(1.5-0.25j)`, `2j` (a real part of +0 is left out), each
/// part in the float scalar's form without a trailing `.0`.
fn complex_scalar(re: f64, im: f64, part: DType) -> String {
    let text = |v: f64| {
        let t = float_scalar(v, part);
        t.strip_suffix(".0").map(str::to_string).unwrap_or(t)
    };
    let imag = if im.is_finite() {
        let t = text(im);
        if im.is_sign_negative() {
            t
        } else {
            format!("+{t}")
        }
    } else {
        non_finite_signed(im, true)
    };
    if re == 0.0 && !re.is_sign_negative() {
        return format!("{}j", imag.trim_start_matches('+'));
    }
    format!("({}{imag}j)", text(re))
}

/// A NumPy (2.x) float scalar: positional with at least one fractional
/// digit for 1e-4 <= |v| < cutoff (and 0), else scientific; the cutoff is
/// 1e16 for f64 and `10^precision` for narrower floats (1e6 for f32).
fn float_scalar(v: f64, dtype: DType) -> String {
    if !v.is_finite() {
        return non_finite(v).to_string();
    }
    let a = v.abs();
    let cutoff = match dtype {
        DType::F64 => 1e16,
        d => 10f64.powi(decimal_precision(d)),
    };
    if a == 0.0 || (1e-4..cutoff).contains(&a) {
        let (int, frac) = Decimal::positional_parts(v, dtype, None);
        let frac = if frac.is_empty() {
            "0".to_string()
        } else {
            frac
        };
        return format!("{int}.{frac}");
    }
    let d = Decimal::shortest(v, dtype);
    let sign = if d.negative { "-" } else { "" };
    let rest = &d.digits[1..];
    let dot = if rest.is_empty() { "" } else { "." };
    format!("{sign}{}{dot}{rest}{}", &d.digits[..1], exponent(d.exp, 2))
}

/// The common float layout of one array (NumPy's `FloatingFormat` in its
/// default `maxprec` mode).
struct FloatFormat {
    dtype: DType,
    /// Writes `+` before non-negative values (imaginary parts).
    plus: bool,
    scientific: bool,
    pad_left: usize,
    pad_right: usize,
    /// Fractional digits of every mantissa (scientific only).
    precision: usize,
    /// Exponent digits (scientific only).
    exp_digits: usize,
}

impl FloatFormat {
    fn new(shown: &[f64], dtype: DType, plus: bool) -> FloatFormat {
        let finite: Vec<f64> = shown.iter().copied().filter(|v| v.is_finite()).collect();
        let mut f = FloatFormat {
            dtype,
            plus,
            scientific: needs_scientific(&finite, dtype),
            pad_left: 0,
            pad_right: 0,
            precision: 0,
            exp_digits: 0,
        };
        if f.scientific {
            f.fit_scientific(&finite);
        } else {
            f.fit_positional(&finite);
        }
        // Leave room for `nan`, `inf` and `-inf`.
        let offset = f.pad_right + 1;
        for v in shown.iter().filter(|v| !v.is_finite()) {
            let text = non_finite_signed(*v, plus);
            f.pad_left = f.pad_left.max(text.len().saturating_sub(offset));
        }
        f
    }

    fn fit_positional(&mut self, finite: &[f64]) {
        for &v in finite {
            let (int, frac) = Decimal::positional_parts(v, self.dtype, Some(PRECISION));
            let plus = usize::from(self.plus && !v.is_sign_negative());
            self.pad_left = self.pad_left.max(int.len() + plus);
            self.pad_right = self.pad_right.max(frac.len());
        }
    }

    fn fit_scientific(&mut self, finite: &[f64]) {
        self.exp_digits = 2;
        for &v in finite {
            let d = Decimal::scientific(v, self.dtype, PRECISION);
            self.pad_left = self.pad_left.max(1 + usize::from(d.negative || self.plus));
            self.precision = self.precision.max(d.digits.len() - 1);
            self.exp_digits = self.exp_digits.max(d.exp.unsigned_abs().to_string().len());
        }
        self.pad_right = self.exp_digits + 2 + self.precision;
    }

    fn format(&self, v: f64) -> String {
        if !v.is_finite() {
            let width = self.pad_left + self.pad_right + 1;
            return format!("{:>width$}", non_finite_signed(v, self.plus));
        }
        let (left, right) = (self.pad_left, self.pad_right);
        let plus = if self.plus && !v.is_sign_negative() {
            "+"
        } else {
            ""
        };
        if !self.scientific {
            let (int, frac) = Decimal::positional_parts(v, self.dtype, Some(PRECISION));
            return format!("{:>left$}.{frac:<right$}", format!("{plus}{int}"));
        }
        let mut d = Decimal::scientific(v, self.dtype, PRECISION);
        let precision = self.precision;
        if d.digits.len() - 1 < precision {
            // Pad with the value's true further digits, as NumPy does.
            d = Decimal::parse_sci_raw(&format!("{v:.precision$e}"));
        }
        let sign = if d.negative { "-" } else { plus };
        let lead = format!("{sign}{}", &d.digits[..1]);
        let frac = &d.digits[1..];
        format!("{lead:>left$}.{frac}{}", exponent(d.exp, self.exp_digits))
    }
}

/// Decimal digits a dtype holds reliably (NumPy's `finfo(dtype).precision`;
/// bf16 as in `ml_dtypes`).
fn decimal_precision(dtype: DType) -> i32 {
    match dtype {
        DType::BF16 => 2,
        DType::F16 => 3,
        DType::F32 => 6,
        _ => 15,
    }
}

/// NumPy (2.x) switches an array to scientific notation when its nonzero
/// magnitudes reach `10^min(8, precision)`, go below 1e-4, or span more
/// than 1000x.
fn needs_scientific(finite: &[f64], dtype: DType) -> bool {
    let nonzero: Vec<f64> = finite
        .iter()
        .map(|v| v.abs())
        .filter(|&a| a != 0.0)
        .collect();
    if nonzero.is_empty() {
        return false;
    }
    let max = nonzero.iter().copied().fold(0.0, f64::max);
    let min = nonzero.iter().copied().fold(f64::INFINITY, f64::min);
    let cutoff = 10f64.powi(decimal_precision(dtype).min(8));
    max >= cutoff || min < 1e-4 || max / min > 1000.0
}
