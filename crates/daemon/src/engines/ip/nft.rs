//! The IP engine's nftables table: the fail-closed filters (covered traffic leaves only through the TUN or the
//! daemon's own sockets, also when the daemon is gone) and the peer filter in front of the receive sockets.

use crate::engines::ip::config::{Config, PolicyRule};
use crate::runtime::engine::nft_quote;
use netveil_ipsec::Mode;
use netveil_sa::policy::{Action, Direction};

fn nft_match(s: &netveil_sa::policy::Selector) -> (String, &'static str) {
    let fam = if s.src.addr().is_ipv4() { "ip" } else { "ip6" };
    let mut m = format!(
        "{fam} saddr {} {fam} daddr {}",
        s.src.trunc(),
        s.dst.trunc()
    );
    let proto = match s.proto {
        Some(6) => Some("tcp"),
        Some(17) => Some("udp"),
        Some(132) => Some("sctp"),
        _ => None,
    };
    match (s.proto, proto) {
        (Some(_), Some(p)) => {
            // A port match implies the protocol.
            if s.src_ports.is_any() && s.dst_ports.is_any() {
                m.push_str(&format!(" meta l4proto {p}"));
            }
            m.push_str(&nft_ports(s, p));
        }
        (Some(x), None) => m.push_str(&format!(" meta l4proto {x}")),
        (None, _) => {}
    }
    (m, fam)
}

/// The nftables port match of a selector for `proto` (tcp, udp, sctp): empty where both ranges are any.
fn nft_ports(s: &netveil_sa::policy::Selector, proto: &str) -> String {
    let mut m = String::new();
    for (dir, r) in [("sport", &s.src_ports), ("dport", &s.dst_ports)] {
        if !r.is_any() {
            m.push_str(&format!(" {proto} {dir} {}-{}", r.start, r.end));
        }
    }
    m
}

/// The comment of a rule: `comment "NAME"`, or `comment "NAME (WHAT)"`; through [`nft_quote`], as every string.
fn comment(name: &str, what: Option<&str>) -> String {
    match what {
        None => format!("comment {}", nft_quote(name)),
        Some(w) => format!("comment {}", nft_quote(&format!("{name} ({w})"))),
    }
}

const ND_TYPES: &str =
    "{ nd-router-solicit, nd-router-advert, nd-neighbor-solicit, nd-neighbor-advert, nd-redirect }";

/// The prerouting rules that keep floods from non-peers away from the daemon: ESP, AH, ESP-in-UDP (the NAT-T port)
/// and PSP (UDP 1000) are taken only from the configured peers (tunnel SAs' remote ends, the PSP peer, and the
/// sources of the inbound policies that transport-mode SAs serve), and dropped (counted) in the kernel before any
/// socket sees them. A family with a transport-mode policy open to any source gets no rule.
pub fn nft_peer_filter(cfg: &Config) -> String {
    nft_peer_filter_with(cfg, &KxPeers::default())
}

pub use crate::runtime::sa_port::KxPeers;

/// [`nft_peer_filter`] with the key-exchange drivers' expected peers ([`KxPeers`]) added.
pub fn nft_peer_filter_with(cfg: &Config, kx: &KxPeers) -> String {
    use netveil_ipsec::sa::Direction as SaDir;
    let mut rules = String::new();
    for v6 in [false, true] {
        let fam = if v6 { "ip6" } else { "ip" };
        let mut peers: Vec<ipnet::IpNet> = Vec::new();
        let mut open = false;
        let mut esp = false;
        let mut natt = false;
        for a in kx.addrs.iter().filter(|a| a.is_ipv6() == v6) {
            peers.push((*a).into());
            esp = true;
            natt |= kx.nat_t;
        }
        for s in cfg.sas.iter() {
            if s.direction != SaDir::In {
                continue;
            }
            match s.mode {
                Mode::Tunnel { remote, .. } => {
                    if remote.is_ipv6() != v6 {
                        continue;
                    }
                    peers.push(remote.into());
                }
                Mode::Transport => {
                    let srcs: Vec<_> = cfg
                        .policies
                        .iter()
                        .filter(|p| p.direction == Direction::In && p.sa_names.contains(&s.name))
                        .map(|p| p.selector.src.trunc())
                        .filter(|n| n.addr().is_ipv6() == v6)
                        .collect();
                    if srcs.is_empty() {
                        continue;
                    }
                    if srcs.iter().any(|n| n.prefix_len() == 0) {
                        open = true;
                    }
                    peers.extend(srcs.iter().copied());
                }
            }
            esp = true;
            natt |= s.encap.is_some();
        }
        let mut dports = Vec::new();
        if natt {
            dports.push(cfg.interface.nat_t_port);
        }
        if let Some(p) = &cfg.psp {
            if p.remote.is_ipv6() == v6 {
                peers.push(p.remote.into());
                dports.push(netveil_psp::UDP_PORT);
            }
        }
        if open || peers.is_empty() {
            continue;
        }
        // One set without overlaps (sets without auto-merge refuse overlapping intervals: "conflicting
        // intervals"), so the table does not depend on the nft version: a peer inside a listed network, or a
        // network inside another, merges into it.
        let set = ipnet::IpNet::aggregate(&peers)
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let l4 = if v6 { "meta l4proto" } else { "ip protocol" };
        let c = comment("not from a peer", None);
        if esp {
            rules.push_str(&format!(
                "    {l4} {{ esp, ah }} {fam} saddr != {{ {set} }} counter drop {c}\n"
            ));
        }
        if !dports.is_empty() {
            let ports: Vec<String> = dports.iter().map(|p| p.to_string()).collect();
            rules.push_str(&format!(
                "    meta nfproto {} udp dport {{ {} }} {fam} saddr != {{ {set} }} counter drop {c}\n",
                if v6 { "ipv6" } else { "ipv4" },
                ports.join(", ")
            ));
        }
    }
    rules
}

/// The nftables table of an interface (`inet netveil_NAME`):
///
/// - **input**: clear traffic that an inbound protect policy covers is dropped (and counted): it must arrive
///   through the TUN (decapsulated), never directly. ESP, AH, the NAT-T port and PSP's port stay allowed, and the
///   PSP key exchange only between the outer addresses and on its port at both ends.
/// - **output** and **forward** (fail closed): traffic that an outbound protect or discard policy covers may leave
///   only through the TUN device or from the daemon's own sockets (their mark). While the daemon runs, such traffic
///   is routed into the TUN; when it does not (crashed, killed, stopped), the TUN and its routes are gone and the
///   traffic would follow the default route in clear: these rules drop it instead. The table outlives the daemon:
///   `netveil down` removes it.
///
/// Returns the whole table text, or `None` if no policy needs a rule.
pub fn nft_table_text(cfg: &Config, table: &str) -> Option<String> {
    nft_table_text_with(cfg, table, &KxPeers::default())
}

/// [`nft_table_text`] with the key-exchange drivers' expected peers in the peer filter ([`KxPeers`]).
pub fn nft_table_text_with(cfg: &Config, table: &str, kx: &KxPeers) -> Option<String> {
    let tun = nft_quote(&cfg.interface.name);
    let input = input_rules(cfg, &tun);
    let (output, forward) = outbound_rules(cfg, &tun);
    let prerouting = nft_peer_filter_with(cfg, kx);
    if input.is_empty() && output.is_empty() && prerouting.is_empty() {
        return None;
    }
    Some(format!(
        "table inet {table} {{\n  chain prerouting {{\n    type filter hook prerouting priority -300; policy accept;\n{prerouting}  }}\n  \
         chain input {{\n    type filter hook input priority -10; policy accept;\n{input}  }}\n  \
         chain output {{\n    type filter hook output priority -10; policy accept;\n{output}  }}\n  \
         chain forward {{\n    type filter hook forward priority -10; policy accept;\n{forward}  }}\n}}\n"
    ))
}

/// The input chain's rules (`tun`: the TUN's name, quoted): the PSP key exchange's accept, then each inbound
/// policy's in policy order.
fn input_rules(cfg: &Config, tun: &str) -> String {
    let mut input = String::new();
    if let Some(c) = &cfg.psp {
        // The TLS key exchange travels in clear TCP between the outer addresses, from port to port (the connecting
        // side binds the port too): nothing else of the peer's is let through by this rule.
        let fam = if c.local.is_ipv4() { "ip" } else { "ip6" };
        input.push_str(&format!(
            "    {fam} saddr {} {fam} daddr {} tcp sport {p} tcp dport {p} accept {}\n",
            c.remote,
            c.local,
            comment("PSP key exchange", None),
            p = c.control_port
        ));
    }
    for p in cfg.policies.iter().filter(|p| p.direction == Direction::In) {
        input_policy_rules(cfg, tun, p, &mut input);
    }
    input
}

/// The input rules of one inbound policy: a bypass policy's accept; a protect policy's drop of the clear traffic it
/// covers (neighbour discovery and the protected forms' protocols and port let through); none for a discard policy.
fn input_policy_rules(cfg: &Config, tun: &str, p: &PolicyRule, input: &mut String) {
    let s = &p.selector;
    match p.action {
        Action::Protect(_) => {}
        Action::Bypass => {
            // In policy order, as the daemon decides: clear traffic a bypass policy lets in is not dropped by
            // a protect policy further down (the IKE driver's bypass for the peer's IKE datagrams).
            let (full, _) = nft_match(s);
            input.push_str(&format!(
                "    iifname != {tun} {full} accept {}\n",
                comment(&p.name, None)
            ));
            return;
        }
        Action::Discard => return,
    }
    let (sel, fam) = nft_match(&netveil_sa::policy::Selector {
        proto: None,
        src_ports: netveil_sa::policy::PortRange::ANY,
        dst_ports: netveil_sa::policy::PortRange::ANY,
        ..s.clone()
    });
    // The UDP port the protected form of this traffic arrives on.
    let udp_port = if p.psp {
        netveil_psp::UDP_PORT
    } else {
        cfg.interface.nat_t_port
    };
    let mut m = format!("iifname != {tun} {sel}");
    if fam == "ip6" && matches!(s.proto, None | Some(58)) {
        // IPv6 neighbour discovery between the peers (transport mode) is never protected: dropping it would
        // leave the peer's link-layer address unresolved and nothing, ESP included, could be sent to it.
        input.push_str(&format!(
            "    {m} icmpv6 type {ND_TYPES} accept {}\n",
            comment(&p.name, Some("neighbour discovery"))
        ));
    }
    match s.proto {
        Some(17) => {
            m.push_str(&nft_ports(s, "udp"));
            input.push_str(&format!(
                "    {m} udp dport != {udp_port} counter drop {}\n",
                comment(&p.name, None)
            ));
        }
        Some(6) => {
            m.push_str(&nft_ports(s, "tcp"));
            input.push_str(&format!(
                "    {m} counter drop {}\n",
                comment(&p.name, None)
            ));
        }
        Some(x) => input.push_str(&format!(
            "    {m} meta l4proto {x} counter drop {}\n",
            comment(&p.name, None)
        )),
        None => {
            let allowed = if p.psp { "17" } else { "{ 17, 50, 51 }" };
            input.push_str(&format!(
                "    {m} meta l4proto != {allowed} counter drop {}\n",
                comment(&p.name, None)
            ));
            input.push_str(&format!(
                "    {m} udp dport != {udp_port} counter drop {}\n",
                comment(&p.name, None)
            ));
        }
    }
}

/// The output and forward chains' rules (`tun`: the TUN's name, quoted), in policy order (the first match decides,
/// as in the daemon). Locally sent packets are matched by destination (and protocol and ports) whatever their
/// source: once the TUN and its addresses are gone, the kernel picks another source address for the same traffic.
/// Forwarded packets keep their source, so the forward chain matches the whole selector.
fn outbound_rules(cfg: &Config, tun: &str) -> (String, String) {
    let mark = cfg.interface.socket_mark();
    let mut output = String::new();
    let mut forward = String::new();
    for p in cfg
        .policies
        .iter()
        .filter(|p| p.direction == Direction::Out)
    {
        let s = &p.selector;
        let any_src = netveil_sa::policy::Selector {
            src: match s.dst {
                ipnet::IpNet::V4(_) => ipnet::IpNet::V4(Default::default()),
                ipnet::IpNet::V6(_) => ipnet::IpNet::V6(Default::default()),
            },
            ..s.clone()
        };
        for (chain, sel) in [(&mut output, &any_src), (&mut forward, s)] {
            outbound_policy_rules(tun, mark, p, sel, chain);
        }
    }
    (output, forward)
}

/// One outbound policy's rules in one chain, matching `sel` (the policy's selector, or the output chain's with any
/// source): a bypass policy's accept (with the selector's own source); a protect or discard policy's drop of what
/// leaves neither through the TUN nor with the daemon's `mark` (neighbour discovery let through, later fragments
/// covered).
fn outbound_policy_rules(
    tun: &str,
    mark: u32,
    p: &PolicyRule,
    sel: &netveil_sa::policy::Selector,
    chain: &mut String,
) {
    let s = &p.selector;
    let (m, fam) = nft_match(sel);
    match p.action {
        Action::Bypass => {
            // Only with the selector's own source (which a stopped daemon's traffic may no longer have:
            // then a drop below applies).
            let (full, _) = nft_match(s);
            chain.push_str(&format!("    {full} accept {}\n", comment(&p.name, None)));
            return;
        }
        Action::Protect(_) | Action::Discard => {}
    }
    if fam == "ip6" && matches!(s.proto, None | Some(58)) {
        chain.push_str(&format!(
            "    {m} icmpv6 type {ND_TYPES} accept {}\n",
            comment(&p.name, Some("neighbour discovery"))
        ));
    }
    let guard = format!("oifname != {tun} meta mark != {mark:#x} counter drop");
    if !s.src_ports.is_any() || !s.dst_ports.is_any() {
        // Later fragments carry no ports: between these addresses they are covered as well (RFC 4301 7).
        let (addrs, _) = nft_match(&netveil_sa::policy::Selector {
            proto: None,
            src_ports: netveil_sa::policy::PortRange::ANY,
            dst_ports: netveil_sa::policy::PortRange::ANY,
            ..sel.clone()
        });
        let frag = if fam == "ip" {
            "ip frag-off & 0x1fff != 0"
        } else {
            "exthdr frag frag-off != 0"
        };
        chain.push_str(&format!(
            "    {addrs} {frag} {guard} {}\n",
            comment(&p.name, Some("later fragments"))
        ));
    }
    chain.push_str(&format!("    {m} {guard} {}\n", comment(&p.name, None)));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The peer filter's address set has no overlapping elements: peers inside listed networks, and networks
    /// inside others, merge.
    #[test]
    fn peer_sets_merge_overlapping_networks() {
        let sa = |name: &str, spi: u32, mode: &str| {
            format!(
                "[[sa]]\nname = \"{name}\"\ndirection = \"in\"\nspi = {spi}\nmode = \"{mode}\"\nlocal = \"10.9.0.1\"\nremote = \"10.2.3.4\"\nsuite = \"aes128gcm16\"\nenc_key = \"{spi:08x}445566778899aabbccddeeff01020304\"\n"
            )
        };
        let pol = |src: &str, sa: &str| {
            format!("[[policy]]\ndirection = \"in\"\nsrc = \"{src}\"\ndst = \"10.9.0.1/32\"\naction = \"protect\"\nsas = [\"{sa}\"]\n")
        };
        let text = format!(
            "[interface]\n{}{}{}{}{}{}",
            sa("t1", 0x2001, "transport"),
            sa("t2", 0x2002, "transport"),
            sa("tun", 0x2003, "tunnel"),
            pol("10.0.0.0/8", "t1"),
            pol("10.1.0.0/16", "t2"),
            pol("172.16.0.0/12", "tun"),
        );
        let cfg = Config::parse(&text).unwrap();
        let rules = nft_peer_filter(&cfg);
        assert!(rules.contains("saddr != { 10.0.0.0/8 }"), "{rules}");
        if let Some(t) = nft_table_text(&cfg, "netveil_peer_set_test") {
            nft_check(&t);
        }
    }

    /// An inbound bypass policy before an inbound protect policy that covers the same addresses (the IKE driver's
    /// `ike-N-bI` for the peer's IKE datagrams in transport mode): its accept rule comes first in the input chain,
    /// so the protect policy's fail-closed drop does not take the clear UDP it lets in; nft parses the table.
    #[test]
    fn inbound_bypass_is_accepted_before_a_protect_drop() {
        let text = "[interface]\nname = \"nv0\"\n\
            [[sa]]\nname = \"i\"\ndirection = \"in\"\nspi = 0x2001\nmode = \"transport\"\n\
            suite = \"aes128gcm16\"\nenc_key = \"01112233445566778899aabbccddeeff01020304\"\n\
            [[policy]]\nname = \"ike\"\ndirection = \"in\"\nsrc = \"192.0.2.2/32\"\ndst = \"192.0.2.1/32\"\n\
            proto = \"udp\"\nsrc_ports = 500\ndst_ports = 500\naction = \"bypass\"\n\
            [[policy]]\nname = \"in\"\ndirection = \"in\"\nsrc = \"192.0.2.2/32\"\ndst = \"192.0.2.1/32\"\n\
            action = \"protect\"\nsas = [\"i\"]\n";
        let cfg = Config::parse(text).unwrap();
        let t = nft_table_text(&cfg, "netveil_bypass_test").unwrap();
        let accept = t
            .find("udp sport 500-500 udp dport 500-500 accept")
            .unwrap_or_else(|| panic!("no accept rule for the bypass policy:\n{t}"));
        let drop = t
            .find("udp dport != 4500 counter drop")
            .unwrap_or_else(|| panic!("no drop rule for the protect policy:\n{t}"));
        assert!(accept < drop, "{t}");
        nft_check(&t);
    }

    /// nft's parser takes `text` (check only, nothing applied). Needs root and nft; without them this part of the
    /// calling test is skipped (`netveil_testkit::skip`: a failure under CI).
    fn nft_check(text: &str) {
        let test = format!("{} (nft -c)", netveil_testkit::this_test());
        if !netveil_testkit::require_program(&test, "nft")
            || !netveil_testkit::require_root_for(&test, "nft -c")
        {
            return;
        }
        let mut c = std::process::Command::new("nft")
            .args(["-c", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The table with every quoted string emptied: its structure (chains, rules, matches, verdicts).
    fn structure(text: &str) -> String {
        let mut out = String::new();
        for (i, part) in text.split('"').enumerate() {
            out.push_str(if i % 2 == 0 { part } else { "" });
            out.push('"');
        }
        out
    }

    /// Strings that would end a comment or an interface name and add a rule (issue 21: a policy name with a quote, a
    /// newline and `meta l4proto != 255 accept`), a chain, or a wildcard, given as every policy's name and the
    /// interface's name (bypassing the checks of names): the table's structure stays that of plain names, nothing
    /// accepts what the plain table does not, and nft parses it.
    #[test]
    fn no_string_changes_the_tables_structure() {
        let text = "[interface]\nname = \"nv0\"\n\
            [[sa]]\nname = \"o\"\ndirection = \"out\"\nspi = 0x1001\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
            suite = \"aes128gcm16\"\nenc_key = \"00112233445566778899aabbccddeeff01020304\"\n\
            [[sa]]\nname = \"i\"\ndirection = \"in\"\nspi = 0x2001\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
            suite = \"aes128gcm16\"\nenc_key = \"01112233445566778899aabbccddeeff01020304\"\n\
            [[policy]]\nname = \"web\"\ndirection = \"out\"\nsrc = \"10.1.0.0/16\"\ndst = \"10.2.0.0/16\"\n\
            proto = \"tcp\"\ndst_ports = 443\naction = \"protect\"\nsas = [\"o\"]\n\
            [[policy]]\nname = \"out\"\ndirection = \"out\"\nsrc = \"10.1.0.0/16\"\ndst = \"10.2.0.0/16\"\n\
            action = \"protect\"\nsas = [\"o\"]\n\
            [[policy]]\nname = \"in\"\ndirection = \"in\"\nsrc = \"10.2.0.0/16\"\ndst = \"10.1.0.0/16\"\n\
            action = \"protect\"\nsas = [\"i\"]\n\
            [[policy]]\nname = \"v6\"\ndirection = \"out\"\nsrc = \"2001:db8:1::/48\"\ndst = \"2001:db8:2::/48\"\n\
            action = \"discard\"\n\
            [[policy]]\nname = \"by\"\ndirection = \"out\"\nsrc = \"10.1.0.0/16\"\ndst = \"10.3.0.0/16\"\n\
            action = \"bypass\"\n";
        let cfg = Config::parse(text).unwrap();
        let plain = nft_table_text(&cfg, "netveil_nv0").unwrap();
        nft_check(&plain);
        let long = "y".repeat(300);
        for evil in [
            "x\" meta l4proto != 255 accept comment \"",
            "x\"\nmeta l4proto != 255 accept comment \"",
            "x\"; meta l4proto != 255 accept; comment \"",
            "x\" }\n  chain evil {\n    type filter hook output priority -500; policy accept;\n  }\n#",
            "nv*",
            "x\\",
            "x\u{0}\r\t",
            long.as_str(),
        ] {
            let mut c = cfg.clone();
            for p in &mut c.policies {
                p.name = evil.into();
            }
            // nft refuses interface names longer than the kernel's 15 bytes (it fails, closed): checked by nft
            // with plain interface names, by structure with both.
            let names = nft_table_text(&c, "netveil_nv0").unwrap();
            c.interface.name = evil.into();
            let both = nft_table_text(&c, "netveil_nv0").unwrap();
            for t in [&names, &both] {
                assert_eq!(structure(t), structure(&plain), "{evil:?}:\n{t}");
                assert_eq!(t.lines().count(), plain.lines().count(), "{t}");
                assert!(!t.contains("l4proto != 255") && !t.contains('*'), "{t}");
            }
            nft_check(&names);
        }
    }
}
