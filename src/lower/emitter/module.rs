//! The emitter's finishing: the `@main` function with its parameters,
//! results and their attributes (buffer aliasing, shardings), and the
//! module around a partitioned program. Split from `emitter` by size.

use super::{Emitter, Val, tensor_type};
use crate::dtype::ArraySpec;

/// How a partitioned program is split: the partitioner its annotations
/// are written for and the axes of its mesh (declared `@mesh` under
/// Shardy). Plain data: the lowering layer knows no devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partitioning {
    /// GSPMD (`mhlo.sharding` text) rather than Shardy (`sdy` attributes).
    pub gspmd: bool,
    /// The mesh's axes and sizes, major first.
    pub mesh_axes: Vec<(String, usize)>,
}

impl Emitter {
    /// Finishes a `@main` function with the given parameters and results.
    pub fn finish(self, params: &[ArraySpec], results: &[Val]) -> String {
        self.finish_with_aliases(params, &[], results)
    }

    /// Like `finish`, with `aliases` = (parameter, result) pairs whose
    /// buffers XLA may share (`tf.aliasing_output`): the parameter is
    /// donated and the result written into it.
    pub fn finish_with_aliases(
        self,
        params: &[ArraySpec],
        aliases: &[(usize, usize)],
        results: &[Val],
    ) -> String {
        self.finish_annotated(params, aliases, &Annotations::default(), results)
    }

    /// Like `finish_with_aliases`, adding `annotations`' attributes to
    /// the parameters and results (shardings).
    pub fn finish_annotated(
        self,
        params: &[ArraySpec],
        aliases: &[(usize, usize)],
        annotations: &Annotations,
        results: &[Val],
    ) -> String {
        let attributes = |mut attrs: Vec<String>| match attrs.is_empty() {
            true => String::new(),
            false => {
                attrs.sort();
                format!(" {{{}}}", attrs.join(", "))
            }
        };
        let args: Vec<String> = params
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut attrs: Vec<String> = aliases
                    .iter()
                    .filter(|(p, _)| *p == i)
                    .map(|(_, r)| format!("tf.aliasing_output = {r} : i32"))
                    .collect();
                attrs.extend(annotations.params.get(i).filter(|a| !a.is_empty()).cloned());
                format!("%arg{i}: {}{}", tensor_type(t), attributes(attrs))
            })
            .collect();
        let tys: Vec<String> = results.iter().map(|r| tensor_type(&r.ty)).collect();
        let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
        let result_decls: Vec<String> = tys
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let attrs = annotations
                    .results
                    .get(i)
                    .filter(|a| !a.is_empty())
                    .cloned();
                format!("{t}{}", attributes(attrs.into_iter().collect()))
            })
            .collect();
        let ret = if result_decls.len() == 1 && annotations.results.is_empty() {
            result_decls[0].clone()
        } else {
            format!("({})", result_decls.join(", "))
        };
        let main = format!(
            "func.func public @main({}) -> {ret} {{\n{}  \"func.return\"({}) : ({}) -> ()\n}}\n",
            args.join(", "),
            self.body,
            names.join(", "),
            tys.join(", ")
        );
        match &annotations.module_attributes {
            None => main,
            Some(attrs) => format!(
                "module @xlafn attributes {{{attrs}}} {{\n{}{main}}}\n",
                annotations
                    .declarations
                    .iter()
                    .map(|d| format!("{d}\n"))
                    .collect::<String>()
            ),
        }
    }
}

/// Extra attributes for a program's module, parameters and results: how
/// a partitioned program carries its shardings. The lowering layer only
/// places the text; the function layer writes it.
#[derive(Clone, Debug, Default)]
pub struct Annotations {
    /// The module's attributes (`mhlo.num_partitions = 4 : i32, ...`);
    /// `None`: no module wrapper, just `@main`.
    pub module_attributes: Option<String>,
    /// How the program is partitioned (set for every partitioned one).
    pub partitioning: Option<Partitioning>,
    /// Declarations at the top of the module (`sdy.mesh @mesh = ...`).
    pub declarations: Vec<String>,
    /// Per parameter, an attribute such as `sdy.sharding = ...` (empty:
    /// none).
    pub params: Vec<String>,
    /// Per result, likewise.
    pub results: Vec<String>,
}
