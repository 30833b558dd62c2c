//! How a host is set up ([`NodeConfig`]), its limits and timings, and the group keys of a sender under its
//! configuration.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use ed25519_dalek::{SigningKey, VerifyingKey};
use zeroize::Zeroizing;

use crate::error::ConfigError;
use crate::header::Version;
use crate::keys::SessionKeys;
use crate::sep::{DhGroup, Mac};
use crate::suite::Suite;

/// Broadcast MAC address.
pub const BROADCAST: Mac = [0xff; 6];

/// Most group senders remembered (each costs a key schedule); beyond, the least recently heard is forgotten.
pub const MAX_GROUP_SENDERS: usize = 4096;

/// After a failed rekey, the next try.
pub(super) const REKEY_RETRY: Duration = Duration::from_secs(5);

/// Most peers with state (sessions or queues).
pub const MAX_PEERS: usize = 4096;

/// When a version-1 host announces its epoch again after the start (the first goes out at once).
pub(super) const ANNOUNCE_AGAIN: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(3)];

/// After an initiation the rate limit postponed, the next try.
pub(super) const SEP_RETRY: Duration = Duration::from_millis(50);

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

pub(super) fn group_keys(
    cfg: &NodeConfig,
    src: Mac,
    epoch: u64,
) -> Result<SessionKeys, ConfigError> {
    match cfg.group_suite.version() {
        Version::V0 => SessionKeys::group_sender(cfg.group_suite, &cfg.group_secret, src),
        Version::V1 => {
            SessionKeys::group_sender_epoch(cfg.group_suite, &cfg.group_secret, src, epoch)
        }
    }
}
