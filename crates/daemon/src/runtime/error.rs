//! Configuration errors: the key at fault and why.

/// A configuration error: the key it concerns and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub key: String,
    pub reason: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.key, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}

/// A failure of the daemon or of a command run on a configuration. Bad input (configuration, arguments) exits with
/// code 2.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// Every error of a configuration file (`netveil check`).
    #[error("{}", errors_text(.0))]
    Configs(Vec<ConfigError>),
    #[error("{0}")]
    Usage(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    /// A command the daemon runs (`ip`, `nft`, `iptables`) failed: its command line and what it printed.
    #[error("'{command}' failed: {stderr}")]
    Command { command: String, stderr: String },
    /// This host lacks what an engine needs: what, and how to get it.
    #[error("{what}: {hint}")]
    Unsupported { what: String, hint: String },
    /// A key-exchange driver could not start: which, and why.
    #[error("{driver}: {cause}")]
    Driver { driver: &'static str, cause: String },
    /// The TLS or certificate library refused: what was being built, and its error.
    #[error("{context}: {cause}")]
    Crypto { context: String, cause: String },
    /// A running daemon did not stop in time (`netveil down`).
    #[error("the daemon on {} did not stop within {seconds} s", socket.display())]
    NotStopped {
        socket: std::path::PathBuf,
        seconds: u64,
    },
    /// The control socket's client: the daemon refused a request, failed it, or answered something unreadable.
    #[error(transparent)]
    Control(netveil_control::Error),
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config(_) | Error::Configs(_) | Error::Usage(_) => 2,
            _ => 1,
        }
    }
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

impl From<netveil_control::Error> for Error {
    fn from(e: netveil_control::Error) -> Error {
        match e {
            netveil_control::Error::Usage(m) => Error::Usage(m),
            netveil_control::Error::Io { context, source } => Error::Io { context, source },
            other => Error::Control(other),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// One error as itself; several as a count and one line each.
fn errors_text(e: &[ConfigError]) -> String {
    match e {
        [one] => one.to_string(),
        _ => {
            let mut t = format!("{} errors in the configuration:", e.len());
            for x in e {
                t.push_str(&format!("\n  {x}"));
            }
            t
        }
    }
}
