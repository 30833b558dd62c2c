//! ICMP for IPv6 (RFC 4443): [`crate::icmp`]'s generic message with [`V6`] (checksum over an IPv6 pseudo-header
//! and the message).

use std::net::Ipv6Addr;

use crate::checksum;
use crate::icmp_msg::{self, Family, V6};

pub use crate::icmp_msg::HEADER_LEN;

/// A view of an ICMPv6 message. The message is the whole buffer.
pub type Packet<T> = icmp_msg::Packet<T, V6>;

/// Parsed ICMPv6 message, borrowing its payload.
pub type Repr<'a> = icmp_msg::Repr<'a, V6>;

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

impl Family for V6 {
    const ECHO_REQUEST: u8 = msg_type::ECHO_REQUEST;
    const ECHO_REPLY: u8 = msg_type::ECHO_REPLY;
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
        crate::field::get_u32(self.bytes(), 4)
    }

    /// True if the checksum (with the IPv6 pseudo-header) over the whole buffer is correct.
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        sum(src, dst, self.bytes()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Computes and stores the checksum (with the IPv6 pseudo-header) over the whole buffer.
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.fill_checksum_with(|d| sum(src, dst, d));
    }
}

impl<'a> Repr<'a> {
    /// Writes the message and its checksum; the buffer must be exactly `buffer_len()` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        p: &mut Packet<&mut T>,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
    ) {
        self.emit_fields(p);
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
