//! The policy database's indexed lookup against its model, the linear scan (first rule of the direction whose
//! selector matches): random rule lists mixing host rules (many sharing a host, as a gateway's CHILD_SAs do),
//! prefixes of every length (the chained ones, several lengths nesting over the same addresses), any (0/0),
//! protocols and port ranges, both families and directions, in no particular order (a wide rule may come before a
//! narrow one), and random flows drawn from the same small address pool so that most of them hit some rule.

use netveil_sa::policy::{Action, Direction, FlowKey, PolicyDb, PortRange, Rule, Selector};
use proptest::prelude::*;
use std::net::IpAddr;

/// A small pool of addresses sharing prefixes of many lengths (so that rules of different lengths nest over the
/// same flows), in both families.
fn addr(v6: bool, i: u8) -> IpAddr {
    const V4: [&str; 8] = [
        "10.0.0.1",
        "10.0.0.2",
        "10.0.0.129",
        "10.0.1.1",
        "10.1.0.1",
        "10.128.0.1",
        "11.0.0.1",
        "192.168.0.1",
    ];
    const V6: [&str; 8] = [
        "fd00::1",
        "fd00::2",
        "fd00::8000:1",
        "fd00:0:0:1::1",
        "fd00:1::1",
        "fd80::1",
        "fe80::1",
        "2001:db8::1",
    ];
    let pool = if v6 { V6 } else { V4 };
    pool[usize::from(i) % pool.len()].parse().unwrap()
}

fn net(v6: bool, i: u8, len: u8) -> ipnet::IpNet {
    let max = if v6 { 128 } else { 32 };
    // Hosts, any, and prefixes of every length, about a third each.
    let len = match len % 6 {
        0 => 0,
        1 | 2 => max,
        _ => (len / 6) % (max + 1),
    };
    ipnet::IpNet::new(addr(v6, i), len).unwrap().trunc()
}

fn ports(a: u16, b: u16) -> PortRange {
    if a.is_multiple_of(3) {
        PortRange::ANY
    } else {
        PortRange {
            start: a.min(b) % 8,
            end: a.max(b) % 8 + 1,
        }
    }
}

prop_compose! {
    fn rule()(v6 in any::<bool>(), out in any::<bool>(), s in any::<u8>(), sl in any::<u8>(), d in any::<u8>(),
              dl in any::<u8>(), proto in prop::option::of(prop::sample::select(vec![1u8, 6, 17])),
              p in any::<(u16, u16, u16, u16)>(), act in 0u8..3) -> Rule {
        let (src_ports, dst_ports) = if matches!(proto, Some(6) | Some(17)) {
            (ports(p.0, p.1), ports(p.2, p.3))
        } else {
            (PortRange::ANY, PortRange::ANY)
        };
        Rule {
            direction: if out { Direction::Out } else { Direction::In },
            selector: Selector { src: net(v6, s, sl), dst: net(v6, d, dl), proto, src_ports, dst_ports },
            action: match act { 0 => Action::Bypass, 1 => Action::Discard, _ => Action::Protect(s as usize) },
        }
    }
}

prop_compose! {
    fn flow()(v6 in any::<bool>(), s in any::<u8>(), d in any::<u8>(), stray in any::<(u8, u32)>(),
              proto in prop::sample::select(vec![1u8, 6, 17, 50]), sp in 0u16..10, dp in 0u16..10) -> FlowKey {
        let ported = matches!(proto, 6 | 17);
        // Now and then an address from outside the pool (most likely under no rule's prefix but 0/0).
        let (src, dst) = match stray.0 % 8 {
            0 if !v6 => (IpAddr::from(stray.1.to_be_bytes()), addr(v6, d)),
            1 if !v6 => (addr(v6, s), IpAddr::from(stray.1.to_be_bytes())),
            _ => (addr(v6, s), addr(v6, d)),
        };
        FlowKey {
            src,
            dst,
            proto,
            src_port: if ported { sp } else { 0 },
            dst_port: if ported { dp } else { 0 },
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn indexed_lookup_is_the_linear_scan(rules in prop::collection::vec(rule(), 0..40),
                                         flows in prop::collection::vec(flow(), 1..40)) {
        let mut db = PolicyDb::new(Action::Discard);
        for r in rules {
            db.push(r);
        }
        for f in &flows {
            for dir in [Direction::Out, Direction::In] {
                prop_assert_eq!(db.lookup(dir, f), db.lookup_linear(dir, f), "{:?} {:?}", dir, f);
            }
        }
    }
}

/// Many host rules (a CHILD_SA per peer) ahead of a catch-all: each peer's flow finds its own rule, an unknown
/// peer the catch-all, a flow of the wrong direction neither.
#[test]
fn thousands_of_host_rules_find_their_own() {
    let mut db = PolicyDb::new(Action::Discard);
    let host = |i: u32| IpAddr::from([10, 2, (i / 250) as u8, (i % 250) as u8]);
    let lan: ipnet::IpNet = "10.1.0.0/16".parse().unwrap();
    for i in 0..5000u32 {
        db.push(Rule {
            direction: Direction::Out,
            selector: Selector {
                src: lan,
                dst: ipnet::IpNet::new(host(i), 32).unwrap(),
                proto: None,
                src_ports: PortRange::ANY,
                dst_ports: PortRange::ANY,
            },
            action: Action::Protect(i as usize),
        });
    }
    db.push(Rule {
        direction: Direction::Out,
        selector: Selector {
            src: lan,
            dst: "10.2.0.0/16".parse().unwrap(),
            proto: None,
            src_ports: PortRange::ANY,
            dst_ports: PortRange::ANY,
        },
        action: Action::Bypass,
    });
    let f = |dst: IpAddr| FlowKey {
        src: "10.1.0.1".parse().unwrap(),
        dst,
        proto: 1,
        src_port: 0,
        dst_port: 0,
    };
    for i in [0u32, 1, 2499, 4999] {
        assert_eq!(
            db.lookup(Direction::Out, &f(host(i))),
            (Some(i as usize), Action::Protect(i as usize))
        );
    }
    assert_eq!(
        db.lookup(Direction::Out, &f("10.2.200.1".parse().unwrap())),
        (Some(5000), Action::Bypass)
    );
    assert_eq!(
        db.lookup(Direction::In, &f(host(7))),
        (None, Action::Discard)
    );
}
