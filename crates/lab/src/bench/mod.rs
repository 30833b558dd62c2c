//! `netveil bench`: TCP throughput and ping round-trip time through netveil, per ESP suite and encapsulation and per
//! PSP version, against the same veth path in clear (and against wireguard-go when it is installed), and l2sec
//! against a plain bridge, all measured in one run in network-namespace labs; then PSP's per-packet time split (key
//! lookup, crypto, the rest), measured in process.
//!
//! Each row builds a fresh two-host lab (two namespaces joined by a veth pair), starts `netveil up` in both, pings
//! the peer's inner address (`--pings` per payload size, see [`ping`]), then runs iperf3
//! between the inner addresses for `--seconds`. Figures are the receiver's goodput. With `--compare PATH` every
//! netveil row is measured a second time, right after, with the daemons of the `netveil` binary at PATH.
//!
//! The files: the arguments (`args`), a path's measurement and the merge of rounds (`measure`), wireguard-go
//! (`wireguard`), round-trip times ([`ping`]), floods ([`flood`]), PSP's per-packet time split ([`split`]), IKEv2
//! setups against strongSwan's ([`ike`]) and PILSC ([`pilsc`]).

mod args;
pub mod flood;
pub mod ike;
mod measure;
pub mod pilsc;
pub mod ping;
pub mod split;
mod wireguard;

#[cfg(test)]
mod tests;

pub use args::BenchArgs;
pub use wireguard::{find_wireguard_go, with_wireguard_go, with_wireguard_go_on};

use crate::lab;
use crate::{Error, Result};
use measure::{measure_clear, measure_l2, measure_psp, measure_suite, measure_wireguard_go};
use measure::{merge_l2rows, merge_rows, Bin, Row};
use ping::PingStat;
use std::path::{Path, PathBuf};

pub const ALL_SUITES: &[&str] = &[
    "aes128gcm16",
    "aes256gcm16",
    "aes128gcm12",
    "aes128gcm8",
    "chacha20poly1305",
    "aes128gmac",
    "aes256gmac",
    "aes128-sha1",
    "aes256-sha256",
    "aes128-sha384",
    "aes256-sha512",
    "3des-sha1",
    "3des-md5",
    "null-sha1",
    "null-sha256",
    "null-null",
];

/// The binaries in the order round `round` runs them: in odd rounds the other way round, so that neither always
/// runs first.
fn turns(bins: &[Bin], round: u32) -> Vec<&Bin> {
    let mut v: Vec<&Bin> = bins.iter().collect();
    if round % 2 == 1 {
        v.reverse();
    }
    v
}

/// A `--daemon-bin` or `--compare` path: an existing file, made absolute (the lab runs it from elsewhere).
fn binary_arg(flag: &str, p: &Path) -> Result<PathBuf> {
    let meta = std::fs::metadata(p)
        .map_err(|e| Error::Usage(format!("{flag}: cannot use {}: {e}", p.display())))?;
    if !meta.is_file() {
        return Err(Error::Usage(format!(
            "{flag}: {} is not a file",
            p.display()
        )));
    }
    std::path::absolute(p).map_err(|e| Error::Usage(format!("{flag}: {}: {e}", p.display())))
}

pub fn run(a: BenchArgs) -> Result<()> {
    if !lab::is_root() {
        return Err(Error::Usage(
            "netveil bench builds network namespaces: run it as root".into(),
        ));
    }
    if a.ike {
        let bin = match &a.daemon_bin {
            Some(p) => binary_arg("--daemon-bin", p)?,
            None => std::env::current_exe().map_err(Error::io("current exe"))?,
        };
        crate::bench::ike::run(&a, bin)?;
        return Ok(());
    }
    if a.pilsc {
        crate::bench::pilsc::run(&a)?;
        return Ok(());
    }
    if !lab::have_tool("iperf3") {
        return Err(Error::Usage(
            "netveil bench needs iperf3 (apt-get install iperf3)".into(),
        ));
    }
    if a.flood && (a.compare.is_some() || a.daemon_bin.is_some() || a.rounds.is_some()) {
        return Err(Error::Usage(
            "--daemon-bin, --compare and --rounds are not for --flood (it has --flood-rounds)"
                .into(),
        ));
    }
    let rounds = a.rounds.unwrap_or(1);
    if rounds == 0 {
        return Err(Error::Usage("--rounds: at least 1".into()));
    }
    if a.flood {
        let rows = crate::bench::flood::run(&a)?;
        if let Some(p) = &a.json {
            let v = serde_json::json!({ "floods": rows });
            std::fs::write(p, serde_json::to_string_pretty(&v).unwrap_or_default())
                .map_err(Error::io(format!("cannot write {}", p.display())))?;
        }
        return Ok(());
    }
    let suites: Vec<String> = if a.suites.is_empty() {
        ALL_SUITES.iter().map(|s| s.to_string()).collect()
    } else {
        a.suites
            .iter()
            .filter(|s| s.as_str() != "none")
            .cloned()
            .collect()
    };
    let l2suites: Vec<String> = a
        .l2sec
        .iter()
        .filter(|s| s.as_str() != "none")
        .cloned()
        .collect();
    for s in &l2suites {
        if netveil_l2sec::Suite::from_name(s).is_none() {
            return Err(Error::Usage(format!("--l2sec: unknown l2sec suite '{s}'")));
        }
    }
    for s in &suites {
        netveil_ipsec::suite::EspSuite::parse(s, true)
            .map_err(|e| Error::Usage(format!("--suites: {e}")))?;
    }
    let psp: Vec<String> = a
        .psp
        .iter()
        .filter(|v| v.as_str() != "none")
        .cloned()
        .collect();
    for v in &psp {
        if !["aes-gcm-128", "aes-gcm-256", "aes-gmac-128", "aes-gmac-256"].contains(&v.as_str()) {
            return Err(Error::Usage(format!(
                "--psp: '{v}' must be aes-gcm-128, aes-gcm-256, aes-gmac-128 or aes-gmac-256"
            )));
        }
    }
    let encaps: Vec<bool> = match a.encap.as_str() {
        "raw" => vec![false],
        "udp" => vec![true],
        "both" => vec![false, true],
        o => {
            return Err(Error::Usage(format!(
                "--encap: '{o}' must be raw, udp or both"
            )))
        }
    };
    let mut bins = vec![Bin {
        path: match &a.daemon_bin {
            Some(p) => binary_arg("--daemon-bin", p)?,
            None => std::env::current_exe().map_err(Error::io("current exe"))?,
        },
        label: "",
    }];
    if let Some(p) = &a.compare {
        bins.push(Bin {
            path: binary_arg("--compare", p)?,
            label: " (base)",
        });
    }
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "netveil bench: TCP goodput (iperf3, {} stream(s), {} s each) between two network namespaces on one machine \
         ({cpus} CPUs), MTU 1400 inside the tunnel",
        a.streams, a.seconds
    );
    if a.pings > 0 {
        println!(
            "  and ping round-trip times before it: {} pings {} s apart per payload size ({}), median and p99",
            a.pings,
            ping::PING_INTERVAL,
            ping::PING_SIZES.map(|b| format!("{b} B")).join(", ")
        );
    }
    for b in &bins {
        println!("  netveil rows{}: daemons of {}", b.label, b.path.display());
    }
    let mut rows = Vec::new();
    let mut fails = 0;
    let mut report = |r: Result<Row>, rows: &mut Vec<Row>| match r {
        Ok(row) => {
            println!(
                "  {:<40} {:<15} {:>7.2} Gbit/s  {}",
                row.path,
                row.encap,
                row.gbit_per_s,
                ping::brief(&row.ping)
            );
            rows.push(row);
        }
        Err(e) => {
            fails += 1;
            println!("  measurement failed: {e}");
        }
    };
    let wg_go = match (a.no_peers, find_wireguard_go(), lab::have_tool("wg")) {
        (false, Some(w), true) => Some(w),
        _ => None,
    };
    for round in 0..rounds {
        if rounds > 1 {
            println!("  round {}/{rounds}", round + 1);
        }
        let order = turns(&bins, round);
        report(measure_clear(&a), &mut rows);
        if let Some(w) = &wg_go {
            report(measure_wireguard_go(&a, w), &mut rows);
        }
        for s in &suites {
            for &udp in &encaps {
                for b in &order {
                    report(measure_suite(&a, b, s, udp), &mut rows);
                }
            }
        }
        for v in &psp {
            for b in &order {
                report(measure_psp(&a, b, v), &mut rows);
            }
        }
    }
    let mut rows = merge_rows(rows);
    // Added round-trip time: over clear veth; and its ratio to wireguard-go's.
    let clear_ping = rows
        .iter()
        .find(|r| r.path.starts_with("clear"))
        .map(|r| r.ping.clone())
        .unwrap_or_default();
    let mut wg_ping = None;
    for r in rows.iter_mut() {
        if r.path.starts_with("clear") {
            continue;
        }
        ping::fill_added(&mut r.ping, &clear_ping, wg_ping.as_deref());
        if r.path.starts_with("wireguard-go") {
            wg_ping = Some(r.ping.clone());
        }
    }
    let clear = rows
        .iter()
        .find(|r| r.path.starts_with("clear"))
        .map(|r| r.gbit_per_s)
        .unwrap_or(0.0);
    println!();
    if rounds > 1 {
        println!(
            "over {rounds} rounds: median Gbit/s and retransmits, round-trip times of all rounds pooled"
        );
    }
    println!(
        "{:<40} {:<15} {:>10} {:>9} {:>8}",
        "path", "encapsulation", "Gbit/s", "of clear", "retrans"
    );
    for r in &rows {
        let pct = if clear > 0.0 {
            format!("{:.1}%", 100.0 * r.gbit_per_s / clear)
        } else {
            "-".into()
        };
        println!(
            "{:<40} {:<15} {:>10.2} {:>9} {:>8}",
            r.path, r.encap, r.gbit_per_s, pct, r.retransmits
        );
    }
    if a.pings > 0 {
        println!();
        println!(
            "ping round-trip time, ms (payload bytes; added: median minus clear veth's; x wg: added over wireguard-go's \
             added)"
        );
        let table: Vec<(&str, &[PingStat])> = rows
            .iter()
            .map(|r| (r.path.as_str(), r.ping.as_slice()))
            .collect();
        print!("{}", ping::render(&table, wg_ping.is_some()));
    }
    let mut l2rows = Vec::new();
    let mut l2fails = 0;
    if !l2suites.is_empty() {
        println!();
        println!(
            "l2sec on the wired-LAN lab (two hosts on a Linux bridge, MTU 1500 on the wire): TCP goodput (iperf3, {} s), \
             ping round-trip times ({} pings per size, as above), and the first ping after the neighbour entry is \
             flushed (ARP, and with l2sec the SEP exchange). Between namespaces the plain bridge moves 64 KiB \
             super-frames (segmentation offload); l2sec puts every segment on the wire as its own frame, as a real \
             Ethernet does.",
            a.seconds, a.pings
        );
        let mut paths = Vec::new();
        for round in 0..rounds {
            paths.push((round, None, &bins[0]));
            for s in &l2suites {
                for b in turns(&bins, round) {
                    paths.push((round, Some(s.as_str()), b));
                }
            }
        }
        for (round, s, b) in paths {
            if rounds > 1 && s.is_none() {
                println!("  round {}/{rounds}", round + 1);
            }
            match measure_l2(&a, b, s) {
                Ok(r) => {
                    println!(
                        "  {:<40} {:>7.2} Gbit/s  first ping {:.3} ms  {}",
                        r.path,
                        r.gbit_per_s,
                        r.first_ping_ms,
                        ping::brief(&r.ping)
                    );
                    l2rows.push(r);
                }
                Err(e) => {
                    l2fails += 1;
                    println!("  measurement failed: {e}");
                }
            }
        }
        l2rows = merge_l2rows(l2rows);
        if let Some(plain) = l2rows.first().filter(|r| r.netveil_bin.is_none()).cloned() {
            for r in l2rows.iter_mut().skip(1) {
                ping::fill_added(&mut r.ping, &plain.ping, None);
            }
            println!();
            if rounds > 1 {
                println!(
                    "over {rounds} rounds: median Gbit/s and retransmits, round-trip times of all rounds pooled, \
                     the fastest first ping"
                );
            }
            println!(
                "{:<40} {:>8} {:>9} {:>8} {:>11}",
                "path", "Gbit/s", "of plain", "retrans", "first ms"
            );
            for r in &l2rows {
                println!(
                    "{:<40} {:>8.2} {:>8.1}% {:>8} {:>11.3}",
                    r.path,
                    r.gbit_per_s,
                    100.0 * r.gbit_per_s / plain.gbit_per_s.max(1e-9),
                    r.retransmits,
                    r.first_ping_ms
                );
            }
            if a.pings > 0 {
                println!();
                println!(
                    "l2sec ping round-trip time, ms (payload bytes; added: median minus the plain bridge's)"
                );
                let table: Vec<(&str, &[PingStat])> = l2rows
                    .iter()
                    .map(|r| (r.path.as_str(), r.ping.as_slice()))
                    .collect();
                print!("{}", ping::render(&table, false));
            }
        }
    }
    if let Some(p) = &a.json {
        let v = serde_json::json!({ "tunnels": rows, "l2sec": l2rows });
        std::fs::write(p, serde_json::to_string_pretty(&v).unwrap_or_default())
            .map_err(Error::io(format!("cannot write {}", p.display())))?;
    }
    if a.split_packets > 0 {
        println!();
        let split = crate::bench::split::psp_split(a.split_packets, 1400);
        print!("{}", crate::bench::split::render(&split));
    }
    if fails > 0 {
        return Err(Error::measurement(
            "netveil bench",
            format!("{fails} measurements failed"),
        ));
    }
    if l2fails > 0 {
        return Err(Error::measurement(
            "netveil bench",
            format!("{l2fails} l2sec measurements failed"),
        ));
    }
    Ok(())
}
