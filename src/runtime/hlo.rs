//! Reading a compiled program back: the few fields of XLA's
//! `HloModuleProto` that say what the optimizer and the SPMD partitioner
//! made of a program, decoded with prost derive structs (unknown fields
//! are skipped). Field numbers follow `xla/service/hlo.proto` and
//! `xla/xla_data.proto`.
//!
//! PJRT C API 0.81 has no call for an executable's output shardings; the
//! optimized program carries them (`spmd_output_sharding`,
//! `spmd_parameters_shardings`), so they are read from here.

use crate::error::{Error, Result};
use prost::Message;

#[derive(Clone, PartialEq, Message)]
struct HloModuleProtoWithConfig {
    #[prost(message, optional, tag = "1")]
    hlo_module: Option<HloModuleProto>,
}

#[derive(Clone, PartialEq, Message)]
struct HloModuleProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(int64, tag = "6")]
    entry_computation_id: i64,
    #[prost(message, repeated, tag = "3")]
    computations: Vec<HloComputationProto>,
    #[prost(message, optional, tag = "12")]
    spmd_output_sharding: Option<OpSharding>,
    #[prost(message, repeated, tag = "14")]
    spmd_parameters_shardings: Vec<OpSharding>,
}

#[derive(Clone, PartialEq, Message)]
struct HloComputationProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, repeated, tag = "2")]
    instructions: Vec<HloInstructionProto>,
    #[prost(int64, tag = "5")]
    id: i64,
    #[prost(int64, tag = "6")]
    root_id: i64,
}

#[derive(Clone, PartialEq, Message)]
struct HloInstructionProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    opcode: String,
    #[prost(message, optional, tag = "3")]
    shape: Option<ShapeProto>,
    #[prost(int64, tag = "9")]
    parameter_number: i64,
    #[prost(int64, tag = "35")]
    id: i64,
    #[prost(int64, repeated, tag = "36")]
    operand_ids: Vec<i64>,
    #[prost(int64, repeated, tag = "38")]
    called_computation_ids: Vec<i64>,
}

/// `xla_data.proto`'s `ShapeProto`: an array's element type and
/// dimensions, or a tuple's element shapes.
#[derive(Clone, PartialEq, Message)]
struct ShapeProto {
    #[prost(int32, tag = "2")]
    element_type: i32,
    #[prost(int64, repeated, tag = "3")]
    dimensions: Vec<i64>,
    #[prost(message, repeated, tag = "4")]
    tuple_shapes: Vec<ShapeProto>,
}

impl ShapeProto {
    /// As HLO text writes it: `f32[2,3]`, `(f32[2], s32[])`.
    fn text(&self) -> String {
        // `xla_data.proto`'s `PrimitiveType` numbers.
        const NAMES: [(i32, &str); 18] = [
            (1, "pred"),
            (2, "s8"),
            (3, "s16"),
            (4, "s32"),
            (5, "s64"),
            (6, "u8"),
            (7, "u16"),
            (8, "u32"),
            (9, "u64"),
            (10, "f16"),
            (11, "f32"),
            (12, "f64"),
            (13, "tuple"),
            (14, "opaque"),
            (15, "c64"),
            (16, "bf16"),
            (17, "token"),
            (18, "c128"),
        ];
        if self.element_type == 13 {
            let parts: Vec<String> = self.tuple_shapes.iter().map(ShapeProto::text).collect();
            return format!("({})", parts.join(", "));
        }
        let name = NAMES
            .iter()
            .find(|(n, _)| *n == self.element_type)
            .map_or_else(
                || format!("type{}", self.element_type),
                |(_, s)| s.to_string(),
            );
        if self.element_type == 17 {
            return name;
        }
        let dims: Vec<String> = self.dimensions.iter().map(i64::to_string).collect();
        format!("{name}[{}]", dims.join(","))
    }
}

/// XLA's description of how an array is split over devices (`OpSharding`).
#[derive(Clone, PartialEq, Message)]
pub struct OpSharding {
    /// REPLICATED = 0, MAXIMAL = 1, TUPLE = 2, OTHER (tiled) = 3, MANUAL = 4.
    #[prost(int32, tag = "1")]
    pub kind: i32,
    /// Tiles per dimension; with `replicate_on_last_tile_dim` or
    /// `last_tile_dims`, trailing entries count replicas, not tiles.
    #[prost(int64, repeated, tag = "3")]
    pub tile_assignment_dimensions: Vec<i64>,
    /// The device (partition) of each tile, row-major over the tile grid;
    /// empty when the iota fields below describe it.
    #[prost(int64, repeated, tag = "4")]
    pub tile_assignment_devices: Vec<i64>,
    /// For a tuple: one sharding per element.
    #[prost(message, repeated, tag = "5")]
    pub tuple_shardings: Vec<OpSharding>,
    /// The last tile dimension counts replicas.
    #[prost(bool, tag = "6")]
    pub replicate_on_last_tile_dim: bool,
    /// Kinds of the trailing tile dimensions beyond the array's rank
    /// (REPLICATED = 0, MANUAL = 1, ...).
    #[prost(int32, repeated, tag = "8")]
    pub last_tile_dims: Vec<i32>,
    /// With `iota_transpose_perm`: the device order is
    /// `iota(prod).reshape(iota_reshape_dims).transpose(perm)`, flattened.
    #[prost(int64, repeated, tag = "9")]
    pub iota_reshape_dims: Vec<i64>,
    /// See `iota_reshape_dims`.
    #[prost(int32, repeated, tag = "10")]
    pub iota_transpose_perm: Vec<i32>,
}

/// What a compiled program looks like after XLA's passes.
#[derive(Clone, Debug, Default)]
pub struct OptimizedProgram {
    module: HloModuleProto,
    /// Every instruction's opcode (`all-reduce`, `dot`, `fusion`, ...),
    /// over all computations.
    pub opcodes: Vec<String>,
    /// The sharding of the entry's result (a tuple sharding for several
    /// results), when the program was partitioned.
    pub output_sharding: Option<OpSharding>,
    /// The shardings of the entry's parameters, when partitioned.
    pub parameter_shardings: Vec<OpSharding>,
}

impl OptimizedProgram {
    /// Decodes the bytes of `Executable::optimized_program` in `format`.
    pub fn decode(format: &str, bytes: &[u8]) -> Result<OptimizedProgram> {
        let module = match format {
            "hlo_with_config" => HloModuleProtoWithConfig::decode(bytes)
                .map_err(|e| Error::Plugin(format!("cannot decode the optimized program: {e}")))?
                .hlo_module
                .unwrap_or_default(),
            "hlo" => HloModuleProto::decode(bytes)
                .map_err(|e| Error::Plugin(format!("cannot decode the optimized program: {e}")))?,
            other => {
                return Err(Error::Plugin(format!(
                    "the plugin returned its optimized program as {other:?}, which xlafn cannot read"
                )));
            }
        };
        Ok(OptimizedProgram {
            module: module.clone(),
            opcodes: module
                .computations
                .iter()
                .flat_map(|c| c.instructions.iter().map(|i| i.opcode.clone()))
                .collect(),
            output_sharding: module.spmd_output_sharding,
            parameter_shardings: module.spmd_parameters_shardings,
        })
    }

    /// The program as text in the shape of XLA's HLO text: each
    /// computation (the entry marked `ENTRY`) with one line per
    /// instruction, `%name = type opcode(%operands)`, its root marked
    /// `ROOT`, and the computations it calls (fusion bodies, loop bodies,
    /// reducers) named. Attributes (layouts, dimension numbers, backend
    /// configurations) are left out: what XLA fused, and into what, is
    /// what the text is for.
    pub fn text(&self) -> String {
        let m = &self.module;
        let name_of = |id: i64| {
            m.computations
                .iter()
                .find(|c| c.id == id)
                .map_or_else(|| format!("computation{id}"), |c| c.name.clone())
        };
        let mut out = format!("HloModule {}\n", m.name);
        for c in &m.computations {
            let entry = if c.id == m.entry_computation_id {
                "ENTRY "
            } else {
                ""
            };
            out.push_str(&format!("\n{entry}%{} {{\n", c.name));
            let instruction_name = |id: i64| {
                c.instructions
                    .iter()
                    .find(|i| i.id == id)
                    .map_or_else(|| format!("%{id}"), |i| format!("%{}", i.name))
            };
            for i in &c.instructions {
                let root = if i.id == c.root_id { "ROOT " } else { "" };
                let operands: Vec<String> = if i.opcode == "parameter" {
                    vec![i.parameter_number.to_string()]
                } else {
                    i.operand_ids.iter().map(|&o| instruction_name(o)).collect()
                };
                let shape = i.shape.as_ref().map(ShapeProto::text).unwrap_or_default();
                out.push_str(&format!(
                    "  {root}%{} = {shape} {}({})",
                    i.name,
                    i.opcode,
                    operands.join(", ")
                ));
                if !i.called_computation_ids.is_empty() {
                    let called: Vec<String> = i
                        .called_computation_ids
                        .iter()
                        .map(|&id| format!("%{}", name_of(id)))
                        .collect();
                    out.push_str(&format!(", calls={}", called.join(", ")));
                }
                out.push('\n');
            }
            out.push_str("}\n");
        }
        out
    }

    /// How many instructions have this opcode.
    pub fn count(&self, opcode: &str) -> usize {
        self.opcodes.iter().filter(|o| *o == opcode).count()
    }

    /// Per result, its sharding (a tuple's elements, or the one sharding).
    pub fn result_shardings(&self) -> Vec<OpSharding> {
        match &self.output_sharding {
            Some(s) if s.kind == TUPLE => s.tuple_shardings.clone(),
            Some(s) => vec![s.clone()],
            None => Vec::new(),
        }
    }
}

/// `OpSharding.kind` of a tuple.
const TUPLE: i32 = 2;
