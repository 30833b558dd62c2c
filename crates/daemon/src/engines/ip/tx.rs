//! The IP engine's transmit thread: TUN batch in, policy and encapsulation in place, raw and UDP (GSO) sends.

use super::pmtu::PathMtu;
use super::policy::FragCache;
use super::shared::{Datagram, Shared, TxRecord, HEADROOM, TAILROOM};
use crate::engines::ip::drop::Drop;
use netveil_io::os::EventFd;
use netveil_io::{PacketBuf, RawSocket, Tun, UdpSocket};
use netveil_ipsec::Drop as IpsecDrop;
use std::io::IoSlice;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{
    AtomicBool,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

pub(super) fn new_bufs(n: usize, cap: usize) -> Vec<PacketBuf> {
    (0..n).map(|_| PacketBuf::new(cap, HEADROOM)).collect()
}

/// Moves the packets whose records are of class `k` among `bufs[from..to]` to the front of that range; returns
/// where they end.
fn partition(
    bufs: &mut [PacketBuf],
    recs: &mut [TxRecord],
    from: usize,
    to: usize,
    k: u8,
) -> usize {
    let mut n = from;
    for i in from..to {
        if recs[i].class() == k {
            if n != i {
                bufs.swap(n, i);
                recs.swap(n, i);
            }
            n += 1;
        }
    }
    n
}

/// The outbound UDP sockets (NAT-T), by family.
/// The UDP sockets packets leave on, per family; with several, the packet's UDP source port (a flow hash) picks
/// one.
#[derive(Default)]
pub struct UdpOut {
    pub v4: Vec<Arc<UdpSocket>>,
    pub v6: Vec<Arc<UdpSocket>>,
}

/// PSP transmit sockets (source ports) per family.
pub const PSP_TX_SOCKETS: usize = 8;

/// Where the packets read from the TUN leave (the raw and UDP sockets), and who reads the TUN.
///
/// Under load the transmit thread reads the TUN and the receive thread the sockets, in parallel. At low rates
/// one thread does both, so that a round trip costs fewer hand-offs between threads (each a sleep and a
/// wake-up): the transmit thread, idle for [`HANDOFF_IDLE`], hands the TUN to the receive thread
/// ([`TxPath::tx_asleep`]) and sleeps on [`TxPath::tx_wake`]; the receive thread then watches the TUN beside its
/// sockets and seals and sends what it reads there, in particular the kernel's answer to a packet it just
/// delivered, which is there at once. A read of more than [`REPLY_AFTER_AT_MOST`] packets (a sender's burst), or
/// a receive that delivered more (a flow coming in, whose acknowledgements the transmit thread then seals in
/// parallel), wakes the transmit thread, which takes the TUN back.
pub(super) struct TxPath {
    pub send4: RawSocket,
    pub send6: Option<RawSocket>,
    pub udp: UdpOut,
    pub psp: UdpOut,
    /// Held by the thread that reads the TUN, from the read until its packets are sent: packets leave in the
    /// order they were read, whichever thread read them.
    turn: Mutex<()>,
    /// The transmit thread sleeps and leaves the TUN to the receive thread.
    pub tx_asleep: AtomicBool,
    /// Wakes the transmit thread (a burst on the TUN).
    pub tx_wake: EventFd,
    /// The receive thread watches the TUN (it saw `tx_asleep` before its `poll`).
    pub rx_watches_tun: AtomicBool,
    /// Wakes the receive thread, to watch the TUN (the transmit thread went to sleep while the receive thread
    /// slept without watching it).
    pub rx_wake: EventFd,
}

impl TxPath {
    pub fn new(
        send4: RawSocket,
        send6: Option<RawSocket>,
        udp: UdpOut,
        psp: UdpOut,
    ) -> std::io::Result<TxPath> {
        Ok(TxPath {
            send4,
            send6,
            udp,
            psp,
            turn: Mutex::new(()),
            tx_asleep: AtomicBool::new(false),
            tx_wake: EventFd::new()?,
            rx_watches_tun: AtomicBool::new(false),
            rx_wake: EventFd::new()?,
        })
    }

    /// The transmit thread's: leaves the TUN to the receive thread (waking it if it sleeps without watching the
    /// TUN) and sleeps until it is woken or `timeout` passes.
    fn tx_sleep(&self, timeout_ms: i32) {
        // Both sides store, then load the other's flag (sequentially consistent): either the receive thread sees
        // `tx_asleep` before its poll, or this thread sees that it does not watch and wakes it.
        self.tx_asleep.store(true, SeqCst);
        if !self.rx_watches_tun.load(SeqCst) {
            self.rx_wake.signal();
        }
        let mut pfd = [libc::pollfd {
            fd: self.tx_wake.fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let _ = netveil_io::os::poll(&mut pfd, timeout_ms);
        self.tx_wake.drain();
        self.tx_asleep.store(false, SeqCst);
    }

    /// Wakes the transmit thread if it sleeps, to take the TUN back.
    pub fn wake_tx(&self) {
        if self.tx_asleep.swap(false, SeqCst) {
            self.tx_wake.signal();
        }
    }

    /// The receive thread's, before its poll: whether to watch the TUN.
    pub fn rx_watch_tun(&self) -> bool {
        let w = self.tx_asleep.load(SeqCst);
        self.rx_watches_tun.store(w, SeqCst);
        // Seen again after the store: a transmit thread that went to sleep in between either is seen now or saw
        // the store's old value and woke this thread.
        w || self.tx_asleep.load(SeqCst)
    }
}

/// One thread's state for reading the TUN and sending what it read: the buffers with their records beside them,
/// the GSO sender and the fragment memory. Allocated once per thread.
pub(super) struct TxCtx {
    scratch: Vec<u8>,
    bufs: Vec<PacketBuf>,
    /// One record per buffer: how its packet leaves (filled by `process_out`).
    recs: Vec<TxRecord>,
    gso: GsoSender,
    frags: FragCache,
    pmtu: PathMtu,
}

/// How long the transmit thread waits on the TUN (sleeping in `poll`) after it last found packets before it
/// leaves the TUN to the receive thread: longer than the gaps of a flow under load, shorter than those of a ping.
/// No thread spins: on a machine whose cores are all busy a spinning thread only takes time from the threads that
/// have work (and the scheduler then makes it wait when it has some).
pub(super) const HANDOFF_IDLE: Duration = Duration::from_millis(1);
/// The most packets a TUN read by the receive thread may give for it to keep the TUN (see [`TxPath`]): an echo
/// request or reply, a TCP acknowledgement.
pub(super) const REPLY_AFTER_AT_MOST: usize = 2;

impl TxCtx {
    /// A thread's state for a TUN of `mtu` whose sockets carry `mark`.
    pub fn new(mtu: usize, mark: u32) -> TxCtx {
        let n_bufs = netveil_io::tun::MAX_SEGMENTS;
        TxCtx {
            scratch: vec![0u8; netveil_io::tun::RECV_SCRATCH_LEN],
            // Room for TFC padding up to the largest an SA may ask for (SAs come and go while this runs).
            bufs: new_bufs(
                n_bufs,
                HEADROOM + mtu.max(crate::engines::ip::config::TFC_PAD_MAX.into()) + TAILROOM,
            ),
            recs: vec![TxRecord::Raw4; n_bufs],
            gso: GsoSender::new(),
            frags: FragCache::default(),
            pmtu: PathMtu::new(Some(mark)),
        }
    }

    /// One TUN read, without waiting, processed and sent, in the TUN's turn (see [`TxPath::turn`]): the packets
    /// read, or `WouldBlock` when none was there. `wait_turn` false: `WouldBlock` also when the other thread
    /// holds the turn.
    fn run(
        &mut self,
        sh: &Shared,
        tun: &Tun,
        path: &TxPath,
        wait_turn: bool,
    ) -> std::io::Result<usize> {
        let _turn = if wait_turn {
            path.turn.lock().unwrap_or_else(|e| e.into_inner())
        } else {
            match path.turn.try_lock() {
                Ok(g) => g,
                Err(TryLockError::Poisoned(e)) => e.into_inner(),
                Err(TryLockError::WouldBlock) => return Err(std::io::ErrorKind::WouldBlock.into()),
            }
        };
        let n = tun.try_recv_batch(&mut self.scratch, &mut self.bufs, HEADROOM)?;
        self.process_and_send(sh, n, path);
        // The senders of packets too big for their path learn the size that fits.
        self.pmtu.flush(|m| {
            let _ = tun.send(m);
        });
        Ok(n)
    }

    /// The receive thread's turn on the TUN, which it watches while the transmit thread sleeps (see [`TxPath`]):
    /// reads and sends what is there, without waiting. Returns whether it sent anything. A burst wakes the
    /// transmit thread, which takes the TUN back.
    pub fn serve_tun(&mut self, sh: &Shared, tun: &Tun, path: &TxPath) -> bool {
        match self.run(sh, tun, path, false) {
            Ok(n) => {
                if n > REPLY_AFTER_AT_MOST {
                    path.wake_tx();
                }
                n > 0
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::Interrupted =>
            {
                false
            }
            Err(_) => {
                sh.tx_drops.count(IpsecDrop::Malformed.into());
                false
            }
        }
    }

    fn process_and_send(&mut self, sh: &Shared, n: usize, path: &TxPath) {
        let (bufs, recs) = (&mut self.bufs, &mut self.recs);
        let now = sh.now();
        let snap = sh.db.load();
        // Process in place; keep the good packets at the front.
        let mut good = 0;
        for i in 0..n {
            match sh.process_out_on_path(&snap, &mut bufs[i], now, &mut self.frags, &mut self.pmtu)
            {
                Ok(rec) => {
                    sh.tx_packets.fetch_add(1, Relaxed);
                    sh.tx_bytes.fetch_add(bufs[i].len() as u64, Relaxed);
                    recs[i] = rec;
                    if good != i {
                        bufs.swap(good, i);
                        recs.swap(good, i);
                    }
                    good += 1;
                }
                Err(d) => sh.tx_drops.count(d),
            }
        }
        drop(snap);
        let n4 = partition(bufs, recs, 0, good, 0);
        let n6 = partition(bufs, recs, n4, good, 1);
        // What the kernel refuses (too big for the route, no route) is counted, not lost silently; and every
        // route's MTU is asked again (it may have fallen).
        let mut any_refused = false;
        let mut refused = |want: usize, sent: std::io::Result<usize>| {
            let n = want.saturating_sub(sent.unwrap_or(0)) as u64;
            sh.tx_drops.count_n(Drop::SendRefused, n);
            any_refused |= n > 0;
        };
        if n4 > 0 {
            refused(n4, path.send4.send_batch(&bufs[..n4]));
        }
        if n6 > n4 {
            match &path.send6 {
                Some(s6) => refused(n6 - n4, s6.send_batch(&bufs[n4..n6])),
                None => refused(n6 - n4, Ok(0)),
            }
        }
        let nu = partition(bufs, recs, n6, good, 2);
        if nu > n6 {
            let n = self.gso.send(&bufs[n6..nu], &recs[n6..nu], &path.udp);
            refused(n as usize, Ok(0));
        }
        if good > nu {
            let n = self.gso.send(&bufs[nu..good], &recs[nu..good], &path.psp);
            refused(n as usize, Ok(0));
        }
        if any_refused {
            self.pmtu.forget();
        }
    }
}

pub(super) fn tx_loop(sh: &Shared, tun: &Tun, path: &TxPath) {
    let mut ctx = TxCtx::new(tun.mtu() as usize, sh.config.interface.socket_mark());
    // When this thread last found packets (it waits on the TUN for a while before it hands the TUN over).
    let mut busy = Instant::now();
    while !sh.stop.load(Relaxed) {
        match ctx.run(sh, tun, path, true) {
            Ok(_) => busy = Instant::now(),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // Nothing there: wait on the TUN for a while after traffic, else leave the TUN to the receive
                // thread and sleep until it wakes this thread for a burst (or the stop flag is due to be checked).
                // (`poll` counts whole milliseconds: the wait is one, not the rest of one, which would spin.)
                if busy.elapsed() < HANDOFF_IDLE {
                    let _ = tun.wait_readable(HANDOFF_IDLE);
                } else {
                    path.tx_sleep(200);
                    busy = Instant::now();
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => sh.tx_drops.count(IpsecDrop::Malformed.into()),
        }
    }
}

/// Sends ESP-in-UDP and PSP packets with UDP GSO: consecutive packets to the same peer with the same size (the
/// last of a run may be shorter) go out as one send that the kernel gathers from the packets' buffers, where
/// they lie, and splits into datagrams.
struct GsoSender {
    /// The runs of the batch being sent.
    runs: Vec<GsoRun>,
}

/// Consecutive packets of a batch that go out as one GSO send.
#[derive(Clone, Copy)]
struct GsoRun {
    /// The first packet's index among the batch's UDP payloads, and how many follow it (itself included).
    start: usize,
    len: usize,
    /// The first payload's length; `last` the latest one's.
    seg: usize,
    last: usize,
    to: SocketAddr,
    src: IpAddr,
    sock: usize,
}

/// The most packets one [`GsoSender::send`] call gathers at once (a TUN read's segments).
const GSO_GATHER: usize = netveil_io::tun::MAX_SEGMENTS;

impl GsoSender {
    fn new() -> Self {
        GsoSender {
            runs: Vec::with_capacity(GSO_GATHER),
        }
    }

    /// Sends `pkts`: datagram payloads, to where their records say. Returns how many were not sent (no socket,
    /// too long, refused by the kernel).
    fn send(&mut self, pkts: &[PacketBuf], recs: &[TxRecord], udp: &UdpOut) -> u64 {
        let mut refused = 0;
        for (chunk, recs) in pkts.chunks(GSO_GATHER).zip(recs.chunks(GSO_GATHER)) {
            refused += self.send_chunk(chunk, recs, udp);
        }
        refused
    }

    fn send_chunk(&mut self, pkts: &[PacketBuf], recs: &[TxRecord], udp: &UdpOut) -> u64 {
        let mut payloads = [IoSlice::new(&[]); GSO_GATHER];
        let mut k = 0;
        self.runs.clear();
        for (p, r) in pkts.iter().zip(recs) {
            let Some(&Datagram { src, sport, to }) = r.datagram() else {
                continue;
            };
            let payload = p.data();
            if payload.len() > netveil_io::udp::GSO_MAX_PAYLOAD {
                continue;
            }
            let dst = to.ip();
            let len = payload.len();
            let n_socks = if dst.is_ipv6() {
                udp.v6.len()
            } else {
                udp.v4.len()
            };
            if n_socks == 0 {
                continue;
            }
            // The source port is the flow's hash (PSP's pool); one socket needs no division.
            let sock = if n_socks == 1 {
                0
            } else {
                sport as usize % n_socks
            };
            payloads[k] = IoSlice::new(payload);
            // Append to the current run if it continues it: same peer and socket, every datagram so far of the
            // first one's size, and this one no longer (a shorter one closes the run).
            match self.runs.last_mut() {
                Some(r)
                    if r.to == to
                        && r.src == src
                        && r.sock == sock
                        && r.last == r.seg
                        && len <= r.seg =>
                {
                    r.len += 1;
                    r.last = len;
                }
                _ => self.runs.push(GsoRun {
                    start: k,
                    len: 1,
                    seg: len,
                    last: len,
                    to,
                    src,
                    sock,
                }),
            }
            k += 1;
        }
        // (What was skipped above: no datagram record, too long, no socket.)
        let mut refused = (pkts.len() - k) as u64;
        // One gathered send per socket that has runs (usually one), in the runs' order.
        let mut done = 0;
        while done < self.runs.len() {
            let first = self.runs[done];
            let fam6 = first.to.is_ipv6();
            let mut items = [(
                &[][..],
                SocketAddr::from(([0, 0, 0, 0], 0)),
                IpAddr::from([0u8, 0, 0, 0]),
            ); GSO_GATHER];
            let mut n = 0;
            for r in self.runs[done..].iter_mut() {
                if r.len > 0 && r.to.is_ipv6() == fam6 && r.sock == first.sock {
                    items[n] = (&payloads[r.start..r.start + r.len], r.to, r.src);
                    n += 1;
                    // Sent: the next round skips it.
                    r.len = 0;
                }
            }
            let socks = if fam6 { &udp.v6 } else { &udp.v4 };
            let want: usize = items[..n].iter().map(|i| i.0.len()).sum();
            let sent = socks[first.sock]
                .send_gathered_from(&items[..n])
                .unwrap_or(0);
            refused += want.saturating_sub(sent) as u64;
            while done < self.runs.len() && self.runs[done].len == 0 {
                done += 1;
            }
        }
        refused
    }
}
