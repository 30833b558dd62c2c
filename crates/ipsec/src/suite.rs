//! ESP and AH algorithm suites, named as in strongSwan proposals (`aes128gcm16`, `aes256-sha256`, `3des-md5`,
//! `null-sha1`, `chacha20poly1305`, `aes128gmac`; AH: `sha1`, `md5`, `sha256`), with their key lengths and the key
//! objects built from them once per SA.

use netveil_crypto::{
    new_aead, new_cbc, new_mac, Aead, AeadAlg, CbcAlg, CbcCipher, HashAlg, KeyError, Mac,
};

/// An integrity algorithm (HMAC with the truncation RFC 2404/2403/4868 define).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Integ {
    HmacMd5_96,
    HmacSha1_96,
    HmacSha256_128,
    HmacSha384_192,
    HmacSha512_256,
}

impl Integ {
    pub fn from_name(s: &str) -> Option<Integ> {
        Some(match s {
            "md5" | "hmac-md5-96" => Integ::HmacMd5_96,
            "sha1" | "sha" | "hmac-sha1-96" => Integ::HmacSha1_96,
            "sha256" | "sha2_256" | "hmac-sha2-256-128" => Integ::HmacSha256_128,
            "sha384" | "sha2_384" | "hmac-sha2-384-192" => Integ::HmacSha384_192,
            "sha512" | "sha2_512" | "hmac-sha2-512-256" => Integ::HmacSha512_256,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Integ::HmacMd5_96 => "md5",
            Integ::HmacSha1_96 => "sha1",
            Integ::HmacSha256_128 => "sha256",
            Integ::HmacSha384_192 => "sha384",
            Integ::HmacSha512_256 => "sha512",
        }
    }
    /// RFC name, as Wireshark's ESP preferences spell it.
    pub fn rfc_name(self) -> &'static str {
        match self {
            Integ::HmacMd5_96 => "HMAC-MD5-96 [RFC2403]",
            Integ::HmacSha1_96 => "HMAC-SHA-1-96 [RFC2404]",
            Integ::HmacSha256_128 => "HMAC-SHA-256-128 [RFC4868]",
            Integ::HmacSha384_192 => "HMAC-SHA-384-192 [RFC4868]",
            Integ::HmacSha512_256 => "HMAC-SHA-512-256 [RFC4868]",
        }
    }
    pub fn hash(self) -> HashAlg {
        match self {
            Integ::HmacMd5_96 => HashAlg::Md5,
            Integ::HmacSha1_96 => HashAlg::Sha1,
            Integ::HmacSha256_128 => HashAlg::Sha256,
            Integ::HmacSha384_192 => HashAlg::Sha384,
            Integ::HmacSha512_256 => HashAlg::Sha512,
        }
    }
    /// Key length (the hash's output length, as RFC 2403/2404/4868 specify).
    pub fn key_len(self) -> usize {
        self.hash().output_len()
    }
    pub fn icv_len(self) -> usize {
        match self {
            Integ::HmacMd5_96 | Integ::HmacSha1_96 => 12,
            Integ::HmacSha256_128 => 16,
            Integ::HmacSha384_192 => 24,
            Integ::HmacSha512_256 => 32,
        }
    }
    pub fn build(self, key: &[u8]) -> Result<Box<dyn Mac>, KeyError> {
        if key.len() != self.key_len() {
            return Err(KeyError::BadLength {
                alg: self.rfc_name(),
                expected: self.key_len(),
                got: key.len(),
            });
        }
        new_mac(self.hash(), key, self.icv_len())
    }
}

/// An ESP encryption algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Enc {
    /// AES-GCM (RFC 4106) with key bits 128/256 and ICV 16/12/8 bytes.
    AesGcm { key_bits: u16, icv: u8 },
    /// ChaCha20-Poly1305 (RFC 7634).
    ChaCha20Poly1305,
    /// AES-GMAC (RFC 4543): authentication only, payload in clear.
    AesGmac { key_bits: u16 },
    /// AES-CBC (RFC 3602).
    AesCbc { key_bits: u16 },
    /// 3DES-CBC (RFC 2451).
    TripleDesCbc,
    /// NULL encryption (RFC 2410).
    Null,
}

impl Enc {
    fn from_name(s: &str) -> Option<Enc> {
        Some(match s {
            "aes128gcm16" | "aes128gcm128" => Enc::AesGcm {
                key_bits: 128,
                icv: 16,
            },
            "aes192gcm16" | "aes192gcm128" => Enc::AesGcm {
                key_bits: 192,
                icv: 16,
            },
            "aes256gcm16" | "aes256gcm128" => Enc::AesGcm {
                key_bits: 256,
                icv: 16,
            },
            "aes192gcm12" | "aes192gcm96" => Enc::AesGcm {
                key_bits: 192,
                icv: 12,
            },
            "aes192gcm8" | "aes192gcm64" => Enc::AesGcm {
                key_bits: 192,
                icv: 8,
            },
            "aes128gcm12" | "aes128gcm96" => Enc::AesGcm {
                key_bits: 128,
                icv: 12,
            },
            "aes256gcm12" | "aes256gcm96" => Enc::AesGcm {
                key_bits: 256,
                icv: 12,
            },
            "aes128gcm8" | "aes128gcm64" => Enc::AesGcm {
                key_bits: 128,
                icv: 8,
            },
            "aes256gcm8" | "aes256gcm64" => Enc::AesGcm {
                key_bits: 256,
                icv: 8,
            },
            "chacha20poly1305" => Enc::ChaCha20Poly1305,
            "aes128gmac" => Enc::AesGmac { key_bits: 128 },
            "aes256gmac" => Enc::AesGmac { key_bits: 256 },
            "aes128" => Enc::AesCbc { key_bits: 128 },
            "aes192" => Enc::AesCbc { key_bits: 192 },
            "aes256" => Enc::AesCbc { key_bits: 256 },
            "3des" => Enc::TripleDesCbc,
            "null" => Enc::Null,
            _ => return None,
        })
    }
    fn name(self) -> String {
        match self {
            Enc::AesGcm { key_bits, icv } => format!("aes{key_bits}gcm{icv}"),
            Enc::ChaCha20Poly1305 => "chacha20poly1305".into(),
            Enc::AesGmac { key_bits } => format!("aes{key_bits}gmac"),
            Enc::AesCbc { key_bits } => format!("aes{key_bits}"),
            Enc::TripleDesCbc => "3des".into(),
            Enc::Null => "null".into(),
        }
    }
    /// Whether this is a combined-mode algorithm (carries its own ICV; no separate integrity algorithm).
    pub fn is_aead(self) -> bool {
        matches!(
            self,
            Enc::AesGcm { .. } | Enc::ChaCha20Poly1305 | Enc::AesGmac { .. }
        )
    }
    /// Length of the encryption key material, including the 4-byte salt of the AEADs (RFC 4106/4543/7634).
    pub fn key_len(self) -> usize {
        match self {
            Enc::AesGcm { key_bits, .. } | Enc::AesGmac { key_bits } => key_bits as usize / 8 + 4,
            Enc::ChaCha20Poly1305 => 36,
            Enc::AesCbc { key_bits } => key_bits as usize / 8,
            Enc::TripleDesCbc => 24,
            Enc::Null => 0,
        }
    }
    /// Length of the explicit IV carried in each packet.
    pub fn iv_len(self) -> usize {
        match self {
            Enc::AesGcm { .. }
            | Enc::ChaCha20Poly1305
            | Enc::AesGmac { .. }
            | Enc::TripleDesCbc => 8,
            Enc::AesCbc { .. } => 16,
            Enc::Null => 0,
        }
    }
    /// The alignment the payload + padding + 2 trailer bytes must meet (at least 4, RFC 4303 2.4).
    pub fn block_len(self) -> usize {
        match self {
            Enc::AesCbc { .. } => 16,
            Enc::TripleDesCbc => 8,
            _ => 4,
        }
    }
    /// The encryption algorithm's name in Wireshark's ESP SA table (the value its `esp_sa` UAT file stores).
    pub fn wireshark_name(self) -> &'static str {
        match self {
            Enc::Null => "NULL",
            Enc::TripleDesCbc => "TripleDES-CBC [RFC2451]",
            Enc::AesCbc { .. } => "AES-CBC [RFC3602]",
            Enc::AesGcm { icv: 16, .. } => "AES-GCM with 16 octet ICV [RFC4106]",
            Enc::AesGcm { icv: 12, .. } => "AES-GCM with 12 octet ICV [RFC4106]",
            Enc::AesGcm { .. } => "AES-GCM with 8 octet ICV [RFC4106]",
            Enc::ChaCha20Poly1305 => "ChaCha20 with Poly1305 [RFC7634]",
            Enc::AesGmac { .. } => "NULL_AUTH_AES_GMAC [RFC4543]",
        }
    }
}

/// An ESP suite: encryption plus (for non-AEAD encryption) an integrity algorithm. `null-null` (no protection at
/// all) exists only to measure overhead and must be allowed explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EspSuite {
    pub enc: Enc,
    pub integ: Option<Integ>,
}

/// Why a suite name or key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SuiteError {
    #[error("unknown suite '{0}' (known: {1})")]
    Unknown(String, &'static str),
    #[error("'{0}' is an AEAD suite and takes no integrity algorithm")]
    AeadWithInteg(String),
    #[error("'{0}' needs an integrity algorithm (e.g. '{0}-sha256')")]
    MissingInteg(String),
    #[error("null-null provides no protection; it is refused unless allow_null_null = true (overhead measurement only)")]
    NullNull,
    #[error(transparent)]
    Key(#[from] KeyError),
}

pub const ESP_SUITES_HELP: &str = "aes128gcm16, aes256gcm16, aes128gcm12, aes256gcm12, aes128gcm8, aes256gcm8, \
chacha20poly1305, aes128gmac, aes256gmac, aes128|aes192|aes256|3des|null followed by -sha1|-md5|-sha256|-sha384|-sha512, \
null-null";
pub const AH_SUITES_HELP: &str = "sha1, md5, sha256, sha384, sha512";

impl EspSuite {
    /// Parses a strongSwan-style proposal: `aes128gcm16`, `aes256-sha256`, `null-sha1`, `null-null`.
    pub fn parse(s: &str, allow_null_null: bool) -> Result<EspSuite, SuiteError> {
        let lower = s.trim().to_ascii_lowercase();
        let (e, i) = match lower.split_once('-') {
            Some((e, i)) => (e, Some(i)),
            None => (lower.as_str(), None),
        };
        let enc =
            Enc::from_name(e).ok_or_else(|| SuiteError::Unknown(s.to_string(), ESP_SUITES_HELP))?;
        let integ = match i {
            None => None,
            Some("null") if enc == Enc::Null => {
                if !allow_null_null {
                    return Err(SuiteError::NullNull);
                }
                return Ok(EspSuite { enc, integ: None });
            }
            Some(i) => Some(
                Integ::from_name(i)
                    .ok_or_else(|| SuiteError::Unknown(s.to_string(), ESP_SUITES_HELP))?,
            ),
        };
        if enc.is_aead() && integ.is_some() {
            return Err(SuiteError::AeadWithInteg(e.to_string()));
        }
        if !enc.is_aead() && integ.is_none() {
            return Err(SuiteError::MissingInteg(e.to_string()));
        }
        Ok(EspSuite { enc, integ })
    }

    pub fn name(&self) -> String {
        match (self.enc, self.integ) {
            (e, Some(i)) => format!("{}-{}", e.name(), i.name()),
            (Enc::Null, None) => "null-null".into(),
            (e, None) => e.name(),
        }
    }

    pub fn icv_len(&self) -> usize {
        match self.enc {
            Enc::AesGcm { icv, .. } => icv as usize,
            Enc::ChaCha20Poly1305 | Enc::AesGmac { .. } => 16,
            _ => self.integ.map_or(0, |i| i.icv_len()),
        }
    }

    /// Whether the suite encrypts (GMAC and NULL do not).
    pub fn encrypts(&self) -> bool {
        !matches!(self.enc, Enc::Null | Enc::AesGmac { .. })
    }

    /// Builds the per-SA key objects.
    pub fn build(&self, enc_key: &[u8], auth_key: &[u8]) -> Result<EspKeys, SuiteError> {
        let enc = self.enc;
        if enc_key.len() != enc.key_len() {
            return Err(KeyError::BadLength {
                alg: enc.wireshark_name(),
                expected: enc.key_len(),
                got: enc_key.len(),
            }
            .into());
        }
        let split = enc_key.len().saturating_sub(4);
        let aead = |alg: AeadAlg| -> Result<EspKeys, SuiteError> {
            let mut salt = [0u8; 4];
            salt.copy_from_slice(&enc_key[split..]);
            Ok(EspKeys::Aead {
                aead: new_aead(alg, &enc_key[..split])?,
                salt,
                gmac: matches!(enc, Enc::AesGmac { .. }),
            })
        };
        match enc {
            Enc::AesGcm { key_bits: 128, icv } => aead(AeadAlg::AesGcm128 {
                tag_len: icv as usize,
            }),
            Enc::AesGcm { key_bits: 192, icv } => aead(AeadAlg::AesGcm192 {
                tag_len: icv as usize,
            }),
            Enc::AesGcm { icv, .. } => aead(AeadAlg::AesGcm256 {
                tag_len: icv as usize,
            }),
            Enc::AesGmac { key_bits: 128 } => aead(AeadAlg::AesGcm128 { tag_len: 16 }),
            Enc::AesGmac { .. } => aead(AeadAlg::AesGcm256 { tag_len: 16 }),
            Enc::ChaCha20Poly1305 => aead(AeadAlg::ChaCha20Poly1305),
            Enc::AesCbc { .. } | Enc::TripleDesCbc | Enc::Null => {
                let cipher: Option<Box<dyn CbcCipher>> = match enc {
                    Enc::AesCbc { key_bits: 128 } => Some(new_cbc(CbcAlg::Aes128, enc_key)?),
                    Enc::AesCbc { key_bits: 192 } => Some(new_cbc(CbcAlg::Aes192, enc_key)?),
                    Enc::AesCbc { .. } => Some(new_cbc(CbcAlg::Aes256, enc_key)?),
                    Enc::TripleDesCbc => Some(new_cbc(CbcAlg::TripleDes, enc_key)?),
                    _ => None,
                };
                let mac = match self.integ {
                    Some(i) => Some(i.build(auth_key)?),
                    None => None,
                };
                Ok(EspKeys::CbcHmac { cipher, mac })
            }
        }
    }
}

/// The key objects of one ESP SA.
// Built once per SA and never moved per packet: the size difference between the variants does not matter.
#[allow(clippy::large_enum_variant)]
pub enum EspKeys {
    /// GCM, ChaCha20-Poly1305 or (with `gmac`) GMAC; nonce = salt ‖ explicit IV.
    Aead {
        aead: Box<dyn Aead>,
        salt: [u8; 4],
        gmac: bool,
    },
    /// CBC (or NULL) encryption with HMAC (or, for null-null, nothing). The IVs come from the outbound SA's
    /// generator (`OutboundSa::ivgen`).
    CbcHmac {
        cipher: Option<Box<dyn CbcCipher>>,
        mac: Option<Box<dyn Mac>>,
    },
}

/// An AH suite: one integrity algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AhSuite {
    pub integ: Integ,
}

impl AhSuite {
    pub fn parse(s: &str) -> Result<AhSuite, SuiteError> {
        let lower = s.trim().to_ascii_lowercase();
        Integ::from_name(&lower)
            .map(|integ| AhSuite { integ })
            .ok_or_else(|| SuiteError::Unknown(s.to_string(), AH_SUITES_HELP))
    }
    pub fn name(&self) -> String {
        self.integ.name().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_strongswan_names() {
        let s = EspSuite::parse("aes128gcm16", false).unwrap();
        assert_eq!(
            s.enc,
            Enc::AesGcm {
                key_bits: 128,
                icv: 16
            }
        );
        assert_eq!(s.enc.key_len(), 20);
        let s = EspSuite::parse("AES256-SHA256", false).unwrap();
        assert_eq!(s.integ, Some(Integ::HmacSha256_128));
        assert_eq!(s.icv_len(), 16);
        assert_eq!(s.name(), "aes256-sha256");
        assert_eq!(
            EspSuite::parse("3des-md5", false).unwrap().enc.block_len(),
            8
        );
        assert!(matches!(
            EspSuite::parse("null-null", false),
            Err(SuiteError::NullNull)
        ));
        assert!(EspSuite::parse("null-null", true).is_ok());
        assert!(matches!(
            EspSuite::parse("aes128gcm16-sha1", false),
            Err(SuiteError::AeadWithInteg(_))
        ));
        assert!(matches!(
            EspSuite::parse("aes128", false),
            Err(SuiteError::MissingInteg(_))
        ));
        assert!(matches!(
            EspSuite::parse("rot13", false),
            Err(SuiteError::Unknown(..))
        ));
        assert_eq!(AhSuite::parse("sha256").unwrap().integ.icv_len(), 16);
    }
}
