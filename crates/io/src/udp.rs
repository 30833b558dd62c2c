//! UDP sockets for ESP-in-UDP (RFC 3948), batched, reporting each datagram's local destination address.
//!
//! Besides one-datagram-per-message batches ([`UdpSocket::recv_batch`], [`UdpSocket::send_batch`]), the socket
//! can use UDP segmentation offloads like wireguard-go does: [`UdpSocket::send_gso`] hands the kernel one buffer
//! of equally sized datagrams (`UDP_SEGMENT`), and after [`UdpSocket::enable_gro`], [`UdpSocket::recv_gro`]
//! receives several datagrams of one flow coalesced into one buffer (`UDP_GRO`), split with [`segments`].

use std::io::{self, IoSlice};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Addresses and segmentation of one message received with [`UdpSocket::recv_gro`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpGroMeta {
    /// The sender (remote address and port), the same for all coalesced datagrams.
    pub src: SocketAddr,
    /// The local address the datagrams were sent to (from `IP_PKTINFO` / `IPV6_PKTINFO`).
    pub dst: IpAddr,
    /// Size of each coalesced datagram (the last may be shorter); the message length when the kernel did not
    /// coalesce (no `UDP_GRO` cmsg). Split the buffer with [`segments`].
    pub segment_size: usize,
}

impl Default for UdpGroMeta {
    fn default() -> Self {
        UdpGroMeta {
            src: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            dst: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            segment_size: 0,
        }
    }
}

impl UdpGroMeta {
    /// The datagrams of `buf` (the buffer this metadata describes): `segments(buf, self.segment_size)`.
    pub fn segments<'a>(&self, buf: &'a [u8]) -> Segments<'a> {
        segments(buf, self.segment_size)
    }
}

/// The largest UDP payload one GSO send may carry (65535 − 20-byte IPv4 header − 8-byte UDP header).
pub const GSO_MAX_PAYLOAD: usize = sys::UDP_MAX_PAYLOAD;
/// The most datagrams one GSO send may carry (the kernel's `UDP_MAX_SEGMENTS`).
pub const GSO_MAX_SEGMENTS: usize = sys::UDP_MAX_SEGMENTS;
/// The buffer space [`UdpSocket::recv_gro`] needs after the headroom (the largest UDP message).
pub const GRO_BUF_SIZE: usize = 65535;

/// Splits a (GRO-coalesced) buffer into its datagrams of `segment_size` bytes; the last may be shorter.
/// `segment_size == 0` (or one ≥ the length) yields the whole buffer as one datagram — also when it is empty,
/// since a zero-length datagram is still a datagram.
pub fn segments(buf: &[u8], segment_size: usize) -> Segments<'_> {
    Segments {
        rest: Some(buf),
        size: if segment_size == 0 {
            usize::MAX
        } else {
            segment_size
        },
    }
}

/// Iterator over the datagrams of a coalesced buffer: see [`segments`].
#[derive(Clone, Debug)]
pub struct Segments<'a> {
    rest: Option<&'a [u8]>,
    size: usize,
}

impl<'a> Iterator for Segments<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest.take()?;
        if rest.len() <= self.size {
            return Some(rest);
        }
        let (seg, tail) = rest.split_at(self.size);
        self.rest = Some(tail);
        Some(seg)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match self.rest {
            None => 0,
            Some(r) if r.len() <= self.size => 1,
            Some(r) => r.len().div_ceil(self.size),
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for Segments<'_> {}
impl std::iter::FusedIterator for Segments<'_> {}

/// A bound UDP socket with batched receive (recvmmsg) and send (sendmmsg), optionally with UDP GSO/GRO.
pub struct UdpSocket {
    fd: OwnedFd,
    local: SocketAddr,
    rx: Mutex<Mmsg>,
    tx: Mutex<Mmsg>,
    /// Whether GSO sends are still attempted (cleared for good when the kernel refuses one).
    gso: AtomicBool,
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
        Self::bind_with(addr, false)
    }

    /// [`UdpSocket::bind`] with `SO_REUSEPORT`: every socket bound so to the same address by the same user joins
    /// one group, among which the kernel spreads the datagrams, or which a steering program picks from (see
    /// [`UdpSocket::steer_non_esp`]). How the IP engine's ESP-in-UDP socket and the IKE driver's share port 4500.
    pub fn bind_shared(addr: SocketAddr) -> io::Result<UdpSocket> {
        Self::bind_with(addr, true)
    }

    fn bind_with(addr: SocketAddr, reuse_port: bool) -> io::Result<UdpSocket> {
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
        if reuse_port {
            sys::setsockopt(
                fd.as_fd(),
                libc::SOL_SOCKET,
                libc::SO_REUSEPORT,
                1 as libc::c_int,
            )?;
        }
        sys::bind(fd.as_fd(), &addr)?;
        let local = sys::local_addr(fd.as_fd())?;
        Ok(UdpSocket {
            fd,
            local,
            rx: Mutex::new(Mmsg::new()),
            tx: Mutex::new(Mmsg::new()),
            gso: AtomicBool::new(true),
        })
    }

    /// Steers the datagrams of this socket's `SO_REUSEPORT` group (see [`UdpSocket::bind_shared`]) by their
    /// first bytes (`SO_ATTACH_REUSEPORT_CBPF`, run on the UDP payload): those shorter than 4 bytes (a NAT-T
    /// keepalive, RFC 3948 2.3) or starting with four zero bytes (the non-ESP marker of IKE, RFC 3948 2.2) go to
    /// the group's socket number `marker_index`, every other one (ESP: its SPI is never zero) to `esp_index`.
    /// Sockets are numbered in the order they joined the group; an index beyond the group falls back to the
    /// kernel's hash. The program is the group's (any member may attach it) and replaces an earlier one.
    pub fn steer_non_esp(&self, marker_index: u32, esp_index: u32) -> io::Result<()> {
        let insns = steer_program(marker_index, esp_index);
        let prog = libc::sock_fprog {
            len: insns.len() as u16,
            filter: insns.as_ptr() as *mut libc::sock_filter,
        };
        // `prog` points at `insns`, which lives until the call returns (the kernel copies the program).
        sys::setsockopt(
            self.fd.as_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            prog,
        )
    }

    /// Waits until one of `socks` has a datagram to read, or `timeout` passes (`None`: forever). Returns which
    /// are readable (all false on timeout); an interrupted wait returns all false too.
    pub fn poll_readable(socks: &[&UdpSocket], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
        let fds: Vec<_> = socks.iter().map(|s| s.fd.as_fd()).collect();
        sys::poll_readable_many(&fds, timeout)
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
            let (dst, _) = self.parse_cmsgs(&rx, i);
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
            Some((pkts[i].data(), Some(dsts[i]), None))
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
            Some((pkts[i].data(), Some(dsts[i]), src))
        })
    }

    /// The local destination address (pktinfo) and GRO segment size (if any) of received message `i`.
    fn parse_cmsgs(&self, rx: &Mmsg, i: usize) -> (IpAddr, Option<usize>) {
        let mut dst = match self.local.ip() {
            ip if !ip.is_unspecified() => ip,
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        let mut seg = None;
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
            (libc::SOL_UDP, sys::UDP_GRO) => {
                seg = sys::cmsg_int(c.data).filter(|&s| s > 0).map(|s| s as usize);
            }
            _ => {}
        });
        (dst, seg)
    }

    /// Enables UDP GRO (`setsockopt(SOL_UDP, UDP_GRO, 1)`): the kernel may then deliver several datagrams of
    /// one flow as one message (read them with [`UdpSocket::recv_gro`]; [`UdpSocket::recv_batch`] must not be
    /// used any more, as it would see coalesced messages as single datagrams). Returns `Ok(false)` if the
    /// kernel does not support it (`ENOPROTOOPT`/`EINVAL`), leaving the socket unchanged.
    pub fn enable_gro(&self) -> io::Result<bool> {
        match sys::setsockopt(
            self.fd.as_fd(),
            libc::SOL_UDP,
            sys::UDP_GRO,
            1 as libc::c_int,
        ) {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOPROTOOPT | libc::EINVAL)) => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Receives up to `min(bufs.len(), meta.len(), MAX_BATCH)` messages with one recvmmsg (blocking like
    /// [`UdpSocket::recv_batch`]). With GRO enabled ([`UdpSocket::enable_gro`]) each message may hold several
    /// coalesced datagrams of `meta[i].segment_size` bytes (the last may be shorter): split `bufs[i].data()`
    /// with [`segments`] / [`UdpGroMeta::segments`]. Each message starts at `headroom` bytes into its buffer,
    /// and each buffer used must have `capacity() >= headroom + GRO_BUF_SIZE` (else `InvalidInput`, before
    /// receiving anything). Truncated messages are dropped. Returns the count of messages.
    pub fn recv_gro(
        &self,
        bufs: &mut [PacketBuf],
        meta: &mut [UdpGroMeta],
        headroom: usize,
    ) -> io::Result<usize> {
        let n = bufs.len().min(meta.len()).min(sys::MAX_BATCH);
        if bufs[..n]
            .iter()
            .any(|b| b.capacity() < headroom.saturating_add(GRO_BUF_SIZE))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "recv_gro buffers need headroom + 65535 bytes of capacity",
            ));
        }
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
            let (dst, seg) = self.parse_cmsgs(&rx, i);
            let segment_size = seg.unwrap_or(bufs[i].len());
            meta[kept] = UdpGroMeta {
                src,
                dst,
                segment_size,
            };
            if kept != i {
                bufs.swap(kept, i);
            }
            kept += 1;
        }
        Ok(kept)
    }

    /// Whether GSO sends are still attempted (true until the kernel refused one, see [`UdpSocket::send_gso`]).
    pub fn gso_enabled(&self) -> bool {
        self.gso.load(Ordering::Relaxed)
    }

    /// Sends `payload` to `dst` as datagrams of `segment_size` bytes (the last may be shorter) with one sendmsg
    /// carrying a `UDP_SEGMENT` cmsg, so the kernel (or the device) splits it. `src` selects the source address
    /// (`IP_PKTINFO`/`IPV6_PKTINFO`; `None` or unspecified lets the kernel choose). A payload of at most one
    /// segment is sent as a plain datagram.
    ///
    /// If the kernel refuses GSO with `EIO`/`EINVAL` (e.g. egress device without checksum offload, xfrm route,
    /// `SO_NO_CHECK`), the datagrams are sent individually with sendmmsg instead and GSO is not tried again on
    /// this socket ([`UdpSocket::gso_enabled`]). Returns the number of datagrams sent. `InvalidInput` if the
    /// payload is empty or longer than [`GSO_MAX_PAYLOAD`], `segment_size` is 0, or it would make more than
    /// [`GSO_MAX_SEGMENTS`] datagrams.
    pub fn send_gso(
        &self,
        payload: &[u8],
        segment_size: u16,
        dst: SocketAddr,
        src: Option<IpAddr>,
    ) -> io::Result<usize> {
        check_gso(payload, segment_size)?;
        let src = src.filter(|s| !s.is_unspecified());
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        tx.send_segmented(self.fd.as_fd(), 1, &self.gso, |_| {
            (payload, segment_size as usize, dst, src)
        })
    }

    /// Sends several GSO buffers (`(payload, segment_size, dst)`, each as in [`UdpSocket::send_gso`]) with
    /// sendmmsg, one message per buffer (in chunks of `MAX_BATCH` messages), with the same fallback to plain
    /// datagrams. All items are checked first (`InvalidInput`, nothing sent). Messages the kernel refuses
    /// otherwise are dropped and the rest still sent. Returns the total number of datagrams sent, or the first
    /// error if none was.
    pub fn send_gso_batch(&self, items: &[(&[u8], u16, SocketAddr)]) -> io::Result<usize> {
        for (payload, seg, _) in items {
            check_gso(payload, *seg)?;
        }
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        tx.send_segmented(self.fd.as_fd(), items.len(), &self.gso, |i| {
            let (payload, seg, dst) = items[i];
            (payload, seg as usize, dst, None)
        })
    }

    /// Like [`UdpSocket::send_gso_batch`], also choosing each buffer's source address (unspecified = kernel's
    /// choice), typically the [`UdpGroMeta::dst`] the peer's datagrams came to.
    pub fn send_gso_batch_from(
        &self,
        items: &[(&[u8], u16, SocketAddr, IpAddr)],
    ) -> io::Result<usize> {
        for (payload, seg, _, _) in items {
            check_gso(payload, *seg)?;
        }
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        tx.send_segmented(self.fd.as_fd(), items.len(), &self.gso, |i| {
            let (payload, seg, dst, src) = items[i];
            (
                payload,
                seg as usize,
                dst,
                Some(src).filter(|s| !s.is_unspecified()),
            )
        })
    }

    /// Like [`UdpSocket::send_gso_batch_from`], with each run's datagrams given as separate slices, `(datagrams,
    /// dst, src)`: the kernel gathers them into GSO sends (up to [`GSO_MAX_SEGMENTS`] datagrams and
    /// [`GSO_MAX_PAYLOAD`] bytes each), so they need not be copied into one buffer first. In a run every datagram
    /// is as long as the first but the last, which may be shorter; `InvalidInput` (nothing sent) for an empty
    /// run or datagram, a datagram longer than the first or than [`GSO_MAX_PAYLOAD`], or a shorter one before
    /// the last. The same fallback to plain datagrams.
    pub fn send_gathered_from(
        &self,
        runs: &[(&[IoSlice<'_>], SocketAddr, IpAddr)],
    ) -> io::Result<usize> {
        for (dgrams, _, _) in runs {
            check_run(dgrams)?;
        }
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        tx.send_gathered(self.fd.as_fd(), runs.len(), &self.gso, |i| {
            let (dgrams, dst, src) = runs[i];
            (dgrams, dst, Some(src).filter(|s| !s.is_unspecified()))
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

/// Validates one run of [`UdpSocket::send_gathered_from`].
fn check_run(dgrams: &[IoSlice<'_>]) -> io::Result<()> {
    let bad = |m: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, m.to_string()));
    let Some(first) = dgrams.first() else {
        return bad("empty run");
    };
    let seg = first.len();
    if seg == 0 || seg > GSO_MAX_PAYLOAD {
        return bad("datagram empty or longer than GSO_MAX_PAYLOAD");
    }
    for (i, d) in dgrams.iter().enumerate() {
        if d.is_empty() || d.len() > seg || (d.len() < seg && i + 1 != dgrams.len()) {
            return bad("datagrams of a run must be as long as the first, but the last");
        }
    }
    Ok(())
}

/// Validates one GSO send: non-empty payload of at most [`GSO_MAX_PAYLOAD`] bytes, segment size ≥ 1, at most
/// [`GSO_MAX_SEGMENTS`] segments.
fn check_gso(payload: &[u8], segment_size: u16) -> io::Result<()> {
    let bad = |m: &'static str| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
    if payload.is_empty() {
        return bad("GSO payload is empty");
    }
    if payload.len() > GSO_MAX_PAYLOAD {
        return bad("GSO payload longer than 65507 bytes");
    }
    if segment_size == 0 {
        return bad("GSO segment size is 0");
    }
    if payload.len().div_ceil(segment_size as usize) > GSO_MAX_SEGMENTS {
        return bad("GSO payload makes more than 64 segments");
    }
    Ok(())
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

/// The steering program of [`UdpSocket::steer_non_esp`] (classic BPF on the UDP payload).
fn steer_program(marker_index: u32, esp_index: u32) -> [libc::sock_filter; 6] {
    let i = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    const LD_LEN: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_LEN) as u16;
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    [
        // 0: A = payload length
        i(LD_LEN, 0, 0, 0),
        // 1: under 4 bytes (a keepalive): to the marker socket (4)
        i(JGE_K, 0, 2, 4),
        // 2: A = the first 32-bit word
        i(LD_W_ABS, 0, 0, 0),
        // 3: zero (the non-ESP marker): 4, else 5
        i(JEQ_K, 0, 1, 0),
        // 4:
        i(RET_K, 0, 0, marker_index),
        // 5:
        i(RET_K, 0, 0, esp_index),
    ]
}

/// The MTU of the route to `dst` as the kernel knows it: the path MTU it learned for `dst` (from ICMP), else the
/// MTU of the interface the route leaves by. Asked of a UDP socket connected to `dst` (nothing is sent), with
/// `mark` as its `SO_MARK` so that the route is the one the marked packets take.
pub fn route_mtu(dst: IpAddr, mark: Option<u32>) -> io::Result<u32> {
    let (domain, level, name) = if dst.is_ipv6() {
        (libc::AF_INET6, libc::IPPROTO_IPV6, libc::IPV6_MTU)
    } else {
        (libc::AF_INET, libc::IPPROTO_IP, libc::IP_MTU)
    };
    let fd = sys::socket(domain, libc::SOCK_DGRAM, 0)?;
    if let Some(m) = mark {
        sys::set_mark(fd.as_fd(), m)?;
    }
    let sock = std::net::UdpSocket::from(fd);
    sock.connect(SocketAddr::new(dst, 9))?;
    let mtu = sys::getsockopt_int(sock.as_fd(), level, name)?;
    u32::try_from(mtu).map_err(|_| io::Error::other(format!("route MTU {mtu}")))
}
