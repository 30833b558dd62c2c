//! Files that hold keys, or that decide what is protected and whom to trust: each is opened once, what was opened
//! is checked through its descriptor, and it is read from that same descriptor (never a check of the path and then
//! a read of the path again, which another user could swap between the two).
//!
//! [`read`] is the one reader of every such file the daemon loads, at start and at a reload:
//!
//! - **Opened** read-only with `O_CLOEXEC`, `O_NOCTTY` and `O_NONBLOCK` (a FIFO planted there does not hang the
//!   daemon: it is refused below); for [`Level::Secret`] also with `O_NOFOLLOW`: a symbolic link in place of a key
//!   file is refused (a key file is a file, and a link there could be pointed at any other file of root's). Rules
//!   and certificates may be links (`/etc/ssl/certs` is made of them): what the link reaches is what is checked.
//! - **Checked** with `fstat` on that descriptor: a regular file (not a directory, FIFO, socket or device); owned by
//!   root, or by the user the daemon runs as (an unprivileged daemon, as in tests: the rule of the state directory,
//!   see [`crate::runtime::state`]); for [`Level::Secret`] neither readable nor writable by its group or others (mode 0600
//!   or 0400); for [`Level::Rules`] not writable by its group or others.
//! - **Read** from the descriptor, at most [`MAX_LEN`] bytes, into a buffer that is zeroized when dropped (sized
//!   from `fstat` first, so that it never grows and leaves copies behind).
//!
//! Errors ([`Refused`]) name the file and say what to do; they never show its contents. The caller adds the
//! configuration key that named the file.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// The largest file read (a rule file of many thousand rules fits; a key file is far smaller).
pub const MAX_LEN: u64 = 16 << 20;

/// How strictly a file is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// A file of keys: readable and writable by its owner only (0600 or 0400), and not a symbolic link.
    Secret,
    /// A file of rules, configuration or trust anchors: it decides what is protected or whom to trust, so only its
    /// owner may write it (others may read it).
    Rules,
}

/// Why a file was not read: what is wrong with it, naming it, never its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub path: PathBuf,
    /// What is wrong, as the rest of a sentence that starts with the file's name (`is owned by user 65534, ...`).
    pub why: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", shown(&self.path), self.why)
    }
}

/// How a message names a file: its path, unless its name looks like a key (`0x` and hex digits, or 16 hex digits
/// or more: a key pasted where the name of its file belongs), which is not shown.
pub fn shown(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let hex = |h: &str| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit());
    let key_like = match name.strip_prefix("0x").or_else(|| name.strip_prefix("0X")) {
        Some(h) => hex(h),
        None => name.len() >= 16 && hex(&name),
    };
    if key_like {
        "the file (its name looks like a key: not shown)".into()
    } else {
        path.display().to_string()
    }
}

impl Refused {
    /// The error without the file's name (for a section whose errors show no value of a key, the path included).
    pub fn without_path(&self) -> String {
        format!("the file (path not shown) {}", self.why)
    }
}

/// A file's contents as read, with its mode bits as `fstat` gave them on the descriptor they were read from.
pub struct Contents {
    path: PathBuf,
    pub bytes: Zeroizing<Vec<u8>>,
    /// The permission bits (`& 0o7777`).
    pub mode: u32,
}

impl Contents {
    /// The contents as UTF-8 text (borrowed: no copy of a secret is made).
    pub fn text(&self) -> Result<&str, Refused> {
        std::str::from_utf8(&self.bytes).map_err(|_| Refused {
            path: self.path.clone(),
            why: "is not text (UTF-8)".into(),
        })
    }

    /// Whether the file's group or others may read it (a rule or configuration file that holds keys should not
    /// be: see [`readable_note`]).
    pub fn readable_by_others(&self) -> bool {
        self.mode & 0o044 != 0
    }
}

/// A warning for a file that others may read and that holds keys (`what`: which, e.g. "literal keys (rule 3)").
pub fn readable_note(path: &Path, mode: u32, what: &str) -> String {
    format!(
        "{} holds {what} and is readable by its group or others (mode {:04o}): make it 0600 (chmod 600), or \
         move the keys to a key file of mode 0600",
        shown(path),
        mode & 0o7777,
    )
}

/// The configuration file: it decides what is protected and may hold keys, so it is read as rules are (owned by
/// root, writable by it only); a refusal names no key (the file itself is at fault).
pub fn read_config(path: &Path) -> Result<Contents, crate::runtime::error::ConfigError> {
    read(path, Level::Rules).map_err(|e| crate::runtime::error::ConfigError {
        key: String::new(),
        reason: e.to_string(),
    })
}

/// Opens `path` once, checks what was opened as `level` says and reads it (see the module documentation).
pub fn read(path: &Path, level: Level) -> Result<Contents, Refused> {
    let refuse = |why: String| Refused {
        path: path.to_path_buf(),
        why,
    };
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY;
    if level == Level::Secret {
        flags |= libc::O_NOFOLLOW;
    }
    // std opens with O_CLOEXEC.
    let file = File::options()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| {
            refuse(match e.raw_os_error() {
                Some(libc::ELOOP) if level == Level::Secret => {
                    "is a symbolic link: a key file must be the file itself (give the path it points to)".into()
                }
                _ => format!("cannot be opened: {e}"),
            })
        })?;
    // fstat: the file that was opened, not whatever the path names now.
    let meta = file
        .metadata()
        .map_err(|e| refuse(format!("cannot be examined: {e}")))?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else if std::os::unix::fs::FileTypeExt::is_fifo(&kind) {
            "a FIFO"
        } else if std::os::unix::fs::FileTypeExt::is_socket(&kind) {
            "a socket"
        } else {
            "a device"
        };
        return Err(refuse(format!("is {what}, not a regular file")));
    }
    let me = netveil_io::os::euid();
    if meta.uid() != 0 && meta.uid() != me {
        return Err(refuse(format!(
            "is owned by user {}, not by root{}: whoever owns it can change it; make root its owner (chown root)",
            meta.uid(),
            if me != 0 {
                format!(" or user {me} (this process)")
            } else {
                String::new()
            }
        )));
    }
    let mode = meta.mode() & 0o7777;
    match level {
        Level::Secret if mode & 0o077 != 0 => {
            return Err(refuse(format!(
                "is readable or writable by its group or others (mode {mode:04o}): a key file must be its owner's \
                 only; make it 0600 or 0400 (chmod 600)"
            )))
        }
        Level::Rules if mode & 0o022 != 0 => {
            return Err(refuse(format!(
                "is writable by its group or others (mode {mode:04o}): it decides what is protected, so only its \
                 owner may change it; make it 0644 or stricter (chmod go-w)"
            )))
        }
        _ => {}
    }
    if meta.len() > MAX_LEN {
        return Err(refuse(format!("is larger than {MAX_LEN} bytes")));
    }
    // One byte more than fstat said: a file that grew since is noticed, and the buffer never reallocates.
    let cap = meta.len() as usize + 1;
    let mut bytes = Zeroizing::new(vec![0u8; cap]);
    let mut n = 0;
    let mut file = file;
    while n < cap {
        match file.read(&mut bytes[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(refuse(format!("cannot be read: {e}"))),
        }
    }
    if n == cap {
        return Err(refuse("changed while it was read: try again".into()));
    }
    bytes.truncate(n);
    Ok(Contents {
        path: path.to_path_buf(),
        bytes,
        mode,
    })
}

#[cfg(test)]
pub(crate) mod tests;
