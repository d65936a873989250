//! The core paths on every device kind (#18 item 6): eager ops, compiled
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
}
