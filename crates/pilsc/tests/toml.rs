//! PILSC rules in netveil's TOML (`[[pilsc.rule]]`): the paper's record, every kind of error named by its key
//! (`pilsc.rule[i].port`), unknown keys and wrong types refused, IPv6 refused as the flat file refuses it; and, over
//! random rule sets (with reused numbers, repeated and conflicting selectors), that the same rules written as a
//! flat file (one record per line) and as TOML load to the same rule file, or fail at the same places.

use netveil_pilsc::cipher::Cipher;
use netveil_pilsc::rules::{from_toml, parse, ApplMode, KeyRef, Rule};
use proptest::prelude::*;

#[allow(dead_code)] // render: the flat file's multi-line layouts, for the other tests
mod common;
use common::arb_rule;

fn tables(text: &str) -> Vec<toml::Table> {
    let mut doc: toml::Table = text.parse().unwrap();
    let Some(toml::Value::Table(mut pilsc)) = doc.remove("pilsc") else {
        panic!("no [pilsc]")
    };
    let Some(toml::Value::Array(rules)) = pilsc.remove("rule") else {
        return Vec::new();
    };
    rules
        .into_iter()
        .map(|v| match v {
            toml::Value::Table(t) => t,
            _ => panic!("not a table"),
        })
        .collect()
}

/// The errors of `text` as `key: msg` lines.
fn errors(text: &str) -> Vec<String> {
    match from_toml(&tables(text)) {
        Ok(f) => panic!("loaded: {f:?}"),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn the_papers_record_in_toml() {
    let t = r#"
        [[pilsc.rule]]
        rule = 1
        security = true
        ip = "193.140.1.1"
        protocol = "tcp"
        port = "20-21"
        encryption = 1
        applmode = "server"
        key = "0xcda8"

        [[pilsc.rule]]
        rule = 2
        security = false
        ip = "c1:8c:01:00/24"
        protocol = "UDP"
        port = 53
        applmode = "Client"
    "#;
    let flat = "Rule = 1; Security = true; IP = 193.140.1.1; Protocol = TCP; Port = 20-21; Encryption = 1; \
                Applmode = Server; Key = 0xcda8;\n\
                Rule 2; Security false; IP 193.140.1.0/24; Protocol udp; Port 53; Applmode client\n";
    let f = from_toml(&tables(t)).unwrap();
    assert_eq!(f, parse(flat).unwrap());
    assert_eq!(f.rules[0].number, 1);
    assert_eq!(f.rules[0].line, 1);
    assert_eq!(f.rules[1].line, 2);
    let p = f.rules[0].protect.as_ref().unwrap();
    assert_eq!(p.cipher, Cipher::Aes128);
    assert_eq!(p.key, KeyRef::Name("0xcda8".into()));
    assert_eq!(f.rules[1].port.unwrap().1, ApplMode::Client);
}

#[test]
fn errors_name_the_key() {
    let e = errors(
        r#"
        [[pilsc.rule]]
        rule = 1
        security = "true"
        ip = "10.0.0.0/8"
        protocol = "tcp"
        port = 70000
        applmode = "server"
        color = "red"

        [[pilsc.rule]]
        rule = 2
        security = true
        ip = "2001:db8::1"
        protocol = "icmp"
        port = "1-2"
        encryption = "AES-256"
        key = 7

        [[pilsc.rule]]
        security = false
        ip = "10.1.2.3/16"
        protocol = "any"

        [[pilsc.rule]]
        rule = 1
        security = false
        ip = "10.9.9.9"
        protocol = "udp"
        applmode = "client"
    "#,
    );
    let want = [
        "pilsc.rule[0].security: expected a boolean (true or false), found string (value not shown)",
        "pilsc.rule[0].port: is not a port (0 to 65535, or 0x0 to 0xffff; value not shown)",
        "pilsc.rule[0]: unknown key \"color\" (the keys: rule, security, ip, protocol, port, encryption, applmode, key)",
        "pilsc.rule[1].ip: is IPv6: PILSC protects IPv4 only (it marks packets with the IPv4 security \
         option, type 130)",
        "pilsc.rule[1].key: expected a string, found integer (value not shown)",
        "pilsc.rule[2].rule: missing: every rule has a number",
        "pilsc.rule[2].ip: 10.1.2.3 has bits set past its /16 prefix (did you mean 10.1.0.0/16?)",
        "pilsc.rule[3].applmode: rule 1 has no Port for it to apply to",
    ];
    assert_eq!(e, want, "{e:#?}");

    // The flat file's message for IPv6, word for word.
    let flat = parse("Rule 1; Security false; IP 2001:db8::1; Protocol any\n").unwrap_err();
    assert!(
        want[3].ends_with(&flat.0[0].msg),
        "{} / {}",
        flat.0[0].msg,
        want[3]
    );

    // Numbers used twice and conflicting rules are named by the entry.
    let e = errors(
        r#"
        [[pilsc.rule]]
        rule = 4
        security = false
        ip = "10.0.0.1"
        protocol = "any"
        [[pilsc.rule]]
        rule = 4
        security = false
        ip = "10.0.0.2"
        protocol = "any"
        [[pilsc.rule]]
        rule = 5
        security = true
        ip = "10.0.0.1"
        protocol = "any"
        encryption = "AES-128"
        key = "k1"
        [[pilsc.rule]]
        rule = 6
        security = true
        ip = "10.0.0.9"
        protocol = "icmp"
        port = 7
        applmode = "server"
        encryption = 2
        key = "k2"
    "#,
    );
    assert_eq!(
        e,
        [
            "pilsc.rule[1].rule: rule number 4 is already used at pilsc.rule[0]",
            "pilsc.rule[2].rule: rule 5 selects the same traffic as rule 4 (pilsc.rule[0]) (same IP, Protocol, \
             Port and Applmode) but protects it differently",
            "pilsc.rule[3].port: rule 6: ICMP has no ports (Port is for TCP and UDP; Protocol at pilsc.rule[3])",
        ],
        "{e:#?}"
    );
}

/// A rule as a TOML table, its values in one of the written forms `style` picks (port and algorithm as numbers
/// or strings, names in any case).
fn toml_rule(r: &Rule, style: u32) -> String {
    let case = |s: &str| {
        if style & 1 == 0 {
            s.to_lowercase()
        } else {
            s.to_uppercase()
        }
    };
    let mut s = format!(
        "[[pilsc.rule]]\nrule = {}\nsecurity = {}\nip = \"{}\"\nprotocol = \"{}\"\n",
        r.number,
        r.protect.is_some(),
        r.peer,
        case(&format!("{:?}", r.protocol))
    );
    if let Some((ports, mode)) = r.port {
        if ports.lo == ports.hi && style & 2 == 0 {
            s += &format!("port = {}\n", ports.lo);
        } else {
            s += &format!("port = \"{}-{}\"\n", ports.lo, ports.hi);
        }
        s += &format!("applmode = \"{}\"\n", case(&format!("{mode:?}")));
    }
    if let Some(p) = &r.protect {
        if style & 4 == 0 {
            s += &format!("encryption = {}\n", p.cipher.number());
        } else {
            s += &format!("encryption = \"{}\"\n", case(p.cipher.name()));
        }
        let KeyRef::Literal(k) = &p.key else {
            unreachable!()
        };
        s += &format!("key = \"0x{}\"\n", hex::encode(k.as_slice()));
    }
    s
}

/// The same rules as a flat file, one record per line (so that a rule's line is its position, as in TOML).
fn flat_rule(r: &Rule) -> String {
    let mut s = format!(
        "Rule = {}; Security = {}; IP = {}; Protocol = {:?};",
        r.number,
        r.protect.is_some(),
        r.peer,
        r.protocol
    );
    if let Some((ports, mode)) = r.port {
        s += &format!(" Port = {}-{}; Applmode = {mode:?};", ports.lo, ports.hi);
    }
    if let Some(p) = &r.protect {
        let KeyRef::Literal(k) = &p.key else {
            unreachable!()
        };
        s += &format!(
            " Encryption = {}; Key = 0x{}",
            p.cipher.number(),
            hex::encode(k.as_slice())
        );
    }
    s + "\n"
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Random rules, some numbers reused (an error), some rules repeated under a new number (a duplicate when the
    /// protection is the same, a conflict when not): the flat file and the TOML load to the same rule file, or
    /// fail with errors at the same places.
    #[test]
    fn flat_and_toml_load_the_same(rules in prop::collection::vec((arb_rule(), 1u32..40, any::<u32>()), 0..30),
                                   repeat in prop::collection::vec((any::<prop::sample::Index>(), 40u32..80), 0..6),
                                   dup_number in any::<bool>()) {
        let mut rs: Vec<Rule> = Vec::new();
        let mut styles = Vec::new();
        for (i, (mut r, n, style)) in rules.into_iter().enumerate() {
            // Unique numbers unless asked otherwise.
            r.number = if dup_number { n } else { i as u32 + 1 };
            rs.push(r);
            styles.push(style);
        }
        for (at, n) in repeat {
            if rs.is_empty() {
                break;
            }
            let mut r = rs[at.index(rs.len())].clone();
            r.number = n + 1000;
            rs.push(r);
            styles.push(n);
        }
        let flat: String = rs.iter().map(flat_rule).collect();
        let toml: String = rs.iter().zip(&styles).map(|(r, s)| toml_rule(r, *s)).collect();
        let from_flat = parse(&flat);
        let from_toml = from_toml(&tables(&format!("[pilsc]\n{toml}")));
        match (from_flat, from_toml) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(a), Err(b)) => {
                let keys: Vec<String> = a.in_toml().0.into_iter().map(|e| e.key).collect();
                let keys_toml: Vec<String> = b.0.into_iter().map(|e| e.key).collect();
                prop_assert_eq!(keys, keys_toml);
            }
            (a, b) => prop_assert!(false, "flat {:?}\ntoml {:?}\n{}\n{}", a, b, flat, toml),
        }
    }
}
