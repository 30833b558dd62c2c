//! The engines: the data planes of `netveil up`, one wing each, registered in [`crate::REGISTRY`].
//!
//! - [`ip`]: ESP/AH and PSP over a TUN (raw and UDP sockets), its SA and policy database, nftables fail-closed.
//! - [`l2`]: l2sec on a LAN port (TAP + AF_PACKET), with its session protocol.
//! - [`pilsc`]: PILSC over netfilter queues: a rule file says what is protected.
//!
//! No engine names another.

// layers: ip, l2, pilsc
pub mod ip;
pub mod l2;
pub mod pilsc;
