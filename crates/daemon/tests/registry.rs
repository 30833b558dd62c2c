//! The engine registry from outside the daemon crate: a test engine (`[echo]`) and a test key-exchange driver
//! (`[kx]`) registered through [`Registry`] alone, with sections of their own. A bad key is refused naming the key
//! (a configuration error: exit code 2) before any engine is prepared or started; every engine is prepared before
//! the first starts; the test engine's typed status shows up in `status`; the driver starts with the SA port the
//! engine offers and stops before it. And the default registry's unknown-key message lists the registry's keys.

use netveil_daemon::runtime::config::{typed, ConfigError};
use netveil_daemon::runtime::engine::{Control, Engine, Undo};
use netveil_daemon::runtime::lifecycle;
use netveil_daemon::runtime::registry::{
    Checked, DriverConfig, DriverSection, EngineSection, Prepared, Registry, Section, Started,
    UpOptions,
};
use netveil_daemon::runtime::sa_port::SaPort;
use netveil_daemon::Error;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the test engines and driver did, in order (`echo:prepare`, `kx:start`, ...).
#[derive(Default)]
struct Log(Mutex<Vec<String>>);

impl Log {
    fn push(&self, what: String) {
        self.0.lock().unwrap().push(what);
    }
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    fn count(&self, what: &str) -> usize {
        self.all().iter().filter(|w| *w == what).count()
    }
}

/// A test engine: its section is `[NAME]` (`name`, `port`, `control_socket`, `fail_prepare`).
struct TestEngine {
    name: &'static str,
    keys: &'static [&'static str],
    port: bool,
    log: Arc<Log>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEcho {
    name: Option<String>,
    port: Option<i64>,
    control_socket: Option<String>,
    #[serde(default)]
    fail_prepare: bool,
}

struct EchoConfig {
    engine: &'static str,
    name: String,
    port: u16,
    control_socket: PathBuf,
    fail_prepare: bool,
    offers_port: bool,
    log: Arc<Log>,
}

/// The test engine's typed status (its part of `netveil status`).
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct EchoStatus {
    name: String,
    port: u16,
    ticks: u64,
}

impl EngineSection for TestEngine {
    fn name(&self) -> &'static str {
        self.name
    }
    fn keys(&self) -> &'static [&'static str] {
        self.keys
    }
    fn describe(&self) -> &'static str {
        "[echo]"
    }
    fn parse(
        &self,
        mut table: toml::Table,
        _base: &Path,
    ) -> Result<Box<dyn Section>, Vec<ConfigError>> {
        self.log.push(format!("{}:parse", self.name));
        // Handed its own keys only.
        assert_eq!(
            table.keys().collect::<Vec<_>>(),
            [self.name],
            "handed another engine's keys"
        );
        let v = table.remove(self.name).unwrap();
        let r: RawEcho = typed(v, self.name).map_err(|e| vec![e])?;
        let key = |k: &str| format!("{}.{k}", self.name);
        let port = match r.port.unwrap_or(7) {
            p @ 1..=65535 => p as u16,
            _ => {
                return Err(vec![ConfigError {
                    key: key("port"),
                    reason: "is out of range (1..=65535; value not shown)".into(),
                }])
            }
        };
        Ok(Box::new(EchoConfig {
            engine: self.name,
            name: r.name.unwrap_or_else(|| "e0".into()),
            port,
            control_socket: PathBuf::from(
                r.control_socket
                    .unwrap_or_else(|| format!("/nonexistent/{}.sock", self.name)),
            ),
            fail_prepare: r.fail_prepare,
            offers_port: self.port,
            log: self.log.clone(),
        }))
    }
    fn offers_sa_port(&self) -> bool {
        self.port
    }
}

impl Section for EchoConfig {
    fn check(&self) -> netveil_daemon::Result<Checked> {
        Ok(Checked {
            summary: format!("echo {} on port {}", self.name, self.port),
            notes: Vec::new(),
        })
    }
    fn prepare(self: Box<Self>, _opts: &UpOptions) -> netveil_daemon::Result<Box<dyn Prepared>> {
        self.log.push(format!("{}:prepare", self.engine));
        if self.fail_prepare {
            return Err(Error::Config(ConfigError {
                key: format!("{}.fail_prepare", self.engine),
                reason: "refused by the host check".into(),
            }));
        }
        Ok(self)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Prepared for EchoConfig {
    fn control_socket(&self) -> &Path {
        &self.control_socket
    }
    fn control_group(&self) -> Option<u32> {
        None
    }
    fn start(
        self: Box<Self>,
        _undo: &mut Undo,
        _control: &Path,
    ) -> netveil_daemon::Result<Started> {
        self.log.push(format!("{}:start", self.engine));
        let st = Arc::new(EchoState {
            engine: self.engine,
            name: self.name.clone(),
            port: self.port,
            ticks: AtomicUsize::new(0),
        });
        Ok(Started {
            engine: Box::new(EchoEngine {
                st: st.clone(),
                log: self.log.clone(),
            }),
            control: st,
            sa_port: self
                .offers_port
                .then(|| Arc::new(EchoPort) as Arc<dyn SaPort>),
        })
    }
}

struct EchoState {
    engine: &'static str,
    name: String,
    port: u16,
    ticks: AtomicUsize,
}

impl Control for EchoState {
    fn answer(&self, _req: &netveil_control::Request) -> Option<serde_json::Value> {
        None
    }
    fn status(&self, status: &mut netveil_control::Status) {
        status.set_part(
            self.engine,
            &EchoStatus {
                name: self.name.clone(),
                port: self.port,
                ticks: self.ticks.load(SeqCst) as u64,
            },
        );
    }
}

struct EchoEngine {
    st: Arc<EchoState>,
    log: Arc<Log>,
}

impl Engine for EchoEngine {
    fn tick(&mut self) -> bool {
        self.st.ticks.fetch_add(1, SeqCst);
        true
    }
    fn stop(self: Box<Self>, _undo: &mut Undo, _down: bool) {
        self.log.push(format!("{}:stop", self.st.engine));
    }
}

/// The SA port the test engine offers (the typed SA interface's methods are not used here: each refuses).
struct EchoPort;

fn refused() -> netveil_daemon::engines::ip::config::ConfigError {
    netveil_daemon::engines::ip::config::ConfigError {
        key: String::new(),
        reason: "the echo engine installs no SAs".into(),
    }
}

impl SaPort for EchoPort {
    fn sa_add_out(
        &self,
        _: netveil_daemon::runtime::sa_port::OutboundSaParams,
    ) -> Result<(), netveil_daemon::engines::ip::config::ConfigError> {
        Err(refused())
    }
    fn sa_add_in(
        &self,
        _: netveil_daemon::runtime::sa_port::InboundSaParams,
    ) -> Result<(), netveil_daemon::engines::ip::config::ConfigError> {
        Err(refused())
    }
    fn sa_update(
        &self,
        _: netveil_daemon::runtime::sa_port::AnySaParams,
    ) -> Result<(), netveil_daemon::engines::ip::config::ConfigError> {
        Err(refused())
    }
    fn sa_del(&self, _: &str) -> Result<(), netveil_daemon::engines::ip::config::ConfigError> {
        Err(refused())
    }
    fn policy_add(
        &self,
        _: netveil_daemon::runtime::sa_port::PolicyParams,
        _: Option<usize>,
    ) -> Result<(), netveil_daemon::engines::ip::config::ConfigError> {
        Err(refused())
    }
    fn policy_del(&self, _: &str) -> Result<(), netveil_daemon::engines::ip::config::ConfigError> {
        Err(refused())
    }
    fn psp_rx(&self, _: &mut dyn FnMut(&mut netveil_psp::Device)) -> Result<(), String> {
        Err("no PSP".into())
    }
    fn psp_install_tx(&self, _: netveil_psp::TxSa) -> Result<(), String> {
        Err("no PSP".into())
    }
    fn psp_kx_state(&self) -> Option<Arc<netveil_daemon::runtime::sa_port::PspKxState>> {
        None
    }
}

/// A test key-exchange driver: its section is `[kx]` (`peer`).
struct TestDriver {
    log: Arc<Log>,
}

struct KxConfig {
    log: Arc<Log>,
}

impl DriverSection for TestDriver {
    fn name(&self) -> &'static str {
        "kx"
    }
    fn keys(&self) -> &'static [&'static str] {
        &["kx"]
    }
    fn parse(
        &self,
        mut table: toml::Table,
        _base: &Path,
    ) -> Result<Box<dyn DriverConfig>, Vec<ConfigError>> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct RawKx {
            peer: Option<String>,
        }
        let _: RawKx = typed(table.remove("kx").unwrap(), "kx").map_err(|e| vec![e])?;
        Ok(Box::new(KxConfig {
            log: self.log.clone(),
        }))
    }
}

impl DriverConfig for KxConfig {
    fn start(self: Box<Self>, _port: Arc<dyn SaPort>) -> netveil_daemon::Result<Box<dyn Engine>> {
        self.log.push("kx:start".into());
        Ok(Box::new(KxDriver { log: self.log }))
    }
}

struct KxDriver {
    log: Arc<Log>,
}

impl Engine for KxDriver {
    fn tick(&mut self) -> bool {
        true
    }
    fn stop(self: Box<Self>, _undo: &mut Undo, _down: bool) {
        self.log.push("kx:stop".into());
    }
}

/// The default engines plus `extra`.
fn engines<'a>(extra: &[&'a dyn EngineSection]) -> Vec<&'a dyn EngineSection> {
    netveil_daemon::REGISTRY
        .engines
        .iter()
        .copied()
        .chain(extra.iter().copied())
        .collect()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nv-registry-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, text: &str) -> PathBuf {
    let f = dir.join("netveil.toml");
    std::fs::write(&f, text).unwrap();
    f
}

/// A bad key in the test engine's section is a configuration error naming the key (exit code 2) from `up`, and
/// from `check` with every error; nothing is prepared or started, the other engine's neither. An engine whose
/// preparation fails leaves every engine unstarted (all are prepared before the first starts). A driver section
/// without an engine that offers an SA port is refused naming its key.
#[test]
fn a_bad_key_is_refused_by_name_and_nothing_starts() {
    let log = Arc::new(Log::default());
    let echo = TestEngine {
        name: "echo",
        keys: &["echo"],
        port: false,
        log: log.clone(),
    };
    let probe = TestEngine {
        name: "probe",
        keys: &["probe"],
        port: false,
        log: log.clone(),
    };
    let kx = TestDriver { log: log.clone() };
    let all = engines(&[&echo, &probe]);
    let reg = Registry {
        engines: &all,
        drivers: &[&kx],
        attached: netveil_daemon::REGISTRY.attached,
    };
    let dir = scratch("bad");
    for (section, key) in [
        ("port = 70000", "echo.port"),
        ("bogus = \"SECRETVALUE\"", "echo.bogus"),
        ("port = \"SECRETVALUE\"", "echo.port"),
    ] {
        let f = write(&dir, &format!("[probe]\nname = \"p\"\n[echo]\n{section}\n"));
        let e = lifecycle::up_with(&reg, &f, 0, true, false).unwrap_err();
        assert!(
            matches!(&e, Error::Config(c) if c.key == key),
            "{section}: {e}"
        );
        assert_eq!(e.exit_code(), 2);
        assert!(!e.to_string().contains("SECRETVALUE"), "{e}");
        let e = lifecycle::check_with(&reg, &f).unwrap_err();
        assert!(
            matches!(&e, Error::Configs(c) if c.len() == 1 && c[0].key == key),
            "{section}: {e}"
        );
        assert_eq!(e.exit_code(), 2);
    }
    assert_eq!(log.count("probe:parse"), 6, "{:?}", log.all());
    for what in ["echo:prepare", "echo:start", "probe:prepare", "probe:start"] {
        assert_eq!(log.count(what), 0, "{what}: {:?}", log.all());
    }
    // The second engine's preparation fails: the first, prepared, never starts.
    let f = write(&dir, "[echo]\nname = \"e\"\n[probe]\nfail_prepare = true\n");
    let e = lifecycle::up_with(&reg, &f, 0, true, false).unwrap_err();
    assert!(
        matches!(&e, Error::Config(c) if c.key == "probe.fail_prepare"),
        "{e}"
    );
    assert_eq!(log.count("echo:prepare"), 1, "{:?}", log.all());
    assert_eq!(log.count("probe:prepare"), 1, "{:?}", log.all());
    assert_eq!(log.count("echo:start") + log.count("probe:start"), 0);
    // A driver needs an engine that offers an SA port (neither does here).
    let f = write(&dir, "[echo]\n[kx]\npeer = \"x\"\n");
    let e = lifecycle::up_with(&reg, &f, 0, true, false).unwrap_err();
    assert!(matches!(&e, Error::Config(c) if c.key == "kx"), "{e}");
    assert_eq!(log.count("kx:start") + log.count("echo:start"), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One file with the IP engine's `[interface]`, the L2 engine's `[l2sec]` and an unknown key: the unknown key is
/// reported first, naming the registry's known keys (an engine added to the registry joins the list).
#[test]
fn an_unknown_key_names_the_registrys_keys() {
    let text = "[interface]\nname = \"nvreg0\"\n[l2sec]\ninterface = \"eth0\"\n[bogus]\nx = 1\n";
    let e = netveil_daemon::parse_all(text, Path::new("."))
        .err()
        .unwrap();
    assert_eq!(e[0].key, "bogus");
    assert_eq!(
        e[0].reason,
        "unknown section or key (known: interface, sa, policy, psp, l2sec, pilsc, ike, log_level)"
    );
    // Every other error is the engines' own, named by their keys.
    assert!(e[1..].iter().all(|e| e.key.starts_with("l2sec.")), "{e:?}");
    let log = Arc::new(Log::default());
    let echo = TestEngine {
        name: "echo",
        keys: &["echo"],
        port: false,
        log,
    };
    let all = engines(&[&echo]);
    let reg = Registry {
        engines: &all,
        drivers: &[],
        attached: netveil_daemon::REGISTRY.attached,
    };
    let e = lifecycle::parse_with(&reg, text, Path::new("."))
        .err()
        .unwrap();
    assert_eq!(e.key, "bogus");
    assert_eq!(
        e.reason,
        "unknown section or key (known: interface, sa, policy, psp, l2sec, pilsc, echo, log_level)"
    );
    // Without any engine's section: nothing to run, naming every engine's.
    let e = lifecycle::parse_with(&reg, "log_level = \"info\"\n", Path::new("."))
        .err()
        .unwrap();
    assert_eq!(
        e.reason,
        "nothing to run: no [interface] (ESP, AH, PSP) and no [l2sec] and no [pilsc] and no [echo] section"
    );
}

/// The test engine runs through `up` with its control socket in a scratch directory: `check` summarizes it,
/// `status` shows its typed part (and no other engine's), the driver starts with the engine's SA port, and
/// `stop` ends the daemon, the driver stopped before the engine.
#[test]
fn the_test_engine_runs_and_shows_up_in_status() {
    let log = Arc::new(Log::default());
    let echo = TestEngine {
        name: "echo",
        keys: &["echo"],
        port: true,
        log: log.clone(),
    };
    let kx = TestDriver { log: log.clone() };
    let all = engines(&[&echo]);
    let drivers: [&dyn DriverSection; 1] = [&kx];
    let reg = Registry {
        engines: &all,
        drivers: &drivers,
        attached: netveil_daemon::REGISTRY.attached,
    };
    let dir = scratch("status");
    let sock = dir.join("run").join("echo.sock");
    let f = write(
        &dir,
        &format!(
            "[echo]\nname = \"e7\"\nport = 7\ncontrol_socket = \"{}\"\n[kx]\npeer = \"p\"\n",
            sock.display()
        ),
    );
    let line = lifecycle::check_with(&reg, &f).unwrap();
    assert_eq!(line, format!("{}: ok (echo e7 on port 7)", f.display()));
    let status = std::thread::scope(|s| {
        let up = s.spawn(|| lifecycle::up_with(&reg, &f, 0, true, false));
        let t = Instant::now();
        let status = loop {
            match netveil_control::get_status(&sock) {
                Ok(st) => break st,
                Err(e) if t.elapsed() > Duration::from_secs(20) || up.is_finished() => {
                    panic!("no status: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        netveil_control::request_stop(&sock).unwrap();
        up.join().unwrap().unwrap();
        status
    });
    let part: EchoStatus = status.part("echo").expect("the test engine's part");
    assert_eq!((part.name.as_str(), part.port), ("e7", 7));
    assert!(status.ip.is_none() && status.l2sec.is_none());
    assert_eq!(status.engines.len(), 1);
    let text = netveil_control::render_status(&status);
    assert!(text.starts_with("echo:\n  name: e7\n  port: 7\n"), "{text}");
    assert_eq!(
        log.all(),
        [
            "echo:parse", // check
            "echo:parse", // up
            "echo:prepare",
            "echo:start",
            "kx:start",
            "kx:stop",
            "echo:stop"
        ]
    );
    assert!(!sock.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
