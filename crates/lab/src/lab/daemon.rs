//! [`Daemon`]: a running `netveil up` in a namespace, asked over its control socket and through the CLI.

use super::process::{run_ok, stop_child};
use crate::{Error, Result};
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

/// A running `netveil up`, stopped (SIGTERM, then SIGKILL) on drop.
pub struct Daemon {
    pub(super) child: Option<Child>,
    pub ns: String,
    pub name: String,
    pub socket: PathBuf,
    pub log: PathBuf,
    pub(super) netveil: PathBuf,
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
        serde_json::from_str(&buf).map_err(|e| {
            Error::output(
                format!("{req} on the control socket"),
                format!("bad answer: {e}"),
            )
        })
    }

    /// `netveil status --json` (through the CLI).
    pub fn status_json(&self) -> Result<Value> {
        let out = self.netveil_cli(&["status", "--json"])?;
        serde_json::from_str(&out)
            .map_err(|e| Error::output("netveil status --json", format!("bad JSON: {e}")))
    }

    /// `netveil status` (the human-readable table).
    pub fn status_text(&self) -> Result<String> {
        self.netveil_cli(&["status"])
    }

    /// `netveil keys --wireshark DIR`.
    pub fn keys_wireshark(&self, dir: &Path) -> Result<()> {
        let d = dir.to_str().ok_or_else(|| Error::not_utf8(dir))?;
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
