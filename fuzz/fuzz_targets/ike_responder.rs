#![no_main]

//! The IKEv2 state machine as a responder, fed arbitrary datagrams, mutations of a valid IKE_SA_INIT, and a whole
//! exchange with a real initiator (which holds the wrong pre-shared key; both list a hybrid ML-KEM proposal first,
//! so the exchange goes through IKE_INTERMEDIATE) whose datagrams are mutated. Invariants:
//! no panic; the half-open SAs never exceed their cap, nor the IKE SAs theirs; nothing ever comes up (IkeSaUp or
//! ChildSaUp: nobody here holds the responder's PSK); everything the responder sends parses as an IKE message; and
//! after handle_timeout(now) the next timeout is later than now.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use netveil_crypto::rand::SeededRng;
use netveil_ike::config::*;
use netveil_ike::event::Event;
use netveil_ike::keys::Secret;
use netveil_ike::machine::{Endpoint, Limits};
use netveil_ike::message::Message;
use netveil_ike::proposal::{Proposal, Protocol};

const LIMITS: Limits = Limits {
    half_open_max: 4,
    cookie_threshold: 2,
    half_open_timeout: Duration::from_secs(30),
    cookie_secret_lifetime: Duration::from_secs(300),
    ike_sa_max: 6,
    fragment_len: 300,
};

fn conn(name: &str, local: &str, remote: &str, psk: &[u8]) -> Connection {
    let life = Lifetimes {
        rekey: Duration::from_secs(3600),
        life: Duration::from_secs(4000),
        rand: Duration::ZERO,
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
        remote_addrs: if remote.is_empty() {
            vec![]
        } else {
            vec![remote.parse().unwrap()]
        },
        remote_port: 500,
        proposals: [
            "aes256gcm16-prfsha256-x25519-ke1_mlkem768",
            "aes256gcm16-prfsha256-x25519",
            "aes128-sha256-modp2048",
        ]
            .iter()
            .map(|p| Proposal::parse(Protocol::Ike, p).unwrap())
            .collect(),
        encap: false,
        fragmentation: true,
        local: AuthRound {
            id: Identity::Fqdn(format!("{name}.example")),
            method: AuthMethod::Psk,
        },
        remote: AuthRound {
            id: Identity::Any,
            method: AuthMethod::Psk,
        },
        psk: Some(Secret::new(psk)),
        dpd_delay: Some(Duration::from_secs(10)),
        lifetimes: life,
        reauth: Duration::ZERO,
        retransmit: Retransmit::default(),
        children: vec![ChildConfig {
            name: "c".into(),
            local_ts: vec![ts("10.1.0.0")],
            remote_ts: vec![ts("10.2.0.0")],
            esp_proposals: vec![Proposal::parse(Protocol::Esp, "aes128gcm16").unwrap()],
            mode: Mode::Tunnel,
            lifetimes: life,
            start_action: Action::None,
            dpd_action: Action::None,
            close_action: Action::None,
            replay_window: 32,
        }],
    }
}

/// The initiator's connection (wrong PSK) and the responder's: parsed once (the proposals' parsing was a
/// twenty-fifth of each input), copied per input.
fn initiator() -> Connection {
    static C: OnceLock<Connection> = OnceLock::new();
    C.get_or_init(|| conn("i", I, R, b"wrong")).clone()
}

fn responder() -> Connection {
    static C: OnceLock<Connection> = OnceLock::new();
    C.get_or_init(|| conn("r", R, "", b"the responder's secret")).clone()
}

const R: &str = "10.0.0.2";
const I: &str = "10.0.0.1";

fn addr(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
}

/// A valid IKE_SA_INIT request (of an initiator with the wrong PSK).
fn template() -> &'static [u8] {
    static T: OnceLock<Vec<u8>> = OnceLock::new();
    T.get_or_init(|| {
        let now = Instant::now();
        let mut i = Endpoint::new(
            vec![initiator()],
            Box::new(SeededRng::new(7)),
            now,
        );
        i.initiate("i", None, now).unwrap();
        i.poll_transmit().unwrap().bytes
    })
}

struct Check {
    r: Endpoint,
    now: Instant,
}

impl Check {
    fn deliver(&mut self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) -> Vec<Vec<u8>> {
        self.r.handle_datagram(self.now, to, from, bytes);
        self.invariants()
    }

    fn tick(&mut self, secs: u8) -> Vec<Vec<u8>> {
        self.now += Duration::from_secs(u64::from(secs));
        self.r.handle_timeout(self.now);
        if let Some(t) = self.r.poll_timeout() {
            assert!(t > self.now, "a timeout due now survived handle_timeout");
        }
        self.invariants()
    }

    fn invariants(&mut self) -> Vec<Vec<u8>> {
        assert!(self.r.half_open() <= LIMITS.half_open_max);
        assert!(self.r.ike_sa_count() <= LIMITS.ike_sa_max);
        while let Some(e) = self.r.poll_event() {
            assert!(
                !matches!(e, Event::IkeSaUp { .. } | Event::ChildSaUp(_)),
                "came up without the PSK: {e:?}"
            );
        }
        let mut out = Vec::new();
        while let Some(t) = self.r.poll_transmit() {
            Message::parse(&t.bytes).expect("the responder sends well-formed messages");
            out.push(t.bytes);
        }
        out
    }
}

fn mutate(bytes: &mut Vec<u8>, edits: &[u8]) {
    for e in edits.chunks_exact(3) {
        if bytes.is_empty() {
            return;
        }
        let at = usize::from(u16::from_be_bytes([e[0], e[1]])) % (bytes.len() + 1);
        match e[2] {
            0 => bytes.truncate(at),
            1 => bytes.insert(at.min(bytes.len()), e[0]),
            x => {
                if let Some(b) = bytes.get_mut(at) {
                    *b ^= x;
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let now = Instant::now();
    let mut c = Check {
        r: Endpoint::new(
            vec![responder()],
            Box::new(SeededRng::new(u64::from(mode))),
            now,
        )
        .with_limits(LIMITS),
        now,
    };
    match mode % 3 {
        // Arbitrary datagrams: [port byte, time byte, len, bytes...]*.
        0 => {
            let mut r = rest;
            while let [port, dt, len, tail @ ..] = r {
                let n = usize::from(*len).min(tail.len());
                let from = addr(I, 500 + u16::from(*port & 3));
                c.deliver(from, addr(R, 500), &tail[..n]);
                c.tick(*dt % 40);
                r = &tail[n..];
            }
        }
        // Mutations of a valid IKE_SA_INIT, sent from a few addresses (the cookie and half-open paths).
        1 => {
            for (k, edits) in rest.chunks(12).enumerate().take(16) {
                let mut m = template().to_vec();
                mutate(&mut m, edits);
                c.deliver(addr(I, 500 + (k % 5) as u16), addr(R, 500), &m);
                if edits.first() == Some(&0) {
                    c.tick(31);
                }
            }
        }
        // A whole exchange with an initiator that has the wrong PSK; its k-th datagram is mutated.
        _ => {
            let (k, edits) = rest.split_first().map_or((0, &[][..]), |(k, e)| (*k, e));
            let mut i = Endpoint::new(
                vec![initiator()],
                Box::new(SeededRng::new(9)),
                now,
            );
            i.initiate("i", None, now).unwrap();
            let mut sent = 0u8;
            for _ in 0..8 {
                let Some(t) = i.poll_transmit() else {
                    c.tick(5);
                    i.handle_timeout(c.now);
                    continue;
                };
                let mut b = t.bytes;
                if sent == k % 4 {
                    mutate(&mut b, edits);
                }
                sent += 1;
                for reply in c.deliver(t.local, t.remote, &b) {
                    i.handle_datagram(c.now, t.local, t.remote, &reply);
                }
            }
            while i.poll_event().is_some() {}
        }
    }
    c.tick(200);
    assert_eq!(c.r.half_open(), 0, "half-open SAs expire");
});
