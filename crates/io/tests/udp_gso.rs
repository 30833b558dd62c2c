//! UDP GSO (send) and GRO (receive) on loopback (v4, v6) and across a veth pair between two namespaces, each
//! test in its own network namespace; plus an ignored micro-benchmark (sendmmsg vs GSO over veth).

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use netveil_io::udp::{GRO_BUF_SIZE, GSO_MAX_PAYLOAD};
use netveil_io::{segments, PacketBuf, UdpGroMeta, UdpMeta, UdpSocket};

const SEG: u16 = 1380;
const FULL: usize = 40;
const LAST: usize = 700;
const TOTAL: usize = FULL + 1;

/// Datagram `i` of the test train: 1380 bytes (700 for the last), starting with its index.
fn datagram(i: usize) -> Vec<u8> {
    let len = if i < FULL { SEG as usize } else { LAST };
    let mut d: Vec<u8> = (0..len).map(|j| (i * 7 + j * 13) as u8).collect();
    d[..4].copy_from_slice(&(i as u32).to_be_bytes());
    d
}

/// The 41 datagrams concatenated: one GSO payload.
fn train() -> Vec<u8> {
    (0..TOTAL).flat_map(datagram).collect()
}

/// Receives `want` datagrams without GRO.
fn recv_plain(sock: &UdpSocket, want: usize) -> Vec<(Vec<u8>, UdpMeta)> {
    let mut bufs: Vec<PacketBuf> = (0..16).map(|_| PacketBuf::new(2048, 0)).collect();
    let mut meta = vec![UdpMeta::default(); 16];
    let mut out = Vec::new();
    while out.len() < want {
        let n = sock
            .recv_batch(&mut bufs, &mut meta, 0)
            .expect("recv_batch");
        for i in 0..n {
            out.push((bufs[i].data().to_vec(), meta[i]));
        }
    }
    out
}

/// Receives until `want` datagrams arrived with GRO; returns them and the message metadata.
fn recv_coalesced(
    sock: &UdpSocket,
    want: usize,
    headroom: usize,
) -> (Vec<Vec<u8>>, Vec<UdpGroMeta>) {
    let mut bufs: Vec<PacketBuf> = (0..4)
        .map(|_| PacketBuf::new(headroom + GRO_BUF_SIZE, 0))
        .collect();
    let mut meta = vec![UdpGroMeta::default(); 4];
    let mut dgrams = Vec::new();
    let mut msgs = Vec::new();
    while dgrams.len() < want {
        let n = sock
            .recv_gro(&mut bufs, &mut meta, headroom)
            .expect("recv_gro");
        for i in 0..n {
            assert_eq!(bufs[i].headroom(), headroom);
            dgrams.extend(segments(bufs[i].data(), meta[i].segment_size).map(<[u8]>::to_vec));
            msgs.push(meta[i]);
        }
    }
    (dgrams, msgs)
}

fn check_train(got: &[Vec<u8>]) {
    assert_eq!(got.len(), TOTAL);
    for (i, d) in got.iter().enumerate() {
        assert_eq!(d.len(), datagram(i).len(), "datagram {i} size");
        assert_eq!(d, &datagram(i), "datagram {i} contents");
    }
}

fn receiver(bind: SocketAddr, gro: bool) -> UdpSocket {
    let s = UdpSocket::bind(bind).unwrap();
    s.set_recv_timeout(Duration::from_secs(3)).unwrap();
    s.set_buffer_sizes(4 << 20).unwrap();
    if gro {
        assert!(s.enable_gro().unwrap(), "UDP_GRO supported on Linux 6.18");
    }
    s
}

/// One GSO send of the train from `client_bind` to `server_bind`, received without and then with GRO.
fn gso_train(server_ip: IpAddr, client_ip: IpAddr, src: Option<IpAddr>) {
    let client = UdpSocket::bind(SocketAddr::new(client_ip, 0)).unwrap();
    let payload = train();
    for gro in [false, true] {
        let server = receiver(SocketAddr::new(server_ip, 0), gro);
        let to = server.local_addr();
        assert_eq!(client.send_gso(&payload, SEG, to, src).unwrap(), TOTAL);
        if gro {
            let (got, msgs) = recv_coalesced(&server, TOTAL, 64);
            check_train(&got);
            assert!(msgs.len() < TOTAL, "GRO coalesced nothing: {msgs:?}");
            for m in &msgs {
                assert_eq!(m.src, client.local_addr());
                assert_eq!(m.dst, server_ip);
            }
            assert!(msgs.iter().any(|m| m.segment_size == SEG as usize));
        } else {
            let got = recv_plain(&server, TOTAL);
            for (_, m) in &got {
                assert_eq!(m.src, client.local_addr());
                assert_eq!(m.dst, server_ip);
            }
            check_train(&got.into_iter().map(|(d, _)| d).collect::<Vec<_>>());
        }
    }
    assert!(client.gso_enabled(), "GSO was refused");
}

#[test]
fn gso_gro_loopback_v4() {
    common::in_netns(|| {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        gso_train(lo, lo, None);
        gso_train(lo, lo, Some(lo));
    });
}

#[test]
fn gso_gro_loopback_v6() {
    common::in_netns(|| {
        let lo = IpAddr::V6(Ipv6Addr::LOCALHOST);
        gso_train(lo, lo, None);
        gso_train(lo, lo, Some(lo));
    });
}

/// Wildcard-bound GRO receiver: the destination comes from pktinfo.
#[test]
fn gro_wildcard_pktinfo() {
    common::in_netns(|| {
        let server = receiver("0.0.0.0:0".parse().unwrap(), true);
        let client = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let dst_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));
        let to = SocketAddr::new(dst_ip, server.local_addr().port());
        assert_eq!(client.send_gso(&train(), SEG, to, None).unwrap(), TOTAL);
        let (got, msgs) = recv_coalesced(&server, TOTAL, 0);
        check_train(&got);
        assert!(msgs.iter().all(|m| m.dst == dst_ip));
    });
}

/// Waits until `dev` (in the calling thread's namespace) is operationally up: until linkwatch has run, the
/// device still has the noop qdisc and drops what is sent.
fn wait_up(dev: &str) {
    let t0 = Instant::now();
    loop {
        let out = std::process::Command::new("ip")
            .args(["-o", "link", "show", "dev", dev])
            .output()
            .expect("run ip");
        if String::from_utf8_lossy(&out.stdout).contains("state UP") {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{dev} not up");
        std::thread::sleep(Duration::from_millis(10));
    }
}

const VA: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const VB: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

/// Called in namespace A (from `in_netns`): creates veth `va` (192.0.2.1/24, here) ↔ `vb` (192.0.2.2/24, in a
/// new namespace B) with static neighbour entries, and runs `b` on a thread in B once both ends are up. `b`
/// gets a sender to signal that it is ready (e.g. bound); this returns after that signal.
fn veth_peer<R: Send + 'static>(
    b: impl FnOnce(mpsc::Sender<()>) -> R + Send + 'static,
) -> JoinHandle<R> {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        // SAFETY: unshare only changes this thread's namespace membership.
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0);
        // SAFETY: gettid has no preconditions.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        go_rx.recv().unwrap();
        common::ip(&["link", "set", "lo", "up"]);
        common::ip(&["addr", "add", "192.0.2.2/24", "dev", "vb"]);
        common::ip(&["link", "set", "vb", "up"]);
        common::ip(&[
            "neigh",
            "replace",
            "192.0.2.1",
            "lladdr",
            "02:00:00:00:00:01",
            "dev",
            "vb",
            "nud",
            "permanent",
        ]);
        wait_up("vb");
        b(ready_tx)
    });
    let tid = tid_rx.recv().unwrap().to_string();
    common::ip(&[
        "link",
        "add",
        "va",
        "address",
        "02:00:00:00:00:01",
        "type",
        "veth",
        "peer",
        "name",
        "vb",
        "address",
        "02:00:00:00:00:02",
    ]);
    common::ip(&["link", "set", "vb", "netns", &tid]);
    common::ip(&["addr", "add", "192.0.2.1/24", "dev", "va"]);
    common::ip(&["link", "set", "va", "up"]);
    common::ip(&[
        "neigh",
        "replace",
        "192.0.2.2",
        "lladdr",
        "02:00:00:00:00:02",
        "dev",
        "va",
        "nud",
        "permanent",
    ]);
    go_tx.send(()).unwrap();
    ready_rx.recv().expect("peer namespace ready");
    wait_up("va");
    h
}

#[test]
fn gso_gro_veth() {
    common::in_netns(|| {
        for gro in [false, true] {
            let port = if gro { 4501 } else { 4500 };
            let h = veth_peer(move |ready| {
                let s = receiver(SocketAddr::new(IpAddr::V4(VB), port), gro);
                ready.send(()).unwrap();
                if gro {
                    let (got, msgs) = recv_coalesced(&s, TOTAL, 32);
                    (
                        got,
                        msgs.iter().map(|m| (m.src, m.dst)).collect::<Vec<_>>(),
                        msgs.len(),
                    )
                } else {
                    let got = recv_plain(&s, TOTAL);
                    let addrs = got.iter().map(|(_, m)| (m.src, m.dst)).collect();
                    (got.into_iter().map(|(d, _)| d).collect(), addrs, TOTAL)
                }
            });
            let client = UdpSocket::bind(SocketAddr::new(IpAddr::V4(VA), 0)).unwrap();
            let to = SocketAddr::new(IpAddr::V4(VB), port);
            assert_eq!(
                client
                    .send_gso(&train(), SEG, to, Some(IpAddr::V4(VA)))
                    .unwrap(),
                TOTAL
            );
            let (got, addrs, msgs) = h.join().unwrap();
            check_train(&got);
            assert!(addrs
                .iter()
                .all(|&(s, d)| s == client.local_addr() && d == IpAddr::V4(VB)));
            if gro {
                assert!(msgs < TOTAL, "GRO over veth coalesced nothing");
            }
            assert!(client.gso_enabled());
            common::ip(&["link", "del", "va"]);
        }
    });
}

#[test]
fn gso_batch_several_buffers() {
    common::in_netns(|| {
        let server = receiver("127.0.0.1:0".parse().unwrap(), false);
        let client = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = server.local_addr();
        let t = train();
        let small = [9u8; 100];
        let items: Vec<(&[u8], u16, SocketAddr)> = vec![
            (&t, SEG, to),
            (&small, SEG, to),     // one segment: plain datagram
            (&t[..2760], SEG, to), // exactly two segments
        ];
        assert_eq!(client.send_gso_batch(&items).unwrap(), TOTAL + 1 + 2);
        let got: Vec<Vec<u8>> = recv_plain(&server, TOTAL + 3)
            .into_iter()
            .map(|(d, _)| d)
            .collect();
        check_train(&got[..TOTAL]);
        assert_eq!(got[TOTAL], small);
        assert_eq!(got[TOTAL + 1], datagram(0));
        assert_eq!(got[TOTAL + 2], datagram(1));
        // With sources.
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert_eq!(
            client
                .send_gso_batch_from(&[(&t[..], SEG, to, lo), (&small[..], 50, to, lo)])
                .unwrap(),
            TOTAL + 2
        );
        let got = recv_plain(&server, TOTAL + 2);
        assert_eq!(got[TOTAL].0, &small[..50]);
        assert_eq!(got[TOTAL + 1].0, &small[50..]);
    });
}

/// Sets `SO_NO_CHECK` on `s`, which makes the kernel refuse UDP GSO (EINVAL).
fn no_check(s: &UdpSocket) {
    let one: libc::c_int = 1;
    // SAFETY: valid fd and option value.
    let r = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(s),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            (&one as *const libc::c_int).cast(),
            4,
        )
    };
    assert_eq!(r, 0);
}

/// `SO_NO_CHECK` makes the kernel refuse UDP GSO (EINVAL): the datagrams still go out one by one, and the
/// socket stops trying GSO.
#[test]
fn gso_fallback_when_refused() {
    common::in_netns(|| {
        let server = receiver("127.0.0.1:0".parse().unwrap(), false);
        let client = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        no_check(&client);
        assert!(client.gso_enabled());
        let to = server.local_addr();
        assert_eq!(client.send_gso(&train(), SEG, to, None).unwrap(), TOTAL);
        assert!(!client.gso_enabled());
        let got: Vec<Vec<u8>> = recv_plain(&server, TOTAL)
            .into_iter()
            .map(|(d, _)| d)
            .collect();
        check_train(&got);
        // Later sends go out as plain datagrams directly (also batches).
        let t = train();
        assert_eq!(
            client
                .send_gso_batch(&[(&t, SEG, to), (&t, SEG, to)])
                .unwrap(),
            2 * TOTAL
        );
        let got: Vec<Vec<u8>> = recv_plain(&server, 2 * TOTAL)
            .into_iter()
            .map(|(d, _)| d)
            .collect();
        check_train(&got[..TOTAL]);
        check_train(&got[TOTAL..]);
    });
}

#[test]
fn gso_input_checks() {
    common::in_netns(|| {
        let s = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let to = s.local_addr();
        let inval = |r: std::io::Result<usize>| {
            assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::InvalidInput)
        };
        inval(s.send_gso(&[], 100, to, None));
        inval(s.send_gso(&[0; 100], 0, to, None));
        inval(s.send_gso(&vec![0; GSO_MAX_PAYLOAD + 1], 1400, to, None));
        inval(s.send_gso(&[0; 65 * 10], 10, to, None)); // 65 segments
        inval(s.send_gso_batch(&[(&[1; 10], 10, to), (&[], 10, to)]));
        // 64 segments and the maximum payload are fine.
        assert_eq!(s.send_gso(&[0; 64 * 10], 10, to, None).unwrap(), 64);
        assert_eq!(
            s.send_gso(&vec![0; GSO_MAX_PAYLOAD], 1100, to, None)
                .unwrap(),
            60
        );
        // recv_gro wants room for a full 64 KiB message.
        let mut bufs = vec![PacketBuf::new(2048, 0)];
        let mut meta = vec![UdpGroMeta::default()];
        let e = s.recv_gro(&mut bufs, &mut meta, 0).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    });
}

/// Runs of separate datagrams are gathered into GSO sends (more than one per run when a run exceeds the 64 KiB
/// or 64-datagram limit) and arrive whole and in order, also when GSO is refused; bad runs are refused whole.
#[test]
fn gathered_runs() {
    use std::io::IoSlice;
    common::in_netns(|| {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let client = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        // 100 datagrams (1380 bytes, the last 700): 47 fit one GSO send, so three sends; then one of 100 bytes.
        let many: Vec<Vec<u8>> = (0..100)
            .map(|i| {
                let mut d = datagram(if i == 99 { FULL } else { i % FULL });
                d[..4].copy_from_slice(&(i as u32).to_be_bytes());
                d
            })
            .collect();
        let small = [9u8; 100];
        let run1: Vec<IoSlice<'_>> = many.iter().map(|d| IoSlice::new(d)).collect();
        let run2 = [IoSlice::new(&small)];
        for gro in [false, true] {
            let server = receiver("127.0.0.1:0".parse().unwrap(), gro);
            let to = server.local_addr();
            let unspec = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
            assert_eq!(
                client
                    .send_gathered_from(&[(&run1, to, lo), (&run2, to, unspec)])
                    .unwrap(),
                101
            );
            let got: Vec<Vec<u8>> = if gro {
                let (got, msgs) = recv_coalesced(&server, 101, 0);
                assert!(msgs.len() < 50, "GRO coalesced nothing: {}", msgs.len());
                got
            } else {
                recv_plain(&server, 101)
                    .into_iter()
                    .map(|(d, _)| d)
                    .collect()
            };
            assert_eq!(got.len(), 101);
            for (i, d) in many.iter().enumerate() {
                assert_eq!(&got[i], d, "datagram {i}");
            }
            assert_eq!(got[100], small);
        }
        assert!(client.gso_enabled());

        // Refused GSO (SO_NO_CHECK): the same runs go out datagram by datagram.
        no_check(&client);
        let server = receiver("127.0.0.1:0".parse().unwrap(), false);
        let to = server.local_addr();
        assert_eq!(client.send_gathered_from(&[(&run1, to, lo)]).unwrap(), 100);
        assert!(!client.gso_enabled());
        let got: Vec<Vec<u8>> = recv_plain(&server, 100)
            .into_iter()
            .map(|(d, _)| d)
            .collect();
        assert_eq!(got, many);

        let inval = |r: std::io::Result<usize>| {
            assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::InvalidInput)
        };
        let (a, b) = ([1u8; 10], [2u8; 20]);
        inval(client.send_gathered_from(&[(&[], to, lo)]));
        inval(client.send_gathered_from(&[(&[IoSlice::new(&[])], to, lo)]));
        // Longer than the first; shorter before the last.
        inval(client.send_gathered_from(&[(&[IoSlice::new(&a), IoSlice::new(&b)], to, lo)]));
        inval(client.send_gathered_from(&[(
            &[IoSlice::new(&b), IoSlice::new(&a), IoSlice::new(&b)],
            to,
            lo,
        )]));
        let big = vec![0u8; GSO_MAX_PAYLOAD + 1];
        inval(client.send_gathered_from(&[(&[IoSlice::new(&big)], to, lo)]));
    });
}

#[test]
fn segments_split() {
    let b: Vec<u8> = (0..10).collect();
    let v: Vec<&[u8]> = segments(&b, 4).collect();
    assert_eq!(v, [&b[..4], &b[4..8], &b[8..]]);
    assert_eq!(segments(&b, 4).len(), 3);
    assert_eq!(segments(&b, 5).collect::<Vec<_>>(), [&b[..5], &b[5..]]);
    assert_eq!(segments(&b, 0).collect::<Vec<_>>(), [&b[..]]);
    assert_eq!(segments(&b, 100).collect::<Vec<_>>(), [&b[..]]);
    assert_eq!(segments(&[], 4).collect::<Vec<_>>(), [&[][..]]);
    let m = UdpGroMeta {
        segment_size: 3,
        ..UdpGroMeta::default()
    };
    assert_eq!(m.segments(&b).count(), 4);
}

/// Datagrams/s for 64 × 1400-byte datagrams per call over veth: sendmmsg vs GSO (2 s each). The receiver in
/// the peer namespace drains with GRO and counts what arrives.
#[test]
#[ignore]
fn bench_sendmmsg_vs_gso_veth() {
    common::in_netns(|| {
        const N: usize = 64;
        const LEN: usize = 1400;
        const DUR: Duration = Duration::from_secs(2);
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicUsize::new(0));
        let (stop2, received2) = (stop.clone(), received.clone());
        let h = veth_peer(move |ready| {
            let s = receiver(SocketAddr::new(IpAddr::V4(VB), 4500), true);
            s.set_buffer_sizes(32 << 20).unwrap();
            s.set_recv_timeout(Duration::from_millis(100)).unwrap();
            ready.send(()).unwrap();
            let mut bufs: Vec<PacketBuf> =
                (0..64).map(|_| PacketBuf::new(GRO_BUF_SIZE, 0)).collect();
            let mut meta = vec![UdpGroMeta::default(); 64];
            while !stop2.load(Ordering::Relaxed) {
                match s.recv_gro(&mut bufs, &mut meta, 0) {
                    Ok(n) => {
                        let d: usize = (0..n).map(|i| meta[i].segments(bufs[i].data()).len()).sum();
                        received2.fetch_add(d, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("recv_gro: {e}"),
                }
            }
        });
        let client = UdpSocket::bind(SocketAddr::new(IpAddr::V4(VA), 0)).unwrap();
        client.set_buffer_sizes(32 << 20).unwrap();
        let to = SocketAddr::new(IpAddr::V4(VB), 4500);
        let pkts: Vec<PacketBuf> = (0..N)
            .map(|i| PacketBuf::from_slice(&[i as u8; LEN], 0, 0))
            .collect();
        let dsts = vec![to; N];
        let big = vec![7u8; N * LEN];
        let half = N / 2 * LEN;
        let items: Vec<(&[u8], u16, SocketAddr)> = vec![
            (&big[..half], LEN as u16, to),
            (&big[half..], LEN as u16, to),
        ];

        let run = |name: &str, f: &mut dyn FnMut() -> usize| {
            std::thread::sleep(Duration::from_millis(300)); // let the receiver drain
            received.store(0, Ordering::Relaxed);
            let t0 = Instant::now();
            let (mut sent, mut calls) = (0usize, 0usize);
            while t0.elapsed() < DUR {
                sent += f();
                calls += 1;
            }
            let secs = t0.elapsed().as_secs_f64();
            std::thread::sleep(Duration::from_millis(300));
            let recv = received.load(Ordering::Relaxed);
            println!(
                "{name:<34} sent {:>10.0} dgrams/s ({:>7.0} calls/s, {:>6.2} Gbit/s payload), received {:>10.0} dgrams/s",
                sent as f64 / secs,
                calls as f64 / secs,
                sent as f64 * LEN as f64 * 8.0 / secs / 1e9,
                recv as f64 / secs,
            );
        };
        run("sendmmsg 64 x 1400", &mut || {
            client.send_batch(&pkts, &dsts).unwrap()
        });
        run("send_gso 2 x (32 x 1400)", &mut || {
            client.send_gso(items[0].0, LEN as u16, to, None).unwrap()
                + client.send_gso(items[1].0, LEN as u16, to, None).unwrap()
        });
        run("send_gso_batch [2 x (32 x 1400)]", &mut || {
            client.send_gso_batch(&items).unwrap()
        });
        assert!(client.gso_enabled());
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    });
}
