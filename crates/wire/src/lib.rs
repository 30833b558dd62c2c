//! Zero-copy packet views in the style of smoltcp.
//!
//! For each header `X` there is `X::Packet<T: AsRef<[u8]>>` (a view: `new_checked` verifies lengths once, after which
//! no accessor can panic; setters for `T: AsMut<[u8]>`) and usually `X::Repr` (a parsed high-level form with `parse`, `emit` and
//! `buffer_len`). [`PacketBuf`] is the owned buffer with head- and tailroom that the data plane encapsulates into in
//! place.

#![forbid(unsafe_code)]

// layers: icmp > arp, icmpv4, icmpv6, ip, udp_encap > ah, esp, ethernet, icmp_msg, ipv4, ipv6, tcp, udp > field > buf, checksum, error, ip_proto
pub mod ah;
pub mod arp;
pub mod buf;
pub mod checksum;
mod error;
pub mod esp;
pub mod ethernet;
mod field;
pub mod icmp;
mod icmp_msg;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
pub mod ip_proto;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
pub mod udp;
pub mod udp_encap;

pub use buf::PacketBuf;
pub use error::{Error, Result};
pub use ip::{flow_key, FlowInfo};
pub use udp_encap::{classify, Classified};
