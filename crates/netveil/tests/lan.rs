//! The wired-LAN lab (Linux bridge as the switch) without protection: what l2sec must defeat. An eavesdropper sees
//! every host's addresses and traffic, and an ARP-spoofing attacker (scapy, independent of netveil) redirects a
//! victim's traffic to itself. Needs root and the tools of .ci/setup (tcpdump, tshark, scapy in .venv).

use netveil_lab::lab::{self, Lab};
use netveil_lab::lan::{mac_str, Lan, PORT};
use std::path::PathBuf;
use std::time::Duration;

fn python() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    assert!(p.exists(), "{} is missing: run .ci/setup", p.display());
    p
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/attacks/arp_spoof.py")
}

#[test]
fn unprotected_lan_leaks_addresses_and_falls_to_arp_spoofing() {
    assert!(lab::is_root(), "needs root");
    let mut lab = Lab::new("nvl").expect("lab");
    let lan = Lan::build(&mut lab, &["h1", "h2", "h3", "eve", "mallory"]).unwrap();
    let (h1, h2, eve, mal) = (
        lan.station("h1").unwrap().clone(),
        lan.station("h2").unwrap().clone(),
        lan.station("eve").unwrap().clone(),
        lan.station("mallory").unwrap().clone(),
    );

    // The eavesdropper captures everything its port gets while h1 pings h2.
    let mut cap = lab.capture(&eve.ns, PORT, "eve.pcap", 200, &[]).unwrap();
    let out = lab
        .exec_ok(
            &h1.ns,
            &["ping", "-n", "-c", "3", "-i", "0.2", &h2.ip.to_string()],
        )
        .unwrap();
    assert!(out.contains(" 0% packet loss"), "{out}");
    let pcap = cap.stop().unwrap();
    let frames = lab::tshark_frames(&pcap, None, None).unwrap();
    assert!(
        frames.iter().any(|f| f.protocols.contains("arp")),
        "{frames:?}"
    );
    assert!(
        frames
            .iter()
            .any(|f| f.protocols.contains("icmp") && f.addrs.contains(&h2.ip.to_string())),
        "the eavesdropper sees the hosts' ICMP and addresses: {frames:?}"
    );
    assert_eq!(
        lan.neighbour(&lab, "h1", h2.ip).unwrap().as_deref(),
        Some(mac_str(&h2.mac).as_str())
    );

    // Mallory keeps telling h1 that h2's address is at mallory's MAC (as arpspoof does: continuously, so that
    // h1's own re-resolution cannot undo it).
    let mut spoofer = lab
        .command(
            &mal.ns,
            &[
                python().to_str().unwrap(),
                script().to_str().unwrap(),
                PORT,
                &h1.ip.to_string(),
                &mac_str(&h1.mac),
                &h2.ip.to_string(),
                &mac_str(&mal.mac),
                "50",
                "0.2",
            ],
        )
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    let poisoned = loop {
        let n = lan.neighbour(&lab, "h1", h2.ip).unwrap();
        if n.as_deref() == Some(mac_str(&mal.mac).as_str()) {
            break true;
        }
        if t.elapsed() > Duration::from_secs(8) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(poisoned, "the spoofed ARP entry never took");
    // h1's packets for h2 now go to mallory.
    let mut cap = lab
        .capture(&mal.ns, PORT, "mallory.pcap", 200, &[])
        .unwrap();
    let _ = lab.exec(
        &h1.ns,
        &[
            "ping",
            "-n",
            "-c",
            "2",
            "-i",
            "0.2",
            "-W",
            "1",
            &h2.ip.to_string(),
        ],
    );
    std::thread::sleep(Duration::from_millis(200));
    let pcap = cap.stop().unwrap();
    let out = lab
        .exec_ok(
            &mal.ns,
            &["tcpdump", "-n", "-e", "-r", pcap.to_str().unwrap(), "icmp"],
        )
        .unwrap();
    let redirected = out
        .lines()
        .filter(|l| {
            l.contains(&format!("> {},", mac_str(&mal.mac)))
                && l.contains(&format!("> {}: ICMP echo request", h2.ip))
        })
        .count();
    let _ = spoofer.kill();
    let _ = spoofer.wait();
    assert!(
        redirected >= 1,
        "h1's pings to h2 were not redirected to mallory:\n{out}"
    );
}
