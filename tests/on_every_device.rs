//! The core paths on every device kind: eager ops, compiled
//! functions, gradients, variables and a function over all of the
//! client's devices, each as a CPU and a CUDA test (`device_tests!`).
//! On the build machines (no GPU) the CUDA variants are ignored.

#[path = "common/child.rs"]
mod child;
#[path = "common/devices.rs"]
#[macro_use]
mod devices;

use xlafn::prelude::*;
use xlafn::sharding::{Mesh, NamedSharding, PartitionSpec};

device_tests! {
    fn eager_ops_match_the_host() {
        let x = Tensor::from_vec(vec![1f32, -2., 3., -4.], &[2, 2]).unwrap();
        let y = x.abs().unwrap().matmul(&x).unwrap();
        // [[1, 2], [3, 4]] @ [[1, -2], [3, -4]], by hand.
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![7., -10., 15., -22.]);
    }

    fn a_function_and_its_gradient_match_the_host() {
        let f = function(|x: Tensor| -> Result<(Tensor, Tensor)> {
            let tape = GradientTape::new();
            tape.watch(&x);
            let y = x.square()?.reduce_sum(&[], false)?;
            let g = tape.gradient(&y, &[(&x).into()])?.remove(0).expect("watched");
            Ok((y, g))
        });
        let (y, g) = f.call((Tensor::vector(&[1f32, 2., 3.]).unwrap(),)).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![14.]);
        assert_eq!(g.to_vec::<f32>().unwrap(), vec![2., 4., 6.]);
    }

    fn variables_update_in_compiled_steps() {
        let v = Variable::new(Tensor::vector(&[1f32, 1.]).unwrap());
        let step = {
            let v = v.clone();
            function(move |d: Tensor| v.assign_add(&d))
        };
        for _ in 0..3 {
            step.call((Tensor::vector(&[0.5f32, 2.]).unwrap(),)).unwrap();
        }
        assert_eq!(v.read().to_vec::<f32>().unwrap(), vec![2.5, 7.]);
    }

    fn a_function_runs_over_every_device() {
        let n = xlafn::devices().unwrap().len();
        let mesh = Mesh::new(&[("data", n)]).unwrap();
        let rows = NamedSharding::new(&mesh, PartitionSpec::new([Some("data")])).unwrap();
        let f = FunctionOptions::new()
            .in_shardings(vec![Some(rows)])
            .build(|x: Tensor| x.reduce_sum(&[], false));
        let x = Tensor::from_vec((0..4 * n).map(|i| i as f32).collect(), &[4 * n as i64]).unwrap();
        let want = (0..4 * n).sum::<usize>() as f32;
        assert_eq!(f.call((&x,)).unwrap().to_vec::<f32>().unwrap(), vec![want]);
    }

    /// `print` in a compiled function prints on the CPU; elsewhere (no
    /// host callbacks on the CUDA plugin yet) it is a clear error at
    /// compile, never a crash. The CPU-only tests of the suite are marked
    /// with `cfg_attr(xlafn_device_cuda, ignore = ...)` for this reason.
    fn print_in_a_function_prints_or_names_the_cpu_plugin() {
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let f = function(|x: Tensor| -> Result<Tensor> {
            xlafn::print("x:", &[&x])?;
            x.add(&x)
        });
        let on_cpu = xlafn::default_device().unwrap().platform() == xlafn::runtime::Platform::Cpu;
        let got = xlafn::with_print_output(SharedWriter(out.clone()), || {
            f.call((Tensor::vector(&[1f32, 2.]).unwrap(),))
        });
        if on_cpu {
            assert_eq!(got.unwrap().to_vec::<f32>().unwrap(), vec![2., 4.]);
            let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
            assert_eq!(text.trim(), "x: [1. 2.]");
        } else {
            let e = got.unwrap_err().to_string();
            assert!(e.contains("CPU plugin"), "{e}");
        }
    }
}

/// A `Write` that appends to a shared buffer (print's output sink).
struct SharedWriter(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for SharedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
