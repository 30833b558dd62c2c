//! The IKEv2 state machine (RFC 7296), sans-I/O: an [`Endpoint`] holds every IKE SA of this host and is driven by
//! datagrams ([`Endpoint::handle_datagram`]) and time ([`Endpoint::handle_timeout`]); it answers with datagrams
//! ([`Endpoint::poll_transmit`]) and events ([`Endpoint::poll_event`]): SAs up and down, CHILD_SAs to install,
//! failures with their reasons. Time is whatever `Instant` the caller passes; all randomness comes from the RNG
//! given to [`Endpoint::new`].
//!
//! What it does: IKE_SA_INIT (both roles, INVALID_KE_PAYLOAD retry, COOKIE under load, NAT detection and the move
//! to port 4500), IKE_AUTH with pre-shared keys or certificates (RSA, ECDSA, Ed25519; RFC 7427) and the first CHILD_SA (traffic selector narrowing, ESP proposal
//! selection, transport mode), reliability (window size 1, retransmission with back-off, the responder's cached
//! response), INFORMATIONAL (DELETE of the IKE SA or of a CHILD_SA, liveness checks, DPD), CREATE_CHILD_SA for
//! CHILD_SAs (new ones and rekeys, with PFS, by API and by lifetime; the old one deleted after a rekey), and
//! rekeying the IKE SA (the children move to the new SA), IKE fragmentation (RFC 7383: encrypted messages above
//! [`Limits::fragment_len`] sent in fragments, fragments reassembled, when both ends announced it), and rekey
//! collisions (both ends rekey the same SA: the exchange with the higher initiator nonce goes on, the other is
//! refused with TEMPORARY_FAILURE and retried later if still needed), and hybrid IKE SAs (ML-KEM-768 as an
//! additional key exchange in IKE_INTERMEDIATE, RFC 9242 / RFC 9370: `intermediate`). Not yet: EAP.
//!
//! Where state lives (`endpoint`): each IKE SA is an entry of `sas` (by [`IkeSaId`](crate::event::IkeSaId),
//! never reused), found from a datagram by our own SPI (`by_spi`: SPIi when we initiated, SPIr when we responded;
//! random, never 0, unique on this endpoint). A half-open responder SA (IKE_SA_INIT answered, IKE_AUTH not yet) is also found by the peer's
//! (SPIi, address), so that a retransmitted IKE_SA_INIT gets the same answer; half-open SAs are capped
//! ([`Limits::half_open_max`]) and expire ([`Limits::half_open_timeout`]); above
//! [`Limits::cookie_threshold`] of them the responder asks for a cookie first (RFC 7296 2.6), statelessly.

// layers: child, rekey > auth, init > cookie, info, intermediate, pick, pubkey, reauth, status > endpoint
//   > framing > sa > frag, glue, limits
mod auth;
mod child;
mod cookie;
mod endpoint;
mod frag;
mod framing;
pub mod glue;
mod info;
mod init;
mod intermediate;
mod limits;
mod pick;
mod pubkey;
mod reauth;
mod rekey;
mod sa;
mod status;

pub use endpoint::{Counters, Endpoint, EndpointError, Started};
pub use frag::REASSEMBLY_BUDGET;
pub use limits::Limits;
pub use status::{wireshark_names, ChildStatus, IkeSaStatus, WiresharkKeys};

#[cfg(test)]
mod tests;
