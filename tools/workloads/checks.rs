//! The report's targets: a check of one figure against its bound, and
//! the Markdown table of them all (`--markdown`).

use std::fmt::Write as _;

#[derive(Clone, Copy, PartialEq)]
pub enum Kind {
    AtMost,
    AtLeast,
    Exactly,
}

/// One target check: `value` against `bound`.
pub struct Check {
    pub work: &'static str,
    pub what: String,
    pub value: f64,
    pub bound: f64,
    pub kind: Kind,
}

impl Check {
    pub fn new(work: &'static str, what: String, value: f64, kind: Kind, bound: f64) -> Check {
        Check {
            work,
            what,
            value,
            bound,
            kind,
        }
    }

    pub fn at_most(work: &'static str, what: String, value: f64, bound: f64) -> Check {
        Check::new(work, what, value, Kind::AtMost, bound)
    }

    pub fn at_least(work: &'static str, what: String, value: f64, bound: f64) -> Check {
        Check::new(work, what, value, Kind::AtLeast, bound)
    }

    pub fn exactly(work: &'static str, what: String, value: f64, bound: f64) -> Check {
        Check::new(work, what, value, Kind::Exactly, bound)
    }

    pub fn met(&self) -> bool {
        match self.kind {
            Kind::AtMost => self.value <= self.bound,
            Kind::AtLeast => self.value >= self.bound,
            Kind::Exactly => self.value == self.bound,
        }
    }

    /// How far inside (> 1) or outside (< 1) the bound the value is.
    pub fn margin(&self) -> f64 {
        match self.kind {
            Kind::AtMost => self.bound / self.value,
            Kind::AtLeast => self.value / self.bound,
            Kind::Exactly => f64::from(u8::from(self.met())),
        }
    }
}

/// The targets as a Markdown table, with what a reader needs to trust it:
/// the date (UTC), the machine and the command line.
pub fn markdown_table(checks: &[Check], args: &[String]) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "an unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let command = std::iter::once("bench_report".to_string())
        .chain(args.iter().skip(1).cloned())
        .collect::<Vec<_>>()
        .join(" ");
    let mut out = format!(
        "Measured {} on {cpu} ({cores} cores), device {}: `{command}`. \
         A bound is the target's factor times the peer's figure (\"here\": measured \
         on this machine for this run). Margin above 1: inside the bound.\n\n\
         | work | target | xlafn | bound | met | margin |\n|---|---|---|---|---|---|\n",
        utc_date(),
        std::env::var("XLAFN_DEVICE").unwrap_or_else(|_| "cpu".into()),
    );
    for c in checks {
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {:.2} | {} | {:.2}x |",
            c.work,
            c.what.replace('|', "/"),
            c.value,
            c.bound,
            if c.met() { "yes" } else { "no" },
            c.margin()
        );
    }
    out
}

/// Today's date in UTC as `YYYY-MM-DD` (the civil calendar from days
/// since 1970, Howard Hinnant's algorithm).
fn utc_date() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
