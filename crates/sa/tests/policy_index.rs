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

/// Big tables, as a PILSC rule file of tens of thousands of peers makes them: 24,000 rules, most of them outbound hosts over a few /16s and
/// random /24s and /16s among them (so that one table grows past the size where it drops its /16 filter, and the
/// others keep theirs), with protocols, ports and local sides mixed, looked up against the linear scan for flows
/// to and from those peers and to strays; then the database is cleared and refilled with other rules (the tables
/// reused), and checked again.
#[test]
fn big_tables_agree_with_the_linear_scan_before_and_after_a_clear() {
    let mut seed = 0x5eed_u64;
    let mut next = move || {
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut db = PolicyDb::new(Action::Bypass);
    for round in 0..2u64 {
        db.clear(Action::Bypass);
        let mut peers = Vec::new();
        for i in 0..24_000u64 {
            let r = next();
            // Peers in 16 /16s (so that the /32 table's /16 bins are few), some in any /16.
            let a = if r % 4 == 0 {
                r as u32 >> 3
            } else {
                (10u32 << 24) | (((r >> 8) % 16) as u32) << 16 | (r >> 20) as u32 & 0xffff
            };
            let len = match (r >> 40) % 20 {
                0 => 16,
                1..=3 => 24,
                _ => 32,
            };
            let peer = ipnet::Ipv4Net::new(a.into(), len).unwrap().trunc();
            peers.push(a);
            let proto = [None, Some(6), Some(17), Some(1)][((r >> 44) % 4) as usize];
            let ported = matches!(proto, Some(6 | 17)) && (r >> 46) % 2 == 0;
            let p = ((r >> 48) % 3) as u16 * 1000 + 22;
            let ports = PortRange {
                start: p,
                end: p + ((r >> 50) % 2) as u16 * 500,
            };
            let local: ipnet::IpNet = match (r >> 52) % 4 {
                0 => "192.0.2.0/24".parse().unwrap(),
                1 => "::/0".parse().unwrap(),
                _ => "0.0.0.0/0".parse().unwrap(),
            };
            // (Outbound /32s past 16,384: that table drops its filter.)
            let dir = if (r >> 55) % 16 != 0 {
                Direction::Out
            } else {
                Direction::In
            };
            let (src, dst) = match dir {
                Direction::Out => (local, ipnet::IpNet::V4(peer)),
                Direction::In => (ipnet::IpNet::V4(peer), local),
            };
            let (src_ports, dst_ports) = match (ported, (r >> 57) % 2) {
                (false, _) => (PortRange::ANY, PortRange::ANY),
                (true, 0) => (ports, PortRange::ANY),
                (true, _) => (PortRange::ANY, ports),
            };
            db.push(Rule {
                direction: dir,
                selector: Selector {
                    src,
                    dst,
                    proto,
                    src_ports,
                    dst_ports,
                },
                action: match (r >> 59) % 3 {
                    0 => Action::Bypass,
                    1 => Action::Discard,
                    _ => Action::Protect((i + round) as usize),
                },
            });
        }
        let mut hits = 0;
        for _ in 0..10_000 {
            let r = next();
            let peer = if r % 8 == 0 {
                (r >> 8) as u32
            } else {
                peers[((r >> 8) % peers.len() as u64) as usize] ^ ((r >> 40) as u32 & 0x1ff)
            };
            let us: u32 = if (r >> 50) % 2 == 0 {
                0xc000_0207
            } else {
                0xc633_6407
            };
            let proto = [1u8, 6, 17][((r >> 52) % 3) as usize];
            let (sp, dp) = (
                ((r >> 54) % 3) as u16 * 1000 + 22,
                ((r >> 56) % 4) as u16 * 300 + 22,
            );
            for dir in [Direction::Out, Direction::In] {
                let (src, dst) = match dir {
                    Direction::Out => (us, peer),
                    Direction::In => (peer, us),
                };
                let k = FlowKey {
                    src: IpAddr::from(src.to_be_bytes()),
                    dst: IpAddr::from(dst.to_be_bytes()),
                    proto,
                    src_port: if proto == 1 { 0 } else { sp },
                    dst_port: if proto == 1 { 0 } else { dp },
                };
                let want = db.lookup_linear(dir, &k);
                assert_eq!(db.lookup(dir, &k), want, "round {round} {dir:?} {k:?}");
                hits += usize::from(want.0.is_some());
            }
        }
        // Most flows find a rule (the test is not all misses).
        assert!(hits > 5_000, "{hits}");
    }
}
