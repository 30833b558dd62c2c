//! UDP headers (RFC 768).

use std::net::IpAddr;

use crate::error::{Error, Result};
use crate::field::{get_u16, pseudo, set_u16};
use crate::{checksum, ip_proto};

pub const HEADER_LEN: usize = 8;

/// A view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer`, checking `8 <= length <= buffer.len()`.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// The checks done by `new_checked`.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let l = self.len() as usize;
        if l < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if l > len {
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

    /// The length field (header plus payload).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 4)
    }

    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 6)
    }

    /// True if the checksum is correct, or zero (absent) over IPv4.
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        if self.checksum() == 0 && src.is_ipv4() {
            return true;
        }
        let l = self.len();
        let d = &self.buffer.as_ref()[..l as usize];
        checksum::finish(checksum::sum(pseudo(src, dst, ip_proto::UDP, l as u32), d)) == 0
    }

    /// The bytes after the header, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 0, v);
    }

    pub fn set_dst_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 2, v);
    }

    pub fn set_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 4, v);
    }

    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 6, v);
    }

    /// Computes and stores the checksum over header and payload (0 is sent as 0xffff).
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let l = self.len();
        let d = &self.buffer.as_ref()[..l as usize];
        let c = checksum::finish(checksum::sum(pseudo(src, dst, ip_proto::UDP, l as u32), d));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let l = self.len() as usize;
        &mut self.buffer.as_mut()[HEADER_LEN..l]
    }
}

/// Parsed UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    pub payload_len: usize,
}

impl Repr {
    /// Parses the header. Does not verify the checksum.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: p.len() as usize - HEADER_LEN,
        })
    }

    pub fn header_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header with a zero checksum; write the payload, then call `fill_checksum`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, p: &mut Packet<&mut T>) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len((HEADER_LEN + self.payload_len) as u16);
        p.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    // DNS query for example.com from 192.168.1.100:53000 to 8.8.8.8:53.
    const SRC: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 100);
    const DST: Ipv4Addr = Ipv4Addr::new(8, 8, 8, 8);

    fn dgram() -> Vec<u8> {
        let payload = [
            0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, b'e',
            b'x', b'a', b'm', b'p', b'l', b'e', 0x03, b'c', b'o', b'm', 0x00, 0x00, 0x01, 0x00,
            0x01,
        ];
        let r = Repr {
            src_port: 53000,
            dst_port: 53,
            payload_len: payload.len(),
        };
        let mut v = vec![0u8; r.buffer_len()];
        let mut p = Packet::new_unchecked(&mut v[..]);
        r.emit(&mut p);
        p.payload_mut().copy_from_slice(&payload);
        p.fill_checksum(SRC.into(), DST.into());
        v
    }

    #[test]
    fn round_trip_and_checksum() {
        let v = dgram();
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.src_port(), 53000);
        assert_eq!(p.dst_port(), 53);
        assert_eq!(p.len(), 37);
        assert_eq!(p.payload().len(), 29);
        assert!(p.verify_checksum(SRC.into(), DST.into()));
        assert!(!p.verify_checksum(DST.into(), DST.into()));
        let r = Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Repr {
                src_port: 53000,
                dst_port: 53,
                payload_len: 29
            }
        );
    }

    #[test]
    fn known_checksum() {
        // Independently computed: 10.0.0.1:1234 -> 10.0.0.2:5678, payload "hi".
        let mut v = [0x04, 0xd2, 0x16, 0x2e, 0x00, 0x0a, 0x00, 0x00, b'h', b'i'];
        let (s, d) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut p = Packet::new_checked(&mut v[..]).unwrap();
        p.fill_checksum(s.into(), d.into());
        // sum = 0a00+0001+0a00+0002+0011+000a + 04d2+162e+000a+6869 = 0x9791; !0x9791 = 0x686e
        assert_eq!(p.checksum(), 0x686e);
    }

    #[test]
    fn zero_checksum_ipv4_only() {
        let mut v = dgram();
        v[6] = 0;
        v[7] = 0;
        let p = Packet::new_checked(&v[..]).unwrap();
        assert!(p.verify_checksum(SRC.into(), DST.into()));
        let s6: IpAddr = "::1".parse().unwrap();
        assert!(!p.verify_checksum(s6, s6));
    }

    #[test]
    fn lengths() {
        let mut v = dgram();
        v[5] = 7;
        assert_eq!(Packet::new_checked(&v[..]).err(), Some(Error::Malformed));
        v[5] = 38;
        assert_eq!(Packet::new_checked(&v[..]).err(), Some(Error::Truncated));
        let v = dgram();
        for n in 0..v.len() {
            assert!(Packet::new_checked(&v[..n]).is_err());
        }
    }
}
