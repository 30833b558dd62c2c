//! netveil's daemon: the configuration, the runtime and the engines behind `netveil up`.
//!
//! - [`runtime`]: `netveil up`, `down`, `check`: one parse, the engines its sections select, one control socket.
//! - [`registry`]: the engine registry (the [`registry::EngineSection`] trait, the one list of engines and
//!   key-exchange drivers): adding an engine is its module plus one line there.
//! - [`engine`]: what every engine plugs into (the [`engine::Engine`] and [`engine::Control`] traits, `Undo`).
//! - [`config`]: the IP sections of `netveil.toml` (one module per section), validated as a whole before anything
//!   is applied.
//! - [`ip`]: the IP engine: TUN + raw/UDP sockets, ESP/AH and PSP, the data-plane threads.
//! - [`ip_drop`]: why the IP engine drops a packet (the drop-reason registry of ESP/AH plus the engine's own).
//! - [`ike`]: the IKEv2 key-exchange driver (`[ike]`): its sockets on UDP 500 and 4500, the loop around
//!   [`netveil_ike`]'s state machine, the CHILD_SAs it negotiates installed through [`sa_api`].
//! - [`l2`]: the L2 engine: l2sec on a LAN port (TAP + AF_PACKET); [`l2_section`]: its registry entry.
//! - [`psp_kx`]: the PSP key-exchange driver: TCP and TLS around the sans-I/O [`netveil_psp::kx`] machine, beside the
//!   IP engine, changing its data plane only through the typed port of [`sa_api`].
//! - [`psp_state`]: PSP in the IP engine's data plane: the device, the transmit SA, the socket filter.
//! - [`sa_api`]: the typed SA and policy interface ([`sa_api::SaPort`]) of the IP engine, for key-exchange drivers
//!   and the control socket's adapter.
//! - [`ip_db`]: the IP engine's SAs and policies, changed while traffic flows (snapshots swapped atomically).
//! - [`ip_ctl`]: the IP engine's answers on the control socket.
//! - [`nft`]: the IP engine's nftables table (fail-closed filters, peer filter).
//! - [`filters`]: the socket-filter rules and the storm mode.
//! - [`error`]: configuration errors, each naming its key.
//! - [`secret_file`]: the one reader of files that hold keys or rules: opened once, checked through the
//!   descriptor (owner, mode, kind), read from it.
//! - [`names`]: the one rule for SA, policy and interface names (what reaches nftables and the log).
//! - [`state`]: the state directory (sequence marks, epochs).

#![forbid(unsafe_code)]

pub mod config;
pub mod engine;
pub mod error;
pub mod filters;
pub mod ike;
pub mod ip;
pub mod ip_ctl;
pub mod ip_db;
pub mod ip_drop;
pub mod l2;
pub mod l2_section;
pub mod log;
pub mod names;
pub mod nft;
pub mod pilsc;
pub mod psp_kx;
pub mod psp_state;
pub mod registry;
pub mod runtime;
pub mod sa_api;
pub mod secret_file;
pub mod state;

/// A failure of the daemon or of a command run on a configuration. Bad input (configuration, arguments) exits with
/// code 2.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(#[from] config::ConfigError),
    /// Every error of a configuration file (`netveil check`).
    #[error("{}", errors_text(.0))]
    Configs(Vec<config::ConfigError>),
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
            netveil_control::Error::Other(m) => Error::Other(m),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// One error as itself; several as a count and one line each.
fn errors_text(e: &[config::ConfigError]) -> String {
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
