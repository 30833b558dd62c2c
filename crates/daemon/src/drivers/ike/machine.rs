//! What the driver needs of the IKE state machine ([`Machine`], which `netveil_ike::machine::Endpoint` implements;
//! see [`super::endpoint`]), and how its failures read ([`explain`]): what the driver loop and the control socket's
//! side both use.

use netveil_ike::event::{Event, Failure, IkeSaId, Transmit};
use netveil_ike::machine::Started;
use std::net::SocketAddr;
use std::time::Instant;

/// What the driver needs of the IKE state machine: `netveil_ike::machine::Endpoint`'s API (crates/ike, see
/// `api.md`), as a trait so that the loop is tested with a scripted machine.
pub trait Machine: Send {
    fn initiate(
        &mut self,
        connection: &str,
        child: Option<&str>,
        now: Instant,
    ) -> Result<IkeSaId, String>;
    /// Starts `child` of `connection` (None: its first) where strongSwan would: in the connection's IKE SA if it
    /// has one (CREATE_CHILD_SA, queued until that SA is up), else in a new IKE SA
    /// (`netveil_ike::machine::Endpoint::start_child`). A machine without it starts a new IKE SA each time.
    fn start_child(
        &mut self,
        connection: &str,
        child: Option<&str>,
        now: Instant,
    ) -> Result<Started, String> {
        self.initiate(connection, child, now).map(Started::New)
    }
    /// Deletes an IKE SA (INFORMATIONAL DELETE; its children go with it).
    fn terminate(&mut self, ike_sa: IkeSaId, now: Instant) -> Result<(), String>;
    fn handle_datagram(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        bytes: &[u8],
    );
    fn handle_timeout(&mut self, now: Instant);
    fn poll_transmit(&mut self) -> Option<Transmit>;
    fn poll_event(&mut self) -> Option<Event>;
    fn poll_timeout(&self) -> Option<Instant>;
    /// The chosen IKE proposal of an SA, in strongSwan's syntax (for the log).
    fn ike_proposal(&self, _ike_sa: IkeSaId) -> Option<String> {
        None
    }
    /// For `netveil status` (see [`super::control`]).
    fn status(&self, _now: Instant) -> Vec<netveil_ike::machine::IkeSaStatus> {
        Vec::new()
    }
    /// For `netveil keys --wireshark` only: secrets.
    fn wireshark_keys(&self) -> Vec<(IkeSaId, netveil_ike::machine::WiresharkKeys)> {
        Vec::new()
    }
    /// The data plane received authentic traffic on these CHILD_SAs' inbound SAs (dead peer detection waits).
    fn child_traffic(&mut self, inbound_spis: &[u32], now: Instant) {
        let _ = (inbound_spis, now);
    }
    /// Deletes one CHILD_SA by its inbound SPI (`netveil terminate --child`).
    fn delete_child(
        &mut self,
        _ike_sa: IkeSaId,
        _inbound_spi: u32,
        _now: Instant,
    ) -> Result<(), String> {
        Err("not supported".into())
    }
}

/// A failure as a user can act on it.
pub fn explain(f: &Failure) -> String {
    let ts = |v: &[netveil_ike::config::TsSpec]| {
        v.iter()
            .map(|t| {
                let mut s = format!("{}/{}", t.addr, t.prefix);
                if t.protocol != 0 || t.ports != (0, 65535) {
                    s.push_str(&format!("[{}/{}-{}]", t.protocol, t.ports.0, t.ports.1));
                }
                s
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match f {
        // The initiator: a responder answers NO_PROPOSAL_CHOSEN / TS_UNACCEPTABLE without its own.
        Failure::NoProposalChosen { ours, theirs } if theirs.is_empty() => format!(
            "the peer answered NO_PROPOSAL_CHOSEN: none of ours is acceptable to it, ours {} (it does not send \
             its own: its log lists them; align proposals / esp_proposals with the peer's)",
            ours.join(", ")
        ),
        Failure::TsUnacceptable { ours, theirs } if theirs.is_empty() => format!(
            "the peer answered TS_UNACCEPTABLE: our traffic selectors do not intersect its, ours {} (it does not \
             send its own: its log lists them; check local_ts / remote_ts on both sides)",
            ts(ours)
        ),
        Failure::NoProposalChosen { ours, theirs } => format!(
            "no proposal in common: ours {}, the peer's {} (align proposals / esp_proposals with the peer's)",
            ours.join(", "),
            theirs.join(", ")
        ),
        Failure::TsUnacceptable { ours, theirs } => format!(
            "traffic selectors do not intersect: ours {}, the peer's {} (check local_ts / remote_ts on both sides)",
            ts(ours),
            ts(theirs)
        ),
        Failure::AuthenticationFailed { id, by_peer: false } => format!(
            "the peer failed to authenticate as {id} (check the pre-shared key and remote.id)"
        ),
        Failure::AuthenticationFailed { id, by_peer: true } => format!(
            "the peer refused our authentication as {id} (check the pre-shared key and local.id, and the peer's \
             remote id)"
        ),
        Failure::Certificate { id, reason } => format!("authentication failed for {id}: {reason}"),
        Failure::Timeout => "the peer did not answer after every retransmission (is it reachable on UDP 500 \
                             and 4500, and does it run?)"
            .into(),
        Failure::PeerError { notify, name } => format!("the peer answered with error {name} ({notify})"),
        Failure::NoMatchingConnection(m) => format!(
            "no connection matches {m} (check local_addrs, remote_addrs and the ids, ours and the peer's)"
        ),
        Failure::UnexpectedId { got, want } => format!(
            "the peer authenticated as {got}, not as {want} (check remote.id, and the peer's local id); it was \
             told (AUTHENTICATION_FAILED)"
        ),
        Failure::Malformed(what) => {
            format!("the peer sent a malformed {what} (the peer's fault, or an incompatibility)")
        }
        Failure::ReauthFailed => "reauthentication failed (the new IKE SA's failure is logged before): this IKE \
                                  SA and its CHILD_SAs stay until over_time after reauth_time, then go"
            .into(),
    }
}
