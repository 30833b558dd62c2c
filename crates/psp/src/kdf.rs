//! PSP SA key derivation: NIST SP 800-108 counter mode with AES-256-CMAC as PRF
//! ([`netveil_crypto::kdf::sp800_108_cmac_aes256`]), keyed with the master key that the SPI's top bit selects.
//! Input block (16 bytes, big-endian): counter (32 bits, 1 then 2) ‖ label ("Pv0\0" for 128-bit keys, "Pv1\0"
//! for 256-bit keys: SP 800-108's label "Pv0"/"Pv1" and its 0x00 separator) ‖ SPI (the context) ‖ key length in
//! bits (32 bits).
//!
//! The label is chosen by the key length: for versions 0 and 1 this is the specification's label by version;
//! for the GMAC versions 2 and 3 it is an assumption (no vector checked).

use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

use crate::header::Version;

/// The two 256-bit master keys of a device; `keys[spi >> 31]` derives an SA's key.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct MasterKeys {
    keys: [[u8; 32]; 2],
}

impl core::fmt::Debug for MasterKeys {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("MasterKeys(..)")
    }
}

impl MasterKeys {
    pub fn new(key0: [u8; 32], key1: [u8; 32]) -> Self {
        MasterKeys { keys: [key0, key1] }
    }

    /// Derives the SA key (16 bytes for versions 0/2, 32 for 1/3) for `spi`.
    pub fn derive(&self, spi: u32, version: Version) -> Zeroizing<Vec<u8>> {
        derive(&self.keys[(spi >> 31) as usize], spi, version)
    }
}

/// Derives an SA key from the master key already selected by the SPI's top bit.
pub fn derive(master: &[u8; 32], spi: u32, version: Version) -> Zeroizing<Vec<u8>> {
    let len = version.key_len();
    let label: &[u8] = if len == 16 { b"Pv0" } else { b"Pv1" };
    let mut out = Zeroizing::new(vec![0u8; len]);
    netveil_crypto::kdf::sp800_108_cmac_aes256(master, label, &spi.to_be_bytes(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specification's examples, with the master keys of the reference configurations.
    #[test]
    fn spec_examples() {
        let mk =
            crate::refcfg::parse_master_keys(include_str!("../../../testdata/psp/cfg/decrypt.cfg"))
                .unwrap();
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(
            hex(&mk.derive(0x1234_5678, Version::AesGcm128)),
            "96c22dc799198090b74b70ae468e4e30"
        );
        assert_eq!(
            hex(&mk.derive(0x9A34_5678, Version::AesGcm128)),
            "3946da2554eae46ad1ef77a64372edc4"
        );
        assert_eq!(
            hex(&mk.derive(0x1234_5678, Version::AesGcm256)),
            "2b7d72074e42ca334487f2990e3f8c4037e436f38283449b76463e9b7fb2e3de"
        );
    }
}
