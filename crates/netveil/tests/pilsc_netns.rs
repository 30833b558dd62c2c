//! PILSC between two hosts (network namespaces), inside each host's own stack: the daemons take their host's
//! packets from netfilter queues and give them back sealed (option 130, payload encrypted) or opened. Rules with a
//! different algorithm per protocol (TCP AES-128, UDP ChaCha20, ICMP Blowfish) and a clear TCP port; tshark reads
//! the capture between the hosts; a daemon killed leaves its queue rules, so covered traffic stops rather than
//! passing in clear. Needs root, iptables (Debian's package) and tshark.

use netveil_lab::lab::{self, Lab};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");
const ADDR: [&str; 2] = ["10.77.0.1", "10.77.0.2"];

const TCP_PORT: u16 = 5001;
const UDP_PORT: u16 = 5002;
const CLEAR_PORT: u16 = 5003;
/// What the UDP datagrams carry: a capture of protected traffic must not show it.
const MARKER: &[u8] = b"PILSC-PLAINTEXT-MARKER";

/// Side `side`'s rule file: the peer is the other side; side 1 (B) is the server of the TCP and UDP ports.
fn rules(side: usize) -> String {
    let peer = ADDR[1 - side];
    let (mine, theirs) = ("Server", "Client");
    let mode = if side == 1 { mine } else { theirs };
    format!(
        "# PILSC rules of side {side}\n\
         Rule = 1\nSecurity = true\nIP = {peer}\nProtocol = TCP\nPort = {TCP_PORT}\nEncryption = 1\n\
         Applmode = {mode}\nKey = 0x00112233445566778899aabbccddeeff\n\n\
         Rule = 2; Security = true; IP = {peer}; Protocol = UDP; Port = {UDP_PORT}; Encryption = ChaCha20;\n\
         Applmode = {mode}; Key = 0x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f;\n\n\
         Rule = 3; Security = true; IP = {peer}; Protocol = ICMP; Encryption = 5;\n\
         Key = 0x0f0e0d0c0b0a09080706050403020100;\n\n\
         Rule = 4; Security = false; IP = {peer}; Protocol = TCP; Port = {CLEAR_PORT}; Applmode = {mode};\n"
    )
}

fn config(lab: &Lab, side: usize, mode: &str) -> String {
    let dir = lab.dir();
    let rules_path = dir.join(format!("pilsc-{side}.rules"));
    std::fs::write(&rules_path, rules(side)).unwrap();
    format!(
        "[pilsc]\nrules = \"{}\"\nmode = \"{mode}\"\nqueue = {}\ncontrol_socket = \"{}\"\nstate_dir = \"{}\"\n",
        rules_path.display(),
        10 + 2 * side,
        lab.socket_path(&format!("pl{side}")).display(),
        dir.join(format!("state-{side}")).display(),
    )
}

struct Pair {
    lab: Lab,
    ns: [String; 2],
}

fn pair(prefix: &str) -> Pair {
    assert!(lab::is_root(), "the namespace tests need root");
    for t in ["ip", "ping", "tcpdump", "tshark", "iptables"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    let mut lab = Lab::new(prefix).unwrap().with_netveil(NETVEIL);
    let a = lab.add_ns("a").unwrap();
    let b = lab.add_ns("b").unwrap();
    lab.veth(&a, "veth-a", &b, "veth-b").unwrap();
    lab.addr(&a, "veth-a", &format!("{}/24", ADDR[0])).unwrap();
    lab.addr(&b, "veth-b", &format!("{}/24", ADDR[1])).unwrap();
    Pair { lab, ns: [a, b] }
}

fn ip(i: usize) -> IpAddr {
    IpAddr::V4(ADDR[i].parse::<Ipv4Addr>().unwrap())
}

/// Starts `f` with a UDP socket bound to `dst` in namespace `ns`, and returns once the socket is bound.
fn bound_in<T: Send + 'static>(
    ns: &str,
    dst: SocketAddr,
    f: impl FnOnce(UdpSocket) -> T + Send + 'static,
) -> std::thread::JoinHandle<netveil_lab::Result<T>> {
    let (ready, bound) = std::sync::mpsc::channel();
    let h = lab::spawn_in_ns(ns, move || {
        let s = UdpSocket::bind(dst).unwrap();
        ready.send(()).unwrap();
        f(s)
    })
    .unwrap();
    bound
        .recv_timeout(Duration::from_secs(10))
        .expect("the receiver's socket bound");
    h
}

/// Sends `n` datagrams with [`MARKER`] from side 0 to side 1's UDP port and returns those that arrived intact.
fn udp(p: &Pair, n: usize) -> usize {
    let dst = SocketAddr::new(ip(1), UDP_PORT);
    let rx = bound_in(&p.ns[1], dst, move |s| {
        s.set_read_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        let mut got = 0;
        let mut buf = [0u8; 2048];
        while let Ok(len) = s.recv(&mut buf) {
            if &buf[..len] == MARKER.repeat(20).as_slice() {
                got += 1;
            }
        }
        got
    });
    p.lab
        .in_ns(&p.ns[0], move || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            for _ in 0..n {
                let _ = s.send_to(&MARKER.repeat(20), dst);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
        .unwrap();
    rx.join().unwrap().unwrap()
}

/// tshark's view of a capture (IPv4 only): per packet, its outer header's `ip.proto`, whether its first option is 130,
/// and the TCP/UDP ports it shows.
fn packets(path: &std::path::Path) -> Vec<(u8, bool, String)> {
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(path)
        .args([
            "-T",
            "fields",
            "-E",
            "separator=|",
            // The outer header's fields only: an ICMP error also shows the header it quotes (`1,17`).
            "-E",
            "occurrence=f",
            "-e",
            "ip.proto",
            "-e",
            "ip.opt.type",
            "-e",
            "tcp.dstport",
            "-e",
            "udp.dstport",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            // Every frame is an IPv4 packet: one that does not read as one is an error of the test, not a frame
            // to leave out of what is counted.
            let f: Vec<&str> = l.split('|').collect();
            let proto = f[0]
                .parse()
                .unwrap_or_else(|_| panic!("a captured frame without an IPv4 protocol: {l:?}"));
            let opt = f.get(1).is_some_and(|o| o.trim() == "130");
            (
                proto,
                opt,
                format!("{}{}", f.get(2).unwrap_or(&""), f.get(3).unwrap_or(&"")),
            )
        })
        .collect()
}

fn status(d: &lab::Daemon) -> Value {
    d.status_json().unwrap()["engines"]["pilsc"].clone()
}

#[test]
fn tcp_udp_and_icmp_are_protected_per_rule_and_a_killed_daemon_lets_nothing_covered_through() {
    let p = pair("pl");
    let mut d: Vec<lab::Daemon> = (0..2)
        .map(|s| {
            p.lab
                .start_daemon(
                    &p.ns[s],
                    &format!("pl{s}"),
                    &config(&p.lab, s, "authenticated"),
                )
                .unwrap()
        })
        .collect();
    let mut cap = p
        .lab
        .capture(&p.ns[1], "veth-b", "pilsc.pcap", 2000, &["ip"])
        .unwrap();
    // ICMP (Blowfish), TCP (AES-128, a byte-checked 2 MB transfer), UDP (ChaCha20), and the clear TCP port.
    let out = p
        .lab
        .exec_ok(
            &p.ns[0],
            &["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", ADDR[1]],
        )
        .unwrap_or_else(|e| panic!("{e}\n{}\n{}", d[0].log(), d[1].log()));
    assert!(out.contains("3 received"), "{out}");
    let t = lab::tcp_transfer(&p.ns[0], &p.ns[1], ip(1), TCP_PORT, 2 << 20)
        .unwrap_or_else(|e| panic!("{e}\n{}\n{}", d[0].log(), d[1].log()));
    assert_eq!(t.bytes, 2 << 20);
    assert_eq!(udp(&p, 20), 20, "{}\n{}", d[0].log(), d[1].log());
    let c = lab::tcp_transfer(&p.ns[0], &p.ns[1], ip(1), CLEAR_PORT, 64 << 10).unwrap();
    assert_eq!(c.bytes, 64 << 10);
    let path = cap.stop().unwrap();
    let pk = packets(&path);
    let count = |f: &dyn Fn(&(u8, bool, String)) -> bool| pk.iter().filter(|x| f(x)).count();
    // Every TCP packet of the protected port, every UDP and ICMP packet carries the option, and tshark reads no
    // port of theirs that is ours (the transport header is encrypted).
    assert_eq!(count(&|x| x.0 == 1 && !x.1), 0, "clear ICMP: {pk:?}");
    assert!(count(&|x| x.0 == 1 && x.1) >= 6, "{pk:?}");
    assert_eq!(count(&|x| x.0 == 17 && !x.1), 0, "clear UDP: {pk:?}");
    assert!(count(&|x| x.0 == 17 && x.1) >= 20, "{pk:?}");
    assert!(count(&|x| x.0 == 6 && x.1) > 500, "{pk:?}");
    assert_eq!(
        count(&|x| x.0 == 6 && !x.1 && x.2 == TCP_PORT.to_string()),
        0,
        "clear TCP on the protected port: {pk:?}"
    );
    // The clear port: in clear, without the option.
    assert!(
        count(&|x| x.0 == 6 && !x.1 && x.2 == CLEAR_PORT.to_string()) > 5,
        "{pk:?}"
    );
    let bytes = std::fs::read(&path).unwrap();
    assert!(
        !bytes.windows(MARKER.len()).any(|w| w == MARKER),
        "the UDP plaintext is on the wire"
    );
    // Status: per rule, what went out and came in; nothing dropped.
    let s = status(&d[0]);
    assert_eq!(s["integrity"], true);
    let rule = |n: u64| {
        s["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["rule"] == n)
            .unwrap()
            .clone()
    };
    assert!(rule(1)["bytes_out"].as_u64().unwrap() > 2 << 20, "{s}");
    assert!(rule(2)["packets_out"].as_u64().unwrap() >= 20, "{s}");
    assert!(rule(3)["packets_in"].as_u64().unwrap() >= 3, "{s}");
    let drops: u64 = s["drops"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(drops, 0, "{s}");

    // Killed: its queue rules stay and nobody listens, so covered traffic is dropped, never sent in clear; the
    // clear port still works.
    d[0].kill();
    let mut cap = p
        .lab
        .capture(&p.ns[1], "veth-b", "killed.pcap", 2000, &["ip"])
        .unwrap();
    let out = p
        .lab
        .exec(
            &p.ns[0],
            &["ping", "-n", "-c", "3", "-i", "0.2", "-W", "1", ADDR[1]],
        )
        .unwrap();
    assert!(
        !out.status.success(),
        "ping went through with the daemon killed"
    );
    assert_eq!(udp(&p, 5), 0);
    let path = cap.stop().unwrap();
    let pk = packets(&path);
    assert!(
        pk.iter().all(|x| x.0 != 1 && x.0 != 17),
        "covered packets left in clear with the daemon killed: {pk:?}"
    );
    // Restarted on the same state directory: its counters continue above what it sent, so side B takes it.
    d[0] = p
        .lab
        .start_daemon_with(&p.ns[0], "pl0", &config(&p.lab, 0, "authenticated"), &[])
        .unwrap();
    let out = p
        .lab
        .exec(
            &p.ns[0],
            &["ping", "-n", "-c", "30", "-i", "0.05", "-W", "1", ADDR[1]],
        )
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).to_string();
    // B, which did not restart, takes A's packets at once (A's counters continue above its mark); A refuses B's
    // replies up to its last receive reservation (at least 8: the price of A's crash), then takes them.
    assert!(
        out.contains("30 packets transmitted") && !out.contains(" 0 received"),
        "{out}"
    );
    assert_eq!(status(&d[1])["drops"]["replay"], 0);
    assert!(status(&d[0])["drops"]["replay"].as_u64().unwrap() <= 16);
    // `netveil down`: the daemon stops and its queue chains go.
    let ipt = |ns: &str, table: &str| {
        p.lab
            .exec_ok(ns, &["iptables", "-w", "-t", table, "-S"])
            .unwrap()
    };
    assert!(ipt(&p.ns[0], "mangle").contains("NVPILSC10-OUT"));
    p.lab.netveil_down(&p.ns[0], "pl0").unwrap();
    netveil_testkit::wait_until(
        Duration::from_secs(10),
        "the daemon to stop after netveil down",
        || !d[0].is_running(),
    );
    for t in ["mangle", "raw"] {
        assert!(
            !ipt(&p.ns[0], t).contains("NVPILSC"),
            "{}",
            ipt(&p.ns[0], t)
        );
    }
}

/// The first IPv4 packet of a capture that `pick` takes, with its Ethernet header.
fn frame_in(path: &std::path::Path, pick: impl Fn(&[u8]) -> bool) -> Option<Vec<u8>> {
    netveil_lab::demo_pilsc::first_frame(path, pick).unwrap()
}

/// Puts a frame on side A's port, past A's own stack (as an attacker on the wire).
fn inject(p: &Pair, frame: &[u8]) {
    netveil_lab::demo_pilsc::inject_frame(&p.lab, &p.ns[0], "veth-a", frame).unwrap();
}

/// Tampering, in each mode: a sealed UDP datagram is kept from side B (a DROP before its queue), two of its
/// ciphertext bits are flipped where the flips cancel in the UDP checksum (plaintext bit 1 of byte 0 is 0 and of
/// byte 2 is 1), and the frame is put on the wire again from side A's port (AF_PACKET, past A's own daemon). The
/// confidentiality-only mode has no integrity and delivers the changed datagram (as the docs say); the
/// authenticated mode drops it (`auth`). The same frame a second time: dropped as a replay.
#[test]
fn tampering_is_delivered_without_integrity_and_dropped_with_it() {
    for mode in ["confidential", "authenticated"] {
        let p = pair("pt");
        let d: Vec<lab::Daemon> = (0..2)
            .map(|s| {
                p.lab
                    .start_daemon(&p.ns[s], &format!("pl{s}"), &config(&p.lab, s, mode))
                    .unwrap()
            })
            .collect();
        let ol = if mode == "confidential" { 12 } else { 28 };
        let payload: Vec<u8> = b"A?B?".iter().copied().cycle().take(333).collect();
        let wire_len = (20 + ol + 8 + payload.len()).to_string();
        let drop = [
            "iptables",
            "-w",
            "-t",
            "raw",
            "-I",
            "PREROUTING",
            "1",
            "-p",
            "udp",
            "-m",
            "length",
            "--length",
            &wire_len,
            "-j",
            "DROP",
        ];
        p.lab.exec_ok(&p.ns[1], &drop).unwrap();
        let mut cap = p
            .lab
            .capture(
                &p.ns[1],
                "veth-b",
                &format!("tamper-{mode}.pcap"),
                2000,
                &["udp"],
            )
            .unwrap();
        let dst = SocketAddr::new(ip(1), UDP_PORT);
        let sent = payload.clone();
        p.lab
            .in_ns(&p.ns[0], move || {
                UdpSocket::bind("0.0.0.0:0")
                    .unwrap()
                    .send_to(&sent, dst)
                    .unwrap();
            })
            .unwrap();
        let sealed = |ip: &[u8]| ip.len() == 20 + ol + 8 + payload.len() && ip[20] == 130;
        // (tcpdump writes each packet at once: the capture shows it while it runs.)
        let frame = netveil_testkit::poll(
            Duration::from_secs(5),
            format!("{mode}: the sealed datagram in the capture"),
            || {
                netveil_lab::demo_pilsc::first_frame(&cap.path, sealed)
                    .ok()
                    .flatten()
            },
        );
        cap.stop().unwrap();
        let mut del = drop.to_vec();
        del[4] = "-D";
        del.remove(6);
        p.lab.exec_ok(&p.ns[1], &del).unwrap();
        let mut forged = frame.clone();
        let data = 14 + 20 + ol + 8;
        forged[data] ^= 0x02;
        forged[data + 2] ^= 0x02;
        let rx = bound_in(&p.ns[1], dst, move |s| {
            s.set_read_timeout(Some(Duration::from_millis(1500)))
                .unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 2048];
            while let Ok(n) = s.recv(&mut buf) {
                got.push(buf[..n].to_vec());
            }
            got
        });
        // The same frame twice, the second once B has counted the first (delivered, or dropped as forged).
        let counted = |st: &Value| {
            st["rules"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["packets_in"].as_u64().unwrap_or(0))
                .sum::<u64>()
                + st["drops"]
                    .as_object()
                    .unwrap()
                    .values()
                    .map(|v| v.as_u64().unwrap_or(0))
                    .sum::<u64>()
        };
        let before = counted(&status(&d[1]));
        for (k, f) in [&forged, &forged].into_iter().enumerate() {
            inject(&p, f);
            netveil_testkit::wait_until(
                Duration::from_secs(5),
                format!("{mode}: side B counting forged frame {}", k + 1),
                || counted(&status(&d[1])) > before + k as u64,
            );
        }
        let got = rx.join().unwrap().unwrap();
        let s = status(&d[1]);
        if mode == "confidential" {
            assert_eq!(s["integrity"], false);
            let mut expect = payload.clone();
            expect[0] ^= 0x02;
            expect[2] ^= 0x02;
            assert_eq!(got, vec![expect], "the changed datagram, once: {s}");
            assert_eq!(s["drops"]["replay"], 1, "{s}");
        } else {
            assert!(got.is_empty(), "a forged datagram was delivered: {got:?}");
            assert_eq!(s["drops"]["auth"], 2, "{s}");
        }
    }
}

/// A receiver that restarts (cleanly, then after kill -9) refuses a recording of packets it accepted before: each
/// source's receive floor is in its state directory. New packets are accepted after each restart.
#[test]
fn a_restarted_receiver_refuses_a_recording() {
    let p = pair("pr");
    let cfg: Vec<String> = (0..2).map(|s| config(&p.lab, s, "authenticated")).collect();
    let _a = p.lab.start_daemon(&p.ns[0], "pl0", &cfg[0]).unwrap();
    let mut b = p.lab.start_daemon(&p.ns[1], "pl1", &cfg[1]).unwrap();
    let mut cap = p
        .lab
        .capture(&p.ns[1], "veth-b", "recording.pcap", 2000, &["udp"])
        .unwrap();
    assert_eq!(udp(&p, 3), 3);
    let path = cap.stop().unwrap();
    let frame = frame_in(&path, |ip| ip.len() > 20 && ip[9] == 17 && ip[20] == 130).unwrap();
    let replay = |b: &lab::Daemon| {
        let dst = SocketAddr::new(ip(1), UDP_PORT);
        let rx = bound_in(&p.ns[1], dst, move |s| {
            s.set_read_timeout(Some(Duration::from_millis(800)))
                .unwrap();
            let mut buf = [0u8; 2048];
            s.recv(&mut buf).is_ok()
        });
        inject(&p, &frame);
        // The replay counted (or 0 after the deadline, which the caller's assertion reports).
        let replays = netveil_testkit::try_poll(Duration::from_secs(5), || {
            let n = status(b)["drops"]["replay"].as_u64().unwrap();
            (n > 0).then_some(n)
        })
        .unwrap_or(0);
        let delivered = rx.join().unwrap().unwrap();
        (delivered, replays)
    };
    assert_eq!(replay(&b), (false, 1), "the running receiver");
    b.stop();
    b = p
        .lab
        .start_daemon_with(&p.ns[1], "pl1", &cfg[1], &[])
        .unwrap();
    assert_eq!(replay(&b), (false, 1), "after a clean restart");
    assert_eq!(udp(&p, 2), 2, "new packets after a clean restart");
    b.kill();
    b = p
        .lab
        .start_daemon_with(&p.ns[1], "pl1", &cfg[1], &[])
        .unwrap();
    assert_eq!(replay(&b), (false, 1), "after kill -9");
    // After a crash the counters up to the last reservation are refused (the price of a crash: a block of about
    // 250 ms of the source's traffic, at least a few packets); then new ones are accepted.
    let mut ok = 0;
    for _ in 0..10 {
        ok += udp(&p, 10);
        if ok > 0 {
            break;
        }
    }
    assert!(ok > 0, "no new packet accepted after kill -9: {}", b.log());
}

/// Waits until side A's daemon `d` has sealed 5 echo requests of the running pings (ICMP is rule `rule`).
fn pings_flowing(d: &lab::Daemon, rule: u64) {
    netveil_testkit::wait_until(Duration::from_secs(5), "the pings flowing", || {
        status(d)["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["rule"] == rule)
            .is_some_and(|r| r["packets_out"].as_u64().unwrap_or(0) >= 5)
    });
}

/// `netveil reload` of the daemon whose control socket is `name`.
fn reload(p: &Pair, name: &str) -> std::process::Output {
    std::process::Command::new(NETVEIL)
        .args(["reload", "--socket"])
        .arg(p.lab.socket_path(name))
        .output()
        .unwrap()
}

/// Side A (socket `<prefix>0`) reloaded through its control socket, which answers `said`; side B (`b`) by
/// SIGHUP, which it logs as `logged`.
fn reload_by_socket_and_sighup(p: &Pair, prefix: &str, b: &lab::Daemon, said: &str, logged: &str) {
    let out = reload(p, &format!("{prefix}0"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(said),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let pid = b.pid().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    if netveil_testkit::try_poll(Duration::from_secs(5), || {
        b.log().contains(logged).then_some(())
    })
    .is_none()
    {
        panic!("side B did not log {logged:?} after SIGHUP: {}", b.log());
    }
}

/// `netveil reload` (and SIGHUP) puts a changed rule file in force without a restart and without a gap: the clear
/// port becomes protected, pings running through both reloads all come back, the keys that stay keep their counters
/// (no replay drops), and a rule file with an error is refused with nothing changed.
#[test]
fn a_reload_changes_the_rules_without_dropping_traffic() {
    let p = pair("pd");
    let d: Vec<lab::Daemon> = (0..2)
        .map(|s| {
            p.lab
                .start_daemon(
                    &p.ns[s],
                    &format!("pl{s}"),
                    &config(&p.lab, s, "authenticated"),
                )
                .unwrap()
        })
        .collect();
    let pings = p
        .lab
        .command(
            &p.ns[0],
            &["ping", "-n", "-c", "150", "-i", "0.02", "-W", "2", ADDR[1]],
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    pings_flowing(&d[0], 3);
    // Rule 4 (TCP 5003) becomes protected on both sides, with its own key.
    for s in 0..2 {
        let path = p.lab.dir().join(format!("pilsc-{s}.rules"));
        let text = std::fs::read_to_string(&path).unwrap().replace(
            "Rule = 4; Security = false;",
            "Rule = 4; Security = true; Encryption = AES-256; Key = 0x0101010101010101010101010101010101010101010101010101010101010101;",
        );
        std::fs::write(&path, text).unwrap();
    }
    let reload = |s: usize| reload(&p, &format!("pl{s}"));
    reload_by_socket_and_sighup(
        &p,
        "pl",
        &d[1],
        "4 rules, 4 keys (3 kept with their counters, 1 new)",
        "SIGHUP: reloaded: 4 rules",
    );
    let out = pings.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("150 packets transmitted, 150 received"),
        "{text}"
    );
    for daemon in &d {
        assert_eq!(status(daemon)["drops"]["replay"], 0);
    }
    // TCP 5003 is now protected on the wire.
    let mut cap = p
        .lab
        .capture(&p.ns[1], "veth-b", "reloaded.pcap", 2000, &["tcp"])
        .unwrap();
    let c = lab::tcp_transfer(&p.ns[0], &p.ns[1], ip(1), CLEAR_PORT, 64 << 10).unwrap();
    assert_eq!(c.bytes, 64 << 10);
    let path = cap.stop().unwrap();
    let pk = packets(&path);
    assert!(pk.iter().filter(|x| x.0 == 6).all(|x| x.1), "{pk:?}");
    assert!(pk.iter().filter(|x| x.0 == 6).count() > 5);
    // A broken rule file: refused, nothing changed.
    let path = p.lab.dir().join("pilsc-0.rules");
    std::fs::write(&path, "Rule = 1; Security = maybe;\n").unwrap();
    let out = reload(0);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(status(&d[0])["rules"].as_array().unwrap().len(), 4);
    let out = p
        .lab
        .exec_ok(
            &p.ns[0],
            &["ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", ADDR[1]],
        )
        .unwrap();
    assert!(out.contains("2 received"), "{out}");
}

/// Side `side`'s configuration with its rules as `[[pilsc.rule]]` tables: ICMP protected (AES-128) and TCP
/// [`CLEAR_PORT`] as `clear` says.
fn toml_config(lab: &Lab, side: usize, clear: bool) -> String {
    let peer = ADDR[1 - side];
    let mode = if side == 1 { "server" } else { "client" };
    let tcp = if clear {
        format!("security = false\napplmode = \"{mode}\"\n")
    } else {
        format!(
            "security = true\napplmode = \"{mode}\"\nencryption = \"AES-256\"\n\
             key = \"0x0202020202020202020202020202020202020202020202020202020202020202\"\n"
        )
    };
    format!(
        "[pilsc]\nqueue = {}\ncontrol_socket = \"{}\"\nstate_dir = \"{}\"\n\n\
         [[pilsc.rule]]\nrule = 1\nsecurity = true\nip = \"{peer}\"\nprotocol = \"icmp\"\nencryption = 1\n\
         key = \"0x00112233445566778899aabbccddeeff\"\n\n\
         [[pilsc.rule]]\nrule = 2\nip = \"{peer}\"\nprotocol = \"tcp\"\nport = {CLEAR_PORT}\n{tcp}",
        20 + 2 * side,
        lab.socket_path(&format!("pt{side}")).display(),
        lab.dir().join(format!("tstate-{side}")).display(),
    )
}

/// Rules written as `[[pilsc.rule]]` tables reload as a rule file does: `netveil reload` (side A) and SIGHUP (side
/// B) read the configuration's `[pilsc]` again, the clear port becomes protected with pings running throughout,
/// and a change that takes a restart (the mode) or a broken table is refused, naming its key, with nothing changed.
#[test]
fn a_reload_reads_rules_written_as_toml_tables_again() {
    let p = pair("pt");
    let d: Vec<lab::Daemon> = (0..2)
        .map(|s| {
            p.lab
                .start_daemon(&p.ns[s], &format!("pt{s}"), &toml_config(&p.lab, s, true))
                .unwrap()
        })
        .collect();
    let pings = p
        .lab
        .command(
            &p.ns[0],
            &["ping", "-n", "-c", "100", "-i", "0.02", "-W", "2", ADDR[1]],
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    pings_flowing(&d[0], 1);
    // (start_daemon wrote each side's configuration to pt<side>.toml in the lab's directory.)
    let cfg_path = |s: usize| p.lab.dir().join(format!("pt{s}.toml"));
    for s in 0..2 {
        std::fs::write(cfg_path(s), toml_config(&p.lab, s, false)).unwrap();
    }
    let reload = |s: usize| reload(&p, &format!("pt{s}"));
    reload_by_socket_and_sighup(
        &p,
        "pt",
        &d[1],
        "2 rules, 2 keys (1 kept with their counters, 1 new)",
        "SIGHUP: reloaded: 2 rules",
    );
    let out = pings.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("100 packets transmitted, 100 received"),
        "{text}"
    );
    for daemon in &d {
        assert_eq!(status(daemon)["drops"]["replay"], 0);
        let st = status(daemon);
        let rule2 = st["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["rule"] == 2)
            .cloned();
        assert_eq!(rule2.unwrap()["encryption"], Value::from("AES-256"), "{st}");
    }
    // TCP on the formerly clear port is protected on the wire now.
    let mut cap = p
        .lab
        .capture(&p.ns[1], "veth-b", "toml-reloaded.pcap", 2000, &["tcp"])
        .unwrap();
    let c = lab::tcp_transfer(&p.ns[0], &p.ns[1], ip(1), CLEAR_PORT, 64 << 10).unwrap();
    assert_eq!(c.bytes, 64 << 10);
    let pk = packets(&cap.stop().unwrap());
    assert!(pk.iter().filter(|x| x.0 == 6).count() > 5, "{pk:?}");
    assert!(pk.iter().filter(|x| x.0 == 6).all(|x| x.1), "{pk:?}");
    // A change that takes a restart, and a broken table: refused with the key named, nothing changed.
    let text = toml_config(&p.lab, 0, false);
    for (changed, key) in [
        (
            text.replace("[pilsc]\n", "[pilsc]\nmode = \"confidential\"\n"),
            "pilsc.mode",
        ),
        (
            text.replace("port = 5003", "port = 70000"),
            "pilsc.rule[1].port",
        ),
    ] {
        std::fs::write(cfg_path(0), changed).unwrap();
        let out = reload(0);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(key),
            "{key}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(status(&d[0])["rules"].as_array().unwrap().len(), 2);
    let out = p
        .lab
        .exec_ok(
            &p.ns[0],
            &["ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", ADDR[1]],
        )
        .unwrap();
    assert!(out.contains("2 received"), "{out}");
}
