//! Ephemeral Diffie-Hellman: X25519 (RFC 7748, `x25519-dalek`), the 2048- and 3072-bit MODP groups of
//! RFC 3526 (groups 14 and 15, generator 2) with constant-time Montgomery exponentiation (`crypto-bigint`), and
//! the NIST P-256 and P-384 groups as IKE's ECP groups 19 and 20 (RFC 5903, ECDH through aws-lc-rs's agreement API).
//!
//! - Public values: X25519 32 bytes; MODP big-endian, left-padded to the length of the prime (256 or 384 bytes);
//!   ECP `x | y`, each coordinate big-endian at the field's length (64 or 96 bytes: RFC 5903 section 7, without
//!   the 0x04 prefix of SEC 1's uncompressed form).
//! - Shared secrets: X25519 32 bytes; MODP `g^xy mod p` big-endian, left-padded to the length of the prime (as
//!   IKEv2 does, RFC 7296 §2.14); ECP the x coordinate of the shared point (32 or 48 bytes, RFC 5903 section 7).
//! - ECP private keys are scalars drawn from the caller's generator: 32 or 48 random bytes, drawn again in the
//!   rare case they are not in `[1, n - 1]`.
//! - MODP private exponents are 320 random bits in group 14 and 448 in group 15: the top of the exponent sizes
//!   RFC 3526 §8 gives for the groups' strength (220-320 and 260-420 bits), above NIST SP 800-56A Rev. 3's
//!   minimum for these safe-prime groups (twice the security strength: 224 and 256 bits), and far below the cost
//!   of a full-size exponent. The exponent's bit length is the only thing the exponentiations' timing depends on.
//! - `g^x` (the public value) uses a fixed-base comb for g = 2: a table of `2^(k * 16^j)` built once per process
//!   and group when first used (320 KiB for group 14, 672 KiB for group 15), so that `g^x` is one Montgomery
//!   multiplication per 4-bit digit of `x` (80 or 112), each digit's entry selected by a constant-time scan of its
//!   16 candidates, instead of a squaring per bit on top. The shared secret `y^x` (a new base each time) uses
//!   crypto-bigint's fixed-window exponentiation bounded to the exponent's length.
//! - Peer values are validated: MODP `1 < y < p - 1` (0, 1, p - 1 and anything not below p are refused, and
//!   so is a wrong length); X25519 refuses a shared secret of all zeros (a low-order peer point); ECP refuses a
//!   wrong length and a point not on the curve (aws-lc checks the decoded point; the point at infinity has no
//!   `x | y` encoding).
//!
//! Private keys and shared secrets are zeroized when dropped and never printed.

use crypto_bigint::modular::runtime_mod::{DynResidue, DynResidueParams};
use crypto_bigint::subtle::{ConditionallySelectable, ConstantTimeEq};
use crypto_bigint::{Limb, Uint, Word, U2048, U3072, U512};
use std::sync::OnceLock;
use zeroize::Zeroizing;

use aws_lc_rs::agreement;

use crate::alg::{MODP2048_EXPONENT_BITS, MODP3072_EXPONENT_BITS};
use crate::rand::Rng;
use crate::KeyError;

pub use crate::alg::Group;

/// RFC 3526 group 14: `2^2048 - 2^1984 - 1 + 2^64 * ([2^1918 pi] + 124476)`.
const MODP2048_P: &str = "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7EDEE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3BE39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6955817183995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF";

/// RFC 3526 group 15: `2^3072 - 2^3008 - 1 + 2^64 * ([2^2942 pi] + 1690314)`.
const MODP3072_P: &str = "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7EDEE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3BE39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6955817183995497CEA956AE515D2261898FA051015728E5A8AAAC42DAD33170D04507A33A85521ABDF1CBA64ECFB850458DBEF0A8AEA71575D060C7DB3970F85A6E1E4C7ABF5AE8CDB0933D71E8C94E04A25619DCEE3D2261AD2EE6BF12FFA06D98A0864D87602733EC86A64521F2B18177B200CBBE117577A615D6C770988C0BAD946E208E24FA074E5AB3143DB5BFCE0FD108E4B82D120A93AD2CAFFFFFFFFFFFFFFFF";

// `Group` and its lengths are in `crate::alg` (re-exported here, below the fuzzing stand-ins); what computes in
// the groups is here.
impl Group {
    fn ecdh(self) -> Option<&'static agreement::Algorithm> {
        match self {
            Group::Ecp256 => Some(&agreement::ECDH_P256),
            Group::Ecp384 => Some(&agreement::ECDH_P384),
            _ => None,
        }
    }

    /// The prime of a MODP group, big-endian (`None` for the others).
    pub fn modp_prime(self) -> Option<Vec<u8>> {
        match self {
            Group::X25519 | Group::Ecp256 | Group::Ecp384 => None,
            Group::Modp2048 => Some(be_bytes(&U2048::from_be_hex(MODP2048_P))),
            Group::Modp3072 => Some(be_bytes(&U3072::from_be_hex(MODP3072_P))),
        }
    }
}

// With `--cfg fuzzing` only `Fuzz` is built (the others stay for `agree`'s match).
#[cfg_attr(fuzzing, allow(dead_code))]
enum Secret {
    /// The fuzzing stand-in's private key (see `crate::fuzz`): only with `--cfg fuzzing`.
    #[cfg(fuzzing)]
    Fuzz(Zeroizing<Vec<u8>>),
    X25519(x25519_dalek::StaticSecret),
    Modp(Zeroizing<U512>),
    /// aws-lc's key (its memory is cleansed when freed).
    Ecp(agreement::PrivateKey),
}

/// An ephemeral key pair of one group: the private key (zeroized on drop) and the public value.
pub struct KeyPair {
    group: Group,
    secret: Secret,
    public: Vec<u8>,
}

impl core::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KeyPair")
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

fn bad_peer() -> KeyError {
    KeyError::Unusable("invalid Diffie-Hellman public value")
}

/// Big-endian bytes of `x`, `LIMBS * word size` long.
fn be_bytes<const LIMBS: usize>(x: &Uint<LIMBS>) -> Vec<u8> {
    let mut out = Vec::with_capacity(LIMBS * crypto_bigint::Limb::BYTES);
    for w in x.as_words().iter().rev() {
        out.extend_from_slice(&w.to_be_bytes());
    }
    out
}

/// `base^exp mod p` for an exponent of at most `bits` bits, in constant time for a given `bits`.
fn modp_pow<const LIMBS: usize>(
    params: DynResidueParams<LIMBS>,
    base: &Uint<LIMBS>,
    exp: &U512,
    bits: usize,
) -> Zeroizing<Uint<LIMBS>> {
    let b = DynResidue::new(base, params);
    let mut r = b.pow_bounded_exp(exp, bits);
    let out = Zeroizing::new(r.retrieve());
    zeroize::Zeroize::zeroize(&mut r);
    out
}

/// Digits of the comb: 4 bits each, so that a digit never straddles two words.
const COMB_BITS: usize = 4;

/// The fixed-base comb for g = 2 in one MODP group (see the module documentation).
#[cfg_attr(fuzzing, allow(dead_code))] // public values are the stand-in's there
struct Comb<const LIMBS: usize> {
    params: DynResidueParams<LIMBS>,
    /// Exponent bits covered: `table.len() * COMB_BITS`.
    bits: usize,
    /// `table[j][k] = 2^(k * 16^j) mod p`, in Montgomery form.
    table: Box<[[Uint<LIMBS>; 1 << COMB_BITS]]>,
}

#[cfg_attr(fuzzing, allow(dead_code))]
impl<const LIMBS: usize> Comb<LIMBS> {
    fn new(p_hex: &str, bits: usize) -> Comb<LIMBS> {
        let params = DynResidueParams::new(&Uint::<LIMBS>::from_be_hex(p_hex));
        let mut base = DynResidue::new(&Uint::from_u8(2), params);
        let table = (0..bits.div_ceil(COMB_BITS))
            .map(|_| {
                let mut row = [Uint::ZERO; 1 << COMB_BITS];
                let mut acc = DynResidue::one(params);
                for e in row.iter_mut() {
                    *e = *acc.as_montgomery();
                    acc *= base;
                }
                // acc = base^16: the next digit's base.
                base = acc;
                row
            })
            .collect();
        Comb {
            params,
            bits,
            table,
        }
    }

    /// `2^x mod p` for `x` below `2^bits`: one multiplication per digit, whose table entry is found by a scan of
    /// the whole row (constant time: the same loads and operations whatever the digit).
    fn pow(&self, x: &U512) -> Zeroizing<Uint<LIMBS>> {
        debug_assert!(x.bits() <= self.bits);
        let words = x.as_words();
        let mut acc = DynResidue::one(self.params);
        let mut entry = Zeroizing::new(Uint::<LIMBS>::ZERO);
        for (j, row) in self.table.iter().enumerate() {
            let at = j * COMB_BITS;
            let digit: Word =
                (words[at / Limb::BITS] >> (at % Limb::BITS)) & ((1 << COMB_BITS) - 1);
            for (k, v) in row.iter().enumerate() {
                entry.conditional_assign(v, (k as Word).ct_eq(&digit));
            }
            acc *= DynResidue::from_montgomery(*entry, self.params);
        }
        let out = Zeroizing::new(acc.retrieve());
        zeroize::Zeroize::zeroize(&mut acc);
        out
    }
}

static COMB_2048: OnceLock<Comb<{ U2048::LIMBS }>> = OnceLock::new();
static COMB_3072: OnceLock<Comb<{ U3072::LIMBS }>> = OnceLock::new();

fn comb_2048() -> &'static Comb<{ U2048::LIMBS }> {
    COMB_2048.get_or_init(|| Comb::new(MODP2048_P, MODP2048_EXPONENT_BITS))
}

fn comb_3072() -> &'static Comb<{ U3072::LIMBS }> {
    COMB_3072.get_or_init(|| Comb::new(MODP3072_P, MODP3072_EXPONENT_BITS))
}

/// Checks `1 < peer < p - 1` and computes `peer^x mod p`, big-endian at full length.
fn modp_agree<const LIMBS: usize>(
    comb: &Comb<LIMBS>,
    x: &U512,
    peer: &[u8],
) -> Result<Zeroizing<Vec<u8>>, KeyError> {
    if peer.len() != LIMBS * Limb::BYTES {
        return Err(bad_peer());
    }
    let p = comb.params.modulus();
    let y = Uint::<LIMBS>::from_be_slice(peer);
    let p_minus_1 = p.wrapping_sub(&Uint::ONE);
    // Public values: ordinary comparisons are fine.
    if y <= Uint::ONE || y >= p_minus_1 {
        return Err(bad_peer());
    }
    let z = modp_pow(comb.params, &y, x, comb.bits);
    if *z == Uint::ONE {
        // Impossible for a valid y and a nonzero exponent below q; refuse rather than hand out a known secret.
        return Err(bad_peer());
    }
    let mut out = Zeroizing::new(Vec::with_capacity(LIMBS * Limb::BYTES));
    for w in z.as_words().iter().rev() {
        out.extend_from_slice(&w.to_be_bytes());
    }
    Ok(out)
}

impl KeyPair {
    /// A fresh key pair, its private key drawn from `rng` (the caller's: the OS generator in production).
    pub fn generate(group: Group, rng: &mut dyn Rng) -> KeyPair {
        let mut private = Zeroizing::new(vec![0u8; group.private_len()]);
        loop {
            rng.fill(&mut private);
            // Only an ECP scalar outside [1, n - 1] is refused (probability below 2^-32): draw again.
            if let Ok(k) = Self::from_private(group, &private) {
                return k;
            }
        }
    }

    /// A key pair from a fixed private key: 32 bytes for X25519 (clamped as RFC 7748 prescribes), a
    /// big-endian exponent of [`Group::private_len`] bytes for MODP, a big-endian scalar in `[1, n - 1]` for ECP. For
    /// known-answer tests only.
    #[doc(hidden)]
    pub fn from_private(group: Group, private: &[u8]) -> Result<KeyPair, KeyError> {
        if private.len() != group.private_len() {
            return Err(KeyError::BadLength {
                alg: "Diffie-Hellman private key",
                expected: group.private_len(),
                got: private.len(),
            });
        }
        let (secret, public) = Self::secret_and_public(group, private)?;
        Ok(KeyPair {
            group,
            secret,
            public,
        })
    }

    /// The private key's form and the public value (`private` of the right length).
    #[cfg(not(fuzzing))]
    fn secret_and_public(group: Group, private: &[u8]) -> Result<(Secret, Vec<u8>), KeyError> {
        Ok(match group {
            Group::X25519 => {
                let mut k = Zeroizing::new([0u8; 32]);
                k.copy_from_slice(private);
                let s = x25519_dalek::StaticSecret::from(*k);
                let p = x25519_dalek::PublicKey::from(&s);
                (Secret::X25519(s), p.as_bytes().to_vec())
            }
            Group::Modp2048 | Group::Modp3072 => {
                // Left-padded to U512's 64 bytes: the exponent stays below 2^(8 * private_len).
                let mut padded = Zeroizing::new([0u8; U512::BYTES]);
                padded[U512::BYTES - private.len()..].copy_from_slice(private);
                let x = Zeroizing::new(U512::from_be_slice(&*padded));
                let public = if group == Group::Modp2048 {
                    be_bytes(&*comb_2048().pow(&x))
                } else {
                    be_bytes(&*comb_3072().pow(&x))
                };
                (Secret::Modp(x), public)
            }
            Group::Ecp256 | Group::Ecp384 => {
                let alg = group.ecdh().expect("an ECP group");
                let k = agreement::PrivateKey::from_private_key(alg, private)
                    .map_err(|_| KeyError::Unusable("ECP private key not in [1, n - 1]"))?;
                let p = k
                    .compute_public_key()
                    .map_err(|_| KeyError::Unusable("ECP public key"))?;
                // SEC 1 uncompressed: 0x04 | x | y; IKE carries x | y.
                let public = p.as_ref().get(1..).unwrap_or_default().to_vec();
                if public.len() != group.public_len() {
                    return Err(KeyError::Unusable("ECP public key"));
                }
                (Secret::Ecp(k), public)
            }
        })
    }

    /// With `--cfg fuzzing`: the stand-in's (see `crate::fuzz`).
    #[cfg(fuzzing)]
    fn secret_and_public(group: Group, private: &[u8]) -> Result<(Secret, Vec<u8>), KeyError> {
        Ok((
            Secret::Fuzz(Zeroizing::new(private.to_vec())),
            crate::fuzz::dh_public(group, private),
        ))
    }

    pub fn group(&self) -> Group {
        self.group
    }

    /// The public value to send to the peer.
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret with the peer whose public value is `peer_public`; refused if that value is invalid
    /// (see the module documentation). The key pair can be used again (e.g. when a retransmitted or corrupted
    /// peer value arrives before the genuine one); drop it as soon as the exchange is done.
    pub fn agree(&self, peer_public: &[u8]) -> Result<Zeroizing<Vec<u8>>, KeyError> {
        match &self.secret {
            #[cfg(fuzzing)]
            Secret::Fuzz(x) => crate::fuzz::dh_agree(self.group, x, peer_public)
                .map(Zeroizing::new)
                .ok_or_else(bad_peer),
            Secret::X25519(s) => {
                let bytes: [u8; 32] = peer_public.try_into().map_err(|_| bad_peer())?;
                let shared = s.diffie_hellman(&x25519_dalek::PublicKey::from(bytes));
                if !shared.was_contributory() {
                    return Err(bad_peer());
                }
                Ok(Zeroizing::new(shared.as_bytes().to_vec()))
            }
            Secret::Modp(x) => match self.group {
                Group::Modp2048 => modp_agree(comb_2048(), x, peer_public),
                _ => modp_agree(comb_3072(), x, peer_public),
            },
            Secret::Ecp(k) => {
                if peer_public.len() != self.group.public_len() {
                    return Err(bad_peer());
                }
                let mut sec1 = Vec::with_capacity(1 + peer_public.len());
                sec1.push(0x04);
                sec1.extend_from_slice(peer_public);
                let alg = self.group.ecdh().expect("an ECP group");
                agreement::agree(
                    k,
                    agreement::UnparsedPublicKey::new(alg, &sec1),
                    bad_peer(),
                    |z| Ok(Zeroizing::new(z.to_vec())),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rand::SeededRng;

    /// The private key is drawn from the caller's generator, nothing else: the same seed gives the same key pair
    /// (the one of the seed's first bytes), another seed another one.
    #[test]
    fn generate_draws_from_the_given_rng() {
        for g in Group::ALL {
            let a = KeyPair::generate(g, &mut SeededRng::new(1));
            let b = KeyPair::generate(g, &mut SeededRng::new(1));
            let c = KeyPair::generate(g, &mut SeededRng::new(2));
            assert_eq!(a.public(), b.public(), "{g:?}");
            assert_ne!(a.public(), c.public(), "{g:?}");
            let mut private = vec![0u8; g.private_len()];
            SeededRng::new(1).fill(&mut private);
            assert_eq!(
                KeyPair::from_private(g, &private).unwrap().public(),
                a.public(),
                "{g:?}"
            );
        }
    }

    /// RFC 5903 section 8: groups 19 and 20, both sides' public values (x | y) and the shared secret (the x
    /// coordinate of g^ir), from the private values i and r.
    #[test]
    fn ecp_known_answers_from_rfc_5903() {
        let cases = [
            (
                Group::Ecp256,
                "c88f01f510d9ac3f70a292daa2316de544e9aab8afe84049c62a9c57862d1433",
                "dad0b65394221cf9b051e1feca5787d098dfe637fc90b9ef945d0c3772581180\
                 5271a0461cdb8252d61f1c456fa3e59ab1f45b33accf5f58389e0577b8990bb3",
                "c6ef9c5d78ae012a011164acb397ce2088685d8f06bf9be0b283ab46476bee53",
                "d12dfb5289c8d4f81208b70270398c342296970a0bccb74c736fc7554494bf63\
                 56fbf3ca366cc23e8157854c13c58d6aac23f046ada30f8353e74f33039872ab",
                "d6840f6b42f6edafd13116e0e12565202fef8e9ece7dce03812464d04b9442de",
            ),
            (
                Group::Ecp384,
                "099f3c7034d4a2c699884d73a375a67f7624ef7c6b3c0f160647b67414dce655e35b538041e649ee3faef896783ab194",
                "667842d7d180ac2cde6f74f37551f55755c7645c20ef73e31634fe72b4c55ee6de3ac808acb4bdb4c88732aee95f41aa\
                 9482ed1fc0eeb9cafc4984625ccfc23f65032149e0e144ada024181535a0f38eeb9fcff3c2c947dae69b4c634573a81c",
                "41cb0779b4bdb85d47846725fbec3c9430fab46cc8dc5060855cc9bda0aa2942e0308312916b8ed2960e4bd55a7448fc",
                "e558dbef53eecde3d3fccfc1aea08a89a987475d12fd950d83cfa41732bc509d0d1ac43a0336def96fda41d0774a3571\
                 dcfbec7aacf3196472169e838430367f66eebe3c6e70c416dd5f0c68759dd1fff83fa40142209dff5eaad96db9e6386c",
                "11187331c279962d93d604243fd592cb9d0a926f422e47187521287e7156c5c4d603135569b9e9d09cf5d4a270f59746",
            ),
        ];
        for (g, i, gi, r, gr, gir) in cases {
            let h = |s: &str| hex::decode(s.replace(' ', "")).unwrap();
            let ki = KeyPair::from_private(g, &h(i)).unwrap();
            let kr = KeyPair::from_private(g, &h(r)).unwrap();
            assert_eq!(ki.public(), h(gi).as_slice(), "{g:?}");
            assert_eq!(kr.public(), h(gr).as_slice(), "{g:?}");
            assert_eq!(
                ki.agree(kr.public()).unwrap().as_slice(),
                h(gir).as_slice(),
                "{g:?}"
            );
            assert_eq!(
                kr.agree(ki.public()).unwrap().as_slice(),
                h(gir).as_slice(),
                "{g:?}"
            );
            assert_eq!(
                (g.public_len(), g.shared_len()),
                (h(gi).len(), h(gir).len())
            );
        }
    }

    /// Peer values that are not points of the curve, the wrong length, or SEC 1's prefixed form are refused; so
    /// are private scalars 0 and n (P-256's order).
    #[test]
    fn ecp_refuses_invalid_points_and_scalars() {
        for g in [Group::Ecp256, Group::Ecp384] {
            let k = KeyPair::generate(g, &mut SeededRng::new(3));
            let good = KeyPair::generate(g, &mut SeededRng::new(4))
                .public()
                .to_vec();
            assert!(k.agree(&good).is_ok());
            let n = g.public_len();
            let mut off = good.clone();
            *off.last_mut().unwrap() ^= 1;
            let mut prefixed = vec![4u8];
            prefixed.extend_from_slice(&good);
            for (what, v) in [
                ("off the curve", off),
                ("zero", vec![0u8; n]),
                ("all ones", vec![0xff; n]),
                ("short", good[..n - 1].to_vec()),
                ("prefixed", prefixed),
                ("empty", vec![]),
            ] {
                assert!(k.agree(&v).is_err(), "{g:?} {what}");
            }
        }
        let order = "ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551";
        assert!(KeyPair::from_private(Group::Ecp256, &hex::decode(order).unwrap()).is_err());
        assert!(KeyPair::from_private(Group::Ecp256, &[0u8; 32]).is_err());
    }
}
