//! The policy flow cache on hostile operations: random small databases (with a default of each kind), random flows
//! (IPv4 and IPv6, both directions, a few addresses and ports so that flows repeat), reloads, and a cache of one to
//! eight sets (so that flows push each other out): every answer is the linear scan's of the database in place, and every IPv4 lookup counts as a hit or a miss.

#![no_main]

use libfuzzer_sys::arbitrary::{Result as AResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use netveil_sa::flow_cache::CachedPolicy;
use netveil_sa::policy::{Action, Direction, FlowKey, PolicyDb, PortRange, Rule, Selector};
use std::net::IpAddr;

const NETS: [&str; 8] = [
    "10.0.0.0/8",
    "10.1.0.0/16",
    "10.1.2.0/24",
    "10.1.2.3/32",
    "10.1.2.4/32",
    "0.0.0.0/0",
    "2001:db8::/32",
    "2001:db8::1/128",
];
const V4: [&str; 5] = ["10.1.2.3", "10.1.2.4", "10.1.9.9", "10.7.7.7", "192.0.2.1"];
const V6: [&str; 2] = ["2001:db8::1", "2001:db8::2"];

fn action(u: &mut Unstructured) -> AResult<Action> {
    Ok(match u.int_in_range(0u8..=3)? {
        0 => Action::Bypass,
        1 => Action::Discard,
        2 => Action::Protect(usize::MAX - usize::from(u.arbitrary::<u8>()?)),
        _ => Action::Protect(usize::from(u.arbitrary::<u16>()?)),
    })
}

fn ports(u: &mut Unstructured) -> AResult<PortRange> {
    if u.arbitrary()? {
        return Ok(PortRange::ANY);
    }
    let (a, b) = (u.int_in_range(0u16..=4)?, u.int_in_range(0u16..=4)?);
    Ok(PortRange { start: a.min(b), end: a.max(b) })
}

fn db(u: &mut Unstructured) -> AResult<PolicyDb> {
    let mut db = PolicyDb::new(action(u)?);
    for _ in 0..u.int_in_range(0u8..=12)? {
        let (s, d) = (*u.choose(&NETS)?, *u.choose(&NETS)?);
        db.push(Rule {
            direction: if u.arbitrary()? { Direction::Out } else { Direction::In },
            selector: Selector {
                src: s.parse().unwrap(),
                dst: d.parse().unwrap(),
                proto: if u.arbitrary()? { None } else { Some(*u.choose(&[1u8, 6, 17])?) },
                src_ports: ports(u)?,
                dst_ports: ports(u)?,
            },
            action: action(u)?,
        });
    }
    Ok(db)
}

fn flow(u: &mut Unstructured) -> AResult<(Direction, FlowKey)> {
    let v6 = u.ratio(1u8, 8)?;
    let addr = |u: &mut Unstructured| -> AResult<IpAddr> {
        Ok(if v6 { u.choose(&V6)? } else { u.choose(&V4)? }.parse().unwrap())
    };
    let proto = *u.choose(&[1u8, 6, 17, 50])?;
    let ported = netveil_sa::policy::has_ports(proto);
    let (sp, dp) = (u.int_in_range(0u16..=4)?, u.int_in_range(0u16..=4)?);
    Ok((
        if u.arbitrary()? { Direction::Out } else { Direction::In },
        FlowKey {
            src: addr(u)?,
            dst: addr(u)?,
            proto,
            src_port: if ported { sp } else { 0 },
            dst_port: if ported { dp } else { 0 },
        },
    ))
}

fn run(u: &mut Unstructured) -> AResult<()> {
    let sets = usize::from(u.int_in_range(1u8..=8)?);
    let mut c = CachedPolicy::with_sets(db(u)?, sets);
    let mut v4 = 0u64;
    while !u.is_empty() {
        if u.ratio(1u8, 24)? {
            c.replace(db(u)?);
            continue;
        }
        let (d, k) = flow(u)?;
        let want = c.db().lookup_linear(d, &k);
        assert_eq!(c.lookup(d, &k), want, "{d:?} {k:?}");
        v4 += u64::from(k.src.is_ipv4() && k.dst.is_ipv4());
        // Every IPv4 lookup is a hit or a miss (IPv6 goes to the database uncounted).
        let (hits, misses) = c.hits_and_misses();
        assert_eq!(hits + misses, v4);
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
