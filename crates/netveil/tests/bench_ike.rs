//! `netveil bench --ike --quick` as CI runs it: every row is there, with plausible values (not the goals:
//! CI machines vary). Needs root and strongSwan (charon, swanctl, pki), as the interop tests do.

use netveil_lab::strongswan;
use std::process::Command;

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");

fn row<'a>(rows: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    rows.iter()
        .find(|r| r["row"] == name)
        .unwrap_or_else(|| panic!("no row {name:?} in {rows:#?}"))
}

/// A row that ran: sequential setups in (0, 5 s), a positive rate, the responder holding every IKE SA + child,
/// and a memory figure (growth of the responder's RSS; it can be near 0 or even below for a small run, but not
/// absurd).
fn check_measured(r: &serde_json::Value, setups: u64, handshakes: u64) {
    let name = r["row"].as_str().unwrap_or("?");
    assert!(r["cannot_run"].is_null(), "{name}: {r}");
    assert_eq!(r["setups"], setups, "{name}");
    let (med, p99) = (
        r["median_ms"].as_f64().unwrap(),
        r["p99_ms"].as_f64().unwrap(),
    );
    assert!(
        med > 0.0 && med <= p99 && p99 < 5000.0,
        "{name}: {med} {p99}"
    );
    let hs = r["handshakes_per_s"].as_f64().unwrap();
    assert!(hs > 1.0 && hs < 1e6, "{name}: {hs} handshakes/s");
    assert_eq!(r["handshakes"], handshakes, "{name}");
    assert_eq!(
        r["responder_sas"], handshakes,
        "{name}: the responder lost IKE SAs"
    );
    let b = r["bytes_per_sa"].as_f64().unwrap();
    assert!(b.abs() < 1e6, "{name}: {b} bytes per IKE SA");
    assert!(r["rss_after_kib"].as_u64().unwrap() > 0, "{name}");
}

#[test]
fn bench_ike_quick_has_every_row() {
    const T: &str = "bench_ike_quick_has_every_row";
    if !netveil_testkit::require_root(T) || !netveil_testkit::require(T, strongswan::missing()) {
        return;
    }
    let dir = netveil_testkit::private_dir("nvbike-test");
    let json = dir.join("ike.json");
    let out = Command::new(NETVEIL)
        .args([
            "bench",
            "--ike",
            "--quick",
            "--ike-suites",
            "psk-x25519,ecdsa-p256",
            "--ike-setups",
            "10",
            "--ike-handshakes",
            "100",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = v["ike"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "{rows:#?}");
    check_measured(row(rows, "netveil ike psk-x25519"), 10, 100);
    check_measured(row(rows, "strongswan ike psk-x25519"), 10, 100);
    check_measured(row(rows, "strongswan ike ecdsa-p256"), 10, 100);
    // The responder's install time, from its log.
    let ins = row(rows, "netveil ike psk-x25519")["install_ms"].as_f64();
    assert!(ins.is_some_and(|v| v > 0.0), "{ins:?}");
    let inproc = row(rows, "netveil ike psk-x25519 (exchange, in process)");
    let (t, r) = (
        inproc["median_ms"].as_f64().unwrap(),
        inproc["responder_ms"].as_f64().unwrap(),
    );
    assert!(r > 0.0 && r < t && t < 1000.0, "{inproc}");
    // ECDSA P-256 certificates (auth = pubkey) on both netveil sides: measured like the PSK rows.
    check_measured(row(rows, "netveil ike ecdsa-p256"), 10, 100);
    let inproc = row(rows, "netveil ike ecdsa-p256 (exchange, in process)");
    assert!(inproc["cannot_run"].is_null(), "{inproc}");
    let (t, r) = (
        inproc["median_ms"].as_f64().unwrap(),
        inproc["responder_ms"].as_f64().unwrap(),
    );
    assert!(r > 0.0 && r < t && t < 1000.0, "{inproc}");
    // The table and the goals are printed with the rows' names.
    for name in [
        "netveil ike psk-x25519",
        "strongswan ike psk-x25519",
        "netveil ike ecdsa-p256",
        "handshakes/s",
    ] {
        assert!(text.contains(name), "no {name:?} in:\n{text}");
    }
    assert!(text.contains("goals of issue 23"), "{text}");
}
