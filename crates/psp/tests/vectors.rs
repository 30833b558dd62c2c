//! Every reference encryption configuration applied to the matching cleartext captures: the encapsulation follows
//! the reference tools' conventions, decryption gives the cleartext back byte for byte, and any change to the PSP
//! part makes decryption fail.

use netveil_psp::header::{Header, ICV_LEN};
use netveil_psp::refcfg::{parse_encrypt, parse_master_keys};
use netveil_psp::xform::{Decrypter, Mode, TxSa};
use netveil_psp::Error;
use netveil_wire::PacketBuf;

mod common;

fn cleartext_ip(name: &str) -> (Vec<u8>, Vec<u8>) {
    let frames = common::pcap_frames(&common::read(&format!("pcap/{name}.pcap")));
    assert_eq!(frames.len(), 1);
    let f = frames[0].clone();
    // The pcap and its tcpdump dump agree.
    assert_eq!(
        common::dump_bytes(&common::read_text(&format!("pcap/{name}_pcap.txt"))),
        f
    );
    (f[..14].to_vec(), f[14..].to_vec())
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[test]
fn every_config_round_trips_and_detects_tampering() {
    let decrypt_keys = parse_master_keys(&common::read_text("cfg/decrypt.cfg")).unwrap();
    let mut dec = Decrypter::new(decrypt_keys);
    let mut checked = 0;
    for cfg_name in common::encrypt_cfgs() {
        let (mk, cfg) = parse_encrypt(&common::read_text(&format!("cfg/{cfg_name}"))).unwrap();
        assert_eq!(
            cfg.mode == Mode::Tunnel,
            cfg_name.contains("tunnel"),
            "{cfg_name}"
        );
        assert_eq!(cfg.vc, cfg_name.contains("_vc"), "{cfg_name}");
        let tx = TxSa::new(&mk, cfg).unwrap();
        for (n, pcap) in common::pcaps_for(&cfg_name).into_iter().enumerate() {
            let ctx = format!("{cfg_name} on {pcap}");
            let (_eth, ip) = cleartext_ip(pcap);
            let v6 = ip[0] >> 4 == 6;
            let ihl = if v6 { 40 } else { 20 };
            let mut pkt = PacketBuf::from_slice(&ip, 128, 64);
            tx.encapsulate(&mut pkt)
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let enc = pkt.data().to_vec();
            let psp_hlen = if cfg.vc { 24 } else { 16 };
            let (outer, inner_hlen) = match cfg.mode {
                Mode::Transport => (ihl, ihl),
                Mode::Tunnel => (ihl, 0),
            };
            let added_front = match cfg.mode {
                Mode::Transport => 8 + psp_hlen,
                Mode::Tunnel => ihl + 8 + psp_hlen,
            };
            assert_eq!(enc.len(), ip.len() + added_front + ICV_LEN, "{ctx}");
            // Outer IP header: the original (or a copy of the inner one) with protocol UDP and lengths fixed.
            if v6 {
                assert_eq!(&enc[..4], &ip[..4], "{ctx}");
                assert_eq!(be16(&enc, 4) as usize, enc.len() - 40, "{ctx}");
                assert_eq!(enc[6], 17, "{ctx}");
                assert_eq!(&enc[7..40], &ip[7..40], "{ctx}");
            } else {
                assert_eq!(enc[0], 0x45);
                assert_eq!(be16(&enc, 2) as usize, enc.len(), "{ctx}");
                assert_eq!(&enc[4..9], &ip[4..9], "{ctx}");
                assert_eq!(enc[9], 17, "{ctx}");
                assert_eq!(&enc[12..20], &ip[12..20], "{ctx}");
                assert_eq!(netveil_wire::checksum::checksum(&enc[..20]), 0, "{ctx}");
            }
            // UDP: source port = inner ports XORed, destination 1000, checksum 0.
            let udp = &enc[outer..];
            assert_eq!(be16(udp, 0), 11111 ^ 22222, "{ctx}");
            assert_eq!(be16(udp, 2), 1000, "{ctx}");
            assert_eq!(be16(udp, 4) as usize, udp.len(), "{ctx}");
            assert_eq!(be16(udp, 6), 0, "{ctx}");
            // PSP header.
            let h = Header::new_checked(&udp[8..]).unwrap();
            let want_off = match (cfg.mode, v6) {
                (Mode::Transport, _) => cfg.crypt_offset_transport,
                (Mode::Tunnel, false) => cfg.crypt_offset_tunnel_v4,
                (Mode::Tunnel, true) => cfg.crypt_offset_tunnel_v6,
            };
            assert_eq!(h.crypt_offset(), want_off, "{ctx}");
            assert_eq!(
                h.next_header(),
                match (cfg.mode, v6) {
                    (Mode::Transport, _) => 17,
                    (Mode::Tunnel, false) => 4,
                    (Mode::Tunnel, true) => 41,
                }
            );
            assert_eq!(h.iv(), n as u64 + 1, "{ctx}: IV counter starts at 1");
            assert_eq!(h.spi(), cfg.spi);
            assert_eq!(h.version_number(), cfg.version.number());
            assert_eq!(h.hdr_ext_len(), if cfg.vc { 2 } else { 1 });
            assert_eq!(h.vc_present(), cfg.vc);
            if 4 * want_off >= 8 {
                assert_eq!(h.vc(), cfg.vc.then_some(0), "{ctx}: VC in clear");
            }
            assert_eq!(
                udp[8 + 3] & 0xc1,
                0x01,
                "{ctx}: S, D clear, always-one bit set"
            );
            // The clear part (up to the crypt offset) is the plaintext; the rest is not.
            let after_iv = &udp[8 + 16..udp.len() - ICV_LEN];
            let mut inner_plain = vec![0u8; if cfg.vc { 8 } else { 0 }];
            inner_plain.extend_from_slice(&ip[inner_hlen..]);
            assert_eq!(after_iv.len(), inner_plain.len());
            let clear = 4 * want_off as usize;
            assert_eq!(&after_iv[..clear], &inner_plain[..clear], "{ctx}");
            if after_iv.len() - clear >= 16 {
                assert_ne!(
                    &after_iv[clear..],
                    &inner_plain[clear..],
                    "{ctx}: encrypted"
                );
            }

            // Decryption gives the cleartext back.
            let mut back = PacketBuf::from_slice(&enc, 0, 0);
            let d = dec
                .decapsulate(&mut back)
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(d.mode, cfg.mode);
            assert_eq!(back.data(), &ip[..], "{ctx}");

            // Any change to the PSP part (header, VC, clear part, ciphertext, ICV) is detected.
            for i in outer + 8..enc.len() {
                for flip in [0x01u8, 0x80] {
                    let mut bad = enc.clone();
                    bad[i] ^= flip;
                    let mut b = PacketBuf::from_slice(&bad, 0, 0);
                    let r = dec.decapsulate(&mut b);
                    assert!(r.is_err(), "{ctx}: byte {i} ^ {flip:#x} accepted");
                }
            }
            // The outer UDP header is not authenticated, but the destination port selects PSP.
            let mut other = enc.clone();
            other[outer + 3] ^= 1;
            assert_eq!(
                dec.decapsulate(&mut PacketBuf::from_slice(&other, 0, 0)),
                Err(Error::NotPsp)
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 28);
}

#[test]
fn empty_encrypted_part_still_verifies_the_icv() {
    let mk = parse_master_keys(&common::read_text("cfg/decrypt.cfg")).unwrap();
    let mut dec = Decrypter::new(mk.clone());
    for cfg_name in [
        "encrypt_transport_crypt_off_128_empty.cfg",
        "encrypt_tunnel_crypt_off_256_empty.cfg",
    ] {
        let (mk, cfg) = parse_encrypt(&common::read_text(&format!("cfg/{cfg_name}"))).unwrap();
        let tx = TxSa::new(&mk, cfg).unwrap();
        for pcap in common::pcaps_for(cfg_name) {
            let (_, ip) = cleartext_ip(pcap);
            let mut pkt = PacketBuf::from_slice(&ip, 128, 64);
            tx.encapsulate(&mut pkt).unwrap();
            let enc = pkt.data().to_vec();
            let h_at = enc.len()
                - ICV_LEN
                - 16
                - match cfg.mode {
                    Mode::Transport => ip.len() - if ip[0] >> 4 == 6 { 40 } else { 20 },
                    Mode::Tunnel => ip.len(),
                };
            let off = Header::new_checked(&enc[h_at..]).unwrap().crypt_offset() as usize;
            // Nothing is encrypted: the clear part reaches the ICV.
            assert_eq!(
                h_at + 16 + 4 * off,
                enc.len() - ICV_LEN,
                "{cfg_name} {pcap}"
            );
            for i in enc.len() - ICV_LEN..enc.len() {
                let mut bad = enc.clone();
                bad[i] ^= 0x40;
                assert_eq!(
                    dec.decapsulate(&mut PacketBuf::from_slice(&bad, 0, 0)),
                    Err(Error::Auth),
                    "{cfg_name} {pcap}: corrupted ICV byte {i} accepted"
                );
            }
            let mut good = PacketBuf::from_slice(&enc, 0, 0);
            dec.decapsulate(&mut good).unwrap();
            assert_eq!(good.data(), &ip[..]);
        }
    }
}

#[test]
fn crypt_offset_past_the_payload_is_refused() {
    let (mk, mut cfg) = parse_encrypt(&common::read_text(
        "cfg/encrypt_transport_crypt_off_128_empty.cfg",
    ))
    .unwrap();
    cfg.crypt_offset_transport = 3; // 12 bytes, the UDP datagram has 8
    let tx = TxSa::new(&mk, cfg).unwrap();
    let (_, ip) = cleartext_ip("v4_cleartext_empty");
    let mut pkt = PacketBuf::from_slice(&ip, 128, 64);
    assert_eq!(tx.encapsulate(&mut pkt), Err(Error::CryptOffset));
    assert_eq!(pkt.data(), &ip[..], "unchanged on error");
    assert_eq!(tx.next_iv(), 1, "no IV used");
    cfg.crypt_offset_transport = 64;
    assert!(TxSa::new(&mk, cfg).is_err());
}

#[test]
fn gmac_versions_authenticate_everything_and_encrypt_nothing() {
    let mk = parse_master_keys(&common::read_text("cfg/decrypt.cfg")).unwrap();
    let mut dec = Decrypter::new(mk.clone());
    for alg in ["aes-gmac-128", "aes-gmac-256"] {
        for mode in ["transport", "tunnel"] {
            let text = common::read_text("cfg/encrypt_tunnel_crypt_off_128.cfg")
                .replace("aes-gcm-128", alg)
                .replace("tunnel", mode);
            let (mk, cfg) = parse_encrypt(&text).unwrap();
            let tx = TxSa::new(&mk, cfg).unwrap();
            for pcap in ["v4_cleartext", "v6_cleartext"] {
                let (_, ip) = cleartext_ip(pcap);
                let mut pkt = PacketBuf::from_slice(&ip, 128, 64);
                tx.encapsulate(&mut pkt).unwrap();
                let enc = pkt.data().to_vec();
                // The inner payload is in clear.
                let tail = &ip[ip.len() - 100..];
                assert_eq!(&enc[enc.len() - ICV_LEN - 100..enc.len() - ICV_LEN], tail);
                let mut b = PacketBuf::from_slice(&enc, 0, 0);
                dec.decapsulate(&mut b).unwrap();
                assert_eq!(b.data(), &ip[..]);
                let mut bad = enc.clone();
                let at = enc.len() - ICV_LEN - 1;
                bad[at] ^= 1;
                assert_eq!(
                    dec.decapsulate(&mut PacketBuf::from_slice(&bad, 0, 0)),
                    Err(Error::Auth)
                );
            }
        }
    }
}
