//! #30 item 2: `xlafn::bench`. Its statistics are checked on calls of a
//! known length (a sleep), its comparison on a small function: three
//! modes, first calls apart from the steady state, the compiled program's
//! flops from XLA's cost analysis turned into GFLOP/s, the JSON and the
//! SVG chart.
use std::time::Duration;
use xlafn::bench::{BenchOptions, Mode, compare, measure};
use xlafn::prelude::*;

#[test]
fn a_known_sleep_is_measured_as_its_length() {
    let options = BenchOptions {
        warmup: Duration::from_millis(10),
        block: Duration::from_millis(15),
        blocks: 5,
    };
    let stats = measure(&options, || {
        std::thread::sleep(Duration::from_millis(2));
        Ok(())
    })
    .unwrap();
    // A 2 ms sleep takes at least 2 ms, and on a loaded machine not much
    // more; 15 ms blocks of calls of 2 ms or a little more are 8 calls or
    // fewer.
    assert!((2000.0..6000.0).contains(&stats.median_us), "{stats:?}");
    assert!((2..=8).contains(&stats.calls_per_block), "{stats:?}");
    assert_eq!(stats.block_us.len(), 5);
    assert!(stats.min_us <= stats.median_us && stats.median_us <= stats.max_us);
    assert!(stats.min_us >= 2000.0, "{stats:?}");
    assert!(stats.mad_us >= 0.0 && stats.mad_us <= stats.max_us - stats.min_us);
}

#[test]
fn outliers_are_blocks_far_from_the_median() {
    // Every third call sleeps 30 ms, the others 1 ms: with one call per
    // block the slow blocks stand out.
    let options = BenchOptions {
        warmup: Duration::ZERO,
        block: Duration::ZERO,
        blocks: 9,
    };
    let mut n = 0;
    let stats = measure(&options, || {
        n += 1;
        let ms = if n % 3 == 0 { 30 } else { 1 };
        std::thread::sleep(Duration::from_millis(ms));
        Ok(())
    })
    .unwrap();
    assert_eq!(stats.calls_per_block, 1);
    assert!(stats.median_us < 10_000.0, "{stats:?}");
    // The three slow blocks, and perhaps a 1 ms sleep the machine's load
    // stretched (a loaded CI machine once took 2.6 ms for one), but not
    // most of the fast ones.
    assert!((3..=4).contains(&stats.outliers), "{stats:?}");
    let slow = stats.block_us.iter().filter(|&&t| t > 20_000.0).count();
    assert_eq!(slow, 3, "{stats:?}");
}

#[test]
fn errors_in_the_timed_call_come_back() {
    let e = measure(&BenchOptions::quick(), || {
        Err(xlafn::Error::Value("boom".into()))
    })
    .unwrap_err();
    assert!(e.to_string().contains("boom"));
    let none = BenchOptions {
        blocks: 0,
        ..BenchOptions::quick()
    };
    assert!(measure(&none, || Ok(())).is_err());
}

#[test]
fn a_comparison_has_every_mode_its_flops_and_json() {
    let (m, k, n) = (48i64, 32, 24);
    let a = Tensor::ones(&[m, k], DType::F32);
    let b = Tensor::ones(&[k, n], DType::F32);
    let body = |a: Tensor, b: Tensor| a.matmul(&b)?.add_scalar(1.0);
    let report = compare("matmul", body, (a, b), &BenchOptions::quick()).unwrap();
    let modes: Vec<Mode> = report.rows.iter().map(|r| r.mode).collect();
    assert_eq!(modes, vec![Mode::Eager, Mode::Unfused, Mode::Compiled]);
    // The product's flops, and the add's one per element, where the
    // plugin counts them (XLA's CUDA analysis cannot count cuBLAS calls:
    // then there is no figure, and no GFLOP/s).
    let on_cpu = xlafn::runtime::Client::default_client().unwrap().platform()
        == xlafn::runtime::Platform::Cpu;
    if on_cpu {
        assert_eq!(report.flops, Some((2 * m * n * k + m * n) as f64));
    }
    for row in &report.rows {
        assert!(row.steady.median_us > 0.0);
        let Some(flops) = report.flops else {
            assert!(!on_cpu && row.gflops.is_none(), "{row:?}");
            continue;
        };
        let gflops = row.gflops.unwrap();
        let want = flops / (row.steady.median_us * 1e-6) / 1e9;
        assert!((gflops - want).abs() <= 1e-9 * want, "{row:?}");
        assert!(row.gbps.unwrap() > 0.0);
    }
    // The functions' first calls trace and compile.
    let compiled = report.row(Mode::Compiled).unwrap();
    assert!(
        compiled.first_call_ms * 1e3 > compiled.steady.median_us,
        "{compiled:?}"
    );
    let table = report.to_string();
    assert!(
        table.contains("compiled") && table.contains("GFLOP/s"),
        "{table}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.json");
    report.write_json(&path).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let chart = dir.path().join("bench.svg");
    xlafn::bench::write_chart(&[report.clone(), report.clone()], &chart).unwrap();
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    for label in ["eager", "unfused", "compiled", "matmul", "µs per call"] {
        assert!(svg.contains(label), "no {label} in the chart");
    }
    // Two groups of three bars, plus the legend's three swatches.
    let filled_rects = svg.matches("<rect").count();
    assert!(filled_rects >= 9, "{filled_rects} rects");
    assert!(xlafn::bench::write_chart(&[], &chart).is_err());
    assert_eq!(json["name"], "matmul");
    assert_eq!(json["rows"][2]["mode"], "compiled");
    assert!(json["rows"][0]["steady"]["median_us"].as_f64().unwrap() > 0.0);
}
