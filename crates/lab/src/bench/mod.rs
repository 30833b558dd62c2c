//! `netveil bench`: TCP throughput and ping round-trip time through netveil, per ESP suite and encapsulation and per
//! PSP version, against the same veth path in clear (and against wireguard-go when it is installed), and l2sec
//! against a plain bridge, all measured in one run in network-namespace labs; then PSP's per-packet time split (key
//! lookup, crypto, the rest), measured in process.
//!
//! Each row builds a fresh two-host lab (two namespaces joined by a veth pair), starts `netveil up` in both, pings
//! the peer's inner address (`--pings` per payload size, see [`bench_ping`]), then runs iperf3
//! between the inner addresses for `--seconds`. Figures are the receiver's goodput. With `--compare PATH` every
//! netveil row is measured a second time, right after, with the daemons of the `netveil` binary at PATH.

pub use crate::bench_args::BenchArgs;
use crate::bench_ping::{self, PingStat};
use crate::lab::{self, iperf, Family, HostPair, Lab, TwoHosts};
use crate::{Error, Result};
use std::path::{Path, PathBuf};
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
    /// Ping round-trip times per payload size (empty with `--pings 0`).
    pub ping: Vec<PingStat>,
    /// The `netveil` binary that ran the daemons (netveil rows).
    pub netveil_bin: Option<PathBuf>,
    /// Measurements behind the row (`--rounds`; fewer where some failed): Gbit/s and retransmits are their
    /// medians, the round-trip times are pooled.
    pub rounds: u32,
}

/// The `netveil` binary of a netveil row and the label its rows get ("" or " (base)").
#[derive(Debug, Clone)]
struct Bin {
    path: PathBuf,
    label: &'static str,
}

fn measure_clear(a: &BenchArgs) -> Result<Row> {
    let mut lab = Lab::new("nvbench")?;
    let h = TwoHosts::topology(&mut lab, &HostPair::default())?;
    let dst = h.addrs[1].outer.to_string();
    let ping = bench_ping::ping_sizes(&lab, &h.ns[0], &dst, a.pings, &[&h.ns[0], &h.ns[1]])?;
    let (g, r) = iperf(&lab, &h.ns[1], &h.ns[0], &dst, a.seconds, a.streams)?;
    Ok(Row {
        path: "clear (veth, no protection)".into(),
        encap: "-".into(),
        gbit_per_s: g,
        retransmits: r,
        ping,
        netveil_bin: None,
        rounds: 1,
    })
}

/// Pings, then iperf3, through netveil between the inner addresses of a fresh two-host lab built from `pair`, with
/// the daemons of `bin`.
fn measure_pair(
    a: &BenchArgs,
    bin: &Bin,
    pair: &HostPair,
    path: String,
    encap: &str,
) -> Result<Row> {
    let mut lab = Lab::new("nvbench")?.with_netveil(&bin.path);
    let h = TwoHosts::up(&mut lab, pair)?;
    if pair.protocol == lab::Protocol::Psp {
        h.wait_psp_associated(Duration::from_secs(15))?;
    }
    let dst = h.addrs[1].inner.to_string();
    let ping = bench_ping::ping_sizes(&lab, &h.ns[0], &dst, a.pings, &[&h.ns[0], &h.ns[1]])?;
    let (g, r) = iperf(&lab, &h.ns[1], &h.ns[0], &dst, a.seconds, a.streams)?;
    Ok(Row {
        path: format!("{path}{}", bin.label),
        encap: encap.into(),
        gbit_per_s: g,
        retransmits: r,
        ping,
        netveil_bin: Some(bin.path.clone()),
        rounds: 1,
    })
}

fn measure_suite(a: &BenchArgs, bin: &Bin, suite: &str, udp: bool) -> Result<Row> {
    let mut pair = HostPair::esp(suite);
    pair.udp_encap = udp;
    pair.outer = Family::V4;
    pair.inner = Family::V4;
    let encap = if udp { "udp 4500" } else { "raw (proto 50)" };
    measure_pair(a, bin, &pair, format!("netveil esp {suite}"), encap)
}

fn measure_psp(a: &BenchArgs, bin: &Bin, version: &str) -> Result<Row> {
    let pair = HostPair::psp(version);
    measure_pair(
        a,
        bin,
        &pair,
        format!("netveil psp {version} tunnel"),
        "udp 1000",
    )
}

/// wireguard-go: on PATH, or built from the Go module proxy into ~/go/bin (where `go install` names it
/// `wireguard`).
pub fn find_wireguard_go() -> Option<PathBuf> {
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
    let (ping, g, r) = with_wireguard_go(wg_go, |lab, h| {
        let dst = h.addrs[1].inner.to_string();
        let ping = bench_ping::ping_sizes(lab, &h.ns[0], &dst, a.pings, &[&h.ns[0], &h.ns[1]])?;
        let (g, r) = iperf(lab, &h.ns[1], &h.ns[0], &dst, a.seconds, a.streams)?;
        Ok((ping, g, r))
    })?;
    Ok(Row {
        path: "wireguard-go (peer)".into(),
        encap: "udp 51820".into(),
        gbit_per_s: g,
        retransmits: r,
        ping,
        netveil_bin: None,
        rounds: 1,
    })
}

/// Runs `f` with wireguard-go (the binary `wg_go`) between two fresh namespaces as the bench's other paths have
/// them (same addresses: `inner` on the tunnel; same MTU), then stops it.
pub fn with_wireguard_go<T>(
    wg_go: &std::path::Path,
    f: impl FnOnce(&Lab, &TwoHosts) -> Result<T>,
) -> Result<T> {
    with_wireguard_go_on(wg_go, &HostPair::default(), f)
}

/// [`with_wireguard_go`] on the topology of `pair` (its addresses, and its router when it is routed).
pub fn with_wireguard_go_on<T>(
    wg_go: &std::path::Path,
    pair: &HostPair,
    f: impl FnOnce(&Lab, &TwoHosts) -> Result<T>,
) -> Result<T> {
    let mut lab = Lab::new("nvbench")?;
    let h = TwoHosts::topology(&mut lab, pair)?;
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
    let r = f(&lab, &h);
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    r
}

/// One l2sec measurement (or the plain bridge).
#[derive(Debug, Clone, serde::Serialize)]
pub struct L2Row {
    pub path: String,
    pub gbit_per_s: f64,
    pub retransmits: u64,
    /// Ping round-trip times per payload size (empty with `--pings 0`); the added time is over the plain bridge.
    pub ping: Vec<PingStat>,
    /// The first ping after the neighbour entry was flushed (ARP resolution, and SEP with l2sec).
    pub first_ping_ms: f64,
    /// The `netveil` binary that ran the daemons (l2sec rows).
    pub netveil_bin: Option<PathBuf>,
    /// Measurements behind the row, as [`Row::rounds`] (the first ping: the fastest of all rounds).
    pub rounds: u32,
}

/// The plain bridge (`suite` None) or l2sec with `suite`, run by `bin`, between two stations of the wired-LAN lab.
fn measure_l2(a: &BenchArgs, bin: &Bin, suite: Option<&str>) -> Result<L2Row> {
    use crate::lan::{L2Opts, Lan, PORT, TAP};
    let mut lab = Lab::new("nvbench")?.with_netveil(&bin.path);
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
        let o = lab.exec_ok(&h1.ns, &["ping", "-n", "-c", "1", "-W", "2", &dst])?;
        if let Some(t) = bench_ping::parse_times(&o).first() {
            first = if first.is_nan() { *t } else { first.min(*t) };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let ping = bench_ping::ping_sizes(&lab, &h1.ns, &dst, a.pings, &[&h1.ns, &h2.ns])?;
    let (g, r) = iperf(&lab, &h2.ns, &h1.ns, &dst, a.seconds, a.streams)?;
    Ok(L2Row {
        path: match suite {
            Some(s) => format!("l2sec {s}{}", bin.label),
            None => "plain bridge (no protection)".into(),
        },
        gbit_per_s: g,
        retransmits: r,
        ping,
        first_ping_ms: first,
        netveil_bin: suite.map(|_| bin.path.clone()),
        rounds: 1,
    })
}

/// The measurements of several rounds grouped by `key`, in the order of each key's first appearance.
fn group_rounds<T>(all: Vec<T>, key: impl Fn(&T) -> String) -> Vec<Vec<T>> {
    let mut groups: Vec<(String, Vec<T>)> = Vec::new();
    for r in all {
        let k = key(&r);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, v)) => v.push(r),
            None => groups.push((k, vec![r])),
        }
    }
    groups.into_iter().map(|(_, v)| v).collect()
}

fn median_u64(v: impl Iterator<Item = u64>) -> u64 {
    bench_ping::median(&v.map(|x| x as f64).collect::<Vec<_>>()).round() as u64
}

/// One row per path out of every round's measurements: medians of Gbit/s and retransmits, pooled round-trip times.
fn merge_rows(all: Vec<Row>) -> Vec<Row> {
    group_rounds(all, |r| format!("{}\t{}", r.path, r.encap))
        .into_iter()
        .map(|rs| Row {
            path: rs[0].path.clone(),
            encap: rs[0].encap.clone(),
            gbit_per_s: bench_ping::median(&rs.iter().map(|r| r.gbit_per_s).collect::<Vec<_>>()),
            retransmits: median_u64(rs.iter().map(|r| r.retransmits)),
            ping: bench_ping::pool(rs.iter().map(|r| r.ping.as_slice())),
            netveil_bin: rs[0].netveil_bin.clone(),
            rounds: rs.len() as u32,
        })
        .collect()
}

/// [`merge_rows`] for the l2sec rows (the first ping: the fastest).
fn merge_l2rows(all: Vec<L2Row>) -> Vec<L2Row> {
    group_rounds(all, |r| r.path.clone())
        .into_iter()
        .map(|rs| L2Row {
            path: rs[0].path.clone(),
            gbit_per_s: bench_ping::median(&rs.iter().map(|r| r.gbit_per_s).collect::<Vec<_>>()),
            retransmits: median_u64(rs.iter().map(|r| r.retransmits)),
            ping: bench_ping::pool(rs.iter().map(|r| r.ping.as_slice())),
            first_ping_ms: rs.iter().map(|r| r.first_ping_ms).fold(f64::NAN, f64::min),
            netveil_bin: rs[0].netveil_bin.clone(),
            rounds: rs.len() as u32,
        })
        .collect()
}

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
        crate::bench_ike::run(&a, bin)?;
        return Ok(());
    }
    if a.pilsc {
        crate::bench_pilsc::run(&a)?;
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
            bench_ping::PING_INTERVAL,
            bench_ping::PING_SIZES.map(|b| format!("{b} B")).join(", ")
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
                bench_ping::brief(&row.ping)
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
        bench_ping::fill_added(&mut r.ping, &clear_ping, wg_ping.as_deref());
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
        print!("{}", bench_ping::render(&table, wg_ping.is_some()));
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
                        bench_ping::brief(&r.ping)
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
                bench_ping::fill_added(&mut r.ping, &plain.ping, None);
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
                print!("{}", bench_ping::render(&table, false));
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
        let split = crate::bench_split::psp_split(a.split_packets, 1400);
        print!("{}", crate::bench_split::render(&split));
    }
    if fails > 0 {
        return Err(Error::Other("some measurements failed".into()));
    }
    if l2fails > 0 {
        return Err(Error::Other("some l2sec measurements failed".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(path: &str, g: f64, times: &[f64]) -> Row {
        Row {
            path: path.into(),
            encap: "udp 4500".into(),
            gbit_per_s: g,
            retransmits: g as u64,
            ping: vec![bench_ping::stat(56, times.len() as u32, times)],
            netveil_bin: None,
            rounds: 1,
        }
    }

    #[test]
    fn rounds_merge_per_path_in_first_order() {
        // Round 2 ran the base binary first: the merged table keeps round 1's order.
        let all = vec![
            row("esp", 1.0, &[0.1]),
            row("esp (base)", 4.0, &[0.4]),
            row("esp (base)", 6.0, &[0.6]),
            row("esp", 3.0, &[0.3]),
            row("esp", 2.0, &[0.2, 0.25]),
        ];
        let m = merge_rows(all);
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].path.as_str(), m[0].rounds), ("esp", 3));
        assert_eq!((m[0].gbit_per_s, m[0].retransmits), (2.0, 2));
        assert_eq!((m[0].ping[0].received, m[0].ping[0].median_ms), (4, 0.225));
        assert_eq!(
            (m[1].path.as_str(), m[1].rounds, m[1].gbit_per_s),
            ("esp (base)", 2, 5.0)
        );
    }

    #[test]
    fn binaries_take_turns_going_first() {
        let bins = [
            Bin {
                path: "new".into(),
                label: "",
            },
            Bin {
                path: "old".into(),
                label: " (base)",
            },
        ];
        let first = |r| turns(&bins, r)[0].label;
        assert_eq!([first(0), first(1), first(2)], ["", " (base)", ""]);
        assert_eq!(turns(&bins[..1], 1).len(), 1);
    }
}
