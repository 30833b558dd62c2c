//! The state directory: where it may be, and its values (see the module documentation of [`crate::runtime::state`]).

use super::*;

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
