//! SAs as swanctl lists them: `swanctl --list-sas --pretty` parsed into [`IkeSa`]s and their [`ChildSa`]s.

use super::vici::Tree;
use crate::{Error, Result};
use std::net::IpAddr;

/// IKE SA states (charon's names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IkeState {
    Created,
    Connecting,
    Established,
    Passive,
    Rekeying,
    Rekeyed,
    Deleting,
    Destroying,
    Other(String),
}

impl IkeState {
    fn parse(s: &str) -> IkeState {
        match s {
            "CREATED" => IkeState::Created,
            "CONNECTING" => IkeState::Connecting,
            "ESTABLISHED" => IkeState::Established,
            "PASSIVE" => IkeState::Passive,
            "REKEYING" => IkeState::Rekeying,
            "REKEYED" => IkeState::Rekeyed,
            "DELETING" => IkeState::Deleting,
            "DESTROYING" => IkeState::Destroying,
            o => IkeState::Other(o.into()),
        }
    }
}

/// CHILD_SA states (charon's names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildState {
    Created,
    Routed,
    Installing,
    Installed,
    Updating,
    Rekeying,
    Rekeyed,
    Retrying,
    Deleting,
    Deleted,
    Destroying,
    Other(String),
}

impl ChildState {
    fn parse(s: &str) -> ChildState {
        match s {
            "CREATED" => ChildState::Created,
            "ROUTED" => ChildState::Routed,
            "INSTALLING" => ChildState::Installing,
            "INSTALLED" => ChildState::Installed,
            "UPDATING" => ChildState::Updating,
            "REKEYING" => ChildState::Rekeying,
            "REKEYED" => ChildState::Rekeyed,
            "RETRYING" => ChildState::Retrying,
            "DELETING" => ChildState::Deleting,
            "DELETED" => ChildState::Deleted,
            "DESTROYING" => ChildState::Destroying,
            o => ChildState::Other(o.into()),
        }
    }
}

/// Negotiated algorithms as charon names them (`AES_GCM_16`, `HMAC_SHA2_256_128`, `CURVE_25519`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Algorithms {
    pub encr: Option<String>,
    pub encr_keysize: Option<u32>,
    pub integ: Option<String>,
    pub prf: Option<String>,
    pub dh_group: Option<String>,
}

impl Algorithms {
    fn from_tree(t: &Tree) -> Algorithms {
        Algorithms {
            encr: t.get("encr-alg").map(String::from),
            encr_keysize: t.get("encr-keysize").and_then(|v| v.parse().ok()),
            integ: t.get("integ-alg").map(String::from),
            prf: t.get("prf-alg").map(String::from),
            dh_group: t.get("dh-group").map(String::from),
        }
    }
}

/// A CHILD_SA of `swanctl --list-sas`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSa {
    pub name: String,
    pub uniqueid: u32,
    pub state: ChildState,
    /// `TUNNEL` or `TRANSPORT`.
    pub mode: String,
    /// `ESP` or `AH`.
    pub protocol: String,
    pub encap: bool,
    pub spi_in: u32,
    pub spi_out: u32,
    pub algorithms: Algorithms,
    pub bytes_in: u64,
    pub packets_in: u64,
    pub bytes_out: u64,
    pub packets_out: u64,
    pub local_ts: Vec<String>,
    pub remote_ts: Vec<String>,
}

/// An IKE SA of `swanctl --list-sas` with its children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IkeSa {
    /// The connection's name.
    pub name: String,
    pub uniqueid: u32,
    pub state: IkeState,
    pub local_host: Option<IpAddr>,
    pub local_port: Option<u16>,
    pub local_id: String,
    pub remote_host: Option<IpAddr>,
    pub remote_port: Option<u16>,
    pub remote_id: String,
    pub initiator: bool,
    pub initiator_spi: u64,
    pub responder_spi: u64,
    pub algorithms: Algorithms,
    pub children: Vec<ChildSa>,
}

impl IkeSa {
    /// The first child named `name`.
    pub fn child(&self, name: &str) -> Option<&ChildSa> {
        self.children.iter().find(|c| c.name == name)
    }
}

fn hex_u64(what: &str, v: Option<&str>) -> Result<u64> {
    v.and_then(|v| u64::from_str_radix(v, 16).ok())
        .ok_or_else(|| Error::output("list-sas", format!("bad {what} {v:?}")))
}

fn num<T: std::str::FromStr + Default>(v: Option<&str>) -> T {
    v.and_then(|v| v.parse().ok()).unwrap_or_default()
}

/// Parses `swanctl --list-sas --pretty` (the `list-sa event { NAME { ... } }` blocks; see the module docs).
pub fn parse_list_sas(text: &str) -> Result<Vec<IkeSa>> {
    let root = parse_pretty(text)?;
    let mut sas = Vec::new();
    for (event, t) in &root.sections {
        if event != "list-sa event" {
            continue;
        }
        for (name, ike) in &t.sections {
            let mut children = Vec::new();
            if let Some(cs) = ike.section("child-sas") {
                for (_, c) in &cs.sections {
                    children.push(ChildSa {
                        name: c.get("name").unwrap_or_default().to_string(),
                        uniqueid: num(c.get("uniqueid")),
                        state: ChildState::parse(c.get("state").unwrap_or_default()),
                        mode: c.get("mode").unwrap_or_default().to_string(),
                        protocol: c.get("protocol").unwrap_or_default().to_string(),
                        encap: c.get("encap") == Some("yes"),
                        spi_in: hex_u64("spi-in", c.get("spi-in"))? as u32,
                        spi_out: hex_u64("spi-out", c.get("spi-out"))? as u32,
                        algorithms: Algorithms::from_tree(c),
                        bytes_in: num(c.get("bytes-in")),
                        packets_in: num(c.get("packets-in")),
                        bytes_out: num(c.get("bytes-out")),
                        packets_out: num(c.get("packets-out")),
                        local_ts: c.list("local-ts"),
                        remote_ts: c.list("remote-ts"),
                    });
                }
            }
            sas.push(IkeSa {
                name: name.clone(),
                uniqueid: num(ike.get("uniqueid")),
                state: IkeState::parse(ike.get("state").unwrap_or_default()),
                local_host: ike.get("local-host").and_then(|v| v.parse().ok()),
                local_port: ike.get("local-port").and_then(|v| v.parse().ok()),
                local_id: ike.get("local-id").unwrap_or_default().to_string(),
                remote_host: ike.get("remote-host").and_then(|v| v.parse().ok()),
                remote_port: ike.get("remote-port").and_then(|v| v.parse().ok()),
                remote_id: ike.get("remote-id").unwrap_or_default().to_string(),
                initiator: ike.get("initiator") == Some("yes"),
                initiator_spi: hex_u64("initiator-spi", ike.get("initiator-spi"))?,
                // A half-open SA has no responder SPI yet.
                responder_spi: ike
                    .get("responder-spi")
                    .and_then(|v| u64::from_str_radix(v, 16).ok())
                    .unwrap_or(0),
                algorithms: Algorithms::from_tree(ike),
                children,
            });
        }
    }
    Ok(sas)
}

/// Parses swanctl's `--pretty` dump: `NAME {`, `}`, `KEY = VALUE`, `KEY = [`, items, `]`, one per line.
pub fn parse_pretty(text: &str) -> Result<Tree> {
    let mut stack: Vec<(String, Tree)> = vec![(String::new(), Tree::default())];
    let mut list: Option<(String, Vec<String>)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let bad = || Error::output("swanctl --pretty", format!("line {}: {raw:?}", i + 1));
        if let Some((_, items)) = list.as_mut() {
            if line == "]" {
                let l = list.take().ok_or_else(bad)?;
                stack.last_mut().ok_or_else(bad)?.1.lists.push(l);
            } else {
                items.push(line.to_string());
            }
        } else if line == "}" {
            if stack.len() < 2 {
                return Err(bad());
            }
            let done = stack.pop().ok_or_else(bad)?;
            stack.last_mut().ok_or_else(bad)?.1.sections.push(done);
        } else if let Some(name) = line.strip_suffix(" {") {
            stack.push((name.to_string(), Tree::default()));
        } else if let Some((k, v)) = line.split_once(" = ") {
            if v == "[" {
                list = Some((k.to_string(), Vec::new()));
            } else {
                stack
                    .last_mut()
                    .ok_or_else(bad)?
                    .1
                    .values
                    .push((k.to_string(), v.to_string()));
            }
        } else if let Some(k) = line.strip_suffix(" =") {
            // An empty value.
            stack
                .last_mut()
                .ok_or_else(bad)?
                .1
                .values
                .push((k.to_string(), String::new()));
        } else {
            return Err(bad());
        }
    }
    if stack.len() != 1 || list.is_some() {
        return Err(Error::output(
            "swanctl --pretty",
            "unterminated section or list",
        ));
    }
    Ok(stack.pop().map(|s| s.1).unwrap_or_default())
}
