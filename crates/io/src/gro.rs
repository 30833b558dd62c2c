//! Coalescing (GRO) for writes to offload TUN and TAP devices: what the kernel's GRO does for a NIC, so that the
//! host's stack handles one super-packet of up to 64 KiB instead of dozens of MTU-sized ones.
//!
//! A run is a packet followed by packets of the same flow that continue it: same addresses, ports and headers (but
//! for the lengths, the IPv4 identification and checksums), contiguous TCP sequence numbers, and payloads of the
//! first one's size but possibly the last, shorter one. The run goes to the device as one `writev`: a virtio-net
//! header (GSO type, segment size, checksum to complete), the first packet with its lengths fixed, then only the
//! payloads of the others, where they lie. Nothing is copied and nothing allocated.
//!
//! The segments' own TCP/UDP checksums are not verified, as kernel WireGuard does for its decrypted packets: the
//! packets written here were authenticated by the tunnel's AEAD, so the stack may take their checksums as checked
//! (it does for a super-packet, whose checksum it completes itself).

use std::io::{self, IoSlice};

use netveil_wire::{checksum, ethernet, ip_proto, ipv4, ipv6, tcp, udp, PacketBuf};

/// Length of the virtio-net header in front of every packet on an offload device.
pub(crate) const VNET_HDR_LEN: usize = tun_rs::VIRTIO_NET_HDR_LEN;

/// The most packets one run coalesces (the kernel's UDP GSO limit; 64 KiB of TCP needs fewer at MTU 1500).
const MAX_RUN: usize = 64;
/// The most bytes of one IP packet (its length fields are 16 bits).
const MAX_IP_LEN: usize = 65535;

const NEEDS_CSUM: u8 = 1;
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
const GSO_UDP_L4: u8 = 5;
/// The flag bits of a TCP header's 14th byte (CWR..FIN), which a run compares; NS is compared with the data
/// offset and the reserved bits.
const FLAGS8: u16 = 0xff;

/// The first packet of a run: where its headers end and what the next one must continue.
struct Head {
    v6: bool,
    /// Link-layer header length: 0 (TUN) or an Ethernet header (TAP).
    l2: usize,
    ip_len: usize,
    /// TCP header length, or the UDP header's 8 for UDP.
    l4_len: usize,
    udp: bool,
    payload: usize,
    seq: u32,
}

impl Head {
    fn hdrs(&self) -> usize {
        self.l2 + self.ip_len + self.l4_len
    }
}

/// True if a TCP header's flags are ACK, possibly with PSH, and nothing else.
fn ack_psh_only<T: AsRef<[u8]>>(t: &tcp::Packet<T>) -> bool {
    t.flags() & FLAGS8 & !tcp::flags::PSH == tcp::flags::ACK
}

/// A packet that may start a run: IPv4 without options or fragmentation, or IPv6 without extension headers,
/// carrying TCP with only ACK (and PSH) flags, or UDP when `udp`; some payload. `l2`: 0 for an IP packet, the
/// Ethernet header's length for a frame.
fn parse(f: &[u8], l2: usize, udp: bool) -> Option<Head> {
    let l3 = f.get(l2..)?;
    if l3.len() < ipv4::MIN_HEADER_LEN + udp::HEADER_LEN {
        return None;
    }
    let version = if l2 == 0 {
        netveil_wire::ip::version(l3)?
    } else {
        match ethernet::Packet::new_unchecked(f).ethertype() {
            ethernet::ethertype::IPV4 => 4,
            ethernet::ethertype::IPV6 => 6,
            _ => return None,
        }
    };
    let (v6, ip_len, proto) = match version {
        4 => {
            let h = ipv4::Packet::new_unchecked(l3);
            if h.version() != 4
                || h.header_len() != ipv4::MIN_HEADER_LEN
                || h.is_fragment()
                || usize::from(h.total_len()) != l3.len()
            {
                return None;
            }
            (false, ipv4::MIN_HEADER_LEN, h.protocol())
        }
        6 => {
            let h = ipv6::Packet::new_checked(l3).ok()?;
            if h.version() != 6 || h.total_len() != l3.len() {
                return None;
            }
            (true, ipv6::HEADER_LEN, h.next_header())
        }
        _ => return None,
    };
    let l4 = &l3[ip_len..];
    match proto {
        ip_proto::TCP => {
            let t = tcp::Packet::new_checked(l4).ok()?;
            if !ack_psh_only(&t) || t.payload().is_empty() {
                return None;
            }
            Some(Head {
                v6,
                l2,
                ip_len,
                l4_len: t.header_len(),
                udp: false,
                payload: t.payload().len(),
                seq: t.seq_number(),
            })
        }
        ip_proto::UDP if udp => {
            let u = udp::Packet::new_checked(l4).ok()?;
            if usize::from(u.len()) != l4.len() || u.payload().is_empty() {
                return None;
            }
            Some(Head {
                v6,
                l2,
                ip_len,
                l4_len: udp::HEADER_LEN,
                udp: true,
                payload: u.payload().len(),
                seq: 0,
            })
        }
        _ => None,
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
/// number, PSH and the checksum. `a` is a parsed head's header; `b` holds at least as many bytes.
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

/// Whether `next` continues the run of `h` as its packet number `k` (1 = the second): the same headers, its
/// sequence number where the previous payloads end, and no longer than the head's payload. Returns the PSH flag
/// of a TCP packet that does (which ends the run).
fn continues(first: &[u8], h: &Head, k: usize, next: &[u8]) -> Option<bool> {
    let hl = h.hdrs();
    if next.len() <= hl
        || next.len() - hl > h.payload
        || (h.l2 > 0 && first[..h.l2] != next[..h.l2])
    {
        return None;
    }
    let (fl3, fl4) = first[h.l2..].split_at(h.ip_len);
    let (nl3, nl4) = next[h.l2..].split_at(h.ip_len);
    let same_ip = if h.v6 {
        let b = ipv6::Packet::new_unchecked(nl3);
        same_v6(&ipv6::Packet::new_unchecked(fl3), &b) && b.total_len() == next.len() - h.l2
    } else {
        let b = ipv4::Packet::new_unchecked(nl3);
        same_v4(&ipv4::Packet::new_unchecked(fl3), &b)
            && usize::from(b.total_len()) == next.len() - h.l2
    };
    if !same_ip {
        return None;
    }
    if h.udp {
        let (a, b) = (
            udp::Packet::new_unchecked(fl4),
            udp::Packet::new_unchecked(nl4),
        );
        let ok = a.src_port() == b.src_port()
            && a.dst_port() == b.dst_port()
            && usize::from(b.len()) == nl4.len();
        return ok.then_some(false);
    }
    let (a, b) = (
        tcp::Packet::new_unchecked(fl4),
        tcp::Packet::new_unchecked(nl4),
    );
    let expect = h.seq.wrapping_add((h.payload * k) as u32);
    (same_tcp(&a, &b) && b.seq_number() == expect).then(|| b.flags() & tcp::flags::PSH != 0)
}

/// The packets of a batch to write, wherever they lie: each in its own buffer, or as ranges of one buffer (the
/// datagrams of a coalesced receive, opened where they lie).
pub(crate) trait Packets {
    /// How many packets.
    fn count(&self) -> usize;
    /// Packet `i`.
    fn packet(&self, i: usize) -> &[u8];
    /// Packet `i`, to change its headers.
    fn packet_mut(&mut self, i: usize) -> &mut [u8];
}

impl Packets for [PacketBuf] {
    fn count(&self) -> usize {
        self.len()
    }
    fn packet(&self, i: usize) -> &[u8] {
        self[i].data()
    }
    fn packet_mut(&mut self, i: usize) -> &mut [u8] {
        self[i].data_mut()
    }
}

/// Where a packet lies among buffers: bytes `start..end` of buffer `buf`'s storage ([`PacketBuf::storage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub buf: usize,
    pub start: usize,
    pub end: usize,
}

/// Packets that lie at spans of a set of buffers (several may share one buffer, without overlapping).
pub(crate) struct Spans<'a> {
    pub bufs: &'a mut [PacketBuf],
    pub spans: &'a [Span],
}

impl Packets for Spans<'_> {
    fn count(&self) -> usize {
        self.spans.len()
    }
    fn packet(&self, i: usize) -> &[u8] {
        let s = self.spans[i];
        &self.bufs[s.buf].storage()[s.start..s.end]
    }
    fn packet_mut(&mut self, i: usize) -> &mut [u8] {
        let s = self.spans[i];
        &mut self.bufs[s.buf].storage_mut()[s.start..s.end]
    }
}

/// Finds the run that starts at packet `at` and returns its length (1: nothing to coalesce, `hdr` stays zero);
/// for a longer run, fixes the first packet's IP length (and IPv4 checksum), its UDP length or TCP PSH flag, puts
/// the pseudo-header sum in its TCP/UDP checksum (as for `CHECKSUM_PARTIAL`), and fills `hdr`. Also returns the
/// length of the headers the others' payloads follow.
fn run<P: Packets + ?Sized>(
    pkts: &mut P,
    at: usize,
    l2: usize,
    udp: bool,
    hdr: &mut [u8; VNET_HDR_LEN],
) -> (usize, usize) {
    *hdr = [0; VNET_HDR_LEN];
    if at >= pkts.count() {
        return (0, 0);
    }
    let first = pkts.packet(at);
    let Some(h) = parse(first, l2, udp) else {
        return (1, 0);
    };
    let hl = h.hdrs();
    // TCP: a head with PSH ends its run at once.
    if !h.udp && tcp::Packet::new_unchecked(&first[l2 + h.ip_len..]).flags() & tcp::flags::PSH != 0
    {
        return (1, hl);
    }
    let mut ip_total = first.len() - l2;
    let mut n = 1;
    let mut psh = false;
    let end = pkts.count().min(at + MAX_RUN);
    for i in at + 1..end {
        let nd = pkts.packet(i);
        let Some(p) = continues(first, &h, n, nd) else {
            break;
        };
        let add = nd.len() - hl;
        if ip_total + add > MAX_IP_LEN {
            break;
        }
        ip_total += add;
        n += 1;
        // PSH, or a payload shorter than the head's, ends the run.
        if p || add < h.payload {
            psh = p;
            break;
        }
    }
    if n == 1 {
        return (1, hl);
    }
    let l4_total = ip_total - h.ip_len;
    let (l3, l4) = pkts.packet_mut(at)[l2..].split_at_mut(h.ip_len);
    let proto = if h.udp { ip_proto::UDP } else { ip_proto::TCP };
    let pseudo = if h.v6 {
        let mut p = ipv6::Packet::new_unchecked(&mut *l3);
        p.set_payload_len(l4_total as u16);
        let (src, dst) = (p.src_addr().octets(), p.dst_addr().octets());
        checksum::pseudo_header(&src, &dst, proto, l4_total as u32)
    } else {
        let mut p = ipv4::Packet::new_unchecked(&mut *l3);
        p.set_total_len(ip_total as u16);
        p.fill_checksum();
        let (src, dst) = (p.src_addr().octets(), p.dst_addr().octets());
        checksum::pseudo_header(&src, &dst, proto, l4_total as u32)
    };
    let (gso_type, csum_offset) = if h.udp {
        let mut u = udp::Packet::new_unchecked(l4);
        u.set_len(l4_total as u16);
        u.set_checksum(!checksum::finish(pseudo));
        (GSO_UDP_L4, 6)
    } else {
        let mut t = tcp::Packet::new_unchecked(l4);
        if psh {
            let f = t.flags();
            t.set_flags(f | tcp::flags::PSH);
        }
        t.set_checksum(!checksum::finish(pseudo));
        (if h.v6 { GSO_TCPV6 } else { GSO_TCPV4 }, 16)
    };
    let v = tun_rs::VirtioNetHdr {
        flags: NEEDS_CSUM,
        gso_type,
        hdr_len: hl as u16,
        gso_size: h.payload as u16,
        csum_start: (l2 + h.ip_len) as u16,
        csum_offset,
    };
    let _ = v.encode(hdr);
    (n, hl)
}

/// Writes `pkts` (IP packets, or Ethernet frames when `l2` is the Ethernet header length) through `write`
/// (one `writev` of an offload device), coalescing runs of TCP segments, and of UDP datagrams when `udp` (the
/// device takes UDP GSO). The first packet of each run is changed (see [`run`]). Write errors do not stop the
/// batch; the last one is returned. Returns the number of writes.
pub(crate) fn write_batch<P: Packets + ?Sized>(
    pkts: &mut P,
    l2: usize,
    udp: bool,
    mut write: impl FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
) -> io::Result<usize> {
    let mut writes = 0;
    let mut res = Ok(());
    let mut i = 0;
    let mut hdr = [0u8; VNET_HDR_LEN];
    while i < pkts.count() {
        let (n, hl) = run(pkts, i, l2, udp, &mut hdr);
        let mut iov = [IoSlice::new(&[]); MAX_RUN + 1];
        iov[0] = IoSlice::new(&hdr);
        iov[1] = IoSlice::new(pkts.packet(i));
        for k in 1..n {
            iov[k + 1] = IoSlice::new(&pkts.packet(i + k)[hl..]);
        }
        if let Err(e) = write(&iov[..n + 1]) {
            res = Err(e);
        }
        writes += 1;
        i += n;
    }
    res.map(|()| writes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4/TCP segment from 10.0.0.1:1000 to 10.0.0.2:2000 (ACK plus `flags`), valid checksums.
    fn tcp4(seq: u32, flags: u8, payload: &[u8]) -> PacketBuf {
        let total = 40 + payload.len();
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let c = checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p[20..22].copy_from_slice(&1000u16.to_be_bytes());
        p[22..24].copy_from_slice(&2000u16.to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[28..32].copy_from_slice(&7u32.to_be_bytes());
        p[32] = 5 << 4;
        p[33] = 0x10 | flags;
        p[34..36].copy_from_slice(&512u16.to_be_bytes());
        p[40..].copy_from_slice(payload);
        let ps = checksum::pseudo_header(&[10, 0, 0, 1], &[10, 0, 0, 2], 6, (total - 20) as u32);
        let c = checksum::finish(checksum::sum(ps, &p[20..]));
        p[36..38].copy_from_slice(&c.to_be_bytes());
        PacketBuf::from_slice(&p, 0, 0)
    }

    /// The packets one `write_batch` call would hand to the device, as (virtio-net header, bytes).
    fn writes(pkts: &mut [PacketBuf], udp: bool) -> Vec<([u8; VNET_HDR_LEN], Vec<u8>)> {
        let mut out = Vec::new();
        let n = write_batch(pkts, 0, udp, |iov| {
            let hdr: [u8; VNET_HDR_LEN] = iov[0][..].try_into().unwrap();
            out.push((
                hdr,
                iov[1..].iter().flat_map(|s| s.iter().copied()).collect(),
            ));
            Ok(iov.iter().map(|s| s.len()).sum())
        })
        .unwrap();
        assert_eq!(n, out.len());
        out
    }

    #[test]
    fn contiguous_segments_become_one_super_packet() {
        let data: Vec<u8> = (0..1000u32 * 4 + 300).map(|i| (i % 251) as u8).collect();
        let mut pkts: Vec<PacketBuf> = data
            .chunks(1000)
            .enumerate()
            .map(|(i, c)| tcp4(100 + 1000 * i as u32, if i == 4 { 0x08 } else { 0 }, c))
            .collect();
        let w = writes(&mut pkts, false);
        assert_eq!(w.len(), 1);
        let (hdr, p) = &w[0];
        let v = tun_rs::VirtioNetHdr::decode(hdr).unwrap();
        assert_eq!(
            (v.flags, v.gso_type, v.gso_size),
            (NEEDS_CSUM, GSO_TCPV4, 1000)
        );
        assert_eq!((v.hdr_len, v.csum_start, v.csum_offset), (40, 20, 16));
        assert_eq!(&p[40..], &data[..]);
        let ip = ipv4::Packet::new_unchecked(&p[..]);
        assert_eq!(usize::from(ip.total_len()), p.len());
        assert!(ip.verify_checksum());
        let t = tcp::Packet::new_unchecked(&p[20..]);
        // PSH from the last segment; the checksum field holds the pseudo-header sum of the whole.
        assert_eq!(t.flags() & 0xff, 0x18);
        let ps = checksum::pseudo_header(&[10, 0, 0, 1], &[10, 0, 0, 2], 6, (p.len() - 20) as u32);
        assert_eq!(t.checksum(), !checksum::finish(ps));
    }

    #[test]
    fn packets_lying_in_shared_buffers_coalesce_as_separate_ones() {
        // The segments of `runs_end_where_the_flow_breaks`, laid back to back in two buffers with a few bytes
        // between them (as datagrams opened where they lie): the same writes.
        let c = [7u8; 100];
        let pkts = || {
            vec![
                tcp4(0, 0, &c),
                tcp4(100, 0, &c),
                tcp4(200, 0, &c[..50]),
                tcp4(250, 0, &c),
                tcp4(350, 0x08, &c),
                tcp4(450, 0, &c),
            ]
        };
        let want = writes(&mut pkts(), false);
        let mut bufs = vec![PacketBuf::new(4096, 0), PacketBuf::new(4096, 0)];
        let mut spans = Vec::new();
        for (i, p) in pkts().iter().enumerate() {
            // The first run spans both buffers.
            let buf = usize::from(i >= 2);
            let start = spans
                .last()
                .filter(|s: &&Span| s.buf == buf)
                .map_or(16, |s| s.end + 16);
            let end = start + p.len();
            bufs[buf].storage_mut()[start..end].copy_from_slice(p.data());
            spans.push(Span { buf, start, end });
        }
        let mut got = Vec::new();
        let n = write_batch(
            &mut Spans {
                bufs: &mut bufs,
                spans: &spans,
            },
            0,
            false,
            |iov| {
                let hdr: [u8; VNET_HDR_LEN] = iov[0][..].try_into().unwrap();
                got.push((
                    hdr,
                    iov[1..]
                        .iter()
                        .flat_map(|s| s.iter().copied())
                        .collect::<Vec<u8>>(),
                ));
                Ok(0)
            },
        )
        .unwrap();
        assert_eq!(n, 3);
        assert_eq!(got, want);
    }

    #[test]
    fn runs_end_where_the_flow_breaks() {
        let c = [7u8; 100];
        let mut pkts = vec![
            tcp4(0, 0, &c),
            tcp4(100, 0, &c),
            // A gap in the sequence numbers.
            tcp4(300, 0, &c),
            // Shorter: ends the run it joins.
            tcp4(400, 0, &c[..50]),
            tcp4(450, 0, &c),
            // PSH: the last of the run it joins.
            tcp4(550, 0x08, &c),
            // PSH on a head: alone, even with a contiguous segment after it.
            tcp4(650, 0x08, &c),
            tcp4(750, 0, &c),
            // Not ACK-only.
            tcp4(850, 0x01, &c),
        ];
        let w = writes(&mut pkts, false);
        let lens: Vec<usize> = w.iter().map(|(_, p)| p.len()).collect();
        assert_eq!(lens, vec![240, 190, 240, 140, 140, 140]);
        // A packet written alone has a zero header and is unchanged.
        assert_eq!(w[3].0, [0; VNET_HDR_LEN]);
        assert_eq!(w[3].1, tcp4(650, 0x08, &c).data());
        assert_eq!(w[5].1, tcp4(850, 0x01, &c).data());
    }

    #[test]
    fn udp_coalesces_only_when_asked() {
        let dgram = |n: usize| {
            let mut p = vec![0u8; 28 + n];
            p[0] = 0x45;
            p[2..4].copy_from_slice(&((28 + n) as u16).to_be_bytes());
            p[8] = 64;
            p[9] = 17;
            p[12..16].copy_from_slice(&[10, 0, 0, 1]);
            p[16..20].copy_from_slice(&[10, 0, 0, 2]);
            let c = checksum::checksum(&p[..20]);
            p[10..12].copy_from_slice(&c.to_be_bytes());
            p[20..22].copy_from_slice(&5000u16.to_be_bytes());
            p[22..24].copy_from_slice(&6000u16.to_be_bytes());
            p[24..26].copy_from_slice(&((8 + n) as u16).to_be_bytes());
            PacketBuf::from_slice(&p, 0, 0)
        };
        let batch = || vec![dgram(500), dgram(500), dgram(200), dgram(500)];
        assert_eq!(writes(&mut batch(), false).len(), 4);
        let w = writes(&mut batch(), true);
        assert_eq!(w.len(), 2);
        let v = tun_rs::VirtioNetHdr::decode(&w[0].0).unwrap();
        assert_eq!(
            (v.gso_type, v.gso_size, v.hdr_len, v.csum_offset),
            (GSO_UDP_L4, 500, 28, 6)
        );
        let u = udp::Packet::new_unchecked(&w[0].1[20..]);
        assert_eq!(usize::from(u.len()), 8 + 1200);
    }
}
