//! strongSwan as a live IKEv2 peer in a lab: Debian's charon (5.9.x) with the kernel-libipsec plugin (user-space
//! ESP over a TUN device, ESP-in-UDP only), one charon per network namespace.
//!
//! Each [`Charon`] runs as `ip netns exec NS unshare -m --propagation private sh -c 'mount -t tmpfs tmpfs /run &&
//! exec charon'`: its own network namespace, its own `/run` (charon's pid file path is fixed, so two charons on one
//! machine need two), its own `strongswan.conf` (`STRONGSWAN_CONF`), swanctl directory (`SWANCTL_DIR`) and vici
//! socket, all in a directory of the [`Lab`](crate::lab::Lab). The process is charon itself, so stopping it (on drop)
//! also ends its mount namespace and the tmpfs on `/run`.
//!
//! Connections are typed ([`SwanConn`], [`SwanChild`]) and rendered to `swanctl.conf`; every value is checked first,
//! and one that could change the file's structure (newline, brace, quote, `#`, ...) is refused rather than escaped.
//! Loading and listing go through `swanctl` (the tool a strongSwan user has). [`Charon::list_sas`] parses
//! `swanctl --list-sas --pretty`: one `key = value` per line, where `--raw` puts a whole SA on one line separated by
//! spaces, which is ambiguous for values with spaces such as DN identities.
//!
//! Initiating and terminating go to charon's vici socket directly through a small synchronous client ([`Vici`]):
//! starting `swanctl` costs about 14 ms here, seven times the handshake being measured (see
//! [`Charon::handshake_ms`]), and vici's answer carries charon's own error message. The client speaks the
//! documented vici wire format (strongSwan's `src/libcharon/plugins/vici/README.md`); the one Rust implementation
//! (`rsvici`) needs an async runtime, which the synchronous lab does not have.
//!
//! The files: the typed configuration (`conf`), certificates (`pki`), the vici client (`vici`), SAs as swanctl lists
//! them (`sas`), charon in a namespace (`charon`) and two charons joined by a veth pair (`pair`).

mod charon;
mod check;
mod conf;
mod pair;
mod pki;
mod sas;
mod vici;

#[cfg(test)]
mod tests;

pub use charon::{charon_binary, missing, missing_tool, Charon, CharonOptions, CHARON_PLUGINS};
pub use conf::{
    render_swanctl_conf, StartAction, SwanAuth, SwanChild, SwanConn, SwanMode, SwanPsk, Unique,
};
pub use pair::{SwanPair, PAIR_IDS, PAIR_INNER, PAIR_OUTER};
pub use pki::{Credential, KeyType, Pki};
pub use sas::{parse_list_sas, parse_pretty, Algorithms, ChildSa, ChildState, IkeSa, IkeState};
pub use vici::{vici_decode, vici_encode_request, Tree, Vici};
