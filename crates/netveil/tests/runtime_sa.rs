//! SAs and policies changed on running daemons with `netveil sa` and `netveil policy`, in network namespaces, as an
//! external key manager would: three rekeys of an ESP tunnel during a 1 GiB byte-checked TCP transfer (each new SPI
//! on the wire after its update, the old one gone after the switch, no whole key in any log or status), and a
//! policy with its SAs added to a running daemon. Needs root.

use netveil_lab::lab::{self, HostPair, Lab, TwoHosts};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    assert!(lab::is_root(), "the namespace tests need root");
    for t in ["ip", "ping", "nft"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn random_hex(n: usize) -> String {
    let mut v = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut v))
        .unwrap();
    hex::encode(v)
}

/// `netveil ARGS --socket SOCKET`, with `stdin` on standard input; returns stdout, panics with stderr on failure.
fn netveil(args: &[&str], socket: &Path, stdin: &str) -> String {
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
    assert!(
        out.status.success(),
        "netveil {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The SA `name` in a status.
fn sa<'a>(st: &'a Value, name: &str) -> &'a Value {
    st["sas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name && s["retiring"] != true)
        .unwrap_or_else(|| panic!("no SA {name} in {st}"))
}

/// Replaces the SA `name` on the daemon at `socket` (direction `dir`, tunnel `local` -> `remote`, ESP in UDP) with
/// SPI `spi` and the key `key`, given on standard input.
fn update(socket: &Path, name: &str, dir: &str, spi: u32, local: &str, remote: &str, key: &str) {
    netveil(
        &[
            "sa",
            "update",
            name,
            &format!("direction={dir}"),
            &format!("spi={spi:#x}"),
            &format!("local={local}"),
            &format!("remote={remote}"),
            "suite=aes128gcm16",
            "encap=udp",
            "enc_key=-",
        ],
        socket,
        &format!("{key}\n"),
    );
}

/// The ESP-in-UDP packets of a capture: (time, IPv4 source, SPI), in capture order (IKE's non-ESP marker and
/// keepalives left out).
fn esp_in_udp(pcap: &Path) -> Vec<(SystemTime, [u8; 4], u32)> {
    let p = netveil_pcap::read_file(pcap).unwrap();
    p.records
        .iter()
        .filter_map(|r| {
            let ip = netveil_pcap::split_frame(p.link, &r.data)?.ip;
            let ihl = usize::from(ip.first()? & 0x0f) * 4;
            if ip.get(9) != Some(&17) {
                return None;
            }
            let spi = u32::from_be_bytes(ip.get(ihl + 8..ihl + 12)?.try_into().ok()?);
            let nanos = if p.nanos { r.ts_frac } else { r.ts_frac * 1000 };
            let t = SystemTime::UNIX_EPOCH + Duration::new(u64::from(r.ts_sec), nanos);
            (spi != 0).then(|| (t, ip[12..16].try_into().unwrap(), spi))
        })
        .collect()
}

/// The keys (`enc_key`, `auth_key`) of a configuration text, lowercase.
fn config_keys(config: &str) -> Vec<String> {
    config
        .lines()
        .filter(|l| l.trim_start().starts_with("enc_key") || l.trim_start().starts_with("auth_key"))
        .filter_map(|l| l.split('"').nth(1))
        .map(|k| k.to_ascii_lowercase())
        .collect()
}

/// Three rekeys of both directions of an ESP-in-UDP tunnel (new SPIs and keys, `netveil sa update`, the receiver
/// first, as a key manager does it) during a 1 GiB TCP transfer whose every byte is checked: the transfer
/// completes, and no packet is dropped as replayed, of an unknown SPI, or failing authentication, on either side.
/// On the wire (a capture between the hosts), each direction's new SPI appears only after its sender's update,
/// and its previous SPI no longer shortly after; no whole key installed (configuration or update) is in either
/// daemon's log, `status --json` or `sa list --json`, while the `keys` answer (for Wireshark) holds those in
/// force (the control that the search finds keys where they are).
#[test]
fn three_rekeys_during_a_1gib_transfer() {
    let _g = serial();
    let mut lab = Lab::new("nvrk").unwrap().with_netveil(NETVEIL);
    // The most verbose log: no key ever shows in it.
    let pair = HostPair {
        udp_encap: true,
        log_level: Some("trace".into()),
        ..HostPair::esp("aes128gcm16")
    };
    let hosts = TwoHosts::up(&mut lab, &pair).unwrap();
    let socks = [lab.socket_path("a"), lab.socket_path("b")];
    let outer = [
        hosts.addrs[0].outer.to_string(),
        hosts.addrs[1].outer.to_string(),
    ];
    hosts.ping(&lab, 0, 2, "0.2").unwrap();
    // Headers only (Ethernet, IPv4, UDP, the SPI and sequence number).
    let mut cap = lab
        .capture(&hosts.ns[0], "veth-a", "rekeys.pcap", 64, &["udp"])
        .unwrap();

    let transfer = {
        let (a, b, dst) = (
            hosts.ns[0].clone(),
            hosts.ns[1].clone(),
            hosts.addrs[1].inner,
        );
        std::thread::spawn(move || lab::tcp_transfer(&a, &b, dst, 5201, 1 << 30))
    };
    let t0 = Instant::now();
    let mut spis = Vec::new();
    let mut keys = Vec::new();
    // Per update of a sender: (source address, SPI, when the update was sent, when it was done).
    let mut switches = Vec::new();
    for round in 1..=3u32 {
        std::thread::sleep(Duration::from_millis(150));
        // a -> b: b (receiver) first, then a; b -> a: a first, then b.
        for (from, to) in [(0usize, 1usize), (1, 0)] {
            let name = format!("{}-to-{}", ["a", "b"][from], ["a", "b"][to]);
            let spi = 0x1001 + 0x1000 * from as u32 + 0x10 * round;
            let key = random_hex(20);
            keys.push(key.clone());
            update(&socks[to], &name, "in", spi, &outer[to], &outer[from], &key);
            let sent = SystemTime::now();
            update(
                &socks[from],
                &name,
                "out",
                spi,
                &outer[from],
                &outer[to],
                &key,
            );
            switches.push((hosts.addrs[from].outer, spi, sent, SystemTime::now()));
            spis.push((name, spi));
        }
        assert!(
            !transfer.is_finished(),
            "the transfer ended before rekey {round} ({:?})",
            t0.elapsed()
        );
    }
    let t = transfer.join().unwrap().unwrap_or_else(|e| {
        panic!(
            "transfer: {e}\n--- a ---\n{}\n--- b ---\n{}",
            hosts.daemon(0).log(),
            hosts.daemon(1).log()
        )
    });
    assert_eq!(t.bytes, 1 << 30);
    let wire = esp_in_udp(&cap.stop().unwrap());
    for (k, &(src, spi, sent, done)) in switches.iter().enumerate() {
        let std::net::IpAddr::V4(src) = src else {
            panic!("IPv4 outer addresses expected")
        };
        let of = |spi: u32| -> Vec<SystemTime> {
            wire.iter()
                .filter(|w| w.1 == src.octets() && w.2 == spi)
                .map(|w| w.0)
                .collect()
        };
        let new = of(spi);
        assert!(!new.is_empty(), "SPI {spi:#x} from {src} never on the wire");
        assert!(
            new[0] >= sent,
            "SPI {spi:#x} from {src} on the wire before its update"
        );
        // The previous SPI of this sender: its last update's, or for the first the configuration's (what it sent
        // before the first update).
        let old = match switches[..k].iter().rev().find(|s| s.0 == switches[k].0) {
            Some(s) => s.1,
            None => {
                wire.iter()
                    .find(|w| w.1 == src.octets() && w.0 < sent)
                    .unwrap_or_else(|| panic!("nothing from {src} before the first update"))
                    .2
            }
        };
        assert_ne!(old, spi);
        let old_times = of(old);
        let last_old = *old_times
            .last()
            .unwrap_or_else(|| panic!("SPI {old:#x} never on the wire"));
        // Packets already on their way when the update returned may still leave: a little slack.
        assert!(
            last_old <= done + Duration::from_millis(500),
            "SPI {old:#x} from {src} still on the wire {:?} after the switch to {spi:#x}",
            last_old.duration_since(done).unwrap_or_default()
        );
    }
    println!(
        "1 GiB through three rekeys: {:.2} s, {:.0} Mbit/s",
        t.seconds,
        t.mbit_per_s()
    );
    for (i, d) in hosts.daemons.iter().enumerate() {
        let st = d.status_json().unwrap();
        for r in [
            "unknown-spi",
            "replayed",
            "too-old",
            "auth-failed",
            "policy-mismatch",
        ] {
            assert_eq!(
                st["drops"][format!("rx:{r}")],
                0,
                "side {i}: rx:{r}\n{st:#}"
            );
        }
        for s in st["sas"].as_array().unwrap() {
            assert_eq!(s["auth_failed"], 0, "{s}");
            assert_eq!(s["replayed"], 0, "{s}");
        }
        // The last SPIs are in force and carried traffic.
        for (name, spi) in &spis[spis.len() - 2..] {
            let s = sa(&st, name);
            assert_eq!(s["spi"], format!("{spi:#010x}"), "side {i}");
            assert!(s["packets"].as_u64().unwrap() > 0, "side {i}: {s}");
        }
        // The replacements are in the events, and in the log, which holds no key (in any case, whole or in part).
        let ev = netveil(&["monitor", "--once", "--json"], &socks[i], "");
        assert_eq!(ev.matches("\"sa-replaced\"").count(), 6, "{ev}");
        let log = d.log().to_ascii_lowercase();
        assert_eq!(log.matches("sa-replaced").count(), 6, "side {i}:\n{log}");
        assert!(log.contains(" info "), "plain level words: {log}");
        for k in &keys {
            assert!(
                !log.contains(&k[..16]),
                "side {i}: a key in the log:\n{log}"
            );
        }
        // No whole key anywhere but in the `keys` answer: the configuration's and every update's.
        let installed: Vec<String> = config_keys(&hosts.configs[i])
            .into_iter()
            .chain(keys.iter().map(|k| k.to_ascii_lowercase()))
            .collect();
        assert!(installed.len() >= keys.len() + 2, "{installed:?}");
        let places = [
            ("log", log.clone()),
            ("status", st.to_string()),
            (
                "status --json",
                netveil(&["status", "--json"], &socks[i], ""),
            ),
            (
                "sa list --json",
                netveil(&["sa", "list", "--json"], &socks[i], ""),
            ),
        ];
        for (what, text) in &places {
            let text = text.to_ascii_lowercase();
            for k in &installed {
                assert!(
                    !text.contains(k.as_str()),
                    "side {i}: a whole key in {what}"
                );
            }
        }
        let answer = d.ask("keys").unwrap().to_string().to_ascii_lowercase();
        for k in &keys[keys.len() - 2..] {
            assert!(
                answer.contains(k.as_str()),
                "side {i}: the key in force is not in the keys answer"
            );
        }
    }
}

/// A policy and its SAs added to running daemons: traffic for it is dropped and reported as an acquire until its
/// SAs come, then flows at once; `policy list` and `sa list` show them, and removing them stops the traffic.
#[test]
fn policy_and_sas_added_live() {
    let _g = serial();
    let mut lab = Lab::new("nvpl").unwrap().with_netveil(NETVEIL);
    let hosts = TwoHosts::up(&mut lab, &HostPair::esp("aes128gcm16")).unwrap();
    let socks = [lab.socket_path("a"), lab.socket_path("b")];
    let outer = [
        hosts.addrs[0].outer.to_string(),
        hosts.addrs[1].outer.to_string(),
    ];
    let inner2 = ["198.51.101.1", "198.51.101.2"];
    for (ns, addr) in hosts.ns.iter().zip(inner2) {
        // The new network is routed into the TUN (the daemon's routes are its configuration's; this is the
        // operator's part, as with `ip xfrm`).
        lab.exec_ok(
            ns,
            &["ip", "addr", "add", &format!("{addr}/24"), "dev", "nv0"],
        )
        .unwrap();
    }
    // The policies first, in front of the others.
    for i in 0..2 {
        let (me, peer) = (inner2[i], inner2[1 - i]);
        let (out_sa, in_sa) = if i == 0 {
            ("a-b-2", "b-a-2")
        } else {
            ("b-a-2", "a-b-2")
        };
        netveil(
            &[
                "policy",
                "add",
                "--position",
                "0",
                "name=net2-out",
                "direction=out",
                &format!("src={me}/32"),
                &format!("dst={peer}/32"),
                "action=protect",
                &format!("sas={out_sa}"),
            ],
            &socks[i],
            "",
        );
        netveil(
            &[
                "policy",
                "add",
                "name=net2-in",
                "direction=in",
                &format!("src={peer}/32"),
                &format!("dst={me}/32"),
                "action=protect",
                &format!("sas={in_sa}"),
            ],
            &socks[i],
            "",
        );
    }
    let list = netveil(&["policy", "list"], &socks[0], "");
    assert!(
        list.lines().nth(1).unwrap().starts_with("net2-out"),
        "{list}"
    );
    assert!(list.contains("waiting for its SAs"), "{list}");
    // No SAs yet: dropped, and reported.
    let out = lab
        .exec(
            &hosts.ns[0],
            &["ping", "-n", "-c", "1", "-W", "1", inner2[1]],
        )
        .unwrap();
    assert!(!out.status.success());
    let deadline = Instant::now() + Duration::from_secs(3);
    let ev = loop {
        let ev = netveil(&["monitor", "--once"], &socks[0], "");
        if ev.contains("acquire") || Instant::now() > deadline {
            break ev;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        ev.contains("acquire policy=net2-out flow=198.51.101.1 -> 198.51.101.2 proto 1"),
        "{ev}"
    );
    // The SAs, with keys from a file (`--from`).
    let keys = [random_hex(20), random_hex(20)];
    for i in 0..2 {
        for (name, dir, spi, k) in [
            (
                "a-b-2",
                if i == 0 { "out" } else { "in" },
                0x5001u32,
                &keys[0],
            ),
            (
                "b-a-2",
                if i == 0 { "in" } else { "out" },
                0x6001u32,
                &keys[1],
            ),
        ] {
            let f = lab.dir().join(format!("{name}-{i}.toml"));
            std::fs::write(&f, format!("enc_key = \"{k}\"\n")).unwrap();
            netveil(
                &[
                    "sa",
                    "add",
                    "--from",
                    f.to_str().unwrap(),
                    &format!("name={name}"),
                    &format!("direction={dir}"),
                    &format!("spi={spi:#x}"),
                    &format!("local={}", outer[i]),
                    &format!("remote={}", outer[1 - i]),
                    "suite=aes128gcm16",
                ],
                &socks[i],
                "",
            );
            std::fs::remove_file(&f).unwrap();
        }
    }
    // Flows at once: the first ping is answered.
    let out = lab
        .exec_ok(
            &hosts.ns[0],
            &["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", inner2[1]],
        )
        .unwrap();
    assert!(
        out.contains("icmp_seq=1 ") && out.contains(" 0% packet loss"),
        "{out}"
    );
    let sas = netveil(&["sa", "list"], &socks[0], "");
    assert!(sas.contains("a-b-2") && sas.contains("0x00005001"), "{sas}");
    let st = hosts.daemon(1).status_json().unwrap();
    assert!(sa(&st, "a-b-2")["packets"].as_u64().unwrap() >= 3, "{st:#}");
    assert!(!netveil(&["policy", "list"], &socks[0], "").contains("waiting"));
    // The old tunnel still works beside it.
    hosts.ping(&lab, 0, 2, "0.2").unwrap();
    // Removed again: that traffic stops (the default policy discards it), the rest flows.
    netveil(&["policy", "del", "net2-out"], &socks[0], "");
    netveil(&["sa", "del", "a-b-2"], &socks[0], "");
    let out = lab
        .exec(
            &hosts.ns[0],
            &["ping", "-n", "-c", "1", "-W", "1", inner2[1]],
        )
        .unwrap();
    assert!(!out.status.success());
    hosts.ping(&lab, 0, 2, "0.2").unwrap();
    // A bad change is refused with the key named and exit code 2, and changes nothing.
    let out = Command::new(NETVEIL)
        .args([
            "sa",
            "add",
            "name=x",
            "direction=in",
            "spi=0x2001",
            "suite=aes128gcm16",
        ])
        .arg(format!("local={}", outer[0]))
        .arg(format!("remote={}", outer[1]))
        .arg(format!("enc_key={}", random_hex(20)))
        .arg("--socket")
        .arg(&socks[0])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("sa.spi"), "{err}");
    assert!(!netveil(&["sa", "list"], &socks[0], "").contains("\nx "));
}
