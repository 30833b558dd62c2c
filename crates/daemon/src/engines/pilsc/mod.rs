//! The PILSC engine (`[pilsc]`): protects the host's own IPv4 packets as a rule file says, inside the host's stack
//! (not a tunnel), through two netfilter queues (see [`netveil_io::nfqueue`]).
//!
//! ```text
//! output: socket -> OUTPUT (conntrack sees the clear packet) -> routing -> mangle POSTROUTING: queue `queue`
//!         -> this engine seals (option 130, payload encrypted) -> verdict with the new bytes -> NAT, the wire
//! input:  the wire -> defragmentation -> raw PREROUTING: queue `queue + 1` -> this engine opens (option gone,
//!         payload clear) -> verdict with the new bytes -> conntrack, routing, INPUT -> socket
//! ```
//!
//! - **What is queued**: the host's own unicast packets (`addrtype`: source local going out, destination local
//!   coming in; loopback never) to and from the peers of the rule file's `Security = true` rules (one iptables rule
//!   per distinct peer prefix; above [`MAX_QUEUE_PREFIXES`] of them, all of the host's own unicast traffic), and
//!   the host's own ICMP errors to and from anywhere (types 3, 4, 5, 11, 12). The paper's classification: broadcast,
//!   multicast and packets for other hosts pass untouched. Everything else never reaches user space.
//! - **Per packet** (rules compiled into [`netveil_sa::policy`] by [`netveil_pilsc::policy`]): going out, a packet
//!   whose most specific rule is `Security = true` is sealed with that rule's key ([`netveil_pilsc::packet`]);
//!   coming in, a packet with option 130 is opened with the key its key id and source name, then its clear headers
//!   must select a protected rule of that key; a packet without the option whose headers select a protected rule
//!   is dropped (covered traffic is never accepted in clear). An ICMP error is judged by the packet it quotes
//!   (RFC 4301 section 6.2; see [`netveil_pilsc::policy`]): sealed under that packet's rule going out, dropped
//!   coming in without the option when that packet's flow is protected. Drops are counted by reason
//!   (`netveil status`).
//! - **Fail closed**: the queues are bound without fail-open and the `NFQUEUE` rules have no `--queue-bypass`, so
//!   while no daemon listens, queued (covered) packets are dropped. A clean stop (SIGTERM) leaves the rules in
//!   place, as the IP engine leaves its fail-closed filters; `netveil down` removes them; a restart replaces them.
//! - **iptables**: the kernels we target have the xtables `NFQUEUE` target (through `NFT_COMPAT`) but not always
//!   nftables' own `queue` statement, so the rules go in with `iptables-nft` or `iptables-legacy` (Debian's
//!   `iptables` package), whichever works here (`pilsc.iptables` picks one).
//! - **Counters across restarts**: each key's sealer continues from a mark in the state directory, reserved
//!   [`MARK_BLOCK`] counters ahead and synced before use, as static ESP keys' sequence numbers are (see
//!   [`crate::runtime::state`]); a clean stop writes the last counter used.

use crate::runtime::config::ConfigError;
use crate::runtime::engine::{run, Control, Engine, Undo};
use crate::runtime::registry::{Checked, EngineSection, Prepared, Section, Started, UpOptions};
use crate::runtime::state::{StateDir, StateLocation};
use crate::{Error, Result};
use ipnet::Ipv4Net;
use netveil_io::nfqueue::{NfQueue, Queued, Verdict, HEADROOM, MESSAGE_MAX};
use netveil_pilsc::cipher::Cipher;
use netveil_pilsc::packet::{marking, Mode, OpenError, SealError};
use netveil_pilsc::policy::{decide as policy_decide, file_rule, judged, Unjudged};
use netveil_pilsc::rules::{Keys, RuleFile};
use netveil_pilsc::table::{Settings, Table};
use netveil_sa::flow_cache::CachedPolicy;
use netveil_sa::policy::{Action, Direction, PolicyDb};
use netveil_wire::PacketBuf;

fn cerr(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        reason: reason.into(),
    }
}
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Counters reserved ahead per key: a crash skips at most this many, and the mark is synced once per this many
/// packets (half a block ahead).
pub const MARK_BLOCK: u64 = 1 << 16;

/// Above this many distinct protected peer prefixes, all of the host's own unicast traffic is queued instead of
/// one iptables rule per prefix.
pub const MAX_QUEUE_PREFIXES: usize = 256;

/// Packets per receive batch.
const BATCH: usize = 32;

/// The top-level key it owns.
pub const SECTIONS: [&str; 1] = ["pilsc"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    rules: Option<String>,
    rule: Option<Vec<toml::Table>>,
    keys: Option<String>,
    mode: Option<String>,
    queue: Option<i64>,
    replay_window: Option<i64>,
    max_sources: Option<i64>,
    iptables: Option<String>,
    control_socket: Option<String>,
    control_group: Option<String>,
    state_dir: Option<String>,
    #[serde(default)]
    allow_volatile_state: bool,
}

/// Where a configuration's rules are: the paper's flat file (`pilsc.rules`) or `[[pilsc.rule]]` tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleSource {
    File(PathBuf),
    Toml,
}

impl std::fmt::Display for RuleSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuleSource::File(p) => write!(f, "{}", p.display()),
            RuleSource::Toml => f.write_str("[[pilsc.rule]]"),
        }
    }
}

impl RuleSource {
    /// How a rule's place is named: a line of the file, an entry of the array (from 1).
    fn unit(&self) -> &'static str {
        match self {
            RuleSource::File(_) => "line",
            RuleSource::Toml => "entry",
        }
    }

    /// The key table's errors (missing keys, lengths, collisions) as a configuration error naming the key.
    fn error(&self, e: &netveil_pilsc::rules::Errors) -> ConfigError {
        match self {
            RuleSource::File(p) => cerr(
                "pilsc.rules",
                format!("{}:\n{e}", crate::runtime::secret_file::shown(p)),
            ),
            RuleSource::Toml => key_errors(&e.in_toml()),
        }
    }
}

/// Errors of `[[pilsc.rule]]` tables: the first one's key, every one in the message.
fn key_errors(e: &netveil_pilsc::rules::KeyErrors) -> ConfigError {
    let key =
        e.0.first()
            .map_or_else(|| "pilsc.rule".to_string(), |k| k.key.clone());
    let rest: Vec<String> = e.0.iter().skip(1).map(|k| k.to_string()).collect();
    let msg = e.0.first().map_or(String::new(), |k| k.msg.clone());
    if rest.is_empty() {
        cerr(&key, msg)
    } else {
        cerr(&key, format!("{msg}\n{}", rest.join("\n")))
    }
}

/// `[pilsc]`, parsed and checked.
pub struct PilscConfig {
    /// Where the rules were written.
    pub source: RuleSource,
    pub file: RuleFile,
    keys: Keys,
    /// `pilsc.keys`, read again by a reload.
    pub keys_path: Option<PathBuf>,
    pub mode: Mode,
    /// Output queue; input is `queue + 1`.
    pub queue: u16,
    pub replay_window: u32,
    pub max_sources: usize,
    /// `None`: whichever of iptables-nft and iptables-legacy works.
    pub iptables: Option<String>,
    pub control_socket: PathBuf,
    pub control_group: Option<u32>,
    pub state_dir: PathBuf,
    pub allow_volatile_state: bool,
    /// About its files (a rule file with keys in it that others may read): logged at `up`, notes of `check`.
    pub warnings: Vec<String>,
}

/// The rule file `pilsc.rules` (at start and at a reload): read as rules are ([`crate::runtime::secret_file`]: owned by
/// root, writable by it only), parsed, and a warning if it writes keys itself and others may read it.
pub(crate) fn read_rule_file(
    path: &Path,
) -> std::result::Result<(RuleFile, Option<String>), ConfigError> {
    let k = "pilsc.rules";
    let c = crate::runtime::secret_file::read(path, crate::runtime::secret_file::Level::Rules)
        .map_err(|e| cerr(k, e.to_string()))?;
    let text = c.text().map_err(|e| cerr(k, e.to_string()))?;
    let parsed = netveil_pilsc::rules::parse(text).map_err(|e| {
        cerr(
            k,
            format!("{}:\n{e}", crate::runtime::secret_file::shown(path)),
        )
    })?;
    let warning = (literal_keys(&parsed) > 0 && c.readable_by_others()).then(|| {
        crate::runtime::secret_file::readable_note(path, c.mode, "keys written in its rules")
    });
    Ok((parsed, warning))
}

/// The key file `pilsc.keys` (at start and at a reload): read as a secret ([`crate::runtime::secret_file`]: owned by root,
/// mode 0600 or 0400), parsed.
pub(crate) fn read_key_file(path: &Path) -> std::result::Result<Keys, ConfigError> {
    let k = "pilsc.keys";
    let c = crate::runtime::secret_file::read(path, crate::runtime::secret_file::Level::Secret)
        .map_err(|e| cerr(k, e.to_string()))?;
    Keys::parse(c.text().map_err(|e| cerr(k, e.to_string()))?).map_err(|e| {
        cerr(
            k,
            format!("{}:\n{e}", crate::runtime::secret_file::shown(path)),
        )
    })
}

/// How many rules write their key themselves (`Key = 0x` and the whole key), not a name of the key file.
fn literal_keys(file: &RuleFile) -> usize {
    file.rules
        .iter()
        .filter(|r| {
            r.protect
                .as_ref()
                .is_some_and(|p| matches!(p.key, netveil_pilsc::rules::KeyRef::Literal(_)))
        })
        .count()
}

fn int(
    key: &str,
    v: Option<i64>,
    default: i64,
    lo: i64,
    hi: i64,
) -> std::result::Result<i64, ConfigError> {
    let v = v.unwrap_or(default);
    if v < lo || v > hi {
        return Err(cerr(key, format!("must be between {lo} and {hi}")));
    }
    Ok(v)
}

impl PilscConfig {
    pub fn from_section(
        v: toml::Value,
        base: &Path,
    ) -> std::result::Result<PilscConfig, ConfigError> {
        let r: Raw = crate::runtime::config::typed(v, "pilsc")?;
        let mut warnings = Vec::new();
        let file = |p: &str| -> PathBuf {
            let p = Path::new(p);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        let (source, parsed) = match (r.rules.filter(|s| !s.is_empty()), r.rule) {
            (Some(_), Some(_)) => {
                return Err(cerr(
                    "pilsc.rule",
                    "give the rules in a file (pilsc.rules) or as [[pilsc.rule]] tables, not both",
                ))
            }
            (None, None) => {
                return Err(cerr(
                    "pilsc.rules",
                    "is required: the rule file (the paper's format: Rule, Security, IP, Protocol, Port, \
                     Encryption, Applmode, Key records), or the same rules as [[pilsc.rule]] tables",
                ))
            }
            (Some(rules), None) => {
                let rules_path = file(&rules);
                let (parsed, warning) = read_rule_file(&rules_path)?;
                warnings.extend(warning);
                (RuleSource::File(rules_path), parsed)
            }
            (None, Some(tables)) => {
                let parsed = netveil_pilsc::rules::from_toml(&tables).map_err(|e| key_errors(&e))?;
                (RuleSource::Toml, parsed)
            }
        };
        let keys_path = r.keys.as_deref().filter(|s| !s.is_empty()).map(file);
        let keys = match r.keys.filter(|s| !s.is_empty()) {
            None => Keys::none(),
            Some(k) => read_key_file(&file(&k))?,
        };
        let mode = match r.mode.as_deref() {
            None | Some("authenticated") => Mode::Authenticated,
            Some("confidential") => Mode::Confidential,
            Some(_) => {
                return Err(cerr(
                    "pilsc.mode",
                    "must be \"authenticated\" (the default: a tag over the payload and the header's invariant \
                     fields) or \"confidential\" (the paper's 12 bytes, encryption only, no integrity)",
                ))
            }
        };
        let queue = int("pilsc.queue", r.queue, 0, 0, 65534)? as u16;
        let replay_window = int("pilsc.replay_window", r.replay_window, 1024, 32, 65536)? as u32;
        let max_sources = int("pilsc.max_sources", r.max_sources, 4096, 1, 1 << 20)? as usize;
        let iptables = match r.iptables.as_deref() {
            None | Some("auto") => None,
            Some(t @ ("iptables-nft" | "iptables-legacy")) => Some(t.to_string()),
            Some(_) => {
                return Err(cerr(
                    "pilsc.iptables",
                    "must be \"auto\", \"iptables-nft\" or \"iptables-legacy\"",
                ))
            }
        };
        let control_socket = r.control_socket.map(PathBuf::from).unwrap_or_else(|| {
            PathBuf::from(format!("{}/pilsc{queue}.sock", netveil_control::RUN_DIR))
        });
        crate::runtime::names::check_text(
            "pilsc.control_socket",
            &control_socket.to_string_lossy(),
        )?;
        let control_group = r
            .control_group
            .map(|g| crate::runtime::config::control_group("pilsc.control_group", &g))
            .transpose()?;
        let state_dir = match r.state_dir {
            Some(d) if d.is_empty() => return Err(cerr("pilsc.state_dir", "must not be empty")),
            Some(d) => file(&d),
            None => PathBuf::from(crate::runtime::state::DEFAULT_STATE_DIR),
        };
        // Keys checked now (missing, wrong length, one key under two algorithms, colliding ids), with counters
        // that are not used: the table is built again at `up` from the marks.
        let settings = Settings {
            mode,
            window: replay_window,
            max_sources,
        };
        Table::build(&parsed, &keys, &settings, |_, _, _| (1, 2)).map_err(|e| source.error(&e))?;
        Ok(PilscConfig {
            source,
            file: parsed,
            keys,
            keys_path,
            mode,
            queue,
            replay_window,
            max_sources,
            iptables,
            control_socket,
            control_group,
            state_dir,
            allow_volatile_state: r.allow_volatile_state,
            warnings,
        })
    }

    fn settings(&self) -> Settings {
        Settings {
            mode: self.mode,
            window: self.replay_window,
            max_sources: self.max_sources,
        }
    }

    fn chains(&self) -> (String, String) {
        (
            format!("NVPILSC{}-OUT", self.queue),
            format!("NVPILSC{}-IN", self.queue),
        )
    }

    /// The distinct peer prefixes of the protected rules, or `None` when there are too many to queue one by one.
    fn queued_prefixes(&self) -> Option<Vec<Ipv4Net>> {
        queued_prefixes(&self.file)
    }
}

/// [`PilscConfig::queued_prefixes`] of a rule file.
fn queued_prefixes(file: &RuleFile) -> Option<Vec<Ipv4Net>> {
    {
        let mut p: Vec<Ipv4Net> = file
            .rules
            .iter()
            .filter(|r| r.protect.is_some())
            .map(|r| r.peer)
            .collect();
        p.sort();
        p.dedup();
        let p = Ipv4Net::aggregate(&p);
        (p.len() <= MAX_QUEUE_PREFIXES).then_some(p)
    }
}

/// The file name of the counter mark of a key under a cipher (a one-way fingerprint: the key cannot be learned
/// from it).
fn mark_file(cipher: Cipher, key: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"netveil pilsc mark v1\0");
    h.update(cipher.to_string().as_bytes());
    h.update([0]);
    h.update(key);
    format!("pilsc-{}", hex::encode(&h.finalize()[..16]))
}

/// The smallest block a receive ceiling is raised by, and the time of traffic a block should last (as static ESP
/// keys' receive floors, [`crate::runtime::state::RxStore`]).
const RX_MIN_BLOCK: u64 = crate::runtime::state::RX_MIN_BLOCK;
const RX_BLOCK_MILLIS: u64 = crate::runtime::state::RX_BLOCK_MILLIS;
/// An authenticated packet above its source's ceiling reserves this far above itself at once (the top-up between
/// batches then reserves by the source's rate).
const RX_INLINE_BLOCK: u64 = RX_MIN_BLOCK;

/// The file of a source's receive floor under the key whose counter mark is `mark` (`pilsc-...`).
fn rx_file(mark: &str, src: std::net::Ipv4Addr) -> String {
    format!("{}-rx-{}", mark, u32::from(src))
}

/// A key's receive floors in the state directory (see [`netveil_pilsc::packet::Floors`]).
struct RxFloors<'a> {
    dir: &'a StateDir,
    /// The key's counter mark file name.
    name: &'a str,
}

impl netveil_pilsc::packet::Floors for RxFloors<'_> {
    fn load(&mut self, src: std::net::Ipv4Addr) -> Option<u64> {
        let f = rx_file(self.name, src);
        match self
            .dir
            .read_floor(&f, "pilsc.state_dir", &format!("pilsc receiver of {src}"))
        {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!("pilsc: {}", e.reason);
                None
            }
        }
    }

    fn reserve(&mut self, src: std::net::Ipv4Addr, counter: u64) -> Option<u64> {
        let c = counter.saturating_add(RX_INLINE_BLOCK);
        match self.dir.write_u64(&rx_file(self.name, src), c) {
            Ok(()) => Some(c),
            Err(e) => {
                tracing::error!("pilsc: cannot write a receive floor: {e}");
                None
            }
        }
    }
}

/// The PILSC engine in the registry.
pub struct PilscSection;

impl EngineSection for PilscSection {
    fn name(&self) -> &'static str {
        "pilsc"
    }

    fn keys(&self) -> &'static [&'static str] {
        &SECTIONS
    }

    fn describe(&self) -> &'static str {
        "[pilsc]"
    }

    fn parse(
        &self,
        mut table: toml::Table,
        base: &Path,
    ) -> std::result::Result<Box<dyn Section>, Vec<ConfigError>> {
        let v = table
            .remove("pilsc")
            .unwrap_or_else(|| toml::Value::Table(Default::default()));
        Ok(Box::new(
            PilscConfig::from_section(v, base).map_err(|e| vec![e])?,
        ))
    }

    fn holds_keys(&self, table: &toml::Table) -> bool {
        // `[[pilsc.rule]]` tables that write a key themselves (errors are the parser's to report).
        let tables: Vec<toml::Table> = table
            .get("pilsc")
            .and_then(|p| p.get("rule"))
            .and_then(|r| r.as_array())
            .map(|a| a.iter().filter_map(|t| t.as_table().cloned()).collect())
            .unwrap_or_default();
        netveil_pilsc::rules::from_toml(&tables).is_ok_and(|f| literal_keys(&f) > 0)
    }
}

/// The iptables command that works here: `pilsc.iptables`, or the first of iptables-nft and iptables-legacy that
/// lists the mangle table.
fn iptables(cfg: &PilscConfig) -> Result<String> {
    let works = |t: &str| {
        std::process::Command::new(t)
            .args(["-w", "-t", "mangle", "-S", "POSTROUTING"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let candidates: Vec<&str> = match &cfg.iptables {
        Some(t) => vec![t.as_str()],
        None => vec!["iptables-nft", "iptables-legacy"],
    };
    candidates
        .iter()
        .find(|t| works(t))
        .map(|t| t.to_string())
        .ok_or_else(|| {
            Error::Other(format!(
                "PILSC needs netfilter queues through the xtables NFQUEUE target: {} did not work here (install \
                 Debian's iptables package; the kernel needs NETFILTER_NETLINK_QUEUE and NETFILTER_XT_TARGET_NFQUEUE, \
                 with NFT_COMPAT for iptables-nft). nftables' own `queue` statement is not used: many kernels \
                 (this kind included) lack NFT_QUEUE",
                candidates.join(" and ")
            ))
        })
}

/// Removes the chains of queue `cfg.queue` and the jumps to them, wherever a previous run left them.
fn remove_rules(ipt: &str, cfg: &PilscConfig) {
    let (out, inp) = cfg.chains();
    for (table, hook, chain) in [("mangle", "POSTROUTING", &out), ("raw", "PREROUTING", &inp)] {
        let quiet = |args: &[&str]| {
            std::process::Command::new(ipt)
                .arg("-w")
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        while quiet(&["-t", table, "-D", hook, "-j", chain]) {}
        quiet(&["-t", table, "-F", chain]);
        quiet(&["-t", table, "-X", chain]);
    }
}

/// The ICMP types that are errors (they quote a packet): queued to and from everywhere, since an error about a
/// protected flow may come from or go to another address than the peer's (a router, a source route, a forger).
const ICMP_ERRORS: [u8; 5] = [3, 4, 5, 11, 12];

/// The contents of the two chains (queue `queue` out, `queue + 1` in) for `prefixes` (`None`: all of the host's own
/// unicast traffic), as `iptables-restore --noflush` input that replaces them in one transaction.
fn chain_rules(out: &str, inp: &str, queue: u16, prefixes: &Option<Vec<Ipv4Net>>) -> String {
    let (qo, qi) = (queue, queue + 1);
    let mut t = format!(
        "*mangle\n-F {out}\n-A {out} -o lo -j RETURN\n-A {out} -m addrtype ! --src-type LOCAL -j RETURN\n\
         -A {out} -m addrtype ! --dst-type UNICAST -j RETURN\n"
    );
    match prefixes {
        Some(ps) => {
            for p in ps {
                t += &format!("-A {out} -d {p} -j NFQUEUE --queue-num {qo}\n");
            }
            for ty in ICMP_ERRORS {
                t += &format!(
                    "-A {out} -p icmp -m icmp --icmp-type {ty} -j NFQUEUE --queue-num {qo}\n"
                );
            }
        }
        None => t += &format!("-A {out} -j NFQUEUE --queue-num {qo}\n"),
    }
    t += &format!(
        "COMMIT\n*raw\n-F {inp}\n-A {inp} -i lo -j RETURN\n-A {inp} -m addrtype ! --dst-type LOCAL -j RETURN\n"
    );
    match prefixes {
        Some(ps) => {
            for p in ps {
                t += &format!("-A {inp} -s {p} -j NFQUEUE --queue-num {qi}\n");
            }
            for ty in ICMP_ERRORS {
                t += &format!(
                    "-A {inp} -p icmp -m icmp --icmp-type {ty} -j NFQUEUE --queue-num {qi}\n"
                );
            }
        }
        None => t += &format!("-A {inp} -j NFQUEUE --queue-num {qi}\n"),
    }
    t += "COMMIT\n";
    t
}

/// Replaces the chains' contents in one transaction (`IPT-restore --noflush`).
fn load_chains(ipt: &str, text: &str) -> Result<()> {
    let restore = format!("{ipt}-restore");
    crate::runtime::engine::run_stdin(&[&restore, "-w", "--noflush"], text)
}

/// Installs the queue rules (see the module documentation): the chains, their rules, then the jumps to them.
fn install_rules(ipt: &str, cfg: &PilscConfig) -> Result<()> {
    let (out, inp) = cfg.chains();
    let w = |args: &[&str]| -> Result<()> {
        let mut v = vec![ipt, "-w"];
        v.extend_from_slice(args);
        run(&v)
    };
    w(&["-t", "mangle", "-N", &out])?;
    w(&["-t", "raw", "-N", &inp])?;
    load_chains(
        ipt,
        &chain_rules(&out, &inp, cfg.queue, &cfg.queued_prefixes()),
    )?;
    w(&["-t", "mangle", "-I", "POSTROUTING", "-j", &out])?;
    w(&["-t", "raw", "-I", "PREROUTING", "-j", &inp])?;
    Ok(())
}

impl Section for PilscConfig {
    fn check(&self) -> Result<Checked> {
        iptables(self)?;
        StateDir::check(&self.state_location(false), "pilsc.state_dir")?;
        let protected = self
            .file
            .rules
            .iter()
            .filter(|r| r.protect.is_some())
            .count();
        let mut notes = self.warnings.clone();
        if self.mode == Mode::Confidential {
            notes.push(
                "pilsc.mode = \"confidential\": encryption only, no integrity (a flipped ciphertext bit flips the \
                 same plaintext bit)"
                    .to_string(),
            );
        }
        for d in &self.file.duplicates {
            notes.push(format!(
                "{}: rule {} ({} {}) says the same as rule {} ({} {}): dropped",
                self.source,
                d.number,
                self.source.unit(),
                d.line,
                d.same_as,
                self.source.unit(),
                d.same_as_line
            ));
        }
        Ok(Checked {
            summary: format!(
                "PILSC: {} rules ({protected} protected), {} mode",
                self.file.rules.len(),
                mode_name(self.mode)
            ),
            notes,
        })
    }

    fn prepare(self: Box<Self>, opts: &UpOptions) -> Result<Box<dyn Prepared>> {
        for w in &self.warnings {
            tracing::warn!("pilsc: {w}");
        }
        let ipt = iptables(&self)?;
        let dir = StateDir::open(&self.state_location(opts.fresh_keys), "pilsc.state_dir")?;
        // Each key's mark, and its first reservation made durable before anything is sealed.
        let mut marks: Vec<(String, u64)> = Vec::new();
        let mut errors: Vec<ConfigError> = Vec::new();
        let table = Table::build(
            &self.file,
            &self.keys,
            &self.settings(),
            |id, cipher, key| {
                let name = mark_file(cipher, key);
                match dir.read_mark(&name, "pilsc.state_dir", &format!("pilsc key {id:#06x}")) {
                    Ok(m) => {
                        let reserved = m.saturating_add(MARK_BLOCK);
                        marks.push((name, reserved));
                        (m + 1, reserved.saturating_add(1))
                    }
                    Err(e) => {
                        errors.push(e);
                        (1, 1)
                    }
                }
            },
        )
        .map_err(|e| Error::Config(self.source.error(&e)))?;
        if let Some(e) = errors.into_iter().next() {
            return Err(e.into());
        }
        for (name, reserved) in &marks {
            dir.write_u64(name, *reserved).map_err(Error::io(format!(
                "cannot write {name} in {}",
                dir.path().display()
            )))?;
        }
        let db = netveil_pilsc::policy::compile(&self.file, &table.rule_key);
        Ok(Box::new(PilscPrepared {
            cfg: *self,
            ipt,
            dir,
            table,
            db,
            marks,
            config: opts.config.clone(),
        }))
    }

    fn down(&self) -> Option<Result<()>> {
        Some(down(self))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl PilscConfig {
    fn state_location(&self, fresh_keys: bool) -> StateLocation {
        StateLocation {
            allow_volatile: self.allow_volatile_state,
            fresh_keys,
            ..StateLocation::new(&self.state_dir)
        }
    }
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Authenticated => "authenticated",
        Mode::Confidential => "confidential (no integrity)",
    }
}

fn down(cfg: &PilscConfig) -> Result<()> {
    crate::runtime::engine::stop_running(&cfg.control_socket)?;
    let ipt = iptables(cfg)?;
    remove_rules(&ipt, cfg);
    println!(
        "PILSC queue rules {} and {} removed: the host's traffic passes in clear",
        cfg.chains().0,
        cfg.chains().1
    );
    Ok(())
}

struct PilscPrepared {
    cfg: PilscConfig,
    ipt: String,
    dir: StateDir,
    table: Table,
    db: PolicyDb,
    /// Per key slot (in order): its mark file and the counter reserved.
    marks: Vec<(String, u64)>,
    /// The configuration file (a reload of `[[pilsc.rule]]` tables reads it again).
    config: Option<PathBuf>,
}

impl Prepared for PilscPrepared {
    fn control_socket(&self) -> &Path {
        &self.cfg.control_socket
    }

    fn control_group(&self) -> Option<u32> {
        self.cfg.control_group
    }

    fn start(self: Box<Self>, undo: &mut Undo, control: &Path) -> Result<Started> {
        let p = *self;
        let (qo, qi) = (p.cfg.queue, p.cfg.queue + 1);
        let q = NfQueue::open(&[qo, qi], 4096).map_err(Error::io(format!(
            "cannot bind netfilter queues {qo} and {qi} (another daemon holds them, or no \
             NETFILTER_NETLINK_QUEUE)"
        )))?;
        q.set_recv_timeout(Duration::from_millis(100))
            .map_err(Error::io("netfilter queue receive timeout"))?;
        // A crashed run's rules first (its chains would hold ours back), then ours; a failed start leaves none.
        remove_rules(&p.ipt, &p.cfg);
        let (out, inp) = p.cfg.chains();
        let ipt = p.ipt.clone();
        for (table, hook, chain) in [("mangle", "POSTROUTING", &out), ("raw", "PREROUTING", &inp)] {
            undo.push(&[&ipt, "-w", "-t", table, "-X", chain]);
            undo.push(&[&ipt, "-w", "-t", table, "-F", chain]);
            undo.push(&[&ipt, "-w", "-t", table, "-D", hook, "-j", chain]);
        }
        install_rules(&ipt, &p.cfg)?;
        let stats = Arc::new(Stats::new(p.cfg.file.rules.len()));
        let stop = Arc::new(AtomicBool::new(false));
        let (reload_tx, reload_rx) = std::sync::mpsc::channel();
        let shared = Arc::new(Shared {
            view: std::sync::Mutex::new((
                stats.clone(),
                Arc::new(rule_infos(&p.cfg.file)),
                p.table.keys.len(),
            )),
            mode: p.cfg.mode,
            queues: (qo, qi),
            iptables: ipt.clone(),
            source: p.cfg.source.clone(),
            config: p.config.clone(),
            keys_path: p.cfg.keys_path.clone(),
            settings: p.cfg.settings(),
            reload_tx: std::sync::Mutex::new(reload_tx),
            chains: p.cfg.chains(),
        });
        let worker = Worker {
            due: Vec::new(),
            reload_rx,
            shared: shared.clone(),
            settings: p.cfg.settings(),
            rates: Default::default(),
            mode: p.cfg.mode,
            q,
            table: p.table,
            db: CachedPolicy::new(p.db),
            dir: p.dir,
            marks: p.marks,
            stats,
            stop: stop.clone(),
            qout: qo,
        };
        let handle = std::thread::Builder::new()
            .name("pilsc".into())
            .spawn(move || worker.run())
            .map_err(Error::io("cannot start the PILSC thread"))?;
        tracing::info!(
            "pilsc: up ({} rules, {} mode, queues {qo}/{qi} via {ipt}); control socket {}",
            p.cfg.file.rules.len(),
            mode_name(shared.mode),
            control.display()
        );
        if p.cfg.mode == Mode::Confidential {
            tracing::warn!("pilsc: confidential mode: encryption only, no integrity");
        }
        // The rules stay after a clean stop (fail closed); `netveil down` removes them.
        let keep: Vec<Vec<String>> = [("mangle", "POSTROUTING", &out), ("raw", "PREROUTING", &inp)]
            .iter()
            .flat_map(|(table, hook, chain)| {
                [
                    vec![
                        ipt.clone(),
                        "-w".into(),
                        "-t".into(),
                        table.to_string(),
                        "-X".into(),
                        chain.to_string(),
                    ],
                    vec![
                        ipt.clone(),
                        "-w".into(),
                        "-t".into(),
                        table.to_string(),
                        "-F".into(),
                        chain.to_string(),
                    ],
                    vec![
                        ipt.clone(),
                        "-w".into(),
                        "-t".into(),
                        table.to_string(),
                        "-D".into(),
                        hook.to_string(),
                        "-j".into(),
                        chain.to_string(),
                    ],
                ]
            })
            .collect();
        Ok(Started {
            engine: Box::new(PilscEngine {
                shared: shared.clone(),
                handle: Some(handle),
                stop,
                keep,
            }),
            control: Arc::new(PilscControl(shared)),
            sa_port: None,
        })
    }
}

struct PilscEngine {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    /// The undo commands of the queue rules (kept unless `down`).
    keep: Vec<Vec<String>>,
}

impl Engine for PilscEngine {
    fn tick(&mut self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }

    fn reload(&mut self) -> Option<std::result::Result<String, String>> {
        Some(self.shared.reload().map_err(|e| e.to_string()))
    }

    fn stop(mut self: Box<Self>, undo: &mut Undo, down: bool) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        if !down {
            for c in &self.keep {
                let c: Vec<&str> = c.iter().map(String::as_str).collect();
                undo.keep(&c);
            }
        }
    }
}

mod stats;
mod worker;
use stats::*;
pub use stats::{PilscStatus, RuleStatus};
use worker::*;

#[cfg(test)]
mod tests;
