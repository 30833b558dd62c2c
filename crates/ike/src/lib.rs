//! IKEv2 (RFC 7296) as a sans-I/O protocol crate: bytes and time in, bytes, SA installs and events out. No
//! sockets, threads, clocks or global randomness: the daemon's IKE driver owns those and passes an RNG in.
//!
//! - [`message`]: the message codec: the header and every payload, as views that cannot panic once checked
//!   (`new_checked`) and owned representations with `parse`/`emit`/`buffer_len`.
//! - [`proposal`]: transforms and proposals, written and read in strongSwan's syntax (`aes256gcm16-prfsha384-ecp384`).
//! - [`keys`]: the key schedule (SKEYSEED, SK_*, child KEYMAT) and the AUTH payload's octets, over `crypto`'s prf+.
//! - [`sk`]: the Encrypted payload (SK, RFC 7296 3.14; AEAD per RFC 5282): seal and open in place.
//! - [`machine`]: the state machine: an [`machine::Endpoint`] with every IKE SA of a host, driven by datagrams and
//!   time, reporting datagrams to send and events.
//! - [`cert`]: X.509 certificates for public-key authentication: loading, chain validation (webpki), the peer's ID
//!   against its certificate; [`dn`]: distinguished names (swanctl's syntax to DER, compared, as text); [`id`]:
//!   identities, configured and received, matched and as text.
//! - [`config`]: connections and children as swanctl.conf has them, typed; [`event`]: what an endpoint reports
//!   (datagrams to send, CHILD_SAs to install, failures with their reasons).
#![forbid(unsafe_code)]

// layers: machine > event, id > config > cert, sk > keys > dn, message, proposal

pub mod cert;
pub mod config;
pub mod dn;
pub mod event;
pub mod id;
pub mod keys;
pub mod machine;
pub mod message;
pub mod proposal;
pub mod sk;
