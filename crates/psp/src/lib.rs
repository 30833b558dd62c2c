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

pub mod assoc;
pub mod device;
pub mod header;
pub mod kdf;
pub mod kx;
pub mod refcfg;
pub mod xform;

pub use device::{Device, Receiver, RxAssoc, RxDrop, Stats, StatsSnapshot};
pub use header::{Header, Repr, Version};
pub use kdf::MasterKeys;
pub use xform::{Decapsulated, Decrypter, Mode, RxSa, TxConfig, TxSa};

/// The UDP destination port of PSP.
pub const UDP_PORT: u16 = 1000;

netveil_sa::drop_reasons! {
    /// Why a packet could not be encapsulated or decapsulated (the transform's reasons; the device adds its own
    /// in [`RxDrop`]). [`Error::name`] gives stable names for counters.
    pub enum Error {
        /// Not a PSP packet (not UDP to port 1000): not a failure of PSP, the caller may pass it on.
        NotPsp => "not-psp",
        /// A header or length field is inconsistent, or the packet is too short.
        Malformed => "malformed",
        /// A PSP version this implementation does not know (4..=15).
        UnsupportedVersion => "unsupported-version",
        /// The crypt offset reaches past the end of the payload.
        CryptOffset => "crypt-offset-too-large",
        /// Not enough head- or tailroom in the buffer, or the packet would exceed 65535 bytes.
        NoRoom => "no-room",
        /// The ICV did not verify.
        Auth => "auth-failed",
        /// The IV counter is exhausted: the SA must be rekeyed.
        IvExhausted => "iv-exhausted",
        /// Transport mode cannot carry an IPv4 fragment (tunnel mode can).
        Fragment => "fragment-in-transport-mode",
    }
}
