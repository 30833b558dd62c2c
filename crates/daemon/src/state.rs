//! The daemon's persistent state: small values that must survive restarts and crashes, so that a restarted
//! daemon never reuses a (key, nonce) pair and its peers accept it at once.
//!
//! - Sequence-number reservations of outbound SAs with static keys (see [`SeqStore`]): a sender never hands out a
//!   number above the mark it has synced to disk, and a restart continues above that mark.
//! - l2sec's group epoch: strictly increasing across restarts of a host.
//!
//! The directory (`state_dir`, default [`DEFAULT_STATE_DIR`]) is created mode 0700. Each value lives in its own file
//! of one decimal line, replaced atomically: written to a temporary file, synced, renamed over the old one, and the
//! directory synced, so a crash at any moment leaves either the old or the new value. A file that does not parse is
//! an error (the daemon refuses to start rather than guess a mark), never silently reset.
//!
//! What the directory must be (checked by [`StateDir::open`] and [`StateDir::check`], errors naming the key that
//! chose it):
//!
//! - **Only root's** (or the daemon's own user's, for a daemon that does not run as root), like sshd's
//!   `StrictModes`: the directory and every directory above it, up to `/`, along the path as written and along the
//!   path that its symbolic links resolve to, is owned by root (or that user) and not writable by its group or
//!   others. Whoever can write there can remove a mark and make the daemon reuse nonces. A sticky, world-writable
//!   directory such as `/tmp` or `/var/tmp` is refused too: its entries are removed by age by tmp cleaners
//!   (systemd-tmpfiles) and anyone may create a path there first.
//! - **Persistent**: a directory on a tmpfs or ramfs loses every mark at a reboot, and a restart after it would
//!   send sequence numbers 1, 2, 3 again under the same keys. It is refused unless `allow_volatile_state = true`
//!   says the operator knows (then every start warns).
//! - **Known**: the file [`SENTINEL`] records that the directory has held the daemon's state since it was
//!   initialised. With it, a key without a mark was never used with this directory and starts at 1. Without it
//!   (a new directory, or one whose contents were lost: a tmpfs after a reboot, a wiped or replaced disk), a missing
//!   mark proves nothing: an outbound SA whose keys have no mark is refused ([`StateDir::read_mark`]) until the
//!   operator confirms fresh keys (`netveil up --fresh-keys`), which writes the record. Keys that have a mark
//!   continue above it either way.

use crate::error::ConfigError;

use netveil_ipsec::sa::Direction;
use netveil_ipsec::{InboundSa, OutboundSa, RxState, SaParams};
use netveil_sa::seq::SeqCounter;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the daemon keeps its state unless `state_dir` says otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/netveil";

/// The file that records that a state directory was initialised (with `netveil up --fresh-keys`) and has held the
/// daemon's marks since: one line naming it, a random id and the time it was written.
pub const SENTINEL: &str = "netveil-state";

/// A state directory as the configuration gives it, with what the operator allowed for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateLocation {
    /// `state_dir`.
    pub path: PathBuf,
    /// `allow_volatile_state = true`: a directory on a tmpfs or ramfs is accepted (every start warns).
    pub allow_volatile: bool,
    /// `netveil up --fresh-keys` (never from the file): the keys of outbound SAs without a mark are new, so a
    /// directory without its [`SENTINEL`] is initialised (see [`StateDir::open`]).
    pub fresh_keys: bool,
}

impl StateLocation {
    /// `path`, persistent storage required, no confirmation of fresh keys.
    pub fn new(path: impl Into<PathBuf>) -> StateLocation {
        StateLocation {
            path: path.into(),
            allow_volatile: false,
            fresh_keys: false,
        }
    }
}

/// A writable state directory.

#[derive(Debug, Clone)]
pub struct StateDir {
    path: PathBuf,
    /// Its [`SENTINEL`] exists: a missing mark is a key never used with this directory.
    known: bool,
}

fn cerr(key: &str, reason: String) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        reason,
    }
}

/// Whether the directory `dir` holds its [`SENTINEL`] (a regular file, not a link).
fn has_sentinel(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join(SENTINEL)).is_ok_and(|m| m.is_file())
}

/// The nearest existing directory at or above `path` (what [`StateDir::open`] would create the directory in).
fn nearest_existing(path: &Path) -> &Path {
    let mut p = path;
    while !p.exists() {
        match p.parent() {
            Some(q) if !q.as_os_str().is_empty() => p = q,
            _ => break,
        }
    }
    p
}

/// Whether `dir` (an existing directory) and every directory above it may hold the state (see the module
/// documentation): owned by root or by this process's user, not writable by group or others; checked along the
/// path as written and along its resolved form. Errors name `key`; `wanted` is the configured path.
fn only_root_may_write(dir: &Path, wanted: &Path, key: &str) -> Result<(), ConfigError> {
    let me = netveil_io::os::euid();
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| cerr(key, format!("cannot resolve {}: {e}", dir.display())))?
            .join(dir)
    };
    let real = std::fs::canonicalize(&abs)
        .map_err(|e| cerr(key, format!("cannot resolve {}: {e}", abs.display())))?;
    for p in abs.ancestors().chain(real.ancestors()) {
        if p.as_os_str().is_empty() {
            continue;
        }
        let m = std::fs::metadata(p).map_err(|e| {
            cerr(
                key,
                format!(
                    "cannot use {} as the state directory: {}: {e}",
                    wanted.display(),
                    p.display()
                ),
            )
        })?;
        let why = if m.uid() != 0 && m.uid() != me {
            format!("{} is owned by user {}, not by root", p.display(), m.uid())
        } else if m.mode() & 0o022 != 0 {
            format!(
                "{} is writable by its group or others (mode {:o}{})",
                p.display(),
                m.mode() & 0o7777,
                if m.mode() & 0o1000 != 0 {
                    "; sticky directories such as /tmp are refused too: tmp cleaners remove old files there"
                } else {
                    ""
                }
            )
        } else {
            continue;
        };
        return Err(cerr(
            key,
            format!(
                "cannot use {} as the state directory: {why}; whoever can write there can remove a \
                 sequence-number mark and make netveil reuse nonces: give a directory on a path that only root \
                 can write, such as {DEFAULT_STATE_DIR}",
                wanted.display()
            ),
        ));
    }
    Ok(())
}

/// The file system of `dir` if it loses its contents at a reboot (tmpfs, ramfs): refused unless `loc` allows it;
/// `Ok(Some(kind))` when allowed.
fn volatile(
    loc: &StateLocation,
    dir: &Path,
    key: &str,
) -> Result<Option<&'static str>, ConfigError> {
    let kind = netveil_io::os::volatile_fs(dir).map_err(|e| {
        cerr(
            key,
            format!("cannot tell the file system of {}: {e}", dir.display()),
        )
    })?;
    match kind {
        Some(k) if !loc.allow_volatile => Err(cerr(
            key,
            format!(
                "{} is on a {k}, which loses every sequence-number mark at a reboot: a restart after one would \
                 send sequence numbers 1, 2, 3 again under the same keys (nonce reuse); give a directory on \
                 persistent storage, or set allow_volatile_state = true in the same section if you know (new \
                 keys after every reboot, confirmed with `netveil up --fresh-keys`)",
                loc.path.display()
            ),
        )),
        k => Ok(k),
    }
}

impl StateDir {
    /// Opens (creating it, mode 0700) the state directory of `loc` and checks that a value can be written and
    /// synced there, that it is only root's and persistent (see the module documentation; a volatile one that
    /// `loc` allows is logged as a warning), and whether it holds its [`SENTINEL`] (written now if `loc` confirms
    /// fresh keys). Errors name `key`, the configuration key that chose the directory.
    pub fn open(loc: &StateLocation, key: &str) -> Result<StateDir, ConfigError> {
        let path = loc.path.as_path();
        let why = |e: std::io::Error| {
            cerr(
                key,
                format!(
                    "cannot use {} as the state directory ({e}); netveil keeps sequence-number marks there so that a \
                     restart never reuses a nonce: give a writable directory",
                    path.display()
                ),
            )
        };
        if !path.is_dir() {
            // Nothing is created in a place that could not hold the state.
            let above = nearest_existing(path);
            if above.is_dir() {
                only_root_may_write(above, path, key)?;
                volatile(loc, above, key)?;
            }
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(why)?;
        }
        only_root_may_write(path, path, key)?;
        let kind = volatile(loc, path, key)?;
        let meta = std::fs::metadata(path).map_err(why)?;
        if meta.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(why)?;
        }
        if let Some(kind) = kind {
            tracing::warn!(
                "the state directory {} is on a {kind} (allow_volatile_state = true): its sequence-number marks \
                 are lost at a reboot; after one, outbound SAs need new keys, confirmed with `netveil up \
                 --fresh-keys`",
                path.display()
            );
        }
        let mut d = StateDir {
            path: path.to_path_buf(),
            known: false,
        };
        d.write_u64(".probe", 0).map_err(why)?;
        let _ = std::fs::remove_file(path.join(".probe"));
        let sentinel = path.join(SENTINEL);
        d.known = has_sentinel(path);
        if !d.known && loc.fresh_keys {
            let mut id = [0u8; 16];
            netveil_crypto::rand::fill_random(&mut id);
            let since = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            netveil_control::write_private(
                &sentinel,
                format!(
                    "netveil state directory (initialised with --fresh-keys)\nid {}\nsince {since}\n",
                    hex::encode(id)
                )
                .as_bytes(),
            )
            .map_err(why)?;
            tracing::info!(
                "state directory {} initialised (--fresh-keys): keys without a sequence mark start at 1",
                path.display()
            );
            d.known = true;
        }
        Ok(d)
    }

    /// Whether [`StateDir::open`] would succeed, without creating or writing anything: the directory, or the
    /// nearest existing parent it would be created in, must be a writable directory, only root's, and persistent
    /// unless `loc` allows otherwise. Returns a note for `netveil check`: a volatile directory, or one without its
    /// [`SENTINEL`] (then `up` needs `--fresh-keys` for keys without a mark).
    pub fn check(loc: &StateLocation, key: &str) -> Result<Option<String>, ConfigError> {
        let path = loc.path.as_path();
        let p = nearest_existing(path);
        if p.as_os_str().as_encoded_bytes().contains(&0) {
            return Err(cerr(
                key,
                format!("{} is not a usable path", path.display()),
            ));
        }
        let ok = netveil_io::os::may_write_dir(p);
        if !ok {
            return Err(cerr(
                key,
                format!(
                    "{} cannot hold the state directory ({} is not a writable directory); netveil keeps \
                     sequence-number marks there so that a restart never reuses a nonce",
                    path.display(),
                    p.display()
                ),
            ));
        }
        only_root_may_write(p, path, key)?;
        let mut notes = Vec::new();
        if let Some(kind) = volatile(loc, p, key)? {
            notes.push(format!(
                "the state directory {} is on a {kind} (allow_volatile_state = true): its marks are lost at a reboot",
                path.display()
            ));
        }
        if !has_sentinel(path) {
            notes.push(format!(
                "the state directory {} has no {SENTINEL} record (new, or its contents were lost): `up` refuses \
                 outbound SAs whose keys have no sequence mark there until `netveil up --fresh-keys` confirms \
                 that they are new keys",
                path.display()
            ));
        }
        Ok((!notes.is_empty()).then(|| notes.join("; ")))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the directory holds its [`SENTINEL`] (so a missing mark is a key never used with it).
    pub fn is_known(&self) -> bool {
        self.known
    }

    /// The sequence mark `name` of the outbound SA `sa` (0: keys never used with this directory). A missing mark
    /// in a directory without its [`SENTINEL`] is an error that names `key` and says what to do: those keys may
    /// have been used with the state that was lost, and starting them at 1 could repeat a nonce.
    pub fn read_mark(&self, name: &str, key: &str, sa: &str) -> Result<u64, ConfigError> {
        match self.read_u64(name).map_err(|e| cerr(key, e))? {
            Some(m) => Ok(m),
            // (The record may have been written since the directory was opened: a daemon's runtime store is
            // opened once.)
            None if self.known || has_sentinel(&self.path) => Ok(0),
            None => Err(cerr(
                key,
                format!(
                    "SA '{sa}': its keys have no sequence mark in {dir}, and {dir} holds no {SENTINEL} record \
                     (it is new, or what it held was lost: a tmpfs after a reboot, a wiped or replaced disk): \
                     these keys may have sent sequence numbers before, which a start at 1 would send again \
                     (nonce reuse). Configure new keys for it and confirm with `netveil up --fresh-keys` (once: \
                     it records the directory)",
                    dir = self.path.display()
                ),
            )),
        }
    }

    /// [`StateDir::read_mark`] for an inbound SA's receive floor: missing, it is 0 only where the directory's record
    /// (or `--fresh-keys`) says the keys are new; otherwise packets accepted before the loss would be accepted again.
    pub fn read_floor(&self, name: &str, key: &str, sa: &str) -> Result<u64, ConfigError> {
        match self.read_u64(name).map_err(|e| cerr(key, e))? {
            Some(m) => Ok(m),
            None if self.known || has_sentinel(&self.path) => Ok(0),
            None => Err(cerr(
                key,
                format!(
                    "SA '{sa}': its keys have no receive floor in {dir}, and {dir} holds no {SENTINEL} record \
                     (it is new, or what it held was lost): packets these keys were accepted with before could be \
                     accepted again (replays). Configure new keys for it and confirm with `netveil up --fresh-keys` \
                     (once: it records the directory)",
                    dir = self.path.display()
                ),
            )),
        }
    }

    /// The value stored under `name` (`None` if there is none yet). A file that is not one decimal number is an
    /// error that names it.
    pub fn read_u64(&self, name: &str) -> Result<Option<u64>, String> {
        let p = self.path.join(name);
        match std::fs::read_to_string(&p) {
            Ok(t) => t
                .trim()
                .parse::<u64>()
                .map(Some)
                .map_err(|_| format!("{} is damaged (not a number): remove it only if you also change the keys it belongs to", p.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read {}: {e}", p.display())),
        }
    }

    /// Stores `v` under `name`, durably (see the module documentation) before returning.
    pub fn write_u64(&self, name: &str, v: u64) -> std::io::Result<()> {
        netveil_control::write_private(&self.path.join(name), format!("{v}\n").as_bytes())
    }
}

/// The file in which the IP engine keeps the policies added at runtime (see [`save_runtime_policies`]).
pub fn policies_file(interface: &str) -> String {
    format!("policies-{interface}.toml")
}

/// One policy added at runtime: where it stood among all policies, and its keys (a `[[policy]]` table).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SavedPolicy {
    pub position: usize,
    pub policy: toml::Table,
}

#[derive(serde::Serialize, serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SavedPolicies {
    #[serde(default)]
    runtime: Vec<SavedPolicy>,
}

/// Stores the policies added at runtime to interface `interface`'s engine (they hold no keys: selectors, actions
/// and SA names), durably, before they take effect: a killed daemon's successor restores them, so the traffic they
/// cover stays covered (see the README's "Restarts and crashes"). None: the file goes.
pub fn save_runtime_policies(
    dir: &StateDir,
    interface: &str,
    policies: &[SavedPolicy],
) -> std::io::Result<()> {
    let file = dir.path().join(policies_file(interface));
    if policies.is_empty() {
        return match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let text = toml::to_string(&SavedPolicies {
        runtime: policies.to_vec(),
    })
    .map_err(std::io::Error::other)?;
    netveil_control::write_private(&file, text.as_bytes())
}

/// The policies [`save_runtime_policies`] stored for `interface` (none if there is no file). A file that does not
/// parse is an error naming it (never ignored: it may be all that keeps covered traffic covered).
pub fn load_runtime_policies(
    dir: &StateDir,
    interface: &str,
) -> Result<Vec<SavedPolicy>, ConfigError> {
    let file = dir.path().join(policies_file(interface));
    match std::fs::read_to_string(&file) {
        Ok(t) => toml::from_str::<SavedPolicies>(&t)
            .map(|s| s.runtime)
            .map_err(|_| {
                cerr(
                    "interface.state_dir",
                    format!(
                        "{} is damaged: it holds the policies added at runtime before the last stop or crash; \
                         `netveil down` removes it (and lifts their block)",
                        file.display()
                    ),
                )
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(cerr(
            "interface.state_dir",
            format!("cannot read {}: {e}", file.display()),
        )),
    }
}

/// Sequence numbers reserved ahead per block: a restart skips at most this many numbers of an SA, and at line rate
/// (about 0.6 M packets per second per SA) a block lasts well over a second, so the mark is synced about once a
/// second under full load and never otherwise.
pub const SEQ_BLOCK: u64 = 1 << 20;

/// The sequence-number marks of outbound SAs with static keys. For each key, a file named after a fingerprint of the
/// SA's protocol and keys holds a number that is at least every sequence number ever sent under those keys:
///
/// - at start, the SA continues at `mark + 1` and may use numbers up to `mark + SEQ_BLOCK`, written (synced)
///   before the first packet;
/// - while it runs, [`SeqStore::top_up`] writes the next block's end once half of the current block is used, and
///   only then lets the data plane go on (a data plane that catches up drops, never sends an unreserved number);
/// - on a clean stop, [`SeqStore::finish`] writes the last number used, so no numbers are skipped.
///
/// A crash (kill -9, power loss) skips at most one block (the next one is reserved one block above what is used),
/// and an `up` that fails before it sends gives its first block back. Since every restart continues above anything
/// ever sent, the peer's replay window accepts the restarted side at once.
///
/// Within one run, the keys have one sequence counter: an SA replaced by one with the same keys (`sa update` that
/// keeps them), or removed and added again, continues the same counter ([`SeqStart::counter`]) instead of reserving
/// a new block, so no-op changes neither use up the space nor put the sender far ahead of its peer's window.
pub struct SeqStore {
    dir: StateDir,
    slots: Vec<SeqSlot>,
    /// Set once the data plane may send: until then, dropping the store (a failed `up`) gives the first blocks
    /// back, so a setup that fails again and again does not use up the sequence space.
    armed: bool,
}

struct SeqSlot {
    /// The counter of the SAs with these keys, once one is built (see [`SeqStore::track`]).
    counter: Option<Arc<SeqCounter>>,
    /// The last SA built with these keys (for messages), and how many with them are installed now.
    name: String,
    live: usize,
    file: String,
    first: u64,
    limit: u64,
    failed: bool,
}

/// Where an outbound SA starts: the first sequence number and the reservation it may use up to, or the counter of
/// an SA with the same keys built earlier in this run, to continue.
#[derive(Debug, Clone)]
pub struct SeqStart {
    pub first: u64,
    pub reserved: u64,
    pub counter: Option<Arc<SeqCounter>>,
}

/// A one-way fingerprint of an SA's protocol and keys (the keys cannot be learned from it).
fn key_fingerprint(p: &SaParams) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"netveil seq mark v1\0");
    h.update([match p.suite {
        netveil_ipsec::sa::Suite::Esp(_) => 50u8,
        netveil_ipsec::sa::Suite::Ah(_) => 51,
    }]);
    for k in [&p.enc_key[..], &p.auth_key[..]] {
        h.update((k.len() as u32).to_be_bytes());
        h.update(k);
    }
    hex::encode(&h.finalize()[..16])
}

/// The file name of the sequence mark of an outbound SA with these keys.
pub fn seq_file(p: &SaParams) -> String {
    format!("seq-{}", key_fingerprint(p))
}

/// The file name of the receive floor of an inbound SA with these keys (the same fingerprint as [`seq_file`]).
pub fn rx_file(p: &SaParams) -> String {
    format!("rx-{}", key_fingerprint(p))
}

fn space_limit(esn: bool) -> u64 {
    if esn {
        u64::MAX
    } else {
        u64::from(u32::MAX)
    }
}

fn write_error(dir: &StateDir, file: &str, e: std::io::Error) -> ConfigError {
    cerr(
        "interface.state_dir",
        format!("cannot write {}: {e}", dir.path().join(file).display()),
    )
}

fn space_changed(key: &str, esn: bool) -> ConfigError {
    cerr(
        &format!("{key}.esn"),
        format!(
            "these keys are in use in this daemon with esn = {}: the sequence-number size of a key cannot change \
             (use new keys)",
            !esn
        ),
    )
}

/// Where each SA of a configuration starts (see [`start`]).
#[derive(Debug, Clone)]
pub enum Start {
    Out(SeqStart),
    In(RxStart),
}

/// Opens the stores of `dir` for the SAs of a configuration and makes each SA's first reservation durable: index
/// `i` of the result for `sas[i]`. Each SA is then built with its start and handed to the store's `track`.
pub fn start(
    dir: StateDir,
    sas: &[SaParams],
) -> Result<(SeqStore, RxStore, Vec<Start>), ConfigError> {
    let mut seq = SeqStore::open(dir.clone());
    let mut rx = RxStore::open(dir);
    let mut starts = Vec::with_capacity(sas.len());
    for (i, p) in sas.iter().enumerate() {
        let key = format!("sa[{i}]");
        starts.push(match p.direction {
            Direction::Out => Start::Out(seq.reserve(p, &key)?),
            Direction::In => Start::In(rx.start(p, &key)?),
        });
    }
    Ok((seq, rx, starts))
}

impl SeqStore {
    /// A store with no SA yet, in `dir`.
    pub fn open(dir: StateDir) -> SeqStore {
        SeqStore {
            dir,
            slots: Vec::new(),
            armed: false,
        }
    }

    /// Reads the marks of the outbound SAs among `sas` (index `i` of the result for `sas[i]`; `None` for inbound
    /// SAs) and makes the first reservation of each durable (see [`SeqStore::reserve`]). Each SA is then built with
    /// its start and handed to [`SeqStore::track`].
    pub fn start(
        dir: StateDir,
        sas: &[SaParams],
    ) -> Result<(SeqStore, Vec<Option<SeqStart>>), ConfigError> {
        let mut store = SeqStore::open(dir);
        let mut starts = Vec::new();
        for (i, p) in sas.iter().enumerate() {
            starts.push(if p.direction == Direction::Out {
                Some(store.reserve(p, &format!("sa[{i}]"))?)
            } else {
                None
            });
        }
        Ok((store, starts))
    }

    /// Reserves, durably, the first block of sequence numbers of an outbound SA with the keys of `p`: it continues
    /// above every number ever sent under them. Keys that an SA of this run already used continue that SA's counter
    /// (nothing reserved). Keys that have used up their sequence space are refused (the error names `key`.enc_key).
    /// The SA, once built with this start, is handed to [`SeqStore::track`].
    pub fn reserve(&mut self, p: &SaParams, key: &str) -> Result<SeqStart, ConfigError> {
        let file = seq_file(p);
        let limit = space_limit(p.esn);
        if let Some(s) = self.slots.iter().find(|s| s.file == file) {
            return match &s.counter {
                Some(c) if c.limit() == limit => Ok(SeqStart {
                    first: c.last() + 1,
                    reserved: c.reserved(),
                    counter: Some(c.clone()),
                }),
                Some(_) => Err(space_changed(key, p.esn)),
                // Reserved and not built yet: two SAs of one configuration with the same keys are refused before.
                None => Err(cerr(
                    &format!("{key}.enc_key"),
                    "another SA with these keys is being installed".into(),
                )),
            };
        }
        let mark = self
            .dir
            .read_mark(&file, &format!("{key}.enc_key"), &p.name)?;
        if mark >= limit {
            return Err(cerr(
                &format!("{key}.enc_key"),
                format!(
                    "these keys have used up their sequence space (mark {mark} in {}): configure new keys",
                    self.dir.path().join(&file).display()
                ),
            ));
        }
        let first = (mark + 1).max(p.first_seq);
        let reserved = first.saturating_add(SEQ_BLOCK - 1).min(limit);
        self.dir
            .write_u64(&file, reserved)
            .map_err(|e| write_error(&self.dir, &file, e))?;
        self.slots.push(SeqSlot {
            counter: None,
            name: p.name.clone(),
            live: 0,
            file,
            first,
            limit,
            failed: false,
        });
        Ok(SeqStart {
            first,
            reserved,
            counter: None,
        })
    }

    /// Follows the SA built with a start from [`SeqStore::reserve`] (matched by its keys): it is installed.
    pub fn track(&mut self, sa: Arc<OutboundSa>) {
        let file = seq_file(&sa.params);
        if let Some(s) = self.slots.iter_mut().find(|s| s.file == file) {
            if s.counter.is_none() {
                s.counter = Some(sa.counter().clone());
            }
            s.name = sa.params.name.clone();
            s.live += 1;
        }
    }

    /// The SA was removed (or not installed after all): its mark stays where it is (at or above every number it
    /// may still send from a batch in flight), and its counter stays for an SA with the same keys to continue.
    pub fn forget(&mut self, sa: &Arc<OutboundSa>) {
        if let Some(s) = self.slots.iter_mut().find(|s| {
            s.counter
                .as_ref()
                .is_some_and(|c| Arc::ptr_eq(c, sa.counter()))
        }) {
            s.live = s.live.saturating_sub(1);
        }
    }

    /// Reserves the next block of every installed SA's keys that have used half of their current one (durably, then
    /// in memory). Returns a message for each mark that could not be written (once per key until a write succeeds
    /// again): its SAs stop sending when the reservation runs out.
    pub fn top_up(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        for s in &mut self.slots {
            let Some(c) = &s.counter else { continue };
            if s.live == 0 {
                continue;
            }
            let reserved = c.reserved();
            let used = c.last().max(s.first - 1);
            if reserved >= s.limit || reserved - used > SEQ_BLOCK / 2 {
                continue;
            }
            // One block above what is used (not above the reservation): a crash right after this write skips at
            // most one block.
            let next = used.saturating_add(SEQ_BLOCK).min(s.limit);
            match self.dir.write_u64(&s.file, next) {
                Ok(()) => {
                    c.reserve_to(next);
                    s.failed = false;
                }
                Err(e) if !s.failed => {
                    s.failed = true;
                    errors.push(format!(
                        "SA '{}': cannot write its sequence mark {}: {e} (it stops sending at {reserved})",
                        s.name,
                        self.dir.path().join(&s.file).display()
                    ));
                }
                Err(_) => {}
            }
        }
        errors
    }

    /// The data plane is about to send: from now on the reservations stay (see [`SeqStore::finish`]).
    pub fn arm(&mut self) {
        self.armed = true;
    }

    /// After the data plane stopped: the marks become the last numbers used, so the next start skips none.
    pub fn finish(&mut self) {
        for s in &self.slots {
            if let Some(c) = &s.counter {
                let used = c.last().max(s.first - 1);
                let _ = self.dir.write_u64(&s.file, used);
            }
        }
    }
}

impl Drop for SeqStore {
    fn drop(&mut self) {
        if !self.armed {
            // Nothing was sent under these reservations: the marks go back to what they were.
            for s in &self.slots {
                let _ = self.dir.write_u64(&s.file, s.first - 1);
            }
        }
    }
}

/// The smallest block of sequence numbers a receive floor is reserved ahead by (see [`RxStore`]).
pub const RX_MIN_BLOCK: u64 = 8;
/// A receive floor is reserved ahead by about this many milliseconds of the SA's recent rate.
pub const RX_BLOCK_MILLIS: u64 = 250;

/// The receive floors of inbound SAs with static keys: the counterpart of [`SeqStore`], so that no packet accepted
/// before a restart, a crash or a re-add of the same keys is ever accepted again. For each key, a file named after
/// the same fingerprint as the sequence marks (`rx-...`) holds a number that is at least every sequence number ever
/// accepted under those keys:
///
/// - at start, the SA's window takes everything up to the floor as seen, and it may accept numbers up to a
///   *ceiling* written (synced) before the first packet;
/// - while it runs, [`RxStore::top_up`] raises the ceiling ahead of what arrives, in blocks of about
///   [`RX_BLOCK_MILLIS`] of the SA's recent rate (at least [`RX_MIN_BLOCK`]), before the window gets there; for an
///   authenticated packet above the ceiling (the peer restarted after a crash and jumped ahead, or a burst outran
///   the tick) the receiving thread writes a floor above it at once (synced) and accepts it; only if that write
///   fails is it dropped (`rx:seq-not-reserved`);
/// - on a clean stop, [`RxStore::finish`] writes the highest number accepted, so a restart loses nothing.
///
/// The price of a crash: a receiver that restarts after kill -9 or a power loss refuses the numbers between what it
/// had accepted and its last ceiling, so a live sender that did not restart loses at most one block: about
/// [`RX_BLOCK_MILLIS`] of traffic at its recent rate, or [`RX_MIN_BLOCK`] packets at low rates, then is accepted
/// again. Within one run, an SA removed and added again with the same keys keeps its window (exactly).
pub struct RxStore {
    dir: StateDir,
    slots: Vec<RxSlot>,
    armed: bool,
}

struct RxSlot {
    state: Option<Arc<RxState>>,
    name: String,
    live: usize,
    file: String,
    /// The floor read at start (given back by a start that never received).
    floor: u64,
    limit: u64,
    failed: bool,
    /// The rate estimate: the top and time it was last taken, and packets per second since.
    rate_top: u64,
    rate_at: std::time::Instant,
    rate: u64,
    /// The floor on disk: written only with this lock held (by the tick's top-ups and by the receiving thread when a
    /// packet is above the ceiling), so that it only grows while the daemon runs.
    durable: Arc<std::sync::Mutex<u64>>,
    /// The block the floor is reserved ahead by now (sized by the tick to the recent rate).
    block: Arc<std::sync::atomic::AtomicU64>,
}

/// Where an inbound SA starts: its floor and ceiling, or the receive state of an SA with the same keys built
/// earlier in this run, to continue.
#[derive(Clone)]
pub struct RxStart {
    pub floor: u64,
    pub ceiling: u64,
    pub state: Option<Arc<RxState>>,
}

impl std::fmt::Debug for RxStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxStart")
            .field("floor", &self.floor)
            .field("ceiling", &self.ceiling)
            .field("shared", &self.state.is_some())
            .finish()
    }
}

impl RxStart {
    /// The receive state an SA of `p` starts with.
    pub fn state(&self, p: &SaParams) -> Arc<RxState> {
        self.state.clone().unwrap_or_else(|| {
            Arc::new(RxState::with_floor(
                p.replay_window,
                p.esn,
                self.floor,
                self.ceiling,
            ))
        })
    }
}

impl RxStore {
    /// A store with no SA yet, in `dir`.
    pub fn open(dir: StateDir) -> RxStore {
        RxStore {
            dir,
            slots: Vec::new(),
            armed: false,
        }
    }

    /// Reads the floor of an inbound SA with the keys of `p` and makes its first ceiling durable. Keys that an SA
    /// of this run already used continue that SA's receive state. The SA, once built, goes to [`RxStore::track`].
    pub fn start(&mut self, p: &SaParams, key: &str) -> Result<RxStart, ConfigError> {
        let file = rx_file(p);
        let limit = space_limit(p.esn);
        if let Some(s) = self.slots.iter().find(|s| s.file == file) {
            return match &s.state {
                Some(st) if st.esn() == p.esn => Ok(RxStart {
                    floor: st.top(),
                    ceiling: st.ceiling(),
                    state: Some(st.clone()),
                }),
                Some(_) => Err(space_changed(key, p.esn)),
                None => Err(cerr(
                    &format!("{key}.enc_key"),
                    "another SA with these keys is being installed".into(),
                )),
            };
        }
        let floor = self
            .dir
            .read_floor(&file, &format!("{key}.enc_key"), &p.name)?;
        if floor >= limit {
            return Err(cerr(
                &format!("{key}.enc_key"),
                format!(
                    "these keys have used up their sequence space (floor {floor} in {}): configure new keys",
                    self.dir.path().join(&file).display()
                ),
            ));
        }
        let ceiling = floor.saturating_add(RX_MIN_BLOCK).min(limit);
        self.dir
            .write_u64(&file, ceiling)
            .map_err(|e| write_error(&self.dir, &file, e))?;
        self.slots.push(RxSlot {
            state: None,
            name: p.name.clone(),
            live: 0,
            file,
            floor,
            limit,
            failed: false,
            rate_top: floor,
            rate_at: std::time::Instant::now(),
            rate: 0,
            durable: Arc::new(std::sync::Mutex::new(ceiling)),
            block: Arc::new(std::sync::atomic::AtomicU64::new(RX_MIN_BLOCK)),
        });
        Ok(RxStart {
            floor,
            ceiling,
            state: None,
        })
    }

    /// Follows the SA built with a start from [`RxStore::start`]: it is installed.
    pub fn track(&mut self, sa: &Arc<InboundSa>) {
        let file = rx_file(&sa.params);
        if let Some(s) = self.slots.iter_mut().find(|s| s.file == file) {
            if s.state.is_none() {
                let st = sa.rx_state().clone();
                // A packet above the ceiling (the sender restarted after a crash and jumped ahead) gets a floor
                // above it at once, durably, instead of waiting for the next tick.
                let (dir, file, durable, block, limit) = (
                    self.dir.clone(),
                    s.file.clone(),
                    s.durable.clone(),
                    s.block.clone(),
                    s.limit,
                );
                // Each time this happens the block doubles (up to SEQ_BLOCK): a flow that starts or speeds up
                // costs a few synced writes on the receiving thread, not one per block of the old rate, until the
                // tick sizes the block to the new rate again.
                st.on_ceiling(Box::new(move |seq| {
                    use std::sync::atomic::Ordering::Relaxed;
                    let mut d = durable.lock().ok()?;
                    if seq <= *d {
                        return Some(*d);
                    }
                    let b = block
                        .load(Relaxed)
                        .saturating_mul(2)
                        .clamp(RX_MIN_BLOCK, SEQ_BLOCK);
                    block.store(b, Relaxed);
                    let next = seq.saturating_add(b).min(limit);
                    dir.write_u64(&file, next).ok()?;
                    *d = next;
                    Some(next)
                }));
                s.state = Some(st);
            }
            s.name = sa.params.name.clone();
            s.live += 1;
        }
    }

    /// The SA was removed (or retired, or not installed after all): its floor stays, and its receive state stays
    /// for an SA with the same keys to continue.
    pub fn forget(&mut self, sa: &Arc<InboundSa>) {
        if let Some(s) = self.slots.iter_mut().find(|s| {
            s.state
                .as_ref()
                .is_some_and(|c| Arc::ptr_eq(c, sa.rx_state()))
        }) {
            s.live = s.live.saturating_sub(1);
        }
    }

    /// Raises the ceiling of every installed SA's keys ahead of what arrives (durably, then in memory): when less
    /// than half a block is left, or an authenticated packet was refused above it. Returns a message for each floor
    /// that could not be written (once per key until a write succeeds again).
    pub fn top_up(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        let now = std::time::Instant::now();
        for s in &mut self.slots {
            let Some(st) = &s.state else { continue };
            if s.live == 0 {
                continue;
            }
            let top = st.top();
            let elapsed = now.duration_since(s.rate_at);
            let rate_block = |rate: u64| {
                (rate.saturating_mul(RX_BLOCK_MILLIS) / 1000).clamp(RX_MIN_BLOCK, SEQ_BLOCK)
            };
            if elapsed >= std::time::Duration::from_millis(250) {
                let n = top.saturating_sub(s.rate_top);
                s.rate = (u128::from(n) * 1000 / elapsed.as_millis().max(1)) as u64;
                s.rate_top = top;
                s.rate_at = now;
                // A new estimate: the block follows it (down too, after a burst the receiving thread doubled it).
                s.block
                    .store(rate_block(s.rate), std::sync::atomic::Ordering::Relaxed);
            }
            let block = rate_block(s.rate).max(s.block.load(std::sync::atomic::Ordering::Relaxed));
            let ceiling = st.ceiling();
            let wanted = st.wanted();
            if ceiling >= s.limit || (wanted <= ceiling && ceiling - top.min(ceiling) > block / 2) {
                continue;
            }
            let next = top.max(wanted).saturating_add(block).min(s.limit);
            if next <= ceiling {
                continue;
            }
            let Ok(mut d) = s.durable.lock() else {
                continue;
            };
            let written = if next > *d {
                self.dir.write_u64(&s.file, next).map(|()| {
                    *d = next;
                })
            } else {
                Ok(())
            };
            match written {
                Ok(()) => {
                    st.raise(*d);
                    s.failed = false;
                }
                Err(e) if !s.failed => {
                    s.failed = true;
                    errors.push(format!(
                        "SA '{}': cannot write its receive floor {}: {e} (it accepts nothing above {ceiling})",
                        s.name,
                        self.dir.path().join(&s.file).display()
                    ));
                }
                Err(_) => {}
            }
        }
        errors
    }

    /// The data plane is about to receive: from now on the ceilings stay (see [`RxStore::finish`]).
    pub fn arm(&mut self) {
        self.armed = true;
    }

    /// After the data plane stopped: the floors become the highest numbers accepted, so the next start refuses
    /// exactly what was accepted.
    pub fn finish(&mut self) {
        for s in &self.slots {
            if let Some(st) = &s.state {
                let Ok(mut d) = s.durable.lock() else {
                    continue;
                };
                let top = st.top().max(s.floor);
                if self.dir.write_u64(&s.file, top).is_ok() {
                    *d = top;
                }
            }
        }
    }
}

impl Drop for RxStore {
    fn drop(&mut self) {
        if !self.armed {
            // Nothing was received under these ceilings: the floors go back to what they were.
            for s in &self.slots {
                let _ = self.dir.write_u64(&s.file, s.floor);
            }
        }
    }
}

/// Where tests keep scratch state directories: `/var/lib/netveil-test` (root's and persistent, as a state
/// directory and its parents must be, wherever the checkout lies) when it can be made, else `fallback` (a build's
/// target directory, whose parents must then be root's and not writable by others).
#[doc(hidden)]
pub fn test_scratch_base(fallback: &Path) -> PathBuf {
    let sys = Path::new("/var/lib/netveil-test");
    let made = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(sys)
        .is_ok();
    if made {
        sys.to_path_buf()
    } else {
        fallback.to_path_buf()
    }
}

/// A scratch directory for tests that may hold state (see [`test_scratch_base`]; the system's temporary directory
/// is refused: see the module documentation).
#[cfg(test)]
pub(crate) fn test_dir(tag: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/<test binary>
    let target = exe.ancestors().nth(3).expect("target directory");
    let d = test_scratch_base(&target.join("tmp"))
        .join(format!("netveil-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&d)
        .unwrap();
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use netveil_crypto::rand::OsRng;

    /// A location whose keys are confirmed fresh (as `netveil up --fresh-keys`).
    fn fresh(p: &Path) -> StateLocation {
        StateLocation {
            fresh_keys: true,
            ..StateLocation::new(p)
        }
    }

    fn out_sa(name: &str) -> netveil_ipsec::SaParams {
        let cfg = crate::config::Config::parse(&format!(
            "[interface]\nallow_null_null = true\n[[sa]]\nname = \"{name}\"\ndirection = \"out\"\nspi = 0x1001\n\
             local = \"192.0.2.1\"\nremote = \"192.0.2.2\"\nsuite = \"null-null\"\n"
        ))
        .unwrap();
        cfg.sas[0].clone()
    }

    /// Marks: the first block is synced before use and given back by a start that never sent; a block is topped
    /// up one block above what is used (so a crash skips at most one block), and a clean stop writes what was
    /// used.
    #[test]
    fn sequence_marks_across_starts_crashes_and_stops() {
        let dir = test_dir("seq-test").join("state");
        let open = || StateDir::open(&fresh(&dir), "state_dir").unwrap();
        let p = out_sa("a");
        let file = seq_file(&p);
        let (store, starts) = SeqStore::start(open(), std::slice::from_ref(&p)).unwrap();
        let s = starts[0].clone().unwrap();
        assert_eq!((s.first, s.reserved), (1, SEQ_BLOCK));
        assert_eq!(open().read_u64(&file), Ok(Some(SEQ_BLOCK)));
        // A failed start (never armed) gives its block back.
        drop(store);
        assert_eq!(open().read_u64(&file), Ok(Some(0)));
        // A started, armed daemon with its SAD.
        let run = || {
            let (mut store, starts) = SeqStore::start(open(), std::slice::from_ref(&p)).unwrap();
            store.arm();
            let s = starts[0].clone().unwrap();
            let mut sad = netveil_ipsec::bundle::Sad::default();
            let mut q = p.clone();
            q.first_seq = s.first;
            let i = sad.insert_out(
                netveil_ipsec::OutboundSa::with_reservation(q, 0, s.reserved, &mut OsRng).unwrap(),
            );
            store.track(sad.out_arc(i).clone());
            (store, sad, s.first)
        };
        // A real run: send past half the block, top up.
        let (mut store, sad, _) = run();
        let pkt = [
            0x45u8, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 51, 100, 1, 198, 51, 100, 2, 0, 1,
            0, 2, 0, 8, 0, 0,
        ];
        let send = |sad: &netveil_ipsec::bundle::Sad, n: u64| {
            for _ in 0..n {
                let mut b = netveil_wire::PacketBuf::from_slice(&pkt, 256, 640);
                let i = sad.outbound_indices().next().unwrap();
                netveil_ipsec::bundle::protect(sad, &[i], &mut b, 0).unwrap();
            }
        };
        send(&sad, SEQ_BLOCK / 2 + 10);
        assert!(store.top_up().is_empty());
        let sa = sad.outbound().next().unwrap();
        let used = sa.seq_last();
        assert_eq!(used, SEQ_BLOCK / 2 + 10);
        assert_eq!(sa.seq_reserved(), used + SEQ_BLOCK);
        assert_eq!(open().read_u64(&file), Ok(Some(used + SEQ_BLOCK)));
        // A crash now (no finish): the next start continues above everything sent, at most one block ahead.
        drop(store);
        let (store2, starts) = SeqStore::start(open(), std::slice::from_ref(&p)).unwrap();
        let first = starts[0].clone().unwrap().first;
        assert!(
            first > used && first <= used + SEQ_BLOCK + 1,
            "{first} after {used}"
        );
        // (Given back: it sent nothing.)
        drop(store2);
        // A clean stop writes the last number used.
        let (mut store, sad, first) = run();
        send(&sad, 3);
        store.finish();
        assert_eq!(open().read_u64(&file), Ok(Some(first + 2)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn values_survive_and_damage_is_an_error() {
        let dir = test_dir("state-test");
        let s = StateDir::open(&StateLocation::new(dir.join("sub")), "state_dir").unwrap();
        assert_eq!(
            std::fs::metadata(s.path()).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(s.read_u64("x"), Ok(None));
        s.write_u64("x", 42).unwrap();
        s.write_u64("x", 1 << 40).unwrap();
        let again = StateDir::open(&StateLocation::new(dir.join("sub")), "state_dir").unwrap();
        assert_eq!(again.read_u64("x"), Ok(Some(1 << 40)));
        std::fs::write(dir.join("sub/x"), "garbage").unwrap();
        assert!(again.read_u64("x").unwrap_err().contains("damaged"));
        // A directory that cannot be created is refused with the key named.
        let e = StateDir::open(
            &StateLocation::new("/proc/netveil-nope"),
            "interface.state_dir",
        )
        .unwrap_err();
        assert_eq!(e.key, "interface.state_dir");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn is_root() -> bool {
        netveil_io::os::euid() == 0
    }

    fn sh(args: &[&str]) {
        let st = std::process::Command::new(args[0])
            .args(&args[1..])
            .status()
            .unwrap();
        assert!(st.success(), "{args:?}");
    }

    /// What a state directory without its record does with marks: a key without one is refused (the error names
    /// the key and says what to do, and nothing is written), a key with one continues above it; `--fresh-keys`
    /// writes the record once, and from then on a key without a mark is a new one (starts at 1) without it.
    #[test]
    fn a_missing_mark_needs_the_record_or_a_confirmation() {
        let dir = test_dir("fresh").join("state");
        let (p, q) = (out_sa("a"), {
            let mut q = out_sa("b");
            q.enc_key = zeroize::Zeroizing::new(vec![1; 20]);
            q
        });
        assert_ne!(seq_file(&p), seq_file(&q));
        let plain = StateLocation::new(&dir);
        let d = StateDir::open(&plain, "interface.state_dir").unwrap();
        assert!(!d.is_known());
        let e = SeqStore::start(d, std::slice::from_ref(&p)).err().unwrap();
        assert_eq!(e.key, "sa[0].enc_key");
        assert!(
            e.reason.contains("SA 'a'")
                && e.reason.contains("no sequence mark")
                && e.reason.contains("--fresh-keys"),
            "{}",
            e.reason
        );
        assert!(!dir.join(seq_file(&p)).exists());
        assert!(!dir.join(SENTINEL).exists());
        let note = StateDir::check(&plain, "interface.state_dir")
            .unwrap()
            .unwrap();
        assert!(note.contains("--fresh-keys"), "{note}");
        // A key that has a mark (an older netveil wrote no record) continues above it.
        StateDir::open(&plain, "k")
            .unwrap()
            .write_u64(&seq_file(&q), 41)
            .unwrap();
        let (store, starts) = SeqStore::start(
            StateDir::open(&plain, "k").unwrap(),
            std::slice::from_ref(&q),
        )
        .unwrap();
        assert_eq!(starts[0].as_ref().unwrap().first, 42);
        drop(store);
        // Confirmed: the record is written, and the key starts at 1.
        let d = StateDir::open(&fresh(&dir), "interface.state_dir").unwrap();
        assert!(d.is_known());
        let rec = std::fs::read_to_string(dir.join(SENTINEL)).unwrap();
        assert!(
            rec.starts_with("netveil state directory") && rec.contains("\nid "),
            "{rec}"
        );
        let (store, starts) = SeqStore::start(d, std::slice::from_ref(&p)).unwrap();
        assert_eq!(starts[0].as_ref().unwrap().first, 1);
        drop(store);
        // Later starts need no confirmation, and the record is not rewritten.
        let d = StateDir::open(&plain, "interface.state_dir").unwrap();
        assert!(d.is_known());
        assert_eq!(std::fs::read_to_string(dir.join(SENTINEL)).unwrap(), rec);
        let mut r = out_sa("r");
        r.enc_key = zeroize::Zeroizing::new(vec![2; 20]);
        assert!(SeqStore::start(d, std::slice::from_ref(&r)).is_ok());
        assert_eq!(
            StateDir::check(&plain, "interface.state_dir").unwrap(),
            None
        );
        // The record lost (as a tmpfs after a reboot): refused again.
        std::fs::remove_file(dir.join(SENTINEL)).unwrap();
        std::fs::remove_file(dir.join(seq_file(&p))).unwrap();
        let d = StateDir::open(&plain, "interface.state_dir").unwrap();
        assert!(SeqStore::start(d, std::slice::from_ref(&p)).is_err());
    }

    /// A directory, or a directory above it, owned by another user than root is refused by `open` and `check`,
    /// naming the key and the owner; owned by root again, it is accepted.
    #[test]
    fn a_foreign_owner_is_refused() {
        if !is_root() {
            eprintln!("skipped: needs root (chown)");
            return;
        }
        let base = test_dir("owner");
        let dir = base.join("state");
        let loc = StateLocation::new(&dir);
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        sh(&["chown", "65534:65534", dir.to_str().unwrap()]);
        let e = StateDir::open(&loc, "interface.state_dir").unwrap_err();
        assert_eq!(e.key, "interface.state_dir");
        assert!(e.reason.contains("owned by user 65534"), "{}", e.reason);
        let e = StateDir::check(&loc, "interface.state_dir").unwrap_err();
        assert!(e.reason.contains("owned by user 65534"), "{}", e.reason);
        // Nothing was written into it.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        // A foreign parent: the directory below it would not be created.
        sh(&["chown", "0:0", dir.to_str().unwrap()]);
        assert!(StateDir::open(&loc, "interface.state_dir").is_ok());
        sh(&["chown", "65534:65534", base.to_str().unwrap()]);
        let sub = StateLocation::new(base.join("new"));
        let e = StateDir::open(&sub, "l2sec.state_dir").unwrap_err();
        assert_eq!(e.key, "l2sec.state_dir");
        assert!(e.reason.contains("owned by user 65534"), "{}", e.reason);
        assert!(!base.join("new").exists());
        sh(&["chown", "0:0", base.to_str().unwrap()]);
        assert!(StateDir::open(&sub, "l2sec.state_dir").is_ok());
        let _ = std::fs::remove_dir_all(&base);
    }

    /// A group-writable directory above the state directory, a group-writable state directory, and a sticky
    /// world-writable one (/tmp) are refused; the same paths with mode 0755 are accepted.
    #[test]
    fn writable_by_others_is_refused() {
        let base = test_dir("mode");
        let dir = base.join("state");
        let loc = StateLocation::new(&dir);
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(&base, 0o775);
        for e in [
            StateDir::open(&loc, "interface.state_dir").unwrap_err(),
            StateDir::check(&loc, "interface.state_dir").unwrap_err(),
        ] {
            assert_eq!(e.key, "interface.state_dir");
            assert!(
                e.reason
                    .contains("writable by its group or others (mode 775)"),
                "{}",
                e.reason
            );
        }
        assert!(!dir.exists());
        mode(&base, 0o755);
        assert!(StateDir::open(&loc, "interface.state_dir").is_ok());
        mode(&dir, 0o770);
        let e = StateDir::open(&loc, "interface.state_dir").unwrap_err();
        assert!(e.reason.contains("mode 770"), "{}", e.reason);
        mode(&dir, 0o700);
        assert!(StateDir::open(&loc, "interface.state_dir").is_ok());
        // Sticky and world-writable (the system's temporary directory, where there is one like that).
        let tmp = std::env::temp_dir();
        if std::fs::metadata(&tmp).unwrap().mode() & 0o1002 == 0o1002 {
            let t = StateLocation::new(tmp.join(format!("netveil-sticky-{}", std::process::id())));
            let e = StateDir::check(&t, "interface.state_dir").unwrap_err();
            assert!(e.reason.contains("sticky"), "{}", e.reason);
            assert!(StateDir::open(&t, "interface.state_dir").is_err());
            assert!(!t.path.exists());
        }
        // Through a symbolic link from a safe place into an unsafe one.
        let unsafe_dir = base.join("open");
        std::fs::create_dir(&unsafe_dir).unwrap();
        mode(&unsafe_dir, 0o777);
        std::os::unix::fs::symlink(&unsafe_dir, base.join("link")).unwrap();
        let e = StateDir::open(&StateLocation::new(base.join("link/state")), "k").unwrap_err();
        assert!(e.reason.contains("mode 777"), "{}", e.reason);
        let _ = std::fs::remove_dir_all(&base);
    }

    /// Captures what `f` logs (at warn and above).
    fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
        #[derive(Clone, Default)]
        struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let w = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || w.clone())
            .finish();
        let r = tracing::subscriber::with_default(sub, f);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        (r, text)
    }

    /// A state directory on a tmpfs (mounted for the test) is refused, naming the key and `allow_volatile_state`;
    /// allowed, every open warns and `check` notes it; the same directory on the disk opens without a warning.
    #[test]
    fn a_volatile_directory_needs_allow_volatile_state_and_warns() {
        if !is_root() {
            eprintln!("skipped: needs root (mount)");
            return;
        }
        let base = test_dir("volatile");
        let mnt = base.join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let dir = mnt.join("state");
        let loc = StateLocation::new(&dir);
        // On the disk first (positive control): no warning.
        let (r, log) = logged(|| StateDir::open(&loc, "interface.state_dir"));
        assert!(r.is_ok() && log.is_empty(), "{log}");
        std::fs::remove_dir_all(&dir).unwrap();
        sh(&[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            "size=1m,mode=0755",
            "tmpfs",
            mnt.to_str().unwrap(),
        ]);
        struct Umount(PathBuf);
        impl Drop for Umount {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(&self.0).status();
            }
        }
        let _u = Umount(mnt.clone());
        for e in [
            StateDir::check(&loc, "interface.state_dir").unwrap_err(),
            StateDir::open(&loc, "interface.state_dir").unwrap_err(),
        ] {
            assert_eq!(e.key, "interface.state_dir");
            assert!(
                e.reason.contains("is on a tmpfs")
                    && e.reason.contains("allow_volatile_state = true"),
                "{}",
                e.reason
            );
        }
        assert!(!dir.exists(), "a refused open created {}", dir.display());
        let allowed = StateLocation {
            allow_volatile: true,
            ..loc.clone()
        };
        for _ in 0..2 {
            let (r, log) = logged(|| StateDir::open(&allowed, "interface.state_dir"));
            assert!(r.is_ok());
            assert!(
                log.contains("WARN")
                    && log.contains("is on a tmpfs")
                    && log.contains("--fresh-keys"),
                "{log}"
            );
        }
        let note = StateDir::check(&allowed, "interface.state_dir")
            .unwrap()
            .unwrap();
        assert!(note.contains("tmpfs"), "{note}");
        drop(_u);
        let _ = std::fs::remove_dir_all(&base);
    }
}
