//! The per-session cipher state, built once from [`SessionKeys`]: version 0 (block cipher in CBC or ECB with
//! HMAC-SHA1, IVs computed from the Base IV Number) and version 1 (AEAD with a salted nonce).
//!
//! - BIVN = HMAC-SHA1(K_auth, K_enc) (20 bytes; its first block-length bytes are used).
//! - Version 0 IV (CBC) for the 64-bit sequence number `s`: `IV = E_K(BIVN[..b] XOR (0…0 ‖ s as 8 bytes
//!   big-endian))`, `b` the block length (8 or 16): one block-cipher call per frame, never sent, unpredictable
//!   without the key and distinct for distinct `s`.
//! - Version 1 nonce: `salt (4) ‖ s (8, big-endian)`; while `s < 2^32` this is ESP's `salt ‖ 0000 ‖ seq`.

use cbc::cipher::block_padding::NoPadding;
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, InnerIvInit, KeyInit};
use netveil_crypto::{new_aead, new_cbc, new_mac, Aead, AeadAlg, CbcAlg, CbcCipher, HashAlg, Mac};

use crate::error::ConfigError;
use crate::keys::SessionKeys;
use crate::suite::{BlockAlg, Suite, HMAC_LEN, SALT_LEN, TAG_LEN};

/// Blowfish (RustCrypto, big-endian as Schneier specifies) in CBC mode without padding, behind netveil-crypto's
/// [`CbcCipher`] trait. The key schedule is computed once; each call runs CBC over a clone of it.
pub struct BlowfishCbc {
    cipher: blowfish::Blowfish,
}

impl BlowfishCbc {
    /// Keys Blowfish with 4..=56 bytes.
    pub fn new(key: &[u8]) -> Result<Self, ConfigError> {
        let cipher =
            blowfish::Blowfish::new_from_slice(key).map_err(|_| ConfigError::KeyLength {
                what: "Blowfish key (4..=56)",
                expected: 16,
                got: key.len(),
            })?;
        Ok(BlowfishCbc { cipher })
    }
}

impl core::fmt::Debug for BlowfishCbc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BlowfishCbc").finish_non_exhaustive()
    }
}

impl CbcCipher for BlowfishCbc {
    fn block_len(&self) -> usize {
        8
    }

    fn encrypt(&self, iv: &[u8], data: &mut [u8]) {
        let Ok(enc) =
            cbc::Encryptor::<blowfish::Blowfish>::inner_iv_slice_init(self.cipher.clone(), iv)
        else {
            data.fill(0);
            return;
        };
        let whole = data.len() - data.len() % 8;
        let _ = enc.encrypt_padded_mut::<NoPadding>(&mut data[..whole], whole);
    }

    fn decrypt(&self, iv: &[u8], data: &mut [u8]) {
        let Ok(dec) =
            cbc::Decryptor::<blowfish::Blowfish>::inner_iv_slice_init(self.cipher.clone(), iv)
        else {
            data.fill(0);
            return;
        };
        let whole = data.len() - data.len() % 8;
        let _ = dec.decrypt_padded_mut::<NoPadding>(&mut data[..whole]);
    }
}

/// Builds the CBC cipher of a version-0 block algorithm.
pub fn block_cipher(alg: BlockAlg, key: &[u8]) -> Result<Box<dyn CbcCipher>, ConfigError> {
    Ok(match alg {
        BlockAlg::Blowfish => Box::new(BlowfishCbc::new(key)?),
        BlockAlg::Aes128 => new_cbc(CbcAlg::Aes128, key)?,
        BlockAlg::Aes256 => new_cbc(CbcAlg::Aes256, key)?,
        BlockAlg::TripleDes => new_cbc(CbcAlg::TripleDes, key)?,
    })
}

const ZERO_IV: [u8; 16] = [0; 16];

/// One session's cipher state.
pub(crate) enum Engine {
    Block {
        cipher: Box<dyn CbcCipher>,
        mac: Box<dyn Mac>,
        ecb: bool,
        block: usize,
        /// The first `block` bytes of the BIVN.
        bivn: [u8; 16],
    },
    Aead {
        aead: Box<dyn Aead>,
        salt: [u8; SALT_LEN],
    },
    /// The null suite: no cipher, no integrity check (the framing alone).
    Null,
}

impl Drop for Engine {
    /// The key schedules zeroize themselves (RustCrypto `zeroize` features); the BIVN and salt are cleared here.
    fn drop(&mut self) {
        use zeroize::Zeroize;
        match self {
            Engine::Block { bivn, .. } => bivn.zeroize(),
            Engine::Aead { salt, .. } => salt.zeroize(),
            Engine::Null => {}
        }
    }
}

impl Engine {
    /// The cipher state of `keys`' suite; the ECB suites need `insecure_ecb`, the null suite `insecure_null`.
    pub(crate) fn new(
        keys: &SessionKeys,
        insecure_ecb: bool,
        insecure_null: bool,
    ) -> Result<Engine, ConfigError> {
        let suite = keys.suite();
        if suite.is_ecb() && !insecure_ecb {
            return Err(ConfigError::EcbNotAllowed);
        }
        if suite.is_null() {
            return if insecure_null {
                Ok(Engine::Null)
            } else {
                Err(ConfigError::NullNotAllowed)
            };
        }
        Ok(match suite.block_alg() {
            Some(alg) => {
                let cipher = block_cipher(alg, keys.enc())?;
                let block = cipher.block_len();
                let mac = new_mac(HashAlg::Sha1, keys.auth(), HMAC_LEN)?;
                let mut full = zeroize::Zeroizing::new([0u8; HMAC_LEN]);
                mac.compute(&[keys.enc()], &mut full[..]);
                let mut bivn = [0u8; 16];
                bivn[..block].copy_from_slice(&full[..block]);
                Engine::Block {
                    cipher,
                    mac,
                    ecb: suite.is_ecb(),
                    block,
                    bivn,
                }
            }
            None => {
                let alg = match suite {
                    Suite::Aes128Gcm => AeadAlg::AesGcm128 { tag_len: TAG_LEN },
                    Suite::Aes256Gcm => AeadAlg::AesGcm256 { tag_len: TAG_LEN },
                    _ => AeadAlg::ChaCha20Poly1305,
                };
                Engine::Aead {
                    aead: new_aead(alg, keys.enc())?,
                    salt: keys.salt(),
                }
            }
        })
    }

    /// The CBC IV of the 64-bit sequence number `seq` (first `block` bytes of the result).
    pub(crate) fn iv(cipher: &dyn CbcCipher, bivn: &[u8; 16], block: usize, seq: u64) -> [u8; 16] {
        let mut x = [0u8; 16];
        x[..block].copy_from_slice(&bivn[..block]);
        for (a, b) in x[block - 8..block].iter_mut().zip(seq.to_be_bytes()) {
            *a ^= b;
        }
        cipher.encrypt(&ZERO_IV[..block], &mut x[..block]);
        x
    }

    /// The version-1 nonce.
    pub(crate) fn nonce(salt: &[u8; SALT_LEN], seq: u64) -> [u8; 12] {
        let mut n = [0u8; 12];
        n[..4].copy_from_slice(salt);
        n[4..].copy_from_slice(&seq.to_be_bytes());
        n
    }
}

/// Encrypts `data` (a whole number of blocks) in place, CBC with the computed IV or ECB.
pub(crate) fn block_encrypt(cipher: &dyn CbcCipher, ecb: bool, iv: &[u8], data: &mut [u8]) {
    let b = iv.len();
    if ecb {
        for blk in data.chunks_mut(b) {
            cipher.encrypt(&ZERO_IV[..b], blk);
        }
    } else {
        cipher.encrypt(iv, data);
    }
}

/// Decrypts `data` (a whole number of blocks) in place.
pub(crate) fn block_decrypt(cipher: &dyn CbcCipher, ecb: bool, iv: &[u8], data: &mut [u8]) {
    let b = iv.len();
    if ecb {
        for blk in data.chunks_mut(b) {
            cipher.decrypt(&ZERO_IV[..b], blk);
        }
    } else {
        cipher.decrypt(iv, data);
    }
}
