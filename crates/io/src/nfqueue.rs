//! Netfilter queues (`NFQUEUE`, `nfnetlink_queue`): the kernel hands packets of the host's own stack to user space,
//! which gives each back with a verdict (accept, drop) and, where it changed it, its new bytes.
//!
//! Our own module rather than a crate: the pure-Rust `nfq` crate (the well-kept one; `nfqueue`/`nf-queue` wrap the
//! C libraries) receives one packet per syscall, sends one verdict per syscall, copies every changed packet into a
//! new `Vec` (a packet that grows or shrinks cannot be changed in place there) and gives no descriptor to poll or
//! time out on (a thread blocked in it cannot be stopped). Here:
//! - packets arrive in batches with one `recvmmsg` ([`NfQueue::recv_batch`]), each at a fixed headroom in a
//!   [`PacketBuf`], so a transform can grow the packet forward in place (the netlink headers before it are parsed
//!   first and then free);
//! - verdicts leave in one `sendmsg` per batch ([`NfQueue::verdicts`]): one netlink message per packet, its headers
//!   from a scratch buffer and its payload straight from the packet's buffer (an iovec each), no copy;
//! - the receive timeout makes a worker loop stoppable.
//!
//! Queues are bound with "fail closed" semantics: no `NFQA_CFG_F_FAIL_OPEN` (a full queue drops), and without a
//! listener the `NFQUEUE` target (without `--queue-bypass`) drops too. GSO packets are segmented by the kernel
//! before they are queued (no `NFQA_CFG_F_GSO`), so every queued packet is one IP packet.

use crate::sys::{self, Mmsg};
use netveil_wire::PacketBuf;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

const NETLINK_NETFILTER: libc::c_int = 12;
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_PACKET: u8 = 2;
const NFQA_CFG_F_FAIL_OPEN: u32 = 1;
const NFQA_CFG_F_GSO: u32 = 4;
const NLMSG_HDR: usize = 16;
const NFGEN_HDR: usize = 4;
/// The attribute type bits (without the nested and byte-order flags).
const NLA_TYPE_MASK: u16 = 0x3fff;

/// Bytes every received buffer keeps free before the netlink message: with the message's own headers (at least
/// 36 bytes before the payload) a transform has more than this much room to grow a packet forward in place.
pub const HEADROOM: usize = 64;

/// The largest netlink message of one queued packet: the packet (at most 65535 bytes) and its attributes.
pub const MESSAGE_MAX: usize = 65535 + 1024;

/// What the kernel says of one queued packet (the packet itself is in its buffer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Queued {
    /// The kernel's id of the packet, for its verdict.
    pub id: u32,
    /// The queue it came from.
    pub queue: u16,
    /// The netfilter hook (0 PRE_ROUTING, 1 LOCAL_IN, 2 FORWARD, 3 LOCAL_OUT, 4 POST_ROUTING).
    pub hook: u8,
}

/// What happens to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Dropped.
    Drop,
    /// Accepted as it was queued.
    Accept,
    /// Accepted with the bytes given (its buffer's data).
    AcceptChanged,
}

/// A netlink socket bound to one or more netfilter queues.
pub struct NfQueue {
    fd: OwnedFd,
    rx: Mutex<Mmsg>,
    tx: Mutex<Tx>,
}

/// Verdict scratch: the headers of each message of a batch, and the iovecs of the one `sendmsg`.
struct Tx {
    heads: Vec<[u8; HEAD_LEN]>,
    iovs: Vec<libc::iovec>,
    /// Where one message's header is put together (kept: no allocation per packet).
    scratch: Vec<u8>,
}

// SAFETY: the iovecs hold pointers only during `NfQueue::verdicts`, which rewrites them before each use.
unsafe impl Send for Tx {}

/// A verdict message's bytes before its payload: netlink header, nfgenmsg, the verdict attribute (4 + 8), the
/// payload attribute's header (4).
const HEAD_LEN: usize = NLMSG_HDR + NFGEN_HDR + 12 + 4;

fn put_nlmsg_header(b: &mut Vec<u8>, len: usize, msg: u16, flags: u16, queue: u16) {
    b.extend_from_slice(&(len as u32).to_ne_bytes());
    b.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | msg).to_ne_bytes());
    b.extend_from_slice(&flags.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes()); // seq
    b.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
                                              // nfgenmsg: family unspecified, version 0, the queue number (big-endian).
    b.extend_from_slice(&[libc::AF_UNSPEC as u8, 0]);
    b.extend_from_slice(&queue.to_be_bytes());
}

fn put_attr(b: &mut Vec<u8>, ty: u16, data: &[u8]) {
    b.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    b.extend_from_slice(&ty.to_ne_bytes());
    b.extend_from_slice(data);
    while !b.len().is_multiple_of(4) {
        b.push(0);
    }
}

/// The attributes of a netlink message body (after the nfgenmsg): `(type, data)`, stopping at the first one whose
/// length does not fit.
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            return None;
        }
        let data = &b[4..len];
        let adv = (len + 3) & !3;
        b = b.get(adv..).unwrap_or(&[]);
        Some((ty, data))
    })
}

/// One received netlink message as a queued packet: its metadata and where its payload lies in `msg`. `None`
/// for anything else (errors, acknowledgements, malformed messages). (Public for the fuzz target.)
pub fn parse_packet(msg: &[u8]) -> Option<(Queued, std::ops::Range<usize>)> {
    if msg.len() < NLMSG_HDR + NFGEN_HDR {
        return None;
    }
    let len = u32::from_ne_bytes(msg[0..4].try_into().ok()?) as usize;
    let ty = u16::from_ne_bytes([msg[4], msg[5]]);
    if len > msg.len()
        || len < NLMSG_HDR + NFGEN_HDR
        || ty != (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET
    {
        return None;
    }
    let queue = u16::from_be_bytes([msg[NLMSG_HDR + 2], msg[NLMSG_HDR + 3]]); // check-ip-offsets: allow (netlink)
    let body_at = NLMSG_HDR + NFGEN_HDR;
    let body = &msg[body_at..len];
    let (mut hdr, mut payload) = (None, None);
    for (t, data) in attrs(body) {
        match t {
            NFQA_PACKET_HDR if data.len() >= 7 => {
                hdr = Some((u32::from_be_bytes(data[0..4].try_into().ok()?), data[6]));
            }
            NFQA_PAYLOAD => {
                let start = data.as_ptr() as usize - msg.as_ptr() as usize;
                payload = Some(start..start + data.len());
            }
            _ => {}
        }
    }
    let (id, hook) = hdr?;
    Some((Queued { id, queue, hook }, payload?))
}

impl NfQueue {
    /// Binds queues `queues` (each at most `max_len` packets waiting in the kernel): whole packets copied, fail
    /// closed, no GSO. Needs `CAP_NET_ADMIN`; a queue another process holds is refused (`EBUSY`).
    pub fn open(queues: &[u16], max_len: u32) -> io::Result<NfQueue> {
        let fd = sys::socket(libc::AF_NETLINK, libc::SOCK_RAW, NETLINK_NETFILTER)?;
        // SAFETY: all-zero is a valid sockaddr_nl (the kernel picks the port id).
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: the pointer and length describe `sa`, alive for the call.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        sys::set_buffer_sizes(fd.as_fd(), 8 << 20)?;
        let q = NfQueue {
            fd,
            rx: Mutex::new(Mmsg::new()),
            tx: Mutex::new(Tx {
                heads: vec![[0; HEAD_LEN]; sys::MAX_BATCH],
                iovs: Vec::with_capacity(3 * sys::MAX_BATCH),
                scratch: Vec::with_capacity(HEAD_LEN),
            }),
        };
        for &n in queues {
            let mut body = Vec::new();
            put_attr(&mut body, NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0]);
            q.config(n, &body)?;
            let mut body = Vec::new();
            let mut params = 0xffffu32.to_be_bytes().to_vec();
            params.push(NFQNL_COPY_PACKET);
            put_attr(&mut body, NFQA_CFG_PARAMS, &params);
            put_attr(&mut body, NFQA_CFG_QUEUE_MAXLEN, &max_len.to_be_bytes());
            let mask = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO;
            put_attr(&mut body, NFQA_CFG_MASK, &mask.to_be_bytes());
            put_attr(&mut body, NFQA_CFG_FLAGS, &0u32.to_be_bytes());
            q.config(n, &body)?;
        }
        Ok(q)
    }

    /// Sends one configuration message for queue `queue` and waits for its acknowledgement.
    fn config(&self, queue: u16, body: &[u8]) -> io::Result<()> {
        let mut m = Vec::with_capacity(64);
        let flags = (libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16;
        put_nlmsg_header(
            &mut m,
            NLMSG_HDR + NFGEN_HDR + body.len(),
            NFQNL_MSG_CONFIG,
            flags,
            queue,
        );
        m.extend_from_slice(body);
        // SAFETY: the pointer and length describe `m`.
        let r = unsafe { libc::send(self.fd.as_raw_fd(), m.as_ptr().cast(), m.len(), 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = [0u8; 512];
        loop {
            // SAFETY: the pointer and length describe `buf`.
            let r =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let got = &buf[..r as usize];
            if got.len() >= NLMSG_HDR + 4
                && u16::from_ne_bytes([got[4], got[5]]) == libc::NLMSG_ERROR as u16
            {
                let errno =
                    i32::from_ne_bytes(got[NLMSG_HDR..NLMSG_HDR + 4].try_into().unwrap_or([0; 4]));
                return if errno == 0 {
                    Ok(())
                } else {
                    Err(io::Error::from_raw_os_error(-errno))
                };
            }
        }
    }

    /// Waits until a packet is there (`true`) or `timeout` passed (`false`; also when a signal interrupted the
    /// wait), to the microsecond (`ppoll`): for a caller whose next deadline is sooner than the receive timeout's
    /// resolution (the kernel's tick).
    pub fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        sys::ppoll_readable(self.fd.as_fd(), timeout)
    }

    /// A receive call returns `WouldBlock` after `timeout` without a packet (so that a worker can stop).
    pub fn set_recv_timeout(&self, timeout: Duration) -> io::Result<()> {
        sys::set_recv_timeout(self.fd.as_fd(), timeout)
    }

    /// Receives up to `min(bufs.len(), meta.len(), MAX_BATCH)` queued packets with one `recvmmsg` (blocks until one
    /// is there or the receive timeout passes: `WouldBlock`). Each buffer's data is then the IP packet, with at
    /// least [`HEADROOM`] bytes before it; `meta[i]` says whose it is. Other netlink messages (a refused verdict's
    /// error, a truncated message) are skipped. Returns how many of `bufs` hold packets (the first ones). Buffers
    /// should hold [`HEADROOM`] + [`MESSAGE_MAX`] bytes.
    pub fn recv_batch(&self, bufs: &mut [PacketBuf], meta: &mut [Queued]) -> io::Result<usize> {
        let n = bufs.len().min(meta.len());
        let mut rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        let got = rx.recv(self.fd.as_fd(), &mut bufs[..n], HEADROOM, false)?;
        let mut kept = 0;
        for i in 0..got {
            let parsed = if rx.truncated(i) {
                None
            } else {
                parse_packet(bufs[i].data())
            };
            let Some((q, range)) = parsed else {
                bufs[i].reset(HEADROOM);
                continue;
            };
            let b = &mut bufs[i];
            b.truncate(range.end);
            let _ = b.pull_front(range.start);
            meta[kept] = q;
            if kept != i {
                bufs.swap(kept, i);
            }
            kept += 1;
        }
        Ok(kept)
    }

    /// Gives the verdicts of `count` packets, `item(i)` = (the packet's metadata, its verdict, its new bytes for
    /// [`Verdict::AcceptChanged`]), in one `sendmsg` per [`crate::MAX_BATCH`].
    pub fn verdicts<'a>(
        &self,
        count: usize,
        mut item: impl FnMut(usize) -> (Queued, Verdict, &'a [u8]),
    ) -> io::Result<()> {
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let tx = &mut *tx;
        static PAD: [u8; 4] = [0; 4];
        let mut next = 0;
        while next < count {
            let batch = (count - next).min(sys::MAX_BATCH);
            tx.iovs.clear();
            for k in 0..batch {
                let (q, v, data) = item(next + k);
                let changed = v == Verdict::AcceptChanged;
                let payload = if changed { data } else { &[][..] };
                let verdict: u32 = match v {
                    Verdict::Drop => 0,
                    Verdict::Accept | Verdict::AcceptChanged => 1,
                };
                let pad = (4 - payload.len() % 4) % 4;
                let head_len = if changed { HEAD_LEN } else { HEAD_LEN - 4 };
                let total = head_len + payload.len() + pad;
                // The header bytes, written into the batch's slot for this message.
                let (slot, h) = (&mut tx.heads[k], &mut tx.scratch);
                {
                    h.clear();
                    put_nlmsg_header(
                        h,
                        total,
                        NFQNL_MSG_VERDICT,
                        libc::NLM_F_REQUEST as u16,
                        q.queue,
                    );
                    let mut vh = [0u8; 8];
                    vh[..4].copy_from_slice(&verdict.to_be_bytes());
                    vh[4..].copy_from_slice(&q.id.to_be_bytes());
                    put_attr(h, NFQA_VERDICT_HDR, &vh);
                    if changed {
                        h.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
                        h.extend_from_slice(&NFQA_PAYLOAD.to_ne_bytes());
                    }
                    slot[..h.len()].copy_from_slice(h);
                }
                tx.iovs.push(libc::iovec {
                    iov_base: slot.as_mut_ptr().cast(),
                    iov_len: head_len,
                });
                if changed {
                    tx.iovs.push(libc::iovec {
                        iov_base: payload.as_ptr() as *mut libc::c_void,
                        iov_len: payload.len(),
                    });
                    if pad > 0 {
                        tx.iovs.push(libc::iovec {
                            iov_base: PAD.as_ptr() as *mut libc::c_void,
                            iov_len: pad,
                        });
                    }
                }
            }
            // SAFETY: all-zero is a valid msghdr (no name, no control data).
            let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
            mh.msg_iov = tx.iovs.as_mut_ptr();
            mh.msg_iovlen = tx.iovs.len() as _;
            loop {
                // SAFETY: the iovecs point to the header slots (owned by `tx`, locked), to payloads borrowed for
                // `'a` (alive for this call) and to the static padding, with their lengths.
                let r = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &mh, 0) };
                if r >= 0 {
                    break;
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            next += batch;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queued-packet message as the kernel builds it, with `extra` attributes before the payload.
    fn message(queue: u16, id: u32, payload: &[u8], extra: &[(u16, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        let mut hdr = id.to_be_bytes().to_vec();
        hdr.extend_from_slice(&0x0800u16.to_be_bytes());
        hdr.push(3);
        put_attr(&mut body, NFQA_PACKET_HDR, &hdr);
        for (t, d) in extra {
            put_attr(&mut body, *t, d);
        }
        put_attr(&mut body, NFQA_PAYLOAD, payload);
        let mut m = Vec::new();
        put_nlmsg_header(
            &mut m,
            NLMSG_HDR + NFGEN_HDR + body.len(),
            NFQNL_MSG_PACKET,
            0,
            queue,
        );
        m.extend_from_slice(&body);
        m
    }

    #[test]
    fn parses_a_queued_packet() {
        let m = message(
            7,
            0xdead_beef,
            b"hello",
            &[(5, &[0, 0, 0, 2]), (3, &[1, 2, 3, 4])],
        );
        let (q, r) = parse_packet(&m).unwrap();
        assert_eq!(
            q,
            Queued {
                id: 0xdead_beef,
                queue: 7,
                hook: 3
            }
        );
        assert_eq!(&m[r.clone()], b"hello");
        assert!(r.start >= 36, "room before the payload: {}", r.start);
    }

    #[test]
    fn refuses_what_is_not_a_queued_packet() {
        let m = message(1, 1, b"x", &[]);
        for cut in 0..m.len() - 4 {
            // A message cut short (its length field then lies) is never taken.
            assert!(parse_packet(&m[..cut]).is_none(), "cut {cut}");
        }
        let mut other = m.clone();
        other[4] = NFQNL_MSG_VERDICT as u8;
        assert!(parse_packet(&other).is_none());
        // Without a packet header or without a payload.
        let mut body = Vec::new();
        put_attr(&mut body, NFQA_PAYLOAD, b"abc");
        let mut m2 = Vec::new();
        put_nlmsg_header(
            &mut m2,
            NLMSG_HDR + NFGEN_HDR + body.len(),
            NFQNL_MSG_PACKET,
            0,
            1,
        );
        m2.extend_from_slice(&body);
        assert!(parse_packet(&m2).is_none());
    }

    #[test]
    fn attributes_never_read_past_the_end() {
        // Arbitrary bytes: every attribute lies within them.
        let mut x: u64 = 0x1234_5678;
        for _ in 0..2000 {
            let n = (x % 64) as usize;
            let mut b = Vec::with_capacity(n);
            for _ in 0..n {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                b.push((x >> 33) as u8);
            }
            for (_, d) in attrs(&b) {
                let s = d.as_ptr() as usize - b.as_ptr() as usize;
                assert!(s + d.len() <= b.len());
            }
            let _ = parse_packet(&b);
        }
    }
}
