//! The per-op test table: every op of the catalog (`xlafn::ops::CATALOG`,
//! which `op_catalog!` derives) names the test files that check it
//! against an independent reference, and a method or function those
//! files call it by. A new op fails here until it has a row; a row whose
//! file is gone, or no longer calls the op, fails too. (PyTorch's OpInfo
//! plays this part there; this table is its index, and the files hold the
//! cases.)

use std::path::Path;

/// (catalog variant, test files, names the files call the op by: any one
/// of them in each file).
const TABLE: &[(&str, &[&str], &[&str])] = &[
    (
        "Unary",
        &[
            "tests/op_table.rs",
            "tests/ops_elementwise.rs",
            "tests/ops_special.rs",
        ],
        &["tanh", "exp", "erf"],
    ),
    (
        "Binary",
        &[
            "tests/op_table.rs",
            "tests/ops_elementwise.rs",
            "tests/ops_bitwise.rs",
        ],
        &["add", "pow", "bitwise_and", "maximum"],
    ),
    (
        "Select",
        &["tests/ops_elementwise.rs", "tests/gradients.rs"],
        &["select", "where_"],
    ),
    (
        "Cast",
        &["tests/ops_elementwise.rs", "tests/op_table.rs"],
        &["cast"],
    ),
    (
        "Constant",
        &["tests/ops_constant.rs"],
        &["from_vec", "fill", "scalar"],
    ),
    (
        "FillLike",
        &["tests/ops_constant.rs"],
        &["zeros_like", "ones_like", "fill_like"],
    ),
    ("Iota", &["tests/ops_constant.rs"], &["iota", "range"]),
    (
        "RandomUniform",
        &["tests/ops_constant.rs", "tests/random_keys.rs"],
        &["random_uniform", "uniform"],
    ),
    ("RandomNormal", &["tests/random_keys.rs"], &["normal"]),
    (
        "RandomBits",
        &["tests/random_keys.rs"],
        &["bits", "uniform", "split"],
    ),
    ("Reshape", &["tests/ops_shape.rs"], &["reshape"]),
    ("Transpose", &["tests/ops_shape.rs"], &["transpose"]),
    ("Concat", &["tests/ops_shape.rs"], &["concat"]),
    (
        "Slice",
        &["tests/ops_shape.rs", "tests/slice_gradients.rs"],
        &["slice"],
    ),
    ("Split", &["tests/ops_split.rs"], &["split"]),
    ("StridedSlice", &["tests/ops_shape.rs"], &["strided_slice"]),
    ("Gather", &["tests/ops_shape.rs"], &["gather"]),
    ("GatherNd", &["tests/ops_scatter.rs"], &["gather_nd"]),
    (
        "TakeAlongAxis",
        &["tests/ops_scatter.rs"],
        &["take_along_axis"],
    ),
    (
        "AddAlongAxis",
        &["tests/ops_scatter.rs"],
        &["take_along_axis"],
    ),
    (
        "ScatterNd",
        &["tests/ops_scatter.rs"],
        &[
            "tensor_scatter_nd_update",
            "scatter_nd_add",
            "scatter_nd_update",
        ],
    ),
    (
        "EnsureShape",
        &["tests/vmap.rs", "tests/guide_controlling_retracing.rs"],
        &["ensure_shape", "input_signature"],
    ),
    (
        "ShardingConstraint",
        &["tests/sharding.rs"],
        &["with_sharding_constraint"],
    ),
    (
        "OptimizationBarrier",
        &["tests/remat.rs"],
        &["optimization_barrier", "recompute_grad"],
    ),
    ("ShardMap", &["tests/shard_map.rs"], &["shard_map"]),
    (
        "Collective",
        &["tests/shard_map.rs"],
        &["psum", "all_gather"],
    ),
    ("OneHot", &["tests/ops_scatter.rs"], &["one_hot"]),
    ("MatMul", &["tests/ops_linalg.rs"], &["matmul"]),
    ("Cholesky", &["tests/ops_decomp.rs"], &["cholesky"]),
    (
        "TriangularSolve",
        &["tests/ops_decomp.rs"],
        &["triangular_solve"],
    ),
    (
        "DotGeneral",
        &["tests/ops_einsum.rs", "tests/matmul_program.rs"],
        &["einsum", "dot_general", "matmul"],
    ),
    ("Conv", &["tests/ops_conv.rs"], &["conv2d", "conv_general"]),
    (
        "ReduceWindow",
        &["tests/ops_window.rs"],
        &["max_pool", "avg_pool"],
    ),
    (
        "SelectAndScatterAdd",
        &["tests/ops_window.rs"],
        &["max_pool"],
    ),
    ("Reduce", &["tests/ops_reduce.rs"], &["reduce_sum"]),
    ("ArgReduce", &["tests/ops_reduce.rs"], &["argmax"]),
    ("Softmax", &["tests/ops_reduce.rs"], &["softmax"]),
    ("DynamicSlice", &["tests/gradients.rs"], &["dynamic_slice"]),
    (
        "DynamicUpdateSlice",
        &["tests/gradients.rs"],
        &["dynamic_update_slice"],
    ),
    (
        "HostCallback",
        &["tests/print_and_callbacks.rs", "tests/robust_callbacks.rs"],
        &["host_callback", "print"],
    ),
    ("Cond", &["tests/control_flow.rs"], &["cond"]),
    (
        "While",
        &["tests/control_flow.rs", "tests/loop_second_derivatives.rs"],
        &["while_loop", "for_range"],
    ),
    (
        "Call",
        &["tests/gradients.rs", "tests/guide_basics.rs"],
        &["GradientTape", "function"],
    ),
    ("Pad", &["tests/ops_pad.rs"], &["pad"]),
    ("Reverse", &["tests/ops_pad.rs"], &["reverse"]),
    ("BroadcastTo", &["tests/ops_pad.rs"], &["broadcast_to"]),
    ("StopGradient", &["tests/ops_stats.rs"], &["stop_gradient"]),
    (
        "Sort",
        &["tests/ops_sort.rs"],
        &["sort", "argsort", "top_k"],
    ),
    ("Complex", &["tests/complex_dtype.rs"], &["complex"]),
    (
        "ComplexPart",
        &["tests/complex_dtype.rs"],
        &["real", "imag"],
    ),
    ("Fft", &["tests/ops_fft.rs"], &["fft"]),
    (
        "CustomGradient",
        &["tests/custom_gradient.rs"],
        &["custom_gradient"],
    ),
];

#[test]
fn every_op_of_the_catalog_has_a_row_and_every_row_an_op() {
    let listed: Vec<&str> = TABLE.iter().map(|(op, _, _)| *op).collect();
    let missing: Vec<&&str> = xlafn::ops::CATALOG
        .iter()
        .filter(|op| !listed.contains(op))
        .collect();
    assert!(
        missing.is_empty(),
        "ops without a row in the per-op test table (add their tests and a row): {missing:?}"
    );
    let extra: Vec<&&str> = listed
        .iter()
        .filter(|op| !xlafn::ops::CATALOG.contains(op))
        .collect();
    assert!(
        extra.is_empty(),
        "rows for ops the catalog no longer has: {extra:?}"
    );
}

#[test]
fn every_row_names_files_that_call_its_op() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut wrong = Vec::new();
    for (op, files, names) in TABLE {
        for file in *files {
            match std::fs::read_to_string(root.join(file)) {
                Err(e) => wrong.push(format!("{op}: {file}: {e}")),
                Ok(text) => {
                    if !names.iter().any(|n| text.contains(&format!("{n}("))) {
                        wrong.push(format!("{op}: {file} calls none of {names:?}"));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
