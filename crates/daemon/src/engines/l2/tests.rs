//! The `[l2sec]` section's parsing, the nftables table's text and the group epoch.

use super::config::*;
use super::setup::*;
use crate::runtime::config::ConfigError;
use crate::runtime::state::StateDir;
use netveil_l2sec::ed25519_dalek::SigningKey;
use std::net::Ipv4Addr;
use std::path::Path;

fn base() -> String {
    format!(
        "[l2sec]\ninterface = \"eth0\"\naddress = \"192.0.2.10/24\"\ngroup_secret = \"{}\"\n",
        "11".repeat(32)
    )
}

fn peer(seed: u8, mac: &str, ip: Option<&str>) -> String {
    let pk = hex::encode(
        SigningKey::from_bytes(&[seed; 32])
            .verifying_key()
            .as_bytes(),
    );
    let ip = ip.map(|i| format!("ip = \"{i}\"\n")).unwrap_or_default();
    format!("\n[[l2sec.peer]]\nmac = \"{mac}\"\npublic_key = \"{pk}\"\n{ip}")
}

fn parse(text: &str) -> std::result::Result<L2Config, ConfigError> {
    L2Config::parse(text, Path::new("/nonexistent"))
}

/// `l2sec.control_group` is resolved to its group id; an unknown group is an error naming the key.
#[test]
fn the_control_group_is_resolved() {
    let with =
        |g: &str| base().replace("[l2sec]\n", &format!("[l2sec]\ncontrol_group = \"{g}\"\n"));
    assert_eq!(parse(&with("nogroup")).unwrap().control_group, Some(65534));
    assert_eq!(parse(&base()).unwrap().control_group, None);
    let e = parse(&with("netveil-no-such-group")).err().unwrap();
    assert_eq!(e.key, "l2sec.control_group");
}

#[test]
fn signatures_are_required_by_default_when_peers_are_listed() {
    let none = parse(&base()).unwrap();
    assert!(!none.require_signatures);
    let with = base() + &peer(1, "02:00:5e:00:53:0b", None);
    assert!(parse(&with).unwrap().require_signatures);
    // An explicit false still works.
    let off = with.replace("[l2sec]\n", "[l2sec]\nrequire_signatures = false\n");
    assert!(!parse(&off).unwrap().require_signatures);
    let e = parse(&base().replace("[l2sec]\n", "[l2sec]\nrequire_signatures = true\n"))
        .err()
        .unwrap();
    assert_eq!(e.key, "l2sec.require_signatures");
}

#[test]
fn peer_addresses_are_bound_once() {
    let ok = base()
        + &peer(1, "02:00:5e:00:53:0b", Some("192.0.2.11"))
        + &peer(2, "02:00:5e:00:53:0c", None);
    let c = parse(&ok).unwrap();
    assert_eq!(
        c.peer_ips.get(&[2, 0, 0x5e, 0, 0x53, 0x0b]),
        Some(&Ipv4Addr::new(192, 0, 2, 11))
    );
    assert_eq!(c.peer_ips.len(), 1);
    let n = c.node_config(
        [2, 0, 0x5e, 0, 0x53, 0x0a],
        Ipv4Addr::new(192, 0, 2, 10),
        24,
        7,
    );
    assert_eq!(n.peer_ips, c.peer_ips);
    assert_eq!(n.epoch, 7);
    for (text, key) in [
        (
            base()
                + &peer(1, "02:00:5e:00:53:0b", Some("192.0.2.11"))
                + &peer(2, "02:00:5e:00:53:0c", Some("192.0.2.11")),
            "l2sec.peer[1].ip",
        ),
        (
            base() + &peer(1, "02:00:5e:00:53:0b", Some("192.0.2.10")),
            "l2sec.peer[0].ip",
        ),
        (
            base() + &peer(1, "02:00:5e:00:53:0b", Some("192.0.2")),
            "l2sec.peer[0].ip",
        ),
        (
            base() + &peer(1, "02:00:5e:00:53:0b", Some("255.255.255.255")),
            "l2sec.peer[0].ip",
        ),
    ] {
        assert_eq!(parse(&text).err().unwrap().key, key, "{text}");
    }
}

/// The port and the TAP device are interface names by the one rule of names (they reach the netdev table,
/// commands and log lines); the table's text keeps its structure whatever string it is given.
#[test]
fn interface_names_follow_the_rule_and_cannot_change_the_table() {
    for (key, line) in [("l2sec.interface", "interface = "), ("l2sec.tap", "tap = ")] {
        for evil in [
            "eth0\" priority -500; policy accept; }",
            "e\nx",
            "a b",
            "",
            "e*",
            "eeeeeeeeeeeeeeee",
        ] {
            let text = if key == "l2sec.tap" {
                base().replace(
                    "[l2sec]\n",
                    &format!("[l2sec]\n{line}{}\n", toml::Value::String(evil.into())),
                )
            } else {
                base().replace(
                    "interface = \"eth0\"",
                    &format!("{line}{}", toml::Value::String(evil.into())),
                )
            };
            let e = parse(&text).err().unwrap();
            assert_eq!(e.key, key, "{text}");
            assert!(evil.len() < 2 || !e.to_string().contains(evil), "{e}");
        }
    }
    let plain = netdev_table_text("netveil_l2_l2s0", "eth0", 0x88b5);
    let evil = netdev_table_text(
        "netveil_l2_l2s0",
        "e\" priority -500; policy accept; }\n  chain x { type filter hook ingress device \"e",
        0x88b5,
    );
    let unquoted = |t: &str| -> String { t.split('"').step_by(2).collect::<Vec<_>>().join("\"\"") };
    assert_eq!(unquoted(&evil), unquoted(&plain), "{evil}");
    assert_eq!(nft_table("l2s0"), "netveil_l2_l2s0");
    assert_eq!(nft_table("a b;}"), "netveil_l2_a_b__");
}

#[test]
fn state_dir_default_and_relative() {
    assert_eq!(
        parse(&base()).unwrap().state_dir,
        Path::new(crate::runtime::state::DEFAULT_STATE_DIR)
    );
    let c = parse(&base().replace("[l2sec]\n", "[l2sec]\nstate_dir = \"st\"\n")).unwrap();
    assert_eq!(c.state_dir, Path::new("/nonexistent/st"));
    assert!(!c.state_location().allow_volatile);
    let c = parse(&base().replace("[l2sec]\n", "[l2sec]\nallow_volatile_state = true\n")).unwrap();
    assert!(c.state_location().allow_volatile);
    assert!(!c.state_location().fresh_keys);
    let e = parse(&base().replace("[l2sec]\n", "[l2sec]\nstate_dir = \"\"\n"))
        .err()
        .unwrap();
    assert_eq!(e.key, "l2sec.state_dir");
}

#[test]
fn the_epoch_strictly_increases_and_persists_before_use() {
    let dir = crate::runtime::state::test_dir("l2-epoch");
    let st = StateDir::open(
        &crate::runtime::state::StateLocation::new(&dir),
        "l2sec.state_dir",
    )
    .unwrap();
    let now = 1_700_000_000_000_000u64;
    let e1 = next_epoch(&st, "eth0", now).unwrap();
    assert_eq!(e1, now);
    assert_eq!(st.read_u64("l2sec-eth0.epoch"), Ok(Some(e1)));
    // The same instant, and a clock gone back by an hour: still strictly increasing.
    let e2 = next_epoch(&st, "eth0", now).unwrap();
    assert_eq!(e2, e1 + 1);
    let e3 = next_epoch(&st, "eth0", now - 3_600_000_000).unwrap();
    assert_eq!(e3, e2 + 1);
    // Time moves on: the clock again.
    assert_eq!(next_epoch(&st, "eth0", now + 5).unwrap(), now + 5);
    // Another port has its own epoch; a clock at 0 still gives a usable (non-zero) epoch.
    assert_eq!(next_epoch(&st, "eth1", 0).unwrap(), 1);
    // A damaged file is an error naming the key, never a silent reset.
    std::fs::write(dir.join("l2sec-eth0.epoch"), "junk").unwrap();
    assert_eq!(
        next_epoch(&st, "eth0", now).err().unwrap().key,
        "l2sec.state_dir"
    );
    std::fs::write(dir.join("l2sec-eth0.epoch"), format!("{}\n", u64::MAX)).unwrap();
    assert!(next_epoch(&st, "eth0", now).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `group_secret_file` and `signing_key` through [`crate::runtime::secret_file`]: every refusal (mode, owner, link, FIFO,
/// directory) names its key, never the secret (nor the path: this section's errors show no value).
#[test]
fn key_files_are_checked_as_opened() {
    use crate::runtime::secret_file::{tests::every_refusal, Level};
    let secret = "5345435245545641".repeat(4);
    let without_group_secret =
        base().replace(&format!("group_secret = \"{}\"\n", "11".repeat(32)), "");
    every_refusal(
        "l2-group-secret",
        Level::Secret,
        "l2sec.group_secret_file",
        format!("{secret}\n").as_bytes(),
        &secret,
        false,
        &|p| {
            parse(&format!(
                "{without_group_secret}group_secret_file = \"{}\"\n",
                p.display()
            ))
            .map(|_| ())
            .map_err(|e| e.to_string())
        },
    );
    every_refusal(
        "l2-signing-key",
        Level::Secret,
        "l2sec.signing_key",
        format!("{}\n", &secret[..64]).as_bytes(),
        &secret[..64],
        false,
        &|p| {
            parse(&format!("{}signing_key = \"{}\"\n", base(), p.display()))
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    );
}
