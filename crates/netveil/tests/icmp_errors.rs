//! ICMP errors about protected traffic never carry its plaintext in clear (RFC 4301 section 6.2). A host's "port
//! unreachable" for a datagram it received protected quotes the *decrypted* datagram, and so does the error a
//! firewall's REJECT sends about a TCP segment; a rule or policy that selects UDP or TCP by port says nothing of
//! ICMP, so such an error left in clear before.
//!
//! PILSC between two namespaces, with rules that protect a UDP port and a TCP port and none for ICMP: datagrams with
//! a unique marker to closed ports in both directions (the responder's port; a reply to the initiator's closed
//! ephemeral port), a closed TCP port's RST, and TCP segments with markers rejected with ICMP both ways. A capture on
//! the wire holds no byte of any marker and no ICMP error in clear; every error is sealed and arrives (the sender's
//! socket sees ECONNREFUSED, the receiver's kernel counts it). Clear errors forged on the wire that quote a
//! protected flow, from the peer's address and from another, are dropped and counted; one about an unprotected flow
//! is delivered. The same for the IP engine with a port-selective policy: ESP in transport mode (the rest
//! bypassed), ESP in tunnel mode (the rest discarded) and PSP in transport mode (the rest bypassed).
//!
//! Needs root, iptables, tcpdump and python3.

use netveil_lab::demo_pilsc::{inject_frame, pilsc_config, two_hosts};
use netveil_lab::lab::{self, HostPair, Lab, Mode, TwoHosts};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");
const ADDR: [&str; 2] = ["10.78.0.1", "10.78.0.2"];
/// Not a peer: a router's, or a forger's.
const STRANGER: [u8; 4] = [10, 78, 0, 99];
const UDP_PORT: u16 = 5001;
const TCP_PORT: u16 = 5002;
/// No rule covers it.
const OPEN_PORT: u16 = 6000;
/// How long anything awaited may take.
const DEADLINE: Duration = Duration::from_secs(8);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    assert!(
        lab::is_root(),
        "the namespace tests need root: run them as root, e.g. sudo -E cargo test -p netveil --test icmp_errors"
    );
    for t in ["ip", "tcpdump", "iptables", "python3"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Polls `f` every 20 ms until it holds or [`DEADLINE`] passes; whether it held.
fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    loop {
        if f() {
            return true;
        }
        if t.elapsed() > DEADLINE {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn no_rate_limit(lab: &Lab, ns: &str) {
    // The kernel sends at most one error per second and peer after a burst of a few: the test counts on each.
    lab.exec_ok(ns, &["sysctl", "-qw", "net.ipv4.icmp_ratelimit=0"])
        .unwrap();
}

fn is_refused(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::ConnectionRefused
}

/// In `ns`, a UDP socket bound to `bind` and connected to `dst` sends `marker` until it reports ECONNREFUSED (the
/// port-unreachable error arrived and the kernel matched it to the socket) or [`DEADLINE`] passes.
fn refused(lab: &Lab, ns: &str, bind: SocketAddr, dst: SocketAddr, marker: &'static [u8]) -> bool {
    lab.in_ns(ns, move || {
        let s = UdpSocket::bind(bind).unwrap();
        s.connect(dst).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let t = Instant::now();
        let mut buf = [0u8; 64];
        while t.elapsed() < DEADLINE {
            if let Err(e) = s.send(marker) {
                if is_refused(&e) {
                    return true;
                }
            }
            if let Err(e) = s.recv(&mut buf) {
                if is_refused(&e) {
                    return true;
                }
            }
        }
        false
    })
    .unwrap()
}

/// A UDP port of `ip` in `ns` that nothing listens on (an ephemeral port, bound and let go).
fn closed_port(lab: &Lab, ns: &str, ip: IpAddr) -> u16 {
    lab.in_ns(ns, move || {
        UdpSocket::bind((ip, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    })
    .unwrap()
}

/// The destination-unreachable errors `ns`'s kernel has received (`Icmp: InDestUnreachs`).
fn in_unreachables(lab: &Lab, ns: &str) -> u64 {
    let t = lab.exec_ok(ns, &["cat", "/proc/net/snmp"]).unwrap();
    let mut icmp = t.lines().filter(|l| l.starts_with("Icmp:"));
    let (names, values) = (icmp.next().unwrap(), icmp.next().unwrap());
    let i = names
        .split_whitespace()
        .position(|n| n == "InDestUnreachs")
        .unwrap();
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

/// Per IPv4 packet of a capture: its protocol and whether it carries option 130 (its own header's, read from the
/// bytes: tshark would show the fields of the header an ICMP error quotes too).
fn packets(path: &Path) -> Vec<(u8, bool)> {
    let p = netveil_pcap::read_file(path).unwrap();
    p.records
        .iter()
        .filter_map(|r| {
            let ip = netveil_pcap::split_frame(p.link, &r.data)?.ip;
            let h = netveil_wire::ipv4::Packet::new_checked(ip).ok()?;
            let sealed = h.options_iter().any(|o| o.is_ok_and(|o| o.kind == 130));
            Some((h.protocol(), sealed))
        })
        .collect()
}

/// Whether any of `markers` shows anywhere in the capture's bytes.
fn shows(path: &Path, markers: &[&[u8]]) -> Option<String> {
    let bytes = std::fs::read(path).unwrap();
    markers
        .iter()
        .find(|m| bytes.windows(m.len()).any(|w| w == **m))
        .map(|m| String::from_utf8_lossy(m).to_string())
}

fn ip(i: usize) -> IpAddr {
    IpAddr::V4(ADDR[i].parse::<Ipv4Addr>().unwrap())
}

/// Side `side`'s rules: UDP 5001 and TCP 5002 protected (side 1 serves them), nothing about ICMP.
fn rules(side: usize) -> String {
    let peer = ADDR[1 - side];
    let mode = if side == 1 { "Server" } else { "Client" };
    format!(
        "Rule = 1; Security = true; IP = {peer}; Protocol = UDP; Port = {UDP_PORT}; Applmode = {mode};\n\
         Encryption = ChaCha20; Key = 0x{};\n\
         Rule = 2; Security = true; IP = {peer}; Protocol = TCP; Port = {TCP_PORT}; Applmode = {mode};\n\
         Encryption = AES-128; Key = 0x{};\n",
        "5c".repeat(32),
        "3a".repeat(16),
    )
}

fn pilsc(d: &lab::Daemon) -> Value {
    d.ask("status").unwrap()["engines"]["pilsc"].clone()
}

fn drop_count(d: &lab::Daemon, name: &str) -> u64 {
    pilsc(d)["drops"][name].as_u64().unwrap()
}

/// The MAC address of `iface` in `ns`.
fn mac(lab: &Lab, ns: &str, iface: &str) -> [u8; 6] {
    let out = lab
        .exec_ok(ns, &["ip", "-j", "link", "show", "dev", iface])
        .unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    let s = v[0]["address"].as_str().unwrap();
    let b: Vec<u8> = s
        .split(':')
        .map(|x| u8::from_str_radix(x, 16).unwrap())
        .collect();
    b.try_into().unwrap()
}

/// An Ethernet frame `from` -> `to` holding a clear ICMP port unreachable `src` -> `dst` that quotes a UDP datagram
/// `qsrc:sport` -> `qdst:dport` carrying `data`: what a forger (or a router) puts on the wire.
#[allow(clippy::too_many_arguments)]
fn forged_error(
    from: [u8; 6],
    to: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    (qsrc, sport): ([u8; 4], u16),
    (qdst, dport): ([u8; 4], u16),
    data: &[u8],
) -> Vec<u8> {
    use netveil_wire::{icmpv4, ip_proto, ipv4};
    let ip4 = |s: [u8; 4], d: [u8; 4], proto: u8, payload: &[u8]| {
        let mut p = vec![0u8; ipv4::MIN_HEADER_LEN];
        ipv4::Repr {
            src: s.into(),
            dst: d.into(),
            protocol: proto,
            payload_len: payload.len(),
            ttl: 64,
            dscp_ecn: 0,
            ident: 7,
            dont_frag: false,
        }
        .emit(&mut ipv4::Packet::new_unchecked(&mut p[..]));
        p.extend_from_slice(payload);
        p
    };
    let mut udp = [sport.to_be_bytes(), dport.to_be_bytes()].concat();
    udp.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(data);
    let quoted = ip4(qsrc, qdst, ip_proto::UDP, &udp);
    let mut m = vec![0u8; icmpv4::HEADER_LEN + quoted.len()];
    icmpv4::Repr {
        msg_type: icmpv4::msg_type::DST_UNREACHABLE,
        msg_code: 3,
        rest_of_header: [0; 4],
        payload: &quoted,
        family: std::marker::PhantomData,
    }
    .emit(&mut icmpv4::Packet::new_unchecked(&mut m[..]));
    let mut f = to.to_vec();
    f.extend_from_slice(&from);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&ip4(src, dst, ip_proto::ICMP, &m));
    f
}

/// A UDP socket in `ns` bound to `bind` and connected to `dst`, watched for a pending error (an ICMP error the
/// kernel matched to it): the thread answers whether one came, when it came or when told to stop.
struct Watched {
    stop: mpsc::Sender<()>,
    done: std::thread::JoinHandle<netveil_lab::Result<bool>>,
}

fn watched(ns: &str, bind: SocketAddr, dst: SocketAddr) -> Watched {
    let (stop, stop_rx) = mpsc::channel();
    let (ready_tx, ready) = mpsc::channel();
    let done = lab::spawn_in_ns(ns, move || {
        let s = UdpSocket::bind(bind).unwrap();
        s.connect(dst).unwrap();
        ready_tx.send(()).unwrap();
        let t = Instant::now();
        while t.elapsed() < DEADLINE {
            if let Ok(Some(e)) = s.take_error() {
                return is_refused(&e);
            }
            if stop_rx.recv_timeout(Duration::from_millis(20)).is_ok() {
                return matches!(s.take_error(), Ok(Some(e)) if is_refused(&e));
            }
        }
        false
    })
    .unwrap();
    ready.recv().unwrap();
    Watched { stop, done }
}

impl Watched {
    /// Whether an error reached the socket (now, without waiting).
    fn stop_now(self) -> bool {
        let _ = self.stop.send(());
        self.done.join().unwrap().unwrap()
    }
    /// Whether an error reaches the socket within the deadline.
    fn wait(self) -> bool {
        self.done.join().unwrap().unwrap()
    }
}

/// PILSC: every ICMP error about a protected UDP datagram or TCP segment, in both directions, leaves sealed and
/// arrives; the wire shows none in clear and no byte of what they quote. Clear errors quoting a protected flow are
/// dropped whoever sends them; one about an unprotected flow is delivered.
#[test]
fn pilsc_icmp_errors_about_protected_udp_and_tcp_leave_sealed_both_ways() {
    let _g = serial();
    let (lab, ns) = two_hosts("nvie", Path::new(NETVEIL), ADDR).unwrap();
    for n in &ns {
        no_rate_limit(&lab, n);
    }
    let d: Vec<lab::Daemon> = (0..2)
        .map(|s| {
            let cfg = pilsc_config(&lab, s, &rules(s), "authenticated", 40).unwrap();
            lab.start_daemon(&ns[s], &format!("p{s}"), &cfg).unwrap()
        })
        .collect();
    let logs = || format!("--- a ---\n{}\n--- b ---\n{}", d[0].log(), d[1].log());
    let (a, b) = (ip(0), ip(1));
    const UDP_TO_B: &[u8] = b"TOP-SECRET-PAYLOAD card 4111 udp to b's closed port";
    const UDP_TO_A: &[u8] = b"TOP-SECRET-PAYLOAD card 4111 udp to a's closed ephemeral port";
    const TCP_TO_B: &[u8] = b"TOP-SECRET-PAYLOAD card 4111 tcp to b, rejected ";
    const TCP_TO_A: &[u8] = b"TOP-SECRET-PAYLOAD card 4111 tcp to a, rejected ";

    // What a phase's capture must show: no marker; every ICMP packet sealed, and at least one.
    let on_the_wire = |name: &str, path: &Path| {
        let markers = [UDP_TO_B, UDP_TO_A, TCP_TO_B, TCP_TO_A];
        assert_eq!(shows(path, &markers), None, "{name}: plaintext on the wire");
        let pk = packets(path);
        let clear = pk.iter().filter(|p| p.0 == 1 && !p.1).count();
        let sealed = pk.iter().filter(|p| p.0 == 1 && p.1).count();
        assert_eq!(clear, 0, "{name}: ICMP in clear: {pk:?}");
        assert!(sealed >= 1, "{name}: no sealed ICMP error: {pk:?}");
    };

    // UDP, to B's closed port: B's kernel answers port unreachable, quoting the decrypted datagram.
    let mut cap = lab
        .capture(&ns[1], "veth-b", "udp-to-b.pcap", 2000, &["ip"])
        .unwrap();
    let b_port = SocketAddr::new(b, UDP_PORT);
    let got = refused(&lab, &ns[0], SocketAddr::new(a, 0), b_port, UDP_TO_B);
    on_the_wire("udp to b", &cap.stop().unwrap());
    assert!(got, "no port unreachable reached A\n{}", logs());
    // UDP, B's reply from its port to A's closed ephemeral port: A's kernel answers.
    let mut cap = lab
        .capture(&ns[1], "veth-b", "udp-to-a.pcap", 2000, &["ip"])
        .unwrap();
    let a_eph = SocketAddr::new(a, closed_port(&lab, &ns[0], a));
    let got = refused(&lab, &ns[1], b_port, a_eph, UDP_TO_A);
    on_the_wire("udp to a", &cap.stop().unwrap());
    assert!(got, "no port unreachable reached B\n{}", logs());

    // TCP: the closed port's RST (the TCP rule covers it), then segments each side's firewall rejects with ICMP
    // (the SYN and ACKs pass: only segments of 200 bytes or more are rejected).
    let mut cap = lab
        .capture(&ns[1], "veth-b", "tcp.pcap", 2000, &["ip"])
        .unwrap();
    let b_tcp = SocketAddr::new(b, TCP_PORT);
    let rst = lab
        .in_ns(&ns[0], move || TcpStream::connect_timeout(&b_tcp, DEADLINE))
        .unwrap();
    assert!(
        matches!(&rst, Err(e) if is_refused(e)),
        "{rst:?}\n{}",
        logs()
    );
    let reject = |side: usize, port_match: &str| {
        let p = TCP_PORT.to_string();
        lab.exec_ok(
            &ns[side],
            &[
                "iptables",
                "-w",
                "-I",
                "INPUT",
                "-p",
                "tcp",
                port_match,
                &p,
                "-m",
                "length",
                "--length",
                "200:65535",
                "-j",
                "REJECT",
                "--reject-with",
                "icmp-port-unreachable",
            ],
        )
        .unwrap();
    };
    reject(1, "--dport");
    reject(0, "--sport");
    let before = [in_unreachables(&lab, &ns[0]), in_unreachables(&lab, &ns[1])];
    let listener = lab
        .in_ns(&ns[1], move || TcpListener::bind(b_tcp).unwrap())
        .unwrap();
    let (hold_b, held_b) = mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        std::io::Write::write_all(&mut s, &TCP_TO_A.repeat(6)).unwrap();
        let _ = held_b.recv_timeout(DEADLINE);
    });
    let (hold_a, held_a) = mpsc::channel::<()>();
    let client = lab::spawn_in_ns(&ns[0], move || {
        let mut s = TcpStream::connect_timeout(&b_tcp, DEADLINE).unwrap();
        std::io::Write::write_all(&mut s, &TCP_TO_B.repeat(6)).unwrap();
        let _ = held_a.recv_timeout(DEADLINE);
    })
    .unwrap();
    let both = wait_until(|| {
        in_unreachables(&lab, &ns[0]) > before[0] && in_unreachables(&lab, &ns[1]) > before[1]
    });
    let _ = (hold_a.send(()), hold_b.send(()));
    client.join().unwrap().unwrap();
    server.join().unwrap();
    on_the_wire("tcp", &cap.stop().unwrap());
    assert!(
        both,
        "the rejected segments' errors did not both arrive\n{}",
        logs()
    );
    for s in &d {
        let st = pilsc(s);
        let drops: u64 = st["drops"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(drops, 0, "{st}");
    }

    // Clear errors forged on A's port: from A's address and from a stranger's, about B's protected datagrams to
    // A's closed port: dropped (B's socket sees nothing); about B's unprotected port: delivered.
    let (ma, mb) = (mac(&lab, &ns[0], "veth-a"), mac(&lab, &ns[1], "veth-b"));
    let (ao, bo) = (
        ADDR[0].parse::<Ipv4Addr>().unwrap().octets(),
        ADDR[1].parse::<Ipv4Addr>().unwrap().octets(),
    );
    let a_port = closed_port(&lab, &ns[0], a);
    let a_closed = SocketAddr::new(a, a_port);
    for (n, from) in [(1, ao), (2, STRANGER)] {
        let w = watched(&ns[1], b_port, a_closed);
        let f = forged_error(ma, mb, from, bo, (bo, UDP_PORT), (ao, a_port), UDP_TO_A);
        inject_frame(&lab, &ns[0], "veth-a", &f).unwrap();
        let counted = wait_until(|| drop_count(&d[1], "icmp_error_in_clear") == n);
        assert!(
            !w.stop_now(),
            "a clear error forged from {from:?} reached B's protected socket"
        );
        assert!(counted, "{}\n{}", pilsc(&d[1]), logs());
    }
    let w = watched(&ns[1], SocketAddr::new(b, OPEN_PORT), a_closed);
    let f = forged_error(ma, mb, ao, bo, (bo, OPEN_PORT), (ao, a_port), b"clear");
    inject_frame(&lab, &ns[0], "veth-a", &f).unwrap();
    assert!(
        w.wait(),
        "the control: a clear error about an unprotected flow was not delivered"
    );
    assert_eq!(drop_count(&d[1], "icmp_error_in_clear"), 2);
}

/// One IP-engine pair whose policies protect UDP port 5001 (side b serves it) and nothing else; the rest bypassed
/// (`bypass`) or discarded.
fn ip_engine(pair: HostPair, bypass: bool) {
    let _g = serial();
    let mut lab = Lab::new("nvii").unwrap().with_netveil(NETVEIL);
    let mut h = TwoHosts::topology(&mut lab, &pair).unwrap();
    let psp = pair.protocol == lab::Protocol::Psp;
    for s in 0..2 {
        let (me, peer) = (h.addrs[s].inner, h.addrs[1 - s].inner);
        let host = 32;
        let (n, p) = (["a", "b"][s], ["a", "b"][1 - s]);
        // Side b serves the port: its source port going out; side a's destination port.
        let (out_ports, in_ports) = if s == 1 {
            ("src_ports", "dst_ports")
        } else {
            ("dst_ports", "src_ports")
        };
        let with = |sa: String| {
            if psp {
                "protocol = \"psp\"\n".to_string()
            } else {
                format!("sas = [\"{sa}\"]\n")
            }
        };
        let base = h.configs[s]
            .split("\n[[policy]]")
            .next()
            .unwrap()
            .to_string();
        let mut t = base;
        t += &format!(
            "\n[[policy]]\nname = \"out-udp\"\ndirection = \"out\"\nsrc = \"{me}/{host}\"\ndst = \"{peer}/{host}\"\n\
             proto = \"udp\"\n{out_ports} = {UDP_PORT}\naction = \"protect\"\n{}",
            with(format!("{n}-to-{p}"))
        );
        t += &format!(
            "\n[[policy]]\nname = \"in-udp\"\ndirection = \"in\"\nsrc = \"{peer}/{host}\"\ndst = \"{me}/{host}\"\n\
             proto = \"udp\"\n{in_ports} = {UDP_PORT}\naction = \"protect\"\n{}",
            with(format!("{p}-to-{n}"))
        );
        if bypass {
            for (name, dir, src, dst) in
                [("out-rest", "out", me, peer), ("in-rest", "in", peer, me)]
            {
                t += &format!(
                    "\n[[policy]]\nname = \"{name}\"\ndirection = \"{dir}\"\nsrc = \"{src}/{host}\"\n\
                     dst = \"{dst}/{host}\"\naction = \"bypass\"\n"
                );
            }
        }
        h.configs[s] = t;
    }
    for n in &h.ns {
        no_rate_limit(&lab, n);
    }
    h.start(&lab).unwrap();
    if psp {
        h.wait_psp_associated(Duration::from_secs(15)).unwrap();
    }
    let logs = || {
        format!(
            "--- config a ---\n{}\n--- a ---\n{}\n--- b ---\n{}",
            h.configs[0],
            h.daemon(0).log(),
            h.daemon(1).log()
        )
    };
    let (a, b) = (h.addrs[0].inner, h.addrs[1].inner);
    const TO_B: &[u8] = b"TOP-SECRET-PAYLOAD card 4111 ip engine udp to b's closed port";
    const TO_A: &[u8] = b"TOP-SECRET-PAYLOAD card 4111 ip engine udp to a's closed port";
    let mut cap = lab
        .capture(&h.ns[1], h.veth[1], "ip-udp.pcap", 2000, &["ip"])
        .unwrap();
    let b_port = SocketAddr::new(b, UDP_PORT);
    let to_a = refused(&lab, &h.ns[0], SocketAddr::new(a, 0), b_port, TO_B);
    let a_eph = SocketAddr::new(a, closed_port(&lab, &h.ns[0], a));
    let to_b = refused(&lab, &h.ns[1], b_port, a_eph, TO_A);
    let path = cap.stop().unwrap();
    assert_eq!(shows(&path, &[TO_B, TO_A]), None, "plaintext on the wire");
    let pk = packets(&path);
    assert_eq!(
        pk.iter().filter(|p| p.0 == 1).count(),
        0,
        "ICMP in clear: {pk:?}"
    );
    assert!(to_a, "no port unreachable reached A\n{}", logs());
    assert!(to_b, "no port unreachable reached B\n{}", logs());
    for s in 0..2 {
        let st = h.daemon(s).ask("status").unwrap();
        assert_eq!(st["drops"]["rx:policy-mismatch"], 0, "{st}");
    }
    if bypass {
        // The control: an unprotected port's error is bypassed in clear, and the capture sees it.
        const CLEAR: &[u8] = b"CLEAR-CONTROL-unprotected-port";
        let mut cap = lab
            .capture(&h.ns[1], h.veth[1], "ip-clear.pcap", 2000, &["ip"])
            .unwrap();
        let open = SocketAddr::new(b, OPEN_PORT);
        assert!(refused(&lab, &h.ns[0], SocketAddr::new(a, 0), open, CLEAR));
        let path = cap.stop().unwrap();
        assert!(shows(&path, &[CLEAR]).is_some());
        assert!(packets(&path).iter().any(|p| p.0 == 1));
    }
}

#[test]
fn ip_engine_esp_transport_icmp_errors_about_a_port_policy_leave_sealed() {
    ip_engine(
        HostPair {
            mode: Mode::Transport,
            ..HostPair::esp("aes128gcm16")
        },
        true,
    );
}

#[test]
fn ip_engine_esp_tunnel_icmp_errors_about_a_port_policy_leave_sealed() {
    ip_engine(HostPair::esp("aes256gcm16"), false);
}

#[test]
fn ip_engine_psp_transport_icmp_errors_about_a_port_policy_leave_sealed() {
    ip_engine(
        HostPair {
            mode: Mode::Transport,
            ..HostPair::psp("aes-gcm-128")
        },
        true,
    );
}
