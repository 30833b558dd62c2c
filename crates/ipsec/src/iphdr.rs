//! The IP-header steps of the transforms, done by `wire` (layout, length and checksum fix-ups, outer headers, the
//! UDP header of ESP in UDP), with their failures as drop reasons.

use crate::Drop;
use netveil_wire::ip::{self, Headers, Layout};
use netveil_wire::{ipv4, ipv6, PacketBuf};
use std::net::IpAddr;

/// The IP header and the IPv6 extension headers that go before ESP or AH (see [`Layout::before_ipsec`]).
pub fn parse(p: &[u8]) -> Result<Layout, Drop> {
    Layout::before_ipsec(p).map_err(|_| Drop::Malformed)
}

/// Where a transform reads the IP header of the packet it protects: a view the caller parsed once and hands down
/// ([`Headers`], of the bytes as they are when the transform starts), or the bytes themselves. Each read is made
/// before the transform changes the header (the view does not follow the changes).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Hdr<'a> {
    Parsed(&'a Headers),
    Bytes,
}

impl Hdr<'_> {
    /// The DSCP/ECN byte and the IPv4 DF bit of the fixed header (see [`ip::dscp_ecn_df`]).
    #[inline]
    pub(crate) fn dscp_ecn_df(self, p: &[u8]) -> (u8, bool) {
        match self {
            Hdr::Parsed(h) => h.dscp_ecn_df(),
            Hdr::Bytes => ip::dscp_ecn_df(p),
        }
    }

    /// The next header of a tunnel whose inner packet this is: IPv4 in IP or IPv6 (by the version nibble).
    #[inline]
    pub(crate) fn tunnel_next_header(self, p: &[u8]) -> Result<u8, Drop> {
        let v = match self {
            Hdr::Parsed(h) => Some(h.version()),
            Hdr::Bytes => ip::version(p),
        };
        match v {
            Some(4) => Ok(netveil_wire::ip_proto::IPIP),
            Some(6) => Ok(netveil_wire::ip_proto::IPV6),
            _ => Err(Drop::Malformed),
        }
    }

    /// The headers up to where ESP or AH goes ([`parse`]).
    #[inline]
    pub(crate) fn layout(self, p: &[u8]) -> Result<Layout, Drop> {
        match self {
            Hdr::Parsed(h) => Ok(h.before_ipsec()),
            Hdr::Bytes => parse(p),
        }
    }

    /// The source and destination (see [`ip::addrs`]).
    #[inline]
    pub(crate) fn addrs(self, p: &[u8]) -> Option<(IpAddr, IpAddr)> {
        match self {
            Hdr::Parsed(h) => Some(h.addrs()),
            Hdr::Bytes => ip::addrs(p),
        }
    }
}

/// After the transform changed what follows the headers of `ip`: writes `next_header` and fixes the lengths (and
/// the IPv4 checksum) of the packet that `p` holds.
pub fn fix_header(ip: &Layout, p: &mut [u8], next_header: u8) -> Result<(), Drop> {
    ip.fix_header(p, next_header).map_err(|_| Drop::TooBig)
}

/// Pushes the outer IP header from `local` to `remote` of a tunnel (TTL or hop limit 64, DSCP/ECN `tos`, and for
/// IPv4 DF `df` and identification `id`) in front of the packet, with `udp` a UDP header with these ports between
/// them. `proto` is the protocol of what follows the IP header without UDP.
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
    let repr = match (local, remote) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => ip::Repr::V4(ipv4::Repr {
            src,
            dst,
            protocol: proto,
            payload_len: 0,
            ttl: 64,
            dscp_ecn: tos,
            ident: id,
            dont_frag: df,
        }),
        (IpAddr::V6(src), IpAddr::V6(dst)) => ip::Repr::V6(ipv6::Repr {
            src,
            dst,
            next_header: proto,
            payload_len: 0,
            hop_limit: 64,
            traffic_class: tos,
            flow_label: 0,
        }),
        _ => return Err(Drop::Unsupported),
    };
    // RFC 3948: the UDP checksum of ESP-in-UDP over IPv4 is sent as zero; over IPv6 it is computed.
    ip::push_outer(pkt, repr, udp).map_err(|_| Drop::TooBig)
}

/// Writes the UDP header of ESP-in-UDP at `off` (transport mode): checksum 0 over IPv4, computed over IPv6.
pub fn write_udp_encap(p: &mut [u8], off: usize, sport: u16, dport: u16) -> Result<(), Drop> {
    ip::emit_udp_header(p, off, sport, dport, true).map_err(|_| Drop::TooBig)
}
