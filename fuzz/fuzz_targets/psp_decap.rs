//! PSP on hostile input: the header view on arbitrary bytes, decapsulation of arbitrary packets, and valid PSP
//! packets (transport or tunnel, every crypt offset, with or without VC) with arbitrary corruptions. Nothing may
//! panic, and a corrupted packet must never decrypt.
//!
//! The same packets' UDP payloads also go through a device's receiver as datagrams of a coalesced receive
//! (`Receiver::decapsulate_udp_payload`, between other bytes in one buffer): an untouched tunnel-mode one opens to
//! the packet, an untouched transport-mode one is left as it came, a changed one never opens, and the bytes around
//! never change.

#![no_main]

use libfuzzer_sys::fuzz_target;
use netveil_psp::{Decrypter, Device, Header, MasterKeys, Mode, Receiver, TxConfig, TxSa, Version};
use netveil_wire::PacketBuf;

fn masters() -> MasterKeys {
    MasterKeys::new([0x11; 32], [0x22; 32])
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    if let Ok(h) = Header::new_checked(rest) {
        let _ = (h.next_header(), h.header_len(), h.crypt_offset(), h.version(), h.spi(), h.iv(), h.vc(), h.nonce());
    }
    let mut dec = Decrypter::new(masters());
    if sel & 1 == 0 {
        let mut pkt = PacketBuf::from_slice(rest, 128, 128);
        let _ = dec.decapsulate(&mut pkt);
        // The same bytes as a datagram's payload, to a device that knows one SA.
        let mut d = device();
        let _ = d.rx_assoc(Version::AesGcm128);
        let _ = in_place(&d.receiver(), rest);
        return;
    }
    // rest = [cfg, n_edits, (pos_hi, pos_lo, xor)*, payload...]
    let Some((&cfg, rest)) = rest.split_first() else { return };
    let (n, rest) = rest.split_first().map(|(n, r)| ((*n % 6) as usize, r)).unwrap_or((0, rest));
    let (edits, payload) = rest.split_at((n * 3).min(rest.len()));
    let version = if cfg & 1 == 0 { Version::from_number(0) } else { Version::from_number(1) };
    let Some(version) = version else { return };
    let off = (cfg >> 2) & 0x0f;
    let tx_cfg = TxConfig {
        spi: 0x1234_5678 | (((cfg >> 7) as u32) << 31),
        version,
        mode: if cfg & 2 == 0 { Mode::Transport } else { Mode::Tunnel },
        crypt_offset_transport: off,
        crypt_offset_tunnel_v4: off,
        crypt_offset_tunnel_v6: off,
        vc: cfg & 0x40 != 0,
    };
    let Ok(tx) = TxSa::new(&masters(), tx_cfg) else { return };
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2];
    ip[2..4].copy_from_slice(&((28 + payload.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&[0x2b, 0x67, 0x56, 0xce]);
    ip.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0]);
    ip.extend_from_slice(payload);
    let c = netveil_wire::checksum::checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut pkt = PacketBuf::from_slice(&ip, 128, 128);
    if tx.encapsulate(&mut pkt).is_err() {
        return;
    }
    let clean = pkt.data().to_vec();
    let len = pkt.len();
    let mut changed = false;
    for e in edits.chunks_exact(3) {
        let pos = u16::from_be_bytes([e[0], e[1]]) as usize % len.max(1);
        pkt.data_mut()[pos] ^= e[2];
    }
    if pkt.data() != clean.as_slice() {
        changed = true;
    }
    // The PSP header and everything after it are authenticated (the outer IPv4 and UDP headers are not).
    let psp_changed = pkt.data().get(28..) != clean.get(28..);
    let corrupted = pkt.data().to_vec();
    let r = dec.decapsulate(&mut pkt);
    // As a datagram of a coalesced receive, to a device whose SA has the same key (the transmit SA's, rebuilt).
    let mut d = device();
    if let Ok(a) = d.rx_assoc(version) {
        if let Ok(tx2) = TxSa::with_key(&a.key, TxConfig { spi: a.spi, ..tx_cfg }) {
            let mut p2 = PacketBuf::from_slice(&ip, 128, 128);
            if tx2.encapsulate(&mut p2).is_ok() {
                // The same edits, at the same places (the packets have the same layout).
                let mut w = p2.data().to_vec();
                for (i, b) in w.iter_mut().enumerate() {
                    *b ^= corrupted[i] ^ clean[i];
                }
                let (r2, opened) = in_place(&d.receiver(), &w[28..]);
                if !changed {
                    match (r2, tx_cfg.mode) {
                        (Ok(Some(_)), Mode::Tunnel) => assert_eq!(opened, ip, "an untouched datagram opened in place to other bytes"),
                        (Ok(None), Mode::Transport) => {}
                        (r2, _) => panic!("an untouched datagram did not open in place: {r2:?}"),
                    }
                } else if psp_changed {
                    assert!(!matches!(r2, Ok(Some(_))), "a changed datagram opened in place");
                }
            }
        }
    }
    if !changed {
        assert!(r.is_ok(), "an untouched PSP packet must decrypt");
        assert_eq!(pkt.data(), &ip[..], "an untouched PSP packet decrypted to other bytes");
    } else if psp_changed {
        assert!(r.is_err(), "a PSP packet changed at or after its PSP header decrypted");
    }
});

fn device() -> Device {
    Device::with_master_keys(
        zeroize::Zeroizing::new([0x33; 32]),
        zeroize::Zeroizing::new([0x44; 32]),
        Box::new(netveil_crypto::rand::SeededRng::new(0)),
    )
}

/// Opens `payload` with `rx` as a datagram of a coalesced receive (between other bytes in one buffer); checks that
/// the bytes around stay, and that a datagram left to the general path is untouched. Returns the result and the
/// packet's bytes afterwards.
fn in_place(rx: &Receiver, payload: &[u8]) -> (Result<Option<netveil_psp::Decapsulated>, netveil_psp::RxDrop>, Vec<u8>) {
    let (lead, trail) = ([0xa5u8; 40], [0x5au8; 40]);
    let mut b = PacketBuf::between(&lead, payload, &trail);
    let r = rx.decapsulate_udp_payload(&mut b);
    assert!(b.storage().starts_with(&lead) && b.storage().ends_with(&trail), "bytes around a datagram changed: {r:?}");
    if matches!(r, Ok(None)) {
        assert_eq!(b.data(), payload, "a datagram left to the general path was changed");
    }
    (r, b.data().to_vec())
}
