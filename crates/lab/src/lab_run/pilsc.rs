//! `netveil lab` experiment `pilsc`: the PILSC study's two transfer experiments (its Experiments 5.1 and 5.2) with
//! netveil's PILSC engine between two hosts on a veth pair.
//!
//! - Files (Experiment 5.1, Tables 5 and 6): 1 KB, 10 KB, 1 MB and 10 MB (`--quick`: 1 KB and 1 MB) moved over TCP
//!   (the lab's byte-checked transfer, timed from connect to the last byte verified; the study used FTP) without
//!   PILSC and through PILSC in each mode: `authenticated` (netveil's default: encryption and a 16-byte tag) and
//!   `confidential` (the paper's 12 bytes, encryption only), with 10 rules (the study does not say how many).
//! - Rules (Experiment 5.2, Table 7): a 1 MB file through PILSC (`authenticated`) with 10, 20, 40, 80, 160 and 1,600
//!   rules (`--quick`: 10 and 1,600), the transfer's rule first in the file and the others for other hosts and ports,
//!   against the same transfer without PILSC.
//! - Each transfer 10 times (`--quick`: 3) after one not counted, each path a fresh lab.
//!
//! Cells: per path and file `transfer time SIZE` (ms, beside Table 5's Linux and PILSC columns) and through PILSC
//! `transfer time over clear SIZE` (%, the medians, beside Table 6 as printed: it disagrees with Table 5's own
//! ratios); per rule count `transfer time 1MB at N rules` (ms, beside Table 7) and `... over clear` (%).

use std::path::Path;

use crate::bench::pilsc::net::{table7, transfer_times};
use crate::bench::ping::median;
use crate::lab_report::Cell;

const EXPERIMENT: &str = "pilsc";
/// The rule count of the file sizes' transfers.
pub const RULES: usize = 10;

const TABLE_5_LINUX: &str = "PILSC study, Table 5: the stock Linux packet handler (FTP)";
const TABLE_5_PILSC: &str = "PILSC study, Table 5: PILSC (FTP; cipher and rule count not stated)";
const TABLE_6: &str =
    "PILSC study, Table 6 as printed (it disagrees with Table 5's ratios: 0.58, 1.23, 0.11, 0.05%)";
const TABLE_7: &str = "PILSC study, Table 7: 1 MB file against the number of rules";

/// The files: (bytes, name, the paper's Linux and PILSC times in ms and its delay percentage).
const FILES: [(u64, &str, f64, f64, f64); 4] = [
    (1 << 10, "1KB", 0.171, 0.172, 0.005),
    (10 << 10, "10KB", 0.326, 0.330, 1.3),
    (1 << 20, "1MB", 87.0, 87.1, 0.002),
    (10 << 20, "10MB", 870.6, 871.0, 0.0001),
];

/// The paths of the file sizes: (name, PILSC mode; `None`: without PILSC).
pub const PATHS: [(&str, Option<&str>); 3] = [
    ("clear", None),
    ("pilsc authenticated", Some("authenticated")),
    ("pilsc confidential", Some("confidential")),
];

/// The rule counts of a run.
pub fn rule_counts(quick: bool) -> Vec<usize> {
    if quick {
        vec![10, 1600]
    } else {
        vec![10, 20, 40, 80, 160, 1600]
    }
}

/// The `pilsc` experiment's cells.
pub fn run(bin: &Path, quick: bool) -> Vec<Cell> {
    let reps = if quick { 3 } else { 10 };
    let files: Vec<_> = FILES
        .iter()
        .filter(|f| !quick || f.1 == "1KB" || f.1 == "1MB")
        .collect();
    let sizes: Vec<u64> = files.iter().map(|f| f.0).collect();
    let mut cells = Vec::new();
    let mut clear: Option<Vec<f64>> = None;
    for (name, mode) in PATHS {
        crate::say!("pilsc: {name}");
        let r = transfer_times(bin, mode.map(|m| (m, RULES)), &sizes, reps);
        for (i, f) in files.iter().enumerate() {
            let metric = format!("transfer time {}", f.1);
            let over = format!("transfer time over clear {}", f.1);
            let (paper, source) = match mode {
                None => (f.2, TABLE_5_LINUX),
                Some(_) => (f.3, TABLE_5_PILSC),
            };
            match &r {
                Ok(times) => {
                    let t = times[i].clone();
                    let med = median(&t);
                    cells.push(
                        Cell::measured(EXPERIMENT, name, &metric, "ms", t).paper(paper, source),
                    );
                    match (mode, &clear) {
                        (None, _) => {}
                        (Some(_), Some(c)) if c[i] > 0.0 => cells.push(
                            Cell::measured(
                                EXPERIMENT,
                                name,
                                &over,
                                "%",
                                vec![(med / c[i] - 1.0) * 100.0],
                            )
                            .paper(f.4, TABLE_6),
                        ),
                        (Some(_), _) => cells.push(
                            Cell::missing(
                                EXPERIMENT,
                                name,
                                &over,
                                "%",
                                "the path without PILSC gave no time",
                            )
                            .paper(f.4, TABLE_6),
                        ),
                    }
                }
                Err(e) => {
                    let why = format!("the path did not run: {e}");
                    cells.push(
                        Cell::missing(EXPERIMENT, name, &metric, "ms", &why).paper(paper, source),
                    );
                    if mode.is_some() {
                        cells.push(
                            Cell::missing(EXPERIMENT, name, &over, "%", &why).paper(f.4, TABLE_6),
                        );
                    }
                }
            }
        }
        if mode.is_none() {
            clear = r
                .as_ref()
                .ok()
                .map(|t| t.iter().map(|v| median(v)).collect());
        }
    }
    // The rule database's size: the 1 MB file through PILSC at each count, against the clear path's 1 MB.
    let mb = files.iter().position(|f| f.1 == "1MB");
    let clear_mb = mb.and_then(|i| clear.as_ref().map(|c| c[i]));
    let base = table7(0).unwrap_or(87.0);
    for n in rule_counts(quick) {
        crate::say!("pilsc: pilsc authenticated with {n} rules");
        let path = "pilsc authenticated";
        let metric = format!("transfer time 1MB at {n} rules");
        let over = format!("transfer time 1MB at {n} rules over clear");
        let paper = table7(n);
        let with = |c: Cell, p: Option<f64>| match p {
            Some(p) => c.paper(p, TABLE_7),
            None => c,
        };
        match transfer_times(bin, Some(("authenticated", n)), &[1 << 20], reps) {
            Ok(mut t) => {
                let t = t.pop().unwrap_or_default();
                let med = median(&t);
                cells.push(with(
                    Cell::measured(EXPERIMENT, path, &metric, "ms", t),
                    paper,
                ));
                let c = match clear_mb {
                    Some(c) if c > 0.0 => {
                        Cell::measured(EXPERIMENT, path, &over, "%", vec![(med / c - 1.0) * 100.0])
                    }
                    _ => Cell::missing(
                        EXPERIMENT,
                        path,
                        &over,
                        "%",
                        "the path without PILSC gave no 1 MB time",
                    ),
                };
                cells.push(with(
                    c,
                    paper.map(|p| ((p / base - 1.0) * 1e4).round() / 100.0),
                ));
            }
            Err(e) => {
                let why = format!("the path did not run: {e}");
                cells.push(with(
                    Cell::missing(EXPERIMENT, path, &metric, "ms", &why),
                    paper,
                ));
                cells.push(with(
                    Cell::missing(EXPERIMENT, path, &over, "%", &why),
                    paper.map(|p| ((p / base - 1.0) * 1e4).round() / 100.0),
                ));
            }
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_are_the_studys() {
        assert_eq!(FILES[2], (1 << 20, "1MB", 87.0, 87.1, 0.002));
        assert_eq!(table7(1600), Some(93.3));
        assert_eq!(table7(0), Some(87.0));
        assert_eq!(rule_counts(true), [10, 1600]);
        assert_eq!(rule_counts(false).len(), 6);
    }
}
