//! `netveil demo`: a two-host lab in network namespaces. Brings up ESP (or, with `--psp`, PSP) in tunnel mode, pings,
//! transfers data, shows the daemon's status and what an eavesdropper on the wire sees, then decrypts the ESP capture
//! with the exported keys (PSP: rotates the master keys while traffic flows).
//!
//! With `--l2sec`: a wired LAN (a Linux bridge as the switch) with three hosts, an eavesdropper and an attacker;
//! first what the eavesdropper sees without protection, then the hosts protected with l2sec (ping, TCP, status,
//! the eavesdropper's view) and an ARP-spoofing attack that no longer works.
//!
//! With `--pilsc`: see [`crate::demo_pilsc`].

use crate::lab::{self, HostPair, Lab, TwoHosts};
use crate::lan::{mac_str, L2Opts, Lan, PORT, TAP};
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// ESP suite (strongSwan proposal name), e.g. aes128gcm16, aes256-sha256, chacha20poly1305.
    #[arg(long, default_value = "aes128gcm16")]
    pub suite: String,
    /// Use PSP instead of ESP, with this version (aes-gcm-128, aes-gcm-256, aes-gmac-128, aes-gmac-256); keys
    /// are exchanged over TLS 1.3 with certificates from `netveil keygen`.
    #[arg(long, value_name = "VERSION", num_args = 0..=1, default_missing_value = "aes-gcm-128")]
    pub psp: Option<String>,
    /// Protect a wired LAN (a switch, three hosts, an eavesdropper and an ARP-spoofing attacker) with l2sec
    /// instead, with this suite (aes128gcm, aes256gcm, chacha20poly1305, or the thesis' blowfish-cbc-sha1, ...).
    #[arg(long, value_name = "SUITE", num_args = 0..=1, default_missing_value = "aes128gcm", conflicts_with = "psp")]
    pub l2sec: Option<String>,
    /// Protect two hosts' own traffic with PILSC instead (rule file, option 130 on the wire, a tamper attempt
    /// against each mode).
    #[arg(long, conflicts_with_all = ["psp", "l2sec"])]
    pub pilsc: bool,
    /// Megabytes to transfer over TCP [default: 50, with --l2sec 32, with --pilsc 8].
    #[arg(long)]
    pub megabytes: Option<u64>,
    /// The netveil binary to run the daemons with (default: this executable).
    #[arg(long)]
    pub netveil: Option<PathBuf>,
    /// Keep the namespaces and files after the demo (for exploring; delete with `ip netns del`).
    #[arg(long)]
    pub keep: bool,
}

pub(crate) fn header(title: &str) {
    println!(
        "\n== {title} {}",
        "=".repeat(70usize.saturating_sub(title.len()))
    );
}

pub(crate) fn step<T>(what: &str, r: Result<T>) -> Result<T> {
    r.map_err(|e| Error::Other(format!("demo: {what}: {e}")))
}

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
        return crate::demo_pilsc::run(&bin, a.keep, a.megabytes.unwrap_or(8));
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
            return Err(Error::Other(
                "demo: clear traffic of the inner addresses is visible on the wire".into(),
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
                return Err(Error::Other(
                    "demo: tshark could not decrypt the capture".into(),
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

// ---------------------------------------------------------------------------------------------------------------
// netveil demo --l2sec
// ---------------------------------------------------------------------------------------------------------------

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
        return Err(Error::Other(format!(
            "ping {from} -> {to} ({dst}) lost packets: {}{}",
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
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

fn run_l2sec(a: &DemoArgs, suite: &str) -> Result<()> {
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
        return Err(Error::Other(
            "demo: eve's capture of the unprotected LAN holds no ARP or no ICMP".into(),
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
        return Err(Error::Other(format!(
            "demo: clear frames on the protected LAN (EtherTypes {by_type:?}, ARP {arp}, IPv4 {ip4}, IPv6 {ip6}, with addresses {with_addr})"
        )));
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
                return Err(Error::Other(format!(
                    "demo: arp_spoof.py exited with {status}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default().trim()
                )));
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
                return Err(Error::Other(format!(
                    "demo: h1's neighbour entry for h2 changed: {after_n}"
                )));
            }
            if after < before + sent / 2 {
                return Err(Error::Other(format!(
                    "demo: h1's port did not drop the forged ARP replies ({before} -> {after})"
                )));
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
