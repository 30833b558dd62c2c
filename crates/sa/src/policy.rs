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
    pub const ANY: PortRange = PortRange { start: 0, end: 65535 };
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

impl Selector {
    pub fn matches(&self, k: &FlowKey) -> bool {
        let _ = k;
        todo!()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    pub name: String,
    pub direction: Direction,
    pub selector: Selector,
    pub action: Action,
}

/// Ordered rules: the first rule (in insertion order) of the packet's direction whose selector matches wins; if none
/// matches, the default action applies.
pub struct PolicyDb {
    _todo: (),
}

impl PolicyDb {
    pub fn new(default: Action) -> Self {
        let _ = default;
        todo!()
    }
    pub fn push(&mut self, rule: Rule) {
        let _ = rule;
        todo!()
    }
    pub fn rules(&self) -> &[Rule] {
        todo!()
    }
    /// The winning rule's index (None for the default) and its action.
    pub fn lookup(&self, dir: Direction, key: &FlowKey) -> (Option<usize>, Action) {
        let _ = (dir, key);
        todo!()
    }
}
