//! IKEv2's Encrypted payload (SK, and SKF fragments) on hostile input, for every IKE cipher: arbitrary bytes at an
//! arbitrary offset through `SkKey::open` (nothing may panic, and random bytes never authenticate), and messages
//! sealed from the input's plaintext, then edited (a byte flipped, or the message cut short): the untouched message
//! opens to exactly its plaintext, an edited one never opens.

#![no_main]

use libfuzzer_sys::fuzz_target;
use netveil_crypto::rand::SeededRng;
use netveil_ike::keys::{skeyseed, IkeKeys, IkeSuite, Role};
use netveil_ike::proposal::{Encr, Integ, Prf};
use netveil_ike::sk::{Encrypted, SkKey, IKE_HEADER_LEN};

fn suite(sel: u8) -> IkeSuite {
    let (encr, integ) = match sel % 6 {
        0 => (Encr::AesGcm16_128, None),
        1 => (Encr::AesGcm16_256, None),
        2 => (Encr::ChaCha20Poly1305, None),
        3 => (Encr::AesCbc128, Some(Integ::HmacSha1_96)),
        4 => (Encr::AesCbc256, Some(Integ::HmacSha256_128)),
        _ => (Encr::TripleDes, Some(Integ::HmacSha512_256)),
    };
    IkeSuite::new(encr, Prf::HmacSha256, integ).unwrap()
}

fn keys(s: IkeSuite) -> IkeKeys {
    let seed = skeyseed(Prf::HmacSha256, &[1; 16], &[2; 16], &[3; 32]);
    IkeKeys::derive(s, &seed, &[1; 16], &[2; 16], &[4; 8], &[5; 8]).unwrap()
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (sel, kind, at_sel, rest) = (data[0], data[1], data[2], &data[3..]);
    let kind = if kind & 1 == 0 { Encrypted::Sk } else { Encrypted::Skf };
    let k = keys(suite(sel));
    let rx = SkKey::inbound(&k, Role::Responder).unwrap();

    // 1. Arbitrary bytes at an arbitrary offset: never a panic, never authentic.
    let mut raw = rest.to_vec();
    assert!(
        rx.open(&mut raw, usize::from(at_sel), kind).is_err(),
        "random bytes opened"
    );

    // 2. A sealed message from the input's plaintext: opens untouched, never once edited.
    let mut tx = SkKey::outbound(&k, Role::Initiator).unwrap();
    let mut rng = SeededRng::from_seed([sel; 32]);
    let plain = &rest[..rest.len().min(1500)];
    let mut msg = vec![0u8; IKE_HEADER_LEN];
    msg[16] = 46;
    let at = msg.len();
    msg.extend_from_slice(&[41, 0, 0, 0]);
    if kind == Encrypted::Skf {
        msg.extend_from_slice(&[0, 1, 0, 1]);
    }
    let inner_at = msg.len();
    msg.extend_from_slice(plain);
    tx.seal(&mut rng, &mut msg, at, kind).unwrap();
    let sealed = msg.clone();
    let range = rx.open(&mut msg, at, kind).expect("an untouched message opens");
    assert_eq!(&msg[range], plain);
    assert!(inner_at <= sealed.len());

    // Edits from the input: flip a bit somewhere, or cut the message short.
    let edit = usize::from(u16::from_be_bytes([data[1], data[2]]));
    let mut flipped = sealed.clone();
    let i = edit % flipped.len();
    flipped[i] ^= 1 << (data[0] % 8);
    assert!(rx.open(&mut flipped, at, kind).is_err(), "a flipped bit at {i} opened");
    let mut cut = sealed[..edit % sealed.len()].to_vec();
    assert!(rx.open(&mut cut, at, kind).is_err(), "a cut message opened");
});
