//! What a failed control-socket operation says ([`Error`]): the user's to fix, an I/O error in its context, or an
//! unexpected answer.

/// A failed control-socket operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing to talk to, no permission, or a request the daemon refuses: the user's to fix.
    #[error("{0}")]
    Usage(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    /// The daemon answered something unexpected.
    #[error("{0}")]
    Other(String),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
