//! TUN devices, plain and with offloads, each test in its own network namespace.

mod common;

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use netveil_io::tun::{RECV_SCRATCH_LEN, VIRTIO_NET_HDR_LEN};
use netveil_io::{PacketBuf, RawSocket, Tun, TunConfig};

const LOCAL: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const HEADROOM: usize = 64;

fn open(name: &str, offload: bool) -> Tun {
    let t = Tun::open(&TunConfig {
        name: name.into(),
        mtu: 1400,
        addresses: vec![
            (IpAddr::V4(LOCAL), 24),
            ("2001:db8:1::1".parse().unwrap(), 64),
        ],
        offload,
        multi_queue: false,
    })
    .unwrap();
    t.set_recv_timeout(Duration::from_secs(3)).unwrap();
    t
}

/// Reads packets from the TUN until `pred` accepts one.
fn read_until(t: &Tun, mut pred: impl FnMut(&[u8]) -> bool) -> Vec<u8> {
    let mut scratch = vec![0u8; RECV_SCRATCH_LEN];
    let mut out: Vec<PacketBuf> = (0..64).map(|_| PacketBuf::new(2048, HEADROOM)).collect();
    loop {
        let n = t
            .recv_batch(&mut scratch, &mut out, HEADROOM)
            .expect("tun recv");
        for p in &out[..n] {
            assert_eq!(p.headroom(), HEADROOM);
            if pred(p.data()) {
                return p.data().to_vec();
            }
        }
    }
}

fn tun_basics(offload: bool) {
    let t = open("nvtest0", offload);
    assert_eq!(t.name(), "nvtest0");
    assert_eq!(t.mtu(), 1400);
    assert_eq!(t.offload(), offload);

    // Outbound UDP from a socket reaches the TUN as a complete IPv4 packet with valid checksums.
    let s = std::net::UdpSocket::bind((LOCAL, 0)).unwrap();
    s.send_to(b"hello tun", (PEER, 9999)).unwrap();
    let p = read_until(&t, |p| p[0] >> 4 == 4 && p[9] == 17);
    assert_eq!(&p[12..16], &LOCAL.octets());
    assert_eq!(&p[16..20], &PEER.octets());
    assert_eq!(&p[22..24], &9999u16.to_be_bytes());
    assert_eq!(&p[28..], b"hello tun");
    assert!(common::checksums_ok_v4(&p));

    // An ICMP echo request sent through a header-included raw socket.
    let raw = RawSocket::send_v4().unwrap();
    let mut icmp = vec![8, 0, 0, 0, 0x12, 0x34, 0, 1];
    icmp.extend_from_slice(b"ping");
    let c = common::csum(0, &icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let ping = common::ipv4(LOCAL, PEER, 1, 0x4242, &icmp);
    assert_eq!(
        raw.send_batch(&[PacketBuf::from_slice(&ping, 0, 0)])
            .unwrap(),
        1
    );
    let p = read_until(&t, |p| p[0] >> 4 == 4 && p[9] == 1);
    assert_eq!(&p[20..], &icmp[..]);
    assert_eq!(&p[12..20], &ping[12..20]);

    // Inbound: a packet written into the TUN arrives at the socket (single send and batched send).
    let s2 = std::net::UdpSocket::bind((LOCAL, 0)).unwrap();
    s2.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let port = s2.local_addr().unwrap().port();
    t.send(&common::udp4(PEER, 7777, LOCAL, port, b"from tun"))
        .unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = s2.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"from tun");
    assert_eq!(from, SocketAddr::from((PEER, 7777)));

    let mut batch: Vec<PacketBuf> = (0..8u8)
        .map(|i| {
            PacketBuf::from_slice(
                &common::udp4(PEER, 7778, LOCAL, port, &[i; 1000]),
                HEADROOM,
                16384,
            )
        })
        .collect();
    t.send_batch(&mut batch).unwrap();
    for i in 0..8u8 {
        let (n, from) = s2.recv_from(&mut buf).unwrap();
        assert_eq!(from, SocketAddr::from((PEER, 7778)));
        assert_eq!(&buf[..n], &[i; 1000][..], "datagram {i}");
    }
    // Without headroom for the virtio header the batch is still written (one by one).
    let mut batch: Vec<PacketBuf> = (0..2u8)
        .map(|i| PacketBuf::from_slice(&common::udp4(PEER, 7779, LOCAL, port, &[i; 10]), 0, 0))
        .collect();
    t.send_batch(&mut batch).unwrap();
    for i in 0..2u8 {
        let (n, _) = s2.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[i; 10][..]);
    }

    // Timeout on an idle device.
    t.set_recv_timeout(Duration::from_millis(100)).unwrap();
    let mut one = PacketBuf::new(2048, 0);
    let start = Instant::now();
    loop {
        match t.recv(&mut one, 0) {
            Ok(()) => continue, // stray packet (none expected, but harmless)
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
                break;
            }
        }
    }
    assert!(start.elapsed() < Duration::from_secs(2));

    // Without waiting: an empty device says WouldBlock at once even with a long receive timeout, and a queued
    // packet is read; `wait_readable` tells the two apart.
    t.set_recv_timeout(Duration::from_secs(30)).unwrap();
    let mut scratch = vec![0u8; RECV_SCRATCH_LEN];
    let mut out: Vec<PacketBuf> = (0..64).map(|_| PacketBuf::new(2048, HEADROOM)).collect();
    while t.wait_readable(Duration::ZERO).unwrap() {
        let _ = t.try_recv_batch(&mut scratch, &mut out, HEADROOM);
    }
    let start = Instant::now();
    let e = t
        .try_recv_batch(&mut scratch, &mut out, HEADROOM)
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    assert!(start.elapsed() < Duration::from_secs(10));
    s.send_to(b"queued", (PEER, 9998)).unwrap();
    assert!(t.wait_readable(Duration::from_secs(3)).unwrap());
    let n = t.try_recv_batch(&mut scratch, &mut out, HEADROOM).unwrap();
    assert!(out[..n].iter().any(|p| p.data().ends_with(b"queued")));

    // The device disappears with the Tun.
    assert!(common::link_exists("nvtest0"));
    drop(t);
    assert!(!common::link_exists("nvtest0"));
}

#[test]
fn tun_plain() {
    common::in_netns(|| tun_basics(false));
}

#[test]
fn tun_offload_basics() {
    common::in_netns(|| tun_basics(true));
}

#[test]
fn tun_config_errors() {
    common::in_netns(|| {
        let cfg = TunConfig {
            name: "nvtest1".into(),
            mtu: 1400,
            addresses: vec![(IpAddr::V4(LOCAL), 24), (IpAddr::V4(PEER), 24)],
            offload: false,
            multi_queue: false,
        };
        assert!(Tun::open(&cfg).is_err());
        let t = Tun::open(&TunConfig {
            multi_queue: true,
            addresses: vec![],
            ..cfg
        })
        .unwrap();
        let q2 = t.clone_queue().unwrap();
        assert_eq!(q2.name(), "nvtest1");
        drop(t);
        assert!(common::link_exists("nvtest1"));
        drop(q2);
        assert!(!common::link_exists("nvtest1"));
    });
}

/// With offloads, the kernel hands TCP super-packets (TSO) to the TUN: recv_batch splits them into
/// MTU-sized segments with valid checksums. A tiny user-space TCP peer answers the handshake and ACKs.
#[test]
fn tun_offload_tcp_gso_split() {
    common::in_netns(|| {
        let t = open("nvtest2", true);
        const DATA_LEN: usize = 200_000;
        let data: Vec<u8> = (0..DATA_LEN).map(|i| (i % 251) as u8).collect();
        let to_send = data.clone();
        let client = std::thread::spawn(move || {
            let mut c = std::net::TcpStream::connect_timeout(
                &SocketAddr::from((PEER, 80)),
                Duration::from_secs(5),
            )
            .unwrap();
            c.write_all(&to_send).unwrap();
            std::thread::sleep(Duration::from_millis(500));
        });

        let mut scratch = vec![0u8; RECV_SCRATCH_LEN];
        let mut out: Vec<PacketBuf> = (0..128).map(|_| PacketBuf::new(2048, HEADROOM)).collect();
        let mut received = vec![0u8; DATA_LEN];
        let mut next_expected = 0usize; // contiguous bytes received
        let (mut cport, mut isn) = (0u16, 0u32);
        let my_isn = 1000u32;
        let mut max_batch = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while next_expected < DATA_LEN && Instant::now() < deadline {
            let n = match t.recv_batch(&mut scratch, &mut out, HEADROOM) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => panic!("recv_batch: {e}"),
            };
            max_batch = max_batch.max(n);
            let mut ack_needed = false;
            for p in &out[..n] {
                let p = p.data();
                if p[0] >> 4 != 4 || p[9] != 6 {
                    continue;
                }
                assert!(p.len() <= 1400, "segment longer than the MTU: {}", p.len());
                assert_eq!(u16::from_be_bytes([p[2], p[3]]) as usize, p.len());
                assert!(common::checksums_ok_v4(p), "bad checksum");
                let ihl = ((p[0] & 0xf) as usize) * 4;
                let tcp = &p[ihl..];
                let flags = tcp[13];
                let seq = u32::from_be_bytes(tcp[4..8].try_into().unwrap());
                if flags & 0x02 != 0 {
                    // SYN: answer SYN-ACK with MSS 1360.
                    cport = u16::from_be_bytes([tcp[0], tcp[1]]);
                    isn = seq;
                    let synack = common::tcp4(
                        PEER,
                        80,
                        LOCAL,
                        cport,
                        my_isn,
                        isn.wrapping_add(1),
                        0x12,
                        &[2, 4, 0x05, 0x50],
                        &[],
                    );
                    t.send(&synack).unwrap();
                    continue;
                }
                let doff = ((tcp[12] >> 4) as usize) * 4;
                let payload = &tcp[doff..];
                if payload.is_empty() {
                    continue;
                }
                let off = seq.wrapping_sub(isn.wrapping_add(1)) as usize;
                received[off..off + payload.len()].copy_from_slice(payload);
                if off <= next_expected {
                    next_expected = next_expected.max(off + payload.len());
                }
                ack_needed = true;
            }
            if ack_needed {
                let ack = isn.wrapping_add(1).wrapping_add(next_expected as u32);
                let pkt = common::tcp4(PEER, 80, LOCAL, cport, my_isn + 1, ack, 0x10, &[], &[]);
                t.send(&pkt).unwrap();
            }
        }
        assert_eq!(next_expected, DATA_LEN, "not all data arrived");
        assert_eq!(received, data);
        assert!(max_batch > 1, "the kernel never produced a super-packet");
        client.join().unwrap();
        let _ = VIRTIO_NET_HDR_LEN;
    });
}

/// With offloads, send_batch coalesces consecutive TCP segments (GRO) into super-packets that the kernel
/// accepts: a local listener receives the whole stream intact.
#[test]
fn tun_offload_tcp_gro_send() {
    common::in_netns(|| {
        use std::io::Read;
        let t = open("nvtest3", true);
        let listener = std::net::TcpListener::bind((LOCAL, 0)).unwrap();
        let lport = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut c, from) = listener.accept().unwrap();
            assert_eq!(from, SocketAddr::from((PEER, 40000)));
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut v = Vec::new();
            c.read_to_end(&mut v).unwrap();
            v
        });
        let my_isn = 5000u32;
        let syn = common::tcp4(
            PEER,
            40000,
            LOCAL,
            lport,
            my_isn,
            0,
            0x02,
            &[2, 4, 0x05, 0x50],
            &[],
        );
        t.send(&syn).unwrap();
        let synack = read_until(&t, |p| p[9] == 6 && p[20 + 13] & 0x12 == 0x12);
        let their_isn = u32::from_be_bytes(synack[24..28].try_into().unwrap());
        let ack = their_isn.wrapping_add(1);
        t.send(&common::tcp4(
            PEER,
            40000,
            LOCAL,
            lport,
            my_isn + 1,
            ack,
            0x10,
            &[],
            &[],
        ))
        .unwrap();

        // 40 segments of 1000 bytes in one batch (coalesced into few writes), then FIN.
        let seg = 1000usize;
        let data: Vec<u8> = (0..40 * seg).map(|i| (i % 253) as u8).collect();
        let mut batch: Vec<PacketBuf> = data
            .chunks(seg)
            .enumerate()
            .map(|(i, c)| {
                let seq = my_isn + 1 + (i * seg) as u32;
                let p = common::tcp4(PEER, 40000, LOCAL, lport, seq, ack, 0x10, &[], c);
                PacketBuf::from_slice(&p, HEADROOM, 65536)
            })
            .collect();
        let writes = t.send_batch(&mut batch).unwrap();
        // Coalesced: fewer writes than segments.
        assert!(
            writes < 40 / 2,
            "no GRO coalescing happened: {writes} writes"
        );
        let fin_seq = my_isn + 1 + data.len() as u32;
        t.send(&common::tcp4(
            PEER,
            40000,
            LOCAL,
            lport,
            fin_seq,
            ack,
            0x11,
            &[],
            &[],
        ))
        .unwrap();
        let got = server.join().unwrap();
        assert_eq!(got.len(), data.len());
        assert_eq!(got, data);
    });
}
