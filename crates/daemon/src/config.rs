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

use ipnet::IpNet;
use netveil_crypto::rand::OsRng;
use netveil_ipsec::sa::{Direction, Suite};
use netveil_ipsec::suite::{AhSuite, EspSuite};
use netveil_ipsec::{Mode, SaParams, UdpEncap};
use netveil_sa::lifetime::{Lifetime, Limits};
use netveil_sa::policy::{self, PortRange, Selector};
use serde::Deserialize;
use std::net::IpAddr;

pub use crate::error::ConfigError;

fn err<T>(key: impl Into<String>, reason: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError {
        key: key.into(),
        reason: reason.into(),
    })
}

/// A key as written in the file (hex): zeroized when dropped, never printed.
pub struct Secret(zeroize::Zeroizing<String>);

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(SecretVisitor)
    }
}

/// Takes a string only; any other value is refused with an error that does not show it (serde's own would quote
/// it: a key written as a number, say).
struct SecretVisitor;

impl SecretVisitor {
    fn refuse<E: serde::de::Error>(what: &str) -> E {
        E::custom(format_args!(
            "expected a hex string, found {what} (value not shown)"
        ))
    }
}

impl<'de> serde::de::Visitor<'de> for SecretVisitor {
    type Value = Secret;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a hex string")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Secret, E> {
        Ok(Secret(zeroize::Zeroizing::new(v.to_owned())))
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Secret, E> {
        Ok(Secret(zeroize::Zeroizing::new(v)))
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Secret, E> {
        Err(Self::refuse("a boolean"))
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Secret, E> {
        Err(Self::refuse("an integer"))
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Secret, E> {
        Err(Self::refuse("an integer"))
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Secret, E> {
        Err(Self::refuse("a float"))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> Result<Secret, A::Error> {
        Err(Self::refuse("an array"))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<Secret, A::Error> {
        Err(Self::refuse("a table"))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl std::ops::Deref for Secret {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// A TOML error without the excerpt of the file that the toml crate would print (the line may hold a key): the
/// position and the reason only.
pub fn toml_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(s) => {
            let before = &text[..s.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!(
                "invalid configuration at line {line}, column {col}: {}",
                e.message().trim_end()
            )
        }
        None => format!("invalid configuration: {}", e.message().trim_end()),
    }
}

/// Deserializes one table of the configuration (`[interface]`, one `[[sa]]`, a runtime `sa add`'s keys) into its
/// raw struct. Errors name the key (`what.FIELD`) and say what was expected, never what was given: serde's own
/// messages quote the value (`invalid type: string "..."`), so they are rewritten (see [`serde_reason`]).
pub fn typed<T: serde::de::DeserializeOwned>(v: toml::Value, what: &str) -> Result<T, ConfigError> {
    v.try_into().map_err(|e: toml::de::Error| {
        // The toml crate names the path of the failing value after the message ("in `lifetime.soft_bytes`"): the
        // path holds field names of the struct only (an unknown key fails before it is added).
        let shown = e.to_string();
        let path = shown
            .strip_prefix(e.message())
            .map(str::trim)
            .and_then(|r| r.strip_prefix("in `"))
            .and_then(|r| r.strip_suffix('`'))
            .filter(|p| p.split('.').all(crate::names::is_name));
        let (field, reason) = serde_reason(e.message());
        let key = [Some(what), path, field.as_deref()]
            .into_iter()
            .flatten()
            .filter(|k| !k.is_empty())
            .collect::<Vec<_>>()
            .join(".");
        ConfigError { key, reason }
    })
}

/// A serde error message without the value it quotes: `invalid type: string "...", expected i64` becomes
/// `expected an integer, found a string (value not shown)`. An unknown key is named when it is a plain name (it
/// is returned as the field at fault). Messages of other shapes pass only without quotes in them.
pub fn serde_reason(m: &str) -> (Option<String>, String) {
    let m = m.trim_end();
    let expected = |e: &str| -> String {
        match e.trim() {
            "i64" | "u64" | "i32" | "u32" | "u16" | "u8" | "an integer" => "an integer".into(),
            "a boolean" | "bool" => "a boolean (true or false)".into(),
            "a sequence" => "an array".into(),
            "a map" => "a table".into(),
            s if s.starts_with("struct ") => "a table".into(),
            s if s.starts_with("a string") => "a string".into(),
            s if !s.contains(['"', '`', '\'']) => s.into(),
            _ => "another type".into(),
        }
    };
    let found = |u: &str| -> &'static str {
        let u = u.trim_start();
        if u.starts_with("string") || u.starts_with("character") {
            "a string"
        } else if u.starts_with("integer") {
            "an integer"
        } else if u.starts_with("floating point") {
            "a float"
        } else if u.starts_with("boolean") {
            "a boolean"
        } else if u.starts_with("sequence") {
            "an array"
        } else if u.starts_with("map") {
            "a table"
        } else {
            "another type"
        }
    };
    for (prefix, what) in [("invalid type: ", "found"), ("invalid value: ", "invalid:")] {
        if let Some(rest) = m.strip_prefix(prefix) {
            // The expected part is ours (a type); the value comes first and may hold anything, ", expected "
            // included: the last one separates them.
            let Some(i) = rest.rfind(", expected ") else {
                return (None, "invalid value (not shown)".into());
            };
            let (u, e) = (&rest[..i], &rest[i + ", expected ".len()..]);
            return (
                None,
                if what == "found" {
                    format!(
                        "expected {}, found {} (value not shown)",
                        expected(e),
                        found(u)
                    )
                } else {
                    format!("expected {} (value not shown)", expected(e))
                },
            );
        }
    }
    if let Some(rest) = m.strip_prefix("unknown field `") {
        let (name, known) = match rest.rfind("`, expected ") {
            Some(i) => (&rest[..i], Some(&rest[i + "`, expected ".len()..])),
            None => (rest.rsplit_once('`').map_or(rest, |(n, _)| n), None),
        };
        let known = known.map_or(String::new(), |k| format!(" ({k})"));
        return if crate::names::is_name(name) {
            (Some(name.to_string()), format!("unknown key{known}"))
        } else {
            (
                None,
                format!("unknown key (not shown: not a plain name){known}"),
            )
        };
    }
    if m.starts_with("missing field `")
        || m.starts_with("invalid length ")
        || !m.contains(['"', '`', '\''])
    {
        return (None, m.to_string());
    }
    (None, "invalid value (not shown)".into())
}

/// The keys of the configuration file's top level that [`Config::parse_all`] knows (the others' sections are
/// parsed elsewhere: `l2sec` by [`crate::l2::L2Config`], `log_level` by [`crate::runtime`]).
const TOP_KEYS: [&str; 6] = ["interface", "sa", "policy", "psp", "l2sec", "log_level"];

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPsp {
    version: Option<String>,
    mode: Option<String>,
    local: Option<String>,
    remote: Option<String>,
    control_port: Option<i64>,
    cert: Option<String>,
    key: Option<String>,
    peer_ca: Option<String>,
    peer_name: Option<String>,
    rotate_seconds: Option<i64>,
    replay_window: Option<i64>,
    crypt_offset: Option<i64>,
    #[serde(default)]
    vc: bool,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawInterface {
    name: Option<String>,
    #[serde(default)]
    addresses: Vec<String>,
    mtu: Option<i64>,
    #[serde(default)]
    routes: Vec<String>,
    fwmark: Option<i64>,
    nat_t_port: Option<i64>,
    #[serde(default)]
    allow_null_null: bool,
    default_policy: Option<String>,
    offload: Option<bool>,
    control_socket: Option<String>,
    control_group: Option<String>,
    state_dir: Option<String>,
    #[serde(default)]
    allow_volatile_state: bool,
    block_when_stopped: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSa {
    name: Option<String>,
    direction: Option<String>,
    protocol: Option<String>,
    spi: Option<i64>,
    mode: Option<String>,
    local: Option<String>,
    remote: Option<String>,
    suite: Option<String>,
    enc_key: Option<Secret>,
    auth_key: Option<Secret>,
    #[serde(default)]
    esn: bool,
    replay_window: Option<i64>,
    encap: Option<String>,
    local_port: Option<i64>,
    remote_port: Option<i64>,
    tfc_pad_to: Option<i64>,
    lifetime: Option<RawLifetime>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLifetime {
    soft_bytes: Option<i64>,
    hard_bytes: Option<i64>,
    soft_packets: Option<i64>,
    hard_packets: Option<i64>,
    soft_seconds: Option<i64>,
    hard_seconds: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
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

/// The TUN interface and daemon settings.
#[derive(Debug, Clone)]
pub struct Interface {
    pub name: String,
    pub addresses: Vec<IpNet>,
    pub mtu: u16,
    pub routes: Vec<IpNet>,
    pub fwmark: Option<u32>,
    pub nat_t_port: u16,
    pub allow_null_null: bool,
    pub default_action: policy::Action,
    pub offload: bool,
    pub control_socket: String,
    /// `control_group`: the group id (resolved from its name when the file is read) whose processes may use the
    /// control socket besides root's; the socket is then mode 0660 of that group.
    pub control_group: Option<u32>,
    /// Where the daemon keeps what must survive a restart (sequence-number marks of static-key SAs): `state_dir`,
    /// `allow_volatile_state`, and `netveil up --fresh-keys`.
    pub state_dir: crate::state::StateLocation,
    /// Keep dropping covered traffic after a clean stop too, until `netveil down` (a crash always leaves it
    /// blocked).
    pub block_when_stopped: bool,
}

/// The mark of the daemon's own sockets when `interface.fwmark` is not set: the fail-closed rules let packets
/// with the daemon's mark through.
pub const DEFAULT_SOCKET_MARK: u32 = 0x6e76_0001;

impl Interface {
    /// The mark the daemon's own sockets carry (`fwmark`, or [`DEFAULT_SOCKET_MARK`]).
    pub fn socket_mark(&self) -> u32 {
        self.fwmark.unwrap_or(DEFAULT_SOCKET_MARK)
    }

    /// The name of the nftables table (`inet`) of this interface's filters.
    pub fn nft_table(&self) -> String {
        format!("netveil_{}", crate::engine::nft_ident(&self.name))
    }
}

/// A validated policy rule. Its SAs are named (`sa_names`, innermost first); `sas` is what they resolve to in the
/// running SA database, by the policy's direction only (filled in by the IP engine's snapshot; empty in a parsed
/// configuration).
#[derive(Debug, Clone)]
pub struct PolicyRule {
    pub name: String,
    pub direction: policy::Direction,
    pub selector: Selector,
    pub action: policy::Action,
    pub sas: netveil_ipsec::bundle::Bundle,
    /// The SAs' names as given: a policy added at runtime may name SAs not installed yet (then `sas` is empty and
    /// its traffic is dropped, reported as an acquire).
    pub sa_names: Vec<String>,
    /// A protect policy whose traffic PSP protects (to the `[psp]` peer) instead of IPsec SAs.
    pub psp: bool,
}

/// The `[psp]` section: PSP to one peer, keys exchanged over a mutually authenticated TLS 1.3 connection.
#[derive(Debug, Clone)]
pub struct PspConfig {
    pub version: netveil_psp::Version,
    pub mode: netveil_psp::Mode,
    /// Our outer address and the peer's.
    pub local: IpAddr,
    pub remote: IpAddr,
    /// TCP port of the TLS key-exchange connection (both sides listen; the lower address connects).
    pub control_port: u16,
    /// Our certificate chain and private key (PEM), the trust anchor for the peer's certificate (PEM: the peer's
    /// self-signed certificate from `netveil keygen`, or a CA) and the name the peer's certificate must carry.
    pub cert: String,
    pub key: String,
    pub peer_ca: String,
    pub peer_name: String,
    /// Master-key rotation interval (0: only on `netveil rotate`).
    pub rotate_seconds: u64,
    /// netveil's IV replay check (tunnel mode; default [`DEFAULT_REPLAY_WINDOW`]; 0: off, as PSP specifies).
    pub replay_window: u32,
    /// Crypt offset in 4-byte units (transport mode and both tunnel families).
    pub crypt_offset: u8,
    /// Send an 8-byte virtualization cookie (all zero).
    pub vc: bool,
}

pub const PSP_CONTROL_PORT: u16 = 1001;

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub interface: Interface,
    pub sas: Vec<SaParams>,
    pub policies: Vec<PolicyRule>,
    pub psp: Option<PspConfig>,
}

pub const DEFAULT_REPLAY_WINDOW: u32 = 1024;
pub const DEFAULT_MTU: u16 = 1400;
/// The largest `tfc_pad_to`.
pub const TFC_PAD_MAX: u16 = 9000;
/// The directory of the control sockets by default.
pub use netveil_control::RUN_DIR;

fn int_in(key: &str, v: i64, lo: i64, hi: i64) -> Result<i64, ConfigError> {
    if v < lo || v > hi {
        return err(
            key,
            format!("is out of range ({lo}..={hi}; value not shown)"),
        );
    }
    Ok(v)
}

fn parse_ip(key: &str, s: &str) -> Result<IpAddr, ConfigError> {
    s.trim()
        .parse()
        .or_else(|_| err(key, "is not an IP address (value not shown)"))
}

fn parse_net(key: &str, s: &str) -> Result<IpNet, ConfigError> {
    let s = s.trim();
    if let Ok(n) = s.parse::<IpNet>() {
        return Ok(n);
    }
    if let Ok(a) = s.parse::<IpAddr>() {
        return Ok(IpNet::from(a));
    }
    err(
        key,
        "is not an address or prefix (e.g. 192.0.2.0/24; value not shown)",
    )
}

fn parse_hex(key: &str, s: &str) -> Result<zeroize::Zeroizing<Vec<u8>>, ConfigError> {
    let t = s.trim();
    let t = t.strip_prefix("0x").unwrap_or(t);
    let t = zeroize::Zeroizing::new(
        t.chars()
            .filter(|c| *c != ':' && !c.is_whitespace())
            .collect::<String>(),
    );
    match hex::decode(t.as_bytes()) {
        Ok(v) => Ok(zeroize::Zeroizing::new(v)),
        Err(_) => err(key, "is not a hexadecimal string"),
    }
}

fn parse_proto(key: &str, v: &toml::Value) -> Result<Option<u8>, ConfigError> {
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

fn parse_ports(key: &str, v: &toml::Value) -> Result<PortRange, ConfigError> {
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

fn opt_u64(key: &str, v: Option<i64>) -> Result<Option<u64>, ConfigError> {
    match v {
        None => Ok(None),
        Some(x) if x <= 0 => err(key, "must be positive"),
        Some(x) => Ok(Some(x as u64)),
    }
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = zeroize::Zeroizing::new(
            std::fs::read_to_string(path)
                .or_else(|e| err("", format!("cannot read {}: {e}", path.display())))?,
        );
        Config::parse(&text)
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
        let mut top: toml::Table = toml::from_str(text).map_err(|e| {
            vec![ConfigError {
                key: String::new(),
                reason: toml_error(text, &e),
            }]
        })?;
        let mut errors = Vec::new();
        for k in top.keys().filter(|k| !TOP_KEYS.contains(&k.as_str())) {
            errors.push(ConfigError {
                key: if crate::names::is_name(k) {
                    k.clone()
                } else {
                    String::new()
                },
                reason: format!("unknown section or key (known: {})", TOP_KEYS.join(", ")),
            });
        }
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
                    if let policy::Action::Protect(_) = rule.action {
                        rule.action = policy::Action::Protect(policies.len());
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

/// The reason of a policy's error for an SA name that no SA has.
const NO_SUCH_SA: &str = "names no SA";

/// The group id of a `control_group` value (at `key`): the name of a group of this host (`/etc/group` or what NSS
/// knows), 1-32 of [A-Za-z0-9_.-], not starting with '-'.
pub fn control_group(key: &str, name: &str) -> Result<u32, ConfigError> {
    let valid = !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if !valid {
        return err(
            key,
            "not a group name (1-32 of [A-Za-z0-9_.-], not starting with '-')",
        );
    }
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => err(key, format!("no group '{name}' on this host")),
        Err(e) => err(key, format!("cannot look up the group '{name}': {e}")),
    }
}

/// Parses the `[interface]` section.
fn parse_interface(ri: RawInterface) -> Result<Interface, ConfigError> {
    let name = ri.name.unwrap_or_else(|| "nv0".into());
    crate::names::check_ifname("interface.name", &name)?;
    let addresses = ri
        .addresses
        .iter()
        .enumerate()
        .map(|(i, a)| parse_net(&format!("interface.addresses[{i}]"), a))
        .collect::<Result<Vec<_>, _>>()?;
    let routes = ri
        .routes
        .iter()
        .enumerate()
        .map(|(i, a)| parse_net(&format!("interface.routes[{i}]"), a))
        .collect::<Result<Vec<_>, _>>()?;
    let mtu = match ri.mtu {
        None => DEFAULT_MTU,
        Some(m) => int_in("interface.mtu", m, 576, 65000)? as u16,
    };
    let fwmark = match ri.fwmark {
        None => None,
        Some(m) => Some(int_in("interface.fwmark", m, 1, u32::MAX as i64)? as u32),
    };
    let nat_t_port = int_in(
        "interface.nat_t_port",
        ri.nat_t_port.unwrap_or(4500),
        1,
        65535,
    )? as u16;
    let default_action = match ri.default_policy.as_deref().unwrap_or("discard") {
        "bypass" => policy::Action::Bypass,
        "discard" => policy::Action::Discard,
        _ => return err("interface.default_policy", "must be 'bypass' or 'discard'"),
    };
    let control_socket = ri
        .control_socket
        .unwrap_or_else(|| format!("{RUN_DIR}/{name}.sock"));
    // Both may reach log lines.
    crate::names::check_text("interface.control_socket", &control_socket)?;
    if let Some(d) = &ri.state_dir {
        crate::names::check_text("interface.state_dir", d)?;
    }
    Ok(Interface {
        name,
        addresses,
        mtu,
        routes,
        fwmark,
        nat_t_port,
        allow_null_null: ri.allow_null_null,
        default_action,
        offload: ri.offload.unwrap_or(true),
        control_socket,
        control_group: ri
            .control_group
            .map(|g| control_group("interface.control_group", &g))
            .transpose()?,
        state_dir: crate::state::StateLocation {
            allow_volatile: ri.allow_volatile_state,
            ..crate::state::StateLocation::new(match ri.state_dir {
                Some(d) if d.is_empty() => return err("interface.state_dir", "must not be empty"),
                Some(d) => d,
                None => crate::state::DEFAULT_STATE_DIR.into(),
            })
        },
        block_when_stopped: ri.block_when_stopped.unwrap_or(true),
    })
}

/// An SA given at runtime (`netveil sa add`, `update`): the keys of one `[[sa]]` table, `name` required, checked as
/// the configuration file's SAs are (errors name `sa.KEY`). `others`: the SAs it must not clash with.
pub fn sa_from_table(
    t: toml::Table,
    interface: &Interface,
    others: &[SaParams],
) -> Result<SaParams, ConfigError> {
    let raw: RawSa = typed(toml::Value::Table(t), "sa")?;
    if raw.name.as_deref().is_none_or(str::is_empty) {
        return err(
            "sa.name",
            "missing (SAs are added, replaced and removed by name)",
        );
    }
    parse_sa(
        &|f| format!("sa.{f}"),
        String::new(),
        raw,
        interface,
        others,
    )
}

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

/// Parses one `[[sa]]` table (`k` names its keys in errors: `sa[0].spi`, `sa.spi`). `others`: the SAs it must not
/// clash with (name; inbound SPI of the same protocol).
fn parse_sa(
    k: &dyn Fn(&str) -> String,
    default_name: String,
    s: RawSa,
    interface: &Interface,
    others: &[SaParams],
) -> Result<SaParams, ConfigError> {
    let name = s.name.unwrap_or(default_name);
    crate::names::check_name(&k("name"), &name)?;
    if others.iter().any(|o| o.name == name) {
        return err(k("name"), "is used by another SA");
    }
    let direction = match s.direction.as_deref() {
        Some("out") => Direction::Out,
        Some("in") => Direction::In,
        Some(_) => return err(k("direction"), "must be 'out' or 'in'"),
        None => return err(k("direction"), "missing ('out' or 'in')"),
    };
    let spi = match s.spi {
        None => return err(k("spi"), "missing"),
        Some(v) => int_in(&k("spi"), v, 256, u32::MAX as i64)? as u32,
    };
    let proto = s.protocol.as_deref().unwrap_or("esp");
    let suite_name = match s.suite.as_deref() {
        Some(x) => x,
        None => return err(k("suite"), "missing (e.g. 'aes128gcm16')"),
    };
    let suite = match proto {
        "esp" => Suite::Esp(
            EspSuite::parse(suite_name, interface.allow_null_null)
                .or_else(|e| err(k("suite"), suite_error(&e)))?,
        ),
        "ah" => {
            Suite::Ah(AhSuite::parse(suite_name).or_else(|e| err(k("suite"), suite_error(&e)))?)
        }
        _ => return err(k("protocol"), "must be 'esp' or 'ah'"),
    };
    let mode = match s.mode.as_deref().unwrap_or("tunnel") {
        "transport" => {
            if s.local.is_some() || s.remote.is_some() {
                // Allowed but unused in transport mode: the packet's own addresses are used.
            }
            Mode::Transport
        }
        "tunnel" => {
            let local = parse_ip(
                &k("local"),
                s.local.as_deref().ok_or_else(|| ConfigError {
                    key: k("local"),
                    reason: "missing (the local tunnel endpoint address)".into(),
                })?,
            )?;
            let remote = parse_ip(
                &k("remote"),
                s.remote.as_deref().ok_or_else(|| ConfigError {
                    key: k("remote"),
                    reason: "missing (the remote tunnel endpoint address)".into(),
                })?,
            )?;
            if local.is_ipv4() != remote.is_ipv4() {
                return err(
                    k("remote"),
                    "local and remote must be of the same address family",
                );
            }
            Mode::Tunnel { local, remote }
        }
        _ => return err(k("mode"), "must be 'tunnel' or 'transport'"),
    };
    let enc_key = match &s.enc_key {
        Some(h) => parse_hex(&k("enc_key"), h)?,
        None => zeroize::Zeroizing::new(vec![]),
    };
    let auth_key = match &s.auth_key {
        Some(h) => parse_hex(&k("auth_key"), h)?,
        None => zeroize::Zeroizing::new(vec![]),
    };
    match suite {
        Suite::Esp(es) => {
            let want = es.enc.key_len();
            if enc_key.len() != want {
                let salt = if es.enc.is_aead() {
                    ", key followed by the 4-byte salt"
                } else {
                    ""
                };
                return err(
                    k("enc_key"),
                    format!(
                        "{} needs {want} bytes ({} hex digits{salt}), got {}",
                        es.name(),
                        want * 2,
                        enc_key.len()
                    ),
                );
            }
            let want = es.integ.map_or(0, |i| i.key_len());
            if auth_key.len() != want {
                return err(
                    k("auth_key"),
                    format!(
                        "{} needs {want} bytes ({} hex digits), got {}",
                        es.name(),
                        want * 2,
                        auth_key.len()
                    ),
                );
            }
        }
        Suite::Ah(a) => {
            if !enc_key.is_empty() {
                return err(k("enc_key"), "AH does not encrypt: remove enc_key");
            }
            let want = a.integ.key_len();
            if auth_key.len() != want {
                return err(
                    k("auth_key"),
                    format!(
                        "{} needs {want} bytes ({} hex digits), got {}",
                        a.name(),
                        want * 2,
                        auth_key.len()
                    ),
                );
            }
        }
    }
    let replay_window = match s.replay_window {
        None => DEFAULT_REPLAY_WINDOW,
        Some(w) => int_in(&k("replay_window"), w, 64, 1 << 20)? as u32,
    };
    let encap = match s.encap.as_deref() {
        None | Some("none") => None,
        Some("udp") => {
            if matches!(suite, Suite::Ah(_)) {
                return err(
                    k("encap"),
                    "UDP encapsulation (RFC 3948) is defined for ESP only",
                );
            }
            Some(UdpEncap {
                local_port: int_in(
                    &k("local_port"),
                    s.local_port.unwrap_or(interface.nat_t_port as i64),
                    1,
                    65535,
                )? as u16,
                remote_port: int_in(&k("remote_port"), s.remote_port.unwrap_or(4500), 1, 65535)?
                    as u16,
            })
        }
        Some(_) => return err(k("encap"), "must be 'udp' or 'none'"),
    };
    let tfc_pad_to = int_in(
        &k("tfc_pad_to"),
        s.tfc_pad_to.unwrap_or(0),
        0,
        TFC_PAD_MAX.into(),
    )? as u16;
    if tfc_pad_to > 0 && (mode == Mode::Transport || matches!(suite, Suite::Ah(_))) {
        return err(k("tfc_pad_to"), "TFC padding needs ESP in tunnel mode");
    }
    let l = s.lifetime.unwrap_or_default();
    let lifetime = Lifetime {
        soft: Limits {
            bytes: opt_u64(&k("lifetime.soft_bytes"), l.soft_bytes)?,
            packets: opt_u64(&k("lifetime.soft_packets"), l.soft_packets)?,
            seconds: opt_u64(&k("lifetime.soft_seconds"), l.soft_seconds)?,
        },
        hard: Limits {
            bytes: opt_u64(&k("lifetime.hard_bytes"), l.hard_bytes)?,
            packets: opt_u64(&k("lifetime.hard_packets"), l.hard_packets)?,
            seconds: opt_u64(&k("lifetime.hard_seconds"), l.hard_seconds)?,
        },
    };
    for (soft, hard, f) in [
        (lifetime.soft.bytes, lifetime.hard.bytes, "bytes"),
        (lifetime.soft.packets, lifetime.hard.packets, "packets"),
        (lifetime.soft.seconds, lifetime.hard.seconds, "seconds"),
    ] {
        if let (Some(s), Some(h)) = (soft, hard) {
            if s >= h {
                return err(
                    k(&format!("lifetime.soft_{f}")),
                    format!("must be below lifetime.hard_{f}"),
                );
            }
        }
    }
    if direction == Direction::In
        && others.iter().any(|o| {
            o.direction == Direction::In
                && o.spi == spi
                && suite_proto(&o.suite) == suite_proto(&suite)
        })
    {
        return err(
            k("spi"),
            "is used by another inbound SA of the same protocol",
        );
    }
    Ok(SaParams {
        name,
        spi,
        direction,
        suite,
        mode,
        enc_key,
        auth_key,
        esn: s.esn,
        replay_window,
        lifetime,
        encap,
        tfc_pad_to,
        first_seq: 1,
    })
}

/// Parses one `[[policy]]` table (`k` names its keys in errors). Its SAs are looked up by name in `sas`; an SA that
/// is not there is an error, or with `missing_ok` (a policy added at runtime) leaves the policy without SAs until it
/// is installed (its traffic is dropped and an acquire is reported).
fn parse_policy(
    k: &dyn Fn(&str) -> String,
    default_name: String,
    p: RawPolicy,
    has_psp: bool,
    sas: &[SaParams],
    missing_ok: bool,
) -> Result<PolicyRule, ConfigError> {
    let name = p.name.unwrap_or(default_name);
    crate::names::check_name(&k("name"), &name)?;
    for (j, n) in p.sas.iter().enumerate() {
        crate::names::check_name(&k(&format!("sas[{j}]")), n)?;
    }
    let direction = match p.direction.as_deref() {
        Some("out") => policy::Direction::Out,
        Some("in") => policy::Direction::In,
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
        Some("protect") if use_psp => policy::Action::Protect(0),
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
                policy::Direction::Out => Direction::Out,
                policy::Direction::In => Direction::In,
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
            policy::Action::Protect(0)
        }
        Some("bypass") => policy::Action::Bypass,
        Some("discard") => policy::Action::Discard,
        Some(_) => return err(k("action"), "must be 'protect', 'bypass' or 'discard'"),
        None => return err(k("action"), "missing ('protect', 'bypass' or 'discard')"),
    };
    if !matches!(action, policy::Action::Protect(_)) && !p.sas.is_empty() {
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
        sas: netveil_ipsec::bundle::Bundle::None,
        sa_names: p.sas,
        psp: use_psp,
    })
}

/// "in" or "out".
pub fn dir_word(d: Direction) -> &'static str {
    match d {
        Direction::In => "in",
        Direction::Out => "out",
    }
}

fn parse_psp(r: RawPsp) -> Result<PspConfig, ConfigError> {
    use netveil_psp::{Mode as PMode, Version};
    let version = match r.version.as_deref().unwrap_or("aes-gcm-128") {
        "aes-gcm-128" | "0" => Version::AesGcm128,
        "aes-gcm-256" | "1" => Version::AesGcm256,
        "aes-gmac-128" | "2" => Version::AesGmac128,
        "aes-gmac-256" | "3" => Version::AesGmac256,
        _ => {
            return err(
                "psp.version",
                "must be aes-gcm-128, aes-gcm-256, aes-gmac-128 or aes-gmac-256",
            )
        }
    };
    let mode = match r.mode.as_deref().unwrap_or("tunnel") {
        "tunnel" => PMode::Tunnel,
        "transport" => PMode::Transport,
        _ => return err("psp.mode", "must be 'tunnel' or 'transport'"),
    };
    let ip = |key: &str, v: &Option<String>| match v {
        Some(s) => parse_ip(key, s),
        None => err(key, "missing (the outer address)"),
    };
    let local = ip("psp.local", &r.local)?;
    let remote = ip("psp.remote", &r.remote)?;
    if local.is_ipv4() != remote.is_ipv4() {
        return err(
            "psp.remote",
            "local and remote must be of the same address family",
        );
    }
    if local == remote {
        return err("psp.remote", "must differ from psp.local");
    }
    let file = |key: &str, v: Option<String>| match v {
        Some(s) if !s.is_empty() => Ok(s),
        _ => err(key, "missing (a PEM file; `netveil keygen` makes one)"),
    };
    let peer_name = match r.peer_name {
        Some(n) if !n.is_empty() => n,
        _ => {
            return err(
                "psp.peer_name",
                "missing (the name in the peer's certificate)",
            )
        }
    };
    if rustls::pki_types::ServerName::try_from(peer_name.as_str()).is_err() {
        return err("psp.peer_name", "is not a valid DNS name (value not shown)");
    }
    // netveil's extension: on by default in tunnel mode (PSP itself has no replay check; 0 switches it off).
    let replay_window = match r.replay_window {
        None if mode == PMode::Tunnel => DEFAULT_REPLAY_WINDOW,
        None | Some(0) => 0,
        Some(v) => int_in("psp.replay_window", v, 64, 1 << 20)? as u32,
    };
    if replay_window > 0 && mode != PMode::Tunnel {
        return err(
            "psp.replay_window",
            "the IV replay check is for tunnel mode (transport mode leaves replay protection to TCP)",
        );
    }
    Ok(PspConfig {
        version,
        mode,
        local,
        remote,
        control_port: int_in(
            "psp.control_port",
            r.control_port.unwrap_or(PSP_CONTROL_PORT as i64),
            1,
            65535,
        )? as u16,
        cert: file("psp.cert", r.cert)?,
        key: file("psp.key", r.key)?,
        peer_ca: file("psp.peer_ca", r.peer_ca)?,
        peer_name,
        rotate_seconds: int_in(
            "psp.rotate_seconds",
            r.rotate_seconds.unwrap_or(0),
            0,
            365 * 86400,
        )? as u64,
        replay_window,
        crypt_offset: int_in("psp.crypt_offset", r.crypt_offset.unwrap_or(0), 0, 63)? as u8,
        vc: r.vc,
    })
}

/// A suite error without the suite name given (the ipsec crate's messages quote it).
fn suite_error(e: &netveil_ipsec::suite::SuiteError) -> String {
    use netveil_ipsec::suite::SuiteError as E;
    match e {
        E::Unknown(_, known) => format!("unknown suite (value not shown; known: {known})"),
        E::AeadWithInteg(_) => "an AEAD suite takes no integrity algorithm".into(),
        E::MissingInteg(_) => {
            "needs an integrity algorithm (e.g. aes128-sha256; value not shown)".into()
        }
        E::NullNull | E::Key(_) => e.to_string(),
    }
}

fn suite_proto(s: &Suite) -> u8 {
    match s {
        Suite::Esp(_) => 50,
        Suite::Ah(_) => 51,
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

    /// Builds the SA database with the starts of the state directory (see [`crate::state::start`]): outbound SA
    /// `i` continues above its sequence mark, inbound SA `i` above its receive floor. Without starts (`&[]`), every
    /// SA starts fresh (offline tools and tests).
    pub fn build_sad_reserved(
        &self,
        now: u64,
        starts: &[crate::state::Start],
    ) -> Result<
        (
            netveil_ipsec::bundle::Sad,
            Vec<netveil_ipsec::bundle::SaIdx>,
        ),
        ConfigError,
    > {
        use crate::state::Start;
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
    use super::*;

    fn psp(mode: &str, extra: &str) -> Result<Config, ConfigError> {
        Config::parse(&format!(
            "[interface]\n[psp]\nmode = \"{mode}\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\ncert = \"a.crt\"\n\
             key = \"a.key\"\npeer_ca = \"b.crt\"\npeer_name = \"b\"\n{extra}"
        ))
    }

    /// PSP tunnel mode has netveil's replay window unless it is switched off; transport mode has none.
    #[test]
    fn psp_replay_window_defaults() {
        let w = |c: Config| c.psp.unwrap().replay_window;
        assert_eq!(w(psp("tunnel", "").unwrap()), DEFAULT_REPLAY_WINDOW);
        assert_eq!(w(psp("tunnel", "replay_window = 0").unwrap()), 0);
        assert_eq!(w(psp("tunnel", "replay_window = 4096").unwrap()), 4096);
        assert_eq!(w(psp("transport", "").unwrap()), 0);
        assert_eq!(
            psp("transport", "replay_window = 1024").unwrap_err().key,
            "psp.replay_window"
        );
    }

    /// `[interface] state_dir` and `allow_volatile_state` (default: refused); `--fresh-keys` is never read from the
    /// file (a key of that name is unknown).
    #[test]
    fn state_dir_and_allow_volatile_state() {
        let c = Config::parse("[interface]\n").unwrap();
        assert_eq!(
            c.interface.state_dir,
            crate::state::StateLocation::new(crate::state::DEFAULT_STATE_DIR)
        );
        let c =
            Config::parse("[interface]\nstate_dir = \"/run/nv\"\nallow_volatile_state = true\n")
                .unwrap();
        assert_eq!(c.interface.state_dir.path, std::path::Path::new("/run/nv"));
        assert!(c.interface.state_dir.allow_volatile && !c.interface.state_dir.fresh_keys);
        for k in ["fresh_keys", "allow_volatile_state = \"yes\""] {
            let text = if k.contains('=') {
                format!("[interface]\n{k}\n")
            } else {
                format!("[interface]\n{k} = true\n")
            };
            assert!(Config::parse(&text).is_err(), "{k}");
        }
    }

    /// A syntax error names the line and column and never prints the line (it may hold a key).
    #[test]
    fn syntax_errors_do_not_print_the_file() {
        let e = Config::parse("[interface]\nname = \"nv0\"\n[[sa]]\nenc_key = \"c0ffee5ecret\n")
            .unwrap_err();
        assert!(e.reason.contains("line 4"), "{e}");
        assert!(!e.reason.contains("c0ffee5ecret"), "{e}");
        // An unknown key is named (it is a plain name), its value is not.
        let e = Config::parse("[interface]\nbogus = \"c0ffee5ecret\"\n").unwrap_err();
        assert_eq!(e.key, "interface.bogus", "{e}");
        assert!(
            e.reason.starts_with("unknown key") && !e.to_string().contains("c0ffee5ecret"),
            "{e}"
        );
        // One that is not a plain name is not shown either.
        let e = Config::parse("[interface]\n\"c0ffee\\nsecret\" = 1\n").unwrap_err();
        assert_eq!(e.key, "interface", "{e}");
        assert!(!e.to_string().contains("c0ffee"), "{e}");
    }

    /// A key written as another type (a number, an array) is refused without its value.
    #[test]
    fn keys_of_the_wrong_type_are_not_printed() {
        for v in ["1234567890123", "[98765, 43210]", "9876.54321"] {
            let e = Config::parse(&format!(
                "[interface]\nname = \"nv0\"\n[[sa]]\nname = \"a\"\nenc_key = {v}\n"
            ))
            .unwrap_err();
            assert!(e.reason.contains("expected a hex string"), "{e}");
            for digits in ["12345", "98765", "43210", "9876"] {
                assert!(!e.to_string().contains(digits), "{e}");
            }
        }
    }

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
            assert!(crate::names::is_name(n), "{n}");
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
