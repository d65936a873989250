//! `device_tests!`: one test body, a CPU and a CUDA variant.
//!
//! `name::cpu` runs the body on the default client (the CPU, unless
//! `XLAFN_DEVICE` says otherwise). `name::cuda` reruns `name::cpu` in a
//! child process with `XLAFN_DEVICE=cuda`; it is ignored unless the build
//! named a CUDA plugin (`XLAFN_CUDA_PLUGIN`, which sets `cfg(xlafn_cuda)`).
//! `XLAFN_DEVICE=cuda cargo test` runs every test of the suite on the GPU
//! directly; this macro runs both in one CPU run of a GPU machine.
//!
//! Use with `#[path = "common/child.rs"] mod child;` in the test file.

#[macro_export]
macro_rules! device_tests {
    ($($(#[$meta:meta])* fn $name:ident() $body:block)*) => {$(
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[test]
            fn cpu() $body

            #[test]
            #[cfg_attr(
                not(xlafn_cuda),
                ignore = "needs a GPU: build with XLAFN_CUDA_PLUGIN naming a CUDA PJRT plugin"
            )]
            fn cuda() {
                let name = concat!(stringify!($name), "::cpu");
                let run = super::child::assert_child_passes(
                    name,
                    &[("XLAFN_DEVICE", "cuda")],
                    std::time::Duration::from_secs(600),
                );
                assert!(run.stdout.contains("1 passed"), "{name} did not run:\n{}", run.stdout);
            }
        }
    )*};
}
