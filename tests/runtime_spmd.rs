//! SPMD on the CPU plugin through the runtime alone.
use xlafn::DType;
use xlafn::runtime::{ArraySpec, Buffer, Client, CompileOptions, Executable, Partitioner};

const SHARDY: &str = r#"module @m attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=4]>
  func.func public @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg1: tensor<4x3xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) -> (tensor<8x3xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, tensor<3xf32>) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x4xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %1 = stablehlo.reduce(%0 init: %z) applies stablehlo.add across dimensions = [0] : (tensor<8x3xf32>, tensor<f32>) -> tensor<3xf32>
    return %0, %1 : tensor<8x3xf32>, tensor<3xf32>
  }
}
"#;

/// Sums `x[p*2..p*2+2] . w` by hand: the reference for each partition.
fn reference(x: &[f32], w: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; 8 * 3];
    for i in 0..8 {
        for j in 0..3 {
            out[i * 3 + j] = (0..4).map(|k| x[i * 4 + k] * w[k * 3 + j]).sum();
        }
    }
    out
}

#[test]
fn a_shardy_program_runs_over_four_devices_with_the_all_reduce_xla_inserted() {
    let client = Client::cpu().unwrap();
    let devices = client.devices().to_vec();
    assert!(devices.len() >= 4);
    let options = CompileOptions {
        devices: devices.iter().take(4).map(|d| d.id()).collect(),
        partitioner: Partitioner::Shardy,
        propagate_to_results: vec![false, true],
        ..Default::default()
    };
    let params = vec![
        ArraySpec::new(DType::F32, &[2, 4]),
        ArraySpec::new(DType::F32, &[4, 3]),
    ];
    let exe = Executable::compile(&client, SHARDY, params, &options).unwrap();
    assert_eq!(exe.devices(), &devices[..4]);
    // Each partition's results are its shards.
    assert_eq!(exe.outputs()[0].dims, vec![2, 3]);
    assert_eq!(exe.outputs()[1].dims, vec![3]);
    let x: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let w: Vec<f32> = (0..12).map(|i| (i % 5) as f32).collect();
    let rows: Vec<Buffer> = (0..4)
        .map(|p| Buffer::from_slice(&client, devices[p], &x[p * 8..p * 8 + 8], &[2, 4]).unwrap())
        .collect();
    let weights: Vec<Buffer> = (0..4)
        .map(|p| Buffer::from_slice(&client, devices[p], &w, &[4, 3]).unwrap())
        .collect();
    let args: Vec<Vec<&Buffer>> = (0..4).map(|p| vec![&rows[p], &weights[p]]).collect();
    let outs = exe.execute_partitioned(&args, &[]).unwrap();
    let want = reference(&x, &w);
    let column_sums: Vec<f32> = (0..3)
        .map(|j| (0..8).map(|i| want[i * 3 + j]).sum())
        .collect();
    for (p, out) in outs.iter().enumerate() {
        assert_eq!(out[0].device(), devices[p]);
        assert_eq!(out[0].device_from_plugin().unwrap(), devices[p]);
        assert_eq!(out[0].to_vec::<f32>().unwrap(), want[p * 6..p * 6 + 6]);
        assert_eq!(out[1].to_vec::<f32>().unwrap(), column_sums);
    }
    // The cross-partition sum is XLA's all-reduce, and the result
    // shardings read back: rows over 4 tiles, then replicated.
    let program = exe.optimized().unwrap();
    assert_eq!(program.count("all-reduce"), 1, "{:?}", program.opcodes);
    let results = program.result_shardings();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].tile_assignment_dimensions, vec![4, 1]);
    assert_eq!(results[1].kind, 0, "replicated: {:?}", results[1]);
    assert_eq!(program.parameter_shardings.len(), 2);
}

#[test]
fn arguments_on_the_wrong_device_or_list_count_are_refused() {
    let client = Client::cpu().unwrap();
    let devices = client.devices().to_vec();
    let options = CompileOptions {
        devices: devices.iter().take(4).map(|d| d.id()).collect(),
        partitioner: Partitioner::Shardy,
        propagate_to_results: vec![false, true],
        ..Default::default()
    };
    let params = vec![
        ArraySpec::new(DType::F32, &[2, 4]),
        ArraySpec::new(DType::F32, &[4, 3]),
    ];
    let exe = Executable::compile(&client, SHARDY, params, &options).unwrap();
    let x = Buffer::from_slice(&client, devices[0], &[0f32; 8], &[2, 4]).unwrap();
    let w = Buffer::from_slice(&client, devices[0], &[0f32; 12], &[4, 3]).unwrap();
    let e = exe.execute(&[&x, &w]).unwrap_err().to_string();
    assert!(e.contains("one argument list per device"), "{e}");
    let e = exe
        .execute_partitioned(&[vec![&x, &w], vec![&x, &w]], &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("4 devices, got 2"), "{e}");
    let lists: Vec<Vec<&Buffer>> = (0..4).map(|_| vec![&x, &w]).collect();
    let e = exe
        .execute_partitioned(&lists, &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("is on cpu:0 but the program runs on cpu:1"),
        "{e}"
    );
}

#[test]
fn buffers_copy_between_devices() {
    let client = Client::cpu().unwrap();
    let d = client.devices().to_vec();
    let a = Buffer::from_slice(&client, d[0], &[1i32, 2, 3], &[3]).unwrap();
    let b = a.copy_to_device(d[3]).unwrap();
    assert_eq!((b.device(), b.device_from_plugin().unwrap()), (d[3], d[3]));
    assert_eq!(b.to_vec::<i32>().unwrap(), vec![1, 2, 3]);
    let c = b.copy_to_device(d[3]).unwrap();
    assert_eq!(c.to_vec::<i32>().unwrap(), vec![1, 2, 3]);
    let other = Client::from_plugin(&xlafn::runtime::default_plugin_path().unwrap(), &[]).unwrap();
    let e = a
        .copy_to_device(other.devices()[1])
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not belong"), "{e}");
}
