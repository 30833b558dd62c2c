//! Socket filters on real sockets (loopback, each test in its own network namespace): the kernel passes exactly the
//! packets of an explicit expected set of (SPI, counter) (and the filter's reference interpreter agrees), so the
//! offsets are right for UDP sockets and raw ESP and AH sockets of both families. Counters above a ceiling pass
//! at random (one in 64): they are kept out of the exact comparisons and counted separately.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use netveil_io::filter::{run, spi_filter, Layout, SpiRule};
use netveil_io::{PacketBuf, RawSocket, UdpMeta, UdpSocket};

fn drain_udp(s: &UdpSocket) -> Vec<Vec<u8>> {
    let mut bufs: Vec<PacketBuf> = (0..16).map(|_| PacketBuf::new(2048, 0)).collect();
    let mut meta = vec![UdpMeta::default(); 16];
    let mut out = Vec::new();
    while let Ok(n) = s.recv_batch(&mut bufs, &mut meta, 0) {
        out.extend(bufs[..n].iter().map(|b| b.data().to_vec()));
    }
    out
}

/// The (SPI, counter) pairs sent in the exact comparisons: known and unknown SPIs, counters below, at and above
/// floors. None is above a ceiling (those pass at random). The SPIs' first byte is not 0, so that a filter that
/// looks for an IPv4 header where there is none (on an IPv6 socket) skips the wrong number of bytes.
const CASES: [(u32, u64); 7] = [
    (0x0c00_1001, 1),
    (0x0c00_1001, 5000),
    (0x0c00_2001, 999),
    (0x0c00_2001, 1000),
    (0x0c00_2001, 1001),
    (0x0c00_3001, 5000),
    (0, 0),
];

/// The payload (ESP, PSP or AH header and some bytes) of one case.
fn payload(kind: Kind, (spi, ctr): (u32, u64)) -> Vec<u8> {
    let mut p = Vec::new();
    match kind {
        Kind::Psp => {
            p.extend_from_slice(&[17, 1, 0, 1]);
            p.extend_from_slice(&spi.to_be_bytes());
            p.extend_from_slice(&ctr.to_be_bytes());
        }
        Kind::Esp => {
            p.extend_from_slice(&spi.to_be_bytes());
            p.extend_from_slice(&(ctr as u32).to_be_bytes());
        }
        Kind::Ah => {
            // Next header, payload length (in 4-byte units, minus 2: a 16-byte ICV), reserved.
            p.extend_from_slice(&[59, 5, 0, 0]);
            p.extend_from_slice(&spi.to_be_bytes());
            p.extend_from_slice(&(ctr as u32).to_be_bytes());
        }
    }
    p.extend_from_slice(&[0x5a; 40]);
    p
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Esp,
    Psp,
    Ah,
}

/// Payloads of `cases`, then a NAT keepalive (one byte: too short for the SPI).
fn payloads(kind: Kind, cases: &[(u32, u64)]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = cases.iter().map(|&c| payload(kind, c)).collect();
    v.push(vec![0xff]);
    v
}

/// The payloads of `pass` among those of [`CASES`], in order (what the kernel must deliver).
fn expected(kind: Kind, pass: &[(u32, u64)]) -> Vec<Vec<u8>> {
    assert!(pass.iter().all(|c| CASES.contains(c)));
    CASES
        .iter()
        .filter(|c| pass.contains(c))
        .map(|&c| payload(kind, c))
        .collect()
}

fn udp_case(layout: Layout, kind: Kind) {
    common::in_netns(move || {
        let rx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0).into()).unwrap();
        rx.set_recv_timeout(Duration::from_millis(300)).unwrap();
        let rules = [
            SpiRule {
                spi: 0x0c00_1001,
                ceiling: None,
                floor: None,
            },
            SpiRule {
                spi: 0x0c00_2001,
                floor: Some(1000),
                ceiling: Some(1001),
            },
        ];
        let prog = spi_filter(layout, &rules).unwrap();
        rx.attach_filter(Some(&prog)).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to: SocketAddr = rx.local_addr();
        let sent = payloads(kind, &CASES);
        for p in &sent {
            tx.send_to(p, to).unwrap();
        }
        let got = drain_udp(&rx);
        // 0x0c00_1001 at any counter, 0x0c00_2001 from its floor up to its ceiling (inclusive).
        let want = expected(
            kind,
            &[
                (0x0c00_1001, 1),
                (0x0c00_1001, 5000),
                (0x0c00_2001, 1000),
                (0x0c00_2001, 1001),
            ],
        );
        assert_eq!(got, want);
        // The reference interpreter agrees (over the datagram as the filter sees it: with its UDP header).
        for p in &sent {
            let mut d = vec![0u8; 8];
            d.extend_from_slice(p);
            assert_eq!(run(&prog, &d), want.contains(p));
        }
        // The refused ones are counted by the kernel.
        assert_eq!(rx.kernel_drops().unwrap() as usize, sent.len() - want.len());
        // Above the ceiling, about one packet in CEILING_LETS_THROUGH passes (the kernel's random draw).
        for i in 0..6400u32 {
            let p = payload(kind, (0x0c00_2001, 2000 + u64::from(i)));
            tx.send_to(&p, to).unwrap();
            if i % 500 == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let through = drain_udp(&rx).len();
        assert!(
            (30..=200).contains(&through),
            "{through} of 6400 above the ceiling passed (expected about 100)"
        );
        // Detached: everything passes.
        rx.attach_filter(None).unwrap();
        for p in &sent {
            tx.send_to(p, to).unwrap();
        }
        assert_eq!(drain_udp(&rx).len(), sent.len());
    });
}

#[test]
fn udp_esp_filter_in_the_kernel() {
    udp_case(Layout::EspInUdp, Kind::Esp);
}

#[test]
fn udp_psp_filter_in_the_kernel() {
    udp_case(Layout::PspInUdp, Kind::Psp);
}

/// An IPv6 header (no extension headers) followed by `payload`.
fn ipv6(next: u8, src: Ipv6Addr, dst: Ipv6Addr, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 40];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    p[6] = next;
    p[7] = 64;
    p[8..24].copy_from_slice(&src.octets());
    p[24..40].copy_from_slice(&dst.octets());
    p.extend_from_slice(payload);
    p
}

/// A raw receive socket of `proto` (50: ESP, 51: AH) and family with the filter of `layout` for SPI 0x0c00_2001 from
/// counter 1000 (no ceiling), or no filter (`filter` false: then every case arrives, the control that shows the
/// filter is what refuses). Returns the payloads (after the IP header) that arrived, in order.
fn raw_case(proto: u8, v6: bool, filter: bool) -> Vec<Vec<u8>> {
    let kind = if proto == 51 { Kind::Ah } else { Kind::Esp };
    let layout = Layout::raw(proto, v6).unwrap();
    let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let o = out.clone();
    common::in_netns(move || {
        let rx = if v6 {
            RawSocket::recv_v6(proto)
        } else {
            RawSocket::recv_v4(proto)
        }
        .unwrap();
        rx.set_recv_timeout(Duration::from_millis(300)).unwrap();
        let rule = SpiRule {
            spi: 0x0c00_2001,
            ceiling: None,
            floor: Some(1000),
        };
        let prog = spi_filter(layout, &[rule]).unwrap();
        if filter {
            rx.attach_filter(Some(&prog)).unwrap();
        }
        let tx = if v6 {
            RawSocket::send_v6()
        } else {
            RawSocket::send_v4()
        }
        .unwrap();
        let sent: Vec<Vec<u8>> = payloads(kind, &CASES)
            .iter()
            .enumerate()
            .map(|(i, p)| {
                if v6 {
                    ipv6(proto, Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, p)
                } else {
                    let lo = Ipv4Addr::LOCALHOST;
                    common::ipv4(lo, lo, proto, i as u16 + 1, p)
                }
            })
            .collect();
        let hdr = if v6 { 40 } else { 20 };
        // The reference interpreter agrees with the expected set, over what the socket's filter sees (IPv4: the
        // packet; IPv6: what follows the IPv6 header).
        let want = expected(kind, &[(0x0c00_2001, 1000), (0x0c00_2001, 1001)]);
        for p in &sent {
            let seen = if v6 { &p[hdr..] } else { &p[..] };
            assert_eq!(run(&prog, seen), want.iter().any(|w| w[..] == p[hdr..]));
        }
        let pkts: Vec<PacketBuf> = sent
            .iter()
            .map(|p| PacketBuf::from_slice(p, 0, 0))
            .collect();
        assert_eq!(tx.send_batch(&pkts).unwrap(), sent.len());
        let mut b: Vec<PacketBuf> = (0..16).map(|_| PacketBuf::new(2048, 0)).collect();
        let mut got = Vec::new();
        while let Ok(n) = rx.recv_batch(&mut b, 0) {
            got.extend(b[..n].iter().map(|p| p.data()[hdr..].to_vec()));
        }
        // The kernel does not count socket-filter refusals on raw sockets (it does on UDP sockets).
        assert_eq!(rx.kernel_drops().unwrap(), 0);
        *o.lock().unwrap() = got;
    });
    let got = out.lock().unwrap().clone();
    got
}

fn raw_filter_in_the_kernel(proto: u8, v6: bool) {
    let kind = if proto == 51 { Kind::Ah } else { Kind::Esp };
    // Only 0x0c00_2001 at or above its floor.
    assert_eq!(
        raw_case(proto, v6, true),
        expected(kind, &[(0x0c00_2001, 1000), (0x0c00_2001, 1001)])
    );
    // Without the filter, every case arrives (the one-byte runt too).
    assert_eq!(raw_case(proto, v6, false), payloads(kind, &CASES));
}

#[test]
fn raw_esp_v4_filter_in_the_kernel() {
    raw_filter_in_the_kernel(50, false);
}

/// An IPv6 raw socket's packets start after the IPv6 header: the filter finds the ESP header at 0.
#[test]
fn raw_esp_v6_filter_in_the_kernel() {
    raw_filter_in_the_kernel(50, true);
}

#[test]
fn raw_ah_v4_filter_in_the_kernel() {
    raw_filter_in_the_kernel(51, false);
}

#[test]
fn raw_ah_v6_filter_in_the_kernel() {
    raw_filter_in_the_kernel(51, true);
}
