//! One protected host: its group sender, its unicast sessions (one per peer, selected by the peer's MAC
//! address: the session key mapping), the SEP exchanges, and the decision for every frame. Sans-I/O: the caller
//! reads frames from the host side (a TAP device) and the wire (an AF_PACKET socket), passes them in with the
//! time, and sends what comes out.
//!
//! # Frames
//!
//! - **Group frames** (destination MAC with the group bit: broadcast, multicast; ARP requests among them) are
//!   sealed with this host's group sender keys, derived from the network's group secret (see [`crate::keys`]),
//!   and signed when the host has a signing key. Version 1 group frames carry the sender's 64-bit *epoch*
//!   ([`NodeConfig::epoch`]: strictly increasing across the host's restarts, persisted by the caller, e.g.
//!   `max(Unix time in µs, last + 1)`) in an 8-byte header field (EP flag), and key id 0; the epoch enters the
//!   key derivation (context `"group" ‖ MAC ‖ epoch (8 bytes BE)`), so a restarted sender never repeats a
//!   (key, nonce) pair. Version 0 (the thesis' format) has no epoch: its group keys are
//!   [`SessionKeys::group_sender`](crate::SessionKeys::group_sender)'s, static per sender, and a sender restarted
//!   under the same group secret repeats CBC IVs and is refused as replaying until the secret changes. Replace the
//!   group secret when a version-0 host restarts.
//! - **Unicast frames** use the session with the destination. A frame for a peer without a session is kept
//!   (up to [`NodeConfig::queue_limit`] frames per peer) while SEP sets one up, and sent when it is
//!   established; dropped if SEP fails. The peer's IPv4 address, when the frame shows it (IPv4 destination,
//!   ARP target), goes into the SEP request.
//! - **SEP messages** travel as group frames to the broadcast address with the l2sec EtherType as the inner
//!   EtherType; every host opens them with the sender's group keys, and only the addressed host answers. When it
//!   starts, and again 1 and 3 seconds later, a version-1 host broadcasts a SEP ANNOUNCE: an authenticated group
//!   frame of its new epoch, from which the others learn of the restart at once.
//!
//! # Receiving group frames
//!
//! Per sender MAC the host keeps the sender's current epoch and one replay window. A frame of an older epoch is
//! dropped (`old-epoch`) before any cryptography; one of the current epoch goes through the window; one of a
//! newer epoch (or from a sender not heard yet) is checked with keys derived on the spot (AEAD tag, then the
//! signature when signed) and, only if it authenticated, its epoch and a new window replace the sender's state:
//! no per-sender state exists for a frame that did not authenticate. So recorded frames from before and after a
//! restart of a sender, replayed in any order, are all refused. At most [`MAX_GROUP_SENDERS`] senders are
//! remembered (the least recently heard is forgotten; a forgotten sender's old epochs are recognised again from
//! the peer state, see below, or not at all if the host has no session with it).
//!
//! A newer epoch that authenticates means the sender restarted: its unicast sessions here are dropped (their
//! keys are gone on the other side), an exchange with it in progress is abandoned, and if there was a session or
//! queued traffic, SEP starts with it again (unless the frame itself started one).
//!
//! # Receiving unicast frames
//!
//! A unicast frame for this host is opened with the session of its source MAC: in version 1 the one whose key id
//! the frame carries (the current session or, during a rekey, the previous one); in version 0 the current
//! session, then the previous one. A unicast frame from a host without a session (`no-session`), or with a key id
//! of none of its sessions (`unknown-key-id`), is dropped and counted, and starts nothing: it creates no peer
//! state and no exchange (anyone can forge its clear header). Frames for other hosts (a switch flooding) are
//! dropped as `not-for-us`.
//!
//! # SEP triggers
//!
//! An exchange starts only for (a) outbound traffic without a session, (b) a rekey, (c) an authenticated new
//! epoch of a peer this host had a session or queued traffic with (learnt at once from its ANNOUNCE), and (d)
//! [`Node::connect`].
//! Exchanges started (as initiator, and accepted as responder) share one token bucket of
//! [`NodeConfig::sep_per_second`] (burst as many); an initiation that finds no token is retried by
//! [`Node::handle_timeout`], a refused request is counted (`sep-rate-limited`).
//!
//! # Address bindings and ARP
//!
//! The host binds IPv4 addresses to MAC addresses: its own, the configured ones ([`NodeConfig::peer_ips`]), and
//! the address a peer stated in an established SEP exchange (kept while the host has state for the peer). An
//! address is bound to one MAC only: a SEP message stating an address bound to another MAC (or another address
//! than a peer's configured one) is refused (`sep-ip-bound`). A received ARP packet (request or reply, group or
//! unicast) is dropped (`arp-spoofed`) if its sender hardware address is not the frame's source MAC, if its
//! sender IPv4 address is bound to another MAC, or if the source has a binding and claims another address. A
//! member without a binding yet may claim any address that is not bound (so that a host's first ARP works before
//! any session); configure `ip` for every peer to close that gap. ARP probes (sender address 0.0.0.0) claim
//! nothing and pass. With signatures, a member can thus claim only its own address; without them any member can
//! forge any member's group frames, source MAC included.
//!
//! # Sessions
//!
//! A session lives for the lifetime agreed in SEP stage 3. The host that initiated it starts a new exchange
//! `rekey_margin` before the end (the responder too, half a margin before the end, in case the initiator is
//! gone); the new session replaces the current one, which stays as the previous session (receive only) until it
//! expires. An expired session is removed; the next frame starts SEP again.

// layers: frames, sessions > host > config, peer, report
mod config;
mod frames;
mod host;
mod peer;
mod report;
mod sessions;

pub use config::{NodeConfig, BROADCAST, MAX_GROUP_SENDERS, MAX_PEERS};
pub use host::Node;
pub use peer::{PeerStats, PeerStatus, SessionStatus};
pub use report::{Inbound, NodeDrop, NodeEvent, NodeStats, Outbound, MAX_EVENTS};
