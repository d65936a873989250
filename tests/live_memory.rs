//! Memory. `runtime::live_memory` tallies the live buffers and
//! their bytes per device as arrays come and go; a compiled program's
//! memory analysis shows donation (a variable updated in place: its bytes
//! aliased, no new output memory) and its temporaries. One test, so that
//! no other test's buffers come and go meanwhile.
use xlafn::prelude::*;
use xlafn::runtime::{Client, DeviceMemory, Platform, live_memory};

/// The default device's tally (device 0 of the default client: the CPU,
/// or the GPU under `XLAFN_DEVICE=cuda`).
fn default_device_tally() -> (usize, i64) {
    let platform: Platform = Client::default_client().unwrap().platform();
    live_memory()
        .iter()
        .find(|m: &&DeviceMemory| m.platform == platform && m.device == 0)
        .map_or((0, 0), |m| (m.buffers, m.bytes))
}

#[test]
fn live_memory_follows_arrays_and_the_analysis_shows_donation() {
    // Warm the eager path first, so that its own cached arrays exist.
    let warm = Tensor::from_vec(vec![1f32; 4], &[4])
        .unwrap()
        .add_scalar(1.0)
        .unwrap();
    warm.to_vec::<f32>().unwrap();
    drop(warm);
    let (buffers, bytes) = default_device_tally();
    let a = Tensor::from_vec(vec![1f32; 1000], &[1000]).unwrap();
    let b = Tensor::from_vec(vec![2f64; 250], &[5, 50]).unwrap();
    a.block_until_ready().unwrap();
    b.block_until_ready().unwrap();
    assert_eq!(
        default_device_tally(),
        (buffers + 2, bytes + 4000 + 2000),
        "{:?}",
        live_memory()
    );
    drop(a);
    assert_eq!(default_device_tally(), (buffers + 1, bytes + 2000));
    drop(b);
    assert_eq!(default_device_tally(), (buffers, bytes));

    // A step that updates a [256, 256] variable in place: its 256 KiB are
    // an argument and an aliased output.
    let v = Variable::new(Tensor::zeros(&[256, 256], DType::F32));
    let step = {
        let v = v.clone();
        function(move |x: Tensor| -> Result<Tensor> {
            v.assign(&v.read().add(&x)?)?;
            v.read().reduce_sum(&[], false)
        })
    };
    let x = Tensor::ones(&[256, 256], DType::F32);
    let compiled = step.lower((&x,)).unwrap().compile().unwrap();
    let memory = compiled.memory_analysis().unwrap();
    let size = 256 * 256 * 4;
    assert_eq!(memory.argument_bytes, 2 * size, "{memory:?}");
    assert_eq!(memory.alias_bytes, size, "{memory:?}");
    assert!(memory.output_bytes >= size, "{memory:?}");
    // Calls keep the variable's one buffer: none is left behind.
    let before = default_device_tally();
    for _ in 0..3 {
        step.call((&x,)).unwrap().to_vec::<f32>().unwrap();
    }
    assert_eq!(default_device_tally(), before);
    assert_eq!(v.read().to_vec::<f32>().unwrap()[0], 3.0);
}
