//! The `[l2sec]` section: parsed and checked into an [`L2Config`].

use netveil_l2sec::ed25519_dalek::{SigningKey, VerifyingKey};
use netveil_l2sec::node::NodeConfig;
use netveil_l2sec::sep::DhGroup;
use netveil_l2sec::Suite;
use serde::Deserialize;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use zeroize::Zeroizing;

use crate::runtime::config::{ConfigError, RUN_DIR};

/// The top-level key of this engine's section (the runtime's registry hands [`L2Config::from_section`] this one).
pub const L2_SECTIONS: [&str; 1] = ["l2sec"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawL2 {
    interface: Option<String>,
    tap: Option<String>,
    address: Option<String>,
    group_secret: Option<String>,
    group_secret_file: Option<String>,
    group_suite: Option<String>,
    suites: Option<Vec<String>>,
    dh_groups: Option<Vec<String>>,
    lifetime_seconds: Option<i64>,
    rekey_margin_seconds: Option<i64>,
    ethertype: Option<i64>,
    signing_key: Option<String>,
    require_signatures: Option<bool>,
    state_dir: Option<String>,
    #[serde(default)]
    allow_volatile_state: bool,
    replay_window: Option<i64>,
    security_number: Option<i64>,
    #[serde(default)]
    timestamps: bool,
    timestamp_tolerance: Option<i64>,
    #[serde(default)]
    insecure_ecb: bool,
    #[serde(default)]
    insecure_null: bool,
    mtu: Option<i64>,
    offload: Option<bool>,
    control_socket: Option<String>,
    control_group: Option<String>,
    /// `[[l2sec.peer]]` tables, each deserialized into a [`RawPeer`] on its own (errors name `l2sec.peer[i]`).
    #[serde(default)]
    peer: Vec<toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPeer {
    mac: Option<String>,
    public_key: Option<String>,
    ip: Option<String>,
}

/// A validated `[l2sec]` configuration.
pub struct L2Config {
    pub interface: String,
    pub tap: String,
    /// `None`: take the port's IPv4 address.
    pub address: Option<(Ipv4Addr, u8)>,
    pub group_secret: Zeroizing<Vec<u8>>,
    pub group_suite: Suite,
    pub suites: Vec<Suite>,
    pub groups: Vec<DhGroup>,
    pub lifetime: Duration,
    pub rekey_margin: Duration,
    pub ethertype: u16,
    pub signing_key: Option<SigningKey>,
    pub require_signatures: bool,
    pub replay_window: u32,
    pub security_number: Option<u32>,
    pub timestamps: bool,
    pub timestamp_tolerance: u32,
    pub insecure_ecb: bool,
    /// `l2sec.insecure_null`: the null suite (no encryption, no integrity) may be named.
    pub insecure_null: bool,
    pub mtu: Option<u16>,
    /// TAP offloads: TCP super-frames from the host split here, received segments coalesced for it.
    pub offload: bool,
    pub control_socket: PathBuf,
    /// `l2sec.control_group`: see [`crate::runtime::config::control_group`].
    pub control_group: Option<u32>,
    /// Where the group epoch persists (`l2sec.state_dir`).
    pub state_dir: PathBuf,
    /// `l2sec.allow_volatile_state`: a state directory on a tmpfs or ramfs is accepted (with a warning).
    pub allow_volatile_state: bool,
    pub peers: HashMap<[u8; 6], VerifyingKey>,
    /// Configured address bindings (`l2sec.peer[i].ip`).
    pub peer_ips: HashMap<[u8; 6], Ipv4Addr>,
}

pub(super) fn cerr<T>(key: &str, reason: impl Into<String>) -> std::result::Result<T, ConfigError> {
    Err(ConfigError {
        key: key.to_string(),
        reason: reason.into(),
    })
}

fn int_in(key: &str, v: i64, lo: i64, hi: i64) -> std::result::Result<i64, ConfigError> {
    if v < lo || v > hi {
        return cerr(
            key,
            format!("is out of range {lo}..={hi} (value not shown)"),
        );
    }
    Ok(v)
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let v: Vec<u8> = s
        .split(':')
        .map(|p| {
            if p.len() == 2 {
                u8::from_str_radix(p, 16).ok()
            } else {
                None
            }
        })
        .collect::<Option<_>>()?;
    v.try_into().ok()
}

fn hex_bytes(key: &str, s: &str) -> std::result::Result<Zeroizing<Vec<u8>>, ConfigError> {
    let t: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    let t = t.strip_prefix("0x").unwrap_or(&t);
    hex::decode(t)
        .map(Zeroizing::new)
        .or_else(|_| cerr(key, "is not a hex string"))
}

/// The switches that let a configuration name an insecure suite.
#[derive(Clone, Copy)]
struct Insecure {
    ecb: bool,
    null: bool,
}

fn suite(key: &str, s: &str, allow: Insecure) -> std::result::Result<Suite, ConfigError> {
    let Some(su) = Suite::from_name(s) else {
        let names: Vec<&str> = Suite::ALL.iter().map(|s| s.name()).collect();
        return cerr(
            key,
            format!(
                "unknown suite (value not shown; one of {})",
                names.join(", ")
            ),
        );
    };
    if su.is_ecb() && !allow.ecb {
        return cerr(
            key,
            "is an ECB suite, insecure (equal blocks stay equal): it needs insecure_ecb = true",
        );
    }
    if su.is_null() && !allow.null {
        return cerr(
            key,
            "is the null suite, insecure (frames go in clear and unauthenticated): it needs insecure_null = true",
        );
    }
    Ok(su)
}

/// Reads an Ed25519 signing key file: 64 hex digits (the 32-byte seed), as `netveil keygen --ed25519` writes.
pub fn read_signing_key(key: &str, path: &Path) -> std::result::Result<SigningKey, ConfigError> {
    let file =
        match crate::runtime::secret_file::read(path, crate::runtime::secret_file::Level::Secret) {
            Ok(f) => f,
            Err(e) => return cerr(key, e.without_path()),
        };
    let text = match file.text() {
        Ok(t) => t,
        Err(e) => return cerr(key, e.without_path()),
    };
    let b = hex_bytes(key, text.trim())?;
    let seed: [u8; 32] = match b.as_slice().try_into() {
        Ok(s) => s,
        Err(_) => return cerr(key, "must hold 64 hex digits (an Ed25519 seed)"),
    };
    Ok(SigningKey::from_bytes(&seed))
}

/// A file name of the configuration: relative ones are relative to `base`.
fn file_in(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// `l2sec.interface` (required) and `l2sec.tap` (default `l2s0`): interface names, not the same one.
fn ports(
    interface: Option<String>,
    tap: Option<String>,
) -> std::result::Result<(String, String), ConfigError> {
    let Some(interface) = interface.filter(|s| !s.is_empty()) else {
        return cerr(
            "l2sec.interface",
            "is required (the LAN port, e.g. \"eth0\")",
        );
    };
    // Both reach the nftables table, commands and log lines: the one rule of names.
    crate::runtime::names::check_ifname("l2sec.interface", &interface)?;
    let tap = tap.unwrap_or_else(|| "l2s0".into());
    crate::runtime::names::check_ifname("l2sec.tap", &tap)?;
    if tap == interface {
        return cerr("l2sec.tap", "must differ from l2sec.interface");
    }
    Ok((interface, tap))
}

/// `l2sec.address`: `ADDRESS/PREFIX`, IPv4.
fn address(a: Option<String>) -> std::result::Result<Option<(Ipv4Addr, u8)>, ConfigError> {
    let Some(a) = a else {
        return Ok(None);
    };
    let Some((ip, len)) = a.split_once('/') else {
        return cerr(
            "l2sec.address",
            "must be ADDRESS/PREFIX, e.g. 192.0.2.10/24 (value not shown)",
        );
    };
    let (Ok(ip), Ok(len)) = (ip.parse::<Ipv4Addr>(), len.parse::<u8>()) else {
        return cerr(
            "l2sec.address",
            "is not an IPv4 address with a prefix length (value not shown)",
        );
    };
    if len > 32 {
        return cerr("l2sec.address", "has a prefix length above 32");
    }
    Ok(Some((ip, len)))
}

/// The group secret (`l2sec.group_secret`, hex, or `l2sec.group_secret_file`; one of them) and the key that gave
/// it (a short secret from the file is the file's error).
fn group_secret(
    secret: Option<String>,
    secret_file: Option<String>,
    base: &Path,
) -> std::result::Result<(Zeroizing<Vec<u8>>, &'static str), ConfigError> {
    Ok(match (secret, secret_file) {
        (Some(_), Some(_)) => {
            return cerr(
                "l2sec.group_secret",
                "give group_secret or group_secret_file, not both",
            )
        }
        (Some(s), None) => (hex_bytes("l2sec.group_secret", &s)?, "l2sec.group_secret"),
        (None, Some(f)) => {
            let k = "l2sec.group_secret_file";
            let c = crate::runtime::secret_file::read(
                &file_in(base, &f),
                crate::runtime::secret_file::Level::Secret,
            )
            .or_else(|e| cerr(k, e.without_path()))?;
            (
                hex_bytes(k, c.text().or_else(|e| cerr(k, e.without_path()))?.trim())?,
                k,
            )
        }
        (None, None) => {
            return cerr(
                "l2sec.group_secret",
                "is required (the network's shared group secret, hex; or group_secret_file)",
            )
        }
    })
}

/// `l2sec.group_suite` (default `aes128gcm`) and `l2sec.suites` (default: the group suite).
fn suites(
    group_suite: Option<String>,
    list: Option<Vec<String>>,
    allow: Insecure,
) -> std::result::Result<(Suite, Vec<Suite>), ConfigError> {
    let group_suite = suite(
        "l2sec.group_suite",
        group_suite.as_deref().unwrap_or("aes128gcm"),
        allow,
    )?;
    let suites = match list {
        None => vec![group_suite],
        Some(v) if v.is_empty() => return cerr("l2sec.suites", "must name at least one suite"),
        Some(v) => v
            .iter()
            .enumerate()
            .map(|(i, s)| suite(&format!("l2sec.suites[{i}]"), s, allow))
            .collect::<std::result::Result<Vec<_>, _>>()?,
    };
    Ok((group_suite, suites))
}

/// `l2sec.dh_groups` (default: X25519).
fn dh_groups(list: Option<Vec<String>>) -> std::result::Result<Vec<DhGroup>, ConfigError> {
    Ok(match list {
        None => vec![DhGroup::X25519],
        Some(v) if v.is_empty() => return cerr("l2sec.dh_groups", "must name at least one group"),
        Some(v) => v
            .iter()
            .enumerate()
            .map(|(i, g)| {
                DhGroup::from_name(g).map_or_else(
                    || {
                        cerr(
                            &format!("l2sec.dh_groups[{i}]"),
                            "unknown group (x25519, modp2048 or modp3072; value not shown)",
                        )
                    },
                    Ok,
                )
            })
            .collect::<std::result::Result<Vec<_>, _>>()?,
    })
}

/// `l2sec.lifetime_seconds` and `l2sec.rekey_margin_seconds` (below the lifetime), in seconds.
fn lifetimes(
    lifetime: Option<i64>,
    margin: Option<i64>,
) -> std::result::Result<(u64, u64), ConfigError> {
    let lifetime = int_in(
        "l2sec.lifetime_seconds",
        lifetime.unwrap_or(3600),
        2,
        86400 * 7,
    )? as u64;
    let margin = int_in(
        "l2sec.rekey_margin_seconds",
        margin.unwrap_or((lifetime / 12).min(300) as i64),
        1,
        86400,
    )? as u64;
    if margin >= lifetime {
        return cerr(
            "l2sec.rekey_margin_seconds",
            "must be below lifetime_seconds",
        );
    }
    Ok((lifetime, margin))
}

/// `l2sec.ethertype` (default 0x88b5): none of a protocol l2sec carries.
fn ethertype(v: Option<i64>) -> std::result::Result<u16, ConfigError> {
    let ethertype = int_in("l2sec.ethertype", v.unwrap_or(0x88b5), 0x0600, 0xffff)? as u16;
    if matches!(ethertype, 0x0800 | 0x0806 | 0x86dd | 0x8100 | 0x88a8) {
        return cerr(
            "l2sec.ethertype",
            "belongs to a protocol l2sec carries (IPv4, ARP, IPv6, VLAN): use 0x88b5 or 0x1982",
        );
    }
    Ok(ethertype)
}

/// The peers' keys and address bindings.
type Peers = (HashMap<[u8; 6], VerifyingKey>, HashMap<[u8; 6], Ipv4Addr>);

/// The `[[l2sec.peer]]` tables: each peer's public key by MAC (each MAC once), and the address bindings (each
/// address a host's, not this host's `address`, bound once).
fn peers(
    raw: Vec<toml::Value>,
    address: Option<(Ipv4Addr, u8)>,
) -> std::result::Result<Peers, ConfigError> {
    let mut peers = HashMap::new();
    let mut peer_ips: HashMap<[u8; 6], Ipv4Addr> = HashMap::new();
    for (i, p) in raw.into_iter().enumerate() {
        let p: RawPeer = crate::runtime::config::typed(p, &format!("l2sec.peer[{i}]"))?;
        let k = |f: &str| format!("l2sec.peer[{i}].{f}");
        let Some(mac) = p.mac.as_deref().and_then(parse_mac) else {
            return cerr(&k("mac"), "is required, as aa:bb:cc:dd:ee:ff");
        };
        let Some(pk) = p.public_key.as_deref() else {
            return cerr(&k("public_key"), "is required (64 hex digits)");
        };
        let b = hex_bytes(&k("public_key"), pk)?;
        let Ok(arr) = <[u8; 32]>::try_from(b.as_slice()) else {
            return cerr(&k("public_key"), "must be 32 bytes (64 hex digits)");
        };
        let Ok(vk) = VerifyingKey::from_bytes(&arr) else {
            return cerr(&k("public_key"), "is not a valid Ed25519 public key");
        };
        if peers.insert(mac, vk).is_some() {
            return cerr(&k("mac"), "appears twice");
        }
        if let Some(ip) = p.ip.as_deref() {
            let Ok(ip) = ip.parse::<Ipv4Addr>() else {
                return cerr(&k("ip"), "is not an IPv4 address (value not shown)");
            };
            if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
                return cerr(&k("ip"), "is not a host address");
            }
            if address.is_some_and(|(own, _)| own == ip) {
                return cerr(&k("ip"), "is this host's address");
            }
            if peer_ips.values().any(|o| *o == ip) {
                return cerr(&k("ip"), "is bound to another peer already");
            }
            peer_ips.insert(mac, ip);
        }
    }
    Ok((peers, peer_ips))
}

/// `l2sec.control_socket` (default: `RUN_DIR/TAP.sock`) and `l2sec.control_group`.
fn control(
    socket: Option<String>,
    group: Option<String>,
    tap: &str,
) -> std::result::Result<(PathBuf, Option<u32>), ConfigError> {
    let control_socket = socket
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("{RUN_DIR}/{tap}.sock")));
    // It reaches a log line.
    crate::runtime::names::check_text("l2sec.control_socket", &control_socket.to_string_lossy())?;
    let control_group = group
        .map(|g| crate::runtime::config::control_group("l2sec.control_group", &g))
        .transpose()?;
    Ok((control_socket, control_group))
}

impl L2Config {
    /// Is this text an l2sec configuration (a top-level `[l2sec]` table)?
    pub fn is_l2sec(text: &str) -> bool {
        toml::from_str::<toml::Value>(text)
            .ok()
            .and_then(|v| v.get("l2sec").cloned())
            .is_some()
    }

    pub fn load(path: &Path) -> std::result::Result<L2Config, ConfigError> {
        let file = crate::runtime::secret_file::read_config(path)?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(file.text().or_else(|e| cerr("", e.to_string()))?, base)
    }

    /// Parses and checks a configuration text of an `[l2sec]` section only; relative file names are relative to
    /// `base`.
    pub fn parse(text: &str, base: &Path) -> std::result::Result<L2Config, ConfigError> {
        let mut top: toml::Table = match toml::from_str(text) {
            Ok(t) => t,
            Err(e) => return cerr("", crate::runtime::config::toml_error(text, &e)),
        };
        if top.keys().any(|k| !L2_SECTIONS.contains(&k.as_str())) {
            return cerr(
                "",
                format!("unknown section or key (known: {})", L2_SECTIONS.join(", ")),
            );
        }
        let Some(l2) = top.remove("l2sec") else {
            return cerr("l2sec", "missing (the [l2sec] section)");
        };
        Self::from_section(l2, base)
    }

    /// Parses and checks the `[l2sec]` section (the value of the top-level key `l2sec`); relative file names are
    /// relative to `base`.
    pub fn from_section(
        l2: toml::Value,
        base: &Path,
    ) -> std::result::Result<L2Config, ConfigError> {
        let r: RawL2 = crate::runtime::config::typed(l2, "l2sec")?;
        let (interface, tap) = ports(r.interface, r.tap)?;
        let address = address(r.address)?;
        let (group_secret, secret_key) = group_secret(r.group_secret, r.group_secret_file, base)?;
        if group_secret.len() < 16 {
            return cerr(
                secret_key,
                format!("must be at least 16 bytes, got {}", group_secret.len()),
            );
        }
        let allow = Insecure {
            ecb: r.insecure_ecb,
            null: r.insecure_null,
        };
        let (group_suite, suites) = suites(r.group_suite, r.suites, allow)?;
        let groups = dh_groups(r.dh_groups)?;
        let (lifetime, margin) = lifetimes(r.lifetime_seconds, r.rekey_margin_seconds)?;
        let ethertype = ethertype(r.ethertype)?;
        let signing_key = match r.signing_key {
            Some(p) => Some(read_signing_key("l2sec.signing_key", &file_in(base, &p))?),
            None => None,
        };
        let (peers, peer_ips) = peers(r.peer, address)?;
        // Signatures are what makes a peer's group frames its own: on by default as soon as peers are listed.
        let require_signatures = r.require_signatures.unwrap_or(!peers.is_empty());
        if require_signatures && peers.is_empty() {
            return cerr(
                "l2sec.require_signatures",
                "needs the peers' public keys ([[l2sec.peer]])",
            );
        }
        let replay_window = int_in(
            "l2sec.replay_window",
            r.replay_window.unwrap_or(1024),
            64,
            1 << 20,
        )? as u32;
        let security_number = match r.security_number {
            Some(v) => Some(int_in("l2sec.security_number", v, 0, 0xff_ffff)? as u32),
            None => None,
        };
        let timestamp_tolerance = int_in(
            "l2sec.timestamp_tolerance",
            r.timestamp_tolerance.unwrap_or(30),
            1,
            3600,
        )? as u32;
        let mtu = match r.mtu {
            Some(m) => Some(int_in("l2sec.mtu", m, 576, 9000)? as u16),
            None => None,
        };
        let (control_socket, control_group) = control(r.control_socket, r.control_group, &tap)?;
        let state_dir = match r.state_dir {
            Some(d) if d.is_empty() => return cerr("l2sec.state_dir", "must not be empty"),
            Some(d) => file_in(base, &d),
            None => PathBuf::from(crate::runtime::state::DEFAULT_STATE_DIR),
        };
        Ok(L2Config {
            interface,
            tap,
            address,
            group_secret,
            group_suite,
            suites,
            groups,
            lifetime: Duration::from_secs(lifetime),
            rekey_margin: Duration::from_secs(margin),
            ethertype,
            signing_key,
            require_signatures,
            replay_window,
            security_number,
            timestamps: r.timestamps,
            timestamp_tolerance,
            insecure_ecb: r.insecure_ecb,
            insecure_null: r.insecure_null,
            mtu,
            offload: r.offload.unwrap_or(true),
            control_socket,
            control_group,
            state_dir,
            allow_volatile_state: r.allow_volatile_state,
            peers,
            peer_ips,
        })
    }

    /// The state directory and what the configuration allows for it.
    pub fn state_location(&self) -> crate::runtime::state::StateLocation {
        crate::runtime::state::StateLocation {
            allow_volatile: self.allow_volatile_state,
            ..crate::runtime::state::StateLocation::new(&self.state_dir)
        }
    }

    /// The node configuration for a port with `mac` and the address `ip/len`, in group `epoch`.
    pub fn node_config(&self, mac: [u8; 6], ip: Ipv4Addr, len: u8, epoch: u64) -> NodeConfig {
        let mut n = NodeConfig::new(mac, ip, len, self.group_secret.clone());
        n.epoch = epoch;
        n.peer_ips = self.peer_ips.clone();
        n.ethertype = self.ethertype;
        n.group_suite = self.group_suite;
        n.suites = self.suites.clone();
        n.groups = self.groups.clone();
        n.lifetime = self.lifetime;
        n.rekey_margin = self.rekey_margin;
        n.signing_key = self.signing_key.clone();
        n.peer_keys = self.peers.clone();
        n.require_signatures = self.require_signatures;
        n.insecure_ecb = self.insecure_ecb;
        n.insecure_null = self.insecure_null;
        n.replay_window = self.replay_window;
        n.security_number = self.security_number;
        n.timestamps = self.timestamps;
        n.timestamp_tolerance = self.timestamp_tolerance;
        n
    }
}
