use super::config::{read_rule_file, PilscConfig};
use super::control::{Reason, DROP_NAMES};
use super::marks::mark_file;
use super::rules::chain_rules;
use super::worker::clamp_mss;
use super::*;
use crate::runtime::config::ConfigError;
use ipnet::Ipv4Net;
use netveil_pilsc::cipher::Cipher;
use netveil_pilsc::packet::Mode;
use std::net::IpAddr;
use std::path::Path;

fn cfg(text: &str, rules: &str) -> std::result::Result<PilscConfig, ConfigError> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("nv-pilsc-cfg-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("p.rules"), rules).unwrap();
    let v: toml::Table = toml::from_str(text).unwrap();
    let r = PilscConfig::from_section(v.get("pilsc").cloned().unwrap(), &dir);
    let _ = std::fs::remove_dir_all(&dir);
    r
}

const RULES: &str = "Rule = 1; Security = true; IP = 10.0.0.2; Protocol = TCP; Port = 5001; \
    Encryption = 1; Applmode = Server; Key = 0x000102030405060708090a0b0c0d0e0f;\n";

#[test]
fn a_section_parses_and_each_bad_key_is_named() {
    let c = cfg("[pilsc]\nrules = \"p.rules\"\n", RULES).unwrap();
    assert_eq!(c.mode, Mode::Authenticated);
    assert_eq!(c.queue, 0);
    assert_eq!(c.file.rules.len(), 1);
    assert_eq!(
        c.queued_prefixes().unwrap(),
        vec!["10.0.0.2/32".parse::<Ipv4Net>().unwrap()]
    );
    for (text, key) in [
        ("[pilsc]\n", "pilsc.rules"),
        (
            "[pilsc]\nrules = \"p.rules\"\nmode = \"fast\"\n",
            "pilsc.mode",
        ),
        (
            "[pilsc]\nrules = \"p.rules\"\nqueue = 65535\n",
            "pilsc.queue",
        ),
        (
            "[pilsc]\nrules = \"p.rules\"\niptables = \"nft\"\n",
            "pilsc.iptables",
        ),
        (
            "[pilsc]\nrules = \"p.rules\"\nreplay_window = 1\n",
            "pilsc.replay_window",
        ),
        ("[pilsc]\nrules = \"missing.rules\"\n", "pilsc.rules"),
        ("[pilsc]\nrules = \"p.rules\"\nbogus = 1\n", "pilsc"),
    ] {
        let e = cfg(text, RULES).err().unwrap_or_else(|| panic!("{text}"));
        assert!(e.key.starts_with(key), "{text}: {e:?}");
    }
    // A rule-file error names the file and its line.
    let e = cfg(
        "[pilsc]\nrules = \"p.rules\"\n",
        "Rule = 1; Security = maybe;\n",
    )
    .err()
    .unwrap();
    assert_eq!(e.key, "pilsc.rules");
    assert!(e.reason.contains("line 1"), "{}", e.reason);
    // A key too short for its algorithm is refused at parse time.
    let short = RULES.replace("0x000102030405060708090a0b0c0d0e0f", "0x0001020304050607");
    let e = cfg("[pilsc]\nrules = \"p.rules\"\n", &short).err().unwrap();
    assert_eq!(e.key, "pilsc.rules");
}

#[test]
fn the_mss_of_a_syn_is_lowered_and_its_checksum_holds() {
    use netveil_wire::{ipv4, tcp};
    // 10.0.0.1:40000 -> 10.0.0.2:5001 SYN with NOP, MSS 1460, NOP, NOP, SACK-permitted.
    let mut pkt = vec![0u8; 20 + 32];
    {
        let mut p = ipv4::Packet::new_unchecked(&mut pkt[..]);
        p.set_version(4);
        p.set_header_len(20);
        p.set_total_len(52);
        p.set_ttl(64);
        p.set_protocol(6);
        p.set_src_addr("10.0.0.1".parse().unwrap());
        p.set_dst_addr("10.0.0.2".parse().unwrap());
        p.fill_checksum();
    }
    {
        let mut t = tcp::Packet::new_unchecked(&mut pkt[20..]);
        t.set_src_port(40000);
        t.set_dst_port(5001);
        t.set_header_len(32);
        t.set_flags(0x002);
        t.options_mut()
            .copy_from_slice(&[1, 2, 4, 0x05, 0xb4, 1, 1, 4, 2, 0, 0, 0]);
    }
    let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    tcp::Packet::new_unchecked(&mut pkt[20..]).fill_checksum(a, b);
    clamp_mss(&mut pkt, 28);
    let t = tcp::Packet::new_unchecked(&pkt[20..]);
    assert_eq!(&t.options()[1..5], &[2, 4, 0x05, 0x98]);
    assert!(t.verify_checksum(a, b));
    // Not a SYN: unchanged.
    let mut ack = pkt.clone();
    tcp::Packet::new_unchecked(&mut ack[20..]).set_flags(0x010);
    let before = ack.clone();
    clamp_mss(&mut ack, 28);
    assert_eq!(ack, before);
}

#[test]
fn rules_as_toml_tables_load_as_the_file_does() {
    let toml_rules = "[pilsc]\n[[pilsc.rule]]\nrule = 1\nsecurity = true\nip = \"10.0.0.2\"\nprotocol = \"tcp\"\n\
                      port = 5001\nencryption = 1\napplmode = \"server\"\n\
                      key = \"0x000102030405060708090a0b0c0d0e0f\"\n";
    let t = cfg(toml_rules, "").unwrap();
    let f = cfg("[pilsc]\nrules = \"p.rules\"\n", RULES).unwrap();
    assert_eq!(t.source, RuleSource::Toml);
    let strip =
        |r: &netveil_pilsc::rules::Rule| (r.number, r.peer, r.protocol, r.port, r.protect.clone());
    assert_eq!(
        t.file.rules.iter().map(strip).collect::<Vec<_>>(),
        f.file.rules.iter().map(strip).collect::<Vec<_>>()
    );
    // Errors name the key; a short key is refused by the key table, named by its entry.
    let e = cfg(&toml_rules.replace("port = 5001", "port = 70000"), "")
        .err()
        .unwrap();
    assert_eq!(e.key, "pilsc.rule[0].port", "{e:?}");
    let e = cfg(&toml_rules.replace("0e0f", ""), "").err().unwrap();
    assert!(e.key.starts_with("pilsc.rule[0]"), "{e:?}");
    let e = cfg(
        &format!("{toml_rules}rules = \"p.rules\"\n")
            .replace("[pilsc]\n[[", "[pilsc]\nrules = \"p.rules\"\n[["),
        RULES,
    )
    .err()
    .unwrap();
    assert_eq!(e.key, "pilsc.rule");
}

#[test]
fn mark_files_differ_by_key_and_cipher_and_hide_the_key() {
    let a = mark_file(Cipher::Aes128, &[1; 16]);
    assert_ne!(a, mark_file(Cipher::Aes128, &[2; 16]));
    assert_ne!(a, mark_file(Cipher::ChaCha20, &[1; 16]));
    assert!(!a.contains("0101"));
}

/// ICMP errors are queued both ways from and to every address, not only the peers' (an error about a protected
/// flow can come from a router or a forger, and the worker judges it by what it quotes); with all traffic queued,
/// no rule of their own.
#[test]
fn icmp_errors_are_queued_from_and_to_everywhere() {
    let t = chain_rules("O", "I", 10, &Some(vec!["10.0.0.2/32".parse().unwrap()]));
    for ty in [3, 4, 5, 11, 12] {
        for (chain, q) in [("O", 10), ("I", 11)] {
            let rule =
                format!("-A {chain} -p icmp -m icmp --icmp-type {ty} -j NFQUEUE --queue-num {q}\n");
            assert!(t.contains(&rule), "{rule}in\n{t}");
        }
    }
    let all = chain_rules("O", "I", 10, &None);
    assert!(!all.contains("icmp"), "{all}");
    assert!(
        all.contains("-A O -j NFQUEUE --queue-num 10\n")
            && all.contains("-A I -j NFQUEUE --queue-num 11\n")
    );
}

/// The drop reasons `netveil status` shows (`engines.pilsc.drops`), by their stable names, in counter order.
#[test]
fn drop_names_are_pinned() {
    assert_eq!(
        DROP_NAMES,
        [
            "seal_failed",
            "key_exhausted",
            "malformed",
            "unknown_key",
            "replay",
            "auth",
            "checksum",
            "wrong_mode",
            "too_many_sources",
            "rx_state",
            "clear_on_covered",
            "policy",
            "ip_options",
            "icmp_error_in_clear",
            "icmp_error_unreadable",
        ]
    );
    assert_eq!(DROP_NAMES[Reason::IpOptions as usize], "ip_options");
    assert_eq!(
        DROP_NAMES[Reason::IcmpErrorInClear as usize],
        "icmp_error_in_clear"
    );
    assert_eq!(
        DROP_NAMES[Reason::IcmpErrorUnreadable as usize],
        "icmp_error_unreadable"
    );
}

/// `pilsc.rules` and `pilsc.keys` are read through [`crate::runtime::secret_file`]: the rule file owned by root and writable by
/// it only, the key file root's and 0600 or 0400, neither a FIFO or a directory, the key file not a link; no error
/// shows a key (issue 40).
#[test]
fn rule_and_key_files_are_checked_as_opened() {
    use crate::runtime::secret_file::{tests::every_refusal, Level};
    let section = |rules: &Path, keys: Option<&Path>| {
        let mut t = toml::Table::new();
        t.insert("rules".into(), rules.display().to_string().into());
        if let Some(k) = keys {
            t.insert("keys".into(), k.display().to_string().into());
        }
        PilscConfig::from_section(toml::Value::Table(t), Path::new("/nonexistent"))
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    every_refusal(
        "pilsc-rules",
        Level::Rules,
        "pilsc.rules",
        RULES.as_bytes(),
        "000102030405060708090a0b0c0d0e0f",
        true,
        &|p| section(p, None),
    );
    let d = crate::runtime::state::test_dir("pilsc-named-rules");
    let named = d.join("named.rules");
    std::fs::write(
        &named,
        RULES.replace("0x000102030405060708090a0b0c0d0e0f", "web"),
    )
    .unwrap();
    every_refusal(
        "pilsc-keys",
        Level::Secret,
        "pilsc.keys",
        b"web = 0x53454352455456415345435245545641\n",
        "5345435245545641",
        true,
        &|p| section(&named, Some(p)),
    );
    let _ = std::fs::remove_dir_all(d);
}

/// A rule file that writes keys itself and that others may read: loaded, with a warning (`check` notes it, `up`
/// logs it); one that only names keys of the key file: no warning.
#[test]
fn a_rule_file_with_keys_readable_by_others_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let d = crate::runtime::state::test_dir("pilsc-readable");
    let f = d.join("p.rules");
    let load = |text: &str, mode: u32| {
        std::fs::write(&f, text).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        let (_, w) = read_rule_file(&f).unwrap();
        w
    };
    let w = load(RULES, 0o644).expect("a warning");
    assert!(
        w.contains("readable by its group or others (mode 0644)"),
        "{w}"
    );
    assert!(!w.contains("000102030405"), "{w}");
    assert_eq!(load(RULES, 0o600), None);
    assert_eq!(
        load(
            &RULES.replace("0x000102030405060708090a0b0c0d0e0f", "web"),
            0o644
        ),
        None
    );
    let _ = std::fs::remove_dir_all(d);
}
