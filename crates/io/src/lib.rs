//! The I/O layer: the only place (with the daemon) that makes syscalls.
//!
//! - [`tun`]: TUN devices (tun-rs), with virtio-net header offloads so that one read can carry a TCP super-packet
//!   that is split into MTU-sized IP packets, and writes coalesce (GRO).
//! - [`raw`]: raw IP sockets (receive ESP/AH; send complete IP packets with header included), batched with
//!   recvmmsg/sendmmsg, with an optional fwmark so that netveil's own packets bypass its routes.
//! - [`udp`]: UDP sockets for ESP-in-UDP (RFC 3948, port 4500), batched, with the local destination address.
