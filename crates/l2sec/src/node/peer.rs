//! The state a host keeps per peer (its sessions, queued frames, address binding, counters) and per group
//! sender (epoch and replay window), and a peer as `netveil status` shows it.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use crate::sep::Mac;
use crate::session::{RxSession, TxSession};
use crate::suite::Suite;

pub(super) struct Session {
    pub(super) key_id: u8,
    pub(super) suite: Suite,
    pub(super) tx: TxSession,
    pub(super) rx: RxSession,
    pub(super) initiator: bool,
    pub(super) established: Instant,
    pub(super) expires: Instant,
    pub(super) rekey_at: Instant,
}

#[derive(Default)]
pub(super) struct Peer {
    pub(super) cur: Option<Session>,
    pub(super) prev: Option<Session>,
    pub(super) queue: VecDeque<Vec<u8>>,
    /// The address SEP requests target (from the frames for the peer, then from SEP).
    pub(super) ip: Option<Ipv4Addr>,
    /// The address bound to the peer by an established exchange.
    pub(super) bound_ip: Option<Ipv4Addr>,
    /// The peer's group epoch when the current session was established (0: unknown).
    pub(super) epoch: u64,
    pub(super) last_initiate: Option<Instant>,
    pub(super) stats: PeerStats,
}

/// The state of one group sender: its current epoch and the replay window of that epoch.
pub(super) struct GroupSender {
    pub(super) epoch: u64,
    pub(super) rx: RxSession,
    pub(super) seen: Instant,
}

/// Counters of one peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerStats {
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    /// Sessions established with this peer (rekeys included).
    pub sessions: u64,
    /// SEP exchanges that failed.
    pub failures: u64,
    /// Frames dropped because SEP failed or the queue was full.
    pub dropped: u64,
}

/// A peer as `netveil status` shows it.
#[derive(Debug, Clone)]
pub struct PeerStatus {
    pub mac: Mac,
    pub ip: Option<Ipv4Addr>,
    /// The address bound to the peer (configured, or from SEP).
    pub bound_ip: Option<Ipv4Addr>,
    /// The peer's current group epoch, as far as this host knows (0: not heard, or version 0).
    pub epoch: u64,
    /// The current session: key id, suite, age, time left, whether this host initiated it.
    pub session: Option<SessionStatus>,
    /// A previous session still accepted (during a rekey).
    pub previous_key_id: Option<u8>,
    pub handshaking: bool,
    pub queued: usize,
    pub stats: PeerStats,
}

#[derive(Debug, Clone, Copy)]
pub struct SessionStatus {
    pub key_id: u8,
    pub suite: Suite,
    pub age: Duration,
    pub expires_in: Duration,
    pub initiator: bool,
    pub tx_seq: u64,
    pub rx_seq: u64,
}
