//! IKE_INTERMEDIATE (RFC 9242) carrying the additional key exchanges of RFC 9370: hybrid post-quantum IKE SAs,
//! ML-KEM-768 (draft-ietf-ipsecme-ikev2-mlkem) after the ECDH of IKE_SA_INIT.
//!
//! - IKE_SA_INIT: the initiator sends INTERMEDIATE_EXCHANGE_SUPPORTED when one of its proposals has an additional
//!   key exchange; the responder answers it with its own, and only then may choose such a proposal. An initiator
//!   that gets a proposal with additional key exchanges without the notify drops the answer.
//! - For each ADDKE slot of the chosen proposal (1..=7, the empty ones skipped), one IKE_INTERMEDIATE exchange
//!   (message ids 1, 2, ...): the initiator's request carries one KE payload with its ML-KEM encapsulation key
//!   (1184 bytes), the response one KE payload with the ciphertext (1088 bytes). Both are protected with the keys
//!   in force, then both ends move to `SKEYSEED(n) = prf(SK_d(n-1), SK(n) | Ni | Nr)` (RFC 9370 2.2.2,
//!   [`crate::keys::IkeKeys::intermediate`]). These messages are large: with fragmentation agreed they go in
//!   SKF fragments like any other encrypted message.
//! - Each message also extends its sender's chain `IntAuth_i` / `IntAuth_r` (RFC 9242 3.3.2), computed with the
//!   keys that protected the message over its header and plaintext (lengths adjusted as if unfragmented and
//!   without IV, padding and ICV); IKE_AUTH's signed octets end with `IntAuth_i | IntAuth_r | IKE_AUTH_MID`
//!   ([`IkeSa::int_auth`]), so AUTH covers every IKE_INTERMEDIATE message.
//! - The responder refuses (INVALID_SYNTAX, and the half-open SA goes) a request without exactly one KE payload,
//!   with another method than the slot's, or of the wrong length; an IKE_INTERMEDIATE when none is owed; and an
//!   IKE_AUTH before every additional key exchange is done. It answers a retransmitted request (still protected
//!   with the keys before the update) with its cached response.

use std::net::SocketAddr;
use std::time::Instant;

use netveil_crypto::kem::{self, MlKem768, ML_KEM_768_CIPHERTEXT_LEN, ML_KEM_768_PUBLIC_LEN};

use super::framing::Opened;
use super::sa::{IkeSa, Outcome, Purpose};
use super::Endpoint;
use crate::event::Failure;
use crate::keys::Role;
use crate::message::{
    self, payload_type, ExchangeType, Flags, Header, Ke, Notify, NotifyType, Payload,
};
use crate::proposal::{Ke as KeMethod, Proposal, ADD_KE_SLOTS};
use crate::sk;

/// Whether a proposal has additional key exchanges.
pub fn has_add_ke(p: &Proposal) -> bool {
    (1..=ADD_KE_SLOTS).any(|n| !p.add_ke(n).is_empty())
}

/// Whether this endpoint computes every additional key exchange a proposal names (ML-KEM-768 only).
fn add_ke_supported(p: &Proposal) -> bool {
    (1..=ADD_KE_SLOTS).all(|n| p.add_ke(n).iter().all(|&k| k == KeMethod::MlKem768))
}

/// Our proposals a responder may choose from: with additional key exchanges only if the peer announced
/// IKE_INTERMEDIATE and we compute them.
pub fn usable(ours: &[Proposal], peer_supports: bool) -> Vec<Proposal> {
    ours.iter()
        .filter(|p| !has_add_ke(p) || (peer_supports && add_ke_supported(p)))
        .cloned()
        .collect()
}

/// Our proposals for rekeying an IKE SA: without additional key exchanges (RFC 9370 2.2.4's IKE_FOLLOWUP_KE is
/// not implemented). The new SA's keys still descend from the hybrid SA's: `SKEYSEED = prf(SK_d (old), ...)`.
pub fn classic(ours: &[Proposal]) -> Vec<Proposal> {
    let mut out: Vec<Proposal> = Vec::new();
    for p in ours {
        let mut ts = p.transforms();
        ts.retain(|t| !matches!(t.ty, crate::proposal::TransformType::AddKe(_)));
        let c = Proposal::from_transforms(p.protocol(), &ts).unwrap_or_else(|_| p.clone());
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// The INTERMEDIATE_EXCHANGE_SUPPORTED notify.
pub fn supported_notify() -> Payload {
    Payload::Notify(Notify::new(
        NotifyType::INTERMEDIATE_EXCHANGE_SUPPORTED,
        Vec::new(),
    ))
}

/// The next ADDKE slot with a method after slot `after`.
fn next_slot(chosen: &Proposal, after: usize) -> Option<(usize, KeMethod)> {
    (after + 1..=ADD_KE_SLOTS).find_map(|n| chosen.add_ke(n).first().map(|&k| (n, k)))
}

/// `IntAuth_*_A`: the IKE header and the Encrypted payload's generic header, lengths as if the Encrypted payload
/// held only `plain_len` bytes of plaintext (RFC 9242 3.3.2, figure 1); no clear payloads before it.
fn int_auth_a(h: &Header, first_inner: u8, plain_len: usize) -> Vec<u8> {
    let sk_len = sk::Encrypted::Sk.header_len() + plain_len;
    let mut a = Vec::with_capacity(message::HEADER_LEN + 4);
    a.extend_from_slice(&h.initiator_spi.to_be_bytes());
    a.extend_from_slice(&h.responder_spi.to_be_bytes());
    a.push(payload_type::SK);
    a.push(message::header::MAJOR_VERSION << 4);
    a.push(h.exchange_type.0);
    a.push(h.flags.bits());
    a.extend_from_slice(&h.message_id.to_be_bytes());
    a.extend_from_slice(&((message::HEADER_LEN + sk_len) as u32).to_be_bytes());
    a.push(first_inner);
    a.push(0);
    a.extend_from_slice(&(sk_len as u16).to_be_bytes());
    a
}

/// The header and plaintext of a message of ours with `inner` (as [`IkeSa::sealed_message`] builds it).
fn our_message(sa: &IkeSa, response: bool, mid: u32, inner: &[Payload]) -> (Header, u8, Vec<u8>) {
    let mut plain = vec![0u8; message::chain_len(inner)];
    let n = message::emit_chain(inner, &mut plain).unwrap_or(0);
    plain.truncate(n);
    let h = Header {
        initiator_spi: sa.spi_i,
        responder_spi: sa.spi_r,
        exchange_type: ExchangeType::IKE_INTERMEDIATE,
        flags: Flags {
            initiator: sa.role == Role::Initiator,
            version: false,
            response,
        },
        message_id: mid,
    };
    (h, message::first_type(inner), plain)
}

impl IkeSa {
    /// What IKE_AUTH's signed octets end with: `IntAuth_i | IntAuth_r | IKE_AUTH_MID` (RFC 9242 3.3.2) after
    /// IKE_INTERMEDIATE exchanges, nothing without.
    pub fn int_auth(&self, auth_mid: u32) -> Vec<u8> {
        match &self.intermediate {
            Some(x) if x.exchanges > 0 => {
                [&x.int_auth_i[..], &x.int_auth_r, &auth_mid.to_be_bytes()].concat()
            }
            _ => Vec::new(),
        }
    }

    /// Whether additional key exchanges are still owed before IKE_AUTH.
    pub fn intermediate_owed(&self) -> bool {
        match (&self.intermediate, self.proposal()) {
            (Some(x), Some(p)) => next_slot(&p, x.done).is_some(),
            _ => false,
        }
    }

    /// The keys after an additional key exchange with shared secret `shared`; false if they cannot be derived.
    fn update_keys(&mut self, shared: &[u8]) -> bool {
        let Some(keys) = self.keys() else {
            return false;
        };
        let Ok(next) = keys.intermediate(
            shared,
            &self.hs().ni,
            &self.hs().nr,
            &self.spi_i.to_be_bytes(),
            &self.spi_r.to_be_bytes(),
        ) else {
            return false;
        };
        let prev = self.sk_in();
        if !self.set_keys(next) {
            return false;
        }
        if let Some(x) = &mut self.intermediate {
            x.prev_in = prev;
            x.exchanges += 1;
        }
        true
    }
}

impl Endpoint {
    /// Initiator, IKE_SA_INIT done: the first IKE_INTERMEDIATE when the chosen proposal has additional key
    /// exchanges, else IKE_AUTH.
    pub(super) fn after_init(&mut self, sa: &mut IkeSa, now: Instant) {
        if sa.proposal().as_ref().is_some_and(has_add_ke) {
            sa.intermediate = Some(Box::default());
            self.send_intermediate(sa, now);
        } else {
            self.send_auth(sa, now);
        }
    }

    /// Initiator: the IKE_INTERMEDIATE request for the next slot (or IKE_AUTH when none is left).
    fn send_intermediate(&mut self, sa: &mut IkeSa, now: Instant) {
        let next = sa
            .proposal()
            .and_then(|p| next_slot(&p, sa.intermediate.as_ref().map_or(0, |x| x.done)));
        let Some((_, method)) = next else {
            self.send_auth(sa, now);
            return;
        };
        // aws-lc-rs takes no caller generator for ML-KEM: aws-lc's own, OS-seeded one draws the key.
        let generated = MlKem768::generate(); // check-rng: allow (aws-lc-rs's ML-KEM has no caller generator)
        let Ok(pair) = generated else {
            return;
        };
        let inner = [Payload::Ke(Ke {
            group: method.id(),
            data: pair.public().to_vec(),
        })];
        let (h, first, plain) = our_message(sa, false, sa.my_mid, &inner);
        let (Some(keys), Some(x)) = (sa.keys(), &sa.intermediate) else {
            return;
        };
        let link = keys.int_auth(
            Role::Initiator,
            &x.int_auth_i,
            &int_auth_a(&h, first, plain.len()),
            &plain,
        );
        if let Some(x) = &mut sa.intermediate {
            x.kem = Some(pair);
            x.pending_i = Some(link);
        }
        self.request(
            sa,
            ExchangeType::IKE_INTERMEDIATE,
            Purpose::Intermediate,
            &inner,
            now,
        );
    }

    /// Initiator: the response to our IKE_INTERMEDIATE request.
    pub(super) fn intermediate_response(
        &mut self,
        sa: &mut IkeSa,
        now: Instant,
        o: &Opened,
    ) -> Outcome {
        if let Some(n) = o.notifies().find(|n| n.notify_type.is_error()) {
            return Outcome::Destroy(Some(Failure::PeerError {
                notify: n.notify_type.0,
                name: n.notify_type.name().unwrap_or("unknown").to_string(),
            }));
        }
        let bad = || {
            Outcome::Destroy(Some(Failure::PeerError {
                notify: NotifyType::INVALID_SYNTAX.0,
                name: "malformed IKE_INTERMEDIATE response".to_string(),
            }))
        };
        let (Some(p), Some(x)) = (sa.proposal(), &sa.intermediate) else {
            return bad();
        };
        let Some((slot, method)) = next_slot(&p, x.done) else {
            return bad();
        };
        let Some(ke) = o.one_ke() else { return bad() };
        if ke.group != method.id() || ke.data.len() != ML_KEM_768_CIPHERTEXT_LEN {
            return bad();
        }
        let (Some(keys), Some(pair), Some((first, plain))) = (sa.keys(), &x.kem, &o.plain) else {
            return bad();
        };
        let Ok(shared) = pair.decapsulate(&ke.data) else {
            return bad();
        };
        let link_r = keys.int_auth(
            Role::Responder,
            &x.int_auth_r,
            &int_auth_a(&o.header, *first, plain.len()),
            plain,
        );
        if let Some(x) = &mut sa.intermediate {
            x.int_auth_r = link_r;
            x.int_auth_i = x.pending_i.take().unwrap_or_default();
            x.kem = None;
            x.done = slot;
        }
        if !sa.update_keys(&shared) {
            return bad();
        }
        sa.pending = None;
        sa.my_mid += 1;
        self.send_intermediate(sa, now);
        Outcome::Keep
    }

    /// Responder: an IKE_INTERMEDIATE request (in HalfOpen, with message id `peer_mid`).
    pub(super) fn intermediate_request(
        &mut self,
        sa: &mut IkeSa,
        local: SocketAddr,
        remote: SocketAddr,
        o: &Opened,
    ) -> Outcome {
        sa.local = local;
        sa.remote = remote;
        let mid = o.header.message_id;
        let next = match (sa.proposal(), &sa.intermediate) {
            (Some(p), Some(x)) => next_slot(&p, x.done),
            _ => None,
        };
        let ke = o.one_ke();
        let (Some((slot, method)), Some(ke)) = (next, ke) else {
            return self.intermediate_refuse(sa, o);
        };
        if ke.group != method.id() || ke.data.len() != ML_KEM_768_PUBLIC_LEN {
            return self.intermediate_refuse(sa, o);
        }
        let Ok((ct, shared)) = kem::encapsulate(&ke.data) else {
            return self.intermediate_refuse(sa, o);
        };
        let inner = [Payload::Ke(Ke {
            group: method.id(),
            data: ct,
        })];
        let (h, first, plain) = our_message(sa, true, mid, &inner);
        let (Some(keys), Some(x), Some((req_first, req_plain))) =
            (sa.keys(), &sa.intermediate, &o.plain)
        else {
            return Outcome::Forget;
        };
        let link_i = keys.int_auth(
            Role::Initiator,
            &x.int_auth_i,
            &int_auth_a(&o.header, *req_first, req_plain.len()),
            req_plain,
        );
        let link_r = keys.int_auth(
            Role::Responder,
            &x.int_auth_r,
            &int_auth_a(&h, first, plain.len()),
            &plain,
        );
        // The response goes under the keys in force; the next message under the new ones.
        self.respond(sa, ExchangeType::IKE_INTERMEDIATE, mid, &inner);
        if let Some(x) = &mut sa.intermediate {
            x.int_auth_i = link_i;
            x.int_auth_r = link_r;
            x.done = slot;
        }
        if !sa.update_keys(&shared) {
            return Outcome::Forget;
        }
        Outcome::Keep
    }

    /// Responder: INVALID_SYNTAX for an IKE_INTERMEDIATE (or an early IKE_AUTH) that breaks the sequence; the
    /// half-open SA goes.
    pub(super) fn intermediate_refuse(&mut self, sa: &mut IkeSa, o: &Opened) -> Outcome {
        let n = Payload::Notify(Notify::new(NotifyType::INVALID_SYNTAX, Vec::new()));
        self.respond(sa, o.header.exchange_type, o.header.message_id, &[n]);
        Outcome::Forget
    }

    /// Responder: a datagram that did not open with the current keys may be a retransmitted IKE_INTERMEDIATE
    /// request under the keys before the update: if it authenticates with those, the cached response goes again.
    pub(super) fn intermediate_resend(
        &mut self,
        sa: &mut IkeSa,
        hdr: &Header,
        bytes: &[u8],
    ) -> bool {
        let Some(prev) = sa.intermediate.as_ref().and_then(|x| x.prev_in.as_ref()) else {
            return false;
        };
        let Some(cached) = &sa.last_response else {
            return false;
        };
        if hdr.exchange_type != ExchangeType::IKE_INTERMEDIATE
            || hdr.flags.response
            || hdr.message_id != cached.message_id()
            || cached.is_empty()
        {
            return false;
        }
        let first = bytes.get(16).copied();
        let kind = match first {
            Some(payload_type::SK) => sk::Encrypted::Sk,
            Some(payload_type::SKF) if sa.fragment_len.is_some() => sk::Encrypted::Skf,
            _ => return false,
        };
        // A fragmented request is answered on its first fragment (RFC 7383 2.6.1).
        if kind == sk::Encrypted::Skf && bytes.get(32..34) != Some(&[0, 1][..]) {
            return false;
        }
        let mut buf = bytes.to_vec();
        if prev.open(&mut buf, message::HEADER_LEN, kind).is_err() {
            return false;
        }
        let (l, r, b) = (sa.local, sa.remote, sa.cached_datagrams(&[]));
        self.counters.responses_resent += 1;
        for b in b {
            self.send(l, r, b);
        }
        true
    }
}
