//! Layer: the `xlafn` tool (printing). Arrays as NumPy-like text and as
//! JSON, and the escaping of text that comes from an export's manifest.
//! Imports `values` for the elements and xlafn's `HostArray`.

use crate::values;
use xlafn::runtime::HostArray;

/// The library's escaping of manifest text (one function for `show`,
/// `run` and a loaded export's print callbacks).
pub use xlafn::export::printable;

/// Manifest text, escaped for the terminal.
pub fn p(text: &str) -> String {
    printable(text, false)
}

/// Arrays with more elements than this print summarized, as NumPy does
/// past its default threshold of 1000: the first and last three entries
/// of each long axis around `...`.
const SUMMARY_THRESHOLD: usize = 1000;
const EDGE_ITEMS: usize = 3;

/// `a` as NumPy prints a list: nested brackets, one row per line, every
/// element padded to the widest so columns line up.
pub fn array_text(a: &HostArray) -> String {
    let texts = values::texts(a);
    let dims: Vec<usize> = a.dims.iter().map(|&d| d as usize).collect();
    let summarize = texts.len() > SUMMARY_THRESHOLD;
    let width = texts.iter().map(String::len).max().unwrap_or(0);
    let mut out = String::new();
    nested(&texts, &dims, 0, summarize, width, &mut out);
    out
}

/// Appends the sub-array of `dims` whose elements are `texts` (C order),
/// at bracket depth `depth`.
fn nested(
    texts: &[String],
    dims: &[usize],
    depth: usize,
    summarize: bool,
    width: usize,
    out: &mut String,
) {
    let Some((&n, inner)) = dims.split_first() else {
        out.push_str(&format!("{:>width$}", texts[0]));
        return;
    };
    let step: usize = inner.iter().product();
    let separator = if inner.is_empty() {
        ", ".to_string()
    } else {
        format!(",{}{}", "\n".repeat(inner.len()), " ".repeat(depth + 1))
    };
    out.push('[');
    let shown: Vec<Option<usize>> = if summarize && n > 2 * EDGE_ITEMS {
        (0..EDGE_ITEMS)
            .map(Some)
            .chain([None])
            .chain((n - EDGE_ITEMS..n).map(Some))
            .collect()
    } else {
        (0..n).map(Some).collect()
    };
    for (k, i) in shown.iter().enumerate() {
        if k > 0 {
            out.push_str(&separator);
        }
        match i {
            Some(i) => nested(
                &texts[i * step..(i + 1) * step],
                inner,
                depth + 1,
                summarize,
                width,
                out,
            ),
            None => out.push_str("..."),
        }
    }
    out.push(']');
}

/// `a`'s elements as nested JSON lists (a scalar for a 0-d array), the
/// shape `numpy.ndarray.tolist()` gives.
pub fn array_json(a: &HostArray) -> serde_json::Value {
    let flat = values::json_values(a);
    let dims: Vec<usize> = a.dims.iter().map(|&d| d as usize).collect();
    nested_json(&flat, &dims)
}

fn nested_json(flat: &[serde_json::Value], dims: &[usize]) -> serde_json::Value {
    match dims.split_first() {
        None => flat[0].clone(),
        Some((&n, inner)) => {
            let step: usize = inner.iter().product();
            (0..n)
                .map(|i| nested_json(&flat[i * step..(i + 1) * step], inner))
                .collect::<Vec<_>>()
                .into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_print_as_numpy_lays_them_out() {
        let ints = HostArray::from_vec(vec![1i32, -20, 3, 400, 5, 6], &[2, 3]);
        assert_eq!(array_text(&ints), "[[  1, -20,   3],\n [400,   5,   6]]");
        let cube = HostArray::from_vec(vec![0u8; 8], &[2, 2, 2]);
        assert_eq!(
            array_text(&cube),
            "[[[0, 0],\n  [0, 0]],\n\n [[0, 0],\n  [0, 0]]]"
        );
        assert_eq!(array_text(&HostArray::from_vec(vec![2.5f64], &[])), "2.5");
        assert_eq!(
            array_text(&HostArray::from_vec(Vec::<f32>::new(), &[0, 3])),
            "[]"
        );
        assert_eq!(
            array_text(&HostArray::from_vec(Vec::<f32>::new(), &[2, 0])),
            "[[],\n []]"
        );
        let long = HostArray::from_vec((0..1001i64).collect(), &[1001]);
        assert_eq!(
            array_text(&long),
            "[   0,    1,    2, ...,  998,  999, 1000]"
        );
        let c = HostArray::from_vec(vec![xlafn::Complex32::new(1.0, -0.5)], &[1]);
        assert_eq!(array_text(&c), "[1.0-0.5j]");
    }

    #[test]
    fn json_nests_like_tolist() {
        let a = HostArray::from_vec(vec![1f32, f32::NAN, f32::NEG_INFINITY, 0.5], &[2, 2]);
        assert_eq!(
            array_json(&a),
            serde_json::json!([[1.0, "nan"], ["-inf", 0.5]])
        );
        let u = HostArray::from_vec(vec![u64::MAX], &[]);
        assert_eq!(array_json(&u), serde_json::json!(u64::MAX));
        let b = HostArray::from_vec(vec![true, false], &[2]);
        assert_eq!(array_json(&b), serde_json::json!([true, false]));
    }

    #[test]
    fn hidden_characters_are_escaped() {
        assert_eq!(p("a\u{1b}[2J\u{202e}b"), "a\\u{1b}[2J\\u{202e}b");
        assert_eq!(printable("x\ny", true), "x\ny");
        assert_eq!(printable("x\ny", false), "x\\u{a}y");
    }
}
