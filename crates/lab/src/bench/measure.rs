//! The tunnel and l2sec rows of `netveil bench`: one measurement of a path (ping round-trip times, then iperf3's
//! goodput) in a fresh lab, and the merge of several rounds' measurements into one row per path.

use super::args::BenchArgs;
use super::ping::{self, PingStat};
use super::wireguard::with_wireguard_go;
use crate::lab::{self, iperf, Family, HostPair, Lab, TwoHosts};
use crate::Result;
use std::path::PathBuf;
use std::time::Duration;

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
pub(super) struct Bin {
    pub(super) path: PathBuf,
    pub(super) label: &'static str,
}

pub(super) fn measure_clear(a: &BenchArgs) -> Result<Row> {
    let mut lab = Lab::new("nvbench")?;
    let h = TwoHosts::topology(&mut lab, &HostPair::default())?;
    let dst = h.addrs[1].outer.to_string();
    let ping = ping::ping_sizes(&lab, &h.ns[0], &dst, a.pings, &[&h.ns[0], &h.ns[1]])?;
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
pub(super) fn measure_pair(
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
    let ping = ping::ping_sizes(&lab, &h.ns[0], &dst, a.pings, &[&h.ns[0], &h.ns[1]])?;
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

pub(super) fn measure_suite(a: &BenchArgs, bin: &Bin, suite: &str, udp: bool) -> Result<Row> {
    let mut pair = HostPair::esp(suite);
    pair.udp_encap = udp;
    pair.outer = Family::V4;
    pair.inner = Family::V4;
    let encap = if udp { "udp 4500" } else { "raw (proto 50)" };
    measure_pair(a, bin, &pair, format!("netveil esp {suite}"), encap)
}

pub(super) fn measure_psp(a: &BenchArgs, bin: &Bin, version: &str) -> Result<Row> {
    let pair = HostPair::psp(version);
    measure_pair(
        a,
        bin,
        &pair,
        format!("netveil psp {version} tunnel"),
        "udp 1000",
    )
}

/// wireguard-go between the same two namespaces, same addresses, same MTU.
pub(super) fn measure_wireguard_go(a: &BenchArgs, wg_go: &std::path::Path) -> Result<Row> {
    let (ping, g, r) = with_wireguard_go(wg_go, |lab, h| {
        let dst = h.addrs[1].inner.to_string();
        let ping = ping::ping_sizes(lab, &h.ns[0], &dst, a.pings, &[&h.ns[0], &h.ns[1]])?;
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
pub(super) fn measure_l2(a: &BenchArgs, bin: &Bin, suite: Option<&str>) -> Result<L2Row> {
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
        if let Some(t) = ping::parse_times(&o).first() {
            first = if first.is_nan() { *t } else { first.min(*t) };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let ping = ping::ping_sizes(&lab, &h1.ns, &dst, a.pings, &[&h1.ns, &h2.ns])?;
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
    ping::median(&v.map(|x| x as f64).collect::<Vec<_>>()).round() as u64
}

/// One row per path out of every round's measurements: medians of Gbit/s and retransmits, pooled round-trip times.
pub(super) fn merge_rows(all: Vec<Row>) -> Vec<Row> {
    group_rounds(all, |r| format!("{}\t{}", r.path, r.encap))
        .into_iter()
        .map(|rs| Row {
            path: rs[0].path.clone(),
            encap: rs[0].encap.clone(),
            gbit_per_s: ping::median(&rs.iter().map(|r| r.gbit_per_s).collect::<Vec<_>>()),
            retransmits: median_u64(rs.iter().map(|r| r.retransmits)),
            ping: ping::pool(rs.iter().map(|r| r.ping.as_slice())),
            netveil_bin: rs[0].netveil_bin.clone(),
            rounds: rs.len() as u32,
        })
        .collect()
}

/// [`merge_rows`] for the l2sec rows (the first ping: the fastest).
pub(super) fn merge_l2rows(all: Vec<L2Row>) -> Vec<L2Row> {
    group_rounds(all, |r| r.path.clone())
        .into_iter()
        .map(|rs| L2Row {
            path: rs[0].path.clone(),
            gbit_per_s: ping::median(&rs.iter().map(|r| r.gbit_per_s).collect::<Vec<_>>()),
            retransmits: median_u64(rs.iter().map(|r| r.retransmits)),
            ping: ping::pool(rs.iter().map(|r| r.ping.as_slice())),
            first_ping_ms: rs.iter().map(|r| r.first_ping_ms).fold(f64::NAN, f64::min),
            netveil_bin: rs[0].netveil_bin.clone(),
            rounds: rs.len() as u32,
        })
        .collect()
}
