//! TCP headers (RFC 9293).

use std::net::IpAddr;

use crate::error::{Error, Result};
use crate::field::{get_u16, get_u32, pseudo, set_u16, set_u32};
use crate::{checksum, ip_proto};

pub const MIN_HEADER_LEN: usize = 20;

/// Flag bits as returned by [`Packet::flags`].
pub mod flags {
    pub const FIN: u16 = 0x001;
    pub const SYN: u16 = 0x002;
    pub const RST: u16 = 0x004;
    pub const PSH: u16 = 0x008;
    pub const ACK: u16 = 0x010;
    pub const URG: u16 = 0x020;
    pub const ECE: u16 = 0x040;
    pub const CWR: u16 = 0x080;
    pub const NS: u16 = 0x100;
}

/// A view of a TCP segment. The segment is the whole buffer (TCP has no length field).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer`, checking `20 <= data offset * 4 <= buffer.len()`.
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
        if hl > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn src_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 0)
    }

    pub fn dst_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 2)
    }

    pub fn seq_number(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 4)
    }

    pub fn ack_number(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 8)
    }

    /// Header length in bytes (data offset * 4).
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[12] >> 4) as usize) * 4
    }

    /// The three reserved bits between the data offset and the flags (RFC 3540 took the fourth for NS).
    pub fn reserved(&self) -> u8 {
        (self.buffer.as_ref()[12] >> 1) & 0x07
    }

    /// The nine flag bits (NS..FIN); see [`flags`].
    pub fn flags(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 12) & 0x01ff
    }

    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }

    pub fn ack(&self) -> bool {
        self.flags() & flags::ACK != 0
    }

    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }

    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }

    pub fn window_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 14)
    }

    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 16)
    }

    pub fn urgent_at(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 18)
    }

    /// The options bytes.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }

    /// True if the checksum over the whole buffer is correct.
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        let d = self.buffer.as_ref();
        checksum::finish(checksum::sum(
            pseudo(src, dst, ip_proto::TCP, d.len() as u32),
            d,
        )) == 0
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 0, v);
    }

    pub fn set_dst_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 2, v);
    }

    pub fn set_seq_number(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 4, v);
    }

    pub fn set_ack_number(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 8, v);
    }

    /// Sets the data offset from a length in bytes (multiple of 4, at most 60).
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[12];
        *b = (*b & 0x0f) | (((len / 4) as u8) << 4);
    }

    /// Sets the nine flag bits.
    pub fn set_flags(&mut self, f: u16) {
        let d = self.buffer.as_mut();
        let old = get_u16(d, 12);
        set_u16(d, 12, (old & 0xfe00) | (f & 0x01ff));
    }

    pub fn set_window_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 14, v);
    }

    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 16, v);
    }

    pub fn set_urgent_at(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 18, v);
    }

    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[MIN_HEADER_LEN..hl]
    }

    /// Computes and stores the checksum over the whole buffer.
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let d = self.buffer.as_ref();
        let c = checksum::finish(checksum::sum(
            pseudo(src, dst, ip_proto::TCP, d.len() as u32),
            d,
        ));
        self.set_checksum(c);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[hl..]
    }
}

/// Parsed TCP header (options are not represented).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq_number: u32,
    pub ack_number: u32,
    pub flags: u16,
    pub window_len: u16,
    pub urgent_at: u16,
    pub payload_len: usize,
}

impl Repr {
    /// Parses the header. Does not verify the checksum.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq_number: p.seq_number(),
            ack_number: p.ack_number(),
            flags: p.flags(),
            window_len: p.window_len(),
            urgent_at: p.urgent_at(),
            payload_len: p.payload().len(),
        })
    }

    /// Always 20: options are not emitted.
    pub fn header_len(&self) -> usize {
        MIN_HEADER_LEN
    }

    pub fn buffer_len(&self) -> usize {
        MIN_HEADER_LEN + self.payload_len
    }

    /// Writes a 20-byte header with a zero checksum; write the payload, then call `fill_checksum`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, p: &mut Packet<&mut T>) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq_number(self.seq_number);
        p.set_ack_number(self.ack_number);
        p.buffer.as_mut()[12] = 0;
        p.set_header_len(MIN_HEADER_LEN);
        p.set_flags(self.flags);
        p.set_window_len(self.window_len);
        p.set_checksum(0);
        p.set_urgent_at(self.urgent_at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4;

    fn syn() -> Vec<u8> {
        let mut v = ipv4::tests::SYN.to_vec();
        let ip = ipv4::Packet::new_checked(&v[..]).unwrap();
        let (s, d) = (ip.src_addr().into(), ip.dst_addr().into());
        Packet::new_checked(&mut v[20..])
            .unwrap()
            .fill_checksum(s, d);
        v
    }

    #[test]
    fn parse_syn() {
        let v = syn();
        let p = Packet::new_checked(&v[20..]).unwrap();
        assert_eq!(p.src_port(), 51234);
        assert_eq!(p.dst_port(), 80);
        assert_eq!(p.seq_number(), 0x4a3b2c1d);
        assert_eq!(p.ack_number(), 0);
        assert_eq!(p.header_len(), 40);
        assert_eq!(p.flags(), flags::SYN);
        assert_eq!(p.reserved(), 0);
        assert!(p.syn() && !p.ack() && !p.fin() && !p.rst());
        assert_eq!(p.window_len(), 64240);
        assert_eq!(p.urgent_at(), 0);
        assert_eq!(&p.options()[..4], &[2, 4, 0x05, 0xb4]);
        assert!(p.payload().is_empty());
        let (s, d) = (
            "10.0.0.2".parse().unwrap(),
            "93.184.216.34".parse().unwrap(),
        );
        assert!(p.verify_checksum(s, d));
        assert!(!p.verify_checksum(d, d));
    }

    /// The reserved bits sit between the data offset and NS, and are not flags.
    #[test]
    fn reserved_bits() {
        let mut v = syn();
        v[20 + 12] = 0xa0 | 0b1011;
        let p = Packet::new_checked(&v[20..]).unwrap();
        assert_eq!((p.header_len(), p.reserved()), (40, 0b101));
        assert_eq!(p.flags(), flags::NS | flags::SYN);
    }

    #[test]
    fn round_trip() {
        let r = Repr {
            src_port: 443,
            dst_port: 40000,
            seq_number: 1,
            ack_number: 2,
            flags: flags::ACK | flags::PSH | flags::NS,
            window_len: 512,
            urgent_at: 0,
            payload_len: 3,
        };
        let mut v = vec![0u8; r.buffer_len()];
        let mut p = Packet::new_unchecked(&mut v[..]);
        r.emit(&mut p);
        p.payload_mut().copy_from_slice(b"abc");
        let a: IpAddr = "2001:db8::1".parse().unwrap();
        p.fill_checksum(a, a);
        let p = Packet::new_checked(&v[..]).unwrap();
        assert!(p.verify_checksum(a, a));
        assert_eq!(Repr::parse(&p).unwrap(), r);
    }

    #[test]
    fn lengths() {
        let v = syn();
        let seg = &v[20..];
        for n in 0..seg.len() {
            assert!(Packet::new_checked(&seg[..n]).is_err());
        }
        let mut b = seg.to_vec();
        b[12] = 0x40;
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::Malformed));
        b[12] = 0xf0;
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::Truncated));
    }
}
