//! The ICMP message layout that ICMPv4 and ICMPv6 share, generic over the version: the view, the parsed form and
//! the [`Family`] of each version (the crate's `icmp` module re-exports them; `icmpv4` and `icmpv6` name their
//! families' types and implement [`Family`] for [`V4`] and [`V6`]).

use core::marker::PhantomData;

use crate::error::{Error, Result};
use crate::field::{get_u16, set_u16};

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
