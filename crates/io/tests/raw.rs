//! Raw ESP sockets on loopback, IPv4 and IPv6, each test in its own network namespace.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use netveil_io::{PacketBuf, RawSocket};

const HEADROOM: usize = 64;

fn esp_payload(seq: u32) -> Vec<u8> {
    let mut p = vec![0x01, 0x02, 0x03, 0x04];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend((0..40u8).map(|i| i.wrapping_mul(7) ^ seq as u8));
    p
}

fn bufs(n: usize) -> Vec<PacketBuf> {
    (0..n).map(|_| PacketBuf::new(2048, HEADROOM)).collect()
}

/// Receives until `want` packets arrived (or the timeout fires).
fn recv_all(rx: &RawSocket, want: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut b = bufs(16);
    while out.len() < want {
        let n = rx.recv_batch(&mut b, 0).expect("recv_batch");
        for p in &b[..n] {
            assert_eq!(p.headroom(), 0);
            out.push(p.data().to_vec());
        }
    }
    out
}

#[test]
fn raw_esp_v4_loopback() {
    common::in_netns(|| {
        let rx = RawSocket::recv_v4(50).unwrap();
        rx.set_recv_timeout(Duration::from_secs(3)).unwrap();
        rx.set_buffer_sizes(1 << 20).unwrap();
        let tx = RawSocket::send_v4().unwrap();
        tx.set_mark(0x1234).unwrap();
        let lo = Ipv4Addr::LOCALHOST;
        let sent: Vec<Vec<u8>> = (0..8)
            .map(|i| common::ipv4(lo, lo, 50, 0x100 + i as u16, &esp_payload(i)))
            .collect();
        let pkts: Vec<PacketBuf> = sent
            .iter()
            .map(|p| PacketBuf::from_slice(p, HEADROOM, 0))
            .collect();
        assert_eq!(tx.send_batch(&pkts).unwrap(), 8);

        let mut b = bufs(16);
        let n = rx.recv_batch(&mut b, HEADROOM).unwrap();
        assert!(n >= 1);
        assert_eq!(b[0].headroom(), HEADROOM);
        let mut got: Vec<Vec<u8>> = b[..n].iter().map(|p| p.data().to_vec()).collect();
        got.extend(recv_all(&rx, 8 - n));
        assert_eq!(got.len(), 8);
        for (s, g) in sent.iter().zip(&got) {
            assert_eq!(s.len(), g.len());
            // Everything equal except the kernel-filled header checksum.
            assert_eq!(&s[..10], &g[..10]);
            assert_eq!(&s[12..], &g[12..]);
        }
        // A malformed packet in the batch is dropped, the rest still sent.
        let mixed = vec![PacketBuf::from_slice(&[0x45, 0], 0, 0), pkts[0].clone()];
        assert_eq!(tx.send_batch(&mixed).unwrap(), 1);
        assert_eq!(recv_all(&rx, 1)[0][12..], sent[0][12..]);

        // Nothing more: the timeout surfaces as WouldBlock.
        rx.set_recv_timeout(Duration::from_millis(100)).unwrap();
        let e = rx.recv_batch(&mut b, 0).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    });
}

fn ipv6(tc: u8, next: u8, hlim: u8, src: Ipv6Addr, dst: Ipv6Addr, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60 | (tc >> 4), tc << 4, 0, 0];
    p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    p.push(next);
    p.push(hlim);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(payload);
    p
}

#[test]
fn raw_esp_v6_loopback() {
    common::in_netns(|| {
        let rx = RawSocket::recv_v6(50).unwrap();
        rx.set_recv_timeout(Duration::from_secs(3)).unwrap();
        let tx = RawSocket::send_v6().unwrap();
        let lo = Ipv6Addr::LOCALHOST;
        let sent: Vec<Vec<u8>> = (0..8)
            .map(|i| {
                ipv6(
                    if i % 2 == 0 { 0 } else { 0xb8 },
                    50,
                    60 + i as u8,
                    lo,
                    lo,
                    &esp_payload(i),
                )
            })
            .collect();
        let pkts: Vec<PacketBuf> = sent
            .iter()
            .map(|p| PacketBuf::from_slice(p, 0, 0))
            .collect();
        assert_eq!(tx.send_batch(&pkts).unwrap(), 8);
        // The reconstructed packet is identical: version/tclass/flow 0, payload length, next header, hop limit,
        // source and destination.
        let mut b = bufs(16);
        let n = rx.recv_batch(&mut b, 8).unwrap();
        assert!(n >= 1);
        assert_eq!(b[0].headroom(), 8);
        let mut got: Vec<Vec<u8>> = b[..n].iter().map(|p| p.data().to_vec()).collect();
        got.extend(recv_all(&rx, 8 - n));
        assert_eq!(got, sent);

        // Receive-only/send-only misuse is reported.
        assert!(tx.recv_batch(&mut b, 0).is_err());
        assert!(rx.send_batch(&pkts).is_err());
    });
}
