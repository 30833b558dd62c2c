//! The Security Association payload (RFC 7296 3.3): proposals of transforms with attributes. Transform types and
//! ids are numbers with named constants: the codec never rejects one it does not know (RFC 9370's additional key
//! exchanges, future algorithms); choosing among them is the proposal module's business.

use super::buf::{len16, Reader, Writer};
use super::error::{Error, MAX_PROPOSALS, MAX_TRANSFORMS, MAX_TRANSFORM_ATTRIBUTES};

/// "Last Substruc" of a proposal that is the last one (and of a transform that is the last one).
pub const LAST: u8 = 0;
/// "Last Substruc" of a proposal followed by another.
pub const MORE_PROPOSALS: u8 = 2;
/// "Last Substruc" of a transform followed by another.
pub const MORE_TRANSFORMS: u8 = 3;

const PROPOSAL_HEADER_LEN: usize = 8;
const TRANSFORM_HEADER_LEN: usize = 8;

/// Transform types (RFC 7296 3.3.2, RFC 9370 for the additional key exchanges).
pub mod transform_type {
    /// Encryption algorithm (ENCR).
    pub const ENCR: u8 = 1;
    /// Pseudorandom function (PRF).
    pub const PRF: u8 = 2;
    /// Integrity algorithm (INTEG).
    pub const INTEG: u8 = 3;
    /// Key exchange method (KE; "D-H" in RFC 7296).
    pub const KE: u8 = 4;
    /// Extended sequence numbers (ESN).
    pub const ESN: u8 = 5;
    /// Additional key exchanges 1 to 7 (RFC 9370); their ids are key exchange method ids.
    pub const ADDKE1: u8 = 6;
    pub const ADDKE2: u8 = 7;
    pub const ADDKE3: u8 = 8;
    pub const ADDKE4: u8 = 9;
    pub const ADDKE5: u8 = 10;
    pub const ADDKE6: u8 = 11;
    pub const ADDKE7: u8 = 12;
}

/// Transform ids of type ENCR (IANA "Transform Type 1").
pub mod encr {
    pub const DES3: u16 = 3;
    pub const NULL: u16 = 11;
    pub const AES_CBC: u16 = 12;
    pub const AES_CTR: u16 = 13;
    pub const AES_GCM_8: u16 = 18;
    pub const AES_GCM_12: u16 = 19;
    pub const AES_GCM_16: u16 = 20;
    pub const CHACHA20_POLY1305: u16 = 28;
}

/// Transform ids of type PRF (IANA "Transform Type 2").
pub mod prf {
    pub const HMAC_MD5: u16 = 1;
    pub const HMAC_SHA1: u16 = 2;
    pub const HMAC_SHA2_256: u16 = 5;
    pub const HMAC_SHA2_384: u16 = 6;
    pub const HMAC_SHA2_512: u16 = 7;
}

/// Transform ids of type INTEG (IANA "Transform Type 3").
pub mod integ {
    pub const NONE: u16 = 0;
    pub const HMAC_SHA1_96: u16 = 2;
    pub const HMAC_SHA2_256_128: u16 = 12;
    pub const HMAC_SHA2_384_192: u16 = 13;
    pub const HMAC_SHA2_512_256: u16 = 14;
}

/// Key exchange method ids (IANA "Transform Type 4"), for KE and ADDKE transforms and the KE payload.
pub mod ke {
    pub const NONE: u16 = 0;
    pub const MODP_2048: u16 = 14;
    pub const MODP_3072: u16 = 15;
    pub const ECP_256: u16 = 19;
    pub const ECP_384: u16 = 20;
    pub const ECP_521: u16 = 21;
    pub const CURVE25519: u16 = 31;
    pub const CURVE448: u16 = 32;
    /// draft-ietf-ipsecme-ikev2-mlkem (IANA registered).
    pub const ML_KEM_512: u16 = 35;
    pub const ML_KEM_768: u16 = 36;
    pub const ML_KEM_1024: u16 = 37;
}

/// Transform ids of type ESN.
pub mod esn {
    pub const NO: u16 = 0;
    pub const YES: u16 = 1;
}

/// Transform attribute types (RFC 7296 3.3.5).
pub mod attribute_type {
    /// Key length in bits (TV format).
    pub const KEY_LENGTH: u16 = 14;
}

/// Security protocol ids (RFC 7296 3.3.1), used by proposals, notifies and deletes.
pub mod protocol_id {
    /// "Not applicable" in a Notify that concerns no SA.
    pub const NONE: u8 = 0;
    pub const IKE: u8 = 1;
    pub const AH: u8 = 2;
    pub const ESP: u8 = 3;
}

/// A transform attribute's value: 16 bits in the Type/Value form (AF = 1) or bytes in the Type/Length/Value form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttributeValue {
    Tv(u16),
    Tlv(Vec<u8>),
}

/// A transform attribute (RFC 7296 3.3.5). `attribute_type` has 15 bits (the top bit is the format).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    pub attribute_type: u16,
    pub value: AttributeValue,
}

impl Attribute {
    fn buffer_len(&self) -> usize {
        match &self.value {
            AttributeValue::Tv(_) => 4,
            AttributeValue::Tlv(v) => 4 + v.len(),
        }
    }

    fn emit(&self, w: &mut Writer<'_>) -> Result<(), Error> {
        if self.attribute_type & 0x8000 != 0 {
            return Err(Error::BadValue {
                what: "attribute type over 15 bits",
            });
        }
        match &self.value {
            AttributeValue::Tv(v) => {
                w.u16(0x8000 | self.attribute_type)?;
                w.u16(*v)
            }
            AttributeValue::Tlv(v) => {
                w.u16(self.attribute_type)?;
                w.u16(len16(v.len(), "attribute")?)?;
                w.bytes(v)
            }
        }
    }
}

/// A transform (RFC 7296 3.3.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transform {
    /// See [`transform_type`].
    pub transform_type: u8,
    pub transform_id: u16,
    pub attributes: Vec<Attribute>,
}

impl Transform {
    pub fn new(transform_type: u8, transform_id: u16) -> Transform {
        Transform {
            transform_type,
            transform_id,
            attributes: Vec::new(),
        }
    }

    /// This transform with a Key Length attribute of `bits`.
    pub fn with_key_length(mut self, bits: u16) -> Transform {
        self.attributes.push(Attribute {
            attribute_type: attribute_type::KEY_LENGTH,
            value: AttributeValue::Tv(bits),
        });
        self
    }

    /// The Key Length attribute, if there is one in TV form.
    pub fn key_length(&self) -> Option<u16> {
        self.attributes.iter().find_map(|a| match a.value {
            AttributeValue::Tv(v) if a.attribute_type == attribute_type::KEY_LENGTH => Some(v),
            _ => None,
        })
    }

    fn buffer_len(&self) -> usize {
        TRANSFORM_HEADER_LEN
            + self
                .attributes
                .iter()
                .map(Attribute::buffer_len)
                .sum::<usize>()
    }

    fn parse(r: &mut Reader<'_>) -> Result<(u8, Transform), Error> {
        let last = r.u8()?;
        let _reserved = r.u8()?;
        let len = usize::from(r.u16()?);
        if len < TRANSFORM_HEADER_LEN {
            return Err(Error::BadLength { what: "transform" });
        }
        let transform_type = r.u8()?;
        let _reserved = r.u8()?;
        let transform_id = r.u16()?;
        let mut a = Reader::new(r.take(len - TRANSFORM_HEADER_LEN)?, "transform attribute");
        let mut attributes = Vec::new();
        while !a.is_empty() {
            if attributes.len() == MAX_TRANSFORM_ATTRIBUTES {
                return Err(Error::TooMany {
                    what: "transform attributes",
                    cap: MAX_TRANSFORM_ATTRIBUTES,
                });
            }
            let t = a.u16()?;
            let value = if t & 0x8000 != 0 {
                AttributeValue::Tv(a.u16()?)
            } else {
                let n = usize::from(a.u16()?);
                AttributeValue::Tlv(a.take(n)?.to_vec())
            };
            attributes.push(Attribute {
                attribute_type: t & 0x7fff,
                value,
            });
        }
        Ok((
            last,
            Transform {
                transform_type,
                transform_id,
                attributes,
            },
        ))
    }

    fn emit(&self, w: &mut Writer<'_>, last: bool) -> Result<(), Error> {
        if self.attributes.len() > MAX_TRANSFORM_ATTRIBUTES {
            return Err(Error::TooMany {
                what: "transform attributes",
                cap: MAX_TRANSFORM_ATTRIBUTES,
            });
        }
        w.u8(if last { LAST } else { MORE_TRANSFORMS })?;
        w.u8(0)?;
        w.u16(len16(self.buffer_len(), "transform")?)?;
        w.u8(self.transform_type)?;
        w.u8(0)?;
        w.u16(self.transform_id)?;
        for a in &self.attributes {
            a.emit(w)?;
        }
        Ok(())
    }
}

/// A proposal (RFC 7296 3.3.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// 1 for the first proposal of an offer, one more for each next one; a reply's single proposal carries the
    /// number of the one it accepted.
    pub number: u8,
    /// See [`protocol_id`].
    pub protocol_id: u8,
    /// Empty in IKE_SA_INIT; 8 bytes for an IKE SA rekey; 4 for ESP and AH.
    pub spi: Vec<u8>,
    pub transforms: Vec<Transform>,
}

impl Proposal {
    fn buffer_len(&self) -> usize {
        PROPOSAL_HEADER_LEN
            + self.spi.len()
            + self
                .transforms
                .iter()
                .map(Transform::buffer_len)
                .sum::<usize>()
    }

    fn parse(r: &mut Reader<'_>) -> Result<(u8, Proposal), Error> {
        let last = r.u8()?;
        let _reserved = r.u8()?;
        let len = usize::from(r.u16()?);
        if len < PROPOSAL_HEADER_LEN {
            return Err(Error::BadLength { what: "proposal" });
        }
        // The rest of the header (number, protocol, SPI size, transform count) is inside the length.
        let mut p = Reader::new(r.take(len - 4)?, "proposal");
        let number = p.u8()?;
        let protocol_id = p.u8()?;
        let spi_size = usize::from(p.u8()?);
        let num_transforms = usize::from(p.u8()?);
        if num_transforms > MAX_TRANSFORMS {
            return Err(Error::TooMany {
                what: "transforms",
                cap: MAX_TRANSFORMS,
            });
        }
        let spi = p.take(spi_size)?.to_vec();
        let mut transforms = Vec::new();
        for i in 0..num_transforms {
            let (tlast, t) = Transform::parse(&mut p)?;
            let want = if i + 1 == num_transforms {
                LAST
            } else {
                MORE_TRANSFORMS
            };
            if tlast != want {
                return Err(Error::BadValue {
                    what: "transform's last substructure",
                });
            }
            transforms.push(t);
        }
        if !p.is_empty() {
            return Err(Error::BadLength {
                what: "proposal (transforms do not fill it)",
            });
        }
        Ok((
            last,
            Proposal {
                number,
                protocol_id,
                spi,
                transforms,
            },
        ))
    }

    fn emit(&self, w: &mut Writer<'_>, last: bool) -> Result<(), Error> {
        if self.transforms.len() > MAX_TRANSFORMS {
            return Err(Error::TooMany {
                what: "transforms",
                cap: MAX_TRANSFORMS,
            });
        }
        w.u8(if last { LAST } else { MORE_PROPOSALS })?;
        w.u8(0)?;
        w.u16(len16(self.buffer_len(), "proposal")?)?;
        w.u8(self.number)?;
        w.u8(self.protocol_id)?;
        w.u8(u8::try_from(self.spi.len()).map_err(|_| Error::TooLong { what: "SPI" })?)?;
        // At most MAX_TRANSFORMS (under 256), checked above.
        w.u8(self.transforms.len() as u8)?;
        w.bytes(&self.spi)?;
        for (i, t) in self.transforms.iter().enumerate() {
            t.emit(w, i + 1 == self.transforms.len())?;
        }
        Ok(())
    }
}

/// The SA payload: one or more proposals (at most [`MAX_PROPOSALS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sa {
    pub proposals: Vec<Proposal>,
}

impl Sa {
    /// Proposal numbers: never 0; with several proposals, 1, 2, 3, ... (RFC 7296 3.3.1). A single proposal may
    /// carry any other number: a reply names the proposal it accepted.
    fn check_numbers(&self) -> Result<(), Error> {
        if self.proposals.is_empty() {
            return Err(Error::BadValue {
                what: "SA without proposals",
            });
        }
        if self.proposals.len() > MAX_PROPOSALS {
            return Err(Error::TooMany {
                what: "proposals",
                cap: MAX_PROPOSALS,
            });
        }
        let several = self.proposals.len() > 1;
        for (i, p) in self.proposals.iter().enumerate() {
            if p.number == 0 || (several && usize::from(p.number) != i + 1) {
                return Err(Error::BadValue {
                    what: "proposal number",
                });
            }
        }
        Ok(())
    }

    pub fn parse(body: &[u8]) -> Result<Sa, Error> {
        let mut r = Reader::new(body, "proposal header");
        let mut proposals = Vec::new();
        loop {
            if proposals.len() == MAX_PROPOSALS {
                return Err(Error::TooMany {
                    what: "proposals",
                    cap: MAX_PROPOSALS,
                });
            }
            let (last, p) = Proposal::parse(&mut r)?;
            proposals.push(p);
            match last {
                LAST if r.is_empty() => break,
                LAST => {
                    return Err(Error::BadLength {
                        what: "SA (bytes after the last proposal)",
                    })
                }
                MORE_PROPOSALS if !r.is_empty() => {}
                MORE_PROPOSALS => return Err(Error::Truncated { what: "SA" }),
                _ => {
                    return Err(Error::BadValue {
                        what: "proposal's last substructure",
                    })
                }
            }
        }
        let sa = Sa { proposals };
        sa.check_numbers()?;
        Ok(sa)
    }

    pub fn buffer_len(&self) -> usize {
        self.proposals.iter().map(Proposal::buffer_len).sum()
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        self.check_numbers()?;
        let mut w = Writer::new(buf);
        for (i, p) in self.proposals.iter().enumerate() {
            p.emit(&mut w, i + 1 == self.proposals.len())?;
        }
        Ok(w.written())
    }
}
