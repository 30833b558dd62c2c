//! Regression tests for classes of bugs IKE daemons shipped that the other files do not cover: a rekey (or a new
//! CHILD_SA) of an SA not yet established, duplicate SPIs (a replayed IKE_SA_INIT, our own SPIs across many
//! rekeys), and a flood of forged fragments with absurd numbers and totals (racoon's reassembly DoS) against an
//! SA that is reassembling a real message.

mod machine_common;

use std::time::Duration;

use machine_common::*;
use netveil_ike::machine::{EndpointError, Limits};
use netveil_ike::message::{payload_type, ExchangeType, Message};

#[test]
fn rekey_and_new_children_of_an_sa_not_yet_established_are_refused() {
    let (a, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    let mut sim = Sim::new(a, b, 21);
    sim.initiate();
    // B has answered IKE_SA_INIT (half open), A has not seen the answer: both SAs exist, neither is established.
    sim.step();
    let ida = sim.ep[0].status(sim.now)[0].id;
    let idb = sim.ep[1].status(sim.now)[0].id;
    for (i, id) in [(0, ida), (1, idb)] {
        assert_eq!(sim.ep[i].status(sim.now)[0].state, "CONNECTING");
        assert!(matches!(
            sim.ep[i].rekey_ike(id, sim.now),
            Err(EndpointError::Busy)
        ));
        assert!(sim.ep[i].create_child(id, "net", sim.now).is_err());
        assert!(sim.ep[i].rekey_child(id, 0x1234_5678, sim.now).is_err());
    }
    let sent = [sim.sent[0].len(), sim.sent[1].len()];
    // Nothing was sent for the refused calls (only what is in flight already).
    for i in 0..2 {
        while let Some(t) = sim.ep[i].poll_transmit() {
            sim.sent[i].push(t);
        }
    }
    assert_eq!([sim.sent[0].len(), sim.sent[1].len()], sent);
    // The SA goes on to be established as if nothing had happened.
    sim.settle();
    assert_eq!((sim.ike_up(0), sim.ike_up(1)), (1, 1));
    assert_eq!(sim.children_up(0).len(), 1);
    // The responder's SA while half open (IKE_SA_INIT answered, IKE_AUTH not yet in): refused too.
    let (a, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    let mut sim = Sim::new(a, b, 22);
    sim.initiate();
    sim.step();
    sim.faults.blackhole = [true, false];
    sim.step();
    let idb = sim.ep[1].status(sim.now)[0].id;
    assert!(matches!(
        sim.ep[1].rekey_ike(idb, sim.now),
        Err(EndpointError::Busy)
    ));
    assert_eq!(sim.ep[1].status(sim.now)[0].state, "CONNECTING");
}

#[test]
fn a_replayed_ike_sa_init_makes_no_second_sa() {
    let (a, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    let mut sim = Sim::new(a, b, 23);
    sim.initiate();
    sim.step();
    let req = sim.sent[0][0].clone();
    let first = sim.sent[1][0].bytes.clone();
    // The same request (same SPIi, same address) ten times: the same answer, one SA.
    for _ in 0..10 {
        sim.ep[1].handle_datagram(sim.now, req.remote, req.local, &req.bytes);
        let t = sim.ep[1].poll_transmit().expect("answered again");
        assert_eq!(t.bytes, first, "a different answer to a retransmission");
        assert!(sim.ep[1].poll_transmit().is_none());
    }
    assert_eq!(sim.ep[1].ike_sa_count(), 1);
    assert_eq!(sim.ep[1].half_open(), 1);
    sim.settle();
    assert_eq!((sim.ike_up(0), sim.ike_up(1)), (1, 1));
}

#[test]
fn our_spis_stay_unique_and_nonzero_across_many_rekeys() {
    let (a, b) = pair(&["aes256-sha256-x25519"], &["aes128gcm16"]);
    let mut sim = Sim::new(a, b, 24);
    sim.initiate();
    sim.settle();
    for k in 0..60 {
        let i = k % 2;
        let st = &sim.ep[i].status(sim.now)[0];
        let (id, spi) = (st.id, st.children[0].inbound_spi);
        if k % 10 == 9 {
            sim.ep[i].rekey_ike(id, sim.now).unwrap();
        } else {
            sim.ep[i].rekey_child(id, spi, sim.now).unwrap();
        }
        sim.settle();
        sim.run_for(Duration::from_millis(10));
    }
    for i in 0..2 {
        let mut spis: Vec<u32> = sim.children_up(i).iter().map(|c| c.inbound.spi).collect();
        assert!(spis.len() >= 55, "{}", spis.len());
        assert!(spis.iter().all(|s| *s >= 256), "a reserved SPI: {spis:x?}");
        let n = spis.len();
        spis.sort();
        spis.dedup();
        assert_eq!(spis.len(), n, "an inbound SPI used twice");
        let st = sim.ep[i].status(sim.now);
        assert_eq!(st.len(), 1, "one IKE SA after the rekeys");
        assert_eq!(st[0].children.len(), 1, "one CHILD_SA after the rekeys");
    }
    // The IKE SPIs of the rekeyed IKE SAs: all different.
    let mut ike: Vec<u64> = sim.ep[0]
        .status(sim.now)
        .iter()
        .map(|s| s.spi_i ^ s.spi_r)
        .collect();
    ike.dedup();
    assert_eq!(ike.len(), 1);
}

#[test]
fn forged_fragments_with_absurd_numbers_neither_grow_nor_break_reassembly() {
    const SMALL: Limits = Limits {
        half_open_max: 1024,
        cookie_threshold: 64,
        half_open_timeout: Duration::from_secs(30),
        cookie_secret_lifetime: Duration::from_secs(300),
        ike_sa_max: 65536,
        fragment_len: 160,
    };
    let (mut a, mut b) = pair(&["aes256-sha256-modp2048"], &["aes256gcm16"]);
    a.fragmentation = true;
    b.fragmentation = true;
    let mut sim = Sim::new(a, b, 25);
    sim.limits(SMALL);
    sim.initiate();
    sim.step();
    // A's IKE_AUTH goes out in fragments; none reaches B by itself.
    sim.faults.blackhole = [true, false];
    sim.step();
    let frags: Vec<_> = sim.sent[0][1..].to_vec();
    assert!(frags.len() >= 3, "IKE_AUTH in fragments");
    for t in &frags {
        let m = Message::parse(&t.bytes).unwrap();
        assert_eq!(m.header.exchange_type, ExchangeType::IKE_AUTH);
        assert_eq!(m.payloads[0].payload_type(), payload_type::SKF);
    }
    // B gets all but the last genuine fragment, then 20,000 forgeries of it: every fragment number and total
    // (0, 1, the real ones, 64, 65, 65535), the body flipped, truncated or grown.
    let (last, head) = frags.split_last().unwrap();
    for t in head.iter().rev() {
        sim.ep[1].handle_datagram(sim.now, t.remote, t.local, &t.bytes);
    }
    let dropped = sim.ep[1].counters().dropped;
    let mut forged = 0u64;
    for k in 0..20_000u32 {
        let mut f = last.bytes.clone();
        // The SKF payload follows the 28-byte IKE header: generic header (4), fragment number (2), total (2).
        let number = [0u16, 1, 2, 3, 64, 65, 65535][(k % 7) as usize];
        let total = [0u16, 1, 3, 64, 65, 65535, 1000][(k / 7 % 7) as usize];
        f[32..34].copy_from_slice(&number.to_be_bytes());
        f[34..36].copy_from_slice(&total.to_be_bytes());
        match k % 3 {
            0 => {
                let n = f.len();
                f[n - 1 - (k as usize % 16)] ^= 0x5a;
            }
            1 => f.truncate(f.len() - 1 - (k as usize % 20)),
            _ => f.extend_from_slice(&k.to_be_bytes()),
        }
        sim.ep[1].handle_datagram(sim.now, last.remote, last.local, &f);
        forged += 1;
        assert!(
            sim.ep[1].poll_transmit().is_none(),
            "a forgery was answered"
        );
    }
    assert_eq!(
        sim.ep[1].counters().dropped - dropped,
        forged,
        "every forgery dropped"
    );
    assert_eq!(sim.ike_up(1), 0);
    // The genuine last fragment completes the message: the reassembly survived the flood.
    sim.ep[1].handle_datagram(sim.now, last.remote, last.local, &last.bytes);
    sim.faults.blackhole = [false, false];
    sim.settle();
    assert_eq!((sim.ike_up(0), sim.ike_up(1)), (1, 1));
    assert_crosswise(sim.children_up(0)[0], sim.children_up(1)[0]);
}

#[test]
fn a_child_the_peer_just_rekeyed_is_not_rekeyed_again() {
    let (a, b) = pair(&["aes256-sha256-x25519"], &["aes128gcm16-x25519"]);
    let mut sim = Sim::new(a, b, 26);
    sim.initiate();
    sim.settle();
    let (ida, idb) = (
        sim.ep[0].status(sim.now)[0].id,
        sim.ep[1].status(sim.now)[0].id,
    );
    let old_a = sim.children_up(0)[0].inbound.spi;
    let old_b = sim.children_up(1)[0].inbound.spi;
    sim.ep[0].rekey_child(ida, old_a, sim.now).unwrap();
    // B answers A's rekey; until A's DELETE of the old CHILD_SA arrives, B holds the old one and the new one.
    sim.step();
    sim.step();
    assert_eq!(sim.children_up(1).len(), 2);
    // B's own rekey of the old CHILD_SA (its timer, or a user) would make a redundant third one: refused.
    assert!(sim.ep[1].rekey_child(idb, old_b, sim.now).is_err());
    sim.settle();
    // A rekey timer that runs out now finds nothing to rekey twice either.
    sim.run_for(Duration::from_secs(5));
    for i in 0..2 {
        let st = sim.ep[i].status(sim.now);
        assert_eq!(st[0].children.len(), 1, "ep {i}: {st:?}");
    }
    assert_crosswise(sim.children_up(0)[1], sim.children_up(1)[1]);
}
