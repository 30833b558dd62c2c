#![no_main]

use libfuzzer_sys::fuzz_target;
use netveil_wire::{arp, ethernet};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = ethernet::Packet::new_checked(data) {
        let _ = (p.dst_addr(), p.src_addr(), p.ethertype(), p.payload());
        let _ = (p.src_addr().is_multicast(), p.dst_addr().is_broadcast());
        if let Ok(r) = ethernet::Repr::parse(&p) {
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut ethernet::Packet::new_unchecked(&mut buf[..]));
            assert_eq!(&buf[..], &data[..ethernet::HEADER_LEN]);
        }
        check_arp(p.payload());
    }
    check_arp(data);
});

fn check_arp(data: &[u8]) {
    let Ok(p) = arp::Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.hardware_type(),
        p.protocol_type(),
        p.hardware_len(),
        p.protocol_len(),
        p.operation(),
    );
    let _ = (
        p.sender_hw_addr(),
        p.sender_proto_addr(),
        p.target_hw_addr(),
        p.target_proto_addr(),
        p.payload(),
    );
    if let Ok(r) = arp::Repr::parse(&p) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut arp::Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..], &data[..arp::PACKET_LEN]);
    }
}
