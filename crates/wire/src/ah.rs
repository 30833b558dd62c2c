//! Authentication Header (RFC 4302).

use crate::error::{Error, Result};
use crate::field::{get_u16, get_u32, set_u16, set_u32};

/// Length of the fixed part: next header, payload len, reserved, SPI, sequence number.
pub const FIXED_LEN: usize = 12;

/// A view of an AH header followed by the protected payload.
///
/// `new_checked` does not check the 4-byte (IPv4) or 8-byte (IPv6) alignment of the header length.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer`, checking `12 <= header_len() <= buffer.len()`.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// The checks done by `new_checked`.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < FIXED_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < FIXED_LEN {
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

    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// The payload length field: AH length in 32-bit words minus 2.
    pub fn payload_len(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// AH length in bytes: (payload_len + 2) * 4.
    pub fn header_len(&self) -> usize {
        (self.payload_len() as usize + 2) * 4
    }

    pub fn reserved(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 2)
    }

    pub fn spi(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 4)
    }

    /// The low 32 bits of the sequence number.
    pub fn seq_no(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 8)
    }

    /// The ICV (including any padding), bytes 12..header_len().
    pub fn icv(&self) -> &[u8] {
        &self.buffer.as_ref()[FIXED_LEN..self.header_len()]
    }

    /// The protected data after the AH header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }

    pub fn set_payload_len(&mut self, v: u8) {
        self.buffer.as_mut()[1] = v;
    }

    /// Sets the payload length field from a header length in bytes (multiple of 4, 12..=1028).
    pub fn set_header_len(&mut self, len: usize) {
        self.set_payload_len((len / 4 - 2) as u8);
    }

    pub fn set_reserved(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), 2, v);
    }

    pub fn set_spi(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 4, v);
    }

    pub fn set_seq_no(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 8, v);
    }

    pub fn icv_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[FIXED_LEN..hl]
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[hl..]
    }
}

/// Parsed AH header (the ICV itself is not copied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub next_header: u8,
    pub spi: u32,
    pub seq_no: u32,
    /// ICV length in bytes, including padding; a multiple of 4.
    pub icv_len: usize,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            next_header: p.next_header(),
            spi: p.spi(),
            seq_no: p.seq_no(),
            icv_len: p.header_len() - FIXED_LEN,
        })
    }

    /// The AH header length (fixed part plus ICV).
    pub fn buffer_len(&self) -> usize {
        FIXED_LEN + self.icv_len
    }

    /// Writes the header with a zeroed ICV; the buffer must hold `buffer_len()` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, p: &mut Packet<&mut T>) {
        p.set_next_header(self.next_header);
        p.set_header_len(self.buffer_len());
        p.set_reserved(0);
        p.set_spi(self.spi);
        p.set_seq_no(self.seq_no);
        p.icv_mut().fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // AH with a 12-byte ICV (HMAC-SHA1-96) over IPv4: payload len 4, next header TCP.
    const AH: [u8; 26] = [
        0x06, 0x04, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x07, 0xa1, 0xa2, 0xa3,
        0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xee, 0xff,
    ];

    #[test]
    fn parse() {
        let p = Packet::new_checked(&AH[..]).unwrap();
        assert_eq!(p.next_header(), 6);
        assert_eq!(p.payload_len(), 4);
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.reserved(), 0);
        assert_eq!(p.spi(), 0x100);
        assert_eq!(p.seq_no(), 7);
        assert_eq!(p.icv().len(), 12);
        assert_eq!(p.icv()[0], 0xa1);
        assert_eq!(p.payload(), &[0xee, 0xff]);
    }

    #[test]
    fn round_trip() {
        let r = Repr::parse(&Packet::new_checked(&AH[..]).unwrap()).unwrap();
        assert_eq!(r.icv_len, 12);
        let mut out = vec![0xffu8; r.buffer_len()];
        let mut p = Packet::new_unchecked(&mut out[..]);
        r.emit(&mut p);
        p.icv_mut().copy_from_slice(&AH[12..24]);
        assert_eq!(&out[..], &AH[..24]);
    }

    #[test]
    fn lengths() {
        for n in 0..24 {
            assert_eq!(Packet::new_checked(&AH[..n]).err(), Some(Error::Truncated));
        }
        let mut b = AH;
        b[1] = 0;
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::Malformed));
        b[1] = 1;
        assert_eq!(Packet::new_checked(&b[..]).unwrap().icv().len(), 0);
        b[1] = 255;
        assert_eq!(Packet::new_checked(&b[..]).err(), Some(Error::Truncated));
    }
}
