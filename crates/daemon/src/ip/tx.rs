//! The IP engine's transmit thread: TUN batch in, policy and encapsulation in place, raw and UDP (GSO) sends.

use super::*;
use netveil_io::{PacketBuf, RawSocket, Tun, UdpSocket};
use netveil_ipsec::bundle::{OutIdx, Sad};
use netveil_ipsec::Drop as IpsecDrop;
use std::io::IoSlice;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

pub(super) fn new_bufs(n: usize, cap: usize) -> Vec<PacketBuf> {
    (0..n).map(|_| PacketBuf::new(cap, HEADROOM)).collect()
}

/// How a processed outbound packet leaves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Egress {
    Raw4,
    Raw6,
    Udp,
    Psp,
}

/// How a processed outbound packet leaves, and for the payload of a datagram, from where to where.
#[derive(Clone, Copy)]
struct TxMeta {
    egress: Egress,
    /// The packet is a datagram's payload, not a whole IP packet: where it goes.
    payload_of: Option<PayloadOf>,
}

/// Where a datagram's payload goes.
#[derive(Clone, Copy)]
enum PayloadOf {
    /// Between the ends of this SA (an index into the snapshot's SAD, see [`Out::NatTPayload`]).
    Sa(OutIdx),
    /// To the PSP peer, from this source port (see [`Out::PspPayload`]).
    PspPeer(u16),
}

/// What the addresses of datagram payloads are looked up in.
struct PayloadEnds<'a> {
    sad: &'a Sad,
    /// The PSP tunnel's local address and the peer's socket address.
    psp: Option<(IpAddr, SocketAddr)>,
}

/// Moves the packets of kind `k` among `bufs[from..to]` to the front of that range; returns where they end.
fn partition(
    bufs: &mut [PacketBuf],
    meta: &mut [TxMeta],
    from: usize,
    to: usize,
    k: Egress,
) -> usize {
    let mut n = from;
    for i in from..to {
        if meta[i].egress == k {
            if n != i {
                bufs.swap(n, i);
                meta.swap(n, i);
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
    let mut meta = vec![
        TxMeta {
            egress: Egress::Raw4,
            payload_of: None
        };
        n_bufs
    ];
    let mut gso = GsoSender::new();
    // Where PSP tunnel payloads go (the configuration does not change while this runs).
    let psp_ends = sh.psp.as_ref().map(|st| {
        (
            st.cfg.local,
            SocketAddr::new(st.cfg.remote, netveil_psp::UDP_PORT),
        )
    });
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
                Ok(out) => {
                    sh.tx_packets.fetch_add(1, Relaxed);
                    sh.tx_bytes.fetch_add(bufs[i].len() as u64, Relaxed);
                    meta[i] = match out {
                        Out::NatT => TxMeta {
                            egress: Egress::Udp,
                            payload_of: None,
                        },
                        Out::NatTPayload(sa) => TxMeta {
                            egress: Egress::Udp,
                            payload_of: Some(PayloadOf::Sa(sa)),
                        },
                        Out::PspPayload(sport) => TxMeta {
                            egress: Egress::Psp,
                            payload_of: Some(PayloadOf::PspPeer(sport)),
                        },
                        Out::Psp => TxMeta {
                            egress: Egress::Psp,
                            payload_of: None,
                        },
                        Out::Raw => TxMeta {
                            egress: if netveil_wire::ip::version(bufs[i].data()) == Some(4) {
                                Egress::Raw4
                            } else {
                                Egress::Raw6
                            },
                            payload_of: None,
                        },
                    };
                    if good != i {
                        bufs.swap(good, i);
                        meta.swap(good, i);
                    }
                    good += 1;
                }
                Err(d) => sh.tx_drops.count(d),
            }
        }
        let n4 = partition(&mut bufs, &mut meta, 0, good, Egress::Raw4);
        let n6 = partition(&mut bufs, &mut meta, n4, good, Egress::Raw6);
        if n4 > 0 {
            let _ = send4.send_batch(&bufs[..n4]);
        }
        if n6 > n4 {
            if let Some(s6) = send6 {
                let _ = s6.send_batch(&bufs[n4..n6]);
            }
        }
        let nu = partition(&mut bufs, &mut meta, n6, good, Egress::Udp);
        let ends = PayloadEnds {
            sad: &snap.sad,
            psp: psp_ends,
        };
        if nu > n6 {
            gso.send(&bufs[n6..nu], &meta[n6..nu], &ends, udp);
        }
        if good > nu {
            gso.send(&bufs[nu..good], &meta[nu..good], &ends, psp);
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

/// The payload of the UDP datagram that `p` is, its source address, destination and source port: those of the
/// SA `m` names for a payload, else read from the packet's IP and UDP headers (which the engine built: they are
/// whole).
fn udp_datagram<'p>(
    p: &'p PacketBuf,
    m: &TxMeta,
    ends: &PayloadEnds,
) -> Option<(&'p [u8], IpAddr, SocketAddr, u16)> {
    match m.payload_of {
        Some(PayloadOf::Sa(sa)) => {
            let (src, sport, to) = ends.sad.out(sa).udp_tunnel_ends()?;
            return Some((p.data(), src, to, sport));
        }
        Some(PayloadOf::PspPeer(sport)) => {
            let (src, to) = ends.psp?;
            return Some((p.data(), src, to, sport));
        }
        None => {}
    }
    let ip = netveil_wire::ip::Packet::new_checked(p.data()).ok()?;
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    if ip.payload().len() <= netveil_wire::udp::HEADER_LEN {
        return None;
    }
    let dgram = netveil_wire::udp::Packet::new_unchecked(ip.payload());
    let (sport, dport) = (dgram.src_port(), dgram.dst_port());
    // The UDP payload as a slice of the packet's buffer (the view's borrow ends here): what follows the headers,
    // up to the IP length.
    let end = ip.total_len().min(p.len());
    let payload_len = ip.payload().len() - netveil_wire::udp::HEADER_LEN;
    let payload = p.data().get(end - payload_len..end)?;
    Some((payload, src, SocketAddr::new(dst, dport), sport))
}

/// The most packets one [`GsoSender::send`] call gathers at once (a TUN read's segments).
const GSO_GATHER: usize = netveil_io::tun::MAX_SEGMENTS;

impl GsoSender {
    fn new() -> Self {
        GsoSender {
            runs: Vec::with_capacity(GSO_GATHER),
        }
    }

    /// Sends `pkts`: UDP payloads where `meta` gives their addresses, else whole IP/UDP packets.
    fn send(&mut self, pkts: &[PacketBuf], meta: &[TxMeta], ends: &PayloadEnds, udp: &UdpOut) {
        for (chunk, meta) in pkts.chunks(GSO_GATHER).zip(meta.chunks(GSO_GATHER)) {
            self.send_chunk(chunk, meta, ends, udp);
        }
    }

    fn send_chunk(
        &mut self,
        pkts: &[PacketBuf],
        meta: &[TxMeta],
        ends: &PayloadEnds,
        udp: &UdpOut,
    ) {
        let mut payloads = [IoSlice::new(&[]); GSO_GATHER];
        let mut k = 0;
        self.runs.clear();
        for (p, m) in pkts.iter().zip(meta) {
            let Some((payload, src, to, sport)) = udp_datagram(p, m, ends) else {
                continue;
            };
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
