//! SEP retransmissions and rekeys, and the node's events as log lines.

use netveil_io::PacketSocket;
use netveil_l2sec::node::NodeEvent;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::{mac_str, State};

pub(super) fn timer_loop(st: &State, sock: &PacketSocket) {
    let mut extra = Vec::new();
    let mut events: Vec<NodeEvent> = Vec::with_capacity(16);
    while !st.stop.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        let ticket = {
            let Ok(mut node) = st.node.lock() else { return };
            if node.poll_timeout().is_some_and(|t| t <= now) {
                node.handle_timeout(now);
            }
            while let Some(e) = node.poll_event() {
                events.push(e);
            }
            st.order.take_ready(&mut node, &mut extra)
        };
        if let Some(t) = ticket {
            st.order.send(t, sock, &mut extra, &st.stop);
        }
        for e in events.drain(..) {
            log_event(&st.cfg.interface, &e);
        }
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
