//! Digital signatures over aws-lc-rs: private keys as files hold them (PKCS#8, and the traditional forms
//! strongSwan's `pki --gen` and OpenSSL write: PKCS#1 `RSA PRIVATE KEY`, RFC 5915 `EC PRIVATE KEY`; PEM or DER),
//! public keys from a SubjectPublicKeyInfo or its raw key bits, and the schemes IKEv2 uses: RSA PKCS#1 v1.5 and
//! PSS with SHA-2 (SHA-1 PKCS#1 for verification only, legacy), ECDSA P-256/P-384 (P-521 verification only) with a
//! DER-encoded signature (RFC 7427) or the fixed `r || s` form (RFC 4754's classic methods), and Ed25519.
//!
//! Private keys live inside aws-lc-rs key objects (AWS-LC clears them when they are freed); the decoded file bytes
//! are zeroized; `Debug` prints the key type and size, never key bytes.
//!
//! Randomness: aws-lc-rs draws ECDSA's nonce and PSS's salt from AWS-LC's own generator and ignores a caller's
//! one, so [`PrivateKey::sign`] takes none (RSA PKCS#1 v1.5 and Ed25519 are deterministic).

use core::fmt;

#[cfg(not(fuzzing))]
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self as s, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
use x509_parser::oid_registry::{
    OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_NIST_EC_P384, OID_NIST_EC_P521,
    OID_PKCS1_RSAENCRYPTION, OID_SIG_ED25519,
};
use x509_parser::prelude::FromDer;
use x509_parser::x509::SubjectPublicKeyInfo;
use zeroize::Zeroizing;

use crate::AuthError;

pub use crate::alg::{KeyKind, Scheme, SigHash};

/// A key or signature that could not be used. Carries no key bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigError {
    #[error("not a private key in PEM or DER (PKCS#8, PKCS#1 RSA or RFC 5915 EC)")]
    NotAKey,
    #[error("the private key is encrypted (store it decrypted, readable by root only)")]
    Encrypted,
    #[error(
        "unsupported key type (RSA 2048 to 8192 bits, ECDSA P-256/P-384 and Ed25519 are supported)"
    )]
    UnsupportedKey,
    #[error("not a SubjectPublicKeyInfo of an RSA, ECDSA P-256/P-384/P-521 or Ed25519 key")]
    BadPublicKey,
    #[error("{scheme:?} cannot be used with an {key} key")]
    Unsupported { key: KeyKind, scheme: Scheme },
    #[error("signing failed")]
    SignFailed,
}

// With `--cfg fuzzing` the stand-in signs (see `crate::fuzz`): the keys are still parsed, not all used.
#[cfg_attr(fuzzing, allow(dead_code))]
enum Inner {
    Rsa(RsaKeyPair),
    /// The same key twice: aws-lc-rs ties a key pair to one signature encoding.
    Ecdsa {
        kind: KeyKind,
        der: EcdsaKeyPair,
        fixed: EcdsaKeyPair,
    },
    Ed25519(Ed25519KeyPair),
}

/// A private signing key.
pub struct PrivateKey(Inner);

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Inner::Rsa(k) => write!(f, "PrivateKey(RSA {} bits)", k.public_modulus_len() * 8),
            _ => write!(f, "PrivateKey({})", self.kind()),
        }
    }
}

fn ecdsa_pair(kind: KeyKind, der: &[u8]) -> Option<Inner> {
    let (a, b) = match kind {
        KeyKind::EcdsaP256 => (
            &s::ECDSA_P256_SHA256_ASN1_SIGNING,
            &s::ECDSA_P256_SHA256_FIXED_SIGNING,
        ),
        KeyKind::EcdsaP384 => (
            &s::ECDSA_P384_SHA384_ASN1_SIGNING,
            &s::ECDSA_P384_SHA384_FIXED_SIGNING,
        ),
        _ => return None,
    };
    Some(Inner::Ecdsa {
        kind,
        der: EcdsaKeyPair::from_private_key_der(a, der).ok()?,
        fixed: EcdsaKeyPair::from_private_key_der(b, der).ok()?,
    })
}

impl PrivateKey {
    /// A key from a file's bytes: PEM (`PRIVATE KEY`, `RSA PRIVATE KEY`, `EC PRIVATE KEY`; other blocks such as
    /// `EC PARAMETERS` are skipped) or DER of one of those structures.
    pub fn from_pem_or_der(bytes: &[u8]) -> Result<PrivateKey, SigError> {
        let text = bytes.trim_ascii_start();
        if !text.starts_with(b"-----BEGIN") {
            return Self::from_der(bytes, None);
        }
        let blocks = pem::parse_many(text).map_err(|_| SigError::NotAKey)?;
        let mut found = Err(SigError::NotAKey);
        for b in blocks {
            let tag = b.tag().to_string();
            let der = Zeroizing::new(b.into_contents());
            match tag.as_str() {
                "ENCRYPTED PRIVATE KEY" => return Err(SigError::Encrypted),
                "PRIVATE KEY" | "RSA PRIVATE KEY" | "EC PRIVATE KEY" => {
                    found = Self::from_der(&der, Some(&tag));
                    break;
                }
                _ => {}
            }
        }
        found
    }

    /// A key from DER: PKCS#8, PKCS#1 RSAPrivateKey or RFC 5915 ECPrivateKey (`label`: the PEM label, if any,
    /// which narrows the forms tried).
    fn from_der(der: &[u8], label: Option<&str>) -> Result<PrivateKey, SigError> {
        let any = label.is_none();
        let pkcs8 = any || label == Some("PRIVATE KEY");
        if any || label == Some("RSA PRIVATE KEY") {
            if let Ok(k) = RsaKeyPair::from_der(der) {
                return Ok(PrivateKey(Inner::Rsa(k)));
            }
        }
        if pkcs8 {
            if let Ok(k) = RsaKeyPair::from_pkcs8(der) {
                return Ok(PrivateKey(Inner::Rsa(k)));
            }
            if let Ok(k) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der) {
                return Ok(PrivateKey(Inner::Ed25519(k)));
            }
        }
        if any || pkcs8 || label == Some("EC PRIVATE KEY") {
            for kind in [KeyKind::EcdsaP256, KeyKind::EcdsaP384] {
                if let Some(k) = ecdsa_pair(kind, der) {
                    return Ok(PrivateKey(k));
                }
            }
        }
        // Something DER-shaped we do not take (a P-521 or DSA key, a small RSA key) or not a key at all.
        if der.first() == Some(&0x30) && Self::looks_like_key(der) {
            return Err(SigError::UnsupportedKey);
        }
        Err(SigError::NotAKey)
    }

    /// A PKCS#8 key of another algorithm, a P-521 ECPrivateKey or an RSA key out of range: a SEQUENCE whose
    /// first element is a version INTEGER.
    fn looks_like_key(der: &[u8]) -> bool {
        let mut r = der;
        let Some((0x30, body)) = der_next(&mut r) else {
            return false;
        };
        let mut b = body;
        matches!(der_next(&mut b), Some((0x02, v)) if v.len() == 1)
    }

    pub fn kind(&self) -> KeyKind {
        match &self.0 {
            Inner::Rsa(_) => KeyKind::Rsa,
            Inner::Ecdsa { kind, .. } => *kind,
            Inner::Ed25519(_) => KeyKind::Ed25519,
        }
    }

    /// The public half.
    pub fn public_key(&self) -> PublicKey {
        let key = match &self.0 {
            Inner::Rsa(k) => k.public_key().as_ref().to_vec(),
            Inner::Ecdsa { der, .. } => der.public_key().as_ref().to_vec(),
            Inner::Ed25519(k) => k.public_key().as_ref().to_vec(),
        };
        PublicKey {
            kind: self.kind(),
            key,
        }
    }

    /// Signs `msg` with `scheme`, which must fit the key: RSA with PKCS#1 v1.5 or PSS over SHA-256/384/512;
    /// ECDSA with the curve's hash (P-256: SHA-256, P-384: SHA-384), either encoding; Ed25519.
    pub fn sign(&self, scheme: Scheme, msg: &[u8]) -> Result<Vec<u8>, SigError> {
        #[cfg(fuzzing)]
        return self.sign_fuzz(scheme, msg);
        #[cfg(not(fuzzing))]
        self.sign_real(scheme, msg)
    }

    /// With `--cfg fuzzing`: the stand-in's signature (see `crate::fuzz`), for the schemes the key signs with.
    #[cfg(fuzzing)]
    fn sign_fuzz(&self, scheme: Scheme, msg: &[u8]) -> Result<Vec<u8>, SigError> {
        if !crate::fuzz::can_sign(self.kind(), scheme) {
            return Err(SigError::Unsupported {
                key: self.kind(),
                scheme,
            });
        }
        let modulus_len = match &self.0 {
            Inner::Rsa(k) => k.public_modulus_len(),
            _ => 0,
        };
        let public = self.public_key();
        Ok(crate::fuzz::sign(
            public.kind,
            &public.key,
            modulus_len,
            scheme,
            msg,
        ))
    }

    #[cfg(not(fuzzing))]
    fn sign_real(&self, scheme: Scheme, msg: &[u8]) -> Result<Vec<u8>, SigError> {
        let unsupported = SigError::Unsupported {
            key: self.kind(),
            scheme,
        };
        // aws-lc-rs ignores this generator (AWS-LC draws from its own); it is asked for by the signature only.
        let rng = SystemRandom::new();
        match (&self.0, scheme) {
            (Inner::Rsa(k), Scheme::RsaPkcs1(h) | Scheme::RsaPss(h)) => {
                let pss = matches!(scheme, Scheme::RsaPss(_));
                let enc: &'static dyn s::RsaEncoding = match (pss, h) {
                    (false, SigHash::Sha256) => &s::RSA_PKCS1_SHA256,
                    (false, SigHash::Sha384) => &s::RSA_PKCS1_SHA384,
                    (false, SigHash::Sha512) => &s::RSA_PKCS1_SHA512,
                    (true, SigHash::Sha256) => &s::RSA_PSS_SHA256,
                    (true, SigHash::Sha384) => &s::RSA_PSS_SHA384,
                    (true, SigHash::Sha512) => &s::RSA_PSS_SHA512,
                    (_, SigHash::Sha1) => return Err(unsupported),
                };
                let mut out = vec![0u8; k.public_modulus_len()];
                k.sign(enc, &rng, msg, &mut out)
                    .map_err(|_| SigError::SignFailed)?;
                Ok(out)
            }
            (Inner::Ecdsa { kind, der, fixed }, Scheme::Ecdsa(h) | Scheme::EcdsaFixed(h)) => {
                let want = match kind {
                    KeyKind::EcdsaP256 => SigHash::Sha256,
                    _ => SigHash::Sha384,
                };
                if h != want {
                    return Err(unsupported);
                }
                let k = if matches!(scheme, Scheme::Ecdsa(_)) {
                    der
                } else {
                    fixed
                };
                let sig = k.sign(&rng, msg).map_err(|_| SigError::SignFailed)?;
                Ok(sig.as_ref().to_vec())
            }
            (Inner::Ed25519(k), Scheme::Ed25519) => Ok(k.sign(msg).as_ref().to_vec()),
            _ => Err(unsupported),
        }
    }
}

/// A public key: its algorithm and the raw key (the subjectPublicKey bits of its SubjectPublicKeyInfo: an
/// RSAPublicKey, an uncompressed EC point, or Ed25519's 32 bytes).
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    kind: KeyKind,
    key: Vec<u8>,
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({}, {} bytes)", self.kind, self.key.len())
    }
}

impl PublicKey {
    /// A key from a DER SubjectPublicKeyInfo (as in a certificate).
    pub fn from_spki(der: &[u8]) -> Result<PublicKey, SigError> {
        let (_, spki) = SubjectPublicKeyInfo::from_der(der).map_err(|_| SigError::BadPublicKey)?;
        let oid = &spki.algorithm.algorithm;
        let kind = if *oid == OID_PKCS1_RSAENCRYPTION {
            KeyKind::Rsa
        } else if *oid == OID_SIG_ED25519 {
            KeyKind::Ed25519
        } else if *oid == OID_KEY_TYPE_EC_PUBLIC_KEY {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok())
                .ok_or(SigError::BadPublicKey)?;
            if curve == OID_EC_P256 {
                KeyKind::EcdsaP256
            } else if curve == OID_NIST_EC_P384 {
                KeyKind::EcdsaP384
            } else if curve == OID_NIST_EC_P521 {
                KeyKind::EcdsaP521
            } else {
                return Err(SigError::BadPublicKey);
            }
        } else {
            return Err(SigError::BadPublicKey);
        };
        if spki.subject_public_key.unused_bits != 0 {
            return Err(SigError::BadPublicKey);
        }
        Ok(PublicKey {
            kind,
            key: spki.subject_public_key.data.to_vec(),
        })
    }

    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// The raw key bytes (see the type's doc).
    pub fn raw(&self) -> &[u8] {
        &self.key
    }

    /// Whether `scheme` can be verified with this key at all.
    pub fn supports(&self, scheme: Scheme) -> bool {
        self.algorithm(scheme).is_some()
    }

    fn algorithm(&self, scheme: Scheme) -> Option<&'static dyn s::VerificationAlgorithm> {
        use KeyKind as K;
        use Scheme as S;
        use SigHash as H;
        Some(match (self.kind, scheme) {
            (K::Rsa, S::RsaPkcs1(H::Sha1)) => &s::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
            (K::Rsa, S::RsaPkcs1(H::Sha256)) => &s::RSA_PKCS1_2048_8192_SHA256,
            (K::Rsa, S::RsaPkcs1(H::Sha384)) => &s::RSA_PKCS1_2048_8192_SHA384,
            (K::Rsa, S::RsaPkcs1(H::Sha512)) => &s::RSA_PKCS1_2048_8192_SHA512,
            (K::Rsa, S::RsaPss(H::Sha256)) => &s::RSA_PSS_2048_8192_SHA256,
            (K::Rsa, S::RsaPss(H::Sha384)) => &s::RSA_PSS_2048_8192_SHA384,
            (K::Rsa, S::RsaPss(H::Sha512)) => &s::RSA_PSS_2048_8192_SHA512,
            (K::EcdsaP256, S::Ecdsa(H::Sha256)) => &s::ECDSA_P256_SHA256_ASN1,
            (K::EcdsaP256, S::Ecdsa(H::Sha384)) => &s::ECDSA_P256_SHA384_ASN1,
            (K::EcdsaP256, S::Ecdsa(H::Sha512)) => &s::ECDSA_P256_SHA512_ASN1,
            (K::EcdsaP384, S::Ecdsa(H::Sha256)) => &s::ECDSA_P384_SHA256_ASN1,
            (K::EcdsaP384, S::Ecdsa(H::Sha384)) => &s::ECDSA_P384_SHA384_ASN1,
            (K::EcdsaP384, S::Ecdsa(H::Sha512)) => &s::ECDSA_P384_SHA512_ASN1,
            (K::EcdsaP521, S::Ecdsa(H::Sha256)) => &s::ECDSA_P521_SHA256_ASN1,
            (K::EcdsaP521, S::Ecdsa(H::Sha384)) => &s::ECDSA_P521_SHA384_ASN1,
            (K::EcdsaP521, S::Ecdsa(H::Sha512)) => &s::ECDSA_P521_SHA512_ASN1,
            (K::EcdsaP256, S::EcdsaFixed(H::Sha256)) => &s::ECDSA_P256_SHA256_FIXED,
            (K::EcdsaP384, S::EcdsaFixed(H::Sha384)) => &s::ECDSA_P384_SHA384_FIXED,
            (K::EcdsaP521, S::EcdsaFixed(H::Sha512)) => &s::ECDSA_P521_SHA512_FIXED,
            (K::Ed25519, S::Ed25519) => &s::ED25519,
            _ => return None,
        })
    }

    /// Verifies `signature` over `msg`. Err (without detail) for a wrong signature or a scheme the key cannot
    /// be used with.
    pub fn verify(&self, scheme: Scheme, msg: &[u8], signature: &[u8]) -> Result<(), AuthError> {
        let alg = self.algorithm(scheme).ok_or(AuthError)?;
        #[cfg(fuzzing)]
        return {
            let _ = alg;
            crate::fuzz::verify(self.kind, &self.key, scheme, msg, signature)
                .then_some(())
                .ok_or(AuthError)
        };
        #[cfg(not(fuzzing))]
        s::UnparsedPublicKey::new(alg, &self.key)
            .verify(msg, signature)
            .map_err(|_| AuthError)
    }
}

/// One DER element's tag and body from the front of `r` (short and long definite lengths), advancing `r`.
fn der_next<'a>(r: &mut &'a [u8]) -> Option<(u8, &'a [u8])> {
    let (&tag, rest) = r.split_first()?;
    let (&l0, rest) = rest.split_first()?;
    let (len, rest) = if l0 < 0x80 {
        (usize::from(l0), rest)
    } else {
        let n = usize::from(l0 & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |a, &b| (a << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    let (body, after) = rest.split_at(len);
    *r = after;
    Some((tag, body))
}

#[cfg(test)]
mod tests;
