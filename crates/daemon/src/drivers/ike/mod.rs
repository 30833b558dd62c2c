//! The IKEv2 key-exchange driver: the `[ike]` section ([`config`]), its sockets on UDP 500 and 4500
//! ([`sockets`], port 4500 shared with the IP engine's ESP-in-UDP socket), the loop around the sans-I/O state
//! machine of `netveil_ike` ([`driver`], [`endpoint`]) and the installation of the CHILD_SAs it negotiates in the
//! IP engine through the typed port ([`install`]).
//!
//! It registers in [`crate::REGISTRY`] with a top-level section of its own, not through the IP engine's
//! `Prepared::drivers` as PSP does: `[ike]` is not an IP engine section (PSP's key exchange reads `[psp]`, which
//! the engine needs for its data plane too), so the engine parses nothing of IKE and knows nothing of it, and the
//! runtime already refuses a driver without an engine that installs SAs (`[interface]`), naming `ike`. What the
//! driver would want of `[interface]` (its socket mark) is its own key, `[ike] socket_mark`, with the same default.

// layers: section > driver > control > install > config, endpoint > machine, sockets, values
pub mod config;
pub mod control;
pub mod driver;
pub mod endpoint;
pub mod install;
pub mod machine;
mod section;
pub mod sockets;
mod values;

pub use section::{spawn, IkeDriver, IkeSection};

#[cfg(test)]
mod tests;
