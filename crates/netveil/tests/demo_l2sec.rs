//! `netveil demo --l2sec`: the wired-LAN walk-through (clear LAN, l2sec-protected LAN, eavesdropper, ARP spoofing)
//! runs to the end. Needs root and the tools of .ci/setup (tcpdump, tshark, nft, scapy in .venv).

use netveil_lab::lab;

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");

#[test]
fn l2sec_demo_runs() {
    assert!(lab::is_root(), "the l2sec demo needs root");
    for t in ["ip", "ping", "tcpdump", "tshark", "nft"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run .ci/setup",
        python.display()
    );
    let t0 = std::time::Instant::now();
    let out = std::process::Command::new(NETVEIL)
        .args(["demo", "--l2sec", "--megabytes", "16"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{err}");
    for want in [
        // Without protection eve sees ARP and ICMP with the addresses.
        "ethertype ARP (0x0806)",
        "192.0.2.10 > 192.0.2.11: ICMP echo request",
        "IP addresses in them: 192.0.2.10, 192.0.2.11",
        // Protected: pings and TCP work, the status shows sessions with both peers.
        "l2sec: eth0 (TAP l2s0, 02:00:5e:00:53:0a 192.0.2.10/24",
        "TCP: sent 16 MB from h1 to 192.0.2.11:5201",
        // Eve sees only l2sec frames.
        "ethertype Unknown (0x88b5)",
        "frames tshark dissects as ARP: 0, IPv4: 0, IPv6: 0; frames showing an IP address: 0",
        // The ARP spoofing fails.
        "10 packets transmitted, 10 received, 0% packet loss",
        "after:  h1: ip -4 neigh show 192.0.2.11 dev l2s0: 192.0.2.11 lladdr 02:00:5e:00:53:0b",
        "forged replies dropped at h1's port; h1 still maps 192.0.2.11 to 02:00:5e:00:53:0b",
        "All steps succeeded",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    // Every ping of the protected LAN got all its replies.
    assert_eq!(
        text.matches("3 packets transmitted, 3 received, 0% packet loss")
            .count(),
        3,
        "{text}"
    );
    // Eve's EtherType histogram has the l2sec EtherType only.
    let hist: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("EtherTypes (tshark -e eth.type)"))
        .skip(1)
        .take_while(|l| !l.contains("frames tshark dissects"))
        .collect();
    assert_eq!(hist.len(), 1, "{hist:?}");
    assert!(hist[0].trim().starts_with("0x88b5"), "{hist:?}");
    println!("{text}");
    println!("demo run time: {:.1} s", t0.elapsed().as_secs_f64());
}
