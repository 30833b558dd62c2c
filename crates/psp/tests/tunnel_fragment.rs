//! Tunnel mode on IPv4 fragments: the outer header is a copy of the inner one, but the outer datagram is whole,
//! so it must not carry the inner packet's MF flag or fragment offset (a receiver would hold it for reassembly);
//! DF is kept. Decapsulation gives the fragment back unchanged.

use netveil_psp::header::Version;
use netveil_psp::xform::{Mode, RxSa, TxConfig, TxSa};
use netveil_wire::checksum::checksum;
use netveil_wire::PacketBuf;

/// An IPv4 packet 10.0.0.1 -> 10.0.0.2, protocol UDP, with the given flags/fragment-offset field.
fn ipv4(frag_field: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x45, 0x20];
    p.extend_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&0x1234u16.to_be_bytes());
    p.extend_from_slice(&frag_field.to_be_bytes());
    p.extend_from_slice(&[63, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    let c = checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

#[test]
fn outer_header_of_a_fragment_is_not_a_fragment() {
    let key = [7u8; 16];
    let cfg = TxConfig {
        spi: 0x1234_5678,
        version: Version::AesGcm128,
        mode: Mode::Tunnel,
        crypt_offset_transport: 0,
        crypt_offset_tunnel_v4: 0,
        crypt_offset_tunnel_v6: 0,
        vc: false,
    };
    let tx = TxSa::with_key(&key, cfg).unwrap();
    let rx = RxSa::with_key(&key, cfg.spi, cfg.version).unwrap();
    let udp_head: Vec<u8> = [1u8, 2, 3, 4, 0, 32, 0, 0]
        .iter()
        .copied()
        .chain([0x55; 24])
        .collect();
    // (inner flags/offset, outer flags/offset): first fragment (MF), middle with DF+MF, last (offset only), whole.
    for (inner, outer) in [
        (0x2000u16, 0x0000u16),
        (0x6004, 0x4000),
        (0x0008, 0x0000),
        (0x4000, 0x4000),
    ] {
        let clear = ipv4(inner, &udp_head);
        let mut pkt = PacketBuf::from_slice(&clear, 128, 64);
        tx.encapsulate(&mut pkt).unwrap();
        let d = pkt.data();
        assert_eq!(
            u16::from_be_bytes([d[6], d[7]]),
            outer,
            "inner {inner:#06x}"
        );
        assert_eq!(d[0], 0x45);
        assert_eq!(d[9], 17);
        assert_eq!(checksum(&d[..20]), 0, "outer IPv4 checksum");
        assert_eq!(&d[12..20], &clear[12..20]);
        rx.decapsulate(&mut pkt).unwrap();
        assert_eq!(pkt.data(), &clear[..], "inner {inner:#06x}");
    }
}
