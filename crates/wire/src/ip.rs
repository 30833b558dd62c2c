//! Version-dispatching IP helpers.

use std::net::{IpAddr, SocketAddr};

use crate::field::get_u16;
use crate::{ip_proto, ipv4, ipv6, udp, Error, PacketBuf, Result};

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
    /// packet): writes `next_header` at [`Layout::next_header_offset`], then [`fix_lengths`].
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
fn fix_v4_lengths(p: &mut [u8]) -> Result<()> {
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
fn fix_v6_lengths(p: &mut [u8]) -> Result<()> {
    let payload = p
        .len()
        .checked_sub(ipv6::HEADER_LEN)
        .ok_or(Error::Truncated)?;
    let payload = u16::try_from(payload).map_err(|_| Error::Malformed)?;
    ipv6::Packet::new_unchecked(p).set_payload_len(payload);
    Ok(())
}

/// A parsed IPv4 header or IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    V4(ipv4::Repr),
    V6(ipv6::Repr),
}

impl Repr {
    /// Parses the header of a checked packet.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&T>) -> Result<Repr> {
        Ok(match p {
            Packet::V4(h) => Repr::V4(ipv4::Repr::parse(h)?),
            Packet::V6(h) => Repr::V6(ipv6::Repr::parse(h)?),
        })
    }

    pub fn src_addr(&self) -> IpAddr {
        match self {
            Repr::V4(r) => r.src.into(),
            Repr::V6(r) => r.src.into(),
        }
    }

    pub fn dst_addr(&self) -> IpAddr {
        match self {
            Repr::V4(r) => r.dst.into(),
            Repr::V6(r) => r.dst.into(),
        }
    }

    /// The IPv4 protocol or the IPv6 next header.
    pub fn next_header(&self) -> u8 {
        match self {
            Repr::V4(r) => r.protocol,
            Repr::V6(r) => r.next_header,
        }
    }

    pub fn set_next_header(&mut self, v: u8) {
        match self {
            Repr::V4(r) => r.protocol = v,
            Repr::V6(r) => r.next_header = v,
        }
    }

    pub fn payload_len(&self) -> usize {
        match self {
            Repr::V4(r) => r.payload_len,
            Repr::V6(r) => r.payload_len,
        }
    }

    pub fn set_payload_len(&mut self, v: usize) {
        match self {
            Repr::V4(r) => r.payload_len = v,
            Repr::V6(r) => r.payload_len = v,
        }
    }

    /// 20 (IPv4, no options) or 40.
    pub fn header_len(&self) -> usize {
        match self {
            Repr::V4(r) => r.header_len(),
            Repr::V6(r) => r.header_len(),
        }
    }

    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len()
    }

    /// True if the payload length fits the header's length field.
    fn fits(&self) -> bool {
        match self {
            Repr::V4(r) => r.buffer_len() <= usize::from(u16::MAX),
            Repr::V6(r) => r.payload_len <= usize::from(u16::MAX),
        }
    }

    /// Writes the header (IPv4 with its checksum) at the start of `buf`. Fails (`Truncated`) if `buf` is shorter
    /// than the header, (`Malformed`) if the payload length does not fit the length field.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < self.header_len() {
            return Err(Error::Truncated);
        }
        if !self.fits() {
            return Err(Error::Malformed);
        }
        match self {
            Repr::V4(r) => r.emit(&mut ipv4::Packet::new_unchecked(buf)),
            Repr::V6(r) => r.emit(&mut ipv6::Packet::new_unchecked(buf)),
        }
        Ok(())
    }
}

/// Pushes the outer header `ip` in front of the packet in `pkt` (tunnel mode), and with `udp` a UDP header from and
/// to these ports between the two (then `ip`'s next header becomes UDP). `ip`'s payload length is set to what
/// follows it. The UDP checksum is computed over IPv6, where it is mandatory (RFC 8200 section 8.1), and left zero
/// over IPv4 (as RFC 3948 section 3.1.2 sends ESP in UDP). Fails (`Truncated`) without the headroom, (`Malformed`)
/// if the result would not fit the length fields.
pub fn push_outer(pkt: &mut PacketBuf, mut ip: Repr, udp: Option<(u16, u16)>) -> Result<()> {
    if let Some((src_port, dst_port)) = udp {
        let payload_len = pkt.len();
        if udp::HEADER_LEN + payload_len > usize::from(u16::MAX) {
            return Err(Error::Malformed);
        }
        let h = pkt.push_front(udp::HEADER_LEN).ok_or(Error::Truncated)?;
        udp::Repr {
            src_port,
            dst_port,
            payload_len,
        }
        .emit(&mut udp::Packet::new_unchecked(h));
        ip.set_next_header(ip_proto::UDP);
    }
    ip.set_payload_len(pkt.len());
    if !ip.fits() {
        return Err(Error::Malformed);
    }
    let h = pkt.push_front(ip.header_len()).ok_or(Error::Truncated)?;
    ip.emit(h)?;
    if let (Some(_), Repr::V6(r)) = (udp, ip) {
        udp::Packet::new_unchecked(&mut pkt.data_mut()[ipv6::HEADER_LEN..])
            .fill_checksum(r.src.into(), r.dst.into());
    }
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

    /// An IPv4 header without options, 192.0.2.1 -> 192.0.2.2, TOS 0xb8, DF, ID 0x1234, and `payload`.
    fn v4_with(payload: &[u8]) -> Vec<u8> {
        let r = ipv4::Repr {
            src: [192, 0, 2, 1].into(),
            dst: [192, 0, 2, 2].into(),
            protocol: ip_proto::TCP,
            payload_len: payload.len(),
            ttl: 64,
            dscp_ecn: 0xb8,
            ident: 0x1234,
            dont_frag: true,
        };
        let mut v = vec![0u8; r.buffer_len()];
        r.emit(&mut ipv4::Packet::new_unchecked(&mut v[..]));
        v[20..].copy_from_slice(payload);
        v
    }

    /// Fixed-header reads: version, destination, DSCP/ECN and DF, own length; short or foreign input gives `None`.
    #[test]
    fn fixed_header_reads() {
        let v4 = v4_with(&[1, 2, 3, 4]);
        assert_eq!(version(&v4), Some(4));
        assert_eq!(dst_addr(&v4), Some("192.0.2.2".parse().unwrap()));
        assert_eq!(dscp_ecn_df(&v4), (0xb8, true));
        assert_eq!(own_len(&v4), Some(24));
        // Padding after the packet is not part of it; a length past the buffer or below 20 is refused.
        let mut padded = v4.clone();
        padded.extend_from_slice(&[0; 7]);
        assert_eq!(own_len(&padded), Some(24));
        assert_eq!(own_len(&v4[..23]), None);
        let mut short = v4.clone();
        short[3] = 19;
        assert_eq!(own_len(&short), None);

        let mut v6 = ipv6::tests::echo_ext();
        v6[0] = 0x6a;
        v6[1] = 0xb0;
        assert_eq!(version(&v6), Some(6));
        assert_eq!(dst_addr(&v6), Some("ff02::1".parse().unwrap()));
        assert_eq!(dscp_ecn_df(&v6), (0xab, false));
        assert_eq!(own_len(&v6), Some(80));

        for bad in [&[][..], &v4[..19], &v6[..39], &[0x55; 40][..]] {
            assert_eq!(dst_addr(bad), None);
            assert_eq!(dscp_ecn_df(bad), (0, false));
            assert_eq!(own_len(bad), None);
        }
        assert_eq!(version(&[]), None);
        assert_eq!(ports(&[0x12, 0x34, 0x00, 0x50, 9]), Some((0x1234, 80)));
        assert_eq!(ports(&[0x12, 0x34, 0x00]), None);
    }

    /// The IPsec layout steps over the IPv6 extension headers that go before ESP/AH and stops at AH; the fixed
    /// layout stops after the fixed header.
    #[test]
    fn layouts() {
        let syn = ipv4::tests::SYN;
        let want = Layout {
            v6: false,
            header_len: 20,
            next_header_offset: 9,
            next_header: ip_proto::TCP,
            total_len: 60,
            fragment: false,
        };
        assert_eq!(Layout::fixed(&syn), Ok(want));
        assert_eq!(Layout::before_ipsec(&syn), Ok(want));
        let mut frag = syn;
        frag[7] = 1;
        assert!(Layout::before_ipsec(&frag).unwrap().fragment);
        frag[7] = 0;
        frag[6] = 0x20;
        assert!(Layout::fixed(&frag).unwrap().fragment);

        let v6 = ipv6::tests::echo_ext();
        let l = Layout::before_ipsec(&v6).unwrap();
        assert_eq!(
            (l.v6, l.header_len, l.next_header_offset, l.next_header),
            (true, 64, 48, ip_proto::ICMPV6)
        );
        assert_eq!((l.total_len, l.fragment), (80, false));
        let l = Layout::fixed(&v6).unwrap();
        assert_eq!(
            (l.header_len, l.next_header_offset, l.next_header),
            (40, 6, ip_proto::HOPOPT)
        );

        // Fragment -> AH -> UDP: IPsec's header goes after the fragment header; AH is not stepped over.
        let mut v = vec![0u8; 40];
        v[0] = 0x60;
        v[6] = ip_proto::IPV6_FRAG;
        v.extend_from_slice(&[ip_proto::AH, 0, 0, 1, 0, 0, 0, 7]);
        v.extend_from_slice(&[ip_proto::UDP, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
        let pl = (v.len() - 40) as u16;
        v[4..6].copy_from_slice(&pl.to_be_bytes());
        let l = Layout::before_ipsec(&v).unwrap();
        assert_eq!(
            (
                l.header_len,
                l.next_header_offset,
                l.next_header,
                l.fragment
            ),
            (48, 40, ip_proto::AH, true)
        );

        // Malformed input: an error, never a panic.
        for n in 0..v6.len() {
            assert!(Layout::before_ipsec(&v6[..n]).is_err());
            assert!(Layout::fixed(&v6[..n]).is_err());
        }
        for n in 0..syn.len() {
            assert!(Layout::before_ipsec(&syn[..n]).is_err());
        }
        let mut bad_ihl = syn;
        bad_ihl[0] = 0x44;
        assert_eq!(Layout::before_ipsec(&bad_ihl), Err(Error::Malformed));
        assert_eq!(Layout::fixed(&bad_ihl), Err(Error::Malformed));
        let mut bad_version = syn;
        bad_version[0] = 0x55;
        assert_eq!(Layout::before_ipsec(&bad_version), Err(Error::Malformed));
        // A Hop-by-Hop header running past the payload.
        let mut cut = v6.clone();
        cut[41] = 9;
        assert_eq!(Layout::before_ipsec(&cut), Err(Error::Truncated));
    }

    /// Lengths and the IPv4 checksum follow the packet's new length; the next header is written where the layout
    /// says; what cannot be fixed is an error.
    #[test]
    fn fix_header_and_lengths() {
        let mut p = v4_with(&[7; 8]);
        let l = Layout::before_ipsec(&p).unwrap();
        p.extend_from_slice(&[0; 12]);
        l.fix_header(&mut p, ip_proto::ESP).unwrap();
        let h = ipv4::Packet::new_checked(&p[..]).unwrap();
        assert_eq!((h.total_len(), h.protocol()), (40, ip_proto::ESP));
        assert!(h.verify_checksum());

        let mut v6 = ipv6::tests::echo_ext();
        let l = Layout::before_ipsec(&v6).unwrap();
        v6.truncate(70);
        l.fix_header(&mut v6, ip_proto::UDP).unwrap();
        let h = ipv6::Packet::new_checked(&v6[..]).unwrap();
        assert_eq!(h.payload_len(), 30);
        assert_eq!(v6[48], ip_proto::UDP);
        assert_eq!(h.next_header(), ip_proto::HOPOPT);

        let mut big = v4_with(&[]);
        big.resize(65536, 0);
        assert_eq!(fix_lengths(&mut big), Err(Error::Malformed));
        big.truncate(65535);
        assert_eq!(fix_lengths(&mut big), Ok(()));
        let mut big6 = vec![0u8; 40 + 65536];
        big6[0] = 0x60;
        assert_eq!(fix_lengths(&mut big6), Err(Error::Malformed));
        assert_eq!(fix_lengths(&mut big6[..40 + 65535]), Ok(()));
        assert_eq!(fix_lengths(&mut v4_with(&[])[..19]), Err(Error::Truncated));
        assert_eq!(fix_lengths(&mut big6[..39]), Err(Error::Truncated));
        assert_eq!(fix_lengths(&mut []), Err(Error::Malformed));
        assert_eq!(fix_lengths(&mut [0x55; 40]), Err(Error::Malformed));
        let mut ihl = v4_with(&[0; 4]);
        ihl[0] = 0x47; // 28-byte header in a 24-byte packet
        assert_eq!(fix_lengths(&mut ihl), Err(Error::Malformed));
        assert_eq!(
            l.fix_header(&mut v6[..40], ip_proto::UDP),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn repr_round_trip() {
        let v4 = v4_with(&[5; 10]);
        let r = Repr::parse(&Packet::new_checked(&v4[..]).unwrap()).unwrap();
        assert_eq!(
            (r.header_len(), r.payload_len(), r.buffer_len()),
            (20, 10, 30)
        );
        assert_eq!(r.next_header(), ip_proto::TCP);
        assert_eq!(r.src_addr(), "192.0.2.1".parse::<IpAddr>().unwrap());
        let mut out = vec![0u8; 20];
        r.emit(&mut out).unwrap();
        assert_eq!(out, v4[..20]);
        let v6 = ipv6::tests::echo_ext();
        let mut r6 = Repr::parse(&Packet::new_checked(&v6[..]).unwrap()).unwrap();
        assert_eq!(r6.dst_addr(), "ff02::1".parse::<IpAddr>().unwrap());
        let mut out = vec![0u8; 41];
        r6.emit(&mut out).unwrap();
        assert_eq!(out[..40], v6[..40]);
        assert_eq!(r6.emit(&mut out[..39]), Err(Error::Truncated));
        r6.set_payload_len(65536);
        assert_eq!(r6.emit(&mut out), Err(Error::Malformed));
        let mut r = r;
        r.set_payload_len(65516);
        assert_eq!(r.emit(&mut out), Err(Error::Malformed));
        r.set_payload_len(65515);
        r.set_next_header(ip_proto::UDP);
        r.emit(&mut out).unwrap();
        assert_eq!((out[2], out[3], out[9]), (0xff, 0xff, ip_proto::UDP));
    }

    /// The outer header of a tunnel, with and without UDP, in both families; byte for byte for IPv4.
    #[test]
    fn push_outer_headers() {
        let inner = v4_with(&[9; 12]);
        let outer4 = Repr::V4(ipv4::Repr {
            src: [198, 51, 100, 1].into(),
            dst: [198, 51, 100, 2].into(),
            protocol: ip_proto::ESP,
            payload_len: 0,
            ttl: 64,
            dscp_ecn: 0x28,
            ident: 0xbeef,
            dont_frag: true,
        });
        let mut b = PacketBuf::from_slice(&inner, 64, 0);
        push_outer(&mut b, outer4, None).unwrap();
        let mut want = vec![
            0x45, 0x28, 0, 52, 0xbe, 0xef, 0x40, 0, 64, 50, 0, 0, 198, 51, 100, 1, 198, 51, 100, 2,
        ];
        let c = crate::checksum::checksum(&want);
        want[10..12].copy_from_slice(&c.to_be_bytes());
        want.extend_from_slice(&inner);
        assert_eq!(b.data(), &want[..]);

        let mut b = PacketBuf::from_slice(&inner, 64, 0);
        push_outer(&mut b, outer4, Some((4500, 4501))).unwrap();
        let ip = Packet::new_checked(b.data()).unwrap();
        assert_eq!((ip.next_header(), ip.total_len()), (ip_proto::UDP, 60));
        let u = udp::Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(
            (u.src_port(), u.dst_port(), u.len(), u.checksum()),
            (4500, 4501, 40, 0)
        );
        assert_eq!(u.payload(), &inner[..]);

        let outer6 = Repr::V6(ipv6::Repr {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            next_header: ip_proto::ESP,
            payload_len: 0,
            hop_limit: 64,
            traffic_class: 0x28,
            flow_label: 0,
        });
        let mut b = PacketBuf::from_slice(&inner, 64, 0);
        push_outer(&mut b, outer6, Some((4500, 4500))).unwrap();
        let ip = Packet::new_checked(b.data()).unwrap();
        assert_eq!(
            (ip.next_header(), ip.total_len()),
            (ip_proto::UDP, 40 + 8 + 32)
        );
        assert_eq!(dscp_ecn_df(b.data()), (0x28, false));
        let u = udp::Packet::new_checked(ip.payload()).unwrap();
        assert_ne!(u.checksum(), 0);
        assert!(u.verify_checksum(ip.src_addr(), ip.dst_addr()));
        let mut b = PacketBuf::from_slice(&inner, 64, 0);
        push_outer(&mut b, outer6, None).unwrap();
        assert_eq!(b.len(), 40 + 32);
        assert_eq!(b.data()[6], ip_proto::ESP);

        // Not enough headroom, or too long for the length fields.
        let mut b = PacketBuf::from_slice(&inner, 27, 0);
        assert_eq!(
            push_outer(&mut b, outer4, Some((1, 2))),
            Err(Error::Truncated)
        );
        let mut b = PacketBuf::from_slice(&vec![0u8; 65516], 64, 0);
        assert_eq!(push_outer(&mut b, outer4, None), Err(Error::Malformed));
        let mut b = PacketBuf::from_slice(&vec![0u8; 65528], 64, 0);
        assert_eq!(
            push_outer(&mut b, outer6, Some((1, 2))),
            Err(Error::Malformed)
        );
        let mut b = PacketBuf::from_slice(&vec![0u8; 65535], 64, 0);
        push_outer(&mut b, outer6, None).unwrap();
    }

    /// Transport-mode UDP headers: checksum zero over IPv4, computed over IPv6 when asked; bad input is an error.
    #[test]
    fn udp_header_in_place() {
        let mut p = v4_with(&[0xee; 20]);
        emit_udp_header(&mut p, 20, 4500, 4500, true).unwrap();
        let u = udp::Packet::new_checked(&p[20..]).unwrap();
        assert_eq!(
            (u.src_port(), u.dst_port(), u.len(), u.checksum()),
            (4500, 4500, 20, 0)
        );

        let mut v6 = ipv6::tests::echo_ext();
        emit_udp_header(&mut v6, 64, 1000, 2000, true).unwrap();
        let u = udp::Packet::new_checked(&v6[64..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.len()), (1000, 2000, 16));
        assert!(u.verify_checksum("fe80::1".parse().unwrap(), "ff02::1".parse().unwrap()));
        emit_udp_header(&mut v6, 40, 1000, 2000, false).unwrap();
        assert_eq!(udp::Packet::new_checked(&v6[40..]).unwrap().checksum(), 0);

        assert_eq!(
            emit_udp_header(&mut p, 33, 1, 2, true),
            Err(Error::Truncated)
        );
        assert_eq!(
            emit_udp_header(&mut p, 41, 1, 2, true),
            Err(Error::Truncated)
        );
        assert_eq!(
            emit_udp_header(&mut p, 10, 1, 2, true),
            Err(Error::Malformed)
        );
        assert_eq!(
            emit_udp_header(&mut v6, 20, 1, 2, true),
            Err(Error::Malformed)
        );
        assert_eq!(
            emit_udp_header(&mut [0x55; 40], 20, 1, 2, true),
            Err(Error::Malformed)
        );
        let mut big = v4_with(&[]);
        big.resize(20 + 65536, 0);
        assert_eq!(
            emit_udp_header(&mut big, 20, 1, 2, true),
            Err(Error::Malformed)
        );
    }
}
