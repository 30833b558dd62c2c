//! What SEP is configured with and gives back: [`SepConfig`], [`SepEvent`], [`Established`], [`SepError`],
//! [`DhGroup`], [`Mac`].

use std::net::Ipv4Addr;
use std::time::Duration;

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
    /// Exchanges started per second (as initiator and accepted as responder together), with a burst of as many;
    /// 0: no limit.
    pub max_starts_per_second: u32,
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
    /// Too many exchanges in progress: a request from a new peer is dropped.
    Busy,
    /// The rate limit on exchanges started: a request is dropped (or an initiation postponed).
    RateLimited,
    /// A REQUEST not fresher than one already seen from the same peer (a replay).
    Stale,
    /// The caller refused the IPv4 address the peer stated: it is bound to another MAC address (or the peer's
    /// configured address is another one).
    IpBound,
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
            SepError::Busy => "sep-busy",
            SepError::RateLimited => "sep-rate-limited",
            SepError::Stale => "sep-stale",
            SepError::IpBound => "sep-ip-bound",
        }
    }
}

impl core::fmt::Display for SepError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
