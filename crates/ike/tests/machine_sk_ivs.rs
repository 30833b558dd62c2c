//! The AEAD explicit IVs of an IKE SA's SK payloads (RFC 5282 section 3: never twice under one key): each end
//! counts them per key across every message it seals, requests and responses alike, although the machine
//! builds the cipher per message from the raw keys.

mod machine_common;

use machine_common::*;
use netveil_ike::event::Event;
use netveil_ike::message::ExchangeType;

/// The explicit IVs of the SK payloads in the encrypted messages `sent` holds, in order (a datagram sent again
/// unchanged counts once).
fn ivs(sent: &[netveil_ike::event::Transmit]) -> Vec<u64> {
    let mut seen: Vec<&[u8]> = Vec::new();
    let mut out = Vec::new();
    for t in sent {
        let b = &t.bytes[..];
        if b[18] == ExchangeType::IKE_SA_INIT.0 || seen.contains(&b) {
            continue;
        }
        seen.push(b);
        assert_eq!(b[16], 46, "an SK payload first");
        out.push(u64::from_be_bytes(b[32..40].try_into().unwrap()));
    }
    out
}

#[test]
fn aead_ivs_count_on_across_every_message_of_an_ike_sa() {
    let (a, b) = pair(&["aes128gcm16-prfsha256-x25519"], &["aes128gcm16"]);
    let mut sim = Sim::new(a, b, 5);
    sim.initiate();
    sim.settle();
    let id = sim.events[0]
        .iter()
        .find_map(|e| match e {
            Event::IkeSaUp { ike_sa, .. } => Some(*ike_sa),
            _ => None,
        })
        .unwrap();
    for _ in 0..3 {
        let now = sim.now;
        sim.ep[0].create_child(id, "net", now).unwrap();
        sim.settle();
    }
    assert_eq!(sim.children_up(0).len(), 4);
    let now = sim.now;
    sim.ep[0].terminate(id, now).unwrap();
    sim.settle();
    // IKE_AUTH, three CREATE_CHILD_SA and the DELETE: requests from the initiator, responses from the responder.
    assert_eq!(ivs(&sim.sent[0]), [0, 1, 2, 3, 4]);
    assert_eq!(ivs(&sim.sent[1]), [0, 1, 2, 3, 4]);
}
