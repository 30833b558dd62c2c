//! IPv6 fixed header (RFC 8200), extension header walking and Hop-by-Hop/Destination options.

use std::net::Ipv6Addr;

use crate::error::{Error, Result};
use crate::field::{get_u16, get_u32, set_u16, set_u32};
use crate::ip_proto;

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;

/// Offset of the "next header" byte in the fixed header.
pub const NEXT_HEADER_OFFSET: usize = 6;

/// A view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer`, checking `40 + payload_len <= buffer.len()`.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// The checks done by `new_checked`.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || HEADER_LEN + self.payload_len() as usize > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    pub fn traffic_class(&self) -> u8 {
        (get_u16(self.buffer.as_ref(), 0) >> 4) as u8
    }

    /// The 20-bit flow label.
    pub fn flow_label(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 0) & 0x000f_ffff
    }

    pub fn payload_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 4)
    }

    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[NEXT_HEADER_OFFSET]
    }

    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[7]
    }

    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[8..24]);
        Ipv6Addr::from(a)
    }

    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[24..40]);
        Ipv6Addr::from(a)
    }

    /// Total length: fixed header plus payload length.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.payload_len() as usize
    }

    /// Walks the extension headers (see [`walk`]).
    pub fn ext_headers(&self) -> Result<ExtHeaders> {
        walk(self.buffer.as_ref())
    }

    /// The bytes after the fixed header, up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[0];
        *b = (*b & 0x0f) | (v << 4);
    }

    pub fn set_traffic_class(&mut self, v: u8) {
        let d = self.buffer.as_mut();
        let old = get_u16(d, 0);
        set_u16(d, 0, (old & 0xf00f) | ((v as u16) << 4));
    }

    pub fn set_flow_label(&mut self, v: u32) {
        let d = self.buffer.as_mut();
        let old = get_u32(d, 0);
        set_u32(d, 0, (old & 0xfff0_0000) | (v & 0x000f_ffff));
    }

    pub fn set_payload_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 4, v);
    }

    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[NEXT_HEADER_OFFSET] = v;
    }

    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[7] = v;
    }

    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[8..24].copy_from_slice(&a.octets());
    }

    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[24..40].copy_from_slice(&a.octets());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// Parsed IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next_header: u8,
    pub payload_len: usize,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

impl Repr {
    /// Parses the fixed header; fails with `Malformed` if the version is not 6.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&T>) -> Result<Repr> {
        p.check_len()?;
        if p.version() != 6 {
            return Err(Error::Malformed);
        }
        Ok(Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: p.payload_len() as usize,
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        })
    }

    pub fn header_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the fixed header; the buffer must hold at least 40 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, p: &mut Packet<&mut T>) {
        p.buffer.as_mut()[..4].copy_from_slice(&[0x60, 0, 0, 0]);
        p.set_traffic_class(self.traffic_class);
        p.set_flow_label(self.flow_label);
        p.set_payload_len(self.payload_len as u16);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src);
        p.set_dst_addr(self.dst);
    }
}

/// True for the protocol numbers [`walk`] steps over: Hop-by-Hop, Routing, Fragment, Destination Options and AH.
pub fn is_ext_header(proto: u8) -> bool {
    matches!(
        proto,
        ip_proto::HOPOPT
            | ip_proto::IPV6_ROUTE
            | ip_proto::IPV6_FRAG
            | ip_proto::IPV6_OPTS
            | ip_proto::AH
    )
}

/// Length of the fragment header.
pub const FRAG_HEADER_LEN: usize = 8;

/// Contents of a fragment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragInfo {
    /// Offset of the fragment header in the packet.
    pub header_offset: usize,
    /// Fragment offset in 8-byte units.
    pub frag_offset: u16,
    pub more_frags: bool,
    pub ident: u32,
}

/// One extension header found by [`ExtHeaderIter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeader {
    /// Protocol number of this header (0, 43, 44, 60 or 51).
    pub kind: u8,
    /// Offset of this header in the packet.
    pub offset: usize,
    /// Length of this header in bytes.
    pub len: usize,
    /// The header's "next header" field.
    pub next_header: u8,
}

/// Iterator over the extension headers of an IPv6 packet, without allocating.
///
/// Stops after a non-first fragment's fragment header (what follows is not a header), and with
/// [`ExtHeaderIter::stop_at_ah`] at an AH header. Yields `Err` once and stops if a header runs past the payload.
#[derive(Debug, Clone)]
pub struct ExtHeaderIter<'a> {
    data: &'a [u8],
    /// Protocol of the header at `offset`.
    next: u8,
    offset: usize,
    nh_offset: usize,
    done: bool,
    step_ah: bool,
}

impl<'a> ExtHeaderIter<'a> {
    /// Starts at the fixed header of `packet`; checks the IPv6 lengths. Bytes past the payload length are ignored.
    pub fn new(packet: &'a [u8]) -> Result<Self> {
        let p = Packet::new_checked(packet)?;
        Ok(ExtHeaderIter {
            data: &packet[..p.total_len()],
            next: p.next_header(),
            offset: HEADER_LEN,
            nh_offset: NEXT_HEADER_OFFSET,
            done: false,
            step_ah: true,
        })
    }

    /// Starts at the fixed header of a packet that may be cut short (the packet an ICMPv6 error quotes): only the
    /// fixed header must be there; the headers are read as far as the bytes go, up to the payload length (a header
    /// cut by the end is yielded as `Err(Truncated)`).
    pub fn new_truncated(packet: &'a [u8]) -> Result<Self> {
        if packet.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let p = Packet::new_unchecked(packet);
        Ok(ExtHeaderIter {
            data: &packet[..p.total_len().min(packet.len())],
            next: p.next_header(),
            offset: HEADER_LEN,
            nh_offset: NEXT_HEADER_OFFSET,
            done: false,
            step_ah: true,
        })
    }

    /// Stops at an AH header instead of stepping over it: the headers yielded are then the ones that go before
    /// ESP or AH (Hop-by-Hop, Routing, Fragment, Destination Options), and [`Self::offset`] is where IPsec inserts
    /// or finds its header.
    pub fn stop_at_ah(mut self) -> Self {
        self.step_ah = false;
        self
    }

    /// Protocol number of the header at [`Self::offset`].
    pub fn next_proto(&self) -> u8 {
        self.next
    }

    /// Offset of the first header not yet yielded.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Offset of the "next header" byte that holds [`Self::next_proto`].
    pub fn next_header_offset(&self) -> usize {
        self.nh_offset
    }
}

impl Iterator for ExtHeaderIter<'_> {
    type Item = Result<ExtHeader>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || !is_ext_header(self.next) || (!self.step_ah && self.next == ip_proto::AH) {
            return None;
        }
        let d = self.data;
        let at = self.offset;
        let kind = self.next;
        if at + 2 > d.len() {
            self.done = true;
            return Some(Err(Error::Truncated));
        }
        let len = match kind {
            ip_proto::IPV6_FRAG => FRAG_HEADER_LEN,
            ip_proto::AH => (d[at + 1] as usize + 2) * 4,
            _ => (d[at + 1] as usize + 1) * 8,
        };
        if at + len > d.len() {
            self.done = true;
            return Some(Err(Error::Truncated));
        }
        let next_header = d[at];
        if kind == ip_proto::IPV6_FRAG && get_u16(d, at + 2) & 0xfff8 != 0 {
            // Non-first fragment: the rest is not parseable.
            self.done = true;
        }
        self.next = next_header;
        self.nh_offset = at;
        self.offset = at + len;
        Some(Ok(ExtHeader {
            kind,
            offset: at,
            len,
            next_header,
        }))
    }
}

/// Result of [`walk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeaders {
    /// Protocol number of the first non-extension header.
    pub upper_proto: u8,
    /// Offset of the first non-extension header (may equal the packet length).
    pub upper_offset: usize,
    /// Offset of the "next header" byte holding `upper_proto` (6 if there are no extension headers).
    pub next_header_offset: usize,
    /// The first fragment header, if any.
    pub frag: Option<FragInfo>,
    /// Number of extension headers stepped over.
    pub count: usize,
}

impl ExtHeaders {
    /// True if this is a fragment other than the first (upper-layer headers are absent).
    pub fn is_later_fragment(&self) -> bool {
        matches!(self.frag, Some(f) if f.frag_offset != 0)
    }
}

/// Steps over Hop-by-Hop, Routing, Fragment, Destination Options and AH headers of an IPv6 packet.
///
/// Stops at the first other header, or after the fragment header of a non-first fragment.
pub fn walk(packet: &[u8]) -> Result<ExtHeaders> {
    walk_from(ExtHeaderIter::new(packet)?, packet)
}

/// [`walk`] of a packet that may be cut short (see [`ExtHeaderIter::new_truncated`]): the packet an ICMPv6 error
/// quotes. Fails if a header is cut by the end of the bytes.
pub fn walk_truncated(packet: &[u8]) -> Result<ExtHeaders> {
    walk_from(ExtHeaderIter::new_truncated(packet)?, packet)
}

fn walk_from(mut it: ExtHeaderIter<'_>, packet: &[u8]) -> Result<ExtHeaders> {
    let mut frag = None;
    let mut count = 0;
    for h in it.by_ref() {
        let h = h?;
        count += 1;
        if h.kind == ip_proto::IPV6_FRAG && frag.is_none() {
            let w = get_u16(packet, h.offset + 2);
            frag = Some(FragInfo {
                header_offset: h.offset,
                frag_offset: w >> 3,
                more_frags: w & 1 != 0,
                ident: get_u32(packet, h.offset + 4),
            });
        }
    }
    Ok(ExtHeaders {
        upper_proto: it.next_proto(),
        upper_offset: it.offset(),
        next_header_offset: it.next_header_offset(),
        frag,
        count,
    })
}

/// Option types in Hop-by-Hop and Destination Options headers.
pub mod option {
    pub const PAD1: u8 = 0;
    pub const PADN: u8 = 1;
    pub const ROUTER_ALERT: u8 = 5;
    pub const JUMBO: u8 = 0xc2;
}

/// One Hop-by-Hop or Destination option. `offset` is relative to the start of the extension header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Option<'a> {
    pub kind: u8,
    /// Option data (empty for Pad1).
    pub data: &'a [u8],
    /// Offset of the type byte.
    pub offset: usize,
}

impl Ipv6Option<'_> {
    /// The "may change en route" bit (0x20); AH treats such data as zero.
    pub fn may_change(&self) -> bool {
        self.kind & 0x20 != 0
    }

    /// The two high bits: the action for an unrecognized option.
    pub fn unknown_action(&self) -> u8 {
        self.kind >> 6
    }

    /// Offset of the option data (relative to the extension header).
    pub fn data_offset(&self) -> usize {
        if self.kind == option::PAD1 {
            self.offset + 1
        } else {
            self.offset + 2
        }
    }
}

/// Iterator over the options of a Hop-by-Hop or Destination Options header. Yields `Err` once and stops on a bad
/// length.
#[derive(Debug, Clone)]
pub struct OptionsIter<'a> {
    header: &'a [u8],
    pos: usize,
}

/// Options of the Hop-by-Hop or Destination Options header at the start of `ext_header`.
///
/// Checks that `ext_header` holds the whole header; bytes after it are ignored.
pub fn options(ext_header: &[u8]) -> Result<OptionsIter<'_>> {
    if ext_header.len() < 2 {
        return Err(Error::Truncated);
    }
    let len = (ext_header[1] as usize + 1) * 8;
    if len > ext_header.len() {
        return Err(Error::Truncated);
    }
    Ok(OptionsIter {
        header: &ext_header[..len],
        pos: 2,
    })
}

impl<'a> Iterator for OptionsIter<'a> {
    type Item = Result<Ipv6Option<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let d = self.header;
        let at = self.pos;
        let kind = *d.get(at)?;
        if kind == option::PAD1 {
            self.pos = at + 1;
            return Some(Ok(Ipv6Option {
                kind,
                data: &[],
                offset: at,
            }));
        }
        self.pos = d.len();
        let Some(&len) = d.get(at + 1) else {
            return Some(Err(Error::Truncated));
        };
        let end = at + 2 + len as usize;
        if end > d.len() {
            return Some(Err(Error::Truncated));
        }
        self.pos = end;
        Some(Ok(Ipv6Option {
            kind,
            data: &d[at + 2..end],
            offset: at,
        }))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::checksum;

    /// IPv6 ICMPv6 echo request fe80::1 -> ff02::1 with a Hop-by-Hop header (router alert, PadN) and a Destination
    /// Options header (an option with the "may change" bit set, PadN). ICMPv6 checksum is valid.
    pub(crate) const ECHO_EXT: [u8; 40 + 8 + 16 + 16] = [
        // fixed header: payload len 40, next header HbH (0), hop limit 1
        0x60, 0x00, 0x00, 0x00, 0x00, 0x28, 0x00, 0x01, //
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, //
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, //
        // HbH: next 60, len 0; router alert (5, 2, 0, 0); PadN (1, 0)
        0x3c, 0x00, 0x05, 0x02, 0x00, 0x00, 0x01, 0x00, //
        // DestOpts: next 58, len 1; option 0x3e len 4 (may change); PadN len 6
        0x3a, 0x01, 0x3e, 0x04, 0xde, 0xad, 0xbe, 0xef, 0x01, 0x06, 0, 0, 0, 0, 0, 0, //
        // ICMPv6 echo request id 0x1234 seq 1, checksum filled below, payload "netveil!"
        0x80, 0x00, 0x00, 0x00, 0x12, 0x34, 0x00, 0x01, b'n', b'e', b't', b'v', b'e', b'i', b'l',
        b'!',
    ];

    pub(crate) fn echo_ext() -> Vec<u8> {
        let mut v = ECHO_EXT.to_vec();
        let acc = checksum::pseudo_header(&v[8..24], &v[24..40], ip_proto::ICMPV6, 16);
        let c = checksum::finish(checksum::sum(acc, &v[64..80]));
        v[66..68].copy_from_slice(&c.to_be_bytes());
        v
    }

    #[test]
    fn parse_fixed() {
        let v = echo_ext();
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.payload_len(), 40);
        assert_eq!(p.next_header(), ip_proto::HOPOPT);
        assert_eq!(p.hop_limit(), 1);
        assert_eq!(p.src_addr(), "fe80::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "ff02::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload().len(), 40);
        let r = Repr::parse(&p).unwrap();
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[..40], v[..40]);
    }

    #[test]
    fn tc_flow_label() {
        let mut b = [0u8; 40];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version(6);
        p.set_traffic_class(0xab);
        p.set_flow_label(0xcdef1);
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xab);
        assert_eq!(p.flow_label(), 0xcdef1);
        assert_eq!(&b[..4], &[0x6a, 0xbc, 0xde, 0xf1]);
    }

    #[test]
    fn walk_ext() {
        let v = echo_ext();
        let w = walk(&v).unwrap();
        assert_eq!(w.upper_proto, ip_proto::ICMPV6);
        assert_eq!(w.upper_offset, 64);
        assert_eq!(w.next_header_offset, 48);
        assert_eq!(w.count, 2);
        assert_eq!(w.frag, None);
        let hs: Vec<_> = ExtHeaderIter::new(&v)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(
            hs[0],
            ExtHeader {
                kind: 0,
                offset: 40,
                len: 8,
                next_header: 60
            }
        );
        assert_eq!(
            hs[1],
            ExtHeader {
                kind: 60,
                offset: 48,
                len: 16,
                next_header: 58
            }
        );
    }

    #[test]
    fn hbh_and_dest_options() {
        let v = echo_ext();
        let hbh: Vec<_> = options(&v[40..]).unwrap().collect::<Result<_>>().unwrap();
        assert_eq!(hbh.len(), 2);
        assert_eq!(hbh[0].kind, option::ROUTER_ALERT);
        assert_eq!(hbh[0].data, &[0, 0]);
        assert!(!hbh[0].may_change());
        assert_eq!(hbh[1].kind, option::PADN);
        let dst: Vec<_> = options(&v[48..]).unwrap().collect::<Result<_>>().unwrap();
        assert_eq!(dst.len(), 2);
        assert_eq!(dst[0].kind, 0x3e);
        assert!(dst[0].may_change());
        assert_eq!(dst[0].offset, 2);
        assert_eq!(dst[0].data_offset(), 4);
        assert_eq!(dst[0].data, &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(dst[1].data.len(), 6);
        assert_eq!(options(&v[48..60]).err(), Some(Error::Truncated));
        let bad = [0u8, 0, 7, 9, 0, 0, 0, 0];
        let mut it = options(&bad).unwrap();
        assert_eq!(it.next(), Some(Err(Error::Truncated)));
        assert_eq!(it.next(), None);
        let pads = [0u8, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(options(&pads).unwrap().count(), 6);
    }

    fn with_headers(next: u8, ext: &[u8], upper: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; 40];
        v[0] = 0x60;
        let pl = (ext.len() + upper.len()) as u16;
        v[4..6].copy_from_slice(&pl.to_be_bytes());
        v[6] = next;
        v.extend_from_slice(ext);
        v.extend_from_slice(upper);
        v
    }

    #[test]
    fn walk_fragment_and_ah() {
        // Fragment (first, MF) -> AH (len 4: 24 bytes) -> UDP
        let mut ext = vec![51, 0, 0x00, 0x01, 0xaa, 0xbb, 0xcc, 0xdd];
        ext.extend_from_slice(&[17, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
        ext.extend_from_slice(&[0; 12]);
        let v = with_headers(44, &ext, &[0x12, 0x34, 0x00, 0x35, 0, 8, 0, 0]);
        let w = walk(&v).unwrap();
        assert_eq!(w.upper_proto, ip_proto::UDP);
        assert_eq!(w.upper_offset, 40 + 8 + 24);
        assert_eq!(w.next_header_offset, 48);
        let f = w.frag.unwrap();
        assert_eq!(
            (f.header_offset, f.frag_offset, f.more_frags, f.ident),
            (40, 0, true, 0xaabbccdd)
        );
        assert!(!w.is_later_fragment());
        // Stopping at AH: the fragment header only; AH is where IPsec finds its header.
        let mut it = ExtHeaderIter::new(&v).unwrap().stop_at_ah();
        assert_eq!(it.next().unwrap().unwrap().kind, ip_proto::IPV6_FRAG);
        assert_eq!(it.next(), None);
        assert_eq!(
            (it.next_proto(), it.offset(), it.next_header_offset()),
            (ip_proto::AH, 48, 40)
        );

        // Non-first fragment: stops after the fragment header.
        let ext = [43, 0, 0x00, 0x10, 0, 0, 0, 1, 0xff, 0xff];
        let v = with_headers(44, &ext, &[]);
        let w = walk(&v).unwrap();
        assert_eq!(w.upper_proto, ip_proto::IPV6_ROUTE);
        assert_eq!(w.upper_offset, 48);
        assert!(w.is_later_fragment());
        assert_eq!(w.frag.unwrap().frag_offset, 2);

        // No extension headers; ESP stops the walk.
        let v = with_headers(50, &[], &[0; 8]);
        let w = walk(&v).unwrap();
        assert_eq!(
            (w.upper_proto, w.upper_offset, w.next_header_offset, w.count),
            (50, 40, 6, 0)
        );

        // Routing header running past the payload.
        let v = with_headers(43, &[6, 1, 0, 0, 0, 0, 0, 0], &[]);
        assert_eq!(walk(&v).err(), Some(Error::Truncated));
    }

    #[test]
    fn truncation() {
        let v = echo_ext();
        for n in 0..v.len() {
            assert!(Packet::new_checked(&v[..n]).is_err());
            assert!(walk(&v[..n]).is_err());
        }
        // Shrinking the payload length instead cuts headers short.
        for pl in 0..40u16 {
            let mut b = v.clone();
            b[4..6].copy_from_slice(&pl.to_be_bytes());
            let r = walk(&b);
            if pl < 24 {
                assert!(r.is_err());
            } else {
                assert_eq!(r.unwrap().upper_offset, 64);
            }
        }
    }
}
