//! Edge and hostile inputs to the transformations and the pipeline: empty
//! batches, zero-sized targets, huge or negative sizes, and misuse give a
//! value or a clear error, never a panic or a hang.

use xlafn::control::{ScanOptions, scan, scan_with};
use xlafn::data::{Dataset, Pad};
use xlafn::prelude::*;
use xlafn::runtime::HostArray;

#[test]
fn vmap_over_zero_examples_gives_empty_outputs() {
    let xs = Tensor::zeros(&[0, 3], DType::F32);
    let out = xlafn::vmap(
        |a| Ok(vec![a[0].sin()?.reduce_sum(&[], false)?]),
        std::slice::from_ref(&xs),
    )
    .unwrap();
    assert_eq!(out[0].dims(), vec![0]);
    let f = function(|xs: Tensor| xlafn::vmap(|a| Ok(vec![a[0].exp()?]), &[xs]));
    assert_eq!(f.call((&xs,)).unwrap()[0].dims(), vec![0, 3]);
}

#[test]
fn jacobians_of_scalars_and_of_empty_targets() {
    let x = Tensor::scalar(2f64);
    let tape = GradientTape::persistent();
    tape.watch(&x);
    let y = &x * &x * &x;
    let j = tape
        .jacobian(&y, &[(&x).into()])
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!((j.dims(), j.item::<f64>().unwrap()), (vec![], 12.0));
    let empty = Tensor::zeros(&[0], DType::F64);
    tape.watch(&empty);
    let z = empty.sin().unwrap();
    let j = tape.jacobian(&z, &[(&empty).into()]).unwrap().remove(0);
    // No rows: an empty jacobian of the full shape, as TensorFlow gives.
    assert_eq!(j.unwrap().dims(), vec![0, 0]);
    let rows = Tensor::zeros(&[0, 3], DType::F64);
    tape.watch(&rows);
    let b = tape
        .batch_jacobian(&rows.exp().unwrap(), &rows)
        .unwrap()
        .unwrap();
    assert_eq!(b.dims(), vec![0, 3, 3]);
}

#[test]
fn scans_of_one_step_and_misuse() {
    let (c, ys) = scan_with(
        |c: Tensor, x: Tensor| Ok((&c + &x, x.mul_scalar(2.0)?)),
        Tensor::scalar(1f32),
        Tensor::vector(&[5f32]).unwrap(),
        ScanOptions::new().unroll(usize::MAX).reverse(true),
    )
    .unwrap();
    assert_eq!(
        (c.item::<f32>().unwrap(), ys.to_vec::<f32>().unwrap()),
        (6.0, vec![10.0])
    );
    // The same compiled, with an unroll far beyond the length.
    for unroll in [usize::MAX, 3] {
        let f = function(move |xs: Tensor| {
            scan_with(
                |c: Tensor, x: Tensor| Ok((&c + &x, x.mul_scalar(2.0)?)),
                Tensor::scalar(1f32),
                xs,
                ScanOptions::new().unroll(unroll).reverse(true),
            )
        });
        let (c, ys) = f.call((Tensor::vector(&[5f32, 1.]).unwrap(),)).unwrap();
        assert_eq!(
            (c.item::<f32>().unwrap(), ys.to_vec::<f32>().unwrap()),
            (7.0, vec![10.0, 2.0])
        );
    }
    let e = scan_with(
        |c: Tensor, (): ()| Ok((c.clone(), c)),
        Tensor::scalar(0f32),
        (),
        ScanOptions::new().length(-3),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("negative"), "{e}");
    // A length far beyond memory, compiled: a clear error, no allocation.
    let huge = function(|c: Tensor| {
        scan_with(
            |c: Tensor, (): ()| Ok((c.clone(), c)),
            c,
            (),
            ScanOptions::new().length(i64::MAX / 2),
        )
    });
    assert!(huge.call((Tensor::scalar(0f32),)).is_err());
    // Zero steps, as lax.scan: the carry unchanged and empty outputs of
    // the type a step gives (learned without running one), eagerly and
    // compiled.
    let zero_steps = |xs: Tensor| {
        scan(
            |c: Tensor, x: Tensor| {
                Ok((
                    c.add(&x.reduce_sum(&[], false)?)?,
                    (x.matmul(&x.transpose(&[1, 0])?)?, c),
                ))
            },
            Tensor::scalar(1.5f32),
            xs,
        )
    };
    let xs = Tensor::zeros(&[0, 2, 3], DType::F32);
    for (c, (a, b)) in [
        zero_steps(xs.clone()).unwrap(),
        function(zero_steps).call((&xs,)).unwrap(),
    ] {
        assert_eq!(c.item::<f32>().unwrap(), 1.5);
        assert_eq!((a.dims(), a.dtype()), (vec![0, 2, 2], DType::F32));
        assert_eq!(b.dims(), vec![0]);
    }
    // A step that would change the carry is refused even with no steps.
    let e = scan_with(
        |_c: Tensor, x: Tensor| Ok((x.clone(), x)),
        Tensor::scalar(0f32),
        Tensor::zeros(&[0, 4], DType::F32),
        ScanOptions::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("carry"), "{e}");
}

#[test]
fn pipelines_with_extreme_sizes_stay_bounded_and_clear() {
    // A batch size far above the dataset: one short batch, nothing
    // allocated for the size asked.
    let rows = HostArray::from_vec((0..5i64).collect(), &[5]);
    let ds = Dataset::from_tensor_slices(rows).unwrap();
    let batches = ds.batch(usize::MAX, false).collect_epoch(0).unwrap();
    assert_eq!(batches[0].dims, vec![5]);
    assert!(
        ds.batch(usize::MAX, true)
            .collect_epoch(0)
            .unwrap()
            .is_empty()
    );
    // A huge shuffle buffer holds only what the dataset has.
    assert_eq!(ds.shuffle(usize::MAX, 1).collect_epoch(0).unwrap().len(), 5);
    // take/skip past the end, shard of one.
    assert!(ds.skip(u64::MAX).collect_epoch(0).unwrap().is_empty());
    assert_eq!(ds.take(u64::MAX).collect_epoch(0).unwrap().len(), 5);
    assert_eq!(ds.shard(1, 0).collect_epoch(0).unwrap().len(), 5);
    // padded_batch to a negative fixed shape is an error, not a panic.
    let seqs = Dataset::range(1, 3).map(|n| Ok(HostArray::from_vec(vec![1f32; n as usize], &[n])));
    let e = seqs
        .padded_batch(2, false, Pad::new().shapes(vec![Some(vec![-5])]))
        .collect_epoch(0);
    assert!(e.is_err());
    // A map worker count far above the cores is clamped to what is asked
    // without spawning more threads than examples in flight would need.
    let many = Dataset::range(0, 10)
        .map_parallel(64, |x| Ok(x * 2))
        .collect_epoch(0)
        .unwrap();
    assert_eq!(many, (0..10).map(|x| x * 2).collect::<Vec<_>>());
    // A hostile CSV: a field far too long for its dtype parses as an
    // error in its row's place.
    let dir = std::env::temp_dir().join(format!("xlafn-robust-csv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("x.csv");
    std::fs::write(&path, format!("{}\n1\n", "9".repeat(100_000))).unwrap();
    let rows: Vec<_> = Dataset::csv(&path, xlafn::data::CsvOptions::new(&[DType::I32]))
        .iter_epoch(0)
        .collect();
    assert!(rows[0].is_err() && rows[1].is_ok());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn file_sources_refuse_fifos_and_oversized_positions_instead_of_blocking() {
    let dir = std::env::temp_dir().join(format!("xlafn-robust-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("pipe");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        // Opening a FIFO for reading with no writer would block forever.
        let lines: Vec<_> = Dataset::text_lines(&[&fifo]).iter_epoch(0).collect();
        assert!(
            lines[0]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("not a regular file")
        );
        let rows: Vec<_> = Dataset::csv(&fifo, xlafn::data::CsvOptions::new(&[DType::F32]))
            .iter_epoch(0)
            .collect();
        assert!(rows[0].is_err());
        assert!(Dataset::safetensors(&fifo, &[]).is_err());
        assert!(xlafn::train::TrainPosition::read(&fifo).is_err());
    }
    let big = dir.join("ckpt-1.json");
    std::fs::write(&big, vec![b' '; 1 << 20]).unwrap();
    let e = xlafn::train::TrainPosition::read(&big)
        .unwrap_err()
        .to_string();
    assert!(e.contains("larger than"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_metric_that_is_not_one_number_stops_the_run_with_its_name() {
    use xlafn::train::{Metrics, Progress, Trainer};
    let e = Trainer::new(|_: i64| Ok(Metrics::new().with("per_row", Tensor::vector(&[1f32, 2.])?)))
        .progress(Progress::Off)
        .fit(&Dataset::range(0, 2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("per_row") && e.contains("one number"), "{e}");
}
