//! IKE_INTERMEDIATE with ML-KEM-768 (RFC 9242, RFC 9370) between two endpoints, inside the crate so that the
//! tests can look at both SAs' keys and forge messages under them.

use std::time::{Duration, Instant};

use netveil_crypto::rand::SeededRng; // check-rng: allow (a #[cfg(test)] module file)

use super::super::sa::{IkeSa, State};
use super::super::Endpoint;
use crate::config::*;
use crate::keys::IkeKeys;
use crate::message::{ExchangeType, Ke, Message, NotifyType, Payload};
use crate::proposal::{Ke as KeMethod, Proposal, Protocol};

const A: &str = "10.0.0.1:500";
const B: &str = "10.0.0.2:500";
const HYBRID: &str = "aes256gcm16-prfsha384-x25519-ke1_mlkem768";
const CLASSIC: &str = "aes256gcm16-prfsha384-x25519";

/// The plain tests' connection (`super::conn`) with these IKE proposals.
fn conn(name: &str, local: &str, remote: &str, ike: &[&str]) -> Connection {
    Connection {
        proposals: ike
            .iter()
            .map(|p| Proposal::parse(Protocol::Ike, p).unwrap())
            .collect(),
        ..super::conn(name, local, remote)
    }
}

struct Two {
    a: Endpoint,
    b: Endpoint,
    now: Instant,
}

impl Two {
    fn new(a: &[&str], b: &[&str]) -> Two {
        let now = Instant::now();
        Two {
            a: Endpoint::new(vec![conn("a", A, B, a)], Box::new(SeededRng::new(1)), now), // check-rng: allow (a #[cfg(test)] module file)
            b: Endpoint::new(vec![conn("b", B, A, b)], Box::new(SeededRng::new(2)), now), // check-rng: allow (a #[cfg(test)] module file)
            now,
        }
    }

    fn started(a: &[&str], b: &[&str]) -> Two {
        let mut t = Two::new(a, b);
        t.a.initiate("a", None, t.now).unwrap();
        t
    }

    /// Delivers up to `n` datagrams (A's first); returns how many went.
    fn pump(&mut self, n: usize) -> usize {
        let mut done = 0;
        while done < n {
            if let Some(t) = self.a.poll_transmit() {
                self.b
                    .handle_datagram(self.now, t.remote, t.local, &t.bytes);
            } else if let Some(t) = self.b.poll_transmit() {
                self.a
                    .handle_datagram(self.now, t.remote, t.local, &t.bytes);
            } else {
                break;
            }
            done += 1;
        }
        done
    }

    fn sa_a(&mut self) -> &mut IkeSa {
        self.a.sas.values_mut().next().unwrap()
    }
    fn sa_b(&mut self) -> &mut IkeSa {
        self.b.sas.values_mut().next().unwrap()
    }
    fn keys(&mut self) -> (IkeKeys, IkeKeys) {
        let a = self.sa_a().keys().cloned().unwrap();
        let b = self.sa_b().keys().cloned().unwrap();
        (a, b)
    }

    /// A request of A's SA, sealed with A's current keys, delivered to B; B's answers as A opens them.
    fn a_to_b(&mut self, x: ExchangeType, mid: u32, inner: &[Payload]) -> Vec<Vec<Payload>> {
        while self.a.poll_transmit().is_some() {}
        let sa = self.a.sas.values_mut().next().unwrap();
        let bytes = sa
            .sealed_message(&mut *self.a.rng, x, false, mid, inner)
            .remove(0);
        self.b
            .handle_datagram(self.now, B.parse().unwrap(), A.parse().unwrap(), &bytes);
        let out: Vec<Vec<u8>> = std::iter::from_fn(|| self.b.poll_transmit())
            .map(|t| t.bytes)
            .collect();
        let sa = self.a.sas.values_mut().next().unwrap();
        out.iter()
            .map(|b| sa.open(b).expect("B answers under A's keys").payloads)
            .collect()
    }

    /// Exchange type and message id of what A sent so far (by parsing nothing: from the SA's counters).
    fn established(&self) -> bool {
        let up = |e: &Endpoint| e.sas.values().all(|s| s.state == State::Established);
        !self.a.sas.is_empty() && !self.b.sas.is_empty() && up(&self.a) && up(&self.b)
    }
}

fn assert_all_differ(x: &IkeKeys, y: &IkeKeys) {
    assert_ne!(x.sk_d(), y.sk_d());
    assert_ne!(x.sk_ei(), y.sk_ei());
    assert_ne!(x.sk_er(), y.sk_er());
    assert_ne!(x.sk_pi(), y.sk_pi());
    assert_ne!(x.sk_pr(), y.sk_pr());
}

fn ke(group: u16, len: usize) -> Payload {
    Payload::Ke(Ke {
        group,
        data: vec![7; len],
    })
}

fn only_notify(out: &[Vec<Payload>]) -> NotifyType {
    assert_eq!(out.len(), 1, "one response");
    match &out[0][..] {
        [Payload::Notify(n)] => n.notify_type,
        other => panic!("not a lone notify: {other:?}"),
    }
}

#[test]
fn hybrid_keys_agree_and_differ_from_the_classic_ones() {
    let mut t = Two::started(&[HYBRID, CLASSIC], &[HYBRID, CLASSIC]);
    assert_eq!(t.pump(2), 2, "IKE_SA_INIT both ways");
    let (a0, b0) = t.keys();
    assert_eq!(a0, b0, "the classic keys of IKE_SA_INIT agree");
    let chosen = t.sa_b().proposal().unwrap();
    assert_eq!(chosen.add_ke(1), &[KeMethod::MlKem768]);
    assert_eq!(chosen.to_string(), HYBRID);
    assert_eq!(t.pump(2), 2, "IKE_INTERMEDIATE both ways");
    let (a1, b1) = t.keys();
    assert_eq!(a1, b1, "both derive the same SK_* after ML-KEM");
    assert_all_differ(&a1, &a0);
    // They are SKEYSEED(1) = prf(SK_d(0), SK(1) | Ni | Nr) for some SK(1): not the classic keys re-derived.
    let (ia, ib) = (
        t.sa_a().intermediate.as_ref().unwrap().int_auth_i.clone(),
        t.sa_b().intermediate.as_ref().unwrap().int_auth_i.clone(),
    );
    assert_eq!(ia, ib, "IntAuth_i agrees");
    assert_eq!(ia.len(), 48, "prf-sha384 output");
    let ra = t.sa_a().intermediate.as_ref().unwrap().int_auth_r.clone();
    assert_eq!(ra, t.sa_b().intermediate.as_ref().unwrap().int_auth_r);
    assert_ne!(ia, ra);
    t.pump(10);
    assert!(t.established());
    assert_eq!(t.sa_a().proposal().unwrap().to_string(), HYBRID);
    // IKE_AUTH was message 2 (IKE_INTERMEDIATE took 1), the next request is 3.
    assert_eq!(t.sa_a().my_mid, 3);
    assert_eq!(t.sa_b().peer_mid, 3);
    // The keys after IKE_INTERMEDIATE protect the SA; SK_pi and SK_pr went after IKE_AUTH.
    let (a2, b2) = t.keys();
    for (now, before) in [(&a2, &a1), (&b2, &b1)] {
        assert_eq!(now.sk_d(), before.sk_d());
        assert_eq!(now.sk_ei(), before.sk_ei());
        assert_eq!(now.sk_er(), before.sk_er());
        assert!(now.sk_pi().is_empty() && now.sk_pr().is_empty());
    }
    let status = t.a.status(t.now);
    assert!(status[0].proposal.contains("ke1_mlkem768"), "{status:?}");
}

#[test]
fn a_responder_without_hybrid_picks_the_classic_proposal() {
    let mut t = Two::started(&[HYBRID, CLASSIC], &[CLASSIC]);
    t.pump(10);
    assert!(t.established());
    assert_eq!(t.sa_a().proposal().unwrap().to_string(), CLASSIC);
    assert!(t.sa_a().intermediate.is_none());
    assert!(t.sa_b().intermediate.is_none());
    // IKE_AUTH was message 1.
    assert_eq!(t.sa_a().my_mid, 2);
    // And a hybrid-only initiator against a classic-only responder: no proposal chosen.
    let mut t = Two::started(&[HYBRID], &[CLASSIC]);
    t.pump(10);
    assert!(t.b.sas.is_empty());
    assert!(t.a.sas.is_empty(), "A gives up on NO_PROPOSAL_CHOSEN");
}

#[test]
fn a_responder_prefers_hybrid_even_when_the_initiator_lists_it_second() {
    let mut t = Two::started(&[CLASSIC, HYBRID], &[HYBRID, CLASSIC]);
    t.pump(10);
    assert!(t.established());
    assert_eq!(t.sa_b().proposal().unwrap().to_string(), HYBRID);
}

/// Runs IKE_SA_INIT and leaves A's IKE_INTERMEDIATE request undelivered.
fn half_open() -> Two {
    let mut t = Two::started(&[HYBRID, CLASSIC], &[HYBRID, CLASSIC]);
    assert_eq!(t.pump(2), 2);
    assert_eq!(t.sa_b().state, State::HalfOpen);
    t
}

#[test]
fn bad_ke_payloads_in_ike_intermediate_are_refused() {
    let good = || ke(36, 1184);
    let cases: Vec<(&str, Vec<Payload>)> = vec![
        ("missing KE", vec![]),
        ("two KE", vec![good(), good()]),
        ("short KE", vec![ke(36, 1183)]),
        ("long KE", vec![ke(36, 1185)]),
        ("ciphertext length", vec![ke(36, 1088)]),
        ("wrong method", vec![ke(31, 1184)]),
        ("the classic method", vec![ke(31, 32)]),
    ];
    for (what, inner) in cases {
        let mut t = half_open();
        let out = t.a_to_b(ExchangeType::IKE_INTERMEDIATE, 1, &inner);
        assert_eq!(only_notify(&out), NotifyType::INVALID_SYNTAX, "{what}");
        assert!(t.b.sas.is_empty(), "{what}: B's half-open SA is gone");
    }
    // The control: a well-formed one is answered with B's ciphertext.
    let mut t = half_open();
    let pair = netveil_crypto::kem::MlKem768::generate().unwrap(); // check-rng: allow (a #[cfg(test)] module file)
    let inner = [Payload::Ke(Ke {
        group: 36,
        data: pair.public().to_vec(),
    })];
    let out = t.a_to_b(ExchangeType::IKE_INTERMEDIATE, 1, &inner);
    match &out[0][..] {
        [Payload::Ke(k)] => assert_eq!((k.group, k.data.len()), (36, 1088)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn ike_intermediate_out_of_order_is_refused() {
    // IKE_AUTH before the additional key exchange.
    let mut t = half_open();
    let out = t.a_to_b(ExchangeType::IKE_AUTH, 1, &[]);
    assert_eq!(only_notify(&out), NotifyType::INVALID_SYNTAX);
    assert!(t.b.sas.is_empty());
    // IKE_INTERMEDIATE where none was negotiated.
    let mut t = Two::started(&[HYBRID, CLASSIC], &[CLASSIC]);
    t.pump(2);
    let out = t.a_to_b(ExchangeType::IKE_INTERMEDIATE, 1, &[ke(36, 1184)]);
    assert_eq!(only_notify(&out), NotifyType::INVALID_SYNTAX);
    assert!(t.b.sas.is_empty());
    // A second IKE_INTERMEDIATE once the only one is done (under the new keys, message 2).
    let mut t = half_open();
    t.pump(2);
    assert!(!t.sa_b().intermediate_owed());
    let out = t.a_to_b(ExchangeType::IKE_INTERMEDIATE, 2, &[ke(36, 1184)]);
    assert_eq!(only_notify(&out), NotifyType::INVALID_SYNTAX);
    assert!(t.b.sas.is_empty());
}

#[test]
fn a_retransmitted_ike_intermediate_gets_the_cached_response() {
    let mut t = half_open();
    // A's request reaches B; B's response is lost.
    assert_eq!(t.pump(1), 1);
    let lost = t.b.poll_transmit().unwrap();
    assert!(!t.sa_b().intermediate_owed());
    // A retransmits (under the keys before the update); B recognises it and sends the same response again.
    t.now += Duration::from_secs(5);
    t.a.handle_timeout(t.now);
    assert_eq!(t.a.counters().retransmits, 1);
    let again = t.a.poll_transmit().unwrap();
    t.b.handle_datagram(t.now, again.remote, again.local, &again.bytes);
    assert_eq!(t.b.counters().responses_resent, 1);
    let resent = t.b.poll_transmit().unwrap();
    assert_eq!(resent.bytes, lost.bytes);
    t.a.handle_datagram(t.now, resent.remote, resent.local, &resent.bytes);
    t.pump(10);
    assert!(t.established());
    let (a, b) = t.keys();
    assert_eq!(a, b);
}

#[test]
fn auth_covers_the_intermediate_messages() {
    // B's record of A's IKE_INTERMEDIATE request differs from what A sent: AUTH fails.
    let mut t = half_open();
    t.pump(2);
    t.sa_b().intermediate.as_mut().unwrap().int_auth_i[0] ^= 1;
    t.pump(10);
    assert!(!t.established());
    assert!(t.b.sas.is_empty());
    // The same with the chain of B's response.
    let mut t = half_open();
    t.pump(2);
    t.sa_a().intermediate.as_mut().unwrap().int_auth_r[5] ^= 1;
    t.pump(10);
    assert!(!t.established());
}

#[test]
fn the_ike_sa_init_messages_announce_ike_intermediate() {
    let announces = |m: &Message| {
        m.notifies()
            .any(|n| n.notify_type == NotifyType::INTERMEDIATE_EXCHANGE_SUPPORTED)
    };
    let mut t = Two::started(&[HYBRID, CLASSIC], &[CLASSIC]);
    let req = t.a.poll_transmit().unwrap();
    assert!(announces(&Message::parse(&req.bytes).unwrap()));
    t.b.handle_datagram(t.now, req.remote, req.local, &req.bytes);
    let resp = t.b.poll_transmit().unwrap();
    assert!(announces(&Message::parse(&resp.bytes).unwrap()));
    // A classic-only initiator does not.
    let mut t = Two::started(&[CLASSIC], &[CLASSIC]);
    let req = t.a.poll_transmit().unwrap();
    assert!(!announces(&Message::parse(&req.bytes).unwrap()));
}
