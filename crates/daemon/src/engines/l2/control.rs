//! `netveil status`: the engine's typed status.

use crate::runtime::engine::Control;
use netveil_control::status::{Drops, L2Counters, L2Peer, L2Session, L2Status};
use netveil_l2sec::node::PeerStatus;
use serde_json::Value;
use std::time::Instant;

use super::setup::nft_clear_drops;
use super::{mac_str, State};

fn peer_status(p: &PeerStatus) -> L2Peer {
    L2Peer {
        mac: mac_str(&p.mac),
        ip: p.ip.map(|i| i.to_string()),
        bound_ip: p.bound_ip.map(|i| i.to_string()),
        epoch: p.epoch,
        session: p.session.map(|s| L2Session {
            key_id: s.key_id,
            suite: s.suite.name().to_string(),
            age_seconds: s.age.as_secs(),
            expires_in_seconds: s.expires_in.as_secs(),
            initiator: s.initiator,
            tx_seq: s.tx_seq,
            rx_seq: s.rx_seq,
        }),
        previous_key_id: p.previous_key_id,
        handshaking: p.handshaking,
        queued: p.queued as u64,
        tx_frames: p.stats.tx_frames,
        tx_bytes: p.stats.tx_bytes,
        rx_frames: p.stats.rx_frames,
        rx_bytes: p.stats.rx_bytes,
        sessions: p.stats.sessions,
        failures: p.stats.failures,
        dropped: p.stats.dropped,
    }
}

/// The L2 engine's status (`None` if the node's lock is poisoned: a data-plane thread panicked).
pub(super) fn status(st: &State) -> Option<L2Status> {
    let now = Instant::now();
    // (The nft process runs before the node is taken: the data plane never waits for it.)
    let (clear_in, clear_out) = nft_clear_drops(&st.nft);
    let node = st.node.lock().ok()?;
    let s = node.stats();
    let drops = |d: &netveil_sa::counters::DropCounters<netveil_l2sec::NodeDrop>| -> Drops {
        d.snapshot()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| (k.to_string(), n))
            .collect()
    };
    let c = &st.cfg;
    Some(L2Status {
        interface: c.interface.clone(),
        tap: c.tap.clone(),
        mac: mac_str(&st.mac),
        address: format!("{}/{}", st.ip.0, st.ip.1),
        mtu: st.mtu.into(),
        ethertype: format!("0x{:04x}", c.ethertype),
        group_suite: c.group_suite.name().to_string(),
        suites: c.suites.iter().map(|s| s.name().to_string()).collect(),
        dh_groups: c.groups.iter().map(|g| g.name().to_string()).collect(),
        epoch: node.epoch(),
        state_dir: c.state_dir.display().to_string(),
        signing: c.signing_key.is_some(),
        require_signatures: c.require_signatures,
        uptime_seconds: st.started.elapsed().as_secs(),
        group_senders: node.group_senders() as u64,
        peers: node.peers(now).iter().map(peer_status).collect(),
        counters: L2Counters {
            tx_frames: s.tx_frames,
            tx_bytes: s.tx_bytes,
            tx_group: s.tx_group,
            rx_frames: s.rx_frames,
            rx_bytes: s.rx_bytes,
            rx_group: s.rx_group,
            sep_messages: s.sep_messages,
            sessions_established: s.sessions_established,
            peer_restarts: s.peer_restarts,
            announces: s.announces,
            group_key_derivations: s.group_key_derivations,
            sep_rate_limited: s.sep_errors.get("sep-rate-limited").copied().unwrap_or(0),
            clear_dropped_in: clear_in,
            clear_dropped_out: clear_out,
        },
        tx_drops: drops(&s.tx_drops),
        rx_drops: drops(&s.rx_drops),
        sep_errors: s
            .sep_errors
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
    })
}

impl Control for State {
    fn answer(&self, _req: &netveil_control::Request) -> Option<Value> {
        None
    }

    fn status(&self, status: &mut netveil_control::Status) {
        status.l2sec = self::status(self);
    }
}
