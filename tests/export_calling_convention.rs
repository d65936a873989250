//! The calling convention of book/src/reference/export-format.md,
//! followed by hand: an export's program is read from the folder, its
//! parameters are assembled from the manifest (inputs, then captures in
//! order from their `.npy` files), and it is compiled and run through the
//! PJRT runtime API alone, without `xlafn::load`. Its results (the
//! outputs, then the variable updates) match values worked out by hand,
//! and feeding an update back as the variable's parameter gives the next
//! call's values.

#[path = "common/scratch.rs"]
mod scratch;

use serde_json::Value;
use std::path::Path;
use xlafn::export::npy;
use xlafn::prelude::*;
use xlafn::runtime::{Buffer, Client, CompileOptions, Executable};
use xlafn::{ArraySpec, DType};

fn dtype(name: &str) -> DType {
    match name {
        "f32" => DType::F32,
        "i32" => DType::I32,
        other => panic!("unexpected dtype {other}"),
    }
}

fn upload(client: &std::sync::Arc<Client>, path: &Path) -> (Buffer, ArraySpec) {
    let a = npy::decode(&std::fs::read(path).unwrap()).unwrap();
    let buffer =
        Buffer::from_bytes(client, client.default_device(), a.dtype, &a.bytes, &a.dims).unwrap();
    (buffer, ArraySpec::new(a.dtype, &a.dims))
}

#[test]
fn an_export_runs_through_the_runtime_api_without_the_loader() {
    // y = x * scale + c + v + n (n an i32 input);  v += x
    let v = Variable::new(Tensor::vector(&[1.0f32, 2.0]).unwrap());
    let c = Tensor::vector(&[10.0f32, 20.0]).unwrap();
    let var = v.clone();
    let f = FunctionOptions::new()
        .name("step")
        .arg_names(&["x", "scale", "n"])
        .build(
            move |x: Tensor, scale: Tensor, n: Tensor| -> Result<Tensor> {
                let y = x
                    .mul(&scale)?
                    .add(&c)?
                    .add(&var.read())?
                    .add(&n.cast(DType::F32)?)?;
                var.assign_add(&x)?;
                Ok(y)
            },
        );
    let specs = (
        TensorSpec::new(&[Some(2)], DType::F32),
        TensorSpec::new(&[], DType::F32),
        TensorSpec::new(&[], DType::I32),
    );
    let scratch = scratch::scratch_dir("convention");
    let dir = scratch.join("convention");
    let _ = std::fs::remove_dir_all(&dir);
    f.get_concrete_function(specs)
        .unwrap()
        .export(&dir, &[])
        .unwrap();

    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("xlafn_export.json")).unwrap()).unwrap();
    let client = Client::cpu().unwrap();
    let device = client.default_device();

    // 1. The inputs, in the manifest's order.
    let inputs = manifest["inputs"].as_array().unwrap();
    let names: Vec<&str> = inputs.iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["x", "scale", "n"]);
    let mut params: Vec<Buffer> = vec![
        Buffer::from_slice(&client, device, &[3.0f32, 4.0], &[2]).unwrap(),
        Buffer::from_slice(&client, device, &[0.5f32], &[]).unwrap(),
        Buffer::from_slice(&client, device, &[100i32], &[]).unwrap(),
    ];
    let mut param_specs: Vec<ArraySpec> = inputs
        .iter()
        .map(|i| {
            let dims: Vec<i64> = i["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_i64().unwrap())
                .collect();
            ArraySpec::new(dtype(i["dtype"].as_str().unwrap()), &dims)
        })
        .collect();
    // 2. The captures, in order, from their files.
    let mut variable_param = Vec::new();
    for capture in manifest["captures"].as_array().unwrap() {
        let index = capture["index"].as_u64().unwrap() as usize;
        let list = match capture["kind"].as_str().unwrap() {
            "constant" => "constants",
            "variable" => {
                variable_param.push((index, params.len()));
                "variables"
            }
            other => panic!("unexpected capture kind {other}"),
        };
        let file = manifest[list][index]["file"].as_str().unwrap();
        let (buffer, spec) = upload(&client, &dir.join(file));
        params.push(buffer);
        param_specs.push(spec);
    }
    assert_eq!(params.len(), 5, "three inputs, a constant and a variable");

    let program = manifest["programs"][0]["file"].as_str().unwrap();
    let text = std::fs::read_to_string(dir.join(program)).unwrap();
    let (var_index, var_param) = variable_param[0];
    let update = &manifest["updates"][0];
    assert_eq!(update["variable"].as_u64().unwrap() as usize, var_index);
    let update_result = update["result"].as_u64().unwrap() as usize;
    assert_eq!(update_result, manifest["outputs"].as_array().unwrap().len());
    assert!(
        text.contains(&format!("tf.aliasing_output = {update_result} : i32")),
        "{text}"
    );
    let options = CompileOptions::for_platform(client.platform());
    let exe = Executable::compile(&client, &text, param_specs, &options).unwrap();

    // x * scale + c + v + n = [1.5 + 10 + 1 + 100, 2 + 20 + 2 + 100]; v + x = [4, 6].
    let args: Vec<&Buffer> = params.iter().collect();
    let results = exe.execute_with(&args, &[var_param as i64]).unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].to_vec::<f32>().unwrap(), vec![112.5, 124.0]);
    assert_eq!(
        results[update_result].to_vec::<f32>().unwrap(),
        vec![4.0, 6.0]
    );

    // Feed the update back as the variable: v = [4, 6] now.
    let mut results = results;
    params[var_param] = results.remove(update_result);
    let args: Vec<&Buffer> = params.iter().collect();
    let again = exe.execute(&args).unwrap();
    assert_eq!(again[0].to_vec::<f32>().unwrap(), vec![115.5, 128.0]);
    assert_eq!(again[1].to_vec::<f32>().unwrap(), vec![7.0, 10.0]);
    std::fs::remove_dir_all(&dir).ok();
}
