//! Zero-copy packet views in the style of smoltcp.
//!
//! For each header `X` there is `X::Packet<T: AsRef<[u8]>>` (a view: `new_checked` verifies lengths once, after which
//! no accessor can panic; setters for `T: AsMut<[u8]>`) and usually `X::Repr` (a parsed high-level form with `parse`, `emit` and
//! `buffer_len`). [`PacketBuf`] is the owned buffer with head- and tailroom that the data plane encapsulates into in
//! place.

#![forbid(unsafe_code)]

pub mod ah;
pub mod arp;
pub mod buf;
pub mod checksum;
pub mod esp;
pub mod ethernet;
mod field;
pub mod icmp;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
pub mod udp;
pub mod udp_encap;

pub use buf::PacketBuf;
pub use ip::{flow_key, FlowInfo};
pub use udp_encap::{classify, Classified};

/// A packet was too short, malformed, or not what the caller expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Shorter than a header or a length field says.
    Truncated,
    /// A field holds a value this parser does not accept.
    Malformed,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => f.write_str("truncated packet"),
            Error::Malformed => f.write_str("malformed packet"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = core::result::Result<T, Error>;

/// IP protocol numbers used across netveil.
pub mod ip_proto {
    pub const HOPOPT: u8 = 0;
    pub const ICMP: u8 = 1;
    pub const IPIP: u8 = 4;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const IPV6: u8 = 41;
    pub const IPV6_ROUTE: u8 = 43;
    pub const IPV6_FRAG: u8 = 44;
    pub const ESP: u8 = 50;
    pub const AH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const IPV6_NONXT: u8 = 59;
    pub const IPV6_OPTS: u8 = 60;
    /// RFC 3692 experimental value; used by ESP's dummy (TFC) packets as "no next header".
    pub const NO_NEXT_HEADER: u8 = 59;
}
