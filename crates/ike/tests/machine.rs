//! The state machine between two endpoints over an in-memory link: IKE_SA_INIT + IKE_AUTH with PSK for several
//! suites, the CHILD_SA's keys seen crosswise, failures with their reasons, INVALID_KE and COOKIE, loss,
//! duplication and reordering, timeouts, DELETE and DPD.

mod machine_common;

use std::time::Duration;

use machine_common::*;
use netveil_ike::config::Mode;
use netveil_ike::event::{Event, Failure};
use netveil_ike::machine::Limits;
use netveil_ike::message::{ExchangeType, Message, NotifyType};

fn establish(ike: &str, esp: &str, seed: u64) -> Sim {
    let (a, b) = pair(&[ike], &[esp]);
    let mut sim = Sim::new(a, b, seed);
    sim.initiate();
    sim.settle();
    sim
}

fn assert_up(sim: &Sim) {
    assert_eq!(sim.ike_up(0), 1, "A: {:?}", sim.events[0]);
    assert_eq!(sim.ike_up(1), 1, "B: {:?}", sim.events[1]);
    let (ca, cb) = (sim.children_up(0), sim.children_up(1));
    assert_eq!((ca.len(), cb.len()), (1, 1));
    assert_crosswise(ca[0], cb[0]);
    assert!(sim.failures(0).is_empty() && sim.failures(1).is_empty());
}

#[test]
fn establishes_with_every_group_and_ike_suite() {
    for (ike, esp) in [
        ("aes256gcm16-prfsha256-x25519", "aes256gcm16"),
        ("aes128-sha256-modp2048", "aes128-sha256"),
        ("aes256-sha384-x25519", "aes128gcm16-esn"),
        ("aes128gcm16-prfsha384-modp3072", "aes256-sha1"),
        ("aes256gcm16-prfsha256-ecp256", "aes256gcm16"),
        ("aes256-sha384-ecp384", "aes128-sha256"),
    ] {
        let sim = establish(ike, esp, 1);
        assert_up(&sim);
        let (a, b) = (sim.children_up(0)[0], sim.children_up(1)[0]);
        assert_eq!(a.proposal.to_string(), esp, "{ike}");
        assert_eq!(a.local_ts, vec![ts("10.1.0.0/16")]);
        assert_eq!(a.remote_ts, vec![ts("10.2.0.0/16")]);
        assert_eq!((a.connection.as_str(), b.connection.as_str()), ("ab", "ba"));
        assert_eq!(a.mode, Mode::Tunnel);
        assert!(!a.udp_encap);
        // Key lengths as the suite wants: AES-GCM-256 = 32 + 4 salt, AES-CBC-128 = 16 with a 32-byte HMAC key.
        let st = sim.ep[0].status(sim.now);
        assert_eq!(st.len(), 1);
        assert_eq!(st[0].state, "ESTABLISHED");
        assert_eq!(st[0].children.len(), 1);
        let ours =
            netveil_ike::proposal::Proposal::parse(netveil_ike::proposal::Protocol::Ike, ike)
                .unwrap();
        assert_eq!(
            st[0].proposal,
            ours.to_string(),
            "the responder chose our only proposal"
        );
        // Exactly 4 datagrams: no retransmission on a clean link.
        assert_eq!((sim.sent[0].len(), sim.sent[1].len()), (2, 2), "{ike}");
    }
}

#[test]
fn child_keys_have_the_suites_lengths() {
    let sim = establish("aes256gcm16-prfsha256-x25519", "aes256gcm16", 2);
    let a = sim.children_up(0)[0];
    assert_eq!(a.inbound.encr_key.len(), 36);
    assert!(a.inbound.integ_key.is_empty());
    let sim = establish("aes128-sha256-modp2048", "aes128-sha256", 2);
    let a = sim.children_up(0)[0];
    assert_eq!(
        (a.inbound.encr_key.len(), a.inbound.integ_key.len()),
        (16, 32)
    );
}

#[test]
fn the_same_seed_gives_the_same_transcript() {
    let s1 = establish("aes256-sha256-x25519", "aes256gcm16", 7);
    let s2 = establish("aes256-sha256-x25519", "aes256gcm16", 7);
    let s3 = establish("aes256-sha256-x25519", "aes256gcm16", 8);
    assert_eq!(s1.sent, s2.sent);
    assert_ne!(s1.sent[0][0].bytes, s3.sent[0][0].bytes);
}

#[test]
fn spis_and_nonces_are_fresh_and_valid() {
    let sim = establish("aes256-sha256-x25519", "aes256gcm16", 3);
    let init = Message::parse(&sim.sent[0][0].bytes).unwrap();
    assert_ne!(init.header.initiator_spi, 0);
    assert_eq!(init.header.message_id, 0);
    let resp = Message::parse(&sim.sent[1][0].bytes).unwrap();
    assert_ne!(resp.header.responder_spi, 0);
    let (a, b) = (sim.children_up(0)[0], sim.children_up(1)[0]);
    assert!(a.inbound.spi >= 256 && b.inbound.spi >= 256);
    // Our IKE_SA_INIT carries what RFC 7296 and strongSwan expect.
    let types: Vec<NotifyType> = init.notifies().map(|n| n.notify_type).collect();
    assert!(types.contains(&NotifyType::NAT_DETECTION_SOURCE_IP));
    assert!(types.contains(&NotifyType::NAT_DETECTION_DESTINATION_IP));
    assert!(types.contains(&NotifyType::SIGNATURE_HASH_ALGORITHMS));
    assert!(!types.contains(&NotifyType::IKEV2_FRAGMENTATION_SUPPORTED));
}

#[test]
fn establishes_through_loss_duplication_and_reordering() {
    let mut retransmits = 0;
    for seed in 0..12 {
        let (a, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
        let mut sim = Sim::new(a, b, seed);
        sim.faults = Faults {
            loss: 200,
            dup: 300,
            reorder: 300,
            blackhole: [false; 2],
        };
        sim.initiate();
        sim.run_for(Duration::from_secs(160));
        assert_eq!(
            sim.ike_up(0),
            1,
            "seed {seed}: {:?} {:?} {:?}",
            sim.events,
            sim.ep[0].counters(),
            sim.ep[1].counters()
        );
        assert_up(&sim);
        retransmits += sim.ep[0].counters().retransmits;
        // Duplicates never produce a second SA: the responder resends its cached answer.
        assert_eq!(sim.ep[1].ike_sa_count(), 1);
    }
    assert!(retransmits > 0, "the faults made the initiator retransmit");
}

#[test]
fn a_duplicated_ike_auth_is_answered_from_the_cache() {
    let (a, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    let mut sim = Sim::new(a, b, 4);
    sim.faults.dup = 1000;
    sim.initiate();
    sim.settle();
    assert_up(&sim);
    let c = sim.ep[1].counters();
    assert!(c.responses_resent >= 2, "{c:?}");
    // Every response B sent again is byte for byte the first one.
    let auth_resps: Vec<&Vec<u8>> = sim.sent[1]
        .iter()
        .filter(|t| {
            Message::parse(&t.bytes).unwrap().header.exchange_type == ExchangeType::IKE_AUTH
        })
        .map(|t| &t.bytes)
        .collect();
    assert!(auth_resps.len() >= 2);
    assert!(auth_resps.iter().all(|b| *b == auth_resps[0]));
}

#[test]
fn wrong_psk_fails_authentication_on_both_sides() {
    let (a, mut b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    b.psk = Some(netveil_ike::keys::Secret::new(b"another psk"));
    let mut sim = Sim::new(a, b, 5);
    sim.initiate();
    sim.settle();
    assert_eq!(sim.ike_up(0) + sim.ike_up(1), 0);
    assert!(sim.children_up(0).is_empty() && sim.children_up(1).is_empty());
    assert_eq!(
        sim.failures(1),
        vec![&Failure::AuthenticationFailed {
            id: "a.example".into(),
            by_peer: false
        }]
    );
    assert_eq!(
        sim.failures(0),
        vec![&Failure::AuthenticationFailed {
            id: "a.example".into(),
            by_peer: true
        }]
    );
    assert_eq!(sim.ep[0].ike_sa_count() + sim.ep[1].ike_sa_count(), 0);
    assert_eq!(sim.ep[1].half_open(), 0);
}

#[test]
fn an_ike_proposal_mismatch_names_both_lists() {
    let (a, _) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    let (_, b) = pair(&["aes128gcm16-prfsha256-modp2048"], &["aes256gcm16"]);
    let mut sim = Sim::new(a, b, 6);
    sim.initiate();
    sim.settle();
    assert_eq!(
        sim.failures(1),
        vec![&Failure::NoProposalChosen {
            ours: vec!["aes128gcm16-prfsha256-modp2048".into()],
            theirs: vec!["aes256-sha256-prfsha256-x25519".into()],
        }]
    );
    // The initiator names its own list (the responder does not send its own).
    assert_eq!(
        sim.failures(0),
        vec![&Failure::NoProposalChosen {
            ours: vec!["aes256-sha256-prfsha256-x25519".into()],
            theirs: vec![],
        }]
    );
    assert_eq!(sim.ep[1].half_open(), 0, "no state for a refused proposal");
}

#[test]
fn an_esp_proposal_mismatch_keeps_the_ike_sa() {
    let (a, _) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    let (_, b) = pair(&["aes256-sha256-x25519"], &["aes128-sha1"]);
    let mut sim = Sim::new(a, b, 6);
    sim.initiate();
    sim.settle();
    assert_eq!((sim.ike_up(0), sim.ike_up(1)), (1, 1));
    assert!(sim.children_up(0).is_empty() && sim.children_up(1).is_empty());
    assert_eq!(
        sim.failures(1),
        vec![&Failure::NoProposalChosen {
            ours: vec!["aes128-sha1".into()],
            theirs: vec!["aes256gcm16".into()],
        }]
    );
    assert_eq!(
        sim.failures(0),
        vec![&Failure::NoProposalChosen {
            ours: vec!["aes256gcm16".into()],
            theirs: vec![],
        }]
    );
}

#[test]
fn disjoint_traffic_selectors_are_ts_unacceptable() {
    let (a, mut b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    b.children[0].remote_ts = vec![ts("192.168.0.0/24")];
    let mut sim = Sim::new(a, b, 7);
    sim.initiate();
    sim.settle();
    assert_eq!((sim.ike_up(0), sim.ike_up(1)), (1, 1));
    assert!(sim.children_up(0).is_empty() && sim.children_up(1).is_empty());
    match sim.failures(1)[..] {
        [Failure::TsUnacceptable { ours, theirs }] => {
            assert!(ours.contains(&ts("192.168.0.0/24")));
            assert_eq!(theirs, &vec![ts("10.1.0.0/16"), ts("10.2.0.0/16")]);
        }
        ref f => panic!("{f:?}"),
    }
    assert_eq!(
        sim.failures(0),
        vec![&Failure::TsUnacceptable {
            ours: vec![ts("10.1.0.0/16"), ts("10.2.0.0/16")],
            theirs: vec![],
        }]
    );
}

#[test]
fn traffic_selectors_are_narrowed_to_the_intersection() {
    let (a, mut b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    b.children[0].remote_ts = vec![ts("10.1.2.0/24")];
    b.children[0].local_ts = vec![ts("10.0.0.0/8")];
    let mut sim = Sim::new(a, b, 8);
    sim.initiate();
    sim.settle();
    assert_up(&sim);
    let a = sim.children_up(0)[0];
    assert_eq!(a.local_ts, vec![ts("10.1.2.0/24")]);
    assert_eq!(a.remote_ts, vec![ts("10.2.0.0/16")]);
}

#[test]
fn transport_mode_when_both_want_it() {
    let (mut a, mut b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    a.children[0].mode = Mode::Transport;
    b.children[0].mode = Mode::Transport;
    let mut sim = Sim::new(a.clone(), b, 9);
    sim.initiate();
    sim.settle();
    assert_up(&sim);
    assert_eq!(sim.children_up(0)[0].mode, Mode::Transport);
    // The responder configured for tunnel mode does not echo the notify: tunnel.
    let (_, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    let mut sim = Sim::new(a, b, 9);
    sim.initiate();
    sim.settle();
    assert_up(&sim);
    assert_eq!(sim.children_up(0)[0].mode, Mode::Tunnel);
}

#[test]
fn invalid_ke_payload_makes_the_initiator_retry_with_the_asked_group() {
    let (a, _) = pair(&["aes256-sha256-x25519-modp2048"], &["aes256gcm16"]);
    let (_, b) = pair(&["aes256-sha256-modp2048"], &["aes256gcm16"]);
    let mut sim = Sim::new(a, b, 10);
    sim.initiate();
    sim.settle();
    assert_up(&sim);
    let first = Message::parse(&sim.sent[1][0].bytes).unwrap();
    let n: Vec<_> = first.notifies().collect();
    assert_eq!(n.len(), 1);
    assert_eq!(n[0].invalid_ke_group(), Some(14));
    // The retry keeps SPIi and message id 0, with a MODP-2048 KE.
    let (r1, r2) = (
        Message::parse(&sim.sent[0][0].bytes).unwrap(),
        Message::parse(&sim.sent[0][1].bytes).unwrap(),
    );
    assert_eq!(r1.header.initiator_spi, r2.header.initiator_spi);
    assert_eq!(r2.header.message_id, 0);
    assert_eq!(
        sim.ep[0].status(sim.now)[0].proposal,
        "aes256-sha256-prfsha256-modp2048"
    );
}

#[test]
fn invalid_ke_for_a_group_we_did_not_offer_fails() {
    let (a, _) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    let (_, b) = pair(&["aes256-sha256-modp2048-x25519"], &["aes256gcm16"]);
    // B prefers MODP-2048 but accepts X25519: it selects x25519 from A's only proposal, so no INVALID_KE.
    let mut sim = Sim::new(a.clone(), b, 11);
    sim.initiate();
    sim.settle();
    assert_up(&sim);
    // A responder that only takes MODP-3072 asks for it; A never offered it: the attempt fails.
    let (_, b) = pair(&["aes256-sha256-modp3072"], &["aes256gcm16"]);
    let mut sim = Sim::new(a, b, 11);
    sim.initiate();
    sim.settle();
    assert_eq!(sim.ike_up(0), 0);
    assert!(matches!(
        sim.failures(1)[..],
        [Failure::NoProposalChosen { .. }]
    ));
}

#[test]
fn cookie_round_trip_when_the_responder_is_loaded() {
    let (a, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    let mut sim = Sim::new(a, b, 12);
    let limits = Limits {
        cookie_threshold: 0,
        ..Limits::default()
    };
    let b_ep = std::mem::replace(
        &mut sim.ep[1],
        netveil_ike::machine::Endpoint::new(
            vec![],
            Box::new(netveil_crypto::rand::SeededRng::new(0)),
            sim.now,
        ),
    );
    sim.ep[1] = b_ep.with_limits(limits);
    sim.initiate();
    sim.settle();
    assert_up(&sim);
    assert_eq!(sim.ep[1].counters().cookies_sent, 1);
    let first = Message::parse(&sim.sent[1][0].bytes).unwrap();
    assert_eq!(
        first.notifies().next().unwrap().notify_type,
        NotifyType::COOKIE
    );
    let second = Message::parse(&sim.sent[0][1].bytes).unwrap();
    let n = second.notifies().next().unwrap();
    assert_eq!(n.notify_type, NotifyType::COOKIE, "the cookie comes first");
    assert_eq!(n.data, first.notifies().next().unwrap().data);
}

#[test]
fn the_initiator_gives_up_after_its_retransmissions() {
    let (a, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    let mut sim = Sim::new(a, b, 13);
    sim.faults.blackhole = [false, true];
    sim.initiate();
    sim.run_for(Duration::from_secs(164));
    assert!(
        sim.failures(0).is_empty(),
        "not yet: 4 s * (1 + 1.8 + ... + 1.8^5) = 165 s"
    );
    sim.run_for(Duration::from_secs(2));
    assert_eq!(sim.failures(0), vec![&Failure::Timeout]);
    assert_eq!(sim.ep[0].counters().retransmits, 5);
    assert_eq!(sim.sent[0].len(), 6);
    assert_eq!(sim.ep[0].ike_sa_count(), 0);
    assert_eq!(sim.ep[0].poll_timeout(), None);
    // The responder's half-open SA expires.
    assert_eq!(sim.ep[1].half_open(), 0);
    assert_eq!(sim.ep[1].ike_sa_count(), 0);
}

#[test]
fn a_lost_ike_auth_response_times_out_then_brings_down_nothing_that_was_up() {
    let (a, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    let mut sim = Sim::new(a, b, 14);
    sim.initiate();
    // Deliver IKE_SA_INIT both ways, then cut B off.
    sim.step();
    sim.step();
    sim.faults.blackhole = [false, true];
    sim.run_for(Duration::from_secs(200));
    assert_eq!(sim.ike_up(0), 0);
    assert_eq!(sim.failures(0), vec![&Failure::Timeout]);
    assert_eq!(sim.ike_down(0), 0);
}

fn up_pair(seed: u64) -> Sim {
    let sim = establish("aes256-sha256-x25519", "aes256gcm16", seed);
    assert_up(&sim);
    sim
}

fn ike_id(sim: &Sim, i: usize) -> netveil_ike::event::IkeSaId {
    sim.ep[i].status(sim.now)[0].id
}

#[test]
fn delete_of_the_ike_sa_from_either_side_takes_everything_down() {
    for side in 0..2 {
        let mut sim = up_pair(20 + side as u64);
        let id = ike_id(&sim, side);
        sim.ep[side].terminate(id, sim.now).unwrap();
        sim.settle();
        for i in 0..2 {
            assert_eq!(
                (sim.child_down(i), sim.ike_down(i)),
                (1, 1),
                "side {side}, ep {i}"
            );
            assert_eq!(sim.ep[i].ike_sa_count(), 0);
        }
        let a = sim.children_up(0)[0].clone();
        let down = sim.events[0].iter().find_map(|e| match e {
            Event::ChildSaDown {
                inbound_spi,
                outbound_spi,
                ..
            } => Some((*inbound_spi, *outbound_spi)),
            _ => None,
        });
        assert_eq!(down, Some((a.inbound.spi, a.outbound.spi)));
    }
}

#[test]
fn delete_of_a_child_from_either_side() {
    for side in 0..2 {
        let mut sim = up_pair(30 + side as u64);
        let id = ike_id(&sim, side);
        let spi = sim.children_up(side)[0].inbound.spi;
        sim.ep[side].delete_child(id, spi, sim.now).unwrap();
        sim.settle();
        for i in 0..2 {
            assert_eq!(
                (sim.child_down(i), sim.ike_down(i)),
                (1, 0),
                "side {side}, ep {i}"
            );
            assert_eq!(sim.ep[i].status(sim.now)[0].children.len(), 0);
        }
    }
}

#[test]
fn terminate_of_an_unknown_sa_is_an_error() {
    let mut sim = up_pair(40);
    let now = sim.now;
    assert!(sim.ep[0]
        .terminate(netveil_ike::event::IkeSaId(999), now)
        .is_err());
    assert!(sim.ep[0].initiate("nope", None, now).is_err());
    assert!(sim.ep[0].initiate("ab", Some("nope"), now).is_err());
}

#[test]
fn dpd_checks_liveness_and_finds_a_dead_peer() {
    let (mut a, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    a.dpd_delay = Some(Duration::from_secs(30));
    let mut sim = Sim::new(a, b, 50);
    sim.initiate();
    sim.settle();
    assert_up(&sim);
    let before = sim.sent[0].len();
    sim.run_for(Duration::from_secs(31));
    assert_eq!(sim.sent[0].len(), before + 1, "one liveness check");
    assert_eq!(sim.sent[1].len(), 3, "answered");
    assert_eq!(sim.ike_down(0), 0);
    sim.run_for(Duration::from_secs(31));
    assert_eq!(sim.sent[0].len(), before + 2, "another after 30 s more");
    // The peer dies: the next check times out and everything goes.
    sim.faults.blackhole = [false, true];
    sim.run_for(Duration::from_secs(300));
    assert_eq!(sim.failures(0), vec![&Failure::Timeout]);
    assert_eq!((sim.child_down(0), sim.ike_down(0)), (1, 1));
}

#[test]
fn esp_traffic_postpones_dpd() {
    let (mut a, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    a.dpd_delay = Some(Duration::from_secs(30));
    let mut sim = Sim::new(a, b, 51);
    sim.initiate();
    sim.settle();
    let id = ike_id(&sim, 0);
    let before = sim.sent[0].len();
    for _ in 0..5 {
        sim.run_for(Duration::from_secs(20));
        let now = sim.now;
        sim.ep[0].peer_traffic(id, now);
    }
    assert_eq!(
        sim.sent[0].len(),
        before,
        "no liveness check while ESP comes in"
    );
    sim.run_for(Duration::from_secs(31));
    assert_eq!(sim.sent[0].len(), before + 1);
}

/// The same by CHILD_SA (what the daemon reports: the inbound SAs that received packets), and only for the IKE SA
/// that holds the child: an unknown SPI postpones nothing.
#[test]
fn esp_traffic_by_child_postpones_dpd() {
    let (mut a, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    a.dpd_delay = Some(Duration::from_secs(30));
    let mut sim = Sim::new(a, b, 52);
    sim.initiate();
    sim.settle();
    let spi = sim.ep[0].status(sim.now)[0].children[0].inbound_spi;
    let before = sim.sent[0].len();
    for _ in 0..5 {
        sim.run_for(Duration::from_secs(20));
        let now = sim.now;
        sim.ep[0].child_traffic(&[spi], now);
    }
    assert_eq!(
        sim.sent[0].len(),
        before,
        "no liveness check while ESP comes in"
    );
    for _ in 0..2 {
        sim.run_for(Duration::from_secs(20));
        let now = sim.now;
        sim.ep[0].child_traffic(&[spi ^ 1], now);
    }
    assert_eq!(
        sim.sent[0].len(),
        before + 1,
        "another SA's traffic says nothing of this peer"
    );
}

#[test]
fn the_endpoint_can_move_between_threads() {
    fn send<T: Send>() {}
    send::<netveil_ike::machine::Endpoint>();
}

#[test]
fn encap_moves_to_port_4500_and_claims_nat() {
    let (mut a, b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    a.encap = true;
    let mut sim = Sim::new(a, b, 60);
    sim.initiate();
    sim.settle();
    assert_up(&sim);
    assert_eq!(sim.sent[0][0].remote.port(), 500);
    assert_eq!(
        (sim.sent[0][1].local.port(), sim.sent[0][1].remote.port()),
        (4500, 4500)
    );
    assert_eq!(
        sim.sent[1][1].local.port(),
        4500,
        "B answers where the request came from"
    );
    let (ca, cb) = (sim.children_up(0)[0], sim.children_up(1)[0]);
    assert!(ca.udp_encap && cb.udp_encap, "B saw the faked NAT too");
    assert_eq!(ca.remote, addr(B, 4500));
    assert_eq!(cb.remote, addr(A, 4500));
    assert!(sim.ep[1].status(sim.now)[0].nat);
}

/// `status` shows the peer's identity as it authenticated where the configuration accepts any (`remote.id =
/// %any`, as a road-warrior responder has it), and the configured one otherwise.
#[test]
fn status_shows_the_authenticated_peer_id_for_any() {
    let (a, mut b) = pair(&["aes256-sha256-x25519"], &["aes256gcm16"]);
    b.remote.id = netveil_ike::config::Identity::Any;
    let mut sim = Sim::new(a, b, 53);
    sim.initiate();
    sim.settle();
    assert_up(&sim);
    let now = sim.now;
    let (sa, sb) = (&sim.ep[0].status(now)[0], &sim.ep[1].status(now)[0]);
    assert_eq!(
        sb.remote_id, "a.example",
        "B accepts %any: shows who authenticated"
    );
    assert_eq!(sb.local_id, "b.example");
    assert_eq!(sa.remote_id, "b.example", "A's configured id");
}
