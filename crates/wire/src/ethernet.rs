//! Ethernet II frames; [`payload_type`] steps over VLAN tags.

use crate::error::{Error, Result};
use crate::field::{get_u16, set_u16};

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = 14;

/// Ethertype values used by netveil.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const VLAN: u16 = 0x8100;
    pub const IPV6: u16 = 0x86dd;
}

/// The tag types of 802.1Q, 802.1ad and the older QinQ, whose 4-byte tags [`payload_type`] steps over.
pub const VLAN_TAGS: [u16; 3] = [0x8100, 0x88a8, 0x9100];

/// The EtherType of the frame's payload after any VLAN tags, and the offset where that payload starts; `None` if
/// the frame ends before.
pub fn payload_type(frame: &[u8]) -> Option<(u16, usize)> {
    let mut at = 12;
    loop {
        let t = frame.get(at..at + 2)?;
        let et = u16::from_be_bytes([t[0], t[1]]);
        if !VLAN_TAGS.contains(&et) {
            return Some((et, at + 2));
        }
        at += 4;
    }
}

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Address(pub [u8; 6]);

impl Address {
    pub const BROADCAST: Address = Address([0xff; 6]);

    /// True for the all-ones address.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// True if the group bit is set.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }
}

impl core::fmt::Display for Address {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let a = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            a[0], a[1], a[2], a[3], a[4], a[5]
        )
    }
}

/// A view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking its length.
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer`, checking it holds a full header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds a full header.
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

    pub fn dst_addr(&self) -> Address {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[0..6]);
        Address(a)
    }

    pub fn src_addr(&self) -> Address {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[6..12]);
        Address(a)
    }

    pub fn ethertype(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 12)
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_dst_addr(&mut self, a: Address) {
        self.buffer.as_mut()[0..6].copy_from_slice(&a.0);
    }

    pub fn set_src_addr(&mut self, a: Address) {
        self.buffer.as_mut()[6..12].copy_from_slice(&a.0);
    }

    pub fn set_ethertype(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 12, v);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// Parsed Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src: Address,
    pub dst: Address,
    pub ethertype: u16,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            ethertype: p.ethertype(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header; the buffer must hold at least `buffer_len()` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, p: &mut Packet<&mut T>) {
        p.set_dst_addr(self.dst);
        p.set_src_addr(self.src);
        p.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: [u8; 18] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0xaa,
        0xbb, 0xcc, 0xdd,
    ];

    #[test]
    fn parse() {
        let p = Packet::new_checked(&FRAME[..]).unwrap();
        assert!(p.dst_addr().is_broadcast());
        assert_eq!(p.src_addr(), Address([2, 0, 0, 0, 0, 1]));
        assert_eq!(p.ethertype(), ethertype::ARP);
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(p.src_addr().to_string(), "02:00:00:00:00:01");
    }

    #[test]
    fn round_trip() {
        let r = Repr::parse(&Packet::new_unchecked(&FRAME[..])).unwrap();
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..], &FRAME[..14]);
    }

    #[test]
    fn truncation() {
        for n in 0..FRAME.len() {
            let r = Packet::new_checked(&FRAME[..n]);
            assert_eq!(r.is_ok(), n >= HEADER_LEN);
            if let Ok(p) = r {
                let _ = (p.dst_addr(), p.src_addr(), p.ethertype(), p.payload());
            }
        }
    }

    /// VLAN tags (one, two, of every tag type) are stepped over; a frame that ends inside them has no payload type.
    #[test]
    fn payload_type_steps_over_vlan_tags() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        assert_eq!(payload_type(&f), Some((0x0800, 14)));
        let mut q = vec![0u8; 12];
        q.extend_from_slice(&[0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2, 0x86, 0xdd]);
        assert_eq!(payload_type(&q), Some((0x86dd, 22)));
        assert_eq!(payload_type(&q[..20]), None);
        assert_eq!(payload_type(&[0u8; 13]), None);
    }
}
