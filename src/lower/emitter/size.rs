//! Layer: lowering. What an emitted program holds, measured as it is
//! written: its result elements, its largest array, whether it loops,
//! calls back into Rust or holds products. The compile options are chosen
//! from it (`runtime::ProgramTraits`), and the size checks that keep an
//! oversized program from reaching XLA read it. Imports nothing from the
//! crate.

/// How much work a program does, roughly: the elements all its ops
/// produce, its largest array, and whether it loops (then the count says
/// little). Compile options are chosen by it (`runtime::ProgramTraits`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgramSize {
    pub result_elements: u64,
    /// The most elements of any one parameter or op result.
    pub largest_array: u64,
    /// The highest rank of any parameter or op result.
    pub largest_rank: usize,
    /// Holds a `dot_general` or a `convolution`.
    pub has_contractions: bool,
    /// Holds an f16 or bf16 array.
    pub has_half_floats: bool,
    pub has_loops: bool,
    /// Calls back into Rust (`print`, host callbacks).
    pub has_host_calls: bool,
    /// The bytes of the largest parameter or op result.
    pub largest_bytes: u64,
    /// The bytes of every parameter and op result together (a region's
    /// body counted once): what the program would hold if XLA fused and
    /// freed nothing (`dtype::check_program_memory`).
    pub total_bytes: u64,
}

impl ProgramSize {
    /// Below this many result elements (and without loops) a program runs
    /// in microseconds however XLA compiles it, so compile time matters
    /// more than code quality.
    const LIGHT_ELEMENTS: u64 = 1 << 14;

    /// Arrays up to this many elements (256 KiB of f32) stay in the L2
    /// cache, so running a graph op by op over whole arrays costs no
    /// memory traffic; beyond it one fused pass per element wins (W8).
    const SMALL_ARRAY_ELEMENTS: u64 = 1 << 16;

    /// XNNPACK's tensors have at most 6 dimensions. The pinned XLA still
    /// hands it higher-rank ops (a rank-8 `reduce` compiled, then failed
    /// every run with "XNNPACK operation failed: unsupported parameter"),
    /// so programs with a higher rank stay on XLA's own code.
    const XNN_MAX_RANK: usize = 6;

    pub fn is_light(&self) -> bool {
        !self.has_loops && self.result_elements <= Self::LIGHT_ELEMENTS
    }

    /// No loop, no call back into Rust, no dot or convolution, and no
    /// array over `SMALL_ARRAY_ELEMENTS` or above rank 6. Dots are left
    /// out because XLA's own code ran a small transformer faster: W9 at
    /// batch 2 (every array within 64K elements) took 5.21 ms per training
    /// step through XNNPACK and 3.64 ms without, its forward 1.37 and 1.11.
    /// Half-precision programs are left out too: an f16
    /// `scatter` compiled there failed with "Fusion kind not implemented
    /// on CPU". (The runtime runs such programs one at a
    /// time, see `runtime::Executable`; a callback that ran another of them
    /// would wait for itself.)
    pub fn has_only_small_arrays(&self) -> bool {
        !self.has_loops
            && !self.has_host_calls
            && !self.has_contractions
            && !self.has_half_floats
            && self.largest_array <= Self::SMALL_ARRAY_ELEMENTS
            && self.largest_rank <= Self::XNN_MAX_RANK
    }
}
