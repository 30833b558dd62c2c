//! The report's data: one [`Cell`] per measured figure, the [`Report`] of a run with the machine and programs it ran
//! on, and [`check`], which holds a report to the schema.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The report format's version.
pub const SCHEMA: u32 = 1;

/// One figure of the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Cell {
    pub experiment: String,
    /// What carried the traffic: `clear`, `netveil esp aes128gcm16 udp`, `wireguard-go`, ...
    pub path: String,
    /// What was measured, with its parameter: `rtt 64 B`, `overhead`.
    pub metric: String,
    pub unit: String,
    /// The median of `runs`; `None` when the cell could not be measured.
    pub value: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    /// Every repetition's figure.
    pub runs: Vec<f64>,
    /// Why there is no value.
    pub reason: Option<String>,
    /// The study's number for the same measurement, and where it is from.
    pub paper: Option<f64>,
    pub paper_source: Option<String>,
    /// What a formula predicts (bytes of overhead).
    pub expected: Option<f64>,
}

fn median(v: &[f64]) -> f64 {
    crate::bench::ping::median(v)
}

impl Cell {
    /// A measured cell: the median of `runs`, with their min and max (`runs` empty: a cell without value saying
    /// so).
    pub fn measured(
        experiment: &str,
        path: &str,
        metric: &str,
        unit: &str,
        runs: Vec<f64>,
    ) -> Cell {
        if runs.is_empty() {
            return Cell::missing(
                experiment,
                path,
                metric,
                unit,
                "no repetition gave a figure",
            );
        }
        let min = runs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = runs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Cell {
            experiment: experiment.into(),
            path: path.into(),
            metric: metric.into(),
            unit: unit.into(),
            value: Some(median(&runs)),
            min: Some(min),
            max: Some(max),
            runs,
            reason: None,
            paper: None,
            paper_source: None,
            expected: None,
        }
    }

    /// A cell that could not be measured, and why.
    pub fn missing(experiment: &str, path: &str, metric: &str, unit: &str, reason: &str) -> Cell {
        Cell {
            experiment: experiment.into(),
            path: path.into(),
            metric: metric.into(),
            unit: unit.into(),
            value: None,
            min: None,
            max: None,
            runs: Vec::new(),
            reason: Some(reason.into()),
            paper: None,
            paper_source: None,
            expected: None,
        }
    }

    /// The study's number beside this one.
    pub fn paper(mut self, value: f64, source: &str) -> Cell {
        self.paper = Some(value);
        self.paper_source = Some(source.into());
        self
    }

    /// What a formula predicts.
    pub fn expected(mut self, value: f64) -> Cell {
        self.expected = Some(value);
        self
    }
}

/// A run of the lab.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub schema: u32,
    /// The command line.
    pub command: Vec<String>,
    /// netveil's version.
    pub netveil: String,
    /// `uname -r`.
    pub kernel: String,
    /// The CPU's model name and the number of CPUs.
    pub cpu: String,
    /// Each program the lab ran: the first line of its version output (or why there is none).
    pub programs: BTreeMap<String, String>,
    pub quick: bool,
    pub experiments: Vec<String>,
    pub started_unix: u64,
    pub seconds: f64,
    pub cells: Vec<Cell>,
}

/// The first line a program prints for its version (`args`), or why there is none.
pub fn version_line(program: &str, args: &[&str]) -> String {
    match std::process::Command::new(program).args(args).output() {
        Ok(o) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            text.lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("(no version output)")
                .to_string()
        }
        Err(e) => format!("not run: {e}"),
    }
}

/// The kernel release and the CPU's model name with the number of CPUs.
pub fn machine() -> (String, String) {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("unknown: {e}"));
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    (kernel, format!("{model} ({cpus} CPUs)"))
}

/// Whether `report` keeps the schema: every cell a finite value with its runs, min <= value <= max, and no reason,
/// or no value, no runs and a reason; names and units not empty. Every problem found, or `Ok`.
pub fn check(report: &Report) -> std::result::Result<(), Vec<String>> {
    let mut bad = Vec::new();
    if report.schema != SCHEMA {
        bad.push(format!("schema {} (expected {SCHEMA})", report.schema));
    }
    if report.cells.is_empty() {
        bad.push("no cells".into());
    }
    for (i, c) in report.cells.iter().enumerate() {
        let name = format!("cell {i} ({} / {} / {})", c.experiment, c.path, c.metric);
        if [&c.experiment, &c.path, &c.metric, &c.unit]
            .iter()
            .any(|s| s.trim().is_empty())
        {
            bad.push(format!("{name}: an empty name or unit"));
        }
        if !report.experiments.contains(&c.experiment) {
            bad.push(format!("{name}: an experiment the report does not list"));
        }
        match (c.value, &c.reason) {
            (Some(v), None) => {
                let (Some(lo), Some(hi)) = (c.min, c.max) else {
                    bad.push(format!("{name}: a value without min and max"));
                    continue;
                };
                if !v.is_finite() || c.runs.is_empty() || c.runs.iter().any(|r| !r.is_finite()) {
                    bad.push(format!("{name}: a value that is not finite, or no runs"));
                } else if !(lo <= v && v <= hi) {
                    bad.push(format!("{name}: value {v} outside [{lo}, {hi}]"));
                }
            }
            (None, Some(r)) if !r.trim().is_empty() => {
                if !c.runs.is_empty() || c.min.is_some() || c.max.is_some() {
                    bad.push(format!("{name}: figures without a value"));
                }
            }
            (None, _) => bad.push(format!("{name}: neither a value nor a reason")),
            (Some(_), Some(_)) => bad.push(format!("{name}: both a value and a reason")),
        }
        if c.paper.is_some() != c.paper_source.is_some() {
            bad.push(format!(
                "{name}: a paper number without its source, or the reverse"
            ));
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(bad)
    }
}

/// The bytes of a file size as the cells name it ("1KB", "10MB").
pub fn file_bytes(name: &str) -> Option<f64> {
    let (n, unit) = name.split_at(name.find(|c: char| !c.is_ascii_digit())?);
    let n: f64 = n.parse().ok()?;
    Some(match unit {
        "KB" => n * 1e3,
        "MB" => n * 1e6,
        "B" => n,
        _ => return None,
    })
}
