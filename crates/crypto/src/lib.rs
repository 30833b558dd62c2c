//! netveil's cryptographic suites behind small object-safe traits.
//!
//! Every key schedule is computed once, when a key object is built (one per SA and direction); per-packet calls
//! only run the cipher over caller buffers, in place, without allocating. Primitives come from vetted libraries:
//! aws-lc-rs for AES-GCM, AES-GMAC and ChaCha20-Poly1305, RustCrypto for CBC modes, HMAC and truncated-tag GCM.
//!
//! The traits know nothing of ESP: the `netveil-ipsec` crate composes them into ESP and AH transforms.
//!
//! Randomness and key derivation live here too, for the protocol crates to be given: [`rand::Rng`] (the OS
//! generator [`rand::OsRng`] for the runtime, a seeded one for tests) and [`kdf`] (HKDF, SP 800-108, IKEv2 prf+).

#![forbid(unsafe_code)]

pub mod aead;
pub mod cbc;
pub mod dh;
#[cfg(any(fuzzing, test))]
mod fuzz;
pub mod kdf;
pub mod kem;
pub mod mac;
pub mod rand;
pub mod sig;
pub mod stream;

pub use aead::{new_aead, AeadAlg};
pub use cbc::{new_cbc, CbcAlg, IvGen};
pub use mac::{new_mac, HashAlg};
pub use stream::{new_stream, StreamAlg, StreamCipher};

/// Whether this build has the fuzzing stand-ins for Diffie-Hellman, ML-KEM and signatures (cheap, deterministic,
/// insecure: see `src/fuzz.rs`): only with `--cfg fuzzing`, which `cargo fuzz` sets. `false` in every other build;
/// `crates/netveil/tests/no_fuzz_crypto.rs` checks it, and that [`FUZZ_CRYPTO_LABEL`] is not in the binary.
pub const FUZZ_CRYPTO: bool = cfg!(fuzzing);

/// The bytes every fuzzing stand-in hashes first: in a binary only if the stand-ins are in it.
pub const FUZZ_CRYPTO_LABEL: &[u8] =
    b"netveil fuzz-only crypto: deterministic, insecure, never in a release";

/// An ICV or tag did not verify. Deliberately carries no detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("authentication failed")]
pub struct AuthError;

/// A key of the wrong length (or otherwise unusable) was given when building a key object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("{alg} needs a {expected}-byte key, got {got} bytes")]
    BadLength {
        alg: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("{0}")]
    Unusable(&'static str),
}

/// An AEAD with a 12-byte nonce. `in_out` is encrypted/decrypted in place; the tag is detached.
pub trait Aead: Send + Sync {
    /// Length of the tag this key produces and checks (16, or 12/8 for truncated GCM).
    fn tag_len(&self) -> usize;
    /// Encrypts `in_out` in place and writes `tag_len()` bytes of tag into `tag`.
    fn seal(&self, nonce: &[u8; 12], aad: &[u8], in_out: &mut [u8], tag: &mut [u8]);
    /// Verifies `tag` over `aad` and `in_out`, then decrypts `in_out` in place. On failure `in_out` holds no
    /// plaintext (it is left as ciphertext or zeroed) and `AuthError` is returned.
    fn open(
        &self,
        nonce: &[u8; 12],
        aad: &[u8],
        in_out: &mut [u8],
        tag: &[u8],
    ) -> Result<(), AuthError>;
}

/// A block cipher in CBC mode without padding (the caller pads). `data.len()` must be a multiple of
/// `block_len()`; `iv.len()` equals `block_len()`.
pub trait CbcCipher: Send + Sync {
    fn block_len(&self) -> usize;
    fn encrypt(&self, iv: &[u8], data: &mut [u8]);
    fn decrypt(&self, iv: &[u8], data: &mut [u8]);
}

/// A keyed MAC with a possibly truncated output (HMAC-SHA1-96 and friends).
pub trait Mac: Send + Sync {
    /// Length of the (truncated) tag.
    fn tag_len(&self) -> usize;
    /// MAC over the concatenation of `parts`; writes `tag_len()` bytes into `tag`.
    fn compute(&self, parts: &[&[u8]], tag: &mut [u8]);
    /// Constant-time comparison of the computed (truncated) tag with `tag`.
    fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> Result<(), AuthError>;
}
