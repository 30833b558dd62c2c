//! Layer 2: an `AF_PACKET` socket bound to one interface (whole Ethernet frames in and out, batched with
//! recvmmsg/sendmmsg), and TAP devices (tun-rs in layer-2 mode) for the host side of a layer-2 protocol.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

use netveil_wire::PacketBuf;
use tun_rs::{DeviceBuilder, Layer, SyncDevice};

use crate::sys::{self, Mmsg};

/// `ETH_P_ALL`: every EtherType.
pub const ETH_P_ALL: u16 = 0x0003;

/// An `AF_PACKET`/`SOCK_RAW` socket bound to one interface and one EtherType (or all). Frames this host sends
/// on the interface are not received back (`PACKET_IGNORE_OUTGOING`).
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
    rx: Mutex<Mmsg>,
    tx: Mutex<Mmsg>,
}

impl std::fmt::Debug for PacketSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketSocket")
            .field("fd", &self.fd.as_raw_fd())
            .field("ifindex", &self.ifindex)
            .finish()
    }
}

/// The interface index of `name`.
pub fn ifindex(name: &str) -> io::Result<i32> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name with NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(i as i32)
}

impl PacketSocket {
    /// Binds to interface `ifname`, receiving frames of EtherType `ethertype` ([`ETH_P_ALL`] for all).
    pub fn bind(ifname: &str, ethertype: u16) -> io::Result<PacketSocket> {
        let ifindex = ifindex(ifname)?;
        let proto = ethertype.to_be() as libc::c_int;
        // SAFETY: plain socket(2); the descriptor is owned below.
        let raw =
            unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: an all-zero sockaddr_ll is valid; the fields we need are set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ethertype.to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a valid sockaddr_ll of the given length.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        sys::setsockopt(
            fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            1 as libc::c_int,
        )?;
        Ok(PacketSocket {
            fd,
            ifindex,
            rx: Mutex::new(Mmsg::new()),
            tx: Mutex::new(Mmsg::new()),
        })
    }

    /// The bound interface's index.
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// Receives up to `min(bufs.len(), MAX_BATCH)` whole Ethernet frames with one recvmmsg (blocks until at
    /// least one arrives or the receive timeout expires: `WouldBlock`). Each frame starts `headroom` bytes into
    /// its buffer. Truncated frames are dropped. Returns how many of `bufs` (the first ones) hold frames.
    pub fn recv_batch(&self, bufs: &mut [PacketBuf], headroom: usize) -> io::Result<usize> {
        let mut rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        let got = rx.recv(self.fd.as_fd(), bufs, headroom, false)?;
        let mut kept = 0;
        for i in 0..got {
            if rx.truncated(i) {
                bufs[i].reset(headroom);
                continue;
            }
            if kept != i {
                bufs.swap(kept, i);
            }
            kept += 1;
        }
        Ok(kept)
    }

    /// Sends whole Ethernet frames (with their own MAC header) on the bound interface with sendmmsg, in
    /// chunks of `MAX_BATCH`. Frames the kernel refuses (e.g. too long) are dropped and the rest still sent.
    /// Returns how many were sent, or the first error if none was.
    pub fn send_batch(&self, frames: &[PacketBuf]) -> io::Result<usize> {
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        tx.send(self.fd.as_fd(), frames.len(), |i| {
            Some((frames[i].data(), None, None))
        })
    }

    /// `SO_RCVTIMEO`: blocking receives return `WouldBlock` after `timeout` (zero = block forever).
    pub fn set_recv_timeout(&self, timeout: Duration) -> io::Result<()> {
        sys::set_recv_timeout(self.fd.as_fd(), timeout)
    }

    /// Receive and send buffer sizes.
    pub fn set_buffer_sizes(&self, bytes: usize) -> io::Result<()> {
        sys::set_buffer_sizes(self.fd.as_fd(), bytes)
    }

    /// Puts the interface in promiscuous mode for as long as this socket lives (`PACKET_MR_PROMISC`), so that
    /// frames for other MAC addresses (e.g. to the host behind a TAP device) are received.
    pub fn set_promiscuous(&self) -> io::Result<()> {
        // SAFETY: an all-zero packet_mreq is valid; the fields we need are set below.
        let mut mr: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mr.mr_ifindex = self.ifindex;
        mr.mr_type = libc::PACKET_MR_PROMISC as u16;
        sys::setsockopt(
            self.fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            mr,
        )
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A TAP device: whole Ethernet frames between the host's stack and this process.
pub struct Tap {
    dev: SyncDevice,
    name: String,
    timeout_ms: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tap").field("name", &self.name).finish()
    }
}

impl Tap {
    /// Creates TAP device `name` with `mtu` (0: default), optionally with MAC address `mac`, and brings it up.
    pub fn open(name: &str, mtu: u16, mac: Option<[u8; 6]>) -> io::Result<Tap> {
        let mut b = DeviceBuilder::new().layer(Layer::L2).enable(true);
        if !name.is_empty() {
            b = b.name(name);
        }
        if mtu != 0 {
            b = b.mtu(mtu);
        }
        if let Some(m) = mac {
            b = b.mac_addr(m);
        }
        let dev = b.build_sync()?;
        let name = dev.name()?;
        Ok(Tap {
            dev,
            name,
            timeout_ms: std::sync::atomic::AtomicU64::new(0),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads one frame the host sent into `buf`, placed `headroom` bytes in (blocks, or `WouldBlock` after the
    /// receive timeout).
    pub fn recv(&self, buf: &mut PacketBuf, headroom: usize) -> io::Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        buf.reset(headroom);
        let n = loop {
            match self.dev.recv(buf.spare_mut()) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let ms = self.timeout_ms.load(Relaxed);
                    if ms == 0 || !sys::poll_readable(self.dev.as_fd(), Duration::from_millis(ms))?
                    {
                        return Err(e);
                    }
                }
                r => break r?,
            }
        };
        buf.set_len(n);
        Ok(())
    }

    /// Reads one frame if one is waiting, without waiting (`WouldBlock` otherwise). Needs a receive timeout set
    /// (which makes the device non-blocking): with it, a batch is one waiting read and then reads that do not wait.
    pub fn try_recv(&self, buf: &mut PacketBuf, headroom: usize) -> io::Result<()> {
        buf.reset(headroom);
        let n = loop {
            match self.dev.recv(buf.spare_mut()) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r?,
            }
        };
        buf.set_len(n);
        Ok(())
    }

    /// Writes one frame to the host.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        self.dev.send(frame).map(|_| ())
    }

    /// Receives return `WouldBlock` when nothing arrived within `timeout` (zero = block forever), as for
    /// [`crate::Tun::set_recv_timeout`].
    pub fn set_recv_timeout(&self, timeout: Duration) -> io::Result<()> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as u64;
        let ms = if ms == 0 && !timeout.is_zero() { 1 } else { ms };
        self.dev.set_nonblocking(ms != 0)?;
        self.timeout_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

impl AsFd for Tap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.dev.as_fd()
    }
}
