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
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::message::{Id, IdType};

pub use crate::dn::{dn_equal, dn_string, parse_dn};

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

#[cfg(test)]
mod tests;
