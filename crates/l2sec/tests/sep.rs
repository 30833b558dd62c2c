//! SEP: two or three hosts exchange messages in process, with a clock the test advances. Every exchange that
//! ends in `Established` on both sides is checked with real frames sealed by one side and opened by the other,
//! in both directions.

mod common;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::{buf, frame_bytes, l3};
use netveil_l2sec::sep::{
    msg_type, public_len, DhGroup, Established, Mac, Sep, SepConfig, SepError, SepEvent, HEADER_LEN,
};
use netveil_l2sec::{RxConfig, RxSession, SealOpts, Suite, TxConfig, TxSession};

const A: Mac = [0x02, 0, 0, 0, 0, 0x0a];
const B: Mac = [0x02, 0, 0, 0, 0, 0x0b];
const IP_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const IP_B: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);
const RTX: Duration = Duration::from_millis(500);
const ATTEMPTS: u32 = 4;

fn cfg(mac: Mac, ip: Ipv4Addr) -> SepConfig {
    SepConfig {
        mac,
        ip,
        prefix_len: 24,
        suites: vec![
            Suite::Aes128Gcm,
            Suite::ChaCha20Poly1305,
            Suite::BlowfishCbc,
        ],
        groups: vec![DhGroup::X25519, DhGroup::Modp2048],
        lifetime: Duration::from_secs(3600),
        retransmit: RTX,
        attempts: ATTEMPTS,
    }
}

/// One message in flight.
#[derive(Clone)]
struct Wire {
    from: Mac,
    to: Mac,
    msg: Vec<u8>,
}

/// What a filter does with a message in flight.
#[allow(dead_code)]
enum Fate {
    Deliver,
    Drop,
}

/// Hosts on one LAN: every message is delivered to every other host (a group frame is broadcast).
struct Lan {
    hosts: Vec<Sep>,
    now: Instant,
    established: HashMap<Mac, Vec<Established>>,
    failed: HashMap<Mac, Vec<(Mac, SepError)>>,
    /// Every message sent, in order.
    log: Vec<Wire>,
    /// Results of `handle_message` at the addressed host.
    errors: Vec<(Mac, SepError)>,
}

impl Lan {
    fn new(cfgs: Vec<SepConfig>) -> Lan {
        Lan {
            hosts: cfgs.into_iter().map(Sep::new).collect(),
            now: Instant::now(),
            established: HashMap::new(),
            failed: HashMap::new(),
            log: Vec::new(),
            errors: Vec::new(),
        }
    }
    fn two() -> Lan {
        Lan::new(vec![cfg(A, IP_A), cfg(B, IP_B)])
    }
    fn idx(&self, mac: Mac) -> usize {
        self.hosts
            .iter()
            .position(|h| h.config().mac == mac)
            .unwrap()
    }
    fn host(&mut self, mac: Mac) -> &mut Sep {
        let i = self.idx(mac);
        &mut self.hosts[i]
    }
    fn initiate(&mut self, from: Mac, to: Mac, ip: Option<Ipv4Addr>, key_id: u8) -> bool {
        let now = self.now;
        self.host(from).initiate(to, ip, key_id, now)
    }

    /// Collects the events of every host: messages into `out`, sessions and failures into the records.
    fn drain(&mut self, out: &mut Vec<Wire>) {
        for h in &mut self.hosts {
            let me = h.config().mac;
            while let Some(ev) = h.poll_event() {
                match ev {
                    SepEvent::Transmit { to, msg } => {
                        let w = Wire { from: me, to, msg };
                        self.log.push(w.clone());
                        out.push(w);
                    }
                    SepEvent::Established(e) => self.established.entry(me).or_default().push(*e),
                    SepEvent::Failed { peer, reason } => {
                        self.failed.entry(me).or_default().push((peer, reason))
                    }
                }
            }
        }
    }

    /// Delivers messages (through `filter`) until none is left in flight; then advances the clock to the next
    /// timeout, repeatedly, until nothing is pending anywhere. Returns the number of messages sent.
    fn run(&mut self, filter: &mut dyn FnMut(&mut Wire) -> Fate) -> usize {
        let sent_before = self.log.len();
        for _ in 0..10_000 {
            let mut flight = Vec::new();
            self.drain(&mut flight);
            if flight.is_empty() {
                let next = self.hosts.iter().filter_map(|h| h.poll_timeout()).min();
                let Some(t) = next else { break };
                self.now = self.now.max(t);
                let now = self.now;
                for h in &mut self.hosts {
                    h.handle_timeout(now);
                }
                continue;
            }
            for mut w in flight {
                if let Fate::Drop = filter(&mut w) {
                    continue;
                }
                let now = self.now;
                for h in &mut self.hosts {
                    let me = h.config().mac;
                    if me == w.from {
                        continue;
                    }
                    let r = h.handle_message(w.from, &w.msg, now);
                    if me == w.to {
                        if let Err(e) = r {
                            self.errors.push((me, e));
                        }
                    } else {
                        assert_eq!(r.err(), Some(SepError::NotTarget), "bystander");
                    }
                }
            }
        }
        self.log.len() - sent_before
    }
    fn run_clean(&mut self) -> usize {
        self.run(&mut |_| Fate::Deliver)
    }
    fn est(&self, mac: Mac) -> &[Established] {
        self.established.get(&mac).map(|v| &v[..]).unwrap_or(&[])
    }
    fn fails(&self, mac: Mac) -> &[(Mac, SepError)] {
        self.failed.get(&mac).map(|v| &v[..]).unwrap_or(&[])
    }
}

/// Seals a frame with `tx` keys on one side and opens it with `rx` keys on the other.
fn frame_passes(from: &Established, to: &Established, src: Mac, dst: Mac) -> bool {
    let insecure_ecb = from.suite.is_ecb();
    let Ok(mut tx) = TxSession::new(
        &from.tx,
        TxConfig {
            key_id: from.key_id,
            insecure_ecb,
            ..TxConfig::default()
        },
    ) else {
        return false;
    };
    let Ok(mut rx) = RxSession::new(
        &to.rx,
        RxConfig {
            key_id: to.key_id,
            insecure_ecb,
            ..RxConfig::default()
        },
    ) else {
        return false;
    };
    let clear = frame_bytes(dst, src, 0x0800, &l3(0x0800, 200));
    let mut f = buf(&clear);
    if tx.seal(&mut f, &SealOpts::default()).is_err() {
        return false;
    }
    if f.data() == &clear[..] {
        return false;
    }
    rx.open(&mut f, 0, None).is_ok() && f.data() == &clear[..]
}

/// Both sides agree, and frames pass both ways.
fn check_pair(i: &Established, r: &Established, i_mac: Mac, r_mac: Mac) {
    assert!(i.initiator && !r.initiator);
    assert_eq!(i.peer, r_mac);
    assert_eq!(r.peer, i_mac);
    assert_eq!(i.suite, r.suite);
    assert_eq!(i.key_id, r.key_id);
    assert_eq!(i.lifetime, r.lifetime);
    assert!(frame_passes(i, r, i_mac, r_mac), "initiator to responder");
    assert!(frame_passes(r, i, r_mac, i_mac), "responder to initiator");
    // Directions have distinct keys: the initiator's sending keys do not open what the initiator sends to the
    // responder when used as the responder's sending keys.
    assert!(!frame_passes(r, r, r_mac, i_mac), "directions share keys");
}

fn assert_one_session(lan: &Lan, i_mac: Mac, r_mac: Mac) {
    assert_eq!(lan.est(i_mac).len(), 1, "initiator sessions");
    assert_eq!(lan.est(r_mac).len(), 1, "responder sessions");
    check_pair(&lan.est(i_mac)[0], &lan.est(r_mac)[0], i_mac, r_mac);
    assert!(lan.fails(i_mac).is_empty(), "{:?}", lan.fails(i_mac));
    assert!(lan.fails(r_mac).is_empty(), "{:?}", lan.fails(r_mac));
}

#[test]
fn basic_exchange() {
    let mut lan = Lan::two();
    assert!(lan.initiate(A, B, Some(IP_B), 7));
    assert!(lan.host(A).in_progress(&B));
    assert!(!lan.initiate(A, B, Some(IP_B), 8));
    let start = lan.now;
    lan.run_clean();
    assert_one_session(&lan, A, B);
    let (i, r) = (&lan.est(A)[0], &lan.est(B)[0]);
    assert_eq!(i.key_id, 7);
    assert_eq!(i.suite, Suite::Aes128Gcm);
    assert_eq!(i.peer_ip, IP_B);
    assert_eq!(r.peer_ip, IP_A);
    assert_eq!(i.lifetime, Duration::from_secs(3600));
    // Seven messages, no retransmission, no error; afterwards nothing is pending.
    assert_eq!(lan.log.len(), 7);
    let types: Vec<u8> = lan.log.iter().map(|w| w.msg[1]).collect();
    assert_eq!(types, [1, 2, 3, 4, 5, 6, 7]);
    assert!(lan.errors.is_empty(), "{:?}", lan.errors);
    assert!(!lan.host(A).in_progress(&B) && !lan.host(B).in_progress(&A));
    assert!(lan.hosts.iter().all(|h| h.poll_timeout().is_none()));
    // The remembered exchange was kept for one retransmission span, no longer.
    let span = RTX * ((1 << ATTEMPTS) - 1);
    assert!(lan.now <= start + span + Duration::from_millis(1));
}

#[test]
fn every_group_with_several_suites() {
    for group in DhGroup::ALL {
        for suite in [
            Suite::BlowfishCbc,
            Suite::Aes128Gcm,
            Suite::ChaCha20Poly1305,
        ] {
            let mut ca = cfg(A, IP_A);
            ca.suites = vec![suite];
            ca.groups = vec![group];
            ca.lifetime = Duration::from_secs(600);
            let mut cb = cfg(B, IP_B);
            cb.suites = Suite::ALL.to_vec();
            cb.groups = DhGroup::ALL.to_vec();
            cb.lifetime = Duration::from_secs(300);
            let mut lan = Lan::new(vec![ca, cb]);
            assert!(lan.initiate(A, B, None, 42));
            lan.run_clean();
            assert_one_session(&lan, A, B);
            let (i, r) = (&lan.est(A)[0], &lan.est(B)[0]);
            assert_eq!(i.suite, suite, "{group:?}");
            assert_eq!(i.key_id, 42);
            // The accepted lifetime is the smaller of the offer and the responder's limit.
            assert_eq!(i.lifetime, Duration::from_secs(300));
            assert_eq!(r.lifetime, Duration::from_secs(300));
            // Target unknown: the initiator learns the responder's address from ACCEPT.
            assert_eq!(i.peer_ip, IP_B);
            let ke = lan
                .log
                .iter()
                .find(|w| w.msg[1] == msg_type::KEY_EXCHANGE)
                .unwrap();
            assert_eq!(ke.msg.len(), HEADER_LEN + 4 + public_len(group));
        }
    }
}
