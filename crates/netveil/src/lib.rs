//! netveil: user-space packet security for Linux. This library holds the daemon and the tools behind the `netveil`
//! command; the protocols live in their own crates (`netveil-ipsec`, ...).
//!
//! - [`config`]: `netveil.toml`, validated as a whole before anything is applied.
//! - [`daemon`]: `netveil up`: TUN + raw/UDP sockets, the data-plane threads, the control socket.
//! - [`l2`]: `netveil up` for l2sec (TAP + AF_PACKET on a LAN port).
//! - [`control`]: `netveil status` / `netveil keys` talking to a running daemon.
//! - [`pcap`]: offline tools over pcap files.
//! - [`lab`]: network-namespace labs for `demo`, `bench` and the tests.

#![forbid(unsafe_code)]

pub mod bench;
pub mod bench_flood;
pub mod bench_split;
pub mod config;
pub mod control;
pub mod daemon;
pub mod demo;
pub mod flood;
pub mod l2;
pub mod lab;
pub mod lan;
pub mod pcap;
pub mod psp_ctl;
pub mod state;

/// A failure of a `netveil` command. Bad input (configuration, arguments) exits with code 2.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(#[from] config::ConfigError),
    #[error("{0}")]
    Usage(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config(_) | Error::Usage(_) => 2,
            _ => 1,
        }
    }
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
