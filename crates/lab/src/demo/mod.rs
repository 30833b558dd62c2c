//! `netveil demo`: a two-host lab in network namespaces. Brings up ESP (or, with `--psp`, PSP) in tunnel mode, pings,
//! transfers data, shows the daemon's status and what an eavesdropper on the wire sees, then decrypts the ESP capture
//! with the exported keys (PSP: rotates the master keys while traffic flows).
//!
//! With `--l2sec`: a wired LAN (a Linux bridge as the switch) with three hosts, an eavesdropper and an attacker;
//! first what the eavesdropper sees without protection, then the hosts protected with l2sec (ping, TCP, status,
//! the eavesdropper's view) and an ARP-spoofing attack that no longer works.
//!
//! With `--pilsc`: see [`pilsc`].
//!
//! The files: the arguments (`args`), how a step prints (`show`), `--l2sec` ([`l2sec`]) and `--pilsc` ([`pilsc`]);
//! the ESP/PSP demo is [`run`] here.

mod args;
pub mod l2sec;
pub mod pilsc;
mod show;

pub use args::DemoArgs;

use crate::lab::{self, HostPair, Lab, TwoHosts};
use crate::{Error, Result};
use l2sec::run_l2sec;
use show::{header, step};
use std::collections::BTreeMap;

pub fn run(a: DemoArgs) -> Result<()> {
    if !lab::is_root() {
        return Err(Error::Usage(
            "netveil demo builds network namespaces and needs root (try: sudo netveil demo)".into(),
        ));
    }
    for t in ["ip", "ping", "tcpdump"] {
        if !lab::have_tool(t) {
            return Err(Error::Usage(format!(
                "netveil demo needs '{t}' (see .ci/setup)"
            )));
        }
    }
    if let Some(suite) = &a.l2sec {
        return run_l2sec(&a, suite);
    }
    if a.pilsc {
        let bin = match &a.netveil {
            Some(p) => p.clone(),
            None => std::env::current_exe().map_err(Error::io("current exe"))?,
        };
        return pilsc::run(&bin, a.keep, a.megabytes.unwrap_or(8));
    }
    if let Some(v) = &a.psp {
        if !["aes-gcm-128", "aes-gcm-256", "aes-gmac-128", "aes-gmac-256"].contains(&v.as_str()) {
            return Err(Error::Usage(format!(
                "--psp: '{v}' must be aes-gcm-128, aes-gcm-256, aes-gmac-128 or aes-gmac-256"
            )));
        }
    } else {
        netveil_ipsec::suite::EspSuite::parse(&a.suite, false)
            .map_err(|e| Error::Usage(format!("--suite: {e}")))?;
    }
    let mut lab = Lab::new("nvdemo")?;
    if let Some(p) = &a.netveil {
        lab = lab.with_netveil(p);
    }
    if a.keep {
        lab.keep();
    }
    let pair = match &a.psp {
        Some(v) => HostPair::psp(v),
        None => HostPair::esp(&a.suite),
    };

    header("1. Lab");
    let mut hosts = step("building the lab", TwoHosts::topology(&mut lab, &pair))?;
    let (aa, ba) = (&hosts.addrs[0], &hosts.addrs[1]);
    println!(
        "two network namespaces joined by a veth pair (the \"wire\"):\n  host a: {:<14} {} = {}/{}   tunnel address {}/{}\n  host b: {:<14} {} = {}/{}   tunnel address {}/{}",
        hosts.ns[0], hosts.veth[0], aa.outer, aa.outer_prefix, aa.inner, aa.inner_prefix,
        hosts.ns[1], hosts.veth[1], ba.outer, ba.outer_prefix, ba.inner, ba.inner_prefix
    );
    match &a.psp {
        None => println!(
            "ESP tunnel mode, suite {}, static random keys; configuration of host a: {}",
            a.suite,
            lab.dir().join("a.toml").display()
        ),
        Some(v) => println!(
            "PSP tunnel mode, {v}, keys exchanged over TLS 1.3 (certificates from netveil keygen in {}); \
             configuration of host a: {}",
            lab.dir().display(),
            lab.dir().join("a.toml").display()
        ),
    }
    step("starting the daemons", hosts.start(&lab))?;
    if a.psp.is_some() {
        step(
            "PSP association",
            hosts.wait_psp_associated(std::time::Duration::from_secs(15)),
        )?;
        println!("PSP: both hosts handed each other a receive SPI and key over TLS (rx-assoc / tx-assoc)");
    }
    println!(
        "netveil up: running in both namespaces (TUN device {})",
        pair.tun
    );

    // Capture on the wire from here on: ping and the first part of the transfer.
    let mut cap = step(
        "starting tcpdump",
        lab.capture(&hosts.ns[0], hosts.veth[0], "wire.pcap", 0, &[]),
    )?;

    header("2. Ping through the tunnel");
    let out = step("ping", hosts.ping(&lab, 0, 5, "0.2"))?;
    for l in out.lines().filter(|l| !l.trim().is_empty()) {
        println!("  {l}");
    }

    header("3. TCP transfer through the tunnel");
    // A short transfer during the capture, so that the eavesdropper's view includes TCP, then the big one.
    step("short TCP transfer", hosts.tcp(0, 64 * 1024))?;
    let pcap = step("stopping tcpdump", cap.stop())?;
    let megabytes = a.megabytes.unwrap_or(50);
    let bytes = megabytes * 1_000_000;
    let t = step("TCP transfer", hosts.tcp(0, bytes))?;
    println!(
        "  sent {} MB from {} to {}:5201, every byte checked by the receiver: {:.2} s, {:.0} Mbit/s",
        megabytes,
        hosts.addrs[0].inner,
        hosts.addrs[1].inner,
        t.seconds,
        t.mbit_per_s()
    );

    header("4. netveil status (host a)");
    let st = step("netveil status", hosts.daemon(0).status_text())?;
    for l in st.lines() {
        println!("  {l}");
    }

    header("5. What an eavesdropper on the wire sees");
    let out = step(
        "tcpdump -r",
        lab.exec_ok(
            &hosts.ns[0],
            &[
                "tcpdump",
                "-n",
                "-r",
                pcap.to_str().unwrap_or_default(),
                "-c",
                "8",
            ],
        ),
    )?;
    println!("  tcpdump -n -i {} (first packets):", hosts.veth[0]);
    for l in out.lines() {
        println!("    {l}");
    }
    let inner: Vec<String> = hosts.addrs.iter().map(|h| h.inner.to_string()).collect();
    let have_tshark = lab::have_tool("tshark");
    if have_tshark {
        let frames = step("tshark", lab::tshark_frames(&pcap, None, None))?;
        let mut by_proto: BTreeMap<String, usize> = BTreeMap::new();
        let mut leaked = 0;
        for f in &frames {
            let last = f.protocols.rsplit(':').next().unwrap_or("").to_string();
            *by_proto.entry(last).or_default() += 1;
            if f.addrs.iter().any(|x| inner.contains(x)) {
                leaked += 1;
            }
        }
        println!("  packets by protocol ({} captured):", frames.len());
        for (p, n) in &by_proto {
            println!("    {p:<10} {n}");
        }
        println!(
            "  packets showing the inner addresses {} / {}: {leaked}",
            inner[0], inner[1]
        );
        // PSP's key exchange is TCP (TLS) between the outer addresses; inner TCP would show the inner addresses.
        let tcp_leak = by_proto.contains_key("tcp") && a.psp.is_none();
        if leaked > 0 || by_proto.contains_key("icmp") || tcp_leak {
            return Err(Error::measurement(
                "demo",
                "clear traffic of the inner addresses is visible on the wire",
            ));
        }
        if a.psp.is_some() {
            println!(
                "  => only PSP (UDP port 1000) and the TLS key exchange: no ICMP, no inner TCP, no inner addresses."
            );
            header("6. Rotating the master keys while traffic flows");
            for round in 1..=2 {
                for (i, n) in ["a", "b"].iter().enumerate() {
                    let v = step("netveil rotate", hosts.daemon(i).ask("rotate"))?;
                    println!(
                        "  netveil rotate (host {n}): generation {}",
                        v["generation"]
                    );
                }
                let out = step("ping", hosts.ping(&lab, 0, 3, "0.1"))?;
                let summary = out
                    .lines()
                    .find(|l| l.contains("packet loss"))
                    .unwrap_or("");
                println!("  after rotation {round}: {summary}");
            }
            let st = step("netveil status", hosts.daemon(0).status_json())?;
            let p = &st["psp"];
            println!(
                "  host a: generation {}, sending with SPI {}, receiving on SPI {}; unknown-SPI drops {}, auth failures {}",
                p["generation"],
                p["tx_spi"].as_str().unwrap_or("?"),
                p["rx_spi"].as_str().unwrap_or("?"),
                p["stats"]["rx_unknown_spi"],
                p["stats"]["rx_auth_fail"]
            );
            header("Done");
            drop(hosts);
            drop(lab);
            println!("lab removed (namespaces, daemons, files). All steps succeeded.");
            return Ok(());
        }
        println!("  => only ESP on the wire: no ICMP, no TCP, no inner addresses.");

        header("6. Decrypting the capture with the exported keys");
        let keys = lab.dir().join("wireshark");
        step("netveil keys", hosts.daemon(0).keys_wireshark(&keys))?;
        println!(
            "  netveil keys --wireshark {} --socket {}",
            keys.display(),
            hosts.daemon(0).socket.display()
        );
        if !lab::wireshark_can_decrypt(&a.suite) {
            println!(
                "  (tshark 4.0 cannot decrypt {}: no ChaCha20-Poly1305/GMAC support; skipped)",
                a.suite
            );
        } else {
            let out = step(
                "tshark decryption",
                lab.exec_ok(
                    &hosts.ns[0],
                    &[
                        "env",
                        &format!("WIRESHARK_CONFIG_DIR={}", keys.display()),
                        "tshark",
                        "-n",
                        "-r",
                        pcap.to_str().unwrap_or_default(),
                        "-o",
                        "esp.enable_encryption_decode:TRUE",
                        "-o",
                        "esp.enable_authentication_check:TRUE",
                        "-Y",
                        "esp",
                    ],
                ),
            )?;
            println!(
                "  WIRESHARK_CONFIG_DIR={} tshark -o esp.enable_encryption_decode:TRUE -o esp.enable_authentication_check:TRUE -r wire.pcap",
                keys.display()
            );
            // A few packets of each kind: the ping, then the start of the TCP transfer.
            let icmp = out.lines().filter(|l| l.contains(" ICMP ")).take(4);
            let tcp = out.lines().filter(|l| l.contains(" TCP ")).take(6);
            for l in icmp.chain(tcp) {
                println!("    {l}");
            }
            let dec = step(
                "tshark decryption",
                lab::tshark_frames(&pcap, Some(&keys), Some("esp")),
            )?;
            let good = dec.iter().filter(|f| f.icv_good == Some(true)).count();
            let clear = dec
                .iter()
                .filter(|f| f.addrs.iter().any(|x| inner.contains(x)))
                .count();
            println!(
                "  {} ESP packets, {good} with a verified ICV, {clear} decrypted to inner packets",
                dec.len()
            );
            if dec.is_empty() || clear == 0 {
                return Err(Error::measurement(
                    "demo",
                    "tshark could not decrypt the capture",
                ));
            }
        }
    } else {
        println!("  (tshark not installed: protocol count and decryption skipped)");
    }

    header("Done");
    drop(hosts);
    drop(lab);
    println!("lab removed (namespaces, daemons, files). All steps succeeded.");
    Ok(())
}
