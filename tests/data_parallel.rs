//! The data-parallel example's training (batch split over
//! 4 CPU devices, weights replicated) gives the losses and weights of one
//! device, and its compiled step holds the all-reduce XLA inserted.

#[path = "../examples/common/data_parallel.rs"]
mod data_parallel;

use xlafn::sharding::Mesh;

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn data_parallel_training_matches_one_device_through_an_all_reduce() {
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let data = data_parallel::batches(3, 64).unwrap();
    let single = data_parallel::trainer(7, None).unwrap();
    let parallel = data_parallel::trainer(7, Some(&mesh)).unwrap();
    let one = data_parallel::train(&single, &data, 12).unwrap();
    let split = data_parallel::split_batches(&data, &mesh).unwrap();
    let four = data_parallel::train(&parallel, &split, 12).unwrap();
    for (i, (a, b)) in one.iter().zip(&four).enumerate() {
        assert!((a - b).abs() < 1e-5, "step {i}: loss {a} vs {b}");
    }
    assert!(one[11] < one[0], "the loss fell: {one:?}");
    let w1 = data_parallel::weights(&single.model).unwrap();
    let w4 = data_parallel::weights(&parallel.model).unwrap();
    for (a, b) in w1.iter().flatten().zip(w4.iter().flatten()) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
    // The weights stayed replicated and one program was compiled.
    let kernel = parallel.model.hidden.kernel.try_read().unwrap();
    assert!(kernel.sharding().unwrap().is_replicated());
    assert_eq!(parallel.step.tracing_count(), 1);
    let programs = parallel.step.concrete_functions()[0].sharded_executables();
    assert_eq!(programs.len(), 1);
    let optimized = programs[0].optimized().unwrap();
    assert!(
        optimized.count("all-reduce") >= 1,
        "no all-reduce in {:?}",
        optimized.opcodes
    );
    // The cross-entropy's label gather stays on each device's rows
    // (take_along_axis is a gather with batching dimensions): no labels
    // are gathered from the other devices.
    assert_eq!(optimized.count("all-gather"), 0, "{:?}", optimized.opcodes);
}
