//! Layer: lowering (the program check, for programs xlafn did not just
//! write: exports, which call it, and its own tests). Imports `dtype`,
//! `error`, the emitter's type names and the runtime's callback target.
//! A loaded program is checked here before
//! any of it reaches XLA, because XLA does not reject hostile programs
//! gracefully: a `custom_call` to one of its own targets (`TopK`,
//! `SliceToDynamic`) fails a C++ CHECK and aborts the process, `infeed` and
//! `outfeed` wait forever for a host that never feeds them, an absurd type
//! (`tensor<2305843009213693952xf32>`) overflows its size arithmetic, and
//! deep nesting overflows the parser's stack. None of that can be caught
//! from Rust once the text is handed over.
//!
//! The check is a tokenizer over the StableHLO text xlafn itself writes
//! (`lower::emitter`: a pretty `func.func public @main(...)` header around
//! ops in MLIR's generic form), not an MLIR parser. It accepts only the
//! words that writer prints: op names, custom-call targets, attribute names
//! and enum cases are on allow-lists; every `tensor<...>` type goes through
//! `dtype::check_array_size`, and its op results together go through
//! `dtype::check_program_memory`; bracket nesting and the text's length are
//! bounded; and the `@main` signature is returned so the loader can match it
//! against the manifest. Anything else is refused with an error that names
//! it, so a new op added to the emitter fails the export tests loudly
//! rather than slipping past the check.

use crate::dtype::{ArraySpec, DType, check_array_size, check_program_memory};
use crate::error::{Error, Result};
use crate::runtime::HOST_CALLBACK_TARGET;

/// The longest program text loaded (bytes). Far above what xlafn writes
/// for real models (captured arrays live in `.npy` files, not in the text),
/// and a bound on what the tokenizer and XLA's parser are asked to hold.
pub const MAX_PROGRAM_BYTES: u64 = 256 << 20;

/// The deepest bracket nesting accepted (all of `( [ { <` counted). Each
/// nested `if`/`while` adds two levels, so this allows dozens of nested
/// control-flow ops while keeping XLA's recursive parser far from the end
/// of its stack (20 000 levels crash it).
pub const MAX_NESTING: usize = 128;

/// Ops the emitter writes, by their generic-form names.
const OPS: &[&str] = &[
    "func.return",
    "chlo.acos",
    "chlo.acosh",
    "chlo.asin",
    "chlo.asinh",
    "chlo.atan",
    "chlo.atanh",
    "chlo.cosh",
    "chlo.digamma",
    "chlo.erf",
    "chlo.erf_inv",
    "chlo.erfc",
    "chlo.lgamma",
    "chlo.polygamma",
    "chlo.sinh",
    "chlo.tan",
    "stablehlo.abs",
    "stablehlo.add",
    "stablehlo.and",
    "stablehlo.atan2",
    "stablehlo.bitcast_convert",
    "stablehlo.broadcast_in_dim",
    "stablehlo.cbrt",
    "stablehlo.ceil",
    "stablehlo.cholesky",
    "stablehlo.clamp",
    "stablehlo.compare",
    "stablehlo.complex",
    "stablehlo.concatenate",
    "stablehlo.constant",
    "stablehlo.convert",
    "stablehlo.convolution",
    "stablehlo.cosine",
    "stablehlo.custom_call",
    "stablehlo.divide",
    "stablehlo.dot_general",
    "stablehlo.dynamic_slice",
    "stablehlo.dynamic_update_slice",
    "stablehlo.exponential",
    "stablehlo.exponential_minus_one",
    "stablehlo.fft",
    "stablehlo.floor",
    "stablehlo.gather",
    "stablehlo.if",
    "stablehlo.imag",
    "stablehlo.iota",
    "stablehlo.is_finite",
    "stablehlo.log",
    "stablehlo.log_plus_one",
    "stablehlo.logistic",
    "stablehlo.maximum",
    "stablehlo.minimum",
    "stablehlo.multiply",
    "stablehlo.negate",
    "stablehlo.not",
    "stablehlo.optimization_barrier",
    "stablehlo.or",
    "stablehlo.pad",
    "stablehlo.popcnt",
    "stablehlo.power",
    "stablehlo.real",
    "stablehlo.reduce",
    "stablehlo.reduce_window",
    "stablehlo.remainder",
    "stablehlo.reshape",
    "stablehlo.return",
    "stablehlo.reverse",
    "stablehlo.rng_bit_generator",
    "stablehlo.round_nearest_even",
    "stablehlo.rsqrt",
    "stablehlo.scatter",
    "stablehlo.select",
    "stablehlo.select_and_scatter",
    "stablehlo.shift_left",
    "stablehlo.shift_right_arithmetic",
    "stablehlo.shift_right_logical",
    "stablehlo.sign",
    "stablehlo.sine",
    "stablehlo.slice",
    "stablehlo.sort",
    "stablehlo.sqrt",
    "stablehlo.subtract",
    "stablehlo.tanh",
    "stablehlo.transpose",
    "stablehlo.triangular_solve",
    "stablehlo.while",
    "stablehlo.xor",
];

/// Custom-call targets the emitter writes: only the runtime's host
/// callback (its handler refuses callback ids it does not know).
const CUSTOM_CALL_TARGETS: &[&str] = &[HOST_CALLBACK_TARGET];

/// Bare words the emitter prints: attribute names, enum cases, scalar
/// types of attributes. The words of the `@main` header (`func.func`,
/// `public`, `tf.aliasing_output`) are not here: they may appear only in
/// the header, which is parsed on its own.
const WORDS: &[&str] = &[
    // Attribute names.
    "api_version",
    "base_dilations",
    "batch_group_count",
    "feature_group_count",
    "input_batch_dimension",
    "input_batching_dims",
    "input_feature_dimension",
    "input_spatial_dimensions",
    "kernel_input_feature_dimension",
    "kernel_output_feature_dimension",
    "kernel_spatial_dimensions",
    "left_side",
    "lhs_dilation",
    "lower",
    "output_batch_dimension",
    "output_feature_dimension",
    "output_spatial_dimensions",
    "padding",
    "raw",
    "rhs_dilation",
    "window_dilations",
    "window_dimensions",
    "window_reversal",
    "window_strides",
    "backend_config",
    "broadcast_dimensions",
    "call_target_name",
    "callback_id",
    "collapsed_slice_dims",
    "compare_type",
    "comparison_direction",
    "comparison_type",
    "dimension",
    "dimension_numbers",
    "dimensions",
    "dot_dimension_numbers",
    "edge_padding_high",
    "fft_length",
    "fft_type",
    "edge_padding_low",
    "has_side_effect",
    "index_vector_dim",
    "inserted_window_dims",
    "indices_are_sorted",
    "interior_padding",
    "is_stable",
    "iota_dimension",
    "lhs_batching_dimensions",
    "lhs_contracting_dimensions",
    "limit_indices",
    "offset_dims",
    "operand_batching_dims",
    "permutation",
    "precision",
    "precision_config",
    "rhs_batching_dimensions",
    "rhs_contracting_dimensions",
    "rng_algorithm",
    "scatter_dimension_numbers",
    "scatter_dims_to_operand_dims",
    "scatter_indices_batching_dims",
    "slice_sizes",
    "start_index_map",
    "start_indices",
    "start_indices_batching_dims",
    "transpose",
    "transpose_a",
    "unit_diagonal",
    "strides",
    "unique_indices",
    "update_window_dims",
    "value",
    // Enum cases and literals.
    "EQ",
    "NE",
    "LT",
    "LE",
    "GT",
    "GE",
    "FLOAT",
    "SIGNED",
    "UNSIGNED",
    "THREE_FRY",
    "FFT",
    "IFFT",
    "RFFT",
    "IRFFT",
    "NO_TRANSPOSE",
    "DEFAULT",
    "HIGH",
    "HIGHEST",
    "TRANSPOSE",
    "true",
    "false",
    "dense",
    "array",
    // Scalar types of attributes (`4 : i32`, `array<i64: ...>`).
    "i1",
    "i32",
    "i64",
];

/// `#...` attribute prefixes the emitter prints.
const HASH_WORDS: &[&str] = &[
    "stablehlo",
    "stablehlo.conv",
    "stablehlo.dot",
    "stablehlo.gather",
    "stablehlo.scatter",
];

/// The MLIR element type names of xlafn's dtypes (`emitter::element_type`).
fn element_dtype(name: &str) -> Option<DType> {
    DType::NUMERIC_AND_BOOL
        .into_iter()
        .find(|d| crate::lower::emitter::element_type(*d).ok() == Some(name))
}

#[derive(Clone, Debug, PartialEq)]
enum Tok<'a> {
    /// A bare word (`func.func`, `dense`, `EQ`).
    Word(&'a str),
    /// `#stablehlo.dot` and the like (without the `#`).
    Hash(&'a str),
    /// `"..."`, without the quotes.
    Str(&'a str),
    /// `%v3`, `%arg0`, `%v2#1`.
    Value(&'a str),
    /// `@main` (without the `@`).
    Symbol(&'a str),
    /// `^bb0` (without the `^`).
    Block(&'a str),
    /// An integer or a hex bit pattern, as written.
    Number(&'a str),
    Tensor(ArraySpec),
    Punct(&'static str),
}

/// At most 64 bytes of a token (all ASCII by construction), so an error
/// about a huge token stays readable.
fn short(s: &str) -> String {
    match s.get(..64) {
        Some(head) if s.len() > 64 => format!("{head}..."),
        _ => s.to_string(),
    }
}

impl std::fmt::Display for Tok<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tok::Word(w) | Tok::Number(w) => write!(f, "'{}'", short(w)),
            Tok::Hash(w) => write!(f, "'#{}'", short(w)),
            Tok::Str(s) => write!(f, "\"{}\"", short(s)),
            Tok::Value(v) => write!(f, "'%{}'", short(v)),
            Tok::Symbol(s) => write!(f, "'@{}'", short(s)),
            Tok::Block(b) => write!(f, "'^{}'", short(b)),
            Tok::Tensor(t) => write!(f, "'{t}'"),
            Tok::Punct(p) => write!(f, "'{p}'"),
        }
    }
}

/// The `@main` signature: parameter types with the result each one is
/// aliased to (`tf.aliasing_output`), and the result types.
#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    /// Each parameter's type, and the index of the result it is aliased
    /// to (a variable updated in place), if any.
    pub params: Vec<(ArraySpec, Option<usize>)>,
    /// Each result's type, in order.
    pub results: Vec<ArraySpec>,
}

fn refuse(file: &str, line: usize, what: impl std::fmt::Display) -> Error {
    Error::Value(format!(
        "export: {file} line {line}: {what}; xlafn loads only the StableHLO it writes itself"
    ))
}

struct Lexer<'a> {
    file: &'a str,
    text: &'a str,
    at: usize,
    line: usize,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'.'
}

impl<'a> Lexer<'a> {
    fn err(&self, what: impl std::fmt::Display) -> Error {
        refuse(self.file, self.line, what)
    }

    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &'a str {
        let start = self.at;
        while self.text.as_bytes().get(self.at).is_some_and(|b| f(*b)) {
            self.at += 1;
        }
        &self.text[start..self.at]
    }

    /// The text after a sigil: a word (letters, digits, `_`, `.`).
    fn sigil_word(&mut self, sigil: char) -> Result<&'a str> {
        self.at += 1;
        let w = self.take_while(is_word_byte);
        if w.is_empty() {
            return Err(self.err(format!("'{sigil}' without a name")));
        }
        Ok(w)
    }

    /// `tensor<2x3xf32>` (or `tensor<2xcomplex<f32>>`) after the word
    /// `tensor`: the dims and element type, size-checked.
    fn tensor(&mut self) -> Result<ArraySpec> {
        self.at += 1; // '<'
        let start = self.at;
        self.take_while(|b| b != b'>' && b != b'\n');
        let mut body = &self.text[start..self.at];
        // A complex element type closes its own '<' first.
        if body.ends_with("complex<f32") || body.ends_with("complex<f64") {
            self.at += 1;
            body = &self.text[start..self.at];
        }
        if self.text.as_bytes().get(self.at) != Some(&b'>') || body.len() > 256 {
            return Err(self.err("a tensor type without its closing '>'"));
        }
        self.at += 1;
        // No element type but `complex<..>` contains an 'x'; split it off
        // first, then the last 'x'-separated part is the element type.
        let (dims_text, elem) = match body.find("complex<") {
            Some(0) => (None, body),
            // `2xcomplex<f32>`: the dims end with the 'x' before it.
            Some(i) => (
                Some(body[..i].strip_suffix('x').unwrap_or(body)),
                &body[i..],
            ),
            None => match body.rsplit_once('x') {
                Some((dims, elem)) => (Some(dims), elem),
                None => (None, body),
            },
        };
        let parts: Vec<&str> = dims_text.map_or_else(Vec::new, |d| d.split('x').collect());
        let dtype = element_dtype(elem)
            .ok_or_else(|| self.err(format!("unsupported type 'tensor<{body}>'")))?;
        let dims = parts
            .iter()
            .map(|d| {
                (!d.is_empty() && d.len() <= 19 && d.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| d.parse::<i64>().ok())
                    .flatten()
                    .ok_or_else(|| self.err(format!("unsupported type 'tensor<{body}>'")))
            })
            .collect::<Result<Vec<i64>>>()?;
        if dims.len() > 64 {
            return Err(self.err(format!("type 'tensor<{body}>' has too many dimensions")));
        }
        check_array_size(dtype, &dims).map_err(|e| self.err(e))?;
        Ok(ArraySpec { dtype, dims })
    }

    fn next(&mut self) -> Result<Option<Tok<'a>>> {
        let bytes = self.text.as_bytes();
        loop {
            match bytes.get(self.at) {
                Some(b'\n') => {
                    self.line += 1;
                    self.at += 1;
                }
                Some(b' ' | b'\t' | b'\r') => self.at += 1,
                _ => break,
            }
        }
        let Some(&b) = bytes.get(self.at) else {
            return Ok(None);
        };
        let tok = match b {
            b'(' | b')' | b'{' | b'}' | b'[' | b']' | b'<' | b'>' | b',' | b':' | b'=' => {
                self.at += 1;
                Tok::Punct(match b {
                    b'(' => "(",
                    b')' => ")",
                    b'{' => "{",
                    b'}' => "}",
                    b'[' => "[",
                    b']' => "]",
                    b'<' => "<",
                    b'>' => ">",
                    b',' => ",",
                    b':' => ":",
                    _ => "=",
                })
            }
            b'-' if bytes.get(self.at + 1) == Some(&b'>') => {
                self.at += 2;
                Tok::Punct("->")
            }
            b'-' | b'0'..=b'9' => {
                let start = self.at;
                self.at += 1;
                self.take_while(|b| b.is_ascii_alphanumeric());
                let n = &self.text[start..self.at];
                let digits = n.strip_prefix('-').unwrap_or(n);
                let ok = match digits.strip_prefix("0x") {
                    Some(hex) => !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()),
                    None => !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
                };
                if !ok || n.len() > 40 {
                    return Err(self.err(format!("unsupported number '{}'", short(n))));
                }
                Tok::Number(n)
            }
            b'"' => {
                self.at += 1;
                let s = self.take_while(is_word_byte);
                if bytes.get(self.at) != Some(&b'"') {
                    return Err(self.err("a string with characters xlafn never writes"));
                }
                self.at += 1;
                Tok::Str(s)
            }
            b'%' => {
                self.at += 1;
                let start = self.at;
                self.take_while(|b| b.is_ascii_alphanumeric() || b == b'_');
                if bytes.get(self.at) == Some(&b'#') {
                    self.at += 1;
                    self.take_while(|b| b.is_ascii_digit());
                }
                if self.at == start {
                    return Err(self.err("'%' without a name"));
                }
                Tok::Value(&self.text[start..self.at])
            }
            b'#' => Tok::Hash(self.sigil_word('#')?),
            b'@' => Tok::Symbol(self.sigil_word('@')?),
            b'^' => Tok::Block(self.sigil_word('^')?),
            b if b.is_ascii_alphabetic() || b == b'_' => {
                let w = self.take_while(is_word_byte);
                if w == "tensor" && bytes.get(self.at) == Some(&b'<') {
                    Tok::Tensor(self.tensor()?)
                } else {
                    Tok::Word(w)
                }
            }
            _ => {
                let c = self.text[self.at..].chars().next().unwrap_or('?');
                return Err(self.err(format!("unexpected character {c:?}")));
            }
        };
        Ok(Some(tok))
    }
}

/// Walks the tokens of the `@main` header with one token of lookahead
/// (tokens are streamed, never collected: a long program costs no more
/// memory than its text).
struct Header<'a> {
    lexer: Lexer<'a>,
    peeked: Option<Tok<'a>>,
}

impl<'a> Header<'a> {
    fn err(&self, what: impl std::fmt::Display) -> Error {
        self.lexer.err(what)
    }

    fn peek(&mut self) -> Result<Option<&Tok<'a>>> {
        if self.peeked.is_none() {
            self.peeked = self.lexer.next()?;
        }
        Ok(self.peeked.as_ref())
    }

    fn eat(&mut self, want: &Tok<'_>) -> Result<bool> {
        if self.peek()? == Some(want) {
            self.peeked = None;
            return Ok(true);
        }
        Ok(false)
    }

    fn bump(&mut self) -> Result<Tok<'a>> {
        self.peek()?;
        self.peeked
            .take()
            .ok_or_else(|| self.err("the text ends inside the @main header"))
    }

    fn expect(&mut self, want: &Tok<'_>) -> Result<()> {
        let got = self.bump()?;
        if got != *want {
            return Err(self.err(format!("expected {want} in the @main header, found {got}")));
        }
        Ok(())
    }

    fn tensor(&mut self) -> Result<ArraySpec> {
        match self.bump()? {
            Tok::Tensor(t) => Ok(t),
            other => Err(self.err(format!(
                "expected a tensor type in the @main header, found {other}"
            ))),
        }
    }

    fn number(&mut self) -> Result<usize> {
        match self.bump()? {
            Tok::Number(n) if n.bytes().all(|b| b.is_ascii_digit()) => n
                .parse()
                .map_err(|_| self.err(format!("number '{n}' is too large"))),
            other => Err(self.err(format!("expected a result index, found {other}"))),
        }
    }

    /// `func.func public @main(%arg0: T [{tf.aliasing_output = R : i32}],
    /// ...) -> T | (T, ...) {`
    fn signature(&mut self) -> Result<Signature> {
        self.expect(&Tok::Word("func.func"))?;
        self.expect(&Tok::Word("public"))?;
        self.expect(&Tok::Symbol("main"))?;
        self.expect(&Tok::Punct("("))?;
        let mut params = Vec::new();
        if !self.eat(&Tok::Punct(")"))? {
            loop {
                let name = format!("arg{}", params.len());
                self.expect(&Tok::Value(&name))?;
                self.expect(&Tok::Punct(":"))?;
                let ty = self.tensor()?;
                let mut alias = None;
                if self.eat(&Tok::Punct("{"))? {
                    self.expect(&Tok::Word("tf.aliasing_output"))?;
                    self.expect(&Tok::Punct("="))?;
                    alias = Some(self.number()?);
                    self.expect(&Tok::Punct(":"))?;
                    self.expect(&Tok::Word("i32"))?;
                    self.expect(&Tok::Punct("}"))?;
                }
                params.push((ty, alias));
                if !self.eat(&Tok::Punct(","))? {
                    self.expect(&Tok::Punct(")"))?;
                    break;
                }
            }
        }
        self.expect(&Tok::Punct("->"))?;
        let mut results = Vec::new();
        if !self.eat(&Tok::Punct("("))? {
            results.push(self.tensor()?);
        } else if !self.eat(&Tok::Punct(")"))? {
            loop {
                results.push(self.tensor()?);
                if !self.eat(&Tok::Punct(","))? {
                    self.expect(&Tok::Punct(")"))?;
                    break;
                }
            }
        }
        self.expect(&Tok::Punct("{"))?;
        Ok(Signature { params, results })
    }
}

/// Where the body check is within a custom call's attributes: after
/// `call_target_name` or `api_version`, the value two tokens on is checked.
#[derive(Clone, Copy, PartialEq)]
enum Pending {
    None,
    TargetEquals,
    Target,
    VersionEquals,
    Version,
}

/// The state of the check over `@main`'s body: open brackets, a pending
/// custom-call attribute, and the bytes of the op results read so far.
struct Body {
    /// Whether the nesting bound applies ([`Bounds`]).
    bounds: Bounds,
    stack: Vec<&'static str>,
    pending: Pending,
    results: Results,
    largest_bytes: u64,
    total_bytes: u64,
}

/// Where the tokenizer is in an op's result types (`-> tensor<..>` or
/// `-> (tensor<..>, ...)`), which the memory check adds up.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Results {
    Outside,
    Arrow,
    List,
}

impl Body {
    fn add_array(&mut self, t: &ArraySpec) {
        let bytes = t.byte_size();
        self.largest_bytes = self.largest_bytes.max(bytes);
        self.total_bytes = self.total_bytes.saturating_add(bytes);
    }

    /// Checks one token of the body; the error text names it.
    fn token(&mut self, tok: &Tok<'_>) -> std::result::Result<(), String> {
        if self.stack.is_empty() {
            return Err(format!("{tok} after the end of @main"));
        }
        self.results = match (self.results, tok) {
            (_, Tok::Punct("->")) => Results::Arrow,
            (Results::Arrow, Tok::Punct("(")) | (Results::List, Tok::Punct(",")) => Results::List,
            (Results::Arrow | Results::List, Tok::Tensor(t)) => {
                self.add_array(t);
                match self.results {
                    Results::List => Results::List,
                    _ => Results::Outside,
                }
            }
            _ => Results::Outside,
        };
        self.pending = match (self.pending, tok) {
            (Pending::None, _) => Pending::None,
            (Pending::TargetEquals, Tok::Punct("=")) => Pending::Target,
            (Pending::VersionEquals, Tok::Punct("=")) => Pending::Version,
            (Pending::Target, Tok::Str(s)) if CUSTOM_CALL_TARGETS.contains(s) => {
                // Checked here; the op-name rule below is not for it.
                self.pending = Pending::None;
                return Ok(());
            }
            (Pending::Target, _) => return Err(format!("custom_call target {tok}")),
            (Pending::Version, Tok::Number("4")) => Pending::None,
            (Pending::Version, _) => {
                return Err("a custom_call that is not a typed FFI call (api_version = 4)".into());
            }
            (Pending::TargetEquals | Pending::VersionEquals, _) => {
                return Err(format!(
                    "expected '=' after a custom_call attribute, found {tok}"
                ));
            }
        };
        match tok {
            Tok::Punct(open @ ("(" | "[" | "{" | "<")) => {
                self.stack.push(match *open {
                    "(" => ")",
                    "[" => "]",
                    "{" => "}",
                    _ => ">",
                });
                if self.bounds == Bounds::Enforced && self.stack.len() > MAX_NESTING {
                    return Err(format!("brackets nest deeper than {MAX_NESTING} levels"));
                }
            }
            Tok::Punct(close @ (")" | "]" | "}" | ">")) => {
                if self.stack.pop() != Some(*close) {
                    return Err(format!("unbalanced {tok}"));
                }
            }
            Tok::Punct(_) | Tok::Number(_) | Tok::Tensor(_) | Tok::Value(_) => {}
            Tok::Str(s) if OPS.contains(s) => {}
            Tok::Str(_) => return Err(format!("op {tok}")),
            Tok::Word("call_target_name") => self.pending = Pending::TargetEquals,
            Tok::Word("api_version") => self.pending = Pending::VersionEquals,
            Tok::Word(w) if WORDS.contains(w) => {}
            Tok::Hash(h) if HASH_WORDS.contains(h) => {}
            Tok::Block("bb0") => {}
            Tok::Word(_) | Tok::Hash(_) | Tok::Block(_) | Tok::Symbol(_) => {
                return Err(format!("{tok}"));
            }
        }
        Ok(())
    }
}

/// Whether a check applies the bounds on length, nesting and memory, or
/// only the vocabulary.
#[derive(Clone, Copy, PartialEq)]
enum Bounds {
    Enforced,
    Ignored,
}

/// Checks the program text `text` of export file `file` (see the module
/// docs) and returns its `@main` signature.
pub fn check_program(file: &str, text: &str) -> Result<Signature> {
    check(file, text, Bounds::Enforced)
}

/// [`check_program`]'s vocabulary alone: the words, ops, targets and types
/// it accepts, without its bounds on length, nesting and memory (a program
/// built in memory may nest deeper than a file may). Debug builds run it
/// on every program `lower` writes, so an emitter change that prints a word
/// the check does not know fails whichever test lowers it, not only the
/// export tests that happen to reach that op.
#[cfg_attr(not(debug_assertions), allow(dead_code))]
pub(crate) fn check_vocabulary(text: &str) -> Result<Signature> {
    check("the lowered program", text, Bounds::Ignored)
}

fn check(file: &str, text: &str, bounds: Bounds) -> Result<Signature> {
    if bounds == Bounds::Enforced && text.len() as u64 > MAX_PROGRAM_BYTES {
        return Err(refuse(
            file,
            1,
            format!("the program is longer than {MAX_PROGRAM_BYTES} bytes"),
        ));
    }
    let mut header = Header {
        lexer: Lexer {
            file,
            text,
            at: 0,
            line: 1,
        },
        peeked: None,
    };
    let signature = header.signature()?;
    let mut lexer = header.lexer;
    // The header's own brackets are balanced by construction; the body
    // opens at depth 1 with its '{' and must close exactly at the end.
    let mut body = Body {
        bounds,
        stack: vec!["}"],
        pending: Pending::None,
        results: Results::Outside,
        largest_bytes: 0,
        total_bytes: 0,
    };
    for (p, _) in &signature.params {
        body.add_array(p);
    }
    while let Some(tok) = lexer.next()? {
        body.token(&tok).map_err(|what| lexer.err(what))?;
    }
    if !body.stack.is_empty() || body.pending != Pending::None {
        return Err(lexer.err("the text ends before @main is closed"));
    }
    if bounds == Bounds::Ignored {
        return Ok(signature);
    }
    // The memory rule every lowered program meets (`lower`), for programs
    // read from a file: their parameters and op results added up.
    check_program_memory(body.largest_bytes, body.total_bytes).map_err(|e| match e {
        Error::Value(m) => Error::Value(format!("export: {file}: cannot compile the program: {m}")),
        e => e,
    })?;
    Ok(signature)
}

#[cfg(test)]
mod tests;
