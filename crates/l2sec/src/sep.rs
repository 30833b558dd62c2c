//! The Session Establishment Protocol (SEP): a sans-I/O state machine that sets up a unicast session between two
//! hosts of the LAN, after the three stages of the thesis (R. A. Campillo Terrero, 2014): stage 1 finds the
//! peer and exchanges nonces, stage 2 negotiates the suite and the key-exchange group, stage 3 runs an
//! ephemeral Diffie-Hellman exchange with the session expiration offer and accept, and confirms the keys.
//!
//! The caller (the node) carries SEP messages as l2sec group frames (broadcast, under the group key, signed when
//! signatures are configured) with the l2sec EtherType as the inner EtherType, hands received ones to
//! [`Sep::handle_message`] with the (epoch, sequence number) of the group frame that carried them, and sends what
//! [`Sep::poll_event`] returns. SEP itself does no I/O and reads no clock: time is passed in, and
//! [`Sep::poll_timeout`] tells when [`Sep::handle_timeout`] is due.
//!
//! # Exchange
//!
//! Every group member receives every SEP message, so each message names its sender and its receiver, and a host
//! that is not the receiver drops it silently ([`SepError::NotTarget`]). The initiator I picks a random 8-byte
//! exchange id that every message of the exchange carries.
//!
//! ```text
//!   Initiator I                                                     Responder R
//!   stage 1  REQUEST (1)      IPv4_I, target IPv4, Ni         --->  target is mine (or 0.0.0.0)?
//!                                                                   IPv4_I on my subnet?
//!            ACCEPT (2)       Nr, IPv4_R                      <---
//!   stage 2  OFFER (3)        key id, suites, groups          --->  first offered suite and group I allow
//!            SELECT (4)       key id, suite, group            <---  (or REJECT (8) reason, and R gives up)
//!   stage 3  KEY_EXCHANGE (5) lifetime offer, KEi             --->  accepted = min(offer, mine)
//!            KEY_EXCHANGE_ACCEPT (6)  accepted lifetime, KEr, MAC_r
//!                                                             <---
//!   checks MAC_r, Established
//!            FINISH (7)       MAC_i                           --->  checks MAC_i, Established
//! ```
//!
//! # Messages
//!
//! All integers are big-endian. Every message starts with a 22-byte header:
//!
//! ```text
//! +---------+------+------------+--------------+-------------+------
//! | version | type | sender MAC | receiver MAC | exchange id | body
//! |  1 (=1) |  1   |     6      |      6       |      8      |
//! +---------+------+------------+--------------+-------------+------
//! ```
//!
//! | type | name | body |
//! |---|---|---|
//! | 1 | REQUEST | initiator IPv4 (4), target IPv4 (4; 0.0.0.0 if unknown), Ni (32) |
//! | 2 | ACCEPT | Nr (32), responder IPv4 (4) |
//! | 3 | OFFER | key id (1, 1..=255), n (1, ≥ 1), n suite codes, m (1, ≥ 1), m group codes, in preference order |
//! | 4 | SELECT | key id (1, echoed), suite code (1), group code (1) |
//! | 5 | KEY_EXCHANGE | lifetime offer (4, seconds, ≥ 1), KEi (the group's public value length) |
//! | 6 | KEY_EXCHANGE_ACCEPT | accepted lifetime (4, 1..=offer), KEr (public value length), MAC_r (32) |
//! | 7 | FINISH | MAC_i (32) |
//! | 8 | REJECT | reason (1): 1 no common suite, 2 no common group |
//! | 9 | ANNOUNCE | none; receiver ff:ff:ff:ff:ff:ff, exchange id 0 |
//!
//! ANNOUNCE belongs to no exchange: a host sends it when it starts ([`announce_message`]), so that the others
//! learn its new group epoch at once from an authenticated frame (see [`crate::node`]); SEP accepts it and does
//! nothing else.
//!
//! A message of any other length (trailing bytes included), an unknown version or type, a zero key id or
//! lifetime, or empty lists is [`SepError::Malformed`]. Unknown suite or group codes in an OFFER are skipped
//! (a later version may offer more); in a SELECT they are malformed.
//!
//! Suite codes ([`suite_code`]): 1 Blowfish-CBC, 2 AES-128-CBC, 3 AES-256-CBC, 4 3DES-CBC, 5 Blowfish-ECB,
//! 6 AES-128-ECB, 7 AES-256-ECB, 8 3DES-ECB (all version 0, HMAC-SHA1), 16 AES-128-GCM, 17 AES-256-GCM,
//! 18 ChaCha20-Poly1305 (version 1), 32 null (version 0, no encryption and no HMAC: the framing alone, only
//! where both ends have the `insecure_null` switch). Group codes ([`group_code`]) are the IANA IKEv2 Diffie-Hellman group
//! numbers: 14 MODP-2048, 15 MODP-3072, 31 X25519. Public values: X25519 32 bytes; MODP big-endian at the
//! prime's length (256 or 384 bytes); see [`netveil_crypto::dh`] for the validation of the peer's value.
//!
//! # Key schedule
//!
//! `Z` is the Diffie-Hellman shared secret (MODP at full length, as IKEv2). `m1 … m5` are the messages 1 to 5
//! as sent (every byte, header included), `m6'` message 6 without its MAC_r, and `T(m) = len(m) (4) ‖ m`:
//!
//! ```text
//! H      = SHA-256(T(m1) ‖ T(m2) ‖ T(m3) ‖ T(m4) ‖ T(m5) ‖ T(m6'))
//! okm    = HKDF-SHA256(salt = Ni ‖ Nr, ikm = Z, info = "netveil-l2sec sep" ‖ H, L = 128)
//!        = K_confirm_r (32) ‖ K_confirm_i (32) ‖ S_i2r (32) ‖ S_r2i (32)
//! MAC_r  = HMAC-SHA256(K_confirm_r, "responder" ‖ H)
//! MAC_i  = HMAC-SHA256(K_confirm_i, "initiator" ‖ H)
//! keys   = SessionKeys::derive(suite, S_i2r, "sep i2r" ‖ key id)   (initiator → responder)
//!          SessionKeys::derive(suite, S_r2i, "sep r2i" ‖ key id)   (responder → initiator)
//! ```
//!
//! The initiator sends with the i2r keys and receives with the r2i keys, the responder the reverse; both
//! directions carry the key id of the OFFER. For version-0 suites the engine derives the BIVN from these keys
//! (BIVN = HMAC-SHA1(K_auth, K_enc), see [`crate::engine`]), so nothing else travels. The lifetime of stage 3 is
//! the thesis' session expiration offer and accept: [`Established::lifetime`] is the accepted one, and the
//! session must be rekeyed (a new exchange, a new key id) before it ends.
//!
//! Because `H` covers every byte of the exchange, the confirmations check at once that both hosts computed the
//! same `Z` and that they saw the same messages: a changed share, nonce, offer (a suite removed to force a
//! weaker one), selection, lifetime or address ends in [`SepError::BadConfirm`] and no session. SEP does not
//! itself authenticate the hosts: that comes from the group frames it travels in (only holders of the group
//! secret can send them, and with signatures each message is bound to its sender's Ed25519 key). A group member
//! that can rewrite other members' frames (no signatures) could run a full man in the middle by recomputing the
//! confirmations with its own shares; configure signatures where members do not trust each other.
//!
//! # Robustness
//!
//! - **Retransmission.** The side waiting for an answer retransmits its last message (the same bytes) after
//!   `retransmit`, doubling the wait each time, up to `attempts` transmissions in total, then emits
//!   `Failed { reason: Timeout }` and forgets the exchange: the initiator for REQUEST, OFFER and KEY_EXCHANGE,
//!   the responder for KEY_EXCHANGE_ACCEPT (waiting for FINISH). The responder answers a duplicate of the last
//!   message it answered with the same answer (no new state, no new nonce or share). A responder waiting for
//!   OFFER or KEY_EXCHANGE forgets the exchange, silently, after the whole retransmission span
//!   `retransmit · (2^attempts − 1)` without news. After the exchange, both sides remember it for that span:
//!   the initiator answers a retransmitted KEY_EXCHANGE_ACCEPT (its FINISH was lost) with the same FINISH, and
//!   stale copies of the exchange's messages are ignored.
//! - **Simultaneous initiation.** A host that receives a REQUEST from a peer it is itself initiating to keeps
//!   its initiator role if its MAC address is numerically lower (the request is dropped as
//!   [`SepError::Unexpected`]); otherwise it abandons its own exchange (without a `Failed` event: it gets the
//!   responder's `Established` instead) and answers. Exactly one exchange survives, initiated by the lower MAC.
//! - **Restarts.** A REQUEST with a new exchange id from a peer we are responding to replaces that exchange.
//! - **Freshness.** [`Sep::handle_message`] takes the (epoch, sequence number) of the group frame that carried the
//!   message. A REQUEST that is not strictly fresher than the freshest REQUEST seen from the same peer is refused
//!   ([`SepError::Stale`]) before anything else: a replayed REQUEST can neither replace a responder exchange nor
//!   make a host with the higher MAC abandon its own exchange. (A retransmitted REQUEST travels in a new group
//!   frame, so it is fresher.) The last [`MAX_FRESHNESS`] peers are remembered.
//! - **Rate.** Exchanges started (as initiator, and accepted as responder) take a token from one bucket of
//!   `max_starts_per_second` tokens, refilled at that rate; without a token, `initiate` does nothing and a REQUEST
//!   is refused ([`SepError::RateLimited`]), so a flood of requests cannot make this host compute key shares
//!   without bound.
//! - **Bounds.** At most one exchange per peer; at most [`MAX_RESPONDERS`] responder exchanges at once (further
//!   requests from new peers: [`SepError::Busy`]).
//! - **Errors.** `handle_message` returns `Err` when the message was dropped with no effect on any exchange (a
//!   message for an unknown exchange or out of order is [`SepError::Unexpected`]; an invalid share
//!   [`SepError::BadKeyShare`], the exchange goes on). When a message ends an exchange (a REJECT, a wrong
//!   confirmation), it returns `Ok` and the end is reported as [`SepEvent::Failed`]. Exact duplicates return
//!   `Ok`. No input panics.
//! - **Secrets.** Private keys, shared secrets and derived keys are zeroized when dropped and never printed.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac as HmacMac};
use netveil_crypto::dh::{Group, KeyPair};
use netveil_crypto::rand::{array as random, Rng};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::keys::SessionKeys;
use crate::suite::Suite;
use netveil_crypto::kdf::hkdf_sha256;

/// A MAC address.
pub type Mac = [u8; 6];

/// A Diffie-Hellman group for stage 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DhGroup {
    /// X25519 (RFC 7748).
    X25519,
    /// The 2048-bit MODP group (RFC 3526 group 14).
    Modp2048,
    /// The 3072-bit MODP group (RFC 3526 group 15).
    Modp3072,
}

impl DhGroup {
    pub const ALL: [DhGroup; 3] = [DhGroup::X25519, DhGroup::Modp2048, DhGroup::Modp3072];
    /// `x25519`, `modp2048`, `modp3072` (strongSwan's names).
    pub fn name(self) -> &'static str {
        match self {
            DhGroup::X25519 => "x25519",
            DhGroup::Modp2048 => "modp2048",
            DhGroup::Modp3072 => "modp3072",
        }
    }
    pub fn from_name(s: &str) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.name() == s)
    }
}

/// How this host takes part in SEP.
#[derive(Debug, Clone)]
pub struct SepConfig {
    /// This host's MAC address.
    pub mac: Mac,
    /// This host's IPv4 address and prefix length: a responder answers only requesters on this subnet.
    pub ip: Ipv4Addr,
    pub prefix_len: u8,
    /// Session suites in preference order: offered as initiator; as responder, the first suite of the
    /// initiator's offer that is also in this list is selected.
    pub suites: Vec<Suite>,
    /// Key-exchange groups, same rule as `suites`.
    pub groups: Vec<DhGroup>,
    /// The session lifetime this host offers (as initiator) and the longest it accepts (as responder: the
    /// accepted lifetime is the smaller of the offer and this).
    pub lifetime: Duration,
    /// First retransmission timeout (doubled after every retransmission).
    pub retransmit: Duration,
    /// Transmissions of one message before the exchange fails.
    pub attempts: u32,
    /// Exchanges started per second (as initiator and accepted as responder together), with a burst of as many;
    /// 0: no limit.
    pub max_starts_per_second: u32,
}

/// A session both sides agreed on.
pub struct Established {
    pub peer: Mac,
    /// The peer's IPv4 address as it stated it in stage 1.
    pub peer_ip: Ipv4Addr,
    /// This host initiated the exchange.
    pub initiator: bool,
    /// Version 1: the key id frames of this session carry (both directions), 1..=255.
    pub key_id: u8,
    pub suite: Suite,
    /// Keys this host sends with.
    pub tx: SessionKeys,
    /// Keys this host receives with.
    pub rx: SessionKeys,
    /// The accepted lifetime (the session must be rekeyed before it ends).
    pub lifetime: Duration,
}

/// What the caller must do.
pub enum SepEvent {
    /// Send `msg` (a SEP message) to `to`, as a group frame.
    Transmit { to: Mac, msg: Vec<u8> },
    /// A session is established: install it (replacing the peer's current one, which becomes the previous).
    Established(Box<Established>),
    /// The exchange with `peer` failed (no answer after all attempts, or refused).
    Failed { peer: Mac, reason: SepError },
}

/// Why a SEP message was refused (dropped silently: no answer is sent) or an exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SepError {
    /// Not a well-formed SEP message.
    Malformed,
    /// Addressed to another host (or its target address is not ours).
    NotTarget,
    /// The requester's address is not on our subnet.
    NotOnSubnet,
    /// The sender's MAC in the message is not the frame's source.
    WrongSender,
    /// A message that does not fit the state of the exchange (unknown exchange, wrong stage).
    Unexpected,
    /// No suite of the offer is acceptable.
    NoCommonSuite,
    /// No key-exchange group of the offer is acceptable.
    NoCommonGroup,
    /// The peer's key share is invalid.
    BadKeyShare,
    /// The key confirmation did not verify (a man in the middle, or a corrupted exchange).
    BadConfirm,
    /// No answer after all attempts.
    Timeout,
    /// Too many exchanges in progress: a request from a new peer is dropped.
    Busy,
    /// The rate limit on exchanges started: a request is dropped (or an initiation postponed).
    RateLimited,
    /// A REQUEST not fresher than one already seen from the same peer (a replay).
    Stale,
    /// The caller refused the IPv4 address the peer stated: it is bound to another MAC address (or the peer's
    /// configured address is another one).
    IpBound,
}

impl SepError {
    pub fn name(self) -> &'static str {
        match self {
            SepError::Malformed => "sep-malformed",
            SepError::NotTarget => "sep-not-target",
            SepError::NotOnSubnet => "sep-not-on-subnet",
            SepError::WrongSender => "sep-wrong-sender",
            SepError::Unexpected => "sep-unexpected",
            SepError::NoCommonSuite => "sep-no-common-suite",
            SepError::NoCommonGroup => "sep-no-common-group",
            SepError::BadKeyShare => "sep-bad-key-share",
            SepError::BadConfirm => "sep-bad-confirm",
            SepError::Timeout => "sep-timeout",
            SepError::Busy => "sep-busy",
            SepError::RateLimited => "sep-rate-limited",
            SepError::Stale => "sep-stale",
            SepError::IpBound => "sep-ip-bound",
        }
    }
}

impl core::fmt::Display for SepError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// The SEP version this implementation speaks (first byte of every message).
pub const VERSION: u8 = 1;
/// Length of the common header: version, type, sender MAC, receiver MAC, exchange id.
pub const HEADER_LEN: usize = 22;
/// Length of the nonces Ni and Nr.
pub const NONCE_LEN: usize = 32;
/// Length of the key confirmations MAC_r and MAC_i.
pub const CONFIRM_LEN: usize = 32;
/// Most responder exchanges in progress at once.
pub const MAX_RESPONDERS: usize = 256;
/// Most finished exchanges remembered (for retransmitted last messages).
const MAX_LINGER: usize = 1024;
/// Most peers whose freshest REQUEST is remembered.
pub const MAX_FRESHNESS: usize = 4096;
/// The broadcast address, the receiver of ANNOUNCE.
const BROADCAST: Mac = [0xff; 6];

/// Message types (the second byte of every message).
pub mod msg_type {
    pub const REQUEST: u8 = 1;
    pub const ACCEPT: u8 = 2;
    pub const OFFER: u8 = 3;
    pub const SELECT: u8 = 4;
    pub const KEY_EXCHANGE: u8 = 5;
    pub const KEY_EXCHANGE_ACCEPT: u8 = 6;
    pub const FINISH: u8 = 7;
    pub const REJECT: u8 = 8;
    pub const ANNOUNCE: u8 = 9;
}
use msg_type as ty;

const REJECT_NO_SUITE: u8 = 1;
const REJECT_NO_GROUP: u8 = 2;

/// The stable one-byte code of a suite in OFFER and SELECT.
pub fn suite_code(s: Suite) -> u8 {
    match s {
        Suite::BlowfishCbc => 1,
        Suite::Aes128Cbc => 2,
        Suite::Aes256Cbc => 3,
        Suite::TripleDesCbc => 4,
        Suite::BlowfishEcb => 5,
        Suite::Aes128Ecb => 6,
        Suite::Aes256Ecb => 7,
        Suite::TripleDesEcb => 8,
        Suite::Aes128Gcm => 16,
        Suite::Aes256Gcm => 17,
        Suite::ChaCha20Poly1305 => 18,
        Suite::Null => 32,
    }
}

/// The suite of a code, if known.
pub fn suite_from_code(c: u8) -> Option<Suite> {
    Suite::ALL.into_iter().find(|s| suite_code(*s) == c)
}

/// The one-byte code of a group (the IANA IKEv2 Diffie-Hellman group number).
pub fn group_code(g: DhGroup) -> u8 {
    match g {
        DhGroup::Modp2048 => 14,
        DhGroup::Modp3072 => 15,
        DhGroup::X25519 => 31,
    }
}

/// The group of a code, if known.
pub fn group_from_code(c: u8) -> Option<DhGroup> {
    DhGroup::ALL.into_iter().find(|g| group_code(*g) == c)
}

fn dh_group(g: DhGroup) -> Group {
    match g {
        DhGroup::X25519 => Group::X25519,
        DhGroup::Modp2048 => Group::Modp2048,
        DhGroup::Modp3072 => Group::Modp3072,
    }
}

/// Length of a group's public value in KEY_EXCHANGE and KEY_EXCHANGE_ACCEPT.
pub fn public_len(g: DhGroup) -> usize {
    dh_group(g).public_len()
}

// ------------------------------------------------------------------------------------------------------------
// Wire format
// ------------------------------------------------------------------------------------------------------------

struct Hdr {
    ty: u8,
    sender: Mac,
    receiver: Mac,
    id: [u8; 8],
}

fn parse_header(msg: &[u8]) -> Result<(Hdr, &[u8]), SepError> {
    if msg.len() < HEADER_LEN || msg[0] != VERSION {
        return Err(SepError::Malformed);
    }
    let mut h = Hdr {
        ty: msg[1],
        sender: [0; 6],
        receiver: [0; 6],
        id: [0; 8],
    };
    if !(ty::REQUEST..=ty::ANNOUNCE).contains(&h.ty) {
        return Err(SepError::Malformed);
    }
    h.sender.copy_from_slice(&msg[2..8]);
    h.receiver.copy_from_slice(&msg[8..14]);
    h.id.copy_from_slice(&msg[14..22]);
    Ok((h, &msg[HEADER_LEN..]))
}

fn header(msg_ty: u8, sender: Mac, receiver: Mac, id: &[u8; 8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEADER_LEN + 64);
    m.push(VERSION);
    m.push(msg_ty);
    m.extend_from_slice(&sender);
    m.extend_from_slice(&receiver);
    m.extend_from_slice(id);
    m
}

/// The ANNOUNCE message of the host `mac` (see the module documentation).
pub fn announce_message(mac: Mac) -> Vec<u8> {
    header(ty::ANNOUNCE, mac, BROADCAST, &[0; 8])
}

/// The IPv4 address a REQUEST (the initiator's) or an ACCEPT (the responder's) addressed to `to` states for its
/// sender, for a caller that binds addresses to MAC addresses before SEP acts on the message. `None` for any other
/// message, or one that is malformed or for another host.
pub fn stated_ip(msg: &[u8], to: Mac) -> Option<Ipv4Addr> {
    let (h, body) = parse_header(msg).ok()?;
    if h.receiver != to {
        return None;
    }
    match (h.ty, body.len()) {
        (ty::REQUEST, n) if n == 8 + NONCE_LEN => Some(ip_at(body)),
        (ty::ACCEPT, n) if n == NONCE_LEN + 4 => Some(ip_at(&body[NONCE_LEN..])),
        _ => None,
    }
}

fn ip_at(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

fn u32_at(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn nonce_at(b: &[u8]) -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    n.copy_from_slice(&b[..NONCE_LEN]);
    n
}

struct Offer {
    key_id: u8,
    suites: Vec<Suite>,
    groups: Vec<DhGroup>,
}

fn parse_offer(b: &[u8]) -> Result<Offer, SepError> {
    let key_id = *b.first().ok_or(SepError::Malformed)?;
    let n = *b.get(1).ok_or(SepError::Malformed)? as usize;
    let suites = b.get(2..2 + n).ok_or(SepError::Malformed)?;
    let m = *b.get(2 + n).ok_or(SepError::Malformed)? as usize;
    let groups = b.get(3 + n..3 + n + m).ok_or(SepError::Malformed)?;
    if key_id == 0 || n == 0 || m == 0 || b.len() != 3 + n + m {
        return Err(SepError::Malformed);
    }
    Ok(Offer {
        key_id,
        suites: suites.iter().filter_map(|c| suite_from_code(*c)).collect(),
        groups: groups.iter().filter_map(|c| group_from_code(*c)).collect(),
    })
}

/// `T(m) = len(m) (4) ‖ m` into the transcript hash.
fn absorb(t: &mut Sha256, m: &[u8]) {
    t.update((m.len() as u32).to_be_bytes());
    t.update(m);
}

fn hmac(key: &[u8], label: &[u8], h: &[u8; 32]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as HmacMac>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(label);
    m.update(h);
    m
}

/// The secrets of stage 3 (see the module documentation).
struct Schedule {
    okm: Zeroizing<[u8; 128]>,
}

impl Schedule {
    fn new(z: &[u8], ni: &[u8; NONCE_LEN], nr: &[u8; NONCE_LEN], h: &[u8; 32]) -> Schedule {
        let mut salt = [0u8; 2 * NONCE_LEN];
        salt[..NONCE_LEN].copy_from_slice(ni);
        salt[NONCE_LEN..].copy_from_slice(nr);
        let mut info = Vec::with_capacity(17 + 32);
        info.extend_from_slice(b"netveil-l2sec sep");
        info.extend_from_slice(h);
        let mut okm = Zeroizing::new([0u8; 128]);
        hkdf_sha256(&salt, z, &info, &mut okm[..]);
        Schedule { okm }
    }
    fn confirm_r(&self) -> &[u8] {
        &self.okm[..32]
    }
    fn confirm_i(&self) -> &[u8] {
        &self.okm[32..64]
    }
    /// (i2r, r2i) session keys.
    fn session_keys(
        &self,
        suite: Suite,
        key_id: u8,
    ) -> Result<(SessionKeys, SessionKeys), SepError> {
        let i2r = SessionKeys::derive(
            suite,
            &self.okm[64..96],
            &[b's', b'e', b'p', b' ', b'i', b'2', b'r', key_id],
        );
        let r2i = SessionKeys::derive(
            suite,
            &self.okm[96..128],
            &[b's', b'e', b'p', b' ', b'r', b'2', b'i', key_id],
        );
        match (i2r, r2i) {
            (Ok(a), Ok(b)) => Ok((a, b)),
            // Unreachable: 32-byte secrets and a short context always derive.
            _ => Err(SepError::NoCommonSuite),
        }
    }
}

// ------------------------------------------------------------------------------------------------------------
// State
// ------------------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Initiator: REQUEST sent, waiting for ACCEPT.
    Requested,
    /// Initiator: OFFER sent, waiting for SELECT (or REJECT).
    Offered,
    /// Initiator: KEY_EXCHANGE sent, waiting for KEY_EXCHANGE_ACCEPT.
    KeySent,
    /// Responder: ACCEPT sent, waiting for OFFER.
    Accepted,
    /// Responder: SELECT sent, waiting for KEY_EXCHANGE.
    Selected,
    /// Responder: KEY_EXCHANGE_ACCEPT sent, waiting for FINISH.
    KeyAccepted,
}

/// A responder's result of stage 3, installed when FINISH confirms it.
struct Pending {
    est: Box<Established>,
    confirm_i: Zeroizing<[u8; 32]>,
    h: [u8; 32],
}

struct Exchange {
    id: [u8; 8],
    stage: Stage,
    /// Initiator: the target address given to `initiate`.
    target_ip: Option<Ipv4Addr>,
    /// The peer's stated address (initiator: known from ACCEPT on).
    peer_ip: Ipv4Addr,
    ni: [u8; NONCE_LEN],
    nr: [u8; NONCE_LEN],
    key_id: u8,
    suite: Option<Suite>,
    group: Option<DhGroup>,
    lifetime_offer: u32,
    /// Over the messages of the exchange so far.
    transcript: Sha256,
    /// Initiator in stage 3: its key pair.
    keypair: Option<KeyPair>,
    /// Responder in stage 3.
    pending: Option<Pending>,
    /// The last message received and handled (a copy of it is a duplicate).
    last_rx: Vec<u8>,
    /// The last message sent (retransmitted, or resent on a duplicate).
    last_tx: Vec<u8>,
    /// Transmissions of `last_tx` so far (when this side retransmits).
    sends: u32,
    /// This side waits for an answer and retransmits; otherwise `deadline` is when the exchange is forgotten.
    retransmits: bool,
    deadline: Instant,
}

impl Exchange {
    fn initiator(&self) -> bool {
        matches!(
            self.stage,
            Stage::Requested | Stage::Offered | Stage::KeySent
        )
    }
}

/// A finished (or refused) exchange, remembered for a retransmission span.
struct Linger {
    id: [u8; 8],
    last_rx: Vec<u8>,
    /// Resent when `last_rx` comes again (empty: nothing to send).
    answer: Vec<u8>,
    until: Instant,
}

/// A token bucket for exchanges started.
#[derive(Default)]
struct Bucket {
    tokens: u32,
    last: Option<Instant>,
}

impl Bucket {
    /// Takes a token if there is one (`rate` per second, burst `rate`; 0: no limit).
    fn take(&mut self, rate: u32, now: Instant) -> bool {
        if rate == 0 {
            return true;
        }
        let interval = Duration::from_secs(1) / rate;
        match self.last {
            None => {
                self.tokens = rate;
                self.last = Some(now);
            }
            Some(last) => {
                let n = now.saturating_duration_since(last).as_nanos() / interval.as_nanos().max(1);
                if n >= u128::from(rate) {
                    self.tokens = rate;
                    self.last = Some(now);
                } else if n > 0 {
                    self.tokens = (self.tokens + n as u32).min(rate);
                    self.last = Some(last + interval * n as u32);
                }
            }
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

/// The SEP state of one host: the exchanges in progress, one per peer.
pub struct Sep {
    cfg: SepConfig,
    exchanges: HashMap<Mac, Exchange>,
    lingers: HashMap<Mac, Linger>,
    events: VecDeque<SepEvent>,
    /// Per peer, the (epoch, sequence number) of the freshest REQUEST seen, and when.
    freshest: HashMap<Mac, ((u64, u64), Instant)>,
    bucket: Bucket,
    rate_limited: u64,
    /// Exchange ids, nonces and Diffie-Hellman private keys are drawn from this (the caller's) generator.
    rng: Box<dyn Rng>,
}

fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(u32::MAX as u64)))
        .unwrap_or(now)
}

impl Sep {
    /// A host's SEP state; `rng` (the OS generator in the daemon, a seeded one in tests) draws its exchange ids,
    /// nonces and Diffie-Hellman private keys.
    pub fn new(cfg: SepConfig, rng: Box<dyn Rng>) -> Sep {
        Sep {
            rng,
            cfg,
            exchanges: HashMap::new(),
            lingers: HashMap::new(),
            events: VecDeque::new(),
            freshest: HashMap::new(),
            bucket: Bucket::default(),
            rate_limited: 0,
        }
    }
    pub fn config(&self) -> &SepConfig {
        &self.cfg
    }
    /// The generator (the node draws its sessions' first sequence numbers from it too).
    pub(crate) fn rng(&mut self) -> &mut dyn Rng {
        &mut *self.rng
    }
    /// Exchanges not started (initiations postponed, requests refused) because of the rate limit.
    pub fn rate_limited(&self) -> u64 {
        self.rate_limited
    }

    fn take_token(&mut self, now: Instant) -> bool {
        let ok = self.bucket.take(self.cfg.max_starts_per_second, now);
        if !ok {
            self.rate_limited += 1;
        }
        ok
    }

    /// Records the freshness of a REQUEST from `from`; `Stale` if it is not fresher than the freshest seen.
    fn fresh_request(
        &mut self,
        from: Mac,
        order: (u64, u64),
        now: Instant,
    ) -> Result<(), SepError> {
        if let Some((seen, at)) = self.freshest.get_mut(&from) {
            if order <= *seen {
                return Err(SepError::Stale);
            }
            *seen = order;
            *at = now;
            return Ok(());
        }
        if self.freshest.len() >= MAX_FRESHNESS {
            if let Some(old) = self
                .freshest
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(m, _)| *m)
            {
                self.freshest.remove(&old);
            }
        }
        self.freshest.insert(from, (order, now));
        Ok(())
    }

    fn attempts(&self) -> u32 {
        self.cfg.attempts.clamp(1, 32)
    }

    /// The wait after the `sends`-th transmission.
    fn backoff(&self, sends: u32) -> Duration {
        let base = self.cfg.retransmit.max(Duration::from_millis(1));
        base.saturating_mul(1u32 << sends.saturating_sub(1).min(31))
    }

    /// `retransmit · (2^attempts − 1)`: from a first transmission to the give-up.
    fn span(&self) -> Duration {
        (1..=self.attempts()).fold(Duration::ZERO, |acc, k| acc.saturating_add(self.backoff(k)))
    }

    fn lifetime_secs(&self) -> u32 {
        self.cfg.lifetime.as_secs().clamp(1, u32::MAX as u64) as u32
    }

    fn on_subnet(&self, ip: Ipv4Addr) -> bool {
        let pl = u32::from(self.cfg.prefix_len.min(32));
        if pl == 0 {
            return true;
        }
        let mask = u32::MAX << (32 - pl);
        u32::from(ip) & mask == u32::from(self.cfg.ip) & mask
    }

    fn transmit(&mut self, to: Mac, msg: Vec<u8>) {
        self.events.push_back(SepEvent::Transmit { to, msg });
    }

    fn linger(&mut self, peer: Mac, id: [u8; 8], last_rx: Vec<u8>, answer: Vec<u8>, now: Instant) {
        if self.lingers.len() >= MAX_LINGER && !self.lingers.contains_key(&peer) {
            self.lingers.retain(|_, l| l.until > now);
            if self.lingers.len() >= MAX_LINGER {
                return;
            }
        }
        let until = later(now, self.span());
        self.lingers.insert(
            peer,
            Linger {
                id,
                last_rx,
                answer,
                until,
            },
        );
    }

    /// Starts an exchange with `peer` (whose IPv4 address the caller may know from the frame that needs the
    /// session), proposing `key_id` (1..=255) for the new session. Returns false (and does nothing) if an
    /// exchange with `peer` is already in progress (also if `key_id` is 0, `peer` is this host or a group
    /// address, the configuration has no suite or no group, or the rate limit allows no exchange now).
    pub fn initiate(
        &mut self,
        peer: Mac,
        peer_ip: Option<Ipv4Addr>,
        key_id: u8,
        now: Instant,
    ) -> bool {
        self.try_initiate(peer, peer_ip, key_id, now).is_ok()
    }

    /// [`Sep::initiate`], saying why not: `Unexpected` (an exchange in progress, or arguments it cannot use) or
    /// `RateLimited`.
    pub fn try_initiate(
        &mut self,
        peer: Mac,
        peer_ip: Option<Ipv4Addr>,
        key_id: u8,
        now: Instant,
    ) -> Result<(), SepError> {
        if self.exchanges.contains_key(&peer)
            || key_id == 0
            || peer == self.cfg.mac
            || peer[0] & 1 == 1
            || self.cfg.suites.is_empty()
            || self.cfg.groups.is_empty()
        {
            return Err(SepError::Unexpected);
        }
        if !self.take_token(now) {
            return Err(SepError::RateLimited);
        }
        self.lingers.remove(&peer);
        let id = random::<8>(&mut *self.rng);
        let ni = random::<NONCE_LEN>(&mut *self.rng);
        let mut m1 = header(ty::REQUEST, self.cfg.mac, peer, &id);
        m1.extend_from_slice(&self.cfg.ip.octets());
        m1.extend_from_slice(&peer_ip.unwrap_or(Ipv4Addr::UNSPECIFIED).octets());
        m1.extend_from_slice(&ni);
        let mut transcript = Sha256::new();
        absorb(&mut transcript, &m1);
        let x = Exchange {
            id,
            stage: Stage::Requested,
            target_ip: peer_ip.filter(|ip| !ip.is_unspecified()),
            peer_ip: peer_ip.unwrap_or(Ipv4Addr::UNSPECIFIED),
            ni,
            nr: [0; NONCE_LEN],
            key_id,
            suite: None,
            group: None,
            lifetime_offer: self.lifetime_secs(),
            transcript,
            keypair: None,
            pending: None,
            last_rx: Vec::new(),
            last_tx: m1.clone(),
            sends: 1,
            retransmits: true,
            deadline: later(now, self.backoff(1)),
        };
        self.exchanges.insert(peer, x);
        self.transmit(peer, m1);
        Ok(())
    }

    /// Forgets the exchange with `peer` (in progress or finished), without an event.
    pub fn abort(&mut self, peer: &Mac) {
        self.exchanges.remove(peer);
        self.lingers.remove(peer);
    }

    /// A SEP message received from `from` (the frame's source MAC, already authenticated as a group frame) in
    /// the group frame numbered `order` = (the sender's epoch, the frame's sequence number): strictly increasing
    /// for one sender, so that a stale REQUEST is recognised (see the module documentation). On error nothing is
    /// sent (silent drop); the caller counts the reason.
    pub fn handle_message(
        &mut self,
        from: Mac,
        msg: &[u8],
        order: (u64, u64),
        now: Instant,
    ) -> Result<(), SepError> {
        let (h, body) = parse_header(msg)?;
        if h.ty == ty::ANNOUNCE {
            if h.receiver != BROADCAST || h.id != [0; 8] || !body.is_empty() {
                return Err(SepError::Malformed);
            }
            if h.sender != from || from == self.cfg.mac {
                return Err(SepError::WrongSender);
            }
            return Ok(());
        }
        if h.receiver != self.cfg.mac {
            return Err(SepError::NotTarget);
        }
        if h.sender != from || from == self.cfg.mac {
            return Err(SepError::WrongSender);
        }
        if h.ty == ty::REQUEST {
            self.fresh_request(from, order, now)?;
        }
        let in_exchange = self.exchanges.get(&from).is_some_and(|x| x.id == h.id);
        if !in_exchange {
            if let Some(l) = self.lingers.get(&from).filter(|l| l.id == h.id) {
                if l.last_rx.as_slice() == msg {
                    if !l.answer.is_empty() {
                        let answer = l.answer.clone();
                        self.transmit(from, answer);
                    }
                    return Ok(());
                }
                return Err(SepError::Unexpected);
            }
        }
        match h.ty {
            ty::REQUEST => self.on_request(from, &h, body, msg, now),
            ty::OFFER | ty::KEY_EXCHANGE | ty::FINISH => {
                self.on_responder(from, &h, body, msg, now)
            }
            _ => self.on_initiator(from, &h, body, msg, now),
        }
    }

    fn on_request(
        &mut self,
        from: Mac,
        h: &Hdr,
        body: &[u8],
        msg: &[u8],
        now: Instant,
    ) -> Result<(), SepError> {
        if body.len() != 8 + NONCE_LEN {
            return Err(SepError::Malformed);
        }
        let ip_i = ip_at(&body[0..4]);
        let target = ip_at(&body[4..8]);
        let ni = nonce_at(&body[8..]);
        if !target.is_unspecified() && target != self.cfg.ip {
            return Err(SepError::NotTarget);
        }
        if !self.on_subnet(ip_i) {
            return Err(SepError::NotOnSubnet);
        }
        let span = self.span();
        match self.exchanges.get_mut(&from) {
            Some(x) if x.initiator() => {
                // Simultaneous initiation: the lower MAC keeps its initiator role.
                if self.cfg.mac < from {
                    return Err(SepError::Unexpected);
                }
            }
            Some(x) if x.id == h.id => {
                if x.stage == Stage::Accepted && x.last_rx.as_slice() == msg {
                    x.deadline = later(now, span);
                    let answer = x.last_tx.clone();
                    self.transmit(from, answer);
                    return Ok(());
                }
                return Err(SepError::Unexpected);
            }
            // A new exchange id: the peer restarted; the new request replaces the old exchange.
            Some(_) => {}
            None => {
                let responders = self.exchanges.values().filter(|x| !x.initiator()).count();
                if responders >= MAX_RESPONDERS {
                    return Err(SepError::Busy);
                }
            }
        }
        if !self.take_token(now) {
            return Err(SepError::RateLimited);
        }
        self.exchanges.remove(&from);
        self.lingers.remove(&from);
        let nr = random::<NONCE_LEN>(&mut *self.rng);
        let mut m2 = header(ty::ACCEPT, self.cfg.mac, from, &h.id);
        m2.extend_from_slice(&nr);
        m2.extend_from_slice(&self.cfg.ip.octets());
        let mut transcript = Sha256::new();
        absorb(&mut transcript, msg);
        absorb(&mut transcript, &m2);
        let x = Exchange {
            id: h.id,
            stage: Stage::Accepted,
            target_ip: None,
            peer_ip: ip_i,
            ni,
            nr,
            key_id: 0,
            suite: None,
            group: None,
            lifetime_offer: 0,
            transcript,
            keypair: None,
            pending: None,
            last_rx: msg.to_vec(),
            last_tx: m2.clone(),
            sends: 1,
            retransmits: false,
            deadline: later(now, span),
        };
        self.exchanges.insert(from, x);
        self.transmit(from, m2);
        Ok(())
    }

    /// OFFER, KEY_EXCHANGE and FINISH: messages to a responder.
    fn on_responder(
        &mut self,
        from: Mac,
        h: &Hdr,
        body: &[u8],
        msg: &[u8],
        now: Instant,
    ) -> Result<(), SepError> {
        let span = self.span();
        let own = self.cfg.mac;
        let x = match self.exchanges.get_mut(&from) {
            Some(x) if x.id == h.id && !x.initiator() => x,
            _ => return Err(SepError::Unexpected),
        };
        if x.last_rx.as_slice() == msg {
            // A duplicate of the message we answered: the same answer again.
            if !x.retransmits {
                x.deadline = later(now, span);
            }
            let answer = x.last_tx.clone();
            self.transmit(from, answer);
            return Ok(());
        }
        match (h.ty, x.stage) {
            (ty::OFFER, Stage::Accepted) => {
                let offer = parse_offer(body)?;
                let suite = offer
                    .suites
                    .iter()
                    .copied()
                    .find(|s| self.cfg.suites.contains(s));
                let group = offer
                    .groups
                    .iter()
                    .copied()
                    .find(|g| self.cfg.groups.contains(g));
                let (suite, group) = match (suite, group) {
                    (Some(s), Some(g)) => (s, g),
                    (s, _) => {
                        let (code, reason) = if s.is_none() {
                            (REJECT_NO_SUITE, SepError::NoCommonSuite)
                        } else {
                            (REJECT_NO_GROUP, SepError::NoCommonGroup)
                        };
                        let mut rej = header(ty::REJECT, own, from, &h.id);
                        rej.push(code);
                        let id = h.id;
                        self.exchanges.remove(&from);
                        self.transmit(from, rej.clone());
                        self.events
                            .push_back(SepEvent::Failed { peer: from, reason });
                        self.linger(from, id, msg.to_vec(), rej, now);
                        return Ok(());
                    }
                };
                let mut m4 = header(ty::SELECT, own, from, &h.id);
                m4.extend_from_slice(&[offer.key_id, suite_code(suite), group_code(group)]);
                absorb(&mut x.transcript, msg);
                absorb(&mut x.transcript, &m4);
                x.key_id = offer.key_id;
                x.suite = Some(suite);
                x.group = Some(group);
                x.stage = Stage::Selected;
                x.last_rx = msg.to_vec();
                x.last_tx = m4.clone();
                x.deadline = later(now, span);
                self.transmit(from, m4);
                Ok(())
            }
            (ty::KEY_EXCHANGE, Stage::Selected) => {
                let (Some(suite), Some(group)) = (x.suite, x.group) else {
                    return Err(SepError::Unexpected);
                };
                if body.len() != 4 + public_len(group) {
                    return Err(SepError::Malformed);
                }
                let offer = u32_at(body);
                if offer == 0 {
                    return Err(SepError::Malformed);
                }
                let kei = &body[4..];
                let kp = KeyPair::generate(dh_group(group), &mut *self.rng);
                let z = kp.agree(kei).map_err(|_| SepError::BadKeyShare)?;
                let own_lifetime = self.cfg.lifetime.as_secs().clamp(1, u32::MAX as u64) as u32;
                let accepted = offer.min(own_lifetime);
                let mut m6 = header(ty::KEY_EXCHANGE_ACCEPT, own, from, &h.id);
                m6.extend_from_slice(&accepted.to_be_bytes());
                m6.extend_from_slice(kp.public());
                drop(kp);
                let mut t = x.transcript.clone();
                absorb(&mut t, msg);
                absorb(&mut t, &m6);
                let hash: [u8; 32] = t.finalize().into();
                let sched = Schedule::new(&z, &x.ni, &x.nr, &hash);
                let (i2r, r2i) = sched.session_keys(suite, x.key_id)?;
                let mac_r = hmac(sched.confirm_r(), b"responder", &hash)
                    .finalize()
                    .into_bytes();
                m6.extend_from_slice(&mac_r);
                let mut confirm_i = Zeroizing::new([0u8; 32]);
                confirm_i.copy_from_slice(sched.confirm_i());
                x.pending = Some(Pending {
                    est: Box::new(Established {
                        peer: from,
                        peer_ip: x.peer_ip,
                        initiator: false,
                        key_id: x.key_id,
                        suite,
                        tx: r2i,
                        rx: i2r,
                        lifetime: Duration::from_secs(accepted.into()),
                    }),
                    confirm_i,
                    h: hash,
                });
                x.stage = Stage::KeyAccepted;
                x.last_rx = msg.to_vec();
                x.last_tx = m6.clone();
                x.sends = 1;
                x.retransmits = true;
                let wait = self.backoff(1);
                let x = self.exchanges.get_mut(&from).expect("exchange present");
                x.deadline = later(now, wait);
                self.transmit(from, m6);
                Ok(())
            }
            (ty::FINISH, Stage::KeyAccepted) => {
                if body.len() != CONFIRM_LEN {
                    return Err(SepError::Malformed);
                }
                let Some(p) = x.pending.as_ref() else {
                    return Err(SepError::Unexpected);
                };
                let ok = hmac(&p.confirm_i[..], b"initiator", &p.h)
                    .verify_slice(body)
                    .is_ok();
                let id = x.id;
                let Some(x) = self.exchanges.remove(&from) else {
                    return Err(SepError::Unexpected);
                };
                if ok {
                    if let Some(p) = x.pending {
                        self.events.push_back(SepEvent::Established(p.est));
                    }
                    self.linger(from, id, msg.to_vec(), Vec::new(), now);
                } else {
                    self.events.push_back(SepEvent::Failed {
                        peer: from,
                        reason: SepError::BadConfirm,
                    });
                }
                Ok(())
            }
            _ => Err(SepError::Unexpected),
        }
    }

    /// ACCEPT, SELECT, KEY_EXCHANGE_ACCEPT and REJECT: messages to an initiator.
    fn on_initiator(
        &mut self,
        from: Mac,
        h: &Hdr,
        body: &[u8],
        msg: &[u8],
        now: Instant,
    ) -> Result<(), SepError> {
        let own = self.cfg.mac;
        let first_wait = self.backoff(1);
        let x = match self.exchanges.get_mut(&from) {
            Some(x) if x.id == h.id && x.initiator() => x,
            _ => return Err(SepError::Unexpected),
        };
        if x.last_rx.as_slice() == msg {
            // A duplicate of an answer already handled.
            return Ok(());
        }
        match (h.ty, x.stage) {
            (ty::ACCEPT, Stage::Requested) => {
                if body.len() != NONCE_LEN + 4 {
                    return Err(SepError::Malformed);
                }
                let nr = nonce_at(body);
                let ip_r = ip_at(&body[NONCE_LEN..]);
                if x.target_ip.is_some_and(|t| t != ip_r) {
                    return Err(SepError::NotTarget);
                }
                let suites: Vec<u8> = self
                    .cfg
                    .suites
                    .iter()
                    .take(255)
                    .map(|s| suite_code(*s))
                    .collect();
                let groups: Vec<u8> = self
                    .cfg
                    .groups
                    .iter()
                    .take(255)
                    .map(|g| group_code(*g))
                    .collect();
                let mut m3 = header(ty::OFFER, own, from, &h.id);
                m3.push(x.key_id);
                m3.push(suites.len() as u8);
                m3.extend_from_slice(&suites);
                m3.push(groups.len() as u8);
                m3.extend_from_slice(&groups);
                absorb(&mut x.transcript, msg);
                absorb(&mut x.transcript, &m3);
                x.nr = nr;
                x.peer_ip = ip_r;
                x.stage = Stage::Offered;
                x.last_rx = msg.to_vec();
                x.last_tx = m3.clone();
                x.sends = 1;
                x.deadline = later(now, first_wait);
                self.transmit(from, m3);
                Ok(())
            }
            (ty::SELECT, Stage::Offered) => {
                if body.len() != 3 {
                    return Err(SepError::Malformed);
                }
                let suite = suite_from_code(body[1]).ok_or(SepError::Malformed)?;
                let group = group_from_code(body[2]).ok_or(SepError::Malformed)?;
                if body[0] != x.key_id {
                    return Err(SepError::Unexpected);
                }
                if !self.cfg.suites.iter().take(255).any(|s| *s == suite) {
                    return Err(SepError::NoCommonSuite);
                }
                if !self.cfg.groups.iter().take(255).any(|g| *g == group) {
                    return Err(SepError::NoCommonGroup);
                }
                let kp = KeyPair::generate(dh_group(group), &mut *self.rng);
                let mut m5 = header(ty::KEY_EXCHANGE, own, from, &h.id);
                m5.extend_from_slice(&x.lifetime_offer.to_be_bytes());
                m5.extend_from_slice(kp.public());
                absorb(&mut x.transcript, msg);
                absorb(&mut x.transcript, &m5);
                x.suite = Some(suite);
                x.group = Some(group);
                x.keypair = Some(kp);
                x.stage = Stage::KeySent;
                x.last_rx = msg.to_vec();
                x.last_tx = m5.clone();
                x.sends = 1;
                x.deadline = later(now, first_wait);
                self.transmit(from, m5);
                Ok(())
            }
            (ty::REJECT, Stage::Offered) => {
                let reason = match body {
                    [REJECT_NO_SUITE] => SepError::NoCommonSuite,
                    [REJECT_NO_GROUP] => SepError::NoCommonGroup,
                    _ => return Err(SepError::Malformed),
                };
                self.exchanges.remove(&from);
                self.events
                    .push_back(SepEvent::Failed { peer: from, reason });
                Ok(())
            }
            (ty::KEY_EXCHANGE_ACCEPT, Stage::KeySent) => {
                let (Some(suite), Some(group), Some(kp)) = (x.suite, x.group, x.keypair.as_ref())
                else {
                    return Err(SepError::Unexpected);
                };
                let plen = public_len(group);
                if body.len() != 4 + plen + CONFIRM_LEN {
                    return Err(SepError::Malformed);
                }
                let accepted = u32_at(body);
                if accepted == 0 || accepted > x.lifetime_offer {
                    return Err(SepError::Malformed);
                }
                let ker = &body[4..4 + plen];
                let mac_r = &body[4 + plen..];
                let z = kp.agree(ker).map_err(|_| SepError::BadKeyShare)?;
                let m6_without_mac = &msg[..msg.len() - CONFIRM_LEN];
                let mut t = x.transcript.clone();
                absorb(&mut t, m6_without_mac);
                let hash: [u8; 32] = t.finalize().into();
                let sched = Schedule::new(&z, &x.ni, &x.nr, &hash);
                let confirmed = hmac(sched.confirm_r(), b"responder", &hash)
                    .verify_slice(mac_r)
                    .is_ok();
                let keys = if confirmed {
                    Some(sched.session_keys(suite, x.key_id)?)
                } else {
                    None
                };
                let Some(x) = self.exchanges.remove(&from) else {
                    return Err(SepError::Unexpected);
                };
                let Some((i2r, r2i)) = keys else {
                    self.events.push_back(SepEvent::Failed {
                        peer: from,
                        reason: SepError::BadConfirm,
                    });
                    return Ok(());
                };
                let mac_i = hmac(sched.confirm_i(), b"initiator", &hash)
                    .finalize()
                    .into_bytes();
                let mut m7 = header(ty::FINISH, own, from, &h.id);
                m7.extend_from_slice(&mac_i);
                self.transmit(from, m7.clone());
                self.events
                    .push_back(SepEvent::Established(Box::new(Established {
                        peer: from,
                        peer_ip: x.peer_ip,
                        initiator: true,
                        key_id: x.key_id,
                        suite,
                        tx: i2r,
                        rx: r2i,
                        lifetime: Duration::from_secs(accepted.into()),
                    })));
                self.linger(from, x.id, msg.to_vec(), m7, now);
                Ok(())
            }
            _ => Err(SepError::Unexpected),
        }
    }

    /// Retransmissions and give-ups due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due: Vec<Mac> = self
            .exchanges
            .iter()
            .filter(|(_, x)| x.deadline <= now)
            .map(|(m, _)| *m)
            .collect();
        due.sort_unstable();
        let attempts = self.attempts();
        for peer in due {
            let Some(x) = self.exchanges.get(&peer) else {
                continue;
            };
            if !x.retransmits {
                self.exchanges.remove(&peer);
            } else if x.sends < attempts {
                let sends = x.sends + 1;
                let wait = self.backoff(sends);
                if let Some(x) = self.exchanges.get_mut(&peer) {
                    x.sends = sends;
                    x.deadline = later(now, wait);
                    let msg = x.last_tx.clone();
                    self.transmit(peer, msg);
                }
            } else {
                self.exchanges.remove(&peer);
                self.events.push_back(SepEvent::Failed {
                    peer,
                    reason: SepError::Timeout,
                });
            }
        }
        self.lingers.retain(|_, l| l.until > now);
    }

    /// When [`Sep::handle_timeout`] should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let x = self.exchanges.values().map(|x| x.deadline);
        let l = self.lingers.values().map(|l| l.until);
        x.chain(l).min()
    }

    /// The next thing to do.
    pub fn poll_event(&mut self) -> Option<SepEvent> {
        self.events.pop_front()
    }

    /// An exchange with `peer` is in progress.
    pub fn in_progress(&self, peer: &Mac) -> bool {
        self.exchanges.contains_key(peer)
    }
}
