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

use netveil_lab::lab::{self, Daemon, Lab, TRANSPORT_FWMARK};
use std::time::{Duration, Instant};

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");
const ADDR: [&str; 2] = ["192.0.2.1", "192.0.2.2"];
const IDS: [&str; 2] = ["@a.lab.test", "@b.lab.test"];

struct Opts {
    start: &'static str,
    dpd_action: &'static str,
    esp: &'static str,
    dpd: bool,
}

fn config(lab: &Lab, side: usize, o: &Opts) -> String {
    let (me, peer) = (ADDR[side], ADDR[1 - side]);
    format!(
        "log_level = \"debug\"\n[interface]\nname = \"nvtr{side}\"\nmtu = 1400\ncontrol_socket = \"{sock}\"\n\
         state_dir = \"{state}\"\nfwmark = {TRANSPORT_FWMARK}\nroutes = [\"{peer}/32\"]\n\n\
         [ike]\nsocket_mark = {TRANSPORT_FWMARK}\nretransmit_timeout = \"1s\"\nretransmit_base = 1.5\n\
         retransmit_tries = 2\n\n\
         [[ike.connection]]\nname = \"host\"\nlocal_addrs = [\"{me}\"]\nremote_addrs = [\"{peer}\"]\n\
         proposals = [\"aes128gcm16-prfsha256-x25519\"]\npsk = \"netveil-ike-psk-0123456789\"\nencap = false\n\
         {dpd}local = {{ id = \"{lid}\", auth = \"psk\" }}\nremote = {{ id = \"{rid}\", auth = \"psk\" }}\n\n\
         [[ike.connection.children]]\nname = \"hosts\"\nmode = \"transport\"\nesp_proposals = [\"{esp}\"]\n\
         start_action = \"{start}\"\ndpd_action = \"{dpd_action}\"\n",
        sock = lab.socket_path(&format!("nv{side}")).display(),
        state = lab.dir().join(format!("state-{side}")).display(),
        lid = IDS[side],
        rid = IDS[1 - side],
        start = o.start,
        dpd_action = o.dpd_action,
        esp = o.esp,
        dpd = if o.dpd { "dpd_delay = \"1s\"\n" } else { "" },
    )
}

/// The SA objects named `ike-*` in a daemon's status JSON.
fn ike_sas(d: &Daemon) -> Vec<serde_json::Value> {
    fn walk(v: &serde_json::Value, out: &mut Vec<serde_json::Value>) {
        match v {
            serde_json::Value::Object(m) => {
                if m.get("name")
                    .and_then(|n| n.as_str())
                    .is_some_and(|n| n.starts_with("ike-"))
                    && m.contains_key("spi")
                {
                    out.push(v.clone());
                }
                m.values().for_each(|x| walk(x, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&d.status_json().unwrap_or_default(), &mut out);
    out
}

/// Two namespaces joined by a veth, IPv4 only.
fn lab(prefix: &str) -> (Lab, [String; 2]) {
    if !lab::is_root() {
        panic!("the netns tests need root: run them as root (CI does)");
    }
    for t in ["ip", "ping", "tcpdump", "tshark", "nft"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    let mut lab = Lab::new(prefix).unwrap().with_netveil(NETVEIL);
    let a = lab.add_ns("a").unwrap();
    let b = lab.add_ns("b").unwrap();
    for ns in [&a, &b] {
        for k in ["all", "default"] {
            lab.exec_ok(
                ns,
                &[
                    "sysctl",
                    "-qw",
                    &format!("net.ipv6.conf.{k}.disable_ipv6=1"),
                ],
            )
            .unwrap();
        }
    }
    lab.veth(&a, "veth-a", &b, "veth-b").unwrap();
    lab.addr(&a, "veth-a", &format!("{}/24", ADDR[0])).unwrap();
    lab.addr(&b, "veth-b", &format!("{}/24", ADDR[1])).unwrap();
    (lab, [a, b])
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
    let (lab, ns) = lab("nvtr");
    let o = |start| Opts {
        start,
        dpd_action: "none",
        esp: "aes128gcm16-esn",
        dpd: false,
    };
    let db = lab
        .start_daemon_with(&ns[1], "nv1", &config(&lab, 1, &o("none")), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let da = lab
        .start_daemon_with(&ns[0], "nv0", &config(&lab, 0, &o("trap")), &[])
        .unwrap_or_else(|e| panic!("{e}"));
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
    let got = ping(&lab, &ns[0], 6);
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
    let (lab, ns) = lab("nvtn");
    let o = Opts {
        start: "none",
        dpd_action: "none",
        esp: "aes128gcm16",
        dpd: false,
    };
    let db = lab
        .start_daemon_with(&ns[1], "nv1", &config(&lab, 1, &o), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let da = lab
        .start_daemon_with(&ns[0], "nv0", &config(&lab, 0, &o), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let mut cap = lab
        .capture(&ns[1], "veth-b", "none.pcap", 256, &[])
        .unwrap();
    assert_eq!(ping(&lab, &ns[0], 3), 0, "covered, no SA: dropped");
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
    assert_eq!(ping(&lab, &ns[0], 1), 0, "and still drops");
}

#[test]
fn dpd_action_trap_after_the_peer_is_killed_and_restarts() {
    let (lab, ns) = lab("nvtd");
    let o = |start, dpd_action, dpd| Opts {
        start,
        dpd_action,
        esp: "aes128gcm16",
        dpd,
    };
    let cb = config(&lab, 1, &o("none", "none", false));
    let mut db = lab
        .start_daemon_with(&ns[1], "nv1", &cb, &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let da = lab
        .start_daemon_with(
            &ns[0],
            "nv0",
            &config(&lab, 0, &o("start", "trap", true)),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    wait("the CHILD_SA", 10, &[&da, &db], || {
        ike_sas(&da).len() == 2 && ike_sas(&db).len() == 2
    });
    assert_eq!(ping(&lab, &ns[0], 2), 2, "{}", logs(&[&da, &db]));
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
    assert_eq!(ping(&lab, &ns[0], 8), 0, "no peer: dropped");
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
    let db = lab
        .start_daemon_with(&ns[1], "nv1", &cb, &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let got = ping(&lab, &ns[0], 6);
    assert!(
        (3..6).contains(&got),
        "the trap re-established the child: {got} of 6{}",
        logs(&[&da, &db])
    );
    assert_eq!(ike_sas(&da).len(), 2);
}
