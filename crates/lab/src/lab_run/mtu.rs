//! `netveil lab` experiment `mtu`: the IPsec web/email study's MTU sweep (its Appendices A and C, Tables 3.6 and
//! 3.7): HTTP downloads through an IPsec tunnel whose interface MTU is set below, at and above the "ideal" one (the
//! largest that needs no fragmentation), the Ethernet MTU staying at 1,500.
//!
//! - The path: netveil ESP in tunnel mode with AES-128-CBC and HMAC-SHA1-96 (the closest of netveil's suites to the
//!   study's ESP-3DES with SHA1, scenario 5MA), its TUN device's MTU set to 600, 1,438, 1,500, 8,000 and 16,260
//!   bytes (the study's values; `--quick`: 600, 1,438, 1,500). 1,438 is the ideal for this suite too: 1,500 less the
//!   outer IPv4 header (20), ESP's header (8), IV (16) and ICV (12) leaves 1,444, and the padded payload with its
//!   2-byte trailer must be a multiple of 16 (1,440).
//! - The downloads: random files (the study used .doc files, which barely compress) of 10 KB, 1 MB and 10 MB
//!   (`--quick`: 10 KB and 1 MB), from nginx with curl, 3 each (`--quick`: 1), counted as the `http` experiment
//!   counts them (IP bytes and packets on the client's veth, both directions; curl's total time).
//! - Cells per MTU N and file: `bytes random SIZE at mtu N`, `packets random SIZE at mtu N`, `time random SIZE at
//!   mtu N`, and against the ideal MTU's (the study's Appendix C: (MTU − ideal) / ideal × 100) `load vs ideal
//!   random SIZE at mtu N` and `time vs ideal random SIZE at mtu N` (%), with the study's 5MA figures beside.
//! - Above the ideal, a full-size packet sealed would be larger than the link's 1,500 bytes. netveil does not
//!   seal it: it answers with ICMP "fragmentation needed" and the ideal size (counted as `tx:too-big-for-path`),
//!   the server's kernel lowers its path MTU, and the download carries on in packets of the ideal size (path-MTU
//!   discovery, as Linux's IPsec does; the study's FreeS/WAN fragmented instead, and its numbers stand beside).
//!   A download that fails gets cells without a value that say why, with the daemon's counts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::transfer::{Download, Procs, Workload};
use crate::lab::{HostPair, Lab, TwoHosts};
use crate::lab_report::{Cell, IDEAL_MTU};
use crate::Result;

const EXPERIMENT: &str = "mtu";
/// The path's name in the cells.
pub const PATH: &str = "netveil esp tunnel aes128-sha1";
const SUITE: &str = "aes128-sha1";
const APPENDIX_C: &str =
    "IPsec web/email study, Appendix C (HTTP, .doc, 5MA: ESP-3DES with ESP-SHA1 authentication)";

/// The interface MTUs (the study's).
pub fn mtus(quick: bool) -> Vec<u16> {
    if quick {
        vec![600, IDEAL_MTU, 1500]
    } else {
        vec![600, IDEAL_MTU, 1500, 8000, 16260]
    }
}

/// The file sizes: (bytes, name).
pub fn sizes(quick: bool) -> Vec<(usize, &'static str)> {
    if quick {
        vec![(10_000, "10KB"), (1_000_000, "1MB")]
    } else {
        vec![(10_000, "10KB"), (1_000_000, "1MB"), (10_000_000, "10MB")]
    }
}

/// The study's % difference against the ideal MTU (Appendix C, scenario 5MA): (network load total, transfer time)
/// at `mtu` for the file `size`.
pub fn paper(mtu: u16, size: &str) -> Option<(f64, f64)> {
    let col = match size {
        "10KB" => 0,
        "1MB" => 1,
        "10MB" => 2,
        _ => return None,
    };
    let (load, time): ([f64; 3], [f64; 3]) = match mtu {
        600 => ([16.73, 17.96, 18.09], [13.25, 28.34, 27.56]),
        1500 => ([1.86, 1.72, 1.78], [0.51, 1.78, 0.91]),
        8000 => ([-5.47, -7.74, -7.72], [16.60, -13.69, -14.53]),
        16260 => ([-6.17, -8.57, -8.51], [24.44, 8.19, 9.64]),
        _ => return None,
    };
    Some((load[col], time[col]))
}

fn metric(what: &str, size: &str, mtu: u16) -> String {
    format!("{what} random {size} at mtu {mtu}")
}

/// What one MTU gave per file: its downloads, or why there are none.
type PerFile = Vec<std::result::Result<Vec<Download>, String>>;

/// The downloads of every file at `mtu` on a fresh tunnel. After a download fails, the larger files are not tried
/// (each would stall as long): they get the same reason.
fn at_mtu(bin: &Path, www: &Path, files: &[PathBuf], mtu: u16, reps: usize) -> Result<PerFile> {
    let mut lab = Lab::new("nvlab")?.with_netveil(bin);
    let pair = HostPair {
        mtu,
        ..HostPair::esp(SUITE)
    };
    let h = TwoHosts::up(&mut lab, &pair)?;
    super::transfer::real_wire(&lab, &h)?;
    let (client, server) = (h.addrs[0].inner.to_string(), h.addrs[1].inner.to_string());
    let addrs = (client.as_str(), server.as_str());
    let _s = super::transfer::server(&lab, &h, Workload::Http, addrs, www)?;
    let procs = Procs::of(&h, Workload::Http);
    let mut out: PerFile = Vec::new();
    let mut failed: Option<String> = None;
    for file in files {
        if let Some(why) = &failed {
            out.push(Err(why.clone()));
            continue;
        }
        let mut runs = Vec::new();
        for _ in 0..reps {
            match super::transfer::transfer(&lab, &h, Workload::Http, addrs, None, file, &procs) {
                Ok(d) => runs.push(d),
                Err(e) => {
                    // (A moment for the daemon's counters to settle.)
                    std::thread::sleep(Duration::from_millis(100));
                    let status = h.daemon(1).status_json().ok();
                    let count = |name: &str| {
                        status
                            .as_ref()
                            .and_then(|s| s["drops"][name].as_u64())
                            .map_or_else(|| "unknown".into(), |n| n.to_string())
                    };
                    failed = Some(format!(
                        "the download failed at this MTU ({e}); the server's daemon counted {} packets as \
                         tx:too-big-for-path (answered with ICMP fragmentation-needed) and {} as tx:send-refused",
                        count("tx:too-big-for-path"),
                        count("tx:send-refused")
                    ));
                    break;
                }
            }
        }
        match &failed {
            Some(why) => out.push(Err(why.clone())),
            None => out.push(Ok(runs)),
        }
    }
    Ok(out)
}

/// The `mtu` experiment's cells.
pub fn run(bin: &Path, quick: bool, work: &Path) -> Vec<Cell> {
    let sizes = sizes(quick);
    let reps = if quick { 1 } else { 3 };
    let www = work.join("www");
    // (make_files writes per size a text file, then a random one: the random ones are used.)
    let files: Result<Vec<PathBuf>> = super::transfer::make_files(&www, &sizes).map(|f| {
        f.into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "bin"))
            .collect()
    });
    let files = match files {
        Ok(f) if f.len() == sizes.len() => f,
        Ok(_) => {
            return vec![Cell::missing(
                EXPERIMENT,
                PATH,
                "files",
                "B",
                "the files were not made",
            )]
        }
        Err(e) => {
            return vec![Cell::missing(
                EXPERIMENT,
                PATH,
                "files",
                "B",
                &format!("{e}"),
            )]
        }
    };
    let mut results: Vec<(u16, std::result::Result<PerFile, String>)> = Vec::new();
    for mtu in mtus(quick) {
        crate::say!("mtu: {PATH} with interface mtu {mtu}");
        results.push((
            mtu,
            at_mtu(bin, &www, &files, mtu, reps).map_err(|e| format!("the path did not run: {e}")),
        ));
    }
    let median = |v: &[Download], f: fn(&Download) -> f64| {
        crate::bench::ping::median(&v.iter().map(f).collect::<Vec<_>>())
    };
    let ideal: Option<&PerFile> = results
        .iter()
        .find(|(m, _)| *m == IDEAL_MTU)
        .and_then(|(_, r)| r.as_ref().ok());
    let mut cells = Vec::new();
    for (mtu, r) in &results {
        for (i, (_, size)) in sizes.iter().enumerate() {
            let got = match r {
                Ok(per) => per[i].clone(),
                Err(why) => Err(why.clone()),
            };
            let m = |w: &str| metric(w, size, *mtu);
            match got {
                Ok(v) => {
                    cells.push(Cell::measured(
                        EXPERIMENT,
                        PATH,
                        &m("bytes"),
                        "B",
                        v.iter().map(Download::bytes).collect(),
                    ));
                    cells.push(Cell::measured(
                        EXPERIMENT,
                        PATH,
                        &m("packets"),
                        "packets",
                        v.iter().map(|d| d.down_packets + d.up_packets).collect(),
                    ));
                    cells.push(Cell::measured(
                        EXPERIMENT,
                        PATH,
                        &m("time"),
                        "ms",
                        v.iter().map(|d| d.secs * 1e3).collect(),
                    ));
                    if *mtu == IDEAL_MTU {
                        continue;
                    }
                    let base = ideal.and_then(|p| p[i].as_ref().ok());
                    let p = paper(*mtu, size);
                    for (what, f, pv) in [
                        (
                            "load vs ideal",
                            Download::bytes as fn(&Download) -> f64,
                            p.map(|p| p.0),
                        ),
                        ("time vs ideal", |d: &Download| d.secs, p.map(|p| p.1)),
                    ] {
                        let c = match base {
                            Some(b) if median(b, f) > 0.0 => Cell::measured(
                                EXPERIMENT,
                                PATH,
                                &m(what),
                                "%",
                                vec![(median(&v, f) / median(b, f) - 1.0) * 100.0],
                            ),
                            _ => Cell::missing(
                                EXPERIMENT,
                                PATH,
                                &m(what),
                                "%",
                                "no download of this file at the ideal MTU",
                            ),
                        };
                        cells.push(match pv {
                            Some(pv) => c.paper(pv, APPENDIX_C),
                            None => c,
                        });
                    }
                }
                Err(why) => {
                    for (w, unit) in [("bytes", "B"), ("packets", "packets"), ("time", "ms")] {
                        cells.push(Cell::missing(EXPERIMENT, PATH, &m(w), unit, &why));
                    }
                    if *mtu != IDEAL_MTU {
                        let p = paper(*mtu, size);
                        for (w, pv) in [
                            ("load vs ideal", p.map(|p| p.0)),
                            ("time vs ideal", p.map(|p| p.1)),
                        ] {
                            let c = Cell::missing(EXPERIMENT, PATH, &m(w), "%", &why);
                            cells.push(match pv {
                                Some(pv) => c.paper(pv, APPENDIX_C),
                                None => c,
                            });
                        }
                    }
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(work);
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ideal_mtu_is_the_largest_that_fits_the_link() {
        // Outer IPv4 20, ESP header 8, IV 16, ICV 12; payload + 2-byte trailer padded to 16.
        let fits = |inner: usize| 20 + 8 + 16 + (inner + 2).div_ceil(16) * 16 + 12 <= 1500;
        assert!(fits(IDEAL_MTU as usize));
        assert!(!fits(IDEAL_MTU as usize + 1));
        assert_eq!(mtus(false), [600, 1438, 1500, 8000, 16260]);
        assert_eq!(paper(600, "10KB"), Some((16.73, 13.25)));
        assert_eq!(paper(16260, "10MB"), Some((-8.51, 9.64)));
        assert_eq!(paper(IDEAL_MTU, "1MB"), None);
    }
}
