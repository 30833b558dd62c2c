//! The rule file: the paper's example record, valid files in both layouts, every kind of invalid line with its
//! line number, duplicates and conflicts, the order of the loaded rules, the key file; and, over random rule sets,
//! that a file written from rules loads back as exactly those rules, and that no input panics the loader.

use netveil_pilsc::cipher::Cipher;
use netveil_pilsc::rules::{parse, ApplMode, KeyRef, Keys, PortRange, Protocol};
use proptest::prelude::*;

mod common;
use common::{arb_rule, render};

const KEY16: &str = "0x000102030405060708090a0b0c0d0e0f";

/// The paper's Fig. 3 record: rule 1 protects FTP (ports 20-21, ours) with host 193.140.1.1 under AES; its key
/// `0xcda8` is too short for AES-128, so it names a key of the key file.
const PAPER: &str = "# the paper's Fig. 3
Rule = 1;
Security = true;
IP = 193.140.1.1;
Protocol = TCP;
Port = 20-21;
Encryption = 1;
Applmode = Server;
Key = 0xcda8;
";

#[test]
fn the_papers_example_record() {
    let f = parse(PAPER).unwrap();
    assert!(f.duplicates.is_empty());
    let [r] = f.rules.as_slice() else {
        panic!("{:?}", f.rules)
    };
    assert_eq!(r.number, 1);
    assert_eq!(r.line, 2);
    assert_eq!(r.peer, "193.140.1.1/32".parse().unwrap());
    assert_eq!(r.protocol, Protocol::Tcp);
    assert_eq!(
        r.port,
        Some((PortRange { lo: 20, hi: 21 }, ApplMode::Server))
    );
    let p = r.protect.as_ref().unwrap();
    assert_eq!(p.cipher, Cipher::Aes128);
    assert_eq!(p.key, KeyRef::Name("0xcda8".into()));

    // The key comes from the key file; without it, or too short there, the rule is refused with its line.
    let keys = Keys::parse(&format!("# keys\n0xcda8 = {KEY16};\n")).unwrap();
    assert_eq!(keys.resolve(r).unwrap().unwrap().len(), 16);
    let e = Keys::none().resolve(r).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 2: Key: rule 1: key of 2 bytes, AES-128 needs 16 bytes (value not shown; a 0x value shorter than \
         the key is looked up as a name in the key file, which has no such name)"
    );
    let short = Keys::parse("0xcda8 = 0xcda8").unwrap();
    assert_eq!(
        short.resolve(r).unwrap_err().to_string(),
        "line 2: Key: rule 1: the key is 2 bytes; AES-128 takes 16 bytes"
    );
}

#[test]
fn one_line_records_colon_hex_prefixes_and_any_case() {
    let text = format!(
        "rule 7; security TRUE; ip c1:8c:1:0/24; protocol udp; port 0x35; applmode client; \
         encryption chacha20; key 0x{k}   # DNS to the /24\n\
         Rule 3\n  Security false\n  IP 193.140.1.9\n  Protocol any\n\
         RULE=4;SECURITY=true;IP=10.0.0.0/8;PROTOCOL=ICMP;ENCRYPTION=AES-256;KEY=fleet\n",
        k = "ab".repeat(32)
    );
    let f = parse(&text).unwrap();
    let n: Vec<u32> = f.rules.iter().map(|r| r.number).collect();
    // Most specific first: /32 before /24 before /8.
    assert_eq!(n, [3, 7, 4]);
    let r7 = &f.rules[1];
    assert_eq!(r7.peer, "193.140.1.0/24".parse().unwrap());
    assert_eq!(r7.protocol, Protocol::Udp);
    assert_eq!(
        r7.port,
        Some((PortRange { lo: 53, hi: 53 }, ApplMode::Client))
    );
    let p = r7.protect.as_ref().unwrap();
    assert_eq!(p.cipher, Cipher::ChaCha20);
    assert!(matches!(&p.key, KeyRef::Literal(k) if k.as_slice() == [0xab; 32]));
    // Debug never shows key bytes.
    assert!(!format!("{f:?}").contains("171"), "{f:?}");
    assert!(f.rules[0].protect.is_none());
    assert_eq!(f.rules[0].protocol, Protocol::Any);
    assert_eq!(
        f.rules[2].protect.as_ref().unwrap().key,
        KeyRef::Name("fleet".into())
    );
}

#[test]
fn specific_rules_come_first() {
    let rec = |n: u32, ip: &str, proto: &str, port: Option<(&str, &str)>| {
        let mut s = format!("Rule {n}\nSecurity false\nIP {ip}\nProtocol {proto}\n");
        if let Some((p, m)) = port {
            s += &format!("Port {p}\nApplmode {m}\n");
        }
        s
    };
    let text = [
        rec(1, "10.0.0.0/8", "any", None),
        rec(2, "10.1.0.0/16", "any", None),
        rec(3, "10.1.0.0/16", "TCP", None),
        rec(4, "10.1.0.0/16", "TCP", Some(("1-1000", "Server"))),
        rec(5, "10.1.0.0/16", "TCP", Some(("80", "Client"))),
        rec(6, "10.1.0.0/16", "TCP", Some(("80", "Server"))),
        rec(7, "10.1.0.0/16", "UDP", Some(("80", "Server"))),
    ]
    .concat();
    let n: Vec<u32> = parse(&text)
        .unwrap()
        .rules
        .iter()
        .map(|r| r.number)
        .collect();
    assert_eq!(n, [6, 7, 5, 4, 3, 2, 1]);
}

#[test]
fn duplicates_are_dropped_and_reported_conflicts_refused() {
    let rec = |n: u32, key: &str| {
        format!("Rule {n}\nSecurity true\nIP 10.0.0.1\nProtocol TCP\nPort 22\nApplmode Server\nEncryption 1\nKey {key}\n")
    };
    let f = parse(&(rec(1, KEY16) + &rec(2, KEY16) + &rec(3, KEY16))).unwrap();
    assert_eq!(f.rules.len(), 1);
    assert_eq!(f.rules[0].number, 1);
    let d: Vec<(u32, usize, u32, usize)> = f
        .duplicates
        .iter()
        .map(|d| (d.number, d.line, d.same_as, d.same_as_line))
        .collect();
    assert_eq!(d, [(2, 9, 1, 1), (3, 17, 1, 1)]);
    // The same traffic with another key is a conflict, not a duplicate.
    let e = parse(&(rec(1, KEY16) + &rec(2, "other"))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 9: Rule: rule 2 selects the same traffic as rule 1 (line 1) (same IP, Protocol, Port and Applmode) \
         but protects it differently"
    );
    // Another Applmode is other traffic.
    let other = rec(2, KEY16).replace("Server", "Client");
    assert_eq!(parse(&(rec(1, KEY16) + &other)).unwrap().rules.len(), 2);
}

/// Each bad line alone in an otherwise valid record: the error's line, tag and words.
#[test]
fn every_kind_of_invalid_line_names_its_line() {
    let base = [
        "Rule 1",
        "Security true",
        "IP 10.0.0.1",
        "Protocol TCP",
        "Port 80",
        "Applmode Server",
        "Encryption 1",
        &format!("Key {KEY16}"),
    ];
    // (the line replaced (0-based), its new text or "" to drop it, the error's line, its start)
    let cases: &[(usize, &str, usize, &str)] = &[
        (1, "Secure true", 2, "line 2: unknown tag \"Secure\" (the tags: Rule, Security"),
        (1, "Security", 2, "line 2: Security: no value"),
        (1, "Security yes", 2, "line 2: Security: is neither true nor false (value not shown)"),
        (0, "Rule 0", 1, "line 1: Rule: is not a rule number (1 and up; value not shown)"),
        (0, "Rule one", 1, "line 1: Rule: is not a rule number"),
        (0, "Rule 4294967296", 1, "line 1: Rule: is not a rule number"),
        (2, "IP 10.0.0.256", 3, "line 3: IP: is not an IPv4 address (193.140.1.1 or c1:8c:01:01, optionally /len; value not shown)"),
        (2, "IP 2001:db8::1", 3, "line 3: IP: is IPv6: PILSC protects IPv4 only"),
        (2, "IP 10.0.0.1/33", 3, "line 3: IP: the prefix length must be 0 to 32 (value not shown)"),
        (2, "IP 10.0.0.1/8", 3, "line 3: IP: 10.0.0.1 has bits set past its /8 prefix (did you mean 10.0.0.0/8?)"),
        (2, "IP 0a:00:00:100", 3, "line 3: IP: is not an IPv4 address"),
        (3, "Protocol SCTP", 4, "line 4: Protocol: is not one of TCP, UDP, ICMP, any (value not shown)"),
        (3, "Protocol ICMP", 5, "line 5: Port: rule 1: ICMP has no ports (Port is for TCP and UDP; Protocol at line 4)"),
        (3, "Protocol any", 5, "line 5: Port: rule 1: ANY has no ports"),
        (4, "Port 65536", 5, "line 5: Port: is not a port (0 to 65535, or 0x0 to 0xffff; value not shown)"),
        (4, "Port 0x10000", 5, "line 5: Port: is not a port"),
        (4, "Port 90-80", 5, "line 5: Port: the range ends below its start (90-80)"),
        (4, "Port 80-", 5, "line 5: Port: is not a port"),
        (4, "", 6, "line 6: Applmode: rule 1 has no Port for it to apply to"),
        (5, "", 5, "line 5: Applmode: missing in rule 1: is the port ours (Server) or the peer's (Client)?"),
        (5, "Applmode Both", 6, "line 6: Applmode: is neither Server (the port is ours) nor Client"),
        (6, "Encryption 0", 7, "line 7: Encryption: unknown algorithm (value not shown; the algorithms: 1 (AES-128), 2 (AES-256)"),
        (6, "Encryption DES", 7, "line 7: Encryption: unknown algorithm (value not shown"),
        (6, "", 1, "line 1: Encryption: missing in rule 1 (Security = true needs Encryption and Key)"),
        (7, "", 1, "line 1: Key: missing in rule 1 (Security = true needs Encryption and Key)"),
        (7, "Key 0xabc", 8, "line 8: Key: rule 1: not hexadecimal"),
        (7, "Key 0x0g", 8, "line 8: Key: rule 1: not hexadecimal"),
        (7, "Key my key", 8, "line 8: Key: rule 1: neither 0x and hex digits nor a key name"),
        (1, "", 1, "line 1: Security: missing in rule 1"),
        (2, "", 1, "line 1: IP: missing in rule 1"),
        (3, "", 1, "line 1: Protocol: missing in rule 1"),
        (1, "Security false", 7, "line 7: Encryption: rule 1 has Security = false: its traffic passes in clear, with no Encryption"),
        (4, "Port 80; Port 81", 5, "line 5: Port: given twice in rule 1"),
    ];
    for (at, new, line, start) in cases {
        let mut lines: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        lines[*at] = new.to_string();
        let text = lines.join("\n");
        let e = parse(&text).expect_err(&text);
        let first = e.0.iter().find(|x| x.line == *line).unwrap_or(&e.0[0]);
        assert!(
            first.to_string().starts_with(start),
            "{new:?}: got {e}, wanted a line starting {start:?}"
        );
        assert_eq!(first.line, *line, "{new:?}: {e}");
    }
    // Too long a key for its algorithm, and a tag before the first Rule.
    let long = format!(
        "Rule 1\nSecurity true\nIP 10.0.0.1\nProtocol ICMP\nEncryption 1\nKey 0x{}\n",
        "00".repeat(17)
    );
    assert_eq!(
        parse(&long).unwrap_err().to_string(),
        "line 6: Key: rule 1: 17 bytes is longer than AES-128 takes (16 bytes)"
    );
    assert_eq!(
        parse("# rules\nIP 10.0.0.1\n").unwrap_err().to_string(),
        "line 2: IP: comes before the first Rule tag"
    );
    // A rule number used twice.
    let r = |n| format!("Rule {n}\nSecurity false\nIP 10.0.0.{n}\nProtocol any\n");
    assert_eq!(
        parse(&(r(1) + &r(2) + "Rule 1\nSecurity false\nIP 10.9.9.9\nProtocol any\n"))
            .unwrap_err()
            .to_string(),
        "line 9: Rule: rule number 1 is already used at line 1"
    );
}

#[test]
fn every_error_of_a_file_is_reported_in_line_order() {
    let text = "Rule 1\nSecurity maybe\nIP 10.0.0.1\nProtocol TCP\nRule 2\nSecurity false\nIP ::1\nProtocol tcp\nPort 70000\n";
    let e = parse(text).unwrap_err();
    let lines: Vec<usize> = e.0.iter().map(|x| x.line).collect();
    // A refused value is reported once (not as missing too).
    assert_eq!(lines, [2, 7, 9], "{e}");
    assert_eq!(e.to_string().lines().count(), 3);
}

#[test]
fn key_file_errors() {
    let e = Keys::parse("a = 0x00\nb 0x00\nc = 00\na = 0x01\n = 0x01\n").unwrap_err();
    let got: Vec<String> = e.0.iter().map(|x| x.to_string()).collect();
    assert_eq!(
        got,
        [
            "line 2: expected name = 0xHEX",
            "line 3: key \"c\": the value is not 0x and pairs of hex digits (value not shown)",
            "line 4: key \"a\" is already defined at line 1",
            "line 5: a key with no name",
        ]
    );
    let keys = Keys::parse(&format!("secret = {KEY16}")).unwrap();
    assert!(!format!("{keys:?}").contains("0102"), "{keys:?}");
}

#[test]
fn cipher_table() {
    for c in Cipher::ALL {
        assert_eq!(Cipher::from_number(c.number()), Some(c));
        assert_eq!(Cipher::parse(c.name()), Some(c));
        assert_eq!(Cipher::parse(&c.name().to_lowercase()), Some(c));
        assert_eq!(Cipher::parse(&c.number().to_string()), Some(c));
    }
    assert_eq!(Cipher::parse("0x2"), Some(Cipher::Aes256));
    assert_eq!(Cipher::parse("7"), None);
    assert_eq!(Cipher::parse("AES"), None);
    assert!(Cipher::TripleDes.legacy() && Cipher::Blowfish.legacy() && !Cipher::Aes128.legacy());
}

// ---------------------------------------------------------------------------------------------------------------
// Random rule sets
// ---------------------------------------------------------------------------------------------------------------

proptest! {
    /// A file written from random rules loads back as exactly those rules (one per distinct selector: the first),
    /// most specific first.
    #[test]
    fn written_rules_load_back(mut rules in prop::collection::vec(arb_rule(), 0..40), style in any::<u8>()) {
        // Distinct selectors only (the same selector twice is a duplicate or a conflict, tested above).
        let mut seen = std::collections::HashSet::new();
        rules.retain(|r| seen.insert((r.peer, r.protocol, r.port)));
        for (i, r) in rules.iter_mut().enumerate() {
            r.number = i as u32 + 1;
        }
        let text = render(&rules, style);
        let f = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert!(f.duplicates.is_empty());
        prop_assert_eq!(f.rules.len(), rules.len());
        let mut got = f.rules.clone();
        got.sort_by_key(|r| r.number);
        for (g, want) in got.iter().zip(&rules) {
            prop_assert_eq!((g.peer, g.protocol, g.port, &g.protect), (want.peer, want.protocol, want.port, &want.protect));
        }
        // The loaded order: no rule is more specific than one before it.
        for w in f.rules.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            prop_assert!(a.peer.prefix_len() >= b.peer.prefix_len());
        }
    }

    /// Arbitrary text: errors or rules, never a panic; every error names a line of the text.
    #[test]
    fn arbitrary_text_never_panics(text in "(?s)[ -~\n\t;#=]{0,400}") {
        let lines = text.lines().count().max(1);
        if let Err(e) = parse(&text) {
            prop_assert!(!e.0.is_empty());
            for x in &e.0 {
                prop_assert!(x.line >= 1 && x.line <= lines, "{} of {}", x.line, lines);
            }
        }
        let _ = Keys::parse(&text);
    }
}

/// A key of the wrong length written in a rule (issue 40: it was taken as a name and printed in full), and a key
/// or a recognisable text pasted into any tag or key-file line: no error shows it, as hex or as text.
#[test]
fn no_error_shows_a_value() {
    // "SECRETVA" as hex; the keys below spell "SECRETVALUE1234" (15 bytes) and that twice and "X" (31).
    const HEX: &str = "5345435245545641";
    let key15 = format!("0x{HEX}4c554531323334");
    let key31 = format!("0x{HEX}4c554531323334{HEX}4c55453132333458");
    let bad = |t: &str| {
        for m in [HEX, "SECRETVA", "SECRETVALUE123", "4c5545"] {
            assert!(!t.contains(m), "shows {m}: {t}");
        }
    };
    // A 0x value one byte short: refused by its length, without its digits, under either algorithm.
    for (cipher, key, want) in [
        (
            "1",
            key15,
            "key of 15 bytes, AES-128 needs 16 bytes (value not shown",
        ),
        (
            "2",
            key31,
            "key of 31 bytes, AES-256 needs 32 bytes (value not shown",
        ),
    ] {
        let text = format!(
            "Rule 1; Security true; IP 10.0.0.1; Protocol any; Encryption {cipher}; Key {key}\n"
        );
        let f = parse(&text).unwrap();
        let e = Keys::none().resolve(&f.rules[0]).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
        bad(&e);
        bad(&format!("{:?}", f.rules[0]));
    }
    // The paper's short name still resolves from the key file.
    let f = parse(PAPER).unwrap();
    let keys = Keys::parse(&format!("0xcda8 = {KEY16}")).unwrap();
    assert!(keys.resolve(&f.rules[0]).unwrap().is_some());
    // A secret in each tag of a valid record.
    let base = [
        "Rule 1",
        "Security true",
        "IP 10.0.0.1",
        "Protocol TCP",
        "Port 80",
        "Applmode Server",
        "Encryption 1",
        &format!("Key {KEY16}"),
    ];
    for i in 0..base.len() {
        for secret in [
            format!("0x{HEX}"),
            "SECRETVALUE123".to_string(),
            format!("{HEX}{HEX}"),
        ] {
            let mut lines: Vec<String> = base.iter().map(|s| s.to_string()).collect();
            let tag = lines[i].split(' ').next().unwrap().to_string();
            lines[i] = format!("{tag} {secret}");
            match parse(&lines.join("\n")) {
                Err(e) => bad(&e.to_string()),
                Ok(f) => {
                    // (`Key SECRETVALUE123` is the name of a key, shown: a name that does not look like hex.)
                    if let Err(e) = Keys::none().resolve(&f.rules[0]) {
                        if !secret.starts_with("SECRET") {
                            bad(&e.to_string());
                        }
                    }
                }
            }
            // As a tag of its own, and as a line of the key file.
            if let Err(e) = parse(&format!("Rule 1\n{secret}\n")) {
                bad(&e.to_string());
            }
            // (A key file's names are shown when they are plain names that do not look like a key: the text
            // marker stands for a value there only.)
            let named = secret.starts_with("SECRET");
            for line in [
                Some(secret.clone()),
                (!named).then(|| format!("{secret} = 0xzz")),
                Some(format!("a = {secret}x")),
                Some(format!("a = {secret}")),
                (!named).then(|| format!("{secret} = {KEY16}\n{secret} = {KEY16}")),
            ]
            .into_iter()
            .flatten()
            {
                if let Err(e) = Keys::parse(&line) {
                    bad(&e.to_string());
                }
            }
        }
    }
}
