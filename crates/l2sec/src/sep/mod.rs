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

// layers: initiator, responder > machine > schedule > wire > types
mod initiator;
mod machine;
mod responder;
mod schedule;
mod types;
mod wire;

pub use machine::{Sep, MAX_FRESHNESS, MAX_RESPONDERS};
pub use types::{DhGroup, Established, Mac, SepConfig, SepError, SepEvent};
pub use wire::{
    announce_message, group_code, group_from_code, msg_type, public_len, stated_ip, suite_code,
    suite_from_code, CONFIRM_LEN, HEADER_LEN, NONCE_LEN, VERSION,
};
