//! The StableHLO text writer. Op lowerings call its typed methods; nothing
//! else in the crate formats StableHLO.
//!
//! Everything is printed in MLIR's generic form (`"stablehlo.add"(%a, %b) :
//! (...) -> ...`), which the plugin parses for every op (the pretty form does
//! not exist for `if`/`case`), so one printer covers all ops. Every method
//! knows its result type; the graph lowering checks it against `infer`.

use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::Scalar;
use std::fmt::Write;

/// A StableHLO SSA value and its type.
#[derive(Clone, Debug)]
pub struct Val {
    pub name: String,
    pub ty: ArraySpec,
}

/// Comparison directions of `stablehlo.compare`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Scalar combiners for reduction bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Combiner {
    Add,
    Mul,
    Max,
    Min,
    And,
    Or,
}

impl Combiner {
    fn op_name(self) -> &'static str {
        match self {
            Combiner::Add => "add",
            Combiner::Mul => "multiply",
            Combiner::Max => "maximum",
            Combiner::Min => "minimum",
            Combiner::And => "and",
            Combiner::Or => "or",
        }
    }
}

mod callbacks;
mod collectives;
mod module;
mod precision;
mod size;
mod structured;
pub use collectives::ManualShardings;
pub use module::{Annotations, Partitioning};
pub use precision::{MATMUL_PRECISION_VAR, MatmulPrecision};
pub use size::ProgramSize;
pub use structured::{ConvAttrs, GatherDims, ScatterDims};

/// MLIR element type name.
pub fn element_type(dtype: DType) -> Result<&'static str> {
    Ok(match dtype.check_compilable()? {
        DType::Bool => "i1",
        DType::I8 => "i8",
        DType::I16 => "i16",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::U8 => "ui8",
        DType::U16 => "ui16",
        DType::U32 => "ui32",
        DType::U64 => "ui64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::C64 => "complex<f32>",
        DType::C128 => "complex<f64>",
        DType::String => unreachable!("rejected by check_compilable"),
    })
}

/// `tensor<2x3xf32>`, `tensor<f32>`.
pub fn tensor_type(ty: &ArraySpec) -> String {
    let elem = element_type(ty.dtype).unwrap_or("none");
    let mut s = String::from("tensor<");
    for d in &ty.dims {
        let _ = write!(s, "{d}x");
    }
    s.push_str(elem);
    s.push('>');
    s
}

fn i64_array(values: &[i64]) -> String {
    if values.is_empty() {
        return "array<i64>".to_string();
    }
    let items: Vec<String> = values.iter().map(|v| v.to_string()).collect();
    format!("array<i64: {}>", items.join(", "))
}

/// `dense<[[lo, hi], ...]> : tensor<Nx2xi64>`.
fn padding_attr(padding: &[(i64, i64)]) -> String {
    let pads: Vec<String> = padding.iter().map(|(l, h)| format!("[{l}, {h}]")).collect();
    format!(
        "dense<[{}]> : tensor<{}x2xi64>",
        pads.join(", "),
        padding.len()
    )
}

fn list(values: &[i64]) -> String {
    let items: Vec<String> = values.iter().map(|v| v.to_string()).collect();
    format!("[{}]", items.join(", "))
}

/// The literal of `value` as `dtype`: floats as exact hex bit patterns (so
/// NaN, Inf and every f32 survive the round trip), ints in decimal, complex
/// numbers as a pair `(re, im)` of their parts' literals (host scalars are
/// real, so `im` is zero).
pub fn literal(value: Scalar, dtype: DType) -> String {
    let v = value.cast(dtype);
    match dtype {
        DType::C64 | DType::C128 => {
            let part = dtype.real_part();
            format!(
                "({}, {})",
                literal(v, part),
                literal(Scalar::F64(0.0), part)
            )
        }
        DType::Bool => (if v.as_f64() != 0.0 { "true" } else { "false" }).to_string(),
        DType::F64 => format!("0x{:016X}", v.as_f64().to_bits()),
        DType::F32 => format!("0x{:08X}", (v.as_f64() as f32).to_bits()),
        DType::F16 => format!("0x{:04X}", half::f16::from_f64(v.as_f64()).to_bits()),
        DType::BF16 => format!("0x{:04X}", half::bf16::from_f64(v.as_f64()).to_bits()),
        d if d.is_unsigned_int() => match v {
            Scalar::U64(u) => u.to_string(),
            other => other.as_i64().to_string(),
        },
        _ => v.as_i64().to_string(),
    }
}

/// Writes the body of one function (or region) in program order.
#[derive(Default)]
pub struct Emitter {
    body: String,
    next_id: usize,
    indent: usize,
    size: ProgramSize,
    /// The first array type too large for XLA (`dtype::check_array_size`),
    /// found while emitting; `lower` refuses the program before its text
    /// can reach the compiler, which would abort the process.
    oversized: Option<Error>,
    /// How the program is partitioned over several devices, if it is (see
    /// `is_partitioned`).
    partitioning: Option<Partitioning>,
    /// Collectives emitted so far: each gets its own channel id.
    channels: i64,
    /// How deep inside `sdy.manual_computation` bodies the emitter is.
    manual_depth: usize,
    /// What every product asks of the compiler (`XLAFN_DEFAULT_MATMUL_PRECISION`).
    matmul_precision: MatmulPrecision,
}

impl Emitter {
    pub fn new() -> Emitter {
        Emitter {
            body: String::new(),
            next_id: 0,
            indent: 1,
            size: ProgramSize::default(),
            oversized: None,
            partitioning: None,
            channels: 0,
            manual_depth: 0,
            matmul_precision: MatmulPrecision::Default,
        }
    }

    /// Marks the program as partitioned by XLA's SPMD partitioner.
    pub fn set_partitioning(&mut self, partitioning: Option<Partitioning>) {
        self.partitioning = partitioning;
    }

    /// Sets the precision every later `dot_general` and `convolution` asks for.
    pub fn set_matmul_precision(&mut self, precision: MatmulPrecision) {
        self.matmul_precision = precision;
    }

    /// How the program is partitioned, if it is.
    pub fn partitioning(&self) -> Option<&Partitioning> {
        self.partitioning.as_ref()
    }

    /// Is the program partitioned? The partitioner turns a reduction over
    /// a split dimension into a local one plus an `all-reduce` with the
    /// same body, and the CPU plugin's all-reduce supports only plain
    /// `add`/`multiply`/`maximum`/`minimum`/`and`/`or` bodies ("Unsupported
    /// reduction computation" otherwise): ops with richer bodies lower
    /// another way here.
    pub fn is_partitioned(&self) -> bool {
        self.partitioning.is_some()
    }

    fn fresh(&mut self) -> String {
        let id = self.next_id;
        self.next_id += 1;
        format!("%v{id}")
    }

    /// A function parameter value named `%argN`.
    pub fn param(&mut self, index: usize, ty: ArraySpec) -> Val {
        let elements = self.count(&ty);
        self.size.largest_array = self.size.largest_array.max(elements);
        self.size.largest_rank = self.size.largest_rank.max(ty.rank());
        self.size.has_half_floats |= matches!(ty.dtype, DType::F16 | DType::BF16);
        Val {
            name: format!("%arg{index}"),
            ty,
        }
    }

    /// The elements of one array (at least 1), noting the first type too
    /// large for XLA and adding its bytes to the program's.
    fn count(&mut self, ty: &ArraySpec) -> u64 {
        if self.oversized.is_none() {
            self.oversized = ty.check_size().err();
        }
        let bytes = ty.byte_size();
        self.size.largest_bytes = self.size.largest_bytes.max(bytes);
        self.size.total_bytes = self.size.total_bytes.saturating_add(bytes);
        ty.dims
            .iter()
            .fold(1u64, |n, &d| n.saturating_mul(d.max(1) as u64))
    }

    /// Errors if any array emitted so far is too large for XLA, or the
    /// arrays cannot fit in memory (`dtype::check_program_memory`): the
    /// one check every lowered program passes before it can reach XLA.
    pub fn check_sizes(&self) -> Result<()> {
        let oversized = match &self.oversized {
            Some(e) => Some(e.clone()),
            None => {
                crate::dtype::check_program_memory(self.size.largest_bytes, self.size.total_bytes)
                    .err()
            }
        };
        match oversized {
            Some(Error::Value(m)) => Err(Error::Value(format!("cannot compile the program: {m}"))),
            Some(e) => Err(Error::Value(format!("cannot compile the program: {e}"))),
            None => Ok(()),
        }
    }

    /// The generic printer behind every typed method.
    fn op(
        &mut self,
        name: &str,
        operands: &[&Val],
        regions: &[String],
        attrs: &[(&str, String)],
        results: &[ArraySpec],
    ) -> Vec<Val> {
        for r in results {
            let elements = self.count(r);
            self.size.result_elements = self.size.result_elements.saturating_add(elements);
            self.size.largest_array = self.size.largest_array.max(elements);
            self.size.largest_rank = self.size.largest_rank.max(r.rank());
            self.size.has_half_floats |= matches!(r.dtype, DType::F16 | DType::BF16);
        }
        let base = self.fresh();
        let pad = "  ".repeat(self.indent);
        let lhs = match results.len() {
            0 => String::new(),
            1 => format!("{base} = "),
            n => format!("{base}:{n} = "),
        };
        let args: Vec<&str> = operands.iter().map(|v| v.name.as_str()).collect();
        let _ = write!(self.body, "{pad}{lhs}\"{name}\"({})", args.join(", "));
        if !regions.is_empty() {
            let _ = write!(self.body, " ({})", regions.join(", "));
        }
        if !attrs.is_empty() {
            let a: Vec<String> = attrs.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            let _ = write!(self.body, " {{{}}}", a.join(", "));
        }
        let ins: Vec<String> = operands.iter().map(|v| tensor_type(&v.ty)).collect();
        let outs: Vec<String> = results.iter().map(tensor_type).collect();
        let out = if outs.len() == 1 {
            outs[0].clone()
        } else {
            format!("({})", outs.join(", "))
        };
        let _ = writeln!(self.body, " : ({}) -> {out}", ins.join(", "));
        match results.len() {
            1 => vec![Val {
                name: base,
                ty: results[0].clone(),
            }],
            _ => results
                .iter()
                .enumerate()
                .map(|(i, t)| Val {
                    name: format!("{base}#{i}"),
                    ty: t.clone(),
                })
                .collect(),
        }
    }

    fn op1(
        &mut self,
        name: &str,
        operands: &[&Val],
        attrs: &[(&str, String)],
        result: ArraySpec,
    ) -> Val {
        self.op(name, operands, &[], attrs, &[result]).remove(0)
    }

    /// A region `{ ^bb0(args): body; stablehlo.return results }`, with
    /// `body` emitting into it.
    pub fn region(
        &mut self,
        arg_types: &[ArraySpec],
        body: impl FnOnce(&mut Emitter, &[Val]) -> Result<Vec<Val>>,
    ) -> Result<String> {
        self.region_ending("stablehlo.return", arg_types, body)
    }

    /// `region` with another terminator op (`sdy.return`).
    fn region_ending(
        &mut self,
        terminator: &str,
        arg_types: &[ArraySpec],
        body: impl FnOnce(&mut Emitter, &[Val]) -> Result<Vec<Val>>,
    ) -> Result<String> {
        let saved = std::mem::take(&mut self.body);
        self.indent += 1;
        let args: Vec<Val> = arg_types
            .iter()
            .map(|t| {
                let name = self.fresh().replace("%v", "%r");
                Val {
                    name,
                    ty: t.clone(),
                }
            })
            .collect();
        let results = body(self, &args);
        self.indent -= 1;
        let inner = std::mem::replace(&mut self.body, saved);
        let results = results?;
        let pad = "  ".repeat(self.indent + 1);
        let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
        let tys: Vec<String> = results.iter().map(|r| tensor_type(&r.ty)).collect();
        // A block without arguments needs no label.
        let header = if args.is_empty() {
            String::new()
        } else {
            let sig: Vec<String> = args
                .iter()
                .map(|a| format!("{}: {}", a.name, tensor_type(&a.ty)))
                .collect();
            format!("{pad}^bb0({}):\n", sig.join(", "))
        };
        Ok(format!(
            "{{\n{header}{inner}{pad}  \"{terminator}\"({}) : ({}) -> ()\n{}}}",
            names.join(", "),
            tys.join(", "),
            "  ".repeat(self.indent)
        ))
    }

    /// A splat constant of any shape.
    pub fn constant(&mut self, value: Scalar, ty: ArraySpec) -> Val {
        let attr = format!("dense<{}> : {}", literal(value, ty.dtype), tensor_type(&ty));
        self.op1("stablehlo.constant", &[], &[("value", attr)], ty)
    }

    /// A constant holding `values` (row-major) with type `ty`.
    pub fn constant_array(&mut self, values: &[Scalar], ty: ArraySpec) -> Val {
        let items: Vec<String> = values.iter().map(|v| literal(*v, ty.dtype)).collect();
        let body = if ty.dims.is_empty() {
            items.join("")
        } else {
            format!("[{}]", items.join(", "))
        };
        let flat = ArraySpec {
            dtype: ty.dtype,
            dims: vec![values.len() as i64],
        };
        let attr = format!(
            "dense<{body}> : {}",
            tensor_type(if ty.dims.is_empty() { &ty } else { &flat })
        );
        if ty.dims.is_empty() {
            return self.op1("stablehlo.constant", &[], &[("value", attr)], ty);
        }
        let c = self.op1("stablehlo.constant", &[], &[("value", attr)], flat);
        self.reshape(&c, &ty.dims)
    }

    /// An elementwise op whose result has the operand's type
    /// (`negate`, `exponential`, `tanh`, `not`, ...).
    pub fn unary(&mut self, name: &str, x: &Val) -> Val {
        self.op1(&format!("stablehlo.{name}"), &[x], &[], x.ty.clone())
    }

    /// An elementwise op with an explicit result dtype (`is_finite`).
    pub fn unary_to(&mut self, name: &str, x: &Val, dtype: DType) -> Val {
        self.op1(
            &format!("stablehlo.{name}"),
            &[x],
            &[],
            x.ty.with_dtype(dtype),
        )
    }

    /// An elementwise CHLO op (`erf`, `lgamma`, `asin`, ...): XLA expands
    /// it into StableHLO when it compiles the program.
    pub fn chlo(&mut self, name: &str, x: &Val) -> Val {
        self.op1(&format!("chlo.{name}"), &[x], &[], x.ty.clone())
    }

    /// A CHLO op on two operands of the same type (`polygamma`).
    pub fn chlo_binary(&mut self, name: &str, a: &Val, b: &Val) -> Val {
        self.op1(&format!("chlo.{name}"), &[a, b], &[], a.ty.clone())
    }

    /// An elementwise op on two operands of the same type
    /// (`add`, `power`, `and`, `remainder`, ...).
    pub fn binary(&mut self, name: &str, a: &Val, b: &Val) -> Val {
        self.op1(&format!("stablehlo.{name}"), &[a, b], &[], a.ty.clone())
    }

    /// An elementwise op on two operands of one type with an explicit
    /// result dtype (`complex`).
    pub fn binary_to(&mut self, name: &str, a: &Val, b: &Val, dtype: DType) -> Val {
        self.op1(
            &format!("stablehlo.{name}"),
            &[a, b],
            &[],
            a.ty.with_dtype(dtype),
        )
    }

    pub fn compare(&mut self, dir: Cmp, a: &Val, b: &Val) -> Val {
        let d = match dir {
            Cmp::Eq => "EQ",
            Cmp::Ne => "NE",
            Cmp::Lt => "LT",
            Cmp::Le => "LE",
            Cmp::Gt => "GT",
            Cmp::Ge => "GE",
        };
        let kind = match a.ty.dtype {
            t if t.is_inexact() => "FLOAT",
            t if t.is_signed_int() => "SIGNED",
            _ => "UNSIGNED",
        };
        let attrs = [
            (
                "comparison_direction",
                format!("#stablehlo<comparison_direction {d}>"),
            ),
            (
                "compare_type",
                format!("#stablehlo<comparison_type {kind}>"),
            ),
        ];
        self.op1(
            "stablehlo.compare",
            &[a, b],
            &attrs,
            a.ty.with_dtype(DType::Bool),
        )
    }

    pub fn select(&mut self, pred: &Val, on_true: &Val, on_false: &Val) -> Val {
        self.op1(
            "stablehlo.select",
            &[pred, on_true, on_false],
            &[],
            on_true.ty.clone(),
        )
    }

    pub fn convert(&mut self, x: &Val, dtype: DType) -> Val {
        if x.ty.dtype == dtype {
            return x.clone();
        }
        self.op1("stablehlo.convert", &[x], &[], x.ty.with_dtype(dtype))
    }

    pub fn bitcast_convert(&mut self, x: &Val, dtype: DType) -> Val {
        self.op1(
            "stablehlo.bitcast_convert",
            &[x],
            &[],
            x.ty.with_dtype(dtype),
        )
    }

    /// `broadcast_in_dim`: operand dim i becomes result dim `dims[i]`.
    pub fn broadcast_in_dim(&mut self, x: &Val, dims: &[i64], out_dims: &[i64]) -> Val {
        let out = ArraySpec {
            dtype: x.ty.dtype,
            dims: out_dims.to_vec(),
        };
        self.op1(
            "stablehlo.broadcast_in_dim",
            &[x],
            &[("broadcast_dimensions", i64_array(dims))],
            out,
        )
    }

    /// NumPy-style broadcast (trailing dims aligned) to `out_dims`; a no-op
    /// when the shape already matches.
    pub fn broadcast_to(&mut self, x: &Val, out_dims: &[i64]) -> Val {
        if x.ty.dims == out_dims {
            return x.clone();
        }
        let offset = out_dims.len() - x.ty.dims.len();
        let map: Vec<i64> = (0..x.ty.dims.len()).map(|i| (i + offset) as i64).collect();
        self.broadcast_in_dim(x, &map, out_dims)
    }

    pub fn reshape(&mut self, x: &Val, dims: &[i64]) -> Val {
        if x.ty.dims == dims {
            return x.clone();
        }
        let out = ArraySpec {
            dtype: x.ty.dtype,
            dims: dims.to_vec(),
        };
        self.op1("stablehlo.reshape", &[x], &[], out)
    }

    pub fn transpose(&mut self, x: &Val, perm: &[i64]) -> Val {
        let dims: Vec<i64> = perm.iter().map(|&p| x.ty.dims[p as usize]).collect();
        let out = ArraySpec {
            dtype: x.ty.dtype,
            dims,
        };
        self.op1(
            "stablehlo.transpose",
            &[x],
            &[("permutation", i64_array(perm))],
            out,
        )
    }

    pub fn concatenate(&mut self, xs: &[&Val], dim: i64) -> Val {
        let mut dims = xs[0].ty.dims.clone();
        dims[dim as usize] = xs.iter().map(|x| x.ty.dims[dim as usize]).sum();
        let out = ArraySpec {
            dtype: xs[0].ty.dtype,
            dims,
        };
        self.op1(
            "stablehlo.concatenate",
            xs,
            &[("dimension", format!("{dim} : i64"))],
            out,
        )
    }

    /// Static slice with positive strides.
    pub fn slice(&mut self, x: &Val, start: &[i64], limit: &[i64], strides: &[i64]) -> Val {
        let dims: Vec<i64> = (0..start.len())
            .map(|i| match (limit[i] - start[i]).max(0) {
                0 => 0,
                span => (span - 1) / strides[i] + 1,
            })
            .collect();
        let out = ArraySpec {
            dtype: x.ty.dtype,
            dims,
        };
        let attrs = [
            ("start_indices", i64_array(start)),
            ("limit_indices", i64_array(limit)),
            ("strides", i64_array(strides)),
        ];
        self.op1("stablehlo.slice", &[x], &attrs, out)
    }

    /// `stablehlo.pad`: `low`/`high` elements of `value` (a scalar of
    /// `x`'s dtype) at each edge (negative: cut off) and `interior` between
    /// neighbours; `out` is the padded type.
    pub fn pad(
        &mut self,
        x: &Val,
        value: &Val,
        low: &[i64],
        high: &[i64],
        interior: &[i64],
        out: ArraySpec,
    ) -> Val {
        let attrs = [
            ("edge_padding_low", i64_array(low)),
            ("edge_padding_high", i64_array(high)),
            ("interior_padding", i64_array(interior)),
        ];
        self.op1("stablehlo.pad", &[x, value], &attrs, out)
    }

    pub fn reverse(&mut self, x: &Val, dims: &[i64]) -> Val {
        self.op1(
            "stablehlo.reverse",
            &[x],
            &[("dimensions", i64_array(dims))],
            x.ty.clone(),
        )
    }

    /// Counts 0, 1, 2, ... along `dim` of a `ty`-shaped array.
    pub fn iota(&mut self, ty: ArraySpec, dim: i64) -> Val {
        self.op1(
            "stablehlo.iota",
            &[],
            &[("iota_dimension", format!("{dim} : i64"))],
            ty,
        )
    }

    /// `dot_general`; the result is batch dims, then lhs free dims, then rhs
    /// free dims, with `out_dtype`.
    #[allow(clippy::too_many_arguments)]
    pub fn dot_general(
        &mut self,
        a: &Val,
        b: &Val,
        lhs_batch: &[i64],
        rhs_batch: &[i64],
        lhs_contract: &[i64],
        rhs_contract: &[i64],
        out: ArraySpec,
    ) -> Val {
        self.size.has_contractions = true;
        // A narrower float product with an f64 result (`preferred_element_type`)
        // multiplies f64 operands: each product of two f32 (or bf16, f16)
        // values is exact in f64, so the result is the same, and XLA's CUDA
        // backend cannot compile the mixed form (measured on an H200: "GEMM
        // is not supported by cublasLt").
        let widened;
        let (a, b) = if out.dtype == DType::F64 && a.ty.dtype.is_float() && a.ty.dtype != DType::F64
        {
            widened = (self.convert(a, DType::F64), self.convert(b, DType::F64));
            (&widened.0, &widened.1)
        } else {
            (a, b)
        };
        let attr = format!(
            "#stablehlo.dot<lhs_batching_dimensions = {}, rhs_batching_dimensions = {}, lhs_contracting_dimensions = {}, rhs_contracting_dimensions = {}>",
            list(lhs_batch),
            list(rhs_batch),
            list(lhs_contract),
            list(rhs_contract)
        );
        let mut attrs = vec![("dot_dimension_numbers", attr)];
        attrs.extend(self.matmul_precision.attribute());
        self.op1("stablehlo.dot_general", &[a, b], &attrs, out)
    }

    /// Reduces `x` over `dims` with a scalar combiner starting from `init`.
    pub fn reduce(
        &mut self,
        x: &Val,
        init: Scalar,
        dims: &[i64],
        combiner: Combiner,
    ) -> Result<Val> {
        let scalar = ArraySpec::scalar(x.ty.dtype);
        let init = self.constant(init, scalar.clone());
        let region = self.region(&[scalar.clone(), scalar], |cx, args| {
            Ok(vec![cx.binary(combiner.op_name(), &args[0], &args[1])])
        })?;
        let out_dims: Vec<i64> = (0..x.ty.rank() as i64)
            .filter(|d| !dims.contains(d))
            .map(|d| x.ty.dims[d as usize])
            .collect();
        let out = ArraySpec {
            dtype: x.ty.dtype,
            dims: out_dims,
        };
        Ok(self
            .op(
                "stablehlo.reduce",
                &[x, &init],
                &[region],
                &[("dimensions", i64_array(dims))],
                &[out],
            )
            .remove(0))
    }

    /// A variadic reduce with a custom body: `body` receives the
    /// accumulators then the new elements (each a scalar) and returns the
    /// new accumulators.
    pub fn reduce_with(
        &mut self,
        xs: &[&Val],
        inits: &[&Val],
        dims: &[i64],
        body: impl FnOnce(&mut Emitter, &[Val]) -> Result<Vec<Val>>,
    ) -> Result<Vec<Val>> {
        let scalars: Vec<ArraySpec> = inits
            .iter()
            .map(|v| ArraySpec::scalar(v.ty.dtype))
            .collect();
        let mut region_args = scalars.clone();
        region_args.extend(scalars.iter().cloned());
        let region = self.region(&region_args, body)?;
        let rank = xs[0].ty.rank() as i64;
        let out_dims: Vec<i64> = (0..rank)
            .filter(|d| !dims.contains(d))
            .map(|d| xs[0].ty.dims[d as usize])
            .collect();
        let outs: Vec<ArraySpec> = xs
            .iter()
            .map(|x| ArraySpec {
                dtype: x.ty.dtype,
                dims: out_dims.clone(),
            })
            .collect();
        let mut operands: Vec<&Val> = xs.to_vec();
        operands.extend(inits.iter().copied());
        Ok(self.op(
            "stablehlo.reduce",
            &operands,
            &[region],
            &[("dimensions", i64_array(dims))],
            &outs,
        ))
    }

    /// Threefry random bits: returns (new state, bits of type `out`).
    pub fn rng_bit_generator(&mut self, state: &Val, out: ArraySpec) -> (Val, Val) {
        let attrs = [(
            "rng_algorithm",
            "#stablehlo<rng_algorithm THREE_FRY>".to_string(),
        )];
        let mut r = self.op(
            "stablehlo.rng_bit_generator",
            &[state],
            &[],
            &attrs,
            &[state.ty.clone(), out],
        );
        let bits = r.pop().expect("two results");
        (r.pop().expect("two results"), bits)
    }

    /// `clamp(min, x, max)` with operands of one type (or scalar bounds).
    pub fn clamp(&mut self, min: &Val, x: &Val, max: &Val) -> Val {
        self.op1("stablehlo.clamp", &[min, x, max], &[], x.ty.clone())
    }

    /// `stablehlo.if`: runs one of two argument-less regions (which use outer
    /// values directly) and yields its results.
    pub fn if_(
        &mut self,
        pred: &Val,
        then_region: String,
        else_region: String,
        results: &[ArraySpec],
    ) -> Vec<Val> {
        self.op(
            "stablehlo.if",
            &[pred],
            &[then_region, else_region],
            &[],
            results,
        )
    }

    /// `stablehlo.while`: `cond_region` and `body_region` take the loop
    /// values as block arguments; the body yields the next values.
    pub fn while_(&mut self, init: &[&Val], cond_region: String, body_region: String) -> Vec<Val> {
        self.size.has_loops = true;
        let types: Vec<ArraySpec> = init.iter().map(|v| v.ty.clone()).collect();
        self.op(
            "stablehlo.while",
            init,
            &[cond_region, body_region],
            &[],
            &types,
        )
    }

    /// `stablehlo.optimization_barrier`: its operands again, as values
    /// XLA may not look through (no CSE across it, nothing moved over it).
    pub fn optimization_barrier(&mut self, xs: &[&Val]) -> Vec<Val> {
        let types: Vec<ArraySpec> = xs.iter().map(|v| v.ty.clone()).collect();
        self.op("stablehlo.optimization_barrier", xs, &[], &[], &types)
    }

    /// `dynamic_slice`: a `sizes` window of `x` starting at run-time
    /// indices (one integer scalar per dimension, clamped into range).
    pub fn dynamic_slice(&mut self, x: &Val, starts: &[&Val], sizes: &[i64]) -> Val {
        let mut operands = vec![x];
        operands.extend_from_slice(starts);
        let out = ArraySpec {
            dtype: x.ty.dtype,
            dims: sizes.to_vec(),
        };
        self.op1(
            "stablehlo.dynamic_slice",
            &operands,
            &[("slice_sizes", i64_array(sizes))],
            out,
        )
    }

    /// `dynamic_update_slice`: `x` with `update` written at run-time
    /// indices (clamped so the update fits).
    pub fn dynamic_update_slice(&mut self, x: &Val, update: &Val, starts: &[&Val]) -> Val {
        let mut operands = vec![x, update];
        operands.extend_from_slice(starts);
        self.op1(
            "stablehlo.dynamic_update_slice",
            &operands,
            &[],
            x.ty.clone(),
        )
    }

    /// The work of what was emitted so far.
    pub fn size(&self) -> ProgramSize {
        self.size
    }
}

/// The error for a lowering that cannot happen with the inferred types; a
/// bug in an op definition rather than in the user's program.
pub fn lowering_bug(op: &str, message: impl Into<String>) -> Error {
    Error::invalid(op, format!("internal lowering error: {}", message.into()))
}
