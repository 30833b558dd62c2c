//! The IP-header steps of the transforms, done by `wire` (layout, length and checksum fix-ups, outer headers, the
//! UDP header of ESP in UDP), with their failures as drop reasons.

use crate::Drop;
use netveil_wire::ip::{self, Layout};
use netveil_wire::{ipv4, ipv6, PacketBuf};
use std::net::IpAddr;

/// The IP header and the IPv6 extension headers that go before ESP or AH (see [`Layout::before_ipsec`]).
pub fn parse(p: &[u8]) -> Result<Layout, Drop> {
    Layout::before_ipsec(p).map_err(|_| Drop::Malformed)
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
