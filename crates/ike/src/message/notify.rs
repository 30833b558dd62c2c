//! The Notify (RFC 7296 3.10) and Delete (3.11) payloads, and the notify message types.

use super::buf::{Reader, Writer};
use super::error::Error;
use core::fmt;

/// A notify message type (IANA "IKEv2 Notify Message Types"): below 16384 an error, from 16384 a status. Unknown
/// types are carried: the state machine ignores unknown status types and fails on unknown error types in a
/// response (RFC 7296 3.10.1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NotifyType(pub u16);

macro_rules! notify_types {
    ($($(#[$doc:meta])* $name:ident = $v:expr,)*) => {
        impl NotifyType {
            $($(#[$doc])* pub const $name: NotifyType = NotifyType($v);)*

            /// The registry's name, if this codec knows it.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($v => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

notify_types! {
    // Error types, RFC 7296 3.10.1.
    UNSUPPORTED_CRITICAL_PAYLOAD = 1,
    INVALID_IKE_SPI = 4,
    INVALID_MAJOR_VERSION = 5,
    INVALID_SYNTAX = 7,
    INVALID_MESSAGE_ID = 9,
    INVALID_SPI = 11,
    NO_PROPOSAL_CHOSEN = 14,
    INVALID_KE_PAYLOAD = 17,
    AUTHENTICATION_FAILED = 24,
    SINGLE_PAIR_REQUIRED = 34,
    NO_ADDITIONAL_SAS = 35,
    INTERNAL_ADDRESS_FAILURE = 36,
    FAILED_CP_REQUIRED = 37,
    TS_UNACCEPTABLE = 38,
    INVALID_SELECTORS = 39,
    TEMPORARY_FAILURE = 43,
    CHILD_SA_NOT_FOUND = 44,
    /// RFC 9370.
    STATE_NOT_FOUND = 47,
    // Status types, RFC 7296 3.10.1 unless noted.
    INITIAL_CONTACT = 16384,
    SET_WINDOW_SIZE = 16385,
    ADDITIONAL_TS_POSSIBLE = 16386,
    IPCOMP_SUPPORTED = 16387,
    NAT_DETECTION_SOURCE_IP = 16388,
    NAT_DETECTION_DESTINATION_IP = 16389,
    COOKIE = 16390,
    USE_TRANSPORT_MODE = 16391,
    HTTP_CERT_LOOKUP_SUPPORTED = 16392,
    REKEY_SA = 16393,
    ESP_TFC_PADDING_NOT_SUPPORTED = 16394,
    NON_FIRST_FRAGMENTS_ALSO = 16395,
    /// RFC 4555.
    MOBIKE_SUPPORTED = 16396,
    /// RFC 4555.
    ADDITIONAL_IP4_ADDRESS = 16397,
    /// RFC 4555.
    ADDITIONAL_IP6_ADDRESS = 16398,
    /// RFC 4555.
    NO_ADDITIONAL_ADDRESSES = 16399,
    /// RFC 4555.
    UPDATE_SA_ADDRESSES = 16400,
    /// RFC 4739.
    MULTIPLE_AUTH_SUPPORTED = 16404,
    /// RFC 4739.
    ANOTHER_AUTH_FOLLOWS = 16405,
    /// RFC 5685.
    REDIRECT_SUPPORTED = 16406,
    /// RFC 5998.
    EAP_ONLY_AUTHENTICATION = 16417,
    /// RFC 6023.
    CHILDLESS_IKEV2_SUPPORTED = 16418,
    /// RFC 6311.
    IKEV2_MESSAGE_ID_SYNC_SUPPORTED = 16420,
    /// RFC 7383.
    IKEV2_FRAGMENTATION_SUPPORTED = 16430,
    /// RFC 7427.
    SIGNATURE_HASH_ALGORITHMS = 16431,
    /// RFC 8784.
    USE_PPK = 16435,
    /// RFC 9242.
    INTERMEDIATE_EXCHANGE_SUPPORTED = 16438,
    /// RFC 9370.
    ADDITIONAL_KEY_EXCHANGE = 16441,
}

impl NotifyType {
    /// Types below 16384 report errors.
    pub fn is_error(self) -> bool {
        self.0 < 16384
    }
}

impl fmt::Debug for NotifyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "NotifyType({})", self.0),
        }
    }
}

/// Hash algorithm ids of SIGNATURE_HASH_ALGORITHMS (RFC 7427 3, IANA "IKEv2 Hash Algorithms").
pub mod hash_algorithm {
    pub const SHA1: u16 = 1;
    pub const SHA2_256: u16 = 2;
    pub const SHA2_384: u16 = 3;
    pub const SHA2_512: u16 = 4;
    /// RFC 8420 (Ed25519, Ed448).
    pub const IDENTITY: u16 = 5;
}

/// A Notify payload (RFC 7296 3.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    /// See [`super::sa::protocol_id`]; 0 when the notify concerns no SA.
    pub protocol_id: u8,
    /// Empty when the notify concerns no SA (or the IKE SA in its own messages).
    pub spi: Vec<u8>,
    pub notify_type: NotifyType,
    pub data: Vec<u8>,
}

impl Notify {
    /// A notify that concerns no particular SA.
    pub fn new(notify_type: NotifyType, data: Vec<u8>) -> Notify {
        Notify {
            protocol_id: 0,
            spi: Vec::new(),
            notify_type,
            data,
        }
    }

    pub fn parse(body: &[u8]) -> Result<Notify, Error> {
        let mut r = Reader::new(body, "notify");
        let protocol_id = r.u8()?;
        let spi_size = usize::from(r.u8()?);
        let notify_type = NotifyType(r.u16()?);
        let spi = r.take(spi_size)?.to_vec();
        Ok(Notify {
            protocol_id,
            spi,
            notify_type,
            data: r.rest().to_vec(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        4 + self.spi.len() + self.data.len()
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let mut w = Writer::new(buf);
        w.u8(self.protocol_id)?;
        w.u8(u8::try_from(self.spi.len()).map_err(|_| Error::TooLong { what: "notify SPI" })?)?;
        w.u16(self.notify_type.0)?;
        w.bytes(&self.spi)?;
        w.bytes(&self.data)?;
        Ok(w.written())
    }

    /// An INVALID_KE_PAYLOAD notify naming the group the responder wants (RFC 7296 1.3).
    pub fn invalid_ke_payload(group: u16) -> Notify {
        Notify::new(NotifyType::INVALID_KE_PAYLOAD, group.to_be_bytes().to_vec())
    }

    /// The group an INVALID_KE_PAYLOAD notify asks for (`None` for another type or data not 2 bytes long).
    pub fn invalid_ke_group(&self) -> Option<u16> {
        match self.data[..] {
            [a, b] if self.notify_type == NotifyType::INVALID_KE_PAYLOAD => {
                Some(u16::from_be_bytes([a, b]))
            }
            _ => None,
        }
    }

    /// The hash algorithm ids of a SIGNATURE_HASH_ALGORITHMS notify (`None` for another type or an odd length).
    pub fn signature_hash_algorithms(&self) -> Option<Vec<u16>> {
        if self.notify_type != NotifyType::SIGNATURE_HASH_ALGORITHMS
            || !self.data.len().is_multiple_of(2)
        {
            return None;
        }
        Some(
            self.data
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect(),
        )
    }
}

/// A Delete payload (RFC 7296 3.11): the SPIs of SAs of one protocol. For the IKE SA the SPI size is 0 and there
/// are no SPIs. Fields are private so that every SPI has the stated size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    protocol_id: u8,
    spi_size: u8,
    /// `num_spis * spi_size` bytes.
    spis: Vec<u8>,
}

impl Delete {
    /// Deletes the IKE SA the message travels in.
    pub fn ike() -> Delete {
        Delete {
            protocol_id: super::sa::protocol_id::IKE,
            spi_size: 0,
            spis: Vec::new(),
        }
    }

    /// Deletes child SAs of `protocol_id` (ESP or AH) by their 4-byte SPIs.
    pub fn child(protocol_id: u8, spis: &[u32]) -> Delete {
        Delete {
            protocol_id,
            spi_size: 4,
            spis: spis.iter().flat_map(|s| s.to_be_bytes()).collect(),
        }
    }

    pub fn protocol_id(&self) -> u8 {
        self.protocol_id
    }

    pub fn spi_size(&self) -> u8 {
        self.spi_size
    }

    /// The SPIs, each `spi_size` bytes.
    pub fn spis(&self) -> impl Iterator<Item = &[u8]> {
        // chunks_exact panics on 0; with size 0 there are no SPIs.
        self.spis.chunks_exact(usize::from(self.spi_size.max(1)))
    }

    /// The SPIs as numbers, when they are 4 bytes long.
    pub fn spis_u32(&self) -> Option<Vec<u32>> {
        (self.spi_size == 4).then(|| {
            self.spis
                .chunks_exact(4)
                .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }

    pub fn parse(body: &[u8]) -> Result<Delete, Error> {
        let mut r = Reader::new(body, "delete");
        let protocol_id = r.u8()?;
        let spi_size = r.u8()?;
        let num = usize::from(r.u16()?);
        if spi_size == 0 && num != 0 {
            return Err(Error::BadValue {
                what: "delete with SPIs of size 0",
            });
        }
        // At most 255 * 65535 bytes, and taken from the body before anything is allocated.
        let spis = r.take(usize::from(spi_size) * num)?.to_vec();
        if !r.is_empty() {
            return Err(Error::BadLength {
                what: "delete (bytes after its SPIs)",
            });
        }
        Ok(Delete {
            protocol_id,
            spi_size,
            spis,
        })
    }

    pub fn buffer_len(&self) -> usize {
        4 + self.spis.len()
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let num = match self.spi_size {
            0 => 0,
            n => self.spis.len() / usize::from(n),
        };
        let mut w = Writer::new(buf);
        w.u8(self.protocol_id)?;
        w.u8(self.spi_size)?;
        w.u16(u16::try_from(num).map_err(|_| Error::TooLong { what: "delete" })?)?;
        w.bytes(&self.spis)?;
        Ok(w.written())
    }
}
