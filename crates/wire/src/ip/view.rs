//! [`Headers`]: the headers of an IP packet, parsed and checked once, for a packet path to carry along.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::flow::{has_ports, FlowInfo, Fragment};
use super::layout::Layout;
use crate::error::{Error, Result};
use crate::field::{get_u16, get_u32};
use crate::{ip_proto, ipv4, ipv6};

/// What a packet path reads of an IP packet's headers, parsed by one [`Headers::parse`], which checks everything
/// its accessors return: the fixed header (version, addresses, DSCP/ECN and DF, total length), where IPsec's header
/// goes ([`Headers::before_ipsec`], as [`Layout::before_ipsec`]), the fixed header's own layout
/// ([`Headers::fixed`], as [`Layout::fixed`]) and the flow selectors ([`Headers::flow`], as
/// [`flow_key`](super::flow_key)). `Copy`, 64 bytes (one cache line), and it keeps no borrow of the bytes: a path
/// parses a packet once, where it first needs its headers, and hands the view down instead of the transforms
/// re-reading the bytes.
///
/// **A view describes the bytes it was parsed from.** A transform that changes them in place leaves it true only of
/// the fields that it did not change; each function that takes a view says which fields it reads, and a caller
/// must not hand it a view of bytes that have changed there since (a bundle's second SA gets no view: the first
/// one rewrote the header). Reading only the view never panics, whatever the bytes became.
///
/// It parses exactly the packets [`flow_key`](super::flow_key) reads (the same errors), and for each of them every
/// accessor agrees with the function of the same name on the bytes: [`super::version`], [`super::addrs`],
/// [`super::dst_addr`], [`super::dscp_ecn_df`], [`super::own_len`], [`Layout::fixed`], [`Layout::before_ipsec`]
/// (those read less, and accept more: a packet whose ports are cut short, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headers {
    /// The addresses (IPv4: the first 4 bytes).
    src: [u8; 16],
    dst: [u8; 16],
    total_len: u32,
    /// [`Layout::before_ipsec`]'s header length and next header offset.
    ipsec_len: u32,
    ipsec_nh_offset: u32,
    /// The upper layer's offset ([`FlowInfo::l4_offset`]).
    l4_offset: u32,
    frag_ident: u32,
    src_port: u16,
    dst_port: u16,
    /// The upper-layer protocol, the fixed header's, the one at `ipsec_len`.
    upper: u8,
    protocol: u8,
    ipsec_nh: u8,
    dscp_ecn: u8,
    /// [`V6`], [`DF`], [`IPSEC_FRAG`], [`FRAG`], [`FRAG_FIRST`].
    flags: u8,
}

const V6: u8 = 1;
const DF: u8 = 2;
/// A fragment among the headers before IPsec's ([`Layout::fragment`]).
const IPSEC_FRAG: u8 = 4;
/// [`FlowInfo::frag`] is some, and its `first`.
const FRAG: u8 = 8;
const FRAG_FIRST: u8 = 16;

impl Headers {
    /// Parses the headers of the IPv4 or IPv6 packet at the start of `p`: the fixed header with its lengths checked
    /// (as [`super::Packet::new_checked`]), every IPv6 extension header up to the upper layer (as [`ipv6::walk`]),
    /// and the ports of TCP, UDP and SCTP unless the packet is a later fragment. Fails where
    /// [`flow_key`](super::flow_key) fails, with the same error.
    #[inline]
    pub fn parse(p: &[u8]) -> Result<Headers> {
        match p.first().map(|b| b >> 4) {
            Some(4) => Self::v4(p),
            Some(6) => Self::v6(p),
            None => Err(Error::Truncated),
            Some(_) => Err(Error::Malformed),
        }
    }

    #[inline]
    fn v4(p: &[u8]) -> Result<Headers> {
        let h = ipv4::Packet::new_checked(p)?;
        let (header_len, total_len, proto) = (h.header_len(), h.total_len(), h.protocol());
        let mut flags = if h.dont_frag() { DF } else { 0 };
        if h.is_fragment() {
            flags |= IPSEC_FRAG | FRAG;
            if h.frag_offset() == 0 {
                flags |= FRAG_FIRST;
            }
        }
        let (src_port, dst_port) = ports(p, proto, header_len, usize::from(total_len), flags)?;
        let (mut src, mut dst) = ([0u8; 16], [0u8; 16]);
        src[..4].copy_from_slice(&h.src_addr().octets());
        dst[..4].copy_from_slice(&h.dst_addr().octets());
        Ok(Headers {
            src,
            dst,
            total_len: u32::from(total_len),
            ipsec_len: header_len as u32,
            ipsec_nh_offset: ipv4::PROTOCOL_OFFSET as u32,
            l4_offset: header_len as u32,
            frag_ident: u32::from(h.ident()),
            src_port,
            dst_port,
            upper: proto,
            protocol: proto,
            ipsec_nh: proto,
            dscp_ecn: h.dscp_ecn(),
            flags,
        })
    }

    /// The IPv6 extension headers in one walk: where it first meets AH (or ends) is where IPsec's header goes
    /// ([`Layout::before_ipsec`] stops there), where it ends the upper layer ([`ipv6::walk`] steps over AH).
    fn v6(p: &[u8]) -> Result<Headers> {
        let h = ipv6::Packet::new_checked(p)?;
        let mut it = ipv6::ExtHeaderIter::new(p)?;
        // Where IPsec's header goes: the state of the walk when it first meets AH, or at its end.
        let (mut ipsec_len, mut ipsec_nh_offset, mut ipsec_nh, mut ipsec_frag) =
            (0, 0, ip_proto::AH, false);
        let mut at_ah = false;
        let mut frag: Option<(u16, bool, u32)> = None;
        let mut any_frag = false;
        loop {
            if !at_ah && it.next_proto() == ip_proto::AH {
                at_ah = true;
                (ipsec_len, ipsec_nh_offset, ipsec_frag) =
                    (it.offset(), it.next_header_offset(), any_frag);
            }
            let Some(e) = it.next() else { break };
            let e = e?;
            if e.kind == ip_proto::IPV6_FRAG {
                any_frag = true;
                if frag.is_none() {
                    // (The iterator checked that the 8 bytes are within the payload.)
                    let w = get_u16(p, e.offset + 2);
                    frag = Some((w >> 3, w & 1 != 0, get_u32(p, e.offset + 4)));
                }
            }
        }
        if !at_ah {
            (ipsec_len, ipsec_nh_offset, ipsec_nh, ipsec_frag) = (
                it.offset(),
                it.next_header_offset(),
                it.next_proto(),
                any_frag,
            );
        }
        let mut flags = V6 | if ipsec_frag { IPSEC_FRAG } else { 0 };
        let mut frag_ident = 0;
        if let Some((off, _, ident)) = frag.filter(|&(off, more, _)| more || off != 0) {
            flags |= FRAG | if off == 0 { FRAG_FIRST } else { 0 };
            frag_ident = ident;
        }
        let total_len = h.total_len();
        let (src_port, dst_port) = ports(p, it.next_proto(), it.offset(), total_len, flags)?;
        // (Offsets within a packet of at most 40 + 65535 bytes.)
        Ok(Headers {
            src: h.src_addr().octets(),
            dst: h.dst_addr().octets(),
            total_len: total_len as u32,
            ipsec_len: ipsec_len as u32,
            ipsec_nh_offset: ipsec_nh_offset as u32,
            l4_offset: it.offset() as u32,
            frag_ident,
            src_port,
            dst_port,
            upper: it.next_proto(),
            protocol: h.next_header(),
            ipsec_nh,
            dscp_ecn: h.traffic_class(),
            flags,
        })
    }

    #[inline]
    fn addr(&self, a: &[u8; 16]) -> IpAddr {
        if self.is_ipv6() {
            IpAddr::V6(Ipv6Addr::from(*a))
        } else {
            IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
        }
    }

    /// 4 or 6.
    #[inline]
    pub fn version(&self) -> u8 {
        if self.is_ipv6() {
            6
        } else {
            4
        }
    }

    #[inline]
    pub fn is_ipv6(&self) -> bool {
        self.flags & V6 != 0
    }

    #[inline]
    pub fn src_addr(&self) -> IpAddr {
        self.addr(&self.src)
    }

    #[inline]
    pub fn dst_addr(&self) -> IpAddr {
        self.addr(&self.dst)
    }

    /// Source and destination, as [`super::addrs`].
    #[inline]
    pub fn addrs(&self) -> (IpAddr, IpAddr) {
        (self.src_addr(), self.dst_addr())
    }

    /// The DSCP/ECN byte (IPv4 TOS, IPv6 traffic class) and the IPv4 DF bit (false for IPv6), as
    /// [`super::dscp_ecn_df`]: what a tunnel copies to its outer header.
    #[inline]
    pub fn dscp_ecn_df(&self) -> (u8, bool) {
        (self.dscp_ecn, self.flags & DF != 0)
    }

    /// The packet's length as its header gives it (at most the bytes parsed), as [`super::own_len`].
    #[inline]
    pub fn total_len(&self) -> usize {
        self.total_len as usize
    }

    /// The IPv4 protocol or the next header of the IPv6 fixed header (extension headers not stepped over).
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.protocol
    }

    /// The length of the IPv4 header (with its options) or of the IPv6 fixed header.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.is_ipv6() {
            ipv6::HEADER_LEN
        } else {
            self.ipsec_len as usize
        }
    }

    /// An IPv4 fragment (MF set or a non-zero offset), or an IPv6 packet whose Fragment header says so, as
    /// [`FlowInfo::frag`].
    #[inline]
    pub fn fragment(&self) -> Option<Fragment> {
        (self.flags & FRAG != 0).then_some(Fragment {
            ident: self.frag_ident,
            first: self.flags & FRAG_FIRST != 0,
        })
    }

    /// The upper-layer protocol (after the IPv6 extension headers, AH included), as [`FlowInfo::proto`].
    #[inline]
    pub fn upper_proto(&self) -> u8 {
        self.upper
    }

    /// The flow selectors, as [`flow_key`](super::flow_key) gives them.
    #[inline]
    pub fn flow(&self) -> FlowInfo {
        FlowInfo {
            src: self.src_addr(),
            dst: self.dst_addr(),
            proto: self.upper,
            src_port: self.src_port,
            dst_port: self.dst_port,
            l4_offset: self.l4_offset as usize,
            frag: self.fragment(),
        }
    }

    /// The IP header and the IPv6 extension headers that go before ESP or AH, as [`Layout::before_ipsec`].
    #[inline]
    pub fn before_ipsec(&self) -> Layout {
        Layout {
            v6: self.is_ipv6(),
            header_len: self.ipsec_len as usize,
            next_header_offset: self.ipsec_nh_offset as usize,
            next_header: self.ipsec_nh,
            total_len: self.total_len as usize,
            fragment: self.flags & IPSEC_FRAG != 0,
        }
    }

    /// The IPv4 header or the IPv6 fixed header (extension headers count as payload), as [`Layout::fixed`].
    #[inline]
    pub fn fixed(&self) -> Layout {
        if self.is_ipv6() {
            Layout {
                v6: true,
                header_len: ipv6::HEADER_LEN,
                next_header_offset: ipv6::NEXT_HEADER_OFFSET,
                next_header: self.protocol,
                total_len: self.total_len as usize,
                fragment: false,
            }
        } else {
            self.before_ipsec()
        }
    }
}

/// The ports of a TCP, UDP or SCTP header at `at` of the packet `p` of `total_len` bytes, unless `flags` say it is a
/// later fragment; `(0, 0)` for other protocols (as [`flow_key`](super::flow_key) reads them).
#[inline]
fn ports(p: &[u8], proto: u8, at: usize, total_len: usize, flags: u8) -> Result<(u16, u16)> {
    let later_frag = flags & (FRAG | FRAG_FIRST) == FRAG;
    if !has_ports(proto) || later_frag {
        return Ok((0, 0));
    }
    if at + 4 > total_len {
        return Err(Error::Truncated);
    }
    Ok((get_u16(p, at), get_u16(p, at + 2)))
}
