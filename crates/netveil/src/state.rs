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

use crate::config::ConfigError;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where the daemon keeps its state unless `state_dir` says otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/netveil";

/// A writable state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    path: PathBuf,
}

fn cerr(key: &str, reason: String) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        reason,
    }
}

impl StateDir {
    /// Opens (creating it, mode 0700) the state directory `path` and checks that a value can be written and synced
    /// there. Errors name `key`, the configuration key that chose the directory.
    pub fn open(path: &Path, key: &str) -> Result<StateDir, ConfigError> {
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
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(why)?;
        }
        let meta = std::fs::metadata(path).map_err(why)?;
        if meta.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(why)?;
        }
        let d = StateDir {
            path: path.to_path_buf(),
        };
        d.write_u64(".probe", 0).map_err(why)?;
        let _ = std::fs::remove_file(path.join(".probe"));
        Ok(d)
    }

    pub fn path(&self) -> &Path {
        &self.path
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
        let tmp = self.path.join(format!(".{name}.tmp"));
        let _ = std::fs::remove_file(&tmp);
        {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(format!("{v}\n").as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, self.path.join(name))?;
        std::fs::File::open(&self.path)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_survive_and_damage_is_an_error() {
        let dir = std::env::temp_dir().join(format!("netveil-state-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let s = StateDir::open(&dir.join("sub"), "state_dir").unwrap();
        assert_eq!(
            std::fs::metadata(s.path()).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(s.read_u64("x"), Ok(None));
        s.write_u64("x", 42).unwrap();
        s.write_u64("x", 1 << 40).unwrap();
        let again = StateDir::open(&dir.join("sub"), "state_dir").unwrap();
        assert_eq!(again.read_u64("x"), Ok(Some(1 << 40)));
        std::fs::write(dir.join("sub/x"), "garbage").unwrap();
        assert!(again.read_u64("x").unwrap_err().contains("damaged"));
        // A directory that cannot be created is refused with the key named.
        let e = StateDir::open(Path::new("/proc/netveil-nope"), "interface.state_dir").unwrap_err();
        assert_eq!(e.key, "interface.state_dir");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
