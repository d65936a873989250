//! Layer: control. Loop-invariant products hoisted out of a traced loop
//! body: a body that reads row `j` of a captured array `C` `[T, B, I]`
//! (a `TensorArray` read: `dynamic_slice` at `[j, 0, 0]`, then a reshape
//! to `[B, I]`) and multiplies it by a captured matrix `W` runs `T` small
//! products, and its gradient `T` more for `W`. The same values come
//! from one product `P = C W` `[T, B, O]` made before the loop, the body
//! reading its row `j` instead: `dynamic_slice` clamps `j` the same way
//! in `C` and in `P`, so the body computes what it did for every `j`. The
//! gradient then accumulates `P`'s rows in the loop (an in-place add of
//! one row per step) and makes `W`'s gradient with one product after it.
//!
//! This is an RNN's input projection written the way the guide writes
//! loops over data. Only loops with a count known at trace time are
//! rewritten, only when the loop runs at least half of `C`'s rows (the
//! product computes them all) and `P` fits the loop gradient's state
//! budget, and only when the product's inner size `I` is at least half its
//! width `O`. Measured on the CPU plugin (2 cores, training steps of
//! `h = tanh(x[t] w + h u)`, hoisted against per step, interleaved):
//!
//! | T, B, I, O | hoisted / per step |
//! |---|---|
//! | 50, 16, 64, 64 | 0.90 |
//! | 50, 16, 128, 64 | 0.88 |
//! | 50, 16, 256, 64 | 0.84 |
//! | 50, 8, 512, 64 | 0.87 |
//! | 200, 16, 128, 128 | 0.88 |
//! | 100, 32, 256, 128 | 0.59 |
//! | 50, 16, 32, 64 | 0.97 |
//! | 50, 64, 128, 256 | 1.00 |
//! | 50, 64, 256, 256 | 1.02 |
//! | 50, 16, 32, 256 (W11's LSTM: four gates of 64) | 1.02-1.05 |
//!
//! A narrow input into a wide product gains nothing: the per-step
//! products were small already, and the gradient's rows of `P` then cost
//! as much as they did.
//!
//! Imports `ir` (graph rebuilding), `ops` (the ops it matches and makes)
//! and `tensor` (the hoisted product, traced in the enclosing graph).

use crate::error::Result;
use crate::ir::{Graph, Producer, TensorType, ValueId};
use crate::ops::indexing::DynamicSlice;
use crate::ops::linalg::MatMul;
use crate::ops::shape::Reshape;
use crate::ops::{Op, OpDef};
use crate::tensor::{Tensor, apply};
use std::collections::{HashMap, HashSet};

/// The most bytes a hoisted product may hold (the loop gradient's state
/// budget).
const HOISTED_BYTES: i64 = 64 << 20;

/// A loop body with its row products hoisted: the new body graph and the
/// hoisted products, each a new capture appended after the old ones.
pub(super) struct Hoisted {
    pub graph: Graph,
    pub products: Vec<Tensor>,
}

/// One product to hoist: the node and its op, the captured array and
/// matrix (as body parameters), and the row index and zero starts of the
/// read.
struct RowProduct {
    node: usize,
    product: MatMul,
    array: usize,
    matrix: usize,
    starts: Vec<ValueId>,
}

/// Rewrites `body` (parameters: `loop_values` loop values, then captures
/// fed by `captured`) if it holds row products worth hoisting for a loop
/// of `trip_count` iterations; `None` leaves it as it is.
pub(super) fn hoist_row_products(
    body: &Graph,
    loop_values: usize,
    captured: &[Tensor],
    trip_count: Option<i64>,
) -> Result<Option<Hoisted>> {
    let Some(trips) = trip_count else {
        return Ok(None);
    };
    let found: Vec<RowProduct> = (0..body.nodes().len())
        .filter_map(|i| row_product(body, i, loop_values, trips))
        .collect();
    if found.is_empty() {
        return Ok(None);
    }
    let mut products = Vec::new();
    for p in &found {
        let c = &captured[p.array - loop_values];
        let w = &captured[p.matrix - loop_values];
        let dims = c.dims();
        let flat = c.reshape(&[dims[0] * dims[1], dims[2]])?;
        let product = apply(Op::MatMul(p.product.clone()), &[&flat, w])?.remove(0);
        let cols = product.dims()[1];
        products.push(product.reshape(&[dims[0], dims[1], cols])?);
    }
    let graph = rebuild(body, &found, &products)?;
    Ok(Some(Hoisted { graph, products }))
}

/// Node `i` of `body` as a row product to hoist, if it is one.
fn row_product(body: &Graph, i: usize, loop_values: usize, trips: i64) -> Option<RowProduct> {
    let node = &body.nodes()[i];
    let Op::MatMul(mm) = &node.op else {
        return None;
    };
    if mm.transpose_a {
        return None;
    }
    let captured_param = |v: ValueId| match body.producer(v) {
        Producer::Param(p) if p >= loop_values => Some(p),
        _ => None,
    };
    let producing_node = |v: ValueId| match body.producer(v) {
        Producer::Node { node, .. } => Some(&body.nodes()[node]),
        Producer::Param(_) => None,
    };
    let matrix = captured_param(node.inputs[1])?;
    let reshape = producing_node(node.inputs[0])?;
    let Op::Reshape(_) = &reshape.op else {
        return None;
    };
    let slice = producing_node(reshape.inputs[0])?;
    let Op::DynamicSlice(DynamicSlice { sizes }) = &slice.op else {
        return None;
    };
    let array = captured_param(slice.inputs[0])?;
    let array_dims = body.value_type(slice.inputs[0]).shape.as_known()?;
    let row_dims = body.value_type(node.inputs[0]).shape.as_known()?;
    let out = body.value_type(node.outputs[0]);
    let out_dims = out.shape.as_known()?;
    let zero_starts = slice.inputs[2..].iter().all(|&v| {
        producing_node(v).is_some_and(
            |n| matches!(&n.op, Op::Constant(c) if c.dims.is_empty() && c.value.as_f64() == 0.0),
        )
    });
    let inner = array_dims.get(2).copied()?;
    let width = out_dims.last().copied()?;
    let fits = array_dims.len() == 3
        && 2 * inner >= width
        && row_dims == array_dims[1..]
        && sizes[..] == [1, array_dims[1], array_dims[2]]
        && zero_starts
        && body.value_type(node.inputs[1]).shape.as_known()?.len() == 2
        && 2 * trips >= array_dims[0]
        && array_dims[0]
            * out_dims.iter().product::<i64>()
            * out.dtype.size_in_bytes().ok()? as i64
            <= HOISTED_BYTES;
    fits.then(|| RowProduct {
        node: i,
        product: mm.clone(),
        array,
        matrix,
        starts: slice.inputs[1..].to_vec(),
    })
}

/// `body` again with one more parameter per hoisted product, each row
/// product replaced by a read of its product's row, and the nodes that
/// fed only the replaced products left out.
fn rebuild(body: &Graph, found: &[RowProduct], products: &[Tensor]) -> Result<Graph> {
    let replaced: HashMap<usize, usize> =
        found.iter().enumerate().map(|(k, p)| (p.node, k)).collect();
    let live = live_nodes(body, found, &replaced);
    let mut g = Graph::new();
    let mut map: HashMap<ValueId, ValueId> = HashMap::new();
    for &p in body.params() {
        map.insert(p, g.add_param(body.value_type(p).clone()));
    }
    let product_params: Vec<ValueId> = products
        .iter()
        .map(|t| g.add_param(TensorType::new(t.dtype(), t.shape())))
        .collect();
    for (i, node) in body.nodes().iter().enumerate() {
        if !live[i] {
            continue;
        }
        let outs = match replaced.get(&i) {
            Some(&k) => {
                let p = &found[k];
                let product = products[k].dims();
                let starts: Vec<ValueId> = p.starts.iter().map(|v| map[v]).collect();
                let mut inputs = vec![product_params[k]];
                inputs.extend(starts);
                let sizes = vec![1, product[1], product[2]];
                let row = g.add_node(Op::DynamicSlice(DynamicSlice { sizes }), &inputs)?;
                g.add_node(
                    Op::Reshape(Reshape {
                        dims: vec![product[1], product[2]],
                    }),
                    &row,
                )?
            }
            None => {
                let inputs: Vec<ValueId> = node.inputs.iter().map(|v| map[v]).collect();
                g.add_node(node.op.clone(), &inputs)?
            }
        };
        map.extend(node.outputs.iter().copied().zip(outs));
    }
    g.set_results(body.results().iter().map(|v| map[v]).collect());
    Ok(g)
}

/// Which nodes the rebuilt body still needs: those the results or a side
/// effect depend on, with each replaced product depending only on its row
/// index and zero starts.
fn live_nodes(body: &Graph, found: &[RowProduct], replaced: &HashMap<usize, usize>) -> Vec<bool> {
    let nodes = body.nodes();
    let mut live = vec![false; nodes.len()];
    let mut wanted: HashSet<ValueId> = body.results().iter().copied().collect();
    for i in (0..nodes.len()).rev() {
        let node = &nodes[i];
        let needed = node.op.has_side_effects() || node.outputs.iter().any(|v| wanted.contains(v));
        if !needed {
            continue;
        }
        live[i] = true;
        let inputs = match replaced.get(&i) {
            // The row read keeps the slice's starts only.
            Some(&k) => found[k].starts.clone(),
            None => node.inputs.clone(),
        };
        wanted.extend(inputs);
    }
    live
}
