//! The checks of typed SA and policy parameters: the configuration file's rules, errors naming the key.

use crate::engines::ip::config::{Interface, PolicyRule, TFC_PAD_MAX};
use crate::runtime::config::ConfigError;
use crate::runtime::sa_port::*;
use netveil_ipsec::sa::{Direction, Suite};
use netveil_ipsec::suite::{Enc, SuiteError};
use netveil_ipsec::{Mode, SaParams};
use netveil_sa::policy::Direction as PolicyDirection;

fn err<T>(key: &str, reason: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError {
        key: key.into(),
        reason: reason.into(),
    })
}

/// Checks an SA by the configuration file's rules (errors name `sa.KEY`, as for a table added at runtime, and show
/// no value). `others`: the SAs it must not clash with (name; an inbound SA's SPI of the same protocol).
pub fn check_sa(
    p: &SaParams,
    interface: &Interface,
    others: &[&SaParams],
) -> Result<(), ConfigError> {
    crate::runtime::names::check_name("sa.name", &p.name)?;
    if others.iter().any(|o| o.name == p.name) {
        return err("sa.name", "is used by another SA");
    }
    if p.spi < 256 {
        return err("sa.spi", format!("must be between 256 and {}", u32::MAX));
    }
    if let Mode::Tunnel { local, remote } = p.mode {
        if local.is_ipv4() != remote.is_ipv4() {
            return err(
                "sa.remote",
                "local and remote must be of the same address family",
            );
        }
    }
    let (enc_key, auth_key) = (&p.enc_key[..], &p.auth_key[..]);
    match p.suite {
        Suite::Esp(es) => {
            if es.enc == Enc::Null && es.integ.is_none() && !interface.allow_null_null {
                return err("sa.suite", SuiteError::NullNull.to_string());
            }
            if es.enc.is_aead() && es.integ.is_some() {
                return err("sa.suite", "an AEAD suite takes no integrity algorithm");
            }
            if !es.enc.is_aead() && es.enc != Enc::Null && es.integ.is_none() {
                return err(
                    "sa.suite",
                    "needs an integrity algorithm (e.g. aes128-sha256; value not shown)",
                );
            }
        }
        Suite::Ah(_) => {}
    }
    crate::engines::ip::config::check_keys(p.suite, enc_key, auth_key, &|n| format!("sa.{n}"))?;
    if p.direction == Direction::In && !(64..=1 << 20).contains(&p.replay_window) {
        return err("sa.replay_window", "must be between 64 and 1048576");
    }
    if let Some(u) = p.encap {
        if matches!(p.suite, Suite::Ah(_)) {
            return err(
                "sa.encap",
                "UDP encapsulation (RFC 3948) is defined for ESP only",
            );
        }
        if u.local_port == 0 {
            return err("sa.local_port", "must be between 1 and 65535");
        }
        if u.remote_port == 0 {
            return err("sa.remote_port", "must be between 1 and 65535");
        }
    }
    if p.tfc_pad_to > TFC_PAD_MAX {
        return err(
            "sa.tfc_pad_to",
            format!("must be between 0 and {TFC_PAD_MAX}"),
        );
    }
    if p.tfc_pad_to > 0 && (p.mode == Mode::Transport || matches!(p.suite, Suite::Ah(_))) {
        return err("sa.tfc_pad_to", "TFC padding needs ESP in tunnel mode");
    }
    let l = &p.lifetime;
    for (soft, hard, f) in [
        (l.soft.bytes, l.hard.bytes, "bytes"),
        (l.soft.packets, l.hard.packets, "packets"),
        (l.soft.seconds, l.hard.seconds, "seconds"),
    ] {
        if soft == Some(0) {
            return err(&format!("sa.lifetime.soft_{f}"), "must be positive");
        }
        if hard == Some(0) {
            return err(&format!("sa.lifetime.hard_{f}"), "must be positive");
        }
        if let (Some(s), Some(h)) = (soft, hard) {
            if s >= h {
                return err(
                    &format!("sa.lifetime.soft_{f}"),
                    format!("must be below lifetime.hard_{f}"),
                );
            }
        }
    }
    if p.direction == Direction::In
        && others
            .iter()
            .any(|o| o.direction == Direction::In && o.spi == p.spi && o.protocol() == p.protocol())
    {
        return err(
            "sa.spi",
            "is used by another inbound SA of the same protocol",
        );
    }
    Ok(())
}

/// Checks a policy by the configuration file's rules (errors name `policy.KEY`, show no value). `sas`: the SAs
/// installed (a protect policy's SAs may be missing, never of the other direction); `has_psp`: a `[psp]` section.
/// Returns the policy as the engine keeps it.
pub fn check_policy(
    p: &PolicyParams,
    has_psp: bool,
    sas: &[&SaParams],
) -> Result<PolicyRule, ConfigError> {
    use netveil_sa::policy::Action;
    crate::runtime::names::check_name("policy.name", &p.name)?;
    let names: &[String] = match &p.action {
        PolicyAction::Protect(n) => n,
        _ => &[],
    };
    for (j, n) in names.iter().enumerate() {
        crate::runtime::names::check_name(&format!("policy.sas[{j}]"), n)?;
    }
    let s = &p.selector;
    if s.src.addr().is_ipv4() != s.dst.addr().is_ipv4() {
        return err(
            "policy.dst",
            "src and dst must be of the same address family",
        );
    }
    for (r, key) in [
        (&s.src_ports, "policy.src_ports"),
        (&s.dst_ports, "policy.dst_ports"),
    ] {
        if r.start > r.end {
            return err(key, "is an empty port range (its start above its end)");
        }
    }
    if (!s.src_ports.is_any() || !s.dst_ports.is_any())
        && !matches!(s.proto, Some(6) | Some(17) | Some(132) | Some(136))
    {
        return err(
            "policy.proto",
            "port ranges need proto = \"tcp\", \"udp\" or \"sctp\"",
        );
    }
    let (action, psp) = match &p.action {
        PolicyAction::ProtectPsp => {
            if !has_psp {
                return err("policy.protocol", "'psp' needs a [psp] section");
            }
            (Action::Protect(0), true)
        }
        PolicyAction::Protect(names) => {
            if names.is_empty() {
                return err(
                    "policy.sas",
                    "a protect policy needs the SAs to use (e.g. sas = [\"a-to-b\"])",
                );
            }
            if names.len() > netveil_ipsec::bundle::MAX_BUNDLE {
                return err("policy.sas", "at most 4 SAs in a bundle");
            }
            let want = match p.direction {
                PolicyDirection::Out => Direction::Out,
                PolicyDirection::In => Direction::In,
            };
            for (j, n) in names.iter().enumerate() {
                if let Some(sa) = sas.iter().find(|s| &s.name == n) {
                    if sa.direction != want {
                        let w = crate::engines::ip::config::dir_word;
                        return err(
                            &format!("policy.sas[{j}]"),
                            format!(
                                "SA '{n}' is an {}bound SA: an {}bound policy uses only {}bound SAs",
                                w(sa.direction),
                                w(want),
                                w(want)
                            ),
                        );
                    }
                }
            }
            (Action::Protect(0), false)
        }
        PolicyAction::Bypass => (Action::Bypass, false),
        PolicyAction::Discard => (Action::Discard, false),
    };
    Ok(PolicyRule {
        name: p.name.clone(),
        direction: p.direction,
        selector: p.selector.clone(),
        action,
        sa_names: names.to_vec(),
        psp,
        cover: None,
    })
}
