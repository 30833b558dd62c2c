//! netveil's daemon: the runtime and the engines and key-exchange drivers behind `netveil up`, one wing each.
//!
//! - [`runtime`]: what every engine and driver shares: the registry ([`runtime::registry`]: the traits an engine or
//!   a driver implements), the lifecycle of `netveil up`, `down` and `check` ([`runtime::lifecycle`]: one parse,
//!   the engines its sections select, one control socket, one undo), the typed SA port ([`runtime::sa_port`]),
//!   logs, names, shared configuration values and errors, secret files and the state directory (sequence marks,
//!   receive floors).
//! - [`engines`]: the data planes: [`engines::ip`] (ESP/AH and PSP over a TUN), [`engines::l2`] (l2sec on a LAN
//!   port), [`engines::pilsc`] (PILSC over netfilter queues).
//! - [`drivers`]: the key exchanges beside the engines, changing their SAs only through the SA port:
//!   [`drivers::ike`] (IKEv2) and [`drivers::psp_kx`] (PSP's TLS key exchange).
//!
//! [`REGISTRY`] is the one list of engines and drivers: adding an engine is its wing and one line there.

#![forbid(unsafe_code)]

// layers: drivers > engines > runtime
pub mod drivers;
pub mod engines;
pub mod runtime;

use runtime::error::ConfigError;
pub use runtime::error::{Error, Result};
use runtime::lifecycle::Sections;
use runtime::registry::Registry;
use std::path::Path;

/// Every engine and key-exchange driver of `netveil up`, in the order they are parsed, prepared, started and
/// stopped (the first present engine names the control socket).
pub const REGISTRY: Registry<'static> = Registry {
    engines: &[
        &engines::ip::IpSection,
        &engines::l2::L2Section,
        &engines::pilsc::PilscSection,
    ],
    drivers: &[&drivers::ike::IkeSection],
    attached: &[&drivers::psp_kx::PspKx],
};

/// Reads and validates a configuration file: its sections, each checked as a whole.
pub fn load(path: &Path) -> std::result::Result<Sections<'static>, ConfigError> {
    runtime::lifecycle::load_with(&REGISTRY, path)
}

/// Like [`load`], with every error of the file (see [`parse_all()`]).
pub fn load_all(path: &Path) -> std::result::Result<Sections<'static>, Vec<ConfigError>> {
    runtime::lifecycle::load_all_with(&REGISTRY, path)
}

/// Parses a configuration text (`base`: where relative paths in it start).
pub fn parse(text: &str, base: &Path) -> std::result::Result<Sections<'static>, ConfigError> {
    runtime::lifecycle::parse_with(&REGISTRY, text, base)
}

/// Parses a configuration text and reports every error in it, each naming its key (at least one on failure):
/// unknown sections, then each engine's (in registry order, each parsing only its own keys), then each driver's.
pub fn parse_all(
    text: &str,
    base: &Path,
) -> std::result::Result<Sections<'static>, Vec<ConfigError>> {
    runtime::lifecycle::parse_all_with(&REGISTRY, text, base)
}

/// `netveil check -c FILE`: the file, and what `up` would fail on here (nothing is applied). Returns the summary
/// line; notes (a daemon of this configuration already runs) are printed on stderr.
pub fn check(path: &Path) -> Result<String> {
    runtime::lifecycle::check_with(&REGISTRY, path)
}

/// `netveil up -c FILE`: every engine the file's sections select, in one process, until SIGINT/SIGTERM, `netveil
/// down`, or the end of a data-plane thread. `verbose` (`-v` count) and `quiet` (`-q`) override the file's
/// `log_level`; `fresh_keys` (`--fresh-keys`) confirms that outbound SAs whose keys have no sequence mark use new
/// keys, for a state directory without its record (see [`crate::runtime::state`]).
pub fn up(path: &Path, verbose: u8, quiet: bool, fresh_keys: bool) -> Result<()> {
    runtime::lifecycle::up_with(&REGISTRY, path, verbose, quiet, fresh_keys)
}

/// `netveil down -c FILE`: each engine of the file that supports it stops a running daemon of this configuration
/// and removes what it leaves behind (the IP engine: its fail-closed filters, a killed instance's routing rules and
/// stale control socket: covered traffic is no longer blocked). A file of engines that do not support it is an
/// error saying so.
pub fn down(path: &Path) -> Result<()> {
    runtime::lifecycle::down_with(&REGISTRY, path)
}
