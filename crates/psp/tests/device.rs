//! The device model: SPI allocation, rotation and generations, the receive SA table, counters and the replay
//! extension, with packets sealed by a transmit SA built from what `rx_assoc` handed out.

use netveil_crypto::rand::SeededRng;
use netveil_psp::{kdf, Device, Mode, RxDrop, TxConfig, TxSa, Version};
use netveil_wire::PacketBuf;
use zeroize::Zeroizing;

/// A device with master keys from a seeded generator (every run the same).
fn device() -> Device {
    Device::new(Box::new(SeededRng::new(1)))
}

/// An IPv4/UDP packet 192.0.2.1:4000 -> 192.0.2.2:5000 with `n` payload bytes (checksums not needed).
fn udp4(n: usize, fill: u8) -> PacketBuf {
    let total = 28 + n;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[192, 0, 2, 1]);
    p[16..20].copy_from_slice(&[192, 0, 2, 2]);
    let c = netveil_wire::checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&4000u16.to_be_bytes());
    p[22..24].copy_from_slice(&5000u16.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + n) as u16).to_be_bytes());
    p[28..].fill(fill);
    PacketBuf::from_slice(&p, 128, 256)
}

fn buf(p: &[u8]) -> PacketBuf {
    PacketBuf::from_slice(p, 128, 256)
}

fn tx_for(a: &netveil_psp::RxAssoc, mode: Mode) -> TxSa {
    TxSa::with_key(
        &a.key,
        TxConfig {
            spi: a.spi,
            version: a.version,
            mode,
            crypt_offset_transport: 0,
            crypt_offset_tunnel_v4: 0,
            crypt_offset_tunnel_v6: 0,
            vc: false,
        },
    )
    .unwrap()
}

fn sealed(tx: &mut TxSa, n: usize) -> (PacketBuf, Vec<u8>) {
    let mut b = udp4(n, 0xa5);
    let clear = b.data().to_vec();
    tx.encapsulate(&mut b).unwrap();
    (b, clear)
}

fn key(b: u8) -> Zeroizing<[u8; 32]> {
    Zeroizing::new([b; 32])
}

#[test]
fn spis_carry_the_phase_bit_are_never_zero_and_never_reused() {
    let mut d = Device::with_master_keys(key(1), key(2), Box::new(SeededRng::new(0)));
    let mut seen = std::collections::HashSet::new();
    for _ in 0..1000 {
        let a = d.rx_assoc(Version::AesGcm128).unwrap();
        assert_eq!(a.spi >> 31, 0);
        assert_ne!(a.spi & 0x7fff_ffff, 0);
        assert!(seen.insert(a.spi), "SPI {:#x} reused", a.spi);
        assert_eq!(a.generation, 0);
    }
    d.rotate();
    for _ in 0..1000 {
        let a = d.rx_assoc(Version::AesGcm256).unwrap();
        assert_eq!(a.spi >> 31, 1, "rotation flips the phase bit");
        assert_ne!(a.spi & 0x7fff_ffff, 0);
        assert!(seen.insert(a.spi));
        assert_eq!(a.generation, 1);
    }
    assert_eq!(d.rx_sa_count(), 2000);
}

#[test]
fn handed_out_keys_are_the_spec_derivation_from_the_active_master_key() {
    let mut d = Device::with_master_keys(key(7), key(9), Box::new(SeededRng::new(0)));
    for v in [
        Version::AesGcm128,
        Version::AesGcm256,
        Version::AesGmac128,
        Version::AesGmac256,
    ] {
        let a = d.rx_assoc(v).unwrap();
        assert_eq!(&a.key[..], &kdf::derive(&[7; 32], a.spi, v)[..]);
        assert_eq!(a.key.len(), v.key_len());
    }
    // After a rotation the replaced (inactive) key is fresh: handed-out keys derive from it, not from key 1.
    d.rotate_with(Some(key(0x33)));
    let a = d.rx_assoc(Version::AesGcm128).unwrap();
    assert_eq!(a.spi >> 31, 1);
    assert_eq!(
        &a.key[..],
        &kdf::derive(&[0x33; 32], a.spi, Version::AesGcm128)[..]
    );
    assert_ne!(
        &a.key[..],
        &kdf::derive(&[9; 32], a.spi, Version::AesGcm128)[..]
    );
}

#[test]
fn round_trip_counts_packets_and_bytes_and_the_iv_strictly_increases() {
    let mut d = device();
    let a = d.rx_assoc(Version::AesGcm128).unwrap();
    let mut tx = tx_for(&a, Mode::Tunnel);
    let mut last_iv = 0;
    for n in [0usize, 1, 100, 1400] {
        let (mut b, clear) = sealed(&mut tx, n);
        let got = d.decapsulate(&mut b).unwrap();
        assert_eq!(got.spi, a.spi);
        assert!(got.iv > last_iv, "IV must strictly increase");
        last_iv = got.iv;
        assert_eq!(b.data(), &clear[..]);
        d.stats.count_tx(Ok(clear.len()));
    }
    let s = d.stats.snapshot();
    assert_eq!(s.rx_packets, 4);
    assert_eq!(s.rx_bytes, (28 + 29 + 128 + 1428) as u64);
    assert_eq!(s.tx_packets, 4);
    assert_eq!(
        (s.rx_auth_fail, s.rx_error, s.rx_bad, s.tx_error),
        (0, 0, 0, 0)
    );
}

#[test]
fn sas_survive_one_rotation_and_die_at_the_second() {
    let mut d = device();
    let a0 = d.rx_assoc(Version::AesGcm256).unwrap();
    let mut tx0 = tx_for(&a0, Mode::Transport);

    d.rotate();
    assert_eq!(d.generation(), 1);
    // One rotation old: still decrypts (peers re-associate without loss).
    let (mut b, clear) = sealed(&mut tx0, 64);
    d.decapsulate(&mut b).unwrap();
    assert_eq!(b.data(), &clear[..]);
    let a1 = d.rx_assoc(Version::AesGcm256).unwrap();
    let mut tx1 = tx_for(&a1, Mode::Transport);

    d.rotate();
    assert_eq!(d.generation(), 2);
    // Two rotations old: its master key is gone.
    let (mut b, _) = sealed(&mut tx0, 64);
    assert_eq!(d.decapsulate(&mut b), Err(RxDrop::UnknownSpi));
    // One rotation old: still fine.
    let (mut b, clear) = sealed(&mut tx1, 64);
    d.decapsulate(&mut b).unwrap();
    assert_eq!(b.data(), &clear[..]);
    let s = d.stats.snapshot();
    assert_eq!((s.rx_packets, s.rx_bad, s.rx_unknown_spi), (2, 1, 1));

    // An SPI value of the replaced key, re-allocated under the new key, has a new key: the old sender's
    // packets with that SPI fail authentication instead of decrypting.
    let again = d.rx_assoc(Version::AesGcm256).unwrap();
    assert_eq!(again.spi, a0.spi, "counter restarts under the fresh key");
    assert_ne!(&again.key[..], &a0.key[..]);
    let (mut b, _) = sealed(&mut tx0, 64);
    assert_eq!(
        d.decapsulate(&mut b),
        Err(RxDrop::Psp(netveil_psp::Error::Auth))
    );
    assert_eq!(d.stats.snapshot().rx_auth_fail, 1);
}

#[test]
fn the_generation_is_seven_bits() {
    let mut d = device();
    for i in 1..=300u32 {
        d.rotate();
        assert_eq!(u32::from(d.generation()), i % 128);
        assert_eq!(u32::from(d.phase()), i % 2);
    }
}

#[test]
fn unknown_spi_tamper_wrong_version_and_garbage_are_counted_and_dropped() {
    let mut d = device();
    let a = d.rx_assoc(Version::AesGcm128).unwrap();
    let mut tx = tx_for(&a, Mode::Tunnel);

    // Unknown SPI: a sender with a key for an SPI we never handed out.
    let mut stranger = TxSa::with_key(
        &[0u8; 16],
        TxConfig {
            spi: a.spi + 1,
            ..*tx.config()
        },
    )
    .unwrap();
    let (mut b, _) = sealed(&mut stranger, 10);
    assert_eq!(d.decapsulate(&mut b), Err(RxDrop::UnknownSpi));

    // Every single-bit flip past the outer UDP header fails authentication or framing; none is accepted.
    let (good, _) = sealed(&mut tx, 40);
    let psp_at = 28;
    for byte in psp_at..good.len() {
        for bit in 0..8 {
            let mut b = buf(good.data());
            b.data_mut()[byte] ^= 1 << bit;
            assert!(d.decapsulate(&mut b).is_err(), "flip at {byte}.{bit}");
        }
    }
    let s = d.stats.snapshot();
    assert_eq!(s.rx_packets, 0);
    assert!(s.rx_auth_fail > 0 && s.rx_bad > 0);
    assert_eq!(
        s.rx_auth_fail + s.rx_bad + s.rx_error,
        1 + 8 * (good.len() - psp_at) as u64
    );

    // A packet that is not PSP is not the device's business: not counted.
    let before = d.stats.snapshot();
    let mut b = udp4(10, 1);
    assert_eq!(
        d.decapsulate(&mut b),
        Err(RxDrop::Psp(netveil_psp::Error::NotPsp))
    );
    assert_eq!(d.stats.snapshot(), before);

    // The untouched packet still decrypts.
    let mut b = buf(good.data());
    d.decapsulate(&mut b).unwrap();
}

#[test]
fn replay_extension_drops_repeats_and_accepts_reordering_within_the_window() {
    let mut d = device();
    d.set_replay_window(64);
    let a = d.rx_assoc(Version::AesGcm128).unwrap();
    let mut tx = tx_for(&a, Mode::Tunnel);
    let pkts: Vec<Vec<u8>> = (0..100)
        .map(|_| sealed(&mut tx, 20).0.data().to_vec())
        .collect();
    let run = |d: &Device, i: usize| d.decapsulate(&mut buf(&pkts[i]));
    // In order with one held back, then the held-back one (reordered, within the window).
    for i in (0..99).filter(|&i| i != 50) {
        run(&d, i).unwrap();
    }
    run(&d, 50).unwrap();
    // Every repeat is dropped.
    for i in [0, 50, 98] {
        assert_eq!(run(&d, i), Err(RxDrop::Replay), "packet {i}");
    }
    run(&d, 99).unwrap();
    let s = d.stats.snapshot();
    assert_eq!((s.rx_packets, s.rx_replay, s.rx_bad), (100, 3, 3));

    // Without the extension (the default), PSP accepts repeats, as the specification says.
    let mut d = device();
    let a = d.rx_assoc(Version::AesGcm128).unwrap();
    let mut tx = tx_for(&a, Mode::Tunnel);
    let (p, _) = sealed(&mut tx, 20);
    for _ in 0..3 {
        d.decapsulate(&mut buf(p.data())).unwrap();
    }
}

#[test]
fn forgotten_sas_no_longer_decrypt() {
    let mut d = device();
    let a = d.rx_assoc(Version::AesGcm128).unwrap();
    let mut tx = tx_for(&a, Mode::Tunnel);
    assert!(d.forget(a.spi));
    assert!(!d.forget(a.spi));
    let (mut b, _) = sealed(&mut tx, 20);
    assert_eq!(d.decapsulate(&mut b), Err(RxDrop::UnknownSpi));
    assert!(format!("{a:?}").contains("spi"));
    assert!(!format!("{a:?}").contains("key:"), "keys are not printed");
}

#[test]
fn transport_mode_refuses_ipv4_fragments_and_tunnel_mode_carries_them() {
    let mut d = device();
    let a = d.rx_assoc(Version::AesGcm128).unwrap();
    for (flags, off) in [(0x20u8, 0u8), (0x00, 0x10), (0x01, 0x00)] {
        let mut b = udp4(100, 7);
        b.data_mut()[6] = flags;
        b.data_mut()[7] = off;
        let before = b.data().to_vec();
        let tx = tx_for(&a, Mode::Transport);
        assert_eq!(
            tx.encapsulate(&mut b),
            Err(netveil_psp::Error::Fragment),
            "flags {flags:#x} offset {off:#x}"
        );
        assert_eq!(b.data(), &before[..], "unchanged on error");
        let tx = tx_for(&a, Mode::Tunnel);
        tx.encapsulate(&mut b).unwrap();
        d.decapsulate(&mut b).unwrap();
        assert_eq!(b.data(), &before[..]);
    }
    // DF alone is not a fragment.
    let mut b = udp4(100, 7);
    b.data_mut()[6] = 0x40;
    tx_for(&a, Mode::Transport).encapsulate(&mut b).unwrap();
}

/// The transform's and the device's drop names (what `netveil pcap psp-decrypt` reports and scripts read): a rename
/// must fail here.
#[test]
fn drop_names_are_pinned() {
    assert_eq!(
        netveil_psp::Error::NAMES,
        [
            "not-psp",
            "malformed",
            "unsupported-version",
            "crypt-offset-too-large",
            "no-room",
            "auth-failed",
            "iv-exhausted",
            "fragment-in-transport-mode",
        ]
    );
    assert_eq!(
        RxDrop::NAMES[netveil_psp::Error::COUNT..],
        ["unknown-spi", "wrong-version", "replay"]
    );
    assert_eq!(
        RxDrop::NAMES[..netveil_psp::Error::COUNT],
        netveil_psp::Error::NAMES
    );
    assert_eq!(
        RxDrop::from(netveil_psp::Error::Auth).to_string(),
        "auth-failed"
    );
}

#[test]
fn a_receiver_taken_early_follows_every_change_of_the_device() {
    let mut d = device();
    // Taken before any SA exists, as the daemon's data plane does at start.
    let rx = d.receiver();
    let a0 = d.rx_assoc(Version::AesGcm128).unwrap();
    let mut tx0 = tx_for(&a0, Mode::Transport);
    let (mut b, clear) = sealed(&mut tx0, 100);
    rx.decapsulate(&mut b).unwrap();
    assert_eq!(b.data(), &clear[..]);
    // Counted in the device's counters.
    assert_eq!(d.stats.snapshot().rx_packets, 1);

    // Two rotations make a0's SA unknown to the receiver too; a new association reaches it.
    d.rotate();
    let a1 = d.rx_assoc(Version::AesGcm128).unwrap();
    d.rotate();
    let (mut b, _) = sealed(&mut tx0, 100);
    assert_eq!(rx.decapsulate(&mut b), Err(RxDrop::UnknownSpi));
    let mut tx1 = tx_for(&a1, Mode::Transport);
    let (mut b, clear) = sealed(&mut tx1, 100);
    rx.decapsulate(&mut b).unwrap();
    assert_eq!(b.data(), &clear[..]);

    // A forgotten SA is gone for the receiver at once.
    assert!(d.forget(a1.spi));
    let (mut b, _) = sealed(&mut tx1, 100);
    assert_eq!(rx.decapsulate(&mut b), Err(RxDrop::UnknownSpi));
    let s = d.stats.snapshot();
    assert_eq!((s.rx_packets, s.rx_unknown_spi), (2, 2));
}

/// Opens the UDP payload of `wire` (an IPv4 PSP packet) as a datagram of a coalesced receive: between other bytes in
/// one buffer. Returns the result, the packet's bytes afterwards, and whether the bytes around it stayed.
fn open_in_place(
    rx: &netveil_psp::Receiver,
    wire: &[u8],
) -> (
    Result<Option<netveil_psp::Decapsulated>, RxDrop>,
    Vec<u8>,
    bool,
) {
    let (lead, trail) = ([0xa5u8; 64], [0x5au8; 64]);
    let mut b = PacketBuf::between(&lead, &wire[28..], &trail);
    let r = rx.decapsulate_udp_payload(&mut b);
    let kept = b.storage().starts_with(&lead) && b.storage().ends_with(&trail);
    (r, b.data().to_vec(), kept)
}

#[test]
fn coalesced_datagrams_open_in_place_in_tunnel_mode_only() {
    let mut d = device();
    d.set_replay_window(64);
    let rx = d.receiver();
    let a = d.rx_assoc(Version::AesGcm128).unwrap();
    let mut tx = tx_for(&a, Mode::Tunnel);
    for n in [0usize, 1, 100, 1400] {
        let (b, clear) = sealed(&mut tx, n);
        let (r, data, kept) = open_in_place(&rx, b.data());
        assert!(
            matches!(r, Ok(Some(ref got)) if got.spi == a.spi),
            "{n}: {r:?}"
        );
        assert_eq!(data, clear, "{n}");
        assert!(kept, "{n}: bytes around the datagram changed");
        // Once only: the replay extension sees it.
        assert_eq!(open_in_place(&rx, b.data()).0, Err(RxDrop::Replay));
    }
    let s = d.stats.snapshot();
    assert_eq!(
        (s.rx_packets, s.rx_bytes, s.rx_replay),
        (4, (28 + 29 + 128 + 1428) as u64, 4)
    );

    // Every single-bit change is refused (and counted), and nothing around the datagram changes.
    let (b, clear) = sealed(&mut tx, 24);
    for byte in 28..b.len() {
        for bit in 0..8 {
            let mut w = b.data().to_vec();
            w[byte] ^= 1 << bit;
            let (r, _, kept) = open_in_place(&rx, &w);
            assert!(!matches!(r, Ok(Some(_))), "byte {byte} bit {bit}: {r:?}");
            assert!(kept);
        }
    }
    let (r, data, _) = open_in_place(&rx, b.data());
    assert!(matches!(r, Ok(Some(_))), "{r:?}");
    assert_eq!(data, clear);

    // Transport mode needs the IP header: left as it came, not counted, and it still opens whole.
    let a2 = d.rx_assoc(Version::AesGcm128).unwrap();
    let before = d.stats.snapshot();
    let mut tx = tx_for(&a2, Mode::Transport);
    let (b, clear) = sealed(&mut tx, 100);
    let (r, data, kept) = open_in_place(&rx, b.data());
    assert_eq!(r.map(|o| o.is_none()), Ok(true));
    assert_eq!(data, &b.data()[28..]);
    assert!(kept);
    assert_eq!(d.stats.snapshot(), before);
    let mut whole = buf(b.data());
    rx.decapsulate(&mut whole).unwrap();
    assert_eq!(whole.data(), &clear[..]);
}

#[test]
fn tunnel_packets_are_sealed_as_a_datagram_payload_for_sockets() {
    let mut d = device();
    let rx = d.receiver();
    let a = d.rx_assoc(Version::AesGcm128).unwrap();
    // Two transmit SAs with the same key and IV counter: one seals whole packets, the other datagram payloads.
    let (whole, sockets) = (tx_for(&a, Mode::Tunnel), tx_for(&a, Mode::Tunnel));
    for n in [0usize, 1, 100, 1400] {
        let (mut w, mut p) = (udp4(n, 0x3c), udp4(n, 0x3c));
        let clear = p.data().to_vec();
        whole.encapsulate(&mut w).unwrap();
        let sport = sockets.encapsulate_udp_payload(&mut p).unwrap();
        // The same bytes as the whole packet's UDP payload, and the source port its UDP header carries.
        assert_eq!(p.data(), &w.data()[28..], "{n}");
        assert_eq!(
            sport,
            u16::from_be_bytes([w.data()[20], w.data()[21]]),
            "{n}"
        );
        let (r, data, _) = open_in_place(&rx, w.data());
        assert!(matches!(r, Ok(Some(_))), "{n}: {r:?}");
        assert_eq!(data, clear, "{n}");
    }
    // Transport mode alike: the payload is the whole packet's UDP payload (the packet's IP header consumed), and
    // a refused packet (a fragment) uses no IV.
    let (whole, sockets) = (tx_for(&a, Mode::Transport), tx_for(&a, Mode::Transport));
    for n in [0usize, 1, 100, 1400] {
        let (mut w, mut p) = (udp4(n, 0x3c), udp4(n, 0x3c));
        let clear = p.data().to_vec();
        whole.encapsulate(&mut w).unwrap();
        let sport = sockets.encapsulate_udp_payload(&mut p).unwrap();
        assert_eq!(p.data(), &w.data()[28..], "transport {n}");
        assert_eq!(
            sport,
            u16::from_be_bytes([w.data()[20], w.data()[21]]),
            "transport {n}"
        );
        let mut back = buf(w.data());
        rx.decapsulate(&mut back).unwrap();
        assert_eq!(back.data(), &clear[..], "transport {n}");
    }
    let t = tx_for(&a, Mode::Transport);
    let mut frag = udp4(10, 0);
    let d = frag.data_mut();
    d[6] |= 0x20;
    d[10..12].fill(0);
    let c = netveil_wire::checksum::checksum(&d[..20]);
    d[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(
        t.encapsulate_udp_payload(&mut frag),
        Err(netveil_psp::Error::Fragment)
    );
    let mut w = udp4(10, 0);
    t.encapsulate(&mut w).unwrap();
    assert_eq!(netveil_psp::xform::peek_iv(w.data()), Ok(1));
}
