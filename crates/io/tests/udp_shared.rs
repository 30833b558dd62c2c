//! Port 4500 shared by two sockets (the IP engine's ESP-in-UDP socket and the IKE driver's), in a network
//! namespace of its own: both bound with `SO_REUSEPORT` to the wildcard address, the steering program of
//! `steer_non_esp` on the group. Datagrams with the non-ESP marker (four zero bytes) and 1-byte NAT-T keepalives
//! reach the IKE socket only, ESP (a non-zero SPI first) the engine's only, in both families and whatever the
//! source port (without the program the kernel would spread them by the 4-tuple's hash).

mod common;

use netveil_io::{PacketBuf, UdpMeta, UdpSocket};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// What a socket received: (first byte, length) of each datagram.
type Got = Vec<(u8, usize)>;

/// Everything `s` receives within 300 ms.
fn drain(s: &UdpSocket) -> Got {
    s.set_recv_timeout(Duration::from_millis(300)).unwrap();
    let mut got = Vec::new();
    loop {
        let mut bufs = vec![PacketBuf::new(2048, 0); 16];
        let mut meta = vec![UdpMeta::default(); 16];
        match s.recv_batch(&mut bufs, &mut meta, 0) {
            Ok(n) => got.extend(bufs[..n].iter().map(|b| (b.data()[0], b.data().len()))),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return got,
            Err(e) => panic!("recv: {e}"),
        }
    }
}

fn shared_port(any: IpAddr, lo: IpAddr, steer: bool) -> (Got, Got) {
    let port = 4500;
    let engine = UdpSocket::bind_shared(SocketAddr::new(any, port)).expect("engine's socket");
    let ike = UdpSocket::bind_shared(SocketAddr::new(any, port)).expect("IKE's socket joins");
    if steer {
        // The engine's joined first (0), the driver's second (1).
        ike.steer_non_esp(1, 0).expect("SO_ATTACH_REUSEPORT_CBPF");
    }
    // Many source ports, so that the hash alone would spread them over both sockets.
    for sport in 0..32u16 {
        let c = UdpSocket::bind(SocketAddr::new(lo, 20000 + sport)).unwrap();
        let to = SocketAddr::new(lo, port);
        // IKE: the marker, then an IKE header's first byte (SPI) of 0x11.
        let mut ike_msg = vec![0u8, 0, 0, 0, 0x11];
        ike_msg.resize(60, 0x22);
        // ESP: SPI 0xe500_0101, sequence number 1.
        let esp = {
            let mut v = vec![0xe5, 0, 1, 1, 0, 0, 0, 1];
            v.resize(80, 0x33);
            v
        };
        // An ESP packet whose SPI's top three bytes are zero is still ESP (only all four zero is the marker).
        let esp_low = {
            let mut v = vec![0, 0, 0, 0x01, 0, 0, 0, 1];
            v.resize(90, 0x44);
            v
        };
        let keepalive = vec![0xffu8];
        let pkts: Vec<PacketBuf> = [&ike_msg, &esp, &esp_low, &keepalive]
            .iter()
            .map(|d| PacketBuf::from_slice(d, 0, 0))
            .collect();
        assert_eq!(c.send_batch(&pkts, &[to; 4]).unwrap(), 4);
    }
    (drain(&engine), drain(&ike))
}

fn check(any: IpAddr, lo: IpAddr) {
    let (engine, ike) = shared_port(any, lo, true);
    assert_eq!(
        engine.len(),
        64,
        "every ESP datagram to the engine: {engine:?}"
    );
    assert!(
        engine
            .iter()
            .all(|&(b, n)| (b, n) == (0xe5, 80) || (b, n) == (0, 90)),
        "only ESP at the engine: {engine:?}"
    );
    assert_eq!(
        ike.len(),
        64,
        "every IKE datagram and keepalive to IKE: {ike:?}"
    );
    assert!(
        ike.iter()
            .all(|&(b, n)| (b, n) == (0, 60) || (b, n) == (0xff, 1)),
        "only marked datagrams and keepalives at IKE: {ike:?}"
    );
    assert_eq!(ike.iter().filter(|x| x.1 == 1).count(), 32);
}

#[test]
fn marker_steers_ike_from_esp_on_a_shared_port_v4() {
    common::in_netns(|| {
        check(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        )
    });
}

#[test]
fn marker_steers_ike_from_esp_on_a_shared_port_v6() {
    common::in_netns(|| {
        check(
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
        )
    });
}

/// The control: without the steering program the group spreads both kinds over both sockets (so the test
/// above would fail if the program did nothing), and a socket without `SO_REUSEPORT` cannot join at all.
#[test]
fn without_the_program_the_kinds_mix() {
    common::in_netns(|| {
        let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        let (engine, ike) = shared_port(any, IpAddr::V4(Ipv4Addr::LOCALHOST), false);
        assert_eq!(engine.len() + ike.len(), 128);
        assert!(
            engine.iter().any(|x| x.1 == 60) || ike.iter().any(|x| x.1 == 80),
            "the hash mixed nothing: {engine:?} {ike:?}"
        );
        let _first = UdpSocket::bind_shared(SocketAddr::new(any, 4600)).unwrap();
        let e = UdpSocket::bind(SocketAddr::new(any, 4600)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE));
    });
}
