//! Socket filters on real sockets (loopback, each test in its own network namespace): the kernel passes exactly the
//! packets the filter's reference interpreter passes, so the offsets are right for UDP and raw IPv4 sockets.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
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

/// (SPI, counter) payloads of ESP-in-UDP and PSP, some passing and some not.
fn cases(psp: bool) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for (spi, ctr) in [
        (0x1001u32, 1u64),
        (0x1001, 5000),
        (0x2001, 999),
        (0x2001, 1000),
        (0x2001, 1001),
        (0x3001, 5000),
        (0, 0),
    ] {
        let mut p = Vec::new();
        if psp {
            p.extend_from_slice(&[17, 1, 0, 1]);
            p.extend_from_slice(&spi.to_be_bytes());
            p.extend_from_slice(&ctr.to_be_bytes());
        } else {
            p.extend_from_slice(&spi.to_be_bytes());
            p.extend_from_slice(&(ctr as u32).to_be_bytes());
        }
        p.extend_from_slice(&[0x5a; 40]);
        v.push(p);
    }
    v.push(vec![0xff]); // a NAT keepalive: too short for the SPI
    v
}

fn udp_case(layout: Layout, psp: bool) {
    common::in_netns(move || {
        let rx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0).into()).unwrap();
        rx.set_recv_timeout(Duration::from_millis(300)).unwrap();
        let rules = [
            SpiRule {
                spi: 0x1001,
                ceiling: None,
                floor: None,
            },
            SpiRule {
                spi: 0x2001,
                floor: Some(1000),
                ceiling: Some(1000),
            },
        ];
        let prog = spi_filter(layout, &rules).unwrap();
        rx.attach_filter(Some(&prog)).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to: SocketAddr = rx.local_addr();
        let sent = cases(psp);
        for p in &sent {
            tx.send_to(p, to).unwrap();
        }
        let got = drain_udp(&rx);
        // What the reference interpreter says, over the datagram as the filter sees it (with its UDP header).
        let want: Vec<Vec<u8>> = sent
            .iter()
            .filter(|p| {
                let mut d = vec![0u8; 8];
                d.extend_from_slice(p);
                run(&prog, &d)
            })
            .cloned()
            .collect();
        assert_eq!(want.len(), 3, "the cases should pass 3");
        assert_eq!(got, want);
        // The refused ones are counted by the kernel.
        assert_eq!(rx.kernel_drops().unwrap() as usize, sent.len() - want.len());
        // Above the ceiling, about one packet in CEILING_LETS_THROUGH passes (the kernel's random draw).
        for i in 0..6400u32 {
            let mut p = if psp { vec![17, 1, 0, 1] } else { Vec::new() };
            p.extend_from_slice(&0x2001u32.to_be_bytes());
            if psp {
                p.extend_from_slice(&(2000u64 + u64::from(i)).to_be_bytes());
            } else {
                p.extend_from_slice(&(2000 + i).to_be_bytes());
            }
            p.extend_from_slice(&[0x5a; 40]);
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
    udp_case(Layout::EspInUdp, false);
}

#[test]
fn udp_psp_filter_in_the_kernel() {
    udp_case(Layout::PspInUdp, true);
}

#[test]
fn raw_esp_v4_filter_in_the_kernel() {
    common::in_netns(|| {
        let rx = RawSocket::recv_v4(50).unwrap();
        rx.set_recv_timeout(Duration::from_millis(300)).unwrap();
        let prog = spi_filter(
            Layout::EspRawV4,
            &[SpiRule {
                spi: 0x2001,
                ceiling: None,
                floor: Some(1000),
            }],
        )
        .unwrap();
        rx.attach_filter(Some(&prog)).unwrap();
        let tx = RawSocket::send_v4().unwrap();
        let lo = Ipv4Addr::LOCALHOST;
        let sent: Vec<Vec<u8>> = cases(false)
            .iter()
            .enumerate()
            .map(|(i, p)| common::ipv4(lo, lo, 50, i as u16, p))
            .collect();
        let pkts: Vec<PacketBuf> = sent
            .iter()
            .map(|p| PacketBuf::from_slice(p, 0, 0))
            .collect();
        tx.send_batch(&pkts).unwrap();
        let mut b: Vec<PacketBuf> = (0..16).map(|_| PacketBuf::new(2048, 0)).collect();
        let mut got = Vec::new();
        while let Ok(n) = rx.recv_batch(&mut b, 0) {
            got.extend(b[..n].iter().map(|p| p.data()[20..].to_vec()));
        }
        let want: Vec<Vec<u8>> = sent
            .iter()
            .filter(|p| run(&prog, p))
            .map(|p| p[20..].to_vec())
            .collect();
        assert_eq!(want.len(), 2);
        assert_eq!(got, want);
        // The kernel does not count socket-filter refusals on raw sockets (it does on UDP sockets).
        assert_eq!(rx.kernel_drops().unwrap(), 0);
    });
}
