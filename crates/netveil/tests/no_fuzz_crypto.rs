//! The fuzzing stand-ins for Diffie-Hellman, ML-KEM and signatures (crates/crypto/src/fuzz.rs: cheap, deterministic,
//! insecure) exist only in a build with `--cfg fuzzing`: this build says it has none, and the `netveil` binary under
//! test does not contain the bytes every stand-in hashes first. (The fuzz stage of scripts/test.sh checks the
//! converse on a fuzz target's binary: the same search finds them there.)

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");

/// Where `needle` occurs in `hay` (naive; the binary is tens of MB, the needle starts with a rare byte pair).
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn the_tested_build_has_no_fuzzing_crypto() {
    assert!(
        !std::hint::black_box(netveil_crypto::FUZZ_CRYPTO),
        "netveil-crypto was built with --cfg fuzzing"
    );
    let bin = std::fs::read(NETVEIL).unwrap_or_else(|e| panic!("{NETVEIL}: {e}"));
    // The search works on this binary: a string of the crypto crate's that the binary does use is found.
    let used = b"invalid Diffie-Hellman public value";
    assert!(
        find(&bin, used).is_some(),
        "{NETVEIL} should hold netveil-crypto's message '{}'",
        String::from_utf8_lossy(used)
    );
    assert_eq!(
        find(&bin, netveil_crypto::FUZZ_CRYPTO_LABEL),
        None,
        "{NETVEIL} contains the fuzzing stand-ins' label"
    );
}
