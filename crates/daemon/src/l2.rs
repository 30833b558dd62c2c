//! `netveil up` for l2sec: a host's LAN port protected frame by frame.
//!
//! ```toml
//! [l2sec]
//! interface = "eth0"               # the LAN port: it carries only l2sec frames from now on
//! tap = "l2s0"                     # the host-side TAP device (gets the port's MAC and the address)
//! address = "192.0.2.10/24"        # default: the port's IPv4 address, moved to the TAP
//! group_secret = "hex..."          # the network's group secret (at least 16 bytes), or:
//! # group_secret_file = "/etc/netveil/lan.secret"
//! group_suite = "aes128gcm"        # group traffic (ARP, broadcast, multicast, SEP)
//! suites = ["aes128gcm"]           # session suites, preference order (blowfish-cbc-sha1 for the thesis' v0)
//! dh_groups = ["x25519"]           # SEP stage 3: x25519, modp2048, modp3072
//! lifetime_seconds = 3600          # session lifetime offered (and longest accepted)
//! rekey_margin_seconds = 300
//! ethertype = 0x88b5               # or 0x1982, the thesis'
//! signing_key = "h1.l2key"         # Ed25519 key (netveil keygen --ed25519): group frames are signed
//! # require_signatures = true      # refuse group frames not signed by a known peer (default: true when
//!                                  # [[l2sec.peer]] entries are listed, false otherwise)
//! # state_dir = "/var/lib/netveil" # where the group epoch (l2sec-<interface>.epoch) persists: only root's,
//!                                  #   not on a tmpfs (see the daemon's `state` module)
//! # allow_volatile_state = false   # accept a state_dir on a tmpfs/ramfs (every start warns)
//! replay_window = 1024
//! # security_number = 0x00abcd     # send and require this 24-bit number
//! # timestamps = true              # send timestamps, accept within timestamp_tolerance seconds
//! # insecure_ecb = true            # allow the ECB suites (the thesis' pattern demonstration only)
//! # offload = false                # TAP offloads (TCP super-frames split here, segments coalesced; default on)
//!
//! [[l2sec.peer]]                   # verifying keys of the other hosts (for signatures)
//! mac = "02:00:5e:00:53:0b"
//! public_key = "hex (32 bytes)"
//! ip = "192.0.2.11"                # optional: the only IPv4 address this host may claim (ARP, SEP)
//! ```
//!
//! The group epoch: at every start, `max(Unix time in µs, last epoch + 1)`, written durably to
//! `state_dir/l2sec-<interface>.epoch` before the first frame goes out, so that it strictly increases across
//! restarts even when the clock goes back (see [`netveil_l2sec::node`]).
//!
//! Setup, all of it undone on exit or on a failure: the TAP device with the port's MAC address and an MTU that
//! leaves room for l2sec's overhead; the address moved from the port to the TAP; ARP and IPv6 off on the port;
//! and an nftables `netdev` table on the port that drops (and counts) every frame that is not l2sec, in both
//! directions, so that nothing leaves or enters the host in clear.
//!
//! Threads: TAP → seal → AF_PACKET (`sendmmsg` per batch), AF_PACKET (`recvmmsg` per batch) → open → TAP, a timer
//! thread for SEP retransmissions and rekeys, and the control socket (`netveil status`). The protocol state is
//! one [`netveil_l2sec::Node`] behind a mutex, taken once per batch.

use crate::engine::{run, run_stdin, Control, Engine, Undo};
use crate::{Error, Result};
use netveil_control::status::{Drops, L2Counters, L2Peer, L2Session, L2Status};
use netveil_io::packet::{MAX_SEGMENTS, TAP_SCRATCH_LEN};
use netveil_io::{PacketSocket, Tap};
use netveil_l2sec::ed25519_dalek::{SigningKey, VerifyingKey};
use netveil_l2sec::node::{Inbound, Node, NodeConfig, NodeEvent, Outbound, PeerStatus};
use netveil_l2sec::sep::DhGroup;
use netveil_l2sec::Suite;
use netveil_wire::PacketBuf;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

use crate::config::{ConfigError, RUN_DIR};
use crate::state::StateDir;

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
    pub mtu: Option<u16>,
    /// TAP offloads: TCP super-frames from the host split here, received segments coalesced for it.
    pub offload: bool,
    pub control_socket: PathBuf,
    /// `l2sec.control_group`: see [`crate::config::Interface::control_group`].
    pub control_group: Option<u32>,
    /// Where the group epoch persists (`l2sec.state_dir`).
    pub state_dir: PathBuf,
    /// `l2sec.allow_volatile_state`: a state directory on a tmpfs or ramfs is accepted (with a warning).
    pub allow_volatile_state: bool,
    pub peers: HashMap<[u8; 6], VerifyingKey>,
    /// Configured address bindings (`l2sec.peer[i].ip`).
    pub peer_ips: HashMap<[u8; 6], Ipv4Addr>,
}

fn cerr<T>(key: &str, reason: impl Into<String>) -> std::result::Result<T, ConfigError> {
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

fn suite(key: &str, s: &str, insecure_ecb: bool) -> std::result::Result<Suite, ConfigError> {
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
    if su.is_ecb() && !insecure_ecb {
        return cerr(
            key,
            "is an ECB suite, insecure (equal blocks stay equal): it needs insecure_ecb = true",
        );
    }
    Ok(su)
}

/// Reads an Ed25519 signing key file: 64 hex digits (the 32-byte seed), as `netveil keygen --ed25519` writes.
pub fn read_signing_key(key: &str, path: &Path) -> std::result::Result<SigningKey, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => Zeroizing::new(t),
        Err(e) => return cerr(key, format!("cannot read the file (path not shown): {e}")),
    };
    let b = hex_bytes(key, text.trim())?;
    let seed: [u8; 32] = match b.as_slice().try_into() {
        Ok(s) => s,
        Err(_) => return cerr(key, "must hold 64 hex digits (an Ed25519 seed)"),
    };
    Ok(SigningKey::from_bytes(&seed))
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
        let text = std::fs::read_to_string(path)
            .or_else(|e| cerr("", format!("cannot read {}: {e}", path.display())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base)
    }

    /// Parses and checks a configuration text of an `[l2sec]` section only; relative file names are relative to
    /// `base`.
    pub fn parse(text: &str, base: &Path) -> std::result::Result<L2Config, ConfigError> {
        let mut top: toml::Table = match toml::from_str(text) {
            Ok(t) => t,
            Err(e) => return cerr("", crate::config::toml_error(text, &e)),
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
        let r: RawL2 = crate::config::typed(l2, "l2sec")?;
        let file = |p: &str| -> PathBuf {
            let p = Path::new(p);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        let Some(interface) = r.interface.filter(|s| !s.is_empty()) else {
            return cerr(
                "l2sec.interface",
                "is required (the LAN port, e.g. \"eth0\")",
            );
        };
        // Both reach the nftables table, commands and log lines: the one rule of names.
        crate::names::check_ifname("l2sec.interface", &interface)?;
        let tap = r.tap.unwrap_or_else(|| "l2s0".into());
        crate::names::check_ifname("l2sec.tap", &tap)?;
        if tap == interface {
            return cerr("l2sec.tap", "must differ from l2sec.interface");
        }
        let address = match r.address {
            None => None,
            Some(a) => {
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
                Some((ip, len))
            }
        };
        let group_secret =
            match (r.group_secret, r.group_secret_file) {
                (Some(_), Some(_)) => {
                    return cerr(
                        "l2sec.group_secret",
                        "give group_secret or group_secret_file, not both",
                    )
                }
                (Some(s), None) => hex_bytes("l2sec.group_secret", &s)?,
                (None, Some(f)) => {
                    let p = file(&f);
                    let t = Zeroizing::new(std::fs::read_to_string(&p).or_else(|e| {
                        cerr(
                            "l2sec.group_secret_file",
                            format!("cannot read the file (path not shown): {e}"),
                        )
                    })?);
                    hex_bytes("l2sec.group_secret_file", t.trim())?
                }
                (None, None) => return cerr(
                    "l2sec.group_secret",
                    "is required (the network's shared group secret, hex; or group_secret_file)",
                ),
            };
        if group_secret.len() < 16 {
            return cerr(
                "l2sec.group_secret",
                format!("must be at least 16 bytes, got {}", group_secret.len()),
            );
        }
        let ecb = r.insecure_ecb;
        let group_suite = suite(
            "l2sec.group_suite",
            r.group_suite.as_deref().unwrap_or("aes128gcm"),
            ecb,
        )?;
        let suites = match r.suites {
            None => vec![group_suite],
            Some(v) if v.is_empty() => return cerr("l2sec.suites", "must name at least one suite"),
            Some(v) => v
                .iter()
                .enumerate()
                .map(|(i, s)| suite(&format!("l2sec.suites[{i}]"), s, ecb))
                .collect::<std::result::Result<Vec<_>, _>>()?,
        };
        let groups = match r.dh_groups {
            None => vec![DhGroup::X25519],
            Some(v) if v.is_empty() => {
                return cerr("l2sec.dh_groups", "must name at least one group")
            }
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
        };
        let lifetime = int_in(
            "l2sec.lifetime_seconds",
            r.lifetime_seconds.unwrap_or(3600),
            2,
            86400 * 7,
        )? as u64;
        let margin = int_in(
            "l2sec.rekey_margin_seconds",
            r.rekey_margin_seconds
                .unwrap_or((lifetime / 12).min(300) as i64),
            1,
            86400,
        )? as u64;
        if margin >= lifetime {
            return cerr(
                "l2sec.rekey_margin_seconds",
                "must be below lifetime_seconds",
            );
        }
        let ethertype = int_in(
            "l2sec.ethertype",
            r.ethertype.unwrap_or(0x88b5),
            0x0600,
            0xffff,
        )? as u16;
        if matches!(ethertype, 0x0800 | 0x0806 | 0x86dd | 0x8100 | 0x88a8) {
            return cerr(
                "l2sec.ethertype",
                "belongs to a protocol l2sec carries (IPv4, ARP, IPv6, VLAN): use 0x88b5 or 0x1982",
            );
        }
        let signing_key = match r.signing_key {
            Some(p) => Some(read_signing_key("l2sec.signing_key", &file(&p))?),
            None => None,
        };
        let mut peers = HashMap::new();
        let mut peer_ips: HashMap<[u8; 6], Ipv4Addr> = HashMap::new();
        for (i, p) in r.peer.into_iter().enumerate() {
            let p: RawPeer = crate::config::typed(p, &format!("l2sec.peer[{i}]"))?;
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
        let control_socket = r
            .control_socket
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(format!("{RUN_DIR}/{tap}.sock")));
        // It reaches a log line.
        crate::names::check_text("l2sec.control_socket", &control_socket.to_string_lossy())?;
        let control_group = r
            .control_group
            .map(|g| crate::config::control_group("l2sec.control_group", &g))
            .transpose()?;
        let state_dir = match r.state_dir {
            Some(d) if d.is_empty() => return cerr("l2sec.state_dir", "must not be empty"),
            Some(d) => file(&d),
            None => PathBuf::from(crate::state::DEFAULT_STATE_DIR),
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
            insecure_ecb: ecb,
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
    pub fn state_location(&self) -> crate::state::StateLocation {
        crate::state::StateLocation {
            allow_volatile: self.allow_volatile_state,
            ..crate::state::StateLocation::new(&self.state_dir)
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
        n.replay_window = self.replay_window;
        n.security_number = self.security_number;
        n.timestamps = self.timestamps;
        n.timestamp_tolerance = self.timestamp_tolerance;
        n
    }
}

/// The port's MAC address and MTU (from `ip -j link`, which, unlike sysfs, answers for the current namespace).
fn port_link(name: &str) -> Result<([u8; 6], u32)> {
    let out = std::process::Command::new("ip")
        .args(["-j", "link", "show", "dev", name])
        .output()
        .map_err(Error::io("cannot run ip"))?;
    if !out.status.success() {
        return Err(Error::Usage(format!(
            "l2sec.interface: no interface '{name}'"
        )));
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let l = &v[0];
    let mac = l["address"].as_str().and_then(parse_mac).ok_or_else(|| {
        Error::Usage(format!("l2sec.interface: '{name}' has no Ethernet address"))
    })?;
    Ok((mac, l["mtu"].as_u64().unwrap_or(1500) as u32))
}

/// The port's IPv4 addresses (address, prefix length).
fn port_addrs(name: &str) -> Vec<(Ipv4Addr, u8)> {
    let Ok(out) = std::process::Command::new("ip")
        .args(["-j", "-4", "addr", "show", "dev", name])
        .output()
    else {
        return vec![];
    };
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v[0]["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| {
            Some((
                a["local"].as_str()?.parse().ok()?,
                a["prefixlen"].as_u64()? as u8,
            ))
        })
        .collect()
}

/// The nftables table that keeps the port l2sec-only.
fn nft_table(tap: &str) -> String {
    format!("netveil_l2_{}", crate::engine::nft_ident(tap))
}

/// The port's `netdev` table: every frame that is not l2sec (`ethertype`) dropped and counted, in and out. The
/// interface name goes through [`crate::engine::nft_quote`], as every string in rule text.
fn netdev_table_text(table: &str, interface: &str, ethertype: u16) -> String {
    format!(
        "table netdev {table} {{\n  chain ingress {{\n    type filter hook ingress device {i} priority -500; policy accept;\n    ether type != {et} counter drop comment {c}\n  }}\n  chain egress {{\n    type filter hook egress device {i} priority -500; policy accept;\n    ether type != {et} counter drop comment {c}\n  }}\n}}\n",
        i = crate::engine::nft_quote(interface),
        c = crate::engine::nft_quote("not l2sec"),
        et = format!("0x{ethertype:04x}"),
    )
}

/// Frames the port's nftables table dropped (not l2sec), in and out.
fn nft_clear_drops(table: &str) -> (u64, u64) {
    let out = match std::process::Command::new("nft")
        .args(["-j", "list", "table", "netdev", table])
        .output()
    {
        Ok(o) if o.status.success() => o.stdout,
        _ => return (0, 0),
    };
    let v: Value = serde_json::from_slice(&out).unwrap_or(Value::Null);
    let (mut i, mut o) = (0, 0);
    for it in v["nftables"].as_array().into_iter().flatten() {
        let r = &it["rule"];
        for e in r["expr"].as_array().into_iter().flatten() {
            if let Some(n) = e["counter"]["packets"].as_u64() {
                if r["chain"] == "egress" {
                    o += n;
                } else {
                    i += n;
                }
            }
        }
    }
    (i, o)
}

struct State {
    node: Mutex<Node>,
    cfg: L2Config,
    mac: [u8; 6],
    ip: (Ipv4Addr, u8),
    mtu: u16,
    started: Instant,
    nft: String,
    stop: AtomicBool,
}

const BATCH: usize = 64;

/// The name of the file in the state directory that holds the group epoch of `interface`.
fn epoch_file(interface: &str) -> String {
    format!("l2sec-{interface}.epoch")
}

/// The group epoch of this start: `max(unix_us, last + 1)`, `last` being the epoch stored in `dir` for
/// `interface` (if any), written durably to `dir` before it is returned. Errors name `l2sec.state_dir`.
pub fn next_epoch(
    dir: &StateDir,
    interface: &str,
    unix_us: u64,
) -> std::result::Result<u64, ConfigError> {
    let name = epoch_file(interface);
    let last = dir
        .read_u64(&name)
        .or_else(|e| cerr("l2sec.state_dir", e))?;
    // (u64::MAX would take half a million years of microseconds: only a damaged or forged file holds it.)
    let Some(next) = last.map_or(Some(1), |l| l.checked_add(1)) else {
        let why =
            format!("{name} holds the last possible epoch: change the group secret, remove it");
        return cerr("l2sec.state_dir", why);
    };
    let epoch = next.max(unix_us);
    dir.write_u64(&name, epoch).or_else(|e| {
        cerr(
            "l2sec.state_dir",
            format!(
                "cannot store the group epoch in {}: {e}",
                dir.path().display()
            ),
        )
    })?;
    Ok(epoch)
}

/// `netveil check` of an l2sec configuration: the file, its key files, that the port exists, and, without
/// changing anything, that the state directory is not something else and that a stored epoch is readable.
pub fn check(cfg: &L2Config) -> Result<()> {
    port_link(&cfg.interface)?;
    let d = &cfg.state_dir;
    if d.exists() && !d.is_dir() {
        return Err(ConfigError {
            key: "l2sec.state_dir".into(),
            reason: format!("{} is not a directory", d.display()),
        }
        .into());
    }
    // Only root's and persistent (the note about fresh keys is for the IP engine's sequence marks).
    StateDir::check(&cfg.state_location(), "l2sec.state_dir")?;
    let f = d.join(epoch_file(&cfg.interface));
    if let Ok(t) = std::fs::read_to_string(&f) {
        if t.trim().parse::<u64>().is_err() {
            return Err(ConfigError {
                key: "l2sec.state_dir".into(),
                reason: format!("{} is damaged (not a number)", f.display()),
            }
            .into());
        }
    }
    Ok(())
}

/// The L2 engine's configuration, checked, with its node built and its epoch persisted, before any change to the
/// system.
pub struct Prepared {
    cfg: L2Config,
    node: Node,
    mac: [u8; 6],
    ip: (Ipv4Addr, u8),
    addrs: Vec<(Ipv4Addr, u8)>,
    mtu: u16,
    started: Instant,
}

impl Prepared {
    /// The control socket the configuration names.
    pub fn control_socket(&self) -> &Path {
        &self.cfg.control_socket
    }

    /// The control group's id, if the configuration names one.
    pub fn control_group(&self) -> Option<u32> {
        self.cfg.control_group
    }
}

/// Checks what `up` needs of the `[l2sec]` section (the port, its addresses, the state directory), persists the
/// next group epoch and builds the node, changing nothing on the system.
pub fn prepare(cfg: L2Config) -> Result<Prepared> {
    let (mac, port_mtu) = port_link(&cfg.interface)?;
    let addrs = port_addrs(&cfg.interface);
    let ip = match cfg.address.or_else(|| addrs.first().copied()) {
        Some(a) => a,
        None => {
            return Err(Error::Usage(format!(
                "l2sec.address: not given, and {} has no IPv4 address to take over",
                cfg.interface
            )))
        }
    };
    // The group epoch, persisted before anything is set up (a state directory that cannot be used is a
    // configuration error: nothing applied).
    let state = StateDir::open(&cfg.state_location(), "l2sec.state_dir")?;
    let since_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let epoch = next_epoch(&state, &cfg.interface, since_unix.as_micros() as u64)?;
    let started = Instant::now();
    let node = Node::new(
        cfg.node_config(mac, ip.0, ip.1, epoch),
        started,
        since_unix.as_secs(),
        Box::new(netveil_crypto::rand::OsRng),
    )
    .map_err(|e| Error::Usage(format!("l2sec: {e}")))?;
    let (head, tail) = node.overhead();
    let mtu = match cfg.mtu {
        Some(m) => m,
        None => (port_mtu as usize).saturating_sub(head + tail).max(576) as u16,
    };
    Ok(Prepared {
        cfg,
        node,
        mac,
        ip,
        addrs,
        mtu,
        started,
    })
}

/// The running L2 engine.
pub struct L2Engine {
    st: Arc<State>,
    tx: std::thread::JoinHandle<()>,
    rx: std::thread::JoinHandle<()>,
    timer: std::thread::JoinHandle<()>,
    tap: Arc<Tap>,
    /// Drop-storm warnings (looked at once a second).
    watch: crate::log::DropWatch,
    looked: Instant,
}

/// Sets up the port, the TAP device and the port's nftables table (each change recorded in `undo`) and starts the
/// data-plane threads. `control`: the control socket, for the startup line.
pub fn start(p: Prepared, undo: &mut Undo, control: &Path) -> Result<L2Engine> {
    let Prepared {
        cfg,
        node,
        mac,
        ip,
        addrs,
        mtu,
        started,
    } = p;

    let tap = Tap::open_offload(&cfg.tap, mtu, Some(mac), cfg.offload)
        .map_err(Error::io(format!("cannot create TAP device {}", cfg.tap)))?;
    // First of all, the port carries nothing but l2sec, in and out (nothing escapes while the rest is set up).
    let table = nft_table(&cfg.tap);
    let _ = run(&["nft", "delete", "table", "netdev", &table]);
    run_stdin(
        &["nft", "-f", "-"],
        &netdev_table_text(&table, &cfg.interface, cfg.ethertype),
    )?;
    undo.push(&["nft", "delete", "table", "netdev", &table]);
    // The port: no ARP, no IPv6, its IPv4 addresses moved to the TAP.
    run(&["ip", "link", "set", "dev", &cfg.interface, "arp", "off"])?;
    undo.push(&["ip", "link", "set", "dev", &cfg.interface, "arp", "on"]);
    let v6 = format!("net.ipv6.conf.{}.disable_ipv6", cfg.interface);
    if let Ok(o) = std::process::Command::new("sysctl")
        .args(["-n", &v6])
        .output()
    {
        let old = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if old == "0" {
            let _ = run(&["sysctl", "-qw", &format!("{v6}=1")]);
            undo.push(&["sysctl", "-qw", &format!("{v6}=0")]);
        }
    }
    for (a, l) in &addrs {
        let s = format!("{a}/{l}");
        run(&["ip", "addr", "del", &s, "dev", &cfg.interface])?;
        undo.push(&["ip", "addr", "add", &s, "brd", "+", "dev", &cfg.interface]);
    }
    let _ = run(&[
        "sysctl",
        "-qw",
        &format!("net.ipv6.conf.{}.disable_ipv6=1", cfg.tap),
    ]);
    run(&[
        "ip",
        "addr",
        "add",
        &format!("{}/{}", ip.0, ip.1),
        "brd",
        "+",
        "dev",
        &cfg.tap,
    ])?;
    run(&["ip", "link", "set", "dev", &cfg.tap, "up"])?;
    run(&["ip", "link", "set", "dev", &cfg.interface, "up"])?;

    let sock = PacketSocket::bind(&cfg.interface, cfg.ethertype).map_err(Error::io(format!(
        "cannot open AF_PACKET socket on {}",
        cfg.interface
    )))?;
    sock.set_buffer_sizes(8 << 20).ok();
    sock.set_recv_timeout(Duration::from_millis(200))
        .map_err(Error::io("socket timeout"))?;
    tap.set_recv_timeout(Duration::from_millis(200))
        .map_err(Error::io("TAP timeout"))?;

    let st = Arc::new(State {
        node: Mutex::new(node),
        mac,
        ip,
        mtu,
        started,
        nft: table,
        stop: AtomicBool::new(false),
        cfg,
    });
    let (tap, sock) = (Arc::new(tap), Arc::new(sock));
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .map_err(Error::io("thread"))
    };
    let tx = {
        let (st, tap, sock) = (st.clone(), tap.clone(), sock.clone());
        spawn("l2-tx", Box::new(move || tx_loop(&st, &tap, &sock)))?
    };
    let rx = {
        let (st, tap, sock) = (st.clone(), tap.clone(), sock.clone());
        spawn("l2-rx", Box::new(move || rx_loop(&st, &tap, &sock)))?
    };
    let timer = {
        let (st, sock) = (st.clone(), sock.clone());
        spawn("l2-timer", Box::new(move || timer_loop(&st, &sock)))?
    };
    tracing::info!(
        "{}: l2sec up (TAP {}, {} {}/{}, MTU {}, EtherType 0x{:04x}, group {} epoch {}, suites {}, {} peer keys); control socket {}",
        st.cfg.interface,
        st.cfg.tap,
        mac_str(&st.mac),
        st.ip.0,
        st.ip.1,
        st.mtu,
        st.cfg.ethertype,
        st.cfg.group_suite.name(),
        st.node.lock().map(|n| n.epoch()).unwrap_or(0),
        st.cfg.suites.iter().map(|s| s.name()).collect::<Vec<_>>().join(" "),
        st.cfg.peers.len(),
        control.display()
    );
    let now = Instant::now();
    Ok(L2Engine {
        st,
        tx,
        rx,
        timer,
        tap,
        watch: crate::log::DropWatch::new(now),
        looked: now,
    })
}

impl L2Engine {
    /// The engine's answers on the control socket.
    pub fn control(&self) -> Arc<dyn Control> {
        self.st.clone()
    }
}

impl Engine for L2Engine {
    fn tick(&mut self) -> bool {
        let now = Instant::now();
        if now.saturating_duration_since(self.looked) >= Duration::from_secs(1) {
            self.looked = now;
            let counts = self.st.node.lock().ok().map(|n| {
                let s = n.stats();
                let mut c: Vec<(String, u64)> = Vec::new();
                for (dir, d) in [("tx", &s.tx_drops), ("rx", &s.rx_drops)] {
                    c.extend(
                        d.snapshot()
                            .into_iter()
                            .map(|(k, n)| (format!("{dir}:{k}"), n)),
                    );
                }
                c.extend(s.sep_errors.iter().map(|(k, n)| (format!("sep:{k}"), *n)));
                c
            });
            if let Some(w) = counts.and_then(|c| self.watch.look(now, c)) {
                tracing::warn!("{}: {w}", self.st.cfg.interface);
            }
        }
        !self.tx.is_finished() && !self.rx.is_finished()
    }

    fn stop(self: Box<Self>, _undo: &mut Undo, _down: bool) {
        let L2Engine {
            st,
            tx,
            rx,
            timer,
            tap,
            ..
        } = *self;
        st.stop.store(true, Relaxed);
        let _ = tx.join();
        let _ = rx.join();
        let _ = timer.join();
        drop(tap);
        tracing::info!("{}: l2sec down", st.cfg.interface);
    }
}

/// Sends what the node has ready (SEP messages, frames that waited for a session), while the caller still holds
/// the node: a new session's first frames must not overtake the SEP message that completes it at the peer (the
/// initiator's FINISH), and another thread could seal with the new session as soon as the lock is released.
/// Rare, so the system call under the lock costs nothing in steady state.
fn send_ready(node: &mut Node, sock: &PacketSocket, scratch: &mut Vec<PacketBuf>) {
    while let Some(f) = node.poll_transmit() {
        scratch.push(PacketBuf::from_slice(&f, 0, 0));
    }
    if !scratch.is_empty() {
        let _ = sock.send_batch(scratch);
        scratch.clear();
    }
}

fn tx_loop(st: &State, tap: &Tap, sock: &PacketSocket) {
    let (head, tail) = st.node.lock().map(|n| n.overhead()).unwrap_or((16, 80));
    let headroom = head + 16;
    let cap = headroom + st.mtu as usize + 14 + tail + 16;
    // Room for a super-frame's segments (up to MAX_SEGMENTS) and then some.
    let batch = 2 * MAX_SEGMENTS;
    let mut bufs: Vec<PacketBuf> = (0..batch).map(|_| PacketBuf::new(cap, headroom)).collect();
    let mut scratch = vec![0u8; TAP_SCRATCH_LEN];
    let mut send: Vec<usize> = Vec::with_capacity(batch);
    let mut extra: Vec<PacketBuf> = Vec::new();
    let mut out: Vec<PacketBuf> = Vec::with_capacity(batch);
    while !st.stop.load(Relaxed) {
        let mut n = match tap.recv_batch(&mut scratch, &mut bufs, headroom, true) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => {
                if st.stop.load(Relaxed) {
                    return;
                }
                continue;
            }
        };
        // More of what is waiting, without waiting, while a whole super-frame still fits.
        while batch - n >= MAX_SEGMENTS {
            match tap.recv_batch(&mut scratch, &mut bufs[n..], headroom, false) {
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => continue,
            }
        }
        send.clear();
        {
            let Ok(mut node) = st.node.lock() else { return };
            let now = Instant::now();
            for (i, b) in bufs.iter_mut().enumerate().take(n) {
                if let Ok(Outbound::Send) = node.handle_outbound(b, now) {
                    send.push(i);
                }
            }
            send_ready(&mut node, sock, &mut extra);
        }
        if send.len() == n {
            let _ = sock.send_batch(&bufs[..n]);
        } else {
            // Rare (frames queued for SEP or dropped): send the sealed ones in order.
            out.clear();
            out.extend(
                send.iter()
                    .map(|&i| std::mem::replace(&mut bufs[i], PacketBuf::new(0, 0))),
            );
            let _ = sock.send_batch(&out);
            for (&i, b) in send.iter().zip(out.drain(..)) {
                bufs[i] = b;
            }
        }
    }
}

fn rx_loop(st: &State, tap: &Tap, sock: &PacketSocket) {
    // With offloads, segments are coalesced into the first one's buffer: room for 64 KiB.
    let cap = if tap.offload() {
        65536 + 256
    } else {
        st.mtu as usize + 14 + 320
    };
    let mut bufs: Vec<PacketBuf> = (0..BATCH).map(|_| PacketBuf::new(cap, 0)).collect();
    let mut extra: Vec<PacketBuf> = Vec::new();
    while !st.stop.load(Relaxed) {
        let n = match sock.recv_batch(&mut bufs, 0) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        // The frames for the host, moved to the front of `bufs` in order.
        let mut k = 0;
        {
            let Ok(mut node) = st.node.lock() else { return };
            let now = Instant::now();
            for i in 0..n {
                if let Ok(Inbound::Deliver) = node.handle_inbound(&mut bufs[i], now) {
                    bufs.swap(k, i);
                    k += 1;
                }
            }
            send_ready(&mut node, sock, &mut extra);
        }
        let _ = tap.send_batch(&mut bufs[..k]);
    }
}

fn timer_loop(st: &State, sock: &PacketSocket) {
    let mut extra = Vec::new();
    while !st.stop.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        {
            let Ok(mut node) = st.node.lock() else { return };
            if node.poll_timeout().is_some_and(|t| t <= now) {
                node.handle_timeout(now);
            }
            send_ready(&mut node, sock, &mut extra);
            while let Some(e) = node.poll_event() {
                log_event(&st.cfg.interface, &e);
            }
        }
    }
}

/// One log line per node event (no key material: the key id and suite only).
fn log_event(port: &str, e: &NodeEvent) {
    match *e {
        NodeEvent::SessionUp {
            peer,
            ip,
            key_id,
            suite,
            initiator,
            rekey,
        } => tracing::info!(
            "{port}: session {} with {} ({ip}): key id {key_id}, {}, {}",
            if rekey { "rekeyed" } else { "up" },
            mac_str(&peer),
            suite.name(),
            if initiator {
                "we initiated"
            } else {
                "the peer initiated"
            }
        ),
        NodeEvent::SessionExpired { peer, key_id } => tracing::info!(
            "{port}: session with {} (key id {key_id}) expired",
            mac_str(&peer)
        ),
        NodeEvent::PeerRestarted { peer } => tracing::info!(
            "{port}: {} restarted: its sessions are set up again",
            mac_str(&peer)
        ),
        NodeEvent::SepFailed { peer, reason } => {
            tracing::warn!("{port}: SEP with {} failed: {reason}", mac_str(&peer))
        }
    }
}

fn mac_str(m: &[u8; 6]) -> String {
    netveil_wire::ethernet::Address(*m).to_string()
}

fn peer_status(p: &PeerStatus) -> L2Peer {
    L2Peer {
        mac: mac_str(&p.mac),
        ip: p.ip.map(|i| i.to_string()),
        bound_ip: p.bound_ip.map(|i| i.to_string()),
        epoch: p.epoch,
        session: p.session.map(|s| L2Session {
            key_id: s.key_id,
            suite: s.suite.name().to_string(),
            age_seconds: s.age.as_secs(),
            expires_in_seconds: s.expires_in.as_secs(),
            initiator: s.initiator,
            tx_seq: s.tx_seq,
            rx_seq: s.rx_seq,
        }),
        previous_key_id: p.previous_key_id,
        handshaking: p.handshaking,
        queued: p.queued as u64,
        tx_frames: p.stats.tx_frames,
        tx_bytes: p.stats.tx_bytes,
        rx_frames: p.stats.rx_frames,
        rx_bytes: p.stats.rx_bytes,
        sessions: p.stats.sessions,
        failures: p.stats.failures,
        dropped: p.stats.dropped,
    }
}

/// The L2 engine's status (`None` if the node's lock is poisoned: a data-plane thread panicked).
fn status(st: &State) -> Option<L2Status> {
    let now = Instant::now();
    let node = st.node.lock().ok()?;
    let s = node.stats();
    let drops = |d: &netveil_sa::counters::DropCounters<netveil_l2sec::NodeDrop>| -> Drops {
        d.snapshot()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| (k.to_string(), n))
            .collect()
    };
    let (clear_in, clear_out) = nft_clear_drops(&st.nft);
    let c = &st.cfg;
    Some(L2Status {
        interface: c.interface.clone(),
        tap: c.tap.clone(),
        mac: mac_str(&st.mac),
        address: format!("{}/{}", st.ip.0, st.ip.1),
        mtu: st.mtu.into(),
        ethertype: format!("0x{:04x}", c.ethertype),
        group_suite: c.group_suite.name().to_string(),
        suites: c.suites.iter().map(|s| s.name().to_string()).collect(),
        dh_groups: c.groups.iter().map(|g| g.name().to_string()).collect(),
        epoch: node.epoch(),
        state_dir: c.state_dir.display().to_string(),
        signing: c.signing_key.is_some(),
        require_signatures: c.require_signatures,
        uptime_seconds: st.started.elapsed().as_secs(),
        group_senders: node.group_senders() as u64,
        peers: node.peers(now).iter().map(peer_status).collect(),
        counters: L2Counters {
            tx_frames: s.tx_frames,
            tx_bytes: s.tx_bytes,
            tx_group: s.tx_group,
            rx_frames: s.rx_frames,
            rx_bytes: s.rx_bytes,
            rx_group: s.rx_group,
            sep_messages: s.sep_messages,
            sessions_established: s.sessions_established,
            peer_restarts: s.peer_restarts,
            announces: s.announces,
            group_key_derivations: s.group_key_derivations,
            sep_rate_limited: s.sep_errors.get("sep-rate-limited").copied().unwrap_or(0),
            clear_dropped_in: clear_in,
            clear_dropped_out: clear_out,
        },
        tx_drops: drops(&s.tx_drops),
        rx_drops: drops(&s.rx_drops),
        sep_errors: s
            .sep_errors
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
    })
}

impl Control for State {
    fn answer(&self, _req: &netveil_control::Request) -> Option<Value> {
        None
    }

    fn status(&self, status: &mut netveil_control::Status) {
        status.l2sec = self::status(self);
    }
}

/// `netveil keygen --ed25519 --name NAME`: writes `NAME.l2key` (the 32-byte seed in hex, mode 0600) into `dir`
/// and returns its path and the public key in hex (for the other hosts' `[[l2sec.peer]]`).
pub fn keygen(name: &str, dir: &Path) -> Result<(PathBuf, String)> {
    use std::os::unix::fs::OpenOptionsExt;
    if name.is_empty() || name.contains('/') {
        return Err(Error::Usage(
            "--name: is not a usable file name (empty or with a '/'; value not shown)".into(),
        ));
    }
    let mut seed = Zeroizing::new([0u8; 32]);
    netveil_crypto::rand::fill_random(&mut seed[..]);
    let key = SigningKey::from_bytes(&seed);
    let path = dir.join(format!("{name}.l2key"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(Error::io(format!("cannot create {}", path.display())))?;
    let text = Zeroizing::new(format!("{}\n", hex::encode(&seed[..])));
    f.write_all(text.as_bytes())
        .map_err(Error::io(format!("cannot write {}", path.display())))?;
    Ok((path, hex::encode(key.verifying_key().as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> String {
        format!(
            "[l2sec]\ninterface = \"eth0\"\naddress = \"192.0.2.10/24\"\ngroup_secret = \"{}\"\n",
            "11".repeat(32)
        )
    }

    fn peer(seed: u8, mac: &str, ip: Option<&str>) -> String {
        let pk = hex::encode(
            SigningKey::from_bytes(&[seed; 32])
                .verifying_key()
                .as_bytes(),
        );
        let ip = ip.map(|i| format!("ip = \"{i}\"\n")).unwrap_or_default();
        format!("\n[[l2sec.peer]]\nmac = \"{mac}\"\npublic_key = \"{pk}\"\n{ip}")
    }

    fn parse(text: &str) -> std::result::Result<L2Config, ConfigError> {
        L2Config::parse(text, Path::new("/nonexistent"))
    }

    /// `l2sec.control_group` is resolved to its group id; an unknown group is an error naming the key.
    #[test]
    fn the_control_group_is_resolved() {
        let with =
            |g: &str| base().replace("[l2sec]\n", &format!("[l2sec]\ncontrol_group = \"{g}\"\n"));
        assert_eq!(parse(&with("nogroup")).unwrap().control_group, Some(65534));
        assert_eq!(parse(&base()).unwrap().control_group, None);
        let e = parse(&with("netveil-no-such-group")).err().unwrap();
        assert_eq!(e.key, "l2sec.control_group");
    }

    #[test]
    fn signatures_are_required_by_default_when_peers_are_listed() {
        let none = parse(&base()).unwrap();
        assert!(!none.require_signatures);
        let with = base() + &peer(1, "02:00:5e:00:53:0b", None);
        assert!(parse(&with).unwrap().require_signatures);
        // An explicit false still works.
        let off = with.replace("[l2sec]\n", "[l2sec]\nrequire_signatures = false\n");
        assert!(!parse(&off).unwrap().require_signatures);
        let e = parse(&base().replace("[l2sec]\n", "[l2sec]\nrequire_signatures = true\n"))
            .err()
            .unwrap();
        assert_eq!(e.key, "l2sec.require_signatures");
    }

    #[test]
    fn peer_addresses_are_bound_once() {
        let ok = base()
            + &peer(1, "02:00:5e:00:53:0b", Some("192.0.2.11"))
            + &peer(2, "02:00:5e:00:53:0c", None);
        let c = parse(&ok).unwrap();
        assert_eq!(
            c.peer_ips.get(&[2, 0, 0x5e, 0, 0x53, 0x0b]),
            Some(&Ipv4Addr::new(192, 0, 2, 11))
        );
        assert_eq!(c.peer_ips.len(), 1);
        let n = c.node_config(
            [2, 0, 0x5e, 0, 0x53, 0x0a],
            Ipv4Addr::new(192, 0, 2, 10),
            24,
            7,
        );
        assert_eq!(n.peer_ips, c.peer_ips);
        assert_eq!(n.epoch, 7);
        for (text, key) in [
            (
                base()
                    + &peer(1, "02:00:5e:00:53:0b", Some("192.0.2.11"))
                    + &peer(2, "02:00:5e:00:53:0c", Some("192.0.2.11")),
                "l2sec.peer[1].ip",
            ),
            (
                base() + &peer(1, "02:00:5e:00:53:0b", Some("192.0.2.10")),
                "l2sec.peer[0].ip",
            ),
            (
                base() + &peer(1, "02:00:5e:00:53:0b", Some("192.0.2")),
                "l2sec.peer[0].ip",
            ),
            (
                base() + &peer(1, "02:00:5e:00:53:0b", Some("255.255.255.255")),
                "l2sec.peer[0].ip",
            ),
        ] {
            assert_eq!(parse(&text).err().unwrap().key, key, "{text}");
        }
    }

    /// The port and the TAP device are interface names by the one rule of names (they reach the netdev table,
    /// commands and log lines); the table's text keeps its structure whatever string it is given.
    #[test]
    fn interface_names_follow_the_rule_and_cannot_change_the_table() {
        for (key, line) in [("l2sec.interface", "interface = "), ("l2sec.tap", "tap = ")] {
            for evil in [
                "eth0\" priority -500; policy accept; }",
                "e\nx",
                "a b",
                "",
                "e*",
                "eeeeeeeeeeeeeeee",
            ] {
                let text = if key == "l2sec.tap" {
                    base().replace(
                        "[l2sec]\n",
                        &format!("[l2sec]\n{line}{}\n", toml::Value::String(evil.into())),
                    )
                } else {
                    base().replace(
                        "interface = \"eth0\"",
                        &format!("{line}{}", toml::Value::String(evil.into())),
                    )
                };
                let e = parse(&text).err().unwrap();
                assert_eq!(e.key, key, "{text}");
                assert!(evil.len() < 2 || !e.to_string().contains(evil), "{e}");
            }
        }
        let plain = netdev_table_text("netveil_l2_l2s0", "eth0", 0x88b5);
        let evil = netdev_table_text(
            "netveil_l2_l2s0",
            "e\" priority -500; policy accept; }\n  chain x { type filter hook ingress device \"e",
            0x88b5,
        );
        let unquoted =
            |t: &str| -> String { t.split('"').step_by(2).collect::<Vec<_>>().join("\"\"") };
        assert_eq!(unquoted(&evil), unquoted(&plain), "{evil}");
        assert_eq!(nft_table("l2s0"), "netveil_l2_l2s0");
        assert_eq!(nft_table("a b;}"), "netveil_l2_a_b__");
    }

    #[test]
    fn state_dir_default_and_relative() {
        assert_eq!(
            parse(&base()).unwrap().state_dir,
            Path::new(crate::state::DEFAULT_STATE_DIR)
        );
        let c = parse(&base().replace("[l2sec]\n", "[l2sec]\nstate_dir = \"st\"\n")).unwrap();
        assert_eq!(c.state_dir, Path::new("/nonexistent/st"));
        assert!(!c.state_location().allow_volatile);
        let c =
            parse(&base().replace("[l2sec]\n", "[l2sec]\nallow_volatile_state = true\n")).unwrap();
        assert!(c.state_location().allow_volatile);
        assert!(!c.state_location().fresh_keys);
        let e = parse(&base().replace("[l2sec]\n", "[l2sec]\nstate_dir = \"\"\n"))
            .err()
            .unwrap();
        assert_eq!(e.key, "l2sec.state_dir");
    }

    #[test]
    fn the_epoch_strictly_increases_and_persists_before_use() {
        let dir = crate::state::test_dir("l2-epoch");
        let st =
            StateDir::open(&crate::state::StateLocation::new(&dir), "l2sec.state_dir").unwrap();
        let now = 1_700_000_000_000_000u64;
        let e1 = next_epoch(&st, "eth0", now).unwrap();
        assert_eq!(e1, now);
        assert_eq!(st.read_u64("l2sec-eth0.epoch"), Ok(Some(e1)));
        // The same instant, and a clock gone back by an hour: still strictly increasing.
        let e2 = next_epoch(&st, "eth0", now).unwrap();
        assert_eq!(e2, e1 + 1);
        let e3 = next_epoch(&st, "eth0", now - 3_600_000_000).unwrap();
        assert_eq!(e3, e2 + 1);
        // Time moves on: the clock again.
        assert_eq!(next_epoch(&st, "eth0", now + 5).unwrap(), now + 5);
        // Another port has its own epoch; a clock at 0 still gives a usable (non-zero) epoch.
        assert_eq!(next_epoch(&st, "eth1", 0).unwrap(), 1);
        // A damaged file is an error naming the key, never a silent reset.
        std::fs::write(dir.join("l2sec-eth0.epoch"), "junk").unwrap();
        assert_eq!(
            next_epoch(&st, "eth0", now).err().unwrap().key,
            "l2sec.state_dir"
        );
        std::fs::write(dir.join("l2sec-eth0.epoch"), format!("{}\n", u64::MAX)).unwrap();
        assert!(next_epoch(&st, "eth0", now).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
