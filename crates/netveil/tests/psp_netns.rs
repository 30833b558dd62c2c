//! PSP end to end in network namespaces: two hosts on a veth pair, `netveil up` with a `[psp]` section in each,
//! keys exchanged over mutually authenticated TLS 1.3. Needs root and the tools of .ci/setup.

use netveil_lab::lab::{self, Family, HostPair, Lab, Mode, TwoHosts};
use serde_json::Value;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");
const CONTROL_PORT: u16 = 1001;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    assert!(
        lab::is_root(),
        "the PSP netns tests need root: sudo -E cargo test --release -p netveil --test psp_netns"
    );
    for t in ["ip", "ping", "tcpdump", "tshark", "nft"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn stat(st: &Value, k: &str) -> u64 {
    st["psp"]["stats"][k].as_u64().unwrap_or(0)
}

/// Waits until both daemons have each other's association.
fn wait_associated(hosts: &TwoHosts) {
    hosts
        .wait_psp_associated(Duration::from_secs(15))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Sends `n` UDP datagrams of varying sizes from side 0 to an echo server on side 1 (inner addresses); each must
/// come back unchanged. Returns the number echoed.
fn udp_echo(hosts: &TwoHosts, n: usize) -> usize {
    let dst = SocketAddr::new(hosts.addrs[1].inner, 6000);
    let bind_any: SocketAddr = match dst.ip() {
        IpAddr::V4(_) => "0.0.0.0:0".parse().unwrap(),
        IpAddr::V6(_) => "[::]:0".parse().unwrap(),
    };
    let server = lab::spawn_in_ns(&hosts.ns[1], move || {
        let s = UdpSocket::bind(dst).expect("bind echo");
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        let mut buf = vec![0u8; 2000];
        let mut served = 0usize;
        while let Ok((k, from)) = s.recv_from(&mut buf) {
            if &buf[..k] == b"quit" {
                break;
            }
            s.send_to(&buf[..k], from).ok();
            served += 1;
        }
        served
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let client = lab::spawn_in_ns(&hosts.ns[0], move || {
        let s = UdpSocket::bind(bind_any).expect("bind client");
        s.set_read_timeout(Some(Duration::from_millis(500))).ok();
        let mut ok = 0;
        let mut buf = vec![0u8; 2000];
        for i in 0..n {
            let len = 1 + (i * 37) % 1300;
            let msg: Vec<u8> = (0..len).map(|k| (k + i) as u8).collect();
            for _try in 0..3 {
                s.send_to(&msg, dst).ok();
                if let Ok(k) = s.recv(&mut buf) {
                    if buf[..k] == msg[..] {
                        ok += 1;
                        break;
                    }
                }
            }
        }
        s.send_to(b"quit", dst).ok();
        ok
    })
    .unwrap();
    let ok = client.join().unwrap().unwrap();
    let _ = server.join();
    ok
}

/// Sends raw UDP datagrams to side 1's PSP port from side 0's outer address.
fn inject(hosts: &TwoHosts, payloads: Vec<Vec<u8>>) {
    let from = SocketAddr::new(hosts.addrs[0].outer, 0);
    let to = SocketAddr::new(hosts.addrs[1].outer, netveil_psp::UDP_PORT);
    lab::spawn_in_ns(&hosts.ns[0], move || {
        let s = UdpSocket::bind(from).expect("bind");
        for p in &payloads {
            s.send_to(p, to).expect("send");
        }
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
}

/// The UDP payloads to port 1000 from `src` in a pcap (Ethernet, IPv4 or IPv6 without extension headers).
fn psp_payloads(pcap: &std::path::Path, src: IpAddr) -> Vec<Vec<u8>> {
    let b = std::fs::read(pcap).unwrap();
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let incl = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = &b[at + 16..at + 16 + incl];
        at += 16 + incl;
        if f.len() < 14 {
            continue;
        }
        let ip = &f[14..];
        let (proto, l4, from) = match ip.first().map(|v| v >> 4) {
            Some(4) => (
                ip[9],
                (ip[0] & 0xf) as usize * 4,
                IpAddr::from(<[u8; 4]>::try_from(&ip[12..16]).unwrap()),
            ),
            Some(6) => (
                ip[6],
                40,
                IpAddr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap()),
            ),
            _ => continue,
        };
        if from != src {
            continue;
        }
        if proto == 17 && ip.len() >= l4 + 8 && u16::from_be_bytes([ip[l4 + 2], ip[l4 + 3]]) == 1000
        {
            out.push(ip[l4 + 8..].to_vec());
        }
    }
    out
}

/// `replay_window`: `None` for the default (1024 in tunnel mode), `Some(0)` to switch netveil's check off.
fn tunnel(outer: Family, version: &str, replay_window: Option<u32>) {
    let _g = serial();
    let mut lab = Lab::new("nvp").expect("lab").with_netveil(NETVEIL);
    let pair = HostPair {
        outer,
        inner: outer,
        psp_replay_window: replay_window,
        ..HostPair::psp(version)
    };
    let hosts = TwoHosts::up(&mut lab, &pair).unwrap_or_else(|e| panic!("setup: {e}"));
    wait_associated(&hosts);
    let replay_window = replay_window.unwrap_or(1024);
    assert_eq!(
        hosts.daemon(1).status_json().unwrap()["psp"]["replay_window"].as_u64(),
        Some(u64::from(replay_window))
    );
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        panic!(
            "{what}: {e}\n--- config a ---\n{}\n--- daemon a ---\n{}\n--- daemon b ---\n{}",
            hosts.configs[0],
            hosts.daemon(0).log(),
            hosts.daemon(1).log()
        )
    };

    let mut cap = lab
        .capture(&hosts.ns[0], hosts.veth[0], "psp.pcap", 200, &[])
        .unwrap_or_else(|e| fail("tcpdump", &e));

    // Ping.
    let out = hosts
        .ping(&lab, 0, 5, "0.1")
        .unwrap_or_else(|e| fail("ping", &e));
    assert!(out.contains(" 0% packet loss"), "ping: {out}");

    // TCP, with two master-key rotations on each side while it runs.
    let gen0 = [0, 1].map(|i| {
        hosts.daemon(i).status_json().unwrap()["psp"]["generation"]
            .as_u64()
            .unwrap()
    });
    let bytes: u64 = 500 * 1024 * 1024;
    let (tx, rx) = std::sync::mpsc::channel();
    let rotations = {
        let socks = [0, 1].map(|i| lab.socket_path(["a", "b"][i]));
        std::thread::spawn(move || {
            for round in 0..2 {
                // Wait for the transfer to run (or end) before each round.
                if rx.recv_timeout(Duration::from_millis(250)).is_ok() {
                    return round;
                }
                for s in &socks {
                    let st = std::process::Command::new(NETVEIL)
                        .args(["rotate", "--socket"])
                        .arg(s)
                        .output()
                        .expect("netveil rotate");
                    assert!(st.status.success(), "netveil rotate: {st:?}");
                }
            }
            2
        })
    };
    let t = hosts
        .tcp(0, bytes)
        .unwrap_or_else(|e| fail("TCP transfer", &e));
    let _ = tx.send(());
    let rounds = rotations.join().unwrap();
    assert_eq!(t.bytes, bytes);
    assert_eq!(
        rounds, 2,
        "the transfer ended before two rotations ({:.1} s): make it longer",
        t.seconds
    );
    for (i, g0) in gen0.iter().enumerate() {
        let st = hosts.daemon(i).status_json().unwrap();
        let g = st["psp"]["generation"].as_u64().unwrap();
        assert_eq!(g, g0 + 2, "side {i}: {st}");
        // SAs from two rotations ago are gone: at most the SAs of the last two generations remain.
        for sa in st["psp"]["rx_sas"].as_array().unwrap() {
            assert!(
                sa["generation"].as_u64().unwrap() + 1 >= g,
                "stale SA kept: {st}"
            );
        }
        assert!(st["psp"]["assoc_received"].as_u64().unwrap() >= 3, "{st}");
        // Re-association lost nothing: no packet came with an SPI the receiver no longer knew.
        assert_eq!(stat(&st, "rx_auth_fail"), 0, "side {i}: {st}");
        assert_eq!(stat(&st, "rx_bad"), 0, "side {i}: {st}");
        assert_eq!(stat(&st, "rx_error"), 0, "side {i}: {st}");
        assert_eq!(stat(&st, "tx_error"), 0, "side {i}: {st}");
    }
    eprintln!(
        "PSP {version} tunnel {outer:?}: {} MiB in {:.2} s = {:.0} Mbit/s across 2 rotations per side",
        bytes >> 20,
        t.seconds,
        t.mbit_per_s()
    );

    // UDP.
    let echoed = udp_echo(&hosts, 500);
    assert_eq!(echoed, 500, "UDP echo");

    let pcap = cap.stop().unwrap();

    // The wire: PSP on UDP port 1000 between the outer addresses, plus the TLS key exchange; nothing in clear.
    let frames = lab::tshark_frames(&pcap, None, None).unwrap_or_else(|e| fail("tshark", &e));
    let outer_addrs: Vec<String> = hosts.addrs.iter().map(|h| h.outer.to_string()).collect();
    let inner_addrs: Vec<String> = hosts.addrs.iter().map(|h| h.inner.to_string()).collect();
    let link_local = |f: &lab::Frame| {
        f.protocols.ends_with(":icmpv6")
            && f.icmpv6_types
                .iter()
                .all(|t| (130..=137).contains(t) || *t == 143)
    };
    let (mut psp_frames, mut ctl_frames) = (0, 0);
    for f in frames
        .iter()
        .filter(|f| f.outer_proto.is_some() && !link_local(f))
    {
        assert!(
            outer_addrs.contains(&f.src) && outer_addrs.contains(&f.dst),
            "packet not between the outer addresses: {f:?}"
        );
        assert!(
            !f.addrs.iter().any(|a| inner_addrs.contains(a)),
            "inner address visible: {f:?}"
        );
        if f.outer_proto == Some(17) && f.udp_ports.contains(&1000) {
            assert!(!f.protocols.contains("icmp"), "clear ICMP: {f:?}");
            psp_frames += 1;
        } else if f.outer_proto == Some(6) && f.tcp_ports.contains(&CONTROL_PORT) {
            ctl_frames += 1;
        } else {
            panic!("unexpected packet on the wire: {f:?}");
        }
    }
    assert!(psp_frames > 10_000, "PSP frames: {psp_frames}");
    // The UDP source port follows the inner flow (ping, the TCP transfer and the UDP exchange differ).
    let sports: std::collections::BTreeSet<u16> = frames
        .iter()
        .filter(|f| f.outer_proto == Some(17) && f.src == outer_addrs[0])
        .flat_map(|f| f.udp_ports.iter().copied().filter(|&p| p != 1000))
        .collect();
    assert!(sports.len() >= 2, "source ports: {sports:?}");
    assert!(ctl_frames < 100, "key-exchange frames: {ctl_frames}");

    // Tampered packets and unknown SPIs are counted and dropped.
    let real = psp_payloads(&pcap, hosts.addrs[0].outer);
    assert!(!real.is_empty());
    let before = hosts.daemon(1).status_json().unwrap();
    let mut bad = Vec::new();
    // Flip one bit in the encrypted part (or the ICV) of real packets from a to b.
    for (k, p) in real
        .iter()
        .rev()
        .filter(|p| p.len() > 40)
        .take(5)
        .enumerate()
    {
        let mut q = p.clone();
        let at = q.len() - 1 - k * 7;
        q[at] ^= 0x10;
        bad.push(q);
    }
    let n_tampered = bad.len() as u64;
    // Unknown SPIs: well-formed headers with SPIs b never handed out.
    for spi in [0x0000_7777u32, 0x8000_4444, 0x7fff_ffff] {
        let mut q = vec![4u8, 1, 0, 0x01];
        q.extend_from_slice(&spi.to_be_bytes());
        q.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1]);
        q.extend_from_slice(&[0x5a; 64]);
        bad.push(q);
    }
    inject(&hosts, bad);
    std::thread::sleep(Duration::from_millis(300));
    let after = hosts.daemon(1).status_json().unwrap();
    let d = |k: &str| stat(&after, k) - stat(&before, k);
    // A tampered packet whose SPI is that of an SA since forgotten (two rotations old) counts as unknown, or, since
    // the socket filter passes only the device's SPIs, never reaches the daemon (counted by the kernel).
    // With the replay window, copies of packets already received are caught (as replays) before the ICV check.
    let kernel =
        |v: &serde_json::Value| v["drops"]["rx:socket-filter-or-full"].as_u64().unwrap_or(0);
    let filtered = kernel(&after) - kernel(&before);
    assert_eq!(
        d("rx_auth_fail") + d("rx_unknown_spi") + d("rx_replay") + filtered,
        n_tampered + 3,
        "before: {before}\nafter: {after}"
    );
    assert!(d("rx_unknown_spi") + filtered >= 3, "{after}");
    if replay_window == 0 {
        assert!(d("rx_auth_fail") >= 1, "{after}");
    }
    assert_eq!(d("rx_packets"), 0, "a bad packet was accepted: {after}");

    // A replayed packet (the latest real one, untouched): PSP itself accepts it (it leaves replay protection to
    // TCP); with netveil's IV replay window it is dropped and counted.
    let before = hosts.daemon(1).status_json().unwrap();
    inject(&hosts, vec![real.last().unwrap().clone()]);
    std::thread::sleep(Duration::from_millis(300));
    let after = hosts.daemon(1).status_json().unwrap();
    let d = |k: &str| stat(&after, k) - stat(&before, k);
    if replay_window > 0 {
        assert_eq!((d("rx_replay"), d("rx_packets")), (1, 0), "{after}");
    } else {
        assert_eq!((d("rx_replay"), d("rx_packets")), (0, 1), "{after}");
    }

    let text = hosts.daemon(1).status_text().unwrap();
    assert!(
        text.contains("PSP tunnel") && text.contains("auth-fail"),
        "{text}"
    );

    // Still working after all that.
    let out = hosts
        .ping(&lab, 1, 3, "0.1")
        .unwrap_or_else(|e| fail("ping", &e));
    assert!(out.contains(" 0% packet loss"), "ping: {out}");
}

#[test]
fn psp_tunnel_v4_gcm128_ping_tcp_udp_rotations_tamper() {
    tunnel(Family::V4, "aes-gcm-128", Some(0));
}

#[test]
fn psp_tunnel_v6_gcm256_replay_window_ping_tcp_udp_rotations_tamper() {
    // The default: netveil's replay window is on in tunnel mode.
    tunnel(Family::V6, "aes-gcm-256", None);
}

/// Transport mode: TCP and UDP between the hosts' own addresses, carried as PSP transport packets.
#[test]
fn psp_transport_v4_tcp_udp() {
    let _g = serial();
    let mut lab = Lab::new("nvp").expect("lab").with_netveil(NETVEIL);
    let pair = HostPair {
        mode: Mode::Transport,
        psp_rotate_seconds: 1,
        ..HostPair::psp("aes-gcm-128")
    };
    let hosts = TwoHosts::up(&mut lab, &pair).unwrap_or_else(|e| panic!("setup: {e}"));
    wait_associated(&hosts);
    let mut cap = lab
        .capture(&hosts.ns[0], hosts.veth[0], "t.pcap", 200, &[])
        .unwrap();
    let out = hosts.ping(&lab, 0, 3, "0.1").unwrap();
    assert!(out.contains(" 0% packet loss"), "ping: {out}");
    let t = hosts.tcp(0, 50 * 1024 * 1024).unwrap();
    assert_eq!(t.bytes, 50 * 1024 * 1024);
    assert_eq!(udp_echo(&hosts, 200), 200);
    let pcap = cap.stop().unwrap();
    let frames = lab::tshark_frames(&pcap, None, None).unwrap();
    for f in frames.iter().filter(|f| f.outer_proto.is_some()) {
        let ok = (f.outer_proto == Some(17) && f.udp_ports.contains(&1000))
            || (f.outer_proto == Some(6) && f.tcp_ports.contains(&CONTROL_PORT));
        assert!(ok, "unexpected packet on the wire: {f:?}");
    }
    let st = hosts.daemon(1).status_json().unwrap();
    assert!(stat(&st, "rx_packets") > 1000, "{st}");
    assert_eq!(st["psp"]["mode"], "transport");
    // rotate_seconds = 1: the timer rotates and re-associates; traffic keeps flowing.
    std::thread::sleep(Duration::from_millis(2500));
    let st = hosts.daemon(1).status_json().unwrap();
    assert!(st["psp"]["generation"].as_u64().unwrap() >= 2, "{st}");
    assert!(st["psp"]["assoc_received"].as_u64().unwrap() >= 3, "{st}");
    assert_eq!(udp_echo(&hosts, 50), 50);
    assert_eq!(stat(&st, "rx_bad") + stat(&st, "rx_auth_fail"), 0, "{st}");
    eprintln!("PSP transport: {:.0} Mbit/s", t.mbit_per_s());
}

fn ns_state(lab: &Lab, ns: &str) -> String {
    let run = |a: &[&str]| lab.exec_ok(ns, a).unwrap_or_default();
    run(&["ip", "-o", "link", "show"])
        + &run(&["ip", "-4", "rule", "show"])
        + &run(&["nft", "list", "ruleset"])
}

/// Bad PSP settings are refused with exit code 2 naming the key, before anything is changed.
#[test]
fn psp_bad_config_names_the_key_and_changes_nothing() {
    let _g = serial();
    let mut lab = Lab::new("nvp").expect("lab").with_netveil(NETVEIL);
    let ns = lab.add_ns("a").unwrap();
    let before = ns_state(&lab, &ns);
    let sock = lab.socket_path("a");
    let sock_b = lab.socket_path("b");
    let good = HostPair::psp("aes-gcm-128")
        .configs([&sock, &sock_b])
        .unwrap()[0]
        .clone();
    let d = lab.dir().display().to_string();
    let cases: Vec<(String, &str)> = vec![
        (
            good.replace("a.crt\"\nkey", "nothere.crt\"\nkey"),
            "psp.cert",
        ),
        (
            good.replace(
                &format!("peer_ca = \"{d}/b.crt\""),
                &format!("peer_ca = \"{d}/b.key\""),
            ),
            "psp.peer_ca",
        ),
        (
            good.replace(
                &format!("key = \"{d}/a.key\""),
                &format!("key = \"{d}/b.key\""),
            ),
            "psp.key",
        ),
        (
            good.replace("version = \"aes-gcm-128\"", "version = \"aes-gcm-512\""),
            "psp.version",
        ),
        (
            good.replace("peer_name = \"b\"", "peer_name = \"not a name\""),
            "psp.peer_name",
        ),
        (
            good.replace("mode = \"tunnel\"", "mode = \"tunnel\"\nreplay_window = 8"),
            "psp.replay_window",
        ),
        (good.replace("[psp]", "[pspx]"), "pspx"),
        (
            good[..good.find("[psp]").unwrap()].to_string()
                + "\n[[policy]]\ndirection = \"out\"\naction = \"protect\"\nprotocol = \"psp\"\n",
            "policy[0].protocol",
        ),
    ];
    let path = lab.dir().join("bad.toml");
    for (text, key) in cases {
        assert_ne!(text, good, "{key}: the case did not change the config");
        std::fs::write(&path, &text).unwrap();
        let out = lab
            .exec(&ns, &[NETVEIL, "up", "-c", path.to_str().unwrap()])
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{key}: {err}");
        assert!(err.contains(key), "{key}: {err}");
        assert_eq!(ns_state(&lab, &ns), before, "{key}: namespace changed");
        assert!(!sock.exists());
    }
}

/// A peer whose certificate the other side does not trust never gets (or gives) keys: no association, and the
/// protected traffic is dropped (counted), not sent in clear.
#[test]
fn psp_untrusted_peer_never_associates() {
    let _g = serial();
    let mut lab = Lab::new("nvp").expect("lab").with_netveil(NETVEIL);
    let pair = HostPair::psp("aes-gcm-128");
    let mut hosts = TwoHosts::topology(&mut lab, &pair).unwrap();
    // "a" trusts a third party's certificate instead of b's.
    netveil_daemon::drivers::psp_kx::keygen("c", lab.dir()).unwrap();
    let d = lab.dir().display().to_string();
    hosts.configs[0] = hosts.configs[0].replace(
        &format!("peer_ca = \"{d}/b.crt\""),
        &format!("peer_ca = \"{d}/c.crt\""),
    );
    hosts.start(&lab).unwrap();
    assert!(hosts.wait_psp_associated(Duration::from_secs(4)).is_err());
    let mut cap = lab
        .capture(&hosts.ns[0], hosts.veth[0], "u.pcap", 200, &[])
        .unwrap();
    let out = lab
        .exec(
            &hosts.ns[0],
            &[
                "ping",
                "-n",
                "-c",
                "3",
                "-i",
                "0.2",
                "-W",
                "1",
                &hosts.addrs[1].inner.to_string(),
            ],
        )
        .unwrap();
    assert!(!out.status.success(), "ping must fail without keys");
    let pcap = cap.stop().unwrap();
    for i in 0..2 {
        let st = hosts.daemon(i).status_json().unwrap();
        assert_eq!(st["psp"]["tx_spi"], "0x00000000", "{st}");
        assert_eq!(st["psp"]["assoc_received"], 0, "{st}");
    }
    let st = hosts.daemon(0).status_json().unwrap();
    assert!(stat(&st, "tx_no_sa") >= 3, "{st}");
    assert!(st["drops"]["tx:no-sa"].as_u64().unwrap_or(0) >= 3, "{st}");
    let frames = lab::tshark_frames(&pcap, None, None).unwrap();
    assert!(
        frames
            .iter()
            .all(|f| !f.protocols.contains("icmp") && !f.udp_ports.contains(&1000)),
        "nothing but the failing handshakes may be on the wire: {frames:?}"
    );
    let log = hosts.daemon(0).log() + &hosts.daemon(1).log();
    assert!(log.contains("PSP key exchange"), "{log}");
}

/// Certificates from a CA (not `netveil keygen`): each side trusts the CA and checks the peer's name; a host with
/// a valid certificate from the same CA but another name is refused.
#[test]
fn psp_ca_signed_certificates_and_the_peer_name_is_checked() {
    let _g = serial();
    let mut lab = Lab::new("nvp").expect("lab").with_netveil(NETVEIL);
    let dir = lab.dir().to_path_buf();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "netveil test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.crt"), ca_cert.pem()).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    // a, b, and "mallory" whose certificate is also from the CA.
    for (file, name) in [("a", "a"), ("b", "b"), ("m", "mallory")] {
        let k = rcgen::KeyPair::generate().unwrap();
        let c = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&k, &issuer)
            .unwrap();
        std::fs::write(dir.join(format!("{file}.crt")), c.pem()).unwrap();
        // Root's only, as the daemon requires of a key file (netveil keygen writes them so).
        let key = dir.join(format!("{file}.key"));
        std::fs::write(&key, k.serialize_pem()).unwrap();
        let private = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600);
        std::fs::set_permissions(&key, private).unwrap();
    }
    let d = dir.display().to_string();
    let pair = HostPair::psp("aes-gcm-128");
    let mut hosts = TwoHosts::topology(&mut lab, &pair).unwrap();
    for c in hosts.configs.iter_mut() {
        for peer in ["a", "b"] {
            *c = c.replace(
                &format!("peer_ca = \"{d}/{peer}.crt\""),
                &format!("peer_ca = \"{d}/ca.crt\""),
            );
        }
        assert!(c.contains("ca.crt"), "{c}");
    }
    let good = hosts.configs.clone();
    // b presents mallory's certificate: a (client, checks the server name) refuses it.
    hosts.configs[1] = good[1]
        .replace(&format!("{d}/b.crt"), &format!("{d}/m.crt"))
        .replace(&format!("{d}/b.key"), &format!("{d}/m.key"));
    hosts.start(&lab).unwrap();
    assert!(hosts.wait_psp_associated(Duration::from_secs(4)).is_err());
    for mut dmn in hosts.daemons.drain(..) {
        dmn.stop();
    }
    // a presents mallory's certificate: b (server, checks the client certificate's names) refuses it.
    hosts.configs[0] = good[0]
        .replace(&format!("{d}/a.crt"), &format!("{d}/m.crt"))
        .replace(&format!("{d}/a.key"), &format!("{d}/m.key"));
    hosts.configs[1] = good[1].clone();
    hosts.start(&lab).unwrap();
    assert!(hosts.wait_psp_associated(Duration::from_secs(4)).is_err());
    let log = hosts.daemon(1).log();
    assert!(log.contains("not for a"), "{log}");
    for mut dmn in hosts.daemons.drain(..) {
        dmn.stop();
    }
    // The right certificates associate, and traffic flows.
    hosts.configs = good;
    hosts.start(&lab).unwrap();
    wait_associated(&hosts);
    let out = hosts.ping(&lab, 0, 3, "0.1").unwrap();
    assert!(out.contains(" 0% packet loss"), "ping: {out}");
}

/// `netveil demo --psp`: the whole walk-through (association, ping, TCP, eavesdropper, two rotations) succeeds.
#[test]
fn psp_demo_runs() {
    let _g = serial();
    let out = std::process::Command::new(NETVEIL)
        .args(["demo", "--psp", "--megabytes", "10"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{err}");
    assert!(
        text.contains("after rotation 2: 3 packets transmitted, 3 received"),
        "{text}"
    );
    assert!(text.contains("All steps succeeded"), "{text}");
}

/// A peer that restarts (new master keys, new SPIs) is re-associated when it comes back: the survivor reconnects
/// or accepts again, installs the new transmit SA, and traffic flows again in both directions.
#[test]
fn psp_peer_restart_reassociates() {
    let _g = serial();
    let mut lab = Lab::new("nvp").expect("lab").with_netveil(NETVEIL);
    let hosts_pair = HostPair::psp("aes-gcm-128");
    let mut hosts = TwoHosts::up(&mut lab, &hosts_pair).unwrap();
    wait_associated(&hosts);
    let out = hosts.ping(&lab, 0, 2, "0.1").unwrap();
    assert!(out.contains(" 0% packet loss"), "ping: {out}");
    // Restart each side in turn: b (the responder), then a (the initiator).
    for side in [1usize, 0] {
        let name = ["a", "b"][side];
        let received = |h: &TwoHosts| {
            h.daemon(1 - side)
                .status_json()
                .ok()
                .and_then(|s| s["psp"]["assoc_received"].as_u64())
                .unwrap_or(0)
        };
        let before = received(&hosts);
        hosts.daemons[side].stop();
        let d = lab
            .start_daemon(&hosts.ns[side], name, &hosts.configs[side])
            .unwrap();
        hosts.daemons[side] = d;
        // The restarted device counts its SPIs from 1 again, so the survivor's old transmit SPI may equal the new
        // receive SPI before the new key arrived: wait for the survivor to receive the new association first.
        let t = std::time::Instant::now();
        while received(&hosts) <= before {
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "the survivor got no association after restarting {name}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        wait_associated(&hosts);
        for from in [0, 1] {
            let out = hosts.ping(&lab, from, 2, "0.1").unwrap();
            assert!(
                out.contains(" 0% packet loss"),
                "after restarting {name}: {out}"
            );
        }
        let survivor = hosts.daemon(1 - side).status_json().unwrap();
        assert!(
            survivor["psp"]["assoc_received"].as_u64().unwrap() >= 2,
            "{survivor}"
        );
        // The survivor keeps at most the two latest SAs it handed out.
        assert!(
            survivor["psp"]["rx_sas"].as_array().unwrap().len() <= 2,
            "{survivor}"
        );
    }
}

/// Path MTU through PSP (tunnel mode, interface MTU 1,500 over a 1,500-byte link): a packet that encapsulated would
/// not fit is not, and its sender is told the size that fits, 1,440 (1,500 less the outer IPv4 header, UDP, the
/// PSP header and the ICV): TCP at the interface's MTU completes in packets that fit (before, the kernel fragmented
/// each full-size datagram), and ping shows the size.
#[test]
fn psp_packets_too_big_for_the_path_teach_their_sender_the_size_that_fits() {
    let _g = serial();
    let mut lab = Lab::new("nvp").expect("lab").with_netveil(NETVEIL);
    let pair = HostPair {
        mtu: 1500,
        ..HostPair::psp("aes-gcm-128")
    };
    let hosts = TwoHosts::up(&mut lab, &pair).unwrap_or_else(|e| panic!("setup: {e}"));
    wait_associated(&hosts);
    let drops = |d: usize, name: &str| {
        hosts.daemon(d).status_json().unwrap()["drops"][name]
            .as_u64()
            .unwrap_or(0)
    };
    let t = hosts.tcp(0, 20 * 1024 * 1024).unwrap();
    assert_eq!(t.bytes, 20 * 1024 * 1024);
    assert!(drops(0, "tx:too-big-for-path") >= 1);
    let dst = hosts.addrs[0].inner.to_string();
    let o = lab
        .exec(
            &hosts.ns[1],
            &[
                "ping", "-n", "-c", "2", "-i", "0.2", "-W", "1", "-M", "do", "-s", "1472", &dst,
            ],
        )
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Frag needed and DF set (mtu = 1440)"),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(drops(1, "tx:too-big-for-path"), 1);
    assert_eq!(drops(0, "tx:send-refused") + drops(1, "tx:send-refused"), 0);
    let st = hosts.daemon(1).status_json().unwrap();
    assert_eq!(stat(&st, "rx_bad") + stat(&st, "rx_auth_fail"), 0, "{st}");
}
