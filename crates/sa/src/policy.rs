//! The policy engine (security policy database): ordered rules whose selectors match a flow and whose action says
//! protect (with a bundle of SAs, by index), bypass or discard. One engine serves ESP/AH now and PILSC later.

use ipnet::IpNet;
use std::collections::HashMap;
use std::net::IpAddr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Out,
    In,
}

/// What a matching rule does with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Protect with the bundle of this index (the caller's table of SA bundles).
    Protect(usize),
    Bypass,
    Discard,
}

/// An inclusive port range; `0..=65535` matches any (and also protocols without ports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortRange {
    pub start: u16,
    pub end: u16,
}

impl PortRange {
    pub const ANY: PortRange = PortRange {
        start: 0,
        end: 65535,
    };
    pub fn contains(&self, p: u16) -> bool {
        self.start <= p && p <= self.end
    }
    pub fn is_any(&self) -> bool {
        *self == Self::ANY
    }
}

/// The fields a policy looks at, taken from a packet (for inbound protected traffic: from the decapsulated packet).
/// Ports are 0 for protocols without ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub src_port: u16,
    pub dst_port: u16,
}

/// Traffic selectors: `proto` None matches any protocol.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Selector {
    pub src: IpNet,
    pub dst: IpNet,
    pub proto: Option<u8>,
    pub src_ports: PortRange,
    pub dst_ports: PortRange,
}

/// Whether an IP protocol number carries ports that selectors can match: TCP, UDP, SCTP, UDP-Lite.
pub fn has_ports(proto: u8) -> bool {
    matches!(proto, 6 | 17 | 132 | 136)
}

impl Selector {
    /// Any IPv4 traffic (0.0.0.0/0 to 0.0.0.0/0, any protocol, any ports).
    pub fn any_v4() -> Self {
        let net = IpNet::V4(ipnet::Ipv4Net::default());
        Selector {
            src: net,
            dst: net,
            proto: None,
            src_ports: PortRange::ANY,
            dst_ports: PortRange::ANY,
        }
    }

    /// Any IPv6 traffic (::/0 to ::/0, any protocol, any ports).
    pub fn any_v6() -> Self {
        let net = IpNet::V6(ipnet::Ipv6Net::default());
        Selector {
            src: net,
            dst: net,
            proto: None,
            src_ports: PortRange::ANY,
            dst_ports: PortRange::ANY,
        }
    }

    /// Whether the flow matches: both addresses in the prefixes (of the same family), the protocol (if set) equal,
    /// and each non-ANY port range containing the port, which requires a protocol with ports (TCP, UDP, SCTP,
    /// UDP-Lite).
    pub fn matches(&self, k: &FlowKey) -> bool {
        if !self.src.contains(&k.src) || !self.dst.contains(&k.dst) {
            return false;
        }
        if self.proto.is_some_and(|p| p != k.proto) {
            return false;
        }
        let port_ok = |range: &PortRange, port: u16| {
            range.is_any() || (has_ports(k.proto) && range.contains(port))
        };
        port_ok(&self.src_ports, k.src_port) && port_ok(&self.dst_ports, k.dst_port)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
/// One rule of a [`PolicyDb`] (the policy's name stays with its owner, which knows it by the rule's index: a
/// database is rebuilt for every change, and copying names into it cost an allocation per rule).
pub struct Rule {
    pub direction: Direction,
    pub selector: Selector,
    pub action: Action,
}

/// Ordered rules: the first rule (in insertion order) of the packet's direction whose selector matches wins; if none
/// matches, the default action applies.
///
/// Lookup does not scan every rule: the rules whose remote side (the destination of an outbound rule, the source of
/// an inbound one) is one host are chained by that host, and only that host's chain and the other rules are
/// looked at, in rule order (a gateway with a CHILD_SA per peer host has thousands of such rules). The result is
/// the linear scan's ([`PolicyDb::lookup_linear`], the model the tests compare against).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDb {
    rules: Vec<Rule>,
    default: Action,
    /// (direction, host) -> the first and last rule of its chain.
    hosts: HashMap<(Direction, IpAddr), (u32, u32)>,
    /// Per rule: the next rule of its host's chain ([`END`] at the end, and for rules in no chain).
    next: Vec<u32>,
    /// Per direction (out, in): the rules in no chain, in order.
    wild: [Vec<u32>; 2],
}

const END: u32 = u32::MAX;

fn dir_index(d: Direction) -> usize {
    match d {
        Direction::Out => 0,
        Direction::In => 1,
    }
}

/// The remote side of a rule's selector, if it is one host.
fn remote_host(r: &Rule) -> Option<IpAddr> {
    let net = match r.direction {
        Direction::Out => r.selector.dst,
        Direction::In => r.selector.src,
    };
    (net.prefix_len() == net.max_prefix_len()).then(|| net.addr())
}

impl PolicyDb {
    pub fn new(default: Action) -> Self {
        PolicyDb {
            rules: Vec::new(),
            default,
            hosts: HashMap::new(),
            next: Vec::new(),
            wild: [Vec::new(), Vec::new()],
        }
    }
    /// Empties the database (default action `default`), keeping its tables' room for the next rules: a database
    /// rebuilt for every change reuses its predecessor's instead of allocating its own.
    pub fn clear(&mut self, default: Action) {
        self.rules.clear();
        self.default = default;
        self.hosts.clear();
        self.next.clear();
        for w in &mut self.wild {
            w.clear();
        }
    }
    pub fn push(&mut self, rule: Rule) {
        let i = u32::try_from(self.rules.len()).expect("fewer than 2^32 rules");
        match remote_host(&rule) {
            Some(h) => match self.hosts.get_mut(&(rule.direction, h)) {
                Some((_, tail)) => {
                    self.next[*tail as usize] = i;
                    *tail = i;
                }
                None => {
                    self.hosts.insert((rule.direction, h), (i, i));
                }
            },
            None => self.wild[dir_index(rule.direction)].push(i),
        }
        self.next.push(END);
        self.rules.push(rule);
    }
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
    /// The action used when no rule matches.
    pub fn default_action(&self) -> Action {
        self.default
    }
    /// The winning rule's index (None for the default) and its action.
    pub fn lookup(&self, dir: Direction, key: &FlowKey) -> (Option<usize>, Action) {
        let remote = match dir {
            Direction::Out => key.dst,
            Direction::In => key.src,
        };
        let mut h = if self.hosts.is_empty() {
            END
        } else {
            self.hosts
                .get(&(dir, remote))
                .map_or(END, |&(first, _)| first)
        };
        let wild = &self.wild[dir_index(dir)];
        let mut w = 0;
        loop {
            let wi = wild.get(w).copied().unwrap_or(END);
            let i = h.min(wi);
            if i == END {
                return (None, self.default);
            }
            if i == h {
                h = self.next[i as usize];
            } else {
                w += 1;
            }
            let r = &self.rules[i as usize];
            if r.selector.matches(key) {
                return (Some(i as usize), r.action);
            }
        }
    }
    /// [`PolicyDb::lookup`] by scanning every rule: its definition.
    pub fn lookup_linear(&self, dir: Direction, key: &FlowKey) -> (Option<usize>, Action) {
        self.rules
            .iter()
            .enumerate()
            .find(|(_, r)| r.direction == dir && r.selector.matches(key))
            .map_or((None, self.default), |(i, r)| (Some(i), r.action))
    }
}

#[cfg(test)]
mod tests {
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
}
