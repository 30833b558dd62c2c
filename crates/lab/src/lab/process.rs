//! Running programs: commands that must succeed, children stopped by signal, threads inside a namespace, the tools
//! on PATH and the `netveil` binary a lab runs.

use crate::{Error, Result};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

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

pub(super) fn signal(pid: u32, sig: libc::c_int) {
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
pub(super) fn stop_child(
    child: &mut Child,
    sig: libc::c_int,
    grace: Duration,
) -> Option<ExitStatus> {
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

/// A command's line as text: the program and its arguments, separated by spaces.
pub(crate) fn command_line(cmd: &Command) -> String {
    let args: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().to_string())
        .collect();
    args.join(" ")
}

pub(crate) fn run_ok(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .map_err(Error::io(format!("cannot run {:?}", cmd.get_program())))?;
    if !out.status.success() {
        return Err(Error::command(
            command_line(cmd),
            Some(out.status),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stderr).trim(),
                String::from_utf8_lossy(&out.stdout).trim()
            ),
        ));
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
