//! A rule file compiled into the policy engine: the paper's example record, Server and Client ports in both
//! directions, and over random rule sets and packets, the engine's answer (indexed and linear) against a naive
//! scan of the rule file written from its documentation: the most specific rule whose peer, protocol and port
//! (ours for Server, the peer's for Client) match.

use std::net::{IpAddr, Ipv4Addr};

use netveil_pilsc::policy::compile;
use netveil_pilsc::rules::{parse, ApplMode, Protocol, Rule};
use netveil_sa::policy::{Action, Direction, FlowKey};
use proptest::prelude::*;

mod common;
use common::{arb_rule, render};

const US: &str = "10.9.9.9";

/// A key index per rule: each protected rule its own (its own index), so that `Protect(i)` names rule `i`.
fn by_rule(f: &netveil_pilsc::rules::RuleFile) -> Vec<Option<usize>> {
    f.rules
        .iter()
        .enumerate()
        .map(|(i, r)| r.protect.as_ref().map(|_| i))
        .collect()
}

fn flow(dir: Direction, peer: &str, proto: u8, ours: u16, theirs: u16) -> FlowKey {
    let (us, peer): (IpAddr, IpAddr) = (US.parse().unwrap(), peer.parse().unwrap());
    match dir {
        Direction::Out => FlowKey {
            src: us,
            dst: peer,
            proto,
            src_port: ours,
            dst_port: theirs,
        },
        Direction::In => FlowKey {
            src: peer,
            dst: us,
            proto,
            src_port: theirs,
            dst_port: ours,
        },
    }
}

#[test]
fn server_and_client_ports_in_both_directions() {
    // Rule 1: the paper's: FTP served by us to 193.140.1.1. Rule 2: DNS we ask of 193.140.1.0/24, in clear.
    // Rule 3: every other packet with the /24 protected.
    let f = parse(
        "Rule = 1; Security = true; IP = 193.140.1.1; Protocol = TCP; Port = 20-21; Encryption = 1; \
         Applmode = Server; Key = 0xcda8;\n\
         Rule = 2; Security = false; IP = c1:8c:01:00/24; Protocol = UDP; Port = 53; Applmode = Client\n\
         Rule = 3; Security = true; IP = 193.140.1.0/24; Protocol = any; Encryption = AES-256; Key = k\n",
    )
    .unwrap();
    let db = compile(&f, &by_rule(&f));
    let idx = |n: u32| f.rules.iter().position(|r| r.number == n).unwrap();
    let cases = [
        // (direction, peer, protocol, our port, their port, rule)
        (Direction::Out, "193.140.1.1", 6, 21, 40000, Some(1)),
        (Direction::In, "193.140.1.1", 6, 20, 40000, Some(1)),
        // Their port 21 is not ours: rule 3 (any protocol, the /24).
        (Direction::Out, "193.140.1.1", 6, 40000, 21, Some(3)),
        (Direction::In, "193.140.1.1", 6, 40000, 21, Some(3)),
        (Direction::Out, "193.140.1.7", 17, 5353, 53, Some(2)),
        (Direction::In, "193.140.1.7", 17, 5353, 53, Some(2)),
        (Direction::Out, "193.140.1.7", 17, 53, 5353, Some(3)),
        (Direction::Out, "193.140.1.7", 1, 0, 0, Some(3)),
        (Direction::In, "193.140.2.7", 6, 21, 21, None),
    ];
    for (dir, peer, proto, ours, theirs, want) in cases {
        let k = flow(dir, peer, proto, ours, theirs);
        let (at, action) = db.lookup(dir, &k);
        let got = at.map(|i| f.rules[i / 2].number);
        assert_eq!(got, want, "{dir:?} {k:?}");
        let expected = match want {
            Some(1) => Action::Protect(idx(1)),
            Some(3) => Action::Protect(idx(3)),
            _ => Action::Bypass,
        };
        assert_eq!(action, expected, "{dir:?} {k:?}");
    }
}

/// The rule file's own definition: of the rules that select the packet, the most specific (longer prefix, a
/// named protocol before `any`, fewer ports, Server before Client, lower number).
fn naive(rules: &[Rule], dir: Direction, k: &FlowKey) -> Option<u32> {
    let (remote, ours, theirs) = match dir {
        Direction::Out => (k.dst, k.src_port, k.dst_port),
        Direction::In => (k.src, k.dst_port, k.src_port),
    };
    let IpAddr::V4(remote) = remote else {
        return None;
    };
    rules
        .iter()
        .filter(|r| {
            r.peer.contains(&remote)
                && r.protocol.number().is_none_or(|p| p == k.proto)
                && match r.port {
                    None => true,
                    Some((range, ApplMode::Server)) => range.contains(ours),
                    Some((range, ApplMode::Client)) => range.contains(theirs),
                }
        })
        .min_by_key(|r| {
            let (span, mode) = match r.port {
                None => (65536, 2),
                Some((range, m)) => (range.span(), if m == ApplMode::Server { 0 } else { 1 }),
            };
            (
                32 - r.peer.prefix_len(),
                r.protocol == Protocol::Any,
                span,
                mode,
                r.number,
            )
        })
        .map(|r| r.number)
}

/// A packet near the rules: inside a rule's prefix or anywhere, a protocol of the rules or another, ports at a
/// rule's range ends or anywhere.
fn arb_flow(rules: Vec<Rule>) -> impl Strategy<Value = (Vec<Rule>, Vec<(Direction, FlowKey)>)> {
    let n = rules.len().max(1);
    let one = (
        any::<bool>(),
        0..n,
        any::<u32>(),
        prop::sample::select(vec![1u8, 6, 17, 47]),
        (0..n, 0usize..3, any::<u16>()),
        (0..n, 0usize..3, any::<u16>()),
    );
    let rules2 = rules.clone();
    prop::collection::vec(one, 1..40).prop_map(move |flows| {
        let port =
            |(i, how, p): (usize, usize, u16)| match (rules2.get(i).and_then(|r| r.port), how) {
                (Some((r, _)), 0) => r.lo,
                (Some((r, _)), 1) => r.hi,
                _ => p,
            };
        let v = flows
            .into_iter()
            .map(|(out, i, bits, proto, a, b)| {
                let addr = match rules2.get(i) {
                    Some(r) if bits % 4 != 0 => {
                        let host_mask = !u32::from(r.peer.netmask());
                        Ipv4Addr::from(u32::from(r.peer.network()) | (bits & host_mask))
                    }
                    _ => Ipv4Addr::from(bits),
                };
                let dir = if out { Direction::Out } else { Direction::In };
                let (ours, theirs) = if matches!(proto, 6 | 17) {
                    (port(a), port(b))
                } else {
                    (0, 0)
                };
                (dir, flow(dir, &addr.to_string(), proto, ours, theirs))
            })
            .collect();
        (rules2.clone(), v)
    })
}

fn numbered(mut rules: Vec<Rule>) -> Vec<Rule> {
    let mut seen = std::collections::HashSet::new();
    rules.retain(|r| seen.insert((r.peer, r.protocol, r.port)));
    for (i, r) in rules.iter_mut().enumerate() {
        r.number = i as u32 + 1;
    }
    rules
}

proptest! {
    #[test]
    fn the_compiled_policy_agrees_with_a_naive_scan(
        (rules, flows) in prop::collection::vec(arb_rule(), 0..60).prop_map(numbered).prop_flat_map(arb_flow)
    ) {
        // Loaded as a file, so that the order is the loader's.
        let file = parse(&render(&rules, 0)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let db = compile(&file, &by_rule(&file));
        for (dir, k) in &flows {
            let want = naive(&rules, *dir, k);
            let (at, action) = db.lookup(*dir, k);
            prop_assert_eq!(db.lookup_linear(*dir, k), (at, action));
            let got = at.map(|i| file.rules[i / 2].number);
            prop_assert_eq!(got, want, "{:?} {:?}", dir, k);
            let protected = want
                .and_then(|n| rules.iter().find(|r| r.number == n))
                .is_some_and(|r| r.protect.is_some());
            prop_assert_eq!(matches!(action, Action::Protect(_)), protected);
        }
    }
}

#[test]
fn a_protected_rule_without_a_key_discards_and_the_action_names_the_key() {
    let f = parse(
        "Rule = 1; Security = true; IP = 10.0.0.1; Protocol = TCP; Encryption = AES-128; Key = a\n\
         Rule = 2; Security = true; IP = 10.0.0.2; Protocol = TCP; Encryption = AES-128; Key = b\n",
    )
    .unwrap();
    let idx = |n: u32| f.rules.iter().position(|r| r.number == n).unwrap();
    let mut keys = vec![None; 2];
    keys[idx(1)] = Some(7);
    let db = compile(&f, &keys);
    for dir in [Direction::Out, Direction::In] {
        let (at, action) = db.lookup(dir, &flow(dir, "10.0.0.1", 6, 1000, 2000));
        assert_eq!(action, Action::Protect(7));
        assert_eq!(at.map(netveil_pilsc::policy::file_rule), Some(idx(1)));
        // Rule 2 has no key: its traffic is dropped, never passed in clear.
        let (at, action) = db.lookup(dir, &flow(dir, "10.0.0.2", 6, 1000, 2000));
        assert_eq!(action, Action::Discard);
        assert_eq!(at.map(netveil_pilsc::policy::file_rule), Some(idx(2)));
    }
}
