//! Small helpers over raw IP headers used by the transforms: locate the upper layer, fix lengths and checksums,
//! build outer headers. All functions check lengths and never panic on short input.

use crate::Drop;
use netveil_wire::{checksum, ip_proto, PacketBuf};
use std::net::IpAddr;

/// Where the interesting parts of an IP packet are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpInfo {
    pub v6: bool,
    /// Offset of the first header after the IP header and the IPv6 extension headers that precede ESP/AH
    /// (Hop-by-Hop, Routing, Fragment, Destination Options).
    pub l3_len: usize,
    /// Offset of the byte that holds the protocol number of the header at `l3_len`.
    pub proto_off: usize,
    /// The protocol number of the header at `l3_len`.
    pub proto: u8,
    /// Total packet length according to the IP header (<= buffer length).
    pub total_len: usize,
    /// IPv4 fragment (MF set or non-zero offset) or an IPv6 Fragment header was seen.
    pub fragment: bool,
}

pub fn parse(p: &[u8]) -> Result<IpInfo, Drop> {
    match p.first().map(|b| b >> 4) {
        Some(4) => {
            if p.len() < 20 {
                return Err(Drop::Malformed);
            }
            let ihl = (p[0] & 0x0f) as usize * 4;
            let total = u16::from_be_bytes([p[2], p[3]]) as usize;
            if ihl < 20 || total < ihl || total > p.len() {
                return Err(Drop::Malformed);
            }
            let frag = u16::from_be_bytes([p[6], p[7]]);
            Ok(IpInfo {
                v6: false,
                l3_len: ihl,
                proto_off: 9,
                proto: p[9],
                total_len: total,
                fragment: frag & 0x3fff != 0,
            })
        }
        Some(6) => {
            if p.len() < 40 {
                return Err(Drop::Malformed);
            }
            let total = 40 + u16::from_be_bytes([p[4], p[5]]) as usize;
            if total > p.len() {
                return Err(Drop::Malformed);
            }
            let mut proto_off = 6;
            let mut off = 40;
            let mut fragment = false;
            loop {
                let nh = p[proto_off];
                match nh {
                    ip_proto::HOPOPT | ip_proto::IPV6_ROUTE | ip_proto::IPV6_OPTS => {
                        if off + 8 > total {
                            return Err(Drop::Malformed);
                        }
                        let len = (p[off + 1] as usize + 1) * 8;
                        if off + len > total {
                            return Err(Drop::Malformed);
                        }
                        proto_off = off;
                        off += len;
                    }
                    ip_proto::IPV6_FRAG => {
                        if off + 8 > total {
                            return Err(Drop::Malformed);
                        }
                        fragment = true;
                        proto_off = off;
                        off += 8;
                    }
                    _ => {
                        return Ok(IpInfo {
                            v6: true,
                            l3_len: off,
                            proto_off,
                            proto: nh,
                            total_len: total,
                            fragment,
                        })
                    }
                }
            }
        }
        _ => Err(Drop::Malformed),
    }
}

/// After the packet's length changed: writes the IPv4 total length and header checksum, or the IPv6 payload length.
pub fn fix_lengths(p: &mut [u8], v6: bool) -> Result<(), Drop> {
    let len = p.len();
    if v6 {
        if len < 40 || len - 40 > 65535 {
            return Err(Drop::TooBig);
        }
        p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
    } else {
        if !(20..=65535).contains(&len) {
            return Err(Drop::TooBig);
        }
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        fill_v4_checksum(p);
    }
    Ok(())
}

pub fn fill_v4_checksum(p: &mut [u8]) {
    let ihl = ((p[0] & 0x0f) as usize * 4).min(p.len());
    p[10] = 0;
    p[11] = 0;
    let c = checksum::checksum(&p[..ihl]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
}

/// The DSCP/ECN byte (IPv4 TOS, IPv6 traffic class) and, for IPv4, the DF bit of a packet.
pub fn tos_df(p: &[u8]) -> (u8, bool) {
    match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 => (p[1], p[6] & 0x40 != 0),
        Some(6) if p.len() >= 40 => ((p[0] << 4) | (p[1] >> 4), false),
        _ => (0, false),
    }
}

/// Pushes an outer IP header (and, with `udp`, a UDP header with these ports) in front of the packet.
/// `proto` is the protocol of what follows the IP header (UDP's 17 when `udp` is given).
pub fn push_outer(
    pkt: &mut PacketBuf,
    local: IpAddr,
    remote: IpAddr,
    proto: u8,
    tos: u8,
    df: bool,
    id: u16,
    udp: Option<(u16, u16)>,
) -> Result<(), Drop> {
    if let Some((sport, dport)) = udp {
        let len = pkt.len() + 8;
        if len > 65535 {
            return Err(Drop::TooBig);
        }
        let h = pkt.push_front(8).ok_or(Drop::TooBig)?;
        h[0..2].copy_from_slice(&sport.to_be_bytes());
        h[2..4].copy_from_slice(&dport.to_be_bytes());
        h[4..6].copy_from_slice(&(len as u16).to_be_bytes());
        h[6..8].copy_from_slice(&[0, 0]);
    }
    match (local, remote) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let len = pkt.len() + 20;
            if len > 65535 {
                return Err(Drop::TooBig);
            }
            let h = pkt.push_front(20).ok_or(Drop::TooBig)?;
            h[0] = 0x45;
            h[1] = tos;
            h[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            h[4..6].copy_from_slice(&id.to_be_bytes());
            h[6..8].copy_from_slice(&(if df { 0x4000u16 } else { 0 }).to_be_bytes());
            h[8] = 64;
            h[9] = proto;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            fill_v4_checksum(h);
            // RFC 3948: the UDP checksum of ESP-in-UDP over IPv4 is sent as zero.
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let plen = pkt.len();
            if plen > 65535 {
                return Err(Drop::TooBig);
            }
            let h = pkt.push_front(40).ok_or(Drop::TooBig)?;
            h[0] = 0x60 | (tos >> 4);
            h[1] = tos << 4;
            h[2] = 0;
            h[3] = 0;
            h[4..6].copy_from_slice(&(plen as u16).to_be_bytes());
            h[6] = proto;
            h[7] = 64;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
            if udp.is_some() {
                fill_udp6_checksum(pkt.data_mut(), 40);
            }
        }
        _ => return Err(Drop::Unsupported),
    }
    Ok(())
}

/// Computes the UDP checksum of the UDP datagram at `off` in an IPv6 packet (mandatory over IPv6).
pub fn fill_udp6_checksum(p: &mut [u8], off: usize) {
    if p.len() < off + 8 || p.len() < 40 {
        return;
    }
    p[off + 6] = 0;
    p[off + 7] = 0;
    let len = (p.len() - off) as u32;
    let acc = checksum::pseudo_header(&p[8..24], &p[24..40], ip_proto::UDP, len);
    let mut c = checksum::finish(checksum::sum(acc, &p[off..]));
    if c == 0 {
        c = 0xffff;
    }
    p[off + 6..off + 8].copy_from_slice(&c.to_be_bytes());
}

/// Writes the UDP header of ESP-in-UDP at `off` (transport mode), with checksum 0 (IPv4) or computed (IPv6).
pub fn write_udp_encap(p: &mut [u8], off: usize, sport: u16, dport: u16, v6: bool) {
    let len = (p.len() - off) as u16;
    p[off..off + 2].copy_from_slice(&sport.to_be_bytes());
    p[off + 2..off + 4].copy_from_slice(&dport.to_be_bytes());
    p[off + 4..off + 6].copy_from_slice(&len.to_be_bytes());
    p[off + 6..off + 8].copy_from_slice(&[0, 0]);
    if v6 {
        fill_udp6_checksum(p, off);
    }
}

/// Length of an IP packet according to its own header, if it fits in `p`.
pub fn own_len(p: &[u8]) -> Option<usize> {
    let l = match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 => u16::from_be_bytes([p[2], p[3]]) as usize,
        Some(6) if p.len() >= 40 => 40 + u16::from_be_bytes([p[4], p[5]]) as usize,
        _ => return None,
    };
    (l <= p.len() && l >= 20).then_some(l)
}

/// The destination address of an IP packet.
pub fn dst_addr(p: &[u8]) -> Option<IpAddr> {
    match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 => <[u8; 4]>::try_from(&p[16..20]).ok().map(IpAddr::from),
        Some(6) if p.len() >= 40 => <[u8; 16]>::try_from(&p[24..40]).ok().map(IpAddr::from),
        _ => None,
    }
}
