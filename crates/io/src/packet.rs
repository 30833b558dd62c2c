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

    /// Writes frames to the host. With offload, consecutive TCP segments of one flow (same addresses, ports and
    /// headers, contiguous sequence numbers, equal sizes but possibly the last) are coalesced into one
    /// super-frame, up to 64 KiB, in the tailroom of the first one's buffer. The frames are consumed (their
    /// contents afterwards are unspecified). Write errors do not stop the batch; the last one is returned.
    /// Returns the number of writes (super-frames and single frames).
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
        let mut writes = 0;
        let mut r = Ok(());
        let mut i = 0;
        while i < frames.len() {
            let (head, rest) = frames.split_at_mut(i + 1);
            let first = &mut head[i];
            let mut hdr = [0u8; VNET_HDR_LEN];
            let mut used = 1;
            if let Some(seg) = gro::Segment::parse(first.data()) {
                let mut merged = 0;
                for next in rest.iter() {
                    if !gro::append(first, &seg, merged, next.data()) {
                        break;
                    }
                    merged += 1;
                }
                if merged > 0 {
                    gro::finish(first, &seg, merged + 1, &mut hdr);
                    used += merged;
                }
            }
            let w = self.dev.send_vectored(&[
                std::io::IoSlice::new(&hdr),
                std::io::IoSlice::new(first.data()),
            ]);
            if let Err(e) = w {
                r = Err(e);
            }
            writes += 1;
            i += used;
        }
        r.map(|()| writes)
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

/// TCP segment coalescing for writes to an offload TAP (what the kernel's GRO would do for a NIC).
mod gro {
    use super::{ETH, VNET_HDR_LEN};
    use netveil_wire::{checksum, ethernet, ip_proto, ipv4, ipv6, tcp, PacketBuf};

    const TCPV4: u8 = 1;
    const TCPV6: u8 = 4;
    const MAX_LEN: usize = 65535;
    /// The flag bits of a TCP header's 14th byte (CWR..FIN), which a run compares; NS is compared with the data
    /// offset and the reserved bits.
    const FLAGS8: u16 = 0xff;

    /// The first segment of a run: where its headers end and what the next one must continue.
    pub(super) struct Segment {
        v6: bool,
        ip_len: usize,
        tcp_len: usize,
        payload: usize,
        seq: u32,
    }

    /// True if a TCP header's flags are ACK, possibly with PSH, and nothing else.
    fn ack_psh_only<T: AsRef<[u8]>>(t: &tcp::Packet<T>) -> bool {
        t.flags() & FLAGS8 & !tcp::flags::PSH == tcp::flags::ACK
    }

    impl Segment {
        /// A TCP segment that may start a run: IPv4 without options or fragmentation, or IPv6 without extension
        /// headers; only ACK (and PSH) flags; some payload.
        pub(super) fn parse(f: &[u8]) -> Option<Segment> {
            if f.len() < ETH + ipv4::MIN_HEADER_LEN + tcp::MIN_HEADER_LEN {
                return None;
            }
            let eth = ethernet::Packet::new_unchecked(f);
            let l3 = eth.payload();
            let (v6, ip_len) = match eth.ethertype() {
                ethernet::ethertype::IPV4 => {
                    let h = ipv4::Packet::new_unchecked(l3);
                    if h.version() != 4
                        || h.header_len() != ipv4::MIN_HEADER_LEN
                        || h.protocol() != ip_proto::TCP
                        || h.is_fragment()
                        || usize::from(h.total_len()) != l3.len()
                    {
                        return None;
                    }
                    (false, ipv4::MIN_HEADER_LEN)
                }
                ethernet::ethertype::IPV6 => {
                    let h = ipv6::Packet::new_unchecked(l3);
                    if h.version() != 6
                        || h.next_header() != ip_proto::TCP
                        || h.total_len() != l3.len()
                    {
                        return None;
                    }
                    (true, ipv6::HEADER_LEN)
                }
                _ => return None,
            };
            let t = tcp::Packet::new_checked(&l3[ip_len..]).ok()?;
            if !ack_psh_only(&t) || t.payload().is_empty() {
                return None;
            }
            Some(Segment {
                v6,
                ip_len,
                tcp_len: t.header_len(),
                payload: t.payload().len(),
                seq: t.seq_number(),
            })
        }

        fn hdrs(&self) -> usize {
            ETH + self.ip_len + self.tcp_len
        }
    }

    /// True if `a` and `b` are the same IPv4 header but for the total length, identification and checksum.
    fn same_v4(a: &ipv4::Packet<&[u8]>, b: &ipv4::Packet<&[u8]>) -> bool {
        a.version() == b.version()
            && a.header_len() == b.header_len()
            && a.dscp_ecn() == b.dscp_ecn()
            && a.flags() == b.flags()
            && a.frag_offset() == b.frag_offset()
            && a.ttl() == b.ttl()
            && a.protocol() == b.protocol()
            && a.src_addr() == b.src_addr()
            && a.dst_addr() == b.dst_addr()
    }

    /// True if `a` and `b` are the same IPv6 fixed header but for the payload length.
    fn same_v6(a: &ipv6::Packet<&[u8]>, b: &ipv6::Packet<&[u8]>) -> bool {
        a.version() == b.version()
            && a.traffic_class() == b.traffic_class()
            && a.flow_label() == b.flow_label()
            && a.next_header() == b.next_header()
            && a.hop_limit() == b.hop_limit()
            && a.src_addr() == b.src_addr()
            && a.dst_addr() == b.dst_addr()
    }

    /// True if `a` and `b` are the same TCP header (with `b`'s flags ACK and PSH at most) but for the sequence
    /// number, PSH and the checksum.
    /// `a` is a parsed segment's header; `b` holds at least as many bytes.
    fn same_tcp(a: &tcp::Packet<&[u8]>, b: &tcp::Packet<&[u8]>) -> bool {
        a.src_port() == b.src_port()
            && a.dst_port() == b.dst_port()
            && a.ack_number() == b.ack_number()
            // Before the options are compared: `b`'s header is as long as `a`'s.
            && a.header_len() == b.header_len()
            && a.reserved() == b.reserved()
            && a.flags() & !FLAGS8 == b.flags() & !FLAGS8
            && ack_psh_only(b)
            && a.window_len() == b.window_len()
            && a.urgent_at() == b.urgent_at()
            && a.options() == b.options()
    }

    /// Appends `next`'s payload to `first` if it continues the run (`merged` segments appended so far).
    pub(super) fn append(first: &mut PacketBuf, s: &Segment, merged: usize, next: &[u8]) -> bool {
        let h = s.hdrs();
        let f = first.data();
        let (fl3, tf) = f[ETH..].split_at(s.ip_len);
        let tf = tcp::Packet::new_unchecked(tf);
        // The previous segment ended with PSH: the run is over.
        if tf.flags() & tcp::flags::PSH != 0 {
            return false;
        }
        if next.len() <= h || next.len() - h > s.payload {
            return false;
        }
        let n = next.len() - h;
        // Same Ethernet header, same IP header but for length, ID and checksum, same TCP header but for the
        // sequence number, PSH and the checksum; contiguous.
        let (nl3, tn) = next[ETH..].split_at(s.ip_len);
        let tn = tcp::Packet::new_unchecked(tn);
        let same_ip = if s.v6 {
            let b = ipv6::Packet::new_unchecked(nl3);
            same_v6(&ipv6::Packet::new_unchecked(fl3), &b) && b.total_len() == next.len() - ETH
        } else {
            let b = ipv4::Packet::new_unchecked(nl3);
            same_v4(&ipv4::Packet::new_unchecked(fl3), &b)
                && usize::from(b.total_len()) == next.len() - ETH
        };
        let expect = s.seq.wrapping_add((s.payload * (merged + 1)) as u32);
        // Only the last segment of a run may be shorter than the first.
        let prev_full = first.len() - h == s.payload * (merged + 1);
        if !(f[..ETH] == next[..ETH]
            && same_ip
            && same_tcp(&tf, &tn)
            && tn.seq_number() == expect
            && prev_full)
        {
            return false;
        }
        if first.len() + n > ETH + MAX_LEN || first.tailroom() < n {
            return false;
        }
        let psh = tn.flags() & tcp::flags::PSH;
        match first.push_back(n) {
            Some(dst) => dst.copy_from_slice(&next[h..]),
            None => return false,
        }
        let mut t = tcp::Packet::new_unchecked(&mut first.data_mut()[ETH + s.ip_len..]);
        let flags = t.flags();
        t.set_flags(flags | psh);
        true
    }

    /// Fixes the super-frame's IP length and checksum, puts the pseudo-header sum in the TCP checksum and fills
    /// the virtio-net header (`segments` segments of `s.payload` bytes, the last possibly shorter).
    pub(super) fn finish(
        first: &mut PacketBuf,
        s: &Segment,
        segments: usize,
        hdr: &mut [u8; VNET_HDR_LEN],
    ) {
        let _ = segments;
        let t = ETH + s.ip_len;
        let total = first.len() - ETH;
        let tcp_total = total - s.ip_len;
        let (l3, l4) = first.data_mut()[ETH..].split_at_mut(s.ip_len);
        // The IP lengths (and IPv4 checksum) of the super-frame; the pseudo-header sum in the TCP checksum, as for
        // CHECKSUM_PARTIAL.
        let pseudo = if s.v6 {
            let mut h = ipv6::Packet::new_unchecked(&mut *l3);
            h.set_payload_len(tcp_total as u16);
            let (src, dst) = (h.src_addr().octets(), h.dst_addr().octets());
            checksum::pseudo_header(&src, &dst, ip_proto::TCP, tcp_total as u32)
        } else {
            let mut h = ipv4::Packet::new_unchecked(&mut *l3);
            h.set_total_len(total as u16);
            h.fill_checksum();
            let (src, dst) = (h.src_addr().octets(), h.dst_addr().octets());
            checksum::pseudo_header(&src, &dst, ip_proto::TCP, tcp_total as u32)
        };
        tcp::Packet::new_unchecked(l4).set_checksum(!checksum::finish(pseudo));
        let v = tun_rs::VirtioNetHdr {
            flags: super::NEEDS_CSUM,
            gso_type: if s.v6 { TCPV6 } else { TCPV4 },
            hdr_len: (t + s.tcp_len) as u16,
            gso_size: s.payload as u16,
            csum_start: t as u16,
            csum_offset: 16,
        };
        let _ = v.encode(hdr);
    }
}

impl AsFd for Tap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.dev.as_fd()
    }
}
