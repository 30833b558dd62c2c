//! ML-KEM-768 (FIPS 203), through aws-lc-rs's KEM API: the key encapsulation IKEv2 uses as an additional key
//! exchange (RFC 9370, draft-ietf-ipsecme-ikev2-mlkem).
//!
//! - The party that starts (IKE's initiator) [`MlKem768::generate`]s a key pair and sends the encapsulation key
//!   ([`MlKem768::public`], [`ML_KEM_768_PUBLIC_LEN`] = 1184 bytes);
//! - the other [`encapsulate`]s to it: a ciphertext ([`ML_KEM_768_CIPHERTEXT_LEN`] = 1088 bytes) to send back and
//!   the 32-byte shared secret;
//! - the first [`MlKem768::decapsulate`]s the ciphertext to the same secret.
//!
//! Lengths are checked before aws-lc sees anything. aws-lc checks an encapsulation key as FIPS 203 7.2 asks
//! (every coefficient below q: the "modulus check"), so a malformed one is refused. A ciphertext of the right
//! length always decapsulates: a modified one gives an unrelated secret (ML-KEM's implicit rejection), which
//! then fails the key confirmation of the protocol around it (in IKE: the AUTH payloads).
//!
//! Randomness: aws-lc-rs draws the key pair's seed and the encapsulation's message from aws-lc's own generator
//! (seeded by the OS); its API takes no caller generator, so unlike [`crate::dh`] these take no
//! [`crate::rand::Rng`], and a transcript with ML-KEM is not reproducible from a seeded one.
//!
//! The decapsulation key lives in aws-lc's memory (cleansed when freed); shared secrets are [`Zeroizing`]. None of
//! them is printed (`Debug` shows no key bytes).

use aws_lc_rs::kem::{self, Ciphertext, DecapsulationKey, EncapsulationKey, ML_KEM_768};
use zeroize::Zeroizing;

use crate::KeyError;

/// Bytes of an ML-KEM-768 encapsulation key (the initiator's KE data).
pub const ML_KEM_768_PUBLIC_LEN: usize = 1184;
/// Bytes of an ML-KEM-768 ciphertext (the responder's KE data).
pub const ML_KEM_768_CIPHERTEXT_LEN: usize = 1088;
/// Bytes of the shared secret.
pub const ML_KEM_768_SHARED_LEN: usize = 32;

/// An ML-KEM-768 key pair: the decapsulation key (aws-lc's, cleansed when freed) and the encapsulation key.
pub struct MlKem768 {
    key: Dk,
    public: Vec<u8>,
}

/// The decapsulation key: aws-lc's, or (`--cfg fuzzing` only) none, the stand-in's secret being a function of the
/// ciphertext (see `crate::fuzz`).
enum Dk {
    AwsLc(DecapsulationKey<kem::AlgorithmId>),
    #[cfg(fuzzing)]
    Fuzz,
}

impl Dk {
    /// The shared secret of a ciphertext of the right length.
    fn decapsulate(&self, ciphertext: &[u8]) -> Result<Zeroizing<Vec<u8>>, KeyError> {
        match self {
            Dk::AwsLc(key) => {
                let s = key
                    .decapsulate(Ciphertext::from(ciphertext))
                    .map_err(|_| unusable("ML-KEM-768 decapsulation failed"))?;
                Ok(Zeroizing::new(s.as_ref().to_vec()))
            }
            #[cfg(fuzzing)]
            Dk::Fuzz => Ok(Zeroizing::new(crate::fuzz::kem_shared(
                ciphertext,
                ML_KEM_768_SHARED_LEN,
            ))),
        }
    }
}

impl core::fmt::Debug for MlKem768 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MlKem768").finish_non_exhaustive()
    }
}

fn unusable(what: &'static str) -> KeyError {
    KeyError::Unusable(what)
}

impl MlKem768 {
    /// A fresh key pair (from aws-lc's generator, see the module's documentation).
    pub fn generate() -> Result<MlKem768, KeyError> {
        #[cfg(fuzzing)]
        return Ok(MlKem768 {
            key: Dk::Fuzz,
            public: crate::fuzz::kem_public(&[0x4b; 32], ML_KEM_768_PUBLIC_LEN),
        });
        #[cfg_attr(fuzzing, allow(unreachable_code))]
        let key = DecapsulationKey::generate(&ML_KEM_768)
            .map_err(|_| unusable("ML-KEM-768 key generation failed"))?;
        let public = key
            .encapsulation_key()
            .and_then(|e| e.key_bytes())
            .map_err(|_| unusable("ML-KEM-768 key generation failed"))?
            .as_ref()
            .to_vec();
        if public.len() != ML_KEM_768_PUBLIC_LEN {
            return Err(unusable("ML-KEM-768 key generation failed"));
        }
        Ok(MlKem768 {
            key: Dk::AwsLc(key),
            public,
        })
    }

    /// A key pair from an expanded decapsulation key (FIPS 203's 2400-byte `dk`, which holds the encapsulation
    /// key too): for known-answer tests.
    pub fn from_decapsulation_key(dk: &[u8]) -> Result<MlKem768, KeyError> {
        const DK_LEN: usize = 2400;
        if dk.len() != DK_LEN {
            return Err(KeyError::BadLength {
                alg: "ML-KEM-768 decapsulation key",
                expected: DK_LEN,
                got: dk.len(),
            });
        }
        let key = DecapsulationKey::new(&ML_KEM_768, dk)
            .map_err(|_| unusable("invalid ML-KEM-768 decapsulation key"))?;
        // FIPS 203: dk = dk_PKE (1152) | ek (1184) | H(ek) (32) | z (32).
        let public = dk[1152..1152 + ML_KEM_768_PUBLIC_LEN].to_vec();
        Ok(MlKem768 {
            key: Dk::AwsLc(key),
            public,
        })
    }

    /// The encapsulation key, [`ML_KEM_768_PUBLIC_LEN`] bytes.
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret of `ciphertext`. Err: not [`ML_KEM_768_CIPHERTEXT_LEN`] bytes (or aws-lc failed); any
    /// ciphertext of the right length gives a secret (a modified one an unrelated one).
    pub fn decapsulate(&self, ciphertext: &[u8]) -> Result<Zeroizing<Vec<u8>>, KeyError> {
        if ciphertext.len() != ML_KEM_768_CIPHERTEXT_LEN {
            return Err(KeyError::BadLength {
                alg: "ML-KEM-768 ciphertext",
                expected: ML_KEM_768_CIPHERTEXT_LEN,
                got: ciphertext.len(),
            });
        }
        self.key.decapsulate(ciphertext)
    }
}

/// Encapsulates to the peer's encapsulation key: the ciphertext to send and the shared secret. Err: a key of the
/// wrong length or one that fails FIPS 203's checks.
pub fn encapsulate(public: &[u8]) -> Result<(Vec<u8>, Zeroizing<Vec<u8>>), KeyError> {
    if public.len() != ML_KEM_768_PUBLIC_LEN {
        return Err(KeyError::BadLength {
            alg: "ML-KEM-768 encapsulation key",
            expected: ML_KEM_768_PUBLIC_LEN,
            got: public.len(),
        });
    }
    #[cfg(fuzzing)]
    return if crate::fuzz::kem_public_ok(public) {
        let ct = crate::fuzz::kem_ciphertext(public, ML_KEM_768_CIPHERTEXT_LEN);
        let ss = crate::fuzz::kem_shared(&ct, ML_KEM_768_SHARED_LEN);
        Ok((ct, Zeroizing::new(ss)))
    } else {
        Err(unusable("invalid ML-KEM-768 encapsulation key"))
    };
    #[cfg_attr(fuzzing, allow(unreachable_code))]
    let ek = EncapsulationKey::new(&ML_KEM_768, public)
        .map_err(|_| unusable("invalid ML-KEM-768 encapsulation key"))?;
    let (ct, s) = ek
        .encapsulate()
        .map_err(|_| unusable("invalid ML-KEM-768 encapsulation key"))?;
    if ct.as_ref().len() != ML_KEM_768_CIPHERTEXT_LEN || s.as_ref().len() != ML_KEM_768_SHARED_LEN {
        return Err(unusable("ML-KEM-768 encapsulation failed"));
    }
    Ok((ct.as_ref().to_vec(), Zeroizing::new(s.as_ref().to_vec())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_gives_the_same_secret_and_the_lengths_of_fips_203() {
        let a = MlKem768::generate().unwrap();
        assert_eq!(a.public().len(), 1184);
        let (ct, s1) = encapsulate(a.public()).unwrap();
        assert_eq!(ct.len(), 1088);
        assert_eq!(s1.len(), 32);
        let s2 = a.decapsulate(&ct).unwrap();
        assert_eq!(*s1, *s2);
        // Two encapsulations to one key: different ciphertexts and secrets.
        let (ct2, s3) = encapsulate(a.public()).unwrap();
        assert_ne!(ct, ct2);
        assert_ne!(*s1, *s3);
        // Another key pair does not decapsulate to the same secret.
        let b = MlKem768::generate().unwrap();
        assert_ne!(a.public(), b.public());
        assert_ne!(*b.decapsulate(&ct).unwrap(), *s1);
    }

    #[test]
    fn a_modified_ciphertext_decapsulates_to_an_unrelated_secret() {
        let a = MlKem768::generate().unwrap();
        let (ct, s) = encapsulate(a.public()).unwrap();
        for at in [0, 543, 1087] {
            let mut bad = ct.clone();
            bad[at] ^= 0x01;
            let got = a.decapsulate(&bad).unwrap();
            assert_ne!(*got, *s, "flipped byte {at}");
            // Implicit rejection is deterministic: the same modified ciphertext, the same secret.
            assert_eq!(*got, *a.decapsulate(&bad).unwrap());
        }
    }

    #[test]
    fn wrong_lengths_and_malformed_keys_are_refused() {
        let a = MlKem768::generate().unwrap();
        let (ct, _) = encapsulate(a.public()).unwrap();
        assert!(a.decapsulate(&ct[..1087]).is_err());
        assert!(a.decapsulate(&[ct.clone(), vec![0]].concat()).is_err());
        assert!(a.decapsulate(&[]).is_err());
        assert!(encapsulate(&a.public()[..1183]).is_err());
        assert!(encapsulate(&[a.public(), &[0u8]].concat()).is_err());
        assert!(encapsulate(&[]).is_err());
        // FIPS 203 7.2 modulus check: a coefficient of 4095 (12 bits all ones) is not below q = 3329.
        let mut bad = a.public().to_vec();
        bad[0] = 0xff;
        bad[1] |= 0x0f;
        assert!(encapsulate(&bad).is_err());
        assert!(MlKem768::from_decapsulation_key(&[0u8; 100]).is_err());
    }

    #[test]
    fn an_expanded_decapsulation_key_holds_the_encapsulation_key() {
        let a = MlKem768::generate().unwrap();
        let Dk::AwsLc(k) = &a.key;
        let dk = k.key_bytes().unwrap();
        let b = MlKem768::from_decapsulation_key(dk.as_ref()).unwrap();
        assert_eq!(a.public(), b.public());
        let (ct, s) = encapsulate(b.public()).unwrap();
        assert_eq!(*b.decapsulate(&ct).unwrap(), *s);
    }

    /// `key = hex` lines of testdata/mlkem768_kat.txt.
    fn kat(key: &str) -> Vec<u8> {
        let text = include_str!("../testdata/mlkem768_kat.txt");
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(" = ")))
            .unwrap();
        hex::decode(line).unwrap()
    }

    #[test]
    fn decapsulation_known_answer_of_mlkem_native() {
        let (pk, sk, ct, ss) = (kat("pk"), kat("sk"), kat("ct"), kat("ss"));
        let k = MlKem768::from_decapsulation_key(&sk).unwrap();
        assert_eq!(
            k.public(),
            &pk[..],
            "the encapsulation key inside the expanded decapsulation key"
        );
        assert_eq!(*k.decapsulate(&ct).unwrap(), ss);
        // One bit off in the ciphertext: implicit rejection, another secret.
        let mut bad = ct.clone();
        bad[100] ^= 0x80;
        assert_ne!(*k.decapsulate(&bad).unwrap(), ss);
        // The published encapsulation key is one aws-lc accepts, and its encapsulations decapsulate.
        let (c2, s2) = encapsulate(&pk).unwrap();
        assert_eq!(*k.decapsulate(&c2).unwrap(), *s2);
    }

    #[test]
    fn debug_prints_no_key_bytes() {
        let a = MlKem768::generate().unwrap();
        let s = format!("{a:?}");
        assert_eq!(s, "MlKem768 { .. }");
    }
}
