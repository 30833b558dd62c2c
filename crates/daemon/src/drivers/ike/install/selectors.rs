//! The policies of a CHILD_SA's selector pairs, and the bypass of the peer's IKE datagrams they may cover.

use super::*;

pub(super) fn net(t: &TsSpec) -> ipnet::IpNet {
    ipnet::IpNet::new(t.addr, t.prefix).expect("prefix checked by the parser")
}

/// The protect policies of every pair of selectors (`local_ts` x `remote_ts`) that can carry traffic (see
/// [`pair`]), named `{prefix}-o{n}` and `{prefix}-i{n}` (`n`: the pair's index among those), with the pair.
pub(super) fn policy_pairs<'a>(
    local_ts: &'a [TsSpec],
    remote_ts: &'a [TsSpec],
    prefix: &str,
    out_sa: &str,
    in_sa: &str,
) -> Vec<(&'a TsSpec, &'a TsSpec, PolicyParams, PolicyParams)> {
    let mut v = Vec::new();
    for l in local_ts {
        for r in remote_ts {
            let n = v.len();
            let names = (format!("{prefix}-o{n}"), format!("{prefix}-i{n}"));
            if let Some((out, inb)) = pair(l, r, names.0, names.1, out_sa, in_sa) {
                v.push((l, r, out, inb));
            }
        }
    }
    v
}

/// The outbound and inbound protect policies of a pair of selectors (`None`: different families, or no protocol
/// in common: no traffic).
pub(super) fn pair(
    l: &TsSpec,
    r: &TsSpec,
    out_policy: String,
    in_policy: String,
    out_sa: &str,
    in_sa: &str,
) -> Option<(PolicyParams, PolicyParams)> {
    if l.addr.is_ipv4() != r.addr.is_ipv4() {
        return None;
    }
    // The protocol both sides allow (0: any).
    let proto = match (l.protocol, r.protocol) {
        (0, p) | (p, 0) => p,
        (a, b) if a == b => a,
        _ => return None,
    };
    let ports = |t: &TsSpec| PortRange {
        start: t.ports.0,
        end: t.ports.1,
    };
    let sel = |a: &TsSpec, b: &TsSpec| Selector {
        src: net(a),
        dst: net(b),
        proto: (proto != 0).then_some(proto),
        src_ports: ports(a),
        dst_ports: ports(b),
    };
    Some((
        PolicyParams {
            name: out_policy,
            direction: Direction::Out,
            selector: sel(l, r),
            action: PolicyAction::Protect(vec![out_sa.to_string()]),
        },
        PolicyParams {
            name: in_policy,
            direction: Direction::In,
            selector: sel(r, l),
            action: PolicyAction::Protect(vec![in_sa.to_string()]),
        },
    ))
}

/// The inbound bypass for the peer's IKE datagrams (`ike.1` to `ike.0`) where the selector pair covers them.
pub(super) fn bypass(
    l: &TsSpec,
    r: &TsSpec,
    ike: (std::net::SocketAddr, std::net::SocketAddr),
    name: String,
) -> Option<PolicyParams> {
    let covers = |t: &TsSpec, a: std::net::SocketAddr| {
        t.addr.is_ipv4() == a.is_ipv4()
            && net(t).contains(&a.ip())
            && matches!(t.protocol, 0 | 17)
            && (t.ports.0..=t.ports.1).contains(&a.port())
    };
    (covers(l, ike.0) && covers(r, ike.1)).then(|| {
        let host = |a: std::net::IpAddr| {
            ipnet::IpNet::new(a, if a.is_ipv4() { 32 } else { 128 }).expect("a host prefix")
        };
        let port = |a: std::net::SocketAddr| PortRange {
            start: a.port(),
            end: a.port(),
        };
        PolicyParams {
            name,
            direction: Direction::In,
            selector: Selector {
                src: host(ike.1.ip()),
                dst: host(ike.0.ip()),
                proto: Some(17),
                src_ports: port(ike.1),
                dst_ports: port(ike.0),
            },
            action: PolicyAction::Bypass,
        }
    })
}
