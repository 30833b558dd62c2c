//! Linux TUN devices (layer 3, no packet information) through tun-rs, optionally with virtio-net header
//! offloads: reads may return TCP/UDP super-packets (GSO) that are split here into MTU-sized IP packets, and
//! batched writes are coalesced (GRO) before being handed to the kernel.

use std::io::{self, IoSlice};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use netveil_wire::PacketBuf;
use tun_rs::{DeviceBuilder, SyncDevice, IDEAL_BATCH_SIZE};

use crate::{gro, sys};
pub use gro::Span;

/// Length of the virtio-net header that precedes every packet on an offload TUN.
pub const VIRTIO_NET_HDR_LEN: usize = gro::VNET_HDR_LEN;

/// Minimum size of the `scratch` buffer of [`Tun::recv_batch`]: a virtio-net header plus a 64 KiB super-packet.
pub const RECV_SCRATCH_LEN: usize = VIRTIO_NET_HDR_LEN + 65535;

/// The most packets one [`Tun::recv_batch`] call produces (the size of its segment table).
pub const MAX_SEGMENTS: usize = IDEAL_BATCH_SIZE;

/// How to create a TUN device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TunConfig {
    /// Interface name; empty lets the kernel pick (`tunN`).
    pub name: String,
    /// Link MTU; 0 keeps the kernel default.
    pub mtu: u16,
    /// Addresses with prefix lengths. At most one IPv4 address (tun-rs without its `address-management`
    /// feature can set only one); any number of IPv6 addresses.
    pub addresses: Vec<(IpAddr, u8)>,
    /// Enable virtio-net header offloads (TSO/USO super-packets on read, GRO coalescing on write).
    pub offload: bool,
    /// Create a multi-queue device (more queues with [`Tun::clone_queue`]).
    pub multi_queue: bool,
}

/// An open TUN device (one queue). The device disappears when the last queue is dropped.
pub struct Tun {
    dev: SyncDevice,
    name: String,
    mtu: u16,
    offload: bool,
    multi_queue: bool,
    /// Receive timeout in milliseconds; 0 = block forever.
    timeout_ms: AtomicU64,
    /// Scratch for [`Tun::recv`] on an offload device (raw read incl. the virtio-net header); empty otherwise.
    recv_scratch: Mutex<Vec<u8>>,
}

impl std::fmt::Debug for Tun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tun")
            .field("name", &self.name)
            .field("mtu", &self.mtu)
            .field("offload", &self.offload)
            .field("fd", &self.dev.as_raw_fd())
            .finish()
    }
}

/// A [`PacketBuf`] seen by tun-rs's GSO split as a plain byte buffer: its data is the whole space from the head
/// to the end of its storage (see [`Tun::recv_batch`]).
#[repr(transparent)]
struct RecvView(PacketBuf);

impl AsRef<[u8]> for RecvView {
    fn as_ref(&self) -> &[u8] {
        self.0.data()
    }
}
impl AsMut<[u8]> for RecvView {
    fn as_mut(&mut self) -> &mut [u8] {
        self.0.data_mut()
    }
}

fn recv_views(bufs: &mut [PacketBuf]) -> &mut [RecvView] {
    // SAFETY: RecvView is #[repr(transparent)] over PacketBuf, so the slices have identical layout; the
    // returned borrow takes over the exclusive borrow of `bufs`.
    unsafe { &mut *(bufs as *mut [PacketBuf] as *mut [RecvView]) }
}

impl Tun {
    /// Creates the TUN device, sets its MTU and addresses and brings the link up.
    pub fn open(cfg: &TunConfig) -> io::Result<Tun> {
        let mut b = DeviceBuilder::new()
            .packet_information(false)
            .offload(cfg.offload)
            .multi_queue(cfg.multi_queue)
            .enable(true);
        if !cfg.name.is_empty() {
            b = b.name(cfg.name.clone());
        }
        if cfg.mtu != 0 {
            b = b.mtu(cfg.mtu);
        }
        let mut have_v4 = false;
        for &(addr, prefix) in &cfg.addresses {
            match addr {
                IpAddr::V4(a) => {
                    if have_v4 {
                        return Err(io::Error::new(
                            io::ErrorKind::Unsupported,
                            "only one IPv4 address per TUN device is supported",
                        ));
                    }
                    if prefix > 32 {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "IPv4 prefix > 32",
                        ));
                    }
                    have_v4 = true;
                    b = b.ipv4(a, prefix, None);
                }
                IpAddr::V6(a) => {
                    if prefix > 128 {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "IPv6 prefix > 128",
                        ));
                    }
                    b = b.ipv6(a, prefix);
                }
            }
        }
        let dev = b.build_sync()?;
        Self::from_device(dev, cfg.offload, cfg.multi_queue)
    }

    fn from_device(dev: SyncDevice, offload: bool, multi_queue: bool) -> io::Result<Tun> {
        let name = dev.name()?;
        let mtu = dev.mtu()?;
        Ok(Tun {
            dev,
            name,
            mtu,
            offload,
            multi_queue,
            timeout_ms: AtomicU64::new(0),
            recv_scratch: Mutex::new(if offload {
                vec![0; RECV_SCRATCH_LEN]
            } else {
                Vec::new()
            }),
        })
    }

    /// Opens another queue of a multi-queue device (for another reader/writer thread).
    pub fn clone_queue(&self) -> io::Result<Tun> {
        if !self.multi_queue {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "not a multi-queue TUN device",
            ));
        }
        let dev = self.dev.try_clone()?;
        let t = Self::from_device(dev, self.offload, true)?;
        t.set_recv_timeout(Duration::from_millis(
            self.timeout_ms.load(Ordering::Relaxed),
        ))?;
        Ok(t)
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The link MTU (as read back after configuration).
    pub fn mtu(&self) -> u16 {
        self.mtu
    }

    /// Whether virtio-net header offloads are on.
    pub fn offload(&self) -> bool {
        self.offload
    }

    /// Makes receives return `WouldBlock` when nothing arrived within `timeout` (zero = block forever), so that
    /// reader threads can notice shutdown. Implemented with a non-blocking descriptor plus `poll` only when
    /// the device is idle, so busy reads cost no extra syscall.
    pub fn set_recv_timeout(&self, timeout: Duration) -> io::Result<()> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as u64;
        let ms = if ms == 0 && !timeout.is_zero() { 1 } else { ms };
        self.dev.set_nonblocking(ms != 0)?;
        self.timeout_ms.store(ms, Ordering::Relaxed);
        Ok(())
    }

    /// Waits up to `timeout` until a read would find a packet; `Ok(false)` if none came (zero: only looks).
    pub fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        sys::poll_readable(self.dev.as_fd(), timeout)
    }

    /// As [`Tun::recv_batch`], but without waiting: `WouldBlock` at once when no packet is there (the device has
    /// a receive timeout set, which makes its descriptor non-blocking; without one this blocks).
    pub fn try_recv_batch(
        &self,
        scratch: &mut [u8],
        out: &mut [PacketBuf],
        headroom: usize,
    ) -> io::Result<usize> {
        self.recv_batch_how(scratch, out, headroom, false)
    }

    /// Runs a read, waiting (up to the receive timeout; `wait` false: not at all) and retrying when a non-blocking
    /// read finds nothing.
    fn read_retry<T>(&self, wait: bool, mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
        loop {
            match f() {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !wait => return Err(e),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let ms = self.timeout_ms.load(Ordering::Relaxed);
                    if ms == 0 || !sys::poll_readable(self.dev.as_fd(), Duration::from_millis(ms))?
                    {
                        return Err(e);
                    }
                }
                r => return r,
            }
        }
    }

    /// One read from the device, as IP packets: without offload exactly one packet into `out[0]`; with
    /// offload, a super-packet is split into MTU-sized packets (with correct lengths and checksums) in
    /// `out[..n]` (at most [`MAX_SEGMENTS`]), and checksum-partial packets get their checksum completed.
    /// Each packet starts at `headroom` bytes into its buffer. `scratch` (offload only) must hold at least
    /// [`RECV_SCRATCH_LEN`] bytes. Buffers beyond the returned count are left empty. Errors other than
    /// `WouldBlock`/`Interrupted` may concern one malformed super-packet (`InvalidInput`/`Other`): the next read
    /// is unaffected. A super-packet needing more segments than `out` holds is an error (and is lost).
    pub fn recv_batch(
        &self,
        scratch: &mut [u8],
        out: &mut [PacketBuf],
        headroom: usize,
    ) -> io::Result<usize> {
        self.recv_batch_how(scratch, out, headroom, true)
    }

    fn recv_batch_how(
        &self,
        scratch: &mut [u8],
        out: &mut [PacketBuf],
        headroom: usize,
        wait: bool,
    ) -> io::Result<usize> {
        if out.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no output buffers",
            ));
        }
        if !self.offload {
            self.recv_how(&mut out[0], headroom, wait)?;
            return Ok(1);
        }
        if scratch.len() < RECV_SCRATCH_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "scratch shorter than RECV_SCRATCH_LEN",
            ));
        }
        let n = out.len().min(MAX_SEGMENTS);
        let out = &mut out[..n];
        // Expose each buffer's whole space after `headroom` as its data, for tun-rs to write into at offset 0.
        for b in out.iter_mut() {
            b.reset(headroom);
            let cap = b.capacity() - headroom;
            b.set_len(cap);
        }
        let mut sizes = [0usize; MAX_SEGMENTS];
        let r = {
            let views = recv_views(out);
            self.read_retry(wait, || {
                self.dev.recv_multiple(scratch, views, &mut sizes[..n], 0)
            })
        };
        let got = *r.as_ref().unwrap_or(&0);
        for (i, b) in out.iter_mut().enumerate() {
            b.set_len(if i < got { sizes[i] } else { 0 });
        }
        r
    }

    /// Reads one IP packet into `buf` at `headroom`. On an offload device a super-packet cannot be returned
    /// this way: it is dropped with an error (use [`Tun::recv_batch`] there).
    pub fn recv(&self, buf: &mut PacketBuf, headroom: usize) -> io::Result<()> {
        self.recv_how(buf, headroom, true)
    }

    fn recv_how(&self, buf: &mut PacketBuf, headroom: usize, wait: bool) -> io::Result<()> {
        buf.reset(headroom);
        if !self.offload {
            let n = self.read_retry(wait, || self.dev.recv(buf.spare_mut()))?;
            buf.set_len(n);
            return Ok(());
        }
        let mut scratch = self.recv_scratch.lock().unwrap_or_else(|e| e.into_inner());
        self.recv_batch_how(&mut scratch, std::slice::from_mut(buf), headroom, wait)
            .map(|_| ())
    }

    /// Writes one IP packet (on an offload device with a zero virtio-net header in front, via writev).
    pub fn send(&self, pkt: &[u8]) -> io::Result<()> {
        if self.offload {
            let hdr = [0u8; VIRTIO_NET_HDR_LEN];
            self.dev
                .send_vectored(&[IoSlice::new(&hdr), IoSlice::new(pkt)])?;
        } else {
            self.dev.send(pkt)?;
        }
        Ok(())
    }

    /// Writes IP packets. With offload, runs of TCP segments of one flow (and of UDP datagrams, where the kernel
    /// takes UDP GSO) are coalesced into super-packets of up to 64 KiB (GRO, see `gro`), each written with one
    /// `writev` that gathers the payloads where they lie: no headroom or tailroom is needed and nothing is
    /// copied. The packets are consumed: afterwards their contents are unspecified. Write errors do not stop the
    /// batch; the last one is returned. Returns the number of writes.
    pub fn send_batch(&self, pkts: &mut [PacketBuf]) -> io::Result<usize> {
        self.write_packets(pkts)
    }

    /// [`Tun::send_batch`] for IP packets that lie at `spans` of `bufs` (several may share a buffer, without
    /// overlapping): the datagrams of coalesced receives, opened where they lie. Their headers may be changed.
    pub fn send_spans(&self, bufs: &mut [PacketBuf], spans: &[Span]) -> io::Result<usize> {
        self.write_packets(&mut gro::Spans { bufs, spans })
    }

    fn write_packets<P: gro::Packets + ?Sized>(&self, pkts: &mut P) -> io::Result<usize> {
        if !self.offload {
            let mut res = Ok(pkts.count());
            for i in 0..pkts.count() {
                if let Err(e) = self.send(pkts.packet(i)) {
                    res = Err(e);
                }
            }
            return res;
        }
        gro::write_batch(pkts, 0, self.dev.udp_gso(), |iov| {
            self.dev.send_vectored(iov)
        })
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.dev.as_fd()
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.dev.as_raw_fd()
    }
}
