//! The responder against strongSwan's real IKE_SA_INIT request (frame 1 of the recorded session,
//! testdata/ikev2/strongswan-session.pcap: charon 5.9.8 initiating from 10.99.0.1 with `proposals =
//! aes256-sha256-x25519`). The answer must be well formed and choose what strongSwan's own responder chose in
//! frame 2 of the same session. The exchange cannot be completed here: IKE_AUTH needs the initiator's X25519
//! private key for this request's KE, which is not in the capture (the log's DH secret is the shared one of the
//! recorded responder's key, not ours).

mod machine_common;

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Instant;

use machine_common::*;
use netveil_crypto::rand::SeededRng;
use netveil_ike::machine::Endpoint;
use netveil_ike::message::{ExchangeType, Message, NotifyType, Payload};

/// (source, destination, IKE message) of the first two frames.
fn frames() -> Vec<(SocketAddr, SocketAddr, Vec<u8>)> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/ikev2/strongswan-session.pcap");
    let pcap = netveil_pcap::read_file(&path).expect("read the session's pcap");
    let mut out = Vec::new();
    for r in pcap.records.iter().take(2) {
        let frame = netveil_pcap::split_frame(pcap.link, &r.data).expect("an IP frame");
        let ip = netveil_pcap::ip_own(frame.ip).expect("a whole IP packet");
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let a = |at: usize| IpAddr::from([ip[at], ip[at + 1], ip[at + 2], ip[at + 3]]);
        let udp = &ip[ihl..];
        let port = |at: usize| u16::from_be_bytes([udp[at], udp[at + 1]]);
        out.push((
            SocketAddr::new(a(12), port(0)),
            SocketAddr::new(a(16), port(2)),
            udp[8..].to_vec(),
        ));
    }
    out
}

#[test]
fn answers_strongswans_ike_sa_init_as_strongswan_did() {
    let f = frames();
    let (src, dst, req) = &f[0];
    assert_eq!(
        (src.to_string(), dst.to_string()),
        ("10.99.0.1:500".into(), "10.99.0.2:500".into())
    );
    let theirs = Message::parse(&f[1].2).unwrap();
    // Our responder prefers an AEAD suite strongSwan did not offer, then takes aes256-sha256-x25519.
    let mut c = conn(
        "ss",
        "10.99.0.2",
        "10.99.0.1",
        &["aes128gcm16-prfsha256-modp2048", "aes256-sha256-x25519"],
        b"not the session's psk",
        vec![child(
            "c",
            &["10.22.0.1/32"],
            &["10.11.0.1/32"],
            &["aes128gcm16"],
        )],
    );
    c.fragmentation = true;
    let now = Instant::now();
    let mut b = Endpoint::new(vec![c], Box::new(SeededRng::new(9)), now);
    b.handle_datagram(now, *dst, *src, req);
    let t = b.poll_transmit().expect("an answer");
    assert!(b.poll_transmit().is_none());
    assert_eq!((t.local, t.remote), (*dst, *src));
    let ours = Message::parse(&t.bytes).expect("well formed");
    let req_m = Message::parse(req).unwrap();
    assert_eq!(ours.header.exchange_type, ExchangeType::IKE_SA_INIT);
    assert_eq!(ours.header.initiator_spi, req_m.header.initiator_spi);
    assert_ne!(ours.header.responder_spi, 0);
    assert!(ours.header.flags.response && !ours.header.flags.initiator);
    assert_eq!(ours.header.message_id, 0);
    // The same SA payload as strongSwan's responder sent: proposal number, transforms, key length.
    let sa = |m: &Message| {
        m.payloads
            .iter()
            .find_map(|p| match p {
                Payload::Sa(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap()
    };
    assert_eq!(sa(&ours), sa(&theirs));
    let st = b.status(now);
    assert_eq!(st[0].proposal, "aes256-sha256-prfsha256-x25519");
    assert_eq!(b.half_open(), 1);
    // The same payload types in the same order as strongSwan's answer, minus its CHILDLESS and MULTIPLE_AUTH.
    let kinds = |m: &Message| -> Vec<(u8, u16)> {
        m.payloads
            .iter()
            .map(|p| match p {
                Payload::Notify(n) => (p.payload_type(), n.notify_type.0),
                _ => (p.payload_type(), 0),
            })
            .filter(|k| ![16418, 16404].contains(&k.1))
            .collect()
    };
    assert_eq!(kinds(&ours), kinds(&theirs));
    // KE of X25519 and a 32-byte nonce.
    for p in &ours.payloads {
        match p {
            Payload::Ke(k) => assert_eq!((k.group, k.data.len()), (31, 32)),
            Payload::Nonce(n) => assert_eq!(n.as_bytes().len(), 32),
            _ => {}
        }
    }
    // strongSwan's NAT_DETECTION_DESTINATION_IP matches our address and port (our hash is computed as its is);
    // its source hash is faked (`encap = yes` in its swanctl.conf), so the peer looks translated.
    assert!(!st[0].nat_local);
    assert!(st[0].nat_remote && st[0].nat);
    // Our NAT_DETECTION_DESTINATION_IP is SHA-1(SPIi | SPIr | 10.99.0.1 | 500), checked with sha1sum over
    // the same 22 bytes built here.
    let d = ours
        .notifies()
        .find(|n| n.notify_type == NotifyType::NAT_DETECTION_DESTINATION_IP)
        .unwrap();
    let mut input = Vec::new();
    input.extend(ours.header.initiator_spi.to_be_bytes());
    input.extend(ours.header.responder_spi.to_be_bytes());
    input.extend([10, 99, 0, 1, 0x01, 0xf4]);
    assert_eq!(d.data, sha1_via_sha1sum(&input));
    // The request again (a retransmission): the same answer, no second SA.
    b.handle_datagram(now, *dst, *src, req);
    assert_eq!(b.poll_transmit().unwrap().bytes, t.bytes);
    assert_eq!(b.ike_sa_count(), 1);
}

/// SHA-1 by the system's `sha1sum` (an implementation nobody here wrote); falls back to the crate's digest only
/// if the tool is missing.
fn sha1_via_sha1sum(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let Ok(mut child) = Command::new("sha1sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    else {
        return netveil_crypto::mac::sha1_digest(&[data]).to_vec();
    };
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    hex::decode(&text[..40]).unwrap()
}
