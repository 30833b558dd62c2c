//! ESP header and trailer (RFC 4303).

use crate::error::{Error, Result};
use crate::field::{get_u32, set_u32};

/// SPI plus sequence number.
pub const HEADER_LEN: usize = 8;

/// Pad length and next header bytes at the end of the encrypted body.
pub const TRAILER_LEN: usize = 2;

/// A view of an ESP packet: SPI, sequence number, then IV/ciphertext/ICV as the payload.
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

    pub fn spi(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 0)
    }

    /// The low 32 bits of the sequence number.
    pub fn seq_no(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 4)
    }

    /// Everything after the header (IV, ciphertext, ICV).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_spi(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 0, v);
    }

    pub fn set_seq_no(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), 4, v);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// Parsed ESP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub spi: u32,
    pub seq_no: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            spi: p.spi(),
            seq_no: p.seq_no(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header; the buffer must hold at least 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, p: &mut Packet<&mut T>) {
        p.set_spi(self.spi);
        p.set_seq_no(self.seq_no);
    }
}

/// Parses the trailer at the end of a decrypted ESP body.
///
/// Returns `(pad_len, next_header, payload_len)`, where `payload_len = len - pad_len - 2`.
pub fn trailer(plaintext: &[u8]) -> Result<(u8, u8, usize)> {
    let len = plaintext.len();
    if len < TRAILER_LEN {
        return Err(Error::Truncated);
    }
    let next_header = plaintext[len - 1];
    let pad_len = plaintext[len - 2];
    let used = pad_len as usize + TRAILER_LEN;
    if used > len {
        return Err(Error::Malformed);
    }
    Ok((pad_len, next_header, len - used))
}

/// True if `pad` is the default monotonic padding 1, 2, 3, ... (RFC 4303 section 2.4).
pub fn check_padding(pad: &[u8]) -> bool {
    pad.iter().enumerate().all(|(i, &b)| b as usize == i + 1)
}

/// Writes the default padding 1, 2, 3, ... into `pad` (at most 255 bytes are meaningful).
pub fn fill_padding(pad: &mut [u8]) {
    for (i, b) in pad.iter_mut().enumerate() {
        *b = (i + 1) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header() {
        let b = [0x00, 0x00, 0x10, 0x01, 0x00, 0x00, 0x00, 0x2a, 0xde, 0xad];
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.spi(), 0x1001);
        assert_eq!(p.seq_no(), 42);
        assert_eq!(p.payload(), &[0xde, 0xad]);
        let r = Repr::parse(&p).unwrap();
        let mut out = [0u8; 8];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, b[..8]);
        for n in 0..8 {
            assert_eq!(Packet::new_checked(&b[..n]).err(), Some(Error::Truncated));
        }
    }

    #[test]
    fn trailers() {
        // payload "abc", pad 1 2 3, pad_len 3, next header 4 (IPv4)
        let body = [b'a', b'b', b'c', 1, 2, 3, 3, 4];
        assert_eq!(trailer(&body), Ok((3, 4, 3)));
        assert!(check_padding(&body[3..6]));
        assert_eq!(trailer(&[0, 59]), Ok((0, 59, 0)));
        assert_eq!(trailer(&[1, 59]), Err(Error::Malformed));
        assert_eq!(trailer(&[59]), Err(Error::Truncated));
        assert_eq!(trailer(&[]), Err(Error::Truncated));
        assert_eq!(trailer(&[1, 2, 2, 41]), Ok((2, 41, 0)));
    }

    #[test]
    fn padding() {
        assert!(check_padding(&[]));
        assert!(check_padding(&[1]));
        assert!(!check_padding(&[0]));
        assert!(!check_padding(&[1, 3]));
        let mut p = [0u8; 255];
        fill_padding(&mut p);
        assert!(check_padding(&p));
        assert_eq!(p[254], 255);
    }
}
