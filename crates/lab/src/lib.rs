//! netveil's lab: network namespaces, captures, workloads, `netveil bench`, `netveil demo` and `netveil lab`. It runs
//! the `netveil` binary (`up`, `status`, `keygen`, `flood`, ...) and reads what it prints; it never reaches into the
//! daemon.
//!
//! - [`lab_run`]: `netveil lab`, the studies' experiments in namespaces, one module each; [`lab_report`]: its
//!   report (cells, files, findings, comparison, figures).
//! - [`bench`](mod@bench), [`bench::ping`], [`bench::flood`], [`bench::split`], [`bench::ike`]: throughput,
//!   round-trip times, floods, where a packet's time goes, and IKEv2 setups against strongSwan's; [`bench::pilsc`]:
//!   PILSC's per-packet lookup from 10 to 100,000 rules.
//! - [`demo`]: `netveil demo` (ESP or PSP, `--l2sec`, `--pilsc`); [`demo_pilsc`]: the two-host PILSC lab it shares
//!   with the bench and the tests.
//! - [`strongswan`]: strongSwan's charon as a live IKEv2 peer in a namespace (`swanctl`, vici, `pki`).
//! - [`lan`]: a switched LAN of stations for l2sec.
//! - [`lab_proc`]: CPU time and memory of the lab's processes, from `/proc`.
//! - [`lab`]: namespaces, veth pairs, daemons, captures, two-host setups.
//! - [`seq_udp`]: a sequenced UDP stream for loss tests.
//! - [`pcap_tools`]: `netveil pcap`, ESP/AH and PSP applied to and removed from the packets of a capture.
//!
//! The `// layers:` line below declares the modules' order, top first: no module names anything in a module of a
//! higher group (`scripts/check-modules` holds the crate to it).

// layers: lab_run > lab_report > bench, demo > demo_pilsc, lab_proc, lan, strongswan > lab, pcap_tools, seq_udp

#![forbid(unsafe_code)]

pub mod bench;
pub mod demo;
pub mod demo_pilsc;
pub mod lab;
pub mod lab_proc;
pub mod lab_report;
pub mod lab_run;
pub mod lan;
pub mod pcap_tools;
pub mod seq_udp;
pub mod strongswan;

#[cfg(test)]
mod tests;

/// A failure of a lab: what failed, what it concerns (a command, a file, a peer, a measurement) and the cause, grouped
/// by what a caller can do about it. Bad arguments exit with code 2, anything else with 1.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad arguments, or what the user must provide first (root, a tool a command names): the user's to fix (exit
    /// code 2).
    #[error("{0}")]
    Usage(String),
    /// A system call failed: what was being done, and the system's error.
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    /// A peer the lab measures against is not installed (wireguard-go, strongSwan's charon, swanctl or pki): which,
    /// and how to get it; the cells it would have measured say so. (A tool a whole command needs is a usage error.)
    #[error("{tool} is not installed ({hint})")]
    Missing { tool: String, hint: String },
    /// A program the lab ran failed: its command line (or, for a daemon it started or a program it names by its
    /// role, that name: `charon a in NS`, `sipp (uac)`), how it ended (when it has) and what it printed.
    #[error("'{command}' failed{}{}", ended(.status), said(.output))]
    Command {
        command: String,
        status: Option<std::process::ExitStatus>,
        output: String,
    },
    /// Something the lab started or waited for did not come up, answer or finish in time: what, the time it had,
    /// and what its log says (or where it is).
    #[error("{what} within {seconds} s{}", said(.log))]
    Timeout {
        what: String,
        seconds: f64,
        log: String,
    },
    /// A peer refused or failed what the lab asked of it (charon over vici, an IKE exchange of the bench's load
    /// generator): the request, and the peer's reason.
    #[error("{request} failed: {reason}")]
    Refused { request: String, reason: String },
    /// What a program printed or answered cannot be read (the `netveil` binary's, a tool's, charon's): which
    /// program, and why.
    #[error("{command}: {why}")]
    Output { command: String, why: String },
    /// A file the lab reads is malformed (a capture, a `/proc` file, a key or certificate), or its path cannot be
    /// used: which, and why.
    #[error("{}: {why}", .path.display())]
    File {
        path: std::path::PathBuf,
        why: String,
    },
    /// A measurement has no usable result, or a check of what the lab shows failed (a demo's claim, lookups that
    /// must agree): what was measured or checked, and why.
    #[error("{what}: {why}")]
    Measurement { what: String, why: String },
    /// `netveil pcap` dropped packets of the capture it read (the counts are on standard error above): `--allow-drops`
    /// accepts that.
    #[error("{dropped} of {read} packets dropped (use --allow-drops to accept this)")]
    Dropped { dropped: u64, read: u64 },
    /// An error inside a step of a larger run: the step (a demo's, a path's), and the error.
    #[error("{context}: {source}")]
    Context { context: String, source: Box<Error> },
    /// An error and what the peers logged up to it, or where their files are (`log` begins with its own separator:
    /// a line end, `; `, `: ` or ` (`).
    #[error("{source}{log}")]
    Logged { source: Box<Error>, log: String },
    /// The lab broke its own rules (a thread panicked, a lab without the part it was built with, a report that
    /// breaks its schema): a bug, nothing the caller can fix.
    #[error("{0}")]
    Internal(String),
}

/// ` (STATUS)` for a program that ended, nothing for one that did not say how.
fn ended(status: &Option<std::process::ExitStatus>) -> String {
    status.map(|s| format!(" ({s})")).unwrap_or_default()
}

/// `: TEXT`, or nothing for no text.
fn said(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

impl Error {
    /// The command's exit code for this error: 2 for bad arguments, 1 for anything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            _ => 1,
        }
    }
    /// An I/O error in its context (what was being done).
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }

    /// A failed program: its command line, how it ended and what it printed (trimmed).
    pub(crate) fn command(
        command: impl Into<String>,
        status: Option<std::process::ExitStatus>,
        output: impl AsRef<str>,
    ) -> Error {
        Error::Command {
            command: command.into(),
            status,
            output: output.as_ref().trim().to_string(),
        }
    }

    /// A malformed file: `path`, and the error (as text) that says why.
    pub(crate) fn file<E: std::fmt::Display>(
        path: impl Into<std::path::PathBuf>,
    ) -> impl FnOnce(E) -> Error {
        let path = path.into();
        move |e| Error::File {
            path,
            why: e.to_string(),
        }
    }

    /// A path the lab cannot pass on as text.
    pub(crate) fn not_utf8(path: &std::path::Path) -> Error {
        Error::File {
            path: path.to_path_buf(),
            why: "the path is not UTF-8".into(),
        }
    }

    /// A request a peer refused or failed: the request, and the reason.
    pub(crate) fn refused(request: impl Into<String>, reason: impl std::fmt::Display) -> Error {
        Error::Refused {
            request: request.into(),
            reason: reason.to_string(),
        }
    }

    /// A program's unreadable output: the program, and why.
    pub(crate) fn output(command: impl Into<String>, why: impl Into<String>) -> Error {
        Error::Output {
            command: command.into(),
            why: why.into(),
        }
    }

    /// A measurement without a usable result: what, and why.
    pub(crate) fn measurement(what: impl Into<String>, why: impl Into<String>) -> Error {
        Error::Measurement {
            what: what.into(),
            why: why.into(),
        }
    }

    /// Something that did not come up or answer within `seconds`: what, and what its log says.
    pub(crate) fn timeout(what: impl Into<String>, seconds: f64, log: impl Into<String>) -> Error {
        Error::Timeout {
            what: what.into(),
            seconds,
            log: log.into(),
        }
    }

    /// This error inside a step (`context`).
    pub(crate) fn within(self, context: impl Into<String>) -> Error {
        Error::Context {
            context: context.into(),
            source: Box::new(self),
        }
    }

    /// This error and what the peers logged (`log` with its leading separator).
    pub(crate) fn logged(self, log: impl Into<String>) -> Error {
        Error::Logged {
            source: Box::new(self),
            log: log.into(),
        }
    }

    /// A bug of the lab's: what broke.
    pub(crate) fn internal(what: impl Into<String>) -> Error {
        Error::Internal(what.into())
    }
}

/// A copy, for a failure that several results share (the cells of a path that did not run). An I/O error's copy
/// keeps its kind and its message (`std::io::Error` is not `Clone`).
impl Clone for Error {
    fn clone(&self) -> Error {
        match self {
            Error::Usage(m) => Error::Usage(m.clone()),
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::Missing { tool, hint } => Error::Missing {
                tool: tool.clone(),
                hint: hint.clone(),
            },
            Error::Command {
                command,
                status,
                output,
            } => Error::Command {
                command: command.clone(),
                status: *status,
                output: output.clone(),
            },
            Error::Timeout { what, seconds, log } => Error::Timeout {
                what: what.clone(),
                seconds: *seconds,
                log: log.clone(),
            },
            Error::Refused { request, reason } => Error::Refused {
                request: request.clone(),
                reason: reason.clone(),
            },
            Error::Output { command, why } => Error::Output {
                command: command.clone(),
                why: why.clone(),
            },
            Error::File { path, why } => Error::File {
                path: path.clone(),
                why: why.clone(),
            },
            Error::Measurement { what, why } => Error::Measurement {
                what: what.clone(),
                why: why.clone(),
            },
            Error::Context { context, source } => Error::Context {
                context: context.clone(),
                source: source.clone(),
            },
            Error::Logged { source, log } => Error::Logged {
                source: source.clone(),
                log: log.clone(),
            },
            Error::Dropped { dropped, read } => Error::Dropped {
                dropped: *dropped,
                read: *read,
            },
            Error::Internal(m) => Error::Internal(m.clone()),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
