//! Batched UDP (ESP-in-UDP style) round trips on loopback, each test in its own network namespace.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use netveil_io::{PacketBuf, UdpMeta, UdpSocket};

fn payload(i: usize) -> Vec<u8> {
    (0..100 + i).map(|j| (i * 31 + j) as u8).collect()
}

fn recv_n(sock: &UdpSocket, want: usize, headroom: usize) -> Vec<(Vec<u8>, UdpMeta)> {
    let mut bufs: Vec<PacketBuf> = (0..8).map(|_| PacketBuf::new(2048, 0)).collect();
    let mut meta = vec![UdpMeta::default(); 8];
    let mut out = Vec::new();
    while out.len() < want {
        let n = sock
            .recv_batch(&mut bufs, &mut meta, headroom)
            .expect("recv_batch");
        for i in 0..n {
            assert_eq!(bufs[i].headroom(), headroom);
            out.push((bufs[i].data().to_vec(), meta[i]));
        }
    }
    out
}

fn round_trip(server_bind: SocketAddr, client_bind: SocketAddr, server_dst: IpAddr) {
    let server = UdpSocket::bind(server_bind).unwrap();
    server.set_recv_timeout(Duration::from_secs(3)).unwrap();
    server.set_buffer_sizes(1 << 20).unwrap();
    server.set_mark(7).unwrap();
    let client = UdpSocket::bind(client_bind).unwrap();
    client.set_recv_timeout(Duration::from_secs(3)).unwrap();
    let to = SocketAddr::new(server_dst, server.local_addr().port());

    let pkts: Vec<PacketBuf> = (0..8)
        .map(|i| PacketBuf::from_slice(&payload(i), 16, 0))
        .collect();
    assert_eq!(client.send_batch(&pkts, &[to; 8]).unwrap(), 8);
    let got = recv_n(&server, 8, 32);
    assert_eq!(got.len(), 8);
    for (i, (data, meta)) in got.iter().enumerate() {
        assert_eq!(data, &payload(i));
        assert_eq!(meta.src, client.local_addr());
        assert_eq!(meta.dst, server_dst);
    }
    // Echo back as a batch, to the sources reported.
    let back: Vec<PacketBuf> = got
        .iter()
        .map(|(d, _)| PacketBuf::from_slice(d, 0, 0))
        .collect();
    let dsts: Vec<SocketAddr> = got.iter().map(|(_, m)| m.src).collect();
    let srcs: Vec<IpAddr> = got.iter().map(|(_, m)| m.dst).collect();
    assert_eq!(server.send_batch_from(&back, &dsts, &srcs).unwrap(), 8);
    let echoed = recv_n(&client, 8, 0);
    for (i, (data, meta)) in echoed.iter().enumerate() {
        assert_eq!(data, &payload(i));
        assert_eq!(meta.src, to);
    }
}

#[test]
fn udp_batch_v4() {
    common::in_netns(|| {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        round_trip(SocketAddr::new(lo, 4500), SocketAddr::new(lo, 0), lo);
        // Wildcard bind: the destination comes from IP_PKTINFO.
        let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        round_trip(
            SocketAddr::new(any, 4501),
            SocketAddr::new(lo, 0),
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
        );
    });
}

#[test]
fn udp_batch_v6() {
    common::in_netns(|| {
        let lo = IpAddr::V6(Ipv6Addr::LOCALHOST);
        round_trip(
            SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 4500),
            SocketAddr::new(lo, 0),
            lo,
        );
    });
}

#[test]
fn udp_timeout_and_short_meta() {
    common::in_netns(|| {
        let s = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        s.set_recv_timeout(Duration::from_millis(50)).unwrap();
        let mut bufs = vec![PacketBuf::new(256, 0); 4];
        let mut meta = vec![UdpMeta::default(); 4];
        let e = s.recv_batch(&mut bufs, &mut meta, 0).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        // Truncated datagrams are dropped; the next one is delivered.
        let c = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let big = PacketBuf::from_slice(&[1u8; 1000], 0, 0);
        let small = PacketBuf::from_slice(&[2u8; 10], 0, 0);
        assert_eq!(
            c.send_batch(&[big, small], &[s.local_addr(); 2]).unwrap(),
            2
        );
        s.set_recv_timeout(Duration::from_secs(2)).unwrap();
        let mut n = 0;
        while n == 0 {
            n = s.recv_batch(&mut bufs, &mut meta[..1], 0).unwrap();
        }
        assert_eq!(n, 1);
        assert_eq!(bufs[0].data(), &[2u8; 10]);
    });
}

/// The route MTU the kernel reports: the interface's, then the path MTU it learned; none without a route.
#[test]
fn route_mtu_is_the_interfaces_then_the_paths() {
    common::in_netns(|| {
        common::ip(&[
            "link", "add", "nvm0", "type", "veth", "peer", "name", "nvm1",
        ]);
        common::ip(&["link", "set", "nvm0", "mtu", "1380", "up"]);
        common::ip(&["link", "set", "nvm1", "up"]);
        common::ip(&["addr", "add", "198.51.100.1/24", "dev", "nvm0"]);
        common::ip(&["addr", "add", "2001:db8::1/64", "dev", "nvm0", "nodad"]);
        let v4: IpAddr = "198.51.100.7".parse().unwrap();
        let v6: IpAddr = "2001:db8::7".parse().unwrap();
        assert_eq!(netveil_io::udp::route_mtu(v4, None).unwrap(), 1380);
        assert_eq!(netveil_io::udp::route_mtu(v6, Some(7)).unwrap(), 1380);
        // A route with its own MTU (as a learned path MTU would be).
        common::ip(&[
            "route",
            "add",
            "203.0.113.0/24",
            "dev",
            "nvm0",
            "mtu",
            "1300",
        ]);
        assert_eq!(
            netveil_io::udp::route_mtu("203.0.113.9".parse().unwrap(), None).unwrap(),
            1300
        );
        assert!(netveil_io::udp::route_mtu("192.0.2.1".parse().unwrap(), None).is_err());
    });
}
