//! What l2sec must refuse: every bit flip of a sealed frame (MAC addresses included), truncation and extension,
//! replays and frames left of the window, wrong session and group keys, spoofed senders, wrong security
//! numbers, stale timestamps, signatures by another key, frames the receiver's policy refuses; bad padding
//! under a valid ICV; the ECB pattern leak (and its absence with CBC and AEAD); sealing errors; no secrets in
//! Debug output.

mod common;

use common::*;
use netveil_crypto::{new_aead, new_mac, AeadAlg, HashAlg};
use netveil_l2sec::header::{FLAG_EPOCH, FLAG_RESERVED, FLAG_SN};
use netveil_l2sec::{
    ConfigError, Drop, NodeDrop, RxConfig, RxSession, SealError, SealOpts, SessionKeys, Suite,
    TxConfig, TxSession, Version, DEFAULT_ETHERTYPE,
};
use netveil_sa::counters::{DropCounters, Reason};

const NOW: u32 = 1_700_000_000;

fn sealed(tx: &mut TxSession, clear: &[u8], opts: &SealOpts<'_>) -> Vec<u8> {
    let mut f = buf(clear);
    tx.seal(&mut f, opts).unwrap();
    f.data().to_vec()
}

fn open(
    rx: &mut RxSession,
    frame: &[u8],
    vk: Option<&ed25519_dalek::VerifyingKey>,
) -> Result<Vec<u8>, Drop> {
    let mut f = buf(frame);
    rx.open(&mut f, NOW, vk).map(|_| f.data().to_vec())
}

fn permissive(suite: Suite) -> RxConfig {
    RxConfig {
        require_encryption: false,
        ..rx_cfg(suite)
    }
}

#[test]
fn every_bit_flip_fails() {
    let key = signer(1);
    let vk = key.verifying_key();
    let clear = frame_bytes(DST, SRC, 0x0800, &l3(0x0800, 41));
    let mut flips = 0;
    // The null suite checks nothing (see `null_suite_is_the_framing_alone`).
    for suite in Suite::ALL.into_iter().filter(|s| !s.is_null()) {
        for mode in 0..4 {
            let opts = SealOpts {
                security_number: (mode == 3).then_some(7),
                timestamp: (mode == 3).then_some(NOW),
                signer: (mode == 1).then_some(&key),
                encrypt: mode != 2,
            };
            let (mut tx, _) = pair(suite);
            let mut rx = RxSession::new(&keys(suite), permissive(suite)).unwrap();
            let good = sealed(&mut tx, &clear, &opts);
            for i in 0..good.len() * 8 {
                let mut bad = good.clone();
                bad[i / 8] ^= 1 << (i % 8);
                let r = open(&mut rx, &bad, Some(&vk));
                assert!(r.is_err(), "{suite} mode {mode}: flip of bit {i} accepted");
                flips += 1;
            }
            for n in 0..good.len() {
                assert!(
                    open(&mut rx, &good[..n], Some(&vk)).is_err(),
                    "{suite}: truncated to {n}"
                );
            }
            let mut longer = good.clone();
            longer.push(0);
            assert!(open(&mut rx, &longer, Some(&vk)).is_err());
            // After all that, the untouched frame still opens (failures did not move the window).
            assert_eq!(
                open(&mut rx, &good, Some(&vk)).unwrap(),
                clear,
                "{suite} mode {mode}"
            );
        }
    }
    // Keyless signed frames too.
    for version in [Version::V0, Version::V1] {
        let mut tx = TxSession::keyless(version, TxConfig::default(), &mut rng());
        let mut rx = RxSession::keyless(version, RxConfig::default());
        let opts = SealOpts {
            signer: Some(&key),
            encrypt: false,
            ..SealOpts::default()
        };
        let good = sealed(&mut tx, &clear, &opts);
        for i in 0..good.len() * 8 {
            let mut bad = good.clone();
            bad[i / 8] ^= 1 << (i % 8);
            assert!(
                open(&mut rx, &bad, Some(&vk)).is_err(),
                "keyless {version:?}: bit {i}"
            );
            flips += 1;
        }
        assert_eq!(open(&mut rx, &good, Some(&vk)).unwrap(), clear);
    }
    assert!(flips > 30_000, "{flips}");
}

#[test]
fn flips_name_the_right_reason() {
    let (mut tx, mut rx) = pair(Suite::Aes128Gcm);
    let clear = frame_bytes(DST, SRC, 0x0800, &l3(0x0800, 20));
    let good = sealed(&mut tx, &clear, &SealOpts::default());
    let flip = |at: usize, bit: u8| {
        let mut b = good.clone();
        b[at] ^= bit;
        b
    };
    assert_eq!(open(&mut rx, &flip(0, 1), None), Err(Drop::AuthFailed)); // destination MAC
    assert_eq!(open(&mut rx, &flip(11, 0x80), None), Err(Drop::AuthFailed)); // source MAC
    assert_eq!(open(&mut rx, &flip(12, 1), None), Err(Drop::NotL2sec));
    assert_eq!(
        open(&mut rx, &flip(14, 0x80), None),
        Err(Drop::UnknownVersion)
    );
    // Version 1 -> 0, and 1 -> 2.
    assert_eq!(
        open(&mut rx, &flip(14, 0x20), None),
        Err(Drop::WrongVersion)
    );
    assert_eq!(
        open(&mut rx, &flip(14, 0x60), None),
        Err(Drop::UnknownVersion)
    );
    // Version 1: the EP flag makes 8 bytes after the sequence number an epoch, which no session of this key
    // expects.
    assert_eq!(
        open(&mut rx, &flip(14, FLAG_EPOCH), None),
        Err(Drop::UnknownKeyId)
    );
    assert_eq!(open(&mut rx, &flip(15, 1), None), Err(Drop::UnknownKeyId));
    assert_eq!(open(&mut rx, &flip(19, 1), None), Err(Drop::AuthFailed)); // sequence number
    assert_eq!(open(&mut rx, &flip(25, 1), None), Err(Drop::AuthFailed)); // ciphertext
    let n = good.len();
    assert_eq!(open(&mut rx, &flip(n - 1, 1), None), Err(Drop::AuthFailed)); // tag
                                                                             // SN flag set without room for it becomes a different, failing layout.
    assert!(open(&mut rx, &flip(14, FLAG_SN), None).is_err());
    // Version 0: the same bit is reserved.
    let (mut tx, mut rx) = pair(Suite::Aes128Cbc);
    let mut f = sealed(&mut tx, &clear, &SealOpts::default());
    f[14] ^= FLAG_RESERVED;
    assert_eq!(open(&mut rx, &f, None), Err(Drop::Malformed));
}

#[test]
fn replayed_and_too_old() {
    for suite in secure_suites() {
        let (mut tx, mut rx) = pair(suite);
        let clear = frame_bytes(DST, SRC, 0x86dd, &l3(0x86dd, 60));
        let frames: Vec<Vec<u8>> = (0..1100)
            .map(|_| sealed(&mut tx, &clear, &SealOpts::default()))
            .collect();
        assert_eq!(open(&mut rx, &frames[0], None).unwrap(), clear);
        assert_eq!(open(&mut rx, &frames[0], None), Err(Drop::Replayed));
        // Out of order within the window is fine.
        assert!(open(&mut rx, &frames[10], None).is_ok());
        assert!(open(&mut rx, &frames[5], None).is_ok());
        assert_eq!(open(&mut rx, &frames[5], None), Err(Drop::Replayed));
        assert!(open(&mut rx, &frames[1099], None).is_ok());
        // 1099 - 1 >= 1024: left of the window.
        assert_eq!(open(&mut rx, &frames[1], None), Err(Drop::TooOld));
        assert!(open(&mut rx, &frames[1098], None).is_ok());
    }
}

#[test]
fn per_peer_windows_are_independent() {
    let suite = Suite::Aes128Gcm;
    let group = [9u8; 32];
    let peers = [[2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb]];
    let mut txs: Vec<TxSession> = peers
        .iter()
        .map(|m| {
            let k = SessionKeys::group_sender(suite, &group, *m).unwrap();
            TxSession::new(
                &k,
                TxConfig {
                    first_seq: Some(100),
                    ..TxConfig::default()
                },
                &mut rng(),
            )
            .unwrap()
        })
        .collect();
    let mut rxs: Vec<RxSession> = peers
        .iter()
        .map(|m| {
            RxSession::new(
                &SessionKeys::group_sender(suite, &group, *m).unwrap(),
                RxConfig::default(),
            )
            .unwrap()
        })
        .collect();
    // Both senders start at sequence number 100: each receiver session has its own window.
    let clear: Vec<Vec<u8>> = peers
        .iter()
        .map(|m| frame_bytes(BCAST, *m, 0x0806, &l3(0x0806, 28)))
        .collect();
    let frames: Vec<Vec<u8>> = (0..2)
        .map(|i| sealed(&mut txs[i], &clear[i], &SealOpts::default()))
        .collect();
    for i in 0..2 {
        // The other sender's session cannot open it (per-sender keys).
        assert_eq!(
            open(&mut rxs[1 - i], &frames[i], None),
            Err(Drop::AuthFailed)
        );
    }
    for i in 0..2 {
        assert_eq!(open(&mut rxs[i], &frames[i], None).unwrap(), clear[i]);
        assert_eq!(open(&mut rxs[i], &frames[i], None), Err(Drop::Replayed));
    }
}

#[test]
fn wrong_session_key_and_wrong_group_key() {
    let clear = frame_bytes(DST, SRC, 0x0800, &l3(0x0800, 100));
    // The null suite has no key to be wrong.
    for suite in Suite::ALL.into_iter().filter(|s| !s.is_null()) {
        let (mut tx, _) = pair(suite);
        let other = SessionKeys::derive(suite, &[0x43; 32], b"unicast test").unwrap();
        let mut rx = RxSession::new(&other, rx_cfg(suite)).unwrap();
        let f = sealed(&mut tx, &clear, &SealOpts::default());
        assert_eq!(open(&mut rx, &f, None), Err(Drop::AuthFailed), "{suite}");
        // Same secret, other context: other keys.
        let other = SessionKeys::derive(suite, &SECRET, b"unicast tesT").unwrap();
        let mut rx = RxSession::new(&other, rx_cfg(suite)).unwrap();
        assert_eq!(open(&mut rx, &f, None), Err(Drop::AuthFailed), "{suite}");

        // Group: a host with another group secret can neither read nor inject.
        let real = SessionKeys::group_sender(suite, &[1u8; 32], SRC).unwrap();
        let wrong = SessionKeys::group_sender(suite, &[2u8; 32], SRC).unwrap();
        let bclear = frame_bytes(BCAST, SRC, 0x0806, &l3(0x0806, 28));
        let mut tx_real = TxSession::new(&real, tx_cfg(suite), &mut rng()).unwrap();
        let mut tx_wrong = TxSession::new(&wrong, tx_cfg(suite), &mut rng()).unwrap();
        let mut rx_real = RxSession::new(&real, rx_cfg(suite)).unwrap();
        let mut rx_wrong = RxSession::new(&wrong, rx_cfg(suite)).unwrap();
        let f = sealed(&mut tx_real, &bclear, &SealOpts::default());
        assert_eq!(open(&mut rx_wrong, &f, None), Err(Drop::AuthFailed));
        let injected = sealed(&mut tx_wrong, &bclear, &SealOpts::default());
        assert_eq!(open(&mut rx_real, &injected, None), Err(Drop::AuthFailed));
        assert_eq!(open(&mut rx_real, &f, None).unwrap(), bclear);
        // Rewriting the source MAC fails: it is authenticated, and the keys are per sender. (A member holding the
        // group secret can still derive another member's keys: only signatures name the sender.)
        let mut spoof = f.clone();
        spoof[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x99]);
        let mut rx_other = RxSession::new(
            &SessionKeys::group_sender(suite, &[1u8; 32], [2, 0, 0, 0, 0, 0x99]).unwrap(),
            rx_cfg(suite),
        )
        .unwrap();
        assert_eq!(open(&mut rx_other, &spoof, None), Err(Drop::AuthFailed));
    }
}

#[test]
fn security_numbers() {
    for suite in secure_suites() {
        let (mut tx, mut rx) = pair(suite);
        let clear = frame_bytes(DST, SRC, 0x0800, &l3(0x0800, 30));
        let with = |sn| SealOpts {
            security_number: Some(sn),
            ..SealOpts::default()
        };
        let f = sealed(&mut tx, &clear, &with(0x00ab_cdef));
        assert_eq!(open(&mut rx, &f, None).unwrap(), clear);
        let f = sealed(&mut tx, &clear, &with(7));
        assert_eq!(open(&mut rx, &f, None).unwrap(), clear);
        let f = sealed(&mut tx, &clear, &with(8));
        assert_eq!(open(&mut rx, &f, None), Err(Drop::WrongSecurityNumber));
        // The schedule moves on: 7 is no longer accepted, 8 is.
        rx.set_security_numbers([Some(8), Some(0x00ab_cdef)]);
        assert_eq!(open(&mut rx, &f, None).unwrap(), clear);
        let f = sealed(&mut tx, &clear, &with(7));
        assert_eq!(open(&mut rx, &f, None), Err(Drop::WrongSecurityNumber));
        // Required but absent.
        let mut strict = RxSession::new(
            &keys(suite),
            RxConfig {
                require_security_number: true,
                ..rx_cfg(suite)
            },
        )
        .unwrap();
        let f = sealed(&mut tx, &clear, &SealOpts::default());
        assert_eq!(open(&mut strict, &f, None), Err(Drop::Policy));
        assert!(matches!(
            tx.seal(&mut buf(&clear), &with(0x0100_0000)),
            Err(SealError::SecurityNumberRange)
        ));
    }
}

#[test]
fn timestamps() {
    for suite in secure_suites() {
        let (mut tx, mut rx) = pair(suite);
        let clear = frame_bytes(DST, SRC, 0x0800, &l3(0x0800, 30));
        let at = |ts| SealOpts {
            timestamp: Some(ts),
            ..SealOpts::default()
        };
        let mut try_at = |ts: u32, now: u32, rx: &mut RxSession| {
            let mut f = buf(&sealed(&mut tx, &clear, &at(ts)));
            rx.open(&mut f, now, None).map(|o| o.timestamp)
        };
        assert_eq!(try_at(NOW, NOW, &mut rx), Ok(Some(NOW)));
        assert!(try_at(NOW - 30, NOW, &mut rx).is_ok());
        assert!(try_at(NOW + 30, NOW, &mut rx).is_ok());
        assert_eq!(try_at(NOW - 31, NOW, &mut rx), Err(Drop::StaleTimestamp));
        assert_eq!(try_at(NOW + 31, NOW, &mut rx), Err(Drop::StaleTimestamp));
        assert_eq!(try_at(0, NOW, &mut rx), Err(Drop::StaleTimestamp));
        // Across the 2^32 wrap of the seconds counter.
        assert!(try_at(u32::MAX - 5, 10, &mut rx).is_ok());
        assert!(try_at(10, u32::MAX - 5, &mut rx).is_ok());
        let mut strict = RxSession::new(
            &keys(suite),
            RxConfig {
                require_timestamp: true,
                timestamp_tolerance: 0,
                ..rx_cfg(suite)
            },
        )
        .unwrap();
        assert_eq!(try_at(NOW, NOW, &mut strict), Ok(Some(NOW)));
        assert_eq!(try_at(NOW, NOW + 1, &mut strict), Err(Drop::StaleTimestamp));
        let f = sealed(&mut tx, &clear, &SealOpts::default());
        assert_eq!(open(&mut strict, &f, None), Err(Drop::Policy));
    }
}

#[test]
fn signatures() {
    let alice = signer(1);
    let mallory = signer(2);
    let clear = frame_bytes(BCAST, SRC, 0x0806, &l3(0x0806, 28));
    for suite in secure_suites() {
        let (mut tx, mut rx) = pair(suite);
        let by = |k| SealOpts {
            signer: Some(k),
            ..SealOpts::default()
        };
        let f = sealed(&mut tx, &clear, &by(&mallory));
        // Mallory has the session keys but signs with her own key: Alice's verifying key rejects it.
        assert_eq!(
            open(&mut rx, &f, Some(&alice.verifying_key())),
            Err(Drop::BadSignature),
            "{suite}"
        );
        assert_eq!(open(&mut rx, &f, None), Err(Drop::NoPeerKey));
        assert_eq!(
            open(&mut rx, &f, Some(&mallory.verifying_key())).unwrap(),
            clear
        );
        // Unsigned frames where signatures are required.
        let mut strict = RxSession::new(
            &keys(suite),
            RxConfig {
                require_signature: true,
                ..rx_cfg(suite)
            },
        )
        .unwrap();
        let f = sealed(&mut tx, &clear, &SealOpts::default());
        assert_eq!(
            open(&mut strict, &f, Some(&alice.verifying_key())),
            Err(Drop::Policy)
        );
        let f = sealed(&mut tx, &clear, &by(&alice));
        assert_eq!(
            open(&mut strict, &f, Some(&alice.verifying_key())).unwrap(),
            clear
        );
    }
    // Keyless: without a session only signed, clear frames.
    for version in [Version::V0, Version::V1] {
        let mut tx = TxSession::keyless(version, TxConfig::default(), &mut rng());
        let mut rx = RxSession::keyless(version, RxConfig::default());
        let mut f = buf(&clear);
        assert_eq!(tx.seal(&mut f, &SealOpts::default()), Err(SealError::NoKey));
        let signed_enc = SealOpts {
            signer: Some(&alice),
            ..SealOpts::default()
        };
        assert_eq!(tx.seal(&mut f, &signed_enc), Err(SealError::NoKey));
        assert_eq!(f.data(), &clear[..]);
        let opts = SealOpts {
            signer: Some(&mallory),
            encrypt: false,
            ..SealOpts::default()
        };
        let f = sealed(&mut tx, &clear, &opts);
        assert_eq!(
            open(&mut rx, &f, Some(&alice.verifying_key())),
            Err(Drop::BadSignature)
        );
        // A keyed frame reaching a keyless session.
        let suite = if version == Version::V0 {
            Suite::Aes128Cbc
        } else {
            Suite::Aes128Gcm
        };
        let (mut ktx, _) = pair(suite);
        let f = sealed(&mut ktx, &clear, &SealOpts::default());
        assert_eq!(
            open(&mut rx, &f, Some(&alice.verifying_key())),
            Err(Drop::NoKey)
        );
    }
}

/// Finding: the signature was verified before the cheaper AEAD tag. A frame whose tag is wrong is now refused by
/// the tag (`auth-failed`) even when its signature is wrong too; a member's frame (tag right) with another
/// signer is `bad-signature`; and the signature still covers the ciphertext (checked on a copy).
#[test]
fn the_aead_tag_is_checked_before_the_signature() {
    let alice = signer(1);
    let mallory = signer(2);
    let clear = frame_bytes(BCAST, SRC, 0x0806, &l3(0x0806, 28));
    for suite in [Suite::Aes128Gcm, Suite::Aes256Gcm, Suite::ChaCha20Poly1305] {
        let (mut tx, mut rx) = pair(suite);
        let by = |k| SealOpts {
            signer: Some(k),
            ..SealOpts::default()
        };
        let f = sealed(&mut tx, &clear, &by(&mallory));
        let mut bad = f.clone();
        let tag_end = bad.len() - 64;
        bad[tag_end - 1] ^= 1;
        assert_eq!(
            open(&mut rx, &bad, Some(&alice.verifying_key())),
            Err(Drop::AuthFailed),
            "{suite}"
        );
        assert_eq!(
            open(&mut rx, &f, Some(&alice.verifying_key())),
            Err(Drop::BadSignature),
            "{suite}"
        );
        // A changed signature under a right tag: bad-signature; the original opens, once.
        let g = sealed(&mut tx, &clear, &by(&alice));
        let mut h = g.clone();
        let last = h.len() - 1;
        h[last] ^= 0x40;
        assert_eq!(
            open(&mut rx, &h, Some(&alice.verifying_key())),
            Err(Drop::BadSignature)
        );
        assert_eq!(
            open(&mut rx, &g, Some(&alice.verifying_key())).unwrap(),
            clear
        );
        assert_eq!(
            open(&mut rx, &g, Some(&alice.verifying_key())),
            Err(Drop::Replayed)
        );
    }
}

/// A candidate session (a sender not heard yet) has no replay window until a frame authenticated.
#[test]
fn candidate_sessions_get_a_window_only_when_a_frame_authenticated() {
    let alice = signer(1);
    let clear = frame_bytes(BCAST, SRC, 0x0800, &l3(0x0800, 40));
    for suite in secure_suites() {
        let (mut tx, _) = pair(suite);
        let signed = suite.version() == Version::V1;
        let opts = SealOpts {
            signer: signed.then_some(&alice),
            ..SealOpts::default()
        };
        let f = sealed(&mut tx, &clear, &opts);
        let mut cand = RxSession::candidate(&keys(suite), rx_cfg(suite)).unwrap();
        let vk = alice.verifying_key();
        for i in [14 + 2, f.len() - 1, 30] {
            let mut bad = f.clone();
            bad[i] ^= 4;
            assert!(open(&mut cand, &bad, Some(&vk)).is_err(), "{suite} {i}");
            assert!(!cand.has_window(), "{suite}: a window for a bad frame");
            assert_eq!(cand.top_seq(), 0);
        }
        assert_eq!(open(&mut cand, &f, Some(&vk)).unwrap(), clear, "{suite}");
        assert!(cand.has_window());
        assert_eq!(cand.top_seq(), tx.last_seq());
        assert_eq!(open(&mut cand, &f, Some(&vk)), Err(Drop::Replayed));
    }
}

#[test]
fn policy_version_key_id_and_ethertype() {
    let clear = frame_bytes(DST, SRC, 0x0800, &l3(0x0800, 30));
    let (mut tx, mut rx) = pair(Suite::Aes256Cbc);
    let unenc = SealOpts {
        encrypt: false,
        ..SealOpts::default()
    };
    let f = sealed(&mut tx, &clear, &unenc);
    assert_eq!(open(&mut rx, &f, None), Err(Drop::Policy));
    // A v0 frame reaching a v1 session and back.
    let (_, mut rx1) = pair(Suite::ChaCha20Poly1305);
    let f = sealed(&mut tx, &clear, &SealOpts::default());
    assert_eq!(open(&mut rx1, &f, None), Err(Drop::WrongVersion));
    let (mut tx1, _) = pair(Suite::ChaCha20Poly1305);
    let f1 = sealed(&mut tx1, &clear, &SealOpts::default());
    assert_eq!(open(&mut rx, &f1, None), Err(Drop::WrongVersion));
    // Key id.
    let mut rx_k = RxSession::new(
        &keys(Suite::ChaCha20Poly1305),
        RxConfig {
            key_id: 1,
            ..RxConfig::default()
        },
    )
    .unwrap();
    assert_eq!(open(&mut rx_k, &f1, None), Err(Drop::UnknownKeyId));
    // Another EtherType: not ours, and a clear frame is not l2sec either.
    let mut rx_t = RxSession::new(
        &keys(Suite::Aes256Cbc),
        RxConfig {
            ethertype: 0x1982,
            ..RxConfig::default()
        },
    )
    .unwrap();
    assert_eq!(open(&mut rx_t, &f, None), Err(Drop::NotL2sec));
    assert_eq!(open(&mut rx, &clear, None), Err(Drop::NotL2sec));
    // Nothing after the EtherType; unknown versions.
    let mut tiny = f[..14].to_vec();
    assert_eq!(open(&mut rx, &tiny, None), Err(Drop::Malformed));
    assert_eq!(open(&mut rx, &tiny[..13], None), Err(Drop::Malformed));
    for v in 2u8..8 {
        tiny.truncate(14);
        tiny.extend_from_slice(&[(v << 5) | 1, 0, 0, 0, 1]);
        tiny.extend_from_slice(&[0; 40]);
        assert_eq!(open(&mut rx, &tiny, None), Err(Drop::UnknownVersion));
    }
    assert_eq!(
        netveil_l2sec::peek(&f, DEFAULT_ETHERTYPE)
            .unwrap()
            .header
            .version,
        Version::V0
    );
}

/// Re-authenticates a modified frame with the known keys, to reach the checks behind the ICV.
#[test]
fn bad_padding_under_a_valid_icv() {
    let clear = frame_bytes(DST, SRC, 0x0800, &l3(0x0800, 30));
    // v0 without encryption: the pad size must be 0; HMAC recomputed over the forged frame.
    let auth = [0x11u8; 20];
    let k = SessionKeys::new(Suite::Aes128Cbc, &[0x22; 16], &auth, &[]).unwrap();
    let cfg = TxConfig {
        first_seq: Some(5),
        ..TxConfig::default()
    };
    let mut tx = TxSession::new(&k, cfg, &mut rng()).unwrap();
    let mut f = sealed(
        &mut tx,
        &clear,
        &SealOpts {
            encrypt: false,
            ..SealOpts::default()
        },
    );
    let n = f.len();
    assert_eq!(f[14 + 5 + 2], 0);
    f[14 + 5 + 2] = 1;
    let mac = new_mac(HashAlg::Sha1, &auth, 20).unwrap();
    let (body, icv) = f.split_at_mut(n - 20);
    mac.compute(&[body, &[0, 0, 0, 0]], icv);
    let mut rx = RxSession::new(
        &k,
        RxConfig {
            require_encryption: false,
            ..RxConfig::default()
        },
    )
    .unwrap();
    assert_eq!(open(&mut rx, &f, None), Err(Drop::BadPadding));
    // v1: pad size 1 inside a correctly sealed AEAD section.
    let key = [0x33u8; 16];
    let salt = [1, 2, 3, 4];
    let k = SessionKeys::new(Suite::Aes128Gcm, &key, &[], &salt).unwrap();
    let mut tx = TxSession::new(&k, cfg, &mut rng()).unwrap();
    let mut f = sealed(&mut tx, &clear, &SealOpts::default());
    let aead = new_aead(AeadAlg::AesGcm128 { tag_len: 16 }, &key).unwrap();
    let nonce: [u8; 12] = [1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 5];
    let n = f.len();
    let (front, tag) = f.split_at_mut(n - 16);
    let (aad, section) = front.split_at_mut(14 + 6);
    aead.open(&nonce, aad, section, tag).unwrap();
    section[2] = 1;
    let mut t = [0u8; 16];
    aead.seal(&nonce, aad, section, &mut t);
    tag.copy_from_slice(&t);
    let mut rx = RxSession::new(&k, RxConfig::default()).unwrap();
    assert_eq!(open(&mut rx, &f, None), Err(Drop::BadPadding));
}

fn repeated_blocks(section: &[u8], b: usize) -> usize {
    let blocks: Vec<&[u8]> = section.chunks_exact(b).collect();
    let mut seen = std::collections::HashSet::new();
    blocks.iter().filter(|x| !seen.insert(**x)).count()
}

/// The thesis' pattern demonstration: with ECB, a frame of repetitive payload shows repeated cipher blocks;
/// with CBC and the AEADs none.
#[test]
fn ecb_shows_patterns_cbc_and_aead_do_not() {
    let clear = frame_bytes(DST, SRC, 0x0800, &[b'A'; 1500]);
    for suite in Suite::ALL.into_iter().filter(|s| !s.is_null()) {
        let (mut tx, mut rx) = pair(suite);
        let f = sealed(&mut tx, &clear, &SealOpts::default());
        let h = 14 + suite.version().base_len();
        let icv = suite.icv_len();
        let section = &f[h..f.len() - icv];
        let b = suite.block_len().max(16);
        let b = if suite.version() == Version::V0 {
            suite.block_len()
        } else {
            b
        };
        let rep = repeated_blocks(section, b);
        if suite.is_ecb() {
            assert!(rep > 1500 / b - 4, "{suite}: only {rep} repeated blocks");
        } else {
            assert_eq!(rep, 0, "{suite}: repeated cipher blocks");
        }
        assert_eq!(open(&mut rx, &f, None).unwrap(), clear);
    }
    // ECB needs the explicit switch on both sides.
    for suite in Suite::ALL.into_iter().filter(|s| s.is_ecb()) {
        let k = keys(suite);
        assert!(matches!(
            TxSession::new(&k, TxConfig::default(), &mut rng()),
            Err(ConfigError::EcbNotAllowed)
        ));
        assert!(matches!(
            RxSession::new(&k, RxConfig::default()),
            Err(ConfigError::EcbNotAllowed)
        ));
    }
}

/// The null suite (the L2 study's noENC-noHMAC): the frame travels in clear with l2sec's framing and no ICV; a
/// changed byte goes unnoticed (what the switch's name warns of), but the replay window still refuses a frame
/// seen before, a frame that claims encryption is refused, a signature still authenticates, and neither side
/// builds without the explicit switch.
#[test]
fn null_suite_is_the_framing_alone() {
    let suite = Suite::Null;
    let payload = l3(0x0800, 100);
    let clear = frame_bytes(DST, SRC, 0x0800, &payload);
    let (mut tx, mut rx) = pair(suite);
    let f = sealed(&mut tx, &clear, &SealOpts::default());
    // MACs, l2sec EtherType, 5-byte version-0 header without ENC, EtherType, pad size 0, the packet as it was.
    assert_eq!(f.len(), clear.len() + 2 + 5 + 1);
    assert_eq!(f[14], 0x00, "version 0, no flag");
    assert_eq!(&f[19..21], &0x0800u16.to_be_bytes());
    assert_eq!(f[21], 0);
    assert_eq!(&f[22..], &payload[..]);
    // A changed payload byte is accepted: nothing checks it.
    let mut changed = f.clone();
    changed[40] ^= 0xff;
    let mut want = clear.clone();
    want[40 - 8] ^= 0xff;
    assert_eq!(open(&mut rx, &changed, None).unwrap(), want);
    // The same sequence number again is a replay.
    assert_eq!(open(&mut rx, &f, None), Err(Drop::Replayed));
    // ENC set: not a null frame.
    let mut enc = sealed(&mut tx, &clear, &SealOpts::default());
    enc[14] |= netveil_l2sec::header::FLAG_ENC;
    assert_eq!(open(&mut rx, &enc, None), Err(Drop::Policy));
    // Signed: the signature is the whole check, so a flipped bit is refused.
    let key = signer(9);
    let signed = SealOpts {
        signer: Some(&key),
        ..SealOpts::default()
    };
    let good = sealed(&mut tx, &clear, &signed);
    let mut bad = good.clone();
    bad[30] ^= 1;
    assert_eq!(
        open(&mut rx, &bad, Some(&key.verifying_key())),
        Err(Drop::BadSignature)
    );
    assert_eq!(
        open(&mut rx, &good, Some(&key.verifying_key())).unwrap(),
        clear
    );
    // The switch, on both sides (and the ECB switch is not it).
    let k = keys(suite);
    let ecb_only = TxConfig {
        insecure_ecb: true,
        ..TxConfig::default()
    };
    assert!(matches!(
        TxSession::new(&k, ecb_only, &mut rng()),
        Err(ConfigError::NullNotAllowed)
    ));
    assert!(matches!(
        RxSession::new(&k, RxConfig::default()),
        Err(ConfigError::NullNotAllowed)
    ));
}

#[test]
fn seal_errors_leave_the_frame_unchanged() {
    let clear = frame_bytes(DST, SRC, 0x0800, &l3(0x0800, 30));
    for suite in secure_suites() {
        let (mut tx, mut rx) = pair(suite);
        let key = signer(5);
        for opts in [
            SealOpts::default(),
            SealOpts {
                signer: Some(&key),
                security_number: Some(7),
                timestamp: Some(2),
                ..SealOpts::default()
            },
        ] {
            let (head, tail) = tx.overhead(&opts);
            let mut f = netveil_wire::PacketBuf::from_slice(&clear, head - 1, tail);
            assert_eq!(tx.seal(&mut f, &opts), Err(SealError::NoRoom));
            assert_eq!(f.data(), &clear[..]);
            let mut f = netveil_wire::PacketBuf::from_slice(&clear, head, tail - 1);
            // Padding may need less than the maximum: only a shortfall below the real need fails.
            let real_pad = match suite.version() {
                Version::V0 => {
                    (suite.block_len() - (3 + 30) % suite.block_len()) % suite.block_len()
                }
                Version::V1 => 0,
            };
            let need_tail = tail - (suite.block_len() - 1) + real_pad;
            if need_tail > tail - 1 {
                assert_eq!(tx.seal(&mut f, &opts), Err(SealError::NoRoom));
                assert_eq!(f.data(), &clear[..]);
            }
            let mut f = netveil_wire::PacketBuf::from_slice(&clear, head, tail);
            tx.seal(&mut f, &opts).unwrap();
            assert_eq!(f.headroom(), 0);
            assert_eq!(f.len(), clear.len() + head + need_tail);
            assert_eq!(
                rx.open(&mut f, 2, Some(&key.verifying_key()))
                    .map(|o| o.ethertype),
                Ok(0x0800)
            );
        }
        let mut short = buf(&clear[..13]);
        assert_eq!(
            tx.seal(&mut short, &SealOpts::default()),
            Err(SealError::Malformed)
        );
        // Exhaustion: the last 64-bit sequence number, then nothing.
        let mut tx = TxSession::new(
            &keys(suite),
            TxConfig {
                first_seq: Some(u64::MAX),
                ..TxConfig::default()
            },
            &mut rng(),
        )
        .unwrap();
        tx.seal(&mut buf(&clear), &SealOpts::default()).unwrap();
        let mut f = buf(&clear);
        assert_eq!(
            tx.seal(&mut f, &SealOpts::default()),
            Err(SealError::SeqExhausted)
        );
        assert_eq!(f.data(), &clear[..]);
    }
}

#[test]
fn debug_output_has_no_secrets() {
    for suite in Suite::ALL {
        let k = SessionKeys::new(
            suite,
            &vec![0xab; suite.enc_key_len()],
            &vec![0xcd; suite.auth_key_len()],
            &vec![0xef; suite.salt_len()],
        )
        .unwrap();
        let tx = TxSession::new(&k, tx_cfg(suite), &mut rng()).unwrap();
        let rx = RxSession::new(&k, rx_cfg(suite)).unwrap();
        for s in [format!("{k:?}"), format!("{tx:?}"), format!("{rx:?}")] {
            for needle in ["171", "205", "239", "ab, ab", "0xab", "cd, cd"] {
                assert!(!s.contains(needle), "{s}");
            }
        }
    }
    let key = signer(7);
    let opts = SealOpts {
        signer: Some(&key),
        ..SealOpts::default()
    };
    assert!(!format!("{opts:?}").contains("[7"));
}

#[test]
fn drop_names_are_stable_and_count() {
    // What a Node counts (the l2sec status `tx_drops`/`rx_drops` keys): the frame's reasons, then the host's.
    let names: Vec<&str> = NodeDrop::ALL.iter().map(|d| d.name()).collect();
    assert_eq!(
        names,
        [
            "not-l2sec",
            "malformed",
            "unknown-version",
            "wrong-version",
            "unknown-key-id",
            "policy",
            "no-key",
            "no-peer-key",
            "replayed",
            "too-old",
            "invalid-sequence",
            "auth-failed",
            "bad-signature",
            "bad-padding",
            "wrong-security-number",
            "stale-timestamp",
            "no-session",
            "not-for-us",
            "queue-full",
            "sep-refused",
            "tx-failed",
            "old-epoch",
            "arp-spoofed",
        ]
    );
    // The frame's reasons alone (what `peek` and `RxSession::open` return), first and under the same names.
    assert_eq!(Drop::NAMES[..], NodeDrop::NAMES[..Drop::COUNT]);
    assert_eq!(Drop::COUNT, 16);
    for (i, d) in Drop::ALL.iter().enumerate() {
        assert_eq!(d.index(), i);
        assert_eq!(NodeDrop::from(*d).index(), i);
        assert_eq!(<Drop as Reason>::name(i), d.name());
        assert_eq!(d.to_string(), d.name());
    }
    for (i, d) in NodeDrop::ALL.iter().enumerate() {
        assert_eq!(d.index(), i);
        assert_eq!(<NodeDrop as Reason>::name(i), d.name());
        assert_eq!(d.to_string(), d.name());
    }
    let c = DropCounters::<NodeDrop>::default();
    c.count(Drop::Replayed.into());
    assert_eq!(c.get(NodeDrop::Frame(Drop::Replayed)), 1);
    assert_eq!(c.snapshot().len(), NodeDrop::ALL.len());
}

#[test]
fn suite_names_round_trip() {
    for s in Suite::ALL {
        assert_eq!(Suite::from_name(s.name()), Some(s));
    }
    assert_eq!(Suite::from_name("aes128gcm16"), Some(Suite::Aes128Gcm));
    assert_eq!(Suite::from_name("des-cbc-sha1"), None);
}
