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
//! - 3DES, Blowfish and RC5-32/12/16 (RustCrypto), 64-bit blocks, for the paper's algorithms (legacy): the
//!   nonce's bytes 4..8 must be zero (the caller's counter stays below 2^32), the packet's first counter block is
//!   `E_K(nonce[0..4] || nonce[8..12])` and the next ones count up from it (64-bit big-endian CTR). A packet's
//!   keystream starts at a pseudo-random block, so two packets' keystreams overlap with a probability that grows
//!   with the square of the packets sent (the 64-bit birthday bound, "Sweet32"): callers cap what one key carries.
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
    /// 3DES-EDE3 in CTR mode (24-byte key).
    TdesCtr,
    /// Blowfish in CTR mode (16 to 56-byte key).
    BlowfishCtr,
    /// RC5-32/12/16 in CTR mode (16-byte key).
    Rc5Ctr,
}

impl StreamAlg {
    /// The key lengths it takes (bytes).
    pub fn key_lens(self) -> core::ops::RangeInclusive<usize> {
        match self {
            StreamAlg::Aes128Ctr | StreamAlg::Rc5Ctr => 16..=16,
            StreamAlg::Aes256Ctr | StreamAlg::ChaCha20 => 32..=32,
            StreamAlg::TdesCtr => 24..=24,
            StreamAlg::BlowfishCtr => 16..=56,
        }
    }

    /// The shortest key it takes.
    pub fn key_len(self) -> usize {
        *self.key_lens().start()
    }

    /// Whether its blocks are 64 bits (see the module documentation: the nonce's bytes 4..8 must be zero).
    pub fn block64(self) -> bool {
        matches!(
            self,
            StreamAlg::TdesCtr | StreamAlg::BlowfishCtr | StreamAlg::Rc5Ctr
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            StreamAlg::Aes128Ctr => "AES-128-CTR",
            StreamAlg::Aes256Ctr => "AES-256-CTR",
            StreamAlg::ChaCha20 => "ChaCha20",
            StreamAlg::TdesCtr => "3DES-CTR",
            StreamAlg::BlowfishCtr => "Blowfish-CTR",
            StreamAlg::Rc5Ctr => "RC5-32/12/16-CTR",
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
    if !alg.key_lens().contains(&key.len()) {
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
        StreamAlg::TdesCtr => Box::new(Block64(
            <des::TdesEde3 as ctr::cipher::KeyInit>::new_from_slice(key)
                .map_err(|_| bad_len(alg, key))?,
        )),
        StreamAlg::BlowfishCtr => Box::new(Block64(
            <blowfish::Blowfish as ctr::cipher::KeyInit>::new_from_slice(key)
                .map_err(|_| bad_len(alg, key))?,
        )),
        StreamAlg::Rc5Ctr => Box::new(Rc5(
            <Rc5_32_12_16 as ctr010::cipher::KeyInit>::new_from_slice(key)
                .map_err(|_| bad_len(alg, key))?,
        )),
    })
}

fn bad_len(alg: StreamAlg, key: &[u8]) -> KeyError {
    KeyError::BadLength {
        alg: alg.name(),
        expected: alg.key_len(),
        got: key.len(),
    }
}

/// The 64-bit initial block of a nonce whose bytes 4..8 are zero (see the module documentation); `None`
/// otherwise.
fn nonce64(nonce: &[u8; 12]) -> Option<[u8; 8]> {
    if nonce[4..8] != [0; 4] {
        return None;
    }
    let mut n = [0u8; 8];
    n[..4].copy_from_slice(&nonce[..4]);
    n[4..].copy_from_slice(&nonce[8..]);
    Some(n)
}

/// A 64-bit block cipher of the `cipher` 0.4 traits (3DES, Blowfish) in CTR mode from an encrypted nonce.
struct Block64<C>(C);

impl<C> StreamCipher for Block64<C>
where
    C: ctr::cipher::BlockEncrypt
        + ctr::cipher::BlockCipher
        + ctr::cipher::BlockSizeUser<BlockSize = ctr::cipher::consts::U8>
        + Clone
        + Send
        + Sync,
{
    fn apply(&self, nonce: &[u8; 12], data: &mut [u8]) {
        use ctr::cipher::{InnerIvInit, StreamCipher as _};
        let Some(n) = nonce64(nonce) else {
            data.fill(0);
            return;
        };
        let mut iv = ctr::cipher::generic_array::GenericArray::from(n);
        self.0.encrypt_block(&mut iv);
        let core = ctr::CtrCore::<C, ctr::flavors::Ctr64BE>::inner_iv_init(self.0.clone(), &iv);
        let mut s = ctr::cipher::StreamCipherCoreWrapper::from_core(core);
        s.apply_keystream(data);
    }
}

/// RC5 with 32-bit words, 12 rounds and a 16-byte key, as the RC5 paper's examples.
type Rc5_32_12_16 = rc5::RC5<u32, ctr010::cipher::consts::U12, ctr010::cipher::consts::U16>;

/// RC5-32/12/16 (`cipher` 0.5 traits) in CTR mode from an encrypted nonce.
struct Rc5(Rc5_32_12_16);

impl StreamCipher for Rc5 {
    fn apply(&self, nonce: &[u8; 12], data: &mut [u8]) {
        use ctr010::cipher::{BlockCipherEncrypt, InnerIvInit, StreamCipher as _};
        let Some(n) = nonce64(nonce) else {
            data.fill(0);
            return;
        };
        let mut iv = ctr010::cipher::Array::from(n);
        self.0.encrypt_block(&mut iv);
        let core = ctr010::CtrCore::<Rc5_32_12_16, ctr010::flavors::Ctr64BE>::inner_iv_init(
            self.0.clone(),
            &iv,
        );
        let mut s = ctr010::cipher::StreamCipherCoreWrapper::from_core(core);
        s.apply_keystream(data);
    }
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
