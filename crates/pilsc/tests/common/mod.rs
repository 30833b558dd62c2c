//! Random rules for the property tests.

use netveil_pilsc::cipher::Cipher;
use netveil_pilsc::rules::{ApplMode, KeyRef, PortRange, Protection, Protocol, Rule};
use proptest::prelude::*;

/// A rule with a random peer prefix, protocol, port range and mode (for TCP and UDP), protection (any algorithm,
/// a literal key of its shortest length) or none; number and line 0 (the caller numbers them).
pub fn arb_rule() -> impl Strategy<Value = Rule> {
    let proto = prop_oneof![
        Just(Protocol::Tcp),
        Just(Protocol::Udp),
        Just(Protocol::Icmp),
        Just(Protocol::Any)
    ];
    (
        any::<u32>(),
        0u8..=32,
        proto,
        any::<(u16, u16)>(),
        any::<bool>(),
        any::<bool>(),
        prop::option::of((0usize..6, prop::collection::vec(any::<u8>(), 32))),
    )
        .prop_map(|(addr, len, protocol, (a, b), server, ports, protect)| {
            let peer = ipnet::Ipv4Net::new(addr.into(), len).unwrap().trunc();
            let port = (ports && matches!(protocol, Protocol::Tcp | Protocol::Udp)).then(|| {
                (
                    PortRange {
                        lo: a.min(b),
                        hi: a.max(b),
                    },
                    if server {
                        ApplMode::Server
                    } else {
                        ApplMode::Client
                    },
                )
            });
            let protect = protect.map(|(c, key)| {
                let cipher = Cipher::ALL[c];
                let n = *cipher.key_len().start();
                Protection {
                    cipher,
                    key: KeyRef::Literal(zeroize::Zeroizing::new(key[..n].to_vec())),
                }
            });
            Rule {
                number: 0,
                line: 0,
                peer,
                protocol,
                port,
                protect,
            }
        })
}

/// Writes rules as a file, one tag per line, in a layout chosen by `style`.
pub fn render(rules: &[Rule], style: u8) -> String {
    let mut s = String::new();
    for r in rules {
        let p = |t: &str, v: String| match style % 3 {
            0 => format!("{t} = {v};\n"),
            1 => format!("{t} {v}\n"),
            _ => format!("  {} = {v}  # {t}\n", t.to_uppercase()),
        };
        s += &p("Rule", r.number.to_string());
        s += &p("Security", (r.protect.is_some()).to_string());
        s += &p("IP", r.peer.to_string());
        s += &p("Protocol", format!("{:?}", r.protocol));
        if let Some((ports, mode)) = r.port {
            s += &p("Port", format!("{}-{}", ports.lo, ports.hi));
            s += &p("Applmode", format!("{mode:?}"));
        }
        if let Some(pr) = &r.protect {
            s += &p("Encryption", pr.cipher.number().to_string());
            let KeyRef::Literal(k) = &pr.key else {
                unreachable!()
            };
            s += &p("Key", format!("0x{}", hex::encode(k.as_slice())));
        }
    }
    s
}
