//! SEP retransmissions and rekeys, and the node's events as log lines.

use netveil_io::PacketSocket;
use netveil_l2sec::node::NodeEvent;
use netveil_wire::PacketBuf;
use std::time::{Duration, Instant};

use super::{mac_str, State};

/// How often the timers are looked at (SEP retransmissions are a second or more apart).
pub(super) const TICK: Duration = Duration::from_millis(20);

/// The node's timers, run by the thread that waits on the port (no thread of their own).
pub(super) struct Timers {
    next: Instant,
    ready: Vec<PacketBuf>,
    events: Vec<NodeEvent>,
}

impl Timers {
    pub(super) fn new(now: Instant) -> Timers {
        Timers {
            next: now + TICK,
            ready: Vec::new(),
            events: Vec::with_capacity(16),
        }
    }

    /// How long the thread may wait for frames before the timers are due (milliseconds, for `poll`).
    pub(super) fn wait_ms(&self, now: Instant) -> i32 {
        self.next.saturating_duration_since(now).as_millis() as i32 + 1
    }

    /// Runs the node's timers if a tick is due: retransmissions and rekeys (sent after the lock, in order) and
    /// the node's events (logged after the lock). `None` if the engine must stop.
    pub(super) fn run(&mut self, st: &State, sock: &PacketSocket, now: Instant) -> Option<()> {
        if now < self.next {
            return Some(());
        }
        self.next = now + TICK;
        let ticket = {
            let Ok(mut node) = st.node.lock() else {
                return None;
            };
            if node.poll_timeout().is_some_and(|t| t <= now) {
                node.handle_timeout(now);
            }
            while let Some(e) = node.poll_event() {
                self.events.push(e);
            }
            st.order.take_ready(&mut node, &mut self.ready)
        };
        if let Some(t) = ticket {
            st.order.send(t, sock, &mut self.ready, &st.stop);
        }
        for e in self.events.drain(..) {
            log_event(&st.cfg.interface, &e);
        }
        Some(())
    }
}

/// One log line per node event (no key material: the key id and suite only).
fn log_event(port: &str, e: &NodeEvent) {
    match *e {
        NodeEvent::SessionUp {
            peer,
            ip,
            key_id,
            suite,
            initiator,
            rekey,
        } => tracing::info!(
            "{port}: session {} with {} ({ip}): key id {key_id}, {}, {}",
            if rekey { "rekeyed" } else { "up" },
            mac_str(&peer),
            suite.name(),
            if initiator {
                "we initiated"
            } else {
                "the peer initiated"
            }
        ),
        NodeEvent::SessionExpired { peer, key_id } => tracing::info!(
            "{port}: session with {} (key id {key_id}) expired",
            mac_str(&peer)
        ),
        NodeEvent::PeerRestarted { peer } => tracing::info!(
            "{port}: {} restarted: its sessions are set up again",
            mac_str(&peer)
        ),
        NodeEvent::SepFailed { peer, reason } => {
            tracing::warn!("{port}: SEP with {} failed: {reason}", mac_str(&peer))
        }
    }
}
