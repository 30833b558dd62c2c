//! The `[ike]` section: a full connection parses into the typed values; every error path names its key, and no
//! message shows the pre-shared key (nor other values).

use super::*;
use netveil_ike::config::Identity;
use netveil_ike::proposal::{Encr, Integ};

const PSK: &str = "correct-horse-battery-staple-0123";

fn base() -> String {
    format!(
        r#"
[[connection]]
name = "site"
local_addrs = ["192.0.2.1"]
remote_addrs = ["198.51.100.1"]
proposals = ["aes256gcm16-prfsha384-ecp384", "aes128-sha256-modp2048"]
psk = "{PSK}"
dpd_delay = "30s"
rekey_time = "4h"
local = {{ id = "192.0.2.1", auth = "psk" }}
remote = {{ id = "@peer.example.org", auth = "psk" }}

[[connection.children]]
name = "net"
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.2.0.0/16", "10.3.0.1/32[tcp/80]", "dynamic"]
esp_proposals = ["aes256gcm16-ecp384", "aes128-sha256"]
start_action = "start"
replay_window = 128
"#
    )
}

fn parse_text(t: &str) -> Result<IkeConfig, Vec<ConfigError>> {
    let v: toml::Value = toml::from_str(t).expect("test TOML");
    parse(v, Path::new("/nonexistent"))
}

/// The errors of `base()` with `from` replaced by `to`, as "key: reason" lines; none shows the PSK.
fn errors(from: &str, to: &str) -> Vec<ConfigError> {
    let t = base();
    assert!(t.contains(from), "{from}");
    let es = parse_text(&t.replacen(from, to, 1)).expect_err(to);
    for e in &es {
        let shown = e.to_string();
        assert!(
            !shown.contains(PSK) && !shown.contains("horse"),
            "secret shown: {shown}"
        );
    }
    es
}

fn one_error(from: &str, to: &str, key: &str) -> String {
    let es = errors(from, to);
    assert!(
        es.iter().any(|e| e.key == key),
        "{to}: expected an error at {key}, got {es:?}"
    );
    es.into_iter().find(|e| e.key == key).unwrap().reason
}

/// `reauth_time` (swanctl's): none by default; set, over_time defaults to 10% of the longer time and rand_time to
/// at most 10% of the shorter.
#[test]
fn reauth_time() {
    let c = parse_text(&base()).unwrap();
    assert_eq!(c.connections[0].reauth, Duration::ZERO);
    let with = |extra: &str| {
        let t = base().replacen(
            "rekey_time = \"4h\"",
            &format!("rekey_time = \"1h\"\n{extra}"),
            1,
        );
        parse_text(&t).unwrap().connections.remove(0)
    };
    let c = with("reauth_time = \"24h\"");
    assert_eq!(c.reauth, Duration::from_secs(24 * 3600));
    assert_eq!(c.lifetimes.rekey, Duration::from_secs(3600));
    assert_eq!(
        c.lifetimes.life - c.lifetimes.rekey,
        Duration::from_secs(24 * 360),
        "over_time"
    );
    assert_eq!(c.lifetimes.rand, Duration::from_secs(360), "rand_time");
    let c = with("reauth_time = \"30m\"\nover_time = \"5m\"\nrand_time = \"1m\"");
    assert_eq!(
        c.reauth,
        Duration::from_secs(1800),
        "not above rekey_time: allowed"
    );
    assert_eq!(
        c.lifetimes.life - c.lifetimes.rekey,
        Duration::from_secs(300)
    );
    assert_eq!(c.lifetimes.rand, Duration::from_secs(60));
    assert_eq!(with("reauth_time = \"0s\"").reauth, Duration::ZERO);
}

#[test]
fn a_full_connection() {
    let c = parse_text(&base()).unwrap();
    assert_eq!(c.socket_mark, DEFAULT_SOCKET_MARK);
    let c = &c.connections[0];
    assert_eq!(c.name, "site");
    assert_eq!(c.local_addrs, ["192.0.2.1".parse::<IpAddr>().unwrap()]);
    assert_eq!(c.remote_port, 500);
    assert_eq!(c.proposals.len(), 2);
    assert_eq!(
        c.proposals[0].to_string(),
        "aes256gcm16-prfsha384-ecp384",
        "strongSwan syntax back"
    );
    assert_eq!(c.psk.as_ref().unwrap().expose(), PSK.as_bytes());
    assert_eq!(c.local.id, Identity::Ipv4("192.0.2.1".parse().unwrap()));
    assert_eq!(c.remote.id, Identity::Fqdn("peer.example.org".into()));
    assert_eq!(c.dpd_delay, Some(Duration::from_secs(30)));
    assert_eq!(c.lifetimes.rekey, Duration::from_secs(4 * 3600));
    assert_eq!(c.retransmit, Retransmit::default());
    assert!(c.fragmentation && !c.encap);
    let ch = &c.children[0];
    assert_eq!(ch.name, "net");
    assert_eq!(ch.mode, Mode::Tunnel);
    assert_eq!(ch.start_action, Action::Start);
    assert_eq!(ch.replay_window, 128);
    assert_eq!(ch.lifetimes.rekey, Duration::from_secs(3600));
    assert_eq!(ch.lifetimes.life, Duration::from_secs(3960));
    assert_eq!(
        ch.remote_ts,
        [
            TsSpec {
                addr: "10.2.0.0".parse().unwrap(),
                prefix: 16,
                protocol: 0,
                ports: (0, 65535)
            },
            TsSpec {
                addr: "10.3.0.1".parse().unwrap(),
                prefix: 32,
                protocol: 6,
                ports: (80, 80)
            },
            // dynamic: the peer's address.
            TsSpec {
                addr: "198.51.100.1".parse().unwrap(),
                prefix: 32,
                protocol: 0,
                ports: (0, 65535)
            },
        ]
    );
    assert_eq!(ch.esp_proposals[1].to_string(), "aes128-sha256");
    // The Debug of the whole configuration shows no key.
    assert!(!format!("{c:?}").contains(PSK));
}

#[test]
fn section_level_errors() {
    let e = parse_text("").unwrap_err();
    assert_eq!(e[0].key, "ike.connection");
    let e = parse_text("bogus = 1\n[[connection]]\nname = \"x\"").unwrap_err();
    assert_eq!(e[0].key, "ike.bogus", "{e:?}");
    for (t, key) in [
        ("retransmit_timeout = 0", "ike.retransmit_timeout"),
        ("retransmit_timeout = \"4x\"", "ike.retransmit_timeout"),
        ("retransmit_base = 0.5", "ike.retransmit_base"),
        ("retransmit_tries = -1", "ike.retransmit_tries"),
        ("socket_mark = 0", "ike.socket_mark"),
    ] {
        let e = parse_text(&format!("{t}\n{}", base())).unwrap_err();
        assert_eq!(e.len(), 1, "{t}: {e:?}");
        assert_eq!(e[0].key, key, "{t}");
    }
    let c = parse_text(&format!(
        "retransmit_timeout = \"2s\"\nretransmit_base = 1.5\nretransmit_tries = 3\nsocket_mark = 7\n{}",
        base()
    ))
    .unwrap();
    assert_eq!(c.socket_mark, 7);
    assert_eq!(
        c.connections[0].retransmit,
        Retransmit {
            timeout: Duration::from_secs(2),
            base: 1.5,
            tries: 3
        }
    );
}

#[test]
fn connection_errors_name_their_key() {
    let k = |s: &str| format!("ike.connection[0].{s}");
    one_error("name = \"site\"", "name = \"a b\"", &k("name"));
    one_error(
        "local_addrs = [\"192.0.2.1\"]",
        "local_addrs = [\"host.example\"]",
        &k("local_addrs[0]"),
    );
    one_error(
        "local_addrs = [\"192.0.2.1\"]",
        "local_addrs = []",
        &k("local_addrs"),
    );
    one_error(
        "remote_addrs = [\"198.51.100.1\"]",
        "remote_addrs = [\"x\"]",
        &k("remote_addrs[0]"),
    );
    one_error("dpd_delay", "remote_port = 0\ndpd_delay", &k("remote_port"));
    let r = one_error(
        "\"aes128-sha256-modp2048\"",
        "\"aes128-sha256-modp9999\"",
        &k("proposals[1]"),
    );
    assert!(
        r.contains("algorithm 3 "),
        "the token is named by its position: {r}"
    );
    assert!(!r.contains("modp9999"), "and not shown: {r}");
    one_error(
        "proposals = [\"aes256gcm16-prfsha384-ecp384\", \"aes128-sha256-modp2048\"]",
        "proposals = []",
        &k("proposals"),
    );
    one_error(
        "proposals = [\"aes256gcm16-prfsha384-ecp384\", \"aes128-sha256-modp2048\"]",
        "",
        &k("proposals"),
    );
    one_error(
        "dpd_delay = \"30s\"",
        "dpd_delay = \"30 s\"",
        &k("dpd_delay"),
    );
    one_error("rekey_time = \"4h\"", "rekey_time = true", &k("rekey_time"));
    for bad in [
        "\"-1h\"",
        "-5",
        "\"24 hours\"",
        "\"24x\"",
        "\"400d\"",
        "true",
    ] {
        let reason = one_error(
            "rekey_time = \"4h\"",
            &format!("rekey_time = \"4h\"\nreauth_time = {bad}"),
            &k("reauth_time"),
        );
        assert!(!reason.is_empty(), "{bad}");
    }
    one_error(
        "rekey_time = \"4h\"",
        "rekey_time = \"4h\"\nreauth_time = \"1h\"\nrand_time = \"1h\"",
        &k("rand_time"),
    );
    one_error(
        "rekey_time = \"4h\"",
        "rekey_time = \"4h\"\nrand_time = \"5h\"",
        &k("rand_time"),
    );
    one_error("dpd_delay", "unknown_key = 1\ndpd_delay", &k("unknown_key"));
    one_error(
        "local = { id = \"192.0.2.1\", auth = \"psk\" }",
        "",
        &k("local"),
    );
    one_error(
        "auth = \"psk\" }\nremote",
        "auth = \"pubkey\" }\nremote",
        &k("local.certs"),
    );
    one_error(
        "auth = \"psk\" }\nremote",
        "auth = \"xauth\" }\nremote",
        &k("local.auth"),
    );
    one_error(
        "{ id = \"192.0.2.1\", auth = \"psk\" }",
        "{ id = \"192.0.2.1\" }",
        &k("local.auth"),
    );
    one_error("{ id = \"192.0.2.1\", auth", "{ auth", &k("local.id"));
    one_error(
        "{ id = \"192.0.2.1\", auth",
        "{ id = \"%any\", auth",
        &k("local.id"),
    );
    one_error(
        "{ id = \"192.0.2.1\", auth",
        "{ id = \"XX=x, O=y\", auth",
        &k("local.id"),
    );
    one_error(
        "{ id = \"@peer.example.org\"",
        "{ id = \"@#zz\"",
        &k("remote.id"),
    );
    one_error(
        "{ id = \"@peer.example.org\"",
        "{ id = \"@\"",
        &k("remote.id"),
    );
    one_error(
        "auth = \"psk\" }\n\n",
        "auth = \"psk\", extra = 1 }\n\n",
        &k("remote.extra"),
    );
    let t = base();
    let es = parse_text(&t[..t.find("[[connection.children]]").unwrap()]).unwrap_err();
    assert_eq!(es[0].key, k("children"), "{es:?}");
}

#[test]
fn psk_errors_never_show_the_key() {
    let k = |s: &str| format!("ike.connection[0].{s}");
    let psk_line = format!("psk = \"{PSK}\"");
    // Too short, bad hex, wrong type, missing, both given: each named, none quoting the value (errors() checks).
    one_error(&psk_line, "psk = \"horse\"", &k("psk"));
    one_error(&psk_line, "psk = \"0xhorsehorsehorsehorse\"", &k("psk"));
    one_error(&psk_line, "psk = 12345678901234567", &k("psk"));
    one_error(&psk_line, "", &k("psk"));
    one_error(
        &psk_line,
        &format!("{psk_line}\npsk_file = \"/x\""),
        &k("psk_file"),
    );
    // Hex: the bytes it spells.
    let t = base().replace(&psk_line, "psk = \"0x000102030405060708090a0b0c0d0e0f\"");
    let c = parse_text(&t).unwrap();
    assert_eq!(
        c.connections[0].psk.as_ref().unwrap().expose(),
        &(0..16).collect::<Vec<u8>>()[..]
    );
}

#[test]
fn psk_file_readable_by_root_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = crate::runtime::state::test_dir("ike-psk");
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("site.psk");
    std::fs::write(&f, format!("{PSK}\n")).unwrap();
    let psk_line = format!("psk = \"{PSK}\"");
    let with_file = |mode: u32| {
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        let t = base().replace(&psk_line, &format!("psk_file = \"{}\"", f.display()));
        parse_text(&t)
    };
    // Ours (root's, or this process's user's when not root) and 0600: read.
    let c = with_file(0o600).unwrap();
    assert_eq!(
        c.connections[0].psk.as_ref().unwrap().expose(),
        PSK.as_bytes()
    );
    for mode in [0o644, 0o640, 0o604] {
        let e = with_file(mode).unwrap_err();
        assert_eq!(e[0].key, "ike.connection[0].psk_file");
        assert!(e[0].reason.contains("0600"), "{e:?}");
        assert!(!e[0].to_string().contains(PSK));
    }
    std::fs::write(&f, "tiny7\n").unwrap();
    let e = with_file(0o600).unwrap_err();
    assert!(!e[0].to_string().contains("tiny7"), "{e:?}");
    let t = base().replace(&psk_line, "psk_file = \"/nonexistent/psk\"");
    assert_eq!(
        parse_text(&t).unwrap_err()[0].key,
        "ike.connection[0].psk_file"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn child_errors_name_their_key() {
    let k = |s: &str| format!("ike.connection[0].children[0].{s}");
    one_error("name = \"net\"", "name = \"\"", &k("name"));
    one_error(
        "local_ts = [\"10.1.0.0/16\"]",
        "local_ts = [\"10.1.0.1/16\"]",
        &k("local_ts[0]"),
    );
    one_error(
        "local_ts = [\"10.1.0.0/16\"]",
        "local_ts = []",
        &k("local_ts"),
    );
    one_error(
        "\"10.3.0.1/32[tcp/80]\"",
        "\"10.3.0.1/32[tcp/80\"",
        &k("remote_ts[1]"),
    );
    one_error(
        "\"10.3.0.1/32[tcp/80]\"",
        "\"10.3.0.1/32[gre/80]\"",
        &k("remote_ts[1]"),
    );
    one_error(
        "\"10.3.0.1/32[tcp/80]\"",
        "\"10.3.0.1/32[tcp/90-80]\"",
        &k("remote_ts[1]"),
    );
    one_error(
        "\"10.3.0.1/32[tcp/80]\"",
        "\"10.3.0.1/32[icmp/80]\"",
        &k("remote_ts[1]"),
    );
    one_error(
        "\"10.3.0.1/32[tcp/80]\"",
        "\"10.3.0.1/32[tcp/x]\"",
        &k("remote_ts[1]"),
    );
    one_error("\"10.3.0.1/32[tcp/80]\"", "\"nowhere\"", &k("remote_ts[1]"));
    let r = one_error(
        "\"aes128-sha256\"]",
        "\"aes128-sha256-prfsha256\"]",
        &k("esp_proposals[1]"),
    );
    assert!(r.contains("prfsha256"), "a known keyword is named: {r}");
    one_error(
        "\"aes128-sha256\"]",
        "\"aes128-bogus\"]",
        &k("esp_proposals[1]"),
    );
    one_error(
        "esp_proposals = [\"aes256gcm16-ecp384\", \"aes128-sha256\"]",
        "",
        &k("esp_proposals"),
    );
    one_error(
        "start_action = \"start\"",
        "start_action = \"later\"",
        &k("start_action"),
    );
    one_error(
        "start_action = \"start\"",
        "dpd_action = \"x\"",
        &k("dpd_action"),
    );
    one_error(
        "start_action = \"start\"",
        "close_action = \"x\"",
        &k("close_action"),
    );
    one_error("start_action = \"start\"", "mode = \"beet\"", &k("mode"));
    one_error(
        "start_action = \"start\"",
        "rekey_time = \"1h\"\nlife_time = \"30m\"",
        &k("life_time"),
    );
    one_error(
        "start_action = \"start\"",
        "rand_time = \"2h\"",
        &k("rand_time"),
    );
    one_error(
        "replay_window = 128",
        "replay_window = 2000000",
        &k("replay_window"),
    );
    one_error(
        "replay_window = 128",
        "replay_window = 128\nwhatever = 1",
        &k("whatever"),
    );
    // dynamic needs the side's address.
    one_error(
        "remote_addrs = [\"198.51.100.1\"]\n",
        "",
        &k("remote_ts[2]"),
    );
    // A trap initiates: not on a responder-only connection.
    let t = base()
        .replace("remote_addrs = [\"198.51.100.1\"]\n", "")
        .replace(", \"dynamic\"]", "]")
        .replace("start_action = \"start\"", "start_action = \"trap\"");
    let es = parse_text(&t).unwrap_err();
    assert!(
        es.iter()
            .any(|e| e.key == k("start_action") && e.reason.contains("remote_addrs")),
        "{es:?}"
    );
    assert!(
        parse_text(&base().replace("start_action = \"start\"", "start_action = \"trap\"")).is_ok()
    );
    // Two children of one name, two connections of one name.
    let t = base();
    let child = &t[t.find("[[connection.children]]").unwrap()..];
    let es = parse_text(&format!("{t}{child}")).unwrap_err();
    assert_eq!(es[0].key, "ike.connection[0].children[1].name", "{es:?}");
    let es = parse_text(&format!("{t}{t}")).unwrap_err();
    assert_eq!(es[0].key, "ike.connection[1].name", "{es:?}");
}

#[test]
fn every_error_is_reported_at_once() {
    let t = base()
        .replace("name = \"net\"", "name = \"net\"\nmode = \"beet\"")
        .replace("dpd_delay = \"30s\"", "dpd_delay = \"x\"")
        .replace("\"aes128-sha256\"]", "\"aes128-md4\"]");
    let keys: Vec<String> = parse_text(&t)
        .unwrap_err()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(
        keys,
        [
            "ike.connection[0].dpd_delay",
            "ike.connection[0].children[0].esp_proposals[1]",
            "ike.connection[0].children[0].mode",
        ]
    );
}

/// Every ESP algorithm the IKE crate parses maps to a suite the IP engine builds SAs of (with the key lengths
/// the IKE key schedule derives).
#[test]
fn every_esp_algorithm_is_one_the_engine_installs() {
    for e in Encr::ALL {
        let integs: Vec<Option<Integ>> = if e.is_aead() {
            vec![None]
        } else {
            Integ::ALL.iter().map(|&i| Some(i)).collect()
        };
        for i in integs {
            let s = esp_suite(e, i).unwrap_or_else(|| panic!("{e:?} {i:?}"));
            assert_eq!(s.enc.key_len(), e.keymat_len(), "{e:?}");
            assert_eq!(s.integ.map(|x| x.key_len()), i.map(|x| x.key_len()));
            assert_eq!(s.integ.map(|x| x.icv_len()), i.map(|x| x.icv_len()));
        }
        // An AEAD with an integrity algorithm, or CBC without, is no suite.
        let wrong = if e.is_aead() {
            Some(Integ::HmacSha256_128)
        } else {
            None
        };
        assert!(esp_suite(e, wrong).is_none(), "{e:?}");
    }
}

#[test]
fn durations_and_identities() {
    for (v, s) in [
        ("30", 30),
        ("\"30\"", 30),
        ("\"30s\"", 30),
        ("\"10m\"", 600),
        ("\"4h\"", 14400),
        ("\"1d\"", 86400),
    ] {
        let v: toml::Value = toml::from_str(&format!("x = {v}")).unwrap();
        assert_eq!(
            duration(v["x"].clone(), "k").unwrap(),
            Duration::from_secs(s)
        );
    }
    for bad in ["-1", "\"1y\"", "\"\"", "1.5", "\"400d\""] {
        let v: toml::Value = toml::from_str(&format!("x = {bad}")).unwrap();
        assert_eq!(duration(v["x"].clone(), "k").unwrap_err().key, "k", "{bad}");
    }
    assert_eq!(identity("%any", true), Ok(Identity::Any));
    assert_eq!(
        identity("user@example.org", false),
        Ok(Identity::Email("user@example.org".into()))
    );
    assert_eq!(
        identity("vpn.example.org", false),
        Ok(Identity::Fqdn("vpn.example.org".into()))
    );
    assert_eq!(identity("@#0a0b", false), Ok(Identity::KeyId(vec![10, 11])));
    assert_eq!(
        identity("2001:db8::1", false),
        Ok(Identity::Ipv6("2001:db8::1".parse().unwrap()))
    );
    assert!(identity("a b", false).is_err());
}

#[test]
fn hybrid_proposals_and_the_key_exchanges_netveil_cannot_do() {
    let k = |s: &str| format!("ike.connection[0].{s}");
    let kc = |s: &str| format!("ike.connection[0].children[0].{s}");
    // strongSwan 6's syntax for a hybrid IKE SA, with the classic proposal after it for older peers.
    let t = base().replacen(
        "proposals = [\"aes256gcm16-prfsha384-ecp384\", \"aes128-sha256-modp2048\"]",
        "proposals = [\"aes256gcm16-prfsha384-x25519-ke1_mlkem768\", \"aes256gcm16-prfsha384-x25519\"]",
        1,
    );
    let c = parse_text(&t).expect("hybrid accepted");
    let p = &c.connections[0].proposals;
    assert_eq!(
        p[0].to_string(),
        "aes256gcm16-prfsha384-x25519-ke1_mlkem768"
    );
    assert_eq!(p[1].to_string(), "aes256gcm16-prfsha384-x25519");
    let ike = "proposals = [\"aes256gcm16-prfsha384-ecp384\", \"aes128-sha256-modp2048\"]";
    let r = one_error(
        ike,
        "proposals = [\"aes256gcm16-prfsha384-mlkem768\"]",
        &k("proposals[0]"),
    );
    assert!(
        r.contains("only supported as an additional key exchange"),
        "{r}"
    );
    let r = one_error(
        ike,
        "proposals = [\"aes256gcm16-prfsha384-x25519\", \"aes256gcm16-prfsha384-x25519-ke1_ecp384\"]",
        &k("proposals[1]"),
    );
    assert!(r.contains("only mlkem768"), "{r}");
    let r = one_error(
        "esp_proposals = [\"aes256gcm16-ecp384\", \"aes128-sha256\"]",
        "esp_proposals = [\"aes256gcm16-x25519-ke1_mlkem768\"]",
        &kc("esp_proposals[0]"),
    );
    assert!(r.contains("IKE SA only"), "{r}");
}

/// `psk_file` through [`crate::runtime::secret_file`]: every refusal (mode, owner, link, FIFO, directory) names the key and
/// the file, never the key.
#[test]
fn psk_file_is_checked_as_opened() {
    use crate::runtime::secret_file::{tests::every_refusal, Level};
    let psk_line = format!("psk = \"{PSK}\"");
    every_refusal(
        "ike-psk",
        Level::Secret,
        "ike.connection[0].psk_file",
        format!("{PSK}\n").as_bytes(),
        PSK,
        true,
        &|p| {
            let t = base().replace(&psk_line, &format!("psk_file = \"{}\"", p.display()));
            parse_text(&t).map(|_| ()).map_err(|es| {
                es.iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
        },
    );
}

/// Public-key authentication sections.
mod pubkey;
