//! Protocol-independent SA mechanics and the policy engine.
//!
//! - [`replay`]: the RFC 6479 anti-replay bitmap with RFC 4303 Appendix A extended-sequence-number inference:
//!   `check` before decryption, `update` only after the ICV verified.
//! - [`seq`]: the outbound sequence counter (lock-free), which stops at exhaustion instead of wrapping.
//! - [`lifetime`]: byte, packet and time lifetimes with soft (rekey) and hard (expire) limits; time is passed in.
//! - [`counters`]: per-SA and per-drop-reason counters (atomics) that `netveil status` shows, and the one registry
//!   of drop reasons ([`drop_reasons!`]) every protocol and engine declares its reasons with.
//! - [`policy`]: selectors -> protect with a bundle / bypass / discard, per direction (the SPD).
//! - [`flow_cache`]: a policy database with an exact-match flow cache in front of its lookup (per thread).
//! - [`spi`]: hash maps keyed by SPI, hashed without SipHash on the per-packet lookup.
//!
//! ESP, AH and later PSP and l2sec build their SAs from these pieces.

#![forbid(unsafe_code)]

// layers: flow_cache > counters, lifetime, policy, replay, seq, spi
pub mod counters;
pub mod flow_cache;
pub mod lifetime;
pub mod policy;
pub mod replay;
pub mod seq;
pub mod spi;
