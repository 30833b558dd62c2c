//! Length-preserving stream encryption under a 96-bit nonce, for PILSC's confidentiality-only mode (no tag: the
//! caller says plainly that nothing is authenticated).
//!
//! - AES-128/256-CTR (aws-lc-rs): the counter block starts at `nonce || 00000002`, GCM's first data block, so the
//!   ciphertext is AES-GCM's for the same key and nonce without its tag (GCM's published vectors are this
//!   cipher's known answers).
//! - ChaCha20 (RFC 8439): from block counter 1, the block RFC 8439's AEAD encrypts with, so the ciphertext is
//!   ChaCha20-Poly1305's without its tag (section 2.4.2's example is this cipher's known answer). aws-lc-rs
//!   exposes ChaCha20 only inside the AEAD, so the keystream is applied by its seal, whose tag is dropped: the
//!   same operation both ways (XOR), at the price of the unused Poly1305 pass.
//!
//! A (key, nonce) pair must never be used twice: the callers' nonces carry a per-key counter.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
use aws_lc_rs::cipher::{EncryptingKey, EncryptionContext, UnboundCipherKey, AES_128, AES_256};
use aws_lc_rs::iv::FixedLength;

use crate::KeyError;

/// A stream cipher of this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamAlg {
    Aes128Ctr,
    Aes256Ctr,
    ChaCha20,
}

impl StreamAlg {
    pub fn key_len(self) -> usize {
        match self {
            StreamAlg::Aes128Ctr => 16,
            StreamAlg::Aes256Ctr | StreamAlg::ChaCha20 => 32,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StreamAlg::Aes128Ctr => "AES-128-CTR",
            StreamAlg::Aes256Ctr => "AES-256-CTR",
            StreamAlg::ChaCha20 => "ChaCha20",
        }
    }
}

/// A keyed stream cipher (key schedule computed once).
pub trait StreamCipher: Send + Sync {
    /// XORs `data` with the keystream of `nonce`: encrypts plaintext, decrypts ciphertext.
    fn apply(&self, nonce: &[u8; 12], data: &mut [u8]);
}

/// Builds a key object; errors on a wrong key length.
pub fn new_stream(alg: StreamAlg, key: &[u8]) -> Result<Box<dyn StreamCipher>, KeyError> {
    if key.len() != alg.key_len() {
        return Err(KeyError::BadLength {
            alg: alg.name(),
            expected: alg.key_len(),
            got: key.len(),
        });
    }
    let unusable = |_| KeyError::Unusable("stream cipher key rejected");
    Ok(match alg {
        StreamAlg::Aes128Ctr | StreamAlg::Aes256Ctr => {
            let a = if alg == StreamAlg::Aes128Ctr {
                &AES_128
            } else {
                &AES_256
            };
            let k = UnboundCipherKey::new(a, key).map_err(unusable)?;
            Box::new(AesCtr(EncryptingKey::ctr(k).map_err(unusable)?))
        }
        StreamAlg::ChaCha20 => {
            let k = UnboundKey::new(&CHACHA20_POLY1305, key).map_err(unusable)?;
            Box::new(ChaCha(LessSafeKey::new(k)))
        }
    })
}

struct AesCtr(EncryptingKey);

impl StreamCipher for AesCtr {
    fn apply(&self, nonce: &[u8; 12], data: &mut [u8]) {
        let mut block = [0u8; 16];
        block[..12].copy_from_slice(nonce);
        block[15] = 2;
        // CTR takes any length and this IV: it cannot fail; if it ever did, the data must not stay readable.
        if self
            .0
            .less_safe_encrypt(data, EncryptionContext::Iv128(FixedLength::from(block)))
            .is_err()
        {
            data.fill(0);
        }
    }
}

struct ChaCha(LessSafeKey);

impl StreamCipher for ChaCha {
    fn apply(&self, nonce: &[u8; 12], data: &mut [u8]) {
        let n = Nonce::assume_unique_for_key(*nonce);
        // The tag (of an AEAD nobody checks) is dropped; the length limit (256 GiB) is far above a packet.
        if self
            .0
            .seal_in_place_separate_tag(n, Aad::empty(), data)
            .is_err()
        {
            data.fill(0);
        }
    }
}
