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
//! - ICMP errors ([`judged`], [`decide`]): an error (destination unreachable, source quench, redirect, time
//!   exceeded, parameter problem) is judged by the packet it quotes, reversed, as RFC 4301 has IPsec do it (section
//!   6.2): a host's "port unreachable" for a protected UDP datagram quotes the *decrypted* datagram, so it is sealed
//!   under that datagram's rule and key, whatever the rules say of ICMP; the peer finds the key by the option's key
//!   id and the source, as for any packet, and after opening judges the error the same way. An error whose flow
//!   no rule protects is judged by its own fields (an ICMP rule). Coming in without the option, an error that quotes
//!   a protected flow is dropped, as clear traffic of that flow is.

use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net};
use netveil_sa::policy::{self, Action, Direction, FlowKey, PolicyDb, Selector};
use netveil_wire::icmp::{error_quote_of, ErrorQuote};
use netveil_wire::ip::Headers;

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

/// What the rules judge a packet by: its own fields, and for an ICMP error those of the packet it quotes, reversed
/// (the flow the error goes back along; see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judged {
    pub own: FlowKey,
    pub quoted: Option<FlowKey>,
}

/// Why a packet cannot be judged (the engine drops it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unjudged {
    /// Not an IPv4 packet whose headers [`netveil_wire::ip::flow_key`] reads ([`Headers::parse`]).
    Malformed,
    /// An ICMP error whose quote is not the start of an IPv4 packet with its ports: whether it quotes a protected
    /// flow cannot be told (Linux sends none such).
    UnreadableError,
}

/// The fields the rules judge the clear IPv4 packet `pkt` by (ports 0 where it has none); no allocation.
pub fn judged(pkt: &[u8]) -> Result<Judged, Unjudged> {
    let h = Headers::parse(pkt).map_err(|_| Unjudged::Malformed)?;
    judged_parsed(pkt, &h)
}

/// [`judged`] of a packet whose headers the caller parsed already (`h`, the view of `pkt` as it is): its flow is
/// read from the view; only an ICMP error's quote is read from the bytes.
pub fn judged_parsed(pkt: &[u8], h: &Headers) -> Result<Judged, Unjudged> {
    let f = h.flow();
    if !matches!(f.src, IpAddr::V4(_)) {
        return Err(Unjudged::Malformed);
    }
    let own = FlowKey {
        src: f.src,
        dst: f.dst,
        proto: f.proto,
        src_port: f.src_port,
        dst_port: f.dst_port,
    };
    let quoted = match error_quote_of(pkt, &f) {
        ErrorQuote::NotAnError => None,
        ErrorQuote::Unreadable => return Err(Unjudged::UnreadableError),
        ErrorQuote::Quotes(q) => {
            let r = q.reversed();
            Some(FlowKey {
                src: r.src,
                dst: r.dst,
                proto: r.proto,
                src_port: r.src_port,
                dst_port: r.dst_port,
            })
        }
    };
    Ok(Judged { own, quoted })
}

/// The decision for a packet judged by `j`, `lookup` being the rules' lookup in the packet's direction: for an ICMP
/// error, its quoted flow's where a rule protects it, else its own ([`netveil_sa::policy::decide_error`]). Returns
/// the lookup's answer and whether the quoted flow gave it.
pub fn decide(
    j: &Judged,
    lookup: impl FnMut(&FlowKey) -> (Option<usize>, Action),
) -> ((Option<usize>, Action), bool) {
    policy::decide_error(&j.own, j.quoted.as_ref(), lookup)
}
