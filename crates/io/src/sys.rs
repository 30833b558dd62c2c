//! Small libc helpers: every `unsafe` block of the socket modules lives here.

use std::io::{self, IoSlice};
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use netveil_wire::PacketBuf;

/// Size of the mmsghdr arrays kept per socket and direction.
pub(crate) const MAX_BATCH: usize = 64;

/// Control-message space per datagram: enough for in6_pktinfo + hop limit + traffic class (3 × ≤ 40 bytes),
/// or for in6_pktinfo + a UDP GSO/GRO segment size (40 + 24 bytes).
const CMSG_SPACE: usize = 128;

/// `UDP_SEGMENT` (SOL_UDP): GSO segment size of a sent datagram (u16 cmsg) — linux/udp.h.
pub(crate) const UDP_SEGMENT: libc::c_int = 103;
/// `UDP_GRO` (SOL_UDP): socket option enabling GRO; cmsg with the segment size (int) of a received message.
pub(crate) const UDP_GRO: libc::c_int = 104;
/// The most segments the kernel accepts in one UDP GSO send (`UDP_MAX_SEGMENTS`).
pub(crate) const UDP_MAX_SEGMENTS: usize = 64;

/// The most payload one UDP send carries (a 16-bit length, less the IPv4 and UDP headers), GSO sends too.
pub(crate) const UDP_MAX_PAYLOAD: usize = 65507;

/// What one sendmmsg slot of [`Mmsg::send_segmented`] carries: which item, from which byte offset, how many
/// datagrams, and whether it is a GSO super-datagram.
#[derive(Clone, Copy, Default)]
struct SegSlot {
    item: usize,
    off: usize,
    dgrams: usize,
    gso: bool,
}

#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct CmsgSpace([u8; CMSG_SPACE]);

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `socket(2)` with `SOCK_CLOEXEC`.
pub(crate) fn socket(
    domain: libc::c_int,
    ty: libc::c_int,
    proto: libc::c_int,
) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let fd = cvt(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) })?;
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(2)` with a plain-old-data value.
pub(crate) fn setsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: T,
) -> io::Result<()> {
    // SAFETY: the pointer and length describe `value`, which lives for the duration of the call; `T: Copy`
    // values used here are integers, `libc::timeval`, `libc::linger` and `libc::sock_fprog` (whose program pointer
    // the caller keeps valid for the call; the kernel copies the program), valid for any bit pattern the kernel
    // reads.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Packets the kernel dropped on their way to this socket (`SO_MEMINFO`, `SK_MEMINFO_DROPS`): those its socket
/// filter refused and those that found the receive buffer full.
pub(crate) fn socket_drops(fd: BorrowedFd<'_>) -> io::Result<u32> {
    // SK_MEMINFO_VARS is 9 (linux/sock_diag.h); SK_MEMINFO_DROPS is index 8.
    let mut info = [0u32; 9];
    let mut len = size_of::<[u32; 9]>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `info`, which outlives the call; the kernel writes at most `len`
    // bytes and updates `len`.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    Ok(info[8])
}

/// `getsockopt(2)` of an `int` option.
pub(crate) fn getsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `v`, which outlives the call; the kernel writes at most `len` bytes.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(v)
}

pub(crate) fn set_mark(fd: BorrowedFd<'_>, mark: u32) -> io::Result<()> {
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_MARK, mark as libc::c_int)
}

/// `SO_RCVTIMEO`; a zero duration means "block forever" (as the kernel treats it).
pub(crate) fn set_recv_timeout(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, tv)
}

/// `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` (needs CAP_NET_ADMIN), falling back to the capped `SO_RCVBUF`/`SO_SNDBUF`.
pub(crate) fn set_buffer_sizes(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    if setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v).is_err() {
        setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, v)?;
    }
    if setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, v).is_err() {
        setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, v)?;
    }
    Ok(())
}

/// Encodes a socket address into a `sockaddr_storage`, returning the length to pass to the kernel.
pub(crate) fn encode_sockaddr(
    addr: &SocketAddr,
    out: &mut libc::sockaddr_storage,
) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in.
            unsafe { std::ptr::write((out as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in6.
            unsafe { std::ptr::write((out as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Decodes an AF_INET/AF_INET6 `sockaddr_storage` filled by the kernel.
pub(crate) fn decode_sockaddr(st: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match st.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in; storage is large enough and aligned.
            let sin =
                unsafe { &*(st as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6; storage is large enough and aligned.
            let sin6 =
                unsafe { &*(st as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

pub(crate) fn bind(fd: BorrowedFd<'_>, addr: &SocketAddr) -> io::Result<()> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: libc::sockaddr_storage = unsafe { zeroed() };
    let len = encode_sockaddr(addr, &mut st);
    // SAFETY: `st` holds a valid address of `len` bytes.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&st as *const libc::sockaddr_storage).cast(),
            len,
        )
    })?;
    Ok(())
}

pub(crate) fn local_addr(fd: BorrowedFd<'_>) -> io::Result<SocketAddr> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: libc::sockaddr_storage = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `st`/`len` describe a writable buffer of the advertised size.
    cvt(unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&mut st as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    })?;
    decode_sockaddr(&st)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an IP socket"))
}

/// `poll(2)` for readability; `Ok(false)` on timeout.
pub(crate) fn poll_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd.
    let n = cvt(unsafe { libc::poll(&mut pfd, 1, ms) })?;
    Ok(n > 0)
}

/// `ppoll(2)` for readability, with a timeout to the nanosecond (a high-resolution timer, where `poll`'s is whole
/// milliseconds); `Ok(false)` on timeout or when a signal interrupted the wait.
pub(crate) fn ppoll_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd and a valid timespec, both outliving the call; no signal mask (null).
    let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    match cvt(r) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

/// `poll(2)` for readability of several descriptors (`None`: no timeout). Which are readable; all false on
/// timeout or when a signal interrupted the wait.
pub(crate) fn poll_readable_many(
    fds: &[BorrowedFd<'_>],
    timeout: Option<Duration>,
) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.map_or(-1, |t| {
        // Rounded up: a wait of 0.3 ms is not a busy loop.
        let ms = t.as_micros().div_ceil(1000);
        ms.min(i32::MAX as u128) as libc::c_int
    });
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfds for the duration of the call; the descriptors are
    // borrowed, so open.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    match cvt(r) {
        Ok(_) => Ok(pfds
            .iter()
            .map(|p| p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0)
            .collect()),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(vec![false; pfds.len()]),
        Err(e) => Err(e),
    }
}

/// One control message of a received datagram.
pub(crate) struct Cmsg<'a> {
    pub level: libc::c_int,
    pub ty: libc::c_int,
    pub data: &'a [u8],
}

/// Pre-allocated recvmmsg/sendmmsg state for one socket direction.
///
/// The raw pointers inside `hdrs`/`iovs` are rewritten before every syscall and only dereferenced by the kernel
/// during that call (and by [`Mmsg::cmsgs`] right after a receive, into `self.cmsgs`), so they never dangle
/// when used.
pub(crate) struct Mmsg {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<CmsgSpace>,
    /// For sends: what each slot carries.
    seg_slots: Vec<SegSlot>,
    /// For gathered sends: the datagrams of every slot's message, one iovec each (allocated on first use).
    gather: Vec<libc::iovec>,
}

// SAFETY: the raw pointers in `hdrs`/`iovs` are scratch values rewritten before each use (see the type docs);
// nothing is shared between threads through them.
unsafe impl Send for Mmsg {}

impl Mmsg {
    pub(crate) fn new() -> Self {
        // SAFETY: all-zero is a valid value for these plain C structs (null pointers, zero lengths).
        let (hdr, iov, st) = unsafe {
            (
                zeroed::<libc::mmsghdr>(),
                zeroed::<libc::iovec>(),
                zeroed::<libc::sockaddr_storage>(),
            )
        };
        Mmsg {
            hdrs: vec![hdr; MAX_BATCH],
            iovs: vec![iov; MAX_BATCH],
            names: vec![st; MAX_BATCH],
            cmsgs: vec![CmsgSpace([0; CMSG_SPACE]); MAX_BATCH],
            seg_slots: vec![SegSlot::default(); MAX_BATCH],
            gather: Vec::new(),
        }
    }

    /// recvmmsg(MSG_WAITFORONE) into `bufs[..min(len, MAX_BATCH)]`, each packet placed at `offset`
    /// (`reset(offset)` then `spare_mut()`). Returns how many datagrams arrived; their lengths are set with
    /// `set_len` (buffers beyond the count are reset to empty). Per-datagram details: [`Mmsg::name`],
    /// [`Mmsg::truncated`], [`Mmsg::cmsgs`].
    pub(crate) fn recv(
        &mut self,
        fd: BorrowedFd<'_>,
        bufs: &mut [PacketBuf],
        offset: usize,
        with_cmsg: bool,
    ) -> io::Result<usize> {
        let n = bufs.len().min(MAX_BATCH);
        if n == 0 {
            return Ok(0);
        }
        for (i, buf) in bufs[..n].iter_mut().enumerate() {
            buf.reset(offset);
            let spare = buf.spare_mut();
            self.iovs[i] = libc::iovec {
                iov_base: spare.as_mut_ptr().cast(),
                iov_len: spare.len(),
            };
            let h = &mut self.hdrs[i];
            h.msg_len = 0;
            h.msg_hdr.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_iov = &mut self.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            if with_cmsg {
                h.msg_hdr.msg_control = self.cmsgs[i].0.as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = CMSG_SPACE as _;
            } else {
                h.msg_hdr.msg_control = std::ptr::null_mut();
                h.msg_hdr.msg_controllen = 0;
            }
            h.msg_hdr.msg_flags = 0;
        }
        let got = loop {
            // SAFETY: `hdrs[..n]` point to `n` valid iovecs covering the spare space of `bufs[..n]` (borrowed
            // mutably for this whole function), to `names[i]` and to `cmsgs[i]`, all with correct lengths.
            let r = unsafe {
                libc::recvmmsg(
                    fd.as_raw_fd(),
                    self.hdrs.as_mut_ptr(),
                    n as _,
                    libc::MSG_WAITFORONE as _,
                    std::ptr::null_mut(),
                )
            };
            if r >= 0 {
                break r as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        for (i, buf) in bufs[..n].iter_mut().enumerate() {
            buf.set_len(if i < got {
                self.hdrs[i].msg_len as usize
            } else {
                0
            });
        }
        Ok(got)
    }

    /// The source address of received datagram `i`.
    pub(crate) fn name(&self, i: usize) -> Option<SocketAddr> {
        if (self.hdrs[i].msg_hdr.msg_namelen as usize) < size_of::<libc::sa_family_t>() {
            return None;
        }
        decode_sockaddr(&self.names[i])
    }

    /// Whether received datagram `i` was longer than its buffer (or its control data was cut).
    pub(crate) fn truncated(&self, i: usize) -> bool {
        self.hdrs[i].msg_hdr.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0
    }

    /// Calls `f` for each control message of received datagram `i`.
    pub(crate) fn cmsgs(&self, i: usize, mut f: impl FnMut(Cmsg<'_>)) {
        let hdr = &self.hdrs[i].msg_hdr;
        if hdr.msg_control.is_null() {
            return;
        }
        // SAFETY: `hdr` was filled by the kernel in the last recvmmsg: msg_control points to `self.cmsgs[i]`
        // (alive, borrowed through `&self`) and msg_controllen is the length the kernel wrote. The CMSG_*
        // macros only walk within that range, and each data slice is bounded by cmsg_len.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(hdr);
            while !c.is_null() {
                let data = libc::CMSG_DATA(c);
                let len = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                f(Cmsg {
                    level: (*c).cmsg_level,
                    ty: (*c).cmsg_type,
                    data: std::slice::from_raw_parts(data, len),
                });
                c = libc::CMSG_NXTHDR(hdr, c);
            }
        }
    }

    /// sendmmsg of `count` packets given by `item(i)` (data, destination, source; `None` = malformed,
    /// skipped). Without a destination the socket's own (bound or connected) address is used, as for
    /// `AF_PACKET` sockets bound to an interface. Packets the kernel refuses are skipped (dropped) and the rest
    /// still sent. Returns how many were sent, or the first error if none was.
    pub(crate) fn send<'a>(
        &mut self,
        fd: BorrowedFd<'_>,
        count: usize,
        mut item: impl FnMut(usize) -> Option<(&'a [u8], Option<SocketAddr>, Option<IpAddr>)>,
    ) -> io::Result<usize> {
        let mut next = 0;
        let mut sent = 0;
        let mut first_err: Option<io::Error> = None;
        while next < count {
            let mut filled = 0;
            while filled < MAX_BATCH && next < count {
                let idx = next;
                next += 1;
                let Some((data, dst, src)) = item(idx) else {
                    first_err.get_or_insert_with(|| {
                        io::Error::new(io::ErrorKind::InvalidInput, "malformed packet")
                    });
                    continue;
                };
                self.iovs[filled] = libc::iovec {
                    iov_base: data.as_ptr() as *mut libc::c_void,
                    iov_len: data.len(),
                };
                let iov: *mut libc::iovec = &mut self.iovs[filled];
                self.prepare_send(filled, dst.as_ref(), src, None, iov, 1);
                self.seg_slots[filled] = SegSlot {
                    item: idx,
                    off: 0,
                    dgrams: 1,
                    gso: false,
                };
                filled += 1;
            }
            // No GSO message: nothing to resend.
            let no_gso = AtomicBool::new(false);
            self.send_slots(fd, filled, &no_gso, &mut sent, &mut first_err);
        }
        match first_err {
            Some(e) if sent == 0 => Err(e),
            _ => Ok(sent),
        }
    }
}

impl Mmsg {
    /// sendmmsg of `count` buffers given by `item(i)` = (data, segment size, destination, source), each to be
    /// split into datagrams of `segment size` bytes (the last may be shorter). While `gso` is true, a buffer
    /// longer than one segment goes out as one message with a `UDP_SEGMENT` cmsg (the kernel splits it);
    /// otherwise (or for single-segment buffers) each datagram is its own message. If the kernel refuses a GSO
    /// message with `EIO`/`EINVAL` (no checksum offload on the egress device, `SO_NO_CHECK`, xfrm route, old
    /// kernel), `gso` is cleared and that buffer and all following ones are sent as plain datagrams.
    /// Other refused messages are dropped and the rest still sent. Callers validate the items (segment size
    /// ≥ 1, at most [`UDP_MAX_SEGMENTS`] segments). Returns how many datagrams were sent, or the first error if
    /// none was.
    pub(crate) fn send_segmented<'a>(
        &mut self,
        fd: BorrowedFd<'_>,
        count: usize,
        gso: &AtomicBool,
        mut item: impl FnMut(usize) -> (&'a [u8], usize, SocketAddr, Option<IpAddr>),
    ) -> io::Result<usize> {
        // Cursor: (item index, byte offset into that item's data).
        let mut cur = (0usize, 0usize);
        let mut sent = 0;
        let mut first_err: Option<io::Error> = None;
        'refill: while cur.0 < count {
            let use_gso = gso.load(Ordering::Relaxed);
            let mut filled = 0;
            while filled < MAX_BATCH && cur.0 < count {
                let (data, seg, dst, src) = item(cur.0);
                let seg = seg.max(1);
                let rest = data.get(cur.1..).unwrap_or_default();
                let (chunk, dgrams, is_gso) = if use_gso && rest.len() > seg {
                    (rest, rest.len().div_ceil(seg), true)
                } else {
                    (&rest[..rest.len().min(seg)], 1, false)
                };
                self.seg_slots[filled] = SegSlot {
                    item: cur.0,
                    off: cur.1,
                    dgrams,
                    gso: is_gso,
                };
                cur.1 += chunk.len();
                if cur.1 >= data.len() {
                    cur = (cur.0 + 1, 0);
                }
                self.iovs[filled] = libc::iovec {
                    iov_base: chunk.as_ptr() as *mut libc::c_void,
                    iov_len: chunk.len(),
                };
                let iov: *mut libc::iovec = &mut self.iovs[filled];
                self.prepare_send(
                    filled,
                    Some(&dst),
                    src,
                    is_gso.then_some(seg as u16),
                    iov,
                    1,
                );
                filled += 1;
            }
            if let Some(slot) = self.send_slots(fd, filled, gso, &mut sent, &mut first_err) {
                // GSO refused: resend from this slot as plain datagrams.
                cur = (slot.item, slot.off);
                continue 'refill;
            }
        }
        match first_err {
            Some(e) if sent == 0 => Err(e),
            _ => Ok(sent),
        }
    }

    /// Fills message `slot` of a send: the destination (none: the socket's own), the control data (source address
    /// and GSO segment size, each if given) and `iovlen` iovecs at `iov` (in `iovs` or `gather`, filled by the
    /// caller).
    fn prepare_send(
        &mut self,
        slot: usize,
        dst: Option<&SocketAddr>,
        src: Option<IpAddr>,
        gso_seg: Option<u16>,
        iov: *mut libc::iovec,
        iovlen: usize,
    ) {
        let namelen = dst.map_or(0, |d| encode_sockaddr(d, &mut self.names[slot]));
        let clen = if src.is_some() || gso_seg.is_some() {
            write_send_cmsgs(&mut self.cmsgs[slot], src, gso_seg)
        } else {
            0
        };
        let h = &mut self.hdrs[slot];
        h.msg_len = 0;
        h.msg_hdr.msg_name = if namelen == 0 {
            std::ptr::null_mut()
        } else {
            (&mut self.names[slot] as *mut libc::sockaddr_storage).cast()
        };
        h.msg_hdr.msg_namelen = namelen;
        h.msg_hdr.msg_iov = iov;
        h.msg_hdr.msg_iovlen = iovlen as _;
        if clen > 0 {
            h.msg_hdr.msg_control = self.cmsgs[slot].0.as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = clen as _;
        } else {
            h.msg_hdr.msg_control = std::ptr::null_mut();
            h.msg_hdr.msg_controllen = 0;
        }
        h.msg_hdr.msg_flags = 0;
    }

    /// Sends the `filled` prepared messages (their `seg_slots` filled) with sendmmsg, adding the datagrams sent
    /// to `sent`. A message the kernel refuses is dropped (its error kept in `first_err` if it is the first),
    /// except a GSO message refused with `EIO`/`EINVAL`: then `gso` is cleared and its slot returned, for the
    /// caller to go on from there with plain datagrams.
    fn send_slots(
        &mut self,
        fd: BorrowedFd<'_>,
        filled: usize,
        gso: &AtomicBool,
        sent: &mut usize,
        first_err: &mut Option<io::Error>,
    ) -> Option<SegSlot> {
        let mut start = 0;
        while start < filled {
            // SAFETY: `hdrs[start..filled]` point to valid iovecs over data the caller borrows for the duration of
            // this call, to encoded addresses in `names` and to control data in `cmsgs` of the advertised lengths;
            // the kernel only reads them.
            let r = unsafe {
                libc::sendmmsg(
                    fd.as_raw_fd(),
                    self.hdrs[start..].as_mut_ptr(),
                    (filled - start) as _,
                    0,
                )
            };
            if r > 0 {
                let r = r as usize;
                *sent += self.seg_slots[start..start + r]
                    .iter()
                    .map(|s| s.dgrams)
                    .sum::<usize>();
                start += r;
                continue;
            }
            let e = if r < 0 {
                io::Error::last_os_error()
            } else {
                io::Error::new(io::ErrorKind::WriteZero, "sendmmsg sent nothing")
            };
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            let slot = self.seg_slots[start];
            if slot.gso && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL)) {
                // GSO refused: never try again on this socket; the caller resends from this slot as plain
                // datagrams.
                gso.store(false, Ordering::Relaxed);
                return Some(slot);
            }
            // The message in slot `start` was refused: drop it and go on with the rest.
            first_err.get_or_insert(e);
            start += 1;
        }
        None
    }

    /// sendmmsg of `count` runs given by `item(i)` = (datagrams, destination, source), whose datagrams are
    /// separate slices, all as long as the first but possibly the last, shorter one (callers check). While `gso`
    /// is true, a run of more than one datagram goes out as one message that gathers up to
    /// [`UDP_MAX_SEGMENTS`] of them (one iovec each) with a `UDP_SEGMENT` cmsg of the first one's length, so
    /// nothing is copied into one buffer first; otherwise each datagram is its own message. Refusals as in
    /// [`Mmsg::send_segmented`]. Returns how many datagrams were sent, or the first error if none was.
    pub(crate) fn send_gathered<'a>(
        &mut self,
        fd: BorrowedFd<'_>,
        count: usize,
        gso: &AtomicBool,
        mut item: impl FnMut(usize) -> (&'a [IoSlice<'a>], SocketAddr, Option<IpAddr>),
    ) -> io::Result<usize> {
        if self.gather.is_empty() {
            // SAFETY: all-zero is a valid iovec (null pointer, zero length).
            let iov = unsafe { zeroed::<libc::iovec>() };
            self.gather = vec![iov; MAX_BATCH * UDP_MAX_SEGMENTS];
        }
        // Cursor: (run index, datagram index in that run).
        let mut cur = (0usize, 0usize);
        let mut sent = 0;
        let mut first_err: Option<io::Error> = None;
        'refill: while cur.0 < count {
            let use_gso = gso.load(Ordering::Relaxed);
            let mut filled = 0;
            let mut used = 0;
            while filled < MAX_BATCH && cur.0 < count {
                let (dgrams, dst, src) = item(cur.0);
                let rest = dgrams.get(cur.1..).unwrap_or_default();
                if rest.is_empty() {
                    cur = (cur.0 + 1, 0);
                    continue;
                }
                // As many as one GSO message takes: UDP_MAX_SEGMENTS, and a UDP length that fits 16 bits.
                let take = if use_gso {
                    let per_msg =
                        (UDP_MAX_PAYLOAD / dgrams[0].len().max(1)).clamp(1, UDP_MAX_SEGMENTS);
                    rest.len().min(per_msg)
                } else {
                    1
                };
                let is_gso = take > 1;
                self.seg_slots[filled] = SegSlot {
                    item: cur.0,
                    off: cur.1,
                    dgrams: take,
                    gso: is_gso,
                };
                for (g, d) in self.gather[used..used + take].iter_mut().zip(rest) {
                    *g = libc::iovec {
                        iov_base: d.as_ptr() as *mut libc::c_void,
                        iov_len: d.len(),
                    };
                }
                cur.1 += take;
                if cur.1 >= dgrams.len() {
                    cur = (cur.0 + 1, 0);
                }
                let seg = dgrams[0].len().min(u16::MAX as usize) as u16;
                let iov: *mut libc::iovec = &mut self.gather[used];
                self.prepare_send(filled, Some(&dst), src, is_gso.then_some(seg), iov, take);
                used += take;
                filled += 1;
            }
            if let Some(slot) = self.send_slots(fd, filled, gso, &mut sent, &mut first_err) {
                cur = (slot.item, slot.off);
                continue 'refill;
            }
        }
        match first_err {
            Some(e) if sent == 0 => Err(e),
            _ => Ok(sent),
        }
    }
}

/// Writes the control messages of a sent datagram: optional source address (`IP_PKTINFO`/`IPV6_PKTINFO`) and
/// optional GSO segment size (`UDP_SEGMENT`, u16). Returns the control length.
fn write_send_cmsgs(space: &mut CmsgSpace, src: Option<IpAddr>, gso: Option<u16>) -> usize {
    let mut len = match src {
        Some(src) => write_pktinfo(space, src),
        None => {
            space.0.fill(0);
            0
        }
    };
    if let Some(seg) = gso {
        let dlen = size_of::<u16>();
        // SAFETY: `space` is 8-byte aligned and CMSG_SPACE bytes long; `len` (≤ CMSG_SPACE(20) = 40) is a
        // multiple of the cmsg alignment, and 40 + CMSG_SPACE(2) ≤ CMSG_SPACE, so the header and data written at
        // offset `len` stay inside the buffer.
        unsafe {
            let c = space.0.as_mut_ptr().add(len).cast::<libc::cmsghdr>();
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(dlen as u32) as _;
            std::ptr::copy_nonoverlapping(seg.to_ne_bytes().as_ptr(), libc::CMSG_DATA(c), dlen);
            len += libc::CMSG_SPACE(dlen as u32) as usize;
        }
    }
    len
}

/// Writes an `IP_PKTINFO` (source `ipi_spec_dst`) or `IPV6_PKTINFO` (source `ipi6_addr`) control message
/// selecting the source address of a sent datagram; returns the control length.
fn write_pktinfo(space: &mut CmsgSpace, src: IpAddr) -> usize {
    space.0.fill(0);
    let (level, ty, data): (libc::c_int, libc::c_int, [u8; 20]) = match src {
        IpAddr::V4(a) => {
            // struct in_pktinfo { int ipi_ifindex; in_addr ipi_spec_dst; in_addr ipi_addr; }
            let mut d = [0u8; 20];
            d[4..8].copy_from_slice(&a.octets());
            (libc::IPPROTO_IP, libc::IP_PKTINFO, d)
        }
        IpAddr::V6(a) => {
            // struct in6_pktinfo { in6_addr ipi6_addr; unsigned ipi6_ifindex; }
            let mut d = [0u8; 20];
            d[..16].copy_from_slice(&a.octets());
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, d)
        }
    };
    let dlen = match src {
        IpAddr::V4(_) => size_of::<libc::in_pktinfo>(),
        IpAddr::V6(_) => size_of::<libc::in6_pktinfo>(),
    };
    // SAFETY: `space` is 8-byte aligned and CMSG_SPACE bytes long, more than CMSG_SPACE(20); the msghdr only
    // describes that buffer, so CMSG_FIRSTHDR returns a pointer to its start and CMSG_DATA stays inside it.
    unsafe {
        let mut mh: libc::msghdr = zeroed();
        mh.msg_control = space.0.as_mut_ptr().cast();
        mh.msg_controllen = CMSG_SPACE as _;
        let c = libc::CMSG_FIRSTHDR(&mh);
        (*c).cmsg_level = level;
        (*c).cmsg_type = ty;
        (*c).cmsg_len = libc::CMSG_LEN(dlen as u32) as _;
        std::ptr::copy_nonoverlapping(data.as_ptr(), libc::CMSG_DATA(c), dlen);
        libc::CMSG_SPACE(dlen as u32) as usize
    }
}

/// The destination address of a complete IP packet (from its header), with port 0.
pub(crate) fn ip_packet_dst(pkt: &[u8]) -> Option<SocketAddr> {
    netveil_wire::ip::dst_addr(pkt).map(|a| SocketAddr::new(a, 0))
}

/// Reads a native-endian `c_int` control-message payload.
pub(crate) fn cmsg_int(data: &[u8]) -> Option<i32> {
    Some(i32::from_ne_bytes(data.get(..4)?.try_into().ok()?))
}
