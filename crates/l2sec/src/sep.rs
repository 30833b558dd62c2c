//! The Session Establishment Protocol (SEP): a sans-I/O state machine that sets up a unicast session between two
//! hosts of the LAN. (Interface fixed; implementation in progress.)
//!
//! The caller (the node) carries SEP messages as l2sec group frames (broadcast, under the group key, signed when
//! signatures are configured) with the l2sec EtherType as the inner EtherType, hands received ones to
//! [`Sep::handle_message`], and sends what [`Sep::poll_event`] returns.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use crate::keys::SessionKeys;
use crate::suite::Suite;

/// A MAC address.
pub type Mac = [u8; 6];

/// A Diffie-Hellman group for stage 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DhGroup {
    /// X25519 (RFC 7748).
    X25519,
    /// The 2048-bit MODP group (RFC 3526 group 14).
    Modp2048,
    /// The 3072-bit MODP group (RFC 3526 group 15).
    Modp3072,
}

impl DhGroup {
    pub const ALL: [DhGroup; 3] = [DhGroup::X25519, DhGroup::Modp2048, DhGroup::Modp3072];
    /// `x25519`, `modp2048`, `modp3072` (strongSwan's names).
    pub fn name(self) -> &'static str {
        match self {
            DhGroup::X25519 => "x25519",
            DhGroup::Modp2048 => "modp2048",
            DhGroup::Modp3072 => "modp3072",
        }
    }
    pub fn from_name(s: &str) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.name() == s)
    }
}

/// How this host takes part in SEP.
#[derive(Debug, Clone)]
pub struct SepConfig {
    /// This host's MAC address.
    pub mac: Mac,
    /// This host's IPv4 address and prefix length: a responder answers only requesters on this subnet.
    pub ip: Ipv4Addr,
    pub prefix_len: u8,
    /// Session suites in preference order: offered as initiator; as responder, the first suite of the
    /// initiator's offer that is also in this list is selected.
    pub suites: Vec<Suite>,
    /// Key-exchange groups, same rule as `suites`.
    pub groups: Vec<DhGroup>,
    /// The session lifetime this host offers (as initiator) and the longest it accepts (as responder: the
    /// accepted lifetime is the smaller of the offer and this).
    pub lifetime: Duration,
    /// First retransmission timeout (doubled after every retransmission).
    pub retransmit: Duration,
    /// Transmissions of one message before the exchange fails.
    pub attempts: u32,
}

/// A session both sides agreed on.
pub struct Established {
    pub peer: Mac,
    /// The peer's IPv4 address as it stated it in stage 1.
    pub peer_ip: Ipv4Addr,
    /// This host initiated the exchange.
    pub initiator: bool,
    /// Version 1: the key id frames of this session carry (both directions), 1..=255.
    pub key_id: u8,
    pub suite: Suite,
    /// Keys this host sends with.
    pub tx: SessionKeys,
    /// Keys this host receives with.
    pub rx: SessionKeys,
    /// The accepted lifetime (the session must be rekeyed before it ends).
    pub lifetime: Duration,
}

/// What the caller must do.
pub enum SepEvent {
    /// Send `msg` (a SEP message) to `to`, as a group frame.
    Transmit { to: Mac, msg: Vec<u8> },
    /// A session is established: install it (replacing the peer's current one, which becomes the previous).
    Established(Box<Established>),
    /// The exchange with `peer` failed (no answer after all attempts, or refused).
    Failed { peer: Mac, reason: SepError },
}

/// Why a SEP message was refused (dropped silently: no answer is sent) or an exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SepError {
    /// Not a well-formed SEP message.
    Malformed,
    /// Addressed to another host (or its target address is not ours).
    NotTarget,
    /// The requester's address is not on our subnet.
    NotOnSubnet,
    /// The sender's MAC in the message is not the frame's source.
    WrongSender,
    /// A message that does not fit the state of the exchange (unknown exchange, wrong stage).
    Unexpected,
    /// No suite of the offer is acceptable.
    NoCommonSuite,
    /// No key-exchange group of the offer is acceptable.
    NoCommonGroup,
    /// The peer's key share is invalid.
    BadKeyShare,
    /// The key confirmation did not verify (a man in the middle, or a corrupted exchange).
    BadConfirm,
    /// No answer after all attempts.
    Timeout,
}

impl SepError {
    pub fn name(self) -> &'static str {
        match self {
            SepError::Malformed => "sep-malformed",
            SepError::NotTarget => "sep-not-target",
            SepError::NotOnSubnet => "sep-not-on-subnet",
            SepError::WrongSender => "sep-wrong-sender",
            SepError::Unexpected => "sep-unexpected",
            SepError::NoCommonSuite => "sep-no-common-suite",
            SepError::NoCommonGroup => "sep-no-common-group",
            SepError::BadKeyShare => "sep-bad-key-share",
            SepError::BadConfirm => "sep-bad-confirm",
            SepError::Timeout => "sep-timeout",
        }
    }
}

impl core::fmt::Display for SepError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// The SEP state of one host: the exchanges in progress, one per peer.
pub struct Sep {
    cfg: SepConfig,
}

impl Sep {
    pub fn new(cfg: SepConfig) -> Sep {
        Sep { cfg }
    }
    pub fn config(&self) -> &SepConfig {
        &self.cfg
    }

    /// Starts an exchange with `peer` (whose IPv4 address the caller may know from the frame that needs the
    /// session), proposing `key_id` (1..=255) for the new session. Returns false (and does nothing) if an
    /// exchange with `peer` is already in progress.
    pub fn initiate(
        &mut self,
        peer: Mac,
        peer_ip: Option<Ipv4Addr>,
        key_id: u8,
        now: Instant,
    ) -> bool {
        let _ = (peer, peer_ip, key_id, now);
        unimplemented!("SEP in progress")
    }

    /// A SEP message received from `from` (the frame's source MAC, already authenticated as a group frame).
    /// On error nothing is sent (silent drop); the caller counts the reason.
    pub fn handle_message(&mut self, from: Mac, msg: &[u8], now: Instant) -> Result<(), SepError> {
        let _ = (from, msg, now);
        unimplemented!("SEP in progress")
    }

    /// Retransmissions and give-ups due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let _ = now;
    }

    /// When [`Sep::handle_timeout`] should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// The next thing to do.
    pub fn poll_event(&mut self) -> Option<SepEvent> {
        None
    }

    /// An exchange with `peer` is in progress.
    pub fn in_progress(&self, peer: &Mac) -> bool {
        let _ = peer;
        false
    }
}
