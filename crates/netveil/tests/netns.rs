//! End-to-end tests in network namespaces: two hosts joined by a veth pair, a `netveil up` daemon in each.
//! They need root (CI runs them as root) and the tools installed by .ci/setup (iproute2, iputils-ping, tcpdump,
//! tshark, nftables). The tests are serialized: each one saturates the two CPUs during its TCP transfer.

use netveil_lab::lab::{self, Family, HostPair, Lab, Mode, TwoHosts};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");
const MB100: u64 = 100 * 1024 * 1024;
const MB20: u64 = 20 * 1024 * 1024;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    if !lab::is_root() {
        panic!(
            "the netns tests need root (network namespaces, TUN, raw sockets): run them as root, e.g. \
             sudo -E cargo test --release -p netveil --test netns"
        );
    }
    for t in ["ip", "ping", "tcpdump", "tshark", "nft"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn new_lab() -> Lab {
    Lab::new("nvt").expect("lab").with_netveil(NETVEIL)
}

/// What the wire must look like.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Wire {
    Esp,
    Ah,
    UdpEsp,
}

struct Case {
    pair: HostPair,
    wire: Wire,
    /// Check tshark's decryption and ICV verification of the ping capture.
    decrypt: bool,
    tcp_bytes: u64,
}

impl Case {
    fn esp(suite: &str) -> Case {
        Case {
            decrypt: lab::wireshark_can_decrypt(suite),
            pair: HostPair::esp(suite),
            wire: Wire::Esp,
            // 3DES moves about 80 Mbit/s here: 100 MiB took 10.5 s per suite, 20 MiB (some 15,000 full-size
            // packets, sequence numbers and replay windows well exercised) takes 2.
            tcp_bytes: if suite.starts_with("3des") {
                MB20
            } else {
                MB100
            },
        }
    }
}

fn run(case: Case) {
    let _g = serial();
    let t0 = Instant::now();
    let mut lab = new_lab();
    let hosts = TwoHosts::up(&mut lab, &case.pair).unwrap_or_else(|e| panic!("setup: {e}"));
    let label = format!(
        "{} {:?} {:?} {}{}{}{}",
        case.pair.suite,
        case.pair.protocol,
        case.pair.mode,
        match case.pair.mode {
            Mode::Tunnel => format!("{:?}-in-{:?}", case.pair.inner, case.pair.outer),
            Mode::Transport => format!("{:?}", case.pair.outer),
        },
        if case.pair.esn { " esn" } else { "" },
        if case.pair.udp_encap {
            " udp-encap"
        } else {
            ""
        },
        case.pair
            .bundle_ah
            .as_ref()
            .map(|s| format!(" +ah-{s}"))
            .unwrap_or_default(),
    );
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        panic!(
            "{label}: {what}: {e}\n--- config a ---\n{}\n--- daemon a ---\n{}\n--- daemon b ---\n{}",
            hosts.configs[0],
            hosts.daemon(0).log(),
            hosts.daemon(1).log()
        )
    };

    // Ping under capture.
    let mut cap = lab
        .capture(&hosts.ns[0], hosts.veth[0], "ping.pcap", 256, &[])
        .unwrap_or_else(|e| fail("tcpdump", &e));
    let out = hosts
        .ping(&lab, 0, 3, "0.1")
        .unwrap_or_else(|e| fail("ping", &e));
    assert!(out.contains(" 0% packet loss"), "{label}: ping: {out}");
    let pcap = cap.stop().unwrap();

    // The wire: only the expected protocol between the outer addresses; nothing of the inner traffic in clear.
    let frames = lab::tshark_frames(&pcap, None, None).unwrap_or_else(|e| fail("tshark", &e));
    // IP frames, without IPv6 neighbour discovery and multicast listener reports of the veth itself.
    let link_local = |f: &&lab::Frame| {
        f.protocols.ends_with(":icmpv6")
            && !f.icmpv6_types.is_empty()
            && f.icmpv6_types
                .iter()
                .all(|t| (130..=137).contains(t) || *t == 143)
    };
    let ip_frames: Vec<_> = frames
        .iter()
        .filter(|f| f.outer_proto.is_some() && !link_local(f))
        .collect();
    let inner: Vec<String> = hosts.addrs.iter().map(|h| h.inner.to_string()).collect();
    let outer: Vec<String> = hosts.addrs.iter().map(|h| h.outer.to_string()).collect();
    for f in &ip_frames {
        let ok = match case.wire {
            Wire::Esp => f.outer_proto == Some(50),
            Wire::Ah => f.outer_proto == Some(51),
            Wire::UdpEsp => f.outer_proto == Some(17) && f.udp_ports.contains(&4500),
        };
        assert!(ok, "{label}: unexpected packet on the wire: {f:?}");
        assert!(
            outer.contains(&f.src) && outer.contains(&f.dst) && f.src != f.dst,
            "{label}: packet not between the outer addresses: {f:?}"
        );
        if case.pair.bundle_ah.is_some() {
            // AH outside, ESP inside (the ESP packet is what AH authenticates).
            assert!(
                f.protocols.contains(":ah:esp"),
                "{label}: not AH+ESP: {f:?}"
            );
        }
        if case.wire != Wire::Ah || case.pair.bundle_ah.is_some() {
            // ESP hides everything: no inner header, no ICMP.
            assert!(
                !f.protocols.contains("icmp") && !f.protocols.contains("tcp"),
                "{label}: clear inner protocol visible: {f:?}"
            );
            if case.pair.mode == Mode::Tunnel {
                assert!(
                    !f.addrs.iter().any(|a| inner.contains(a)),
                    "{label}: inner address visible: {f:?}"
                );
            }
        }
    }
    assert!(
        ip_frames.len() >= 6,
        "{label}: expected >= 6 protected packets on the wire, got {}: {frames:?}",
        ip_frames.len()
    );

    // Decryption with the exported keys.
    if case.decrypt {
        let keys = lab.dir().join("wireshark");
        hosts
            .daemon(0)
            .keys_wireshark(&keys)
            .unwrap_or_else(|e| fail("netveil keys", &e));
        let dec = lab::tshark_frames(&pcap, Some(&keys), Some("esp"))
            .unwrap_or_else(|e| fail("tshark decrypt", &e));
        let icmp = dec.iter().filter(|f| f.protocols.contains("icmp")).count();
        // null-null has no ICV to check.
        let good = if case.pair.suite == "null-null" {
            dec.iter().filter(|f| f.icv_good.is_none()).count()
        } else {
            dec.iter().filter(|f| f.icv_good == Some(true)).count()
        };
        assert!(
            !dec.is_empty() && good == dec.len() && good == ip_frames.len(),
            "{label}: tshark verified {good} ICVs of {} ESP packets ({} on the wire): {dec:?}",
            dec.len(),
            ip_frames.len()
        );
        assert_eq!(icmp, dec.len(), "{label}: decrypted packets: {dec:?}");
    }

    // TCP.
    let t = hosts
        .tcp(0, case.tcp_bytes)
        .unwrap_or_else(|e| fail("TCP transfer", &e));
    assert_eq!(t.bytes, case.tcp_bytes);

    // Counters.
    let st = hosts
        .daemon(0)
        .status_json()
        .unwrap_or_else(|e| fail("status", &e));
    for sa in st["sas"].as_array().expect("sas") {
        assert!(
            sa["packets"].as_u64().unwrap_or(0) > 0,
            "{label}: SA without packets: {sa}"
        );
        assert_eq!(sa["auth_failed"].as_u64(), Some(0), "{label}: {sa}");
    }
    eprintln!(
        "{label}: ok: ping, {} ESP/AH packets checked{}, {} MiB TCP in {:.2} s ({:.0} Mbit/s); total {:.1} s",
        ip_frames.len(),
        if case.decrypt { " and decrypted" } else { "" },
        t.bytes >> 20,
        t.seconds,
        t.mbit_per_s(),
        t0.elapsed().as_secs_f64()
    );
}

macro_rules! esp_suite_tests {
    ($($name:ident => $suite:expr,)*) => {
        $(
            #[test]
            fn $name() {
                run(Case::esp($suite));
            }
        )*
    };
}

esp_suite_tests! {
    esp_tunnel_v4_aes128gcm16 => "aes128gcm16",
    esp_tunnel_v4_aes256gcm16 => "aes256gcm16",
    esp_tunnel_v4_aes128gcm12 => "aes128gcm12",
    esp_tunnel_v4_aes128gcm8 => "aes128gcm8",
    esp_tunnel_v4_chacha20poly1305 => "chacha20poly1305",
    esp_tunnel_v4_aes128gmac => "aes128gmac",
    esp_tunnel_v4_aes256gmac => "aes256gmac",
    esp_tunnel_v4_aes128_sha1 => "aes128-sha1",
    esp_tunnel_v4_aes256_sha256 => "aes256-sha256",
    esp_tunnel_v4_aes128_sha384 => "aes128-sha384",
    esp_tunnel_v4_aes256_sha512 => "aes256-sha512",
    esp_tunnel_v4_3des_sha1 => "3des-sha1",
    esp_tunnel_v4_3des_md5 => "3des-md5",
    esp_tunnel_v4_null_sha1 => "null-sha1",
    esp_tunnel_v4_null_sha256 => "null-sha256",
    esp_tunnel_v4_null_null => "null-null",
}

fn transport(suite: &str) -> Case {
    let mut c = Case::esp(suite);
    c.pair.mode = Mode::Transport;
    c
}

#[test]
fn esp_transport_v4_aes128gcm16() {
    run(transport("aes128gcm16"));
}

#[test]
fn esp_transport_v4_aes256_sha256() {
    run(transport("aes256-sha256"));
}

#[test]
fn esp_tunnel_v6_in_v6() {
    let mut c = Case::esp("aes128gcm16");
    c.pair.outer = Family::V6;
    c.pair.inner = Family::V6;
    run(c);
}

#[test]
fn esp_tunnel_v4_in_v6() {
    let mut c = Case::esp("aes256-sha256");
    c.pair.outer = Family::V6;
    run(c);
}

#[test]
fn esp_tunnel_v6_in_v4() {
    let mut c = Case::esp("chacha20poly1305");
    c.pair.inner = Family::V6;
    run(c);
}

#[test]
fn esp_transport_v6() {
    let mut c = transport("aes128gcm16");
    c.pair.outer = Family::V6;
    run(c);
}

#[test]
fn esp_udp_encap() {
    let mut c = Case::esp("aes128gcm16");
    c.pair.udp_encap = true;
    c.wire = Wire::UdpEsp;
    run(c);
}

/// ESP in UDP in transport mode: its datagrams need their outer headers, so the coalesced receive gives them
/// back (the tunnel-mode ones are opened where they lie).
#[test]
fn esp_udp_encap_transport() {
    let mut c = transport("aes128gcm16");
    c.pair.udp_encap = true;
    c.wire = Wire::UdpEsp;
    run(c);
}

#[test]
fn esp_udp_encap_v6() {
    let mut c = Case::esp("aes128gcm16");
    c.pair.outer = Family::V6;
    c.pair.inner = Family::V6;
    c.pair.udp_encap = true;
    c.wire = Wire::UdpEsp;
    run(c);
}

#[test]
fn esp_esn() {
    let mut c = Case::esp("aes256-sha256");
    c.pair.esn = true;
    // The ESN's high bits enter the ICV: tshark needs them configured, which the exported table does not carry.
    c.decrypt = false;
    run(c);
}

fn ah(suite: &str, mode: Mode) -> Case {
    let mut pair = HostPair::ah(suite);
    pair.mode = mode;
    Case {
        pair,
        wire: Wire::Ah,
        decrypt: false,
        tcp_bytes: MB100,
    }
}

#[test]
fn ah_tunnel_sha1() {
    run(ah("sha1", Mode::Tunnel));
}

#[test]
fn ah_tunnel_md5() {
    run(ah("md5", Mode::Tunnel));
}

#[test]
fn ah_tunnel_sha256() {
    run(ah("sha256", Mode::Tunnel));
}

#[test]
fn ah_transport_sha1() {
    run(ah("sha1", Mode::Transport));
}

#[test]
fn ah_transport_md5() {
    run(ah("md5", Mode::Transport));
}

#[test]
fn ah_transport_sha256() {
    run(ah("sha256", Mode::Transport));
}

#[test]
fn esp_ah_bundle() {
    let mut c = Case::esp("aes128gcm16");
    c.pair.bundle_ah = Some("sha256".into());
    c.wire = Wire::Ah;
    c.decrypt = false;
    run(c);
}

fn clear_drops(d: &lab::Daemon) -> u64 {
    let st = d.status_json().expect("status");
    st["drops"]["rx:clear-but-protected"]
        .as_u64()
        .unwrap_or_else(|| panic!("no rx:clear-but-protected counter: {st}"))
}

/// Clear traffic that an inbound protect policy covers never reaches the host and is counted.
#[test]
fn clear_traffic_dropped_transport() {
    let _g = serial();
    let mut lab = new_lab();
    let mut pair = HostPair::esp("aes128gcm16");
    pair.mode = Mode::Transport;
    let hosts = TwoHosts::up(&mut lab, &pair).expect("setup");
    hosts.ping(&lab, 1, 2, "0.1").expect("protected ping");
    let before = clear_drops(hosts.daemon(0));
    // From b, bypass its netveil with the daemon's own fwmark (main routing table): clear ICMP and UDP to a.
    let a = hosts.addrs[0].inner.to_string();
    let mark = lab::TRANSPORT_FWMARK.to_string();
    let out = lab
        .exec(
            &hosts.ns[1],
            &[
                "ping", "-n", "-m", &mark, "-c", "3", "-i", "0.1", "-W", "1", &a,
            ],
        )
        .expect("ping");
    assert!(
        !out.status.success(),
        "clear ping was answered: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let dst = std::net::SocketAddr::new(hosts.addrs[0].inner, 9999);
    lab.in_ns(&hosts.ns[1], move || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        netveil_io::os::set_mark(&s, lab::TRANSPORT_FWMARK).expect("SO_MARK");
        for _ in 0..2 {
            s.send_to(b"clear", dst).unwrap();
        }
    })
    .expect("udp");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let after = clear_drops(hosts.daemon(0));
    assert!(
        after >= before + 5,
        "rx:clear-but-protected went from {before} to {after} (expected +5: 3 ICMP, 2 UDP)"
    );
    // The protected path still works.
    hosts.ping(&lab, 1, 2, "0.1").expect("protected ping after");
}

/// Tunnel mode: a packet from the peer's inner address arriving in clear on the veth is dropped and counted.
#[test]
fn clear_traffic_dropped_tunnel() {
    let _g = serial();
    let mut lab = new_lab();
    let pair = HostPair::esp("aes128gcm16");
    let hosts = TwoHosts::up(&mut lab, &pair).expect("setup");
    let before = clear_drops(hosts.daemon(0));
    let (a_in, b_in, a_out) = (
        hosts.addrs[0].inner.to_string(),
        hosts.addrs[1].inner.to_string(),
        hosts.addrs[0].outer.to_string(),
    );
    let b = &hosts.ns[1];
    // In b, packets with the daemon's mark (which b's own fail-closed filter lets out) skip the TUN: route a's
    // inner address straight over the veth.
    let mark = netveil_daemon::engines::ip::config::DEFAULT_SOCKET_MARK.to_string();
    lab.ip(
        b,
        &["rule", "add", "fwmark", &mark, "table", "7", "pref", "10"],
    )
    .unwrap();
    lab.ip(
        b,
        &[
            "route",
            "add",
            &format!("{a_in}/32"),
            "via",
            &a_out,
            "dev",
            "veth-b",
            "src",
            &b_in,
            "table",
            "7",
        ],
    )
    .unwrap();
    let out = lab
        .exec(
            b,
            &[
                "ping", "-n", "-m", &mark, "-I", &b_in, "-c", "3", "-i", "0.1", "-W", "1", &a_in,
            ],
        )
        .unwrap();
    assert!(!out.status.success(), "clear ping answered");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let after = clear_drops(hosts.daemon(0));
    assert!(
        after >= before + 3,
        "rx:clear-but-protected went from {before} to {after} (expected +3)\n{}",
        String::from_utf8_lossy(
            &lab.exec(&hosts.ns[0], &["nft", "list", "ruleset"])
                .unwrap()
                .stdout
        )
    );
    hosts.ping(&lab, 1, 2, "0.1").expect("protected ping after");
}

/// `netveil status --json` counts packets and bytes on the SAs (both ends agree).
#[test]
fn status_counts_packets() {
    let _g = serial();
    let mut lab = new_lab();
    let hosts = TwoHosts::up(&mut lab, &HostPair::esp("aes256gcm16")).expect("setup");
    hosts.ping(&lab, 0, 5, "0.05").expect("ping");
    let a = hosts.daemon(0).status_json().unwrap();
    let b = hosts.daemon(1).status_json().unwrap();
    let sa = |v: &serde_json::Value, name: &str| -> serde_json::Value {
        v["sas"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no SA {name}: {v}"))
            .clone()
    };
    let (ab_out, ab_in) = (sa(&a, "a-to-b"), sa(&b, "a-to-b"));
    let (ba_out, ba_in) = (sa(&b, "b-to-a"), sa(&a, "b-to-a"));
    for s in [&ab_out, &ab_in, &ba_out, &ba_in] {
        assert_eq!(s["packets"].as_u64(), Some(5), "{s}");
        assert!(s["bytes"].as_u64().unwrap() >= 5 * 84, "{s}");
        assert_eq!(s["auth_failed"].as_u64(), Some(0), "{s}");
        assert_eq!(s["replayed"].as_u64(), Some(0), "{s}");
    }
    assert_eq!(ab_out["seq"].as_u64(), Some(5));
    assert_eq!(ab_out["bytes"], ab_in["bytes"]);
    assert_eq!(a["tx"]["packets"].as_u64(), Some(5), "{a}");
    assert_eq!(a["rx"]["packets"].as_u64(), Some(5), "{a}");
    assert_eq!(ab_out["suite"], "aes256gcm16");
    // The human-readable table renders the same counters.
    let text = hosts.daemon(0).status_text().unwrap();
    assert!(
        text.contains("a-to-b") && text.contains("aes256gcm16"),
        "{text}"
    );
}

fn ns_state(lab: &Lab, ns: &str) -> (String, String, String, String) {
    let run =
        |args: &[&str]| String::from_utf8_lossy(&lab.exec(ns, args).unwrap().stdout).to_string();
    (
        run(&["ip", "-o", "link", "show"]),
        run(&["ip", "-4", "rule", "show"]) + &run(&["ip", "-6", "rule", "show"]),
        run(&["ip", "-4", "route", "show", "table", "all"]),
        run(&["nft", "list", "ruleset"]),
    )
}

/// A bad configuration is refused with exit code 2 naming the key; a setup failure undoes every change.
#[test]
fn bad_config_leaves_nothing_behind() {
    let _g = serial();
    let mut lab = new_lab();
    let ns = lab.add_ns("a").unwrap();
    // The tunnel's local address is the host's (netveil checks that before it changes anything).
    lab.ip(&ns, &["addr", "add", "192.0.2.1/32", "dev", "lo"])
        .unwrap();
    let before = ns_state(&lab, &ns);
    let sock = lab.socket_path("bad");
    let good = HostPair::esp("aes128gcm16")
        .configs([&sock, &sock])
        .unwrap()[0]
        .clone();

    // Validation error: the key is named, exit code 2.
    let bad = good.replacen(
        "suite = \"aes128gcm16\"\nenc_key = \"",
        "suite = \"aes128gcm16\"\nenc_key = \"00",
        1,
    );
    assert_ne!(bad, good);
    let path = lab.dir().join("bad.toml");
    std::fs::write(&path, &bad).unwrap();
    let out = lab
        .exec(&ns, &[NETVEIL, "up", "-c", path.to_str().unwrap()])
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("sa[0].enc_key"), "{err}");
    assert_eq!(
        ns_state(&lab, &ns),
        before,
        "namespace changed after a refused config"
    );

    let unknown = good.replacen("mtu = ", "mtux = ", 1);
    std::fs::write(&path, &unknown).unwrap();
    let out = lab
        .exec(&ns, &[NETVEIL, "up", "-c", path.to_str().unwrap()])
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("mtux"), "{err}");
    assert_eq!(ns_state(&lab, &ns), before);

    // Valid, but setup fails half-way (the second route already exists): everything done so far is undone.
    let failing = good.replacen(
        "mtu = 1400\n",
        "mtu = 1400\nfwmark = 77\nroutes = [\"203.0.113.0/24\", \"203.0.113.0/24\"]\n",
        1,
    );
    std::fs::write(&path, &failing).unwrap();
    let out = lab
        .exec(
            &ns,
            &[NETVEIL, "up", "--fresh-keys", "-c", path.to_str().unwrap()],
        )
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "setup should fail: {err}");
    assert!(err.contains("203.0.113.0/24"), "{err}");
    assert_eq!(
        ns_state(&lab, &ns),
        before,
        "changes left behind after a failed setup: {err}"
    );
    assert!(!sock.exists());
}

/// Path MTU through a tunnel whose interface MTU is the link's (1,500): a packet that sealed would not fit the
/// link is not sealed (`tx:too-big-for-path`), and its sender gets ICMP "fragmentation needed" with the largest
/// size that fits: 1,438 for AES-CBC with HMAC-SHA1-96 in tunnel mode over IPv4 (1,500 less 20 + 8 + 16 + 12, the
/// payload and its 2-byte trailer padded to 16). ping shows it; the kernel learns it, and TCP transfers at the
/// interface's full MTU complete both ways (before, raw ESP too big for the link was refused by the kernel and a
/// transfer stalled). The kernel refuses nothing (`tx:send-refused` stays 0), and a packet of the size that fits
/// goes through.
#[test]
fn packets_too_big_for_the_path_teach_their_sender_the_size_that_fits() {
    let _g = serial();
    let mut lab = new_lab();
    let pair = HostPair {
        mtu: 1500,
        ..HostPair::esp("aes128-sha1")
    };
    let h = TwoHosts::up(&mut lab, &pair).unwrap();
    let ping = |from: usize, size: &str| {
        let dst = h.addrs[1 - from].inner.to_string();
        lab.exec(
            &h.ns[from],
            &[
                "ping", "-n", "-c", "2", "-i", "0.2", "-W", "1", "-M", "do", "-s", size, &dst,
            ],
        )
        .unwrap()
    };
    let drops = |d: &netveil_lab::lab::Daemon, name: &str| {
        d.status_json().unwrap()["drops"][name]
            .as_u64()
            .unwrap_or(0)
    };
    // 1,000 + 28 bytes sealed: about 1,100, fits.
    assert!(ping(0, "1000").status.success());
    // TCP at the interface's MTU (MSS 1,460): its first full-size segments are answered, its kernel learns the
    // path's MTU, and it completes.
    let t = h.tcp(0, MB20).unwrap_or_else(|e| panic!("tcp: {e}"));
    assert_eq!(t.bytes, MB20);
    assert!(drops(h.daemon(0), "tx:too-big-for-path") >= 1);
    // From the other side (which sent only acknowledgements so far): 1,472 + 28 = 1,500 bytes inner, answered with
    // the size that fits; the kernel then refuses the second ping itself (a local error), so the daemon saw one.
    assert_eq!(drops(h.daemon(1), "tx:too-big-for-path"), 0);
    let o = ping(1, "1472");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains("Frag needed and DF set (mtu = 1438)"),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(drops(h.daemon(1), "tx:too-big-for-path"), 1);
    // The size that fits goes through, and TCP from this side too.
    assert!(ping(1, "1410").status.success());
    let t = h.tcp(1, MB20).unwrap_or_else(|e| panic!("tcp back: {e}"));
    assert_eq!(t.bytes, MB20);
    for d in 0..2 {
        assert_eq!(drops(h.daemon(d), "tx:send-refused"), 0, "daemon {d}");
    }
}

/// The same for IPv6 inside IPv4: a packet that sealed would not fit is answered with ICMPv6 "packet too big" and
/// the size that fits (1,438 again: the inner family does not change the overhead), and TCP at the interface's MTU
/// completes.
#[test]
fn ipv6_packets_too_big_for_the_path_get_packet_too_big() {
    let _g = serial();
    let mut lab = new_lab();
    let pair = HostPair {
        mtu: 1500,
        inner: Family::V6,
        ..HostPair::esp("aes128-sha1")
    };
    let h = TwoHosts::up(&mut lab, &pair).unwrap();
    let drops = |d: usize, name: &str| {
        h.daemon(d).status_json().unwrap()["drops"][name]
            .as_u64()
            .unwrap_or(0)
    };
    // TCP first, from the side whose peer has learned nothing yet (so that the peer advertises the MSS of its
    // interface's MTU): its full-size segments are answered, and it completes.
    let t = h.tcp(1, MB20).unwrap_or_else(|e| panic!("tcp: {e}"));
    assert_eq!(t.bytes, MB20);
    assert!(drops(1, "tx:too-big-for-path") >= 1);
    // ping from the other side: told the size that fits.
    let dst = h.addrs[1].inner.to_string();
    let o = lab
        .exec(
            &h.ns[0],
            &[
                "ping", "-6", "-n", "-c", "2", "-i", "0.2", "-W", "1", "-M", "do", "-s", "1452",
                &dst,
            ],
        )
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains("Packet too big: mtu=1438"),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(drops(0, "tx:too-big-for-path"), 1);
    assert_eq!(drops(0, "tx:send-refused") + drops(1, "tx:send-refused"), 0);
}
