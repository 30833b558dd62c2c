//! netveil: user-space packet security for Linux. This library holds the daemon and the tools behind the `netveil`
//! command; the protocols live in their own crates (`netveil-ipsec`, ...).
pub mod config;
