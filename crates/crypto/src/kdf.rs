//! Key derivation functions, for the protocol crates to call with their own labels:
//!
//! - [`hkdf_sha256`]: HKDF (RFC 5869) with HMAC-SHA-256 (l2sec's session keys and SEP key schedule).
//! - [`sp800_108_cmac_aes256`]: NIST SP 800-108 KDF in counter mode with AES-256-CMAC as PRF (PSP's SA keys).
//! - [`ike_prf`] and [`ike_prf_plus`]: IKEv2's `prf` and `prf+` (RFC 7296 section 2.13) over HMAC-SHA-1/-256/-384/-512
//!   (SKEYSEED, the IKE SA keys, CHILD_SA KEYMAT).
//!
//! The PRFs come from RustCrypto (`hmac`, `cmac`); this module only chains their blocks as the specifications
//! say. Nothing here allocates: output goes into caller buffers, and intermediate blocks live in zeroized
//! arrays.

use aes::Aes256;
use cmac::Cmac;
use hmac::digest::generic_array::GenericArray;
use hmac::digest::{FixedOutput, KeyInit, OutputSizeUser};
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Sha256, Sha384, Sha512};
use zeroize::Zeroizing;

/// A derivation was asked for more output than its construction can give.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{kdf} can give at most {max} bytes, {asked} were asked for")]
pub struct OutputTooLong {
    pub kdf: &'static str,
    pub max: usize,
    pub asked: usize,
}

/// HKDF-SHA256 (RFC 5869): extract with `salt`, expand with `info` into `out`. Panics if `out` is longer than
/// 255 · 32 bytes (a caller's constant, never input).
pub fn hkdf_sha256(salt: &[u8], ikm: &[u8], info: &[u8], out: &mut [u8]) {
    assert!(out.len() <= 255 * 32, "HKDF output too long");
    let mut ext = <Hmac<Sha256> as Mac>::new_from_slice(salt).expect("HMAC takes any key length");
    ext.update(ikm);
    let mut prk = Zeroizing::new([0u8; 32]);
    finish(ext, &mut prk[..]);
    let base = <Hmac<Sha256> as Mac>::new_from_slice(&prk[..]).expect("HMAC takes any key length");
    let mut t = Zeroizing::new([0u8; 32]);
    let mut t_len = 0;
    for (i, chunk) in out.chunks_mut(32).enumerate() {
        let mut m = base.clone();
        Mac::update(&mut m, &t[..t_len]);
        Mac::update(&mut m, info);
        Mac::update(&mut m, &[i as u8 + 1]);
        finish(m, &mut t[..]);
        t_len = 32;
        chunk.copy_from_slice(&t[..chunk.len()]);
    }
}

/// NIST SP 800-108 (rev. 1, section 4.1) KDF in counter mode, PRF AES-256-CMAC keyed with `key`, a 32-bit
/// counter before the fixed input. Block `i` (from 1) is `CMAC(key, [i]_32 ‖ label ‖ 0x00 ‖ context ‖ [L]_32)`,
/// `L` the output length in bits, all integers big-endian; `out` takes the blocks in order, the last one cut.
/// Panics if `L` does not fit in 32 bits (a caller's constant, never input).
pub fn sp800_108_cmac_aes256(key: &[u8; 32], label: &[u8], context: &[u8], out: &mut [u8]) {
    let bits = u32::try_from(out.len() * 8).expect("SP 800-108 output too long");
    let base = <Cmac<Aes256> as KeyInit>::new_from_slice(key).expect("32-byte key");
    for (i, chunk) in out.chunks_mut(16).enumerate() {
        let mut m = base.clone();
        Mac::update(&mut m, &(i as u32 + 1).to_be_bytes());
        Mac::update(&mut m, label);
        Mac::update(&mut m, &[0]);
        Mac::update(&mut m, context);
        Mac::update(&mut m, &bits.to_be_bytes());
        let mut block = Zeroizing::new([0u8; 16]);
        finish(m, &mut block[..]);
        chunk.copy_from_slice(&block[..chunk.len()]);
    }
}

/// Writes the PRF's output into `buf` (exactly its output length) without a copy left on the stack.
fn finish<M: FixedOutput>(m: M, buf: &mut [u8]) {
    debug_assert_eq!(buf.len(), <M as OutputSizeUser>::output_size());
    m.finalize_into(GenericArray::from_mut_slice(buf));
}

/// An IKEv2 pseudorandom function (RFC 7296 section 3.3.2, transform type 2), all HMACs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IkePrf {
    /// PRF_HMAC_SHA1 (2).
    HmacSha1,
    /// PRF_HMAC_SHA2_256 (5).
    HmacSha256,
    /// PRF_HMAC_SHA2_384 (6).
    HmacSha384,
    /// PRF_HMAC_SHA2_512 (7).
    HmacSha512,
}

impl IkePrf {
    /// The PRF's output length in bytes (also its preferred key length, RFC 7296 section 2.14).
    pub fn output_len(self) -> usize {
        match self {
            IkePrf::HmacSha1 => 20,
            IkePrf::HmacSha256 => 32,
            IkePrf::HmacSha384 => 48,
            IkePrf::HmacSha512 => 64,
        }
    }

    /// The most bytes [`ike_prf_plus`] gives: 255 blocks.
    pub fn plus_max(self) -> usize {
        255 * self.output_len()
    }
}

/// Largest PRF output (HMAC-SHA-512).
const MAX_PRF: usize = 64;

/// `prf(key, data)`: the HMAC of the concatenation of `data` under `key` (any length), written to `out`
/// ([`IkePrf::output_len`] bytes; a shorter `out` gets the first bytes). E.g. SKEYSEED = `prf(Ni | Nr, g^ir)`.
pub fn ike_prf(prf: IkePrf, key: &[u8], data: &[&[u8]], out: &mut [u8]) {
    fn run<M: Mac + KeyInit + FixedOutput>(key: &[u8], data: &[&[u8]], out: &mut [u8]) {
        let mut m = <M as Mac>::new_from_slice(key).expect("HMAC takes any key length");
        for d in data {
            Mac::update(&mut m, d);
        }
        let mut t = Zeroizing::new([0u8; MAX_PRF]);
        let len = M::output_size();
        finish(m, &mut t[..len]);
        let n = out.len().min(len);
        out[..n].copy_from_slice(&t[..n]);
    }
    match prf {
        IkePrf::HmacSha1 => run::<Hmac<Sha1>>(key, data, out),
        IkePrf::HmacSha256 => run::<Hmac<Sha256>>(key, data, out),
        IkePrf::HmacSha384 => run::<Hmac<Sha384>>(key, data, out),
        IkePrf::HmacSha512 => run::<Hmac<Sha512>>(key, data, out),
    }
}

/// `prf+(key, seed)` (RFC 7296 section 2.13): `T1 | T2 | ...` with `T1 = prf(K, S | 0x01)` and
/// `Tn = prf(K, Tn-1 | S | n)`, cut to `out.len()`. The seed is given in parts (e.g. `[Ni, Nr, SPIi, SPIr]`),
/// which are concatenated. Refused beyond 255 blocks ([`IkePrf::plus_max`]), where the one-byte counter ends.
pub fn ike_prf_plus(
    prf: IkePrf,
    key: &[u8],
    seed: &[&[u8]],
    out: &mut [u8],
) -> Result<(), OutputTooLong> {
    if out.len() > prf.plus_max() {
        return Err(OutputTooLong {
            kdf: "IKEv2 prf+",
            max: prf.plus_max(),
            asked: out.len(),
        });
    }
    fn run<M: Mac + KeyInit + FixedOutput + Clone>(
        key: &[u8],
        seed: &[&[u8]],
        out: &mut [u8],
        n: usize,
    ) {
        let base = <M as Mac>::new_from_slice(key).expect("HMAC takes any key length");
        let mut t = Zeroizing::new([0u8; MAX_PRF]);
        let mut t_len = 0;
        for (i, chunk) in out.chunks_mut(n).enumerate() {
            let mut m = base.clone();
            Mac::update(&mut m, &t[..t_len]);
            for s in seed {
                Mac::update(&mut m, s);
            }
            Mac::update(&mut m, &[i as u8 + 1]);
            finish(m, &mut t[..n]);
            t_len = n;
            chunk.copy_from_slice(&t[..chunk.len()]);
        }
    }
    let n = prf.output_len();
    match prf {
        IkePrf::HmacSha1 => run::<Hmac<Sha1>>(key, seed, out, n),
        IkePrf::HmacSha256 => run::<Hmac<Sha256>>(key, seed, out, n),
        IkePrf::HmacSha384 => run::<Hmac<Sha384>>(key, seed, out, n),
        IkePrf::HmacSha512 => run::<Hmac<Sha512>>(key, seed, out, n),
    }
    Ok(())
}
