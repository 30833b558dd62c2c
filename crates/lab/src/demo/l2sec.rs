//! `netveil demo --l2sec`: a wired LAN (a Linux bridge as the switch) with three hosts, an eavesdropper and an
//! attacker; what the eavesdropper sees without protection, then the hosts protected with l2sec, and an ARP-spoofing
//! attack that no longer works.

use super::args::DemoArgs;
use super::show::{header, step};
use crate::lab::{self, Lab};
use crate::lan::{mac_str, L2Opts, Lan, PORT, TAP};
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Instant;

/// A child process killed (and reaped) on drop, so that an early return does not leave it running.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// The scapy attack tools (`.venv/bin/python`, `tests/attacks/arp_spoof.py`): next to the source tree this binary
/// was built from, or in a checkout above the netveil binary. The reason when they cannot be used.
fn attack_tools(netveil: &Path) -> std::result::Result<(PathBuf, PathBuf), String> {
    let mut roots = vec![PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")];
    for exe in [std::env::current_exe().ok(), Some(netveil.to_path_buf())]
        .into_iter()
        .flatten()
    {
        roots.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    let Some(root) = roots
        .iter()
        .find(|r| r.join("tests/attacks/arp_spoof.py").is_file())
    else {
        return Err("tests/attacks/arp_spoof.py not found (run from a checkout of netveil)".into());
    };
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
    let python = root.join(".venv/bin/python");
    if !python.is_file() {
        return Err(format!("{} is missing (run .ci/setup)", python.display()));
    }
    let ok = std::process::Command::new(&python)
        .args([
            "-c",
            "import importlib.util, sys; sys.exit(importlib.util.find_spec('scapy') is None)",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return Err(format!(
            "scapy is not installed in {} (run .ci/setup)",
            python.display()
        ));
    }
    Ok((python, root.join("tests/attacks/arp_spoof.py")))
}

/// `ping -c COUNT -i INTERVAL` from station `from` to station `to`; fails unless every reply came back. Returns the
/// summary lines (packets, rtt).
fn lan_ping(
    lab: &Lab,
    lan: &Lan,
    from: &str,
    to: &str,
    count: u32,
    interval: &str,
) -> Result<String> {
    let dst = lan.station(to)?.ip.to_string();
    let out = lab.exec(
        &lan.station(from)?.ns,
        &[
            "ping",
            "-n",
            "-c",
            &count.to_string(),
            "-i",
            interval,
            "-W",
            "2",
            &dst,
        ],
    )?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !text.contains(" 0% packet loss") {
        return Err(Error::measurement(
            format!("ping {from} -> {to} ({dst})"),
            format!(
                "lost packets: {}{}",
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(text
        .lines()
        .filter(|l| l.contains("packets transmitted") || l.starts_with("rtt"))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// The first `n` frame lines of `tcpdump -n -e -r PCAP` (no hex dumps).
fn tcpdump_lines(lab: &Lab, ns: &str, pcap: &Path, n: usize) -> Result<Vec<String>> {
    let out = lab.exec_ok(
        ns,
        &[
            "tcpdump",
            "-n",
            "-e",
            "-r",
            pcap.to_str().unwrap_or_default(),
            "-c",
            &n.to_string(),
        ],
    )?;
    Ok(out
        .lines()
        .filter(|l| !l.starts_with(char::is_whitespace) && !l.trim().is_empty())
        .take(n)
        .map(|l| l.trim_end().to_string())
        .collect())
}

fn clear_dropped_in(d: &lab::Daemon) -> Result<u64> {
    Ok(d.status_json()?["l2sec"]["counters"]["clear_dropped_in"]
        .as_u64()
        .unwrap_or(0))
}

pub(super) fn run_l2sec(a: &DemoArgs, suite: &str) -> Result<()> {
    for t in ["tshark", "nft"] {
        if !lab::have_tool(t) {
            return Err(Error::Usage(format!(
                "netveil demo --l2sec needs '{t}' (see .ci/setup)"
            )));
        }
    }
    let Some(s) = netveil_l2sec::Suite::from_name(suite) else {
        let names: Vec<&str> = netveil_l2sec::Suite::ALL.iter().map(|s| s.name()).collect();
        return Err(Error::Usage(format!(
            "--l2sec: unknown suite '{suite}' (one of {})",
            names.join(", ")
        )));
    };
    if s.is_null() {
        return Err(Error::Usage(
            "--l2sec: null-null protects nothing (no encryption, no integrity); it is for measuring the framing, \
             in netveil lab or netveil bench"
                .into(),
        ));
    }
    let suite = s.name();
    let t_start = Instant::now();
    let mut lab = Lab::new("nvdemo")?;
    if let Some(p) = &a.netveil {
        lab = lab.with_netveil(p);
    }
    if a.keep {
        lab.keep();
    }

    header("1. Lab: a wired LAN");
    let names = ["h1", "h2", "h3", "eve", "mallory"];
    let lan = step("building the LAN", Lan::build(&mut lab, &names))?;
    let st = |n: &str| lan.station(n).cloned();
    let (h1, h2, h3, eve, mal) = (st("h1")?, st("h2")?, st("h3")?, st("eve")?, st("mallory")?);
    println!(
        "a Linux bridge (namespace {}) is the switch: it learns no addresses and floods every frame to every port,\n\
         so eve's port sees all traffic between the others. Five stations, one port ({PORT}) each:",
        lan.switch_ns
    );
    for (s, role) in [
        (&h1, "host"),
        (&h2, "host"),
        (&h3, "host"),
        (&eve, "eavesdropper (captures on her port)"),
        (&mal, "attacker (forges frames with scapy)"),
    ] {
        println!(
            "  {:<8} {} {:<11} {role}",
            s.name,
            mac_str(&s.mac),
            s.ip.to_string()
        );
    }

    header("2. Without protection: what eve sees");
    println!(
        "eve captures on her port while h1 pings h2 ({}); h1 first asks for h2's MAC address with ARP",
        h2.ip
    );
    let mut cap = step(
        "starting tcpdump",
        lab.capture(&eve.ns, PORT, "clear.pcap", 200, &[]),
    )?;
    let out = step("ping", lan_ping(&lab, &lan, "h1", "h2", 3, "0.2"))?;
    for l in out.lines() {
        println!("  {l}");
    }
    let pcap = step("stopping tcpdump", cap.stop())?;
    let frames = step("tshark", lab::tshark_frames(&pcap, None, None))?;
    let arp = frames
        .iter()
        .filter(|f| f.protocols.contains("arp"))
        .count();
    let icmp = frames
        .iter()
        .filter(|f| f.protocols.contains("icmp"))
        .count();
    let mut addrs: Vec<&String> = frames.iter().flat_map(|f| &f.addrs).collect();
    addrs.sort();
    addrs.dedup();
    println!("  tcpdump -n -e -r clear.pcap (eve's capture, first frames):");
    for l in step("tcpdump -r", tcpdump_lines(&lab, &eve.ns, &pcap, 5))? {
        println!("    {l}");
    }
    println!(
        "  tshark: {} frames, {arp} ARP, {icmp} ICMP; IP addresses in them: {}",
        frames.len(),
        addrs
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if arp == 0 || icmp == 0 {
        return Err(Error::measurement(
            "demo",
            "eve's capture of the unprotected LAN holds no ARP or no ICMP",
        ));
    }
    println!("  => eve reads who talks to whom, with which protocol, and the data.");
    let clear_addrs = addrs
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ");

    header(&format!("3. Protecting h1, h2 and h3 with l2sec ({suite})"));
    println!(
        "each host runs `netveil up` with an [l2sec] configuration (h1's: {}):\n\
         \x20 the address moves from {PORT} to the TAP device {TAP}; nftables on {PORT} drops every frame that is not l2sec,\n\
         \x20 in both directions; group frames (ARP, broadcast, SEP) are sealed with the group key and signed (Ed25519),\n\
         \x20 unicast frames with a per-pair session key that SEP negotiates on demand (x25519).",
        lab.dir().join("h1.toml").display()
    );
    if s.is_ecb() {
        println!("  ({suite} is ECB: insecure, equal blocks stay equal; for the thesis' pattern demonstration only)");
    }
    let daemons = step(
        "starting the daemons",
        lan.protect(&lab, &["h1", "h2", "h3"], &L2Opts::suite(suite)),
    )?;
    println!("netveil up: running on h1, h2 and h3; eve captures again from here on");
    let mut cap = step(
        "starting tcpdump",
        lab.capture(&eve.ns, PORT, "protected.pcap", 200, &[]),
    )?;
    for to in ["h2", "h3"] {
        println!("  ping h1 -> {to} (ARP and the SEP key exchange happen on the first packet):");
        let out = step("ping", lan_ping(&lab, &lan, "h1", to, 3, "0.2"))?;
        for l in out.lines() {
            println!("    {l}");
        }
    }
    let megabytes = a.megabytes.unwrap_or(32);
    let t = step(
        "TCP transfer",
        lab::tcp_transfer(&h1.ns, &h2.ns, h2.ip.into(), 5201, megabytes * 1_000_000),
    )?;
    println!(
        "  TCP: sent {megabytes} MB from h1 to {}:5201, every byte checked by the receiver: {:.2} s, {:.0} Mbit/s",
        h2.ip,
        t.seconds,
        t.mbit_per_s()
    );
    let pcap = step("stopping tcpdump", cap.stop())?;
    println!("  netveil status (h1):");
    let st = step("netveil status", daemons[0].status_text())?;
    for l in st.lines() {
        println!("    {l}");
    }

    header("4. What eve sees now");
    let frames = step("tshark", lab::tshark_frames(&pcap, None, None))?;
    let types = step(
        "tshark",
        lab.exec_ok(
            &eve.ns,
            &[
                "tshark",
                "-n",
                "-r",
                pcap.to_str().unwrap_or_default(),
                "-T",
                "fields",
                "-e",
                "eth.type",
            ],
        ),
    )?;
    let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
    for l in types.lines() {
        *by_type.entry(l.trim()).or_default() += 1;
    }
    let count = |what: &str| {
        frames
            .iter()
            .filter(|f| f.protocols.split(':').any(|p| p == what))
            .count()
    };
    let (arp, ip4, ip6) = (count("arp"), count("ip"), count("ipv6"));
    let with_addr = frames.iter().filter(|f| !f.addrs.is_empty()).count();
    println!(
        "  eve captured {} frames while h1 pinged h2 and h3 and sent {megabytes} MB to h2. EtherTypes (tshark -e eth.type):",
        frames.len()
    );
    for (ty, n) in &by_type {
        println!("    {ty:<8} {n}");
    }
    println!("  frames tshark dissects as ARP: {arp}, IPv4: {ip4}, IPv6: {ip6}; frames showing an IP address: {with_addr}");
    // The first group frames (ARP, SEP: to the broadcast address) and the first unicast frames (session traffic).
    let lines = step("tcpdump -r", tcpdump_lines(&lab, &eve.ns, &pcap, 100))?;
    let (group, unicast): (Vec<&String>, Vec<&String>) = lines
        .iter()
        .partition(|l| l.contains("> ff:ff:ff:ff:ff:ff"));
    println!("  tcpdump -n -e -r protected.pcap (the first group frames, then the first unicast frames):");
    for l in group.iter().take(2).chain(unicast.iter().take(2)) {
        println!("    {l}");
    }
    let l2type = format!("0x{:04x}", netveil_l2sec::DEFAULT_ETHERTYPE);
    if frames.is_empty() || by_type.keys().any(|t| *t != l2type) || arp + ip4 + ip6 + with_addr > 0
    {
        return Err(Error::measurement(
            "demo",
            format!(
                "clear frames on the protected LAN (EtherTypes {by_type:?}, ARP {arp}, IPv4 {ip4}, IPv6 {ip6}, with addresses {with_addr})"
            ),
        ));
    }
    println!(
        "  => only l2sec frames (EtherType {l2type}): the MAC addresses stay (the switch needs them), but no ARP,\n\
         \x20    no IP header, no address, no port, no data."
    );

    header("5. Mallory spoofs ARP");
    let mut dropped = None;
    match attack_tools(lab.netveil()) {
        Err(why) => println!("  skipped: {why}"),
        Ok((python, script)) => {
            let sent = 20;
            println!(
                "mallory sends h1 forged ARP replies \"{} is at {}\" ({sent}, one every 0.2 s; scapy, {}).\n\
                 Without l2sec this poisons h1's ARP cache and h1's traffic for h2 goes to mallory (tests/lan.rs).",
                h2.ip,
                mac_str(&mal.mac),
                script.display()
            );
            let neigh = |lab: &Lab| {
                lab.exec_ok(
                    &h1.ns,
                    &["ip", "-4", "neigh", "show", &h2.ip.to_string(), "dev", TAP],
                )
                .map(|s| s.trim().to_string())
            };
            let before_n = step("ip neigh", neigh(&lab))?;
            let before = step("netveil status", clear_dropped_in(&daemons[0]))?;
            println!(
                "  before: h1: ip -4 neigh show {} dev {TAP}: {before_n}",
                h2.ip
            );
            let log = lab.dir().join("arp_spoof.log");
            let errf = std::fs::File::create(&log).map_err(Error::io("arp_spoof log"))?;
            let child = lab
                .command(
                    &mal.ns,
                    &[
                        python.to_str().unwrap_or_default(),
                        script.to_str().unwrap_or_default(),
                        PORT,
                        &h1.ip.to_string(),
                        &mac_str(&h1.mac),
                        &h2.ip.to_string(),
                        &mac_str(&mal.mac),
                        &sent.to_string(),
                        "0.2",
                    ],
                )
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(errf)
                .spawn()
                .map_err(Error::io("cannot start arp_spoof.py"))?;
            let mut spoofer = KillOnDrop(child);
            let out = step(
                "ping during the attack",
                lan_ping(&lab, &lan, "h1", "h2", 10, "0.3"),
            )?;
            let status = spoofer
                .0
                .wait()
                .map_err(Error::io("waiting for arp_spoof.py"))?;
            if !status.success() {
                return Err(Error::command(
                    "arp_spoof.py",
                    Some(status),
                    std::fs::read_to_string(&log).unwrap_or_default(),
                )
                .within("demo"));
            }
            let after_n = step("ip neigh", neigh(&lab))?;
            let after = step("netveil status", clear_dropped_in(&daemons[0]))?;
            println!(
                "  ping h1 -> h2 during the attack: {}",
                out.lines().next().unwrap_or("")
            );
            println!(
                "  after:  h1: ip -4 neigh show {} dev {TAP}: {after_n}",
                h2.ip
            );
            println!(
                "  h1's clear_dropped_in (clear frames dropped by nftables on {PORT}): {before} -> {after}"
            );
            if after_n.contains(&mac_str(&mal.mac)) || !after_n.contains(&mac_str(&h2.mac)) {
                return Err(Error::measurement(
                    "demo",
                    format!("h1's neighbour entry for h2 changed: {after_n}"),
                ));
            }
            if after < before + sent / 2 {
                return Err(Error::measurement(
                    "demo",
                    format!("h1's port did not drop the forged ARP replies ({before} -> {after})"),
                ));
            }
            println!(
                "  => the forged replies are not l2sec frames: h1's port dropped them before ARP could see them."
            );
            dropped = Some(after - before);
        }
    }

    header("6. Summary");
    println!(
        "  without l2sec: eve read every frame: ARP and ICMP with the addresses {}",
        clear_addrs
    );
    println!(
        "  with l2sec ({suite}): {} frames on the wire, all EtherType {l2type}, nothing tshark could dissect;\n\
         \x20   sessions set up on demand by SEP, TCP at {:.0} Mbit/s",
        frames.len(),
        t.mbit_per_s()
    );
    match dropped {
        Some(n) => println!(
            "  ARP spoofing: {n} forged replies dropped at h1's port; h1 still maps {} to {}",
            h2.ip,
            mac_str(&h2.mac)
        ),
        None => println!("  ARP spoofing: not shown (scapy unavailable)"),
    }
    drop(daemons);
    drop(lan);
    drop(lab);
    println!(
        "lab removed (namespaces, daemons, files) after {:.0} s. All steps succeeded.",
        t_start.elapsed().as_secs_f64()
    );
    Ok(())
}
