//! What an IKE endpoint tells its driver: datagrams to send and events (SAs up and down, failures with reasons a
//! user can act on). The driver owns the sockets and the clock; it installs CHILD_SAs in the data plane through
//! the daemon's typed SA interface only.

use crate::config::{Mode, TsSpec};
use crate::keys::Secret;
use crate::proposal::Proposal;
use std::net::SocketAddr;

/// A datagram to send. On port 4500 the driver writes the non-ESP marker (four zero bytes) in front of `bytes`
/// (and strips it from what it receives there before handing it in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Our address and port it leaves from (500 or 4500).
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// One IKE message (or one fragment of one).
    pub bytes: Vec<u8>,
}

/// An IKE SA, named for the life of the endpoint (never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IkeSaId(pub u64);

/// One direction of an ESP CHILD_SA, ready to install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EspSa {
    pub spi: u32,
    /// Encryption key (with the 4-byte salt for the AEADs, as ESP takes it).
    pub encr_key: Secret,
    /// Integrity key (empty with an AEAD).
    pub integ_key: Secret,
}

/// A CHILD_SA established (or rekeyed: `replaces` names the old one's inbound SPI, to be removed once the new one
/// carries traffic, make-before-break).
#[derive(Debug, Clone, PartialEq)]
pub struct ChildSa {
    pub ike_sa: IkeSaId,
    pub connection: String,
    pub child: String,
    /// The selected ESP proposal (one transform of each type).
    pub proposal: Proposal,
    pub mode: Mode,
    /// Our address and the peer's, with the ports ESP-in-UDP uses (both 4500 after a move to NAT-T), or `None`
    /// for raw ESP (IP protocol 50).
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub udp_encap: bool,
    pub inbound: EspSa,
    pub outbound: EspSa,
    /// The narrowed traffic selectors.
    pub local_ts: Vec<TsSpec>,
    pub remote_ts: Vec<TsSpec>,
    pub replay_window: u32,
    pub replaces: Option<u32>,
}

/// Why an exchange or an SA failed, in terms a user can act on.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// No proposal in common: ours and the peer's, as strongSwan's syntax prints them.
    NoProposalChosen {
        ours: Vec<String>,
        theirs: Vec<String>,
    },
    /// The peer's traffic selectors and ours do not intersect.
    TsUnacceptable {
        ours: Vec<TsSpec>,
        theirs: Vec<TsSpec>,
    },
    /// The peer failed to authenticate as `id` (or we failed at the peer: `by_peer`).
    AuthenticationFailed { id: String, by_peer: bool },
    /// The peer's certificate authentication as `id` failed, for `reason` (`authentication failed for <id>:
    /// <reason>`).
    Certificate {
        id: String,
        reason: crate::cert::CertFailure,
    },
    /// The peer authenticated as `got`, not as the configured remote id `want` (as text).
    UnexpectedId { got: String, want: String },
    /// The peer sent an authentic but malformed message (what it was and what was wrong).
    Malformed(String),
    /// The peer did not answer after every retransmission.
    Timeout,
    /// The peer sent an error notify (its type number and name).
    PeerError { notify: u16, name: String },
    /// No connection matches what the peer asks for, as strongSwan's `looking for peer configs matching
    /// ours[our id]...theirs[their id]` says it: our address and the identity the peer asked us to be (IDr;
    /// `None`: it named none, or IKE_AUTH did not come yet), its address and the identity it claimed (IDi; `None`
    /// before IKE_AUTH); and what was expected: each configured connection as `name: local[id]...remote[id]`
    /// (at most [`NoMatch::SHOWN`], then how many more). `why`: what ruled out the connection that names the
    /// peer's identity, if one does.
    NoMatchingConnection(Box<NoMatch>),
    /// The reauthentication (`reauth_time`) of the IKE SA the event names failed (why: the new IKE SA's own
    /// failure, reported before): the SA and its CHILD_SAs stay until `over_time` after the reauth time, then go.
    ReauthFailed,
}

/// What an endpoint reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    IkeSaUp {
        ike_sa: IkeSaId,
        connection: String,
    },
    IkeSaDown {
        ike_sa: IkeSaId,
        connection: String,
    },
    ChildSaUp(Box<ChildSa>),
    /// A CHILD_SA removed: remove both SAs (by their SPIs) and the policies installed for it.
    ChildSaDown {
        ike_sa: IkeSaId,
        child: String,
        inbound_spi: u32,
        outbound_spi: u32,
    },
    /// An exchange or an SA failed. `child`: the CHILD_SA whose creation failed (its IKE SA stays), or `None`
    /// when the IKE SA itself failed (and with it every child started in it, queued ones included).
    Failed {
        connection: String,
        ike_sa: Option<IkeSaId>,
        child: Option<String>,
        failure: Failure,
    },
}

/// The details of [`Failure::NoMatchingConnection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoMatch {
    pub local: std::net::IpAddr,
    pub remote: std::net::IpAddr,
    pub local_id: Option<String>,
    pub remote_id: Option<String>,
    pub expected: Vec<String>,
    /// Configured connections not shown in `expected`.
    pub more: usize,
    pub why: Option<String>,
}

impl NoMatch {
    /// How many connections `expected` lists at most.
    pub const SHOWN: usize = 4;
}

impl core::fmt::Display for NoMatch {
    /// `10.0.0.1[%any]...10.0.0.2[bob.example]; expected net: 10.0.0.1[a.example]...10.0.0.2[b.example]`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let id = |i: &Option<String>| i.clone().unwrap_or_else(|| "%any".into());
        write!(
            f,
            "{}[{}]...{}[{}]",
            self.local,
            id(&self.local_id),
            self.remote,
            id(&self.remote_id)
        )?;
        if let Some(w) = &self.why {
            write!(f, " ({w})")?;
        }
        if self.expected.is_empty() {
            f.write_str("; no connection is configured")
        } else {
            write!(f, "; expected {}", self.expected.join(", "))?;
            if self.more > 0 {
                write!(f, " and {} more", self.more)?;
            }
            Ok(())
        }
    }
}
