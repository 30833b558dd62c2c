//! [`Layout`]: where the headers of an IP packet end and what follows them.

use super::bytes::{fix_v4_lengths, fix_v6_lengths, version};
use super::packet::Packet;
use crate::error::{Error, Result};
use crate::{ip_proto, ipv4, ipv6};

/// Where the headers of an IP packet end and what follows them: what a transform that inserts or removes a header
/// after the IP header (ESP, AH, PSP's UDP) needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub v6: bool,
    /// Length of the IP header, and with [`Layout::before_ipsec`] of the IPv6 extension headers that go before ESP
    /// or AH: where the header after them starts.
    pub header_len: usize,
    /// Offset of the byte that holds [`Layout::next_header`] (the IPv4 protocol, the IPv6 fixed header's or an
    /// extension header's next header).
    pub next_header_offset: usize,
    /// The protocol of the header at `header_len`.
    pub next_header: u8,
    /// Length of the packet as its header gives it (at most the buffer's length).
    pub total_len: usize,
    /// An IPv4 fragment (MF set or a non-zero offset), or with [`Layout::before_ipsec`] an IPv6 packet with a
    /// Fragment header among the headers stepped over.
    pub fragment: bool,
}

impl Layout {
    #[inline]
    fn v4<T: AsRef<[u8]>>(h: &ipv4::Packet<T>) -> Layout {
        Layout {
            v6: false,
            header_len: h.header_len(),
            next_header_offset: ipv4::PROTOCOL_OFFSET,
            next_header: h.protocol(),
            total_len: usize::from(h.total_len()),
            fragment: h.is_fragment(),
        }
    }

    /// The IPv4 header or the IPv6 fixed header (extension headers count as payload), checked as
    /// [`Packet::new_checked`] does.
    #[inline]
    pub fn fixed(p: &[u8]) -> Result<Layout> {
        Ok(match Packet::new_checked(p)? {
            Packet::V4(h) => Self::v4(&h),
            Packet::V6(h) => Layout {
                v6: true,
                header_len: ipv6::HEADER_LEN,
                next_header_offset: ipv6::NEXT_HEADER_OFFSET,
                next_header: h.next_header(),
                total_len: h.total_len(),
                fragment: false,
            },
        })
    }

    /// The IP header and, for IPv6, the extension headers that go before ESP or AH (Hop-by-Hop, Routing, Fragment,
    /// Destination Options; RFC 4303 section 3.1.1): `header_len` is where IPsec inserts or finds its header. Fails
    /// if the header is invalid or an extension header runs past the payload.
    #[inline]
    pub fn before_ipsec(p: &[u8]) -> Result<Layout> {
        // IPv4 inline; the IPv6 extension header walk out of line.
        match version(p) {
            Some(4) => Ok(Self::v4(&ipv4::Packet::new_checked(p)?)),
            Some(6) => Self::v6_before_ipsec(p),
            None => Err(Error::Truncated),
            Some(_) => Err(Error::Malformed),
        }
    }

    fn v6_before_ipsec(p: &[u8]) -> Result<Layout> {
        let mut it = ipv6::ExtHeaderIter::new(p)?.stop_at_ah();
        let mut fragment = false;
        for e in it.by_ref() {
            fragment |= e?.kind == ip_proto::IPV6_FRAG;
        }
        Ok(Layout {
            v6: true,
            header_len: it.offset(),
            next_header_offset: it.next_header_offset(),
            next_header: it.next_proto(),
            total_len: ipv6::Packet::new_unchecked(p).total_len(),
            fragment,
        })
    }

    /// After a transform changed what follows the headers of this layout in `p` (which now holds exactly the
    /// packet): writes `next_header` at [`Layout::next_header_offset`], then [`fix_lengths`](super::fix_lengths).
    #[inline]
    pub fn fix_header(&self, p: &mut [u8], next_header: u8) -> Result<()> {
        *p.get_mut(self.next_header_offset).ok_or(Error::Truncated)? = next_header;
        if self.v6 {
            fix_v6_lengths(p)
        } else {
            fix_v4_lengths(p)
        }
    }
}
