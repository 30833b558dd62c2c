//! PSP key exchange driver: a mutually authenticated TLS 1.3 connection (rustls) between the two hosts, on which
//! each side allocates its receive SPI and key (`rx-assoc`) and sends them to its peer, which installs them as its
//! transmit SA (`tx-assoc`), as the kernel's PSP documentation and the specification's authors describe.
//!
//! The protocol logic (what to send on connect, when to rotate, which receive SAs to keep, version checks,
//! decoding) is the sans-I/O machine [`netveil_psp::kx::KeyExchange`]; this driver owns the sockets, the TLS
//! session and the clock, and only moves bytes and applies the machine's events:
//!
//! - The daemon with the higher outer address listens on `psp.control_port`; the one with the lower address
//!   connects, from the same port (so the connection is exactly `local:port <-> remote:port`, and the input
//!   filter lets nothing else of the peer's through), and reconnects every second while the peer is unreachable.
//!   Connections close with a reset (SO_LINGER 0), also when a daemon is killed, so that no TIME_WAIT state holds
//!   the fixed ports and a restarted daemon reconnects at once. The data plane keeps its SAs while the connection
//!   is down.
//! - The TLS handshake must finish within [`HANDSHAKE_DEADLINE`] as a whole (not only per read), so a peer that
//!   trickles bytes cannot hold the key exchange.
//! - Each side checks the other's certificate against `psp.peer_ca` and the name `psp.peer_name` (the client
//!   by TLS server-name verification, the server by checking the client certificate's names).
//! - It runs as a driver beside the IP engine ([`start_driver`]): its own thread, sockets and clock. It changes
//!   the data plane only through the engine's typed port ([`SaPort`](crate::runtime::sa_port::SaPort)): calls of the machine that change the
//!   device's receive SAs go through [`SaPort::psp_rx`](crate::runtime::sa_port::SaPort::psp_rx), which runs them under the device's write lock (the data
//!   plane does not take it: it decapsulates through the receive SAs the device republishes atomically) and
//!   refreshes the PSP socket's filter under the same lock, before the association that hands a new SPI out is
//!   written: the filter never refuses the peer's first packets with it.
//! - Once the connection is up, the machine is told so ([`KeyExchange::connected`](netveil_psp::kx::KeyExchange::connected)); the plaintext the peer sends
//!   goes to [`KeyExchange::handle_input`](netveil_psp::kx::KeyExchange::handle_input), what [`KeyExchange::poll_transmit`](netveil_psp::kx::KeyExchange::poll_transmit) returns is written.
//! - Events: `InstallTx` swaps the data plane's transmit SA ([`SaPort::psp_install_tx`](crate::runtime::sa_port::SaPort::psp_install_tx): read per packet without
//!   a lock), `AssocSent`/`InstallTx`/`Rotated` move the `status` counters ([`PspKxState`](crate::runtime::sa_port::PspKxState), shared with the
//!   engine's answers), `Failed` closes the connection (then the usual reconnection).
//! - Rotation (every `psp.rotate_seconds` since the last one, or on `netveil rotate`): the device rotates its
//!   master keys, then allocates a new receive SPI under the new key and sends it. The peer switches its
//!   transmit SA when the message arrives; packets still in flight with the old SPI decrypt because SAs one
//!   rotation old stay valid. Requests and the timer are served every 100 ms, also while disconnected.
//!
//! Messages (inside TLS): [`netveil_psp::assoc`].
//! Key material is zeroized after use and never logged.

// layers: section > driver > tls
mod driver;
mod section;
#[cfg(test)]
mod tests;
mod tls;

pub use driver::{is_initiator, listen, start_driver, PspDriver};
pub use section::{PspDriverConfig, PspKx};
pub use tls::{keygen, tls, Tls, HANDSHAKE_DEADLINE};
