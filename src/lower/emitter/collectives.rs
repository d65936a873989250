//! The emitter's partitioned-program ops: sharding constraints, Shardy's
//! manual computation (the body of a `shard_map`) and the StableHLO
//! collectives its body uses. Split from `emitter` by size; it uses the parent module's private
//! printer (`op`, `op1`, `region_ending`).

use super::{Combiner, Emitter, Val};
use crate::dtype::{ArraySpec, DType};
use crate::error::Result;

/// The Shardy attributes of a manual computation, already written out.
#[derive(Clone, Debug)]
pub struct ManualShardings {
    /// `#sdy.sharding_per_value<[...]>` for the operands.
    pub inputs: String,
    /// The same for the results.
    pub outputs: String,
    /// `#sdy<manual_axes{"a", ...}>`.
    pub manual_axes: String,
}

impl Emitter {
    /// `sdy.manual_computation`: `body` runs once per device on its local
    /// blocks (`local` are their types) and returns local results, which
    /// come back as the `global` results.
    pub fn manual_computation(
        &mut self,
        operands: &[&Val],
        shardings: &ManualShardings,
        local: &[ArraySpec],
        global: &[ArraySpec],
        body: impl FnOnce(&mut Emitter, &[Val]) -> Result<Vec<Val>>,
    ) -> Result<Vec<Val>> {
        self.manual_depth += 1;
        let region = self.region_ending("sdy.return", local, body);
        self.manual_depth -= 1;
        let region = region?;
        let attrs = [
            ("in_shardings", shardings.inputs.clone()),
            ("out_shardings", shardings.outputs.clone()),
            ("manual_axes", shardings.manual_axes.clone()),
        ];
        Ok(self.op(
            "sdy.manual_computation",
            operands,
            &[region],
            &attrs,
            global,
        ))
    }

    /// The collectives' common attributes: a fresh channel and the groups
    /// of partitions (`use_global_device_ids`: ids are partition numbers).
    fn collective_attrs(&mut self, groups: &[Vec<i64>]) -> Vec<(&'static str, String)> {
        self.channels += 1;
        let rows: Vec<String> = groups
            .iter()
            .map(|g| {
                let ids: Vec<String> = g.iter().map(i64::to_string).collect();
                format!("[{}]", ids.join(", "))
            })
            .collect();
        let width = groups.first().map_or(0, Vec::len);
        vec![
            (
                "channel_handle",
                format!(
                    "#stablehlo.channel_handle<handle = {}, type = 1>",
                    self.channels
                ),
            ),
            (
                "replica_groups",
                format!(
                    "dense<[{}]> : tensor<{}x{}xi64>",
                    rows.join(", "),
                    groups.len(),
                    width
                ),
            ),
            ("use_global_device_ids", "unit".to_string()),
        ]
    }

    /// `all_reduce` of `x` over each group of partitions with `combiner`.
    pub fn all_reduce(&mut self, x: &Val, groups: &[Vec<i64>], combiner: Combiner) -> Result<Val> {
        let scalar = ArraySpec::scalar(x.ty.dtype);
        let region = self.region(&[scalar.clone(), scalar], |cx, args| {
            Ok(vec![cx.binary(combiner.op_name(), &args[0], &args[1])])
        })?;
        let attrs = self.collective_attrs(groups);
        Ok(self
            .op(
                "stablehlo.all_reduce",
                &[x],
                &[region],
                &attrs,
                std::slice::from_ref(&x.ty),
            )
            .remove(0))
    }

    /// `all_gather` of `x` along `dim` over each group, into `out`.
    pub fn all_gather(&mut self, x: &Val, dim: usize, groups: &[Vec<i64>], out: ArraySpec) -> Val {
        let mut attrs = self.collective_attrs(groups);
        attrs.push(("all_gather_dim", format!("{dim} : i64")));
        self.op1("stablehlo.all_gather", &[x], &attrs, out)
    }

    /// `reduce_scatter` of `x` along `dim` over each group, summing.
    pub fn reduce_scatter(
        &mut self,
        x: &Val,
        dim: usize,
        groups: &[Vec<i64>],
        out: ArraySpec,
    ) -> Result<Val> {
        let scalar = ArraySpec::scalar(x.ty.dtype);
        let region = self.region(&[scalar.clone(), scalar], |cx, args| {
            Ok(vec![cx.binary("add", &args[0], &args[1])])
        })?;
        let mut attrs = self.collective_attrs(groups);
        attrs.push(("scatter_dimension", format!("{dim} : i64")));
        Ok(self
            .op("stablehlo.reduce_scatter", &[x], &[region], &attrs, &[out])
            .remove(0))
    }

    /// `all_to_all`: each device cuts `x` into as many blocks along
    /// `split` as its group has devices, sends block `i` to the group's
    /// `i`-th device, and concatenates what it receives along `concat`.
    pub fn all_to_all(
        &mut self,
        x: &Val,
        split: usize,
        concat: usize,
        groups: &[Vec<i64>],
        out: ArraySpec,
    ) -> Val {
        let count = groups.first().map_or(1, Vec::len);
        let mut attrs = self.collective_attrs(groups);
        attrs.push(("split_dimension", format!("{split} : i64")));
        attrs.push(("concat_dimension", format!("{concat} : i64")));
        attrs.push(("split_count", format!("{count} : i64")));
        self.op1("stablehlo.all_to_all", &[x], &attrs, out)
    }

    /// `collective_permute`: partition `from` sends its `x` to `to`, for
    /// each pair; partitions no one sends to get zeros.
    pub fn collective_permute(&mut self, x: &Val, pairs: &[(i64, i64)]) -> Val {
        self.channels += 1;
        let rows: Vec<String> = pairs.iter().map(|(a, b)| format!("[{a}, {b}]")).collect();
        let attrs = [
            (
                "channel_handle",
                format!(
                    "#stablehlo.channel_handle<handle = {}, type = 1>",
                    self.channels
                ),
            ),
            (
                "source_target_pairs",
                format!(
                    "dense<[{}]> : tensor<{}x2xi64>",
                    rows.join(", "),
                    pairs.len()
                ),
            ),
        ];
        self.op1("stablehlo.collective_permute", &[x], &attrs, x.ty.clone())
    }

    /// `x` constrained to a sharding (`with_sharding_constraint`), given as
    /// the attribute text of the program's partitioner: a
    /// `#sdy.sharding<...>` under Shardy, an `mhlo.sharding` string under
    /// GSPMD.
    pub fn sharding_constraint(&mut self, x: &Val, sharding: &str) -> Val {
        let gspmd = self.partitioning.as_ref().is_some_and(|p| p.gspmd);
        if gspmd {
            let attrs = [
                ("call_target_name", "\"Sharding\"".to_string()),
                ("mhlo.sharding", format!("\"{sharding}\"")),
            ];
            return self.op1("stablehlo.custom_call", &[x], &attrs, x.ty.clone());
        }
        let attrs = [("sharding", sharding.to_string())];
        self.op1("sdy.sharding_constraint", &[x], &attrs, x.ty.clone())
    }

    /// This partition's number, as an `i32` scalar.
    pub fn partition_id(&mut self) -> Val {
        let id = self.op1(
            "stablehlo.partition_id",
            &[],
            &[],
            ArraySpec::scalar(DType::U32),
        );
        self.convert(&id, DType::I32)
    }
}
