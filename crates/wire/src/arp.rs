//! ARP for IPv4 over Ethernet (RFC 826).

use std::net::Ipv4Addr;

use crate::error::{Error, Result};
use crate::ethernet::{ethertype, Address};
use crate::field::{get_u16, set_u16};

/// Length of an IPv4-over-Ethernet ARP packet.
pub const PACKET_LEN: usize = 28;

/// Hardware type for Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;

/// ARP operation codes.
pub mod op {
    pub const REQUEST: u16 = 1;
    pub const REPLY: u16 = 2;
}

/// A view of an ARP packet. Fixed-offset accessors assume the Ethernet/IPv4 layout.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer`, checking it holds the 28-byte Ethernet/IPv4 form.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < PACKET_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn hardware_type(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 0)
    }

    pub fn protocol_type(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 2)
    }

    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[4]
    }

    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[5]
    }

    pub fn operation(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 6)
    }

    fn mac_at(&self, at: usize) -> Address {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[at..at + 6]);
        Address(a)
    }

    fn ip_at(&self, at: usize) -> Ipv4Addr {
        let d = self.buffer.as_ref();
        Ipv4Addr::new(d[at], d[at + 1], d[at + 2], d[at + 3])
    }

    pub fn sender_hw_addr(&self) -> Address {
        self.mac_at(8)
    }

    pub fn sender_proto_addr(&self) -> Ipv4Addr {
        self.ip_at(14)
    }

    pub fn target_hw_addr(&self) -> Address {
        self.mac_at(18)
    }

    pub fn target_proto_addr(&self) -> Ipv4Addr {
        self.ip_at(24)
    }

    /// Bytes after the 28-byte packet (Ethernet padding).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[PACKET_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_hardware_type(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 0, v);
    }

    pub fn set_protocol_type(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 2, v);
    }

    pub fn set_hardware_len(&mut self, v: u8) {
        self.buffer.as_mut()[4] = v;
    }

    pub fn set_protocol_len(&mut self, v: u8) {
        self.buffer.as_mut()[5] = v;
    }

    pub fn set_operation(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 6, v);
    }

    pub fn set_sender_hw_addr(&mut self, a: Address) {
        self.buffer.as_mut()[8..14].copy_from_slice(&a.0);
    }

    pub fn set_sender_proto_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[14..18].copy_from_slice(&a.octets());
    }

    pub fn set_target_hw_addr(&mut self, a: Address) {
        self.buffer.as_mut()[18..24].copy_from_slice(&a.0);
    }

    pub fn set_target_proto_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[24..28].copy_from_slice(&a.octets());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[PACKET_LEN..]
    }
}

/// Parsed IPv4-over-Ethernet ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub operation: u16,
    pub sender_hw_addr: Address,
    pub sender_proto_addr: Ipv4Addr,
    pub target_hw_addr: Address,
    pub target_proto_addr: Ipv4Addr,
}

impl Repr {
    /// Parses; fails with `Malformed` unless the packet is Ethernet/IPv4 ARP.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&T>) -> Result<Repr> {
        p.check_len()?;
        if p.hardware_type() != HTYPE_ETHERNET
            || p.protocol_type() != ethertype::IPV4
            || p.hardware_len() != 6
            || p.protocol_len() != 4
        {
            return Err(Error::Malformed);
        }
        Ok(Repr {
            operation: p.operation(),
            sender_hw_addr: p.sender_hw_addr(),
            sender_proto_addr: p.sender_proto_addr(),
            target_hw_addr: p.target_hw_addr(),
            target_proto_addr: p.target_proto_addr(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Writes the packet; the buffer must hold at least `buffer_len()` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, p: &mut Packet<&mut T>) {
        p.set_hardware_type(HTYPE_ETHERNET);
        p.set_protocol_type(ethertype::IPV4);
        p.set_hardware_len(6);
        p.set_protocol_len(4);
        p.set_operation(self.operation);
        p.set_sender_hw_addr(self.sender_hw_addr);
        p.set_sender_proto_addr(self.sender_proto_addr);
        p.set_target_hw_addr(self.target_hw_addr);
        p.set_target_proto_addr(self.target_proto_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Who has 192.168.1.1? Tell 192.168.1.100.
    const REQ: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0xc0,
        0xa8, 0x01, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0xa8, 0x01, 0x01,
    ];

    #[test]
    fn parse_request() {
        let r = Repr::parse(&Packet::new_checked(&REQ[..]).unwrap()).unwrap();
        assert_eq!(r.operation, op::REQUEST);
        assert_eq!(r.sender_hw_addr, Address([0x52, 0x54, 0, 0x12, 0x34, 0x56]));
        assert_eq!(r.sender_proto_addr, Ipv4Addr::new(192, 168, 1, 100));
        assert_eq!(r.target_proto_addr, Ipv4Addr::new(192, 168, 1, 1));
        let mut buf = [0u8; 28];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, REQ);
    }

    #[test]
    fn malformed() {
        let mut b = REQ;
        b[5] = 16;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::Malformed)
        );
    }

    #[test]
    fn truncation() {
        for n in 0..REQ.len() {
            assert!(Packet::new_checked(&REQ[..n]).is_err());
        }
    }
}
