//! [`Lab`]: a set of network namespaces and a scratch directory, with the commands, daemons and captures run in
//! them; all removed on drop.

use super::capture::Capture;
use super::cleanup::{live, remove_namespace, LAB_BASE};
use super::daemon::Daemon;
use super::process::{command_line, is_root, netveil_binary, run_ok, spawn_in_ns};
use crate::{Error, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static LAB_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A set of network namespaces and a scratch directory (under [`LAB_BASE`]), all removed on drop.
pub struct Lab {
    id: String,
    namespaces: Vec<String>,
    dir: PathBuf,
    netveil: PathBuf,
    keep: bool,
}

impl Lab {
    /// A new, empty lab. Namespace names start with `prefix` followed by the process id and a per-process counter.
    /// Uses the current executable as the `netveil` binary (see [`Lab::with_netveil`]).
    pub fn new(prefix: &str) -> Result<Lab> {
        if !is_root() {
            return Err(Error::Usage(
                "network-namespace labs need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)".into(),
            ));
        }
        let n = LAB_COUNTER.fetch_add(1, Ordering::Relaxed);
        let id = format!("{prefix}{}-{n}", std::process::id());
        let dir = Path::new(LAB_BASE).join(&id);
        let _ = std::fs::remove_dir_all(&dir);
        // Registered before it is made (see `add_ns`).
        let mut l = live();
        l.1.push(dir.clone());
        for d in [Path::new(LAB_BASE), &dir] {
            use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
            let made = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(d)
                .and_then(|()| std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)));
            made.map_err(Error::io(format!("cannot create {}", d.display())))?;
        }
        drop(l);
        let netveil = netveil_binary();
        Ok(Lab {
            id,
            namespaces: Vec::new(),
            dir,
            netveil,
            keep: std::env::var_os("NETVEIL_LAB_KEEP").is_some(),
        })
    }

    /// Uses `path` as the `netveil` binary for [`Lab::start_daemon`].
    pub fn with_netveil(mut self, path: impl Into<PathBuf>) -> Lab {
        self.netveil = path.into();
        self
    }

    pub fn netveil(&self) -> &Path {
        &self.netveil
    }

    /// The scratch directory (configurations, logs, captures), removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The namespaces created so far (full names).
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// The full namespace name for the short `host` name.
    pub fn ns_name(&self, host: &str) -> String {
        format!("{}-{host}", self.id)
    }

    /// Creates the namespace for `host` (with `lo` up) and returns its full name.
    pub fn add_ns(&mut self, host: &str) -> Result<String> {
        let ns = self.ns_name(host);
        let _ = Command::new("ip")
            .args(["netns", "del", &ns])
            .stderr(Stdio::null())
            .status();
        {
            // Registered and made under the lock: a signal's [`remove_all`] either sees it or runs first (and
            // then this waits until the process ends).
            let mut l = live();
            l.0.push(ns.clone());
            self.namespaces.push(ns.clone());
            run_ok(Command::new("ip").args(["netns", "add", &ns]))?;
        }
        self.ip(&ns, &["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Runs `ip -n NS ARGS...` and fails if it fails.
    pub fn ip(&self, ns: &str, args: &[&str]) -> Result<()> {
        run_ok(Command::new("ip").arg("-n").arg(ns).args(args)).map(|_| ())
    }

    /// A veth pair between two namespaces, both ends up.
    pub fn veth(&self, ns_a: &str, if_a: &str, ns_b: &str, if_b: &str) -> Result<()> {
        run_ok(Command::new("ip").args([
            "link", "add", if_a, "netns", ns_a, "type", "veth", "peer", "name", if_b, "netns", ns_b,
        ]))?;
        self.ip(ns_a, &["link", "set", if_a, "up"])?;
        self.ip(ns_b, &["link", "set", if_b, "up"])
    }

    /// Adds an address (IPv6 without duplicate address detection, so that it is usable at once).
    pub fn addr(&self, ns: &str, iface: &str, cidr: &str) -> Result<()> {
        if cidr.contains(':') {
            self.ip(ns, &["-6", "addr", "add", cidr, "dev", iface, "nodad"])
        } else {
            self.ip(ns, &["addr", "add", cidr, "dev", iface])
        }
    }

    /// `ip netns exec NS ARGS...` as a Command, for callers that need to set up redirections themselves.
    pub fn command(&self, ns: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(args);
        c
    }

    /// Runs a command in a namespace and returns its output, whatever its exit status.
    pub fn exec(&self, ns: &str, args: &[&str]) -> Result<Output> {
        self.command(ns, args)
            .stdin(Stdio::null())
            .output()
            .map_err(Error::io(format!("cannot run {}", args.join(" "))))
    }

    /// Runs a command in a namespace; fails (with its stderr) unless it exits 0. Returns its stdout.
    pub fn exec_ok(&self, ns: &str, args: &[&str]) -> Result<String> {
        run_ok(self.command(ns, args).stdin(Stdio::null()))
    }

    /// Starts a command in a namespace (stdin null, stdout/stderr inherited unless configured otherwise). The lab kills
    /// it on drop if it is still running then.
    pub fn spawn(&self, ns: &str, args: &[&str]) -> Result<Child> {
        self.command(ns, args)
            .stdin(Stdio::null())
            .spawn()
            .map_err(Error::io(format!("cannot start {}", args.join(" "))))
    }

    /// Runs `f` on a thread that has entered the namespace: sockets it opens live in that namespace.
    pub fn in_ns<T, F>(&self, ns: &str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let h = spawn_in_ns(ns, f)?;
        h.join()
            .map_err(|_| Error::internal(format!("thread in namespace {ns} panicked")))?
    }

    /// Starts `netveil up --fresh-keys -c CONFIG` in a namespace with the given configuration text (written into the
    /// lab directory as `NAME.toml`) and waits until its control socket answers `status`. The configuration's
    /// `control_socket` must be [`Lab::socket_path`]`(name)` (the [`HostPair`](super::config::HostPair) generator
    /// does that). A lab's state directories are new and so are its keys, hence `--fresh-keys` (marks already there
    /// are still honoured).
    pub fn start_daemon(&self, ns: &str, name: &str, config: &str) -> Result<Daemon> {
        self.start_daemon_with(ns, name, config, &["--fresh-keys"])
    }

    /// [`Lab::start_daemon`] with `args` after `netveil up` instead of `--fresh-keys`.
    pub fn start_daemon_with(
        &self,
        ns: &str,
        name: &str,
        config: &str,
        args: &[&str],
    ) -> Result<Daemon> {
        let cfg = self.dir.join(format!("{name}.toml"));
        // Root's only, whatever the umask (a test may start a daemon under umask 0): the daemon refuses a
        // configuration others may write, and warns about one that others may read and that holds keys.
        std::fs::write(&cfg, config)
            .and_then(|()| {
                std::fs::set_permissions(&cfg, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            })
            .map_err(Error::io(format!("cannot write {}", cfg.display())))?;
        let log = self.dir.join(format!("{name}.log"));
        let logf = std::fs::File::create(&log).map_err(Error::io("daemon log"))?;
        let socket = self.socket_path(name);
        let _ = std::fs::remove_file(&socket);
        let mut up = Command::new("ip");
        up.args(["netns", "exec", ns])
            .arg(&self.netveil)
            .arg("up")
            .args(args)
            .arg("-c")
            .arg(&cfg);
        let command = command_line(&up);
        let child = up
            .stdin(Stdio::null())
            .stdout(logf.try_clone().map_err(Error::io("daemon log"))?)
            .stderr(logf)
            .spawn()
            .map_err(Error::io(format!(
                "cannot start {}",
                self.netveil.display()
            )))?;
        let mut d = Daemon {
            child: Some(child),
            ns: ns.to_string(),
            name: name.to_string(),
            socket,
            log,
            netveil: self.netveil.clone(),
        };
        let t0 = Instant::now();
        loop {
            if let Some(c) = d.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    d.child = None;
                    return Err(Error::command(command, Some(st), d.log()));
                }
            }
            if d.ask("status").is_ok() {
                return Ok(d);
            }
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(Error::timeout(
                    format!(
                        "netveil up ({name} in {ns}) did not answer on {}",
                        d.socket.display()
                    ),
                    10.0,
                    d.log().trim(),
                ));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// `netveil down -c NAME.toml` in a namespace (the configuration [`Lab::start_daemon`] wrote for `name`).
    pub fn netveil_down(&self, ns: &str, name: &str) -> Result<String> {
        let cfg = self.dir.join(format!("{name}.toml"));
        let n = self
            .netveil
            .to_str()
            .ok_or_else(|| Error::not_utf8(&self.netveil))?;
        let c = cfg.to_str().ok_or_else(|| Error::not_utf8(&cfg))?;
        self.exec_ok(ns, &[n, "down", "-c", c])
    }

    /// The packets counted by the rules of `chain` in the table `inet TABLE` of a namespace (0 if it is missing).
    pub fn nft_counter(&self, ns: &str, table: &str, chain: &str) -> u64 {
        let Ok(out) = self.exec(ns, &["nft", "-j", "list", "table", "inet", table]) else {
            return 0;
        };
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        v["nftables"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["rule"]["chain"] == chain)
            .flat_map(|i| i["rule"]["expr"].as_array().cloned().unwrap_or_default())
            .filter_map(|e| e["counter"]["packets"].as_u64())
            .sum()
    }

    /// The control socket path for the daemon `name` of this lab.
    pub fn socket_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.sock"))
    }

    /// Starts `tcpdump -i IFACE -s SNAPLEN -U -w DIR/FILE [FILTER]` in a namespace and waits until it listens.
    pub fn capture(
        &self,
        ns: &str,
        iface: &str,
        file: &str,
        snaplen: u32,
        filter: &[&str],
    ) -> Result<Capture> {
        let path = self.dir.join(file);
        let errlog = self.dir.join(format!("{file}.log"));
        let errf = std::fs::File::create(&errlog).map_err(Error::io("tcpdump log"))?;
        let snap = snaplen.to_string();
        let mut args = vec![
            "tcpdump",
            "-i",
            iface,
            "-n",
            // Deliver every packet to the file at once: with the default buffering, packets still in the
            // kernel ring when SIGINT arrives are lost.
            "--immediate-mode",
            "-U",
            "-Z",
            "root",
            "-s",
            &snap,
            "-w",
            path.to_str().ok_or_else(|| Error::not_utf8(&path))?,
        ];
        args.extend_from_slice(filter);
        let mut tcpdump = self.command(ns, &args);
        let command = command_line(&tcpdump);
        let child = tcpdump
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(errf)
            .spawn()
            .map_err(Error::io("cannot start tcpdump"))?;
        let mut c = Capture {
            child: Some(child),
            path,
        };
        let t0 = Instant::now();
        loop {
            let log = std::fs::read_to_string(&errlog).unwrap_or_default();
            if log.contains("listening on") {
                // tcpdump prints this just before its capture loop starts.
                std::thread::sleep(Duration::from_millis(50));
                return Ok(c);
            }
            if let Some(ch) = c.child.as_mut() {
                if let Ok(Some(st)) = ch.try_wait() {
                    c.child = None;
                    return Err(Error::command(command, Some(st), log));
                }
            }
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(Error::timeout("tcpdump did not start", 10.0, log.trim()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Keeps the namespaces and the directory after drop (for debugging; also with NETVEIL_LAB_KEEP set).
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.keep {
            let mut l = live();
            l.0.retain(|n| !self.namespaces.contains(n));
            l.1.retain(|d| *d != self.dir);
            eprintln!(
                "lab kept: namespaces {:?}, directory {}",
                self.namespaces,
                self.dir.display()
            );
            return;
        }
        // Whatever still runs in our namespaces was started by this lab. Each namespace (and then the directory)
        // leaves the registry only once it is gone: a signal that comes while this runs (the removal waits for
        // processes to stop) still finds in the registry what is left and removes it.
        for ns in self.namespaces.iter().rev() {
            remove_namespace(ns);
            live().0.retain(|n| n != ns);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        live().1.retain(|d| *d != self.dir);
        // (Only if no other lab uses it.)
        let _ = std::fs::remove_dir(LAB_BASE);
    }
}
