//! [`Headers`]: the headers of an IP packet, parsed and checked once, for a packet path to carry along.

use std::net::IpAddr;

use super::flow::{has_ports, FlowInfo, Fragment};
use super::layout::Layout;
use crate::error::{Error, Result};
use crate::field::{get_u16, get_u32};
use crate::{ip_proto, ipv4, ipv6};

/// What a packet path reads of an IP packet's headers, parsed by one [`Headers::parse`], which checks everything
/// its accessors return: the fixed header (version, addresses, DSCP/ECN and DF, total length), where IPsec's header
/// goes ([`Headers::before_ipsec`], as [`Layout::before_ipsec`]), the fixed header's own layout
/// ([`Headers::fixed`], as [`Layout::fixed`]) and the flow selectors ([`Headers::flow`], as
/// [`flow_key`](super::flow_key)). `Copy`, and it keeps no borrow of the bytes: a path parses a packet once, where
/// it first needs its headers, and hands the view down instead of the transforms re-reading the bytes.
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
    flow: FlowInfo,
    ipsec: Layout,
    /// The IPv4 protocol or the IPv6 fixed header's next header.
    protocol: u8,
    dscp_ecn: u8,
    df: bool,
}

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
        let (header_len, total_len, proto) =
            (h.header_len(), usize::from(h.total_len()), h.protocol());
        let frag = h.is_fragment().then(|| Fragment {
            ident: u32::from(h.ident()),
            first: h.frag_offset() == 0,
        });
        let ipsec = Layout {
            v6: false,
            header_len,
            next_header_offset: ipv4::PROTOCOL_OFFSET,
            next_header: proto,
            total_len,
            fragment: frag.is_some(),
        };
        Ok(Headers {
            flow: Self::with_ports(
                p,
                h.src_addr().into(),
                h.dst_addr().into(),
                proto,
                header_len,
                total_len,
                frag,
            )?,
            ipsec,
            protocol: proto,
            dscp_ecn: h.dscp_ecn(),
            df: h.dont_frag(),
        })
    }

    /// The IPv6 extension headers in one walk: where it first meets AH (or ends) is where IPsec's header goes
    /// ([`Layout::before_ipsec`] stops there), where it ends the upper layer ([`ipv6::walk`] steps over AH).
    fn v6(p: &[u8]) -> Result<Headers> {
        let h = ipv6::Packet::new_checked(p)?;
        let total_len = h.total_len();
        let mut it = ipv6::ExtHeaderIter::new(p)?;
        let mut ipsec = None;
        let mut frag: Option<(u16, bool, u32)> = None;
        let mut any_frag = false;
        loop {
            if ipsec.is_none() && it.next_proto() == ip_proto::AH {
                ipsec = Some(Self::v6_layout(&it, total_len, any_frag));
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
        let ipsec = ipsec.unwrap_or_else(|| Self::v6_layout(&it, total_len, any_frag));
        let frag = frag
            .filter(|&(off, more, _)| more || off != 0)
            .map(|(off, _, ident)| Fragment {
                ident,
                first: off == 0,
            });
        Ok(Headers {
            flow: Self::with_ports(
                p,
                h.src_addr().into(),
                h.dst_addr().into(),
                it.next_proto(),
                it.offset(),
                total_len,
                frag,
            )?,
            ipsec,
            protocol: h.next_header(),
            dscp_ecn: h.traffic_class(),
            df: false,
        })
    }

    #[inline]
    fn v6_layout(it: &ipv6::ExtHeaderIter<'_>, total_len: usize, fragment: bool) -> Layout {
        Layout {
            v6: true,
            header_len: it.offset(),
            next_header_offset: it.next_header_offset(),
            next_header: it.next_proto(),
            total_len,
            fragment,
        }
    }

    /// The flow selectors, with the ports read (as [`flow_key`](super::flow_key) does).
    #[inline]
    fn with_ports(
        p: &[u8],
        src: IpAddr,
        dst: IpAddr,
        proto: u8,
        l4_offset: usize,
        end: usize,
        frag: Option<Fragment>,
    ) -> Result<FlowInfo> {
        let (mut src_port, mut dst_port) = (0, 0);
        if has_ports(proto) && frag.is_none_or(|f| f.first) {
            if l4_offset + 4 > end {
                return Err(Error::Truncated);
            }
            src_port = get_u16(p, l4_offset);
            dst_port = get_u16(p, l4_offset + 2);
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

    /// 4 or 6.
    #[inline]
    pub fn version(&self) -> u8 {
        if self.ipsec.v6 {
            6
        } else {
            4
        }
    }

    #[inline]
    pub fn is_ipv6(&self) -> bool {
        self.ipsec.v6
    }

    #[inline]
    pub fn src_addr(&self) -> IpAddr {
        self.flow.src
    }

    #[inline]
    pub fn dst_addr(&self) -> IpAddr {
        self.flow.dst
    }

    /// Source and destination, as [`super::addrs`].
    #[inline]
    pub fn addrs(&self) -> (IpAddr, IpAddr) {
        (self.flow.src, self.flow.dst)
    }

    /// The DSCP/ECN byte (IPv4 TOS, IPv6 traffic class) and the IPv4 DF bit (false for IPv6), as
    /// [`super::dscp_ecn_df`]: what a tunnel copies to its outer header.
    #[inline]
    pub fn dscp_ecn_df(&self) -> (u8, bool) {
        (self.dscp_ecn, self.df)
    }

    /// The packet's length as its header gives it (at most the bytes parsed), as [`super::own_len`].
    #[inline]
    pub fn total_len(&self) -> usize {
        self.ipsec.total_len
    }

    /// The IPv4 protocol or the next header of the IPv6 fixed header (extension headers not stepped over).
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.protocol
    }

    /// The length of the IPv4 header (with its options) or of the IPv6 fixed header.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.ipsec.v6 {
            ipv6::HEADER_LEN
        } else {
            self.ipsec.header_len
        }
    }

    /// An IPv4 fragment (MF set or a non-zero offset), or an IPv6 packet with a Fragment header that says so.
    #[inline]
    pub fn fragment(&self) -> Option<Fragment> {
        self.flow.frag
    }

    /// The upper-layer protocol (after the IPv6 extension headers, AH included), as [`FlowInfo::proto`].
    #[inline]
    pub fn upper_proto(&self) -> u8 {
        self.flow.proto
    }

    /// The flow selectors, as [`flow_key`](super::flow_key) gives them.
    #[inline]
    pub fn flow(&self) -> FlowInfo {
        self.flow
    }

    /// The IP header and the IPv6 extension headers that go before ESP or AH, as [`Layout::before_ipsec`].
    #[inline]
    pub fn before_ipsec(&self) -> Layout {
        self.ipsec
    }

    /// The IPv4 header or the IPv6 fixed header (extension headers count as payload), as [`Layout::fixed`].
    #[inline]
    pub fn fixed(&self) -> Layout {
        if self.ipsec.v6 {
            Layout {
                v6: true,
                header_len: ipv6::HEADER_LEN,
                next_header_offset: ipv6::NEXT_HEADER_OFFSET,
                next_header: self.protocol,
                total_len: self.ipsec.total_len,
                fragment: false,
            }
        } else {
            self.ipsec
        }
    }
}
