//! The key derivation examples of the PSP specification, with the master keys of the reference configurations.

use netveil_psp::refcfg::parse_master_keys;
use netveil_psp::Version;

mod common;

#[test]
fn spec_kdf_examples() {
    let mk = parse_master_keys(&common::read_text("cfg/decrypt.cfg")).unwrap();
    let cases = [
        (
            Version::AesGcm128,
            0x1234_5678,
            "96c22dc799198090b74b70ae468e4e30",
        ),
        (
            Version::AesGcm128,
            0x9A34_5678,
            "3946da2554eae46ad1ef77a64372edc4",
        ),
        (
            Version::AesGcm256,
            0x1234_5678,
            "2b7d72074e42ca334487f2990e3f8c4037e436f38283449b76463e9b7fb2e3de",
        ),
    ];
    for (v, spi, want) in cases {
        assert_eq!(hex::encode(&*mk.derive(spi, v)), want, "{v:?} {spi:#x}");
    }
    // Every encryption configuration carries the same master keys.
    for cfg in common::encrypt_cfgs() {
        let (k, _) =
            netveil_psp::refcfg::parse_encrypt(&common::read_text(&format!("cfg/{cfg}"))).unwrap();
        assert_eq!(
            *k.derive(0x1234_5678, Version::AesGcm128),
            *mk.derive(0x1234_5678, Version::AesGcm128)
        );
    }
}

#[test]
fn config_errors_are_reported() {
    use netveil_psp::refcfg::{parse_encrypt, parse_master_keys};
    assert!(parse_master_keys("").is_err());
    assert!(parse_master_keys("00 11\n")
        .unwrap_err()
        .contains("2 bytes"));
    let good = common::read_text("cfg/encrypt_tunnel_crypt_off_128.cfg");
    assert!(parse_encrypt(&good).is_ok());
    assert!(parse_encrypt(&good.replace("tunnel", "tunel")).is_err());
    assert!(parse_encrypt(&good.replace("aes-gcm-128", "aes-cbc")).is_err());
    assert!(parse_encrypt(&good.replace("no-vc", "maybe")).is_err());
    assert!(parse_encrypt(&good.replace("\n11\n", "\n64\n")).is_err());
    let dec = common::read_text("cfg/decrypt.cfg");
    assert!(parse_encrypt(&dec).is_err());
}
