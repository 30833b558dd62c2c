//! A policy database with an exact-match flow cache in front of its lookup ([`CachedPolicy`]), as Open vSwitch's
//! exact-match cache sits in front of its classifier: a flow's first packet pays the full lookup
//! ([`PolicyDb::lookup`]), its later packets one hash and one cache line, whatever the number of rules.
//!
//! Why: the full lookup is sub-linear, but a database of 100,000 rules outgrows the CPU's caches, so a packet of a
//! random flow among thousands reads its prefix tables from memory (PILSC's lookup: 31 ns at 10 rules, 44 ns at
//! 100,000 on a 2-core AMD EPYC). The cache's memory depends on the flows, not on the rules: a host's thousands of
//! flows take the same cache lines under 10 rules as under 100,000.
//!
//! Safe by construction:
//! - The cache owns its database: the database is only read through [`CachedPolicy::db`], and the one way to change
//!   it, [`CachedPolicy::replace`], empties the cache, so an answer of an old database is never given for a new one.
//! - An entry holds the whole flow key (both IPv4 addresses, protocol, both ports, direction) and the lookup's whole
//!   answer: a hit is exactly what [`PolicyDb::lookup`] would say (the property test below checks it against the
//!   linear scan over random operations, reloads included). IPv6 flows go to the database, uncached.
//! - The set of a flow comes from a keyed hash (a random key per cache), so a peer cannot aim its flows at one set;
//!   a flood of new flows only turns hits into misses, each answered by the full lookup.
//!
//! Layout: sets of two 32-byte entries, one 64-byte cache line per set; a flow may sit in either of two sets (two
//! choices from one hash: few flows are pushed out while the cache holds fewer flows than entries).

use std::net::IpAddr;

use crate::policy::{Action, Direction, FlowKey, PolicyDb};

/// One cached flow: its key (0 for an empty entry: a key's lowest bit is always set) and the lookup's answer.
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: u128,
    /// The winning rule, [`NONE`] for the database's default.
    at: u32,
    /// The action: [`BYPASS`], [`DISCARD`] or [`PROTECT`] + the bundle index.
    act: u32,
}

const NONE: u32 = u32::MAX;
const BYPASS: u32 = 0;
const DISCARD: u32 = 1;
const PROTECT: u32 = 2;

const EMPTY: Entry = Entry {
    key: 0,
    at: NONE,
    act: BYPASS,
};

/// Two entries in one cache line.
#[derive(Debug, Clone, Copy)]
#[repr(align(64))]
struct Set([Entry; 2]);

/// The flow key of an IPv4 flow as one number: source, destination, ports, protocol, direction, and a set low bit.
fn pack(dir: Direction, k: &FlowKey) -> Option<u128> {
    let (IpAddr::V4(s), IpAddr::V4(d)) = (k.src, k.dst) else {
        return None;
    };
    let dir = match dir {
        Direction::Out => 0u128,
        Direction::In => 1,
    };
    Some(
        u128::from(u32::from(s)) << 96
            | u128::from(u32::from(d)) << 64
            | u128::from(k.src_port) << 48
            | u128::from(k.dst_port) << 32
            | u128::from(k.proto) << 8
            | dir << 1
            | 1,
    )
}

/// An answer as an entry holds it (`None`: not cacheable, a bundle index beyond `u32`).
fn encode((at, action): (Option<usize>, Action)) -> Option<(u32, u32)> {
    let at = match at {
        None => NONE,
        Some(i) => u32::try_from(i).ok().filter(|&i| i != NONE)?,
    };
    let act = match action {
        Action::Bypass => BYPASS,
        Action::Discard => DISCARD,
        Action::Protect(b) => u32::try_from(b).ok()?.checked_add(PROTECT)?,
    };
    Some((at, act))
}

fn decode(e: &Entry) -> (Option<usize>, Action) {
    let at = (e.at != NONE).then_some(e.at as usize);
    let action = match e.act {
        BYPASS => Action::Bypass,
        DISCARD => Action::Discard,
        b => Action::Protect((b - PROTECT) as usize),
    };
    (at, action)
}

/// A [`PolicyDb`] and the flow cache in front of its lookup; one per thread that classifies packets (a lookup
/// writes the cache).
#[derive(Debug)]
pub struct CachedPolicy {
    db: PolicyDb,
    sets: Box<[Set]>,
    hasher: ahash::RandomState,
    /// Which of the four entries of a flow's two full sets the next miss replaces.
    victim: usize,
    hits: u64,
    misses: u64,
}

impl CachedPolicy {
    /// The sets of [`CachedPolicy::new`]: 8,192 flows in 256 KB.
    pub const DEFAULT_SETS: usize = 4096;

    /// `db` with a cache of [`CachedPolicy::DEFAULT_SETS`] sets.
    pub fn new(db: PolicyDb) -> Self {
        Self::with_sets(db, Self::DEFAULT_SETS)
    }

    /// `db` with a cache of `sets` sets (rounded up to a power of two, at least one) of two flows each.
    pub fn with_sets(db: PolicyDb, sets: usize) -> Self {
        CachedPolicy {
            db,
            sets: vec![Set([EMPTY; 2]); sets.max(1).next_power_of_two()].into_boxed_slice(),
            hasher: ahash::RandomState::new(),
            victim: 0,
            hits: 0,
            misses: 0,
        }
    }

    /// The database (read only: [`CachedPolicy::replace`] changes it).
    pub fn db(&self) -> &PolicyDb {
        &self.db
    }

    /// Puts `db` in place of the database, empties the cache, and gives the old database back (to reuse its room,
    /// [`PolicyDb::clear`]).
    pub fn replace(&mut self, db: PolicyDb) -> PolicyDb {
        self.sets.iter_mut().for_each(|s| *s = Set([EMPTY; 2]));
        std::mem::replace(&mut self.db, db)
    }

    /// Lookups answered by the cache and by the database since the start.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }

    /// [`PolicyDb::lookup`]'s answer: from the cache when the flow is in it, else from the database (and then
    /// cached).
    #[inline]
    pub fn lookup(&mut self, dir: Direction, key: &FlowKey) -> (Option<usize>, Action) {
        let Some(k) = pack(dir, key) else {
            return self.db.lookup(dir, key);
        };
        let h = self.hasher.hash_one(k);
        let mask = self.sets.len() - 1;
        let (a, b) = (h as usize & mask, (h >> 32) as usize & mask);
        for s in [a, b] {
            if let Some(e) = self.sets[s].0.iter().find(|e| e.key == k) {
                self.hits += 1;
                return decode(e);
            }
        }
        self.misses += 1;
        let answer = self.db.lookup(dir, key);
        if let Some((at, act)) = encode(answer) {
            let entry = Entry { key: k, at, act };
            let free = [(a, 0), (a, 1), (b, 0), (b, 1)]
                .into_iter()
                .find(|&(s, w)| self.sets[s].0[w].key == 0);
            let (s, w) = free.unwrap_or_else(|| {
                self.victim = self.victim.wrapping_add(1);
                ([a, b][self.victim >> 1 & 1], self.victim & 1)
            });
            self.sets[s].0[w] = entry;
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{PortRange, Rule, Selector};
    use proptest::prelude::*;

    const NETS: [&str; 6] = [
        "10.0.0.0/8",
        "10.1.0.0/16",
        "10.1.2.0/24",
        "10.1.2.3/32",
        "10.1.2.4/32",
        "0.0.0.0/0",
    ];
    const ADDRS: [&str; 5] = ["10.1.2.3", "10.1.2.4", "10.1.9.9", "10.7.7.7", "192.0.2.1"];

    fn port_range() -> impl Strategy<Value = PortRange> {
        prop_oneof![
            Just(PortRange::ANY),
            (0u16..4, 0u16..4).prop_map(|(a, b)| PortRange {
                start: a.min(b),
                end: a.max(b)
            }),
        ]
    }

    fn rule() -> impl Strategy<Value = Rule> {
        (
            any::<bool>(),
            0..NETS.len(),
            0..NETS.len(),
            prop::option::of(prop::sample::select(vec![1u8, 6, 17])),
            port_range(),
            port_range(),
            0u8..4,
        )
            .prop_map(|(out, s, d, proto, src_ports, dst_ports, act)| Rule {
                direction: if out { Direction::Out } else { Direction::In },
                selector: Selector {
                    src: NETS[s].parse().unwrap(),
                    dst: NETS[d].parse().unwrap(),
                    proto,
                    src_ports,
                    dst_ports,
                },
                action: match act {
                    0 => Action::Bypass,
                    1 => Action::Discard,
                    // A bundle index `u32` cannot hold: answered, never cached.
                    2 => Action::Protect(usize::MAX),
                    _ => Action::Protect(act as usize),
                },
            })
    }

    fn db() -> impl Strategy<Value = PolicyDb> {
        (prop::collection::vec(rule(), 0..12), 0u8..3).prop_map(|(rules, default)| {
            let mut db = PolicyDb::new(match default {
                0 => Action::Bypass,
                1 => Action::Discard,
                _ => Action::Protect(9),
            });
            rules.into_iter().for_each(|r| db.push(r));
            db
        })
    }

    fn flow() -> impl Strategy<Value = (Direction, FlowKey)> {
        (
            any::<bool>(),
            0..ADDRS.len(),
            0..ADDRS.len(),
            prop::sample::select(vec![1u8, 6, 17, 50]),
            0u16..5,
            0u16..5,
            any::<bool>(),
        )
            .prop_map(|(out, s, d, proto, sp, dp, v6)| {
                let addr = |i: usize| -> IpAddr {
                    if v6 {
                        format!("2001:db8::{i}").parse().unwrap()
                    } else {
                        ADDRS[i].parse().unwrap()
                    }
                };
                let ported = crate::policy::has_ports(proto);
                (
                    if out { Direction::Out } else { Direction::In },
                    FlowKey {
                        src: addr(s),
                        dst: addr(d),
                        proto,
                        src_port: if ported { sp } else { 0 },
                        dst_port: if ported { dp } else { 0 },
                    },
                )
            })
    }

    #[derive(Debug, Clone)]
    enum Op {
        Lookup(Direction, FlowKey),
        Replace(PolicyDb),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            20 => flow().prop_map(|(d, k)| Op::Lookup(d, k)),
            1 => db().prop_map(Op::Replace),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Over random lookups and reloads, with caches small enough that flows push each other out, every answer
        /// is the linear scan's of the database in place at the time.
        #[test]
        fn the_cache_answers_as_the_database_in_place(
            first in db(),
            ops in prop::collection::vec(op(), 1..300),
            sets in 1usize..5,
        ) {
            let mut c = CachedPolicy::with_sets(first, sets);
            for op in ops {
                match op {
                    Op::Lookup(d, k) => {
                        let want = c.db().lookup_linear(d, &k);
                        prop_assert_eq!(c.lookup(d, &k), want, "{:?} {:?}", d, k);
                    }
                    Op::Replace(db) => {
                        c.replace(db);
                    }
                }
            }
        }
    }

    #[test]
    fn a_flows_second_packet_is_a_hit_and_a_reload_forgets_it() {
        let k = FlowKey {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.1.2.3".parse().unwrap(),
            proto: 6,
            src_port: 40000,
            dst_port: 443,
        };
        let mut protect = PolicyDb::new(Action::Bypass);
        protect.push(Rule {
            direction: Direction::Out,
            selector: Selector {
                dst: "10.1.2.0/24".parse().unwrap(),
                ..Selector::any_v4()
            },
            action: Action::Protect(3),
        });
        let mut c = CachedPolicy::new(protect);
        assert_eq!(c.lookup(Direction::Out, &k), (Some(0), Action::Protect(3)));
        assert_eq!(c.lookup(Direction::Out, &k), (Some(0), Action::Protect(3)));
        assert_eq!(c.hits_and_misses(), (1, 1));
        // The same flow the other way is another flow.
        assert_eq!(c.lookup(Direction::In, &k), (None, Action::Bypass));
        c.replace(PolicyDb::new(Action::Discard));
        assert_eq!(c.lookup(Direction::Out, &k), (None, Action::Discard));
        assert_eq!(c.hits_and_misses(), (1, 3));
    }

    #[test]
    fn a_set_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Set>(), 64);
        assert_eq!(std::mem::align_of::<Set>(), 64);
    }
}
