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

/// An IPv4 packet `src` -> `dst` of protocol `proto` around `payload` (header checksum right; what a transport
/// checksum says does not matter here).
fn ip4(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    use netveil_wire::ipv4;
    let mut p = vec![0u8; ipv4::MIN_HEADER_LEN];
    ipv4::Repr {
        src: src.into(),
        dst: dst.into(),
        protocol: proto,
        payload_len: payload.len(),
        ttl: 64,
        dscp_ecn: 0,
        ident: 9,
        dont_frag: true,
    }
    .emit(&mut ipv4::Packet::new_unchecked(&mut p[..]));
    p.extend_from_slice(payload);
    p
}

/// A TCP or UDP header (`proto`) from `sp` to `dp` and `data`.
fn l4(proto: u8, sp: u16, dp: u16, data: &[u8]) -> Vec<u8> {
    let mut t = [sp.to_be_bytes(), dp.to_be_bytes()].concat();
    t.resize(if proto == 6 { 20 } else { 8 }, 0);
    if proto == 6 {
        t[12] = 5 << 4;
    }
    t.extend_from_slice(data);
    t
}

/// The ICMP error of type `t` that `from` sends back to `to` about `quoted` (quoted whole, as Linux does).
fn error(from: [u8; 4], to: [u8; 4], t: u8, quoted: &[u8]) -> Vec<u8> {
    let mut m = vec![t, 3, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(quoted);
    ip4(from, to, 1, &m)
}

/// An ICMP error is judged by the packet it quotes (RFC 4301 6.2): a port unreachable about a protected UDP
/// datagram, or an error about a protected TCP segment, is under that rule and key on both sides, going out and
/// coming in, in both directions of the flow (the responder's closed port, the initiator's closed ephemeral port);
/// about an unprotected flow, it is judged by its own fields (an ICMP rule if there is one, else it passes); an
/// error whose quote cannot be read cannot be judged.
#[test]
fn icmp_errors_are_judged_by_the_packet_they_quote() {
    const A: [u8; 4] = [10, 77, 0, 1];
    const B: [u8; 4] = [10, 77, 0, 2];
    // B serves UDP 5001 and TCP 5002 (A is their client); with `icmp`, ICMP between them is protected too.
    let rules = |peer: &str, mode: &str, icmp: bool| {
        let mut t = format!(
            "Rule = 1; Security = true; IP = {peer}; Protocol = UDP; Port = 5001; Applmode = {mode}; \
             Encryption = ChaCha20; Key = u\n\
             Rule = 2; Security = true; IP = {peer}; Protocol = TCP; Port = 5002; Applmode = {mode}; \
             Encryption = AES-128; Key = t\n"
        );
        if icmp {
            t += &format!("Rule = 3; Security = true; IP = {peer}; Protocol = ICMP; Encryption = 1; Key = i\n");
        }
        parse(&t).unwrap()
    };
    use netveil_pilsc::policy::{decide, judged, Unjudged};
    for icmp in [false, true] {
        let fa = rules("10.77.0.2", "Client", icmp);
        let fb = rules("10.77.0.1", "Server", icmp);
        let (da, db) = (compile(&fa, &by_rule(&fa)), compile(&fb, &by_rule(&fb)));
        let key = |f: &netveil_pilsc::rules::RuleFile, n: u32| {
            Action::Protect(f.rules.iter().position(|r| r.number == n).unwrap())
        };
        // (the error's sender, its rules, the receiver, its rules, the quoted packet, the rule both must find)
        let sent_to_b_5001 = ip4(A, B, 17, &l4(17, 40000, 5001, b"TOP-SECRET"));
        let sent_to_a_eph = ip4(B, A, 17, &l4(17, 5001, 40000, b"TOP-SECRET"));
        let tcp_to_b = ip4(A, B, 6, &l4(6, 40001, 5002, b"TOP-SECRET"));
        let tcp_to_a = ip4(B, A, 6, &l4(6, 5002, 40001, b"TOP-SECRET"));
        let clear_udp = ip4(A, B, 17, &l4(17, 40000, 53, b"dns"));
        let cases = [
            (B, &db, &fb, A, &da, &fa, &sent_to_b_5001, Some(1)),
            (A, &da, &fa, B, &db, &fb, &sent_to_a_eph, Some(1)),
            (B, &db, &fb, A, &da, &fa, &tcp_to_b, Some(2)),
            (A, &da, &fa, B, &db, &fb, &tcp_to_a, Some(2)),
            (B, &db, &fb, A, &da, &fa, &clear_udp, None),
        ];
        for (from, dbf, ff, to, dbt, ft, quoted, rule) in cases {
            for t in [3u8, 11, 12] {
                let e = error(from, to, t, quoted);
                let j = judged(&e).unwrap();
                let out = decide(&j, |k| dbf.lookup(Direction::Out, k));
                let inn = decide(&j, |k| dbt.lookup(Direction::In, k));
                match rule {
                    Some(n) => {
                        assert_eq!((out.0 .1, out.1), (key(ff, n), true), "type {t} {rule:?}");
                        assert_eq!((inn.0 .1, inn.1), (key(ft, n), true), "type {t} {rule:?}");
                    }
                    // An unprotected flow's error: the ICMP rule's where there is one, else it passes.
                    None if icmp => {
                        assert_eq!((out.0 .1, out.1), (key(ff, 3), false));
                        assert_eq!((inn.0 .1, inn.1), (key(ft, 3), false));
                    }
                    None => {
                        assert_eq!(out, ((None, Action::Bypass), false));
                        assert_eq!(inn, ((None, Action::Bypass), false));
                    }
                }
                // Quoted no more than RFC 792 asks (the header and 8 bytes): the same.
                let short = error(from, to, t, &quoted[..28]);
                let js = judged(&short).unwrap();
                assert_eq!(js.quoted, j.quoted);
            }
        }
        // An echo quotes nothing: judged by its own fields.
        let echo = ip4(B, A, 1, &[8, 0, 0, 0, 0, 1, 0, 1]);
        let j = judged(&echo).unwrap();
        assert_eq!(j.quoted, None);
        let want = if icmp { key(&fb, 3) } else { Action::Bypass };
        assert_eq!(decide(&j, |k| db.lookup(Direction::Out, k)).0 .1, want);
        // A quote cut before the ports, or of a later fragment: it cannot be told what it quotes.
        assert_eq!(
            judged(&error(B, A, 3, &sent_to_b_5001[..22])),
            Err(Unjudged::UnreadableError)
        );
        let mut later = sent_to_b_5001.clone();
        later[7] = 0x10;
        assert_eq!(
            judged(&error(B, A, 3, &later)),
            Err(Unjudged::UnreadableError)
        );
        assert_eq!(judged(&sent_to_b_5001[..10]), Err(Unjudged::Malformed));
    }
}
