//! Nodes on a simulated LAN (every frame flooded to every other node, as a hub does): group frames, sessions set up
//! by SEP on demand, frames queued meanwhile, rekeying, restarts, failures, outsiders and signatures.

use netveil_l2sec::ed25519_dalek::SigningKey;
use netveil_l2sec::node::{Inbound, Node, NodeConfig, NodeEvent, Outbound};
use netveil_l2sec::sep::DhGroup;
use netveil_l2sec::{Drop, NodeDrop, Suite};
use netveil_wire::PacketBuf;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

thread_local! {
    /// The next seed of [`rng`]: each test runs on its own thread, so its generators are the same every run.
    static NEXT_SEED: std::cell::Cell<u64> = const { std::cell::Cell::new(1) };
}

/// A seeded generator (not for production), a new seed for every call of a test.
fn rng() -> Box<dyn netveil_crypto::rand::Rng> {
    let seed = NEXT_SEED.with(|s| s.replace(s.get() + 1));
    Box::new(netveil_crypto::rand::SeededRng::new(seed))
}

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
    drops: Vec<HashMap<NodeDrop, usize>>,
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
    fn send(&mut self, i: usize, frame: &[u8]) -> Result<Outbound, NodeDrop> {
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
            Node::new(c, now, 1_700_000_000, rng()).unwrap()
        })
        .collect();
    Lan::new(nodes, now)
}

/// Nodes run on the generators they are given: with the same seeds, ANNOUNCE-to-data gives the same frames on
/// the wire (SEP's ids, nonces and key shares, the sessions' first sequence numbers and keys); other seeds give
/// other frames.
#[test]
fn same_seeds_same_frames() {
    let run = |base: u64| {
        NEXT_SEED.with(|s| s.set(base));
        let now = Instant::now();
        let nodes = (0..2)
            .map(|i| Node::new(cfg(i, &SECRET), now, 0, rng()).unwrap())
            .collect();
        let mut lan = Lan::new(nodes, now);
        let req = eth(
            [0xff; 6],
            mac(0),
            0x0806,
            &arp(1, mac(0), ip(0), [0; 6], ip(1)),
        );
        assert_eq!(lan.send(0, &req), Ok(Outbound::Send));
        let reply = eth(
            mac(0),
            mac(1),
            0x0806,
            &arp(2, mac(1), ip(1), mac(0), ip(0)),
        );
        assert_eq!(lan.send(1, &reply), Ok(Outbound::Queued));
        let data = eth(mac(1), mac(0), 0x0800, &ipv4(ip(0), ip(1), b"hello"));
        assert_eq!(lan.send(0, &data), Ok(Outbound::Send));
        assert_eq!(lan.delivered[1].last(), Some(&data));
        lan.wire
    };
    let a = run(100);
    assert!(a.len() >= 8, "{} frames", a.len());
    assert_eq!(a, run(100), "same seeds, same frames");
    let b = run(200);
    assert_eq!(a.len(), b.len());
    assert_ne!(a, b, "other seeds, other frames");
    // The group ARP request's first sequence number is drawn too: even the first frame differs.
    assert_ne!(a[0], b[0]);
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
        lan.drops[2][&NodeDrop::NotForUs] >= 1,
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
            assert_eq!(*k, NodeDrop::NotForUs, "{d:?}");
        }
    }
}

#[test]
fn an_outsider_without_the_group_secret_reads_and_injects_nothing() {
    let now = Instant::now();
    let mut nodes: Vec<Node> = (0..2)
        .map(|i| Node::new(cfg(i, &SECRET), now, 0, rng()).unwrap())
        .collect();
    nodes.push(Node::new(cfg(2, &[9u8; 32]), now, 0, rng()).unwrap());
    let mut lan = Lan::new(nodes, now);
    let bcast = [0xff; 6];
    let req = eth(bcast, mac(0), 0x0806, &arp(1, mac(0), ip(0), [0; 6], ip(1)));
    lan.send(0, &req).unwrap();
    assert_eq!(lan.delivered[1].len(), 1);
    assert!(
        lan.delivered[2].is_empty(),
        "the outsider opened a group frame"
    );
    assert_eq!(lan.drops[2][&NodeDrop::Frame(Drop::AuthFailed)], 1);
    // The outsider's ARP (sealed under its own secret) is refused by the members.
    let spoof = eth(bcast, mac(2), 0x0806, &arp(2, mac(2), ip(1), [0; 6], ip(0)));
    lan.send(2, &spoof).unwrap();
    assert!(lan.delivered[0].is_empty());
    assert_eq!(lan.drops[0][&NodeDrop::Frame(Drop::AuthFailed)], 1);
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
        lan.nodes[2].stats().tx_drops.get(NodeDrop::NoSession) >= 1,
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
        !lan.drops[1].contains_key(&NodeDrop::Frame(Drop::AuthFailed)),
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
    lan.restart(1, Node::new(c, lan.now, 0, rng()).unwrap());
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
            d.keys().all(|k| *k == NodeDrop::NotForUs),
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
        nodes.push(Node::new(c, now, 0, rng()).unwrap());
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
    assert_eq!(lan.drops[0][&NodeDrop::Frame(Drop::Policy)], 1);
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
    assert_eq!(lan.send(0, &d), Err(NodeDrop::QueueFull));
    lan.advance(Duration::from_secs(30));
    let st = lan.nodes[0].stats();
    assert_eq!(st.tx_drops.get(NodeDrop::NoSession), 8);
    assert_eq!(st.sep_errors.get("sep-timeout"), Some(&1));
    assert!(
        lan.nodes[0].peers(lan.now).is_empty(),
        "the peer is forgotten"
    );
    // Other hosts never answered a request for someone else.
    assert!(lan.nodes[1].peers(lan.now).is_empty());
}

/// Nodes with signing keys; every node knows every other's key (and, with `ips`, its address).
fn signed(now: Instant, n: u8, ips: bool) -> Lan {
    let keys: Vec<SigningKey> = (0..n)
        .map(|i| SigningKey::from_bytes(&[i + 1; 32]))
        .collect();
    let nodes = (0..n)
        .map(|i| {
            let mut c = cfg(i, &SECRET);
            c.require_signatures = true;
            c.signing_key = Some(keys[i as usize].clone());
            for j in (0..n).filter(|j| *j != i) {
                c.peer_keys.insert(mac(j), keys[j as usize].verifying_key());
                if ips {
                    c.peer_ips.insert(mac(j), ip(j));
                }
            }
            Node::new(c, now, 0, rng()).unwrap()
        })
        .collect();
    Lan::new(nodes, now)
}

/// Hands `frame` (bytes as they were on the wire) to node `to` only.
fn inject(lan: &mut Lan, to: usize, frame: &[u8]) -> Result<Inbound, NodeDrop> {
    let mut b = PacketBuf::from_slice(frame, 0, 0);
    let r = lan.nodes[to].handle_inbound(&mut b, lan.now);
    match r {
        Ok(Inbound::Deliver) => lan.delivered[to].push(b.data().to_vec()),
        Ok(Inbound::Control) => {}
        Err(d) => *lan.drops[to].entry(d).or_default() += 1,
    }
    r
}

/// The group frames node `i` put on the wire since `from` (an index into `lan.wire`).
fn group_frames_of(lan: &Lan, i: u8, from: usize) -> Vec<Vec<u8>> {
    lan.wire[from..]
        .iter()
        .filter(|f| f[0] & 1 == 1 && f[6..12] == mac(i))
        .cloned()
        .collect()
}

/// Finding: recorded group frames from before and after a restart of h1, replayed alternately, were all accepted
/// (each epoch got a fresh window when it came back). Now the old epoch is refused and the new one's window holds.
#[test]
fn group_frames_replayed_across_a_restart_are_refused() {
    let now = Instant::now();
    let mut lan = three(now, |_| {});
    let bcast = [0xff; 6];
    let data = |i: u8, j: u8, m: &[u8]| eth(mac(j), mac(i), 0x0800, &ipv4(ip(i), ip(j), m));
    // Before: ARP, a broadcast, and a session h1 -> h2 (its SEP messages are group frames too).
    let arp_req = eth(bcast, mac(0), 0x0806, &arp(1, mac(0), ip(0), [0; 6], ip(1)));
    let udp = eth(
        bcast,
        mac(0),
        0x0800,
        &ipv4(ip(0), Ipv4Addr::new(192, 0, 2, 255), b"b"),
    );
    lan.send(0, &arp_req).unwrap();
    lan.send(0, &udp).unwrap();
    lan.send(0, &data(0, 1, b"x")).unwrap();
    let before = group_frames_of(&lan, 0, 0);
    assert!(before.len() >= 6, "{}", before.len());
    // h1 restarts (epoch 2) and does it all again.
    lan.advance(Duration::from_secs(1));
    let mark = lan.wire.len();
    let mut c = cfg(0, &SECRET);
    c.epoch = 2;
    lan.restart(0, Node::new(c, lan.now, 0, rng()).unwrap());
    lan.send(0, &arp_req).unwrap();
    lan.send(0, &udp).unwrap();
    lan.send(0, &data(0, 1, b"y")).unwrap();
    let after = group_frames_of(&lan, 0, mark);
    assert!(after.len() >= 3, "{}", after.len());
    assert_eq!(lan.nodes[1].sender_epoch(&mac(0)), Some(2));
    // The attacker replays them to h2, alternately: nothing is delivered or handled, all counted.
    let delivered = lan.delivered[1].len();
    let st = |l: &Lan| {
        let s = l.nodes[1].stats();
        (s.rx_group, s.sep_messages, s.sessions_established)
    };
    let counts = st(&lan);
    lan.drops[1].clear();
    for k in 0..before.len().max(after.len()) {
        for f in [before.get(k), after.get(k)].into_iter().flatten() {
            assert!(inject(&mut lan, 1, f).is_err(), "replay {k} accepted");
        }
    }
    assert_eq!(lan.delivered[1].len(), delivered);
    assert_eq!(st(&lan), counts, "a replay was opened or handled");
    assert_eq!(lan.drops[1][&NodeDrop::OldEpoch], before.len());
    assert_eq!(lan.drops[1][&NodeDrop::Frame(Drop::Replayed)], after.len());
    assert_eq!(lan.nodes[1].sender_epoch(&mac(0)), Some(2));
    // h1 and h2 still talk.
    assert_eq!(lan.send(0, &data(0, 1, b"z")), Ok(Outbound::Send));
    assert_eq!(lan.delivered[1].last(), Some(&data(0, 1, b"z")));
}

/// Finding: a replayed SEP REQUEST (an old epoch's) displaced a live exchange. Now it is refused before SEP.
#[test]
fn a_replayed_request_does_not_displace_a_live_exchange() {
    let now = Instant::now();
    let mut lan = three(now, |_| {});
    let data = |i: u8, j: u8, m: &[u8]| eth(mac(j), mac(i), 0x0800, &ipv4(ip(i), ip(j), m));
    lan.send(0, &data(0, 1, b"x")).unwrap();
    let old_request = group_frames_of(&lan, 0, 0)
        .into_iter()
        .next()
        .expect("h1's REQUEST");
    // h1 restarts; h2 learns it from the ANNOUNCE and starts a new exchange. Deliver nothing else yet: h2's
    // REQUEST is in flight and h2 waits for the ACCEPT.
    let mut c = cfg(0, &SECRET);
    c.epoch = 2;
    lan.nodes[0] = Node::new(c, lan.now, 0, rng()).unwrap();
    let announce = lan.nodes[0].poll_transmit().unwrap();
    assert_eq!(inject(&mut lan, 1, &announce), Ok(Inbound::Control));
    let request = lan.nodes[1]
        .poll_transmit()
        .expect("h2 restarts SEP with h1");
    assert!(lan.nodes[1].peers(lan.now)[0].handshaking);
    // The replayed old REQUEST: refused as an old epoch; h2's exchange goes on.
    assert_eq!(inject(&mut lan, 1, &old_request), Err(NodeDrop::OldEpoch));
    assert!(
        lan.nodes[1].poll_transmit().is_none(),
        "h2 answered a replay"
    );
    assert!(lan.nodes[1].peers(lan.now)[0].handshaking);
    // The real exchange completes.
    lan.flood(1, request);
    lan.pump();
    let p = &lan.nodes[1].peers(lan.now)[0];
    assert!(p.session.is_some() && p.session.unwrap().initiator, "{p:?}");
    assert_eq!(lan.send(1, &data(1, 0, b"y")), Ok(Outbound::Send));
    assert_eq!(lan.delivered[0].last(), Some(&data(1, 0, b"y")));
}

/// Findings: a forged unicast frame with a peer's source MAC and an unknown key id started a full SEP with that peer
/// (once a second), and random source MACs filled the peer table. Now they are dropped, counted, and start nothing.
#[test]
fn forged_unicast_frames_start_nothing_and_create_no_peer() {
    let now = Instant::now();
    let mut lan = three(now, |_| {});
    let data = |i: u8, j: u8, m: &[u8]| eth(mac(j), mac(i), 0x0800, &ipv4(ip(i), ip(j), m));
    lan.send(0, &data(0, 1, b"x")).unwrap();
    // (Past the start announcements, so that h2's group frames below would all be SEP.)
    lan.advance(Duration::from_secs(4));
    let mut genuine = PacketBuf::from_slice(&data(0, 1, b"y"), 64, 128);
    assert_eq!(
        lan.nodes[0].handle_outbound(&mut genuine, lan.now),
        Ok(Outbound::Send)
    );
    let genuine = genuine.data().to_vec();
    let sessions = |l: &Lan| l.nodes[1].stats().sessions_established;
    let before = sessions(&lan);
    let tx_group = lan.nodes[1].stats().tx_group;
    // h1's MAC, every other key id, repeated over several seconds.
    for round in 0..3 {
        for k in 0..=255u8 {
            let mut f = genuine.clone();
            if f[15] == k {
                continue;
            }
            f[15] = k;
            assert_eq!(
                inject(&mut lan, 1, &f),
                Err(NodeDrop::Frame(Drop::UnknownKeyId)),
                "key id {k}"
            );
        }
        lan.advance(Duration::from_millis(1100));
        assert_eq!(sessions(&lan), before, "round {round}");
    }
    // To h3, which has no session with h1: dropped, no peer.
    let mut to_h3 = genuine.clone();
    to_h3[..6].copy_from_slice(&mac(2));
    assert_eq!(inject(&mut lan, 2, &to_h3), Err(NodeDrop::NoSession));
    // Random source MACs.
    for i in 0..5000u32 {
        let mut f = genuine.clone();
        f[6..12].copy_from_slice(&[0x02, 0xee, (i >> 16) as u8, (i >> 8) as u8, i as u8, 7]);
        assert_eq!(inject(&mut lan, 1, &f), Err(NodeDrop::NoSession));
    }
    assert!(lan.nodes[1].poll_transmit().is_none(), "h2 sent something");
    assert!(lan.nodes[2].poll_transmit().is_none(), "h3 sent something");
    assert_eq!(lan.nodes[1].stats().tx_group, tx_group, "h2 started SEP");
    assert_eq!(lan.nodes[1].peers(lan.now).len(), 1, "the peer table grew");
    assert!(lan.nodes[2].peers(lan.now).is_empty());
    assert_eq!(lan.nodes[1].stats().rx_drops.get(NodeDrop::NoSession), 5000);
    assert_eq!(sessions(&lan), before);
    // The genuine frame still opens.
    assert_eq!(inject(&mut lan, 1, &genuine), Ok(Inbound::Deliver));
}

/// Group frames that do not authenticate (a non-member's, a forged epoch, a member's bad signature) leave no
/// sender state.
/// h2 requires signatures and knows h1's key (that of `SigningKey::from_bytes(&[1; 32])`); returns an ARP
/// broadcast from h1.
fn strict_receiver(lan: &mut Lan, now: Instant) -> Vec<u8> {
    lan.nodes[1] = {
        let mut c = cfg(1, &SECRET);
        c.require_signatures = true;
        c.signing_key = Some(SigningKey::from_bytes(&[2; 32]));
        c.peer_keys
            .insert(mac(0), SigningKey::from_bytes(&[1; 32]).verifying_key());
        Node::new(c, now, 0, rng()).unwrap()
    };
    eth(
        [0xff; 6],
        mac(0),
        0x0806,
        &arp(1, mac(0), ip(0), [0; 6], ip(1)),
    )
}

#[test]
fn unauthenticated_group_frames_leave_no_sender_state() {
    let now = Instant::now();
    let mut lan = signed(now, 2, false);
    let mallory_key = SigningKey::from_bytes(&[9; 32]);
    // An outsider (another secret), and a member signing with a key that is not h1's, both as h1.
    let mut outsider = cfg(0, &[9u8; 32]);
    outsider.epoch = 5;
    outsider.signing_key = Some(SigningKey::from_bytes(&[1; 32]));
    let mut forger = cfg(0, &SECRET);
    forger.epoch = 6;
    forger.signing_key = Some(mallory_key);
    let g = strict_receiver(&mut lan, now);
    for (c, want) in [
        (outsider, NodeDrop::Frame(Drop::AuthFailed)),
        (forger, NodeDrop::Frame(Drop::BadSignature)),
    ] {
        let mut n = Node::new(c, now, 0, rng()).unwrap();
        let mut f = PacketBuf::from_slice(&g, 64, 128);
        n.handle_outbound(&mut f, now).unwrap();
        for x in [f.data().to_vec(), n.poll_transmit().unwrap()] {
            assert_eq!(inject(&mut lan, 1, &x), Err(want));
        }
        assert_eq!(lan.nodes[1].group_senders(), 0);
        assert_eq!(lan.nodes[1].sender_epoch(&mac(0)), None);
    }
}

#[test]
fn frames_refused_by_their_header_cost_no_key_derivation() {
    let now = Instant::now();
    let mut lan = signed(now, 2, false);
    let g = strict_receiver(&mut lan, now);
    // A member that does not sign, as h1; a member signing as h3, whose key nobody listed. Each with new epochs.
    let mut unsigned = cfg(0, &SECRET);
    unsigned.epoch = 5;
    let mut stranger = cfg(3, &SECRET);
    stranger.epoch = 6;
    stranger.signing_key = Some(SigningKey::from_bytes(&[4; 32]));
    let g3 = eth(
        [0xff; 6],
        mac(3),
        0x0806,
        &arp(1, mac(3), ip(3), [0; 6], ip(1)),
    );
    for (c, frame, want) in [
        (unsigned, &g, NodeDrop::Frame(Drop::Policy)),
        (stranger, &g3, NodeDrop::Frame(Drop::NoPeerKey)),
    ] {
        let mut n = Node::new(c, now, 0, rng()).unwrap();
        let mut f = PacketBuf::from_slice(frame, 64, 128);
        n.handle_outbound(&mut f, now).unwrap();
        for _ in 0..3 {
            assert_eq!(inject(&mut lan, 1, f.data()), Err(want));
        }
    }
    assert_eq!(lan.nodes[1].stats().group_key_derivations, 0);
    assert_eq!(lan.nodes[1].group_senders(), 0);
}

/// The epoch on the wire and in the key derivation, checked with an independent implementation (HKDF-SHA256 from
/// `hmac`/`sha2`, AES-GCM from `aes-gcm`): EP flag, key id 0, 8-byte epoch, keys from "group" ‖ MAC ‖ epoch.
#[test]
fn group_frames_carry_the_64_bit_epoch_that_keys_them() {
    use aes_gcm::aead::{AeadInPlace, KeyInit};
    use hmac::Mac as _;
    type H = hmac::Hmac<sha2::Sha256>;
    let now = Instant::now();
    let epoch = 0x0001_8f3a_1234_5678u64;
    let mut c = cfg(0, &SECRET);
    c.epoch = epoch;
    let mut n = Node::new(c, now, 0, rng()).unwrap();
    assert_eq!(n.epoch(), epoch);
    let clear = eth(
        [0xff; 6],
        mac(0),
        0x0806,
        &arp(1, mac(0), ip(0), [0; 6], ip(1)),
    );
    let mut f = PacketBuf::from_slice(&clear, 64, 128);
    n.handle_outbound(&mut f, now).unwrap();
    let w = f.data().to_vec();
    assert_eq!(w[14], 0x25, "version 1, EP, ENC");
    assert_eq!(w[15], 0, "group frames carry key id 0");
    assert_eq!(&w[20..28], &epoch.to_be_bytes());
    // okm = HKDF(salt "netveil-l2sec", ikm secret, info "netveil-l2sec aes128gcm" 0x00 "group" MAC epoch)
    let mut x = <H as hmac::Mac>::new_from_slice(b"netveil-l2sec").unwrap();
    x.update(&SECRET);
    let prk = x.finalize().into_bytes();
    let mut e = <H as hmac::Mac>::new_from_slice(&prk).unwrap();
    e.update(b"netveil-l2sec aes128gcm\0group");
    e.update(&mac(0));
    e.update(&epoch.to_be_bytes());
    e.update(&[1]);
    let okm = e.finalize().into_bytes();
    let (key, salt) = (&okm[..16], &okm[16..20]);
    let seq = u32::from_be_bytes(w[16..20].try_into().unwrap());
    let mut nonce = salt.to_vec();
    nonce.extend_from_slice(&u64::from(seq).to_be_bytes());
    let (aad, rest) = w.split_at(28);
    let (ct, tag) = rest.split_at(rest.len() - 16);
    let mut section = ct.to_vec();
    aes_gcm::Aes128Gcm::new_from_slice(key)
        .unwrap()
        .decrypt_in_place_detached(nonce[..].into(), aad, &mut section, tag.into())
        .unwrap();
    assert_eq!(&section[..3], &[0x08, 0x06, 0]);
    assert_eq!(&section[3..], &clear[14..]);
    // The next epoch gives other keys: the same frame does not open under it.
    let mut c = cfg(0, &SECRET);
    c.epoch = epoch + 1;
    let mut n2 = Node::new(c, now, 0, rng()).unwrap();
    let mut f2 = PacketBuf::from_slice(&clear, 64, 128);
    n2.handle_outbound(&mut f2, now).unwrap();
    assert_eq!(&f2.data()[20..28], &(epoch + 1).to_be_bytes());
    let mut forged = w.clone();
    forged[20..28].copy_from_slice(&(epoch + 1).to_be_bytes());
    let mut r = Node::new(cfg(1, &SECRET), now, 0, rng()).unwrap();
    let mut b = PacketBuf::from_slice(&forged, 0, 0);
    assert_eq!(
        r.handle_inbound(&mut b, now),
        Err(NodeDrop::Frame(Drop::AuthFailed))
    );
    // A version-1 node refuses epoch 0.
    let mut c = cfg(0, &SECRET);
    c.epoch = 0;
    assert!(Node::new(c, now, 0, rng()).is_err());
}

/// A restarted host announces its epoch: a peer with a session heals at once, one without does nothing.
#[test]
fn a_restart_announcement_heals_sessions_without_traffic() {
    let now = Instant::now();
    let mut lan = three(now, |_| {});
    let data = |i: u8, j: u8, m: &[u8]| eth(mac(j), mac(i), 0x0800, &ipv4(ip(i), ip(j), m));
    lan.send(0, &data(0, 1, b"x")).unwrap();
    let mut c = cfg(1, &SECRET);
    c.epoch = 9;
    lan.restart(1, Node::new(c, lan.now, 0, rng()).unwrap());
    assert_eq!(lan.nodes[0].stats().peer_restarts, 1);
    assert_eq!(lan.nodes[2].stats().peer_restarts, 1);
    assert_eq!(lan.nodes[0].peers(lan.now)[0].stats.sessions, 2);
    assert!(
        lan.nodes[2].peers(lan.now).is_empty(),
        "h3 had no session with h2: nothing to heal, no exchange"
    );
    // The announcements repeat (1 s, 3 s) under the same epoch: nothing more happens.
    lan.advance(Duration::from_secs(4));
    assert_eq!(lan.nodes[1].stats().announces, 3);
    assert_eq!(lan.nodes[0].stats().peer_restarts, 1);
    assert_eq!(lan.nodes[0].peers(lan.now)[0].stats.sessions, 2);
}

/// Findings: any member could claim any address in ARP. Now the sender hardware address must be the frame's
/// source, and the sender address the source's binding (configured here).
#[test]
fn a_signed_member_can_claim_only_its_own_address() {
    let now = Instant::now();
    let mut lan = signed(now, 3, true);
    let bcast = [0xff; 6];
    // h3 claims h2's address (gratuitous ARP, then a reply to h1): dropped.
    for f in [
        eth(bcast, mac(2), 0x0806, &arp(1, mac(2), ip(1), [0; 6], ip(1))),
        eth(
            mac(0),
            mac(2),
            0x0806,
            &arp(2, mac(2), ip(1), mac(0), ip(0)),
        ),
        // Its own address with h2's hardware address.
        eth(bcast, mac(2), 0x0806, &arp(1, mac(1), ip(2), [0; 6], ip(0))),
        // h1's own address (bound to h1 itself).
        eth(bcast, mac(2), 0x0806, &arp(1, mac(2), ip(0), [0; 6], ip(0))),
    ] {
        let _ = lan.send(2, &f);
    }
    assert!(lan.delivered[0].is_empty(), "{:?}", lan.delivered[0]);
    assert_eq!(lan.drops[0][&NodeDrop::ArpSpoofed], 4);
    assert_eq!(lan.drops[1][&NodeDrop::ArpSpoofed], 3);
    // Its own address, and an ARP probe (0.0.0.0), pass.
    let own = eth(bcast, mac(2), 0x0806, &arp(1, mac(2), ip(2), [0; 6], ip(0)));
    let probe = eth(
        bcast,
        mac(2),
        0x0806,
        &arp(1, mac(2), Ipv4Addr::UNSPECIFIED, [0; 6], ip(0)),
    );
    lan.send(2, &own).unwrap();
    lan.send(2, &probe).unwrap();
    assert_eq!(lan.delivered[0], vec![own, probe]);
}

/// Without configured addresses, SEP binds the address a peer stated; another MAC can then neither bind it in SEP
/// nor claim it in ARP. A member without a binding may claim an address nobody holds.
#[test]
fn sep_binds_addresses_to_one_mac() {
    let now = Instant::now();
    let mut lan = signed(now, 3, false);
    let data = |i: u8, j: u8, m: &[u8]| eth(mac(j), mac(i), 0x0800, &ipv4(ip(i), ip(j), m));
    lan.send(0, &data(0, 1, b"x")).unwrap();
    assert_eq!(lan.nodes[0].bound_mac(ip(1)), Some(mac(1)));
    assert_eq!(lan.nodes[0].peers(lan.now)[0].bound_ip, Some(ip(1)));
    // h3 (a signed member) is configured with h2's address and asks h1 for a session: refused.
    let keys: Vec<SigningKey> = (0..3u8)
        .map(|i| SigningKey::from_bytes(&[i + 1; 32]))
        .collect();
    let mut c = NodeConfig::new(mac(2), ip(1), 24, Zeroizing::new(SECRET.to_vec()));
    c.epoch = 2;
    c.signing_key = Some(keys[2].clone());
    c.require_signatures = true;
    for j in 0..2u8 {
        c.peer_keys.insert(mac(j), keys[j as usize].verifying_key());
    }
    lan.restart(2, Node::new(c, lan.now, 0, rng()).unwrap());
    assert_eq!(
        lan.send(2, &data(2, 0, b"y")),
        Ok(Outbound::Queued),
        "h3 queues for SEP"
    );
    lan.advance(Duration::from_secs(20));
    assert!(lan.nodes[2]
        .peers(lan.now)
        .iter()
        .all(|p| p.session.is_none()));
    assert!(lan.nodes[0].stats().sep_errors["sep-ip-bound"] >= 1);
    assert_eq!(lan.nodes[0].bound_mac(ip(1)), Some(mac(1)));
    // Nor in ARP.
    let bcast = [0xff; 6];
    let before = lan.delivered[0].len();
    lan.send(
        2,
        &eth(bcast, mac(2), 0x0806, &arp(1, mac(2), ip(1), [0; 6], ip(0))),
    )
    .unwrap();
    assert_eq!(lan.delivered[0].len(), before);
    // An address nobody holds: h3 has no binding at h1 yet, so it may claim it.
    let free = Ipv4Addr::new(192, 0, 2, 77);
    let claim = eth(bcast, mac(2), 0x0806, &arp(1, mac(2), free, [0; 6], ip(0)));
    lan.send(2, &claim).unwrap();
    assert_eq!(lan.delivered[0].last(), Some(&claim));
}

/// SEP exchanges started are rate-limited (20 per second by default); postponed ones are retried.
#[test]
fn sep_exchanges_are_rate_limited_and_postponed_ones_retried() {
    let now = Instant::now();
    let mut lan = three(now, |_| {});
    let ghost = |k: u8| [0x02, 0, 0x5e, 0, 0x54, k];
    for k in 0..30u8 {
        let d = eth(
            ghost(k),
            mac(0),
            0x0800,
            &ipv4(ip(0), Ipv4Addr::new(192, 0, 2, 100 + k), b"x"),
        );
        assert_eq!(lan.send(0, &d), Ok(Outbound::Queued));
    }
    let handshaking = |l: &Lan| {
        l.nodes[0]
            .peers(l.now)
            .iter()
            .filter(|p| p.handshaking)
            .count()
    };
    assert_eq!(handshaking(&lan), 20);
    assert_eq!(lan.nodes[0].stats().sep_errors["sep-rate-limited"], 10);
    // Tokens come back at 20 per second; the postponed exchanges start.
    lan.advance(Duration::from_millis(600));
    assert_eq!(handshaking(&lan), 30);
    // Responder side: a burst of requests beyond the bucket is refused and counted (h2 answers h1's first 20).
}

fn events(n: &mut Node) -> Vec<NodeEvent> {
    std::iter::from_fn(|| n.poll_event()).collect()
}

/// The events a host's log shows: sessions up (on both ends, one initiator), rekeyed, expired; a peer's restart; an
/// exchange that failed.
#[test]
fn events_tell_sessions_restarts_and_failures() {
    let now = Instant::now();
    let mut lan = three(now, |c| {
        c.lifetime = Duration::from_secs(20);
        c.rekey_margin = Duration::from_secs(4);
    });
    let data = |i: u8, j: u8, m: &[u8]| eth(mac(j), mac(i), 0x0800, &ipv4(ip(i), ip(j), m));
    lan.send(0, &data(0, 1, b"a")).unwrap();
    let e0 = events(&mut lan.nodes[0]);
    let e1 = events(&mut lan.nodes[1]);
    let suite = |e: &[NodeEvent]| match e.first() {
        Some(NodeEvent::SessionUp { suite, .. }) => *suite,
        other => panic!("not a session: {other:?}"),
    };
    let s = suite(&e0);
    let up = |peer: u8, key_id: u8, initiator: bool, rekey: bool| NodeEvent::SessionUp {
        peer: mac(peer),
        ip: ip(peer),
        key_id,
        suite: s,
        initiator,
        rekey,
    };
    assert_eq!(e0, [up(1, 1, true, false)]);
    assert_eq!(e1, [up(0, 1, false, false)]);
    assert!(events(&mut lan.nodes[2]).is_empty(), "h3 saw no session");
    // The rekey, then the first session's end.
    for _ in 0..17 {
        lan.advance(Duration::from_secs(1));
    }
    let e0 = events(&mut lan.nodes[0]);
    assert!(e0.contains(&up(1, 2, true, true)), "{e0:?}");
    lan.advance(Duration::from_secs(4));
    let e0 = events(&mut lan.nodes[0]);
    assert!(
        e0.contains(&NodeEvent::SessionExpired {
            peer: mac(1),
            key_id: 1
        }),
        "{e0:?}"
    );
    // h2 restarts: h1 hears it.
    let mut c = cfg(1, &SECRET);
    c.lifetime = Duration::from_secs(20);
    c.epoch = 2;
    lan.restart(1, Node::new(c, lan.now, 0, rng()).unwrap());
    let e0 = events(&mut lan.nodes[0]);
    assert_eq!(e0.first(), Some(&NodeEvent::PeerRestarted { peer: mac(1) }));
    // A host that never answers: the exchange fails.
    let ghost = [0x02, 0, 0x5e, 0, 0x53, 0x99];
    let d = eth(
        ghost,
        mac(0),
        0x0800,
        &ipv4(ip(0), Ipv4Addr::new(192, 0, 2, 99), b"x"),
    );
    assert_eq!(lan.send(0, &d), Ok(Outbound::Queued));
    lan.advance(Duration::from_secs(30));
    let e0 = events(&mut lan.nodes[0]);
    assert!(
        e0.contains(&NodeEvent::SepFailed {
            peer: ghost,
            reason: "sep-timeout"
        }),
        "{e0:?}"
    );
}
