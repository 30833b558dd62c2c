//! CBC block ciphers (RustCrypto): AES-128/192/256 and 3DES (EDE3), plus an unpredictable IV generator.

use core::fmt;

use aes::{Aes128, Aes192, Aes256};
use cbc::cipher::block_padding::NoPadding;
use cbc::cipher::generic_array::typenum::Unsigned;
use cbc::cipher::generic_array::GenericArray;
use cbc::cipher::{
    BlockCipher, BlockDecrypt, BlockDecryptMut, BlockEncrypt, BlockEncryptMut, BlockSizeUser,
    InnerIvInit, KeyInit,
};
use des::TdesEde3;
use zeroize::Zeroizing;

use crate::{CbcCipher, KeyError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CbcAlg {
    Aes128,
    Aes192,
    Aes256,
    /// 3DES-EDE with a 24-byte key, 8-byte blocks.
    TripleDes,
}

impl CbcAlg {
    pub fn key_len(self) -> usize {
        match self {
            CbcAlg::Aes128 => 16,
            CbcAlg::Aes192 | CbcAlg::TripleDes => 24,
            CbcAlg::Aes256 => 32,
        }
    }
    pub fn block_len(self) -> usize {
        match self {
            CbcAlg::TripleDes => 8,
            _ => 16,
        }
    }
    /// Human-readable algorithm name (used in error messages and `Debug` output).
    pub fn name(self) -> &'static str {
        match self {
            CbcAlg::Aes128 => "AES-128-CBC",
            CbcAlg::Aes192 => "AES-192-CBC",
            CbcAlg::Aes256 => "AES-256-CBC",
            CbcAlg::TripleDes => "3DES-EDE3-CBC",
        }
    }
}

pub fn new_cbc(alg: CbcAlg, key: &[u8]) -> Result<Box<dyn CbcCipher>, KeyError> {
    let name = alg.name();
    if key.len() != alg.key_len() {
        return Err(KeyError::BadLength {
            alg: name,
            expected: alg.key_len(),
            got: key.len(),
        });
    }
    Ok(match alg {
        CbcAlg::Aes128 => Box::new(Cbc::<Aes128>::new(key, name)?),
        CbcAlg::Aes192 => Box::new(Cbc::<Aes192>::new(key, name)?),
        CbcAlg::Aes256 => Box::new(Cbc::<Aes256>::new(key, name)?),
        CbcAlg::TripleDes => Box::new(Cbc::<TdesEde3>::new(key, name)?),
    })
}

/// A keyed block cipher (key schedule computed once); each call runs CBC over a clone of it.
struct Cbc<C> {
    cipher: C,
    name: &'static str,
}

impl<C: KeyInit> Cbc<C> {
    fn new(key: &[u8], name: &'static str) -> Result<Self, KeyError> {
        let cipher = C::new_from_slice(key).map_err(|_| KeyError::Unusable(name))?;
        Ok(Self { cipher, name })
    }
}

impl<C> fmt::Debug for Cbc<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CbcCipher")
            .field("alg", &self.name)
            .finish_non_exhaustive()
    }
}

impl<C> CbcCipher for Cbc<C>
where
    C: BlockCipher + BlockEncrypt + BlockDecrypt + Clone + Send + Sync,
{
    fn block_len(&self) -> usize {
        C::BlockSize::USIZE
    }

    fn encrypt(&self, iv: &[u8], data: &mut [u8]) {
        let bl = C::BlockSize::USIZE;
        debug_assert_eq!(iv.len(), bl, "{}: IV must be one block", self.name);
        debug_assert_eq!(
            data.len() % bl,
            0,
            "{}: data must be a multiple of the block length",
            self.name
        );
        let Ok(enc) = cbc::Encryptor::<C>::inner_iv_slice_init(self.cipher.clone(), iv) else {
            // Wrong IV length (caller bug): fail closed rather than leave plaintext to be sent.
            data.fill(0);
            return;
        };
        let whole = data.len() - data.len() % bl;
        // With NoPadding and a whole number of blocks this cannot fail.
        let _ = enc.encrypt_padded_mut::<NoPadding>(&mut data[..whole], whole);
    }

    fn decrypt(&self, iv: &[u8], data: &mut [u8]) {
        let bl = C::BlockSize::USIZE;
        debug_assert_eq!(iv.len(), bl, "{}: IV must be one block", self.name);
        debug_assert_eq!(
            data.len() % bl,
            0,
            "{}: data must be a multiple of the block length",
            self.name
        );
        let Ok(dec) = cbc::Decryptor::<C>::inner_iv_slice_init(self.cipher.clone(), iv) else {
            data.fill(0);
            return;
        };
        let whole = data.len() - data.len() % bl;
        let _ = dec.decrypt_padded_mut::<NoPadding>(&mut data[..whole]);
    }
}

/// Unpredictable per-packet IVs for CBC without a syscall per packet: IV = AES-128-ECB(random key, counter),
/// truncated to the IV length. Built once per outbound SA, its key drawn from the caller's RNG.
pub struct IvGen {
    cipher: Aes128,
}

impl IvGen {
    pub fn new(rng: &mut dyn crate::rand::Rng) -> Self {
        let mut key = Zeroizing::new([0u8; 16]);
        rng.fill(&mut key[..]);
        Self {
            cipher: Aes128::new(GenericArray::from_slice(&key[..])),
        }
    }
    /// Writes an IV for the (unique) `counter` into `out` (8 or 16 bytes).
    pub fn fill(&self, counter: u64, out: &mut [u8]) {
        debug_assert!(
            out.len() <= Aes128::block_size(),
            "IV longer than one AES block"
        );
        let mut block = GenericArray::default();
        block[8..].copy_from_slice(&counter.to_be_bytes());
        self.cipher.encrypt_block(&mut block);
        let n = out.len().min(block.len());
        out[..n].copy_from_slice(&block[..n]);
    }
}

impl fmt::Debug for IvGen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IvGen").finish_non_exhaustive()
    }
}
