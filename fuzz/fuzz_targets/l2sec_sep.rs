//! SEP on hostile input. Three scenarios, chosen by the first byte:
//!
//! - responder: arbitrary messages from a peer to a fresh `Sep`, raw or with a header the harness writes (right
//!   sender, receiver and exchange id, any type), so the bodies reach every stage; each in a fresher carrying
//!   frame, or (as the input decides) in the same frame as the previous one (a replay);
//! - initiator: the same against a `Sep` that has started an exchange (the harness learns its exchange id);
//! - two real hosts running an exchange while the input decides, message by message, to deliver, drop,
//!   duplicate (the same carrying frame twice), corrupt a byte, truncate, inject arbitrary bytes, or let time
//!   pass; with or without a rate limit on exchanges started.
//!
//! Nothing may panic; in the first two, a replayed REQUEST is refused without effect (see [`feed`]); in the third,
//! every session has the key id its initiator proposed, and a responder's session agrees with its initiator's (a
//! frame sealed by one opens at the other, both ways).

#![no_main]

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use netveil_crypto::rand::SeededRng;
use netveil_l2sec::sep::{
    msg_type, DhGroup, Established, Mac, Sep, SepConfig, SepError, SepEvent, HEADER_LEN, VERSION,
};
use netveil_l2sec::{RxConfig, RxSession, SealOpts, Suite, TxConfig, TxSession};
use netveil_wire::PacketBuf;

const A: Mac = [2, 0, 0, 0, 0, 0x0a];
const B: Mac = [2, 0, 0, 0, 0, 0x0b];

fn cfg(mac: Mac, ip: Ipv4Addr, opts: u8) -> SepConfig {
    let groups = if opts & 0x10 != 0 {
        vec![DhGroup::X25519, DhGroup::Modp2048]
    } else {
        vec![DhGroup::X25519]
    };
    SepConfig {
        mac,
        ip,
        prefix_len: opts & 0x1f,
        suites: vec![
            Suite::Aes128Gcm,
            Suite::BlowfishCbc,
            Suite::ChaCha20Poly1305,
        ],
        groups,
        lifetime: Duration::from_secs(u64::from(opts) * 10),
        retransmit: Duration::from_millis(100),
        attempts: u32::from(opts & 3) + 1,
        max_starts_per_second: u32::from(opts & 0x0c),
    }
}

/// Splits `data` into chunks, each preceded by its length byte.
fn chunks(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while let Some((&n, rest)) = data.split_first() {
        let n = (n as usize).min(rest.len());
        out.push(&rest[..n]);
        data = &rest[n..];
    }
    out
}

fn drain(sep: &mut Sep, out: &mut Vec<Vec<u8>>, est: &mut Vec<Established>) {
    while let Some(ev) = sep.poll_event() {
        match ev {
            SepEvent::Transmit { msg, .. } => out.push(msg),
            SepEvent::Established(e) => est.push(*e),
            SepEvent::Failed { .. } => {}
        }
    }
}

/// Feeds chunks to `sep` as messages from `peer`. A chunk whose first byte is odd gets a header written by the
/// harness: type from its second byte, the right sender and receiver, and exchange id `id` (or the chunk's).
///
/// Replays: every REQUEST from `peer` to this host (a well-formed header: the freshness check comes first) in a
/// carrying frame not fresher than that of the freshest REQUEST before it is refused as `Stale` and has no effect;
/// a fresher one is never refused as stale. A message repeated in the same carrying frame establishes nothing.
fn feed(sep: &mut Sep, own: Mac, peer: Mac, id: Option<[u8; 8]>, data: &[u8], mut now: Instant) {
    let mut out = Vec::new();
    let mut est = Vec::new();
    let mut order = (1u64, 0u64);
    let mut freshest: Option<(u64, u64)> = None;
    let mut previous: Option<Vec<u8>> = None;
    for c in chunks(data) {
        let Some((&ctl, body)) = c.split_first() else {
            sep.handle_timeout(now);
            now += Duration::from_millis(150);
            continue;
        };
        if ctl == 0xff {
            now += Duration::from_millis(u64::from(body.first().copied().unwrap_or(0)) * 20);
            sep.handle_timeout(now);
            continue;
        }
        // Bit 1: the same carrying frame as the previous message (a replay); otherwise a fresher one.
        let replay = ctl & 2 != 0;
        if !replay {
            order.1 += 1;
        }
        let m = if ctl & 1 == 1 {
            let Some((&t, body)) = body.split_first() else {
                continue;
            };
            let mut m = vec![1, 1 + t % 9];
            m.extend_from_slice(&peer);
            m.extend_from_slice(&own);
            m.extend_from_slice(&id.unwrap_or([ctl; 8]));
            m.extend_from_slice(body);
            m
        } else {
            body.to_vec()
        };
        let request = m.len() >= HEADER_LEN
            && m[0] == VERSION
            && m[1] == msg_type::REQUEST
            && m[2..8] == peer
            && m[8..14] == own;
        // What timers queued is not this message's doing.
        drain(sep, &mut out, &mut est);
        let (sent, established) = (out.len(), est.len());
        let r = sep.handle_message(peer, &m, order, now);
        drain(sep, &mut out, &mut est);
        if request {
            if freshest.is_some_and(|f| order <= f) {
                assert_eq!(
                    r,
                    Err(SepError::Stale),
                    "a replayed REQUEST was not refused"
                );
                assert_eq!(
                    (out.len(), est.len()),
                    (sent, established),
                    "a replayed REQUEST had an effect"
                );
            } else {
                assert_ne!(r, Err(SepError::Stale), "a fresh REQUEST refused as stale");
                freshest = Some(order);
            }
        } else {
            assert_ne!(r, Err(SepError::Stale), "only REQUESTs are stale");
        }
        if replay && previous.as_deref() == Some(&m[..]) {
            assert_eq!(
                est.len(),
                established,
                "a repeated message established a session"
            );
        }
        previous = Some(m);
        let _ = sep.poll_timeout();
        let _ = sep.in_progress(&peer);
    }
}

fn agree(from: &Established, to: &Established) -> bool {
    let ecb = from.suite.is_ecb();
    let mut tx = TxSession::new(
        &from.tx,
        TxConfig {
            key_id: from.key_id,
            insecure_ecb: ecb,
            ..TxConfig::default()
        }, &mut SeededRng::new(0),
    )
    .unwrap();
    let mut rx = RxSession::new(
        &to.rx,
        RxConfig {
            key_id: to.key_id,
            insecure_ecb: ecb,
            ..RxConfig::default()
        },
    )
    .unwrap();
    let mut clear = vec![0u8; 60];
    clear[..6].copy_from_slice(&B);
    clear[6..12].copy_from_slice(&A);
    clear[12..14].copy_from_slice(&[0x08, 0x00]);
    let mut f = PacketBuf::from_slice(&clear, 64, 128);
    tx.seal(&mut f, &SealOpts::default()).unwrap();
    rx.open(&mut f, 0, None).is_ok() && f.data() == &clear[..]
}

/// Two real hosts; the input decides the fate of every message.
fn pair(opts: u8, data: &[u8]) {
    let ip_a = Ipv4Addr::new(10, 0, 0, 1);
    let ip_b = Ipv4Addr::new(10, 0, 0, 2);
    let mut hosts = [
        Sep::new(cfg(A, ip_a, opts), Box::new(SeededRng::new(1))),
        Sep::new(cfg(B, ip_b, opts ^ 0x20), Box::new(SeededRng::new(2))),
    ];
    let macs = [A, B];
    let mut now = Instant::now();
    let mut est: [Vec<Established>; 2] = [Vec::new(), Vec::new()];
    hosts[0].initiate(
        B,
        if opts & 0x40 != 0 { Some(ip_b) } else { None },
        1 + opts % 255,
        now,
    );
    if opts & 0x80 != 0 {
        hosts[1].initiate(A, None, 9, now);
    }
    let mut input = data.iter().copied();
    // Group frames sent by each host: every transmission is a new, fresher carrying frame.
    let mut frames = [0u64; 2];
    for _ in 0..200 {
        let mut flight: Vec<(usize, Vec<u8>, (u64, u64))> = Vec::new();
        for (i, h) in hosts.iter_mut().enumerate() {
            let mut out = Vec::new();
            drain(h, &mut out, &mut est[i]);
            for m in out {
                frames[i] += 1;
                flight.push((i, m, (1, frames[i])));
            }
        }
        if flight.is_empty() {
            let next = hosts.iter().filter_map(|h| h.poll_timeout()).min();
            let Some(t) = next else { break };
            now = now.max(t);
            for h in &mut hosts {
                h.handle_timeout(now);
            }
            continue;
        }
        for (i, mut m, order) in flight {
            let to = 1 - i;
            let op = input.next().unwrap_or(0);
            let arg = input.next().unwrap_or(0);
            let times = match op % 8 {
                1 => 0,
                2 => 2,
                3 => {
                    if !m.is_empty() {
                        let at = usize::from(arg) % m.len();
                        m[at] ^= input.next().unwrap_or(1) | 1;
                    }
                    1
                }
                4 => {
                    m.truncate(usize::from(arg) % (m.len() + 1));
                    1
                }
                5 => {
                    let n = usize::from(arg);
                    let junk: Vec<u8> = input.by_ref().take(n).collect();
                    frames[i] += 1;
                    let _ = hosts[to].handle_message(macs[i], &junk, (1, frames[i]), now);
                    1
                }
                6 => {
                    now += Duration::from_millis(u64::from(arg) * 10);
                    for h in &mut hosts {
                        h.handle_timeout(now);
                    }
                    1
                }
                7 => {
                    // From the wrong source.
                    let _ = hosts[to].handle_message(macs[to], &m, order, now);
                    1
                }
                _ => 1,
            };
            for _ in 0..times {
                let _ = hosts[to].handle_message(macs[i], &m, order, now);
            }
        }
    }
    // Each host establishes as initiator only with the key id it proposed, and as responder only with the one its
    // peer proposed (B proposes only if it initiated); a responder's session must be its initiator's (the same
    // key id, suite and lifetime, and a frame sealed by one opens at the other, both ways).
    let proposed = [Some(1 + opts % 255), (opts & 0x80 != 0).then_some(9)];
    for i in 0..2 {
        for s in &est[i] {
            let want = if s.initiator {
                proposed[i]
            } else {
                proposed[1 - i]
            };
            assert_eq!(
                Some(s.key_id),
                want,
                "host {i} established an unproposed key id"
            );
        }
        for a in est[i].iter().filter(|s| s.initiator) {
            for b in est[1 - i].iter().filter(|s| !s.initiator) {
                assert_eq!(a.key_id, b.key_id);
                assert_eq!(a.suite, b.suite);
                assert_eq!(a.lifetime, b.lifetime);
                assert!(agree(a, b) && agree(b, a), "established sessions disagree");
            }
        }
    }
    assert!(est[0].len() <= 2 && est[1].len() <= 2);
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let Some((&opts, rest)) = rest.split_first() else {
        return;
    };
    let now = Instant::now();
    let ip_a = Ipv4Addr::new(10, 0, 0, 1);
    let ip_b = Ipv4Addr::new(10, 0, 0, 2);
    match sel % 3 {
        0 => {
            let mut b = Sep::new(cfg(B, ip_b, opts), Box::new(SeededRng::new(2)));
            feed(&mut b, B, A, None, rest, now);
        }
        1 => {
            let mut a = Sep::new(cfg(A, ip_a, opts), Box::new(SeededRng::new(1)));
            a.initiate(B, None, 1, now);
            let mut id = [0u8; 8];
            if let Some(SepEvent::Transmit { msg, .. }) = a.poll_event() {
                if msg.len() >= HEADER_LEN {
                    id.copy_from_slice(&msg[14..22]);
                }
            }
            feed(&mut a, A, B, Some(id), rest, now);
        }
        _ => pair(opts, rest),
    }
});
