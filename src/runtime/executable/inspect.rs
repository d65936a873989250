//! Read-only questions to a compiled program: the program as XLA
//! optimized it, the device memory XLA planned for it and XLA's cost
//! analysis of it. Each asks the loaded executable for its
//! `PJRT_Executable` and destroys it after.

use super::Executable;
use crate::error::Result;
use crate::runtime::sys;
use std::collections::BTreeMap;
use std::ffi::c_char;

impl Executable {
    /// The program as XLA optimized it (after partitioning), as the
    /// plugin serializes it: for XLA plugins an `HloModuleProtoWithConfig`
    /// (format `hlo_with_config`), read by `runtime::hlo`.
    pub fn optimized_program(&self) -> Result<(String, Vec<u8>)> {
        let exe = self.executable()?;
        let result = self.read_optimized_program(exe);
        self.destroy_executable(exe);
        result
    }

    /// The optimized program, decoded: its opcodes and, when partitioned,
    /// its parameter and result shardings.
    pub fn optimized(&self) -> Result<crate::runtime::hlo::OptimizedProgram> {
        let (format, bytes) = self.optimized_program()?;
        crate::runtime::hlo::OptimizedProgram::decode(&format, &bytes)
    }

    fn read_optimized_program(&self, exe: *mut sys::PJRT_Executable) -> Result<(String, Vec<u8>)> {
        let plugin = self.client.plugin();
        let f = plugin.func(
            plugin.api().PJRT_Executable_OptimizedProgram,
            "PJRT_Executable_OptimizedProgram",
        )?;
        let mut program = sys::PJRT_Program {
            struct_size: sys::PJRT_Program_STRUCT_SIZE as usize,
            ..Default::default()
        };
        let mut args = sys::PJRT_Executable_OptimizedProgram_Args {
            struct_size: sys::PJRT_Executable_OptimizedProgram_Args_STRUCT_SIZE as usize,
            executable: exe,
            program: &mut program,
            ..Default::default()
        };
        // SAFETY: first call with a null `code`: the plugin only writes the
        // size it needs (and the format, a static string) into `program`.
        plugin.check(unsafe { f(&mut args) }, "PJRT_Executable_OptimizedProgram")?;
        let mut code = vec![0u8; program.code_size];
        program.code = code.as_mut_ptr().cast::<c_char>();
        // SAFETY: second call: `code` has exactly the `code_size` bytes the
        // first call asked for and outlives the call.
        plugin.check(unsafe { f(&mut args) }, "PJRT_Executable_OptimizedProgram")?;
        // SAFETY: the format is a string of `format_size` bytes owned by
        // the plugin; copied at once.
        let format =
            unsafe { crate::runtime::client::string_from(program.format, program.format_size) };
        code.truncate(program.code_size);
        Ok((format, code))
    }

    /// What XLA planned for this program's device memory
    /// (`PJRT_Executable_GetCompiledMemoryStats`): the sizes of its code,
    /// arguments, results, aliased buffers and temporaries. Temporaries
    /// are where activations saved for a backward pass live, so this is
    /// how rematerialization's saving is measured.
    pub fn memory_stats(&self) -> Result<MemoryStats> {
        let exe = self.executable()?;
        let result = self.read_memory_stats(exe);
        self.destroy_executable(exe);
        result
    }

    fn read_memory_stats(&self, exe: *mut sys::PJRT_Executable) -> Result<MemoryStats> {
        let plugin = self.client.plugin();
        let f = plugin.func(
            plugin.api().PJRT_Executable_GetCompiledMemoryStats,
            "PJRT_Executable_GetCompiledMemoryStats",
        )?;
        let mut args = sys::PJRT_Executable_GetCompiledMemoryStats_Args {
            struct_size: sys::PJRT_Executable_GetCompiledMemoryStats_Args_STRUCT_SIZE as usize,
            executable: exe,
            ..Default::default()
        };
        // SAFETY: `exe` is live until the caller destroys it; the plugin
        // only writes the integer fields of `args`, which we own.
        plugin.check(
            unsafe { f(&mut args) },
            "PJRT_Executable_GetCompiledMemoryStats",
        )?;
        Ok(MemoryStats {
            generated_code_bytes: args.generated_code_size_in_bytes,
            argument_bytes: args.argument_size_in_bytes,
            output_bytes: args.output_size_in_bytes,
            alias_bytes: args.alias_size_in_bytes,
            temp_bytes: args.temp_size_in_bytes,
            peak_bytes: args.peak_memory_in_bytes,
        })
    }
}

impl Executable {
    /// XLA's cost analysis of the optimized program
    /// (`PJRT_Executable_GetCostAnalysis`): its floating-point operations,
    /// transcendental functions and bytes accessed, as the compiler
    /// counts them (JAX's `compiled.cost_analysis()`).
    pub fn cost_analysis(&self) -> Result<CostAnalysis> {
        let exe = self.executable()?;
        let result = self.read_cost_analysis(exe);
        self.destroy_executable(exe);
        result
    }

    fn read_cost_analysis(&self, exe: *mut sys::PJRT_Executable) -> Result<CostAnalysis> {
        let plugin = self.client.plugin();
        let f = plugin.func(
            plugin.api().PJRT_Executable_GetCostAnalysis,
            "PJRT_Executable_GetCostAnalysis",
        )?;
        let mut args = sys::PJRT_Executable_GetCostAnalysis_Args {
            struct_size: sys::PJRT_Executable_GetCostAnalysis_Args_STRUCT_SIZE as usize,
            executable: exe,
            ..Default::default()
        };
        // SAFETY: `exe` is live until the caller destroys it; the plugin
        // writes the count and a pointer to properties it owns.
        plugin.check(unsafe { f(&mut args) }, "PJRT_Executable_GetCostAnalysis")?;
        let mut properties = BTreeMap::new();
        if args.properties.is_null() || args.num_properties == 0 {
            return Ok(CostAnalysis { properties });
        }
        // SAFETY: the plugin wrote `num_properties` values at `properties`,
        // which live as long as `exe`; everything is copied out here.
        let named = unsafe { std::slice::from_raw_parts(args.properties, args.num_properties) };
        for nv in named {
            // SAFETY: `name` is a string of `name_size` bytes owned by the
            // executable (above).
            let name = unsafe { crate::runtime::client::string_from(nv.name, nv.name_size) };
            // SAFETY: the union member read is the one `type_` names.
            let value = unsafe {
                match nv.type_ {
                    t if t == sys::PJRT_NamedValue_kFloat => {
                        f64::from(nv.__bindgen_anon_1.float_value)
                    }
                    t if t == sys::PJRT_NamedValue_kInt64 => nv.__bindgen_anon_1.int64_value as f64,
                    _ => continue,
                }
            };
            properties.insert(name, value);
        }
        Ok(CostAnalysis { properties })
    }
}

/// XLA's cost analysis of a compiled program (see
/// [`Executable::cost_analysis`]). Which properties a plugin reports is its
/// own choice.
///
/// The accessors give `None` where the figure is not known: a property
/// the plugin left out, or an analysis with a negative property. XLA's
/// CUDA backend reports -1 for what it cannot count (the cuBLAS and cuDNN
/// calls its products and convolutions become) and adds those -1s into
/// its totals (measured on an H200: -1 flops for a matmul, and 1151 for a
/// matmul plus an add of 1152 elements), so no total of such an analysis
/// is trusted. The CPU plugin counts everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CostAnalysis {
    /// Every property the plugin reported, by its name (`flops`,
    /// `transcendentals`, `bytes accessed`, `bytes accessed0{}`, ...).
    pub properties: BTreeMap<String, f64>,
}

impl CostAnalysis {
    /// Did the plugin count every operation (no property is negative)?
    pub fn is_complete(&self) -> bool {
        self.properties.values().all(|&v| v >= 0.0)
    }

    fn get(&self, name: &str) -> Option<f64> {
        self.properties
            .get(name)
            .copied()
            .filter(|_| self.is_complete())
    }

    /// Floating-point operations (a multiply-add counts 2).
    pub fn flops(&self) -> Option<f64> {
        self.get("flops")
    }

    /// Transcendental function evaluations (`exp`, `tanh`, `log`, ...).
    /// The CPU plugin leaves the property out when there are none: then 0.
    pub fn transcendentals(&self) -> Option<f64> {
        self.get("transcendentals")
            .or_else(|| (self.is_complete() && self.get("flops").is_some()).then_some(0.0))
    }

    /// Bytes read and written, over all operations.
    pub fn bytes_accessed(&self) -> Option<f64> {
        self.get("bytes accessed")
    }
}

/// A compiled program's device memory, as XLA planned it (bytes; see
/// [`Executable::memory_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// The generated code.
    pub generated_code_bytes: i64,
    /// The arguments.
    pub argument_bytes: i64,
    /// The results.
    pub output_bytes: i64,
    /// Results that reuse (alias) an argument's buffer, counted in both.
    pub alias_bytes: i64,
    /// Temporaries: intermediate values, including the activations a
    /// backward pass keeps.
    pub temp_bytes: i64,
    /// The peak of live memory, where the plugin computes it (0 where it
    /// does not).
    pub peak_bytes: i64,
}
