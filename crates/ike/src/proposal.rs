//! Transforms and proposals (RFC 7296 section 3.3), written and read in strongSwan's proposal syntax.
//!
//! A [`Proposal`] is for one protocol ([`Protocol::Ike`] or [`Protocol::Esp`]) and holds, per transform type, the
//! algorithms it offers in order of preference (IKEv2 lets one proposal offer several of a kind; one of each is
//! chosen). It is built only through [`Proposal::new`] (or [`Proposal::parse`], [`Proposal::from_transforms`]),
//! which enforce the rules below, so a `Proposal` in hand is always well formed:
//!
//! - at least one encryption algorithm; AEAD and non-AEAD encryption are not mixed in one proposal (strongSwan
//!   keeps them in separate proposals too); an AEAD proposal has no integrity algorithm, a non-AEAD one needs one
//!   (RFC 7296 section 3.3.3: integrity is mandatory for non-AEAD ESP and IKE, "NONE" is not offered);
//! - IKE: at least one PRF and one key exchange method (RFC 7296 section 3.3.3: the KE transform is mandatory in
//!   IKE). As strongSwan does, a non-AEAD IKE proposal written without a PRF gets the PRFs of its integrity
//!   algorithms (`aes256-sha256-x25519` is `AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/CURVE_25519`); an AEAD
//!   one must name its PRF (strongSwan refuses it too). No ESN transform in IKE;
//! - ESP: no PRF; the key exchange is optional (PFS); ESN defaults to "no ESN" when none is named, as strongSwan's
//!   `NO_EXT_SEQ`;
//! - additional key exchanges (RFC 9370, transform types 6..=12, strongSwan's `ke1_` .. `ke7_` prefixes) only
//!   beside a key exchange.
//!
//! Selection ([`select`]) takes, as strongSwan does by default (`charon.prefer_configured_proposals = yes`), our
//! order of preference: the first of our proposals that matches one of the peer's, and in it the first of our
//! algorithms of each type that the peer's proposal offers too. RFC 7296 section 2.7 only requires that the
//! responder pick one of the initiator's proposals and, in it, one transform of each type, which both orders do;
//! [`Preference::Peer`] takes the peer's order instead.
//!
//! This module knows nothing of the wire: a proposal is a list of [`Transform`]s (type, id, key length), which the
//! SA payload's codec maps to and from.

use core::fmt;

use netveil_crypto::kdf::IkePrf;
use netveil_crypto::{AeadAlg, CbcAlg, HashAlg};

/// The protocol a proposal is for (RFC 7296 section 3.3.1, Protocol ID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// The IKE SA itself (1).
    Ike,
    /// ESP (3).
    Esp,
}

impl Protocol {
    /// The Protocol ID of RFC 7296 section 3.3.1.
    pub fn id(self) -> u8 {
        match self {
            Protocol::Ike => 1,
            Protocol::Esp => 3,
        }
    }
}

/// Transform types (RFC 7296 section 3.3.2; RFC 9370 for the additional key exchanges).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransformType {
    /// ENCR (1).
    Encr,
    /// PRF (2).
    Prf,
    /// INTEG (3).
    Integ,
    /// KE, formerly D-H (4).
    Ke,
    /// ESN (5).
    Esn,
    /// ADDKE1 .. ADDKE7 (6 ..= 12, RFC 9370); the number is 1..=7.
    AddKe(u8),
}

impl TransformType {
    /// The type's number on the wire.
    pub fn number(self) -> u8 {
        match self {
            TransformType::Encr => 1,
            TransformType::Prf => 2,
            TransformType::Integ => 3,
            TransformType::Ke => 4,
            TransformType::Esn => 5,
            TransformType::AddKe(n) => 5 + n,
        }
    }

    /// The type for a number on the wire; `None` for an unknown one.
    pub fn from_number(n: u8) -> Option<TransformType> {
        Some(match n {
            1 => TransformType::Encr,
            2 => TransformType::Prf,
            3 => TransformType::Integ,
            4 => TransformType::Ke,
            5 => TransformType::Esn,
            6..=12 => TransformType::AddKe(n - 5),
            _ => return None,
        })
    }
}

/// One transform as the SA payload carries it: type, transform id, and the Key Length attribute (in bits) for the
/// ciphers that take one (AES).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transform {
    pub ty: TransformType,
    pub id: u16,
    pub key_bits: Option<u16>,
}

/// Encryption algorithms (transform type 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encr {
    /// ENCR_AES_CBC (12), 128 or 256 bits.
    AesCbc128,
    AesCbc256,
    /// ENCR_AES_GCM_16 (20, RFC 5282 / RFC 4106), 128 or 256 bits, 16-byte ICV.
    AesGcm16_128,
    AesGcm16_256,
    /// ENCR_CHACHA20_POLY1305 (28, RFC 7634).
    ChaCha20Poly1305,
    /// ENCR_3DES (3). Legacy: kept to talk to old peers, never in a default proposal ([`Encr::is_legacy`]).
    TripleDes,
}

impl Encr {
    pub const ALL: [Encr; 6] = [
        Encr::AesCbc128,
        Encr::AesCbc256,
        Encr::AesGcm16_128,
        Encr::AesGcm16_256,
        Encr::ChaCha20Poly1305,
        Encr::TripleDes,
    ];

    /// Transform id and Key Length attribute (bits).
    pub fn transform(self) -> Transform {
        let (id, key_bits) = match self {
            Encr::AesCbc128 => (12, Some(128)),
            Encr::AesCbc256 => (12, Some(256)),
            Encr::AesGcm16_128 => (20, Some(128)),
            Encr::AesGcm16_256 => (20, Some(256)),
            Encr::ChaCha20Poly1305 => (28, None),
            Encr::TripleDes => (3, None),
        };
        Transform {
            ty: TransformType::Encr,
            id,
            key_bits,
        }
    }

    /// True for the combined-mode (AEAD) ciphers.
    pub fn is_aead(self) -> bool {
        matches!(
            self,
            Encr::AesGcm16_128 | Encr::AesGcm16_256 | Encr::ChaCha20Poly1305
        )
    }

    /// True for algorithms kept only for old peers (3DES: 64-bit blocks).
    pub fn is_legacy(self) -> bool {
        self == Encr::TripleDes
    }

    /// Bytes of keying material the cipher takes from prf+: the key, plus the 4-byte salt of the AEADs (RFC 5282
    /// section 7.1 for GCM, RFC 7634 section 2 for ChaCha20-Poly1305; RFC 4106 / RFC 7634 for ESP likewise).
    pub fn keymat_len(self) -> usize {
        match self {
            Encr::AesCbc128 => 16,
            Encr::AesCbc256 => 32,
            Encr::TripleDes => 24,
            Encr::AesGcm16_128 => 16 + 4,
            Encr::AesGcm16_256 | Encr::ChaCha20Poly1305 => 32 + 4,
        }
    }

    /// The AEAD of `crypto` for this cipher (`None` for CBC).
    pub fn aead(self) -> Option<AeadAlg> {
        match self {
            Encr::AesGcm16_128 => Some(AeadAlg::AesGcm128 { tag_len: 16 }),
            Encr::AesGcm16_256 => Some(AeadAlg::AesGcm256 { tag_len: 16 }),
            Encr::ChaCha20Poly1305 => Some(AeadAlg::ChaCha20Poly1305),
            _ => None,
        }
    }

    /// The CBC cipher of `crypto` for this cipher (`None` for the AEADs).
    pub fn cbc(self) -> Option<CbcAlg> {
        match self {
            Encr::AesCbc128 => Some(CbcAlg::Aes128),
            Encr::AesCbc256 => Some(CbcAlg::Aes256),
            Encr::TripleDes => Some(CbcAlg::TripleDes),
            _ => None,
        }
    }
}

/// Pseudorandom functions (transform type 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prf {
    /// PRF_HMAC_SHA1 (2).
    HmacSha1,
    /// PRF_HMAC_SHA2_256 (5).
    HmacSha256,
    /// PRF_HMAC_SHA2_384 (6).
    HmacSha384,
    /// PRF_HMAC_SHA2_512 (7).
    HmacSha512,
}

impl Prf {
    pub const ALL: [Prf; 4] = [
        Prf::HmacSha1,
        Prf::HmacSha256,
        Prf::HmacSha384,
        Prf::HmacSha512,
    ];

    pub fn id(self) -> u16 {
        match self {
            Prf::HmacSha1 => 2,
            Prf::HmacSha256 => 5,
            Prf::HmacSha384 => 6,
            Prf::HmacSha512 => 7,
        }
    }

    /// The PRF as `crypto`'s KDF module computes it.
    pub fn ike_prf(self) -> IkePrf {
        match self {
            Prf::HmacSha1 => IkePrf::HmacSha1,
            Prf::HmacSha256 => IkePrf::HmacSha256,
            Prf::HmacSha384 => IkePrf::HmacSha384,
            Prf::HmacSha512 => IkePrf::HmacSha512,
        }
    }

    /// Output length, also the length of SK_d, SK_pi and SK_pr (RFC 7296 section 2.14).
    pub fn output_len(self) -> usize {
        self.ike_prf().output_len()
    }
}

/// Integrity algorithms (transform type 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Integ {
    /// AUTH_HMAC_SHA1_96 (2).
    HmacSha1_96,
    /// AUTH_HMAC_SHA2_256_128 (12).
    HmacSha256_128,
    /// AUTH_HMAC_SHA2_384_192 (13).
    HmacSha384_192,
    /// AUTH_HMAC_SHA2_512_256 (14).
    HmacSha512_256,
}

impl Integ {
    pub const ALL: [Integ; 4] = [
        Integ::HmacSha1_96,
        Integ::HmacSha256_128,
        Integ::HmacSha384_192,
        Integ::HmacSha512_256,
    ];

    pub fn id(self) -> u16 {
        match self {
            Integ::HmacSha1_96 => 2,
            Integ::HmacSha256_128 => 12,
            Integ::HmacSha384_192 => 13,
            Integ::HmacSha512_256 => 14,
        }
    }

    pub fn hash(self) -> HashAlg {
        match self {
            Integ::HmacSha1_96 => HashAlg::Sha1,
            Integ::HmacSha256_128 => HashAlg::Sha256,
            Integ::HmacSha384_192 => HashAlg::Sha384,
            Integ::HmacSha512_256 => HashAlg::Sha512,
        }
    }

    /// Key length: the hash's output length (RFC 2404, RFC 4868).
    pub fn key_len(self) -> usize {
        self.hash().output_len()
    }

    /// The truncated ICV's length: 12, 16, 24, 32.
    pub fn icv_len(self) -> usize {
        self.hash().output_len() / 2 + if self == Integ::HmacSha1_96 { 2 } else { 0 }
    }

    /// The PRF strongSwan adds to a non-AEAD IKE proposal that names none.
    fn matching_prf(self) -> Prf {
        match self {
            Integ::HmacSha1_96 => Prf::HmacSha1,
            Integ::HmacSha256_128 => Prf::HmacSha256,
            Integ::HmacSha384_192 => Prf::HmacSha384,
            Integ::HmacSha512_256 => Prf::HmacSha512,
        }
    }
}

/// Key exchange methods (transform type 4, and 6..=12 as additional key exchanges).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ke {
    /// 2048-bit MODP group (14, RFC 3526).
    Modp2048,
    /// 3072-bit MODP group (15, RFC 3526).
    Modp3072,
    /// 256-bit random ECP group (19, RFC 5903).
    Ecp256,
    /// 384-bit random ECP group (20, RFC 5903).
    Ecp384,
    /// Curve25519 (31, RFC 8031).
    Curve25519,
    /// ML-KEM-768 (36): the IANA "Transform Type 4 - Key Exchange Method Transform IDs" registry as requested by
    /// draft-ietf-ipsecme-ikev2-mlkem (35 ML-KEM-512, 36 ML-KEM-768, 37 ML-KEM-1024). A KEM, meant as an
    /// additional key exchange (RFC 9370) beside an ECDH one.
    MlKem768,
}

impl Ke {
    pub const ALL: [Ke; 6] = [
        Ke::Modp2048,
        Ke::Modp3072,
        Ke::Ecp256,
        Ke::Ecp384,
        Ke::Curve25519,
        Ke::MlKem768,
    ];

    pub fn id(self) -> u16 {
        match self {
            Ke::Modp2048 => 14,
            Ke::Modp3072 => 15,
            Ke::Ecp256 => 19,
            Ke::Ecp384 => 20,
            Ke::Curve25519 => 31,
            Ke::MlKem768 => 36,
        }
    }
}

/// Extended Sequence Numbers (transform type 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Esn {
    /// No ESN (0).
    No,
    /// ESN (1).
    Yes,
}

impl Esn {
    pub fn id(self) -> u16 {
        match self {
            Esn::No => 0,
            Esn::Yes => 1,
        }
    }
}

/// Number of additional key exchange slots (ADDKE1..ADDKE7, RFC 9370).
pub const ADD_KE_SLOTS: usize = 7;

/// A proposal: per transform type, the algorithms offered, in order of preference. Always well formed (see the
/// module's rules); built by [`Proposal::new`], [`Proposal::parse`] or [`Proposal::from_transforms`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    protocol: Protocol,
    encr: Vec<Encr>,
    prf: Vec<Prf>,
    integ: Vec<Integ>,
    ke: Vec<Ke>,
    add_ke: [Vec<Ke>; ADD_KE_SLOTS],
    esn: Vec<Esn>,
}

/// Why a proposal is refused. Parsing errors name the offending token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposalError {
    #[error("unknown algorithm keyword '{0}'")]
    UnknownToken(String),
    #[error("'{0}' is not allowed in an {1} proposal")]
    NotAllowed(String, &'static str),
    #[error("empty proposal")]
    Empty,
    #[error("'{0}': AEAD and non-AEAD encryption in one proposal")]
    MixedAead(String),
    #[error("'{0}': an AEAD proposal takes no integrity algorithm")]
    IntegWithAead(String),
    #[error("a non-AEAD proposal needs an integrity algorithm")]
    MissingInteg,
    #[error("a proposal needs an encryption algorithm")]
    MissingEncr,
    #[error("an IKE proposal needs a PRF")]
    MissingPrf,
    #[error("an IKE proposal needs a key exchange method")]
    MissingKe,
    #[error("{0} additional key exchange slots given, RFC 9370 has 7")]
    TooManyAddKe(usize),
    #[error("additional key exchange {0} without a key exchange")]
    AddKeWithoutKe(u8),
    #[error("unknown transform: type {ty}, id {id}, key length {key_bits:?}")]
    UnknownTransform {
        ty: u8,
        id: u16,
        key_bits: Option<u16>,
    },
}

/// The strongSwan keywords this module reads (first of each row is the one it writes).
const ENCR_WORDS: &[(&str, Encr)] = &[
    ("aes128", Encr::AesCbc128),
    ("aes", Encr::AesCbc128),
    ("aes256", Encr::AesCbc256),
    ("aes128gcm16", Encr::AesGcm16_128),
    ("aes128gcm128", Encr::AesGcm16_128),
    ("aes256gcm16", Encr::AesGcm16_256),
    ("aes256gcm128", Encr::AesGcm16_256),
    ("chacha20poly1305", Encr::ChaCha20Poly1305),
    ("3des", Encr::TripleDes),
];
const INTEG_WORDS: &[(&str, Integ)] = &[
    ("sha1", Integ::HmacSha1_96),
    ("sha", Integ::HmacSha1_96),
    ("sha256", Integ::HmacSha256_128),
    ("sha2_256", Integ::HmacSha256_128),
    ("sha384", Integ::HmacSha384_192),
    ("sha2_384", Integ::HmacSha384_192),
    ("sha512", Integ::HmacSha512_256),
    ("sha2_512", Integ::HmacSha512_256),
];
const PRF_WORDS: &[(&str, Prf)] = &[
    ("prfsha1", Prf::HmacSha1),
    ("prfsha256", Prf::HmacSha256),
    ("prfsha384", Prf::HmacSha384),
    ("prfsha512", Prf::HmacSha512),
];
const KE_WORDS: &[(&str, Ke)] = &[
    ("modp2048", Ke::Modp2048),
    ("modp3072", Ke::Modp3072),
    ("ecp256", Ke::Ecp256),
    ("ecp384", Ke::Ecp384),
    ("x25519", Ke::Curve25519),
    ("curve25519", Ke::Curve25519),
    ("mlkem768", Ke::MlKem768),
];
const ESN_WORDS: &[(&str, Esn)] = &[("noesn", Esn::No), ("esn", Esn::Yes)];

fn lookup<T: Copy>(table: &[(&str, T)], word: &str) -> Option<T> {
    table.iter().find(|(w, _)| *w == word).map(|&(_, v)| v)
}

fn keyword<T: Copy + PartialEq>(table: &[(&'static str, T)], v: T) -> &'static str {
    table
        .iter()
        .find(|&&(_, x)| x == v)
        .map(|&(w, _)| w)
        .expect("every algorithm has a keyword")
}

fn push_unique<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if !v.contains(&x) {
        v.push(x);
    }
}

impl Proposal {
    /// Builds a proposal from its algorithm lists (in order of preference; duplicates are dropped), applying the
    /// module's rules: an IKE proposal without a PRF gets the PRFs of its integrity algorithms, an ESP proposal
    /// without ESN gets "no ESN".
    pub fn new(
        protocol: Protocol,
        encr: &[Encr],
        prf: &[Prf],
        integ: &[Integ],
        ke: &[Ke],
        add_ke: &[&[Ke]],
        esn: &[Esn],
    ) -> Result<Proposal, ProposalError> {
        let mut p = Proposal {
            protocol,
            encr: Vec::new(),
            prf: Vec::new(),
            integ: Vec::new(),
            ke: Vec::new(),
            add_ke: Default::default(),
            esn: Vec::new(),
        };
        encr.iter().for_each(|&x| push_unique(&mut p.encr, x));
        prf.iter().for_each(|&x| push_unique(&mut p.prf, x));
        integ.iter().for_each(|&x| push_unique(&mut p.integ, x));
        ke.iter().for_each(|&x| push_unique(&mut p.ke, x));
        esn.iter().for_each(|&x| push_unique(&mut p.esn, x));
        if add_ke.len() > ADD_KE_SLOTS {
            return Err(ProposalError::TooManyAddKe(add_ke.len()));
        }
        for (slot, list) in p.add_ke.iter_mut().zip(add_ke) {
            list.iter().for_each(|&x| push_unique(slot, x));
        }
        p.complete()?;
        Ok(p)
    }

    /// Applies the defaults and checks the rules (see the module's documentation).
    fn complete(&mut self) -> Result<(), ProposalError> {
        let proto = self.protocol_name();
        let Some(&first) = self.encr.first() else {
            return Err(ProposalError::MissingEncr);
        };
        if let Some(&odd) = self.encr.iter().find(|e| e.is_aead() != first.is_aead()) {
            return Err(ProposalError::MixedAead(Encr::word(odd).into()));
        }
        if first.is_aead() {
            if let Some(&i) = self.integ.first() {
                return Err(ProposalError::IntegWithAead(Integ::word(i).into()));
            }
        } else if self.integ.is_empty() {
            return Err(ProposalError::MissingInteg);
        }
        match self.protocol {
            Protocol::Ike => {
                if let Some(&e) = self.esn.first() {
                    return Err(ProposalError::NotAllowed(Esn::word(e).into(), proto));
                }
                if self.prf.is_empty() {
                    self.prf = self.integ.iter().map(|i| i.matching_prf()).collect();
                    self.prf.dedup();
                }
                if self.prf.is_empty() {
                    return Err(ProposalError::MissingPrf);
                }
                if self.ke.is_empty() {
                    return Err(ProposalError::MissingKe);
                }
            }
            Protocol::Esp => {
                if let Some(&p) = self.prf.first() {
                    return Err(ProposalError::NotAllowed(Prf::word(p).into(), proto));
                }
                if self.esn.is_empty() {
                    self.esn.push(Esn::No);
                }
            }
        }
        if self.ke.is_empty() {
            if let Some(i) = self.add_ke.iter().position(|s| !s.is_empty()) {
                return Err(ProposalError::AddKeWithoutKe(i as u8 + 1));
            }
        }
        Ok(())
    }

    fn protocol_name(&self) -> &'static str {
        match self.protocol {
            Protocol::Ike => "IKE",
            Protocol::Esp => "ESP",
        }
    }

    /// Parses strongSwan's syntax for one proposal: algorithm keywords separated by dashes
    /// (`aes256gcm16-prfsha384-ecp384`, `aes128-sha1-modp2048`, `aes128gcm16-x25519-ke1_mlkem768`,
    /// `aes128gcm16-esn`). Errors name the offending token.
    pub fn parse(protocol: Protocol, s: &str) -> Result<Proposal, ProposalError> {
        if s.trim().is_empty() {
            return Err(ProposalError::Empty);
        }
        let (mut encr, mut prf, mut integ, mut ke, mut esn) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut add_ke: [Vec<Ke>; ADD_KE_SLOTS] = Default::default();
        for token in s.trim().split('-') {
            let unknown = || ProposalError::UnknownToken(token.into());
            if let Some(e) = lookup(ENCR_WORDS, token) {
                encr.push(e);
            } else if let Some(i) = lookup(INTEG_WORDS, token) {
                integ.push(i);
            } else if let Some(p) = lookup(PRF_WORDS, token) {
                prf.push(p);
            } else if let Some(k) = lookup(KE_WORDS, token) {
                ke.push(k);
            } else if let Some(e) = lookup(ESN_WORDS, token) {
                esn.push(e);
            } else if let Some(rest) = token.strip_prefix("ke") {
                // keX_<method>, X in 1..=7 (strongSwan 6, RFC 9370).
                let (n, method) = rest.split_once('_').ok_or_else(unknown)?;
                let n: usize = match n.as_bytes() {
                    [d @ b'1'..=b'7'] => usize::from(d - b'0'),
                    _ => return Err(unknown()),
                };
                add_ke[n - 1].push(lookup(KE_WORDS, method).ok_or_else(unknown)?);
            } else {
                return Err(unknown());
            }
        }
        let add: Vec<&[Ke]> = add_ke.iter().map(|v| v.as_slice()).collect();
        Proposal::new(protocol, &encr, &prf, &integ, &ke, &add, &esn)
    }

    /// The proposal as a transform list, in wire order (by type, then preference).
    pub fn transforms(&self) -> Vec<Transform> {
        let mut t: Vec<Transform> = self.encr.iter().map(|e| e.transform()).collect();
        let simple = |ty, id| Transform {
            ty,
            id,
            key_bits: None,
        };
        t.extend(self.prf.iter().map(|p| simple(TransformType::Prf, p.id())));
        t.extend(
            self.integ
                .iter()
                .map(|i| simple(TransformType::Integ, i.id())),
        );
        t.extend(self.ke.iter().map(|k| simple(TransformType::Ke, k.id())));
        t.extend(self.esn.iter().map(|e| simple(TransformType::Esn, e.id())));
        for (n, slot) in self.add_ke.iter().enumerate() {
            let ty = TransformType::AddKe(n as u8 + 1);
            t.extend(slot.iter().map(|k| simple(ty, k.id())));
        }
        t
    }

    /// A proposal from a transform list (as an SA payload's proposal carries it). An unknown transform is an
    /// error here; a responder that wants to skip proposals with unknown transforms (RFC 7296 section 3.3.6)
    /// drops such a proposal on this error.
    pub fn from_transforms(
        protocol: Protocol,
        transforms: &[Transform],
    ) -> Result<Proposal, ProposalError> {
        let (mut encr, mut prf, mut integ, mut ke, mut esn) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut add_ke: [Vec<Ke>; ADD_KE_SLOTS] = Default::default();
        for t in transforms {
            let unknown = || ProposalError::UnknownTransform {
                ty: t.ty.number(),
                id: t.id,
                key_bits: t.key_bits,
            };
            let simple = |ok: bool| {
                if ok && t.key_bits.is_none() {
                    Ok(())
                } else {
                    Err(unknown())
                }
            };
            match t.ty {
                TransformType::Encr => encr.push(
                    *Encr::ALL
                        .iter()
                        .find(|e| e.transform() == *t)
                        .ok_or_else(unknown)?,
                ),
                TransformType::Prf => {
                    let p = Prf::ALL.iter().find(|p| p.id() == t.id);
                    simple(p.is_some())?;
                    prf.extend(p);
                }
                TransformType::Integ => {
                    let i = Integ::ALL.iter().find(|i| i.id() == t.id);
                    simple(i.is_some())?;
                    integ.extend(i);
                }
                TransformType::Ke | TransformType::AddKe(_) => {
                    let k = Ke::ALL.iter().find(|k| k.id() == t.id);
                    simple(k.is_some())?;
                    match t.ty {
                        TransformType::AddKe(n @ 1..=7) => add_ke[usize::from(n) - 1].extend(k),
                        TransformType::AddKe(_) => return Err(unknown()),
                        _ => ke.extend(k),
                    }
                }
                TransformType::Esn => match t.id {
                    0 | 1 if t.key_bits.is_none() => {
                        esn.push(if t.id == 1 { Esn::Yes } else { Esn::No })
                    }
                    _ => return Err(unknown()),
                },
            }
        }
        let add: Vec<&[Ke]> = add_ke.iter().map(|v| v.as_slice()).collect();
        Proposal::new(protocol, &encr, &prf, &integ, &ke, &add, &esn)
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }
    pub fn encr(&self) -> &[Encr] {
        &self.encr
    }
    pub fn prf(&self) -> &[Prf] {
        &self.prf
    }
    pub fn integ(&self) -> &[Integ] {
        &self.integ
    }
    pub fn ke(&self) -> &[Ke] {
        &self.ke
    }
    /// The additional key exchange slot `n` (1..=7); empty when unused or out of range.
    pub fn add_ke(&self, n: usize) -> &[Ke] {
        match n {
            1..=ADD_KE_SLOTS => &self.add_ke[n - 1],
            _ => &[],
        }
    }
    pub fn esn(&self) -> &[Esn] {
        &self.esn
    }

    /// True when the proposal offers exactly one algorithm of each type it has (as a selected one does).
    pub fn is_single(&self) -> bool {
        self.encr.len() == 1
            && self.prf.len() <= 1
            && self.integ.len() <= 1
            && self.ke.len() <= 1
            && self.esn.len() <= 1
            && self.add_ke.iter().all(|s| s.len() <= 1)
    }

    /// The proposal as strongSwan's log prints it (`IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/CURVE_25519`,
    /// `ESP:AES_GCM_16_128/NO_EXT_SEQ`); additional key exchanges as `KE1_ML_KEM_768` (strongSwan 6).
    pub fn log_name(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        parts.extend(self.encr.iter().map(|e| {
            match e {
                Encr::AesCbc128 => "AES_CBC_128",
                Encr::AesCbc256 => "AES_CBC_256",
                Encr::AesGcm16_128 => "AES_GCM_16_128",
                Encr::AesGcm16_256 => "AES_GCM_16_256",
                Encr::ChaCha20Poly1305 => "CHACHA20_POLY1305",
                Encr::TripleDes => "3DES_CBC",
            }
            .to_string()
        }));
        parts.extend(self.integ.iter().map(|i| {
            match i {
                Integ::HmacSha1_96 => "HMAC_SHA1_96",
                Integ::HmacSha256_128 => "HMAC_SHA2_256_128",
                Integ::HmacSha384_192 => "HMAC_SHA2_384_192",
                Integ::HmacSha512_256 => "HMAC_SHA2_512_256",
            }
            .to_string()
        }));
        parts.extend(self.prf.iter().map(|p| {
            match p {
                Prf::HmacSha1 => "PRF_HMAC_SHA1",
                Prf::HmacSha256 => "PRF_HMAC_SHA2_256",
                Prf::HmacSha384 => "PRF_HMAC_SHA2_384",
                Prf::HmacSha512 => "PRF_HMAC_SHA2_512",
            }
            .to_string()
        }));
        let ke_name = |k: &Ke| match k {
            Ke::Modp2048 => "MODP_2048",
            Ke::Modp3072 => "MODP_3072",
            Ke::Ecp256 => "ECP_256",
            Ke::Ecp384 => "ECP_384",
            Ke::Curve25519 => "CURVE_25519",
            Ke::MlKem768 => "ML_KEM_768",
        };
        parts.extend(self.ke.iter().map(|k| ke_name(k).to_string()));
        for (n, slot) in self.add_ke.iter().enumerate() {
            parts.extend(slot.iter().map(|k| format!("KE{}_{}", n + 1, ke_name(k))));
        }
        parts.extend(self.esn.iter().map(|e| {
            match e {
                Esn::No => "NO_EXT_SEQ",
                Esn::Yes => "EXT_SEQ",
            }
            .to_string()
        }));
        format!("{}:{}", self.protocol_name(), parts.join("/"))
    }
}

impl Encr {
    fn word(self) -> &'static str {
        keyword(ENCR_WORDS, self)
    }
}
impl Integ {
    fn word(self) -> &'static str {
        keyword(INTEG_WORDS, self)
    }
}
impl Prf {
    fn word(self) -> &'static str {
        keyword(PRF_WORDS, self)
    }
}
impl Ke {
    fn word(self) -> &'static str {
        keyword(KE_WORDS, self)
    }
}
impl Esn {
    fn word(self) -> &'static str {
        keyword(ESN_WORDS, self)
    }
}

/// strongSwan's syntax, in a fixed order: encryption, integrity, PRF, key exchange, additional key exchanges
/// (`keN_`), ESN. [`Proposal::parse`] reads it back to an equal proposal. The PRFs an IKE proposal got from its
/// integrity algorithms are written out (`aes256-sha256-x25519` is written `aes256-sha256-prfsha256-x25519`).
impl fmt::Display for Proposal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut words: Vec<String> = Vec::new();
        words.extend(self.encr.iter().map(|e| e.word().to_string()));
        words.extend(self.integ.iter().map(|i| i.word().to_string()));
        words.extend(self.prf.iter().map(|p| p.word().to_string()));
        words.extend(self.ke.iter().map(|k| k.word().to_string()));
        for (n, slot) in self.add_ke.iter().enumerate() {
            words.extend(slot.iter().map(|k| format!("ke{}_{}", n + 1, k.word())));
        }
        // "noesn" is the default of ESP: written only beside "esn" (both offered).
        if self.esn != [Esn::No] {
            words.extend(self.esn.iter().map(|e| e.word().to_string()));
        }
        f.write_str(&words.join("-"))
    }
}

/// Whose order of preference [`select`] follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preference {
    /// Ours (strongSwan's default, `prefer_configured_proposals = yes`).
    #[default]
    Ours,
    /// The peer's (the order the initiator sent).
    Peer,
}

/// The outcome of [`select`]: which of ours and which of the peer's proposals matched (indexes into the lists
/// given; the peer's is the one whose number the reply echoes), and the chosen transforms, one of each type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub ours: usize,
    pub peer: usize,
    pub chosen: Proposal,
}

/// Picks one algorithm of each type from two proposals, in `first`'s order; `None` if a type has no common
/// algorithm (a type both leave empty is fine; one that only one side names is not).
fn intersect(first: &Proposal, second: &Proposal) -> Option<Proposal> {
    fn pick<T: Copy + PartialEq>(a: &[T], b: &[T]) -> Option<Vec<T>> {
        match (a.is_empty(), b.is_empty()) {
            (true, true) => Some(Vec::new()),
            _ => a.iter().find(|x| b.contains(x)).map(|&x| vec![x]),
        }
    }
    if first.protocol != second.protocol {
        return None;
    }
    let mut add_ke: [Vec<Ke>; ADD_KE_SLOTS] = Default::default();
    for (n, slot) in add_ke.iter_mut().enumerate() {
        *slot = pick(&first.add_ke[n], &second.add_ke[n])?;
    }
    Some(Proposal {
        protocol: first.protocol,
        encr: pick(&first.encr, &second.encr)?,
        prf: pick(&first.prf, &second.prf)?,
        integ: pick(&first.integ, &second.integ)?,
        ke: pick(&first.ke, &second.ke)?,
        add_ke,
        esn: pick(&first.esn, &second.esn)?,
    })
}

/// Chooses from the peer's proposals one that ours accept, with one algorithm of each type (RFC 7296 section
/// 2.7). [`Preference::Ours`]: the first of our proposals that matches any of the peer's (the first such of the
/// peer's), algorithms in our order; [`Preference::Peer`]: the first of the peer's that matches any of ours,
/// algorithms in the peer's order. `None`: no proposal chosen (NO_PROPOSAL_CHOSEN).
pub fn select(ours: &[Proposal], peer: &[Proposal], pref: Preference) -> Option<Selection> {
    match pref {
        Preference::Ours => ours.iter().enumerate().find_map(|(o, op)| {
            peer.iter().enumerate().find_map(|(p, pp)| {
                intersect(op, pp).map(|chosen| Selection {
                    ours: o,
                    peer: p,
                    chosen,
                })
            })
        }),
        Preference::Peer => peer.iter().enumerate().find_map(|(p, pp)| {
            ours.iter().enumerate().find_map(|(o, op)| {
                intersect(pp, op).map(|chosen| Selection {
                    ours: o,
                    peer: p,
                    chosen,
                })
            })
        }),
    }
}

#[cfg(test)]
mod tests;
