//! The `[pilsc]` section: its keys, the rule file and key file it names (read once, checked through the
//! descriptor), the queue number and the state directory.

use crate::runtime::config::ConfigError;
use ipnet::Ipv4Net;
use netveil_pilsc::packet::Mode;
use netveil_pilsc::rules::{Keys, RuleFile};
use netveil_pilsc::table::{Settings, Table};
use serde::Deserialize;
use std::path::{Path, PathBuf};

pub(super) fn cerr(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// Above this many distinct protected peer prefixes, all of the host's own unicast traffic is queued instead of
/// one iptables rule per prefix.
pub const MAX_QUEUE_PREFIXES: usize = 256;

/// The top-level key it owns.
pub const SECTIONS: [&str; 1] = ["pilsc"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    rules: Option<String>,
    rule: Option<Vec<toml::Table>>,
    pub(super) keys: Option<String>,
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
    pub(super) fn unit(&self) -> &'static str {
        match self {
            RuleSource::File(_) => "line",
            RuleSource::Toml => "entry",
        }
    }

    /// The key table's errors (missing keys, lengths, collisions) as a configuration error naming the key.
    pub(super) fn error(&self, e: &netveil_pilsc::rules::Errors) -> ConfigError {
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
pub(super) fn key_errors(e: &netveil_pilsc::rules::KeyErrors) -> ConfigError {
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
    pub(super) keys: Keys,
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
pub(super) fn literal_keys(file: &RuleFile) -> usize {
    file.rules
        .iter()
        .filter(|r| {
            r.protect
                .as_ref()
                .is_some_and(|p| matches!(p.key, netveil_pilsc::rules::KeyRef::Literal(_)))
        })
        .count()
}

pub(super) fn int(
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

    pub(super) fn settings(&self) -> Settings {
        Settings {
            mode: self.mode,
            window: self.replay_window,
            max_sources: self.max_sources,
        }
    }

    pub(super) fn chains(&self) -> (String, String) {
        (
            format!("NVPILSC{}-OUT", self.queue),
            format!("NVPILSC{}-IN", self.queue),
        )
    }

    /// The distinct peer prefixes of the protected rules, or `None` when there are too many to queue one by one.
    pub(super) fn queued_prefixes(&self) -> Option<Vec<Ipv4Net>> {
        queued_prefixes(&self.file)
    }
}

/// [`PilscConfig::queued_prefixes`] of a rule file.
pub(super) fn queued_prefixes(file: &RuleFile) -> Option<Vec<Ipv4Net>> {
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

pub(super) fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Authenticated => "authenticated",
        Mode::Confidential => "confidential (no integrity)",
    }
}
