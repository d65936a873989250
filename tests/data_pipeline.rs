//! `xlafn::data`: order, determinism and coverage of shuffling, batching
//! and sharding; worker threads; failing and panicking map closures; the
//! sources; prefetching to the device and into compiled steps.

#[path = "common/scratch.rs"]
mod scratch;

use std::collections::BTreeSet;
use xlafn::data::{Cardinality, CsvOptions, Dataset, Pad, Placement};
use xlafn::ir::Scalar;
use xlafn::prelude::*;
use xlafn::runtime::HostArray;

fn ints(ds: &Dataset<i64>, epoch: u64) -> Vec<i64> {
    ds.collect_epoch(epoch).unwrap()
}

fn rows(n: i64) -> HostArray {
    HostArray::from_vec((0..n).collect::<Vec<i64>>(), &[n])
}

fn scalar_of(a: &HostArray) -> i64 {
    a.to_vec::<i64>().unwrap()[0]
}

#[test]
fn shuffle_is_a_permutation_fixed_by_seed_and_epoch() {
    let ds = Dataset::range(0, 100).shuffle(100, 7);
    let (e0, e0_again, e1) = (ints(&ds, 0), ints(&ds, 0), ints(&ds, 1));
    assert_eq!(e0, e0_again, "one seed and epoch give one order");
    assert_ne!(e0, e1, "each epoch reshuffles");
    assert_ne!(e0, (0..100).collect::<Vec<_>>());
    for order in [&e0, &e1] {
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>(), "every element once");
    }
    // Another seed, another order; iter() counts epochs from 0.
    assert_ne!(ints(&Dataset::range(0, 100).shuffle(100, 8), 0), e0);
    let counted = Dataset::range(0, 100).shuffle(100, 7);
    let first: Vec<i64> = counted.iter().map(|x| x.unwrap()).collect();
    let second: Vec<i64> = counted.iter().map(|x| x.unwrap()).collect();
    assert_eq!((first, second), (e0, e1));
}

#[test]
fn a_small_shuffle_buffer_only_moves_elements_locally() {
    let order = ints(&Dataset::range(0, 200).shuffle(4, 1), 0);
    for (position, value) in order.iter().enumerate() {
        // An element leaves the buffer no earlier than 3 places before
        // its own index.
        assert!(*value as usize <= position + 3, "{value} at {position}");
    }
    assert_eq!(
        ints(&Dataset::range(0, 10).shuffle(1, 1), 0),
        (0..10).collect::<Vec<_>>()
    );
    let bad = Dataset::range(0, 3).shuffle(0, 1).collect_epoch(0);
    assert!(bad.unwrap_err().to_string().contains("buffer_size"));
}

#[test]
fn repeat_reshuffles_each_repetition_and_counts() {
    let ds = Dataset::range(0, 10).shuffle(10, 3).repeat(Some(3));
    assert_eq!(ds.cardinality(), Cardinality::Finite(30));
    let all = ints(&ds, 0);
    assert_eq!(all.len(), 30);
    let reps: Vec<&[i64]> = all.chunks(10).collect();
    assert_ne!(reps[0], reps[1]);
    for r in reps {
        assert_eq!(r.iter().copied().collect::<BTreeSet<_>>().len(), 10);
    }
    let forever = Dataset::range(0, 3).repeat(None);
    assert_eq!(forever.cardinality(), Cardinality::Infinite);
    assert_eq!(ints(&forever.take(7), 0), vec![0, 1, 2, 0, 1, 2, 0]);
    // An empty dataset repeated forever ends instead of spinning.
    assert!(ints(&Dataset::range(0, 0).repeat(None), 0).is_empty());
}

#[test]
fn take_skip_zip_enumerate_and_filter() {
    let ds = Dataset::range(0, 10);
    assert_eq!(ints(&ds.skip(7), 0), vec![7, 8, 9]);
    assert_eq!(ints(&ds.take(2), 0), vec![0, 1]);
    assert_eq!(ds.skip(7).cardinality(), Cardinality::Finite(3));
    let pairs = ds.zip(&Dataset::range(100, 104)).collect_epoch(0).unwrap();
    assert_eq!(pairs, vec![(0, 100), (1, 101), (2, 102), (3, 103)]);
    let evens = ds.filter(|x| x % 2 == 0);
    assert_eq!(evens.cardinality(), Cardinality::Unknown);
    assert_eq!(ints(&evens, 0), vec![0, 2, 4, 6, 8]);
    let numbered = Dataset::range(5, 8).enumerate().collect_epoch(0).unwrap();
    assert_eq!(numbered, vec![(0, 5), (1, 6), (2, 7)]);
}

#[test]
fn shards_are_disjoint_and_cover_the_dataset() {
    let ds = Dataset::range(0, 23);
    let mut seen = Vec::new();
    for index in 0..4 {
        let shard = ds.shard(4, index);
        let got = ints(&shard, 0);
        assert_eq!(shard.cardinality(), Cardinality::Finite(got.len() as u64));
        assert!(got.iter().all(|x| x % 4 == index as i64));
        seen.extend(got);
    }
    seen.sort();
    assert_eq!(seen, (0..23).collect::<Vec<_>>());
    assert!(ds.shard(4, 4).collect_epoch(0).is_err());
}

#[test]
fn interleave_gives_tensorflows_documented_order() {
    // tf.data.Dataset.interleave's docstring: range(1, 6), each x repeated
    // 6 times, cycle_length=2, block_length=4.
    let ds = Dataset::range(1, 6).interleave(2, 4, |x| Dataset::from_vec(vec![x; 6]));
    let expected = vec![
        1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5,
    ];
    assert_eq!(ints(&ds, 0), expected);
}

#[test]
fn batches_keep_order_and_shapes_with_or_without_the_remainder() {
    let x = HostArray::from_vec((0..20).map(|i| i as f32).collect(), &[10, 2]);
    let y = rows(10);
    let ds = Dataset::from_tensor_slices((x, y)).unwrap();
    assert_eq!(ds.cardinality(), Cardinality::Finite(10));
    let kept = ds.batch(4, false);
    assert_eq!(kept.cardinality(), Cardinality::Finite(3));
    let batches = kept.collect_epoch(0).unwrap();
    let dims: Vec<Vec<i64>> = batches.iter().map(|(x, _)| x.dims.clone()).collect();
    assert_eq!(dims, vec![vec![4, 2], vec![4, 2], vec![2, 2]]);
    assert_eq!(batches[2].1.to_vec::<i64>().unwrap(), vec![8, 9]);
    assert_eq!(
        batches[1].0.to_vec::<f32>().unwrap(),
        (8..16).map(|i| i as f32).collect::<Vec<_>>()
    );
    let dropped = ds.batch(4, true);
    assert_eq!(dropped.cardinality(), Cardinality::Finite(2));
    assert_eq!(dropped.collect_epoch(0).unwrap().len(), 2);
    assert!(
        ds.batch(0, false)
            .collect_epoch(0)
            .unwrap_err()
            .to_string()
            .contains("batch_size")
    );
}

#[test]
fn batch_with_mask_pads_the_last_batch_and_marks_its_rows() {
    let ds = Dataset::from_tensor_slices(rows(5))
        .unwrap()
        .batch_with_mask(2);
    let batches = ds.collect_epoch(0).unwrap();
    assert_eq!(batches.len(), 3);
    let (last, mask) = &batches[2];
    assert_eq!(last.to_vec::<i64>().unwrap(), vec![4, 0]);
    assert_eq!(mask.to_vec::<bool>().unwrap(), vec![true, false]);
    assert_eq!(batches[0].1.to_vec::<bool>().unwrap(), vec![true, true]);
}

#[test]
fn padded_batch_pads_to_the_longest_or_to_fixed_shapes() {
    let sequences =
        Dataset::range(1, 5).map(|n| Ok(HostArray::from_vec(vec![n as i32; n as usize], &[n])));
    let batches = sequences
        .padded_batch(2, false, Pad::new())
        .collect_epoch(0)
        .unwrap();
    assert_eq!(batches[0].dims, vec![2, 2]);
    assert_eq!(batches[0].to_vec::<i32>().unwrap(), vec![1, 0, 2, 2]);
    assert_eq!(batches[1].dims, vec![2, 4]);
    assert_eq!(
        batches[1].to_vec::<i32>().unwrap(),
        vec![3, 3, 3, 0, 4, 4, 4, 4]
    );
    let fixed = sequences
        .padded_batch(
            2,
            false,
            Pad::new()
                .shapes(vec![Some(vec![5])])
                .values(vec![Scalar::I64(-1)]),
        )
        .collect_epoch(0)
        .unwrap();
    assert_eq!(
        fixed[0].to_vec::<i32>().unwrap(),
        vec![1, -1, -1, -1, -1, 2, 2, -1, -1, -1]
    );
    let too_short = sequences.padded_batch(4, false, Pad::new().shapes(vec![Some(vec![3])]));
    assert!(
        too_short
            .collect_epoch(0)
            .unwrap_err()
            .to_string()
            .contains("padded to 3")
    );
    // Rank-2 examples pad in both dimensions.
    let grids = Dataset::range(1, 3)
        .map(|n| Ok(HostArray::from_vec(vec![1f32; (n * n) as usize], &[n, n])));
    let b = grids
        .padded_batch(2, false, Pad::new())
        .collect_epoch(0)
        .unwrap();
    assert_eq!(
        b[0].to_vec::<f32>().unwrap(),
        vec![1., 0., 0., 0., 1., 1., 1., 1.]
    );
}

#[test]
fn batching_examples_of_different_shapes_is_a_clear_error() {
    let ds = Dataset::range(1, 4).map(|n| Ok(HostArray::from_vec(vec![0f32; n as usize], &[n])));
    let err = ds.batch(3, false).collect_epoch(0).unwrap_err().to_string();
    assert!(err.contains("padded_batch") && err.contains("[2]"), "{err}");
}

#[test]
fn parallel_map_keeps_the_order_and_reports_failures_in_place() {
    let ds = Dataset::range(0, 40).map_parallel(4, |x| {
        // Uneven work, so the workers finish out of order.
        std::thread::sleep(std::time::Duration::from_micros(
            ((x * 37) % 7 * 300) as u64,
        ));
        match x {
            5 => Err(Error::Value("five is not allowed".into())),
            9 => panic!("nine panics"),
            x => Ok(x * 10),
        }
    });
    for epoch in 0..2 {
        let items: Vec<Result<i64>> = ds.iter_epoch(epoch).collect();
        assert_eq!(items.len(), 40, "nothing lost or duplicated");
        for (i, item) in items.iter().enumerate() {
            match (i, item) {
                (5, Err(e)) => assert!(e.to_string().contains("five is not allowed"), "{e}"),
                (9, Err(e)) => assert!(
                    e.to_string().contains("panicked on example 9: nine panics"),
                    "{e}"
                ),
                (i, Ok(v)) => assert_eq!(*v, i as i64 * 10),
                (i, Err(e)) => panic!("example {i}: {e}"),
            }
        }
    }
}

#[test]
fn a_batch_keeps_its_examples_across_a_failed_one() {
    let ds = Dataset::from_tensor_slices(rows(10))
        .unwrap()
        .map_parallel(3, |a| {
            if scalar_of(&a) == 5 {
                return Err(Error::Value("bad example".into()));
            }
            Ok(a)
        })
        .batch(4, false);
    let mut good = Vec::new();
    let mut errors = 0;
    for b in ds.iter_epoch(0) {
        match b {
            Ok(b) => good.extend(b.to_vec::<i64>().unwrap()),
            Err(_) => errors += 1,
        }
    }
    assert_eq!(errors, 1);
    assert_eq!(good, vec![0, 1, 2, 3, 4, 6, 7, 8, 9]);
}

#[test]
fn prefetch_runs_ahead_and_a_panicking_source_ends_the_pass_with_an_error() {
    let ds = Dataset::range(0, 50).map(|x| Ok(x + 1)).prefetch(4);
    assert_eq!(ints(&ds, 0), (1..51).collect::<Vec<_>>());
    let panicky = Dataset::from_generator(|| {
        (0..10).map(|x| if x == 3 { panic!("source broke") } else { x })
    })
    .prefetch(2);
    let items: Vec<Result<i64>> = panicky.iter_epoch(0).collect();
    assert_eq!(items.len(), 4);
    assert!(
        items[3]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("source broke")
    );
    // Dropping a pass early stops its thread (the sender sees it gone).
    let mut pass = Dataset::range(0, 1_000_000).prefetch(2).iter_epoch(0);
    assert_eq!(pass.next().unwrap().unwrap(), 0);
    drop(pass);
}

#[test]
fn one_pass_iterators_refuse_a_second_pass() {
    let ds = Dataset::from_iter_once(vec![1, 2, 3]);
    assert_eq!(ds.collect_epoch(0).unwrap(), vec![1, 2, 3]);
    let err = ds.collect_epoch(1).unwrap_err().to_string();
    assert!(err.contains("from_generator"), "{err}");
    let regen = Dataset::from_generator(|| vec![1, 2, 3]);
    assert_eq!(regen.collect_epoch(1).unwrap(), vec![1, 2, 3]);
}

#[test]
fn from_tensor_slices_checks_the_parts() {
    let err = Dataset::from_tensor_slices((rows(3), rows(4)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("same length"), "{err}");
    let scalar = HostArray::from_vec(vec![1f32], &[]);
    assert!(Dataset::from_tensor_slices(scalar).is_err());
    let lying = HostArray {
        dtype: DType::F32,
        dims: vec![4],
        bytes: vec![0; 3],
    };
    assert!(
        Dataset::from_tensor_slices(lying)
            .unwrap_err()
            .to_string()
            .contains("bytes")
    );
}

#[test]
fn file_sources_read_text_csv_npy_npz_and_safetensors() {
    let dir = scratch::scratch_dir("data");
    let text = dir.join("lines.txt");
    std::fs::write(&text, "first\r\nsecond\nthird").unwrap();
    let lines = Dataset::text_lines(&[&text, &text])
        .collect_epoch(0)
        .unwrap();
    assert_eq!(
        lines,
        vec!["first", "second", "third", "first", "second", "third"]
    );

    let csv = dir.join("table.csv");
    std::fs::write(&csv, "x,label,name\n1.5,3,a\n-2,4,b\n").unwrap();
    let opts = CsvOptions::new(&[DType::F32, DType::I32])
        .header(true)
        .select(&[0, 1]);
    let parsed = Dataset::csv(&csv, opts.clone()).collect_epoch(0).unwrap();
    assert_eq!(parsed[1][0].to_vec::<f32>().unwrap(), vec![-2.0]);
    assert_eq!(parsed[1][1].to_vec::<i32>().unwrap(), vec![4]);
    std::fs::write(&csv, "x,label,name\n1.5,3,a\noops,4,b\n").unwrap();
    let err = Dataset::csv(&csv, opts)
        .collect_epoch(0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 3") && err.contains("oops"), "{err}");

    let t = Tensor::from_vec((0..6).map(|i| i as f32).collect(), &[3, 2]).unwrap();
    let npy = dir.join("x.npy");
    xlafn::io::write_npy(&npy, &t).unwrap();
    let from_npy = Dataset::npy(&npy).unwrap().collect_epoch(0).unwrap();
    assert_eq!(from_npy[2].to_vec::<f32>().unwrap(), vec![4., 5.]);
    let labels = Tensor::vector(&[7i32, 8, 9]).unwrap();
    let npz = dir.join("d.npz");
    xlafn::io::write_npz(&npz, &[("x", &t), ("y", &labels)]).unwrap();
    let from_npz = Dataset::npz(&npz, &["y", "x"])
        .unwrap()
        .collect_epoch(0)
        .unwrap();
    assert_eq!(from_npz[1][0].to_vec::<i32>().unwrap(), vec![8]);
    assert_eq!(from_npz[1][1].to_vec::<f32>().unwrap(), vec![2., 3.]);
    assert!(
        Dataset::npz(&npz, &["z"])
            .unwrap_err()
            .to_string()
            .contains("no array 'z'")
    );

    let st = dir.join("d.safetensors");
    let x = Variable::new(t.clone());
    xlafn::checkpoint::save_named(&[("x".to_string(), x)], &st).unwrap();
    let from_st = Dataset::safetensors(&st, &[])
        .unwrap()
        .collect_epoch(0)
        .unwrap();
    assert_eq!(from_st[0][0].to_vec::<f32>().unwrap(), vec![0., 1.]);
    let from_tensors = Dataset::from_tensors(&[&t, &labels])
        .unwrap()
        .collect_epoch(0)
        .unwrap();
    assert_eq!(from_tensors[2][1].to_vec::<i32>().unwrap(), vec![9]);
}

#[test]
fn device_batches_feed_a_compiled_step_without_retracing() {
    let x = HostArray::from_vec((0..24).map(|i| i as f32).collect(), &[12, 2]);
    let y = rows(12);
    let examples = Dataset::from_tensor_slices((x, y)).unwrap().shuffle(12, 5);
    let step =
        function(|x: Tensor, y: Tensor| Ok((x.reduce_sum(&[], false)?, y.reduce_sum(&[], false)?)));
    let mut total = 0f32;
    let mut label_total = 0i64;
    for batch in examples
        .batch(4, true)
        .prefetch_to_device(2, Placement::Default)
        .iter_epoch(0)
    {
        let (x, y) = batch.unwrap();
        let (sx, sy) = step.call((&x, &y)).unwrap();
        total += sx.item::<f32>().unwrap();
        label_total += sy.item::<i64>().unwrap();
    }
    assert_eq!((total, label_total), ((0..24).sum::<i32>() as f32, 66));
    assert_eq!(step.tracing_count(), 1);
    // Keeping the remainder traces once more, for the smaller batch only.
    for batch in examples
        .batch(5, false)
        .prefetch_to_device(2, Placement::Default)
        .iter_epoch(1)
    {
        let (x, y) = batch.unwrap();
        step.call((&x, &y)).unwrap();
    }
    assert_eq!(
        step.tracing_count(),
        3,
        "one trace for 5 rows, one for the last 2"
    );
    let masked = examples
        .batch_with_mask(5)
        .prefetch_to_device(1, Placement::Default);
    let masked_step = function(|x: Tensor, mask: Tensor| {
        let m = mask.cast(DType::F32)?.reshape(&[5, 1])?;
        (x * m).reduce_sum(&[], false)
    });
    let mut masked_total = 0f32;
    for batch in masked.iter_epoch(0) {
        let ((x, _), mask) = batch.unwrap();
        masked_total += masked_step
            .call((&x, &mask))
            .unwrap()
            .item::<f32>()
            .unwrap();
    }
    assert_eq!(masked_total, (0..24).sum::<i32>() as f32);
    assert_eq!(masked_step.tracing_count(), 1);
}

#[test]
fn device_placements_name_the_device_or_split_the_batch() {
    let devices = xlafn::devices().unwrap();
    let ds = Dataset::from_tensor_slices(rows(8)).unwrap().batch(8, true);
    if devices.len() > 1 {
        let on_second = ds
            .prefetch_to_device(1, Placement::Device(devices[1]))
            .collect_epoch(0)
            .unwrap();
        assert_eq!(on_second[0].device().unwrap(), devices[1]);
    }
    let n = devices.len().min(4);
    if n < 2 || 8 % n != 0 {
        return;
    }
    use xlafn::sharding::{Mesh, NamedSharding, PartitionSpec};
    let mesh = Mesh::with_devices(devices[..n].to_vec(), &[("data", n)]).unwrap();
    let rows_sharding = NamedSharding::new(&mesh, PartitionSpec::new([Some("data")])).unwrap();
    let sharded = ds
        .prefetch_to_device(1, Placement::Sharded(rows_sharding))
        .collect_epoch(0)
        .unwrap();
    let shards = sharded[0].addressable_shards().unwrap();
    assert_eq!(shards.len(), n);
    let per = 8 / n as i64;
    assert_eq!(
        shards[1].to_vec::<i64>().unwrap(),
        (per..2 * per).collect::<Vec<_>>()
    );
    assert_eq!(
        sharded[0].to_vec::<i64>().unwrap(),
        (0..8).collect::<Vec<_>>()
    );
}

/// A `.npy` file of a `bool` vector holding these bytes as they are.
fn npy_bools(bytes: &[u8]) -> Vec<u8> {
    let mut header = format!(
        "{{'descr': '|b1', 'fortran_order': False, 'shape': ({},), }}",
        bytes.len()
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut file = b"\x93NUMPY\x01\x00".to_vec();
    file.extend((header.len() as u16).to_le_bytes());
    file.extend(header.as_bytes());
    file.extend(bytes);
    file
}

#[test]
fn bool_bytes_other_than_0_and_1_in_files_read_as_true() {
    let dir = scratch::scratch_dir("data-bools");
    let npy = dir.join("b.npy");
    std::fs::write(&npy, npy_bools(&[0, 1, 2, 255])).unwrap();
    let st = dir.join("b.safetensors");
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::BOOL, vec![4], &[0, 1, 2, 255])
            .unwrap();
    std::fs::write(&st, safetensors::serialize([("b", view)], None).unwrap()).unwrap();
    let from_npy = Dataset::npy(&npy).unwrap().batch(4, false);
    let from_st = Dataset::safetensors(&st, &[]).unwrap().batch(4, false);
    let from_st = from_st.map(|mut parts| Ok(parts.remove(0)));
    for ds in [from_npy, from_st] {
        let batch = ds.collect_epoch(0).unwrap().remove(0);
        assert_eq!(batch.bytes, vec![0, 1, 1, 1]);
        let on_device = Tensor::from_host_bytes(batch.dtype, &batch.dims, &batch.bytes).unwrap();
        let not = on_device.logical_not().unwrap().to_vec::<bool>().unwrap();
        assert_eq!(not, vec![true, false, false, false]);
    }
}

#[test]
fn shard_cardinality_agrees_with_the_pass_for_any_arguments() {
    for (n, shards, index) in [
        (5, u64::MAX, 0),
        (5, u64::MAX, 4),
        (5, u64::MAX, 5),
        (5, u64::MAX - 1, 3),
        (10, 3, 0),
        (10, 3, 1),
        (10, 3, 2),
        (2, 3, 2),
        (0, 2, 1),
    ] {
        let ds = Dataset::range(0, n).shard(shards, index);
        let items = ints(&ds, 0);
        // tf.data: the elements at index, index + num_shards, ...
        let want: Vec<i64> = (0..n).filter(|&i| i as u64 % shards == index).collect();
        assert_eq!(items, want, "shard({shards}, {index}) of {n}");
        assert_eq!(ds.cardinality(), Cardinality::Finite(want.len() as u64));
    }
}

#[test]
fn range_reports_its_exact_count_even_beyond_i64() {
    assert_eq!(
        Dataset::range(i64::MIN, i64::MAX).cardinality(),
        Cardinality::Finite(u64::MAX)
    );
    assert_eq!(
        Dataset::range(-1, i64::MAX).cardinality(),
        Cardinality::Finite(1 << 63)
    );
    assert_eq!(Dataset::range(3, -3).cardinality(), Cardinality::Finite(0));
    let tail = Dataset::range(i64::MAX - 2, i64::MAX);
    assert_eq!(tail.cardinality(), Cardinality::Finite(2));
    assert_eq!(ints(&tail, 0), vec![i64::MAX - 2, i64::MAX - 1]);
}

#[test]
fn padded_batch_refuses_a_pad_value_its_part_cannot_hold() {
    let seqs = |dtype: DType| {
        Dataset::range(1, 3).map(move |n| {
            let a = HostArray::from_vec(vec![1i64; n as usize], &[n]);
            Ok(match dtype {
                DType::U8 => HostArray::from_vec(vec![1u8; n as usize], &[n]),
                DType::I32 => HostArray::from_vec(vec![1i32; n as usize], &[n]),
                _ => a,
            })
        })
    };
    let refused = |dtype, value: Scalar| {
        seqs(dtype)
            .padded_batch(2, false, Pad::new().values(vec![value]))
            .collect_epoch(0)
            .unwrap_err()
            .to_string()
    };
    let e = refused(DType::U8, Scalar::I64(300));
    assert!(
        e.contains("300") && e.contains("u8") && e.contains("part 0"),
        "{e}"
    );
    let e = refused(DType::I32, Scalar::F64(f64::NAN));
    assert!(
        e.contains("NaN") && e.contains("i32") && e.contains("part 0"),
        "{e}"
    );
    assert!(refused(DType::U8, Scalar::I64(-1)).contains("-1"));
    // A value the dtype holds pads as before.
    let ok = seqs(DType::U8).padded_batch(2, false, Pad::new().values(vec![Scalar::I64(255)]));
    let batch = ok.collect_epoch(0).unwrap().remove(0);
    assert_eq!(batch.to_vec::<u8>().unwrap(), vec![1, 255, 1, 1]);
}

#[test]
fn slicing_a_scalar_says_that_slicing_needs_rank_one() {
    let scalar = HostArray::from_vec(vec![1f32], &[]);
    let e = Dataset::from_tensor_slices((rows(2), scalar))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rank >= 1") && e.contains("part 1 is a scalar f32[]"),
        "{e}"
    );
}

#[test]
fn data_errors_say_their_class_once() {
    let dir = scratch::scratch_dir("data-errors");
    let bad_npy = dir.join("bad.npy");
    std::fs::write(&bad_npy, b"not numpy").unwrap();
    let failing_map = Dataset::range(0, 2).map(|x| match x {
        1 => Err(Error::Value("one is odd".into())),
        x => Ok(x),
    });
    let errors = [
        Dataset::range(0, 3)
            .shuffle(0, 1)
            .collect_epoch(0)
            .unwrap_err(),
        Dataset::range(0, 3)
            .shard(2, 5)
            .collect_epoch(0)
            .unwrap_err(),
        Dataset::range(0, 3)
            .interleave(0, 1, |_| Dataset::range(0, 1))
            .collect_epoch(0)
            .unwrap_err(),
        Dataset::from_tensor_slices(rows(3))
            .unwrap()
            .batch(0, false)
            .collect_epoch(0)
            .unwrap_err(),
        failing_map.collect_epoch(0).unwrap_err(),
        Dataset::range(0, 2)
            .map_parallel(2, |x| {
                if x == 1 {
                    Err(Error::Type("typed".into()))
                } else {
                    Ok(x)
                }
            })
            .collect_epoch(0)
            .unwrap_err(),
        Dataset::npy(&bad_npy).unwrap_err(),
    ];
    for e in errors {
        let text = e.to_string();
        let classes = text.matches("Error:").count();
        assert_eq!(classes, 1, "{text}");
    }
    let typed = Dataset::range(0, 2)
        .map(|_| Err::<i64, _>(Error::Type("typed".into())))
        .collect_epoch(0)
        .unwrap_err();
    assert!(
        matches!(typed, Error::Type(_)),
        "the class is kept: {typed}"
    );
}

#[test]
fn a_panicking_generator_is_an_error_naming_it_also_under_map_parallel() {
    let broken = Dataset::from_generator(|| {
        (0..5).map(|x| if x == 2 { panic!("generator broke") } else { x })
    });
    let items: Vec<Result<i64>> = broken.iter_epoch(0).collect();
    assert_eq!(items.len(), 3, "the pass ends at the panic");
    let e = items[2].as_ref().unwrap_err().to_string();
    assert!(
        e.contains("generator panicked at item 2") && e.contains("generator broke"),
        "{e}"
    );
    let mapped: Vec<Result<i64>> = broken
        .map_parallel(2, |x| Ok(x * 10))
        .iter_epoch(0)
        .collect();
    assert_eq!(mapped.len(), 3);
    assert_eq!(*mapped[1].as_ref().unwrap(), 10);
    assert!(
        mapped[2]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("generator broke")
    );
    let unmade = Dataset::<i64>::from_generator(|| -> Vec<i64> { panic!("cannot start") });
    let e = unmade.collect_epoch(0).unwrap_err().to_string();
    assert!(
        e.contains("generator panicked") && e.contains("cannot start"),
        "{e}"
    );
}

#[test]
fn panics_in_filter_interleave_and_one_pass_iterators_are_errors() {
    let filtered: Vec<Result<i64>> = Dataset::range(0, 5)
        .filter(|&x| {
            if x == 2 {
                panic!("filter broke")
            } else {
                x % 2 == 0
            }
        })
        .iter_epoch(0)
        .collect();
    assert_eq!(
        filtered.len(),
        3,
        "the example whose filter panicked is an error in place"
    );
    assert_eq!(
        (
            *filtered[0].as_ref().unwrap(),
            *filtered[2].as_ref().unwrap()
        ),
        (0, 4)
    );
    let e = filtered[1].as_ref().unwrap_err().to_string();
    assert!(
        e.contains("filter panicked on example 2: filter broke"),
        "{e}"
    );

    let interleaved: Vec<Result<i64>> = Dataset::range(0, 3)
        .interleave(2, 1, |x| {
            if x == 1 {
                panic!("cannot open input one");
            }
            Dataset::range(10 * x, 10 * x + 2)
        })
        .iter_epoch(0)
        .collect();
    let e = interleaved[1].as_ref().unwrap_err().to_string();
    assert!(
        e.contains("interleave's function panicked") && e.contains("input one"),
        "{e}"
    );
    let values: Vec<i64> = interleaved.into_iter().filter_map(|x| x.ok()).collect();
    assert_eq!(values, vec![0, 20, 1, 21]);

    let once =
        Dataset::from_iter_once((0..5).map(|x| if x == 1 { panic!("once broke") } else { x }));
    let items: Vec<Result<i64>> = once.iter_epoch(0).collect();
    assert_eq!(items.len(), 2);
    let e = items[1].as_ref().unwrap_err().to_string();
    assert!(
        e.contains("from_iter_once) panicked at item 1") && e.contains("once broke"),
        "{e}"
    );
}
