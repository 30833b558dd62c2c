//! `netveil bench --json`: the shape of what it writes, from its cheapest run that measures both kinds of rows (the
//! clear veth path, one netveil ESP-in-UDP tunnel; the plain bridge, one l2sec suite; 1 s of iperf3 and a few
//! pings each). Every row has exactly the documented keys with values of the documented types, the baselines of
//! the same run are there (clear veth for the tunnels, the plain bridge for l2sec), and the added round-trip times
//! are measured against them. The figures themselves are not judged: they are timings of one short run.
//!
//! Needs root and iperf3 (.ci/setup).

use serde_json::{Map, Value};

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");

/// The keys of `v` (an object), sorted.
fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    k.sort_unstable();
    k
}

fn num(row: &Map<String, Value>, k: &str) -> f64 {
    let v = row[k]
        .as_f64()
        .unwrap_or_else(|| panic!("{k}: not a number: {row:?}"));
    assert!(v.is_finite() && v >= 0.0, "{k}: {v}");
    v
}

fn count(row: &Map<String, Value>, k: &str) -> u64 {
    row[k]
        .as_u64()
        .unwrap_or_else(|| panic!("{k}: not a count: {row:?}"))
}

fn opt_num(row: &Map<String, Value>, k: &str) -> Option<f64> {
    match &row[k] {
        Value::Null => None,
        v => Some(
            v.as_f64()
                .unwrap_or_else(|| panic!("{k}: neither null nor a number: {row:?}")),
        ),
    }
}

/// One row's ping statistics: a row per payload size (56 and 1000 bytes), `pings` sent, with the added time over
/// the baseline present exactly when `baseline` is false.
fn check_ping(path: &str, ping: &Value, pings: u64, baseline: bool) {
    let stats = ping.as_array().unwrap_or_else(|| panic!("{path}: ping"));
    let sizes: Vec<u64> = stats.iter().map(|s| s["bytes"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [56, 1000], "{path}");
    for s in stats {
        assert_eq!(
            keys(s),
            [
                "added_median_ms",
                "bytes",
                "median_ms",
                "p99_ms",
                "received",
                "sent",
                "sleeps_per_reply",
                "x_wireguard_go"
            ],
            "{path}"
        );
        let s = s.as_object().unwrap();
        assert_eq!(count(s, "sent"), pings, "{path}");
        assert!(count(s, "received") <= pings, "{path}");
        let (med, p99) = (num(s, "median_ms"), num(s, "p99_ms"));
        assert!(med <= p99, "{path}: {s:?}");
        // Against the same run's baseline: present on every row but the baseline's own.
        assert_eq!(
            opt_num(s, "added_median_ms").is_some(),
            !baseline,
            "{path}: {s:?}"
        );
        // No wireguard-go row in this run (--no-peers).
        assert_eq!(opt_num(s, "x_wireguard_go"), None, "{path}");
        opt_num(s, "sleeps_per_reply");
    }
}

#[test]
fn bench_json_has_its_shape_and_the_same_runs_baselines() {
    const T: &str = "bench_json_has_its_shape_and_the_same_runs_baselines";
    if !netveil_testkit::require_root(T) || !netveil_testkit::require_program(T, "iperf3") {
        return;
    }
    let dir = netveil_testkit::private_dir("nv-bench-json");
    let json = dir.join("bench.json");
    const PINGS: u64 = 5;
    let t0 = std::time::Instant::now();
    let out = std::process::Command::new(NETVEIL)
        .args([
            "bench",
            "--suites",
            "aes128gcm16",
            "--encap",
            "udp",
            "--psp",
            "none",
            "--l2sec",
            "aes128gcm",
            "--no-peers",
            "--seconds",
            "1",
            "--pings",
            &PINGS.to_string(),
            "--split-packets",
            "0",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{log}");
    println!("bench run: {:.1} s", t0.elapsed().as_secs_f64());
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(keys(&v), ["l2sec", "tunnels"], "{v}");

    // Tunnels: the clear veth baseline first, then the one netveil row.
    let tunnels = v["tunnels"].as_array().unwrap();
    assert_eq!(tunnels.len(), 2, "{v:#}");
    for (i, r) in tunnels.iter().enumerate() {
        assert_eq!(
            keys(r),
            [
                "encap",
                "gbit_per_s",
                "netveil_bin",
                "path",
                "ping",
                "retransmits",
                "rounds"
            ],
            "{r}"
        );
        let row = r.as_object().unwrap();
        let path = row["path"].as_str().unwrap();
        assert!(row["encap"].is_string(), "{r}");
        assert!(num(row, "gbit_per_s") > 0.0, "{path}: nothing moved");
        count(row, "retransmits");
        assert_eq!(count(row, "rounds"), 1, "{path}");
        let baseline = i == 0;
        if baseline {
            assert!(path.starts_with("clear"), "{path}");
            assert!(row["netveil_bin"].is_null(), "{r}");
        } else {
            assert_eq!(path, "netveil esp aes128gcm16");
            assert_eq!(row["encap"], "udp 4500");
            let bin = row["netveil_bin"].as_str().expect("the daemons' binary");
            assert!(std::path::Path::new(bin).is_file(), "{bin}");
        }
        check_ping(path, &row["ping"], PINGS, baseline);
    }

    // l2sec: the plain bridge baseline first, then the one suite.
    let l2 = v["l2sec"].as_array().unwrap();
    assert_eq!(l2.len(), 2, "{v:#}");
    for (i, r) in l2.iter().enumerate() {
        assert_eq!(
            keys(r),
            [
                "first_ping_ms",
                "gbit_per_s",
                "netveil_bin",
                "path",
                "ping",
                "retransmits",
                "rounds"
            ],
            "{r}"
        );
        let row = r.as_object().unwrap();
        let path = row["path"].as_str().unwrap();
        assert!(num(row, "gbit_per_s") > 0.0, "{path}: nothing moved");
        assert!(num(row, "first_ping_ms") > 0.0, "{path}");
        count(row, "retransmits");
        assert_eq!(count(row, "rounds"), 1, "{path}");
        let baseline = i == 0;
        assert_eq!(row["netveil_bin"].is_null(), baseline, "{r}");
        if !baseline {
            assert!(path.contains("aes128gcm"), "{path}");
        }
        check_ping(path, &row["ping"], PINGS, baseline);
    }
}
