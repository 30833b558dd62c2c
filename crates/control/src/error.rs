//! What a failed control-socket operation says ([`Error`]): the user's to fix, an I/O error in its context, a request
//! the daemon refused or failed, or an answer this client cannot read.

/// A failed control-socket operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing to talk to, no permission, or a request the daemon refuses: the user's to fix (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// A system call failed: what was being done, and the system's error.
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    /// The daemon refused or could not carry out a request it understood: what was asked, and its reason.
    #[error("{request}: {reason}")]
    Refused { request: String, reason: String },
    /// A request the daemon carried out without the outcome asked for (a negotiation failed, no outcome in
    /// time): its reason, as the daemon gave it.
    #[error("{reason}")]
    Failed { request: String, reason: String },
    /// The daemon answered something this client cannot read: what was asked, and why.
    #[error("bad answer from the daemon to {request}: {cause}")]
    BadAnswer { request: String, cause: String },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
