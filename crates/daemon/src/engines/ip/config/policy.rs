//! `[[policy]]`: one rule each (selector, action, the SAs of a protect policy), and a policy given at runtime.

use super::values::*;
use super::*;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    name: Option<String>,
    direction: Option<String>,
    src: Option<String>,
    dst: Option<String>,
    proto: Option<toml::Value>,
    src_ports: Option<toml::Value>,
    dst_ports: Option<toml::Value>,
    action: Option<String>,
    #[serde(default)]
    sas: Vec<String>,
    protocol: Option<String>,
}

/// A validated policy rule. Its SAs are named (`sa_names`, innermost first); what they resolve to in the running
/// SA database, by the policy's direction only, is the IP engine's snapshot's (`crate::engines::ip::db::SnapPolicy::sas`).
#[derive(Debug, Clone)]
pub struct PolicyRule {
    pub name: String,
    pub direction: sa_policy::Direction,
    pub selector: Selector,
    pub action: sa_policy::Action,
    /// The SAs' names as given: a policy added at runtime may name SAs not installed yet (then the snapshot
    /// resolves it to no SAs and its traffic is dropped, reported as an acquire).
    pub sa_names: Vec<String>,
    /// A protect policy whose traffic PSP protects (to the `[psp]` peer) instead of IPsec SAs.
    pub psp: bool,
    /// A policy in the IP engine's memory only, bound under the policy of this name, whose selector covers its
    /// own and whose nftables rules cover its traffic (see `crate::engines::ip::db::Db::policy_bind`); `None` for every
    /// other policy. Shared by all bound under the same policy (a gateway binds thousands), behind a thin pointer
    /// (a rule of 120 bytes, not 128).
    pub cover: Option<std::sync::Arc<String>>,
}

pub(crate) fn parse_proto(key: &str, v: &toml::Value) -> Result<Option<u8>, ConfigError> {
    match v {
        toml::Value::Integer(i) => Ok(Some(int_in(key, *i, 0, 255)? as u8)),
        toml::Value::String(s) => Ok(match s.to_ascii_lowercase().as_str() {
            "any" | "all" => None,
            "icmp" => Some(1),
            "tcp" => Some(6),
            "udp" => Some(17),
            "icmpv6" | "ipv6-icmp" => Some(58),
            "sctp" => Some(132),
            "gre" => Some(47),
            other => match other.parse::<u8>() {
                Ok(n) => Some(n),
                Err(_) => {
                    return err(
                        key,
                        "unknown protocol (any, tcp, udp, icmp, icmpv6, sctp or a number; value not shown)",
                    )
                }
            },
        }),
        _ => err(key, "must be a protocol name or number"),
    }
}

pub(crate) fn parse_ports(key: &str, v: &toml::Value) -> Result<PortRange, ConfigError> {
    let range = |a: i64, b: i64| -> Result<PortRange, ConfigError> {
        let a = int_in(key, a, 0, 65535)? as u16;
        let b = int_in(key, b, 0, 65535)? as u16;
        if a > b {
            return err(key, "is an empty port range (its start above its end)");
        }
        Ok(PortRange { start: a, end: b })
    };
    match v {
        toml::Value::Integer(i) => range(*i, *i),
        toml::Value::String(s) if s.eq_ignore_ascii_case("any") => Ok(PortRange::ANY),
        toml::Value::String(s) => {
            let (a, b) = s.split_once('-').unwrap_or((s, s));
            match (a.trim().parse::<i64>(), b.trim().parse::<i64>()) {
                (Ok(a), Ok(b)) => range(a, b),
                _ => err(
                    key,
                    "is not a port or range (e.g. 443 or \"1024-65535\"; value not shown)",
                ),
            }
        }
        _ => err(key, "must be a port number or a range string"),
    }
}

/// The reason of a policy's error for an SA name that no SA has.
pub(crate) const NO_SUCH_SA: &str = "names no SA";

/// A policy given at runtime (`netveil policy add`): the keys of one `[[policy]]` table, `name` required. Its SAs
/// may be missing yet (see [`PolicyRule::sa_names`]).
pub fn policy_from_table(
    t: toml::Table,
    has_psp: bool,
    sas: &[SaParams],
) -> Result<PolicyRule, ConfigError> {
    let raw: RawPolicy = typed(toml::Value::Table(t), "policy")?;
    if raw.name.as_deref().is_none_or(str::is_empty) {
        return err("policy.name", "missing (policies are removed by name)");
    }
    parse_policy(
        &|f| format!("policy.{f}"),
        String::new(),
        raw,
        has_psp,
        sas,
        true,
    )
}

/// Parses one `[[policy]]` table (`k` names its keys in errors). Its SAs are looked up by name in `sas`; an SA that
/// is not there is an error, or with `missing_ok` (a policy added at runtime) leaves the policy without SAs until it
/// is installed (its traffic is dropped and an acquire is reported).
pub(crate) fn parse_policy(
    k: &dyn Fn(&str) -> String,
    default_name: String,
    p: RawPolicy,
    has_psp: bool,
    sas: &[SaParams],
    missing_ok: bool,
) -> Result<PolicyRule, ConfigError> {
    let name = p.name.unwrap_or(default_name);
    crate::runtime::names::check_name(&k("name"), &name)?;
    for (j, n) in p.sas.iter().enumerate() {
        crate::runtime::names::check_name(&k(&format!("sas[{j}]")), n)?;
    }
    let direction = match p.direction.as_deref() {
        Some("out") => sa_policy::Direction::Out,
        Some("in") => sa_policy::Direction::In,
        Some(_) => return err(k("direction"), "must be 'out' or 'in'"),
        None => return err(k("direction"), "missing ('out' or 'in')"),
    };
    let src = parse_net(
        &k("src"),
        p.src
            .as_deref()
            .unwrap_or("any")
            .replace("any", "0.0.0.0/0")
            .as_str(),
    )?;
    let dst = parse_net(
        &k("dst"),
        p.dst
            .as_deref()
            .unwrap_or("any")
            .replace("any", "0.0.0.0/0")
            .as_str(),
    )?;
    if src.addr().is_ipv4() != dst.addr().is_ipv4() {
        return err(k("dst"), "src and dst must be of the same address family");
    }
    let proto = match &p.proto {
        None => None,
        Some(v) => parse_proto(&k("proto"), v)?,
    };
    let src_ports = match &p.src_ports {
        None => PortRange::ANY,
        Some(v) => parse_ports(&k("src_ports"), v)?,
    };
    let dst_ports = match &p.dst_ports {
        None => PortRange::ANY,
        Some(v) => parse_ports(&k("dst_ports"), v)?,
    };
    if (!src_ports.is_any() || !dst_ports.is_any())
        && !matches!(proto, Some(6) | Some(17) | Some(132) | Some(136))
    {
        return err(
            k("proto"),
            "port ranges need proto = \"tcp\", \"udp\" or \"sctp\"",
        );
    }
    let use_psp = match p.protocol.as_deref() {
        None | Some("ipsec") => false,
        Some("psp") => {
            if !has_psp {
                return err(k("protocol"), "'psp' needs a [psp] section");
            }
            if p.action.as_deref() != Some("protect") {
                return err(k("protocol"), "only protect policies take a protocol");
            }
            if !p.sas.is_empty() {
                return err(
                    k("sas"),
                    "PSP policies take no SAs (keys come from the peer)",
                );
            }
            true
        }
        Some(_) => return err(k("protocol"), "must be 'ipsec' or 'psp'"),
    };
    let action = match p.action.as_deref() {
        Some("protect") if use_psp => sa_policy::Action::Protect(0),
        Some("protect") => {
            if p.sas.is_empty() {
                return err(
                    k("sas"),
                    "a protect policy needs the SAs to use (e.g. sas = [\"a-to-b\"])",
                );
            }
            if p.sas.len() > netveil_ipsec::bundle::MAX_BUNDLE {
                return err(k("sas"), "at most 4 SAs in a bundle");
            }
            let want = match direction {
                sa_policy::Direction::Out => Direction::Out,
                sa_policy::Direction::In => Direction::In,
            };
            for (j, n) in p.sas.iter().enumerate() {
                let idx = match sas.iter().position(|s| &s.name == n) {
                    Some(x) => x,
                    None if missing_ok => continue,
                    None => {
                        return err(
                            k(&format!("sas[{j}]")),
                            format!("{NO_SUCH_SA} of that name"),
                        )
                    }
                };
                if sas[idx].direction != want {
                    return err(
                        k(&format!("sas[{j}]")),
                        format!(
                            "SA '{n}' is an {}bound SA: an {}bound policy uses only {}bound SAs",
                            dir_word(sas[idx].direction),
                            dir_word(want),
                            dir_word(want)
                        ),
                    );
                }
            }
            sa_policy::Action::Protect(0)
        }
        Some("bypass") => sa_policy::Action::Bypass,
        Some("discard") => sa_policy::Action::Discard,
        Some(_) => return err(k("action"), "must be 'protect', 'bypass' or 'discard'"),
        None => return err(k("action"), "missing ('protect', 'bypass' or 'discard')"),
    };
    if !matches!(action, sa_policy::Action::Protect(_)) && !p.sas.is_empty() {
        return err(k("sas"), "only protect policies take SAs");
    }
    Ok(PolicyRule {
        name,
        direction,
        selector: Selector {
            src,
            dst,
            proto,
            src_ports,
            dst_ports,
        },
        action,
        sa_names: p.sas,
        psp: use_psp,
        cover: None,
    })
}

impl crate::runtime::sa_port::PolicyParams {
    /// The parameters of a parsed policy (a `[[policy]]` table's).
    pub fn from_rule(p: PolicyRule) -> Self {
        use netveil_sa::policy::Action;
        Self {
            action: match p.action {
                Action::Protect(_) if p.psp => crate::runtime::sa_port::PolicyAction::ProtectPsp,
                Action::Protect(_) => crate::runtime::sa_port::PolicyAction::Protect(p.sa_names),
                Action::Bypass => crate::runtime::sa_port::PolicyAction::Bypass,
                Action::Discard => crate::runtime::sa_port::PolicyAction::Discard,
            },
            name: p.name,
            direction: p.direction,
            selector: p.selector,
        }
    }
}
