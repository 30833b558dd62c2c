//! The key table of a rule file: rules naming one key share its sealer (one counter), a key named under two
//! algorithms, a missing key and colliding key ids over overlapping peers are refused with the rules' lines, the
//! daemon's start counters are used, and a received packet's key is found by its id and source.

use netveil_pilsc::cipher::Cipher;
use netveil_pilsc::packet::{key_id, Mode};
use netveil_pilsc::rules::{parse, Keys};
use netveil_pilsc::table::{Settings, Table};

const SETTINGS: Settings = Settings {
    mode: Mode::Authenticated,
    window: 64,
    max_sources: 16,
};

fn key16(n: u32) -> String {
    let mut k = [0u8; 16];
    k[..4].copy_from_slice(&n.to_be_bytes());
    format!("0x{}", hex::encode(k))
}

fn rule(n: u32, ip: &str, enc: &str, key: &str) -> String {
    format!("Rule {n}\nSecurity true\nIP {ip}\nProtocol any\nEncryption {enc}\nKey {key}\n")
}

/// Seals `n` UDP packets with the key of rule index `rule`; the key's next counter after them.
fn counters_after(t: &mut Table, rule: usize, n: usize) -> u64 {
    let k = t.rule_key[rule].unwrap();
    for _ in 0..n {
        let mut b = vec![0u8; 64];
        b.extend_from_slice(&[
            0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0, 1, 0, 2, 0,
            8, 0, 0,
        ]);
        let c = netveil_wire::checksum::checksum(&b[64..84]);
        b[74..76].copy_from_slice(&c.to_be_bytes());
        t.keys[k].sealer.seal(&mut b, 64, 28).unwrap();
    }
    t.keys[k].sealer.next_counter()
}

#[test]
fn rules_naming_one_key_share_its_counter() {
    let text = rule(1, "10.0.0.1", "1", "fleet")
        + &rule(2, "10.0.0.2", "AES-128", "fleet")
        + &rule(3, "10.0.0.3", "1", &key16(7))
        + &rule(4, "10.0.0.4", "1", &key16(7))
        + "Rule 5\nSecurity false\nIP 10.0.0.5\nProtocol any\n";
    let f = parse(&text).unwrap();
    let keys = Keys::parse(&format!("fleet = {}", key16(1))).unwrap();
    let mut asked = Vec::new();
    let mut t = Table::build(&f, &keys, &SETTINGS, |id, c, _| {
        asked.push((id, c));
        (1000, u64::MAX)
    })
    .unwrap();
    assert_eq!(t.keys.len(), 2);
    assert_eq!(asked.len(), 2, "one start counter per key");
    let idx = |n: u32| f.rules.iter().position(|r| r.number == n).unwrap();
    assert_eq!(t.rule_key[idx(1)], t.rule_key[idx(2)]);
    assert_eq!(t.rule_key[idx(3)], t.rule_key[idx(4)]);
    assert_ne!(t.rule_key[idx(1)], t.rule_key[idx(3)]);
    assert_eq!(t.rule_key[idx(5)], None);
    // Packets of rules 1 and 2 take counters from one sequence, starting where the daemon said.
    assert_eq!(counters_after(&mut t, idx(1), 3), 1003);
    assert_eq!(counters_after(&mut t, idx(2), 2), 1005);
    // A received packet's key: by its id and its source.
    let fleet = t.rule_key[idx(1)].unwrap();
    let id = t.keys[fleet].id;
    assert_eq!(t.key_for(id, "10.0.0.2".parse().unwrap()), Some(fleet));
    assert_eq!(t.key_for(id, "10.0.0.3".parse().unwrap()), None);
}

#[test]
fn what_is_refused_names_the_rules() {
    let keys = Keys::parse(&format!("fleet = {}", key16(1))).unwrap();
    let none = |_, _, _: &[u8]| (1, u64::MAX);
    // One key under two algorithms (AES-128 and RC5 both take 16 bytes).
    let f =
        parse(&(rule(1, "10.0.0.1", "1", "fleet") + &rule(2, "10.0.0.2", "RC5", "fleet"))).unwrap();
    let e = Table::build(&f, &keys, &SETTINGS, none).err().unwrap();
    assert_eq!(
        e.to_string(),
        "line 7: Key: rule 2: its key is used under AES-128 by the rule at line 1: one key, one algorithm"
    );
    // A name the key file does not have.
    let f = parse(&rule(1, "10.0.0.1", "1", "other")).unwrap();
    let e = Table::build(&f, &keys, &SETTINGS, none).err().unwrap();
    assert_eq!(
        e.to_string(),
        "line 1: Key: rule 1: no key named \"other\" in the key file"
    );
    // Two keys with the same id: refused over overlapping peers, accepted over separate ones.
    let mut by_id = std::collections::HashMap::new();
    let (a, b) = (0u32..)
        .find_map(|n| {
            let id = key_id(&hex::decode(&key16(n)[2..]).unwrap());
            by_id.insert(id, n).map(|m| (m, n))
        })
        .unwrap();
    let f = parse(&(rule(1, "10.0.0.0/24", "1", &key16(a)) + &rule(2, "10.0.0.7", "1", &key16(b))))
        .unwrap();
    let e = Table::build(&f, &Keys::none(), &SETTINGS, none)
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("have the same key id") && e.to_string().contains("change one key"),
        "{e}"
    );
    let f = parse(&(rule(1, "10.0.0.0/24", "1", &key16(a)) + &rule(2, "10.0.1.7", "1", &key16(b))))
        .unwrap();
    let t = Table::build(&f, &Keys::none(), &SETTINGS, none)
        .ok()
        .unwrap();
    assert_eq!(t.keys.len(), 2);
    assert_eq!(t.keys[0].id, t.keys[1].id);
    let of = |n: u32| t.rule_key[f.rules.iter().position(|r| r.number == n).unwrap()].unwrap();
    assert_ne!(of(1), of(2));
    assert_eq!(
        t.key_for(t.keys[0].id, "10.0.1.7".parse().unwrap()),
        Some(of(2))
    );
    assert_eq!(
        t.key_for(t.keys[0].id, "10.0.0.9".parse().unwrap()),
        Some(of(1))
    );
    // The cipher of each key is its rules'.
    assert_eq!(t.keys[0].cipher, Cipher::Aes128);
}
