//! Layer: export (imports prost only). The part of TensorFlow's protocol
//! messages a SavedModel written by xlafn uses, as prost derive structs.
//!
//! The structure (message names, field numbers, types) is TensorFlow's,
//! read from the message descriptors of TensorFlow 2.21
//! (`saved_model.proto`, `meta_graph.proto`, `graph.proto`,
//! `node_def.proto`, `function.proto`, `op_def.proto`, `attr_value.proto`,
//! `tensor.proto`, `tensor_shape.proto`, `versions.proto`,
//! `saved_object_graph.proto`, `struct.proto`,
//! `trackable_object_graph.proto`); field numbers are the format, names
//! are ours. Fields xlafn never writes are left out: prost skips unknown
//! fields when it reads a file TensorFlow wrote. Maps are ordered so that
//! equal models encode to equal bytes.

use std::collections::BTreeMap;

/// TensorFlow's `DataType` numbers that appear outside tensors.
pub(crate) const DT_RESOURCE: i32 = 20;
pub(crate) const DT_STRING: i32 = 7;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SavedModel {
    #[prost(int64, tag = "1")]
    pub saved_model_schema_version: i64,
    #[prost(message, repeated, tag = "2")]
    pub meta_graphs: Vec<MetaGraphDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct MetaGraphDef {
    #[prost(message, optional, tag = "1")]
    pub meta_info_def: Option<MetaInfoDef>,
    #[prost(message, optional, tag = "2")]
    pub graph_def: Option<GraphDef>,
    #[prost(message, optional, tag = "3")]
    pub saver_def: Option<SaverDef>,
    #[prost(btree_map = "string, message", tag = "5")]
    pub signature_def: BTreeMap<String, SignatureDef>,
    #[prost(message, optional, tag = "7")]
    pub object_graph_def: Option<SavedObjectGraph>,
}

/// How a TensorFlow 1 loader (TF Serving's, `tf.compat.v1`'s) restores
/// and saves the variables: the graph tensors and op to run.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SaverDef {
    #[prost(string, tag = "1")]
    pub filename_tensor_name: String,
    #[prost(string, tag = "2")]
    pub save_tensor_name: String,
    #[prost(string, tag = "3")]
    pub restore_op_name: String,
    /// `CheckpointFormatVersion`: 2 is the tensor bundle (`V2`).
    #[prost(int32, tag = "7")]
    pub version: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct MetaInfoDef {
    #[prost(string, repeated, tag = "4")]
    pub tags: Vec<String>,
    #[prost(string, tag = "5")]
    pub tensorflow_version: String,
    /// Attributes equal to their op's default are left out of the nodes
    /// (TensorFlow fills them in when it loads the graph).
    #[prost(bool, tag = "7")]
    pub stripped_default_attrs: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GraphDef {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeDef>,
    #[prost(message, optional, tag = "2")]
    pub library: Option<FunctionDefLibrary>,
    #[prost(message, optional, tag = "4")]
    pub versions: Option<VersionDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NodeDef {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub op: String,
    #[prost(string, repeated, tag = "3")]
    pub input: Vec<String>,
    #[prost(btree_map = "string, message", tag = "5")]
    pub attr: BTreeMap<String, AttrValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AttrValue {
    #[prost(oneof = "Attr", tags = "1, 2, 3, 5, 6, 7, 8, 10")]
    pub value: Option<Attr>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Attr {
    #[prost(message, tag = "1")]
    List(AttrList),
    #[prost(bytes, tag = "2")]
    S(Vec<u8>),
    #[prost(int64, tag = "3")]
    I(i64),
    #[prost(bool, tag = "5")]
    B(bool),
    #[prost(int32, tag = "6")]
    Type(i32),
    #[prost(message, tag = "7")]
    Shape(TensorShapeProto),
    #[prost(message, tag = "8")]
    Tensor(TensorProto),
    #[prost(message, tag = "10")]
    Func(NameAttrList),
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AttrList {
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub s: Vec<Vec<u8>>,
    #[prost(int64, repeated, tag = "3")]
    pub i: Vec<i64>,
    #[prost(int32, repeated, tag = "6")]
    pub r#type: Vec<i32>,
    #[prost(message, repeated, tag = "7")]
    pub shape: Vec<TensorShapeProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NameAttrList {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TensorShapeProto {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
    #[prost(bool, tag = "3")]
    pub unknown_rank: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Dim {
    /// -1 for a dimension of unknown size.
    #[prost(int64, tag = "1")]
    pub size: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TensorProto {
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShapeProto>,
    /// The elements as little-endian bytes, row-major.
    #[prost(bytes = "vec", tag = "4")]
    pub tensor_content: Vec<u8>,
    /// The elements of a string tensor.
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub string_val: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct FunctionDefLibrary {
    #[prost(message, repeated, tag = "1")]
    pub function: Vec<FunctionDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct FunctionDef {
    #[prost(message, optional, tag = "1")]
    pub signature: Option<OpDef>,
    #[prost(message, repeated, tag = "3")]
    pub node_def: Vec<NodeDef>,
    /// Output argument name to the `node:output:index` that returns it.
    #[prost(btree_map = "string, string", tag = "4")]
    pub ret: BTreeMap<String, String>,
    /// Nodes that must run even though no output depends on them (the
    /// variable assignments).
    #[prost(btree_map = "string, string", tag = "6")]
    pub control_ret: BTreeMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct OpDef {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub input_arg: Vec<ArgDef>,
    #[prost(message, repeated, tag = "3")]
    pub output_arg: Vec<ArgDef>,
    #[prost(bool, tag = "17")]
    pub is_stateful: bool,
    #[prost(string, repeated, tag = "20")]
    pub control_output: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ArgDef {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(int32, tag = "3")]
    pub r#type: i32,
    /// For a resource (a variable's handle): the variable's dtype and
    /// shape.
    #[prost(message, repeated, tag = "7")]
    pub handle_data: Vec<DtypeAndShape>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DtypeAndShape {
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct VersionDef {
    #[prost(int32, tag = "1")]
    pub producer: i32,
    #[prost(int32, tag = "2")]
    pub min_consumer: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SignatureDef {
    #[prost(btree_map = "string, message", tag = "1")]
    pub inputs: BTreeMap<String, TensorInfo>,
    #[prost(btree_map = "string, message", tag = "2")]
    pub outputs: BTreeMap<String, TensorInfo>,
    #[prost(string, tag = "3")]
    pub method_name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TensorInfo {
    /// The graph tensor (`node:index`) the signature reads or feeds.
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(int32, tag = "2")]
    pub dtype: i32,
    #[prost(message, optional, tag = "3")]
    pub tensor_shape: Option<TensorShapeProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SavedObjectGraph {
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<SavedObject>,
    #[prost(btree_map = "string, message", tag = "2")]
    pub concrete_functions: BTreeMap<String, SavedConcreteFunction>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SavedObject {
    #[prost(message, repeated, tag = "1")]
    pub children: Vec<ObjectReference>,
    #[prost(oneof = "SavedKind", tags = "4, 7, 8")]
    pub kind: Option<SavedKind>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum SavedKind {
    #[prost(message, tag = "4")]
    UserObject(SavedUserObject),
    #[prost(message, tag = "7")]
    Variable(SavedVariable),
    #[prost(message, tag = "8")]
    BareConcreteFunction(SavedBareConcreteFunction),
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ObjectReference {
    #[prost(int32, tag = "1")]
    pub node_id: i32,
    #[prost(string, tag = "2")]
    pub local_name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SavedUserObject {
    /// `_generic_user_object` (a `tf.Module`) or `signature_map`.
    #[prost(string, tag = "1")]
    pub identifier: String,
    #[prost(message, optional, tag = "2")]
    pub version: Option<VersionDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SavedVariable {
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
    #[prost(bool, tag = "3")]
    pub trainable: bool,
    #[prost(string, tag = "6")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SavedBareConcreteFunction {
    #[prost(string, tag = "1")]
    pub concrete_function_name: String,
    #[prost(string, repeated, tag = "2")]
    pub argument_keywords: Vec<String>,
    #[prost(int64, tag = "3")]
    pub allowed_positional_arguments: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SavedConcreteFunction {
    /// The object-graph nodes of the captured inputs (the variables), in
    /// the order the function takes them after its own arguments.
    #[prost(int32, repeated, tag = "2")]
    pub bound_inputs: Vec<i32>,
    #[prost(message, optional, tag = "3")]
    pub canonicalized_input_signature: Option<StructuredValue>,
    #[prost(message, optional, tag = "4")]
    pub output_signature: Option<StructuredValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct StructuredValue {
    #[prost(oneof = "Structure", tags = "33, 52, 53")]
    pub kind: Option<Structure>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Structure {
    #[prost(message, tag = "33")]
    TensorSpec(TensorSpecProto),
    #[prost(message, tag = "52")]
    Tuple(TupleValue),
    #[prost(message, tag = "53")]
    Dict(DictValue),
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TupleValue {
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<StructuredValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DictValue {
    #[prost(btree_map = "string, message", tag = "1")]
    pub fields: BTreeMap<String, StructuredValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TensorSpecProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
    #[prost(int32, tag = "3")]
    pub dtype: i32,
}

/// The checkpoint's own object graph (`_CHECKPOINTABLE_OBJECT_GRAPH`),
/// through which `tf.saved_model.load` and `tf.train.Checkpoint` find
/// each variable's value.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TrackableObjectGraph {
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<TrackableObject>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TrackableObject {
    #[prost(message, repeated, tag = "1")]
    pub children: Vec<ObjectReference>,
    #[prost(message, repeated, tag = "2")]
    pub attributes: Vec<SerializedTensor>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SerializedTensor {
    /// `VARIABLE_VALUE` for a variable.
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub full_name: String,
    /// The tensor's key in the checkpoint.
    #[prost(string, tag = "3")]
    pub checkpoint_key: String,
}
