//! Known-answer tests for netveil-crypto. Every vector names its published source; values were additionally
//! cross-checked on the development machine with OpenSSL 3.0 (`openssl enc`) and Python (`hmac`, `cryptography`).

use netveil_crypto::rand::OsRng;
use netveil_crypto::{
    new_aead, new_cbc, new_mac, AeadAlg, AuthError, CbcAlg, HashAlg, IvGen, KeyError,
};

/// Hex decoding that ignores whitespace, so vectors can be pasted as the RFCs print them.
fn hx(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    hex::decode(s).expect("bad hex in test vector")
}

fn rep(b: u8, n: usize) -> Vec<u8> {
    vec![b; n]
}

// ------------------------------------------------------------------------------------------------------------
// HMAC
// ------------------------------------------------------------------------------------------------------------

fn check_mac(hash: HashAlg, key: &[u8], data: &[u8], expected: &[u8]) {
    let mac = new_mac(hash, key, expected.len()).unwrap();
    assert_eq!(mac.tag_len(), expected.len());
    let mut tag = vec![0u8; expected.len()];
    mac.compute(&[data], &mut tag);
    assert_eq!(
        hex::encode(&tag),
        hex::encode(expected),
        "{hash:?} key={}",
        hex::encode(key)
    );
    assert_eq!(mac.verify(&[data], expected), Ok(()));
    // Same result when the message arrives in several parts.
    let (a, b) = data.split_at(data.len() / 3);
    assert_eq!(mac.verify(&[a, &[], b], expected), Ok(()));
}

/// RFC 2202 section 2 (HMAC-MD5) and section 3 (HMAC-SHA-1): (key, data) of test cases 1-7.
fn rfc2202_inputs(key_len: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    vec![
        (rep(0x0b, key_len), b"Hi There".to_vec()),
        (b"Jefe".to_vec(), b"what do ya want for nothing?".to_vec()),
        (rep(0xaa, key_len), rep(0xdd, 50)),
        ((1..=25).collect(), rep(0xcd, 50)),
        (rep(0x0c, key_len), b"Test With Truncation".to_vec()),
        (
            rep(0xaa, 80),
            b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(),
        ),
        (
            rep(0xaa, 80),
            b"Test Using Larger Than Block-Size Key and Larger Than One Block-Size Data".to_vec(),
        ),
    ]
}

#[test]
fn hmac_md5_rfc2202() {
    // RFC 2202, section 2, test cases 1-7.
    let digests = [
        "9294727a3638bb1c13f48ef8158bfc9d",
        "750c783e6ab0b503eaa86e310a5db738",
        "56be34521d144c88dbb8c733f0e8b3f6",
        "697eaf0aca3a3aea3a75164746ffaa79",
        "56461ef2342edc00f9bab995690efd4c",
        "6b1ab7fe4bd7bf8f0b62e6ce61b9d0cd",
        "6f630fad67cda0ee1fb1f562db3aa53e",
    ];
    for ((key, data), d) in rfc2202_inputs(16).iter().zip(digests) {
        check_mac(HashAlg::Md5, key, data, &hx(d));
    }
    // Test case 5, digest-96 (HMAC-MD5-96).
    check_mac(
        HashAlg::Md5,
        &rep(0x0c, 16),
        b"Test With Truncation",
        &hx("56461ef2342edc00f9bab995"),
    );
}

#[test]
fn hmac_sha1_rfc2202() {
    // RFC 2202, section 3, test cases 1-7.
    let digests = [
        "b617318655057264e28bc0b6fb378c8ef146be00",
        "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79",
        "125d7342b9ac11cd91a39af48aa17b4f63f175d3",
        "4c9007f4026250c6bc8414f9bf50c86c2d7235da",
        "4c1a03424b55e07fe7f27be1d58bb9324a9a5a04",
        "aa4ae5e15272d00e95705637ce8a3b55ed402112",
        "e8e99d0f45237d786d6bbaa7965c7808bbff1a91",
    ];
    for ((key, data), d) in rfc2202_inputs(20).iter().zip(digests) {
        check_mac(HashAlg::Sha1, key, data, &hx(d));
    }
    // Test case 5, digest-96 (HMAC-SHA1-96, RFC 2404).
    check_mac(
        HashAlg::Sha1,
        &rep(0x0c, 20),
        b"Test With Truncation",
        &hx("4c1a03424b55e07fe7f27be1"),
    );
}

/// RFC 4231 section 4 (= RFC 4868 section 2.7.1 for cases 1-4, 6, 7): (key, data) of test cases 1-7.
fn rfc4231_inputs() -> Vec<(Vec<u8>, Vec<u8>)> {
    vec![
        (rep(0x0b, 20), b"Hi There".to_vec()),
        (b"Jefe".to_vec(), b"what do ya want for nothing?".to_vec()),
        (rep(0xaa, 20), rep(0xdd, 50)),
        ((1..=25).collect(), rep(0xcd, 50)),
        (rep(0x0c, 20), b"Test With Truncation".to_vec()),
        (rep(0xaa, 131), b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec()),
        (
            rep(0xaa, 131),
            b"This is a test using a larger than block-size key and a larger than block-size data. The key \
              needs to be hashed before being used by the HMAC algorithm."
                .to_vec(),
        ),
    ]
}

#[test]
fn hmac_sha2_rfc4231() {
    // RFC 4231 section 4.2-4.8, test cases 1-7 (SHA-224 skipped). Case 5 is truncated to 128 bits in the RFC.
    let sha256 = [
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
        "a3b6167473100ee06e0c796c2955552b",
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
    ];
    let sha384 = [
        "afd03944d84895626b0825f4ab46907f15f9dadbe4101ec682aa034c7cebc59cfaea9ea9076ede7f4af152e8b2fa9cb6",
        "af45d2e376484031617f78d2b58a6b1b9c7ef464f5a01b47e42ec3736322445e8e2240ca5e69e2c78b3239ecfab21649",
        "88062608d3e6ad8a0aa2ace014c8a86f0aa635d947ac9febe83ef4e55966144b2a5ab39dc13814b94e3ab6e101a34f27",
        "3e8a69b7783c25851933ab6290af6ca77a9981480850009cc5577c6e1f573b4e6801dd23c4a7d679ccf8a386c674cffb",
        "3abf34c3503b2a23a46efc619baef897",
        "4ece084485813e9088d2c63a041bc5b44f9ef1012a2b588f3cd11f05033ac4c60c2ef6ab4030fe8296248df163f44952",
        "6617178e941f020d351e2f254e8fd32c602420feb0b8fb9adccebb82461e99c5a678cc31e799176d3860e6110c46523e",
    ];
    let sha512 = [
        "87aa7cdea5ef619d4ff0b4241a1d6cb02379f4e2ce4ec2787ad0b30545e17cde\
         daa833b7d6b8a702038b274eaea3f4e4be9d914eeb61f1702e696c203a126854",
        "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea250554\
         9758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737",
        "fa73b0089d56a284efb0f0756c890be9b1b5dbdd8ee81a3655f83e33b2279d39\
         bf3e848279a722c806b485a47e67c807b946a337bee8942674278859e13292fb",
        "b0ba465637458c6990e5a8c5f61d4af7e576d97ff94b872de76f8050361ee3db\
         a91ca5c11aa25eb4d679275cc5788063a5f19741120c4f2de2adebeb10a298dd",
        "415fad6271580a531d4179bc891d87a6",
        "80b24263c7c1a3ebb71493c1dd7be8b49b46d1f41b4aeec1121b013783f8f352\
         6b56d037e05f2598bd0fd2215d6a1e5295e64f73f63f0aec8b915a985d786598",
        "e37b6a775dc87dbaa4dfa9f96e5e3ffddebd71f8867289865df5a32d20cdc944\
         b6022cac3c4982b10d5eeb55c3e4de15134676fb6de0446065c97440fa8c6a58",
    ];
    let inputs = rfc4231_inputs();
    for (hash, digests) in [
        (HashAlg::Sha256, sha256),
        (HashAlg::Sha384, sha384),
        (HashAlg::Sha512, sha512),
    ] {
        for ((key, data), d) in inputs.iter().zip(digests) {
            check_mac(hash, key, data, &hx(d));
        }
    }
}

#[test]
fn hmac_sha2_rfc4868_authenticator() {
    // RFC 4868 section 2.7.2: authenticator test vectors with keys of the full output length. Each vector gives
    // the untruncated PRF output and the truncated ICV (HMAC-SHA-256-128, -384-192, -512-256).
    let jefe = |n: usize| b"Jefe".repeat(n / 4);
    let what = b"what do ya want for nothing?".to_vec();
    let cases: Vec<(HashAlg, Vec<u8>, Vec<u8>, &str)> = vec![
        // 2.7.2.1 SHA-256, test cases AUTH256-1..4
        (
            HashAlg::Sha256,
            rep(0x0b, 32),
            b"Hi There".to_vec(),
            "198a607eb44bfbc69903a0f1cf2bbdc5ba0aa3f3d9ae3c1c7a3b1696a0b68cf7",
        ),
        (HashAlg::Sha256, jefe(32), what.clone(), "167f928588c5cc2eef8e3093caa0e87c9ff566a14794aa61648d81621a2a40c6"),
        (
            HashAlg::Sha256,
            rep(0xaa, 32),
            rep(0xdd, 50),
            "cdcb1220d1ecccea91e53aba3092f962e549fe6ce9ed7fdc43191fbde45c30b0",
        ),
        (
            HashAlg::Sha256,
            (1..=32).collect(),
            rep(0xcd, 50),
            "372efcf9b40b35c2115b1346903d2ef42fced46f0846e7257bb156d3d7b30d3f",
        ),
        // 2.7.2.2 SHA-384, test cases AUTH384-1..4
        (
            HashAlg::Sha384,
            rep(0x0b, 48),
            b"Hi There".to_vec(),
            "b6a8d5636f5c6a7224f9977dcf7ee6c7fb6d0c48cbdee9737a959796489bddbc4c5df61d5b3297b4fb68dab9f1b582c2",
        ),
        (
            HashAlg::Sha384,
            jefe(48),
            what.clone(),
            "2c7353974f1842fd66d53c452ca42122b28c0b594cfb184da86a368e9b8e16f5349524ca4e82400cbde0686d403371c9",
        ),
        (
            HashAlg::Sha384,
            rep(0xaa, 48),
            rep(0xdd, 50),
            "809f439be00274321d4a538652164b53554a508184a0c3160353e3428597003d35914a18770f9443987054944b7c4b4a",
        ),
        (
            HashAlg::Sha384,
            // The RFC's 48-byte key: 0x01..0x20 followed by 0x0a..0x19.
            (1..=32).chain(0x0a..=0x19).collect(),
            rep(0xcd, 50),
            "5b540085c6e6358096532b2493609ed1cb298f774f87bb5c2ebf182c83cc7428707fb92eab2536a5812258228bc96687",
        ),
        // 2.7.2.3 SHA-512, test cases AUTH512-1..4
        (
            HashAlg::Sha512,
            rep(0x0b, 64),
            b"Hi There".to_vec(),
            "637edc6e01dce7e6742a99451aae82df23da3e92439e590e43e761b33e910fb8\
             ac2878ebd5803f6f0b61dbce5e251ff8789a4722c1be65aea45fd464e89f8f5b",
        ),
        (
            HashAlg::Sha512,
            jefe(64),
            what,
            "cb370917ae8a7ce28cfd1d8f4705d6141c173b2a9362c15df235dfb251b15454\
             6aa334ae9fb9afc2184932d8695e397bfa0ffb93466cfcceaae38c833b7dba38",
        ),
        (
            HashAlg::Sha512,
            rep(0xaa, 64),
            rep(0xdd, 50),
            "2ee7acd783624ca9398710f3ee05ae41b9f9b0510c87e49e586cc9bf961733d8\
             623c7b55cebefccf02d5581acc1c9d5fb1ff68a1de45509fbe4da9a433922655",
        ),
        (
            HashAlg::Sha512,
            // Key 0x01..0x40 as corrected by the RFC 4868 errata (the printed key is inconsistent with the output).
            (1..=64).collect(),
            rep(0xcd, 50),
            "5e6688e5a3daec826ca32eaea224eff5e700628947470e13ad01302561bab108\
             b8c48cbc6b807dcfbd850521a685babc7eae4a2a2e660dc0e86b931d65503fd2",
        ),
    ];
    for (hash, key, data, prf) in cases {
        let prf = hx(prf);
        // PRF (untruncated) output.
        check_mac(hash, &key, &data, &prf);
        // Authenticator: truncated to half the output length.
        check_mac(hash, &key, &data, &prf[..hash.output_len() / 2]);
    }
}

#[test]
fn hmac_verify_rejects_tampering_and_bad_lengths() {
    for hash in [
        HashAlg::Md5,
        HashAlg::Sha1,
        HashAlg::Sha256,
        HashAlg::Sha384,
        HashAlg::Sha512,
    ] {
        let tag_len = hash.output_len() / 2;
        let mac = new_mac(hash, b"key", tag_len).unwrap();
        let mut tag = vec![0u8; tag_len];
        mac.compute(&[b"header", b"payload"], &mut tag);
        assert_eq!(mac.verify(&[b"header", b"payload"], &tag), Ok(()));
        assert_eq!(mac.verify(&[b"header", b"paylo4d"], &tag), Err(AuthError));
        let mut bad = tag.clone();
        bad[tag_len - 1] ^= 1;
        assert_eq!(mac.verify(&[b"header", b"payload"], &bad), Err(AuthError));
        assert_eq!(
            mac.verify(&[b"header", b"payload"], &tag[..tag_len - 1]),
            Err(AuthError)
        );
        assert_eq!(mac.verify(&[b"header", b"payload"], &[]), Err(AuthError));

        for bad_len in [0, hash.output_len() + 1] {
            match new_mac(hash, b"key", bad_len) {
                Err(KeyError::Unusable(msg)) => assert!(msg.contains("HMAC"), "{msg}"),
                other => panic!("{hash:?} tag_len {bad_len}: {:?}", other.map(|_| ())),
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------------------
// CBC
// ------------------------------------------------------------------------------------------------------------

fn check_cbc(alg: CbcAlg, key: &str, iv: &str, pt: &[u8], ct: &str) {
    let c = new_cbc(alg, &hx(key)).unwrap();
    assert_eq!(c.block_len(), alg.block_len());
    let (iv, ct) = (hx(iv), hx(ct));
    let mut buf = pt.to_vec();
    c.encrypt(&iv, &mut buf);
    assert_eq!(hex::encode(&buf), hex::encode(&ct), "{alg:?} encrypt");
    c.decrypt(&iv, &mut buf);
    assert_eq!(buf, pt, "{alg:?} decrypt");
}

#[test]
fn aes_cbc_rfc3602_cases_1_to_4() {
    // RFC 3602 section 4, case #1: 16 bytes (1 block).
    check_cbc(
        CbcAlg::Aes128,
        "06a9214036b8a15b512e03d534120006",
        "3dafba429d9eb430b422da802c9fac41",
        b"Single block msg",
        "e353779c1079aeb82708942dbe77181a",
    );
    // Case #2: 32 bytes.
    check_cbc(
        CbcAlg::Aes128,
        "c286696d887c9aa0611bbb3e2025a45a",
        "562e17996d093d28ddb3ba695a2e6f58",
        &(0u8..32).collect::<Vec<_>>(),
        "d296cd94c2cccf8a3a863028b5e1dc0a 7586602d253cfff91b8266bea6d61ab1",
    );
    // Case #3: 48 bytes.
    check_cbc(
        CbcAlg::Aes128,
        "6c3ea0477630ce21a2ce334aa746c2cd",
        "c782dc4c098c66cbd9cd27d825682c81",
        b"This is a 48-byte message (exactly 3 AES blocks)",
        "d0a02b3836451753d493665d33f0e886 2dea54cdb293abc7506939276772f8d5 021c19216bad525c8579695d83ba2684",
    );
    // Case #4: 64 bytes.
    check_cbc(
        CbcAlg::Aes128,
        "56e47a38c5598974bc46903dba290349",
        "8ce82eefbea0da3c44699ed7db51b7d9",
        &(0xa0u8..0xe0).collect::<Vec<_>>(),
        "c30e32ffedc0774e6aff6af0869f71aa 0f3af07a9a31a9c684db207eb0ef8e4e \
         35907aa632c3ffdf868bb7b29d3d46ad 83ce9f9a102ee99d49a53e87f4c3da55",
    );
}

#[test]
fn aes_cbc_rfc3602_case_5_esp_payload() {
    // RFC 3602 section 4, case #5 (transport-mode ESP, ping 192.168.123.100): the CBC layer only. Plaintext is
    // the ICMP data plus ESP padding 01..0e, pad length 0x0e and next header 0x01 (80 bytes).
    let pt = hx(
        "08000ebd a70a0000 8e9c083d b95b0700 08090a0b 0c0d0e0f 10111213 14151617
                 18191a1b 1c1d1e1f 20212223 24252627 28292a2b 2c2d2e2f 30313233 34353637
                 01020304 05060708 090a0b0c 0d0e0e01",
    );
    check_cbc(
        CbcAlg::Aes128,
        "90d382b4 10eeba7a d938c46c ec1a82bf",
        "e96e8c08 ab465763 fd098d45 dd3ff893",
        &pt,
        "f663c25d 325c18c6 a9453e19 4e120849 a4870b66 cc6b9965 330013b4 898dc856
         a4699e52 3a55db08 0b59ec3a 8e4b7e52 775b07d1 db34ed9c 538ab50c 551b874a
         a269add0 47ad2d59 13ac19b7 cfbad4a6",
    );
}

#[test]
fn aes_192_256_cbc_sp800_38a() {
    // NIST SP 800-38A appendix F.2.3 (CBC-AES192.Encrypt) and F.2.5 (CBC-AES256.Encrypt), first two blocks.
    let pt = hx("6bc1bee22e409f96e93d7e117393172a ae2d8a571e03ac9c9eb76fac45af8e51");
    check_cbc(
        CbcAlg::Aes192,
        "8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b",
        "000102030405060708090a0b0c0d0e0f",
        &pt,
        "4f021db243bc633d7178183a9fa071e8 b4d9ada9ad7dedf4e5e738763f69145a",
    );
    check_cbc(
        CbcAlg::Aes256,
        "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4",
        "000102030405060708090a0b0c0d0e0f",
        &pt,
        "f58c4c04d6e5f1ba779eabfb5f7bfbd6 9cfc4e967edb808d679f777bc6702c7d",
    );
}

#[test]
fn tdes_cbc_vectors() {
    // OpenSSL crypto/des/destest.c: cbc3_key = cbc_key || cbc2_key || cbc3_key, cbc_iv, cbc_data
    // ("7654321 Now is the time for \0" zero-padded to 32 bytes) -> cbc3_ok. Verified here with
    // `openssl enc -des-ede3-cbc -nopad -K 0123456789abcdeff1e0d3c2b5a49786fedcba9876543210 -iv fedcba9876543210`.
    let mut data = b"7654321 Now is the time for ".to_vec();
    data.resize(32, 0);
    check_cbc(
        CbcAlg::TripleDes,
        "0123456789abcdef f1e0d3c2b5a49786 fedcba9876543210",
        "fedcba9876543210",
        &data,
        "3fe301c962ac01d0 2213763c1cbd4cdc 799657c064ecf5d4 1c673812cfde9675",
    );

    // NIST SP 800-67 Rev. 1, appendix B (TDEA example, ECB), plaintext "The qufck brown fox jump" (sic, as
    // printed). With a zero IV, CBC over one block is ECB, so each block is checked separately.
    // Verified with `openssl enc -des-ede3 -nopad -K 0123456789ABCDEF23456789ABCDEF01456789ABCDEF0123`.
    let key = "0123456789ABCDEF 23456789ABCDEF01 456789ABCDEF0123";
    let pt = b"The qufck brown fox jump";
    let ct = ["A826FD8CE53B855F", "CCE21C8112256FE6", "68D5C05DD9B6B900"];
    for (block, ct) in pt.chunks(8).zip(ct) {
        check_cbc(CbcAlg::TripleDes, key, "0000000000000000", block, ct);
    }
}

#[test]
fn cbc_in_place_over_subslices_and_empty() {
    let c = new_cbc(CbcAlg::Aes256, &[7u8; 32]).unwrap();
    let mut empty: [u8; 0] = [];
    c.encrypt(&[0u8; 16], &mut empty);
    c.decrypt(&[0u8; 16], &mut empty);
    let orig: Vec<u8> = (0..=255).collect();
    let mut buf = orig.clone();
    c.encrypt(&[1u8; 16], &mut buf);
    assert_ne!(buf, orig);
    c.decrypt(&[1u8; 16], &mut buf);
    assert_eq!(buf, orig);
}

#[test]
fn cbc_wrong_key_lengths() {
    for (alg, name) in [
        (CbcAlg::Aes128, "AES-128-CBC"),
        (CbcAlg::Aes192, "AES-192-CBC"),
        (CbcAlg::Aes256, "AES-256-CBC"),
        (CbcAlg::TripleDes, "3DES"),
    ] {
        for len in [0, alg.key_len() - 1, alg.key_len() + 1] {
            let err = new_cbc(alg, &vec![1u8; len])
                .err()
                .expect("wrong key length accepted");
            assert_eq!(
                err,
                KeyError::BadLength {
                    alg: alg.name(),
                    expected: alg.key_len(),
                    got: len
                }
            );
            assert!(err.to_string().contains(name), "{err}");
        }
    }
}

#[test]
fn iv_generator() {
    let g = IvGen::new(&mut OsRng);
    let mut a = [0u8; 16];
    let mut b = [0u8; 16];
    g.fill(1, &mut a);
    g.fill(2, &mut b);
    assert_ne!(a, b);
    let mut a2 = [0u8; 16];
    g.fill(1, &mut a2);
    assert_eq!(a, a2, "deterministic per counter");
    let mut short = [0u8; 8];
    g.fill(1, &mut short);
    assert_eq!(short, a[..8], "8-byte IVs are the truncated block");
    // A fresh generator has a fresh random key.
    let mut c = [0u8; 16];
    IvGen::new(&mut OsRng).fill(1, &mut c);
    assert_ne!(a, c);
}

// ------------------------------------------------------------------------------------------------------------
// AEAD
// ------------------------------------------------------------------------------------------------------------

struct GcmCase {
    name: &'static str,
    key: &'static str,
    iv: &'static str,
    pt: &'static str,
    aad: &'static str,
    ct: &'static str,
    tag: &'static str,
}

const P3: &str = "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72
                  1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255";
const P4: &str = "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72
                  1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39";
const A4: &str = "feedfacedeadbeeffeedfacedeadbeefabaddad2";

/// McGrew & Viega, "The Galois/Counter Mode of Operation (GCM)", appendix B test cases (12-byte IVs only).
const GCM_CASES: &[GcmCase] = &[
    GcmCase {
        name: "MV test case 1",
        key: "00000000000000000000000000000000",
        iv: "000000000000000000000000",
        pt: "",
        aad: "",
        ct: "",
        tag: "58e2fccefa7e3061367f1d57a4e7455a",
    },
    GcmCase {
        name: "MV test case 2",
        key: "00000000000000000000000000000000",
        iv: "000000000000000000000000",
        pt: "00000000000000000000000000000000",
        aad: "",
        ct: "0388dace60b6a392f328c2b971b2fe78",
        tag: "ab6e47d42cec13bdf53a67b21257bddf",
    },
    GcmCase {
        name: "MV test case 3",
        key: "feffe9928665731c6d6a8f9467308308",
        iv: "cafebabefacedbaddecaf888",
        pt: P3,
        aad: "",
        ct: "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e
             21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985",
        tag: "4d5c2af327cd64a62cf35abd2ba6fab4",
    },
    GcmCase {
        name: "MV test case 4",
        key: "feffe9928665731c6d6a8f9467308308",
        iv: "cafebabefacedbaddecaf888",
        pt: P4,
        aad: A4,
        ct: "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e
             21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091",
        tag: "5bc94fbc3221a5db94fae95ae7121a47",
    },
    GcmCase {
        name: "MV test case 13",
        key: "0000000000000000000000000000000000000000000000000000000000000000",
        iv: "000000000000000000000000",
        pt: "",
        aad: "",
        ct: "",
        tag: "530f8afbc74536b9a963b4f1c4cb738b",
    },
    GcmCase {
        name: "MV test case 14",
        key: "0000000000000000000000000000000000000000000000000000000000000000",
        iv: "000000000000000000000000",
        pt: "00000000000000000000000000000000",
        aad: "",
        ct: "cea7403d4d606b6e074ec5d3baf39d18",
        tag: "d0d1c8a799996bf0265b98b5d48ab919",
    },
    GcmCase {
        name: "MV test case 15",
        key: "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
        iv: "cafebabefacedbaddecaf888",
        pt: P3,
        aad: "",
        ct: "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa
             8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad",
        tag: "b094dac5d93471bdec1a502270e3cc6c",
    },
    GcmCase {
        name: "MV test case 16",
        key: "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
        iv: "cafebabefacedbaddecaf888",
        pt: P4,
        aad: A4,
        ct: "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa
             8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662",
        tag: "76fc6ece0f4e1768cddf8853bb2d551b",
    },
];

fn gcm_alg(key_len: usize, tag_len: usize) -> AeadAlg {
    match key_len {
        16 => AeadAlg::AesGcm128 { tag_len },
        32 => AeadAlg::AesGcm256 { tag_len },
        _ => unreachable!(),
    }
}

/// Seals `pt` and checks ciphertext and tag, then opens it back.
#[allow(clippy::too_many_arguments)]
fn check_aead(
    alg: AeadAlg,
    key: &[u8],
    nonce: &[u8],
    aad: &[u8],
    pt: &[u8],
    ct: &[u8],
    tag: &[u8],
    what: &str,
) {
    let aead = new_aead(alg, key).unwrap();
    assert_eq!(aead.tag_len(), tag.len(), "{what}");
    let nonce: [u8; 12] = nonce.try_into().unwrap();
    let mut buf = pt.to_vec();
    let mut t = vec![0u8; aead.tag_len()];
    aead.seal(&nonce, aad, &mut buf, &mut t);
    assert_eq!(hex::encode(&buf), hex::encode(ct), "{what}: ciphertext");
    assert_eq!(hex::encode(&t), hex::encode(tag), "{what}: tag");
    aead.open(&nonce, aad, &mut buf, &t)
        .unwrap_or_else(|_| panic!("{what}: open failed"));
    assert_eq!(buf, pt, "{what}: decrypted");
}

#[test]
fn aes_gcm_mcgrew_viega() {
    for c in GCM_CASES {
        let key = hx(c.key);
        let tag = hx(c.tag);
        // Full 16-byte tag (aws-lc-rs), and the RFC 4106 truncated ICVs (12 and 8 bytes, RustCrypto): the
        // truncated tag is the prefix of the full one (NIST SP 800-38D section 5.2.1.2).
        for tag_len in [16, 12, 8] {
            let what = format!("{} tag_len {tag_len}", c.name);
            let alg = gcm_alg(key.len(), tag_len);
            check_aead(
                alg,
                &key,
                &hx(c.iv),
                &hx(c.aad),
                &hx(c.pt),
                &hx(c.ct),
                &tag[..tag_len],
                &what,
            );
        }
    }
}

#[test]
fn aes_gmac_is_gcm_with_empty_plaintext() {
    // RFC 4543 (AES-GMAC): everything is authenticated as AAD and the plaintext is empty. McGrew-Viega test
    // cases 1 and 13 have an empty plaintext and empty AAD, giving the GMAC of the empty string.
    for (alg, key, tag) in [
        (
            AeadAlg::AesGcm128 { tag_len: 16 },
            vec![0u8; 16],
            "58e2fccefa7e3061367f1d57a4e7455a",
        ),
        (
            AeadAlg::AesGcm256 { tag_len: 16 },
            vec![0u8; 32],
            "530f8afbc74536b9a963b4f1c4cb738b",
        ),
    ] {
        let aead = new_aead(alg, &key).unwrap();
        let mut t = [0u8; 16];
        aead.seal(&[0u8; 12], &[], &mut [], &mut t);
        assert_eq!(hex::encode(t), tag);
        assert_eq!(aead.open(&[0u8; 12], &[], &mut [], &t), Ok(()));
    }
    // GMAC over data: sealing (aad = A || P, empty plaintext) authenticates exactly what GCM authenticates
    // when P is passed as AAD: the tag covers both, the tag changes if any byte of it changes, and the full-tag
    // and truncated-tag implementations agree (prefix).
    let key = hx("feffe9928665731c6d6a8f9467308308");
    let nonce: [u8; 12] = hx("cafebabefacedbaddecaf888").try_into().unwrap();
    let data = hx(P3);
    let full = new_aead(AeadAlg::AesGcm128 { tag_len: 16 }, &key).unwrap();
    let mut t16 = [0u8; 16];
    full.seal(&nonce, &data, &mut [], &mut t16);
    for tag_len in [12, 8] {
        let trunc = new_aead(AeadAlg::AesGcm128 { tag_len }, &key).unwrap();
        let mut t = vec![0u8; tag_len];
        trunc.seal(&nonce, &data, &mut [], &mut t);
        assert_eq!(t, t16[..tag_len]);
        assert_eq!(trunc.open(&nonce, &data, &mut [], &t), Ok(()));
        let mut bad = data.clone();
        bad[10] ^= 0x80;
        assert_eq!(trunc.open(&nonce, &bad, &mut [], &t), Err(AuthError));
    }
    assert_eq!(full.open(&nonce, &data, &mut [], &t16), Ok(()));
}

#[test]
fn chacha20_poly1305_rfc8439() {
    // RFC 8439 section 2.8.2, "Example and Test Vector for AEAD_CHACHA20_POLY1305".
    let pt = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, \
               sunscreen would be it.";
    let key: Vec<u8> = (0x80..=0x9f).collect();
    let ct = hx(
        "d31a8d34648e60db7b86afbc53ef7ec2 a4aded51296e08fea9e2b5a736ee62d6
                 3dbea45e8ca9671282fafb69da92728b 1a71de0a9e060b2905d6a5b67ecd3b36
                 92ddbd7f2d778b8c9803aee328091b58 fab324e4fad675945585808b4831d7bc
                 3ff4def08e4b7a9de576d26586cec64b 6116",
    );
    check_aead(
        AeadAlg::ChaCha20Poly1305,
        &key,
        &hx("07000000 40414243 44454647"),
        &hx("50515253c0c1c2c3c4c5c6c7"),
        pt,
        &ct,
        &hx("1ae10b594f09e26a7e902ecbd0600691"),
        "RFC 8439 2.8.2",
    );
}

fn all_aead_algs() -> Vec<AeadAlg> {
    vec![
        AeadAlg::AesGcm128 { tag_len: 16 },
        AeadAlg::AesGcm128 { tag_len: 12 },
        AeadAlg::AesGcm128 { tag_len: 8 },
        AeadAlg::AesGcm192 { tag_len: 16 },
        AeadAlg::AesGcm192 { tag_len: 12 },
        AeadAlg::AesGcm192 { tag_len: 8 },
        AeadAlg::AesGcm256 { tag_len: 16 },
        AeadAlg::AesGcm256 { tag_len: 12 },
        AeadAlg::AesGcm256 { tag_len: 8 },
        AeadAlg::ChaCha20Poly1305,
    ]
}

#[test]
fn aead_rejects_tampering_without_leaking_plaintext() {
    let nonce = [9u8; 12];
    let aad = b"spi+seq".to_vec();
    let pt: Vec<u8> = (0..100).collect();
    for alg in all_aead_algs() {
        let aead = new_aead(alg, &vec![0x42; alg.key_len()]).unwrap();
        assert_eq!(aead.tag_len(), alg.tag_len());
        let mut ct = pt.clone();
        let mut tag = vec![0u8; aead.tag_len()];
        aead.seal(&nonce, &aad, &mut ct, &mut tag);
        assert_ne!(ct, pt);

        let try_open = |nonce: &[u8; 12], aad: &[u8], ct_in: &[u8], tag: &[u8]| {
            let mut buf = ct_in.to_vec();
            let r = aead.open(nonce, aad, &mut buf, tag);
            if r.is_err() {
                // No plaintext left behind: the buffer is the ciphertext or zeros.
                assert!(
                    buf == ct_in || buf.iter().all(|&b| b == 0),
                    "{alg:?}: plaintext leaked"
                );
                assert_ne!(buf, pt);
            }
            r.map(|()| buf)
        };
        assert_eq!(try_open(&nonce, &aad, &ct, &tag).unwrap(), pt, "{alg:?}");

        let mut bad_tag = tag.clone();
        *bad_tag.last_mut().unwrap() ^= 1;
        assert_eq!(
            try_open(&nonce, &aad, &ct, &bad_tag),
            Err(AuthError),
            "{alg:?} tag"
        );
        let mut bad_ct = ct.clone();
        bad_ct[50] ^= 0x10;
        assert_eq!(
            try_open(&nonce, &aad, &bad_ct, &tag),
            Err(AuthError),
            "{alg:?} ciphertext"
        );
        assert_eq!(
            try_open(&nonce, b"spi+seQ", &ct, &tag),
            Err(AuthError),
            "{alg:?} aad"
        );
        assert_eq!(
            try_open(&[8u8; 12], &aad, &ct, &tag),
            Err(AuthError),
            "{alg:?} nonce"
        );
        assert_eq!(
            try_open(&nonce, &aad, &ct, &tag[..tag.len() - 1]),
            Err(AuthError),
            "{alg:?} short tag"
        );
        assert_eq!(
            try_open(&nonce, &aad, &ct[..99], &tag),
            Err(AuthError),
            "{alg:?} truncated ct"
        );
    }
}

#[test]
fn aead_wrong_key_lengths_and_tag_lengths() {
    for alg in all_aead_algs() {
        let name = match alg {
            AeadAlg::AesGcm128 { .. } => "AES-GCM-128",
            AeadAlg::AesGcm192 { .. } => "AES-GCM-192",
            AeadAlg::AesGcm256 { .. } => "AES-GCM-256",
            AeadAlg::ChaCha20Poly1305 => "ChaCha20-Poly1305",
        };
        for len in [0, 16, 24, 31, 33] {
            if len == alg.key_len() {
                continue;
            }
            let err = new_aead(alg, &vec![0u8; len])
                .err()
                .expect("wrong key length accepted");
            assert!(
                matches!(err, KeyError::BadLength { got, .. } if got == len),
                "{err:?}"
            );
            assert!(err.to_string().contains(name), "{err}");
        }
    }
    for tag_len in [0, 4, 10, 13, 15, 17, 32] {
        for alg in [
            AeadAlg::AesGcm128 { tag_len },
            AeadAlg::AesGcm256 { tag_len },
        ] {
            match new_aead(alg, &vec![0u8; alg.key_len()]) {
                Err(KeyError::Unusable(msg)) => assert!(msg.contains("AES-GCM"), "{msg}"),
                other => panic!("{alg:?}: {:?}", other.map(|_| ())),
            }
        }
    }
}
