//! The runtime: one `netveil up` for every engine. One parse of the configuration file yields its sections; the
//! sections present select the engines (`[interface]`, `[[sa]]`, `[[policy]]`, `[psp]`: the IP engine; `[l2sec]`:
//! the L2 engine), so one file may run both in one process. The runtime exists once: it checks every engine's
//! configuration against the host before anything changes, records every change in one [`Undo`], handles the
//! signals, runs the one control socket (its status is every engine's status in one JSON object) and drives the
//! engines ([`Engine::tick`], [`Engine::stop`]).

use crate::config::{Config, ConfigError};
use crate::engine::{remove_fwmark_rules, run, Control, Engine, Undo};
use crate::l2::L2Config;
use crate::{Error, Result};
use serde_json::{json, Value};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// The sections of one configuration file, parsed and validated.
pub struct Sections {
    /// `[interface]`, `[[sa]]`, `[[policy]]`, `[psp]`: the IP engine (ESP, AH, PSP over TUN).
    pub ip: Option<Config>,
    /// `[l2sec]`: the L2 engine.
    pub l2: Option<L2Config>,
    /// `log_level` (top level, before the first section).
    pub log_level: Option<crate::log::Level>,
}

/// The top-level keys of each engine.
const IP_KEYS: [&str; 4] = ["interface", "sa", "policy", "psp"];
const L2_KEYS: [&str; 1] = ["l2sec"];
/// The top-level keys of the runtime itself.
const RUNTIME_KEYS: [&str; 1] = ["log_level"];

/// Reads and validates a configuration file: its sections, each checked as a whole.
pub fn load(path: &Path) -> std::result::Result<Sections, ConfigError> {
    load_all(path).map_err(|mut e| e.swap_remove(0))
}

/// Like [`load`], with every error of the file (see [`parse_all`]).
pub fn load_all(path: &Path) -> std::result::Result<Sections, Vec<ConfigError>> {
    let text = zeroize::Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
        vec![ConfigError {
            key: String::new(),
            reason: format!("cannot read {}: {e}", path.display()),
        }]
    })?);
    parse_all(&text, path.parent().unwrap_or(Path::new(".")))
}

/// Parses a configuration text (`base`: where relative paths in it start).
pub fn parse(text: &str, base: &Path) -> std::result::Result<Sections, ConfigError> {
    parse_all(text, base).map_err(|mut e| e.swap_remove(0))
}

/// Parses a configuration text and reports every error in it, each naming its key (at least one on failure):
/// unknown sections, then the IP sections' (see [`Config::parse_all`]), then `[l2sec]`'s.
pub fn parse_all(text: &str, base: &Path) -> std::result::Result<Sections, Vec<ConfigError>> {
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        vec![ConfigError {
            key: String::new(),
            reason: crate::config::toml_error(text, &e),
        }]
    })?;
    let known_key =
        |k: &str| IP_KEYS.contains(&k) || L2_KEYS.contains(&k) || RUNTIME_KEYS.contains(&k);
    let mut errors: Vec<ConfigError> = table
        .keys()
        .filter(|k| !known_key(k))
        .map(|k| ConfigError {
            // Named when it is a plain name (it may be anything, a secret written in the wrong place too).
            key: if crate::names::is_name(k) {
                k.clone()
            } else {
                String::new()
            },
            reason: format!(
                "unknown section or key (known: {})",
                IP_KEYS
                    .iter()
                    .chain(L2_KEYS.iter())
                    .chain(RUNTIME_KEYS.iter())
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
        .collect();
    let log_level = table
        .get("log_level")
        .and_then(|v| crate::log::parse_level(v).map_err(|e| errors.push(e)).ok());
    let has = |keys: &[&str]| keys.iter().any(|k| table.contains_key(*k));
    // With unknown sections reported, the engines read the file without them (their own parsers refuse unknown
    // keys); otherwise the text itself, so that their errors give the file's line numbers.
    let known;
    let text = if errors.is_empty() {
        text
    } else {
        let mut t = table.clone();
        t.retain(|k, _| known_key(k));
        known = zeroize::Zeroizing::new(toml::to_string(&t).unwrap_or_default());
        known.as_str()
    };
    let ip = if has(&IP_KEYS) {
        Config::parse_all(text).map_err(|e| errors.extend(e)).ok()
    } else {
        None
    };
    let l2 = if has(&L2_KEYS) {
        L2Config::parse(text, base).map_err(|e| errors.push(e)).ok()
    } else {
        None
    };
    if errors.is_empty() && ip.is_none() && l2.is_none() {
        errors.push(ConfigError {
            key: String::new(),
            reason: "nothing to run: no [interface] (ESP, AH, PSP) and no [l2sec] section".into(),
        });
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Sections { ip, l2, log_level })
}

/// `netveil check -c FILE`: the file, and what `up` would fail on here (nothing is applied). Returns the summary
/// line; a note (a daemon of this configuration already runs) is printed on stderr.
pub fn check(path: &Path) -> Result<String> {
    let s = load_all(path).map_err(Error::Configs)?;
    let mut parts = Vec::new();
    if let Some(c) = &s.ip {
        // PSP: the certificates and key are read and checked too.
        if let Some(p) = &c.psp {
            crate::psp_kx::tls(p)?;
        }
        if let Some(note) = crate::ip::preflight_check(c)? {
            eprintln!("netveil: note: {note}");
        }
        parts.push(format!(
            "{} SAs, {} policies{}",
            c.sas.len(),
            c.policies.len(),
            if c.psp.is_some() { ", PSP" } else { "" }
        ));
    }
    if let Some(c) = &s.l2 {
        crate::l2::check(c)?;
        parts.push(format!(
            "l2sec on {}, {} suites, {} peer keys",
            c.interface,
            c.suites.len(),
            c.peers.len()
        ));
    }
    Ok(format!("{}: ok ({})", path.display(), parts.join("; ")))
}

/// Set by the control request `stop` (from `netveil down`): the daemon removes its fail-closed filters on exit.
static DOWN: AtomicBool = AtomicBool::new(false);

/// The one control socket: `[interface] control_socket` when the IP engine runs, else `[l2sec] control_socket`.
fn control_socket(ip: Option<&crate::ip::Prepared>, l2: Option<&crate::l2::Prepared>) -> PathBuf {
    match (ip, l2) {
        (Some(p), _) => p.control_socket().to_path_buf(),
        (None, Some(p)) => p.control_socket().to_path_buf(),
        (None, None) => PathBuf::from(crate::config::RUN_DIR).join("netveil.sock"),
    }
}

/// The control group of the section whose control socket is used (see [`control_socket`]).
fn control_group(
    ip: Option<&crate::ip::Prepared>,
    l2: Option<&crate::l2::Prepared>,
) -> Option<u32> {
    match (ip, l2) {
        (Some(p), _) => p.control_group(),
        (None, Some(p)) => p.control_group(),
        (None, None) => None,
    }
}

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

/// `netveil up -c FILE`: every engine the file's sections select, in one process, until SIGINT/SIGTERM, `netveil
/// down`, or the end of a data-plane thread. `verbose` (`-v` count) and `quiet` (`-q`) override the file's
/// `log_level`; `fresh_keys` (`--fresh-keys`) confirms that outbound SAs whose keys have no sequence mark use new
/// keys, for a state directory without its record (see [`crate::state`]).
pub fn up(path: &Path, verbose: u8, quiet: bool, fresh_keys: bool) -> Result<()> {
    // First of all, with no other thread yet (the umask is the process's).
    netveil_io::os::set_umask(DAEMON_UMASK);
    let mut s = load(path)?;
    if let Some(c) = s.ip.as_mut() {
        c.interface.state_dir.fresh_keys = fresh_keys;
    }
    crate::log::init(crate::log::level(s.log_level, verbose, quiet));
    // Every check and every key schedule of every engine before the first change to the system.
    let ip = s.ip.map(crate::ip::prepare).transpose()?;
    let l2 = s.l2.map(crate::l2::prepare).transpose()?;
    let control = control_socket(ip.as_ref(), l2.as_ref());
    let group = control_group(ip.as_ref(), l2.as_ref());
    let mut undo = Undo::default();
    let mut engines: Vec<Box<dyn Engine>> = Vec::new();
    let mut controls: Vec<Arc<dyn Control>> = Vec::new();
    let started = (|| -> Result<UnixListener> {
        if let Some(mut p) = ip {
            let psp = p.take_psp_driver();
            let e = crate::ip::start(p, &mut undo, &control)?;
            controls.push(Arc::new(crate::ip_ctl::IpControl(e.shared())));
            let port = e.sa_port();
            engines.push(Box::new(e));
            // PSP's key exchange: a driver beside the engine, changing it through its port.
            if let Some((cfg, tls, mark)) = psp {
                engines.push(Box::new(crate::psp_kx::start_driver(cfg, tls, port, mark)?));
            }
        }
        if let Some(p) = l2 {
            let e = crate::l2::start(p, &mut undo, &control)?;
            controls.push(e.control());
            engines.push(Box::new(e));
        }
        listen(&control, group)
    })();
    let listener = match started {
        Ok(l) => l,
        Err(e) => {
            for en in engines {
                en.stop(&mut undo, false);
            }
            return Err(e);
        }
    };
    let stop = netveil_io::os::stop_on_signals();
    std::thread::Builder::new()
        .name("nv-ctl".into())
        .spawn(move || {
            netveil_control::serve_lines(listener, stop, group, |req| answer(&controls, req))
        })
        .map_err(Error::io("thread"))?;
    while !stop.load(Relaxed) && engines.iter_mut().all(|e| e.tick()) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let down = DOWN.load(Relaxed);
    for e in engines {
        e.stop(&mut undo, down);
    }
    let _ = std::fs::remove_file(&control);
    drop(undo);
    Ok(())
}

/// `netveil down -c FILE`: stops a running daemon of this configuration (it removes its setup), then removes the
/// fail-closed filters and whatever a killed instance left (its routing rules, a stale control socket): covered
/// traffic is no longer blocked.
pub fn down(path: &Path) -> Result<()> {
    let Some(config) = load(path)?.ip else {
        return Err(Error::Usage(
            "netveil down is for [interface] configurations: an l2sec daemon gives its port back when it stops \
             (SIGTERM), and a killed one when `netveil up` runs again"
                .into(),
        ));
    };
    let iface = &config.interface;
    let sock = Path::new(&iface.control_socket);
    let mut stopped = false;
    if std::os::unix::net::UnixStream::connect(sock).is_ok() {
        netveil_control::request_stop(sock)?;
        let t = std::time::Instant::now();
        while std::os::unix::net::UnixStream::connect(sock).is_ok() {
            if t.elapsed() > Duration::from_secs(15) {
                return Err(Error::Other(format!(
                    "the daemon on {} did not stop within 15 s",
                    sock.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Its undo runs after the socket is gone: wait for the TUN to go too.
        let dev = Path::new("/sys/class/net").join(&iface.name);
        while dev.exists() && t.elapsed() < Duration::from_secs(15) {
            std::thread::sleep(Duration::from_millis(50));
        }
        stopped = true;
    }
    let table = iface.nft_table();
    let had_table = crate::engine::nft_table_exists(&table);
    if had_table {
        run(&["nft", "delete", "table", "inet", &table])?;
    }
    if let Some(m) = iface.fwmark {
        remove_fwmark_rules(&m.to_string());
    }
    // The policies a killed instance had added at runtime: no longer restored (their block is lifted too).
    let _ = std::fs::remove_file(
        iface
            .state_dir
            .path
            .join(crate::state::policies_file(&iface.name)),
    );
    let _ = std::fs::remove_file(sock);
    eprintln!(
        "netveil: {} down{}",
        iface.name,
        match (stopped, had_table) {
            (true, _) => " (daemon stopped; nothing blocked any more)",
            (false, true) => " (covered traffic no longer blocked)",
            (false, false) => " (nothing was running or blocked)",
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// `control_group` is resolved to its group id when the file is read; an unknown or malformed name is an error
    /// naming the key.
    #[test]
    fn the_control_group_is_a_group_of_this_host() {
        let ip = |g: &str| {
            parse(
                &format!("[interface]\ncontrol_group = \"{g}\"\n"),
                Path::new("."),
            )
            .map(|s| s.ip.unwrap().interface.control_group)
        };
        assert_eq!(ip("root").ok(), Some(Some(0)));
        assert_eq!(ip("nogroup").ok(), Some(Some(65534)));
        for bad in ["netveil-no-such-group", "-x", "a b", ""] {
            let e = ip(bad).err().unwrap();
            assert_eq!(e.key, "interface.control_group", "{bad}");
        }
        let none = parse("[interface]\n", Path::new(".")).ok().unwrap();
        assert_eq!(none.ip.unwrap().interface.control_group, None);
    }
}
