//! netveil's PKI tool, behind `netveil keygen`: private keys, certificate requests, a self-signed CA and end-entity
//! certificates, made the way strongSwan's `pki` makes them ([`keygen`]). Only the command uses it; the daemon reads
//! keys and certificates (the `ike` crate's `cert`, the PSP key exchange) and never makes them.

#![forbid(unsafe_code)]

use std::path::PathBuf;

pub mod keygen;

/// A failed `keygen` operation: what failed, the option or file it concerns, and the cause.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input is at fault: an option's value, the contents of the file it names (not a key, request or
    /// certificate netveil reads; a key that does not belong to its certificate), or an output file that exists.
    /// The caller's to fix: the command exits with code 2.
    #[error("{}{}{reason}", prefix(.option.as_deref(), ": "), prefix(.file.as_ref().map(|f| f.display().to_string()).as_deref(), " "))]
    Input {
        /// The option (`--cakey`, `--dn`, `--lifetime`), if the input came from one.
        option: Option<String>,
        /// The file, if the fault is in a file or is that file (an output that exists).
        file: Option<PathBuf>,
        reason: String,
    },
    /// A file could not be opened, read, created or written.
    #[error("{}{action} {}: {source}", prefix(.option.as_deref(), ": "), .file.display())]
    Io {
        /// The option that named the file, for an input file.
        option: Option<String>,
        /// What was tried: `cannot open`, `cannot read`, `cannot create`, `cannot write`.
        action: &'static str,
        file: PathBuf,
        source: std::io::Error,
    },
    /// The crypto library could not make or sign something (`what`: e.g. "cannot make a rsa-2048 key").
    #[error("{what}: {source}")]
    Crypto { what: String, source: rcgen::Error },
    /// The system clock is outside what a certificate's validity can hold (`reason`: "before 1970", "out of range").
    #[error("the clock is {reason}")]
    Clock { reason: &'static str },
    /// A certificate made here failed its own check (a bug, never the input's fault).
    #[error("internal: {0}")]
    Internal(&'static str),
}

impl Error {
    /// The command's exit code for this error: 2 for bad input, 1 for anything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Input { .. } => 2,
            _ => 1,
        }
    }

    /// An input error about an option's value (no file).
    pub(crate) fn option(option: &str, reason: impl Into<String>) -> Error {
        Error::Input {
            option: Some(option.to_string()),
            file: None,
            reason: reason.into(),
        }
    }

    /// An input error about the contents of the file an option names.
    pub(crate) fn file(option: &str, file: &std::path::Path, reason: impl Into<String>) -> Error {
        Error::Input {
            option: Some(option.to_string()),
            file: Some(file.to_path_buf()),
            reason: reason.into(),
        }
    }

    /// The crypto library's error, with what failed.
    pub(crate) fn crypto(what: impl Into<String>) -> impl FnOnce(rcgen::Error) -> Error {
        let what = what.into();
        move |source| Error::Crypto { what, source }
    }

    /// An I/O error on `file` (named by `option`, if an input): what was tried.
    pub(crate) fn io(
        option: Option<&str>,
        action: &'static str,
        file: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let (option, file) = (option.map(str::to_string), file.to_path_buf());
        move |source| Error::Io {
            option,
            action,
            file,
            source,
        }
    }
}

/// `s` followed by `sep`, or nothing.
fn prefix(s: Option<&str>, sep: &str) -> String {
    s.map(|s| format!("{s}{sep}")).unwrap_or_default()
}

pub type Result<T> = std::result::Result<T, Error>;
