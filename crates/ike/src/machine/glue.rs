//! Conversions between the typed configuration and proposal modules and the wire payloads: proposals to and from
//! SA payload proposals, traffic selector specs to and from TS payloads (with narrowing), identities to and from
//! ID payloads, NAT detection hashes and the stateless cookie.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use netveil_crypto::mac::sha1_digest;

use crate::config::TsSpec;
use crate::message::sa::protocol_id;
use crate::message::{self, AddrRange, TrafficSelector};
use crate::proposal::{Proposal, Protocol, Transform, TransformType};

pub use crate::id::{authenticated_id, id_payload, id_string, identity_string, ID_TEXT_MAX};

/// An SA payload proposal (number `number`, SPI `spi`) from a typed proposal, its transforms in strongSwan's
/// order (ENCR, INTEG, PRF, KE, ESN, then the additional key exchanges; RFC 7296 leaves the order free).
pub fn to_wire(p: &Proposal, number: u8, spi: &[u8]) -> message::Proposal {
    let mut ts = p.transforms();
    ts.sort_by_key(|t| match t.ty {
        TransformType::Encr => 0,
        TransformType::Integ => 1,
        TransformType::Prf => 2,
        TransformType::Ke => 3,
        TransformType::Esn => 4,
        TransformType::AddKe(n) => 4 + n,
    });
    message::Proposal {
        number,
        protocol_id: p.protocol().id(),
        spi: spi.to_vec(),
        transforms: ts
            .iter()
            .map(|t| {
                let w = message::Transform::new(t.ty.number(), t.id);
                match t.key_bits {
                    Some(bits) => w.with_key_length(bits),
                    None => w,
                }
            })
            .collect(),
    }
}

/// Our proposals as an SA payload, numbered 1, 2, ...; each with `spi`.
pub fn sa_payload(ps: &[Proposal], spi: &[u8]) -> message::Sa {
    message::Sa {
        proposals: ps
            .iter()
            .enumerate()
            .map(|(i, p)| to_wire(p, (i + 1) as u8, spi))
            .collect(),
    }
}

/// A typed proposal from an SA payload proposal of `protocol`. `None` for another protocol, an unknown transform
/// type or id, an attribute other than a key length, or a proposal the proposal module refuses (RFC 7296 3.3.6:
/// such a proposal is skipped, not the whole SA).
pub fn from_wire(w: &message::Proposal, protocol: Protocol) -> Option<Proposal> {
    if w.protocol_id != protocol.id() {
        return None;
    }
    let mut ts = Vec::with_capacity(w.transforms.len());
    for t in &w.transforms {
        let ty = TransformType::from_number(t.transform_type)?;
        let key_bits = t.key_length();
        if t.attributes.len() != usize::from(key_bits.is_some()) {
            return None;
        }
        ts.push(Transform {
            ty,
            id: t.transform_id,
            key_bits,
        });
    }
    Proposal::from_transforms(protocol, &ts).ok()
}

/// The IKE proposals of an SA payload, with their index (skipping those [`from_wire`] refuses; IKE_SA_INIT
/// proposals carry no SPI).
pub fn ike_proposals(sa: &message::Sa) -> Vec<(usize, Proposal)> {
    sa.proposals
        .iter()
        .enumerate()
        .filter(|(_, w)| w.spi.is_empty())
        .filter_map(|(i, w)| from_wire(w, Protocol::Ike).map(|p| (i, p)))
        .collect()
}

/// The ESP proposals of an SA payload with their SPI, which must be 4 bytes and not 0 (others are skipped).
pub fn esp_proposals(sa: &message::Sa) -> Vec<(usize, Proposal, u32)> {
    sa.proposals
        .iter()
        .enumerate()
        .filter(|(_, w)| w.protocol_id == protocol_id::ESP)
        .filter_map(|(i, w)| {
            let spi = u32::from_be_bytes(w.spi.as_slice().try_into().ok()?);
            (spi != 0).then_some(())?;
            from_wire(w, Protocol::Esp).map(|p| (i, p, spi))
        })
        .collect()
}

/// `p` without its key exchange methods (an ESP proposal in IKE_AUTH carries none: its keys come from the IKE SA's
/// exchange, RFC 7296 1.2).
pub fn without_ke(p: &Proposal) -> Proposal {
    let mut ts = p.transforms();
    ts.retain(|t| !matches!(t.ty, TransformType::Ke | TransformType::AddKe(_)));
    Proposal::from_transforms(p.protocol(), &ts).unwrap_or_else(|_| p.clone())
}

/// The proposals as strongSwan's syntax prints them.
pub fn names(ps: &[Proposal]) -> Vec<String> {
    ps.iter().map(|p| p.to_string()).collect()
}

// ---- traffic selectors ----

fn ip_u128(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u128::from(u32::from(v)),
        IpAddr::V6(v) => u128::from(v),
    }
}

/// Address bits of the family of `a`.
fn bits(v6: bool) -> u32 {
    if v6 {
        128
    } else {
        32
    }
}

fn ip_of(v6: bool, x: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(x))
    } else {
        IpAddr::V4(Ipv4Addr::from(x as u32))
    }
}

/// A selector as an inclusive address range, protocol and port range (`None` for what we do not interpret).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub v6: bool,
    pub start: u128,
    pub end: u128,
    pub protocol: u8,
    pub ports: (u16, u16),
}

impl Range {
    pub fn of_spec(s: &TsSpec) -> Range {
        let v6 = s.addr.is_ipv6();
        let width = bits(v6);
        let prefix = u32::from(s.prefix).min(width);
        let host = if prefix == width {
            0
        } else {
            (u128::MAX >> (128 - width)) >> prefix
        };
        let start = ip_u128(s.addr) & !host;
        Range {
            v6,
            start,
            end: start | host,
            protocol: s.protocol,
            ports: s.ports,
        }
    }

    pub fn of_selector(t: &TrafficSelector) -> Option<Range> {
        match t {
            TrafficSelector::Range {
                ip_protocol,
                start_port,
                end_port,
                addrs,
            } => {
                let (v6, start, end) = match addrs {
                    AddrRange::V4 { start, end } => (
                        false,
                        u128::from(u32::from(*start)),
                        u128::from(u32::from(*end)),
                    ),
                    AddrRange::V6 { start, end } => (true, u128::from(*start), u128::from(*end)),
                };
                Some(Range {
                    v6,
                    start,
                    end,
                    protocol: *ip_protocol,
                    ports: (*start_port, *end_port),
                })
            }
            TrafficSelector::Other { .. } => None,
        }
    }

    pub fn selector(&self) -> TrafficSelector {
        let addrs = if self.v6 {
            AddrRange::V6 {
                start: Ipv6Addr::from(self.start),
                end: Ipv6Addr::from(self.end),
            }
        } else {
            AddrRange::V4 {
                start: Ipv4Addr::from(self.start as u32),
                end: Ipv4Addr::from(self.end as u32),
            }
        };
        TrafficSelector::Range {
            ip_protocol: self.protocol,
            start_port: self.ports.0,
            end_port: self.ports.1,
            addrs,
        }
    }

    /// The intersection of two selectors (`None` when empty: other families, protocols or disjoint ranges).
    pub fn intersect(&self, o: &Range) -> Option<Range> {
        if self.v6 != o.v6 {
            return None;
        }
        let protocol = match (self.protocol, o.protocol) {
            (0, p) | (p, 0) => p,
            (a, b) if a == b => a,
            _ => return None,
        };
        // Opaque port ranges (65535, 0) intersect nothing here.
        let ports = (self.ports.0.max(o.ports.0), self.ports.1.min(o.ports.1));
        let (start, end) = (self.start.max(o.start), self.end.min(o.end));
        (ports.0 <= ports.1 && start <= end).then_some(Range {
            v6: self.v6,
            start,
            end,
            protocol,
            ports,
        })
    }

    /// Whether `self` lies inside `o`.
    pub fn within(&self, o: &Range) -> bool {
        self.intersect(o) == Some(*self)
    }

    /// The range as prefixes (a range that is not one prefix becomes the fewest prefixes that cover exactly it).
    pub fn specs(&self) -> Vec<TsSpec> {
        let width = bits(self.v6);
        let span = |k: u32| {
            if k >= 128 {
                u128::MAX
            } else {
                (1u128 << k) - 1
            }
        };
        let mut out = Vec::new();
        let mut at = self.start;
        loop {
            // The largest block aligned at `at` that ends at or before `end`.
            let mut k = if at == 0 {
                width
            } else {
                at.trailing_zeros().min(width)
            };
            while k > 0 && self.end - at < span(k) {
                k -= 1;
            }
            out.push(TsSpec {
                addr: ip_of(self.v6, at),
                prefix: (width - k) as u8,
                protocol: self.protocol,
                ports: self.ports,
            });
            let last = at + span(k);
            if last >= self.end || out.len() >= message::MAX_TRAFFIC_SELECTORS {
                break;
            }
            at = last + 1;
        }
        out
    }
}

/// The TS payload for configured specs.
pub fn ts_payload(specs: &[TsSpec]) -> message::Ts {
    message::Ts {
        selectors: specs.iter().map(|s| Range::of_spec(s).selector()).collect(),
    }
}

/// Narrowing (RFC 7296 2.9): every non-empty intersection of one of the peer's selectors with one of ours.
pub fn narrow(theirs: &message::Ts, ours: &[TsSpec]) -> Vec<Range> {
    let mut out: Vec<Range> = Vec::new();
    for t in theirs.selectors.iter().filter_map(Range::of_selector) {
        for o in ours.iter().map(Range::of_spec) {
            if let Some(r) = t.intersect(&o) {
                if !out.contains(&r) {
                    out.push(r);
                }
            }
        }
    }
    out.truncate(message::MAX_TRAFFIC_SELECTORS);
    out
}

/// The specs covering `rs`.
pub fn specs(rs: &[Range]) -> Vec<TsSpec> {
    let mut out: Vec<TsSpec> = rs.iter().flat_map(Range::specs).collect();
    out.truncate(message::MAX_TRAFFIC_SELECTORS);
    out
}

/// The specs a TS payload names (selectors we do not interpret are left out).
/// The child of `conn` whose selectors the peer's TSi/TSr narrow to something non-empty (the first such, among the
/// children `allowed` lets through), with the narrowed ranges; or, if none, the failure naming both sets.
pub fn pick_child(
    conn: &crate::config::Connection,
    tsi: &message::Ts,
    tsr: &message::Ts,
    allowed: impl Fn(usize) -> bool,
) -> Result<(usize, Vec<Range>, Vec<Range>), crate::event::Failure> {
    let picked = conn
        .children
        .iter()
        .enumerate()
        .filter(|(k, _)| allowed(*k))
        .find_map(|(k, c)| {
            let i = narrow(tsi, &c.remote_ts);
            let r = narrow(tsr, &c.local_ts);
            (!i.is_empty() && !r.is_empty()).then_some((k, i, r))
        });
    picked.ok_or_else(|| {
        let ours = conn
            .children
            .iter()
            .flat_map(|c| c.local_ts.iter().chain(&c.remote_ts).copied())
            .collect();
        let mut theirs = ts_specs(tsi);
        theirs.extend(ts_specs(tsr));
        crate::event::Failure::TsUnacceptable { ours, theirs }
    })
}

pub fn ts_specs(ts: &message::Ts) -> Vec<TsSpec> {
    let rs: Vec<Range> = ts.selectors.iter().filter_map(Range::of_selector).collect();
    specs(&rs)
}

// ---- NAT detection ----

/// `SHA-1(SPIi | SPIr | IP | port)` (RFC 7296 2.23).
pub fn nat_hash(spi_i: u64, spi_r: u64, addr: SocketAddr) -> Vec<u8> {
    let ip = match addr.ip() {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    sha1_digest(&[
        &spi_i.to_be_bytes(),
        &spi_r.to_be_bytes(),
        &ip,
        &addr.port().to_be_bytes(),
    ])
    .to_vec()
}

// ---- the peer's refusals ----

/// The failure an error notify in a response means, said with what we can show: NO_PROPOSAL_CHOSEN with our
/// proposals, TS_UNACCEPTABLE with our selectors (a responder does not tell its own: `theirs` stays empty, and its
/// log has them), any other error by its name.
pub fn peer_refusal(
    n: &message::Notify,
    ours: impl FnOnce() -> Vec<String>,
    ours_ts: impl FnOnce() -> Vec<TsSpec>,
) -> crate::event::Failure {
    use crate::event::Failure;
    use crate::message::NotifyType;
    match n.notify_type {
        NotifyType::NO_PROPOSAL_CHOSEN => Failure::NoProposalChosen {
            ours: ours(),
            theirs: Vec::new(),
        },
        NotifyType::TS_UNACCEPTABLE => Failure::TsUnacceptable {
            ours: ours_ts(),
            theirs: Vec::new(),
        },
        t => Failure::PeerError {
            notify: t.0,
            name: t.name().unwrap_or("unknown").to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(a: &str, prefix: u8) -> TsSpec {
        TsSpec {
            addr: a.parse().unwrap(),
            prefix,
            protocol: 0,
            ports: (0, 65535),
        }
    }

    #[test]
    fn proposals_round_trip_through_the_sa_payload() {
        for s in [
            "aes256-sha256-x25519",
            "aes128gcm16-aes256gcm16-prfsha384-modp2048-x25519",
            "aes128-sha1-sha256-modp3072",
        ] {
            let p = Proposal::parse(Protocol::Ike, s).unwrap();
            let w = to_wire(&p, 3, &[]);
            assert_eq!(w.number, 3);
            assert_eq!(from_wire(&w, Protocol::Ike).as_ref(), Some(&p), "{s}");
            assert_eq!(from_wire(&w, Protocol::Esp), None, "{s}");
        }
        let e = Proposal::parse(Protocol::Esp, "aes256gcm16-esn").unwrap();
        let w = to_wire(&e, 1, &7u32.to_be_bytes());
        assert_eq!(w.protocol_id, protocol_id::ESP);
        let sa = message::Sa { proposals: vec![w] };
        assert_eq!(esp_proposals(&sa), vec![(0, e, 7)]);
    }

    #[test]
    fn esp_proposals_with_spi_zero_or_a_bad_size_are_skipped() {
        let e = Proposal::parse(Protocol::Esp, "aes128gcm16").unwrap();
        for spi in [vec![0, 0, 0, 0], vec![1, 2, 3], vec![]] {
            let sa = message::Sa {
                proposals: vec![to_wire(&e, 1, &spi)],
            };
            assert!(esp_proposals(&sa).is_empty(), "{spi:?}");
        }
    }

    #[test]
    fn narrowing_intersects_and_splits_ranges_into_prefixes() {
        let theirs = ts_payload(&[spec("10.0.0.0", 16)]);
        let n = narrow(&theirs, &[spec("10.0.1.0", 24), spec("192.168.0.0", 16)]);
        assert_eq!(specs(&n), vec![spec("10.0.1.0", 24)]);
        assert!(narrow(&theirs, &[spec("10.1.0.0", 16)]).is_empty());
        assert!(narrow(&theirs, &[spec("::", 0)]).is_empty());
        // 10.0.0.1 - 10.0.0.6 is 10.0.0.1/32, .2/31, .4/31, .6/32.
        let r = Range {
            v6: false,
            start: 0x0a00_0001,
            end: 0x0a00_0006,
            protocol: 0,
            ports: (0, 65535),
        };
        let got: Vec<(String, u8)> = r
            .specs()
            .iter()
            .map(|s| (s.addr.to_string(), s.prefix))
            .collect();
        assert_eq!(
            got,
            [
                ("10.0.0.1", 32),
                ("10.0.0.2", 31),
                ("10.0.0.4", 31),
                ("10.0.0.6", 32)
            ]
            .map(|(a, p)| (a.to_string(), p))
        );
        assert_eq!(Range::of_spec(&spec("::", 0)).specs(), vec![spec("::", 0)]);
        assert_eq!(
            Range::of_spec(&spec("0.0.0.0", 0)).specs(),
            vec![spec("0.0.0.0", 0)]
        );
    }

    #[test]
    fn protocols_and_ports_narrow_too() {
        let mut tcp80 = spec("10.0.0.0", 8);
        tcp80.protocol = 6;
        tcp80.ports = (80, 80);
        let theirs = ts_payload(&[spec("10.0.0.0", 24)]);
        let n = specs(&narrow(&theirs, &[tcp80]));
        assert_eq!(n.len(), 1);
        assert_eq!((n[0].protocol, n[0].ports, n[0].prefix), (6, (80, 80), 24));
        let mut udp = tcp80;
        udp.protocol = 17;
        assert!(narrow(&ts_payload(&[tcp80]), &[udp]).is_empty());
    }

    /// RFC 7296 2.23's hash over the SPIs, address and port (checked against an independent SHA-1: `sha1sum`
    /// of the 8+8+4+2 bytes below gives this value).
    #[test]
    fn nat_hash_covers_spis_address_and_port() {
        let a: SocketAddr = "192.0.2.1:500".parse().unwrap();
        let h = nat_hash(0x0102030405060708, 0, a);
        assert_eq!(
            h,
            hex::decode("644b4575455bd6fcc1efe2be8162a9218e448e5f").unwrap()
        );
        assert_ne!(
            h,
            nat_hash(0x0102030405060708, 0, "192.0.2.1:4500".parse().unwrap())
        );
        assert_ne!(h, nat_hash(0x0102030405060709, 0, a));
    }
}
