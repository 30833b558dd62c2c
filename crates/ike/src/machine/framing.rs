//! The framing of an IKE SA's messages: building clear and encrypted ones (SK, or SKF fragments), opening received
//! ones (fragments reassembled within the endpoint's budget), the cached response sealed again; and [`Opened`],
//! an opened message with the lookups the exchanges use.

use netveil_crypto::rand::Rng;

use super::frag::{self, Reassembly, MAX_FRAGMENTS, MAX_REASSEMBLED};
use super::sa::{CachedResponse, IkeSa};
use crate::cert::Certificate;
use crate::event::IkeSaId;
use crate::keys::Role;
use crate::message::{
    self, chain, first_type, payload_type, Chain, Encrypted, EncryptedFragment, ExchangeType,
    Flags, Header, Id, Message, Payload,
};
use crate::sk::{self, SkKey};

impl IkeSa {
    pub(super) fn header(&self, exchange: ExchangeType, response: bool, message_id: u32) -> Header {
        Header {
            initiator_spi: self.spi_i,
            responder_spi: self.spi_r,
            exchange_type: exchange,
            flags: Flags {
                initiator: self.role == Role::Initiator,
                version: false,
                response,
            },
            message_id,
        }
    }

    /// A clear message of this SA (IKE_SA_INIT).
    pub fn clear_message(
        &self,
        exchange: ExchangeType,
        response: bool,
        message_id: u32,
        payloads: Vec<Payload>,
    ) -> Vec<u8> {
        Message {
            header: self.header(exchange, response, message_id),
            payloads,
        }
        .to_vec()
        .unwrap_or_default()
    }

    /// An encrypted message of this SA: `inner` sealed in an SK payload, or in SKF fragments (RFC 7383) when the
    /// message is longer than [`IkeSa::fragment_len`]. Empty if it cannot be built (no keys, too long, the AEAD's
    /// IVs used up).
    pub fn sealed_message(
        &mut self,
        rng: &mut dyn Rng,
        exchange: ExchangeType,
        response: bool,
        message_id: u32,
        inner: &[Payload],
    ) -> Vec<Vec<u8>> {
        let mut plain = vec![0u8; message::chain_len(inner)];
        if message::emit_chain(inner, &mut plain).is_err() {
            return Vec::new();
        }
        let header = self.header(exchange, response, message_id);
        let Some(key) = self
            .keys
            .as_ref()
            .and_then(|k| SkKey::outbound(k, self.role).ok())
        else {
            return Vec::new();
        };
        let mut key = key.resume_at(self.out_iv);
        // IV, ICV and the most padding a block cipher adds.
        let overhead = sk::IKE_HEADER_LEN + 8 + key.iv_len() + key.icv_len() + 16;
        let seal = |key: &mut SkKey, rng: &mut dyn Rng, payload: Payload, kind| {
            let mut bytes = Message {
                header,
                payloads: vec![payload],
            }
            .to_vec()
            .ok()?;
            key.seal(rng, &mut bytes, sk::IKE_HEADER_LEN, kind).ok()?;
            Some(bytes)
        };
        let out = match self.fragment_len.map(|m| m as usize) {
            Some(max) if overhead + plain.len() > max && max > overhead => {
                let chunks: Vec<&[u8]> = plain.chunks(max - overhead).collect();
                let total = chunks.len() as u16;
                let mut out = Vec::new();
                for (i, c) in chunks.iter().enumerate() {
                    let first = if i == 0 { first_type(inner) } else { 0 };
                    let sealed = EncryptedFragment::new(i as u16 + 1, total, first, c.to_vec())
                        .ok()
                        .and_then(|f| seal(&mut key, rng, Payload::Skf(f), sk::Encrypted::Skf));
                    match sealed {
                        Some(b) => out.push(b),
                        None => {
                            out.clear();
                            break;
                        }
                    }
                }
                out
            }
            _ => {
                let p = Payload::Sk(Encrypted {
                    first_inner: first_type(inner),
                    data: plain,
                });
                seal(&mut key, rng, p, sk::Encrypted::Sk)
                    .into_iter()
                    .collect()
            }
        };
        // The IVs used stay used, also those of a message given up halfway.
        self.out_iv = key.next_iv();
        out
    }

    /// Caches our response `datagrams` to the peer's request `message_id` (`exchange`, inner payloads `inner`)
    /// for a retransmitted request. `certs`: our connection's certificates; one SK message carrying some of them
    /// is kept without them (see [`CachedResponse`]) if sealing it again gives the bytes sent.
    pub fn cache_response(
        &mut self,
        message_id: u32,
        exchange: ExchangeType,
        inner: &[Payload],
        datagrams: &[Vec<u8>],
        certs: &[Certificate],
    ) {
        self.last_response = Some(
            self.plain_response(message_id, exchange, inner, datagrams, certs)
                .unwrap_or_else(|| CachedResponse::new(message_id, datagrams)),
        );
    }

    fn plain_response(
        &self,
        message_id: u32,
        exchange: ExchangeType,
        inner: &[Payload],
        datagrams: &[Vec<u8>],
        certs: &[Certificate],
    ) -> Option<CachedResponse> {
        let [sent] = datagrams else { return None };
        if certs.is_empty() || !inner.iter().any(|p| matches!(p, Payload::Cert(_))) {
            return None;
        }
        if sent.get(16) != Some(&payload_type::SK) {
            return None;
        }
        let key = SkKey::outbound(self.keys.as_ref()?, self.role).ok()?;
        let (iv_len, icv_len) = (key.iv_len(), key.icv_len());
        let iv_at = sk::IKE_HEADER_LEN + sk::Encrypted::Sk.header_len();
        let iv = sent.get(iv_at..iv_at + iv_len)?;
        let icv = sent.get(sent.len().checked_sub(icv_len)?..)?;
        // Where each certificate's DER lies in the plaintext, its length, and which of ours it is.
        let mut ders = Vec::new();
        let mut at = 0;
        for p in inner {
            if let Payload::Cert(c) = p {
                let k = certs.iter().position(|x| x.der() == c.data)?;
                ders.push((
                    at + chain::GENERIC_HEADER_LEN + 1,
                    c.data.len(),
                    u8::try_from(k).ok()?,
                ));
            }
            at += chain::GENERIC_HEADER_LEN + p.body_len();
        }
        let mut plain = vec![0u8; message::chain_len(inner)];
        message::emit_chain(inner, &mut plain).ok()?;
        let mut bytes = vec![
            exchange.0,
            first_type(inner),
            u8::try_from(ders.len()).ok()?,
        ];
        let mut cut = 0;
        for &(at, len, k) in &ders {
            bytes.extend_from_slice(&u16::try_from(at - cut).ok()?.to_be_bytes());
            bytes.push(k);
            cut += len;
        }
        bytes.extend_from_slice(iv);
        bytes.extend_from_slice(icv);
        let mut from = 0;
        for &(at, len, _) in &ders {
            bytes.extend_from_slice(plain.get(from..at)?);
            from = at + len;
        }
        bytes.extend_from_slice(plain.get(from..)?);
        let cached = CachedResponse::Plain {
            message_id,
            bytes: bytes.into_boxed_slice(),
        };
        // Kept so only if it gives the datagram back.
        (self.resealed(&cached, certs)? == *sent).then_some(cached)
    }

    /// The datagrams of our last response, to send again (none if there is none, or a `Plain` one does not seal
    /// to what was sent). `certs`: our connection's certificates (as when it was cached).
    pub fn cached_datagrams(&self, certs: &[Certificate]) -> Vec<Vec<u8>> {
        match &self.last_response {
            Some(c @ CachedResponse::Sent { .. }) => c.sent(),
            Some(c @ CachedResponse::Plain { .. }) => self.resealed(c, certs).into_iter().collect(),
            None => Vec::new(),
        }
    }

    /// A `Plain` cached response sealed again.
    fn resealed(&self, cached: &CachedResponse, certs: &[Certificate]) -> Option<Vec<u8>> {
        let CachedResponse::Plain { message_id, bytes } = cached else {
            return None;
        };
        let key = SkKey::outbound(self.keys.as_ref()?, self.role).ok()?;
        let (iv_len, icv_len) = (key.iv_len(), key.icv_len());
        let (&[exchange, first, n], rest) = bytes.split_first_chunk::<3>()?;
        let (holes, rest) = rest.split_at_checked(3 * usize::from(n))?;
        let (iv, rest) = rest.split_at_checked(iv_len)?;
        let (icv, plain) = rest.split_at_checked(icv_len)?;
        let header = self.header(ExchangeType(exchange), true, *message_id);
        let mut msg = Message {
            header,
            payloads: vec![Payload::Sk(Encrypted {
                first_inner: first,
                data: Vec::new(),
            })],
        }
        .to_vec()
        .ok()?;
        let mut from = 0;
        for h in holes.chunks_exact(3) {
            let off = usize::from(u16::from_be_bytes([h[0], h[1]]));
            msg.extend_from_slice(plain.get(from..off)?);
            msg.extend_from_slice(certs.get(usize::from(h[2]))?.der());
            from = off;
        }
        msg.extend_from_slice(plain.get(from..)?);
        key.reseal(iv, icv, &mut msg, sk::IKE_HEADER_LEN, sk::Encrypted::Sk)
            .ok()?;
        Some(msg)
    }

    /// [`IkeSa::open_within`] with a budget of its own (nothing else's to evict): for tests.
    #[cfg(test)]
    pub fn open(&mut self, bytes: &[u8]) -> Option<Opened> {
        let budget = frag::Budget::new(frag::REASSEMBLY_BUDGET);
        self.open_within(bytes, &budget, |_| false)
    }

    /// Opens a protected message: the inner payloads, and the raw bodies of IDi and IDr (for AUTH). `None`: not
    /// an SK or SKF message, malformed, not authentic, or a fragment of a message not yet complete (or dropped).
    /// A fragment's set is held within `budget`, shared with the endpoint's other SAs: to make room, `evict` drops
    /// another SA's set (see [`frag`]).
    pub fn open_within(
        &mut self,
        bytes: &[u8],
        budget: &frag::Budget,
        mut evict: impl FnMut(IkeSaId) -> bool,
    ) -> Option<Opened> {
        let msg = Message::parse(bytes).ok()?;
        let first = msg.payloads.first()?.payload_type();
        // Where the SK (or SKF) payload starts: after the clear payloads before it (normally none).
        let mut at = message::HEADER_LEN;
        let mut found = None;
        for raw in Chain::new(first, bytes.get(message::HEADER_LEN..)?) {
            let raw = raw.ok()?;
            if raw.payload_type == payload_type::SK || raw.payload_type == payload_type::SKF {
                found = Some((raw.payload_type, raw.next_payload));
                break;
            }
            at += chain::GENERIC_HEADER_LEN + raw.body.len();
        }
        let (kind, inner_first) = found?;
        let mut buf = bytes.to_vec();
        let skind = if kind == payload_type::SK {
            sk::Encrypted::Sk
        } else {
            // Fragments only where fragmentation was agreed.
            self.fragment_len?;
            sk::Encrypted::Skf
        };
        let range = self.sk_in()?.open(&mut buf, at, skind).ok()?;
        let h = msg.header;
        if kind == payload_type::SK {
            return Opened::from_plain(h, inner_first, &buf[range]);
        }
        // A fragment (authentic): number and total follow the generic header.
        let number = u16::from_be_bytes([buf[at + 4], buf[at + 5]]);
        let total = u16::from_be_bytes([buf[at + 6], buf[at + 7]]);
        if total > MAX_FRAGMENTS || number == 0 || number > total {
            return None;
        }
        let same = self.reassembly.as_ref().is_some_and(|r| {
            r.message_id == h.message_id
                && r.response == h.flags.response
                && r.exchange == h.exchange_type
                && r.parts.len() == usize::from(total)
        });
        if !same {
            // The set before (another message's) goes first: its share is given back.
            self.reassembly = None;
            let mut share = budget.share(self.id);
            let overhead = frag::set_overhead(total);
            if !budget.make_room(&share, overhead, &mut evict) {
                return None;
            }
            share.add(overhead);
            self.reassembly = Some(Box::new(Reassembly {
                message_id: h.message_id,
                response: h.flags.response,
                exchange: h.exchange_type,
                first_inner: 0,
                parts: vec![None; usize::from(total)],
                bytes: 0,
                share,
            }));
        }
        let r = self.reassembly.as_mut()?;
        let slot = &mut r.parts[usize::from(number - 1)];
        if slot.is_none() {
            let n = range.len();
            if r.bytes + n > MAX_REASSEMBLED || !budget.make_room(&r.share, n, &mut evict) {
                self.reassembly = None;
                return None;
            }
            r.share.add(n);
            r.bytes += n;
            *slot = Some(buf[range].to_vec());
            if number == 1 {
                r.first_inner = inner_first;
            }
        }
        if r.parts.iter().any(Option::is_none) {
            return None;
        }
        let r = self.reassembly.take()?;
        let plain: Vec<u8> = r.parts.into_iter().flatten().flatten().collect();
        Opened::from_plain(h, r.first_inner, &plain)
    }
}

/// An opened protected message.
pub struct Opened {
    pub header: Header,
    pub payloads: Vec<Payload>,
    pub idi_body: Option<Vec<u8>>,
    pub idr_body: Option<Vec<u8>>,
    /// IKE_INTERMEDIATE only (its IntAuth covers them): the first inner payload's type and the plaintext.
    pub plain: Option<(u8, Vec<u8>)>,
}

impl Opened {
    /// The message's one payload of type `t` that `f` picks, or `None` when there is none or more than one.
    pub fn one<'a, T>(&'a self, t: u8, f: impl Fn(&'a Payload) -> Option<&'a T>) -> Option<&'a T> {
        (self.count(t) == 1)
            .then(|| self.payloads.iter().find_map(f))
            .flatten()
    }
    /// The one SA payload.
    pub fn one_sa(&self) -> Option<&crate::message::Sa> {
        self.one(payload_type::SA, |p| match p {
            Payload::Sa(s) => Some(s),
            _ => None,
        })
    }
    /// The one Nonce payload.
    pub fn one_nonce(&self) -> Option<&crate::message::Nonce> {
        self.one(payload_type::NONCE, |p| match p {
            Payload::Nonce(n) => Some(n),
            _ => None,
        })
    }
    /// The one KE payload.
    pub fn one_ke(&self) -> Option<&crate::message::Ke> {
        self.one(payload_type::KE, |p| match p {
            Payload::Ke(k) => Some(k),
            _ => None,
        })
    }
    /// The one TSi (`initiator`) or TSr payload.
    pub fn one_ts(&self, initiator: bool) -> Option<&crate::message::Ts> {
        if initiator {
            self.one(payload_type::TSI, |p| match p {
                Payload::TsI(t) => Some(t),
                _ => None,
            })
        } else {
            self.one(payload_type::TSR, |p| match p {
                Payload::TsR(t) => Some(t),
                _ => None,
            })
        }
    }

    fn from_plain(header: Header, first: u8, plain: &[u8]) -> Option<Opened> {
        let mut payloads = Vec::new();
        let (mut idi, mut idr) = (None, None);
        for raw in Chain::new(first, plain) {
            let raw = raw.ok()?;
            match raw.payload_type {
                payload_type::IDI if idi.is_none() => idi = Some(raw.body.to_vec()),
                payload_type::IDR if idr.is_none() => idr = Some(raw.body.to_vec()),
                _ => {}
            }
            payloads.push(Payload::parse(&raw).ok()?);
        }
        let plain = (header.exchange_type == message::ExchangeType::IKE_INTERMEDIATE)
            .then(|| (first, plain.to_vec()));
        Some(Opened {
            header,
            payloads,
            idi_body: idi,
            idr_body: idr,
            plain,
        })
    }

    pub fn count(&self, t: u8) -> usize {
        self.payloads
            .iter()
            .filter(|p| p.payload_type() == t)
            .count()
    }

    pub fn notifies(&self) -> impl Iterator<Item = &message::Notify> {
        self.payloads.iter().filter_map(|p| match p {
            Payload::Notify(n) => Some(n),
            _ => None,
        })
    }

    pub fn idi(&self) -> Option<&Id> {
        self.payloads.iter().find_map(|p| match p {
            Payload::IdI(i) => Some(i),
            _ => None,
        })
    }

    pub fn idr(&self) -> Option<&Id> {
        self.payloads.iter().find_map(|p| match p {
            Payload::IdR(i) => Some(i),
            _ => None,
        })
    }
}
