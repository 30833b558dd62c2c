//! CREATE_CHILD_SA between two endpoints: rekeying a CHILD_SA (with and without PFS) from either side, a second
//! CHILD_SA, INVALID_KE_PAYLOAD on rekey, rekeying by lifetime, and expiry when a rekey is refused.

mod machine_common;

use std::time::Duration;

use machine_common::*;
use netveil_ike::event::{ChildSa, Event, Failure};
use netveil_ike::proposal::Ke;

fn up(esp_a: &str, esp_b: &str, seed: u64) -> Sim {
    let (a, _) = pair(&["aes256-sha256-x25519"], &[esp_a]);
    let (_, b) = pair(&["aes256-sha256-x25519"], &[esp_b]);
    let mut sim = Sim::new(a, b, seed);
    sim.initiate();
    sim.settle();
    assert_eq!((sim.children_up(0).len(), sim.children_up(1).len()), (1, 1));
    sim
}

fn downs(sim: &Sim, i: usize) -> Vec<u32> {
    sim.events[i]
        .iter()
        .filter_map(|e| match e {
            Event::ChildSaDown { inbound_spi, .. } => Some(*inbound_spi),
            _ => None,
        })
        .collect()
}

fn last_up(sim: &Sim, i: usize) -> ChildSa {
    (*sim.children_up(i).last().unwrap()).clone()
}

#[test]
fn rekey_with_pfs_from_either_side() {
    for side in 0..2 {
        let mut sim = up("aes256gcm16-x25519", "aes256gcm16-x25519", 70 + side as u64);
        let old = [last_up(&sim, 0), last_up(&sim, 1)];
        let id = sim.ep[side].status(sim.now)[0].id;
        sim.ep[side]
            .rekey_child(id, old[side].inbound.spi, sim.now)
            .unwrap();
        sim.settle();
        let new = [last_up(&sim, 0), last_up(&sim, 1)];
        assert_crosswise(&new[0], &new[1]);
        for i in 0..2 {
            assert_eq!(
                new[i].replaces,
                Some(old[i].inbound.spi),
                "side {side}, ep {i}"
            );
            assert_ne!(new[i].inbound.spi, old[i].inbound.spi);
            assert_ne!(new[i].inbound.encr_key, old[i].inbound.encr_key);
            assert_eq!(new[i].proposal.ke(), &[Ke::Curve25519], "PFS");
            assert_eq!(new[i].local_ts, old[i].local_ts);
            // The old one is deleted once the new one is in, on both sides.
            assert_eq!(downs(&sim, i), vec![old[i].inbound.spi]);
            let st = sim.ep[i].status(sim.now);
            assert_eq!(st[0].children.len(), 1);
            assert_eq!(st[0].children[0].inbound_spi, new[i].inbound.spi);
        }
        assert!(sim.failures(0).is_empty() && sim.failures(1).is_empty());
    }
}

#[test]
fn rekey_without_pfs() {
    let mut sim = up("aes128gcm16", "aes128gcm16", 80);
    let old = last_up(&sim, 0);
    let id = sim.ep[0].status(sim.now)[0].id;
    sim.ep[0].rekey_child(id, old.inbound.spi, sim.now).unwrap();
    sim.settle();
    let new = [last_up(&sim, 0), last_up(&sim, 1)];
    assert_crosswise(&new[0], &new[1]);
    assert!(new[0].proposal.ke().is_empty());
    assert_eq!(new[0].replaces, Some(old.inbound.spi));
    assert_ne!(
        new[0].outbound.encr_key, old.outbound.encr_key,
        "fresh nonces, fresh keys"
    );
}

#[test]
fn invalid_ke_on_rekey_is_retried_with_the_asked_group() {
    let mut sim = up("aes256gcm16-x25519-modp2048", "aes256gcm16-modp2048", 81);
    let old = last_up(&sim, 0);
    let id = sim.ep[0].status(sim.now)[0].id;
    sim.ep[0].rekey_child(id, old.inbound.spi, sim.now).unwrap();
    sim.settle();
    let new = [last_up(&sim, 0), last_up(&sim, 1)];
    assert_crosswise(&new[0], &new[1]);
    assert_eq!(new[0].proposal.ke(), &[Ke::Modp2048]);
    assert!(sim.failures(0).is_empty());
}

#[test]
fn a_second_child() {
    let (mut a, mut b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    a.children.push(child(
        "two",
        &["10.3.0.0/16"],
        &["10.4.0.0/16"],
        &["aes128gcm16"],
    ));
    b.children.push(child(
        "two",
        &["10.4.0.0/16"],
        &["10.3.0.0/16"],
        &["aes128gcm16"],
    ));
    let mut sim = Sim::new(a, b, 82);
    sim.initiate();
    sim.settle();
    let id = sim.ep[0].status(sim.now)[0].id;
    assert!(sim.ep[0].create_child(id, "nope", sim.now).is_err());
    sim.ep[0].create_child(id, "two", sim.now).unwrap();
    sim.settle();
    let new = [last_up(&sim, 0), last_up(&sim, 1)];
    assert_crosswise(&new[0], &new[1]);
    assert_eq!((new[0].child.as_str(), new[0].replaces), ("two", None));
    assert_eq!(new[0].local_ts, vec![ts("10.3.0.0/16")]);
    assert_eq!(sim.ep[1].status(sim.now)[0].children.len(), 2);
    // Taking the IKE SA down takes both children.
    sim.ep[1]
        .terminate(sim.ep[1].status(sim.now)[0].id, sim.now)
        .unwrap();
    sim.settle();
    assert_eq!((downs(&sim, 0).len(), downs(&sim, 1).len()), (2, 2));
}

#[test]
fn children_are_rekeyed_by_lifetime() {
    let (mut a, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16-x25519"]);
    a.children[0].lifetimes.rekey = Duration::from_secs(60);
    a.children[0].lifetimes.life = Duration::from_secs(90);
    let mut sim = Sim::new(a, b, 83);
    sim.initiate();
    sim.settle();
    let old = last_up(&sim, 0);
    sim.run_for(Duration::from_secs(59));
    assert_eq!(sim.children_up(0).len(), 1);
    sim.run_for(Duration::from_secs(2));
    assert_eq!(sim.children_up(0).len(), 2);
    assert_eq!(last_up(&sim, 0).replaces, Some(old.inbound.spi));
    assert_eq!(downs(&sim, 0), vec![old.inbound.spi]);
    // And again 60 s later.
    sim.run_for(Duration::from_secs(60));
    assert_eq!(sim.children_up(0).len(), 3);
    assert_eq!(sim.ep[0].status(sim.now)[0].children.len(), 1);
}

#[test]
fn a_refused_rekey_lets_the_child_expire() {
    let (mut a, _) = pair(&["aes256-sha256-x25519"], &["aes256gcm16-x25519"]);
    let (_, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16-modp3072"]);
    a.children[0].lifetimes.rekey = Duration::from_secs(60);
    a.children[0].lifetimes.life = Duration::from_secs(90);
    let mut sim = Sim::new(a, b, 84);
    sim.initiate();
    sim.settle();
    assert_eq!(
        sim.children_up(0).len(),
        1,
        "IKE_AUTH's child has no KE: it comes up"
    );
    sim.run_for(Duration::from_secs(61));
    assert_eq!(
        sim.failures(0),
        vec![&Failure::NoProposalChosen {
            ours: vec!["aes256gcm16-x25519".into()],
            theirs: vec![],
        }]
    );
    assert!(matches!(
        sim.failures(1)[..],
        [Failure::NoProposalChosen { .. }]
    ));
    assert!(downs(&sim, 0).is_empty());
    sim.run_for(Duration::from_secs(30));
    assert_eq!(
        (downs(&sim, 0).len(), downs(&sim, 1).len()),
        (1, 1),
        "expired at 90 s"
    );
    assert_eq!(sim.ike_down(0), 0, "the IKE SA stays");
}

/// Both ends rekey the same CHILD_SA at once: one exchange wins (the higher initiator nonce), the other end gets
/// TEMPORARY_FAILURE; exactly one new CHILD_SA pair results and the old one goes, on both ends.
#[test]
fn a_child_rekey_collision_ends_with_one_new_child() {
    for seed in 0..6 {
        let mut sim = up("aes256gcm16-x25519", "aes256gcm16-x25519", 100 + seed);
        let old = [last_up(&sim, 0), last_up(&sim, 1)];
        for (i, o) in old.iter().enumerate() {
            let id = sim.ep[i].status(sim.now)[0].id;
            sim.ep[i].rekey_child(id, o.inbound.spi, sim.now).unwrap();
        }
        sim.run_for(Duration::from_secs(20));
        for (i, o) in old.iter().enumerate() {
            let st = sim.ep[i].status(sim.now);
            assert_eq!(st[0].children.len(), 1, "seed {seed}, ep {i}: {st:?}");
            assert_eq!(downs(&sim, i), vec![o.inbound.spi], "seed {seed}, ep {i}");
            assert_eq!(sim.children_up(i).len(), 2, "seed {seed}, ep {i}");
        }
        assert_crosswise(&last_up(&sim, 0), &last_up(&sim, 1));
        assert!(
            sim.failures(0).is_empty() && sim.failures(1).is_empty(),
            "seed {seed}"
        );
    }
}
