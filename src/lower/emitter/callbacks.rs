//! Calls back into the host: a typed-FFI `custom_call` to the runtime's
//! handler. In a partitioned program a side-effecting call needs a
//! sharding (XLA refuses one without: "Side-effect HLO must have
//! sharding"); like JAX's callbacks it runs on the first device, with its
//! operands gathered there whole. Inside a `shard_map` body every device
//! runs it on its own blocks, as the body is per device. Imports `dtype`
//! and `lower`.

use super::Emitter;
use crate::dtype::ArraySpec;
use crate::lower::Val;

impl Emitter {
    /// A typed-FFI `custom_call` to `target` with an integer attribute
    /// `callback_id` in its backend config. With `has_side_effect`, XLA
    /// neither removes nor merges it even when its results are unused.
    pub fn custom_call(
        &mut self,
        target: &str,
        operands: &[&Val],
        callback_id: i64,
        results: &[ArraySpec],
        has_side_effect: bool,
    ) -> Vec<Val> {
        let mut attrs = vec![
            ("call_target_name", format!("\"{target}\"")),
            ("api_version", "4 : i32".to_string()),
            ("has_side_effect", has_side_effect.to_string()),
            (
                "backend_config",
                format!("{{callback_id = {callback_id} : i64}}"),
            ),
        ];
        if let Some(sharding) = self.on_first_device() {
            attrs.push(sharding);
        }
        self.size.has_host_calls = true;
        self.op("stablehlo.custom_call", operands, &[], &attrs, results)
    }

    /// The sharding attribute that puts a callback on the first device of
    /// a partitioned program: GSPMD's `{maximal device=0}`. Programs that
    /// call back outside `shard_map` bodies are partitioned by GSPMD for
    /// this (`function::sharded`); inside a body (per device, Shardy) and
    /// outside partitioned programs nothing is added.
    fn on_first_device(&self) -> Option<(&'static str, String)> {
        let partitioning = self.partitioning.as_ref()?;
        if self.manual_depth > 0 || !partitioning.gspmd {
            return None;
        }
        Some(("mhlo.sharding", "\"{maximal device=0}\"".to_string()))
    }
}
