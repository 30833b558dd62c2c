//! `netveil bench --pilsc`, its in-process part: PILSC's per-packet classification time at 10, 160, 1,600 and
//! 100,000 rules (rows `pilsc lookup N rules`, ns per packet: as the engine classifies, with its flow cache), the
//! same packets through the policy database alone (`pilsc lookup_uncached N rules`: what a flow's first packet
//! pays, a cache miss) and through the linear scan of the same database (`pilsc lookup_linear N rules`), the model
//! the flat lookup replaces, in the same run.
//!
//! What one packet costs, as the daemon's engine classifies the host's own packets: its flow key read from the
//! packet ([`netveil_wire::ip::flow_key`]), broadcast and multicast passed, the policy lookup in the rule file's
//! compiled database ([`netveil_pilsc::policy::compile`]) in the packet's direction, behind the engine's flow cache
//! ([`netveil_sa::flow_cache::CachedPolicy`], 8,192 flows), which answers with the rule and, for a protected packet,
//! its key in the key table ([`netveil_pilsc::table::Table`]). No crypto: the lookup is what grows with rules.
//!
//! The rule files are random and realistic: a deterministic generator (a fixed seed per size, so every run measures
//! the same files) draws peers, mostly hosts (/32: 80%) with /24, /16 and /8 networks (the first four rules have
//! one of each length, so that every size probes the same four prefix lengths: what grows is the tables alone;
//! wide networks stay few, as in real files: at most 8 /8 and 256 /16 networks), at most three rules per peer
//! network, TCP and UDP with a port or a range (ours or the peer's), ICMP and any; 4 of 5
//! protected under one of 8 named keys (AES-128 or ChaCha20). The packets: 4,096 distinct ones, half outbound and
//! half inbound, 85% to or from a rule's peer (an address in its prefix, its protocol, a port in its range), the
//! rest anywhere; each measurement runs over all of them again and again, after one pass: so the cached row is a
//! packet of a known flow among 4,096 (the cache's lines are the same at every size), and the uncached row reads the
//! rule tables of a random flow every time (at 100,000 rules they outgrow the CPU's caches).

use std::collections::{HashMap, HashSet};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use ipnet::Ipv4Net;
use netveil_pilsc::packet::Mode;
use netveil_pilsc::policy::file_rule;
use netveil_pilsc::rules::{self, Keys, RuleFile};
use netveil_pilsc::table::{Settings, Table};
use netveil_sa::flow_cache::CachedPolicy;
use netveil_sa::policy::{Action, Direction, FlowKey};
use netveil_wire::{ipv4, tcp, udp};

use super::rows::PilscRow;
use crate::{Error, Result};

/// The rule counts of the lookup rows.
pub const LOOKUP_SIZES: [usize; 4] = [10, 160, 1_600, 100_000];

/// How much to measure.
#[derive(Debug, Clone, Copy)]
pub struct Effort {
    /// Distinct packets.
    pub packets: usize,
    /// Classifications per run of the flat lookup (the packets over and over).
    pub lookups: usize,
    /// Rule checks per run of the linear scan (its lookups: this over the rules, at least `packets`/16).
    pub linear_checks: usize,
    /// Runs per row (the row is their median).
    pub runs: usize,
}

impl Effort {
    pub const FULL: Effort = Effort {
        packets: 4096,
        lookups: 4_000_000,
        linear_checks: 100_000_000,
        runs: 7,
    };
    /// For tests and CI: a few thousand lookups.
    pub const QUICK: Effort = Effort {
        packets: 256,
        lookups: 2048,
        linear_checks: 400_000,
        runs: 1,
    };
}

/// SplitMix64: a fixed, reproducible sequence for the rule files and packets (not for anything secret).
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What a generated rule selects (to aim packets at it).
#[derive(Debug, Clone, Copy)]
struct Aim {
    peer: Ipv4Net,
    /// 6, 17, 1, or 0 for any.
    proto: u8,
    /// The port range and whether it is ours (Server).
    port: Option<(u16, u16, bool)>,
}

const KEYS: usize = 8;

/// The key file of the generated rule files: `k0` to `k3` AES-128, `k4` to `k7` ChaCha20.
fn key_file() -> String {
    let mut m = Mix(0x6b65_7973);
    (0..KEYS)
        .map(|j| {
            let len = if j < KEYS / 2 { 16 } else { 32 };
            let hex: String = (0..len).map(|_| format!("{:02x}", m.below(256))).collect();
            format!("k{j} = 0x{hex}\n")
        })
        .collect()
}

/// The most peer networks of a prefix length in a generated file: a few /8 and some hundred /16.
fn max_nets(len: u8) -> usize {
    match len {
        0..=8 => 8,
        9..=16 => 256,
        _ => usize::MAX,
    }
}

/// A random, realistic rule file of `n` rules (see the module documentation) and what each rule selects.
fn rule_file(n: usize) -> (String, Vec<Aim>) {
    let mut m = Mix(0x7069_6c73 ^ n as u64);
    let mut per_net: HashMap<Ipv4Net, u8> = HashMap::new();
    let mut nets: HashMap<u8, usize> = HashMap::new();
    let mut selectors = HashSet::new();
    let mut text = String::new();
    let mut aims = Vec::with_capacity(n);
    while aims.len() < n {
        let forced = [32u8, 24, 16, 8].get(aims.len()).copied();
        let mut len = forced.unwrap_or(match m.below(100) {
            0..80 => 32,
            80..95 => 24,
            95..99 => 16,
            _ => 8,
        });
        // A peer network with room for another rule; wide prefixes stay few, as in real files (then a host).
        let mut tries = 0;
        let peer = loop {
            let a = Ipv4Addr::from(m.next() as u32);
            let net = Ipv4Net::new(a, len).expect("length at most 32").trunc();
            let rules_of_net = per_net.get(&net).copied().unwrap_or(0);
            let nets_of_len = nets.get(&len).copied().unwrap_or(0);
            if rules_of_net < 3 && (rules_of_net > 0 || nets_of_len < max_nets(len)) {
                break net;
            }
            tries += 1;
            if tries > 16 {
                len = 32;
            }
        };
        let (proto, name) = match m.below(10) {
            0..4 => (6, "TCP"),
            4..7 => (17, "UDP"),
            7 => (1, "ICMP"),
            _ => (0, "any"),
        };
        let port = (proto != 0 && proto != 1 && m.below(10) < 7).then(|| {
            let lo = [22u16, 53, 80, 443, 500, 1024, 3306, 5060, 8080][m.below(9) as usize];
            let hi = if m.below(3) == 0 {
                lo.saturating_add(m.below(1000) as u16)
            } else {
                lo
            };
            (lo, hi, m.below(2) == 0)
        });
        if !selectors.insert((peer, proto, port)) {
            continue;
        }
        let count = per_net.entry(peer).or_default();
        if *count == 0 {
            *nets.entry(peer.prefix_len()).or_default() += 1;
        }
        *count += 1;
        let number = aims.len() + 1;
        // The protection follows the peer, so that two rules of one peer never conflict.
        let h = u32::from(peer.network()).wrapping_mul(0x9e37_79b1) ^ u32::from(peer.prefix_len());
        let secure = h % 5 != 0;
        text += &format!("Rule = {number}; Security = {secure}; IP = {peer}; Protocol = {name};");
        if let Some((lo, hi, server)) = port {
            let mode = if server { "Server" } else { "Client" };
            text += &format!(" Port = {lo}-{hi}; Applmode = {mode};");
        }
        if secure {
            let k = (h >> 8) as usize % KEYS;
            let cipher = if k < KEYS / 2 { "AES-128" } else { "ChaCha20" };
            text += &format!(" Encryption = {cipher}; Key = k{k};");
        }
        text.push('\n');
        aims.push(Aim { peer, proto, port });
    }
    (text, aims)
}

/// Our address in the packets.
const US: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
/// Room for the longest packet made: an IPv4 header and a TCP header.
const PACKET_ROOM: usize = ipv4::MIN_HEADER_LEN + tcp::MIN_HEADER_LEN;

/// A distinct packet: its direction, bytes and length.
type TestPacket = (Direction, [u8; PACKET_ROOM], usize);

/// One packet between us and `peer`: the IPv4 header and the transport header's start (TCP, UDP; ICMP and the
/// rest: 8 bytes).
fn packet(dir: Direction, peer: Ipv4Addr, proto: u8, ours: u16, theirs: u16) -> TestPacket {
    let (src, dst, sp, dp) = match dir {
        Direction::Out => (US, peer, ours, theirs),
        Direction::In => (peer, US, theirs, ours),
    };
    let l4 = match proto {
        6 => tcp::MIN_HEADER_LEN,
        _ => udp::HEADER_LEN,
    };
    let len = ipv4::MIN_HEADER_LEN + l4;
    let mut buf = [0u8; PACKET_ROOM];
    let mut ip = ipv4::Packet::new_unchecked(&mut buf[..len]);
    ip.set_version(4);
    ip.set_header_len(ipv4::MIN_HEADER_LEN);
    ip.set_total_len(len as u16);
    ip.set_ttl(64);
    ip.set_protocol(proto);
    ip.set_src_addr(src);
    ip.set_dst_addr(dst);
    ip.fill_checksum();
    match proto {
        6 => {
            let mut t = tcp::Packet::new_unchecked(ip.payload_mut());
            t.set_src_port(sp);
            t.set_dst_port(dp);
        }
        17 => {
            let mut u = udp::Packet::new_unchecked(ip.payload_mut());
            u.set_src_port(sp);
            u.set_dst_port(dp);
            u.set_len(udp::HEADER_LEN as u16);
        }
        _ => {}
    }
    (dir, buf, len)
}

/// `count` distinct packets, most aimed at the rules (see the module documentation).
fn packets(aims: &[Aim], count: usize, seed: u64) -> Vec<TestPacket> {
    let mut m = Mix(seed);
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let dir = if out.len() % 2 == 0 {
            Direction::Out
        } else {
            Direction::In
        };
        let p = if m.below(100) < 85 {
            let a = aims[m.below(aims.len() as u64) as usize];
            let host_bits = u32::MAX
                .checked_shr(u32::from(a.peer.prefix_len()))
                .unwrap_or(0);
            let peer = Ipv4Addr::from(u32::from(a.peer.network()) | (m.next() as u32 & host_bits));
            let proto = match a.proto {
                0 => [6u8, 17, 1][m.below(3) as usize],
                p => p,
            };
            let (mut ours, mut theirs) =
                (1024 + m.below(60000) as u16, 1024 + m.below(60000) as u16);
            if let Some((lo, hi, server)) = a.port {
                let port = lo + m.below(u64::from(hi - lo) + 1) as u16;
                if server {
                    ours = port;
                } else {
                    theirs = port;
                }
            }
            packet(dir, peer, proto, ours, theirs)
        } else {
            let proto = [6u8, 17, 1][m.below(3) as usize];
            let peer = Ipv4Addr::from(m.next() as u32);
            packet(dir, peer, proto, m.next() as u16, m.next() as u16)
        };
        if seen.insert((p.0, p.1)) {
            out.push(p);
        }
    }
    out
}

/// What the engine does with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not ours to protect (no rule, `Security = false`, broadcast, multicast, not IPv4).
    Pass,
    /// Under rule `rule` of the rule file, with key `key` of the key table.
    Protect { rule: usize, key: usize },
    /// A protected rule without a key: dropped.
    Discard,
    /// Headers that do not parse.
    Malformed,
}

/// A rule file compiled as the engine holds it: a protected rule's action names its key; the flow cache in front.
pub struct Classifier {
    db: CachedPolicy,
}

/// The key table of a rule file as the engine builds it (authenticated mode).
fn key_table(file: &RuleFile, keys: &Keys) -> Result<Table> {
    let settings = Settings {
        mode: Mode::Authenticated,
        window: 1024,
        max_sources: 16,
    };
    Table::build(file, keys, &settings, |_, _, _| (0, u64::MAX))
        .map_err(|e| Error::internal(format!("the generated rule file's keys: {e}")))
}

impl Classifier {
    pub fn new(file: &RuleFile, keys: &Keys) -> Result<Classifier> {
        let table = key_table(file, keys)?;
        Ok(Classifier {
            db: CachedPolicy::new(netveil_pilsc::policy::compile(file, &table.rule_key)),
        })
    }

    fn verdict(&self, (at, action): (Option<usize>, Action)) -> Verdict {
        match (at, action) {
            (Some(at), Action::Protect(key)) => Verdict::Protect {
                rule: file_rule(at),
                key,
            },
            (_, Action::Discard) => Verdict::Discard,
            _ => Verdict::Pass,
        }
    }

    /// The flow key of a packet of ours, `None` for what passes untouched (not IPv4, broadcast, multicast) and
    /// `Some(Err)` for a packet that does not parse.
    fn flow(packet: &[u8]) -> Option<std::result::Result<FlowKey, ()>> {
        let f = match netveil_wire::ip::flow_key(packet) {
            Ok(f) => f,
            Err(_) => return Some(Err(())),
        };
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (f.src, f.dst) else {
            return None;
        };
        if dst.is_broadcast() || dst.is_multicast() || src.is_multicast() {
            return None;
        }
        Some(Ok(FlowKey {
            src: f.src,
            dst: f.dst,
            proto: f.proto,
            src_port: f.src_port,
            dst_port: f.dst_port,
        }))
    }

    /// What the engine does per packet: the flow cache, and the flat lookup on a miss.
    pub fn classify(&mut self, dir: Direction, packet: &[u8]) -> Verdict {
        match Self::flow(packet) {
            None => Verdict::Pass,
            Some(Err(())) => Verdict::Malformed,
            Some(Ok(k)) => {
                let answer = self.db.lookup(dir, &k);
                self.verdict(answer)
            }
        }
    }

    /// The same through the flat lookup alone (a flow's first packet, without the cache probe).
    pub fn classify_uncached(&self, dir: Direction, packet: &[u8]) -> Verdict {
        match Self::flow(packet) {
            None => Verdict::Pass,
            Some(Err(())) => Verdict::Malformed,
            Some(Ok(k)) => self.verdict(self.db.db().lookup(dir, &k)),
        }
    }

    /// The same through the linear scan.
    pub fn classify_linear(&self, dir: Direction, packet: &[u8]) -> Verdict {
        match Self::flow(packet) {
            None => Verdict::Pass,
            Some(Err(())) => Verdict::Malformed,
            Some(Ok(k)) => self.verdict(self.db.db().lookup_linear(dir, &k)),
        }
    }
}

/// Nanoseconds per packet of `classify` over `lookups` classifications of `packets` (after one warm-up pass).
fn time_per_packet(
    packets: &[TestPacket],
    lookups: usize,
    mut classify: impl FnMut(Direction, &[u8]) -> Verdict,
) -> f64 {
    let mut pass = |n: usize| {
        let mut protected = 0usize;
        for (dir, buf, len) in packets.iter().cycle().take(n) {
            if matches!(
                classify(*dir, black_box(&buf[..*len])),
                Verdict::Protect { .. }
            ) {
                protected += 1;
            }
        }
        black_box(protected)
    };
    pass(packets.len());
    let t = Instant::now();
    pass(lookups);
    t.elapsed().as_nanos() as f64 / lookups.max(1) as f64
}

fn median(v: &[f64]) -> f64 {
    crate::bench::ping::median(v)
}

/// The lookup rows at `sizes`: cached, uncached and linear; every run of every size takes its turn before the next run (so
/// that a slower moment of the machine falls on all sizes alike).
pub fn lookup_rows(sizes: &[usize], e: Effort) -> Result<Vec<PilscRow>> {
    let keys = Keys::parse(&key_file())
        .map_err(|err| Error::internal(format!("the generated key file: {err}")))?;
    let mut setups = Vec::new();
    for &n in sizes {
        let (text, aims) = rule_file(n);
        let file = rules::parse(&text).map_err(|err| {
            Error::internal(format!("the generated rule file of {n} rules: {err}"))
        })?;
        if file.rules.len() != n {
            return Err(Error::internal(format!(
                "the generated rule file of {n} rules loaded {} rules",
                file.rules.len()
            )));
        }
        let mut c = Classifier::new(&file, &keys)?;
        let p = packets(&aims, e.packets, 0x7061_636b ^ n as u64);
        // The cached and the flat lookup are the linear scan's answer, packet by packet (twice: a miss, then a hit).
        for _ in 0..2 {
            for (dir, buf, len) in &p {
                let (a, u, b) = (
                    c.classify(*dir, &buf[..*len]),
                    c.classify_uncached(*dir, &buf[..*len]),
                    c.classify_linear(*dir, &buf[..*len]),
                );
                if a != b || u != b {
                    return Err(Error::measurement(
                        format!("{n} rules"),
                        format!("the cached lookup says {a:?}, the flat lookup {u:?}, the linear scan {b:?}"),
                    ));
                }
            }
        }
        setups.push((n, c, p));
    }
    let mut cached = vec![Vec::new(); sizes.len()];
    let mut flat = vec![Vec::new(); sizes.len()];
    let mut linear = vec![Vec::new(); sizes.len()];
    for _ in 0..e.runs.max(1) {
        for (i, (n, c, p)) in setups.iter_mut().enumerate() {
            cached[i].push(time_per_packet(p, e.lookups, |d, b| c.classify(d, b)));
            flat[i].push(time_per_packet(p, e.lookups, |d, b| {
                c.classify_uncached(d, b)
            }));
            let lookups = (e.linear_checks / (2 * *n))
                .clamp(p.len() / 16, e.lookups)
                .max(1);
            linear[i].push(time_per_packet(p, lookups, |d, b| c.classify_linear(d, b)));
        }
    }
    let mut rows = Vec::new();
    for (i, n) in sizes.iter().enumerate() {
        for (name, runs) in [
            ("lookup", &cached[i]),
            ("lookup_uncached", &flat[i]),
            ("lookup_linear", &linear[i]),
        ] {
            rows.push(PilscRow {
                row: format!("pilsc {name} {n} rules"),
                value: median(runs),
                unit: "ns",
                runs: runs.clone(),
                paper: None,
            });
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::pilsc::rows::{goal, render};

    #[test]
    fn the_rows_exist_and_are_positive() {
        let rows = lookup_rows(&LOOKUP_SIZES, Effort::QUICK).unwrap();
        for n in LOOKUP_SIZES {
            for name in ["lookup", "lookup_uncached", "lookup_linear"] {
                let row = format!("pilsc {name} {n} rules");
                let r = rows
                    .iter()
                    .find(|r| r.row == row)
                    .unwrap_or_else(|| panic!("{row}"));
                assert_eq!(r.unit, "ns");
                assert!(r.value.is_finite() && r.value > 0.0, "{row}: {}", r.value);
            }
        }
        assert!(goal(&rows).is_some());
        assert_eq!(render(&rows).lines().count(), 1 + rows.len());
    }

    /// The generated files: the asked number of rules, all four prefix lengths at every size, most packets under
    /// a rule and some protected, and the classifier's answers those of a plain reading of the rules.
    #[test]
    fn rule_files_and_packets_are_what_the_rows_say() {
        let keys = Keys::parse(&key_file()).unwrap();
        for n in [10, 160] {
            let (text, aims) = rule_file(n);
            let file = rules::parse(&text).unwrap();
            assert_eq!(file.rules.len(), n);
            let lens: HashSet<u8> = file.rules.iter().map(|r| r.peer.prefix_len()).collect();
            assert_eq!(lens, HashSet::from([32, 24, 16, 8]), "{n}");
            let mut c = Classifier::new(&file, &keys).unwrap();
            let table = key_table(&file, &keys).unwrap();
            let p = packets(&aims, 512, 1);
            let mut protected = 0;
            for (dir, buf, len) in &p {
                let v = c.classify(*dir, &buf[..*len]);
                if let Verdict::Protect { rule, key } = v {
                    protected += 1;
                    // The rule selects the packet's peer, and its key is the table's.
                    let k = netveil_wire::ip::flow_key(&buf[..*len]).unwrap();
                    let peer = if *dir == Direction::Out { k.dst } else { k.src };
                    let IpAddr::V4(peer) = peer else { panic!() };
                    assert!(file.rules[rule].peer.contains(&peer));
                    assert_eq!(table.rule_key[rule], Some(key));
                }
                assert_ne!(v, Verdict::Malformed);
            }
            assert!(protected > p.len() / 4, "{n}: {protected} of {}", p.len());
        }
        // Broadcast and multicast pass whatever the rules.
        let (text, _) = rule_file(10);
        let mut c = Classifier::new(&rules::parse(&text).unwrap(), &keys).unwrap();
        for dst in [Ipv4Addr::BROADCAST, Ipv4Addr::new(224, 0, 0, 251)] {
            let (d, b, l) = packet(Direction::Out, dst, 17, 5353, 5353);
            assert_eq!(c.classify(d, &b[..l]), Verdict::Pass);
        }
    }
}
