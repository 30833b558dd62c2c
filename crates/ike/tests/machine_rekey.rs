//! Rekeying the IKE SA (RFC 7296 1.3.2, 2.18) between two endpoints: a new IKE SA with new SPIs and keys takes
//! the CHILD_SAs over, the old one goes, and the new one carries every later exchange.

mod machine_common;

use std::time::Duration;

use machine_common::*;
use netveil_ike::event::{Event, IkeSaId};

fn ups(sim: &Sim, i: usize) -> Vec<IkeSaId> {
    sim.events[i]
        .iter()
        .filter_map(|e| match e {
            Event::IkeSaUp { ike_sa, .. } => Some(*ike_sa),
            _ => None,
        })
        .collect()
}

fn downs(sim: &Sim, i: usize) -> Vec<IkeSaId> {
    sim.events[i]
        .iter()
        .filter_map(|e| match e {
            Event::IkeSaDown { ike_sa, .. } => Some(*ike_sa),
            _ => None,
        })
        .collect()
}

fn established(ike: &str, seed: u64) -> Sim {
    let (a, b) = pair(&[ike], &["aes256gcm16-x25519"]);
    let mut sim = Sim::new(a, b, seed);
    sim.initiate();
    sim.settle();
    assert_eq!((sim.ike_up(0), sim.ike_up(1)), (1, 1));
    sim
}

fn check_rekeyed(sim: &mut Sim, before: &[netveil_ike::machine::IkeSaStatus; 2]) {
    for (i, before) in before.iter().enumerate() {
        let u = ups(sim, i);
        assert_eq!(u.len(), 2, "ep {i}: {:?}", sim.events[i]);
        assert_eq!(downs(sim, i), vec![before.id], "ep {i}: the old SA goes");
        assert_eq!(
            sim.child_down(i),
            0,
            "ep {i}: the children move, nothing is removed"
        );
        let st = sim.ep[i].status(sim.now);
        assert_eq!(st.len(), 1, "ep {i}: {st:?}");
        assert_eq!(st[0].id, u[1]);
        assert_eq!(st[0].state, "ESTABLISHED");
        assert_ne!((st[0].spi_i, st[0].spi_r), (before.spi_i, before.spi_r));
        // The same children (their times go on).
        let same = |c: &[netveil_ike::machine::ChildStatus]| {
            c.iter()
                .map(|c| {
                    (
                        c.name.clone(),
                        c.inbound_spi,
                        c.outbound_spi,
                        c.proposal.clone(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(same(&st[0].children), same(&before.children), "ep {i}");
    }
    let (a, b) = (&sim.ep[0].status(sim.now)[0], &sim.ep[1].status(sim.now)[0]);
    assert_eq!(
        (a.spi_i, a.spi_r),
        (b.spi_i, b.spi_r),
        "both ends agree on the new SPIs"
    );
    assert_ne!(a.initiator, b.initiator);
}

#[test]
fn rekey_of_the_ike_sa_from_either_side() {
    for side in 0..2 {
        let mut sim = established("aes256-sha256-x25519", 90 + side as u64);
        let before = [
            sim.ep[0].status(sim.now).remove(0),
            sim.ep[1].status(sim.now).remove(0),
        ];
        sim.ep[side].rekey_ike(before[side].id, sim.now).unwrap();
        sim.settle();
        check_rekeyed(&mut sim, &before);
        // The new SA's initiator is whoever rekeyed.
        assert!(sim.ep[side].status(sim.now)[0].initiator);
        // The new SA carries a CHILD_SA rekey (message ids from 0, the new keys) and then the DELETE of all.
        let new_id = sim.ep[1 - side].status(sim.now)[0].id;
        let spi = sim.ep[1 - side].status(sim.now)[0].children[0].inbound_spi;
        sim.ep[1 - side].rekey_child(new_id, spi, sim.now).unwrap();
        sim.settle();
        assert_eq!((sim.children_up(0).len(), sim.children_up(1).len()), (2, 2));
        assert!(sim.failures(0).is_empty() && sim.failures(1).is_empty());
        sim.ep[side]
            .terminate(sim.ep[side].status(sim.now)[0].id, sim.now)
            .unwrap();
        sim.settle();
        for i in 0..2 {
            assert_eq!(
                sim.child_down(i),
                2,
                "the old child after its rekey, the new one with the IKE SA"
            );
            assert_eq!(downs(&sim, i).len(), 2);
            assert_eq!(sim.ep[i].ike_sa_count(), 0);
        }
    }
}

#[test]
fn the_ike_sa_is_rekeyed_by_lifetime() {
    let (mut a, b) = pair(
        &["aes256-sha256-x25519", "aes128gcm16-prfsha256-ecp256"],
        &["aes256gcm16"],
    );
    a.lifetimes.rekey = Duration::from_secs(100);
    let mut sim = Sim::new(a, b, 95);
    sim.initiate();
    sim.settle();
    let before = [
        sim.ep[0].status(sim.now).remove(0),
        sim.ep[1].status(sim.now).remove(0),
    ];
    sim.run_for(Duration::from_secs(99));
    assert_eq!(ups(&sim, 0).len(), 1);
    sim.run_for(Duration::from_secs(2));
    check_rekeyed(&mut sim, &before);
    // Again 100 s later, from the new SA.
    sim.run_for(Duration::from_secs(100));
    assert_eq!(ups(&sim, 0).len(), 3);
    assert_eq!(sim.ep[0].ike_sa_count(), 1);
}

#[test]
fn a_rekeyed_responder_sa_lingers_only_so_long() {
    let mut sim = established("aes256-sha256-x25519", 96);
    let id = sim.ep[0].status(sim.now)[0].id;
    sim.ep[0].rekey_ike(id, sim.now).unwrap();
    // Deliver the rekey request and its answer, then lose A's DELETE of the old SA.
    sim.step();
    sim.step();
    sim.faults.blackhole = [true, false];
    sim.run_for(Duration::from_secs(31));
    assert_eq!(
        sim.ep[1].ike_sa_count(),
        1,
        "B dropped the old SA by itself"
    );
    assert_eq!(sim.child_down(1), 0);
}

/// Both ends rekey the IKE SA at once: one new IKE SA results (the same on both ends), with the children.
#[test]
fn an_ike_rekey_collision_ends_with_one_new_sa() {
    for seed in 0..6 {
        let mut sim = established("aes256-sha256-x25519", 110 + seed);
        let before = [
            sim.ep[0].status(sim.now).remove(0),
            sim.ep[1].status(sim.now).remove(0),
        ];
        for (i, b) in before.iter().enumerate() {
            sim.ep[i].rekey_ike(b.id, sim.now).unwrap();
        }
        sim.run_for(Duration::from_secs(20));
        check_rekeyed(&mut sim, &before);
        assert!(
            sim.failures(0).is_empty() && sim.failures(1).is_empty(),
            "seed {seed}"
        );
    }
}
