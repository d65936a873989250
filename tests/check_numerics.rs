//! Check-numerics names the first op producing NaN or Inf, eagerly and in
//! compiled functions, with the function and the calling source line.
//! (One test: the mode is process-wide.)

use xlafn::prelude::*;

#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn the_first_op_producing_nan_or_inf_is_named() {
    xlafn::enable_check_numerics();

    // Eagerly: the log of a negative number.
    let x = Tensor::vector(&[1f32, -1.0]).unwrap();
    let (e, line) = (x.log().unwrap_err(), line!());
    let text = e.to_string();
    assert!(text.contains("op 'log'") && text.contains("NaN"), "{text}");
    assert!(
        text.contains(&format!("tests/check_numerics.rs:{line}:")),
        "names the calling line {line}: {text}"
    );
    // Through an operator, and through a method xlafn builds from others
    // (`zeros_like` fills; `div` by it gives Inf): still the user's line.
    let zero = x.zeros_like().unwrap();
    let (e, line) = (x.div(&zero).unwrap_err(), line!());
    assert!(
        e.to_string()
            .contains(&format!("check_numerics.rs:{line}:")),
        "{e}"
    );
    let r = std::panic::catch_unwind(|| &x / &zero);
    let line = line!() - 1;
    let panic = r.unwrap_err();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains(&format!("check_numerics.rs:{line}:")),
        "{message}"
    );

    // Compiled: sqrt is fine, the division by zero gives Inf first, and the
    // later log never gets a chance to be blamed.
    let f = FunctionOptions::new()
        .name("risky")
        .build(|x: Tensor, y: Tensor| -> Result<Tensor> {
            let s = x.sqrt()?;
            let q = s.div(&y)?; // Inf where y == 0
            q.sub_scalar(10.0)?.log()
        });
    let div_line = line!() - 3;
    let ok = f.call((
        Tensor::vector(&[4f32, 9.0]).unwrap(),
        Tensor::vector(&[0.1f32, 0.1]).unwrap(),
    ));
    assert!(ok.is_ok(), "{ok:?}");
    let e = f
        .call((
            Tensor::vector(&[4f32, 9.0]).unwrap(),
            Tensor::vector(&[0f32, 1.0]).unwrap(),
        ))
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("op 'div'") && text.contains("function 'risky'") && text.contains("Inf"),
        "{text}"
    );
    // The user's InvalidArgumentError, as eagerly, with the check's own
    // message: not `XLA Internal error in PJRT_LoadedExecutable_Execute`.
    assert!(
        matches!(&e, Error::InvalidArgument { op, .. } if op == "check_numerics"),
        "{e:?}"
    );
    assert!(
        text.starts_with("InvalidArgumentError: check_numerics: op 'div'")
            && !text.contains("XLA")
            && !text.contains("Internal")
            && !text.contains("xlafn check failed"),
        "{text}"
    );
    assert!(
        text.contains(&format!("tests/check_numerics.rs:{div_line}:")),
        "names line {div_line}: {text}"
    );

    // Over a mesh: an eager op on a sharded tensor and a partitioned
    // function are checked on the whole value (the check runs on the
    // first device, where XLA gathers it).
    let mesh = xlafn::sharding::Mesh::new(&[("data", 4)]).unwrap();
    let rows = xlafn::sharding::NamedSharding::new(
        &mesh,
        xlafn::sharding::PartitionSpec::new([Some("data")]),
    )
    .unwrap();
    let xs = Tensor::from_vec(vec![1f32, 2., 3., 4., 5., 6., 7., -8.], &[8])
        .unwrap()
        .shard(&rows)
        .unwrap();
    assert_eq!(xs.exp().unwrap().to_vec::<f32>().unwrap().len(), 8);
    let text = xs.log().unwrap_err().to_string();
    assert!(text.contains("op 'log'") && text.contains("NaN"), "{text}");
    let sharded = FunctionOptions::new()
        .name("sharded_sqrt")
        .build(|x: Tensor| x.sqrt());
    let text = sharded.call((&xs,)).unwrap_err().to_string();
    assert!(
        text.starts_with("InvalidArgumentError: check_numerics: op 'sqrt'")
            && text.contains("function 'sharded_sqrt'"),
        "{text}"
    );

    xlafn::disable_check_numerics();
    // Without the mode the same call just returns the NaN/Inf values.
    let g = function(|x: Tensor| x.log());
    let v = g
        .call((Tensor::vector(&[-1f32]).unwrap(),))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!(v[0].is_nan());
}
