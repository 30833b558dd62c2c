//! The key-exchange drivers: each owns its sockets and its clock around a sans-I/O machine, and changes an
//! engine's SAs only through the typed SA port ([`crate::runtime::sa_port::SaPort`]).
//!
//! - [`ike`]: IKEv2 (`[ike]`), registered in [`crate::REGISTRY`].
//! - [`psp_kx`]: PSP's TLS key exchange, configured by the IP engine's `[psp]` section.

// layers: ike, psp_kx
pub mod ike;
pub mod psp_kx;
