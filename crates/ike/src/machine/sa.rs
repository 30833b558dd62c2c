//! One IKE SA's state: where it stands, the outstanding request, its children, the handshake's and the
//! IKE_INTERMEDIATE exchanges' state, the cached response; and what becomes of an SA after a message
//! ([`Outcome`]). Building and opening its messages: `super::framing`.

use std::net::SocketAddr;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use netveil_crypto::dh::KeyPair;
use netveil_crypto::kem::MlKem768;

use super::frag::Reassembly;
use super::limits::Limits;
use crate::config::{Mode, Retransmit, TsSpec};
use crate::event::{Failure, IkeSaId};
use crate::keys::{IkeKeys, Role};
use crate::message;
use crate::proposal::{Encr, Esn, Integ, Ke, Prf, Proposal, Protocol, ADD_KE_SLOTS};
use crate::sk::SkKey;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Initiator: IKE_SA_INIT sent.
    InitSent,
    /// Initiator: IKE_AUTH sent.
    AuthSent,
    /// Responder: IKE_SA_INIT answered, IKE_AUTH awaited.
    HalfOpen,
    Established,
    /// Our DELETE of the IKE SA is outstanding.
    Deleting,
    /// Responder of an IKE SA rekey: the old SA, childless, waits for the peer's DELETE.
    Rekeyed,
}

/// How long a rekeyed IKE SA waits for the peer's DELETE before it goes by itself.
pub const REKEYED_LINGER: Duration = Duration::from_secs(30);

/// What our outstanding request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Init,
    /// IKE_INTERMEDIATE with an additional key exchange (RFC 9370).
    Intermediate,
    Auth,
    DeleteIke,
    /// DELETE of the CHILD_SA with this inbound SPI.
    DeleteChild(u32),
    Liveness,
    /// CREATE_CHILD_SA for child config `cfg` with our new inbound SPI; `rekey`: the inbound SPI of the child it
    /// replaces.
    CreateChild {
        cfg: usize,
        spi: u32,
        rekey: Option<u32>,
    },
    /// CREATE_CHILD_SA rekeying the IKE SA, with our SPI for the new one.
    RekeyIke {
        spi: u64,
    },
}

/// A chosen proposal (one algorithm per transform type) in 16 bytes: a [`Proposal`] takes 296 and a list on the
/// heap per transform type, for every IKE SA and CHILD_SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chosen {
    protocol: Protocol,
    encr: Option<Encr>,
    prf: Option<Prf>,
    integ: Option<Integ>,
    ke: Option<Ke>,
    add_ke: [Option<Ke>; ADD_KE_SLOTS],
    esn: Option<Esn>,
}

impl Chosen {
    /// The first algorithm of each type of `p` (its only one: `p` comes from [`crate::proposal::select`]).
    pub fn new(p: &Proposal) -> Chosen {
        Chosen {
            protocol: p.protocol(),
            encr: p.encr().first().copied(),
            prf: p.prf().first().copied(),
            integ: p.integ().first().copied(),
            ke: p.ke().first().copied(),
            add_ke: std::array::from_fn(|i| p.add_ke(i + 1).first().copied()),
            esn: p.esn().first().copied(),
        }
    }

    /// The proposal again (`None` only if it was no proposal, which [`Chosen::new`] of one never gives).
    pub fn proposal(&self) -> Option<Proposal> {
        let add: Vec<&[Ke]> = self.add_ke.iter().map(Option::as_slice).collect();
        Proposal::new(
            self.protocol,
            self.encr.as_slice(),
            self.prf.as_slice(),
            self.integ.as_slice(),
            self.ke.as_slice(),
            &add,
            self.esn.as_slice(),
        )
        .ok()
    }
}

/// Our side of an outstanding CREATE_CHILD_SA: the nonce and the key exchange (PFS).
pub struct ChildExchange {
    pub ni: Vec<u8>,
    pub dh: Option<KeyPair>,
    pub ke_retried: bool,
}

/// Our outstanding request (window size 1).
pub struct Pending {
    pub message_id: u32,
    pub purpose: Purpose,
    /// The request's datagrams (several when fragmented, RFC 7383).
    pub bytes: Vec<Vec<u8>>,
    pub retries: u32,
    pub next_at: Instant,
}

pub struct Child {
    /// Index of the child config (of the IKE SA's connection; its name is the child's).
    pub cfg: usize,
    /// When we rekey it (rekey time less a random part), and when it expires (life time).
    pub rekey_at: Instant,
    pub expire_at: Instant,
    pub inbound_spi: u32,
    pub outbound_spi: u32,
    pub mode: Mode,
    pub proposal: Chosen,
    pub local_ts: Tss,
    pub remote_ts: Tss,
    /// A rekey (ours or the peer's) replaced it and it waits for its DELETE: neither side rekeys it again (a
    /// second rekey of it made a redundant CHILD_SA each time, and their number doubled with every rekey period).
    pub replaced: bool,
}

/// The traffic selectors of one side of a CHILD_SA: one inline (the usual case: a Vec's heap block less per
/// side and CHILD_SA), several boxed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tss {
    One(TsSpec),
    Many(Box<[TsSpec]>),
}

impl core::ops::Deref for Tss {
    type Target = [TsSpec];
    fn deref(&self) -> &[TsSpec] {
        match self {
            Tss::One(t) => core::slice::from_ref(t),
            Tss::Many(v) => v,
        }
    }
}

impl<'a> IntoIterator for &'a Tss {
    type Item = &'a TsSpec;
    type IntoIter = core::slice::Iter<'a, TsSpec>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl From<Vec<TsSpec>> for Tss {
    fn from(v: Vec<TsSpec>) -> Tss {
        match v[..] {
            [t] => Tss::One(t),
            _ => Tss::Many(v.into_boxed_slice()),
        }
    }
}

/// Reauthentication (`reauth_time`) of an IKE SA: boxed, an SA of a connection without it holds none.
pub struct Reauth {
    /// When the SA is reauthenticated (far off once that started), and when it goes if that failed (`over_time`
    /// later).
    pub at: Instant,
    pub expire: Instant,
    /// The new IKE SA that replaces this one, while it comes up.
    pub by: Option<IkeSaId>,
    /// On the new IKE SA: the old one it replaces (deleted once the children below are up), and the child configs
    /// still to create with CREATE_CHILD_SA.
    pub of: Option<IkeSaId>,
    pub queue: Vec<usize>,
}

impl Reauth {
    pub fn new(at: Instant, expire: Instant) -> Reauth {
        Reauth {
            at,
            expire,
            by: None,
            of: None,
            queue: Vec::new(),
        }
    }
}

/// The part of an IKE SA that only IKE_SA_INIT, IKE_INTERMEDIATE and IKE_AUTH use: boxed apart and dropped
/// once the SA is up ([`IkeSa::forget_handshake`]).
#[derive(Default)]
pub struct Handshake {
    /// The IKE_SA_INIT nonces.
    pub ni: Box<[u8]>,
    pub nr: Box<[u8]>,
    pub group: Option<Ke>,
    pub cookie: Option<Box<[u8]>>,
    pub ke_retried: bool,
    /// Our IKE_SA_INIT message as sent (initiator: the request; responder: the response).
    pub init_sent: Box<[u8]>,
    /// The peer's IKE_SA_INIT message as received.
    pub init_received: Box<[u8]>,
    /// Initiator: the child config (index) and the inbound SPI of the first CHILD_SA.
    pub first_child: Option<usize>,
    pub first_child_spi: Option<u32>,
}

/// One side's progress through the IKE_INTERMEDIATE exchanges of an IKE SA.
#[derive(Default)]
pub struct Intermediate {
    /// The chains so far (empty before the first exchange).
    pub int_auth_i: Vec<u8>,
    pub int_auth_r: Vec<u8>,
    /// The last ADDKE slot done (0: none yet).
    pub done: usize,
    /// Initiator: the key pair of the outstanding request, and its IntAuth_i link (kept until the response).
    pub(super) kem: Option<MlKem768>,
    pub(super) pending_i: Option<Vec<u8>>,
    /// Responder: the inbound key before the last update, to recognise a retransmitted request.
    pub(super) prev_in: Option<SkKey>,
    /// Completed exchanges.
    pub exchanges: u32,
}

/// What [`IkeSa::hs`] shows of an SA without handshake state.
static NO_HANDSHAKE: LazyLock<Handshake> = LazyLock::new(Handshake::default);

pub struct IkeSa {
    pub id: IkeSaId,
    /// Index of the connection (for a responder: the one chosen by addresses, then by identities in IKE_AUTH).
    pub conn: usize,
    pub role: Role,
    pub state: State,
    pub spi_i: u64,
    pub spi_r: u64,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Responder: where the IKE_SA_INIT came from (the half-open index key).
    pub init_remote: SocketAddr,
    /// What only the exchanges up to IKE_AUTH use ([`IkeSa::hs`], [`IkeSa::hs_mut`]); none once the SA is up.
    hs: Option<Box<Handshake>>,
    /// Boxed, like the other parts an established SA rarely or never holds: each is a pointer in the SA.
    pub dh: Option<Box<KeyPair>>,
    /// The proposal chosen in IKE_SA_INIT (or the rekey); see [`IkeSa::proposal`].
    pub chosen: Option<Chosen>,
    /// Set with [`IkeSa::set_keys`]. The SK cipher and integrity contexts are built from them per message (a few
    /// microseconds); kept, they were 170 bytes per SA with AES-GCM and 1.9 KB with AES-CBC and HMAC-SHA256.
    pub(super) keys: Option<IkeKeys>,
    /// The next explicit IV of our SK payloads under `keys` (AEADs; see [`crate::sk`]).
    pub(super) out_iv: u64,
    /// We are behind a NAT (our address was changed), the peer is behind one.
    pub nat_local: bool,
    pub nat_remote: bool,
    /// Next message id of our requests, and of the peer's.
    pub my_mid: u32,
    pub peer_mid: u32,
    pub pending: Option<Box<Pending>>,
    /// The last response we sent, sent again for a retransmitted request.
    pub last_response: Option<CachedResponse>,
    /// Both ends announced IKEV2_FRAGMENTATION_SUPPORTED: messages above this many bytes go in fragments (an
    /// IKE message is at most 64 KB).
    pub fragment_len: Option<u32>,
    /// Fragments of the message being reassembled.
    pub reassembly: Option<Box<Reassembly>>,
    pub children: Vec<Child>,
    pub created: Instant,
    pub last_heard: Instant,
    /// Whether IkeSaUp was reported (so IkeSaDown is owed).
    pub was_up: bool,
    /// It came up with a full IKE_SA_INIT and IKE_AUTH (not from a rekey), and whether we started it to
    /// reauthenticate another: see `Endpoint::resolve_twins`.
    pub handshake: bool,
    pub by_reauth: bool,
    /// Milliseconds from `created` until a full handshake brought it up ([`IkeSa::up_at`]; kept short, an SA is
    /// 4 KB in all).
    up_ms: u32,
    /// terminate() came while a request was outstanding: the DELETE follows its answer.
    pub delete_queued: bool,
    /// CHILD_SAs (by inbound SPI) to delete once no request is outstanding (the old one after a rekey); boxed
    /// and `None` when there are none, as most SAs have.
    #[allow(clippy::box_collection)] // A thin pointer: 8 bytes in every SA, not a Vec's 24.
    pub queued_child_deletes: Option<Box<Vec<u32>>>,
    /// Child configs to create in this IKE SA with CREATE_CHILD_SA, one after the other, once it is up and no
    /// request is outstanding ([`super::Endpoint::start_child`]: children of one connection share its IKE SA);
    /// boxed and `None` when there are none.
    #[allow(clippy::box_collection)]
    pub queued_children: Option<Box<Vec<usize>>>,
    pub child_x: Option<Box<ChildExchange>>,
    /// When we rekey the IKE SA (set when it comes up).
    pub ike_rekey_at: Instant,
    /// Reauthentication: its times, or what a new SA replacing an old one still has to do.
    pub reauth: Option<Box<Reauth>>,
    /// The IKE_INTERMEDIATE exchanges (RFC 9242, 9370), when the chosen proposal has additional key exchanges.
    pub intermediate: Option<Box<Intermediate>>,
    /// The peer's identity as it authenticated, where the configured remote id does not say it (`%any`): for
    /// `status` (see [`super::glue::authenticated_id`]).
    pub peer_id: Option<Box<str>>,
}

/// The last response an SA sent (RFC 7296 2.1: a retransmitted request gets it again, not a new one), and its
/// message id. Kept in one of two forms:
///
/// - `Sent`: its datagrams (several when fragmented) end to end in one buffer of their exact size. Each datagram
///   is one IKE message, whose header says its length.
/// - `Plain`: one SK message that carries our certificates (an IKE_AUTH response with `auth = pubkey`), kept as
///   its plaintext without the certificates' DER (the connection holds them for the endpoint's life: 400 bytes
///   and more per certificate, most of an established SA's heap otherwise), with the IV and ICV it was sealed
///   with. A retransmitted request gets it sealed again ([`IkeSa::cached_datagrams`]): the same key, IV and
///   plaintext give the same bytes, and [`SkKey::reseal`] sends nothing unless its ICV is the one sent before.
///   The buffer: exchange type, first inner payload type, number of certificates `n`, `n` times (offset in the
///   plaintext as kept, u16, and index in the connection's certificates, u8), the IV, the ICV, the plaintext.
pub enum CachedResponse {
    Sent { message_id: u32, bytes: Box<[u8]> },
    Plain { message_id: u32, bytes: Box<[u8]> },
}

impl CachedResponse {
    pub fn new(message_id: u32, datagrams: &[Vec<u8>]) -> CachedResponse {
        CachedResponse::Sent {
            message_id,
            bytes: datagrams.concat().into_boxed_slice(),
        }
    }

    pub fn message_id(&self) -> u32 {
        match self {
            CachedResponse::Sent { message_id, .. } | CachedResponse::Plain { message_id, .. } => {
                *message_id
            }
        }
    }

    /// The datagrams of a `Sent` response, as sent (none for `Plain`: see [`IkeSa::cached_datagrams`]).
    pub(super) fn sent(&self) -> Vec<Vec<u8>> {
        let CachedResponse::Sent { bytes, .. } = self else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut rest = &bytes[..];
        while let Some(len) = rest.get(24..28) {
            let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
            let Some(d) = rest.get(..len).filter(|_| len >= message::HEADER_LEN) else {
                break;
            };
            out.push(d.to_vec());
            rest = &rest[len..];
        }
        out
    }

    /// No datagram (the response could not be built).
    pub fn is_empty(&self) -> bool {
        match self {
            CachedResponse::Sent { bytes, .. } | CachedResponse::Plain { bytes, .. } => {
                bytes.is_empty()
            }
        }
    }
}

/// What becomes of an SA after a message.
pub enum Outcome {
    Keep,
    /// Nothing changes (a message we do not act on).
    Ignore,
    /// Removed without events (it never came up).
    Forget,
    /// Removed with ChildSaDown/IkeSaDown, and Failed if given.
    Destroy(Option<Failure>),
}

pub fn backoff(r: &Retransmit, n: u32) -> Duration {
    let f = r.base.max(1.0).powi(n.min(64) as i32);
    Duration::from_secs_f64((r.timeout.as_secs_f64() * f).min(86400.0))
}

impl IkeSa {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: IkeSaId,
        conn: usize,
        role: Role,
        spi_i: u64,
        spi_r: u64,
        local: SocketAddr,
        remote: SocketAddr,
        now: Instant,
    ) -> IkeSa {
        IkeSa {
            id,
            conn,
            role,
            state: if role == Role::Initiator {
                State::InitSent
            } else {
                State::HalfOpen
            },
            spi_i,
            spi_r,
            local,
            remote,
            init_remote: remote,
            hs: None,
            dh: None,
            chosen: None,
            keys: None,
            out_iv: 0,
            nat_local: false,
            nat_remote: false,
            my_mid: 0,
            peer_mid: 0,
            pending: None,
            last_response: None,
            fragment_len: None,
            reassembly: None,
            children: Vec::new(),
            created: now,
            last_heard: now,
            was_up: false,
            handshake: false,
            by_reauth: false,
            up_ms: 0,
            delete_queued: false,
            queued_child_deletes: None,
            queued_children: None,
            child_x: None,
            ike_rekey_at: now + Duration::from_secs(86400 * 365),
            reauth: None,
            intermediate: None,
            peer_id: None,
        }
    }

    /// A stand-in left where an SA was taken out to be destroyed.
    pub fn placeholder(now: Instant) -> IkeSa {
        let any: SocketAddr = SocketAddr::from(([0, 0, 0, 0], 0));
        IkeSa::new(IkeSaId(0), 0, Role::Initiator, 0, 0, any, any, now)
    }

    pub fn our_spi(&self) -> u64 {
        match self.role {
            Role::Initiator => self.spi_i,
            Role::Responder => self.spi_r,
        }
    }

    pub fn peer_spi(&self) -> u64 {
        match self.role {
            Role::Initiator => self.spi_r,
            Role::Responder => self.spi_i,
        }
    }

    pub fn next_timeout(&self, limits: &Limits, dpd: Option<Duration>) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut at = |x: Instant| t = Some(t.map_or(x, |y| y.min(x)));
        if self.state == State::HalfOpen {
            at(self.created + limits.half_open_timeout);
        }
        if self.state == State::Rekeyed {
            at(self.last_heard + REKEYED_LINGER);
        }
        if let Some(p) = &self.pending {
            at(p.next_at);
        } else if self.state == State::Established {
            if let Some(d) = dpd {
                at(self.last_heard + d);
            }
            for c in &self.children {
                at(c.rekey_at.min(c.expire_at));
            }
            at(self.ike_rekey_at);
            if let Some(r) = &self.reauth {
                at(r.at);
                at(r.expire);
            }
            let reauth_due = self.reauth.as_ref().is_some_and(|r| r.of.is_some());
            if self.delete_queued
                || self.queued_child_deletes.is_some()
                || self.queued_children.is_some()
                || reauth_due
            {
                at(self.last_heard);
            }
        }
        t
    }

    /// Records that a full handshake brought it up at `now`.
    pub fn set_up_at(&mut self, now: Instant) {
        let ms = now.saturating_duration_since(self.created).as_millis();
        self.up_ms = u32::try_from(ms).unwrap_or(u32::MAX);
    }

    /// When a full handshake brought it up (to the millisecond; `created` before [`IkeSa::set_up_at`]).
    pub fn up_at(&self) -> Instant {
        self.created + std::time::Duration::from_millis(u64::from(self.up_ms))
    }

    /// Drops what IKE_AUTH and the first CHILD_SA needed and nothing after them does: the handshake state (both
    /// IKE_SA_INIT messages, signed in AUTH, about 1 KB with X25519 and 1.5 KB with MODP-2048; the cookie; the
    /// IKE_SA_INIT nonces: SKEYSEED and AUTH are done, CREATE_CHILD_SA and IKE SA rekeys use their own, RFC 7296
    /// 2.17 and 2.18), SK_pi and SK_pr (AUTH only) and the IKE_INTERMEDIATE state (its IntAuth chain went into
    /// AUTH, RFC 9242 3.3.2; a late copy of an IKE_INTERMEDIATE request finds no keys before the last update and
    /// is dropped).
    pub fn forget_handshake(&mut self) {
        self.hs = None;
        self.intermediate = None;
        if let Some(k) = &mut self.keys {
            k.forget_auth_keys();
        }
    }

    /// The handshake state (an empty one once the SA is up).
    pub fn hs(&self) -> &Handshake {
        self.hs.as_deref().unwrap_or(&NO_HANDSHAKE)
    }

    /// The handshake state, to change it (made if there is none).
    pub fn hs_mut(&mut self) -> &mut Handshake {
        self.hs.get_or_insert_with(Box::default)
    }

    /// The chosen IKE proposal.
    pub fn proposal(&self) -> Option<Proposal> {
        self.chosen.as_ref()?.proposal()
    }

    pub fn keys(&self) -> Option<&IkeKeys> {
        self.keys.as_ref()
    }

    /// Takes `keys` as the SA's keys (from IKE_SA_INIT, an IKE_INTERMEDIATE update or a rekey), their counter of
    /// explicit IVs at 0. False, and nothing changed, if they key no cipher of their suite.
    pub fn set_keys(&mut self, keys: IkeKeys) -> bool {
        if SkKey::outbound(&keys, self.role).is_err() || SkKey::inbound(&keys, self.role).is_err() {
            return false;
        }
        self.keys = Some(keys);
        self.out_iv = 0;
        true
    }

    /// The key the peer's messages are opened with, built from the SA's keys.
    pub fn sk_in(&self) -> Option<SkKey> {
        SkKey::inbound(self.keys.as_ref()?, self.role).ok()
    }
}

#[cfg(test)]
mod tests;
