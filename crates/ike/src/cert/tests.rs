//! Certificates made by strongSwan's pki (testdata/certs) as the oracle: DN encoding, key ids, chains, validity.

use super::*;
use crate::message::Id;

fn td(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/testdata/certs/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn cert(name: &str) -> Certificate {
    Certificate::from_der(&td(&format!("{name}.der"))).unwrap()
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

const JUNE_2027: u64 = 1_811_808_000;

/// Our DER for swanctl's DN syntax is byte for byte what `pki --dn` put in the certificate.
#[test]
fn parse_dn_encodes_as_pki_does() {
    let moon = cert("moon");
    assert_eq!(
        parse_dn("C=CH, O=netveil test, CN=moon.netveil.test").unwrap(),
        moon.subject_der()
    );
    assert_eq!(moon.subject(), "C=CH, O=netveil test, CN=moon.netveil.test");
    assert_eq!(dn_string(moon.subject_der()), moon.subject());
    // Other separators, case and spacing: another encoding of the same name, equal as strongSwan compares.
    let loose = parse_dn("c=CH /o=Netveil Test/ CN=MOON.netveil.test").unwrap();
    assert!(dn_equal(&loose, moon.subject_der()));
    assert!(!dn_equal(
        &parse_dn("C=CH, O=netveil test, CN=sun.netveil.test").unwrap(),
        moon.subject_der()
    ));
    assert!(!dn_equal(
        &parse_dn("C=CH, O=netveil test").unwrap(),
        moon.subject_der()
    ));
    // A non-printable character goes as UTF8String; e-mail as IA5String.
    let u = parse_dn("CN=Zürich, E=a@b.example").unwrap();
    assert_eq!(dn_string(&u), "CN=Zürich, E=a@b.example");
    for bad in ["", "CN", "XX=1", "CN="] {
        assert!(parse_dn(bad).is_err(), "{bad:?}");
    }
}

/// The CERTREQ key id is `pki --keyid`'s "SHA-1 of subjectPublicKeyInfo".
#[test]
fn keyid_is_pkis() {
    assert_eq!(
        hex::encode(cert("ca").keyid()),
        "519f0df734af27cf9c1a0a8a41fc3f9f41b413f9"
    );
}

#[test]
fn load_pem_and_der_and_refuse_garbage() {
    assert_eq!(
        Certificate::load(&td("sun.pem")).unwrap(),
        vec![cert("sun")]
    );
    assert_eq!(
        Certificate::load(&td("sun.der")).unwrap(),
        vec![cert("sun")]
    );
    let mut two = td("sun.pem");
    two.extend(td("ca.pem"));
    assert_eq!(
        Certificate::load(&two).unwrap(),
        vec![cert("sun"), cert("ca")]
    );
    assert_eq!(
        Certificate::load(b"garbage"),
        Err(CertLoadError::NotACertificate)
    );
    assert_eq!(
        Certificate::load(&td("moon.key")),
        Err(CertLoadError::NotACertificate)
    );
    assert_eq!(
        Certificate::load(b"-----BEGIN X-----\nAAAA\n-----END X-----\n"),
        Err(CertLoadError::Empty)
    );
    assert!(format!("{:?}", cert("moon")).contains("CN=moon.netveil.test"));
}

#[test]
fn has_subject_follows_strongswans_rules() {
    let moon = cert("moon");
    assert!(moon.has_subject(&Id::fqdn("moon.netveil.test")));
    assert!(moon.has_subject(&Id::fqdn("MOON.netveil.test")));
    assert!(moon.has_subject(&Id::der_dn(
        parse_dn("C=CH, O=netveil test, CN=moon.netveil.test").unwrap()
    )));
    assert!(!moon.has_subject(&Id::fqdn("sun.netveil.test")));
    assert!(!moon.has_subject(&Id::rfc822("moon.netveil.test")));
    assert!(!moon.has_subject(&Id::ipv4("192.0.2.1".parse().unwrap())));
    // A key id: the SHA-1 of the public key.
    let kid = netveil_crypto::mac::sha1_digest(&[moon.public_key().raw()]).to_vec();
    assert!(moon.has_subject(&Id::key_id(kid)));
}

#[test]
fn chains_and_validity() {
    let (ca, other) = (cert("ca"), cert("other_ca"));
    let t = at(JUNE_2027);
    for ee in ["moon", "sun", "mars", "venus"] {
        assert_eq!(
            validate(&cert(ee), &[], std::slice::from_ref(&ca), &[], t),
            Ok(()),
            "{ee}"
        );
        assert_eq!(
            validate(&cert(ee), &[], std::slice::from_ref(&other), &[], t),
            Err(CertFailure::NotSignedByCa),
            "{ee}"
        );
    }
    assert_eq!(
        validate(&cert("rogue"), &[], std::slice::from_ref(&ca), &[], t),
        Err(CertFailure::NotSignedByCa)
    );
    assert_eq!(
        validate(&cert("rogue"), &[], &[other, ca.clone()], &[], t),
        Ok(())
    );
    assert_eq!(
        validate(&cert("expired"), &[], std::slice::from_ref(&ca), &[], t),
        Err(CertFailure::Expired)
    );
    assert_eq!(
        validate(
            &cert("moon"),
            &[],
            std::slice::from_ref(&ca),
            &[],
            at(1_748_736_000)
        ),
        Err(CertFailure::NotYetValid)
    );
    // Through an intermediate (sent by the peer): only with it.
    let inter = cert("inter");
    assert_eq!(
        validate(
            &cert("deimos"),
            std::slice::from_ref(&inter),
            std::slice::from_ref(&ca),
            &[],
            t
        ),
        Ok(())
    );
    assert_eq!(
        validate(&cert("deimos"), &[], std::slice::from_ref(&ca), &[], t),
        Err(CertFailure::NotSignedByCa)
    );
    // A CA certificate is no end entity.
    assert_eq!(
        validate(&ca, &[], std::slice::from_ref(&ca), &[], t),
        Err(CertFailure::NotSignedByCa)
    );
    // Pinned: exact match, validity still checked.
    assert_eq!(
        validate(&cert("moon"), &[], &[], &[cert("moon")], t),
        Ok(())
    );
    assert_eq!(
        validate(&cert("rogue"), &[], &[], &[cert("moon")], t),
        Err(CertFailure::NotPinned)
    );
    assert_eq!(
        validate(&cert("expired"), &[], &[], &[cert("expired")], t),
        Err(CertFailure::Expired)
    );
}

/// Hostile input: every single-byte change and every truncation of a real certificate, and of a signature AUTH
/// payload, parses or is refused without a panic (the fuzz target ike_cert does the same on arbitrary bytes).
#[test]
fn mutated_certificates_and_auth_data_never_panic() {
    use netveil_crypto::sig::KeyKind;
    let der = td("moon.der");
    let ca = cert("ca");
    let t = at(JUNE_2027);
    let mut accepted = 0;
    for i in 0..der.len() {
        for m in [der[i] ^ 0x01, der[i] ^ 0x80, 0x00, 0xff] {
            if m == der[i] {
                continue;
            }
            let mut d = der.clone();
            d[i] = m;
            if let Ok(c) = Certificate::from_der(&d) {
                let _ = c.has_subject(&Id::fqdn("moon.netveil.test"));
                if validate(&c, &[], std::slice::from_ref(&ca), &[], t).is_ok() {
                    accepted += 1;
                }
            }
        }
        let _ = Certificate::from_der(&der[..i]);
        let _ = dn_equal(&der[..i], cert("moon").subject_der());
    }
    // Every changed byte is refused: inside what the CA signed by the signature, elsewhere by DER's strictness.
    assert_eq!(accepted, 0);
    let auth = crate::keys::digital_signature_auth(
        netveil_crypto::sig::Scheme::Ecdsa(netveil_crypto::sig::SigHash::Sha256),
        &[7; 70],
    )
    .unwrap();
    for i in 0..auth.len() {
        for k in [KeyKind::Rsa, KeyKind::EcdsaP256, KeyKind::Ed25519] {
            let _ = crate::keys::parse_signature_auth(14, &auth[..i], k);
            let mut a = auth.clone();
            a[i] ^= 0xff;
            let _ = crate::keys::parse_signature_auth(14, &a, k);
        }
    }
}
