//! [`write_curve_svg`]: training curves as an SVG line chart, drawn by
//! plotters' SVG backend as `bench::write_chart` is (text is written as
//! SVG `<text>` elements, so no font files are needed).

use std::fmt;
use std::ops::Range;
use std::path::Path;

use plotters::prelude::*;

use crate::error::{Error, Result};

/// The Okabe-Ito palette, told apart by colour-blind readers too.
const COLORS: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
];

/// Writes a line chart of one or more named series of `(step, value)`
/// points to `path` as SVG, with axes, a legend and `title`.
///
/// A point with a non-finite coordinate is skipped and breaks its line
/// (a NaN loss shows as a gap, not as a line to somewhere). With no
/// series, or no finite point in any, there is nothing to draw: an
/// `Error::Value`. The axes span the finite points, clamped to
/// ±[`AXIS_LIMIT`] and widened to at least a millionth of their
/// magnitude: plotters' tick placement never ends on a range whose span
/// overflows (±1e308) or vanishes next to its values (1e16 to 1e16 + 2),
/// so a point beyond the limit is drawn at the frame instead.
///
/// The picture is drawn in memory and written as every file of the crate
/// is (a new file beside `path`, synced, renamed over it): a link or a
/// FIFO at `path` is replaced, never followed or waited on.
///
/// ```
/// let path = std::env::temp_dir().join(format!("xlafn-curve-doc-{}.svg", std::process::id()));
/// let loss = [(0.0, 1.0), (1.0, 0.5), (2.0, 0.3)];
/// xlafn::summary::write_curve_svg(&path, "training", &[("loss", &loss[..])])?;
/// assert!(std::fs::read_to_string(&path).unwrap().contains("training"));
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn write_curve_svg(
    path: impl AsRef<Path>,
    title: &str,
    series: &[(&str, &[(f64, f64)])],
) -> Result<()> {
    let path = path.as_ref();
    let fail = |e: &dyn fmt::Display| Error::Value(format!("cannot draw {}: {e}", path.display()));
    let (x_range, y_range) = ranges(series).ok_or_else(|| {
        Error::Value(format!(
            "write_curve_svg {title:?}: no finite point to draw in {} series",
            series.len()
        ))
    })?;
    let mut svg = String::new();
    draw(&mut svg, title, series, x_range, y_range).map_err(|e| fail(&e))?;
    crate::export::replace_file(path, svg.as_bytes())
}

/// The largest magnitude an axis reaches (1e300): far beyond any metric,
/// and small enough that a span between -1e300 and 1e300, padded, and
/// plotters' powers of ten of it stay finite.
pub const AXIS_LIMIT: f64 = 1e300;

/// Draws the chart into `svg`.
fn draw(
    svg: &mut String,
    title: &str,
    series: &[(&str, &[(f64, f64)])],
    x_range: Range<f64>,
    y_range: Range<f64>,
) -> std::result::Result<(), String> {
    let fail = |e: &dyn fmt::Display| e.to_string();
    let root = SVGBackend::with_string(svg, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(x_range.clone(), y_range.clone())
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("value")
        .draw()
        .map_err(|e| fail(&e))?;
    for (i, (name, points)) in series.iter().enumerate() {
        let style = COLORS[i % COLORS.len()].stroke_width(2);
        // Points beyond the axes (beyond `AXIS_LIMIT`) sit on the frame:
        // plotters' pixel arithmetic overflows far outside it.
        let clamp = |(x, y): (f64, f64)| {
            (
                x.clamp(x_range.start, x_range.end),
                y.clamp(y_range.start, y_range.end),
            )
        };
        let runs: Vec<Vec<(f64, f64)>> = finite_runs(points)
            .into_iter()
            .map(|run| run.into_iter().map(clamp).collect())
            .collect();
        let singles: Vec<(f64, f64)> = runs.iter().filter(|r| r.len() == 1).map(|r| r[0]).collect();
        chart
            .draw_series(runs.into_iter().map(|run| PathElement::new(run, style)))
            .map_err(|e| fail(&e))?
            .label(name.to_string())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        // A run of one point has no line: mark it, or it would not show.
        chart
            .draw_series(
                singles
                    .into_iter()
                    .map(|p| Circle::new(p, 3, style.filled())),
            )
            .map_err(|e| fail(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

/// The maximal runs of consecutive finite points of one series.
fn finite_runs(points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
    points
        .split(|(x, y)| !(x.is_finite() && y.is_finite()))
        .filter(|run| !run.is_empty())
        .map(<[_]>::to_vec)
        .collect()
}

/// The x and y ranges covering every finite point, padded so that lines
/// do not sit on the frame; `None` without a finite point.
fn ranges(series: &[(&str, &[(f64, f64)])]) -> Option<(Range<f64>, Range<f64>)> {
    let finite = || {
        series
            .iter()
            .flat_map(|(_, points)| points.iter())
            .filter(|(x, y)| x.is_finite() && y.is_finite())
    };
    let x = padded(finite().map(|p| p.0))?;
    let y = padded(finite().map(|p| p.1))?;
    Some((x, y))
}

/// `[min, max]` of `values` (clamped to ±[`AXIS_LIMIT`]) widened by 5%
/// each side, and to at least a millionth of its magnitude (by half the
/// magnitude, at least 1, around a single value), since plotters cannot scale an empty range nor one
/// narrower than the precision of its ends.
fn padded(values: impl Iterator<Item = f64>) -> Option<Range<f64>> {
    let (lo, hi) = values.map(|v| v.clamp(-AXIS_LIMIT, AXIS_LIMIT)).fold(
        None,
        |acc: Option<(f64, f64)>, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        },
    )?;
    let magnitude = lo.abs().max(hi.abs());
    let pad = if hi > lo {
        // 1e-200 keeps subnormal spans out of plotters' arithmetic.
        let least = (magnitude * 1e-6).max(1e-200);
        ((hi - lo) * 0.05).max((least - (hi - lo)) / 2.0)
    } else {
        magnitude.max(1.0) * 0.5
    };
    Some(lo - pad..hi + pad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_points_split_runs() {
        let runs = finite_runs(&[(0.0, 1.0), (1.0, f64::NAN), (2.0, 2.0), (3.0, 3.0)]);
        assert_eq!(runs, vec![vec![(0.0, 1.0)], vec![(2.0, 2.0), (3.0, 3.0)]]);
    }

    #[test]
    fn ranges_pad_a_single_value() {
        let pts = [(5.0, 2.0)];
        let (x, y) = ranges(&[("a", &pts[..])]).unwrap();
        assert!(x.start < 5.0 && x.end > 5.0 && y.start < 2.0 && y.end > 2.0);
        assert!(ranges(&[("a", &[(f64::NAN, 1.0)][..])]).is_none());
    }
}
