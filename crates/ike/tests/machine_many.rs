//! Many IKE SAs of one connection between the same two endpoints (what `netveil bench --ike` and strongSwan's
//! parallel initiations do): INITIAL_CONTACT goes only with the first, so the responder keeps them all.

mod machine_common;

use machine_common::*;

/// Sequential and overlapping initiations of one connection: every IKE SA stays up on both sides (with
/// INITIAL_CONTACT in every IKE_AUTH the responder would keep only the last).
#[test]
fn second_and_later_ike_sas_do_not_claim_initial_contact() {
    let (a, b) = pair(&["aes128-sha256-x25519"], &["aes128gcm16"]);
    let mut sim = Sim::new(a, b, 7);
    // One after the other: the second IKE_AUTH comes while the first SA is up on both sides.
    sim.initiate();
    sim.settle();
    sim.initiate();
    sim.settle();
    // Three at once: their IKE_AUTHs are sent while the others are half-open or up.
    for _ in 0..3 {
        sim.initiate();
    }
    sim.settle();
    assert_eq!(sim.ike_up(0), 5);
    assert_eq!(sim.ike_up(1), 5);
    assert_eq!(sim.ike_down(1), 0, "the responder dropped an IKE SA");
    assert_eq!(sim.ep[0].ike_sa_count(), 5);
    assert_eq!(sim.ep[1].ike_sa_count(), 5);
    assert_eq!(sim.children_up(1).len(), 5);
}

/// After the only IKE SA is gone, the next one claims INITIAL_CONTACT again (a restarted peer's recovery
/// depends on it): the responder's stale SA goes when the new one comes up.
#[test]
fn a_fresh_endpoint_claims_initial_contact() {
    let (a, b) = pair(&["aes128-sha256-x25519"], &["aes128gcm16"]);
    let mut sim = Sim::new(a.clone(), b, 8);
    sim.initiate();
    sim.settle();
    assert_eq!(sim.ep[1].ike_sa_count(), 1);
    // The initiator restarts: a new endpoint without state.
    sim.ep[0] = netveil_ike::machine::Endpoint::new(
        vec![a],
        Box::new(netveil_crypto::rand::SeededRng::new(9)),
        sim.now,
    );
    sim.initiate();
    sim.settle();
    assert_eq!(sim.ep[1].ike_sa_count(), 1, "the stale SA stayed");
    assert_eq!(sim.ike_down(1), 1);
}
