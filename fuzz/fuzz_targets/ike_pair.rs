#![no_main]

//! Two IKE endpoints that share a PSK, driven by the fuzzer's schedule: deliver, drop, duplicate, reorder or
//! mutate the next datagram, advance the clock, and call the API (initiate, rekey a CHILD_SA or the IKE SA,
//! create or delete a CHILD_SA, terminate). The input's first byte picks the setup: a hybrid ML-KEM proposal first
//! (so that IKE_INTERMEDIATE with its 1184-byte key runs, RFC 9370) or the classic ones only, and fragments above
//! 256 bytes (IKE_AUTH and PFS rekeys in fragments, RFC 7383) or above 1,200. Invariants, per endpoint: no panic;
//! the events are consistent (ChildSaDown only for a CHILD_SA that is up, by its inbound SPI, never twice;
//! IkeSaDown only for an SA that came up; no inbound SPI announced twice while up); the CHILD_SAs `status` lists
//! are exactly those the events say are up (checked whenever events came, and at the end); everything sent
//! parses; after handle_timeout(now) the next timeout is later than now.
//!
//! Cost: the crypto is `netveil-crypto`'s fuzzing stand-ins (`--cfg fuzzing`), so the handshake every input starts
//! with costs its messages only; the classic setup without small fragments is four datagrams.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use netveil_crypto::rand::SeededRng;
use netveil_ike::config::*;
use netveil_ike::event::{Event, IkeSaId, Transmit};
use netveil_ike::keys::Secret;
use netveil_ike::machine::{Endpoint, Limits};
use netveil_ike::message::Message;
use netveil_ike::proposal::{Proposal, Protocol};

/// Caps, and fragments of at most `fragment_len` bytes: 256 is small enough that IKE_AUTH and PFS rekeys go in
/// fragments (RFC 7383).
fn limits(fragment_len: usize) -> Limits {
    Limits {
        half_open_max: 16,
        cookie_threshold: 8,
        half_open_timeout: Duration::from_secs(30),
        cookie_secret_lifetime: Duration::from_secs(300),
        ike_sa_max: 32,
        fragment_len,
    }
}

fn conn(name: &str, local: &str, remote: &str, lts: &str, rts: &str, hybrid: bool) -> Connection {
    let life = Lifetimes {
        rekey: Duration::from_secs(60),
        life: Duration::from_secs(90),
        rand: Duration::from_secs(10),
    };
    let ts = |a: &str| TsSpec {
        addr: a.parse().unwrap(),
        prefix: 16,
        protocol: 0,
        ports: (0, 65535),
    };
    Connection {
        name: name.into(),
        local_addrs: vec![local.parse().unwrap()],
        remote_addrs: vec![remote.parse().unwrap()],
        remote_port: 500,
        proposals: [
            "aes128gcm16-prfsha256-x25519-ke1_mlkem768",
            "aes128gcm16-prfsha256-x25519",
            "aes128-sha256-x25519",
        ][usize::from(!hybrid)..]
            .iter()
            .map(|p| Proposal::parse(Protocol::Ike, p).unwrap())
            .collect(),
        encap: name == "a",
        fragmentation: true,
        local: AuthRound {
            id: Identity::Fqdn(format!("{name}.example")),
            method: AuthMethod::Psk,
        },
        remote: AuthRound {
            id: Identity::Any,
            method: AuthMethod::Psk,
        },
        psk: Some(Secret::new(b"shared")),
        dpd_delay: Some(Duration::from_secs(30)),
        lifetimes: Lifetimes {
            rekey: Duration::from_secs(100),
            ..life
        },
        reauth: Duration::ZERO,
        retransmit: Retransmit {
            timeout: Duration::from_secs(2),
            base: 1.5,
            tries: 3,
        },
        children: vec![
            ChildConfig {
                name: "c".into(),
                local_ts: vec![ts(lts)],
                remote_ts: vec![ts(rts)],
                esp_proposals: vec![Proposal::parse(Protocol::Esp, "aes128gcm16-x25519").unwrap()],
                mode: Mode::Tunnel,
                lifetimes: life,
                start_action: Action::None,
                dpd_action: Action::None,
                close_action: Action::None,
                replay_window: 32,
            },
            ChildConfig {
                name: "d".into(),
                local_ts: vec![ts("10.9.0.0")],
                remote_ts: vec![ts("10.9.0.0")],
                esp_proposals: vec![Proposal::parse(Protocol::Esp, "aes128-sha256").unwrap()],
                mode: Mode::Transport,
                lifetimes: life,
                start_action: Action::None,
                dpd_action: Action::None,
                close_action: Action::None,
                replay_window: 32,
            },
        ],
    }
}

/// A's and B's connections, with the hybrid proposal first or without it: parsed once (the proposals' parsing
/// was a fiftieth of each input), copied per input.
fn conns(hybrid: bool) -> &'static [Connection; 2] {
    static C: OnceLock<[[Connection; 2]; 2]> = OnceLock::new();
    &C.get_or_init(|| {
        [false, true].map(|h| {
            [
                conn("a", "10.0.0.1", "10.0.0.2", "10.1.0.0", "10.2.0.0", h),
                conn("b", "10.0.0.2", "10.0.0.1", "10.2.0.0", "10.1.0.0", h),
            ]
        })
    })[usize::from(hybrid)]
}

#[derive(Default)]
struct Seen {
    children: HashMap<u32, IkeSaId>,
    ikes: HashSet<IkeSaId>,
}

struct World {
    ep: [Endpoint; 2],
    seen: [Seen; 2],
    wire: Vec<(usize, Transmit)>,
    now: Instant,
    start: Instant,
}

impl World {
    /// Sends what both sent and takes their events; checks `status` against the events when events came (or
    /// `always`: building it for every step was a seventh of the target's time).
    fn drain_checked(&mut self, always: bool) {
        for i in 0..2 {
            let mut evented = always;
            while let Some(t) = self.ep[i].poll_transmit() {
                Message::parse(&t.bytes).expect("what we send parses");
                if self.wire.len() < 64 {
                    self.wire.push((1 - i, t));
                }
            }
            while let Some(e) = self.ep[i].poll_event() {
                evented = true;
                let s = &mut self.seen[i];
                match e {
                    Event::IkeSaUp { ike_sa, .. } => assert!(s.ikes.insert(ike_sa), "IkeSaUp twice"),
                    Event::IkeSaDown { ike_sa, .. } => {
                        assert!(s.ikes.remove(&ike_sa), "IkeSaDown of an SA not up")
                    }
                    Event::ChildSaUp(c) => {
                        assert!(s.ikes.contains(&c.ike_sa), "a child of an SA not up");
                        assert!(
                            s.children.insert(c.inbound.spi, c.ike_sa).is_none(),
                            "inbound SPI announced twice"
                        );
                    }
                    Event::ChildSaDown { inbound_spi, .. } => {
                        assert!(
                            s.children.remove(&inbound_spi).is_some(),
                            "ChildSaDown of a CHILD_SA not up"
                        );
                    }
                    Event::Failed { .. } => {}
                }
            }
            if !evented {
                continue;
            }
            let listed: HashSet<u32> = self.ep[i]
                .status(self.now)
                .iter()
                .flat_map(|s| s.children.iter().map(|c| c.inbound_spi))
                .collect();
            let up: HashSet<u32> = self.seen[i].children.keys().copied().collect();
            assert_eq!(listed, up, "status and events disagree on the CHILD_SAs");
        }
    }

    fn drain(&mut self) {
        self.drain_checked(false)
    }

    fn tick(&mut self, secs: u64) {
        // At most 10 simulated minutes in all: rekeys and DPD are costly under the sanitizer.
        if self.now + Duration::from_secs(secs) > self.start + Duration::from_secs(600) {
            return;
        }
        self.now += Duration::from_secs(secs);
        for e in &mut self.ep {
            e.handle_timeout(self.now);
            if let Some(t) = e.poll_timeout() {
                assert!(t > self.now, "a timeout due now survived handle_timeout");
            }
        }
        self.drain();
    }

    fn some_sa(&self, i: usize, pick: u8) -> Option<(IkeSaId, Option<u32>)> {
        let st = self.ep[i].status(self.now);
        let s = st.get(usize::from(pick) % st.len().max(1))?;
        let c = (!s.children.is_empty())
            .then(|| s.children[usize::from(pick) % s.children.len()].inbound_spi);
        Some((s.id, c))
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&setup, data)) = data.split_first() else {
        return;
    };
    let hybrid = setup & 1 != 0;
    let fragment_len = if setup & 2 != 0 { 256 } else { 1200 };
    let now = Instant::now();
    let mut w = World {
        ep: [
            Endpoint::new(
                vec![conns(hybrid)[0].clone()],
                Box::new(SeededRng::new(1)),
                now,
            )
            .with_limits(limits(fragment_len)),
            Endpoint::new(
                vec![conns(hybrid)[1].clone()],
                Box::new(SeededRng::new(2)),
                now,
            )
            .with_limits(limits(fragment_len)),
        ],
        seen: [Seen::default(), Seen::default()],
        wire: Vec::new(),
        now,
        start: now,
    };
    w.ep[0].initiate("a", None, now).unwrap();
    w.drain();
    for op in data.chunks_exact(3).take(100) {
        let (kind, x, y) = (op[0], op[1], op[2]);
        let side = usize::from(x & 1);
        match kind % 12 {
            // Deliver the datagram at position x (0 most of the time).
            0..=3 => {
                if !w.wire.is_empty() {
                    let at = if kind % 12 == 0 { usize::from(x) % w.wire.len() } else { 0 };
                    let (to, t) = w.wire.remove(at);
                    w.ep[to].handle_datagram(w.now, t.remote, t.local, &t.bytes);
                }
            }
            // Drop it.
            4 => {
                if !w.wire.is_empty() {
                    w.wire.remove(0);
                }
            }
            // Duplicate it.
            5 => {
                if let Some(d) = w.wire.first().cloned() {
                    w.wire.push(d);
                }
            }
            // Deliver it mutated.
            6 => {
                if !w.wire.is_empty() {
                    let (to, mut t) = w.wire.remove(0);
                    if !t.bytes.is_empty() {
                        let at = usize::from(y) % t.bytes.len();
                        t.bytes[at] ^= x | 1;
                    }
                    w.ep[to].handle_datagram(w.now, t.remote, t.local, &t.bytes);
                }
            }
            7 => w.tick(u64::from(y % 64)),
            8 => {
                if let Some((id, Some(spi))) = w.some_sa(side, y) {
                    let _ = w.ep[side].rekey_child(id, spi, w.now);
                }
            }
            9 => {
                if let Some((id, _)) = w.some_sa(side, y) {
                    let _ = w.ep[side].rekey_ike(id, w.now);
                }
            }
            10 => {
                if let Some((id, spi)) = w.some_sa(side, y) {
                    let _ = match (y & 3, spi) {
                        (0, _) => w.ep[side].terminate(id, w.now),
                        (1, Some(spi)) => w.ep[side].delete_child(id, spi, w.now),
                        _ => w.ep[side].create_child(id, if y & 4 == 0 { "c" } else { "d" }, w.now),
                    };
                }
            }
            _ => {
                let _ = w.ep[side].initiate(if side == 0 { "a" } else { "b" }, None, w.now);
            }
        }
        w.drain();
    }
    // The datagrams in flight arrive and the clock runs on a little (the schedule's own ticks run it further):
    // the invariants hold throughout.
    for _ in 0..2 {
        while let Some((to, t)) = (!w.wire.is_empty()).then(|| w.wire.remove(0)) {
            w.ep[to].handle_datagram(w.now, t.remote, t.local, &t.bytes);
            w.drain();
        }
        w.tick(30);
    }
    w.drain_checked(true);
});
