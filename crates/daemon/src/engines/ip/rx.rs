//! The IP engine's receive thread: raw ESP/AH and UDP (NAT-T, PSP; GRO) batches in, decapsulation and the
//! inbound policy check in place, TUN writes.

use super::policy::{came_through, FragCache};
use super::shared::{Shared, BATCH, HEADROOM, TAILROOM};
use super::tx::{new_bufs, TxCtx, TxPath, REPLY_AFTER_AT_MOST};
use crate::engines::ip::db::Snapshot;
use crate::engines::ip::drop::Drop;
use netveil_io::tun::Span;
use netveil_io::{PacketBuf, RawSocket, Tun, UdpGroMeta, UdpSocket};
use netveil_ipsec::bundle::{self, UdpUnprotected};
use netveil_ipsec::Drop as IpsecDrop;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// A receiving socket. Built once per protocol and family, so the size difference of the variants is irrelevant.
#[allow(clippy::large_enum_variant)]
pub(super) enum RxSock {
    Raw(Arc<RawSocket>),
    Udp(Arc<UdpSocket>, UdpKind),
}

/// What a UDP socket receives.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum UdpKind {
    /// ESP-in-UDP (RFC 3948) on the NAT-T port.
    NatT,
    /// PSP on port 1000.
    Psp,
}

impl RxSock {
    fn fd(&self) -> i32 {
        match self {
            RxSock::Raw(s) => s.as_raw_fd(),
            RxSock::Udp(s, _) => s.as_raw_fd(),
        }
    }
}

pub(super) fn rx_loop(sh: &Shared, tun: &Tun, socks: &[RxSock], path: &TxPath) {
    // Received packets (raw sockets), or received GRO messages (UDP) that are split into `out`.
    let mut bufs = new_bufs(BATCH, HEADROOM + 65535 + TAILROOM);
    let mut out = new_bufs(2 * BATCH, HEADROOM + 65535 + TAILROOM);
    let mut meta = vec![UdpGroMeta::default(); BATCH];
    let mut frags = FragCache::default();
    // Where the datagrams of coalesced receives, opened where they lie, are.
    let mut spans: Vec<Span> = Vec::with_capacity(BATCH * netveil_io::udp::GSO_MAX_SEGMENTS);
    let mut pfds: Vec<libc::pollfd> = socks
        .iter()
        .map(|s| libc::pollfd {
            fd: s.fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // Then: the transmit thread's wake-up call (see `TxPath::rx_wake`), and the TUN, watched while the transmit
    // thread sleeps (see `TxPath`).
    let (wake_at, tun_at) = (socks.len(), socks.len() + 1);
    for fd in [path.rx_wake.fd(), -1] {
        pfds.push(libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
    }
    // For what this thread reads from the TUN (see `TxCtx::serve_tun`).
    let mut tx = TxCtx::new(tun.mtu() as usize, sh.config.interface.socket_mark());
    // The last receive delivered more than a few packets: traffic flows in, and the transmit thread is to seal
    // what the TUN gives, in parallel.
    let mut flowing = false;
    while !sh.stop.load(Relaxed) {
        let watch = path.rx_watch_tun();
        pfds[tun_at].fd = if watch { tun.as_raw_fd() } else { -1 };
        // Sleep until a packet or a wake-up call comes (or the stop flag is due to be checked).
        if !matches!(netveil_io::os::poll(&mut pfds, 200), Ok(n) if n > 0) {
            continue;
        }
        if pfds[wake_at].revents & libc::POLLIN != 0 {
            path.rx_wake.drain();
        }
        if watch && pfds[tun_at].revents & libc::POLLIN != 0 {
            if flowing {
                path.wake_tx();
            } else {
                tx.serve_tun(sh, tun, path);
            }
        }
        for (k, s) in socks.iter().enumerate() {
            if pfds[k].revents & libc::POLLIN == 0 {
                continue;
            }
            match s {
                RxSock::Raw(r) => {
                    let Ok(n) = r.recv_batch(&mut bufs, HEADROOM) else {
                        continue;
                    };
                    let now = sh.now();
                    let snap = sh.db.load();
                    let mut good = 0;
                    for i in 0..n {
                        if sh.deliver_in(&snap, &mut bufs[i], now, UdpKind::NatT, &mut frags) {
                            bufs.swap(good, i);
                            good += 1;
                        }
                    }
                    if good > 0 {
                        let _ = tun.send_batch(&mut bufs[..good]);
                        flowing = answer(&mut tx, sh, tun, path, good);
                    }
                }
                RxSock::Udp(u, kind) => {
                    let Ok(n) = u.recv_gro(&mut bufs, &mut meta, HEADROOM) else {
                        continue;
                    };
                    let mut d = Delivery {
                        tun,
                        out: &mut out,
                        good: 0,
                        spans: &mut spans,
                        wrote: 0,
                    };
                    let rx = UdpRx {
                        sh,
                        snap: &sh.db.load(),
                        now: sh.now(),
                        kind: *kind,
                        port: match kind {
                            UdpKind::NatT => sh.config.interface.nat_t_port,
                            UdpKind::Psp => netveil_psp::UDP_PORT,
                        },
                    };
                    for (m, meta) in meta[..n].iter().enumerate() {
                        rx.deliver(&mut bufs, m, meta, &mut d, &mut frags);
                    }
                    d.finish(&mut bufs);
                    if d.wrote > 0 {
                        flowing = answer(&mut tx, sh, tun, path, d.wrote);
                    }
                }
            }
        }
    }
}

/// After the receive thread wrote `delivered` packets to the TUN while it watches the TUN (the transmit thread
/// sleeps): at low rates the answer the kernel made on the spot (an echo reply, a TCP acknowledgement) is read and
/// sent at once; when more came in, the transmit thread is woken to seal the answers in parallel. Returns whether
/// more came in.
fn answer(tx: &mut TxCtx, sh: &Shared, tun: &Tun, path: &TxPath, delivered: usize) -> bool {
    let flowing = delivered > REPLY_AFTER_AT_MOST;
    if path.tx_asleep.load(Relaxed) {
        if flowing {
            path.wake_tx();
        } else {
            tx.serve_tun(sh, tun, path);
        }
    }
    flowing
}

impl Shared {
    /// Inbound processing with accounting: true if the packet is to be written to the TUN.
    fn deliver_in(
        &self,
        snap: &Snapshot,
        pkt: &mut PacketBuf,
        now: u64,
        kind: UdpKind,
        frags: &mut FragCache,
    ) -> bool {
        let len = pkt.len();
        let r = match kind {
            UdpKind::Psp => self.psp_in(snap, pkt, now, frags),
            UdpKind::NatT => self.process_in(snap, pkt, now, frags),
        };
        self.count_in(r, len)
    }

    /// Counts a received packet of `len` bytes as delivered or dropped: true if it is to be written to the TUN.
    fn count_in(&self, r: std::result::Result<(), Drop>, len: usize) -> bool {
        match r {
            Ok(()) => {
                self.rx_packets.fetch_add(1, Relaxed);
                self.rx_bytes.fetch_add(len as u64, Relaxed);
                true
            }
            Err(d) => {
                self.rx_drops.count(d);
                false
            }
        }
    }
}

/// Pushes an IP and a UDP header (checksum 0) in front of a UDP payload received on the NAT-T socket.
fn synth_udp_headers(b: &mut PacketBuf, src: SocketAddr, dst: IpAddr, port: u16) -> Option<()> {
    let len = b.len();
    let hdr = b.push_front(netveil_wire::ip::ip_udp_header_len(src.ip()))?;
    netveil_wire::ip::emit_ip_udp(hdr, src, SocketAddr::new(dst, port), len).ok()
}

/// The packets a receive batch delivers to the TUN, in the order they came: copied (or swapped) into `out`, or
/// opened where they lie in the receive buffers (`spans`). At most one of the two holds packets at a time, so
/// that writing them keeps the order.
struct Delivery<'a> {
    tun: &'a Tun,
    out: &'a mut [PacketBuf],
    /// Packets in `out` to write.
    good: usize,
    spans: &'a mut Vec<Span>,
    /// Packets written.
    wrote: usize,
}

impl Delivery<'_> {
    /// The next `out` buffer to fill (then [`Delivery::keep`] it); call [`Delivery::write_spans`] first.
    fn next_out(&mut self) -> &mut PacketBuf {
        debug_assert!(self.spans.is_empty());
        if self.good == self.out.len() {
            self.write_out();
        }
        &mut self.out[self.good]
    }

    /// Keeps the buffer [`Delivery::next_out`] gave, to be written.
    fn keep(&mut self) {
        self.good += 1;
    }

    /// Adds a packet opened where it lies.
    fn push_span(&mut self, s: Span) {
        self.write_out();
        self.spans.push(s);
    }

    fn write_out(&mut self) {
        if self.good > 0 {
            let _ = self.tun.send_batch(&mut self.out[..self.good]);
            self.wrote += self.good;
            self.good = 0;
        }
    }

    /// Writes the packets opened in `bufs`.
    fn write_spans(&mut self, bufs: &mut [PacketBuf]) {
        if !self.spans.is_empty() {
            let _ = self.tun.send_spans(bufs, self.spans);
            self.wrote += self.spans.len();
            self.spans.clear();
        }
    }

    fn finish(&mut self, bufs: &mut [PacketBuf]) {
        self.write_spans(bufs);
        self.write_out();
    }
}

/// Inbound processing of the messages of one receive on a UDP socket (NAT-T or PSP).
struct UdpRx<'a> {
    sh: &'a Shared,
    snap: &'a Snapshot,
    now: u64,
    kind: UdpKind,
    /// The socket's port, for the UDP header a datagram is given back.
    port: u16,
}

impl UdpRx<'_> {
    /// Delivers message `m` of `bufs`: one datagram, or datagrams of `meta.segment_size` bytes (GRO; the last may
    /// be shorter). Datagrams of tunnel mode (ESP in UDP of a tunnel SA, PSP with an IP packet inside) are opened
    /// where they lie ([`Delivery::push_span`]), from the addresses the receive gave, without headers; one of
    /// transport mode gets back its IP and UDP headers (the inner packet is rebuilt around that IP header), in
    /// its own buffer (swapped out) or a copy.
    fn deliver(
        &self,
        bufs: &mut [PacketBuf],
        m: usize,
        meta: &UdpGroMeta,
        d: &mut Delivery,
        frags: &mut FragCache,
    ) {
        let sh = self.sh;
        let (src, dst) = (meta.src, meta.dst);
        let total = bufs[m].len();
        // One datagram, or several of `segment_size` bytes (GRO).
        let single = meta.segment_size == 0 || meta.segment_size >= total;
        let seg_size = if single { total } else { meta.segment_size };
        // The bytes a datagram's IP and UDP headers had, which the counters include.
        let hdrs = netveil_wire::ip::ip_udp_header_len(src.ip());
        let start = bufs[m].headroom();
        let mut at = start;
        while at < start + total {
            let len = seg_size.min(start + total - at);
            let seg = at..at + len;
            at += len;
            let b = &mut bufs[m];
            b.reset(seg.start);
            b.set_len(len);
            let opened = match self.kind {
                UdpKind::NatT => {
                    match bundle::unprotect_udp_payload(&self.snap.sad, b, dst, self.now) {
                        Ok(UdpUnprotected::Packet(used)) => Some(sh.check_in(
                            self.snap,
                            b.data(),
                            self.now,
                            frags,
                            came_through(used),
                        )),
                        Ok(UdpUnprotected::NotEsp) => Some(Err(IpsecDrop::Unsupported.into())),
                        Err(e) => Some(Err(e.into())),
                        Ok(UdpUnprotected::NeedsHeaders) => None,
                    }
                }
                UdpKind::Psp => sh.psp_in_payload(self.snap, b, src.ip(), self.now, frags),
            };
            if let Some(r) = opened {
                if sh.count_in(r, len + hdrs) {
                    d.push_span(Span {
                        buf: m,
                        start: b.headroom(),
                        end: b.headroom() + b.len(),
                    });
                }
                continue;
            }
            // Untouched, and needs its headers (transport mode): given them in its own buffer (swapped out) or a
            // copy.
            d.write_spans(bufs);
            let b = d.next_out();
            if single {
                std::mem::swap(&mut bufs[m], b);
                if synth_udp_headers(b, src, dst, self.port).is_none() {
                    sh.rx_drops.count(IpsecDrop::Malformed.into());
                } else if sh.deliver_in(self.snap, b, self.now, self.kind, frags) {
                    d.keep();
                }
                return;
            }
            b.reset(HEADROOM);
            let Some(room) = b.push_back(len) else {
                continue;
            };
            room.copy_from_slice(&bufs[m].storage()[seg]);
            if synth_udp_headers(b, src, dst, self.port).is_none() {
                sh.rx_drops.count(IpsecDrop::Malformed.into());
            } else if sh.deliver_in(self.snap, b, self.now, self.kind, frags) {
                d.keep();
            }
        }
    }
}
