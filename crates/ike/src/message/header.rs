//! The IKE header (RFC 7296 3.1): a view over the first 28 bytes of a message, and its owned representation.

use super::buf::Writer;
use super::error::Error;
use core::fmt;

/// Length of the IKE header.
pub const HEADER_LEN: usize = 28;

/// The only major version this codec speaks.
pub const MAJOR_VERSION: u8 = 2;

/// Flag bits of the header (RFC 7296 3.1); the other bits are reserved (sent as zero, ignored on receipt).
pub mod flag {
    /// I(nitiator): set by the original initiator of the IKE SA.
    pub const INITIATOR: u8 = 0x08;
    /// V(ersion): the sender can speak a higher major version.
    pub const VERSION: u8 = 0x10;
    /// R(esponse): the message answers a request with the same message ID.
    pub const RESPONSE: u8 = 0x20;
}

/// An exchange type (RFC 7296 3.1; IANA "IKEv2 Exchange Types"). Unknown values are carried, not rejected: what an
/// exchange means to the state machine is its business.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExchangeType(pub u8);

impl ExchangeType {
    pub const IKE_SA_INIT: ExchangeType = ExchangeType(34);
    pub const IKE_AUTH: ExchangeType = ExchangeType(35);
    pub const CREATE_CHILD_SA: ExchangeType = ExchangeType(36);
    pub const INFORMATIONAL: ExchangeType = ExchangeType(37);
    /// RFC 5723.
    pub const IKE_SESSION_RESUME: ExchangeType = ExchangeType(38);
    /// RFC 9242.
    pub const IKE_INTERMEDIATE: ExchangeType = ExchangeType(43);
    /// RFC 9370.
    pub const IKE_FOLLOWUP_KE: ExchangeType = ExchangeType(44);

    /// The registry's name, if this codec knows it.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::IKE_SA_INIT => "IKE_SA_INIT",
            Self::IKE_AUTH => "IKE_AUTH",
            Self::CREATE_CHILD_SA => "CREATE_CHILD_SA",
            Self::INFORMATIONAL => "INFORMATIONAL",
            Self::IKE_SESSION_RESUME => "IKE_SESSION_RESUME",
            Self::IKE_INTERMEDIATE => "IKE_INTERMEDIATE",
            Self::IKE_FOLLOWUP_KE => "IKE_FOLLOWUP_KE",
            _ => return None,
        })
    }
}

impl fmt::Debug for ExchangeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "ExchangeType({})", self.0),
        }
    }
}

/// A view of the IKE header at the start of `buffer`. Once [`Packet::new_checked`] succeeded, no accessor panics.
/// It checks only that the 28 bytes are there: a state machine that must answer a message it cannot parse (with
/// INVALID_MAJOR_VERSION or UNSUPPORTED_CRITICAL_PAYLOAD) reads the SPIs and the message ID from here.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer`, checking it holds the 28-byte header.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated { what: "IKE header" });
        }
        Ok(Packet { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    fn be32(&self, at: usize) -> u32 {
        let b = self.b();
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    fn be64(&self, at: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.b()[at..at + 8]);
        u64::from_be_bytes(a)
    }

    pub fn initiator_spi(&self) -> u64 {
        self.be64(0)
    }

    pub fn responder_spi(&self) -> u64 {
        self.be64(8)
    }

    /// The type of the first payload (0: none).
    pub fn next_payload(&self) -> u8 {
        self.b()[16]
    }

    pub fn major_version(&self) -> u8 {
        self.b()[17] >> 4
    }

    pub fn minor_version(&self) -> u8 {
        self.b()[17] & 0x0f
    }

    pub fn exchange_type(&self) -> ExchangeType {
        ExchangeType(self.b()[18])
    }

    /// All eight flag bits, reserved ones included.
    pub fn flags(&self) -> u8 {
        self.b()[19]
    }

    pub fn message_id(&self) -> u32 {
        self.be32(20)
    }

    /// The whole message's length as the header states it.
    pub fn length(&self) -> u32 {
        self.be32(24)
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..]
    }
}

/// The header's flags that mean something (RFC 7296 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags {
    pub initiator: bool,
    pub version: bool,
    pub response: bool,
}

impl Flags {
    pub fn from_bits(b: u8) -> Flags {
        Flags {
            initiator: b & flag::INITIATOR != 0,
            version: b & flag::VERSION != 0,
            response: b & flag::RESPONSE != 0,
        }
    }

    pub fn bits(self) -> u8 {
        let mut b = 0;
        if self.initiator {
            b |= flag::INITIATOR;
        }
        if self.version {
            b |= flag::VERSION;
        }
        if self.response {
            b |= flag::RESPONSE;
        }
        b
    }
}

/// The header's fields without those the codec derives: the first payload's type and the length come from the
/// payloads; the version is 2.0 (a minor version is ignored on receipt, RFC 7296 2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub initiator_spi: u64,
    pub responder_spi: u64,
    pub exchange_type: ExchangeType,
    pub flags: Flags,
    pub message_id: u32,
}

impl Header {
    /// The header of `p`. A major version other than 2 is [`Error::BadVersion`] (the caller may answer a higher
    /// one with INVALID_MAJOR_VERSION). The length is not checked here: [`super::Message::parse`] does that.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Header, Error> {
        if p.major_version() != MAJOR_VERSION {
            return Err(Error::BadVersion {
                major: p.major_version(),
                minor: p.minor_version(),
            });
        }
        Ok(Header {
            initiator_spi: p.initiator_spi(),
            responder_spi: p.responder_spi(),
            exchange_type: p.exchange_type(),
            flags: Flags::from_bits(p.flags()),
            message_id: p.message_id(),
        })
    }

    /// Writes the 28 bytes with the given first payload type and total length.
    pub(crate) fn emit(
        &self,
        w: &mut Writer<'_>,
        next_payload: u8,
        length: u32,
    ) -> Result<(), Error> {
        w.bytes(&self.initiator_spi.to_be_bytes())?;
        w.bytes(&self.responder_spi.to_be_bytes())?;
        w.u8(next_payload)?;
        w.u8(MAJOR_VERSION << 4)?;
        w.u8(self.exchange_type.0)?;
        w.u8(self.flags.bits())?;
        w.u32(self.message_id)?;
        w.u32(length)
    }
}
