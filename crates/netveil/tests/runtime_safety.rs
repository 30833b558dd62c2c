//! Runtime changes, restarts and crashes tried as an attacker with the control socket's rights or a careless
//! operator would, in network namespaces with the release binary (ESP tunnel, aes128gcm16), checked on the wire
//! (captures) and at the receiving TUN:
//!
//! - an outbound policy never seals with an inbound SA (the peer's key), whatever the order of `sa` and `policy`
//!   changes;
//! - recorded packets are never accepted twice: not after `sa del` + `sa add` with the same keys, a clean restart,
//!   or a crash of the receiver; a live sender loses at most one receive-floor block after a crash;
//! - the traffic of a policy added at runtime stays covered across a crash and the next `netveil up`.
//!
//! Needs root, tcpdump, tshark and the scapy venv (`.ci/setup`).

use netveil_lab::lab::{self, HostPair, Lab, TwoHosts};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    assert!(lab::is_root(), "the namespace tests need root");
    for t in ["ip", "ping", "nft", "tcpdump", "tshark"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn python() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    assert!(p.exists(), "{} is missing: run .ci/setup", p.display());
    p
}

/// `netveil ARGS --socket SOCKET` with `stdin`: (exit code, stdout, stderr).
fn nv(args: &[&str], socket: &Path, stdin: &str) -> (i32, String, String) {
    let mut c = Command::new(NETVEIL)
        .args(args)
        .arg("--socket")
        .arg(socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn nv_ok(args: &[&str], socket: &Path, stdin: &str) -> String {
    let (code, out, err) = nv(args, socket, stdin);
    assert_eq!(code, 0, "netveil {args:?}: {err}");
    out
}

/// The `[[sa]]` table named `name` of a configuration text: (SPI, encryption key in hex).
fn sa_of(config: &str, name: &str) -> (u32, String) {
    let t: toml::Table = toml::from_str(config).unwrap();
    let sa = t["sa"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no SA {name} in {config}"));
    (
        sa["spi"].as_integer().unwrap() as u32,
        sa["enc_key"].as_str().unwrap().to_string(),
    )
}

/// `ping -c COUNT -i INTERVAL` in `ns`: how many replies came back.
fn ping(lab: &Lab, ns: &str, dst: &str, count: u32, interval: &str) -> u32 {
    let c = count.to_string();
    let out = lab
        .exec(
            ns,
            &["ping", "-n", "-c", &c, "-i", interval, "-W", "1", dst],
        )
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.split(" received")
        .next()
        .and_then(|s| s.rsplit(", ").next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The ESP SPIs (with their sequence numbers) that `src` sent in a capture.
fn esp_from(pcap: &Path, src: &str) -> Vec<(u32, u64)> {
    lab::tshark_frames(pcap, None, Some("esp"))
        .expect("tshark")
        .into_iter()
        .filter(|f| f.src == src)
        .filter_map(|f| {
            let spi =
                u32::from_str_radix(f.esp_spi.as_deref()?.trim_start_matches("0x"), 16).ok()?;
            Some((spi, f.esp_seq?))
        })
        .collect()
}

/// Item 1: the sequence that made a daemon seal with its peer's key. `policy add` (position 0) of an outbound
/// policy naming a missing SA `x`, `sa del` of the inbound SA, `sa add name=x direction=in` with the peer's sending
/// key: refused (exit code 2, naming the policy and the SA, never the key), and on the wire a sends nothing under
/// the peer's SPI (before the attack its own SPI is seen: the capture works).
#[test]
fn an_inbound_sa_never_seals_on_the_wire() {
    let _g = serial();
    let mut lab = Lab::new("nvrsd").unwrap().with_netveil(NETVEIL);
    let hosts = TwoHosts::up(&mut lab, &HostPair::esp("aes128gcm16")).expect("setup");
    let (a, sock) = (hosts.ns[0].clone(), lab.socket_path("a"));
    let (a_out, b_out) = (
        hosts.addrs[0].outer.to_string(),
        hosts.addrs[1].outer.to_string(),
    );
    let (a_in, b_in) = (
        hosts.addrs[0].inner.to_string(),
        hosts.addrs[1].inner.to_string(),
    );
    let (own_spi, _) = sa_of(&hosts.configs[0], "a-to-b");
    let (peer_spi, peer_key) = sa_of(&hosts.configs[0], "b-to-a");
    let mut cap = lab
        .capture(&a, "veth-a", "direction.pcap", 96, &["esp"])
        .unwrap();
    assert_eq!(ping(&lab, &a, &b_in, 3, "0.1"), 3, "the tunnel works");
    nv_ok(
        &[
            "policy",
            "add",
            "--position",
            "0",
            "name=to-x",
            "direction=out",
            &format!("src={a_in}/32"),
            &format!("dst={b_in}/32"),
            "action=protect",
            "sas=x",
        ],
        &sock,
        "",
    );
    nv_ok(&["sa", "del", "b-to-a"], &sock, "");
    let (code, _, err) = nv(
        &[
            "sa",
            "add",
            "name=x",
            "direction=in",
            &format!("spi={peer_spi:#x}"),
            &format!("local={a_out}"),
            &format!("remote={b_out}"),
            "suite=aes128gcm16",
            "enc_key=-",
        ],
        &sock,
        &format!("{peer_key}\n"),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("sa.direction") && err.contains("'to-x'") && err.contains("'x'"),
        "{err}"
    );
    assert!(!err.contains(&peer_key), "{err}");
    // Its traffic waits for an outbound SA named x: nothing leaves.
    assert_eq!(ping(&lab, &a, &b_in, 3, "0.1"), 0);
    let st = hosts.daemon(0).status_json().unwrap();
    assert!(st["drops"]["tx:no-sa"].as_u64().unwrap_or(0) >= 3, "{st}");
    let sent = esp_from(&cap.stop().unwrap(), &a_out);
    assert!(
        sent.iter().any(|(s, _)| *s == own_spi),
        "the capture saw none of a's own ESP: {sent:?}"
    );
    assert!(
        sent.iter().all(|(s, _)| *s != peer_spi),
        "a sealed under the peer's SPI: {sent:?}"
    );
}

/// The echo requests in a capture on `any` of the receiving namespace (those delivered by its TUN; ESP and replies
/// are not counted), as (identifier, sequence number).
fn echo_requests(pcap: &Path) -> Vec<(String, String)> {
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(pcap)
        .args([
            "-Y",
            "icmp.type == 8",
            "-T",
            "fields",
            "-e",
            "icmp.ident",
            "-e",
            "icmp.seq",
        ])
        .output()
        .expect("tshark");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            Some((f.next()?.to_string(), f.next()?.to_string()))
        })
        .collect()
}

/// Sends every frame of `pcap` again from `ns` out of `iface` (scapy).
fn replay(lab: &Lab, ns: &str, iface: &str, pcap: &Path) -> usize {
    let script = format!(
        "from scapy.all import rdpcap, sendp\nf = rdpcap('{}')\nsendp(f, iface='{iface}', verbose=False)\nprint(len(f))\n",
        pcap.display()
    );
    let out = lab
        .exec(ns, &[python().to_str().unwrap(), "-c", &script])
        .unwrap();
    assert!(
        out.status.success(),
        "scapy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// What b dropped of a's ESP as a replay: by its socket filters (left of the window) or by the data plane.
fn replay_drops(st: &Value) -> u64 {
    ["rx:socket-filter-or-full", "rx:replayed", "rx:too-old"]
        .iter()
        .map(|k| st["drops"][*k].as_u64().unwrap_or(0))
        .sum()
}

/// Item 2: recorded ESP packets of a -> b, sent again, are never accepted by b: while it runs, after `sa del` +
/// `sa add` of the same SA (keys and SPI), after a clean restart and after kill -9 and a restart. Checked at b's
/// TUN (every echo request delivered there is one a's ping got a reply for) and in b's drop counters (the replays
/// arrived). After a clean restart a's pings go through at once; after a crash at most one receive-floor block of
/// them is lost.
#[test]
fn recorded_packets_are_never_accepted_twice() {
    let _g = serial();
    let mut lab = Lab::new("nvrsr").unwrap().with_netveil(NETVEIL);
    let mut hosts = TwoHosts::up(&mut lab, &HostPair::esp("aes128gcm16")).expect("setup");
    let (a, b) = (hosts.ns[0].clone(), hosts.ns[1].clone());
    let sock_b = lab.socket_path("b");
    let (a_out, b_out) = (
        hosts.addrs[0].outer.to_string(),
        hosts.addrs[1].outer.to_string(),
    );
    let b_in = hosts.addrs[1].inner.to_string();
    let (spi, key) = sa_of(&hosts.configs[1], "a-to-b");
    let mut wire = lab
        .capture(
            &b,
            "veth-b",
            "recorded.pcap",
            0,
            &["esp", "and", "src", "host", &a_out],
        )
        .unwrap();
    let mut tun = lab.capture(&b, "any", "tun.pcap", 128, &["icmp"]).unwrap();
    let mut delivered = ping(&lab, &a, &b_in, 5, "0.1");
    assert_eq!(delivered, 5);
    let recorded = wire.stop().unwrap();
    let mut replayed = 0;
    let check = |hosts: &TwoHosts, what: &str, replayed: &mut usize| {
        let before = replay_drops(&hosts.daemon(1).status_json().unwrap());
        let n = replay(&lab, &a, "veth-a", &recorded);
        assert!(n >= 5, "{n} frames recorded");
        *replayed += n;
        // Until every replayed frame is counted as dropped, for at most 5 s.
        let dropped = || replay_drops(&hosts.daemon(1).status_json().unwrap()) - before;
        let settled = netveil_testkit::try_poll(Duration::from_secs(5), || {
            (dropped() >= n as u64).then_some(())
        });
        assert!(
            settled.is_some(),
            "{what}: {n} replayed, {} dropped as replays",
            dropped()
        );
    };
    check(&hosts, "running", &mut replayed);
    // sa del + sa add with the same keys and SPI.
    nv_ok(&["sa", "del", "a-to-b"], &sock_b, "");
    nv_ok(
        &[
            "sa",
            "add",
            "name=a-to-b",
            "direction=in",
            &format!("spi={spi:#x}"),
            &format!("local={b_out}"),
            &format!("remote={a_out}"),
            "suite=aes128gcm16",
            "enc_key=-",
        ],
        &sock_b,
        &format!("{key}\n"),
    );
    check(&hosts, "sa del + sa add", &mut replayed);
    // The policy names a-to-b again: the live sender goes on.
    delivered += ping(&lab, &a, &b_in, 3, "0.1");
    // A clean restart: nothing lost.
    hosts.daemons[1].stop();
    hosts.daemons[1] = lab.start_daemon(&b, "b", &hosts.configs[1]).unwrap();
    check(&hosts, "clean restart", &mut replayed);
    let got = ping(&lab, &a, &b_in, 3, "0.1");
    assert_eq!(
        got, 3,
        "a live sender lost pings after a clean restart of the receiver"
    );
    delivered += got;
    // A crash: at most one block (the minimum, 8 packets, at this rate) lost, then accepted again.
    // (kill waits until the daemon is gone.)
    hosts.daemons[1].kill();
    hosts.daemons[1] = lab.start_daemon(&b, "b", &hosts.configs[1]).unwrap();
    check(&hosts, "kill -9 and restart", &mut replayed);
    let sent = 80;
    let got = ping(&lab, &a, &b_in, sent, "0.05");
    delivered += got;
    let lost = sent - got;
    eprintln!("after a crash of the receiver: {lost} of {sent} pings (every 50 ms) lost");
    assert!(
        lost <= netveil_daemon::runtime::state::RX_MIN_BLOCK as u32 + 2,
        "{lost} lost after the crash"
    );
    // Every echo request reached b's TUN once: a replayed one would be there twice, and every one a's pings got a
    // reply for is there.
    let pcap = tun.stop().unwrap();
    let got = echo_requests(&pcap);
    let unique: std::collections::HashSet<&(String, String)> = got.iter().collect();
    assert_eq!(
        unique.len(),
        got.len(),
        "{replayed} replayed frames: some reached b's TUN again"
    );
    assert!(
        got.len() >= delivered as usize,
        "{} < {delivered}",
        got.len()
    );
}

/// Item 3: a policy added at runtime, whose route into the TUN was added at runtime too (as with `ip xfrm`),
/// covers traffic that otherwise follows a route in clear. After kill -9 and `netveil up` the new daemon restores
/// it: that traffic is dropped, never sent in clear; uncovered traffic on the same path is seen in clear (the
/// capture works); `netveil down` lifts it.
#[test]
fn runtime_policy_coverage_survives_a_crash_and_up() {
    let _g = serial();
    let mut lab = Lab::new("nvrsc").unwrap().with_netveil(NETVEIL);
    let mut hosts = TwoHosts::up(&mut lab, &HostPair::esp("aes128gcm16")).expect("setup");
    let a = hosts.ns[0].clone();
    let sock = lab.socket_path("a");
    let (a_out, b_out) = (
        hosts.addrs[0].outer.to_string(),
        hosts.addrs[1].outer.to_string(),
    );
    let tun = hosts.pair.tun.clone();
    // Clear paths to two remote networks through b; one of them will be covered by a runtime policy.
    for net in ["10.99.0.0/24", "10.98.0.0/24"] {
        lab.exec_ok(
            &a,
            &["ip", "route", "add", net, "via", &b_out, "metric", "100"],
        )
        .unwrap();
    }
    let key = "00112233445566778899aabbccddeeff01020304";
    nv_ok(
        &[
            "sa",
            "add",
            "name=a-to-c",
            "direction=out",
            "spi=0x3001",
            &format!("local={a_out}"),
            &format!("remote={b_out}"),
            "suite=aes128gcm16",
            "enc_key=-",
        ],
        &sock,
        &format!("{key}\n"),
    );
    nv_ok(
        &[
            "policy",
            "add",
            "--position",
            "0",
            "name=to-c",
            "direction=out",
            "dst=10.99.0.0/24",
            "action=protect",
            "sas=a-to-c",
        ],
        &sock,
        "",
    );
    lab.exec_ok(
        &a,
        &[
            "ip",
            "route",
            "add",
            "10.99.0.0/24",
            "dev",
            &tun,
            "metric",
            "10",
        ],
    )
    .unwrap();
    let mut cap = lab
        .capture(&a, "veth-a", "cover.pcap", 128, &["icmp", "or", "esp"])
        .unwrap();
    ping(&lab, &a, "10.99.0.1", 2, "0.1");
    hosts.daemons[0].kill();
    hosts.daemons[0] = lab.start_daemon(&a, "a", &hosts.configs[0]).unwrap();
    let log = hosts.daemon(0).log();
    assert!(log.contains("restored 1 policies"), "{log}");
    let pol = nv_ok(&["policy", "list", "--json"], &sock, "");
    assert!(pol.contains("\"to-c\""), "{pol}");
    ping(&lab, &a, "10.99.0.1", 3, "0.1");
    ping(&lab, &a, "10.98.0.1", 3, "0.1");
    let frames = lab::tshark_frames(&cap.stop().unwrap(), None, None).expect("tshark");
    let clear_to = |dst: &str| {
        frames
            .iter()
            .filter(|f| f.protocols.contains(":icmp") && f.dst == dst)
            .count()
    };
    assert!(
        frames
            .iter()
            .any(|f| f.esp_spi.as_deref() == Some("0x00003001")),
        "the runtime SA's ESP was not seen before the crash"
    );
    assert!(clear_to("10.98.0.1") >= 3, "the capture saw no clear ping");
    assert_eq!(
        clear_to("10.99.0.1"),
        0,
        "covered traffic left in clear after the crash and `up`"
    );
    // `netveil down` lifts the block and forgets the runtime policy.
    drop(hosts);
    lab.netveil_down(&a, "a").unwrap();
    let state = lab.dir().join("state-a");
    assert!(
        !state.join(format!("policies-{tun}.toml")).exists(),
        "`netveil down` left the runtime policies"
    );
}
