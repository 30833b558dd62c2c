//! Stage 3's transcript hash and key schedule (see the module documentation's "Key schedule").

use hmac::{Hmac, Mac as HmacMac};
use netveil_crypto::kdf::hkdf_sha256;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::types::SepError;
use super::wire::NONCE_LEN;
use crate::keys::SessionKeys;
use crate::suite::Suite;

/// `T(m) = len(m) (4) ‖ m` into the transcript hash.
pub(super) fn absorb(t: &mut Sha256, m: &[u8]) {
    t.update((m.len() as u32).to_be_bytes());
    t.update(m);
}

pub(super) fn hmac(key: &[u8], label: &[u8], h: &[u8; 32]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as HmacMac>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(label);
    m.update(h);
    m
}

/// The secrets of stage 3 (see the module documentation).
pub(super) struct Schedule {
    okm: Zeroizing<[u8; 128]>,
}

impl Schedule {
    pub(super) fn new(
        z: &[u8],
        ni: &[u8; NONCE_LEN],
        nr: &[u8; NONCE_LEN],
        h: &[u8; 32],
    ) -> Schedule {
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
    pub(super) fn confirm_r(&self) -> &[u8] {
        &self.okm[..32]
    }
    pub(super) fn confirm_i(&self) -> &[u8] {
        &self.okm[32..64]
    }
    /// (i2r, r2i) session keys.
    pub(super) fn session_keys(
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
