//! `netveil lab`: the studies' experiments in network namespaces, one command, a report with the papers' numbers
//! beside ours ([`crate::lab_report`]). What it runs today (the rest of the studies' matrix joins experiment by
//! experiment):
//!
//! - `ping-rtt`: ICMP round-trip time at payloads of 64 to 1,024 bytes in 64-byte steps (`--quick`: 64, 512 and
//!   1,024), 100 pings per size (`--quick`: 10), as the bare-PC IPsec study's Fig. 8, through the clear veth, netveil
//!   ESP (AES-GCM-128) in tunnel and transport mode (and the tunnel keyed by netveil's IKEv2), PSP (AES-GCM-128),
//!   wireguard-go when it is installed and strongSwan at both ends (charon with kernel-libipsec) when it is
//!   installed; and each path's increase over clear at each size, beside the study's "over 100%". Then,
//!   as the L2 study's Fig. 6.6, a station pinging another on a plain bridge and through l2sec (AES-GCM-128), with
//!   l2sec's increase over the bridge beside the study's +117%, and the same for ARP round trips (arping) beside its
//!   +100.71%.
//! - `overhead`: bytes added per packet, read from a capture of 100-byte pings, for PILSC in both modes, ESP and
//!   ESP+AH (AES-128-CBC, HMAC-SHA1-96) in tunnel and transport mode, AH alone (transport), PSP (tunnel,
//!   AES-GCM-128), l2sec (AES-GCM-128, per Ethernet frame) and wireguard-go, and ESP's authentication against AH's
//!   (both without encryption), beside the PILSC study's Table 8 and each protocol's formula (`expected`).
//! - `loss`: goodput under 0 to 25% packet loss, iperf3 UDP and TCP and TLS downloads, as the PSP study's Figs.
//!   4.4 and 4.5 ([`loss`]).
//! - `delay`: the round-trip time of a 500-byte ping against added link delay (`netveil delay` on the router
//!   between the hosts; this kernel has no netem), as the PSP study's Figs. 4.6 and 4.7 ([`delay`]).
//! - `http`: files of 1 KB to 10 MB, text and random, from nginx with curl through each path: bytes, packets and
//!   time per download, and the bytes over clear ([`http`]).
//! - `smtp`: the same files as e-mail attachments, curl to a Postfix, with the same cells
//!   ([`smtp`]).
//! - `mtu`: HTTP downloads through netveil's ESP tunnel with its interface MTU below, at and above the ideal
//!   one, as the IPsec web/email study's MTU sweep ([`mtu`]).
//! - `pilsc`: the PILSC study's transfers of 1 KB to 10 MB without and through PILSC (both modes) and of 1 MB
//!   against the number of rules ([`pilsc`]).
//! - `iperf`: the L2 study's Iperf-TCP and Iperf-UDP tests over the plain bridge, l2sec's null suite (its
//!   noENC-noHMAC category) and l2sec with full crypto: throughput beside the bridge's, UDP loss and jitter, CPU and
//!   memory of l2sec's daemons, duplicate ACKs ([`iperf`]).
//! - `scp`: the L2 study's SCP copy (OpenSSH) of a file of zeros over the plain bridge and through l2sec: time,
//!   rate, CPU and memory of scp, sshd and l2sec's daemons ([`scp`]).
//! - `voip`: the L2 study's VoIP calls (SIPp, G.711 RTP both ways) over the plain bridge and through l2sec: calls
//!   that succeeded, RTP loss and RFC 3550 jitter, transfer rate, CPU and memory of SIPp and l2sec's daemons
//!   ([`voip`]).
//! - `ops`: netveil's own time per ESP operation (SA lookup, anti-replay, integrity, decryption; SA lookup,
//!   encryption, MAC) against the packet size, as the bare-PC IPsec study's Figs. 6 and 7, and PSP's per stage
//!   beside the PSP study's Fig. 4.8; in process, no namespaces ([`ops`]).
//!
//! Each path gets a fresh lab (its own namespaces, unique names, torn down when the path is done, also when it
//! fails): two hosts on a veth pair, or with a router between them where the experiment sets link conditions
//! (`loss`, `delay`: [`crate::lab::Router`]), or stations on a bridge for l2sec; a path that cannot run gives cells
//! without value that say why.
//!
//! The files: the arguments and the experiments' list (`args`), each experiment (`ping-rtt` in [`rtt`], [`overhead`],
//! [`loss`], ...; one file transfer of `http` and `smtp` in [`transfer`]), the paths that need more than a host pair
//! (IKEv2, strongSwan: [`paths`]), the tools each experiment needs ([`tools`]), and the progress bar ([`progress`]).

mod args;
pub mod delay;
pub mod http;
pub mod iperf;
pub mod loss;
pub mod mtu;
pub mod ops;
pub mod overhead;
pub mod paths;
pub mod pilsc;
pub mod progress;
pub mod rtt;
pub mod scp;
pub mod smtp;
pub mod tools;
pub mod transfer;
pub mod voip;

#[cfg(test)]
mod tests;

pub use args::{LabArgs, EXPERIMENTS};

use std::time::Instant;

use crate::lab_report::{self, Report};
use crate::{Error, Result};
use overhead::overhead;
use rtt::ping_rtt;

/// `netveil lab`: runs the experiments and writes the report.
pub fn run(a: LabArgs) -> Result<Report> {
    let experiments: Vec<String> = if a.only.is_empty() {
        EXPERIMENTS.iter().map(|s| s.to_string()).collect()
    } else {
        a.only.clone()
    };
    if let Some(bad) = experiments
        .iter()
        .find(|e| !EXPERIMENTS.contains(&e.as_str()))
    {
        return Err(Error::Usage(format!(
            "--only: no experiment {bad:?} (there are: {})",
            EXPERIMENTS.join(", ")
        )));
    }
    // (Read first: a bad file is refused before anything runs.)
    let earlier = a.compare.as_deref().map(lab_report::read).transpose()?;
    if !crate::lab::is_root() {
        return Err(Error::Usage(
            "netveil lab needs root (network namespaces)".into(),
        ));
    }
    tools::preflight(&experiments, a.install)?;
    crate::lab::clean_up_on_signals()?;
    let bin = match &a.netveil_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(Error::io("current exe"))?,
    };
    let started = Instant::now();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut cells = Vec::new();
    progress::start(experiments.len() as u64);
    for e in &experiments {
        let t = Instant::now();
        match e.as_str() {
            "ping-rtt" => cells.extend(ping_rtt(&bin, a.quick)),
            "loss" => cells.extend(loss::run(&bin, a.quick)),
            "ops" => cells.extend(ops::run(a.quick)),
            "delay" => cells.extend(delay::run(&bin, a.quick)),
            "pilsc" => cells.extend(pilsc::run(&bin, a.quick)),
            "iperf" => cells.extend(iperf::run(&bin, a.quick)),
            "scp" => cells.extend(scp::run(&bin, a.quick)),
            "voip" => cells.extend(voip::run(&bin, a.quick)),
            "mtu" => cells.extend(mtu::run(
                &bin,
                a.quick,
                &std::env::temp_dir().join(format!("nv-lab-mtu-{}", std::process::id())),
            )),
            "http" | "smtp" => {
                let w = if e == "http" {
                    transfer::Workload::Http
                } else {
                    transfer::Workload::Smtp
                };
                cells.extend(http::run(
                    &bin,
                    a.quick,
                    &std::env::temp_dir().join(format!("nv-lab-{e}-{}", std::process::id())),
                    w,
                ))
            }
            _ => cells.extend(overhead(&bin)),
        }
        crate::say!("{e}: done in {:.1} s", t.elapsed().as_secs_f64());
        progress::advance();
    }
    progress::finish();
    let (kernel, cpu) = lab_report::machine();
    let mut programs = std::collections::BTreeMap::new();
    for (p, args) in [
        ("ping", &["-V"][..]),
        ("arping", &["-V"][..]),
        ("tcpdump", &["--version"][..]),
        ("ip", &["-V"][..]),
        ("iptables", &["--version"][..]),
        ("iperf3", &["--version"][..]),
        ("openssl", &["version"][..]),
        ("curl", &["--version"][..]),
        ("nginx", &["-v"][..]),
        ("postconf", &["-d", "mail_version"][..]),
        ("swaks", &["--version"][..]),
        ("ssh", &["-V"][..]),
        ("sipp", &["-v"][..]),
        ("nft", &["--version"][..]),
    ] {
        programs.insert(p.to_string(), lab_report::version_line(p, args));
    }
    programs.insert(
        "wireguard-go".into(),
        match crate::bench::find_wireguard_go() {
            Some(p) => lab_report::version_line(&p.to_string_lossy(), &["--version"]),
            None => "not installed".into(),
        },
    );
    let report = Report {
        schema: lab_report::SCHEMA,
        command: std::env::args().collect(),
        netveil: env!("CARGO_PKG_VERSION").into(),
        kernel,
        cpu,
        programs,
        quick: a.quick,
        experiments,
        started_unix,
        seconds: started.elapsed().as_secs_f64(),
        cells,
    };
    if let Err(bad) = lab_report::check(&report) {
        return Err(Error::internal(format!(
            "the report breaks its schema:\n  {}",
            bad.join("\n  ")
        )));
    }
    lab_report::write(&report, &a.out)?;
    let figures = crate::lab_report::plot::write(&report, &a.out)?;
    print!("{}", lab_report::markdown(&report));
    println!(
        "\nwrote {}/report.json, report.csv, report.md, index.html{}",
        a.out.display(),
        figures.iter().map(|f| format!(", {f}")).collect::<String>()
    );
    if let (Some(old), Some(path)) = (&earlier, &a.compare) {
        let text = lab_report::compare_markdown(
            &path.display().to_string(),
            &lab_report::compare(old, &report),
        );
        let p = a.out.join("compare.md");
        std::fs::write(&p, &text).map_err(Error::io(format!("cannot write {}", p.display())))?;
        print!("\n{text}");
        println!("\nwrote {}", p.display());
    }
    Ok(report)
}
