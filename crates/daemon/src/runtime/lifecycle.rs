//! The runtime: one `netveil up` for every engine. One parse of the configuration file yields its sections; the
//! sections present select the engines of the registry ([`crate::runtime::registry`]: each engine owns top-level keys), so
//! one file may run several engines in one process. The runtime exists once: it checks every engine's configuration
//! against the host before anything changes, records every change in one [`Undo`], handles the signals, runs the
//! one control socket (its status is every engine's status in one JSON object) and drives the engines
//! ([`Engine::tick`], [`Engine::stop`]) and the key-exchange drivers beside them.
//!
//! Every step iterates a [`Registry`]: [`parse_all`](crate::parse_all) (unknown top-level keys refused, naming the known ones, then
//! each engine's own keys handed to its parser), [`check`](crate::check), [`up`](crate::up) (prepare all, then start all), the control
//! socket's `status` (each engine's [`Control`] adds its part) and [`down`](crate::down). The functions without `_with` use
//! [`crate::REGISTRY`]; the `_with` ones take a registry of the caller's (a test engine, say).

use crate::runtime::config::ConfigError;
use crate::runtime::engine::{Control, Engine, Undo};
use crate::runtime::registry::{
    DriverConfig, DriverSection, EngineSection, Registry, Section, UpOptions,
};
use crate::{Error, Result};
use serde_json::{json, Value};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// The sections of one configuration file, parsed and validated: each engine's and each driver's whose keys are
/// present, in registry order.
pub struct Sections<'r> {
    pub engines: Vec<(&'r dyn EngineSection, Box<dyn Section>)>,
    pub drivers: Vec<(&'r dyn DriverSection, Box<dyn DriverConfig>)>,
    /// `log_level` (top level, before the first section).
    pub log_level: Option<crate::runtime::log::Level>,
    /// Whether a section writes keys itself ([`EngineSection::holds_keys`]).
    pub holds_keys: bool,
    /// Warnings about the file itself (readable by others while it holds keys): `up` logs them once logging is
    /// set up, `check` prints them.
    pub warnings: Vec<String>,
}

impl Sections<'_> {
    /// Engine `name`'s parsed configuration, as its type (`None`: not in the file, or not of type `T`).
    pub fn get<T: 'static>(&self, name: &str) -> Option<&T> {
        self.engines
            .iter()
            .find(|(e, _)| e.name() == name)
            .and_then(|(_, s)| s.as_any().downcast_ref())
    }
}

/// The top-level keys of the runtime itself.
const RUNTIME_KEYS: [&str; 1] = ["log_level"];

/// [`load`](crate::load) with the engines and drivers of `reg`.
pub fn load_with<'r>(
    reg: &Registry<'r>,
    path: &Path,
) -> std::result::Result<Sections<'r>, ConfigError> {
    load_all_with(reg, path).map_err(|mut e| e.swap_remove(0))
}

/// [`load_all`](crate::load_all) with the engines and drivers of `reg`.
pub fn load_all_with<'r>(
    reg: &Registry<'r>,
    path: &Path,
) -> std::result::Result<Sections<'r>, Vec<ConfigError>> {
    let file = crate::runtime::secret_file::read_config(path).map_err(|e| vec![e])?;
    let text = file.text().map_err(|e| {
        vec![ConfigError {
            key: String::new(),
            reason: e.to_string(),
        }]
    })?;
    let mut s = parse_all_with(reg, text, path.parent().unwrap_or(Path::new(".")))?;
    if s.holds_keys && file.readable_by_others() {
        s.warnings.push(crate::runtime::secret_file::readable_note(
            path,
            file.mode,
            "keys written in it",
        ));
    }
    Ok(s)
}

/// [`parse`](crate::parse) with the engines and drivers of `reg`.
pub fn parse_with<'r>(
    reg: &Registry<'r>,
    text: &str,
    base: &Path,
) -> std::result::Result<Sections<'r>, ConfigError> {
    parse_all_with(reg, text, base).map_err(|mut e| e.swap_remove(0))
}

/// [`parse_all`](crate::parse_all) with the engines and drivers of `reg`.
pub fn parse_all_with<'r>(
    reg: &Registry<'r>,
    text: &str,
    base: &Path,
) -> std::result::Result<Sections<'r>, Vec<ConfigError>> {
    let mut table: toml::Table = toml::from_str(text).map_err(|e| {
        vec![ConfigError {
            key: String::new(),
            reason: crate::runtime::config::toml_error(text, &e),
        }]
    })?;
    let known: Vec<&str> = reg.keys().chain(RUNTIME_KEYS).collect();
    let mut errors: Vec<ConfigError> = table
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .map(|k| ConfigError {
            // Named when it is a plain name (it may be anything, a secret written in the wrong place too).
            key: if crate::runtime::names::is_name(k) {
                k.clone()
            } else {
                String::new()
            },
            reason: format!("unknown section or key (known: {})", known.join(", ")),
        })
        .collect();
    let log_level = table.get("log_level").and_then(|v| {
        crate::runtime::log::parse_level(v)
            .map_err(|e| errors.push(e))
            .ok()
    });
    // Each engine and driver gets a table of its own keys only (the unknown ones are reported above).
    let mut own = |keys: &[&str]| -> Option<toml::Table> {
        let t: toml::Table = keys
            .iter()
            .filter_map(|k| table.remove(*k).map(|v| (k.to_string(), v)))
            .collect();
        (!t.is_empty()).then_some(t)
    };
    let mut engines = Vec::new();
    let mut holds_keys = false;
    for e in reg.engines {
        if let Some(t) = own(e.keys()) {
            holds_keys |= e.holds_keys(&t);
            match e.parse(t, base) {
                Ok(s) => engines.push((*e, s)),
                Err(es) => errors.extend(es),
            }
        }
    }
    let mut drivers = Vec::new();
    for d in reg.drivers {
        if let Some(t) = own(d.keys()) {
            let first = t.keys().next().cloned().unwrap_or_default();
            holds_keys |= d.holds_keys(&t);
            match d.parse(t, base) {
                Ok(c) => drivers.push((*d, c, first)),
                Err(es) => errors.extend(es),
            }
        }
    }
    // A driver installs its SAs through an engine of this file.
    let with_port = || {
        reg.engines
            .iter()
            .filter(|e| e.offers_sa_port())
            .map(|e| e.describe())
            .collect::<Vec<_>>()
            .join(" or ")
    };
    for (d, _, key) in &drivers {
        if !engines.iter().any(|(e, _)| e.offers_sa_port()) {
            errors.push(ConfigError {
                key: key.clone(),
                reason: format!(
                    "the {} key exchange needs an engine that installs SAs ({})",
                    d.name(),
                    with_port()
                ),
            });
        }
    }
    if errors.is_empty() && engines.is_empty() {
        errors.push(ConfigError {
            key: String::new(),
            reason: format!(
                "nothing to run: no {} section",
                reg.engines
                    .iter()
                    .map(|e| e.describe())
                    .collect::<Vec<_>>()
                    .join(" and no ")
            ),
        });
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Sections {
        engines,
        drivers: drivers.into_iter().map(|(d, c, _)| (d, c)).collect(),
        log_level,
        holds_keys,
        warnings: Vec::new(),
    })
}

/// [`check`](crate::check) with the engines and drivers of `reg`.
pub fn check_with(reg: &Registry<'_>, path: &Path) -> Result<String> {
    let s = load_all_with(reg, path).map_err(Error::Configs)?;
    for w in &s.warnings {
        eprintln!("netveil: warning: {w}");
    }
    let mut parts = Vec::new();
    let engines = s.engines.iter().map(|(_, sec)| {
        // What an engine's sections configure for an attached driver (PSP's certificates) first.
        for a in reg.attached {
            a.check(sec.as_ref())?;
        }
        sec.check()
    });
    for c in engines.chain(s.drivers.iter().map(|(_, d)| d.check())) {
        let c = c?;
        for note in c.notes {
            eprintln!("netveil: note: {note}");
        }
        if !c.summary.is_empty() {
            parts.push(c.summary);
        }
    }
    Ok(format!("{}: ok ({})", path.display(), parts.join("; ")))
}

/// Set by the control request `stop` (from `netveil down`): the daemon removes its fail-closed filters on exit.
static DOWN: AtomicBool = AtomicBool::new(false);

/// The daemon's umask, set once at the start of `up`, before any thread: every file and socket it creates is
/// private until it widens one on purpose (the control socket for its control group).
pub const DAEMON_UMASK: u32 = 0o077;

/// Binds the control socket at `path` (see [`netveil_control::listen`]): under [`DAEMON_UMASK`] it is private from
/// its first moment (the umask is not changed here: data-plane threads run by now).
fn listen(path: &Path, group: Option<u32>) -> Result<UnixListener> {
    Ok(netveil_control::listen(path, group, |p| {
        UnixListener::bind(p)
    })?)
}

/// The answer to one control request: `status` from every engine, `stop` here, anything else from the engine that
/// knows it.
fn answer(controls: &[Arc<dyn Control>], line: &str) -> Value {
    use netveil_control::Request;
    let req = match Request::parse(line) {
        Ok(r) => r,
        Err(e) => return json!({ "error": e }),
    };
    match req {
        Request::Status => {
            let mut s = netveil_control::Status::default();
            for c in controls {
                c.status(&mut s);
            }
            serde_json::to_value(&s).unwrap_or_else(|e| json!({ "error": e.to_string() }))
        }
        Request::Stop => {
            // `netveil down`: stop, and remove the fail-closed filters on the way out.
            DOWN.store(true, Relaxed);
            netveil_io::os::stop_flag().store(true, Relaxed);
            json!({ "stopping": true })
        }
        _ => controls
            .iter()
            .find_map(|c| c.answer(&req))
            .unwrap_or_else(|| json!({ "error": "no engine of this daemon answers this request" })),
    }
}

/// [`up`](crate::up) with the engines and drivers of `reg`.
pub fn up_with(
    reg: &Registry<'_>,
    path: &Path,
    verbose: u8,
    quiet: bool,
    fresh_keys: bool,
) -> Result<()> {
    // First of all, with no other thread yet (the umask is the process's).
    netveil_io::os::set_umask(DAEMON_UMASK);
    let s = load_with(reg, path)?;
    crate::runtime::log::init(crate::runtime::log::level(s.log_level, verbose, quiet));
    for w in &s.warnings {
        tracing::warn!("{w}");
    }
    // Every check and every key schedule of every engine before the first change to the system.
    let opts = UpOptions {
        fresh_keys,
        config: Some(path.to_path_buf()),
    };
    let mut prepared = Vec::new();
    let mut driver_configs: Vec<Box<dyn DriverConfig>> = Vec::new();
    for (_, sec) in s.engines {
        // The drivers this engine's sections configure, their certificates and keys read before the engine's own
        // checks of the host.
        let mut own = Vec::new();
        for a in reg.attached {
            own.extend(a.prepare(sec.as_ref())?);
        }
        prepared.push((sec.prepare(&opts)?, own));
    }
    driver_configs.extend(s.drivers.into_iter().map(|(_, c)| c));
    // The one control socket: the first engine's.
    let control = prepared.first().map_or_else(
        || PathBuf::from(netveil_control::RUN_DIR).join("netveil.sock"),
        |(p, _)| p.control_socket().to_path_buf(),
    );
    let group = prepared.first().and_then(|(p, _)| p.control_group());
    let mut undo = Undo::default();
    let mut engines: Vec<Box<dyn Engine>> = Vec::new();
    let mut drivers: Vec<Box<dyn Engine>> = Vec::new();
    let mut controls: Vec<Arc<dyn Control>> = Vec::new();
    let started = (|| -> Result<UnixListener> {
        let mut port = None;
        for (p, own) in prepared {
            // The drivers this engine's own sections configure: started with this engine's port.
            let st = p.start(&mut undo, &control)?;
            controls.push(st.control);
            engines.push(st.engine);
            for d in own {
                let Some(port) = &st.sa_port else {
                    return Err(Error::Driver {
                        driver: "key exchange",
                        cause:
                            "an engine configures a key-exchange driver but offers no SA interface"
                                .into(),
                    });
                };
                drivers.push(d.start(port.clone())?);
            }
            port = port.or(st.sa_port);
        }
        for d in driver_configs {
            let Some(port) = &port else {
                return Err(Error::Usage(
                    "a key-exchange driver needs an engine that installs SAs, and none offers it"
                        .into(),
                ));
            };
            drivers.push(d.start(port.clone())?);
        }
        // The drivers' answers after the engines' (their status reads the engines' part, the IKE SAs' counters).
        controls.extend(drivers.iter().filter_map(|d| d.control()));
        listen(&control, group)
    })();
    let listener = match started {
        Ok(l) => l,
        Err(e) => {
            for en in drivers.into_iter().chain(engines) {
                en.stop(&mut undo, false);
            }
            return Err(e);
        }
    };
    let stop = netveil_io::os::stop_on_signals();
    let reload = netveil_io::os::reload_on_sighup();
    std::thread::Builder::new()
        .name("nv-ctl".into())
        .spawn(move || {
            netveil_control::serve_lines(listener, stop, group, |req| answer(&controls, req))
        })
        .map_err(Error::io("thread"))?;
    while !stop.load(Relaxed)
        && drivers
            .iter_mut()
            .chain(engines.iter_mut())
            .all(|e| e.tick())
    {
        if reload.swap(false, Relaxed) {
            for e in drivers.iter_mut().chain(engines.iter_mut()) {
                match e.reload() {
                    Some(Ok(m)) => tracing::info!("SIGHUP: reloaded: {m}"),
                    Some(Err(m)) => tracing::warn!("SIGHUP: reload refused, nothing changed: {m}"),
                    None => {}
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let down = DOWN.load(Relaxed);
    // The drivers first: they change the engines' SAs.
    for e in drivers.into_iter().chain(engines) {
        e.stop(&mut undo, down);
    }
    let _ = std::fs::remove_file(&control);
    drop(undo);
    Ok(())
}

/// [`down`](crate::down) with the engines and drivers of `reg`.
pub fn down_with(reg: &Registry<'_>, path: &Path) -> Result<()> {
    let s = load_with(reg, path)?;
    let mut done = false;
    let mut unsupported = None;
    for (e, sec) in &s.engines {
        match sec.down() {
            Some(r) => {
                r?;
                done = true;
            }
            None => {
                unsupported.get_or_insert_with(|| e.down_unsupported());
            }
        }
    }
    match (done, unsupported) {
        (false, Some(m)) => Err(Error::Usage(m)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse, parse_all};

    /// `check` reports every error of a file, each naming its key, in file order; a policy naming an SA that has
    /// an error of its own is not reported again.
    #[test]
    fn every_error_of_a_file_is_reported() {
        let text = r#"
[interface]
mtu = 10
[[sa]]
name = "a"
direction = "out"
spi = 0x1001
local = "192.0.2.1"
remote = "192.0.2.2"
suite = "aes128gcm16"
enc_key = "0011"
[[sa]]
name = "b"
direction = "sideways"
spi = 0x2001
suite = "aes128gcm16"
[[policy]]
direction = "out"
action = "protect"
sas = ["a"]
[[policy]]
direction = "in"
action = "maybe"
[[policy]]
direction = "in"
action = "protect"
sas = ["nope"]
[bogus]
"#;
        let e = match parse_all(text, Path::new(".")) {
            Err(e) => e,
            Ok(_) => panic!("accepted"),
        };
        let keys: Vec<&str> = e.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "bogus",
                "interface.mtu",
                "sa[0].enc_key",
                "sa[1].direction",
                "policy[1].action",
                "policy[2].sas[0]"
            ]
        );
        // The first is what `up` reports.
        assert_eq!(parse(text, Path::new(".")).err().unwrap().key, "bogus");
        let shown = crate::Error::Configs(e).to_string();
        assert!(
            shown.starts_with("6 errors in the configuration:\n  bogus: unknown section"),
            "{shown}"
        );
        assert!(!shown.contains("0011"), "{shown}");
    }
}
