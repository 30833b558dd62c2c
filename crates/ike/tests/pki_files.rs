//! The files strongSwan's `pki` 5.9.8 writes (testdata/pki, made by its make.sh: keys as PKCS#1, SEC1, PKCS#8, PEM
//! and DER; certificates PEM and DER) load into what IKE authentication uses, and each key belongs to its
//! certificate: its public key is the certificate's, and what it signs verifies under the certificate's key. The
//! same files `netveil keygen`'s tests use, so both sides of "strongSwan `pki` output is accepted" are covered.

use netveil_crypto::sig::{PrivateKey, Scheme, SigHash};
use netveil_ike::cert::{validate, Certificate};
use std::time::SystemTime;

fn file(name: &str) -> Vec<u8> {
    let p = format!("{}/../../testdata/pki/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn cert(name: &str) -> Certificate {
    let mut v = Certificate::load(&file(name)).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    assert_eq!(v.len(), 1, "{name}");
    v.remove(0)
}

#[test]
fn every_key_form_pki_writes_belongs_to_its_certificate() {
    let pairs: &[(&str, &str, Scheme)] = &[
        ("ecdsa-p256.key", "moon.crt", Scheme::Ecdsa(SigHash::Sha256)), // SEC1 PEM
        ("ecdsa-p256.p8", "moon.crt", Scheme::Ecdsa(SigHash::Sha256)),  // PKCS#8 PEM
        (
            "rsa-2048.key",
            "venus.crt",
            Scheme::RsaPkcs1(SigHash::Sha256),
        ), // PKCS#1 PEM
        (
            "rsa-2048.der",
            "ca-rsa.crt",
            Scheme::RsaPss(SigHash::Sha384),
        ), // PKCS#1 DER (another key)
        (
            "rsa-2048.p8",
            "venus.crt",
            Scheme::RsaPkcs1(SigHash::Sha512),
        ), // PKCS#8 of rsa-2048.key
        ("ed25519.key", "sun.crt.der", Scheme::Ed25519), // PKCS#8 PEM, DER certificate
        (
            "ca-ecdsa-p384.key",
            "ca.crt",
            Scheme::Ecdsa(SigHash::Sha384),
        ),
    ];
    for (key, crt, scheme) in pairs {
        let k = PrivateKey::from_pem_or_der(&file(key)).unwrap_or_else(|e| panic!("{key}: {e:?}"));
        let c = cert(crt);
        assert_eq!(&k.public_key(), c.public_key(), "{key} is {crt}'s key");
        let msg = b"InitiatorSignedOctets";
        let sig = k.sign(*scheme, msg).unwrap();
        c.public_key().verify(*scheme, msg, &sig).unwrap();
        assert!(
            c.public_key()
                .verify(*scheme, b"something else", &sig)
                .is_err(),
            "{key}: another message must not verify"
        );
    }
    // Not its certificate: refused by the comparison.
    let k = PrivateKey::from_pem_or_der(&file("ecdsa-p384.der")).unwrap();
    assert_ne!(&k.public_key(), cert("ca.crt").public_key());
}

#[test]
fn pki_issued_certificates_chain_to_pki_cas() {
    let now = SystemTime::now();
    for (ee, ca) in [
        ("moon.crt", "ca.crt"),
        ("venus.crt", "ca.crt"),
        ("sun.crt.der", "ca-rsa.crt"),
    ] {
        validate(&cert(ee), &[], &[cert(ca)], &[], now).unwrap_or_else(|e| panic!("{ee}: {e}"));
    }
    // The wrong CA is refused.
    assert!(validate(&cert("moon.crt"), &[], &[cert("ca-rsa.crt")], &[], now).is_err());
    assert!(validate(&cert("sun.crt.der"), &[], &[cert("ca.crt")], &[], now).is_err());
    assert_eq!(
        cert("moon.crt").subject(),
        "C=CH, O=netveil Zürich, OU=lab, CN=moon.example.org, E=moon@example.org"
    );
}
