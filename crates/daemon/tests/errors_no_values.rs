//! Errors name the key and what was expected, never the value given (issue 21, item 7): a distinctive marker is
//! submitted in every key of `[interface]`, `[[sa]]`, `[[policy]]`, `[psp]` and `[l2sec]` (and `[[l2sec.peer]]`),
//! as a value of the wrong type and of the wrong content, through the file parser, the runtime's `sa add` and
//! `policy add` tables, and the control socket's request parser. No error may show the marker, in its key or its
//! reason; and for every key at least one of the values is refused with an error that names that key (the
//! positive control: the checks run).
//!
//! Issue 40 adds `[pilsc]` (and `[[pilsc.rule]]`) and `[ike]` (connections, children, `local`/`remote`), and the
//! files they and `[l2sec]` and `[psp]` read: the PILSC rule and key files, IKE's `psk_file` and private key,
//! l2sec's `group_secret_file` and `signing_key`, PSP's TLS key, and a configuration file that is not valid TOML,
//! each holding a recognisable key (as hex, and as the text the hex spells) in every place an error could quote it.
//! The log is captured at trace level meanwhile and checked too. A key that names a file shows that file in its
//! errors (operators need it), except where its name looks like a key (`0x...`, or 16 hex digits or more): those
//! keys are driven with values of other types and with such names only.

use netveil_daemon::engines::ip::config::{policy_from_table, sa_from_table, Config, ConfigError};
use netveil_daemon::engines::l2::L2Config;
use toml::{Table, Value};

/// What must never show: the markers in the values below.
const MARKERS: [&str; 3] = ["SECRETVALUE123", "9876543210", "9876.5"];

/// Values of every kind, each holding a marker: strings (plain, and with a quote, a newline and a semicolon),
/// an integer, a float, an array and a table.
fn bad_values() -> Vec<Value> {
    let mut t = Table::new();
    t.insert("x".into(), Value::String("SECRETVALUE123".into()));
    vec![
        Value::String("SECRETVALUE123".into()),
        Value::String("SECRETVALUE123\"\n; meta l4proto != 255 accept".into()),
        Value::String("0x9876543210".into()),
        Value::String("SECRETVALUE123/24".into()),
        Value::String("SECRETVALUE123-9876543210".into()),
        Value::Integer(98765432101),
        Value::Integer(-98765432101),
        Value::Float(9876.5),
        Value::Array(vec![Value::String("SECRETVALUE123".into())]),
        Value::Array(vec![Value::Integer(98765432101)]),
        Value::Table(t),
    ]
}

fn assert_clean(e: &ConfigError, what: &str) {
    let shown = format!("{} {} {e}", e.key, e.reason);
    for m in MARKERS {
        assert!(!shown.contains(m), "{what}: the error shows the value: {e}");
    }
}

fn base_ip() -> Table {
    toml::from_str(
        r#"
[interface]
name = "nv0"
addresses = ["198.51.100.1/24"]
state_dir = "/nonexistent/netveil-state"

[[sa]]
name = "a"
direction = "out"
spi = 0x1001
local = "192.0.2.1"
remote = "192.0.2.2"
suite = "aes128gcm16"
enc_key = "00112233445566778899aabbccddeeff01020304"

[[policy]]
name = "p"
direction = "out"
src = "198.51.100.1/32"
dst = "198.51.100.2/32"
proto = "udp"
action = "protect"
sas = ["a"]
"#,
    )
    .unwrap()
}

fn base_psp() -> Table {
    toml::from_str(
        r#"
[interface]
name = "nv0"
[psp]
mode = "tunnel"
local = "192.0.2.1"
remote = "192.0.2.2"
cert = "a.crt"
key = "a.key"
peer_ca = "b.crt"
peer_name = "b"
"#,
    )
    .unwrap()
}

fn base_l2() -> Table {
    toml::from_str(
        r#"
[l2sec]
interface = "eth0"
address = "192.0.2.10/24"
group_secret = "1111111111111111111111111111111111111111111111111111111111111111"

[[l2sec.peer]]
mac = "02:00:5e:00:53:0b"
public_key = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
"#,
    )
    .unwrap()
}

const SA_KEYS: [&str; 23] = [
    "name",
    "direction",
    "protocol",
    "spi",
    "mode",
    "local",
    "remote",
    "suite",
    "enc_key",
    "auth_key",
    "esn",
    "replay_window",
    "encap",
    "local_port",
    "remote_port",
    "tfc_pad_to",
    "lifetime",
    "lifetime.soft_bytes",
    "lifetime.hard_bytes",
    "lifetime.soft_packets",
    "lifetime.hard_packets",
    "lifetime.soft_seconds",
    "lifetime.hard_seconds",
];
const POLICY_KEYS: [&str; 10] = [
    "name",
    "direction",
    "src",
    "dst",
    "proto",
    "src_ports",
    "dst_ports",
    "action",
    "sas",
    "protocol",
];
const INTERFACE_KEYS: [&str; 12] = [
    "name",
    "addresses",
    "mtu",
    "routes",
    "fwmark",
    "nat_t_port",
    "allow_null_null",
    "default_policy",
    "offload",
    "control_socket",
    "state_dir",
    "block_when_stopped",
];
const PSP_KEYS: [&str; 13] = [
    "version",
    "mode",
    "local",
    "remote",
    "control_port",
    "cert",
    "key",
    "peer_ca",
    "peer_name",
    "rotate_seconds",
    "replay_window",
    "crypt_offset",
    "vc",
];
const L2_KEYS: [&str; 24] = [
    "interface",
    "tap",
    "address",
    "group_secret",
    "group_secret_file",
    "group_suite",
    "suites",
    "dh_groups",
    "lifetime_seconds",
    "rekey_margin_seconds",
    "ethertype",
    "signing_key",
    "require_signatures",
    "state_dir",
    "replay_window",
    "security_number",
    "timestamps",
    "timestamp_tolerance",
    "insecure_ecb",
    "insecure_null",
    "mtu",
    "offload",
    "control_socket",
    "peer",
];
const L2_PEER_KEYS: [&str; 3] = ["mac", "public_key", "ip"];

/// `t` with `key` (`a.b`: in the table `a`) set to `v`.
fn with(t: &Table, key: &str, v: &Value) -> Table {
    let mut t = t.clone();
    match key.split_once('.') {
        Some((outer, inner)) => {
            let mut sub = Table::new();
            sub.insert(inner.into(), v.clone());
            t.insert(outer.into(), Value::Table(sub));
        }
        None => {
            t.insert(key.into(), v.clone());
        }
    }
    t
}

/// Runs `parse` on every bad value in every key of a table (`set(key, value)` gives the input), checks each error
/// and that some error names `prefix` + key.
fn each_key(
    keys: &[&str],
    prefix: &str,
    set: impl Fn(&str, &Value) -> Result<(), Vec<ConfigError>>,
) {
    each_key_of(keys, prefix, |_| bad_values(), set)
}

/// [`each_key`] with the bad values of each key given by `values`.
fn each_key_of(
    keys: &[&str],
    prefix: &str,
    values: impl Fn(&str) -> Vec<Value>,
    set: impl Fn(&str, &Value) -> Result<(), Vec<ConfigError>>,
) {
    for key in keys {
        let want = format!("{prefix}{}", key.split('.').next().unwrap());
        let mut named = false;
        for v in values(key) {
            if let Err(errors) = set(key, &v) {
                for e in &errors {
                    assert_clean(e, &format!("{prefix}{key} = {v}"));
                    named |= e.key == want
                        || e.key.starts_with(&format!("{want}."))
                        || e.key.starts_with(&format!("{want}["));
                }
            }
        }
        assert!(named, "no error named {want}");
    }
}

fn array_entry(t: &Table, section: &str) -> Table {
    t[section].as_array().unwrap()[0]
        .as_table()
        .unwrap()
        .clone()
}

#[test]
fn the_file_parser_never_shows_a_value() {
    let base = base_ip();
    Config::parse(&toml::to_string(&base).unwrap()).expect("the base is valid");
    for (section, keys) in [("sa", &SA_KEYS[..]), ("policy", &POLICY_KEYS[..])] {
        each_key(keys, &format!("{section}[0]."), |key, v| {
            let mut t = base.clone();
            t.insert(
                section.into(),
                Value::Array(vec![Value::Table(with(
                    &array_entry(&base, section),
                    key,
                    v,
                ))]),
            );
            Config::parse_all(&toml::to_string(&t).unwrap()).map(|_| ())
        });
    }
    each_key(&INTERFACE_KEYS, "interface.", |key, v| {
        let mut t = base.clone();
        t.insert(
            "interface".into(),
            Value::Table(with(base["interface"].as_table().unwrap(), key, v)),
        );
        Config::parse_all(&toml::to_string(&t).unwrap()).map(|_| ())
    });
    let psp = base_psp();
    Config::parse(&toml::to_string(&psp).unwrap()).expect("the PSP base is valid");
    each_key(&PSP_KEYS, "psp.", |key, v| {
        let mut t = psp.clone();
        t.insert(
            "psp".into(),
            Value::Table(with(psp["psp"].as_table().unwrap(), key, v)),
        );
        Config::parse_all(&toml::to_string(&t).unwrap()).map(|_| ())
    });
    // A whole section of the wrong type, and a value in place of the array of tables.
    for (section, v) in [
        ("interface", Value::String("SECRETVALUE123".into())),
        ("sa", Value::String("SECRETVALUE123".into())),
        (
            "sa",
            Value::Array(vec![Value::String("SECRETVALUE123".into())]),
        ),
        ("policy", Value::Integer(98765432101)),
        ("psp", Value::Array(vec![Value::Integer(98765432101)])),
    ] {
        let mut t = base.clone();
        t.insert(section.into(), v);
        let errors = Config::parse_all(&toml::to_string(&t).unwrap()).unwrap_err();
        for e in &errors {
            assert_clean(e, section);
        }
        assert!(
            errors.iter().any(|e| e.key.starts_with(section)),
            "{errors:?}"
        );
    }
}

#[test]
fn the_runtime_tables_never_show_a_value() {
    let base = base_ip();
    let cfg = Config::parse(&toml::to_string(&base).unwrap()).unwrap();
    let sa = array_entry(&base, "sa");
    sa_from_table(sa.clone(), &cfg.interface, &[]).expect("the base SA is valid");
    each_key(&SA_KEYS, "sa.", |key, v| {
        sa_from_table(with(&sa, key, v), &cfg.interface, &[])
            .map(|_| ())
            .map_err(|e| vec![e])
    });
    let pol = array_entry(&base, "policy");
    policy_from_table(pol.clone(), false, &cfg.sas).expect("the base policy is valid");
    each_key(&POLICY_KEYS, "policy.", |key, v| {
        policy_from_table(with(&pol, key, v), false, &cfg.sas)
            .map(|_| ())
            .map_err(|e| vec![e])
    });
}

#[test]
fn the_l2sec_parser_never_shows_a_value() {
    let base = base_l2();
    let parse = |t: &Table| {
        L2Config::parse(
            &toml::to_string(t).unwrap(),
            std::path::Path::new("/nonexistent"),
        )
        .map(|_| ())
        .map_err(|e| vec![e])
    };
    parse(&base).expect("the l2sec base is valid");
    let l2 = base["l2sec"].as_table().unwrap().clone();
    each_key(&L2_KEYS, "l2sec.", |key, v| {
        let mut t = base.clone();
        t.insert("l2sec".into(), Value::Table(with(&l2, key, v)));
        parse(&t)
    });
    let peer = array_entry(&l2, "peer");
    each_key(&L2_PEER_KEYS, "l2sec.peer[0].", |key, v| {
        let mut l = l2.clone();
        l.insert(
            "peer".into(),
            Value::Array(vec![Value::Table(with(&peer, key, v))]),
        );
        let mut t = base.clone();
        t.insert("l2sec".into(), Value::Table(l));
        parse(&t)
    });
}

/// The control socket's request parser: refused lines never come back in the error.
#[test]
fn control_requests_never_show_a_value() {
    for line in [
        "SECRETVALUE123",
        r#"{"request":"SECRETVALUE123"}"#,
        r#"{"SECRETVALUE123":1}"#,
        r#"{"request":"sa-del","name":["SECRETVALUE123"]}"#,
        r#"{"request":"sa-del","name":98765432101}"#,
        r#"{"request":"sa-add","sa":"SECRETVALUE123"}"#,
        r#"{"request":"sa-update","name":"a","sa":["SECRETVALUE123"]}"#,
        r#"{"request":"events","since":"SECRETVALUE123"}"#,
        r#"{"request":"events","since":-98765432101}"#,
        r#"{"request":"policy-add","policy":{},"position":"SECRETVALUE123"}"#,
        r#"{"request":"policy-add","policy":{},"position":9876.5}"#,
        r#"{"request":"sa-del","name":"SECRETVALUE123""#,
        r#"{"request":"sa-del","name":"SECRETVALUE123"}}"#,
        "{\"request\":\"sa-del\",\"name\":\"SECRETVALUE123\n\"}",
    ] {
        let e = netveil_control::Request::parse(line).unwrap_err();
        for m in MARKERS {
            assert!(!e.contains(m), "{line}: {e}");
        }
    }
    // A well-formed request with a hostile name parses (the daemon's check of names refuses it, see ip_ctl).
    assert!(netveil_control::Request::parse(r#"{"request":"sa-del","name":"a\"b"}"#).is_ok());
}

// ---- Files of keys and rules, PILSC and IKE (issue 40) ----

/// "SECRETVALUE1234" (15 bytes) as hex: one byte short of an AES-128 key.
const KEY_HEX: &str = "53454352455456414c554531323334";

/// What no error and no log line may show: the key as hex (whole, or its first 8 bytes), the text it spells, and
/// the markers of [`bad_values`].
fn assert_secret_kept(shown: &str, what: &str) {
    for m in [
        KEY_HEX,
        &KEY_HEX[..16],
        "SECRETVALUE",
        MARKERS[1],
        MARKERS[2],
    ] {
        assert!(!shown.contains(m), "{what}: shows {m}: {shown}");
    }
}

fn joined(es: &[ConfigError]) -> String {
    es.iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The log of `f` at trace level, and its result.
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    use std::sync::{Arc, Mutex};
    #[derive(Clone)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf(Arc::new(Mutex::new(Vec::new())));
    let w = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || w.clone())
        .finish();
    let r = tracing::subscriber::with_default(sub, f);
    let text = String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned();
    (r, text)
}

/// A scratch directory (the files in it are root's, or this process's user's: what the checks want).
fn scratch(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("nv-errors-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes `text` to `path` with `mode`.
fn put(path: &std::path::Path, text: &[u8], mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The bad values of a key that names a file: no string (it would be shown as the path) but one whose name looks
/// like a key.
fn path_values() -> Vec<Value> {
    bad_values()
        .into_iter()
        .filter(|v| !v.is_str() || v.as_str() == Some("0x9876543210"))
        .collect()
}

/// Rule-file texts with the key in every place: each tag's value (hex with and without 0x, the text it spells), a
/// tag of its own, the wrong-length literal of issue 40 (under AES-128 and AES-256), and its name in the key file.
fn rule_texts() -> Vec<String> {
    let base = [
        "Rule 1",
        "Security true",
        "IP 10.0.0.2",
        "Protocol TCP",
        "Port 5001",
        "Applmode Server",
        "Encryption 1",
        "Key web",
    ];
    let mut out = Vec::new();
    for i in 0..base.len() {
        let tag = base[i].split(' ').next().unwrap();
        for v in [
            format!("0x{KEY_HEX}"),
            KEY_HEX.repeat(2),
            "SECRETVALUE1234".into(),
        ] {
            // (`Key SECRETVALUE1234` is a key's name, which is shown: not driven.)
            if tag == "Key" && v.starts_with('S') {
                continue;
            }
            let mut lines: Vec<String> = base.iter().map(|s| s.to_string()).collect();
            lines[i] = format!("{tag} {v}");
            out.push(lines.join("\n"));
            out.push(format!("{}\n{v}\n", base.join("\n")));
        }
    }
    for cipher in ["1", "AES-256"] {
        out.push(format!(
            "Rule 1; Security true; IP 10.0.0.2; Protocol any; Encryption {cipher}; Key 0x{KEY_HEX}\n"
        ));
    }
    out
}

/// Key-file texts with the key in every place a line has.
fn key_texts() -> Vec<String> {
    vec![
        format!("0x{KEY_HEX}\n"),
        format!("web = {KEY_HEX}\n"),
        format!("web = 0x{KEY_HEX}zz\n"),
        format!("web = 0x{KEY_HEX}\n"),
        format!("0x{KEY_HEX} = 0x{KEY_HEX}\n0x{KEY_HEX} = 0x{KEY_HEX}\n"),
        format!("{} = 0x00\nweb = 0x{KEY_HEX}\n", KEY_HEX.repeat(2)),
    ]
}

#[test]
fn the_pilsc_section_and_its_files_never_show_a_key() {
    let d = scratch("pilsc");
    let rules = d.join("p.rules");
    let keys = d.join("p.keys");
    let good_rules =
        "Rule 1; Security true; IP 10.0.0.2; Protocol TCP; Port 5001; Applmode Server; \
                      Encryption 1; Key web\n";
    put(&rules, good_rules.as_bytes(), 0o644);
    put(&keys, b"web = 0x000102030405060708090a0b0c0d0e0f\n", 0o600);
    let base: Table = toml::from_str(
        "[pilsc]\nrules = \"p.rules\"\nkeys = \"p.keys\"\nstate_dir = \"/nonexistent/state\"\n",
    )
    .unwrap();
    let parse = |t: &Table| netveil_daemon::parse_all(&toml::to_string(t).unwrap(), &d).map(|_| ());
    let ((), log) = logged(|| {
        parse(&base).expect("the PILSC base is valid");
        let pilsc = base["pilsc"].as_table().unwrap().clone();
        const PATHS: [&str; 4] = ["rules", "keys", "state_dir", "control_socket"];
        each_key_of(
            &PILSC_KEYS,
            "pilsc.",
            |k| {
                if PATHS.contains(&k) {
                    path_values()
                } else {
                    bad_values()
                }
            },
            |key, v| {
                let mut t = base.clone();
                t.insert("pilsc".into(), Value::Table(with(&pilsc, key, v)));
                parse(&t)
            },
        );
        // The files' contents.
        for text in rule_texts() {
            put(&rules, text.as_bytes(), 0o644);
            let e = parse(&base).expect_err(&text);
            assert_secret_kept(&joined(&e), &text);
        }
        put(&rules, good_rules.as_bytes(), 0o644);
        for text in key_texts() {
            put(&keys, text.as_bytes(), 0o600);
            if let Err(e) = parse(&base) {
                assert_secret_kept(&joined(&e), &text);
            }
        }
        // The same rules as [[pilsc.rule]] tables: every key of a rule, and the wrong-length literal.
        let rule: Table = toml::from_str(
            "rule = 1\nsecurity = true\nip = \"10.0.0.2\"\nprotocol = \"tcp\"\nport = 5001\n\
             applmode = \"server\"\nencryption = 1\nkey = \"0x000102030405060708090a0b0c0d0e0f\"\n",
        )
        .unwrap();
        let tables = |r: Table| {
            let mut p = Table::new();
            p.insert("rule".into(), Value::Array(vec![Value::Table(r)]));
            p.insert("state_dir".into(), "/nonexistent/state".into());
            let mut t = Table::new();
            t.insert("pilsc".into(), Value::Table(p));
            t
        };
        parse(&tables(rule.clone())).expect("the [[pilsc.rule]] base is valid");
        each_key_of(
            &PILSC_RULE_KEYS,
            "pilsc.rule[0].",
            // (A key's name is shown: the text markers stand for a name there.)
            |k| {
                let mut v = bad_values();
                if k == "key" {
                    v.retain(|v| !v.as_str().is_some_and(|s| s.starts_with('S')));
                    v.push(Value::String(format!("0x{KEY_HEX}")));
                }
                v
            },
            |key, v| parse(&tables(with(&rule, key, v))),
        );
    });
    assert_secret_kept(&log, "the log");
    let _ = std::fs::remove_dir_all(&d);
}

const PILSC_KEYS: [&str; 12] = [
    "rules",
    "rule",
    "keys",
    "mode",
    "queue",
    "replay_window",
    "max_sources",
    "iptables",
    "control_socket",
    "control_group",
    "state_dir",
    "allow_volatile_state",
];
const PILSC_RULE_KEYS: [&str; 8] = [
    "rule",
    "security",
    "ip",
    "protocol",
    "port",
    "encryption",
    "applmode",
    "key",
];

const IKE_KEYS: [&str; 5] = [
    "retransmit_timeout",
    "retransmit_base",
    "retransmit_tries",
    "socket_mark",
    "connection",
];
const IKE_CONN_KEYS: [&str; 16] = [
    "name",
    "local_addrs",
    "remote_addrs",
    "remote_port",
    "proposals",
    "encap",
    "fragmentation",
    "local",
    "remote",
    "psk",
    "psk_file",
    "dpd_delay",
    "rekey_time",
    "reauth_time",
    "over_time",
    "rand_time",
];
const IKE_CHILD_KEYS: [&str; 12] = [
    "name",
    "local_ts",
    "remote_ts",
    "esp_proposals",
    "mode",
    "rekey_time",
    "life_time",
    "rand_time",
    "start_action",
    "dpd_action",
    "close_action",
    "replay_window",
];
const IKE_AUTH_KEYS: [&str; 5] = ["id", "auth", "certs", "cacerts", "key"];

fn base_ike() -> Table {
    toml::from_str(
        r#"
[ike]
retransmit_tries = 3
[[ike.connection]]
name = "site"
local_addrs = ["192.0.2.1"]
remote_addrs = ["198.51.100.1"]
proposals = ["aes256gcm16-prfsha384-ecp384"]
psk = "correct-horse-battery-staple-0123"
local = { id = "192.0.2.1", auth = "psk" }
remote = { id = "@peer.example.org", auth = "psk" }
[[ike.connection.children]]
name = "net"
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.2.0.0/16"]
esp_proposals = ["aes256gcm16"]
"#,
    )
    .unwrap()
}

#[test]
fn the_ike_section_and_its_files_never_show_a_key() {
    let d = scratch("ike");
    let parse =
        |t: &Table| netveil_daemon::drivers::ike::config::parse(t["ike"].clone(), &d).map(|_| ());
    let base = base_ike();
    let ((), log) = logged(|| {
        parse(&base).expect("the IKE base is valid");
        let ike = base["ike"].as_table().unwrap().clone();
        let conn = array_entry(&ike, "connection");
        let child = array_entry(&conn, "children");
        let set_conn = |c: Table| {
            let mut i = ike.clone();
            i.insert("connection".into(), Value::Array(vec![Value::Table(c)]));
            let mut t = base.clone();
            t.insert("ike".into(), Value::Table(i));
            t
        };
        each_key(&IKE_KEYS, "ike.", |key, v| {
            let mut t = base.clone();
            t.insert("ike".into(), Value::Table(with(&ike, key, v)));
            parse(&t)
        });
        let no_psk = {
            let mut c = conn.clone();
            c.remove("psk");
            c
        };
        each_key_of(
            &IKE_CONN_KEYS,
            "ike.connection[0].",
            |k| {
                if k == "psk_file" {
                    path_values()
                } else {
                    bad_values()
                }
            },
            |key, v| {
                let c = if key == "psk_file" { &no_psk } else { &conn };
                parse(&set_conn(with(c, key, v)))
            },
        );
        each_key(
            &IKE_CHILD_KEYS,
            "ike.connection[0].children[0].",
            |key, v| {
                let mut c = conn.clone();
                c.insert(
                    "children".into(),
                    Value::Array(vec![Value::Table(with(&child, key, v))]),
                );
                parse(&set_conn(c))
            },
        );
        for side in ["local", "remote"] {
            let auth = conn[side].as_table().unwrap().clone();
            each_key_of(
                &IKE_AUTH_KEYS,
                &format!("ike.connection[0].{side}."),
                |k| {
                    if ["certs", "cacerts", "key"].contains(&k) {
                        path_values()
                    } else {
                        bad_values()
                    }
                },
                |key, v| {
                    let mut c = conn.clone();
                    c.insert(side.into(), Value::Table(with(&auth, key, v)));
                    parse(&set_conn(c))
                },
            );
        }
        // psk_file's contents: the key as text, short and long; hex, short and not hex.
        let psk = d.join("site.psk");
        for text in [
            "SECRETVALUE1".to_string(),
            format!("0x{}", &KEY_HEX[..20]),
            format!("0x{KEY_HEX}zz"),
            format!("0x{KEY_HEX}\n\n"),
        ] {
            put(&psk, text.as_bytes(), 0o600);
            let mut c = no_psk.clone();
            c.insert("psk_file".into(), psk.display().to_string().into());
            if let Err(e) = parse(&set_conn(c)) {
                assert_secret_kept(&joined(&e), &text);
            }
        }
        // A private key file that is not one (PEM armour around the key's text, the key's hex bytes).
        let certs = format!("{}/../ike/testdata/certs", env!("CARGO_MANIFEST_DIR"));
        let key = d.join("moon.key");
        for text in [
            format!("-----BEGIN PRIVATE KEY-----\nSECRETVALUE1234{KEY_HEX}\n-----END PRIVATE KEY-----\n"),
            format!("{KEY_HEX}{KEY_HEX}"),
            "SECRETVALUE1234".to_string(),
        ] {
            put(&key, text.as_bytes(), 0o600);
            let mut c = no_psk.clone();
            let local: Table = toml::from_str(&format!(
                "id = \"moon.netveil.test\"\nauth = \"pubkey\"\ncerts = [\"{certs}/moon.der\"]\nkey = \"{}\"\n",
                key.display()
            ))
            .unwrap();
            c.insert("local".into(), Value::Table(local));
            let e = parse(&set_conn(c)).expect_err(&text);
            assert_secret_kept(&joined(&e), &text);
            assert!(e.iter().any(|e| e.key == "ike.connection[0].local.key"), "{e:?}");
        }
    });
    assert_secret_kept(&log, "the log");
    let _ = std::fs::remove_dir_all(&d);
}

/// l2sec's key files and PSP's TLS key, holding the key where a key does not belong; and configuration texts that
/// are not valid TOML around a key.
#[test]
fn l2sec_and_psp_key_files_and_broken_toml_never_show_a_key() {
    let d = scratch("l2-psp");
    let ((), log) = logged(|| {
        let f = d.join("secret");
        let l2 = |key: &str| {
            let mut t = base_l2();
            let mut l = t["l2sec"].as_table().unwrap().clone();
            if key == "group_secret_file" {
                l.remove("group_secret");
            }
            l.insert(key.into(), f.display().to_string().into());
            t.insert("l2sec".into(), Value::Table(l));
            L2Config::parse(&toml::to_string(&t).unwrap(), &d)
                .map(|_| ())
                .map_err(|e| vec![e])
        };
        for key in ["group_secret_file", "signing_key"] {
            for text in [
                "SECRETVALUE1234".to_string(),
                KEY_HEX.to_string(),
                format!("0x{KEY_HEX}"),
                format!("{KEY_HEX}zz"),
            ] {
                put(&f, text.as_bytes(), 0o600);
                let e = l2(key).expect_err(&text);
                assert_secret_kept(&joined(&e), &text);
                assert_eq!(e[0].key, format!("l2sec.{key}"));
            }
        }
        // PSP: a key file that is not a key.
        let (crt, _) = netveil_daemon::drivers::psp_kx::keygen("a.kx.test", &d).unwrap();
        for text in [
            format!("-----BEGIN PRIVATE KEY-----\nSECRETVALUE1234{KEY_HEX}\n-----END PRIVATE KEY-----\n"),
            format!("{KEY_HEX}{KEY_HEX}"),
        ] {
            put(&f, text.as_bytes(), 0o600);
            let c = Config::parse(&format!(
                "[interface]\nname = \"nv0\"\n[psp]\nmode = \"tunnel\"\nlocal = \"192.0.2.1\"\n\
                 remote = \"192.0.2.2\"\ncert = \"{}\"\nkey = \"{}\"\npeer_ca = \"{0}\"\npeer_name = \"a.kx.test\"\n",
                crt.display(),
                f.display()
            ))
            .unwrap();
            let e = netveil_daemon::drivers::psp_kx::tls(c.psp.as_ref().unwrap())
                .err()
                .expect("not a key")
                .to_string();
            assert_secret_kept(&e, &text);
            assert!(e.starts_with("psp.key: "), "{e}");
        }
        // Not TOML, with a key in it.
        for text in [
            format!("[l2sec]\ngroup_secret = \"{KEY_HEX}\n"),
            format!("[l2sec]\ngroup_secret = {KEY_HEX}\n"),
            format!("[l2sec]\ngroup_secret = \"{KEY_HEX}\\q\"\n"),
            format!("[l2sec]\n{KEY_HEX}\n"),
            format!("[l2sec]\ngroup_secret = 0x{KEY_HEX}\n"),
            format!("[[sa]]\nenc_key = [\"{KEY_HEX}\",\n"),
            format!("[pilsc]\nrule = [{{ key = \"0x{KEY_HEX}\" }}\n"),
        ] {
            let e = netveil_daemon::parse_all(&text, &d).err().expect(&text);
            assert_secret_kept(&joined(&e), &text);
        }
    });
    assert_secret_kept(&log, "the log");
    let _ = std::fs::remove_dir_all(&d);
}
