//! `netveil keygen`: private keys, certificate requests, a self-signed CA and end-entity certificates, the way
//! strongSwan's `pki --gen/--req/--self --ca/--issue` makes them, so that a netveil host and a strongSwan host can
//! share one small PKI (swanctl loads what this writes; this loads what `pki` writes).
//!
//! Made with rcgen over aws-lc-rs (key generation, RSA included, and signatures) and read with x509-parser (CSRs,
//! CA certificates); nothing here encodes ASN.1 by hand.
//!
//! - Keys: ECDSA P-256/P-384, Ed25519, RSA 2048/3072/4096, written PKCS#8 (`-----BEGIN PRIVATE KEY-----`, or DER),
//!   created 0600 and never over an existing file. Keys are read in every unencrypted form `pki` and openssl
//!   write: PKCS#8, SEC1 (`EC PRIVATE KEY`) and PKCS#1 (`RSA PRIVATE KEY`), PEM or DER.
//! - Distinguished names in strongSwan's syntax (`C=CH, O=netveil, CN=moon`, or `/C=CH/O=netveil/CN=moon`), with
//!   strongSwan's attribute names and its string types (PrintableString where the value allows it, else
//!   UTF8String; IA5String for E and DC).
//! - subjectAltNames as `pki --san` reads them: an IP address, `user@domain` (email), `@name` or `name` (DNS), or
//!   explicitly `dns:`, `email:`, `ip:`.
//! - `issue` copies only the subject and the subjectAltNames from a request (as `pki --issue`); what the
//!   certificate may do (CA or not, keyUsage, extendedKeyUsage) comes from the command line, never the request.

use std::io::{Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, DnValue, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
    SerialNumber,
};
use x509_parser::prelude::FromDer;
use zeroize::Zeroizing;

use crate::{Error, Result};

/// The largest key, request or certificate file read (a 4096-bit RSA key in PEM is about 3.3 KB).
const MAX_INPUT: u64 = 64 * 1024;

/// Longest lifetime accepted, in days (100 years).
pub const MAX_LIFETIME_DAYS: u32 = 36_500;

/// A request or certificate made here, in both forms.
#[derive(Clone, Debug)]
pub struct Made {
    pub der: Vec<u8>,
    pub pem: String,
}

impl Made {
    fn bytes(&self, form: Form) -> &[u8] {
        match form {
            Form::Pem => self.pem.as_bytes(),
            Form::Der => &self.der,
        }
    }
}

/// A private key's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    EcdsaP256,
    EcdsaP384,
    Ed25519,
    Rsa2048,
    Rsa3072,
    Rsa4096,
}

impl KeyType {
    /// Every type with its command-line name.
    pub const ALL: [(KeyType, &'static str); 6] = [
        (KeyType::EcdsaP256, "ecdsa-p256"),
        (KeyType::EcdsaP384, "ecdsa-p384"),
        (KeyType::Ed25519, "ed25519"),
        (KeyType::Rsa2048, "rsa-2048"),
        (KeyType::Rsa3072, "rsa-3072"),
        (KeyType::Rsa4096, "rsa-4096"),
    ];

    /// The command-line name (`ecdsa-p256`, ...).
    pub fn name(self) -> &'static str {
        KeyType::ALL
            .iter()
            .find(|(t, _)| *t == self)
            .map(|(_, n)| *n)
            .unwrap_or("?")
    }
}

/// How a file is written: PEM (the default, as swanctl and openssl read it) or DER (`pki --outform der`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Form {
    #[default]
    Pem,
    Der,
}

/// An extendedKeyUsage purpose, as `pki --flag` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flag {
    /// TLS Web Server Authentication (1.3.6.1.5.5.7.3.1): what Windows and macOS clients want on a gateway.
    ServerAuth,
    /// TLS Web Client Authentication (1.3.6.1.5.5.7.3.2).
    ClientAuth,
    /// IP Security IKE Intermediate (1.3.6.1.5.5.8.2.2), which some clients (macOS, older Windows) want.
    IkeIntermediate,
}

/// id-kp-ipsecIKE intermediate, RFC 4945 section 5.1.3.12 and `pki --flag ikeIntermediate`.
const OID_IKE_INTERMEDIATE: &[u64] = &[1, 3, 6, 1, 5, 5, 8, 2, 2];

/// A private key (made here or read from a file). Debug shows its algorithm only.
pub struct PrivateKey {
    pair: KeyPair,
    kind: &'static str,
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PrivateKey({}, ..)", self.kind)
    }
}

impl PrivateKey {
    /// Makes a new key of this type (from aws-lc-rs's generator, seeded by the OS).
    pub fn generate(t: KeyType) -> Result<PrivateKey> {
        let pair = match t {
            KeyType::EcdsaP256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
            KeyType::EcdsaP384 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384),
            // PKCS#8 v1 (RFC 5208), not the v2 with the public key that aws-lc writes by default, which OpenSSL
            // 3.0 cannot read ("unsupported"); pki writes v1 too.
            KeyType::Ed25519 => aws_lc_rs::signature::Ed25519KeyPair::generate_pkcs8v1(
                &aws_lc_rs::rand::SystemRandom::new(),
            )
            .map_err(|_| rcgen::Error::KeyGenerationUnavailable)
            .and_then(|doc| KeyPair::try_from(Zeroizing::new(doc.as_ref().to_vec()).as_slice())),
            KeyType::Rsa2048 => {
                KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048)
            }
            KeyType::Rsa3072 => {
                KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_3072)
            }
            KeyType::Rsa4096 => {
                KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_4096)
            }
        }
        .map_err(Error::crypto(format!("cannot make a {} key", t.name())))?;
        Ok(PrivateKey {
            pair,
            kind: t.name(),
        })
    }

    /// Reads an unencrypted private key: PKCS#8, SEC1 (`EC PRIVATE KEY`) or PKCS#1 (`RSA PRIVATE KEY`), PEM or DER.
    /// `what` names the option the path came from, for the error message.
    pub fn load(path: &Path, what: &str) -> Result<PrivateKey> {
        let bytes = read_limited(path, what)?;
        let der: Zeroizing<Vec<u8>> = if looks_pem(&bytes) {
            let text = std::str::from_utf8(&bytes)
                .map_err(|_| Error::file(what, path, "is not a PEM file"))?;
            if text.contains("ENCRYPTED") {
                return Err(Error::file(
                    what,
                    path,
                    "is an encrypted key; netveil reads unencrypted keys only \
                     (decrypt it with `openssl pkey -in FILE -out FILE.new`)",
                ));
            }
            let (label, der) = pem_first(text, what, path)?;
            if !matches!(
                label.as_str(),
                "PRIVATE KEY" | "EC PRIVATE KEY" | "RSA PRIVATE KEY"
            ) {
                return Err(Error::file(
                    what,
                    path,
                    format!("holds a {label}, not a private key"),
                ));
            }
            der
        } else {
            bytes
        };
        let pair = KeyPair::try_from(&der[..]).map_err(|_| {
            Error::file(
                what,
                path,
                "is not an ECDSA (P-256, P-384, P-521), Ed25519 or RSA private key netveil can read",
            )
        })?;
        let kind = algorithm_name(pair.algorithm());
        Ok(PrivateKey { pair, kind })
    }

    /// The algorithm's name (`ecdsa-p256`, `ed25519`, `rsa`, ...).
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The public key as it sits in a SubjectPublicKeyInfo's BIT STRING (EC point, Ed25519 key, PKCS#1 RSA key).
    pub fn public_key_raw(&self) -> &[u8] {
        self.pair.public_key_raw()
    }

    /// Signs `msg` with the key's algorithm (ECDSA: DER signature; RSA: PKCS#1 v1.5 with SHA-256).
    pub fn sign(&self, msg: &[u8]) -> Result<Vec<u8>> {
        use rcgen::SigningKey;
        self.pair.sign(msg).map_err(Error::crypto("signing failed"))
    }

    /// The key in PKCS#8, PEM or DER (only keys made here: a key read from a file is written where it was).
    fn pkcs8(&self, form: Form) -> Zeroizing<Vec<u8>> {
        match form {
            Form::Pem => Zeroizing::new(self.pair.serialize_pem().into_bytes()),
            Form::Der => Zeroizing::new(self.pair.serialize_der()),
        }
    }
}

fn algorithm_name(alg: &rcgen::SignatureAlgorithm) -> &'static str {
    if alg == &rcgen::PKCS_ECDSA_P256_SHA256 {
        "ecdsa-p256"
    } else if alg == &rcgen::PKCS_ECDSA_P384_SHA384 {
        "ecdsa-p384"
    } else if alg == &rcgen::PKCS_ECDSA_P521_SHA512 {
        "ecdsa-p521"
    } else if alg == &rcgen::PKCS_ED25519 {
        "ed25519"
    } else {
        "rsa"
    }
}

fn looks_pem(bytes: &[u8]) -> bool {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    bytes[start..].starts_with(b"-----BEGIN ")
}

/// The first PEM block of a file: its label and its DER bytes (zeroized when dropped: it may be a key).
fn pem_first(text: &str, what: &str, path: &Path) -> Result<(String, Zeroizing<Vec<u8>>)> {
    let bad = || Error::file(what, path, "is not a valid PEM file");
    let (_, pem) = x509_parser::pem::parse_x509_pem(text.as_bytes()).map_err(|_| bad())?;
    Ok((pem.label, Zeroizing::new(pem.contents)))
}

/// Reads a file of at most [`MAX_INPUT`] bytes into a buffer zeroized when dropped.
fn read_limited(path: &Path, what: &str) -> Result<Zeroizing<Vec<u8>>> {
    let f = std::fs::File::open(path).map_err(Error::io(Some(what), "cannot open", path))?;
    let mut buf = Zeroizing::new(Vec::new());
    f.take(MAX_INPUT + 1)
        .read_to_end(&mut buf)
        .map_err(Error::io(Some(what), "cannot read", path))?;
    if buf.len() as u64 > MAX_INPUT {
        return Err(Error::file(
            what,
            path,
            format!("is larger than {MAX_INPUT} bytes; not a key, request or certificate"),
        ));
    }
    Ok(buf)
}

/// Reads a DER object (certificate or request) from a PEM or DER file; a PEM file must hold `label`.
fn read_der(path: &Path, what: &str, labels: &[&str]) -> Result<Vec<u8>> {
    let bytes = read_limited(path, what)?;
    if !looks_pem(&bytes) {
        return Ok(bytes.to_vec());
    }
    let text =
        std::str::from_utf8(&bytes).map_err(|_| Error::file(what, path, "is not a PEM file"))?;
    let (label, der) = pem_first(text, what, path)?;
    if !labels.contains(&label.as_str()) {
        return Err(Error::file(
            what,
            path,
            format!("holds a {label}, not a {}", labels[0]),
        ));
    }
    Ok(der.to_vec())
}

/// strongSwan's DN attribute names (libstrongswan's `x501rdns`), the OID and the string type for each.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StrType {
    /// PrintableString where the value allows it, else UTF8String (strongSwan's rule).
    Printable,
    /// IA5String (ASCII only).
    Ia5,
}

const RDNS: &[(&str, &[u64], StrType)] = &[
    ("CN", &[2, 5, 4, 3], StrType::Printable),
    ("S", &[2, 5, 4, 4], StrType::Printable),
    ("SN", &[2, 5, 4, 5], StrType::Printable),
    ("serialNumber", &[2, 5, 4, 5], StrType::Printable),
    ("C", &[2, 5, 4, 6], StrType::Printable),
    ("L", &[2, 5, 4, 7], StrType::Printable),
    ("ST", &[2, 5, 4, 8], StrType::Printable),
    ("STREET", &[2, 5, 4, 9], StrType::Printable),
    ("O", &[2, 5, 4, 10], StrType::Printable),
    ("OU", &[2, 5, 4, 11], StrType::Printable),
    ("T", &[2, 5, 4, 12], StrType::Printable),
    ("D", &[2, 5, 4, 13], StrType::Printable),
    ("N", &[2, 5, 4, 41], StrType::Printable),
    ("G", &[2, 5, 4, 42], StrType::Printable),
    ("I", &[2, 5, 4, 43], StrType::Printable),
    ("dnQualifier", &[2, 5, 4, 46], StrType::Printable),
    ("ID", &[2, 5, 4, 45], StrType::Printable),
    ("pseudonym", &[2, 5, 4, 65], StrType::Printable),
    (
        "UID",
        &[0, 9, 2342, 19200300, 100, 1, 1],
        StrType::Printable,
    ),
    ("DC", &[0, 9, 2342, 19200300, 100, 1, 25], StrType::Ia5),
    ("E", &[1, 2, 840, 113549, 1, 9, 1], StrType::Ia5),
    ("Email", &[1, 2, 840, 113549, 1, 9, 1], StrType::Ia5),
    ("emailAddress", &[1, 2, 840, 113549, 1, 9, 1], StrType::Ia5),
];

/// Parses a distinguished name in strongSwan's syntax: `C=CH, O=netveil, CN=moon` (attributes separated by
/// commas) or `/C=CH/O=netveil/CN=moon` (by slashes when it starts with one), attribute names as strongSwan
/// spells them (case-insensitive), spaces around names and values ignored. Like `pki`, there is no escaping: a value
/// cannot hold the separator. Unlike `pki`, an empty value and an attribute given twice (which rcgen cannot encode)
/// are errors.
pub fn parse_dn(s: &str) -> std::result::Result<DistinguishedName, String> {
    let s = s.trim();
    let (sep, body) = match s.strip_prefix('/') {
        Some(rest) => ('/', rest),
        None => (',', s),
    };
    if body.trim().is_empty() {
        return Err("is empty (expected e.g. \"C=CH, O=netveil, CN=moon\")".into());
    }
    let mut dn = DistinguishedName::new();
    let mut seen: Vec<&[u64]> = Vec::new();
    for part in body.split(sep) {
        let part = part.trim();
        let Some((key, value)) = part.split_once('=') else {
            return Err(format!(
                "\"{part}\" is not ATTRIBUTE=value (attributes are separated by '{sep}')"
            ));
        };
        let (key, value) = (key.trim(), value.trim());
        let Some(&(_, oid, st)) = RDNS.iter().find(|(n, _, _)| n.eq_ignore_ascii_case(key)) else {
            let names: Vec<&str> = RDNS.iter().map(|(n, _, _)| *n).collect();
            return Err(format!(
                "unknown attribute \"{key}\" (known: {})",
                names.join(", ")
            ));
        };
        if value.is_empty() {
            return Err(format!("{key} has an empty value"));
        }
        if seen.contains(&oid) {
            return Err(format!(
                "{key} is given twice; netveil makes one value per attribute"
            ));
        }
        seen.push(oid);
        let v = match st {
            StrType::Ia5 => DnValue::Ia5String(
                rcgen::string::Ia5String::try_from(value)
                    .map_err(|_| format!("{key}: \"{value}\" is not ASCII"))?,
            ),
            StrType::Printable => match rcgen::string::PrintableString::try_from(value) {
                Ok(p) => DnValue::PrintableString(p),
                Err(_) => DnValue::Utf8String(value.to_string()),
            },
        };
        dn.push(DnType::from_oid(oid), v);
    }
    Ok(dn)
}

/// Parses one subjectAltName as `pki --san` does: `dns:`, `email:` (or `rfc822:`) and `ip:` say the type;
/// otherwise an IP address is an IP address, `@name` a DNS name, `user@domain` an email address, anything else a
/// DNS name.
pub fn parse_san(s: &str) -> std::result::Result<SanType, String> {
    let s = s.trim();
    let ia5 = |v: &str| {
        if v.is_empty() || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("\"{v}\" is empty or has spaces"));
        }
        rcgen::string::Ia5String::try_from(v).map_err(|_| format!("\"{v}\" is not ASCII"))
    };
    let lower = s.to_ascii_lowercase();
    if let Some(v) = lower.strip_prefix("ip:").map(|_| &s[3..]) {
        return v
            .parse::<IpAddr>()
            .map(SanType::IpAddress)
            .map_err(|_| format!("\"{v}\" is not an IP address"));
    }
    if let Some(v) = lower.strip_prefix("dns:").map(|_| &s[4..]) {
        return ia5(v).map(SanType::DnsName);
    }
    for p in ["email:", "rfc822:"] {
        if lower.starts_with(p) {
            let v = &s[p.len()..];
            if !v.contains('@') {
                return Err(format!("\"{v}\" is not an email address"));
            }
            return ia5(v).map(SanType::Rfc822Name);
        }
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    if let Some(v) = s.strip_prefix('@') {
        return ia5(v).map(SanType::DnsName);
    }
    if s.contains('@') {
        return ia5(s).map(SanType::Rfc822Name);
    }
    ia5(s).map(SanType::DnsName)
}

/// A random, positive, non-zero 16-byte serial number (RFC 5280 4.1.2.2: at most 20 octets).
fn random_serial() -> SerialNumber {
    let mut b = [0u8; 16];
    loop {
        netveil_crypto::rand::fill_random(&mut b);
        b[0] &= 0x7f;
        if b[0] != 0 {
            return SerialNumber::from_slice(&b);
        }
    }
}

fn validity(params: &mut CertificateParams, days: u32) -> Result<()> {
    if days == 0 || days > MAX_LIFETIME_DAYS {
        return Err(Error::option(
            "--lifetime",
            format!("must be 1 to {MAX_LIFETIME_DAYS} days"),
        ));
    }
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(|_| Error::Clock {
            reason: "before 1970",
        })?;
    let to = |d: Duration| {
        time::OffsetDateTime::from_unix_timestamp(d.as_secs() as i64).map_err(|_| Error::Clock {
            reason: "out of range",
        })
    };
    params.not_before = to(now)?;
    params.not_after = to(now + Duration::from_secs(u64::from(days) * 86_400))?;
    Ok(())
}

/// A certification request (PKCS#10) for `key` with subject `dn` and these subjectAltNames (`pki --req`).
pub fn request(key: &PrivateKey, dn: DistinguishedName, sans: Vec<SanType>) -> Result<Made> {
    let mut params = CertificateParams::default();
    params.distinguished_name = dn;
    params.subject_alt_names = sans;
    let csr = params
        .serialize_request(&key.pair)
        .map_err(Error::crypto("cannot make the request"))?;
    let pem = csr
        .pem()
        .map_err(Error::crypto("cannot encode the request"))?;
    Ok(Made {
        der: csr.der().to_vec(),
        pem,
    })
}

/// A self-signed CA certificate (`pki --self --ca`): basicConstraints CA (critical, with a path length if
/// given), keyUsage keyCertSign and cRLSign, a subjectKeyIdentifier, a random serial, valid from now for `days`.
pub fn self_signed_ca(
    key: &PrivateKey,
    dn: DistinguishedName,
    days: u32,
    pathlen: Option<u8>,
) -> Result<Made> {
    let mut params = CertificateParams::default();
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(match pathlen {
        Some(n) => BasicConstraints::Constrained(n),
        None => BasicConstraints::Unconstrained,
    });
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.serial_number = Some(random_serial());
    validity(&mut params, days)?;
    let cert = params
        .self_signed(&key.pair)
        .map_err(Error::crypto("cannot make the CA certificate"))?;
    Ok(Made {
        der: cert.der().to_vec(),
        pem: cert.pem(),
    })
}

/// What `issue` puts into a certificate besides what the request gives.
#[derive(Debug, Default)]
pub struct IssueOptions {
    /// The subject instead of the request's (`pki --issue --dn`).
    pub dn: Option<DistinguishedName>,
    /// subjectAltNames added to the request's.
    pub sans: Vec<SanType>,
    /// Lifetime in days.
    pub days: u32,
    /// extendedKeyUsage purposes (none: no extendedKeyUsage, as `pki --issue` without `--flag`).
    pub flags: Vec<Flag>,
}

/// Checks that every RDN of a name holds one attribute and that no attribute type repeats: what rcgen can carry
/// over unchanged (it keeps one value per type), so an issuer name is copied byte for byte and a subject is not
/// silently shortened.
fn check_name(name: &x509_parser::x509::X509Name<'_>, what: &str) -> Result<()> {
    let mut seen = Vec::new();
    for rdn in name.iter() {
        let attrs: Vec<_> = rdn.iter().collect();
        if attrs.len() != 1 {
            return Err(Error::option(
                what,
                "the name has a multi-valued RDN, which netveil cannot copy",
            ));
        }
        if !encodable_oid(attrs[0].attr_type()) {
            return Err(Error::option(
                what,
                "the name has an attribute type that is not a valid OID",
            ));
        }
        let oid = attrs[0].attr_type().to_id_string();
        if seen.contains(&oid) {
            return Err(Error::option(
                what,
                format!("the name has attribute {oid} twice, which netveil cannot copy"),
            ));
        }
        seen.push(oid);
    }
    Ok(())
}

/// Whether rcgen can write this OID back (its encoder, yasna, panics on one whose first arcs X.690 cannot encode:
/// a mangled OID from a hostile file parses into such arcs).
fn encodable_oid(oid: &x509_parser::der_parser::oid::Oid<'_>) -> bool {
    let Some(arcs) = oid.iter().map(|i| i.collect::<Vec<u64>>()) else {
        return false;
    };
    arcs.len() >= 2 && arcs[0] < 3 && (arcs[0] == 2 || arcs[1] < 40) && arcs[1] < u64::MAX - 80
}

/// Issues an end-entity certificate for a request (PKCS#10, DER), signed by the CA certificate `ca_der` with
/// `ca_key` (`pki --issue --type pkcs10`). The request's signature must verify; its subject and subjectAltNames
/// are copied (see [`IssueOptions`]), anything else it asks for (CA, keyUsage, extendedKeyUsage) is not. The
/// certificate gets a random serial and an authorityKeyIdentifier (the CA's subjectKeyIdentifier), like pki's.
pub fn issue(
    csr_der: &[u8],
    ca_der: &[u8],
    ca_key: &PrivateKey,
    opts: &IssueOptions,
) -> Result<Made> {
    let (rest, ca) = x509_parser::certificate::X509Certificate::from_der(ca_der)
        .map_err(|_| Error::option("--cacert", "not an X.509 certificate"))?;
    if !rest.is_empty() {
        return Err(Error::option(
            "--cacert",
            "trailing bytes after the certificate",
        ));
    }
    let is_ca = matches!(ca.basic_constraints(), Ok(Some(bc)) if bc.value.ca);
    if !is_ca {
        return Err(Error::option(
            "--cacert",
            "not a CA certificate (no basicConstraints CA:TRUE)",
        ));
    }
    if let Ok(Some(ku)) = ca.key_usage() {
        if !ku.value.key_cert_sign() {
            return Err(Error::option(
                "--cacert",
                "its keyUsage does not allow keyCertSign",
            ));
        }
    }
    check_name(ca.subject(), "--cacert")?;
    if ca.public_key().subject_public_key.data.as_ref() != ca_key.public_key_raw() {
        return Err(Error::option(
            "--cakey",
            "this key does not belong to the --cacert certificate",
        ));
    }

    let (rest, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(csr_der)
            .map_err(|_| Error::option("--csr", "not a PKCS#10 certification request"))?;
    if !rest.is_empty() {
        return Err(Error::option("--csr", "trailing bytes after the request"));
    }
    check_name(&req.certification_request_info.subject, "--csr")?;
    for ext in req.requested_extensions().into_iter().flatten() {
        if let x509_parser::extensions::ParsedExtension::SubjectAlternativeName(san) = ext {
            for name in &san.general_names {
                if let x509_parser::extensions::GeneralName::OtherName(oid, _) = name {
                    if !encodable_oid(oid) {
                        return Err(Error::option(
                            "--csr",
                            "a subjectAltName has a type that is not a valid OID",
                        ));
                    }
                }
            }
        }
    }
    let want_spki = req.certification_request_info.subject_pki.raw.to_vec();

    let parsed = CertificateSigningRequestParams::from_der(&csr_der.into()).map_err(|e| {
        Error::option(
            "--csr",
            match e {
                rcgen::Error::InvalidCertificationRequestSignature => {
                    "the request's signature does not verify".to_string()
                }
                rcgen::Error::UnsupportedSignatureAlgorithm => {
                    "the request's signature algorithm is not supported (ECDSA with the curve's hash, \
                     Ed25519, RSA PKCS#1 v1.5 with SHA-256/384/512)"
                        .to_string()
                }
                e => format!("cannot use the request: {e}"),
            },
        )
    })?;
    let mut params = parsed.params;
    // Only the subject and the subjectAltNames come from the request (as pki --issue).
    params.is_ca = IsCa::NoCa;
    params.key_usages = Vec::new();
    params.extended_key_usages = Vec::new();
    params.custom_extensions = Vec::new();
    params.name_constraints = None;
    params.crl_distribution_points = Vec::new();
    if let Some(dn) = &opts.dn {
        params.distinguished_name = dn.clone();
    }
    for san in &opts.sans {
        if !params.subject_alt_names.contains(san) {
            params.subject_alt_names.push(san.clone());
        }
    }
    for f in &opts.flags {
        params.insert_extended_key_usage(match f {
            Flag::ServerAuth => ExtendedKeyUsagePurpose::ServerAuth,
            Flag::ClientAuth => ExtendedKeyUsagePurpose::ClientAuth,
            Flag::IkeIntermediate => ExtendedKeyUsagePurpose::Other(OID_IKE_INTERMEDIATE.to_vec()),
        });
    }
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(random_serial());
    validity(&mut params, opts.days)?;

    let issuer = Issuer::from_ca_cert_der(&ca_der.into(), &ca_key.pair)
        .map_err(|e| Error::option("--cacert", format!("cannot use it as an issuer: {e}")))?;
    let csr = CertificateSigningRequestParams {
        params,
        public_key: parsed.public_key,
    };
    let cert = csr
        .signed_by(&issuer)
        .map_err(Error::crypto("cannot make the certificate"))?;
    let der = cert.der().to_vec();

    // The certificate must carry the request's key and name the CA exactly as the CA names itself (chains are
    // built by comparing these bytes); rcgen re-encodes both, so check rather than trust.
    let (_, made) = x509_parser::certificate::X509Certificate::from_der(&der)
        .map_err(|_| Error::Internal("the certificate made does not parse"))?;
    if made.public_key().raw != want_spki.as_slice() {
        return Err(Error::option("--csr", "the request's key and signature algorithm disagree (e.g. a P-256 key signed with SHA-384); \
             make the request with the curve's own hash"));
    }
    if made.issuer().as_raw() != ca.subject().as_raw() {
        return Err(Error::Internal(
            "the issuer name does not match the CA's subject byte for byte",
        ));
    }
    Ok(Made {
        pem: cert.pem(),
        der,
    })
}

/// Creates `path` (never over an existing file) with `mode` and writes `data`.
fn write_new(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                exists(path)
            } else {
                Error::io(None, "cannot create", path)(e)
            }
        })?;
    f.write_all(data)
        .map_err(Error::io(None, "cannot write", path))
}

/// An output file that exists: nothing is written over it.
fn exists(path: &Path) -> Error {
    Error::Input {
        option: None,
        file: Some(path.to_path_buf()),
        reason: "exists; not overwriting it".into(),
    }
}

/// Where a command's key comes from: a file (`--key`), or made now (`--type`) and written beside the output.
#[derive(Debug, Clone)]
pub enum KeySource {
    File(PathBuf),
    New(KeyType),
}

/// The files a command wrote: what each holds and where.
pub type Written = Vec<(&'static str, PathBuf)>;

fn out_path(dir: &Path, name: &str, ext: &str) -> Result<PathBuf> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." || name.contains('\0') {
        return Err(Error::option(
            "--name",
            "is not a usable file name (empty or with a '/'; value not shown)",
        ));
    }
    Ok(dir.join(format!("{name}.{ext}")))
}

/// Refuses before anything is made when an output exists (so a command writes all of its files or none of them,
/// short of a failing disk).
fn check_free(paths: &[&Path]) -> Result<()> {
    for p in paths {
        if p.symlink_metadata().is_ok() {
            return Err(exists(p));
        }
    }
    Ok(())
}

fn make_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(Error::io(None, "cannot create", dir))
}

/// Gets the command's key: reads `--key`, or makes one, whose file is `key_path` (written by [`finish_key`]).
fn source_key(src: &KeySource) -> Result<(PrivateKey, bool)> {
    match src {
        KeySource::File(p) => Ok((PrivateKey::load(p, "--key")?, false)),
        KeySource::New(t) => Ok((PrivateKey::generate(*t)?, true)),
    }
}

fn write_key(key: &PrivateKey, path: &Path, form: Form) -> Result<()> {
    write_new(path, &key.pkcs8(form), 0o600)
}

/// `netveil keygen --type T --name N`: a private key, NAME.key (PKCS#8, mode 0600) (`pki --gen`).
pub fn cmd_key(name: &str, dir: &Path, t: KeyType, form: Form) -> Result<Written> {
    let path = out_path(dir, name, "key")?;
    check_free(&[&path])?;
    let key = PrivateKey::generate(t)?;
    make_dir(dir)?;
    write_key(&key, &path, form)?;
    Ok(vec![("private key", path)])
}

fn parse_sans(sans: &[String]) -> Result<Vec<SanType>> {
    sans.iter()
        .map(|s| parse_san(s).map_err(|e| Error::option("--san", e)))
        .collect()
}

/// `netveil keygen csr`: a certification request NAME.csr for `--key` (or a new key, NAME.key) (`pki --req`).
pub fn cmd_csr(
    name: &str,
    dir: &Path,
    key: &KeySource,
    dn: &str,
    sans: &[String],
    form: Form,
) -> Result<Written> {
    let dn = parse_dn(dn).map_err(|e| Error::option("--dn", e))?;
    let sans = parse_sans(sans)?;
    let csr_path = out_path(dir, name, "csr")?;
    let key_path = out_path(dir, name, "key")?;
    let (key, new) = source_key(key)?;
    check_free(&if new {
        vec![&*csr_path, &*key_path]
    } else {
        vec![&*csr_path]
    })?;
    let csr = request(&key, dn, sans)?;
    make_dir(dir)?;
    let mut out = Vec::new();
    if new {
        write_key(&key, &key_path, form)?;
        out.push(("private key", key_path));
    }
    write_new(&csr_path, csr.bytes(form), 0o644)?;
    out.push(("certificate request", csr_path));
    Ok(out)
}

/// `netveil keygen ca`: a self-signed CA certificate NAME.crt for `--key` (or a new key, NAME.key)
/// (`pki --self --ca`).
pub fn cmd_ca(
    name: &str,
    dir: &Path,
    key: &KeySource,
    dn: &str,
    days: u32,
    pathlen: Option<u8>,
    form: Form,
) -> Result<Written> {
    let dn = parse_dn(dn).map_err(|e| Error::option("--dn", e))?;
    let crt_path = out_path(dir, name, "crt")?;
    let key_path = out_path(dir, name, "key")?;
    let (key, new) = source_key(key)?;
    check_free(&if new {
        vec![&*crt_path, &*key_path]
    } else {
        vec![&*crt_path]
    })?;
    let crt = self_signed_ca(&key, dn, days, pathlen)?;
    make_dir(dir)?;
    let mut out = Vec::new();
    if new {
        write_key(&key, &key_path, form)?;
        out.push(("private key", key_path));
    }
    write_new(&crt_path, crt.bytes(form), 0o644)?;
    out.push(("CA certificate", crt_path));
    Ok(out)
}

/// What `netveil keygen issue` reads and writes.
#[derive(Debug)]
pub struct IssueArgs<'a> {
    pub name: &'a str,
    pub dir: &'a Path,
    pub csr: &'a Path,
    pub cacert: &'a Path,
    pub cakey: &'a Path,
    pub dn: Option<&'a str>,
    pub sans: &'a [String],
    pub days: u32,
    pub flags: Vec<Flag>,
    pub form: Form,
}

/// `netveil keygen issue`: an end-entity certificate NAME.crt for a request, signed by a CA (`pki --issue`).
pub fn cmd_issue(a: &IssueArgs<'_>) -> Result<Written> {
    let opts = IssueOptions {
        dn: a
            .dn
            .map(|d| parse_dn(d).map_err(|e| Error::option("--dn", e)))
            .transpose()?,
        sans: parse_sans(a.sans)?,
        days: a.days,
        flags: a.flags.clone(),
    };
    let crt_path = out_path(a.dir, a.name, "crt")?;
    check_free(&[&crt_path])?;
    let csr = read_der(
        a.csr,
        "--csr",
        &["CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST"],
    )?;
    let ca = read_der(a.cacert, "--cacert", &["CERTIFICATE"])?;
    let ca_key = PrivateKey::load(a.cakey, "--cakey")?;
    let crt = issue(&csr, &ca, &ca_key, &opts)?;
    make_dir(a.dir)?;
    write_new(&crt_path, crt.bytes(a.form), 0o644)?;
    Ok(vec![("certificate", crt_path)])
}

#[cfg(test)]
mod tests;
