//! IKE_AUTH with certificates as the responder receives it, with CERT payloads a peer chose (inside the crate:
//! the message is sealed with the initiator's keys): garbage CERT payloads before the real one are dropped and
//! counted and the exchange completes; garbage alone fails as "no certificate".

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use netveil_crypto::rand::{Rng, SeededRng}; // check-rng: allow (a #[cfg(test)] module file)
use netveil_crypto::sig::{PrivateKey, Scheme, SigHash};

use super::super::sa::State;
use super::super::{glue, Endpoint};
use crate::cert::{CertFailure, Certificate};
use crate::config::*;
use crate::event::{Event, Failure};
use crate::keys::{digital_signature_auth, Role};
use crate::message::payloads::{auth_method, cert_encoding};
use crate::message::{Auth, Cert, ExchangeType, Id, Message, NotifyType, Payload};

const A: &str = "10.0.0.1:500";
const B: &str = "10.0.0.2:500";

fn seeded(seed: u64) -> Box<dyn Rng + Send> {
    Box::new(SeededRng::new(seed)) // check-rng: allow (a #[cfg(test)] module file)
}

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

fn fqdn(n: &str) -> Identity {
    Identity::Fqdn(format!("{n}.netveil.test"))
}

/// `name`'s connection: our certificate `me`, the peer `peer`, both from testdata's CA.
fn conn(name: &str, local: &str, remote: &str, me: &str, peer: &str) -> Connection {
    let mut c = super::conn(name, local, remote);
    c.psk = None;
    c.local = AuthRound {
        id: fqdn(me),
        method: AuthMethod::PubKey(PubKeyCreds {
            certs: vec![cert(me)],
            cacerts: vec![],
            key: Some(Arc::new(
                PrivateKey::from_pem_or_der(&td(&format!("{me}.key"))).unwrap(),
            )),
        }),
    };
    c.remote = AuthRound {
        id: fqdn(peer),
        method: AuthMethod::PubKey(PubKeyCreds {
            certs: vec![],
            cacerts: vec![cert("ca")],
            key: None,
        }),
    };
    c
}

/// A (moon) has sent IKE_SA_INIT and B (sun) answered; A's own IKE_AUTH is discarded. Then A's IKE_AUTH with
/// `certs` as its CERT payloads, signed with moon's key, goes to B; B's answer (opened by A) comes back.
fn auth_with_certs(certs: Vec<Vec<u8>>) -> (Endpoint, Vec<Payload>) {
    let now = Instant::now();
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_811_808_000);
    let mut a = Endpoint::new(vec![conn("a", A, B, "moon", "sun")], seeded(1), now)
        .with_wall_clock(now, wall);
    let mut b = Endpoint::new(vec![conn("b", B, A, "sun", "moon")], seeded(2), now)
        .with_wall_clock(now, wall);
    let (pa, pb): (SocketAddr, SocketAddr) = (A.parse().unwrap(), B.parse().unwrap());
    a.initiate("a", None, now).unwrap();
    let t = a.poll_transmit().unwrap();
    b.handle_datagram(now, pb, pa, &t.bytes);
    let t = b.poll_transmit().unwrap();
    a.handle_datagram(now, pa, pb, &t.bytes);
    assert!(a.poll_transmit().is_some(), "A's own IKE_AUTH");
    let sa = a.sas.values_mut().next().unwrap();
    let idi = Id::fqdn("moon.netveil.test");
    let mut body = vec![0u8; idi.buffer_len()];
    idi.emit(&mut body).unwrap();
    let keys = sa.keys().unwrap();
    let signed = keys.signed_octets(Role::Initiator, &sa.hs().init_sent, &sa.hs().nr, &body);
    let key = PrivateKey::from_pem_or_der(&td("moon.key")).unwrap();
    let scheme = Scheme::Ecdsa(SigHash::Sha256);
    let sig = key.sign(scheme, &signed).unwrap();
    let child = &a.connections[0].children[0];
    let esp: Vec<_> = child.esp_proposals.iter().map(glue::without_ke).collect();
    let mut inner = vec![Payload::IdI(idi)];
    inner.extend(certs.into_iter().map(|data| {
        Payload::Cert(Cert {
            encoding: cert_encoding::X509_SIGNATURE,
            data,
        })
    }));
    inner.extend([
        Payload::Auth(Auth {
            method: auth_method::DIGITAL_SIGNATURE,
            data: digital_signature_auth(scheme, &sig).unwrap(),
        }),
        Payload::Sa(glue::sa_payload(&esp, &0x1234_5678u32.to_be_bytes())),
        Payload::TsI(glue::ts_payload(&child.local_ts)),
        Payload::TsR(glue::ts_payload(&child.remote_ts)),
    ]);
    let bytes = sa
        .sealed_message(&mut *a.rng, ExchangeType::IKE_AUTH, false, 1, &inner)
        .remove(0);
    b.handle_datagram(now, pb, pa, &bytes);
    let out = b.poll_transmit().expect("B answers");
    let opened = sa
        .open(&Message::parse(&out.bytes).unwrap().to_vec().unwrap())
        .unwrap();
    (b, opened.payloads)
}

#[test]
fn garbage_cert_payloads_before_the_real_one_are_dropped_and_counted() {
    let (b, answer) = auth_with_certs(vec![
        b"\x30\x03garbage".to_vec(),
        vec![0x30, 0x82, 0xff, 0xff],
        td("moon.der"),
    ]);
    assert_eq!(b.counters().certs_dropped, 2);
    assert_eq!(b.sas.values().next().unwrap().state, State::Established);
    assert!(
        answer.iter().any(|p| matches!(p, Payload::Auth(_))),
        "{answer:?}"
    );
    assert!(answer
        .iter()
        .any(|p| matches!(p, Payload::Cert(c) if c.data == td("sun.der"))));
}

#[test]
fn garbage_cert_payloads_alone_are_no_certificate() {
    let (mut b, answer) = auth_with_certs(vec![b"garbage".to_vec()]);
    assert_eq!(b.counters().certs_dropped, 1);
    assert!(
        matches!(&answer[..], [Payload::Notify(n)] if n.notify_type == NotifyType::AUTHENTICATION_FAILED)
    );
    let failed: Vec<Failure> = std::iter::from_fn(|| b.poll_event())
        .filter_map(|e| match e {
            Event::Failed { failure, .. } => Some(failure),
            _ => None,
        })
        .collect();
    assert_eq!(
        failed,
        vec![Failure::Certificate {
            id: "moon.netveil.test".into(),
            reason: CertFailure::NoCertificate
        }]
    );
    assert_eq!(b.ike_sa_count(), 0);
}

/// The responder keeps its IKE_AUTH response without its certificates (RFC 7296 2.1's cache, in fewer bytes than
/// the datagram), and a retransmitted request gets the bytes sent, sealed again: with AES-GCM and with AES-CBC
/// and HMAC, with one certificate (sun, RSA) and with a chain (deimos and its intermediate CA).
#[test]
fn the_cached_ike_auth_response_is_kept_without_certificates() {
    use super::super::sa::CachedResponse;
    use crate::proposal::{Proposal, Protocol};
    for (ike, me, chain) in [
        ("aes256gcm16-prfsha256-x25519", "sun", &["sun"][..]),
        ("aes128-sha256-ecp256", "deimos", &["deimos", "inter"][..]),
    ] {
        let now = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_811_808_000);
        let (mut ca, mut cb) = (conn("a", A, B, "moon", me), conn("b", B, A, me, "moon"));
        for c in [&mut ca, &mut cb] {
            c.proposals = vec![Proposal::parse(Protocol::Ike, ike).unwrap()];
        }
        if let AuthMethod::PubKey(p) = &mut cb.local.method {
            p.certs = chain.iter().map(|n| cert(n)).collect();
        }
        let mut a = Endpoint::new(vec![ca], seeded(1), now).with_wall_clock(now, wall);
        let mut b = Endpoint::new(vec![cb], seeded(2), now).with_wall_clock(now, wall);
        let (pa, pb): (SocketAddr, SocketAddr) = (A.parse().unwrap(), B.parse().unwrap());
        a.initiate("a", None, now).unwrap();
        let t = a.poll_transmit().unwrap();
        b.handle_datagram(now, pb, pa, &t.bytes);
        let t = b.poll_transmit().unwrap();
        a.handle_datagram(now, pa, pb, &t.bytes);
        let request = a.poll_transmit().expect("A's IKE_AUTH");
        b.handle_datagram(now, pb, pa, &request.bytes);
        let response = b.poll_transmit().expect("B answers");
        a.handle_datagram(now, pa, pb, &response.bytes);
        for e in [&a, &b] {
            assert_eq!(
                e.sas.values().next().unwrap().state,
                State::Established,
                "{ike}"
            );
        }
        let sa = b.sas.values().next().unwrap();
        let Some(CachedResponse::Plain { bytes, .. }) = &sa.last_response else {
            panic!("{ike}: the response is kept as sent");
        };
        let ders: usize = chain.iter().map(|n| td(&format!("{n}.der")).len()).sum();
        assert!(
            bytes.len() + ders < response.bytes.len(),
            "{ike}: {} bytes kept of {}",
            bytes.len(),
            response.bytes.len()
        );
        b.handle_datagram(now, pb, pa, &request.bytes);
        let again = b.poll_transmit().expect("the response again");
        assert_eq!(again.bytes, response.bytes, "{ike}");
        assert!(b.poll_transmit().is_none());
        assert_eq!(b.counters().responses_resent, 1);
    }
}

/// The initiator's check of the responder's signature AUTH: moon and sun (certificates of testdata's CA) up to
/// sun's IKE_AUTH response, which moon receives opened with the IKE SA's keys, its inner payloads changed by `edit`
/// and sealed again with the responder's keys (so its ICV is right: whatever fails, fails past the SK payload).
/// Returns moon, its IKE SA and what moon reported.
fn moon_takes_suns_answer_edited(
    edit: impl FnOnce(&mut Vec<Payload>),
) -> (Endpoint, crate::event::IkeSaId, Vec<Event>) {
    use crate::sk::{Encrypted, SkKey};
    let now = Instant::now();
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_811_808_000);
    let mut a = Endpoint::new(vec![conn("a", A, B, "moon", "sun")], seeded(1), now)
        .with_wall_clock(now, wall);
    let mut b = Endpoint::new(vec![conn("b", B, A, "sun", "moon")], seeded(2), now)
        .with_wall_clock(now, wall);
    let (pa, pb): (SocketAddr, SocketAddr) = (A.parse().unwrap(), B.parse().unwrap());
    let id = a.initiate("a", None, now).unwrap();
    let t = a.poll_transmit().unwrap();
    b.handle_datagram(now, pb, pa, &t.bytes);
    let t = b.poll_transmit().unwrap();
    a.handle_datagram(now, pa, pb, &t.bytes);
    let t = a.poll_transmit().expect("moon's IKE_AUTH");
    b.handle_datagram(now, pb, pa, &t.bytes);
    let answer = b.poll_transmit().expect("sun answers").bytes;
    assert!(b.poll_transmit().is_none(), "one datagram: not fragmented");
    assert_eq!(b.sas.values().next().unwrap().state, State::Established);

    let keys = a.sas[&id].keys().unwrap().clone();
    let mut bytes = answer;
    assert_eq!(bytes[16], crate::message::payload_type::SK);
    let range = SkKey::inbound(&keys, Role::Initiator)
        .unwrap()
        .open(&mut bytes, 28, Encrypted::Sk)
        .unwrap();
    let mut inner = crate::message::parse_chain(bytes[28], &bytes[range]).unwrap();
    edit(&mut inner);
    let mut msg = bytes[..28].to_vec();
    msg.extend_from_slice(&[crate::message::first_type(&inner), 0, 0, 0]);
    let at = msg.len();
    msg.resize(at + crate::message::chain_len(&inner), 0);
    crate::message::emit_chain(&inner, &mut msg[at..]).unwrap();
    SkKey::outbound(&keys, Role::Responder)
        .unwrap()
        .seal(&mut *seeded(3), &mut msg, 28, Encrypted::Sk)
        .unwrap();
    a.handle_datagram(now, pa, pb, &msg);
    let events = std::iter::from_fn(|| a.poll_event()).collect();
    (a, id, events)
}

/// The answer sealed again unchanged is taken (the resealing is right); with one bit of the signature in its AUTH
/// payload changed (sun's certificate, chain and ID all still fine), moon refuses it as an invalid signature: no
/// IKE SA or CHILD_SA comes up and the IKE SA goes.
#[test]
fn the_initiator_refuses_a_responder_signature_that_does_not_verify() {
    let (a, id, events) = moon_takes_suns_answer_edited(|_| {});
    assert!(
        matches!(&events[..], [Event::IkeSaUp { .. }, Event::ChildSaUp(_)]),
        "{events:?}"
    );
    assert_eq!(a.sas[&id].state, State::Established);

    let mut changed = 0;
    let (mut a, id, events) = moon_takes_suns_answer_edited(|inner| {
        for p in inner.iter_mut() {
            if let Payload::Auth(auth) = p {
                assert_eq!(auth.method, auth_method::DIGITAL_SIGNATURE);
                // The last byte: inside the signature, past RFC 7427's AlgorithmIdentifier.
                *auth.data.last_mut().unwrap() ^= 0x01;
                changed += 1;
            }
        }
    });
    assert_eq!(changed, 1, "sun's answer has one AUTH payload");
    assert_eq!(
        events,
        vec![Event::Failed {
            connection: "a".into(),
            ike_sa: Some(id),
            child: None,
            failure: Failure::Certificate {
                id: "sun.netveil.test".into(),
                reason: CertFailure::SignatureInvalid,
            },
        }]
    );
    super::strongswan::responder_told(&mut a, id, "a changed signature");
}
