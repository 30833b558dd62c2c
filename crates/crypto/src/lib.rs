//! netveil's cryptographic suites behind small object-safe traits.
//!
//! Every key schedule is computed once, when a key object is built (one per SA and direction); per-packet calls
//! only run the cipher over caller buffers, in place, without allocating. Primitives come from vetted libraries:
//! aws-lc-rs for AES-GCM, AES-GMAC and ChaCha20-Poly1305, RustCrypto for CBC modes, HMAC and truncated-tag GCM.
//!
//! The traits know nothing of ESP: the `netveil-ipsec` crate composes them into ESP and AH transforms.
//!
//! Randomness and key derivation live here too, for the protocol crates to be given: [`rand::Rng`] (the OS
//! generator [`rand::OsRng`] for the runtime, a seeded one for tests) and [`kdf`] (HKDF, SP 800-108, IKEv2 prf+).

#![forbid(unsafe_code)]

// layers: dh, kem, sig > fuzz > aead, cbc, kdf, mac, stream > alg, rand, traits
pub mod aead;
mod alg;
pub mod cbc;
pub mod dh;
#[cfg(any(fuzzing, test))]
mod fuzz;
pub mod kdf;
pub mod kem;
pub mod mac;
pub mod rand;
pub mod sig;
pub mod stream;
mod traits;

pub use aead::{new_aead, AeadAlg};
pub use cbc::{new_cbc, CbcAlg, IvGen};
pub use mac::{new_mac, HashAlg};
pub use stream::{new_stream, StreamAlg, StreamCipher};
pub use traits::{Aead, AuthError, CbcCipher, KeyError, Mac};

/// Whether this build has the fuzzing stand-ins for Diffie-Hellman, ML-KEM and signatures (cheap, deterministic,
/// insecure: see `src/fuzz.rs`): only with `--cfg fuzzing`, which `cargo fuzz` sets. `false` in every other build;
/// `crates/netveil/tests/no_fuzz_crypto.rs` checks it, and that [`FUZZ_CRYPTO_LABEL`] is not in the binary.
pub const FUZZ_CRYPTO: bool = cfg!(fuzzing);

/// The bytes every fuzzing stand-in hashes first: in a binary only if the stand-ins are in it.
pub const FUZZ_CRYPTO_LABEL: &[u8] =
    b"netveil fuzz-only crypto: deterministic, insecure, never in a release";
