//! `netveil up`: the data plane.
//!
//! ```text
//!   apps ──► TUN ──► [tx thread] policy out ─► ESP/AH encapsulate ─► raw IP socket (fwmark) ──► wire
//!   apps ◄── TUN ◄── [rx thread] policy in  ◄─ ESP/AH decapsulate ◄─ raw ESP/AH + UDP 4500   ◄── wire
//! ```
//!
//! Setup is all-or-nothing: configuration is validated and every key schedule built before the first system change;
//! system changes (TUN, addresses, routes, rules, nftables) are recorded and undone if a later step fails and on
//! exit. Packets are read in batches into pre-allocated buffers with head- and tailroom and transformed in place.

// layers: section > setup > control, port > rx > tx > psp > policy > pmtu, shared > db, psp_state, nft > filters > config, drop
pub mod config;
pub mod control;
pub mod db;
pub mod drop;
pub mod filters;
pub mod nft;
mod pmtu;
mod policy;
pub mod port;
mod psp;
pub mod psp_state;
mod rx;
mod section;
mod setup;
mod shared;
#[cfg(test)]
mod tests;
mod tx;

pub use policy::{flow_key, flow_key_frag, FragCache};
pub use section::IpSection;
pub use setup::{host_addresses, preflight, preflight_check, prepare, start, IpEngine, Prepared};
pub use shared::{Datagram, Shared, TxRecord, BATCH, HEADROOM, TAILROOM};
pub use tx::{UdpOut, PSP_TX_SOCKETS};
