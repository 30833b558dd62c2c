//! The free functions on the bytes of an IP packet (`&[u8]`, `&mut [u8]`, no view kept): reads of the fixed
//! header, in-place fix-ups (hop limit, addresses, lengths) and the IP and UDP headers written in place.

use std::net::{IpAddr, SocketAddr};

use super::packet::Packet;
use crate::error::{Error, Result};
use crate::field::get_u16;
use crate::{ip_proto, ipv4, ipv6, udp};

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

/// The version nibble of the IP header at the start of `p` (4 or 6 for the packets netveil handles); `None` for an
/// empty buffer. Nothing else is checked.
#[inline]
pub fn version(p: &[u8]) -> Option<u8> {
    p.first().map(|b| b >> 4)
}

/// The destination address of the IP packet at the start of `p`, read from the fixed header alone (its length
/// fields are not checked); `None` if `p` does not start with an IPv4 or IPv6 fixed header.
#[inline]
pub fn dst_addr(p: &[u8]) -> Option<IpAddr> {
    match version(p) {
        Some(4) if p.len() >= ipv4::MIN_HEADER_LEN => {
            Some(ipv4::Packet::new_unchecked(p).dst_addr().into())
        }
        Some(6) if p.len() >= ipv6::HEADER_LEN => {
            Some(ipv6::Packet::new_unchecked(p).dst_addr().into())
        }
        _ => None,
    }
}

/// The source and destination addresses of the IP packet at the start of `p`, read from the fixed header alone
/// (as [`dst_addr`]).
#[inline]
pub fn addrs(p: &[u8]) -> Option<(IpAddr, IpAddr)> {
    match version(p) {
        Some(4) if p.len() >= ipv4::MIN_HEADER_LEN => {
            let h = ipv4::Packet::new_unchecked(p);
            Some((h.src_addr().into(), h.dst_addr().into()))
        }
        Some(6) if p.len() >= ipv6::HEADER_LEN => {
            let h = ipv6::Packet::new_unchecked(p);
            Some((h.src_addr().into(), h.dst_addr().into()))
        }
        _ => None,
    }
}

/// The DSCP/ECN byte (IPv4 TOS, IPv6 traffic class) and the IPv4 DF bit of the packet in `p`, which a tunnel copies
/// to its outer header. Only the fixed header is read; `(0, false)` if `p` does not start with one.
#[inline]
pub fn dscp_ecn_df(p: &[u8]) -> (u8, bool) {
    match version(p) {
        Some(4) if p.len() >= ipv4::MIN_HEADER_LEN => {
            let h = ipv4::Packet::new_unchecked(p);
            (h.dscp_ecn(), h.dont_frag())
        }
        Some(6) if p.len() >= ipv6::HEADER_LEN => {
            (ipv6::Packet::new_unchecked(p).traffic_class(), false)
        }
        _ => (0, false),
    }
}

/// The length of the IP packet at the start of `p` as its fixed header gives it (IPv4 total length, IPv6 40 +
/// payload length), if that is at least 20 and at most `p.len()`: where a packet followed by padding (ESP TFC
/// padding, link-layer padding) ends. The other header fields are not checked.
#[inline]
pub fn own_len(p: &[u8]) -> Option<usize> {
    let l = match version(p) {
        Some(4) if p.len() >= ipv4::MIN_HEADER_LEN => {
            usize::from(ipv4::Packet::new_unchecked(p).total_len())
        }
        Some(6) if p.len() >= ipv6::HEADER_LEN => ipv6::Packet::new_unchecked(p).total_len(),
        _ => return None,
    };
    (ipv4::MIN_HEADER_LEN..=p.len()).contains(&l).then_some(l)
}

/// The source and destination ports at the start of a TCP, UDP or SCTP header (the same offsets in all three);
/// `None` if `l4` is shorter than 4 bytes.
#[inline]
pub fn ports(l4: &[u8]) -> Option<(u16, u16)> {
    (l4.len() >= 4).then(|| (get_u16(l4, 0), get_u16(l4, 2)))
}

/// After a transform changed the length of the IP packet that `p` holds exactly: writes the IPv4 total length and
/// header checksum, or the IPv6 payload length. Fails (`Malformed`) if `p` is not an IPv4 or IPv6 packet or too long
/// for its length field, or (`Truncated`) shorter than its header.
#[inline]
pub fn fix_lengths(p: &mut [u8]) -> Result<()> {
    match version(p) {
        Some(4) => fix_v4_lengths(p),
        Some(6) => fix_v6_lengths(p),
        _ => Err(Error::Malformed),
    }
}

/// [`fix_lengths`] of a packet known to be IPv4 (the version nibble is not looked at).
#[inline]
pub(super) fn fix_v4_lengths(p: &mut [u8]) -> Result<()> {
    if p.len() < ipv4::MIN_HEADER_LEN {
        return Err(Error::Truncated);
    }
    let total = u16::try_from(p.len()).map_err(|_| Error::Malformed)?;
    let mut h = ipv4::Packet::new_unchecked(p);
    h.set_total_len(total);
    h.check_len()?;
    h.fill_checksum();
    Ok(())
}

/// [`fix_lengths`] of a packet known to be IPv6 (the version nibble is not looked at).
#[inline]
pub(super) fn fix_v6_lengths(p: &mut [u8]) -> Result<()> {
    let payload = p
        .len()
        .checked_sub(ipv6::HEADER_LEN)
        .ok_or(Error::Truncated)?;
    let payload = u16::try_from(payload).map_err(|_| Error::Malformed)?;
    ipv6::Packet::new_unchecked(p).set_payload_len(payload);
    Ok(())
}

/// Writes a UDP header from and to these ports at offset `at` of the IP packet that `p` holds exactly, its length
/// covering the rest of `p` (transport-mode UDP encapsulation). With `checksum_v6`, the checksum of a datagram in
/// an IPv6 packet is computed (the pseudo-header with the fixed header's addresses); otherwise, and always over
/// IPv4, it is zero. Fails if `p` is not an IP packet with at least a UDP header's room after `at`, or the datagram
/// is too long for the length field.
#[inline]
pub fn emit_udp_header(
    p: &mut [u8],
    at: usize,
    src_port: u16,
    dst_port: u16,
    checksum_v6: bool,
) -> Result<()> {
    let len = p.len().checked_sub(at).ok_or(Error::Truncated)?;
    if len < udp::HEADER_LEN {
        return Err(Error::Truncated);
    }
    if len > usize::from(u16::MAX) {
        return Err(Error::Malformed);
    }
    let addrs = match version(p) {
        Some(4) if at >= ipv4::MIN_HEADER_LEN => None,
        Some(6) if at >= ipv6::HEADER_LEN => {
            let h = ipv6::Packet::new_unchecked(&*p);
            checksum_v6.then(|| (h.src_addr(), h.dst_addr()))
        }
        _ => return Err(Error::Malformed),
    };
    let mut u = udp::Packet::new_unchecked(&mut p[at..]);
    udp::Repr {
        src_port,
        dst_port,
        payload_len: len - udp::HEADER_LEN,
    }
    .emit(&mut u);
    if let Some((s, d)) = addrs {
        u.fill_checksum(s.into(), d.into());
    }
    Ok(())
}
