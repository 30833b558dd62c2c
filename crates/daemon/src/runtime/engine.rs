//! What every engine plugs into: the [`Engine`] and [`Control`] traits the runtime drives, and the setup helpers
//! they share (commands recorded in an [`Undo`], nftables tables and their counters).
//!
//! An engine (the IP engine in [`crate::engines::ip`], the L2 engine in [`crate::engines::l2`]) is set up by its own `start`, which
//! records every system change in the runtime's one [`Undo`] and starts the engine's data-plane threads. The
//! runtime ([`crate::runtime::lifecycle`]) then calls [`Engine::tick`] every 20 ms on its own thread until a signal, a `stop`
//! request or the end of a data-plane thread, and [`Engine::stop`] at the end. Control requests go to each
//! engine's [`Control`] in turn.

use crate::{Error, Result};
use serde_json::Value;

/// A running engine, as the runtime drives it.
pub trait Engine: Send {
    /// Housekeeping on the runtime's thread, every 20 ms (socket filters, sequence reservations, storms). `false`
    /// when one of the engine's data-plane threads has ended: the runtime stops everything.
    fn tick(&mut self) -> bool;
    /// Stops the engine's threads and writes what must persist. `down`: the user asked for everything to be removed
    /// (`netveil down`), fail-closed filters included; otherwise the engine decides what stays in `undo`.
    fn stop(self: Box<Self>, undo: &mut Undo, down: bool);
    /// A key-exchange driver's answers on the control socket, if it has any (asked once, after it started; the
    /// engines give theirs through their start).
    fn control(&self) -> Option<std::sync::Arc<dyn Control>> {
        None
    }
    /// SIGHUP: read what the engine's configuration points to (rule files) again and put it in force; what it
    /// did, or why nothing changed. `None`: nothing to reload.
    fn reload(&mut self) -> Option<std::result::Result<String, String>> {
        None
    }
}

/// An engine's answers on the control socket.
pub trait Control: Send + Sync {
    /// The answer to `req`, or `None` if the request is not this engine's.
    fn answer(&self, req: &netveil_control::Request) -> Option<Value>;
    /// Fills this engine's part of the status (`netveil status --json`).
    fn status(&self, status: &mut netveil_control::Status);
}

/// System changes made during setup, undone in reverse order on drop.
#[derive(Default)]
pub struct Undo {
    cmds: Vec<Vec<String>>,
}

impl Undo {
    pub fn push(&mut self, cmd: &[&str]) {
        self.cmds.push(cmd.iter().map(|s| s.to_string()).collect());
    }

    /// Forgets `cmd`: what it would undo stays.
    pub fn keep(&mut self, cmd: &[&str]) {
        self.cmds.retain(|c| !c.iter().eq(cmd.iter()));
    }
}

impl core::ops::Drop for Undo {
    fn drop(&mut self) {
        for c in self.cmds.iter().rev() {
            let _ = std::process::Command::new(&c[0])
                .args(&c[1..])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// `netveil down`'s first step: if a daemon answers on `sock`, asks it to stop (removing its setup) and waits, at
/// most 15 s, until its socket is gone. Returns when it was asked (`None`: none was running).
pub fn stop_running(sock: &std::path::Path) -> Result<Option<std::time::Instant>> {
    if std::os::unix::net::UnixStream::connect(sock).is_err() {
        return Ok(None);
    }
    netveil_control::request_stop(sock)?;
    let t = std::time::Instant::now();
    while std::os::unix::net::UnixStream::connect(sock).is_ok() {
        if t.elapsed() > std::time::Duration::from_secs(15) {
            return Err(Error::NotStopped {
                socket: sock.to_path_buf(),
                seconds: 15,
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(Some(t))
}

/// Runs a command; its failure (with what it printed on stderr) is an error.
pub fn run(cmd: &[&str]) -> Result<()> {
    let out = std::process::Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .map_err(Error::io(format!("cannot run {}", cmd[0])))?;
    if !out.status.success() {
        return Err(Error::Command {
            command: cmd.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// Runs a command with `input` on its standard input.
pub fn run_stdin(cmd: &[&str], input: &str) -> Result<()> {
    use std::io::Write;
    let mut child = std::process::Command::new(cmd[0])
        .args(&cmd[1..])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(Error::io(format!("cannot run {}", cmd[0])))?;
    child
        .stdin
        .take()
        .map(|mut s| s.write_all(input.as_bytes()));
    let out = child
        .wait_with_output()
        .map_err(Error::io(cmd[0].to_string()))?;
    if !out.status.success() {
        return Err(Error::Command {
            command: cmd.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// The longest string [`nft_quote`] passes (nftables comments hold at most 128 bytes).
pub const NFT_STRING_MAX: usize = 120;

/// Every string value in nftables rule text (comments, interface names) goes through here: a quoted string of
/// `[A-Za-z0-9._-]`, spaces and parentheses only, any other character replaced by `_`, at most [`NFT_STRING_MAX`]
/// bytes. Nothing a value holds can end the string (`"`), the statement (`;`), the rule (a newline) or a block
/// (`}`), nor turn an interface match into a wildcard (`*`): the ruleset's structure never depends on a value.
/// Names are validated before they get here ([`crate::runtime::names`]), and for them this changes nothing.
pub fn nft_quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len().min(NFT_STRING_MAX) + 2);
    q.push('"');
    q.extend(s.chars().take(NFT_STRING_MAX).map(|c| {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ' ' | '(' | ')') {
            c
        } else {
            '_'
        }
    }));
    q.push('"');
    q
}

/// An nftables identifier (a table's name, written unquoted) made of `name`: `[A-Za-z0-9_]`, any other character
/// replaced by `_`.
pub fn nft_ident(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Installs (or replaces, in one transaction, so that nothing passes in between) the interface's table.
pub fn nft_install(table: &str, text: &str) -> Result<()> {
    run_stdin(
        &["nft", "-f", "-"],
        &format!("table inet {table} {{}}\ndelete table inet {table}\n{text}"),
    )
}

/// Removes the table `inet NAME` if it exists, in one transaction that cannot fail for its absence (declaring it
/// first): a daemon that is stopping may remove it at the same moment (`netveil down` raced it: `No such file`).
pub fn nft_remove(table: &str) -> Result<()> {
    run_stdin(
        &["nft", "-f", "-"],
        &format!("table inet {table} {{}}\ndelete table inet {table}\n"),
    )
}

/// Packets dropped by the nftables rules of `chain` (input: clear traffic covered by an inbound protect policy;
/// output/forward: covered traffic that tried to leave outside the TUN).
pub fn nft_drops(table: &str, chain: &str) -> u64 {
    let out = match std::process::Command::new("nft")
        .args(["-j", "list", "table", "inet", table])
        .output()
    {
        Ok(o) if o.status.success() => o.stdout,
        _ => return 0,
    };
    let v: serde_json::Value = match serde_json::from_slice(&out) {
        Ok(v) => v,
        Err(_) => return 0,
    };
    let mut total = 0;
    if let Some(items) = v["nftables"].as_array() {
        for it in items {
            if it["rule"]["chain"].as_str() != Some(chain) {
                continue;
            }
            if let Some(exprs) = it["rule"]["expr"].as_array() {
                for e in exprs {
                    total += e["counter"]["packets"].as_u64().unwrap_or(0);
                }
            }
        }
    }
    total
}

/// Whether the table `inet NAME` exists.
pub fn nft_table_exists(table: &str) -> bool {
    std::process::Command::new("nft")
        .args(["list", "table", "inet", table])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Removes every `not fwmark M table M pref 1000` rule (both families), as `netveil up` installs them.
pub fn remove_fwmark_rules(m: &str) {
    for fam in ["-4", "-6"] {
        for _ in 0..16 {
            if run(&[
                "ip", fam, "rule", "del", "not", "fwmark", m, "table", m, "pref", "1000",
            ])
            .is_err()
            {
                break;
            }
        }
    }
}
