//! The peers' figures that the report's targets are ratios of.
//!
//! By default these are the reference table of the book's benchmarks page, measured on
//! another machine of this kind on another day. The targets are meant as
//! ratios measured beside the peers, and this VM's speed drifts by 2x from
//! day to day, so `--peers FILE` reads figures that `peers.py` measured on
//! this machine: its whole JSON output, or the result line of one worker
//! (`peers.py --worker jax`, with or without its `@@RESULT@@ ` prefix).
//! Figures the file lacks keep their reference value. W10's and W12's
//! "best peer" is the fastest of the peers the file holds.

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
    pub w9_step_jax_jit_ms: Figure,
    pub w9_fwd_jax_jit_ms: Figure,
    /// W10's best peer (ms) and which peer that is.
    pub w10_step_best_ms: (Figure, &'static str),
    pub w11_step_jax_jit_ms: Figure,
    pub w11_fwd_jax_jit_ms: Figure,
    pub w12_tf_jit_ms: Figure,
    /// W12's best peer (ms) and which peer that is.
    pub w12_best_ms: (Figure, &'static str),
    /// W13 (`bench/peers_models.py`): JAX jit's step.
    pub w13_step_jax_jit_ms: Figure,
    /// W14 (`bench/peers_models.py`): JAX jit's step.
    pub w14_step_jax_jit_ms: Figure,
    /// W15 (`bench/peers_models.py`): JAX jit's step.
    pub w15_step_jax_jit_ms: Figure,
}

/// The peers of W10 and W12 in `peers.py`'s result keys, with their names.
const W10_PEERS: [(&str, &str); 3] = [
    ("tf_function", "TF function"),
    ("tf_xla", "TF jit_compile"),
    ("jax_jit", "JAX jit"),
];
const W12_PEERS: [(&str, &str); 5] = [
    ("tf_eager", "TF eager"),
    ("tf_function", "TF function"),
    ("tf_xla", "TF jit_compile"),
    ("jax_eager", "JAX eager"),
    ("jax_jit", "JAX jit"),
];

/// W13's, W14's and W15's JAX jit steps in `bench/peers_models.json`
/// (ms).
const W13_REFERENCE_MS: f64 = 16.63;
const W14_REFERENCE_MS: f64 = 17.05;
const W15_REFERENCE_MS: f64 = 3.61;

/// W7's work per call (2·1024³ flops) and W8's traffic (128 MiB).
const W7_FLOPS: f64 = 2.0 * 1024.0 * 1024.0 * 1024.0;
const W8_BYTES: f64 = 128.0 * 1024.0 * 1024.0;

impl Peers {
    /// the benchmarks page's table (median, reference machine of this kind).
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
            // W9-W12: the benchmarks page's second table (a faster machine).
            w9_step_jax_jit_ms: Figure::reference(4.02),
            w9_fwd_jax_jit_ms: Figure::reference(1.21),
            w10_step_best_ms: (Figure::reference(5.24), "TF function"),
            w11_step_jax_jit_ms: Figure::reference(1.59),
            w11_fwd_jax_jit_ms: Figure::reference(0.36),
            w12_tf_jit_ms: Figure::reference(26.9),
            w12_best_ms: (Figure::reference(18.6), "TF function"),
            // W13-W15: bench/peers_models.py on this project's machine,
            // 2026-11-26 (bench/peers_models.json).
            w13_step_jax_jit_ms: Figure::reference(W13_REFERENCE_MS),
            w14_step_jax_jit_ms: Figure::reference(W14_REFERENCE_MS),
            w15_step_jax_jit_ms: Figure::reference(W15_REFERENCE_MS),
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
        let ms = |cell: &str| steady(cell).map(|s| s * 1e3);
        let best = |prefix: &str, names: &[(&'static str, &'static str)]| {
            names
                .iter()
                .filter_map(|(key, name)| Some((ms(&format!("{prefix}/{key}"))?, *name)))
                .filter(|(v, _)| v.is_finite() && *v > 0.0)
                .min_by(|a, b| a.0.total_cmp(&b.0))
        };
        for (slot, found) in [
            (&mut peers.w10_step_best_ms, best("W10step", &W10_PEERS)),
            (&mut peers.w12_best_ms, best("W12", &W12_PEERS)),
        ] {
            if let Some((value, name)) = found {
                *slot = (
                    Figure {
                        value,
                        measured_here: true,
                    },
                    name,
                );
            }
        }
        let figures: [(&mut Figure, Option<f64>); 14] = [
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
            (&mut peers.w9_step_jax_jit_ms, ms("W9step/jax_jit")),
            (&mut peers.w9_fwd_jax_jit_ms, ms("W9fwd/jax_jit")),
            (&mut peers.w11_step_jax_jit_ms, ms("W11step/jax_jit")),
            (&mut peers.w11_fwd_jax_jit_ms, ms("W11fwd/jax_jit")),
            (&mut peers.w12_tf_jit_ms, ms("W12/tf_xla")),
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

    /// Overrides the model workloads' figures (W13-W15) with what
    /// `bench/peers_models.py` wrote to `path`.
    pub fn with_models_file(mut self, path: &str) -> Result<Peers> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Value(format!("cannot read {path}: {e}")))?;
        let doc: Value = serde_json::from_str(&text)
            .map_err(|e| Error::Value(format!("{path} is not peers_models.py JSON: {e}")))?;
        for (figure, cell) in [
            (&mut self.w13_step_jax_jit_ms, "W13step/jax_jit"),
            (&mut self.w14_step_jax_jit_ms, "W14step/jax_jit"),
            (&mut self.w15_step_jax_jit_ms, "W15step/jax_jit"),
        ] {
            if let Some(value) = doc["results"][cell]["value"]
                .as_f64()
                .filter(|v| v.is_finite() && *v > 0.0)
            {
                *figure = Figure {
                    value,
                    measured_here: true,
                };
            }
        }
        Ok(self)
    }
}
