//! PSP header parsing: fields, emit/parse round trip, and truncated or malformed input (no panics).

use netveil_psp::header::{Header, Repr, Version};
use netveil_psp::refcfg::{parse_encrypt, parse_master_keys};
use netveil_psp::xform::{peek, Decrypter, TxSa};
use netveil_wire::PacketBuf;

mod common;

#[test]
fn fields_and_round_trip() {
    for vc in [None, Some(0x0102_0304_0506_0708u64)] {
        let r = Repr {
            next_header: 17,
            crypt_offset: 0x2a,
            sample: true,
            drop: false,
            version: Version::AesGcm256,
            spi: 0x9a34_5678,
            iv: 0x1122_3344_5566_7788,
            vc,
        };
        let mut b = vec![0xffu8; r.buffer_len()];
        r.emit(&mut Header::new_unchecked(&mut b[..]));
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(b[0], 17);
        assert_eq!(b[1], if vc.is_some() { 2 } else { 1 });
        assert_eq!(b[2], 0x2a);
        assert_eq!(b[3], 0x80 | (1 << 2) | if vc.is_some() { 2 } else { 0 } | 1);
        assert_eq!(&b[4..8], &[0x9a, 0x34, 0x56, 0x78]);
        assert_eq!(h.header_len(), r.buffer_len());
        assert_eq!(h.nonce()[..4], [0x9a, 0x34, 0x56, 0x78]);
        assert_eq!(Repr::parse(&h).unwrap(), r);
    }
}

#[test]
fn truncated_and_malformed_headers_are_refused() {
    let r = Repr {
        next_header: 6,
        crypt_offset: 1,
        sample: false,
        drop: true,
        version: Version::AesGcm128,
        spi: 1,
        iv: 2,
        vc: Some(0),
    };
    let mut b = vec![0u8; 24];
    r.emit(&mut Header::new_unchecked(&mut b[..]));
    for n in 0..24 {
        assert!(Header::new_checked(&b[..n]).is_err(), "{n} bytes");
    }
    assert!(Header::new_checked(&b[..]).is_ok());
    // V set but extension length 1; always-one bit clear; version 7; extension beyond the VC.
    let mut x = b.clone();
    x[1] = 1;
    assert!(Header::new_checked(&x[..]).is_err());
    let mut x = b.clone();
    x[3] &= !1;
    assert!(Header::new_checked(&x[..]).is_err());
    let mut x = b.clone();
    x[3] = (x[3] & !0x3c) | (7 << 2);
    assert!(Repr::parse(&Header::new_checked(&x[..]).unwrap()).is_err());
    let mut x = b.clone();
    x[1] = 3;
    x.extend_from_slice(&[0; 8]);
    assert!(Repr::parse(&Header::new_checked(&x[..]).unwrap()).is_err());
    // Every byte value in every position: no panic.
    for i in 0..24 {
        for v in 0..=255u8 {
            let mut x = b.clone();
            x[i] = v;
            if let Ok(h) = Header::new_checked(&x[..]) {
                let _ = Repr::parse(&h);
                let _ = (h.vc(), h.iv(), h.spi(), h.nonce());
            }
        }
    }
}

#[test]
fn truncated_packets_do_not_panic() {
    let mk = parse_master_keys(&common::read_text("cfg/decrypt.cfg")).unwrap();
    let mut dec = Decrypter::new(mk);
    for cfg in [
        "encrypt_transport_crypt_off_128_vc.cfg",
        "encrypt_tunnel_crypt_off_256.cfg",
    ] {
        let (mk, c) = parse_encrypt(&common::read_text(&format!("cfg/{cfg}"))).unwrap();
        let tx = TxSa::new(&mk, c).unwrap();
        for pcap in ["v4_cleartext", "v6_cleartext_empty"] {
            let f = common::pcap_frames(&common::read(&format!("pcap/{pcap}.pcap")));
            let mut pkt = PacketBuf::from_slice(&f[0][14..], 128, 64);
            if tx.encapsulate(&mut pkt).is_err() {
                continue;
            }
            let enc = pkt.data().to_vec();
            assert!(peek(&enc).is_ok());
            for n in 0..enc.len() {
                let mut cut = enc[..n].to_vec();
                assert!(peek(&cut).is_err(), "{cfg} {pcap}: {n} bytes");
                assert!(dec
                    .decapsulate(&mut PacketBuf::from_slice(&cut, 0, 0))
                    .is_err());
                // With the length fields made consistent with the cut.
                if n >= 48 {
                    let (ip, udp) = if cut[0] >> 4 == 4 { (20, 20) } else { (40, 40) };
                    let l = n as u16;
                    if ip == 20 {
                        cut[2..4].copy_from_slice(&l.to_be_bytes());
                    } else {
                        cut[4..6].copy_from_slice(&(l - 40).to_be_bytes());
                    }
                    cut[udp + 4..udp + 6].copy_from_slice(&(l - udp as u16).to_be_bytes());
                    assert!(dec
                        .decapsulate(&mut PacketBuf::from_slice(&cut, 0, 0))
                        .is_err());
                }
            }
        }
    }
}
