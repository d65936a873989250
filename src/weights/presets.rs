//! The frameworks' names and layouts for xlafn's built-in layers: the
//! tables behind `Mapping::torch`, `Mapping::flax` and `Mapping::keras`
//! (which also needs the file's names: Keras numbers layers by class, so
//! its table is made per file). Each variable of a
//! built-in layer (path, [`LayerKind`], dims) gets the file tensor names
//! that framework's saver writes for it, and the steps from that layout
//! to xlafn's. Where a framework's module path cannot be told from
//! xlafn's path alone (an `nn.Sequential` has no `layers` segment; a
//! PyTorch `LSTM` holds its stack and both directions in one module),
//! every candidate name is listed; a file has only one of them, and two
//! present at once are refused by the load as two tensors for one
//! variable.
//!
//! Layer: part of `weights`. Imports `variable::LayerKind` and the
//! mapping's types.

use super::mapping::{Combine, Part, Preset, Target, Transform};
use crate::variable::LayerKind;
use std::collections::HashMap;

/// A variable of a built-in layer: path, kind, dims.
type LayerVariable = (String, LayerKind, Vec<i64>);

/// Collects candidate names and their targets.
#[derive(Default)]
struct Table(HashMap<String, Vec<Target>>);

impl Table {
    fn add(&mut self, file_name: String, variable: &str, steps: Vec<Transform>) {
        self.add_part(file_name, variable, steps, None);
    }

    fn add_part(
        &mut self,
        file_name: String,
        variable: &str,
        steps: Vec<Transform>,
        part: Option<Part>,
    ) {
        self.0.entry(file_name).or_default().push(Target {
            variable: variable.to_string(),
            steps,
            part,
        });
    }

    /// A name the framework writes that no variable takes.
    fn skip(&mut self, file_name: String) {
        self.0.entry(file_name).or_default();
    }

    fn into_preset(self, framework: &'static str) -> Preset {
        Preset {
            framework,
            table: self.0,
        }
    }
}

/// `(layer path, leaf name)` of a variable path.
fn split_leaf(path: &str) -> (&str, &str) {
    match path.rfind('.') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// `prefix.name`, or `name` at the top.
fn join(prefix: &str, name: &str) -> String {
    crate::module::join(prefix, name)
}

/// The path, and the path with every `layers.N` segment (xlafn's
/// `Sequential`, `Stacked`) written `N` (PyTorch's `nn.Sequential`).
fn sequential_candidates(path: &str) -> Vec<String> {
    let segments: Vec<&str> = path.split('.').filter(|s| !s.is_empty()).collect();
    let mut collapsed = Vec::with_capacity(segments.len());
    let mut i = 0;
    while i < segments.len() {
        let numbered = segments
            .get(i + 1)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if segments[i] == "layers" && numbered {
            i += 1;
        }
        collapsed.push(segments[i]);
        i += 1;
    }
    let mut out = vec![path.to_string()];
    let collapsed = collapsed.join(".");
    if collapsed != path {
        out.push(collapsed);
    }
    out
}

/// The ways a recurrent cell at `cell` may sit in a PyTorch `LSTM`/`GRU`:
/// `(module path, layer index, reverse)`. A cell inside xlafn's
/// `Stacked` (`.layers.N`) is layer `N` of one PyTorch module; inside
/// `Bidirectional` (`.forward`/`.backward`) a direction of it. The cell
/// as a module of its own (layer 0, forward) is always a candidate.
fn recurrent_candidates(cell: &str) -> Vec<(String, usize, bool)> {
    let mut out = vec![(cell.to_string(), 0, false)];
    let (rest, reverse) = match split_leaf(cell) {
        (parent, "forward") => (parent, false),
        (parent, "backward") => (parent, true),
        _ => (cell, false),
    };
    let (module, layer) = match split_leaf(rest) {
        (parent, n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            match split_leaf(parent) {
                (module, "layers") => (module.to_string(), n.parse().unwrap_or(0)),
                _ => (rest.to_string(), 0),
            }
        }
        _ => (rest.to_string(), 0),
    };
    if (module.as_str(), layer, reverse) != (cell, 0, false) {
        out.push((module, layer, reverse));
    }
    out
}

fn transpose2() -> Transform {
    Transform::Transpose(vec![1, 0])
}

/// A framework's names for the variables it only renames: the
/// embedding table, a norm's scale and offset, a batch norm's statistics.
struct Renames {
    embeddings: &'static str,
    gamma: &'static str,
    beta: &'static str,
    moving_mean: &'static str,
    moving_variance: &'static str,
}

const TORCH_NAMES: Renames = Renames {
    embeddings: "weight",
    gamma: "weight",
    beta: "bias",
    moving_mean: "running_mean",
    moving_variance: "running_var",
};

const FLAX_NAMES: Renames = Renames {
    embeddings: "embedding",
    gamma: "scale",
    beta: "bias",
    moving_mean: "mean",
    moving_variance: "var",
};

/// The framework's name for a variable that is only renamed.
fn renamed(kind: LayerKind, leaf: &str, names: &Renames) -> Option<&'static str> {
    let norm = matches!(
        kind,
        LayerKind::BatchNorm | LayerKind::LayerNorm | LayerKind::GroupNorm | LayerKind::RmsNorm
    );
    match (leaf, kind == LayerKind::BatchNorm) {
        ("embeddings", _) if kind == LayerKind::Embedding => Some(names.embeddings),
        ("gamma", _) if norm => Some(names.gamma),
        ("beta", _) if norm => Some(names.beta),
        ("moving_mean", true) => Some(names.moving_mean),
        ("moving_variance", true) => Some(names.moving_variance),
        _ => None,
    }
}

/// PyTorch's state-dict names (see `Mapping::torch`).
pub(crate) fn torch(variables: &[LayerVariable]) -> Preset {
    let mut table = Table::default();
    for (path, kind, dims) in variables {
        let (layer, leaf) = split_leaf(path);
        match kind {
            LayerKind::Linear
            | LayerKind::Conv
            | LayerKind::ConvTranspose
            | LayerKind::DepthwiseConv
            | LayerKind::Embedding
            | LayerKind::LayerNorm
            | LayerKind::GroupNorm
            | LayerKind::RmsNorm
            | LayerKind::BatchNorm => {
                for torch_layer in sequential_candidates(layer) {
                    torch_plain(&mut table, &torch_layer, path, *kind, leaf, dims);
                }
            }
            LayerKind::Lstm | LayerKind::Gru => {
                for (module, k, reverse) in recurrent_candidates(layer) {
                    for module in sequential_candidates(&module) {
                        torch_recurrent(&mut table, &module, k, reverse, path, *kind, leaf, dims);
                    }
                }
            }
            LayerKind::AttentionInput | LayerKind::AttentionOutput => {
                let (attention, projection) = split_leaf(layer);
                for module in sequential_candidates(attention) {
                    torch_attention(&mut table, &module, projection, path, leaf, dims);
                }
            }
        }
    }
    table.into_preset("PyTorch")
}

/// A layer whose PyTorch module has `weight` and `bias`.
fn torch_plain(
    table: &mut Table,
    module: &str,
    path: &str,
    kind: LayerKind,
    leaf: &str,
    dims: &[i64],
) {
    let name = |n: &str| join(module, n);
    if let Some(renamed) = renamed(kind, leaf, &TORCH_NAMES) {
        table.add(name(renamed), path, vec![]);
        if (kind, leaf) == (LayerKind::BatchNorm, "moving_variance") {
            table.skip(name("num_batches_tracked"));
        }
        return;
    }
    match (kind, leaf) {
        // Depthwise: `[in * m, 1, k..]`, output channel `i * m + j`.
        (LayerKind::DepthwiseConv, "kernel") if dims.len() >= 3 => {
            let n = dims.len();
            let (channels, multiplier) = (dims[n - 2], dims[n - 1]);
            let mut torch_dims = vec![channels, multiplier];
            torch_dims.extend(&dims[..n - 2]);
            let mut perm: Vec<i64> = (2..n as i64).collect();
            perm.extend([0, 1]);
            let steps = vec![Transform::Reshape(torch_dims), Transform::Transpose(perm)];
            table.add(name("weight"), path, steps);
        }
        // `[out, in, k..]` (Linear, Conv) and `[in, out, k..]`
        // (ConvTranspose) both become xlafn's by the same permutation.
        (_, "kernel") => table.add(name("weight"), path, vec![Transform::TorchKernel]),
        (_, leaf) => table.add(name(leaf), path, vec![]),
    }
}

/// A cell of a PyTorch `LSTM` or `GRU` module at `module`: layer `k`,
/// `reverse` for the backward direction.
#[allow(clippy::too_many_arguments)]
fn torch_recurrent(
    table: &mut Table,
    module: &str,
    k: usize,
    reverse: bool,
    path: &str,
    kind: LayerKind,
    leaf: &str,
    dims: &[i64],
) {
    let suffix = if reverse { "_reverse" } else { "" };
    let name = |n: &str| join(module, &format!("{n}_l{k}{suffix}"));
    // PyTorch's GRU gates are r, z, n; xlafn's (Keras') z, r, h.
    let gates = match kind {
        LayerKind::Gru => vec![Transform::ReorderBlocks {
            axis: 0,
            order: vec![1, 0, 2],
        }],
        _ => vec![],
    };
    let with = |more: Vec<Transform>| gates.iter().cloned().chain(more).collect::<Vec<_>>();
    match leaf {
        "kernel" => table.add(name("weight_ih"), path, with(vec![transpose2()])),
        "recurrent_kernel" => table.add(name("weight_hh"), path, with(vec![transpose2()])),
        "bias" => {
            // An LSTM's two biases are only ever added; a GRU's recurrent
            // bias sits inside the reset gate, which xlafn's `reset_after`
            // layout (`[2, 3u]`) keeps apart. Without `reset_after` there is
            // no place for it: the biases stay unmapped and the load says so.
            let combine = match (kind, dims.len()) {
                (LayerKind::Lstm, _) => Combine::Sum,
                (LayerKind::Gru, 2) => Combine::Stack,
                _ => return,
            };
            for (slot, n) in ["bias_ih", "bias_hh"].into_iter().enumerate() {
                let part = Part {
                    combine,
                    slot,
                    of: 2,
                };
                table.add_part(name(n), path, with(vec![]), Some(part));
            }
        }
        _ => {}
    }
}

/// A projection of a PyTorch `MultiheadAttention` at `module`: the
/// query, key and value rows of `in_proj_weight` (or the separate
/// `q_proj_weight`.. when key and value sizes differ), `out_proj`.
fn torch_attention(
    table: &mut Table,
    module: &str,
    projection: &str,
    path: &str,
    leaf: &str,
    dims: &[i64],
) {
    let name = |n: &str| join(module, n);
    let index = match projection {
        "query" => 0,
        "key" => 1,
        "value" => 2,
        "output" => {
            match leaf {
                // `[features, heads * dim]` to `[heads, dim, features]`.
                "kernel" => table.add(
                    name("out_proj.weight"),
                    path,
                    vec![transpose2(), Transform::Reshape(dims.to_vec())],
                ),
                _ => table.add(name("out_proj.bias"), path, vec![]),
            }
            return;
        }
        _ => return,
    };
    let rows: i64 = dims[dims.len().saturating_sub(2)..].iter().product();
    let cut = Transform::Slice {
        axis: 0,
        start: index * rows,
        len: rows,
    };
    match leaf {
        // `[heads * dim, features]` to `[features, heads, dim]`.
        "kernel" => {
            let steps = vec![transpose2(), Transform::Reshape(dims.to_vec())];
            let mut fused = vec![cut.clone()];
            fused.extend(steps.clone());
            table.add(name("in_proj_weight"), path, fused);
            let own = ["q_proj_weight", "k_proj_weight", "v_proj_weight"][index as usize];
            table.add(name(own), path, steps);
        }
        _ => {
            let steps = vec![cut, Transform::Reshape(dims.to_vec())];
            table.add(name("in_proj_bias"), path, steps);
        }
    }
}

/// Flax's parameter names, flattened with `.` (see `Mapping::flax`).
pub(crate) fn flax(variables: &[LayerVariable]) -> Preset {
    let mut table = Table::default();
    for (path, kind, dims) in variables {
        let (layer, leaf) = split_leaf(path);
        for collection in ["", "params", "batch_stats"] {
            let layer = join(collection, layer);
            flax_variable(&mut table, &layer, path, *kind, leaf, dims);
        }
    }
    table.into_preset("Flax")
}

fn flax_variable(
    table: &mut Table,
    module: &str,
    path: &str,
    kind: LayerKind,
    leaf: &str,
    dims: &[i64],
) {
    let name = |n: &str| join(module, n);
    if let Some(renamed) = renamed(kind, leaf, &FLAX_NAMES) {
        table.add(name(renamed), path, vec![]);
        return;
    }
    match (kind, leaf) {
        // Flax's `ConvTranspose` kernel `[k.., in, out]` is not flipped:
        // xlafn's (Keras') is the forward convolution's, flipped.
        (LayerKind::ConvTranspose, "kernel") if dims.len() >= 3 => {
            let n = dims.len() as i64;
            let mut perm: Vec<i64> = (0..n - 2).collect();
            perm.extend([n - 1, n - 2]);
            let steps = vec![
                Transform::Flip((0..n - 2).collect()),
                Transform::Transpose(perm),
            ];
            table.add(name("kernel"), path, steps);
        }
        // The cell itself, or an `nn.RNN` holding it as `cell`.
        (LayerKind::Lstm, _) => {
            flax_lstm(table, module, path, leaf);
            flax_lstm(table, &join(module, "cell"), path, leaf);
        }
        (LayerKind::AttentionOutput, leaf) => {
            // Flax calls the output projection `out`.
            let (attention, _) = split_leaf(module);
            table.add(join(&join(attention, "out"), leaf), path, vec![]);
        }
        (_, leaf) => table.add(name(leaf), path, vec![]),
    }
}

/// Flax's `LSTMCell`/`OptimizedLSTMCell`: a dense layer per gate, the
/// input ones (`ii`, `if`, `ig`, `io`) without bias, the hidden ones
/// (`hi`..`ho`) with; gates in xlafn's order i, f, c, o.
fn flax_lstm(table: &mut Table, module: &str, path: &str, leaf: &str) {
    let (gates, param) = match leaf {
        "kernel" => (["ii", "if", "ig", "io"], "kernel"),
        "recurrent_kernel" => (["hi", "hf", "hg", "ho"], "kernel"),
        "bias" => (["hi", "hf", "hg", "ho"], "bias"),
        _ => return,
    };
    let axis = if param == "bias" { 0 } else { 1 };
    for (slot, gate) in gates.into_iter().enumerate() {
        let part = Part {
            combine: Combine::Concat(axis),
            slot,
            of: 4,
        };
        let file_name = join(&join(module, gate), param);
        table.add_part(file_name, path, vec![], Some(part));
    }
}

/// Keras 3's name stem for a layer class, and the order its variables
/// are created in (the `vars/N` numbering).
fn keras_class(kind: LayerKind, kernel_rank: usize) -> (String, &'static [&'static str]) {
    const KERNEL: &[&str] = &["kernel", "bias"];
    const RECURRENT: &[&str] = &["kernel", "recurrent_kernel", "bias"];
    const NORM: &[&str] = &["gamma", "beta"];
    let spatial = kernel_rank.saturating_sub(2);
    match kind {
        LayerKind::Linear => ("dense".into(), KERNEL),
        LayerKind::Conv => (format!("conv{spatial}d"), KERNEL),
        LayerKind::ConvTranspose => (format!("conv{spatial}d_transpose"), KERNEL),
        LayerKind::DepthwiseConv => (format!("depthwise_conv{spatial}d"), KERNEL),
        LayerKind::Embedding => ("embedding".into(), &["embeddings"]),
        LayerKind::BatchNorm => (
            "batch_normalization".into(),
            &["gamma", "beta", "moving_mean", "moving_variance"],
        ),
        LayerKind::LayerNorm => ("layer_normalization".into(), NORM),
        LayerKind::GroupNorm => ("group_normalization".into(), NORM),
        LayerKind::RmsNorm => ("rms_normalization".into(), &["gamma"]),
        LayerKind::Lstm => ("lstm".into(), RECURRENT),
        LayerKind::Gru => ("gru".into(), RECURRENT),
        LayerKind::AttentionInput | LayerKind::AttentionOutput => {
            ("multi_head_attention".into(), KERNEL)
        }
    }
}

/// A Keras layer as xlafn holds it: `path` is the xlafn layer (an
/// attention layer, not its projections; a `Bidirectional`, not its
/// directions), `inner` the sub-object Keras keeps the variables in
/// (`cell`, `forward_layer/cell`, `query_dense`), each variable's leaf.
struct KerasVariable<'a> {
    layer: String,
    stem: String,
    inner: String,
    order: &'static [&'static str],
    leaf: &'a str,
    variable: &'a str,
}

/// `kernel_rank`: the rank of the layer's kernel (a convolution's class
/// is named by it: `conv1d`, `conv2d`).
fn keras_variable(path: &str, kind: LayerKind, kernel_rank: usize) -> KerasVariable<'_> {
    let (layer, leaf) = split_leaf(path);
    let (mut stem, order) = keras_class(kind, kernel_rank);
    let (layer, inner) = match kind {
        LayerKind::AttentionInput | LayerKind::AttentionOutput => {
            let (attention, projection) = split_leaf(layer);
            (attention, format!("{projection}_dense"))
        }
        LayerKind::Lstm | LayerKind::Gru => match split_leaf(layer) {
            (parent, direction @ ("forward" | "backward")) => {
                stem = "bidirectional".into();
                (parent, format!("{direction}_layer/cell"))
            }
            _ => (layer, "cell".to_string()),
        },
        _ => (layer, String::new()),
    };
    KerasVariable {
        layer: layer.to_string(),
        stem,
        inner,
        order,
        leaf,
        variable: path,
    }
}

/// Where Keras keeps the layers of an xlafn layer at `layer`: a layer
/// at `X.N` (xlafn's `Sequential`, a `Vec` field) is one of the layers
/// Keras lists under `X` by name; any other is both an attribute at its
/// own path (a subclassed model) and one of a functional model's
/// `layers`.
fn keras_container(layer: &str) -> (String, bool) {
    match split_leaf(layer) {
        (parent, n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            (parent.replace('.', "/"), true)
        }
        _ => ("layers".to_string(), false),
    }
}

/// The file's layers under `container` named `stem`, `stem_1`, `stem_2`
/// (Keras' automatic names), in number order.
fn keras_numbered(file_names: &[String], container: &str, stem: &str) -> Vec<String> {
    let mut found: Vec<(u64, String)> = Vec::new();
    let prefix = format!("{container}/");
    for name in file_names {
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        let segment = rest.split('/').next().unwrap_or("");
        let number = match segment.strip_prefix(stem) {
            Some("") => Some(0),
            Some(tail) => tail
                .strip_prefix('_')
                .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|d| d.parse::<u64>().ok()),
            None => None,
        };
        if let Some(n) = number
            && !found.iter().any(|(_, s)| s == segment)
        {
            found.push((n, segment.to_string()));
        }
    }
    found.sort();
    found.into_iter().map(|(_, s)| s).collect()
}

/// Keras 3's names (see `Mapping::keras`), for the file whose tensor
/// names are `file_names`.
pub(crate) fn keras(variables: &[LayerVariable], file_names: &[String]) -> Preset {
    let kernel_ranks: HashMap<&str, usize> = variables
        .iter()
        .filter_map(|(path, _, dims)| match split_leaf(path) {
            (layer, "kernel") => Some((layer, dims.len())),
            _ => None,
        })
        .collect();
    let keras: Vec<KerasVariable> = variables
        .iter()
        .map(|(path, kind, _)| {
            let rank = kernel_ranks.get(split_leaf(path).0).copied().unwrap_or(0);
            keras_variable(path, *kind, rank)
        })
        .collect();
    // Each xlafn layer's place among the layers of its class in its
    // container, in the module's order.
    let mut ranks: HashMap<(String, String), Vec<String>> = HashMap::new();
    for v in &keras {
        let (container, _) = keras_container(&v.layer);
        let seen = ranks.entry((container, v.stem.clone())).or_default();
        if !seen.contains(&v.layer) {
            seen.push(v.layer.clone());
        }
    }
    let mut numbered: HashMap<(String, String), Vec<String>> = HashMap::new();
    let mut table = Table::default();
    for v in &keras {
        let (container, in_list) = keras_container(&v.layer);
        let key = (container.clone(), v.stem.clone());
        let rank = ranks[&key].iter().position(|l| *l == v.layer).unwrap_or(0);
        let names = numbered
            .entry(key)
            .or_insert_with(|| keras_numbered(file_names, &container, &v.stem));
        let mut groups: Vec<String> = Vec::new();
        if let Some(name) = names.get(rank) {
            groups.push(format!("{container}/{name}"));
        }
        if !in_list {
            groups.push(v.layer.replace('.', "/"));
        }
        // The variable's number: its place among the variables this
        // layer has, in Keras' order.
        let present = |leaf: &str| {
            keras.iter().any(|o| {
                o.layer == v.layer && o.inner == v.inner && o.leaf == leaf && o.stem == v.stem
            })
        };
        let Some(at) = v.order.iter().position(|l| *l == v.leaf) else {
            continue;
        };
        let index = v.order[..at].iter().filter(|l| present(l)).count();
        for group in groups {
            let mut name = group;
            if !v.inner.is_empty() {
                name = format!("{name}/{}", v.inner);
            }
            let name = match name.is_empty() {
                true => format!("vars/{index}"),
                false => format!("{name}/vars/{index}"),
            };
            table.add(name, v.variable, vec![]);
        }
    }
    // The optimizer's state a whole-model file carries.
    for name in file_names {
        if name.starts_with("optimizer/") {
            table.skip(name.clone());
        }
    }
    table.into_preset("Keras")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keras_names_of_a_class_are_taken_in_number_order() {
        let names: Vec<String> = [
            "layers/dense_10/vars/0",
            "layers/dense/vars/0",
            "layers/dense_2/vars/1",
            "layers/dense_2/vars/0",
            "layers/dense_x/vars/0",
            "layers/conv2d_transpose/vars/0",
            "blocks/dense_1/vars/0",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            keras_numbered(&names, "layers", "dense"),
            ["dense", "dense_2", "dense_10"]
        );
        assert!(keras_numbered(&names, "layers", "conv2d").is_empty());
        assert_eq!(keras_numbered(&names, "blocks", "dense"), ["dense_1"]);
        assert_eq!(keras_container("layers.3"), ("layers".to_string(), true));
        assert_eq!(keras_container("enc.fc"), ("layers".to_string(), false));
    }

    #[test]
    fn sequential_and_stacked_paths_have_their_pytorch_spellings() {
        assert_eq!(sequential_candidates("layers.0"), ["layers.0", "0"]);
        assert_eq!(
            sequential_candidates("enc.layers.2.conv"),
            ["enc.layers.2.conv", "enc.2.conv"]
        );
        assert_eq!(sequential_candidates("fc"), ["fc"]);
        assert_eq!(
            recurrent_candidates("rnn.layers.1.backward"),
            [
                ("rnn.layers.1.backward".to_string(), 0, false),
                ("rnn".to_string(), 1, true)
            ]
        );
        assert_eq!(
            recurrent_candidates("rnn.forward"),
            [
                ("rnn.forward".to_string(), 0, false),
                ("rnn".to_string(), 0, false)
            ]
        );
        assert_eq!(
            recurrent_candidates("lstm"),
            [("lstm".to_string(), 0, false)]
        );
    }
}
