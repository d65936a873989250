//! `xlafn::bench`. Its statistics are checked on calls of a
//! known length (a sleep), its comparison on a small function: three
//! modes, first calls apart from the steady state, the compiled program's
//! flops from XLA's cost analysis turned into GFLOP/s, the JSON and the
//! SVG chart.
#[path = "common/bounded.rs"]
mod bounded;

use std::time::Duration;
use xlafn::bench::{
    BenchOptions, Comparison, MAX_BLOCKS, Mode, Row, Stats, compare, measure, write_chart,
};
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

/// A comparison of made-up times: every mode's blocks all `us` µs.
fn made_up(name: &str, us: f64) -> Comparison {
    let stats = Stats {
        calls_per_block: 1,
        block_us: vec![us],
        median_us: us,
        min_us: us,
        max_us: us,
        mad_us: 0.0,
        outliers: 0,
    };
    Comparison {
        name: name.into(),
        rows: [Mode::Eager, Mode::Unfused, Mode::Compiled]
            .into_iter()
            .map(|mode| Row {
                mode,
                first_call_ms: 1.0,
                steady: stats.clone(),
                gflops: None,
                gbps: None,
            })
            .collect(),
        flops: None,
        bytes_accessed: None,
    }
}

#[test]
fn an_absurd_block_count_is_refused_before_any_call() {
    let options = BenchOptions {
        blocks: usize::MAX,
        ..BenchOptions::quick()
    };
    let mut calls = 0;
    let e = measure(&options, || {
        calls += 1;
        Ok(())
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains(&MAX_BLOCKS.to_string()), "{e}");
    assert_eq!(calls, 0);
}

#[test]
fn charts_refuse_nan_times_and_draw_extreme_ones_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("chart.svg");
    for bad in [f64::NAN, f64::INFINITY, 0.0, -1.0] {
        let c = made_up("bad", bad);
        let e = c.write_chart(&chart).unwrap_err().to_string();
        assert!(
            e.contains("bad (eager)") && e.contains("finite positive"),
            "{e}"
        );
    }
    assert!(!chart.exists());
    // Times of 1e308 µs (and 5e-324) made the axis' ends overflow.
    for extreme in [1e308, f64::MAX, 5e-324] {
        let c = made_up("extreme", extreme);
        let path = chart.clone();
        bounded::within(10, &format!("write_chart of {extreme} µs"), move || {
            write_chart(&[c, made_up("ordinary", 10.0)], &path).unwrap()
        });
        assert!(std::fs::read_to_string(&chart).unwrap().contains("</svg>"));
    }
}

#[test]
fn bench_outputs_replace_a_planted_link_or_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let c = made_up("linked", 3.0);
    for name in ["bench.json", "bench.svg"] {
        let path = dir.path().join(name);
        std::os::unix::fs::symlink(&victim, &path).unwrap();
    }
    c.write_json(dir.path().join("bench.json")).unwrap();
    c.write_chart(dir.path().join("bench.svg")).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    for name in ["bench.json", "bench.svg"] {
        assert!(
            std::fs::symlink_metadata(dir.path().join(name))
                .unwrap()
                .is_file()
        );
    }
    let fifo = dir.path().join("fifo.json");
    if bounded::mkfifo(&fifo) {
        let f = fifo.clone();
        bounded::within(5, "write_json on a FIFO", move || c.write_json(&f).unwrap());
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&fifo).unwrap()).unwrap();
        assert_eq!(json["name"], "linked");
    }
}
