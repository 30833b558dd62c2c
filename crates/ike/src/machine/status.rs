//! What `netveil status` shows of the endpoint (as `swanctl --list-sas`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::sa::State;
use super::Endpoint;
use crate::config::{Mode, TsSpec};
use crate::event::IkeSaId;
use crate::keys::Role;

/// One CHILD_SA in [`IkeSaStatus`].
#[derive(Debug, Clone, PartialEq)]
pub struct ChildStatus {
    pub name: String,
    pub inbound_spi: u32,
    pub outbound_spi: u32,
    pub mode: Mode,
    /// The selected ESP proposal in strongSwan's syntax.
    pub proposal: String,
    pub local_ts: Vec<TsSpec>,
    pub remote_ts: Vec<TsSpec>,
}

/// One IKE SA, as `swanctl --list-sas` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct IkeSaStatus {
    pub id: IkeSaId,
    pub connection: String,
    /// `CONNECTING`, `ESTABLISHED` or `DELETING`, as strongSwan names them.
    pub state: &'static str,
    pub initiator: bool,
    pub spi_i: u64,
    pub spi_r: u64,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The selected IKE proposal in strongSwan's syntax (empty before IKE_SA_INIT completes).
    pub proposal: String,
    /// A NAT was seen (either side) or `encap` forced UDP encapsulation.
    pub nat: bool,
    /// Our address was translated (the peer's NAT_DETECTION_DESTINATION_IP did not match).
    pub nat_local: bool,
    /// The peer's address was translated (or faked, as strongSwan's `encap` does).
    pub nat_remote: bool,
    /// Since the SA was created.
    pub age: Duration,
    pub children: Vec<ChildStatus>,
}

impl Endpoint {
    /// For `netveil status` (as swanctl --list-sas): one entry per IKE SA with its children.
    pub fn status(&self, now: Instant) -> Vec<IkeSaStatus> {
        self.sas
            .values()
            .map(|sa| IkeSaStatus {
                id: sa.id,
                connection: self.connections[sa.conn].name.clone(),
                state: match sa.state {
                    State::Established => "ESTABLISHED",
                    State::Deleting => "DELETING",
                    State::Rekeyed => "REKEYED",
                    _ => "CONNECTING",
                },
                initiator: sa.role == Role::Initiator,
                spi_i: sa.spi_i,
                spi_r: sa.spi_r,
                local: sa.local,
                remote: sa.remote,
                proposal: sa
                    .proposal
                    .as_ref()
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
                nat: sa.nat_local || sa.nat_remote || self.connections[sa.conn].encap,
                nat_local: sa.nat_local,
                nat_remote: sa.nat_remote,
                age: now.saturating_duration_since(sa.created),
                children: sa
                    .children
                    .iter()
                    .map(|c| ChildStatus {
                        name: c.name.clone(),
                        inbound_spi: c.inbound_spi,
                        outbound_spi: c.outbound_spi,
                        mode: c.mode,
                        proposal: c.proposal.to_string(),
                        local_ts: c.local_ts.clone(),
                        remote_ts: c.remote_ts.clone(),
                    })
                    .collect(),
            })
            .collect()
    }
}
