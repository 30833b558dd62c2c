//! The I/O layer: the only place (with the daemon) that makes syscalls.
//!
//! - [`tun`]: TUN devices (tun-rs), with virtio-net header offloads so that one read can carry a TCP super-packet
//!   that is split into MTU-sized IP packets, and writes coalesce (GRO, our own: runs of segments gathered into
//!   one `writev`, shared with the TAP).
//! - [`packet`]: layer 2: `AF_PACKET` sockets bound to an interface (whole Ethernet frames, batched) and TAP
//!   devices.
//! - [`raw`]: raw IP sockets (receive ESP/AH; send complete IP packets with header included), batched with
//!   recvmmsg/sendmmsg, with an optional fwmark so that netveil's own packets bypass its routes.
//! - [`nfqueue`]: netfilter queues (the host's own packets, taken from its stack and given back with verdicts),
//!   batched.
//! - [`udp`]: UDP sockets for ESP-in-UDP (RFC 3948, port 4500), batched, with the local destination address,
//!   and UDP GSO (send one buffer of equally sized datagrams, or gather them from separate buffers) / GRO (receive
//!   coalesced datagrams).
//!
//! Conventions shared by all modules:
//! - Receive calls place each packet at exactly `headroom` bytes into its [`PacketBuf`] (`reset(headroom)`), so
//!   callers can push headers in front later without copying.
//! - Batched calls handle at most [`MAX_BATCH`] packets per call (extra buffers are left untouched / unsent
//!   until the next call for receives; sends loop internally over all packets).
//! - Receive timeouts (`set_recv_timeout`) surface as [`std::io::ErrorKind::WouldBlock`].
//! - No allocation happens per packet: socket batch scratch (mmsghdr/iovec/sockaddr/cmsg arrays) is allocated
//!   once per socket and kept behind a `Mutex` (one per direction, so one receiving and one sending thread never
//!   contend).

pub use netveil_wire::PacketBuf;

// layers: filter, nfqueue, os, packet, tun > raw, udp > gro, sys
mod gro;
mod sys;

pub mod filter;
pub mod nfqueue;
pub mod os;
pub mod packet;
pub mod raw;
pub mod tun;
pub mod udp;

pub use packet::{PacketSocket, Tap};
pub use raw::RawSocket;
pub use tun::{Tun, TunConfig};
pub use udp::{segments, UdpGroMeta, UdpMeta, UdpSocket};

/// The most packets one batched socket call handles (mmsghdr array size).
pub const MAX_BATCH: usize = sys::MAX_BATCH;
