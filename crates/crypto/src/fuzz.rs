//! **Fuzzing only, insecure by design**: cheap deterministic stand-ins for the public-key operations, compiled
//! only with `--cfg fuzzing` (which `cargo fuzz` sets; as BoringSSL's fuzzer mode), so that a fuzz target that
//! runs key exchanges and signatures per input spends its time in the protocol code, not in big-number arithmetic.
//! A build without that cfg has none of it: [`crate::FUZZ_CRYPTO`] is `false` and [`crate::FUZZ_CRYPTO_LABEL`] is
//! nowhere in the binary (`crates/netveil/tests/no_fuzz_crypto.rs` checks both on the tested build).
//!
//! What stays as it is: the API, the lengths (public values, shared secrets, ciphertexts, signatures as the real
//! schemes make them), and the outcomes the protocols branch on, so that a fuzzer still explores both sides:
//!
//! - Diffie-Hellman ([`crate::dh`]): the public value carries the private key (masked); both ends derive
//!   `H(label, group, min(x, y), max(x, y))` at the shared secret's length. Where the public value is longer than
//!   the private key (MODP, ECP), the rest is a function of the private key and a value whose rest does not match
//!   is refused, as a point off the curve is; an all-zero X25519 value is refused as a low-order point is.
//! - ML-KEM-768 ([`crate::kem`]): the encapsulation key is a 32-byte seed and its expansion (a key whose expansion
//!   does not match is refused, as FIPS 203's modulus check refuses); the ciphertext is a function of the key,
//!   the secret of the ciphertext: a modified ciphertext gives another secret (implicit rejection).
//! - Signatures ([`crate::sig`]): `H(label, public key, scheme, message)` expanded to the scheme's length;
//!   verification recomputes it, so a wrong key, message or signature fails, cheaply and deterministically.
//!
//! The AEADs, MACs, ciphers and KDFs stay real: they are cheap, and what a target checks (an edited message never
//! opens) depends on them.

// Built for the crate's unit tests too (which check the stand-ins themselves), but used only with `--cfg fuzzing`.
#![cfg_attr(not(fuzzing), allow(dead_code))]

use sha2::{Digest, Sha256};

use crate::alg::{Group, KeyKind, Scheme, SigHash};
use crate::FUZZ_CRYPTO_LABEL;

/// `out` filled with a keystream of `parts` (SHA-256 of them, then SHA-256 in counter mode: a few blocks for the
/// longest values here).
fn expand(parts: &[&[u8]], out: &mut [u8]) {
    let mut h = Sha256::new();
    h.update(FUZZ_CRYPTO_LABEL);
    for p in parts {
        h.update((p.len() as u32).to_be_bytes());
        h.update(p);
    }
    let seed = h.finalize();
    for (i, chunk) in out.chunks_mut(32).enumerate() {
        let block = Sha256::new()
            .chain_update(seed)
            .chain_update((i as u32).to_be_bytes())
            .finalize();
        chunk.copy_from_slice(&block[..chunk.len()]);
    }
}

fn group_tag(g: Group) -> [u8; 1] {
    [match g {
        Group::X25519 => 1,
        Group::Modp2048 => 2,
        Group::Modp3072 => 3,
        Group::Ecp256 => 4,
        Group::Ecp384 => 5,
    }]
}

/// The mask over the private key in a public value.
const MASK: u8 = 0x5c;

/// The public value of `private` (of the group's private length).
pub(crate) fn dh_public(group: Group, private: &[u8]) -> Vec<u8> {
    let mut public = vec![0u8; group.public_len()];
    let (head, rest) = public.split_at_mut(private.len());
    for (p, x) in head.iter_mut().zip(private) {
        *p = x ^ MASK;
    }
    expand(&[b"dh-public", &group_tag(group), private], rest);
    public
}

/// The shared secret of `private` with the peer's `peer` public value; `None`: refused.
pub(crate) fn dh_agree(group: Group, private: &[u8], peer: &[u8]) -> Option<Vec<u8>> {
    if peer.len() != group.public_len() || peer.iter().all(|&b| b == 0) {
        return None;
    }
    let theirs: Vec<u8> = peer[..private.len()].iter().map(|b| b ^ MASK).collect();
    if dh_public(group, &theirs) != peer {
        return None;
    }
    let (lo, hi) = if theirs.as_slice() < private {
        (theirs.as_slice(), private)
    } else {
        (private, theirs.as_slice())
    };
    let mut shared = vec![0u8; group.shared_len()];
    expand(&[b"dh-shared", &group_tag(group), lo, hi], &mut shared);
    Some(shared)
}

/// An ML-KEM-768 encapsulation key of `public_len` bytes: the seed and its expansion.
pub(crate) fn kem_public(seed: &[u8; 32], public_len: usize) -> Vec<u8> {
    let mut public = vec![0u8; public_len];
    public[..32].copy_from_slice(seed);
    expand(&[b"kem-ek", seed], &mut public[32..]);
    public
}

/// Whether `public` is an encapsulation key [`kem_public`] makes.
pub(crate) fn kem_public_ok(public: &[u8]) -> bool {
    public.len() > 32 && {
        let seed: [u8; 32] = public[..32].try_into().expect("32 bytes");
        kem_public(&seed, public.len()) == public
    }
}

/// The ciphertext of an encapsulation to `public`, `len` bytes.
pub(crate) fn kem_ciphertext(public: &[u8], len: usize) -> Vec<u8> {
    let mut ct = vec![0u8; len];
    expand(&[b"kem-ct", public], &mut ct);
    ct
}

/// The shared secret of `ciphertext`.
pub(crate) fn kem_shared(ciphertext: &[u8], len: usize) -> Vec<u8> {
    let mut ss = vec![0u8; len];
    expand(&[b"kem-ss", ciphertext], &mut ss);
    ss
}

/// Whether a key of `kind` can sign with `scheme` (what the real signing takes).
pub(crate) fn can_sign(kind: KeyKind, scheme: Scheme) -> bool {
    match (kind, scheme) {
        (KeyKind::Rsa, Scheme::RsaPkcs1(h) | Scheme::RsaPss(h)) => h != SigHash::Sha1,
        (KeyKind::EcdsaP256, Scheme::Ecdsa(h) | Scheme::EcdsaFixed(h)) => h == SigHash::Sha256,
        (KeyKind::EcdsaP384, Scheme::Ecdsa(h) | Scheme::EcdsaFixed(h)) => h == SigHash::Sha384,
        (KeyKind::Ed25519, Scheme::Ed25519) => true,
        _ => false,
    }
}

/// The signature's length as the real scheme makes it (RSA: `modulus_len`; DER ECDSA: its usual length).
fn sig_len(kind: KeyKind, scheme: Scheme, modulus_len: usize) -> usize {
    let field = match kind {
        KeyKind::EcdsaP256 => 32,
        KeyKind::EcdsaP384 => 48,
        KeyKind::EcdsaP521 => 66,
        _ => 32,
    };
    match scheme {
        Scheme::RsaPkcs1(_) | Scheme::RsaPss(_) => modulus_len,
        Scheme::EcdsaFixed(_) => 2 * field,
        Scheme::Ecdsa(_) => 2 * field + 6,
        Scheme::Ed25519 => 64,
    }
}

fn scheme_tag(scheme: Scheme) -> Vec<u8> {
    format!("{scheme:?}").into_bytes()
}

/// The signature of `msg` by the key whose public key is `public` (raw bytes, of `kind`).
pub(crate) fn sign(
    kind: KeyKind,
    public: &[u8],
    modulus_len: usize,
    scheme: Scheme,
    msg: &[u8],
) -> Vec<u8> {
    let mut sig = vec![0u8; sig_len(kind, scheme, modulus_len)];
    expand(&[b"sig", public, &scheme_tag(scheme), msg], &mut sig);
    sig
}

/// Whether `signature` is [`sign`]'s for this key, scheme and message (any length: an RSA key's modulus length
/// is the signature's).
pub(crate) fn verify(
    kind: KeyKind,
    public: &[u8],
    scheme: Scheme,
    msg: &[u8],
    signature: &[u8],
) -> bool {
    let want = sign(kind, public, signature.len(), scheme, msg);
    want.len() == signature.len() && bool::from(subtle::ConstantTimeEq::ct_eq(&want[..], signature))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stand-ins are built here for these tests only: they replace nothing (`--cfg fuzzing` is not set).
    #[test]
    fn this_build_uses_the_real_crypto() {
        assert!(!std::hint::black_box(crate::FUZZ_CRYPTO));
        let k = crate::dh::KeyPair::from_private(Group::X25519, &[1; 32]).unwrap();
        assert_ne!(k.public(), dh_public(Group::X25519, &[1; 32]).as_slice());
    }

    #[test]
    fn the_stand_ins_agree_refuse_and_fail_as_the_real_ones() {
        for g in Group::ALL {
            let (x, y) = (vec![1u8; g.private_len()], vec![2u8; g.private_len()]);
            let (px, py) = (dh_public(g, &x), dh_public(g, &y));
            assert_eq!(px.len(), g.public_len());
            let s = dh_agree(g, &x, &py).unwrap();
            assert_eq!(s.len(), g.shared_len());
            assert_eq!(dh_agree(g, &y, &px).unwrap(), s);
            let mut bad = py.clone();
            *bad.last_mut().unwrap() ^= 1;
            match g {
                // The value is the (masked) private key: another one, another secret.
                Group::X25519 => assert_ne!(dh_agree(g, &x, &bad).unwrap(), s),
                _ => assert!(dh_agree(g, &x, &bad).is_none(), "{g:?}"),
            }
            assert!(dh_agree(g, &x, &vec![0; g.public_len()]).is_none());
            assert!(dh_agree(g, &x, &py[1..]).is_none());
        }
        let ek = kem_public(&[7; 32], 1184);
        assert!(kem_public_ok(&ek));
        let mut bad = ek.clone();
        bad[100] ^= 1;
        assert!(!kem_public_ok(&bad));
        let ct = kem_ciphertext(&ek, 1088);
        let mut ct2 = ct.clone();
        ct2[0] ^= 1;
        assert_ne!(kem_shared(&ct, 32), kem_shared(&ct2, 32));
        let s = sign(KeyKind::Ed25519, b"pk", 0, Scheme::Ed25519, b"m");
        assert_eq!(s.len(), 64);
        assert!(verify(KeyKind::Ed25519, b"pk", Scheme::Ed25519, b"m", &s));
        assert!(!verify(KeyKind::Ed25519, b"pk", Scheme::Ed25519, b"n", &s));
        assert!(!verify(KeyKind::Ed25519, b"pK", Scheme::Ed25519, b"m", &s));
        assert!(!verify(
            KeyKind::Ed25519,
            b"pk",
            Scheme::Ed25519,
            b"m",
            &s[1..]
        ));
    }
}
