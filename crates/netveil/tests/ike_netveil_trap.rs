//! IKEv2 between two `netveil up` daemons in network namespaces: what happens to covered traffic before and
//! between CHILD_SAs. Transport mode over raw ESP between 192.0.2.1 and 192.0.2.2 (as in ike_netveil.rs), PSK
//! with X25519. The driver installs every configured child's policies at start, so that:
//!
//! - `start_action = trap`: nothing is negotiated at start; the first ping is dropped (never in clear on the
//!   veth) and reported as an acquire, which makes the driver initiate exactly once; later pings pass, through a
//!   CHILD_SA with extended sequence numbers (`aes128gcm16-esn`, shown in `status --json`).
//! - `start_action = none` on both sides: covered traffic is dropped, not sent in clear, and nothing starts; the
//!   control socket refuses to touch the driver's `ike-*` policies and SAs, naming their owner.
//! - `dpd_action = trap`: after the peer is killed (SIGKILL, no DELETE), liveness checks fail and the child is
//!   trapped; the peer restarts (its predecessor's policies restored from the state directory and replaced) and
//!   the next ping re-establishes the child.
//!
//! They need root (CI runs them as root) and the tools installed by .ci/setup.

mod common;

use common::ike_pair::{
    ike_sa_objects as ike_sas, Child, Config, Conn, IkePair, Mode, Net, Retransmit, VETH as ADDR,
};
use netveil_lab::lab::{self, Daemon, Lab};
use std::time::{Duration, Instant};

struct Opts {
    start: &'static str,
    dpd_action: &'static str,
    esp: &'static str,
    dpd: bool,
}

fn config(o: &Opts, side: usize) -> Config {
    let mut child = Child::new("hosts", Mode::Transport).start(o.start);
    child.esp_proposals = vec![o.esp];
    child.dpd_action = Some(o.dpd_action);
    let mut host = Conn::new("host", side).child(child);
    host.dpd_delay = o.dpd.then_some(1);
    Config {
        log_level: "debug",
        retransmit: Some(Retransmit {
            timeout_s: 1,
            base: 1.5,
            tries: 2,
        }),
        connections: vec![host],
    }
}

fn logs(ds: &[&Daemon]) -> String {
    ds.iter()
        .map(|d| format!("\n--- {} ---\n{}", d.name, d.log()))
        .collect()
}

/// `ping -c N` from side 0 to side 1: the number of replies.
fn ping(lab: &Lab, ns: &str, n: u32) -> u32 {
    let out = lab
        .exec(
            ns,
            &[
                "ping",
                "-n",
                "-c",
                &n.to_string(),
                "-i",
                "0.3",
                "-W",
                "1",
                ADDR[1],
            ],
        )
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.split(',')
        .find_map(|p| {
            p.trim()
                .strip_suffix(" received")
                .map(|x| x.parse().unwrap())
        })
        .unwrap_or_else(|| panic!("ping output: {text}"))
}

fn wait(what: &str, secs: u64, ds: &[&Daemon], mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {what}{}",
            logs(ds)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn trap_starts_the_child_on_the_first_ping_with_esn() {
    let pair = IkePair::new("nvtr", Net::Transport);
    let (lab, ns) = (&pair.lab, &pair.ns);
    let o = |start| Opts {
        start,
        dpd_action: "none",
        esp: "aes128gcm16-esn",
        dpd: false,
    };
    let db = pair.start(1, &config(&o("none"), 1));
    let da = pair.start(0, &config(&o("trap"), 0));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        ike_sas(&da).is_empty() && ike_sas(&db).is_empty(),
        "trap: nothing negotiated before traffic{}",
        logs(&[&da, &db])
    );
    assert!(!da.log().contains("initiating"), "{}", logs(&[&da, &db]));

    let mut cap = lab
        .capture(&ns[1], "veth-b", "trap.pcap", 256, &[])
        .unwrap();
    let got = ping(lab, &ns[0], 6);
    let pcap = cap.stop().unwrap();
    assert!(
        (3..6).contains(&got),
        "the first ping dropped (trap), the later ones through: {got} of 6{}",
        logs(&[&da, &db])
    );
    let frames = lab::tshark_frames(&pcap, None, None).unwrap();
    assert!(
        frames.iter().all(|f| !f.protocols.contains("icmp")),
        "ICMP in clear: {frames:?}"
    );
    assert!(
        frames.iter().filter(|f| f.outer_proto == Some(50)).count() >= 2 * (got as usize),
        "ESP both ways: {frames:?}"
    );
    let la = da.log();
    assert!(
        la.contains("acquire for child hosts of connection host"),
        "{}",
        logs(&[&da, &db])
    );
    assert_eq!(
        la.matches("initiating child hosts of connection host")
            .count(),
        1,
        "one initiation, however many packets met the trap{}",
        logs(&[&da, &db])
    );
    // ESN on both sides' SAs.
    for d in [&da, &db] {
        let sas = ike_sas(d);
        assert_eq!(sas.len(), 2, "{sas:?}");
        assert!(
            sas.iter()
                .all(|s| s["esn"] == serde_json::Value::Bool(true)),
            "ESN negotiated: {sas:?}"
        );
    }
    assert!(da.status_text().unwrap().contains("-esn"));
    if let Some(l) = la.lines().find(|l| l.contains("installed in")) {
        println!("a: {}", l.trim());
    }
    if let Some(l) = db.log().lines().find(|l| l.contains("installed in")) {
        println!("b: {}", l.trim());
    }
}

#[test]
fn without_start_covered_traffic_is_dropped_and_ike_names_are_owned() {
    let pair = IkePair::new("nvtn", Net::Transport);
    let (lab, ns) = (&pair.lab, &pair.ns);
    let o = Opts {
        start: "none",
        dpd_action: "none",
        esp: "aes128gcm16",
        dpd: false,
    };
    let db = pair.start(1, &config(&o, 1));
    let da = pair.start(0, &config(&o, 0));
    let mut cap = lab
        .capture(&ns[1], "veth-b", "none.pcap", 256, &[])
        .unwrap();
    assert_eq!(ping(lab, &ns[0], 3), 0, "covered, no SA: dropped");
    let pcap = cap.stop().unwrap();
    let frames = lab::tshark_frames(&pcap, None, None).unwrap();
    assert!(
        frames.iter().all(|f| !f.protocols.contains("icmp")),
        "ICMP in clear: {frames:?}"
    );
    assert!(ike_sas(&da).is_empty() && ike_sas(&db).is_empty());
    assert!(!da.log().contains("initiating"), "{}", logs(&[&da, &db]));
    assert!(
        da.log().contains("acquire"),
        "the drops are reported{}",
        logs(&[&da, &db])
    );
    // The driver's policies and SAs are its own.
    for req in [
        r#"{"request":"policy-del","name":"ike-c1-o0"}"#,
        r#"{"request":"sa-del","name":"ike-1-in"}"#,
        r#"{"request":"policy-add","policy":{"name":"ike-9-o0","direction":"out","src":"192.0.2.1/32","dst":"192.0.2.2/32","action":"bypass"}}"#,
    ] {
        let v = da.ask(req).unwrap();
        let e = v["error"].as_str().unwrap_or_default();
        assert!(
            e.contains("owned by the IKE driver") && e.contains("netveil terminate"),
            "{req}: {v}"
        );
    }
    assert!(
        da.status_json().unwrap().to_string().contains("ike-c1-o0"),
        "the policy is still there"
    );
    assert_eq!(ping(lab, &ns[0], 1), 0, "and still drops");
}

#[test]
fn dpd_action_trap_after_the_peer_is_killed_and_restarts() {
    let pair = IkePair::new("nvtd", Net::Transport);
    let (lab, ns) = (&pair.lab, &pair.ns);
    let o = |start, dpd_action, dpd| Opts {
        start,
        dpd_action,
        esp: "aes128gcm16",
        dpd,
    };
    let cb = config(&o("none", "none", false), 1);
    let mut db = pair.start(1, &cb);
    let da = pair.start(0, &config(&o("start", "trap", true), 0));
    wait("the CHILD_SA", 10, &[&da, &db], || {
        ike_sas(&da).len() == 2 && ike_sas(&db).len() == 2
    });
    assert_eq!(ping(lab, &ns[0], 2), 2, "{}", logs(&[&da, &db]));
    // Killed: no DELETE. a's liveness checks go unanswered, the IKE SA dies, the child is trapped.
    db.kill();
    wait("the dead peer detected", 30, &[&da], || {
        da.log().contains("trapped (dpd_action)")
    });
    assert!(
        ike_sas(&da).is_empty(),
        "a removed the dead peer's CHILD_SA"
    );
    let acquires = |d: &Daemon| d.log().matches("acquire policy=ike-c1-o0").count();
    let before = acquires(&da);
    assert_eq!(ping(lab, &ns[0], 8), 0, "no peer: dropped");
    // Those packets met the trap: several acquires (one a second), one initiation, unanswered; no other while it
    // is under way.
    assert!(acquires(&da) >= before + 2, "{}", logs(&[&da]));
    wait("the initiation without a peer to fail", 20, &[&da], || {
        da.log().matches("did not answer").count() == 2
    });
    assert_eq!(
        da.log().matches("initiating child hosts").count(),
        1,
        "one initiation while one is under way{}",
        logs(&[&da])
    );
    // The peer comes back (its predecessor's policies restored from the state directory, and replaced).
    let db = pair.start(1, &cb);
    let got = ping(lab, &ns[0], 6);
    assert!(
        (3..6).contains(&got),
        "the trap re-established the child: {got} of 6{}",
        logs(&[&da, &db])
    );
    assert_eq!(ike_sas(&da).len(), 2);
}
