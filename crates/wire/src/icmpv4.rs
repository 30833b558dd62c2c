//! ICMP for IPv4 (RFC 792): [`crate::icmp`]'s generic message with [`V4`] (checksum over the message alone).

use crate::checksum;
use crate::icmp_msg::{self, Family, V4};

pub use crate::icmp_msg::HEADER_LEN;

/// A view of an ICMPv4 message. The message is the whole buffer.
pub type Packet<T> = icmp_msg::Packet<T, V4>;

/// Parsed ICMPv4 message, borrowing its payload.
pub type Repr<'a> = icmp_msg::Repr<'a, V4>;

/// ICMPv4 message types.
pub mod msg_type {
    pub const ECHO_REPLY: u8 = 0;
    pub const DST_UNREACHABLE: u8 = 3;
    pub const ECHO_REQUEST: u8 = 8;
    pub const TIME_EXCEEDED: u8 = 11;
}

impl Family for V4 {
    const ECHO_REQUEST: u8 = msg_type::ECHO_REQUEST;
    const ECHO_REPLY: u8 = msg_type::ECHO_REPLY;
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// True if the checksum over the whole buffer is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(self.bytes()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Computes and stores the checksum over the whole buffer.
    pub fn fill_checksum(&mut self) {
        self.fill_checksum_with(checksum::checksum);
    }
}

impl<'a> Repr<'a> {
    /// Writes the message and its checksum; the buffer must be exactly `buffer_len()` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, p: &mut Packet<&mut T>) {
        self.emit_fields(p);
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
