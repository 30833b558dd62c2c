//! IPsec: ESP (RFC 4303) and AH (RFC 4302) as per-packet transforms on caller buffers.
//!
//! Nothing here does I/O or reads a clock: the daemon hands in a [`PacketBuf`](netveil_wire::PacketBuf) holding a
//! complete IP packet and the current time, and gets back the same buffer transformed in place (or a reason to drop
//! it). Outbound, [`esp::encapsulate`] and [`ah::encapsulate`] turn an IP packet into the complete protected IP
//! packet (outer header, optional RFC 3948 UDP header, ESP/AH); inbound, [`inbound::classify`] finds the ESP or AH
//! header and [`esp::decapsulate`] / [`ah::decapsulate`] verify and remove it.
//!
//! - [`suite`]: the algorithm suites (names as in strongSwan proposals) and their key objects.
//! - [`sa`]: an SA: parameters, keys, sequence counter or replay window, lifetime, counters.
//! - [`bundle`]: applying and checking an ordered bundle of SAs (e.g. ESP inside AH).

#![forbid(unsafe_code)]

pub mod ah;
pub mod bundle;
pub mod esp;
pub mod inbound;
mod iphdr;
pub mod sa;
pub mod suite;

pub use sa::{InboundSa, Mode, OutboundSa, Protocol, RxState, SaBase, SaError, SaParams, UdpEncap};
pub use suite::{AhSuite, EspSuite};

netveil_sa::drop_reasons! {
    /// Why ESP, AH or SA processing dropped a packet: what this crate decides itself. Policy decisions (discard,
    /// mismatch, missing SAs) and forwarding are the engine's, counted by the daemon's IP engine with these reasons
    /// included under the same names.
    pub enum Drop {
        /// Not a well-formed IP/ESP/AH packet (too short, bad lengths, bad version).
        Malformed => "malformed",
        /// No SA for the SPI (and destination).
        UnknownSpi => "unknown-spi",
        /// Sequence number already seen.
        Replayed => "replayed",
        /// Sequence number left of the anti-replay window.
        TooOld => "too-old",
        /// ICV did not verify.
        AuthFailed => "auth-failed",
        /// Decrypted trailer inconsistent (pad length, padding bytes).
        BadPadding => "bad-padding",
        /// Decrypted next header not what the SA's mode allows.
        BadNextHeader => "bad-next-header",
        /// A TFC dummy packet (next header 59): dropped by design.
        Dummy => "tfc-dummy",
        /// The SA reached a hard lifetime limit.
        SaExpired => "sa-expired",
        /// The SA's sequence numbers are used up: it needs a rekey.
        SeqExhausted => "seq-exhausted",
        /// The buffer had not enough head- or tailroom, or the result would exceed the maximum IP packet size.
        TooBig => "too-big",
        /// An AH/ESP packet for another protocol's SA, a fragment of one, a non-ESP UDP datagram, or an
        /// unsupported header.
        Unsupported => "unsupported",
        /// Outbound: the SA's next sequence number is above its durable reservation (the daemon has not synced the
        /// next high-water mark yet): the packet is dropped rather than risk a number a restart could repeat.
        /// Inbound: an authenticated packet's number is above the durable receive floor's ceiling (the daemon has
        /// not synced the next floor yet): dropped rather than accept a number a restart could accept again.
        SeqNotReserved => "seq-not-reserved",
    }
}

#[cfg(test)]
mod tests {
    use super::Drop;

    /// The names are what `netveil status` shows (as `rx:NAME`, `tx:NAME`) and scripts read: a rename must fail here.
    #[test]
    fn drop_names_are_pinned() {
        assert_eq!(
            Drop::NAMES,
            [
                "malformed",
                "unknown-spi",
                "replayed",
                "too-old",
                "auth-failed",
                "bad-padding",
                "bad-next-header",
                "tfc-dummy",
                "sa-expired",
                "seq-exhausted",
                "too-big",
                "unsupported",
                "seq-not-reserved",
            ]
        );
        assert_eq!(Drop::AuthFailed.to_string(), "auth-failed");
    }
}
