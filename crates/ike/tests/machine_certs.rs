//! IKE_AUTH with certificates between two endpoints (testdata/certs: made with strongSwan's pki, test use only;
//! checked at 2027-06-01): ECDSA P-256/P-384, RSA and Ed25519 in both roles, a chain to the CA or a pinned
//! certificate, DN identities; and each failure the user must be able to act on, reported by the side that
//! checks: wrong CA, expired, ID not in the certificate, a signature that does not verify, no certificate.

mod machine_common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use machine_common::*;
use netveil_crypto::rand::SeededRng; // check-rng: allow (tests)
use netveil_crypto::sig::PrivateKey;
use netveil_ike::cert::{parse_dn, CertFailure, Certificate};
use netveil_ike::config::{AuthMethod, AuthRound, Identity, PubKeyCreds};
use netveil_ike::event::Failure;
use netveil_ike::machine::Endpoint;

fn td(name: &str) -> Vec<u8> {
    let p = format!("{}/testdata/certs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn cert(name: &str) -> Certificate {
    Certificate::from_der(&td(&format!("{name}.der"))).unwrap()
}

fn key(name: &str) -> Arc<PrivateKey> {
    Arc::new(PrivateKey::from_pem_or_der(&td(&format!("{name}.key"))).unwrap())
}

fn fqdn(name: &str) -> Identity {
    Identity::Fqdn(format!("{name}.netveil.test"))
}

/// Our side: certificate `cert`, key `key`, ID `id`.
fn local(id: Identity, cert_name: &str, key_name: &str) -> AuthRound {
    AuthRound {
        id,
        method: AuthMethod::PubKey(PubKeyCreds {
            certs: vec![cert(cert_name)],
            cacerts: vec![],
            key: Some(key(key_name)),
        }),
    }
}

fn trusting(id: Identity, cas: &[&str], pinned: &[&str]) -> AuthRound {
    AuthRound {
        id,
        method: AuthMethod::PubKey(PubKeyCreds {
            certs: pinned.iter().map(|c| cert(c)).collect(),
            cacerts: cas.iter().map(|c| cert(c)).collect(),
            key: None,
        }),
    }
}

const WALL: u64 = 1_811_808_000; // 2027-06-01

fn sim_at(a: (AuthRound, AuthRound), b: (AuthRound, AuthRound), wall: u64) -> Sim {
    sim_ike("aes256gcm16-prfsha256-x25519", a, b, wall)
}

/// [`sim_at`] with IKE proposal `ike`.
fn sim_ike(ike: &str, a: (AuthRound, AuthRound), b: (AuthRound, AuthRound), wall: u64) -> Sim {
    let (mut ca, mut cb) = pair(&[ike], &["aes128gcm16"]);
    (ca.local, ca.remote, ca.psk) = (a.0, a.1, None);
    (cb.local, cb.remote, cb.psk) = (b.0, b.1, None);
    let mut sim = Sim::new(ca, cb, 11);
    for e in &mut sim.ep {
        let blank = Endpoint::new(vec![], Box::new(SeededRng::new(0)), sim.now); // check-rng: allow (tests)
        let old = std::mem::replace(e, blank);
        *e = old.with_wall_clock(sim.now, SystemTime::UNIX_EPOCH + Duration::from_secs(wall));
    }
    sim
}

fn sim(a: (AuthRound, AuthRound), b: (AuthRound, AuthRound)) -> Sim {
    sim_at(a, b, WALL)
}

fn run(mut s: Sim) -> Sim {
    s.initiate();
    s.settle();
    s
}

fn assert_up(s: &Sim) {
    assert_eq!(
        (s.ike_up(0), s.ike_up(1)),
        (1, 1),
        "{:?} {:?}",
        s.failures(0),
        s.failures(1)
    );
    let (a, b) = (s.children_up(0), s.children_up(1));
    assert_eq!((a.len(), b.len()), (1, 1));
    assert_crosswise(a[0], b[0]);
}

fn cert_failure(id: &str, reason: CertFailure) -> Failure {
    Failure::Certificate {
        id: id.into(),
        reason,
    }
}

#[test]
fn ecdsa_initiator_and_rsa_responder_chained_to_the_ca() {
    let s = run(sim(
        (
            local(fqdn("moon"), "moon", "moon"),
            trusting(fqdn("sun"), &["ca"], &[]),
        ),
        (
            local(fqdn("sun"), "sun", "sun"),
            trusting(fqdn("moon"), &["ca"], &[]),
        ),
    ));
    assert_up(&s);
}

#[test]
fn rsa_initiator_and_ecdsa_p384_responder() {
    let s = run(sim(
        (
            local(fqdn("sun"), "sun", "sun"),
            trusting(fqdn("mars"), &["ca"], &[]),
        ),
        (
            local(fqdn("mars"), "mars", "mars"),
            trusting(fqdn("sun"), &["ca"], &[]),
        ),
    ));
    assert_up(&s);
}

#[test]
fn ed25519_both_ways() {
    let s = run(sim(
        (
            local(fqdn("venus"), "venus", "venus"),
            trusting(fqdn("moon"), &["ca"], &[]),
        ),
        (
            local(fqdn("moon"), "moon", "moon"),
            trusting(fqdn("venus"), &["ca"], &[]),
        ),
    ));
    assert_up(&s);
    let s = run(sim(
        (
            local(fqdn("moon"), "moon", "moon"),
            trusting(fqdn("venus"), &["ca"], &[]),
        ),
        (
            local(fqdn("venus"), "venus", "venus"),
            trusting(fqdn("moon"), &["ca"], &[]),
        ),
    ));
    assert_up(&s);
}

/// The initiator's certificate is issued by an intermediate CA: it sends both (CERT payloads, its own first), and
/// the responder, which trusts only the root, builds the chain.
#[test]
fn an_intermediate_ca_sent_with_the_certificate() {
    let mut deimos = local(fqdn("deimos"), "deimos", "deimos");
    if let AuthMethod::PubKey(c) = &mut deimos.method {
        c.certs.push(cert("inter"));
    }
    let s = run(sim(
        (deimos, trusting(fqdn("sun"), &["ca"], &[])),
        (
            local(fqdn("sun"), "sun", "sun"),
            trusting(fqdn("deimos"), &["ca"], &[]),
        ),
    ));
    assert_up(&s);
    // Without the intermediate the chain does not reach the CA.
    let s = run(sim(
        (
            local(fqdn("deimos"), "deimos", "deimos"),
            trusting(fqdn("sun"), &["ca"], &[]),
        ),
        (
            local(fqdn("sun"), "sun", "sun"),
            trusting(fqdn("deimos"), &["ca"], &[]),
        ),
    ));
    assert_eq!(
        s.failures(1),
        vec![&cert_failure(
            "deimos.netveil.test",
            CertFailure::NotSignedByCa
        )]
    );
}

#[test]
fn distinguished_name_identities() {
    let dn = |cn: &str| {
        Identity::Dn(parse_dn(&format!("C=CH, O=netveil test, CN={cn}.netveil.test")).unwrap())
    };
    // The peer's ID written in another case and spacing still names the same subject.
    let loose = Identity::Dn(parse_dn("c=ch/o=NETVEIL TEST/cn=Moon.netveil.test").unwrap());
    let s = run(sim(
        (
            local(dn("moon"), "moon", "moon"),
            trusting(dn("sun"), &["ca"], &[]),
        ),
        (
            local(dn("sun"), "sun", "sun"),
            trusting(loose, &["ca"], &[]),
        ),
    ));
    assert_up(&s);
}

#[test]
fn a_pinned_peer_certificate_needs_no_ca() {
    let s = run(sim(
        (
            local(fqdn("moon"), "moon", "moon"),
            trusting(fqdn("sun"), &[], &["sun"]),
        ),
        (
            local(fqdn("sun"), "sun", "sun"),
            trusting(fqdn("moon"), &[], &["moon"]),
        ),
    ));
    assert_up(&s);
    // Another certificate than the pinned one, even from the same CA, is refused.
    let s = run(sim(
        (
            local(fqdn("moon"), "moon", "moon"),
            trusting(fqdn("sun"), &["ca"], &[]),
        ),
        (
            local(fqdn("sun"), "sun", "sun"),
            trusting(fqdn("moon"), &[], &["expired"]),
        ),
    ));
    assert_eq!(s.ike_up(1), 0);
    assert_eq!(
        s.failures(1),
        vec![&cert_failure("moon.netveil.test", CertFailure::NotPinned)]
    );
}

#[test]
fn a_certificate_from_another_ca_fails_on_either_side() {
    // The responder presents it: the initiator refuses.
    let s = run(sim(
        (
            local(fqdn("sun"), "sun", "sun"),
            trusting(fqdn("moon"), &["ca"], &[]),
        ),
        (
            local(fqdn("moon"), "rogue", "rogue"),
            trusting(fqdn("sun"), &["ca"], &[]),
        ),
    ));
    assert_eq!(s.ike_up(0), 0);
    assert_eq!(
        s.failures(0),
        vec![&cert_failure(
            "moon.netveil.test",
            CertFailure::NotSignedByCa
        )]
    );
    // The initiator presents it: the responder refuses, and the initiator hears AUTHENTICATION_FAILED.
    let s = run(sim(
        (
            local(fqdn("moon"), "rogue", "rogue"),
            trusting(fqdn("sun"), &["ca"], &[]),
        ),
        (
            local(fqdn("sun"), "sun", "sun"),
            trusting(fqdn("moon"), &["ca"], &[]),
        ),
    ));
    assert_eq!(s.ike_up(0) + s.ike_up(1), 0);
    assert_eq!(
        s.failures(1),
        vec![&cert_failure(
            "moon.netveil.test",
            CertFailure::NotSignedByCa
        )]
    );
    assert_eq!(
        s.failures(0),
        vec![&Failure::AuthenticationFailed {
            id: "moon.netveil.test".into(),
            by_peer: true
        }]
    );
    assert_eq!(s.ep[1].half_open(), 0);
}

#[test]
fn an_expired_certificate_and_one_not_yet_valid() {
    let s = run(sim(
        (
            local(fqdn("moon"), "expired", "expired"),
            trusting(fqdn("sun"), &["ca"], &[]),
        ),
        (
            local(fqdn("sun"), "sun", "sun"),
            trusting(fqdn("moon"), &["ca"], &[]),
        ),
    ));
    assert_eq!(
        s.failures(1),
        vec![&cert_failure("moon.netveil.test", CertFailure::Expired)]
    );
    // The same certificates a year and a half earlier: before their validity.
    let s = run(sim_at(
        (
            local(fqdn("moon"), "moon", "moon"),
            trusting(fqdn("sun"), &["ca"], &[]),
        ),
        (
            local(fqdn("sun"), "sun", "sun"),
            trusting(fqdn("moon"), &["ca"], &[]),
        ),
        1_748_736_000,
    ));
    assert_eq!(
        s.failures(1),
        vec![&cert_failure("moon.netveil.test", CertFailure::NotYetValid)]
    );
}

#[test]
fn an_id_that_is_not_in_the_certificate() {
    // The initiator claims to be moon with sun's certificate (and key).
    let s = run(sim(
        (
            local(fqdn("moon"), "sun", "sun"),
            trusting(fqdn("sun"), &["ca"], &[]),
        ),
        (
            local(fqdn("sun"), "sun", "sun"),
            trusting(fqdn("moon"), &["ca"], &[]),
        ),
    ));
    assert_eq!(s.ike_up(1), 0);
    assert_eq!(
        s.failures(1),
        vec![&cert_failure("moon.netveil.test", CertFailure::IdMismatch)]
    );
}

#[test]
fn a_signature_that_does_not_verify() {
    // moon's certificate, but the AUTH signed with another P-256 key.
    let s = run(sim(
        (
            local(fqdn("moon"), "moon", "expired"),
            trusting(fqdn("sun"), &["ca"], &[]),
        ),
        (
            local(fqdn("sun"), "sun", "sun"),
            trusting(fqdn("moon"), &["ca"], &[]),
        ),
    ));
    assert_eq!(s.ike_up(1), 0);
    assert_eq!(
        s.failures(1),
        vec![&cert_failure(
            "moon.netveil.test",
            CertFailure::SignatureInvalid
        )]
    );
    // The responder's signature is wrong: the initiator refuses it.
    let s = run(sim(
        (
            local(fqdn("moon"), "moon", "moon"),
            trusting(fqdn("sun"), &["ca"], &[]),
        ),
        (
            local(fqdn("sun"), "sun", "mars"),
            trusting(fqdn("moon"), &["ca"], &[]),
        ),
    ));
    assert_eq!(s.ike_up(0), 0);
    assert_eq!(s.failures(0).len(), 1);
    assert!(matches!(
        s.failures(0)[0],
        Failure::Certificate {
            reason: CertFailure::UnsupportedSignature(_) | CertFailure::SignatureInvalid,
            ..
        }
    ));
}

#[test]
fn without_a_wall_clock_certificates_fail_plainly() {
    let (mut ca, mut cb) = pair(&["aes256gcm16-prfsha256-x25519"], &["aes128gcm16"]);
    (ca.local, ca.remote, ca.psk) = (
        local(fqdn("moon"), "moon", "moon"),
        trusting(fqdn("sun"), &["ca"], &[]),
        None,
    );
    (cb.local, cb.remote, cb.psk) = (
        local(fqdn("sun"), "sun", "sun"),
        trusting(fqdn("moon"), &["ca"], &[]),
        None,
    );
    let s = run(Sim::new(ca, cb, 3));
    assert_eq!(
        s.failures(1),
        vec![&cert_failure("moon.netveil.test", CertFailure::NoClock)]
    );
}

/// RFC 7296 2.1: every duplicated IKE_AUTH request gets the response sent first, byte for byte, although the
/// responder keeps it without its certificates and seals it again for each (with an AEAD and with AES-CBC and
/// HMAC, with one certificate and with a chain of two); the initiator's duplicated response changes nothing.
#[test]
fn a_duplicated_ike_auth_gets_the_same_response_with_certificates() {
    for (ike, peer, certs) in [
        ("aes256gcm16-prfsha256-x25519", "moon", &["moon"][..]),
        ("aes128-sha256-ecp256", "moon", &["moon"][..]),
        ("aes128-sha256-ecp256", "deimos", &["deimos", "inter"][..]),
    ] {
        let mut r = local(fqdn(peer), certs[0], peer);
        if let AuthMethod::PubKey(c) = &mut r.method {
            c.certs = certs.iter().map(|n| cert(n)).collect();
        }
        let mut s = sim_ike(
            ike,
            (
                local(fqdn("moon"), "moon", "moon"),
                trusting(fqdn(peer), &["ca"], &[]),
            ),
            (r, trusting(fqdn("moon"), &["ca"], &[])),
            WALL,
        );
        s.faults.dup = 1000;
        let s = run(s);
        assert_up(&s);
        let c = s.ep[1].counters();
        assert!(c.responses_resent >= 1, "{ike} {peer}: {c:?}");
        let auth: Vec<&Vec<u8>> = s.sent[1]
            .iter()
            .filter(|t| t.bytes[18] == 35 && t.bytes[19] & 0x20 != 0) // IKE_AUTH responses
            .map(|t| &t.bytes)
            .collect();
        assert!(
            auth.len() >= 2,
            "{ike} {peer}: {} IKE_AUTH responses",
            auth.len()
        );
        assert!(
            auth.iter().all(|b| *b == auth[0]),
            "{ike} {peer}: a resent response differs"
        );
        // It carries the certificates (sealed, so by length).
        let ders: usize = certs.iter().map(|n| cert(n).der().len()).sum();
        assert!(
            auth[0].len() > ders,
            "{ike} {peer}: {} bytes",
            auth[0].len()
        );
    }
}
