//! The lab's own tools, run as processes through the `netveil` binary (hidden commands): [`flood`] sends a packet
//! flood at a tunnel endpoint (`netveil bench --flood`), [`delay`] holds a link's packets for a fixed time (`netveil
//! lab`'s `delay` experiment; this kernel has no netem). They work on the host's sockets and netfilter queues
//! (`netveil-io`), which the lab crate may not use: the lab starts them and reads what they print.

#![forbid(unsafe_code)]

// layers: delay, flood
pub mod delay;
pub mod flood;

/// A lab tool's failure: what failed and why. Bad arguments exit with code 2.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An option's value is unusable, or the capture it names holds nothing to send: the message names the option
    /// or the file.
    #[error("{0}")]
    Usage(String),
    /// A socket or queue could not be opened or used: what was tried, and the OS's error.
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    /// The capture to replay could not be read (a file that is not a pcap file is bad input).
    #[error(transparent)]
    Pcap(#[from] netveil_pcap::FileError),
}

impl Error {
    /// The command's exit code for this error: 2 for bad input, 1 for anything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) | Error::Pcap(netveil_pcap::FileError::Format(_)) => 2,
            _ => 1,
        }
    }

    /// An I/O error with what was tried.
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
