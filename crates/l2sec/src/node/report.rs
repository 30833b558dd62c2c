//! What a host tells its caller: what happened to a frame ([`Outbound`], [`Inbound`], [`NodeDrop`]), its
//! counters ([`NodeStats`]) and its events ([`NodeEvent`]).

use std::collections::HashMap;
use std::net::Ipv4Addr;

use netveil_sa::counters::DropCounters;

use crate::error::Drop;
use crate::sep::{Mac, SepError};
use crate::suite::Suite;

netveil_sa::drop_reasons! {
    /// Why a [`Node`](super::Node) dropped a frame: what the frame itself showed ([`Drop`], under its names), or
    /// what the host decided (sessions, addressing, SEP, ARP bindings). [`NodeStats`] counts these per direction.
    pub enum NodeDrop {
        /// The frame's own reasons: header, session, replay window, authentication.
        Frame(Drop),
        /// A unicast frame from (or for) a host without a session.
        NoSession => "no-session",
        /// A unicast frame for another host (the switch flooded it).
        NotForUs => "not-for-us",
        /// The frames waiting for a session exceed the queue limit.
        QueueFull => "queue-full",
        /// A SEP message was refused (the reason is counted separately).
        SepRefused => "sep-refused",
        /// A frame could not be sealed (no room, sequence space used up).
        TxFailed => "tx-failed",
        /// A group frame of an epoch older than its sender's current one (a replay from before a restart).
        OldEpoch => "old-epoch",
        /// An ARP packet whose sender hardware address is not the frame's source, or whose sender IPv4 address is
        /// not the one bound to the source (or is bound to another host).
        ArpSpoofed => "arp-spoofed",
    }
}

/// What happened to a frame from the host side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outbound {
    /// Sealed in place: send it on the wire.
    Send,
    /// Kept until the session with its destination is set up (see
    /// [`Node::poll_transmit`](super::Node::poll_transmit)).
    Queued,
}

/// What happened to a frame from the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inbound {
    /// Opened in place: give it to the host.
    Deliver,
    /// A SEP message, consumed.
    Control,
}

/// Counters of the whole host.
#[derive(Default)]
pub struct NodeStats {
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub tx_group: u64,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub rx_group: u64,
    pub sep_messages: u64,
    pub sessions_established: u64,
    /// Peers seen restarting (a newer group epoch authenticated).
    pub peer_restarts: u64,
    /// SEP ANNOUNCE messages sent.
    pub announces: u64,
    /// Group keys derived for a (sender, epoch) not heard yet, before its first frame authenticated (what a forged
    /// group frame can cost; a header that policy refuses costs none).
    pub group_key_derivations: u64,
    pub tx_drops: DropCounters<NodeDrop>,
    pub rx_drops: DropCounters<NodeDrop>,
    /// SEP messages refused and exchanges not started or failed, by reason.
    pub sep_errors: HashMap<&'static str, u64>,
}

impl NodeStats {
    pub(super) fn sep_error(&mut self, e: SepError) {
        *self.sep_errors.entry(e.name()).or_default() += 1;
    }
}

/// What happened to sessions and exchanges, for the host's log ([`Node::poll_event`](super::Node::poll_event)).
/// Key material is never part of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeEvent {
    /// A session with `peer` is up (`rekey`: it replaced one).
    SessionUp {
        peer: Mac,
        ip: Ipv4Addr,
        key_id: u8,
        suite: Suite,
        initiator: bool,
        rekey: bool,
    },
    /// A session with `peer` reached its lifetime and is gone.
    SessionExpired { peer: Mac, key_id: u8 },
    /// `peer` restarted (a newer group epoch authenticated): its sessions are dropped.
    PeerRestarted { peer: Mac },
    /// An exchange with `peer` failed or its result was refused (the reason's stable name, as in
    /// [`NodeStats::sep_errors`]).
    SepFailed { peer: Mac, reason: &'static str },
}

/// Events kept until [`Node::poll_event`](super::Node::poll_event) takes them (older ones are dropped).
pub const MAX_EVENTS: usize = 256;
