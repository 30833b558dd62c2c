//! Round trips: every suite × every combination of the SN, TS, SIG and ENC flags × L3 type (IPv4, IPv6, ARP,
//! other) × L3 size (0, 1, block-1, block, 1500); the sealed frame has the documented shape, and opening it
//! gives back exactly the original frame.

mod common;

use common::*;
use netveil_l2sec::header::{header_len, Header, FLAG_ENC, FLAG_SIG, FLAG_SN, FLAG_TS};
use netveil_l2sec::suite::{SIG_LEN, TAG_LEN};
use netveil_l2sec::{
    peek, RxConfig, RxSession, SealOpts, Suite, TxConfig, TxSession, Version, DEFAULT_ETHERTYPE,
    THESIS_ETHERTYPE,
};

const NOW: u32 = 1_700_000_000;

fn sizes(suite: Suite) -> Vec<usize> {
    let b = suite.block_len().max(8);
    let mut v = vec![0, 1, b - 1, b, 1500];
    v.dedup();
    v
}

fn expected_icv(suite: Suite, signed: bool) -> usize {
    match (suite.version(), signed) {
        (Version::V0, true) => SIG_LEN,
        (Version::V0, false) if suite.is_null() => 0,
        (Version::V0, false) => 20,
        (Version::V1, s) => TAG_LEN + if s { SIG_LEN } else { 0 },
    }
}

#[test]
fn every_suite_flag_type_and_size() {
    let key = signer(1);
    let vk = key.verifying_key();
    let mut count = 0;
    for suite in Suite::ALL {
        let (mut tx, _) = pair(suite);
        let mut rx = RxSession::new(
            &keys(suite),
            RxConfig {
                require_encryption: false,
                ..rx_cfg(suite)
            },
        )
        .unwrap();
        for flags in 0u8..16 {
            let (sn, ts, sig, asked) = (
                flags & 8 != 0,
                flags & 4 != 0,
                flags & 2 != 0,
                flags & 1 != 0,
            );
            let opts = SealOpts {
                security_number: sn.then_some(0x00ab_cdef),
                timestamp: ts.then_some(NOW - 3),
                signer: sig.then_some(&key),
                encrypt: asked,
            };
            // The null suite never encrypts: its frames go without ENC and in clear.
            let enc = asked && !suite.is_null();
            for et in ETHERTYPES {
                for n in sizes(suite) {
                    let payload = l3(et, n);
                    let clear = frame_bytes(DST, SRC, et, &payload);
                    let mut f = buf(&clear);
                    tx.seal(&mut f, &opts).unwrap();
                    let d = f.data().to_vec();
                    // Shape: MACs kept, l2sec EtherType, header, section, ICV.
                    assert_eq!(&d[..12], &clear[..12]);
                    assert_eq!(&d[12..14], &DEFAULT_ETHERTYPE.to_be_bytes());
                    let want_flags = (if sn { FLAG_SN } else { 0 })
                        | if ts { FLAG_TS } else { 0 }
                        | if sig { FLAG_SIG } else { 0 }
                        | if enc { FLAG_ENC } else { 0 };
                    assert_eq!(d[14], (suite.version().number() << 5) | want_flags);
                    let h = header_len(suite.version(), want_flags);
                    let block = if enc { suite.block_len() } else { 1 };
                    let pad = (block - (3 + n) % block) % block;
                    assert_eq!(d.len(), 14 + h + 3 + n + pad + expected_icv(suite, sig));
                    let hv = Header::new_checked(&d[14..]).unwrap();
                    assert_eq!(hv.security_number(), opts.security_number);
                    assert_eq!(hv.timestamp(), opts.timestamp);
                    assert_eq!(u64::from(hv.seq()), tx.last_seq() & 0xffff_ffff);
                    let section = &d[14 + h..14 + h + 3 + n + pad];
                    if enc {
                        if n >= 16 {
                            assert!(
                                !section.windows(16).any(|w| w == &payload[..16]),
                                "{suite} leaks plaintext"
                            );
                        }
                    } else {
                        assert_eq!(&section[..2], &et.to_be_bytes());
                        assert_eq!(section[2], 0);
                        assert_eq!(&section[3..], &payload[..]);
                    }
                    let p = peek(&d, DEFAULT_ETHERTYPE).unwrap();
                    assert_eq!(p.src.0, SRC);
                    assert_eq!(p.header.signed, sig);
                    let o = rx.open(&mut f, NOW, Some(&vk)).unwrap_or_else(|e| {
                        panic!("{suite} flags {flags:04b} type {et:04x} len {n}: {e}")
                    });
                    assert_eq!(f.data(), &clear[..], "{suite} flags {flags:04b} len {n}");
                    assert_eq!(o.ethertype, et);
                    assert_eq!(o.src.0, SRC);
                    assert_eq!(o.dst.0, DST);
                    assert_eq!(o.signed, sig);
                    assert_eq!(o.encrypted, enc);
                    assert_eq!(o.security_number, opts.security_number);
                    assert_eq!(o.timestamp, opts.timestamp);
                    assert_eq!(o.seq, tx.last_seq());
                    count += 1;
                }
            }
        }
    }
    assert!(count >= 12 * 16 * 4 * 4, "{count}");
}

#[test]
fn defaults_give_first_byte_0x01_and_0x21() {
    for (suite, first) in [(Suite::BlowfishCbc, 0x01), (Suite::Aes128Gcm, 0x21)] {
        let (mut tx, mut rx) = pair(suite);
        let clear = frame_bytes(DST, SRC, 0x0800, &l3(0x0800, 60));
        let mut f = buf(&clear);
        tx.seal(&mut f, &SealOpts::default()).unwrap();
        assert_eq!(f.data()[14], first);
        rx.open(&mut f, 0, None).unwrap();
        assert_eq!(f.data(), &clear[..]);
    }
}

#[test]
fn thesis_ethertype_and_key_id() {
    for suite in secure_suites() {
        let k = keys(suite);
        let mut tx = TxSession::new(
            &k,
            TxConfig {
                ethertype: THESIS_ETHERTYPE,
                key_id: 0x5a,
                ..TxConfig::default()
            },
            &mut rng(),
        )
        .unwrap();
        let mut rx = RxSession::new(
            &k,
            RxConfig {
                ethertype: THESIS_ETHERTYPE,
                key_id: 0x5a,
                ..RxConfig::default()
            },
        )
        .unwrap();
        let clear = frame_bytes(DST, SRC, 0x86dd, &l3(0x86dd, 100));
        let mut f = buf(&clear);
        tx.seal(&mut f, &SealOpts::default()).unwrap();
        assert_eq!(&f.data()[12..14], &[0x19, 0x82]);
        let p = peek(f.data(), THESIS_ETHERTYPE).unwrap();
        assert_eq!(
            p.header.key_id,
            if suite.version() == Version::V1 {
                0x5a
            } else {
                0
            }
        );
        let o = rx.open(&mut f, 0, None).unwrap();
        assert_eq!(o.key_id, p.header.key_id);
        assert_eq!(f.data(), &clear[..]);
    }
}

#[test]
fn keyless_signed_frames_both_versions() {
    let key = signer(9);
    let vk = key.verifying_key();
    for version in [Version::V0, Version::V1] {
        let mut tx = TxSession::keyless(version, TxConfig::default(), &mut rng());
        let mut rx = RxSession::keyless(version, RxConfig::default());
        for et in ETHERTYPES {
            for n in [0, 1, 7, 8, 1500] {
                let clear = frame_bytes(BCAST, SRC, et, &l3(et, n));
                let mut f = buf(&clear);
                let opts = SealOpts {
                    signer: Some(&key),
                    encrypt: false,
                    ..SealOpts::default()
                };
                tx.seal(&mut f, &opts).unwrap();
                assert_eq!(
                    f.len(),
                    clear.len() + header_len(version, FLAG_SIG) + 3 + SIG_LEN
                );
                let o = rx.open(&mut f, 0, Some(&vk)).unwrap();
                assert!(o.signed && !o.encrypted);
                assert_eq!(f.data(), &clear[..]);
            }
        }
    }
}

#[test]
fn group_traffic_with_per_sender_keys() {
    let group = [0x77u8; 32];
    let key = signer(3);
    for suite in secure_suites() {
        let tx_keys = netveil_l2sec::SessionKeys::group_sender(suite, &group, SRC).unwrap();
        let mut tx = TxSession::new(&tx_keys, TxConfig::default(), &mut rng()).unwrap();
        // The receiver derives the sender's keys from the group secret and the source MAC.
        let clear = frame_bytes(BCAST, SRC, 0x0806, &l3(0x0806, 28));
        for signed in [false, true] {
            let mut f = buf(&clear);
            let opts = SealOpts {
                signer: signed.then_some(&key),
                ..SealOpts::default()
            };
            tx.seal(&mut f, &opts).unwrap();
            let p = peek(f.data(), DEFAULT_ETHERTYPE).unwrap();
            assert!(p.dst.is_broadcast());
            let rx_keys = netveil_l2sec::SessionKeys::group_sender(suite, &group, p.src.0).unwrap();
            let mut rx = RxSession::new(&rx_keys, RxConfig::default()).unwrap();
            rx.open(&mut f, 0, Some(&key.verifying_key())).unwrap();
            assert_eq!(f.data(), &clear[..]);
        }
    }
}

#[test]
fn vlan_tagged_frames_travel_inside() {
    let mut tagged = l3(0x0800, 64);
    tagged.splice(0..0, [0x00, 0x64, 0x08, 0x00]); // TCI (VLAN 100), inner EtherType IPv4
    let clear = frame_bytes(DST, SRC, 0x8100, &tagged);
    for suite in secure_suites() {
        let (mut tx, mut rx) = pair(suite);
        let mut f = buf(&clear);
        tx.seal(&mut f, &SealOpts::default()).unwrap();
        assert_eq!(&f.data()[12..14], &DEFAULT_ETHERTYPE.to_be_bytes());
        let o = rx.open(&mut f, 0, None).unwrap();
        assert_eq!(o.ethertype, 0x8100);
        assert_eq!(f.data(), &clear[..]);
    }
}

#[test]
fn sequence_numbers_cross_2_pow_32() {
    for suite in secure_suites() {
        let k = keys(suite);
        let first = (1u64 << 32) - 3;
        let mut tx = TxSession::new(
            &k,
            TxConfig {
                first_seq: Some(first),
                ..TxConfig::default()
            },
            &mut rng(),
        )
        .unwrap();
        let mut rx = RxSession::new(&k, RxConfig::default()).unwrap();
        // The receiver starts from nothing, so it needs a first frame below 2^32 - window to infer from.
        let mut tx0 = TxSession::new(
            &k,
            TxConfig {
                first_seq: Some(first - 2000),
                ..TxConfig::default()
            },
            &mut rng(),
        )
        .unwrap();
        let clear = frame_bytes(DST, SRC, 0x0800, &l3(0x0800, 40));
        let mut f = buf(&clear);
        tx0.seal(&mut f, &SealOpts::default()).unwrap();
        rx.open(&mut f, 0, None).unwrap();
        for i in 0..6 {
            let mut f = buf(&clear);
            tx.seal(&mut f, &SealOpts::default()).unwrap();
            let o = rx.open(&mut f, 0, None).unwrap();
            assert_eq!(o.seq, first + i);
            assert_eq!(f.data(), &clear[..]);
        }
        assert!(rx.top_seq() > 1 << 32);
    }
}

#[test]
fn random_first_sequence_numbers_are_in_range_and_differ() {
    let k = keys(Suite::Aes128Gcm);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..16 {
        let mut tx = TxSession::new(&k, TxConfig::default(), &mut rng()).unwrap();
        let mut f = buf(&frame_bytes(DST, SRC, 0x0800, &[]));
        tx.seal(&mut f, &SealOpts::default()).unwrap();
        let s = tx.last_seq();
        assert!((1..=1u64 << 31).contains(&s));
        seen.insert(s);
    }
    assert!(seen.len() > 8);
}
