//! A loaded rule file compiled into the policy engine the other protocols use ([`netveil_sa::policy`]): per rule,
//! most specific first, one outbound and one inbound policy rule, so that the engine's first match is the rule
//! file's most specific match.
//!
//! - Outbound (we send to the peer): destination the rule's `IP`, source any; `Applmode = Server` puts the port
//!   range on the source port (ours), `Client` on the destination port (the peer's).
//! - Inbound (the peer sends to us): source the rule's `IP`, destination any; `Server`'s range on the destination
//!   port, `Client`'s on the source port. An inbound protected packet is checked after decryption, on its clear
//!   transport header, as ESP's inbound policy check is.
//! - The action: `Protect(k)` with `k` the rule's key (the caller's key index) for `Security = true`, `Bypass` for
//!   `Security = false`; traffic no rule selects passes (`Bypass`, the paper's "all else passes").

use ipnet::{IpNet, Ipv4Net};
use netveil_sa::policy::{self, Action, Direction, PolicyDb, Selector};

use crate::rules::{ApplMode, Rule, RuleFile};

fn range(r: crate::rules::PortRange) -> policy::PortRange {
    policy::PortRange {
        start: r.lo,
        end: r.hi,
    }
}

/// The policy rule of `rule` in direction `dir`.
pub fn selector(rule: &Rule, dir: Direction) -> Selector {
    let any = IpNet::V4(Ipv4Net::default());
    let peer = IpNet::V4(rule.peer);
    let (src, dst) = match dir {
        Direction::Out => (any, peer),
        Direction::In => (peer, any),
    };
    let (mut src_ports, mut dst_ports) = (policy::PortRange::ANY, policy::PortRange::ANY);
    if let Some((ports, mode)) = rule.port {
        // Ours is the source going out and the destination coming in.
        let ours = matches!(
            (mode, dir),
            (ApplMode::Server, Direction::Out) | (ApplMode::Client, Direction::In)
        );
        if ours {
            src_ports = range(ports);
        } else {
            dst_ports = range(ports);
        }
    }
    Selector {
        src,
        dst,
        proto: rule.protocol.number(),
        src_ports,
        dst_ports,
    }
}

/// The policy database of a rule file: rule `i` of [`RuleFile::rules`] is policy rules `2i` (out) and `2i + 1` (in),
/// so a lookup's rule index `at` is the file's rule `at / 2` ([`file_rule`]).
///
/// `rule_key[i]` is rule `i`'s key (its index in the caller's key table, e.g. [`crate::table::Table::rule_key`]):
/// a protected rule's action is `Protect(key)`, so a lookup answers with the key itself and the packet path reads
/// no per-rule key index. A protected rule without a key (`rule_key` short or `None`) gets `Discard`: its traffic
/// never passes in clear.
pub fn compile(file: &RuleFile, rule_key: &[Option<usize>]) -> PolicyDb {
    let mut db = PolicyDb::new(Action::Bypass);
    for (i, r) in file.rules.iter().enumerate() {
        let action = match (&r.protect, rule_key.get(i).copied().flatten()) {
            (None, _) => Action::Bypass,
            (Some(_), Some(k)) => Action::Protect(k),
            (Some(_), None) => Action::Discard,
        };
        for direction in [Direction::Out, Direction::In] {
            db.push(policy::Rule {
                direction,
                selector: selector(r, direction),
                action,
            });
        }
    }
    db
}

/// The rule of [`RuleFile::rules`] that the policy rule `at` of [`compile`]'s database comes from.
pub fn file_rule(at: usize) -> usize {
    at / 2
}
