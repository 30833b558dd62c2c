//! `netveil demo --pilsc`: two hosts (network namespaces) protect their own traffic with PILSC as a rule file says:
//! the rule file, what crosses the wire (option 130 and ciphertext on the covered traffic, clear traffic for the
//! rest), the status per rule, and a tamper attempt against each mode (the confidentiality-only mode delivers a
//! changed datagram; the authenticated mode drops it).

use super::show::{header, step};
use crate::demo_pilsc::{first_frame, inject_frame, pilsc_config, two_hosts};
use crate::lab::{self, Lab};
use crate::{Error, Result};
use serde_json::Value;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::time::Duration;

const ADDR: [&str; 2] = ["10.79.0.1", "10.79.0.2"];
const TCP_PORT: u16 = 5001;
const UDP_PORT: u16 = 5002;
const CLEAR_PORT: u16 = 5003;
/// What the demo's datagrams carry.
pub const MARKER: &str = "PILSC DEMO: hello from host a";

/// Host `side`'s rule file (the peer is the other host; host b serves the ports).
pub fn rules(side: usize) -> String {
    let peer = ADDR[1 - side];
    let mode = if side == 1 { "Server" } else { "Client" };
    format!(
        "# PILSC rules of host {host}: protect TCP {TCP_PORT}, UDP {UDP_PORT} and ICMP with {peer}; TCP {CLEAR_PORT} in clear\n\
         Rule = 1;  Security = true;  IP = {peer};  Protocol = TCP;  Port = {TCP_PORT};\n\
         \x20          Encryption = 1;   Applmode = {mode};  Key = 0x00112233445566778899aabbccddeeff;\n\
         Rule = 2;  Security = true;  IP = {peer};  Protocol = UDP;  Port = {UDP_PORT};\n\
         \x20          Encryption = ChaCha20;  Applmode = {mode};\n\
         \x20          Key = 0x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f;\n\
         Rule = 3;  Security = true;  IP = {peer};  Protocol = ICMP;  Encryption = 2;\n\
         \x20          Key = 0x{icmp};\n\
         Rule = 4;  Security = false; IP = {peer};  Protocol = TCP;  Port = {CLEAR_PORT};  Applmode = {mode};\n",
        host = ["a", "b"][side],
        icmp = "a5".repeat(32),
    )
}

fn config(lab: &Lab, side: usize, mode: &str) -> Result<String> {
    pilsc_config(lab, side, &rules(side), mode, 30)
}

fn lab_pair(netveil: &Path, keep: bool) -> Result<(Lab, [String; 2])> {
    let (mut lab, ns) = two_hosts("nvpd", netveil, ADDR)?;
    if keep {
        lab.keep();
    }
    Ok((lab, ns))
}

fn ip(i: usize) -> IpAddr {
    IpAddr::V4(ADDR[i].parse().expect("address"))
}

/// Sends `data` from host a to host b's UDP port `port`, `n` times; returns what host b received in 1.5 s.
fn udp_exchange(
    lab: &Lab,
    ns: &[String; 2],
    port: u16,
    data: Vec<u8>,
    n: usize,
) -> Result<Vec<Vec<u8>>> {
    let dst = SocketAddr::new(ip(1), port);
    let rx = lab::spawn_in_ns(&ns[1], move || -> std::io::Result<Vec<Vec<u8>>> {
        let s = UdpSocket::bind(dst)?;
        s.set_read_timeout(Some(Duration::from_millis(1500)))?;
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while let Ok(len) = s.recv(&mut buf) {
            got.push(buf[..len].to_vec());
        }
        Ok(got)
    })?;
    std::thread::sleep(Duration::from_millis(200));
    lab.in_ns(&ns[0], move || -> std::io::Result<()> {
        let s = UdpSocket::bind("0.0.0.0:0")?;
        for _ in 0..n {
            s.send_to(&data, dst)?;
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    })?
    .map_err(Error::io("udp send"))?;
    rx.join()
        .map_err(|_| Error::internal("udp receiver panicked"))??
        .map_err(Error::io("udp receive"))
}

fn pilsc_status(d: &lab::Daemon) -> Result<Value> {
    Ok(d.status_json()?["engines"]["pilsc"].clone())
}

/// The tamper story for one mode: host b never sees a sealed datagram (a DROP before its queue), an attacker
/// flips two ciphertext bits whose plaintext changes cancel in the UDP checksum and puts the frame on the wire.
/// Returns (what host b's socket received, host b's PILSC status).
fn tamper(netveil: &Path, keep: bool, mode: &str) -> Result<(Vec<Vec<u8>>, Value)> {
    let (lab, ns) = lab_pair(netveil, keep)?;
    let mut ds = Vec::new();
    for (side, n) in ns.iter().enumerate() {
        ds.push(lab.start_daemon(n, &format!("p{side}"), &config(&lab, side, mode)?)?);
    }
    let ol = if mode == "confidential" { 12 } else { 28 };
    let payload: Vec<u8> = b"A?B?".iter().copied().cycle().take(301).collect();
    let wire_len = (20 + ol + 8 + payload.len()).to_string();
    let mut drop = vec![
        "iptables",
        "-w",
        "-t",
        "raw",
        "-I",
        "PREROUTING",
        "1",
        "-p",
        "udp",
        "-m",
        "length",
        "--length",
        &wire_len,
        "-j",
        "DROP",
    ];
    lab.exec_ok(&ns[1], &drop)?;
    let mut cap = lab.capture(
        &ns[1],
        "veth-b",
        &format!("tamper-{mode}.pcap"),
        2000,
        &["udp"],
    )?;
    udp_exchange(&lab, &ns, UDP_PORT, payload.clone(), 1)?;
    let path = cap.stop()?;
    drop[4] = "-D";
    drop.remove(6);
    lab.exec_ok(&ns[1], &drop)?;
    let want = 20 + ol + 8 + payload.len();
    let frame = first_frame(&path, |p| p.len() == want && p.get(20) == Some(&130))?
        .ok_or_else(|| Error::measurement("demo", "no sealed datagram captured"))?;
    let mut forged = frame.clone();
    let data = frame.len() - payload.len();
    forged[data] ^= 0x02;
    forged[data + 2] ^= 0x02;
    let dst = SocketAddr::new(ip(1), UDP_PORT);
    let rx = lab::spawn_in_ns(&ns[1], move || -> std::io::Result<Vec<Vec<u8>>> {
        let s = UdpSocket::bind(dst)?;
        s.set_read_timeout(Some(Duration::from_millis(1200)))?;
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while let Ok(n) = s.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
        Ok(got)
    })?;
    std::thread::sleep(Duration::from_millis(200));
    inject_frame(&lab, &ns[0], "veth-a", &forged)?;
    let got = rx
        .join()
        .map_err(|_| Error::internal("receiver panicked"))??
        .map_err(Error::io("udp receive"))?;
    let st = pilsc_status(&ds[1])?;
    Ok((got, st))
}

pub fn run(netveil: &Path, keep: bool, megabytes: u64) -> Result<()> {
    for t in ["iptables", "tshark", "python3"] {
        if !lab::have_tool(t) {
            return Err(Error::Usage(format!(
                "netveil demo --pilsc needs '{t}' (see .ci/setup)"
            )));
        }
    }
    header("1. Two hosts and their rule files");
    let (lab, ns) = step("building the lab", lab_pair(netveil, keep))?;
    println!(
        "two network namespaces joined by a veth pair: host a {} ({}), host b {} ({}); PILSC is not a tunnel: \
         each host's own packets are taken from netfilter queues, sealed on the way out, opened on the way in",
        ns[0], ADDR[0], ns[1], ADDR[1]
    );
    println!("\nhost a's rule file (the paper's format; host b's names host a and says Server):\n");
    for l in rules(0).lines() {
        println!("  {l}");
    }
    let mut ds = Vec::new();
    for (side, n) in ns.iter().enumerate() {
        let cfg = step("configuration", config(&lab, side, "authenticated"))?;
        ds.push(step(
            "starting the daemons",
            lab.start_daemon(n, &format!("p{side}"), &cfg),
        )?);
    }
    println!(
        "\nnetveil up on both hosts: [pilsc] mode = \"authenticated\" (28-byte option with a tag)"
    );

    header("2. Traffic, and what crosses the wire");
    let mut cap = step(
        "tcpdump",
        lab.capture(&ns[1], "veth-b", "wire.pcap", 2000, &["ip"]),
    )?;
    let out = step(
        "ping",
        lab.exec_ok(
            &ns[0],
            &["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", ADDR[1]],
        ),
    )?;
    for l in out.lines().filter(|l| l.contains("transmitted")) {
        println!("  ping (ICMP, rule 3, AES-256): {l}");
    }
    let t = step(
        "TCP transfer",
        lab::tcp_transfer(&ns[0], &ns[1], ip(1), TCP_PORT, megabytes << 20),
    )?;
    println!(
        "  TCP {TCP_PORT} (rule 1, AES-128): {} MB sent and byte-checked in {:.2} s ({:.0} Mbit/s)",
        megabytes,
        t.seconds,
        t.mbit_per_s()
    );
    let got = step(
        "UDP",
        udp_exchange(&lab, &ns, UDP_PORT, MARKER.as_bytes().to_vec(), 5),
    )?;
    println!(
        "  UDP {UDP_PORT} (rule 2, ChaCha20): 5 datagrams \"{MARKER}\", {} received",
        got.len()
    );
    let c = step(
        "clear TCP",
        lab::tcp_transfer(&ns[0], &ns[1], ip(1), CLEAR_PORT, 64 << 10),
    )?;
    println!(
        "  TCP {CLEAR_PORT} (rule 4, Security = false): {} KB in clear",
        c.bytes >> 10
    );
    let pcap = step("stopping tcpdump", cap.stop())?;
    let out = step(
        "tshark",
        lab.exec_ok(
            &ns[1],
            &[
                "tshark",
                "-n",
                "-r",
                pcap.to_str().unwrap_or_default(),
                "-T",
                "fields",
                "-E",
                "separator=|",
                "-e",
                "ip.proto",
                "-e",
                "ip.opt.type",
                "-e",
                "tcp.dstport",
            ],
        ),
    )?;
    let (mut marked, mut clear_tcp, mut clear_other) = (0, 0, 0);
    for l in out.lines() {
        let f: Vec<&str> = l.split('|').collect();
        let opt = f
            .get(1)
            .is_some_and(|o| o.split(',').any(|t| t.trim() == "130"));
        if opt {
            marked += 1;
        } else if f.first() == Some(&"6") && f.get(2) == Some(&CLEAR_PORT.to_string().as_str()) {
            clear_tcp += 1;
        } else {
            clear_other += 1;
        }
    }
    let bytes = std::fs::read(&pcap).map_err(Error::io("capture"))?;
    let seen = bytes.windows(MARKER.len()).any(|w| w == MARKER.as_bytes());
    println!(
        "\non the wire (tshark on host b's port): {marked} packets carry option 130 (ICMP, TCP {TCP_PORT}, UDP \
         {UDP_PORT}: transport header and data encrypted, ports unreadable), {clear_tcp} packets of TCP {CLEAR_PORT} \
         in clear, {clear_other} other; the UDP text \"{MARKER}\" is {} in the capture",
        if seen { "VISIBLE" } else { "nowhere" }
    );
    let lines = step(
        "tcpdump",
        lab.exec_ok(
            &ns[1],
            &[
                "tcpdump",
                "-n",
                "-v",
                "-r",
                pcap.to_str().unwrap_or_default(),
                "-c",
                "4",
            ],
        ),
    )?;
    println!("\nthe first packets as tcpdump -v shows them:");
    for l in lines.lines().take(8) {
        println!("  {l}");
    }

    header("3. Status of host b");
    let st = step("status", pilsc_status(&ds[1]))?;
    println!(
        "  mode {}, integrity {}, queues {}, via {}",
        st["mode"], st["integrity"], st["queues"], st["iptables"]
    );
    for r in st["rules"].as_array().into_iter().flatten() {
        println!(
            "  rule {:<2} {:<5} {:<16} security {:<5} {:<9} in {:>6} packets {:>9} bytes, out {:>6} packets",
            r["rule"],
            r["protocol"].as_str().unwrap_or(""),
            r["ip"].as_str().unwrap_or(""),
            r["security"],
            r["encryption"].as_str().unwrap_or("-"),
            r["packets_in"],
            r["bytes_in"],
            r["packets_out"]
        );
    }
    let drops: Vec<String> = st["drops"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "  drops: {}",
        if drops.is_empty() {
            "none".into()
        } else {
            drops.join(", ")
        }
    );
    drop(ds);
    drop(lab);

    header("4. Tampering on the wire, in each mode");
    println!(
        "an attacker keeps a sealed UDP datagram (\"A?B?A?B?...\") from host b, flips one bit in byte 0 and one in byte 2\n\
         of its ciphertext (bits whose plaintext changes cancel in the UDP checksum) and puts it on the wire again"
    );
    for mode in ["confidential", "authenticated"] {
        let (got, st) = step(mode, tamper(netveil, keep, mode))?;
        match got.first() {
            Some(d) => println!(
                "  {mode:<13} (12-byte option, no integrity): host b DELIVERED it, changed: it begins \"{}\" \
                 (sent \"A?B?\")",
                String::from_utf8_lossy(&d[..4.min(d.len())])
            ),
            None => println!(
                "  {mode:<13} (28-byte option, tag): host b dropped it (drops.auth = {})",
                st["drops"]["auth"]
            ),
        }
    }
    println!(
        "\nthe paper's mode keeps 12 bytes but cannot tell a changed packet; netveil's default spends 16 more on a tag."
    );
    Ok(())
}
