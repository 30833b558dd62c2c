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

pub use sa::{Mode, Protocol, Sa, SaParams, UdpEncap};
pub use suite::{AhSuite, EspSuite};

/// Why a packet was dropped. Every drop is counted under one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Drop {
    /// Not a well-formed IP/ESP/AH packet (too short, bad lengths, bad version).
    Malformed,
    /// No SA for the SPI (and destination).
    UnknownSpi,
    /// Sequence number already seen.
    Replayed,
    /// Sequence number left of the anti-replay window.
    TooOld,
    /// ICV did not verify.
    AuthFailed,
    /// Decrypted trailer inconsistent (pad length, padding bytes).
    BadPadding,
    /// Decrypted next header not what the SA's mode allows.
    BadNextHeader,
    /// A TFC dummy packet (next header 59): dropped by design.
    Dummy,
    /// Decapsulated traffic not allowed by the inbound policy for the SAs it came through.
    PolicyMismatch,
    /// Traffic a protect policy covers arrived without protection.
    ClearCovered,
    /// A discard policy matched.
    PolicyDiscard,
    /// The SA reached a hard lifetime limit.
    SaExpired,
    /// The SA's sequence numbers are used up: it needs a rekey.
    SeqExhausted,
    /// The buffer had not enough head- or tailroom, or the result would exceed the maximum IP packet size.
    TooBig,
    /// An AH/ESP packet for another protocol's SA, a non-ESP UDP datagram, or an unsupported header.
    Unsupported,
    /// A bypassed packet's TTL or hop limit ran out (netveil forwards bypassed TUN traffic like a router).
    TtlExceeded,
    /// No SA is installed yet for traffic a protect policy covers (e.g. PSP before the peer's association).
    NoSa,
    /// The SA's next sequence number is above its durable reservation (the daemon has not synced the next
    /// high-water mark yet): the packet is dropped rather than risk a number a restart could repeat.
    SeqNotReserved,
    /// A later fragment whose first fragment was not seen (or is forgotten), where policies select by port: its
    /// policy cannot be known, so it is not sent (RFC 4301 section 7).
    FragmentNoState,
}

impl Drop {
    pub const ALL: [Drop; 19] = [
        Drop::Malformed,
        Drop::UnknownSpi,
        Drop::Replayed,
        Drop::TooOld,
        Drop::AuthFailed,
        Drop::BadPadding,
        Drop::BadNextHeader,
        Drop::Dummy,
        Drop::PolicyMismatch,
        Drop::ClearCovered,
        Drop::PolicyDiscard,
        Drop::SaExpired,
        Drop::SeqExhausted,
        Drop::TooBig,
        Drop::Unsupported,
        Drop::TtlExceeded,
        Drop::NoSa,
        Drop::SeqNotReserved,
        Drop::FragmentNoState,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Drop::Malformed => "malformed",
            Drop::UnknownSpi => "unknown-spi",
            Drop::Replayed => "replayed",
            Drop::TooOld => "too-old",
            Drop::AuthFailed => "auth-failed",
            Drop::BadPadding => "bad-padding",
            Drop::BadNextHeader => "bad-next-header",
            Drop::Dummy => "tfc-dummy",
            Drop::PolicyMismatch => "policy-mismatch",
            Drop::ClearCovered => "clear-but-protected",
            Drop::PolicyDiscard => "policy-discard",
            Drop::SaExpired => "sa-expired",
            Drop::SeqExhausted => "seq-exhausted",
            Drop::TooBig => "too-big",
            Drop::Unsupported => "unsupported",
            Drop::TtlExceeded => "ttl-exceeded",
            Drop::NoSa => "no-sa",
            Drop::SeqNotReserved => "seq-not-reserved",
            Drop::FragmentNoState => "fragment-without-first",
        }
    }
}

impl netveil_sa::counters::Reason for Drop {
    const COUNT: usize = Drop::ALL.len();
    fn index(self) -> usize {
        self as usize
    }
    fn name(index: usize) -> &'static str {
        Drop::ALL.get(index).map(|d| d.name()).unwrap_or("?")
    }
}

impl core::fmt::Display for Drop {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
