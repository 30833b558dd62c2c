//! The daemon's log: plain lines on stderr through `tracing`, which journald keeps as they are when netveil runs
//! as a service (its timestamps then come from the journal: `JOURNAL_STREAM` set), and which carry their own UTC
//! timestamp otherwise.
//!
//! ```text
//! 2026-11-24T09:12:03.412Z  INFO nv0: up (2 SAs, 2 policies); control socket /run/netveil/nv0.sock
//! 2026-11-24T09:12:09.001Z  WARN nv0: drops: rx:auth-failed 12034 in 10 s (rx:unknown-spi 3)
//! ```
//!
//! What is logged: the start summary of each engine; SA and policy changes and their lifetime events; PSP
//! association, rotation and connection; l2sec sessions up and down and SEP results; warnings for drop storms, at
//! most one per [`STORM_EVERY`] and engine. The level is the file's `log_level` (`error`, `warn`, `info`,
//! `debug`, `trace`; default `info`), which `-q` (warnings and errors only) and `-v` (debug; `-vv`: trace) on the
//! command line override.
//!
//! No key, nonce or key-derived value is ever logged, at any level: SAs are named by name and SPI.

use crate::runtime::config::ConfigError;
use std::time::{Duration, Instant};
pub use tracing::Level;

/// The level of a `log_level` value.
pub fn parse_level(v: &toml::Value) -> Result<Level, ConfigError> {
    let bad = || ConfigError {
        key: "log_level".into(),
        reason: "must be one of error, warn, info, debug, trace".into(),
    };
    match v.as_str().ok_or_else(bad)? {
        "error" => Ok(Level::ERROR),
        "warn" => Ok(Level::WARN),
        "info" => Ok(Level::INFO),
        "debug" => Ok(Level::DEBUG),
        "trace" => Ok(Level::TRACE),
        _ => Err(bad()),
    }
}

/// The level from the command line's `-q`/`-v` count over the file's: `quiet` gives `warn`, each `-v` one step more.
pub fn level(file: Option<Level>, verbose: u8, quiet: bool) -> Level {
    if quiet {
        return Level::WARN;
    }
    match verbose {
        0 => file.unwrap_or(Level::INFO),
        1 => Level::DEBUG,
        _ => Level::TRACE,
    }
}

/// Starts the log at `level` (once per process; later calls change nothing).
pub fn init(level: Level) {
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let b = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(false);
    let _ = if journald {
        b.without_time().try_init()
    } else {
        b.try_init()
    };
}

/// Drop-storm warnings: at most one per this time and engine.
pub const STORM_EVERY: Duration = Duration::from_secs(10);
/// Drops of one reason per second above which a storm is warned about.
pub const STORM_PER_SECOND: u64 = 1000;

/// Watches drop counters (by reason name) and says when some reason rises faster than [`STORM_PER_SECOND`]:
/// at most once per [`STORM_EVERY`], with every reason that rose since the last warning.
pub struct DropWatch {
    last: Vec<(String, u64)>,
    /// The counts at the last warning (or at the start), and when.
    since: Vec<(String, u64)>,
    since_at: Instant,
    /// The last look at the counters (to measure the rate).
    looked_at: Instant,
    warned_at: Option<Instant>,
}

impl DropWatch {
    pub fn new(now: Instant) -> DropWatch {
        DropWatch {
            last: Vec::new(),
            since: Vec::new(),
            since_at: now,
            looked_at: now,
            warned_at: None,
        }
    }

    /// Takes the counters now; returns the warning's text if one is due: `REASON N in S s` for each reason that
    /// rose since the last warning, the storming ones first.
    pub fn look(&mut self, now: Instant, counts: Vec<(String, u64)>) -> Option<String> {
        let dt = now.saturating_duration_since(self.looked_at).as_secs_f64();
        let before = |list: &[(String, u64)], name: &str| {
            list.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c)
        };
        let storming: Vec<String> = if self.last.is_empty() || dt <= 0.0 {
            Vec::new()
        } else {
            counts
                .iter()
                .filter(|(n, c)| {
                    (c.saturating_sub(before(&self.last, n)) as f64) / dt > STORM_PER_SECOND as f64
                })
                .map(|(n, _)| n.clone())
                .collect()
        };
        if self.since.is_empty() {
            self.since = counts.clone();
        }
        self.last = counts;
        self.looked_at = now;
        let due = self
            .warned_at
            .is_none_or(|t| now.saturating_duration_since(t) >= STORM_EVERY);
        if storming.is_empty() || !due {
            return None;
        }
        let secs = now
            .saturating_duration_since(self.since_at)
            .as_secs()
            .max(1);
        let mut rose: Vec<(bool, &String, u64)> = self
            .last
            .iter()
            .map(|(n, c)| {
                (
                    !storming.contains(n),
                    n,
                    c.saturating_sub(before(&self.since, n)),
                )
            })
            .filter(|(_, _, d)| *d > 0)
            .collect();
        rose.sort_by_key(|(calm, _, d)| (*calm, u64::MAX - d));
        let parts: Vec<String> = rose.iter().map(|(_, n, d)| format!("{n} {d}")).collect();
        let text = format!("drops in the last {secs} s: {}", parts.join(", "));
        self.since = self.last.clone();
        self.since_at = now;
        self.warned_at = Some(now);
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(list: &[(&str, u64)]) -> Vec<(String, u64)> {
        list.iter().map(|(n, c)| (n.to_string(), *c)).collect()
    }

    /// A storm is warned about at once, then at most once per STORM_EVERY, each warning with what rose since the
    /// last one; a slow rise is not a storm.
    #[test]
    fn storms_are_warned_about_at_most_once_per_interval() {
        let t0 = Instant::now();
        let mut w = DropWatch::new(t0);
        let s = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(
            w.look(s(0), c(&[("rx:auth-failed", 0), ("rx:too-old", 0)])),
            None
        );
        // 50/s: no storm.
        assert_eq!(
            w.look(s(1000), c(&[("rx:auth-failed", 50), ("rx:too-old", 0)])),
            None
        );
        // 5000 in 1 s: a storm, warned with both reasons that rose, the storming one first.
        let m = w
            .look(s(2000), c(&[("rx:auth-failed", 5050), ("rx:too-old", 7)]))
            .expect("a warning");
        assert_eq!(
            m,
            "drops in the last 2 s: rx:auth-failed 5050, rx:too-old 7"
        );
        // Still storming 1 s later: quiet until 10 s after the warning.
        for k in 3..12 {
            assert_eq!(
                w.look(
                    s(k * 1000),
                    c(&[("rx:auth-failed", 5050 + (k - 2) * 5000), ("rx:too-old", 7)])
                ),
                None,
                "{k}"
            );
        }
        let m = w
            .look(
                s(12_000),
                c(&[("rx:auth-failed", 5050 + 10 * 5000), ("rx:too-old", 7)]),
            )
            .expect("the next warning");
        assert_eq!(m, "drops in the last 10 s: rx:auth-failed 50000");
    }

    #[test]
    fn levels() {
        assert_eq!(level(None, 0, false), Level::INFO);
        assert_eq!(level(Some(Level::ERROR), 0, false), Level::ERROR);
        assert_eq!(level(Some(Level::ERROR), 1, false), Level::DEBUG);
        assert_eq!(level(Some(Level::DEBUG), 0, true), Level::WARN);
        assert_eq!(level(None, 2, false), Level::TRACE);
        assert_eq!(parse_level(&"debug".into()).unwrap(), Level::DEBUG);
        let e = parse_level(&"loud".into()).unwrap_err();
        assert_eq!(e.key, "log_level");
    }
}
