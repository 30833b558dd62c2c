//! strongSwan pki is the oracle: testdata/pki holds keys, requests and certificates pki 5.9.8 made
//! (testdata/pki/make.sh), so these tests need no pki at run time. The command-line tests with pki and
//! openssl running live are in crates/netveil/tests/keygen.rs.
use super::*;
use x509_parser::certificate::X509Certificate;
use x509_parser::certification_request::X509CertificationRequest;

fn td(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/pki")
        .join(name)
}

fn der(name: &str) -> Vec<u8> {
    read_der(&td(name), "test", &["CERTIFICATE", "CERTIFICATE REQUEST"]).unwrap()
}

fn cert(der: &[u8]) -> X509Certificate<'_> {
    let (rest, c) = X509Certificate::from_der(der).unwrap();
    assert!(rest.is_empty());
    c
}

fn ext<'a>(
    c: &'a X509Certificate<'_>,
    oid: &str,
) -> Option<&'a x509_parser::extensions::X509Extension<'a>> {
    c.extensions().iter().find(|e| e.oid.to_id_string() == oid)
}

const SAN: &str = "2.5.29.17";
const EKU: &str = "2.5.29.37";
const AKI: &str = "2.5.29.35";
const BC: &str = "2.5.29.19";
const KU: &str = "2.5.29.15";
/// The DN and SANs testdata/pki/make.sh gave pki for moon.csr.
const MOON_DN: &str = "C=CH, O=netveil Zürich, OU=lab, CN=moon.example.org, E=moon@example.org";
const MOON_SANS: [&str; 4] = [
    "moon.example.org",
    "192.0.2.1",
    "2001:db8::1",
    "moon@example.org",
];

/// The forms pki writes: PKCS#1 for RSA and SEC1 for ECDSA (PEM and DER), PKCS#8 for Ed25519; and PKCS#8 for
/// RSA and ECDSA (openssl pkcs8 -topk8 of pki's keys). Each loads as the key of the matching pki certificate.
#[test]
fn loads_every_key_form_pki_writes() {
    let first_line = |f: &str| {
        std::fs::read_to_string(td(f))
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        first_line("rsa-2048.key"),
        "-----BEGIN RSA PRIVATE KEY-----"
    );
    assert_eq!(
        first_line("ecdsa-p256.key"),
        "-----BEGIN EC PRIVATE KEY-----"
    );
    assert_eq!(first_line("ed25519.key"), "-----BEGIN PRIVATE KEY-----");
    assert_eq!(first_line("rsa-2048.p8"), "-----BEGIN PRIVATE KEY-----");
    // (key file, kind, a pki certificate for that key)
    let cases = [
        ("rsa-2048.key", "rsa", Some("venus.crt")),
        ("rsa-2048.p8", "rsa", Some("venus.crt")),
        ("rsa-2048.der", "rsa", Some("ca-rsa.crt")),
        ("ecdsa-p256.key", "ecdsa-p256", Some("moon.crt")),
        ("ecdsa-p256.p8", "ecdsa-p256", Some("moon.crt")),
        ("ca-ecdsa-p384.key", "ecdsa-p384", Some("ca.crt")),
        ("ecdsa-p384.der", "ecdsa-p384", None),
        ("ed25519.key", "ed25519", Some("sun.crt.der")),
    ];
    for (file, kind, crt) in cases {
        let key = PrivateKey::load(&td(file), "--key").unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(key.kind(), kind, "{file}");
        // The key signs: a request made with it verifies (rcgen/x509-parser check it), and it carries the
        // public key pki put into its certificate for this key.
        let csr = request(&key, parse_dn("CN=x").unwrap(), vec![]).unwrap();
        let (_, req) = X509CertificationRequest::from_der(&csr.der).unwrap();
        req.verify_signature().unwrap();
        if let Some(crt) = crt {
            let c = der(crt);
            assert_eq!(
                cert(&c).public_key().raw,
                req.certification_request_info.subject_pki.raw,
                "{file} vs {crt}"
            );
        }
    }
}

/// Same DN and SAN strings as pki --req got: the subject and the SAN extension are byte for byte pki's
/// (strongSwan's attribute names and string types: PrintableString, UTF8String for "Zürich", IA5String for E);
/// with the same key the whole CertificationRequestInfo is.
#[test]
fn dn_and_sans_encode_as_pki_does() {
    let pki_der = der("moon.csr");
    let (_, pki) = X509CertificationRequest::from_der(&pki_der).unwrap();
    let key = PrivateKey::load(&td("ecdsa-p256.key"), "--key").unwrap();
    let sans: Vec<SanType> = MOON_SANS.iter().map(|s| parse_san(s).unwrap()).collect();
    for dn in [
        MOON_DN,
        "/C=CH/O=netveil Zürich/OU=lab/CN=moon.example.org/E=moon@example.org",
        " c = CH ,o=netveil Zürich,ou=lab ,cn=moon.example.org, emailAddress=moon@example.org",
    ] {
        let ours = request(&key, parse_dn(dn).unwrap(), sans.clone()).unwrap();
        let (_, ours) = X509CertificationRequest::from_der(&ours.der).unwrap();
        assert_eq!(
            ours.certification_request_info.subject.as_raw(),
            pki.certification_request_info.subject.as_raw(),
            "{dn}"
        );
        assert_eq!(
            ours.certification_request_info.raw, pki.certification_request_info.raw,
            "{dn}"
        );
    }
}

#[test]
fn bad_dns_and_sans_are_refused_with_a_reason() {
    for (dn, why) in [
        ("", "empty"),
        ("moon", "not ATTRIBUTE=value"),
        ("FOO=bar", "unknown attribute \"FOO\""),
        ("CN=", "empty value"),
        ("C=CH,,CN=x", "not ATTRIBUTE=value"),
        ("OU=a, OU=b", "twice"),
        ("E=mööm@x", "not ASCII"),
    ] {
        let e = parse_dn(dn).unwrap_err();
        assert!(e.contains(why), "{dn:?}: {e}");
    }
    assert_eq!(
        parse_san("ip:192.0.2.7").unwrap(),
        SanType::IpAddress("192.0.2.7".parse().unwrap())
    );
    assert_eq!(
        parse_san("@moon").unwrap(),
        SanType::DnsName("moon".try_into().unwrap())
    );
    assert_eq!(
        parse_san("dns:a@b").unwrap(),
        SanType::DnsName("a@b".try_into().unwrap())
    );
    assert_eq!(
        parse_san("EMAIL:a@b").unwrap(),
        SanType::Rfc822Name("a@b".try_into().unwrap())
    );
    for bad in ["", "ip:moon", "email:moon", "a b", "dns:", "mööm"] {
        assert!(parse_san(bad).is_err(), "{bad:?}");
    }
}

/// pki's CA key (SEC1 PEM) and CA certificate issue for pki's request: the signature verifies with the CA
/// certificate's key, the issuer is the CA's subject byte for byte, and the subject, subjectAltName,
/// extendedKeyUsage (serverAuth, ikeIntermediate) and authorityKeyIdentifier are those pki's own
/// `pki --issue --flag serverAuth --flag ikeIntermediate` wrote for the same request.
#[test]
fn issues_for_a_pki_request_with_a_pki_ca_as_pki_does() {
    let ca_der = der("ca.crt");
    let ca = cert(&ca_der);
    let ca_key = PrivateKey::load(&td("ca-ecdsa-p384.key"), "--cakey").unwrap();
    let opts = IssueOptions {
        days: 30,
        flags: vec![Flag::ServerAuth, Flag::IkeIntermediate],
        ..Default::default()
    };
    let made = issue(&der("moon.csr"), &ca_der, &ca_key, &opts).unwrap();
    let ours = cert(&made.der);
    ours.verify_signature(Some(ca.public_key())).unwrap();
    let pki_der = der("moon.crt");
    let pki = cert(&pki_der);
    assert_eq!(ours.issuer().as_raw(), ca.subject().as_raw());
    assert_eq!(ours.subject().as_raw(), pki.subject().as_raw());
    assert_eq!(ours.public_key().raw, pki.public_key().raw);
    for oid in [SAN, EKU] {
        assert_eq!(
            ext(&ours, oid).unwrap().value,
            ext(&pki, oid).unwrap().value,
            "{oid}"
        );
    }
    // AKI: the same key identifier (pki adds the CA's issuer and serial too, rcgen only the identifier).
    let aki = |c: &X509Certificate<'_>| match ext(c, AKI).unwrap().parsed_extension() {
        x509_parser::extensions::ParsedExtension::AuthorityKeyIdentifier(a) => {
            a.key_identifier.as_ref().unwrap().0.to_vec()
        }
        e => panic!("{e:?}"),
    };
    assert_eq!(aki(&ours), aki(&pki));
    assert!(ext(&ours, BC).is_none() && ext(&ours, KU).is_none());
    let life = ours.validity().not_after.timestamp() - ours.validity().not_before.timestamp();
    assert_eq!(life, 30 * 86_400);
    // The serial is random: a second certificate for the same request has another one.
    let again = issue(&der("moon.csr"), &ca_der, &ca_key, &opts).unwrap();
    assert_ne!(cert(&again.der).raw_serial(), ours.raw_serial());
}

/// An RSA CA (pki's PKCS#1 DER key) issues for pki's Ed25519 request (DER).
#[test]
fn rsa_ca_issues_for_an_ed25519_request() {
    let ca_der = der("ca-rsa.crt");
    let ca_key = PrivateKey::load(&td("rsa-2048.der"), "--cakey").unwrap();
    let opts = IssueOptions {
        days: 1,
        sans: vec![parse_san("192.0.2.9").unwrap()],
        dn: Some(parse_dn("C=CH, CN=other").unwrap()),
        ..Default::default()
    };
    let made = issue(&der("sun.csr.der"), &ca_der, &ca_key, &opts).unwrap();
    let ours = cert(&made.der);
    ours.verify_signature(Some(cert(&ca_der).public_key()))
        .unwrap();
    assert_eq!(
        ours.public_key().raw,
        cert(&der("sun.crt.der")).public_key().raw
    );
    assert_eq!(ours.subject().to_string(), "C=CH, CN=other");
    let san = ours.subject_alternative_name().unwrap().unwrap();
    assert_eq!(
        san.value.general_names.len(),
        2,
        "the request's and --san's"
    );
    assert!(
        ext(&ours, EKU).is_none(),
        "no --flag, no extendedKeyUsage (as pki)"
    );
}

/// What a request asks for beyond its name and key is not granted: a request for a CA with keyCertSign and
/// codeSigning gets an end-entity certificate with only the --flag purposes.
#[test]
fn a_request_cannot_make_itself_a_ca() {
    let key = PrivateKey::generate(KeyType::EcdsaP256).unwrap();
    let mut p = CertificateParams::default();
    p.distinguished_name = parse_dn("CN=evil").unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
    let csr = p.serialize_request(&key.pair).unwrap();
    let ca_der = der("ca.crt");
    let ca_key = PrivateKey::load(&td("ca-ecdsa-p384.key"), "--cakey").unwrap();
    let opts = IssueOptions {
        days: 1,
        flags: vec![Flag::ClientAuth],
        ..Default::default()
    };
    let made = issue(csr.der(), &ca_der, &ca_key, &opts).unwrap();
    let c = cert(&made.der);
    assert!(c.basic_constraints().unwrap().is_none());
    assert!(c.key_usage().unwrap().is_none());
    let eku = c.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.code_signing && !eku.server_auth);
}

#[test]
fn refuses_a_wrong_ca_key_a_non_ca_and_a_forged_request() {
    let csr = der("moon.csr");
    let opts = IssueOptions {
        days: 1,
        ..Default::default()
    };
    let ca_key = PrivateKey::load(&td("ca-ecdsa-p384.key"), "--cakey").unwrap();
    let other = PrivateKey::load(&td("ecdsa-p384.der"), "--cakey").unwrap();
    let msg = |r: Result<Made>| match r {
        Err(e @ Error::Input { .. }) => e.to_string(),
        r => panic!("{r:?}"),
    };
    assert!(msg(issue(&csr, &der("ca.crt"), &other, &opts)).contains("does not belong"));
    assert!(msg(issue(&csr, &der("moon.crt"), &ca_key, &opts)).contains("not a CA"));
    let mut forged = csr.clone();
    let n = forged.len();
    forged[n - 5] ^= 1; // in the signature
    assert!(msg(issue(&forged, &der("ca.crt"), &ca_key, &opts)).contains("does not verify"));
    let mut subject_changed = csr.clone();
    let at = subject_changed
        .windows(4)
        .position(|w| w == b"moon")
        .unwrap();
    subject_changed[at] = b'n';
    assert!(
        msg(issue(&subject_changed, &der("ca.crt"), &ca_key, &opts)).contains("does not verify")
    );
    assert!(msg(issue(
        &csr,
        &der("ca.crt"),
        &ca_key,
        &IssueOptions::default()
    ))
    .contains("--lifetime"));
}

/// Hostile input: every truncation and every one-byte change of a request and of a CA certificate is refused
/// or (where the change is in a part nobody signs or reads) accepted, never a panic.
#[test]
fn mangled_requests_and_ca_certificates_never_panic() {
    let csr = der("moon.csr");
    let ca = der("ca.crt");
    let ca_key = PrivateKey::load(&td("ca-ecdsa-p384.key"), "--cakey").unwrap();
    let opts = IssueOptions {
        days: 1,
        ..Default::default()
    };
    let mut accepted = 0;
    for (i, victim) in [&csr, &ca].into_iter().enumerate() {
        for n in 0..victim.len() {
            let cut = &victim[..n];
            let (c, a) = if i == 0 {
                (cut, &ca[..])
            } else {
                (&csr[..], cut)
            };
            assert!(issue(c, a, &ca_key, &opts).is_err(), "truncated to {n}");
            let mut m = victim.clone();
            m[n] ^= 0xa5;
            let (c, a) = if i == 0 {
                (&m[..], &ca[..])
            } else {
                (&csr[..], &m[..])
            };
            if issue(c, a, &ca_key, &opts).is_ok() {
                accepted += 1;
            }
        }
    }
    // A changed CA certificate's own signature is not checked here (the CA is trusted by the caller); only
    // bytes outside the key and the names the issued certificate copies can change and still be accepted.
    assert!(accepted < ca.len() / 2, "{accepted}");
    for junk in [
        &b""[..],
        b"-----BEGIN PRIVATE KEY-----\n!!\n-----END PRIVATE KEY-----\n",
        &[0x30; 300],
    ] {
        let p = std::env::temp_dir().join(format!("netveil-keygen-junk-{}", std::process::id()));
        std::fs::write(&p, junk).unwrap();
        assert!(matches!(
            PrivateKey::load(&p, "--key"),
            Err(Error::Input { .. })
        ));
        std::fs::remove_file(&p).unwrap();
    }
}

/// Every type generates, is written as PKCS#8 and reads back as the same key; RSA keys have their size; a CA
/// has basicConstraints CA (critical, pathlen when asked) and keyUsage keyCertSign + cRLSign (critical).
#[test]
fn generates_every_type_and_a_ca() {
    for (t, name) in KeyType::ALL {
        let key = PrivateKey::generate(t).unwrap();
        assert_eq!(format!("{key:?}"), format!("PrivateKey({name}, ..)"));
        let pem = key.pkcs8(Form::Pem);
        assert!(pem.starts_with(b"-----BEGIN PRIVATE KEY-----\n"), "{name}");
        // PKCS#8 v1 (version 0), which every reader takes (OpenSSL 3.0 refuses Ed25519 in v2).
        let der = key.pkcs8(Form::Der);
        let (_, info) = x509_parser::der_parser::parse_der(&der).unwrap();
        let version = info.as_sequence().unwrap()[0].as_u32().unwrap();
        assert_eq!(version, 0, "{name}");
        let again = KeyPair::from_pem(std::str::from_utf8(&pem).unwrap()).unwrap();
        assert_eq!(again.public_key_raw(), key.public_key_raw());
        let ca = self_signed_ca(&key, parse_dn("CN=ca").unwrap(), 10, Some(1)).unwrap();
        let c = cert(&ca.der);
        c.verify_signature(None).unwrap();
        let bc = c.basic_constraints().unwrap().unwrap();
        assert!(bc.critical && bc.value.ca && bc.value.path_len_constraint == Some(1));
        let ku = c.key_usage().unwrap().unwrap();
        assert!(ku.critical && ku.value.key_cert_sign() && ku.value.crl_sign());
        assert!(!ku.value.digital_signature());
        if let Some(bits) = name.strip_prefix("rsa-") {
            match c.public_key().parsed().unwrap() {
                x509_parser::public_key::PublicKey::RSA(r) => {
                    assert_eq!(r.key_size().to_string(), bits)
                }
                k => panic!("{k:?}"),
            }
        }
    }
}

#[test]
fn keys_are_0600_and_nothing_is_overwritten() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("netveil-keygen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let w = cmd_key("k", &dir, KeyType::Ed25519, Form::Der).unwrap();
    let meta = std::fs::metadata(&w[0].1).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(matches!(
        cmd_key("k", &dir, KeyType::Ed25519, Form::Pem),
        Err(e @ Error::Input { .. }) if e.to_string().contains("exists")
    ));
    // A CA with a new key: both files made, nothing when one of them exists.
    let w = cmd_ca(
        "k2",
        &dir,
        &KeySource::New(KeyType::EcdsaP256),
        "CN=x",
        1,
        None,
        Form::Pem,
    )
    .unwrap();
    assert_eq!(w.len(), 2);
    std::fs::remove_file(&w[1].1).unwrap();
    assert!(cmd_ca(
        "k2",
        &dir,
        &KeySource::New(KeyType::EcdsaP256),
        "CN=x",
        1,
        None,
        Form::Pem
    )
    .is_err());
    assert!(!w[1].1.exists());
    assert!(matches!(
        cmd_key("../x", &dir, KeyType::Ed25519, Form::Pem),
        Err(Error::Input { .. })
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}
