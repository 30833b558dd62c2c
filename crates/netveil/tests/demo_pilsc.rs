//! `netveil demo --pilsc`: the walk-through (rule file, traffic, the wire, status, tampering in each mode) runs to
//! the end and says what it showed. Needs root, iptables, tshark and python3 (see .ci/setup).

use netveil_lab::lab;

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");

#[test]
fn pilsc_demo_runs() {
    assert!(lab::is_root(), "the PILSC demo needs root");
    for t in ["ip", "ping", "tcpdump", "tshark", "iptables", "python3"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    let out = std::process::Command::new(NETVEIL)
        .args(["demo", "--pilsc", "--megabytes", "4"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{err}");
    for want in [
        "Rule = 1;  Security = true;",
        "3 packets transmitted, 3 received",
        "4 MB sent and byte-checked",
        "5 datagrams \"PILSC DEMO: hello from host a\", 5 received",
        "is nowhere in the capture",
        "options (security)",
        "drops: none",
        "host b DELIVERED it, changed: it begins \"C?@?\"",
        "host b dropped it (drops.auth = 1)",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}
