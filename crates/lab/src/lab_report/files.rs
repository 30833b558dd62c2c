//! The report's files: `report.json` (read back and held to the schema), `report.csv` and `report.md`.

use std::path::Path;

use super::data::{check, Report};
use super::findings::findings;
use super::text::{md, num};
use crate::{Error, Result};

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

/// Writes `report.json`, `report.csv` and `report.md` into `dir` (made if missing).
pub fn write(report: &Report, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(Error::io(format!("cannot make {}", dir.display())))?;
    let json = serde_json::to_string_pretty(report)
        .map_err(|e| Error::internal(format!("the report as JSON: {e}")))?;
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
