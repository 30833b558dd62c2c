//! Nodes on a simulated LAN (every frame flooded to every other node, as a hub does): group frames, sessions set up
//! by SEP on demand, frames queued meanwhile, rekeying, restarts, failures, outsiders and signatures.

use netveil_l2sec::ed25519_dalek::SigningKey;
use netveil_l2sec::node::{Inbound, Node, NodeConfig, Outbound};
use netveil_l2sec::sep::DhGroup;
use netveil_l2sec::{Drop, Suite};
use netveil_wire::PacketBuf;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

const SECRET: [u8; 32] = [7; 32];

fn mac(i: u8) -> [u8; 6] {
    [0x02, 0x00, 0x5e, 0x00, 0x53, 10 + i]
}

fn ip(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 10 + i)
}

fn cfg(i: u8, secret: &[u8]) -> NodeConfig {
    NodeConfig::new(mac(i), ip(i), 24, Zeroizing::new(secret.to_vec()))
}

struct Lan {
    nodes: Vec<Node>,
    /// Frames each node delivered to its host.
    delivered: Vec<Vec<Vec<u8>>>,
    /// Drops seen at each node's receiver.
    drops: Vec<HashMap<Drop, usize>>,
    /// Every frame that went over the wire.
    wire: Vec<Vec<u8>>,
    now: Instant,
}

impl Lan {
    /// The nodes, connected after their start: their first ANNOUNCEs are delivered, then the records cleared.
    fn new(nodes: Vec<Node>, now: Instant) -> Lan {
        let n = nodes.len();
        let mut lan = Lan {
            nodes,
            delivered: vec![vec![]; n],
            drops: vec![HashMap::new(); n],
            wire: vec![],
            now,
        };
        lan.pump();
        lan.drops = vec![HashMap::new(); n];
        lan.wire.clear();
        lan
    }

    /// Node `i` restarts as `node`; its ANNOUNCE goes out.
    fn restart(&mut self, i: usize, node: Node) {
        self.nodes[i] = node;
        self.pump();
    }

    /// Host `i` sends `frame`; returns what the node did with it.
    fn send(&mut self, i: usize, frame: &[u8]) -> Result<Outbound, Drop> {
        let mut b = PacketBuf::from_slice(frame, 64, 128);
        let r = self.nodes[i].handle_outbound(&mut b, self.now);
        if r == Ok(Outbound::Send) {
            self.flood(i, b.data().to_vec());
        }
        self.pump();
        r
    }

    fn flood(&mut self, from: usize, f: Vec<u8>) {
        self.wire.push(f.clone());
        for j in 0..self.nodes.len() {
            if j == from {
                continue;
            }
            let mut b = PacketBuf::from_slice(&f, 0, 0);
            match self.nodes[j].handle_inbound(&mut b, self.now) {
                Ok(Inbound::Deliver) => self.delivered[j].push(b.data().to_vec()),
                Ok(Inbound::Control) => {}
                Err(d) => *self.drops[j].entry(d).or_default() += 1,
            }
        }
    }

    /// Delivers everything the nodes want to send, until quiet.
    fn pump(&mut self) {
        for _ in 0..1000 {
            let mut any = false;
            for i in 0..self.nodes.len() {
                while let Some(f) = self.nodes[i].poll_transmit() {
                    any = true;
                    self.flood(i, f);
                }
            }
            if !any {
                return;
            }
        }
        panic!("the LAN never went quiet");
    }

    /// Lets `d` pass, in steps of at most 100 ms (as the daemon's timer thread does, more finely).
    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now = (self.now + Duration::from_millis(100)).min(end);
            for n in &mut self.nodes {
                if n.poll_timeout().is_some_and(|t| t <= self.now) {
                    n.handle_timeout(self.now);
                }
            }
            self.pump();
        }
    }
}

fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn arp(op: u16, sha: [u8; 6], spa: Ipv4Addr, tha: [u8; 6], tpa: Ipv4Addr) -> Vec<u8> {
    let mut p = vec![0, 1, 8, 0, 6, 4];
    p.extend_from_slice(&op.to_be_bytes());
    p.extend_from_slice(&sha);
    p.extend_from_slice(&spa.octets());
    p.extend_from_slice(&tha);
    p.extend_from_slice(&tpa.octets());
    p
}

/// A minimal IPv4 packet (header checksum not needed by l2sec) from `src` to `dst`.
fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    let len = (20 + payload.len()) as u16;
    let mut p = vec![0x45, 0];
    p.extend_from_slice(&len.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(payload);
    p
}

fn three(now: Instant, f: impl Fn(&mut NodeConfig)) -> Lan {
    let nodes = (0..3)
        .map(|i| {
            let mut c = cfg(i, &SECRET);
            f(&mut c);
            Node::new(c, now, 1_700_000_000).unwrap()
        })
        .collect();
    Lan::new(nodes, now)
}

#[test]
fn arp_resolution_sets_up_a_session_and_the_reply_waits_for_it() {
    let now = Instant::now();
    let mut lan = three(now, |_| {});
    let bcast = [0xff; 6];
    let req = eth(bcast, mac(0), 0x0806, &arp(1, mac(0), ip(0), [0; 6], ip(1)));
    assert_eq!(lan.send(0, &req), Ok(Outbound::Send));
    // Both others get the request, byte for byte.
    assert_eq!(lan.delivered[1], vec![req.clone()]);
    assert_eq!(lan.delivered[2], vec![req.clone()]);
    // The reply is unicast: no session yet, so it waits for SEP, which the pump runs to the end.
    let reply = eth(
        mac(0),
        mac(1),
        0x0806,
        &arp(2, mac(1), ip(1), mac(0), ip(0)),
    );
    assert_eq!(lan.send(1, &reply), Ok(Outbound::Queued));
    assert_eq!(
        lan.delivered[0],
        vec![reply.clone()],
        "the queued reply arrives once SEP is done"
    );
    assert!(lan.delivered[2].len() == 1, "h3 got only the broadcast");
    assert!(
        lan.drops[2][&Drop::NotForUs] >= 1,
        "h3 saw the unicast reply and dropped it"
    );
    // Now both directions are sealed directly.
    let data = eth(mac(1), mac(0), 0x0800, &ipv4(ip(0), ip(1), b"hello"));
    assert_eq!(lan.send(0, &data), Ok(Outbound::Send));
    assert_eq!(lan.delivered[1].last(), Some(&data));
    let back = eth(mac(0), mac(1), 0x0800, &ipv4(ip(1), ip(0), b"world"));
    assert_eq!(lan.send(1, &back), Ok(Outbound::Send));
    assert_eq!(lan.delivered[0].last(), Some(&back));
    let p0 = lan.nodes[0].peers(lan.now);
    assert_eq!(p0.len(), 1);
    assert_eq!(p0[0].mac, mac(1));
    assert_eq!(p0[0].ip, Some(ip(1)));
    let s = p0[0].session.expect("session");
    assert_eq!(s.key_id, 1);
    assert_eq!(s.suite, Suite::Aes128Gcm);
    // Nothing on the wire shows an EtherType other than l2sec's.
    for f in &lan.wire {
        assert_eq!(&f[12..14], &[0x88, 0xb5]);
    }
    // Nothing was refused anywhere except frames for others.
    for d in &lan.drops {
        for (k, _) in d.iter() {
            assert_eq!(*k, Drop::NotForUs, "{d:?}");
        }
    }
}

#[test]
fn an_outsider_without_the_group_secret_reads_and_injects_nothing() {
    let now = Instant::now();
    let mut nodes: Vec<Node> = (0..2)
        .map(|i| Node::new(cfg(i, &SECRET), now, 0).unwrap())
        .collect();
    nodes.push(Node::new(cfg(2, &[9u8; 32]), now, 0).unwrap());
    let mut lan = Lan::new(nodes, now);
    let bcast = [0xff; 6];
    let req = eth(bcast, mac(0), 0x0806, &arp(1, mac(0), ip(0), [0; 6], ip(1)));
    lan.send(0, &req).unwrap();
    assert_eq!(lan.delivered[1].len(), 1);
    assert!(
        lan.delivered[2].is_empty(),
        "the outsider opened a group frame"
    );
    assert_eq!(lan.drops[2][&Drop::AuthFailed], 1);
    // The outsider's ARP (sealed under its own secret) is refused by the members.
    let spoof = eth(bcast, mac(2), 0x0806, &arp(2, mac(2), ip(1), [0; 6], ip(0)));
    lan.send(2, &spoof).unwrap();
    assert!(lan.delivered[0].is_empty());
    assert_eq!(lan.drops[0][&Drop::AuthFailed], 1);
    // Nor can it get a session: its SEP request is a group frame the members cannot authenticate.
    let uni = eth(mac(0), mac(2), 0x0800, &ipv4(ip(2), ip(0), b"x"));
    assert_eq!(lan.send(2, &uni), Ok(Outbound::Queued));
    lan.advance(Duration::from_secs(60));
    assert!(lan.delivered[0].is_empty());
    assert!(lan.nodes[0]
        .peers(lan.now)
        .iter()
        .all(|p| p.session.is_none()));
    assert!(lan.nodes[2]
        .peers(lan.now)
        .iter()
        .all(|p| p.session.is_none()));
    assert!(
        lan.nodes[2].stats().tx_drops.get(Drop::NoSession) >= 1,
        "queued frame dropped when SEP failed"
    );
}

#[test]
fn sessions_rekey_before_they_expire_and_frames_in_flight_survive() {
    let now = Instant::now();
    let mut lan = three(now, |c| {
        c.lifetime = Duration::from_secs(20);
        c.rekey_margin = Duration::from_secs(4);
    });
    let data = |i: u8, j: u8, m: &[u8]| eth(mac(j), mac(i), 0x0800, &ipv4(ip(i), ip(j), m));
    assert_eq!(lan.send(0, &data(0, 1, b"a")), Ok(Outbound::Queued));
    assert_eq!(lan.delivered[1].len(), 1);
    // A frame sealed under the first session but delivered late, after the rekey.
    let mut late = PacketBuf::from_slice(&data(0, 1, b"late"), 64, 128);
    assert_eq!(
        lan.nodes[0].handle_outbound(&mut late, lan.now),
        Ok(Outbound::Send)
    );
    for _ in 0..17 {
        lan.advance(Duration::from_secs(1));
    }
    let p = &lan.nodes[0].peers(lan.now)[0];
    let s = p.session.expect("session");
    assert_eq!(s.key_id, 2, "rekeyed: {p:?}");
    assert_eq!(p.previous_key_id, Some(1));
    let mut b = PacketBuf::from_slice(late.data(), 0, 0);
    assert_eq!(
        lan.nodes[1].handle_inbound(&mut b, lan.now),
        Ok(Inbound::Deliver)
    );
    // New frames use the new session.
    assert_eq!(lan.send(0, &data(0, 1, b"b")), Ok(Outbound::Send));
    assert_eq!(lan.delivered[1].last(), Some(&data(0, 1, b"b")));
    assert_eq!(lan.send(1, &data(1, 0, b"c")), Ok(Outbound::Send));
    // The old session ends at its expiry; traffic goes on, and rekeys keep happening.
    for _ in 0..60 {
        lan.advance(Duration::from_secs(1));
        assert_eq!(
            lan.send(0, &data(0, 1, b"d")),
            Ok(Outbound::Send),
            "at {:?}",
            lan.now - now
        );
    }
    let p = &lan.nodes[0].peers(lan.now)[0];
    assert!(p.session.unwrap().key_id >= 4, "{p:?}");
    assert!(
        !lan.drops[1].contains_key(&Drop::AuthFailed),
        "{:?}",
        lan.drops[1]
    );
}

#[test]
fn a_restarted_host_is_heard_again_and_sessions_heal() {
    let now = Instant::now();
    let mut lan = three(now, |_| {});
    let data = |i: u8, j: u8, m: &[u8]| eth(mac(j), mac(i), 0x0800, &ipv4(ip(i), ip(j), m));
    lan.send(0, &data(0, 1, b"a")).unwrap();
    lan.send(1, &data(1, 0, b"b")).unwrap();
    let bcast = [0xff; 6];
    let g = eth(bcast, mac(1), 0x0806, &arp(1, mac(1), ip(1), [0; 6], ip(2)));
    lan.send(1, &g).unwrap();
    assert_eq!(lan.delivered[0].len(), 2);
    assert_eq!(lan.nodes[0].peers(lan.now)[0].stats.sessions, 1);
    // h2 restarts: a new epoch for its group frames, no sessions. Its ANNOUNCE tells h1 at once, which drops its
    // session with h2 and sets up a new one, before anyone sends anything.
    lan.advance(Duration::from_secs(2));
    let mut c = cfg(1, &SECRET);
    c.epoch = 2;
    lan.restart(1, Node::new(c, lan.now, 0).unwrap());
    assert_eq!(lan.nodes[0].stats().peer_restarts, 1);
    assert_eq!(lan.nodes[0].sender_epoch(&mac(1)), Some(2));
    let p = &lan.nodes[0].peers(lan.now)[0];
    assert_eq!(p.stats.sessions, 2, "{p:?}");
    assert!(p.session.is_some() && lan.nodes[1].peers(lan.now)[0].session.is_some());
    lan.send(1, &g).unwrap();
    assert_eq!(
        lan.delivered[0].len(),
        3,
        "h1 accepts the restarted host's group frames"
    );
    // Both directions work at once, nothing refused.
    assert_eq!(lan.send(0, &data(0, 1, b"c")), Ok(Outbound::Send));
    assert_eq!(lan.delivered[1].last(), Some(&data(0, 1, b"c")));
    assert_eq!(lan.send(1, &data(1, 0, b"e")), Ok(Outbound::Send));
    assert_eq!(lan.delivered[0].last(), Some(&data(1, 0, b"e")));
    for d in &lan.drops {
        assert!(
            d.keys().all(|k| *k == Drop::NotForUs),
            "nothing but flooding refused: {d:?}"
        );
    }
}

#[test]
fn with_signatures_required_only_known_signers_are_heard() {
    let now = Instant::now();
    let keys: Vec<SigningKey> = (0..3u8)
        .map(|i| SigningKey::from_bytes(&[i + 1; 32]))
        .collect();
    let mut nodes = Vec::new();
    for i in 0..3u8 {
        let mut c = cfg(i, &SECRET);
        c.require_signatures = true;
        // Host 2 is a member (it has the group secret) but nobody knows its key, and it does not sign.
        if i < 2 {
            c.signing_key = Some(keys[i as usize].clone());
            for j in 0..2u8 {
                if j != i {
                    c.peer_keys.insert(mac(j), keys[j as usize].verifying_key());
                }
            }
        }
        nodes.push(Node::new(c, now, 0).unwrap());
    }
    let mut lan = Lan::new(nodes, now);
    let bcast = [0xff; 6];
    let g0 = eth(bcast, mac(0), 0x0806, &arp(1, mac(0), ip(0), [0; 6], ip(1)));
    lan.send(0, &g0).unwrap();
    assert_eq!(lan.delivered[1].len(), 1);
    // Host 2 forges h2's ARP: refused, unsigned.
    let g2 = eth(bcast, mac(2), 0x0806, &arp(2, mac(2), ip(1), [0; 6], ip(0)));
    lan.send(2, &g2).unwrap();
    assert!(lan.delivered[0].is_empty());
    assert_eq!(lan.drops[0][&Drop::Policy], 1);
    // h1 and h2 set up a session (SEP is signed).
    let d = eth(mac(1), mac(0), 0x0800, &ipv4(ip(0), ip(1), b"x"));
    assert_eq!(lan.send(0, &d), Ok(Outbound::Queued));
    assert_eq!(lan.delivered[1].last(), Some(&d));
}

#[test]
fn thesis_suite_with_modp_and_a_thesis_ethertype() {
    let now = Instant::now();
    let mut lan = three(now, |c| {
        c.group_suite = Suite::BlowfishCbc;
        c.suites = vec![Suite::BlowfishCbc];
        c.groups = vec![DhGroup::Modp2048];
        c.ethertype = netveil_l2sec::THESIS_ETHERTYPE;
    });
    let d = eth(mac(1), mac(0), 0x0800, &ipv4(ip(0), ip(1), &[0x55; 1000]));
    assert_eq!(lan.send(0, &d), Ok(Outbound::Queued));
    assert_eq!(lan.delivered[1].last(), Some(&d));
    assert_eq!(
        lan.send(1, &eth(mac(0), mac(1), 0x86dd, &[1; 60])),
        Ok(Outbound::Send)
    );
    assert_eq!(lan.delivered[0].len(), 1);
    for f in &lan.wire {
        assert_eq!(&f[12..14], &[0x19, 0x82]);
    }
    let s = lan.nodes[0].peers(lan.now)[0].session.unwrap();
    assert_eq!(s.suite, Suite::BlowfishCbc);
}

#[test]
fn a_peer_that_never_answers_costs_a_bounded_queue() {
    let now = Instant::now();
    let mut lan = three(now, |c| c.queue_limit = 8);
    let ghost = [0x02, 0, 0x5e, 0, 0x53, 0x99];
    let d = eth(
        ghost,
        mac(0),
        0x0800,
        &ipv4(ip(0), Ipv4Addr::new(192, 0, 2, 99), b"x"),
    );
    for _ in 0..8 {
        assert_eq!(lan.send(0, &d), Ok(Outbound::Queued));
    }
    assert_eq!(lan.send(0, &d), Err(Drop::QueueFull));
    lan.advance(Duration::from_secs(30));
    let st = lan.nodes[0].stats();
    assert_eq!(st.tx_drops.get(Drop::NoSession), 8);
    assert_eq!(st.sep_errors.get("sep-timeout"), Some(&1));
    assert!(
        lan.nodes[0].peers(lan.now).is_empty(),
        "the peer is forgotten"
    );
    // Other hosts never answered a request for someone else.
    assert!(lan.nodes[1].peers(lan.now).is_empty());
}
