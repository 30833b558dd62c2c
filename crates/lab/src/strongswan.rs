//! strongSwan as a live IKEv2 peer in a lab: Debian's charon (5.9.x) with the kernel-libipsec plugin (user-space
//! ESP over a TUN device, ESP-in-UDP only), one charon per network namespace.
//!
//! Each [`Charon`] runs as `ip netns exec NS unshare -m --propagation private sh -c 'mount -t tmpfs tmpfs /run &&
//! exec charon'`: its own network namespace, its own `/run` (charon's pid file path is fixed, so two charons on one
//! machine need two), its own `strongswan.conf` (`STRONGSWAN_CONF`), swanctl directory (`SWANCTL_DIR`) and vici
//! socket, all in a directory of the [`Lab`]. The process is charon itself, so stopping it (on drop) also ends its
//! mount namespace and the tmpfs on `/run`.
//!
//! Connections are typed ([`SwanConn`], [`SwanChild`]) and rendered to `swanctl.conf`; every value is checked first,
//! and one that could change the file's structure (newline, brace, quote, `#`, ...) is refused rather than escaped.
//! Loading and listing go through `swanctl` (the tool a strongSwan user has). [`Charon::list_sas`] parses
//! `swanctl --list-sas --pretty`: one `key = value` per line, where `--raw` puts a whole SA on one line separated by
//! spaces, which is ambiguous for values with spaces such as DN identities.
//!
//! Initiating and terminating go to charon's vici socket directly through a small synchronous client ([`Vici`]):
//! starting `swanctl` costs about 14 ms here, seven times the handshake being measured (see
//! [`Charon::handshake_ms`]), and vici's answer carries charon's own error message. The client speaks the
//! documented vici wire format (strongSwan's `src/libcharon/plugins/vici/README.md`); the one Rust implementation
//! (`rsvici`) needs an async runtime, which the synchronous lab does not have.

use crate::lab::{run_ok, Lab};
use crate::{Error, Result};
use std::fmt;
use std::io::{Read, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

fn other(msg: impl Into<String>) -> Error {
    Error::Other(msg.into())
}

/// charon's path (Debian's package puts it outside PATH); `$NETVEIL_CHARON` overrides it.
pub fn charon_binary() -> PathBuf {
    std::env::var_os("NETVEIL_CHARON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/ipsec/charon"))
}

/// Why strongSwan cannot run here (charon, swanctl or pki missing), or None when it can.
pub fn missing() -> Option<String> {
    let charon = charon_binary();
    if !charon.is_file() {
        return Some(format!(
            "{} is missing (Debian: strongswan-charon libcharon-extra-plugins; .ci/setup installs it)",
            charon.display()
        ));
    }
    for (tool, pkg) in [("swanctl", "strongswan-swanctl"), ("pki", "strongswan-pki")] {
        if !crate::lab::have_tool(tool) {
            return Some(format!(
                "'{tool}' is missing (Debian: {pkg}; .ci/setup installs it)"
            ));
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------------------------
// Typed configuration, rendered to swanctl.conf
// ---------------------------------------------------------------------------------------------------------------

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
    /// Certificates: this side's certificate and private key, and the CA that issued the peer's certificate (all
    /// PEM files, e.g. from [`Pki`]); they are copied into the charon's swanctl directory on [`Charon::load`].
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
    /// Never replaced (many parallel IKE SAs between the same two ids, as in [`Charon::handshakes_per_s`]).
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

/// A name (connection, child): letters, digits, `-`, `_`, at most 64.
fn check_name(what: &str, v: &str) -> Result<()> {
    if v.is_empty()
        || v.len() > 64
        || !v
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(Error::Usage(format!(
            "{what} {v:?}: a strongSwan name is 1-64 letters, digits, '-' or '_'"
        )));
    }
    Ok(())
}

/// A value of `key = value`: printable ASCII (spaces inside allowed), none of the characters that strongSwan's
/// settings parser gives a meaning (`{ } " # = \` and line ends), no leading or trailing space, at most 512.
fn check_value(what: &str, v: &str) -> Result<()> {
    let bad = |c: char| {
        matches!(c, '{' | '}' | '"' | '#' | '=' | '\\' | '[' | ']')
            || !(c == ' ' || c.is_ascii_graphic())
    };
    if v.is_empty() || v.len() > 512 || v.trim() != v || v.chars().any(bad) {
        return Err(Error::Usage(format!(
            "{what} {v:?} is refused: it could break swanctl.conf (empty, too long, surrounding spaces, \
             a line end or one of {{ }} \" # = \\ [ ])"
        )));
    }
    Ok(())
}

/// An identity: a value as above, except that `=` is allowed (DNs such as `C=CH, O=lab, CN=a`).
fn check_id(what: &str, v: &str) -> Result<()> {
    check_value(what, &v.replace('=', ":"))
}

/// A proposal list: comma-separated tokens of letters, digits, `-` and `_`.
fn check_proposals(what: &str, v: &str) -> Result<()> {
    let ok = !v.trim().is_empty()
        && v.trim() == v
        && v.len() <= 512
        && v.split(',').all(|p| {
            let p = p.trim();
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if !ok {
        return Err(Error::Usage(format!(
            "{what} {v:?}: expected strongSwan proposals such as 'aes128gcm16-x25519, aes128-sha256'"
        )));
    }
    Ok(())
}

/// A traffic selector: an address or prefix with an optional `[proto/port]` (checked as an address here).
fn check_ts(what: &str, v: &str) -> Result<()> {
    let (net, len) = v.split_once('/').unwrap_or((v, ""));
    let ok = net.parse::<IpAddr>().is_ok()
        && (len.is_empty() || len.parse::<u8>().is_ok_and(|l| l <= 128));
    if !ok {
        return Err(Error::Usage(format!(
            "{what} {v:?}: expected an address or prefix such as 198.51.100.1/32"
        )));
    }
    Ok(())
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

// ---------------------------------------------------------------------------------------------------------------
// Certificates with strongSwan's pki
// ---------------------------------------------------------------------------------------------------------------

/// Key types for [`Pki`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    Rsa(u32),
    EcdsaP256,
}

impl KeyType {
    fn args(self) -> (&'static str, String) {
        match self {
            KeyType::Rsa(bits) => ("rsa", bits.to_string()),
            KeyType::EcdsaP256 => ("ecdsa", "256".into()),
        }
    }
}

/// One end entity's PEM files: certificate, private key, and the CA certificate to trust.
#[derive(Debug, Clone)]
pub struct Credential {
    pub key_type: KeyType,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl Credential {
    fn cert_file_name(&self) -> String {
        self.cert
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default()
    }
}

/// A CA made with strongSwan's `pki` in a directory, issuing end-entity certificates (key type of the CA's).
pub struct Pki {
    dir: PathBuf,
    key_type: KeyType,
    ca_key: PathBuf,
    ca_cert: PathBuf,
}

/// Runs `pki ARGS` (5.9 writes to standard output only) and writes what it prints (PEM) to `out` (mode 0600).
fn pki(args: &[&str], out: &Path) -> Result<()> {
    let pem = run_ok(Command::new("pki").args(args).stdin(Stdio::null()))?;
    if !pem.contains("-----BEGIN ") {
        return Err(other(format!("pki {}: no PEM output", args.join(" "))));
    }
    // Private keys among them: readable by root only.
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(out)
        .and_then(|mut f| f.write_all(pem.as_bytes()))
        .map_err(Error::io(format!("write {}", out.display())))
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str().ok_or_else(|| other("non-UTF-8 lab path"))
}

impl Pki {
    /// A self-signed CA (`CN=netveil lab CA`, 30 days) in `dir`.
    pub fn new(dir: &Path, key_type: KeyType) -> Result<Pki> {
        std::fs::create_dir_all(dir).map_err(Error::io(format!("mkdir {}", dir.display())))?;
        let (t, size) = key_type.args();
        let ca_key = dir.join("ca.key.pem");
        let ca_cert = dir.join("ca.pem");
        pki(
            &["--gen", "--type", t, "--size", &size, "--outform", "pem"],
            &ca_key,
        )?;
        pki(
            &[
                "--self",
                "--ca",
                "--lifetime",
                "30",
                "--in",
                path_str(&ca_key)?,
                "--type",
                t,
                "--dn",
                "CN=netveil lab CA",
                "--outform",
                "pem",
            ],
            &ca_cert,
        )?;
        Ok(Pki {
            dir: dir.to_path_buf(),
            key_type,
            ca_key,
            ca_cert,
        })
    }

    /// A key and a certificate for `name` (`CN=NAME`, subjectAltName `NAME`, so `NAME` works as an FQDN id).
    pub fn issue(&self, name: &str) -> Result<Credential> {
        check_name("certificate name", &name.replace('.', "-"))?;
        let (t, size) = self.key_type.args();
        let key = self.dir.join(format!("{name}.key.pem"));
        let public = self.dir.join(format!("{name}.pub.pem"));
        let cert = self.dir.join(format!("{name}.pem"));
        pki(
            &["--gen", "--type", t, "--size", &size, "--outform", "pem"],
            &key,
        )?;
        pki(
            &[
                "--pub",
                "--in",
                path_str(&key)?,
                "--type",
                t,
                "--outform",
                "pem",
            ],
            &public,
        )?;
        pki(
            &[
                "--issue",
                "--lifetime",
                "30",
                "--in",
                path_str(&public)?,
                "--type",
                "pub",
                "--cacert",
                path_str(&self.ca_cert)?,
                "--cakey",
                path_str(&self.ca_key)?,
                "--dn",
                &format!("CN={name}"),
                "--san",
                name,
                "--outform",
                "pem",
            ],
            &cert,
        )?;
        Ok(Credential {
            key_type: self.key_type,
            cert,
            key,
            ca: self.ca_cert.clone(),
        })
    }
}

// ---------------------------------------------------------------------------------------------------------------
// A small vici client
// ---------------------------------------------------------------------------------------------------------------

/// A vici message (or `swanctl --pretty` output) as a tree: key/values, lists and sections, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    pub values: Vec<(String, String)>,
    pub lists: Vec<(String, Vec<String>)>,
    pub sections: Vec<(String, Tree)>,
}

impl Tree {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
    pub fn list(&self, key: &str) -> Vec<String> {
        self.lists
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }
    pub fn section(&self, key: &str) -> Option<&Tree> {
        self.sections.iter().find(|(k, _)| k == key).map(|(_, t)| t)
    }
}

const VICI_CMD_REQUEST: u8 = 0;
const VICI_CMD_RESPONSE: u8 = 1;
const VICI_CMD_UNKNOWN: u8 = 2;
const VICI_EVENT_REGISTER: u8 = 3;
const VICI_EVENT_CONFIRM: u8 = 5;
const VICI_EVENT: u8 = 7;
const VICI_SECTION_START: u8 = 1;
const VICI_SECTION_END: u8 = 2;
const VICI_KEY_VALUE: u8 = 3;
const VICI_LIST_START: u8 = 4;
const VICI_LIST_ITEM: u8 = 5;
const VICI_LIST_END: u8 = 6;
/// charon's own limit for one vici message.
const VICI_MAX: usize = 512 * 1024;

/// Encodes a request with flat key/values (all that initiate/terminate need).
pub fn vici_encode_request(cmd: &str, kvs: &[(&str, &str)]) -> Result<Vec<u8>> {
    let mut body = vec![VICI_CMD_REQUEST];
    let name = |b: &mut Vec<u8>, n: &str| -> Result<()> {
        let len = u8::try_from(n.len()).map_err(|_| other("vici name longer than 255"))?;
        b.push(len);
        b.extend_from_slice(n.as_bytes());
        Ok(())
    };
    name(&mut body, cmd)?;
    for (k, v) in kvs {
        body.push(VICI_KEY_VALUE);
        name(&mut body, k)?;
        let len = u16::try_from(v.len()).map_err(|_| other("vici value longer than 65535"))?;
        body.extend_from_slice(&len.to_be_bytes());
        body.extend_from_slice(v.as_bytes());
    }
    let mut out = u32::try_from(body.len())
        .map_err(|_| other("vici message too long"))?
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(&body);
    Ok(out)
}

/// Decodes a vici message body (after the packet type and name). Never panics; malformed input is an error.
pub fn vici_decode(mut b: &[u8]) -> Result<Tree> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
        if b.len() < n {
            return Err(other("truncated vici message"));
        }
        let (h, t) = b.split_at(n);
        *b = t;
        Ok(h)
    }
    fn name(b: &mut &[u8]) -> Result<String> {
        let n = take(b, 1)?[0] as usize;
        Ok(String::from_utf8_lossy(take(b, n)?).into_owned())
    }
    fn value(b: &mut &[u8]) -> Result<String> {
        let l = take(b, 2)?;
        let n = u16::from_be_bytes([l[0], l[1]]) as usize;
        Ok(String::from_utf8_lossy(take(b, n)?).into_owned())
    }
    // A stack of open sections; nesting is bounded by the input length (each level costs 2 bytes at least).
    let mut stack: Vec<(String, Tree)> = vec![(String::new(), Tree::default())];
    while !b.is_empty() {
        let t = take(&mut b, 1)?[0];
        match t {
            VICI_SECTION_START => {
                let n = name(&mut b)?;
                stack.push((n, Tree::default()));
            }
            VICI_SECTION_END => {
                if stack.len() < 2 {
                    return Err(other("vici: section end without start"));
                }
                let done = stack.pop().ok_or_else(|| other("vici: empty stack"))?;
                if let Some(top) = stack.last_mut() {
                    top.1.sections.push(done);
                }
            }
            VICI_KEY_VALUE => {
                let k = name(&mut b)?;
                let v = value(&mut b)?;
                if let Some(top) = stack.last_mut() {
                    top.1.values.push((k, v));
                }
            }
            VICI_LIST_START => {
                let k = name(&mut b)?;
                let mut items = Vec::new();
                loop {
                    match take(&mut b, 1)?[0] {
                        VICI_LIST_ITEM => items.push(value(&mut b)?),
                        VICI_LIST_END => break,
                        x => return Err(other(format!("vici: element {x} inside a list"))),
                    }
                }
                if let Some(top) = stack.last_mut() {
                    top.1.lists.push((k, items));
                }
            }
            x => return Err(other(format!("vici: unknown element type {x}"))),
        }
    }
    if stack.len() != 1 {
        return Err(other("vici: unterminated section"));
    }
    Ok(stack.pop().map(|s| s.1).unwrap_or_default())
}

/// A connection to charon's vici socket.
pub struct Vici {
    s: UnixStream,
}

impl Vici {
    pub fn connect(socket: &Path) -> Result<Vici> {
        let s = UnixStream::connect(socket)
            .map_err(Error::io(format!("connect {}", socket.display())))?;
        Ok(Vici { s })
    }

    /// Sends a command and waits (up to `timeout`) for its response.
    pub fn request(&mut self, cmd: &str, kvs: &[(&str, &str)], timeout: Duration) -> Result<Tree> {
        let msg = vici_encode_request(cmd, kvs)?;
        self.s.set_read_timeout(Some(timeout)).ok();
        self.s
            .write_all(&msg)
            .map_err(Error::io(format!("vici {cmd}")))?;
        loop {
            let buf = self
                .packet()
                .map_err(|e| other(format!("vici {cmd}: {e}")))?;
            match buf[0] {
                VICI_CMD_RESPONSE => return vici_decode(&buf[1..]),
                VICI_CMD_UNKNOWN => return Err(other(format!("vici: unknown command {cmd}"))),
                VICI_EVENT => continue,
                t => return Err(other(format!("vici {cmd}: unexpected packet type {t}"))),
            }
        }
    }

    /// Registers for an event (`child-updown`, `ike-updown`, ...); [`Vici::event`] then reads them.
    pub fn register(&mut self, event: &str) -> Result<()> {
        let mut msg = vici_encode_request(event, &[])?;
        msg[4] = VICI_EVENT_REGISTER;
        self.s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        self.s
            .write_all(&msg)
            .map_err(Error::io(format!("vici register {event}")))?;
        match self.packet()?.first() {
            Some(&VICI_EVENT_CONFIRM) => Ok(()),
            t => Err(other(format!("vici register {event}: answer type {t:?}"))),
        }
    }

    /// The next event (name, message), waiting up to `timeout`.
    pub fn event(&mut self, timeout: Duration) -> Result<(String, Tree)> {
        self.s.set_read_timeout(Some(timeout)).ok();
        loop {
            let p = self.packet()?;
            if p.first() != Some(&VICI_EVENT) {
                continue;
            }
            let n = *p
                .get(1)
                .ok_or_else(|| other("vici: event without a name"))? as usize;
            let name = p
                .get(2..2 + n)
                .ok_or_else(|| other("vici: truncated event name"))?;
            let name = String::from_utf8_lossy(name).into_owned();
            return Ok((name, vici_decode(&p[2 + n..])?));
        }
    }

    /// One packet (type byte first), at most [`VICI_MAX`] bytes.
    fn packet(&mut self) -> Result<Vec<u8>> {
        let mut len = [0u8; 4];
        self.s
            .read_exact(&mut len)
            .map_err(Error::io("vici: reading a packet"))?;
        let len = u32::from_be_bytes(len) as usize;
        if len == 0 || len > VICI_MAX {
            return Err(other(format!("vici: packet of {len} bytes")));
        }
        let mut buf = vec![0u8; len];
        self.s
            .read_exact(&mut buf)
            .map_err(Error::io("vici: reading a packet"))?;
        Ok(buf)
    }

    /// A command whose answer carries `success = yes` (else its `errmsg` is the error).
    pub fn command(&mut self, cmd: &str, kvs: &[(&str, &str)], timeout: Duration) -> Result<Tree> {
        let t = self.request(cmd, kvs, timeout)?;
        if t.get("success") != Some("yes") {
            return Err(other(format!(
                "vici {cmd} failed: {}",
                t.get("errmsg").unwrap_or("(no errmsg)")
            )));
        }
        Ok(t)
    }
}

// ---------------------------------------------------------------------------------------------------------------
// SAs as swanctl lists them
// ---------------------------------------------------------------------------------------------------------------

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
        .ok_or_else(|| other(format!("list-sas: bad {what} {v:?}")))
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
        let bad = || other(format!("swanctl --pretty line {}: {raw:?}", i + 1));
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
        return Err(other("swanctl --pretty: unterminated section or list"));
    }
    Ok(stack.pop().map(|s| s.1).unwrap_or_default())
}

// ---------------------------------------------------------------------------------------------------------------
// charon in a namespace
// ---------------------------------------------------------------------------------------------------------------

/// Options of one charon.
#[derive(Debug, Clone)]
pub struct CharonOptions {
    /// The file log's default level (-1 silent .. 4 everything, including key material: tests use 1-2; level 4
    /// prints secrets, see the recorded session's log).
    pub log_level: i8,
    /// Extra levels per subsystem, e.g. `("ike", 2)`, `("cfg", 2)`.
    pub log_subsystems: Vec<(&'static str, i8)>,
    /// `charon.reuse_ikesa`: `false` makes every initiate a new IKE SA (for parallel handshakes).
    pub reuse_ikesa: bool,
    /// `charon.dos_protection` (strongSwan's default: on). On, a responder asks for COOKIEs from 3 half-open SAs
    /// of one peer address and drops its IKE_SA_INITs from 5 (`cookie_threshold_ip`, `block_threshold`): off for
    /// many parallel handshakes from one initiator.
    pub dos_protection: bool,
    /// `charon.retransmit_tries` (strongSwan's default: 5, about 165 s in all): lower makes failures quick.
    pub retransmit_tries: Option<u32>,
}

impl Default for CharonOptions {
    fn default() -> Self {
        CharonOptions {
            log_level: 1,
            log_subsystems: vec![("ike", 2), ("cfg", 2)],
            reuse_ikesa: true,
            dos_protection: true,
            retransmit_tries: Some(2),
        }
    }
}

/// The plugins charon loads: kernel-libipsec (ESP in user space over TUN) with kernel-netlink (routes, addresses),
/// the sockets, vici, and the crypto and credential plugins the lab's proposals and certificates need.
pub const CHARON_PLUGINS: &str =
    "random nonce openssl pem pkcs1 pkcs8 x509 pubkey revocation constraints \
     curve25519 gmp aes sha1 sha2 hmac gcm kdf kernel-libipsec kernel-netlink socket-default vici";

/// A running charon in a namespace (see the module docs); stopped on drop.
pub struct Charon {
    child: Option<Child>,
    pub ns: String,
    pub name: String,
    /// Its directory: strongswan.conf, swanctl/, charon.vici, charon.log, charon.out.
    pub dir: PathBuf,
    pub conf: PathBuf,
    pub swanctl_dir: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Charon {
    /// Writes the configuration and starts charon in `ns`; returns once its vici socket answers.
    pub fn start(lab: &Lab, ns: &str, name: &str, opts: &CharonOptions) -> Result<Charon> {
        check_name("charon name", name)?;
        let dir = lab.dir().join(format!("swan-{name}"));
        let swanctl_dir = dir.join("swanctl");
        for sub in [
            "", "x509", "x509ca", "x509ocsp", "x509aa", "x509ac", "x509crl", "pubkey", "private",
            "rsa", "ecdsa", "bliss", "pkcs8", "pkcs12",
        ] {
            use std::os::unix::fs::DirBuilderExt;
            let d = swanctl_dir.join(sub);
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&d)
                .map_err(Error::io(format!("mkdir {}", d.display())))?;
        }
        let socket = dir.join("charon.vici");
        let log = dir.join("charon.log");
        let conf = dir.join("strongswan.conf");
        let mut levels = format!("      default = {}\n", opts.log_level);
        for (s, l) in &opts.log_subsystems {
            check_name("log subsystem", s)?;
            levels.push_str(&format!("      {s} = {l}\n"));
        }
        let mut extra = String::new();
        if !opts.dos_protection {
            extra.push_str("  dos_protection = no\n");
        }
        if let Some(r) = opts.retransmit_tries {
            extra.push_str(&format!("  retransmit_tries = {r}\n"));
        }
        let sock = path_str(&socket)?;
        let text = format!(
            "# written by netveil's lab: one `key = value` per line\n\
             charon {{\n  load_modular = no\n  load = {CHARON_PLUGINS}\n  port = 500\n  port_nat_t = 4500\n\
             \x20 install_virtual_ip = no\n  reuse_ikesa = {reuse}\n{extra}\
             \x20 plugins {{\n    vici {{\n      socket = unix://{sock}\n    }}\n  }}\n\
             \x20 filelog {{\n    lab {{\n      path = {log}\n      time_format = %H:%M:%S\n      time_add_ms = yes\n\
             \x20     ike_name = yes\n      append = no\n      flush_line = yes\n{levels}    }}\n  }}\n}}\n\
             swanctl {{\n  socket = unix://{sock}\n  load = pem pkcs1 pkcs8 x509 pubkey openssl\n}}\n",
            reuse = if opts.reuse_ikesa { "yes" } else { "no" },
            log = path_str(&log)?,
        );
        std::fs::write(&conf, text).map_err(Error::io(format!("write {}", conf.display())))?;
        let out = std::fs::File::create(dir.join("charon.out")).map_err(Error::io("charon.out"))?;
        let script = format!(
            "mount -t tmpfs -o mode=0755 tmpfs /run && exec {}",
            path_str(&charon_binary())?
        );
        let child = lab
            .command(
                ns,
                &[
                    "unshare",
                    "-m",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    &script,
                ],
            )
            .env("STRONGSWAN_CONF", &conf)
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(Error::io("charon.out"))?)
            .stderr(out)
            .spawn()
            .map_err(Error::io("cannot start charon"))?;
        let mut c = Charon {
            child: Some(child),
            ns: ns.into(),
            name: name.into(),
            dir,
            conf,
            swanctl_dir,
            socket,
            log,
        };
        let t0 = Instant::now();
        loop {
            if let Some(ch) = c.child.as_mut() {
                if let Ok(Some(st)) = ch.try_wait() {
                    c.child = None;
                    return Err(other(format!(
                        "charon {name} in {ns} exited with {st}: {}{}",
                        c.out(),
                        c.log_tail(20)
                    )));
                }
            }
            let ready = Vici::connect(&c.socket)
                .and_then(|mut v| v.request("version", &[], Duration::from_secs(2)))
                .is_ok();
            if ready {
                return Ok(c);
            }
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(other(format!(
                    "charon {name} in {ns}: no vici socket after 10 s: {}{}",
                    c.out(),
                    c.log_tail(20)
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// charon's stdout/stderr so far.
    pub fn out(&self) -> String {
        std::fs::read_to_string(self.dir.join("charon.out")).unwrap_or_default()
    }

    /// The whole file log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the file log, for failure messages.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(n);
        format!(
            "\n--- charon {} log (last {} lines) ---\n{}",
            self.name,
            lines.len() - from,
            lines[from..].join("\n")
        )
    }

    /// Runs `swanctl ARGS` against this charon (in its namespace); fails with swanctl's output and the log's tail.
    pub fn swanctl(&self, args: &[&str]) -> Result<String> {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, "swanctl"])
            .args(args)
            .env("STRONGSWAN_CONF", &self.conf)
            .env("SWANCTL_DIR", &self.swanctl_dir)
            .stdin(Stdio::null());
        run_ok(&mut c).map_err(|e| other(format!("{e}{}", self.log_tail(30))))
    }

    /// Writes swanctl.conf for `conns` (copying certificates and keys into the swanctl directory) and loads
    /// everything (`swanctl --load-all`).
    pub fn load(&self, conns: &[SwanConn]) -> Result<()> {
        let text = render_swanctl_conf(conns)?;
        for c in conns {
            if let SwanAuth::Pubkey(cred) = &c.auth {
                let keydir = match cred.key_type {
                    KeyType::Rsa(_) => "rsa",
                    KeyType::EcdsaP256 => "ecdsa",
                };
                for (src, sub) in [
                    (&cred.cert, "x509"),
                    (&cred.ca, "x509ca"),
                    (&cred.key, keydir),
                ] {
                    let name = src
                        .file_name()
                        .ok_or_else(|| other("credential without a name"))?;
                    let dst = self.swanctl_dir.join(sub).join(name);
                    std::fs::copy(src, &dst)
                        .map_err(Error::io(format!("copy {}", src.display())))?;
                }
            }
        }
        let path = self.swanctl_dir.join("swanctl.conf");
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)
                .map_err(Error::io(format!("write {}", path.display())))?;
            f.write_all(text.as_bytes())
                .map_err(Error::io(format!("write {}", path.display())))?;
        }
        self.swanctl(&["--load-all", "--noprompt"]).map(|_| ())
    }

    fn vici(&self) -> Result<Vici> {
        Vici::connect(&self.socket)
    }

    /// Initiates `child` (and its IKE SA if there is none) and waits up to `timeout` until the CHILD_SA is
    /// installed; the error carries charon's reason (`errmsg`) and the log's tail.
    pub fn initiate(&self, child: &str, timeout: Duration) -> Result<()> {
        let ms = timeout.as_millis().to_string();
        self.vici()?
            .command(
                "initiate",
                &[("child", child), ("timeout", &ms), ("init-limits", "no")],
                timeout + Duration::from_secs(2),
            )
            .map(|_| ())
            .map_err(|e| {
                other(format!(
                    "initiate {child} on {}: {e}{}",
                    self.name,
                    self.log_tail(30)
                ))
            })
    }

    /// Terminates the IKE SAs of connection `ike` (DELETE to the peer), waiting up to `timeout` for the exchange.
    pub fn terminate(&self, ike: &str, timeout: Duration) -> Result<()> {
        let ms = timeout.as_millis().to_string();
        self.vici()?
            .command(
                "terminate",
                &[("ike", ike), ("timeout", &ms)],
                timeout + Duration::from_secs(2),
            )
            .map(|_| ())
            .map_err(|e| {
                other(format!(
                    "terminate {ike} on {}: {e}{}",
                    self.name,
                    self.log_tail(30)
                ))
            })
    }

    /// The IKE SAs and their children as `swanctl --list-sas --pretty` shows them.
    pub fn list_sas(&self) -> Result<Vec<IkeSa>> {
        parse_list_sas(&self.swanctl(&["--list-sas", "--pretty"])?)
    }

    /// Waits until an IKE SA is ESTABLISHED with child `child` INSTALLED; returns both. The error after
    /// `timeout` shows what was listed last and the log's tail.
    pub fn wait_child_installed(&self, child: &str, timeout: Duration) -> Result<(IkeSa, ChildSa)> {
        let t0 = Instant::now();
        loop {
            let sas = self.list_sas()?;
            for ike in &sas {
                if ike.state != IkeState::Established {
                    continue;
                }
                if let Some(c) = ike.child(child) {
                    if c.state == ChildState::Installed {
                        return Ok((ike.clone(), c.clone()));
                    }
                }
            }
            if t0.elapsed() > timeout {
                return Err(other(format!(
                    "charon {}: no ESTABLISHED IKE SA with child {child} INSTALLED after {timeout:?}; \
                     listed: {sas:?}{}",
                    self.name,
                    self.log_tail(40)
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `n` sequential setups of an IKE SA and its first child `child` of connection `ike`, each terminated
    /// before the next. Each sample (ms) is the time from writing vici's `initiate` request to reading its
    /// answer: charon answers once the CHILD_SA is INSTALLED on the initiator (after the IKE_AUTH response is
    /// processed and the SAs and policies are in libipsec), so one sample is IKE_SA_INIT + IKE_AUTH on the wire
    /// plus both daemons' processing, without swanctl's start-up. The terminate (DELETE) is not timed.
    pub fn handshake_ms(&self, ike: &str, child: &str, n: usize) -> Result<Vec<f64>> {
        let mut v = self.vici()?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let t0 = Instant::now();
            v.command(
                "initiate",
                &[
                    ("child", child),
                    ("timeout", "10000"),
                    ("init-limits", "no"),
                ],
                Duration::from_secs(12),
            )
            .map_err(|e| other(format!("{e}{}", self.log_tail(30))))?;
            out.push(t0.elapsed().as_secs_f64() * 1e3);
            v.command(
                "terminate",
                &[("ike", ike), ("timeout", "10000")],
                Duration::from_secs(12),
            )
            .map_err(|e| other(format!("{e}{}", self.log_tail(30))))?;
        }
        Ok(out)
    }

    /// Handshakes per second with `window` initiations in flight: `total` setups of an IKE SA + child `child`,
    /// each a new IKE SA. The initiations are asynchronous (vici `initiate` with `timeout = -1`: a blocking one
    /// holds one of charon's 16 threads until its child is up, and 16 of them stall charon); a second vici
    /// connection counts `child-updown` events with `up = yes`, and each one lets the next initiation go. Timed
    /// from the first request to the last child installed on the initiator. Needs [`CharonOptions::reuse_ikesa`]
    /// `false` (else charon adds children to the first IKE SA) and [`Unique::Never`] on both sides; the responder
    /// needs [`CharonOptions::dos_protection`] off (else it drops IKE_SA_INITs beyond 5 half-open from one address).
    /// The SAs stay up: terminate the connection afterwards.
    pub fn handshakes_per_s(&self, child: &str, total: usize, window: usize) -> Result<f64> {
        let mut events = self.vici()?;
        events.register("child-updown")?;
        let mut req = self.vici()?;
        let deadline = Duration::from_secs(10 + total as u64 / 10);
        let mut sent = 0;
        let mut up = 0;
        let t0 = Instant::now();
        let mut fire = |sent: &mut usize| -> Result<()> {
            req.command(
                "initiate",
                &[("child", child), ("timeout", "-1"), ("init-limits", "no")],
                Duration::from_secs(5),
            )?;
            *sent += 1;
            Ok(())
        };
        while sent < window.clamp(1, total.max(1)) {
            fire(&mut sent)?;
        }
        while up < total {
            let left = deadline.checked_sub(t0.elapsed()).unwrap_or_default();
            let ev = events
                .event(left.max(Duration::from_millis(1)))
                .map_err(|e| {
                    other(format!(
                        "{e}: {up} of {total} children up{}",
                        self.log_tail(30)
                    ))
                })?;
            if ev.0 == "child-updown" && ev.1.get("up") == Some("yes") {
                up += 1;
                if sent < total {
                    fire(&mut sent)?;
                }
            }
        }
        Ok(total as f64 / t0.elapsed().as_secs_f64())
    }

    /// The process id (charon itself: `ip netns exec`, `unshare` and `sh -c exec` all exec in place).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Whether charon still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Stops charon (SIGTERM, SIGKILL after 5 s); its mount namespace and `/run` go with it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Ok(pid) = i32::try_from(c.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Charon {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Two charons
// ---------------------------------------------------------------------------------------------------------------

/// Addresses of a [`SwanPair`]: outer on a veth pair, inner (the traffic selectors) on `lo`.
pub const PAIR_OUTER: [&str; 2] = ["192.0.2.1", "192.0.2.2"];
pub const PAIR_INNER: [&str; 2] = ["198.51.100.1", "198.51.100.2"];
/// The ids of a [`SwanPair`] (FQDNs; with certificates also the certificates' subjectAltNames).
pub const PAIR_IDS: [&str; 2] = ["a.lab.test", "b.lab.test"];

/// Two namespaces (`a` initiator, `b` responder) joined by a veth pair, a charon in each. The inner addresses
/// ([`PAIR_INNER`], /32 on `lo`) are what the children's traffic selectors cover: charon (libipsec) routes
/// them over its `ipsec0` TUN device once a child is installed, so a ping between them crosses the tunnel.
pub struct SwanPair {
    pub ns: [String; 2],
    pub charons: [Charon; 2],
}

impl SwanPair {
    /// Builds the topology and starts both charons (nothing loaded yet).
    pub fn up(lab: &mut Lab, opts: &CharonOptions) -> Result<SwanPair> {
        let a = lab.add_ns("a")?;
        let b = lab.add_ns("b")?;
        for ns in [&a, &b] {
            // IPv4 only: no IPv6 chatter for libipsec to log about.
            lab.exec_ok(ns, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])?;
            lab.exec_ok(
                ns,
                &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
            )?;
        }
        lab.veth(&a, "veth-a", &b, "veth-b")?;
        let ns = [a, b];
        for i in 0..2 {
            lab.addr(
                &ns[i],
                ["veth-a", "veth-b"][i],
                &format!("{}/24", PAIR_OUTER[i]),
            )?;
            lab.addr(&ns[i], "lo", &format!("{}/32", PAIR_INNER[i]))?;
        }
        let ca = Charon::start(lab, &ns[0], "a", opts)?;
        let cb = Charon::start(lab, &ns[1], "b", opts)?;
        Ok(SwanPair {
            ns,
            charons: [ca, cb],
        })
    }

    pub fn outer(side: usize) -> IpAddr {
        PAIR_OUTER[side]
            .parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    pub fn inner(side: usize) -> IpAddr {
        PAIR_INNER[side]
            .parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    /// Side `side`'s connection `name` with one host-to-host child `child` between the inner addresses; `auth`
    /// per side (a PSK for both, or each side's own credential).
    pub fn conn(
        side: usize,
        name: &str,
        auth: SwanAuth,
        proposals: &str,
        child: &str,
        esp_proposals: &str,
    ) -> SwanConn {
        let o = 1 - side;
        let mut c = SwanConn {
            name: name.into(),
            local_addrs: vec![Self::outer(side)],
            remote_addrs: vec![Self::outer(o)],
            local_id: PAIR_IDS[side].into(),
            remote_id: PAIR_IDS[o].into(),
            auth,
            proposals: proposals.into(),
            encap: true,
            dpd_delay: None,
            rekey_time: None,
            unique: Unique::No,
            children: Vec::new(),
        };
        c.children.push(SwanChild::host_to_host(
            child,
            Self::inner(side),
            Self::inner(o),
            esp_proposals,
        ));
        c
    }

    /// Loads `[a's, b's]` connections.
    pub fn load(&self, conns: [&[SwanConn]; 2]) -> Result<()> {
        self.charons[0].load(conns[0])?;
        self.charons[1].load(conns[1])
    }

    /// Both charons' log tails, for failure messages.
    pub fn logs(&self, n: usize) -> String {
        format!(
            "{}{}",
            self.charons[0].log_tail(n),
            self.charons[1].log_tail(n)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> SwanConn {
        SwanPair::conn(
            0,
            "site",
            SwanAuth::Psk(SwanPsk::new("lab psk 0123456789").unwrap()),
            "aes128-sha256-x25519",
            "gcm",
            "aes128gcm16-x25519",
        )
    }

    #[test]
    fn renders_one_key_value_per_line() {
        let text = render_swanctl_conf(&[conn()]).unwrap();
        for want in [
            "    local_addrs = 192.0.2.1\n",
            "    remote_addrs = 192.0.2.2\n",
            "    proposals = aes128-sha256-x25519\n",
            "    encap = yes\n",
            "      auth = psk\n      id = a.lab.test\n",
            "      auth = psk\n      id = b.lab.test\n",
            "        local_ts = 198.51.100.1/32\n",
            "        remote_ts = 198.51.100.2/32\n",
            "        esp_proposals = aes128gcm16-x25519\n",
            "        mode = tunnel\n",
            "    id-1 = a.lab.test\n    id-2 = b.lab.test\n    secret = \"lab psk 0123456789\"\n",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{}", text.as_str());
        }
        // Balanced braces, and the structure as charon reads it: parse it back with the pretty parser's rules.
        assert_eq!(text.matches('{').count(), text.matches('}').count());
        for line in text.lines() {
            let l = line.trim();
            assert!(
                l.ends_with('{') || l == "}" || l.split_once(" = ").is_some(),
                "{line:?}"
            );
        }
    }

    #[test]
    fn values_that_could_break_the_file_are_refused() {
        let evil = [
            "x\n  }\n}\nconnections {",
            "x}",
            "x{",
            "a\"b",
            "a#b",
            "a\rb",
            "a\\b",
            " lead",
            "trail ",
            "",
            "a\0b",
        ];
        for v in evil {
            let mut c = conn();
            c.local_id = v.into();
            assert!(c.render().is_err(), "local id {v:?} accepted");
            let mut c = conn();
            c.proposals = v.into();
            assert!(c.render().is_err(), "proposals {v:?} accepted");
            let mut c = conn();
            c.children[0].esp_proposals = v.into();
            assert!(c.render().is_err(), "esp proposals {v:?} accepted");
            let mut c = conn();
            c.children[0].local_ts = vec![v.into()];
            assert!(c.render().is_err(), "ts {v:?} accepted");
            let mut c = conn();
            c.name = v.into();
            assert!(c.render().is_err(), "name {v:?} accepted");
            let mut c = conn();
            c.children[0].name = v.into();
            assert!(c.render().is_err(), "child name {v:?} accepted");
            assert!(SwanPsk::new(v).is_err() || !v.contains(['"', '\\', '\n', '\r', '\0']));
        }
        for v in ["a\"b", "a\\b", "a\nb", "", "a\0b"] {
            assert!(SwanPsk::new(v).is_err(), "psk {v:?} accepted");
        }
        // What must stay possible: DN ids with '=' and ', ', several proposals, prefixes.
        let mut c = conn();
        c.local_id = "C=CH, O=lab, CN=a".into();
        c.proposals = "aes256gcm16-prfsha384-ecp384, aes128-sha256-modp2048".into();
        c.children[0].remote_ts = vec!["198.51.100.0/24".into(), "2001:db8::/64".into()];
        let text = c.render().unwrap();
        assert!(text.contains("    id = C=CH, O=lab, CN=a\n"), "{text}");
        assert!(
            text.contains("remote_ts = 198.51.100.0/24,2001:db8::/64\n"),
            "{text}"
        );
    }

    #[test]
    fn psk_debug_prints_no_bytes() {
        let p = SwanPsk::new("very-secret-psk").unwrap();
        let d = format!("{p:?} {:?}", SwanAuth::Psk(p.clone()));
        assert!(!d.contains("very") && !d.contains("secret-psk"), "{d}");
    }

    /// `swanctl --list-sas --pretty` of charon 5.9.8 (two lab charons, PSK + X25519, AES-GCM child).
    const PRETTY: &str = "list-sa event {
  site {
    uniqueid = 17
    version = 2
    state = ESTABLISHED
    local-host = 192.0.2.1
    local-port = 4500
    local-id = site1
    remote-host = 192.0.2.2
    remote-port = 4500
    remote-id = C=CH, O=lab, CN=b
    initiator = yes
    initiator-spi = 21fe016b58dfd1f1
    responder-spi = 68161dd1103e0848
    nat-remote = yes
    nat-any = yes
    encr-alg = AES_CBC
    encr-keysize = 128
    integ-alg = HMAC_SHA2_256_128
    prf-alg = PRF_HMAC_SHA2_256
    dh-group = CURVE_25519
    established = 26
    rekey-time = 13329
    child-sas {
      c-17 {
        name = c
        uniqueid = 17
        reqid = 1
        state = INSTALLED
        mode = TUNNEL
        protocol = ESP
        encap = yes
        spi-in = 1d4e5d05
        spi-out = 7967d41f
        encr-alg = AES_GCM_16
        encr-keysize = 128
        bytes-in = 168
        packets-in = 2
        bytes-out = 0
        packets-out = 0
        rekey-time = 3249
        life-time = 3934
        install-time = 26
        local-ts = [
          10.1.0.1/32
        ]
        remote-ts = [
          10.2.0.1/32
          10.3.0.0/24
        ]
      }
    }
  }
}
list-sas reply {
}
";

    #[test]
    fn parses_list_sas_pretty() {
        let sas = parse_list_sas(PRETTY).unwrap();
        assert_eq!(sas.len(), 1);
        let s = &sas[0];
        assert_eq!(s.name, "site");
        assert_eq!(s.uniqueid, 17);
        assert_eq!(s.state, IkeState::Established);
        assert_eq!(s.local_host, Some("192.0.2.1".parse().unwrap()));
        assert_eq!(s.remote_port, Some(4500));
        assert_eq!(s.remote_id, "C=CH, O=lab, CN=b");
        assert!(s.initiator);
        assert_eq!(s.initiator_spi, 0x21fe016b58dfd1f1);
        assert_eq!(s.responder_spi, 0x68161dd1103e0848);
        assert_eq!(s.algorithms.encr.as_deref(), Some("AES_CBC"));
        assert_eq!(s.algorithms.encr_keysize, Some(128));
        assert_eq!(s.algorithms.integ.as_deref(), Some("HMAC_SHA2_256_128"));
        assert_eq!(s.algorithms.prf.as_deref(), Some("PRF_HMAC_SHA2_256"));
        assert_eq!(s.algorithms.dh_group.as_deref(), Some("CURVE_25519"));
        let c = s.child("c").unwrap();
        assert_eq!(c.state, ChildState::Installed);
        assert_eq!(
            (c.mode.as_str(), c.protocol.as_str(), c.encap),
            ("TUNNEL", "ESP", true)
        );
        assert_eq!((c.spi_in, c.spi_out), (0x1d4e5d05, 0x7967d41f));
        assert_eq!(c.algorithms.encr.as_deref(), Some("AES_GCM_16"));
        assert_eq!(c.algorithms.integ, None);
        assert_eq!((c.bytes_in, c.packets_in, c.packets_out), (168, 2, 0));
        assert_eq!(c.local_ts, vec!["10.1.0.1/32"]);
        assert_eq!(c.remote_ts, vec!["10.2.0.1/32", "10.3.0.0/24"]);
        // No SA: only the reply.
        assert!(parse_list_sas("list-sas reply {\n}\n").unwrap().is_empty());
        // Truncated output is an error, not a shorter list.
        let cut = &PRETTY[..PRETTY.len() / 2];
        assert!(parse_list_sas(cut).is_err());
        assert!(parse_list_sas("list-sa event {\n  site {\n    what\n  }\n}\n").is_err());
    }

    #[test]
    fn vici_wire_format() {
        // The encoding of vici's README: length, CMD_REQUEST, name, KEY_VALUE name value.
        let m = vici_encode_request("initiate", &[("child", "gcm")]).unwrap();
        let want: Vec<u8> = [
            &[0u8, 0, 0, 22][..],
            &[0, 8],
            b"initiate",
            &[3, 5],
            b"child",
            &[0, 3],
            b"gcm",
        ]
        .concat();
        assert_eq!(m, want);
        // A response with a value, a list and a nested section.
        let body: Vec<u8> = [
            &[3u8, 7][..],
            b"success",
            &[0, 3],
            b"yes",
            &[4, 2],
            b"ts",
            &[5, 0, 1],
            b"a",
            &[5, 0, 2],
            b"bc",
            &[6],
            &[1, 1],
            b"s",
            &[3, 1],
            b"k",
            &[0, 0],
            &[2],
        ]
        .concat();
        let t = vici_decode(&body).unwrap();
        assert_eq!(t.get("success"), Some("yes"));
        assert_eq!(t.list("ts"), vec!["a", "bc"]);
        assert_eq!(t.section("s").and_then(|s| s.get("k")), Some(""));
        // A cut between two top-level elements is a shorter valid message; a cut anywhere else is an error
        // (never a panic).
        for n in 0..body.len() {
            let r = vici_decode(&body[..n]);
            assert_eq!(r.is_ok(), [0, 14, 28].contains(&n), "cut at {n}: {r:?}");
        }
        assert!(vici_decode(&[2]).is_err());
        assert!(vici_decode(&[1, 1, b's']).is_err());
        assert!(vici_decode(&[9]).is_err());
    }
}
