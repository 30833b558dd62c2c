//! `ping-rtt`: ICMP round-trip times through each path against the clear veth (the bare-PC IPsec study's Fig. 8), and
//! a station's ICMP and ARP round trips on a plain bridge and through l2sec (the L2 study's Fig. 6.6).

use std::path::Path;
use std::time::Duration;

use super::paths::{with_ike_on, with_strongswan_on, L2SEC_NULL_PATH};
use crate::bench::ping as bench_ping;
use crate::lab::{HostPair, Lab, Mode, TwoHosts};
use crate::lab_report::Cell;
use crate::{Error, Result};

/// The bare-PC IPsec study's statement on ping response time (its Fig. 8 gives no absolute numbers).
const BARE_PC_FIG8: &str = "bare-PC IPsec, Fig. 8: over 100% on every path, both modes (from text)";

/// The L2 study's ICMP figure for its protocol with full crypto (its figure gives no absolute times).
const L2_FIG66: &str =
    "L2 study, Fig. 6.6: ICMP RTT +117% over plain Ethernet, full crypto (from text)";

/// The payload sizes of `ping-rtt`.
pub fn ping_sizes(quick: bool) -> Vec<u32> {
    if quick {
        vec![64, 512, 1024]
    } else {
        (1..=16).map(|i| i * 64).collect()
    }
}

/// The paths of `ping-rtt` that netveil's daemons carry: (name, host pair).
fn netveil_paths() -> Vec<(&'static str, HostPair)> {
    let transport = HostPair {
        mode: Mode::Transport,
        ..HostPair::esp("aes128gcm16")
    };
    vec![
        (
            "netveil esp aes128gcm16 tunnel",
            HostPair::esp("aes128gcm16"),
        ),
        ("netveil esp aes128gcm16 transport", transport),
        ("netveil psp aes-gcm-128", HostPair::psp("aes-gcm-128")),
    ]
}

/// The round-trip cells of one path: per size, the median over the pings (each ping a repetition).
fn rtt_cells(path: &str, r: Result<Vec<bench_ping::PingStat>>, sizes: &[u32]) -> Vec<Cell> {
    match r {
        Ok(stats) => stats
            .into_iter()
            .map(|s| {
                Cell::measured(
                    "ping-rtt",
                    path,
                    &format!("rtt {} B", s.bytes),
                    "ms",
                    s.times,
                )
            })
            .collect(),
        Err(e) => sizes
            .iter()
            .map(|b| {
                Cell::missing(
                    "ping-rtt",
                    path,
                    &format!("rtt {b} B"),
                    "ms",
                    &format!("the path did not run: {e}"),
                )
            })
            .collect(),
    }
}

fn pings(
    lab: &Lab,
    ns: &str,
    dst: &str,
    sizes: &[u32],
    count: u32,
) -> Result<Vec<bench_ping::PingStat>> {
    sizes
        .iter()
        .map(|&b| bench_ping::ping(lab, ns, dst, b, count))
        .collect()
}

pub(super) fn ping_rtt(bin: &Path, quick: bool) -> Vec<Cell> {
    let sizes = ping_sizes(quick);
    let count = if quick { 10 } else { 100 };
    let mut cells = Vec::new();
    crate::say!("ping-rtt: clear veth");
    let clear = (|| {
        let mut lab = Lab::new("nvlab")?;
        let h = TwoHosts::topology(&mut lab, &HostPair::default())?;
        pings(&lab, &h.ns[0], &h.addrs[1].outer.to_string(), &sizes, count)
    })();
    let clear_medians: Vec<Option<f64>> = match &clear {
        Ok(s) => s.iter().map(|s| Some(s.median_ms)).collect(),
        Err(_) => vec![None; sizes.len()],
    };
    cells.extend(rtt_cells("clear", clear, &sizes));
    let mut paths: Vec<(String, Result<Vec<bench_ping::PingStat>>)> = Vec::new();
    for (name, pair) in netveil_paths() {
        crate::say!("ping-rtt: {name}");
        let r = (|| {
            let mut lab = Lab::new("nvlab")?.with_netveil(bin);
            let h = TwoHosts::up(&mut lab, &pair)?;
            if pair.protocol == crate::lab::Protocol::Psp {
                h.wait_psp_associated(Duration::from_secs(15))?;
            }
            pings(&lab, &h.ns[0], &h.addrs[1].inner.to_string(), &sizes, count)
        })();
        paths.push((name.to_string(), r));
    }
    crate::say!("ping-rtt: {IKE_PATH}");
    paths.push((IKE_PATH.to_string(), ike_pings(bin, &sizes, count)));
    let wg = match crate::bench::find_wireguard_go() {
        Some(wg_go) => {
            crate::say!("ping-rtt: wireguard-go");
            crate::bench::with_wireguard_go(&wg_go, |lab, h| {
                pings(lab, &h.ns[0], &h.addrs[1].inner.to_string(), &sizes, count)
            })
        }
        None => Err(super::tools::wireguard_go_missing()),
    };
    paths.push(("wireguard-go".into(), wg));
    let swan = match crate::strongswan::missing_tool() {
        None => {
            crate::say!("ping-rtt: {STRONGSWAN_PATH}");
            strongswan_pings(&sizes, count)
        }
        Some(e) => Err(e),
    };
    paths.push((STRONGSWAN_PATH.into(), swan));
    for (name, r) in paths {
        // Each path's increase over clear at each size: the study's comparison.
        let increase: Vec<Cell> = sizes
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let metric = format!("rtt increase over clear {b} B");
                let cell = match (&r, clear_medians.get(i).copied().flatten()) {
                    (Ok(stats), Some(c)) if c > 0.0 => Cell::measured(
                        "ping-rtt",
                        &name,
                        &metric,
                        "%",
                        vec![(stats[i].median_ms / c - 1.0) * 100.0],
                    ),
                    (Ok(_), _) => Cell::missing("ping-rtt", &name, &metric, "%", "no clear figure"),
                    (Err(e), _) => Cell::missing(
                        "ping-rtt",
                        &name,
                        &metric,
                        "%",
                        &format!("the path did not run: {e}"),
                    ),
                };
                // (The study's Linux-to-Linux path was StrongS/WAN's: its figure stands beside strongSwan too.)
                if name.starts_with("netveil esp") || name == STRONGSWAN_PATH {
                    cell.paper(100.0, BARE_PC_FIG8)
                } else {
                    cell
                }
            })
            .collect();
        cells.extend(rtt_cells(&name, r, &sizes));
        cells.extend(increase);
    }
    cells.extend(l2_rtt(bin, &sizes, count));
    cells
}

/// netveil's ESP tunnel with its SAs negotiated by netveil's IKEv2, beside the manually keyed one.
const IKE_PATH: &str = "netveil esp aes128gcm16 tunnel (ike)";

/// Pings through netveil's ESP tunnel keyed by its IKEv2 ([`with_ike_on`]).
fn ike_pings(bin: &Path, sizes: &[u32], count: u32) -> Result<Vec<bench_ping::PingStat>> {
    with_ike_on(bin, &HostPair::default(), |lab, h, _| {
        pings(lab, &h.ns[0], &h.addrs[1].inner.to_string(), sizes, count)
    })
}

/// The strongSwan peer's path: two charons (kernel-libipsec: ESP in user space over a TUN device, in UDP),
/// IKEv2 with a PSK, AES-GCM-128 ESP.
const STRONGSWAN_PATH: &str = "strongswan esp aes128gcm16 (libipsec)";

/// Pings through a strongSwan pair: both ends strongSwan, from one inner address to the other.
fn strongswan_pings(sizes: &[u32], count: u32) -> Result<Vec<bench_ping::PingStat>> {
    with_strongswan_on(&HostPair::default(), |lab, h, _| {
        pings(lab, &h.ns[0], &h.addrs[1].inner.to_string(), sizes, count)
    })
}

/// The L2 study's comparison: a station pinging another on a plain bridge, and the same through l2sec
/// (AES-GCM-128), with l2sec's increase over the bridge beside the study's (its Fig. 6.6).
/// ARP round trips from `ns` to `dst` over `dev` (iputils' arping: the first request broadcast, then unicast, one a
/// second): each reply's time in ms.
fn arp_rtts(lab: &Lab, ns: &str, dev: &str, dst: &str, count: u32) -> Result<Vec<f64>> {
    let c = count.to_string();
    let w = (count + 2).to_string();
    let o = lab.exec(ns, &["arping", "-c", &c, "-w", &w, "-I", dev, dst])?;
    let text = String::from_utf8_lossy(&o.stdout);
    let v = parse_arping(&text);
    if v.is_empty() {
        return Err(Error::measurement(
            "arping",
            format!(
                "no reply: {}{}",
                text.trim(),
                String::from_utf8_lossy(&o.stderr).trim()
            ),
        ));
    }
    Ok(v)
}

/// The reply times of arping's output (`Unicast reply from A [MAC]  0.532ms`).
pub(super) fn parse_arping(text: &str) -> Vec<f64> {
    text.lines()
        .filter(|l| l.contains("reply from"))
        .filter_map(|l| {
            l.split_whitespace()
                .last()?
                .strip_suffix("ms")?
                .parse()
                .ok()
        })
        .collect()
}

/// The L2 study's ARP figure for its protocol with full crypto.
const L2_FIG66_ARP: &str =
    "L2 study, Fig. 6.6: ARP RTT +100.71% over plain Ethernet, full crypto (from text)";
/// The same figure's no-crypto category (its program with the encryption, decryption and HMAC modules off).
const L2_FIG66_ARP_NULL: &str =
    "L2 study, Fig. 6.6: ARP RTT +19.23% over plain Ethernet, PSP-noENC-noHMAC (from text)";
const L2_FIG66_NULL: &str =
    "L2 study, Fig. 6.6: ICMP RTT +27.21% over plain Ethernet, PSP-noENC-noHMAC (from text)";
/// What the study puts down to its cryptography: full crypto's increase less the no-crypto one.
const L2_FIG66_CRYPTO_ARP: &str =
    "L2 study, Fig. 6.6: 81.48 points of ARP's increase from encryption and HMAC, FULL less noENC (from text)";
const L2_FIG66_CRYPTO: &str =
    "L2 study, Fig. 6.6: 89.79 points of ICMP's increase from encryption and HMAC, FULL less noENC (from text)";

/// A study's number and its source.
type Paper = (f64, &'static str);

/// The l2sec paths of `ping-rtt`: (path, suite, the study's ARP and ICMP increases with their sources).
const L2_RTT_PATHS: [(&str, &str, Paper, Paper); 2] = [
    (
        "l2sec aes128gcm",
        "aes128gcm",
        (100.71, L2_FIG66_ARP),
        (117.0, L2_FIG66),
    ),
    (
        L2SEC_NULL_PATH,
        "null-null",
        (19.23, L2_FIG66_ARP_NULL),
        (27.21, L2_FIG66_NULL),
    ),
];

fn l2_rtt(bin: &Path, sizes: &[u32], count: u32) -> Vec<Cell> {
    use crate::lan::{L2Opts, Lan};
    let arps = if count >= 100 { 20 } else { 3 };
    type Rtts = (Result<Vec<bench_ping::PingStat>>, Result<Vec<f64>>);
    let run = |suite: Option<&str>| -> Result<Rtts> {
        let mut lab = Lab::new("nvlab")?.with_netveil(bin);
        let lan = Lan::build(&mut lab, &["h1", "h2"])?;
        let _d = match suite {
            Some(s) => Some(lan.protect(&lab, &["h1", "h2"], &L2Opts::suite(s))?),
            None => None,
        };
        let (h1, h2) = (lan.station("h1")?.clone(), lan.station("h2")?.clone());
        let dst = h2.ip.to_string();
        let icmp = pings(&lab, &h1.ns, &dst, sizes, count);
        // (Protected, the station's address is on l2sec's TAP; the port carries the sealed frames.)
        let dev = if suite.is_some() {
            crate::lan::TAP
        } else {
            crate::lan::PORT
        };
        let arp = arp_rtts(&lab, &h1.ns, dev, &dst, arps);
        Ok((icmp, arp))
    };
    let split = |r: Result<Rtts>| match r {
        Ok((i, a)) => (i, a),
        Err(e) => (Err(e.clone()), Err(e)),
    };
    crate::say!("ping-rtt: plain bridge");
    let (bridge, bridge_arp) = split(run(None));
    let mut cells = Vec::new();
    let arp_cell = |path: &str, r: &Result<Vec<f64>>| match r {
        Ok(v) => Cell::measured("ping-rtt", path, "arp rtt", "ms", v.clone()),
        Err(e) => Cell::missing("ping-rtt", path, "arp rtt", "ms", &format!("{e}")),
    };
    cells.push(arp_cell("plain bridge", &bridge_arp));
    // Per l2sec path: the increases over the bridge (ARP, and ICMP per size), in %.
    let mut increases: Vec<(Option<f64>, Vec<Option<f64>>)> = Vec::new();
    let mut l2_cells = Vec::new();
    for (path, suite, (arp_paper, arp_src), (icmp_paper, icmp_src)) in L2_RTT_PATHS {
        crate::say!("ping-rtt: {path}");
        let (l2, l2_arp) = split(run(Some(suite)));
        cells.push(arp_cell(path, &l2_arp));
        let metric = "arp rtt increase over the bridge";
        let arp_inc = match (&bridge_arp, &l2_arp) {
            (Ok(b), Ok(l)) if bench_ping::median(b) > 0.0 => {
                Some((bench_ping::median(l) / bench_ping::median(b) - 1.0) * 100.0)
            }
            _ => None,
        };
        let c = match arp_inc {
            Some(v) => Cell::measured("ping-rtt", path, metric, "%", vec![v]),
            None => Cell::missing(
                "ping-rtt",
                path,
                metric,
                "%",
                "the bridge or l2sec gave no ARP figure (see their arp rtt cells)",
            ),
        };
        cells.push(c.paper(arp_paper, arp_src));
        let mut icmp_inc = Vec::new();
        for (i, size) in sizes.iter().enumerate() {
            let metric = format!("rtt increase over the bridge {size} B");
            let inc = match (&bridge, &l2) {
                (Ok(b), Ok(l)) if b[i].median_ms > 0.0 => {
                    Some((l[i].median_ms / b[i].median_ms - 1.0) * 100.0)
                }
                _ => None,
            };
            icmp_inc.push(inc);
            let cell = match inc {
                Some(v) => Cell::measured("ping-rtt", path, &metric, "%", vec![v]),
                None => Cell::missing(
                    "ping-rtt",
                    path,
                    &metric,
                    "%",
                    "the bridge or l2sec gave no figure (see their rtt cells)",
                ),
            };
            cells.push(cell.paper(icmp_paper, icmp_src));
        }
        increases.push((arp_inc, icmp_inc));
        l2_cells.push((path, l2));
    }
    // What the cryptography adds: full crypto's increase less the framing alone's, in points.
    let (full, null) = (&increases[0], &increases[1]);
    let crypto_cell = |metric: &str, a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => {
            Cell::measured("ping-rtt", L2_RTT_PATHS[0].0, metric, "points", vec![a - b])
        }
        _ => Cell::missing(
            "ping-rtt",
            L2_RTT_PATHS[0].0,
            metric,
            "points",
            "an l2sec path gave no increase (see its cells)",
        ),
    };
    cells.push(
        crypto_cell("arp rtt increase from the crypto", full.0, null.0)
            .paper(81.48, L2_FIG66_CRYPTO_ARP),
    );
    for (i, size) in sizes.iter().enumerate() {
        cells.push(
            crypto_cell(
                &format!("rtt increase from the crypto {size} B"),
                full.1[i],
                null.1[i],
            )
            .paper(89.79, L2_FIG66_CRYPTO),
        );
    }
    cells.extend(rtt_cells("plain bridge", bridge, sizes));
    for (path, l2) in l2_cells {
        cells.extend(rtt_cells(path, l2, sizes));
    }
    cells
}
