//! The driver loop with a scripted state machine, real sockets on loopback and a real IP engine's port: what
//! the machine queues leaves from the right port (the non-ESP marker added on the NAT-T port), what a peer sends
//! reaches it with the marker stripped and its local address, ESP and keepalives on the shared port never do
//! (ESP reaches the engine's socket of the group instead), `start_action = start` initiates at start, the
//! CHILD_SA it reports is installed and removed, its timeout runs when due, and a stop removes what it installed.

use super::super::machine::Machine;
use super::super::*;
use crate::drivers::ike::install::Installer;
use crate::drivers::ike::sockets::Sockets;
use crate::engines::ip::port::IpPort;
use crate::runtime::engine::Engine;
use netveil_ike::config::{Mode as IkeMode, TsSpec};
use netveil_ike::event::{ChildSa, EspSa, IkeSaId};
use netveil_ike::event::{Event, Failure, Transmit};
use netveil_ike::keys::Secret;
use netveil_ike::proposal::{Proposal, Protocol};
use netveil_io::{PacketBuf, UdpMeta, UdpSocket};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Script {
    initiated: Vec<(String, Option<String>)>,
    received: Vec<(SocketAddr, SocketAddr, Vec<u8>)>,
    timeouts: u32,
    terminated: Vec<IkeSaId>,
    tx: Vec<Transmit>,
    events: Vec<Event>,
    timeout: Option<Instant>,
}

struct Scripted {
    s: Arc<Mutex<Script>>,
    ike: SocketAddr,
    nat: SocketAddr,
    child: ChildSa,
}

impl Machine for Scripted {
    fn initiate(
        &mut self,
        c: &str,
        ch: Option<&str>,
        _: Instant,
    ) -> std::result::Result<IkeSaId, String> {
        let mut s = self.s.lock().unwrap();
        s.initiated.push((c.into(), ch.map(String::from)));
        let peer = self.child.remote;
        s.tx.push(Transmit {
            local: self.ike,
            remote: SocketAddr::new(peer.ip(), peer.port()),
            bytes: b"IKE_SA_INIT".to_vec(),
        });
        Ok(IkeSaId(1))
    }
    fn terminate(&mut self, id: IkeSaId, _: Instant) -> std::result::Result<(), String> {
        let mut s = self.s.lock().unwrap();
        s.terminated.push(id);
        let peer = self.child.remote;
        s.tx.push(Transmit {
            local: self.nat,
            remote: peer,
            bytes: b"INFORMATIONAL DELETE".to_vec(),
        });
        Ok(())
    }
    fn handle_datagram(&mut self, _: Instant, local: SocketAddr, remote: SocketAddr, b: &[u8]) {
        let mut s = self.s.lock().unwrap();
        s.received.push((local, remote, b.to_vec()));
        if b == b"IKE_AUTH" {
            s.tx.push(Transmit {
                local: self.nat,
                remote,
                bytes: b"IKE_AUTH reply".to_vec(),
            });
            s.events.push(Event::IkeSaUp {
                ike_sa: IkeSaId(1),
                connection: "site".into(),
            });
            s.events
                .push(Event::ChildSaUp(Box::new(self.child.clone())));
            // Delete it a little later.
            s.timeout = Some(Instant::now() + Duration::from_millis(300));
        }
    }
    fn handle_timeout(&mut self, _: Instant) {
        let mut s = self.s.lock().unwrap();
        s.timeouts += 1;
        s.timeout = None;
        s.events.push(Event::ChildSaDown {
            ike_sa: IkeSaId(1),
            child: "net".into(),
            inbound_spi: self.child.inbound.spi,
            outbound_spi: self.child.outbound.spi,
        });
        s.events.push(Event::Failed {
            connection: "site".into(),
            ike_sa: Some(IkeSaId(1)),
            child: None,
            failure: Failure::Timeout,
        });
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        let mut s = self.s.lock().unwrap();
        (!s.tx.is_empty()).then(|| s.tx.remove(0))
    }
    fn poll_event(&mut self) -> Option<Event> {
        let mut s = self.s.lock().unwrap();
        (!s.events.is_empty()).then(|| s.events.remove(0))
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.s.lock().unwrap().timeout
    }
}

fn recv(s: &UdpSocket) -> Option<(SocketAddr, Vec<u8>)> {
    s.set_recv_timeout(Duration::from_secs(2)).unwrap();
    let mut bufs = vec![PacketBuf::new(2048, 0); 1];
    let mut meta = vec![UdpMeta::default(); 1];
    match s.recv_batch(&mut bufs, &mut meta, 0) {
        Ok(1) => Some((meta[0].src, bufs[0].data().to_vec())),
        _ => None,
    }
}

fn send(s: &UdpSocket, to: SocketAddr, b: &[u8]) {
    assert_eq!(
        s.send_batch(&[PacketBuf::from_slice(b, 0, 0)], &[to])
            .unwrap(),
        1
    );
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_loop_moves_datagrams_events_and_timeouts() {
    let dir = crate::runtime::state::test_dir("ike-driver");
    let mut c = crate::engines::ip::config::Config::parse(&format!(
        "[interface]\nstate_dir = \"{}\"\n",
        dir.display()
    ))
    .unwrap();
    c.interface.state_dir.fresh_keys = true;
    let engine = Arc::new(crate::engines::ip::Shared::new(c).unwrap());
    let lo: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    // Ports of this test only (the real ones are 500 and 4500).
    let base = 30000 + (std::process::id() % 10000) as u16 * 2;
    let (ike_port, nat_port) = (base, base + 1);
    // The IP engine's ESP-in-UDP socket joins the port's group first, as at `netveil up`.
    let engine_sock =
        UdpSocket::bind_shared(SocketAddr::new("0.0.0.0".parse().unwrap(), nat_port)).unwrap();
    let sockets = Sockets::open(&[lo], ike_port, nat_port, None, sockets::Bind::Wildcard).unwrap();
    let peer = UdpSocket::bind(SocketAddr::new(lo, 0)).unwrap();
    let p = Proposal::parse(Protocol::Esp, "aes128gcm16").unwrap();
    let ts = |a: &str, n| TsSpec {
        addr: a.parse().unwrap(),
        prefix: n,
        protocol: 0,
        ports: (0, 65535),
    };
    let child = ChildSa {
        ike_sa: IkeSaId(1),
        connection: "site".into(),
        child: "net".into(),
        proposal: p,
        mode: IkeMode::Tunnel,
        local: SocketAddr::new(lo, nat_port),
        remote: peer.local_addr(),
        udp_encap: true,
        inbound: EspSa {
            spi: 0xc000_0001,
            encr_key: Secret::new(&[1; 20]),
            integ_key: Secret::new(&[]),
        },
        outbound: EspSa {
            spi: 0xd000_0001,
            encr_key: Secret::new(&[2; 20]),
            integ_key: Secret::new(&[]),
        },
        local_ts: vec![ts("10.1.0.0", 16)],
        remote_ts: vec![ts("10.2.0.0", 16)],
        replay_window: 64,
        replaces: None,
    };
    let script = Arc::new(Mutex::new(Script::default()));
    let counters = Arc::new(driver::Counters::default());
    let d = driver::Driver {
        preinstalled: Default::default(),
        machine: Box::new(Scripted {
            s: script.clone(),
            ike: SocketAddr::new(lo, ike_port),
            nat: SocketAddr::new(lo, nat_port),
            child,
        }),
        sockets,
        installer: Installer::new(Arc::new(IpPort(engine.clone()))),
        start: vec![("site".into(), "net".into())],
        counters: counters.clone(),
        ike_sas: Vec::new(),
        control: None,
    };
    let running = spawn(d).unwrap();
    // start_action = start: initiated at once, its first message from port 500's socket, without a marker.
    let (from, b) = recv(&peer).expect("IKE_SA_INIT sent");
    assert_eq!(from, SocketAddr::new(lo, ike_port));
    assert_eq!(b, b"IKE_SA_INIT");
    assert_eq!(
        script.lock().unwrap().initiated,
        [("site".to_string(), Some("net".to_string()))]
    );
    // On the shared port: ESP (to the engine's socket), a keepalive and an IKE message with its marker.
    let nat = SocketAddr::new(lo, nat_port);
    send(&peer, nat, &[0xc0, 0, 0, 1, 0, 0, 0, 1, 9, 9, 9, 9]);
    send(&peer, nat, &[0xff]);
    send(&peer, nat, b"\0\0\0\0IKE_AUTH");
    let (from, b) = recv(&peer).expect("IKE_AUTH reply");
    assert_eq!(from, nat);
    assert_eq!(
        b, b"\0\0\0\0IKE_AUTH reply",
        "the marker added on the NAT-T port"
    );
    let (_, esp) = recv(&engine_sock).expect("ESP reached the engine's socket");
    assert_eq!(esp[0], 0xc0);
    {
        let s = script.lock().unwrap();
        assert_eq!(
            s.received,
            [(nat, peer.local_addr(), b"IKE_AUTH".to_vec())],
            "the marker stripped; neither ESP nor the keepalive handed in"
        );
    }
    assert_eq!(counters.dropped.load(Relaxed), 1, "the keepalive");
    // The CHILD_SA it reported is in the engine, then its ChildSaDown (at the machine's timeout) removes it.
    let sas = || {
        let mut v: Vec<String> = engine
            .db
            .load()
            .sad
            .iter()
            .map(|r| r.base().params.name.clone())
            .collect();
        v.sort();
        v
    };
    wait_for("the CHILD_SA installed", || {
        counters.children_up.load(Relaxed) == 1
    });
    assert!(sas() == ["ike-1-in", "ike-1-out"] || script.lock().unwrap().timeouts > 0);
    wait_for("the timeout", || script.lock().unwrap().timeouts == 1);
    wait_for("the CHILD_SA removed", || sas().is_empty());
    assert_eq!(engine.db.load().policies.len(), 0);
    // At stop the IKE SA that is up is deleted: the peer gets the DELETE.
    Box::new(running).stop(&mut crate::runtime::engine::Undo::default(), false);
    assert_eq!(script.lock().unwrap().terminated, [IkeSaId(1)]);
    let (_, b) = recv(&peer).expect("the DELETE at stop");
    assert_eq!(b, b"\0\0\0\0INFORMATIONAL DELETE");
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without a peer: what the machine cannot send (no socket of its port) is logged and the loop goes on; a stop
/// removes every CHILD_SA still installed.
#[test]
fn stop_removes_what_is_installed() {
    let dir = crate::runtime::state::test_dir("ike-driver-stop");
    let mut c = crate::engines::ip::config::Config::parse(&format!(
        "[interface]\nstate_dir = \"{}\"\n",
        dir.display()
    ))
    .unwrap();
    c.interface.state_dir.fresh_keys = true;
    let engine = Arc::new(crate::engines::ip::Shared::new(c).unwrap());
    let port: Arc<dyn crate::runtime::sa_port::SaPort> = Arc::new(IpPort(engine.clone()));
    let mut inst = Installer::new(port);
    let p = Proposal::parse(Protocol::Esp, "aes256-sha256").unwrap();
    let lo: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let ch = ChildSa {
        ike_sa: IkeSaId(3),
        connection: "c".into(),
        child: "x".into(),
        proposal: p,
        mode: IkeMode::Transport,
        local: SocketAddr::new(lo, 500),
        remote: SocketAddr::new("127.0.0.2".parse().unwrap(), 500),
        udp_encap: false,
        inbound: EspSa {
            spi: 0x1111,
            encr_key: Secret::new(&[1; 32]),
            integ_key: Secret::new(&[2; 32]),
        },
        outbound: EspSa {
            spi: 0x2222,
            encr_key: Secret::new(&[3; 32]),
            integ_key: Secret::new(&[4; 32]),
        },
        local_ts: vec![TsSpec {
            addr: lo,
            prefix: 32,
            protocol: 17,
            ports: (0, 65535),
        }],
        remote_ts: vec![TsSpec {
            addr: "127.0.0.2".parse().unwrap(),
            prefix: 32,
            protocol: 0,
            ports: (53, 53),
        }],
        replay_window: 64,
        replaces: None,
    };
    inst.install(&ch).unwrap();
    let pol: Vec<_> = engine
        .db
        .load()
        .policies
        .iter()
        .map(|p| p.rule.clone())
        .collect();
    assert_eq!(pol.len(), 2);
    assert!(pol.iter().any(|p| p.name == "ike-1-o0"
        && p.selector.proto == Some(17)
        && p.selector.dst_ports.start == 53));
    let base = 40000 + (std::process::id() % 10000) as u16 * 2;
    let d = driver::Driver {
        preinstalled: Default::default(),
        machine: Box::new(Scripted {
            s: Default::default(),
            // A port without a socket: the send fails, the loop goes on.
            ike: SocketAddr::new(lo, 9),
            nat: SocketAddr::new(lo, 9),
            child: ch,
        }),
        sockets: Sockets::open(&[lo], base, base + 1, None, sockets::Bind::Wildcard).unwrap(),
        installer: inst,
        start: vec![("c".into(), "x".into())],
        counters: Default::default(),
        ike_sas: Vec::new(),
        control: None,
    };
    let running = spawn(d).unwrap();
    std::thread::sleep(Duration::from_millis(250));
    let mut r = running;
    assert!(
        crate::runtime::engine::Engine::tick(&mut r),
        "still running"
    );
    Box::new(r).stop(&mut crate::runtime::engine::Undo::default(), false);
    assert!(
        engine.db.load().sad.iter().next().is_none(),
        "removed at stop"
    );
    assert!(engine.db.load().policies.is_empty());
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every failure is logged with what to check, and with what it concerns (proposals, selectors, ids).
#[test]
fn failures_say_what_to_check() {
    let t = |addr: &str| TsSpec {
        addr: addr.parse().unwrap(),
        prefix: 24,
        protocol: 6,
        ports: (80, 80),
    };
    let cases = [
        (
            Failure::NoProposalChosen {
                ours: vec!["aes256gcm16-prfsha384-ecp384".into()],
                theirs: vec!["aes128-sha1-modp1024".into()],
            },
            vec![
                "aes256gcm16-prfsha384-ecp384",
                "aes128-sha1-modp1024",
                "proposals",
            ],
        ),
        (
            Failure::TsUnacceptable {
                ours: vec![t("10.1.0.0")],
                theirs: vec![t("10.9.0.0")],
            },
            vec!["10.1.0.0/24[6/80-80]", "10.9.0.0/24", "local_ts"],
        ),
        (
            Failure::AuthenticationFailed {
                id: "peer.example.org".into(),
                by_peer: false,
            },
            vec!["peer.example.org", "pre-shared key", "remote.id"],
        ),
        (
            Failure::AuthenticationFailed {
                id: "me".into(),
                by_peer: true,
            },
            vec!["refused our authentication as me", "local.id"],
        ),
        (Failure::Timeout, vec!["UDP 500 and 4500"]),
        (
            Failure::PeerError {
                notify: 14,
                name: "NO_PROPOSAL_CHOSEN".into(),
            },
            vec!["NO_PROPOSAL_CHOSEN (14)"],
        ),
        (
            Failure::NoMatchingConnection(Box::new(netveil_ike::event::NoMatch {
                local: "10.0.0.1".parse().unwrap(),
                remote: "10.0.0.9".parse().unwrap(),
                local_id: None,
                remote_id: Some("C=CH, O=lab, CN=mallory".into()),
                expected: vec!["site: 10.0.0.1[a.example]...10.0.0.2[b.example]".into()],
                more: 2,
                why: None,
            })),
            vec![
                "no connection matches 10.0.0.1[%any]...10.0.0.9[C=CH, O=lab, CN=mallory]",
                "expected site: 10.0.0.1[a.example]...10.0.0.2[b.example] and 2 more",
                "remote_addrs",
            ],
        ),
        (
            Failure::UnexpectedId {
                got: "mallory.example".into(),
                want: "b.example".into(),
            },
            vec![
                "authenticated as mallory.example, not as b.example",
                "remote.id",
            ],
        ),
        (
            Failure::Malformed("IKE_AUTH response".into()),
            vec!["malformed IKE_AUTH response", "the peer's fault"],
        ),
        (
            Failure::ReauthFailed,
            vec!["reauthentication failed", "over_time"],
        ),
    ];
    for (f, want) in cases {
        let s = super::super::machine::explain(&f);
        for w in want {
            assert!(s.contains(w), "{f:?}: {s}");
        }
    }
}
