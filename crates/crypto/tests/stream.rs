//! The stream ciphers of PILSC's confidentiality-only mode against published vectors: AES-CTR from GCM's first
//! data block equals the GCM ciphertext of McGrew and Viega's GCM specification (test cases 3 and 15, also in
//! NIST's GCM validation suite), ChaCha20 from block 1 is RFC 8439 section 2.4.2's example. (The vectors were
//! checked against Python's `cryptography` too.) Decryption is the same operation; a wrong key length is refused.

use netveil_crypto::stream::{new_stream, StreamAlg};

fn hx(s: &str) -> Vec<u8> {
    hex::decode(s.split_whitespace().collect::<String>()).unwrap()
}

const GCM_P: &str = "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72
    1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255";

#[test]
fn known_answers() {
    let cases = [
        (
            StreamAlg::Aes128Ctr,
            "feffe9928665731c6d6a8f9467308308",
            "cafebabefacedbaddecaf888",
            GCM_P.to_string(),
            "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e
             21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985",
        ),
        (
            StreamAlg::Aes256Ctr,
            "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
            "cafebabefacedbaddecaf888",
            GCM_P.to_string(),
            "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa
             8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad",
        ),
        (
            StreamAlg::ChaCha20,
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
            "000000000000004a00000000",
            hex::encode(
                "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, \
                 sunscreen would be it.",
            ),
            "6e2e359a2568f98041ba0728dd0d6981e97e7aec1d4360c20a27afccfd9fae0b
             f91b65c5524733ab8f593dabcd62b3571639d624e65152ab8f530c359f0861d8
             07ca0dbf500d6a6156a38e088a22b65e52bc514d16ccf806818ce91ab7793736
             5af90bbf74a35be6b40b8eedf2785e42874d",
        ),
    ];
    for (alg, key, nonce, pt, ct) in cases {
        let s = new_stream(alg, &hx(key)).unwrap();
        let nonce: [u8; 12] = hx(nonce).try_into().unwrap();
        let mut data = hx(&pt);
        s.apply(&nonce, &mut data);
        assert_eq!(hex::encode(&data), hex::encode(hx(ct)), "{}", alg.name());
        s.apply(&nonce, &mut data);
        assert_eq!(data, hx(&pt), "{}", alg.name());
        // Every prefix encrypts to the ciphertext's prefix (a stream: no padding, length kept).
        for n in [0, 1, 15, 17, 63] {
            let mut d = hx(&pt)[..n].to_vec();
            s.apply(&nonce, &mut d);
            assert_eq!(d, hx(ct)[..n], "{} {n}", alg.name());
        }
    }
    for alg in [
        StreamAlg::Aes128Ctr,
        StreamAlg::Aes256Ctr,
        StreamAlg::ChaCha20,
    ] {
        assert!(new_stream(alg, &vec![0; alg.key_len() + 1]).is_err());
    }
}

/// The 64-bit block ciphers in CTR mode from an encrypted nonce: 3DES and Blowfish against Python's
/// `cryptography` (OpenSSL's 3DES and Blowfish in ECB, the counter blocks built from the module's definition:
/// `E_K(nonce[0..4] || nonce[8..12])` counting up as a 64-bit big-endian number).
#[test]
fn block64_known_answers() {
    let nonce: [u8; 12] = hx("c0000201 00000000 01020304").try_into().unwrap();
    let pt = b"The quick brown fox jumps over the lazy dog; 3DES and Blowfish in CTR!";
    let cases = [
        (
            StreamAlg::TdesCtr,
            "0123456789abcdef23456789abcdef01456789abcdef0123".to_string(),
            "9871e83f68b97e8572478c1ab51097b37ef8cd32b45ea1531aa9e69d6addad447cd751bd5852c57173700dd21fa8aef2
             6f6a774d821d894666ef61f12d26f72a2e298aa27d3d",
        ),
        (
            StreamAlg::BlowfishCtr,
            "000102030405060708090a0b0c0d0e0f".to_string(),
            "53f393160abc32f44e405f17c5041e57af83d79e4ffc6a5741519b3ee2b60459303085c78f563568188cf9013d835525
             d3f8f4d6f540fce14cc252585b83a48df1f693d02874",
        ),
    ];
    for (alg, key, ct) in cases {
        let s = new_stream(alg, &hx(&key)).unwrap();
        let mut d = pt.to_vec();
        s.apply(&nonce, &mut d);
        assert_eq!(hex::encode(&d), hex::encode(hx(ct)), "{}", alg.name());
        s.apply(&nonce, &mut d);
        assert_eq!(d, pt);
        // The nonce's middle bytes must be zero (counters below 2^32): otherwise nothing readable comes out.
        let mut bad = nonce;
        bad[5] = 1;
        let mut d = pt.to_vec();
        s.apply(&bad, &mut d);
        assert_eq!(d, vec![0; pt.len()], "{}", alg.name());
    }
    assert!(new_stream(StreamAlg::BlowfishCtr, &[0; 15]).is_err());
    assert!(new_stream(StreamAlg::BlowfishCtr, &[0; 56]).is_ok());
    assert!(new_stream(StreamAlg::BlowfishCtr, &[0; 57]).is_err());
    assert!(new_stream(StreamAlg::TdesCtr, &[0; 16]).is_err());
}

/// RC5-32/12/16: the five examples of Rivest's RC5 paper (each ciphertext the next plaintext; the blocks as the
/// paper prints them, in byte order), then the CTR construction over it.
#[test]
fn rc5_paper_vectors_and_ctr() {
    use ctr010::cipher::{Array, BlockCipherEncrypt, KeyInit};
    type Rc5 = rc5::RC5<u32, ctr010::cipher::consts::U12, ctr010::cipher::consts::U16>;
    let words = |a: u32, b: u32| {
        let mut v = a.to_be_bytes().to_vec();
        v.extend_from_slice(&b.to_be_bytes());
        v
    };
    let paper = [
        (
            "00000000000000000000000000000000",
            (0, 0),
            (0x21A5DBEE, 0x154B8F6D),
        ),
        (
            "915F4619BE41B2516355A50110A9CE91",
            (0x21A5DBEE, 0x154B8F6D),
            (0xF7C013AC, 0x5B2B8952),
        ),
        (
            "783348E75AEB0F2FD7B169BB8DC16787",
            (0xF7C013AC, 0x5B2B8952),
            (0x2F42B3B7, 0x0369FC92),
        ),
        (
            "DC49DB1375A5584F6485B413B5F12BAF",
            (0x2F42B3B7, 0x0369FC92),
            (0x65C178B2, 0x84D197CC),
        ),
        (
            "5269F149D41BA0152497574D7F153125",
            (0x65C178B2, 0x84D197CC),
            (0xEB44E415, 0xDA319824),
        ),
    ];
    for (key, (pa, pb), (ca, cb)) in paper {
        let c = Rc5::new_from_slice(&hx(key)).unwrap();
        let mut block = Array::try_from(words(pa, pb).as_slice()).unwrap();
        c.encrypt_block(&mut block);
        assert_eq!(block.to_vec(), words(ca, cb), "key {key}");
    }
    // CTR over it: the keystream is E(E(n64)), E(E(n64) + 1), ... (64-bit big-endian increments).
    let key = hx("915F4619BE41B2516355A50110A9CE91");
    let c = Rc5::new_from_slice(&key).unwrap();
    let nonce: [u8; 12] = hx("c0000201 00000000 01020304").try_into().unwrap();
    let mut iv = Array::try_from(&hx("c000020101020304")[..]).unwrap();
    c.encrypt_block(&mut iv);
    let start = u64::from_be_bytes(iv.as_slice().try_into().unwrap());
    let mut keystream = Vec::new();
    for i in 0..3u64 {
        let mut b = Array::try_from(&start.wrapping_add(i).to_be_bytes()[..]).unwrap();
        c.encrypt_block(&mut b);
        keystream.extend_from_slice(&b);
    }
    let s = new_stream(StreamAlg::Rc5Ctr, &key).unwrap();
    let mut d = vec![0u8; 20];
    s.apply(&nonce, &mut d);
    assert_eq!(d, keystream[..20]);
}
