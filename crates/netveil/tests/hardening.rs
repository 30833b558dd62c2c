//! Hardening, end to end in network namespaces (root; the tools of .ci/setup): restarts and crashes never repeat a
//! sequence number and never let covered traffic out in clear, the PSP key exchange is the only clear traffic the
//! input filter admits, the control socket holds against misbehaving clients, `check` catches what `up` would fail
//! on, and later fragments of port-selected traffic are protected like their first fragment.

use netveil_lab::lab::{self, Daemon, HostPair, Lab, Mode, TwoHosts};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");
const TABLE: &str = "netveil_nv0";

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    assert!(lab::is_root(), "the hardening tests need root");
    for t in ["ip", "ping", "tcpdump", "tshark", "nft", "setpriv"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn new_lab() -> Lab {
    Lab::new("nvh").expect("lab").with_netveil(NETVEIL)
}

fn python() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    assert!(p.exists(), "{} is missing: run .ci/setup", p.display());
    p
}

/// A ping every 100 ms until one is answered, for at most `secs` seconds: after kill -9 and a restart, the restarted
/// side refuses its peer's packets up to its receive floor (at most one block: about a quarter second of the recent
/// rate, or 8 packets; see the README's "Restarts and crashes"), so the first reply may be lost.
fn ping_within(lab: &Lab, ns: &str, dst: &str, secs: u32) -> bool {
    let w = secs.to_string();
    lab.exec(ns, &["ping", "-n", "-c", "1", "-i", "0.1", "-w", &w, dst])
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn ping_once(lab: &Lab, ns: &str, dst: &str) -> bool {
    lab.exec(ns, &["ping", "-n", "-c", "1", "-W", "2", dst])
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A ping flood in the background (every 10 ms), killed when dropped.
struct Pinger(std::process::Child);

impl Pinger {
    fn start(lab: &Lab, ns: &str, dst: &str) -> Pinger {
        Pinger(
            lab.command(ns, &["ping", "-n", "-i", "0.01", "-W", "1", dst])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("ping"),
        )
    }
}

impl Drop for Pinger {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[derive(Clone, Copy, Debug)]
enum Stop {
    Term,
    Kill,
}

fn stop(d: &mut Daemon, how: Stop) {
    match how {
        Stop::Term => d.stop(),
        Stop::Kill => d.kill(),
    };
}

/// A daemon restarted three times under traffic (SIGTERM, kill -9, SIGTERM) never sends an (SPI, sequence number)
/// pair twice, and the peer accepts it at once after each restart (nothing is dropped as a replay); the first ping
/// after a clean restart is answered, after kill -9 one within 3 s (the restarted side's own receive floor).
#[test]
fn restarts_never_repeat_a_sequence_number() {
    let _g = serial();
    let mut lab = new_lab();
    let mut hosts = TwoHosts::up(&mut lab, &HostPair::esp("aes128gcm16")).expect("setup");
    let (a, b_in) = (hosts.ns[0].clone(), hosts.addrs[1].inner.to_string());
    let a_out = hosts.addrs[0].outer.to_string();
    let mut cap = lab
        .capture(&a, "veth-a", "restarts.pcap", 96, &["esp"])
        .expect("tcpdump");
    let mut tops = Vec::new();
    {
        let _traffic = Pinger::start(&lab, &a, &b_in);
        std::thread::sleep(Duration::from_millis(800));
        for how in [Stop::Term, Stop::Kill, Stop::Term] {
            let st = hosts.daemon(0).status_json().expect("status");
            tops.push(st["sas"][0]["seq"].as_u64().unwrap_or(0));
            stop(&mut hosts.daemons[0], how);
            std::thread::sleep(Duration::from_millis(300));
            hosts.daemons[0] = lab
                .start_daemon(&a, "a", &hosts.configs[0])
                .unwrap_or_else(|e| panic!("restart after {how:?}: {e}"));
            // The peer accepts the restarted sender at once (its first packet, far ahead after a crash, gets a
            // receive floor above it synced on the spot); after a crash the restarted side itself refuses the peer's
            // replies up to its own floor (at most one block), so there the first reply may be lost.
            let answered = match how {
                Stop::Term => ping_once(&lab, &a, &b_in),
                Stop::Kill => ping_within(&lab, &a, &b_in, 3),
            };
            assert!(
                answered,
                "the peer did not answer a ping after {how:?}\n{}",
                hosts.daemon(1).log()
            );
            std::thread::sleep(Duration::from_millis(600));
        }
    }
    let pcap = cap.stop().unwrap();
    let frames = lab::tshark_frames(&pcap, None, Some("esp")).expect("tshark");
    let sent: Vec<(String, u64)> = frames
        .iter()
        .filter(|f| f.src == a_out)
        .filter_map(|f| Some((f.esp_spi.clone()?, f.esp_seq?)))
        .collect();
    assert!(
        sent.len() > 100,
        "too few ESP packets from a: {}",
        sent.len()
    );
    let unique: HashSet<&(String, u64)> = sent.iter().collect();
    assert_eq!(
        unique.len(),
        sent.len(),
        "an (SPI, sequence number) pair was sent twice"
    );
    // Every restart continued above everything sent before it.
    let seqs: Vec<u64> = sent.iter().map(|(_, s)| *s).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] > w[0]),
        "sequence numbers went back: {:?}",
        seqs.windows(2).find(|w| w[1] <= w[0])
    );
    // The peer dropped nothing as a replay.
    let st = hosts.daemon(1).status_json().unwrap();
    let sa = st["sas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "a-to-b")
        .unwrap()
        .clone();
    assert_eq!(sa["replayed"].as_u64(), Some(0), "{sa}");
    assert_eq!(sa["auth_failed"].as_u64(), Some(0), "{sa}");
    eprintln!(
        "{} ESP packets from a, all (SPI, seq) distinct; marks before the restarts: {tops:?}",
        sent.len()
    );
}

/// Covered traffic never leaves in clear while the daemon is not forwarding: after kill -9 (and after a clean stop)
/// the pings that kept going are dropped by the fail-closed filter, never sent on the wire; `up` after the crash
/// reclaims what the killed instance left and starts; `netveil down` ends the blocking. (The positive control of
/// each capture: the same pings, protected, are on it from just before the stop.)
fn fails_closed(pair: HostPair, default_route: bool) {
    let _g = serial();
    let mut lab = new_lab();
    let mut hosts = TwoHosts::up(&mut lab, &pair).expect("setup");
    let psp = pair.protocol == lab::Protocol::Psp;
    if psp {
        hosts.wait_psp_associated(Duration::from_secs(15)).unwrap();
    }
    let a = hosts.ns[0].clone();
    let (a_in, b_in) = (
        hosts.addrs[0].inner.to_string(),
        hosts.addrs[1].inner.to_string(),
    );
    let b_out = hosts.addrs[1].outer.to_string();
    if default_route {
        lab.ip(
            &a,
            &["route", "add", "default", "via", &b_out, "dev", "veth-a"],
        )
        .unwrap();
    }
    assert!(ping_once(&lab, &a, &b_in), "ping before");
    let label = format!("{:?} {:?}", pair.protocol, pair.mode);
    for how in [Stop::Kill, Stop::Term] {
        let before = lab.nft_counter(&a, TABLE, "output");
        let mut cap = lab
            .capture(&a, "veth-a", "down.pcap", 200, &["not", "arp"])
            .unwrap();
        {
            // Packets a sent on its wire (protected ones while the daemon runs: the clear-traffic check below).
            let sent = || -> u64 {
                lab.exec(&a, &["cat", "/sys/class/net/veth-a/statistics/tx_packets"])
                    .ok()
                    .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
                    .unwrap_or(0)
            };
            let start = sent();
            let _p = Pinger::start(&lab, &a, &b_in);
            // The positive control: a few pings protected while the capture runs.
            netveil_testkit::wait_until(
                Duration::from_secs(10),
                format!("{label}: 10 packets sent on veth-a before {how:?}"),
                || sent() >= start + 10,
            );
            stop(&mut hosts.daemons[0], how);
            // The pings that go on meet the fail-closed filter.
            netveil_testkit::wait_until(
                Duration::from_secs(10),
                format!("{label}: 20 packets dropped by the fail-closed filter after {how:?}"),
                || lab.nft_counter(&a, TABLE, "output").saturating_sub(before) >= 20,
            );
        }
        let pcap = cap.stop().unwrap();
        let frames = lab::tshark_frames(&pcap, None, None).unwrap();
        let a_out = hosts.addrs[0].outer.to_string();
        let protected = frames
            .iter()
            .filter(|f| {
                f.src == a_out
                    && if psp {
                        f.udp_ports.contains(&1000)
                    } else {
                        f.outer_proto == Some(50)
                    }
            })
            .count();
        assert!(
            protected >= 5,
            "{label}: only {protected} protected packets from a on the capture before {how:?}: {frames:?}"
        );
        let clear: Vec<_> = frames
            .iter()
            .filter(|f| {
                f.protocols.contains(":icmp")
                    || (pair.mode == Mode::Tunnel
                        && f.addrs.iter().any(|x| *x == a_in || *x == b_in))
            })
            .collect();
        assert!(
            clear.is_empty(),
            "{label}: {} packets of covered traffic left in clear after {how:?}, e.g. {:?}",
            clear.len(),
            &clear[..clear.len().min(2)]
        );
        let blocked = lab.nft_counter(&a, TABLE, "output") - before;
        assert!(
            blocked >= 20,
            "{label}: after {how:?} the fail-closed filter dropped only {blocked} packets"
        );
        // Restart: everything a killed or stopped instance left is reclaimed.
        hosts.daemons[0] = lab
            .start_daemon(&a, "a", &hosts.configs[0])
            .unwrap_or_else(|e| panic!("{label}: restart after {how:?}: {e}"));
        if psp {
            hosts.wait_psp_associated(Duration::from_secs(15)).unwrap();
        }
        let answered = match how {
            Stop::Term => ping_once(&lab, &a, &b_in),
            Stop::Kill => ping_within(&lab, &a, &b_in, 3),
        };
        assert!(answered, "{label}: ping after {how:?}");
    }
    // `netveil down` stops the daemon and lifts the block.
    lab.netveil_down(&a, "a").expect("netveil down");
    let t = Instant::now();
    while hosts.daemons[0].is_running() && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!hosts.daemons[0].is_running(), "{label}: still running");
    assert!(
        !lab.exec(&a, &["nft", "list", "table", "inet", TABLE])
            .unwrap()
            .status
            .success(),
        "{label}: the table survived netveil down"
    );
}

#[test]
fn fails_closed_tunnel_with_a_default_route() {
    fails_closed(HostPair::esp("aes128gcm16"), true);
}

#[test]
fn fails_closed_transport() {
    let mut p = HostPair::esp("aes256-sha256");
    p.mode = Mode::Transport;
    fails_closed(p, false);
}

#[test]
fn fails_closed_psp_tunnel_with_a_default_route() {
    fails_closed(HostPair::psp("aes-gcm-128"), true);
}

/// A configuration option keeps the old behaviour for a clean stop: the fail-closed table is there while the daemon
/// runs, gone after SIGTERM (a covered ping then leaves in clear: on the wire), and still there, blocking, after
/// kill -9.
#[test]
fn block_when_stopped_false_lifts_the_block_on_a_clean_stop() {
    let _g = serial();
    let mut lab = new_lab();
    let mut hosts = TwoHosts::topology(&mut lab, &HostPair::esp("aes128gcm16")).unwrap();
    hosts.configs[0] = hosts.configs[0].replacen(
        "[interface]\n",
        "[interface]\nblock_when_stopped = false\n",
        1,
    );
    hosts.start(&lab).unwrap();
    let a = hosts.ns[0].clone();
    let b_in = hosts.addrs[1].inner.to_string();
    let b_out = hosts.addrs[1].outer.to_string();
    // Without the TUN, covered traffic would take this route out in clear.
    lab.ip(
        &a,
        &["route", "add", "default", "via", &b_out, "dev", "veth-a"],
    )
    .unwrap();
    let table = |lab: &Lab| {
        lab.exec(&a, &["nft", "list", "table", "inet", TABLE])
            .unwrap()
            .status
            .success()
    };
    // Pings to b's inner address while a is stopped: the echo requests on a's wire.
    let clear_pings = |lab: &Lab, file: &str| {
        let mut cap = lab
            .capture(
                &a,
                "veth-a",
                file,
                128,
                &["icmp", "and", "dst", "host", &b_in],
            )
            .unwrap();
        for _ in 0..3 {
            let _ = lab.exec(&a, &["ping", "-n", "-c", "1", "-W", "1", &b_in]);
        }
        let pcap = cap.stop().unwrap();
        lab::tshark_frames(&pcap, None, None).unwrap().len()
    };
    assert!(table(&lab), "no fail-closed table while the daemon runs");
    assert!(ping_once(&lab, &a, &b_in));
    hosts.daemons[0].stop();
    assert!(!table(&lab), "the table survived a clean stop");
    let n = clear_pings(&lab, "term.pcap");
    assert!(
        n >= 3,
        "after the clean stop, {n} clear pings on the wire (the block was not lifted)"
    );
    // kill -9: still blocked (and counted).
    hosts.daemons[0] = lab.start_daemon(&a, "a", &hosts.configs[0]).unwrap();
    assert!(table(&lab), "no fail-closed table after the restart");
    assert!(ping_once(&lab, &a, &b_in));
    hosts.daemons[0].kill();
    assert!(table(&lab), "the table is gone after kill -9");
    let before = lab.nft_counter(&a, TABLE, "output");
    let n = clear_pings(&lab, "kill.pcap");
    assert_eq!(n, 0, "after kill -9, {n} clear pings on the wire");
    let blocked = lab.nft_counter(&a, TABLE, "output") - before;
    assert!(
        blocked >= 3,
        "after kill -9 the filter dropped only {blocked} packets"
    );
}

fn mac_of(lab: &Lab, ns: &str, dev: &str) -> String {
    let out = lab.exec_ok(ns, &["ip", "-j", "link", "show", dev]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v[0]["address"].as_str().unwrap().to_string()
}

/// Sends TCP SYNs with scapy on b's veth at layer 2 (so that b's own filters do not see them): spoofed clear
/// traffic as an attacker on the wire would send it.
fn spoof_syns(lab: &Lab, hosts: &TwoHosts, src: &str, dst: &str, sport: u16, dport: u16, n: u32) {
    let a_mac = mac_of(lab, &hosts.ns[0], "veth-a");
    let script = format!(
        "from scapy.all import Ether, IP, IPv6, TCP, sendp\n\
         ip = IPv6 if ':' in '{dst}' else IP\n\
         sendp([Ether(dst='{a_mac}')/ip(src='{src}', dst='{dst}')/TCP(sport={sport}, dport={dport}, flags='S', seq=1000 + i) for i in range({n})], iface='veth-b', verbose=False)\n"
    );
    let py = python();
    let out = lab
        .exec(&hosts.ns[1], &[py.to_str().unwrap(), "-c", &script])
        .unwrap();
    assert!(
        out.status.success(),
        "scapy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn clear_drops(d: &Daemon) -> u64 {
    d.status_json().unwrap()["drops"]["rx:clear-but-protected"]
        .as_u64()
        .unwrap()
}

/// The PSP input filter admits the clear key exchange only between the outer addresses, from port to port: a
/// spoofed clear connection from the peer's address with source port 1001 (tunnel: the inner address; transport:
/// the outer one) never reaches a local service, while the real key exchange associates.
fn psp_filter(mode: Mode) {
    let _g = serial();
    let mut lab = new_lab();
    let mut pair = HostPair::psp("aes-gcm-128");
    pair.mode = mode;
    let hosts = TwoHosts::up(&mut lab, &pair).unwrap();
    hosts.wait_psp_associated(Duration::from_secs(15)).unwrap();
    let (a_in, b_in) = (
        hosts.addrs[0].inner.to_string(),
        hosts.addrs[1].inner.to_string(),
    );
    let a = hosts.ns[0].clone();
    // A local service on a.
    let listener = lab
        .command(&a, &["nc", "-l", "-k", "-n", &a_in, "7777"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut listener = scopeguard(listener);
    std::thread::sleep(Duration::from_millis(300));
    // An answer (SYN-ACK from the service, RST from port 1001 where nothing listens on the inner address) would be
    // routed into a's TUN and leave protected, so it is watched for on every interface of a's namespace, the TUN
    // included, where it would be in clear.
    let answer_filter: Vec<&str> = if mode == Mode::Tunnel {
        vec![
            "tcp", "and", "src", "host", &a_in, "and", "(src", "port", "7777", "or", "src", "port",
            "1001)",
        ]
    } else {
        vec!["tcp", "and", "src", "port", "7777"]
    };
    let spoof = |file: &str| {
        let mut cap = lab.capture(&a, "any", file, 128, &answer_filter).unwrap();
        spoof_syns(&lab, &hosts, &b_in, &a_in, 1001, 7777, 5);
        // Port to port, but between the inner addresses (tunnel mode): not the key exchange either.
        if mode == Mode::Tunnel {
            spoof_syns(&lab, &hosts, &b_in, &a_in, 1001, 1001, 5);
        }
        std::thread::sleep(Duration::from_millis(300));
        let pcap = cap.stop().unwrap();
        lab::tshark_frames(&pcap, None, None).unwrap()
    };
    let before = clear_drops(hosts.daemon(0));
    let answered = spoof("synack.pcap");
    assert!(
        answered.is_empty(),
        "{mode:?}: a answered spoofed clear SYNs: {answered:?}"
    );
    let dropped = clear_drops(hosts.daemon(0)) - before;
    let want = if mode == Mode::Tunnel { 10 } else { 5 };
    assert!(
        dropped >= want,
        "{mode:?}: rx:clear-but-protected +{dropped}, expected +{want}"
    );
    // The key exchange itself still works: rotate and re-associate.
    let out = std::process::Command::new(NETVEIL)
        .args(["rotate", "--socket"])
        .arg(&hosts.daemon(0).socket)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    hosts.wait_psp_associated(Duration::from_secs(10)).unwrap();
    assert!(ping_once(&lab, &a, &b_in));
    // The positive control: without the input filter the same SYNs are answered, and the capture sees it.
    lab.exec_ok(&a, &["nft", "flush", "chain", "inet", TABLE, "input"])
        .unwrap();
    let answered = spoof("synack-unfiltered.pcap");
    let from_service = answered
        .iter()
        .filter(|f| f.tcp_ports.contains(&7777))
        .count();
    assert!(
        from_service >= 1,
        "{mode:?}: without the input filter, no answer from the service was captured: {answered:?}"
    );
    let _ = listener.0.kill();
}

struct Guard(std::process::Child);
impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
fn scopeguard(c: std::process::Child) -> Guard {
    Guard(c)
}

#[test]
fn psp_filter_admits_only_the_key_exchange_tunnel() {
    psp_filter(Mode::Tunnel);
}

#[test]
fn psp_filter_admits_only_the_key_exchange_transport() {
    psp_filter(Mode::Transport);
}

/// The control socket: an idle client does not hold `netveil status`; a huge request line is refused after a few
/// hundred bytes and never echoed; a non-root user is told that the socket is root-only.
#[test]
fn control_socket_holds_against_misbehaving_clients() {
    let _g = serial();
    let mut lab = new_lab();
    let hosts = TwoHosts::up(&mut lab, &HostPair::esp("aes128gcm16")).unwrap();
    let sock = hosts.daemon(0).socket.clone();
    // Idle clients (they never send a line).
    let idle: Vec<UnixStream> = (0..3)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    let t = Instant::now();
    let out = std::process::Command::new("timeout")
        .args(["5", NETVEIL, "status", "--socket"])
        .arg(&sock)
        .output()
        .unwrap();
    assert!(
        out.status.success() && t.elapsed() < Duration::from_secs(2),
        "status with idle clients: {:?} after {:?}: {}",
        out.status,
        t.elapsed(),
        String::from_utf8_lossy(&out.stderr)
    );
    drop(idle);
    // A 4 MiB request line.
    let mut s = UnixStream::connect(&sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let big = vec![b'A'; 4 << 20];
    let _ = s.write_all(&big); // the daemon stops reading (and closes) early
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.contains("too long"), "{answer}");
    assert!(!answer.contains("AAAA") && answer.len() < 200, "{answer}");
    // An unknown request is not repeated back.
    let v = hosts.daemon(0).ask("secret-looking-request").unwrap();
    assert!(!v.to_string().contains("secret-looking"), "{v}");
    // A non-root user.
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            NETVEIL,
            "status",
            "--socket",
        ])
        .arg(&sock)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("permission denied") && err.contains("root") && !err.contains("running"),
        "{err}"
    );
    // Still serving.
    hosts.daemon(0).status_json().unwrap();
    // `keys --wireshark` replaces a planted symlink instead of writing through it, and its file is 0600 even
    // where a wider file was.
    use std::os::unix::fs::PermissionsExt;
    let dir = lab.dir().join("ws");
    std::fs::create_dir_all(&dir).unwrap();
    let victim = lab.dir().join("victim");
    std::fs::write(&victim, "untouched").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("esp_sa")).unwrap();
    hosts.daemon(0).keys_wireshark(&dir).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
    let meta = std::fs::symlink_metadata(dir.join("esp_sa")).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    std::fs::set_permissions(dir.join("esp_sa"), std::fs::Permissions::from_mode(0o644)).unwrap();
    hosts.daemon(0).keys_wireshark(&dir).unwrap();
    let meta = std::fs::metadata(dir.join("esp_sa")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(dir.join("esp_sa"))
        .unwrap()
        .contains("0x00001001"));
}

/// `netveil check` (and `up`, before it changes anything) refuses what `up` would fail on: the TUN name held by
/// another device, a tunnel or PSP `local` address that is not the host's, an unwritable state directory.
#[test]
fn check_catches_what_up_would_fail_on() {
    let _g = serial();
    let mut lab = new_lab();
    let mut hosts = TwoHosts::topology(&mut lab, &HostPair::esp("aes128gcm16")).unwrap();
    let a = hosts.ns[0].clone();
    let good = hosts.configs[0].clone();
    let sock = lab.socket_path("psp");
    let psp = HostPair::psp("aes-gcm-128")
        .configs([&sock, &sock])
        .unwrap();
    let psp_elsewhere = psp[0].replacen("local = \"192.0.2.1\"", "local = \"192.0.2.9\"", 1);
    assert_ne!(psp_elsewhere, psp[0]);
    let path = lab.dir().join("c.toml");
    let run = |cmd: &str, text: &str| {
        std::fs::write(&path, text).unwrap();
        let out = lab
            .exec(&a, &[NETVEIL, cmd, "-c", path.to_str().unwrap()])
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    assert_eq!(run("check", &good).0, Some(0));
    lab.ip(&a, &["link", "add", "nv0", "type", "bridge"])
        .unwrap();
    for cmd in ["check", "up"] {
        let (code, err) = run(cmd, &good);
        assert_eq!(code, Some(2), "{cmd}: {err}");
        assert!(
            err.contains("interface.name") && err.contains("in use"),
            "{cmd}: {err}"
        );
    }
    lab.ip(&a, &["link", "del", "nv0"]).unwrap();
    let elsewhere = good.replacen("local = \"192.0.2.1\"", "local = \"192.0.2.9\"", 1);
    assert_ne!(elsewhere, good);
    for cmd in ["check", "up"] {
        let (code, err) = run(cmd, &elsewhere);
        assert_eq!(code, Some(2), "{cmd}: {err}");
        assert!(
            err.contains("sa[0].local") && err.contains("192.0.2.9"),
            "{cmd}: {err}"
        );
    }
    let (code, err) = run("check", &psp_elsewhere);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("psp.local"), "{err}");
    // A state directory that cannot be made (a file is in its path).
    let state = regex_replace_state_dir(&good, "/etc/passwd/netveil");
    let (code, err) = run("check", &state);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("interface.state_dir"), "{err}");
    // Nothing was applied by the refused `up`s.
    assert!(!lab
        .exec(&a, &["nft", "list", "table", "inet", TABLE])
        .unwrap()
        .status
        .success());
    // Beside the config's own running daemon, `check` still checks the file and notes that `up` needs a `down`.
    hosts.start(&lab).unwrap();
    let (code, err) = run("check", &good);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("needs `netveil down -c` first"), "{err}");
    let (code, err) = run("check", &elsewhere);
    assert_eq!(code, Some(2), "{err}");
    let (code, err) = run("up", &good);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("interface.control_socket"), "{err}");
}

fn regex_replace_state_dir(text: &str, dir: &str) -> String {
    text.lines()
        .map(|l| {
            if l.starts_with("state_dir = ") {
                format!("state_dir = \"{dir}\"")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A policy that protects only UDP to port 5000: a 4000-byte datagram leaves the host as fragments (the TUN's MTU
/// is 1400), and the later ones carry no ports. Each is protected like the first (RFC 4301 section 7): the datagram
/// arrives whole, and only ESP is on the wire.
#[test]
fn later_fragments_are_protected_like_the_first() {
    let _g = serial();
    let mut lab = new_lab();
    let mut hosts = TwoHosts::topology(&mut lab, &HostPair::esp("aes128gcm16")).unwrap();
    for c in hosts.configs.iter_mut() {
        *c = c.replace(
            "action = \"protect\"",
            "proto = \"udp\"\ndst_ports = 5000\naction = \"protect\"",
        );
    }
    hosts.start(&lab).unwrap();
    let b_in = hosts.addrs[1].inner;
    let mut cap = lab
        .capture(&hosts.ns[0], "veth-a", "frag.pcap", 128, &["ip"])
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let server = lab::spawn_in_ns(&hosts.ns[1], move || -> netveil_lab::Result<Vec<u8>> {
        let s = std::net::UdpSocket::bind((b_in, 5000)).map_err(netveil_lab::Error::io("bind"))?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        let _ = tx.send(());
        let mut buf = vec![0u8; 65536];
        let (n, _) = s
            .recv_from(&mut buf)
            .map_err(netveil_lab::Error::io("recv"))?;
        Ok(buf[..n].to_vec())
    })
    .unwrap();
    rx.recv().unwrap();
    let payload: Vec<u8> = (0..4000u32).map(|i| (i * 7 % 251) as u8).collect();
    let p2 = payload.clone();
    lab.in_ns(&hosts.ns[0], move || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        for _ in 0..3 {
            s.send_to(&p2, (b_in, 5000)).unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .unwrap();
    let got = server
        .join()
        .unwrap()
        .unwrap()
        .expect("the datagram did not arrive");
    assert_eq!(got, payload);
    let pcap = cap.stop().unwrap();
    let frames = lab::tshark_frames(&pcap, None, None).unwrap();
    assert!(frames.len() >= 3, "{frames:?}");
    assert!(
        frames.iter().all(|f| f.outer_proto == Some(50)),
        "clear packets on the wire: {frames:?}"
    );
}

/// Flood packets that can never authenticate are dropped before the daemon: from a non-peer address by the
/// prerouting filter, with the peer's address but an unknown SPI by the socket filter; only the right SPI with a
/// fresh sequence number reaches the data plane (and fails authentication there). Memory stays flat.
#[test]
fn floods_are_dropped_before_the_daemon_where_they_can_be() {
    let _g = serial();
    let mut lab = new_lab();
    let mut pair = HostPair::esp("aes128gcm16");
    pair.udp_encap = true;
    let hosts = TwoHosts::up(&mut lab, &pair).unwrap();
    let a = hosts.ns[0].clone();
    let b_mac = mac_of(&lab, &hosts.ns[1], "veth-b");
    let drops = |k: &str| {
        hosts.daemon(1).status_json().unwrap()["drops"][k]
            .as_u64()
            .unwrap_or(0)
    };
    let rss = || {
        let pid = hosts.daemon(1).pid().unwrap();
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        s.lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap()
    };
    // The namespace's UDP counters (/proc/net/snmp): InErrors counts every datagram a socket refused, its filter's
    // refusals and full receive buffers alike; RcvbufErrors only the latter.
    let udp_errors = || {
        let snmp = lab
            .exec_ok(&hosts.ns[1], &["cat", "/proc/net/snmp"])
            .unwrap();
        let rows: Vec<Vec<&str>> = snmp
            .lines()
            .filter(|l| l.starts_with("Udp: "))
            .map(|l| l.split_whitespace().collect())
            .collect();
        let get = |k: &str| -> u64 {
            let i = rows[0].iter().position(|x| *x == k).unwrap();
            rows[1][i].parse().unwrap()
        };
        (get("InErrors"), get("RcvbufErrors"))
    };
    // What b's data plane dropped (every rx reason but the kernel's refusals and the prerouting filter's).
    let plane_drops = || -> u64 {
        hosts.daemon(1).status_json().unwrap()["drops"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| {
                k.starts_with("rx:")
                    && *k != "rx:socket-filter-or-full"
                    && *k != "rx:not-from-a-peer"
            })
            .map(|(_, v)| v.as_u64().unwrap_or(0))
            .sum()
    };
    // Refusals by the socket filter, not overflows, during `f` (returns what `f` returns, and the refusals). The
    // counters are read once every flood datagram is accounted for (refused by the kernel, or dropped by the data
    // plane), or after 5 s: the assertions on them tell what is missing.
    let filtered = |f: &dyn Fn() -> u64| {
        let (e0, o0) = udp_errors();
        let p0 = plane_drops();
        let n = f();
        netveil_testkit::try_poll(Duration::from_secs(5), || {
            let (e, _) = udp_errors();
            ((e - e0) + (plane_drops() - p0) >= n).then_some(())
        });
        let (e1, o1) = udp_errors();
        assert!(
            o1 - o0 < n / 100 + 10,
            "{} of {n} flood datagrams overflowed the receive buffer",
            o1 - o0
        );
        (n, (e1 - e0) - (o1 - o0))
    };
    let flood_from = |src: &str, kind: &str, extra: &[&str]| {
        let mut args = vec![
            NETVEIL,
            "flood",
            "--interface",
            "veth-a",
            "--dst-mac",
            &b_mac,
            "--src",
            src,
            "--dst",
            "192.0.2.2",
            "--kind",
            kind,
            "--spi",
            "4097",
            "--pps",
            "20000",
            "--count",
            "10000",
            "--seconds",
            "30",
        ];
        args.extend_from_slice(extra);
        let out = lab.exec_ok(&a, &args).unwrap();
        let n = out
            .split_whitespace()
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap();
        // Each flood is checked on its own, by what it sent (not how fast: the machine may be busy): all 10,000.
        assert_eq!(n, 10_000, "the {kind} flood from {src}: {out}");
        n
    };
    let flood = |src: &str, kind: &str| flood_from(src, kind, &[]);
    let rss0 = rss();
    let (nf0, sf0, uk0, af0) = (
        drops("rx:not-from-a-peer"),
        drops("rx:socket-filter-or-full"),
        drops("rx:unknown-spi"),
        drops("rx:auth-failed"),
    );
    let n = flood("192.0.2.77", "unknown-spi");
    assert!(
        drops("rx:not-from-a-peer") - nf0 >= n,
        "non-peer flood not dropped by the prerouting filter"
    );
    let (n, refused) = filtered(&|| flood("192.0.2.1", "random"));
    let sf = drops("rx:socket-filter-or-full") - sf0;
    assert!(
        sf >= n && refused >= n,
        "spoofed random flood: {sf} (kernel: {refused}) of {n} refused by the socket filter"
    );
    let (n, refused) = filtered(&|| flood("192.0.2.1", "unknown-spi"));
    let sf2 = drops("rx:socket-filter-or-full") - sf0 - sf;
    assert!(
        sf2 >= n && refused >= n,
        "unknown-SPI flood: {sf2} (kernel: {refused}) of {n} refused by the socket filter"
    );
    assert_eq!(
        drops("rx:unknown-spi"),
        uk0,
        "unknown SPIs reached the data plane"
    );
    // Forged ICVs with sequence numbers just above the window reach the data plane and fail there.
    let top = |st: &serde_json::Value| {
        st["sas"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["direction"] == "in")
            .unwrap()["seq"]
            .as_u64()
            .unwrap()
    };
    // (Some genuine traffic first, so the window has a top.)
    assert!(ping_once(&lab, &a, &hosts.addrs[1].inner.to_string()));
    let start = (top(&hosts.daemon(1).status_json().unwrap()) + 10).to_string();
    let (n, refused) =
        filtered(&|| flood_from("192.0.2.1", "bad-icv", &["--counter-start", &start]));
    let af = drops("rx:auth-failed") - af0;
    assert!(
        refused < n / 2,
        "aimed bad ICVs refused by the socket filter: {refused} of {n}"
    );
    assert!(
        af > n / 2,
        "aimed bad ICVs that reached the data plane: {af} of {n}"
    );
    // That was a storm: now sequence numbers far ahead of the window (a blind forger's) are refused by the socket
    // filter, and the daemon says so.
    let said = netveil_testkit::try_poll(Duration::from_secs(5), || {
        hosts
            .daemon(1)
            .log()
            .contains("authentication failures above")
            .then_some(())
    });
    assert!(said.is_some(), "{}", hosts.daemon(1).log());
    let (sf1, af1) = (drops("rx:socket-filter-or-full"), drops("rx:auth-failed"));
    let (n, refused) = filtered(&|| flood("192.0.2.1", "bad-icv"));
    let sf = drops("rx:socket-filter-or-full") - sf1;
    assert!(
        sf > n * 9 / 10 && refused > n * 9 / 10,
        "blind bad ICVs refused by the filter in a storm: {sf} (kernel: {refused}) of {n}"
    );
    assert!(drops("rx:auth-failed") - af1 < n / 10);
    assert!(ping_once(&lab, &a, &hosts.addrs[1].inner.to_string()));
    let grown = rss().saturating_sub(rss0);
    assert!(
        grown < 4096,
        "the daemon grew by {grown} KiB under the floods"
    );
}

/// The PSP key exchange's TLS handshake has a deadline as a whole: a peer address that trickles a byte every two
/// seconds (each read returns well within any per-read timeout) is cut off after 10 s, not served forever.
#[test]
fn psp_handshake_has_an_overall_deadline() {
    let _g = serial();
    let mut lab = new_lab();
    let mut hosts = TwoHosts::topology(&mut lab, &HostPair::psp("aes-gcm-128")).unwrap();
    // Only b, the responder (the higher address), runs; a's address trickles.
    let d = lab
        .start_daemon(&hosts.ns[1], "b", &hosts.configs[1])
        .unwrap();
    hosts.daemons.push(d);
    let script = format!(
        "import socket, time\n\
         s = socket.socket()\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('{a}', 1001))\n\
         s.connect(('{b}', 1001))\n\
         t0 = time.time()\n\
         hello = bytes([0x16, 0x03, 0x01, 0x02, 0x00]) + bytes(512)\n\
         try:\n\
         \x20   for i in range(20):\n\
         \x20       s.send(hello[i:i+1])\n\
         \x20       time.sleep(2)\n\
         \x20   print('still open after', round(time.time() - t0, 1))\n\
         except OSError:\n\
         \x20   print('closed after', round(time.time() - t0, 1))\n",
        a = hosts.addrs[0].outer,
        b = hosts.addrs[1].outer
    );
    let out = lab
        .exec_ok(&hosts.ns[0], &["python3", "-c", &script])
        .unwrap();
    let secs: f64 = out
        .split_whitespace()
        .last()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0);
    assert!(
        out.starts_with("closed") && (9.0..16.0).contains(&secs),
        "{out}\n{}",
        hosts.daemon(0).log()
    );
    assert!(
        hosts.daemon(0).log().contains("not finished within 10 s"),
        "{}",
        hosts.daemon(0).log()
    );
}
