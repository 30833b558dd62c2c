//! The IP engine's transmit thread: TUN batch in, policy and encapsulation in place, raw and UDP (GSO) sends.

use super::*;
use netveil_io::{PacketBuf, RawSocket, Tun, UdpSocket};
use netveil_ipsec::Drop as IpsecDrop;
use std::io::IoSlice;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

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

pub(super) fn tx_loop(
    sh: &Shared,
    tun: &Tun,
    send4: &RawSocket,
    send6: Option<&RawSocket>,
    udp: &UdpOut,
    psp: &UdpOut,
) {
    let mtu = tun.mtu() as usize;
    let mut scratch = vec![0u8; netveil_io::tun::RECV_SCRATCH_LEN];
    let n_bufs = netveil_io::tun::MAX_SEGMENTS;
    // Room for TFC padding up to the largest an SA may ask for (SAs come and go while this runs).
    let mut bufs = new_bufs(
        n_bufs,
        HEADROOM + mtu.max(crate::config::TFC_PAD_MAX.into()) + TAILROOM,
    );
    // One record per buffer: how its packet leaves (filled by `process_out`).
    let mut recs = vec![TxRecord::Raw4; n_bufs];
    let mut gso = GsoSender::new();
    let mut frags = FragCache::default();
    while !sh.stop.load(Relaxed) {
        let n = match tun.recv_batch(&mut scratch, &mut bufs, HEADROOM) {
            Ok(n) => n,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::Interrupted =>
            {
                continue
            }
            Err(_) => {
                sh.tx_drops.count(IpsecDrop::Malformed.into());
                continue;
            }
        };
        let now = sh.now();
        let snap = sh.db.load();
        // Process in place; keep the good packets at the front.
        let mut good = 0;
        for i in 0..n {
            match sh.process_out(&snap, &mut bufs[i], now, &mut frags) {
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
        let n4 = partition(&mut bufs, &mut recs, 0, good, 0);
        let n6 = partition(&mut bufs, &mut recs, n4, good, 1);
        if n4 > 0 {
            let _ = send4.send_batch(&bufs[..n4]);
        }
        if n6 > n4 {
            if let Some(s6) = send6 {
                let _ = s6.send_batch(&bufs[n4..n6]);
            }
        }
        let nu = partition(&mut bufs, &mut recs, n6, good, 2);
        if nu > n6 {
            gso.send(&bufs[n6..nu], &recs[n6..nu], udp);
        }
        if good > nu {
            gso.send(&bufs[nu..good], &recs[nu..good], psp);
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

    /// Sends `pkts`: datagram payloads, to where their records say.
    fn send(&mut self, pkts: &[PacketBuf], recs: &[TxRecord], udp: &UdpOut) {
        for (chunk, recs) in pkts.chunks(GSO_GATHER).zip(recs.chunks(GSO_GATHER)) {
            self.send_chunk(chunk, recs, udp);
        }
    }

    fn send_chunk(&mut self, pkts: &[PacketBuf], recs: &[TxRecord], udp: &UdpOut) {
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
            let _ = socks[first.sock].send_gathered_from(&items[..n]);
            while done < self.runs.len() && self.runs[done].len == 0 {
                done += 1;
            }
        }
    }
}
