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
    #[prost(message, repeated, tag = "3")]
    computations: Vec<HloComputationProto>,
    #[prost(message, optional, tag = "12")]
    spmd_output_sharding: Option<OpSharding>,
    #[prost(message, repeated, tag = "14")]
    spmd_parameters_shardings: Vec<OpSharding>,
}

#[derive(Clone, PartialEq, Message)]
struct HloComputationProto {
    #[prost(message, repeated, tag = "2")]
    instructions: Vec<HloInstructionProto>,
}

#[derive(Clone, PartialEq, Message)]
struct HloInstructionProto {
    #[prost(string, tag = "2")]
    opcode: String,
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
            opcodes: module
                .computations
                .iter()
                .flat_map(|c| c.instructions.iter().map(|i| i.opcode.clone()))
                .collect(),
            output_sharding: module.spmd_output_sharding,
            parameter_shardings: module.spmd_parameters_shardings,
        })
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
