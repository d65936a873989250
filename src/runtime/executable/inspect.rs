//! Read-only questions to a compiled program: the program as XLA
//! optimized it and the device memory XLA planned for it. Each asks the
//! loaded executable for its `PJRT_Executable` and destroys it after.

use super::Executable;
use crate::error::Result;
use crate::runtime::sys;
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
