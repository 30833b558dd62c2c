//! Keys as strongSwan's `pki --gen` and OpenSSL write them (testdata/sig, test keys only), known answers (RFC 8032,
//! an OpenSSL RSA signature), and OpenSSL as the oracle for what we sign.

use super::*;

fn data(name: &str) -> Vec<u8> {
    let p = format!("{}/testdata/sig/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn key(name: &str) -> PrivateKey {
    PrivateKey::from_pem_or_der(&data(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn loads_the_forms_pki_and_openssl_write() {
    for (f, kind) in [
        ("rsa_pki.pem", KeyKind::Rsa),
        ("rsa_pkcs8.pem", KeyKind::Rsa),
        ("rsa_pkcs8.der", KeyKind::Rsa),
        ("ecdsa256_pki.der", KeyKind::EcdsaP256),
        ("ecdsa384_pki.pem", KeyKind::EcdsaP384),
        ("ec256_pkcs8.pem", KeyKind::EcdsaP256),
        ("ec384_sec1_params.pem", KeyKind::EcdsaP384),
        ("ed25519_pki.pem", KeyKind::Ed25519),
    ] {
        assert_eq!(key(f).kind(), kind, "{f}");
    }
    assert_eq!(
        PrivateKey::from_pem_or_der(&data("rsa_encrypted.pem")).unwrap_err(),
        SigError::Encrypted
    );
    assert_eq!(
        PrivateKey::from_pem_or_der(&data("ec521.pem")).unwrap_err(),
        SigError::UnsupportedKey
    );
    for junk in [
        &b""[..],
        b"\x30\x03\x02\x01",
        b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    ] {
        assert!(PrivateKey::from_pem_or_der(junk).is_err());
    }
}

#[test]
fn debug_prints_no_key_bytes() {
    let k = key("rsa_pki.pem");
    assert_eq!(format!("{k:?}"), "PrivateKey(RSA 2048 bits)");
    assert_eq!(
        format!("{:?}", key("ed25519_pki.pem")),
        "PrivateKey(Ed25519)"
    );
}

#[test]
fn public_key_from_spki_is_the_private_keys() {
    let k = key("rsa_pkcs8.pem");
    assert_eq!(
        PublicKey::from_spki(&data("rsa_pkcs8.spki.der")).unwrap(),
        k.public_key()
    );
    let e = key("ec256_pkcs8.pem");
    let p = PublicKey::from_spki(&data("ec256.spki.der")).unwrap();
    assert_eq!(p, e.public_key());
    assert_eq!(p.kind(), KeyKind::EcdsaP256);
    assert!(PublicKey::from_spki(b"\x30\x00").is_err());
}

/// RSA PKCS#1 v1.5 is deterministic: our signature is OpenSSL's (`openssl dgst -sha256 -sign`).
#[test]
fn rsa_pkcs1_known_answer_from_openssl() {
    let k = key("rsa_pkcs8.pem");
    let sig = k
        .sign(Scheme::RsaPkcs1(SigHash::Sha256), &data("msg.bin"))
        .unwrap();
    assert_eq!(sig, data("rsa_pkcs8_sha256.sig"));
    let p = k.public_key();
    p.verify(Scheme::RsaPkcs1(SigHash::Sha256), &data("msg.bin"), &sig)
        .unwrap();
    assert!(p
        .verify(Scheme::RsaPkcs1(SigHash::Sha384), &data("msg.bin"), &sig)
        .is_err());
}

/// RFC 8032 7.1, TEST 1 (empty message), the seed wrapped in PKCS#8 v1.
#[test]
fn ed25519_rfc8032_test_1() {
    let seed =
        hex::decode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60").unwrap();
    let mut der = hex::decode("302e020100300506032b657004220420").unwrap();
    der.extend_from_slice(&seed);
    let k = PrivateKey::from_pem_or_der(&der).unwrap();
    assert_eq!(
        hex::encode(k.public_key().raw()),
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    );
    let sig = k.sign(Scheme::Ed25519, b"").unwrap();
    assert_eq!(
        hex::encode(&sig),
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    );
    k.public_key().verify(Scheme::Ed25519, b"", &sig).unwrap();
}

#[test]
fn every_scheme_round_trips_and_a_flipped_bit_fails() {
    let msg = b"InitiatorSignedOctets";
    let cases = [
        ("rsa_pki.pem", Scheme::RsaPkcs1(SigHash::Sha256)),
        ("rsa_pki.pem", Scheme::RsaPkcs1(SigHash::Sha384)),
        ("rsa_pki.pem", Scheme::RsaPkcs1(SigHash::Sha512)),
        ("rsa_pki.pem", Scheme::RsaPss(SigHash::Sha256)),
        ("rsa_pki.pem", Scheme::RsaPss(SigHash::Sha384)),
        ("rsa_pki.pem", Scheme::RsaPss(SigHash::Sha512)),
        ("ecdsa256_pki.der", Scheme::Ecdsa(SigHash::Sha256)),
        ("ecdsa256_pki.der", Scheme::EcdsaFixed(SigHash::Sha256)),
        ("ecdsa384_pki.pem", Scheme::Ecdsa(SigHash::Sha384)),
        ("ecdsa384_pki.pem", Scheme::EcdsaFixed(SigHash::Sha384)),
        ("ed25519_pki.pem", Scheme::Ed25519),
    ];
    for (f, scheme) in cases {
        let k = key(f);
        let sig = k.sign(scheme, msg).unwrap();
        let p = k.public_key();
        p.verify(scheme, msg, &sig)
            .unwrap_or_else(|_| panic!("{f} {scheme:?}"));
        let mut bad = sig.clone();
        let n = bad.len() / 2;
        bad[n] ^= 1;
        assert!(p.verify(scheme, msg, &bad).is_err(), "{f} {scheme:?}");
        assert!(
            p.verify(scheme, b"other octets", &sig).is_err(),
            "{f} {scheme:?}"
        );
    }
    // The fixed form is r || s.
    assert_eq!(
        key("ecdsa256_pki.der")
            .sign(Scheme::EcdsaFixed(SigHash::Sha256), msg)
            .unwrap()
            .len(),
        64
    );
    assert_eq!(
        key("ecdsa384_pki.pem")
            .sign(Scheme::EcdsaFixed(SigHash::Sha384), msg)
            .unwrap()
            .len(),
        96
    );
    // Refused combinations: SHA-1 signing, a hash that is not the curve's, a scheme of another key type.
    assert!(key("rsa_pki.pem")
        .sign(Scheme::RsaPkcs1(SigHash::Sha1), msg)
        .is_err());
    assert!(key("ecdsa256_pki.der")
        .sign(Scheme::Ecdsa(SigHash::Sha384), msg)
        .is_err());
    assert!(key("ed25519_pki.pem")
        .sign(Scheme::Ecdsa(SigHash::Sha256), msg)
        .is_err());
}

/// OpenSSL verifies what we sign (`openssl pkeyutl -verify`), and we verify what OpenSSL signs.
#[test]
fn openssl_is_the_oracle() {
    if !netveil_testkit::require_program(&netveil_testkit::this_test(), "openssl") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("netveil-sig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let msg = b"netveil oracle message";
    let mpath = dir.join("msg");
    std::fs::write(&mpath, msg).unwrap();
    let cases: [(&str, Scheme, &[&str]); 5] = [
        (
            "rsa_pki.pem",
            Scheme::RsaPkcs1(SigHash::Sha384),
            &["-digest", "sha384"],
        ),
        (
            "rsa_pki.pem",
            Scheme::RsaPss(SigHash::Sha256),
            &[
                "-digest",
                "sha256",
                "-pkeyopt",
                "rsa_padding_mode:pss",
                "-pkeyopt",
                "rsa_pss_saltlen:32",
            ],
        ),
        (
            "ecdsa256_pki.der",
            Scheme::Ecdsa(SigHash::Sha256),
            &["-digest", "sha256"],
        ),
        (
            "ecdsa384_pki.pem",
            Scheme::Ecdsa(SigHash::Sha384),
            &["-digest", "sha384"],
        ),
        ("ed25519_pki.pem", Scheme::Ed25519, &[]),
    ];
    for (f, scheme, opts) in cases {
        let k = key(f);
        let sig = k.sign(scheme, msg).unwrap();
        let (sp, kp) = (dir.join("sig"), dir.join("key"));
        std::fs::write(&sp, &sig).unwrap();
        // openssl reads pki's DER EC key as well.
        std::fs::write(&kp, data(f)).unwrap();
        let inform = if f.ends_with(".der") { "DER" } else { "PEM" };
        let mut cmd = std::process::Command::new("openssl");
        cmd.args(["pkeyutl", "-verify", "-rawin", "-keyform", inform, "-inkey"])
            .arg(&kp)
            .arg("-in")
            .arg(&mpath)
            .arg("-sigfile")
            .arg(&sp)
            .args(opts);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{f} {scheme:?}: openssl says {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // And the other way round.
        let mut cmd = std::process::Command::new("openssl");
        cmd.args(["pkeyutl", "-sign", "-rawin", "-keyform", inform, "-inkey"])
            .arg(&kp)
            .arg("-in")
            .arg(&mpath)
            .arg("-out")
            .arg(&sp)
            .args(opts);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        k.public_key()
            .verify(scheme, msg, &std::fs::read(&sp).unwrap())
            .unwrap_or_else(|_| panic!("{f} {scheme:?}: OpenSSL's signature does not verify"));
    }
    std::fs::remove_dir_all(&dir).ok();
}
