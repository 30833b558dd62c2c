//! `netveil.toml`: the daemon's configuration. Parsing is strict (unknown keys are errors) and every semantic
//! check names the offending key, so that a bad file is refused as a whole before anything is applied.
//!
//! ```toml
//! [interface]
//! name = "nv0"                         # TUN device
//! addresses = ["198.51.100.1/24"]      # inner addresses (tunnel mode)
//! mtu = 1400
//!
//! [[sa]]
//! name = "a-to-b"
//! direction = "out"                    # SAs are one-way: one "out" and one "in" per peer
//! protocol = "esp"                     # esp | ah
//! spi = 0x1001
//! mode = "tunnel"                      # tunnel | transport
//! local = "192.0.2.1"                  # tunnel endpoints
//! remote = "192.0.2.2"
//! suite = "aes128gcm16"                # strongSwan proposal names
//! enc_key = "hex..."                   # with the 4-byte salt at the end for AEADs
//!
//! [[policy]]
//! direction = "out"
//! src = "198.51.100.1/32"
//! dst = "198.51.100.2/32"
//! action = "protect"                   # protect | bypass | discard
//! sas = ["a-to-b"]
//! ```

mod interface;
mod policy;
mod psp;
mod sa;
use crate::runtime::config as values;
pub(crate) use sa::check_keys;

use ipnet::IpNet;
use netveil_crypto::rand::OsRng;
use netveil_ipsec::sa::{Direction, Suite};
use netveil_ipsec::suite::{AhSuite, EspSuite};
use netveil_ipsec::{Mode, SaParams, UdpEncap};
use netveil_sa::lifetime::{Lifetime, Limits};
use netveil_sa::policy::{self as sa_policy, PortRange, Selector};
use serde::Deserialize;
use std::net::IpAddr;

pub use crate::runtime::error::ConfigError;

pub use crate::runtime::config::{control_group, DEFAULT_SOCKET_MARK};
pub use interface::Interface;
use interface::{parse_interface, RawInterface};
use policy::{parse_policy, RawPolicy, NO_SUCH_SA};
pub use policy::{policy_from_table, PolicyRule};
use psp::{parse_psp, RawPsp};
pub use psp::{PspConfig, PSP_CONTROL_PORT};
pub use sa::{dir_word, sa_from_table};
use sa::{parse_sa, RawSa};
use values::err;
pub use values::{serde_reason, toml_error, typed, Secret};

/// The top-level keys of the IP engine's sections (the registry hands [`Config::from_sections`] these only).
pub const IP_SECTIONS: [&str; 4] = ["interface", "sa", "policy", "psp"];

/// The tables of an array of tables (`[[sa]]`): each with its key (`sa[0]`), or the error of the whole.
fn array_of_tables(
    top: &mut toml::Table,
    what: &str,
) -> Result<Vec<(String, toml::Value)>, ConfigError> {
    match top.remove(what) {
        None => Ok(Vec::new()),
        Some(toml::Value::Array(a)) => Ok(a
            .into_iter()
            .enumerate()
            .map(|(i, v)| (format!("{what}[{i}]"), v))
            .collect()),
        Some(_) => err(what, format!("expected an array of tables ([[{what}]])")),
    }
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub interface: Interface,
    pub sas: Vec<SaParams>,
    pub policies: Vec<PolicyRule>,
    pub psp: Option<PspConfig>,
}

pub use crate::runtime::sa_port::DEFAULT_REPLAY_WINDOW;
pub const DEFAULT_MTU: u16 = 1400;
/// The largest `tfc_pad_to`.
pub const TFC_PAD_MAX: u16 = 9000;
/// The directory of the control sockets by default.
pub use netveil_control::RUN_DIR;

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
        let file = crate::runtime::secret_file::read_config(path)?;
        Config::parse(file.text().or_else(|e| err("", e.to_string()))?)
    }

    /// Parses and validates configuration text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse_all(text).map_err(|mut e| e.swap_remove(0))
    }

    /// Parses and validates a configuration text, reporting every error (at least one on failure), in file order:
    /// the first of `[interface]`, of each `[[sa]]`, of `[psp]` and of each `[[policy]]` (a policy naming an SA that
    /// has an error of its own is not reported again).
    pub fn parse_all(text: &str) -> Result<Config, Vec<ConfigError>> {
        // Syntax first (the position of an error, never the line); then each table on its own, so that a value of
        // the wrong type is reported by its key, without the value.
        let top: toml::Table = toml::from_str(text).map_err(|e| {
            vec![ConfigError {
                key: String::new(),
                reason: toml_error(text, &e),
            }]
        })?;
        let mut errors = Vec::new();
        for k in top.keys().filter(|k| !IP_SECTIONS.contains(&k.as_str())) {
            errors.push(ConfigError {
                key: if crate::runtime::names::is_name(k) {
                    k.clone()
                } else {
                    String::new()
                },
                reason: format!("unknown section or key (known: {})", IP_SECTIONS.join(", ")),
            });
        }
        let mut own = top;
        own.retain(|k, _| IP_SECTIONS.contains(&k));
        match Config::from_sections(own) {
            Ok(c) if errors.is_empty() => Ok(c),
            Ok(_) => Err(errors),
            Err(e) => {
                errors.extend(e);
                Err(errors)
            }
        }
    }

    /// Validates the IP engine's sections (`top` holds [`IP_SECTIONS`] only: the runtime's registry hands each
    /// engine its own), reporting every error as [`Config::parse_all`] does.
    pub fn from_sections(mut top: toml::Table) -> Result<Config, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let interface = match top.remove("interface") {
            Some(v) => typed::<RawInterface>(v, "interface"),
            None => err("interface", "missing (the [interface] section)"),
        }
        .and_then(parse_interface)
        .unwrap_or_else(|e| {
            errors.push(e);
            parse_interface(RawInterface::default()).expect("the defaults are valid")
        });
        let raw_sas = array_of_tables(&mut top, "sa").unwrap_or_else(|e| {
            errors.push(e);
            Vec::new()
        });
        let mut sas: Vec<SaParams> = Vec::new();
        // The names of the SAs with errors: a policy naming one is not reported again.
        let mut broken: Vec<String> = Vec::new();
        for (i, (key, v)) in raw_sas.into_iter().enumerate() {
            let name = v
                .get("name")
                .and_then(|n| n.as_str())
                .map_or_else(|| format!("sa{i}"), str::to_string);
            let parsed = typed::<RawSa>(v, &key).and_then(|s| {
                parse_sa(
                    &|f| format!("{key}.{f}"),
                    format!("sa{i}"),
                    s,
                    &interface,
                    &sas,
                )
            });
            match parsed {
                Ok(p) => sas.push(p),
                Err(e) => {
                    errors.push(e);
                    broken.push(name);
                }
            }
        }
        let has_psp = top.contains_key("psp");
        let psp = match top
            .remove("psp")
            .map(|v| typed::<RawPsp>(v, "psp").and_then(parse_psp))
        {
            Some(Err(e)) => {
                errors.push(e);
                None
            }
            Some(Ok(p)) => Some(p),
            None => None,
        };
        let raw_policies = array_of_tables(&mut top, "policy").unwrap_or_else(|e| {
            errors.push(e);
            Vec::new()
        });
        let mut policies = Vec::new();
        for (i, (key, v)) in raw_policies.into_iter().enumerate() {
            // The keys of its SA names that name a broken SA (`policy[1].sas[0]`).
            let broken_keys: Vec<String> = v
                .get("sas")
                .and_then(|a| a.as_array())
                .into_iter()
                .flatten()
                .enumerate()
                .filter(|(_, n)| n.as_str().is_some_and(|n| broken.iter().any(|b| b == n)))
                .map(|(j, _)| format!("{key}.sas[{j}]"))
                .collect();
            let parsed = typed::<RawPolicy>(v, &key).and_then(|p| {
                parse_policy(
                    &|f| format!("{key}.{f}"),
                    format!("policy{i}"),
                    p,
                    has_psp,
                    &sas,
                    false,
                )
            });
            match parsed {
                Ok(mut rule) => {
                    if let sa_policy::Action::Protect(_) = rule.action {
                        rule.action = sa_policy::Action::Protect(policies.len());
                    }
                    policies.push(rule);
                }
                Err(e) if broken_keys.contains(&e.key) && e.reason.starts_with(NO_SUCH_SA) => {}
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Config {
            interface,
            sas,
            policies,
            psp,
        })
    }
}

impl Config {
    /// Builds the SA database (key schedules computed here, once); returns it with where SA `i` of the
    /// configuration went.
    pub fn build_sad(
        &self,
        now: u64,
    ) -> Result<
        (
            netveil_ipsec::bundle::Sad,
            Vec<netveil_ipsec::bundle::SaIdx>,
        ),
        ConfigError,
    > {
        self.build_sad_reserved(now, &[])
    }

    /// Builds the SA database with the starts of the state directory (see [`crate::runtime::state::start`]): outbound SA
    /// `i` continues above its sequence mark, inbound SA `i` above its receive floor. Without starts (`&[]`), every
    /// SA starts fresh (offline tools and tests).
    pub fn build_sad_reserved(
        &self,
        now: u64,
        starts: &[crate::runtime::state::Start],
    ) -> Result<
        (
            netveil_ipsec::bundle::Sad,
            Vec<netveil_ipsec::bundle::SaIdx>,
        ),
        ConfigError,
    > {
        use crate::runtime::state::Start;
        use netveil_ipsec::bundle::SaIdx;
        use netveil_ipsec::{InboundSa, OutboundSa};
        let mut sad = netveil_ipsec::bundle::Sad::default();
        let mut at = Vec::with_capacity(self.sas.len());
        for (i, p) in self.sas.iter().enumerate() {
            let cant = |e: netveil_ipsec::SaError| ConfigError {
                key: format!("sa[{i}]"),
                reason: format!("cannot install: {e}"),
            };
            at.push(match (p.direction, starts.get(i)) {
                (Direction::Out, Some(Start::Out(s))) => {
                    let sa = match &s.counter {
                        Some(c) => OutboundSa::with_counter(p.clone(), now, c.clone(), &mut OsRng),
                        None => {
                            let mut p = p.clone();
                            p.first_seq = s.first;
                            OutboundSa::with_reservation(p, now, s.reserved, &mut OsRng)
                        }
                    }
                    .map_err(cant)?;
                    SaIdx::Out(sad.insert_out(sa))
                }
                (Direction::Out, _) => SaIdx::Out(
                    sad.insert_out(OutboundSa::new(p.clone(), now, &mut OsRng).map_err(cant)?),
                ),
                (Direction::In, start) => {
                    let sa = match start {
                        Some(Start::In(s)) => InboundSa::with_state(p.clone(), now, s.state(p)),
                        _ => InboundSa::new(p.clone(), now),
                    }
                    .map_err(cant)?;
                    SaIdx::In(
                        sad.insert_in(sa)
                            .or_else(|e| err(format!("sa[{i}].spi"), e))?,
                    )
                }
            });
        }
        Ok((sad, at))
    }

    /// Every SA has keys of its own (what `up` and `check` require; the offline pcap tools may use one key for an
    /// outbound SA and the inbound SA that opens what it made). Two SAs under one key would repeat sequence numbers,
    /// and so nonces (the two directions of a pair each start at 1), and one's packets would verify as the other's.
    pub fn check_distinct_keys(&self) -> Result<(), ConfigError> {
        for (i, s) in self.sas.iter().enumerate() {
            if s.enc_key.is_empty() && s.auth_key.is_empty() {
                continue;
            }
            if let Some(o) = self.sas[..i]
                .iter()
                .position(|o| o.enc_key[..] == s.enc_key[..] && o.auth_key[..] == s.auth_key[..])
            {
                return err(
                    format!(
                        "sa[{i}].{}",
                        if s.enc_key.is_empty() { "auth_key" } else { "enc_key" }
                    ),
                    format!(
                        "sa[{o}] has the same keys: every SA needs its own (two SAs under one key would repeat \
                         sequence numbers, and so nonces, and one's packets would verify as the other's)"
                    ),
                );
            }
        }
        Ok(())
    }

    /// Index of the SA named `name`.
    pub fn sa_index(&self, name: &str) -> Option<usize> {
        self.sas.iter().position(|s| s.name == name)
    }
}

#[cfg(test)]
mod tests {
    use crate::engines::ip::config::*;

    /// Names follow one rule at every entry: the file's SA, policy, policy's SA and interface names, and the
    /// runtime's `sa add` and `policy add` tables; the default names of unnamed entries pass it. Hostile names
    /// (issue 21's policy name that added an nftables rule) are refused, naming the key, without the value.
    #[test]
    fn hostile_names_are_refused_at_every_entry() {
        let sa = "[[sa]]\nname = \"a\"\ndirection = \"out\"\nspi = 0x1001\nlocal = \"192.0.2.1\"\n\
                  remote = \"192.0.2.2\"\nsuite = \"aes128gcm16\"\n\
                  enc_key = \"00112233445566778899aabbccddeeff01020304\"\n";
        let pol = "[[policy]]\nname = \"p\"\ndirection = \"out\"\ndst = \"10.0.0.0/8\"\naction = \"protect\"\n\
                   sas = [\"a\"]\n";
        let file = format!("[interface]\nname = \"nv0\"\n{sa}{pol}");
        Config::parse(&file).unwrap();
        // Unnamed entries get names that pass the rule.
        let unnamed = file
            .replace("name = \"a\"\n", "")
            .replace("name = \"p\"\n", "");
        let c = Config::parse(&unnamed.replace("sas = [\"a\"]", "sas = [\"sa0\"]")).unwrap();
        assert_eq!(
            (c.sas[0].name.as_str(), c.policies[0].name.as_str()),
            ("sa0", "policy0")
        );
        for n in [
            c.sas[0].name.as_str(),
            c.policies[0].name.as_str(),
            c.interface.name.as_str(),
        ] {
            assert!(crate::runtime::names::is_name(n), "{n}");
        }
        let evil = [
            r#"x" meta l4proto != 255 accept comment ""#,
            "x\nmeta l4proto != 255 accept",
            "x;y",
            "x y",
            "",
            "x}",
        ];
        for e in evil {
            // The name as a TOML string (quotes and newlines escaped).
            let q = toml::Value::String(e.into()).to_string();
            for (text, key) in [
                (
                    file.replacen("name = \"a\"", &format!("name = {q}"), 1),
                    "sa[0].name",
                ),
                (
                    file.replacen("name = \"p\"", &format!("name = {q}"), 1),
                    "policy[0].name",
                ),
                (
                    file.replacen("sas = [\"a\"]", &format!("sas = [{q}]"), 1),
                    "policy[0].sas[0]",
                ),
                (
                    file.replacen("name = \"nv0\"", &format!("name = {q}"), 1),
                    "interface.name",
                ),
            ] {
                let err = Config::parse(&text).unwrap_err();
                assert_eq!(err.key, key, "{text}: {err}");
                assert!(err.reason.contains("A-Z a-z 0-9 . _ -"), "{err}");
                assert!(e.len() < 3 || !err.to_string().contains(e), "{err}");
            }
        }
        // The runtime: `sa add` and `policy add` through the control socket's tables.
        let cfg = Config::parse(&file).unwrap();
        let table = |text: &str, section: &str| -> toml::Table {
            let t: toml::Table = toml::from_str(text).unwrap();
            t[section].as_array().unwrap()[0]
                .as_table()
                .unwrap()
                .clone()
        };
        for e in evil {
            let mut t = table(sa, "sa");
            t.insert("name".into(), toml::Value::String(e.into()));
            let err = sa_from_table(t, &cfg.interface, &[]).unwrap_err();
            assert_eq!(err.key, "sa.name", "{err}");
            for (k, v, want) in [
                ("name", toml::Value::String(e.into()), "policy.name"),
                (
                    "sas",
                    toml::Value::Array(vec![toml::Value::String(e.into())]),
                    "policy.sas[0]",
                ),
            ] {
                let mut t = table(pol, "policy");
                t.insert(k.into(), v);
                let err = policy_from_table(t, false, &cfg.sas).unwrap_err();
                assert_eq!(err.key, want, "{err}");
            }
        }
    }

    /// Two SAs with the same keys would repeat nonces: refused, naming the key.
    #[test]
    fn two_sas_may_not_share_keys() {
        let sa = |name: &str, dir: &str, spi: u32| {
            format!(
                "[[sa]]\nname = \"{name}\"\ndirection = \"{dir}\"\nspi = {spi}\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
                 suite = \"aes128gcm16\"\nenc_key = \"00112233445566778899aabbccddeeff01020304\"\n"
            )
        };
        let e = Config::parse(&format!(
            "[interface]\n{}{}",
            sa("a", "out", 0x1001),
            sa("b", "in", 0x2001)
        ))
        .unwrap()
        .check_distinct_keys()
        .unwrap_err();
        assert_eq!(e.key, "sa[1].enc_key");
        assert!(e.reason.contains("sa[0]"), "{e}");
    }
}
