//! How connections meet IKE SAs (issue 40), two endpoints over the in-memory link: the children of one connection
//! share its IKE SA (a second child asked for while the IKE SA is still being set up waits for it, and fails with
//! it), INITIAL_CONTACT goes only with the first IKE SA to a peer, an initiator that refuses the responder's
//! IKE_AUTH answer tells the responder (which drops the SA it had up), and a responder picks the connection that
//! fits the peer's identity best, not the first listed.

mod machine_common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use machine_common::*;
use netveil_crypto::rand::SeededRng; // check-rng: allow (tests)
use netveil_crypto::sig::PrivateKey;
use netveil_ike::cert::{parse_dn, CertFailure, Certificate};
use netveil_ike::config::{AuthMethod, AuthRound, Connection, Identity, PubKeyCreds};
use netveil_ike::event::{Event, Failure};
use netveil_ike::keys::Secret;
use netveil_ike::machine::{Endpoint, Started};

const IKE: &str = "aes128gcm16-prfsha256-x25519";
const IKE_AUTH: u8 = 35;
const CREATE_CHILD_SA: u8 = 36;
const INFORMATIONAL: u8 = 37;

/// A's and B's connections with three children each: `net` (10.1/16 - 10.2/16), `web` (10.1.1/24 - 10.3/16) and
/// `db` (10.1.2/24 - 10.4/16).
fn three_children() -> (Connection, Connection) {
    let (mut a, mut b) = pair(&[IKE], &["aes128gcm16"]);
    for (name, l, r) in [
        ("web", "10.1.1.0/24", "10.3.0.0/16"),
        ("db", "10.1.2.0/24", "10.4.0.0/16"),
    ] {
        a.children.push(child(name, &[l], &[r], &["aes128gcm16"]));
        b.children.push(child(name, &[r], &[l], &["aes128gcm16"]));
    }
    (a, b)
}

/// The requests of exchange type `ex` that endpoint `i` sent (first transmissions and retransmissions).
fn requests(sim: &Sim, i: usize, ex: u8) -> Vec<&[u8]> {
    sim.sent[i]
        .iter()
        .map(|t| t.bytes.as_slice())
        .filter(|b| b.len() > 19 && b[18] == ex && b[19] & 0x20 == 0)
        .collect()
}

fn child_names(sim: &Sim, i: usize) -> Vec<String> {
    let mut v: Vec<String> = sim.children_up(i).iter().map(|c| c.child.clone()).collect();
    v.sort();
    v
}

/// Two children started at once (both `start_action = start`) and a third once the IKE SA is up (a trap's
/// acquire, `netveil initiate --child`): one IKE SA on each side carries all three; the second waits for IKE_AUTH
/// and goes with CREATE_CHILD_SA; asking again for a child that is up or on its way starts nothing.
#[test]
fn children_of_a_connection_share_one_ike_sa() {
    let (a, b) = three_children();
    let mut sim = Sim::new(a, b, 40);
    let now = sim.now;
    let first = sim.ep[0].start_child("ab", Some("net"), now).unwrap();
    let Started::New(id) = first else {
        panic!("the first child starts an IKE SA: {first:?}")
    };
    // IKE_SA_INIT is under way: the second child waits in that IKE SA, once.
    assert_eq!(
        sim.ep[0].start_child("ab", Some("web"), now),
        Ok(Started::Queued(id))
    );
    assert_eq!(
        sim.ep[0].start_child("ab", Some("web"), now),
        Ok(Started::Queued(id))
    );
    assert_eq!(
        sim.ep[0].start_child("ab", Some("net"), now),
        Ok(Started::Queued(id)),
        "the first child is on its way in IKE_AUTH"
    );
    sim.settle();
    assert_eq!(sim.ep[0].ike_sa_count(), 1);
    assert_eq!(sim.ep[1].ike_sa_count(), 1);
    assert_eq!((sim.ike_up(0), sim.ike_up(1)), (1, 1));
    assert_eq!(child_names(&sim, 0), ["net", "web"]);
    assert_eq!(child_names(&sim, 1), ["net", "web"]);
    assert_eq!(requests(&sim, 0, IKE_AUTH).len(), 1);
    assert_eq!(requests(&sim, 0, CREATE_CHILD_SA).len(), 1);
    // Up: the third goes in the same IKE SA at once; the others are not started again.
    assert_eq!(
        sim.ep[0].start_child("ab", Some("db"), sim.now),
        Ok(Started::Queued(id))
    );
    assert_eq!(
        sim.ep[0].start_child("ab", None, sim.now),
        Ok(Started::Up(id)),
        "None is the first child, up"
    );
    sim.settle();
    assert_eq!(child_names(&sim, 0), ["db", "net", "web"]);
    assert_eq!(child_names(&sim, 1), ["db", "net", "web"]);
    for c in sim.children_up(0) {
        assert_eq!(c.ike_sa, id);
    }
    let st = sim.ep[1].status(sim.now);
    assert_eq!(st.len(), 1);
    assert_eq!(st[0].children.len(), 3);
    assert_eq!(requests(&sim, 0, CREATE_CHILD_SA).len(), 2);
    assert!(sim.failures(0).is_empty() && sim.failures(1).is_empty());
    // `initiate` still starts a new IKE SA each time (what `netveil bench --ike` measures).
    assert_ne!(sim.ep[0].initiate("ab", Some("net"), sim.now).unwrap(), id);
}

/// An IKE SA on its way out takes no new child: one being deleted (DELETE sent, or queued behind an outstanding
/// request) leaves the next child to a new IKE SA; one being rekeyed hands the queued child to its successor.
#[test]
fn a_child_goes_in_an_ike_sa_that_stays() {
    let (a, b) = three_children();
    let mut sim = Sim::new(a, b, 51);
    let id = sim.ep[0]
        .start_child("ab", Some("net"), sim.now)
        .unwrap()
        .ike_sa();
    sim.settle();
    // A rekey of the IKE SA under way: web waits, and comes up in the new IKE SA.
    sim.ep[0].rekey_ike(id, sim.now).unwrap();
    assert_eq!(
        sim.ep[0].start_child("ab", Some("web"), sim.now),
        Ok(Started::Queued(id))
    );
    // As the driver runs it: timeouts only when the endpoint says they are due, the clock standing still.
    for _ in 0..10 {
        sim.settle();
        let now = sim.now;
        let due: Vec<usize> = (0..2)
            .filter(|&i| sim.ep[i].poll_timeout().is_some_and(|t| t <= now))
            .collect();
        if due.is_empty() {
            break;
        }
        for i in due {
            sim.ep[i].handle_timeout(now);
        }
    }
    let web = sim
        .children_up(0)
        .into_iter()
        .find(|c| c.child == "web")
        .map(|c| c.ike_sa)
        .expect("web came up after the rekey");
    assert_ne!(web, id, "in the new IKE SA");
    assert_eq!(sim.ep[0].ike_sa_count(), 1);
    // A DELETE queued behind an outstanding request (db's CREATE_CHILD_SA): not that SA.
    sim.ep[0].start_child("ab", Some("db"), sim.now).unwrap();
    sim.ep[0].terminate(web, sim.now).unwrap();
    let s = sim.ep[0].start_child("ab", Some("web"), sim.now).unwrap();
    assert!(matches!(s, Started::New(n) if n != web), "{s:?}");
    sim.settle();
    // The DELETE sent (the SA Deleting): not that one either.
    let (a, b) = three_children();
    let mut sim = Sim::new(a, b, 52);
    let id = sim.ep[0]
        .start_child("ab", Some("net"), sim.now)
        .unwrap()
        .ike_sa();
    sim.settle();
    sim.ep[0].terminate(id, sim.now).unwrap();
    let s = sim.ep[0].start_child("ab", Some("web"), sim.now).unwrap();
    assert!(matches!(s, Started::New(n) if n != id), "{s:?}");
    sim.settle();
    assert_eq!(child_names(&sim, 0), ["net", "web"]);
    assert_eq!(sim.ep[0].ike_sa_count(), 1);
}

/// A child queued behind IKE_SA_INIT fails with its IKE SA: the failure names that SA, and no child is left
/// waiting; the next start begins a new IKE SA.
#[test]
fn a_child_waiting_for_its_ike_sa_fails_with_it() {
    let (a, mut b) = three_children();
    b.psk = Some(Secret::new(b"another psk"));
    let mut sim = Sim::new(a, b, 41);
    let now = sim.now;
    let id = sim.ep[0]
        .start_child("ab", Some("net"), now)
        .unwrap()
        .ike_sa();
    assert_eq!(
        sim.ep[0].start_child("ab", Some("web"), now),
        Ok(Started::Queued(id))
    );
    sim.settle();
    let failed: Vec<_> = sim.events[0]
        .iter()
        .filter_map(|e| match e {
            Event::Failed { ike_sa, child, .. } => Some((*ike_sa, child.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(failed, [(Some(id), None)], "one failure, of the IKE SA");
    assert!(sim.children_up(0).is_empty());
    assert_eq!(requests(&sim, 0, CREATE_CHILD_SA).len(), 0);
    assert_eq!(sim.ep[0].ike_sa_count(), 0);
    let again = sim.ep[0].start_child("ab", Some("web"), sim.now).unwrap();
    assert!(matches!(again, Started::New(n) if n != id), "{again:?}");
}

/// A child whose CREATE_CHILD_SA the peer refuses fails alone (its event names it); the IKE SA and its other
/// children stay.
#[test]
fn a_refused_child_fails_alone() {
    let (a, mut b) = three_children();
    b.children.retain(|c| c.name != "db");
    let mut sim = Sim::new(a, b, 42);
    let id = sim.ep[0]
        .start_child("ab", Some("net"), sim.now)
        .unwrap()
        .ike_sa();
    sim.ep[0].start_child("ab", Some("db"), sim.now).unwrap();
    sim.settle();
    let failed: Vec<_> = sim.events[0]
        .iter()
        .filter_map(|e| match e {
            Event::Failed { ike_sa, child, .. } => Some((*ike_sa, child.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(failed, [(Some(id), Some("db".to_string()))]);
    assert_eq!(child_names(&sim, 0), ["net"]);
    assert_eq!(sim.ep[0].ike_sa_count(), 1);
}

/// INITIAL_CONTACT (RFC 7296 2.4) goes in the first IKE SA's IKE_AUTH only: an IKE_AUTH that carries it is 8 bytes
/// (an empty notify) longer than one of the same connection that does not. The children of a connection make no
/// second IKE_AUTH; a second IKE SA of the connection (`initiate`) carries no INITIAL_CONTACT, and the responder
/// keeps the first.
#[test]
fn initial_contact_only_with_the_first_ike_sa() {
    let (a, b) = three_children();
    let mut sim = Sim::new(a, b, 43);
    for c in ["net", "web", "db"] {
        sim.ep[0].start_child("ab", Some(c), sim.now).unwrap();
    }
    sim.settle();
    assert_eq!(requests(&sim, 0, IKE_AUTH).len(), 1);
    sim.ep[0].initiate("ab", Some("net"), sim.now).unwrap();
    sim.settle();
    let auths = requests(&sim, 0, IKE_AUTH);
    assert_eq!(auths.len(), 2);
    assert_eq!(
        auths[0].len(),
        auths[1].len() + 8,
        "INITIAL_CONTACT in the first IKE_AUTH, not in the second"
    );
    assert_eq!(sim.ike_down(1), 0, "the responder kept the first IKE SA");
    assert_eq!(sim.ep[1].ike_sa_count(), 2);
    assert_eq!(sim.children_up(1).len(), 4);
}

/// Two connections to the same peer with the same ids (different children): the second one's IKE SA does not
/// claim INITIAL_CONTACT either, so the peer keeps the first (strongSwan, whose `unique = no` drops every IKE SA of
/// the ids on INITIAL_CONTACT, would drop it).
#[test]
fn initial_contact_not_with_a_second_connection_to_the_peer() {
    let (a, b) = three_children();
    let mut a2 = a.clone();
    a2.name = "ab2".into();
    a2.children.retain(|c| c.name == "web");
    let mut sim = Sim::new(a.clone(), b, 56);
    sim.ep[0] = Endpoint::new(
        vec![a, a2],
        Box::new(SeededRng::new(56)), // check-rng: allow (tests)
        sim.now,
    );
    sim.ep[0].start_child("ab", Some("net"), sim.now).unwrap();
    sim.settle();
    let s = sim.ep[0].start_child("ab2", Some("web"), sim.now).unwrap();
    assert!(matches!(s, Started::New(_)), "another connection: {s:?}");
    sim.settle();
    assert_eq!(sim.ike_up(1), 2);
    assert_eq!(sim.ike_down(1), 0, "the responder dropped the first IKE SA");
    assert_eq!(child_names(&sim, 1), ["net", "web"]);
}

// ---- a responder refused by the initiator ----

fn td(name: &str) -> Vec<u8> {
    let p = format!("{}/testdata/certs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn cert(name: &str) -> Certificate {
    Certificate::from_der(&td(&format!("{name}.der"))).unwrap()
}

fn with_cert(id: Identity, name: &str) -> AuthRound {
    AuthRound {
        id,
        method: AuthMethod::PubKey(PubKeyCreds {
            certs: vec![cert(name)],
            cacerts: vec![],
            key: Some(Arc::new(
                PrivateKey::from_pem_or_der(&td(&format!("{name}.key"))).unwrap(),
            )),
        }),
    }
}

fn trusting(id: Identity, ca: &str) -> AuthRound {
    AuthRound {
        id,
        method: AuthMethod::PubKey(PubKeyCreds {
            certs: vec![],
            cacerts: vec![cert(ca)],
            key: None,
        }),
    }
}

fn dn(cn: &str) -> Identity {
    Identity::Dn(parse_dn(&format!("C=CH, O=netveil test, CN={cn}.netveil.test")).unwrap())
}

/// A (sun) and B with certificates and DN identities, checked at 2027-06-01; B presents `b_cert` as moon.
fn cert_sim(b_cert: &str, seed: u64) -> Sim {
    let (mut a, mut b) = pair(&[IKE], &["aes128gcm16"]);
    (a.local, a.remote, a.psk) = (
        with_cert(dn("sun"), "sun"),
        trusting(dn("moon"), "ca"),
        None,
    );
    (b.local, b.remote, b.psk) = (
        with_cert(dn("moon"), b_cert),
        trusting(dn("sun"), "ca"),
        None,
    );
    let mut sim = Sim::new(a, b, seed);
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_811_808_000);
    for e in &mut sim.ep {
        let blank = Endpoint::new(vec![], Box::new(SeededRng::new(0)), sim.now); // check-rng: allow (tests)
        let old = std::mem::replace(e, blank);
        *e = old.with_wall_clock(sim.now, wall);
    }
    sim
}

/// The responder's certificate comes from a CA the initiator does not trust: the responder took the initiator's
/// authentication and had its IKE SA and child up; the initiator refuses, says why, and tells the responder
/// (INFORMATIONAL with AUTHENTICATION_FAILED on the new SA), which drops both at once. Nothing is left on
/// either side, and the initiator never reported the SA up.
#[test]
fn a_refused_responder_is_told_and_drops_its_sa() {
    let mut sim = cert_sim("rogue", 44);
    sim.initiate();
    sim.settle();
    assert_eq!(
        sim.failures(0),
        vec![&Failure::Certificate {
            id: "C=CH, O=netveil test, CN=moon.netveil.test".into(),
            reason: CertFailure::NotSignedByCa
        }]
    );
    assert_eq!(sim.ike_up(0), 0);
    assert!(sim.children_up(0).is_empty());
    assert_eq!(requests(&sim, 0, INFORMATIONAL).len(), 1);
    // The responder had it up, and took it down on the initiator's word.
    assert_eq!((sim.ike_up(1), sim.children_up(1).len()), (1, 1));
    assert_eq!((sim.ike_down(1), sim.child_down(1)), (1, 1));
    assert_eq!(
        sim.failures(1),
        vec![&Failure::AuthenticationFailed {
            id: "C=CH, O=netveil test, CN=moon.netveil.test".into(),
            by_peer: true
        }]
    );
    assert_eq!(sim.ep[0].ike_sa_count(), 0, "the answer ended it here");
    assert_eq!(sim.ep[1].ike_sa_count(), 0);
}

/// The responder authenticates (right PSK) as another identity than the initiator's `remote.id` (here its address:
/// it has no local id of its own): refused as such, and told.
#[test]
fn a_responder_with_another_id_is_refused_and_told() {
    let (a, mut b) = pair(&[IKE], &["aes128gcm16"]);
    b.local.id = Identity::Any;
    let mut sim = Sim::new(a, b, 55);
    sim.initiate();
    sim.settle();
    assert_eq!(
        sim.failures(0),
        vec![&Failure::UnexpectedId {
            got: "10.0.0.2".into(),
            want: "b.example".into()
        }]
    );
    assert_eq!(sim.ike_up(0), 0);
    assert_eq!((sim.ike_up(1), sim.ike_down(1)), (1, 1));
    assert_eq!(sim.ep[0].ike_sa_count() + sim.ep[1].ike_sa_count(), 0);
}

/// The responder does not answer that INFORMATIONAL: the initiator retransmits it as any request, then forgets
/// the SA without a second failure; until then `status` shows it DELETING, never up.
#[test]
fn an_unanswered_refusal_is_retransmitted_then_given_up() {
    let mut sim = cert_sim("rogue", 45);
    sim.initiate();
    // IKE_SA_INIT both ways, then the IKE_AUTH request and its answer.
    for _ in 0..3 {
        assert!(sim.step());
    }
    sim.faults.blackhole[1] = true;
    sim.step();
    sim.settle();
    assert_eq!(sim.failures(0).len(), 1);
    let st = sim.ep[0].status(sim.now);
    assert_eq!(st.len(), 1);
    assert_eq!(st[0].state, "DELETING");
    sim.run_for(Duration::from_secs(200));
    assert!(requests(&sim, 0, INFORMATIONAL).len() > 1, "retransmitted");
    assert_eq!(sim.ep[0].ike_sa_count(), 0);
    assert_eq!(sim.failures(0).len(), 1);
    assert_eq!((sim.ike_up(0), sim.ike_down(0)), (0, 0));
}

/// The same certificates from the trusted CA: both up, and `status` shows the DN identities as text (they were
/// `ID_DER_ASN1_DN:3040...`, cut at 64 bytes).
#[test]
fn dn_identities_show_as_text_in_status() {
    let mut sim = cert_sim("moon", 46);
    sim.initiate();
    sim.settle();
    assert_eq!((sim.ike_up(0), sim.ike_up(1)), (1, 1));
    let a = &sim.ep[0].status(sim.now)[0];
    assert_eq!(a.local_id, "C=CH, O=netveil test, CN=sun.netveil.test");
    assert_eq!(a.remote_id, "C=CH, O=netveil test, CN=moon.netveil.test");
    let b = &sim.ep[1].status(sim.now)[0];
    assert_eq!(b.remote_id, "C=CH, O=netveil test, CN=sun.netveil.test");
}

// ---- the responder's choice of connection ----

fn psk_conn(name: &str, remote_id: Identity, psk: &[u8]) -> Connection {
    let (_, mut b) = pair(&[IKE], &["aes128gcm16"]);
    b.name = name.into();
    b.remote.id = remote_id;
    b.psk = Some(Secret::new(psk));
    b
}

/// B lists a `%any` connection (PSK "wild") before one for A's identity (PSK "a's own"); A claims its identity.
fn best_match_sim(a_psk: &[u8], a_id: &str, named_remote_addrs: Option<&str>, seed: u64) -> Sim {
    let (mut a, _) = pair(&[IKE], &["aes128gcm16"]);
    a.psk = Some(Secret::new(a_psk));
    a.local.id = Identity::Fqdn(a_id.into());
    let any = psk_conn("any", Identity::Any, b"wild");
    let mut named = psk_conn("named", Identity::Fqdn("a.example".into()), b"a's own");
    if let Some(r) = named_remote_addrs {
        named.remote_addrs = vec![r.parse().unwrap()];
    }
    let mut sim = Sim::new(a, any.clone(), seed);
    sim.ep[1] = Endpoint::new(
        vec![any, named],
        Box::new(SeededRng::new(seed)), // check-rng: allow (tests)
        sim.now,
    );
    sim
}

fn connections_up(sim: &Sim, i: usize) -> Vec<String> {
    sim.events[i]
        .iter()
        .filter_map(|e| match e {
            Event::IkeSaUp { connection, .. } => Some(connection.clone()),
            _ => None,
        })
        .collect()
}

/// A peer claiming an identity that a connection names, holding only the `%any` connection's PSK, is refused:
/// the named connection serves it (listed second), and its PSK is not the peer's.
#[test]
fn the_exact_identity_wins_over_an_earlier_wildcard() {
    let mut sim = best_match_sim(b"wild", "a.example", None, 47);
    sim.initiate();
    sim.settle();
    assert_eq!(sim.ike_up(1), 0, "in with the wildcard's PSK as a.example");
    assert_eq!(
        sim.failures(1),
        vec![&Failure::AuthenticationFailed {
            id: "a.example".into(),
            by_peer: false
        }]
    );
    // With its own PSK it gets the named connection.
    let mut sim = best_match_sim(b"a's own", "a.example", None, 48);
    sim.initiate();
    sim.settle();
    assert_eq!(connections_up(&sim, 1), ["named"]);
    // An identity no connection names: the wildcard serves it (and status shows it as it authenticated).
    let mut sim = best_match_sim(b"wild", "c.example", None, 49);
    sim.initiate();
    sim.settle();
    assert_eq!(connections_up(&sim, 1), ["any"]);
    assert_eq!(sim.ep[1].status(sim.now)[0].remote_id, "c.example");
}

/// Two connections name the peer's identity exactly: the one with the peer's address configured beats the one
/// open to any address listed before it; one whose local id is not what the peer asked for (IDr) is not taken,
/// even with the peer's address and listed first.
#[test]
fn the_most_specific_connection_wins() {
    let (a, _) = pair(&[IKE], &["aes128gcm16"]);
    let mut open = psk_conn("open", Identity::Fqdn("a.example".into()), b"open's");
    open.remote_addrs.clear();
    let specific = psk_conn("specific", Identity::Fqdn("a.example".into()), b"test psk");
    let mut sim = Sim::new(a.clone(), open.clone(), 53);
    sim.ep[1] = Endpoint::new(
        vec![open, specific],
        Box::new(SeededRng::new(53)), // check-rng: allow (tests)
        sim.now,
    );
    sim.initiate();
    sim.settle();
    assert_eq!(
        connections_up(&sim, 1),
        ["specific"],
        "{:?}",
        sim.failures(1)
    );
    // The local id: A asks for b.example; "other" is c.example (listed first, its addresses open too).
    let mut other = psk_conn("other", Identity::Fqdn("a.example".into()), b"other's");
    other.local.id = Identity::Fqdn("c.example".into());
    let mut mine = psk_conn("mine", Identity::Fqdn("a.example".into()), b"test psk");
    mine.remote_addrs.clear();
    let mut sim = Sim::new(a, other.clone(), 54);
    sim.ep[1] = Endpoint::new(
        vec![other, mine],
        Box::new(SeededRng::new(54)), // check-rng: allow (tests)
        sim.now,
    );
    sim.initiate();
    sim.settle();
    assert_eq!(connections_up(&sim, 1), ["mine"], "{:?}", sim.failures(1));
}

/// The named connection does not fit the peer's address: the wildcard still does not serve the identity it
/// names, and the failure says what the peer sent, what was expected and why.
#[test]
fn no_match_names_both_ends_and_why() {
    let mut sim = best_match_sim(b"wild", "a.example", Some("10.0.0.9"), 50);
    sim.initiate();
    sim.settle();
    assert_eq!(sim.ike_up(0) + sim.ike_up(1), 0);
    let f = sim.failures(1);
    let [Failure::NoMatchingConnection(m)] = f[..] else {
        panic!("{f:?}")
    };
    assert_eq!(m.local, "10.0.0.2".parse::<std::net::IpAddr>().unwrap());
    assert_eq!(m.remote, "10.0.0.1".parse::<std::net::IpAddr>().unwrap());
    assert_eq!(m.remote_id.as_deref(), Some("a.example"));
    assert_eq!(m.local_id.as_deref(), Some("b.example"));
    let text = m.to_string();
    for want in [
        "10.0.0.2[b.example]...10.0.0.1[a.example]",
        "connection named names it, but its addresses do not match",
        "a %any connection does not serve an id that a connection names",
        "expected any: 10.0.0.2[b.example]...10.0.0.1[%any], named: 10.0.0.2[b.example]...10.0.0.9[a.example]",
    ] {
        assert!(text.contains(want), "{want:?} not in {text}");
    }
    // The initiator hears AUTHENTICATION_FAILED.
    assert!(matches!(
        sim.failures(0)[..],
        [Failure::AuthenticationFailed { by_peer: true, .. }]
    ));
}
