//! Layer: runtime. What a client's plugin cannot compile, refused before
//! the program reaches it: XLA aborts the process (an uncatchable C++
//! CHECK failure) on some programs that one backend cannot handle.
//! Imports `client`, `ffi`, `error`.

use super::client::{Client, Platform};
use crate::error::{Error, Result};

/// XLA's CUDA backend hands every convolution to cuDNN, which takes at most
/// 3 spatial dimensions; with more, XLA fails a CHECK in its convolution
/// runner and the process aborts (seen on the first GPU run, H200, plugin
/// jax-cuda13-pjrt 0.11.2).
pub const CUDA_MAX_CONV_SPATIAL_DIMS: usize = 3;

/// Errors on what `client` cannot compile in `mlir`: host callbacks
/// without the plugin's FFI handler, and convolutions of more spatial
/// dimensions than its backend takes.
pub(crate) fn check_program(client: &Client, mlir: &str) -> Result<()> {
    if mlir.contains(super::ffi::HOST_CALLBACK_TARGET) && !super::ffi::has_handler(client.plugin())
    {
        return Err(Error::Plugin(format!(
            "this program calls back into Rust (print or host_callback), which is supported only \
             on the CPU plugin; the {} client cannot run it",
            client.platform_name()
        )));
    }
    if client.platform() != Platform::Cuda {
        return Ok(());
    }
    let spatial = max_conv_spatial_dims(mlir);
    if spatial > CUDA_MAX_CONV_SPATIAL_DIMS {
        return Err(Error::invalid(
            "convolution",
            format!(
                "the program has a convolution over {spatial} spatial dimensions; XLA's CUDA \
                 backend (cuDNN) takes at most {CUDA_MAX_CONV_SPATIAL_DIMS}. Run it on the CPU \
                 (XLAFN_DEVICE=cpu) or fold dimensions into the batch"
            ),
        ));
    }
    Ok(())
}

/// The most spatial dimensions of any `stablehlo.convolution` in `mlir`
/// (xlafn's own text, or an export's that passed its program check: the
/// dimension numbers are printed as `input_spatial_dimensions = [1, 2]`).
pub fn max_conv_spatial_dims(mlir: &str) -> usize {
    const KEY: &str = "input_spatial_dimensions = [";
    mlir.match_indices(KEY)
        .map(|(at, _)| {
            let list = &mlir[at + KEY.len()..];
            let list = &list[..list.find(']').unwrap_or(list.len())];
            list.split(',').filter(|d| !d.trim().is_empty()).count()
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spatial_dimensions_are_counted_per_convolution() {
        let two = "#stablehlo.conv<raw input_batch_dimension = 0, input_feature_dimension = 3, \
                   input_spatial_dimensions = [1, 2], kernel_input_feature_dimension = 2";
        let four = "input_spatial_dimensions = [1, 2, 3, 4], kernel";
        assert_eq!(max_conv_spatial_dims(two), 2);
        assert_eq!(max_conv_spatial_dims(&format!("{two}\n{four}\n{two}")), 4);
        assert_eq!(max_conv_spatial_dims("input_spatial_dimensions = []"), 0);
        assert_eq!(max_conv_spatial_dims("stablehlo.add"), 0);
    }
}
