//! The l2sec suites: version 0 (the thesis: a block cipher in CBC, or ECB behind a switch, with HMAC-SHA1) and
//! version 1 (AEAD), with their key lengths.

use crate::header::Version;

/// A cipher suite. One session uses one suite; the receiver knows it from the session (not from the frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suite {
    /// v0: Blowfish-CBC (128-bit key) with HMAC-SHA1; the thesis' default.
    BlowfishCbc,
    /// v0: AES-128-CBC with HMAC-SHA1.
    Aes128Cbc,
    /// v0: AES-256-CBC with HMAC-SHA1.
    Aes256Cbc,
    /// v0: 3DES-EDE3-CBC with HMAC-SHA1.
    TripleDesCbc,
    /// v0, insecure: Blowfish-ECB with HMAC-SHA1 (only with `insecure_ecb`; the thesis' pattern demonstration).
    BlowfishEcb,
    /// v0, insecure: AES-128-ECB with HMAC-SHA1 (only with `insecure_ecb`).
    Aes128Ecb,
    /// v0, insecure: AES-256-ECB with HMAC-SHA1 (only with `insecure_ecb`).
    Aes256Ecb,
    /// v0, insecure: 3DES-EDE3-ECB with HMAC-SHA1 (only with `insecure_ecb`).
    TripleDesEcb,
    /// v1: AES-GCM with a 128-bit key and a 16-byte tag; netveil's default.
    Aes128Gcm,
    /// v1: AES-GCM with a 256-bit key and a 16-byte tag.
    Aes256Gcm,
    /// v1: ChaCha20-Poly1305 (RFC 8439).
    ChaCha20Poly1305,
    /// v0, insecure: no encryption and no integrity check, the framing alone (only with `insecure_null`; the L2
    /// study's noENC-noHMAC category, to measure what the framing costs apart from the cryptography).
    Null,
}

/// The block cipher of a version-0 suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockAlg {
    Blowfish,
    Aes128,
    Aes256,
    TripleDes,
}

/// Length of the HMAC-SHA1 key and ICV of version 0 (the full HMAC-SHA1 output).
pub const HMAC_LEN: usize = 20;
/// Length of the AEAD tag of version 1.
pub const TAG_LEN: usize = 16;
/// Length of the per-session nonce salt of version 1.
pub const SALT_LEN: usize = 4;
/// Length of an Ed25519 signature.
pub const SIG_LEN: usize = 64;

impl Suite {
    /// Every suite, the insecure ECB ones included.
    pub const ALL: [Suite; 12] = [
        Suite::BlowfishCbc,
        Suite::Aes128Cbc,
        Suite::Aes256Cbc,
        Suite::TripleDesCbc,
        Suite::BlowfishEcb,
        Suite::Aes128Ecb,
        Suite::Aes256Ecb,
        Suite::TripleDesEcb,
        Suite::Aes128Gcm,
        Suite::Aes256Gcm,
        Suite::ChaCha20Poly1305,
        Suite::Null,
    ];

    /// Parses a suite name (as [`Suite::name`] prints it; `aes128gcm16`/`aes256gcm16` accepted too).
    pub fn from_name(s: &str) -> Option<Suite> {
        Some(match s {
            "blowfish-cbc-sha1" | "blowfish-sha1" => Suite::BlowfishCbc,
            "aes128-cbc-sha1" | "aes128-sha1" => Suite::Aes128Cbc,
            "aes256-cbc-sha1" | "aes256-sha1" => Suite::Aes256Cbc,
            "3des-cbc-sha1" | "3des-sha1" => Suite::TripleDesCbc,
            "blowfish-ecb-sha1" => Suite::BlowfishEcb,
            "aes128-ecb-sha1" => Suite::Aes128Ecb,
            "aes256-ecb-sha1" => Suite::Aes256Ecb,
            "3des-ecb-sha1" => Suite::TripleDesEcb,
            "aes128gcm" | "aes128gcm16" => Suite::Aes128Gcm,
            "aes256gcm" | "aes256gcm16" => Suite::Aes256Gcm,
            "chacha20poly1305" => Suite::ChaCha20Poly1305,
            "null-null" | "noenc-nohmac" => Suite::Null,
            _ => return None,
        })
    }

    /// A short stable name.
    pub fn name(self) -> &'static str {
        match self {
            Suite::BlowfishCbc => "blowfish-cbc-sha1",
            Suite::Aes128Cbc => "aes128-cbc-sha1",
            Suite::Aes256Cbc => "aes256-cbc-sha1",
            Suite::TripleDesCbc => "3des-cbc-sha1",
            Suite::BlowfishEcb => "blowfish-ecb-sha1",
            Suite::Aes128Ecb => "aes128-ecb-sha1",
            Suite::Aes256Ecb => "aes256-ecb-sha1",
            Suite::TripleDesEcb => "3des-ecb-sha1",
            Suite::Aes128Gcm => "aes128gcm",
            Suite::Aes256Gcm => "aes256gcm",
            Suite::ChaCha20Poly1305 => "chacha20poly1305",
            Suite::Null => "null-null",
        }
    }

    /// The header version that carries this suite.
    pub fn version(self) -> Version {
        match self {
            Suite::Aes128Gcm | Suite::Aes256Gcm | Suite::ChaCha20Poly1305 => Version::V1,
            _ => Version::V0,
        }
    }

    /// The block cipher of a version-0 suite (`None` for AEAD suites).
    pub fn block_alg(self) -> Option<BlockAlg> {
        Some(match self {
            Suite::BlowfishCbc | Suite::BlowfishEcb => BlockAlg::Blowfish,
            Suite::Aes128Cbc | Suite::Aes128Ecb => BlockAlg::Aes128,
            Suite::Aes256Cbc | Suite::Aes256Ecb => BlockAlg::Aes256,
            Suite::TripleDesCbc | Suite::TripleDesEcb => BlockAlg::TripleDes,
            _ => return None,
        })
    }

    /// True for the ECB suites, which leak repeated plaintext blocks and need the `insecure_ecb` switch.
    pub fn is_ecb(self) -> bool {
        matches!(
            self,
            Suite::BlowfishEcb | Suite::Aes128Ecb | Suite::Aes256Ecb | Suite::TripleDesEcb
        )
    }

    /// True for the null suite (no encryption, no integrity), which needs the `insecure_null` switch.
    pub fn is_null(self) -> bool {
        self == Suite::Null
    }

    /// True for the suites that need an insecure switch: the ECB suites and the null suite.
    pub fn is_insecure(self) -> bool {
        self.is_ecb() || self.is_null()
    }

    /// Length of the encryption key (Blowfish: 16 bytes, the thesis' 128 bits; 0 for the null suite).
    pub fn enc_key_len(self) -> usize {
        match self {
            Suite::Null => 0,
            Suite::BlowfishCbc | Suite::BlowfishEcb => 16,
            Suite::Aes128Cbc | Suite::Aes128Ecb | Suite::Aes128Gcm => 16,
            Suite::TripleDesCbc | Suite::TripleDesEcb => 24,
            Suite::Aes256Cbc | Suite::Aes256Ecb | Suite::Aes256Gcm | Suite::ChaCha20Poly1305 => 32,
        }
    }

    /// Length of the HMAC key (version 0: 20) or 0 (version 1, the null suite).
    pub fn auth_key_len(self) -> usize {
        if self.is_null() {
            return 0;
        }
        match self.version() {
            Version::V0 => HMAC_LEN,
            Version::V1 => 0,
        }
    }

    /// Length of the nonce salt (version 1: 4) or 0 (version 0).
    pub fn salt_len(self) -> usize {
        match self.version() {
            Version::V0 => 0,
            Version::V1 => SALT_LEN,
        }
    }

    /// Cipher block length: padding makes the encrypted section a multiple of it (1 for AEAD: no padding).
    pub fn block_len(self) -> usize {
        match self.block_alg() {
            Some(BlockAlg::Blowfish | BlockAlg::TripleDes) => 8,
            Some(BlockAlg::Aes128 | BlockAlg::Aes256) => 16,
            None => 1,
        }
    }

    /// Length of the keyed ICV without signature: the HMAC-SHA1 (20), the AEAD tag (16) or nothing (the null
    /// suite).
    pub fn icv_len(self) -> usize {
        if self.is_null() {
            return 0;
        }
        match self.version() {
            Version::V0 => HMAC_LEN,
            Version::V1 => TAG_LEN,
        }
    }
}

impl core::fmt::Display for Suite {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
