//! The engine registry: what an engine (and a key-exchange driver) implements to plug into `netveil up`, `check`,
//! `down` and `status`, and the one list of them.
//!
//! An engine owns top-level sections of `netveil.toml` ([`EngineSection::keys`]). The runtime ([`crate::runtime::lifecycle`])
//! parses the file once, refuses top-level keys that no registered engine, driver or the runtime itself owns
//! (naming the known ones), and hands each engine whose keys are present a table of **its keys only**
//! ([`EngineSection::parse`]); every error names its key. An engine's parsed [`Section`] then answers `netveil
//! check` ([`Section::check`]), checks the host and builds its key schedules before anything changes
//! ([`Section::prepare`]), and starts ([`Prepared::start`]): its running [`Engine`] (ticked and stopped by the
//! runtime), its [`Control`] answers (its part of `status`, other requests) and, for an engine that carries SAs,
//! the [`SaPort`] the key-exchange drivers install them through. `netveil down` is [`Section::down`] (not supported
//! unless an engine says otherwise).
//!
//! Key-exchange drivers ([`DriverSection`]) own sections too; they start after the engines, with the [`SaPort`] an
//! engine offered, and run beside them (ticked and stopped like an engine). An engine's own sections may also
//! configure drivers ([`AttachedDriver`]: they read those sections; the engine does not name them).
//!
//! Adding an engine: its module (the types and an `impl EngineSection`) and one line in [`crate::REGISTRY`]. Tests and
//! embedders may run with a registry of their own ([`Registry`], `crate::runtime::lifecycle::*_with`).

use crate::runtime::config::ConfigError;
use crate::runtime::engine::{Control, Engine, Undo};
use crate::runtime::sa_port::SaPort;
use crate::Result;
use std::any::Any;
use std::path::Path;
use std::sync::Arc;

/// The engines and drivers one run knows.
#[derive(Clone, Copy)]
pub struct Registry<'r> {
    pub engines: &'r [&'r dyn EngineSection],
    pub drivers: &'r [&'r dyn DriverSection],
    /// Drivers that an engine's own sections configure (they own no section).
    pub attached: &'r [&'r dyn AttachedDriver],
}

impl Registry<'_> {
    /// Every top-level key that an engine or a driver owns, in registry order.
    pub fn keys(&self) -> impl Iterator<Item = &'static str> + '_ {
        let e = self.engines.iter().flat_map(|e| e.keys().iter().copied());
        e.chain(self.drivers.iter().flat_map(|d| d.keys().iter().copied()))
    }
}

/// What `netveil up` passes every engine's [`Section::prepare`].
#[derive(Debug, Clone, Default)]
pub struct UpOptions {
    /// `--fresh-keys`: outbound SAs whose keys have no sequence mark use new keys (see [`crate::runtime::state`]).
    pub fresh_keys: bool,
    /// The configuration file the daemon was started with (an engine that reloads its sections reads it again).
    pub config: Option<std::path::PathBuf>,
}

/// An engine as the registry knows it: its name, its sections, and their parser.
pub trait EngineSection: Sync {
    /// The engine's name (messages; an engine without a member of its own in `netveil_control::Status` puts its
    /// status under `engines.NAME`, see `netveil_control::Status::set_part`).
    fn name(&self) -> &'static str;
    /// The top-level keys it owns (`interface`, `sa`, ...): present ones select the engine.
    fn keys(&self) -> &'static [&'static str];
    /// How messages name its sections: `[l2sec]`, `[interface] (ESP, AH, PSP)`.
    fn describe(&self) -> &'static str;
    /// Parses and validates its sections: `table` holds only this engine's keys (at least one); `base` is where
    /// relative file names start. Every error it finds, each naming its key (`l2sec.interface`, `sa[0].spi`).
    fn parse(
        &self,
        table: toml::Table,
        base: &Path,
    ) -> std::result::Result<Box<dyn Section>, Vec<ConfigError>>;
    /// Whether its sections (`table`, as [`EngineSection::parse`] gets it) write keys themselves (a static SA's
    /// `enc_key`, a group secret), not only name files of them: then the configuration file should be readable by
    /// its owner only, and the runtime warns if it is not (see [`crate::runtime::secret_file`]).
    fn holds_keys(&self, _table: &toml::Table) -> bool {
        false
    }
    /// Whether its running engine offers an [`SaPort`] (drivers need one).
    fn offers_sa_port(&self) -> bool {
        false
    }
    /// The message of `netveil down` for an engine that does not support it.
    fn down_unsupported(&self) -> String {
        format!(
            "netveil down is not supported by the {} engine ({}): it gives back what it set up when its daemon \
             stops (SIGTERM)",
            self.name(),
            self.describe()
        )
    }
}

/// What `netveil check` says of one engine's sections.
#[derive(Debug, Clone, Default)]
pub struct Checked {
    /// Its part of the summary line (`2 SAs, 2 policies`).
    pub summary: String,
    /// Notes printed on stderr (a daemon of this configuration already runs, ...).
    pub notes: Vec<String>,
}

/// One engine's sections, parsed and validated.
pub trait Section: Send {
    /// `netveil check`: what `up` would fail on here (files, the host), changing nothing.
    fn check(&self) -> Result<Checked>;
    /// Everything checked and every key schedule built, changing nothing on the system yet: `up` prepares every
    /// engine before it starts the first.
    fn prepare(self: Box<Self>, opts: &UpOptions) -> Result<Box<dyn Prepared>>;
    /// `netveil down`: stops a running daemon of this configuration and removes what it leaves behind. `None`:
    /// not supported (see [`EngineSection::down_unsupported`]).
    fn down(&self) -> Option<Result<()>> {
        None
    }
    /// The parsed configuration itself (for tests and tools: `downcast_ref` to the engine's type).
    fn as_any(&self) -> &dyn Any;
}

/// One engine, prepared.
pub trait Prepared: Send {
    /// The control socket its configuration names (the first engine's is the daemon's).
    fn control_socket(&self) -> &Path;
    /// The control group's id, if its configuration names one.
    fn control_group(&self) -> Option<u32>;
    /// Sets the engine up (every system change recorded in `undo`) and starts its threads. `control`: the
    /// daemon's control socket (for its startup line).
    fn start(self: Box<Self>, undo: &mut Undo, control: &Path) -> Result<Started>;
}

/// A started engine.
pub struct Started {
    /// Ticked every 20 ms and stopped by the runtime.
    pub engine: Box<dyn Engine>,
    /// Its answers on the control socket (its part of `status` included).
    pub control: Arc<dyn Control>,
    /// The SA/policy interface it offers the key-exchange drivers (see [`EngineSection::offers_sa_port`]).
    pub sa_port: Option<Arc<dyn SaPort>>,
}

/// A key-exchange driver with sections of its own.
pub trait DriverSection: Sync {
    /// The driver's name (messages).
    fn name(&self) -> &'static str;
    /// The top-level keys it owns.
    fn keys(&self) -> &'static [&'static str];
    /// Parses and validates its sections (`table` holds only its keys), every error naming its key.
    fn parse(
        &self,
        table: toml::Table,
        base: &Path,
    ) -> std::result::Result<Box<dyn DriverConfig>, Vec<ConfigError>>;
    /// As [`EngineSection::holds_keys`]: whether its sections write keys themselves (a `psk`).
    fn holds_keys(&self, _table: &toml::Table) -> bool {
        false
    }
}

/// One driver's sections, parsed and validated.
pub trait DriverConfig: Send {
    /// `netveil check`: its part of the summary line.
    fn check(&self) -> Result<Checked> {
        Ok(Checked::default())
    }
    /// Starts the driver (its sockets, thread and clock): it changes the data plane only through `port`.
    fn start(self: Box<Self>, port: Arc<dyn SaPort>) -> Result<Box<dyn Engine>>;
}

/// A key-exchange driver that an engine's own sections configure (PSP's TLS exchange, from the IP engine's
/// `[psp]`): it owns no section and reads what it needs from that engine's parsed configuration, so that the engine
/// never names it. The runtime asks each one about every engine's sections, before that engine's own checks and
/// preparation (certificates and keys are read before anything about the host), and starts what it prepared right
/// after that engine, with that engine's [`SaPort`]; it stops before the engines.
pub trait AttachedDriver: Sync {
    /// The driver's name (messages).
    fn name(&self) -> &'static str;
    /// `netveil check`: what `section` configures for this driver, read and checked (changing nothing); `Ok` also
    /// when it configures none (another engine's sections, or no such section).
    fn check(&self, section: &dyn Section) -> Result<()>;
    /// The driver `section` configures, its files read and checked, changing nothing on the system (`None`: it
    /// configures none).
    fn prepare(&self, section: &dyn Section) -> Result<Option<Box<dyn DriverConfig>>>;
}
