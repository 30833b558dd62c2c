use super::in_process::exchange_in_process;
use super::measure::install_times;
use super::suites::{initiator_conn, suite};
use super::*;

#[test]
fn every_suite_has_a_proposal_both_sides_parse() {
    for name in SUITES {
        let s = suite(name).unwrap();
        for side in 0..2 {
            if s.cert {
                assert!(initiator_conn(&s, side, None).is_err());
                continue;
            }
            let c = initiator_conn(&s, side, None).unwrap();
            assert_eq!(c.proposals.len(), 1);
        }
    }
    assert!(suite("psk-nope").is_none());
}

#[test]
fn the_in_process_exchange_sets_up_children() {
    let s = suite("psk-x25519").unwrap();
    let (total, resp) = exchange_in_process(&s, None, 3).unwrap();
    assert_eq!((total.len(), resp.len()), (3, 3));
    assert!(total.iter().zip(&resp).all(|(t, r)| *r > 0.0 && r < t));
}

#[test]
fn install_times_come_from_the_drivers_child_line() {
    let log = "2026-11-26T02:00:00Z INFO ike: CHILD_SA net of connection site installed (AES_GCM_16_128, SPIs \
               in 0xc1 out 0xc2, SAs ike-1-in and ike-1-out, UDP-encapsulated, install 12.500 ms)\n\
               INFO ike: IKE SA 1 of connection site established, install 3 ms)\n";
    assert_eq!(install_times(log), vec![12.5]);
}

#[test]
fn goals_compare_netveil_with_strongswan_of_the_same_suite() {
    let mut n = IkeRow::empty("netveil ike psk-x25519".into());
    n.median_ms = 0.8;
    n.handshakes_per_s = 900.0;
    n.bytes_per_sa = 5000.0;
    let mut w = IkeRow::empty("strongswan ike psk-x25519".into());
    w.handshakes_per_s = 400.0;
    w.bytes_per_sa = 9000.0;
    let mut e = IkeRow::empty("netveil ike ecdsa-p256".into());
    e.cannot_run = Some("measurement failed: no charon".into());
    let g = goals(&[n, w, e]);
    assert_eq!(g.len(), 3, "{g:?}");
    assert!(g[0].ends_with(": met"), "{}", g[0]);
    assert!(g[1].contains("2.25x: met"), "{}", g[1]);
    assert!(g[2].ends_with("NOT met"), "{}", g[2]);
    let t = render(&[IkeRow::empty("x".into())]);
    assert!(t.lines().count() == 2);
}
