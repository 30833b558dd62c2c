//! l2sec on hostile input: the clear-header view and `peek` on arbitrary bytes; arbitrary frames through
//! `RxSession::open` for several suites (CBC, ECB, AEAD, keyless); and valid frames of any suite, flag
//! combination (a version-1 epoch included), EtherType and length, sealed and then corrupted (byte edits,
//! truncation), opened by a session or by a candidate (no window yet). Nothing may panic; an
//! untouched frame must open to exactly the clear frame, and a changed one must never open (every byte of an
//! l2sec frame is authenticated; a signed frame's receiver requires signatures, else clearing the SIG flag makes
//! a frame of the null suite an unsigned one, which nothing checks).

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use netveil_crypto::rand::SeededRng;
use netveil_l2sec::ed25519_dalek::{SigningKey, VerifyingKey};
use netveil_l2sec::{
    peek, Header, RxConfig, RxSession, SealOpts, SessionKeys, Suite, TxConfig, TxSession, Version,
    DEFAULT_ETHERTYPE,
};
use netveil_wire::PacketBuf;

const SECRET: [u8; 32] = [0x42; 32];
const NOW: u32 = 1_000_000;

/// The signing key and its verifying key, made once (deriving the verifying key, an Ed25519 base-point
/// multiplication, was two fifths of each input's time).
fn signer() -> &'static (SigningKey, VerifyingKey) {
    static K: OnceLock<(SigningKey, VerifyingKey)> = OnceLock::new();
    K.get_or_init(|| {
        let k = SigningKey::from_bytes(&[7; 32]);
        let v = k.verifying_key();
        (k, v)
    })
}

/// The session keys of `suite` (derived once per suite).
fn keys(suite: Suite) -> &'static SessionKeys {
    static K: OnceLock<Vec<SessionKeys>> = OnceLock::new();
    let all = K.get_or_init(|| {
        Suite::ALL
            .iter()
            .map(|&s| SessionKeys::derive(s, &SECRET, b"fuzz").unwrap())
            .collect()
    });
    &all[Suite::ALL.iter().position(|&s| s == suite).expect("a suite of Suite::ALL")]
}

fn rx_for(
    suite: Option<Suite>,
    version: Version,
    epoch: Option<u64>,
    candidate: bool,
    require_signature: bool,
) -> RxSession {
    let cfg = RxConfig {
        require_signature,
        insecure_ecb: true,
        insecure_null: true,
        require_encryption: false,
        security_numbers: [Some(0x12_3456), None],
        timestamp_tolerance: 10,
        epoch,
        ..RxConfig::default()
    };
    match suite {
        Some(s) => {
            let k = keys(s);
            if candidate {
                RxSession::candidate(k, cfg).unwrap()
            } else {
                RxSession::new(k, cfg).unwrap()
            }
        }
        None => RxSession::keyless(version, cfg),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if let Ok(h) = Header::new_checked(rest) {
        let _ = (
            h.version(),
            h.flags(),
            h.key_id(),
            h.seq(),
            h.security_number(),
            h.timestamp(),
            h.epoch(),
            h.header_len(),
        );
        assert!(h.header_len() <= rest.len());
    }
    let _ = peek(rest, DEFAULT_ETHERTYPE);
    let (key, vk) = signer();
    if sel & 1 == 0 {
        // Arbitrary bytes; make most of them carry the l2sec EtherType.
        let mut frame = rest.to_vec();
        if sel & 2 == 0 && frame.len() >= 14 {
            frame[12..14].copy_from_slice(&DEFAULT_ETHERTYPE.to_be_bytes());
        }
        let sessions = [
            (Some(Suite::BlowfishCbc), Version::V0),
            (Some(Suite::Aes128Ecb), Version::V0),
            (Some(Suite::TripleDesCbc), Version::V0),
            (Some(Suite::Aes128Gcm), Version::V1),
            (Some(Suite::ChaCha20Poly1305), Version::V1),
            (Some(Suite::Null), Version::V0),
            (None, Version::V0),
            (None, Version::V1),
        ];
        for (suite, version) in sessions {
            let mut rx = rx_for(suite, version, (sel & 4 != 0).then_some(7), sel & 8 != 0, sel & 16 != 0);
            let mut pkt = PacketBuf::from_slice(&frame, 32, 32);
            let _ = rx.open(&mut pkt, NOW, Some(vk));
        }
        return;
    }
    // rest = [suite, flags, ethertype sel, cut, n_edits, (pos_hi, pos_lo, xor)*, payload...]
    if rest.len() < 5 {
        return;
    }
    let (cfg, rest) = rest.split_at(5);
    let keyless = cfg[0] & 0x80 != 0;
    let suite = Suite::ALL[cfg[0] as usize % Suite::ALL.len()];
    let version = if keyless {
        [Version::V0, Version::V1][(cfg[0] >> 4) as usize & 1]
    } else {
        suite.version()
    };
    let flags = cfg[1];
    let epoch = (flags & 16 != 0).then_some(u64::from(cfg[2]) << 40 | 1);
    let opts = SealOpts {
        security_number: (flags & 1 != 0).then_some(0x12_3456),
        timestamp: (flags & 2 != 0).then_some(NOW - 3),
        signer: (keyless || flags & 4 != 0).then_some(key),
        encrypt: !keyless && flags & 8 == 0,
    };
    let ethertype = [0x0800, 0x86dd, 0x0806, 0x8100, 0x88b5][cfg[2] as usize % 5];
    let n = (cfg[4] % 8) as usize;
    let (edits, payload) = rest.split_at((n * 3).min(rest.len()));
    let mut clear = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
    clear.extend_from_slice(&u16::to_be_bytes(ethertype));
    clear.extend_from_slice(payload);
    let mut tx = if keyless {
        TxSession::keyless(
            version,
            TxConfig {
                first_seq: Some(1000),
                ..TxConfig::default()
            }, &mut SeededRng::new(0),
        )
    } else {
        TxSession::new(
            keys(suite),
            TxConfig {
                insecure_ecb: true,
                insecure_null: true,
                first_seq: Some(1000),
                epoch,
                ..TxConfig::default()
            }, &mut SeededRng::new(0),
        )
        .unwrap()
    };
    let mut pkt = PacketBuf::from_slice(&clear, 32, 128);
    tx.seal(&mut pkt, &opts).expect("room was provided");
    let sealed = pkt.data().to_vec();
    let len = pkt.len();
    for e in edits.chunks_exact(3) {
        let pos = u16::from_be_bytes([e[0], e[1]]) as usize % len;
        pkt.data_mut()[pos] ^= e[2];
    }
    if cfg[3] & 0x80 != 0 {
        pkt.truncate(len.saturating_sub(1 + (cfg[3] & 0x7f) as usize));
    }
    let changed = pkt.data() != sealed.as_slice();
    // A keyless session sends no epoch (it has no keys it could bind it to) and expects none.
    let rx_epoch = if keyless || version == Version::V0 { None } else { epoch };
    // A receiver of signed frames requires signatures (as the daemon's does when peers are listed): else a changed
    // SIG flag makes a signed frame of the null suite, or a keyless one, an unsigned one, which nothing checks.
    let mut rx = rx_for(
        (!keyless).then_some(suite),
        version,
        rx_epoch,
        flags & 32 != 0,
        opts.signer.is_some(),
    );
    let r = rx.open(&mut pkt, NOW, Some(vk));
    // The null suite checks nothing unless the frame is signed: a changed frame may open.
    let unchecked = !keyless && suite.is_null() && opts.signer.is_none();
    if changed {
        assert!(unchecked || r.is_err(), "a corrupted l2sec frame opened");
    } else {
        let o = r.expect("an untouched l2sec frame must open");
        assert_eq!(pkt.data(), clear.as_slice());
        assert_eq!(o.seq, 1000);
        // And a second time it is a replay.
        let mut again = PacketBuf::from_slice(&sealed, 32, 32);
        assert!(rx
            .open(&mut again, NOW, Some(vk))
            .is_err());
    }
});
