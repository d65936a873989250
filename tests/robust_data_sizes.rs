//! `xlafn::data` against hostile sizes: every size taken from an argument
//! or a file is checked and bounded before anything is allocated, so a
//! huge one is an error (or, for a buffer depth, a documented cap), never
//! an allocation failure that aborts the process, a capacity-overflow
//! panic or a message as large as the input. The sizes used (2^40 and
//! more) would abort at once if a bound were missing, without touching
//! memory; the files are sparse or small.

#[path = "common/scratch.rs"]
mod scratch;

use xlafn::data::{
    CsvOptions, DEFAULT_MAX_LINE_BYTES, Dataset, MAX_MAP_WORKERS, MAX_PREFETCH_DEPTH, Pad,
};
use xlafn::prelude::*;
use xlafn::runtime::HostArray;

fn five_rows() -> Dataset<HostArray> {
    Dataset::from_tensor_slices(HostArray::from_vec((0..5i64).collect(), &[5])).unwrap()
}

fn first_error<T: Send + 'static>(ds: &Dataset<T>) -> String {
    ds.iter_epoch(0)
        .find_map(|x| x.err())
        .expect("an error")
        .to_string()
}

#[test]
fn a_huge_prefetch_depth_is_capped_not_allocated() {
    assert_eq!(MAX_PREFETCH_DEPTH, 1024);
    for depth in [1 << 24, 1 << 40, usize::MAX] {
        let ds = Dataset::range(0, 5).prefetch(depth);
        assert_eq!(ds.collect_epoch(0).unwrap(), vec![0, 1, 2, 3, 4]);
    }
    let on_device = five_rows().prefetch_to_device(usize::MAX, xlafn::data::Placement::Default);
    assert_eq!(on_device.collect_epoch(0).unwrap().len(), 5);
}

#[test]
fn a_huge_map_worker_count_is_capped_not_started() {
    assert_eq!(MAX_MAP_WORKERS, 256);
    let doubled = Dataset::range(0, 5).map_parallel(usize::MAX, |x| Ok(2 * x));
    assert_eq!(doubled.collect_epoch(0).unwrap(), vec![0, 2, 4, 6, 8]);
}

#[test]
fn a_huge_interleave_cycle_opens_only_the_inputs_there_are() {
    let small = Dataset::range(0, 3).interleave(3, 1, |x| Dataset::range(10 * x, 10 * x + 2));
    let want = small.collect_epoch(0).unwrap();
    assert_eq!(want, vec![0, 10, 20, 1, 11, 21]);
    for cycle in [1 << 40, usize::MAX] {
        let huge =
            Dataset::range(0, 3).interleave(cycle, 1, |x| Dataset::range(10 * x, 10 * x + 2));
        assert_eq!(huge.collect_epoch(0).unwrap(), want, "cycle_length {cycle}");
    }
}

#[test]
fn padded_batch_refuses_a_pad_shape_that_cannot_be_allocated() {
    let seqs = Dataset::range(1, 3).map(|n| Ok(HostArray::from_vec(vec![1u8; n as usize], &[n])));
    let e = first_error(&seqs.padded_batch(2, false, Pad::new().shapes(vec![Some(vec![1 << 40])])));
    assert!(e.contains("part 0") && e.contains("memory"), "{e}");
    // A product that wraps i64 to 0 is caught by the checked product.
    let matrices =
        Dataset::range(1, 3).map(|n| Ok(HostArray::from_vec(vec![1f32; n as usize], &[n, 1])));
    let wraps = Pad::new().shapes(vec![Some(vec![1 << 32, 1 << 32])]);
    let e = first_error(&matrices.padded_batch(2, false, wraps));
    assert!(e.contains("part 0") && e.contains("too large"), "{e}");
    // A shape that fits still pads.
    let fits = Pad::new().shapes(vec![Some(vec![4])]);
    let batch = seqs.padded_batch(2, false, fits).collect_epoch(0).unwrap();
    assert_eq!(
        batch[0].to_vec::<u8>().unwrap(),
        vec![1, 0, 0, 0, 1, 1, 0, 0]
    );
}

#[test]
fn batch_with_mask_refuses_a_batch_size_that_cannot_be_allocated() {
    for size in [1usize << 40, usize::MAX] {
        let e = first_error(&five_rows().batch_with_mask(size));
        assert!(e.contains("batch_with_mask"), "{e}");
    }
    let (rows, mask) = five_rows()
        .batch_with_mask(8)
        .collect_epoch(0)
        .unwrap()
        .remove(0);
    assert_eq!(rows.to_vec::<i64>().unwrap(), vec![0, 1, 2, 3, 4, 0, 0, 0]);
    assert_eq!(
        mask.to_vec::<bool>().unwrap(),
        [true; 5].into_iter().chain([false; 3]).collect::<Vec<_>>()
    );
}

#[test]
fn text_lines_stop_a_file_at_a_line_longer_than_the_bound() {
    let dir = scratch::scratch_dir("data-sizes");
    let path = dir.join("lines.txt");
    std::fs::write(&path, format!("short\r\n{}\nafter\n", "x".repeat(1000))).unwrap();
    let next = dir.join("next.txt");
    std::fs::write(&next, "next file\n").unwrap();
    let items: Vec<_> = Dataset::text_lines_with_limit(&[&path, &next], 100)
        .iter_epoch(0)
        .collect();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0].as_ref().unwrap(), "short");
    let e = items[1].as_ref().unwrap_err().to_string();
    assert!(
        e.contains("line 2 is longer than the 100 bytes") && e.len() < 400,
        "{e}"
    );
    assert_eq!(
        items[2].as_ref().unwrap(),
        "next file",
        "the next file is read"
    );
    // The default bound, against a sparse file of one 4 GiB line: read up
    // to the bound, never whole.
    let sparse = dir.join("sparse.txt");
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    let items: Vec<_> = Dataset::text_lines(&[&sparse]).iter_epoch(0).collect();
    assert_eq!(items.len(), 1);
    let e = items[0].as_ref().unwrap_err().to_string();
    assert!(
        e.contains(&format!("longer than the {DEFAULT_MAX_LINE_BYTES} bytes")),
        "{e}"
    );
}

#[test]
fn csv_refuses_a_record_longer_than_the_bound_and_quotes_fields_briefly() {
    let dir = scratch::scratch_dir("data-sizes");
    let path = dir.join("x.csv");
    std::fs::write(&path, format!("1,2\n3,{}\n5,6\n", "4".repeat(1000))).unwrap();
    let options = CsvOptions::new(&[DType::I32, DType::I32]).max_line_bytes(100);
    let items: Vec<_> = Dataset::csv(&path, options).iter_epoch(0).collect();
    assert_eq!(items.len(), 2, "the pass ends at the long record");
    assert_eq!(
        items[0].as_ref().unwrap()[1].to_vec::<i32>().unwrap(),
        vec![2]
    );
    let e = items[1].as_ref().unwrap_err().to_string();
    assert!(
        e.contains("line 2") && e.contains("longer than 100 bytes"),
        "{e}"
    );
    // The header is a record of its own, not read with the first row
    // against one bound.
    std::fs::write(&path, "ab,cd\n1,2\n").unwrap();
    let options = CsvOptions::new(&[DType::I32, DType::I32])
        .header(true)
        .max_line_bytes(5);
    let rows = Dataset::csv(&path, options).collect_epoch(0).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][0].to_vec::<i32>().unwrap(), vec![1]);
    // A field that does not parse is quoted by a short prefix only.
    std::fs::write(&path, format!("{}\n7\n", "9".repeat(100_000))).unwrap();
    let items: Vec<_> = Dataset::csv(&path, CsvOptions::new(&[DType::I32]))
        .iter_epoch(0)
        .collect();
    let e = items[0].as_ref().unwrap_err().to_string();
    assert!(e.contains("(100000 bytes)") && e.len() < 400, "{e}");
    assert_eq!(
        items[1].as_ref().unwrap()[0].to_vec::<i32>().unwrap(),
        vec![7]
    );
    // The default bound, against a sparse file of one 4 GiB line.
    let sparse = dir.join("sparse.csv");
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    let items: Vec<_> = Dataset::csv(&sparse, CsvOptions::new(&[DType::I32]))
        .iter_epoch(0)
        .collect();
    assert_eq!(items.len(), 1);
    let e = items[0].as_ref().unwrap_err().to_string();
    assert!(
        e.contains(&format!("longer than {DEFAULT_MAX_LINE_BYTES} bytes")),
        "{e}"
    );
}
