//! Known answers: each primitive l2sec uses against independent published vectors (Blowfish: Schneier's set;
//! HMAC-SHA1: RFC 2202; AES: FIPS-197; 3DES: SP 800-67; AES-GCM: McGrew–Viega; ChaCha20-Poly1305: RFC 8439;
//! Ed25519: RFC 8032; HKDF-SHA256: RFC 5869), and whole l2sec frames against vectors computed outside this
//! crate (Python `cryptography` and `hmac`, following the formulas of the crate documentation), plus a
//! re-implementation of the documented IV and nonce formulas with RustCrypto primitives.

use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};
use netveil_crypto::CbcCipher;
use netveil_crypto::{new_aead, new_mac, AeadAlg, HashAlg};
use netveil_l2sec::engine::{block_cipher, BlowfishCbc};
use netveil_l2sec::keys::hkdf_sha256;
use netveil_l2sec::suite::BlockAlg;
use netveil_l2sec::{RxConfig, RxSession, SealOpts, SessionKeys, Suite, TxConfig, TxSession};
use netveil_wire::PacketBuf;

thread_local! {
    /// The next seed of [`rng`]: each test runs on its own thread, so its generators are the same every run.
    static NEXT_SEED: std::cell::Cell<u64> = const { std::cell::Cell::new(1) };
}

/// A seeded generator (not for production), a new seed for every call of a test.
fn rng() -> Box<dyn netveil_crypto::rand::Rng> {
    let seed = NEXT_SEED.with(|s| s.replace(s.get() + 1));
    Box::new(netveil_crypto::rand::SeededRng::new(seed))
}

fn hx(s: &str) -> Vec<u8> {
    hex::decode(s.replace(' ', "")).unwrap()
}

/// One block through a CBC cipher with a zero IV: the raw block function.
fn ecb1(c: &dyn CbcCipher, block: &[u8]) -> Vec<u8> {
    let mut b = block.to_vec();
    c.encrypt(&vec![0u8; b.len()], &mut b);
    b
}

#[test]
fn blowfish_schneier_vectors() {
    // From Schneier's Blowfish test vectors (Eric Young's set): key, plaintext, ciphertext.
    let v = [
        ("0000000000000000", "0000000000000000", "4EF997456198DD78"),
        ("FFFFFFFFFFFFFFFF", "FFFFFFFFFFFFFFFF", "51866FD5B85ECB8A"),
        ("3000000000000000", "1000000000000001", "7D856F9A613063F2"),
        ("1111111111111111", "1111111111111111", "2466DD878B963C9D"),
        ("0123456789ABCDEF", "1111111111111111", "61F9C3802281B096"),
        ("1111111111111111", "0123456789ABCDEF", "7D0CC630AFDA1EC7"),
        ("FEDCBA9876543210", "0123456789ABCDEF", "0ACEAB0FC6A0A28D"),
        ("7CA110454A1A6E57", "01A1D6D039776742", "59C68245EB05282B"),
    ];
    for (k, p, c) in v {
        let bf = BlowfishCbc::new(&hx(k)).unwrap();
        assert_eq!(ecb1(&bf, &hx(p)), hx(c), "key {k}");
        let mut back = hx(c);
        bf.decrypt(&[0u8; 8], &mut back);
        assert_eq!(back, hx(p));
    }
    // The set's CBC vector: 16-byte key, "7654321 Now is the time for " and a zero byte, zero-padded to 32.
    let bf = BlowfishCbc::new(&hx("0123456789ABCDEFF0E1D2C3B4A59687")).unwrap();
    let mut data = b"7654321 Now is the time for \0\0\0\0".to_vec();
    let iv = hx("FEDCBA9876543210");
    bf.encrypt(&iv, &mut data);
    assert_eq!(
        data,
        hx("6B77B4D63006DEE605B156E27403979358DEB9E7154616D959F1652BD5FF92CC")
    );
    bf.decrypt(&iv, &mut data);
    assert_eq!(&data[..], b"7654321 Now is the time for \0\0\0\0");
    // The suite's block cipher is the same Blowfish.
    let c = block_cipher(BlockAlg::Blowfish, &hx("0123456789ABCDEFF0E1D2C3B4A59687")).unwrap();
    assert_eq!(c.block_len(), 8);
    assert!(BlowfishCbc::new(&[0u8; 3]).is_err());
    assert!(BlowfishCbc::new(&[0u8; 57]).is_err());
}

#[test]
fn aes_and_3des_block_functions() {
    // FIPS-197 Appendix C.1 and C.3.
    let pt = hx("00112233445566778899aabbccddeeff");
    let k128: Vec<u8> = (0u8..16).collect();
    let k256: Vec<u8> = (0u8..32).collect();
    let c = block_cipher(BlockAlg::Aes128, &k128).unwrap();
    assert_eq!(ecb1(&*c, &pt), hx("69c4e0d86a7b0430d8cdb78070b4c55a"));
    let c = block_cipher(BlockAlg::Aes256, &k256).unwrap();
    assert_eq!(ecb1(&*c, &pt), hx("8ea2b7ca516745bfeafc49904b496089"));
    // SP 800-67 Rev. 1 Appendix B (TDEA in ECB mode, three keys).
    let c = block_cipher(
        BlockAlg::TripleDes,
        &hx("0123456789ABCDEF 23456789ABCDEF01 456789ABCDEF0123"),
    )
    .unwrap();
    let pt = b"The qufck brown fox jump";
    let ct: Vec<u8> = pt.chunks(8).flat_map(|b| ecb1(&*c, b)).collect();
    assert_eq!(ct, hx("A826FD8CE53B855F CCE21C8112256FE6 68D5C05DD9B6B900"));
}

#[test]
fn hmac_sha1_rfc2202() {
    let cases: [(Vec<u8>, Vec<u8>, &str); 3] = [
        (
            vec![0x0b; 20],
            b"Hi There".to_vec(),
            "b617318655057264e28bc0b6fb378c8ef146be00",
        ),
        (
            b"Jefe".to_vec(),
            b"what do ya want for nothing?".to_vec(),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79",
        ),
        (
            vec![0xaa; 20],
            vec![0xdd; 50],
            "125d7342b9ac11cd91a39af48aa17b4f63f175d3",
        ),
    ];
    for (k, d, want) in cases {
        let m = new_mac(HashAlg::Sha1, &k, 20).unwrap();
        let mut t = [0u8; 20];
        m.compute(&[&d], &mut t);
        assert_eq!(t.to_vec(), hx(want));
        // Split input (as l2sec passes frame and high sequence bits) gives the same tag.
        m.compute(&[&d[..3], &d[3..]], &mut t);
        assert_eq!(t.to_vec(), hx(want));
    }
}

#[test]
fn aead_vectors() {
    // McGrew & Viega, "The Galois/Counter Mode of Operation", test case 3.
    let a = new_aead(
        AeadAlg::AesGcm128 { tag_len: 16 },
        &hx("feffe9928665731c6d6a8f9467308308"),
    )
    .unwrap();
    let mut d = hx("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255");
    let nonce: [u8; 12] = hx("cafebabefacedbaddecaf888").try_into().unwrap();
    let mut tag = [0u8; 16];
    a.seal(&nonce, &[], &mut d, &mut tag);
    assert_eq!(d, hx("42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985"));
    assert_eq!(tag.to_vec(), hx("4d5c2af327cd64a62cf35abd2ba6fab4"));
    // RFC 8439 section 2.8.2.
    let key: Vec<u8> = (0x80u8..0xa0).collect();
    let a = new_aead(AeadAlg::ChaCha20Poly1305, &key).unwrap();
    let mut d = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".to_vec();
    let nonce: [u8; 12] = hx("070000004041424344454647").try_into().unwrap();
    a.seal(&nonce, &hx("50515253c0c1c2c3c4c5c6c7"), &mut d, &mut tag);
    assert_eq!(d, hx("d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69da92728b1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc3ff4def08e4b7a9de576d26586cec64b6116"));
    assert_eq!(tag.to_vec(), hx("1ae10b594f09e26a7e902ecbd0600691"));
}

#[test]
fn ed25519_rfc8032() {
    let cases = [
        (
            "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
            "",
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
        ),
        (
            "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
            "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
            "72",
            "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
        ),
    ];
    for (sk, pk, msg, sig) in cases {
        let k = SigningKey::from_bytes(&hx(sk).try_into().unwrap());
        assert_eq!(k.verifying_key().to_bytes().to_vec(), hx(pk));
        let s = k.sign(&hx(msg));
        assert_eq!(s.to_bytes().to_vec(), hx(sig));
        let vk = VerifyingKey::from_bytes(&hx(pk).try_into().unwrap()).unwrap();
        vk.verify(&hx(msg), &s).unwrap();
        vk.verify_strict(&hx(msg), &s).unwrap();
    }
}

#[test]
fn hkdf_sha256_rfc5869() {
    let mut okm = [0u8; 42];
    hkdf_sha256(
        &hx("000102030405060708090a0b0c"),
        &[0x0b; 22],
        &hx("f0f1f2f3f4f5f6f7f8f9"),
        &mut okm,
    );
    assert_eq!(
        okm.to_vec(),
        hx("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
    );
    // Test case 3: empty salt and info.
    hkdf_sha256(&[], &[0x0b; 22], &[], &mut okm);
    assert_eq!(
        okm.to_vec(),
        hx("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8")
    );
}

const FRAME: &str = "020000000002 020000000001 0800";
const PAYLOAD: &[u8] = b"l2sec known answer";

fn clear() -> Vec<u8> {
    let mut f = hx(FRAME);
    f.extend_from_slice(PAYLOAD);
    f
}

fn kat_keys(suite: Suite) -> SessionKeys {
    let enc: Vec<u8> = (0u8..suite.enc_key_len() as u8).collect();
    let auth: Vec<u8> = (0x10u8..0x24).collect();
    match suite.version() {
        netveil_l2sec::Version::V0 => SessionKeys::new(suite, &enc, &auth, &[]).unwrap(),
        netveil_l2sec::Version::V1 => SessionKeys::new(suite, &enc, &[], &hx("a0a1a2a3")).unwrap(),
    }
}

fn seal_kat(suite: Suite, key_id: u8, opts: &SealOpts<'_>) -> Vec<u8> {
    let mut tx = TxSession::new(
        &kat_keys(suite),
        TxConfig {
            key_id,
            first_seq: Some(0x0102_0304),
            ..TxConfig::default()
        },
        &mut rng(),
    )
    .unwrap();
    let mut f = PacketBuf::from_slice(&clear(), 32, 64);
    tx.seal(&mut f, opts).unwrap();
    f.data().to_vec()
}

fn open_kat(suite: Suite, key_id: u8, sealed: &[u8], now: u32) {
    let mut rx = RxSession::new(
        &kat_keys(suite),
        RxConfig {
            key_id,
            security_numbers: [Some(0x00ab_cdef), None],
            ..RxConfig::default()
        },
    )
    .unwrap();
    let mut f = PacketBuf::from_slice(sealed, 0, 0);
    let o = rx.open(&mut f, now, None).unwrap();
    assert_eq!(o.seq, 0x0102_0304);
    assert_eq!(f.data(), &clear()[..]);
}

/// Whole frames computed with Python's `cryptography` and `hmac` from the documented formulas.
#[test]
fn frames_computed_outside_the_crate() {
    let v = hx("02000000000202000000000188b501010203048d7bf47d6dd6f6625a3118d2f9f458d11e594b73a60a7f330f63bf037b3ba16cc1d0dbbeeb23a52860bd6773");
    assert_eq!(seal_kat(Suite::BlowfishCbc, 0, &SealOpts::default()), v);
    open_kat(Suite::BlowfishCbc, 0, &v, 0);

    let opts = SealOpts {
        security_number: Some(0x00ab_cdef),
        timestamp: Some(0x6543_2100),
        ..SealOpts::default()
    };
    let v = hx("02000000000202000000000188b51901020304abcdef654321006f439a52d09fa4da001f0570fa15de9fd980e03dded5f0dc05ce79c36df67f11e106406d99a4aeafa2a55099c70f72c3c8053a17");
    assert_eq!(seal_kat(Suite::Aes128Cbc, 0, &opts), v);
    open_kat(Suite::Aes128Cbc, 0, &v, 0x6543_2100 + 5);

    let opts = SealOpts {
        timestamp: Some(0x6543_2100),
        ..SealOpts::default()
    };
    let v = hx("02000000000202000000000188b529070102030465432100546b04debf27defd5959a9fed4f54ff5eb80f3666f0595a4a1232c86ad145e131f7854bca5");
    assert_eq!(seal_kat(Suite::Aes128Gcm, 7, &opts), v);
    open_kat(Suite::Aes128Gcm, 7, &v, 0x6543_2100 - 5);

    // A version-1 group frame: EP flag (0x25), key id 0, the 8-byte epoch after the sequence number, all in the
    // AAD.
    let v = hx("02000000000202000000000188b52500010203040102030405060708546b04debf27defd5959a9fed4f54ff5eb80f3666f0e7ceba9ea12d12ca1a31cf100774beb");
    let epoch = Some(0x0102_0304_0506_0708);
    let mut tx = TxSession::new(
        &kat_keys(Suite::Aes128Gcm),
        TxConfig {
            epoch,
            first_seq: Some(0x0102_0304),
            ..TxConfig::default()
        },
        &mut rng(),
    )
    .unwrap();
    let mut f = PacketBuf::from_slice(&clear(), 32, 64);
    tx.seal(&mut f, &SealOpts::default()).unwrap();
    assert_eq!(f.data(), &v[..]);
    let mut rx = RxSession::new(
        &kat_keys(Suite::Aes128Gcm),
        RxConfig {
            epoch,
            ..RxConfig::default()
        },
    )
    .unwrap();
    let mut f = PacketBuf::from_slice(&v, 0, 0);
    let o = rx.open(&mut f, 0, None).unwrap();
    assert_eq!((o.seq, o.epoch), (0x0102_0304, epoch));
    assert_eq!(f.data(), &clear()[..]);
}

/// The documented version-0 formulas re-implemented with RustCrypto primitives directly (not through
/// netveil-crypto): BIVN, IV, CBC, padding, HMAC over frame and high sequence bits; for every block cipher and
/// sequence numbers below and above 2^32.
#[test]
fn v0_formulas_reimplemented() {
    use cbc::cipher::{BlockDecryptMut, BlockEncrypt, KeyInit, KeyIvInit};
    use hmac::Mac;
    type HmacSha1 = hmac::Hmac<sha1::Sha1>;

    fn raw_block(suite: Suite, key: &[u8], x: &mut [u8]) {
        match suite.block_alg().unwrap() {
            BlockAlg::Blowfish => {
                let c: blowfish::Blowfish = KeyInit::new_from_slice(key).unwrap();
                c.encrypt_block(x.into())
            }
            BlockAlg::Aes128 => aes::Aes128::new_from_slice(key)
                .unwrap()
                .encrypt_block(x.into()),
            BlockAlg::Aes256 => aes::Aes256::new_from_slice(key)
                .unwrap()
                .encrypt_block(x.into()),
            BlockAlg::TripleDes => des::TdesEde3::new_from_slice(key)
                .unwrap()
                .encrypt_block(x.into()),
        }
    }
    fn raw_cbc_decrypt(suite: Suite, key: &[u8], iv: &[u8], d: &mut [u8]) {
        use cbc::cipher::block_padding::NoPadding;
        match suite.block_alg().unwrap() {
            BlockAlg::Blowfish => cbc::Decryptor::<blowfish::Blowfish>::new_from_slices(key, iv)
                .unwrap()
                .decrypt_padded_mut::<NoPadding>(d)
                .map(|_| ()),
            BlockAlg::Aes128 => cbc::Decryptor::<aes::Aes128>::new_from_slices(key, iv)
                .unwrap()
                .decrypt_padded_mut::<NoPadding>(d)
                .map(|_| ()),
            BlockAlg::Aes256 => cbc::Decryptor::<aes::Aes256>::new_from_slices(key, iv)
                .unwrap()
                .decrypt_padded_mut::<NoPadding>(d)
                .map(|_| ()),
            BlockAlg::TripleDes => cbc::Decryptor::<des::TdesEde3>::new_from_slices(key, iv)
                .unwrap()
                .decrypt_padded_mut::<NoPadding>(d)
                .map(|_| ()),
        }
        .unwrap();
    }

    for suite in [
        Suite::BlowfishCbc,
        Suite::Aes128Cbc,
        Suite::Aes256Cbc,
        Suite::TripleDesCbc,
    ] {
        let enc: Vec<u8> = (0u8..suite.enc_key_len() as u8).map(|i| i ^ 0x5c).collect();
        let auth = [0x36u8; 20];
        let keys = SessionKeys::new(suite, &enc, &auth, &[]).unwrap();
        for first in [1u64, 0xffff_fffe, (7 << 32) | 0x1234] {
            let mut tx = TxSession::new(
                &keys,
                TxConfig {
                    first_seq: Some(first),
                    ..TxConfig::default()
                },
                &mut rng(),
            )
            .unwrap();
            for n in [0usize, 1, 13, 100] {
                let payload: Vec<u8> = (0..n as u8).collect();
                let mut clear = hx(FRAME);
                clear.extend_from_slice(&payload);
                let mut f = PacketBuf::from_slice(&clear, 32, 64);
                tx.seal(&mut f, &SealOpts::default()).unwrap();
                let seq = tx.last_seq();
                let d = f.data().to_vec();
                let b = suite.block_len();
                let (body, icv) = d.split_at(d.len() - 20);
                let mut m = <HmacSha1 as Mac>::new_from_slice(&auth).unwrap();
                m.update(body);
                m.update(&((seq >> 32) as u32).to_be_bytes());
                assert_eq!(&m.finalize().into_bytes()[..], icv, "{suite} HMAC");
                let mut m = <HmacSha1 as Mac>::new_from_slice(&auth).unwrap();
                m.update(&enc);
                let bivn = m.finalize().into_bytes();
                let mut iv = bivn[..b].to_vec();
                for (x, y) in iv[b - 8..].iter_mut().zip(seq.to_be_bytes()) {
                    *x ^= y;
                }
                raw_block(suite, &enc, &mut iv);
                assert_eq!(&body[15..19], &(seq as u32).to_be_bytes());
                let mut section = body[19..].to_vec();
                assert_eq!(section.len() % b, 0);
                raw_cbc_decrypt(suite, &enc, &iv, &mut section);
                let pad = section[2] as usize;
                assert_eq!(&section[..2], &[0x08, 0x00]);
                assert_eq!(pad, (b - (3 + n) % b) % b);
                assert_eq!(&section[3..3 + n], &payload[..]);
                assert_eq!(
                    section[3 + n..].to_vec(),
                    (1..=pad as u8).collect::<Vec<_>>()
                );
            }
        }
    }
}

/// The documented version-1 nonce, AAD and section re-implemented with RustCrypto's `aes-gcm` (independent of
/// aws-lc, which the crate uses).
#[test]
fn v1_formulas_reimplemented() {
    use aes_gcm::aead::{AeadInPlace, KeyInit};
    for suite in [Suite::Aes128Gcm, Suite::Aes256Gcm] {
        let enc: Vec<u8> = (0u8..suite.enc_key_len() as u8).map(|i| i ^ 0xa5).collect();
        let salt = [0xde, 0xad, 0xbe, 0xef];
        let keys = SessionKeys::new(suite, &enc, &[], &salt).unwrap();
        for first in [1u64, 0xffff_fffe, (7 << 32) | 0x1234] {
            let mut tx = TxSession::new(
                &keys,
                TxConfig {
                    key_id: 3,
                    first_seq: Some(first),
                    ..TxConfig::default()
                },
                &mut rng(),
            )
            .unwrap();
            for n in [0usize, 1, 100] {
                let payload: Vec<u8> = (0..n as u8).collect();
                let mut clear = hx(FRAME);
                clear.extend_from_slice(&payload);
                let mut f = PacketBuf::from_slice(&clear, 32, 64);
                tx.seal(&mut f, &SealOpts::default()).unwrap();
                let seq = tx.last_seq();
                let d = f.data().to_vec();
                let mut nonce = salt.to_vec();
                nonce.extend_from_slice(&seq.to_be_bytes());
                let (aad, rest) = d.split_at(14 + 6);
                assert_eq!(
                    &aad[14..],
                    &[
                        0x21,
                        3,
                        (seq >> 24) as u8,
                        (seq >> 16) as u8,
                        (seq >> 8) as u8,
                        seq as u8
                    ]
                );
                let (ct, tag) = rest.split_at(rest.len() - 16);
                let mut section = ct.to_vec();
                let r = if suite == Suite::Aes128Gcm {
                    aes_gcm::Aes128Gcm::new_from_slice(&enc)
                        .unwrap()
                        .decrypt_in_place_detached(nonce[..].into(), aad, &mut section, tag.into())
                } else {
                    aes_gcm::Aes256Gcm::new_from_slice(&enc)
                        .unwrap()
                        .decrypt_in_place_detached(nonce[..].into(), aad, &mut section, tag.into())
                };
                r.unwrap();
                assert_eq!(&section[..3], &[0x08, 0x00, 0x00]);
                assert_eq!(&section[3..], &payload[..]);
            }
        }
    }
}
