//! Messages that authenticate but come in the wrong state or exchange (which needs the SA's keys, so it is
//! tested here, inside the crate): counted and dropped, never answered with a state change, never a panic.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use netveil_crypto::rand::SeededRng; // check-rng: allow (a #[cfg(test)] module file)

use super::sa::State;
use super::Endpoint;
use crate::config::*;
use crate::keys::Secret;
use crate::message::{ExchangeType, Message, NotifyType, Payload};
use crate::proposal::{Proposal, Protocol};

const A: &str = "10.0.0.1:500";
const B: &str = "10.0.0.2:500";

pub(super) fn conn(name: &str, local: &str, remote: &str) -> Connection {
    let ip = |s: &str| s.parse::<SocketAddr>().unwrap().ip();
    let ts = |s: &str| TsSpec {
        addr: s.parse().unwrap(),
        prefix: 16,
        protocol: 0,
        ports: (0, 65535),
    };
    let life = Lifetimes {
        rekey: Duration::from_secs(3600),
        life: Duration::from_secs(4000),
        rand: Duration::ZERO,
    };
    Connection {
        name: name.into(),
        local_addrs: vec![ip(local)],
        remote_addrs: vec![ip(remote)],
        remote_port: 500,
        proposals: vec![Proposal::parse(Protocol::Ike, "aes256gcm16-prfsha256-x25519").unwrap()],
        encap: false,
        fragmentation: false,
        local: AuthRound {
            id: Identity::Any,
            method: AuthMethod::Psk,
        },
        remote: AuthRound {
            id: Identity::Any,
            method: AuthMethod::Psk,
        },
        psk: Some(Secret::new(b"psk")),
        dpd_delay: None,
        lifetimes: life,
        reauth: Duration::ZERO,
        retransmit: Retransmit::default(),
        children: vec![ChildConfig {
            name: "c".into(),
            local_ts: vec![ts(if name == "a" { "10.1.0.0" } else { "10.2.0.0" })],
            remote_ts: vec![ts(if name == "a" { "10.2.0.0" } else { "10.1.0.0" })],
            esp_proposals: vec![Proposal::parse(Protocol::Esp, "aes128gcm16").unwrap()],
            mode: Mode::Tunnel,
            lifetimes: life,
            start_action: Action::None,
            dpd_action: Action::None,
            close_action: Action::None,
            replay_window: 32,
        }],
    }
}

struct Two {
    a: Endpoint,
    b: Endpoint,
    now: Instant,
}

impl Two {
    fn new() -> Two {
        let now = Instant::now();
        Two {
            a: Endpoint::new(vec![conn("a", A, B)], Box::new(SeededRng::new(1)), now), // check-rng: allow (a #[cfg(test)] module file)
            b: Endpoint::new(vec![conn("b", B, A)], Box::new(SeededRng::new(2)), now), // check-rng: allow (a #[cfg(test)] module file)
            now,
        }
    }

    /// Delivers up to `n` datagrams, alternating as they come; returns how many went.
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

    /// A message of A's SA, sealed with A's keys, delivered to B; B's answers.
    fn a_to_b(
        &mut self,
        x: ExchangeType,
        response: bool,
        mid: u32,
        inner: &[Payload],
    ) -> Vec<Message> {
        let sa = self.a.sas.values_mut().next().unwrap();
        let bytes = sa
            .sealed_message(&mut *self.a.rng, x, response, mid, inner)
            .remove(0);
        self.b
            .handle_datagram(self.now, B.parse().unwrap(), A.parse().unwrap(), &bytes);
        std::iter::from_fn(|| self.b.poll_transmit())
            .map(|t| Message::parse(&t.bytes).unwrap())
            .collect()
    }

    fn b_state(&self) -> State {
        self.b.sas.values().next().unwrap().state
    }
}

#[test]
fn unexpected_exchanges_in_the_half_open_state() {
    let mut t = Two::new();
    t.a.initiate("a", None, t.now).unwrap();
    assert_eq!(t.pump(2), 2, "IKE_SA_INIT both ways");
    // A's IKE_AUTH is queued, not delivered: B is half-open.
    assert_eq!(t.b_state(), State::HalfOpen);
    for x in [
        ExchangeType::INFORMATIONAL,
        ExchangeType::CREATE_CHILD_SA,
        ExchangeType::IKE_SA_INIT,
        ExchangeType(99),
    ] {
        let before = t.b.counters().unexpected;
        assert!(t.a_to_b(x, false, 1, &[]).is_empty(), "{x:?}");
        assert_eq!(t.b.counters().unexpected, before + 1, "{x:?}");
        assert_eq!(t.b_state(), State::HalfOpen);
    }
    // A response where B has no request outstanding.
    assert!(t.a_to_b(ExchangeType::IKE_AUTH, true, 0, &[]).is_empty());
    // The genuine IKE_AUTH still works afterwards.
    t.pump(10);
    assert_eq!(t.b_state(), State::Established);
}

#[test]
fn unexpected_exchanges_when_established() {
    let mut t = Two::new();
    t.a.initiate("a", None, t.now).unwrap();
    t.pump(10);
    assert_eq!(t.b_state(), State::Established);
    let next = t.a.sas.values().next().unwrap().my_mid;
    assert_eq!(next, 2);
    for x in [
        ExchangeType::IKE_AUTH,
        ExchangeType::IKE_SA_INIT,
        ExchangeType(99),
    ] {
        let before = t.b.counters().unexpected;
        assert!(t.a_to_b(x, false, next, &[]).is_empty(), "{x:?}");
        assert_eq!(t.b.counters().unexpected, before + 1, "{x:?}");
    }
    // Message ids out of the window: one ahead, and an old one that is not the cached response's.
    for mid in [next + 1, 0, u32::MAX] {
        assert!(t
            .a_to_b(ExchangeType::INFORMATIONAL, false, mid, &[])
            .is_empty());
    }
    // An empty CREATE_CHILD_SA is INVALID_SYNTAX, and so is an IKE SA rekey (IKE proposal with an 8-byte SPI)
    // without its KE payload; the IKE SA stays.
    let ike_rekey = vec![
        Payload::Sa(crate::message::Sa {
            proposals: vec![super::glue::to_wire(
                &Proposal::parse(Protocol::Ike, "aes256gcm16-prfsha256-x25519").unwrap(),
                1,
                &[9; 8],
            )],
        }),
        Payload::Nonce(crate::message::Nonce::new(vec![5; 32]).unwrap()),
    ];
    for (mid, inner, want) in [
        (next, vec![], NotifyType::INVALID_SYNTAX),
        (next + 1, ike_rekey, NotifyType::INVALID_SYNTAX),
    ] {
        let out = t.a_to_b(ExchangeType::CREATE_CHILD_SA, false, mid, &inner);
        assert_eq!(out.len(), 1);
        assert!(out[0].header.flags.response);
        assert_eq!(out[0].header.message_id, mid);
        assert_eq!(t.b_state(), State::Established);
        let b_sa = t.b.sas.values_mut().next().unwrap();
        let opened = b_sa.open(&out[0].to_vec().unwrap());
        assert!(
            opened.is_none(),
            "B's response is sealed for A, not for B's inbound key"
        );
        let a_sa = t.a.sas.values_mut().next().unwrap();
        let opened = a_sa.open(&out[0].to_vec().unwrap()).unwrap();
        assert_eq!(opened.notifies().next().unwrap().notify_type, want);
    }
    let next = next + 1;
    // An empty INFORMATIONAL with the next id is answered (liveness), empty.
    let out = t.a_to_b(ExchangeType::INFORMATIONAL, false, next + 1, &[]);
    assert_eq!(out.len(), 1);
    let a_sa = t.a.sas.values_mut().next().unwrap();
    assert!(a_sa
        .open(&out[0].to_vec().unwrap())
        .unwrap()
        .payloads
        .is_empty());
}

#[test]
fn the_initiator_in_auth_sent_ignores_requests() {
    let mut t = Two::new();
    t.a.initiate("a", None, t.now).unwrap();
    t.pump(2);
    // B (half-open) seals an INFORMATIONAL request to A, which waits for its IKE_AUTH response.
    let sa = t.b.sas.values_mut().next().unwrap();
    let bytes = sa
        .sealed_message(&mut *t.b.rng, ExchangeType::INFORMATIONAL, false, 0, &[])
        .remove(0);
    let before = t.a.counters().unexpected;
    t.a.handle_datagram(t.now, A.parse().unwrap(), B.parse().unwrap(), &bytes);
    assert_eq!(t.a.counters().unexpected, before + 1);
    assert_eq!(t.a.sas.values().next().unwrap().state, State::AuthSent);
}

/// The responder's index of IKE_SA_INIT requests finds an SA by the initiator's SPI and address, as a map by both:
/// two peers with the same SPI each find their own SA (the second one's in the index's overflow), a third
/// address finds none, and removing one leaves the other.
#[test]
fn the_init_index_tells_peers_with_the_same_spi_apart() {
    use super::endpoint::InitIndex;
    use super::sa::IkeSa;
    use crate::event::IkeSaId;
    use crate::keys::Role;
    use std::collections::BTreeMap;
    let now = Instant::now();
    let (l, a, b, c): (SocketAddr, SocketAddr, SocketAddr, SocketAddr) = (
        B.parse().unwrap(),
        A.parse().unwrap(),
        "10.0.0.3:500".parse().unwrap(),
        "10.0.0.4:4500".parse().unwrap(),
    );
    let mut sas = BTreeMap::new();
    let mut ix = InitIndex::default();
    for (n, remote) in [(1, a), (2, b)] {
        let id = IkeSaId(n);
        ix.insert(7, remote, id, &sas);
        sas.insert(
            id,
            Box::new(IkeSa::new(id, 0, Role::Responder, 7, n, l, remote, now)),
        );
    }
    assert_eq!(ix.get(7, a, &sas), Some(IkeSaId(1)));
    assert_eq!(ix.get(7, b, &sas), Some(IkeSaId(2)));
    assert_eq!(ix.get(7, c, &sas), None);
    assert_eq!(ix.get(8, a, &sas), None);
    assert_eq!(ix.more.len(), 1);
    ix.remove(7, a, IkeSaId(1));
    sas.remove(&IkeSaId(1));
    assert_eq!(ix.get(7, a, &sas), None);
    assert_eq!(ix.get(7, b, &sas), Some(IkeSaId(2)));
    ix.remove(7, b, IkeSaId(2));
    assert!(ix.by_spi.is_empty() && ix.more.is_empty());
}

/// Certificates and public-key authentication.
mod certs;
/// IKE_INTERMEDIATE and ML-KEM.
mod intermediate;
/// Against strongSwan's recorded messages and keys.
mod strongswan;
