use super::*;
use std::collections::BTreeMap;

fn report(cells: Vec<Cell>) -> Report {
    Report {
        schema: SCHEMA,
        command: vec!["netveil".into(), "lab".into()],
        netveil: "0".into(),
        kernel: "6".into(),
        cpu: "x (2 CPUs)".into(),
        programs: BTreeMap::new(),
        quick: true,
        experiments: vec!["ping-rtt".into()],
        started_unix: 0,
        seconds: 1.0,
        cells,
    }
}

#[test]
fn findings_hold_or_fail_on_the_cells_and_say_when_they_cannot_tell() {
    let kept = |path: &str, kind: &str, level: f64, v: f64| {
        Cell::measured(
            "loss",
            path,
            &format!("{kind} kept {level}% loss"),
            "%",
            vec![v],
        )
    };
    let esp = |v: f64| {
        Cell::measured("overhead", "esp", "overhead", "B/packet", vec![v])
            .expected(72.0)
            .paper(32.0, "PILSC, Table 8")
    };
    let good = report(vec![
        esp(72.0),
        kept("netveil psp aes-gcm-128", "udp", 0.0, 100.0),
        kept("netveil psp aes-gcm-128", "udp", 25.0, 75.0),
        kept("tls1.3", "tcp", 25.0, 1.0),
        kept("tls1.3", "tcp", 1.0, 30.0),
    ]);
    let mut good = good;
    for (size, v) in [("1KB", 33.0), ("100KB", 5.0), ("10MB", 4.0)] {
        good.cells.push(Cell::measured(
            "http",
            "esp",
            &format!("overhead random {size}"),
            "%",
            vec![v],
        ));
    }
    // SMTP: more bytes than HTTP, and more over clear at the smallest file; AH's packets larger than ESP's.
    let pair = |r: &mut Report, exp: &str, bytes: [f64; 2], over_1kb: f64| {
        for (size, b) in [("1KB", bytes[0]), ("10MB", bytes[1])] {
            r.cells.push(Cell::measured(
                exp,
                "psp",
                &format!("bytes random {size}"),
                "B",
                vec![b],
            ));
        }
        r.cells.push(Cell::measured(
            exp,
            "psp",
            "overhead down random 1KB",
            "%",
            vec![over_1kb],
        ));
    };
    let auth = |r: &mut Report, esp: f64, ah: f64| {
        for (path, v) in [
            ("esp transport null-sha1", esp),
            ("esp+ah transport null-null + sha1", ah),
        ] {
            r.cells.push(Cell::measured(
                "overhead",
                path,
                "overhead",
                "B/packet",
                vec![v],
            ));
        }
    };
    // ESP's per-packet time: (size, in total, out total) per mode.
    let ops = |r: &mut Report, pts: &[(u32, f64, f64)]| {
        for mode in ["tunnel", "transport"] {
            for &(size, i, o) in pts {
                for (dir, v) in [("in", i), ("out", o)] {
                    r.cells.push(Cell::measured(
                        "ops",
                        &format!("esp aes128-sha1 {mode}"),
                        &format!("{dir} total {size} B"),
                        "ns",
                        vec![v],
                    ));
                }
            }
        }
    };
    pair(&mut good, "http", [2000.0, 1.1e7], 33.0);
    pair(&mut good, "smtp", [5000.0, 1.5e7], 39.0);
    auth(&mut good, 24.0, 36.0);
    ops(
        &mut good,
        &[
            (1024, 3000.0, 2900.0),
            (64, 700.0, 650.0),
            (512, 1800.0, 1700.0),
        ],
    );
    // Round trips at 0 and 10 ms of delay on each side.
    let delay = |r: &mut Report, at0: f64, at10: f64| {
        for (ms, v) in [(0, at0), (10, at10)] {
            r.cells.push(Cell::measured(
                "delay",
                "psp",
                &format!("rtt at {ms} ms"),
                "ms",
                vec![v],
            ));
        }
    };
    delay(&mut good, 0.2, 20.4);
    // VoIP: each path's streams' largest jitter (the cell's max), against the 40 ms limit.
    let voip = |r: &mut Report, path: &str, jitters: Vec<f64>| {
        r.cells.push(Cell::measured(
            "voip",
            path,
            "rtp max jitter",
            "ms",
            jitters,
        ));
    };
    voip(&mut good, "plain bridge", vec![0.8, 1.5]);
    voip(&mut good, "l2sec aes128gcm", vec![0.9, 39.0, 2.0]);
    // The MTU sweep: load against the ideal MTU's below it (and above it, which the finding leaves alone).
    let mtu = |r: &mut Report, at: u16, v: f64| {
        r.cells.push(Cell::measured(
            "mtu",
            "esp",
            &format!("load vs ideal random 10KB at mtu {at}"),
            "%",
            vec![v],
        ));
    };
    mtu(&mut good, 600, 12.0);
    mtu(&mut good, 8000, -5.0);
    // iperf: each l2sec path's TCP throughput against the bridge's.
    let iperf = |r: &mut Report, path: &str, v: f64| {
        r.cells.push(Cell::measured(
            "iperf",
            path,
            "tcp throughput of the bridge's",
            "%",
            vec![v],
        ));
    };
    iperf(&mut good, "l2sec null-null (noENC-noHMAC)", 35.8);
    iperf(&mut good, "l2sec aes128gcm", 28.2);
    let pilsc = |r: &mut Report, v: f64| {
        r.cells.push(Cell::measured(
            "overhead",
            "pilsc confidential",
            "overhead",
            "B/packet",
            vec![v],
        ));
    };
    pilsc(&mut good, 12.0);
    let f = findings(&good);
    assert_eq!(f.len(), 12);
    assert_eq!(
        f[11].detail, "pilsc confidential: 12 B against IPsec's 72 B or more (1 rows)",
        "{f:?}"
    );
    assert_eq!(
        f[10].detail,
        "l2sec null-null (noENC-noHMAC): 35.8% of the bridge's; l2sec aes128gcm: 28.2% of the bridge's",
        "{f:?}"
    );
    assert_eq!(f[9].detail, "random 10KB at mtu 600: +12.0%", "{f:?}");
    assert!(
        f[8].detail.contains("l2sec aes128gcm: at most 39.00 ms"),
        "{f:?}"
    );
    assert!(
        f[7].detail.contains("psp: +20.20 ms at 10 ms on each side"),
        "{f:?}"
    );
    assert!(
        f[6].detail
            .contains("esp aes128-sha1 tunnel in: 700 ns at 64 B, 3000 ns at 1024 B"),
        "{f:?}"
    );
    assert!(f[4].detail.contains("+36% to +150%"), "{f:?}");
    assert!(f.iter().all(|f| f.holds == Some(true)), "{f:?}");
    assert!(
        f[1].detail.contains("75.0% of their goodput at 25% loss"),
        "{f:?}"
    );
    // A byte off the formula, PSP keeping less than half, TLS keeping more than PSP: each fails.
    let bad = report(vec![
        esp(73.0),
        kept("netveil psp aes-gcm-128", "udp", 25.0, 40.0),
        kept("tls1.3", "tcp", 25.0, 45.0),
    ]);
    let mut bad = bad;
    for (size, v) in [("1KB", 3.0), ("10MB", 4.0)] {
        bad.cells.push(Cell::measured(
            "http",
            "esp",
            &format!("overhead random {size}"),
            "%",
            vec![v],
        ));
    }
    pair(&mut bad, "http", [2000.0, 1.1e7], 33.0);
    // (Fewer bytes at 10 MB, and less over clear at 1 KB: two failures, both named.)
    pair(&mut bad, "smtp", [5000.0, 1.0e7], 30.0);
    auth(&mut bad, 24.0, 24.0);
    ops(&mut bad, &[(64, 700.0, 650.0), (1024, 3000.0, 640.0)]);
    // Half the delay: one side's only.
    delay(&mut bad, 0.2, 10.2);
    // One stream at the limit (the median well below it).
    voip(&mut bad, "l2sec aes128gcm", vec![0.9, 40.0, 2.0]);
    mtu(&mut bad, 600, -0.5);
    iperf(&mut bad, "l2sec null-null (noENC-noHMAC)", 100.5);
    pilsc(&mut bad, 80.0);
    let f = findings(&bad);
    assert!(
        f[6].detail
            .contains("out: 650 ns at 64 B, 640 ns at 1024 B"),
        "{f:?}"
    );
    assert!(f.iter().all(|f| f.holds == Some(false)), "{f:?}");
    assert!(
        f[4].detail.contains("psp 10MB") && f[4].detail.contains("psp 1KB"),
        "{f:?}"
    );
    assert_eq!(file_bytes("10MB"), Some(1e7));
    assert_eq!(file_bytes("100KB"), Some(1e5));
    assert!(f[0].detail.contains("esp: 73"), "{f:?}");
    // No cells: not measured, and the report says so.
    let none = report(vec![]);
    assert!(findings(&none).iter().all(|f| f.holds.is_none()));
    assert!(markdown(&none).contains("not measured in this run"));
}

#[test]
fn a_cell_is_a_median_with_its_range_or_a_reason() {
    let c = Cell::measured("ping-rtt", "clear", "rtt 64 B", "ms", vec![3.0, 1.0, 2.0]);
    assert_eq!((c.value, c.min, c.max), (Some(2.0), Some(1.0), Some(3.0)));
    let m = Cell::measured("ping-rtt", "clear", "rtt 64 B", "ms", vec![]);
    assert!(m.value.is_none() && m.reason.is_some());
    assert!(check(&report(vec![c.clone(), m])).is_ok());
    // Each way a cell can break the schema is found.
    let mut no_reason = Cell::missing("ping-rtt", "wg", "rtt", "ms", "x");
    no_reason.reason = None;
    let mut both = c.clone();
    both.reason = Some("x".into());
    let mut outside = c.clone();
    outside.value = Some(9.0);
    let mut nan = c.clone();
    nan.value = Some(f64::NAN);
    let mut stranger = c.clone();
    stranger.experiment = "other".into();
    let mut half_paper = c.clone();
    half_paper.paper = Some(1.0);
    for bad in [no_reason, both, outside, nan, stranger, half_paper] {
        assert!(check(&report(vec![bad.clone()])).is_err(), "{bad:?}");
    }
    assert!(check(&report(vec![])).is_err());
}

#[test]
fn a_comparison_pairs_cells_and_keeps_those_of_one_side() {
    let cell = |path: &str, v: f64| Cell::measured("ping-rtt", path, "rtt 64 B", "ms", vec![v]);
    let old = report(vec![
        cell("clear", 0.1),
        cell("esp", 0.2),
        cell("gone", 1.0),
    ]);
    let mut gap = Cell::missing("ping-rtt", "esp", "rtt 512 B", "ms", "x");
    gap.unit = "ms".into();
    let new = report(vec![
        cell("clear", 0.11),
        cell("esp", 0.1),
        gap,
        cell("added", 3.0),
    ]);
    let ch = compare(&old, &new);
    let find = |p: &str, m: &str| ch.iter().find(|c| c.path == p && c.metric == m).unwrap();
    assert!((find("clear", "rtt 64 B").percent().unwrap() - 10.0).abs() < 1e-9);
    assert!((find("esp", "rtt 64 B").percent().unwrap() + 50.0).abs() < 1e-9);
    assert_eq!(find("esp", "rtt 512 B").old, None);
    assert_eq!(
        (find("added", "rtt 64 B").old, find("added", "rtt 64 B").new),
        (None, Some(3.0))
    );
    assert_eq!(
        (find("gone", "rtt 64 B").old, find("gone", "rtt 64 B").new),
        (Some(1.0), None)
    );
    assert_eq!(ch.len(), 5);
    let m = compare_markdown("old|run.json", &ch);
    assert!(
        m.contains("+10.0%") && m.contains("-50.0%") && m.contains("old\\|run.json"),
        "{m}"
    );
    // A file that is not a report, or breaks the schema, is refused naming the file.
    let dir = std::env::temp_dir().join(format!("nv-lab-cmp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{}").unwrap();
    assert!(read(&bad).unwrap_err().to_string().contains("bad.json"));
    let mut broken = old.clone();
    broken.cells[0].value = None;
    std::fs::write(&bad, serde_json::to_string(&broken).unwrap()).unwrap();
    assert!(read(&bad).unwrap_err().to_string().contains("schema"));
    std::fs::write(&bad, serde_json::to_string(&old).unwrap()).unwrap();
    assert_eq!(read(&bad).unwrap(), old);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn csv_and_markdown_escape_what_they_must() {
    let c = Cell::missing("ping-rtt", "a, \"b\"", "rtt|x", "ms", "line\nbreak");
    let r = report(vec![c]);
    let text = csv(&r);
    assert!(text.contains("\"a, \"\"b\"\"\""), "{text}");
    assert!(text.contains("\"line\nbreak\""), "{text}");
    let m = markdown(&r);
    assert!(m.contains("rtt\\|x") && m.contains("line break"), "{m}");
}
