//! IPv4 headers (RFC 791), including options.

use std::net::Ipv4Addr;

use crate::checksum;
use crate::error::{Error, Result};
use crate::field::{get_u16, set_u16};

/// Length of the header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// Offset of the protocol byte in the header.
pub const PROTOCOL_OFFSET: usize = 9;

/// The flag bits as [`Packet::flags`] returns them.
pub mod flags {
    /// Don't fragment.
    pub const DF: u8 = 0b010;
    /// More fragments.
    pub const MF: u8 = 0b001;
}

/// Option type numbers.
pub mod option {
    /// End of option list.
    pub const EOL: u8 = 0;
    /// No operation.
    pub const NOP: u8 = 1;
    /// Basic security option (RFC 1108).
    pub const SECURITY: u8 = 130;
    /// Router alert (RFC 2113).
    pub const ROUTER_ALERT: u8 = 148;
}

/// A view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer`, checking `IHL >= 5` and `header_len <= total_len <= buffer.len()`.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// The checks done by `new_checked`.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < MIN_HEADER_LEN {
            return Err(Error::Malformed);
        }
        let tl = self.total_len() as usize;
        if tl < hl {
            return Err(Error::Malformed);
        }
        if tl > len {
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

    /// Header length in bytes (IHL * 4).
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[0] & 0x0f) as usize) * 4
    }

    /// DSCP and ECN as one byte (the former TOS field).
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    pub fn total_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 2)
    }

    pub fn ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 4)
    }

    /// The three flag bits (reserved, DF, MF) in the low bits.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[6] >> 5
    }

    pub fn dont_frag(&self) -> bool {
        self.buffer.as_ref()[6] & 0x40 != 0
    }

    pub fn more_frags(&self) -> bool {
        self.buffer.as_ref()[6] & 0x20 != 0
    }

    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 6) & 0x1fff
    }

    /// True if MF is set or the fragment offset is non-zero.
    pub fn is_fragment(&self) -> bool {
        // MF (0x2000) and the offset (0x1fff) in one test.
        get_u16(self.buffer.as_ref(), 6) & 0x3fff != 0
    }

    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[8]
    }

    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[PROTOCOL_OFFSET]
    }

    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 10)
    }

    pub fn src_addr(&self) -> Ipv4Addr {
        let d = self.buffer.as_ref();
        Ipv4Addr::new(d[12], d[13], d[14], d[15])
    }

    pub fn dst_addr(&self) -> Ipv4Addr {
        let d = self.buffer.as_ref();
        Ipv4Addr::new(d[16], d[17], d[18], d[19])
    }

    /// The options bytes (empty when IHL is 5).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }

    /// Iterates over the options.
    pub fn options_iter(&self) -> OptionsIter<'_> {
        OptionsIter::new(self.options())
    }

    /// True if the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }

    /// The bytes after the header, up to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[0];
        *b = (*b & 0x0f) | (v << 4);
    }

    /// Sets IHL from a length in bytes (must be a multiple of 4, at most 60).
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[0];
        *b = (*b & 0xf0) | ((len / 4) as u8 & 0x0f);
    }

    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[1] = v;
    }

    pub fn set_total_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 2, v);
    }

    pub fn set_ident(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 4, v);
    }

    /// Sets the three flag bits (reserved, DF, MF) from the low bits of `v`, as [`Packet::flags`] returns them.
    pub fn set_flags(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[6];
        *b = (*b & 0x1f) | ((v & 0b111) << 5);
    }

    pub fn set_dont_frag(&mut self, v: bool) {
        let b = &mut self.buffer.as_mut()[6];
        *b = if v { *b | 0x40 } else { *b & !0x40 };
    }

    pub fn set_more_frags(&mut self, v: bool) {
        let b = &mut self.buffer.as_mut()[6];
        *b = if v { *b | 0x20 } else { *b & !0x20 };
    }

    /// Sets the fragment offset in 8-byte units (13 bits).
    pub fn set_frag_offset(&mut self, v: u16) {
        let d = self.buffer.as_mut();
        let old = get_u16(d, 6);
        set_u16(d, 6, (old & 0xe000) | (v & 0x1fff));
    }

    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[8] = v;
    }

    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[PROTOCOL_OFFSET] = v;
    }

    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 10, v);
    }

    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[12..16].copy_from_slice(&a.octets());
    }

    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[16..20].copy_from_slice(&a.octets());
    }

    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[MIN_HEADER_LEN..hl]
    }

    /// Computes and stores the header checksum.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let h = &mut self.buffer.as_mut()[..hl];
        set_u16(h, 10, 0);
        let c = checksum::checksum(h);
        set_u16(h, 10, c);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, tl) = (self.header_len(), self.total_len() as usize);
        &mut self.buffer.as_mut()[hl..tl]
    }
}

/// One IPv4 option. `offset` is relative to the start of the options area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Option<'a> {
    pub kind: u8,
    /// Option data after the type and length bytes (empty for NOP).
    pub data: &'a [u8],
    /// Offset of the type byte within the options area.
    pub offset: usize,
}

impl Ipv4Option<'_> {
    /// The copied flag (bit 0x80): copy into all fragments.
    pub fn copied(&self) -> bool {
        self.kind & 0x80 != 0
    }

    /// Total length of the option including type (and length) bytes.
    pub fn len(&self) -> usize {
        if self.kind == option::NOP || self.kind == option::EOL {
            1
        } else {
            self.data.len() + 2
        }
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

/// Iterator over IPv4 options. Stops at EOL; yields `Err` once and stops on a bad length.
#[derive(Debug, Clone)]
pub struct OptionsIter<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> OptionsIter<'a> {
    /// Iterates over a raw options area.
    pub fn new(data: &'a [u8]) -> Self {
        OptionsIter { data, pos: 0 }
    }
}

impl<'a> Iterator for OptionsIter<'a> {
    type Item = Result<Ipv4Option<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let d = self.data;
        let at = self.pos;
        let kind = *d.get(at)?;
        match kind {
            option::EOL => {
                self.pos = d.len();
                None
            }
            option::NOP => {
                self.pos = at + 1;
                Some(Ok(Ipv4Option {
                    kind,
                    data: &[],
                    offset: at,
                }))
            }
            _ => {
                self.pos = d.len();
                let Some(&len) = d.get(at + 1) else {
                    return Some(Err(Error::Truncated));
                };
                let len = len as usize;
                if len < 2 {
                    return Some(Err(Error::Malformed));
                }
                if at + len > d.len() {
                    return Some(Err(Error::Truncated));
                }
                self.pos = at + len;
                Some(Ok(Ipv4Option {
                    kind,
                    data: &d[at + 2..at + len],
                    offset: at,
                }))
            }
        }
    }
}

/// Parsed IPv4 header. Options and fragmentation fields (other than DF) are not represented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: u8,
    pub payload_len: usize,
    pub ttl: u8,
    pub dscp_ecn: u8,
    pub ident: u16,
    pub dont_frag: bool,
}

impl Repr {
    /// Parses the header; fails with `Malformed` if the version is not 4. Does not verify the checksum.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&T>) -> Result<Repr> {
        p.check_len()?;
        if p.version() != 4 {
            return Err(Error::Malformed);
        }
        Ok(Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            protocol: p.protocol(),
            payload_len: p.total_len() as usize - p.header_len(),
            ttl: p.ttl(),
            dscp_ecn: p.dscp_ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
        })
    }

    /// Length of the header (always 20: no options).
    pub fn header_len(&self) -> usize {
        MIN_HEADER_LEN
    }

    /// Header plus payload length.
    pub fn buffer_len(&self) -> usize {
        MIN_HEADER_LEN + self.payload_len
    }

    /// Writes a 20-byte header with a valid checksum; the buffer must hold at least the header.
    /// `payload_len` must fit the 16-bit total length.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, p: &mut Packet<&mut T>) {
        // One bounds check for the whole header, then plain stores (this runs per packet for tunnel headers).
        let h = &mut p.buffer.as_mut()[..MIN_HEADER_LEN];
        h[0] = 0x40 | (MIN_HEADER_LEN / 4) as u8;
        h[1] = self.dscp_ecn;
        set_u16(h, 2, (MIN_HEADER_LEN + self.payload_len) as u16);
        set_u16(h, 4, self.ident);
        h[6] = if self.dont_frag { 0x40 } else { 0 };
        h[7] = 0;
        h[8] = self.ttl;
        h[PROTOCOL_OFFSET] = self.protocol;
        set_u16(h, 10, 0);
        h[12..16].copy_from_slice(&self.src.octets());
        h[16..20].copy_from_slice(&self.dst.octets());
        let c = checksum::checksum(h);
        set_u16(h, 10, c);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ip_proto;

    // Linux-style IPv4/TCP SYN 10.0.0.2:51234 -> 93.184.216.34:80 (MSS, SACK-permitted, timestamps, NOP, wscale);
    // checksums are zero here and filled in by the tests.
    pub(crate) const SYN: [u8; 60] = [
        0x45, 0x00, 0x00, 0x3c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 0x0a, 0x00, 0x00,
        0x02, 0x5d, 0xb8, 0xd8, 0x22, 0xc8, 0x22, 0x00, 0x50, 0x4a, 0x3b, 0x2c, 0x1d, 0x00, 0x00,
        0x00, 0x00, 0xa0, 0x02, 0xfa, 0xf0, 0x00, 0x00, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04,
        0x02, 0x08, 0x0a, 0x00, 0x9c, 0x3b, 0x4e, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
    ];

    fn syn() -> Vec<u8> {
        let mut v = SYN.to_vec();
        let mut p = Packet::new_unchecked(&mut v[..]);
        p.fill_checksum();
        v
    }

    #[test]
    fn parse_syn() {
        let v = syn();
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 60);
        assert_eq!(p.ident(), 0x1c46);
        assert!(p.dont_frag());
        assert!(!p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), ip_proto::TCP);
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(93, 184, 216, 34));
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 40);
        assert!(p.options().is_empty());
        assert_eq!(p.options_iter().count(), 0);
    }

    #[test]
    fn known_checksum() {
        // checksum.rs example header: 192.168.0.1 -> 192.168.0.199, checksum b861.
        let h = [
            0x45, 0x00, 0x00, 0x14, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let mut b = h;
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        // Total length differs from the 0x73 in checksum.rs: 0xb861 + 0x73 - 0x14 adjusts by 0x5f.
        assert_eq!(p.checksum(), 0xb861 + 0x5f);
        assert!(p.verify_checksum());
        p.set_ttl(63);
        assert!(!p.verify_checksum());
    }

    #[test]
    fn options_with_security() {
        // IHL 8: NOP, security option (130, len 11), EOL.
        let mut b = [0u8; 32];
        b[0] = 0x48;
        b[3] = 32;
        b[20] = option::NOP;
        b[21] = option::SECURITY;
        b[22] = 11;
        b[23..32].copy_from_slice(&[0xab, 0xcd, 1, 2, 3, 4, 5, 6, 7]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.options().len(), 12);
        let opts: Vec<_> = p.options_iter().collect::<Result<_>>().unwrap();
        assert_eq!(opts.len(), 2);
        assert_eq!(opts[0].kind, option::NOP);
        assert_eq!(opts[1].kind, option::SECURITY);
        assert!(opts[1].copied());
        assert_eq!(opts[1].offset, 1);
        assert_eq!(opts[1].len(), 11);
        assert_eq!(opts[1].data, &[0xab, 0xcd, 1, 2, 3, 4, 5, 6, 7]);
        assert!(p.payload().is_empty());
    }

    #[test]
    fn bad_options() {
        let mut it = OptionsIter::new(&[7, 1, 0, 0]);
        assert_eq!(it.next(), Some(Err(Error::Malformed)));
        assert_eq!(it.next(), None);
        let mut it = OptionsIter::new(&[7, 9, 0, 0]);
        assert_eq!(it.next(), Some(Err(Error::Truncated)));
        assert_eq!(it.next(), None);
        let mut it = OptionsIter::new(&[1, 7]);
        assert!(matches!(it.next(), Some(Ok(_))));
        assert_eq!(it.next(), Some(Err(Error::Truncated)));
        assert_eq!(OptionsIter::new(&[0, 7, 7]).count(), 0);
    }

    #[test]
    fn length_checks() {
        let mut v = syn();
        v[0] = 0x44;
        assert_eq!(Packet::new_checked(&v[..]).err(), Some(Error::Malformed));
        let mut v = syn();
        v[3] = 19;
        assert_eq!(Packet::new_checked(&v[..]).err(), Some(Error::Malformed));
        let mut v = syn();
        v[3] = 61;
        assert_eq!(Packet::new_checked(&v[..]).err(), Some(Error::Truncated));
        let mut v = syn();
        v[0] = 0x4f;
        v[3] = 56;
        assert_eq!(Packet::new_checked(&v[..]).err(), Some(Error::Malformed));
        v[3] = 60;
        assert!(Packet::new_checked(&v[..]).is_ok());
        let mut v = syn();
        v[0] = 0x65;
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(Repr::parse(&p), Err(Error::Malformed));
    }

    #[test]
    fn round_trip() {
        let v = syn();
        let r = Repr::parse(&Packet::new_checked(&v[..]).unwrap()).unwrap();
        assert_eq!(r.payload_len, 40);
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        out[20..].copy_from_slice(&v[20..]);
        assert_eq!(out, v);
        let p = Packet::new_checked(&out[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(Repr::parse(&p).unwrap(), r);
    }

    #[test]
    fn emitted_checksums_verify_over_the_field_ranges() {
        // Extreme field values (carries in every word): the emitted bytes sum to zero and read back as written.
        let mut out = [0u8; MIN_HEADER_LEN];
        for (i, (&a, &b)) in [0u32, 1, 0x7fff_ffff, 0xffff_ffff, 0xc0a8_0001, 0xfffe_fffe]
            .iter()
            .zip(
                [
                    0xffff_ffffu32,
                    0,
                    0x8000_0001,
                    0xffff_ffff,
                    0x0a00_0002,
                    0x0001_fffe,
                ]
                .iter(),
            )
            .enumerate()
        {
            for payload_len in [0usize, 1, 1480, 65515] {
                for (ttl, dscp_ecn, ident, dont_frag) in
                    [(0u8, 0u8, 0u16, false), (255, 255, 0xffff, true)]
                {
                    let r = Repr {
                        src: Ipv4Addr::from(a),
                        dst: Ipv4Addr::from(b),
                        protocol: [0u8, 17, 50, 255][i % 4],
                        payload_len,
                        ttl,
                        dscp_ecn,
                        ident,
                        dont_frag,
                    };
                    r.emit(&mut Packet::new_unchecked(&mut out[..]));
                    assert_eq!(checksum::checksum(&out), 0, "{r:?}");
                    let p = Packet::new_unchecked(&out[..]);
                    assert_eq!(
                        (p.total_len() as usize, p.ident(), p.ttl(), p.dont_frag()),
                        (MIN_HEADER_LEN + payload_len, ident, ttl, dont_frag)
                    );
                }
            }
        }
    }

    #[test]
    fn setters() {
        let mut v = syn();
        let mut p = Packet::new_checked(&mut v[..]).unwrap();
        p.set_more_frags(true);
        p.set_frag_offset(0x1abc);
        p.set_dont_frag(false);
        assert!(p.more_frags());
        assert!(!p.dont_frag());
        assert_eq!(p.frag_offset(), 0x1abc);
        assert!(p.is_fragment());
        assert_eq!(p.flags(), flags::MF);
        p.set_flags(flags::DF | 0b100);
        assert_eq!((p.flags(), p.frag_offset()), (0b110, 0x1abc));
        assert!(p.dont_frag() && !p.more_frags());
        p.set_flags(0);
        assert_eq!((p.flags(), p.frag_offset()), (0, 0x1abc));
        p.payload_mut()[0] = 0xee;
        assert_eq!(p.payload()[0], 0xee);
    }

    #[test]
    fn truncation() {
        let v = syn();
        for n in 0..v.len() {
            assert!(Packet::new_checked(&v[..n]).is_err());
        }
    }
}
