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

use crate::runtime::error::ConfigError;

use netveil_ipsec::sa::Direction;
use netveil_ipsec::{InboundSa, OutboundSa, RxState, SaParams};
use netveil_sa::seq::SeqCounter;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod dir;
mod policies;
mod rx;
mod seq;
#[cfg(test)]
mod tests;

pub use dir::*;
pub use policies::*;
pub use rx::*;
pub use seq::*;

fn cerr(key: &str, reason: String) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        reason,
    }
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
            Direction::Out => Start::Out(seq.reserve(p, &key, false)?),
            Direction::In => Start::In(rx.start(p, &key, false)?),
        });
    }
    Ok((seq, rx, starts))
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
