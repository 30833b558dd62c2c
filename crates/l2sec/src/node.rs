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
//!   [`SessionKeys::group_sender`]'s, static per sender, and a sender restarted under the same group secret
//!   repeats CBC IVs and is refused as replaying until the secret changes. Replace the group secret when a
//!   version-0 host restarts.
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

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use ed25519_dalek::{SigningKey, VerifyingKey};
use netveil_crypto::rand::Rng;
use netveil_sa::counters::DropCounters;
use netveil_wire::ethernet::{self, ethertype, Address};
use netveil_wire::{arp, ipv4, PacketBuf};
use zeroize::Zeroizing;

use crate::error::{ConfigError, Drop};
use crate::header::{Repr, Version};
use crate::keys::SessionKeys;
use crate::sep::{self, DhGroup, Established, Mac, Sep, SepConfig, SepError, SepEvent};
use crate::session::{peek, RxConfig, RxSession, SealOpts, TxConfig, TxSession};
use crate::suite::Suite;

netveil_sa::drop_reasons! {
    /// Why a [`Node`] dropped a frame: what the frame itself showed ([`Drop`], under its names), or what the host
    /// decided (sessions, addressing, SEP, ARP bindings). [`NodeStats`] counts these per direction.
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

/// Broadcast MAC address.
pub const BROADCAST: Mac = [0xff; 6];
/// Most group senders remembered (each costs a key schedule); beyond, the least recently heard is forgotten.
pub const MAX_GROUP_SENDERS: usize = 4096;
/// After a failed rekey, the next try.
const REKEY_RETRY: Duration = Duration::from_secs(5);
/// Most peers with state (sessions or queues).
pub const MAX_PEERS: usize = 4096;
/// When a version-1 host announces its epoch again after the start (the first goes out at once).
const ANNOUNCE_AGAIN: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(3)];
/// After an initiation the rate limit postponed, the next try.
const SEP_RETRY: Duration = Duration::from_millis(50);

/// How a host is set up.
pub struct NodeConfig {
    /// This host's MAC address (of its LAN port, given to the TAP device too).
    pub mac: Mac,
    /// This host's IPv4 address and prefix length (SEP's subnet check).
    pub ip: Ipv4Addr,
    pub prefix_len: u8,
    /// The l2sec EtherType.
    pub ethertype: u16,
    /// The suite of group traffic and the network's group secret (at least 16 bytes).
    pub group_suite: Suite,
    pub group_secret: Zeroizing<Vec<u8>>,
    /// Version 1: this start's group epoch (at least 1). It must be strictly greater than every epoch this host
    /// used before under the same group secret (the caller persists it before use), or group nonces repeat.
    pub epoch: u64,
    /// Session suites and key-exchange groups, in preference order.
    pub suites: Vec<Suite>,
    pub groups: Vec<DhGroup>,
    /// Session lifetime offered and longest accepted.
    pub lifetime: Duration,
    /// How long before a session ends its initiator starts the rekey.
    pub rekey_margin: Duration,
    /// SEP retransmission: first timeout and attempts.
    pub retransmit: Duration,
    pub attempts: u32,
    /// SEP exchanges started per second (initiated and accepted together, burst as many); 0: no limit.
    pub sep_per_second: u32,
    /// This host's Ed25519 key: group frames (and SEP) are signed with it.
    pub signing_key: Option<SigningKey>,
    /// The other hosts' verifying keys, by MAC address.
    pub peer_keys: HashMap<Mac, VerifyingKey>,
    /// The other hosts' IPv4 addresses, by MAC address (bindings, see the module documentation).
    pub peer_ips: HashMap<Mac, Ipv4Addr>,
    /// Refuse group frames without a valid signature of a known host.
    pub require_signatures: bool,
    /// Allow the ECB suites (the thesis' pattern demonstration; insecure).
    pub insecure_ecb: bool,
    /// Allow the null suite (no encryption, no integrity: the L2 study's noENC-noHMAC, for measuring the framing;
    /// insecure).
    pub insecure_null: bool,
    /// Anti-replay window per receive session.
    pub replay_window: u32,
    /// Send this 24-bit security number and accept only it.
    pub security_number: Option<u32>,
    /// Send timestamps and accept frames only within `timestamp_tolerance` seconds.
    pub timestamps: bool,
    pub timestamp_tolerance: u32,
    /// Frames kept per peer while SEP runs.
    pub queue_limit: usize,
}

impl NodeConfig {
    /// Defaults: version 1 (AES-128-GCM sessions and group traffic, X25519), epoch 1, one-hour sessions rekeyed
    /// five minutes before their end, 20 SEP exchanges per second, no signatures, 1024-frame replay windows.
    pub fn new(mac: Mac, ip: Ipv4Addr, prefix_len: u8, group_secret: Zeroizing<Vec<u8>>) -> Self {
        NodeConfig {
            mac,
            ip,
            prefix_len,
            ethertype: crate::header::DEFAULT_ETHERTYPE,
            group_suite: Suite::Aes128Gcm,
            group_secret,
            epoch: 1,
            suites: vec![Suite::Aes128Gcm],
            groups: vec![DhGroup::X25519],
            lifetime: Duration::from_secs(3600),
            rekey_margin: Duration::from_secs(300),
            retransmit: Duration::from_millis(500),
            attempts: 5,
            sep_per_second: 20,
            signing_key: None,
            peer_keys: HashMap::new(),
            peer_ips: HashMap::new(),
            require_signatures: false,
            insecure_ecb: false,
            insecure_null: false,
            replay_window: 1024,
            security_number: None,
            timestamps: false,
            timestamp_tolerance: 30,
            queue_limit: 64,
        }
    }
}

/// What happened to a frame from the host side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outbound {
    /// Sealed in place: send it on the wire.
    Send,
    /// Kept until the session with its destination is set up (see [`Node::poll_transmit`]).
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

struct Session {
    key_id: u8,
    suite: Suite,
    tx: TxSession,
    rx: RxSession,
    initiator: bool,
    established: Instant,
    expires: Instant,
    rekey_at: Instant,
}

#[derive(Default)]
struct Peer {
    cur: Option<Session>,
    prev: Option<Session>,
    queue: VecDeque<Vec<u8>>,
    /// The address SEP requests target (from the frames for the peer, then from SEP).
    ip: Option<Ipv4Addr>,
    /// The address bound to the peer by an established exchange.
    bound_ip: Option<Ipv4Addr>,
    /// The peer's group epoch when the current session was established (0: unknown).
    epoch: u64,
    last_initiate: Option<Instant>,
    stats: PeerStats,
}

/// The state of one group sender: its current epoch and the replay window of that epoch.
struct GroupSender {
    epoch: u64,
    rx: RxSession,
    seen: Instant,
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
    fn sep_error(&mut self, e: SepError) {
        *self.sep_errors.entry(e.name()).or_default() += 1;
    }
}

/// What happened to sessions and exchanges, for the host's log ([`Node::poll_event`]). Key material is never
/// part of an event.
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

/// Events kept until [`Node::poll_event`] takes them (older ones are dropped).
pub const MAX_EVENTS: usize = 256;

/// One protected host (see the module documentation).
pub struct Node {
    cfg: NodeConfig,
    unix_base: (Instant, u64),
    epoch: u64,
    group_tx: TxSession,
    group_rx: HashMap<Mac, GroupSender>,
    peers: HashMap<Mac, Peer>,
    /// Address -> MAC: this host's, the configured and the SEP bindings.
    bound: HashMap<Ipv4Addr, Mac>,
    sep: Sep,
    ready: VecDeque<Vec<u8>>,
    /// When to announce the epoch again.
    announce_at: VecDeque<Instant>,
    /// When to retry initiations the rate limit postponed.
    sep_retry_at: Option<Instant>,
    stats: NodeStats,
    events: VecDeque<NodeEvent>,
}

fn group_keys(cfg: &NodeConfig, src: Mac, epoch: u64) -> Result<SessionKeys, ConfigError> {
    match cfg.group_suite.version() {
        Version::V0 => SessionKeys::group_sender(cfg.group_suite, &cfg.group_secret, src),
        Version::V1 => {
            SessionKeys::group_sender_epoch(cfg.group_suite, &cfg.group_secret, src, epoch)
        }
    }
}

fn is_group(mac: &Mac) -> bool {
    mac[0] & 1 == 1
}

/// The IPv4 address a frame is for, when it shows one (IPv4 destination, ARP target).
fn target_ipv4(frame: &[u8]) -> Option<Ipv4Addr> {
    // Only the address is read: the rest of the IPv4 header or ARP packet is not checked.
    let eth = ethernet::Packet::new_checked(frame).ok()?;
    let l3 = eth.payload();
    match eth.ethertype() {
        ethertype::IPV4 if l3.len() >= ipv4::MIN_HEADER_LEN => {
            Some(ipv4::Packet::new_unchecked(l3).dst_addr())
        }
        ethertype::ARP => Some(arp::Packet::new_checked(l3).ok()?.target_proto_addr()),
        _ => None,
    }
}

/// An Ethernet/IPv4 ARP packet's sender hardware and protocol addresses (`None` for anything else).
fn arp_sender(frame: &[u8]) -> Option<(Mac, Ipv4Addr)> {
    let eth = ethernet::Packet::new_checked(frame).ok()?;
    if eth.ethertype() != ethertype::ARP {
        return None;
    }
    let a = arp::Packet::new_checked(eth.payload()).ok()?;
    if (
        a.hardware_type(),
        a.protocol_type(),
        a.hardware_len(),
        a.protocol_len(),
    ) != (arp::HTYPE_ETHERNET, ethertype::IPV4, 6, 4)
    {
        return None;
    }
    Some((a.sender_hw_addr().0, a.sender_proto_addr()))
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

    fn unix(&self, now: Instant) -> u32 {
        let (i, u) = self.unix_base;
        (u + now.saturating_duration_since(i).as_secs()) as u32
    }

    fn rx_config(&self, key_id: u8, group_epoch: Option<u64>) -> RxConfig {
        let group = group_epoch.is_some();
        RxConfig {
            ethertype: self.cfg.ethertype,
            key_id,
            epoch: group_epoch.filter(|_| self.cfg.group_suite.version() == Version::V1),
            insecure_ecb: self.cfg.insecure_ecb,
            insecure_null: self.cfg.insecure_null,
            replay_window: self.cfg.replay_window,
            require_encryption: true,
            require_signature: group && self.cfg.require_signatures,
            require_security_number: self.cfg.security_number.is_some(),
            require_timestamp: self.cfg.timestamps,
            timestamp_tolerance: self.cfg.timestamp_tolerance,
            security_numbers: [self.cfg.security_number, None],
        }
    }

    /// Bytes of head- and tailroom a frame from the host side needs (the largest of every mode in use).
    pub fn overhead(&self) -> (usize, usize) {
        let signer = self.cfg.signing_key.as_ref();
        let opts = SealOpts {
            security_number: self.cfg.security_number,
            timestamp: self.cfg.timestamps.then_some(0),
            signer,
            encrypt: true,
        };
        let (h, t) = self.group_tx.overhead(&opts);
        // Sessions: up to 16 bytes of header and, unsigned, at most a block of padding plus a 20-byte HMAC.
        (h.max(16), t.max(15 + 20))
    }

    /// The per-frame options (security number, timestamp) of this host; `signer` for group frames.
    fn seal_opts<'k>(&self, now: Instant, signer: Option<&'k SigningKey>) -> SealOpts<'k> {
        SealOpts {
            security_number: self.cfg.security_number,
            timestamp: self.cfg.timestamps.then(|| self.unix(now)),
            signer,
            encrypt: true,
        }
    }

    fn seal_group(&mut self, frame: &mut PacketBuf, now: Instant) -> Result<(), NodeDrop> {
        let opts = self.seal_opts(now, self.cfg.signing_key.as_ref());
        self.group_tx
            .seal(frame, &opts)
            .map_err(|_| NodeDrop::TxFailed)?;
        self.stats.tx_group += 1;
        Ok(())
    }

    /// A frame the host sent (from the TAP device). `Ok(Send)`: sealed in place; `Ok(Queued)`: copied and kept;
    /// `Err`: dropped (counted).
    pub fn handle_outbound(
        &mut self,
        frame: &mut PacketBuf,
        now: Instant,
    ) -> Result<Outbound, NodeDrop> {
        let r = self.outbound(frame, now);
        match r {
            Ok(Outbound::Send) => {
                self.stats.tx_frames += 1;
                self.stats.tx_bytes += frame.len() as u64;
            }
            Ok(Outbound::Queued) => {}
            Err(d) => self.stats.tx_drops.count(d),
        }
        r
    }

    fn outbound(&mut self, frame: &mut PacketBuf, now: Instant) -> Result<Outbound, NodeDrop> {
        let eth = ethernet::Packet::new_checked(frame.data()).map_err(|_| Drop::Malformed)?;
        let dst: Mac = eth.dst_addr().0;
        if eth.src_addr().0 != self.cfg.mac {
            // The host only sends with its own address (the TAP device has the port's MAC).
            return Err(Drop::Malformed.into());
        }
        if is_group(&dst) {
            self.seal_group(frame, now)?;
            return Ok(Outbound::Send);
        }
        let opts = self.seal_opts(now, None);
        if let Some(p) = self.peers.get_mut(&dst) {
            if let Some(s) = p.cur.as_mut().filter(|s| now < s.expires) {
                s.tx.seal(frame, &opts).map_err(|_| NodeDrop::TxFailed)?;
                p.stats.tx_frames += 1;
                p.stats.tx_bytes += frame.len() as u64;
                return Ok(Outbound::Send);
            }
        }
        // No session: keep the frame and set one up.
        if !self.peers.contains_key(&dst) && self.peers.len() >= MAX_PEERS {
            return Err(NodeDrop::QueueFull);
        }
        let ip = target_ipv4(frame.data());
        let limit = self.cfg.queue_limit;
        let p = self.peers.entry(dst).or_default();
        if ip.is_some() {
            p.ip = ip;
        }
        if p.queue.len() >= limit {
            p.stats.dropped += 1;
            return Err(NodeDrop::QueueFull);
        }
        p.queue.push_back(frame.data().to_vec());
        let ip = p.ip;
        self.start_sep(dst, ip, now);
        Ok(Outbound::Queued)
    }

    /// Starts SEP with `peer` unless an exchange runs; false if the rate limit postponed it (counted, and retried
    /// by [`Node::handle_timeout`]).
    fn start_sep(&mut self, peer: Mac, ip: Option<Ipv4Addr>, now: Instant) -> bool {
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
    fn announce(&mut self, now: Instant) {
        let msg = sep::announce_message(self.cfg.mac);
        self.send_control(&msg, now);
        self.stats.announces += 1;
    }

    /// Seals a SEP message as a group frame to the broadcast address and queues it.
    fn send_control(&mut self, msg: &[u8], now: Instant) {
        let mut b = PacketBuf::new(msg.len() + ethernet::HEADER_LEN + 256, 32);
        if let Some(d) = b.push_back(ethernet::HEADER_LEN + msg.len()) {
            let mut eth = ethernet::Packet::new_unchecked(d);
            ethernet::Repr {
                src: Address(self.cfg.mac),
                dst: Address(BROADCAST),
                ethertype: self.cfg.ethertype,
            }
            .emit(&mut eth);
            eth.payload_mut().copy_from_slice(msg);
        }
        if self.seal_group(&mut b, now).is_ok() {
            self.ready.push_back(b.data().to_vec());
        } else {
            self.stats.tx_drops.count(NodeDrop::TxFailed);
        }
    }

    /// A frame from the wire. `Ok(Deliver)`: opened in place, for the host; `Ok(Control)`: a SEP message,
    /// consumed; `Err`: dropped (counted).
    pub fn handle_inbound(
        &mut self,
        frame: &mut PacketBuf,
        now: Instant,
    ) -> Result<Inbound, NodeDrop> {
        let r = self.inbound(frame, now);
        match r {
            Ok(Inbound::Deliver) => {
                self.stats.rx_frames += 1;
                self.stats.rx_bytes += frame.len() as u64;
            }
            Ok(Inbound::Control) => self.stats.sep_messages += 1,
            Err(d) => self.stats.rx_drops.count(d),
        }
        r
    }

    fn inbound(&mut self, frame: &mut PacketBuf, now: Instant) -> Result<Inbound, NodeDrop> {
        let p = peek(frame.data(), self.cfg.ethertype)?;
        let (src, dst) = (p.src.0, p.dst.0);
        if src == self.cfg.mac || is_group(&src) {
            return Err(Drop::Malformed.into());
        }
        if is_group(&dst) {
            return self.group_inbound(frame, src, &p.header, now);
        }
        if dst != self.cfg.mac {
            return Err(NodeDrop::NotForUs);
        }
        let unix = self.unix(now);
        let v1 = p.header.version == Version::V1;
        let key_id = p.header.key_id;
        // Only a peer with a session is looked at: nothing is created, nothing started for anyone else.
        let Some(peer) = self.peers.get_mut(&src) else {
            return Err(NodeDrop::NoSession);
        };
        let mut result = Err(NodeDrop::NoSession);
        for s in [peer.cur.as_mut(), peer.prev.as_mut()]
            .into_iter()
            .flatten()
        {
            if now >= s.expires {
                continue;
            }
            if v1 && s.key_id != key_id {
                result = Err(Drop::UnknownKeyId.into());
                continue;
            }
            result = s.rx.open(frame, unix, None).map_err(NodeDrop::from);
            // Version 0 has no key id: a frame that fails under the current session may be one of the previous.
            if result != Err(Drop::AuthFailed.into()) {
                break;
            }
        }
        result?;
        peer.stats.rx_frames += 1;
        peer.stats.rx_bytes += frame.len() as u64;
        self.check_arp(frame.data(), src)?;
        Ok(Inbound::Deliver)
    }

    /// A group frame from `src` (see the module documentation: epochs, authentication before state).
    fn group_inbound(
        &mut self,
        frame: &mut PacketBuf,
        src: Mac,
        hdr: &Repr,
        now: Instant,
    ) -> Result<Inbound, NodeDrop> {
        let unix = self.unix(now);
        let ep = match self.cfg.group_suite.version() {
            // (A version-0 session refuses a frame with the bit set as malformed.)
            Version::V0 => 0,
            Version::V1 => hdr.epoch.ok_or(Drop::Policy)?,
        };
        // What the header alone refuses is refused before any key is derived or any state looked up: an unsigned
        // frame where signatures are required, a signed one from a sender without a listed key.
        if self.cfg.require_signatures && !hdr.signed {
            return Err(Drop::Policy.into());
        }
        if hdr.signed && !self.cfg.peer_keys.contains_key(&src) {
            return Err(Drop::NoPeerKey.into());
        }
        let known = self.group_rx.get(&src).map(|g| g.epoch);
        let peer_epoch = self.peers.get(&src).map_or(0, |p| p.epoch);
        if ep < known.unwrap_or(0).max(peer_epoch) {
            return Err(NodeDrop::OldEpoch);
        }
        let peer_key = self.cfg.peer_keys.get(&src);
        let (opened, restarted) = match self.group_rx.get_mut(&src) {
            Some(g) if g.epoch == ep => {
                let o = g.rx.open(frame, unix, peer_key)?;
                g.seen = now;
                (o, false)
            }
            _ => {
                // A sender not heard yet, or a newer epoch of one: keys derived now, a window only once the frame
                // authenticated.
                self.stats.group_key_derivations += 1;
                let keys = group_keys(&self.cfg, src, ep).map_err(|_| Drop::NoKey)?;
                let mut rx = RxSession::candidate(&keys, self.rx_config(0, Some(ep)))
                    .map_err(|_| Drop::NoKey)?;
                let o = rx.open(frame, unix, peer_key)?;
                let restarted =
                    known.is_some_and(|k| k < ep) || (peer_epoch != 0 && peer_epoch < ep);
                if known.is_none() && self.group_rx.len() >= MAX_GROUP_SENDERS {
                    if let Some(k) = self
                        .group_rx
                        .iter()
                        .min_by_key(|(_, g)| g.seen)
                        .map(|(k, _)| *k)
                    {
                        self.group_rx.remove(&k);
                    }
                }
                self.group_rx.insert(
                    src,
                    GroupSender {
                        epoch: ep,
                        rx,
                        seen: now,
                    },
                );
                (o, restarted)
            }
        };
        self.stats.rx_group += 1;
        let resume = restarted && self.peer_restarted(src);
        let r = if opened.ethertype == self.cfg.ethertype {
            self.control(frame, src, (ep, opened.seq), now)
        } else {
            self.check_arp(frame.data(), src).map(|_| Inbound::Deliver)
        };
        if resume && !self.sep.in_progress(&src) {
            let ip = self.peers.get(&src).and_then(|p| p.ip);
            self.start_sep(src, ip, now);
        }
        r
    }

    /// `src` restarted (a newer epoch authenticated): its sessions and any exchange with it are dropped. True if
    /// there was something to resume (a session, queued frames).
    fn peer_restarted(&mut self, src: Mac) -> bool {
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

    /// A SEP message (an opened group frame with the l2sec EtherType inside) from `src`.
    fn control(
        &mut self,
        frame: &PacketBuf,
        src: Mac,
        order: (u64, u64),
        now: Instant,
    ) -> Result<Inbound, NodeDrop> {
        let msg = frame
            .data()
            .get(ethernet::HEADER_LEN..)
            .unwrap_or(&[])
            .to_vec();
        if let Some(ip) = sep::stated_ip(&msg, self.cfg.mac) {
            if !self.binding_allows(src, ip) {
                self.stats.sep_error(SepError::IpBound);
                return Err(NodeDrop::SepRefused);
            }
        }
        let r = self.sep.handle_message(src, &msg, order, now);
        self.drain_sep(now);
        match r {
            Ok(()) => Ok(Inbound::Control),
            // Every host sees every SEP message (broadcast); those for others are not a failure.
            Err(SepError::NotTarget) => {
                self.stats.sep_error(SepError::NotTarget);
                Ok(Inbound::Control)
            }
            Err(e) => {
                self.stats.sep_error(e);
                Err(NodeDrop::SepRefused)
            }
        }
    }

    /// The address bound to `mac` (configured, or from SEP).
    fn binding(&self, mac: &Mac) -> Option<Ipv4Addr> {
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
    fn binding_allows(&self, mac: Mac, ip: Ipv4Addr) -> bool {
        if let Some(c) = self.cfg.peer_ips.get(&mac) {
            return *c == ip;
        }
        self.bound.get(&ip).is_none_or(|m| *m == mac)
    }

    /// An opened frame from `src`: if it is ARP, may `src` say what it says?
    fn check_arp(&self, frame: &[u8], src: Mac) -> Result<(), NodeDrop> {
        let Some((sha, spa)) = arp_sender(frame) else {
            return Ok(());
        };
        if sha != src {
            return Err(NodeDrop::ArpSpoofed);
        }
        if spa.is_unspecified() {
            return Ok(());
        }
        if self.binding(&src).is_some_and(|b| b != spa) {
            return Err(NodeDrop::ArpSpoofed);
        }
        if self.bound.get(&spa).is_some_and(|m| *m != src) {
            return Err(NodeDrop::ArpSpoofed);
        }
        Ok(())
    }

    /// Handles what SEP produced: messages to send, sessions to install, failures.
    fn drain_sep(&mut self, now: Instant) {
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

    fn event(&mut self, e: NodeEvent) {
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
