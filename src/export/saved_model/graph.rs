//! Layer: export (imports `proto`, `bundle`'s dtype numbers, `dtype`,
//! `error` and the runtime's `HostArray`). The SavedModel of one exported
//! function, built as TensorFlow's messages: its graph, signatures,
//! object graph and the checkpoint's object graph.
//!
//! What TensorFlow gets, for an export of `k` programs (one per concrete
//! input shapes) over variables `v_0..`:
//! - a function `__inference_<signature>_<i>` per program: its inputs,
//!   then one resource per variable; a `ReadVariableOp` per variable, a
//!   `Const` per captured constant, one `XlaCallModule` holding the
//!   program's StableHLO text, an `AssignVariableOp` per variable the
//!   function updates, and an `Identity` per output;
//! - a signature per program (`serving_default` for the first,
//!   `serving_1`, ... for the others), in the `MetaGraphDef`'s
//!   `signature_def` (TensorFlow 1 loaders, TF Serving's signature
//!   lookup, `saved_model_cli`) over a small graph of `Placeholder`s, the
//!   variables' `VarHandleOp`s and a `StatefulPartitionedCall` of the
//!   function, and in the object graph's `signatures` map (what
//!   `tf.saved_model.load(...).signatures[...]` calls);
//! - the object graph TensorFlow 2 restores: a root object whose children
//!   are the variables and the signature map, each variable's value in
//!   the checkpoint under `<child>/.ATTRIBUTES/VARIABLE_VALUE`.

use super::bundle::tf_data_type;
use super::proto::*;
use crate::dtype::DType;
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// The TensorFlow graph producer version the graph claims: the
/// `XlaCallModule` op and function-call ops as TensorFlow 2 writes them.
const GRAPH_PRODUCER: i32 = 1987;
/// The `XlaCallModule` serialization version: 9 accepts a StableHLO
/// module as text, with static shapes, and is read by every TensorFlow
/// since 2.14.
const CALL_MODULE_VERSION: i64 = 9;

/// A tensor the function takes or gives.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Spec {
    /// The name TensorFlow sees (a keyword argument of the signature).
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<i64>,
}

/// One program of the export: a signature of the SavedModel.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    /// Its inputs, with this program's concrete shapes.
    pub inputs: Vec<Spec>,
    /// Its outputs.
    pub outputs: Vec<Spec>,
    /// The StableHLO text: `@main` takes the inputs, then the captured
    /// values (in `Model::captures` order), and returns the outputs, then
    /// the new values of the updated variables.
    pub text: String,
}

/// A value the programs capture, after their inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Capture {
    /// `Model::constants[i]`, frozen into the graph.
    Constant(usize),
    /// `Model::variables[i]`, a TensorFlow variable.
    Variable(usize),
}

/// A variable of the model with its value.
#[derive(Clone, Debug)]
pub(crate) struct Variable {
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<i64>,
    pub bytes: Vec<u8>,
}

/// Everything the SavedModel is made of.
#[derive(Clone, Debug)]
pub(crate) struct Model {
    pub programs: Vec<Program>,
    pub constants: Vec<Variable>,
    pub variables: Vec<Variable>,
    pub captures: Vec<Capture>,
    /// Per update, in result order after the outputs: the variable it
    /// assigns.
    pub updates: Vec<usize>,
    /// The platforms the programs may run on (`CPU`, `CUDA`).
    pub platforms: Vec<String>,
}

/// The signature key of program `i`.
pub(crate) fn signature_key(i: usize) -> String {
    match i {
        0 => "serving_default".into(),
        i => format!("serving_{i}"),
    }
}

/// The checkpoint key of a variable that is the root's child `child`.
pub(crate) fn checkpoint_key(child: &str) -> String {
    format!("{child}/.ATTRIBUTES/VARIABLE_VALUE")
}

/// `name` as a TensorFlow argument or object name: lower-case ASCII
/// letters, digits and `_`, starting with a letter (TensorFlow's rule for
/// op arguments; Python keywords accept it too).
pub(crate) fn tf_name(name: &str, fallback: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_lowercase(),
            false => '_',
        })
        .collect();
    if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out = format!("{fallback}{out}");
    }
    out
}

/// `names` made unique by suffixes (`w`, `w_1`, ...), in order.
pub(crate) fn unique(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    names
        .into_iter()
        .map(|name| {
            let mut candidate = name.clone();
            let mut n = 1;
            while !seen.insert(candidate.clone()) {
                candidate = format!("{name}_{n}");
                n += 1;
            }
            candidate
        })
        .collect()
}

fn data_type(dtype: DType) -> Result<i32> {
    tf_data_type(dtype).ok_or_else(|| {
        Error::Value(format!(
            "SavedModel export: TensorFlow has no dtype for {dtype}"
        ))
    })
}

fn shape(dims: &[i64]) -> TensorShapeProto {
    TensorShapeProto {
        dim: dims.iter().map(|&size| Dim { size }).collect(),
        unknown_rank: false,
    }
}

fn attr(value: Attr) -> AttrValue {
    AttrValue { value: Some(value) }
}

fn types(dtypes: &[i32]) -> AttrValue {
    attr(Attr::List(AttrList {
        r#type: dtypes.to_vec(),
        ..AttrList::default()
    }))
}

fn node(name: &str, op: &str, input: Vec<String>, attrs: Vec<(&str, AttrValue)>) -> NodeDef {
    NodeDef {
        name: name.into(),
        op: op.into(),
        input,
        attr: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    }
}

fn tensor_spec(s: &Spec) -> Result<StructuredValue> {
    Ok(StructuredValue {
        kind: Some(Structure::TensorSpec(TensorSpecProto {
            name: s.name.clone(),
            shape: Some(shape(&s.dims)),
            dtype: data_type(s.dtype)?,
        })),
    })
}

fn dict(specs: &[Spec]) -> Result<StructuredValue> {
    let fields = specs
        .iter()
        .map(|s| Ok((s.name.clone(), tensor_spec(s)?)))
        .collect::<Result<BTreeMap<_, _>>>()?;
    Ok(StructuredValue {
        kind: Some(Structure::Dict(DictValue { fields })),
    })
}

/// The names of the variables as the root object's children (and so in
/// their checkpoint keys).
pub(crate) fn variable_children(model: &Model) -> Vec<String> {
    let names = ["signatures".to_string()]
        .into_iter()
        .chain(model.variables.iter().map(|v| tf_name(&v.name, "v_")));
    unique(names).into_iter().skip(1).collect()
}

/// The input names of a program as TensorFlow argument names: valid,
/// unique, and never a variable's resource argument (`var_N`).
pub(crate) fn input_names(names: &[String]) -> Vec<String> {
    // `var` too: a second `var` would become `var_1`.
    unique(names.iter().map(|n| {
        let n = tf_name(n, "arg_");
        match n == "var" || n.starts_with("var_") {
            true => format!("in_{n}"),
            false => n,
        }
    }))
}

/// The function of program `i`, named `name`.
fn function(model: &Model, i: usize, name: &str) -> Result<FunctionDef> {
    let p = &model.programs[i];
    let mut input_arg = Vec::new();
    for s in &p.inputs {
        input_arg.push(ArgDef {
            name: s.name.clone(),
            r#type: data_type(s.dtype)?,
            handle_data: Vec::new(),
        });
    }
    let mut nodes = Vec::new();
    for (v, var) in model.variables.iter().enumerate() {
        let dtype = data_type(var.dtype)?;
        input_arg.push(ArgDef {
            name: format!("var_{v}"),
            r#type: DT_RESOURCE,
            handle_data: vec![DtypeAndShape {
                dtype,
                shape: Some(shape(&var.dims)),
            }],
        });
    }
    let mut operands: Vec<String> = p.inputs.iter().map(|s| s.name.clone()).collect();
    let mut operand_types: Vec<i32> = p
        .inputs
        .iter()
        .map(|s| data_type(s.dtype))
        .collect::<Result<_>>()?;
    for capture in &model.captures {
        match *capture {
            Capture::Constant(c) => {
                let k = &model.constants[c];
                let dtype = data_type(k.dtype)?;
                let value = TensorProto {
                    dtype,
                    tensor_shape: Some(shape(&k.dims)),
                    tensor_content: k.bytes.clone(),
                    string_val: Vec::new(),
                };
                let name = format!("Const_{c}");
                if !nodes.iter().any(|n: &NodeDef| n.name == name) {
                    nodes.push(node(
                        &name,
                        "Const",
                        Vec::new(),
                        vec![
                            ("dtype", attr(Attr::Type(dtype))),
                            ("value", attr(Attr::Tensor(value))),
                        ],
                    ));
                }
                operands.push(format!("{name}:output:0"));
                operand_types.push(dtype);
            }
            Capture::Variable(v) => {
                let dtype = data_type(model.variables[v].dtype)?;
                let name = format!("ReadVar_{v}");
                if !nodes.iter().any(|n: &NodeDef| n.name == name) {
                    nodes.push(node(
                        &name,
                        "ReadVariableOp",
                        vec![format!("var_{v}")],
                        vec![("dtype", attr(Attr::Type(dtype)))],
                    ));
                }
                operands.push(format!("{name}:value:0"));
                operand_types.push(dtype);
            }
        }
    }
    let results: Vec<(i32, Vec<i64>)> = p
        .outputs
        .iter()
        .map(|s| Ok((data_type(s.dtype)?, s.dims.clone())))
        .chain(model.updates.iter().map(|&v| {
            let var = &model.variables[v];
            Ok((data_type(var.dtype)?, var.dims.clone()))
        }))
        .collect::<Result<_>>()?;
    let result_types: Vec<i32> = results.iter().map(|r| r.0).collect();
    nodes.push(node(
        "Call",
        "XlaCallModule",
        operands,
        vec![
            ("Tin", types(&operand_types)),
            ("Tout", types(&result_types)),
            (
                "Sout",
                attr(Attr::List(AttrList {
                    shape: results.iter().map(|r| shape(&r.1)).collect(),
                    ..AttrList::default()
                })),
            ),
            ("module", attr(Attr::S(p.text.clone().into_bytes()))),
            (
                "platforms",
                attr(Attr::List(AttrList {
                    s: model
                        .platforms
                        .iter()
                        .map(|s| s.clone().into_bytes())
                        .collect(),
                    ..AttrList::default()
                })),
            ),
            ("version", attr(Attr::I(CALL_MODULE_VERSION))),
        ],
    ));
    let mut control = Vec::new();
    for (k, &v) in model.updates.iter().enumerate() {
        let name = format!("Assign_{k}");
        nodes.push(node(
            &name,
            "AssignVariableOp",
            vec![
                format!("var_{v}"),
                format!("Call:output:{}", p.outputs.len() + k),
            ],
            vec![("dtype", attr(Attr::Type(result_types[p.outputs.len() + k])))],
        ));
        control.push(name);
    }
    let mut output_arg = Vec::new();
    let mut ret = BTreeMap::new();
    for (j, s) in p.outputs.iter().enumerate() {
        let name = format!("Identity_{j}");
        let mut input = vec![format!("Call:output:{j}")];
        // Outputs come after the assignments, as TensorFlow's own
        // functions order them: a caller reading an output also sees
        // the variables updated.
        input.extend(control.iter().map(|c| format!("^{c}")));
        nodes.push(node(
            &name,
            "Identity",
            input,
            vec![("T", attr(Attr::Type(result_types[j])))],
        ));
        output_arg.push(ArgDef {
            name: s.name.clone(),
            r#type: result_types[j],
            handle_data: Vec::new(),
        });
        ret.insert(s.name.clone(), format!("{name}:output:0"));
    }
    Ok(FunctionDef {
        signature: Some(OpDef {
            name: name.into(),
            input_arg,
            output_arg,
            is_stateful: true,
            control_output: control.clone(),
        }),
        node_def: nodes,
        ret,
        control_ret: control.iter().map(|c| (c.clone(), c.clone())).collect(),
    })
}

/// The name of program `i`'s function.
fn function_name(i: usize) -> String {
    format!("__inference_{}_{i}", signature_key(i))
}

/// The MetaGraphDef's graph: the functions, and the graph the signature
/// defs name tensors of.
fn graph(model: &Model) -> Result<(GraphDef, BTreeMap<String, SignatureDef>)> {
    let mut nodes = Vec::new();
    let children = variable_children(model);
    for (v, var) in model.variables.iter().enumerate() {
        nodes.push(node(
            &format!("var_{v}"),
            "VarHandleOp",
            Vec::new(),
            vec![
                ("dtype", attr(Attr::Type(data_type(var.dtype)?))),
                ("shape", attr(Attr::Shape(shape(&var.dims)))),
                (
                    "shared_name",
                    attr(Attr::S(children[v].clone().into_bytes())),
                ),
            ],
        ));
    }
    let mut functions = Vec::new();
    let mut signatures = BTreeMap::new();
    for (i, p) in model.programs.iter().enumerate() {
        let key = signature_key(i);
        let name = function_name(i);
        functions.push(function(model, i, &name)?);
        let mut call_inputs = Vec::new();
        let mut tin = Vec::new();
        let mut inputs = BTreeMap::new();
        for s in &p.inputs {
            let placeholder = format!("{key}_{}", s.name);
            let dtype = data_type(s.dtype)?;
            nodes.push(node(
                &placeholder,
                "Placeholder",
                Vec::new(),
                vec![
                    ("dtype", attr(Attr::Type(dtype))),
                    ("shape", attr(Attr::Shape(shape(&s.dims)))),
                ],
            ));
            inputs.insert(
                s.name.clone(),
                TensorInfo {
                    name: format!("{placeholder}:0"),
                    dtype,
                    tensor_shape: Some(shape(&s.dims)),
                },
            );
            call_inputs.push(placeholder);
            tin.push(dtype);
        }
        for v in 0..model.variables.len() {
            call_inputs.push(format!("var_{v}"));
            tin.push(DT_RESOURCE);
        }
        let call = format!("call_{key}");
        let tout: Vec<i32> = p
            .outputs
            .iter()
            .map(|s| data_type(s.dtype))
            .collect::<Result<_>>()?;
        let mut outputs = BTreeMap::new();
        for (j, s) in p.outputs.iter().enumerate() {
            outputs.insert(
                s.name.clone(),
                TensorInfo {
                    name: format!("{call}:{j}"),
                    dtype: tout[j],
                    tensor_shape: Some(shape(&s.dims)),
                },
            );
        }
        nodes.push(node(
            &call,
            "StatefulPartitionedCall",
            call_inputs,
            vec![
                ("Tin", types(&tin)),
                ("Tout", types(&tout)),
                ("f", attr(Attr::Func(NameAttrList { name }))),
            ],
        ));
        signatures.insert(
            key,
            SignatureDef {
                inputs,
                outputs,
                method_name: "tensorflow/serving/predict".into(),
            },
        );
    }
    nodes.extend(saver_nodes(model)?);
    let graph = GraphDef {
        node: nodes,
        library: Some(FunctionDefLibrary {
            function: functions,
        }),
        versions: Some(VersionDef {
            producer: GRAPH_PRODUCER,
            min_consumer: 12,
        }),
    };
    Ok((graph, signatures))
}

/// A constant 1-D string tensor.
fn strings(name: &str, values: Vec<Vec<u8>>) -> NodeDef {
    let value = TensorProto {
        dtype: DT_STRING,
        tensor_shape: Some(shape(&[values.len() as i64])),
        tensor_content: Vec::new(),
        string_val: values,
    };
    node(
        name,
        "Const",
        Vec::new(),
        vec![
            ("dtype", attr(Attr::Type(DT_STRING))),
            ("value", attr(Attr::Tensor(value))),
        ],
    )
}

/// The graph's saver, for TensorFlow 1 loaders (TF Serving,
/// `tf.compat.v1.saved_model.load`), which restore the variables by
/// running `restore_all` with the checkpoint's prefix fed to
/// `saver_filename`: a `RestoreV2` of every variable's checkpoint key, an
/// `AssignVariableOp` each; and `saver_save` saves them with `SaveV2`.
/// (TensorFlow 2's loader restores through the object graph instead.)
fn saver_nodes(model: &Model) -> Result<Vec<NodeDef>> {
    // `RestoreV2` and `SaveV2` take at least one tensor.
    if model.variables.is_empty() {
        return Ok(Vec::new());
    }
    let children = variable_children(model);
    let keys: Vec<Vec<u8>> = children
        .iter()
        .map(|c| checkpoint_key(c).into_bytes())
        .collect();
    let dtypes: Vec<i32> = model
        .variables
        .iter()
        .map(|v| data_type(v.dtype))
        .collect::<Result<_>>()?;
    let n = keys.len();
    let mut nodes = vec![
        node(
            "saver_filename",
            "Placeholder",
            Vec::new(),
            vec![
                ("dtype", attr(Attr::Type(DT_STRING))),
                ("shape", attr(Attr::Shape(shape(&[])))),
            ],
        ),
        strings("saver_tensor_names", keys),
        strings("saver_shapes_and_slices", vec![Vec::new(); n]),
        node(
            "saver_restore",
            "RestoreV2",
            vec![
                "saver_filename".into(),
                "saver_tensor_names".into(),
                "saver_shapes_and_slices".into(),
            ],
            vec![("dtypes", types(&dtypes))],
        ),
    ];
    let mut restores = Vec::new();
    let mut save_inputs: Vec<String> = vec![
        "saver_filename".into(),
        "saver_tensor_names".into(),
        "saver_shapes_and_slices".into(),
    ];
    for (v, &dtype) in dtypes.iter().enumerate() {
        nodes.push(node(
            &format!("saver_assign_{v}"),
            "AssignVariableOp",
            vec![format!("var_{v}"), format!("saver_restore:{v}")],
            vec![("dtype", attr(Attr::Type(dtype)))],
        ));
        restores.push(format!("^saver_assign_{v}"));
        nodes.push(node(
            &format!("saver_read_{v}"),
            "ReadVariableOp",
            vec![format!("var_{v}")],
            vec![("dtype", attr(Attr::Type(dtype)))],
        ));
        save_inputs.push(format!("saver_read_{v}"));
    }
    nodes.push(node("restore_all", "NoOp", restores, Vec::new()));
    nodes.push(node(
        "saver_save_v2",
        "SaveV2",
        save_inputs,
        vec![("dtypes", types(&dtypes))],
    ));
    nodes.push(node(
        "saver_save",
        "Identity",
        vec!["saver_filename".into(), "^saver_save_v2".into()],
        vec![("T", attr(Attr::Type(DT_STRING)))],
    ));
    Ok(nodes)
}

fn user_object(identifier: &str, children: Vec<ObjectReference>) -> SavedObject {
    SavedObject {
        children,
        kind: Some(SavedKind::UserObject(SavedUserObject {
            identifier: identifier.into(),
            version: Some(VersionDef {
                producer: 1,
                min_consumer: 1,
            }),
        })),
    }
}

fn reference(node_id: usize, local_name: &str) -> ObjectReference {
    ObjectReference {
        node_id: node_id as i32,
        local_name: local_name.into(),
    }
}

/// The object graph, and the checkpoint's object graph that mirrors it
/// node for node.
fn object_graphs(model: &Model) -> Result<(SavedObjectGraph, TrackableObjectGraph)> {
    let children = variable_children(model);
    let n_vars = model.variables.len();
    let signature_map = n_vars + 1;
    let mut root_children: Vec<ObjectReference> = children
        .iter()
        .enumerate()
        .map(|(v, name)| reference(v + 1, name))
        .collect();
    root_children.push(reference(signature_map, "signatures"));
    let mut nodes = vec![user_object("_generic_user_object", root_children.clone())];
    let mut checkpoint = vec![TrackableObject {
        children: root_children,
        attributes: Vec::new(),
    }];
    for (v, var) in model.variables.iter().enumerate() {
        nodes.push(SavedObject {
            children: Vec::new(),
            kind: Some(SavedKind::Variable(SavedVariable {
                dtype: data_type(var.dtype)?,
                shape: Some(shape(&var.dims)),
                trainable: true,
                name: var.name.clone(),
            })),
        });
        checkpoint.push(TrackableObject {
            children: Vec::new(),
            attributes: vec![SerializedTensor {
                name: "VARIABLE_VALUE".into(),
                full_name: var.name.clone(),
                checkpoint_key: checkpoint_key(&children[v]),
            }],
        });
    }
    let signatures: Vec<ObjectReference> = (0..model.programs.len())
        .map(|i| reference(signature_map + 1 + i, &signature_key(i)))
        .collect();
    nodes.push(user_object("signature_map", signatures.clone()));
    checkpoint.push(TrackableObject {
        children: signatures,
        attributes: Vec::new(),
    });
    let mut concrete_functions = BTreeMap::new();
    for (i, p) in model.programs.iter().enumerate() {
        let name = function_name(i);
        nodes.push(SavedObject {
            children: Vec::new(),
            kind: Some(SavedKind::BareConcreteFunction(SavedBareConcreteFunction {
                concrete_function_name: name.clone(),
                argument_keywords: p.inputs.iter().map(|s| s.name.clone()).collect(),
                allowed_positional_arguments: p.inputs.len() as i64,
            })),
        });
        checkpoint.push(TrackableObject::default());
        let arguments = StructuredValue {
            kind: Some(Structure::Tuple(TupleValue {
                values: vec![
                    StructuredValue {
                        kind: Some(Structure::Tuple(TupleValue::default())),
                    },
                    dict(&p.inputs)?,
                ],
            })),
        };
        concrete_functions.insert(
            name,
            SavedConcreteFunction {
                bound_inputs: (1..=n_vars as i32).collect(),
                canonicalized_input_signature: Some(arguments),
                output_signature: Some(dict(&p.outputs)?),
            },
        );
    }
    Ok((
        SavedObjectGraph {
            nodes,
            concrete_functions,
        },
        TrackableObjectGraph { nodes: checkpoint },
    ))
}

/// The SavedModel message and the checkpoint's object graph.
pub(crate) fn saved_model(model: &Model) -> Result<(SavedModel, TrackableObjectGraph)> {
    let (graph_def, signature_def) = graph(model)?;
    let (object_graph, checkpoint_graph) = object_graphs(model)?;
    let meta_graph = MetaGraphDef {
        meta_info_def: Some(MetaInfoDef {
            tags: vec!["serve".into()],
            tensorflow_version: String::new(),
            stripped_default_attrs: true,
        }),
        graph_def: Some(graph_def),
        saver_def: (!model.variables.is_empty()).then(|| SaverDef {
            filename_tensor_name: "saver_filename:0".into(),
            save_tensor_name: "saver_save:0".into(),
            restore_op_name: "restore_all".into(),
            version: 2,
        }),
        signature_def,
        object_graph_def: Some(object_graph),
    };
    Ok((
        SavedModel {
            saved_model_schema_version: 1,
            meta_graphs: vec![meta_graph],
        },
        checkpoint_graph,
    ))
}
