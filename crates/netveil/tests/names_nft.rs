//! Names cannot reach nftables unchecked (issue 21, item 4), end to end in network namespaces (root): the attack
//! as an operator would run it with the `netveil` binary: a policy added at position 0 whose name closes the rule's
//! comment and adds `meta l4proto != 255 accept` ahead of the file's policies. It is refused (exit code 2, the key
//! named, the value not shown), the nftables table is unchanged, and after `kill -9` the covered traffic still
//! does not leave in clear (while uncovered traffic does: the capture sees clear packets).

use netveil_lab::lab::{self, HostPair, Lab, TwoHosts};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");
const TABLE: &str = "netveil_nv0";

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    assert!(lab::is_root(), "the namespace tests need root");
    for t in ["ip", "ping", "nft", "tcpdump", "tshark"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn table(lab: &Lab, ns: &str) -> String {
    lab.exec_ok(ns, &["nft", "list", "table", "inet", TABLE])
        .expect("the table exists")
}

#[test]
fn a_hostile_policy_name_is_refused_and_nothing_leaves_in_clear() {
    let _g = serial();
    // A prefix of this file's own: other test files run namespaces at the same time.
    let mut lab = Lab::new("nvnm").unwrap().with_netveil(NETVEIL);
    let mut hosts = TwoHosts::up(&mut lab, &HostPair::esp("aes128gcm16")).unwrap();
    let a = hosts.ns[0].clone();
    let sock = lab.socket_path("a");
    let b_in = hosts.addrs[1].inner.to_string();
    let b_out = hosts.addrs[1].outer.to_string();
    hosts.ping(&lab, 0, 1, "0.2").unwrap();
    let before = table(&lab, &a);
    let policies_before = lab
        .exec_ok(
            &a,
            &[
                NETVEIL,
                "policy",
                "list",
                "--json",
                "--socket",
                sock.to_str().unwrap(),
            ],
        )
        .unwrap();

    // The attack: the policy's name ends the comment and adds an accept-everything rule in front of the file's
    // policies (the last quote opens the comment the rule text closes).
    let evil = "x\"\nmeta l4proto != 255 accept comment \"";
    for args in [
        vec![
            "policy".to_string(),
            "add".into(),
            "--position".into(),
            "0".into(),
            format!("name={evil}"),
            "direction=out".into(),
            "dst=203.0.113.99/32".into(),
            "action=discard".into(),
        ],
        // The same through an SA name a policy lists, and an SA's own name.
        vec![
            "policy".to_string(),
            "add".into(),
            "--position".into(),
            "0".into(),
            "name=p2".into(),
            "direction=out".into(),
            "dst=203.0.113.99/32".into(),
            "action=protect".into(),
            format!("sas={evil}"),
        ],
        vec!["policy".to_string(), "del".into(), evil.into()],
        vec!["sa".to_string(), "del".into(), evil.into()],
    ] {
        let out = Command::new(NETVEIL)
            .args(&args)
            .arg("--socket")
            .arg(&sock)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("A-Z a-z 0-9 . _ -"), "{args:?}: {err}");
        assert!(
            err.contains("name") || err.contains("sas[0]"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("l4proto"), "the value is shown: {err}");
    }
    assert_eq!(table(&lab, &a), before, "the nftables table changed");
    let policies_after = lab
        .exec_ok(
            &a,
            &[
                NETVEIL,
                "policy",
                "list",
                "--json",
                "--socket",
                sock.to_str().unwrap(),
            ],
        )
        .unwrap();
    assert_eq!(policies_after, policies_before);
    // A plain policy at position 0 is taken (the refusal above is the name's, not the request's).
    let ok = Command::new(NETVEIL)
        .args([
            "policy",
            "add",
            "--position",
            "0",
            "name=plain-0",
            "direction=out",
            "dst=203.0.113.99/32",
            "action=discard",
            "--socket",
        ])
        .arg(&sock)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(table(&lab, &a).contains("\"plain-0\""));

    // The daemon is killed. With a default route towards the peer, covered traffic would now leave in clear.
    hosts.daemons[0].kill();
    std::thread::sleep(Duration::from_millis(300));
    lab.ip(
        &a,
        &["route", "add", "default", "via", &b_out, "dev", "veth-a"],
    )
    .unwrap();
    let blocked_before = lab.nft_counter(&a, TABLE, "output");
    let mut cap = lab
        .capture(&a, "veth-a", "names.pcap", 200, &["icmp"])
        .unwrap();
    // Covered: the peer's inner address. Not covered: its outer address (the positive control).
    for dst in [&b_in, &b_out] {
        let _ = lab.exec(&a, &["ping", "-n", "-c", "5", "-i", "0.05", "-W", "1", dst]);
    }
    std::thread::sleep(Duration::from_millis(200));
    let pcap = cap.stop().unwrap();
    let frames = lab::tshark_frames(&pcap, None, Some("icmp")).unwrap();
    let to = |dst: &str| frames.iter().filter(|f| f.dst == dst).count();
    assert!(
        to(&b_out) >= 5,
        "the capture saw no clear ping to the uncovered address: {frames:?}"
    );
    assert_eq!(
        to(&b_in),
        0,
        "covered traffic left in clear after kill -9: {frames:?}"
    );
    let blocked = lab.nft_counter(&a, TABLE, "output") - blocked_before;
    assert!(blocked >= 5, "the fail-closed filter dropped {blocked}");
    lab.netveil_down(&a, "a").unwrap();
}
