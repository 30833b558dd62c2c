//! l2sec end to end on the wired-LAN lab (a Linux bridge as the switch): three protected hosts, an eavesdropper and
//! an attacker. Needs root and the tools of .ci/setup (tcpdump, tshark, nft, scapy in .venv).

use netveil_lab::lab::{self, Daemon, Lab};
use netveil_lab::lan::{mac_str, repeated_blocks, L2Opts, Lan, PORT, TAP};
use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    assert!(lab::is_root(), "the l2sec LAN tests need root");
    for t in ["ip", "ping", "tcpdump", "tshark", "nft"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn python() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    assert!(p.exists(), "{} is missing: run .ci/setup", p.display());
    p
}

fn attack(script: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/attacks")
        .join(script)
}

fn spoof_script() -> PathBuf {
    attack("arp_spoof.py")
}

fn ping(lab: &Lab, lan: &Lan, from: &str, to: &str, count: u32) -> String {
    let dst = lan.station(to).unwrap().ip.to_string();
    let out = lab
        .exec(
            &lan.station(from).unwrap().ns,
            &[
                "ping",
                "-n",
                "-c",
                &count.to_string(),
                "-i",
                "0.2",
                "-W",
                "2",
                &dst,
            ],
        )
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// `from` broadcasts UDP datagrams to 192.0.2.255:`port`; every station of `to` answers each with a unicast
/// datagram. Returns the stations that answered every datagram.
fn broadcast_exchange(lan: &Lan, from: &str, to: &[&str], port: u16, n: usize) -> Vec<Ipv4Addr> {
    let mut servers = Vec::new();
    for t in to {
        let ns = lan.station(t).unwrap().ns.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        servers.push(
            lab::spawn_in_ns(&ns, move || -> netveil_lab::Result<usize> {
                let s =
                    UdpSocket::bind(("0.0.0.0", port)).map_err(netveil_lab::Error::io("bind"))?;
                s.set_read_timeout(Some(Duration::from_secs(5))).ok();
                let _ = ready_tx.send(());
                let mut buf = [0u8; 1500];
                let mut answered = 0;
                while answered < n {
                    let Ok((len, from)) = s.recv_from(&mut buf) else {
                        break;
                    };
                    s.send_to(&buf[..len], from)
                        .map_err(netveil_lab::Error::io("send"))?;
                    answered += 1;
                }
                Ok(answered)
            })
            .unwrap(),
        );
        ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    }
    let src = lan.station(from).unwrap().clone();
    let expect = to.len();
    let client = lab::spawn_in_ns(&src.ns, move || -> netveil_lab::Result<Vec<Ipv4Addr>> {
        let s = UdpSocket::bind((src.ip, 0)).map_err(netveil_lab::Error::io("bind"))?;
        s.set_broadcast(true)
            .map_err(netveil_lab::Error::io("SO_BROADCAST"))?;
        s.set_read_timeout(Some(Duration::from_millis(1500))).ok();
        let mut counts: std::collections::HashMap<Ipv4Addr, usize> = Default::default();
        let mut buf = [0u8; 1500];
        for i in 0..n {
            let msg = format!("l2sec broadcast {i}");
            let dst = SocketAddr::from((Ipv4Addr::new(192, 0, 2, 255), port));
            s.send_to(msg.as_bytes(), dst)
                .map_err(netveil_lab::Error::io("send"))?;
            let t = Instant::now();
            let mut got = 0;
            while got < expect && t.elapsed() < Duration::from_secs(3) {
                let Ok((len, from)) = s.recv_from(&mut buf) else {
                    break;
                };
                if &buf[..len] == msg.as_bytes() {
                    if let std::net::IpAddr::V4(a) = from.ip() {
                        *counts.entry(a).or_default() += 1;
                    }
                    got += 1;
                }
            }
        }
        Ok(counts
            .into_iter()
            .filter(|(_, c)| *c == n)
            .map(|(a, _)| a)
            .collect())
    })
    .unwrap();
    let mut ok = client.join().unwrap().unwrap().unwrap();
    for s in servers {
        let _ = s.join();
    }
    ok.sort();
    ok
}

/// How often each combination of the tshark `fields` occurs in a capture (one line per frame, tab-separated).
fn field_histogram(
    lab: &Lab,
    ns: &str,
    pcap: &std::path::Path,
    fields: &[&str],
) -> std::collections::BTreeMap<String, usize> {
    let mut args = vec!["tshark", "-n", "-r", pcap.to_str().unwrap(), "-T", "fields"];
    for f in fields {
        args.extend(["-e", f]);
    }
    let out = lab.exec_ok(ns, &args).unwrap();
    let mut kinds = std::collections::BTreeMap::new();
    for l in out.lines() {
        *kinds.entry(l.to_string()).or_insert(0usize) += 1;
    }
    kinds
}

fn l2(st: &Value) -> &Value {
    &st["l2sec"]
}

fn peer<'a>(st: &'a Value, mac: &[u8; 6]) -> Option<&'a Value> {
    l2(st)["peers"]
        .as_array()?
        .iter()
        .find(|p| p["mac"] == mac_str(mac))
}

#[test]
fn protected_lan_hides_everything_and_defeats_arp_spoofing() {
    let _g = serial();
    let mut lab = Lab::new("nvp").unwrap().with_netveil(NETVEIL);
    let lan = Lan::build(&mut lab, &["h1", "h2", "h3", "eve", "mallory"]).unwrap();
    let st = |n: &str| lan.station(n).unwrap().clone();
    let (h1, h2, h3, eve, mal) = (st("h1"), st("h2"), st("h3"), st("eve"), st("mallory"));
    let daemons: Vec<Daemon> = lan
        .protect(&lab, &["h1", "h2", "h3"], &L2Opts::default())
        .unwrap();

    // The eavesdropper captures everything its switch port gets.
    let mut cap = lab.capture(&eve.ns, PORT, "eve.pcap", 200, &[]).unwrap();
    // ARP resolution and ping between every pair.
    for (a, b) in [("h1", "h2"), ("h1", "h3"), ("h2", "h3"), ("h3", "h1")] {
        let out = ping(&lab, &lan, a, b, 3);
        assert!(out.contains(" 0% packet loss"), "{a} -> {b}: {out}");
    }
    // A TCP transfer, every byte checked.
    let t = lab::tcp_transfer(&h1.ns, &h2.ns, h2.ip.into(), 5001, 64 << 20).unwrap();
    println!(
        "TCP h1 -> h2 through l2sec: {} bytes at {:.0} Mbit/s",
        t.bytes,
        t.mbit_per_s()
    );
    // Broadcast UDP: h3 asks everyone, h1 and h2 answer.
    let answered = broadcast_exchange(&lan, "h3", &["h1", "h2"], 9999, 5);
    assert_eq!(answered, vec![h1.ip, h2.ip], "broadcast exchange");
    let pcap = cap.stop().unwrap();

    // What eve saw: only l2sec frames; tshark finds no ARP, IPv4 or IPv6, and no IP address at all.
    let frames = lab::tshark_frames(&pcap, None, None).unwrap();
    assert!(
        frames.len() > 1000,
        "eve's capture is too small: {}",
        frames.len()
    );
    let leaks: Vec<_> = frames
        .iter()
        .filter(|f| {
            f.protocols.contains("arp") || f.protocols.contains(":ip") || !f.addrs.is_empty()
        })
        .collect();
    assert!(
        leaks.is_empty(),
        "eve saw {} clear frames: {:?}",
        leaks.len(),
        &leaks[..leaks.len().min(5)]
    );
    let kinds = field_histogram(
        &lab,
        &eve.ns,
        &pcap,
        &["eth.type", "arp.src.proto_ipv4", "ip.addr", "ipv6.addr"],
    );
    assert_eq!(
        kinds.keys().collect::<Vec<_>>(),
        vec!["0x88b5\t\t\t"],
        "EtherTypes and addresses tshark found in eve's capture: {kinds:?}"
    );
    println!(
        "eve's capture: {} frames, all EtherType 0x88b5, no address",
        frames.len()
    );

    // Sessions: every pair has one, and nothing was dropped for bad authentication.
    for d in &daemons {
        let s = d.status_json().unwrap();
        let peers = l2(&s)["peers"].as_array().cloned().unwrap_or_default();
        assert!(
            peers.iter().filter(|p| !p["session"].is_null()).count() >= 2,
            "{}: {}",
            d.name,
            serde_json::to_string_pretty(&s).unwrap()
        );
        let rx = &l2(&s)["rx_drops"];
        for bad in ["auth-failed", "bad-signature", "replayed", "malformed"] {
            assert!(rx[bad].is_null(), "{}: {bad}: {rx}", d.name);
        }
        println!("{}", d.status_text().unwrap());
    }

    // Mallory spoofs ARP replies telling h1 that h2's address is at mallory's MAC, continuously, as arpspoof
    // does. In the unprotected lab (tests/lan.rs) this redirects h1's traffic; here the forged frames are not
    // l2sec frames and h1's port drops them.
    let before = daemons[0].status_json().unwrap();
    let mut spoofer = lab
        .command(
            &mal.ns,
            &[
                python().to_str().unwrap(),
                spoof_script().to_str().unwrap(),
                PORT,
                &h1.ip.to_string(),
                &mac_str(&h1.mac),
                &h2.ip.to_string(),
                &mac_str(&mal.mac),
                "25",
                "0.2",
            ],
        )
        .spawn()
        .unwrap();
    let mut mcap = lab
        .capture(&mal.ns, PORT, "mallory.pcap", 200, &[])
        .unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(4) {
        let out = lab
            .exec_ok(
                &h1.ns,
                &["ip", "-4", "neigh", "show", &h2.ip.to_string(), "dev", TAP],
            )
            .unwrap();
        assert!(
            !out.contains(&mac_str(&mal.mac)),
            "the spoofed ARP entry took: {out}"
        );
        let out = ping(&lab, &lan, "h1", "h2", 1);
        assert!(out.contains(" 0% packet loss"), "{out}");
    }
    let _ = spoofer.wait();
    let mpcap = mcap.stop().unwrap();
    let after = daemons[0].status_json().unwrap();
    let clear_in = |s: &Value| l2(s)["counters"]["clear_dropped_in"].as_u64().unwrap_or(0);
    assert!(
        clear_in(&after) >= clear_in(&before) + 10,
        "h1's port did not drop the forged ARP replies: {} -> {}",
        clear_in(&before),
        clear_in(&after)
    );
    let mframes = lab::tshark_frames(&mpcap, None, None).unwrap();
    let redirected = mframes
        .iter()
        .filter(|f| f.protocols.contains("icmp"))
        .count();
    assert_eq!(redirected, 0, "mallory received h1's ICMP in clear");
    let h2_on_tap = lab
        .exec_ok(
            &h1.ns,
            &["ip", "-4", "neigh", "show", &h2.ip.to_string(), "dev", TAP],
        )
        .unwrap();
    assert!(h2_on_tap.contains(&mac_str(&h2.mac)), "{h2_on_tap}");
    println!(
        "ARP spoofing: {} forged frames dropped at h1's port, h1 still maps {} to {}",
        clear_in(&after) - clear_in(&before),
        h2.ip,
        mac_str(&h2.mac)
    );
    let p = peer(&after, &h2.mac).expect("h1 has h2 as a peer");
    // h2 acknowledged the 64 MiB through the session. Its daemon hands TCP segments to its TAP coalesced into
    // segments of up to 64 KiB (GRO), and h2's kernel acknowledges each at least every second one: at least
    // 64 MiB / 64 KiB / 2 = 512 frames. (An earlier bound of 1000 assumed an acknowledgement per two wire segments;
    // how many there are depends on how well the segments coalesce, and it failed with 695-865 on a quiet machine,
    // with builds of this tree and of the issue's earlier commits alike.)
    assert!(p["rx_frames"].as_u64().unwrap_or(0) >= 512, "{p}");
    let _ = h3;
}

/// The thesis' pattern demonstration, measured: the same repetitive traffic (pings whose payload repeats a
/// 16-byte pattern) through ECB, CBC and AEAD suites; eve counts repeated cipher blocks in the encrypted sections.
/// The null suite (noENC-noHMAC, no ICV) shows the clear pattern: the framing alone hides nothing.
#[test]
fn ecb_leaks_patterns_cbc_and_aead_do_not() {
    let _g = serial();
    let mut results = Vec::new();
    for (suite, block, icv) in [
        ("blowfish-ecb-sha1", 8, 20),
        ("aes128-ecb-sha1", 16, 20),
        ("blowfish-cbc-sha1", 8, 20),
        ("aes128-cbc-sha1", 16, 20),
        ("aes128gcm", 16, 16),
        ("chacha20poly1305", 16, 16),
        ("null-null", 16, 0),
    ] {
        let mut lab = Lab::new("nve").unwrap().with_netveil(NETVEIL);
        let lan = Lan::build(&mut lab, &["h1", "h2", "eve"]).unwrap();
        let mut o = L2Opts::suite(suite);
        o.signatures = false;
        let _d = lan.protect(&lab, &["h1", "h2"], &o).unwrap();
        let eve = lan.station("eve").unwrap().clone();
        // Warm up (ARP, SEP), then capture only the repetitive traffic.
        let out = ping(&lab, &lan, "h1", "h2", 1);
        assert!(out.contains(" 0% packet loss"), "{suite}: {out}");
        let mut cap = lab.capture(&eve.ns, PORT, "eve.pcap", 2000, &[]).unwrap();
        let h2 = lan.station("h2").unwrap().ip.to_string();
        let out = lab
            .exec_ok(
                &lan.station("h1").unwrap().ns,
                &[
                    "ping",
                    "-n",
                    "-c",
                    "20",
                    "-i",
                    "0.05",
                    "-s",
                    "1000",
                    "-p",
                    "000102030405060708090a0b0c0d0e0f",
                    &h2,
                ],
            )
            .unwrap();
        assert!(out.contains(" 0% packet loss"), "{suite}: {out}");
        let pcap = cap.stop().unwrap();
        let s = repeated_blocks(&pcap, netveil_l2sec::DEFAULT_ETHERTYPE, block, icv).unwrap();
        println!(
            "{suite:<18} {} frames, {} cipher blocks, {} repeated ({:.1}%)",
            s.frames,
            s.blocks,
            s.repeated,
            100.0 * s.repeated as f64 / s.blocks.max(1) as f64
        );
        assert!(s.frames >= 40, "{suite}: {s:?}");
        results.push((suite, s));
    }
    for (suite, s) in results {
        if suite.contains("ecb") || suite == "null-null" {
            assert!(
                s.repeated * 2 > s.blocks,
                "{suite}: ECB should repeat most blocks of repetitive traffic: {s:?}"
            );
        } else {
            assert_eq!(s.repeated, 0, "{suite}: repeated cipher blocks: {s:?}");
        }
    }
}

fn ns_state(lab: &Lab, ns: &str) -> String {
    let run = |args: &[&str]| lab.exec_ok(ns, args).unwrap_or_default();
    run(&["ip", "-o", "link", "show"])
        + &run(&["ip", "-o", "addr", "show"])
        + &run(&["nft", "list", "ruleset"])
}

/// Bad l2sec settings are refused with exit code 2 naming the key, before anything is changed.
#[test]
fn bad_l2sec_config_names_the_key_and_changes_nothing() {
    let _g = serial();
    let mut lab = Lab::new("nvp").unwrap().with_netveil(NETVEIL);
    let lan = Lan::build(&mut lab, &["h1", "h2"]).unwrap();
    let h1 = lan.station("h1").unwrap().clone();
    let good = lan
        .l2sec_configs(&lab, &["h1", "h2"], &L2Opts::default())
        .unwrap()[0]
        .clone();
    let before = ns_state(&lab, &h1.ns);
    let secret_line = good
        .lines()
        .find(|l| l.starts_with("group_secret"))
        .unwrap()
        .to_string();
    let key_line = good
        .lines()
        .find(|l| l.starts_with("public_key"))
        .unwrap()
        .to_string();
    let cases: Vec<(String, &str)> = vec![
        (
            good.replace(&secret_line, "group_secret = \"00112233\""),
            "l2sec.group_secret",
        ),
        (
            good.replace(&secret_line, "group_secret = \"not hex\""),
            "l2sec.group_secret",
        ),
        (
            good.replace("suites = [\"aes128gcm\"]", "suites = [\"rot13\"]"),
            "l2sec.suites[0]",
        ),
        (
            good.replace(
                "suites = [\"aes128gcm\"]",
                "suites = [\"blowfish-ecb-sha1\"]",
            ),
            "l2sec.suites[0]",
        ),
        (
            good.replace("suites = [\"aes128gcm\"]", "suites = [\"null-null\"]"),
            "l2sec.suites[0]",
        ),
        (
            good.replace("dh_groups = [\"x25519\"]", "dh_groups = [\"modp768\"]"),
            "l2sec.dh_groups[0]",
        ),
        (
            good.replace("[l2sec]", "[l2sec]\nethertype = 0x0806"),
            "l2sec.ethertype",
        ),
        (
            good.replace("[l2sec]", "[l2sec]\nlifetime_seconds = 1"),
            "l2sec.lifetime_seconds",
        ),
        (
            good.replace(&key_line, "public_key = \"abcd\""),
            "l2sec.peer[0].public_key",
        ),
        (good.replace(".l2key\"", ".missing\""), "l2sec.signing_key"),
        (good.replace("/24\"", "\""), "l2sec.address"),
        (
            good.replace("interface = \"eth0\"", "interface = \"eth9\""),
            "l2sec.interface",
        ),
        (
            good.replace("tap = \"l2s0\"", "tap = \"eth0\""),
            "l2sec.tap",
        ),
        (good.replace("[l2sec]", "[l2sec]\nfoo = 1"), "foo"),
        // The state directory is a file (the configuration itself).
        (
            good.lines()
                .map(|l| {
                    if l.starts_with("state_dir") {
                        format!("state_dir = \"{}\"", lab.dir().join("bad.toml").display())
                    } else {
                        l.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n"),
            "l2sec.state_dir",
        ),
        (
            good.replacen("ip = \"192.0.2.11\"", "ip = \"192.0.2.10\"", 1),
            "l2sec.peer[0].ip",
        ),
    ];
    let path = lab.dir().join("bad.toml");
    for (text, key) in cases {
        assert_ne!(text, good, "{key}: the case did not change the config");
        std::fs::write(&path, &text).unwrap();
        let out = lab
            .exec(&h1.ns, &[NETVEIL, "up", "-c", path.to_str().unwrap()])
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{key}: {err}");
        assert!(err.contains(key), "{key}: {err}");
        assert_eq!(ns_state(&lab, &h1.ns), before, "{key}: namespace changed");
        let out = lab
            .exec(&h1.ns, &[NETVEIL, "check", "-c", path.to_str().unwrap()])
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "check {key}");
    }
    std::fs::write(&path, &good).unwrap();
    let out = lab
        .exec_ok(&h1.ns, &[NETVEIL, "check", "-c", path.to_str().unwrap()])
        .unwrap();
    assert!(out.contains("ok (l2sec on eth0"), "{out}");
}

/// The thesis' choices (version 0: Blowfish-CBC with HMAC-SHA1, EtherType 0x1982) with a MODP key exchange.
#[test]
fn thesis_suite_with_modp_works() {
    let _g = serial();
    let mut lab = Lab::new("nvp").unwrap().with_netveil(NETVEIL);
    let lan = Lan::build(&mut lab, &["h1", "h2", "eve"]).unwrap();
    let (h1, h2, eve) = (
        lan.station("h1").unwrap().clone(),
        lan.station("h2").unwrap().clone(),
        lan.station("eve").unwrap().clone(),
    );
    let o = L2Opts {
        group_suite: "blowfish-cbc-sha1".into(),
        suites: vec!["blowfish-cbc-sha1".into()],
        dh_groups: vec!["modp2048".into()],
        ethertype: Some(netveil_l2sec::THESIS_ETHERTYPE),
        signatures: false,
        ..L2Opts::default()
    };
    let d = lan.protect(&lab, &["h1", "h2"], &o).unwrap();
    let mut cap = lab.capture(&eve.ns, PORT, "eve.pcap", 200, &[]).unwrap();
    let out = ping(&lab, &lan, "h1", "h2", 3);
    assert!(out.contains(" 0% packet loss"), "{out}");
    let t = lab::tcp_transfer(&h1.ns, &h2.ns, h2.ip.into(), 5002, 16 << 20).unwrap();
    println!(
        "TCP through l2sec v0 blowfish-cbc-sha1: {:.0} Mbit/s",
        t.mbit_per_s()
    );
    let pcap = cap.stop().unwrap();
    let kinds = field_histogram(&lab, &eve.ns, &pcap, &["eth.type"]);
    assert_eq!(
        kinds.keys().collect::<Vec<_>>(),
        vec!["0x1982"],
        "{kinds:?}"
    );
    let s = d[1].status_json().unwrap();
    let p = peer(&s, &h1.mac).expect("peer");
    assert_eq!(p["session"]["suite"], "blowfish-cbc-sha1", "{p}");
}

/// A host whose daemon stops gets its port back as it was; when it starts again (a new group epoch, no
/// sessions, an empty neighbour table) it rejoins: its ARP is accepted and the sessions are set up anew.
#[test]
fn a_restarted_host_gets_its_port_back_and_rejoins() {
    let _g = serial();
    let mut lab = Lab::new("nvp").unwrap().with_netveil(NETVEIL);
    let lan = Lan::build(&mut lab, &["h1", "h2"]).unwrap();
    let (h1, h2) = (
        lan.station("h1").unwrap().clone(),
        lan.station("h2").unwrap().clone(),
    );
    let before = ns_state(&lab, &h2.ns);
    let cfgs = lan
        .l2sec_configs(&lab, &["h1", "h2"], &L2Opts::default())
        .unwrap();
    let d1 = lab.start_daemon(&h1.ns, "h1", &cfgs[0]).unwrap();
    let mut d2 = lab.start_daemon(&h2.ns, "h2", &cfgs[1]).unwrap();
    for _ in 0..3 {
        let out = ping(&lab, &lan, "h1", "h2", 3);
        assert!(out.contains(" 0% packet loss"), "{out}");
        d2.stop();
        assert_eq!(
            ns_state(&lab, &h2.ns),
            before,
            "h2's namespace after the daemon stopped"
        );
        d2 = lab.start_daemon(&h2.ns, "h2", &cfgs[1]).unwrap();
        // h2 speaks first (ARP request under its new epoch, then SEP when h1 answers).
        let out = ping(&lab, &lan, "h2", "h1", 3);
        assert!(out.contains(" 0% packet loss"), "h2 did not rejoin: {out}");
    }
    let s = d1.status_json().unwrap();
    let p = peer(&s, &h2.mac).expect("peer");
    assert!(p["sessions"].as_u64().unwrap_or(0) >= 4, "{p}");
    // Each restart was learnt from h2's announcement (a newer epoch), and h2's epochs increased.
    assert!(
        count(&s, "counters", "peer_restarts") >= 3,
        "{}",
        l2(&s)["counters"]
    );
    let e = |d: &Daemon| l2(&d.status_json().unwrap())["epoch"].as_u64().unwrap();
    assert_eq!(p["epoch"].as_u64(), Some(e(&d2)), "{p}");
    assert!(d1
        .status_text()
        .unwrap()
        .contains(&format!("epoch {}", e(&d1))));
    let rx = &l2(&s)["rx_drops"];
    assert!(
        rx["auth-failed"].is_null() && rx["replayed"].is_null(),
        "{rx}"
    );
}

/// Sessions with a 4-second lifetime are rekeyed (a new key id, by SEP, before the old one ends) while traffic
/// flows, without losing or refusing anything.
#[test]
fn sessions_rekey_under_traffic() {
    let _g = serial();
    let mut lab = Lab::new("nvp").unwrap().with_netveil(NETVEIL);
    let lan = Lan::build(&mut lab, &["h1", "h2"]).unwrap();
    let (h1, h2) = (
        lan.station("h1").unwrap().clone(),
        lan.station("h2").unwrap().clone(),
    );
    let o = L2Opts {
        lifetime_seconds: Some(4),
        rekey_margin_seconds: Some(1),
        ..L2Opts::default()
    };
    let d = lan.protect(&lab, &["h1", "h2"], &o).unwrap();
    let t0 = Instant::now();
    let mut bytes = 0;
    while t0.elapsed() < Duration::from_secs(13) {
        let t = lab::tcp_transfer(&h1.ns, &h2.ns, h2.ip.into(), 5004, 64 << 20).unwrap();
        bytes += t.bytes;
        let out = ping(&lab, &lan, "h2", "h1", 2);
        assert!(out.contains(" 0% packet loss"), "{out}");
    }
    for (dm, other) in [(&d[0], &h2), (&d[1], &h1)] {
        let s = dm.status_json().unwrap();
        let p = peer(&s, &other.mac).expect("peer");
        assert!(p["sessions"].as_u64().unwrap_or(0) >= 3, "{}: {p}", dm.name);
        let rx = &l2(&s)["rx_drops"];
        for bad in ["auth-failed", "replayed", "no-session", "unknown-key-id"] {
            assert!(rx[bad].is_null(), "{}: {bad}: {rx}", dm.name);
        }
        assert!(
            l2(&s)["tx_drops"].as_object().is_none_or(|m| m.is_empty()),
            "{s}"
        );
        println!(
            "{}: {} sessions with {}, current key id {}",
            dm.name, p["sessions"], other.name, p["session"]["key_id"]
        );
    }
    println!("{} MiB moved across the rekeys", bytes >> 20);
}

/// The optional header fields in use: every frame carries the network's security number and a timestamp. A host
/// with the group secret but another security number (last schedule's, say) is not heard.
#[test]
fn security_number_and_timestamps_are_sent_and_enforced() {
    let _g = serial();
    let mut lab = Lab::new("nvp").unwrap().with_netveil(NETVEIL);
    let lan = Lan::build(&mut lab, &["h1", "h2", "h3", "eve"]).unwrap();
    let eve = lan.station("eve").unwrap().clone();
    let o = L2Opts {
        security_number: Some(0x00c0de),
        timestamps: true,
        ..L2Opts::default()
    };
    let mut cfgs = lan.l2sec_configs(&lab, &["h1", "h2", "h3"], &o).unwrap();
    // h3: same secret and keys, an old security number.
    cfgs[2] = cfgs[2].replace("security_number = 0x00c0de", "security_number = 0x00c0dd");
    let d: Vec<Daemon> = ["h1", "h2", "h3"]
        .iter()
        .zip(&cfgs)
        .map(|(n, c)| lab.start_daemon(&lan.station(n).unwrap().ns, n, c).unwrap())
        .collect();
    let mut cap = lab.capture(&eve.ns, PORT, "eve.pcap", 200, &[]).unwrap();
    let out = ping(&lab, &lan, "h1", "h2", 3);
    assert!(out.contains(" 0% packet loss"), "{out}");
    let out = ping(&lab, &lan, "h3", "h1", 2);
    assert!(out.contains("100% packet loss"), "h3 was heard: {out}");
    let pcap = cap.stop().unwrap();
    // First header byte: version 1 with SN and TS (0x39 for unicast frames; group frames add EP and SIG, 0x3f);
    // the security number follows the key id and the sequence number, and in group frames the 8-byte epoch.
    let first = field_histogram(&lab, &eve.ns, &pcap, &["data.data"]);
    let mut with_sn = 0;
    for (l, n) in &first {
        let sn_at = match &l[..2.min(l.len())] {
            "39" => 12,
            "3f" => 28,
            _ => panic!("a frame without SN/TS flags: {l}"),
        };
        assert!(l.len() > sn_at + 20, "{l}");
        assert!(
            &l[sn_at..sn_at + 6] == "00c0de" || &l[sn_at..sn_at + 6] == "00c0dd",
            "security number field: {l}"
        );
        with_sn += n;
    }
    assert!(with_sn > 10, "{first:?}");
    let s1 = d[0].status_json().unwrap();
    let rx = &l2(&s1)["rx_drops"];
    assert!(
        rx["wrong-security-number"].as_u64().unwrap_or(0) >= 1,
        "{rx}"
    );
    assert!(rx["stale-timestamp"].is_null(), "{rx}");
}

/// A counter of a status (`rx_drops`, `counters`, ...), 0 if absent.
fn count(st: &Value, section: &str, name: &str) -> u64 {
    l2(st)[section][name].as_u64().unwrap_or(0)
}

/// The review's replay across a restart, on the wire: mallory records h1's group frames (ARP, UDP broadcasts,
/// SEP, announcements) before and after a restart of h1's daemon, and scapy replays them to the LAN alternately,
/// one of each epoch. h2 delivers none of them and handles none (old epoch, replayed: counted); its host sees no
/// replayed datagram; h1 and h2 still talk.
#[test]
fn group_frames_replayed_across_a_restart_are_refused() {
    let _g = serial();
    let mut lab = Lab::new("nvr").unwrap().with_netveil(NETVEIL);
    let lan = Lan::build(&mut lab, &["h1", "h2", "mallory"]).unwrap();
    let st = |n: &str| lan.station(n).unwrap().clone();
    let (h1, h2, mal) = (st("h1"), st("h2"), st("mallory"));
    let cfgs = lan
        .l2sec_configs(&lab, &["h1", "h2"], &L2Opts::default())
        .unwrap();
    let mut d1 = lab.start_daemon(&h1.ns, "h1", &cfgs[0]).unwrap();
    let d2 = lab.start_daemon(&h2.ns, "h2", &cfgs[1]).unwrap();
    let epoch = |d: &Daemon| l2(&d.status_json().unwrap())["epoch"].as_u64().unwrap();
    let mut cap = lab
        .capture(&mal.ns, PORT, "recorded.pcap", 2000, &[])
        .unwrap();
    let traffic = |lab: &Lab| {
        let out = ping(lab, &lan, "h1", "h2", 2);
        assert!(out.contains(" 0% packet loss"), "{out}");
        assert_eq!(
            broadcast_exchange(&lan, "h1", &["h2"], 9999, 3),
            vec![h2.ip]
        );
    };
    traffic(&lab);
    let e1 = epoch(&d1);
    d1.stop();
    d1 = lab.start_daemon(&h1.ns, "h1", &cfgs[0]).unwrap();
    let restarted = Instant::now();
    let e2 = epoch(&d1);
    assert!(e2 > e1, "epochs {e1} then {e2}");
    traffic(&lab);
    // Past h1's last announcement (3 s after its start): from now on h1 sends no group frame by itself.
    std::thread::sleep(Duration::from_secs(4).saturating_sub(restarted.elapsed()));
    let pcap = cap.stop().unwrap();
    let rec = netveil_pcap::read_file(&pcap).unwrap();
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for r in &rec.records {
        let Ok(p) = netveil_l2sec::peek(&r.data, netveil_l2sec::DEFAULT_ETHERTYPE) else {
            continue;
        };
        if p.src.0 != h1.mac || p.dst.0[0] & 1 == 0 {
            continue;
        }
        match p.header.epoch {
            Some(e) if e == e1 => before.push(r.clone()),
            Some(e) if e == e2 => after.push(r.clone()),
            e => panic!("a group frame of h1 with epoch {e:?} (expected {e1} or {e2})"),
        }
    }
    // ARP request, 3 broadcasts, SEP messages, announcements: in each epoch.
    assert!(
        before.len() >= 6 && after.len() >= 6,
        "{} and {}",
        before.len(),
        after.len()
    );
    let mut alternate = Vec::new();
    for k in 0..before.len().max(after.len()) {
        alternate.extend(before.get(k).cloned());
        alternate.extend(after.get(k).cloned());
    }
    let replay = lab.dir().join("alternate.pcap");
    netveil_pcap::write_file(
        &replay,
        &netveil_pcap::Pcap {
            records: alternate.clone(),
            ..rec.clone()
        },
    )
    .unwrap();

    let s0 = d2.status_json().unwrap();
    // h2's host listens for the replayed broadcasts meanwhile.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let listener = lab::spawn_in_ns(&h2.ns, move || -> netveil_lab::Result<usize> {
        let s = UdpSocket::bind(("0.0.0.0", 9999)).map_err(netveil_lab::Error::io("bind"))?;
        s.set_read_timeout(Some(Duration::from_millis(200))).ok();
        let _ = ready_tx.send(());
        let (mut n, mut buf, t0) = (0, [0u8; 1500], Instant::now());
        while t0.elapsed() < Duration::from_secs(6) {
            if s.recv_from(&mut buf).is_ok() {
                n += 1;
            }
        }
        Ok(n)
    })
    .unwrap();
    ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let sent = lab
        .exec_ok(
            &mal.ns,
            &[
                python().to_str().unwrap(),
                attack("replay.py").to_str().unwrap(),
                PORT,
                replay.to_str().unwrap(),
                "0.02",
            ],
        )
        .unwrap();
    assert_eq!(sent.trim(), alternate.len().to_string(), "scapy: {sent}");
    let heard = listener.join().unwrap().unwrap().unwrap();
    let s1 = d2.status_json().unwrap();
    // (Only group frames were replayed; h1 may send a unicast ARP probe meanwhile, so rx_frames may move.)
    for c in ["rx_group", "sep_messages", "sessions_established"] {
        assert_eq!(
            count(&s1, "counters", c),
            count(&s0, "counters", c),
            "h2's {c} moved: a replay was accepted"
        );
    }
    assert_eq!(heard, 0, "h2's host received {heard} replayed datagrams");
    let delta = |name: &str| count(&s1, "rx_drops", name) - count(&s0, "rx_drops", name);
    assert_eq!(
        delta("old-epoch"),
        before.len() as u64,
        "{}",
        l2(&s1)["rx_drops"]
    );
    assert_eq!(
        delta("replayed"),
        after.len() as u64,
        "{}",
        l2(&s1)["rx_drops"]
    );
    let p = peer(&s1, &h1.mac).expect("h2 has h1 as a peer");
    assert_eq!(p["epoch"].as_u64(), Some(e2), "{p}");
    println!(
        "replayed {} group frames of h1 (epoch {e1}: {}, epoch {e2}: {}) alternately: none accepted, {} old-epoch and {} replayed drops at h2",
        alternate.len(),
        before.len(),
        after.len(),
        delta("old-epoch"),
        delta("replayed")
    );
    let out = ping(&lab, &lan, "h1", "h2", 2);
    assert!(out.contains(" 0% packet loss"), "{out}");
}

/// The review's forged unicast frames, on the wire: scapy on mallory's port sends l2sec-looking unicast frames to h2
/// with h1's source MAC and every key id but the session's (three rounds, over seconds), and frames from hundreds
/// of random source MACs. h2 starts no SEP (h1 receives no SEP message), keeps one peer and one session, and
/// counts the drops.
#[test]
fn forged_unicast_frames_start_no_sep_and_do_not_grow_the_peer_table() {
    let _g = serial();
    let mut lab = Lab::new("nvf").unwrap().with_netveil(NETVEIL);
    let lan = Lan::build(&mut lab, &["h1", "h2", "mallory"]).unwrap();
    let st = |n: &str| lan.station(n).unwrap().clone();
    let (h1, h2, mal) = (st("h1"), st("h2"), st("mallory"));
    let d = lan
        .protect(&lab, &["h1", "h2"], &L2Opts::default())
        .unwrap();
    let out = ping(&lab, &lan, "h1", "h2", 2);
    assert!(out.contains(" 0% packet loss"), "{out}");
    // Past the start announcements.
    std::thread::sleep(Duration::from_secs(3));
    let (a0, b0) = (d[0].status_json().unwrap(), d[1].status_json().unwrap());
    let p0 = peer(&b0, &h1.mac).expect("h2 has h1 as a peer").clone();
    let key_id = p0["session"]["key_id"].as_u64().expect("a session");
    let randoms = 600;
    let sent = lab
        .exec_ok(
            &mal.ns,
            &[
                python().to_str().unwrap(),
                attack("forge_unicast.py").to_str().unwrap(),
                PORT,
                "88b5",
                &mac_str(&h2.mac),
                &mac_str(&h1.mac),
                &key_id.to_string(),
                "3",
                &randoms.to_string(),
                "0.002",
            ],
        )
        .unwrap();
    let sent: u64 = sent.trim().parse().unwrap();
    assert_eq!(sent, 3 * 255 + randoms);
    std::thread::sleep(Duration::from_millis(500));
    let (a1, b1) = (d[0].status_json().unwrap(), d[1].status_json().unwrap());
    let peers = l2(&b1)["peers"].as_array().unwrap();
    assert_eq!(peers.len(), 1, "h2's peer table grew: {peers:?}");
    let p1 = peer(&b1, &h1.mac).unwrap();
    assert_eq!(p1["sessions"], p0["sessions"], "{p1}");
    assert_eq!(p1["session"]["key_id"].as_u64(), Some(key_id));
    assert_eq!(p1["handshaking"], false);
    assert_eq!(
        count(&b1, "counters", "sessions_established"),
        count(&b0, "counters", "sessions_established")
    );
    assert_eq!(
        count(&a1, "counters", "sep_messages"),
        count(&a0, "counters", "sep_messages"),
        "h2 sent SEP messages to h1"
    );
    let delta = |name: &str| count(&b1, "rx_drops", name) - count(&b0, "rx_drops", name);
    assert_eq!(delta("unknown-key-id"), 3 * 255, "{}", l2(&b1)["rx_drops"]);
    assert_eq!(delta("no-session"), randoms, "{}", l2(&b1)["rx_drops"]);
    println!(
        "{sent} forged unicast frames: h2 counted {} unknown-key-id and {} no-session drops, started no SEP, still one peer",
        delta("unknown-key-id"),
        delta("no-session")
    );
    let out = ping(&lab, &lan, "h1", "h2", 2);
    assert!(out.contains(" 0% packet loss"), "{out}");
}

/// A signed member spoofs ARP from inside (scapy on its own TAP: the daemon seals the forged replies, h1 opens
/// them): h3 tells h1 that h2's address is at h3's MAC. h1 drops them (`arp-spoofed`, the peers' addresses are
/// bound by the configuration) and keeps h2's entry; h3's own address still resolves.
#[test]
fn a_member_can_claim_only_its_own_address() {
    let _g = serial();
    let mut lab = Lab::new("nva").unwrap().with_netveil(NETVEIL);
    let lan = Lan::build(&mut lab, &["h1", "h2", "h3"]).unwrap();
    let st = |n: &str| lan.station(n).unwrap().clone();
    let (h1, h2, h3) = (st("h1"), st("h2"), st("h3"));
    let d = lan
        .protect(&lab, &["h1", "h2", "h3"], &L2Opts::default())
        .unwrap();
    for (a, b) in [("h1", "h2"), ("h3", "h1")] {
        let out = ping(&lab, &lan, a, b, 2);
        assert!(out.contains(" 0% packet loss"), "{a} -> {b}: {out}");
    }
    let before = d[0].status_json().unwrap();
    let mut spoofer = lab
        .command(
            &h3.ns,
            &[
                python().to_str().unwrap(),
                spoof_script().to_str().unwrap(),
                TAP,
                &h1.ip.to_string(),
                &mac_str(&h1.mac),
                &h2.ip.to_string(),
                &mac_str(&h3.mac),
                "15",
                "0.2",
            ],
        )
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        let out = lab
            .exec_ok(
                &h1.ns,
                &["ip", "-4", "neigh", "show", &h2.ip.to_string(), "dev", TAP],
            )
            .unwrap();
        assert!(
            !out.contains(&mac_str(&h3.mac)),
            "the member's spoofed ARP entry took: {out}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = spoofer.wait();
    let after = d[0].status_json().unwrap();
    let spoofed =
        count(&after, "rx_drops", "arp-spoofed") - count(&before, "rx_drops", "arp-spoofed");
    assert!(
        spoofed >= 10,
        "h1 dropped {spoofed} spoofed ARP replies: {}",
        l2(&after)["rx_drops"]
    );
    let out = ping(&lab, &lan, "h1", "h2", 2);
    assert!(out.contains(" 0% packet loss"), "{out}");
    let out = lab
        .exec_ok(
            &h1.ns,
            &["ip", "-4", "neigh", "show", &h2.ip.to_string(), "dev", TAP],
        )
        .unwrap();
    assert!(out.contains(&mac_str(&h2.mac)), "{out}");
    let p = peer(&after, &h3.mac).expect("h1 has h3 as a peer");
    assert_eq!(p["bound_ip"], h3.ip.to_string(), "{p}");
    println!(
        "h3's {spoofed} forged ARP replies for {} dropped at h1 (arp-spoofed)",
        h2.ip
    );
}

/// One configuration with an `[l2sec]` port and an ESP tunnel runs both engines in one `netveil up`: one process,
/// one control socket, one status. The tunnel's outer addresses are the stations' addresses on the l2sec LAN, so
/// the inner traffic is ESP inside l2sec, and the eavesdropper on the switch sees nothing but l2sec frames.
#[test]
fn one_up_runs_the_l2sec_and_the_ip_engine() {
    let _g = serial();
    let mut lab = Lab::new("nv1").unwrap().with_netveil(NETVEIL);
    let lan = Lan::build(&mut lab, &["h1", "h2", "eve"]).unwrap();
    let (h1, h2, eve) = (
        lan.station("h1").unwrap().clone(),
        lan.station("h2").unwrap().clone(),
        lan.station("eve").unwrap().clone(),
    );
    let l2 = lan
        .l2sec_configs(&lab, &["h1", "h2"], &L2Opts::default())
        .unwrap();
    // The tunnel's MTU leaves room for ESP inside l2sec's TAP MTU.
    let pair = lab::HostPair {
        suite: "aes128gcm16".into(),
        mtu: 1300,
        ..lab::HostPair::default()
    };
    let ip = pair
        .configs([&lab.socket_path("h1"), &lab.socket_path("h2")])
        .unwrap();
    // HostPair's outer addresses (192.0.2.1 and .2) become the stations' LAN addresses.
    let outer = |t: &str| {
        t.replace("\"192.0.2.1\"", &format!("\"{}\"", h1.ip))
            .replace("\"192.0.2.2\"", &format!("\"{}\"", h2.ip))
    };
    let mut daemons = Vec::new();
    for (i, st) in [&h1, &h2].into_iter().enumerate() {
        let text = format!("{}\n{}", l2[i], outer(&ip[i]));
        let path = lab.dir().join(format!("both-{}.toml", st.name));
        std::fs::write(&path, &text).unwrap();
        let check = lab
            .exec(&st.ns, &[NETVEIL, "check", "-c", path.to_str().unwrap()])
            .unwrap();
        let said = String::from_utf8_lossy(&check.stdout);
        assert!(
            check.status.success() && said.contains("2 SAs") && said.contains("l2sec on eth0"),
            "{said} {}",
            String::from_utf8_lossy(&check.stderr)
        );
        daemons.push(lab.start_daemon(&st.ns, &st.name, &text).unwrap());
    }
    let mut cap = lab.capture(&eve.ns, PORT, "eve.pcap", 200, &[]).unwrap();
    let out = lab
        .exec(
            &h1.ns,
            &[
                "ping",
                "-n",
                "-c",
                "3",
                "-i",
                "0.2",
                "-W",
                "2",
                "198.51.100.2",
            ],
        )
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains(" 0% packet loss"), "{out}");
    let t = lab::tcp_transfer(
        &h1.ns,
        &h2.ns,
        "198.51.100.2".parse().unwrap(),
        5003,
        4 << 20,
    )
    .unwrap();
    println!("TCP through ESP inside l2sec: {:.0} Mbit/s", t.mbit_per_s());
    let pcap = cap.stop().unwrap();
    let kinds = field_histogram(&lab, &eve.ns, &pcap, &["eth.type"]);
    assert_eq!(
        kinds.keys().collect::<Vec<_>>(),
        vec!["0x88b5"],
        "{kinds:?}"
    );
    // One process, one control socket, one status holding both engines.
    for (d, peer) in daemons.iter().zip([&h2, &h1]) {
        let s = d.status_json().unwrap();
        assert!(peer_of(&s, &peer.mac), "{s}");
        let sas = s["sas"].as_array().expect("the IP engine's SAs");
        assert_eq!(sas.len(), 2, "{s}");
        assert!(sas.iter().all(|sa| sa["packets"].as_u64() > Some(0)), "{s}");
        assert_eq!(s["drops"]["rx:auth-failed"].as_u64().unwrap_or(0), 0, "{s}");
        let text = d.status_text().unwrap();
        assert!(
            text.contains("l2sec: eth0") && text.contains("SA "),
            "{text}"
        );
    }
}

fn peer_of(status: &Value, mac: &[u8; 6]) -> bool {
    peer(status, mac).is_some_and(|p| p["session"].is_object())
}
