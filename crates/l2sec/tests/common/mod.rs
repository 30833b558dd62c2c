//! Shared helpers: frames of several L3 types, keys and sessions for every suite.
#![allow(dead_code)]

use ed25519_dalek::SigningKey;
use netveil_l2sec::{RxConfig, RxSession, SessionKeys, Suite, TxConfig, TxSession};
use netveil_wire::PacketBuf;

thread_local! {
    /// The next seed of [`rng`]: each test runs on its own thread, so its generators are the same every run.
    static NEXT_SEED: std::cell::Cell<u64> = const { std::cell::Cell::new(1) };
}

/// A seeded generator (not for production), a new seed for every call of a test.
pub fn rng() -> Box<dyn netveil_crypto::rand::Rng> {
    let seed = NEXT_SEED.with(|s| s.replace(s.get() + 1));
    Box::new(netveil_crypto::rand::SeededRng::new(seed))
}

/// The next [`rng`] calls of this test use the seeds `base`, `base + 1`, ...
pub fn reseed(base: u64) {
    NEXT_SEED.with(|s| s.set(base));
}

pub const DST: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];
pub const SRC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
pub const BCAST: [u8; 6] = [0xff; 6];
pub const SECRET: [u8; 32] = [0x42; 32];
pub const HEADROOM: usize = 64;
pub const TAILROOM: usize = 128;

/// EtherTypes exercised: IPv4, IPv6, ARP, and another (IEEE 802.1X EAPOL).
pub const ETHERTYPES: [u16; 4] = [0x0800, 0x86dd, 0x0806, 0x888e];

/// A frame `dst | src | ethertype | payload`.
pub fn frame_bytes(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An L3 payload of `len` bytes for `ethertype`: a plausible header prefix (IPv4, IPv6, ARP) then a pattern.
pub fn l3(ethertype: u16, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(7))
        .collect();
    let prefix: &[u8] = match ethertype {
        0x0800 => &[0x45, 0x00, 0x05, 0xdc, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11],
        0x86dd => &[0x60, 0x00, 0x00, 0x00, 0x05, 0xb4, 0x11, 0x40],
        0x0806 => &[0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01],
        _ => &[0x01, 0x00, 0x00, 0x05],
    };
    let n = prefix.len().min(len);
    p[..n].copy_from_slice(&prefix[..n]);
    p
}

pub fn buf(bytes: &[u8]) -> PacketBuf {
    PacketBuf::from_slice(bytes, HEADROOM, TAILROOM)
}

pub fn keys(suite: Suite) -> SessionKeys {
    SessionKeys::derive(suite, &SECRET, b"unicast test").unwrap()
}

pub fn signer(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

pub fn tx_cfg(suite: Suite) -> TxConfig {
    TxConfig {
        insecure_ecb: suite.is_ecb(),
        insecure_null: suite.is_null(),
        ..TxConfig::default()
    }
}

pub fn rx_cfg(suite: Suite) -> RxConfig {
    RxConfig {
        insecure_ecb: suite.is_ecb(),
        insecure_null: suite.is_null(),
        security_numbers: [Some(0x00ab_cdef), Some(7)],
        ..RxConfig::default()
    }
}

/// A matching pair of sessions for `suite` with the default configuration (ECB allowed for ECB suites, the null
/// suite for itself).
pub fn pair(suite: Suite) -> (TxSession, RxSession) {
    let k = keys(suite);
    (
        TxSession::new(&k, tx_cfg(suite), &mut rng()).unwrap(),
        RxSession::new(&k, rx_cfg(suite)).unwrap(),
    )
}

/// The suites that need no insecure switch (neither ECB nor null).
pub fn secure_suites() -> impl Iterator<Item = Suite> {
    Suite::ALL.into_iter().filter(|s| !s.is_insecure())
}
