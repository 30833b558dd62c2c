//! What names a public-key algorithm: the Diffie-Hellman groups with their lengths, and the signature keys'
//! kinds, schemes and hashes. [`crate::dh`] and [`crate::sig`] re-export them and compute with them; the fuzzing
//! stand-ins (`crate::fuzz`, with `--cfg fuzzing`) take them too, from here, below both.

use core::fmt;

/// Bits of a MODP private exponent in group 14 (RFC 3526 §8's largest estimate for the group: 320).
pub(crate) const MODP2048_EXPONENT_BITS: usize = 320;
/// Bits of a MODP private exponent in group 15 (RFC 3526 §8's largest estimate, 420, rounded up to whole words).
pub(crate) const MODP3072_EXPONENT_BITS: usize = 448;

/// A Diffie-Hellman group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Group {
    /// X25519 (RFC 7748).
    X25519,
    /// RFC 3526 group 14, 2048-bit MODP, generator 2.
    Modp2048,
    /// RFC 3526 group 15, 3072-bit MODP, generator 2.
    Modp3072,
    /// RFC 5903 group 19, 256-bit random ECP group (NIST P-256).
    Ecp256,
    /// RFC 5903 group 20, 384-bit random ECP group (NIST P-384).
    Ecp384,
}

impl Group {
    pub const ALL: [Group; 5] = [
        Group::X25519,
        Group::Modp2048,
        Group::Modp3072,
        Group::Ecp256,
        Group::Ecp384,
    ];

    /// Length of a public value in bytes: 32, 256, 384, 64, 96.
    pub fn public_len(self) -> usize {
        match self {
            Group::X25519 => 32,
            Group::Modp2048 => 256,
            Group::Modp3072 => 384,
            Group::Ecp256 => 64,
            Group::Ecp384 => 96,
        }
    }

    /// Length of the shared secret in bytes: the public value's, except ECP's x coordinate only (32, 48).
    pub fn shared_len(self) -> usize {
        match self {
            Group::Ecp256 => 32,
            Group::Ecp384 => 48,
            _ => self.public_len(),
        }
    }

    /// Length of the private key [`crate::dh::KeyPair::from_private`] takes: 32 for X25519, the exponent's 40 (group 14) or
    /// 56 bytes (group 15) for MODP, the scalar's 32 or 48 bytes for ECP.
    pub fn private_len(self) -> usize {
        match self {
            Group::X25519 | Group::Ecp256 => 32,
            Group::Modp2048 => MODP2048_EXPONENT_BITS / 8,
            Group::Modp3072 => MODP3072_EXPONENT_BITS / 8,
            Group::Ecp384 => 48,
        }
    }
}

/// The hash a signature scheme digests the message with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SigHash {
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl SigHash {
    pub fn output_len(self) -> usize {
        match self {
            SigHash::Sha1 => 20,
            SigHash::Sha256 => 32,
            SigHash::Sha384 => 48,
            SigHash::Sha512 => 64,
        }
    }
}

/// A key's algorithm (and curve).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyKind {
    Rsa,
    EcdsaP256,
    EcdsaP384,
    /// Verification only.
    EcdsaP521,
    Ed25519,
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyKind::Rsa => "RSA",
            KeyKind::EcdsaP256 => "ECDSA P-256",
            KeyKind::EcdsaP384 => "ECDSA P-384",
            KeyKind::EcdsaP521 => "ECDSA P-521",
            KeyKind::Ed25519 => "Ed25519",
        })
    }
}

/// A signature scheme. The ECDSA curve is the key's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// RSASSA-PKCS1-v1_5 (SHA-1: verification only).
    RsaPkcs1(SigHash),
    /// RSASSA-PSS with MGF1 over the same hash and a salt as long as the hash.
    RsaPss(SigHash),
    /// ECDSA, the signature a DER `SEQUENCE { r, s }` (X9.62, RFC 7427).
    Ecdsa(SigHash),
    /// ECDSA, the signature `r || s` each as long as the curve's order (RFC 4754: P-256/SHA-256,
    /// P-384/SHA-384, P-521/SHA-512).
    EcdsaFixed(SigHash),
    /// Ed25519 (RFC 8032), the message signed as it is.
    Ed25519,
}
