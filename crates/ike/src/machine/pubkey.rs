//! IKE_AUTH with certificates (RFC 7296 2.15 and 3.6-3.8, RFC 7427): our AUTH payload (a PSK MIC, or a signature
//! with the CERT payloads of our chain), the CERTREQ we send (SHA-1 of our CAs' SubjectPublicKeyInfo, as
//! strongSwan), and the check of the peer's AUTH (ID against the certificate, the chain or the pinned
//! certificate, then the signature).
//!
//! Which signature we make: with an RSA key, RFC 7427's Digital Signature with PKCS#1 v1.5 and the first of
//! SHA-256, SHA-384, SHA-512 the peer announced in SIGNATURE_HASH_ALGORITHMS (SHA-256 if it announced none: we
//! never sign with SHA-1); with ECDSA, the Digital Signature with the curve's hash if the peer announced it, else
//! the classic method 9 or 10 (RFC 4754); with Ed25519 the Digital Signature (RFC 8420).

use std::net::SocketAddr;
use std::time::{Instant, SystemTime};

use netveil_crypto::sig::{KeyKind, Scheme, SigHash};

use super::framing::Opened;
use super::Endpoint;
use crate::cert::{self, CertFailure, Certificate};
use crate::config::{AuthMethod, AuthRound, Connection, Identity, PubKeyCreds};
use crate::event::Failure;
use crate::keys::{self, psk_auth, verify_psk_auth};
use crate::message::notify::hash_algorithm;
use crate::message::payloads::{auth_method, cert_encoding};
use crate::message::{Auth, Cert, CertReq, Id, Message, NotifyType, Payload};
use crate::proposal::Prf;

/// Our ID: the configured one (a DN as our certificate's subject encodes it, when they are the same name), or
/// our address for `%any`.
pub(super) fn local_id(round: &AuthRound, addr: SocketAddr) -> Id {
    if let (Identity::Dn(want), AuthMethod::PubKey(c)) = (&round.id, &round.method) {
        if let Some(ee) = c
            .certs
            .first()
            .filter(|ee| cert::dn_equal(want, ee.subject_der()))
        {
            return Id::der_dn(ee.subject_der().to_vec());
        }
    }
    super::glue::id_payload(&round.id).unwrap_or_else(|| match addr.ip() {
        std::net::IpAddr::V4(a) => Id::ipv4(a),
        std::net::IpAddr::V6(a) => Id::ipv6(a),
    })
}

/// The hash algorithms of the peer's SIGNATURE_HASH_ALGORITHMS in its IKE_SA_INIT message (`None`: it sent none).
fn peer_hashes(peer_init: &[u8]) -> Option<Vec<u16>> {
    let msg = Message::parse(peer_init).ok()?;
    let n = msg
        .notifies()
        .find(|n| n.notify_type == NotifyType::SIGNATURE_HASH_ALGORITHMS)?;
    n.signature_hash_algorithms()
}

/// The AUTH method and scheme we sign with (see the module's doc).
fn choose(kind: KeyKind, peer: Option<&[u16]>) -> (u8, Scheme) {
    let has = |h: u16| peer.is_some_and(|p| p.contains(&h));
    match kind {
        KeyKind::Rsa => {
            let h = [
                (hash_algorithm::SHA2_256, SigHash::Sha256),
                (hash_algorithm::SHA2_384, SigHash::Sha384),
                (hash_algorithm::SHA2_512, SigHash::Sha512),
            ]
            .into_iter()
            .find(|(id, _)| has(*id))
            .map_or(SigHash::Sha256, |(_, h)| h);
            (auth_method::DIGITAL_SIGNATURE, Scheme::RsaPkcs1(h))
        }
        KeyKind::EcdsaP256 if has(hash_algorithm::SHA2_256) => (
            auth_method::DIGITAL_SIGNATURE,
            Scheme::Ecdsa(SigHash::Sha256),
        ),
        KeyKind::EcdsaP256 => (
            auth_method::ECDSA_SHA256_P256,
            Scheme::EcdsaFixed(SigHash::Sha256),
        ),
        KeyKind::EcdsaP384 if has(hash_algorithm::SHA2_384) => (
            auth_method::DIGITAL_SIGNATURE,
            Scheme::Ecdsa(SigHash::Sha384),
        ),
        KeyKind::EcdsaP384 | KeyKind::EcdsaP521 => (
            auth_method::ECDSA_SHA384_P384,
            Scheme::EcdsaFixed(SigHash::Sha384),
        ),
        KeyKind::Ed25519 => (auth_method::DIGITAL_SIGNATURE, Scheme::Ed25519),
    }
}

/// Our AUTH payload over `signed`, and the payloads that go before it (CERT payloads of our chain). `peer_init`:
/// the peer's IKE_SA_INIT message (for its SIGNATURE_HASH_ALGORITHMS). `None`: no credentials to do it with.
pub(super) fn local_auth(
    conn: &Connection,
    prf: Prf,
    signed: &[u8],
    peer_init: &[u8],
) -> Option<(Auth, Vec<Payload>)> {
    match &conn.local.method {
        AuthMethod::Psk => {
            let psk = conn.psk.as_ref()?;
            let auth = Auth {
                method: auth_method::SHARED_KEY_MIC,
                data: psk_auth(prf, psk.expose(), signed),
            };
            Some((auth, Vec::new()))
        }
        AuthMethod::PubKey(c) => {
            let key = c.key.as_ref()?;
            let (method, scheme) = choose(key.kind(), peer_hashes(peer_init).as_deref());
            let sig = key.sign(scheme, signed).ok()?;
            let data = if method == auth_method::DIGITAL_SIGNATURE {
                keys::digital_signature_auth(scheme, &sig)?
            } else {
                sig
            };
            let certs = c
                .certs
                .iter()
                .map(|x| {
                    Payload::Cert(Cert {
                        encoding: cert_encoding::X509_SIGNATURE,
                        data: x.der().to_vec(),
                    })
                })
                .collect();
            Some((Auth { method, data }, certs))
        }
    }
}

/// The CA certificates of the remote sides of `conns` (each once).
fn our_cas(conns: &[Connection]) -> Vec<&Certificate> {
    let mut out: Vec<&Certificate> = Vec::new();
    for c in conns {
        if let AuthMethod::PubKey(p) = &c.remote.method {
            for ca in &p.cacerts {
                if !out.contains(&ca) {
                    out.push(ca);
                }
            }
        }
    }
    out
}

/// A CERTREQ for X.509 with the SHA-1 of each CA's SubjectPublicKeyInfo of `conns`' remote sides (`None`: no
/// CA is configured).
pub(super) fn certreq(conns: &[Connection]) -> Option<Payload> {
    let cas = our_cas(conns);
    (!cas.is_empty()).then(|| {
        Payload::CertReq(CertReq {
            encoding: cert_encoding::X509_SIGNATURE,
            data: cas.iter().flat_map(|c| c.keyid()).collect(),
        })
    })
}

/// The peer's certificates from CERT payloads (X.509 signature encoding), in order (its own first); the others,
/// and those that do not parse, are dropped; the count of dropped ones is returned with them.
fn peer_certs(o: &Opened) -> (Vec<Certificate>, u64) {
    let mut out = Vec::new();
    let mut dropped = 0;
    for p in &o.payloads {
        if let Payload::Cert(c) = p {
            match (c.encoding == cert_encoding::X509_SIGNATURE)
                .then(|| Certificate::from_der(&c.data).ok())
                .flatten()
            {
                Some(x) => out.push(x),
                None => dropped += 1,
            }
        }
    }
    (out, dropped)
}

/// Whether the peer's CERTREQ payloads name a CA by a well-formed list of SHA-1 hashes; malformed ones (not a
/// multiple of 20 bytes) are counted as dropped.
fn certreqs_dropped(o: &Opened) -> u64 {
    o.payloads
        .iter()
        .filter(|p| {
            matches!(p, Payload::CertReq(r) if r.encoding == cert_encoding::X509_SIGNATURE
                && !r.data.len().is_multiple_of(20))
        })
        .count() as u64
}

/// The peer's signature AUTH checked: the certificate (sent, or pinned) is for `id`, is valid at `wall` (its
/// chain leads to a configured CA, or it is a pinned one), and its key verifies the signature over `signed`.
fn verify(
    creds: &PubKeyCreds,
    id: &Id,
    certs: &[Certificate],
    auth: &Auth,
    signed: &[u8],
    wall: Option<SystemTime>,
) -> Result<(), CertFailure> {
    let ee = match certs.first() {
        Some(c) => c,
        None => creds
            .certs
            .iter()
            .find(|c| c.has_subject(id))
            .ok_or(CertFailure::NoCertificate)?,
    };
    if !ee.has_subject(id) {
        return Err(CertFailure::IdMismatch);
    }
    let wall = wall.ok_or(CertFailure::NoClock)?;
    let inter = certs.get(1..).unwrap_or(&[]);
    cert::validate(ee, inter, &creds.cacerts, &creds.certs, wall)?;
    let key = ee.public_key();
    let (scheme, sig) = keys::parse_signature_auth(auth.method, &auth.data, key.kind())
        .map_err(CertFailure::UnsupportedSignature)?;
    if !key.supports(scheme) {
        return Err(CertFailure::UnsupportedSignature(format!(
            "{scheme:?} with an {} key",
            key.kind()
        )));
    }
    key.verify(scheme, signed, sig)
        .map_err(|_| CertFailure::SignatureInvalid)
}

impl Endpoint {
    /// The wall-clock time at `now`, if the driver gave one ([`Endpoint::with_wall_clock`]).
    fn wall_now(&self, now: Instant) -> Option<SystemTime> {
        let (at, wall) = self.wall?;
        Some(match now.checked_duration_since(at) {
            Some(d) => wall + d,
            None => wall - at.duration_since(now),
        })
    }

    /// Checks the peer's AUTH payload for connection `ci` (its remote side's method): `id` is the peer's ID
    /// payload (already matched against the configured remote ID), `signed` the octets it signed or MACed.
    pub(super) fn check_peer_auth(
        &mut self,
        ci: usize,
        id: &Id,
        auth: &Auth,
        o: &Opened,
        signed: &[u8],
        prf: Prf,
        now: Instant,
    ) -> Result<(), Failure> {
        let wall = self.wall_now(now);
        let (certs, dropped) = peer_certs(o);
        self.counters.certs_dropped += dropped + certreqs_dropped(o);
        let conn = &self.connections[ci];
        match &conn.remote.method {
            AuthMethod::Psk => {
                let ok = auth.method == auth_method::SHARED_KEY_MIC
                    && conn.psk.as_ref().is_some_and(|p| {
                        verify_psk_auth(prf, p.expose(), signed, &auth.data).is_ok()
                    });
                ok.then_some(())
                    .ok_or_else(|| Failure::AuthenticationFailed {
                        id: super::glue::id_string(id),
                        by_peer: false,
                    })
            }
            AuthMethod::PubKey(c) => {
                verify(c, id, &certs, auth, signed, wall).map_err(|reason| {
                    Failure::Certificate {
                        id: crate::id::id_text(id),
                        reason,
                    }
                })?;
                if auth.method == auth_method::RSA_SIG {
                    self.counters.legacy_auth += 1;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ExchangeType, Header};
    use std::sync::Arc;

    fn td(name: &str) -> Vec<u8> {
        std::fs::read(format!(
            "{}/testdata/certs/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    fn opened(payloads: Vec<Payload>) -> Opened {
        Opened {
            header: Header {
                initiator_spi: 1,
                responder_spi: 2,
                exchange_type: ExchangeType::IKE_AUTH,
                flags: Default::default(),
                message_id: 1,
            },
            payloads,
            idi_body: None,
            idr_body: None,
            plain: None,
        }
    }

    fn cert_payload(encoding: u8, data: Vec<u8>) -> Payload {
        Payload::Cert(Cert { encoding, data })
    }

    /// CERT payloads that do not parse (or are not X.509) are dropped and counted; the peer's real certificate
    /// after them still authenticates it.
    #[test]
    fn garbage_cert_payloads_are_dropped_and_counted() {
        let moon = td("moon.der");
        let mut truncated = moon.clone();
        truncated.truncate(moon.len() - 1);
        let o = opened(vec![
            cert_payload(
                cert_encoding::X509_SIGNATURE,
                b"\x30\x82\xff\xffgarbage".to_vec(),
            ),
            cert_payload(cert_encoding::X509_SIGNATURE, truncated),
            cert_payload(cert_encoding::HASH_URL_X509, b"http://x/".to_vec()),
            cert_payload(cert_encoding::X509_SIGNATURE, moon.clone()),
            Payload::CertReq(CertReq {
                encoding: cert_encoding::X509_SIGNATURE,
                data: vec![0; 19],
            }),
        ]);
        let (certs, dropped) = peer_certs(&o);
        assert_eq!(dropped, 3);
        assert_eq!(certs, vec![Certificate::from_der(&moon).unwrap()]);
        assert_eq!(certreqs_dropped(&o), 1);

        let key = netveil_crypto::sig::PrivateKey::from_pem_or_der(&td("moon.key")).unwrap();
        let signed = b"the initiator's signed octets";
        let sig = key.sign(Scheme::Ecdsa(SigHash::Sha256), signed).unwrap();
        let auth = Auth {
            method: auth_method::DIGITAL_SIGNATURE,
            data: keys::digital_signature_auth(Scheme::Ecdsa(SigHash::Sha256), &sig).unwrap(),
        };
        let creds = PubKeyCreds {
            cacerts: vec![Certificate::from_der(&td("ca.der")).unwrap()],
            ..Default::default()
        };
        let id = Id::fqdn("moon.netveil.test");
        let wall = Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_811_808_000));
        assert_eq!(verify(&creds, &id, &certs, &auth, signed, wall), Ok(()));
        // Only garbage: no certificate at all.
        let (none, _) = peer_certs(&opened(vec![cert_payload(4, vec![1, 2, 3])]));
        assert_eq!(
            verify(&creds, &id, &none, &auth, signed, wall),
            Err(CertFailure::NoCertificate)
        );
        // The classic method 9 (r || s) verifies too; the wrong curve's method does not.
        let fixed = key
            .sign(Scheme::EcdsaFixed(SigHash::Sha256), signed)
            .unwrap();
        let m9 = Auth {
            method: auth_method::ECDSA_SHA256_P256,
            data: fixed.clone(),
        };
        assert_eq!(verify(&creds, &id, &certs, &m9, signed, wall), Ok(()));
        let m10 = Auth {
            method: auth_method::ECDSA_SHA384_P384,
            data: fixed,
        };
        assert!(matches!(
            verify(&creds, &id, &certs, &m10, signed, wall),
            Err(CertFailure::UnsupportedSignature(_))
        ));
        let _ = Arc::new(key);
    }

    /// AUTH method 1 (RSA PKCS#1 v1.5 over SHA-1, RFC 7296's legacy method): verified, with a signature OpenSSL
    /// made (`openssl dgst -sha1 -sign sun.key`); a changed bit fails.
    #[test]
    fn legacy_rsa_sha1_from_openssl_verifies() {
        let sun = Certificate::from_der(&td("sun.der")).unwrap();
        let creds = PubKeyCreds {
            cacerts: vec![Certificate::from_der(&td("ca.der")).unwrap()],
            ..Default::default()
        };
        let msg = td("legacy.msg");
        let mut auth = Auth {
            method: auth_method::RSA_SIG,
            data: td("sun_sha1.sig"),
        };
        let id = Id::fqdn("sun.netveil.test");
        let wall = Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_811_808_000));
        let certs = [sun];
        assert_eq!(verify(&creds, &id, &certs, &auth, &msg, wall), Ok(()));
        auth.data[100] ^= 4;
        assert_eq!(
            verify(&creds, &id, &certs, &auth, &msg, wall),
            Err(CertFailure::SignatureInvalid)
        );
    }

    /// What we sign with: the peer's announced hashes decide between RFC 7427 and the classic methods.
    #[test]
    fn scheme_follows_the_peers_signature_hash_algorithms() {
        use hash_algorithm::*;
        assert_eq!(
            choose(KeyKind::Rsa, Some(&[SHA2_512, SHA2_384])),
            (
                auth_method::DIGITAL_SIGNATURE,
                Scheme::RsaPkcs1(SigHash::Sha384)
            )
        );
        assert_eq!(
            choose(KeyKind::Rsa, None),
            (
                auth_method::DIGITAL_SIGNATURE,
                Scheme::RsaPkcs1(SigHash::Sha256)
            )
        );
        assert_eq!(
            choose(KeyKind::EcdsaP256, Some(&[SHA2_256])),
            (
                auth_method::DIGITAL_SIGNATURE,
                Scheme::Ecdsa(SigHash::Sha256)
            )
        );
        assert_eq!(
            choose(KeyKind::EcdsaP256, None),
            (
                auth_method::ECDSA_SHA256_P256,
                Scheme::EcdsaFixed(SigHash::Sha256)
            )
        );
        assert_eq!(
            choose(KeyKind::EcdsaP384, Some(&[SHA2_256])),
            (
                auth_method::ECDSA_SHA384_P384,
                Scheme::EcdsaFixed(SigHash::Sha384)
            )
        );
        assert_eq!(
            choose(KeyKind::Ed25519, Some(&[IDENTITY])),
            (auth_method::DIGITAL_SIGNATURE, Scheme::Ed25519)
        );
    }

    /// strongSwan's CERTREQ entry for a CA is the SHA-1 of its SubjectPublicKeyInfo (`pki --keyid` prints it as
    /// "keyid (SHA-1 of subjectPublicKeyInfo)": 519f0df7... for testdata's CA).
    #[test]
    fn certreq_carries_the_cas_spki_sha1() {
        let mut c = crate::machine::tests::conn("a", "10.0.0.1:500", "10.0.0.2:500");
        c.remote.method = AuthMethod::PubKey(PubKeyCreds {
            cacerts: vec![Certificate::from_der(&td("ca.der")).unwrap()],
            ..Default::default()
        });
        let Some(Payload::CertReq(r)) = certreq(std::slice::from_ref(&c)) else {
            panic!("no CERTREQ")
        };
        assert_eq!(r.encoding, cert_encoding::X509_SIGNATURE);
        assert_eq!(
            hex::encode(&r.data),
            "519f0df734af27cf9c1a0a8a41fc3f9f41b413f9"
        );
        c.remote.method = AuthMethod::Psk;
        assert!(certreq(&[c]).is_none());
    }
}
