#![no_main]

//! What a peer controls in certificate authentication, on arbitrary bytes: a CERT payload's certificate
//! (parsing, the ID checks, chain validation against a fixed CA), a signature AUTH payload's data (RFC 7427's
//! AlgorithmIdentifier prefix, for every key type), DN comparison; and the daemon-side loaders of key and
//! certificate files. None may panic; a certificate that parses has a public key and a subject.

use libfuzzer_sys::fuzz_target;
use netveil_crypto::sig::{KeyKind, PrivateKey};
use netveil_ike::cert::{dn_equal, dn_string, validate, Certificate};
use netveil_ike::keys::parse_signature_auth;
use netveil_ike::message::Id;
use std::time::{Duration, SystemTime};

fuzz_target!(|data: &[u8]| {
    let Some((&method, rest)) = data.split_first() else {
        return;
    };
    for k in [KeyKind::Rsa, KeyKind::EcdsaP256, KeyKind::EcdsaP384, KeyKind::EcdsaP521, KeyKind::Ed25519] {
        if let Ok((_, sig)) = parse_signature_auth(method, rest, k) {
            assert!(sig.len() <= rest.len());
        }
    }
    let _ = dn_equal(rest, rest);
    let _ = dn_string(rest);
    let _ = PrivateKey::from_pem_or_der(data);
    let _ = Certificate::load(data);
    if let Ok(c) = Certificate::from_der(data) {
        assert!(!c.public_key().raw().is_empty());
        let _ = c.subject();
        for id in [Id::fqdn("a.example"), Id::der_dn(c.subject_der().to_vec()), Id::key_id(vec![0; 20])] {
            let _ = c.has_subject(&id);
        }
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_811_808_000);
        let _ = validate(&c, &[], std::slice::from_ref(&c), &[], at);
        let _ = validate(&c, &[], &[], std::slice::from_ref(&c), at);
    }
});
