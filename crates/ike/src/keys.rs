//! The IKEv2 key schedule over `crypto`'s prf and prf+ ([`netveil_crypto::kdf::ike_prf`],
//! [`netveil_crypto::kdf::ike_prf_plus`]):
//!
//! - [`skeyseed`]: `SKEYSEED = prf(Ni | Nr, g^ir)` (RFC 7296 section 2.14);
//! - [`skeyseed_rekey`]: `SKEYSEED = prf(SK_d (old), g^ir (new) | Ni | Nr)` (section 2.18), and with additional
//!   key exchanges `prf(SK_d (old), SK(0) | Ni | Nr | SK(1) | ... | SK(n))` (RFC 9370 section 2.2.2);
//! - [`IkeKeys::derive`]: `{SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr} = prf+(SKEYSEED, Ni | Nr | SPIi |
//!   SPIr)`, lengths from the [`IkeSuite`] (no SK_a* with an AEAD, whose SK_e* carry the 4-byte salt);
//! - [`IkeKeys::intermediate`]: the keys after an additional key exchange in IKE_INTERMEDIATE (RFC 9370 section
//!   2.2.1): `SKEYSEED(n) = prf(SK_d(n-1), SK(n) | Ni | Nr)`, then prf+ as above;
//! - [`ChildKeys::derive`]: `KEYMAT = prf+(SK_d, Ni | Nr)`, or with PFS `prf+(SK_d, g^ir (new) | Ni | Nr)` (section
//!   2.17), or with additional key exchanges `prf+(SK_d, SK(0) | Ni | Nr | SK(1) | ... | SK(n))` (RFC 9370 section
//!   2.2.4); split into the initiator-to-responder encryption and integrity keys, then the responder-to-initiator
//!   pair;
//! - [`IkeKeys::signed_octets`] and [`psk_auth`]: the AUTH payload's octets (section 2.15).
//!
//! Every key is a [`Secret`]: zeroized on drop, and its `Debug` prints its length only.

use core::fmt;

use netveil_crypto::kdf::{ike_prf, ike_prf_plus};
use netveil_crypto::sig::{KeyKind, Scheme, SigHash};
use netveil_crypto::AuthError;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::proposal::{Encr, Integ, Prf, Proposal, Protocol};

/// Key material: zeroized on drop, never printed (`Debug` shows the length only); compared in constant time.
/// Exactly its length on the heap (a boxed slice).
#[derive(Clone)]
pub struct Secret(Zeroizing<Box<[u8]>>);

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        self.0.len() == other.0.len() && bool::from(self.0.ct_eq(&other.0))
    }
}

impl Eq for Secret {}

impl Secret {
    /// Takes a copy of `bytes`.
    pub fn new(bytes: &[u8]) -> Secret {
        Secret(Zeroizing::new(bytes.into()))
    }

    fn zeroed(len: usize) -> Secret {
        Secret(Zeroizing::new(vec![0; len].into_boxed_slice()))
    }

    /// The key's bytes, for building a key object.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// One key of an [`IkeKeys`], borrowed from its block: never printed (`Debug` shows the length only), compared
/// in constant time.
#[derive(Clone, Copy)]
pub struct Key<'a>(&'a [u8]);

impl<'a> Key<'a> {
    /// The key's bytes, for building a key object.
    pub fn expose(&self) -> &'a [u8] {
        self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl PartialEq for Key<'_> {
    fn eq(&self, other: &Key<'_>) -> bool {
        self.0.len() == other.0.len() && bool::from(self.0.ct_eq(other.0))
    }
}

impl Eq for Key<'_> {}

impl fmt::Debug for Key<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({} bytes)", self.0.len())
    }
}

impl<'a> From<&'a Secret> for Key<'a> {
    fn from(s: &'a Secret) -> Key<'a> {
        Key(s.expose())
    }
}

/// Which end of the IKE SA we are (the original initiator of the IKE SA, as the I flag, RFC 7296 section 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Initiator,
    Responder,
}

/// A key's length could not be honoured, or the suite is not one this module derives keys for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeysError {
    #[error("the proposal is not a selected IKE proposal (one algorithm of each type)")]
    NotSelectedIke,
    #[error("the proposal is not a selected ESP proposal (one algorithm of each type)")]
    NotSelectedEsp,
    #[error("an AEAD takes no integrity algorithm; a non-AEAD cipher needs one")]
    Integrity,
    #[error("more keying material asked than prf+ gives")]
    TooLong,
}

/// The algorithms an IKE SA's keys are derived for and its messages protected with. `integ` is `Some` exactly
/// for the non-AEAD ciphers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IkeSuite {
    encr: Encr,
    prf: Prf,
    integ: Option<Integ>,
}

impl IkeSuite {
    pub fn new(encr: Encr, prf: Prf, integ: Option<Integ>) -> Result<IkeSuite, KeysError> {
        if encr.is_aead() == integ.is_some() {
            return Err(KeysError::Integrity);
        }
        Ok(IkeSuite { encr, prf, integ })
    }

    /// The suite of a selected IKE proposal ([`crate::proposal::select`]'s `chosen`).
    pub fn from_proposal(p: &Proposal) -> Result<IkeSuite, KeysError> {
        if p.protocol() != Protocol::Ike || !p.is_single() {
            return Err(KeysError::NotSelectedIke);
        }
        IkeSuite::new(p.encr()[0], p.prf()[0], p.integ().first().copied())
    }

    pub fn encr(&self) -> Encr {
        self.encr
    }
    pub fn prf(&self) -> Prf {
        self.prf
    }
    pub fn integ(&self) -> Option<Integ> {
        self.integ
    }
}

/// The algorithms a CHILD_SA's KEYMAT is split for. `integ` is `Some` exactly for the non-AEAD ciphers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildSuite {
    encr: Encr,
    integ: Option<Integ>,
}

impl ChildSuite {
    pub fn new(encr: Encr, integ: Option<Integ>) -> Result<ChildSuite, KeysError> {
        if encr.is_aead() == integ.is_some() {
            return Err(KeysError::Integrity);
        }
        Ok(ChildSuite { encr, integ })
    }

    /// The suite of a selected ESP proposal.
    pub fn from_proposal(p: &Proposal) -> Result<ChildSuite, KeysError> {
        if p.protocol() != Protocol::Esp || !p.is_single() {
            return Err(KeysError::NotSelectedEsp);
        }
        ChildSuite::new(p.encr()[0], p.integ().first().copied())
    }

    pub fn encr(&self) -> Encr {
        self.encr
    }
    pub fn integ(&self) -> Option<Integ> {
        self.integ
    }
}

/// SKEYSEED: the PRF's output, secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkeySeed(Secret);

impl SkeySeed {
    pub fn expose(&self) -> &[u8] {
        self.0.expose()
    }
}

/// `SKEYSEED = prf(Ni | Nr, g^ir)` (RFC 7296 section 2.14; the PRFs here are all HMACs, which take the whole
/// `Ni | Nr` as key).
pub fn skeyseed(prf: Prf, ni: &[u8], nr: &[u8], g_ir: &[u8]) -> SkeySeed {
    let mut key = Zeroizing::new(Vec::with_capacity(ni.len() + nr.len()));
    key.extend_from_slice(ni);
    key.extend_from_slice(nr);
    let mut out = Secret::zeroed(prf.output_len());
    ike_prf(prf.ike_prf(), &key, &[g_ir], &mut out.0);
    SkeySeed(out)
}

/// The rekeyed IKE SA's SKEYSEED: `prf(SK_d (old), g^ir (new) | Ni | Nr)` (RFC 7296 section 2.18), with the new
/// exchange's nonces; `prf` is the OLD IKE SA's PRF (2.18: the rekeying exchange belongs to the old SA; the new SA's
/// PRF then expands SKEYSEED in [`IkeKeys::derive`]), `old_sk_d` the old SA's SK_d. `shared` holds the key
/// exchanges' shared secrets: `[g^ir]`, or with additional key exchanges (RFC 9370 section 2.2.2)
/// `[SK(0), SK(1), .., SK(n)]`, giving `prf(SK_d, SK(0) | Ni | Nr | SK(1) | ... | SK(n))`.
pub fn skeyseed_rekey(
    prf: Prf,
    old_sk_d: Key<'_>,
    shared: &[&[u8]],
    ni: &[u8],
    nr: &[u8],
) -> SkeySeed {
    let mut out = Secret::zeroed(prf.output_len());
    ike_prf(
        prf.ike_prf(),
        old_sk_d.expose(),
        &ke_seed(shared, ni, nr),
        &mut out.0,
    );
    SkeySeed(out)
}

/// `SK(0) | Ni | Nr | SK(1) | ... | SK(n)` as parts; `Ni | Nr` without shared secrets.
fn ke_seed<'a>(shared: &[&'a [u8]], ni: &'a [u8], nr: &'a [u8]) -> Vec<&'a [u8]> {
    let mut parts = Vec::with_capacity(shared.len() + 2);
    parts.extend(shared.first().copied());
    parts.push(ni);
    parts.push(nr);
    parts.extend(shared.iter().skip(1).copied());
    parts
}

/// The IKE SA's keys (RFC 7296 section 2.14). With an AEAD, SK_ai and SK_ar are empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IkeKeys {
    suite: IkeSuite,
    /// `SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr` end to end, as `prf+` gave them: one block on the
    /// heap, not seven (an IKE SA is 80 bytes smaller, and its keys 2 to 4 heap blocks fewer).
    block: Secret,
    /// Where each key ends in `block`, in that order.
    ends: [u16; 7],
}

const SK_D: usize = 0;
const SK_AI: usize = 1;
const SK_AR: usize = 2;
const SK_EI: usize = 3;
const SK_ER: usize = 4;
const SK_PI: usize = 5;
const SK_PR: usize = 6;

impl IkeKeys {
    /// `{SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr} = prf+(SKEYSEED, Ni | Nr | SPIi | SPIr)`.
    pub fn derive(
        suite: IkeSuite,
        seed: &SkeySeed,
        ni: &[u8],
        nr: &[u8],
        spi_i: &[u8; 8],
        spi_r: &[u8; 8],
    ) -> Result<IkeKeys, KeysError> {
        let prf_len = suite.prf.output_len();
        let a = suite.integ.map_or(0, |i| i.key_len());
        let e = suite.encr.keymat_len();
        let lens = [prf_len, a, a, e, e, prf_len, prf_len];
        let mut block = Secret::zeroed(lens.iter().sum());
        ike_prf_plus(
            suite.prf.ike_prf(),
            seed.expose(),
            &[ni, nr, spi_i, spi_r],
            &mut block.0,
        )
        .map_err(|_| KeysError::TooLong)?;
        let mut ends = [0u16; 7];
        let mut at = 0usize;
        for (e, n) in ends.iter_mut().zip(lens) {
            at += n;
            // Seven keys of at most a PRF's or a cipher's key length each.
            *e = u16::try_from(at).map_err(|_| KeysError::TooLong)?;
        }
        Ok(IkeKeys { suite, block, ends })
    }

    /// The keys after an additional key exchange in IKE_INTERMEDIATE (RFC 9370 section 2.2.1): `SKEYSEED(n) =
    /// prf(SK_d(n-1), SK(n) | Ni | Nr)` and `{SK_d(n) | ...} = prf+(SKEYSEED(n), Ni | Nr | SPIi | SPIr)`, with
    /// the IKE_SA_INIT nonces and SPIs. `self` is the keys after the previous exchange.
    pub fn intermediate(
        &self,
        sk_n: &[u8],
        ni: &[u8],
        nr: &[u8],
        spi_i: &[u8; 8],
        spi_r: &[u8; 8],
    ) -> Result<IkeKeys, KeysError> {
        let mut out = Secret::zeroed(self.suite.prf.output_len());
        ike_prf(
            self.suite.prf.ike_prf(),
            self.sk_d().expose(),
            &[sk_n, ni, nr],
            &mut out.0,
        );
        IkeKeys::derive(self.suite, &SkeySeed(out), ni, nr, spi_i, spi_r)
    }

    pub fn suite(&self) -> IkeSuite {
        self.suite
    }

    /// Drops SK_pi and SK_pr (zeroized; empty after this): they key only the AUTH payloads and IntAuth (RFC 7296
    /// 2.15, RFC 9242 3.3.2), and an established IKE SA needs neither again (a rekeyed SA derives its own).
    pub fn forget_auth_keys(&mut self) {
        let end = usize::from(self.ends[SK_ER]);
        // The block without them (the old one is zeroized as it goes).
        self.block = Secret::new(&self.block.expose()[..end]);
        self.ends[SK_PI] = self.ends[SK_ER];
        self.ends[SK_PR] = self.ends[SK_ER];
    }

    /// Key `i` of the block.
    fn key(&self, i: usize) -> Key<'_> {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Key(&self.block.expose()[usize::from(start)..usize::from(self.ends[i])])
    }

    pub fn sk_d(&self) -> Key<'_> {
        self.key(SK_D)
    }
    pub fn sk_ai(&self) -> Key<'_> {
        self.key(SK_AI)
    }
    pub fn sk_ar(&self) -> Key<'_> {
        self.key(SK_AR)
    }
    pub fn sk_ei(&self) -> Key<'_> {
        self.key(SK_EI)
    }
    pub fn sk_er(&self) -> Key<'_> {
        self.key(SK_ER)
    }
    pub fn sk_pi(&self) -> Key<'_> {
        self.key(SK_PI)
    }
    pub fn sk_pr(&self) -> Key<'_> {
        self.key(SK_PR)
    }

    /// One link of the IKE_INTERMEDIATE authentication chain (RFC 9242 section 3.3.2), for a message `sender`
    /// sent: `IntAuth_[i|r](n) = prf(SK_p[i|r](n), IntAuth_[i|r](n-1) | IntAuth_[i|r](n)_A | IntAuth_[i|r](n)_P)`
    /// with these keys (the ones that protected the message), `previous` the sender's link before (empty for the
    /// first), `a` the message's header and its Encrypted payload's header with lengths as if the Encrypted payload
    /// held only the plaintext, `p` the plaintext inner payloads (no IV, padding or ICV).
    pub fn int_auth(&self, sender: Role, previous: &[u8], a: &[u8], p: &[u8]) -> Vec<u8> {
        let sk_p = match sender {
            Role::Initiator => self.sk_pi(),
            Role::Responder => self.sk_pr(),
        };
        let mut out = vec![0u8; self.suite.prf.output_len()];
        ike_prf(
            self.suite.prf.ike_prf(),
            sk_p.expose(),
            &[previous, a, p],
            &mut out,
        );
        out
    }

    /// The octets `signer` signs or MACs for its AUTH payload (RFC 7296 section 2.15): for the initiator
    /// `RealMessage1 | NonceRData | prf(SK_pi, RestOfInitIDPayload)`, for the responder `RealMessage2 |
    /// NonceIData | prf(SK_pr, RestOfRespIDPayload)`. `message` is the signer's IKE_SA_INIT message as sent (the
    /// whole IKE message from its header on, without the non-ESP marker of port 4500), `peer_nonce` the other side's nonce data, `id_rest` the signer's ID
    /// payload after its 4-byte generic header (ID type, three reserved bytes, identification data).
    pub fn signed_octets(
        &self,
        signer: Role,
        message: &[u8],
        peer_nonce: &[u8],
        id_rest: &[u8],
    ) -> Vec<u8> {
        let sk_p = match signer {
            Role::Initiator => self.sk_pi(),
            Role::Responder => self.sk_pr(),
        };
        let n = self.suite.prf.output_len();
        let mut out = Vec::with_capacity(message.len() + peer_nonce.len() + n);
        out.extend_from_slice(message);
        out.extend_from_slice(peer_nonce);
        let at = out.len();
        out.resize(at + n, 0);
        ike_prf(
            self.suite.prf.ike_prf(),
            sk_p.expose(),
            &[id_rest],
            &mut out[at..],
        );
        out
    }
}

/// The key pad of the shared-key AUTH (RFC 7296 section 2.15).
pub const KEY_PAD: &[u8] = b"Key Pad for IKEv2";

/// The AUTH payload's data for the shared key message integrity code (auth method 2): `prf(prf(Shared Secret,
/// "Key Pad for IKEv2"), <SignedOctets>)` (RFC 7296 section 2.15).
pub fn psk_auth(prf: Prf, psk: &[u8], signed_octets: &[u8]) -> Vec<u8> {
    let n = prf.output_len();
    let mut padded = Zeroizing::new(vec![0u8; n]);
    ike_prf(prf.ike_prf(), psk, &[KEY_PAD], &mut padded);
    let mut out = vec![0u8; n];
    ike_prf(prf.ike_prf(), &padded, &[signed_octets], &mut out);
    out
}

/// Checks a received shared-key AUTH value against [`psk_auth`] in constant time; a failure says nothing more.
pub fn verify_psk_auth(
    prf: Prf,
    psk: &[u8],
    signed_octets: &[u8],
    received: &[u8],
) -> Result<(), AuthError> {
    let expected = psk_auth(prf, psk, signed_octets);
    if expected.len() == received.len() && bool::from(expected.ct_eq(received)) {
        Ok(())
    } else {
        Err(AuthError)
    }
}

/// The AlgorithmIdentifiers of RFC 7427 appendix A (DER, each preceded in the AUTH data by its length), for the
/// schemes we sign with in a Digital Signature AUTH (method 14); Ed25519's from RFC 8420 section 2.
pub fn signature_algorithm_id(scheme: Scheme) -> Option<&'static [u8]> {
    Some(match scheme {
        // A.1.2, A.1.3, A.1.4: sha{256,384,512}WithRSAEncryption, NULL parameters.
        Scheme::RsaPkcs1(SigHash::Sha256) => &[
            0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b, 0x05,
            0x00,
        ],
        Scheme::RsaPkcs1(SigHash::Sha384) => &[
            0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c, 0x05,
            0x00,
        ],
        Scheme::RsaPkcs1(SigHash::Sha512) => &[
            0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d, 0x05,
            0x00,
        ],
        // A.3.1, A.3.2, A.3.3: ecdsa-with-SHA{256,384,512}, no parameters.
        Scheme::Ecdsa(SigHash::Sha256) => &[
            0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02,
        ],
        Scheme::Ecdsa(SigHash::Sha384) => &[
            0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03,
        ],
        Scheme::Ecdsa(SigHash::Sha512) => &[
            0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04,
        ],
        Scheme::Ed25519 => &[0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70],
        _ => return None,
    })
}

/// The AUTH data of a Digital Signature AUTH (RFC 7427 section 3): the AlgorithmIdentifier's length (one
/// octet), the AlgorithmIdentifier, the signature. `None` for a scheme without an identifier here.
pub fn digital_signature_auth(scheme: Scheme, signature: &[u8]) -> Option<Vec<u8>> {
    let alg = signature_algorithm_id(scheme)?;
    let mut out = Vec::with_capacity(1 + alg.len() + signature.len());
    out.push(alg.len() as u8);
    out.extend_from_slice(alg);
    out.extend_from_slice(signature);
    Some(out)
}

/// The scheme and the signature of a received signature AUTH payload (`method`, `data`) for a key of `key`: 1
/// RSA PKCS#1 v1.5 with SHA-1 (legacy, RFC 7296), 9/10/11 ECDSA `r || s` with the curve's hash (RFC 4754), 14
/// a Digital Signature (RFC 7427) whose AlgorithmIdentifier names PKCS#1 v1.5 or PSS (MGF1 over the same hash,
/// salt as long as the hash) with SHA-2, ECDSA with SHA-2, or Ed25519. Err: what is not taken, as text.
pub fn parse_signature_auth(
    method: u8,
    data: &[u8],
    key: KeyKind,
) -> Result<(Scheme, &[u8]), String> {
    use crate::message::payloads::auth_method as m;
    let scheme = match (method, key) {
        (m::RSA_SIG, KeyKind::Rsa) => return Ok((Scheme::RsaPkcs1(SigHash::Sha1), data)),
        (m::ECDSA_SHA256_P256, KeyKind::EcdsaP256) => Scheme::EcdsaFixed(SigHash::Sha256),
        (m::ECDSA_SHA384_P384, KeyKind::EcdsaP384) => Scheme::EcdsaFixed(SigHash::Sha384),
        (m::ECDSA_SHA512_P521, KeyKind::EcdsaP521) => Scheme::EcdsaFixed(SigHash::Sha512),
        (m::DIGITAL_SIGNATURE, _) => {
            let (&len, rest) = data.split_first().ok_or("empty AUTH data")?;
            let len = usize::from(len);
            if rest.len() < len {
                return Err("AlgorithmIdentifier longer than the AUTH data".into());
            }
            let (alg, sig) = rest.split_at(len);
            return Ok((parse_algorithm_id(alg)?, sig));
        }
        (m, k) => return Err(format!("AUTH method {m} with an {k} key")),
    };
    Ok((scheme, data))
}

fn parse_algorithm_id(der: &[u8]) -> Result<Scheme, String> {
    use x509_parser::oid_registry as o;
    use x509_parser::prelude::FromDer;
    use x509_parser::signature_algorithm::SignatureAlgorithm;
    use x509_parser::x509::AlgorithmIdentifier;
    let alg = match AlgorithmIdentifier::from_der(der) {
        Ok(([], a)) => a,
        _ => return Err("the AlgorithmIdentifier does not parse".into()),
    };
    let oid = &alg.algorithm;
    let hash_of = |h: &x509_parser::der_parser::oid::Oid| {
        if *h == o::OID_NIST_HASH_SHA256 {
            Some(SigHash::Sha256)
        } else if *h == o::OID_NIST_HASH_SHA384 {
            Some(SigHash::Sha384)
        } else if *h == o::OID_NIST_HASH_SHA512 {
            Some(SigHash::Sha512)
        } else {
            None
        }
    };
    let simple = [
        (
            o::OID_PKCS1_SHA256WITHRSA,
            Scheme::RsaPkcs1(SigHash::Sha256),
        ),
        (
            o::OID_PKCS1_SHA384WITHRSA,
            Scheme::RsaPkcs1(SigHash::Sha384),
        ),
        (
            o::OID_PKCS1_SHA512WITHRSA,
            Scheme::RsaPkcs1(SigHash::Sha512),
        ),
        (o::OID_SIG_ECDSA_WITH_SHA256, Scheme::Ecdsa(SigHash::Sha256)),
        (o::OID_SIG_ECDSA_WITH_SHA384, Scheme::Ecdsa(SigHash::Sha384)),
        (o::OID_SIG_ECDSA_WITH_SHA512, Scheme::Ecdsa(SigHash::Sha512)),
        (o::OID_SIG_ED25519, Scheme::Ed25519),
    ];
    if let Some((_, s)) = simple.iter().find(|(x, _)| x == oid) {
        return Ok(*s);
    }
    if *oid == o::OID_PKCS1_RSASSAPSS {
        if let Ok(SignatureAlgorithm::RSASSA_PSS(p)) = SignatureAlgorithm::try_from(&alg) {
            let h = hash_of(p.hash_algorithm_oid());
            let mgf = p.mask_gen_algorithm().ok();
            if let (Some(h), Some(mgf)) = (h, mgf) {
                if hash_of(&mgf.hash) == Some(h)
                    && p.salt_length() as usize == h.output_len()
                    && p.trailer_field() == 1
                {
                    return Ok(Scheme::RsaPss(h));
                }
            }
        }
        return Err(
            "RSASSA-PSS other than MGF1 with the same SHA-2 hash and a salt of its length".into(),
        );
    }
    Err(format!(
        "signature algorithm {oid} (SHA-1 and unknown ones are not taken)"
    ))
}

/// A CHILD_SA's keys (RFC 7296 section 2.17): per direction an encryption key (for the AEADs: key and 4-byte
/// salt, as ESP takes them, RFC 4106 / RFC 7634) and an integrity key (empty with an AEAD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildKeys {
    suite: ChildSuite,
    encr_i: Secret,
    integ_i: Secret,
    encr_r: Secret,
    integ_r: Secret,
}

impl ChildKeys {
    /// `KEYMAT = prf+(SK_d, Ni | Nr)` (no key exchange: `shared` empty), `prf+(SK_d, g^ir (new) | Ni | Nr)` (PFS:
    /// `shared = [g^ir]`), or `prf+(SK_d, SK(0) | Ni | Nr | SK(1) | ... | SK(n))` (RFC 9370 section 2.2.4).
    /// `ni`, `nr` are the nonces of the exchange that creates the CHILD_SA (IKE_SA_INIT's for the IKE_AUTH child,
    /// CREATE_CHILD_SA's otherwise); `prf` and `sk_d` the IKE SA's.
    pub fn derive(
        suite: ChildSuite,
        prf: Prf,
        sk_d: Key<'_>,
        shared: &[&[u8]],
        ni: &[u8],
        nr: &[u8],
    ) -> Result<ChildKeys, KeysError> {
        let e = suite.encr.keymat_len();
        let a = suite.integ.map_or(0, |i| i.key_len());
        let mut block = Secret::zeroed(2 * (e + a));
        ike_prf_plus(
            prf.ike_prf(),
            sk_d.expose(),
            &ke_seed(shared, ni, nr),
            &mut block.0,
        )
        .map_err(|_| KeysError::TooLong)?;
        let b = block.expose();
        Ok(ChildKeys {
            suite,
            encr_i: Secret::new(&b[..e]),
            integ_i: Secret::new(&b[e..e + a]),
            encr_r: Secret::new(&b[e + a..2 * e + a]),
            integ_r: Secret::new(&b[2 * e + a..]),
        })
    }

    pub fn suite(&self) -> ChildSuite {
        self.suite
    }
    /// Encryption key (and salt) of the initiator-to-responder SA.
    pub fn encr_i(&self) -> &Secret {
        &self.encr_i
    }
    /// Integrity key of the initiator-to-responder SA (empty with an AEAD).
    pub fn integ_i(&self) -> &Secret {
        &self.integ_i
    }
    /// Encryption key (and salt) of the responder-to-initiator SA.
    pub fn encr_r(&self) -> &Secret {
        &self.encr_r
    }
    /// Integrity key of the responder-to-initiator SA (empty with an AEAD).
    pub fn integ_r(&self) -> &Secret {
        &self.integ_r
    }
}

#[cfg(test)]
mod tests {
    /// RFC 7427 appendix A's AlgorithmIdentifiers (with the length octet in front, as in the AUTH data) and RFC
    /// 8420's for Ed25519; each parses back to its scheme, and PSS (A.4.3's RSASSA-PSS with SHA-256, built here
    /// from its parts) is read from its parameters.
    #[test]
    fn rfc7427_algorithm_identifiers() {
        use netveil_crypto::sig::{KeyKind, Scheme, SigHash};
        let cases = [
            (
                Scheme::RsaPkcs1(SigHash::Sha256),
                "0f300d06092a864886f70d01010b0500",
                KeyKind::Rsa,
            ),
            (
                Scheme::RsaPkcs1(SigHash::Sha384),
                "0f300d06092a864886f70d01010c0500",
                KeyKind::Rsa,
            ),
            (
                Scheme::RsaPkcs1(SigHash::Sha512),
                "0f300d06092a864886f70d01010d0500",
                KeyKind::Rsa,
            ),
            (
                Scheme::Ecdsa(SigHash::Sha256),
                "0c300a06082a8648ce3d040302",
                KeyKind::EcdsaP256,
            ),
            (
                Scheme::Ecdsa(SigHash::Sha384),
                "0c300a06082a8648ce3d040303",
                KeyKind::EcdsaP384,
            ),
            (
                Scheme::Ecdsa(SigHash::Sha512),
                "0c300a06082a8648ce3d040304",
                KeyKind::EcdsaP256,
            ),
            (Scheme::Ed25519, "07300506032b6570", KeyKind::Ed25519),
        ];
        for (scheme, want, kind) in cases {
            let data = digital_signature_auth(scheme, b"SIG").unwrap();
            assert_eq!(hex::encode(&data[..data.len() - 3]), want, "{scheme:?}");
            assert_eq!(
                parse_signature_auth(14, &data, kind),
                Ok((scheme, &b"SIG"[..]))
            );
        }
        let pss = [
            "3041",                                                         // AlgorithmIdentifier
            "06092a864886f70d01010a",                                       // id-RSASSA-PSS
            "3034",                                                         // RSASSA-PSS-params
            "a00f300d06096086480165030402010500",                           // [0] sha256, NULL
            "a11c301a06092a864886f70d010108300d06096086480165030402010500", // [1] mgf1(sha256)
            "a203020120",                                                   // [2] salt 32
        ]
        .concat();
        let pss = hex::decode(pss).unwrap();
        let mut data = vec![pss.len() as u8];
        data.extend_from_slice(&pss);
        data.extend_from_slice(b"SIG");
        assert_eq!(
            parse_signature_auth(14, &data, KeyKind::Rsa),
            Ok((Scheme::RsaPss(SigHash::Sha256), &b"SIG"[..]))
        );
        // A salt of another length, SHA-1 in method 14, garbage, a length past the data: refused.
        let mut bad = data.clone();
        let n = pss.len();
        bad[n] = 0x10;
        assert!(parse_signature_auth(14, &bad, KeyKind::Rsa).is_err());
        let sha1 = hex::decode("0f300d06092a864886f70d0101050500").unwrap();
        assert!(parse_signature_auth(14, &sha1, KeyKind::Rsa).is_err());
        assert!(parse_signature_auth(14, &[3, 1, 2, 3], KeyKind::Rsa).is_err());
        assert!(parse_signature_auth(14, &[200, 0x30], KeyKind::Rsa).is_err());
        assert!(parse_signature_auth(14, &[], KeyKind::Rsa).is_err());
        // The classic methods: 1 is RSA SHA-1 (legacy, verification only), 9/10 need their curve.
        assert_eq!(
            parse_signature_auth(1, b"S", KeyKind::Rsa),
            Ok((Scheme::RsaPkcs1(SigHash::Sha1), &b"S"[..]))
        );
        assert!(parse_signature_auth(9, b"S", KeyKind::EcdsaP384).is_err());
        assert!(parse_signature_auth(2, b"S", KeyKind::Rsa).is_err());
    }

    use super::*;

    fn cbc_suite() -> IkeSuite {
        IkeSuite::new(
            Encr::AesCbc256,
            Prf::HmacSha256,
            Some(Integ::HmacSha256_128),
        )
        .unwrap()
    }

    #[test]
    fn debug_prints_no_key_bytes() {
        let seed = skeyseed(Prf::HmacSha256, &[1; 32], &[2; 32], &[3; 32]);
        let keys =
            IkeKeys::derive(cbc_suite(), &seed, &[1; 32], &[2; 32], &[4; 8], &[5; 8]).unwrap();
        let text = format!("{keys:?} {seed:?}");
        assert!(text.contains("Secret(32 bytes)"), "{text}");
        for k in [keys.sk_d(), keys.sk_ei(), keys.sk_pr()] {
            let hex: String = k.expose().iter().map(|b| format!("{b:02x}")).collect();
            let dec = format!("{:?}", k.expose());
            assert!(
                !text.contains(&hex[..8]) && !text.contains(&dec[1..12]),
                "{text}"
            );
        }
    }

    #[test]
    fn suites_keep_aead_and_integrity_apart() {
        assert_eq!(
            IkeSuite::new(
                Encr::AesGcm16_128,
                Prf::HmacSha256,
                Some(Integ::HmacSha1_96)
            ),
            Err(KeysError::Integrity)
        );
        assert_eq!(
            ChildSuite::new(Encr::AesCbc128, None),
            Err(KeysError::Integrity)
        );
        let p = Proposal::parse(Protocol::Ike, "aes128-aes256-sha256-x25519").unwrap();
        assert_eq!(IkeSuite::from_proposal(&p), Err(KeysError::NotSelectedIke));
        let p = Proposal::parse(Protocol::Esp, "aes128gcm16").unwrap();
        assert_eq!(IkeSuite::from_proposal(&p), Err(KeysError::NotSelectedIke));
        assert_eq!(
            ChildSuite::from_proposal(&p),
            ChildSuite::new(Encr::AesGcm16_128, None)
        );
    }

    #[test]
    fn aead_keys_carry_the_salt_and_no_integrity_keys() {
        let suite = IkeSuite::new(Encr::AesGcm16_256, Prf::HmacSha384, None).unwrap();
        let seed = skeyseed(Prf::HmacSha384, &[1; 32], &[2; 32], &[3; 32]);
        let keys = IkeKeys::derive(suite, &seed, &[1; 32], &[2; 32], &[4; 8], &[5; 8]).unwrap();
        let lens = [
            keys.sk_d().len(),
            keys.sk_ai().len(),
            keys.sk_ar().len(),
            keys.sk_ei().len(),
            keys.sk_er().len(),
            keys.sk_pi().len(),
            keys.sk_pr().len(),
        ];
        assert_eq!(lens, [48, 0, 0, 36, 36, 48, 48]);
        // The block is one prf+ stream, in order: SK_ei follows SK_d directly.
        let mut block = vec![0u8; 48 + 36];
        ike_prf_plus(
            Prf::HmacSha384.ike_prf(),
            seed.expose(),
            &[&[1; 32], &[2; 32], &[4; 8], &[5; 8]],
            &mut block,
        )
        .unwrap();
        assert_eq!(keys.sk_ei().expose(), &block[48..]);
        let child = ChildKeys::derive(
            ChildSuite::new(Encr::ChaCha20Poly1305, None).unwrap(),
            Prf::HmacSha384,
            keys.sk_d(),
            &[],
            &[1; 32],
            &[2; 32],
        )
        .unwrap();
        assert_eq!((child.encr_i().len(), child.integ_i().len()), (36, 0));
        assert_eq!((child.encr_r().len(), child.integ_r().len()), (36, 0));
        assert_ne!(child.encr_i(), child.encr_r());
    }

    /// RFC 9370 has no test vector: the formulas, computed by hand with the bare PRF.
    #[test]
    fn additional_key_exchanges_follow_rfc_9370() {
        let prf = Prf::HmacSha256;
        let p = prf.ike_prf();
        let (ni, nr, spi_i, spi_r) = ([0x11; 32], [0x22; 32], [0x33; 8], [0x44; 8]);
        let (sk0, sk1, sk2) = ([0xa0; 32], [0xa1; 1088], [0xa2; 32]);
        let suite = cbc_suite();
        let k0 = IkeKeys::derive(
            suite,
            &skeyseed(prf, &ni, &nr, &sk0),
            &ni,
            &nr,
            &spi_i,
            &spi_r,
        )
        .unwrap();
        // IKE_INTERMEDIATE: SKEYSEED(1) = prf(SK_d(0), SK(1) | Ni | Nr).
        let k1 = k0.intermediate(&sk1, &ni, &nr, &spi_i, &spi_r).unwrap();
        let mut seed1 = [0u8; 32];
        let mut cat = sk1.to_vec();
        cat.extend_from_slice(&ni);
        cat.extend_from_slice(&nr);
        ike_prf(p, k0.sk_d().expose(), &[&cat], &mut seed1);
        let mut block = [0u8; 7 * 32];
        ike_prf_plus(p, &seed1, &[&[ni, nr].concat(), &spi_i, &spi_r], &mut block).unwrap();
        assert_eq!(k1.sk_d().expose(), &block[..32]);
        assert_eq!(k1.sk_pr().expose(), &block[6 * 32..]);
        assert_ne!(k1.sk_d(), k0.sk_d());
        // Rekey: SKEYSEED = prf(SK_d, SK(0) | Ni | Nr | SK(1) | SK(2)).
        let got = skeyseed_rekey(prf, k1.sk_d(), &[&sk0, &sk1, &sk2], &ni, &nr);
        let mut want = [0u8; 32];
        let cat = [&sk0[..], &ni, &nr, &sk1, &sk2].concat();
        ike_prf(p, k1.sk_d().expose(), &[&cat], &mut want);
        assert_eq!(got.expose(), want);
        // Child: KEYMAT = prf+(SK_d, SK(0) | Ni | Nr | SK(1)).
        let cs = ChildSuite::new(Encr::AesCbc128, Some(Integ::HmacSha1_96)).unwrap();
        let child = ChildKeys::derive(cs, prf, k1.sk_d(), &[&sk0, &sk1], &ni, &nr).unwrap();
        let mut keymat = [0u8; 2 * (16 + 20)];
        let cat = [&sk0[..], &ni, &nr, &sk1].concat();
        ike_prf_plus(p, k1.sk_d().expose(), &[&cat], &mut keymat).unwrap();
        assert_eq!(child.encr_i().expose(), &keymat[..16]);
        assert_eq!(child.integ_i().expose(), &keymat[16..36]);
        assert_eq!(child.encr_r().expose(), &keymat[36..52]);
        assert_eq!(child.integ_r().expose(), &keymat[52..]);
    }

    #[test]
    fn psk_auth_checks_in_constant_time_and_refuses_other_values() {
        let octets = b"some signed octets";
        let auth = psk_auth(Prf::HmacSha1, b"secret", octets);
        assert_eq!(auth.len(), 20);
        assert_eq!(
            verify_psk_auth(Prf::HmacSha1, b"secret", octets, &auth),
            Ok(())
        );
        assert_eq!(
            verify_psk_auth(Prf::HmacSha1, b"secreT", octets, &auth),
            Err(AuthError)
        );
        assert_eq!(
            verify_psk_auth(Prf::HmacSha1, b"secret", octets, &auth[..19]),
            Err(AuthError)
        );
        let mut bad = auth.clone();
        bad[19] ^= 1;
        assert_eq!(
            verify_psk_auth(Prf::HmacSha1, b"secret", octets, &bad),
            Err(AuthError)
        );
    }
}
