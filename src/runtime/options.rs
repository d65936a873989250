//! The few fields of XLA's `CompileOptionsProto` that xlafn sets, encoded
//! with prost derive structs (no protoc, no .proto files).
//!
//! An empty `CompileOptionsProto` aborts the CPU plugin (`replica_count > 0`
//! CHECK), so every compile goes through `CompileOptions::encode`, which
//! always writes `num_replicas = 1`, `num_partitions = 1` and
//! `device_ordinal = -1`. Field numbers follow `xla/pjrt/compile_options.proto`
//! and `xla/xla.proto`.

use crate::error::{Error, Result};
use prost::Message;
use std::collections::BTreeMap;

#[derive(Clone, PartialEq, Message)]
struct CompileOptionsProto {
    #[prost(message, optional, tag = "3")]
    executable_build_options: Option<ExecutableBuildOptionsProto>,
    /// Ordered, so that equal options encode to equal bytes: the bytes are
    /// part of the compile cache's key.
    #[prost(btree_map = "string, message", tag = "7")]
    env_option_overrides: BTreeMap<String, OptionOverrideProto>,
}

#[derive(Clone, PartialEq, Message)]
struct ExecutableBuildOptionsProto {
    #[prost(int64, tag = "1")]
    device_ordinal: i64,
    #[prost(int64, tag = "4")]
    num_replicas: i64,
    #[prost(int64, tag = "5")]
    num_partitions: i64,
    #[prost(bool, tag = "6")]
    use_spmd_partitioning: bool,
    // Field 7 (auto-sharding) is never sent: GSPMD ignores it and it aborts
    // the process under Shardy ("auto-partitioner callback wasn't
    // registered").
    #[prost(message, optional, tag = "9")]
    device_assignment: Option<DeviceAssignmentProto>,
    /// Per result: may XLA choose its sharding (the caller gave none)?
    #[prost(bool, repeated, tag = "12")]
    allow_spmd_sharding_propagation_to_output: Vec<bool>,
    #[prost(bool, tag = "19")]
    use_shardy_partitioner: bool,
}

#[derive(Clone, PartialEq, Message)]
struct DeviceAssignmentProto {
    #[prost(int32, tag = "1")]
    replica_count: i32,
    #[prost(int32, tag = "2")]
    computation_count: i32,
    #[prost(message, repeated, tag = "3")]
    computation_devices: Vec<ComputationDevice>,
}

#[derive(Clone, PartialEq, Message)]
struct ComputationDevice {
    #[prost(int64, repeated, tag = "1")]
    replica_device_ids: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct OptionOverrideProto {
    #[prost(string, optional, tag = "1")]
    string_field: Option<String>,
    #[prost(bool, optional, tag = "2")]
    bool_field: Option<bool>,
    #[prost(int64, optional, tag = "3")]
    int_field: Option<i64>,
}

/// What the compile options of one program depend on. The lowering layer
/// measures the program (`lower::ProgramSize`); the runtime never sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgramTraits {
    /// Few result elements and no loop: it runs in microseconds however it
    /// is compiled, so compile time matters most.
    pub light: bool,
    /// A graph of ops without a loop whose every array stays in cache.
    /// Eager single ops say no: there is no chain to run array by array.
    pub small_array_graph: bool,
}

/// Which of XLA's SPMD partitioners splits a program over its devices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Partitioner {
    /// One device: nothing to partition.
    #[default]
    None,
    /// Shardy (`sdy` dialect annotations), XLA's current partitioner.
    Shardy,
    /// GSPMD (`mhlo.sharding` annotations).
    Gspmd,
}

/// What a compile may vary: the target devices and XLA flags.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// The devices the program runs on, by global id, one per partition in
    /// partition order (the device assignment). Empty: the client's first
    /// device.
    pub devices: Vec<i64>,
    /// How a program over several devices is partitioned.
    pub partitioner: Partitioner,
    /// With a partitioner: per result, may XLA choose its sharding (the
    /// caller fixed none)? Empty: none may.
    pub propagate_to_results: Vec<bool>,
    /// XLA flags as `env_option_overrides` (e.g. `xla_dump_to`).
    pub string_flags: Vec<(String, String)>,
    /// Integer-valued XLA flags.
    pub int_flags: Vec<(String, i64)>,
    /// Boolean XLA flags.
    pub bool_flags: Vec<(String, bool)>,
    /// The flags among these that are xlafn's own tuning, not the user's:
    /// a plugin that does not know one (a newer XLA removed
    /// `xla_cpu_use_fusion_emitters`) compiles without it instead of
    /// failing (`Executable::compile`).
    pub optional_flags: Vec<String>,
    /// Per optional flag, the flag that does its job on a plugin that
    /// refuses it (a newer XLA generation): `(refused, (name, value))`.
    pub stand_ins: Vec<(String, (String, String))>,
}

impl CompileOptions {
    /// The options xlafn compiles with on `platform`. On a CPU with
    /// AVX-512, XLA is asked for 512-bit vectors (its default is 256):
    /// elementwise chains ran about a quarter faster in the W2 benchmark.
    ///
    /// On the CPU, XNNPACK's dot and convolution kernels are off
    /// (`xla_cpu_use_xnnpack=false`; Eigen runs them): the pinned XLA lets
    /// them pack a parameter right-hand side once and reuse the packing
    /// while the parameter's buffer keeps its address, which a variable
    /// updated in place does, and a freed buffer's successor may: every
    /// later product then used the old weights, silently
    /// (`tests/products_see_updated_weights.rs`). XNNPACK's graph fusion of small
    /// elementwise programs (`for_program`) captures nothing and stays.
    pub fn for_platform(platform: super::Platform) -> CompileOptions {
        let mut options = CompileOptions::default();
        if platform == super::Platform::Cpu {
            options.add_optional_flags([("xla_cpu_use_xnnpack", "false")]);
        }
        if platform == super::Platform::Cpu && cpu_has_avx512() {
            options.add_optional_flags([("xla_cpu_prefer_vector_width", "512")]);
        }
        options.add_flags(user_flags());
        options
    }

    /// The options for one program on `platform`; on CPU they follow the
    /// program's traits (XLA's defaults elsewhere). `XLAFN_XLA_FLAGS`
    /// still wins over every choice made here.
    ///
    /// - A light program is compiled with XLA's classic emitter instead of
    ///   its fusion emitters: that compiles about a third faster, and a new
    ///   shape of a small function is mostly compile time (W6), while the
    ///   fusion emitters' better loops (W4 ran 3.7x faster with them) only
    ///   pay off on heavier programs. A newer XLA has no classic emitter
    ///   (the 0.115 CPU plugin refuses the flag); there a light program is
    ///   compiled at backend optimization level 0 instead (W6: 1.2-1.4 s
    ///   instead of 1.5-1.8 s on that plugin).
    /// - A graph of small arrays goes through XLA's XNNPACK graph fusion:
    ///   XNNPACK runs the ops one after another over whole arrays, where
    ///   XLA's fused loop runs the whole chain per element and stalls on
    ///   its latency (W2's 50 dependent `tanh`s: 50 µs instead of 80), and
    ///   the compile skips LLVM for those ops (W6 took 0.3 s instead of
    ///   1.1 s, W2's first call 20 ms instead of 85).
    pub fn for_program(platform: super::Platform, traits: ProgramTraits) -> CompileOptions {
        let mut options = CompileOptions::for_platform(platform);
        if platform != super::Platform::Cpu {
            return options;
        }
        let mut chosen = Vec::new();
        if traits.light {
            chosen.push(("xla_cpu_use_fusion_emitters", "false"));
            options.stand_ins.push((
                "xla_cpu_use_fusion_emitters".into(),
                ("xla_backend_optimization_level".into(), "0".into()),
            ));
        }
        if traits.small_array_graph {
            chosen.push((
                "xla_cpu_experimental_xnn_graph_fusion_mode",
                "XNN_GRAPH_FUSION_MODE_GREEDY",
            ));
        }
        let user = user_flags();
        options.add_optional_flags(
            chosen
                .into_iter()
                .filter(|(n, _)| !user.iter().any(|(u, _)| u == n)),
        );
        options
    }

    /// [`add_flags`](Self::add_flags) for xlafn's own tuning: flags a
    /// plugin may not know, dropped for it instead of failing the compile.
    pub fn add_optional_flags<'a>(&mut self, flags: impl IntoIterator<Item = (&'a str, &'a str)>) {
        for (name, value) in flags {
            self.add_flags([(name, value)]);
            if !self.optional_flags.iter().any(|n| n == name) {
                self.optional_flags.push(name.to_string());
            }
        }
    }

    /// These options without flag `name`, which the plugin refused, and
    /// with its stand-in, if it has one and the user did not set that.
    pub(crate) fn without_flag(&self, name: &str) -> CompileOptions {
        let mut options = self.clone();
        options.int_flags.retain(|(n, _)| n != name);
        options.bool_flags.retain(|(n, _)| n != name);
        options.string_flags.retain(|(n, _)| n != name);
        options.optional_flags.retain(|n| n != name);
        let stand_in = options
            .stand_ins
            .iter()
            .position(|(refused, _)| refused == name);
        if let Some(i) = stand_in {
            let (_, (flag, value)) = options.stand_ins.remove(i);
            if !user_flags().iter().any(|(u, _)| *u == flag) {
                options.add_optional_flags([(flag.as_str(), value.as_str())]);
            }
        }
        options
    }

    /// Adds `name=value` XLA flags: integers and `true`/`false` are typed
    /// as such, anything else is a string. A flag given twice keeps the
    /// last value.
    pub fn add_flags<'a>(&mut self, flags: impl IntoIterator<Item = (&'a str, &'a str)>) {
        for (name, value) in flags {
            // Given here, the flag is the caller's choice, not optional.
            self.optional_flags.retain(|n| n != name);
            self.int_flags.retain(|(n, _)| n != name);
            self.bool_flags.retain(|(n, _)| n != name);
            self.string_flags.retain(|(n, _)| n != name);
            if let Ok(i) = value.parse::<i64>() {
                self.int_flags.push((name.into(), i));
            } else if let Ok(b) = value.parse::<bool>() {
                self.bool_flags.push((name.into(), b));
            } else {
                self.string_flags.push((name.into(), value.into()));
            }
        }
    }
}

/// Extra XLA flags from `XLAFN_XLA_FLAGS` (`name=value`, separated by
/// spaces or commas; e.g. `xla_dump_to=/tmp/dump`), read once. XLA rejects
/// an unknown name with a clear error at the first compile; values that
/// would abort or hang XLA instead are refused by [`CompileOptions::check`]
/// (`xla_cpu_parallel_codegen_split_count` must be in `0..=1024`).
fn user_flags() -> Vec<(&'static str, &'static str)> {
    static FLAGS: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    FLAGS
        .get_or_init(|| {
            crate::environment::XLA_FLAGS
                .get()
                .unwrap_or_default()
                .split([' ', ','])
                .filter(|f| !f.is_empty())
                .map(|f| match f.split_once('=') {
                    Some((n, v)) => (n.to_string(), v.to_string()),
                    None => (f.to_string(), "true".to_string()),
                })
                .collect()
        })
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect()
}

fn cpu_has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Integer XLA flags with values that abort or hang the process instead of
/// failing the compile, with the range xlafn lets through. Found by trying
/// each flag's edge values on the pinned plugin: unknown names, mistyped
/// values and out-of-range values of other flags come back as compile
/// errors (or are harmless), so only these need refusing here.
///
/// - `xla_cpu_parallel_codegen_split_count`, `0..=1024`: a negative count
///   aborts XLA (an exception the C API does not catch); a huge one splits
///   the LLVM module into that many parts, so the compile's time and memory
///   grow with it (10^6 took 8 s and 1.9 GB, 2^31 - 1 never finished).
///   XLA's default is 32; 1024 compiles as fast, and more parts than
///   codegen threads gain nothing.
const INT_FLAG_RANGES: &[(&str, std::ops::RangeInclusive<i64>)] =
    &[("xla_cpu_parallel_codegen_split_count", 0..=1024)];

impl CompileOptions {
    /// Errors on flag values known to abort or hang the plugin (today
    /// `xla_cpu_parallel_codegen_split_count` outside 0..=1024); every
    /// compile checks its options first.
    pub fn check(&self) -> Result<()> {
        for (name, value) in &self.int_flags {
            let range = INT_FLAG_RANGES.iter().find(|(n, _)| n == name);
            if let Some((_, range)) = range.filter(|(_, range)| !range.contains(value)) {
                return Err(Error::Value(format!(
                    "XLA flag {name}={value} is refused: it must be in {}..={} \
                     (values outside abort or hang XLA; check XLAFN_XLA_FLAGS)",
                    range.start(),
                    range.end()
                )));
            }
        }
        Ok(())
    }

    /// The number of partitions (devices) the program is compiled for.
    pub fn num_partitions(&self) -> usize {
        self.devices.len().max(1)
    }

    /// Serialises to `CompileOptionsProto` bytes; never empty.
    pub fn encode(&self) -> Vec<u8> {
        let device_assignment = (!self.devices.is_empty()).then(|| DeviceAssignmentProto {
            replica_count: 1,
            computation_count: self.devices.len() as i32,
            computation_devices: self
                .devices
                .iter()
                .map(|&id| ComputationDevice {
                    replica_device_ids: vec![id],
                })
                .collect(),
        });
        let spmd = self.partitioner != Partitioner::None;
        let proto = CompileOptionsProto {
            executable_build_options: Some(ExecutableBuildOptionsProto {
                device_ordinal: -1,
                num_replicas: 1,
                num_partitions: self.num_partitions() as i64,
                use_spmd_partitioning: spmd,
                device_assignment,
                allow_spmd_sharding_propagation_to_output: match spmd {
                    true => self.propagate_to_results.clone(),
                    false => Vec::new(),
                },
                use_shardy_partitioner: self.partitioner == Partitioner::Shardy,
            }),
            env_option_overrides: self.overrides(),
        };
        proto.encode_to_vec()
    }

    fn overrides(&self) -> BTreeMap<String, OptionOverrideProto> {
        let strings = self.string_flags.iter().map(|(k, v)| {
            (
                k.clone(),
                OptionOverrideProto {
                    string_field: Some(v.clone()),
                    ..Default::default()
                },
            )
        });
        let ints = self.int_flags.iter().map(|(k, v)| {
            (
                k.clone(),
                OptionOverrideProto {
                    int_field: Some(*v),
                    ..Default::default()
                },
            )
        });
        let bools = self.bool_flags.iter().map(|(k, v)| {
            (
                k.clone(),
                OptionOverrideProto {
                    bool_field: Some(*v),
                    ..Default::default()
                },
            )
        });
        strings.chain(ints).chain(bools).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_options_encode_the_known_good_bytes() {
        // PJRT-NOTES Q2: `1a 04 20 01 28 01` is the minimum that works; we add
        // device_ordinal = -1 (field 1, varint of -1 as int64: ten bytes).
        let bytes = CompileOptions::default().encode();
        let mut expected = vec![0x1a, 0x0f, 0x08];
        expected.extend([0xff; 9]);
        expected.push(0x01);
        expected.extend([0x20, 0x01, 0x28, 0x01]);
        assert_eq!(bytes, expected);
    }

    #[test]
    fn equal_options_encode_to_equal_bytes_whatever_the_flag_order() {
        let flags = [
            ("a", "1"),
            ("b", "x"),
            ("c", "true"),
            ("d", "2"),
            ("e", "y"),
        ];
        let mut forward = CompileOptions::default();
        forward.add_flags(flags);
        let mut backward = CompileOptions::default();
        backward.add_flags(flags.into_iter().rev());
        assert_eq!(forward.encode(), backward.encode());
        for _ in 0..20 {
            assert_eq!(forward.clone().encode(), forward.encode());
        }
    }

    #[test]
    fn flag_values_known_to_abort_xla_are_refused() {
        let mut o = CompileOptions::default();
        o.add_flags([("xla_cpu_parallel_codegen_split_count", "8")]);
        assert!(o.check().is_ok());
        o.add_flags([("xla_cpu_parallel_codegen_split_count", "-5")]);
        let e = o.check().unwrap_err().to_string();
        assert!(e.contains("xla_cpu_parallel_codegen_split_count=-5"), "{e}");
        o.add_flags([("xla_cpu_parallel_codegen_split_count", "-1")]);
        assert!(o.check().is_err());
    }

    #[test]
    fn flags_are_typed_and_the_last_value_wins() {
        let mut o = CompileOptions::default();
        o.add_flags([("a", "3"), ("b", "true"), ("c", "/tmp/x"), ("a", "false")]);
        assert!(o.int_flags.is_empty(), "{o:?}");
        assert_eq!(o.bool_flags, vec![("b".into(), true), ("a".into(), false)]);
        assert_eq!(o.string_flags, vec![("c".into(), "/tmp/x".into())]);
    }

    #[test]
    fn a_refused_tuning_flag_gives_way_to_its_stand_in() {
        use super::super::Platform;
        let light = ProgramTraits {
            light: true,
            small_array_graph: false,
        };
        let options = CompileOptions::for_program(Platform::Cpu, light);
        let level = ("xla_backend_optimization_level".to_string(), 0);
        assert!(!options.int_flags.contains(&level), "{options:?}");
        // A newer XLA refuses the classic-emitter switch.
        let newer = options.without_flag("xla_cpu_use_fusion_emitters");
        assert!(newer.int_flags.contains(&level), "{newer:?}");
        assert!(newer.optional_flags.iter().any(|f| f == &level.0));
        assert!(
            !newer
                .bool_flags
                .iter()
                .any(|(f, _)| f == "xla_cpu_use_fusion_emitters")
        );
        // Refused in turn, it is dropped with nothing in its place.
        let oldest = newer.without_flag(&level.0);
        assert!(!oldest.int_flags.iter().any(|(f, _)| f == &level.0));
        // Heavier programs have no stand-in to take.
        let heavy = CompileOptions::for_program(Platform::Cpu, ProgramTraits::default());
        assert!(heavy.stand_ins.is_empty());
    }

    #[test]
    fn cpu_options_follow_the_program_traits() {
        use super::super::Platform;
        let classic = ("xla_cpu_use_fusion_emitters".to_string(), false);
        let xnn = (
            "xla_cpu_experimental_xnn_graph_fusion_mode".to_string(),
            "XNN_GRAPH_FUSION_MODE_GREEDY".to_string(),
        );
        let cpu = |light, small_array_graph| {
            CompileOptions::for_program(
                Platform::Cpu,
                ProgramTraits {
                    light,
                    small_array_graph,
                },
            )
        };
        assert!(cpu(true, false).bool_flags.contains(&classic));
        assert!(!cpu(true, false).string_flags.contains(&xnn));
        assert!(!cpu(false, true).bool_flags.contains(&classic));
        assert!(cpu(false, true).string_flags.contains(&xnn));
        let neither = cpu(false, false);
        assert!(neither.bool_flags.iter().all(|(n, _)| n != &classic.0));
        assert!(neither.string_flags.iter().all(|(n, _)| n != &xnn.0));
        let cuda = CompileOptions::for_program(
            Platform::Cuda,
            ProgramTraits {
                light: true,
                small_array_graph: true,
            },
        );
        assert!(!cuda.bool_flags.contains(&classic) && !cuda.string_flags.contains(&xnn));
    }
}
