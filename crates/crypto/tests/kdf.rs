//! Key derivation known answers: HKDF-SHA256 (RFC 5869 appendix A), SP 800-108 CMAC-AES-256 counter mode (the PSP
//! specification's examples), IKEv2 prf/prf+ (NIST SP 800-135's IKEv2 KDF vector for HMAC-SHA-1, a strongSwan
//! session for HMAC-SHA-256, Python's `hmac` as an independent oracle for HMAC-SHA-384/512).

use netveil_crypto::kdf::{
    hkdf_sha256, ike_prf, ike_prf_plus, sp800_108_cmac_aes256, IkePrf, OutputTooLong,
};
use serde_json::Value;

fn hx(s: &str) -> Vec<u8> {
    hex::decode(s).expect("bad hex in test vector")
}

fn vector(name: &str) -> Value {
    let path = format!("{}/../../testdata/ikev2/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn field(v: &Value, a: &str, b: &str) -> Vec<u8> {
    hx(v[a][b]
        .as_str()
        .unwrap_or_else(|| panic!("{a}.{b} missing")))
}

#[test]
fn hkdf_sha256_rfc5869() {
    // Test case 1.
    let mut okm = [0u8; 42];
    hkdf_sha256(
        &hx("000102030405060708090a0b0c"),
        &[0x0b; 22],
        &hx("f0f1f2f3f4f5f6f7f8f9"),
        &mut okm,
    );
    assert_eq!(
        hex::encode(okm),
        "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
    );
    // Test case 3: empty salt and info.
    hkdf_sha256(&[], &[0x0b; 22], &[], &mut okm);
    assert_eq!(
        hex::encode(okm),
        "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
    );
}

/// The PSP specification's key derivation examples: label "Pv0"/"Pv1", context the SPI, master key 0 or 1 of the
/// reference configuration (selected by the SPI's top bit).
#[test]
fn sp800_108_psp_examples() {
    let path = format!(
        "{}/../../testdata/psp/cfg/decrypt.cfg",
        env!("CARGO_MANIFEST_DIR")
    );
    let cfg = std::fs::read_to_string(&path).unwrap();
    let bytes: Vec<u8> = cfg
        .split_whitespace()
        .map(|t| u8::from_str_radix(t, 16).unwrap())
        .collect();
    assert_eq!(bytes.len(), 64, "two 32-byte master keys");
    let (k0, k1): ([u8; 32], [u8; 32]) = (
        bytes[..32].try_into().unwrap(),
        bytes[32..].try_into().unwrap(),
    );
    let mut k16 = [0u8; 16];
    sp800_108_cmac_aes256(&k0, b"Pv0", &0x1234_5678u32.to_be_bytes(), &mut k16);
    assert_eq!(hex::encode(k16), "96c22dc799198090b74b70ae468e4e30");
    sp800_108_cmac_aes256(&k1, b"Pv0", &0x9A34_5678u32.to_be_bytes(), &mut k16);
    assert_eq!(hex::encode(k16), "3946da2554eae46ad1ef77a64372edc4");
    let mut k32 = [0u8; 32];
    sp800_108_cmac_aes256(&k0, b"Pv1", &0x1234_5678u32.to_be_bytes(), &mut k32);
    assert_eq!(
        hex::encode(k32),
        "2b7d72074e42ca334487f2990e3f8c4037e436f38283449b76463e9b7fb2e3de"
    );
}

/// NIST SP 800-135's IKEv2 KDF (ACVP, HMAC-SHA-1): SKEYSEED, the IKE SA key material, CHILD_SA KEYMAT with and
/// without PFS, and the rekeyed SKEYSEED.
#[test]
fn ikev2_sp800_135_sha1() {
    let v = vector("sp800-135-ikev2-kdf-sha1.json");
    let input = |k: &str| field(&v, "inputs", k);
    let want = |k: &str| hex::encode(field(&v, "expected", k));
    let (ni, nr, gir, gir_new) = (input("Ni"), input("Nr"), input("g_ir"), input("g_ir_new"));
    let (spii, spir) = (input("SPIi"), input("SPIr"));
    let prf = IkePrf::HmacSha1;

    let nonces = [&ni[..], &nr[..]].concat();
    let mut skeyseed = [0u8; 20];
    ike_prf(prf, &nonces, &[&gir], &mut skeyseed);
    assert_eq!(hex::encode(skeyseed), want("skeyseed"));

    let len = v["dkm_len_bits"].as_u64().unwrap() as usize / 8;
    let mut dkm = vec![0u8; len];
    ike_prf_plus(prf, &skeyseed, &[&ni, &nr, &spii, &spir], &mut dkm).unwrap();
    assert_eq!(hex::encode(&dkm), want("dkm"));

    let sk_d = &dkm[..20];
    let mut child = vec![0u8; len];
    ike_prf_plus(prf, sk_d, &[&ni, &nr], &mut child).unwrap();
    assert_eq!(hex::encode(&child), want("dkm_child"));
    ike_prf_plus(prf, sk_d, &[&gir_new, &ni, &nr], &mut child).unwrap();
    assert_eq!(hex::encode(&child), want("dkm_child_dh"));

    let mut rekeyed = [0u8; 20];
    ike_prf(prf, sk_d, &[&gir_new, &ni, &nr], &mut rekeyed);
    assert_eq!(hex::encode(rekeyed), want("skeyseed_rekey"));
}

/// A strongSwan IKE_SA_INIT with PRF-HMAC-SHA2-256: SKEYSEED and SK_d .. SK_pr as charon computed them.
#[test]
fn ikev2_strongswan_sha256() {
    let v = vector("strongswan-ikev2-kdf-sha256.json");
    let input = |k: &str| field(&v, "inputs", k);
    let want = |k: &str| hex::encode(field(&v, "expected", k));
    let (ni, nr) = (input("Ni"), input("Nr"));
    let prf = IkePrf::HmacSha256;
    let mut skeyseed = [0u8; 32];
    ike_prf(
        prf,
        &[&ni[..], &nr[..]].concat(),
        &[&input("g_ir")],
        &mut skeyseed,
    );
    assert_eq!(hex::encode(skeyseed), want("skeyseed"));
    let mut dkm = [0u8; 7 * 32];
    ike_prf_plus(
        prf,
        &skeyseed,
        &[&ni, &nr, &input("SPIi"), &input("SPIr")],
        &mut dkm,
    )
    .unwrap();
    for (i, name) in ["SK_d", "SK_ai", "SK_ar", "SK_ei", "SK_er", "SK_pi", "SK_pr"]
        .iter()
        .enumerate()
    {
        assert_eq!(hex::encode(&dkm[32 * i..32 * i + 32]), want(name), "{name}");
    }
}

/// HMAC-SHA-384 and -512 have no published prf+ vector: expected values from Python's `hmac` module, written
/// from RFC 7296's definition (an implementation independent of this one), 200 bytes (not a whole number of
/// blocks) with the seed given in two parts.
#[test]
fn ikev2_prf_plus_sha384_sha512() {
    let key: Vec<u8> = (1..=20).collect();
    let cases = [
        (IkePrf::HmacSha384, "cbfa4b344deb200bdef02ff1cb32913ee1669aca27e94a975294167d74c89fae3fe6527b1bdaacdbe6dcd588ca740c99f9cef691ca933c7d2e16e6bbace4f039276f784bce780e064f16f9a4e7d1e21f81baa3a224798cf86cdd892986405b9b17328d49f25c7ae15391f9da01df4ed458e0d7b623a724e82f9a26844dd786ea035f56cf36df4fa87728ecc1e56d7783e3093dae168c42fd9fb78c6e787da29caa70b4599c2797edc741b0e15cf3be41448d4a1eb51c5c6bc3198934c3d3a3a34e16f79b44e53adf"),
        (IkePrf::HmacSha512, "a9674847dd30b125a656a252d8c0cf0b56bef7c1fbc46410302c09be9c355e0d83a4316bb3d5e6c72795ae0063b0dfe74edcf7b26514b6670bf24a79e1c0d8ce351a2d452000da9f903d22deb363133838f59194430abc022bf11b0925dd199dc14bae5900a3ad1cd288a98c30f7468c331e5a10bd1ddc4fb1683964e8c4251f86f2c103013ed48b8507296574e4aa76d36af579ef55214deaa00be52e530e48844e4e1c55b5f5dd7588d1454f5367b8557edc789aa71e248a01fbcd4602ad945f1d375f2adbe8b7"),
    ];
    for (prf, want) in cases {
        let mut out = [0u8; 200];
        ike_prf_plus(prf, &key, &[b"netveil prf+", b" seed"], &mut out).unwrap();
        assert_eq!(hex::encode(out), want, "{prf:?}");
    }
}

#[test]
fn ikev2_prf_plus_length_limit() {
    for prf in [
        IkePrf::HmacSha1,
        IkePrf::HmacSha256,
        IkePrf::HmacSha384,
        IkePrf::HmacSha512,
    ] {
        let max = 255 * prf.output_len();
        let mut out = vec![0u8; max + 1];
        assert_eq!(
            ike_prf_plus(prf, b"k", &[b"s"], &mut out),
            Err(OutputTooLong {
                kdf: "IKEv2 prf+",
                max,
                asked: max + 1
            })
        );
        // Exactly 255 blocks is allowed, and a prefix of a longer output is the shorter output.
        assert!(ike_prf_plus(prf, b"k", &[b"s"], &mut out[..max]).is_ok());
        let mut short = [0u8; 50];
        ike_prf_plus(prf, b"k", &[b"s"], &mut short).unwrap();
        assert_eq!(short[..], out[..50]);
    }
}
