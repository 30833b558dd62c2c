//! The overhead lab's report (`netveil lab`, see [`crate::lab_run`]): one [`Cell`] per measured figure, with the
//! machine and programs it was measured on, written as `report.json` (the schema below), `report.csv` and
//! `report.md`.
//!
//! Schema (version [`SCHEMA`]): `{schema, command, netveil, kernel, cpu, programs: {name: version line}, quick,
//! experiments: [name], started_unix, seconds, cells: [Cell]}`; a cell is `{experiment, path, metric, unit, value,
//! min, max, runs, reason, paper, paper_source, expected}`: `value` is the median of `runs` (its min and max beside),
//! or null with `reason` saying why the cell could not be measured; `paper` is the study's number for the same
//! measurement (from `paper_source`), `expected` what a formula predicts (the overhead cells). [`check`] holds a
//! report to this.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

use crate::{Error, Result};

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

fn num(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v:.4}"))
}

/// A CSV field (RFC 4180: quoted when it holds a comma, a quote or a line break).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// `report.csv`: one line per cell.
pub fn csv(report: &Report) -> String {
    let mut out = String::from(
        "experiment,path,metric,unit,value,min,max,repetitions,paper,paper_source,expected,reason\n",
    );
    for c in &report.cells {
        let row = [
            field(&c.experiment),
            field(&c.path),
            field(&c.metric),
            field(&c.unit),
            num(c.value),
            num(c.min),
            num(c.max),
            c.runs.len().to_string(),
            num(c.paper),
            field(c.paper_source.as_deref().unwrap_or("")),
            num(c.expected),
            field(c.reason.as_deref().unwrap_or("")),
        ];
        out += &row.join(",");
        out.push('\n');
    }
    out
}

/// A Markdown table cell (no `|` or line break inside).
fn md(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// `report.md`: the machine, then one table per experiment.
pub fn markdown(report: &Report) -> String {
    let mut out = format!(
        "# netveil lab report\n\n- command: `{}`\n- netveil {}; kernel {}; {}\n- {} cells in {:.0} s{}\n",
        md(&report.command.join(" ")),
        md(&report.netveil),
        md(&report.kernel),
        md(&report.cpu),
        report.cells.len(),
        report.seconds,
        if report.quick { " (--quick)" } else { "" }
    );
    out += "\nPrograms:\n\n";
    for (p, v) in &report.programs {
        out += &format!("- {}: {}\n", md(p), md(v));
    }
    for e in &report.experiments {
        out += &format!(
            "\n## {}\n\n| path | metric | median | min - max | n | paper | expected |\n|---|---|---|---|---|---|---|\n",
            md(e)
        );
        for c in report.cells.iter().filter(|c| &c.experiment == e) {
            let value = match (c.value, &c.reason) {
                (Some(v), _) => format!("{v:.3} {}", md(&c.unit)),
                (None, r) => format!("- ({})", md(r.as_deref().unwrap_or("no value"))),
            };
            let range = match (c.min, c.max) {
                (Some(a), Some(b)) => format!("{a:.3} - {b:.3}"),
                _ => String::new(),
            };
            let paper = match (c.paper, &c.paper_source) {
                (Some(p), Some(s)) => format!("{p} ({})", md(s)),
                _ => String::new(),
            };
            out += &format!(
                "| {} | {} | {value} | {range} | {} | {paper} | {} |\n",
                md(&c.path),
                md(&c.metric),
                c.runs.len(),
                num(c.expected)
            );
        }
    }
    out += "\n## Findings\n\nThe studies' qualitative findings, checked on this run's cells:\n\n";
    for f in findings(report) {
        out += &format!(
            "- {}: **{}** ({})\n",
            md(f.finding),
            f.verdict(),
            md(&f.detail)
        );
    }
    out
}

/// A study's qualitative finding, checked on a run's cells.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub finding: &'static str,
    /// `None`: the run has not the cells to tell.
    pub holds: Option<bool>,
    pub detail: String,
}

impl Finding {
    pub fn verdict(&self) -> &'static str {
        match self.holds {
            Some(true) => "holds",
            Some(false) => "does NOT hold",
            None => "not measured in this run",
        }
    }
}

/// The highest loss level of the run's `loss` cells with a `kind` ("udp" or "tcp") share for `path`: (level, share).
fn kept_at_most_loss(report: &Report, path: &str, kind: &str) -> Option<(f64, f64)> {
    report
        .cells
        .iter()
        .filter(|c| c.experiment == "loss" && c.path == path)
        .filter_map(|c| {
            let level: f64 = c
                .metric
                .strip_prefix(&format!("{kind} kept "))?
                .strip_suffix("% loss")?
                .parse()
                .ok()?;
            Some((level, c.value?))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// The studies' findings that the run's cells can check (issue 25's list, as far as the experiments go).
pub fn findings(report: &Report) -> Vec<Finding> {
    let mut out = Vec::new();
    let formula: Vec<&Cell> = report
        .cells
        .iter()
        .filter(|c| c.experiment == "overhead" && c.expected.is_some() && c.value.is_some())
        .collect();
    let off: Vec<String> = formula
        .iter()
        .filter(|c| c.value != c.expected)
        .map(|c| {
            format!(
                "{}: {} B, formula {} B",
                c.path,
                num(c.value),
                num(c.expected)
            )
        })
        .collect();
    out.push(Finding {
        finding: "overhead bytes per packet equal each protocol's formula",
        holds: (!formula.is_empty()).then_some(off.is_empty()),
        detail: if formula.is_empty() {
            "no overhead cell in this run".into()
        } else if off.is_empty() {
            format!(
                "{} protocols measured, each equal to its formula",
                formula.len()
            )
        } else {
            off.join("; ")
        },
    });
    let psp = kept_at_most_loss(report, "netveil psp aes-gcm-128", "udp");
    out.push(Finding {
        finding: "PSP keeps most of its throughput under loss (the PSP study: 81.2% at 25% loss)",
        holds: psp.map(|(_, k)| k >= 50.0),
        detail: match psp {
            Some((l, k)) => format!("PSP's datagrams kept {k:.1}% of their goodput at {l}% loss"),
            None => "no PSP loss cells".into(),
        },
    });
    let tls = kept_at_most_loss(report, "tls1.3", "tcp");
    out.push(Finding {
        finding: "TLS over TCP loses more of its throughput to loss than PSP's datagrams (the PSP study: TLS 1.3 \
                  keeps 16.3% at 0.2% loss, PSP all)",
        holds: match (tls, psp) {
            (Some((lt, t)), Some((lp, p))) if lt == lp => Some(t < p),
            _ => None,
        },
        detail: match (tls, psp) {
            (Some((lt, t)), Some((lp, p))) => {
                format!("at {lt}% loss TLS 1.3 kept {t:.1}%; at {lp}% PSP's datagrams {p:.1}%")
            }
            _ => "no TLS or PSP loss cells".into(),
        },
    });
    // The IPsec web/email study (Table 4.2): 1 KB files +20-30% network load, 10 MB +5-8%, HTTP.
    let mut paths: Vec<&str> = Vec::new();
    for c in report.cells.iter().filter(|c| c.experiment == "http") {
        if c.metric.starts_with("overhead random ") && !paths.contains(&c.path.as_str()) {
            paths.push(&c.path);
        }
    }
    let small_large: Vec<(String, f64, f64)> = paths
        .into_iter()
        .filter_map(|p| {
            let mut v: Vec<(f64, f64)> = report
                .cells
                .iter()
                .filter(|c| c.experiment == "http" && c.path == p)
                .filter_map(|c| {
                    let size = file_bytes(c.metric.strip_prefix("overhead random ")?)?;
                    Some((size, c.value?))
                })
                .collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            (v.len() >= 2).then(|| (p.to_string(), v[0].1, v[v.len() - 1].1))
        })
        .collect();
    let worse: Vec<String> = small_large
        .iter()
        .filter(|(_, small, large)| small <= large)
        .map(|(p, s, l)| format!("{p}: {s:.1}% smallest vs {l:.1}% largest"))
        .collect();
    out.push(Finding {
        finding: "small files pay relatively more than large ones (the IPsec web study, Table 4.2: 1 KB +20-30% \
                  network load, 10 MB +5-8%; random files here)",
        holds: (!small_large.is_empty()).then_some(worse.is_empty()),
        detail: if small_large.is_empty() {
            "no http overhead cells".into()
        } else if worse.is_empty() {
            small_large
                .iter()
                .map(|(p, s, l)| format!("{p}: {s:.1}% smallest, {l:.1}% largest"))
                .collect::<Vec<_>>()
                .join("; ")
        } else {
            worse.join("; ")
        },
    });
    out.push(smtp_over_http(report));
    out.push(ah_over_esp_auth(report));
    out.push(esp_time_grows_with_size(report));
    out.push(latency_follows_delay(report));
    out.push(voip_jitter_below_limit(report));
    out.push(small_mtu_costs_load(report));
    out.push(user_space_costs_throughput(report));
    out.push(pilsc_fewer_bytes_than_ipsec(report));
    out
}

/// The value of the cell (experiment, path, metric), if measured.
fn value(report: &Report, experiment: &str, path: &str, metric: &str) -> Option<f64> {
    report
        .cells
        .iter()
        .find(|c| c.experiment == experiment && c.path == path && c.metric == metric)
        .and_then(|c| c.value)
}

/// The IPsec web/email study's "SMTP carries more overhead than HTTP" (Table 4.10: an SMTP transfer of a file carries
/// 40-113% more bytes than its HTTP transfer; Table 4.2: IPsec adds 26-36% to a 1 KB file's SMTP load, 20-30% to its
/// HTTP load): per path that both experiments ran and random file, the SMTP transfer's bytes above the HTTP
/// transfer's, and at the smallest file the protocol's share of bytes over clear higher for SMTP, in the data
/// direction (the acknowledgements going the other way vary by a packet or two from run to run, which at 1 KB is a
/// point or two of the share).
fn smtp_over_http(report: &Report) -> Finding {
    let finding = "SMTP carries more overhead than HTTP (the IPsec web/email study, Table 4.10: SMTP +40-113% bytes \
                   over HTTP for the same file; Table 4.2: IPsec +26-36% over clear at 1 KB with SMTP, +20-30% \
                   with HTTP; random files here, the data direction's share at the smallest)";
    let mut more = Vec::new();
    let mut fails = Vec::new();
    let mut small = Vec::new();
    let mut sizes: Vec<(f64, String)> = Vec::new();
    for c in report.cells.iter().filter(|c| c.experiment == "smtp") {
        if let Some(name) = c.metric.strip_prefix("bytes random ") {
            if let Some(b) = file_bytes(name) {
                if !sizes.iter().any(|(_, n)| n == name) {
                    sizes.push((b, name.to_string()));
                }
            }
        }
    }
    sizes.sort_by(|a, b| a.0.total_cmp(&b.0));
    for c in report.cells.iter().filter(|c| c.experiment == "smtp") {
        let Some(name) = c.metric.strip_prefix("bytes random ") else {
            continue;
        };
        let (Some(s), Some(h)) = (c.value, value(report, "http", &c.path, &c.metric)) else {
            continue;
        };
        if h > 0.0 {
            more.push((s / h - 1.0) * 100.0);
        }
        if s <= h {
            fails.push(format!("{} {name}: SMTP {s:.0} B, HTTP {h:.0} B", c.path));
        }
    }
    if let Some((_, name)) = sizes.first() {
        let metric = format!("overhead down random {name}");
        for c in report
            .cells
            .iter()
            .filter(|c| c.experiment == "smtp" && c.metric == metric)
        {
            let (Some(s), Some(h)) = (c.value, value(report, "http", &c.path, &metric)) else {
                continue;
            };
            small.push((c.path.clone(), s, h));
            if s <= h {
                fails.push(format!(
                    "{} {name}: +{s:.1}% over clear with SMTP, +{h:.1}% with HTTP (data direction)",
                    c.path
                ));
            }
        }
    }
    if more.is_empty() || small.is_empty() {
        return Finding {
            finding,
            holds: None,
            detail: "no pair of smtp and http cells".into(),
        };
    }
    let (lo, hi) = more
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    Finding {
        finding,
        holds: Some(fails.is_empty()),
        detail: if fails.is_empty() {
            format!(
                "SMTP carried {lo:+.0}% to {hi:+.0}% bytes over HTTP ({} transfers); at {}, over clear in the data \
                 direction: {}",
                more.len(),
                sizes.first().map_or("", |s| s.1.as_str()),
                small
                    .iter()
                    .map(|(p, s, h)| format!("{p} +{s:.1}% (SMTP) vs +{h:.1}% (HTTP)"))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        } else {
            fails.join("; ")
        },
    }
}

/// The IPsec web/email study's "AH costs more bytes than ESP authentication" (Table 4.6: +4.47% network load from
/// ESP-3DES-SHA1 to ESP-3DES + AH-SHA1 for a 1 KB file over HTTP), on the wire: the bytes per packet of ESP
/// authenticating alone (no encryption) against ESP's framing with AH authenticating.
fn ah_over_esp_auth(report: &Report) -> Finding {
    let finding = "AH costs more bytes than ESP authentication (the IPsec web/email study, Table 4.6: +1.25-4.47% \
                   network load from ESP authentication to AH over HTTP)";
    let esp = value(report, "overhead", "esp transport null-sha1", "overhead");
    let ah = value(
        report,
        "overhead",
        "esp+ah transport null-null + sha1",
        "overhead",
    );
    // The transfers' change where they ran (informative: the finding is judged on the packets).
    let loads: Vec<String> = report
        .cells
        .iter()
        .filter(|c| c.metric.starts_with("auth esp to ah random "))
        .filter_map(|c| {
            Some(format!(
                "{} {}: {:+.2}%",
                c.experiment,
                c.metric.strip_prefix("auth esp to ah random ")?,
                c.value?
            ))
        })
        .collect();
    match (esp, ah) {
        (Some(e), Some(a)) => Finding {
            finding,
            holds: Some(a > e),
            detail: format!(
                "per packet: ESP authenticating {e:.0} B, AH over ESP's framing {a:.0} B{}",
                if loads.is_empty() {
                    String::new()
                } else {
                    format!("; load from ESP to AH authentication: {}", loads.join(", "))
                }
            ),
        },
        _ => Finding {
            finding,
            holds: None,
            detail: "no ESP-authentication or AH overhead cell".into(),
        },
    }
}

/// The distinct paths of `experiment`'s cells that start with `prefix`, in their first order.
fn paths_of<'a>(report: &'a Report, experiment: &str, prefix: &str) -> Vec<&'a str> {
    let mut paths: Vec<&str> = Vec::new();
    for c in report
        .cells
        .iter()
        .filter(|c| c.experiment == experiment && c.path.starts_with(prefix))
    {
        if !paths.contains(&c.path.as_str()) {
            paths.push(&c.path);
        }
    }
    paths
}

/// The measured (x, value) of `path`'s cells in `experiment` whose metric `x_of` reads an x from, sorted by x.
fn series(
    report: &Report,
    experiment: &str,
    path: &str,
    x_of: impl Fn(&str) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = report
        .cells
        .iter()
        .filter(|c| c.experiment == experiment && c.path == path)
        .filter_map(|c| Some((x_of(&c.metric)?, c.value?)))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// A finding judged case by case: it holds when no case failed (`bad`), and is not measured without a case; the
/// detail names the failed cases, or all of them.
fn judged(finding: &'static str, seen: Vec<String>, bad: Vec<String>, none: &str) -> Finding {
    Finding {
        finding,
        holds: (!seen.is_empty()).then_some(bad.is_empty()),
        detail: if seen.is_empty() {
            none.into()
        } else if bad.is_empty() {
            seen.join("; ")
        } else {
            bad.join("; ")
        },
    }
}

/// The bare-PC IPsec study's "ESP processing time grows with packet size" (Figs. 6 and 7, both directions, both
/// modes): per `ops` ESP path and direction, the total at the largest payload above the total at the smallest.
fn esp_time_grows_with_size(report: &Report) -> Finding {
    let finding = "ESP processing time grows with packet size (the bare-PC IPsec study, Figs. 6-7: incoming and \
                   outgoing, transport and tunnel mode)";
    let (mut seen, mut bad) = (Vec::new(), Vec::new());
    for p in paths_of(report, "ops", "esp ") {
        for dir in ["in", "out"] {
            let prefix = format!("{dir} total ");
            let v = series(report, "ops", p, |m| {
                m.strip_prefix(&prefix)?.strip_suffix(" B")?.parse().ok()
            });
            let (Some(small), Some(large)) = (v.first(), v.last()) else {
                continue;
            };
            if v.len() < 2 {
                continue;
            }
            let line = format!(
                "{p} {dir}: {:.0} ns at {} B, {:.0} ns at {} B",
                small.1, small.0, large.1, large.0
            );
            if large.1 <= small.1 {
                bad.push(line.clone());
            }
            seen.push(line);
        }
    }
    judged(finding, seen, bad, "no ops cells")
}

/// The PSP study's "latency grows linearly with delay; PSP and TLS 1.2 measure roughly the sum of the delays on
/// both ends" (Figs. 4.6 and 4.7): per `delay` path and added one-side delay D, the median round trip gained over
/// the same path's at 0 is twice D, within 10% and half a millisecond.
fn latency_follows_delay(report: &Report) -> Finding {
    let finding = "round-trip time grows with the added delay by the delay on both ends (the PSP study, Figs. \
                   4.6-4.7: PSP and TLS 1.2 measure about the sum of the delays)";
    let (mut seen, mut bad) = (Vec::new(), Vec::new());
    for p in paths_of(report, "delay", "") {
        let v = series(report, "delay", p, |m| {
            m.strip_prefix("rtt at ")?.strip_suffix(" ms")?.parse().ok()
        });
        let Some(&(0.0, base)) = v.first() else {
            continue;
        };
        for &(ms, rtt) in &v[1..] {
            let gained = rtt - base;
            let line = format!("{p}: +{gained:.2} ms at {ms} ms on each side");
            if (gained - 2.0 * ms).abs() > 0.1 * 2.0 * ms + 0.5 {
                bad.push(line.clone());
            }
            seen.push(line);
        }
    }
    judged(finding, seen, bad, "no delay cells")
}

/// The L2 study's "jitter stays below the 40 ms limit of good quality in every category" (Fig. 6.8): per `voip`
/// path, the largest RFC 3550 jitter of any of its RTP streams below the limit.
fn voip_jitter_below_limit(report: &Report) -> Finding {
    let finding = "VoIP jitter stays below the 40 ms limit of good quality on every path (the L2 study, Fig. 6.8)";
    let limit = crate::lab_voip::JITTER_LIMIT_MS;
    let (mut seen, mut bad) = (Vec::new(), Vec::new());
    for c in report
        .cells
        .iter()
        .filter(|c| c.experiment == "voip" && c.metric == "rtp max jitter")
    {
        let Some(max) = c.max else { continue };
        let line = format!("{}: at most {max:.2} ms", c.path);
        if max >= limit {
            bad.push(line.clone());
        }
        seen.push(line);
    }
    judged(finding, seen, bad, "no voip cells")
}

/// The IPsec web/email study's MTU sweep (Appendix C): an interface MTU below the ideal one costs more network load
/// (MTU 600: +16.7-18.1% over 1,438 for ESP). Per `mtu` cell `load vs ideal ... at mtu M` with M under the ideal:
/// above 0.
fn small_mtu_costs_load(report: &Report) -> Finding {
    let finding =
        "an interface MTU below the ideal one costs more network load (the IPsec web/email study, \
                   Appendix C: MTU 600 +16.7-18.1% over the ideal 1,438 with ESP)";
    let (mut seen, mut bad) = (Vec::new(), Vec::new());
    for c in report.cells.iter().filter(|c| c.experiment == "mtu") {
        let Some(rest) = c.metric.strip_prefix("load vs ideal ") else {
            continue;
        };
        let Some(mtu) = rest
            .rsplit_once(" at mtu ")
            .and_then(|(_, m)| m.parse::<u16>().ok())
        else {
            continue;
        };
        let (Some(v), true) = (c.value, mtu < crate::lab_mtu::IDEAL) else {
            continue;
        };
        let line = format!("{}: {v:+.1}%", rest);
        if v <= 0.0 {
            bad.push(line.clone());
        }
        seen.push(line);
    }
    judged(finding, seen, bad, "no mtu cells below the ideal")
}

/// The L2 study's "running in user space, even without crypto, costs throughput" (Fig. 6.18: its program without
/// encryption and HMAC kept 30.69% of Ethernet's TCP throughput, with them 3.42%): per `iperf` path through l2sec,
/// the null suite's included, TCP throughput below the plain bridge's.
fn user_space_costs_throughput(report: &Report) -> Finding {
    let finding = "a user-space L2 protocol keeps less than the plain bridge's TCP throughput, even without crypto \
                   (the L2 study, Fig. 6.18: 30.69% without encryption and HMAC, 3.42% with)";
    let (mut seen, mut bad) = (Vec::new(), Vec::new());
    for c in report
        .cells
        .iter()
        .filter(|c| c.experiment == "iperf" && c.metric == "tcp throughput of the bridge's")
    {
        let Some(v) = c.value else { continue };
        let line = format!("{}: {v:.1}% of the bridge's", c.path);
        if v >= 100.0 {
            bad.push(line.clone());
        }
        seen.push(line);
    }
    judged(finding, seen, bad, "no iperf cells through l2sec")
}

/// The PILSC study's "IPsec packets carry 3-4 times more extra bytes than PILSC packets" (Table 8: PILSC 12, IPsec
/// 32-48, cited there): per `overhead` cell of PILSC (either mode), fewer bytes than every IPsec row that stands
/// beside the table (the ESP and ESP+AH rows with a paper value).
fn pilsc_fewer_bytes_than_ipsec(report: &Report) -> Finding {
    let finding =
        "PILSC adds fewer bytes per packet than IPsec (the PILSC study, Table 8: 12 against 32-48)";
    let over = |c: &&Cell| c.experiment == "overhead" && c.value.is_some();
    let ipsec: Vec<(&str, f64)> = report
        .cells
        .iter()
        .filter(over)
        .filter(|c| c.path.starts_with("esp") && c.paper.is_some())
        .filter_map(|c| Some((c.path.as_str(), c.value?)))
        .collect();
    let least = ipsec.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    let (mut seen, mut bad) = (Vec::new(), Vec::new());
    if !ipsec.is_empty() {
        for c in report
            .cells
            .iter()
            .filter(over)
            .filter(|c| c.path.starts_with("pilsc"))
        {
            let Some(v) = c.value else { continue };
            let line = format!(
                "{}: {v:.0} B against IPsec's {least:.0} B or more ({} rows)",
                c.path,
                ipsec.len()
            );
            if v >= least {
                bad.push(line.clone());
            }
            seen.push(line);
        }
    }
    judged(finding, seen, bad, "no PILSC and IPsec overhead cells")
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

/// Writes `report.json`, `report.csv` and `report.md` into `dir` (made if missing).
pub fn write(report: &Report, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(Error::io(format!("cannot make {}", dir.display())))?;
    let json = serde_json::to_string_pretty(report)
        .map_err(|e| Error::Other(format!("the report as JSON: {e}")))?;
    for (name, text) in [
        ("report.json", json),
        ("report.csv", csv(report)),
        ("report.md", markdown(report)),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(Error::io(format!("cannot write {}", p.display())))?;
    }
    Ok(())
}

/// Reads a `report.json` and holds it to the schema ([`check`]); errors name the file.
pub fn read(path: &Path) -> Result<Report> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Usage(format!("--compare: cannot read {}: {e}", path.display())))?;
    let r: Report = serde_json::from_str(&text).map_err(|e| {
        Error::Usage(format!(
            "--compare: {} is not a lab report: {e}",
            path.display()
        ))
    })?;
    check(&r).map_err(|bad| {
        Error::Usage(format!(
            "--compare: {} breaks the report's schema: {}",
            path.display(),
            bad.join("; ")
        ))
    })?;
    Ok(r)
}

/// One cell of two reports (by experiment, path and metric): its value in each (`None`: not measured there, or not
/// in it).
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub experiment: String,
    pub path: String,
    pub metric: String,
    pub unit: String,
    pub old: Option<f64>,
    pub new: Option<f64>,
}

impl Change {
    /// The change in percent of the old value, where both have one (and the old is not 0).
    pub fn percent(&self) -> Option<f64> {
        match (self.old, self.new) {
            (Some(o), Some(n)) if o != 0.0 => Some((n / o - 1.0) * 100.0),
            _ => None,
        }
    }
}

/// Every cell of `new` with its value in `old`, then the cells only `old` has.
pub fn compare(old: &Report, new: &Report) -> Vec<Change> {
    let key = |c: &Cell| (c.experiment.clone(), c.path.clone(), c.metric.clone());
    let olds: std::collections::HashMap<_, _> = old.cells.iter().map(|c| (key(c), c)).collect();
    let news: std::collections::HashSet<_> = new.cells.iter().map(key).collect();
    let change = |c: &Cell, old: Option<f64>, new: Option<f64>| Change {
        experiment: c.experiment.clone(),
        path: c.path.clone(),
        metric: c.metric.clone(),
        unit: c.unit.clone(),
        old,
        new,
    };
    let mut out: Vec<Change> = new
        .cells
        .iter()
        .map(|c| change(c, olds.get(&key(c)).and_then(|o| o.value), c.value))
        .collect();
    out.extend(
        old.cells
            .iter()
            .filter(|c| !news.contains(&key(c)))
            .map(|c| change(c, c.value, None)),
    );
    out
}

/// The comparison as Markdown: one line per cell, the change in percent where both reports measured it.
pub fn compare_markdown(old_name: &str, changes: &[Change]) -> String {
    let mut out = format!(
        "# netveil lab: this run against {}\n\n| experiment | path | metric | before | now | change |\n|---|---|---|---|---|---|\n",
        md(old_name)
    );
    let v =
        |x: Option<f64>, unit: &str| x.map_or("-".to_string(), |x| format!("{x:.3} {}", md(unit)));
    for c in changes {
        out += &format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            md(&c.experiment),
            md(&c.path),
            md(&c.metric),
            v(c.old, &c.unit),
            v(c.new, &c.unit),
            c.percent().map_or("-".to_string(), |p| format!("{p:+.1}%"))
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(cells: Vec<Cell>) -> Report {
        Report {
            schema: SCHEMA,
            command: vec!["netveil".into(), "lab".into()],
            netveil: "0".into(),
            kernel: "6".into(),
            cpu: "x (2 CPUs)".into(),
            programs: BTreeMap::new(),
            quick: true,
            experiments: vec!["ping-rtt".into()],
            started_unix: 0,
            seconds: 1.0,
            cells,
        }
    }

    #[test]
    fn findings_hold_or_fail_on_the_cells_and_say_when_they_cannot_tell() {
        let kept = |path: &str, kind: &str, level: f64, v: f64| {
            Cell::measured(
                "loss",
                path,
                &format!("{kind} kept {level}% loss"),
                "%",
                vec![v],
            )
        };
        let esp = |v: f64| {
            Cell::measured("overhead", "esp", "overhead", "B/packet", vec![v])
                .expected(72.0)
                .paper(32.0, "PILSC, Table 8")
        };
        let good = report(vec![
            esp(72.0),
            kept("netveil psp aes-gcm-128", "udp", 0.0, 100.0),
            kept("netveil psp aes-gcm-128", "udp", 25.0, 75.0),
            kept("tls1.3", "tcp", 25.0, 1.0),
            kept("tls1.3", "tcp", 1.0, 30.0),
        ]);
        let mut good = good;
        for (size, v) in [("1KB", 33.0), ("100KB", 5.0), ("10MB", 4.0)] {
            good.cells.push(Cell::measured(
                "http",
                "esp",
                &format!("overhead random {size}"),
                "%",
                vec![v],
            ));
        }
        // SMTP: more bytes than HTTP, and more over clear at the smallest file; AH's packets larger than ESP's.
        let pair = |r: &mut Report, exp: &str, bytes: [f64; 2], over_1kb: f64| {
            for (size, b) in [("1KB", bytes[0]), ("10MB", bytes[1])] {
                r.cells.push(Cell::measured(
                    exp,
                    "psp",
                    &format!("bytes random {size}"),
                    "B",
                    vec![b],
                ));
            }
            r.cells.push(Cell::measured(
                exp,
                "psp",
                "overhead down random 1KB",
                "%",
                vec![over_1kb],
            ));
        };
        let auth = |r: &mut Report, esp: f64, ah: f64| {
            for (path, v) in [
                ("esp transport null-sha1", esp),
                ("esp+ah transport null-null + sha1", ah),
            ] {
                r.cells.push(Cell::measured(
                    "overhead",
                    path,
                    "overhead",
                    "B/packet",
                    vec![v],
                ));
            }
        };
        // ESP's per-packet time: (size, in total, out total) per mode.
        let ops = |r: &mut Report, pts: &[(u32, f64, f64)]| {
            for mode in ["tunnel", "transport"] {
                for &(size, i, o) in pts {
                    for (dir, v) in [("in", i), ("out", o)] {
                        r.cells.push(Cell::measured(
                            "ops",
                            &format!("esp aes128-sha1 {mode}"),
                            &format!("{dir} total {size} B"),
                            "ns",
                            vec![v],
                        ));
                    }
                }
            }
        };
        pair(&mut good, "http", [2000.0, 1.1e7], 33.0);
        pair(&mut good, "smtp", [5000.0, 1.5e7], 39.0);
        auth(&mut good, 24.0, 36.0);
        ops(
            &mut good,
            &[
                (1024, 3000.0, 2900.0),
                (64, 700.0, 650.0),
                (512, 1800.0, 1700.0),
            ],
        );
        // Round trips at 0 and 10 ms of delay on each side.
        let delay = |r: &mut Report, at0: f64, at10: f64| {
            for (ms, v) in [(0, at0), (10, at10)] {
                r.cells.push(Cell::measured(
                    "delay",
                    "psp",
                    &format!("rtt at {ms} ms"),
                    "ms",
                    vec![v],
                ));
            }
        };
        delay(&mut good, 0.2, 20.4);
        // VoIP: each path's streams' largest jitter (the cell's max), against the 40 ms limit.
        let voip = |r: &mut Report, path: &str, jitters: Vec<f64>| {
            r.cells.push(Cell::measured(
                "voip",
                path,
                "rtp max jitter",
                "ms",
                jitters,
            ));
        };
        voip(&mut good, "plain bridge", vec![0.8, 1.5]);
        voip(&mut good, "l2sec aes128gcm", vec![0.9, 39.0, 2.0]);
        // The MTU sweep: load against the ideal MTU's below it (and above it, which the finding leaves alone).
        let mtu = |r: &mut Report, at: u16, v: f64| {
            r.cells.push(Cell::measured(
                "mtu",
                "esp",
                &format!("load vs ideal random 10KB at mtu {at}"),
                "%",
                vec![v],
            ));
        };
        mtu(&mut good, 600, 12.0);
        mtu(&mut good, 8000, -5.0);
        // iperf: each l2sec path's TCP throughput against the bridge's.
        let iperf = |r: &mut Report, path: &str, v: f64| {
            r.cells.push(Cell::measured(
                "iperf",
                path,
                "tcp throughput of the bridge's",
                "%",
                vec![v],
            ));
        };
        iperf(&mut good, "l2sec null-null (noENC-noHMAC)", 35.8);
        iperf(&mut good, "l2sec aes128gcm", 28.2);
        let pilsc = |r: &mut Report, v: f64| {
            r.cells.push(Cell::measured(
                "overhead",
                "pilsc confidential",
                "overhead",
                "B/packet",
                vec![v],
            ));
        };
        pilsc(&mut good, 12.0);
        let f = findings(&good);
        assert_eq!(f.len(), 12);
        assert_eq!(
            f[11].detail, "pilsc confidential: 12 B against IPsec's 72 B or more (1 rows)",
            "{f:?}"
        );
        assert_eq!(
            f[10].detail,
            "l2sec null-null (noENC-noHMAC): 35.8% of the bridge's; l2sec aes128gcm: 28.2% of the bridge's",
            "{f:?}"
        );
        assert_eq!(f[9].detail, "random 10KB at mtu 600: +12.0%", "{f:?}");
        assert!(
            f[8].detail.contains("l2sec aes128gcm: at most 39.00 ms"),
            "{f:?}"
        );
        assert!(
            f[7].detail.contains("psp: +20.20 ms at 10 ms on each side"),
            "{f:?}"
        );
        assert!(
            f[6].detail
                .contains("esp aes128-sha1 tunnel in: 700 ns at 64 B, 3000 ns at 1024 B"),
            "{f:?}"
        );
        assert!(f[4].detail.contains("+36% to +150%"), "{f:?}");
        assert!(f.iter().all(|f| f.holds == Some(true)), "{f:?}");
        assert!(
            f[1].detail.contains("75.0% of their goodput at 25% loss"),
            "{f:?}"
        );
        // A byte off the formula, PSP keeping less than half, TLS keeping more than PSP: each fails.
        let bad = report(vec![
            esp(73.0),
            kept("netveil psp aes-gcm-128", "udp", 25.0, 40.0),
            kept("tls1.3", "tcp", 25.0, 45.0),
        ]);
        let mut bad = bad;
        for (size, v) in [("1KB", 3.0), ("10MB", 4.0)] {
            bad.cells.push(Cell::measured(
                "http",
                "esp",
                &format!("overhead random {size}"),
                "%",
                vec![v],
            ));
        }
        pair(&mut bad, "http", [2000.0, 1.1e7], 33.0);
        // (Fewer bytes at 10 MB, and less over clear at 1 KB: two failures, both named.)
        pair(&mut bad, "smtp", [5000.0, 1.0e7], 30.0);
        auth(&mut bad, 24.0, 24.0);
        ops(&mut bad, &[(64, 700.0, 650.0), (1024, 3000.0, 640.0)]);
        // Half the delay: one side's only.
        delay(&mut bad, 0.2, 10.2);
        // One stream at the limit (the median well below it).
        voip(&mut bad, "l2sec aes128gcm", vec![0.9, 40.0, 2.0]);
        mtu(&mut bad, 600, -0.5);
        iperf(&mut bad, "l2sec null-null (noENC-noHMAC)", 100.5);
        pilsc(&mut bad, 80.0);
        let f = findings(&bad);
        assert!(
            f[6].detail
                .contains("out: 650 ns at 64 B, 640 ns at 1024 B"),
            "{f:?}"
        );
        assert!(f.iter().all(|f| f.holds == Some(false)), "{f:?}");
        assert!(
            f[4].detail.contains("psp 10MB") && f[4].detail.contains("psp 1KB"),
            "{f:?}"
        );
        assert_eq!(file_bytes("10MB"), Some(1e7));
        assert_eq!(file_bytes("100KB"), Some(1e5));
        assert!(f[0].detail.contains("esp: 73"), "{f:?}");
        // No cells: not measured, and the report says so.
        let none = report(vec![]);
        assert!(findings(&none).iter().all(|f| f.holds.is_none()));
        assert!(markdown(&none).contains("not measured in this run"));
    }

    #[test]
    fn a_cell_is_a_median_with_its_range_or_a_reason() {
        let c = Cell::measured("ping-rtt", "clear", "rtt 64 B", "ms", vec![3.0, 1.0, 2.0]);
        assert_eq!((c.value, c.min, c.max), (Some(2.0), Some(1.0), Some(3.0)));
        let m = Cell::measured("ping-rtt", "clear", "rtt 64 B", "ms", vec![]);
        assert!(m.value.is_none() && m.reason.is_some());
        assert!(check(&report(vec![c.clone(), m])).is_ok());
        // Each way a cell can break the schema is found.
        let mut no_reason = Cell::missing("ping-rtt", "wg", "rtt", "ms", "x");
        no_reason.reason = None;
        let mut both = c.clone();
        both.reason = Some("x".into());
        let mut outside = c.clone();
        outside.value = Some(9.0);
        let mut nan = c.clone();
        nan.value = Some(f64::NAN);
        let mut stranger = c.clone();
        stranger.experiment = "other".into();
        let mut half_paper = c.clone();
        half_paper.paper = Some(1.0);
        for bad in [no_reason, both, outside, nan, stranger, half_paper] {
            assert!(check(&report(vec![bad.clone()])).is_err(), "{bad:?}");
        }
        assert!(check(&report(vec![])).is_err());
    }

    #[test]
    fn a_comparison_pairs_cells_and_keeps_those_of_one_side() {
        let cell = |path: &str, v: f64| Cell::measured("ping-rtt", path, "rtt 64 B", "ms", vec![v]);
        let old = report(vec![
            cell("clear", 0.1),
            cell("esp", 0.2),
            cell("gone", 1.0),
        ]);
        let mut gap = Cell::missing("ping-rtt", "esp", "rtt 512 B", "ms", "x");
        gap.unit = "ms".into();
        let new = report(vec![
            cell("clear", 0.11),
            cell("esp", 0.1),
            gap,
            cell("added", 3.0),
        ]);
        let ch = compare(&old, &new);
        let find = |p: &str, m: &str| ch.iter().find(|c| c.path == p && c.metric == m).unwrap();
        assert!((find("clear", "rtt 64 B").percent().unwrap() - 10.0).abs() < 1e-9);
        assert!((find("esp", "rtt 64 B").percent().unwrap() + 50.0).abs() < 1e-9);
        assert_eq!(find("esp", "rtt 512 B").old, None);
        assert_eq!(
            (find("added", "rtt 64 B").old, find("added", "rtt 64 B").new),
            (None, Some(3.0))
        );
        assert_eq!(
            (find("gone", "rtt 64 B").old, find("gone", "rtt 64 B").new),
            (Some(1.0), None)
        );
        assert_eq!(ch.len(), 5);
        let m = compare_markdown("old|run.json", &ch);
        assert!(
            m.contains("+10.0%") && m.contains("-50.0%") && m.contains("old\\|run.json"),
            "{m}"
        );
        // A file that is not a report, or breaks the schema, is refused naming the file.
        let dir = std::env::temp_dir().join(format!("nv-lab-cmp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{}").unwrap();
        assert!(read(&bad).unwrap_err().to_string().contains("bad.json"));
        let mut broken = old.clone();
        broken.cells[0].value = None;
        std::fs::write(&bad, serde_json::to_string(&broken).unwrap()).unwrap();
        assert!(read(&bad).unwrap_err().to_string().contains("schema"));
        std::fs::write(&bad, serde_json::to_string(&old).unwrap()).unwrap();
        assert_eq!(read(&bad).unwrap(), old);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn csv_and_markdown_escape_what_they_must() {
        let c = Cell::missing("ping-rtt", "a, \"b\"", "rtt|x", "ms", "line\nbreak");
        let r = report(vec![c]);
        let text = csv(&r);
        assert!(text.contains("\"a, \"\"b\"\"\""), "{text}");
        assert!(text.contains("\"line\nbreak\""), "{text}");
        let m = markdown(&r);
        assert!(m.contains("rtt\\|x") && m.contains("line break"), "{m}");
    }
}
