//! PILSC and IPv4 options: a protected packet carries option 130 and nothing else, in both modes. Between two
//! namespaces: a sealed datagram taken off the wire with a router-alert option inserted into its header (as an
//! attacker on the path would) is dropped by the receiver and counted (`ip_options`), while the same frame without
//! it is delivered; an application's datagram with IP options on a protected port is not sealed, never sent in
//! clear, and counted by the sender. Needs root, iptables, tcpdump and python3.

use netveil_lab::demo_pilsc::{first_frame, inject_frame, pilsc_config, two_hosts};
use netveil_lab::lab::{self, Lab};
use serde_json::Value;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");
const ADDR: [&str; 2] = ["10.80.0.1", "10.80.0.2"];
const UDP_PORT: u16 = 5001;
const DEADLINE: Duration = Duration::from_secs(8);

fn rules(side: usize) -> String {
    let peer = ADDR[1 - side];
    let mode = if side == 1 { "Server" } else { "Client" };
    format!(
        "Rule = 1; Security = true; IP = {peer}; Protocol = UDP; Port = {UDP_PORT}; Applmode = {mode};\n\
         Encryption = Blowfish; Key = 0x{};\n",
        "71".repeat(16)
    )
}

fn pilsc(d: &lab::Daemon) -> Value {
    d.ask("status").unwrap()["engines"]["pilsc"].clone()
}

/// Polls `f` every 20 ms until it holds or [`DEADLINE`] passes; whether it held.
fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < DEADLINE {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// A UDP socket on side B's port, receiving: the datagrams it got, once told to stop.
struct Receiver {
    stop: mpsc::Sender<()>,
    got: std::thread::JoinHandle<netveil_lab::Result<Vec<Vec<u8>>>>,
}

fn receiver(ns: &str, at: SocketAddr) -> Receiver {
    let (stop, stop_rx) = mpsc::channel();
    let (ready_tx, ready) = mpsc::channel();
    let got = lab::spawn_in_ns(ns, move || {
        let s = UdpSocket::bind(at).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        loop {
            if let Ok(n) = s.recv(&mut buf) {
                got.push(buf[..n].to_vec());
            }
            if stop_rx.try_recv().is_ok() {
                return got;
            }
        }
    })
    .unwrap();
    ready.recv().unwrap();
    Receiver { stop, got }
}

impl Receiver {
    fn stop(self) -> Vec<Vec<u8>> {
        let _ = self.stop.send(());
        self.got.join().unwrap().unwrap()
    }
}

/// `frame` (Ethernet, a sealed IPv4 packet) with `opt` inserted before the header's options, its IHL, total length
/// and header checksum mended.
fn with_option(frame: &[u8], opt: &[u8]) -> Vec<u8> {
    use netveil_wire::ipv4;
    let mut f = frame[..14 + 20].to_vec();
    f.extend_from_slice(opt);
    f.extend_from_slice(&frame[14 + 20..]);
    let mut p = ipv4::Packet::new_unchecked(&mut f[14..]);
    let hl = p.header_len() + opt.len();
    p.set_header_len(hl);
    let tl = p.total_len() + opt.len() as u16;
    p.set_total_len(tl);
    p.fill_checksum();
    f
}

#[test]
fn a_router_alert_inserted_into_a_protected_packet_is_dropped_and_counted() {
    assert!(lab::is_root(), "the namespace tests need root");
    for t in ["ip", "tcpdump", "iptables", "python3"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    for mode in ["authenticated", "confidential"] {
        let (lab, ns): (Lab, [String; 2]) = two_hosts("nvo", Path::new(NETVEIL), ADDR).unwrap();
        let d: Vec<lab::Daemon> = (0..2)
            .map(|s| {
                let cfg = pilsc_config(&lab, s, &rules(s), mode, 50).unwrap();
                lab.start_daemon(&ns[s], &format!("p{s}"), &cfg).unwrap()
            })
            .collect();
        let ol = if mode == "confidential" { 12 } else { 28 };
        let data = b"PILSC-OPTIONS-TEST".repeat(5);
        let wire_len = (20 + ol + 8 + data.len()).to_string();
        // Side B never sees the sealed datagram (a DROP before its queue); the capture keeps it.
        let drop = |op: &str| {
            let mut args = vec!["iptables", "-w", "-t", "raw", op, "PREROUTING"];
            args.extend([
                "-p", "udp", "-m", "length", "--length", &wire_len, "-j", "DROP",
            ]);
            lab.exec_ok(&ns[1], &args).unwrap();
        };
        drop("-I");
        let mut cap = lab
            .capture(
                &ns[1],
                "veth-b",
                &format!("opt-{mode}.pcap"),
                2000,
                &["udp"],
            )
            .unwrap();
        let dst = SocketAddr::new(ADDR[1].parse().unwrap(), UDP_PORT);
        let sent = data.clone();
        let want = 20 + ol + 8 + data.len();
        let path = cap.path.clone();
        let mut frame = None;
        let captured = wait_until(|| {
            let s = sent.clone();
            lab.in_ns(&ns[0], move || {
                let _ = UdpSocket::bind("0.0.0.0:0").unwrap().send_to(&s, dst);
            })
            .unwrap();
            frame = first_frame(&path, |p| p.len() == want && p.get(20) == Some(&130))
                .ok()
                .flatten();
            frame.is_some()
        });
        cap.stop().unwrap();
        drop("-D");
        assert!(captured, "{mode}: no sealed datagram captured");
        let frame = frame.unwrap();

        // Router alert (RFC 2113) before option 130; then a NOP word after it: dropped, counted, not delivered.
        let rx = receiver(&ns[1], dst);
        let ra = with_option(&frame, &[0x94, 4, 0, 0]);
        inject_frame(&lab, &ns[0], "veth-a", &ra).unwrap();
        let counted = wait_until(|| pilsc(&d[1])["drops"]["ip_options"] == 1);
        assert!(counted, "{mode}: {}\n{}", pilsc(&d[1]), d[1].log());
        let mut nop = frame[..14 + 20 + ol].to_vec();
        nop.extend_from_slice(&[1, 1, 1, 1]);
        nop.extend_from_slice(&frame[14 + 20 + ol..]);
        {
            let mut p = netveil_wire::ipv4::Packet::new_unchecked(&mut nop[14..]);
            let (hl, tl) = (p.header_len() + 4, p.total_len() + 4);
            p.set_header_len(hl);
            p.set_total_len(tl);
            p.fill_checksum();
        }
        inject_frame(&lab, &ns[0], "veth-a", &nop).unwrap();
        let counted = wait_until(|| pilsc(&d[1])["drops"]["ip_options"] == 2);
        assert!(counted, "{mode}: {}", pilsc(&d[1]));
        // The genuine frame: delivered (the refused ones did not move its replay window).
        inject_frame(&lab, &ns[0], "veth-a", &frame).unwrap();
        let delivered = wait_until(|| pilsc(&d[1])["rules"][0]["packets_in"] == 1);
        let got = rx.stop();
        assert!(delivered, "{mode}: {}", pilsc(&d[1]));
        assert_eq!(got, vec![data.clone()], "{mode}: only the genuine datagram");

        // An application's datagram with IP options (router alert) to the protected port: not sealed, not sent.
        let code = "import socket,sys; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
                    s.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, bytes([0x94,4,0,0])); \
                    s.sendto(b'PILSC-OPTIONS-APP', (sys.argv[1], int(sys.argv[2])))";
        let port = UDP_PORT.to_string();
        let mut cap = lab
            .capture(
                &ns[1],
                "veth-b",
                &format!("app-{mode}.pcap"),
                2000,
                &["udp"],
            )
            .unwrap();
        lab.exec_ok(&ns[0], &["python3", "-c", code, ADDR[1], &port])
            .unwrap();
        let counted = wait_until(|| pilsc(&d[0])["drops"]["ip_options"] == 1);
        let path = cap.stop().unwrap();
        assert!(counted, "{mode}: {}", pilsc(&d[0]));
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !bytes.windows(17).any(|w| w == b"PILSC-OPTIONS-APP"),
            "{mode}: the datagram left in clear"
        );
    }
}
