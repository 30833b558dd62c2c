//! l2sec: a layer-2 protocol that hides and authenticates everything above the MAC addresses of every Ethernet
//! frame, after R. A. Campillo Terrero, "A Layer 2 Protocol to Protect the IP Communication in a Wired Ethernet
//! Network" (RIT, 2014). Offline core: no I/O, no clock reads (time is passed in), no allocation per frame;
//! cipher state is built once per session and secrets are zeroized and never printed.
//!
//! - [`header`]: zero-copy view and parsed form of the clear header (versions 0 and 1, every flag combination).
//! - [`suite`]: the suites (version 0: Blowfish/AES-128/AES-256/3DES in CBC with HMAC-SHA1, ECB only behind
//!   `insecure_ecb`; version 1: AES-GCM-128/256, ChaCha20-Poly1305).
//! - [`keys`]: session keys, given or derived with HKDF-SHA256, and the per-sender keys of group traffic.
//! - [`engine`]: the cipher state and the IV/nonce formulas; Blowfish-CBC behind netveil-crypto's `CbcCipher`.
//! - [`session`]: [`TxSession::seal`] and [`RxSession::open`] in place on a [`netveil_wire::PacketBuf`], and
//!   [`peek`] to pick the session of a received frame.
//!
//! # Frame
//!
//! A clear frame `dst MAC | src MAC | EtherType | L3 packet` becomes
//!
//! ```text
//! +---------+---------+-----------------+--------------+-----------+----------+-----------+---------+-----+
//! | dst MAC | src MAC | l2sec EtherType | clear header | EtherType | pad size | L3 packet | padding | ICV |
//! |   6 B   |   6 B   |  2 B (0x88B5)   |   5..21 B    |    2 B    |   1 B    |  n bytes  | 0..b-1  |     |
//! +---------+---------+-----------------+--------------+-----------+----------+-----------+---------+-----+
//!                                                      \_______ encrypted section (if ENC) _________/
//! \_________________________________ covered by the ICV (all bytes before it) _________________________/
//! ```
//!
//! The l2sec EtherType is [`DEFAULT_ETHERTYPE`] (0x88B5, IEEE local experimental) or configured (e.g.
//! [`THESIS_ETHERTYPE`] 0x1982). The L3 packet is whatever followed the EtherType: IPv4, IPv6, ARP or any other
//! protocol. Padding (version 0 with ENC only) fills the encrypted section to a multiple of the block length
//! `b` (8 for Blowfish and 3DES, 16 for AES); its bytes are 1, 2, …, pad size, and the pad size is below `b`.
//! Without encryption, and always in version 1, the pad size is 0. VLAN tags get no special treatment: an
//! 802.1Q frame is protected like any other EtherType (the tag and the inner EtherType travel inside the
//! encrypted section, so switches see an untagged l2sec frame), and it comes out of `open` as it went in.
//!
//! # Clear header
//!
//! Byte 0, both versions:
//!
//! ```text
//!   7   6   5   4   3   2   1   0
//! +---+---+---+---+---+---+---+---+
//! |  version  | SN| TS|R/E|SIG|ENC|     SN 0x10, TS 0x08, reserved (v0) / EP (v1) 0x04, SIG 0x02, ENC 0x01
//! +---+---+---+---+---+---+---+---+
//! ```
//!
//! Version 0 defaults (encryption, nothing else) give 0x01. Version 0, 5 + 3·SN + 4·TS bytes (5, 8, 9, 12):
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |0 0 0|S|T|R|G|E|        sequence number (bits 31..8)           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | seq (7..0)    |   security number (24 bits, only if S)        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                timestamp (32 bits, only if T)                 |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! In version 0 the bit 0x04 is the thesis' reserved bit: sent as zero, and a frame with it set is refused.
//!
//! Version 1 (first byte 0x21 with encryption), 6 + 8·EP + 3·SN + 4·TS bytes (6 to 21), adds a key id that the
//! receiver uses to tell the sessions of one peer apart across rekeying, and for group frames (EP set, first
//! byte 0x25, 0x27 signed) the sender's 64-bit epoch:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |0 0 1|S|T|P|G|E|    key id     |   sequence number (31..16)    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |   sequence number (15..0)     |     epoch (63..48, if P)      |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    epoch (47..16, if P)                       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     epoch (15..0, if P)       |  security number (23..8, if S)|
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | SN (7..0)     |       timestamp (31..8, if T)                 |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | TS (7..0)     |
//! +-+-+-+-+-+-+-+-+
//! ```
//!
//! Group frames carry key id 0 and the epoch; unicast frames carry their session's key id (1..=255) and no epoch.
//! (This is a wire change from netveil's first version-1 frames, whose group frames had an 8-bit epoch in the
//! key-id byte and no EP field: the two do not interoperate.)
//!
//! In both versions a field that is absent takes no room: without EP the security number follows the sequence
//! number, without SN the timestamp does.
//! All fields are big-endian. The security number (shared by all hosts, changed on a schedule) must be one the
//! receiver accepts; the timestamp (seconds, normally Unix time modulo 2^32) must be within the receiver's
//! tolerance of its `now`.
//!
//! # Sequence numbers
//!
//! 32 bits on the wire, starting at a random value in 1..=2^31 and increasing by one per frame. Internally
//! they are 64-bit (as ESP's extended sequence numbers, RFC 4303 Appendix A): the receiver infers the high 32
//! bits from its replay window, and they are authenticated without being sent (they enter the IV, the nonce, the
//! HMAC and the signature), so a session never wraps. Replay: one [`netveil_sa::replay::ReplayWindow`] per
//! receive session (per peer, or per group sender), checked before and updated after all checks passed. A
//! number left of the window is read by the inference as one from the next 2^32 block; a frame that would put
//! the window more than 2^31 ahead is dropped as too old (no sender jumps that far). A receive session starting
//! from nothing infers the high bits as 0, so it must see the sender's traffic before its low 32 bits wrap: true
//! for unicast sessions (both ends start together); a host that joins a group late cannot follow a group
//! sender that has sent more than 2^31 frames under the current group secret (rotate group secrets well
//! before that).
//!
//! # Integrity check value and cryptography
//!
//! `s` is the 64-bit sequence number, `s_hi` its high 32 bits as 4 bytes big-endian, `F` every byte of the
//! frame before the ICV (MAC addresses, l2sec EtherType, clear header, encrypted section).
//!
//! | version, mode | ICV | bytes |
//! |---|---|---|
//! | 0 | HMAC-SHA1(K_auth, F ‖ s_hi), untruncated | 20 |
//! | 0, SIG | Ed25519 signature over F ‖ s_hi (replaces the HMAC) | 64 |
//! | 1 | AEAD tag | 16 |
//! | 1, SIG | AEAD tag, then the signature over F ‖ tag ‖ s_hi | 80 |
//! | keyless (either version), SIG required, no ENC | the signature over F ‖ s_hi | 64 |
//!
//! - Version 0: BIVN = HMAC-SHA1(K_auth, K_enc); `IV = E_K(BIVN[..b] XOR (0^(b-8) ‖ s))`, `b` the block length,
//!   `s` as 8 bytes big-endian (for 8-byte blocks the whole block). The IV is never sent; it is unpredictable
//!   without the key and distinct for each frame. CBC over the encrypted section (padded to `b`). ECB suites
//!   encrypt each block alone (no IV): only with `insecure_ecb`, for the thesis' pattern demonstration.
//! - Version 1: `nonce = salt (4) ‖ s (8 bytes big-endian)`, i.e. ESP's `salt ‖ 0000 ‖ seq` while `s < 2^32`.
//!   AAD = the MAC addresses, the l2sec EtherType and the clear header; the encrypted section is the AEAD
//!   plaintext. Without ENC the whole `F` is AAD and the plaintext is empty (authentication only).
//! - Signatures: the sender signs with its Ed25519 [`ed25519_dalek::SigningKey`]; the receiver verifies with the
//!   sender's [`ed25519_dalek::VerifyingKey`], looked up by the caller by source MAC, with `verify_strict`.
//!   Signature mode serves broadcast and multicast (anyone with the group key could forge an HMAC or AEAD tag of
//!   another member; a signature names the sender) and hosts without a session ([`TxSession::keyless`]). In
//!   version 1 the receiver checks the AEAD tag first (cheap, and it proves the sender holds the group secret)
//!   and the signature after it, over a copy of the bytes it covers that the session keeps in a reused buffer;
//!   in version 0 and keyless sessions the signature is the only check.
//!
//! Group traffic (ARP, broadcast, multicast) uses per-sender keys derived from the network's group secret
//! ([`SessionKeys::group_sender_epoch`] in version 1, with the sender's epoch; [`SessionKeys::group_sender`] in
//! version 0): a host without the group secret can neither read nor inject it.
//!
//! Version 0's limits, kept as the thesis defined them: no key id (a receiver tries the current session, then the
//! previous), no epoch (group keys are static per sender, so a restarted sender reuses them: its CBC IVs may
//! repeat and receivers refuse its frames until their window moves or the group secret changes), and signed
//! frames carry the signature instead of the HMAC (no cheaper check before it).
//!
//! - [`sep`]: the Session Establishment Protocol, a sans-I/O state machine.
//! - [`node`]: one protected host: group traffic, sessions per peer MAC, SEP, the decision for every frame.
//!
//! Not covered here: the daemon, TAP and AF_PACKET I/O (`netveil up`).

#![forbid(unsafe_code)]

// layers: node > session > engine, sep > keys > suite > error, header
pub mod engine;
mod error;
pub mod header;
pub mod keys;
pub mod node;
pub mod sep;
pub mod session;
pub mod suite;

/// The Ed25519 implementation l2sec signs and verifies with (`SigningKey`, `VerifyingKey`).
pub use ed25519_dalek;
pub use error::{ConfigError, Drop, SealError};
pub use header::{Header, Repr, Version, DEFAULT_ETHERTYPE, THESIS_ETHERTYPE};
pub use keys::SessionKeys;
pub use node::{Inbound, Node, NodeConfig, NodeDrop, Outbound};
pub use sep::{DhGroup, Established, Sep, SepConfig, SepError, SepEvent};
pub use session::{peek, Opened, Peeked, RxConfig, RxSession, SealOpts, TxConfig, TxSession};
pub use suite::Suite;
