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
///
/// With offloads ([`Tap::open_offload`], virtio-net headers), the host hands over TCP super-frames of up to
/// 64 KiB (TSO) that [`Tap::recv_batch`] splits into MTU-sized frames with correct lengths and checksums, and
/// [`Tap::send_batch`] coalesces consecutive TCP segments of one flow into super-frames (GRO), so that the host's
/// stack handles one large packet instead of dozens: fewer system calls and far less per-packet work on both
/// sides.
pub struct Tap {
    dev: SyncDevice,
    name: String,
    timeout_ms: std::sync::atomic::AtomicU64,
    offload: bool,
}

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tap")
            .field("name", &self.name)
            .field("offload", &self.offload)
            .finish()
    }
}

/// Length of the virtio-net header of an offload TAP.
pub const VNET_HDR_LEN: usize = tun_rs::VIRTIO_NET_HDR_LEN;
/// Scratch a [`Tap::recv_batch`] on an offload device needs: a whole super-frame.
pub const TAP_SCRATCH_LEN: usize = VNET_HDR_LEN + 14 + 65535 + 64;
/// Most frames one super-frame is split into.
pub const MAX_SEGMENTS: usize = 128;
const ETH: usize = netveil_wire::ethernet::HEADER_LEN;
const GSO_NONE: u8 = 0;
const NEEDS_CSUM: u8 = 1;

/// A [`PacketBuf`]'s data as tun-rs's GSO split wants its output buffers.
#[repr(transparent)]
struct View(PacketBuf);
impl AsRef<[u8]> for View {
    fn as_ref(&self) -> &[u8] {
        self.0.data()
    }
}
impl AsMut<[u8]> for View {
    fn as_mut(&mut self) -> &mut [u8] {
        self.0.data_mut()
    }
}
fn views(bufs: &mut [PacketBuf]) -> &mut [View] {
    // SAFETY: View is #[repr(transparent)] over PacketBuf: the slices have the same layout, and the returned
    // borrow takes over the exclusive borrow of `bufs`.
    unsafe { &mut *(bufs as *mut [PacketBuf] as *mut [View]) }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Completes a partial checksum (`CHECKSUM_PARTIAL`): the field at `start + offset` holds the pseudo-header sum.
fn complete_checksum(b: &mut [u8], start: usize, offset: usize) -> io::Result<()> {
    let at = start + offset;
    if at + 2 > b.len() || start > b.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "checksum offset beyond the frame",
        ));
    }
    let initial = be16(b, at);
    b[at] = 0;
    b[at + 1] = 0;
    let c = !tun_rs::checksum(&b[start..], u64::from(initial));
    b[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

impl Tap {
    /// Creates TAP device `name` with `mtu` (0: default), optionally with MAC address `mac`, and brings it up.
    pub fn open(name: &str, mtu: u16, mac: Option<[u8; 6]>) -> io::Result<Tap> {
        Self::open_offload(name, mtu, mac, false)
    }

    /// As [`Tap::open`], with virtio-net header offloads (TSO and checksum offload from the host, GRO to it)
    /// when `offload` is set.
    pub fn open_offload(
        name: &str,
        mtu: u16,
        mac: Option<[u8; 6]>,
        offload: bool,
    ) -> io::Result<Tap> {
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
        if offload {
            b = b.offload(true);
        }
        let dev = b.build_sync()?;
        let name = dev.name()?;
        Ok(Tap {
            dev,
            name,
            timeout_ms: std::sync::atomic::AtomicU64::new(0),
            offload,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether virtio-net header offloads are on.
    pub fn offload(&self) -> bool {
        self.offload
    }

    /// One read into `buf`: waiting (up to the receive timeout) when `wait`, else `WouldBlock` at once if nothing
    /// is there (the timeout must be set for that: it makes the device non-blocking).
    fn read_raw(&self, buf: &mut [u8], wait: bool) -> io::Result<usize> {
        use std::sync::atomic::Ordering::Relaxed;
        loop {
            match self.dev.recv(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && wait => {
                    let ms = self.timeout_ms.load(Relaxed);
                    if ms == 0 || !sys::poll_readable(self.dev.as_fd(), Duration::from_millis(ms))?
                    {
                        return Err(e);
                    }
                }
                r => return r,
            }
        }
    }

    /// Reads one frame the host sent into `buf`, placed `headroom` bytes in (blocks, or `WouldBlock` after the
    /// receive timeout). Not for offload devices (use [`Tap::recv_batch`]).
    pub fn recv(&self, buf: &mut PacketBuf, headroom: usize) -> io::Result<()> {
        buf.reset(headroom);
        let n = self.read_raw(buf.spare_mut(), true)?;
        buf.set_len(n);
        Ok(())
    }

    /// Reads one frame if one is waiting, without waiting (`WouldBlock` otherwise). Needs a receive timeout set
    /// (which makes the device non-blocking): with it, a batch is one waiting read and then reads that do not wait.
    /// Not for offload devices.
    pub fn try_recv(&self, buf: &mut PacketBuf, headroom: usize) -> io::Result<()> {
        buf.reset(headroom);
        let n = self.read_raw(buf.spare_mut(), false)?;
        buf.set_len(n);
        Ok(())
    }

    /// One read from the device, as frames at `headroom` in `out`: without offload one frame; with offload a
    /// TCP super-frame split into MTU-sized frames (at most `out.len()`, up to [`MAX_SEGMENTS`]), and a frame
    /// with a partial checksum completed. `scratch` (offload only) must hold [`TAP_SCRATCH_LEN`] bytes. `wait`:
    /// as [`Tap::recv`] (up to the timeout), else as [`Tap::try_recv`]. An error other than `WouldBlock` may
    /// concern one malformed super-frame: the next read is unaffected.
    pub fn recv_batch(
        &self,
        scratch: &mut [u8],
        out: &mut [PacketBuf],
        headroom: usize,
        wait: bool,
    ) -> io::Result<usize> {
        let inval = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
        let Some(first) = out.first_mut() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no output buffers",
            ));
        };
        if !self.offload {
            first.reset(headroom);
            let n = self.read_raw(first.spare_mut(), wait)?;
            first.set_len(n);
            return Ok(1);
        }
        if scratch.len() < TAP_SCRATCH_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "scratch shorter than TAP_SCRATCH_LEN",
            ));
        }
        let n = self.read_raw(scratch, wait)?;
        if n < VNET_HDR_LEN + ETH {
            return Err(inval(
                "TAP read shorter than a virtio-net and Ethernet header",
            ));
        }
        let mut hdr = tun_rs::VirtioNetHdr::decode(&scratch[..VNET_HDR_LEN])?;
        let frame = &mut scratch[VNET_HDR_LEN..n];
        if hdr.gso_type == GSO_NONE {
            if hdr.flags & NEEDS_CSUM != 0 {
                complete_checksum(frame, hdr.csum_start as usize, hdr.csum_offset as usize)?;
            }
            first.reset(headroom);
            let dst = first
                .push_back(frame.len())
                .ok_or_else(|| inval("frame longer than the buffer"))?;
            dst.copy_from_slice(frame);
            return Ok(1);
        }
        // A super-frame: the Ethernet header, then an IP packet that tun-rs splits (its offsets count from the IP
        // header; the kernel's count from the frame).
        let (eth, ip) = frame.split_at_mut(ETH);
        let is_v6 = match netveil_wire::ip::version(ip) {
            Some(4) => false,
            Some(6) => true,
            _ => return Err(inval("GSO frame is not IPv4 or IPv6")),
        };
        hdr.csum_start = hdr
            .csum_start
            .checked_sub(ETH as u16)
            .ok_or_else(|| inval("checksum start inside the Ethernet header"))?;
        // As tun-rs does for TUN: the header length from the transport header, not the kernel's value.
        let cs = hdr.csum_start as usize;
        if hdr.gso_type == tun_rs::VIRTIO_NET_HDR_GSO_UDP_L4 {
            hdr.hdr_len = hdr.csum_start + 8;
        } else {
            let Some(t) = ip
                .get(cs..)
                .filter(|t| t.len() >= netveil_wire::tcp::MIN_HEADER_LEN)
            else {
                return Err(inval("GSO frame too short for its TCP header"));
            };
            let th = netveil_wire::tcp::Packet::new_unchecked(t).header_len() as u16;
            if !(20..=60).contains(&th) {
                return Err(inval("bad TCP header length in GSO frame"));
            }
            hdr.hdr_len = hdr.csum_start + th;
        }
        if ip.len() < hdr.hdr_len as usize {
            return Err(inval("GSO frame shorter than its headers"));
        }
        let k = out.len().min(MAX_SEGMENTS);
        let out = &mut out[..k];
        for b in out.iter_mut() {
            b.reset(headroom + ETH);
            let cap = b.capacity() - headroom - ETH;
            b.set_len(cap);
        }
        let mut sizes = [0usize; MAX_SEGMENTS];
        let got = tun_rs::gso_split(ip, hdr, views(out), &mut sizes[..k], 0, is_v6)?;
        for (i, b) in out.iter_mut().enumerate() {
            if i < got {
                b.set_len(sizes[i]);
                if let Some(h) = b.push_front(ETH) {
                    h.copy_from_slice(eth);
                }
            } else {
                b.reset(headroom);
            }
        }
        Ok(got)
    }

    /// Writes one frame to the host.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        if self.offload {
            let hdr = [0u8; VNET_HDR_LEN];
            self.dev
                .send_vectored(&[std::io::IoSlice::new(&hdr), std::io::IoSlice::new(frame)])?;
        } else {
            self.dev.send(frame)?;
        }
        Ok(())
    }

    /// Writes frames to the host. With offload, runs of consecutive TCP segments of one flow (same addresses,
    /// ports and headers, contiguous sequence numbers, equal sizes but possibly the last) are coalesced into
    /// super-frames of up to 64 KiB, each one `writev` that gathers the payloads where they lie (see `gro`). The
    /// frames are consumed (their contents afterwards are unspecified). Write errors do not stop the batch; the
    /// last one is returned. Returns the number of writes (super-frames and single frames).
    pub fn send_batch(&self, frames: &mut [PacketBuf]) -> io::Result<usize> {
        if !self.offload {
            let mut r = Ok(frames.len());
            for f in frames.iter() {
                if let Err(e) = self.send(f.data()) {
                    r = Err(e);
                }
            }
            return r;
        }
        crate::gro::write_batch(frames, ETH, false, |iov| self.dev.send_vectored(iov))
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
