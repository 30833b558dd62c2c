//! Raw IP sockets: receive ESP/AH (always as complete IP packets), send complete IP packets (header included).

use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::time::Duration;

use netveil_wire::{ipv6, PacketBuf};

use crate::sys::{self, Mmsg};

/// Length of the IPv6 header reconstructed in front of payloads received on IPv6 raw sockets.
pub const IPV6_HEADER_LEN: usize = ipv6::HEADER_LEN;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    RecvV4,
    RecvV6 { proto: u8 },
    Send,
}

/// A raw IP socket, either receiving one IP protocol or sending complete IP packets.
pub struct RawSocket {
    fd: OwnedFd,
    kind: Kind,
    rx: Mutex<Mmsg>,
    tx: Mutex<Mmsg>,
}

impl std::fmt::Debug for RawSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawSocket")
            .field("fd", &self.fd.as_raw_fd())
            .field("kind", &self.kind)
            .finish()
    }
}

impl RawSocket {
    fn new(fd: OwnedFd, kind: Kind) -> Self {
        RawSocket {
            fd,
            kind,
            rx: Mutex::new(Mmsg::new()),
            tx: Mutex::new(Mmsg::new()),
        }
    }

    /// An AF_INET raw socket receiving IP protocol `proto` (50 = ESP, 51 = AH). Received datagrams include
    /// their IPv4 header (reassembled if they were fragmented).
    pub fn recv_v4(proto: u8) -> io::Result<RawSocket> {
        let fd = sys::socket(libc::AF_INET, libc::SOCK_RAW, proto.into())?;
        Ok(Self::new(fd, Kind::RecvV4))
    }

    /// An AF_INET6 raw socket receiving IP protocol `proto`. The kernel hands over only the payload (after the
    /// IPv6 header and any extension headers); [`RawSocket::recv_batch`] rebuilds a 40-byte IPv6 header in front
    /// (traffic class and hop limit from control messages, flow label 0, next header = `proto`, payload length,
    /// source, destination), so callers always get complete IP packets.
    pub fn recv_v6(proto: u8) -> io::Result<RawSocket> {
        let fd = sys::socket(libc::AF_INET6, libc::SOCK_RAW, proto.into())?;
        let b = fd.as_fd();
        sys::setsockopt(
            b,
            libc::IPPROTO_IPV6,
            libc::IPV6_RECVPKTINFO,
            1 as libc::c_int,
        )?;
        sys::setsockopt(
            b,
            libc::IPPROTO_IPV6,
            libc::IPV6_RECVHOPLIMIT,
            1 as libc::c_int,
        )?;
        sys::setsockopt(
            b,
            libc::IPPROTO_IPV6,
            libc::IPV6_RECVTCLASS,
            1 as libc::c_int,
        )?;
        Ok(Self::new(fd, Kind::RecvV6 { proto }))
    }

    /// An AF_INET raw socket (`IPPROTO_RAW`, which implies `IP_HDRINCL`) sending complete IPv4 packets. The
    /// kernel fills in the header checksum and total length always, and the identification if it is 0. It does
    /// not fragment: packets larger than the route MTU fail with `EMSGSIZE` (and are dropped by `send_batch`).
    pub fn send_v4() -> io::Result<RawSocket> {
        let fd = sys::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW)?;
        sys::setsockopt(
            fd.as_fd(),
            libc::IPPROTO_IP,
            libc::IP_HDRINCL,
            1 as libc::c_int,
        )?;
        Ok(Self::new(fd, Kind::Send))
    }

    /// An AF_INET6 raw socket (`IPPROTO_RAW`: header included since Linux 4.5; `IPV6_HDRINCL` is also set
    /// explicitly) sending complete IPv6 packets, sent as they are (no fragmentation either).
    pub fn send_v6() -> io::Result<RawSocket> {
        let fd = sys::socket(libc::AF_INET6, libc::SOCK_RAW, libc::IPPROTO_RAW)?;
        sys::setsockopt(
            fd.as_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_HDRINCL,
            1 as libc::c_int,
        )?;
        Ok(Self::new(fd, Kind::Send))
    }

    /// Receives up to `min(bufs.len(), MAX_BATCH)` packets with one recvmmsg (blocks until at least one is there,
    /// or the receive timeout expires: `WouldBlock`). Each complete IP packet starts at exactly `headroom`
    /// bytes into its buffer (for IPv6 sockets the payload is received at `headroom + 40` and the rebuilt
    /// header occupies the 40 bytes before it). Returns how many of `bufs` hold packets (the first ones);
    /// truncated datagrams (buffer too small) are dropped.
    pub fn recv_batch(&self, bufs: &mut [PacketBuf], headroom: usize) -> io::Result<usize> {
        if matches!(self.kind, Kind::Send) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "send-only raw socket",
            ));
        }
        let mut rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        let v6 = match self.kind {
            Kind::RecvV6 { proto } => Some(proto),
            _ => None,
        };
        let offset = headroom + if v6.is_some() { IPV6_HEADER_LEN } else { 0 };
        let got = rx.recv(self.fd.as_fd(), bufs, offset, v6.is_some())?;
        let mut kept = 0;
        for i in 0..got {
            if rx.truncated(i) {
                bufs[i].reset(headroom);
                continue;
            }
            if let Some(proto) = v6 {
                let Some(IpAddr::V6(src)) = rx.name(i).map(|a| a.ip()) else {
                    bufs[i].reset(headroom);
                    continue;
                };
                let (mut dst, mut hlim, mut tclass) = (Ipv6Addr::UNSPECIFIED, 64u8, 0u8);
                rx.cmsgs(i, |c| {
                    if c.level != libc::IPPROTO_IPV6 {
                        return;
                    }
                    match c.ty {
                        libc::IPV6_PKTINFO if c.data.len() >= 16 => {
                            let a: [u8; 16] = c.data[..16].try_into().unwrap_or([0; 16]);
                            dst = Ipv6Addr::from(a);
                        }
                        libc::IPV6_HOPLIMIT => hlim = sys::cmsg_int(c.data).unwrap_or(64) as u8,
                        libc::IPV6_TCLASS => tclass = sys::cmsg_int(c.data).unwrap_or(0) as u8,
                        _ => {}
                    }
                });
                let buf = &mut bufs[i];
                let plen = buf.len();
                if plen > u16::MAX as usize {
                    buf.reset(headroom);
                    continue;
                }
                let Some(h) = buf.push_front(IPV6_HEADER_LEN) else {
                    buf.reset(headroom);
                    continue;
                };
                write_ipv6_header(h, tclass, plen as u16, proto, hlim, &src, &dst);
            }
            if kept != i {
                bufs.swap(kept, i);
            }
            kept += 1;
        }
        Ok(kept)
    }

    /// Sends complete IP packets (destination taken from each packet's header) with sendmmsg, in chunks of
    /// `MAX_BATCH`. Packets that are malformed or that the kernel refuses (e.g. `EMSGSIZE`, `ENETUNREACH`) are
    /// dropped and the others still sent. Returns how many were sent, or the first error if none was.
    /// IPv6 link-local destinations are not supported (no scope id is set).
    pub fn send_batch(&self, pkts: &[PacketBuf]) -> io::Result<usize> {
        if !matches!(self.kind, Kind::Send) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "receive-only raw socket",
            ));
        }
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        tx.send(self.fd.as_fd(), pkts.len(), |i| {
            let d = pkts[i].data();
            Some((d, Some(sys::ip_packet_dst(d)?), None))
        })
    }

    /// `SO_MARK` (fwmark) for the packets this socket sends, so that policy routing can exempt them.
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

impl AsFd for RawSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for RawSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn write_ipv6_header(
    h: &mut [u8],
    tclass: u8,
    plen: u16,
    next: u8,
    hlim: u8,
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
) {
    // Flow label 0.
    ipv6::Repr {
        src: *src,
        dst: *dst,
        next_header: next,
        payload_len: usize::from(plen),
        hop_limit: hlim,
        traffic_class: tclass,
        flow_label: 0,
    }
    .emit(&mut ipv6::Packet::new_unchecked(h));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_header_layout() {
        let mut h = [0u8; 40];
        let s: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d: Ipv6Addr = "2001:db8::2".parse().unwrap();
        write_ipv6_header(&mut h, 0xb8, 0x1234, 50, 63, &s, &d);
        assert_eq!(&h[..8], &[0x6b, 0x80, 0, 0, 0x12, 0x34, 50, 63]);
        assert_eq!(&h[8..24], &s.octets());
        assert_eq!(&h[24..40], &d.octets());
    }
}
