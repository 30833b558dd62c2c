//! X.509 certificates for IKE public-key authentication (RFC 7296 3.6, 2.15; RFC 4945's profile as strongSwan
//! applies it): certificates loaded from PEM or DER, the peer's chain validated with rustls-webpki against the
//! configured CA certificates (or the peer's certificate pinned: an exact match), the peer's ID matched against
//! its certificate, distinguished names in swanctl's syntax (`C=CH, O=strongSwan, CN=moon`) encoded to DER and
//! compared as strongSwan compares them.
//!
//! What webpki cannot express for IKE, and what is used instead: webpki checks a name only for TLS (DNS names
//! and IP addresses of the subjectAltName); IKE identities are also DNs and e-mail addresses, so the ID is
//! matched here (x509-parser reads the subject and subjectAltName). webpki's EKU check takes one required purpose;
//! IKE's certificates carry none, or serverAuth/clientAuth/ipsecIKE (strongSwan's `pki --flag`), so
//! [`IkeEku`] accepts any of those (or none).
//!
//! Time: webpki needs the wall-clock time, which a sans-I/O machine cannot read; the caller passes it.

use core::fmt;
use std::time::{Duration, SystemTime};

use netveil_crypto::mac::sha1_digest;
use netveil_crypto::sig::PublicKey;
use pki_types::{CertificateDer, UnixTime};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

use crate::config::Identity;
use crate::message::{Id, IdType};

/// An X.509 certificate (DER), parsed once.
#[derive(Clone)]
pub struct Certificate {
    der: Vec<u8>,
    subject: Vec<u8>,
    subject_text: String,
    keyid: [u8; 20],
    public_key: PublicKey,
}

impl PartialEq for Certificate {
    fn eq(&self, o: &Certificate) -> bool {
        self.der == o.der
    }
}

impl Eq for Certificate {}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Certificate(\"{}\")", self.subject_text)
    }
}

/// A certificate or certificate file that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertLoadError {
    #[error("is not an X.509 certificate in PEM or DER")]
    NotACertificate,
    #[error("holds no certificate")]
    Empty,
    #[error("has a public key that is not RSA, ECDSA P-256/P-384/P-521 or Ed25519")]
    Key,
}

fn parse(der: &[u8]) -> Option<X509Certificate<'_>> {
    match X509Certificate::from_der(der) {
        Ok(([], c)) => Some(c),
        _ => None,
    }
}

impl Certificate {
    /// One DER certificate.
    pub fn from_der(der: &[u8]) -> Result<Certificate, CertLoadError> {
        let c = parse(der).ok_or(CertLoadError::NotACertificate)?;
        let spki = c.public_key().raw;
        let public_key = PublicKey::from_spki(spki).map_err(|_| CertLoadError::Key)?;
        Ok(Certificate {
            der: der.to_vec(),
            subject: c.subject().as_raw().to_vec(),
            subject_text: dn_string(c.subject().as_raw()),
            keyid: sha1_digest(&[spki]),
            public_key,
        })
    }

    /// The certificates of a file: PEM (every `CERTIFICATE` block, in order) or one DER certificate.
    pub fn load(bytes: &[u8]) -> Result<Vec<Certificate>, CertLoadError> {
        if !bytes.trim_ascii_start().starts_with(b"-----BEGIN") {
            return Ok(vec![Certificate::from_der(bytes)?]);
        }
        let blocks = pem::parse_many(bytes).map_err(|_| CertLoadError::NotACertificate)?;
        let certs = blocks
            .iter()
            .filter(|b| b.tag() == "CERTIFICATE" || b.tag() == "X509 CERTIFICATE")
            .map(|b| Certificate::from_der(b.contents()))
            .collect::<Result<Vec<_>, _>>()?;
        if certs.is_empty() {
            return Err(CertLoadError::Empty);
        }
        Ok(certs)
    }

    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The subject DN, DER as in the certificate.
    pub fn subject_der(&self) -> &[u8] {
        &self.subject
    }

    /// The subject as text (`C=CH, O=strongSwan, CN=moon`).
    pub fn subject(&self) -> &str {
        &self.subject_text
    }

    pub fn public_key(&self) -> &PublicKey {
        &self.public_key
    }

    /// Its validity period: not before, not after (seconds since the Unix epoch), and the end as text
    /// (`2027-01-01 02:53:50 UTC`).
    pub fn validity(&self) -> Option<(i64, i64, String)> {
        let c = parse(&self.der)?;
        let v = c.validity();
        let end = v.not_after.to_datetime();
        let text = format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            end.year(),
            u8::from(end.month()),
            end.day(),
            end.hour(),
            end.minute(),
            end.second()
        );
        Some((v.not_before.timestamp(), v.not_after.timestamp(), text))
    }

    /// SHA-1 of the SubjectPublicKeyInfo: a CA's entry in CERTREQ (RFC 7296 3.7, as strongSwan sends it).
    pub fn keyid(&self) -> [u8; 20] {
        self.keyid
    }

    /// Whether the certificate is for `id` (strongSwan's `has_subject`): a DN equal to the subject, an FQDN,
    /// e-mail address or IP address among the subjectAltNames, or a key id equal to the SHA-1 of the public key.
    pub fn has_subject(&self, id: &Id) -> bool {
        let Some(c) = parse(&self.der) else {
            return false;
        };
        match id.id_type() {
            IdType::DER_ASN1_DN => dn_equal(id.data(), &self.subject),
            IdType::KEY_ID => id.data() == sha1_digest(&[self.public_key.raw()]),
            _ => {
                let Ok(Some(san)) = c.subject_alternative_name() else {
                    return false;
                };
                san.value.general_names.iter().any(|g| match g {
                    GeneralName::DNSName(n) => {
                        id.as_fqdn().is_some_and(|f| f.eq_ignore_ascii_case(n))
                    }
                    GeneralName::RFC822Name(n) => {
                        id.as_rfc822().is_some_and(|f| f.eq_ignore_ascii_case(n))
                    }
                    GeneralName::IPAddress(a) => match a.len() {
                        4 => id.as_ipv4().is_some_and(|x| x.octets()[..] == a[..]),
                        16 => id.as_ipv6().is_some_and(|x| x.octets()[..] == a[..]),
                        _ => false,
                    },
                    _ => false,
                })
            }
        }
    }
}

/// Why the peer's certificate was not accepted; each says what to check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertFailure {
    /// No CERT payload and no pinned certificate for the ID.
    NoCertificate,
    /// The chain does not lead to a configured CA (or a signature in it is wrong).
    NotSignedByCa,
    Expired,
    NotYetValid,
    /// The certificate is not the pinned one (`remote.certs`).
    NotPinned,
    /// The peer's ID is not the certificate's subject or one of its subjectAltNames.
    IdMismatch,
    /// The AUTH payload's signature does not verify with the certificate's key.
    SignatureInvalid,
    /// The AUTH method or signature algorithm is not one we take for the key.
    UnsupportedSignature(String),
    /// webpki refused the chain for another reason.
    Rejected(String),
    /// The endpoint was given no wall-clock time (`Endpoint::with_wall_clock`).
    NoClock,
}

impl fmt::Display for CertFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CertFailure::NoCertificate => f.write_str(
                "no certificate (the peer sent none and none is pinned in remote.certs)",
            ),
            CertFailure::NotSignedByCa => f.write_str("certificate not signed by a configured CA"),
            CertFailure::Expired => f.write_str("certificate expired"),
            CertFailure::NotYetValid => f.write_str("certificate not yet valid"),
            CertFailure::NotPinned => {
                f.write_str("certificate is not the pinned one (remote.certs)")
            }
            CertFailure::IdMismatch => f.write_str("ID does not match the certificate"),
            CertFailure::SignatureInvalid => f.write_str("signature invalid"),
            CertFailure::UnsupportedSignature(s) => write!(f, "unsupported signature: {s}"),
            CertFailure::Rejected(s) => write!(f, "certificate rejected: {s}"),
            CertFailure::NoClock => f.write_str("no wall-clock time to check certificates against"),
        }
    }
}

/// The EKUs an IKE peer certificate may carry (none, or one of these): id-kp-serverAuth, id-kp-clientAuth,
/// id-kp-ipsecIKE (RFC 4945 5.1.3.12) and anyExtendedKeyUsage.
pub struct IkeEku;

const EKU_OK: [&[u8]; 4] = [
    &[0x2b, 6, 1, 5, 5, 7, 3, 1],
    &[0x2b, 6, 1, 5, 5, 7, 3, 2],
    &[0x2b, 6, 1, 5, 5, 7, 3, 17],
    &[0x55, 0x1d, 0x25, 0x00],
];

impl webpki::ExtendedKeyUsageValidator for IkeEku {
    fn validate(&self, iter: webpki::KeyPurposeIdIter<'_, '_>) -> Result<(), webpki::Error> {
        let mut empty = true;
        for id in iter {
            empty = false;
            let id = id?;
            if EKU_OK.iter().any(|o| webpki::KeyPurposeId::new(o) == id) {
                return Ok(());
            }
        }
        if empty {
            Ok(())
        } else {
            // The context variant's fields are webpki's own to fill; the plain one says the same.
            #[allow(deprecated)]
            Err(webpki::Error::RequiredEkuNotFound)
        }
    }
}

static ALGS: &[&dyn pki_types::SignatureVerificationAlgorithm] = &[
    webpki::aws_lc_rs::ECDSA_P256_SHA256,
    webpki::aws_lc_rs::ECDSA_P256_SHA384,
    webpki::aws_lc_rs::ECDSA_P384_SHA256,
    webpki::aws_lc_rs::ECDSA_P384_SHA384,
    webpki::aws_lc_rs::ECDSA_P384_SHA512,
    webpki::aws_lc_rs::ECDSA_P521_SHA256,
    webpki::aws_lc_rs::ECDSA_P521_SHA384,
    webpki::aws_lc_rs::ECDSA_P521_SHA512,
    webpki::aws_lc_rs::ED25519,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA256,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA384,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA512,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA256_ABSENT_PARAMS,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA384_ABSENT_PARAMS,
    webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA512_ABSENT_PARAMS,
    webpki::aws_lc_rs::RSA_PSS_2048_8192_SHA256_LEGACY_KEY,
    webpki::aws_lc_rs::RSA_PSS_2048_8192_SHA384_LEGACY_KEY,
    webpki::aws_lc_rs::RSA_PSS_2048_8192_SHA512_LEGACY_KEY,
];

/// Whether `ee` is valid at `now`: chained through `intermediates` to one of `cas` (webpki), or, with `pinned`
/// certificates, one of them exactly (and within its validity period).
pub fn validate(
    ee: &Certificate,
    intermediates: &[Certificate],
    cas: &[Certificate],
    pinned: &[Certificate],
    now: SystemTime,
) -> Result<(), CertFailure> {
    let unix = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    if !pinned.is_empty() {
        if !pinned.contains(ee) {
            return Err(CertFailure::NotPinned);
        }
        let c = parse(&ee.der).ok_or(CertFailure::NotPinned)?;
        let t = unix.as_secs() as i64;
        let v = c.validity();
        if t > v.not_after.timestamp() {
            return Err(CertFailure::Expired);
        }
        if t < v.not_before.timestamp() {
            return Err(CertFailure::NotYetValid);
        }
        return Ok(());
    }
    let ca_ders: Vec<CertificateDer<'_>> =
        cas.iter().map(|c| CertificateDer::from(c.der())).collect();
    let anchors: Vec<_> = ca_ders
        .iter()
        .filter_map(|d| webpki::anchor_from_trusted_cert(d).ok())
        .collect();
    let inter: Vec<CertificateDer<'_>> = intermediates
        .iter()
        .map(|c| CertificateDer::from(c.der()))
        .collect();
    let ee_der = CertificateDer::from(ee.der());
    let cert = webpki::EndEntityCert::try_from(&ee_der)
        .map_err(|x| CertFailure::Rejected(format!("{x}")))?;
    cert.verify_for_usage(
        ALGS,
        &anchors,
        &inter,
        UnixTime::since_unix_epoch(unix),
        IkeEku,
        None,
        None,
    )
    .map(|_| ())
    .map_err(|x| match x {
        webpki::Error::CertExpired { .. } => CertFailure::Expired,
        webpki::Error::CertNotValidYet { .. } => CertFailure::NotYetValid,
        webpki::Error::UnknownIssuer
        | webpki::Error::InvalidSignatureForPublicKey
        | webpki::Error::CaUsedAsEndEntity => CertFailure::NotSignedByCa,
        other => CertFailure::Rejected(format!("{other}")),
    })
}

// ---- distinguished names ----

/// The attribute types swanctl's DN syntax names (strongSwan's x501rdns), with their OID.
const ATTRS: &[(&str, &[u64])] = &[
    ("CN", &[2, 5, 4, 3]),
    ("SN", &[2, 5, 4, 5]),
    ("serialNumber", &[2, 5, 4, 5]),
    ("C", &[2, 5, 4, 6]),
    ("L", &[2, 5, 4, 7]),
    ("ST", &[2, 5, 4, 8]),
    ("S", &[2, 5, 4, 8]),
    ("O", &[2, 5, 4, 10]),
    ("OU", &[2, 5, 4, 11]),
    ("T", &[2, 5, 4, 12]),
    ("E", &[1, 2, 840, 113549, 1, 9, 1]),
    ("Email", &[1, 2, 840, 113549, 1, 9, 1]),
    ("emailAddress", &[1, 2, 840, 113549, 1, 9, 1]),
    ("DC", &[0, 9, 2342, 19200300, 100, 1, 25]),
    ("UID", &[0, 9, 2342, 19200300, 100, 1, 1]),
];

/// A DN in swanctl's syntax (`C=CH, O=strongSwan, CN=moon`: `type=value` separated by `,` or `/`) as DER: one
/// attribute per RDN, in the order written; a value as PrintableString where its characters allow (as
/// strongSwan's `pki --dn` encodes it), else UTF8String (IA5String for e-mail addresses and domain components).
/// RFC 4514's escapes are read, so that what [`dn_string`] shows (in `status`, the logs) can be written back:
/// `\,` `\+` `\"` `\\` `\;` `\<` `\>` `\=` `\#` `\ ` (and `\/`, since `/` separates here) or two hex
/// digits (`\2F`: one byte of the value's UTF-8).
pub fn parse_dn(s: &str) -> Result<Vec<u8>, String> {
    let parts: Vec<&str> = split_unescaped(s)
        .into_iter()
        .map(str::trim_start)
        .filter(|p| !p.trim_end().is_empty())
        .collect();
    if parts.is_empty() {
        return Err("is an empty distinguished name".into());
    }
    let mut rdns = Vec::new();
    for p in parts {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("'{}' is not type=value", p.trim_end()))?;
        let k = k.trim();
        let v = dn_value(v).map_err(|e| format!("attribute {k}: {e}"))?;
        let v = v.as_str();
        let oid = ATTRS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(k))
            .map(|(_, o)| *o)
            .ok_or_else(|| {
                format!("unknown attribute type '{k}' (C, ST, L, O, OU, CN, SN, T, E, DC, UID)")
            })?;
        if v.is_empty() || v.len() > 256 {
            return Err(format!("attribute {k} has an empty or too long value"));
        }
        rdns.push((oid, v.to_string()));
    }
    let der = yasna::construct_der(|w| {
        w.write_sequence_of(|w| {
            for (oid, v) in &rdns {
                w.next().write_set_of(|w| {
                    w.next().write_sequence(|w| {
                        w.next()
                            .write_oid(&yasna::models::ObjectIdentifier::from_slice(oid));
                        let ia5 = oid.len() > 4;
                        if ia5 && v.is_ascii() {
                            w.next().write_ia5_string(v);
                        } else if v.bytes().all(printable) {
                            w.next().write_printable_string(v);
                        } else {
                            w.next().write_utf8_string(v);
                        }
                    })
                })
            }
        })
    });
    Ok(der)
}

/// `s` cut at each `,` or `/` that no backslash escapes.
fn split_unescaped(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let (mut parts, mut start, mut i) = (Vec::new(), 0, 0);
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b',' | b'/' => {
                parts.push(&s[start..i]);
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    parts.push(&s[start.min(s.len())..]);
    parts
}

/// A value as written (after `=`), its escapes read: leading spaces and trailing spaces that no backslash escapes
/// are not part of it.
fn dn_value(raw: &str) -> Result<String, String> {
    let raw = raw.trim_start();
    let b = raw.as_bytes();
    let mut end = b.len();
    while end > 0 && b[end - 1] == b' ' {
        let escapes = b[..end - 1]
            .iter()
            .rev()
            .take_while(|&&c| c == b'\\')
            .count();
        if escapes % 2 == 1 {
            break;
        }
        end -= 1;
    }
    let b = &b[..end];
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match (b.get(i + 1).copied(), b.get(i + 2).copied()) {
            (Some(x), Some(y)) if hex(x).is_some() && hex(y).is_some() => {
                out.push(hex(x).unwrap_or(0) << 4 | hex(y).unwrap_or(0));
                i += 3;
            }
            (Some(x), _) if b" \"#+,;<=>\\/".contains(&x) => {
                out.push(x);
                i += 2;
            }
            _ => {
                return Err(
                    "a backslash escapes one of ' \"#+,;<=>\\/' or stands before two hex digits"
                        .into(),
                )
            }
        }
    }
    String::from_utf8(out).map_err(|_| "its \\XX escapes are not UTF-8".into())
}

/// X.680's PrintableString characters.
fn printable(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b" '()+,-./:=?".contains(&b)
}

/// The attributes of a DN, each (OID as text, value as text); `None` if it does not parse or holds a value that
/// is not a string.
fn dn_attrs(der: &[u8]) -> Option<Vec<(String, String)>> {
    let (rest, name) = X509Name::from_der(der).ok()?;
    if !rest.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for rdn in name.iter() {
        for a in rdn.iter() {
            out.push((a.attr_type().to_id_string(), a.as_str().ok()?.to_string()));
        }
    }
    Some(out)
}

/// Whether two DER DNs are equal as strongSwan compares them: the same attribute types in the same order, the
/// values equal ignoring ASCII case and the string type (PrintableString or UTF8String).
pub fn dn_equal(a: &[u8], b: &[u8]) -> bool {
    if a == b {
        return true;
    }
    match (dn_attrs(a), dn_attrs(b)) {
        (Some(x), Some(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(&y)
                    .all(|((ta, va), (tb, vb))| ta == tb && va.eq_ignore_ascii_case(vb))
        }
        _ => false,
    }
}

/// A DER DN as text, for `status`, JSON and logs: `C=CH, O=strongSwan, CN=moon`.
///
/// Each attribute as RFC 4514 writes it: the type by the name swanctl's syntax gives it (`CN`, `O`, `E`, ...;
/// [`parse_dn`] reads them back), a string value with RFC 4514's escapes (`\` before `"` `+` `,` `;` `<` `>`
/// `\`, before a leading space or `#` and a trailing space; control characters, NUL included, as `\XX` per
/// UTF-8 byte, so that nothing a peer puts in a DN can forge a log line), the attributes of a multi-valued RDN
/// joined by `+`; an unknown type as its OID in dotted decimal and every value that is not a string (or an
/// unknown type's value) as `#` and the hex of its DER encoding. The RDNs in the order of the DER, separated by
/// `, ` (strongSwan's order and separator, the way swanctl.conf's `id` is written, where RFC 4514 would reverse
/// them). Bytes that are not a DN: `#` and their hex.
pub fn dn_string(der: &[u8]) -> String {
    let hex = |b: &[u8]| -> String { b.iter().map(|x| format!("{x:02x}")).collect() };
    let Ok(([], name)) = X509Name::from_der(der) else {
        return format!("#{}", hex(der));
    };
    let mut out = String::new();
    for (i, rdn) in name.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        for (j, a) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = a.attr_type();
            let known = oid.iter().and_then(|arcs| {
                let arcs: Vec<u64> = arcs.collect();
                ATTRS.iter().find(|(_, o)| *o == arcs).map(|(n, _)| *n)
            });
            out.push_str(&known.map_or_else(|| oid.to_id_string(), str::to_string));
            out.push('=');
            match known.and(dn_value_text(a.attr_value())) {
                Some(t) => escape_dn_value(&t, &mut out),
                None => {
                    use x509_parser::asn1_rs::ToDer;
                    out.push('#');
                    out.push_str(&hex(&a.attr_value().to_der_vec().unwrap_or_default()));
                }
            }
        }
    }
    out
}

/// The text of a DN attribute value of a string type (`None`: another type, or bytes that are not the type's).
fn dn_value_text(v: &x509_parser::asn1_rs::Any<'_>) -> Option<String> {
    use x509_parser::asn1_rs::{Class, Tag};
    if v.class() != Class::Universal || v.header.is_constructed() {
        return None;
    }
    let d = v.data;
    match v.tag() {
        Tag::Utf8String
        | Tag::PrintableString
        | Tag::Ia5String
        | Tag::NumericString
        | Tag::VisibleString => std::str::from_utf8(d).ok().map(str::to_string),
        Tag::BmpString if d.len().is_multiple_of(2) => {
            char::decode_utf16(d.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])))
                .collect::<Result<String, _>>()
                .ok()
        }
        Tag::UniversalString if d.len().is_multiple_of(4) => d
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        _ => None,
    }
}

/// `v` with RFC 4514's escapes (2.4), and control characters and whitespace other than a space (line and
/// paragraph separators) as `\XX` per UTF-8 byte.
fn escape_dn_value(v: &str, out: &mut String) {
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' ' | '#' if i == 0 => {
                out.push('\\');
                out.push(c);
            }
            ' ' if i == last => out.push_str("\\ "),
            c if c.is_control() || (c.is_whitespace() && c != ' ') => {
                let mut b = [0u8; 4];
                for x in c.encode_utf8(&mut b).bytes() {
                    out.push_str(&format!("\\{x:02X}"));
                }
            }
            c => out.push(c),
        }
    }
}

/// Whether a received ID is the configured identity, DNs compared as [`dn_equal`] does (`%any` matches all).
pub fn id_matches(conf: &Identity, got: &Id) -> bool {
    match (conf, got.as_der_dn()) {
        (Identity::Dn(want), Some(d)) => dn_equal(want, d),
        _ => crate::machine::glue::id_matches(conf, got),
    }
}

/// An ID for messages: DNs as text, others as the machine prints them.
pub fn id_text(id: &Id) -> String {
    match id.as_der_dn() {
        Some(d) => dn_string(d),
        None => crate::machine::glue::id_string(id),
    }
}

#[cfg(test)]
mod tests;
