//! The generic payload header (RFC 7296 3.2) and the payload chain: each payload names the type of the next one.

use super::error::{Error, MAX_PAYLOADS};
use super::payload_type;

/// Length of the generic payload header: next payload, critical bit and reserved bits, payload length.
pub const GENERIC_HEADER_LEN: usize = 4;

/// The critical bit of the generic payload header's second byte.
pub const CRITICAL: u8 = 0x80;

/// A view of one payload at the start of `buffer`: its generic header and its body. [`Packet::new_checked`]
/// checks that the header is there, that its length is at least 4 and that the buffer holds that many bytes;
/// after that no accessor panics. Bytes after the payload (the next payloads) are not part of it.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let b = buffer.as_ref();
        let Some(hdr) = b.get(..GENERIC_HEADER_LEN) else {
            return Err(Error::Truncated {
                what: "generic payload header",
            });
        };
        let len = usize::from(u16::from_be_bytes([hdr[2], hdr[3]]));
        if len < GENERIC_HEADER_LEN {
            return Err(Error::BadLength { what: "payload" });
        }
        if len > b.len() {
            return Err(Error::Truncated { what: "payload" });
        }
        Ok(Packet { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The next payload's type (for SK and SKF: the first inner payload's).
    pub fn next_payload(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    pub fn critical(&self) -> bool {
        self.buffer.as_ref()[1] & CRITICAL != 0
    }

    /// The payload's length, generic header included.
    pub fn payload_len(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }

    /// The bytes after the generic header, up to the payload's length.
    pub fn body(&self) -> &[u8] {
        &self.buffer.as_ref()[GENERIC_HEADER_LEN..usize::from(self.payload_len())]
    }
}

/// One payload of a chain, as the generic header frames it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawPayload<'a> {
    /// This payload's type (named by the previous payload's header, or by the IKE header for the first).
    pub payload_type: u8,
    /// The critical bit (RFC 7296 3.2). Ignored for the types this codec knows.
    pub critical: bool,
    /// The generic header's next payload field: for SK and SKF the type of the first payload inside.
    pub next_payload: u8,
    /// The payload's body, after its generic header.
    pub body: &'a [u8],
}

impl RawPayload<'_> {
    /// Whether this codec knows the payload's type.
    pub fn is_known(&self) -> bool {
        payload_type::is_known(self.payload_type)
    }
}

/// An iterator over a payload chain that checks every length: each item is a payload or the error that ends the
/// chain (after an error it yields nothing more). The chain must end exactly at the end of the bytes: a payload
/// whose length runs past them, a length under 4, bytes left after the last payload, or a next payload named
/// where no bytes are left is an error. An Encrypted (SK) or Encrypted Fragment (SKF) payload must be the last
/// one (RFC 7296 3.14, RFC 7383 2.5). An unknown type with the critical bit set is
/// [`Error::UnsupportedCriticalPayload`]; an unknown type without it is yielded (its caller skips it). At most
/// [`MAX_PAYLOADS`] payloads.
#[derive(Debug, Clone)]
pub struct Chain<'a> {
    next: u8,
    rest: &'a [u8],
    count: usize,
    done: bool,
}

impl<'a> Chain<'a> {
    /// The chain of `bytes` whose first payload has type `first` (0: none).
    pub fn new(first: u8, bytes: &'a [u8]) -> Self {
        Chain {
            next: first,
            rest: bytes,
            count: 0,
            done: false,
        }
    }

    fn step(&mut self) -> Result<Option<RawPayload<'a>>, Error> {
        if self.next == payload_type::NONE {
            if !self.rest.is_empty() {
                return Err(Error::TrailingBytes {
                    len: self.rest.len(),
                });
            }
            return Ok(None);
        }
        if self.count == MAX_PAYLOADS {
            return Err(Error::TooMany {
                what: "payloads",
                cap: MAX_PAYLOADS,
            });
        }
        let view = Packet::new_checked(self.rest)?;
        let len = usize::from(view.payload_len());
        let p = RawPayload {
            payload_type: self.next,
            critical: view.critical(),
            next_payload: view.next_payload(),
            body: &self.rest[GENERIC_HEADER_LEN..len],
        };
        if p.critical && !p.is_known() {
            return Err(Error::UnsupportedCriticalPayload {
                payload_type: p.payload_type,
            });
        }
        self.rest = &self.rest[len..];
        self.count += 1;
        if matches!(p.payload_type, payload_type::SK | payload_type::SKF) {
            // The next payload field names the first inner payload; nothing may follow in the clear.
            if !self.rest.is_empty() {
                return Err(Error::PayloadAfterEncrypted);
            }
            self.next = payload_type::NONE;
        } else {
            self.next = p.next_payload;
        }
        Ok(Some(p))
    }
}

impl<'a> Iterator for Chain<'a> {
    type Item = Result<RawPayload<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(p)) => Some(Ok(p)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
