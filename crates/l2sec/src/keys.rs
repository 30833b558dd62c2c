//! Session key material: the encryption key, the HMAC key (version 0) or the nonce salt (version 1), held in
//! fixed arrays that are zeroized on drop and never printed. Either given explicitly (as the session
//! establishment protocol hands them over) or derived with HKDF-SHA256 (RFC 5869, [`netveil_crypto::kdf`]) from a
//! shared secret.
//!
//! Derivation: `okm = HKDF-SHA256(salt = "netveil-l2sec", ikm = secret, info = "netveil-l2sec " ‖ suite name ‖
//! 0x00 ‖ context, L = enc_key_len + auth_key_len + salt_len)`, split in that order (encryption key, then HMAC
//! key or salt).
//!
//! Group traffic: every sender derives its own keys from the network's group secret, so that no two senders use
//! the same (key, sequence number) pair and AEAD nonces and CBC IVs never repeat across senders; receivers derive
//! the same per sender.
//!
//! - Version 1 ([`SessionKeys::group_sender_epoch`]): context `"group" ‖ source MAC ‖ epoch` (the epoch as 8 bytes
//!   big-endian). The epoch is the sender's per-start value, strictly increasing across its restarts (persisted by
//!   the caller) and carried in every group frame: a restarted sender has new keys, so it never repeats a nonce
//!   even though its sequence numbers start afresh.
//! - Version 0 ([`SessionKeys::group_sender`], the thesis' static keys): context `"group" ‖ source MAC`. A sender
//!   that restarts under the same group secret starts a fresh random sequence number under the same keys: its
//!   CBC IVs may repeat, and receivers refuse what falls into their replay window. The group secret must be
//!   replaced when a version-0 host restarts.

use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::error::ConfigError;
use crate::suite::{Suite, HMAC_LEN, SALT_LEN};

const MAX_ENC: usize = 32;
const LABEL: &[u8] = b"netveil-l2sec";

/// The keys of one session direction (or of one group sender).
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct SessionKeys {
    #[zeroize(skip)]
    suite: Suite,
    enc: [u8; MAX_ENC],
    auth: [u8; HMAC_LEN],
    salt: [u8; SALT_LEN],
}

impl core::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SessionKeys")
            .field("suite", &self.suite)
            .finish_non_exhaustive()
    }
}

fn check(what: &'static str, expected: usize, got: usize) -> Result<(), ConfigError> {
    if expected == got {
        Ok(())
    } else {
        Err(ConfigError::KeyLength {
            what,
            expected,
            got,
        })
    }
}

impl SessionKeys {
    /// Explicit keys: `enc` of the suite's encryption key length; `auth` the 20-byte HMAC-SHA1 key (version 0,
    /// empty for version 1); `salt` the 4-byte nonce salt (version 1, empty for version 0).
    pub fn new(suite: Suite, enc: &[u8], auth: &[u8], salt: &[u8]) -> Result<Self, ConfigError> {
        check("encryption key", suite.enc_key_len(), enc.len())?;
        check("HMAC key", suite.auth_key_len(), auth.len())?;
        check("salt", suite.salt_len(), salt.len())?;
        let mut k = SessionKeys {
            suite,
            enc: [0; MAX_ENC],
            auth: [0; HMAC_LEN],
            salt: [0; SALT_LEN],
        };
        k.enc[..enc.len()].copy_from_slice(enc);
        k.auth[..auth.len()].copy_from_slice(auth);
        k.salt[..salt.len()].copy_from_slice(salt);
        Ok(k)
    }

    /// Keys derived from a shared `secret` (at least 16 bytes) for `context` (see the module documentation).
    pub fn derive(suite: Suite, secret: &[u8], context: &[u8]) -> Result<Self, ConfigError> {
        if secret.len() < 16 {
            return Err(ConfigError::KeyLength {
                what: "secret (at least)",
                expected: 16,
                got: secret.len(),
            });
        }
        let (e, a, s) = (suite.enc_key_len(), suite.auth_key_len(), suite.salt_len());
        let mut okm = zeroize::Zeroizing::new([0u8; MAX_ENC + HMAC_LEN]);
        let mut info = [0u8; 128];
        let name = suite.name().as_bytes();
        let prefix = 14 + name.len() + 1;
        if prefix + context.len() > info.len() {
            return Err(ConfigError::ContextTooLong);
        }
        info[..14].copy_from_slice(b"netveil-l2sec ");
        info[14..14 + name.len()].copy_from_slice(name);
        info[prefix..prefix + context.len()].copy_from_slice(context);
        hkdf_sha256(
            LABEL,
            secret,
            &info[..prefix + context.len()],
            &mut okm[..e + a + s],
        );
        Self::new(suite, &okm[..e], &okm[e..e + a], &okm[e + a..e + a + s])
    }

    /// The keys a group member `src` sends with (and that receivers use for frames from `src`), derived from the
    /// network's group secret.
    pub fn group_sender(
        suite: Suite,
        group_secret: &[u8],
        src: [u8; 6],
    ) -> Result<Self, ConfigError> {
        let mut ctx = [0u8; 11];
        ctx[..5].copy_from_slice(b"group");
        ctx[5..].copy_from_slice(&src);
        Self::derive(suite, group_secret, &ctx)
    }

    /// Version 1: the keys a group member `src` sends with in its `epoch` (see the module documentation).
    pub fn group_sender_epoch(
        suite: Suite,
        group_secret: &[u8],
        src: [u8; 6],
        epoch: u64,
    ) -> Result<Self, ConfigError> {
        let mut ctx = [0u8; 19];
        ctx[..5].copy_from_slice(b"group");
        ctx[5..11].copy_from_slice(&src);
        ctx[11..].copy_from_slice(&epoch.to_be_bytes());
        Self::derive(suite, group_secret, &ctx)
    }

    pub fn suite(&self) -> Suite {
        self.suite
    }
    pub(crate) fn enc(&self) -> &[u8] {
        &self.enc[..self.suite.enc_key_len()]
    }
    pub(crate) fn auth(&self) -> &[u8] {
        &self.auth[..self.suite.auth_key_len()]
    }
    pub(crate) fn salt(&self) -> [u8; SALT_LEN] {
        self.salt
    }
}

/// HKDF-SHA256 (RFC 5869), from `netveil_crypto::kdf` (re-exported for the known-answer tests).
pub use netveil_crypto::kdf::hkdf_sha256;
