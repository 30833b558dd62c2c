//! The responder's stateless cookies (RFC 7296 2.6): `version | HMAC-SHA256(secret, Ni | IPi | SPIi)`, the secret
//! drawn from the endpoint's RNG and replaced every [`super::Limits::cookie_secret_lifetime`] (the previous one is
//! still accepted until the next change).

use std::net::SocketAddr;
use std::time::Instant;

use netveil_crypto::mac::{new_mac, HashAlg};

use super::Endpoint;

impl Endpoint {
    pub(super) fn rotate_cookie_secret(&mut self, now: Instant) {
        if now.saturating_duration_since(self.cookie.since) >= self.limits.cookie_secret_lifetime {
            let mut next = [0u8; 32];
            self.rng.fill(&mut next);
            let old = std::mem::replace(&mut self.cookie.current, next);
            self.cookie.previous = Some((self.cookie.version, old));
            self.cookie.version = self.cookie.version.wrapping_add(1);
            self.cookie.since = now;
        }
    }

    /// `version | HMAC-SHA256(secret, Ni | IPi | SPIi)` (RFC 7296 2.6's suggestion, keyed).
    pub(super) fn cookie_for(
        secret: &[u8; 32],
        version: u8,
        ni: &[u8],
        from: SocketAddr,
        spi_i: u64,
    ) -> Vec<u8> {
        let ip = match from.ip() {
            std::net::IpAddr::V4(a) => a.octets().to_vec(),
            std::net::IpAddr::V6(a) => a.octets().to_vec(),
        };
        let mac = new_mac(HashAlg::Sha256, secret, 32).expect("HMAC-SHA256 takes any key");
        let mut out = vec![version; 33];
        mac.compute(&[ni, &ip, &spi_i.to_be_bytes()], &mut out[1..]);
        out
    }

    pub(super) fn cookie_valid(&self, got: &[u8], ni: &[u8], from: SocketAddr, spi_i: u64) -> bool {
        use subtle::ConstantTimeEq;
        let Some(&v) = got.first() else {
            return false;
        };
        let secret = if v == self.cookie.version {
            &self.cookie.current
        } else {
            match &self.cookie.previous {
                Some((pv, s)) if *pv == v => s,
                _ => return false,
            }
        };
        let want = Self::cookie_for(secret, v, ni, from, spi_i);
        want.len() == got.len() && bool::from(want.ct_eq(got))
    }
}
