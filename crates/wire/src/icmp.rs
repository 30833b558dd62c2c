//! ICMP messages, generic over the version ([`V4`]: RFC 792, [`V6`]: RFC 4443): the two share their layout (type,
//! code, checksum, 4 bytes of message-specific data, payload) and differ in their message types and in the
//! checksum, which ICMPv6 computes over an IPv6 pseudo-header too. [`crate::icmpv4`] and [`crate::icmpv6`] name
//! the two (`icmpv4::Packet<T>` is `icmp::Packet<T, V4>`) and hold what is not shared: the type numbers, the
//! checksum methods, `emit` and ICMPv6's `mtu`.

use core::marker::PhantomData;

use crate::field::{get_u16, set_u16};
use crate::{Error, Result};

/// Length of the fixed header (type, code, checksum, 4 bytes of message-specific data).
pub const HEADER_LEN: usize = 8;

/// An ICMP version: the message types the generic code needs. Implemented by [`V4`] and [`V6`], the only ones.
pub trait Family: Copy + core::fmt::Debug + PartialEq + Eq {
    /// The echo request type (8 for ICMPv4, 128 for ICMPv6).
    const ECHO_REQUEST: u8;
    /// The echo reply type (0 for ICMPv4, 129 for ICMPv6).
    const ECHO_REPLY: u8;
}

/// ICMP for IPv4 (RFC 792): the checksum covers the message alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V4;

/// ICMP for IPv6 (RFC 4443): the checksum covers an IPv6 pseudo-header too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V6;

impl Family for V4 {
    const ECHO_REQUEST: u8 = crate::icmpv4::msg_type::ECHO_REQUEST;
    const ECHO_REPLY: u8 = crate::icmpv4::msg_type::ECHO_REPLY;
}

impl Family for V6 {
    const ECHO_REQUEST: u8 = crate::icmpv6::msg_type::ECHO_REQUEST;
    const ECHO_REPLY: u8 = crate::icmpv6::msg_type::ECHO_REPLY;
}

/// A view of an ICMP message of family `F`. The message is the whole buffer.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>, F: Family> {
    buffer: T,
    family: PhantomData<F>,
}

impl<T: AsRef<[u8]>, F: Family> Packet<T, F> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet {
            buffer,
            family: PhantomData,
        }
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
        let t = self.msg_type();
        t == F::ECHO_REQUEST || t == F::ECHO_REPLY
    }

    /// The bytes after the 8-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>, F: Family> Packet<T, F> {
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

    /// Computes the checksum with `sum` (over the buffer with the checksum field zeroed) and stores it.
    pub(crate) fn fill_checksum_with(&mut self, sum: impl FnOnce(&[u8]) -> u16) {
        self.set_checksum(0);
        let c = sum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

impl<T: AsRef<[u8]>, F: Family> Packet<T, F> {
    /// The whole message (for the families' checksums).
    pub(crate) fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// Parsed ICMP message of family `F`, borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a, F: Family> {
    pub msg_type: u8,
    pub msg_code: u8,
    /// Bytes 4..8 of the header.
    pub rest_of_header: [u8; 4],
    pub payload: &'a [u8],
    pub family: PhantomData<F>,
}

impl<'a, F: Family> Repr<'a, F> {
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    /// Parses the message. Does not verify the checksum.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&'a T, F>) -> Result<Repr<'a, F>> {
        p.check_len()?;
        let d: &'a [u8] = p.buffer.as_ref();
        Ok(Repr {
            msg_type: d[0],
            msg_code: d[1],
            rest_of_header: p.rest_of_header(),
            payload: &d[HEADER_LEN..],
            family: PhantomData,
        })
    }

    /// Writes the message but its checksum; the buffer must be exactly `buffer_len()` bytes.
    pub(crate) fn emit_fields<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        p: &mut Packet<&mut T, F>,
    ) {
        p.set_msg_type(self.msg_type);
        p.set_msg_code(self.msg_code);
        p.set_rest_of_header(self.rest_of_header);
        p.payload_mut()[..self.payload.len()].copy_from_slice(self.payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared code takes the echo types from the family: 8/0 are echoes in ICMPv4 only, 128/129 in ICMPv6
    /// only (type 0 is reserved and 8 unassigned there).
    #[test]
    fn echo_types_are_the_familys() {
        for (t, v4, v6) in [
            (8u8, true, false),
            (0, true, false),
            (128, false, true),
            (129, false, true),
        ] {
            let b = [t, 0, 0, 0, 0, 0, 0, 0];
            assert_eq!(
                Packet::<_, V4>::new_checked(&b[..]).unwrap().is_echo(),
                v4,
                "type {t}"
            );
            assert_eq!(
                Packet::<_, V6>::new_checked(&b[..]).unwrap().is_echo(),
                v6,
                "type {t}"
            );
        }
    }

    /// A message parsed and emitted again keeps its fields (the checksum is the family's business).
    #[test]
    fn fields_round_trip() {
        let b = [3u8, 1, 0xaa, 0xbb, 1, 2, 3, 4, 9, 9];
        let r = Repr::parse(&Packet::<_, V6>::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(
            (r.msg_type, r.msg_code, r.rest_of_header),
            (3, 1, [1, 2, 3, 4])
        );
        assert_eq!(r.payload, &[9, 9]);
        let mut out = [0u8; 10];
        r.emit_fields(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[..2], b[..2]);
        assert_eq!(out[4..], b[4..]);
    }
}
