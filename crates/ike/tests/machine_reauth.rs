//! Reauthentication of the IKE SA (swanctl's `reauth_time`, make-before-break) between two endpoints: a new IKE
//! SA with a full IKE_SA_INIT and IKE_AUTH re-creates every CHILD_SA, and only then does the old one go; a peer
//! that does not answer leaves the old SA up until its expiry.

mod machine_common;

use std::collections::BTreeMap;
use std::time::Duration;

use machine_common::*;
use netveil_ike::event::{Event, Failure, IkeSaId};

const REAUTH: Duration = Duration::from_secs(3600);
const OVER: Duration = Duration::from_secs(360);

/// A pair with two children ("net" and "web"); `reauth` on side `who` (0: A, the initiator; 1: B).
fn sim(who: usize, seed: u64) -> Sim {
    let esp = ["aes256gcm16-x25519"];
    let (mut a, mut b) = pair(&["aes128gcm16-prfsha256-x25519"], &esp);
    a.children
        .push(child("web", &["10.3.0.0/24"], &["10.4.0.0/24"], &esp));
    b.children
        .push(child("web", &["10.4.0.0/24"], &["10.3.0.0/24"], &esp));
    // Children rekeyed later than the IKE SA is reauthenticated (twice), so that the events are the reauth's.
    for c in a.children.iter_mut().chain(b.children.iter_mut()) {
        c.lifetimes.rekey = Duration::from_secs(3 * 3600);
        c.lifetimes.life = Duration::from_secs(4 * 3600);
    }
    let c = if who == 0 { &mut a } else { &mut b };
    c.reauth = REAUTH;
    c.lifetimes.life = c.lifetimes.rekey + OVER;
    let mut sim = Sim::new(a, b, seed);
    sim.initiate();
    sim.settle();
    let id = sim.ep[0].status(sim.now)[0].id;
    sim.ep[0].create_child(id, "web", sim.now).unwrap();
    sim.settle();
    assert_eq!(sim.children_up(0).len(), 2);
    assert_eq!(sim.children_up(1).len(), 2);
    sim
}

fn exchange(bytes: &[u8]) -> u8 {
    bytes[18]
}

/// Walks an endpoint's events: at no point after both children came up is a child name without an installed
/// CHILD_SA. Returns the order of the events after `from` as short labels.
fn walk(sim: &Sim, i: usize, from: usize) -> Vec<String> {
    let mut installed: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let mut both = false;
    let mut order = Vec::new();
    for (n, e) in sim.events[i].iter().enumerate() {
        let label = match e {
            Event::IkeSaUp { ike_sa, .. } => format!("up {}", ike_sa.0),
            Event::IkeSaDown { ike_sa, .. } => format!("down {}", ike_sa.0),
            Event::ChildSaUp(c) => {
                installed
                    .entry(c.child.clone())
                    .or_default()
                    .push(c.inbound.spi);
                format!("child up {} {}", c.ike_sa.0, c.child)
            }
            Event::ChildSaDown {
                ike_sa,
                child,
                inbound_spi,
                ..
            } => {
                installed
                    .get_mut(child)
                    .expect("a child that came up")
                    .retain(|s| s != inbound_spi);
                format!("child down {} {child}", ike_sa.0)
            }
            Event::Failed { failure, .. } => format!("failed {failure:?}"),
        };
        both |= installed.len() == 2;
        if both {
            for (name, spis) in &installed {
                assert!(
                    !spis.is_empty(),
                    "ep {i}: no CHILD_SA of {name} after event {n} {label}: {:?}",
                    sim.events[i]
                );
            }
        }
        if n >= from {
            order.push(label);
        }
    }
    order
}

fn reauth_from(who: usize) {
    let mut sim = sim(who, 7 + who as u64);
    let before: Vec<_> = (0..2).map(|i| sim.ep[i].status(sim.now)).collect();
    let old: Vec<IkeSaId> = before.iter().map(|s| s[0].id).collect();
    let marks = [sim.events[0].len(), sim.events[1].len()];
    let sent = sim.sent[who].len();
    sim.run_for(REAUTH - Duration::from_secs(1));
    assert_eq!(
        [sim.events[0].len(), sim.events[1].len()],
        marks,
        "nothing before reauth_time"
    );
    sim.run_for(Duration::from_secs(2));
    // A full IKE_SA_INIT (new key exchange) and IKE_AUTH from the side with reauth_time: no CREATE_CHILD_SA rekey
    // of the IKE SA.
    let kinds: Vec<u8> = sim.sent[who][sent..]
        .iter()
        .map(|t| exchange(&t.bytes))
        .collect();
    assert_eq!(kinds.iter().filter(|&&k| k == 34).count(), 1, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|&&k| k == 35).count(), 1, "{kinds:?}");
    for i in 0..2 {
        let order = walk(&sim, i, marks[i]);
        let st = sim.ep[i].status(sim.now);
        assert_eq!(st.len(), 1, "ep {i}: the old IKE SA is gone: {st:?}");
        let new = st[0].id;
        assert_ne!(new, old[i]);
        assert_eq!(st[0].state, "ESTABLISHED");
        assert_eq!(
            st[0].initiator,
            i == who,
            "ep {i}: who reauthenticated initiated"
        );
        assert_ne!(
            (st[0].spi_i, st[0].spi_r),
            (before[i][0].spi_i, before[i][0].spi_r),
            "ep {i}: fresh SPIs"
        );
        // Make-before-break: the new SA and both its children, then the old children and the old SA.
        let (n, o) = (new.0, old[i].0);
        let expected = [
            format!("up {n}"),
            format!("child up {n} net"),
            format!("child up {n} web"),
            format!("child down {o} net"),
            format!("child down {o} web"),
            format!("down {o}"),
        ];
        let mut o_sorted = order.clone();
        // The old SA's two children go in one DELETE: either order.
        o_sorted[3..5].sort();
        assert_eq!(o_sorted, expected, "ep {i}");
        // The children again, with their selectors, new SPIs and keys.
        let ups = sim.children_up(i);
        assert_eq!(ups.len(), 4);
        for (old_c, new_c) in ups[..2].iter().zip(&ups[2..]) {
            assert_eq!(new_c.ike_sa, new);
            assert_eq!(
                (&old_c.child, &old_c.local_ts, &old_c.remote_ts),
                (&new_c.child, &new_c.local_ts, &new_c.remote_ts)
            );
            assert_ne!(old_c.inbound.spi, new_c.inbound.spi);
            assert_ne!(old_c.outbound.spi, new_c.outbound.spi);
            assert_ne!(old_c.inbound.encr_key, new_c.inbound.encr_key);
            assert_eq!(new_c.replaces, None);
        }
        assert_eq!(st[0].children.len(), 2);
        assert!(sim.failures(i).is_empty(), "{:?}", sim.failures(i));
    }
    let (a, b) = (sim.children_up(0), sim.children_up(1));
    assert_crosswise(a[2], b[2]);
    assert_crosswise(a[3], b[3]);
    let (sa, sb) = (&sim.ep[0].status(sim.now)[0], &sim.ep[1].status(sim.now)[0]);
    assert_eq!((sa.spi_i, sa.spi_r), (sb.spi_i, sb.spi_r));
    // And again a reauth_time later (the new SA has its own timer), without the other side ever starting one.
    let marks = [sim.events[0].len(), sim.events[1].len()];
    sim.run_for(REAUTH);
    for (i, mark) in marks.iter().enumerate() {
        let order = walk(&sim, i, *mark);
        assert_eq!(order.len(), 6, "ep {i}: {order:?}");
        assert_eq!(sim.ep[i].status(sim.now).len(), 1);
    }
}

#[test]
fn the_initiator_reauthenticates_make_before_break() {
    reauth_from(0);
}

#[test]
fn the_responder_reauthenticates_make_before_break() {
    reauth_from(1);
}

#[test]
fn without_reauth_time_the_ike_sa_stays() {
    let esp = ["aes256gcm16-x25519"];
    let (a, b) = pair(&["aes128gcm16-prfsha256-x25519"], &esp);
    let mut sim = Sim::new(a, b, 3);
    sim.initiate();
    sim.settle();
    let id = sim.ep[0].status(sim.now)[0].id;
    sim.run_for(Duration::from_secs(3 * 3600));
    assert_eq!(sim.ep[0].status(sim.now)[0].id, id);
    assert_eq!(sim.ike_up(0), 1);
}

#[test]
fn an_unanswered_reauth_leaves_the_old_sa_until_its_expiry() {
    let mut sim = sim(0, 11);
    let old = sim.ep[0].status(sim.now)[0].id;
    let mark = sim.events[0].len();
    sim.run_for(REAUTH - Duration::from_secs(1));
    // The peer is gone for new exchanges: nothing it sends arrives.
    sim.faults.blackhole[1] = true;
    // Every retransmission of the IKE_SA_INIT (165 s with the defaults), then some.
    sim.run_for(Duration::from_secs(200));
    let failures = sim.failures(0);
    assert_eq!(
        failures,
        vec![&Failure::Timeout, &Failure::ReauthFailed],
        "the new SA's failure, then the reauthentication's"
    );
    let named = sim.events[0][mark..]
        .iter()
        .find_map(|e| match e {
            Event::Failed {
                failure: Failure::ReauthFailed,
                ike_sa,
                ..
            } => *ike_sa,
            _ => None,
        })
        .unwrap();
    assert_eq!(named, old, "the failure names the SA that stays");
    let st = sim.ep[0].status(sim.now);
    assert_eq!(st.len(), 1);
    assert_eq!((st[0].id, st[0].state), (old, "ESTABLISHED"));
    assert_eq!(st[0].children.len(), 2);
    assert_eq!(sim.child_down(0), 0, "no child went");
    assert_eq!(sim.ike_up(0), 1, "no new IKE SA came up");
    walk(&sim, 0, 0);
    // No second try; at reauth_time + over_time the old SA goes (a DELETE, unanswered here).
    let kinds = |sim: &Sim| -> Vec<u8> { sim.sent[0].iter().map(|t| exchange(&t.bytes)).collect() };
    let inits = kinds(&sim).iter().filter(|&&k| k == 34).count();
    sim.run_for(OVER - Duration::from_secs(200) - Duration::from_secs(1));
    assert_eq!(sim.ep[0].status(sim.now).len(), 1, "up until its expiry");
    assert_eq!(kinds(&sim).iter().filter(|&&k| k == 34).count(), inits);
    sim.run_for(Duration::from_secs(2));
    assert_eq!(
        sim.ep[0].status(sim.now)[0].state,
        "DELETING",
        "expired: deleted"
    );
    sim.run_for(Duration::from_secs(200));
    assert!(sim.ep[0].status(sim.now).is_empty());
    assert_eq!(sim.child_down(0), 2);
}

#[test]
fn an_ike_rekey_keeps_the_reauth_time() {
    let mut sim = sim(0, 5);
    let first = sim.ep[0].status(sim.now)[0].id;
    let id = sim.ep[0].status(sim.now)[0].id;
    sim.run_for(Duration::from_secs(1000));
    sim.ep[0].rekey_ike(id, sim.now).unwrap();
    sim.settle();
    let rekeyed = sim.ep[0].status(sim.now)[0].id;
    assert_ne!(rekeyed, first);
    assert_eq!(sim.ike_up(0), 2);
    let mark = sim.events[0].len();
    // Due an hour after the first authentication, not an hour after the rekey.
    sim.run_for(REAUTH - Duration::from_secs(1000) + Duration::from_secs(1));
    let order = walk(&sim, 0, mark);
    assert_eq!(order.len(), 6, "{order:?}");
    assert_eq!(order[5], format!("down {}", rekeyed.0));
}

/// Both sides with the same `reauth_time` and no jitter start their reauthentications at the same moment: each
/// side's new IKE SA comes up (twins), one of them (the one with the lowest SPI, deleted by its initiator) goes, and
/// so does the old one. Period after period one IKE SA with its child is left on each side (without the rule, both
/// twins were reauthenticated by both sides: 2, 4, 8, 16 IKE SAs), the child is installed at every moment, and
/// nothing is reported as failed.
#[test]
fn simultaneous_reauthentication_from_both_sides_keeps_one_ike_sa() {
    let esp = ["aes256gcm16-x25519"];
    let (mut a, mut b) = pair(&["aes128gcm16-prfsha256-x25519"], &esp);
    for c in [&mut a, &mut b] {
        c.reauth = REAUTH;
        c.lifetimes.life = c.lifetimes.rekey + OVER;
        for ch in c.children.iter_mut() {
            ch.lifetimes.rekey = Duration::from_secs(30 * 3600);
            ch.lifetimes.life = Duration::from_secs(31 * 3600);
        }
    }
    let mut sim = Sim::new(a, b, 11);
    sim.initiate();
    sim.settle();
    let mut deleted_by = [0, 0];
    for period in 0..4 {
        let sent = [sim.sent[0].len(), sim.sent[1].len()];
        sim.run_for(REAUTH + Duration::from_secs(5));
        for i in 0..2 {
            let st = sim.ep[i].status(sim.now);
            assert_eq!(st.len(), 1, "period {period}, ep {i}: {st:?}");
            assert_eq!(st[0].children.len(), 1, "period {period}, ep {i}");
            assert_eq!(st[0].state, "ESTABLISHED");
            // Both sides started one: two IKE_SA_INITs in the period, one from each.
            let inits = sim.sent[i][sent[i]..]
                .iter()
                .filter(|t| exchange(&t.bytes) == 34 && t.bytes[19] & 0x20 == 0)
                .count();
            assert_eq!(inits, 1, "period {period}, ep {i}: IKE_SA_INIT requests");
            deleted_by[i] += sim.sent[i][sent[i]..]
                .iter()
                .filter(|t| exchange(&t.bytes) == 37 && t.bytes[19] & 0x20 == 0)
                .count();
        }
        let (sa, sb) = (&sim.ep[0].status(sim.now)[0], &sim.ep[1].status(sim.now)[0]);
        assert_eq!(
            (sa.spi_i, sa.spi_r),
            (sb.spi_i, sb.spi_r),
            "the same IKE SA is left"
        );
    }
    // Each period: the old SA and one twin deleted (INFORMATIONAL requests; the DELETEs of both sides for the
    // old one may cross).
    assert!(deleted_by[0] + deleted_by[1] >= 8, "{deleted_by:?}");
    for i in 0..2 {
        assert!(sim.failures(i).is_empty(), "ep {i}: {:?}", sim.failures(i));
        // The child was installed at every moment after it first came up.
        let mut installed: Vec<u32> = Vec::new();
        for e in &sim.events[i] {
            match e {
                Event::ChildSaUp(c) => installed.push(c.inbound.spi),
                Event::ChildSaDown { inbound_spi, .. } => {
                    installed.retain(|s| s != inbound_spi);
                    assert!(
                        !installed.is_empty(),
                        "ep {i}: no CHILD_SA installed after {e:?}"
                    );
                }
                _ => {}
            }
        }
    }
}

/// A `reauth_time` below the twin rule's old 30 s window (the strongSwan interop test uses 6 s): the new IKE SA
/// started 6 s after the old one came up is no twin of it, whatever their SPIs. With the window rule, the one with
/// the lowest SPI went: the new one about half the time, and the old one was then deleted too, leaving nothing.
/// Over many seeds (SPIs), from either side, the new SA replaces the old one every period.
#[test]
fn a_short_reauth_time_replaces_the_old_sa_whatever_the_spis() {
    let short = Duration::from_secs(6);
    for seed in 0..24u64 {
        let who = (seed % 2) as usize;
        let esp = ["aes256gcm16-x25519"];
        let (mut a, mut b) = pair(&["aes128gcm16-prfsha256-x25519"], &esp);
        let c = if who == 0 { &mut a } else { &mut b };
        c.reauth = short;
        c.lifetimes.rand = Duration::ZERO;
        c.lifetimes.life = c.lifetimes.rekey + OVER;
        let mut sim = Sim::new(a, b, 100 + seed);
        sim.initiate();
        sim.settle();
        let mut last = sim.ep[who].status(sim.now)[0].id;
        for period in 0..3 {
            sim.run_for(short + Duration::from_secs(1));
            for i in 0..2 {
                let st = sim.ep[i].status(sim.now);
                assert_eq!(st.len(), 1, "seed {seed}, period {period}, ep {i}: {st:?}");
                assert_eq!(
                    st[0].state, "ESTABLISHED",
                    "seed {seed}, period {period}, ep {i}"
                );
                assert_eq!(
                    st[0].children.len(),
                    1,
                    "seed {seed}, period {period}, ep {i}"
                );
            }
            let now = sim.ep[who].status(sim.now)[0].id;
            assert_ne!(now, last, "seed {seed}, period {period}: reauthenticated");
            last = now;
        }
        for i in 0..2 {
            assert!(
                sim.failures(i).is_empty(),
                "seed {seed}, ep {i}: {:?}",
                sim.failures(i)
            );
        }
    }
}
