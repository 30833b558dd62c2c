//! Behaviour tests of the ESP/AH transforms: round trips for every suite, mode, address family, ESN and UDP
//! encapsulation; AH mutable fields; single-bit tampering; anti-replay; sequence exhaustion; lifetimes; TFC padding;
//! truncated input.

use netveil_crypto::rand::OsRng;
use netveil_ipsec::bundle::{self, InIdx, OutIdx, Sad, Unprotected};
use netveil_ipsec::sa::{Direction, Suite};
use netveil_ipsec::suite::{AhSuite, EspSuite};
use netveil_ipsec::{esp, Drop as D, InboundSa, Mode, OutboundSa, SaParams, UdpEncap};
use netveil_sa::lifetime::{Lifetime, Limits};
use netveil_wire::PacketBuf;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::Ordering::Relaxed;

const NOW: u64 = 1000;

/// A change to a protected packet.
type Mutation = dyn Fn(&mut Vec<u8>);
const NAT_T: u16 = 4500;

const ESP_SUITES: [&str; 18] = [
    "aes128gcm16",
    "aes192gcm16",
    "aes256gcm16",
    "aes128gcm12",
    "aes256gcm8",
    "chacha20poly1305",
    "aes128gmac",
    "aes256gmac",
    "aes128-sha1",
    "aes256-sha256",
    "aes128-sha384",
    "aes256-sha512",
    "aes192-sha256",
    "3des-sha1",
    "3des-md5",
    "null-sha1",
    "null-sha256",
    "null-null",
];
const AH_SUITES: [&str; 5] = ["sha1", "md5", "sha256", "sha384", "sha512"];

// ---------------------------------------------------------------------------------------------------------------
// Packet building

fn csum(data: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        s += u32::from(w);
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

const IN4_SRC: [u8; 4] = [10, 0, 0, 1];
const IN4_DST: [u8; 4] = [10, 0, 1, 2];
const IN6_SRC: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const IN6_DST: [u8; 16] = [0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const OUT4_L: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const OUT4_R: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const OUT6_L: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const OUT6_R: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

/// A marker that must never be visible after a failed decapsulation of an encrypting suite.
const MARKER: &[u8] = b"SECRET-PLAINTEXT";

/// Upper-layer segment: TCP (6), UDP (17) or ICMP (1 / 58) header followed by `size` bytes of data.
fn l4(proto: u8, size: usize) -> Vec<u8> {
    let data: Vec<u8> = if size >= MARKER.len() {
        let mut d = MARKER.to_vec();
        d.extend((MARKER.len()..size).map(|i| (i * 31 + 7) as u8));
        d
    } else {
        (0..size).map(|i| (i * 31 + 7) as u8).collect()
    };
    let mut v = match proto {
        6 => vec![
            0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0x12, 0x34, 0,
            0,
        ],
        17 => {
            let l = (8 + size) as u16;
            let mut h = vec![0x13, 0x88, 0x00, 0x35];
            h.extend_from_slice(&l.to_be_bytes());
            h.extend_from_slice(&[0xab, 0xcd]);
            h
        }
        _ => vec![if proto == 58 { 128 } else { 8 }, 0, 0, 0, 0x12, 0x34, 0, 1],
    };
    v.extend_from_slice(&data);
    if proto == 1 {
        let c = csum(&v);
        v[2..4].copy_from_slice(&c.to_be_bytes());
    }
    v
}

/// Recomputes the IPv4 header checksum after a change.
fn fix_v4(w: &mut [u8]) {
    let ihl = (w[0] & 15) as usize * 4;
    w[10] = 0;
    w[11] = 0;
    let c = csum(&w[..ihl]);
    w[10..12].copy_from_slice(&c.to_be_bytes());
}

fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, opts: &[u8], payload: &[u8]) -> Vec<u8> {
    assert_eq!(opts.len() % 4, 0);
    let ihl = 20 + opts.len();
    let total = ihl + payload.len();
    let mut p = vec![
        0x40 | (ihl / 4) as u8,
        0x28,
        (total >> 8) as u8,
        total as u8,
        0x12,
        0x34,
        0x40,
        0,
        63,
        proto,
        0,
        0,
    ];
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(opts);
    let c = csum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// IPv6 packet; `rest` = extension headers (if any) and payload, `nh` the first next header.
fn ipv6(src: [u8; 16], dst: [u8; 16], nh: u8, rest: &[u8]) -> Vec<u8> {
    let mut p = vec![0x6a, 0xb1, 0x23, 0x45];
    p.extend_from_slice(&(rest.len() as u16).to_be_bytes());
    p.push(nh);
    p.push(61);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(rest);
    p
}

/// Hop-by-Hop (PadN) then Destination Options (PadN) then the upper layer.
fn v6_ext(proto: u8, payload: &[u8]) -> (u8, Vec<u8>) {
    let mut r = vec![60, 0, 1, 4, 0, 0, 0, 0];
    r.extend_from_slice(&[proto, 0, 1, 4, 0, 0, 0, 0]);
    r.extend_from_slice(payload);
    (0, r)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Tun44,
    Tun66,
    /// IPv4 inside IPv6.
    Tun46,
    /// IPv6 inside IPv4.
    Tun64,
    Tr4,
    Tr6,
    Tr6Ext,
}
const CASES: [Case; 7] = [
    Case::Tun44,
    Case::Tun66,
    Case::Tun46,
    Case::Tun64,
    Case::Tr4,
    Case::Tr6,
    Case::Tr6Ext,
];

impl Case {
    fn inner_v6(self) -> bool {
        matches!(self, Case::Tun66 | Case::Tun64 | Case::Tr6 | Case::Tr6Ext)
    }
    fn outer_v6(self) -> bool {
        matches!(self, Case::Tun66 | Case::Tun46 | Case::Tr6 | Case::Tr6Ext)
    }
    fn tunnel(self) -> bool {
        matches!(self, Case::Tun44 | Case::Tun66 | Case::Tun46 | Case::Tun64)
    }
    fn mode(self) -> Mode {
        if !self.tunnel() {
            Mode::Transport
        } else if self.outer_v6() {
            Mode::Tunnel {
                local: IpAddr::V6(OUT6_L),
                remote: IpAddr::V6(OUT6_R),
            }
        } else {
            Mode::Tunnel {
                local: IpAddr::V4(OUT4_L),
                remote: IpAddr::V4(OUT4_R),
            }
        }
    }
    /// A packet of this case's inner family with upper layer `proto` (6, 17, or 1 = ICMP / ICMPv6) and `size`.
    fn packet(self, proto: u8, size: usize) -> Vec<u8> {
        if self.inner_v6() {
            let proto = if proto == 1 { 58 } else { proto };
            let seg = l4(proto, size);
            let (src, dst) = if self.tunnel() {
                (IN6_SRC, IN6_DST)
            } else {
                (OUT6_L.octets(), OUT6_R.octets())
            };
            if self == Case::Tr6Ext {
                let (nh, rest) = v6_ext(proto, &seg);
                ipv6(src, dst, nh, &rest)
            } else {
                ipv6(src, dst, proto, &seg)
            }
        } else {
            let (src, dst) = if self.tunnel() {
                (IN4_SRC, IN4_DST)
            } else {
                (OUT4_L.octets(), OUT4_R.octets())
            };
            ipv4(src, dst, proto, &[], &l4(proto, size))
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// SAs

#[derive(Clone)]
struct Cfg {
    suite: Suite,
    mode: Mode,
    esn: bool,
    encap: bool,
    window: u32,
    first_seq: u64,
    tfc: u16,
    life_out: Lifetime,
    life_in: Lifetime,
    spi: u32,
}

fn esp_suite(name: &str) -> Suite {
    Suite::Esp(EspSuite::parse(name, true).unwrap())
}
fn ah_suite(name: &str) -> Suite {
    Suite::Ah(AhSuite::parse(name).unwrap())
}

impl Cfg {
    fn new(suite: Suite, mode: Mode) -> Cfg {
        Cfg {
            suite,
            mode,
            esn: false,
            encap: false,
            window: 64,
            first_seq: 1,
            tfc: 0,
            life_out: Lifetime::default(),
            life_in: Lifetime::default(),
            spi: 0xc0ff_ee01,
        }
    }
    fn esn(mut self, esn: bool) -> Cfg {
        self.esn = esn;
        self
    }
    fn encap(mut self, encap: bool) -> Cfg {
        self.encap = encap;
        self
    }
    fn params(&self, dir: Direction) -> SaParams {
        let (enc_len, auth_len) = match self.suite {
            Suite::Esp(s) => (s.enc.key_len(), s.integ.map_or(0, |i| i.key_len())),
            Suite::Ah(s) => (0, s.integ.key_len()),
        };
        let mode = match (self.mode, dir) {
            (Mode::Tunnel { local, remote }, Direction::In) => Mode::Tunnel {
                local: remote,
                remote: local,
            },
            (m, _) => m,
        };
        SaParams {
            name: format!("{:?}", self.suite),
            spi: self.spi,
            direction: dir,
            suite: self.suite,
            mode,
            enc_key: zeroize::Zeroizing::new((0..enc_len).map(|i| (i * 7 + 3) as u8).collect()),
            auth_key: zeroize::Zeroizing::new((0..auth_len).map(|i| (i * 13 + 1) as u8).collect()),
            esn: self.esn,
            replay_window: self.window,
            lifetime: if dir == Direction::Out {
                self.life_out
            } else {
                self.life_in
            },
            encap: self.encap.then_some(UdpEncap {
                local_port: NAT_T,
                remote_port: NAT_T,
            }),
            tfc_pad_to: self.tfc,
            first_seq: if dir == Direction::Out {
                self.first_seq
            } else {
                1
            },
        }
    }
    /// Adds the outbound and inbound SA to `sad`; returns (out, in) indices.
    fn add(&self, sad: &mut Sad) -> (OutIdx, InIdx) {
        self.add_with(sad, &mut OsRng)
    }
    /// [`Cfg::add`] with the outbound SA's random parts (IV generator, IP identification) drawn from `rng`.
    fn add_with(&self, sad: &mut Sad, rng: &mut dyn netveil_crypto::rand::Rng) -> (OutIdx, InIdx) {
        let o = sad.insert_out(OutboundSa::new(self.params(Direction::Out), NOW, rng).unwrap());
        let i = sad
            .insert_in(InboundSa::new(self.params(Direction::In), NOW).unwrap())
            .unwrap();
        (o, i)
    }
    fn pair(&self) -> (Sad, OutIdx, InIdx) {
        let mut sad = Sad::default();
        let (o, i) = self.add(&mut sad);
        (sad, o, i)
    }
}

fn protect(sad: &Sad, bundle: &[OutIdx], pkt: &[u8]) -> Result<Vec<u8>, D> {
    let mut b = PacketBuf::from_slice(pkt, 256, 2048);
    bundle::protect(sad, bundle, &mut b, NOW)?;
    Ok(b.data().to_vec())
}

/// Unprotects a copy of `wire` placed with no head- or tailroom (as a worst case for the receive path).
fn unprotect(sad: &Sad, wire: &[u8]) -> (Result<Unprotected, D>, Vec<u8>) {
    let mut b = PacketBuf::from_slice(wire, 0, 0);
    let r = bundle::unprotect(sad, &mut b, NAT_T, NOW);
    (r, b.data().to_vec())
}

fn roundtrip(sad: &Sad, o: OutIdx, i: InIdx, pkt: &[u8]) -> Vec<u8> {
    let wire = protect(sad, &[o], pkt).expect("protect");
    let (r, back) = unprotect(sad, &wire);
    match r {
        Ok(Unprotected::Packet(used)) => assert!(used.matches(&[i]), "{used:?}"),
        other => panic!("unprotect: {other:?}"),
    }
    assert_eq!(hex::encode(&back), hex::encode(pkt), "round trip differs");
    wire
}

fn be16(p: &[u8], at: usize) -> usize {
    u16::from_be_bytes([p[at], p[at + 1]]) as usize
}
fn be32(p: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]])
}

/// Length of the IP header plus extension headers before the ESP/AH/UDP header in a packet built by [`Case`].
fn l3_len(p: &[u8]) -> usize {
    if p[0] >> 4 == 4 {
        (p[0] & 15) as usize * 4
    } else if p[6] == 0 {
        56
    } else {
        40
    }
}

fn v6_udp_checksum_ok(p: &[u8], off: usize) -> bool {
    let mut ph = Vec::new();
    ph.extend_from_slice(&p[8..40]);
    ph.extend_from_slice(&((p.len() - off) as u32).to_be_bytes());
    ph.extend_from_slice(&[0, 0, 0, 17]);
    ph.extend_from_slice(&p[off..]);
    be16(p, off + 6) != 0 && csum(&ph) == 0
}

/// Checks the outer IP header (and UDP header) of a protected packet; returns the offset of the ESP/AH header.
fn check_outer(case: Case, cfg: &Cfg, orig: &[u8], wire: &[u8], proto: u8) -> usize {
    let v6 = case.outer_v6();
    assert_eq!(wire[0] >> 4, if v6 { 6 } else { 4 });
    let l3 = if case.tunnel() {
        if v6 {
            40
        } else {
            20
        }
    } else {
        l3_len(orig)
    };
    let want_proto = if cfg.encap { 17 } else { proto };
    if v6 {
        assert_eq!(be16(wire, 4), wire.len() - 40, "IPv6 payload length");
        let proto_at = if l3 == 56 { 48 } else { 6 };
        assert_eq!(wire[proto_at], want_proto);
        if case.tunnel() {
            assert_eq!(&wire[8..24], &OUT6_L.octets());
            assert_eq!(&wire[24..40], &OUT6_R.octets());
        } else {
            assert_eq!(&wire[..4], &orig[..4]);
            assert_eq!(
                &wire[7..l3],
                &orig[7..l3]
                    .iter()
                    .enumerate()
                    .map(|(k, b)| if k + 7 == proto_at { want_proto } else { *b })
                    .collect::<Vec<_>>()[..]
            );
        }
    } else {
        assert_eq!(be16(wire, 2), wire.len(), "IPv4 total length");
        assert_eq!(csum(&wire[..l3]), 0, "IPv4 header checksum");
        assert_eq!(wire[9], want_proto);
        if case.tunnel() {
            assert_eq!(&wire[12..16], &OUT4_L.octets());
            assert_eq!(&wire[16..20], &OUT4_R.octets());
            assert!(wire[8] > 0);
        } else {
            assert_eq!(&wire[12..l3], &orig[12..l3]);
            assert_eq!(&wire[4..9], &orig[4..9]);
        }
    }
    if cfg.encap {
        assert_eq!(be16(wire, l3), NAT_T as usize, "UDP sport");
        assert_eq!(be16(wire, l3 + 2), NAT_T as usize, "UDP dport");
        assert_eq!(be16(wire, l3 + 4), wire.len() - l3, "UDP length");
        if v6 {
            assert!(v6_udp_checksum_ok(wire, l3), "UDP checksum over IPv6");
        } else {
            assert_eq!(be16(wire, l3 + 6), 0);
        }
        l3 + 8
    } else {
        l3
    }
}

// ---------------------------------------------------------------------------------------------------------------
// 1. Round trips

const SIZES: [usize; 6] = [0, 1, 15, 16, 17, 1400];

#[test]
fn esp_round_trip_every_suite_mode_family_esn_encap() {
    let mut n = 0;
    for name in ESP_SUITES {
        let suite = EspSuite::parse(name, true).unwrap();
        for case in CASES {
            for esn in [false, true] {
                for encap in [false, true] {
                    let cfg = Cfg::new(Suite::Esp(suite), case.mode())
                        .esn(esn)
                        .encap(encap);
                    let (sad, o, i) = cfg.pair();
                    let mut seq = 0u32;
                    for proto in [6u8, 17, 1] {
                        for size in SIZES {
                            let pkt = case.packet(proto, size);
                            let wire = roundtrip(&sad, o, i, &pkt);
                            seq += 1;
                            let ctx =
                                format!("{name} {case:?} esn {esn} encap {encap} {proto}/{size}");
                            let off = check_outer(case, &cfg, &pkt, &wire, 50);
                            assert_eq!(be32(&wire, off), cfg.spi, "{ctx}");
                            assert_eq!(be32(&wire, off + 4), seq, "{ctx}");
                            let inner = if case.tunnel() {
                                pkt.len()
                            } else {
                                pkt.len() - l3_len(&pkt)
                            };
                            let esp_len = wire.len() - off;
                            let min = 8 + suite.enc.iv_len() + inner + 2 + suite.icv_len();
                            assert!(esp_len >= min, "{ctx}: esp {esp_len} < {min}");
                            assert!(esp_len < min + suite.enc.block_len(), "{ctx}: padding");
                            let body = esp_len - 8 - suite.enc.iv_len() - suite.icv_len();
                            assert_eq!(body % suite.enc.block_len(), 0, "{ctx}");
                            if suite.encrypts() && size >= MARKER.len() {
                                assert!(!contains(&wire, MARKER), "{ctx}: plaintext on the wire");
                            }
                            n += 1;
                        }
                    }
                    let s = sad.get(i).counters.snapshot();
                    assert_eq!(s.packets, 18);
                    assert_eq!(s.dropped, 0);
                }
            }
        }
    }
    assert_eq!(n, 18 * 7 * 2 * 2 * 18);
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn ah_round_trip_every_suite_mode_family_esn() {
    for name in AH_SUITES {
        let suite = AhSuite::parse(name).unwrap();
        for case in [Case::Tun44, Case::Tun66, Case::Tr4, Case::Tr6, Case::Tr6Ext] {
            for esn in [false, true] {
                let cfg = Cfg::new(Suite::Ah(suite), case.mode()).esn(esn);
                let (sad, o, i) = cfg.pair();
                let mut seq = 0;
                for proto in [6u8, 17, 1] {
                    for size in SIZES {
                        let pkt = case.packet(proto, size);
                        let wire = roundtrip(&sad, o, i, &pkt);
                        seq += 1;
                        let off = check_outer(case, &cfg, &pkt, &wire, 51);
                        let ah_len =
                            netveil_ipsec::ah::header_len(suite.integ.icv_len(), case.outer_v6());
                        assert_eq!((wire[off + 1] as usize + 2) * 4, ah_len);
                        let nh = if case.tunnel() {
                            if case.inner_v6() {
                                41
                            } else {
                                4
                            }
                        } else if case.inner_v6() && proto == 1 {
                            58
                        } else {
                            proto
                        };
                        assert_eq!(wire[off], nh);
                        assert_eq!(be32(&wire, off + 4), cfg.spi);
                        assert_eq!(be32(&wire, off + 8), seq);
                        assert_eq!(
                            wire.len() - off - ah_len,
                            pkt.len() - if case.tunnel() { 0 } else { l3_len(&pkt) }
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn bundles_esp_in_ah() {
    for esn in [false, true] {
        for v6 in [false, true] {
            // ESP transport inside AH transport.
            let tr = if v6 { Case::Tr6Ext } else { Case::Tr4 };
            let mut sad = Sad::default();
            let mut esp_cfg = Cfg::new(esp_suite("aes128-sha256"), Mode::Transport).esn(esn);
            esp_cfg.spi = 0x100;
            let mut ah_cfg = Cfg::new(ah_suite("sha1"), Mode::Transport).esn(esn);
            ah_cfg.spi = 0x200;
            let (eo, ei) = esp_cfg.add(&mut sad);
            let (ao, ai) = ah_cfg.add(&mut sad);
            for size in SIZES {
                let pkt = tr.packet(17, size);
                let wire = protect(&sad, &[eo, ao], &pkt).unwrap();
                let off = l3_len(&pkt);
                assert_eq!(wire[if v6 { 48 } else { 9 }], 51);
                assert_eq!(wire[off], 50, "AH next header is ESP");
                let (r, back) = unprotect(&sad, &wire);
                match r {
                    Ok(Unprotected::Packet(u)) => {
                        assert!(u.matches(&[ei, ai]), "{u:?}");
                        assert!(!u.matches(&[ai, ei]));
                        assert!(!u.matches(&[ei]));
                    }
                    o => panic!("{o:?}"),
                }
                assert_eq!(back, pkt);
            }
            // ESP tunnel with AH transport outside.
            let tun = if v6 { Case::Tun66 } else { Case::Tun44 };
            let mut sad = Sad::default();
            let mut esp_cfg = Cfg::new(esp_suite("aes256gcm16"), tun.mode()).esn(esn);
            esp_cfg.spi = 0x300;
            let mut ah_cfg = Cfg::new(ah_suite("sha256"), Mode::Transport).esn(esn);
            ah_cfg.spi = 0x400;
            let (eo, ei) = esp_cfg.add(&mut sad);
            let (ao, ai) = ah_cfg.add(&mut sad);
            for size in SIZES {
                let pkt = tun.packet(6, size);
                let wire = protect(&sad, &[eo, ao], &pkt).unwrap();
                let (r, back) = unprotect(&sad, &wire);
                match r {
                    Ok(Unprotected::Packet(u)) => {
                        assert!(u.matches(&[ei, ai]), "{u:?}");
                        assert_eq!(u.as_slice(), &[ai, ei]);
                    }
                    o => panic!("{o:?}"),
                }
                assert_eq!(back, pkt);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// 2. AH mutable fields

fn expect_ok(sad: &Sad, wire: &[u8], what: &str) {
    let (r, _) = unprotect(sad, wire);
    assert!(matches!(r, Ok(Unprotected::Packet(_))), "{what}: {r:?}");
}
fn expect_auth_fail(sad: &Sad, i: InIdx, wire: &[u8], what: &str) {
    let before = sad.get(i).counters.snapshot();
    let (r, _) = unprotect(sad, wire);
    assert_eq!(r, Err(D::AuthFailed), "{what}");
    let after = sad.get(i).counters.snapshot();
    assert_eq!(after.auth_failed, before.auth_failed + 1, "{what}");
    assert_eq!(after.dropped, before.dropped + 1, "{what}");
}

#[test]
fn ah_ipv4_mutable_fields_and_options() {
    // Router Alert (148, immutable) and a Timestamp option (68, mutable), 16 bytes of options.
    let opts = [
        148, 4, 0, 0, // router alert
        68, 12, 5, 0, 1, 2, 3, 4, 5, 6, 7, 8, // timestamp
    ];
    for name in AH_SUITES {
        for esn in [false, true] {
            let cfg = Cfg::new(ah_suite(name), Mode::Transport).esn(esn);
            let (sad, o, i) = cfg.pair();
            let pkt = ipv4(OUT4_L.octets(), OUT4_R.octets(), 17, &opts, &l4(17, 40));
            let wire0 = protect(&sad, &[o], &pkt).unwrap();
            // Mutable: TTL, TOS, flags, checksum, timestamp option contents (each on a fresh sequence number).
            let mutations: [&Mutation; 5] = [
                &|w: &mut Vec<u8>| {
                    w[8] -= 5;
                    fix_v4(w)
                },
                &|w: &mut Vec<u8>| {
                    w[1] ^= 0xfc;
                    fix_v4(w)
                },
                &|w: &mut Vec<u8>| w[10] ^= 0x55, // checksum only
                &|w: &mut Vec<u8>| {
                    w[6] ^= 0x40;
                    fix_v4(w)
                },
                &|w: &mut Vec<u8>| {
                    w[26] = 9;
                    w[28..36].copy_from_slice(&[0xee; 8]);
                    fix_v4(w)
                },
            ];
            for (k, m) in mutations.iter().enumerate() {
                let mut w = protect(&sad, &[o], &pkt).unwrap();
                m(&mut w);
                expect_ok(&sad, &w, &format!("{name} mutable #{k}"));
            }
            // All mutations at once.
            let mut w = protect(&sad, &[o], &pkt).unwrap();
            for m in &mutations {
                m(&mut w);
            }
            expect_ok(&sad, &w, "all mutable");
            // Immutable: addresses, router alert value, payload, identification, protocol-independent bytes.
            for (k, at) in [12usize, 15, 16, 19, 22, 23, 4, 5, wire0.len() - 1, 36 + 30]
                .into_iter()
                .enumerate()
            {
                let mut w = protect(&sad, &[o], &pkt).unwrap();
                w[at] ^= 0x01;
                fix_v4(&mut w);
                expect_auth_fail(&sad, i, &w, &format!("{name} immutable #{k} byte {at}"));
            }
            // The original comes back after mutable-only changes with the original TTL restored by us.
            let (r, back) = unprotect(&sad, &protect(&sad, &[o], &pkt).unwrap());
            assert!(r.is_ok());
            assert_eq!(back, pkt);
        }
    }
}

#[test]
fn ah_ipv6_mutable_fields_and_options() {
    // Hop-by-Hop with a mutable option (0x3e: bit 0x20 set) and an immutable one (0x1e), then UDP.
    let mut ext = vec![17, 1];
    ext.extend_from_slice(&[0x3e, 4, 0xa1, 0xa2, 0xa3, 0xa4]); // mutable
    ext.extend_from_slice(&[0x1e, 4, 0xb1, 0xb2, 0xb3, 0xb4]); // immutable
    ext.extend_from_slice(&[1, 0]); // PadN
    assert_eq!(ext.len(), 16);
    ext.extend_from_slice(&l4(17, 33));
    for name in AH_SUITES {
        for esn in [false, true] {
            let cfg = Cfg::new(ah_suite(name), Mode::Transport).esn(esn);
            let (sad, o, i) = cfg.pair();
            let pkt = ipv6(OUT6_L.octets(), OUT6_R.octets(), 0, &ext);
            let wire = protect(&sad, &[o], &pkt).unwrap();
            assert_eq!(wire[40], 51, "AH follows the Hop-by-Hop header");
            let (r, back) = unprotect(&sad, &wire);
            assert!(r.is_ok(), "{r:?}");
            assert_eq!(back, pkt);
            let mutations: [&Mutation; 5] = [
                &|w: &mut Vec<u8>| w[7] = 1,             // hop limit
                &|w: &mut Vec<u8>| w[1] ^= 0x0f,         // flow label
                &|w: &mut Vec<u8>| w[3] ^= 0xff,         // flow label
                &|w: &mut Vec<u8>| w[0] ^= 0x0f,         // traffic class
                &|w: &mut Vec<u8>| w[44..48].fill(0x77), // mutable option data
            ];
            for (k, m) in mutations.iter().enumerate() {
                let mut w = protect(&sad, &[o], &pkt).unwrap();
                m(&mut w);
                expect_ok(&sad, &w, &format!("{name} mutable #{k}"));
            }
            // Immutable: addresses, payload length is structural, immutable option data, option types, payload.
            for at in [8usize, 23, 24, 39, 50, 53, 42, 48, wire.len() - 1] {
                let mut w = protect(&sad, &[o], &pkt).unwrap();
                w[at] ^= 0x02;
                expect_auth_fail(&sad, i, &w, &format!("{name} immutable byte {at}"));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// 3. Tampering

fn tamper_all_bits(cfg: &Cfg, case: Case, proto: u8) {
    let (sad, o, i) = cfg.pair();
    let pkt = case.packet(17, 24);
    let wire = protect(&sad, &[o], &pkt).unwrap();
    let hdr_off = check_outer(case, cfg, &pkt, &wire, proto);
    let encrypts = match cfg.suite {
        Suite::Esp(s) => s.encrypts(),
        Suite::Ah(_) => false,
    };
    let mut ranges = Vec::with_capacity(2);
    ranges.push(hdr_off..wire.len());
    if proto == 51 {
        // AH also covers the immutable addresses.
        ranges.push(if case.outer_v6() { 8..40 } else { 12..20 });
    }
    let mut flips = 0;
    for range in ranges {
        for byte in range {
            for bit in 0..8 {
                let mut w = wire.clone();
                w[byte] ^= 1 << bit;
                let before = sad.get(i).counters.snapshot();
                let (r, after_data) = unprotect(&sad, &w);
                let after = sad.get(i).counters.snapshot();
                let ctx = format!(
                    "{:?} {case:?} esn {} byte {byte} bit {bit}",
                    cfg.suite, cfg.esn
                );
                match r {
                    Err(D::UnknownSpi) => {
                        // A flipped SPI finds no SA; a flipped outer destination finds none for that address.
                        let dst = if case.outer_v6() { 24..40 } else { 16..20 };
                        assert!(
                            (hdr_off..hdr_off + 8).contains(&byte) || dst.contains(&byte),
                            "{ctx}"
                        );
                    }
                    Err(d) => {
                        assert_eq!(
                            after.dropped,
                            before.dropped + 1,
                            "{ctx}: {d:?} not counted"
                        );
                        if d == D::AuthFailed {
                            assert_eq!(after.auth_failed, before.auth_failed + 1, "{ctx}");
                        }
                        assert_eq!(after.packets, before.packets, "{ctx}");
                        if encrypts {
                            assert!(
                                !contains(&after_data, MARKER),
                                "{ctx}: plaintext left visible"
                            );
                        }
                    }
                    Ok(u) => panic!("{ctx}: tampered packet accepted: {u:?}"),
                }
                flips += 1;
            }
        }
    }
    assert!(flips > 300);
    // The untampered packet still goes through afterwards (nothing was recorded in the replay window).
    let (r, back) = unprotect(&sad, &wire);
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(back, pkt);
}

#[test]
fn tamper_every_bit_esp() {
    for name in [
        "aes128gcm16",
        "aes256gcm8",
        "chacha20poly1305",
        "aes128gmac",
        "aes256-sha256",
        "3des-md5",
        "null-sha1",
    ] {
        for esn in [false, true] {
            for (case, encap) in [
                (Case::Tun44, false),
                (Case::Tr6Ext, false),
                (Case::Tun64, true),
            ] {
                let cfg = Cfg::new(esp_suite(name), case.mode()).esn(esn).encap(encap);
                tamper_all_bits(&cfg, case, 50);
            }
        }
    }
}

#[test]
fn tamper_every_bit_ah() {
    for name in AH_SUITES {
        for esn in [false, true] {
            for case in [Case::Tun44, Case::Tr4, Case::Tun66, Case::Tr6Ext] {
                let cfg = Cfg::new(ah_suite(name), case.mode()).esn(esn);
                tamper_all_bits(&cfg, case, 51);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// 4. Replay

fn deliver(sad: &Sad, w: &[u8]) -> Result<(), D> {
    unprotect(sad, w).0.map(|_| ())
}

#[test]
fn replay_window() {
    for suite in [esp_suite("aes128gcm16"), ah_suite("sha256")] {
        for window in [64u32, 1024] {
            for esn in [false, true] {
                let mut cfg = Cfg::new(suite, Case::Tun44.mode()).esn(esn);
                cfg.window = window;
                let (sad, o, i) = cfg.pair();
                let n = window as usize + 20;
                let pkts: Vec<Vec<u8>> = (0..n)
                    .map(|k| protect(&sad, &[o], &Case::Tun44.packet(17, k % 50)).unwrap())
                    .collect();
                // pkts[k] has sequence number k + 1.
                assert_eq!(deliver(&sad, &pkts[0]), Ok(()));
                assert_eq!(deliver(&sad, &pkts[0]), Err(D::Replayed));
                let top = n - 1;
                assert_eq!(deliver(&sad, &pkts[top]), Ok(()));
                assert_eq!(deliver(&sad, &pkts[top]), Err(D::Replayed));
                // Reordered within the window: seq n - window + 1 ..= n - 1, in reverse.
                let edge = n - window as usize + 1; // lowest acceptable sequence number
                for seq in (edge..n).rev() {
                    assert_eq!(deliver(&sad, &pkts[seq - 1]), Ok(()), "seq {seq}");
                }
                for seq in (edge..=n).step_by(7) {
                    assert_eq!(deliver(&sad, &pkts[seq - 1]), Err(D::Replayed), "seq {seq}");
                }
                // Left of the window.
                // (With ESN, RFC 4303 A3 infers the next 2^32 block for them and the ICV check drops them.)
                for seq in [edge - 1, edge - 2, 2] {
                    let want = if esn { D::AuthFailed } else { D::TooOld };
                    assert_eq!(deliver(&sad, &pkts[seq - 1]), Err(want), "seq {seq}");
                }
                let s = sad.get(i).counters.snapshot();
                assert_eq!(s.packets, window as u64 + 1);
                assert!(s.replayed >= 5, "{s:?}");
                assert_eq!(s.dropped, s.replayed + s.auth_failed, "{s:?}");
            }
        }
    }
}

#[test]
fn replay_esn_across_2_32() {
    for suite in [
        esp_suite("aes128gcm16"),
        esp_suite("aes128gmac"),
        esp_suite("aes128-sha1"),
        ah_suite("sha1"),
    ] {
        for window in [64u32, 1024] {
            let mut cfg = Cfg::new(suite, Case::Tr4.mode()).esn(true);
            cfg.window = window;
            // The receiver infers the high bits from top 0 (RFC 4303 A3): the first number must lie left of
            // 2^32 - window + 1 to be taken as a number of the first 2^32 block.
            cfg.first_seq = (1u64 << 32) - u64::from(window) - 40;
            let (sad, o, i) = cfg.pair();
            let n = window as usize + 100;
            let pkts: Vec<Vec<u8>> = (0..n)
                .map(|k| protect(&sad, &[o], &Case::Tr4.packet(6, k % 20)).unwrap())
                .collect();
            assert!(sad.get(o).seq_last() > 1 << 32);
            let seq_of = |k: usize| cfg.first_seq + k as u64;
            // In order up to just before the boundary, then skip ahead past it.
            let before = (0..n)
                .filter(|&k| seq_of(k) < (1 << 32) - 10)
                .max()
                .unwrap();
            for (k, p) in pkts.iter().enumerate().take(before + 1) {
                assert_eq!(deliver(&sad, p), Ok(()), "k {k}");
            }
            let last = n - 1;
            assert_eq!(deliver(&sad, &pkts[last]), Ok(()));
            assert_eq!(sad.get(i).replay_top(), seq_of(last));
            assert!(seq_of(last) > 1 << 32);
            // The skipped ones, across the boundary, in reverse: accepted (if within the window).
            for k in (before + 1..last).rev() {
                let r = deliver(&sad, &pkts[k]);
                if seq_of(last) - seq_of(k) < u64::from(window) {
                    assert_eq!(r, Ok(()), "k {k} seq {:#x}", seq_of(k));
                } else {
                    assert!(r.is_err(), "k {k}");
                }
            }
            // Replays on both sides of the boundary.
            assert_eq!(deliver(&sad, &pkts[last]), Err(D::Replayed));
            let k = last - 5;
            assert_eq!(deliver(&sad, &pkts[k]), Err(D::Replayed));
            // Too old (the low 32 bits infer a later block; the ICV then fails, which is a drop).
            assert!(deliver(&sad, &pkts[0]).is_err());
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// 5. Sequence exhaustion

#[test]
fn sequence_exhaustion() {
    for suite in [
        esp_suite("aes128gcm16"),
        esp_suite("aes128-sha256"),
        ah_suite("sha1"),
    ] {
        let mut cfg = Cfg::new(suite, Case::Tun44.mode());
        cfg.first_seq = u64::from(u32::MAX);
        let (sad, o, _i) = cfg.pair();
        let pkt = Case::Tun44.packet(17, 10);
        let w = protect(&sad, &[o], &pkt).unwrap();
        assert_eq!(deliver(&sad, &w), Ok(()));
        assert_eq!(protect(&sad, &[o], &pkt), Err(D::SeqExhausted));
        assert!(sad.get(o).rekey_needed.load(Relaxed));
        assert_eq!(protect(&sad, &[o], &pkt), Err(D::SeqExhausted));

        // With ESN: continues past 2^32; the wire carries the low bits (0, 1, ...), the ICV covers the high bits.
        let cfg = cfg.esn(true);
        let (sad, o, i) = cfg.pair();
        for k in 0..3u64 {
            let w = protect(&sad, &[o], &pkt).unwrap();
            let seq = u64::from(u32::MAX) + k;
            assert_eq!(sad.get(o).seq_last(), seq);
            let off = if matches!(suite, Suite::Ah(_)) {
                20 + 8
            } else {
                20 + 4
            };
            assert_eq!(be32(&w, off), seq as u32);
            if let Suite::Esp(_) = suite {
                let mut b = PacketBuf::from_slice(&w, 0, 0);
                esp::open_laid_out(sad.get(i), &mut b, 20, seq).unwrap();
                let mut b = PacketBuf::from_slice(&w, 0, 0);
                assert_eq!(
                    esp::open_laid_out(sad.get(i), &mut b, 20, seq ^ (1 << 33)),
                    Err(D::AuthFailed)
                );
            }
        }
        assert!(!sad.get(o).rekey_needed.load(Relaxed));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// 6. Lifetimes

#[test]
fn lifetimes() {
    for suite in [esp_suite("chacha20poly1305"), ah_suite("sha512")] {
        let pkt = Case::Tun66.packet(6, 100);
        // Hard packet limit, outbound.
        let mut cfg = Cfg::new(suite, Case::Tun66.mode());
        cfg.life_out = Lifetime {
            soft: Limits::default(),
            hard: Limits {
                packets: Some(3),
                ..Limits::default()
            },
        };
        cfg.life_in = Lifetime {
            soft: Limits::default(),
            hard: Limits {
                packets: Some(2),
                ..Limits::default()
            },
        };
        let (sad, o, i) = cfg.pair();
        let ws: Vec<_> = (0..3).map(|_| protect(&sad, &[o], &pkt).unwrap()).collect();
        assert_eq!(protect(&sad, &[o], &pkt), Err(D::SaExpired));
        assert!(sad.get(o).rekey_needed.load(Relaxed));
        assert_eq!(deliver(&sad, &ws[0]), Ok(()));
        assert_eq!(deliver(&sad, &ws[1]), Ok(()));
        let d = sad.get(i).counters.snapshot().dropped;
        assert_eq!(deliver(&sad, &ws[2]), Err(D::SaExpired));
        assert_eq!(sad.get(i).counters.snapshot().dropped, d + 1);

        // Soft limits: a rekey is flagged, traffic continues.
        let mut cfg = Cfg::new(suite, Case::Tun66.mode());
        cfg.life_out = Lifetime {
            soft: Limits {
                packets: Some(2),
                ..Limits::default()
            },
            hard: Limits::default(),
        };
        cfg.life_in = Lifetime {
            soft: Limits {
                bytes: Some(250),
                ..Limits::default()
            },
            hard: Limits::default(),
        };
        let (sad, o, i) = cfg.pair();
        for k in 0..10 {
            let w = protect(&sad, &[o], &pkt).unwrap();
            assert_eq!(deliver(&sad, &w), Ok(()), "k {k}");
            if k >= 2 {
                assert!(sad.get(o).rekey_needed.load(Relaxed), "k {k}");
                assert!(sad.get(i).rekey_needed.load(Relaxed), "k {k}");
            }
        }
        // Hard time limit.
        let mut cfg = Cfg::new(suite, Case::Tun66.mode());
        cfg.life_out.hard.seconds = Some(60);
        let (sad, o, _) = cfg.pair();
        let mut b = PacketBuf::from_slice(&pkt, 256, 1024);
        assert!(bundle::protect(&sad, &[o], &mut b, NOW + 59).is_ok());
        let mut b = PacketBuf::from_slice(&pkt, 256, 1024);
        assert_eq!(
            bundle::protect(&sad, &[o], &mut b, NOW + 60),
            Err(D::SaExpired)
        );
    }
}

// ---------------------------------------------------------------------------------------------------------------
// 7. TFC padding

#[test]
fn tfc_padding_tunnel() {
    for name in ["aes128gcm16", "aes128-sha1", "aes128gmac", "null-null"] {
        for case in [Case::Tun44, Case::Tun66, Case::Tun64] {
            for encap in [false, true] {
                for tfc in [0u16, 100, 1000, 1500] {
                    let mut cfg = Cfg::new(esp_suite(name), case.mode()).encap(encap);
                    cfg.tfc = tfc;
                    let (sad, o, i) = cfg.pair();
                    for size in SIZES {
                        let pkt = case.packet(17, size);
                        let wire = roundtrip(&sad, o, i, &pkt);
                        let off = check_outer(case, &cfg, &pkt, &wire, 50);
                        assert!(
                            wire.len() - off >= tfc as usize,
                            "{name} {case:?} tfc {tfc}"
                        );
                    }
                    assert_eq!(
                        sad.get(i).counters.snapshot().bytes,
                        SIZES
                            .iter()
                            .map(|&s| case.packet(17, s).len() as u64)
                            .sum::<u64>()
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// 8. Truncated input

fn truncations(cfg: &Cfg, case: Case) {
    let (sad, o, _i) = cfg.pair();
    let pkt = case.packet(6, 37);
    let wire = protect(&sad, &[o], &pkt).unwrap();
    for len in 0..wire.len() {
        // As received: IP lengths say more than there is.
        let (r, _) = unprotect(&sad, &wire[..len]);
        assert!(r.is_err(), "{:?} {case:?} len {len}: {r:?}", cfg.suite);
        // With the IP (and UDP) lengths fixed up to the truncated length.
        if len >= 40 || (len >= 20 && !case.outer_v6()) {
            let mut w = wire[..len].to_vec();
            if case.outer_v6() {
                let l = (len - 40) as u16;
                w[4..6].copy_from_slice(&l.to_be_bytes());
            } else {
                w[2..4].copy_from_slice(&(len as u16).to_be_bytes());
                w[10] = 0;
                w[11] = 0;
                let c = csum(&w[..20]);
                w[10..12].copy_from_slice(&c.to_be_bytes());
            }
            let l3 = if case.tunnel() {
                if case.outer_v6() {
                    40
                } else {
                    20
                }
            } else {
                l3_len(&pkt)
            };
            if cfg.encap && len >= l3 + 8 {
                let u = (len - l3) as u16;
                w[l3 + 4..l3 + 6].copy_from_slice(&u.to_be_bytes());
            }
            let (r, _) = unprotect(&sad, &w);
            assert!(
                !matches!(r, Ok(Unprotected::Packet(_))),
                "{:?} {case:?} fixed len {len}: {r:?}",
                cfg.suite
            );
        }
    }
}

#[test]
fn truncated_packets() {
    for suite in [
        esp_suite("aes128gcm16"),
        esp_suite("aes256-sha512"),
        esp_suite("aes128gmac"),
        esp_suite("3des-sha1"),
        ah_suite("sha1"),
        ah_suite("sha384"),
    ] {
        for case in [
            Case::Tun44,
            Case::Tun66,
            Case::Tr4,
            Case::Tr6Ext,
            Case::Tun46,
        ] {
            for esn in [false, true] {
                for encap in [false, true] {
                    if encap && matches!(suite, Suite::Ah(_)) {
                        continue;
                    }
                    truncations(&Cfg::new(suite, case.mode()).esn(esn).encap(encap), case);
                }
            }
        }
    }
}

/// GMAC with ESN needs the high sequence bits inside the AAD: decapsulation must work without headroom.
#[test]
fn gmac_esn_without_headroom() {
    for case in [Case::Tun44, Case::Tr6, Case::Tun66] {
        for encap in [false, true] {
            let cfg = Cfg::new(esp_suite("aes256gmac"), case.mode())
                .esn(true)
                .encap(encap);
            let (sad, o, i) = cfg.pair();
            let pkt = case.packet(17, 100);
            // Outbound with exactly the headroom the outer headers need.
            let need = if case.tunnel() {
                (if case.outer_v6() { 40 } else { 20 }) + 8 + 8 + if encap { 8 } else { 0 }
            } else {
                8 + 8 + if encap { 8 } else { 0 }
            };
            let mut b = PacketBuf::from_slice(&pkt, need, 200);
            bundle::protect(&sad, &[o], &mut b, NOW).unwrap();
            let (r, back) = unprotect(&sad, b.data());
            assert!(
                matches!(r, Ok(Unprotected::Packet(u)) if u.matches(&[i])),
                "{case:?} {r:?}"
            );
            assert_eq!(back, pkt);
        }
    }
}

/// RFC 4302 Appendix A.1: Sender Directed Multi-Destination Delivery (149) is immutable like Router Alert; a
/// No-Operation option and End of Options List are covered as they are.
#[test]
fn ah_ipv4_option_149_immutable() {
    let opts = [1, 149, 4, 0x11, 0x22, 0, 0, 0];
    let cfg = Cfg::new(ah_suite("sha256"), Mode::Transport);
    let (sad, o, i) = cfg.pair();
    let pkt = ipv4(OUT4_L.octets(), OUT4_R.octets(), 6, &opts, &l4(6, 20));
    let wire = protect(&sad, &[o], &pkt).unwrap();
    let (r, back) = unprotect(&sad, &wire);
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(back, pkt);
    for at in [23usize, 24, 26, 27] {
        let mut w = protect(&sad, &[o], &pkt).unwrap();
        w[at] ^= 0x08;
        w[10] = 0;
        w[11] = 0;
        let c = csum(&w[..28]);
        w[10..12].copy_from_slice(&c.to_be_bytes());
        expect_auth_fail(&sad, i, &w, &format!("option byte {at}"));
    }
}

/// ESP transport mode over IPv4 with options: ESP goes after the options, and the original header (options,
/// identification, TTL, checksum) comes back exactly.
#[test]
fn esp_transport_ipv4_with_options() {
    let opts = [148, 4, 0, 0, 68, 12, 5, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    for name in [
        "aes128gcm16",
        "aes128gmac",
        "aes256-sha256",
        "3des-md5",
        "null-sha1",
    ] {
        for esn in [false, true] {
            for encap in [false, true] {
                let cfg = Cfg::new(esp_suite(name), Mode::Transport)
                    .esn(esn)
                    .encap(encap);
                let (sad, o, i) = cfg.pair();
                for size in SIZES {
                    let pkt = ipv4(OUT4_L.octets(), OUT4_R.octets(), 17, &opts, &l4(17, size));
                    let wire = roundtrip(&sad, o, i, &pkt);
                    assert_eq!(&wire[..2], &pkt[..2]);
                    assert_eq!(&wire[4..9], &pkt[4..9]);
                    assert_eq!(wire[9], if encap { 17 } else { 50 });
                    assert_eq!(&wire[12..36], &pkt[12..36]);
                    assert_eq!(csum(&wire[..36]), 0);
                    assert_eq!(be16(&wire, 2), wire.len());
                    let off = if encap { 44 } else { 36 };
                    assert_eq!(be32(&wire, off), cfg.spi);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// 9. Datagrams of a coalesced receive, opened where they lie (`bundle::unprotect_udp_payload`)

/// The outer destination of a case's packets (the inbound SA's local end).
fn outer_dst(case: Case) -> IpAddr {
    if case.outer_v6() {
        IpAddr::V6(OUT6_R)
    } else {
        IpAddr::V4(OUT4_R)
    }
}

/// Places the UDP payload of `wire` (ESP in UDP) between two other datagrams' bytes in one buffer, as a coalesced
/// receive does, and opens it there against `dst`. Returns the result, the bytes the buffer holds as its packet
/// afterwards, and whether the neighbours' bytes stayed as they were.
fn unprotect_in_place(
    sad: &Sad,
    wire: &[u8],
    dst: IpAddr,
) -> (Result<bundle::UdpUnprotected, D>, Vec<u8>, bool) {
    let payload = &wire[l3_len(wire) + 8..];
    let (before, after) = ([0xa5u8; 1400], [0x5au8; 700]);
    let mut b = PacketBuf::between(&before, payload, &after);
    let r = bundle::unprotect_udp_payload(sad, &mut b, dst, NOW);
    let kept = b.storage().starts_with(&before) && b.storage().ends_with(&after);
    (r, b.data().to_vec(), kept)
}

#[test]
fn coalesced_datagrams_open_in_place_like_whole_ones() {
    for name in ESP_SUITES {
        for case in [Case::Tun44, Case::Tun66, Case::Tun46, Case::Tun64] {
            for esn in [false, true] {
                let cfg = Cfg::new(esp_suite(name), case.mode()).esn(esn).encap(true);
                let (sad, o, i) = cfg.pair();
                for proto in [6u8, 17, 1] {
                    for size in SIZES {
                        let ctx = format!("{name} {case:?} esn {esn} {proto}/{size}");
                        let pkt = case.packet(proto, size);
                        let wire = protect(&sad, &[o], &pkt).expect("protect");
                        let (r, data, kept) = unprotect_in_place(&sad, &wire, outer_dst(case));
                        match r {
                            Ok(bundle::UdpUnprotected::Packet(used)) => {
                                assert!(used.matches(&[i]), "{ctx}: {used:?}")
                            }
                            other => panic!("{ctx}: {other:?}"),
                        }
                        assert_eq!(hex::encode(&data), hex::encode(&pkt), "{ctx}");
                        assert!(kept, "{ctx}: bytes outside the datagram changed");
                        // Opened once: the same datagram again is a replay.
                        let (r, _, _) = unprotect_in_place(&sad, &wire, outer_dst(case));
                        assert_eq!(r, Err(D::Replayed), "{ctx}");
                    }
                }
                let s = sad.get(i).counters.snapshot();
                assert_eq!((s.packets, s.dropped), (18, 18), "{name} {case:?}");
            }
        }
    }
}

#[test]
fn coalesced_datagrams_are_checked_like_whole_ones() {
    let suite = esp_suite("aes128gcm16");
    // A transport-mode SA needs the outer headers: the datagram is left as it came, and nothing is recorded.
    let cfg = Cfg::new(suite, Mode::Transport).encap(true);
    let (sad, o, i) = cfg.pair();
    let pkt = Case::Tr4.packet(17, 100);
    let wire = protect(&sad, &[o], &pkt).unwrap();
    let (r, data, kept) = unprotect_in_place(&sad, &wire, IpAddr::V4(OUT4_R));
    assert_eq!(r, Ok(bundle::UdpUnprotected::NeedsHeaders));
    assert_eq!(data, &wire[28..]);
    assert!(kept);
    assert_eq!(sad.get(i).counters.snapshot().dropped, 0);
    assert_eq!(roundtrip_wire(&sad, &wire), pkt);

    // A tunnel SA takes only datagrams to its local end (as `unprotect`): another destination finds no SA, and
    // the datagram still opens afterwards.
    let cfg = Cfg::new(suite, Case::Tun44.mode()).encap(true);
    let (sad, o, i) = cfg.pair();
    let pkt = Case::Tun44.packet(6, 500);
    let wire = protect(&sad, &[o], &pkt).unwrap();
    let (r, _, _) = unprotect_in_place(&sad, &wire, IpAddr::V4(OUT4_L));
    assert_eq!(r, Err(D::UnknownSpi));
    assert_eq!(sad.get(i).counters.snapshot().dropped, 1);
    let (r, data, _) = unprotect_in_place(&sad, &wire, IpAddr::V4(OUT4_R));
    assert!(matches!(r, Ok(bundle::UdpUnprotected::Packet(_))), "{r:?}");
    assert_eq!(data, pkt);

    // An SA for raw ESP does not take ESP in UDP.
    let cfg = Cfg::new(suite, Case::Tun44.mode());
    let (raw_sad, o, _) = cfg.pair();
    let mut udp_wire = protect(&sad, &[o], &pkt).unwrap();
    let esp_at = l3_len(&udp_wire) + 8;
    let raw = protect(&raw_sad, &[o], &pkt).unwrap();
    udp_wire.truncate(esp_at);
    udp_wire.extend_from_slice(&raw[l3_len(&raw)..]);
    let (r, _, _) = unprotect_in_place(&raw_sad, &udp_wire, IpAddr::V4(OUT4_R));
    assert_eq!(r, Err(D::Unsupported));

    // What else the NAT-T port carries: IKE (non-ESP marker), keepalives, runts; unknown SPIs.
    let with_payload = |p: &[u8]| {
        let mut w = wire[..esp_at].to_vec();
        w.extend_from_slice(p);
        w
    };
    for (p, want) in [
        (
            &[0u8, 0, 0, 0, 1, 2, 3, 4, 5][..],
            Ok(bundle::UdpUnprotected::NotEsp),
        ),
        (&[0xff][..], Ok(bundle::UdpUnprotected::NotEsp)),
        (&[0, 0, 0, 0, 1][..], Err(D::Malformed)),
        (&[1, 2, 3][..], Err(D::Malformed)),
        (&[][..], Err(D::Malformed)),
        (&[9, 9, 9, 9, 0, 0, 0, 1, 0, 0][..], Err(D::UnknownSpi)),
    ] {
        let (r, _, kept) = unprotect_in_place(&sad, &with_payload(p), IpAddr::V4(OUT4_R));
        assert_eq!(r, want, "{p:?}");
        assert!(kept);
    }

    // Every single-bit change of the datagram is refused, and the genuine one opens afterwards.
    let pkt = Case::Tun44.packet(17, 24);
    let wire = protect(&sad, &[o], &pkt).unwrap();
    for byte in esp_at..wire.len() {
        for bit in 0..8 {
            let mut w = wire.clone();
            w[byte] ^= 1 << bit;
            let (r, data, kept) = unprotect_in_place(&sad, &w, IpAddr::V4(OUT4_R));
            assert!(r.is_err(), "byte {byte} bit {bit}: {r:?}");
            assert!(kept && !contains(&data, MARKER), "byte {byte} bit {bit}");
        }
    }
    let (r, data, _) = unprotect_in_place(&sad, &wire, IpAddr::V4(OUT4_R));
    assert!(matches!(r, Ok(bundle::UdpUnprotected::Packet(_))), "{r:?}");
    assert_eq!(data, pkt);
}

/// Unprotects a whole received packet that must open; returns what it opened to.
fn roundtrip_wire(sad: &Sad, wire: &[u8]) -> Vec<u8> {
    let (r, back) = unprotect(sad, wire);
    assert!(matches!(r, Ok(Unprotected::Packet(_))), "{r:?}");
    back
}

#[test]
fn tunnel_esp_in_udp_is_sealed_as_a_datagram_payload_for_sockets() {
    for name in ESP_SUITES {
        for case in [Case::Tun44, Case::Tun66, Case::Tun46, Case::Tun64] {
            let cfg = Cfg::new(esp_suite(name), case.mode()).encap(true);
            // Two identical SA pairs: one seals whole packets, the other datagram payloads.
            let (whole, o, _) = cfg.pair();
            let (sockets, o2, i2) = cfg.pair();
            for size in SIZES {
                let ctx = format!("{name} {case:?} {size}");
                let pkt = case.packet(17, size);
                let wire = protect(&whole, &[o], &pkt).unwrap();
                let mut b = PacketBuf::from_slice(&pkt, 256, 2048);
                let r = bundle::protect_for_sockets(&sockets, &[o2], &mut b, NOW).unwrap();
                let (local, remote) = match case.mode() {
                    Mode::Tunnel { local, remote } => (local, remote),
                    Mode::Transport => unreachable!(),
                };
                assert_eq!(
                    r,
                    bundle::Protected::UdpPayload {
                        src: local,
                        sport: NAT_T,
                        to: std::net::SocketAddr::new(remote, NAT_T),
                    },
                    "{ctx}"
                );
                let payload = &wire[l3_len(&wire) + 8..];
                if esp_suite_counter_iv(name) {
                    // Counter IVs: the same bytes as the whole packet's UDP payload.
                    assert_eq!(hex::encode(b.data()), hex::encode(payload), "{ctx}");
                } else {
                    assert_eq!(b.len(), payload.len(), "{ctx}");
                }
                // And it opens, where it lies, to the packet.
                let mut w = wire[..l3_len(&wire) + 8].to_vec();
                w.extend_from_slice(b.data());
                let (r, data, _) = unprotect_in_place(&sockets, &w, outer_dst(case));
                assert!(
                    matches!(r, Ok(bundle::UdpUnprotected::Packet(u)) if u.matches(&[i2])),
                    "{ctx}: {r:?}"
                );
                assert_eq!(data, pkt, "{ctx}");
            }
        }
    }
    // Transport-mode ESP in UDP: the datagram's payload too, from the packet's source to its destination (no
    // headers written to be parsed back).
    for name in ESP_SUITES {
        for case in [Case::Tr4, Case::Tr6] {
            let cfg = Cfg::new(esp_suite(name), Mode::Transport).encap(true);
            let (whole, o, _) = cfg.pair();
            let (sockets, o2, i2) = cfg.pair();
            for size in SIZES {
                let ctx = format!("transport {name} {case:?} {size}");
                let pkt = case.packet(17, size);
                let (src, dst): (IpAddr, IpAddr) = if case.inner_v6() {
                    (
                        <[u8; 16]>::try_from(&pkt[8..24]).unwrap().into(),
                        <[u8; 16]>::try_from(&pkt[24..40]).unwrap().into(),
                    )
                } else {
                    (
                        <[u8; 4]>::try_from(&pkt[12..16]).unwrap().into(),
                        <[u8; 4]>::try_from(&pkt[16..20]).unwrap().into(),
                    )
                };
                let wire = protect(&whole, &[o], &pkt).unwrap();
                let mut b = PacketBuf::from_slice(&pkt, 256, 2048);
                let r = bundle::protect_for_sockets(&sockets, &[o2], &mut b, NOW).unwrap();
                assert_eq!(
                    r,
                    bundle::Protected::UdpPayload {
                        src,
                        sport: NAT_T,
                        to: std::net::SocketAddr::new(dst, NAT_T),
                    },
                    "{ctx}"
                );
                let payload = &wire[l3_len(&wire) + 8..];
                if esp_suite_counter_iv(name) {
                    assert_eq!(hex::encode(b.data()), hex::encode(payload), "{ctx}");
                } else {
                    assert_eq!(b.len(), payload.len(), "{ctx}");
                }
                // With the headers the receiver sees, it opens to the packet.
                let mut w = wire[..l3_len(&wire) + 8].to_vec();
                w.extend_from_slice(b.data());
                let (r, back) = unprotect(&sockets, &w);
                assert!(
                    matches!(r, Ok(Unprotected::Packet(u)) if u.matches(&[i2])),
                    "{ctx}: {r:?}"
                );
                assert_eq!(back, pkt, "{ctx}");
            }
        }
    }
    // Raw ESP, AH: whole packets, as `protect` makes them.
    for cfg in [
        Cfg::new(esp_suite("aes128gcm16"), Case::Tun44.mode()),
        Cfg::new(ah_suite("sha256"), Case::Tun44.mode()),
    ] {
        let case = Case::Tun44;
        let (whole, o, _) = cfg.pair();
        let (sockets, o2, _) = cfg.pair();
        let pkt = case.packet(6, 300);
        let wire = protect(&whole, &[o], &pkt).unwrap();
        let mut b = PacketBuf::from_slice(&pkt, 256, 2048);
        let r = bundle::protect_for_sockets(&sockets, &[o2], &mut b, NOW);
        assert_eq!(r, Ok(bundle::Protected::Packet), "{:?}", cfg.suite);
        // The same packet but for the IPv4 identification (each SA draws its own) and so the header checksum,
        // and AH's ICV, which covers the identification.
        let (d, w) = (b.data(), &wire[..]);
        assert_eq!(d.len(), w.len(), "{:?}", cfg.suite);
        let end = if matches!(cfg.suite, Suite::Ah(_)) {
            32
        } else {
            d.len()
        };
        assert!(
            d[..4] == w[..4] && d[6..10] == w[6..10] && d[12..end] == w[12..end],
            "{:?}",
            cfg.suite
        );
    }
}

/// Suites whose IV is the sequence number (so two SAs with the same keys seal the same bytes).
fn esp_suite_counter_iv(name: &str) -> bool {
    name.contains("gcm")
        || name.contains("gmac")
        || name.contains("chacha")
        || name.starts_with("null")
}

/// An SA holds no key schedule until it first seals or opens (a gateway's idle SAs hold only their keys), and
/// keys that do not fit the suite are still refused when the SA is built.
#[test]
fn key_schedules_are_built_on_first_use_and_checked_at_build() {
    let cfg = Cfg::new(esp_suite("aes128gcm16"), Mode::Transport);
    let (sad, o, i) = cfg.pair();
    assert!(
        !sad.out(o).keyed() && !sad.inb(i).keyed(),
        "nothing sealed or opened yet"
    );
    let pkt = ipv4([10, 0, 0, 1], [10, 0, 0, 2], 17, &[], &l4(17, 64));
    roundtrip(&sad, o, i, &pkt);
    assert!(sad.out(o).keyed() && sad.inb(i).keyed());
    let mut bad = cfg.params(Direction::Out);
    bad.enc_key.pop();
    assert!(
        OutboundSa::new(bad, NOW, &mut OsRng).is_err(),
        "a short key is refused at build"
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Length on the wire, before sealing

/// Protects `pkt` for sockets and checks it against [`bundle::on_wire`]'s prediction: the IP packet's length (a
/// socket's IP and UDP headers counted for ESP in UDP) and its destination.
fn check_on_wire(sad: &Sad, bundle: &[OutIdx], pkt: &[u8], ctx: &str) {
    let predicted = bundle::on_wire(sad, bundle, pkt, pkt.len()).expect(ctx);
    let mut b = PacketBuf::from_slice(pkt, 256, 4096);
    let (len, dst) = match bundle::protect_for_sockets(sad, bundle, &mut b, NOW).expect(ctx) {
        bundle::Protected::Packet => (b.len(), netveil_wire::ip::dst_addr(b.data()).unwrap()),
        bundle::Protected::UdpPayload { to, .. } => {
            (b.len() + 8 + if to.is_ipv6() { 40 } else { 20 }, to.ip())
        }
    };
    assert_eq!((predicted.len, predicted.dst), (len, dst), "{ctx}");
}

/// The same bundle sealed twice, from the bytes and from the headers parsed once ([`bundle::protect_parsed`],
/// [`bundle::protect_for_sockets_parsed`], [`bundle::on_wire_parsed`]): `make` builds the SA database, twice alike
/// (the same seeded randomness), and every packet comes out byte for byte the same either way.
fn check_parsed(
    make: &dyn Fn(&mut Sad, &mut dyn netveil_crypto::rand::Rng) -> Vec<OutIdx>,
    pkts: &[Vec<u8>],
    ctx: &str,
) {
    let seed = [7u8; 32];
    let (mut a, mut b) = (Sad::default(), Sad::default());
    let bundle = make(
        &mut a,
        &mut netveil_crypto::rand::SeededRng::from_seed(seed),
    );
    assert_eq!(
        make(
            &mut b,
            &mut netveil_crypto::rand::SeededRng::from_seed(seed)
        ),
        bundle
    );
    for pkt in pkts {
        let h = netveil_wire::ip::Headers::parse(pkt).expect(ctx);
        for len in [pkt.len(), pkt.len() + 1, pkt.len() + 100] {
            assert_eq!(
                bundle::on_wire(&a, &bundle, pkt, len).expect(ctx),
                bundle::on_wire_parsed(&a, &bundle, &h, len).expect(ctx),
                "{ctx}"
            );
        }
        let (mut x, mut y) = (
            PacketBuf::from_slice(pkt, 256, 4096),
            PacketBuf::from_slice(pkt, 256, 4096),
        );
        bundle::protect(&a, &bundle, &mut x, NOW).expect(ctx);
        bundle::protect_parsed(&b, &bundle, &mut y, NOW, &h).expect(ctx);
        assert_eq!(x.data(), y.data(), "{ctx}");
        let (mut x, mut y) = (
            PacketBuf::from_slice(pkt, 256, 4096),
            PacketBuf::from_slice(pkt, 256, 4096),
        );
        assert_eq!(
            bundle::protect_for_sockets(&a, &bundle, &mut x, NOW).expect(ctx),
            bundle::protect_for_sockets_parsed(&b, &bundle, &mut y, NOW, &h).expect(ctx),
            "{ctx}"
        );
        assert_eq!(x.data(), y.data(), "{ctx}");
    }
}

#[test]
fn parsed_headers_seal_as_the_bytes_do_for_every_suite_mode_family_encap_tfc_and_bundle() {
    let pkts = |case: Case, proto: u8| -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = SIZES.iter().map(|&n| case.packet(proto, n)).collect();
        // Bytes past the packet's own length (transport mode drops them) and a DSCP/ECN byte to copy.
        let mut p = case.packet(proto, 40);
        p.extend_from_slice(&[0xee; 5]);
        p[1] |= 0xb8;
        v.push(p);
        v
    };
    for name in ESP_SUITES {
        for case in CASES {
            for encap in [false, true] {
                for tfc in [0u16, 700] {
                    let mut cfg = Cfg::new(esp_suite(name), case.mode()).encap(encap);
                    cfg.tfc = tfc;
                    check_parsed(
                        &|sad, rng| vec![cfg.add_with(sad, rng).0],
                        &pkts(case, 17),
                        &format!("{name} {case:?} {encap} {tfc}"),
                    );
                }
            }
        }
    }
    for name in AH_SUITES {
        for case in CASES {
            let cfg = Cfg::new(ah_suite(name), case.mode());
            check_parsed(
                &|sad, rng| vec![cfg.add_with(sad, rng).0],
                &pkts(case, 6),
                &format!("ah {name} {case:?}"),
            );
        }
    }
    // Bundles: the view is the innermost SA's; the next one reads the header the first one wrote.
    for v6 in [false, true] {
        let tr = if v6 { Case::Tr6Ext } else { Case::Tr4 };
        let tun = if v6 { Case::Tun66 } else { Case::Tun44 };
        for (case, esp_name, encap, ah_mode) in [
            (tr, "aes128-sha256", false, Mode::Transport),
            (tun, "aes256gcm16", false, Mode::Transport),
            (tun, "3des-sha1", true, Mode::Transport),
            (tr, "aes128gcm16", true, Case::Tun66.mode()),
        ] {
            let mut e = Cfg::new(esp_suite(esp_name), case.mode()).encap(encap);
            e.spi = 0x100;
            let mut a = Cfg::new(ah_suite("sha256"), ah_mode);
            a.spi = 0x200;
            check_parsed(
                &|sad, rng| vec![e.add_with(sad, rng).0, a.add_with(sad, rng).0],
                &pkts(case, 6),
                &format!("bundle {case:?} {esp_name} {encap}"),
            );
            // ESP in UDP outermost, after AH: the socket's payload, made from the bytes AH left.
            let mut u = Cfg::new(esp_suite("aes128gcm16"), tun.mode()).encap(true);
            u.spi = 0x300;
            check_parsed(
                &|sad, rng| vec![a.add_with(sad, rng).0, u.add_with(sad, rng).0],
                &pkts(tr, 6),
                &format!("bundle ah+udp {tr:?}"),
            );
        }
    }
}

#[test]
fn on_wire_predicts_what_leaves_for_every_suite_mode_family_encap_tfc_and_bundle() {
    let mut n = 0;
    for name in ESP_SUITES {
        for case in CASES {
            for encap in [false, true] {
                for tfc in [0u16, 700] {
                    let mut cfg = Cfg::new(esp_suite(name), case.mode()).encap(encap);
                    cfg.tfc = tfc;
                    let (sad, o, _) = cfg.pair();
                    for size in SIZES {
                        let pkt = case.packet(17, size);
                        check_on_wire(
                            &sad,
                            &[o],
                            &pkt,
                            &format!("{name} {case:?} {encap} {tfc} {size}"),
                        );
                        n += 1;
                    }
                }
            }
        }
    }
    for name in AH_SUITES {
        for case in CASES {
            let (sad, o, _) = Cfg::new(ah_suite(name), case.mode()).pair();
            for size in SIZES {
                check_on_wire(
                    &sad,
                    &[o],
                    &case.packet(6, size),
                    &format!("ah {name} {case:?} {size}"),
                );
                n += 1;
            }
        }
    }
    // Bundles: ESP transport inside AH transport, ESP tunnel (in UDP or not) inside AH transport.
    for v6 in [false, true] {
        let tr = if v6 { Case::Tr6Ext } else { Case::Tr4 };
        let tun = if v6 { Case::Tun66 } else { Case::Tun44 };
        for (case, esp_name, encap) in [
            (tr, "aes128-sha256", false),
            (tun, "aes256gcm16", false),
            (tun, "3des-sha1", true),
        ] {
            let mut sad = Sad::default();
            let mut e = Cfg::new(esp_suite(esp_name), case.mode()).encap(encap);
            e.spi = 0x100;
            let mut a = Cfg::new(ah_suite("sha256"), Mode::Transport);
            a.spi = 0x200;
            let (eo, _) = e.add(&mut sad);
            let (ao, _) = a.add(&mut sad);
            for size in SIZES {
                let pkt = case.packet(6, size);
                check_on_wire(
                    &sad,
                    &[eo, ao],
                    &pkt,
                    &format!("bundle {case:?} {esp_name} {size}"),
                );
                n += 1;
            }
        }
    }
    assert_eq!(n, SIZES.len() * (18 * 7 * 2 * 2 + 5 * 7 + 2 * 3));
}
