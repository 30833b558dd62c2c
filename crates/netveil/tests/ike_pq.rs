//! A hybrid post-quantum IKE SA between two `netveil up` daemons in network namespaces: both list strongSwan 6's
//! `aes256gcm16-prfsha384-x25519-ke1_mlkem768` before the classic `aes256gcm16-prfsha384-x25519`, so they
//! agree on X25519 in IKE_SA_INIT and ML-KEM-768 in an IKE_INTERMEDIATE exchange (RFC 9370), whose 1184-byte key
//! goes in IKE fragments (RFC 7383, on by default); a ping crosses the CHILD_SA, the log names the hybrid
//! proposal, and tshark (an independent dissector) sees the IKE_INTERMEDIATE exchange (type 43) in SKF fragments.
//!
//! They need root (CI runs them as root) and the tools installed by .ci/setup.

mod common;

use common::ike_pair::{self, Child, Config, Conn, IkePair, Mode, Net, VETH as ADDR};
use netveil_lab::lab;
use std::time::{Duration, Instant};

const HYBRID: &str = "aes256gcm16-prfsha384-x25519-ke1_mlkem768";
const CLASSIC: &str = "aes256gcm16-prfsha384-x25519";

fn config(side: usize, start: bool) -> Config {
    let mut child =
        Child::new("hosts", Mode::Transport).start(if start { "start" } else { "none" });
    child.esp_proposals = vec!["aes256gcm16"];
    let ids = ["@a.pq.test", "@b.pq.test"];
    Config::new(vec![Conn {
        proposals: vec![HYBRID, CLASSIC],
        local_id: ids[side],
        remote_id: ids[1 - side],
        ..Conn::new("pq", side).child(child)
    }])
}

#[test]
fn two_netveils_negotiate_a_hybrid_ml_kem_ike_sa() {
    let pair = IkePair::new("nvpq", Net::Transport);
    let (lab, ns) = (&pair.lab, &pair.ns);
    let mut ike_cap = lab
        .capture(
            &ns[1],
            "veth-b",
            "pq-ike.pcap",
            4096,
            &["udp", "port", "500"],
        )
        .unwrap();
    let db = pair.start(1, &config(1, false));
    let da = pair.start(0, &config(0, true));
    let logs = ike_pair::logs([&da, &db]);
    let t0 = Instant::now();
    let up = |d: &lab::Daemon| {
        d.log()
            .contains("CHILD_SA hosts of connection pq installed")
    };
    while !(up(&da) && up(&db)) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no CHILD_SA on both sides{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for d in [&da, &db] {
        assert!(
            d.log()
                .contains(&format!("of connection pq established ({HYBRID})")),
            "the hybrid proposal is not the one in use{}",
            logs()
        );
    }
    let out = lab
        .exec_ok(
            &ns[0],
            &["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", ADDR[1]],
        )
        .unwrap_or_else(|e| panic!("ping: {e}{}", logs()));
    assert!(out.contains("3 received"), "{out}");
    let pcap = ike_cap.stop().unwrap();
    let inter = lab::tshark_frames(&pcap, None, Some("isakmp.exchangetype == 43")).unwrap();
    // A's request (1184-byte key) and B's response (1088-byte ciphertext) in fragments of at most 1200 bytes.
    assert!(
        inter.len() >= 3,
        "IKE_INTERMEDIATE in fragments, both ways: {inter:?}{}",
        logs()
    );
    let from_a = inter.iter().filter(|f| f.src == ADDR[0]).count();
    let from_b = inter.iter().filter(|f| f.src == ADDR[1]).count();
    assert!(from_a >= 2 && from_b >= 1, "{inter:?}");
    let auth = lab::tshark_frames(&pcap, None, Some("isakmp.exchangetype == 35")).unwrap();
    assert!(!auth.is_empty(), "IKE_AUTH after it");
}
