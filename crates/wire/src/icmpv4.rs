//! ICMP for IPv4 (RFC 792).

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

/// ICMPv4 message types.
pub mod msg_type {
    pub const ECHO_REPLY: u8 = 0;
    pub const DST_UNREACHABLE: u8 = 3;
    pub const ECHO_REQUEST: u8 = 8;
    pub const TIME_EXCEEDED: u8 = 11;
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// True if the checksum over the whole buffer is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(self.buffer.as_ref()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Computes and stores the checksum over the whole buffer.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
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
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, p: &mut Packet<&mut T>) {
        p.set_msg_type(self.msg_type);
        p.set_msg_code(self.msg_code);
        p.set_rest_of_header(self.rest_of_header);
        p.payload_mut()[..self.payload.len()].copy_from_slice(self.payload);
        p.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Linux ping echo request id 0x0a0b seq 1 with a 16-byte payload (checksum zeroed).
    const ECHO: [u8; 24] = [
        0x08, 0x00, 0x00, 0x00, 0x0a, 0x0b, 0x00, 0x01, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16,
        0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
    ];

    #[test]
    fn echo() {
        let mut v = ECHO;
        let mut p = Packet::new_checked(&mut v[..]).unwrap();
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!(p.msg_type(), msg_type::ECHO_REQUEST);
        assert_eq!(p.msg_code(), 0);
        assert!(p.is_echo());
        assert_eq!(p.echo_ident(), 0x0a0b);
        assert_eq!(p.echo_seq_no(), 1);
        assert_eq!(p.payload().len(), 16);
        // Words: 0800 0000 0a0b 0001 1011 .. 1e1f; computed by hand.
        let expect = !{
            let mut s: u32 = 0x0800 + 0x0a0b + 0x0001;
            for i in 0..8u32 {
                s += ((0x10 + 2 * i) << 8) | (0x11 + 2 * i);
            }
            while s >> 16 != 0 {
                s = (s & 0xffff) + (s >> 16);
            }
            s as u16
        };
        assert_eq!(p.checksum(), expect);
    }

    #[test]
    fn round_trip() {
        let mut v = ECHO;
        Packet::new_unchecked(&mut v[..]).fill_checksum();
        let p = Packet::new_checked(&v[..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, v);
    }

    #[test]
    fn truncation() {
        for n in 0..ECHO.len() {
            let r = Packet::new_checked(&ECHO[..n]);
            assert_eq!(r.is_ok(), n >= HEADER_LEN);
        }
    }
}
