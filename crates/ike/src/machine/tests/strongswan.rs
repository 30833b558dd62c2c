//! strongSwan's recorded IKE_AUTH exchange (testdata/ikev2/strongswan-session.pcap, charon 5.9.8 on both ends,
//! PSK `interop-test-psk-0123456789`, ids `site1` and `site2`) through this state machine, both roles. Our
//! IKE_SA_INIT cannot be the recorded one (we do not hold the recorded X25519 private keys), so after it each SA
//! is given the recorded session's IKE_SA_INIT: its SPIs, nonces and messages, and the keys from the shared
//! secret charon logged (testdata/ikev2/strongswan-session-charon.log, "shared Diffie Hellman secret"). Then:
//!
//! - our responder takes charon's real IKE_AUTH request (frame 3): it verifies charon's AUTH, picks the connection
//!   by the identities, narrows the selectors and selects the ESP proposal; its own AUTH is byte for byte the one
//!   charon's responder sent (frame 4); its CHILD_SA keys are those of Wireshark's esp_sa table for the session;
//! - our initiator takes charon's real IKE_AUTH response (frame 4): it verifies charon's AUTH and installs the
//!   CHILD_SA with both SPIs and keys as in the esp_sa table.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use netveil_crypto::rand::SeededRng; // check-rng: allow (a #[cfg(test)] module file)

use super::super::sa::{Pending, Purpose, State};
use super::super::Endpoint;
use crate::config::*;
use crate::event::{ChildSa, Event, Failure, IkeSaId};
use crate::keys::{skeyseed, IkeKeys, IkeSuite, Role, Secret};
use crate::message::{payload_type, Message, Payload};
use crate::proposal::{Proposal, Protocol};
use crate::sk::{self, SkKey};

const PSK: &[u8] = b"interop-test-psk-0123456789";
/// The log's "shared Diffie Hellman secret" of IKE_SA_INIT.
const G_IR: &str = "69337f05c8d900e48bd398f4521ff78450d5c9c507889d004a063473a75e0c20";

fn testdata(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/ikev2")
        .join(name)
}

/// (source, destination, IKE message without the non-ESP marker) of every IKE datagram.
fn datagrams() -> Vec<(SocketAddr, SocketAddr, Vec<u8>)> {
    let pcap = netveil_pcap::read_file(&testdata("strongswan-session.pcap")).unwrap();
    let mut out = Vec::new();
    for r in &pcap.records {
        let frame = netveil_pcap::split_frame(pcap.link, &r.data).unwrap();
        let ip = netveil_pcap::ip_own(frame.ip).unwrap();
        if ip[9] != 17 {
            continue;
        }
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let a = |at: usize| std::net::IpAddr::from([ip[at], ip[at + 1], ip[at + 2], ip[at + 3]]);
        let udp = &ip[ihl..];
        let port = |at: usize| u16::from_be_bytes([udp[at], udp[at + 1]]);
        let payload = &udp[8..];
        let ike = match port(2) {
            500 => payload,
            4500 if payload.starts_with(&[0; 4]) => &payload[4..],
            _ => continue,
        };
        out.push((
            SocketAddr::new(a(12), port(0)),
            SocketAddr::new(a(16), port(2)),
            ike.to_vec(),
        ));
    }
    out
}

/// Wireshark's esp_sa table: (destination, SPI) -> encryption key.
fn esp_key(dst: &str, spi: u32) -> Vec<u8> {
    let text = std::fs::read_to_string(testdata("strongswan-session-esp_sa")).unwrap();
    for line in text.lines() {
        let f: Vec<&str> = line.split(',').map(|s| s.trim_matches('"')).collect();
        if f.len() > 5 && f[2] == dst && u32::from_str_radix(&f[3][2..], 16).unwrap() == spi {
            return hex::decode(&f[5][2..]).unwrap();
        }
    }
    panic!("no esp_sa entry for {dst} {spi:#x}");
}

fn conn(
    local: &str,
    remote: &str,
    local_id: &str,
    remote_id: &str,
    lts: &str,
    rts: &str,
) -> Connection {
    let ts = |a: &str| TsSpec {
        addr: a.parse().unwrap(),
        prefix: 32,
        protocol: 0,
        ports: (0, 65535),
    };
    let life = Lifetimes {
        rekey: Duration::from_secs(3600),
        life: Duration::from_secs(4000),
        rand: Duration::ZERO,
    };
    Connection {
        name: "ss".into(),
        local_addrs: vec![local.parse().unwrap()],
        remote_addrs: vec![remote.parse().unwrap()],
        remote_port: 500,
        proposals: vec![Proposal::parse(Protocol::Ike, "aes256-sha256-x25519").unwrap()],
        encap: true,
        fragmentation: false,
        local: AuthRound {
            id: Identity::Fqdn(local_id.into()),
            method: AuthMethod::Psk,
        },
        remote: AuthRound {
            id: Identity::Fqdn(remote_id.into()),
            method: AuthMethod::Psk,
        },
        psk: Some(Secret::new(PSK)),
        dpd_delay: None,
        lifetimes: life,
        reauth: Duration::ZERO,
        retransmit: Retransmit::default(),
        children: vec![ChildConfig {
            name: "c1".into(),
            local_ts: vec![ts(lts)],
            remote_ts: vec![ts(rts)],
            esp_proposals: vec![Proposal::parse(Protocol::Esp, "aes128gcm16-x25519").unwrap()],
            mode: Mode::Tunnel,
            lifetimes: life,
            start_action: Action::None,
            dpd_action: Action::None,
            close_action: Action::None,
            replay_window: 32,
        }],
    }
}

struct Recorded {
    msgs: Vec<(SocketAddr, SocketAddr, Vec<u8>)>,
    spi_i: u64,
    spi_r: u64,
    ni: Vec<u8>,
    nr: Vec<u8>,
    keys: IkeKeys,
}

fn recorded() -> Recorded {
    let msgs = datagrams();
    let nonce = |m: &[u8]| {
        Message::parse(m)
            .unwrap()
            .payloads
            .iter()
            .find_map(|p| match p {
                Payload::Nonce(n) => Some(n.as_bytes().to_vec()),
                _ => None,
            })
            .unwrap()
    };
    let resp = Message::parse(&msgs[1].2).unwrap();
    let (spi_i, spi_r) = (resp.header.initiator_spi, resp.header.responder_spi);
    let (ni, nr) = (nonce(&msgs[0].2), nonce(&msgs[1].2));
    let suite =
        IkeSuite::from_proposal(&Proposal::parse(Protocol::Ike, "aes256-sha256-x25519").unwrap())
            .unwrap();
    let seed = skeyseed(suite.prf(), &ni, &nr, &hex::decode(G_IR).unwrap());
    let keys = IkeKeys::derive(
        suite,
        &seed,
        &ni,
        &nr,
        &spi_i.to_be_bytes(),
        &spi_r.to_be_bytes(),
    )
    .unwrap();
    Recorded {
        msgs,
        spi_i,
        spi_r,
        ni,
        nr,
        keys,
    }
}

fn child_up(ep: &mut Endpoint) -> (usize, Vec<ChildSa>) {
    let mut ike_up = 0;
    let mut children = Vec::new();
    while let Some(e) = ep.poll_event() {
        match e {
            Event::IkeSaUp { .. } => ike_up += 1,
            Event::ChildSaUp(c) => children.push(*c),
            other => panic!("{other:?}"),
        }
    }
    (ike_up, children)
}

#[test]
fn our_responder_takes_charons_ike_auth() {
    let r = recorded();
    let now = Instant::now();
    let c = conn(
        "10.99.0.2",
        "10.99.0.1",
        "site2",
        "site1",
        "10.22.0.1",
        "10.11.0.1",
    );
    let mut ep = Endpoint::new(vec![c], Box::new(SeededRng::new(1)), now); // check-rng: allow (a #[cfg(test)] module file)
    let (src, dst, init) = &r.msgs[0];
    ep.handle_datagram(now, *dst, *src, init);
    assert!(ep.poll_transmit().is_some());
    // Our half-open SA becomes the recorded one.
    let id = *ep.sas.keys().next().unwrap();
    let sa = ep.sas.get_mut(&id).unwrap();
    ep.by_spi.remove(&sa.spi_r);
    sa.spi_r = r.spi_r;
    ep.by_spi.insert(r.spi_r, id);
    sa.hs_mut().nr = r.nr.as_slice().into();
    sa.hs_mut().init_sent = r.msgs[1].2.as_slice().into();
    assert!(sa.set_keys(r.keys.clone()));
    let (src, dst, auth) = &r.msgs[2];
    assert_eq!(dst.port(), 4500, "charon moved to port 4500 (encap = yes)");
    ep.handle_datagram(now, *dst, *src, auth);
    let (ike_up, children) = child_up(&mut ep);
    assert_eq!(
        (ike_up, children.len()),
        (1, 1),
        "charon's AUTH verified, the child set up"
    );
    let child = &children[0];
    // Outbound to charon's SPI with the key Wireshark shows for it; inbound with the other direction's key.
    assert_eq!(child.outbound.spi, 0xaaa1_0c06);
    assert_eq!(
        child.outbound.encr_key.expose(),
        esp_key("10.99.0.1", 0xaaa1_0c06)
    );
    assert_eq!(
        child.inbound.encr_key.expose(),
        esp_key("10.99.0.2", 0xa380_aeab)
    );
    assert!(child.udp_encap);
    assert_eq!((child.local, child.remote), (*dst, *src));
    // Our answer, opened with charon's key: IDr site2 and the AUTH charon's own responder sent.
    let t = ep.poll_transmit().unwrap();
    assert_eq!((t.local, t.remote), (*dst, *src));
    let mut ours = t.bytes.clone();
    let key = SkKey::inbound(&r.keys, Role::Initiator).unwrap();
    let range = key.open(&mut ours, 28, sk::Encrypted::Sk).unwrap();
    let inner = crate::message::parse_chain(ours[28], &ours[range]).unwrap();
    let mut theirs = r.msgs[3].2.clone();
    let range = key.open(&mut theirs, 28, sk::Encrypted::Sk).unwrap();
    let theirs = crate::message::parse_chain(theirs[28], &theirs[range]).unwrap();
    let auth = |ps: &[Payload]| {
        ps.iter()
            .find(|p| p.payload_type() == payload_type::AUTH)
            .cloned()
            .unwrap()
    };
    assert_eq!(
        auth(&inner),
        auth(&theirs),
        "the same AUTH as charon's responder"
    );
    let idr = |ps: &[Payload]| {
        ps.iter()
            .find(|p| p.payload_type() == payload_type::IDR)
            .cloned()
    };
    assert_eq!(idr(&inner), idr(&theirs));
    assert_eq!(ep.status(now)[0].state, "ESTABLISHED");
}

/// Our initiator, its SA put in the state after the recorded IKE_SA_INIT: waiting for the answer to an IKE_AUTH
/// whose child SPI is charon's (frame 4 is that answer).
fn initiator_awaiting_charons_answer(r: &Recorded, now: Instant) -> (Endpoint, IkeSaId) {
    let c = conn(
        "10.99.0.1",
        "10.99.0.2",
        "site1",
        "site2",
        "10.11.0.1",
        "10.22.0.1",
    );
    let mut ep = Endpoint::new(vec![c], Box::new(SeededRng::new(2)), now); // check-rng: allow (a #[cfg(test)] module file)
    let id = ep.initiate("ss", None, now).unwrap();
    while ep.poll_transmit().is_some() {}
    let sa = ep.sas.get_mut(&id).unwrap();
    ep.by_spi.remove(&sa.spi_i);
    sa.spi_i = r.spi_i;
    ep.by_spi.insert(r.spi_i, id);
    sa.spi_r = r.spi_r;
    sa.hs_mut().ni = r.ni.as_slice().into();
    sa.hs_mut().nr = r.nr.as_slice().into();
    sa.hs_mut().init_sent = r.msgs[0].2.as_slice().into();
    sa.hs_mut().init_received = r.msgs[1].2.as_slice().into();
    assert!(sa.set_keys(r.keys.clone()));
    sa.hs_mut().first_child_spi = Some(0xaaa1_0c06);
    sa.nat_remote = true;
    sa.local.set_port(4500);
    sa.remote.set_port(4500);
    sa.state = State::AuthSent;
    sa.my_mid = 1;
    sa.pending = Some(Box::new(Pending {
        message_id: 1,
        purpose: Purpose::Auth,
        bytes: Vec::new(),
        retries: 0,
        next_at: now + Duration::from_secs(4),
    }));
    (ep, id)
}

#[test]
fn our_initiator_takes_charons_ike_auth_response() {
    let r = recorded();
    let now = Instant::now();
    let (mut ep, id) = initiator_awaiting_charons_answer(&r, now);
    let (src, dst, resp) = &r.msgs[3];
    // First with one bit flipped: not authentic, nothing happens.
    let mut bad = resp.clone();
    let n = bad.len();
    bad[n - 1] ^= 1;
    ep.handle_datagram(now, *dst, *src, &bad);
    assert!(ep.poll_event().is_none());
    assert_eq!(ep.sas[&id].state, State::AuthSent);
    ep.handle_datagram(now, *dst, *src, resp);
    let (ike_up, children) = child_up(&mut ep);
    assert_eq!(
        (ike_up, children.len()),
        (1, 1),
        "charon's AUTH verified, the child set up"
    );
    let child = &children[0];
    assert_eq!(child.inbound.spi, 0xaaa1_0c06);
    assert_eq!(
        child.outbound.spi, 0xa380_aeab,
        "the SPI charon's responder chose"
    );
    assert_eq!(
        child.inbound.encr_key.expose(),
        esp_key("10.99.0.1", 0xaaa1_0c06)
    );
    assert_eq!(
        child.outbound.encr_key.expose(),
        esp_key("10.99.0.2", 0xa380_aeab)
    );
    assert_eq!(child.proposal.to_string(), "aes128gcm16");
    assert_eq!(child.local_ts[0].addr.to_string(), "10.11.0.1");
    // `netveil keys --wireshark`: the IKE SA's line is the one charon's save-keys plugin wrote for the session.
    let table =
        std::fs::read_to_string(testdata("strongswan-session-ikev2_decryption_table")).unwrap();
    let keys = ep.wireshark_keys();
    assert_eq!(keys.len(), 1);
    assert_eq!((keys[0].0, keys[0].1.line()), (id, table.trim()));
    assert_eq!(format!("{:?}", keys[0].1), "WiresharkKeys(..)");
    let st = &ep.status(now)[0];
    assert_eq!(
        (st.local_id.as_str(), st.remote_id.as_str()),
        ("site1", "site2")
    );
    assert!(st.rekey_in.is_some());
    assert_eq!(st.children[0].installed, Duration::ZERO);
    assert!(
        st.children[0].rekey_in > Duration::ZERO
            && st.children[0].expire_in >= st.children[0].rekey_in
    );
}

/// Charon's IKE_AUTH response (frame 4) opened with the recorded keys, its inner payloads changed by `edit`, and
/// sealed again with the responder's recorded keys: a message our initiator authenticates (its ICV is right), whose
/// content charon never sent.
fn resealed_answer(r: &Recorded, edit: impl FnOnce(&mut Vec<Payload>)) -> Vec<u8> {
    let mut bytes = r.msgs[3].2.clone();
    let key = SkKey::inbound(&r.keys, Role::Initiator).unwrap();
    assert_eq!(
        bytes[16],
        payload_type::SK,
        "frame 4 is one SK payload after the header"
    );
    let range = key.open(&mut bytes, 28, sk::Encrypted::Sk).unwrap();
    let mut inner = crate::message::parse_chain(bytes[28], &bytes[range]).unwrap();
    edit(&mut inner);
    let mut msg = bytes[..28].to_vec();
    msg.extend_from_slice(&[crate::message::first_type(&inner), 0, 0, 0]);
    let at = msg.len();
    msg.resize(at + crate::message::chain_len(&inner), 0);
    crate::message::emit_chain(&inner, &mut msg[at..]).unwrap();
    let mut out = SkKey::outbound(&r.keys, Role::Responder).unwrap();
    out.seal(&mut SeededRng::new(9), &mut msg, 28, sk::Encrypted::Sk) // check-rng: allow (a #[cfg(test)] module file)
        .unwrap();
    msg
}

/// After the initiator refused the responder's authenticated IKE_AUTH answer (`what`): the responder is told
/// (RFC 7296 2.21.2): the IKE SA stays only as Deleting, with no child, to carry an INFORMATIONAL (IKE header byte
/// 18, the exchange type: 37); the answer itself authenticated (nothing dropped at the ICV).
pub(super) fn responder_told(ep: &mut Endpoint, id: IkeSaId, what: &str) {
    assert_eq!(
        ep.sas.get(&id).map(|sa| sa.state),
        Some(State::Deleting),
        "{what}: the IKE SA is only deleting"
    );
    assert_eq!(
        ep.poll_transmit().map(|t| t.bytes[18]),
        Some(37),
        "{what}: an INFORMATIONAL (AUTHENTICATION_FAILED) goes to the responder"
    );
    assert_eq!(
        ep.counters().dropped,
        0,
        "{what}: the message authenticated (ICV)"
    );
}

/// The initiator's checks of the answer's shape, reached past the ICV on charon's real answer: without its IDr, or
/// with its AUTH twice, the answer is Malformed (saying what), nothing comes up, and the responder is told.
#[test]
fn our_initiator_refuses_charons_answer_malformed() {
    let r = recorded();
    let now = Instant::now();
    let (src, dst, _) = &r.msgs[3];
    type Edit = fn(&mut Vec<Payload>);
    let cases: [(Edit, &str); 2] = [
        (
            |inner| inner.retain(|p| !matches!(p, Payload::IdR(_))),
            "IKE_AUTH response (an AUTH payload without an IDr)",
        ),
        (
            |inner| {
                let auth = inner.iter().find(|p| matches!(p, Payload::Auth(_)));
                let auth = auth.cloned().expect("charon's answer has an AUTH");
                inner.push(auth);
            },
            "IKE_AUTH response (more than one AUTH or IDr)",
        ),
    ];
    for (edit, what) in cases {
        let (mut ep, id) = initiator_awaiting_charons_answer(&r, now);
        ep.handle_datagram(now, *dst, *src, &resealed_answer(&r, edit));
        let events: Vec<Event> = std::iter::from_fn(|| ep.poll_event()).collect();
        assert_eq!(
            events,
            vec![Event::Failed {
                connection: "ss".into(),
                ike_sa: Some(id),
                child: None,
                failure: Failure::Malformed(what.into()),
            }],
            "{what}"
        );
        responder_told(&mut ep, id, what);
    }
}

/// The initiator's check of the responder's PSK AUTH, on charon's real answer: the answer sealed again unchanged is
/// taken (so the resealing is right, and what follows fails at AUTH, not at the ICV); with one bit of its AUTH data
/// changed it authenticates as a message but not as charon: authentication fails for site2, nothing comes up, the
/// IKE SA goes.
#[test]
fn our_initiator_refuses_charons_answer_with_another_auth() {
    let r = recorded();
    let now = Instant::now();
    let (src, dst, _) = &r.msgs[3];
    let (mut ep, _) = initiator_awaiting_charons_answer(&r, now);
    ep.handle_datagram(now, *dst, *src, &resealed_answer(&r, |_| {}));
    let (ike_up, children) = child_up(&mut ep);
    assert_eq!(
        (ike_up, children.len()),
        (1, 1),
        "charon's answer, sealed again unchanged, is taken"
    );

    let (mut ep, id) = initiator_awaiting_charons_answer(&r, now);
    let mut changed = 0;
    let bad = resealed_answer(&r, |inner| {
        for p in inner.iter_mut() {
            if let Payload::Auth(a) = p {
                a.data[0] ^= 0x01;
                changed += 1;
            }
        }
    });
    assert_eq!(changed, 1, "charon's answer has one AUTH payload");
    ep.handle_datagram(now, *dst, *src, &bad);
    let events: Vec<Event> = std::iter::from_fn(|| ep.poll_event()).collect();
    assert_eq!(
        events,
        vec![Event::Failed {
            connection: "ss".into(),
            ike_sa: Some(id),
            child: None,
            failure: Failure::AuthenticationFailed {
                id: "site2".into(),
                by_peer: false,
            },
        }],
        "an AUTH that is not charon's PSK MIC fails authentication, and nothing comes up"
    );
    responder_told(&mut ep, id, "a changed AUTH");
}
