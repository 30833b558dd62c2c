//! Typed connections ([`SwanConn`], [`SwanChild`]) rendered to `swanctl.conf`: every value is checked first, and one
//! that could change the file's structure (newline, brace, quote, `#`, ...) is refused rather than escaped.

use super::check::{check_id, check_name, check_proposals, check_ts};
use super::pki::Credential;
use crate::{Error, Result};
use std::fmt;
use std::net::IpAddr;
use zeroize::Zeroizing;

/// A pre-shared key. Debug prints no bytes; the memory is zeroed on drop.
#[derive(Clone)]
pub struct SwanPsk(Zeroizing<String>);

impl SwanPsk {
    /// Refused: empty, or with a character that would end or escape the quoted `secret = "..."` value.
    pub fn new(secret: &str) -> Result<SwanPsk> {
        if secret.is_empty()
            || secret
                .chars()
                .any(|c| c == '"' || c == '\\' || !(c == ' ' || c.is_ascii_graphic()))
        {
            return Err(Error::Usage(
                "a strongSwan PSK must be non-empty printable ASCII without '\"' or '\\'".into(),
            ));
        }
        Ok(SwanPsk(Zeroizing::new(secret.to_string())))
    }
}

impl fmt::Debug for SwanPsk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SwanPsk(..{} bytes)", self.0.len())
    }
}

/// How one side authenticates ([`SwanConn::auth`]): the same method for the local and the remote round.
#[derive(Debug, Clone)]
pub enum SwanAuth {
    Psk(SwanPsk),
    /// Certificates: this side's certificate and private key, and the CA that issued the peer's certificate (all PEM
    /// files, e.g. from [`Pki`](super::pki::Pki)); they are copied into the charon's swanctl directory on
    /// `Charon::load`.
    Pubkey(Credential),
}

/// `mode` of a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwanMode {
    Tunnel,
    Transport,
}

/// `start_action` of a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAction {
    None,
    Start,
    Trap,
}

/// `unique` of a connection: what charon does with other IKE SAs of the same identities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unique {
    /// strongSwan's default: replaced when the peer sends INITIAL_CONTACT.
    No,
    /// Never replaced (many parallel IKE SAs between the same two ids, as in `Charon::handshakes_per_s`).
    Never,
    Keep,
    Replace,
}

/// A CHILD_SA configuration.
#[derive(Debug, Clone)]
pub struct SwanChild {
    pub name: String,
    pub local_ts: Vec<String>,
    pub remote_ts: Vec<String>,
    /// strongSwan's syntax, comma-separated proposals, e.g. `aes128gcm16-x25519, aes128-sha1`.
    pub esp_proposals: String,
    pub mode: SwanMode,
    pub start_action: StartAction,
    /// Seconds (`None`: strongSwan's default).
    pub rekey_time: Option<u32>,
    pub life_time: Option<u32>,
}

impl SwanChild {
    /// A tunnel-mode child between two single addresses, started by hand.
    pub fn host_to_host(name: &str, local: IpAddr, remote: IpAddr, esp_proposals: &str) -> Self {
        let host = |a: IpAddr| match a {
            IpAddr::V4(_) => format!("{a}/32"),
            IpAddr::V6(_) => format!("{a}/128"),
        };
        SwanChild {
            name: name.into(),
            local_ts: vec![host(local)],
            remote_ts: vec![host(remote)],
            esp_proposals: esp_proposals.into(),
            mode: SwanMode::Tunnel,
            start_action: StartAction::None,
            rekey_time: None,
            life_time: None,
        }
    }
}

/// An IKE connection (`connections.NAME` of swanctl.conf) with its children and its credentials.
#[derive(Debug, Clone)]
pub struct SwanConn {
    pub name: String,
    pub local_addrs: Vec<IpAddr>,
    pub remote_addrs: Vec<IpAddr>,
    pub local_id: String,
    pub remote_id: String,
    pub auth: SwanAuth,
    /// strongSwan's syntax, e.g. `aes128-sha256-x25519` or `aes256gcm16-prfsha384-ecp384, default`.
    pub proposals: String,
    /// ESP-in-UDP even without NAT (kernel-libipsec only does ESP-in-UDP, so this stays on for it).
    pub encap: bool,
    /// Dead-peer detection interval in seconds (`None`: off).
    pub dpd_delay: Option<u32>,
    /// IKE SA rekey time in seconds (`None`: strongSwan's default).
    pub rekey_time: Option<u32>,
    pub unique: Unique,
    pub children: Vec<SwanChild>,
}

impl SwanConn {
    /// A PSK connection between two single addresses with one host-to-host child; `encap = yes`.
    pub fn psk(
        name: &str,
        local: (IpAddr, &str),
        remote: (IpAddr, &str),
        psk: SwanPsk,
        proposals: &str,
    ) -> SwanConn {
        SwanConn {
            name: name.into(),
            local_addrs: vec![local.0],
            remote_addrs: vec![remote.0],
            local_id: local.1.into(),
            remote_id: remote.1.into(),
            auth: SwanAuth::Psk(psk),
            proposals: proposals.into(),
            encap: true,
            dpd_delay: None,
            rekey_time: None,
            unique: Unique::No,
            children: Vec::new(),
        }
    }
}

fn join_addrs(a: &[IpAddr]) -> String {
    a.iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl SwanConn {
    /// Checks every name and value (see the module docs).
    pub fn validate(&self) -> Result<()> {
        check_name("connection name", &self.name)?;
        if self.local_addrs.is_empty() || self.remote_addrs.is_empty() {
            return Err(Error::Usage(format!(
                "connection {}: local and remote addresses are required",
                self.name
            )));
        }
        check_id("local id", &self.local_id)?;
        check_id("remote id", &self.remote_id)?;
        check_proposals("IKE proposals", &self.proposals)?;
        if self.children.is_empty() {
            return Err(Error::Usage(format!(
                "connection {}: at least one child",
                self.name
            )));
        }
        for c in &self.children {
            check_name("child name", &c.name)?;
            check_proposals("ESP proposals", &c.esp_proposals)?;
            if c.local_ts.is_empty() || c.remote_ts.is_empty() {
                return Err(Error::Usage(format!(
                    "child {}: local and remote traffic selectors are required",
                    c.name
                )));
            }
            for t in c.local_ts.iter().chain(&c.remote_ts) {
                check_ts("traffic selector", t)?;
            }
        }
        if let SwanAuth::Pubkey(cred) = &self.auth {
            for p in [&cred.cert, &cred.key, &cred.ca] {
                if !p.is_file() {
                    return Err(Error::Usage(format!("{} is missing", p.display())));
                }
            }
        }
        Ok(())
    }

    /// The `connections.NAME { ... }` block (validated first).
    pub fn render(&self) -> Result<String> {
        self.validate()?;
        let mut w = ConfWriter::default();
        w.open(&self.name);
        w.kv("version", "2");
        w.kv("local_addrs", &join_addrs(&self.local_addrs));
        w.kv("remote_addrs", &join_addrs(&self.remote_addrs));
        w.kv("proposals", &self.proposals);
        w.kv("encap", if self.encap { "yes" } else { "no" });
        w.kv(
            "unique",
            match self.unique {
                Unique::No => "no",
                Unique::Never => "never",
                Unique::Keep => "keep",
                Unique::Replace => "replace",
            },
        );
        if let Some(d) = self.dpd_delay {
            w.kv("dpd_delay", &format!("{d}s"));
        }
        if let Some(t) = self.rekey_time {
            w.kv("rekey_time", &format!("{t}s"));
        }
        let (auth, certs) = match &self.auth {
            SwanAuth::Psk(_) => ("psk", None),
            SwanAuth::Pubkey(c) => ("pubkey", Some(c.cert_file_name())),
        };
        w.open("local");
        w.kv("auth", auth);
        w.kv("id", &self.local_id);
        if let Some(c) = &certs {
            w.kv("certs", c);
        }
        w.close();
        w.open("remote");
        w.kv("auth", auth);
        w.kv("id", &self.remote_id);
        w.close();
        w.open("children");
        for c in &self.children {
            w.open(&c.name);
            w.kv("local_ts", &c.local_ts.join(","));
            w.kv("remote_ts", &c.remote_ts.join(","));
            w.kv("esp_proposals", &c.esp_proposals);
            w.kv(
                "mode",
                match c.mode {
                    SwanMode::Tunnel => "tunnel",
                    SwanMode::Transport => "transport",
                },
            );
            w.kv(
                "start_action",
                match c.start_action {
                    StartAction::None => "none",
                    StartAction::Start => "start",
                    StartAction::Trap => "trap",
                },
            );
            if let Some(t) = c.rekey_time {
                w.kv("rekey_time", &format!("{t}s"));
            }
            if let Some(t) = c.life_time {
                w.kv("life_time", &format!("{t}s"));
            }
            w.close();
        }
        w.close();
        w.close();
        Ok(w.text)
    }
}

/// Writes strongSwan settings: `NAME {`, `key = value` and `}` lines, two spaces per level (values are checked
/// before they get here).
#[derive(Default)]
struct ConfWriter {
    text: String,
    depth: usize,
}

impl ConfWriter {
    fn line(&mut self, l: &str) {
        self.text.push_str(&"  ".repeat(self.depth));
        self.text.push_str(l);
        self.text.push('\n');
    }
    fn open(&mut self, name: &str) {
        self.line(&format!("{name} {{"));
        self.depth += 1;
    }
    fn kv(&mut self, k: &str, v: &str) {
        self.line(&format!("{k} = {v}"));
    }
    fn close(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        self.line("}");
    }
}

/// The whole swanctl.conf for `conns` (PSK secrets in `secrets { }`).
pub fn render_swanctl_conf(conns: &[SwanConn]) -> Result<Zeroizing<String>> {
    let mut s = Zeroizing::new(String::from("connections {\n"));
    for c in conns {
        for line in c.render()?.lines() {
            s.push_str("  ");
            s.push_str(line);
            s.push('\n');
        }
    }
    s.push_str("}\nsecrets {\n");
    for (i, c) in conns.iter().enumerate() {
        if let SwanAuth::Psk(psk) = &c.auth {
            s.push_str(&format!(
                "  ike-{i} {{\n    id-1 = {}\n    id-2 = {}\n    secret = \"",
                c.local_id, c.remote_id
            ));
            s.push_str(&psk.0);
            s.push_str("\"\n  }\n");
        }
    }
    s.push_str("}\n");
    Ok(s)
}
