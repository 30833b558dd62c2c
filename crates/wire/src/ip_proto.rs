//! IP protocol numbers used across netveil.

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
