//! Exports serve every shape their specs allow: a function exported
//! with input signature `(None, 16)` and programs for batches 1, 8 and 32
//! runs batch 5 after loading, in this process and in `xlafn run`, by
//! compiling the saved graph once for the new shape; and a saved graph
//! that was tampered with is refused with an error, never a crash.

#[path = "common/scratch.rs"]
mod scratch;
#[path = "common/tool.rs"]
mod tool;

#[path = "common/captured.rs"]
mod captured;

#[path = "common/child.rs"]
mod child;

use captured::Captured;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use xlafn::Padding;
use xlafn::export::npy;
use xlafn::prelude::*;

fn temp_dir(tag: &str) -> scratch::ScratchDir {
    scratch::scratch_dir(&format!("anyshape-{tag}"))
}

fn weights() -> Tensor {
    let w: Vec<f32> = (0..16 * 4).map(|k| ((k % 9) as f32 - 4.0) / 8.0).collect();
    Tensor::from_vec(w, &[16, 4]).unwrap()
}

fn batch(n: usize) -> Tensor {
    let x: Vec<f32> = (0..n * 16).map(|k| ((k % 13) as f32) / 13.0).collect();
    Tensor::from_vec(x, &[n as i64, 16]).unwrap()
}

/// A small model: a dense layer with a captured weight, a `cond`, a
/// device loop, a print, and a variable counting the rows it has seen.
fn model(seen: Variable) -> Function<(Tensor,), Tensor> {
    let w = weights();
    FunctionOptions::new()
        .name("model")
        .input_signature(vec![TensorSpec::new(&[None, Some(16)], DType::F32)])
        .build(move |x: Tensor| -> Result<Tensor> {
            // The batch size, a device value (the trace has it unknown).
            let rows = (x.ones_like()?.reduce_sum(&[], false)? / 16.0).cast(DType::I64)?;
            seen.assign_add(&rows)?;
            let h = x.matmul(&w)?;
            let h = cond(
                &h.reduce_sum(&[], false)?.gt_scalar(0.0)?,
                || h.tanh(),
                || h.clone(),
            )?;
            let h = for_range(0, 3, 1, h, |_, h| &h * 0.5 + 0.25)?;
            xlafn::print("rows", &[&rows])?;
            Ok(h)
        })
}

#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn a_batch_no_program_was_listed_for_runs_after_loading() {
    let seen = Variable::new(Tensor::scalar(0i64));
    let f = model(seen.clone());
    let cf = f
        .get_concrete_function((TensorSpec::new(&[None, Some(16)], DType::F32),))
        .unwrap();
    let dir = temp_dir("batch5");
    let shapes: Vec<Vec<Vec<i64>>> = [1, 8, 32].iter().map(|&b| vec![vec![b, 16]]).collect();
    cf.export(&dir, &shapes).unwrap();

    let want = f.call((batch(5),)).unwrap().to_vec::<f32>().unwrap();
    let loaded = xlafn::load(&dir).unwrap();
    let out = Captured::default();
    let got = xlafn::with_print_output(out.clone(), || loaded.call(&[&batch(5)]))
        .unwrap()
        .remove(0);
    assert_eq!(got.dims(), vec![5, 4]);
    assert_eq!(got.to_vec::<f32>().unwrap(), want);
    assert_eq!(out.take(), "rows 5\n");
    // The loaded variable counted the rows (it started at the exported 0).
    assert_eq!(loaded.variables()[0].read().item::<i64>().unwrap(), 5);
    // Compiled once, then reused; listed shapes still use their programs.
    loaded.call(&[&batch(5)]).unwrap();
    loaded.call(&[&batch(8)]).unwrap();
    let shapes = loaded.specializations();
    assert_eq!(shapes.len(), 4, "{shapes:?}");
    assert_eq!(shapes[3], vec![vec![5, 16]]);
    assert_eq!(loaded.variables()[0].read().item::<i64>().unwrap(), 18);
    // A shape the signature does not allow is still refused, by name.
    let e = loaded
        .call(&[&Tensor::fill(&[5, 3], 0.0, DType::F32).unwrap()])
        .unwrap_err();
    assert!(e.to_string().contains("Can not cast"), "{e}");

    // `xlafn run` in another process serves batch 7.
    let input = dir.join("x.npy");
    std::fs::write(
        &input,
        npy::encode(&batch(7).to_host_array().unwrap()).unwrap(),
    )
    .unwrap();
    let outdir = dir.join("out");
    let ran = Command::new(tool::xlafn_tool())
        .args(["run", &dir.display().to_string()])
        .args(["--input", &format!("a={}", input.display())])
        .args(["--output-dir", &outdir.display().to_string()])
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let got = npy::decode(&std::fs::read(outdir.join("output_0.npy")).unwrap()).unwrap();
    assert_eq!(got.dims, vec![7, 4]);
    let want = f.call((batch(7),)).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(got.to_vec::<f32>().unwrap(), want);
}

/// Exports a tiny function and returns its folder and the saved graph.
fn exported(tag: &str) -> (scratch::ScratchDir, serde_json::Value) {
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None], DType::F32)])
        .build(|x: Tensor| -> Result<Tensor> {
            let y = cond(
                &x.reduce_sum(&[], false)?.gt_scalar(0.0)?,
                || x.exp(),
                || x.clone(),
            )?;
            y.reshape(&[-1, 1])
        });
    let cf = f
        .get_concrete_function((TensorSpec::new(&[None], DType::F32),))
        .unwrap();
    let dir = temp_dir(tag);
    cf.export(&dir, &[vec![vec![2]]]).unwrap();
    let graph = serde_json::from_slice(&std::fs::read(dir.join("graph.json")).unwrap()).unwrap();
    (dir, graph)
}

fn tampered(dir: &Path, graph: &serde_json::Value) -> Error {
    tampered_call(dir, graph, &Tensor::vector(&[1f32, 2., 3.]).unwrap())
}

/// Writes `graph` into the export at `dir`, re-signs it, and loads and
/// calls it with `x`: the error either gives.
fn tampered_call(dir: &Path, graph: &serde_json::Value, x: &Tensor) -> Error {
    write_graph(dir, graph);
    match xlafn::load(dir) {
        Ok(loaded) => loaded.call(&[x]).expect_err("a tampered graph ran"),
        Err(e) => e,
    }
}

fn write_graph(dir: &Path, graph: &serde_json::Value) {
    std::fs::write(dir.join("graph.json"), serde_json::to_vec(graph).unwrap()).unwrap();
    xlafn::export::testing::resign(dir).unwrap();
}

fn read_graph(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("graph.json")).unwrap()).unwrap()
}

/// The attributes of the first node of op `name` in `graph`'s top level.
fn op_attrs<'a>(graph: &'a mut serde_json::Value, name: &str) -> &'a mut serde_json::Value {
    graph["nodes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find_map(|n| n["op"].get_mut(name))
        .unwrap_or_else(|| panic!("no {name} node"))
}

/// A change to a saved graph.
type Edit = dyn Fn(&mut serde_json::Value);

#[test]
fn tampered_graphs_are_refused() {
    let (dir, graph) = exported("tamper");
    // The untouched export works for a new shape.
    let loaded = xlafn::load(&dir).unwrap();
    let y = loaded
        .call(&[&Tensor::vector(&[0f32, 0., 0.]).unwrap()])
        .unwrap();
    assert_eq!(y[0].dims(), vec![3, 1]);

    let cases: Vec<(&str, Box<Edit>)> = vec![
        (
            "a node input from the future",
            Box::new(|g| g["nodes"][0]["inputs"][0] = 999.into()),
        ),
        (
            "a result that names nothing",
            Box::new(|g| g["results"][0] = 12345.into()),
        ),
        (
            "an unknown op",
            Box::new(|g| g["nodes"][0]["op"] = serde_json::json!({"launch_missiles": {}})),
        ),
        (
            "a negative parameter size",
            Box::new(|g| g["params"][0]["shape"] = serde_json::json!([-4])),
        ),
        (
            "an absurd parameter size",
            Box::new(|g| g["params"][0]["shape"] = serde_json::json!([i64::MAX, 8])),
        ),
        (
            "not JSON of a graph",
            Box::new(|g| *g = serde_json::json!([1, 2, 3])),
        ),
        (
            "an extra parameter",
            Box::new(|g| {
                g["params"]
                    .as_array_mut()
                    .unwrap()
                    .push(serde_json::json!({"dtype": "F32", "shape": []}))
            }),
        ),
    ];
    for (what, edit) in &cases {
        let mut g = graph.clone();
        edit(&mut g);
        let e = tampered(&dir, &g);
        assert!(
            e.to_string().contains("export") || e.to_string().contains("graph"),
            "{what}: {e}"
        );
    }
    // Edits inside ops: a reshape to a negative size, a region capturing
    // an input its node does not have, a callback never declared.
    let text = serde_json::to_string(&graph).unwrap();
    assert!(text.contains("\"reshape\""), "{text}");
    assert!(text.contains("\"cond\""), "{text}");
    let mut g: serde_json::Value =
        serde_json::from_str(&text.replace("\"dims\":[-1,1]", "\"dims\":[-7,-1]")).unwrap();
    if g != graph {
        let e = tampered(&dir, &g);
        assert!(!e.to_string().is_empty());
    }
    g = graph.clone();
    for node in g["nodes"].as_array_mut().unwrap() {
        if let Some(c) = node["op"].get_mut("cond") {
            c["then_branch"]["captures"] = serde_json::json!([77]);
        }
    }
    let e = tampered(&dir, &g);
    assert!(e.to_string().contains("captures an input"), "{e}");
}

/// A function of `x: f32[None]` returning `sum(x)` (declared `f32[]`) and
/// adding 1 to a variable `v: f32[2]`, exported for `[2]` only.
fn exported_with_update(tag: &str) -> (scratch::ScratchDir, serde_json::Value) {
    let v = Variable::new(Tensor::vector(&[1f32, 2.]).unwrap());
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None], DType::F32)])
        .build(move |x: Tensor| -> Result<Tensor> {
            v.assign_add(&Tensor::vector(&[1f32, 1.])?)?;
            x.reduce_sum(&[], false)
        });
    let cf = f
        .get_concrete_function((TensorSpec::new(&[None], DType::F32),))
        .unwrap();
    let dir = temp_dir(tag);
    cf.export(&dir, &[vec![vec![2]]]).unwrap();
    let graph = read_graph(&dir);
    (dir, graph)
}

/// Programs compiled from a saved graph are checked against the manifest
/// as listed programs are (`check_signature`): a re-signed graph whose
/// update of an `f32[2]` variable is `f32[4]` turned it into four values,
/// and one returning `f32[3]` for a declared `f32[]` output was believed.
#[test]
fn specialized_programs_must_match_the_manifests_outputs_and_updates() {
    let (dir, graph) = exported_with_update("contract");
    let x4 = Tensor::vector(&[1f32, 2., 3., 4.]).unwrap();
    // Untouched, batch 4 compiles from the graph and runs.
    let loaded = xlafn::load(&dir).unwrap();
    assert_eq!(loaded.call(&[&x4]).unwrap()[0].item::<f32>().unwrap(), 10.);
    assert_eq!(
        loaded.variables()[0].read().to_vec::<f32>().unwrap(),
        [2., 3.]
    );

    // The output is the input itself: f32[4] where the manifest says f32[].
    let mut g = graph.clone();
    g["results"][0] = 0.into();
    let e = tampered_call(&dir, &g, &x4).to_string();
    assert!(
        e.contains("result 0 of @main is f32[4]") && e.contains("the manifest says f32()"),
        "{e}"
    );
    assert!(e.contains("graph.json") && e.contains("[[4]]"), "{e}");

    // The variable's update is the input: f32[4] for an f32[2] variable.
    let mut g = graph.clone();
    g["results"][1] = 0.into();
    write_graph(&dir, &g);
    let loaded = xlafn::load(&dir).unwrap();
    let e = loaded.call(&[&x4]).unwrap_err().to_string();
    assert!(
        e.contains("result 1 of @main is f32[4] but updates variable 0 of type f32[2]"),
        "{e}"
    );
    assert_eq!(loaded.variables()[0].read().dims(), vec![2], "unchanged");
    // The listed shape still runs its own (checked) program.
    let x2 = Tensor::vector(&[1f32, 2.]).unwrap();
    assert_eq!(loaded.call(&[&x2]).unwrap()[0].item::<f32>().unwrap(), 3.);
}

/// Attributes are read strictly: an unknown field is refused, not
/// ignored, wherever it is in an op.
#[test]
fn unknown_attribute_fields_are_refused() {
    let (dir, graph) = exported("strict");
    let mut g = graph.clone();
    op_attrs(&mut g, "reshape")["evil"] = 1.into();
    let e = tampered(&dir, &g).to_string();
    assert!(e.contains("unknown field `evil`"), "{e}");

    // Every object inside every op of a function using many ops: ops'
    // attributes, their nested structs (windows, convolution layouts),
    // scalars, regions and the graphs inside them.
    let w = Tensor::from_vec((0..18).map(|i| i as f32 / 9.).collect(), &[3, 3, 1, 2]).unwrap();
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::known(&[2, 6, 6, 1], DType::F32)])
        .build(move |x: Tensor| -> Result<Tensor> {
            let y = x.conv2d(&w, [1, 1], Padding::Same, [1, 1])?;
            let y = y.max_pool(&[2, 2], &[2, 2], Padding::Valid)?;
            let y = y.pad(&[[0, 0], [1, 0], [0, 1], [0, 0]], PadMode::Constant, 0.5)?;
            let y = y.sort(3, true)?.cumsum(1, false, false)?;
            let n = Tensor::scalar(2i32);
            let y = for_range(0, &n, 1, y, |_, y: Tensor| y.mul_scalar(0.5))?;
            let k = Tensor::iota(&[4], 0, DType::I32)?.one_hot(4, 1.0, 0.0, DType::F32)?;
            y.reduce_mean(&[1, 2, 3], false)?
                .add(&k.reduce_sum(&[], false)?)
        });
    let cf = f
        .get_concrete_function((TensorSpec::known(&[2, 6, 6, 1], DType::F32),))
        .unwrap();
    let dir = temp_dir("strict-many");
    cf.export(&dir, &[]).unwrap();
    let graph = read_graph(&dir);
    xlafn::load(&dir).unwrap();
    let mut objects = Vec::new();
    for (k, node) in graph["nodes"].as_array().unwrap().iter().enumerate() {
        objects_under(&node["op"], &format!("/nodes/{k}/op"), &mut objects);
    }
    assert!(objects.len() > 30, "{objects:?}");
    for at in &objects {
        let mut g = graph.clone();
        g.pointer_mut(at)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert("xlafn_unknown".into(), 1.into());
        write_graph(&dir, &g);
        let e = xlafn::load(&dir)
            .err()
            .unwrap_or_else(|| panic!("an unknown field at {at} was ignored"))
            .to_string();
        // A second key beside an enum's tag (an op's name, a scalar's
        // kind) is malformed JSON, and serde names no field then; anywhere
        // else the unknown field is named.
        let object = graph.pointer(at).unwrap().as_object().unwrap();
        let scalar = ["f64_bits", "i64", "u64", "bool"];
        let tagged = at.ends_with("/op") || object.keys().all(|k| scalar.contains(&k.as_str()));
        assert!(
            e.contains("graph.json is not a saved graph")
                && (tagged || e.contains("xlafn_unknown")),
            "{at}: {e}"
        );
    }
}

/// The JSON pointers of `v` (at `at`) and every object inside it.
fn objects_under(v: &serde_json::Value, at: &str, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            out.push(at.to_string());
            for (k, v) in m {
                objects_under(v, &format!("{at}/{k}"), out);
            }
        }
        serde_json::Value::Array(a) => {
            for (k, v) in a.iter().enumerate() {
                objects_under(v, &format!("{at}/{k}"), out);
            }
        }
        _ => {}
    }
}

/// A saved integer constant must be a value of its dtype: NaN used to
/// become 0 (and 2^40 wrap) when lowered, where the API refuses both.
#[test]
fn saved_integer_constants_must_be_whole_finite_and_in_range() {
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None], DType::I32)])
        .build(|x: Tensor| x.add(&Tensor::fill(&[], 3i64, DType::I32)?));
    let cf = f
        .get_concrete_function((TensorSpec::new(&[None], DType::I32),))
        .unwrap();
    let dir = temp_dir("int-constant");
    cf.export(&dir, &[vec![vec![2]]]).unwrap();
    let graph = read_graph(&dir);
    let x = Tensor::from_vec(vec![1i32, 2, 3], &[3]).unwrap();
    let loaded = xlafn::load(&dir).unwrap();
    assert_eq!(
        loaded.call(&[&x]).unwrap()[0].to_vec::<i32>().unwrap(),
        [4, 5, 6]
    );
    let bad = [
        (serde_json::json!({"f64_bits": f64::NAN.to_bits()}), "NaN"),
        (
            serde_json::json!({"f64_bits": f64::INFINITY.to_bits()}),
            "inf",
        ),
        (serde_json::json!({"f64_bits": 2.5f64.to_bits()}), "2.5"),
        (serde_json::json!({"i64": 1i64 << 40}), "1099511627776"),
        (serde_json::json!({"u64": u64::MAX}), "18446744073709551615"),
    ];
    for (value, shown) in bad {
        let mut g = graph.clone();
        op_attrs(&mut g, "constant")["value"] = value;
        let e = tampered_call(&dir, &g, &x).to_string();
        assert!(
            e.contains(&format!("fill: value {shown} is not a i32 value")),
            "{shown}: {e}"
        );
    }
}

/// A loaded function keeps a bounded number of programs for shapes it did
/// not list (2000 batch sizes used to keep 2000, +349 MiB): beyond
/// `XLAFN_EXPORT_SHAPE_CACHE_ENTRIES` the least recently used goes, and
/// comes back compiled again when its shape does. The bound is read once
/// per process, hence the child.
#[test]
fn a_loaded_function_keeps_a_bounded_number_of_shapes() {
    child::assert_child_passes(
        "shape_cache_child",
        &[("XLAFN_EXPORT_SHAPE_CACHE_ENTRIES", "4")],
        Duration::from_secs(300),
    );
}

#[test]
fn shape_cache_child() {
    if !child::is_child("shape_cache_child") {
        return;
    }
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None], DType::F32)])
        .build(|x: Tensor| x.square());
    let cf = f
        .get_concrete_function((TensorSpec::new(&[None], DType::F32),))
        .unwrap();
    let dir = temp_dir("shape-cache");
    cf.export(&dir, &[vec![vec![2]]]).unwrap();
    let loaded = xlafn::load(&dir).unwrap();
    let run = |n: i64| {
        let x = Tensor::from_vec((0..n).map(|i| i as f32).collect(), &[n]).unwrap();
        let want: Vec<f32> = (0..n).map(|i| (i * i) as f32).collect();
        assert_eq!(
            loaded.call(&[&x]).unwrap()[0].to_vec::<f32>().unwrap(),
            want
        );
    };
    run(3);
    for n in 4..16 {
        run(n);
        run(3);
        let shapes = loaded.specializations();
        assert!(shapes.len() <= 1 + 4, "{shapes:?}");
        assert_eq!(shapes[0], vec![vec![2]], "the listed program stays");
    }
    let shapes = loaded.specializations();
    assert!(
        shapes.contains(&vec![vec![3]]),
        "the hot shape stays: {shapes:?}"
    );
    assert!(shapes.contains(&vec![vec![15]]), "{shapes:?}");
    assert!(!shapes.contains(&vec![vec![4]]), "{shapes:?}");
    // An evicted shape compiles again and computes the right thing.
    run(4);
    assert!(loaded.specializations().contains(&vec![vec![4]]));
}
