//! The overhead lab's figures and page (`netveil lab`, see [`crate::lab_run`]): one SVG per figure, drawn with
//! plotters from the report's cells, and `index.html`, which shows the figures and every cell in tables (every text
//! from the report HTML-escaped).

use plotters::prelude::*;
use std::path::Path;

pub use super::chart::Figure;
use super::chart::{bar_chart, line_chart, Bars, Lines, XAxis};
use super::data::{Cell, Report};
use super::findings::findings;
use crate::{Error, Result};

/// The payload size of a `rtt N B` metric.
fn rtt_size(metric: &str) -> Option<u32> {
    metric
        .strip_prefix("rtt ")?
        .strip_suffix(" B")?
        .parse()
        .ok()
}

/// `ping-rtt.svg`: the median round-trip time of each path against the payload size (the bare-PC study's Fig. 8).
fn rtt_figure(cells: &[Cell]) -> Result<Option<Figure>> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for c in cells.iter().filter(|c| c.experiment == "ping-rtt") {
        let (Some(size), Some(v)) = (rtt_size(&c.metric), c.value) else {
            continue;
        };
        let pt = (f64::from(size), v);
        match series.iter_mut().find(|(p, _)| *p == c.path) {
            Some((_, pts)) => pts.push(pt),
            None => series.push((c.path.clone(), vec![pt])),
        }
    }
    let xmax = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.0))
        .fold(1024.0f64, f64::max)
        + 64.0;
    line_chart(Lines {
        file: "ping-rtt.svg",
        title: "Ping round-trip time by payload size (median)",
        x_desc: "ICMP payload (bytes)",
        y_desc: "round-trip time (ms)",
        y_min_top: 0.001,
        x: XAxis::Numeric { max: xmax },
        legend: SeriesLabelPosition::UpperLeft,
        series,
    })
}

/// `overhead.svg`: bytes added per packet by each protocol, measured, with the paper's figure beside where there is
/// one (the PILSC study's Table 8).
fn overhead_figure(cells: &[Cell]) -> Result<Option<Figure>> {
    bar_chart(Bars {
        file: "overhead.svg",
        title: "Bytes added per packet (measured; the paper's beside)",
        x_desc: "bytes per packet",
        paper_label: "the paper (PILSC, Table 8)",
        bars: cells
            .iter()
            .filter(|c| c.experiment == "overhead")
            .filter_map(|c| Some((c.path.as_str(), c.value?, c.paper)))
            .collect(),
    })
}

/// `delay.svg`: each path's median round trip of a 500-byte ping against the one-side added delay (the PSP
/// study's Fig. 4.6).
fn delay_figure(cells: &[Cell]) -> Result<Option<Figure>> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for c in cells.iter().filter(|c| c.experiment == "delay") {
        let Some(ms) = c
            .metric
            .strip_prefix("rtt at ")
            .and_then(|m| m.strip_suffix(" ms"))
            .and_then(|m| m.parse::<f64>().ok())
        else {
            continue;
        };
        let Some(v) = c.value else { continue };
        match series.iter_mut().find(|(n, _)| *n == c.path) {
            Some((_, pts)) => pts.push((ms, v)),
            None => series.push((c.path.clone(), vec![(ms, v)])),
        }
    }
    let xmax = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.0))
        .fold(1.0f64, f64::max)
        * 1.1;
    line_chart(Lines {
        file: "delay.svg",
        title: "Round trip of a 500-byte ping against the added delay (median)",
        x_desc: "added delay on each side (ms)",
        y_desc: "round-trip time (ms)",
        y_min_top: 1.0,
        x: XAxis::Numeric { max: xmax },
        legend: SeriesLabelPosition::UpperLeft,
        series,
    })
}

/// `pilsc.svg`: the 1 MB transfer's time through PILSC against the number of rules, the PILSC study's Table 7
/// beside (the rule counts as categories: 10 to 1,600).
fn pilsc_figure(cells: &[Cell]) -> Result<Option<Figure>> {
    let mut counts: Vec<String> = Vec::new();
    let (mut ours, mut paper) = (Vec::new(), Vec::new());
    for c in cells.iter().filter(|c| c.experiment == "pilsc") {
        let Some(n) = c
            .metric
            .strip_prefix("transfer time 1MB at ")
            .and_then(|m| m.strip_suffix(" rules"))
        else {
            continue;
        };
        let x = counts.len() as f64;
        counts.push(n.to_string());
        if let Some(v) = c.value {
            ours.push((x, v));
        }
        if let Some(p) = c.paper {
            paper.push((x, p));
        }
    }
    let mut series = Vec::new();
    if !ours.is_empty() {
        series.push(("netveil pilsc authenticated".to_string(), ours));
    }
    if !paper.is_empty() {
        series.push(("the paper (PILSC study, Table 7)".to_string(), paper));
    }
    line_chart(Lines {
        file: "pilsc.svg",
        title: "PILSC: a 1 MB transfer's time against the number of rules (median)",
        x_desc: "rules",
        y_desc: "transfer time (ms)",
        y_min_top: 1.0,
        x: XAxis::Categories(counts),
        legend: SeriesLabelPosition::LowerRight,
        series,
    })
}

/// `iperf.svg`: each l2sec path's TCP and UDP throughput as a share of the plain bridge's, the L2 study's beside
/// (its Figs. 6.18 and 6.28).
fn iperf_figure(cells: &[Cell]) -> Result<Option<Figure>> {
    let rows: Vec<(String, f64, Option<f64>)> = cells
        .iter()
        .filter(|c| c.experiment == "iperf" && c.metric.ends_with("throughput of the bridge's"))
        .filter_map(|c| {
            let kind = c.metric.split(' ').next().unwrap_or_default();
            Some((format!("{} {kind}", c.path), c.value?, c.paper))
        })
        .collect();
    bar_chart(Bars {
        file: "iperf.svg",
        title: "iperf3 TCP and UDP through l2sec: throughput as % of the plain bridge's",
        x_desc: "% of the plain bridge's throughput",
        paper_label: "the paper (L2 study, Figs. 6.18 and 6.28)",
        bars: rows.iter().map(|(n, v, p)| (n.as_str(), *v, *p)).collect(),
    })
}

/// `scp.svg`: the SCP copy's rate per path (the L2 study's SCP transfer rate, Figs. 6.35-6.46).
fn scp_figure(cells: &[Cell]) -> Result<Option<Figure>> {
    bar_chart(Bars {
        file: "scp.svg",
        title: "SCP copy of a file of zeros: transfer rate (median)",
        x_desc: "MB/s",
        paper_label: "the paper",
        bars: cells
            .iter()
            .filter(|c| c.experiment == "scp" && c.metric == "scp rate")
            .filter_map(|c| Some((c.path.as_str(), c.value?, c.paper)))
            .collect(),
    })
}

/// `voip.svg`: the largest RFC 3550 jitter of any RTP stream per path (the L2 study's Fig. 6.8 judges by its 40 ms
/// limit of good quality).
fn voip_figure(cells: &[Cell]) -> Result<Option<Figure>> {
    bar_chart(Bars {
        file: "voip.svg",
        title: "VoIP calls (SIPp, G.711): largest RTP jitter of any stream",
        x_desc: "ms (the study's limit of good quality: 40 ms)",
        paper_label: "the paper",
        bars: cells
            .iter()
            .filter(|c| c.experiment == "voip" && c.metric == "rtp max jitter")
            .filter_map(|c| Some((c.path.as_str(), c.max?, None)))
            .collect(),
    })
}

/// The loss level and kind ("udp", "tcp") of a `KIND kept L% loss` metric.
fn kept_level(metric: &str) -> Option<(&str, f64)> {
    let (kind, rest) = metric.split_once(" kept ")?;
    Some((kind, rest.strip_suffix("% loss")?.parse().ok()?))
}

/// Groups `(series, category, value)` points: the categories in numeric order (named by `label`), the series in
/// their first order.
type Grouped = (Vec<String>, Vec<(String, Vec<(f64, f64)>)>);

fn group(points: Vec<(String, f64, f64)>, label: impl Fn(f64) -> String) -> Grouped {
    let mut cats: Vec<f64> = Vec::new();
    for p in &points {
        if !cats.contains(&p.1) {
            cats.push(p.1);
        }
    }
    cats.sort_by(f64::total_cmp);
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for (name, cat, v) in points {
        let at = cats.iter().position(|c| *c == cat).unwrap_or(0) as f64;
        match series.iter_mut().find(|(n, _)| *n == name) {
            Some((_, pts)) => pts.push((at, v)),
            None => series.push((name, vec![(at, v)])),
        }
    }
    (cats.into_iter().map(label).collect(), series)
}

/// `loss.svg`: the share of its goodput at 0% loss that each path keeps at each loss level, datagrams (UDP) and TCP
/// (the PSP study's Figs. 4.4 and 4.5); the levels are evenly spaced on the axis, as the study's are not linear.
fn loss_figure(cells: &[Cell]) -> Result<Option<Figure>> {
    let points = cells
        .iter()
        .filter(|c| c.experiment == "loss")
        .filter_map(|c| {
            let (kind, level) = kept_level(&c.metric)?;
            Some((format!("{} ({kind})", c.path), level, c.value?))
        })
        .collect();
    let (categories, series) = group(points, |l| format!("{l}%"));
    line_chart(Lines {
        file: "loss.svg",
        title: "Goodput kept under packet loss (% of the same path at 0% loss)",
        x_desc: "packet loss (data direction)",
        y_desc: "goodput kept (%)",
        y_min_top: 100.0,
        x: XAxis::Categories(categories),
        legend: SeriesLabelPosition::UpperRight,
        series,
    })
}

/// `http.svg` and `smtp.svg`: the bytes from the server side to the client side over the clear transfer's, per
/// path, against the file size (random files), as the IPsec web/email study's network-load tables (the data
/// direction: the acknowledgements going up vary with timing).
fn transfer_figure(cells: &[Cell], experiment: &str) -> Result<Option<Figure>> {
    let points = cells
        .iter()
        .filter(|c| c.experiment == experiment)
        .filter_map(|c| {
            let name = c.metric.strip_prefix("overhead down random ")?;
            Some((
                c.path.clone(),
                crate::lab_report::file_bytes(name)?,
                c.value?,
            ))
        })
        .collect();
    let (categories, series) = group(points, |b| {
        if b >= 1e6 {
            format!("{} MB", b / 1e6)
        } else {
            format!("{} KB", b / 1e3)
        }
    });
    let (file, title) = match experiment {
        "smtp" => (
            "smtp.svg",
            "SMTP mail with the file attached: bytes sender to receiver, over clear (random files)",
        ),
        _ => (
            "http.svg",
            "HTTP download: bytes server to client, over clear (random files)",
        ),
    };
    line_chart(Lines {
        file,
        title,
        x_desc: "file size",
        y_desc: "more bytes than clear (%)",
        y_min_top: 10.0,
        x: XAxis::Categories(categories),
        legend: SeriesLabelPosition::UpperRight,
        series,
    })
}

/// `ops.svg`: ESP's per-operation times against the ICMP payload size (the bare-PC IPsec study's Figs. 6 and 7):
/// each mode's incoming and outgoing totals, and tunnel mode's integrity, decryption, encryption and MAC.
fn ops_figure(cells: &[Cell]) -> Result<Option<Figure>> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for c in cells.iter().filter(|c| c.experiment == "ops") {
        let Some(mode) = c
            .path
            .rsplit(' ')
            .next()
            .filter(|_| c.path.starts_with("esp "))
        else {
            continue;
        };
        let Some((op, size)) = c
            .metric
            .strip_suffix(" B")
            .and_then(|m| m.rsplit_once(' '))
            .and_then(|(op, n)| Some((op, n.parse::<f64>().ok()?)))
        else {
            continue;
        };
        let shown = op.ends_with(" total")
            || (mode == "tunnel"
                && ["in integrity", "in decryption", "out encryption", "out mac"].contains(&op));
        let Some(v) = c.value.filter(|_| shown) else {
            continue;
        };
        let name = format!("{op} ({mode})");
        match series.iter_mut().find(|(n, _)| *n == name) {
            Some((_, pts)) => pts.push((size, v)),
            None => series.push((name, vec![(size, v)])),
        }
    }
    line_chart(Lines {
        file: "ops.svg",
        title: "ESP time per operation by payload size (AES-CBC-128, HMAC-SHA1-96; fastest batch, median)",
        x_desc: "ICMP payload (bytes)",
        y_desc: "time per packet (ns)",
        y_min_top: 100.0,
        x: XAxis::Numeric { max: 1088.0 },
        legend: SeriesLabelPosition::UpperLeft,
        series,
    })
}

/// The report's figures (only those whose experiment ran and measured something).
pub fn figures(report: &Report) -> Result<Vec<Figure>> {
    Ok([
        rtt_figure(&report.cells)?,
        overhead_figure(&report.cells)?,
        loss_figure(&report.cells)?,
        transfer_figure(&report.cells, "http")?,
        transfer_figure(&report.cells, "smtp")?,
        delay_figure(&report.cells)?,
        pilsc_figure(&report.cells)?,
        iperf_figure(&report.cells)?,
        scp_figure(&report.cells)?,
        voip_figure(&report.cells)?,
        ops_figure(&report.cells)?,
    ]
    .into_iter()
    .flatten()
    .collect())
}

/// Text as HTML: `&`, `<`, `>`, `"` and `'` escaped.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn num(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v:.3}"))
}

/// `index.html`: the machine, the figures, and one table per experiment.
pub fn html(report: &Report, figures: &[Figure]) -> String {
    let mut out = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>netveil lab report</title>\n<style>\
         body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;margin:1em 0}\
         td,th{border:1px solid #999;padding:3px 8px;text-align:left}th{background:#eee}\
         img{max-width:100%;border:1px solid #ccc;margin:1em 0}</style></head><body>\n<h1>netveil lab report</h1>\n",
    );
    out += &format!(
        "<p>{}<br>netveil {}; kernel {}; {}; {} cells in {:.0} s{}</p>\n",
        esc(&report.command.join(" ")),
        esc(&report.netveil),
        esc(&report.kernel),
        esc(&report.cpu),
        report.cells.len(),
        report.seconds,
        if report.quick { " (--quick)" } else { "" }
    );
    out += "<ul>\n";
    for (p, v) in &report.programs {
        out += &format!("<li>{}: {}</li>\n", esc(p), esc(v));
    }
    out += "</ul>\n";
    for (name, _) in figures {
        out += &format!("<img src=\"{}\" alt=\"{}\">\n", esc(name), esc(name));
    }
    out += "<h2>Findings</h2>\n<ul>\n";
    for f in findings(report) {
        out += &format!(
            "<li>{}: <b>{}</b> ({})</li>\n",
            esc(f.finding),
            f.verdict(),
            esc(&f.detail)
        );
    }
    out += "</ul>\n";
    for e in &report.experiments {
        out += &format!(
            "<h2>{}</h2>\n<table><tr><th>path</th><th>metric</th><th>median</th><th>min</th><th>max</th><th>n</th>\
             <th>paper</th><th>expected</th><th>reason</th></tr>\n",
            esc(e)
        );
        for c in report.cells.iter().filter(|c| &c.experiment == e) {
            let paper = match (c.paper, &c.paper_source) {
                (Some(p), Some(s)) => format!("{p} ({})", esc(s)),
                _ => String::new(),
            };
            out += &format!(
                "<tr><td>{}</td><td>{}</td><td>{} {}</td><td>{}</td><td>{}</td><td>{}</td><td>{paper}</td>\
                 <td>{}</td><td>{}</td></tr>\n",
                esc(&c.path),
                esc(&c.metric),
                num(c.value),
                if c.value.is_some() { esc(&c.unit) } else { String::new() },
                num(c.min),
                num(c.max),
                c.runs.len(),
                num(c.expected),
                esc(c.reason.as_deref().unwrap_or(""))
            );
        }
        out += "</table>\n";
    }
    out += "</body></html>\n";
    out
}

/// Writes the figures and `index.html` into `dir`.
pub fn write(report: &Report, dir: &Path) -> Result<Vec<String>> {
    let figs = figures(report)?;
    let mut names = Vec::new();
    for (name, svg) in &figs {
        let p = dir.join(name);
        std::fs::write(&p, svg).map_err(Error::io(format!("cannot write {}", p.display())))?;
        names.push(name.clone());
    }
    let p = dir.join("index.html");
    std::fs::write(&p, html(report, &figs))
        .map_err(Error::io(format!("cannot write {}", p.display())))?;
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab_report::{Cell, SCHEMA};

    fn report() -> Report {
        let mut cells = Vec::new();
        for (path, base) in [("clear", 0.02), ("netveil esp <x> & \"y\"", 0.12)] {
            for b in [64u32, 512, 1024] {
                cells.push(Cell::measured(
                    "ping-rtt",
                    path,
                    &format!("rtt {b} B"),
                    "ms",
                    vec![base + f64::from(b) / 1e5],
                ));
            }
        }
        cells.push(
            Cell::measured("overhead", "esp tunnel", "overhead", "B/packet", vec![72.0])
                .paper(32.0, "T8"),
        );
        cells.push(Cell::missing(
            "overhead",
            "wireguard-go",
            "overhead",
            "B/packet",
            "not <installed>",
        ));
        for (level, kept) in [(0.0, 100.0), (1.0, 98.0), (25.0, 75.0)] {
            cells.push(Cell::measured(
                "loss",
                "netveil psp aes-gcm-128",
                &format!("udp kept {level}% loss"),
                "%",
                vec![kept],
            ));
        }
        Report {
            schema: SCHEMA,
            command: vec!["netveil".into(), "lab".into()],
            netveil: "0".into(),
            kernel: "6".into(),
            cpu: "x".into(),
            programs: Default::default(),
            quick: true,
            experiments: vec!["ping-rtt".into(), "overhead".into(), "loss".into()],
            started_unix: 0,
            seconds: 1.0,
            cells,
        }
    }

    #[test]
    fn figures_are_svg_with_every_path_and_the_page_escapes_the_report() {
        let r = report();
        let figs = figures(&r).unwrap();
        let names: Vec<&str> = figs.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(names, ["ping-rtt.svg", "overhead.svg", "loss.svg"]);
        for (_, svg) in &figs {
            assert!(svg.starts_with("<svg") || svg.contains("<svg"), "{svg}");
            assert!(svg.trim_end().ends_with("</svg>"));
        }
        // The legend names every path (the SVG backend escapes text).
        assert!(figs[0].1.contains("clear"));
        assert!(figs[0].1.contains("netveil esp &lt;x&gt;"), "{}", figs[0].1);
        let page = html(&r, &figs);
        assert!(page.contains("<img src=\"ping-rtt.svg\""));
        assert!(page.contains("netveil esp &lt;x&gt; &amp; &quot;y&quot;"));
        assert!(page.contains("not &lt;installed&gt;"));
        assert!(!page.contains("<x>") && !page.contains("<installed>"));
        // The loss figure names the path and kind; the page states the findings.
        assert!(figs[2].1.contains("netveil psp aes-gcm-128 (udp)"));
        assert!(
            page.contains("PSP keeps most of its throughput under loss"),
            "{page}"
        );
    }

    #[test]
    fn no_measured_cell_no_figure() {
        let mut r = report();
        r.cells.retain(|c| c.value.is_none());
        assert!(figures(&r).unwrap().is_empty());
    }
}
