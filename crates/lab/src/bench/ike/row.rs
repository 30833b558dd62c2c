//! One row of the `--ike` table, and the sizes of a run.

use crate::bench::ping;

/// One row of the table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct IkeRow {
    /// `netveil ike psk-x25519`, `strongswan ike psk-x25519`, ...
    pub row: String,
    /// Sequential setups measured, and their median and 99th percentile (nearest rank), ms.
    pub setups: usize,
    pub median_ms: f64,
    pub p99_ms: f64,
    /// Concurrent setups, how many in flight, and the rate.
    pub handshakes: usize,
    pub window: usize,
    pub handshakes_per_s: f64,
    /// The responder's VmRSS (KiB) before and with `handshakes` IKE SAs + children established.
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    pub bytes_per_sa: f64,
    /// IKE SAs with their child that the responder holds at the end (its own count).
    pub responder_sas: Option<usize>,
    /// In-process rows: the responder's share of one setup, ms (median).
    pub responder_ms: Option<f64>,
    /// netveil rows: the responder's CHILD_SA installs into its IP engine (median ms, from its log), part of
    /// every setup and handshake.
    pub install_ms: Option<f64>,
    /// Why the row has no figures.
    pub cannot_run: Option<String>,
    /// What failed after the sequential setups (the row keeps their figures).
    pub note: Option<String>,
}

impl IkeRow {
    pub(super) fn empty(row: String) -> IkeRow {
        IkeRow {
            row,
            setups: 0,
            median_ms: f64::NAN,
            p99_ms: f64::NAN,
            handshakes: 0,
            window: 0,
            handshakes_per_s: f64::NAN,
            rss_before_kib: 0,
            rss_after_kib: 0,
            bytes_per_sa: f64::NAN,
            responder_sas: None,
            responder_ms: None,
            install_ms: None,
            cannot_run: None,
            note: None,
        }
    }

    pub(super) fn setups(&mut self, ms: &[f64]) {
        self.setups = ms.len();
        self.median_ms = ping::median(ms);
        self.p99_ms = ping::percentile(ms, 99.0);
    }

    pub(super) fn memory(&mut self, before: u64, after: u64) {
        self.rss_before_kib = before;
        self.rss_after_kib = after;
        self.bytes_per_sa =
            (after as f64 - before as f64) * 1024.0 / (self.handshakes.max(1) as f64);
    }
}

/// The sizes of a run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sizes {
    pub(super) setups: usize,
    pub(super) handshakes: usize,
    pub(super) window: usize,
}
