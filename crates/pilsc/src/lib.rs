//! PILSC, "Protocol Independent Lightweight Secure Communication" (M. A. Güvensan and A. G. Yavuz): a flat rule
//! file says, per peer address, protocol and port, which of the host's own IPv4 packets are protected and with
//! which algorithm and key; protected packets keep their IP header, carry the IPv4 security option (type 130) and
//! keep their payload length.
//!
//! This crate is sans-I/O (see the architecture's protocol layer). What is here so far:
//! - [`rules`]: the paper's rule file (records of `Rule`, `Security`, `IP`, `Protocol`, `Port`, `Encryption`,
//!   `Applmode`, `Key` tags, `#` comments, optional `;` endings), checked with line numbers, duplicates removed,
//!   sorted most specific first, and the key file that names keys too long to write in a rule; the same rules in
//!   netveil's TOML (`[[pilsc.rule]]`, [`rules::from_toml`]), errors named by key.
//! - [`cipher`]: the algorithm table (the paper's numbers and netveil's names, key lengths).
//! - [`policy`]: the rules compiled into the policy engine the other protocols use, and what a packet is judged by
//!   (an ICMP error: the packet it quotes).
//! - [`packet`]: the security option's layout and the in-place transform of a packet (seal, open), with replay
//!   windows, for every algorithm of the table; a protected packet carries option 130 and no other.
//! - [`table`]: the keys of a rule file, one sealer and one opener each, shared by the rules that name the key.

#![forbid(unsafe_code)]

// layers: policy, table > packet, rules > cipher
pub mod cipher;
pub mod packet;
pub mod policy;
pub mod rules;
pub mod table;
