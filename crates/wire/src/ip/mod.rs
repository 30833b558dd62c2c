//! Version-dispatching IP helpers.
//!
//! - [`Packet`]: the IPv4 or IPv6 view, chosen by the version nibble; [`Repr`]: the parsed header, and
//!   [`push_outer`], which puts a tunnel's outer headers in front of a packet.
//! - [`flow_key`]: the selectors a policy matches on ([`FlowInfo`]).
//! - [`Layout`]: where the headers end, for the transforms that insert or remove a header after them.
//! - [`Headers`]: all of the above that a packet path reads, parsed and checked once, to be carried along.
//! - The free functions on a packet's bytes, which keep no view: reads of the fixed header ([`version`],
//!   [`addrs`], [`own_len`], ...), fix-ups in place ([`decrement_hop_limit`], [`set_addresses`], [`fix_lengths`])
//!   and headers written in place ([`emit_ip_udp`], [`emit_udp_header`]).

// layers: view > layout > bytes, flow, repr > packet
mod bytes;
mod flow;
mod layout;
mod packet;
mod repr;
#[cfg(test)]
mod tests;
mod view;

pub use bytes::{
    addrs, decrement_hop_limit, dscp_ecn_df, dst_addr, emit_ip_udp, emit_udp_header, fix_lengths,
    ip_udp_header_len, own_len, ports, set_addresses, version, HopLimitError,
};
pub(crate) use flow::has_ports;
pub use flow::{flow_key, FlowInfo, Fragment, SCTP};
pub use layout::Layout;
pub use packet::Packet;
pub use repr::{push_outer, Repr};
pub use view::Headers;
