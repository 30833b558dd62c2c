//! ICMP for IPv6 (RFC 4443).

use std::net::Ipv6Addr;

use crate::field::{get_u16, set_u16};
use crate::{checksum, Error, Result};

/// Length of the fixed header (type, code, checksum, 4 bytes of message-specific data).
pub const HEADER_LEN: usize = 8;

/// A view of an ICMP message. The message is the whole buffer.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer`, checking it holds the 8-byte header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 2)
    }

    /// Bytes 4..8 (message-specific: echo id and sequence, MTU, pointer, unused).
    pub fn rest_of_header(&self) -> [u8; 4] {
        let d = self.buffer.as_ref();
        [d[4], d[5], d[6], d[7]]
    }

    /// Echo identifier (meaningful for echo request/reply).
    pub fn echo_ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 4)
    }

    /// Echo sequence number (meaningful for echo request/reply).
    pub fn echo_seq_no(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 6)
    }

    pub fn is_echo(&self) -> bool {
        matches!(
            self.msg_type(),
            msg_type::ECHO_REQUEST | msg_type::ECHO_REPLY
        )
    }

    /// The bytes after the 8-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }

    pub fn set_msg_code(&mut self, v: u8) {
        self.buffer.as_mut()[1] = v;
    }

    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 2, v);
    }

    pub fn set_rest_of_header(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[4..8].copy_from_slice(&v);
    }

    pub fn set_echo_ident(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 4, v);
    }

    pub fn set_echo_seq_no(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 6, v);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// Parsed ICMP message, borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    pub msg_type: u8,
    pub msg_code: u8,
    /// Bytes 4..8 of the header.
    pub rest_of_header: [u8; 4],
    pub payload: &'a [u8],
}

impl<'a> Repr<'a> {
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }
}

/// ICMPv6 message types.
pub mod msg_type {
    pub const DST_UNREACHABLE: u8 = 1;
    pub const PACKET_TOO_BIG: u8 = 2;
    pub const TIME_EXCEEDED: u8 = 3;
    pub const PARAM_PROBLEM: u8 = 4;
    pub const ECHO_REQUEST: u8 = 128;
    pub const ECHO_REPLY: u8 = 129;
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    pub const NEIGHBOR_ADVERT: u8 = 136;
}

fn sum(src: &Ipv6Addr, dst: &Ipv6Addr, d: &[u8]) -> u16 {
    let acc = checksum::pseudo_header(
        &src.octets(),
        &dst.octets(),
        crate::ip_proto::ICMPV6,
        d.len() as u32,
    );
    checksum::finish(checksum::sum(acc, d))
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// MTU of a Packet Too Big message.
    pub fn mtu(&self) -> u32 {
        crate::field::get_u32(self.buffer.as_ref(), 4)
    }

    /// True if the checksum (with the IPv6 pseudo-header) over the whole buffer is correct.
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        sum(src, dst, self.buffer.as_ref()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Computes and stores the checksum (with the IPv6 pseudo-header) over the whole buffer.
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let c = sum(src, dst, self.buffer.as_ref());
        self.set_checksum(c);
    }
}

impl<'a> Repr<'a> {
    /// Parses the message. Does not verify the checksum.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&'a T>) -> Result<Repr<'a>> {
        p.check_len()?;
        let d: &'a [u8] = p.buffer.as_ref();
        Ok(Repr {
            msg_type: d[0],
            msg_code: d[1],
            rest_of_header: p.rest_of_header(),
            payload: &d[HEADER_LEN..],
        })
    }

    /// Writes the message and its checksum; the buffer must be exactly `buffer_len()` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        p: &mut Packet<&mut T>,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
    ) {
        p.set_msg_type(self.msg_type);
        p.set_msg_code(self.msg_code);
        p.set_rest_of_header(self.rest_of_header);
        p.payload_mut()[..self.payload.len()].copy_from_slice(self.payload);
        p.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv6;

    #[test]
    fn echo_with_ext_headers() {
        let v = ipv6::tests::echo_ext();
        let ip = ipv6::Packet::new_checked(&v[..]).unwrap();
        let w = ip.ext_headers().unwrap();
        let p = Packet::new_checked(&v[w.upper_offset..]).unwrap();
        assert_eq!(p.msg_type(), msg_type::ECHO_REQUEST);
        assert!(p.is_echo());
        assert_eq!(p.echo_ident(), 0x1234);
        assert_eq!(p.echo_seq_no(), 1);
        assert_eq!(p.payload(), b"netveil!");
        assert!(p.verify_checksum(&ip.src_addr(), &ip.dst_addr()));
        assert!(!p.verify_checksum(&ip.src_addr(), &Ipv6Addr::LOCALHOST));
    }

    #[test]
    fn known_checksum() {
        // Echo request ::1 -> ::1, id 0, seq 0, no payload.
        // Pseudo: 0001 + 0001 + 003a + 0008; message: 8000. Sum 0x8044, checksum 0x7fbb.
        let mut b = [0x80, 0, 0, 0, 0, 0, 0, 0];
        let lo = Ipv6Addr::LOCALHOST;
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum(&lo, &lo);
        assert_eq!(p.checksum(), 0x7fbb);
        assert!(p.verify_checksum(&lo, &lo));
    }

    #[test]
    fn round_trip() {
        let v = ipv6::tests::echo_ext();
        let ip = ipv6::Packet::new_checked(&v[..]).unwrap();
        let p = Packet::new_checked(&v[64..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(
            &mut Packet::new_unchecked(&mut out[..]),
            &ip.src_addr(),
            &ip.dst_addr(),
        );
        assert_eq!(&out[..], &v[64..]);
        let ptb = Packet::new_unchecked(&[2u8, 0, 0, 0, 0, 0, 0x05, 0xdc][..]);
        assert_eq!(ptb.mtu(), 1500);
    }

    #[test]
    fn truncation() {
        let v = ipv6::tests::echo_ext();
        for n in 0..16 {
            assert_eq!(Packet::new_checked(&v[64..64 + n]).is_ok(), n >= HEADER_LEN);
        }
    }
}
