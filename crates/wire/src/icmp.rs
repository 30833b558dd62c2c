//! ICMP messages, generic over the version ([`V4`]: RFC 792, [`V6`]: RFC 4443): the two share their layout (type,
//! code, checksum, 4 bytes of message-specific data, payload) and differ in their message types and in the
//! checksum, which ICMPv6 computes over an IPv6 pseudo-header too. [`crate::icmpv4`] and [`crate::icmpv6`] name
//! the two (`icmpv4::Packet<T>` is `icmp::Packet<T, V4>`) and hold what is not shared: the type numbers, the
//! checksum methods, `emit` and ICMPv6's `mtu`.

use core::marker::PhantomData;

pub use crate::icmp_msg::{Family, Packet, Repr, HEADER_LEN, V4, V6};

/// Whether ICMPv4 type `t` is an error that quotes the packet it is about (RFC 792, RFC 1812 4.3.2): destination
/// unreachable (3), source quench (4), redirect (5), time exceeded (11), parameter problem (12).
pub fn is_error_v4(t: u8) -> bool {
    matches!(t, 3 | 4 | 5 | 11 | 12)
}

/// Whether ICMPv6 type `t` is an error (RFC 4443 2.1: types below 128; each quotes the packet it is about).
pub fn is_error_v6(t: u8) -> bool {
    t < 128
}

/// What a policy reads of the packet an ICMP error quotes (see [`error_quote`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quoted {
    pub src: std::net::IpAddr,
    pub dst: std::net::IpAddr,
    /// The quoted packet's upper-layer protocol (after IPv6 extension headers).
    pub proto: u8,
    /// 0 unless TCP, UDP or SCTP (as [`crate::ip::flow_key`] reads them).
    pub src_port: u16,
    pub dst_port: u16,
    /// Where the quoted packet starts in the error's IP packet.
    pub offset: usize,
}

impl Quoted {
    /// The flow the error belongs to: the quoted packet's with its ends swapped. An error goes back to the quoted
    /// packet's source, as a reply of its flow would, and RFC 4301 (section 6.2) has its SPD lookup made with
    /// those fields, so that the error is protected as its flow is.
    pub fn reversed(self) -> Quoted {
        Quoted {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            ..self
        }
    }
}

/// What [`error_quote`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorQuote {
    /// Not an ICMP error of the packet's family: another protocol, a message that quotes nothing (echo, a query),
    /// a fragment other than the first (no ICMP header), or not a packet [`crate::ip::flow_key`] reads.
    NotAnError,
    /// An error, and the packet it quotes.
    Quotes(Quoted),
    /// An error whose quote is not the beginning of a packet of the error's family with its ports: too short, a
    /// bad header length, another version, an IPv6 extension header cut short, a fragment other than the first
    /// (whose ports are not there). Linux sends no such error; a caller that must know the quoted flow drops it.
    Unreadable,
}

/// The packet that the ICMP (IPv4) or ICMPv6 (IPv6) error in the IP packet `packet` quotes, as a policy reads it:
/// addresses, protocol, ports (RFC 4301 section 6.2 judges an error by them). The quote is what an error holds:
/// the quoted packet's headers and the beginning of its payload, so its length fields say more than is there; it
/// must hold the IP header (and IPv6 extension headers) and, for TCP, UDP and SCTP, the ports. A first fragment of
/// an error is read as far as it goes. Never panics; allocates nothing.
pub fn error_quote(packet: &[u8]) -> ErrorQuote {
    match crate::ip::flow_key(packet) {
        Ok(f) => error_quote_of(packet, &f),
        Err(_) => ErrorQuote::NotAnError,
    }
}

/// [`error_quote`] of a packet whose [`crate::ip::flow_key`] the caller has already read (`f`): its headers are
/// not parsed again.
pub fn error_quote_of(packet: &[u8], f: &crate::ip::FlowInfo) -> ErrorQuote {
    use crate::{ip, ip_proto};
    let v6 = f.src.is_ipv6();
    let icmp = if v6 { ip_proto::ICMPV6 } else { ip_proto::ICMP };
    if f.proto != icmp || f.frag.is_some_and(|x| !x.first) {
        return ErrorQuote::NotAnError;
    }
    // (flow_key checked that the IP lengths hold: the message is the rest of the packet.)
    let end = ip::own_len(packet).unwrap_or(packet.len());
    let msg = packet.get(f.l4_offset..end).unwrap_or_default();
    let Some(&t) = msg.first() else {
        return ErrorQuote::NotAnError;
    };
    if !(if v6 { is_error_v6(t) } else { is_error_v4(t) }) {
        return ErrorQuote::NotAnError;
    }
    let offset = f.l4_offset + HEADER_LEN;
    let quote = msg.get(HEADER_LEN..).unwrap_or_default();
    match quoted_flow(quote, v6) {
        Some((src, dst, proto, (src_port, dst_port))) => ErrorQuote::Quotes(Quoted {
            src,
            dst,
            proto,
            src_port,
            dst_port,
            offset,
        }),
        None => ErrorQuote::Unreadable,
    }
}

type QuotedFields = (std::net::IpAddr, std::net::IpAddr, u8, (u16, u16));

/// The addresses, protocol and ports of the packet at the start of `q`, which may be cut short after them.
fn quoted_flow(q: &[u8], v6: bool) -> Option<QuotedFields> {
    use crate::{ip, ipv4, ipv6};
    let (src, dst, proto, l4) = if v6 {
        if crate::ip::version(q) != Some(6) {
            return None;
        }
        let w = ipv6::walk_truncated(q).ok()?;
        if w.is_later_fragment() {
            return None;
        }
        let p = ipv6::Packet::new_unchecked(q);
        (
            p.src_addr().into(),
            p.dst_addr().into(),
            w.upper_proto,
            w.upper_offset,
        )
    } else {
        if q.len() < ipv4::MIN_HEADER_LEN || crate::ip::version(q) != Some(4) {
            return None;
        }
        let p = ipv4::Packet::new_unchecked(q);
        let hl = p.header_len();
        if hl < ipv4::MIN_HEADER_LEN || hl > q.len() || p.frag_offset() != 0 {
            return None;
        }
        (p.src_addr().into(), p.dst_addr().into(), p.protocol(), hl)
    };
    let ports = if ip::has_ports(proto) {
        ip::ports(q.get(l4..)?)?
    } else {
        (0, 0)
    };
    Some((src, dst, proto, ports))
}

/// The longest message [`too_big`] writes: IPv6's minimum MTU (RFC 4443 2.4: an error quotes as much of the
/// packet as fits in it). An IPv4 one fits in 576 bytes (RFC 1812 4.3.2.3).
pub const TOO_BIG_MAX: usize = 1280;

/// The ICMP error that tells the sender of the IP packet `original` that it is too big for the path, with the
/// largest size that fits, `mtu`: for IPv4 "fragmentation needed and DF set" (type 3, code 4, RFC 1191), for IPv6
/// "packet too big" (RFC 8201), as a whole IP packet from `original`'s destination to its source, quoting as much
/// of `original` as the message may hold. Written to the front of `out`; returns its length. `None` where no error
/// may answer (RFC 1122 3.2.2, RFC 4443 2.4): `original` is not a valid IPv4 or IPv6 packet, is an ICMP error or
/// an IPv4 fragment other than the first, or comes from an address that is unspecified, multicast or broadcast.
pub fn too_big(original: &[u8], mtu: u32, out: &mut [u8; TOO_BIG_MAX]) -> Option<usize> {
    use crate::{icmpv4, icmpv6, ip_proto, ipv4, ipv6};
    let p = crate::ip::Packet::new_checked(original).ok()?;
    let (src, dst) = (p.src_addr(), p.dst_addr());
    let fam_v6 = p.version() == 6;
    let bad_source = match (src, dst) {
        (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
            s.is_unspecified()
                || s.is_multicast()
                || s.is_broadcast()
                || d.is_multicast()
                || d.is_broadcast()
        }
        (std::net::IpAddr::V6(s), std::net::IpAddr::V6(d)) => {
            s.is_unspecified() || s.is_multicast() || d.is_multicast()
        }
        _ => true,
    };
    if bad_source {
        return None;
    }
    let key = crate::ip::flow_key(original).ok()?;
    // Not for a later fragment (the first one is answered, as a whole packet would be).
    if key.frag.is_some_and(|f| !f.first) {
        return None;
    }
    // Not in answer to an ICMP error (an echo, a query, is fine).
    let icmp_proto = if fam_v6 {
        ip_proto::ICMPV6
    } else {
        ip_proto::ICMP
    };
    if key.proto == icmp_proto {
        let t = *original.get(key.l4_offset)?;
        let error = if fam_v6 {
            is_error_v6(t)
        } else {
            is_error_v4(t)
        };
        if error {
            return None;
        }
    }
    let (ip_len, limit) = if fam_v6 {
        (ipv6::HEADER_LEN, TOO_BIG_MAX)
    } else {
        (ipv4::MIN_HEADER_LEN, 576)
    };
    let quote = original.len().min(limit - ip_len - HEADER_LEN);
    let icmp_len = HEADER_LEN + quote;
    match (src, dst) {
        (std::net::IpAddr::V4(src), std::net::IpAddr::V4(dst)) => {
            ipv4::Repr {
                src: dst,
                dst: src,
                protocol: ip_proto::ICMP,
                payload_len: icmp_len,
                ttl: 64,
                dscp_ecn: 0,
                ident: 0,
                dont_frag: false,
            }
            .emit(&mut ipv4::Packet::new_unchecked(&mut out[..ip_len]));
            icmpv4::Repr {
                msg_type: icmpv4::msg_type::DST_UNREACHABLE,
                // Fragmentation needed and DF set.
                msg_code: 4,
                rest_of_header: {
                    let m = mtu.min(u16::MAX.into()) as u16;
                    [0, 0, (m >> 8) as u8, m as u8]
                },
                payload: &original[..quote],
                family: PhantomData,
            }
            .emit(&mut icmpv4::Packet::new_unchecked(
                &mut out[ip_len..ip_len + icmp_len],
            ));
        }
        (std::net::IpAddr::V6(src), std::net::IpAddr::V6(dst)) => {
            ipv6::Repr {
                src: dst,
                dst: src,
                next_header: ip_proto::ICMPV6,
                payload_len: icmp_len,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            }
            .emit(&mut ipv6::Packet::new_unchecked(&mut out[..ip_len]));
            icmpv6::Repr {
                msg_type: icmpv6::msg_type::PACKET_TOO_BIG,
                msg_code: 0,
                rest_of_header: mtu.to_be_bytes(),
                payload: &original[..quote],
                family: PhantomData,
            }
            .emit(
                &mut icmpv6::Packet::new_unchecked(&mut out[ip_len..ip_len + icmp_len]),
                &dst,
                &src,
            );
        }
        _ => return None,
    }
    Some(ip_len + icmp_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared code takes the echo types from the family: 8/0 are echoes in ICMPv4 only, 128/129 in ICMPv6
    /// only (type 0 is reserved and 8 unassigned there).
    #[test]
    fn echo_types_are_the_familys() {
        for (t, v4, v6) in [
            (8u8, true, false),
            (0, true, false),
            (128, false, true),
            (129, false, true),
        ] {
            let b = [t, 0, 0, 0, 0, 0, 0, 0];
            assert_eq!(
                Packet::<_, V4>::new_checked(&b[..]).unwrap().is_echo(),
                v4,
                "type {t}"
            );
            assert_eq!(
                Packet::<_, V6>::new_checked(&b[..]).unwrap().is_echo(),
                v6,
                "type {t}"
            );
        }
    }

    /// A message parsed and emitted again keeps its fields (the checksum is the family's business).
    #[test]
    fn fields_round_trip() {
        let b = [3u8, 1, 0xaa, 0xbb, 1, 2, 3, 4, 9, 9];
        let r = Repr::parse(&Packet::<_, V6>::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(
            (r.msg_type, r.msg_code, r.rest_of_header),
            (3, 1, [1, 2, 3, 4])
        );
        assert_eq!(r.payload, &[9, 9]);
        let mut out = [0u8; 10];
        r.emit_fields(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[..2], b[..2]);
        assert_eq!(out[4..], b[4..]);
    }

    /// `quote` (the start of a packet) in an ICMP message of type `t` from 10.2.0.1 to 10.1.0.1, or (`v6`) an
    /// ICMPv6 one from fd00::2 to fd00::1.
    fn error(quote: &[u8], t: u8, v6: bool) -> Vec<u8> {
        use crate::{ip_proto, ipv4, ipv6};
        let n = HEADER_LEN + quote.len();
        let mut m = vec![t, 0, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(quote);
        let mut p = if v6 {
            let mut h = vec![0u8; ipv6::HEADER_LEN];
            ipv6::Repr {
                src: "fd00::2".parse().unwrap(),
                dst: "fd00::1".parse().unwrap(),
                next_header: ip_proto::ICMPV6,
                payload_len: n,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            }
            .emit(&mut ipv6::Packet::new_unchecked(&mut h[..]));
            h
        } else {
            let mut h = vec![0u8; ipv4::MIN_HEADER_LEN];
            ipv4::Repr {
                src: [10, 2, 0, 1].into(),
                dst: [10, 1, 0, 1].into(),
                protocol: ip_proto::ICMP,
                payload_len: n,
                ttl: 64,
                dscp_ecn: 0,
                ident: 0,
                dont_frag: false,
            }
            .emit(&mut ipv4::Packet::new_unchecked(&mut h[..]));
            h
        };
        p.extend_from_slice(&m);
        p
    }

    /// A UDP datagram 10.1.0.1:40000 -> 10.2.0.1:5001 with `opts` in its IPv4 header and `data`, as a host
    /// received it (the length fields say the whole packet).
    fn udp4(opts: &[u8], data: &[u8]) -> Vec<u8> {
        use crate::{ip_proto, ipv4};
        let hl = ipv4::MIN_HEADER_LEN + opts.len();
        let mut p = vec![0u8; hl];
        ipv4::Repr {
            src: [10, 1, 0, 1].into(),
            dst: [10, 2, 0, 1].into(),
            protocol: ip_proto::UDP,
            payload_len: 8 + data.len(),
            ttl: 64,
            dscp_ecn: 0,
            ident: 1,
            dont_frag: true,
        }
        .emit(&mut ipv4::Packet::new_unchecked(&mut p[..]));
        let mut h = ipv4::Packet::new_unchecked(&mut p[..]);
        h.set_header_len(hl);
        h.set_total_len((hl + 8 + data.len()) as u16);
        p[ipv4::MIN_HEADER_LEN..].copy_from_slice(opts);
        p.extend_from_slice(&[0x9c, 0x40, 0x13, 0x89]);
        p.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(data);
        p
    }

    /// An error is read by the packet it quotes: its addresses, protocol and ports, also behind IPv4 options and
    /// IPv6 extension headers, from a quote cut short after them; reversed, the flow the error goes back along.
    /// Messages that quote nothing are not errors; a quote without its ports or of a later fragment is unreadable.
    #[test]
    fn an_error_is_read_by_the_packet_it_quotes() {
        use std::net::IpAddr;
        let a: IpAddr = [10, 1, 0, 1].into();
        let b: IpAddr = [10, 2, 0, 1].into();
        // Port unreachable for a datagram whose header has 28 bytes of NOPs (a PILSC packet once opened), quoted
        // to its first 8 bytes of data (as RFC 792 asks) and whole (as Linux does, up to 576 bytes).
        let d = udp4(&[1; 28], b"SECRET PAYLOAD");
        for quote in [&d[..48 + 8 + 8], &d[..]] {
            let e = error(quote, 3, false);
            let q = Quoted {
                src: a,
                dst: b,
                proto: 17,
                src_port: 40000,
                dst_port: 5001,
                offset: 28,
            };
            assert_eq!(error_quote(&e), ErrorQuote::Quotes(q));
            assert_eq!(&e[q.offset..], quote);
            let r = q.reversed();
            assert_eq!(
                (r.src, r.dst, r.proto, r.src_port, r.dst_port),
                (b, a, 17, 5001, 40000)
            );
            assert_eq!(r.reversed(), q);
        }
        // Every IPv4 error type; the other types quote nothing.
        for t in 0..=255u8 {
            let got = error_quote(&error(&d, t, false));
            assert_eq!(
                matches!(got, ErrorQuote::Quotes(_)),
                matches!(t, 3 | 4 | 5 | 11 | 12),
                "type {t}"
            );
            assert_ne!(got, ErrorQuote::Unreadable);
        }
        // Quoted ICMP (an echo): no ports.
        let mut echo = udp4(&[], &[]);
        echo[9] = 1;
        let ErrorQuote::Quotes(q) = error_quote(&error(&echo, 11, false)) else {
            panic!("an echo's error")
        };
        assert_eq!((q.proto, q.src_port, q.dst_port), (1, 0, 0));
        // Unreadable: cut before the ports, in the header, a bad header length, a later fragment, IPv6 in an
        // ICMPv4 error, an error too short for its own header.
        let plain = udp4(&[], b"x");
        assert_eq!(
            error_quote(&error(&plain[..23], 3, false)),
            ErrorQuote::Unreadable
        );
        assert!(matches!(
            error_quote(&error(&plain[..24], 3, false)),
            ErrorQuote::Quotes(_)
        ));
        assert_eq!(
            error_quote(&error(&plain[..19], 3, false)),
            ErrorQuote::Unreadable
        );
        let mut bad = plain.clone();
        bad[0] = 0x44;
        assert_eq!(error_quote(&error(&bad, 3, false)), ErrorQuote::Unreadable);
        let mut later = plain.clone();
        later[6] = 0x20;
        later[7] = 0x10;
        assert_eq!(
            error_quote(&error(&later, 3, false)),
            ErrorQuote::Unreadable
        );
        // (The first fragment of a datagram is read: it has the ports.)
        let mut first = plain.clone();
        first[6] = 0x20;
        first[7] = 0;
        assert!(matches!(
            error_quote(&error(&first, 3, false)),
            ErrorQuote::Quotes(_)
        ));
        let mut v6 = plain.clone();
        v6[0] = 0x60;
        assert_eq!(error_quote(&error(&v6, 3, false)), ErrorQuote::Unreadable);
        let mut short = error(&[], 3, false);
        short.truncate(24);
        short[3] = 24;
        assert_eq!(
            error_quote(&short),
            ErrorQuote::Unreadable,
            "4 bytes of ICMP header"
        );
        // Not errors: a datagram, an echo request, a later fragment of an error (no ICMP header in it).
        assert_eq!(error_quote(&plain), ErrorQuote::NotAnError);
        assert_eq!(
            error_quote(&error(&plain, 8, false)),
            ErrorQuote::NotAnError
        );
        let mut frag = error(&plain, 3, false);
        frag[6] = 0x00;
        frag[7] = 0x10;
        assert_eq!(error_quote(&frag), ErrorQuote::NotAnError);
        // The first fragment of an error is read as far as it goes.
        let mut frag = error(&d, 3, false);
        frag[6] = 0x20;
        assert!(matches!(error_quote(&frag), ErrorQuote::Quotes(_)));

        // IPv6: TCP fd00::1:40000 -> fd00::2:443 behind a hop-by-hop header (8 bytes), quoted to its ports.
        let (s6, d6): (std::net::Ipv6Addr, std::net::Ipv6Addr) =
            ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        let mut t6 = vec![0u8; 40];
        crate::ipv6::Repr {
            src: s6,
            dst: d6,
            next_header: 0,
            payload_len: 8 + 20 + 100,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut crate::ipv6::Packet::new_unchecked(&mut t6[..]));
        t6.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]);
        t6.extend_from_slice(&[0x9c, 0x40, 0x01, 0xbb]);
        let e6 = error(&t6, 1, true);
        assert_eq!(
            error_quote(&e6),
            ErrorQuote::Quotes(Quoted {
                src: s6.into(),
                dst: d6.into(),
                proto: 6,
                src_port: 40000,
                dst_port: 443,
                offset: 48,
            })
        );
        // Every ICMPv6 type below 128 is an error; echo and neighbour discovery are not.
        for t in [2u8, 3, 4, 100] {
            assert!(matches!(
                error_quote(&error(&t6, t, true)),
                ErrorQuote::Quotes(_)
            ));
        }
        for t in [128u8, 129, 135, 136] {
            assert_eq!(error_quote(&error(&t6, t, true)), ErrorQuote::NotAnError);
        }
        // Cut inside the extension header, or before the ports: unreadable.
        for n in [44, 50] {
            assert_eq!(
                error_quote(&error(&t6[..n], 1, true)),
                ErrorQuote::Unreadable,
                "{n}"
            );
        }
    }

    /// The "too big" errors: from the packet's destination to its source, the MTU in place, the packet quoted as
    /// far as the message may hold, the checksums right; none for an ICMP error, a later fragment or a multicast
    /// source.
    #[test]
    fn too_big_answers_the_sender_and_quotes_its_packet() {
        use crate::{icmpv4, icmpv6, ip_proto, ipv4, ipv6};
        let mut out = [0u8; TOO_BIG_MAX];
        // IPv4: a 1,400-byte UDP packet with DF, 10.1.0.1 -> 10.2.0.1.
        let mut p = vec![0u8; 1400];
        ipv4::Repr {
            src: [10, 1, 0, 1].into(),
            dst: [10, 2, 0, 1].into(),
            protocol: ip_proto::UDP,
            payload_len: 1380,
            ttl: 64,
            dscp_ecn: 0,
            ident: 7,
            dont_frag: true,
        }
        .emit(&mut ipv4::Packet::new_unchecked(&mut p[..20]));
        let n = too_big(&p, 1338, &mut out).unwrap();
        assert_eq!(n, 576);
        let ip = ipv4::Packet::new_checked(&out[..n]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.src_addr(), std::net::Ipv4Addr::new(10, 2, 0, 1));
        assert_eq!(ip.dst_addr(), std::net::Ipv4Addr::new(10, 1, 0, 1));
        assert_eq!(ip.protocol(), ip_proto::ICMP);
        let m = icmpv4::Packet::new_checked(&out[20..n]).unwrap();
        assert!(m.verify_checksum());
        assert_eq!((m.msg_type(), m.msg_code()), (3, 4));
        assert_eq!(m.rest_of_header(), [0, 0, 0x05, 0x3a]);
        assert_eq!(m.payload(), &p[..548]);
        // A short packet is quoted whole.
        let short = &mut p[..60];
        short[2..4].copy_from_slice(&60u16.to_be_bytes());
        let n = too_big(short, 1338, &mut out).unwrap();
        assert_eq!(n, 20 + 8 + 60);
        // Not for an ICMP error, but for an echo; not for a later fragment; not from a multicast source.
        let mut e = p[..60].to_vec();
        e[9] = ip_proto::ICMP;
        e[20] = 3;
        assert_eq!(too_big(&e, 1338, &mut out), None);
        e[20] = 8;
        assert!(too_big(&e, 1338, &mut out).is_some());
        let mut f = p[..60].to_vec();
        f[6..8].copy_from_slice(&[0x00, 0x10]);
        assert_eq!(too_big(&f, 1338, &mut out), None);
        let mut mc = p[..60].to_vec();
        mc[12] = 224;
        assert_eq!(too_big(&mc, 1338, &mut out), None);

        // IPv6: a 1,500-byte TCP packet, fd00::1 -> fd00::2; quoted up to 1,280 bytes in all.
        let mut q = vec![0u8; 1500];
        let (s6, d6): (std::net::Ipv6Addr, std::net::Ipv6Addr) =
            ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        ipv6::Repr {
            src: s6,
            dst: d6,
            next_header: ip_proto::TCP,
            payload_len: 1460,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut ipv6::Packet::new_unchecked(&mut q[..40]));
        let n = too_big(&q, 1400, &mut out).unwrap();
        assert_eq!(n, TOO_BIG_MAX);
        let ip = ipv6::Packet::new_checked(&out[..n]).unwrap();
        assert_eq!((ip.src_addr(), ip.dst_addr()), (d6, s6));
        assert_eq!(ip.next_header(), ip_proto::ICMPV6);
        let m = icmpv6::Packet::new_checked(&out[40..n]).unwrap();
        assert!(m.verify_checksum(&d6, &s6));
        assert_eq!((m.msg_type(), m.msg_code(), m.mtu()), (2, 0, 1400));
        assert_eq!(m.payload(), &q[..1280 - 48]);
        // Not for an ICMPv6 error.
        q[6] = ip_proto::ICMPV6;
        q[40] = 1;
        assert_eq!(too_big(&q, 1400, &mut out), None);
        q[40] = 128;
        assert!(too_big(&q, 1400, &mut out).is_some());
    }
}
