//! SEP: two or three hosts exchange messages in process, with a clock the test advances. Every exchange that
//! ends in `Established` on both sides is checked with real frames sealed by one side and opened by the other,
//! in both directions.

mod common;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::{buf, frame_bytes, l3, reseed, rng};
use netveil_crypto::dh::{Group, KeyPair};
use netveil_l2sec::sep::{
    group_code, msg_type, public_len, suite_code, DhGroup, Established, Mac, Sep, SepConfig,
    SepError, SepEvent, CONFIRM_LEN, HEADER_LEN, MAX_RESPONDERS,
};
use netveil_l2sec::{RxConfig, RxSession, SealOpts, Suite, TxConfig, TxSession};

const A: Mac = [0x02, 0, 0, 0, 0, 0x0a];
const B: Mac = [0x02, 0, 0, 0, 0, 0x0b];
const IP_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const IP_B: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);
const C: Mac = [0x02, 0, 0, 0, 0, 0x0c];
const IP_C: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 12);
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
        max_starts_per_second: 0,
    }
}

/// A fresh (epoch, sequence number) for a message handed to SEP directly: as if each came in a new group frame.
fn fresh() -> (u64, u64) {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    (1, N.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// One message in flight.
#[derive(Clone)]
struct Wire {
    from: Mac,
    to: Mac,
    msg: Vec<u8>,
    /// When it was sent.
    at: Instant,
    /// The (epoch, sequence number) of the group frame that carries it: every transmission is a new frame.
    order: (u64, u64),
}

impl Wire {
    fn ty(&self) -> u8 {
        self.msg[1]
    }
}

/// What a filter does with a message in flight.
enum Fate {
    Deliver,
    Drop,
    /// Delivered twice in a row.
    Twice,
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
    /// Group frames sent by each host so far.
    frames: HashMap<Mac, u64>,
}

impl Lan {
    fn new(cfgs: Vec<SepConfig>) -> Lan {
        Lan {
            hosts: cfgs.into_iter().map(|c| Sep::new(c, rng())).collect(),
            now: Instant::now(),
            established: HashMap::new(),
            failed: HashMap::new(),
            log: Vec::new(),
            errors: Vec::new(),
            frames: HashMap::new(),
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
        let at = self.now;
        for h in &mut self.hosts {
            let me = h.config().mac;
            while let Some(ev) = h.poll_event() {
                match ev {
                    SepEvent::Transmit { to, msg } => {
                        let n = self.frames.entry(me).or_default();
                        *n += 1;
                        let w = Wire {
                            from: me,
                            to,
                            msg,
                            at,
                            order: (1, *n),
                        };
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
                let times = match filter(&mut w) {
                    Fate::Deliver => 1,
                    Fate::Drop => 0,
                    Fate::Twice => 2,
                };
                for _ in 0..times {
                    self.deliver(&w);
                }
            }
        }
        self.log.len() - sent_before
    }

    /// Hands `w` to every host but its sender: the addressed one records errors, the others must drop it.
    fn deliver(&mut self, w: &Wire) {
        let now = self.now;
        for h in &mut self.hosts {
            let me = h.config().mac;
            if me == w.from {
                continue;
            }
            let r = h.handle_message(w.from, &w.msg, w.order, now);
            if me == w.to {
                if let Err(e) = r {
                    self.errors.push((me, e));
                }
            } else {
                assert_eq!(r.err(), Some(SepError::NotTarget), "bystander");
            }
        }
    }
    /// Delivers messages until none is in flight, without moving the clock.
    fn settle(&mut self) {
        loop {
            let mut flight = Vec::new();
            self.drain(&mut flight);
            if flight.is_empty() {
                break;
            }
            for w in flight {
                self.deliver(&w);
            }
        }
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
    let insecure_null = from.suite.is_null();
    let Ok(mut tx) = TxSession::new(
        &from.tx,
        TxConfig {
            key_id: from.key_id,
            insecure_ecb,
            insecure_null,
            ..TxConfig::default()
        },
        &mut rng(),
    ) else {
        return false;
    };
    let Ok(mut rx) = RxSession::new(
        &to.rx,
        RxConfig {
            key_id: to.key_id,
            insecure_ecb,
            insecure_null,
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
    // responder when used as the responder's sending keys. (The null suite has no keys.)
    if !i.suite.is_null() {
        assert!(!frame_passes(r, r, r_mac, i_mac), "directions share keys");
    }
}

fn assert_one_session(lan: &Lan, i_mac: Mac, r_mac: Mac) {
    assert_eq!(lan.est(i_mac).len(), 1, "initiator sessions");
    assert_eq!(lan.est(r_mac).len(), 1, "responder sessions");
    check_pair(&lan.est(i_mac)[0], &lan.est(r_mac)[0], i_mac, r_mac);
    assert!(lan.fails(i_mac).is_empty(), "{:?}", lan.fails(i_mac));
    assert!(lan.fails(r_mac).is_empty(), "{:?}", lan.fails(r_mac));
}

/// SEP runs on the generators it is given: with the same seeds, an exchange gives the same messages (ids,
/// nonces, key shares, confirmations) and the same session keys (the same frame sealed); other seeds other ones.
#[test]
fn same_seeds_same_exchange() {
    let run = |base: u64| {
        reseed(base);
        let mut lan = Lan::two();
        assert!(lan.initiate(A, B, Some(IP_B), 7));
        lan.run_clean();
        assert_one_session(&lan, A, B);
        let msgs: Vec<Vec<u8>> = lan.log.iter().map(|w| w.msg.clone()).collect();
        let sealed: Vec<Vec<u8>> = [A, B]
            .iter()
            .map(|&m| {
                let e = &lan.est(m)[0];
                let cfg = TxConfig {
                    key_id: e.key_id,
                    first_seq: Some(1),
                    ..TxConfig::default()
                };
                let mut tx = TxSession::new(&e.tx, cfg, &mut rng()).unwrap();
                let mut f = buf(&frame_bytes(B, A, 0x0800, &l3(0x0800, 64)));
                tx.seal(&mut f, &SealOpts::default()).unwrap();
                f.data().to_vec()
            })
            .collect();
        (msgs, sealed)
    };
    let (m1, s1) = run(100);
    let (m2, s2) = run(100);
    assert!(m1.len() >= 6, "{} messages", m1.len());
    assert_eq!(m1, m2, "same seeds, same messages");
    assert_eq!(s1, s2, "same seeds, same keys");
    let (m3, s3) = run(200);
    assert_eq!(m1.len(), m3.len());
    for (a, b) in m1.iter().zip(&m3) {
        assert_ne!(
            a, b,
            "another seed: every message differs (its exchange id at least)"
        );
    }
    assert_ne!(s1, s3, "another seed, other keys");
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
            Suite::Null,
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

/// The messages of a clean exchange A → B (x25519), with the sessions it gave.
fn clean_log() -> Vec<Wire> {
    let mut lan = Lan::two();
    assert!(lan.initiate(A, B, Some(IP_B), 7));
    lan.run_clean();
    assert_one_session(&lan, A, B);
    lan.log
}

#[test]
fn message_layouts() {
    let log = clean_log();
    let lens: Vec<usize> = log.iter().map(|w| w.msg.len()).collect();
    let ke = public_len(DhGroup::X25519);
    assert_eq!(
        lens,
        [
            HEADER_LEN + 8 + 32,
            HEADER_LEN + 32 + 4,
            HEADER_LEN + 1 + 1 + 3 + 1 + 2,
            HEADER_LEN + 3,
            HEADER_LEN + 4 + ke,
            HEADER_LEN + 4 + ke + CONFIRM_LEN,
            HEADER_LEN + CONFIRM_LEN,
        ]
    );
    let id = &log[0].msg[14..22];
    for (k, w) in log.iter().enumerate() {
        let m = &w.msg;
        assert_eq!(m[0], 1, "version");
        assert_eq!(m[1] as usize, k + 1, "type");
        assert_eq!(&m[2..8], &w.from, "sender");
        assert_eq!(&m[8..14], &w.to, "receiver");
        assert_eq!(&m[14..22], id, "exchange id");
    }
    let (m1, m2, m3, m4, m5, m6) = (
        &log[0].msg,
        &log[1].msg,
        &log[2].msg,
        &log[3].msg,
        &log[4].msg,
        &log[5].msg,
    );
    assert_eq!(&m1[22..26], &IP_A.octets());
    assert_eq!(&m1[26..30], &IP_B.octets());
    assert_eq!(&m2[54..58], &IP_B.octets());
    assert_ne!(&m1[30..62], &m2[22..54], "nonces");
    assert_eq!(
        &m3[22..],
        &[
            7,
            3,
            suite_code(Suite::Aes128Gcm),
            suite_code(Suite::ChaCha20Poly1305),
            suite_code(Suite::BlowfishCbc),
            2,
            group_code(DhGroup::X25519),
            group_code(DhGroup::Modp2048),
        ]
    );
    assert_eq!(
        &m4[22..],
        &[7, suite_code(Suite::Aes128Gcm), group_code(DhGroup::X25519)]
    );
    assert_eq!(&m5[22..26], &3600u32.to_be_bytes());
    assert_eq!(&m6[22..26], &3600u32.to_be_bytes());
    assert_eq!(group_code(DhGroup::X25519), 31);
    assert_eq!(group_code(DhGroup::Modp2048), 14);
    assert_eq!(group_code(DhGroup::Modp3072), 15);
}

#[test]
fn poll_timeout_and_abort() {
    let mut lan = Lan::two();
    assert_eq!(lan.host(A).poll_timeout(), None);
    assert!(lan.initiate(A, B, None, 1));
    let now = lan.now;
    assert_eq!(lan.host(A).poll_timeout(), Some(now + RTX));
    assert!(!lan.initiate(A, B, None, 2));
    lan.host(A).abort(&B);
    assert!(!lan.host(A).in_progress(&B));
    assert_eq!(lan.host(A).poll_timeout(), None);
    // Key id 0, or this host itself, is refused.
    assert!(!lan.initiate(A, B, None, 0));
    assert!(!lan.initiate(A, A, None, 1));
    assert!(lan.initiate(A, B, None, 3));
    lan.hosts[0].poll_event(); // the aborted exchange's REQUEST
    lan.run_clean();
    assert_one_session(&lan, A, B);
    assert_eq!(lan.est(A)[0].key_id, 3);
}

#[test]
fn not_target_request_to_another_mac() {
    let mut lan = Lan::two();
    // A asks C, which is absent: B drops the request as not addressed to it (checked in `deliver`).
    assert!(lan.initiate(A, C, None, 1));
    lan.run_clean();
    assert!(lan.est(A).is_empty() && lan.est(B).is_empty());
    assert_eq!(lan.fails(A), &[(C, SepError::Timeout)]);
    assert!(!lan.host(B).in_progress(&A));
}

#[test]
fn not_target_when_the_target_address_is_not_ours() {
    let mut lan = Lan::two();
    assert!(lan.initiate(A, B, Some(IP_C), 1));
    lan.run_clean();
    assert!(lan.est(A).is_empty() && lan.est(B).is_empty());
    assert_eq!(lan.fails(A), &[(B, SepError::Timeout)]);
    assert!(lan.errors.iter().all(|e| *e == (B, SepError::NotTarget)));
    assert_eq!(lan.errors.len(), ATTEMPTS as usize);
    // B answered nothing.
    assert!(lan.log.iter().all(|w| w.from == A));
}

#[test]
fn not_on_subnet() {
    let mut lan = Lan::new(vec![cfg(A, Ipv4Addr::new(198, 51, 100, 1)), cfg(B, IP_B)]);
    assert!(lan.initiate(A, B, Some(IP_B), 1));
    lan.run_clean();
    assert!(lan.est(A).is_empty() && lan.est(B).is_empty());
    assert!(lan.errors.iter().all(|e| *e == (B, SepError::NotOnSubnet)));
    assert!(!lan.errors.is_empty());
    assert!(lan.log.iter().all(|w| w.from == A));
    // A /16 responder takes it... when the address is on its subnet.
    let mut wide = cfg(B, IP_B);
    wide.prefix_len = 0;
    let mut lan = Lan::new(vec![cfg(A, Ipv4Addr::new(198, 51, 100, 1)), wide]);
    assert!(lan.initiate(A, B, None, 1));
    lan.run_clean();
    assert_one_session(&lan, A, B);
}

#[test]
fn wrong_sender_and_malformed_messages() {
    let log = clean_log();
    let now = Instant::now();
    for w in &log {
        let mut to = Sep::new(cfg(w.to, if w.to == A { IP_A } else { IP_B }), rng());
        // The frame came from C, but the message says A (or B).
        assert_eq!(
            to.handle_message(C, &w.msg, fresh(), now),
            Err(SepError::WrongSender)
        );
        // A message claiming to come from the receiver itself.
        assert_eq!(
            to.handle_message(w.to, &w.msg, fresh(), now),
            Err(SepError::WrongSender)
        );
        // Truncated or extended.
        for n in 0..w.msg.len() {
            let r = to.handle_message(w.from, &w.msg[..n], fresh(), now);
            assert!(r.is_err(), "type {} cut at {n}", w.ty());
            if n < HEADER_LEN {
                assert_eq!(r, Err(SepError::Malformed));
            }
        }
        let mut long = w.msg.clone();
        long.push(0);
        assert!(to.handle_message(w.from, &long, fresh(), now).is_err());
        // Unknown version and types.
        for (at, v) in [(0, 0u8), (0, 2), (1, 0), (1, 9), (1, 0xff)] {
            let mut m = w.msg.clone();
            m[at] = v;
            assert_eq!(
                to.handle_message(w.from, &m, fresh(), now),
                Err(SepError::Malformed)
            );
        }
        assert!(!to.in_progress(&w.from));
        assert!(to.poll_event().is_none());
    }
}

#[test]
fn unexpected_messages_change_nothing() {
    let log = clean_log();
    let now = Instant::now();
    // A fresh responder knows no exchange: everything but a REQUEST is unexpected.
    let mut b = Sep::new(cfg(B, IP_B), rng());
    for w in log
        .iter()
        .filter(|w| w.to == B && w.ty() != msg_type::REQUEST)
    {
        assert_eq!(
            b.handle_message(A, &w.msg, fresh(), now),
            Err(SepError::Unexpected)
        );
    }
    let mut a = Sep::new(cfg(A, IP_A), rng());
    for w in log.iter().filter(|w| w.to == A) {
        assert_eq!(
            a.handle_message(B, &w.msg, fresh(), now),
            Err(SepError::Unexpected)
        );
    }
    assert!(b.poll_event().is_none() && a.poll_event().is_none());
    // Out of order within a live exchange: B has answered the REQUEST; KEY_EXCHANGE and FINISH come too early.
    assert_eq!(b.handle_message(A, &log[0].msg, fresh(), now), Ok(()));
    assert!(matches!(b.poll_event(), Some(SepEvent::Transmit { .. })));
    for k in [4, 6] {
        assert_eq!(
            b.handle_message(A, &log[k].msg, fresh(), now),
            Err(SepError::Unexpected)
        );
    }
    assert!(b.poll_event().is_none());
    // Another exchange id.
    let mut m3 = log[2].msg.clone();
    m3[20] ^= 1;
    assert_eq!(
        b.handle_message(A, &m3, fresh(), now),
        Err(SepError::Unexpected)
    );
    assert!(b.in_progress(&A));
}

#[test]
fn each_message_lost_once_is_retransmitted() {
    for ty in 1..=7u8 {
        let mut lan = Lan::two();
        assert!(lan.initiate(A, B, Some(IP_B), 9));
        let mut dropped = false;
        lan.run(&mut |w| {
            if w.ty() == ty && !dropped {
                dropped = true;
                Fate::Drop
            } else {
                Fate::Deliver
            }
        });
        assert!(dropped);
        assert_one_session(&lan, A, B);
        // One retransmission repaired the loss: the waiting side resent, and (for an answer that was lost) the
        // other side resent the same answer. KEY_EXCHANGE_ACCEPT lost: both sides wait (the initiator for it, the
        // responder for FINISH) and retransmit at the same instant, so two copies of it and of FINISH follow.
        let sent = lan.log.len();
        let most = if ty == 6 { 11 } else { 9 };
        assert!((8..=most).contains(&sent), "type {ty}: {sent} messages");
        assert!(!lan.host(A).in_progress(&B) && !lan.host(B).in_progress(&A));
    }
}

#[test]
fn answers_to_duplicates_are_the_same_bytes() {
    // ACCEPT, SELECT and KEY_EXCHANGE_ACCEPT lost once: the responder resends exactly what it sent.
    for ty in [2u8, 4, 6] {
        let mut lan = Lan::two();
        assert!(lan.initiate(A, B, None, 1));
        let mut dropped = false;
        lan.run(&mut |w| {
            if w.ty() == ty && !dropped {
                dropped = true;
                Fate::Drop
            } else {
                Fate::Deliver
            }
        });
        assert_one_session(&lan, A, B);
        let copies: Vec<&Wire> = lan.log.iter().filter(|w| w.ty() == ty).collect();
        assert!(copies.len() >= 2, "type {ty}");
        assert!(copies.iter().all(|c| c.msg == copies[0].msg), "type {ty}");
    }
}

#[test]
fn total_loss_fails_after_all_attempts_with_backoff() {
    let mut lan = Lan::two();
    let t0 = lan.now;
    assert!(lan.initiate(A, B, None, 1));
    lan.run(&mut |_| Fate::Drop);
    assert!(lan.est(A).is_empty() && lan.est(B).is_empty());
    assert_eq!(lan.fails(A), &[(B, SepError::Timeout)]);
    let times: Vec<Duration> = lan.log.iter().map(|w| w.at - t0).collect();
    assert_eq!(times, [Duration::ZERO, RTX, RTX * 3, RTX * 7]);
    assert!(lan.log.iter().all(|w| w.msg == lan.log[0].msg));
    assert_eq!(lan.now - t0, RTX * 15);
    assert!(!lan.host(A).in_progress(&B));
    // Then a new exchange can start.
    assert!(lan.initiate(A, B, None, 2));
    lan.run_clean();
    assert_eq!(lan.est(A).len(), 1);
}

#[test]
fn loss_at_every_stage_ends_in_timeout() {
    // Every copy of one message type lost: the side that waits for it gives up (nobody establishes, except when
    // FINISH is lost: the initiator has its session, the responder gives up).
    for ty in 1..=7u8 {
        let mut lan = Lan::two();
        assert!(lan.initiate(A, B, None, 1));
        lan.run(&mut |w| {
            if w.ty() == ty {
                Fate::Drop
            } else {
                Fate::Deliver
            }
        });
        match ty {
            7 => {
                assert_eq!(lan.est(A).len(), 1);
                assert!(lan.est(B).is_empty());
                assert_eq!(lan.fails(B), &[(A, SepError::Timeout)]);
                assert!(lan.fails(A).is_empty());
                // The responder retransmitted KEY_EXCHANGE_ACCEPT; the initiator answered each with FINISH.
                let n6 = lan.log.iter().filter(|w| w.ty() == 6).count();
                let n7 = lan.log.iter().filter(|w| w.ty() == 7).count();
                assert_eq!(n6, ATTEMPTS as usize);
                assert_eq!(n7, ATTEMPTS as usize);
            }
            6 => {
                assert!(lan.est(A).is_empty() && lan.est(B).is_empty());
                assert!(lan.fails(A).contains(&(B, SepError::Timeout)));
                assert!(lan.fails(B).contains(&(A, SepError::Timeout)));
            }
            _ => {
                assert!(lan.est(A).is_empty() && lan.est(B).is_empty(), "type {ty}");
                assert_eq!(lan.fails(A), &[(B, SepError::Timeout)], "type {ty}");
                assert!(lan.fails(B).is_empty(), "type {ty}");
            }
        }
        assert!(!lan.host(A).in_progress(&B) && !lan.host(B).in_progress(&A));
        assert!(lan.hosts.iter().all(|h| h.poll_timeout().is_none()));
    }
}

#[test]
fn duplicate_delivery_of_every_message_is_harmless() {
    let mut lan = Lan::two();
    assert!(lan.initiate(A, B, None, 5));
    lan.run(&mut |_| Fate::Twice);
    assert_one_session(&lan, A, B);
    // The second copy of the REQUEST's frame is no fresher than the first: refused (the group layer's replay
    // window would have dropped it already).
    assert_eq!(lan.errors, [(B, SepError::Stale)]);
    // The responder answers each other duplicate once more (OFFER, KEY_EXCHANGE); the initiator answers each
    // copy of KEY_EXCHANGE_ACCEPT (two sent, each delivered twice) with FINISH; nothing else.
    let n = lan.log.len();
    assert_eq!(n, 7 + 2 + 3, "{n}");
}

#[test]
fn replayed_exchange_gives_nothing() {
    let mut lan = Lan::two();
    assert!(lan.initiate(A, B, None, 5));
    lan.settle();
    assert_one_session(&lan, A, B);
    let old = lan.log.clone();
    // Right away (the hosts still remember the exchange): ignored, or answered with the same bytes.
    for w in &old {
        lan.deliver(w);
    }
    lan.settle();
    assert_eq!(lan.est(A).len(), 1);
    assert_eq!(lan.est(B).len(), 1);
    assert!(lan.fails(A).is_empty() && lan.fails(B).is_empty());
    lan.run_clean();
    // After they forgot it: the old REQUEST is not fresher than the one B saw, so B starts nothing (the rest is
    // unexpected), and A ignores all of it. (Without the freshness check B took the old REQUEST as a new
    // exchange, which only the old FINISH's wrong confirmation ended.)
    lan.errors.clear();
    for w in &old {
        lan.deliver(w);
    }
    assert!(!lan.host(B).in_progress(&A));
    lan.run_clean();
    assert_eq!(lan.est(A).len(), 1);
    assert_eq!(lan.est(B).len(), 1);
    assert!(lan.fails(A).is_empty() && lan.fails(B).is_empty());
    assert!(
        lan.errors.contains(&(B, SepError::Stale)),
        "{:?}",
        lan.errors
    );
}

#[test]
fn simultaneous_initiation_converges_on_the_lower_mac() {
    for lose_first in [None, Some(A), Some(B)] {
        let mut lan = Lan::two();
        assert!(lan.initiate(A, B, Some(IP_B), 11));
        assert!(lan.initiate(B, A, Some(IP_A), 22));
        let mut lost = false;
        lan.run(&mut |w| {
            if Some(w.from) == lose_first && w.ty() == msg_type::REQUEST && !lost {
                lost = true;
                Fate::Drop
            } else {
                Fate::Deliver
            }
        });
        assert_one_session(&lan, A, B);
        assert!(lan.est(A)[0].initiator);
        assert_eq!(lan.est(A)[0].key_id, 11);
        if lose_first != Some(B) {
            // A received B's request and kept its own role.
            assert!(lan.errors.contains(&(A, SepError::Unexpected)));
        }
    }
    // Started in the other order, the same result.
    let mut lan = Lan::two();
    assert!(lan.initiate(B, A, None, 22));
    assert!(lan.initiate(A, B, None, 11));
    lan.run_clean();
    assert_one_session(&lan, A, B);
}

#[test]
fn no_common_suite_or_group() {
    for (sa, sb, ga, gb, reason) in [
        (
            vec![Suite::Aes256Gcm],
            vec![Suite::Aes128Gcm],
            vec![DhGroup::X25519],
            vec![DhGroup::X25519],
            SepError::NoCommonSuite,
        ),
        (
            vec![Suite::Aes128Gcm],
            vec![Suite::Aes128Gcm],
            vec![DhGroup::Modp3072],
            vec![DhGroup::X25519, DhGroup::Modp2048],
            SepError::NoCommonGroup,
        ),
    ] {
        for lose_reject in [false, true] {
            let (mut ca, mut cb) = (cfg(A, IP_A), cfg(B, IP_B));
            (ca.suites, cb.suites, ca.groups, cb.groups) =
                (sa.clone(), sb.clone(), ga.clone(), gb.clone());
            let mut lan = Lan::new(vec![ca, cb]);
            assert!(lan.initiate(A, B, None, 1));
            let mut lost = false;
            lan.run(&mut |w| {
                if lose_reject && w.ty() == msg_type::REJECT && !lost {
                    lost = true;
                    Fate::Drop
                } else {
                    Fate::Deliver
                }
            });
            assert!(lan.est(A).is_empty() && lan.est(B).is_empty());
            assert_eq!(lan.fails(A), &[(B, reason)]);
            assert_eq!(lan.fails(B), &[(A, reason)]);
            let rejects = lan
                .log
                .iter()
                .filter(|w| w.ty() == msg_type::REJECT)
                .count();
            assert_eq!(rejects, 1 + lose_reject as usize);
        }
    }
}

#[test]
fn responder_preference_follows_the_initiators_order() {
    let mut ca = cfg(A, IP_A);
    ca.suites = vec![
        Suite::ChaCha20Poly1305,
        Suite::Aes256Gcm,
        Suite::BlowfishCbc,
    ];
    ca.groups = vec![DhGroup::Modp2048, DhGroup::X25519];
    let mut cb = cfg(B, IP_B);
    cb.suites = vec![Suite::BlowfishCbc, Suite::Aes256Gcm];
    cb.groups = vec![DhGroup::X25519, DhGroup::Modp2048];
    let mut lan = Lan::new(vec![ca, cb]);
    assert!(lan.initiate(A, B, None, 1));
    lan.run_clean();
    assert_one_session(&lan, A, B);
    assert_eq!(lan.est(A)[0].suite, Suite::Aes256Gcm);
    let ke = lan
        .log
        .iter()
        .find(|w| w.ty() == msg_type::KEY_EXCHANGE)
        .unwrap();
    assert_eq!(ke.msg.len(), HEADER_LEN + 4 + 256);
}

/// Replaces the key share of KEY_EXCHANGE (`kei`) and/or KEY_EXCHANGE_ACCEPT (`ker`) with Mallory's.
fn mallory(lan: &mut Lan, kei: bool, ker: bool) {
    let m1 = KeyPair::generate(Group::X25519, &mut rng());
    let m2 = KeyPair::generate(Group::X25519, &mut rng());
    lan.run(&mut |w| {
        let at = HEADER_LEN + 4;
        if kei && w.ty() == msg_type::KEY_EXCHANGE {
            w.msg[at..at + 32].copy_from_slice(m1.public());
        }
        if ker && w.ty() == msg_type::KEY_EXCHANGE_ACCEPT {
            w.msg[at..at + 32].copy_from_slice(m2.public());
        }
        Fate::Deliver
    });
}

#[test]
fn man_in_the_middle_substituting_key_shares_is_detected() {
    for (kei, ker) in [(true, true), (true, false), (false, true)] {
        let mut lan = Lan::two();
        assert!(lan.initiate(A, B, None, 1));
        mallory(&mut lan, kei, ker);
        assert!(lan.est(A).is_empty(), "{kei} {ker}");
        assert!(lan.est(B).is_empty(), "{kei} {ker}");
        assert_eq!(lan.fails(A), &[(B, SepError::BadConfirm)]);
        assert_eq!(lan.fails(B), &[(A, SepError::Timeout)]);
    }
}

#[test]
fn downgrade_of_the_offer_is_detected() {
    // Mallory strikes the initiator's preferred suite from the OFFER: B picks the next one, which A accepts as
    // part of its offer, but the transcripts differ and the confirmation fails.
    let mut lan = Lan::two();
    assert!(lan.initiate(A, B, None, 1));
    lan.run(&mut |w| {
        if w.ty() == msg_type::OFFER {
            // key id, n = 3, [gcm, chacha, blowfish] → n = 2, [blowfish, chacha]
            w.msg[HEADER_LEN + 2] = suite_code(Suite::BlowfishCbc);
        }
        Fate::Deliver
    });
    assert!(lan.est(A).is_empty() && lan.est(B).is_empty());
    assert_eq!(lan.fails(A), &[(B, SepError::BadConfirm)]);
}

/// Runs an exchange (in `group`) in which the first copy of message `k` (0-based) has byte `j` changed.
fn tampered_run(group: DhGroup, k: usize, j: usize) {
    let (mut ca, mut cb) = (cfg(A, IP_A), cfg(B, IP_B));
    ca.groups = vec![group];
    cb.groups = vec![group];
    let mut lan = Lan::new(vec![ca, cb]);
    assert!(lan.initiate(A, B, Some(IP_B), 7));
    let mut done = false;
    lan.run(&mut |w| {
        if !done && w.ty() as usize == k + 1 {
            done = true;
            if j < w.msg.len() {
                w.msg[j] ^= 0x5a;
            }
        }
        Fate::Deliver
    });
    let (ea, eb) = (lan.est(A), lan.est(B));
    let what = format!("{group:?} message {} byte {j}", k + 1);
    assert!(ea.len() <= 1 && eb.len() <= 1, "{what}");
    for e in ea.iter().chain(eb) {
        assert_eq!(e.suite, Suite::Aes128Gcm, "{what}");
        assert_eq!(e.key_id, 7, "{what}");
        assert_eq!(e.lifetime, Duration::from_secs(3600), "{what}");
    }
    match (ea.first(), eb.first()) {
        (Some(i), Some(r)) => check_pair(i, r, A, B),
        // FINISH changed in its confirmation: the initiator has a session the responder refused.
        (Some(_), None) => {
            assert_eq!(k, 6, "{what}");
            assert_eq!(lan.fails(B), &[(A, SepError::BadConfirm)], "{what}");
        }
        (None, Some(_)) => panic!("{what}: responder alone established"),
        (None, None) => {
            assert!(
                !lan.fails(A).is_empty() || !lan.fails(B).is_empty(),
                "{what}: no outcome"
            );
        }
    }
    assert!(!lan.host(A).in_progress(&B) && !lan.host(B).in_progress(&A));
}

#[test]
fn tampering_at_every_byte_position() {
    let lens: Vec<usize> = clean_log().iter().map(|w| w.msg.len()).collect();
    let mut runs = 0;
    for (k, n) in lens.iter().enumerate() {
        for j in 0..*n {
            tampered_run(DhGroup::X25519, k, j);
            runs += 1;
        }
    }
    assert!(runs > 350, "{runs}");
}

#[test]
fn tampering_modp_messages() {
    for group in [DhGroup::Modp2048, DhGroup::Modp3072] {
        for k in 4..6 {
            // Header, lifetime, the ends of the share and of the confirmation.
            let len = HEADER_LEN + 4 + public_len(group) + if k == 5 { CONFIRM_LEN } else { 0 };
            for j in [
                0,
                1,
                3,
                9,
                15,
                21,
                22,
                25,
                26,
                27,
                100,
                len - 33,
                len - 32,
                len - 1,
            ] {
                tampered_run(group, k, j);
            }
        }
    }
}

#[test]
fn restarted_initiator_replaces_the_exchange() {
    let mut lan = Lan::two();
    assert!(lan.initiate(A, B, None, 1));
    // REQUEST and ACCEPT go through, then A restarts before sending its OFFER.
    let mut flight = Vec::new();
    lan.drain(&mut flight);
    lan.deliver(&flight[0]);
    assert!(lan.host(B).in_progress(&A));
    lan.hosts[0] = Sep::new(cfg(A, IP_A), rng());
    let mut stale = Vec::new();
    lan.drain(&mut stale);
    assert!(lan.initiate(A, B, None, 2));
    lan.run_clean();
    assert_one_session(&lan, A, B);
    assert_eq!(lan.est(B)[0].key_id, 2);
}

/// Finding: a replayed REQUEST displaced a live exchange. A REQUEST in a carrying frame no fresher than one
/// already seen from the same peer is refused: it neither replaces a responder's exchange...
#[test]
fn a_stale_request_does_not_replace_a_responder_exchange() {
    let mut lan = Lan::two();
    assert!(lan.initiate(A, B, None, 1));
    let mut first = Vec::new();
    lan.drain(&mut first);
    let old = first[0].clone();
    // A gives up on that one (never delivered) and starts another, which B answers.
    lan.host(A).abort(&B);
    assert!(lan.initiate(A, B, None, 2));
    let mut second = Vec::new();
    lan.drain(&mut second);
    lan.deliver(&second[0]);
    assert!(lan.host(B).in_progress(&A));
    // Now the recorded older REQUEST (another exchange id) arrives.
    assert!(old.order < second[0].order);
    lan.deliver(&old);
    assert_eq!(lan.errors, [(B, SepError::Stale)]);
    lan.run_clean();
    assert_one_session(&lan, A, B);
    assert_eq!(lan.est(B)[0].key_id, 2);
}

/// ... nor makes the host with the higher MAC (B) abandon its own exchange for it.
#[test]
fn a_stale_request_does_not_preempt_a_higher_mac_initiator() {
    let mut lan = Lan::two();
    assert!(lan.initiate(A, B, None, 1));
    lan.run_clean();
    assert_one_session(&lan, A, B);
    let old = lan.log[0].clone();
    assert_eq!(old.ty(), msg_type::REQUEST);
    // Later (the exchange forgotten), B starts one of its own; the recorded REQUEST of A comes first.
    assert!(lan.hosts.iter().all(|h| h.poll_timeout().is_none()));
    assert!(lan.initiate(B, A, None, 2));
    lan.deliver(&old);
    assert_eq!(lan.errors, [(B, SepError::Stale)]);
    lan.run_clean();
    assert_eq!(lan.est(B).len(), 2);
    let e = &lan.est(B)[1];
    assert!(e.initiator && e.key_id == 2);
    assert!(lan.fails(A).is_empty() && lan.fails(B).is_empty());
}

/// A REQUEST to `to` from a new peer number `i`.
fn request_from(i: u32, to: Mac) -> (Mac, Vec<u8>) {
    let mac: Mac = [0x02, 0x10, 0, (i >> 8) as u8, i as u8, 1];
    let mut m = vec![1u8, msg_type::REQUEST];
    m.extend_from_slice(&mac);
    m.extend_from_slice(&to);
    m.extend_from_slice(&[i as u8; 8]);
    m.extend_from_slice(&[192, 0, 2, 100]);
    m.extend_from_slice(&[0, 0, 0, 0]);
    m.extend_from_slice(&[0x33; 32]);
    (mac, m)
}

/// Exchanges started, as initiator and as responder, share one token bucket (here 20 per second, burst 20).
#[test]
fn exchanges_started_are_rate_limited() {
    let now = Instant::now();
    let mut c = cfg(B, IP_B);
    c.max_starts_per_second = 20;
    let mut b = Sep::new(c, rng());
    let peer = |i: u8| -> Mac { [0x02, 0x20, 0, 0, 1, i] };
    for i in 0..20 {
        assert_eq!(b.try_initiate(peer(i), None, 1, now), Ok(()), "{i}");
    }
    assert_eq!(
        b.try_initiate(peer(20), None, 1, now),
        Err(SepError::RateLimited)
    );
    assert!(!b.initiate(peer(20), None, 1, now + Duration::from_millis(49)));
    assert!(!b.in_progress(&peer(20)));
    // One token per 50 ms.
    let t = now + Duration::from_millis(50);
    assert!(b.initiate(peer(20), None, 1, t));
    while b.poll_event().is_some() {}
    // Requests take from the same bucket: refused without a token (no answer, no state).
    let (mac, m) = request_from(1, B);
    assert_eq!(
        b.handle_message(mac, &m, fresh(), t),
        Err(SepError::RateLimited)
    );
    assert!(b.poll_event().is_none() && !b.in_progress(&mac));
    assert_eq!(b.rate_limited(), 3);
    // A second later the burst is back: 20 requests answered, the 21st refused.
    let t = t + Duration::from_secs(1);
    for i in 0..20 {
        let (mac, m) = request_from(100 + i, B);
        assert_eq!(b.handle_message(mac, &m, fresh(), t), Ok(()), "{i}");
        assert!(matches!(b.poll_event(), Some(SepEvent::Transmit { .. })));
    }
    let (mac, m) = request_from(200, B);
    assert_eq!(
        b.handle_message(mac, &m, fresh(), t),
        Err(SepError::RateLimited)
    );
    // A duplicate of an answered request costs no token: it is answered again.
    let (mac, m) = request_from(105, B);
    assert_eq!(b.handle_message(mac, &m, fresh(), t), Ok(()));
    assert!(b.poll_event().is_some());
    assert_eq!(b.rate_limited(), 4);
}

/// ANNOUNCE: accepted from its sender to the broadcast address, with no effect; anything else like it is
/// malformed.
#[test]
fn announce_is_accepted_and_does_nothing() {
    let now = Instant::now();
    let mut b = Sep::new(cfg(B, IP_B), rng());
    let m = netveil_l2sec::sep::announce_message(A);
    assert_eq!(m.len(), HEADER_LEN);
    assert_eq!(b.handle_message(A, &m, fresh(), now), Ok(()));
    assert_eq!(
        b.handle_message(C, &m, fresh(), now),
        Err(SepError::WrongSender)
    );
    let mut long = m.clone();
    long.push(0);
    assert_eq!(
        b.handle_message(A, &long, fresh(), now),
        Err(SepError::Malformed)
    );
    let mut to_b = m.clone();
    to_b[8..14].copy_from_slice(&B);
    assert_eq!(
        b.handle_message(A, &to_b, fresh(), now),
        Err(SepError::Malformed)
    );
    assert!(b.poll_event().is_none() && !b.in_progress(&A) && b.poll_timeout().is_none());
}

#[test]
fn responder_exchanges_are_bounded() {
    let now = Instant::now();
    let mut b = Sep::new(cfg(B, IP_B), rng());
    let request = |i: u32| request_from(i, B);
    for i in 0..MAX_RESPONDERS as u32 {
        let (mac, m) = request(i);
        assert_eq!(b.handle_message(mac, &m, fresh(), now), Ok(()));
        assert!(matches!(b.poll_event(), Some(SepEvent::Transmit { to, .. }) if to == mac));
    }
    let (mac, m) = request(MAX_RESPONDERS as u32);
    assert_eq!(b.handle_message(mac, &m, fresh(), now), Err(SepError::Busy));
    assert!(b.poll_event().is_none());
    // A known peer's duplicate is still answered.
    let (mac, m) = request(3);
    assert_eq!(b.handle_message(mac, &m, fresh(), now), Ok(()));
    assert!(b.poll_event().is_some());
    // All forgotten after the retransmission span; then new peers are welcome again.
    let later = now + RTX * ((1 << ATTEMPTS) - 1) + Duration::from_millis(1);
    b.handle_timeout(later);
    assert!(b.poll_event().is_none(), "responders forget silently");
    assert_eq!(b.poll_timeout(), None);
    let (mac, m) = request(MAX_RESPONDERS as u32);
    assert_eq!(b.handle_message(mac, &m, fresh(), later), Ok(()));
}

#[test]
fn three_hosts_two_exchanges_at_once() {
    let mut lan = Lan::new(vec![cfg(A, IP_A), cfg(B, IP_B), cfg(C, IP_C)]);
    assert!(lan.initiate(A, B, Some(IP_B), 1));
    assert!(lan.initiate(C, B, None, 2));
    lan.run_clean();
    assert_eq!(lan.est(A).len(), 1);
    assert_eq!(lan.est(C).len(), 1);
    let b = lan.est(B);
    assert_eq!(b.len(), 2);
    let from_a = b.iter().find(|e| e.peer == A).unwrap();
    let from_c = b.iter().find(|e| e.peer == C).unwrap();
    check_pair(&lan.est(A)[0], from_a, A, B);
    check_pair(&lan.est(C)[0], from_c, C, B);
    // The two sessions of B have different keys.
    assert!(!frame_passes(&lan.est(A)[0], from_c, A, B));
    assert!(lan.errors.is_empty());
}
