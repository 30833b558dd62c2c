//! charon in a namespace: [`Charon`] starts it, loads its configuration, initiates, lists and terminates SAs.

use super::check::check_name;
use super::conf::{render_swanctl_conf, SwanAuth, SwanConn};
use super::pki::{path_str, KeyType};
use super::sas::{parse_list_sas, ChildSa, ChildState, IkeSa, IkeState};
use super::vici::Vici;
use crate::lab::{run_ok, Lab};
use crate::{Error, Result};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// charon's path (Debian's package puts it outside PATH); `$NETVEIL_CHARON` overrides it.
pub fn charon_binary() -> PathBuf {
    std::env::var_os("NETVEIL_CHARON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/ipsec/charon"))
}

/// Why strongSwan cannot run here (charon, swanctl or pki missing), or None when it can: [`missing_tool`]'s
/// error as text.
pub fn missing() -> Option<String> {
    missing_tool().map(|e| e.to_string())
}

/// What of strongSwan is not installed here (charon, swanctl or pki), as an [`Error::Missing`] naming it and its
/// Debian package; None when strongSwan can run.
pub fn missing_tool() -> Option<Error> {
    let hint = |pkg: &str| format!("Debian: {pkg}; .ci/setup installs it");
    let charon = charon_binary();
    if !charon.is_file() {
        return Some(Error::Missing {
            tool: charon.display().to_string(),
            hint: hint("strongswan-charon libcharon-extra-plugins"),
        });
    }
    for (tool, pkg) in [("swanctl", "strongswan-swanctl"), ("pki", "strongswan-pki")] {
        if !crate::lab::have_tool(tool) {
            return Some(Error::Missing {
                tool: tool.into(),
                hint: hint(pkg),
            });
        }
    }
    None
}

/// Options of one charon.
#[derive(Debug, Clone)]
pub struct CharonOptions {
    /// The file log's default level (-1 silent .. 4 everything, including key material: tests use 1-2; level 4
    /// prints secrets, see the recorded session's log).
    pub log_level: i8,
    /// Extra levels per subsystem, e.g. `("ike", 2)`, `("cfg", 2)`.
    pub log_subsystems: Vec<(&'static str, i8)>,
    /// `charon.reuse_ikesa`: `false` makes every initiate a new IKE SA (for parallel handshakes).
    pub reuse_ikesa: bool,
    /// `charon.dos_protection` (strongSwan's default: on). On, a responder asks for COOKIEs from 3 half-open SAs
    /// of one peer address and drops its IKE_SA_INITs from 5 (`cookie_threshold_ip`, `block_threshold`): off for
    /// many parallel handshakes from one initiator.
    pub dos_protection: bool,
    /// `charon.retransmit_tries` (strongSwan's default: 5, about 165 s in all): lower makes failures quick.
    pub retransmit_tries: Option<u32>,
}

impl Default for CharonOptions {
    fn default() -> Self {
        CharonOptions {
            log_level: 1,
            log_subsystems: vec![("ike", 2), ("cfg", 2)],
            reuse_ikesa: true,
            dos_protection: true,
            retransmit_tries: Some(2),
        }
    }
}

/// The plugins charon loads: kernel-libipsec (ESP in user space over TUN) with kernel-netlink (routes, addresses),
/// the sockets, vici, and the crypto and credential plugins the lab's proposals and certificates need.
pub const CHARON_PLUGINS: &str =
    "random nonce openssl pem pkcs1 pkcs8 x509 pubkey revocation constraints \
     curve25519 gmp aes sha1 sha2 hmac gcm kdf kernel-libipsec kernel-netlink socket-default vici";

/// A running charon in a namespace (see the module docs); stopped on drop.
pub struct Charon {
    child: Option<Child>,
    pub ns: String,
    pub name: String,
    /// Its directory: strongswan.conf, swanctl/, charon.vici, charon.log, charon.out.
    pub dir: PathBuf,
    pub conf: PathBuf,
    pub swanctl_dir: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Charon {
    /// Writes the configuration and starts charon in `ns`; returns once its vici socket answers.
    pub fn start(lab: &Lab, ns: &str, name: &str, opts: &CharonOptions) -> Result<Charon> {
        check_name("charon name", name)?;
        let dir = lab.dir().join(format!("swan-{name}"));
        let swanctl_dir = dir.join("swanctl");
        for sub in [
            "", "x509", "x509ca", "x509ocsp", "x509aa", "x509ac", "x509crl", "pubkey", "private",
            "rsa", "ecdsa", "bliss", "pkcs8", "pkcs12",
        ] {
            use std::os::unix::fs::DirBuilderExt;
            let d = swanctl_dir.join(sub);
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&d)
                .map_err(Error::io(format!("mkdir {}", d.display())))?;
        }
        let socket = dir.join("charon.vici");
        let log = dir.join("charon.log");
        let conf = dir.join("strongswan.conf");
        let mut levels = format!("      default = {}\n", opts.log_level);
        for (s, l) in &opts.log_subsystems {
            check_name("log subsystem", s)?;
            levels.push_str(&format!("      {s} = {l}\n"));
        }
        let mut extra = String::new();
        if !opts.dos_protection {
            extra.push_str("  dos_protection = no\n");
        }
        if let Some(r) = opts.retransmit_tries {
            extra.push_str(&format!("  retransmit_tries = {r}\n"));
        }
        let sock = path_str(&socket)?;
        let text = format!(
            "# written by netveil's lab: one `key = value` per line\n\
             charon {{\n  load_modular = no\n  load = {CHARON_PLUGINS}\n  port = 500\n  port_nat_t = 4500\n\
             \x20 install_virtual_ip = no\n  reuse_ikesa = {reuse}\n{extra}\
             \x20 plugins {{\n    vici {{\n      socket = unix://{sock}\n    }}\n  }}\n\
             \x20 filelog {{\n    lab {{\n      path = {log}\n      time_format = %H:%M:%S\n      time_add_ms = yes\n\
             \x20     ike_name = yes\n      append = no\n      flush_line = yes\n{levels}    }}\n  }}\n}}\n\
             swanctl {{\n  socket = unix://{sock}\n  load = pem pkcs1 pkcs8 x509 pubkey openssl\n}}\n",
            reuse = if opts.reuse_ikesa { "yes" } else { "no" },
            log = path_str(&log)?,
        );
        std::fs::write(&conf, text).map_err(Error::io(format!("write {}", conf.display())))?;
        let out = std::fs::File::create(dir.join("charon.out")).map_err(Error::io("charon.out"))?;
        let script = format!(
            "mount -t tmpfs -o mode=0755 tmpfs /run && exec {}",
            path_str(&charon_binary())?
        );
        let child = lab
            .command(
                ns,
                &[
                    "unshare",
                    "-m",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    &script,
                ],
            )
            .env("STRONGSWAN_CONF", &conf)
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(Error::io("charon.out"))?)
            .stderr(out)
            .spawn()
            .map_err(Error::io("cannot start charon"))?;
        let mut c = Charon {
            child: Some(child),
            ns: ns.into(),
            name: name.into(),
            dir,
            conf,
            swanctl_dir,
            socket,
            log,
        };
        let t0 = Instant::now();
        loop {
            if let Some(ch) = c.child.as_mut() {
                if let Ok(Some(st)) = ch.try_wait() {
                    c.child = None;
                    return Err(Error::command(
                        format!("charon {name} in {ns}"),
                        Some(st),
                        format!("{}{}", c.out(), c.log_tail(20)),
                    ));
                }
            }
            let ready = Vici::connect(&c.socket)
                .and_then(|mut v| v.request("version", &[], Duration::from_secs(2)))
                .is_ok();
            if ready {
                return Ok(c);
            }
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(Error::timeout(
                    format!("charon {name} in {ns}: no vici socket"),
                    10.0,
                    format!("{}{}", c.out(), c.log_tail(20)),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// charon's stdout/stderr so far.
    pub fn out(&self) -> String {
        std::fs::read_to_string(self.dir.join("charon.out")).unwrap_or_default()
    }

    /// The whole file log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the file log, for failure messages.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(n);
        format!(
            "\n--- charon {} log (last {} lines) ---\n{}",
            self.name,
            lines.len() - from,
            lines[from..].join("\n")
        )
    }

    /// Runs `swanctl ARGS` against this charon (in its namespace); fails with swanctl's output and the log's tail.
    pub fn swanctl(&self, args: &[&str]) -> Result<String> {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, "swanctl"])
            .args(args)
            .env("STRONGSWAN_CONF", &self.conf)
            .env("SWANCTL_DIR", &self.swanctl_dir)
            .stdin(Stdio::null());
        run_ok(&mut c).map_err(|e| e.logged(self.log_tail(30)))
    }

    /// Writes swanctl.conf for `conns` (copying certificates and keys into the swanctl directory) and loads
    /// everything (`swanctl --load-all`).
    pub fn load(&self, conns: &[SwanConn]) -> Result<()> {
        let text = render_swanctl_conf(conns)?;
        for c in conns {
            if let SwanAuth::Pubkey(cred) = &c.auth {
                let keydir = match cred.key_type {
                    KeyType::Rsa(_) => "rsa",
                    KeyType::EcdsaP256 => "ecdsa",
                };
                for (src, sub) in [
                    (&cred.cert, "x509"),
                    (&cred.ca, "x509ca"),
                    (&cred.key, keydir),
                ] {
                    let name = src.file_name().ok_or_else(|| Error::File {
                        path: src.clone(),
                        why: "no file name".into(),
                    })?;
                    let dst = self.swanctl_dir.join(sub).join(name);
                    std::fs::copy(src, &dst)
                        .map_err(Error::io(format!("copy {}", src.display())))?;
                }
            }
        }
        let path = self.swanctl_dir.join("swanctl.conf");
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)
                .map_err(Error::io(format!("write {}", path.display())))?;
            f.write_all(text.as_bytes())
                .map_err(Error::io(format!("write {}", path.display())))?;
        }
        self.swanctl(&["--load-all", "--noprompt"]).map(|_| ())
    }

    fn vici(&self) -> Result<Vici> {
        Vici::connect(&self.socket)
    }

    /// Initiates `child` (and its IKE SA if there is none) and waits up to `timeout` until the CHILD_SA is
    /// installed; the error carries charon's reason (`errmsg`) and the log's tail.
    pub fn initiate(&self, child: &str, timeout: Duration) -> Result<()> {
        let ms = timeout.as_millis().to_string();
        self.vici()?
            .command(
                "initiate",
                &[("child", child), ("timeout", &ms), ("init-limits", "no")],
                timeout + Duration::from_secs(2),
            )
            .map(|_| ())
            .map_err(|e| {
                e.logged(self.log_tail(30))
                    .within(format!("initiate {child} on {}", self.name))
            })
    }

    /// Terminates the IKE SAs of connection `ike` (DELETE to the peer), waiting up to `timeout` for the exchange.
    pub fn terminate(&self, ike: &str, timeout: Duration) -> Result<()> {
        let ms = timeout.as_millis().to_string();
        self.vici()?
            .command(
                "terminate",
                &[("ike", ike), ("timeout", &ms)],
                timeout + Duration::from_secs(2),
            )
            .map(|_| ())
            .map_err(|e| {
                e.logged(self.log_tail(30))
                    .within(format!("terminate {ike} on {}", self.name))
            })
    }

    /// The IKE SAs and their children as `swanctl --list-sas --pretty` shows them.
    pub fn list_sas(&self) -> Result<Vec<IkeSa>> {
        parse_list_sas(&self.swanctl(&["--list-sas", "--pretty"])?)
    }

    /// Waits until an IKE SA is ESTABLISHED with child `child` INSTALLED; returns both. The error after
    /// `timeout` shows what was listed last and the log's tail.
    pub fn wait_child_installed(&self, child: &str, timeout: Duration) -> Result<(IkeSa, ChildSa)> {
        let t0 = Instant::now();
        loop {
            let sas = self.list_sas()?;
            for ike in &sas {
                if ike.state != IkeState::Established {
                    continue;
                }
                if let Some(c) = ike.child(child) {
                    if c.state == ChildState::Installed {
                        return Ok((ike.clone(), c.clone()));
                    }
                }
            }
            if t0.elapsed() > timeout {
                return Err(Error::timeout(
                    format!(
                        "charon {}: no ESTABLISHED IKE SA with child {child} INSTALLED",
                        self.name
                    ),
                    timeout.as_secs_f64(),
                    format!("listed: {sas:?}{}", self.log_tail(40)),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `n` sequential setups of an IKE SA and its first child `child` of connection `ike`, each terminated
    /// before the next. Each sample (ms) is the time from writing vici's `initiate` request to reading its
    /// answer: charon answers once the CHILD_SA is INSTALLED on the initiator (after the IKE_AUTH response is
    /// processed and the SAs and policies are in libipsec), so one sample is IKE_SA_INIT + IKE_AUTH on the wire
    /// plus both daemons' processing, without swanctl's start-up. The terminate (DELETE) is not timed.
    pub fn handshake_ms(&self, ike: &str, child: &str, n: usize) -> Result<Vec<f64>> {
        let mut v = self.vici()?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let t0 = Instant::now();
            v.command(
                "initiate",
                &[
                    ("child", child),
                    ("timeout", "10000"),
                    ("init-limits", "no"),
                ],
                Duration::from_secs(12),
            )
            .map_err(|e| e.logged(self.log_tail(30)))?;
            out.push(t0.elapsed().as_secs_f64() * 1e3);
            v.command(
                "terminate",
                &[("ike", ike), ("timeout", "10000")],
                Duration::from_secs(12),
            )
            .map_err(|e| e.logged(self.log_tail(30)))?;
        }
        Ok(out)
    }

    /// Handshakes per second with `window` initiations in flight: `total` setups of an IKE SA + child `child`, each a
    /// new IKE SA. The initiations are asynchronous (vici `initiate` with `timeout = -1`: a blocking one holds one of
    /// charon's 16 threads until its child is up, and 16 of them stall charon); a second vici connection counts
    /// `child-updown` events with `up = yes`, and each one lets the next initiation go. Timed from the first request
    /// to the last child installed on the initiator. Needs [`CharonOptions::reuse_ikesa`] `false` (else charon adds
    /// children to the first IKE SA) and [`Unique::Never`](super::conf::Unique::Never) on both sides; the responder
    /// needs [`CharonOptions::dos_protection`] off (else it drops IKE_SA_INITs beyond 5 half-open from one address).
    /// The SAs stay up: terminate the connection afterwards.
    pub fn handshakes_per_s(&self, child: &str, total: usize, window: usize) -> Result<f64> {
        let mut events = self.vici()?;
        events.register("child-updown")?;
        let mut req = self.vici()?;
        let deadline = Duration::from_secs(10 + total as u64 / 10);
        let mut sent = 0;
        let mut up = 0;
        let t0 = Instant::now();
        let mut fire = |sent: &mut usize| -> Result<()> {
            req.command(
                "initiate",
                &[("child", child), ("timeout", "-1"), ("init-limits", "no")],
                Duration::from_secs(5),
            )?;
            *sent += 1;
            Ok(())
        };
        while sent < window.clamp(1, total.max(1)) {
            fire(&mut sent)?;
        }
        while up < total {
            let left = deadline.checked_sub(t0.elapsed()).unwrap_or_default();
            let ev = events
                .event(left.max(Duration::from_millis(1)))
                .map_err(|e| {
                    e.logged(format!(
                        ": {up} of {total} children up{}",
                        self.log_tail(30)
                    ))
                })?;
            if ev.0 == "child-updown" && ev.1.get("up") == Some("yes") {
                up += 1;
                if sent < total {
                    fire(&mut sent)?;
                }
            }
        }
        Ok(total as f64 / t0.elapsed().as_secs_f64())
    }

    /// The process id (charon itself: `ip netns exec`, `unshare` and `sh -c exec` all exec in place).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Whether charon still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Stops charon (SIGTERM, SIGKILL after 5 s); its mount namespace and `/run` go with it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Ok(pid) = i32::try_from(c.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Charon {
    fn drop(&mut self) {
        self.stop();
    }
}
