//! AF_PACKET sockets over a veth pair and a TAP device, each test in its own network namespace.

mod common;

use std::time::Duration;

use netveil_io::{PacketBuf, PacketSocket, Tap};

const HEADROOM: usize = 32;
const ETHERTYPE: u16 = 0x88b5;

fn frame(dst: [u8; 6], src: [u8; 6], ethertype: u16, i: u32, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend((0..len).map(|k| (k as u32 ^ i) as u8));
    f
}

fn mac_of(dev: &str) -> [u8; 6] {
    // (sysfs shows the initial namespace's devices: ask ip in this one.)
    let out = std::process::Command::new("ip")
        .args(["-o", "link", "show", "dev", dev])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    let mac = s
        .split("link/ether ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap();
    let v: Vec<u8> = mac
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

/// Waits until the link's operational state is UP (a veth end only carries frames then).
fn wait_up(dev: &str) {
    for _ in 0..100 {
        let out = std::process::Command::new("ip")
            .args(["-o", "link", "show", "dev", dev])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stdout).contains("state UP") {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{dev} did not come up");
}

#[test]
fn frames_cross_a_veth_pair_in_batches_and_are_not_echoed_to_the_sender() {
    common::in_netns(|| {
        common::ip(&["link", "add", "pa", "type", "veth", "peer", "name", "pb"]);
        common::ip(&["link", "set", "pa", "up"]);
        common::ip(&["link", "set", "pb", "up"]);
        wait_up("pa");
        wait_up("pb");
        let (ma, mb) = (mac_of("pa"), mac_of("pb"));
        let tx = PacketSocket::bind("pa", ETHERTYPE).unwrap();
        let rx = PacketSocket::bind("pb", ETHERTYPE).unwrap();
        let other = PacketSocket::bind("pb", 0x0800).unwrap();
        for s in [&tx, &rx, &other] {
            s.set_recv_timeout(Duration::from_millis(300)).unwrap();
        }
        // 200 frames sent before the first is read: room for all of them (the default buffer holds ~140).
        rx.set_buffer_sizes(4 << 20).unwrap();
        let sent: Vec<Vec<u8>> = (0..200u32)
            .map(|i| frame(mb, ma, ETHERTYPE, i, 46 + (i as usize * 7) % 1454))
            .collect();
        let bufs: Vec<PacketBuf> = sent
            .iter()
            .map(|f| PacketBuf::from_slice(f, 0, 0))
            .collect();
        assert_eq!(tx.send_batch(&bufs).unwrap(), sent.len());
        let mut got = Vec::new();
        let mut b: Vec<PacketBuf> = (0..64).map(|_| PacketBuf::new(2048, HEADROOM)).collect();
        while got.len() < sent.len() {
            let n = rx
                .recv_batch(&mut b, HEADROOM)
                .unwrap_or_else(|e| panic!("recv_batch after {} frames: {e}", got.len()));
            for p in &b[..n] {
                assert_eq!(p.headroom(), HEADROOM);
                got.push(p.data().to_vec());
            }
        }
        assert_eq!(got, sent, "frames arrive whole and in order");
        // Not echoed to the sending socket (PACKET_IGNORE_OUTGOING), not seen by another EtherType's socket.
        for s in [&tx, &other] {
            let e = s.recv_batch(&mut b, HEADROOM).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        }
    });
}

#[test]
fn tap_frames_reach_the_host_stack_and_come_back() {
    common::in_netns(|| {
        let mac = [0x02, 0, 0x5e, 0, 0x53, 0x01];
        let tap = Tap::open("nvtap0", 1500, Some(mac)).unwrap();
        assert_eq!(tap.name(), "nvtap0");
        tap.set_recv_timeout(Duration::from_millis(300)).unwrap();
        common::ip(&["addr", "add", "192.0.2.1/24", "dev", "nvtap0"]);
        // An ARP request for the host's address, written into the TAP, must be answered by the host.
        let peer_mac = [0x02, 0, 0x5e, 0, 0x53, 0x02];
        let mut arp = frame([0xff; 6], peer_mac, 0x0806, 0, 0);
        arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        arp.extend_from_slice(&peer_mac);
        arp.extend_from_slice(&[192, 0, 2, 2]);
        arp.extend_from_slice(&[0; 6]);
        arp.extend_from_slice(&[192, 0, 2, 1]);
        let mut buf = PacketBuf::new(2048, HEADROOM);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            tap.send(&arp).unwrap();
            match tap.recv(&mut buf, HEADROOM) {
                Ok(()) => {
                    let f = buf.data();
                    if f.len() >= 42 && f[12..14] == [8, 6] && f[20..22] == [0, 2] {
                        assert_eq!(&f[0..6], &peer_mac, "reply to the asker");
                        assert_eq!(&f[6..12], &mac, "from the TAP's MAC");
                        assert_eq!(&f[28..32], &[192, 0, 2, 1]);
                        break;
                    }
                }
                Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
            }
            assert!(std::time::Instant::now() < deadline, "no ARP reply");
        }
    });
}
