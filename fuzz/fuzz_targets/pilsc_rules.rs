//! The PILSC rule and key files on hostile text: never a panic; a loaded file holds only rules that say what a
//! rule may say (ports for TCP and UDP only, with a mode; a key for protected rules only), with unique numbers,
//! most specific first; every error names a line of the text; and the compiled policy has two rules per rule.

#![no_main]

use libfuzzer_sys::fuzz_target;
use netveil_pilsc::rules::{parse, Keys, Protocol};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lines = text.lines().count().max(1);
    let _ = Keys::parse(&text);
    match parse(&text) {
        Err(e) => {
            assert!(!e.0.is_empty(), "an error without errors");
            for x in &e.0 {
                assert!(x.line >= 1 && x.line <= lines, "error at line {} of {lines}", x.line);
            }
        }
        Ok(f) => {
            let mut numbers = std::collections::HashSet::new();
            for r in &f.rules {
                assert!(r.number > 0 && numbers.insert(r.number), "rule number {} twice or 0", r.number);
                assert!(r.line >= 1 && r.line <= lines);
                if r.port.is_some() {
                    assert!(matches!(r.protocol, Protocol::Tcp | Protocol::Udp), "ports on {:?}", r.protocol);
                }
                if let Some(p) = &r.protect {
                    if let netveil_pilsc::rules::KeyRef::Literal(k) = &p.key {
                        assert!(p.cipher.key_len().contains(&k.len()));
                    }
                }
                assert_eq!(r.peer, r.peer.trunc(), "host bits past the prefix");
            }
            for w in f.rules.windows(2) {
                assert!(w[0].peer.prefix_len() >= w[1].peer.prefix_len(), "not most specific first");
            }
            // Each protected rule its own key index: its action names it; the rest bypass.
            let keys: Vec<Option<usize>> =
                f.rules.iter().enumerate().map(|(i, r)| r.protect.as_ref().map(|_| i)).collect();
            let db = netveil_pilsc::policy::compile(&f, &keys);
            assert_eq!(db.rules().len(), 2 * f.rules.len());
            for (i, rule) in db.rules().iter().enumerate() {
                let want = match keys[netveil_pilsc::policy::file_rule(i)] {
                    Some(k) => netveil_sa::policy::Action::Protect(k),
                    None => netveil_sa::policy::Action::Bypass,
                };
                assert_eq!(rule.action, want);
            }
        }
    }
});
