//! The labs of this process that exist now, and their teardown: when a lab is dropped and, when a signal ends
//! the process first, through [`remove_all_and_exit`].

use super::process::signal;
use crate::{Error, Result};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Where labs keep their scratch directories: not in the system's temporary directory, since the daemons' state
/// directories inside must be on a path that only root can write (a sticky, world-writable `/tmp` is refused).
pub const LAB_BASE: &str = "/var/lib/netveil-lab";

/// The namespaces and directories of this process's labs that exist now: what [`remove_all_and_exit`] tears down when a
/// signal ends the process before the labs are dropped.
static LIVE: std::sync::Mutex<(Vec<String>, Vec<PathBuf>)> =
    std::sync::Mutex::new((Vec::new(), Vec::new()));

pub(super) fn live() -> std::sync::MutexGuard<'static, (Vec<String>, Vec<PathBuf>)> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kills what runs in `ns` (SIGTERM, then SIGKILL) and deletes it.
pub(super) fn remove_namespace(ns: &str) {
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
