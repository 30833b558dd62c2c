//! `netveil lab` experiment `iperf`: the L2 study's Iperf-TCP and Iperf-UDP tests (its Figs. 6.18-6.33 and Table
//! 6.1) on the wired-LAN lab (two stations on a Linux bridge): bulk TCP, and UDP offered at 1,000 Mbit/s, over the
//! plain bridge, through l2sec's null suite (the study's noENC-noHMAC category: the framing and the user-space data
//! path without cryptography) and through l2sec with full crypto (AES-GCM-128, and Blowfish-CBC with HMAC-SHA1, the
//! thesis' suite).
//!
//! - The runs: iperf3 for 10 s each (the study's iperf defaults; `--quick`: 1 s), TCP, then UDP with `-b 1000M`
//!   (the study's `iperf -u -b 1000m`), the receiving station the iperf3 client (`-R`), so that each one-second
//!   interval counts what arrived.
//! - l2sec's daemons: CPU over the TCP run, as a share of one core (the busier of the two stations, as `top`
//!   showed the study's program), and the larger peak resident memory.
//! - Duplicate ACKs (the study's Table 6.1; not in `--quick`): one more TCP run under capture on the sending
//!   station's side of the protection (headers only: the LAN port on the plain bridge, l2sec's TAP through l2sec),
//!   counted by tshark's TCP analysis as a share of the TCP packets captured.
//!
//! Cells per path (`plain bridge`, `l2sec null-null (noENC-noHMAC)`, `l2sec aes128gcm`, `l2sec
//! blowfish-cbc-sha1`; `--quick`: the first three): `tcp throughput` and `udp throughput` (Mbit/s, each second a
//! repetition), `udp lost` (%) and `udp jitter` (ms, RFC 3550 as iperf3 computes it), `tcp retransmits` (the
//! sender's segments) and `iperf3 client cpu` / `iperf3 server cpu` (% of one core, iperf3's own figures, over the
//! TCP run); through l2sec `tcp throughput
//! of the bridge's` and `udp throughput of the bridge's` (%), `daemon cpu` (%) and `daemon peak memory` (KiB), with
//! full crypto `daemon peak memory over the null suite's` (KiB); in the full run `captured packets` and `duplicate
//! acks` (%). The study's numbers stand beside: TCP 30.69% of Ethernet without crypto and 3.42% with, UDP 61.25% and
//! 8.25%, 33.06% of the datagrams lost without crypto, its program above 90% CPU with full crypto under TCP and
//! 4,056 KB more memory than without crypto, and Table 6.1's duplicate ACKs. Its full crypto was Blowfish-CBC with
//! HMAC-SHA1; its numbers stand beside both full-crypto paths.

use std::path::Path;
use std::time::Instant;

use super::paths::L2SEC_NULL_PATH;
use crate::lab::Lab;
use crate::lab_report::Cell;
use crate::lan::{L2Opts, Lan};
use crate::{Error, Result};

const EXPERIMENT: &str = "iperf";
/// The offered UDP rate, the study's `-b 1000m`.
pub const UDP_RATE: &str = "1000M";

/// The paths: (name, l2sec suite; `None`: the plain bridge).
pub const PATHS: [(&str, Option<&str>); 4] = [
    ("plain bridge", None),
    (L2SEC_NULL_PATH, Some("null-null")),
    ("l2sec aes128gcm", Some("aes128gcm")),
    ("l2sec blowfish-cbc-sha1", Some("blowfish-cbc-sha1")),
];

const FIG_6_18_NULL: &str =
    "L2 study, Fig. 6.18: TCP 30.69% of 1-Ethernet's throughput, PSP-noENC-noHMAC (from text)";
const FIG_6_18_FULL: &str =
    "L2 study, Fig. 6.18: TCP 3.42% of 1-Ethernet's throughput, full crypto (Blowfish-CBC, HMAC-SHA1; from text)";
const FIG_6_28_NULL: &str =
    "L2 study, Fig. 6.28: UDP 61.25% of 1-Ethernet's throughput, PSP-noENC-noHMAC (from text)";
const FIG_6_28_FULL: &str =
    "L2 study, Fig. 6.28: UDP 8.25% of 1-Ethernet's throughput, full crypto (from text)";
const FIG_6_32_NULL: &str =
    "L2 study, Fig. 6.32: 33.06% of the datagrams lost, PSP-noENC-noHMAC (from text)";
const FIG_6_19_FULL: &str =
    "L2 study, Fig. 6.19: its program above 90% CPU under TCP, full crypto (from text)";
const FIG_6_21: &str =
    "L2 study, Fig. 6.21: full crypto 4,056 KB more memory than PSP-noENC-noHMAC under TCP (from text)";
const TABLE_6_1_ETHERNET: &str = "L2 study, Table 6.1: 1-Ethernet, 2 of 244,090 captured packets";
const TABLE_6_1_NULL: &str =
    "L2 study, Table 6.1: 3-PSP-noENC-noHMAC, 5,335 of 823,317 captured packets";
const TABLE_6_1_FULL: &str =
    "L2 study, Table 6.1: 4-PSP-FULL (Blowfish-CBC, HMAC-SHA1), 875 of 103,417 captured packets";

/// One iperf3 run's figures at the receiving client.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Mbit/s per one-second interval.
    pub intervals: Vec<f64>,
    /// UDP: the share of the datagrams lost (%) and the jitter (ms).
    pub lost_percent: Option<f64>,
    pub jitter_ms: Option<f64>,
    /// TCP: the segments the sender (the server) retransmitted.
    pub retransmits: Option<f64>,
    /// iperf3's own CPU over the run, % of one core: the client's (receiving) and the server's (sending).
    pub cpu_client: Option<f64>,
    pub cpu_server: Option<f64>,
}

/// Reads iperf3's JSON (`-J`) of a reversed run: the client's intervals (what arrived); for UDP the loss and
/// jitter of its summary, for TCP the sender's retransmissions; both ends' CPU as iperf3 reports it.
pub fn parse_run(json: &[u8]) -> Result<Run> {
    let v: serde_json::Value = serde_json::from_slice(json)
        .map_err(|e| Error::output("iperf3", format!("bad JSON: {e}")))?;
    if let Some(err) = v["error"].as_str() {
        return Err(Error::command("iperf3", None, err));
    }
    let intervals: Vec<f64> = v["intervals"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| Some(i["sum"]["bits_per_second"].as_f64()? / 1e6))
                .collect()
        })
        .unwrap_or_default();
    if intervals.is_empty() {
        return Err(Error::output("iperf3", "no interval"));
    }
    let end = &v["end"];
    let cpu = &end["cpu_utilization_percent"];
    Ok(Run {
        intervals,
        lost_percent: end["sum"]["lost_percent"].as_f64(),
        jitter_ms: end["sum"]["jitter_ms"].as_f64(),
        retransmits: end["sum_sent"]["retransmits"].as_f64(),
        cpu_client: cpu["host_total"].as_f64(),
        cpu_server: cpu["remote_total"].as_f64(),
    })
}

/// One reversed iperf3 run (the server at `dst` in `server` sends to `client`) of `secs` seconds.
fn iperf(lab: &Lab, server: &str, client: &str, dst: &str, secs: u32, udp: bool) -> Result<Run> {
    let mut srv = crate::lab::iperf3_server(lab, server, dst)?;
    let secs_s = secs.to_string();
    let mut args = vec![
        "timeout", "60", "iperf3", "-c", dst, "-R", "-t", &secs_s, "-J",
    ];
    if udp {
        args.extend(["-u", "-b", UDP_RATE]);
    }
    let o = lab.exec(client, &args);
    let _ = srv.kill();
    let _ = srv.wait();
    parse_run(&o?.stdout)
}

/// What one path gave.
#[derive(Debug)]
pub struct PathFigures {
    pub tcp: Run,
    pub udp: Run,
    /// l2sec: the busier daemon's CPU over the TCP run (% of one core), and the larger peak memory (KiB).
    pub daemon_cpu: Option<f64>,
    pub daemon_peak_kib: Option<f64>,
    /// Full run: (captured TCP packets, duplicate ACKs) of the run under capture.
    pub acks: Option<Result<(u64, u64)>>,
}

fn path_runs(bin: &Path, suite: Option<&str>, secs: u32, capture: bool) -> Result<PathFigures> {
    let mut lab = Lab::new("nvlab")?.with_netveil(bin);
    let (lan, daemons) = Lan::pair(&mut lab, suite.map(L2Opts::suite))?;
    let pids = crate::lan::daemon_pids(&daemons)?;
    let (h1, h2) = (lan.station("h1")?.clone(), lan.station("h2")?.clone());
    let dst = h2.ip.to_string();
    // The session and the neighbour entries first.
    lab.exec_ok(&h1.ns, &["ping", "-n", "-c", "1", "-W", "2", &dst])?;
    let cpu0 = pids
        .iter()
        .map(|&p| crate::lab_proc::precise_cpu_ms(p))
        .collect::<Result<Vec<f64>>>()?;
    let t = Instant::now();
    let tcp = iperf(&lab, &h2.ns, &h1.ns, &dst, secs, false)?;
    let wall_ms = t.elapsed().as_secs_f64() * 1e3;
    let daemon_cpu = if pids.is_empty() {
        None
    } else {
        let mut busiest: f64 = 0.0;
        for (&p, c0) in pids.iter().zip(cpu0) {
            busiest = busiest.max(crate::lab_proc::precise_cpu_ms(p)? - c0);
        }
        Some(100.0 * busiest / wall_ms)
    };
    let udp = iperf(&lab, &h2.ns, &h1.ns, &dst, secs, true)?;
    let daemon_peak_kib = if pids.is_empty() {
        None
    } else {
        Some(crate::lab_proc::max_peak_kib(&pids)?)
    };
    // The sender's view of the TCP segments: its LAN port, or l2sec's TAP (the port carries sealed frames).
    let acks = capture.then(|| {
        let dev = if suite.is_some() {
            crate::lan::TAP
        } else {
            crate::lan::PORT
        };
        lab.capture(&h2.ns, dev, "iperf.pcap", 96, &["tcp", "port", "5201"])
            .and_then(|mut cap| {
                let run = iperf(&lab, &h2.ns, &h1.ns, &dst, secs, false);
                let pcap = cap.stop()?;
                run?;
                super::scp::duplicate_acks(&pcap)
            })
    });
    Ok(PathFigures {
        tcp,
        udp,
        daemon_cpu,
        daemon_peak_kib,
        acks,
    })
}

/// The study's numbers beside a path's share of the bridge's throughput: (TCP, UDP), by category.
fn share_papers(suite: &str) -> ((f64, &'static str), (f64, &'static str)) {
    if suite == "null-null" {
        ((30.69, FIG_6_18_NULL), (61.25, FIG_6_28_NULL))
    } else {
        ((3.42, FIG_6_18_FULL), (8.25, FIG_6_28_FULL))
    }
}

/// The `iperf` experiment's cells.
pub fn run(bin: &Path, quick: bool) -> Vec<Cell> {
    let (secs, paths) = if quick {
        (1, &PATHS[..3])
    } else {
        (10, &PATHS[..])
    };
    let mut cells = Vec::new();
    let mut bridge: Option<(f64, f64)> = None;
    let mut null_peak: Option<f64> = None;
    let median = crate::bench::ping::median;
    for &(name, suite) in paths {
        crate::say!("iperf: {name}");
        let m = |metric: &str, unit: &str, v: Vec<f64>| {
            Cell::measured(EXPERIMENT, name, metric, unit, v)
        };
        let missing = |metric: &str, unit: &str, why: &str| {
            Cell::missing(EXPERIMENT, name, metric, unit, why)
        };
        let (ack_paper, ack_source) = match suite {
            None => (super::scp::share(2.0, 244_090.0), TABLE_6_1_ETHERNET),
            Some("null-null") => (super::scp::share(5_335.0, 823_317.0), TABLE_6_1_NULL),
            Some(_) => (super::scp::share(875.0, 103_417.0), TABLE_6_1_FULL),
        };
        let f = match path_runs(bin, suite, secs, !quick) {
            Ok(f) => f,
            Err(e) => {
                let why = format!("the path did not run: {e}");
                let mut metrics = vec![
                    ("tcp throughput", "Mbit/s"),
                    ("udp throughput", "Mbit/s"),
                    ("udp lost", "%"),
                    ("udp jitter", "ms"),
                    ("tcp retransmits", "segments"),
                    ("iperf3 client cpu", "%"),
                    ("iperf3 server cpu", "%"),
                ];
                if suite.is_some() {
                    metrics.extend([
                        ("tcp throughput of the bridge's", "%"),
                        ("udp throughput of the bridge's", "%"),
                        ("daemon cpu", "%"),
                        ("daemon peak memory", "KiB"),
                    ]);
                }
                if suite.is_some_and(|s| s != "null-null") {
                    metrics.push(("daemon peak memory over the null suite's", "KiB"));
                }
                if !quick {
                    metrics.extend([("captured packets", "packets"), ("duplicate acks", "%")]);
                }
                cells.extend(metrics.into_iter().map(|(m, u)| missing(m, u, &why)));
                continue;
            }
        };
        let (tcp, udp) = (median(&f.tcp.intervals), median(&f.udp.intervals));
        cells.push(m("tcp throughput", "Mbit/s", f.tcp.intervals.clone()));
        cells.push(m("udp throughput", "Mbit/s", f.udp.intervals.clone()));
        let null_lost = suite == Some("null-null");
        let lost = match f.udp.lost_percent {
            Some(v) => m("udp lost", "%", vec![v]),
            None => missing("udp lost", "%", "iperf3 gave no loss figure"),
        };
        cells.push(if null_lost {
            lost.paper(33.06, FIG_6_32_NULL)
        } else {
            lost
        });
        cells.push(match f.udp.jitter_ms {
            Some(v) => m("udp jitter", "ms", vec![v]),
            None => missing("udp jitter", "ms", "iperf3 gave no jitter figure"),
        });
        // The TCP run's retransmissions and the workload's own CPU (iperf3's figures for both ends).
        for (metric, unit, v) in [
            ("tcp retransmits", "segments", f.tcp.retransmits),
            ("iperf3 client cpu", "%", f.tcp.cpu_client),
            ("iperf3 server cpu", "%", f.tcp.cpu_server),
        ] {
            cells.push(match v {
                Some(v) => m(metric, unit, vec![v]),
                None => missing(metric, unit, "iperf3 gave no such figure"),
            });
        }
        if let Some(acks) = f.acks {
            cells.extend(super::scp::ack_cells(
                EXPERIMENT,
                name,
                acks,
                (ack_paper, ack_source),
            ));
        }
        let Some(s) = suite else {
            bridge = Some((tcp, udp));
            continue;
        };
        let ((tcp_paper, tcp_src), (udp_paper, udp_src)) = share_papers(s);
        for (metric, value, bridge_value, paper, src) in [
            (
                "tcp throughput of the bridge's",
                tcp,
                bridge.map(|b| b.0),
                tcp_paper,
                tcp_src,
            ),
            (
                "udp throughput of the bridge's",
                udp,
                bridge.map(|b| b.1),
                udp_paper,
                udp_src,
            ),
        ] {
            let c = match bridge_value {
                Some(b) if b > 0.0 => m(metric, "%", vec![100.0 * value / b]),
                _ => missing(
                    metric,
                    "%",
                    "the plain bridge gave no throughput (see its cells)",
                ),
            };
            cells.push(c.paper(paper, src));
        }
        let cpu = match f.daemon_cpu {
            Some(v) => m("daemon cpu", "%", vec![v]),
            None => missing("daemon cpu", "%", "no daemon"),
        };
        cells.push(if s == "null-null" {
            cpu
        } else {
            cpu.paper(90.0, FIG_6_19_FULL)
        });
        let peak = f.daemon_peak_kib;
        cells.push(match peak {
            Some(v) => m("daemon peak memory", "KiB", vec![v]),
            None => missing("daemon peak memory", "KiB", "no daemon"),
        });
        if s == "null-null" {
            null_peak = peak;
            continue;
        }
        let metric = "daemon peak memory over the null suite's";
        cells.push(
            match (peak, null_peak) {
                (Some(p), Some(n)) => m(metric, "KiB", vec![p - n]),
                _ => missing(
                    metric,
                    "KiB",
                    "the null suite's path gave no peak memory (see its cells)",
                ),
            }
            .paper(4_056.0, FIG_6_21),
        );
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iperf3_json_is_read() {
        let json =
            br#"{"intervals":[{"sum":{"bits_per_second":1.5e9}},{"sum":{"bits_per_second":2.5e9}}],
            "end":{"sum":{"jitter_ms":0.012,"lost_percent":3.5}}}"#;
        let r = parse_run(json).unwrap();
        assert_eq!(r.intervals, vec![1500.0, 2500.0]);
        assert_eq!(r.lost_percent, Some(3.5));
        assert_eq!(r.jitter_ms, Some(0.012));
        assert_eq!(r.retransmits, None);
        // A TCP run (iperf3 3.12's reversed JSON): the server's retransmissions, both ends' CPU.
        let json = br#"{"intervals":[{"sum":{"bits_per_second":9.4e9}}],"end":{"sum_sent":{"retransmits":7514,
            "sender":false},"sum_received":{},"cpu_utilization_percent":{"host_total":41.5,"remote_total":88.0}}}"#;
        let r = parse_run(json).unwrap();
        assert_eq!(r.retransmits, Some(7514.0));
        assert_eq!((r.cpu_client, r.cpu_server), (Some(41.5), Some(88.0)));
        assert!(parse_run(br#"{"error":"unable to connect"}"#).is_err());
        assert!(parse_run(br#"{"intervals":[]}"#).is_err());
        assert!(parse_run(b"not json").is_err());
    }

    #[test]
    fn the_paths_are_the_studys_categories() {
        assert_eq!(PATHS[0].1, None);
        assert_eq!(PATHS[1].1, Some("null-null"));
        assert_eq!(share_papers("null-null").0 .0, 30.69);
        assert_eq!(share_papers("blowfish-cbc-sha1").1 .0, 8.25);
    }
}
