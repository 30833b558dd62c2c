//! AEADs: AES-GCM-128/256 (16-byte tag via aws-lc-rs; 12- and 8-byte tags via RustCrypto aes-gcm) and
//! ChaCha20-Poly1305 (aws-lc-rs).
//!
//! aes-gcm 0.10 only supports tags of 12..=16 bytes, so the 8-byte ICV of RFC 4106 is built from the full-tag
//! cipher by truncation (see `RcGcm8`). AES-GMAC is AES-GCM with an empty plaintext: callers pass everything as AAD.

use core::fmt;

use aes_gcm::aead::consts::U12;
use aes_gcm::aead::generic_array::typenum::Unsigned;
use aes_gcm::aead::generic_array::GenericArray;
use aes_gcm::aead::{AeadCore, AeadInPlace, KeyInit};
use aes_gcm::aes::{Aes128, Aes192, Aes256};
use aes_gcm::AesGcm;
use aws_lc_rs::aead::{
    Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_192_GCM, AES_256_GCM, CHACHA20_POLY1305,
};

use crate::{Aead, AuthError, KeyError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AeadAlg {
    /// AES-GCM with a 16-, 12- or 8-byte tag; key 16 bytes.
    AesGcm128 { tag_len: usize },
    /// AES-GCM with a 16-, 12- or 8-byte tag; key 24 bytes.
    AesGcm192 { tag_len: usize },
    /// AES-GCM with a 16-, 12- or 8-byte tag; key 32 bytes.
    AesGcm256 { tag_len: usize },
    /// ChaCha20-Poly1305 (RFC 8439); key 32 bytes, 16-byte tag.
    ChaCha20Poly1305,
}

impl AeadAlg {
    pub fn key_len(self) -> usize {
        match self {
            AeadAlg::AesGcm128 { .. } => 16,
            AeadAlg::AesGcm192 { .. } => 24,
            AeadAlg::AesGcm256 { .. } | AeadAlg::ChaCha20Poly1305 => 32,
        }
    }
    pub fn tag_len(self) -> usize {
        match self {
            AeadAlg::AesGcm128 { tag_len }
            | AeadAlg::AesGcm192 { tag_len }
            | AeadAlg::AesGcm256 { tag_len } => tag_len,
            AeadAlg::ChaCha20Poly1305 => 16,
        }
    }
    /// Human-readable algorithm name (used in error messages and `Debug` output).
    pub fn name(self) -> &'static str {
        match self {
            AeadAlg::AesGcm128 { tag_len: 16 } => "AES-GCM-128-16",
            AeadAlg::AesGcm128 { tag_len: 12 } => "AES-GCM-128-12",
            AeadAlg::AesGcm128 { tag_len: 8 } => "AES-GCM-128-8",
            AeadAlg::AesGcm128 { .. } => "AES-GCM-128",
            AeadAlg::AesGcm192 { tag_len: 16 } => "AES-GCM-192-16",
            AeadAlg::AesGcm192 { tag_len: 12 } => "AES-GCM-192-12",
            AeadAlg::AesGcm192 { tag_len: 8 } => "AES-GCM-192-8",
            AeadAlg::AesGcm192 { .. } => "AES-GCM-192",
            AeadAlg::AesGcm256 { tag_len: 16 } => "AES-GCM-256-16",
            AeadAlg::AesGcm256 { tag_len: 12 } => "AES-GCM-256-12",
            AeadAlg::AesGcm256 { tag_len: 8 } => "AES-GCM-256-8",
            AeadAlg::AesGcm256 { .. } => "AES-GCM-256",
            AeadAlg::ChaCha20Poly1305 => "ChaCha20-Poly1305",
        }
    }
}

/// Builds a key object (key schedule computed once). Errors on a wrong key length or unsupported tag length.
pub fn new_aead(alg: AeadAlg, key: &[u8]) -> Result<Box<dyn Aead>, KeyError> {
    let name = alg.name();
    if key.len() != alg.key_len() {
        return Err(KeyError::BadLength {
            alg: name,
            expected: alg.key_len(),
            got: key.len(),
        });
    }
    Ok(match (alg, alg.tag_len()) {
        (AeadAlg::ChaCha20Poly1305, _) => Box::new(AwsLcAead::new(&CHACHA20_POLY1305, key, name)?),
        (AeadAlg::AesGcm128 { .. }, 16) => Box::new(AwsLcAead::new(&AES_128_GCM, key, name)?),
        (AeadAlg::AesGcm192 { .. }, 16) => Box::new(AwsLcAead::new(&AES_192_GCM, key, name)?),
        (AeadAlg::AesGcm192 { .. }, 12) => {
            Box::new(RcGcm::<AesGcm<Aes192, U12, U12>>::new(key, name)?)
        }
        (AeadAlg::AesGcm192 { .. }, 8) => Box::new(RcGcm8::<AesGcm<Aes192, U12>>::new(key, name)?),
        (AeadAlg::AesGcm192 { .. }, _) => {
            return Err(KeyError::Unusable(
                "AES-GCM-192 supports only 16-, 12- or 8-byte tags",
            ))
        }
        (AeadAlg::AesGcm256 { .. }, 16) => Box::new(AwsLcAead::new(&AES_256_GCM, key, name)?),
        (AeadAlg::AesGcm128 { .. }, 12) => {
            Box::new(RcGcm::<AesGcm<Aes128, U12, U12>>::new(key, name)?)
        }
        (AeadAlg::AesGcm128 { .. }, 8) => Box::new(RcGcm8::<AesGcm<Aes128, U12>>::new(key, name)?),
        (AeadAlg::AesGcm256 { .. }, 12) => {
            Box::new(RcGcm::<AesGcm<Aes256, U12, U12>>::new(key, name)?)
        }
        (AeadAlg::AesGcm256 { .. }, 8) => Box::new(RcGcm8::<AesGcm<Aes256, U12>>::new(key, name)?),
        (AeadAlg::AesGcm128 { .. }, _) => {
            return Err(KeyError::Unusable(
                "AES-GCM-128 supports only 16-, 12- or 8-byte tags",
            ))
        }
        (AeadAlg::AesGcm256 { .. }, _) => {
            return Err(KeyError::Unusable(
                "AES-GCM-256 supports only 16-, 12- or 8-byte tags",
            ))
        }
    })
}

/// Copies a seal's tag (truncated to the caller's tag buffer). Without a tag (only for lengths beyond the
/// per-nonce limits) it fails closed: never leave plaintext in a buffer the caller is about to transmit.
fn finish_seal(computed: Option<&[u8]>, in_out: &mut [u8], tag: &mut [u8]) {
    match computed {
        Some(t) => {
            let n = t.len().min(tag.len());
            tag[..n].copy_from_slice(&t[..n]);
        }
        None => {
            in_out.fill(0);
            tag.fill(0);
        }
    }
}

/// Full-tag AEADs through aws-lc-rs (AES-GCM with 16-byte tags, ChaCha20-Poly1305).
struct AwsLcAead {
    key: LessSafeKey,
    name: &'static str,
}

impl AwsLcAead {
    fn new(
        alg: &'static aws_lc_rs::aead::Algorithm,
        key: &[u8],
        name: &'static str,
    ) -> Result<Self, KeyError> {
        let key = UnboundKey::new(alg, key).map_err(|_| KeyError::Unusable(name))?;
        Ok(Self {
            key: LessSafeKey::new(key),
            name,
        })
    }
}

impl fmt::Debug for AwsLcAead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Aead")
            .field("alg", &self.name)
            .finish_non_exhaustive()
    }
}

impl Aead for AwsLcAead {
    fn tag_len(&self) -> usize {
        16
    }

    fn seal(&self, nonce: &[u8; 12], aad: &[u8], in_out: &mut [u8], tag: &mut [u8]) {
        debug_assert_eq!(tag.len(), 16, "{}: tag buffer must be 16 bytes", self.name);
        let nonce = Nonce::assume_unique_for_key(*nonce);
        let r = self
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(aad), in_out);
        finish_seal(r.as_ref().map(|t| t.as_ref()).ok(), in_out, tag);
    }

    fn open(
        &self,
        nonce: &[u8; 12],
        aad: &[u8],
        in_out: &mut [u8],
        tag: &[u8],
    ) -> Result<(), AuthError> {
        if tag.len() != 16 {
            return Err(AuthError);
        }
        let nonce = Nonce::assume_unique_for_key(*nonce);
        // Detached-tag open without copying: aws-lc `EVP_AEAD_CTX_open_gather` with in == out. aws-lc already
        // clears the output on failure; zero again since the Rust API documents the buffer as unspecified.
        match self
            .key
            .open_in_place_separate_tag(nonce, Aad::from(aad), tag, in_out)
        {
            Ok(_) => Ok(()),
            Err(_) => {
                in_out.fill(0);
                Err(AuthError)
            }
        }
    }
}

/// Truncated-tag AES-GCM (RFC 4106 ICV lengths 12 and 8) through RustCrypto `aes-gcm`.
struct RcGcm<C> {
    cipher: C,
    name: &'static str,
}

impl<C: KeyInit> RcGcm<C> {
    fn new(key: &[u8], name: &'static str) -> Result<Self, KeyError> {
        let cipher = C::new_from_slice(key).map_err(|_| KeyError::Unusable(name))?;
        Ok(Self { cipher, name })
    }
}

impl<C> fmt::Debug for RcGcm<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Aead")
            .field("alg", &self.name)
            .finish_non_exhaustive()
    }
}

impl<C> Aead for RcGcm<C>
where
    C: AeadInPlace + AeadCore<NonceSize = U12> + Send + Sync,
{
    fn tag_len(&self) -> usize {
        C::TagSize::USIZE
    }

    fn seal(&self, nonce: &[u8; 12], aad: &[u8], in_out: &mut [u8], tag: &mut [u8]) {
        debug_assert_eq!(
            tag.len(),
            C::TagSize::USIZE,
            "{}: wrong tag buffer length",
            self.name
        );
        let r = self
            .cipher
            .encrypt_in_place_detached(GenericArray::from_slice(nonce), aad, in_out);
        finish_seal(r.as_ref().map(|t| t.as_slice()).ok(), in_out, tag);
    }

    fn open(
        &self,
        nonce: &[u8; 12],
        aad: &[u8],
        in_out: &mut [u8],
        tag: &[u8],
    ) -> Result<(), AuthError> {
        if tag.len() != C::TagSize::USIZE {
            return Err(AuthError);
        }
        // aes-gcm 0.10 verifies the tag (constant time) before decrypting, so on failure `in_out` still holds
        // the ciphertext, as the trait allows.
        self.cipher
            .decrypt_in_place_detached(
                GenericArray::from_slice(nonce),
                aad,
                in_out,
                GenericArray::from_slice(tag),
            )
            .map_err(|_| AuthError)
    }
}

/// AES-GCM with an 8-byte ICV (RFC 4106) built on RustCrypto's full-tag AES-GCM, whose tag-size parameter only
/// allows 12..=16 bytes. The GCM tag is truncated to its first 8 bytes (NIST SP 800-38D, section 5.2.1.2).
///
/// Opening uses only the public in-place API: GCM encryption with the same nonce is its own inverse on the
/// data, so (1) "encrypting" the ciphertext yields the plaintext, (2) encrypting that plaintext restores the
/// ciphertext and yields the full tag over (AAD, ciphertext), which is compared in constant time with the
/// received 8 bytes, and (3) only on success is the ciphertext decrypted again. This costs three passes per
/// open, acceptable for a rarely negotiated ICV length; on failure `in_out` holds the ciphertext again.
struct RcGcm8<C> {
    cipher: C,
    name: &'static str,
}

impl<C: KeyInit> RcGcm8<C> {
    fn new(key: &[u8], name: &'static str) -> Result<Self, KeyError> {
        let cipher = C::new_from_slice(key).map_err(|_| KeyError::Unusable(name))?;
        Ok(Self { cipher, name })
    }
}

impl<C> fmt::Debug for RcGcm8<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Aead")
            .field("alg", &self.name)
            .finish_non_exhaustive()
    }
}

const TRUNC8: usize = 8;

impl<C> Aead for RcGcm8<C>
where
    C: AeadInPlace + AeadCore<NonceSize = U12> + Send + Sync,
{
    fn tag_len(&self) -> usize {
        TRUNC8
    }

    fn seal(&self, nonce: &[u8; 12], aad: &[u8], in_out: &mut [u8], tag: &mut [u8]) {
        debug_assert_eq!(tag.len(), TRUNC8, "{}: wrong tag buffer length", self.name);
        let r = self
            .cipher
            .encrypt_in_place_detached(GenericArray::from_slice(nonce), aad, in_out);
        let n = TRUNC8.min(tag.len());
        let tag = &mut tag[..n];
        finish_seal(r.as_ref().map(|t| t.as_slice()).ok(), in_out, tag);
    }

    fn open(
        &self,
        nonce: &[u8; 12],
        aad: &[u8],
        in_out: &mut [u8],
        tag: &[u8],
    ) -> Result<(), AuthError> {
        use subtle::ConstantTimeEq;
        if tag.len() != TRUNC8 {
            return Err(AuthError);
        }
        let nonce = GenericArray::from_slice(nonce);
        // (1) ciphertext -> plaintext (unauthenticated; the tag of this pass is meaningless).
        if self
            .cipher
            .encrypt_in_place_detached(nonce, aad, in_out)
            .is_err()
        {
            return Err(AuthError);
        }
        // (2) plaintext -> ciphertext again, with the full tag over (aad, ciphertext).
        let full = match self.cipher.encrypt_in_place_detached(nonce, aad, in_out) {
            Ok(t) => t,
            Err(_) => {
                in_out.fill(0);
                return Err(AuthError);
            }
        };
        if !bool::from(full[..TRUNC8].ct_eq(tag)) {
            return Err(AuthError);
        }
        // (3) authenticated: decrypt for real.
        if self
            .cipher
            .encrypt_in_place_detached(nonce, aad, in_out)
            .is_err()
        {
            in_out.fill(0);
            return Err(AuthError);
        }
        Ok(())
    }
}
