//! `netveil lab` experiment `voip`: the L2 study's VoIP test (its Figs. 6.7-6.12): SIP calls with G.711 RTP between
//! two stations on the wired-LAN lab, over the plain bridge and through l2sec (AES-GCM-128, and Blowfish-CBC with
//! HMAC-SHA1, the thesis' suite).
//!
//! - The calls: SIPp (Debian's `sip-tester`) as the caller, with its own `uac_pcap` scenario: INVITE with an SDP
//!   offer for PCMA, then it plays the G.711 A-law recording the package ships (`g711a.pcap`: 236 RTP packets,
//!   7.05 s) and hangs up 8 s after the call was answered. The study's load: new calls at 8 per second, at most 100
//!   at once, for 60 s (480 calls; `--quick`: 8 calls at 4 per second). The study's callee was an Asterisk
//!   extension (not in Debian 12); here it is SIPp's `uas` scenario with RTP echo, so that every call carries voice
//!   both ways, as a call to an echo extension does.
//! - `successful calls` (%): SIPp's own count of calls that ran their scenario to the end (its statistics file),
//!   beside the study's 100% (plain Ethernet) and 98.14% (full crypto).
//! - RTP, from captures on both stations (headers only, on each station's side of the protection: its LAN port on
//!   the plain bridge, l2sec's TAP through l2sec, where RTP is in clear), each station's arriving streams (one per
//!   call and direction) read by tshark's RTP analysis (`-z rtp,streams`, RFC 3550 interarrival jitter; UDP to or
//!   from the callee's RTP port decoded as RTP): `rtp streams` (2 per call),
//!   `rtp lost` (% of the packets the streams' sequence numbers expected), `rtp mean jitter` and `rtp max jitter`
//!   (ms; one repetition per stream). The study gives no jitter values, only that jitter stayed below the 40 ms
//!   limit of good quality on every path: the report's finding judges by that limit.
//! - `transfer rate` (KB/s, 1,000 bytes): bytes both ways on the caller's LAN port (sealed frames through l2sec)
//!   over the calls' time, beside the study's about 586 KB/s for its load (in the full run only: `--quick`'s load is
//!   smaller).
//! - CPU and memory: `sipp uac cpu` (ms, user and system, from GNU `time`) and `sipp uac peak memory` (KiB), `sipp
//!   uas cpu` and `sipp uas peak memory` (from `/proc`), and through l2sec `daemon cpu` (% of one CPU, both stations'
//!   daemons together, one repetition per second of the calls), `daemon peak cpu` (the highest such second, beside
//!   the study's 27.4% for its protocol's program) and `daemon peak memory` (KiB, the larger `VmHWM`, beside the
//!   study's 3,204 KB).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::lab::Lab;
use crate::lab_report::Cell;
use crate::lan::{L2Opts, Lan, Station};
use crate::{Error, Result};

const EXPERIMENT: &str = "voip";
/// The paths: (name, l2sec suite; `None`: the plain bridge), as the SCP test's.
pub const PATHS: [(&str, Option<&str>); 4] = super::scp::PATHS;
/// The G.711 A-law recording SIPp's package ships.
pub const G711_PCAP: &str = "/usr/share/sip-tester/g711a.pcap";
/// The callee's SIP and RTP ports; the caller's SIP port.
const UAS_SIP: u16 = 5060;
const UAS_RTP: u16 = 6000;
const UAC_SIP: u16 = 5061;

const FIG_6_7_ETHERNET: &str = "L2 study, Fig. 6.7: 100% of calls on 1-Ethernet (from text)";
const FIG_6_7_NULL: &str = "L2 study, Fig. 6.7: 100% of calls with PSP-noENC-noHMAC (from text)";
const FIG_6_7_FULL: &str =
    "L2 study, Fig. 6.7: 98.14% with full crypto, 9 of 485 calls failed (from text)";
const FIG_6_9: &str =
    "L2 study, Fig. 6.9: its protocol's program at most 27.4% CPU, full crypto (from text)";
const FIG_6_11: &str =
    "L2 study, Fig. 6.11: its protocol's program 3,204 KB, full crypto (from text)";
const FIG_6_12: &str =
    "L2 study, Fig. 6.12: about 586 KB/s, constant over time, every path (from text; its load: 100 calls at most, 8/s)";

/// The call load: calls placed, new calls per second, calls at once at most, and how long a call lasts after it
/// was answered (ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    pub calls: u32,
    pub rate: u32,
    pub limit: u32,
    pub hold_ms: u32,
}

/// The study's load (60 s at 8 calls/s, at most 100 at once; each call the whole recording), or `--quick`'s (4
/// calls, 3 s of the recording each).
pub fn load(quick: bool) -> Load {
    if quick {
        Load {
            calls: 4,
            rate: 4,
            limit: 100,
            hold_ms: 3000,
        }
    } else {
        Load {
            calls: 480,
            rate: 8,
            limit: 100,
            hold_ms: 8000,
        }
    }
}

/// The paths of a run: `--quick` leaves out Blowfish (the slowest suite) and the null suite (the full run has
/// them).
pub fn paths(quick: bool) -> &'static [(&'static str, Option<&'static str>)] {
    if quick {
        &PATHS[..2]
    } else {
        &PATHS
    }
}

/// The caller's scenario: SIPp's built-in `uac_pcap` with the recording's installed path and without its DTMF
/// tail (the study's calls carried voice only); it hangs up `hold_ms` after the call was answered (SIPp stops the
/// recording's playing then).
pub fn uac_scenario(hold_ms: u32) -> String {
    let sdp = "      v=0\n      o=user1 53655765 2353687637 IN IP[local_ip_type] [local_ip]\n      s=-\n      \
               c=IN IP[local_ip_type] [local_ip]\n      t=0 0\n      m=audio [auto_media_port] RTP/AVP 8\n      \
               a=rtpmap:8 PCMA/8000\n";
    let headers = |method: &str, cseq: &str, to_tag: &str| {
        format!(
            "      {method} sip:[service]@[remote_ip]:[remote_port] SIP/2.0\n      \
             Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]\n      \
             From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag09[call_number]\n      \
             To: [service] <sip:[service]@[remote_ip]:[remote_port]>{to_tag}\n      Call-ID: [call_id]\n      \
             CSeq: {cseq}\n      Contact: sip:sipp@[local_ip]:[local_port]\n      Max-Forwards: 70\n      \
             Subject: Performance Test\n"
        )
    };
    format!(
        "<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n<!DOCTYPE scenario SYSTEM \"sipp.dtd\">\n\
         <scenario name=\"netveil lab voip uac\">\n\
         <send retrans=\"500\"><![CDATA[\n\n{}      Content-Type: application/sdp\n      Content-Length: [len]\n\n{sdp}\n]]></send>\n\
         <recv response=\"100\" optional=\"true\"></recv>\n<recv response=\"180\" optional=\"true\"></recv>\n\
         <recv response=\"183\" optional=\"true\"></recv>\n<recv response=\"200\" rtd=\"true\"></recv>\n\
         <send><![CDATA[\n\n{}      Content-Length: 0\n\n]]></send>\n\
         <nop><action><exec play_pcap_audio=\"{G711_PCAP}\"/></action></nop>\n\
         <pause milliseconds=\"{hold_ms}\"/>\n\
         <send retrans=\"500\"><![CDATA[\n\n{}      Content-Length: 0\n\n]]></send>\n\
         <recv response=\"200\" crlf=\"true\"></recv>\n</scenario>\n",
        headers("INVITE", "1 INVITE", ""),
        headers("ACK", "1 ACK", "[peer_tag_param]"),
        headers("BYE", "2 BYE", "[peer_tag_param]"),
    )
}

/// (successful, failed) calls from SIPp's statistics file (`-trace_stat`): the cumulative counters of its last line.
pub fn parse_stat(csv: &str) -> Option<(u64, u64)> {
    let lines: Vec<&str> = csv.lines().filter(|l| !l.trim().is_empty()).collect();
    let (first, rest) = lines.split_first()?;
    let head: Vec<&str> = first.split(';').collect();
    let last: Vec<&str> = rest.last()?.split(';').collect();
    let col = |name: &str| -> Option<u64> {
        let i = head.iter().position(|h| h.trim() == name)?;
        last.get(i)?.trim().parse().ok()
    };
    Some((col("SuccessfulCall(C)")?, col("FailedCall(C)")?))
}

/// One RTP stream of tshark's `-z rtp,streams` table.
#[derive(Debug, Clone, PartialEq)]
pub struct Stream {
    pub dst: String,
    pub packets: u64,
    pub lost: i64,
    pub mean_jitter_ms: f64,
    pub max_jitter_ms: f64,
}

/// The streams of tshark's `-z rtp,streams` output (columns: start, end, source address and port, destination
/// address and port, SSRC, payload, packets, lost and its share, min/mean/max delta, min/mean/max jitter, problems).
pub fn parse_streams(text: &str) -> Vec<Stream> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 17 || !f[6].starts_with("0x") {
                return None;
            }
            Some(Stream {
                dst: f[4].to_string(),
                packets: f[8].parse().ok()?,
                lost: f[9].parse().ok()?,
                mean_jitter_ms: f[15].parse().ok()?,
                max_jitter_ms: f[16].parse().ok()?,
            })
        })
        .collect()
}

/// The RTP streams in a capture that arrive at `dst`.
fn arriving_streams(pcap: &Path, dst: &str) -> Result<Vec<Stream>> {
    let out = crate::lab::run_ok(
        std::process::Command::new("tshark")
            .args(["-n", "-q", "-d"])
            // Every RTP stream has the callee's RTP port at one end (heuristics would leave some to other
            // dissectors: a caller's port 6160 reads as ECMP).
            .arg(format!("udp.port=={UAS_RTP},rtp"))
            .args(["-z", "rtp,streams", "-r"])
            .arg(pcap),
    )?;
    Ok(parse_streams(&out)
        .into_iter()
        .filter(|s| s.dst == dst)
        .collect())
}

/// Bytes sent and received so far on `dev` in `ns` (`ip -s -j link`).
fn link_bytes(lab: &Lab, ns: &str, dev: &str) -> Result<u64> {
    let text = lab.exec_ok(ns, &["ip", "-s", "-j", "link", "show", "dev", dev])?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::output("ip -s -j link", e.to_string()))?;
    let s = &v[0]["stats64"];
    match (s["rx"]["bytes"].as_u64(), s["tx"]["bytes"].as_u64()) {
        (Some(r), Some(t)) => Ok(r + t),
        _ => Err(Error::output(
            "ip -s -j link",
            format!("no byte counters for {dev}: {text}"),
        )),
    }
}

/// What one path's calls gave.
#[derive(Debug, Clone, Default)]
pub struct Calls {
    pub placed: u64,
    pub successful: u64,
    /// Every arriving stream, both stations.
    pub streams: Vec<Stream>,
    pub kb_per_s: f64,
    pub uac_cpu_ms: f64,
    pub uac_peak_kib: f64,
    pub uas_cpu_ms: f64,
    pub uas_peak_kib: f64,
    /// l2sec's daemons' CPU per second of the calls, % of one CPU (empty on the bridge).
    pub daemon_cpu_pct: Vec<f64>,
    pub daemon_peak_kib: Option<f64>,
}

/// Samples the summed CPU time of `pids` once a second until `stop`: % of one CPU per second.
fn sample_cpu(pids: Vec<u32>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<f64>> {
    std::thread::spawn(move || {
        let total = || crate::lab_proc::sum_cpu_ms(&pids).ok();
        let mut out = Vec::new();
        let (mut t0, mut c0) = (Instant::now(), total());
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
            if t0.elapsed() < Duration::from_secs(1) {
                continue;
            }
            let (t1, c1) = (Instant::now(), total());
            if let (Some(a), Some(b)) = (c0, c1) {
                out.push(100.0 * (b - a) / (t1 - t0).as_secs_f64() / 1e3);
            }
            (t0, c0) = (t1, c1);
        }
        out
    })
}

/// The calls of `load` from `h1` to `h2` on a built LAN (through `daemons` when l2sec protects it); captures on
/// `dev` (each station's side of the protection).
fn calls(
    lab: &Lab,
    h1: &Station,
    h2: &Station,
    dev: &str,
    daemons: &[u32],
    load: Load,
) -> Result<Calls> {
    let dir: PathBuf = lab.dir().join("voip");
    std::fs::create_dir_all(&dir).map_err(Error::io("voip dir"))?;
    let scenario = dir.join("uac.xml");
    std::fs::write(&scenario, uac_scenario(load.hold_ms)).map_err(Error::io("uac.xml"))?;
    let (a, b) = (h1.ip.to_string(), h2.ip.to_string());
    let uas_log = std::fs::File::create(dir.join("uas.log")).map_err(Error::io("uas.log"))?;
    let child = lab
        .command(&h2.ns, &["sipp", "-sn", "uas", "-i", &b, "-mi", &b])
        .args(["-p", &UAS_SIP.to_string(), "-mp", &UAS_RTP.to_string()])
        .args(["-rtp_echo", "-nostdin"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(uas_log)
        .spawn()
        .map_err(Error::io("cannot start sipp (apt-get install sip-tester)"))?;
    let uas = crate::lab::Held(child);
    let port = format!(":{UAS_SIP}");
    let mut listening = false;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(50));
        if lab
            .exec_ok(&h2.ns, &["ss", "-Hlun", "sport", "=", &port])?
            .contains(&format!("{b}{port}"))
        {
            listening = true;
            break;
        }
    }
    if !listening {
        return Err(Error::timeout(
            format!("sipp (uas) did not listen on {b}{port}"),
            2.5,
            format!("see {}/uas.log", dir.display()),
        ));
    }
    let caps = [
        lab.capture(&h1.ns, dev, "voip-h1.pcap", 96, &["udp"])?,
        lab.capture(&h2.ns, dev, "voip-h2.pcap", 96, &["udp"])?,
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = (!daemons.is_empty()).then(|| sample_cpu(daemons.to_vec(), stop.clone()));
    let bytes0 = link_bytes(lab, &h1.ns, crate::lan::PORT)?;
    let stat = dir.join("uac-stat.csv");
    let t = Instant::now();
    // Enough time for every call to be placed and end, with room.
    let timeout = format!(
        "{}s",
        load.calls / load.rate.max(1) + load.hold_ms / 1000 + 40
    );
    let out = lab
        .command(
            &h1.ns,
            &[
                "/usr/bin/time",
                "-f",
                "%e %U %S %M",
                "sipp",
                &format!("{b}:{UAS_SIP}"),
                "-sf",
            ],
        )
        .arg(&scenario)
        .args(["-i", &a, "-mi", &a, "-p", &UAC_SIP.to_string()])
        .args(["-r", &load.rate.to_string(), "-l", &load.limit.to_string()])
        .args([
            "-m",
            &load.calls.to_string(),
            "-timeout",
            &timeout,
            "-nostdin",
        ])
        .args(["-trace_stat", "-fd", "1", "-stf"])
        .arg(&stat)
        .stdin(Stdio::null())
        .output()
        .map_err(Error::io(
            "cannot run sipp (apt-get install sip-tester time)",
        ))?;
    let secs = t.elapsed().as_secs_f64();
    let bytes = link_bytes(lab, &h1.ns, crate::lan::PORT)? - bytes0;
    stop.store(true, Ordering::Relaxed);
    let daemon_cpu_pct = sampler
        .map(|s| s.join().unwrap_or_default())
        .unwrap_or_default();
    // sipp exits 0 when every call succeeded, 1 when some failed, higher on a fatal error.
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.code().is_none_or(|c| c > 1) {
        return Err(Error::command(
            "sipp (uac)",
            Some(out.status),
            err.lines().rev().take(5).collect::<Vec<_>>().join(" | "),
        ));
    }
    let (_, uac_cpu_ms, uac_peak_kib) = err
        .lines()
        .rev()
        .find_map(super::scp::parse_time)
        .ok_or_else(|| {
            Error::output(
                "/usr/bin/time",
                format!("no GNU time line in: {}", err.trim()),
            )
        })?;
    let stat_text = std::fs::read_to_string(&stat).map_err(Error::io("sipp's statistics"))?;
    let (successful, failed) = parse_stat(&stat_text).ok_or_else(|| Error::File {
        path: stat.clone(),
        why: "sipp's statistics hold no call counters".into(),
    })?;
    let uas_pid = uas.id();
    let (uas_cpu_ms, uas_peak_kib) = (
        crate::lab_proc::cpu_ms(uas_pid)?,
        crate::lab_proc::peak_kib(uas_pid)?,
    );
    drop(uas);
    let mut streams = Vec::new();
    for (mut cap, dst) in caps.into_iter().zip([&a, &b]) {
        let pcap = cap.stop()?;
        streams.extend(arriving_streams(&pcap, dst)?);
    }
    let daemon_peak_kib = if daemons.is_empty() {
        None
    } else {
        Some(crate::lab_proc::max_peak_kib(daemons)?)
    };
    Ok(Calls {
        placed: successful + failed,
        successful,
        streams,
        kb_per_s: bytes as f64 / 1e3 / secs,
        uac_cpu_ms,
        uac_peak_kib,
        uas_cpu_ms,
        uas_peak_kib,
        daemon_cpu_pct,
        daemon_peak_kib,
    })
}

/// One path's calls on a fresh LAN lab.
fn path_calls(bin: &Path, suite: Option<&str>, load: Load) -> Result<Calls> {
    let mut lab = Lab::new("nvlab")?.with_netveil(bin);
    let (lan, daemons) = Lan::pair(&mut lab, suite.map(L2Opts::suite))?;
    let pids = crate::lan::daemon_pids(&daemons)?;
    let dev = if suite.is_some() {
        crate::lan::TAP
    } else {
        crate::lan::PORT
    };
    let (h1, h2) = (lan.station("h1")?, lan.station("h2")?);
    calls(&lab, h1, h2, dev, &pids, load)
}

/// A path's cells from its calls.
fn path_cells(name: &str, suite: Option<&str>, full_load: bool, c: &Calls) -> Vec<Cell> {
    let l2sec = suite.is_some();
    // The study's full-crypto figures stand beside the suites with crypto, not beside the null suite.
    let crypto = suite.is_some_and(|s| s != "null-null");
    let cell =
        |m: &str, unit: &str, runs: Vec<f64>| Cell::measured(EXPERIMENT, name, m, unit, runs);
    let mut out = vec![cell("calls placed", "calls", vec![c.placed as f64])];
    let ok = if c.placed > 0 {
        vec![100.0 * c.successful as f64 / c.placed as f64]
    } else {
        Vec::new()
    };
    let (paper, source) = match suite {
        None => (100.0, FIG_6_7_ETHERNET),
        Some("null-null") => (100.0, FIG_6_7_NULL),
        Some(_) => (98.14, FIG_6_7_FULL),
    };
    out.push(cell("successful calls", "%", ok).paper(paper, source));
    let expected: i64 = c.streams.iter().map(|s| s.packets as i64 + s.lost).sum();
    let lost: i64 = c.streams.iter().map(|s| s.lost).sum();
    out.push(if expected > 0 {
        cell("rtp lost", "%", vec![100.0 * lost as f64 / expected as f64])
    } else {
        Cell::missing(EXPERIMENT, name, "rtp lost", "%", "no RTP stream arrived")
    });
    out.push(cell("rtp streams", "streams", vec![c.streams.len() as f64]));
    // (The study gives no jitter figure, only its bound: the finding judges by it.)
    out.push(cell(
        "rtp mean jitter",
        "ms",
        c.streams.iter().map(|s| s.mean_jitter_ms).collect(),
    ));
    out.push(cell(
        "rtp max jitter",
        "ms",
        c.streams.iter().map(|s| s.max_jitter_ms).collect(),
    ));
    let rate = cell("transfer rate", "KB/s", vec![c.kb_per_s]);
    out.push(if full_load {
        rate.paper(586.0, FIG_6_12)
    } else {
        rate
    });
    out.push(cell("sipp uac cpu", "ms", vec![c.uac_cpu_ms]));
    out.push(cell("sipp uac peak memory", "KiB", vec![c.uac_peak_kib]));
    out.push(cell("sipp uas cpu", "ms", vec![c.uas_cpu_ms]));
    out.push(cell("sipp uas peak memory", "KiB", vec![c.uas_peak_kib]));
    if l2sec {
        let peak = c.daemon_cpu_pct.iter().copied().reduce(f64::max);
        out.push(cell("daemon cpu", "%", c.daemon_cpu_pct.clone()));
        let peak_cpu = cell("daemon peak cpu", "%", peak.into_iter().collect());
        let peak_mem = cell(
            "daemon peak memory",
            "KiB",
            c.daemon_peak_kib.into_iter().collect(),
        );
        if crypto {
            out.push(peak_cpu.paper(27.4, FIG_6_9));
            out.push(peak_mem.paper(3204.0, FIG_6_11));
        } else {
            out.extend([peak_cpu, peak_mem]);
        }
    }
    out
}

/// The metrics of a path (for the cells of a path that did not run): (metric, unit).
fn metrics(l2sec: bool) -> Vec<(&'static str, &'static str)> {
    let mut m = vec![
        ("calls placed", "calls"),
        ("successful calls", "%"),
        ("rtp lost", "%"),
        ("rtp streams", "streams"),
        ("rtp mean jitter", "ms"),
        ("rtp max jitter", "ms"),
        ("transfer rate", "KB/s"),
        ("sipp uac cpu", "ms"),
        ("sipp uac peak memory", "KiB"),
        ("sipp uas cpu", "ms"),
        ("sipp uas peak memory", "KiB"),
    ];
    if l2sec {
        m.extend([
            ("daemon cpu", "%"),
            ("daemon peak cpu", "%"),
            ("daemon peak memory", "KiB"),
        ]);
    }
    m
}

/// The `voip` experiment's cells.
pub fn run(bin: &Path, quick: bool) -> Vec<Cell> {
    let load = load(quick);
    let mut cells = Vec::new();
    for &(name, suite) in paths(quick) {
        crate::say!(
            "voip: {name} ({} calls, {}/s, at most {} at once)",
            load.calls,
            load.rate,
            load.limit
        );
        match path_calls(bin, suite, load) {
            Ok(c) => cells.extend(path_cells(name, suite, !quick, &c)),
            Err(e) => {
                let why = format!("{e}");
                for (m, unit) in metrics(suite.is_some()) {
                    cells.push(Cell::missing(EXPERIMENT, name, m, unit, &why));
                }
            }
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsharks_rtp_streams_are_read() {
        let text = "========================= RTP Streams ========================\n   \
            Start time      End time     Src IP addr  Port    Dest IP addr  Port       SSRC          Payload  Pkts         Lost   Min Delta(ms)  Mean Delta(ms)   Max Delta(ms)  Min Jitter(ms) Mean Jitter(ms)  Max Jitter(ms) Problems?\n     \
            1.753765      8.803660       192.0.2.2  6000       192.0.2.1  6028 0xDEE0EE8F            g711A   236     0 (0.0%)          25.104          30.000          34.852           0.001           0.357           0.832 \n     \
            1.753751      8.803522       192.0.2.1  6028       192.0.2.2  6000 0xDEE0EE8F            g711A   230     -2 (-0.9%)          25.109          29.999          34.843           0.001           0.355           1.831 X\n\
            ==============================================================\n";
        let s = parse_streams(text);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].dst, "192.0.2.1");
        assert_eq!((s[0].packets, s[0].lost), (236, 0));
        assert_eq!((s[0].mean_jitter_ms, s[0].max_jitter_ms), (0.357, 0.832));
        assert_eq!(
            (s[1].packets, s[1].lost, s[1].max_jitter_ms),
            (230, -2, 1.831)
        );
    }

    #[test]
    fn sipps_statistics_give_the_last_line_counters() {
        let csv = "StartTime;SuccessfulCall(P);SuccessfulCall(C);FailedCall(P);FailedCall(C);\n\
                   a;0;0;0;0;\nb;3;5;0;1;\n";
        assert_eq!(parse_stat(csv), Some((5, 1)));
        assert_eq!(parse_stat("StartTime;\n"), None);
    }

    #[test]
    fn the_scenario_plays_the_recording_and_hangs_up() {
        let s = uac_scenario(8000);
        assert!(s.contains(G711_PCAP) && s.contains("<pause milliseconds=\"8000\"/>"));
        assert!(s.contains("INVITE sip:") && s.contains("BYE sip:") && s.contains("ACK sip:"));
        assert!(!s.contains("dtmf"));
        assert_eq!(load(false).calls, 480);
    }
}
