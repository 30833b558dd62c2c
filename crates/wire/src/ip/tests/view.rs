//! [`Headers`] against the functions it replaces on a packet path: on known packets, and on a seeded stream of
//! generated and mutated ones, it parses exactly what [`flow_key`] parses, and every accessor agrees with the free
//! function of the same name wherever both succeed.

use crate::ip::*;
use crate::{ip_proto, ipv4, ipv6, Error};
use std::net::IpAddr;

/// Every accessor of the view of `p` against the free functions and layouts on the same bytes; the view parses
/// where `flow_key` does, with the same error.
fn check(p: &[u8]) {
    let h = Headers::parse(p);
    let f = flow_key(p);
    assert_eq!(h.map(|h| h.flow()), f, "{p:02x?}");
    let Ok(h) = h else { return };
    assert_eq!(version(p), Some(h.version()));
    assert_eq!(h.is_ipv6(), h.version() == 6);
    assert_eq!(addrs(p), Some(h.addrs()));
    assert_eq!(
        (dst_addr(p), h.src_addr(), h.dst_addr()),
        (Some(h.dst_addr()), h.addrs().0, h.addrs().1)
    );
    assert_eq!(dscp_ecn_df(p), h.dscp_ecn_df());
    assert_eq!(own_len(p), Some(h.total_len()));
    assert_eq!(Layout::fixed(p), Ok(h.fixed()));
    assert_eq!(Layout::before_ipsec(p), Ok(h.before_ipsec()));
    let pk = Packet::new_checked(p).unwrap();
    assert_eq!(
        (pk.next_header(), pk.total_len()),
        (h.protocol(), h.total_len())
    );
    assert_eq!(h.header_len(), h.fixed().header_len);
    assert_eq!(h.fragment(), f.unwrap().frag);
    assert_eq!(h.upper_proto(), f.unwrap().proto);
}

#[test]
fn known_packets() {
    let syn = ipv4::tests::SYN;
    let h = Headers::parse(&syn).unwrap();
    assert_eq!(h.version(), 4);
    assert_eq!(h.src_addr(), "10.0.0.2".parse::<IpAddr>().unwrap());
    assert_eq!(h.dst_addr(), "93.184.216.34".parse::<IpAddr>().unwrap());
    assert_eq!((h.protocol(), h.header_len(), h.total_len()), (6, 20, 60));
    let f = h.flow();
    assert_eq!((f.src_port, f.dst_port, f.l4_offset), (51234, 80, 20));
    check(&syn);

    let v6 = ipv6::tests::echo_ext();
    let h = Headers::parse(&v6).unwrap();
    assert_eq!(
        (h.version(), h.protocol(), h.header_len()),
        (6, ip_proto::HOPOPT, 40)
    );
    assert_eq!(
        (
            h.before_ipsec().header_len,
            h.upper_proto(),
            h.flow().l4_offset
        ),
        (64, ip_proto::ICMPV6, 64)
    );
    assert_eq!(h.dscp_ecn_df(), (0, false));
    check(&v6);

    // Fragment -> AH -> UDP: IPsec's header goes after the fragment header; the flow steps over AH to UDP.
    let mut v = vec![0u8; 40];
    v[0] = 0x6b;
    v[1] = 0x80;
    v[6] = ip_proto::IPV6_FRAG;
    v.extend_from_slice(&[ip_proto::AH, 0, 0, 1, 0, 0, 0, 7]);
    v.extend_from_slice(&[ip_proto::UDP, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
    v.extend_from_slice(&[0x12, 0x34, 0x56, 0x78, 0, 12, 0, 0, 1, 2, 3, 4]);
    let pl = (v.len() - 40) as u16;
    v[4..6].copy_from_slice(&pl.to_be_bytes());
    let h = Headers::parse(&v).unwrap();
    let l = h.before_ipsec();
    assert_eq!(
        (
            l.header_len,
            l.next_header_offset,
            l.next_header,
            l.fragment
        ),
        (48, 40, ip_proto::AH, true)
    );
    let f = h.flow();
    assert_eq!(
        (f.proto, f.l4_offset, f.src_port, f.dst_port),
        (ip_proto::UDP, 60, 0x1234, 0x5678)
    );
    assert_eq!(
        h.fragment(),
        Some(Fragment {
            ident: 7,
            first: true
        })
    );
    assert_eq!(h.dscp_ecn_df(), (0xb8, false));
    check(&v);

    // What flow_key refuses, the view refuses: cut short anywhere, a UDP header without its ports.
    for n in 0..v.len() {
        check(&v[..n]);
        assert!(Headers::parse(&v[..n]).is_err());
    }
    let mut short = syn;
    short[2..4].copy_from_slice(&22u16.to_be_bytes());
    assert_eq!(Headers::parse(&short), Err(Error::Truncated));
    assert!(Layout::before_ipsec(&short).is_ok());
    assert_eq!(Headers::parse(&[]), Err(Error::Truncated));
    assert_eq!(Headers::parse(&[0x50; 40]), Err(Error::Malformed));
    // Trailing bytes past the header's length are not the packet's.
    let mut long = syn.to_vec();
    long.extend_from_slice(&[0xee; 9]);
    assert_eq!(Headers::parse(&long).unwrap().total_len(), 60);
    check(&long);
    // One cache line, handed down by reference.
    assert!(std::mem::size_of::<Headers>() <= 64);
}

/// xorshift64*: a small seeded generator, so a failure names its input and reruns.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
    fn proto(&mut self) -> u8 {
        const P: [u8; 12] = [
            ip_proto::TCP,
            ip_proto::UDP,
            SCTP,
            ip_proto::ICMP,
            ip_proto::ICMPV6,
            ip_proto::ESP,
            ip_proto::AH,
            ip_proto::HOPOPT,
            ip_proto::IPV6_ROUTE,
            ip_proto::IPV6_FRAG,
            ip_proto::IPV6_OPTS,
            ip_proto::IPIP,
        ];
        if self.chance(8) {
            self.byte()
        } else {
            P[self.below(P.len())]
        }
    }
}

/// An IPv4 packet, mostly well formed: options, fragments, a transport header of a few bytes or none.
fn gen_v4(r: &mut Rng) -> Vec<u8> {
    let ihl = if r.chance(20) {
        r.below(16)
    } else {
        5 + r.below(3) * r.below(3)
    };
    let body = r.below(14);
    let mut p: Vec<u8> = (0..(ihl * 4).max(20) + body).map(|_| r.byte()).collect();
    p[0] = 0x40 | ihl as u8;
    let total = if r.chance(10) {
        r.below(p.len() + 8)
    } else {
        p.len()
    };
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    if !r.chance(4) {
        // Not a fragment, a first fragment, a later one.
        p[6] &= 0x40;
        p[7] = 0;
        match r.below(4) {
            0 => p[6] |= 0x20,
            1 => p[7] = 1 + r.byte() % 8,
            _ => {}
        }
    }
    p[9] = r.proto();
    p
}

/// An IPv6 packet with a chain of extension headers, mostly well formed.
fn gen_v6(r: &mut Rng) -> Vec<u8> {
    let mut p: Vec<u8> = (0..40).map(|_| r.byte()).collect();
    p[0] = 0x60 | (p[0] & 0x0f);
    let mut nh_at = ipv6::NEXT_HEADER_OFFSET;
    for _ in 0..r.below(5) {
        const EXT: [u8; 5] = [
            ip_proto::HOPOPT,
            ip_proto::IPV6_ROUTE,
            ip_proto::IPV6_FRAG,
            ip_proto::IPV6_OPTS,
            ip_proto::AH,
        ];
        let kind = EXT[r.below(EXT.len())];
        p[nh_at] = kind;
        let at = p.len();
        let len_byte = if r.chance(10) {
            r.byte()
        } else {
            r.below(2) as u8
        };
        let len = match kind {
            ip_proto::IPV6_FRAG => 8,
            ip_proto::AH => (len_byte as usize + 2) * 4,
            _ => (len_byte as usize + 1) * 8,
        };
        p.extend((0..len.min(64)).map(|_| r.byte()));
        if p.len() > at + 1 {
            p[at + 1] = len_byte;
        }
        if kind == ip_proto::IPV6_FRAG && p.len() >= at + 4 && !r.chance(3) {
            // Offset 0 or small, MF or not.
            p[at + 2] = 0;
            p[at + 3] = (r.byte() % 3) << 3 | r.byte() & 1;
        }
        nh_at = at;
    }
    p[nh_at] = r.proto();
    p.extend((0..r.below(14)).map(|_| r.byte()));
    let pl = if r.chance(10) {
        r.below(p.len())
    } else {
        p.len() - 40
    };
    p[4..6].copy_from_slice(&(pl as u16).to_be_bytes());
    p
}

/// Generated packets, cut short, padded, with bytes flipped, and plain noise: the view and the free functions
/// agree on every one that parses, and it parses exactly where `flow_key` does.
#[test]
fn agrees_with_the_free_functions_on_generated_packets() {
    let mut r = Rng(0x6e65_7476_6569_6c21);
    let (mut parsed, mut v6, mut ext) = (0, 0, 0);
    for _ in 0..200_000 {
        let mut p = match r.below(9) {
            0 => (0..r.below(80)).map(|_| r.byte()).collect(),
            1..=4 => gen_v4(&mut r),
            _ => gen_v6(&mut r),
        };
        if r.chance(6) {
            for _ in 0..1 + r.below(3) {
                let i = r.below(p.len().max(1));
                if let Some(b) = p.get_mut(i) {
                    *b ^= 1 << r.below(8);
                }
            }
        }
        match r.below(8) {
            0 => p.truncate(r.below(p.len() + 1)),
            1 => p.extend((0..r.below(8)).map(|_| r.byte())),
            _ => {}
        }
        check(&p);
        if let Ok(h) = Headers::parse(&p) {
            parsed += 1;
            v6 += h.is_ipv6() as usize;
            ext += (h.before_ipsec().header_len > h.header_len()) as usize;
        }
    }
    // The stream reaches what it is meant to: many packets that parse, of both families, with extension headers.
    assert!(
        parsed > 60_000 && v6 > 20_000 && ext > 5_000,
        "{parsed} {v6} {ext}"
    );
}
