//! UDP sockets for ESP-in-UDP (RFC 3948), batched, reporting each datagram's local destination address.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::time::Duration;

use netveil_wire::PacketBuf;

use crate::sys::{self, Mmsg};

/// Addresses of one received datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpMeta {
    /// The sender (remote address and port).
    pub src: SocketAddr,
    /// The local address the datagram was sent to (from `IP_PKTINFO` / `IPV6_PKTINFO`).
    pub dst: IpAddr,
}

impl Default for UdpMeta {
    fn default() -> Self {
        UdpMeta {
            src: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            dst: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        }
    }
}

/// A bound UDP socket with batched receive (recvmmsg) and send (sendmmsg).
pub struct UdpSocket {
    fd: OwnedFd,
    local: SocketAddr,
    rx: Mutex<Mmsg>,
    tx: Mutex<Mmsg>,
}

impl std::fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpSocket")
            .field("fd", &self.fd.as_raw_fd())
            .field("local", &self.local)
            .finish()
    }
}

impl UdpSocket {
    /// Binds a UDP socket to `addr` (port 0 picks one; see [`UdpSocket::local_addr`]) with `IP_PKTINFO` /
    /// `IPV6_RECVPKTINFO` enabled. IPv6 sockets are `IPV6_V6ONLY`: bind a separate IPv4 socket for IPv4 peers.
    pub fn bind(addr: SocketAddr) -> io::Result<UdpSocket> {
        let fd = match addr {
            SocketAddr::V4(_) => {
                let fd = sys::socket(libc::AF_INET, libc::SOCK_DGRAM, libc::IPPROTO_UDP)?;
                sys::setsockopt(
                    fd.as_fd(),
                    libc::IPPROTO_IP,
                    libc::IP_PKTINFO,
                    1 as libc::c_int,
                )?;
                fd
            }
            SocketAddr::V6(_) => {
                let fd = sys::socket(libc::AF_INET6, libc::SOCK_DGRAM, libc::IPPROTO_UDP)?;
                sys::setsockopt(
                    fd.as_fd(),
                    libc::IPPROTO_IPV6,
                    libc::IPV6_V6ONLY,
                    1 as libc::c_int,
                )?;
                sys::setsockopt(
                    fd.as_fd(),
                    libc::IPPROTO_IPV6,
                    libc::IPV6_RECVPKTINFO,
                    1 as libc::c_int,
                )?;
                fd
            }
        };
        sys::bind(fd.as_fd(), &addr)?;
        let local = sys::local_addr(fd.as_fd())?;
        Ok(UdpSocket {
            fd,
            local,
            rx: Mutex::new(Mmsg::new()),
            tx: Mutex::new(Mmsg::new()),
        })
    }

    /// The bound address (with the actual port).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Receives up to `min(bufs.len(), meta.len(), MAX_BATCH)` datagrams with one recvmmsg (blocks until at
    /// least one is there, or the receive timeout expires: `WouldBlock`). Each payload starts at `headroom`
    /// bytes into its buffer; `meta[i]` describes `bufs[i]`. Truncated datagrams are dropped. Returns the count.
    pub fn recv_batch(
        &self,
        bufs: &mut [PacketBuf],
        meta: &mut [UdpMeta],
        headroom: usize,
    ) -> io::Result<usize> {
        let n = bufs.len().min(meta.len());
        let mut rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        let got = rx.recv(self.fd.as_fd(), &mut bufs[..n], headroom, true)?;
        let mut kept = 0;
        for i in 0..got {
            let src = match rx.name(i) {
                Some(s) if !rx.truncated(i) => s,
                _ => {
                    bufs[i].reset(headroom);
                    continue;
                }
            };
            let mut dst = match self.local.ip() {
                ip if !ip.is_unspecified() => ip,
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            };
            rx.cmsgs(i, |c| match (c.level, c.ty) {
                // struct in_pktinfo { int ipi_ifindex; in_addr ipi_spec_dst; in_addr ipi_addr; }
                (libc::IPPROTO_IP, libc::IP_PKTINFO) if c.data.len() >= 12 => {
                    let a: [u8; 4] = c.data[8..12].try_into().unwrap_or([0; 4]);
                    dst = IpAddr::from(a);
                }
                // struct in6_pktinfo { in6_addr ipi6_addr; unsigned ipi6_ifindex; }
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) if c.data.len() >= 16 => {
                    let a: [u8; 16] = c.data[..16].try_into().unwrap_or([0; 16]);
                    dst = IpAddr::from(a);
                }
                _ => {}
            });
            meta[kept] = UdpMeta { src, dst };
            if kept != i {
                bufs.swap(kept, i);
            }
            kept += 1;
        }
        Ok(kept)
    }

    /// Sends `pkts[i].data()` to `dsts[i]` (for the first `min(pkts.len(), dsts.len())` packets) with sendmmsg,
    /// in chunks of `MAX_BATCH`. Datagrams the kernel refuses are dropped and the others still sent. Returns how
    /// many were sent, or the first error if none was.
    pub fn send_batch(&self, pkts: &[PacketBuf], dsts: &[SocketAddr]) -> io::Result<usize> {
        let n = pkts.len().min(dsts.len());
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        tx.send(self.fd.as_fd(), n, |i| {
            Some((pkts[i].data(), dsts[i], None))
        })
    }

    /// Like [`UdpSocket::send_batch`], also choosing each datagram's source address `srcs[i]` (typically the
    /// [`UdpMeta::dst`] the peer's datagram came to, so that replies on a wildcard-bound socket leave from the
    /// address the peer talks to). Unspecified addresses let the kernel choose. Uses the first
    /// `min(pkts.len(), dsts.len(), srcs.len())` entries.
    pub fn send_batch_from(
        &self,
        pkts: &[PacketBuf],
        dsts: &[SocketAddr],
        srcs: &[IpAddr],
    ) -> io::Result<usize> {
        let n = pkts.len().min(dsts.len()).min(srcs.len());
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        tx.send(self.fd.as_fd(), n, |i| {
            let src = Some(srcs[i]).filter(|s| !s.is_unspecified());
            Some((pkts[i].data(), dsts[i], src))
        })
    }

    /// `SO_MARK` (fwmark) for the datagrams this socket sends.
    pub fn set_mark(&self, mark: u32) -> io::Result<()> {
        sys::set_mark(self.fd.as_fd(), mark)
    }

    /// `SO_RCVTIMEO`: blocking receives return `WouldBlock` after `timeout` (zero = block forever).
    pub fn set_recv_timeout(&self, timeout: Duration) -> io::Result<()> {
        sys::set_recv_timeout(self.fd.as_fd(), timeout)
    }

    /// Receive and send buffer sizes (`SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`, falling back to the capped options).
    pub fn set_buffer_sizes(&self, bytes: usize) -> io::Result<()> {
        sys::set_buffer_sizes(self.fd.as_fd(), bytes)
    }
}

impl AsFd for UdpSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for UdpSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
