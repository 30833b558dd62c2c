//! Version-dispatching IP helpers.

use std::net::{IpAddr, SocketAddr};

use crate::field::get_u16;
use crate::{ip_proto, ipv4, ipv6, Error, Result};

/// SCTP protocol number (ports at the same offsets as TCP/UDP).
pub const SCTP: u8 = 132;

/// An IPv4 or IPv6 packet view, chosen by the version nibble.
#[derive(Debug, Clone)]
pub enum Packet<T: AsRef<[u8]>> {
    V4(ipv4::Packet<T>),
    V6(ipv6::Packet<T>),
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Dispatches on the version nibble and runs that version's `new_checked`.
    pub fn new_checked(buffer: T) -> Result<Self> {
        match buffer.as_ref().first().map(|b| b >> 4) {
            None => Err(Error::Truncated),
            Some(4) => Ok(Packet::V4(ipv4::Packet::new_checked(buffer)?)),
            Some(6) => Ok(Packet::V6(ipv6::Packet::new_checked(buffer)?)),
            Some(_) => Err(Error::Malformed),
        }
    }

    pub fn into_inner(self) -> T {
        match self {
            Packet::V4(p) => p.into_inner(),
            Packet::V6(p) => p.into_inner(),
        }
    }

    pub fn version(&self) -> u8 {
        match self {
            Packet::V4(_) => 4,
            Packet::V6(_) => 6,
        }
    }

    pub fn src_addr(&self) -> IpAddr {
        match self {
            Packet::V4(p) => p.src_addr().into(),
            Packet::V6(p) => p.src_addr().into(),
        }
    }

    pub fn dst_addr(&self) -> IpAddr {
        match self {
            Packet::V4(p) => p.dst_addr().into(),
            Packet::V6(p) => p.dst_addr().into(),
        }
    }

    /// Length of the packet per its header (bytes beyond it are ignored).
    pub fn total_len(&self) -> usize {
        match self {
            Packet::V4(p) => p.total_len() as usize,
            Packet::V6(p) => p.total_len(),
        }
    }

    /// TTL or hop limit.
    pub fn hop_limit(&self) -> u8 {
        match self {
            Packet::V4(p) => p.ttl(),
            Packet::V6(p) => p.hop_limit(),
        }
    }

    /// The IPv4 protocol or the IPv6 fixed header's next header.
    pub fn next_header(&self) -> u8 {
        match self {
            Packet::V4(p) => p.protocol(),
            Packet::V6(p) => p.next_header(),
        }
    }

    /// The bytes after the IPv4 header or the IPv6 fixed header.
    pub fn payload(&self) -> &[u8] {
        match self {
            Packet::V4(p) => p.payload(),
            Packet::V6(p) => p.payload(),
        }
    }
}

/// The selectors the policy engine matches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowInfo {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Upper-layer protocol (after IPv6 extension headers).
    pub proto: u8,
    /// 0 unless TCP, UDP or SCTP in an unfragmented packet or first fragment.
    pub src_port: u16,
    pub dst_port: u16,
    /// Offset of the upper-layer header in the packet.
    pub l4_offset: usize,
    /// For a fragment: its identification and whether it is the first one (offset 0).
    pub frag: Option<Fragment>,
}

/// What identifies a fragment's packet (with the addresses and protocol) and which fragment it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fragment {
    /// IPv4 identification (16 bits) or IPv6 Fragment header identification (32 bits).
    pub ident: u32,
    /// Offset 0 (more fragments follow): the fragment that carries the ports.
    pub first: bool,
}

fn has_ports(proto: u8) -> bool {
    matches!(proto, ip_proto::TCP | ip_proto::UDP | SCTP)
}

/// Extracts the flow selectors of an IPv4 or IPv6 packet without allocating.
///
/// Fails if the IP header is invalid, an IPv6 extension header is cut short, or a TCP/UDP/SCTP header that should be
/// present has fewer than 4 bytes.
pub fn flow_key(packet: &[u8]) -> Result<FlowInfo> {
    let (src, dst, proto, l4_offset, end, frag) = match Packet::new_checked(packet)? {
        Packet::V4(p) => (
            p.src_addr().into(),
            p.dst_addr().into(),
            p.protocol(),
            p.header_len(),
            p.total_len() as usize,
            (p.more_frags() || p.frag_offset() != 0).then(|| Fragment {
                ident: u32::from(p.ident()),
                first: p.frag_offset() == 0,
            }),
        ),
        Packet::V6(p) => {
            let w = ipv6::walk(packet)?;
            (
                p.src_addr().into(),
                p.dst_addr().into(),
                w.upper_proto,
                w.upper_offset,
                p.total_len(),
                w.frag
                    .filter(|f| f.more_frags || f.frag_offset != 0)
                    .map(|f| Fragment {
                        ident: f.ident,
                        first: f.frag_offset == 0,
                    }),
            )
        }
    };
    let later_frag = frag.is_some_and(|f| !f.first);
    let (mut src_port, mut dst_port) = (0, 0);
    if has_ports(proto) && !later_frag {
        if l4_offset + 4 > end {
            return Err(Error::Truncated);
        }
        src_port = get_u16(packet, l4_offset);
        dst_port = get_u16(packet, l4_offset + 2);
    }
    Ok(FlowInfo {
        src,
        dst,
        proto,
        src_port,
        dst_port,
        l4_offset,
        frag,
    })
}

/// Why [`decrement_hop_limit`] refused a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HopLimitError {
    /// Not an IPv4 or IPv6 header.
    Malformed,
    /// The TTL or hop limit would reach 0: a router drops the packet.
    Exceeded,
}

/// Decrements the IPv4 TTL or the IPv6 hop limit of the packet in `p`, as a router forwarding it; the IPv4 header
/// checksum is updated incrementally (RFC 1624). Only the fixed header is looked at.
pub fn decrement_hop_limit(p: &mut [u8]) -> core::result::Result<(), HopLimitError> {
    match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= ipv4::MIN_HEADER_LEN => {
            let mut h = ipv4::Packet::new_unchecked(p);
            let ttl = h.ttl();
            if ttl <= 1 {
                return Err(HopLimitError::Exceeded);
            }
            h.set_ttl(ttl - 1);
            // The TTL is the high byte of its 16-bit word: the sum drops by 0x0100, so the checksum rises by it.
            let c = u32::from(h.checksum()) + 0x0100;
            h.set_checksum(((c & 0xffff) + (c >> 16)) as u16);
            Ok(())
        }
        Some(6) if p.len() >= ipv6::HEADER_LEN => {
            let mut h = ipv6::Packet::new_unchecked(p);
            let hop = h.hop_limit();
            if hop <= 1 {
                return Err(HopLimitError::Exceeded);
            }
            h.set_hop_limit(hop - 1);
            Ok(())
        }
        _ => Err(HopLimitError::Malformed),
    }
}

/// Rewrites the source and destination addresses of the IP packet in `p` (of the packet's family; the IPv4 header
/// checksum is recomputed).
pub fn set_addresses(p: &mut [u8], src: IpAddr, dst: IpAddr) -> Result<()> {
    match (Packet::new_checked(p)?, src, dst) {
        (Packet::V4(mut h), IpAddr::V4(s), IpAddr::V4(d)) => {
            h.set_src_addr(s);
            h.set_dst_addr(d);
            h.fill_checksum();
        }
        (Packet::V6(mut h), IpAddr::V6(s), IpAddr::V6(d)) => {
            h.set_src_addr(s);
            h.set_dst_addr(d);
        }
        _ => return Err(Error::Malformed),
    }
    Ok(())
}

/// The length of the IP and UDP headers [`emit_ip_udp`] writes for a source of this family.
pub fn ip_udp_header_len(src: IpAddr) -> usize {
    crate::udp::HEADER_LEN
        + if src.is_ipv4() {
            ipv4::MIN_HEADER_LEN
        } else {
            ipv6::HEADER_LEN
        }
}

/// Writes the IP header (TTL or hop limit 64; IPv4 with its checksum) and the UDP header (checksum 0) of a UDP
/// datagram of `payload_len` bytes from `src` to `dst` into `hdr`, which holds exactly
/// [`ip_udp_header_len`] bytes (as in front of a payload received on a UDP socket).
pub fn emit_ip_udp(
    hdr: &mut [u8],
    src: SocketAddr,
    dst: SocketAddr,
    payload_len: usize,
) -> Result<()> {
    let udp_len = crate::udp::HEADER_LEN + payload_len;
    if hdr.len() != ip_udp_header_len(src.ip()) || udp_len > usize::from(u16::MAX) {
        return Err(Error::Malformed);
    }
    let (ip, udp) = hdr.split_at_mut(hdr.len() - crate::udp::HEADER_LEN);
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            if ipv4::MIN_HEADER_LEN + udp_len > usize::from(u16::MAX) {
                return Err(Error::Malformed);
            }
            ipv4::Repr {
                src: s,
                dst: d,
                protocol: ip_proto::UDP,
                payload_len: udp_len,
                ttl: 64,
                dscp_ecn: 0,
                ident: 0,
                dont_frag: false,
            }
            .emit(&mut ipv4::Packet::new_unchecked(ip))
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => ipv6::Repr {
            src: s,
            dst: d,
            next_header: ip_proto::UDP,
            payload_len: udp_len,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut ipv6::Packet::new_unchecked(ip)),
        _ => return Err(Error::Malformed),
    }
    crate::udp::Repr {
        src_port: src.port(),
        dst_port: dst.port(),
        payload_len,
    }
    .emit(&mut crate::udp::Packet::new_unchecked(udp));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ipv4, ipv6};

    #[test]
    fn dispatch() {
        let v4 = ipv4::tests::SYN;
        let p = Packet::new_checked(&v4[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.src_addr(), "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(p.total_len(), 60);
        assert_eq!(p.next_header(), ip_proto::TCP);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.payload().len(), 40);
        let v6 = ipv6::tests::echo_ext();
        let p = Packet::new_checked(&v6[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.dst_addr(), "ff02::1".parse::<IpAddr>().unwrap());
        assert_eq!(p.next_header(), 0);
        assert_eq!(Packet::new_checked(&[][..]).err(), Some(Error::Truncated));
        assert_eq!(
            Packet::new_checked(&[0x50u8; 40][..]).err(),
            Some(Error::Malformed)
        );
    }

    #[test]
    fn flow_v4_tcp() {
        let f = flow_key(&ipv4::tests::SYN).unwrap();
        assert_eq!(f.src, "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(f.dst, "93.184.216.34".parse::<IpAddr>().unwrap());
        assert_eq!(
            (f.proto, f.src_port, f.dst_port, f.l4_offset),
            (6, 51234, 80, 20)
        );

        assert_eq!(f.frag, None);

        // Later fragment: no ports, and what identifies its packet.
        let mut b = ipv4::tests::SYN;
        b[6] = 0x00;
        b[7] = 0x10;
        let f = flow_key(&b).unwrap();
        assert_eq!((f.proto, f.src_port, f.dst_port), (6, 0, 0));
        let ident = u32::from(u16::from_be_bytes([b[4], b[5]]));
        assert_eq!(
            f.frag,
            Some(Fragment {
                ident,
                first: false
            })
        );
        // First fragment (MF, offset 0): ports, and first.
        let mut b = ipv4::tests::SYN;
        b[6] = 0x20;
        b[7] = 0x00;
        let f = flow_key(&b).unwrap();
        assert_eq!((f.src_port, f.dst_port), (51234, 80));
        assert_eq!(f.frag, Some(Fragment { ident, first: true }));

        // Ports cut off by the total length.
        let mut b = ipv4::tests::SYN;
        b[3] = 23;
        assert_eq!(flow_key(&b).err(), Some(Error::Truncated));
        b[1] = 0;
        b[9] = ip_proto::ICMP;
        let f = flow_key(&b).unwrap();
        assert_eq!(
            (f.proto, f.src_port, f.dst_port, f.l4_offset),
            (1, 0, 0, 20)
        );
    }

    #[test]
    fn flow_v6() {
        let v = ipv6::tests::echo_ext();
        let f = flow_key(&v).unwrap();
        assert_eq!(
            (f.proto, f.src_port, f.dst_port, f.l4_offset),
            (58, 0, 0, 64)
        );

        // Replace ICMPv6 with UDP 1000 -> 2000.
        let mut b = v.clone();
        b[48] = ip_proto::UDP;
        b[64..68].copy_from_slice(&[0x03, 0xe8, 0x07, 0xd0]);
        let f = flow_key(&b).unwrap();
        assert_eq!(
            (f.proto, f.src_port, f.dst_port, f.l4_offset),
            (17, 1000, 2000, 64)
        );
    }

    #[test]
    fn truncation() {
        let v4 = ipv4::tests::SYN;
        for n in 0..v4.len() {
            assert!(flow_key(&v4[..n]).is_err());
        }
        let v6 = ipv6::tests::echo_ext();
        for n in 0..v6.len() {
            assert!(flow_key(&v6[..n]).is_err());
        }
    }

    /// The headers written in front of a received UDP payload parse back, with a valid IPv4 checksum; addresses
    /// rewritten keep the checksum valid; hop limits count down to an error.
    #[test]
    fn header_synthesis_and_fix_ups() {
        for (src, dst) in [
            ("192.0.2.1:4500", "192.0.2.2:4501"),
            ("[2001:db8::1]:1000", "[2001:db8::2]:1000"),
        ] {
            let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
            let n = ip_udp_header_len(src.ip());
            let mut p = vec![0u8; n + 5];
            p[n..].copy_from_slice(b"hello");
            emit_ip_udp(&mut p[..n], src, dst, 5).unwrap();
            let ip = Packet::new_checked(&p[..]).unwrap();
            assert_eq!((ip.src_addr(), ip.dst_addr()), (src.ip(), dst.ip()));
            assert_eq!(ip.next_header(), ip_proto::UDP);
            assert_eq!(ip.total_len(), p.len());
            let u = crate::udp::Packet::new_checked(ip.payload()).unwrap();
            assert_eq!((u.src_port(), u.dst_port()), (src.port(), dst.port()));
            assert_eq!(u.payload(), b"hello");
            if let Packet::V4(h) = &ip {
                assert!(h.verify_checksum());
            }
            // New addresses (of the wrong family: refused).
            let (a, b): (IpAddr, IpAddr) = if src.is_ipv4() {
                (
                    "198.51.100.7".parse().unwrap(),
                    "198.51.100.8".parse().unwrap(),
                )
            } else {
                (
                    "2001:db8:9::7".parse().unwrap(),
                    "2001:db8:9::8".parse().unwrap(),
                )
            };
            set_addresses(&mut p, a, b).unwrap();
            let ip = Packet::new_checked(&p[..]).unwrap();
            assert_eq!((ip.src_addr(), ip.dst_addr()), (a, b));
            if let Packet::V4(h) = &ip {
                assert!(h.verify_checksum());
            }
            let other: IpAddr = if src.is_ipv4() {
                "2001:db8::1".parse().unwrap()
            } else {
                "192.0.2.1".parse().unwrap()
            };
            assert_eq!(set_addresses(&mut p, other, other), Err(Error::Malformed));
            // 64 hops.
            for _ in 0..63 {
                decrement_hop_limit(&mut p).unwrap();
            }
            if let Packet::V4(h) = Packet::new_checked(&p[..]).unwrap() {
                assert!(h.verify_checksum());
            }
            assert_eq!(decrement_hop_limit(&mut p), Err(HopLimitError::Exceeded));
        }
        assert_eq!(
            emit_ip_udp(
                &mut [0u8; 27],
                "192.0.2.1:1".parse().unwrap(),
                "192.0.2.2:1".parse().unwrap(),
                0
            ),
            Err(Error::Malformed)
        );
        assert_eq!(
            decrement_hop_limit(&mut [0x45, 0, 0]),
            Err(HopLimitError::Malformed)
        );
    }
}
