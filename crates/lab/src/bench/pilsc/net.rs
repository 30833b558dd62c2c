//! `netveil bench --pilsc`, the parts on the wire: the transfer time of a 1 MB file through PILSC at 10, 160 and
//! 1,600 rules against the same path without PILSC in the same run (the paper's Table 7: 87 ms clear, 87.5 ms at
//! 10 rules, 93.3 ms at 1,600), and the bytes each protocol adds to a packet, read from a capture (the paper's
//! Table 8: PILSC 12; IPsec 32 to 48, cited there from Alshamsi and Saito).
//!
//! Each measurement builds its own two-namespace lab (veth, no delay) and runs the `netveil` binary as the daemons;
//! the transfer is the lab's byte-checked TCP transfer ([`crate::lab::tcp_transfer`]), timed from connect to the
//! last byte verified, repeated, median with min and max.

use crate::lab::{self, Family, HostPair, Lab, Mode, Protocol, TwoHosts};
use crate::{Error, Result};
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use super::rows::PilscRow;

/// The rule counts of the transfer rows.
pub const TRANSFER_RULES: [usize; 3] = [10, 160, 1_600];

const ADDR: [&str; 2] = ["10.78.0.1", "10.78.0.2"];
const PORT: u16 = 5301;
const FILE: u64 = 1 << 20;
/// The data of each ping in the overhead capture.
pub const PING_DATA: usize = 100;

/// `n` rules for side `side` (peer: the other side): rule 1 protects the transfer's port with AES-128; the others
/// are protected rules for other hosts and ports (distinct /32 peers across many /16s, so the lookup has them all
/// to pass over), as a large rule file would hold.
fn rules(side: usize, n: usize) -> String {
    let peer = ADDR[1 - side];
    let mode = if side == 1 { "Server" } else { "Client" };
    let mut t = format!(
        "Rule = 1; Security = true; IP = {peer}; Protocol = TCP; Port = {PORT}; Encryption = 1; Applmode = {mode}; \
         Key = 0x00112233445566778899aabbccddeeff;\n"
    );
    for i in 1..n {
        let (a, b, c) = (
            ((i >> 16) & 0x3f) as u8 + 100,
            ((i >> 8) & 0xff) as u8,
            (i & 0xff) as u8,
        );
        let port = 1024 + (i % 60000);
        t += &format!(
            "Rule = {}; Security = true; IP = {a}.{b}.{c}.7; Protocol = TCP; Port = {port}; Encryption = 2; \
             Applmode = Server; Key = 0x{};\n",
            i + 1,
            "5a".repeat(32)
        );
    }
    t
}

fn pilsc_config(lab: &Lab, side: usize, n: usize, mode: &str) -> Result<String> {
    crate::demo_pilsc::pilsc_config(lab, side, &rules(side, n), mode, 20)
}

fn two_ns(prefix: &str, bin: &Path) -> Result<(Lab, [String; 2])> {
    crate::demo_pilsc::two_hosts(prefix, bin, ADDR)
}

fn stats(row: String, unit: &'static str, runs: Vec<f64>, paper: Option<f64>) -> PilscRow {
    let mut v = runs.clone();
    v.sort_by(f64::total_cmp);
    PilscRow {
        row,
        value: v.get(v.len() / 2).copied().unwrap_or(f64::NAN),
        unit,
        runs,
        paper,
    }
}

/// The paper's Table 7: the 1 MB transfer's time (ms) at `n` rules (0: the stock Linux path).
pub fn table7(n: usize) -> Option<f64> {
    match n {
        0 => Some(87.0),
        10 => Some(87.5),
        20 => Some(87.7),
        40 => Some(87.8),
        80 => Some(87.9),
        160 => Some(88.0),
        1600 => Some(93.3),
        _ => None,
    }
}

/// Transfers between two fresh namespaces, without PILSC (`pilsc` None) or through PILSC in `(mode, rules)`: for
/// each of `sizes` (bytes), one transfer first (connection setup, caches; not counted), then `reps`, each
/// byte-checked: the times in ms, per size.
pub fn transfer_times(
    bin: &Path,
    pilsc: Option<(&str, usize)>,
    sizes: &[u64],
    reps: usize,
) -> Result<Vec<Vec<f64>>> {
    let (lab, ns) = two_ns("nvpb", bin)?;
    let mut daemons = Vec::new();
    if let Some((mode, n)) = pilsc {
        for (side, name) in ns.iter().enumerate() {
            let cfg = pilsc_config(&lab, side, n, mode)?;
            daemons.push(lab.start_daemon(name, &format!("p{side}"), &cfg)?);
        }
    }
    let dst: IpAddr = ADDR[1]
        .parse()
        .map_err(|_| Error::internal(format!("{:?} is not an address", ADDR[1])))?;
    let mut out = Vec::with_capacity(sizes.len());
    for &bytes in sizes {
        lab::tcp_transfer(&ns[0], &ns[1], dst, PORT, bytes)?;
        let mut ms = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = lab::tcp_transfer(&ns[0], &ns[1], dst, PORT, bytes)?;
            if t.bytes != bytes {
                return Err(Error::measurement(
                    "pilsc transfer",
                    format!("{} of {bytes} bytes", t.bytes),
                ));
            }
            ms.push(t.seconds * 1e3);
        }
        out.push(ms);
    }
    drop(daemons);
    Ok(out)
}

/// 1 MB transfers, `reps` each: without PILSC, then with PILSC at each rule count of `counts`.
pub fn transfer_rows(bin: &Path, counts: &[usize], reps: usize) -> Result<Vec<PilscRow>> {
    let mut rows = Vec::new();
    for &n in std::iter::once(&0).chain(counts) {
        let pilsc = (n > 0).then_some(("authenticated", n));
        let ms = transfer_times(bin, pilsc, &[FILE], reps)?
            .pop()
            .unwrap_or_default();
        let name = if n == 0 {
            "pilsc transfer 1MB without pilsc".to_string()
        } else {
            format!("pilsc transfer 1MB {n} rules")
        };
        rows.push(stats(name, "ms", ms, table7(n)));
    }
    Ok(rows)
}

/// The IPv4 packets of an Ethernet capture.
fn ip_packets(path: &Path) -> Result<Vec<Vec<u8>>> {
    let p = netveil_pcap::read_file(path).map_err(Error::file(path))?;
    Ok(p.records
        .iter()
        .filter_map(|r| netveil_pcap::split_frame(p.link, &r.data))
        .map(|f| f.ip.to_vec())
        .filter(|ip| ip.first().is_some_and(|b| b >> 4 == 4)) // check-ip-offsets: allow (a capture's version)
        .collect())
}

/// Pings of [`PING_DATA`] bytes from side 0 to `dst` while side 1's veth is captured; the bytes each IPv4 packet
/// from side 0 has beyond the clear ping's 128 (median over the packets).
pub fn ping_overhead(
    lab: &Lab,
    ns: &[String; 2],
    src: IpAddr,
    dst: &str,
    proto: u8,
) -> Result<f64> {
    let mut cap = lab.capture(&ns[1], "veth-b", "overhead.pcap", 2000, &["ip"])?;
    let size = PING_DATA.to_string();
    lab.exec_ok(
        &ns[0],
        &[
            "ping", "-n", "-c", "5", "-i", "0.05", "-s", &size, "-W", "1", dst,
        ],
    )?;
    std::thread::sleep(Duration::from_millis(100));
    let path = cap.stop()?;
    let clear = (20 + 8 + PING_DATA) as f64;
    let mut v: Vec<f64> = ip_packets(&path)?
        .iter()
        .filter_map(|ip| {
            let w = netveil_wire::ipv4::Packet::new_checked(&ip[..]).ok()?;
            (w.protocol() == proto && IpAddr::V4(w.src_addr()) == src)
                .then(|| w.total_len() as f64 - clear)
        })
        .collect();
    if v.is_empty() {
        return Err(Error::measurement(
            "ping overhead",
            format!("no packet of protocol {proto} captured"),
        ));
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

/// Bytes added per packet: PILSC in both modes, ESP and ESP+AH in tunnel and transport mode (AES-128-CBC with
/// HMAC-SHA1-96 and AH HMAC-SHA1-96, the algorithms of the IPsec figures the paper cites).
pub fn overhead_rows(bin: &Path) -> Result<Vec<PilscRow>> {
    let mut rows = Vec::new();
    for (mode, paper) in [("confidential", Some(12.0)), ("authenticated", None)] {
        let (lab, ns) = two_ns("nvpo", bin)?;
        // ICMP protected by every rule file: one more rule for ICMP to the peer.
        let mut ds = Vec::new();
        for (side, name) in ns.iter().enumerate() {
            let cfg = pilsc_config(&lab, side, 1, mode)?;
            let path = lab.dir().join(format!("pilsc-{side}.rules"));
            let mut r = std::fs::read_to_string(&path).map_err(Error::io("rules"))?;
            r += &format!(
                "Rule = 99; Security = true; IP = {}; Protocol = ICMP; Encryption = 1; Key = 0x{};\n",
                ADDR[1 - side],
                "3c".repeat(16)
            );
            std::fs::write(&path, r).map_err(Error::io("rules"))?;
            ds.push(lab.start_daemon(name, &format!("p{side}"), &cfg)?);
        }
        let src: IpAddr = ADDR[0]
            .parse()
            .map_err(|_| Error::internal(format!("{:?} is not an address", ADDR[0])))?;
        let o = ping_overhead(&lab, &ns, src, ADDR[1], 1)?;
        rows.push(stats(
            format!("pilsc overhead {mode}"),
            "B/packet",
            vec![o],
            paper,
        ));
    }
    // (row, mode, AH bundled, the outermost protocol, the paper's bytes)
    type Case = (&'static str, Mode, Option<&'static str>, u8, Option<f64>);
    let cases: [Case; 4] = [
        ("esp tunnel", Mode::Tunnel, None, 50, Some(32.0)),
        ("esp+ah tunnel", Mode::Tunnel, Some("sha1"), 51, Some(44.0)),
        ("esp transport", Mode::Transport, None, 50, Some(36.0)),
        (
            "esp+ah transport",
            Mode::Transport,
            Some("sha1"),
            51,
            Some(48.0),
        ),
    ];
    for (name, mode, ah, proto, paper) in cases {
        let mut lab = Lab::new("nvpi")?.with_netveil(bin);
        let pair = HostPair {
            suite: "aes128-sha1".into(),
            protocol: Protocol::Esp,
            mode,
            outer: Family::V4,
            inner: Family::V4,
            bundle_ah: ah.map(str::to_string),
            ..HostPair::esp("aes128-sha1")
        };
        let h = TwoHosts::up(&mut lab, &pair)?;
        let ns = [h.ns[0].clone(), h.ns[1].clone()];
        let dst = h.addrs[1].inner.to_string();
        let o = ping_overhead(&lab, &ns, h.addrs[0].outer, &dst, proto)?;
        rows.push(stats(
            format!(
                "{name} overhead aes128-sha1{}",
                if ah.is_some() { " + ah sha1" } else { "" }
            ),
            "B/packet",
            vec![o],
            paper,
        ));
        drop(h);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_rule_file_loads_with_its_count_and_the_transfer_rule_first() {
        for n in [1, 10, 1600] {
            for side in 0..2 {
                let f = netveil_pilsc::rules::parse(&rules(side, n)).unwrap();
                assert_eq!(f.rules.len(), n);
                assert_eq!(f.duplicates.len(), 0);
                assert!(f
                    .rules
                    .iter()
                    .any(|r| r.number == 1 && r.port.is_some_and(|(p, _)| p.contains(PORT))));
            }
        }
    }

    #[test]
    fn rows_render_with_the_paper_beside() {
        let r = stats(
            "pilsc transfer 1MB 10 rules".into(),
            "ms",
            vec![3.0, 1.0, 2.0],
            Some(87.5),
        );
        assert_eq!(r.value, 2.0);
        let t = crate::bench::pilsc::rows::render(&[r]);
        assert!(
            t.contains("pilsc transfer 1MB 10 rules") && t.contains("87.5"),
            "{t}"
        );
    }
}
