//! The `[ike]` section through the daemon's runtime parser (the default registry): it is the IKE driver's, it
//! needs the IP engine (`[interface]`) to install into, refusing it is a configuration error (exit code 2)
//! naming `ike`, and no error shows a value given: a marker put in every key of a connection, its `local`,
//! `remote` and a child, as values of every type, never shows, and each key is named at least once (the checks
//! run).

use toml::{Table, Value};

const MARKERS: [&str; 2] = ["SECRETVALUE123", "9876543210"];

const CONN: &str = r#"
[[ike.connection]]
name = "site"
local_addrs = ["192.0.2.1"]
remote_addrs = ["198.51.100.1"]
proposals = ["aes256gcm16-prfsha384-ecp384"]
psk = "0123456789abcdef0123456789abcdef"
local = { id = "192.0.2.1", auth = "psk" }
remote = { id = "198.51.100.1", auth = "psk" }

[[ike.connection.children]]
name = "net"
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.2.0.0/16"]
esp_proposals = ["aes256gcm16"]
"#;

fn interface() -> String {
    let dir = std::env::temp_dir().join(format!("netveil-ike-config-{}", std::process::id()));
    format!("[interface]\nstate_dir = \"{}\"\n", dir.display())
}

#[test]
fn ike_needs_the_ip_engine() {
    let e = netveil_daemon::parse_all(CONN, std::path::Path::new("/"))
        .err()
        .expect("refused");
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].key, "ike");
    assert!(e[0].reason.contains("[interface]"), "{}", e[0].reason);
    assert_eq!(netveil_daemon::Error::Configs(e).exit_code(), 2);
    let s = netveil_daemon::parse_all(&format!("{}{CONN}", interface()), std::path::Path::new("/"))
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(s.drivers.len(), 1);
    assert_eq!(s.drivers[0].0.name(), "IKEv2");
    let c = s.drivers[0].1.check().unwrap();
    assert_eq!(c.summary, "1 IKE connection, 1 child");
}

#[test]
fn a_bad_ike_key_is_a_configuration_error_naming_it() {
    let text = format!(
        "{}{}",
        interface(),
        CONN.replace("aes256gcm16\"]", "aes256gcm16-md5\"]")
    );
    let e = netveil_daemon::parse_all(&text, std::path::Path::new("/"))
        .err()
        .expect("refused");
    assert_eq!(e[0].key, "ike.connection[0].children[0].esp_proposals[0]");
    assert_eq!(netveil_daemon::Error::Configs(e).exit_code(), 2);
}

fn bad_values() -> Vec<Value> {
    let mut t = Table::new();
    t.insert("x".into(), Value::String("SECRETVALUE123".into()));
    vec![
        Value::String("SECRETVALUE123".into()),
        Value::String("0xSECRETVALUE123".into()),
        Value::String("SECRETVALUE123/24".into()),
        Value::String("10.0.0.0/8[SECRETVALUE123]".into()),
        Value::String("@#SECRETVALUE123".into()),
        Value::Integer(98765432101),
        Value::Integer(-98765432101),
        Value::Float(9876543210.5),
        Value::Array(vec![Value::String("SECRETVALUE123".into())]),
        Value::Array(vec![Value::Integer(98765432101)]),
        Value::Table(t),
    ]
}

#[test]
fn no_ike_error_shows_a_value() {
    let base: Table = toml::from_str(CONN).unwrap();
    let conn = || base["ike"]["connection"][0].as_table().unwrap().clone();
    // (path of the table in a connection, its keys)
    let places: [(&[&str], &[&str]); 4] = [
        (
            &[],
            &[
                "name",
                "local_addrs",
                "remote_addrs",
                "remote_port",
                "proposals",
                "encap",
                "fragmentation",
                "psk",
                "psk_file",
                "dpd_delay",
                "rekey_time",
                "over_time",
                "rand_time",
                "local",
                "remote",
                "children",
            ],
        ),
        (&["local"], &["id", "auth"]),
        (&["remote"], &["id", "auth"]),
        (
            &["children", "0"],
            &[
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
            ],
        ),
    ];
    for (path, keys) in places {
        for key in keys {
            let mut named = false;
            for v in bad_values() {
                let mut c = conn();
                let mut t = &mut c;
                for p in path {
                    t = match p.parse::<usize>() {
                        Ok(i) => t.get_mut("children").unwrap().as_array_mut().unwrap()[i]
                            .as_table_mut()
                            .unwrap(),
                        Err(_) if *p == "children" => t,
                        Err(_) => t.get_mut(*p).unwrap().as_table_mut().unwrap(),
                    };
                }
                t.insert(key.to_string(), v.clone());
                let mut ike = Table::new();
                ike.insert("connection".into(), Value::Array(vec![Value::Table(c)]));
                let mut top = Table::new();
                top.insert("ike".into(), Value::Table(ike));
                let text = format!("{}{}", interface(), toml::to_string(&top).unwrap());
                let Err(es) = netveil_daemon::parse_all(&text, std::path::Path::new("/")) else {
                    continue;
                };
                for e in &es {
                    let shown = format!("{} {} {e}", e.key, e.reason);
                    for m in MARKERS {
                        assert!(
                            !shown.contains(m),
                            "{path:?}.{key} = {v}: shows the value: {e}"
                        );
                    }
                    let want = format!(
                        "ike.connection[0].{}{}{key}",
                        path.iter()
                            .map(|p| if p.parse::<usize>().is_ok() {
                                format!("[{p}].")
                            } else if *p == "children" {
                                "children".into()
                            } else {
                                format!("{p}.")
                            })
                            .collect::<String>(),
                        ""
                    );
                    named |= e.key.starts_with(&want);
                }
            }
            assert!(
                named,
                "no bad value of {path:?}.{key} was refused naming it"
            );
        }
    }
}

/// The README's `[ike]` example parses as documented (its PSK file replaced by an inline key: the file is
/// root's).
#[test]
fn the_readme_example_parses() {
    let readme = include_str!("../../../README.md");
    let start = readme.find("### IKEv2").expect("the section");
    let block = &readme[start..];
    let block = &block[block.find("```toml\n").unwrap() + 8..];
    let block = &block[..block.find("```").unwrap()];
    let text = block.replace(
        "psk_file = \"/etc/netveil/site.psk\"",
        "psk = \"0123456789abcdef0123456789abcdef\"",
    );
    assert_ne!(text, block);
    // Every commented-out key as well (the defaults as written).
    let uncommented: String = text
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(kv) if kv.contains(" = ") => {
                let kv = kv.split("  #").next().unwrap();
                if kv.contains(", ") && !kv.contains('[') {
                    kv.replace(", ", "\n") + "\n"
                } else {
                    format!("{kv}\n")
                }
            }
            _ => format!("{l}\n"),
        })
        .collect();
    for t in [&text, &uncommented] {
        let s = netveil_daemon::parse_all(t, std::path::Path::new("/"))
            .unwrap_or_else(|e| panic!("{e:?}\n{t}"));
        assert_eq!(
            s.drivers[0].1.check().unwrap().summary,
            "1 IKE connection, 1 child"
        );
    }
}
