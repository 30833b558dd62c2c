//! [`Node`]: one protected host, built, asked, and driven by time (rekeys, expiries, announcements).

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::Instant;

use netveil_crypto::rand::Rng;

use super::config::{group_keys, NodeConfig, ANNOUNCE_AGAIN, REKEY_RETRY};
use super::peer::{GroupSender, Peer};
use super::report::{NodeEvent, NodeStats, MAX_EVENTS};
use crate::error::ConfigError;
use crate::header::Version;
use crate::keys::SessionKeys;
use crate::sep::{Mac, Sep, SepConfig};
use crate::session::{TxConfig, TxSession};

/// One protected host (see the module documentation).
pub struct Node {
    pub(super) cfg: NodeConfig,
    pub(super) unix_base: (Instant, u64),
    pub(super) epoch: u64,
    pub(super) group_tx: TxSession,
    pub(super) group_rx: HashMap<Mac, GroupSender>,
    pub(super) peers: HashMap<Mac, Peer>,
    /// Address -> MAC: this host's, the configured and the SEP bindings.
    pub(super) bound: HashMap<Ipv4Addr, Mac>,
    pub(super) sep: Sep,
    pub(super) ready: VecDeque<Vec<u8>>,
    /// When to announce the epoch again.
    pub(super) announce_at: VecDeque<Instant>,
    /// When to retry initiations the rate limit postponed.
    pub(super) sep_retry_at: Option<Instant>,
    pub(super) stats: NodeStats,
    pub(super) events: VecDeque<NodeEvent>,
}

impl Node {
    /// A host, started at `now` (monotonic) which is `unix_now` seconds of Unix time (for timestamps). A version-1
    /// host queues the ANNOUNCE of its epoch (see [`Node::poll_transmit`]). `rng` (the OS generator in the daemon,
    /// a seeded one in tests) draws first sequence numbers and SEP's ids, nonces and private keys.
    pub fn new(
        cfg: NodeConfig,
        now: Instant,
        unix_now: u64,
        mut rng: Box<dyn Rng>,
    ) -> Result<Node, ConfigError> {
        let epoch = match cfg.group_suite.version() {
            Version::V0 => 0,
            Version::V1 if cfg.epoch == 0 => return Err(ConfigError::ZeroEpoch),
            Version::V1 => cfg.epoch,
        };
        let keys = group_keys(&cfg, cfg.mac, epoch)?;
        let group_tx = TxSession::new(
            &keys,
            TxConfig {
                ethertype: cfg.ethertype,
                key_id: 0,
                epoch: Some(epoch),
                insecure_ecb: cfg.insecure_ecb,
                insecure_null: cfg.insecure_null,
                first_seq: None,
            },
            &mut *rng,
        )?;
        // Check that every session suite builds (the ECB and null switches) before anything runs.
        for s in &cfg.suites {
            let k = SessionKeys::derive(*s, &[0u8; 32], b"check")?;
            TxSession::new(
                &k,
                TxConfig {
                    insecure_ecb: cfg.insecure_ecb,
                    insecure_null: cfg.insecure_null,
                    ..TxConfig::default()
                },
                &mut *rng,
            )?;
        }
        let mut bound = HashMap::new();
        bound.insert(cfg.ip, cfg.mac);
        for (mac, ip) in &cfg.peer_ips {
            if bound.insert(*ip, *mac).is_some_and(|m| m != *mac) {
                return Err(ConfigError::IpBoundTwice(*ip));
            }
        }
        let sep = Sep::new(
            SepConfig {
                mac: cfg.mac,
                ip: cfg.ip,
                prefix_len: cfg.prefix_len,
                suites: cfg.suites.clone(),
                groups: cfg.groups.clone(),
                lifetime: cfg.lifetime,
                retransmit: cfg.retransmit,
                attempts: cfg.attempts,
                max_starts_per_second: cfg.sep_per_second,
            },
            rng,
        );
        let v1 = cfg.group_suite.version() == Version::V1;
        let mut node = Node {
            cfg,
            unix_base: (now, unix_now),
            epoch,
            group_tx,
            group_rx: HashMap::new(),
            peers: HashMap::new(),
            bound,
            sep,
            ready: VecDeque::new(),
            announce_at: VecDeque::new(),
            sep_retry_at: None,
            events: VecDeque::new(),
            stats: NodeStats::default(),
        };
        if v1 {
            node.announce(now);
            node.announce_at = ANNOUNCE_AGAIN.iter().map(|d| now + *d).collect();
        }
        Ok(node)
    }

    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    pub fn stats(&self) -> &NodeStats {
        &self.stats
    }

    /// The epoch of this host's group frames (version 1; 0 in version 0).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Group senders currently known.
    pub fn group_senders(&self) -> usize {
        self.group_rx.len()
    }

    /// The epoch this host knows for the group sender `mac` (`None`: not heard, or forgotten).
    pub fn sender_epoch(&self, mac: &Mac) -> Option<u64> {
        self.group_rx.get(mac).map(|g| g.epoch)
    }

    /// The MAC address an IPv4 address is bound to (this host's own included).
    pub fn bound_mac(&self, ip: Ipv4Addr) -> Option<Mac> {
        self.bound.get(&ip).copied()
    }

    pub(super) fn event(&mut self, e: NodeEvent) {
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(e);
    }

    /// The next event (sessions up and gone, peer restarts, failed exchanges), oldest first.
    pub fn poll_event(&mut self) -> Option<NodeEvent> {
        self.events.pop_front()
    }

    /// The next frame to send on the wire that did not come from [`Node::handle_outbound`] (SEP messages, frames
    /// that waited for a session).
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.ready.pop_front()
    }

    /// Timers: SEP retransmissions, rekeys, expiries, initiations the rate limit postponed, announcements.
    pub fn handle_timeout(&mut self, now: Instant) {
        while self.announce_at.front().is_some_and(|t| *t <= now) {
            self.announce_at.pop_front();
            self.announce(now);
        }
        self.sep.handle_timeout(now);
        self.drain_sep(now);
        let mut start = Vec::new();
        let retry = self.sep_retry_at.is_some_and(|t| t <= now);
        if retry {
            self.sep_retry_at = None;
        }
        let mut expired = Vec::new();
        for (mac, p) in self.peers.iter_mut() {
            for s in [&mut p.prev, &mut p.cur] {
                if let Some(k) = s.as_ref().filter(|s| now >= s.expires).map(|s| s.key_id) {
                    *s = None;
                    expired.push(NodeEvent::SessionExpired {
                        peer: *mac,
                        key_id: k,
                    });
                }
            }
            if self.sep.in_progress(mac) {
                continue;
            }
            if let Some(s) = &p.cur {
                // Due, and not tried since it became due (or the last try is a while ago: it failed).
                let tried = matches!(p.last_initiate,
                    Some(t) if t >= s.rekey_at && now.saturating_duration_since(t) < REKEY_RETRY);
                if now >= s.rekey_at && !tried {
                    start.push((*mac, p.ip));
                }
            } else if retry && !p.queue.is_empty() {
                start.push((*mac, p.ip));
            }
        }
        expired.sort_unstable_by_key(|e| match e {
            NodeEvent::SessionExpired { peer, key_id } => (*peer, *key_id),
            _ => ([0; 6], 0),
        });
        for e in expired {
            self.event(e);
        }
        start.sort_unstable_by_key(|(m, _)| *m);
        for (mac, ip) in start {
            self.start_sep(mac, ip, now);
        }
        self.drain_sep(now);
        // Forget idle peers without sessions or queues (and the addresses SEP bound to them).
        let gone: Vec<Mac> = self
            .peers
            .iter()
            .filter(|(m, p)| {
                p.cur.is_none()
                    && p.prev.is_none()
                    && p.queue.is_empty()
                    && !self.sep.in_progress(m)
            })
            .map(|(m, _)| *m)
            .collect();
        for m in gone {
            if let Some(ip) = self.peers.remove(&m).and_then(|p| p.bound_ip) {
                if self.bound.get(&ip) == Some(&m) {
                    self.bound.remove(&ip);
                }
            }
        }
    }

    /// When [`Node::handle_timeout`] should run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.sep.poll_timeout();
        let mut at = |x: Instant| t = Some(t.map_or(x, |t: Instant| t.min(x)));
        for p in self.peers.values() {
            for s in [&p.cur, &p.prev].into_iter().flatten() {
                at(s.expires);
                at(s.rekey_at);
            }
        }
        if let Some(x) = self.announce_at.front() {
            at(*x);
        }
        if let Some(x) = self.sep_retry_at {
            at(x);
        }
        t
    }
}
