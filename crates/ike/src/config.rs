//! What an IKE endpoint is told to do: connections shaped like swanctl.conf's (`connections.<name>` with `local`,
//! `remote` and `children.<name>`), as plain typed values. The daemon's IKE driver builds them from its TOML
//! section (every error naming its key); the state machine only reads them.

use crate::cert::Certificate;
use crate::keys::Secret;
use crate::proposal::Proposal;
use netveil_crypto::sig::PrivateKey;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// An IKE identity (RFC 7296 3.5), as swanctl's `id` writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// `%any`: a remote identity that accepts whatever the peer authenticates as (never a local one).
    Any,
    Ipv4(std::net::Ipv4Addr),
    Ipv6(std::net::Ipv6Addr),
    /// A fully qualified domain name (`vpn.example.org`, or swanctl's `@name`).
    Fqdn(String),
    /// An RFC 822 address (`user@example.org`).
    Email(String),
    /// A distinguished name, DER-encoded (as in a certificate's subject).
    Dn(Vec<u8>),
    /// An opaque key id (`@#hex` in swanctl).
    KeyId(Vec<u8>),
}

/// How one side authenticates (swanctl's `local.auth` / `remote.auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMethod {
    /// A pre-shared key (`auth = psk`); the secret is the connection's [`Connection::psk`].
    Psk,
    /// Public-key signatures with X.509 certificates (`auth = pubkey`).
    PubKey(PubKeyCreds),
}

/// The credentials of `auth = pubkey`. Local side: `certs` is our certificate (first) and the intermediates sent
/// with it, `key` its private key. Remote side: `cacerts` the CAs the peer's chain must lead to, or `certs` the
/// peer's certificates pinned (one of them must be the peer's, exactly).
#[derive(Debug, Clone, Default)]
pub struct PubKeyCreds {
    pub certs: Vec<Certificate>,
    pub cacerts: Vec<Certificate>,
    /// Local side only; zeroized by AWS-LC when the last reference goes, never printed.
    pub key: Option<Arc<PrivateKey>>,
}

impl PartialEq for PubKeyCreds {
    fn eq(&self, o: &PubKeyCreds) -> bool {
        self.certs == o.certs
            && self.cacerts == o.cacerts
            && self.key.as_ref().map(|k| k.public_key()) == o.key.as_ref().map(|k| k.public_key())
    }
}

impl Eq for PubKeyCreds {}

/// One authentication round of one side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthRound {
    pub id: Identity,
    pub method: AuthMethod,
}

/// A traffic selector as configured (swanctl's `local_ts` / `remote_ts`: `10.0.0.0/24[tcp/80]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TsSpec {
    /// The network's address (host bits zero) and prefix length.
    pub addr: IpAddr,
    pub prefix: u8,
    /// IP protocol, 0 for any.
    pub protocol: u8,
    /// Inclusive port range; (0, 65535) for any.
    pub ports: (u16, u16),
}

/// ESP's mode for a child (swanctl's `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Tunnel,
    Transport,
}

/// What to do at start, or when the peer is found dead or closes (swanctl's `start_action`, `dpd_action`,
/// `close_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    None,
    /// Initiate (again).
    Start,
    /// Install a trap: the first covered packet initiates (the acquire event), and is not sent in clear.
    Trap,
}

/// Retransmission of requests (strongSwan's `retransmit_timeout`, `retransmit_base`, `retransmit_tries`): try `n`
/// waits `timeout * base^n`, and after `tries` retransmissions the exchange (and the IKE SA) fails.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retransmit {
    pub timeout: Duration,
    pub base: f64,
    pub tries: u32,
}

impl Default for Retransmit {
    /// strongSwan's defaults: 4 s, 1.8, 5 tries (165 s until the exchange fails).
    fn default() -> Self {
        Retransmit {
            timeout: Duration::from_secs(4),
            base: 1.8,
            tries: 5,
        }
    }
}

/// Rekeying times of an SA (swanctl's `rekey_time`, `life_time`, `rand_time`): rekey at `rekey - random(0..rand)`,
/// hard expiry at `life`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    pub rekey: Duration,
    pub life: Duration,
    pub rand: Duration,
}

/// A CHILD_SA configuration (swanctl's `children.<name>`).
#[derive(Debug, Clone, PartialEq)]
pub struct ChildConfig {
    pub name: String,
    pub local_ts: Vec<TsSpec>,
    pub remote_ts: Vec<TsSpec>,
    /// ESP proposals (`esp_proposals`), with a KE group for PFS on CREATE_CHILD_SA.
    pub esp_proposals: Vec<Proposal>,
    pub mode: Mode,
    pub lifetimes: Lifetimes,
    pub start_action: Action,
    pub dpd_action: Action,
    pub close_action: Action,
    /// Replay window in packets (swanctl's `replay_window`, default 32).
    pub replay_window: u32,
}

/// An IKE connection (swanctl's `connections.<name>`).
#[derive(Debug, Clone, PartialEq)]
pub struct Connection {
    pub name: String,
    /// Our addresses (`local_addrs`); the first is the one we initiate from.
    pub local_addrs: Vec<IpAddr>,
    /// The peer's addresses (`remote_addrs`); the first is the one we initiate to. Empty: responder only.
    pub remote_addrs: Vec<IpAddr>,
    /// The peer's IKE port (`remote_port`, 500).
    pub remote_port: u16,
    /// IKE proposals (`proposals`), in our order of preference.
    pub proposals: Vec<Proposal>,
    /// Force UDP encapsulation of ESP (`encap`): the initiator moves to port 4500 after IKE_SA_INIT and claims NAT
    /// in its NAT detection notifies, as strongSwan does.
    pub encap: bool,
    /// IKE fragmentation (RFC 7383, `fragmentation`), offered and used above the fragment size.
    pub fragmentation: bool,
    pub local: AuthRound,
    pub remote: AuthRound,
    /// The pre-shared key for `AuthMethod::Psk` (swanctl's `secrets.ike<suffix>`), zeroized on drop.
    pub psk: Option<Secret>,
    /// Liveness checks after this long without traffic from the peer (`dpd_delay`); `None`: never.
    pub dpd_delay: Option<Duration>,
    /// IKE SA rekeying (`rekey_time`, `over_time`, `rand_time`); `life - rekey` is `over_time`.
    pub lifetimes: Lifetimes,
    /// IKE SA reauthentication (`reauth_time`; zero: never): after `reauth - random(0..lifetimes.rand)` a new IKE
    /// SA with a full IKE_SA_INIT and IKE_AUTH replaces the SA and re-creates its CHILD_SAs, and only then is the
    /// old one deleted (make-before-break). If the new one fails, the old one goes `over_time` later.
    pub reauth: Duration,
    pub retransmit: Retransmit,
    pub children: Vec<ChildConfig>,
}
