//! IKEv2 between two `netveil up` daemons in network namespaces (no strongSwan): transport mode over raw ESP
//! (IP protocol 50, `encap = false`), PSK with X25519, the CHILD_SA's traffic selectors the two hosts' own
//! addresses (swanctl's `dynamic`). Transport mode routes the peer's address into the TUN in a `fwmark` table; the
//! IKE sockets carry the same mark (`ike.socket_mark`), so IKE itself bypasses the TUN.
//!
//! They need root (CI runs them as root) and the tools installed by .ci/setup.

mod common;

use common::ike_pair::{
    self, ike_sa_spis as ike_sas, Child, Config, Conn, IkePair, Mode, Net, VETH as ADDR,
};
use netveil_lab::lab;
use std::time::{Duration, Instant};

fn config(side: usize, start: bool) -> Config {
    let child = Child::new("hosts", Mode::Transport).start(if start { "start" } else { "none" });
    Config::new(vec![Conn::new("host", side).child(child)])
}

#[test]
fn two_netveils_negotiate_transport_mode_over_raw_esp() {
    let pair = IkePair::new("nvik", Net::Transport);
    let (lab, ns) = (&pair.lab, &pair.ns);
    // The responder first, then the initiator.
    let db = pair.start(1, &config(1, false));
    let da = pair.start(0, &config(0, true));
    let logs = ike_pair::logs([&da, &db]);
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
