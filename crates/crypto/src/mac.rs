//! HMAC over MD5, SHA-1 and SHA-2 (RustCrypto), keyed once (inner/outer pad state precomputed), with truncation.

use core::fmt;

use hmac::Hmac;
use md5::Md5;
use sha1::Sha1;
use sha2::{Sha256, Sha384, Sha512};
use subtle::ConstantTimeEq;

use crate::{AuthError, KeyError, Mac};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashAlg {
    Md5,
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl HashAlg {
    /// Full output length of the hash.
    pub fn output_len(self) -> usize {
        match self {
            HashAlg::Md5 => 16,
            HashAlg::Sha1 => 20,
            HashAlg::Sha256 => 32,
            HashAlg::Sha384 => 48,
            HashAlg::Sha512 => 64,
        }
    }
    /// Human-readable HMAC name (used in error messages and `Debug` output).
    pub fn hmac_name(self) -> &'static str {
        match self {
            HashAlg::Md5 => "HMAC-MD5",
            HashAlg::Sha1 => "HMAC-SHA1",
            HashAlg::Sha256 => "HMAC-SHA256",
            HashAlg::Sha384 => "HMAC-SHA384",
            HashAlg::Sha512 => "HMAC-SHA512",
        }
    }
}

/// Largest hash output we support (SHA-512).
const MAX_OUT: usize = 64;

/// HMAC with `hash` keyed with `key` (any length, per RFC 2104), tags truncated to `tag_len` bytes
/// (1..=output_len).
pub fn new_mac(hash: HashAlg, key: &[u8], tag_len: usize) -> Result<Box<dyn Mac>, KeyError> {
    if tag_len == 0 || tag_len > hash.output_len() {
        return Err(KeyError::Unusable(match hash {
            HashAlg::Md5 => "HMAC-MD5 tag length must be 1..=16 bytes",
            HashAlg::Sha1 => "HMAC-SHA1 tag length must be 1..=20 bytes",
            HashAlg::Sha256 => "HMAC-SHA256 tag length must be 1..=32 bytes",
            HashAlg::Sha384 => "HMAC-SHA384 tag length must be 1..=48 bytes",
            HashAlg::Sha512 => "HMAC-SHA512 tag length must be 1..=64 bytes",
        }));
    }
    let name = hash.hmac_name();
    Ok(match hash {
        HashAlg::Md5 => Box::new(HmacKey::<Hmac<Md5>>::new(key, tag_len, name)?),
        HashAlg::Sha1 => Box::new(HmacKey::<Hmac<Sha1>>::new(key, tag_len, name)?),
        HashAlg::Sha256 => Box::new(HmacKey::<Hmac<Sha256>>::new(key, tag_len, name)?),
        HashAlg::Sha384 => Box::new(HmacKey::<Hmac<Sha384>>::new(key, tag_len, name)?),
        HashAlg::Sha512 => Box::new(HmacKey::<Hmac<Sha512>>::new(key, tag_len, name)?),
    })
}

/// A keyed HMAC state (ipad/opad blocks already absorbed); cloned per message.
struct HmacKey<M> {
    mac: M,
    tag_len: usize,
    name: &'static str,
}

impl<M: hmac::Mac + hmac::digest::KeyInit> HmacKey<M> {
    fn new(key: &[u8], tag_len: usize, name: &'static str) -> Result<Self, KeyError> {
        // HMAC accepts keys of any length; this cannot fail.
        let mac = <M as hmac::Mac>::new_from_slice(key).map_err(|_| KeyError::Unusable(name))?;
        Ok(Self { mac, tag_len, name })
    }
}

impl<M: hmac::Mac + Clone> HmacKey<M> {
    /// Computes the full tag into `out`, returning its length.
    fn full(&self, parts: &[&[u8]], out: &mut [u8; MAX_OUT]) -> usize {
        let mut m = self.mac.clone();
        for p in parts {
            m.update(p);
        }
        let full = m.finalize().into_bytes();
        out[..full.len()].copy_from_slice(&full);
        full.len()
    }
}

impl<M> fmt::Debug for HmacKey<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mac")
            .field("alg", &self.name)
            .field("tag_len", &self.tag_len)
            .finish_non_exhaustive()
    }
}

impl<M> Mac for HmacKey<M>
where
    M: hmac::Mac + Clone + Send + Sync,
{
    fn tag_len(&self) -> usize {
        self.tag_len
    }

    fn compute(&self, parts: &[&[u8]], tag: &mut [u8]) {
        debug_assert_eq!(
            tag.len(),
            self.tag_len,
            "{}: wrong tag buffer length",
            self.name
        );
        let mut buf = [0u8; MAX_OUT];
        self.full(parts, &mut buf);
        let n = self.tag_len.min(tag.len());
        tag[..n].copy_from_slice(&buf[..n]);
    }

    fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> Result<(), AuthError> {
        if tag.len() != self.tag_len {
            return Err(AuthError);
        }
        let mut buf = [0u8; MAX_OUT];
        self.full(parts, &mut buf);
        if bool::from(buf[..self.tag_len].ct_eq(tag)) {
            Ok(())
        } else {
            Err(AuthError)
        }
    }
}

/// SHA-1 over the concatenation of `parts` (a plain digest, no key): IKEv2's NAT detection hashes (RFC 7296
/// section 2.23) are SHA-1 by definition. Not for anything that needs collision resistance.
pub fn sha1_digest(parts: &[&[u8]]) -> [u8; 20] {
    use sha1::Digest;
    let mut h = Sha1::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

#[cfg(test)]
mod digest_tests {
    /// FIPS 180 example "abc", split across parts.
    #[test]
    fn sha1_of_abc() {
        assert_eq!(
            hex::encode(super::sha1_digest(&[b"a", b"bc"])),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
    }
}
