//! `netveil lab --quick`: the machinery of the report. The run writes every file (JSON, CSV, Markdown, the page and
//! its SVG figures); the report keeps its schema (every cell a value or a stated reason); every experiment, path
//! and metric of the quick matrix is there with a value (wireguard-go aside, which CI does not install); the bytes
//! each protocol adds per packet on the wire (PILSC, ESP, AH, ESP+AH, PSP, l2sec, WireGuard) equal its formula (a
//! count, not a timing); every one of the studies' findings is judged (holds or does not) and shown in the report.
//!
//! What the findings and the round-trip comparisons say (protection raises the round trip over the clear path, PSP
//! keeps its goodput under loss, ...) are claims about timings of one quick run on whatever machine runs it: they
//! are printed (run with `--nocapture` to see them) and written into the report, holding or not, never asserted.
//!
//! Needs root, ping, arping, tcpdump, tshark, iptables, iperf3, openssl, curl, nft, nginx, postfix, swaks, sshd,
//! scp, GNU time and sipp.

use netveil_lab::lab;
use netveil_lab::lab_report::{self, Report};

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");

#[test]
fn the_quick_lab_writes_a_report_that_keeps_its_schema_and_the_formulas() {
    assert!(lab::is_root(), "the namespace tests need root");
    for t in [
        "ip", "ping", "arping", "tcpdump", "tshark", "iptables", "iperf3", "openssl", "curl",
        "nft", "nginx", "postfix", "swaks", "sshd", "scp", "time", "sipp",
    ] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    let dir = netveil_testkit::private_dir("nv-lab-report");
    let out = dir.join("report");
    let run = std::process::Command::new(NETVEIL)
        .args(["lab", "--quick", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(run.status.success(), "{log}");
    let text = std::fs::read_to_string(out.join("report.json")).unwrap();
    let r: Report = serde_json::from_str(&text).unwrap();
    lab_report::check(&r).unwrap();
    assert_eq!(
        r.experiments,
        [
            "ping-rtt", "overhead", "loss", "delay", "http", "smtp", "mtu", "pilsc", "iperf",
            "scp", "voip", "ops"
        ]
    );
    let csv = std::fs::read_to_string(out.join("report.csv")).unwrap();
    assert_eq!(csv.lines().count(), r.cells.len() + 1);
    assert!(std::fs::read_to_string(out.join("report.md"))
        .unwrap()
        .contains("## overhead"));
    // The page shows both figures, and they are SVG.
    let page = std::fs::read_to_string(out.join("index.html")).unwrap();
    for fig in [
        "ping-rtt.svg",
        "overhead.svg",
        "loss.svg",
        "http.svg",
        "smtp.svg",
        "delay.svg",
        "pilsc.svg",
        "iperf.svg",
        "scp.svg",
        "voip.svg",
        "ops.svg",
    ] {
        assert!(page.contains(&format!("<img src=\"{fig}\"")), "{page}");
        let svg = std::fs::read_to_string(out.join(fig)).unwrap();
        assert!(
            svg.contains("<svg") && svg.trim_end().ends_with("</svg>"),
            "{fig}"
        );
    }
    // Every overhead path was measured (wireguard-go where it is installed: CI does not build it; strongSwan is
    // installed by .ci/setup), and measured what its formula says.
    let overhead: Vec<_> = r
        .cells
        .iter()
        .filter(|c| c.experiment == "overhead")
        .collect();
    assert_eq!(overhead.len(), 14, "{log}");
    for c in &overhead {
        if c.path == "wireguard-go" && c.value.is_none() {
            assert!(
                c.reason.as_deref().unwrap_or("").contains("not installed"),
                "{c:?}"
            );
            continue;
        }
        assert!(c.expected.is_some(), "{c:?}");
        assert_eq!(c.value, c.expected, "{c:?}");
    }
    // The clear path and netveil's ESP and PSP paths were measured at each size; how their round trips compare
    // (protection above clear, in the studies) is reported, not asserted: one quick run's timings.
    let rtt = |path: &str, bytes: u32| {
        r.cells
            .iter()
            .find(|c| c.path == path && c.metric == format!("rtt {bytes} B"))
            .and_then(|c| c.value)
            .unwrap_or_else(|| panic!("{path} {bytes} B: no value\n{log}"))
    };
    let mut claims = Vec::new();
    for bytes in [64, 512, 1024] {
        let clear = rtt("clear", bytes);
        for path in [
            "netveil esp aes128gcm16 tunnel",
            "netveil esp aes128gcm16 transport",
            "netveil psp aes-gcm-128",
            // The same tunnel keyed by netveil's IKEv2.
            "netveil esp aes128gcm16 tunnel (ike)",
            // The strongSwan peer (both ends strongSwan; .ci/setup installs it).
            "strongswan esp aes128gcm16 (libipsec)",
        ] {
            let v = rtt(path, bytes);
            claims.push(format!(
                "rtt {bytes} B: {path} {v:.3} ms {} clear {clear:.3} ms",
                if v > clear { ">" } else { "<=" }
            ));
        }
        for path in ["l2sec aes128gcm", "l2sec null-null (noENC-noHMAC)"] {
            let (v, bridge) = (rtt(path, bytes), rtt("plain bridge", bytes));
            claims.push(format!(
                "rtt {bytes} B: {path} {v:.3} ms {} plain bridge {bridge:.3} ms",
                if v > bridge { ">" } else { "<=" }
            ));
        }
    }
    // ARP too: l2sec seals it (both measured; how they compare is reported).
    let arp = |path: &str| {
        r.cells
            .iter()
            .find(|c| c.path == path && c.metric == "arp rtt")
            .and_then(|c| c.value)
            .unwrap_or_else(|| panic!("{path} arp rtt: no value\n{log}"))
    };
    let (l2, bridge) = (arp("l2sec aes128gcm"), arp("plain bridge"));
    claims.push(format!(
        "arp rtt: l2sec aes128gcm {l2:.3} ms {} plain bridge {bridge:.3} ms",
        if l2 > bridge { ">" } else { "<=" }
    ));
    // Loss, HTTP, SMTP, iperf and SCP: every path but wireguard-go (not in CI) measured at every level and file.
    for c in r.cells.iter().filter(|c| {
        [
            "loss", "delay", "http", "smtp", "pilsc", "iperf", "scp", "voip",
        ]
        .contains(&c.experiment.as_str())
    }) {
        if c.path == "wireguard-go" && c.value.is_none() {
            continue;
        }
        assert!(c.value.is_some(), "{c:?}\n{log}");
    }
    // ops: every ESP operation at every quick size in both modes, and PSP's stages, measured; the one PSP stage
    // netveil does not run per packet says why.
    // scp: each path's seven cells (time, rate, CPU and memory, captured packets, duplicate ACKs), and each l2sec
    // path's daemons' three and its rate against the bridge's (l2sec with AES-GCM and with the null suite).
    let scp = r.cells.iter().filter(|c| c.experiment == "scp").count();
    assert_eq!(scp, 7 + 2 * 11, "{log}");
    // iperf: the bridge's seven cells; the null suite's and AES-GCM's eleven, AES-GCM's memory over the null
    // suite's.
    let iperf = r.cells.iter().filter(|c| c.experiment == "iperf").count();
    assert_eq!(iperf, 7 + 11 + 12, "{log}");
    // pilsc: two files without PILSC and through both modes (with the share over clear), and the 1 MB file at
    // two rule counts (with its share over clear).
    let pilsc = r.cells.iter().filter(|c| c.experiment == "pilsc").count();
    assert_eq!(pilsc, 2 + 2 * 2 * 2 + 2 * 2, "{log}");
    // voip: both quick paths placed their 4 calls, all succeeded, and each call's RTP came back both ways (2
    // streams), none lost; l2sec's daemons' CPU and memory are there.
    let voip = |path: &str, metric: &str| {
        r.cells
            .iter()
            .find(|c| c.experiment == "voip" && c.path == path && c.metric == metric)
            .and_then(|c| c.value)
            .unwrap_or_else(|| panic!("voip {path} {metric}: no value\n{log}"))
    };
    for path in ["plain bridge", "l2sec aes128gcm"] {
        assert_eq!(voip(path, "calls placed"), 4.0, "{log}");
        assert_eq!(voip(path, "successful calls"), 100.0, "{log}");
        assert_eq!(voip(path, "rtp streams"), 8.0, "{log}");
        assert_eq!(voip(path, "rtp lost"), 0.0, "{log}");
    }
    assert!(voip("l2sec aes128gcm", "daemon peak memory") > 0.0);
    // mtu: every download measured, below, at and above the ideal MTU (1,500 over a 1,500-byte link: the sender
    // learns the ideal size from netveil's ICMP fragmentation-needed); above it the load is the ideal's within a
    // few packets' headers (the first full-size segments go again at the smaller size).
    for c in r.cells.iter().filter(|c| c.experiment == "mtu") {
        assert!(c.value.is_some(), "{c:?}\n{log}");
        if c.metric.starts_with("load vs ideal random 1MB at mtu 1500") {
            assert!(c.value.unwrap().abs() < 5.0, "{c:?}\n{log}");
        }
    }
    assert_eq!(
        r.cells.iter().filter(|c| c.experiment == "mtu").count(),
        2 * (5 + 3 + 5),
        "{log}"
    );
    let ops: Vec<_> = r.cells.iter().filter(|c| c.experiment == "ops").collect();
    assert_eq!(ops.len(), 2 * (3 * 9 + 1) + 8, "{ops:?}");
    for c in &ops {
        if c.metric.starts_with("send key derivation") {
            assert!(
                c.value.is_none() && c.reason.as_deref().unwrap_or("").contains("per packet"),
                "{c:?}"
            );
        } else {
            assert!(c.value.is_some(), "{c:?}");
        }
    }
    // The findings: every one judged on this run's cells (its cells are all there), and the report shows each
    // with its verdict; whether it holds is this run's claim, reported here and in the report, not asserted.
    let findings = lab_report::findings(&r);
    assert_eq!(findings.len(), 12);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Findings"), "{md}");
    for f in &findings {
        assert!(f.holds.is_some(), "a finding not judged: {f:?}\n{log}");
        assert!(
            md.contains(&format!("**{}**", f.verdict())) && page.contains(f.verdict()),
            "{f:?} is not in the report"
        );
        claims.push(format!(
            "finding {}: {} ({})",
            f.finding,
            f.verdict(),
            f.detail
        ));
    }
    println!("claims of this run (reported, not asserted):");
    for c in &claims {
        println!("  {c}");
    }
    let held = findings.iter().filter(|f| f.holds == Some(true)).count();
    println!("{held} of {} findings hold on this run", findings.len());
    // --compare: a second run (overhead only) against this one; the same bytes per packet, +0.0%; the round-trip
    // cells only the first run has are listed. A file that is not a report is refused before anything runs (exit 2).
    let out2 = out.with_extension("second");
    let run = std::process::Command::new(NETVEIL)
        .args(["lab", "--quick", "--only", "overhead", "--compare"])
        .arg(out.join("report.json"))
        .arg("--out")
        .arg(&out2)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let cmp = std::fs::read_to_string(out2.join("compare.md")).unwrap();
    assert!(
        cmp.contains("| overhead | esp tunnel aes128-sha1 | overhead | 72.000 B/packet | 72.000 B/packet | +0.0% |"),
        "{cmp}"
    );
    assert!(cmp.contains("| ping-rtt | clear | rtt 64 B |"), "{cmp}");
    let bad = std::process::Command::new(NETVEIL)
        .args(["lab", "--quick", "--compare"])
        .arg(out.join("report.csv"))
        .arg("--out")
        .arg(&out2)
        .output()
        .unwrap();
    assert_eq!(
        bad.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("report.csv"));
}

/// Ctrl-C during a run: the lab removes its namespaces (and what runs in them) and its directories, and exits 130.
#[test]
fn a_lab_stopped_with_ctrl_c_leaves_nothing_behind() {
    assert!(lab::is_root(), "the namespace tests need root");
    let dir = netveil_testkit::private_dir("nv-lab-int");
    let out = dir.join("report");
    let mut child = std::process::Command::new(NETVEIL)
        .args(["lab", "--quick", "--only", "http", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let prefix = format!("nvlab{}-", child.id());
    let namespaces = || {
        let o = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // Whether nginx runs in one of the lab's namespaces.
    let nginx_runs = || {
        namespaces().iter().any(|l| {
            let ns = l.split_whitespace().next().unwrap_or_default();
            let o = std::process::Command::new("ip")
                .args(["netns", "pids", ns])
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .any(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|c| c.trim() == "nginx")
                })
        })
    };
    // Wait until a lab is up, with nginx running in it.
    netveil_testkit::wait_until(
        std::time::Duration::from_secs(60),
        "a lab with nginx running in it",
        nginx_runs,
    );
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let st = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(st.code(), Some(130), "{err}");
    assert!(err.contains("SIGINT"), "{err}");
    assert_eq!(namespaces(), Vec::<String>::new());
    let dirs: Vec<_> = std::fs::read_dir(lab::LAB_BASE)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(dirs, Vec::<String>::new());
}
