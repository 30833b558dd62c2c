//! `netveil bench --flood`: TCP goodput through a tunnel while an attacker floods the receiving endpoint, against
//! the same run's baseline (no flood) and the closed-port control (a flood the kernel alone handles).
//!
//! The lab is the two-host pair (a sends to b through the tunnel) plus an attacker `m` on a link of its own to b
//! (203.0.113.0/24). `m` runs `netveil flood` (AF_PACKET, paced) at b's outer address while iperf3 runs a → b;
//! each flood either comes from `m`'s own address (a non-peer) or spoofs a's (the peer's) address. `replay` sends
//! packets recorded from the real tunnel. Reported per flood: the rate achieved, goodput and its share of the
//! baseline, b's daemon drop counters, and b's daemon memory before and after.

use super::args::BenchArgs;
use crate::lab::{self, iperf, HostPair, Lab, TwoHosts};
use crate::{Error, Result};
use std::process::Stdio;
use std::time::Duration;

/// One measured flood.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FloodRow {
    pub tunnel: String,
    pub flood: String,
    pub source: String,
    pub packets_per_s: f64,
    pub gbit_per_s: f64,
    /// TCP retransmissions of the transfer (the tunnel lost packets).
    pub retransmits: u64,
    /// Goodput as a share of the baseline of the same run (1.0 = no loss).
    pub share: f64,
    /// b's daemon: packets dropped by its filters and data plane during the flood.
    pub drops: u64,
    pub rss_kib_before: u64,
    pub rss_kib_after: u64,
}

const M_ADDR: &str = "203.0.113.1";
const B_M_ADDR: &str = "203.0.113.2";

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Everything b's daemon dropped so far (data plane and its nftables filters).
fn drops(d: &lab::Daemon) -> u64 {
    let Ok(st) = d.status_json() else { return 0 };
    st["drops"]
        .as_object()
        .map(|m| m.values().filter_map(|v| v.as_u64()).sum())
        .unwrap_or(0)
}

struct FloodLab {
    lab: Lab,
    hosts: TwoHosts,
    m: String,
    b_mac: String,
    replay_pcap: std::path::PathBuf,
    port: u16,
    psp: bool,
}

fn build(pair: &HostPair) -> Result<FloodLab> {
    let mut lab = Lab::new("nvflood")?;
    let mut hosts = TwoHosts::topology(&mut lab, pair)?;
    let m = lab.add_ns("m")?;
    let b = hosts.ns[1].clone();
    lab.veth(&m, "veth-mb", &b, "veth-bm")?;
    lab.addr(&m, "veth-mb", &format!("{M_ADDR}/24"))?;
    lab.addr(&b, "veth-bm", &format!("{B_M_ADDR}/24"))?;
    // b takes packets for its outer address on the attacker's link, whatever their source (a spoofed peer address
    // arrives on the "wrong" interface).
    for k in ["all", "default", "veth-bm"] {
        lab.exec_ok(
            &b,
            &["sysctl", "-qw", &format!("net.ipv4.conf.{k}.rp_filter=0")],
        )?;
    }
    hosts.start(&lab)?;
    let psp = pair.protocol == lab::Protocol::Psp;
    if psp {
        hosts.wait_psp_associated(Duration::from_secs(15))?;
    }
    let port = if psp { netveil_psp::UDP_PORT } else { 4500 };
    let out = lab.exec_ok(&b, &["ip", "-j", "link", "show", "veth-bm"])?;
    let v: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| Error::output("ip -j link", e.to_string()))?;
    let b_mac = v[0]["address"]
        .as_str()
        .ok_or_else(|| Error::output("ip -j link", "no MAC address on veth-bm"))?
        .to_string();
    // Packets of the real tunnel to replay: recorded on b's side during a ping flood (one packet each; a bulk
    // transfer would be recorded as GSO super-packets).
    let file = "replay.pcap";
    let port_s = port.to_string();
    let mut cap = lab.capture(&b, "veth-b", file, 2048, &["udp", "dst", "port", &port_s])?;
    lab.exec(
        &hosts.ns[0],
        &[
            "ping",
            "-n",
            "-q",
            "-i",
            "0.002",
            "-c",
            "2000",
            "-s",
            "100",
            &hosts.addrs[1].inner.to_string(),
        ],
    )?;
    let replay_pcap = cap.stop()?;
    Ok(FloodLab {
        lab,
        hosts,
        m,
        b_mac,
        replay_pcap,
        port,
        psp,
    })
}

/// The highest sequence number (ESP) or IV (PSP) b's window for a's traffic has accepted.
fn b_rx_top(f: &FloodLab) -> Result<u64> {
    let st = f.hosts.daemon(1).status_json()?;
    let top = if f.psp {
        let spi = st["psp"]["rx_spi"].clone();
        st["psp"]["rx_sas"]
            .as_array()
            .and_then(|v| v.iter().find(|s| s["spi"] == spi))
            .and_then(|s| s["replay_top"].as_u64())
    } else {
        st["sas"]
            .as_array()
            .and_then(|v| v.iter().find(|s| s["direction"] == "in"))
            .and_then(|s| s["seq"].as_u64())
    };
    top.ok_or_else(|| {
        Error::output(
            "netveil status --json",
            format!("no replay window top in b's status: {st}"),
        )
    })
}

/// The SPI b receives with (the one a sends to).
fn b_rx_spi(f: &FloodLab) -> Result<u32> {
    let st = f.hosts.daemon(1).status_json()?;
    let s = if f.psp {
        st["psp"]["rx_spi"].as_str().map(str::to_string)
    } else {
        st["sas"]
            .as_array()
            .and_then(|v| v.iter().find(|s| s["direction"] == "in"))
            .and_then(|s| s["spi"].as_str().map(str::to_string))
    }
    .ok_or_else(|| {
        Error::output(
            "netveil status --json",
            format!("no inbound SPI in b's status: {st}"),
        )
    })?;
    u32::from_str_radix(s.trim_start_matches("0x"), 16)
        .map_err(|_| Error::output("netveil status --json", format!("bad SPI '{s}'")))
}

fn measure(
    f: &FloodLab,
    a: &BenchArgs,
    tunnel: &str,
    kind: Option<(&str, bool)>,
    baseline: f64,
    pps: u64,
) -> Result<FloodRow> {
    let b = f.hosts.daemon(1);
    let pid = b.pid().unwrap_or(0);
    let rss_before = rss_kib(pid);
    let drops_before = drops(b);
    let dst = f.hosts.addrs[1].inner.to_string();
    // TCP a -> b through the tunnel: Gbit/s and retransmits.
    let goodput = || {
        iperf(
            &f.lab,
            &f.hosts.ns[1],
            &f.hosts.ns[0],
            &dst,
            a.seconds,
            a.streams,
        )
    };
    let (gbit, retransmits, pps, flood, source) = match kind {
        None => {
            let (g, r) = goodput()?;
            (g, r, 0.0, "none (baseline)".to_string(), "-".to_string())
        }
        Some((k, spoof)) => {
            let src = if spoof {
                f.hosts.addrs[0].outer.to_string()
            } else {
                M_ADDR.to_string()
            };
            let secs = format!("{}", a.seconds as f64 + 2.5);
            let pps = pps.to_string();
            let spi = b_rx_spi(f)?.to_string();
            let netveil = f.lab.netveil().to_string_lossy().to_string();
            let mut args = vec![
                netveil.as_str(),
                "flood",
                "--interface",
                "veth-mb",
                "--dst-mac",
                &f.b_mac,
                "--src",
                &src,
                "--dst",
                B_OUTER,
                "--kind",
                if k == "bad-icv-aimed" { "bad-icv" } else { k },
                "--proto",
                if f.psp { "psp" } else { "esp" },
                "--pps",
                &pps,
                "--seconds",
                &secs,
                "--spi",
                &spi,
            ];
            let pcap = f.replay_pcap.to_string_lossy().to_string();
            // Aimed: what a forger who sees the wire sends, just above the window and moving faster than the
            // real sender, so every packet passes the replay check (and any filter) and costs a decryption.
            let start = match k {
                "bad-icv-aimed" => (b_rx_top(f)? + 20_000).to_string(),
                _ => String::new(),
            };
            if k == "bad-icv-aimed" {
                args.extend(["--counter-start", start.as_str(), "--counter-step", "2"]);
            }
            if k == "replay" {
                args.extend(["--pcap", pcap.as_str()]);
            }
            let child = f
                .lab
                .command(&f.m, &args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(Error::io("cannot start netveil flood"))?;
            std::thread::sleep(Duration::from_millis(700));
            let r = goodput();
            let out = child
                .wait_with_output()
                .map_err(Error::io("netveil flood"))?;
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            if !out.status.success() {
                return Err(Error::command(
                    format!("netveil flood --kind {k}"),
                    Some(out.status),
                    String::from_utf8_lossy(&out.stderr),
                ));
            }
            // "N packets in S s (R packets/s)"
            let pps = text
                .split('(')
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|s| s.parse::<f64>().ok())
                .unwrap_or(0.0);
            let (g, retr) = r?;
            let label = match k {
                "closed" => "closed port (control)".to_string(),
                "random" => format!("random data to UDP {}", f.port),
                "unknown-spi" => "unknown SPIs".to_string(),
                "bad-icv" => "right SPI, bad ICV, blind sequence".to_string(),
                "bad-icv-aimed" => "right SPI, bad ICV, aimed sequence".to_string(),
                "replay" => "recorded packets replayed".to_string(),
                o => o.to_string(),
            };
            (
                g,
                retr,
                pps,
                label,
                if spoof {
                    "the peer (spoofed)"
                } else {
                    "a non-peer"
                }
                .to_string(),
            )
        }
    };
    Ok(FloodRow {
        tunnel: tunnel.to_string(),
        flood,
        source,
        packets_per_s: pps,
        gbit_per_s: gbit,
        retransmits,
        share: if baseline > 0.0 { gbit / baseline } else { 1.0 },
        drops: drops(b).saturating_sub(drops_before),
        rss_kib_before: rss_before,
        rss_kib_after: rss_kib(pid),
    })
}

const B_OUTER: &str = "192.0.2.2";

fn row_text(r: &FloodRow) -> String {
    format!(
        "{:<24} {:<36} {:<18} {:>6.2} {:>8.2} {:>10.0}% {:>8} {:>10} {:>8}/{:<8}",
        r.tunnel,
        r.flood,
        r.source,
        r.packets_per_s / 1e6,
        r.gbit_per_s,
        100.0 * r.share,
        r.retransmits,
        r.drops,
        r.rss_kib_before,
        r.rss_kib_after
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Runs every flood against one tunnel, `--flood-rounds` times, each round with a baseline of its own; prints each
/// measurement as it comes and returns one row per flood: medians over the rounds (the share is the median goodput
/// under the flood over the median baseline), drops summed, memory before the first and after the last.
fn run_tunnel(a: &BenchArgs, pair: &HostPair, tunnel: &str) -> Result<Vec<FloodRow>> {
    let f = build(pair)?;
    let print = |r: &FloodRow| println!("  {}", row_text(r));
    let mut kinds: Vec<Option<(&str, bool)>> = vec![None];
    for k in [
        "closed",
        "random",
        "unknown-spi",
        "bad-icv",
        "bad-icv-aimed",
        "replay",
    ] {
        if !a.flood_kinds.iter().any(|x| x == k) {
            continue;
        }
        if k != "replay" && k != "bad-icv-aimed" {
            kinds.push(Some((k, false)));
        }
        if k != "closed" {
            kinds.push(Some((k, true)));
        }
    }
    // Line rate: what the closed-port control reaches unpaced in the first round, for every flood (unless a rate
    // is asked).
    let mut pps = a.flood_pps;
    let mut runs: Vec<Vec<FloodRow>> = vec![Vec::new(); kinds.len()];
    for round in 0..a.flood_rounds.max(1) {
        println!("  round {}", round + 1);
        let mut baseline = 0.0;
        for (i, k) in kinds.iter().enumerate() {
            let r = measure(&f, a, tunnel, *k, baseline, pps)?;
            match k {
                None => baseline = r.gbit_per_s,
                Some(("closed", _)) if pps == 0 => pps = r.packets_per_s as u64,
                _ => {}
            }
            print(&r);
            runs[i].push(r);
        }
    }
    let base = median(runs[0].iter().map(|r| r.gbit_per_s).collect());
    Ok(runs
        .into_iter()
        .map(|rs| {
            let g = median(rs.iter().map(|r| r.gbit_per_s).collect());
            FloodRow {
                gbit_per_s: g,
                share: if base > 0.0 { g / base } else { 1.0 },
                packets_per_s: median(rs.iter().map(|r| r.packets_per_s).collect()),
                retransmits: median(rs.iter().map(|r| r.retransmits as f64).collect()) as u64,
                drops: rs.iter().map(|r| r.drops).sum(),
                rss_kib_before: rs.first().map_or(0, |r| r.rss_kib_before),
                rss_kib_after: rs.last().map_or(0, |r| r.rss_kib_after),
                ..rs[0].clone()
            }
        })
        .collect())
}

/// `netveil bench --flood`: ESP-in-UDP (aes128gcm16) and PSP (aes-gcm-128) under every flood.
pub fn run(a: &BenchArgs) -> Result<Vec<FloodRow>> {
    println!(
        "netveil bench --flood: TCP goodput a -> b through the tunnel (iperf3, {} s) while m floods b's outer address \
         ({}, 100-byte UDP payloads, AF_PACKET), against the same run's baseline; {} rounds, medians",
        a.seconds,
        if a.flood_pps == 0 {
            "at line rate: the rate the unpaced closed-port control reaches".to_string()
        } else {
            format!("{} packets/s asked", a.flood_pps)
        },
        a.flood_rounds.max(1)
    );
    for k in &a.flood_kinds {
        if ![
            "closed",
            "random",
            "unknown-spi",
            "bad-icv",
            "bad-icv-aimed",
            "replay",
        ]
        .contains(&k.as_str())
        {
            return Err(Error::Usage(format!(
                "--flood-kinds: '{k}' must be closed, random, unknown-spi, bad-icv, bad-icv-aimed or replay"
            )));
        }
    }
    let mut rows = Vec::new();
    for t in &a.flood_tunnels {
        match t.as_str() {
            "esp" => {
                let mut esp = HostPair::esp("aes128gcm16");
                esp.udp_encap = true;
                rows.extend(run_tunnel(a, &esp, "esp-in-udp aes128gcm16")?);
            }
            "psp" => rows.extend(run_tunnel(
                a,
                &HostPair::psp("aes-gcm-128"),
                "psp aes-gcm-128",
            )?),
            o => {
                return Err(Error::Usage(format!(
                    "--flood-tunnels: '{o}' must be esp or psp"
                )))
            }
        }
    }
    println!();
    println!("medians over {} rounds:", a.flood_rounds.max(1));
    println!(
        "{:<24} {:<36} {:<18} {:>6} {:>8} {:>11} {:>8} {:>10} {:>17}",
        "tunnel",
        "flood",
        "from",
        "Mpps",
        "Gbit/s",
        "of baseline",
        "retrans",
        "drops",
        "RSS KiB before/after"
    );
    for r in &rows {
        println!("{}", row_text(r));
    }
    Ok(rows)
}
