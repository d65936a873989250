//! The peers' figures that the report's targets are ratios of.
//!
//! By default these are the reference table in BENCHMARKS.md, measured on
//! another machine of this kind on another day. The targets are meant as
//! ratios measured beside the peers, and this VM's speed drifts by 2x from
//! day to day, so `--peers FILE` reads figures that `peers.py` measured on
//! this machine: its whole JSON output, or the result line of one worker
//! (`peers.py --worker jax`, with or without its `@@RESULT@@ ` prefix).
//! Figures the file lacks keep their reference value.

use serde_json::Value;
use xlafn::{Error, Result};

/// One peer figure and where it came from.
#[derive(Clone, Copy)]
pub struct Figure {
    pub value: f64,
    pub measured_here: bool,
}

impl Figure {
    const fn reference(value: f64) -> Figure {
        Figure {
            value,
            measured_here: false,
        }
    }
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.measured_here {
            write!(f, "{:.2}, here", self.value)
        } else {
            write!(f, "{}", self.value)
        }
    }
}

pub struct Peers {
    pub w1_jax_jit_us: Figure,
    pub w2_jax_jit_us: Figure,
    pub w3_jax_jit_us: Figure,
    pub w4_jax_jit_us: Figure,
    pub w5_w2_jax_jit_ms: Figure,
    pub w5_w3_jax_jit_ms: Figure,
    pub w6_jax_jit_ms: Figure,
    pub w7_jax_jit_gflops: Figure,
    pub w8_tf_jit_gbps: Figure,
}

/// W7's work per call (2·1024³ flops) and W8's traffic (128 MiB).
const W7_FLOPS: f64 = 2.0 * 1024.0 * 1024.0 * 1024.0;
const W8_BYTES: f64 = 128.0 * 1024.0 * 1024.0;

impl Peers {
    /// BENCHMARKS.md's table (median, reference machine of this kind).
    pub fn reference() -> Peers {
        Peers {
            w1_jax_jit_us: Figure::reference(6.87),
            w2_jax_jit_us: Figure::reference(98.5),
            w3_jax_jit_us: Figure::reference(1017.0),
            w4_jax_jit_us: Figure::reference(165.0),
            w5_w2_jax_jit_ms: Figure::reference(144.0),
            w5_w3_jax_jit_ms: Figure::reference(472.0),
            w6_jax_jit_ms: Figure::reference(2826.0),
            w7_jax_jit_gflops: Figure::reference(181.0),
            w8_tf_jit_gbps: Figure::reference(22.8),
        }
    }

    /// The reference table, overridden by what `path` (peers.py output)
    /// holds.
    pub fn from_file(path: &str) -> Result<Peers> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Value(format!("cannot read {path}: {e}")))?;
        let json = text
            .lines()
            .find_map(|l| l.strip_prefix("@@RESULT@@ "))
            .unwrap_or(&text);
        let doc: Value = serde_json::from_str(json)
            .map_err(|e| Error::Value(format!("{path} is not peers.py JSON: {e}")))?;
        let mut peers = Peers::reference();
        let fresh = &doc["fresh"];
        let steady = |cell: &str| doc["results"][cell]["median_s"].as_f64();
        let figures: [(&mut Figure, Option<f64>); 9] = [
            (
                &mut peers.w1_jax_jit_us,
                steady("W1/jax_jit").map(|s| s * 1e6),
            ),
            (
                &mut peers.w2_jax_jit_us,
                steady("W2/jax_jit").map(|s| s * 1e6),
            ),
            (
                &mut peers.w3_jax_jit_us,
                steady("W3/jax_jit").map(|s| s * 1e6),
            ),
            (
                &mut peers.w4_jax_jit_us,
                steady("W4/jax_jit").map(|s| s * 1e6),
            ),
            (
                &mut peers.w7_jax_jit_gflops,
                steady("W7/jax_jit").map(|s| W7_FLOPS / s / 1e9),
            ),
            (
                &mut peers.w8_tf_jit_gbps,
                steady("W8/tf_xla").map(|s| W8_BYTES / s / 1e9),
            ),
            (
                &mut peers.w5_w2_jax_jit_ms,
                fresh["W5"]["w2/jax_jit"]["first_ms_median"].as_f64(),
            ),
            (
                &mut peers.w5_w3_jax_jit_ms,
                fresh["W5"]["w3/jax_jit"]["first_ms_median"].as_f64(),
            ),
            (
                &mut peers.w6_jax_jit_ms,
                fresh["W6"]["jax_jit"]["total_ms_median"].as_f64(),
            ),
        ];
        for (figure, value) in figures {
            if let Some(value) = value.filter(|v| v.is_finite() && *v > 0.0) {
                *figure = Figure {
                    value,
                    measured_here: true,
                };
            }
        }
        Ok(peers)
    }
}
