//! Heap held by the state machine per established IKE SA + child: many setups between two endpoints in memory,
//! counted by a global allocator that tracks live bytes per endpoint. The goal is 4 KB per IKE SA + child
//! for the whole responder (with its data plane); the endpoint's part must stay well below it.

mod machine_common;

use machine_common::*;
use netveil_crypto::rand::SeededRng;
use netveil_crypto::sig::PrivateKey;
use netveil_ike::cert::Certificate;
use netveil_ike::config::{AuthMethod, AuthRound, Connection, Identity, PubKeyCreds};
use netveil_ike::machine::Endpoint;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The system allocator, counting the bytes allocated and not yet freed per owner: each block carries (in a
/// header before it) which endpoint was running when it was allocated ([`SIDE`]: 0 the initiator, 1 the
/// responder, 2 the test itself), and is counted against that one until it is freed, wherever that happens.
struct Counting;

const OWNERS: usize = 3;
const TEST: usize = 2;
static LIVE: [AtomicIsize; OWNERS] = [const { AtomicIsize::new(0) }; OWNERS];
static SIDE: AtomicUsize = AtomicUsize::new(TEST);

/// The layout actually asked of the system (room for the header before the block) and the block's offset in it.
fn widened(l: Layout) -> (Layout, usize) {
    let off = l.align().max(16);
    // `off` is a power of two and the size cannot overflow for any layout the program can ask for.
    (
        Layout::from_size_align(l.size() + off, off).expect("layout"),
        off,
    )
}

// SAFETY: every block is the system allocator's block with a header of `off` bytes in front; the owner is the
// byte just before the block handed out, written at allocation and read back (unchanged) at free/realloc.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let (w, off) = widened(l);
        let base = unsafe { System.alloc(w) };
        if base.is_null() {
            return base;
        }
        let side = SIDE.load(Relaxed);
        LIVE[side].fetch_add(l.size() as isize, Relaxed);
        unsafe {
            *base.add(off - 1) = side as u8;
            base.add(off)
        }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        let (w, off) = widened(l);
        let side = unsafe { *p.sub(1) } as usize;
        LIVE[side].fetch_sub(l.size() as isize, Relaxed);
        unsafe { System.dealloc(p.sub(off), w) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let (w, off) = widened(l);
        let side = unsafe { *p.sub(1) } as usize;
        let base = unsafe { System.realloc(p.sub(off), w, new + off) };
        if base.is_null() {
            return base;
        }
        LIVE[side].fetch_add(new as isize - l.size() as isize, Relaxed);
        unsafe { base.add(off) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Runs `f` with the allocations it makes counted against endpoint `side`.
fn as_side<T>(side: usize, f: impl FnOnce() -> T) -> T {
    SIDE.store(side, Relaxed);
    let r = f();
    SIDE.store(TEST, Relaxed);
    r
}

fn live() -> [isize; OWNERS] {
    [0, 1, 2].map(|i| LIVE[i].load(Relaxed))
}

/// Hands every queued datagram to the other endpoint until none is left; drops the events.
fn settle(ep: &mut [Endpoint; 2]) {
    let mut moved = true;
    while moved {
        moved = false;
        for i in 0..2 {
            while let Some(t) = as_side(i, || ep[i].poll_transmit()) {
                moved = true;
                as_side(1 - i, || {
                    ep[1 - i].handle_datagram(Instant::now(), t.remote, t.local, &t.bytes)
                });
            }
            while as_side(i, || ep[i].poll_event()).is_some() {}
        }
    }
}

/// `auth = pubkey` on both sides as `netveil bench --ike`'s ecdsa-p256 suite has it: an ECDSA P-256 certificate
/// (testdata/certs/moon, both ends: one CA level, FQDN id in its subjectAltName) sent with the AUTH, the CA to
/// check the peer's.
fn ecdsa(c: &mut Connection) {
    let td = |n: &str| {
        let p = format!("{}/testdata/certs/{n}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    };
    let id = Identity::Fqdn("moon.netveil.test".into());
    let creds = |certs, cacerts, key| {
        AuthMethod::PubKey(PubKeyCreds {
            certs,
            cacerts,
            key,
        })
    };
    c.local = AuthRound {
        id: id.clone(),
        method: creds(
            vec![Certificate::from_der(&td("moon.der")).unwrap()],
            vec![],
            Some(Arc::new(
                PrivateKey::from_pem_or_der(&td("moon.key")).unwrap(),
            )),
        ),
    };
    c.remote = AuthRound {
        id,
        method: creds(
            vec![],
            vec![Certificate::from_der(&td("ca.der")).unwrap()],
            None,
        ),
    };
    c.psk = None;
}

/// What `n` more setups with proposal `ike` cost: live heap bytes per IKE SA + child held by the initiator and
/// by the responder, then microseconds per setup (IKE_SA_INIT and IKE_AUTH, both ends in this thread) and per
/// teardown (an INFORMATIONAL exchange with the DELETE of the IKE SA: two sealed and two opened messages).
/// With `certs`, both sides authenticate with [`ecdsa`] certificates instead of the PSK.
fn cost_per_sa(ike: &str, certs: bool, n: usize) -> ([f64; 2], [f64; 2]) {
    let (mut a, mut b) = pair(&[ike], &["aes128gcm16"]);
    if certs {
        ecdsa(&mut a);
        ecdsa(&mut b);
    }
    let now = Instant::now();
    // Certificates are checked at 2027-06-01 (testdata/certs: valid 2026 to 2036).
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_811_808_000);
    let mut ep = [
        as_side(0, || {
            Endpoint::new(vec![a], Box::new(SeededRng::new(1)), now).with_wall_clock(now, wall)
        }),
        as_side(1, || {
            Endpoint::new(vec![b], Box::new(SeededRng::new(2)), now).with_wall_clock(now, wall)
        }),
    ];
    // The first one grows the maps and queues once.
    as_side(0, || ep[0].initiate("ab", None, now)).unwrap();
    settle(&mut ep);
    let before = live();
    let t = Instant::now();
    for _ in 0..n {
        as_side(0, || ep[0].initiate("ab", None, Instant::now())).unwrap();
        settle(&mut ep);
    }
    assert_eq!(ep[0].ike_sa_count(), n + 1);
    assert_eq!(ep[1].ike_sa_count(), n + 1);
    let setup = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let after = live();
    let bytes = [0, 1].map(|i| (after[i] - before[i]) as f64 / n as f64);
    let ids: Vec<_> = ep[0].status(now).iter().map(|s| s.id).collect();
    let t = Instant::now();
    for id in ids {
        as_side(0, || ep[0].terminate(id, Instant::now())).unwrap();
        settle(&mut ep);
    }
    let teardown = t.elapsed().as_secs_f64() * 1e6 / (n + 1) as f64;
    assert_eq!(ep[1].ike_sa_count(), 0, "every DELETE went through");
    (bytes, [setup, teardown])
}

#[test]
fn heap_per_ike_sa_and_child() {
    let mut out = Vec::new();
    // The budget is 4 KB per IKE SA + child for the whole responder daemon; the state machine's part is
    // held to 1200 bytes per side. Measured (responder, initiator): 1055 and 774 B with AES-GCM, 1121 and 830 B
    // with AES-CBC/HMAC-SHA256 and with MODP-2048 (before the SK contexts went per message and the handshake
    // state went after IKE_AUTH: 2807/2523 and 4586/4299). The rest is mostly the SA itself (470 B), its keys,
    // the cached IKE_AUTH response (RFC 7296 2.1), the child, and the endpoint's maps. With ECDSA certificates
    // (as `netveil bench --ike`'s ecdsa-p256): responder 983, initiator 710 (881 with AES-GCM and a PSK, since the
    // index of IKE_SA_INIT requests went to 16-byte slots: 935 before); 1513 on the responder while it
    // kept its IKE_AUTH response with its certificate in it (now kept without, and sealed again when resent):
    // the responder must hold nothing certificate-sized, at most 100 bytes more than with a PSK.
    for (ike, certs) in [
        ("aes128gcm16-prfsha256-x25519", false),
        ("aes128-sha256-x25519", false),
        ("aes128-sha256-modp2048", false),
        ("aes128-sha256-ecp256", true),
    ] {
        let ([i, r], [setup, teardown]) = cost_per_sa(ike, certs, 150);
        let ike = if certs {
            format!("{ike} ecdsa-p256")
        } else {
            ike.to_string()
        };
        println!(
            "{ike}: heap bytes per IKE SA + child: responder {r:.0}, initiator {i:.0}, both {:.0}; \
             {setup:.0} us per setup, {teardown:.0} us per DELETE exchange",
            i + r
        );
        out.push((ike, i, r));
    }
    let responder = |name: &str| out.iter().find(|o| o.0.starts_with(name)).map(|o| o.2);
    let (psk, ecdsa) = (
        responder("aes128-sha256-x25519"),
        responder("aes128-sha256-ecp256"),
    );
    let (psk, ecdsa) = (psk.expect("psk row"), ecdsa.expect("ecdsa row"));
    assert!(
        ecdsa <= psk + 100.0,
        "ecdsa-p256: responder {ecdsa:.0} bytes per IKE SA + child, with a PSK {psk:.0}"
    );
    for (ike, i, r) in out {
        assert!(
            r > 0.0 && r <= 1200.0,
            "{ike}: responder {r:.0} bytes per IKE SA + child"
        );
        assert!(
            i > 0.0 && i <= 1200.0,
            "{ike}: initiator {i:.0} bytes per IKE SA + child"
        );
    }
}
