//! One protected host: its group sender, its unicast sessions (one per peer, selected by the peer's MAC
//! address: the session key mapping), the SEP exchanges, and the decision for every frame. Sans-I/O: the caller
//! reads frames from the host side (a TAP device) and the wire (an AF_PACKET socket), passes them in with the
//! time, and sends what comes out.
//!
//! # Frames
//!
//! - **Group frames** (destination MAC with the group bit: broadcast, multicast; ARP requests among them) are
//!   sealed with this host's group sender keys, derived from the network's group secret (see
//!   [`crate::keys`]), and signed when the host has a signing key. Version 1 group frames carry a random
//!   per-start *epoch* (1..=255) in the key-id byte, which enters the key derivation (context `"group" ‖ MAC ‖
//!   epoch`): a restarted sender uses fresh keys and a fresh replay window at its receivers, so it neither
//!   repeats nonces (unless its 8-bit epoch repeats too) nor gets its frames dropped as replays. Version 0 has
//!   no key-id byte: its group keys are [`SessionKeys::group_sender`]'s, and a sender restarted under the same
//!   group secret is refused as replaying until the secret changes (the thesis used static keys).
//! - **Unicast frames** use the session with the destination. A frame for a peer without a session is kept
//!   (up to [`NodeConfig::queue_limit`] frames per peer) while SEP sets one up, and sent when it is
//!   established; dropped if SEP fails. The peer's IPv4 address, when the frame shows it (IPv4 destination,
//!   ARP target), goes into the SEP request.
//! - **SEP messages** travel as group frames to the broadcast address with the l2sec EtherType as the inner
//!   EtherType; every host opens them with the sender's group keys, and only the addressed host answers.
//!
//! # Receiving
//!
//! A unicast frame for this host is opened with the session of its source MAC: in version 1 the one whose key
//! id the frame carries (the current session or, during a rekey, the previous one); in version 0 the current
//! session, then the previous one. A unicast frame from a host without a session is dropped (`no-session`) and
//! starts SEP with that host, at most once per second: after a peer restarts, the sessions heal themselves.
//! Frames for other hosts (a switch flooding) are dropped as `not-for-us`.
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
use netveil_sa::counters::DropCounters;
use netveil_wire::PacketBuf;
use zeroize::Zeroizing;

use crate::header::Version;
use crate::keys::SessionKeys;
use crate::sep::{DhGroup, Established, Mac, Sep, SepConfig, SepError, SepEvent};
use crate::session::{peek, RxConfig, RxSession, SealOpts, TxConfig, TxSession};
use crate::suite::Suite;
use crate::{ConfigError, Drop};

/// Broadcast MAC address.
pub const BROADCAST: Mac = [0xff; 6];
/// Most group senders remembered (each costs a key schedule); beyond, the least recently used is forgotten.
const MAX_GROUP_SENDERS: usize = 4096;
/// After a failed rekey, the next try.
const REKEY_RETRY: Duration = Duration::from_secs(5);
/// Most peers with state (sessions or queues).
const MAX_PEERS: usize = 4096;

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
    /// This host's Ed25519 key: group frames (and SEP) are signed with it.
    pub signing_key: Option<SigningKey>,
    /// The other hosts' verifying keys, by MAC address.
    pub peer_keys: HashMap<Mac, VerifyingKey>,
    /// Refuse group frames without a valid signature of a known host.
    pub require_signatures: bool,
    /// Allow the ECB suites (the thesis' pattern demonstration; insecure).
    pub insecure_ecb: bool,
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
    /// Defaults: version 1 (AES-128-GCM sessions and group traffic, X25519), one-hour sessions rekeyed five
    /// minutes before their end, no signatures, 1024-frame replay windows.
    pub fn new(mac: Mac, ip: Ipv4Addr, prefix_len: u8, group_secret: Zeroizing<Vec<u8>>) -> Self {
        NodeConfig {
            mac,
            ip,
            prefix_len,
            ethertype: crate::DEFAULT_ETHERTYPE,
            group_suite: Suite::Aes128Gcm,
            group_secret,
            suites: vec![Suite::Aes128Gcm],
            groups: vec![DhGroup::X25519],
            lifetime: Duration::from_secs(3600),
            rekey_margin: Duration::from_secs(300),
            retransmit: Duration::from_millis(500),
            attempts: 5,
            signing_key: None,
            peer_keys: HashMap::new(),
            require_signatures: false,
            insecure_ecb: false,
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
    ip: Option<Ipv4Addr>,
    last_initiate: Option<Instant>,
    stats: PeerStats,
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
    pub tx_drops: DropCounters<Drop>,
    pub rx_drops: DropCounters<Drop>,
    /// SEP messages refused, by reason.
    pub sep_errors: HashMap<&'static str, u64>,
}

/// One protected host (see the module documentation).
pub struct Node {
    cfg: NodeConfig,
    unix_base: (Instant, u64),
    epoch: u8,
    group_tx: TxSession,
    group_rx: HashMap<(Mac, u8), (RxSession, Instant)>,
    peers: HashMap<Mac, Peer>,
    sep: Sep,
    ready: VecDeque<Vec<u8>>,
    stats: NodeStats,
}

fn group_keys(cfg: &NodeConfig, src: Mac, epoch: u8) -> Result<SessionKeys, ConfigError> {
    match cfg.group_suite.version() {
        Version::V0 => SessionKeys::group_sender(cfg.group_suite, &cfg.group_secret, src),
        Version::V1 => {
            let mut ctx = [0u8; 12];
            ctx[..5].copy_from_slice(b"group");
            ctx[5..11].copy_from_slice(&src);
            ctx[11] = epoch;
            SessionKeys::derive(cfg.group_suite, &cfg.group_secret, &ctx)
        }
    }
}

fn is_group(mac: &Mac) -> bool {
    mac[0] & 1 == 1
}

/// The IPv4 address a frame is for, when it shows one (IPv4 destination, ARP target).
fn target_ipv4(frame: &[u8]) -> Option<Ipv4Addr> {
    let et = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let at = match et {
        0x0800 => 14 + 16,
        0x0806 => 14 + 24,
        _ => return None,
    };
    let b: [u8; 4] = frame.get(at..at + 4)?.try_into().ok()?;
    Some(Ipv4Addr::from(b))
}

impl Node {
    /// A host, started at `now` (monotonic) which is `unix_now` seconds of Unix time (for timestamps).
    pub fn new(cfg: NodeConfig, now: Instant, unix_now: u64) -> Result<Node, ConfigError> {
        let mut e = [0u8; 1];
        while e[0] == 0 {
            netveil_crypto::rand::fill_random(&mut e);
        }
        let epoch = match cfg.group_suite.version() {
            Version::V0 => 0,
            Version::V1 => e[0],
        };
        let keys = group_keys(&cfg, cfg.mac, epoch)?;
        let group_tx = TxSession::new(
            &keys,
            TxConfig {
                ethertype: cfg.ethertype,
                key_id: epoch,
                insecure_ecb: cfg.insecure_ecb,
                first_seq: None,
            },
        )?;
        // Check that every session suite builds (ECB switch) before anything runs.
        for s in &cfg.suites {
            let k = SessionKeys::derive(*s, &[0u8; 32], b"check")?;
            TxSession::new(
                &k,
                TxConfig {
                    insecure_ecb: cfg.insecure_ecb,
                    ..TxConfig::default()
                },
            )?;
        }
        let sep = Sep::new(SepConfig {
            mac: cfg.mac,
            ip: cfg.ip,
            prefix_len: cfg.prefix_len,
            suites: cfg.suites.clone(),
            groups: cfg.groups.clone(),
            lifetime: cfg.lifetime,
            retransmit: cfg.retransmit,
            attempts: cfg.attempts,
        });
        Ok(Node {
            cfg,
            unix_base: (now, unix_now),
            epoch,
            group_tx,
            group_rx: HashMap::new(),
            peers: HashMap::new(),
            sep,
            ready: VecDeque::new(),
            stats: NodeStats::default(),
        })
    }

    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }
    pub fn stats(&self) -> &NodeStats {
        &self.stats
    }
    /// The epoch of this host's group frames (version 1; 0 in version 0).
    pub fn epoch(&self) -> u8 {
        self.epoch
    }
    /// Group senders currently known.
    pub fn group_senders(&self) -> usize {
        self.group_rx.len()
    }

    fn unix(&self, now: Instant) -> u32 {
        let (i, u) = self.unix_base;
        (u + now.saturating_duration_since(i).as_secs()) as u32
    }

    fn rx_config(&self, key_id: u8, group: bool) -> RxConfig {
        RxConfig {
            ethertype: self.cfg.ethertype,
            key_id,
            insecure_ecb: self.cfg.insecure_ecb,
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

    fn seal_group(&mut self, frame: &mut PacketBuf, now: Instant) -> Result<(), Drop> {
        let opts = self.seal_opts(now, self.cfg.signing_key.as_ref());
        self.group_tx
            .seal(frame, &opts)
            .map_err(|_| Drop::TxFailed)?;
        self.stats.tx_group += 1;
        Ok(())
    }

    /// A frame the host sent (from the TAP device). `Ok(Send)`: sealed in place; `Ok(Queued)`: copied and kept;
    /// `Err`: dropped (counted).
    pub fn handle_outbound(
        &mut self,
        frame: &mut PacketBuf,
        now: Instant,
    ) -> Result<Outbound, Drop> {
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

    fn outbound(&mut self, frame: &mut PacketBuf, now: Instant) -> Result<Outbound, Drop> {
        let d = frame.data();
        if d.len() < 14 {
            return Err(Drop::Malformed);
        }
        let dst: Mac = d[..6].try_into().map_err(|_| Drop::Malformed)?;
        if d[6..12] != self.cfg.mac {
            // The host only sends with its own address (the TAP device has the port's MAC).
            return Err(Drop::Malformed);
        }
        if is_group(&dst) {
            self.seal_group(frame, now)?;
            return Ok(Outbound::Send);
        }
        let opts = self.seal_opts(now, None);
        if let Some(p) = self.peers.get_mut(&dst) {
            if let Some(s) = p.cur.as_mut().filter(|s| now < s.expires) {
                s.tx.seal(frame, &opts).map_err(|_| Drop::TxFailed)?;
                p.stats.tx_frames += 1;
                p.stats.tx_bytes += frame.len() as u64;
                return Ok(Outbound::Send);
            }
        }
        // No session: keep the frame and set one up.
        if !self.peers.contains_key(&dst) && self.peers.len() >= MAX_PEERS {
            return Err(Drop::QueueFull);
        }
        let ip = target_ipv4(frame.data());
        let limit = self.cfg.queue_limit;
        let p = self.peers.entry(dst).or_default();
        if ip.is_some() {
            p.ip = ip;
        }
        if p.queue.len() >= limit {
            p.stats.dropped += 1;
            return Err(Drop::QueueFull);
        }
        p.queue.push_back(frame.data().to_vec());
        let ip = p.ip;
        self.start_sep(dst, ip, now);
        Ok(Outbound::Queued)
    }

    fn start_sep(&mut self, peer: Mac, ip: Option<Ipv4Addr>, now: Instant) {
        if self.sep.in_progress(&peer) {
            return;
        }
        let p = self.peers.entry(peer).or_default();
        // The next key id (1..=255, 0 never: version 1 group frames carry their epoch there).
        let key_id = match p.cur.as_ref() {
            Some(s) if s.key_id < 255 => s.key_id + 1,
            _ => 1,
        };
        p.last_initiate = Some(now);
        self.sep.initiate(peer, ip, key_id, now);
        self.drain_sep(now);
    }

    /// A frame from the wire. `Ok(Deliver)`: opened in place, for the host; `Ok(Control)`: a SEP message,
    /// consumed; `Err`: dropped (counted).
    pub fn handle_inbound(&mut self, frame: &mut PacketBuf, now: Instant) -> Result<Inbound, Drop> {
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

    fn inbound(&mut self, frame: &mut PacketBuf, now: Instant) -> Result<Inbound, Drop> {
        let p = peek(frame.data(), self.cfg.ethertype)?;
        let (src, dst) = (p.src.0, p.dst.0);
        if src == self.cfg.mac || is_group(&src) {
            return Err(Drop::Malformed);
        }
        let unix = self.unix(now);
        if is_group(&dst) {
            let key_id = p.header.key_id;
            let peer_key = self.cfg.peer_keys.get(&src);
            let opened = match self.group_rx.get_mut(&(src, key_id)) {
                Some((rx, seen)) => {
                    *seen = now;
                    rx.open(frame, unix, peer_key)?
                }
                None => {
                    // A sender not seen yet (or a new epoch of one): keys derived now, kept only if the frame
                    // is genuine.
                    let keys = group_keys(&self.cfg, src, key_id).map_err(|_| Drop::NoKey)?;
                    let mut rx = RxSession::new(&keys, self.rx_config(key_id, true))
                        .map_err(|_| Drop::NoKey)?;
                    let o = rx.open(frame, unix, peer_key)?;
                    self.group_rx.retain(|(m, _), _| *m != src);
                    if self.group_rx.len() >= MAX_GROUP_SENDERS {
                        if let Some(k) = self
                            .group_rx
                            .iter()
                            .min_by_key(|(_, (_, seen))| *seen)
                            .map(|(k, _)| *k)
                        {
                            self.group_rx.remove(&k);
                        }
                    }
                    self.group_rx.insert((src, key_id), (rx, now));
                    o
                }
            };
            self.stats.rx_group += 1;
            if opened.ethertype == self.cfg.ethertype {
                let msg = frame.data().get(14..).unwrap_or(&[]).to_vec();
                let r = self.sep.handle_message(src, &msg, now);
                self.drain_sep(now);
                return match r {
                    Ok(()) => Ok(Inbound::Control),
                    // Every host sees every SEP message (broadcast); those for others are not a failure.
                    Err(SepError::NotTarget) => {
                        *self
                            .stats
                            .sep_errors
                            .entry(SepError::NotTarget.name())
                            .or_default() += 1;
                        Ok(Inbound::Control)
                    }
                    Err(e) => {
                        *self.stats.sep_errors.entry(e.name()).or_default() += 1;
                        Err(Drop::SepRefused)
                    }
                };
            }
            return Ok(Inbound::Deliver);
        }
        if dst != self.cfg.mac {
            return Err(Drop::NotForUs);
        }
        let v1 = p.header.version == Version::V1;
        let key_id = p.header.key_id;
        let Some(peer) = self.peers.get_mut(&src) else {
            self.no_session(src, now);
            return Err(Drop::NoSession);
        };
        let mut result = Err(Drop::NoSession);
        for s in [peer.cur.as_mut(), peer.prev.as_mut()]
            .into_iter()
            .flatten()
        {
            if now >= s.expires || (v1 && s.key_id != key_id) {
                continue;
            }
            result = s.rx.open(frame, unix, None);
            // Version 0 has no key id: a frame that fails under the current session may be one of the previous.
            if result != Err(Drop::AuthFailed) {
                break;
            }
        }
        match result {
            Ok(_) => {
                peer.stats.rx_frames += 1;
                peer.stats.rx_bytes += frame.len() as u64;
                Ok(Inbound::Deliver)
            }
            Err(Drop::NoSession) => {
                self.no_session(src, now);
                Err(Drop::NoSession)
            }
            Err(e) => Err(e),
        }
    }

    /// A unicast frame from a host we have no session with: it probably restarted; set up a new one (at most
    /// once a second per host).
    fn no_session(&mut self, src: Mac, now: Instant) {
        if self.peers.len() >= MAX_PEERS && !self.peers.contains_key(&src) {
            return;
        }
        let recent = self
            .peers
            .get(&src)
            .and_then(|p| p.last_initiate)
            .is_some_and(|t| now.saturating_duration_since(t) < Duration::from_secs(1));
        if !recent {
            let ip = self.peers.get(&src).and_then(|p| p.ip);
            self.start_sep(src, ip, now);
        }
    }

    /// Handles what SEP produced: messages to send, sessions to install, failures.
    fn drain_sep(&mut self, now: Instant) {
        while let Some(ev) = self.sep.poll_event() {
            match ev {
                SepEvent::Transmit { to: _, msg } => {
                    let mut b = PacketBuf::new(msg.len() + 14 + 256, 32);
                    if let Some(d) = b.push_back(14 + msg.len()) {
                        d[..6].copy_from_slice(&BROADCAST);
                        d[6..12].copy_from_slice(&self.cfg.mac);
                        d[12..14].copy_from_slice(&self.cfg.ethertype.to_be_bytes());
                        d[14..].copy_from_slice(&msg);
                    }
                    if self.seal_group(&mut b, now).is_ok() {
                        self.ready.push_back(b.data().to_vec());
                    } else {
                        self.stats.tx_drops.count(Drop::TxFailed);
                    }
                }
                SepEvent::Established(est) => self.install(*est, now),
                SepEvent::Failed { peer, reason } => {
                    *self.stats.sep_errors.entry(reason.name()).or_default() += 1;
                    if let Some(p) = self.peers.get_mut(&peer) {
                        p.stats.failures += 1;
                        let n = p.queue.len() as u64;
                        p.stats.dropped += n;
                        for _ in 0..n {
                            self.stats.tx_drops.count(Drop::NoSession);
                        }
                        p.queue.clear();
                    }
                }
            }
        }
    }

    fn install(&mut self, est: Established, now: Instant) {
        let tx_cfg = TxConfig {
            ethertype: self.cfg.ethertype,
            key_id: est.key_id,
            insecure_ecb: self.cfg.insecure_ecb,
            first_seq: None,
        };
        let rx_cfg = self.rx_config(est.key_id, false);
        let (Ok(tx), Ok(rx)) = (
            TxSession::new(&est.tx, tx_cfg),
            RxSession::new(&est.rx, rx_cfg),
        ) else {
            *self
                .stats
                .sep_errors
                .entry(SepError::NoCommonSuite.name())
                .or_default() += 1;
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
        let p = self.peers.entry(est.peer).or_default();
        p.ip = Some(est.peer_ip);
        p.stats.sessions += 1;
        p.prev = p.cur.take().filter(|old| old.key_id != s.key_id);
        p.cur = Some(s);
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

    /// The next frame to send on the wire that did not come from [`Node::handle_outbound`] (SEP messages, frames
    /// that waited for a session).
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.ready.pop_front()
    }

    /// Timers: SEP retransmissions, rekeys, expiries.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.sep.handle_timeout(now);
        self.drain_sep(now);
        let mut rekey = Vec::new();
        for (mac, p) in self.peers.iter_mut() {
            if p.prev.as_ref().is_some_and(|s| now >= s.expires) {
                p.prev = None;
            }
            if p.cur.as_ref().is_some_and(|s| now >= s.expires) {
                p.cur = None;
            }
            if let Some(s) = &p.cur {
                // Due, and not tried since it became due (or the last try is a while ago: it failed).
                let tried = matches!(p.last_initiate,
                    Some(t) if t >= s.rekey_at && now.saturating_duration_since(t) < REKEY_RETRY);
                if now >= s.rekey_at && !tried && !self.sep.in_progress(mac) {
                    rekey.push((*mac, p.ip));
                }
            }
        }
        for (mac, ip) in rekey {
            self.start_sep(mac, ip, now);
        }
        self.drain_sep(now);
        // Forget idle peers without sessions or queues.
        self.peers.retain(|m, p| {
            p.cur.is_some() || p.prev.is_some() || !p.queue.is_empty() || self.sep.in_progress(m)
        });
    }

    /// When [`Node::handle_timeout`] should run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.sep.poll_timeout();
        for p in self.peers.values() {
            for s in [&p.cur, &p.prev].into_iter().flatten() {
                for x in [s.expires, s.rekey_at] {
                    t = Some(t.map_or(x, |t: Instant| t.min(x)));
                }
            }
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
