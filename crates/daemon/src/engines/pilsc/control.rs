//! The PILSC engine's shared state: its drop reasons and counters, the rule file in force, `status` and the
//! control socket's requests.

use super::config::mode_name;
use super::config::{
    cerr, literal_keys, queued_prefixes, read_key_file, read_rule_file, PilscConfig, RuleSource,
};
use super::rules::{chain_rules, load_chains};
use crate::runtime::config::ConfigError;
use crate::runtime::engine::Control;
use netveil_io::nfqueue::Verdict;
use netveil_pilsc::packet::Mode;
use netveil_pilsc::rules::{Keys, RuleFile};
use netveil_pilsc::table::{Settings, Table};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub(super) enum Reason {
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
    /// A protected packet (going out or coming in) with IPv4 options besides option 130.
    IpOptions,
    /// An ICMP error without option 130 that quotes a protected flow (coming in).
    IcmpErrorInClear,
    /// An ICMP error whose quote cannot be read (whether it quotes a protected flow cannot be told).
    IcmpErrorUnreadable,
}

pub(super) const DROP_NAMES: [&str; 15] = [
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
    "ip_options",
    "icmp_error_in_clear",
    "icmp_error_unreadable",
];

pub(super) struct Stats {
    /// Per rule: packets and bytes out, packets and bytes in.
    pub(super) rules: Vec<[AtomicU64; 4]>,
    pub(super) passed: AtomicU64,
    pub(super) drops: [AtomicU64; 15],
}

impl Stats {
    pub(super) fn new(n: usize) -> Stats {
        Stats {
            rules: (0..n).map(|_| Default::default()).collect(),
            passed: AtomicU64::new(0),
            drops: Default::default(),
        }
    }
    pub(super) fn dropped(&self, d: Reason) -> Verdict {
        self.drops[d as usize].fetch_add(1, Ordering::Relaxed);
        Verdict::Drop
    }
    pub(super) fn hit(&self, rule: usize, inbound: bool, bytes: usize) {
        let o = if inbound { 2 } else { 0 };
        self.rules[rule][o].fetch_add(1, Ordering::Relaxed);
        self.rules[rule][o + 1].fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

pub(super) struct RuleInfo {
    pub(super) number: u32,
    pub(super) peer: String,
    pub(super) protocol: String,
    pub(super) security: bool,
    pub(super) encryption: Option<String>,
}

pub(super) struct Shared {
    /// What `status` shows of the rules in force: their counters, the rules, the number of keys (replaced by a
    /// reload).
    pub(super) view: std::sync::Mutex<(Arc<Stats>, Arc<Vec<RuleInfo>>, usize)>,
    pub(super) mode: Mode,
    pub(super) queues: (u16, u16),
    pub(super) iptables: String,
    /// For a reload: where the rules and keys are, how the table is built, the worker's mailbox, the chains.
    pub(super) source: RuleSource,
    /// The configuration file: where `[[pilsc.rule]]` tables are read again.
    pub(super) config: Option<PathBuf>,
    pub(super) keys_path: Option<PathBuf>,
    pub(super) settings: Settings,
    pub(super) reload_tx: std::sync::Mutex<std::sync::mpsc::Sender<ReloadMsg>>,
    pub(super) chains: (String, String),
}

/// A reload for the worker: the new rules and keys, and where its answer goes.
pub(super) struct ReloadMsg {
    pub(super) file: RuleFile,
    pub(super) keys: Keys,
    pub(super) reply: std::sync::mpsc::Sender<std::result::Result<String, String>>,
}

pub(super) fn rule_infos(file: &RuleFile) -> Vec<RuleInfo> {
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

/// Why a reload was refused.
#[derive(Debug)]
pub(super) enum ReloadError {
    /// The files (or the configuration's tables) did not load: their errors, each naming its key; nothing
    /// changed. `netveil reload` exits with code 2, as for any bad configuration.
    Files(String),
    /// The files loaded, but putting them in force failed (the worker, the queue chains).
    InForce(String),
}

impl std::fmt::Display for ReloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReloadError::Files(e) | ReloadError::InForce(e) => f.write_str(e),
        }
    }
}

impl Shared {
    /// `netveil reload` / SIGHUP: reads the rule file and the key file again (or the configuration's
    /// `[[pilsc.rule]]` tables: [`Shared::reload_tables`]) and, if they load, puts them in force
    /// without a gap: the worker switches between two batches (keys that stay keep their counters and replay
    /// windows; new keys continue from their marks), then the queue chains are replaced in one transaction. If
    /// anything fails, nothing changed.
    pub(super) fn reload(&self) -> std::result::Result<String, ReloadError> {
        let (file, keys) = self.reload_files().map_err(ReloadError::Files)?;
        self.put_in_force(file, keys).map_err(ReloadError::InForce)
    }

    /// The rules and keys a reload would put in force, read and checked as at start-up (the files through
    /// [`crate::runtime::secret_file`]: a file that another user could have changed is refused).
    fn reload_files(&self) -> std::result::Result<(RuleFile, Keys), String> {
        Ok(match &self.source {
            RuleSource::File(path) => {
                // The same reads, and checks of the files, as at start-up.
                let (file, warning) = read_rule_file(path).map_err(|e| e.to_string())?;
                let keys = match &self.keys_path {
                    None => Keys::none(),
                    Some(p) => read_key_file(p).map_err(|e| e.to_string())?,
                };
                if let Some(w) = warning {
                    tracing::warn!("pilsc: {w}");
                }
                Table::build(&file, &keys, &self.settings, |_, _, _| (1, 2))
                    .map_err(|e| format!("{}:\n{e}", crate::runtime::secret_file::shown(path)))?;
                (file, keys)
            }
            RuleSource::Toml => self.reload_tables()?,
        })
    }

    /// Puts checked rules and keys in force (see [`Shared::reload`]).
    fn put_in_force(&self, file: RuleFile, keys: Keys) -> std::result::Result<String, String> {
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
    pub(super) fn reload_tables(&self) -> std::result::Result<(RuleFile, Keys), String> {
        let Some(path) = &self.config else {
            return Err("the rules are [[pilsc.rule]] tables, and this daemon does not know its configuration \
                        file: restart it to change them"
                .into());
        };
        let file = crate::runtime::secret_file::read_config(path).map_err(|e| e.to_string())?;
        let text = file.text().map_err(|e| e.to_string())?;
        let bad = |e: ConfigError| format!("{}: {e}", path.display());
        let top: toml::Table = toml::from_str(text).map_err(|e| {
            format!(
                "{}: {}",
                path.display(),
                crate::runtime::config::toml_error(text, &e)
            )
        })?;
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
        if file.readable_by_others() && literal_keys(&c.file) > 0 {
            tracing::warn!(
                "pilsc: {}",
                crate::runtime::secret_file::readable_note(path, file.mode, "keys written in it")
            );
        }
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

pub(super) struct PilscControl(pub(super) Arc<Shared>);

impl Control for PilscControl {
    fn answer(&self, req: &netveil_control::Request) -> Option<serde_json::Value> {
        match req {
            netveil_control::Request::Reload => Some(match self.0.reload() {
                Ok(m) => {
                    tracing::info!("pilsc: reloaded: {m}");
                    serde_json::json!({ "reloaded": m })
                }
                Err(ReloadError::Files(e)) => {
                    tracing::warn!("pilsc: reload refused, nothing changed: {e}");
                    serde_json::json!({ "error": e, "config": true })
                }
                Err(ReloadError::InForce(e)) => {
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
