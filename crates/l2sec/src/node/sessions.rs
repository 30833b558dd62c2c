//! The sessions with the peers: SEP started, its results installed (and the frames that waited sent), the
//! address bindings, a restarted peer's sessions dropped, the peers' status.

use std::net::Ipv4Addr;
use std::time::Instant;

use netveil_wire::PacketBuf;

use super::config::SEP_RETRY;
use super::host::Node;
use super::peer::{PeerStatus, Session, SessionStatus};
use super::report::{NodeDrop, NodeEvent, Outbound, MAX_EVENTS};
use crate::sep::{self, Established, Mac, SepError, SepEvent};
use crate::session::{RxSession, TxConfig, TxSession};

impl Node {
    /// Starts SEP with `peer` unless an exchange runs; false if the rate limit postponed it (counted, and retried
    /// by [`Node::handle_timeout`]).
    pub(super) fn start_sep(&mut self, peer: Mac, ip: Option<Ipv4Addr>, now: Instant) -> bool {
        if self.sep.in_progress(&peer) {
            return true;
        }
        let p = self.peers.entry(peer).or_default();
        // The next key id (1..=255; 0 never: it is the key id of group frames).
        let key_id = match p.cur.as_ref() {
            Some(s) if s.key_id < 255 => s.key_id + 1,
            _ => 1,
        };
        match self.sep.try_initiate(peer, ip, key_id, now) {
            Ok(()) => {
                p.last_initiate = Some(now);
                self.drain_sep(now);
                true
            }
            Err(e) => {
                if e == SepError::RateLimited {
                    self.stats.sep_error(e);
                    let t = now + SEP_RETRY;
                    self.sep_retry_at = Some(self.sep_retry_at.map_or(t, |r| r.min(t)));
                }
                false
            }
        }
    }

    /// Broadcasts the SEP ANNOUNCE of this host's epoch.
    pub(super) fn announce(&mut self, now: Instant) {
        let msg = sep::announce_message(self.cfg.mac);
        self.send_control(&msg, now);
        self.stats.announces += 1;
    }

    /// Handles what SEP produced: messages to send, sessions to install, failures.
    pub(super) fn drain_sep(&mut self, now: Instant) {
        while let Some(ev) = self.sep.poll_event() {
            match ev {
                SepEvent::Transmit { to: _, msg } => self.send_control(&msg, now),
                SepEvent::Established(est) => self.install(*est, now),
                SepEvent::Failed { peer, reason } => {
                    self.stats.sep_error(reason);
                    self.event(NodeEvent::SepFailed {
                        peer,
                        reason: reason.name(),
                    });
                    if let Some(p) = self.peers.get_mut(&peer) {
                        p.stats.failures += 1;
                        let n = p.queue.len() as u64;
                        p.stats.dropped += n;
                        for _ in 0..n {
                            self.stats.tx_drops.count(NodeDrop::NoSession);
                        }
                        p.queue.clear();
                    }
                }
            }
        }
    }

    fn install(&mut self, est: Established, now: Instant) {
        // The address the peer stated was checked when its message came; bindings may have changed since.
        if !self.binding_allows(est.peer, est.peer_ip) {
            self.stats.sep_error(SepError::IpBound);
            self.event(NodeEvent::SepFailed {
                peer: est.peer,
                reason: SepError::IpBound.name(),
            });
            return;
        }
        let tx_cfg = TxConfig {
            ethertype: self.cfg.ethertype,
            key_id: est.key_id,
            epoch: None,
            insecure_ecb: self.cfg.insecure_ecb,
            insecure_null: self.cfg.insecure_null,
            first_seq: None,
        };
        let rx_cfg = self.rx_config(est.key_id, None);
        let (Ok(tx), Ok(rx)) = (
            TxSession::new(&est.tx, tx_cfg, self.sep.rng()),
            RxSession::new(&est.rx, rx_cfg),
        ) else {
            self.stats.sep_error(SepError::NoCommonSuite);
            self.event(NodeEvent::SepFailed {
                peer: est.peer,
                reason: SepError::NoCommonSuite.name(),
            });
            return;
        };
        let margin = if est.initiator {
            self.cfg.rekey_margin
        } else {
            self.cfg.rekey_margin / 2
        };
        let expires = now + est.lifetime;
        let rekey_at = now + est.lifetime.saturating_sub(margin.min(est.lifetime / 2));
        let s = Session {
            key_id: est.key_id,
            suite: est.suite,
            tx,
            rx,
            initiator: est.initiator,
            established: now,
            expires,
            rekey_at,
        };
        self.stats.sessions_established += 1;
        let peer_epoch = self.group_rx.get(&est.peer).map_or(0, |g| g.epoch);
        let configured = self.cfg.peer_ips.contains_key(&est.peer);
        let p = self.peers.entry(est.peer).or_default();
        p.ip = Some(est.peer_ip);
        p.epoch = peer_epoch;
        if !configured && p.bound_ip != Some(est.peer_ip) {
            if let Some(old) = p.bound_ip.take() {
                if self.bound.get(&old) == Some(&est.peer) {
                    self.bound.remove(&old);
                }
            }
            p.bound_ip = Some(est.peer_ip);
            self.bound.insert(est.peer_ip, est.peer);
        }
        p.stats.sessions += 1;
        let rekey = p.cur.is_some();
        let up = NodeEvent::SessionUp {
            peer: est.peer,
            ip: est.peer_ip,
            key_id: s.key_id,
            suite: s.suite,
            initiator: s.initiator,
            rekey,
        };
        p.prev = p.cur.take().filter(|old| old.key_id != s.key_id);
        p.cur = Some(s);
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(up);
        // Send what waited for the session.
        let queued: Vec<Vec<u8>> = p.queue.drain(..).collect();
        for f in queued {
            let (h, t) = self.overhead();
            let mut b = PacketBuf::from_slice(&f, h + 16, t + 16);
            match self.outbound(&mut b, now) {
                Ok(Outbound::Send) => {
                    self.stats.tx_frames += 1;
                    self.stats.tx_bytes += b.len() as u64;
                    self.ready.push_back(b.data().to_vec());
                }
                Ok(Outbound::Queued) => {}
                Err(d) => self.stats.tx_drops.count(d),
            }
        }
    }

    /// `src` restarted (a newer epoch authenticated): its sessions and any exchange with it are dropped. True if
    /// there was something to resume (a session, queued frames).
    pub(super) fn peer_restarted(&mut self, src: Mac) -> bool {
        self.stats.peer_restarts += 1;
        self.event(NodeEvent::PeerRestarted { peer: src });
        self.sep.abort(&src);
        let Some(p) = self.peers.get_mut(&src) else {
            return false;
        };
        let had = p.cur.is_some() || p.prev.is_some() || !p.queue.is_empty();
        p.cur = None;
        p.prev = None;
        had
    }

    /// The address bound to `mac` (configured, or from SEP).
    pub(super) fn binding(&self, mac: &Mac) -> Option<Ipv4Addr> {
        if *mac == self.cfg.mac {
            return Some(self.cfg.ip);
        }
        self.cfg
            .peer_ips
            .get(mac)
            .copied()
            .or_else(|| self.peers.get(mac).and_then(|p| p.bound_ip))
    }

    /// May `mac` use (and be bound to) `ip`?
    pub(super) fn binding_allows(&self, mac: Mac, ip: Ipv4Addr) -> bool {
        if let Some(c) = self.cfg.peer_ips.get(&mac) {
            return *c == ip;
        }
        self.bound.get(&ip).is_none_or(|m| *m == mac)
    }

    /// Starts SEP with `peer` now (e.g. `netveil` warming up a session), unless one is running.
    pub fn connect(&mut self, peer: Mac, ip: Option<Ipv4Addr>, now: Instant) {
        self.start_sep(peer, ip, now);
    }

    /// The peers, for `netveil status`.
    pub fn peers(&self, now: Instant) -> Vec<PeerStatus> {
        let mut v: Vec<PeerStatus> = self
            .peers
            .iter()
            .map(|(mac, p)| PeerStatus {
                mac: *mac,
                ip: p.ip,
                bound_ip: self.binding(mac),
                epoch: self.group_rx.get(mac).map_or(p.epoch, |g| g.epoch),
                session: p.cur.as_ref().map(|s| SessionStatus {
                    key_id: s.key_id,
                    suite: s.suite,
                    age: now.saturating_duration_since(s.established),
                    expires_in: s.expires.saturating_duration_since(now),
                    initiator: s.initiator,
                    tx_seq: s.tx.last_seq(),
                    rx_seq: s.rx.top_seq(),
                }),
                previous_key_id: p.prev.as_ref().map(|s| s.key_id),
                handshaking: self.sep.in_progress(mac),
                queued: p.queue.len(),
                stats: p.stats,
            })
            .collect();
        v.sort_by_key(|p| p.mac);
        v
    }
}
