use super::*;

fn key(src: &str, dst: &str, proto: u8, sp: u16, dp: u16) -> FlowKey {
    FlowKey {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        proto,
        src_port: sp,
        dst_port: dp,
    }
}

fn sel(src: &str, dst: &str, proto: Option<u8>, sp: PortRange, dp: PortRange) -> Selector {
    Selector {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        proto,
        src_ports: sp,
        dst_ports: dp,
    }
}

/// `name`: for the reader only.
fn rule(_name: &str, direction: Direction, selector: Selector, action: Action) -> Rule {
    Rule {
        direction,
        selector,
        action,
    }
}

const ANY: PortRange = PortRange::ANY;

/// An ICMP error is decided by the flow it quotes where a rule protects or discards that flow, else by its own
/// fields; a packet that is not an error by its own.
#[test]
fn an_error_is_decided_by_the_flow_it_quotes() {
    let mut db = PolicyDb::new(Action::Bypass);
    let udp = PortRange {
        start: 5001,
        end: 5001,
    };
    db.push(rule(
        "udp",
        Direction::Out,
        sel("0.0.0.0/0", "10.0.0.2/32", Some(17), ANY, udp),
        Action::Protect(0),
    ));
    db.push(rule(
        "dropped",
        Direction::Out,
        sel(
            "0.0.0.0/0",
            "10.0.0.2/32",
            Some(17),
            ANY,
            PortRange { start: 9, end: 9 },
        ),
        Action::Discard,
    ));
    db.push(rule(
        "icmp",
        Direction::Out,
        sel("0.0.0.0/0", "10.0.0.2/32", Some(1), ANY, ANY),
        Action::Protect(1),
    ));
    let icmp = key("10.0.0.1", "10.0.0.2", 1, 0, 0);
    let look = |k: &FlowKey| db.lookup(Direction::Out, k);
    let covered = key("10.0.0.1", "10.0.0.2", 17, 40000, 5001);
    let dropped = key("10.0.0.1", "10.0.0.2", 17, 40000, 9);
    let other = key("10.0.0.1", "10.0.0.2", 17, 40000, 53);
    assert_eq!(
        decide_error(&icmp, Some(&covered), look),
        ((Some(0), Action::Protect(0)), true)
    );
    assert_eq!(
        decide_error(&icmp, Some(&dropped), look),
        ((Some(1), Action::Discard), true)
    );
    assert_eq!(
        decide_error(&icmp, Some(&other), look),
        ((Some(2), Action::Protect(1)), false)
    );
    assert_eq!(
        decide_error(&icmp, None, look),
        ((Some(2), Action::Protect(1)), false)
    );
    let udp_only = |k: &FlowKey| {
        let (at, a) = db.lookup(Direction::Out, k);
        if at == Some(2) {
            (None, Action::Bypass)
        } else {
            (at, a)
        }
    };
    assert_eq!(
        decide_error(&icmp, Some(&other), udp_only),
        ((None, Action::Bypass), false)
    );
}

#[test]
fn port_range() {
    let r = PortRange {
        start: 1000,
        end: 2000,
    };
    assert!(!r.contains(999) && r.contains(1000) && r.contains(2000) && !r.contains(2001));
    assert!(!r.is_any());
    assert!(ANY.is_any() && ANY.contains(0) && ANY.contains(65535));
}

#[test]
fn prefixes() {
    let s = sel("10.0.0.0/8", "192.168.1.0/24", None, ANY, ANY);
    assert!(s.matches(&key("10.1.2.3", "192.168.1.9", 6, 1, 2)));
    assert!(s.matches(&key("10.255.255.255", "192.168.1.255", 1, 0, 0)));
    assert!(!s.matches(&key("11.0.0.1", "192.168.1.9", 6, 1, 2)));
    assert!(!s.matches(&key("10.0.0.1", "192.168.2.9", 6, 1, 2)));
    // Source and destination are not interchangeable.
    assert!(!s.matches(&key("192.168.1.9", "10.1.2.3", 6, 1, 2)));
    let host = sel("10.0.0.1/32", "0.0.0.0/0", None, ANY, ANY);
    assert!(host.matches(&key("10.0.0.1", "8.8.8.8", 17, 5, 53)));
    assert!(!host.matches(&key("10.0.0.2", "8.8.8.8", 17, 5, 53)));
}

#[test]
fn v4_v6_mixing() {
    let v4 = Selector::any_v4();
    let v6 = Selector::any_v6();
    let k4 = key("10.0.0.1", "10.0.0.2", 6, 1, 2);
    let k6 = key("2001:db8::1", "2001:db8::2", 6, 1, 2);
    assert!(v4.matches(&k4) && !v4.matches(&k6));
    assert!(v6.matches(&k6) && !v6.matches(&k4));
    // IPv4-mapped IPv6 addresses are IPv6 keys: no IPv4 prefix matches them.
    assert!(!v4.matches(&key("::ffff:10.0.0.1", "::ffff:10.0.0.2", 6, 1, 2)));
    // Mixed families in one key never match a single-family selector.
    assert!(!v4.matches(&key("10.0.0.1", "2001:db8::2", 6, 1, 2)));
    assert!(!v6.matches(&key("10.0.0.1", "2001:db8::2", 6, 1, 2)));
    let s = sel("2001:db8::/32", "::/0", None, ANY, ANY);
    assert!(s.matches(&key("2001:db8:1::5", "fe80::1", 58, 0, 0)));
    assert!(!s.matches(&key("2001:db9::5", "fe80::1", 58, 0, 0)));
}

#[test]
fn protocol() {
    let mut s = Selector::any_v4();
    s.proto = Some(17);
    assert!(s.matches(&key("1.1.1.1", "2.2.2.2", 17, 1, 2)));
    assert!(!s.matches(&key("1.1.1.1", "2.2.2.2", 6, 1, 2)));
    s.proto = None;
    assert!(s.matches(&key("1.1.1.1", "2.2.2.2", 50, 0, 0)));
}

#[test]
fn ports() {
    let https = PortRange {
        start: 443,
        end: 443,
    };
    let high = PortRange {
        start: 1024,
        end: 65535,
    };
    let s = sel("0.0.0.0/0", "0.0.0.0/0", None, high, https);
    for proto in [6, 17, 132, 136] {
        assert!(
            s.matches(&key("1.1.1.1", "2.2.2.2", proto, 50000, 443)),
            "proto {proto}"
        );
        assert!(s.matches(&key("1.1.1.1", "2.2.2.2", proto, 1024, 443)));
        assert!(!s.matches(&key("1.1.1.1", "2.2.2.2", proto, 1023, 443)));
        assert!(!s.matches(&key("1.1.1.1", "2.2.2.2", proto, 50000, 444)));
    }
    // Protocols without ports never match a non-ANY port range, even with "ports" 0 in range.
    let zero = PortRange { start: 0, end: 10 };
    let z = sel("0.0.0.0/0", "0.0.0.0/0", None, ANY, zero);
    assert!(z.matches(&key("1.1.1.1", "2.2.2.2", 6, 9, 0)));
    for proto in [1, 47, 50, 58] {
        assert!(
            !z.matches(&key("1.1.1.1", "2.2.2.2", proto, 0, 0)),
            "proto {proto}"
        );
        assert!(
            !s.matches(&key("1.1.1.1", "2.2.2.2", proto, 50000, 443)),
            "proto {proto}"
        );
    }
    // ANY ranges match protocols without ports.
    assert!(Selector::any_v4().matches(&key("1.1.1.1", "2.2.2.2", 1, 0, 0)));
    // Only the source range set.
    let src_only = sel(
        "0.0.0.0/0",
        "0.0.0.0/0",
        Some(6),
        PortRange { start: 22, end: 22 },
        ANY,
    );
    assert!(src_only.matches(&key("1.1.1.1", "2.2.2.2", 6, 22, 9999)));
    assert!(!src_only.matches(&key("1.1.1.1", "2.2.2.2", 6, 23, 9999)));
}

/// Rules of nested prefixes in no order of specificity: the first pushed that matches wins, whichever chain
/// (prefix length) or the any list it sits in; after `clear`, the same rules give the same answers.
#[test]
fn nested_prefixes_first_match_in_rule_order() {
    let out = |dst: &str, proto: Option<u8>, action| Rule {
        direction: Direction::Out,
        selector: sel(
            if dst.contains(':') {
                "::/0"
            } else {
                "0.0.0.0/0"
            },
            dst,
            proto,
            ANY,
            ANY,
        ),
        action,
    };
    let mut db = PolicyDb::new(Action::Discard);
    for round in 0..2 {
        db.clear(Action::Discard);
        db.push(out("10.1.0.0/16", Some(17), Action::Protect(0)));
        db.push(out("10.1.2.3/32", Some(6), Action::Protect(1)));
        db.push(out("10.1.2.0/24", None, Action::Protect(2)));
        db.push(out("0.0.0.0/0", Some(1), Action::Protect(3)));
        db.push(out("10.1.2.3/32", None, Action::Protect(4)));
        db.push(out("10.0.0.0/8", None, Action::Protect(5)));
        db.push(out("2001:db8::/32", None, Action::Protect(6)));
        let cases = [
            ("10.1.2.3", 17, Some(0)),
            ("10.1.2.3", 6, Some(1)),
            ("10.1.2.3", 1, Some(2)),
            ("10.1.2.3", 50, Some(2)),
            ("10.1.9.9", 1, Some(3)),
            ("10.1.9.9", 50, Some(5)),
            ("10.9.9.9", 6, Some(5)),
            ("11.0.0.1", 1, Some(3)),
            ("11.0.0.1", 6, None),
            ("2001:db8::5", 6, Some(6)),
            ("2001:db9::5", 6, None),
        ];
        for (dst, proto, want) in cases {
            let src = if dst.contains(':') {
                "::1"
            } else {
                "192.0.2.1"
            };
            let k = key(src, dst, proto, 1, 2);
            assert_eq!(
                db.lookup(Direction::Out, &k).0,
                want,
                "round {round}: {dst} {proto}"
            );
            assert_eq!(
                db.lookup_linear(Direction::Out, &k).0,
                want,
                "{dst} {proto}"
            );
            assert_eq!(db.lookup(Direction::In, &k), (None, Action::Discard));
        }
    }
}

#[test]
fn db_order_direction_default() {
    let mut db = PolicyDb::new(Action::Discard);
    let lan = sel("10.0.0.0/24", "10.1.0.0/24", None, ANY, ANY);
    let ssh = sel(
        "10.0.0.0/24",
        "10.1.0.0/24",
        Some(6),
        ANY,
        PortRange { start: 22, end: 22 },
    );
    db.push(rule(
        "ssh-bypass",
        Direction::Out,
        ssh.clone(),
        Action::Bypass,
    ));
    db.push(rule(
        "lan-out",
        Direction::Out,
        lan.clone(),
        Action::Protect(0),
    ));
    db.push(rule(
        "lan-out-shadowed",
        Direction::Out,
        lan.clone(),
        Action::Protect(7),
    ));
    db.push(rule("lan-in", Direction::In, lan, Action::Protect(1)));
    db.push(rule(
        "v6",
        Direction::Out,
        Selector::any_v6(),
        Action::Protect(2),
    ));
    assert_eq!(db.rules().len(), 5);
    assert_eq!(db.rules()[0].action, Action::Bypass);
    assert_eq!(db.default_action(), Action::Discard);

    let k_ssh = key("10.0.0.5", "10.1.0.9", 6, 40000, 22);
    let k_web = key("10.0.0.5", "10.1.0.9", 6, 40000, 80);
    assert_eq!(db.lookup(Direction::Out, &k_ssh), (Some(0), Action::Bypass));
    assert_eq!(
        db.lookup(Direction::Out, &k_web),
        (Some(1), Action::Protect(0))
    );
    // Rules of the other direction are skipped.
    assert_eq!(
        db.lookup(Direction::In, &k_ssh),
        (Some(3), Action::Protect(1))
    );
    assert_eq!(
        db.lookup(Direction::In, &k_web),
        (Some(3), Action::Protect(1))
    );
    // Default when nothing matches.
    let other = key("192.0.2.1", "10.1.0.9", 6, 1, 2);
    assert_eq!(db.lookup(Direction::Out, &other), (None, Action::Discard));
    let k6 = key("2001:db8::1", "2001:db8::2", 17, 1, 2);
    assert_eq!(
        db.lookup(Direction::Out, &k6),
        (Some(4), Action::Protect(2))
    );
    assert_eq!(db.lookup(Direction::In, &k6), (None, Action::Discard));

    let empty = PolicyDb::new(Action::Bypass);
    assert!(empty.rules().is_empty());
    assert_eq!(empty.lookup(Direction::In, &k_ssh), (None, Action::Bypass));
}
