//! IKE operations between two `netveil up` daemons in network namespaces: `netveil initiate` (waits for the
//! CHILD_SA; unknown names exit 2; a peer that never answers gives up at `--timeout`), `netveil status` in text
//! (as `swanctl --list-sas`) and JSON (both sides' SPIs crosswise, the ping's packets counted on the child),
//! `netveil keys --wireshark` before and after an IKE rekey, and `netveil terminate --child` / `terminate
//! CONNECTION` (the peer's SAs go too). The whole IKE exchange is captured; tshark, with nothing but the exported
//! `ikev2_decryption_table`, decrypts every encrypted IKE message (the IDs and AUTH of IKE_AUTH, the CREATE_CHILD_SA
//! of the rekey sealed with the old SA's keys, the DELETEs with the new SA's) and reports its integrity checksum
//! as correct.
//!
//! They need root (CI runs them as root) and the tools installed by .ci/setup.

mod common;

use common::ike_pair::{self, Child, Config, Conn, IkePair, Mode, Net, NETVEIL, VETH as ADDR};
use netveil_lab::lab::Daemon;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The initiator rekeys its IKE SA this soon (the responder: the default 4 h).
const IKE_REKEY: u64 = 8;

fn config(side: usize) -> Config {
    let mut host =
        Conn::new("host", side).child(Child::new("hosts", Mode::Transport).start("none"));
    host.proposals = vec!["aes256-sha256-x25519"];
    if side == 0 {
        host.rekey_time = Some(IKE_REKEY as u32);
        host.rand_time = Some(0);
    }
    let mut conns = vec![host];
    if side == 0 {
        // The same peer with a PSK it does not have: it refuses our AUTH.
        conns.push(Conn {
            proposals: vec!["aes256-sha256-x25519"],
            psk: "not-the-peers-psk-0123456789",
            ..Conn::new("badpsk", 0).child(Child::new("bad", Mode::Transport))
        });
        // A peer that never answers (nobody has the address).
        conns.push(Conn {
            remote_addrs: vec!["192.0.2.99"],
            proposals: vec!["aes256-sha256-x25519"],
            encap: None,
            remote_id: "@c.lab.test",
            ..Conn::new("dead", 0).child(Child::new("void", Mode::Transport))
        });
    }
    Config::new(conns)
}

/// `netveil ARGS --socket` the daemon's: (exit code, stdout, stderr).
fn netveil(d: &Daemon, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(NETVEIL)
        .args(args)
        .arg("--socket")
        .arg(&d.socket)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The IKE part of `netveil status --json`.
fn ike(d: &Daemon) -> Value {
    let (rc, out, err) = netveil(d, &["status", "--json"]);
    assert_eq!(rc, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    v["engines"]["ike"].clone()
}

fn wait_for(what: &str, logs: &dyn Fn() -> String, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{what}: not in time{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// tshark's dissection of every IKE message in `pcap` with `conf` as its configuration directory, one text per
/// frame.
fn tshark_frames(pcap: &Path, conf: &Path) -> Vec<String> {
    let out = Command::new("tshark")
        .env("WIRESHARK_CONFIG_DIR", conf)
        .args(["-n", "-r"])
        .arg(pcap)
        .args(["-Y", "isakmp", "-V"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split("\nFrame ")
        .filter(|f| f.contains("Internet Security Association"))
        .map(String::from)
        .collect()
}

#[test]
fn initiate_status_keys_and_terminate_with_tshark_decrypting_ike() {
    let pair = IkePair::new("nvop", Net::Transport);
    let (lab, ns) = (&pair.lab, &pair.ns);
    let db = pair.start(1, &config(1));
    let da = pair.start(0, &config(0));
    let logs = ike_pair::logs([&da, &db]);
    let mut cap = lab
        .capture(
            &ns[1],
            "veth-b",
            "ike.pcap",
            2048,
            &["udp", "port", "500", "or", "udp", "port", "4500"],
        )
        .unwrap();
    // Nothing up before `initiate` (start_action = none).
    assert_eq!(ike(&da)["ike_sas"], serde_json::json!([]));

    // Errors: an unknown connection or child exits 2 at once, a peer that never answers gives up at --timeout.
    let (rc, _, err) = netveil(&da, &["initiate", "nope"]);
    assert_eq!((rc, err.trim()), (2, "netveil: no connection named 'nope'"));
    let (rc, _, err) = netveil(&da, &["initiate", "host", "--child", "nope"]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("has no child named 'nope'"), "{err}");
    let (rc, _, err) = netveil(&da, &["terminate", "--ike-id", "99"]);
    assert_eq!((rc, err.trim()), (2, "netveil: no IKE SA #99"));
    let (rc, _, err) = netveil(&da, &["terminate", "host"]);
    assert_eq!(
        (rc, err.trim()),
        (2, "netveil: no IKE SA of this connection to terminate")
    );
    let t = Instant::now();
    let (rc, _, err) = netveil(&da, &["initiate", "dead", "--timeout", "2"]);
    assert_eq!(rc, 1, "{err}");
    assert!(err.contains("no outcome within 2 s"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    // A failed negotiation: exit 1, with the reason the log gives (which id the peer refused).
    let (rc, _, err) = netveil(&da, &["initiate", "badpsk"]);
    assert_eq!(rc, 1, "{err}{}", logs());
    assert!(
        err.contains("the peer refused our authentication as a.lab.test (check the pre-shared key and local.id"),
        "{err}"
    );
    assert!(
        db.log()
            .contains("the peer failed to authenticate as a.lab.test"),
        "{}",
        logs()
    );

    // initiate: returns once the CHILD_SA is up.
    let (rc, out, err) = netveil(&da, &["initiate", "host"]);
    assert_eq!(rc, 0, "{out}{err}{}", logs());
    assert!(
        out.starts_with("CHILD_SA hosts of connection host established (IKE SA #3, SPIs in "),
        "{out}"
    );
    let out = lab
        .exec_ok(
            &ns[0],
            &["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", ADDR[1]],
        )
        .unwrap_or_else(|e| panic!("ping: {e}{}", logs()));
    assert!(out.contains("3 received"), "{out}");

    // status, JSON: both sides agree (SPIs crosswise), the ping is counted on the child.
    // (A's first IKE SA is the dead connection's, still trying.)
    let host = |d: &Daemon| {
        ike(d)["ike_sas"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "host")
            .cloned()
            .unwrap_or_else(|| panic!("no IKE SA of host{}", logs()))
    };
    let (sa_a, sa_b) = (host(&da), host(&db));
    assert_eq!(sa_a["state"], "ESTABLISHED", "{sa_a}");
    assert_eq!(sa_a["version"], "IKEv2");
    assert_eq!(
        (sa_a["initiator"].clone(), sa_b["initiator"].clone()),
        (true.into(), false.into())
    );
    assert_eq!(sa_a["initiator_spi"], sa_b["initiator_spi"]);
    assert_eq!(sa_a["responder_spi"], sa_b["responder_spi"]);
    assert_eq!(
        (sa_a["local_id"].as_str(), sa_a["remote_id"].as_str()),
        (Some("a.lab.test"), Some("b.lab.test"))
    );
    assert_eq!(
        (sa_a["local_host"].as_str(), sa_b["local_host"].as_str()),
        (Some(ADDR[0]), Some(ADDR[1]))
    );
    assert_eq!(sa_a["proposal"], "aes256-sha256-prfsha256-x25519");
    assert!(sa_a["rekey_time"].as_u64().unwrap() <= IKE_REKEY, "{sa_a}");
    let (ca, cb) = (&sa_a["child_sas"][0], &sa_b["child_sas"][0]);
    assert_eq!(
        (ca["name"].as_str(), ca["state"].as_str()),
        (Some("hosts"), Some("INSTALLED"))
    );
    assert_eq!(
        (ca["mode"].as_str(), ca["protocol"].as_str()),
        (Some("TRANSPORT"), Some("ESP"))
    );
    assert_eq!(
        (ca["encap"].clone(), ca["proposal"].clone()),
        (false.into(), "aes128gcm16".into())
    );
    assert_eq!(ca["spi_in"], cb["spi_out"]);
    assert_eq!(ca["spi_out"], cb["spi_in"]);
    assert!(ca["packets_out"].as_u64().unwrap() >= 3, "{ca}");
    assert!(ca["packets_in"].as_u64().unwrap() >= 3, "{ca}");
    assert!(ca["bytes_out"].as_u64().unwrap() >= 3 * 64, "{ca}");
    assert_eq!(
        ca["local_ts"],
        serde_json::json!([format!("{}/32", ADDR[0])])
    );
    assert_eq!(
        ca["remote_ts"],
        serde_json::json!([format!("{}/32", ADDR[1])])
    );
    assert_eq!(ca["sa_in"], "ike-1-in");

    // status, text: as swanctl --list-sas.
    let (rc, text, _) = netveil(&da, &["status"]);
    assert_eq!(rc, 0);
    let id = sa_a["unique_id"].as_u64().unwrap();
    for want in [
        format!(
            "host: #{id}, ESTABLISHED, IKEv2, {}_i* {}_r\n",
            sa_a["initiator_spi"].as_str().unwrap(),
            sa_a["responder_spi"].as_str().unwrap()
        ),
        format!("  local  'a.lab.test' @ {}[", ADDR[0]),
        format!("  remote 'b.lab.test' @ {}[", ADDR[1]),
        "  aes256-sha256-prfsha256-x25519\n".into(),
        "  hosts: #1, INSTALLED, TRANSPORT, ESP:aes128gcm16\n".into(),
        format!("    in  {}, ", ca["spi_in"].as_str().unwrap()),
        format!("    remote {}/32\n", ADDR[1]),
    ] {
        assert!(text.contains(&want), "{want:?} in\n{text}");
    }

    // keys --wireshark before the IKE rekey (the first SA's keys), 0600.
    let conf = lab.dir().join("wireshark");
    let (rc, _, err) = netveil(&da, &["keys", "--wireshark", conf.to_str().unwrap()]);
    assert_eq!(rc, 0, "{err}");
    let table = conf.join("ikev2_decryption_table");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&table).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let first = std::fs::read_to_string(&table).unwrap();
    assert!(
        first.starts_with(&format!(
            "{},{},",
            sa_a["initiator_spi"].as_str().unwrap(),
            sa_a["responder_spi"].as_str().unwrap()
        )) && first.contains("\"AES-CBC-256 [RFC3602]\"")
            && first.contains("\"HMAC_SHA2_256_128 [RFC4868]\""),
        "{first}"
    );
    assert!(
        !logs().contains(first.split(',').nth(2).unwrap()),
        "a key in a log"
    );

    // The IKE rekey (the initiator's rekey_time): a new IKE SA with new SPIs, the child moved to it.
    let old = sa_a["initiator_spi"].clone();
    wait_for("the IKE rekey", &logs, || {
        ike(&da)["ike_sas"].as_array().unwrap().iter().any(|s| {
            s["name"] == "host"
                && s["state"] == "ESTABLISHED"
                && s["initiator_spi"] != old
                && s["child_sas"].as_array().is_some_and(|c| c.len() == 1)
        })
    });
    let (rc, _, err) = netveil(&da, &["keys", "--wireshark", conf.to_str().unwrap()]);
    assert_eq!(rc, 0, "{err}");
    let both = std::fs::read_to_string(&table).unwrap();
    assert_eq!(
        both.lines().count(),
        2,
        "the old SA's line kept, the new one added: {both}"
    );
    assert!(both.starts_with(&first), "{both}");

    // terminate --child: the CHILD_SA goes on both sides, the IKE SA stays.
    let (rc, out, err) = netveil(&da, &["terminate", "--child", "hosts"]);
    assert_eq!(
        (rc, out.trim()),
        (0, "CHILD_SA terminated"),
        "{err}{}",
        logs()
    );
    let host_children = |d: &Daemon| {
        ike(d)["ike_sas"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["name"] == "host" && s["state"] == "ESTABLISHED")
            .map(|s| s["child_sas"].as_array().map_or(0, |c| c.len()))
            .collect::<Vec<_>>()
    };
    assert_eq!(host_children(&da), [0]);
    wait_for("the peer's CHILD_SA gone", &logs, || {
        host_children(&db) == [0]
    });
    // terminate CONNECTION: the IKE SA goes on both sides.
    let (rc, out, err) = netveil(&da, &["terminate", "host"]);
    assert_eq!(
        (rc, out.trim()),
        (0, "IKE SA terminated"),
        "{err}{}",
        logs()
    );
    wait_for("the peer's IKE SA gone", &logs, || {
        !ike(&db)["ike_sas"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["state"] == "ESTABLISHED")
    });
    std::thread::sleep(Duration::from_millis(300));
    let pcap = cap.stop().unwrap();

    // tshark with the exported table: every encrypted message decrypted, its integrity correct.
    let frames = tshark_frames(&pcap, &conf);
    // The messages of the two SAs exported (not those of badpsk's, whose keys went with it).
    let spis: Vec<String> = both
        .lines()
        .map(|l| format!("Initiator SPI: {}", &l[..16]))
        .collect();
    let sealed: Vec<&String> = frames
        .iter()
        .filter(|f| f.contains("Payload: Encrypted and Authenticated (46)"))
        .filter(|f| spis.iter().any(|s| f.contains(s.as_str())))
        .collect();
    let exchanges = |x: &str| {
        sealed
            .iter()
            .filter(|f| f.contains(&format!("Exchange type: {x}")))
            .count()
    };
    // IKE_AUTH both ways, the rekey's CREATE_CHILD_SA both ways, the DELETEs (old SA, child, new SA) both ways.
    assert!(exchanges("IKE_AUTH (35)") >= 2, "{frames:#?}");
    assert!(exchanges("CREATE_CHILD_SA (36)") >= 2, "{frames:#?}");
    assert!(exchanges("INFORMATIONAL (37)") >= 6, "{frames:#?}");
    for f in &sealed {
        assert!(
            f.contains("Integrity Checksum Data: ")
                && f.contains("<HMAC_SHA2_256_128 [RFC4868]>[correct]"),
            "not decrypted, or its integrity not correct:\n{f}"
        );
        assert!(f.contains("Decrypted Data"), "{f}");
    }
    let auth: Vec<&&String> = sealed
        .iter()
        .filter(|f| f.contains("Exchange type: IKE_AUTH"))
        .collect();
    assert!(auth.iter().any(
        |f| f.contains("Identification Data:a.lab.test") && f.contains("Authentication Data:")
    ));
    assert!(auth
        .iter()
        .any(|f| f.contains("Identification Data:b.lab.test")));
    assert!(auth
        .iter()
        .any(|f| f.contains("Traffic Selector - Initiator")));
    // The rekey's CREATE_CHILD_SA carries the new SA's proposal, nonce and KE in the clear to tshark.
    assert!(sealed
        .iter()
        .any(|f| f.contains("Exchange type: CREATE_CHILD_SA")
            && f.contains("Payload: Key Exchange (34)")));
    // The control: without the table nothing decrypts.
    let empty = lab.dir().join("wireshark-empty");
    std::fs::create_dir_all(&empty).unwrap();
    let frames = tshark_frames(&pcap, &empty);
    assert!(frames
        .iter()
        .all(|f| !f.contains("[correct]") && !f.contains("Identification Data:a.lab")));
    drop((da, db));
}
