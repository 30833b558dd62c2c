//! The caps and timers of an endpoint's responder side ([`Limits`]): half-open SAs, cookies, IKE SAs in all,
//! fragment sizes.

use std::time::Duration;

/// Caps and timers of an endpoint's responder side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most half-open responder SAs at once; an IKE_SA_INIT beyond it is dropped (even with a valid cookie).
    pub half_open_max: usize,
    /// From this many half-open SAs on, an IKE_SA_INIT without a valid cookie is answered with a COOKIE notify
    /// only (no state kept).
    pub cookie_threshold: usize,
    /// A half-open SA is removed this long after its IKE_SA_INIT.
    pub half_open_timeout: Duration,
    /// The cookie secret is replaced this often (the previous one is still accepted until the next change).
    pub cookie_secret_lifetime: Duration,
    /// Most IKE SAs in all.
    pub ike_sa_max: usize,
    /// With fragmentation (RFC 7383) agreed, an encrypted message longer than this goes in fragments of at most
    /// this many bytes (IKE header included): 1200 leaves room for IPv6, UDP and the non-ESP marker in 1280.
    pub fragment_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            half_open_max: 1024,
            cookie_threshold: 64,
            half_open_timeout: Duration::from_secs(30),
            cookie_secret_lifetime: Duration::from_secs(300),
            ike_sa_max: 65536,
            fragment_len: 1200,
        }
    }
}
