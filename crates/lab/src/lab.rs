//! Network-namespace labs for `netveil demo`, `netveil bench` and the integration tests.
//!
//! A [`Lab`] owns a set of network namespaces (named `PREFIX<pid>-<n>-<host>`, so that labs of parallel tests and
//! processes never collide) and a scratch directory. Everything it creates is removed when it is dropped, also while
//! unwinding from a panic: processes still running in its namespaces are killed, the namespaces deleted, the
//! directory removed. [`Daemon`] (a running `netveil up`) and [`Capture`] (a running tcpdump) stop their process on
//! drop. [`HostPair`] generates the two configurations of a point-to-point setup (random keys of the right lengths)
//! and [`TwoHosts`] brings the whole thing up.
//!
//! Addresses are from the documentation ranges only: outer 192.0.2.0/24 or 2001:db8:1::/64 on a veth pair, inner
//! 198.51.100.0/24 or 2001:db8:2::/64 on the TUN devices.

use crate::{Error, Result};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static LAB_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// The namespaces and directories of this process's labs that exist now: what [`remove_all_and_exit`] tears down when a
/// signal ends the process before the labs are dropped.
static LIVE: std::sync::Mutex<(Vec<String>, Vec<PathBuf>)> =
    std::sync::Mutex::new((Vec::new(), Vec::new()));

fn live() -> std::sync::MutexGuard<'static, (Vec<String>, Vec<PathBuf>)> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kills what runs in `ns` (SIGTERM, then SIGKILL) and deletes it.
fn remove_namespace(ns: &str) {
    for round in 0..2 {
        let pids = Command::new("ip")
            .args(["netns", "pids", ns])
            .stderr(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        let pids: Vec<u32> = pids
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.is_empty() {
            break;
        }
        for p in &pids {
            signal(
                *p,
                if round == 0 {
                    libc::SIGTERM
                } else {
                    libc::SIGKILL
                },
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let _ = Command::new("ip")
        .args(["netns", "del", ns])
        .stderr(Stdio::null())
        .status();
}

/// Tears down every lab of this process that still exists (its namespaces, what runs in them, its directory) and
/// ends the process with `code`, holding the registry's lock throughout: no lab can start meanwhile.
pub fn remove_all_and_exit(code: i32) -> ! {
    let mut l = live();
    let (namespaces, dirs) = std::mem::take(&mut *l);
    for ns in namespaces.iter().rev() {
        remove_namespace(ns);
    }
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    let _ = std::fs::remove_dir(LAB_BASE);
    std::process::exit(code)
}

/// From now on SIGINT, SIGTERM and SIGHUP end this process only after [`remove_all_and_exit`] (exit 130): a lab run
/// stopped with Ctrl-C leaves no namespace or process behind. The signals are caught by handlers (signal-hook) and
/// taken by one thread; they are not blocked, so the programs the labs start (which get default dispositions at
/// exec) stop on them as usual.
pub fn clean_up_on_signals() -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(Error::io("cannot catch signals"))?;
    std::thread::Builder::new()
        .name("lab-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let name = nix::sys::signal::Signal::try_from(sig)
                    .map_or_else(|_| sig.to_string(), |s| s.to_string());
                eprintln!("lab: {name}: removing the labs' namespaces");
                remove_all_and_exit(130);
            }
        })
        .map_err(Error::io("cannot start the signal thread"))?;
    Ok(())
}

/// A program a lab started (a server: sshd, nginx, SIPp's callee), killed and reaped when dropped.
pub struct Held(pub Child);

impl Held {
    /// Its process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The fwmark (and routing table) used for transport mode.
pub const TRANSPORT_FWMARK: u32 = 20054;

fn other(msg: impl Into<String>) -> Error {
    Error::Other(msg.into())
}

/// Whether this process runs as root (labs need it).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The `netveil` binary a lab runs: `$NETVEIL_BIN` if set; this program if it is `netveil` (demo, bench); else the
/// `netveil` that cargo built beside this program (a test binary in `target/PROFILE/deps/`).
pub fn netveil_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("NETVEIL_BIN") {
        return PathBuf::from(p);
    }
    let me = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("netveil"));
    if me.file_name().is_some_and(|n| n == "netveil") {
        return me;
    }
    me.parent()
        .and_then(|d| {
            [d.join("netveil"), d.parent()?.join("netveil")]
                .into_iter()
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| PathBuf::from("netveil"))
}

/// Whether a program is on PATH.
pub fn have_tool(name: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false)
}

fn signal(pid: u32, sig: libc::c_int) {
    if let (Ok(pid), Ok(sig)) = (i32::try_from(pid), nix::sys::signal::Signal::try_from(sig)) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
    }
}

/// Waits for a child up to `timeout`; returns None if it is still running.
fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let t0 = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if t0.elapsed() < timeout => std::thread::sleep(Duration::from_millis(20)),
            _ => return None,
        }
    }
}

/// Stops a child: `sig` first, SIGKILL after `grace`.
fn stop_child(child: &mut Child, sig: libc::c_int, grace: Duration) -> Option<ExitStatus> {
    if let Ok(Some(s)) = child.try_wait() {
        return Some(s);
    }
    signal(child.id(), sig);
    if let Some(s) = wait_timeout(child, grace) {
        return Some(s);
    }
    let _ = child.kill();
    child.wait().ok()
}

fn random_bytes(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    if n > 0 {
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut v))
            .expect("/dev/urandom");
    }
    v
}

/// Where labs keep their scratch directories: not in the system's temporary directory, since the daemons' state
/// directories inside must be on a path that only root can write (a sticky, world-writable `/tmp` is refused).
pub const LAB_BASE: &str = "/var/lib/netveil-lab";

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
            .map_err(|_| other(format!("thread in namespace {ns} panicked")))?
    }

    /// Starts `netveil up --fresh-keys -c CONFIG` in a namespace with the given configuration text (written into
    /// the lab directory as `NAME.toml`) and waits until its control socket answers `status`. The configuration's
    /// `control_socket` must be [`Lab::socket_path`]`(name)` (the [`HostPair`] generator does that). A lab's state
    /// directories are new and so are its keys, hence `--fresh-keys` (marks already there are still honoured).
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
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(&self.netveil)
            .arg("up")
            .args(args)
            .arg("-c")
            .arg(&cfg)
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
                    return Err(other(format!(
                        "netveil up ({name} in {ns}) exited with {st}: {}",
                        d.log().trim()
                    )));
                }
            }
            if d.ask("status").is_ok() {
                return Ok(d);
            }
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(other(format!(
                    "netveil up ({name} in {ns}) did not answer on {} within 10 s: {}",
                    d.socket.display(),
                    d.log().trim()
                )));
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
            .ok_or_else(|| other("non-UTF-8 path"))?;
        let c = cfg.to_str().ok_or_else(|| other("non-UTF-8 path"))?;
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
            path.to_str().ok_or_else(|| other("non-UTF-8 lab path"))?,
        ];
        args.extend_from_slice(filter);
        let child = self
            .command(ns, &args)
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
                    return Err(other(format!("tcpdump exited with {st}: {}", log.trim())));
                }
            }
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(other(format!(
                    "tcpdump did not start within 10 s: {}",
                    log.trim()
                )));
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

pub(crate) fn run_ok(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .map_err(Error::io(format!("cannot run {:?}", cmd.get_program())))?;
    if !out.status.success() {
        let args: Vec<String> = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy().to_string())
            .collect();
        return Err(other(format!(
            "'{}' failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// Starts `f` on a thread inside namespace `ns` (by its /run/netns entry).
pub fn spawn_in_ns<T, F>(ns: &str, f: F) -> Result<std::thread::JoinHandle<Result<T>>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let path = format!("/run/netns/{ns}");
    let file = std::fs::File::open(&path).map_err(Error::io(format!("cannot open {path}")))?;
    std::thread::Builder::new()
        .name(format!("ns-{ns}"))
        .spawn(move || {
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| Error::io("setns")(e.into()))?;
            Ok(f())
        })
        .map_err(Error::io("thread"))
}

/// A running `netveil up`, stopped (SIGTERM, then SIGKILL) on drop.
pub struct Daemon {
    child: Option<Child>,
    pub ns: String,
    pub name: String,
    pub socket: PathBuf,
    pub log: PathBuf,
    netveil: PathBuf,
}

impl Daemon {
    /// One request on the control socket (`status` or `keys`), its JSON answer.
    pub fn ask(&self, req: &str) -> Result<Value> {
        let mut s = UnixStream::connect(&self.socket)
            .map_err(Error::io(format!("connect {}", self.socket.display())))?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        s.write_all(format!("{req}\n").as_bytes())
            .map_err(Error::io("control socket"))?;
        s.shutdown(std::net::Shutdown::Write).ok();
        let mut buf = String::new();
        s.read_to_string(&mut buf)
            .map_err(Error::io("control socket"))?;
        serde_json::from_str(&buf).map_err(|e| other(format!("bad control answer: {e}")))
    }

    /// `netveil status --json` (through the CLI).
    pub fn status_json(&self) -> Result<Value> {
        let out = self.netveil_cli(&["status", "--json"])?;
        serde_json::from_str(&out).map_err(|e| other(format!("bad status JSON: {e}")))
    }

    /// `netveil status` (the human-readable table).
    pub fn status_text(&self) -> Result<String> {
        self.netveil_cli(&["status"])
    }

    /// `netveil keys --wireshark DIR`.
    pub fn keys_wireshark(&self, dir: &Path) -> Result<()> {
        let d = dir.to_str().ok_or_else(|| other("non-UTF-8 path"))?;
        self.netveil_cli(&["keys", "--wireshark", d]).map(|_| ())
    }

    fn netveil_cli(&self, args: &[&str]) -> Result<String> {
        run_ok(
            Command::new(&self.netveil)
                .args(args)
                .arg("--socket")
                .arg(&self.socket),
        )
    }

    /// The daemon's output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The daemon's process id (`ip netns exec` execs netveil in place).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Kills the daemon with SIGKILL (as a crash would end it: no cleanup) and returns its exit status.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let mut c = self.child.take()?;
        stop_child(&mut c, libc::SIGKILL, Duration::from_secs(5))
    }

    /// Stops the daemon (SIGTERM, SIGKILL after 5 s) and returns its exit status.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let mut c = self.child.take()?;
        stop_child(&mut c, libc::SIGTERM, Duration::from_secs(5))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A running tcpdump writing a pcap file; stopped with SIGINT (so that the file is complete) on [`Capture::stop`]
/// or drop.
pub struct Capture {
    child: Option<Child>,
    pub path: PathBuf,
}

impl Capture {
    /// Stops tcpdump cleanly and returns the pcap path.
    pub fn stop(&mut self) -> Result<PathBuf> {
        if let Some(mut c) = self.child.take() {
            // Give the last packets a moment to reach the capture.
            std::thread::sleep(Duration::from_millis(100));
            stop_child(&mut c, libc::SIGINT, Duration::from_secs(5));
        }
        Ok(self.path.clone())
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Configuration generator
// ---------------------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Esp,
    Ah,
    /// PSP; `suite` is the PSP version name (e.g. "aes-gcm-128").
    Psp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Tunnel,
    Transport,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

/// Options of a two-host setup; [`HostPair::configs`] turns them into the two `netveil.toml` texts.
#[derive(Debug, Clone)]
pub struct HostPair {
    /// ESP suite (e.g. "aes128gcm16", "aes256-sha256", "null-null") or AH suite ("sha256").
    pub suite: String,
    pub protocol: Protocol,
    pub mode: Mode,
    /// Family of the veth (outer) addresses.
    pub outer: Family,
    /// Family of the inner (TUN) addresses in tunnel mode.
    pub inner: Family,
    pub esn: bool,
    pub udp_encap: bool,
    pub allow_null_null: bool,
    /// With `Some(ah_suite)`: an ESP+AH bundle, ESP (in `mode`) innermost, then AH in transport mode.
    pub bundle_ah: Option<String>,
    /// TUN device name.
    pub tun: String,
    pub mtu: u16,
    /// PSP: netveil's IV replay window (0: off; `None`: the default, on in tunnel mode).
    pub psp_replay_window: Option<u32>,
    /// PSP: master-key rotation interval in seconds (0: only on request).
    pub psp_rotate_seconds: u64,
    /// The daemons' `log_level` (`None`: the default, info).
    pub log_level: Option<String>,
    /// A router between the hosts (its own namespace, see [`Router`]): side b's outer address is then on a
    /// second subnet (203.0.113.0/24 or 2001:db8:3::/64), reached through it.
    pub routed: bool,
}

impl Default for HostPair {
    fn default() -> Self {
        HostPair {
            suite: "aes128gcm16".into(),
            protocol: Protocol::Esp,
            mode: Mode::Tunnel,
            outer: Family::V4,
            inner: Family::V4,
            esn: false,
            udp_encap: false,
            allow_null_null: false,
            bundle_ah: None,
            tun: "nv0".into(),
            mtu: 1400,
            psp_replay_window: None,
            psp_rotate_seconds: 0,
            log_level: None,
            routed: false,
        }
    }
}

/// The addresses of one side.
#[derive(Debug, Clone)]
pub struct HostAddrs {
    /// Address on the veth.
    pub outer: IpAddr,
    pub outer_prefix: u8,
    /// Address the traffic is between: the TUN address in tunnel mode, the veth address in transport mode.
    pub inner: IpAddr,
    pub inner_prefix: u8,
}

/// The Wireshark-decryptable ESP suites of tshark 4.0 (no ChaCha20-Poly1305, no GMAC).
pub fn wireshark_can_decrypt(suite: &str) -> bool {
    let s = suite.to_ascii_lowercase();
    !(s.contains("chacha") || s.contains("gmac"))
}

impl HostPair {
    pub fn esp(suite: &str) -> HostPair {
        HostPair {
            suite: suite.into(),
            allow_null_null: suite.eq_ignore_ascii_case("null-null"),
            ..Default::default()
        }
    }

    /// PSP with `version` ("aes-gcm-128", "aes-gcm-256", "aes-gmac-128", "aes-gmac-256").
    pub fn psp(version: &str) -> HostPair {
        HostPair {
            suite: version.into(),
            protocol: Protocol::Psp,
            ..Default::default()
        }
    }

    pub fn ah(suite: &str) -> HostPair {
        HostPair {
            suite: suite.into(),
            protocol: Protocol::Ah,
            ..Default::default()
        }
    }

    /// The same pair with a router between the hosts ([`HostPair::routed`]).
    pub fn via_router(mut self) -> HostPair {
        self.routed = true;
        self
    }

    /// The addresses of side 0 ("a") or 1 ("b").
    pub fn addrs(&self, side: usize) -> HostAddrs {
        let host = side as u8 + 1;
        // Routed, side b is on the router's second link.
        let far = self.routed && side == 1;
        let (outer, outer_prefix): (IpAddr, u8) = match (self.outer, far) {
            (Family::V4, false) => ([192, 0, 2, host].into(), 24),
            (Family::V4, true) => ([203, 0, 113, host].into(), 24),
            (Family::V6, false) => (format!("2001:db8:1::{host}").parse().expect("address"), 64),
            (Family::V6, true) => (format!("2001:db8:3::{host}").parse().expect("address"), 64),
        };
        let (inner, inner_prefix): (IpAddr, u8) = match (self.mode, self.inner) {
            (Mode::Transport, _) => (outer, outer_prefix),
            (Mode::Tunnel, Family::V4) => ([198, 51, 100, host].into(), 24),
            (Mode::Tunnel, Family::V6) => {
                (format!("2001:db8:2::{host}").parse().expect("address"), 64)
            }
        };
        HostAddrs {
            outer,
            outer_prefix,
            inner,
            inner_prefix,
        }
    }

    /// (enc_key, auth_key) lengths for the suite.
    pub fn key_lens(&self, suite: &str, protocol: Protocol) -> Result<(usize, usize)> {
        match protocol {
            Protocol::Esp => {
                let s = netveil_ipsec::suite::EspSuite::parse(suite, true)
                    .map_err(|e| Error::Usage(e.to_string()))?;
                Ok((s.enc.key_len(), s.integ.map_or(0, |i| i.key_len())))
            }
            Protocol::Ah => {
                let s = netveil_ipsec::suite::AhSuite::parse(suite)
                    .map_err(|e| Error::Usage(e.to_string()))?;
                Ok((0, s.integ.key_len()))
            }
            Protocol::Psp => Ok((0, 0)),
        }
    }

    /// The two configuration texts (side a, side b) with fresh random keys; `sockets` are the control sockets.
    pub fn configs(&self, sockets: [&Path; 2]) -> Result<[String; 2]> {
        self.configs_with(&netveil_binary(), sockets)
    }

    /// [`HostPair::configs`], with `netveil` making PSP's certificates (`netveil keygen`): a lab's own binary.
    pub fn configs_with(&self, netveil: &Path, sockets: [&Path; 2]) -> Result<[String; 2]> {
        if self.protocol == Protocol::Psp {
            return self.psp_configs(netveil, sockets);
        }
        let (ek, ak) = self.key_lens(&self.suite, self.protocol)?;
        // Keys per direction: [a->b, b->a].
        let keys: Vec<(String, String)> = (0..2)
            .map(|_| (hex::encode(random_bytes(ek)), hex::encode(random_bytes(ak))))
            .collect();
        let ah_keys: Option<(String, Vec<String>)> = match &self.bundle_ah {
            Some(s) => {
                let (_, l) = self.key_lens(s, Protocol::Ah)?;
                Some((
                    s.clone(),
                    (0..2).map(|_| hex::encode(random_bytes(l))).collect(),
                ))
            }
            None => None,
        };
        let mut out = [String::new(), String::new()];
        for (side, text) in out.iter_mut().enumerate() {
            let me = self.addrs(side);
            let peer = self.addrs(1 - side);
            let (me_n, peer_n) = (["a", "b"][side], ["a", "b"][1 - side]);
            let mut t = self.interface_section(side, sockets[side]);
            if self.allow_null_null {
                t.push_str("allow_null_null = true\n");
            }
            let sa = |t: &mut String,
                      name: &str,
                      dir: &str,
                      proto: &str,
                      spi: u32,
                      mode: Mode,
                      suite: &str,
                      enc: &str,
                      auth: &str| {
                t.push_str("\n[[sa]]\n");
                t.push_str(&format!("name = \"{name}\"\ndirection = \"{dir}\"\n"));
                t.push_str(&format!("protocol = \"{proto}\"\nspi = {spi:#x}\n"));
                match mode {
                    Mode::Tunnel => t.push_str(&format!(
                        "mode = \"tunnel\"\nlocal = \"{}\"\nremote = \"{}\"\n",
                        me.outer, peer.outer
                    )),
                    Mode::Transport => t.push_str("mode = \"transport\"\n"),
                }
                t.push_str(&format!("suite = \"{suite}\"\n"));
                if !enc.is_empty() {
                    t.push_str(&format!("enc_key = \"{enc}\"\n"));
                }
                if !auth.is_empty() {
                    t.push_str(&format!("auth_key = \"{auth}\"\n"));
                }
                if self.esn {
                    t.push_str("esn = true\n");
                }
                if self.udp_encap && proto == "esp" {
                    t.push_str("encap = \"udp\"\n");
                }
            };
            let proto = match self.protocol {
                Protocol::Esp => "esp",
                Protocol::Ah | Protocol::Psp => "ah",
            };
            // SPIs: a->b 0x1001, b->a 0x2001 (AH of a bundle: 0x3001, 0x4001).
            let (out_i, in_i) = (side, 1 - side);
            let spi = |dir_i: usize, base: u32| base + 0x1000 * dir_i as u32;
            let out_name = format!("{me_n}-to-{peer_n}");
            let in_name = format!("{peer_n}-to-{me_n}");
            sa(
                &mut t,
                &out_name,
                "out",
                proto,
                spi(out_i, 0x1001),
                self.mode,
                &self.suite,
                &keys[out_i].0,
                &keys[out_i].1,
            );
            sa(
                &mut t,
                &in_name,
                "in",
                proto,
                spi(in_i, 0x1001),
                self.mode,
                &self.suite,
                &keys[in_i].0,
                &keys[in_i].1,
            );
            let (mut out_sas, mut in_sas) = (vec![out_name.clone()], vec![in_name.clone()]);
            if let Some((ah_suite, ah)) = &ah_keys {
                let (o, i) = (format!("{out_name}-ah"), format!("{in_name}-ah"));
                sa(
                    &mut t,
                    &o,
                    "out",
                    "ah",
                    spi(out_i, 0x3001),
                    Mode::Transport,
                    ah_suite,
                    "",
                    &ah[out_i],
                );
                sa(
                    &mut t,
                    &i,
                    "in",
                    "ah",
                    spi(in_i, 0x3001),
                    Mode::Transport,
                    ah_suite,
                    "",
                    &ah[in_i],
                );
                out_sas.push(o);
                in_sas.push(i);
            }
            let host = if me.inner.is_ipv4() { 32 } else { 128 };
            let list = |v: &[String]| {
                v.iter()
                    .map(|s| format!("\"{s}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            t.push_str(&format!(
                "\n[[policy]]\nname = \"out\"\ndirection = \"out\"\nsrc = \"{}/{host}\"\ndst = \"{}/{host}\"\naction = \"protect\"\nsas = [{}]\n",
                me.inner, peer.inner, list(&out_sas)
            ));
            t.push_str(&format!(
                "\n[[policy]]\nname = \"in\"\ndirection = \"in\"\nsrc = \"{}/{host}\"\ndst = \"{}/{host}\"\naction = \"protect\"\nsas = [{}]\n",
                peer.inner, me.inner, list(&in_sas)
            ));
            *text = t;
        }
        Ok(out)
    }
}

impl HostPair {
    /// The `[interface]` section of side `side`.
    fn interface_section(&self, side: usize, socket: &Path) -> String {
        let me = self.addrs(side);
        let peer = self.addrs(1 - side);
        // The daemon's state (sequence-number marks) stays in the lab's directory, next to the control socket.
        let state = socket
            .parent()
            .unwrap_or(Path::new("."))
            .join(format!("state-{}", ["a", "b"][side]));
        let mut t = match &self.log_level {
            Some(l) => format!("log_level = \"{l}\"\n"),
            None => String::new(),
        };
        t += &format!(
            "[interface]\nname = \"{}\"\nmtu = {}\ncontrol_socket = \"{}\"\nstate_dir = \"{}\"\n",
            self.tun,
            self.mtu,
            socket.display(),
            state.display()
        );
        match self.mode {
            Mode::Tunnel => t.push_str(&format!(
                "addresses = [\"{}/{}\"]\n",
                me.inner, me.inner_prefix
            )),
            Mode::Transport => {
                let host = if peer.outer.is_ipv4() { 32 } else { 128 };
                t.push_str(&format!("fwmark = {TRANSPORT_FWMARK}\n"));
                t.push_str(&format!("routes = [\"{}/{host}\"]\n", peer.outer));
            }
        }
        t
    }

    /// PSP configurations: certificates for "a" and "b" made with `netveil keygen` next to the control sockets,
    /// each side trusting the other's self-signed certificate.
    fn psp_configs(&self, netveil: &Path, sockets: [&Path; 2]) -> Result<[String; 2]> {
        let dir = sockets[0]
            .parent()
            .ok_or_else(|| other("control socket without a directory"))?;
        for n in ["a", "b"] {
            if !dir.join(format!("{n}.crt")).exists() {
                run_ok(
                    Command::new(netveil)
                        .args(["keygen", "-n", n, "-o"])
                        .arg(dir),
                )?;
            }
        }
        let mut out = [String::new(), String::new()];
        for (side, text) in out.iter_mut().enumerate() {
            let me = self.addrs(side);
            let peer = self.addrs(1 - side);
            let (me_n, peer_n) = (["a", "b"][side], ["a", "b"][1 - side]);
            let mut t = self.interface_section(side, sockets[side]);
            let mode = match self.mode {
                Mode::Tunnel => "tunnel",
                Mode::Transport => "transport",
            };
            t.push_str(&format!(
                "\n[psp]\nversion = \"{}\"\nmode = \"{mode}\"\nlocal = \"{}\"\nremote = \"{}\"\n",
                self.suite, me.outer, peer.outer
            ));
            t.push_str(&format!(
                "cert = \"{d}/{me_n}.crt\"\nkey = \"{d}/{me_n}.key\"\npeer_ca = \"{d}/{peer_n}.crt\"\npeer_name = \"{peer_n}\"\n",
                d = dir.display()
            ));
            if let Some(w) = self.psp_replay_window {
                t.push_str(&format!("replay_window = {w}\n"));
            }
            if self.psp_rotate_seconds > 0 {
                t.push_str(&format!("rotate_seconds = {}\n", self.psp_rotate_seconds));
            }
            let host = if me.inner.is_ipv4() { 32 } else { 128 };
            for (name, src, dst) in [
                ("out", &me.inner, &peer.inner),
                ("in", &peer.inner, &me.inner),
            ] {
                t.push_str(&format!(
                    "\n[[policy]]\nname = \"{name}\"\ndirection = \"{name}\"\nsrc = \"{src}/{host}\"\ndst = \"{dst}/{host}\"\naction = \"protect\"\nprotocol = \"psp\"\n"
                ));
            }
            *text = t;
        }
        Ok(out)
    }
}

/// Two namespaces ("a", "b") joined by a veth pair (`veth-a`, `veth-b`) with a netveil daemon in each; with
/// [`HostPair::routed`], by a [`Router`] instead.
pub struct TwoHosts {
    pub pair: HostPair,
    pub ns: [String; 2],
    pub veth: [&'static str; 2],
    pub addrs: [HostAddrs; 2],
    pub configs: [String; 2],
    /// The router between the hosts, when the pair is routed.
    pub router: Option<Router>,
    /// Dropped before the lab (field order).
    pub daemons: Vec<Daemon>,
}

/// The router in the middle of a routed [`TwoHosts`]: namespace "r", a veth pair to each host (its ports `r-a`
/// and `r-b`; the hosts' ends keep their names `veth-a` and `veth-b`), IP forwarding on, and on each host a route
/// to the other host's subnet through it. It is where the lab makes link conditions (loss, delay) and where it
/// can capture what crosses between the hosts.
pub struct Router {
    pub ns: String,
    /// Its port toward side a, and toward side b.
    pub ports: [&'static str; 2],
    /// Its address on each link.
    pub addrs: [IpAddr; 2],
}

impl Router {
    /// The capture point between the hosts: tcpdump on the router's port toward side `side` (0: the client's, 1:
    /// the server's), as [`Lab::capture`]. A capture there sees what arrives on that link before the router's own
    /// rules (the loss lab's drop) and what the router sends onto it.
    pub fn capture(
        &self,
        lab: &Lab,
        side: usize,
        file: &str,
        snaplen: u32,
        filter: &[&str],
    ) -> Result<Capture> {
        lab.capture(&self.ns, self.ports[side], file, snaplen, filter)
    }
}

/// The network `addr/prefix` lies in, as `ip route` takes it (host bits zero).
fn network(addr: IpAddr, prefix: u8) -> String {
    match addr {
        IpAddr::V4(v) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            format!("{}/{prefix}", std::net::Ipv4Addr::from(u32::from(v) & mask))
        }
        IpAddr::V6(v) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            format!(
                "{}/{prefix}",
                std::net::Ipv6Addr::from(u128::from(v) & mask)
            )
        }
    }
}

impl Router {
    /// The router's address on side `side`'s link: .254 (v4) or ::fe (v6) of that side's subnet.
    fn address(pair: &HostPair, side: usize) -> (IpAddr, u8) {
        let a = pair.addrs(side);
        match a.outer {
            IpAddr::V4(v) => {
                let o = v.octets();
                (IpAddr::from([o[0], o[1], o[2], 254]), a.outer_prefix)
            }
            IpAddr::V6(v) => {
                let mut s = v.segments();
                s[7] = 0xfe;
                (IpAddr::from(s), a.outer_prefix)
            }
        }
    }

    /// Builds the router between `ns[0]` and `ns[1]` (whose ends are `veth[0]`, `veth[1]`) and addresses the
    /// hosts' ends.
    fn build(
        lab: &mut Lab,
        pair: &HostPair,
        ns: &[String; 2],
        veth: [&'static str; 2],
        addrs: &[HostAddrs; 2],
    ) -> Result<Router> {
        let r = lab.add_ns("r")?;
        let ports = ["r-a", "r-b"];
        let v6 = pair.outer == Family::V6;
        if v6 {
            lab.exec_ok(&r, &["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"])?;
        } else {
            lab.exec_ok(&r, &["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
            lab.exec_ok(
                &r,
                &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
            )?;
        }
        let mut raddrs = Vec::new();
        for i in 0..2 {
            lab.veth(&ns[i], veth[i], &r, ports[i])?;
            let (ra, prefix) = Router::address(pair, i);
            lab.addr(&r, ports[i], &format!("{ra}/{prefix}"))?;
            let cidr = format!("{}/{}", addrs[i].outer, addrs[i].outer_prefix);
            lab.addr(&ns[i], veth[i], &cidr)?;
            raddrs.push(ra);
        }
        for i in 0..2 {
            let subnet = network(addrs[1 - i].outer, addrs[1 - i].outer_prefix);
            let via = raddrs[i].to_string();
            let fam = if v6 { "-6" } else { "-4" };
            lab.ip(&ns[i], &[fam, "route", "add", &subnet, "via", &via])?;
        }
        Ok(Router {
            ns: r,
            ports,
            addrs: [raddrs[0], raddrs[1]],
        })
    }
}

impl TwoHosts {
    /// Builds the topology in `lab` (without daemons).
    pub fn topology(lab: &mut Lab, pair: &HostPair) -> Result<TwoHosts> {
        let a = lab.add_ns("a")?;
        let b = lab.add_ns("b")?;
        let veth = ["veth-a", "veth-b"];
        if pair.outer == Family::V4 && (pair.inner == Family::V4 || pair.mode == Mode::Transport) {
            // No IPv6 link-local chatter on an IPv4-only wire: captures show only what the test is about.
            for ns in [&a, &b] {
                lab.exec_ok(
                    ns,
                    &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
                )?;
            }
        }
        let addrs = [pair.addrs(0), pair.addrs(1)];
        let ns = [a, b];
        let router = if pair.routed {
            Some(Router::build(lab, pair, &ns, veth, &addrs)?)
        } else {
            lab.veth(&ns[0], veth[0], &ns[1], veth[1])?;
            for i in 0..2 {
                let cidr = format!("{}/{}", addrs[i].outer, addrs[i].outer_prefix);
                lab.addr(&ns[i], veth[i], &cidr)?;
            }
            None
        };
        let configs = pair.configs_with(
            lab.netveil(),
            [&lab.socket_path("a"), &lab.socket_path("b")],
        )?;
        Ok(TwoHosts {
            pair: pair.clone(),
            ns,
            veth,
            addrs,
            configs,
            router,
            daemons: Vec::new(),
        })
    }

    /// Builds the topology and starts both daemons.
    pub fn up(lab: &mut Lab, pair: &HostPair) -> Result<TwoHosts> {
        let mut h = TwoHosts::topology(lab, pair)?;
        h.start(lab)?;
        Ok(h)
    }

    /// Starts both daemons.
    pub fn start(&mut self, lab: &Lab) -> Result<()> {
        for (i, n) in ["a", "b"].iter().enumerate() {
            let d = lab.start_daemon(&self.ns[i], n, &self.configs[i])?;
            self.daemons.push(d);
        }
        Ok(())
    }

    pub fn daemon(&self, side: usize) -> &Daemon {
        &self.daemons[side]
    }

    /// PSP: waits until both daemons are connected and hold each other's association.
    pub fn wait_psp_associated(&self, timeout: Duration) -> Result<()> {
        let t = std::time::Instant::now();
        loop {
            // Connected, and each side sends with the SPI the other handed out last (not an older one of a peer
            // that restarted).
            let st: Vec<Value> = self
                .daemons
                .iter()
                .filter_map(|d| d.status_json().ok())
                .collect();
            let ok = st.len() == 2
                && st
                    .iter()
                    .all(|s| s["psp"]["connected"] == true && s["psp"]["tx_spi"] != "0x00000000")
                && st[0]["psp"]["tx_spi"] == st[1]["psp"]["rx_spi"]
                && st[1]["psp"]["tx_spi"] == st[0]["psp"]["rx_spi"];
            if ok {
                return Ok(());
            }
            if t.elapsed() > timeout {
                return Err(other(format!(
                    "no PSP association after {timeout:?}\n--- a ---\n{}\n--- b ---\n{}",
                    self.daemons.first().map(|d| d.log()).unwrap_or_default(),
                    self.daemons.get(1).map(|d| d.log()).unwrap_or_default()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `ping -c COUNT -i INTERVAL` from side `from` to the other side's inner address; returns ping's output.
    pub fn ping(&self, lab: &Lab, from: usize, count: u32, interval: &str) -> Result<String> {
        let dst = self.addrs[1 - from].inner.to_string();
        let c = count.to_string();
        lab.exec_ok(
            &self.ns[from],
            &["ping", "-n", "-c", &c, "-i", interval, "-W", "2", &dst],
        )
    }

    /// A TCP transfer of `bytes` from side `from` to the other side's inner address (see [`tcp_transfer`]).
    pub fn tcp(&self, from: usize, bytes: u64) -> Result<Transfer> {
        tcp_transfer(
            &self.ns[from],
            &self.ns[1 - from],
            self.addrs[1 - from].inner,
            5201,
            bytes,
        )
    }
}

/// The result of a [`tcp_transfer`].
#[derive(Debug, Clone, Copy)]
pub struct Transfer {
    /// Bytes received and verified by the receiver.
    pub bytes: u64,
    pub seconds: f64,
}

impl Transfer {
    pub fn mbit_per_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.seconds.max(1e-9) / 1e6
    }
}

fn pattern_fill(buf: &mut [u8], offset: u64) {
    // Byte i of the stream is a cheap function of i, so the receiver can check every byte.
    for (k, b) in buf.iter_mut().enumerate() {
        let i = offset + k as u64;
        *b = (i ^ (i >> 8) ^ (i >> 16).wrapping_mul(31)) as u8;
    }
}

/// Sends `bytes` bytes of a known pattern over TCP from namespace `src_ns` to `dst:port` in namespace `dst_ns` with
/// built-in sender and receiver threads; the receiver checks every byte. Time limit: 120 s.
pub fn tcp_transfer(
    src_ns: &str,
    dst_ns: &str,
    dst: IpAddr,
    port: u16,
    bytes: u64,
) -> Result<Transfer> {
    let addr = SocketAddr::new(dst, port);
    let (tx, rx) = std::sync::mpsc::channel::<std::result::Result<(), String>>();
    let receiver = spawn_in_ns(dst_ns, move || -> std::result::Result<u64, String> {
        let l = match std::net::TcpListener::bind(addr) {
            Ok(l) => {
                let _ = tx.send(Ok(()));
                l
            }
            Err(e) => {
                let _ = tx.send(Err(format!("bind {addr}: {e}")));
                return Err(format!("bind {addr}: {e}"));
            }
        };
        let t0 = Instant::now();
        // Waits in poll(2) for the connection, so that accepting it costs no time of the transfer (a sleeping
        // retry loop added up to its sleep to every transfer's time: 5 ms, most of a 1 KB transfer).
        {
            use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
            use std::os::fd::AsFd;
            let mut fds = [PollFd::new(l.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(20_000u16)) {
                Ok(0) => return Err("no connection within 20 s".into()),
                Ok(_) => {}
                Err(e) => return Err(format!("poll: {e}")),
            }
        }
        let mut s = match l.accept() {
            Ok((s, _)) => s,
            Err(e) => return Err(format!("accept: {e}")),
        };
        s.set_read_timeout(Some(Duration::from_secs(20))).ok();
        let mut buf = vec![0u8; 256 * 1024];
        let mut want = vec![0u8; 256 * 1024];
        let mut got: u64 = 0;
        loop {
            let n = match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("receive after {got} bytes: {e}")),
            };
            pattern_fill(&mut want[..n], got);
            if buf[..n] != want[..n] {
                return Err(format!("corrupted data near byte {got}"));
            }
            got += n as u64;
            if t0.elapsed() > Duration::from_secs(120) {
                return Err(format!("too slow: {got} bytes in 120 s"));
            }
        }
        Ok(got)
    })?;
    match rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(other(e)),
        Err(_) => return Err(other("receiver thread ended early")),
    }
    let sender = spawn_in_ns(src_ns, move || -> std::result::Result<f64, String> {
        let t0 = Instant::now();
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .map_err(|e| format!("connect {addr}: {e}"))?;
        s.set_write_timeout(Some(Duration::from_secs(20))).ok();
        let mut buf = vec![0u8; 256 * 1024];
        let mut sent: u64 = 0;
        while sent < bytes {
            let n = (bytes - sent).min(buf.len() as u64) as usize;
            pattern_fill(&mut buf[..n], sent);
            s.write_all(&buf[..n])
                .map_err(|e| format!("send after {sent} bytes: {e}"))?;
            sent += n as u64;
        }
        s.shutdown(std::net::Shutdown::Write).ok();
        // Wait for the receiver to close (it has read everything then).
        let mut one = [0u8; 1];
        s.set_read_timeout(Some(Duration::from_secs(30))).ok();
        let _ = s.read(&mut one);
        Ok(t0.elapsed().as_secs_f64())
    })?;
    let secs = sender
        .join()
        .map_err(|_| other("sender panicked"))??
        .map_err(|e| other(format!("TCP sender: {e}")))?;
    let got = receiver
        .join()
        .map_err(|_| other("receiver panicked"))??
        .map_err(|e| other(format!("TCP receiver: {e}")))?;
    if got != bytes {
        return Err(other(format!(
            "TCP transfer: received {got} of {bytes} bytes"
        )));
    }
    Ok(Transfer {
        bytes: got,
        seconds: secs,
    })
}

// ---------------------------------------------------------------------------------------------------------------
// pcap inspection with tshark
// ---------------------------------------------------------------------------------------------------------------

/// One frame of a capture as tshark sees it (without keys unless given).
#[derive(Debug, Clone, Default)]
pub struct Frame {
    /// frame.protocols, e.g. "eth:ethertype:ip:esp".
    pub protocols: String,
    /// All IPv4/IPv6 source and destination addresses in the frame (outer and, if dissected, inner).
    pub addrs: Vec<String>,
    /// The outer source and destination addresses.
    pub src: String,
    pub dst: String,
    /// The ICMPv6 types in the frame (to tell neighbour discovery from inner traffic).
    pub icmpv6_types: Vec<u8>,
    /// The first (outer) IP protocol / next header.
    pub outer_proto: Option<u8>,
    pub esp_spi: Option<String>,
    pub esp_seq: Option<u64>,
    /// esp.icv_good (Some(true) when tshark verified the ICV).
    pub icv_good: Option<bool>,
    pub udp_ports: Vec<u16>,
    pub tcp_ports: Vec<u16>,
}

/// Reads a pcap with tshark. With `keys_dir`, ESP decryption and ICV checking are on and the ESP SA table
/// (`esp_sa`, as written by `netveil keys --wireshark`) is taken from that directory (used as tshark's
/// configuration directory through WIRESHARK_CONFIG_DIR).
pub fn tshark_frames(
    pcap: &Path,
    keys_dir: Option<&Path>,
    filter: Option<&str>,
) -> Result<Vec<Frame>> {
    let mut c = Command::new("tshark");
    c.arg("-n").arg("-r").arg(pcap);
    if let Some(d) = keys_dir {
        c.env("WIRESHARK_CONFIG_DIR", d).args([
            "-o",
            "esp.enable_encryption_decode:TRUE",
            "-o",
            "esp.enable_authentication_check:TRUE",
        ]);
    } else {
        // A configuration directory of its own, so that the user's settings cannot change the result.
        c.env("WIRESHARK_CONFIG_DIR", pcap.with_extension("wsconf"));
    }
    if let Some(f) = filter {
        c.args(["-Y", f]);
    }
    c.args(["-T", "fields", "-E", "separator=|", "-E", "occurrence=a"]);
    for f in [
        "frame.protocols",
        "ip.src",
        "ip.dst",
        "ipv6.src",
        "ipv6.dst",
        "ip.proto",
        "ipv6.nxt",
        "esp.spi",
        "esp.sequence",
        "esp.icv_good",
        "udp.port",
        "icmpv6.type",
        "tcp.port",
    ] {
        c.args(["-e", f]);
    }
    let out = run_ok(&mut c)?;
    let mut frames = Vec::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('|').collect();
        if f.len() < 13 {
            continue;
        }
        let list = |s: &str| -> Vec<String> {
            s.split(',')
                .filter(|x| !x.is_empty())
                .map(|x| x.to_string())
                .collect()
        };
        let mut addrs = Vec::new();
        for field in &f[1..=4] {
            addrs.extend(list(field));
        }
        // The outer header: IPv4 or IPv6, whichever comes first in frame.protocols.
        let (outer_proto, src, dst) = {
            let p = f[0];
            let v4 = p.find(":ip:").or(p.strip_suffix(":ip").map(|s| s.len()));
            let v6 = p
                .find(":ipv6:")
                .or(p.strip_suffix(":ipv6").map(|s| s.len()));
            let (pr, s, d) = match (v4, v6) {
                (Some(a), Some(b)) if a < b => (f[5], f[1], f[2]),
                (Some(_), None) => (f[5], f[1], f[2]),
                (_, Some(_)) => (f[6], f[3], f[4]),
                _ => ("", "", ""),
            };
            let first = |x: &str| list(x).first().cloned().unwrap_or_default();
            (
                list(pr).first().and_then(|x| x.parse().ok()),
                first(s),
                first(d),
            )
        };
        frames.push(Frame {
            protocols: f[0].to_string(),
            addrs,
            src,
            dst,
            icmpv6_types: list(f[11]).iter().filter_map(|x| x.parse().ok()).collect(),
            outer_proto,
            esp_spi: list(f[7]).first().cloned(),
            esp_seq: list(f[8]).first().and_then(|x| x.parse().ok()),
            icv_good: list(f[9]).first().map(|x| x == "1" || x == "True"),
            udp_ports: list(f[10]).iter().filter_map(|x| x.parse().ok()).collect(),
            tcp_ports: list(f[12]).iter().filter_map(|x| x.parse().ok()).collect(),
        });
    }
    Ok(frames)
}

/// A one-shot iperf3 server (`-s -1`) bound to `bind` in `ns`, its output discarded; returned once it listens
/// (on port 5201; after 2 s without, returned anyway: the client's connection then fails and says so).
pub fn iperf3_server(lab: &Lab, ns: &str, bind: &str) -> Result<Child> {
    let child = lab
        .command(ns, &["iperf3", "-s", "-1", "-B", bind])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(Error::io("cannot start iperf3"))?;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
        let listening = lab
            .exec(ns, &["ss", "-Hltn", "sport", "=", ":5201"])
            .map(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
            .unwrap_or(false);
        if listening {
            break;
        }
    }
    Ok(child)
}

/// A throw-away P-256 key and self-signed certificate (`CN=lab`, one day) for the lab's TLS servers, written into
/// `dir` by `openssl req`: (key, certificate).
pub fn self_signed_cert(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    let ok = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-subj", "/CN=lab", "-days", "1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(Error::io("openssl req"))?
        .success();
    if !ok {
        return Err(Error::Other("openssl req failed".into()));
    }
    Ok((key, cert))
}

/// Runs iperf3 for `secs` seconds with `streams` TCP streams from `client_ns` to a server at `dst` in `server_ns`;
/// returns the receiver's goodput in Gbit/s and the sender's retransmits.
pub fn iperf(
    lab: &Lab,
    server_ns: &str,
    client_ns: &str,
    dst: &str,
    secs: u32,
    streams: u32,
) -> Result<(f64, u64)> {
    let mut server = iperf3_server(lab, server_ns, dst)?;
    // Wait for the server to listen.
    let mut out = None;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let o = lab.exec(
            client_ns,
            &[
                "iperf3",
                "-c",
                dst,
                "-t",
                &secs.to_string(),
                "-P",
                &streams.to_string(),
                "-J",
            ],
        )?;
        if o.status.success() {
            out = Some(o);
            break;
        }
        let text = String::from_utf8_lossy(&o.stdout);
        if !text.contains("Connection refused") && !text.contains("unable to connect") {
            let _ = server.kill();
            return Err(Error::Other(format!(
                "iperf3 to {dst} failed: {}",
                text.trim()
            )));
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    let o = out.ok_or_else(|| Error::Other(format!("iperf3 server at {dst} did not start")))?;
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .map_err(|e| Error::Other(format!("cannot parse iperf3 output: {e}")))?;
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    let retr = v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    Ok((bps / 1e9, retr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_routed_pair_puts_side_b_behind_the_router() {
        let p = HostPair::default().via_router();
        assert_eq!(p.addrs(0).outer.to_string(), "192.0.2.1");
        assert_eq!(p.addrs(1).outer.to_string(), "203.0.113.2");
        assert_eq!(Router::address(&p, 1).0.to_string(), "203.0.113.254");
        assert_eq!(network(p.addrs(1).outer, 24), "203.0.113.0/24");
        let p6 = HostPair {
            outer: Family::V6,
            ..HostPair::default().via_router()
        };
        assert_eq!(p6.addrs(1).outer.to_string(), "2001:db8:3::2");
        assert_eq!(Router::address(&p6, 0).0.to_string(), "2001:db8:1::fe");
        assert_eq!(network(p6.addrs(1).outer, 64), "2001:db8:3::/64");
        assert_eq!(HostPair::default().addrs(1).outer.to_string(), "192.0.2.2");
    }
}
