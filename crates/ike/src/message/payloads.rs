//! The payloads with simple bodies: KE, IDi/IDr, CERT, CERTREQ, AUTH, Nonce, Vendor ID, CP, EAP, and the
//! encrypted payloads SK and SKF (kept opaque: sealing and opening is [`crate::sk`]'s).

use super::buf::{len16, Reader, Writer};
use super::error::{Error, MAX_CP_ATTRIBUTES};
use core::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A Key Exchange payload (RFC 7296 3.4; also the additional key exchanges of RFC 9370).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ke {
    /// See [`super::sa::ke`].
    pub group: u16,
    pub data: Vec<u8>,
}

impl Ke {
    pub fn parse(body: &[u8]) -> Result<Ke, Error> {
        let mut r = Reader::new(body, "key exchange");
        let group = r.u16()?;
        let _reserved = r.u16()?;
        Ok(Ke {
            group,
            data: r.rest().to_vec(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        4 + self.data.len()
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let mut w = Writer::new(buf);
        w.u16(self.group)?;
        w.u16(0)?;
        w.bytes(&self.data)?;
        Ok(w.written())
    }
}

/// An identification type (RFC 7296 3.5).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdType(pub u8);

impl IdType {
    pub const IPV4_ADDR: IdType = IdType(1);
    pub const FQDN: IdType = IdType(2);
    pub const RFC822_ADDR: IdType = IdType(3);
    pub const IPV6_ADDR: IdType = IdType(5);
    pub const DER_ASN1_DN: IdType = IdType(9);
    pub const DER_ASN1_GN: IdType = IdType(10);
    pub const KEY_ID: IdType = IdType(11);

    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::IPV4_ADDR => "ID_IPV4_ADDR",
            Self::FQDN => "ID_FQDN",
            Self::RFC822_ADDR => "ID_RFC822_ADDR",
            Self::IPV6_ADDR => "ID_IPV6_ADDR",
            Self::DER_ASN1_DN => "ID_DER_ASN1_DN",
            Self::DER_ASN1_GN => "ID_DER_ASN1_GN",
            Self::KEY_ID => "ID_KEY_ID",
            _ => return None,
        })
    }
}

impl fmt::Debug for IdType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "IdType({})", self.0),
        }
    }
}

/// An identification (the body of IDi or IDr, RFC 7296 3.5): a type and its bytes. An IPv4 address is 4 bytes
/// and an IPv6 address 16 (checked on parse and by the constructors); other types are bytes the accessors
/// interpret.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Id {
    id_type: IdType,
    data: Vec<u8>,
}

impl Id {
    /// An identification of `id_type`; `Err` when an address type has the wrong length.
    pub fn new(id_type: IdType, data: Vec<u8>) -> Result<Id, Error> {
        let want = match id_type {
            IdType::IPV4_ADDR => Some(4),
            IdType::IPV6_ADDR => Some(16),
            _ => None,
        };
        if want.is_some_and(|n| n != data.len()) {
            return Err(Error::BadLength {
                what: "identification address",
            });
        }
        Ok(Id { id_type, data })
    }

    pub fn ipv4(a: Ipv4Addr) -> Id {
        Id {
            id_type: IdType::IPV4_ADDR,
            data: a.octets().to_vec(),
        }
    }

    pub fn ipv6(a: Ipv6Addr) -> Id {
        Id {
            id_type: IdType::IPV6_ADDR,
            data: a.octets().to_vec(),
        }
    }

    pub fn fqdn(name: &str) -> Id {
        Id {
            id_type: IdType::FQDN,
            data: name.as_bytes().to_vec(),
        }
    }

    pub fn rfc822(addr: &str) -> Id {
        Id {
            id_type: IdType::RFC822_ADDR,
            data: addr.as_bytes().to_vec(),
        }
    }

    /// A distinguished name, DER-encoded (its syntax is checked where certificates are).
    pub fn der_dn(der: Vec<u8>) -> Id {
        Id {
            id_type: IdType::DER_ASN1_DN,
            data: der,
        }
    }

    pub fn key_id(bytes: Vec<u8>) -> Id {
        Id {
            id_type: IdType::KEY_ID,
            data: bytes,
        }
    }

    pub fn id_type(&self) -> IdType {
        self.id_type
    }

    /// The identification's bytes as sent.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    pub fn as_ipv4(&self) -> Option<Ipv4Addr> {
        (self.id_type == IdType::IPV4_ADDR)
            .then(|| <[u8; 4]>::try_from(self.data.as_slice()).ok())
            .flatten()
            .map(Ipv4Addr::from)
    }

    pub fn as_ipv6(&self) -> Option<Ipv6Addr> {
        (self.id_type == IdType::IPV6_ADDR)
            .then(|| <[u8; 16]>::try_from(self.data.as_slice()).ok())
            .flatten()
            .map(Ipv6Addr::from)
    }

    /// The name of an FQDN identification, if it is ASCII.
    pub fn as_fqdn(&self) -> Option<&str> {
        self.text(IdType::FQDN)
    }

    /// The address of an RFC 822 identification, if it is UTF-8.
    pub fn as_rfc822(&self) -> Option<&str> {
        self.text(IdType::RFC822_ADDR)
    }

    pub fn as_der_dn(&self) -> Option<&[u8]> {
        (self.id_type == IdType::DER_ASN1_DN).then_some(self.data.as_slice())
    }

    pub fn as_key_id(&self) -> Option<&[u8]> {
        (self.id_type == IdType::KEY_ID).then_some(self.data.as_slice())
    }

    fn text(&self, t: IdType) -> Option<&str> {
        if self.id_type != t {
            return None;
        }
        let s = core::str::from_utf8(&self.data).ok()?;
        (t != IdType::FQDN || s.is_ascii()).then_some(s)
    }

    pub fn parse(body: &[u8]) -> Result<Id, Error> {
        let mut r = Reader::new(body, "identification");
        let id_type = IdType(r.u8()?);
        let _reserved = r.take(3)?;
        Id::new(id_type, r.rest().to_vec())
    }

    pub fn buffer_len(&self) -> usize {
        4 + self.data.len()
    }

    /// Writes the payload's body: type, three reserved bytes, the data (RFC 7296 2.15's RestOfIDPayload).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let mut w = Writer::new(buf);
        w.u8(self.id_type.0)?;
        w.zeros(3)?;
        w.bytes(&self.data)?;
        Ok(w.written())
    }
}

/// Certificate encodings (RFC 7296 3.6; RFC 7670 for raw public keys).
pub mod cert_encoding {
    pub const PKCS7_X509: u8 = 1;
    pub const X509_SIGNATURE: u8 = 4;
    pub const CRL: u8 = 7;
    pub const HASH_URL_X509: u8 = 12;
    pub const HASH_URL_BUNDLE: u8 = 13;
    pub const RAW_PUBLIC_KEY: u8 = 15;
}

/// A Certificate payload (RFC 7296 3.6); the data is parsed where certificates are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cert {
    /// See [`cert_encoding`].
    pub encoding: u8,
    pub data: Vec<u8>,
}

/// A Certificate Request payload (RFC 7296 3.7): for X.509, concatenated SHA-1 hashes of CA public keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertReq {
    /// See [`cert_encoding`].
    pub encoding: u8,
    pub data: Vec<u8>,
}

macro_rules! encoding_and_data {
    ($t:ident, $what:literal) => {
        impl $t {
            pub fn parse(body: &[u8]) -> Result<$t, Error> {
                let mut r = Reader::new(body, $what);
                let encoding = r.u8()?;
                Ok($t {
                    encoding,
                    data: r.rest().to_vec(),
                })
            }

            pub fn buffer_len(&self) -> usize {
                1 + self.data.len()
            }

            pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
                let mut w = Writer::new(buf);
                w.u8(self.encoding)?;
                w.bytes(&self.data)?;
                Ok(w.written())
            }
        }
    };
}

encoding_and_data!(Cert, "certificate");
encoding_and_data!(CertReq, "certificate request");

/// Authentication methods (RFC 7296 3.8; RFC 4754 for ECDSA; RFC 7427 for digital signatures).
pub mod auth_method {
    pub const RSA_SIG: u8 = 1;
    pub const SHARED_KEY_MIC: u8 = 2;
    pub const DSS_SIG: u8 = 3;
    pub const ECDSA_SHA256_P256: u8 = 9;
    pub const ECDSA_SHA384_P384: u8 = 10;
    pub const ECDSA_SHA512_P521: u8 = 11;
    /// RFC 7619.
    pub const NULL: u8 = 13;
    pub const DIGITAL_SIGNATURE: u8 = 14;
}

/// An Authentication payload (RFC 7296 3.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Auth {
    /// See [`auth_method`].
    pub method: u8,
    pub data: Vec<u8>,
}

impl Auth {
    pub fn parse(body: &[u8]) -> Result<Auth, Error> {
        let mut r = Reader::new(body, "authentication");
        let method = r.u8()?;
        let _reserved = r.take(3)?;
        Ok(Auth {
            method,
            data: r.rest().to_vec(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        4 + self.data.len()
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let mut w = Writer::new(buf);
        w.u8(self.method)?;
        w.zeros(3)?;
        w.bytes(&self.data)?;
        Ok(w.written())
    }
}

/// Shortest nonce (RFC 7296 3.9).
pub const NONCE_MIN_LEN: usize = 16;
/// Longest nonce (RFC 7296 3.9).
pub const NONCE_MAX_LEN: usize = 256;

/// A Nonce payload (RFC 7296 3.9): 16 to 256 bytes, checked on parse and construction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nonce(Vec<u8>);

impl Nonce {
    pub fn new(bytes: Vec<u8>) -> Result<Nonce, Error> {
        if !(NONCE_MIN_LEN..=NONCE_MAX_LEN).contains(&bytes.len()) {
            return Err(Error::BadLength { what: "nonce" });
        }
        Ok(Nonce(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn parse(body: &[u8]) -> Result<Nonce, Error> {
        Nonce::new(body.to_vec())
    }

    pub fn buffer_len(&self) -> usize {
        self.0.len()
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let mut w = Writer::new(buf);
        w.bytes(&self.0)?;
        Ok(w.written())
    }
}

/// A Vendor ID payload (RFC 7296 3.12): opaque bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VendorId(pub Vec<u8>);

/// An EAP payload (RFC 7296 3.16): the EAP message, opaque to the codec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eap(pub Vec<u8>);

macro_rules! opaque {
    ($t:ident) => {
        impl $t {
            pub fn parse(body: &[u8]) -> Result<$t, Error> {
                Ok($t(body.to_vec()))
            }

            pub fn buffer_len(&self) -> usize {
                self.0.len()
            }

            pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
                let mut w = Writer::new(buf);
                w.bytes(&self.0)?;
                Ok(w.written())
            }
        }
    };
}

opaque!(VendorId);
opaque!(Eap);

/// Configuration payload types (RFC 7296 3.15).
pub mod cfg_type {
    pub const REQUEST: u8 = 1;
    pub const REPLY: u8 = 2;
    pub const SET: u8 = 3;
    pub const ACK: u8 = 4;
}

/// Configuration attribute types (RFC 7296 3.15.1).
pub mod cfg_attribute {
    pub const INTERNAL_IP4_ADDRESS: u16 = 1;
    pub const INTERNAL_IP4_NETMASK: u16 = 2;
    pub const INTERNAL_IP4_DNS: u16 = 3;
    pub const INTERNAL_IP4_NBNS: u16 = 4;
    pub const INTERNAL_IP4_DHCP: u16 = 6;
    pub const APPLICATION_VERSION: u16 = 7;
    pub const INTERNAL_IP6_ADDRESS: u16 = 8;
    pub const INTERNAL_IP6_DNS: u16 = 10;
    pub const INTERNAL_IP6_DHCP: u16 = 12;
    pub const INTERNAL_IP4_SUBNET: u16 = 13;
    pub const SUPPORTED_ATTRIBUTES: u16 = 14;
    pub const INTERNAL_IP6_SUBNET: u16 = 15;
}

/// A configuration attribute (RFC 7296 3.15.1): a 15-bit type and a value (empty in a request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpAttribute {
    pub attribute_type: u16,
    pub value: Vec<u8>,
}

/// A Configuration payload (RFC 7296 3.15), at most [`MAX_CP_ATTRIBUTES`] attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cp {
    /// See [`cfg_type`].
    pub cfg_type: u8,
    pub attributes: Vec<CpAttribute>,
}

impl Cp {
    pub fn parse(body: &[u8]) -> Result<Cp, Error> {
        let mut r = Reader::new(body, "configuration");
        let cfg_type = r.u8()?;
        let _reserved = r.take(3)?;
        let mut attributes = Vec::new();
        while !r.is_empty() {
            if attributes.len() == MAX_CP_ATTRIBUTES {
                return Err(Error::TooMany {
                    what: "configuration attributes",
                    cap: MAX_CP_ATTRIBUTES,
                });
            }
            // The top bit is reserved (ignored on receipt).
            let attribute_type = r.u16()? & 0x7fff;
            let n = usize::from(r.u16()?);
            attributes.push(CpAttribute {
                attribute_type,
                value: r.take(n)?.to_vec(),
            });
        }
        Ok(Cp {
            cfg_type,
            attributes,
        })
    }

    pub fn buffer_len(&self) -> usize {
        4 + self
            .attributes
            .iter()
            .map(|a| 4 + a.value.len())
            .sum::<usize>()
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        if self.attributes.len() > MAX_CP_ATTRIBUTES {
            return Err(Error::TooMany {
                what: "configuration attributes",
                cap: MAX_CP_ATTRIBUTES,
            });
        }
        let mut w = Writer::new(buf);
        w.u8(self.cfg_type)?;
        w.zeros(3)?;
        for a in &self.attributes {
            if a.attribute_type & 0x8000 != 0 {
                return Err(Error::BadValue {
                    what: "configuration attribute type over 15 bits",
                });
            }
            w.u16(a.attribute_type)?;
            w.u16(len16(a.value.len(), "configuration attribute")?)?;
            w.bytes(&a.value)?;
        }
        Ok(w.written())
    }
}

/// The Encrypted payload (SK, RFC 7296 3.14), opaque: the type of the first payload inside (the generic header's
/// next payload field) and the bytes after the generic header (IV, ciphertext, ICV).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encrypted {
    pub first_inner: u8,
    pub data: Vec<u8>,
}

/// The Encrypted Fragment payload (SKF, RFC 7383 2.5): fragment number and total (1 <= number <= total, checked
/// on parse and construction), the first inner payload's type (non-zero only in fragment 1) and the encrypted
/// bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncryptedFragment {
    number: u16,
    total: u16,
    first_inner: u8,
    data: Vec<u8>,
}

impl EncryptedFragment {
    pub fn new(number: u16, total: u16, first_inner: u8, data: Vec<u8>) -> Result<Self, Error> {
        if number == 0 || total == 0 || number > total {
            return Err(Error::BadValue {
                what: "fragment number (0, or above the total)",
            });
        }
        Ok(EncryptedFragment {
            number,
            total,
            first_inner,
            data,
        })
    }

    pub fn number(&self) -> u16 {
        self.number
    }

    pub fn total(&self) -> u16 {
        self.total
    }

    pub fn first_inner(&self) -> u8 {
        self.first_inner
    }

    /// IV, ciphertext and ICV.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The body after the generic header; `first_inner` comes from that header.
    pub fn parse(first_inner: u8, body: &[u8]) -> Result<Self, Error> {
        let mut r = Reader::new(body, "encrypted fragment");
        let number = r.u16()?;
        let total = r.u16()?;
        EncryptedFragment::new(number, total, first_inner, r.rest().to_vec())
    }

    pub fn buffer_len(&self) -> usize {
        4 + self.data.len()
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let mut w = Writer::new(buf);
        w.u16(self.number)?;
        w.u16(self.total)?;
        w.bytes(&self.data)?;
        Ok(w.written())
    }
}
