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

// layers: bundle > ah > esp > inbound > iphdr, sa > drops, suite
pub mod ah;
pub mod bundle;
mod drops;
pub mod esp;
pub mod inbound;
mod iphdr;
pub mod sa;
pub mod suite;

pub use drops::Drop;
pub use sa::{InboundSa, Mode, OutboundSa, Protocol, RxState, SaBase, SaError, SaParams, UdpEncap};
pub use suite::{AhSuite, EspSuite};

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
