//! A hybrid post-quantum IKE SA between two `netveil up` daemons in network namespaces: both list strongSwan 6's
//! `aes256gcm16-prfsha384-x25519-ke1_mlkem768` before the classic `aes256gcm16-prfsha384-x25519`, so they
//! agree on X25519 in IKE_SA_INIT and ML-KEM-768 in an IKE_INTERMEDIATE exchange (RFC 9370), whose 1184-byte key
//! goes in IKE fragments (RFC 7383, on by default); a ping crosses the CHILD_SA, the log names the hybrid
//! proposal, and tshark (an independent dissector) sees the IKE_INTERMEDIATE exchange (type 43) in SKF fragments.
//!
//! They need root (CI runs them as root) and the tools installed by .ci/setup.

use netveil_lab::lab::{self, Lab, TRANSPORT_FWMARK};
use std::time::{Duration, Instant};

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");
const ADDR: [&str; 2] = ["192.0.2.1", "192.0.2.2"];
const IDS: [&str; 2] = ["@a.pq.test", "@b.pq.test"];
const HYBRID: &str = "aes256gcm16-prfsha384-x25519-ke1_mlkem768";
const CLASSIC: &str = "aes256gcm16-prfsha384-x25519";

fn config(lab: &Lab, side: usize, start: bool) -> String {
    let (me, peer) = (ADDR[side], ADDR[1 - side]);
    format!(
        "log_level = \"info\"\n[interface]\nname = \"nvpq{side}\"\nmtu = 1400\ncontrol_socket = \"{sock}\"\n\
         state_dir = \"{state}\"\nfwmark = {TRANSPORT_FWMARK}\nroutes = [\"{peer}/32\"]\n\n\
         [ike]\nsocket_mark = {TRANSPORT_FWMARK}\n\n\
         [[ike.connection]]\nname = \"pq\"\nlocal_addrs = [\"{me}\"]\nremote_addrs = [\"{peer}\"]\n\
         proposals = [\"{HYBRID}\", \"{CLASSIC}\"]\npsk = \"netveil-ike-psk-0123456789\"\nencap = false\n\
         local = {{ id = \"{lid}\", auth = \"psk\" }}\nremote = {{ id = \"{rid}\", auth = \"psk\" }}\n\n\
         [[ike.connection.children]]\nname = \"hosts\"\nmode = \"transport\"\nesp_proposals = [\"aes256gcm16\"]\n\
         start_action = \"{start}\"\n",
        sock = lab.socket_path(&format!("pq{side}")).display(),
        state = lab.dir().join(format!("state-{side}")).display(),
        lid = IDS[side],
        rid = IDS[1 - side],
        start = if start { "start" } else { "none" },
    )
}

#[test]
fn two_netveils_negotiate_a_hybrid_ml_kem_ike_sa() {
    if !lab::is_root() {
        panic!("the netns tests need root: run them as root (CI does)");
    }
    for t in ["ip", "ping", "tcpdump", "tshark", "nft"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    let mut lab = Lab::new("nvpq").unwrap().with_netveil(NETVEIL);
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
    let ns = [a, b];
    let mut ike_cap = lab
        .capture(
            &ns[1],
            "veth-b",
            "pq-ike.pcap",
            4096,
            &["udp", "port", "500"],
        )
        .unwrap();
    let db = lab
        .start_daemon_with(&ns[1], "pq1", &config(&lab, 1, false), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let da = lab
        .start_daemon_with(&ns[0], "pq0", &config(&lab, 0, true), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let (la, lb) = (da.log.clone(), db.log.clone());
    let logs = || {
        let r = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
        format!("\n--- a ---\n{}\n--- b ---\n{}", r(&la), r(&lb))
    };
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
