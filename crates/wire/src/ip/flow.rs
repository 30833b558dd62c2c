//! The flow selectors of a packet ([`flow_key`], [`FlowInfo`]): addresses, upper-layer protocol, ports, fragment.

use std::net::IpAddr;

use super::packet::Packet;
use crate::error::{Error, Result};
use crate::field::get_u16;
use crate::{ip_proto, ipv6};

/// SCTP protocol number (ports at the same offsets as TCP/UDP).
pub const SCTP: u8 = 132;

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

/// Whether a protocol's header starts with the two ports (TCP, UDP, SCTP).
pub(crate) fn has_ports(proto: u8) -> bool {
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
