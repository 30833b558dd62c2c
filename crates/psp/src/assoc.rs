//! The association message of netveil's PSP key exchange, sent inside a mutually authenticated TLS 1.3
//! connection: the sender's receive SPI and key (from [`crate::Device::rx_assoc`]), which the peer installs as
//! its transmit SA.
//!
//! ```text
//! 'A' (1) | body length (2, big-endian) | version (1) | SPI (4) | generation (1) | key (16 or 32)
//! ```
//!
//! Decoding works on a stream buffer: it returns `Ok(None)` until a whole message is there.

use crate::Version;

/// The message type of an association.
pub const MSG_ASSOC: u8 = b'A';
/// The largest body accepted (a 256-bit key plus the fixed fields, with room to spare).
pub const MAX_BODY: usize = 64;

/// A decoded association; `key` borrows from the buffer (the caller zeroizes it).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Assoc<'a> {
    pub version: Version,
    pub spi: u32,
    pub generation: u8,
    pub key: &'a [u8],
}

impl core::fmt::Debug for Assoc<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Assoc")
            .field("version", &self.version)
            .field("spi", &format_args!("{:#010x}", self.spi))
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

/// Why a message was refused (the connection is then closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    UnknownType(u8),
    Oversized(usize),
    UnknownVersion(u8),
    /// The key length does not match the version, or the body is too short.
    BadLength,
    /// The SPI's low 31 bits are zero (never allocated).
    ZeroSpi,
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DecodeError::UnknownType(t) => write!(f, "unknown message type {t}"),
            DecodeError::Oversized(n) => write!(f, "oversized message ({n} bytes)"),
            DecodeError::UnknownVersion(v) => write!(f, "unknown PSP version {v}"),
            DecodeError::BadLength => f.write_str("association of the wrong length"),
            DecodeError::ZeroSpi => f.write_str("invalid SPI (low 31 bits zero)"),
        }
    }
}

impl std::error::Error for DecodeError {}

impl Assoc<'_> {
    /// Appends the encoded message to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(MSG_ASSOC);
        out.extend_from_slice(&((6 + self.key.len()) as u16).to_be_bytes());
        out.push(self.version.number());
        out.extend_from_slice(&self.spi.to_be_bytes());
        out.push(self.generation);
        out.extend_from_slice(self.key);
    }
}

/// Decodes the message at the start of `buf`: `Ok(None)` if it is not complete yet, else the association and the
/// number of bytes it took.
pub fn decode(buf: &[u8]) -> Result<Option<(Assoc<'_>, usize)>, DecodeError> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    if kind != MSG_ASSOC {
        return Err(DecodeError::UnknownType(kind));
    }
    if buf.len() < 3 {
        return Ok(None);
    }
    let len = u16::from_be_bytes([buf[1], buf[2]]) as usize;
    if len > MAX_BODY {
        return Err(DecodeError::Oversized(len));
    }
    let Some(body) = buf.get(3..3 + len) else {
        return Ok(None);
    };
    let (&v, rest) = body.split_first().ok_or(DecodeError::BadLength)?;
    let version = Version::from_number(v).ok_or(DecodeError::UnknownVersion(v))?;
    if rest.len() != 5 + version.key_len() {
        return Err(DecodeError::BadLength);
    }
    let spi = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
    if spi & 0x7fff_ffff == 0 {
        return Err(DecodeError::ZeroSpi);
    }
    Ok(Some((
        Assoc {
            version,
            spi,
            generation: rest[4],
            key: &rest[5..],
        },
        3 + len,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_partial_input() {
        for (version, klen) in [(Version::AesGcm128, 16), (Version::AesGcm256, 32)] {
            let key: Vec<u8> = (0..klen as u8).collect();
            let a = Assoc {
                version,
                spi: 0x8000_0042,
                generation: 5,
                key: &key,
            };
            let mut m = Vec::new();
            a.encode(&mut m);
            a.encode(&mut m);
            let one = m.len() / 2;
            for cut in 0..one {
                assert_eq!(decode(&m[..cut]), Ok(None), "cut {cut}");
            }
            let (b, used) = decode(&m).unwrap().unwrap();
            assert_eq!((b, used), (a, one));
            assert_eq!(decode(&m[used..]).unwrap().unwrap().0, a);
            assert!(!format!("{b:?}").contains("key"));
        }
    }

    #[test]
    fn refusals() {
        assert_eq!(decode(b"X"), Err(DecodeError::UnknownType(b'X')));
        assert_eq!(decode(&[b'A', 0, 65]), Err(DecodeError::Oversized(65)));
        assert_eq!(decode(&[b'A', 0, 0]), Err(DecodeError::BadLength));
        let mut m = vec![b'A', 0, 22, 9];
        m.extend_from_slice(&[0; 21]);
        assert_eq!(decode(&m), Err(DecodeError::UnknownVersion(9)));
        let mut m = vec![b'A', 0, 22, 1];
        m.extend_from_slice(&[0; 21]);
        assert_eq!(decode(&m), Err(DecodeError::BadLength), "v1 needs 32 bytes");
        let mut m = vec![b'A', 0, 22, 0, 0x80, 0, 0, 0];
        m.extend_from_slice(&[0; 17]);
        assert_eq!(decode(&m), Err(DecodeError::ZeroSpi));
    }
}
