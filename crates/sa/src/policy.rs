//! The policy engine (security policy database): ordered rules whose selectors match a flow and whose action says
//! protect (with a bundle of SAs, by index), bypass or discard. One engine serves ESP/AH now and PILSC later.

use ipnet::IpNet;
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

/// The decision for a packet that may be an ICMP error, as RFC 4301 (section 6.2) has it: an error is judged by
/// the flow of the packet it quotes, reversed (`quoted`: the error goes back along that flow), so that it is
/// protected, with the same SAs or key, or discarded as that flow is, and never leaves in clear with the flow's
/// headers and data in it; where no rule protects or discards that flow (the answer is `Bypass`), it is judged by
/// its own fields (`own`: an ICMP rule may still cover it). `quoted` is `None` for a packet that is not an error.
/// `lookup` is the caller's policy lookup. Returns the decision and whether the quoted flow made it.
pub fn decide_error(
    own: &FlowKey,
    quoted: Option<&FlowKey>,
    mut lookup: impl FnMut(&FlowKey) -> (Option<usize>, Action),
) -> ((Option<usize>, Action), bool) {
    if let Some(q) = quoted {
        let d = lookup(q);
        if d.1 != Action::Bypass {
            return (d, true);
        }
    }
    (lookup(own), false)
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
/// Lookup does not scan every rule. Each rule whose remote side (the destination of an outbound rule, the source of
/// an inbound one) is a prefix other than 0/0 (a host is a /32 or /128) is chained with the other rules of its
/// direction and remote prefix, in rule order; a table per direction, family and prefix length maps the network
/// to its chain. A lookup probes one table per prefix length that rules of the packet's direction and family have
/// (a handful in practice: one for a gateway whose CHILD_SAs each name a peer host; at most 32 for IPv4, 128 for
/// IPv6), and merges the chains found with the rules whose remote side is any (0/0), in rule order, so that the
/// first rule that matches is the one that wins whatever order the rules come in. The result is the linear scan's
/// ([`PolicyDb::lookup_linear`], the model the tests compare against).
///
/// The memory a lookup touches is kept small, so that its cost stays flat from ten rules to a hundred thousand
/// (whose tables outgrow the CPU's caches): a table slot holds the network and its chain's first rule together
/// (one cache line per probe); a table of few networks is skipped without a probe when its bitmap of the /16s
/// (IPv4) or /16-prefixes (IPv6) it covers has the packet's bit clear (8 KB, kept while the table covers at most a
/// quarter of them); and the first rule of each chain has a 20-byte digest of its selector and action in the slot,
/// enough to decide an IPv4 rule, or an IPv6 rule whose local side is any, without reading the rule itself (the
/// rest of a chain is read from the rules: a digest per rule would cost 20 bytes per rule in every snapshot of the
/// IP engine's policies).
#[derive(Debug, Clone)]
pub struct PolicyDb {
    rules: Vec<Rule>,
    default: Action,
    /// Per direction (out, in): the IPv4 chains of each prefix length used so far (kept, emptied, by `clear`).
    v4: [Vec<Chains<u32>>; 2],
    /// Per direction (out, in): the IPv6 chains of each prefix length used so far.
    v6: [Vec<Chains<[u8; 16]>>; 2],
    /// Per rule: the next rule of its chain ([`END`] at the end, and for rules in no chain).
    next: Vec<u32>,
    /// Per direction (out, in): the rules whose remote side is any (0/0), in order.
    wild: [Vec<u32>; 2],
}

/// A network as a table key: its /16 bin (the filter's bit).
trait Net: Copy + Eq + std::hash::Hash {
    const ZERO: Self;
    fn bin(&self) -> usize;
}

impl Net for u32 {
    const ZERO: Self = 0;
    fn bin(&self) -> usize {
        (*self >> 16) as usize
    }
}

impl Net for [u8; 16] {
    const ZERO: Self = [0; 16];
    fn bin(&self) -> usize {
        usize::from(u16::from_be_bytes([self[0], self[1]]))
    }
}

/// Bits of a filter: one per /16 bin.
const BINS: usize = 1 << 16;
/// A table keeps its filter while it holds at most this many networks (a quarter of the bins at most are set).
const FILTER_MAX: usize = BINS / 4;

/// The chains of one direction, family and prefix length: an open-addressing table (linear probing, a power of two
/// of slots, at most three quarters full) of network (host bits zero) -> its chain's first rules.
#[derive(Debug, Clone)]
struct Chains<N> {
    len: u8,
    slots: Vec<Slot<N>>,
    /// Per slot: the chain's last rule (read by `push` only).
    tails: Vec<u32>,
    count: usize,
    /// One bit per /16 bin holding a network of the table, while `count <= FILTER_MAX` (`None` beyond).
    filter: Option<Box<[u64]>>,
    hasher: ahash::RandomState,
}

/// A network's chain as its table holds it: the first rule with its digest (so that the usual lookup, decided by
/// the first rule of its chain, reads one slot and nothing else) and the second rule. Aligned to 32 bytes so that
/// an IPv4 slot never straddles two cache lines.
#[derive(Debug, Clone, Copy)]
#[repr(align(32))]
struct Slot<N> {
    net: N,
    /// [`END`] for an empty slot.
    first: u32,
    /// [`END`] for a chain of one rule.
    second: u32,
    head: Quick,
}

impl<N: Net> Slot<N> {
    const EMPTY: Self = Slot {
        net: N::ZERO,
        first: END,
        second: END,
        head: Quick::NONE,
    };
}

impl<N: Net> Chains<N> {
    fn new(len: u8) -> Self {
        Chains {
            len,
            slots: Vec::new(),
            tails: Vec::new(),
            count: 0,
            filter: Some(vec![0u64; BINS / 64].into_boxed_slice()),
            hasher: ahash::RandomState::new(),
        }
    }

    fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = Slot::EMPTY);
        self.count = 0;
        match &mut self.filter {
            Some(f) => f.iter_mut().for_each(|w| *w = 0),
            None => self.filter = Some(vec![0u64; BINS / 64].into_boxed_slice()),
        }
    }

    /// The slot of `net`, or the empty slot where it would go.
    #[inline]
    fn slot(&self, net: &N) -> usize {
        let mask = self.slots.len() - 1;
        let mut at = self.hasher.hash_one(net) as usize & mask;
        loop {
            let s = &self.slots[at];
            if s.first == END || s.net == *net {
                return at;
            }
            at = (at + 1) & mask;
        }
    }

    /// The slot of `net`'s chain, if it has one.
    #[inline]
    fn get(&self, net: &N) -> Option<&Slot<N>> {
        if self.count == 0 {
            return None;
        }
        if let Some(f) = &self.filter {
            let b = net.bin();
            if f[b / 64] & (1 << (b % 64)) == 0 {
                return None;
            }
        }
        let s = &self.slots[self.slot(net)];
        (s.first != END).then_some(s)
    }

    /// Appends rule `i` (digest `q`) to `net`'s chain (made if new); `next` is the rules' chain links.
    fn append(&mut self, net: N, i: u32, q: Quick, next: &mut [u32]) {
        if 4 * (self.count + 1) > 3 * self.slots.len() {
            self.grow();
        }
        let at = self.slot(&net);
        let s = &mut self.slots[at];
        if s.first == END {
            *s = Slot {
                net,
                first: i,
                second: END,
                head: q,
            };
            self.count += 1;
            if self.count > FILTER_MAX {
                self.filter = None;
            }
            if let Some(f) = &mut self.filter {
                let b = net.bin();
                f[b / 64] |= 1 << (b % 64);
            }
        } else {
            if s.second == END {
                s.second = i;
            }
            next[self.tails[at] as usize] = i;
        }
        self.tails[at] = i;
    }

    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(16);
        let old = std::mem::replace(&mut self.slots, vec![Slot::EMPTY; size]);
        let old_tails = std::mem::replace(&mut self.tails, vec![END; size]);
        for (s, t) in old.into_iter().zip(old_tails) {
            if s.first != END {
                let at = self.slot(&s.net);
                self.slots[at] = s;
                self.tails[at] = t;
            }
        }
    }
}

/// A rule's selector and action in 20 bytes, in its chain's slot when it is the chain's first: enough to decide a rule whose local side is IPv4 or
/// any (of the remote side's family) without reading the rule. `flags` says which parts are any and whether the
/// digest decides at all.
#[derive(Debug, Clone, Copy)]
struct Quick {
    src_ports: (u16, u16),
    dst_ports: (u16, u16),
    /// The action's bundle index (for [`Action::Protect`]).
    bundle: u32,
    /// An IPv4 local side's network and prefix length (0 for any; an IPv6 local side is decided only when any).
    local: u32,
    local_len: u8,
    proto: u8,
    flags: u8,
}

const Q_DECIDES: u8 = 1;
const Q_PROTO_ANY: u8 = 2;
const Q_SRC_PORTS_ANY: u8 = 4;
const Q_DST_PORTS_ANY: u8 = 8;
const Q_PROTECT: u8 = 16;
const Q_DISCARD: u8 = 32;
/// The local side is the source (an outbound rule), else the destination.
const Q_LOCAL_SRC: u8 = 64;

impl Quick {
    /// A digest that decides nothing.
    const NONE: Quick = Quick {
        src_ports: (0, 0),
        dst_ports: (0, 0),
        bundle: 0,
        local: 0,
        local_len: 0,
        proto: 0,
        flags: 0,
    };

    fn of(r: &Rule) -> Quick {
        let local = match r.direction {
            Direction::Out => r.selector.src,
            Direction::In => r.selector.dst,
        };
        let remote = remote_net(r);
        let mut flags = 0;
        let mut bundle = 0;
        match r.action {
            Action::Protect(b) => match u32::try_from(b) {
                Ok(b) => {
                    bundle = b;
                    flags |= Q_PROTECT;
                }
                // (A bundle index this large is never decided by the digest.)
                Err(_) => return Quick::NONE,
            },
            Action::Discard => flags |= Q_DISCARD,
            Action::Bypass => {}
        }
        let (local, local_len) = match local {
            _ if local.addr().is_ipv4() != remote.addr().is_ipv4() => return Quick::NONE,
            IpNet::V4(n) => (net4(n.addr().into(), n.prefix_len()), n.prefix_len()),
            IpNet::V6(n) if n.prefix_len() == 0 => (0, 0),
            IpNet::V6(_) => return Quick::NONE,
        };
        flags |= Q_DECIDES;
        if r.direction == Direction::Out {
            flags |= Q_LOCAL_SRC;
        }
        let s = &r.selector;
        if s.proto.is_none() {
            flags |= Q_PROTO_ANY;
        }
        if s.src_ports.is_any() {
            flags |= Q_SRC_PORTS_ANY;
        }
        if s.dst_ports.is_any() {
            flags |= Q_DST_PORTS_ANY;
        }
        Quick {
            src_ports: (s.src_ports.start, s.src_ports.end),
            dst_ports: (s.dst_ports.start, s.dst_ports.end),
            bundle,
            local,
            local_len,
            proto: s.proto.unwrap_or(0),
            flags,
        }
    }

    /// Whether the rule matches `k`, whose remote address is in the rule's remote prefix (`None`: ask the rule).
    #[inline]
    fn matches(&self, k: &FlowKey) -> Option<bool> {
        if self.flags & Q_DECIDES == 0 {
            return None;
        }
        if self.flags & Q_PROTO_ANY == 0 && self.proto != k.proto {
            return Some(false);
        }
        if self.local_len != 0 {
            let ours = if self.flags & Q_LOCAL_SRC != 0 {
                k.src
            } else {
                k.dst
            };
            // (A local side of `local_len` > 0 is IPv4, as the remote side the chain matched.)
            let IpAddr::V4(a) = ours else {
                return Some(false);
            };
            if net4(a.into(), self.local_len) != self.local {
                return Some(false);
            }
        }
        let ported = has_ports(k.proto);
        let port_ok = |any: u8, (lo, hi): (u16, u16), p: u16| {
            self.flags & any != 0 || (ported && lo <= p && p <= hi)
        };
        Some(
            port_ok(Q_SRC_PORTS_ANY, self.src_ports, k.src_port)
                && port_ok(Q_DST_PORTS_ANY, self.dst_ports, k.dst_port),
        )
    }

    fn action(&self) -> Action {
        if self.flags & Q_PROTECT != 0 {
            Action::Protect(self.bundle as usize)
        } else if self.flags & Q_DISCARD != 0 {
            Action::Discard
        } else {
            Action::Bypass
        }
    }
}

/// Two databases are equal when their rules and default are (the tables follow from the rules).
impl PartialEq for PolicyDb {
    fn eq(&self, other: &Self) -> bool {
        self.rules == other.rules && self.default == other.default
    }
}

impl Eq for PolicyDb {}

const END: u32 = u32::MAX;

fn dir_index(d: Direction) -> usize {
    match d {
        Direction::Out => 0,
        Direction::In => 1,
    }
}

/// The remote side of a rule's selector.
fn remote_net(r: &Rule) -> IpNet {
    match r.direction {
        Direction::Out => r.selector.dst,
        Direction::In => r.selector.src,
    }
}

fn net4(addr: u32, len: u8) -> u32 {
    addr & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn net6(addr: u128, len: u8) -> [u8; 16] {
    (addr & u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)).to_be_bytes()
}

/// Probes the tables `t` for the chains of `key`'s remote address (`net(len)` its network of each length): a chain
/// whose first rule's digest decides it either matched (the earliest such rule kept in `best`: the rest of its
/// chain comes later) or goes on with its second rule; a chain whose digest does not decide joins `heads` with its
/// first rule.
#[inline]
fn probe<N: Net>(
    t: &[Chains<N>],
    net: impl Fn(u8) -> N,
    key: &FlowKey,
    heads: &mut [u32],
    n: &mut usize,
    best: &mut (u32, Action),
) {
    for c in t {
        let Some(s) = c.get(&net(c.len)) else {
            continue;
        };
        let head = match s.head.matches(key) {
            Some(true) => {
                if s.first < best.0 {
                    *best = (s.first, s.head.action());
                }
                continue;
            }
            Some(false) => s.second,
            None => s.first,
        };
        if head != END {
            heads[*n] = head;
            *n += 1;
        }
    }
}

/// The chains of prefix length `len` in `t` (made if new).
fn chains_of<N: Net>(t: &mut Vec<Chains<N>>, len: u8) -> &mut Chains<N> {
    let at = match t.iter().position(|c| c.len == len) {
        Some(at) => at,
        None => {
            t.push(Chains::new(len));
            t.len() - 1
        }
    };
    &mut t[at]
}

impl PolicyDb {
    pub fn new(default: Action) -> Self {
        PolicyDb {
            rules: Vec::new(),
            default,
            v4: [Vec::new(), Vec::new()],
            v6: [Vec::new(), Vec::new()],
            next: Vec::new(),
            wild: [Vec::new(), Vec::new()],
        }
    }
    /// Empties the database (default action `default`), keeping its tables' room for the next rules: a database
    /// rebuilt for every change reuses its predecessor's instead of allocating its own.
    pub fn clear(&mut self, default: Action) {
        self.rules.clear();
        self.default = default;
        for t in &mut self.v4 {
            t.iter_mut().for_each(Chains::clear);
        }
        for t in &mut self.v6 {
            t.iter_mut().for_each(Chains::clear);
        }
        self.next.clear();
        for w in &mut self.wild {
            w.clear();
        }
    }
    pub fn push(&mut self, rule: Rule) {
        let i = u32::try_from(self.rules.len())
            .ok()
            .filter(|&i| i != END)
            .expect("fewer than 2^32 - 1 rules");
        let d = dir_index(rule.direction);
        let net = remote_net(&rule);
        let len = net.prefix_len();
        let q = Quick::of(&rule);
        self.next.push(END);
        match net {
            _ if len == 0 => self.wild[d].push(i),
            IpNet::V4(n) => chains_of(&mut self.v4[d], len).append(
                net4(n.addr().into(), len),
                i,
                q,
                &mut self.next,
            ),
            IpNet::V6(n) => chains_of(&mut self.v6[d], len).append(
                net6(n.addr().into(), len),
                i,
                q,
                &mut self.next,
            ),
        }
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
        let d = dir_index(dir);
        // The heads of the chains of the remote address's prefixes, at most one per prefix length.
        match remote {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                let (mut heads, mut n, mut best) = ([END; 33], 0, (END, self.default));
                probe(
                    &self.v4[d],
                    |len| net4(a, len),
                    key,
                    &mut heads,
                    &mut n,
                    &mut best,
                );
                self.merge(d, key, &mut heads[..n], best)
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                let (mut heads, mut n, mut best) = ([END; 129], 0, (END, self.default));
                probe(
                    &self.v6[d],
                    |len| net6(a, len),
                    key,
                    &mut heads,
                    &mut n,
                    &mut best,
                );
                self.merge(d, key, &mut heads[..n], best)
            }
        }
    }
    /// The first rule in rule order, among the chains starting at `heads`, the wild rules of direction `d` and `best`
    /// (a rule known to match, [`END`] for none), that matches `key` (whose remote address is in each chain's
    /// network).
    #[inline]
    fn merge(
        &self,
        d: usize,
        key: &FlowKey,
        heads: &mut [u32],
        best: (u32, Action),
    ) -> (Option<usize>, Action) {
        let wild = &self.wild[d];
        let mut w = 0;
        // Merge the chains and the wild rules in rule order: each rule is in one of them only.
        loop {
            let mut i = wild.get(w).copied().unwrap_or(END);
            let mut at = usize::MAX;
            for (j, &h) in heads.iter().enumerate() {
                if h < i {
                    i = h;
                    at = j;
                }
            }
            if i >= best.0 {
                return match best {
                    (END, _) => (None, self.default),
                    (b, action) => (Some(b as usize), action),
                };
            }
            // (The first rules of the chains were decided by their slots' digests where they could be.)
            let r = &self.rules[i as usize];
            if r.selector.matches(key) {
                return (Some(i as usize), r.action);
            }
            // (The next rule of a chain is read only when needed: one memory access less for the usual first hit.)
            match heads.get_mut(at) {
                Some(h) => *h = self.next[i as usize],
                None => w += 1,
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
mod tests;
