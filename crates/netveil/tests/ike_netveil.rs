//! IKEv2 between two `netveil up` daemons in network namespaces (no strongSwan): transport mode over raw ESP
//! (IP protocol 50, `encap = false`), PSK with X25519, the CHILD_SA's traffic selectors the two hosts' own
//! addresses (swanctl's `dynamic`). Transport mode routes the peer's address into the TUN in a `fwmark` table; the
//! IKE sockets carry the same mark (`ike.socket_mark`), so IKE itself bypasses the TUN.
//!
//! They need root (CI runs them as root) and the tools installed by .ci/setup.

use netveil_lab::lab::{self, Daemon, Lab, TRANSPORT_FWMARK};
use std::time::{Duration, Instant};

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");
const ADDR: [&str; 2] = ["192.0.2.1", "192.0.2.2"];
const IDS: [&str; 2] = ["@a.lab.test", "@b.lab.test"];

fn config(lab: &Lab, side: usize, start: bool) -> String {
    let (me, peer) = (ADDR[side], ADDR[1 - side]);
    format!(
        "log_level = \"info\"\n[interface]\nname = \"nvik{side}\"\nmtu = 1400\ncontrol_socket = \"{sock}\"\n\
         state_dir = \"{state}\"\nfwmark = {TRANSPORT_FWMARK}\nroutes = [\"{peer}/32\"]\n\n\
         [ike]\nsocket_mark = {TRANSPORT_FWMARK}\n\n\
         [[ike.connection]]\nname = \"host\"\nlocal_addrs = [\"{me}\"]\nremote_addrs = [\"{peer}\"]\n\
         proposals = [\"aes128gcm16-prfsha256-x25519\"]\npsk = \"netveil-ike-psk-0123456789\"\nencap = false\n\
         local = {{ id = \"{lid}\", auth = \"psk\" }}\nremote = {{ id = \"{rid}\", auth = \"psk\" }}\n\n\
         [[ike.connection.children]]\nname = \"hosts\"\nmode = \"transport\"\nesp_proposals = [\"aes128gcm16\"]\n\
         start_action = \"{start}\"\n",
        sock = lab.socket_path(&format!("nv{side}")).display(),
        state = lab.dir().join(format!("state-{side}")).display(),
        lid = IDS[side],
        rid = IDS[1 - side],
        start = if start { "start" } else { "none" },
    )
}

/// The SAs named `ike-*` in a daemon's status: (name, spi).
fn ike_sas(d: &Daemon) -> Vec<(String, u64)> {
    fn walk(v: &serde_json::Value, out: &mut Vec<(String, u64)>) {
        match v {
            serde_json::Value::Object(m) => {
                if let (Some(n), Some(spi)) = (
                    m.get("name").and_then(|n| n.as_str()),
                    m.get("spi").and_then(|s| {
                        s.as_u64().or_else(|| {
                            s.as_str().and_then(|h| {
                                u64::from_str_radix(h.trim_start_matches("0x"), 16).ok()
                            })
                        })
                    }),
                ) {
                    if n.starts_with("ike-") {
                        out.push((n.to_string(), spi));
                    }
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

#[test]
fn two_netveils_negotiate_transport_mode_over_raw_esp() {
    if !lab::is_root() {
        panic!("the netns tests need root: run them as root (CI does)");
    }
    for t in ["ip", "ping", "tcpdump", "tshark", "nft"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    let mut lab = Lab::new("nvik").unwrap().with_netveil(NETVEIL);
    let a = lab.add_ns("a").unwrap();
    let b = lab.add_ns("b").unwrap();
    for ns in [&a, &b] {
        // IPv4 only: no neighbour discovery on the veth to tell from the tunnel's traffic.
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
    // The responder first (no --fresh-keys: negotiated keys need no state record), then the initiator.
    let db = lab
        .start_daemon_with(&ns[1], "nv1", &config(&lab, 1, false), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let da = lab
        .start_daemon_with(&ns[0], "nv0", &config(&lab, 0, true), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let (la, lb) = (da.log.clone(), db.log.clone());
    let logs = || {
        let r = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
        format!("\n--- a ---\n{}\n--- b ---\n{}", r(&la), r(&lb))
    };
    let t0 = Instant::now();
    loop {
        let (sa, sb) = (ike_sas(&da), ike_sas(&db));
        if sa.len() == 2 && sb.len() == 2 {
            // Each side's inbound SPI is the other's outbound one.
            let spi =
                |v: &[(String, u64)], n: &str| v.iter().find(|x| x.0.ends_with(n)).map(|x| x.1);
            assert_eq!(spi(&sa, "-in"), spi(&sb, "-out"), "{sa:?} {sb:?}");
            assert_eq!(spi(&sa, "-out"), spi(&sb, "-in"), "{sa:?} {sb:?}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no CHILD_SA on both sides: {sa:?} {sb:?}{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        da.log()
            .contains("CHILD_SA hosts of connection host installed"),
        "{}",
        logs()
    );
    assert!(!da.log().contains("UDP-encapsulated"), "{}", logs());

    // A ping under capture: raw ESP between the two addresses, nothing in clear.
    let mut cap = lab
        .capture(&ns[1], "veth-b", "ike-esp.pcap", 256, &[])
        .unwrap();
    let out = lab
        .exec_ok(
            &ns[0],
            &["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", ADDR[1]],
        )
        .unwrap_or_else(|e| panic!("ping: {e}{}", logs()));
    assert!(out.contains("3 received"), "{out}");
    let pcap = cap.stop().unwrap();
    let frames = lab::tshark_frames(&pcap, None, None).unwrap();
    let esp = frames.iter().filter(|f| f.outer_proto == Some(50)).count();
    assert!(esp >= 6, "expected ESP both ways: {frames:?}");
    assert!(
        frames.iter().all(|f| !f.protocols.contains("icmp")),
        "ICMP in clear: {frames:?}"
    );
    // A byte-checked TCP transfer each way.
    for from in [0, 1] {
        let t = lab::tcp_transfer(
            &ns[from],
            &ns[1 - from],
            ADDR[1 - from].parse().unwrap(),
            5203,
            4 << 20,
        )
        .unwrap_or_else(|e| panic!("TCP from side {from}: {e}{}", logs()));
        assert_eq!(t.bytes, 4 << 20);
    }
    // The initiator stops: its DELETE (UDP 500 in clear, between the addresses the transport-mode policies
    // protect: the driver's inbound bypass lets it in) removes the responder's CHILD_SA.
    assert!(
        db.status_json().unwrap().to_string().contains("ike-c1-b0"),
        "no IKE bypass policy on the responder{}",
        logs()
    );
    let mut da = da;
    da.stop();
    let t1 = Instant::now();
    while !ike_sas(&db).is_empty() {
        assert!(
            t1.elapsed() < Duration::from_secs(10),
            "the responder kept its SAs after the DELETE{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(db.log().contains("deleted"), "{}", logs());
}
