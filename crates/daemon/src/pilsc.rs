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
//!   per distinct peer prefix; above [`MAX_QUEUE_PREFIXES`] of them, all of the host's own unicast traffic). The
//!   paper's classification: broadcast, multicast and packets for other hosts pass untouched. Everything else never
//!   reaches user space.
//! - **Per packet** (rules compiled into [`netveil_sa::policy`] by [`netveil_pilsc::policy`]): going out, a packet
//!   whose most specific rule is `Security = true` is sealed with that rule's key ([`netveil_pilsc::packet`]);
//!   coming in, a packet with option 130 is opened with the key its key id and source name, then its clear headers
//!   must select a protected rule of that key; a packet without the option whose headers select a protected rule
//!   is dropped (covered traffic is never accepted in clear). Drops are counted by reason (`netveil status`).
//! - **Fail closed**: the queues are bound without fail-open and the `NFQUEUE` rules have no `--queue-bypass`, so
//!   while no daemon listens, queued (covered) packets are dropped. A clean stop (SIGTERM) leaves the rules in
//!   place, as the IP engine leaves its fail-closed filters; `netveil down` removes them; a restart replaces them.
//! - **iptables**: the kernels we target have the xtables `NFQUEUE` target (through `NFT_COMPAT`) but not always
//!   nftables' own `queue` statement, so the rules go in with `iptables-nft` or `iptables-legacy` (Debian's
//!   `iptables` package), whichever works here (`pilsc.iptables` picks one).
//! - **Counters across restarts**: each key's sealer continues from a mark in the state directory, reserved
//!   [`MARK_BLOCK`] counters ahead and synced before use, as static ESP keys' sequence numbers are (see
//!   [`crate::state`]); a clean stop writes the last counter used.

use crate::config::ConfigError;
use crate::engine::{run, Control, Engine, Undo};
use crate::registry::{Checked, EngineSection, Prepared, Section, Started, UpOptions};
use crate::state::{StateDir, StateLocation};
use crate::{Error, Result};
use ipnet::Ipv4Net;
use netveil_io::nfqueue::{NfQueue, Queued, Verdict, HEADROOM, MESSAGE_MAX};
use netveil_pilsc::cipher::Cipher;
use netveil_pilsc::packet::{marking, Mode, OpenError, SealError};
use netveil_pilsc::policy::file_rule;
use netveil_pilsc::rules::{Keys, RuleFile};
use netveil_pilsc::table::{Settings, Table};
use netveil_sa::flow_cache::CachedPolicy;
use netveil_sa::policy::{Action, Direction, FlowKey, PolicyDb};
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
            RuleSource::File(p) => cerr("pilsc.rules", format!("{}:\n{e}", p.display())),
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
        let r: Raw = crate::config::typed(v, "pilsc")?;
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
                let text = std::fs::read_to_string(&rules_path).map_err(|e| {
                    cerr(
                        "pilsc.rules",
                        format!("cannot read {}: {e}", rules_path.display()),
                    )
                })?;
                let parsed = netveil_pilsc::rules::parse(&text).map_err(|e| {
                    cerr("pilsc.rules", format!("{}:\n{e}", rules_path.display()))
                })?;
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
            Some(k) => {
                let p = file(&k);
                let t = zeroize::Zeroizing::new(std::fs::read_to_string(&p).map_err(|e| {
                    cerr("pilsc.keys", format!("cannot read {}: {e}", p.display()))
                })?);
                Keys::parse(&t).map_err(|e| cerr("pilsc.keys", format!("{}:\n{e}", p.display())))?
            }
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
        crate::names::check_text("pilsc.control_socket", &control_socket.to_string_lossy())?;
        let control_group = r
            .control_group
            .map(|g| crate::config::control_group("pilsc.control_group", &g))
            .transpose()?;
        let state_dir = match r.state_dir {
            Some(d) if d.is_empty() => return Err(cerr("pilsc.state_dir", "must not be empty")),
            Some(d) => file(&d),
            None => PathBuf::from(crate::state::DEFAULT_STATE_DIR),
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
/// keys' receive floors, [`crate::state::RxStore`]).
const RX_MIN_BLOCK: u64 = crate::state::RX_MIN_BLOCK;
const RX_BLOCK_MILLIS: u64 = crate::state::RX_BLOCK_MILLIS;
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
        }
        None => t += &format!("-A {inp} -j NFQUEUE --queue-num {qi}\n"),
    }
    t += "COMMIT\n";
    t
}

/// Replaces the chains' contents in one transaction (`IPT-restore --noflush`).
fn load_chains(ipt: &str, text: &str) -> Result<()> {
    let restore = format!("{ipt}-restore");
    crate::engine::run_stdin(&[&restore, "-w", "--noflush"], text)
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
        let mut notes = Vec::new();
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
    crate::engine::stop_running(&cfg.control_socket)?;
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
        Some(self.shared.reload())
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

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
enum Reason {
    SealFailed,
    Exhausted,
    Malformed,
    UnknownKey,
    Replay,
    Auth,
    Checksum,
    WrongMode,
    TooManySources,
    RxState,
    ClearCovered,
    Policy,
}

const DROP_NAMES: [&str; 12] = [
    "seal_failed",
    "key_exhausted",
    "malformed",
    "unknown_key",
    "replay",
    "auth",
    "checksum",
    "wrong_mode",
    "too_many_sources",
    "rx_state",
    "clear_on_covered",
    "policy",
];

struct Stats {
    /// Per rule: packets and bytes out, packets and bytes in.
    rules: Vec<[AtomicU64; 4]>,
    passed: AtomicU64,
    drops: [AtomicU64; 12],
}

impl Stats {
    fn new(n: usize) -> Stats {
        Stats {
            rules: (0..n).map(|_| Default::default()).collect(),
            passed: AtomicU64::new(0),
            drops: Default::default(),
        }
    }
    fn dropped(&self, d: Reason) -> Verdict {
        self.drops[d as usize].fetch_add(1, Ordering::Relaxed);
        Verdict::Drop
    }
    fn hit(&self, rule: usize, inbound: bool, bytes: usize) {
        let o = if inbound { 2 } else { 0 };
        self.rules[rule][o].fetch_add(1, Ordering::Relaxed);
        self.rules[rule][o + 1].fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

struct RuleInfo {
    number: u32,
    peer: String,
    protocol: String,
    security: bool,
    encryption: Option<String>,
}

struct Shared {
    /// What `status` shows of the rules in force: their counters, the rules, the number of keys (replaced by a
    /// reload).
    view: std::sync::Mutex<(Arc<Stats>, Arc<Vec<RuleInfo>>, usize)>,
    mode: Mode,
    queues: (u16, u16),
    iptables: String,
    /// For a reload: where the rules and keys are, how the table is built, the worker's mailbox, the chains.
    source: RuleSource,
    /// The configuration file: where `[[pilsc.rule]]` tables are read again.
    config: Option<PathBuf>,
    keys_path: Option<PathBuf>,
    settings: Settings,
    reload_tx: std::sync::Mutex<std::sync::mpsc::Sender<ReloadMsg>>,
    chains: (String, String),
}

/// A reload for the worker: the new rules and keys, and where its answer goes.
struct ReloadMsg {
    file: RuleFile,
    keys: Keys,
    reply: std::sync::mpsc::Sender<std::result::Result<String, String>>,
}

fn rule_infos(file: &RuleFile) -> Vec<RuleInfo> {
    file.rules
        .iter()
        .map(|r| RuleInfo {
            number: r.number,
            peer: r.peer.to_string(),
            protocol: format!("{:?}", r.protocol).to_lowercase(),
            security: r.protect.is_some(),
            encryption: r.protect.as_ref().map(|x| x.cipher.to_string()),
        })
        .collect()
}

impl Shared {
    /// `netveil reload` / SIGHUP: reads the rule file and the key file again (or the configuration's
    /// `[[pilsc.rule]]` tables: [`Shared::reload_tables`]) and, if they load, puts them in force
    /// without a gap: the worker switches between two batches (keys that stay keep their counters and replay
    /// windows; new keys continue from their marks), then the queue chains are replaced in one transaction. If
    /// anything fails, nothing changed.
    fn reload(&self) -> std::result::Result<String, String> {
        let (file, keys) = match &self.source {
            RuleSource::File(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                let file = netveil_pilsc::rules::parse(&text)
                    .map_err(|e| format!("{}:\n{e}", path.display()))?;
                let keys = match &self.keys_path {
                    None => Keys::none(),
                    Some(p) => {
                        let t = zeroize::Zeroizing::new(
                            std::fs::read_to_string(p)
                                .map_err(|e| format!("cannot read {}: {e}", p.display()))?,
                        );
                        Keys::parse(&t).map_err(|e| format!("{}:\n{e}", p.display()))?
                    }
                };
                Table::build(&file, &keys, &self.settings, |_, _, _| (1, 2))
                    .map_err(|e| format!("{}:\n{e}", path.display()))?;
                (file, keys)
            }
            RuleSource::Toml => self.reload_tables()?,
        };
        let prefixes = queued_prefixes(&file);
        let (tx, rx) = std::sync::mpsc::channel();
        self.reload_tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(ReloadMsg {
                file,
                keys,
                reply: tx,
            })
            .map_err(|_| "the PILSC thread has stopped".to_string())?;
        let said = rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| "the PILSC thread did not answer within 10 s".to_string())??;
        let (out, inp) = &self.chains;
        load_chains(
            &self.iptables,
            &chain_rules(out, inp, self.queues.0, &prefixes),
        )
        .map_err(|e| {
            format!("the rules are in force, but the queue chains were not replaced: {e}")
        })?;
        Ok(said)
    }
}

impl Shared {
    /// The rules and keys of a reload where the rules are `[[pilsc.rule]]` tables: the configuration file's
    /// `[pilsc]` section parsed and checked again as at start-up. Only the rules and keys may change: a changed
    /// mode, queue, window or source limit, or a move to a rule file, is refused (they take a restart).
    fn reload_tables(&self) -> std::result::Result<(RuleFile, Keys), String> {
        let Some(path) = &self.config else {
            return Err("the rules are [[pilsc.rule]] tables, and this daemon does not know its configuration \
                        file: restart it to change them"
                .into());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let bad = |e: ConfigError| format!("{}: {e}", path.display());
        let top: toml::Table = toml::from_str(&text)
            .map_err(|e| format!("{}: not valid TOML: {}", path.display(), e.message()))?;
        let section = top
            .get("pilsc")
            .cloned()
            .ok_or_else(|| format!("{}: the [pilsc] section is gone", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let c = PilscConfig::from_section(section, base).map_err(bad)?;
        let fixed = [
            ("pilsc.rules", !matches!(c.source, RuleSource::Toml)),
            ("pilsc.mode", c.mode != self.settings.mode),
            (
                "pilsc.queue",
                (c.queue, c.queue.wrapping_add(1)) != self.queues,
            ),
            (
                "pilsc.replay_window",
                c.replay_window != self.settings.window,
            ),
            (
                "pilsc.max_sources",
                c.max_sources != self.settings.max_sources,
            ),
        ];
        if let Some((key, _)) = fixed.iter().find(|(_, changed)| *changed) {
            return Err(bad(cerr(
                key,
                "changed: a reload changes the rules and keys only; restart the daemon to change this",
            )));
        }
        Table::build(&c.file, &c.keys, &self.settings, |_, _, _| (1, 2))
            .map_err(|e| bad(RuleSource::Toml.error(&e)))?;
        Ok((c.file, c.keys))
    }
}

/// One rule's line of `netveil status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RuleStatus {
    pub rule: u32,
    pub ip: String,
    pub protocol: String,
    pub security: bool,
    pub encryption: Option<String>,
    pub packets_out: u64,
    pub bytes_out: u64,
    pub packets_in: u64,
    pub bytes_in: u64,
}

/// The PILSC engine's part of `netveil status` (`engines.pilsc`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PilscStatus {
    pub mode: String,
    /// Said plainly for the confidential mode.
    pub integrity: bool,
    pub queues: [u16; 2],
    pub iptables: String,
    pub keys: usize,
    /// Queued packets that no protected rule covers, passed unchanged.
    pub passed: u64,
    pub drops: std::collections::BTreeMap<String, u64>,
    pub rules: Vec<RuleStatus>,
}

struct PilscControl(Arc<Shared>);

impl Control for PilscControl {
    fn answer(&self, req: &netveil_control::Request) -> Option<serde_json::Value> {
        match req {
            netveil_control::Request::Reload => Some(match self.0.reload() {
                Ok(m) => {
                    tracing::info!("pilsc: reloaded: {m}");
                    serde_json::json!({ "reloaded": m })
                }
                Err(e) => {
                    tracing::warn!("pilsc: reload refused: {e}");
                    serde_json::json!({ "error": e })
                }
            }),
            _ => None,
        }
    }

    fn status(&self, status: &mut netveil_control::Status) {
        let s = &self.0;
        let (stats, rules, keys) = s.view.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let st = PilscStatus {
            mode: mode_name(s.mode).to_string(),
            integrity: s.mode == Mode::Authenticated,
            queues: [s.queues.0, s.queues.1],
            iptables: s.iptables.clone(),
            keys,
            passed: ld(&stats.passed),
            drops: DROP_NAMES
                .iter()
                .zip(&stats.drops)
                .map(|(n, c)| (n.to_string(), ld(c)))
                .collect(),
            rules: rules
                .iter()
                .zip(&stats.rules)
                .map(|(r, c)| RuleStatus {
                    rule: r.number,
                    ip: r.peer.clone(),
                    protocol: r.protocol.clone(),
                    security: r.security,
                    encryption: r.encryption.clone(),
                    packets_out: ld(&c[0]),
                    bytes_out: ld(&c[1]),
                    packets_in: ld(&c[2]),
                    bytes_in: ld(&c[3]),
                })
                .collect(),
        };
        status.set_part("pilsc", &st);
    }
}

struct Worker {
    /// Scratch of [`Worker::rx_top_up`]: a key's sources (kept: no allocation per batch).
    due: Vec<(std::net::Ipv4Addr, u64, u64)>,
    reload_rx: std::sync::mpsc::Receiver<ReloadMsg>,
    shared: Arc<Shared>,
    settings: Settings,
    /// Per key and source: the window's top and the time at the last rate estimate, and the block it gave.
    rates: std::collections::HashMap<(usize, std::net::Ipv4Addr), (u64, std::time::Instant, u64)>,
    mode: Mode,
    q: NfQueue,
    table: Table,
    /// The rule file's policy with a flow cache in front (a flow's later packets skip the rule tables).
    db: CachedPolicy,
    dir: StateDir,
    marks: Vec<(String, u64)>,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    qout: u16,
}

/// The policy fields of a clear IPv4 packet (wire's reading: ports 0 where it has none or is a later fragment).
fn flow_key(pkt: &[u8]) -> Option<FlowKey> {
    let f = netveil_wire::ip::flow_key(pkt).ok()?;
    matches!(f.src, IpAddr::V4(_)).then_some(FlowKey {
        src: f.src,
        dst: f.dst,
        proto: f.proto,
        src_port: f.src_port,
        dst_port: f.dst_port,
    })
}

/// Lowers the MSS option of a TCP SYN by `by` bytes (and mends its checksum): a protected packet grows by the
/// option after the host sized it, and the kernel would drop a full-sized segment with DF set, telling TCP an MTU
/// it already uses. Each side's sealed SYN (or SYN-ACK) asks its peer for segments small enough to grow. Other
/// packets are left alone.
fn clamp_mss(pkt: &mut [u8], by: u16) {
    let Ok(mut p) = netveil_wire::ipv4::Packet::new_checked(pkt) else {
        return;
    };
    if p.protocol() != 6 || p.more_frags() || p.frag_offset() != 0 {
        return;
    }
    let (src, dst) = (IpAddr::V4(p.src_addr()), IpAddr::V4(p.dst_addr()));
    let Ok(mut t) = netveil_wire::tcp::Packet::new_checked(p.payload_mut()) else {
        return;
    };
    if !t.syn() {
        return;
    }
    let o = t.options_mut();
    let mut i = 0;
    let mut changed = false;
    while i < o.len() {
        match o[i] {
            0 => break,
            1 => i += 1,
            kind => {
                let Some(&len) = o.get(i + 1) else { break };
                let len = len as usize;
                if len < 2 || i + len > o.len() {
                    break;
                }
                if kind == 2 && len == 4 {
                    let mss = u16::from_be_bytes([o[i + 2], o[i + 3]]); // check-ip-offsets: allow (a TCP option)
                    let new = mss.saturating_sub(by).max(536.min(mss));
                    o[i + 2..i + 4].copy_from_slice(&new.to_be_bytes());
                    changed = true;
                }
                i += len;
            }
        }
    }
    if changed {
        t.fill_checksum(src, dst);
    }
}

/// Puts `n` bytes of NOP options back where the opened packet's option 130 was (after its header's other options):
/// the kernel parsed the protected packet's header length before the input hook and keeps its transport offset,
/// so a packet given back with a shorter header would be read from the wrong place (its transport checksum then
/// fails). The header keeps its length; its options say nothing. False if the buffer has no room (it always has:
/// the option was there).
fn nop_in_place_of_option(b: &mut PacketBuf, n: usize) -> bool {
    let Ok(p) = netveil_wire::ipv4::Packet::new_checked(b.data()) else {
        return false;
    };
    let h = p.header_len();
    if h + n > 60 || b.push_front(n).is_none() {
        return false;
    }
    let d = b.data_mut();
    d.copy_within(n..n + h, 0);
    d[h..h + n].fill(1);
    let total = d.len();
    let mut p = netveil_wire::ipv4::Packet::new_unchecked(d);
    p.set_header_len(h + n);
    p.set_total_len(total as u16);
    p.fill_checksum();
    true
}

impl Worker {
    fn run(mut self) {
        let mut bufs: Vec<PacketBuf> = (0..BATCH)
            .map(|_| PacketBuf::new(HEADROOM + MESSAGE_MAX, HEADROOM))
            .collect();
        let mut meta = vec![Queued::default(); BATCH];
        let mut verdicts = [Verdict::Drop; BATCH];
        while !self.stop.load(Ordering::Relaxed) {
            let n = match self.q.recv_batch(&mut bufs, &mut meta) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    tracing::warn!(
                        "pilsc: the kernel dropped queued packets (receive buffer full)"
                    );
                    0
                }
                Err(e) => {
                    tracing::error!("pilsc: netfilter queue: {e}");
                    break;
                }
            };
            for i in 0..n {
                verdicts[i] = if meta[i].queue == self.qout {
                    self.outbound(&mut bufs[i])
                } else {
                    self.inbound(&mut bufs[i])
                };
            }
            if n > 0 {
                if let Err(e) = self
                    .q
                    .verdicts(n, |i| (meta[i], verdicts[i], bufs[i].data()))
                {
                    tracing::warn!("pilsc: verdicts: {e}");
                }
            }
            self.top_up();
            self.rx_top_up();
            if let Ok(m) = self.reload_rx.try_recv() {
                let r = self.apply(m.file, m.keys);
                let _ = m.reply.send(r);
            }
        }
        self.finish();
    }

    /// Reserves the next block of a key whose sealer used half of its current one (synced before it goes on).
    fn top_up(&mut self) {
        for (slot, (name, reserved)) in self.table.keys.iter_mut().zip(self.marks.iter_mut()) {
            let next = slot.sealer.next_counter();
            if next.saturating_add(MARK_BLOCK / 2) > *reserved {
                let r = reserved.saturating_add(MARK_BLOCK);
                match self.dir.write_u64(name, r) {
                    Ok(()) => {
                        *reserved = r;
                        slot.sealer.extend(r.saturating_add(1));
                    }
                    Err(e) => tracing::error!("pilsc: cannot write the counter mark {name}: {e}"),
                }
            }
        }
    }

    /// Raises the receive ceilings of sources whose traffic nears them: by about [`RX_BLOCK_MILLIS`] of the
    /// source's recent rate (at least [`RX_MIN_BLOCK`]), synced before the window gets there.
    fn rx_top_up(&mut self) {
        let now = std::time::Instant::now();
        for (k, slot) in self.table.keys.iter_mut().enumerate() {
            let name = &self.marks[k].0;
            self.due.clear();
            self.due.extend(slot.opener.sources());
            for &(src, top, ceiling) in &self.due {
                let r = self
                    .rates
                    .entry((k, src))
                    .or_insert((top, now, RX_MIN_BLOCK));
                let dt = now.duration_since(r.1);
                // The rate, measured over at least 20 ms (a burst right after a start gets its block at once).
                if dt >= Duration::from_millis(20) {
                    let per_block = (top.saturating_sub(r.0) as u128 * RX_BLOCK_MILLIS as u128
                        / dt.as_millis().max(1)) as u64;
                    *r = (top, now, per_block.max(RX_MIN_BLOCK));
                }
                let block = r.2;
                if top.saturating_add(block / 2) > ceiling {
                    let c = top.saturating_add(block);
                    match self.dir.write_u64(&rx_file(name, src), c) {
                        Ok(()) => slot.opener.set_ceiling(src, c),
                        Err(e) => tracing::error!("pilsc: cannot write a receive floor: {e}"),
                    }
                }
            }
        }
    }

    /// Puts a reloaded rule file in force (between two batches). Keys of the old table (same bytes, same
    /// algorithm) move over with their sealer and opener: counters and replay windows continue; new keys start
    /// above their marks, reserved and synced first. Nothing changes if that fails.
    fn apply(&mut self, file: RuleFile, keys: Keys) -> std::result::Result<String, String> {
        let old: std::collections::HashMap<String, usize> = self
            .marks
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), i))
            .collect();
        let mut marks: Vec<(String, u64, Option<usize>)> = Vec::new();
        let mut errors = Vec::new();
        let dir = &self.dir;
        let mut table = Table::build(&file, &keys, &self.settings, |id, cipher, key| {
            let name = mark_file(cipher, key);
            if let Some(&i) = old.get(&name) {
                marks.push((name, 0, Some(i)));
                return (1, 2);
            }
            match dir.read_mark(&name, "pilsc.state_dir", &format!("pilsc key {id:#06x}")) {
                Ok(m) => {
                    let reserved = m.saturating_add(MARK_BLOCK);
                    marks.push((name, reserved, None));
                    (m + 1, reserved.saturating_add(1))
                }
                Err(e) => {
                    errors.push(e.reason);
                    (1, 1)
                }
            }
        })
        .map_err(|e| e.to_string())?;
        if let Some(e) = errors.into_iter().next() {
            return Err(e);
        }
        for (name, reserved, was) in &marks {
            if was.is_none() {
                dir.write_u64(name, *reserved)
                    .map_err(|e| format!("cannot write {name}: {e}"))?;
            }
        }
        // Committed from here on.
        let (mut kept, mut new) = (0, 0);
        let mut new_marks = Vec::with_capacity(marks.len());
        for (i, (name, reserved, was)) in marks.into_iter().enumerate() {
            match was {
                Some(j) => {
                    let (a, b) = (&mut table.keys[i], &mut self.table.keys[j]);
                    std::mem::swap(&mut a.sealer, &mut b.sealer);
                    std::mem::swap(&mut a.opener, &mut b.opener);
                    new_marks.push(self.marks[j].clone());
                    kept += 1;
                }
                None => {
                    new_marks.push((name, reserved));
                    new += 1;
                }
            }
        }
        // Keys that go: their marks become the last counter used.
        let staying: std::collections::HashSet<&String> =
            new_marks.iter().map(|(n, _)| n).collect();
        for (j, (name, _)) in self.marks.iter().enumerate() {
            if !staying.contains(name) {
                let used = self.table.keys[j].sealer.next_counter().saturating_sub(1);
                let _ = self.dir.write_u64(name, used);
            }
        }
        let db = netveil_pilsc::policy::compile(&file, &table.rule_key);
        let stats = Arc::new(Stats::new(file.rules.len()));
        stats
            .passed
            .store(self.stats.passed.load(Ordering::Relaxed), Ordering::Relaxed);
        for (a, b) in stats.drops.iter().zip(&self.stats.drops) {
            a.store(b.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        let n_keys = table.keys.len();
        self.table = table;
        // (The cache forgets every flow: its answers name the old table's keys.)
        self.db.replace(db);
        self.marks = new_marks;
        self.rates.clear();
        self.stats = stats.clone();
        *self.shared.view.lock().unwrap_or_else(|e| e.into_inner()) =
            (stats, Arc::new(rule_infos(&file)), n_keys);
        Ok(format!(
            "{} rules, {n_keys} keys ({kept} kept with their counters, {new} new)",
            file.rules.len()
        ))
    }

    /// A clean stop: each key's mark becomes the last counter used, each source's receive floor the highest
    /// counter accepted (nothing above it was).
    fn finish(&mut self) {
        for (k, slot) in self.table.keys.iter().enumerate() {
            for (src, top, _) in slot.opener.sources() {
                if let Err(e) = self.dir.write_u64(&rx_file(&self.marks[k].0, src), top) {
                    tracing::error!("pilsc: cannot write a receive floor: {e}");
                }
            }
        }
        for (slot, (name, _)) in self.table.keys.iter().zip(&self.marks) {
            let used = slot.sealer.next_counter().saturating_sub(1);
            if let Err(e) = self.dir.write_u64(name, used) {
                tracing::error!("pilsc: cannot write the counter mark {name}: {e}");
            }
        }
    }

    fn outbound(&mut self, b: &mut PacketBuf) -> Verdict {
        let Some(key) = flow_key(b.data()) else {
            // Not IPv4 we can read: the queue holds only IPv4, so a packet we cannot parse goes nowhere.
            return self.stats.dropped(Reason::Malformed);
        };
        // The action names the key itself (see `compile`); `Discard` is a protected rule without one.
        let (r, k) = match self.db.lookup(Direction::Out, &key) {
            (Some(at), Action::Protect(k)) => (file_rule(at), k),
            (_, Action::Discard) => return self.stats.dropped(Reason::Policy),
            _ => {
                self.stats.passed.fetch_add(1, Ordering::Relaxed);
                return Verdict::Accept;
            }
        };
        clamp_mss(b.data_mut(), self.mode.option_len() as u16);
        let (start, len) = (b.headroom(), b.len());
        match self.table.keys[k].sealer.seal(b.storage_mut(), start, len) {
            Ok((s, l)) => {
                b.reset(s);
                b.set_len(l);
                self.stats.hit(r, false, l);
                Verdict::AcceptChanged
            }
            Err(SealError::Exhausted) => self.stats.dropped(Reason::Exhausted),
            Err(_) => self.stats.dropped(Reason::SealFailed),
        }
    }

    fn inbound(&mut self, b: &mut PacketBuf) -> Verdict {
        let m = match marking(b.data()) {
            Ok(m) => m,
            Err(_) => return self.stats.dropped(Reason::Malformed),
        };
        let Some(m) = m else {
            // Clear: only where no protected rule covers it.
            let Some(key) = flow_key(b.data()) else {
                return self.stats.dropped(Reason::Malformed);
            };
            return match self.db.lookup(Direction::In, &key) {
                (_, Action::Protect(_) | Action::Discard) => {
                    self.stats.dropped(Reason::ClearCovered)
                }
                _ => {
                    self.stats.passed.fetch_add(1, Ordering::Relaxed);
                    Verdict::Accept
                }
            };
        };
        let src = match netveil_wire::ipv4::Packet::new_checked(b.data()) {
            Ok(p) => p.src_addr(),
            Err(_) => return self.stats.dropped(Reason::Malformed),
        };
        let Some(k) = self.table.key_for(m.key_id, src) else {
            return self.stats.dropped(Reason::UnknownKey);
        };
        let (start, len) = (b.headroom(), b.len());
        let mut floors = RxFloors {
            dir: &self.dir,
            name: &self.marks[k].0,
        };
        match self.table.keys[k]
            .opener
            .open_with(b.storage_mut(), start, len, &mut floors)
        {
            Ok((s, l)) => {
                b.reset(s);
                b.set_len(l);
                if !nop_in_place_of_option(b, self.mode.option_len()) {
                    return self.stats.dropped(Reason::Malformed);
                }
            }
            Err(e) => {
                return self.stats.dropped(match e {
                    OpenError::Replay => Reason::Replay,
                    OpenError::Auth => Reason::Auth,
                    OpenError::Checksum => Reason::Checksum,
                    OpenError::WrongMode => Reason::WrongMode,
                    OpenError::WrongKey => Reason::UnknownKey,
                    OpenError::TooManySources => Reason::TooManySources,
                    OpenError::State => Reason::RxState,
                    OpenError::Malformed | OpenError::Fragment | OpenError::Unmarked => {
                        Reason::Malformed
                    }
                })
            }
        }
        // The clear headers must select a protected rule of this very key.
        let Some(key) = flow_key(b.data()) else {
            return self.stats.dropped(Reason::Malformed);
        };
        match self.db.lookup(Direction::In, &key) {
            (Some(at), Action::Protect(key)) if key == k => {
                self.stats.hit(file_rule(at), true, b.len());
                Verdict::AcceptChanged
            }
            _ => self.stats.dropped(Reason::Policy),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str, rules: &str) -> std::result::Result<PilscConfig, ConfigError> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("nv-pilsc-cfg-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("p.rules"), rules).unwrap();
        let v: toml::Table = toml::from_str(text).unwrap();
        let r = PilscConfig::from_section(v.get("pilsc").cloned().unwrap(), &dir);
        let _ = std::fs::remove_dir_all(&dir);
        r
    }

    const RULES: &str = "Rule = 1; Security = true; IP = 10.0.0.2; Protocol = TCP; Port = 5001; \
        Encryption = 1; Applmode = Server; Key = 0x000102030405060708090a0b0c0d0e0f;\n";

    #[test]
    fn a_section_parses_and_each_bad_key_is_named() {
        let c = cfg("[pilsc]\nrules = \"p.rules\"\n", RULES).unwrap();
        assert_eq!(c.mode, Mode::Authenticated);
        assert_eq!(c.queue, 0);
        assert_eq!(c.file.rules.len(), 1);
        assert_eq!(
            c.queued_prefixes().unwrap(),
            vec!["10.0.0.2/32".parse::<Ipv4Net>().unwrap()]
        );
        for (text, key) in [
            ("[pilsc]\n", "pilsc.rules"),
            (
                "[pilsc]\nrules = \"p.rules\"\nmode = \"fast\"\n",
                "pilsc.mode",
            ),
            (
                "[pilsc]\nrules = \"p.rules\"\nqueue = 65535\n",
                "pilsc.queue",
            ),
            (
                "[pilsc]\nrules = \"p.rules\"\niptables = \"nft\"\n",
                "pilsc.iptables",
            ),
            (
                "[pilsc]\nrules = \"p.rules\"\nreplay_window = 1\n",
                "pilsc.replay_window",
            ),
            ("[pilsc]\nrules = \"missing.rules\"\n", "pilsc.rules"),
            ("[pilsc]\nrules = \"p.rules\"\nbogus = 1\n", "pilsc"),
        ] {
            let e = cfg(text, RULES).err().unwrap_or_else(|| panic!("{text}"));
            assert!(e.key.starts_with(key), "{text}: {e:?}");
        }
        // A rule-file error names the file and its line.
        let e = cfg(
            "[pilsc]\nrules = \"p.rules\"\n",
            "Rule = 1; Security = maybe;\n",
        )
        .err()
        .unwrap();
        assert_eq!(e.key, "pilsc.rules");
        assert!(e.reason.contains("line 1"), "{}", e.reason);
        // A key too short for its algorithm is refused at parse time.
        let short = RULES.replace("0x000102030405060708090a0b0c0d0e0f", "0x0001020304050607");
        let e = cfg("[pilsc]\nrules = \"p.rules\"\n", &short).err().unwrap();
        assert_eq!(e.key, "pilsc.rules");
    }

    #[test]
    fn the_mss_of_a_syn_is_lowered_and_its_checksum_holds() {
        use netveil_wire::{ipv4, tcp};
        // 10.0.0.1:40000 -> 10.0.0.2:5001 SYN with NOP, MSS 1460, NOP, NOP, SACK-permitted.
        let mut pkt = vec![0u8; 20 + 32];
        {
            let mut p = ipv4::Packet::new_unchecked(&mut pkt[..]);
            p.set_version(4);
            p.set_header_len(20);
            p.set_total_len(52);
            p.set_ttl(64);
            p.set_protocol(6);
            p.set_src_addr("10.0.0.1".parse().unwrap());
            p.set_dst_addr("10.0.0.2".parse().unwrap());
            p.fill_checksum();
        }
        {
            let mut t = tcp::Packet::new_unchecked(&mut pkt[20..]);
            t.set_src_port(40000);
            t.set_dst_port(5001);
            t.set_header_len(32);
            t.set_flags(0x002);
            t.options_mut()
                .copy_from_slice(&[1, 2, 4, 0x05, 0xb4, 1, 1, 4, 2, 0, 0, 0]);
        }
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        tcp::Packet::new_unchecked(&mut pkt[20..]).fill_checksum(a, b);
        clamp_mss(&mut pkt, 28);
        let t = tcp::Packet::new_unchecked(&pkt[20..]);
        assert_eq!(&t.options()[1..5], &[2, 4, 0x05, 0x98]);
        assert!(t.verify_checksum(a, b));
        // Not a SYN: unchanged.
        let mut ack = pkt.clone();
        tcp::Packet::new_unchecked(&mut ack[20..]).set_flags(0x010);
        let before = ack.clone();
        clamp_mss(&mut ack, 28);
        assert_eq!(ack, before);
    }

    #[test]
    fn rules_as_toml_tables_load_as_the_file_does() {
        let toml_rules = "[pilsc]\n[[pilsc.rule]]\nrule = 1\nsecurity = true\nip = \"10.0.0.2\"\nprotocol = \"tcp\"\n\
                          port = 5001\nencryption = 1\napplmode = \"server\"\n\
                          key = \"0x000102030405060708090a0b0c0d0e0f\"\n";
        let t = cfg(toml_rules, "").unwrap();
        let f = cfg("[pilsc]\nrules = \"p.rules\"\n", RULES).unwrap();
        assert_eq!(t.source, RuleSource::Toml);
        let strip = |r: &netveil_pilsc::rules::Rule| {
            (r.number, r.peer, r.protocol, r.port, r.protect.clone())
        };
        assert_eq!(
            t.file.rules.iter().map(strip).collect::<Vec<_>>(),
            f.file.rules.iter().map(strip).collect::<Vec<_>>()
        );
        // Errors name the key; a short key is refused by the key table, named by its entry.
        let e = cfg(&toml_rules.replace("port = 5001", "port = 70000"), "")
            .err()
            .unwrap();
        assert_eq!(e.key, "pilsc.rule[0].port", "{e:?}");
        let e = cfg(&toml_rules.replace("0e0f", ""), "").err().unwrap();
        assert!(e.key.starts_with("pilsc.rule[0]"), "{e:?}");
        let e = cfg(
            &format!("{toml_rules}rules = \"p.rules\"\n")
                .replace("[pilsc]\n[[", "[pilsc]\nrules = \"p.rules\"\n[["),
            RULES,
        )
        .err()
        .unwrap();
        assert_eq!(e.key, "pilsc.rule");
    }

    #[test]
    fn mark_files_differ_by_key_and_cipher_and_hide_the_key() {
        let a = mark_file(Cipher::Aes128, &[1; 16]);
        assert_ne!(a, mark_file(Cipher::Aes128, &[2; 16]));
        assert_ne!(a, mark_file(Cipher::ChaCha20, &[1; 16]));
        assert!(!a.contains("0101"));
    }
}
