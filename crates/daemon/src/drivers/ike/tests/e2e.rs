//! Two IKE drivers with the real state machine (`netveil_ike::machine::Endpoint`), each with a real IP engine,
//! on one loopback in a network namespace of their own (127.0.0.1 and 127.0.0.2, ports 500 and 4500 bound per
//! address): their `[ike]` sections as a user writes them, `start_action = start` on one side. The IKE SA and
//! the CHILD_SA come up, each engine gets the SAs and policies, a packet sealed by one engine's outbound SA
//! opens with the other's inbound SA both ways (the keys agree: they were negotiated, not written); stopping the
//! initiator deletes its IKE SA, and the responder removes the CHILD_SA when the DELETE arrives. With `encap`
//! the exchange moves to port 4500 (the non-ESP marker on the wire both ways) and the SAs are UDP-encapsulated:
//! the sealed packet, put in the datagram its record describes, is opened with the `wire` views (UDP 4500 -> 4500,
//! no non-ESP marker, the peer's inbound SPI, sequence number 1) and decrypted by the peer's engine.

use super::super::*;
use crate::drivers::ike::sockets::{Bind, Sockets};
use crate::engines::ip::port::IpPort;
use crate::engines::ip::{FragCache, Shared, TxRecord};
use netveil_wire::PacketBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn section(me: &str, peer: &str, mine: &str, theirs: &str, start: bool, encap: bool) -> String {
    format!(
        r#"
[[connection]]
name = "lab"
local_addrs = ["{me}"]
remote_addrs = ["{peer}"]
proposals = ["aes256gcm16-prfsha384-x25519"]
psk = "0x000102030405060708090a0b0c0d0e0f10111213"
encap = {encap}
local = {{ id = "{me}", auth = "psk" }}
remote = {{ id = "{peer}", auth = "psk" }}

[[connection.children]]
name = "net"
local_ts = ["{mine}"]
remote_ts = ["{theirs}"]
esp_proposals = ["aes128gcm16"]
start_action = "{}"
"#,
        if start { "start" } else { "none" }
    )
}

struct Side {
    engine: Arc<Shared>,
    running: Option<IkeDriver>,
    counters: Arc<driver::Counters>,
}

fn side(dir: &std::path::Path, text: &str) -> Side {
    let mut c = crate::engines::ip::config::Config::parse(&format!(
        "[interface]\nstate_dir = \"{}\"\n",
        dir.display()
    ))
    .unwrap();
    c.interface.state_dir.fresh_keys = true;
    let engine = Arc::new(Shared::new(c).unwrap());
    let v: toml::Value = toml::from_str(text).unwrap();
    let cfg = config::parse(v, std::path::Path::new("/")).unwrap();
    let locals = cfg.connections[0].local_addrs.clone();
    let start = vec![("lab".to_string(), "net".to_string())]
        .into_iter()
        .filter(|_| {
            cfg.connections[0].children[0].start_action == netveil_ike::config::Action::Start
        })
        .collect();
    let counters = Arc::new(driver::Counters::default());
    let d = driver::Driver {
        preinstalled: Default::default(),
        machine: endpoint::new(cfg.connections).unwrap(),
        sockets: Sockets::open(&locals, 500, 4500, None, Bind::Each).unwrap(),
        installer: install::Installer::new(Arc::new(IpPort(engine.clone()))),
        start,
        counters: counters.clone(),
        ike_sas: Vec::new(),
        control: None,
    };
    Side {
        engine,
        running: Some(spawn(d).unwrap()),
        counters,
    }
}

fn packet(src: [u8; 4], dst: [u8; 4], n: u32) -> PacketBuf {
    let mut p = vec![
        0x45, 0, 0, 32, 0, 0, 0x40, 0, 64, 17, 0, 0, src[0], src[1], src[2], src[3], dst[0],
        dst[1], dst[2], dst[3], 0x13, 0x88, 0x13, 0x89, 0, 12, 0, 0,
    ];
    p.extend_from_slice(&n.to_be_bytes());
    let c = netveil_wire::checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    PacketBuf::from_slice(&p, 256, 640)
}

/// The IPv4 datagram a NAT-T record `d` puts on the wire: `payload` (what the engine sealed) in UDP from
/// `d.src`:`d.sport` to `d.to`, built with the `wire` representations.
fn nat_t_datagram(d: crate::engines::ip::Datagram, payload: &PacketBuf) -> PacketBuf {
    use netveil_wire::{ipv4, udp};
    let (std::net::IpAddr::V4(src), std::net::SocketAddr::V4(to)) = (d.src, d.to) else {
        panic!("not IPv4: {d:?}")
    };
    let u = udp::Repr {
        src_port: d.sport,
        dst_port: to.port(),
        payload_len: payload.len(),
    };
    let ip = ipv4::Repr {
        src,
        dst: *to.ip(),
        protocol: netveil_wire::ip_proto::UDP,
        payload_len: u.buffer_len(),
        ttl: 64,
        dscp_ecn: 0,
        ident: 0,
        dont_frag: true,
    };
    let mut v = vec![0u8; ip.buffer_len()];
    ip.emit(&mut ipv4::Packet::new_unchecked(&mut v[..]));
    let mut up = udp::Packet::new_unchecked(&mut v[ipv4::MIN_HEADER_LEN..]);
    u.emit(&mut up);
    up.payload_mut().copy_from_slice(payload.data());
    up.fill_checksum(d.src, d.to.ip());
    PacketBuf::from_slice(&v, 256, 640)
}

/// Opens a NAT-T datagram with the `wire` views: IPv4, UDP `port` -> `port`, a payload that is ESP (no non-ESP
/// marker, not a keepalive) with sequence number `seq` and an AES-GCM body (8-byte IV, 16-byte ICV, at least the
/// 2-byte trailer); returns its SPI.
fn esp_in_udp(dgram: &PacketBuf, port: u16, seq: u32) -> u32 {
    use netveil_wire::{esp, ipv4, udp, udp_encap};
    let ip = ipv4::Packet::new_checked(dgram.data()).expect("an IPv4 header");
    assert_eq!(ip.protocol(), netveil_wire::ip_proto::UDP, "UDP");
    let u = udp::Packet::new_checked(ip.payload()).expect("a UDP header");
    assert_eq!((u.src_port(), u.dst_port()), (port, port), "NAT-T ports");
    assert_eq!(
        udp_encap::classify(u.payload()),
        udp_encap::Classified::Esp,
        "ESP, not IKE (non-ESP marker) or a keepalive: {:02x?}",
        &u.payload()[..u.payload().len().min(8)]
    );
    let e = esp::Packet::new_checked(u.payload()).expect("an ESP header");
    assert_ne!(e.spi(), 0);
    assert_eq!(e.seq_no(), seq);
    assert!(
        e.payload().len() >= 8 + esp::TRAILER_LEN + 16,
        "{} bytes after the ESP header",
        e.payload().len()
    );
    e.spi()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn in_netns(f: impl FnOnce() + Send + 'static) {
    let h = std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
        let st = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .unwrap();
        assert!(st.success());
        f()
    });
    if let Err(p) = h.join() {
        std::panic::resume_unwind(p);
    }
}

fn run(encap: bool) {
    let dir = crate::runtime::state::test_dir(&format!("ike-e2e-{encap}"));
    let b = side(
        &dir.join("b"),
        &section(
            "127.0.0.2",
            "127.0.0.1",
            "10.2.0.0/16",
            "10.1.0.0/16",
            false,
            encap,
        ),
    );
    let mut a = side(
        &dir.join("a"),
        &section(
            "127.0.0.1",
            "127.0.0.2",
            "10.1.0.0/16",
            "10.2.0.0/16",
            true,
            encap,
        ),
    );
    wait_for("the CHILD_SA on both sides", || {
        a.counters.children_up.load(Relaxed) == 1 && b.counters.children_up.load(Relaxed) == 1
    });
    assert_eq!(a.counters.install_errors.load(Relaxed), 0);
    let seal = |s: &Shared, src, dst, n| {
        let mut p = packet(src, dst, n);
        let snap = s.db.load();
        let r = s
            .process_out(&snap, &mut p, s.now(), &mut FragCache::default())
            .expect("sealed");
        (p, r)
    };
    let open = |s: &Shared, mut p: PacketBuf| {
        let snap = s.db.load();
        s.process_in(&snap, &mut p, s.now(), &mut FragCache::default())
            .map(|_| u32::from_be_bytes(p.data()[28..32].try_into().unwrap()))
    };
    let (w, rec) = seal(&a.engine, [10, 1, 0, 1], [10, 2, 0, 1], 7);
    if encap {
        let TxRecord::NatT(d) = rec else {
            panic!("not UDP-encapsulated: {rec:?}")
        };
        assert_eq!(d.src, "127.0.0.1".parse::<std::net::IpAddr>().unwrap());
        assert_eq!(d.sport, 4500);
        assert_eq!(d.to, "127.0.0.2:4500".parse().unwrap());
        // The datagram as it leaves (the record's addresses and ports around the payload), opened: ESP in UDP
        // 4500 -> 4500 without the non-ESP marker, under b's inbound SPI, sequence number 1; b decrypts it to
        // packet 7 through its inbound SA and policy.
        let dgram = nat_t_datagram(d, &w);
        let spi = esp_in_udp(&dgram, 4500, 1);
        assert!(
            b.engine
                .db
                .load()
                .sad
                .lookup_inbound(netveil_ipsec::Protocol::Esp, spi)
                .is_some(),
            "SPI {spi:#x} is not one of b's inbound SAs"
        );
        assert_eq!(open(&b.engine, dgram), Ok(7), "b opens what a sealed");
        // And the other way, with a's inbound SA.
        let (w, rec) = seal(&b.engine, [10, 2, 0, 1], [10, 1, 0, 1], 8);
        let TxRecord::NatT(d) = rec else {
            panic!("b: not UDP-encapsulated: {rec:?}")
        };
        assert_eq!(d.to, "127.0.0.1:4500".parse().unwrap());
        let dgram = nat_t_datagram(d, &w);
        let spi = esp_in_udp(&dgram, 4500, 1);
        assert!(a
            .engine
            .db
            .load()
            .sad
            .lookup_inbound(netveil_ipsec::Protocol::Esp, spi)
            .is_some());
        assert_eq!(open(&a.engine, dgram), Ok(8), "and the other way");
    } else {
        assert_eq!(w.data()[9], 50, "ESP");
        assert_eq!(open(&b.engine, w), Ok(7), "b opens what a sealed");
        let (w, _) = seal(&b.engine, [10, 2, 0, 1], [10, 1, 0, 1], 8);
        assert_eq!(open(&a.engine, w), Ok(8), "and the other way");
    }
    // a stops: its IKE SA is deleted, b hears of it and removes the CHILD_SA.
    let sas = |s: &Shared| s.db.load().sad.iter().count();
    assert_eq!(sas(&b.engine), 2);
    crate::runtime::engine::Engine::stop(
        Box::new(a.running.take().unwrap()),
        &mut crate::runtime::engine::Undo::default(),
        false,
    );
    assert_eq!(sas(&a.engine), 0, "a removed its SAs at stop");
    wait_for("b removing the CHILD_SA after the DELETE", || {
        b.engine.db.load().policies.is_empty()
    });
    let mut b = b;
    crate::runtime::engine::Engine::stop(
        Box::new(b.running.take().unwrap()),
        &mut crate::runtime::engine::Undo::default(),
        false,
    );
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_drivers_negotiate_and_install_child_sas() {
    in_netns(|| run(false));
}

#[test]
fn two_drivers_over_nat_t_with_encap() {
    in_netns(|| run(true));
}

/// [`side`] as the daemon starts it: the configured children's policies installed before the loop runs.
fn side_with_policies(dir: &std::path::Path, text: &str) -> Side {
    let mut c = crate::engines::ip::config::Config::parse(&format!(
        "[interface]\nstate_dir = \"{}\"\n",
        dir.display()
    ))
    .unwrap();
    c.interface.state_dir.fresh_keys = true;
    let engine = Arc::new(Shared::new(c).unwrap());
    let v: toml::Value = toml::from_str(text).unwrap();
    let cfg = config::parse(v, std::path::Path::new("/")).unwrap();
    let locals = cfg.connections[0].local_addrs.clone();
    let ch = &cfg.connections[0].children[0];
    let start = if ch.start_action == netveil_ike::config::Action::Start {
        vec![("lab".to_string(), "net".to_string())]
    } else {
        Vec::new()
    };
    let mut installer = install::Installer::new(Arc::new(IpPort(engine.clone())));
    installer.install_traps(&cfg.connections).unwrap();
    let counters = Arc::new(driver::Counters::default());
    let d = driver::Driver {
        preinstalled: Default::default(),
        machine: endpoint::new(cfg.connections).unwrap(),
        sockets: Sockets::open(&locals, 500, 4500, None, Bind::Each).unwrap(),
        installer,
        start,
        counters: counters.clone(),
        ike_sas: Vec::new(),
        control: None,
    };
    Side {
        engine,
        running: Some(spawn(d).unwrap()),
        counters,
    }
}

/// `close_action = trap`: the peer deletes the IKE SA (it stops); the child's traffic is dropped again (the
/// configured policies stay), and once a peer answers again the first covered packet brings the child back.
/// With `close_action = none` nothing is initiated for that packet.
fn close_action(action: &str) {
    let dir = crate::runtime::state::test_dir(&format!("ike-e2e-close-{action}"));
    let conf = |me, peer, mine, theirs, start: &str| {
        section(me, peer, mine, theirs, false, false).replace(
            "start_action = \"none\"",
            &format!("start_action = \"{start}\"\nclose_action = \"{action}\""),
        )
    };
    let b_text = conf(
        "127.0.0.2",
        "127.0.0.1",
        "10.2.0.0/16",
        "10.1.0.0/16",
        "none",
    );
    let mut b = side_with_policies(&dir.join("b"), &b_text);
    let a = side_with_policies(
        &dir.join("a"),
        &conf(
            "127.0.0.1",
            "127.0.0.2",
            "10.1.0.0/16",
            "10.2.0.0/16",
            "start",
        ),
    );
    wait_for("the CHILD_SA", || {
        a.counters.children_up.load(Relaxed) == 1 && b.counters.children_up.load(Relaxed) == 1
    });
    let seal = |s: &Shared, n| {
        let mut p = packet([10, 1, 0, 1], [10, 2, 0, 1], n);
        let snap = s.db.load();
        s.process_out(&snap, &mut p, s.now(), &mut FragCache::default())
            .map(|_| ())
    };
    assert_eq!(seal(&a.engine, 1), Ok(()));
    // b stops: its DELETE reaches a, which removes the CHILD_SA; the configured policies stay.
    crate::runtime::engine::Engine::stop(
        Box::new(b.running.take().unwrap()),
        &mut crate::runtime::engine::Undo::default(),
        false,
    );
    wait_for("a removing the CHILD_SA", || {
        a.engine.db.load().sad.iter().count() == 0
    });
    assert_eq!(
        seal(&a.engine, 2),
        Err(crate::engines::ip::drop::Drop::NoSa),
        "dropped, not in clear"
    );
    // A peer again; the next covered packet (the acquire) initiates, with close_action = trap only.
    let b2 = side_with_policies(&dir.join("b2"), &b_text);
    std::thread::sleep(Duration::from_millis(300));
    let _ = seal(&a.engine, 3);
    if action == "trap" {
        wait_for("the trap bringing the child back", || {
            a.counters.children_up.load(Relaxed) == 2 && seal(&a.engine, 4).is_ok()
        });
    } else {
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(
            a.counters.children_up.load(Relaxed),
            1,
            "close_action = none: not initiated"
        );
        assert_eq!(
            seal(&a.engine, 5),
            Err(crate::engines::ip::drop::Drop::NoSa)
        );
    }
    for s in [a, b2] {
        let mut s = s;
        crate::runtime::engine::Engine::stop(
            Box::new(s.running.take().unwrap()),
            &mut crate::runtime::engine::Undo::default(),
            false,
        );
    }
    drop(b);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn close_action_trap_brings_the_child_back_on_traffic() {
    in_netns(|| close_action("trap"));
}

#[test]
fn close_action_none_leaves_the_traffic_dropped() {
    in_netns(|| close_action("none"));
}
