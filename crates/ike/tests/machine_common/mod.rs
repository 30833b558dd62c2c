//! Two endpoints over an in-memory link, with a fake clock and deterministic faults (loss, duplication,
//! reordering), for the state machine's tests.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use netveil_crypto::rand::{Rng, SeededRng};
use netveil_ike::config::{
    Action, AuthMethod, AuthRound, ChildConfig, Connection, Identity, Lifetimes, Mode, Retransmit,
    TsSpec,
};
use netveil_ike::event::{ChildSa, Event, Failure, Transmit};
use netveil_ike::keys::Secret;
use netveil_ike::machine::Endpoint;
use netveil_ike::proposal::{Proposal, Protocol};

pub const A: &str = "10.0.0.1";
pub const B: &str = "10.0.0.2";

pub fn ts(s: &str) -> TsSpec {
    let (addr, prefix) = s.split_once('/').unwrap();
    TsSpec {
        addr: addr.parse().unwrap(),
        prefix: prefix.parse().unwrap(),
        protocol: 0,
        ports: (0, 65535),
    }
}

pub fn child(name: &str, local: &[&str], remote: &[&str], esp: &[&str]) -> ChildConfig {
    ChildConfig {
        name: name.into(),
        local_ts: local.iter().map(|s| ts(s)).collect(),
        remote_ts: remote.iter().map(|s| ts(s)).collect(),
        esp_proposals: esp
            .iter()
            .map(|p| Proposal::parse(Protocol::Esp, p).unwrap())
            .collect(),
        mode: Mode::Tunnel,
        lifetimes: Lifetimes {
            rekey: Duration::from_secs(3600),
            life: Duration::from_secs(3960),
            rand: Duration::from_secs(0),
        },
        start_action: Action::None,
        dpd_action: Action::None,
        close_action: Action::None,
        replay_window: 32,
    }
}

/// A connection from `local` to `remote` with PSK `psk`, ids `<local>.example` and `<remote>.example`.
pub fn conn(
    name: &str,
    local: &str,
    remote: &str,
    ike: &[&str],
    psk: &[u8],
    children: Vec<ChildConfig>,
) -> Connection {
    let id = |a: &str| Identity::Fqdn(format!("{}.example", if a == A { "a" } else { "b" }));
    Connection {
        name: name.into(),
        local_addrs: vec![local.parse().unwrap()],
        remote_addrs: vec![remote.parse().unwrap()],
        remote_port: 500,
        proposals: ike
            .iter()
            .map(|p| Proposal::parse(Protocol::Ike, p).unwrap())
            .collect(),
        encap: false,
        fragmentation: false,
        local: AuthRound {
            id: id(local),
            method: AuthMethod::Psk,
        },
        remote: AuthRound {
            id: id(remote),
            method: AuthMethod::Psk,
        },
        psk: Some(Secret::new(psk)),
        dpd_delay: None,
        lifetimes: Lifetimes {
            rekey: Duration::from_secs(14400),
            life: Duration::from_secs(15840),
            rand: Duration::from_secs(0),
        },
        reauth: Duration::ZERO,
        retransmit: Retransmit::default(),
        children,
    }
}

/// A pair of connections (A's and B's) for one tunnel between 10.1.0.0/16 (A's side) and 10.2.0.0/16 (B's).
pub fn pair(ike: &[&str], esp: &[&str]) -> (Connection, Connection) {
    let a = conn(
        "ab",
        A,
        B,
        ike,
        b"test psk",
        vec![child("net", &["10.1.0.0/16"], &["10.2.0.0/16"], esp)],
    );
    let b = conn(
        "ba",
        B,
        A,
        ike,
        b"test psk",
        vec![child("net", &["10.2.0.0/16"], &["10.1.0.0/16"], esp)],
    );
    (a, b)
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Per mille of datagrams lost, duplicated, delivered out of order.
    pub loss: u32,
    pub dup: u32,
    pub reorder: u32,
    /// Drop everything sent by endpoint 0 or 1.
    pub blackhole: [bool; 2],
}

pub struct Sim {
    pub ep: [Endpoint; 2],
    pub now: Instant,
    pub start: Instant,
    pub events: [Vec<Event>; 2],
    /// Every datagram sent, by sender, in order.
    pub sent: [Vec<Transmit>; 2],
    pub faults: Faults,
    fault_rng: SeededRng,
    in_flight: Vec<(usize, Transmit)>,
}

impl Sim {
    pub fn new(a: Connection, b: Connection, seed: u64) -> Sim {
        let start = Instant::now();
        let mut seeds = SeededRng::new(seed);
        let ra = Box::new(seeds.fork());
        let rb = Box::new(seeds.fork());
        Sim {
            ep: [
                Endpoint::new(vec![a], ra, start),
                Endpoint::new(vec![b], rb, start),
            ],
            now: start,
            start,
            events: [Vec::new(), Vec::new()],
            sent: [Vec::new(), Vec::new()],
            faults: Faults::default(),
            fault_rng: seeds.fork(),
            in_flight: Vec::new(),
        }
    }

    fn roll(&mut self, per_mille: u32) -> bool {
        if per_mille == 0 {
            return false;
        }
        let mut b = [0u8; 4];
        self.fault_rng.fill(&mut b);
        u32::from_be_bytes(b) % 1000 < per_mille
    }

    fn collect(&mut self) {
        for i in 0..2 {
            while let Some(t) = self.ep[i].poll_transmit() {
                self.sent[i].push(t.clone());
                if self.faults.blackhole[i] || self.roll(self.faults.loss) {
                    continue;
                }
                if self.roll(self.faults.dup) {
                    self.in_flight.push((1 - i, t.clone()));
                }
                self.in_flight.push((1 - i, t));
            }
            while let Some(e) = self.ep[i].poll_event() {
                self.events[i].push(e);
            }
        }
    }

    /// Delivers one datagram; false when none is in flight.
    pub fn step(&mut self) -> bool {
        self.collect();
        if self.in_flight.is_empty() {
            return false;
        }
        let mut at = 0;
        if self.in_flight.len() > 1 && self.roll(self.faults.reorder) {
            at = self.in_flight.len() - 1;
        }
        let (to, t) = self.in_flight.remove(at);
        self.ep[to].handle_datagram(self.now, t.remote, t.local, &t.bytes);
        self.collect();
        true
    }

    /// Delivers until nothing is in flight.
    pub fn settle(&mut self) {
        for _ in 0..100_000 {
            if !self.step() {
                return;
            }
        }
        panic!("no end to the datagrams");
    }

    /// Runs the clock forward by `d`, firing timeouts and delivering datagrams on the way.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            self.settle();
            let next = self.ep.iter().filter_map(|e| e.poll_timeout()).min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    for e in &mut self.ep {
                        e.handle_timeout(self.now);
                    }
                }
                _ => break,
            }
        }
        self.now = end;
        for e in &mut self.ep {
            e.handle_timeout(self.now);
        }
        self.settle();
    }

    /// Both endpoints with these caps and timers.
    pub fn limits(&mut self, l: netveil_ike::machine::Limits) {
        for e in &mut self.ep {
            let blank = Endpoint::new(vec![], Box::new(SeededRng::new(0)), self.now);
            let old = std::mem::replace(e, blank);
            *e = old.with_limits(l);
        }
    }

    pub fn initiate(&mut self) {
        self.ep[0].initiate("ab", None, self.now).unwrap();
    }

    pub fn children_up(&self, i: usize) -> Vec<&ChildSa> {
        self.events[i]
            .iter()
            .filter_map(|e| match e {
                Event::ChildSaUp(c) => Some(&**c),
                _ => None,
            })
            .collect()
    }

    pub fn ike_up(&self, i: usize) -> usize {
        self.events[i]
            .iter()
            .filter(|e| matches!(e, Event::IkeSaUp { .. }))
            .count()
    }

    pub fn ike_down(&self, i: usize) -> usize {
        self.events[i]
            .iter()
            .filter(|e| matches!(e, Event::IkeSaDown { .. }))
            .count()
    }

    pub fn child_down(&self, i: usize) -> usize {
        self.events[i]
            .iter()
            .filter(|e| matches!(e, Event::ChildSaDown { .. }))
            .count()
    }

    pub fn failures(&self, i: usize) -> Vec<&Failure> {
        self.events[i]
            .iter()
            .filter_map(|e| match e {
                Event::Failed { failure, .. } => Some(failure),
                _ => None,
            })
            .collect()
    }
}

pub fn addr(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse::<IpAddr>().unwrap(), port)
}

/// A's and B's children are one SA pair seen from both ends: my outbound is your inbound.
pub fn assert_crosswise(a: &ChildSa, b: &ChildSa) {
    assert_eq!(a.outbound, b.inbound, "A's outbound is B's inbound");
    assert_eq!(a.inbound, b.outbound, "A's inbound is B's outbound");
    assert_ne!(a.inbound.spi, a.outbound.spi);
    assert_ne!(a.inbound.encr_key, a.outbound.encr_key);
    assert_eq!(a.proposal, b.proposal);
    assert_eq!(a.local_ts, b.remote_ts);
    assert_eq!(a.remote_ts, b.local_ts);
    assert_eq!(a.mode, b.mode);
}
