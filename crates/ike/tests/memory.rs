//! Heap held by the state machine per established IKE SA + child: many setups between two endpoints in memory,
//! counted by a global allocator that tracks live bytes. The goal is 4 KB per IKE SA + child for the
//! whole responder (with its data plane); the endpoint's part must stay well below it.

mod machine_common;

use machine_common::*;
use netveil_crypto::rand::SeededRng;
use netveil_ike::machine::Endpoint;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::time::Instant;

/// The system allocator, counting the bytes allocated and not yet freed.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; only a counter is updated beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Relaxed);
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Hands every queued datagram to the other endpoint until none is left; drops the events.
fn settle(ep: &mut [Endpoint; 2]) {
    let mut moved = true;
    while moved {
        moved = false;
        for i in 0..2 {
            while let Some(t) = ep[i].poll_transmit() {
                moved = true;
                ep[1 - i].handle_datagram(Instant::now(), t.remote, t.local, &t.bytes);
            }
            while ep[i].poll_event().is_some() {}
        }
    }
}

/// Live heap bytes per IKE SA + child held by both endpoints together (initiator and responder; their state is
/// of the same kind) after `n` more setups with proposal `ike`.
fn both_ends_bytes_per_sa(ike: &str, n: usize) -> f64 {
    let (a, b) = pair(&[ike], &["aes128gcm16"]);
    let now = Instant::now();
    let mut ep = [
        Endpoint::new(vec![a], Box::new(SeededRng::new(1)), now),
        Endpoint::new(vec![b], Box::new(SeededRng::new(2)), now),
    ];
    // The first one grows the maps and queues once.
    ep[0].initiate("ab", None, now).unwrap();
    settle(&mut ep);
    let before = LIVE.load(Relaxed);
    for _ in 0..n {
        ep[0].initiate("ab", None, Instant::now()).unwrap();
        settle(&mut ep);
    }
    assert_eq!(ep[0].ike_sa_count(), n + 1);
    assert_eq!(ep[1].ike_sa_count(), n + 1);
    (LIVE.load(Relaxed) - before) as f64 / n as f64
}

#[test]
fn heap_per_ike_sa_and_child() {
    // Measured when written (both ends): 4980 B with AES-GCM, 8535 B with AES-CBC/HMAC-SHA256 (its key contexts),
    // 8535 B with MODP-2048 (its DH key and messages are gone once up). The bounds leave about 10%: the IKE_SA_INIT messages kept for the SA's life (1.2 KB
    // for both ends), a children Vec with room for four (2.5 KB) or the SAs inline in the map's nodes (2.7 KB)
    // each cross them.
    let mut out = Vec::new();
    for (ike, bound) in [
        ("aes128gcm16-prfsha256-x25519", 5500.0),
        ("aes128-sha256-x25519", 9400.0),
        ("aes128-sha256-modp2048", 9500.0),
    ] {
        let b = both_ends_bytes_per_sa(ike, 150);
        println!(
            "{ike}: {b:.0} heap bytes per IKE SA + child for both endpoints (about {:.0} per side)",
            b / 2.0
        );
        out.push((ike, b, bound));
    }
    for (ike, b, bound) in out {
        assert!(
            b > 0.0 && b < bound,
            "{ike}: {b:.0} bytes per IKE SA + child"
        );
    }
}
