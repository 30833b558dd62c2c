//! TAP offloads against the kernel: two namespaces, each with an offload TAP (MTU 1400), joined by a forwarder in
//! this process that reads super-frames from one TAP (split into MTU-sized frames) and writes them to the other
//! (coalesced again). A byte-checked TCP transfer must come through intact, which needs every split and every
//! coalesced super-frame to have correct lengths and checksums (the kernel checks them). Needs root.

use netveil_io::packet::{MAX_SEGMENTS, TAP_SCRATCH_LEN};
use netveil_io::Tap;
use netveil_lab::lab::{self, Lab};
use netveil_wire::PacketBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

#[derive(Default)]
struct Counts {
    reads: AtomicU64,
    frames: AtomicU64,
    writes: AtomicU64,
}

fn forward(from: &Tap, to: &Tap, stop: &AtomicBool, c: &Counts) {
    let mut scratch = vec![0u8; TAP_SCRATCH_LEN];
    let mut bufs: Vec<PacketBuf> = (0..2 * MAX_SEGMENTS)
        .map(|_| PacketBuf::new(65536 + 512, 64))
        .collect();
    while !stop.load(Relaxed) {
        let mut n = match from.recv_batch(&mut scratch, &mut bufs, 64, true) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => panic!("TAP read: {e}"),
        };
        c.reads.fetch_add(1, Relaxed);
        while bufs.len() - n >= MAX_SEGMENTS {
            match from.recv_batch(&mut scratch, &mut bufs[n..], 64, false) {
                Ok(k) => {
                    c.reads.fetch_add(1, Relaxed);
                    n += k
                }
                Err(_) => break,
            }
        }
        c.frames.fetch_add(n as u64, Relaxed);
        for b in &bufs[..n] {
            assert!(
                b.len() <= 14 + 1400,
                "a split frame exceeds the MTU: {}",
                b.len()
            );
        }
        let w = to.send_batch(&mut bufs[..n]).expect("TAP write");
        c.writes.fetch_add(w as u64, Relaxed);
    }
}

#[test]
fn super_frames_are_split_and_coalesced_correctly() {
    assert!(lab::is_root(), "needs root");
    let mut lab = Lab::new("nvt").unwrap();
    let a = lab.add_ns("a").unwrap();
    let b = lab.add_ns("b").unwrap();
    let open = |ns: &str, name: &'static str, mac: [u8; 6]| {
        lab::spawn_in_ns(ns, move || Tap::open_offload(name, 1400, Some(mac), true))
            .unwrap()
            .join()
            .unwrap()
            .unwrap()
            .unwrap()
    };
    let ta = Arc::new(open(&a, "tapa", [2, 0, 0x5e, 0, 0x53, 1]));
    let tb = Arc::new(open(&b, "tapb", [2, 0, 0x5e, 0, 0x53, 2]));
    assert!(ta.offload() && tb.offload());
    for t in [&ta, &tb] {
        t.set_recv_timeout(Duration::from_millis(100)).unwrap();
    }
    lab.exec_ok(&a, &["ip", "addr", "add", "192.0.2.1/24", "dev", "tapa"])
        .unwrap();
    lab.exec_ok(&b, &["ip", "addr", "add", "192.0.2.2/24", "dev", "tapb"])
        .unwrap();
    for (ns, dev) in [(&a, "tapa"), (&b, "tapb")] {
        lab.exec_ok(ns, &["ip", "link", "set", dev, "up"]).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (ab, ba) = (Arc::new(Counts::default()), Arc::new(Counts::default()));
    let threads: Vec<_> = [
        (ta.clone(), tb.clone(), ab.clone()),
        (tb.clone(), ta.clone(), ba.clone()),
    ]
    .into_iter()
    .map(|(f, t, c)| {
        let stop = stop.clone();
        std::thread::spawn(move || forward(&f, &t, &stop, &c))
    })
    .collect();
    let out = lab
        .exec_ok(&a, &["ping", "-n", "-c", "2", "-i", "0.2", "192.0.2.2"])
        .unwrap();
    assert!(out.contains(" 0% packet loss"), "{out}");
    let t = lab::tcp_transfer(&a, &b, "192.0.2.2".parse().unwrap(), 5003, 256 << 20).unwrap();
    println!(
        "TCP through two offload TAPs and a forwarder: {:.0} Mbit/s",
        t.mbit_per_s()
    );
    stop.store(true, Relaxed);
    for th in threads {
        th.join().unwrap();
    }
    let (r, f, w) = (
        ab.reads.load(Relaxed),
        ab.frames.load(Relaxed),
        ab.writes.load(Relaxed),
    );
    println!("a -> b: {r} reads gave {f} frames, written as {w} (super-)frames");
    assert!(f > 150_000, "256 MiB in 1400-byte frames: {f}");
    assert!(
        f > 4 * r,
        "the host did not hand over super-frames: {r} reads, {f} frames"
    );
    assert!(
        f > 4 * w,
        "segments were not coalesced: {f} frames, {w} writes"
    );
}
