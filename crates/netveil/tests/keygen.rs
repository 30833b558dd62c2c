//! `netveil keygen` against independent oracles: strongSwan's `pki` and openssl accept the keys, requests, CA
//! and certificates it writes, and it uses the keys, requests and CA certificates `pki` writes (made now, and the
//! pki-made files in testdata/pki). A test whose tool is missing is skipped (`netveil_testkit::skip`: it says so
//! and passes, except under CI, where that is a failure); CI installs both (.ci/setup: strongswan-pki; openssl
//! comes with Debian).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn netveil(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_netveil"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

/// Runs `netveil` and asserts success.
fn ok(dir: &Path, args: &[&str]) -> String {
    let o = netveil(dir, args);
    assert!(
        o.status.success(),
        "netveil {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Runs a tool; its status and stdout+stderr.
fn tool(dir: &Path, prog: &str, args: &[&str]) -> (bool, String) {
    let o = Command::new(prog)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{prog}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

fn tool_ok(dir: &Path, prog: &str, args: &[&str]) -> String {
    let (ok, text) = tool(dir, prog, args);
    assert!(ok, "{prog} {args:?}: {text}");
    text
}

/// Whether `prog` is installed; if not, `test` is skipped (`netveil_testkit::skip`: a failure under CI).
fn have(prog: &str, test: &str) -> bool {
    netveil_testkit::require_program(test, prog)
}

/// A fresh private directory (0700, on a path only root can write: keys go there), removed by the test.
fn tempdir(test: &str) -> PathBuf {
    netveil_testkit::private_dir(&format!("netveil-keygen-{test}")).keep()
}

fn testdata(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/pki")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// What `netveil keygen --name N` and `--ed25519` did before the subcommands still does the same.
#[test]
fn the_psp_and_l2sec_forms_are_unchanged() {
    let d = tempdir("old");
    let out = ok(&d, &["keygen", "--name", "host.example.org"]);
    assert!(out.contains("certificate: ./host.example.org.crt"), "{out}");
    assert_eq!(mode(&d.join("host.example.org.key")), 0o600);
    let pem = std::fs::read_to_string(d.join("host.example.org.crt")).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
    let out = ok(&d, &["keygen", "-n", "lan1", "--ed25519"]);
    assert!(out.contains("public key: "), "{out}");
    assert_eq!(mode(&d.join("lan1.l2key")), 0o600);
    // --type makes a key only; --outform without --type and a subcommand after --name are usage errors.
    let out = ok(&d, &["keygen", "--name", "k", "--type", "rsa-2048"]);
    assert!(out.contains("private key: ./k.key"), "{out}");
    for bad in [
        &["keygen", "--name", "k2", "--outform", "der"][..],
        &["keygen", "--name", "k2", "csr", "--dn", "CN=x"],
        &["keygen", "--name", "k2", "--ed25519", "--type", "ed25519"],
        &["keygen", "--name", "k3", "--type", "rsa-1024"],
    ] {
        assert_eq!(netveil(&d, bad).status.code(), Some(2), "{bad:?}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// A CA, a request and a certificate of every key type, made by `netveil keygen`: pki and openssl read the keys
/// (PKCS#8, 0600), openssl verifies the request's signature, and both verify the certificate against the CA and
/// show the CA's basicConstraints/keyUsage and the certificate's subjectAltNames and extendedKeyUsage.
#[test]
fn pki_and_openssl_accept_what_keygen_makes() {
    const T: &str = "pki_and_openssl_accept_what_keygen_makes";
    if !have("pki", T) || !have("openssl", T) {
        return;
    }
    let d = tempdir("make");
    for t in ["ecdsa-p256", "ecdsa-p384", "ed25519", "rsa-3072"] {
        let (ca, ee, crt) = (
            format!("ca-{t}"),
            format!("moon-{t}"),
            format!("moon-{t}-cert"),
        );
        let dn_ca = format!("C=CH, O=netveil, CN=netveil {t} CA");
        ok(
            &d,
            &["keygen", "ca", "--type", t, "--dn", &dn_ca, "--name", &ca],
        );
        ok(
            &d,
            &[
                "keygen",
                "csr",
                "--type",
                t,
                "--dn",
                "C=CH, O=netveil, CN=moon.example.org",
                "--san",
                "moon.example.org",
                "--san",
                "192.0.2.1",
                "--san",
                "moon@example.org",
                "--name",
                &ee,
            ],
        );
        ok(
            &d,
            &[
                "keygen",
                "issue",
                "--csr",
                &format!("{ee}.csr"),
                "--cacert",
                &format!("{ca}.crt"),
                "--cakey",
                &format!("{ca}.key"),
                "--flag",
                "serverAuth",
                "--flag",
                "clientAuth",
                "--flag",
                "ikeIntermediate",
                "--lifetime",
                "400",
                "--name",
                &crt,
            ],
        );
        for key in [&ca, &ee] {
            let key = format!("{key}.key");
            assert_eq!(mode(&d.join(&key)), 0o600, "{key}");
            let head = std::fs::read_to_string(d.join(&key)).unwrap();
            assert!(head.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{key}");
            tool_ok(&d, "openssl", &["pkey", "-in", &key, "-noout"]);
            let p = tool_ok(&d, "pki", &["--print", "--type", "priv", "--in", &key]);
            assert!(p.contains("privkey:"), "{t}: {p}");
        }
        let r = tool_ok(
            &d,
            "openssl",
            &["req", "-in", &format!("{ee}.csr"), "-verify", "-noout"],
        );
        assert!(r.contains("verify OK"), "{t}: {r}");
        let v = tool_ok(
            &d,
            "openssl",
            &[
                "verify",
                "-CAfile",
                &format!("{ca}.crt"),
                &format!("{crt}.crt"),
            ],
        );
        assert!(v.contains(": OK"), "{t}: {v}");
        let v = tool_ok(
            &d,
            "pki",
            &[
                "--verify",
                "--in",
                &format!("{crt}.crt"),
                "--cacert",
                &format!("{ca}.crt"),
            ],
        );
        assert!(v.contains("certificate trusted"), "{t}: {v}");
        let p = tool_ok(&d, "pki", &["--print", "--in", &format!("{ca}.crt")]);
        assert!(p.contains("flags:     CA CRLSign self-signed"), "{t}: {p}");
        assert!(p.contains(&format!("subject:  \"{dn_ca}\"")), "{t}: {p}");
        let p = tool_ok(&d, "pki", &["--print", "--in", &format!("{crt}.crt")]);
        assert!(
            p.contains("altNames:  moon.example.org, 192.0.2.1, moon@example.org"),
            "{t}: {p}"
        );
        assert!(
            p.contains("flags:     serverAuth clientAuth ikeIntermediate"),
            "{t}: {p}"
        );
        assert!(
            p.contains("expires in 400 days") || p.contains("expires in 399 days"),
            "{t}: {p}"
        );
        let x = tool_ok(
            &d,
            "openssl",
            &["x509", "-in", &format!("{ca}.crt"), "-noout", "-text"],
        );
        assert!(
            x.contains("X509v3 Basic Constraints: critical\n                CA:TRUE"),
            "{t}: {x}"
        );
        assert!(
            x.contains("X509v3 Key Usage: critical\n                Certificate Sign, CRL Sign"),
            "{t}: {x}"
        );
    }
    // DER output: openssl reads it with -inform der, pki detects it.
    ok(
        &d,
        &[
            "keygen",
            "issue",
            "--csr",
            "moon-ed25519.csr",
            "--cacert",
            "ca-rsa-3072.crt",
            "--cakey",
            "ca-rsa-3072.key",
            "--outform",
            "der",
            "--name",
            "der-cert",
        ],
    );
    let der = std::fs::read(d.join("der-cert.crt")).unwrap();
    assert_eq!(der[0], 0x30, "DER, not PEM");
    tool_ok(
        &d,
        "openssl",
        &["x509", "-inform", "der", "-in", "der-cert.crt", "-noout"],
    );
    let v = tool_ok(
        &d,
        "pki",
        &[
            "--verify",
            "--in",
            "der-cert.crt",
            "--cacert",
            "ca-rsa-3072.crt",
        ],
    );
    assert!(v.contains("certificate trusted"), "{v}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// The reverse: keys, a request and CA certificates `pki` makes now (RSA PKCS#1, ECDSA SEC1, Ed25519 PKCS#8; PEM
/// and DER) are used by `netveil keygen`: a request for pki's key, and certificates signed with pki's CA keys,
/// which openssl and pki verify against pki's CA certificates (so the pki key file signed what openssl checks
/// with pki's certificate).
#[test]
fn keygen_uses_what_pki_makes() {
    const T: &str = "keygen_uses_what_pki_makes";
    if !have("pki", T) || !have("openssl", T) {
        return;
    }
    let d = tempdir("reverse");
    let pki_to = |args: &[&str], file: &str| {
        let o = Command::new("pki")
            .current_dir(&d)
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "pki {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::fs::write(d.join(file), o.stdout).unwrap();
    };
    let cases = [
        ("rsa", "pem", "-----BEGIN RSA PRIVATE KEY-----"),
        ("rsa", "der", ""),
        ("ecdsa", "pem", "-----BEGIN EC PRIVATE KEY-----"),
        ("ecdsa", "der", ""),
        ("ed25519", "pem", "-----BEGIN PRIVATE KEY-----"),
    ];
    for (t, form, head) in cases {
        let (key, ca) = (
            format!("pki-{t}-{form}.key"),
            format!("pki-{t}-{form}-ca.crt"),
        );
        pki_to(&["--gen", "--type", t, "--outform", form], &key);
        if !head.is_empty() {
            assert!(
                std::fs::read_to_string(d.join(&key))
                    .unwrap()
                    .starts_with(head),
                "{key}"
            );
        }
        pki_to(
            &[
                "--self",
                "--ca",
                "--in",
                &key,
                "--dn",
                &format!("C=CH, O=pki, CN=pki {t} {form} CA"),
                "--outform",
                form,
            ],
            &ca,
        );
        // A request for pki's key, issued by pki's CA with pki's CA key.
        let ee = format!("ee-{t}-{form}");
        ok(
            &d,
            &[
                "keygen",
                "csr",
                "--key",
                &key,
                "--dn",
                "C=CH, O=netveil, CN=sun",
                "--san",
                "sun",
                "--name",
                &ee,
            ],
        );
        assert!(!d.join(format!("{ee}.key")).exists(), "--key: no new key");
        ok(
            &d,
            &[
                "keygen",
                "issue",
                "--csr",
                &format!("{ee}.csr"),
                "--cacert",
                &ca,
                "--cakey",
                &key,
                "--name",
                &ee,
            ],
        );
        let pem_ca = format!("{ca}.pem");
        let conv = tool_ok(
            &d,
            "openssl",
            &["x509", "-in", &ca, "-inform", form, "-out", &pem_ca],
        );
        let _ = conv;
        let v = tool_ok(
            &d,
            "openssl",
            &["verify", "-CAfile", &pem_ca, &format!("{ee}.crt")],
        );
        assert!(v.contains(": OK"), "{t} {form}: {v}");
        let v = tool_ok(
            &d,
            "pki",
            &["--verify", "--in", &format!("{ee}.crt"), "--cacert", &ca],
        );
        assert!(v.contains("certificate trusted"), "{t} {form}: {v}");
    }
    // pki's own request, issued by a netveil CA.
    pki_to(
        &[
            "--gen",
            "--type",
            "ecdsa",
            "--size",
            "256",
            "--outform",
            "pem",
        ],
        "req.key",
    );
    pki_to(
        &[
            "--req",
            "--in",
            "req.key",
            "--dn",
            "C=CH, CN=venus",
            "--san",
            "venus.example.org",
            "--outform",
            "pem",
        ],
        "req.csr",
    );
    ok(
        &d,
        &[
            "keygen",
            "ca",
            "--dn",
            "C=CH, O=netveil, CN=nv CA",
            "--name",
            "nvca",
        ],
    );
    ok(
        &d,
        &[
            "keygen", "issue", "--csr", "req.csr", "--cacert", "nvca.crt", "--cakey", "nvca.key",
            "--name", "venus",
        ],
    );
    let v = tool_ok(
        &d,
        "pki",
        &["--verify", "--in", "venus.crt", "--cacert", "nvca.crt"],
    );
    assert!(v.contains("certificate trusted"), "{v}");
    let p = tool_ok(&d, "pki", &["--print", "--in", "venus.crt"]);
    assert!(p.contains("altNames:  venus.example.org"), "{p}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// The pki-made files in testdata/pki work without pki at run time (openssl verifies when it is there).
#[test]
fn issues_from_the_pki_files_in_testdata() {
    let d = tempdir("testdata");
    ok(
        &d,
        &[
            "keygen",
            "issue",
            "--csr",
            &testdata("moon.csr"),
            "--cacert",
            &testdata("ca.crt"),
            "--cakey",
            &testdata("ca-ecdsa-p384.key"),
            "--flag",
            "serverAuth",
            "--name",
            "moon",
        ],
    );
    ok(
        &d,
        &[
            "keygen",
            "issue",
            "--csr",
            &testdata("sun.csr.der"),
            "--cacert",
            &testdata("ca-rsa.crt"),
            "--cakey",
            &testdata("rsa-2048.der"),
            "--name",
            "sun",
        ],
    );
    if have(
        "openssl",
        "issues_from_the_pki_files_in_testdata (openssl part)",
    ) {
        let v = tool_ok(
            &d,
            "openssl",
            &["verify", "-CAfile", &testdata("ca.crt"), "moon.crt"],
        );
        assert!(v.contains(": OK"), "{v}");
        let v = tool_ok(
            &d,
            "openssl",
            &["verify", "-CAfile", &testdata("ca-rsa.crt"), "sun.crt"],
        );
        assert!(v.contains(": OK"), "{v}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// Bad input: a message naming the option, exit status 2, and no file written.
#[test]
fn bad_input_exits_2_and_writes_nothing() {
    let d = tempdir("bad");
    ok(&d, &["keygen", "ca", "--dn", "CN=ca", "--name", "ca"]);
    ok(&d, &["keygen", "csr", "--dn", "CN=ee", "--name", "ee"]);
    let cases: [(&[&str], &str); 6] = [
        (
            &["keygen", "csr", "--dn", "CN=x, FOO=1", "--name", "n1"],
            "--dn: unknown attribute \"FOO\"",
        ),
        (
            &[
                "keygen", "csr", "--dn", "CN=x", "--san", "a b", "--name", "n1",
            ],
            "--san:",
        ),
        (
            &[
                "keygen",
                "ca",
                "--dn",
                "CN=x",
                "--lifetime",
                "0",
                "--name",
                "n1",
            ],
            "--lifetime",
        ),
        (
            &["keygen", "csr", "--dn", "CN=x", "--name", "ee"],
            "exists; not overwriting it",
        ),
        (
            &[
                "keygen", "issue", "--csr", "ee.csr", "--cacert", "ca.crt", "--cakey", "ee.key",
                "--name", "n1",
            ],
            "--cakey: this key does not belong",
        ),
        (
            &[
                "keygen", "issue", "--csr", "ca.crt", "--cacert", "ca.crt", "--cakey", "ca.key",
                "--name", "n1",
            ],
            "--csr:",
        ),
    ];
    for (args, msg) in cases {
        let o = netveil(&d, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(msg), "{args:?}: {err}");
    }
    let mut left: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["ca.crt", "ca.key", "ee.csr", "ee.key"]);
    std::fs::remove_dir_all(&d).unwrap();
}

/// The live judge: two charons (strongSwan 5.9.8 in network namespaces, as in tests/strongswan.rs) authenticate
/// each other with what `netveil keygen` made: a CA, and per side a key and request (`csr`) and the certificate
/// issued for it (`issue`). ECDSA P-256 with FQDN ids (the subjectAltNames), RSA-3072 with DN ids (the subjects).
/// Needs root and strongSwan; without them it is skipped (a failure under CI).
#[test]
fn charon_authenticates_with_keygen_certificates() {
    use netveil_lab::lab::Lab;
    use netveil_lab::strongswan::{self, CharonOptions, Credential, KeyType, SwanAuth, SwanPair};
    const T: &str = "charon_authenticates_with_keygen_certificates";
    if !netveil_testkit::require_root(T) || !netveil_testkit::require(T, strongswan::missing()) {
        return;
    }
    let wait = std::time::Duration::from_secs(10);
    let ca_dn = "C=CH, O=netveil, CN=netveil keygen CA";
    for (t, kt, fqdn_ids, want) in [
        ("ecdsa-p256", KeyType::EcdsaP256, true, "ECDSA"),
        ("rsa-3072", KeyType::Rsa(3072), false, "RSA"),
    ] {
        let mut lab = Lab::new("nvkg").unwrap();
        let dir = lab.dir().join(format!("keygen-{t}"));
        std::fs::create_dir_all(&dir).unwrap();
        ok(
            &dir,
            &["keygen", "ca", "--type", t, "--dn", ca_dn, "--name", "ca"],
        );
        let mut creds = Vec::new();
        let mut ids = Vec::new();
        for n in ["a", "b"] {
            let (dn, san) = (
                format!("C=CH, O=netveil, CN={n}.lab.test"),
                format!("{n}.lab.test"),
            );
            ok(
                &dir,
                &[
                    "keygen", "csr", "--type", t, "--dn", &dn, "--san", &san, "--name", n,
                ],
            );
            ok(
                &dir,
                &[
                    "keygen",
                    "issue",
                    "--csr",
                    &format!("{n}.csr"),
                    "--cacert",
                    "ca.crt",
                    "--cakey",
                    "ca.key",
                    "--lifetime",
                    "1",
                    "--name",
                    n,
                ],
            );
            creds.push(Credential {
                key_type: kt,
                cert: dir.join(format!("{n}.crt")),
                key: dir.join(format!("{n}.key")),
                ca: dir.join("ca.crt"),
            });
            ids.push(if fqdn_ids { san } else { dn });
        }
        let p = SwanPair::up(&mut lab, &CharonOptions::default())
            .unwrap_or_else(|e| panic!("setup: {e}"));
        let mut conns: Vec<_> = creds
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                SwanPair::conn(
                    i,
                    "site",
                    SwanAuth::Pubkey(c),
                    "aes128-sha256-ecp256",
                    "net",
                    "aes128-sha256",
                )
            })
            .collect();
        for (i, c) in conns.iter_mut().enumerate() {
            c.local_id = ids[i].clone();
            c.remote_id = ids[1 - i].clone();
        }
        p.load([&conns[..1], &conns[1..]])
            .unwrap_or_else(|e| panic!("{t}: load: {e}"));
        let [a, b] = &p.charons;
        a.initiate("net", wait)
            .unwrap_or_else(|e| panic!("{t}: {e}{}", p.logs(40)));
        let (ike, _) = a
            .wait_child_installed("net", wait)
            .unwrap_or_else(|e| panic!("{t}: {e}"));
        b.wait_child_installed("net", wait)
            .unwrap_or_else(|e| panic!("{t}: {e}"));
        assert_eq!(
            (ike.local_id.as_str(), ike.remote_id.as_str()),
            (ids[0].as_str(), ids[1].as_str())
        );
        for (log, peer) in [(a.log(), &ids[1]), (b.log(), &ids[0])] {
            let line = log
                .lines()
                .find(|l| {
                    l.contains(&format!("authentication of '{peer}' with"))
                        && l.contains("successful")
                })
                .unwrap_or_else(|| {
                    panic!("{t}: no successful authentication of {peer}{}", p.logs(40))
                });
            assert!(line.contains(want), "{t}: {line}");
            assert!(
                log.contains(&format!("using trusted ca certificate \"{ca_dn}\"")),
                "{t}: the peer's certificate was not checked against the keygen CA{}",
                p.logs(40)
            );
        }
    }
}
