//! Google's PSP Security Protocol (PSP Architecture Specification, Nov 2022), offline core.
//!
//! - [`assoc`]: the association message of netveil's TLS key exchange (SPI, key), encoded and decoded.
//! - [`device`]: the device model: two master keys, generations, SPI allocation, rotation, the receive SA
//!   table and the specification's counters.
//! - [`header`]: a zero-copy view and a parsed form of the PSP header (16 bytes, plus the optional 8-byte
//!   virtualization cookie).
//! - [`kx`]: the key exchange's protocol logic, sans-I/O: what to send on connect, rotation, the receive SAs kept,
//!   the transmit SA to install; the daemon's driver moves its bytes over TLS.
//! - [`kdf`]: the SA key derivation (NIST SP 800-108 counter mode with AES-256-CMAC) from the two master keys.
//! - [`refcfg`]: the configuration files of Google's reference tools (`psp_encrypt`, `psp_decrypt`).
//! - [`xform`]: encapsulation and decapsulation in place on a [`netveil_wire::PacketBuf`], transport and tunnel
//!   mode, versions 0/1 (AES-GCM-128/256) and 2/3 (AES-GMAC-128/256).
//!
//! Key objects are built once per SA; per-packet work derives no keys and allocates nothing.

#![forbid(unsafe_code)]

// layers: kx, refcfg > device > assoc, xform > kdf > error, header
pub mod assoc;
pub mod device;
mod error;
pub mod header;
pub mod kdf;
pub mod kx;
pub mod refcfg;
pub mod xform;

pub use device::{Device, Receiver, RxAssoc, RxDrop, Stats, StatsSnapshot};
pub use error::Error;
pub use header::{Header, Repr, Version, UDP_PORT};
pub use kdf::MasterKeys;
pub use xform::{Decapsulated, Decrypter, Mode, RxSa, TxConfig, TxSa};
