//! `netveil bench`: TCP throughput through netveil, per ESP suite and encapsulation and per PSP version, against the
//! same veth path in clear (and against wireguard-go when it is installed), all measured in one run in
//! network-namespace labs; then PSP's per-packet time split (key lookup, crypto, the rest), measured in process.
//!
//! Each row builds a fresh two-host lab (two namespaces joined by a veth pair), starts `netveil up` in both, and
//! runs iperf3 between the inner addresses for `--seconds`. Figures are the receiver's goodput.

pub use crate::bench_args::BenchArgs;
use crate::lab::{self, iperf, Family, HostPair, Lab, TwoHosts};
use crate::{Error, Result};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

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

/// One measured row.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub path: String,
    pub encap: String,
    pub gbit_per_s: f64,
    pub retransmits: u64,
}

fn measure_clear(a: &BenchArgs) -> Result<Row> {
    let mut lab = Lab::new("nvbench")?;
    let h = TwoHosts::topology(&mut lab, &HostPair::default())?;
    let (g, r) = iperf(
        &lab,
        &h.ns[1],
        &h.ns[0],
        &h.addrs[1].outer.to_string(),
        a.seconds,
        a.streams,
    )?;
    Ok(Row {
        path: "clear (veth, no protection)".into(),
        encap: "-".into(),
        gbit_per_s: g,
        retransmits: r,
    })
}

/// iperf3 through netveil between the inner addresses of a fresh two-host lab built from `pair`.
fn measure_pair(a: &BenchArgs, pair: &HostPair, path: String, encap: &str) -> Result<Row> {
    let mut lab = Lab::new("nvbench")?;
    let h = TwoHosts::up(&mut lab, pair)?;
    if pair.protocol == lab::Protocol::Psp {
        h.wait_psp_associated(Duration::from_secs(15))?;
    }
    let (g, r) = iperf(
        &lab,
        &h.ns[1],
        &h.ns[0],
        &h.addrs[1].inner.to_string(),
        a.seconds,
        a.streams,
    )?;
    Ok(Row {
        path,
        encap: encap.into(),
        gbit_per_s: g,
        retransmits: r,
    })
}

fn measure_suite(a: &BenchArgs, suite: &str, udp: bool) -> Result<Row> {
    let mut pair = HostPair::esp(suite);
    pair.udp_encap = udp;
    pair.outer = Family::V4;
    pair.inner = Family::V4;
    let encap = if udp { "udp 4500" } else { "raw (proto 50)" };
    measure_pair(a, &pair, format!("netveil esp {suite}"), encap)
}

fn measure_psp(a: &BenchArgs, version: &str) -> Result<Row> {
    let pair = HostPair::psp(version);
    measure_pair(
        a,
        &pair,
        format!("netveil psp {version} tunnel"),
        "udp 1000",
    )
}

/// wireguard-go: on PATH, or built from the Go module proxy into ~/go/bin (where `go install` names it
/// `wireguard`).
fn find_wireguard_go() -> Option<PathBuf> {
    if lab::have_tool("wireguard-go") {
        return Some(PathBuf::from("wireguard-go"));
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    ["wireguard-go", "wireguard"]
        .iter()
        .flat_map(|n| {
            [
                home.join("go/bin").join(n),
                PathBuf::from("/root/go/bin").join(n),
            ]
        })
        .find(|p| p.exists())
}

/// wireguard-go between the same two namespaces, same addresses, same MTU.
fn measure_wireguard_go(a: &BenchArgs, wg_go: &std::path::Path) -> Result<Row> {
    let mut lab = Lab::new("nvbench")?;
    let pair = HostPair::default();
    let h = TwoHosts::topology(&mut lab, &pair)?;
    let mut keys = Vec::new();
    for _ in 0..2 {
        let k = Command::new("wg")
            .arg("genkey")
            .output()
            .map_err(Error::io("wg genkey"))?;
        let private = String::from_utf8_lossy(&k.stdout).trim().to_string();
        let mut p = Command::new("wg")
            .arg("pubkey")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(Error::io("wg pubkey"))?;
        use std::io::Write;
        p.stdin.take().map(|mut s| s.write_all(private.as_bytes()));
        let public =
            String::from_utf8_lossy(&p.wait_with_output().map_err(Error::io("wg pubkey"))?.stdout)
                .trim()
                .to_string();
        keys.push((private, public));
    }
    let mut children = Vec::new();
    for i in 0..2 {
        let ns = &h.ns[i];
        let keyfile = lab.dir().join(format!("wg{i}.key"));
        std::fs::write(&keyfile, &keys[i].0).map_err(Error::io("write wg key"))?;
        // wireguard-go's control socket (/var/run/wireguard/NAME.sock) is not per namespace: one name per side.
        let dev = format!("nvwg{i}");
        let mut cmd = lab.command(ns, &[wg_go.to_str().unwrap_or("wireguard-go"), "-f", &dev]);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        children.push(cmd.spawn().map_err(Error::io("start wireguard-go"))?);
        for _ in 0..50 {
            if lab
                .exec(ns, &["ip", "link", "show", &dev])
                .map(|o| o.status.success())
                .unwrap_or(false)
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let peer = format!("{}:51820", h.addrs[1 - i].outer);
        let allowed = format!("{}/32", h.addrs[1 - i].inner);
        lab.exec_ok(
            ns,
            &[
                "wg",
                "set",
                &dev,
                "private-key",
                keyfile.to_str().unwrap_or(""),
                "listen-port",
                "51820",
                "peer",
                &keys[1 - i].1,
                "allowed-ips",
                &allowed,
                "endpoint",
                &peer,
            ],
        )?;
        lab.exec_ok(
            ns,
            &[
                "ip",
                "addr",
                "add",
                &format!("{}/24", h.addrs[i].inner),
                "dev",
                &dev,
            ],
        )?;
        lab.exec_ok(
            ns,
            &[
                "ip",
                "link",
                "set",
                &dev,
                "mtu",
                &pair.mtu.to_string(),
                "up",
            ],
        )?;
    }
    let r = iperf(
        &lab,
        &h.ns[1],
        &h.ns[0],
        &h.addrs[1].inner.to_string(),
        a.seconds,
        a.streams,
    );
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let (g, r) = r?;
    Ok(Row {
        path: "wireguard-go (peer)".into(),
        encap: "udp 51820".into(),
        gbit_per_s: g,
        retransmits: r,
    })
}

/// One l2sec measurement (or the plain bridge).
#[derive(Debug, Clone, serde::Serialize)]
pub struct L2Row {
    pub path: String,
    pub gbit_per_s: f64,
    pub retransmits: u64,
    /// Mean ping round-trip time.
    pub rtt_ms: f64,
    /// The first ping after the neighbour entry was flushed (ARP resolution, and SEP with l2sec).
    pub first_ping_ms: f64,
}

fn ping_rtts(lab: &Lab, ns: &str, dst: &str, count: u32) -> Result<Vec<f64>> {
    let o = lab.exec_ok(
        ns,
        &[
            "ping",
            "-n",
            "-c",
            &count.to_string(),
            "-i",
            "0.02",
            "-W",
            "2",
            dst,
        ],
    )?;
    Ok(o.lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect())
}

/// The plain bridge (`suite` None) or l2sec with `suite` between two stations of the wired-LAN lab.
fn measure_l2(a: &BenchArgs, suite: Option<&str>) -> Result<L2Row> {
    use crate::lan::{L2Opts, Lan, PORT, TAP};
    let mut lab = Lab::new("nvbench")?
        .with_netveil(std::env::current_exe().map_err(Error::io("current exe"))?);
    let lan = Lan::build(&mut lab, &["h1", "h2"])?;
    let _d = match suite {
        Some(s) => Some(lan.protect(&lab, &["h1", "h2"], &L2Opts::suite(s))?),
        None => None,
    };
    let dev = if suite.is_some() { TAP } else { PORT };
    let (h1, h2) = (lan.station("h1")?.clone(), lan.station("h2")?.clone());
    let dst = h2.ip.to_string();
    // The first ping after both sides forgot each other: ARP (and SEP, which the ARP reply waits for).
    let mut first = f64::NAN;
    for _ in 0..3 {
        let _ = lab.exec(&h1.ns, &["ip", "neigh", "flush", "dev", dev]);
        let _ = lab.exec(&h2.ns, &["ip", "neigh", "flush", "dev", dev]);
        if let Some(t) = ping_rtts(&lab, &h1.ns, &dst, 1)?.first() {
            first = if first.is_nan() { *t } else { first.min(*t) };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let rtts = ping_rtts(&lab, &h1.ns, &dst, 50)?;
    if rtts.is_empty() {
        return Err(Error::Other(format!("no ping reply from {dst}")));
    }
    let rtt = rtts.iter().sum::<f64>() / rtts.len() as f64;
    let (g, r) = iperf(&lab, &h2.ns, &h1.ns, &dst, a.seconds, a.streams)?;
    Ok(L2Row {
        path: match suite {
            Some(s) => format!("l2sec {s}"),
            None => "plain bridge (no protection)".into(),
        },
        gbit_per_s: g,
        retransmits: r,
        rtt_ms: rtt,
        first_ping_ms: first,
    })
}

pub fn run(a: BenchArgs) -> Result<()> {
    if !lab::is_root() {
        return Err(Error::Usage(
            "netveil bench builds network namespaces: run it as root".into(),
        ));
    }
    if !lab::have_tool("iperf3") {
        return Err(Error::Usage(
            "netveil bench needs iperf3 (apt-get install iperf3)".into(),
        ));
    }
    if a.flood {
        let rows = crate::bench_flood::run(&a)?;
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
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "netveil bench: TCP goodput (iperf3, {} stream(s), {} s each) between two network namespaces on one machine \
         ({cpus} CPUs), MTU 1400 inside the tunnel",
        a.streams, a.seconds
    );
    let mut rows = Vec::new();
    let report = |r: Result<Row>, rows: &mut Vec<Row>| match r {
        Ok(row) => {
            println!(
                "  {:<34} {:<15} {:>7.2} Gbit/s",
                row.path, row.encap, row.gbit_per_s
            );
            rows.push(row);
        }
        Err(e) => println!("  measurement failed: {e}"),
    };
    report(measure_clear(&a), &mut rows);
    if !a.no_peers {
        if let (Some(wg_go), true) = (find_wireguard_go(), lab::have_tool("wg")) {
            report(measure_wireguard_go(&a, &wg_go), &mut rows);
        }
    }
    for s in &suites {
        for &udp in &encaps {
            report(measure_suite(&a, s, udp), &mut rows);
        }
    }
    for v in &psp {
        report(measure_psp(&a, v), &mut rows);
    }
    let clear = rows.first().map(|r| r.gbit_per_s).unwrap_or(0.0);
    println!();
    println!(
        "{:<34} {:<15} {:>10} {:>9} {:>8}",
        "path", "encapsulation", "Gbit/s", "of clear", "retrans"
    );
    for r in &rows {
        let pct = if clear > 0.0 {
            format!("{:.1}%", 100.0 * r.gbit_per_s / clear)
        } else {
            "-".into()
        };
        println!(
            "{:<34} {:<15} {:>10.2} {:>9} {:>8}",
            r.path, r.encap, r.gbit_per_s, pct, r.retransmits
        );
    }
    let mut l2rows = Vec::new();
    if !l2suites.is_empty() {
        println!();
        println!(
            "l2sec on the wired-LAN lab (two hosts on a Linux bridge, MTU 1500 on the wire): TCP goodput (iperf3, {} s), \
             ping round-trip time (50 pings, 56 bytes), and the first ping after the neighbour entry is flushed (ARP, \
             and with l2sec the SEP exchange). Between namespaces the plain bridge moves 64 KiB super-frames \
             (segmentation offload); l2sec puts every segment on the wire as its own frame, as a real Ethernet does.",
            a.seconds
        );
        let mut fails = 0;
        let paths = std::iter::once(None).chain(l2suites.iter().map(|s| Some(s.as_str())));
        for s in paths {
            match measure_l2(&a, s) {
                Ok(r) => {
                    println!(
                        "  {:<34} {:>7.2} Gbit/s  rtt {:.3} ms  first ping {:.3} ms",
                        r.path, r.gbit_per_s, r.rtt_ms, r.first_ping_ms
                    );
                    l2rows.push(r);
                }
                Err(e) => {
                    fails += 1;
                    println!("  measurement failed: {e}");
                }
            }
        }
        if let Some(plain) = l2rows.first().cloned() {
            println!();
            println!(
                "{:<34} {:>8} {:>9} {:>9} {:>9} {:>11}",
                "path", "Gbit/s", "of plain", "rtt ms", "x plain", "first ms"
            );
            for r in &l2rows {
                println!(
                    "{:<34} {:>8.2} {:>8.1}% {:>9.3} {:>9.2} {:>11.3}",
                    r.path,
                    r.gbit_per_s,
                    100.0 * r.gbit_per_s / plain.gbit_per_s.max(1e-9),
                    r.rtt_ms,
                    r.rtt_ms / plain.rtt_ms.max(1e-9),
                    r.first_ping_ms
                );
            }
        }
        if fails > 0 {
            return Err(Error::Other("some l2sec measurements failed".into()));
        }
    }
    if let Some(p) = &a.json {
        let v = serde_json::json!({ "tunnels": rows, "l2sec": l2rows });
        std::fs::write(p, serde_json::to_string_pretty(&v).unwrap_or_default())
            .map_err(Error::io(format!("cannot write {}", p.display())))?;
    }
    if a.split_packets > 0 {
        println!();
        let split = crate::bench_split::psp_split(a.split_packets, 1400);
        print!("{}", crate::bench_split::render(&split));
    }
    if rows.len() < 1 + suites.len() * encaps.len() + psp.len() {
        return Err(Error::Other("some measurements failed".into()));
    }
    Ok(())
}
