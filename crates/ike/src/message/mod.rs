//! The IKEv2 message codec (RFC 7296 3, with RFC 7383 fragments, RFC 9242 IKE_INTERMEDIATE and RFC 9370
//! additional key exchanges).
//!
//! - [`header`]: the IKE header as a view ([`header::Packet`]) and as a representation ([`Header`]).
//! - [`chain`]: the generic payload header as a view ([`chain::Packet`]) and [`Chain`], an iterator over a payload
//!   chain that checks every length.
//! - [`Payload`] and its bodies ([`sa`], [`ts`], [`notify`], [`payloads`]), each with `parse`/`emit`/`buffer_len`.
//! - [`Message`]: a header and its payloads in order; [`parse_chain`] and [`emit_chain`] do the same for the
//!   payloads inside an opened SK payload.
//!
//! What the codec checks: every length against its container (nothing is allocated from a length that was not
//! checked against the bytes there), the header's length against the datagram, the version (2), the encrypted
//! payload being last, SA substructure markers and proposal numbers, nonce lengths, traffic selector ranges and
//! fragment numbers; and it caps the number of payloads ([`MAX_PAYLOADS`]), proposals ([`MAX_PROPOSALS`]),
//! transforms ([`MAX_TRANSFORMS`]), transform attributes ([`MAX_TRANSFORM_ATTRIBUTES`]), traffic selectors
//! ([`MAX_TRAFFIC_SELECTORS`]) and configuration attributes ([`MAX_CP_ATTRIBUTES`]). What it leaves to the state
//! machine: which payloads an exchange needs, duplicates, unknown transform and notify types, and what an unknown
//! payload without the critical bit means (it is kept as [`Payload::Unknown`], so that bytes round-trip, and is
//! meant to be skipped). Reserved fields are ignored on parse and written as zero, and the critical bit of a known
//! payload type is ignored (RFC 7296 2.5, 3.2).

// layers: header, notify, payloads, sa, ts > chain > buf > error, payload_type
mod buf;
pub mod chain;
mod error;
pub mod header;
pub mod notify;
pub mod payload_type;
pub mod payloads;
pub mod sa;
pub mod ts;

#[cfg(test)]
mod tests;

pub use chain::{Chain, RawPayload};
pub use error::{
    Error, MAX_CP_ATTRIBUTES, MAX_PAYLOADS, MAX_PROPOSALS, MAX_TRAFFIC_SELECTORS, MAX_TRANSFORMS,
    MAX_TRANSFORM_ATTRIBUTES,
};
pub use header::{ExchangeType, Flags, Header, HEADER_LEN};
pub use notify::{Delete, Notify, NotifyType};
pub use payloads::{
    Auth, Cert, CertReq, Cp, CpAttribute, Eap, Encrypted, EncryptedFragment, Id, IdType, Ke, Nonce,
    VendorId,
};
pub use sa::{Attribute, AttributeValue, Proposal, Sa, Transform};
pub use ts::{AddrRange, TrafficSelector, Ts};

use buf::{len16, Writer};

/// An unknown payload without the critical bit (RFC 7296 2.5: skipped by the receiver), kept so that a message
/// round-trips. Its type is never one the codec knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown {
    payload_type: u8,
    body: Vec<u8>,
}

impl Unknown {
    /// `None` for a type the codec knows or for 0.
    pub fn new(payload_type: u8, body: Vec<u8>) -> Option<Unknown> {
        (payload_type != payload_type::NONE && !payload_type::is_known(payload_type))
            .then_some(Unknown { payload_type, body })
    }

    pub fn payload_type(&self) -> u8 {
        self.payload_type
    }

    pub fn body(&self) -> &[u8] {
        &self.body
    }
}

/// A payload, typed by its payload type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    Sa(Sa),
    Ke(Ke),
    IdI(Id),
    IdR(Id),
    Cert(Cert),
    CertReq(CertReq),
    Auth(Auth),
    Nonce(Nonce),
    Notify(Notify),
    Delete(Delete),
    VendorId(VendorId),
    TsI(Ts),
    TsR(Ts),
    Sk(Encrypted),
    Cp(Cp),
    Eap(Eap),
    Skf(EncryptedFragment),
    Unknown(Unknown),
}

impl Payload {
    pub fn payload_type(&self) -> u8 {
        use payload_type as t;
        match self {
            Payload::Sa(_) => t::SA,
            Payload::Ke(_) => t::KE,
            Payload::IdI(_) => t::IDI,
            Payload::IdR(_) => t::IDR,
            Payload::Cert(_) => t::CERT,
            Payload::CertReq(_) => t::CERTREQ,
            Payload::Auth(_) => t::AUTH,
            Payload::Nonce(_) => t::NONCE,
            Payload::Notify(_) => t::NOTIFY,
            Payload::Delete(_) => t::DELETE,
            Payload::VendorId(_) => t::VENDOR_ID,
            Payload::TsI(_) => t::TSI,
            Payload::TsR(_) => t::TSR,
            Payload::Sk(_) => t::SK,
            Payload::Cp(_) => t::CP,
            Payload::Eap(_) => t::EAP,
            Payload::Skf(_) => t::SKF,
            Payload::Unknown(u) => u.payload_type,
        }
    }

    /// The payload framed by `raw` (whose unknown critical types the chain already refused).
    pub fn parse(raw: &RawPayload<'_>) -> Result<Payload, Error> {
        use payload_type as t;
        let b = raw.body;
        Ok(match raw.payload_type {
            t::SA => Payload::Sa(Sa::parse(b)?),
            t::KE => Payload::Ke(Ke::parse(b)?),
            t::IDI => Payload::IdI(Id::parse(b)?),
            t::IDR => Payload::IdR(Id::parse(b)?),
            t::CERT => Payload::Cert(Cert::parse(b)?),
            t::CERTREQ => Payload::CertReq(CertReq::parse(b)?),
            t::AUTH => Payload::Auth(Auth::parse(b)?),
            t::NONCE => Payload::Nonce(Nonce::parse(b)?),
            t::NOTIFY => Payload::Notify(Notify::parse(b)?),
            t::DELETE => Payload::Delete(Delete::parse(b)?),
            t::VENDOR_ID => Payload::VendorId(VendorId::parse(b)?),
            t::TSI => Payload::TsI(Ts::parse(b)?),
            t::TSR => Payload::TsR(Ts::parse(b)?),
            t::SK => Payload::Sk(Encrypted {
                first_inner: raw.next_payload,
                data: b.to_vec(),
            }),
            t::CP => Payload::Cp(Cp::parse(b)?),
            t::EAP => Payload::Eap(Eap::parse(b)?),
            t::SKF => Payload::Skf(EncryptedFragment::parse(raw.next_payload, b)?),
            other => match Unknown::new(other, b.to_vec()) {
                Some(u) if !raw.critical => Payload::Unknown(u),
                _ => {
                    return Err(Error::UnsupportedCriticalPayload {
                        payload_type: other,
                    })
                }
            },
        })
    }

    /// The body's length (without the generic header).
    pub fn body_len(&self) -> usize {
        match self {
            Payload::Sa(p) => p.buffer_len(),
            Payload::Ke(p) => p.buffer_len(),
            Payload::IdI(p) | Payload::IdR(p) => p.buffer_len(),
            Payload::Cert(p) => p.buffer_len(),
            Payload::CertReq(p) => p.buffer_len(),
            Payload::Auth(p) => p.buffer_len(),
            Payload::Nonce(p) => p.buffer_len(),
            Payload::Notify(p) => p.buffer_len(),
            Payload::Delete(p) => p.buffer_len(),
            Payload::VendorId(p) => p.buffer_len(),
            Payload::TsI(p) | Payload::TsR(p) => p.buffer_len(),
            Payload::Sk(p) => p.data.len(),
            Payload::Cp(p) => p.buffer_len(),
            Payload::Eap(p) => p.buffer_len(),
            Payload::Skf(p) => p.buffer_len(),
            Payload::Unknown(u) => u.body.len(),
        }
    }

    /// Writes the body (without the generic header) to the front of `buf`; returns its length.
    pub fn emit_body(&self, buf: &mut [u8]) -> Result<usize, Error> {
        match self {
            Payload::Sa(p) => p.emit(buf),
            Payload::Ke(p) => p.emit(buf),
            Payload::IdI(p) | Payload::IdR(p) => p.emit(buf),
            Payload::Cert(p) => p.emit(buf),
            Payload::CertReq(p) => p.emit(buf),
            Payload::Auth(p) => p.emit(buf),
            Payload::Nonce(p) => p.emit(buf),
            Payload::Notify(p) => p.emit(buf),
            Payload::Delete(p) => p.emit(buf),
            Payload::VendorId(p) => p.emit(buf),
            Payload::TsI(p) | Payload::TsR(p) => p.emit(buf),
            Payload::Sk(p) => {
                let mut w = Writer::new(buf);
                w.bytes(&p.data)?;
                Ok(w.written())
            }
            Payload::Cp(p) => p.emit(buf),
            Payload::Eap(p) => p.emit(buf),
            Payload::Skf(p) => p.emit(buf),
            Payload::Unknown(u) => {
                let mut w = Writer::new(buf);
                w.bytes(&u.body)?;
                Ok(w.written())
            }
        }
    }

    /// The generic header's next payload field when `next` follows (SK and SKF name their first inner payload).
    fn next_field(&self, next: u8) -> u8 {
        match self {
            Payload::Sk(p) => p.first_inner,
            Payload::Skf(p) => p.first_inner(),
            _ => next,
        }
    }
}

/// The payloads of the chain in `bytes` whose first payload has type `first`: the clear chain of a message, or
/// the chain inside an opened SK payload. See [`Chain`] for what is checked.
pub fn parse_chain(first: u8, bytes: &[u8]) -> Result<Vec<Payload>, Error> {
    let mut out = Vec::new();
    for raw in Chain::new(first, bytes) {
        out.push(Payload::parse(&raw?)?);
    }
    Ok(out)
}

/// The bytes [`emit_chain`] writes for `payloads`.
pub fn chain_len(payloads: &[Payload]) -> usize {
    payloads
        .iter()
        .map(|p| chain::GENERIC_HEADER_LEN + p.body_len())
        .sum()
}

/// The type of the first of `payloads` (0 if there is none): the IKE header's (or an SK payload's) next payload.
pub fn first_type(payloads: &[Payload]) -> u8 {
    payloads
        .first()
        .map_or(payload_type::NONE, Payload::payload_type)
}

/// Writes `payloads` as a chain (generic headers linked by their next payload fields) to the front of `buf`;
/// returns the length written. An SK or SKF payload must be the last one.
pub fn emit_chain(payloads: &[Payload], buf: &mut [u8]) -> Result<usize, Error> {
    if payloads.len() > MAX_PAYLOADS {
        return Err(Error::TooMany {
            what: "payloads",
            cap: MAX_PAYLOADS,
        });
    }
    let mut w = Writer::new(buf);
    for (i, p) in payloads.iter().enumerate() {
        let next = payloads
            .get(i + 1)
            .map_or(payload_type::NONE, Payload::payload_type);
        if matches!(p, Payload::Sk(_) | Payload::Skf(_)) && i + 1 != payloads.len() {
            return Err(Error::PayloadAfterEncrypted);
        }
        let len = len16(chain::GENERIC_HEADER_LEN + p.body_len(), "payload")?;
        w.u8(p.next_field(next))?;
        w.u8(0)?;
        w.u16(len)?;
        let n = p.emit_body(w.tail())?;
        if n != p.body_len() {
            // A body's emit and buffer_len disagree: a codec bug, reported rather than written.
            return Err(Error::BadLength {
                what: "payload (emit and buffer_len disagree)",
            });
        }
        w.advance(n)?;
    }
    Ok(w.written())
}

/// An IKE message: its header and its payloads in order. For a protected message the payloads end with an SK (or
/// SKF) payload whose contents [`crate::sk`] opens and [`parse_chain`] parses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub header: Header,
    pub payloads: Vec<Payload>,
}

impl Message {
    /// Parses one datagram's IKE message (after a non-ESP marker, if any, was removed). The header's length must
    /// be the datagram's.
    pub fn parse(datagram: &[u8]) -> Result<Message, Error> {
        let p = header::Packet::new_checked(datagram)?;
        let header = Header::parse(&p)?;
        let len = p.length();
        if (len as usize) < HEADER_LEN {
            return Err(Error::BadLength {
                what: "IKE message",
            });
        }
        if len as usize != datagram.len() {
            return Err(Error::LengthMismatch {
                header: len,
                datagram: datagram.len(),
            });
        }
        let payloads = parse_chain(p.next_payload(), p.payload())?;
        Ok(Message { header, payloads })
    }

    /// The length of the message [`Message::emit`] writes (and its header states).
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + chain_len(&self.payloads)
    }

    /// Writes the message to the front of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let len = u32::try_from(self.buffer_len()).map_err(|_| Error::TooLong {
            what: "IKE message",
        })?;
        let mut w = Writer::new(buf);
        self.header.emit(&mut w, first_type(&self.payloads), len)?;
        let n = emit_chain(&self.payloads, w.tail())?;
        w.advance(n)?;
        Ok(w.written())
    }

    /// The message as a new vector.
    pub fn to_vec(&self) -> Result<Vec<u8>, Error> {
        let mut v = vec![0u8; self.buffer_len()];
        let n = self.emit(&mut v)?;
        v.truncate(n);
        Ok(v)
    }

    /// The payloads of type `t`, in order.
    pub fn payloads_of(&self, t: u8) -> impl Iterator<Item = &Payload> {
        self.payloads.iter().filter(move |p| p.payload_type() == t)
    }

    /// The notifies, in order.
    pub fn notifies(&self) -> impl Iterator<Item = &Notify> {
        self.payloads.iter().filter_map(|p| match p {
            Payload::Notify(n) => Some(n),
            _ => None,
        })
    }
}
