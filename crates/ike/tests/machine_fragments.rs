//! IKE fragmentation (RFC 7383) between two endpoints: negotiated in IKE_SA_INIT, encrypted messages above the
//! fragment size sent as SKF fragments that each fit, reassembled whatever the order, loss or duplication, and a
//! tampered fragment ignored.

mod machine_common;

use std::time::Duration;

use machine_common::*;
use netveil_ike::machine::Limits;
use netveil_ike::message::{payload_type, ExchangeType, Message};

const SMALL: Limits = Limits {
    half_open_max: 1024,
    cookie_threshold: 64,
    half_open_timeout: Duration::from_secs(30),
    cookie_secret_lifetime: Duration::from_secs(300),
    ike_sa_max: 65536,
    fragment_len: 160,
};

fn sim(frag_a: bool, frag_b: bool, esp: &str, seed: u64) -> Sim {
    let (mut a, mut b) = pair(&["aes256-sha256-modp2048"], &[esp]);
    a.fragmentation = frag_a;
    b.fragmentation = frag_b;
    let mut sim = Sim::new(a, b, seed);
    sim.limits(SMALL);
    sim
}

/// (exchange, fragment count) of each encrypted datagram a side sent: SKF ones with their total.
fn encrypted(sim: &Sim, i: usize) -> Vec<(ExchangeType, u16)> {
    sim.sent[i]
        .iter()
        .map(|t| Message::parse(&t.bytes).unwrap())
        .filter(|m| m.header.exchange_type != ExchangeType::IKE_SA_INIT)
        .map(|m| {
            let total = match &m.payloads[0] {
                netveil_ike::message::Payload::Skf(f) => f.total(),
                p => {
                    assert_eq!(p.payload_type(), payload_type::SK);
                    0
                }
            };
            (m.header.exchange_type, total)
        })
        .collect()
}

#[test]
fn ike_auth_goes_in_fragments_that_fit_when_both_support_it() {
    let mut sim = sim(true, true, "aes256gcm16", 1);
    sim.initiate();
    sim.settle();
    assert_eq!((sim.ike_up(0), sim.ike_up(1)), (1, 1));
    assert_crosswise(sim.children_up(0)[0], sim.children_up(1)[0]);
    for i in 0..2 {
        let e = encrypted(&sim, i);
        assert!(e.len() >= 2, "ep {i}: IKE_AUTH in several fragments: {e:?}");
        assert!(e
            .iter()
            .all(|(x, n)| *x == ExchangeType::IKE_AUTH && *n as usize == e.len()));
        for t in &sim.sent[i] {
            let m = Message::parse(&t.bytes).unwrap();
            if m.header.exchange_type == ExchangeType::IKE_AUTH {
                assert!(t.bytes.len() <= SMALL.fragment_len, "{}", t.bytes.len());
            }
        }
    }
}

#[test]
fn without_both_announcing_it_nothing_is_fragmented() {
    for (fa, fb) in [(true, false), (false, true), (false, false)] {
        let mut sim = sim(fa, fb, "aes256gcm16", 2);
        sim.initiate();
        sim.settle();
        assert_eq!((sim.ike_up(0), sim.ike_up(1)), (1, 1));
        for i in 0..2 {
            assert!(encrypted(&sim, i).iter().all(|(_, n)| *n == 0), "{fa} {fb}");
        }
    }
}

#[test]
fn fragments_survive_loss_duplication_and_reordering() {
    let mut retransmits = 0;
    for seed in 0..10 {
        let mut sim = sim(true, true, "aes128-sha256-modp2048", 10 + seed);
        sim.faults = Faults {
            loss: 100,
            dup: 300,
            reorder: 500,
            blackhole: [false; 2],
        };
        sim.initiate();
        sim.run_for(Duration::from_secs(160));
        assert_eq!((sim.ike_up(0), sim.ike_up(1)), (1, 1), "seed {seed}");
        assert_crosswise(sim.children_up(0)[0], sim.children_up(1)[0]);
        // A rekey with MODP-2048 PFS: a 256-byte KE, fragmented too.
        sim.faults = Faults::default();
        let id = sim.ep[0].status(sim.now)[0].id;
        let spi = sim.children_up(0)[0].inbound.spi;
        sim.ep[0].rekey_child(id, spi, sim.now).unwrap();
        sim.settle();
        assert_eq!(sim.children_up(1).len(), 2, "seed {seed}");
        retransmits += sim.ep[0].counters().retransmits;
    }
    assert!(retransmits > 0);
}

#[test]
fn a_tampered_fragment_is_ignored_and_the_retransmission_completes() {
    let mut sim = sim(true, true, "aes256gcm16", 3);
    sim.initiate();
    sim.step();
    // A's IKE_AUTH fragments are lost on the way; B gets them by hand, the first one tampered.
    sim.faults.blackhole = [true, false];
    sim.step();
    let frags: Vec<_> = sim.sent[0][1..].to_vec();
    assert!(frags.len() >= 2);
    for (k, t) in frags.iter().enumerate() {
        let mut b = t.bytes.clone();
        if k == 0 {
            let n = b.len();
            b[n - 1] ^= 1;
        }
        sim.ep[1].handle_datagram(sim.now, t.remote, t.local, &b);
    }
    assert!(sim.ep[1].poll_transmit().is_none(), "incomplete: no answer");
    assert_eq!(sim.ike_up(1), 0);
    // The genuine retransmission completes the message.
    sim.faults.blackhole = [false, false];
    sim.run_for(Duration::from_secs(30));
    assert_eq!((sim.ike_up(0), sim.ike_up(1)), (1, 1));
    assert!(sim.ep[0].counters().retransmits >= 1);
}
