//! `auth = "pubkey"` in the `[ike]` section: certificates and keys from files (testdata of netveil-ike, made by
//! strongSwan's pki), the key file root's only, and every mistake named by its key.

use super::*;
use netveil_ike::cert::{parse_dn, Certificate};
use netveil_ike::config::{AuthMethod, Identity};
use std::os::unix::fs::PermissionsExt;

fn testdata(name: &str) -> Vec<u8> {
    let p = format!(
        "{}/../ike/testdata/certs/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// A directory with the files the config names: moon's certificate and key (0600), the CA, sun's certificate.
fn dir(tag: &str) -> std::path::PathBuf {
    let d = crate::runtime::state::test_dir(&format!("ike-pubkey-{tag}"));
    std::fs::create_dir_all(&d).unwrap();
    for f in ["moon.der", "moon.key", "sun.key", "ca.pem", "sun.pem"] {
        std::fs::write(d.join(f), testdata(f)).unwrap();
    }
    for k in ["moon.key", "sun.key"] {
        std::fs::set_permissions(d.join(k), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    std::fs::write(d.join("junk.pem"), "not a certificate").unwrap();
    d
}

const LOCAL: &str = r#"local = { id = "moon.netveil.test", auth = "pubkey", certs = ["moon.der"], key = "moon.key" }"#;
const REMOTE: &str = r#"remote = { id = "C=CH, O=netveil test, CN=sun.netveil.test", auth = "pubkey", cacerts = ["ca.pem"] }"#;

fn text(local: &str, remote: &str) -> String {
    format!(
        r#"
[[connection]]
name = "certs"
local_addrs = ["192.0.2.1"]
remote_addrs = ["198.51.100.1"]
proposals = ["aes256gcm16-prfsha384-ecp384"]
{local}
{remote}

[[connection.children]]
name = "net"
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.2.0.0/16"]
esp_proposals = ["aes256gcm16"]
"#
    )
}

fn parse_in(d: &Path, local: &str, remote: &str) -> Result<IkeConfig, Vec<ConfigError>> {
    parse(toml::from_str(&text(local, remote)).unwrap(), d)
}

fn err_at(d: &Path, local: &str, remote: &str, key: &str) -> String {
    let es = parse_in(d, local, remote).expect_err(key);
    let e = es
        .iter()
        .find(|e| e.key == format!("ike.connection[0].{key}"))
        .unwrap_or_else(|| panic!("no error at {key}: {es:?}"));
    e.reason.clone()
}

#[test]
fn a_pubkey_connection_parses() {
    // Key files must be root's.
    if !netveil_testkit::require_root_for(&netveil_testkit::this_test(), "root's key files") {
        return;
    }
    let d = dir("ok");
    let c = parse_in(&d, LOCAL, REMOTE).unwrap();
    let conn = &c.connections[0];
    assert!(conn.psk.is_none());
    let AuthMethod::PubKey(l) = &conn.local.method else {
        panic!()
    };
    assert_eq!(
        l.certs,
        vec![Certificate::from_der(&testdata("moon.der")).unwrap()]
    );
    assert!(l.key.is_some() && l.cacerts.is_empty());
    assert!(!format!("{conn:?}").contains("BEGIN"));
    let AuthMethod::PubKey(r) = &conn.remote.method else {
        panic!()
    };
    assert_eq!(r.cacerts.len(), 1);
    assert_eq!(
        conn.remote.id,
        Identity::Dn(parse_dn("C=CH, O=netveil test, CN=sun.netveil.test").unwrap())
    );
    // Without an id, ours is the certificate's subject (as swanctl); a pinned peer certificate in PEM.
    let c = parse_in(
        &d,
        r#"local = { auth = "pubkey", certs = ["moon.der"], key = "moon.key" }"#,
        r#"remote = { id = "%any", auth = "pubkey", certs = ["sun.pem"] }"#,
    )
    .unwrap();
    let conn = &c.connections[0];
    assert_eq!(
        conn.local.id,
        Identity::Dn(parse_dn("C=CH, O=netveil test, CN=moon.netveil.test").unwrap())
    );
    let AuthMethod::PubKey(r) = &conn.remote.method else {
        panic!()
    };
    assert_eq!((r.certs.len(), r.cacerts.len()), (1, 0));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn every_pubkey_mistake_names_its_key() {
    let d = dir("bad");
    // Without root the key files are not root's and the checks after ownership are not reached: skipped.
    let root = netveil_testkit::require_root_for(
        &format!("{} (key and id checks)", netveil_testkit::this_test()),
        "root's key files",
    );
    // The key file readable by others.
    std::fs::set_permissions(d.join("moon.key"), std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(err_at(&d, LOCAL, REMOTE, "local.key").contains("0600"));
    std::fs::set_permissions(d.join("moon.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    if root {
        // Another certificate's key.
        let l = LOCAL.replace("moon.key", "sun.key");
        assert!(err_at(&d, &l, REMOTE, "local.key").contains("not the key of certs[0]"));
        // An ID the certificate does not name.
        let l = LOCAL.replace("id = \"moon.netveil.test\"", "id = \"sun.netveil.test\"");
        assert!(err_at(&d, &l, REMOTE, "local.id").contains("subjectAltName"));
    }
    let l = LOCAL.replace("moon.der", "junk.pem");
    assert!(err_at(&d, &l, REMOTE, "local.certs[0]").contains("not an X.509 certificate"));
    let l = LOCAL.replace("moon.der", "missing.der");
    assert!(err_at(&d, &l, REMOTE, "local.certs[0]").contains("cannot read"));
    let l = LOCAL.replace(", key = \"moon.key\"", "");
    err_at(&d, &l, REMOTE, "local.key");
    let l = LOCAL.replace("certs = [\"moon.der\"]", "cacerts = [\"ca.pem\"]");
    err_at(&d, &l, REMOTE, "local.cacerts");
    let r = REMOTE.replace(", cacerts = [\"ca.pem\"]", "");
    err_at(&d, LOCAL, &r, "remote.cacerts");
    let r = REMOTE.replace(
        "cacerts = [\"ca.pem\"]",
        "cacerts = [\"ca.pem\"], key = \"moon.key\"",
    );
    err_at(&d, LOCAL, &r, "remote.key");
    let r = REMOTE.replace("cacerts = [\"ca.pem\"]", "cacerts = [\"junk.pem\"]");
    err_at(&d, LOCAL, &r, "remote.cacerts[0]");
    let r = REMOTE.replace("C=CH, O=netveil test", "XX=CH, O=netveil test");
    assert!(
        err_at(&d, LOCAL, &r, "remote.id").contains("is not a distinguished name netveil reads")
    );
    // Credentials with auth = "psk".
    let l = r#"local = { id = "a.example", auth = "psk", certs = ["moon.der"] }"#;
    err_at(&d, l, REMOTE, "local.certs");
    let _ = std::fs::remove_dir_all(&d);
}

/// Our own certificate is checked at load: expired (expired.der ends 2027-01-01) is refused with the date, valid
/// or not yet valid (only a warning: the clock may be behind) is taken.
#[test]
fn an_expired_own_certificate_is_refused_at_load() {
    let at = |y: i32| {
        let days = (y - 1970) as u64 * 36525 / 100;
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(days * 86400 + 150 * 86400)
    };
    let expired = Certificate::from_der(&testdata("expired.der")).unwrap();
    let err = crate::drivers::ike::values::own_cert_current(
        &expired,
        "ike.connection[0].local.certs",
        at(2027),
    )
    .unwrap_err();
    assert_eq!(err.key, "ike.connection[0].local.certs[0]");
    assert!(
        err.reason.starts_with("our certificate (C=CH, O=netveil test, CN=moon.netveil.test) expired on 2027-01-01 02:53:50 UTC"),
        "{}",
        err.reason
    );
    assert!(crate::drivers::ike::values::own_cert_current(&expired, "k", at(2026)).is_ok());
    assert!(
        crate::drivers::ike::values::own_cert_current(&expired, "k", at(2025)).is_ok(),
        "not yet valid: a warning only"
    );
    let moon = Certificate::from_der(&testdata("moon.der")).unwrap();
    assert!(crate::drivers::ike::values::own_cert_current(&moon, "k", at(2030)).is_ok());
}

/// The private key (`local.key`) is read as a secret and the CA certificates (`remote.cacerts`) as rules, each
/// through [`crate::runtime::secret_file`]: every refusal names its key and the file, never the key's contents.
#[test]
fn key_and_ca_files_are_checked_as_opened() {
    use crate::runtime::secret_file::{tests::every_refusal, Level};
    let d = dir("opened");
    let joined = |r: Result<IkeConfig, Vec<ConfigError>>| {
        r.map(|_| ()).map_err(|es| {
            es.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        })
    };
    let key = testdata("moon.key");
    // (DER: no part of it may show, as hex either.)
    let key_line = hex::encode(&key[key.len() - 24..]);
    every_refusal(
        "ike-private-key",
        Level::Secret,
        "ike.connection[0].local.key",
        &key,
        &key_line,
        true,
        &|p| {
            let local = LOCAL.replace("\"moon.key\"", &format!("\"{}\"", p.display()));
            joined(parse_in(&d, &local, REMOTE))
        },
    );
    let ca = testdata("ca.pem");
    let ca_line = String::from_utf8_lossy(&ca)
        .lines()
        .nth(2)
        .unwrap()
        .to_string();
    every_refusal(
        "ike-cacerts",
        Level::Rules,
        "ike.connection[0].remote.cacerts[0]",
        &ca,
        &ca_line,
        true,
        &|p| {
            let remote = REMOTE.replace("\"ca.pem\"", &format!("\"{}\"", p.display()));
            joined(parse_in(&d, LOCAL, &remote))
        },
    );
    let _ = std::fs::remove_dir_all(&d);
}
