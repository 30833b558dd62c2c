//! The traits every suite implements ([`Aead`], [`CbcCipher`], [`Mac`]: small and object-safe) and the errors
//! building and using a key object returns (an [`AuthError`] that deliberately carries no detail, a [`KeyError`]).
//! The crate root re-exports them: `netveil_crypto::Aead`, `netveil_crypto::AuthError` and so on.

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
