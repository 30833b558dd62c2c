//! What a peer with keys can make an endpoint hold in partial fragment sets (RFC 7383): on every IKE SA it has, 63
//! of a message's 64 fragments (about 64 KiB of plaintext), the last never sent. Measured with a global allocator
//! that counts the live heap of the attacked endpoint, without the reassembly budget and with it: without, it
//! grows by about 64 KiB per SA (64 MiB for 1,024 SAs); with it, never above the budget, the oldest sets dropped
//! and counted, and a fragmented exchange of the same peer still completes while the budget is full.
//!
//! `NETVEIL_FRAGMENT_SAS` sets how many SAs (default 96; the figures in README.md are for 1,024).

mod machine_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::time::Instant;

use machine_common::*;
use netveil_crypto::rand::SeededRng;
use netveil_ike::event::Event;
use netveil_ike::keys::IkeSuite;
use netveil_ike::machine::{Endpoint, Limits, REASSEMBLY_BUDGET};
use netveil_ike::message::payload_type;
use netveil_ike::proposal::{Proposal, Protocol};
use netveil_ike::sk::{Encrypted, SkKey, IKE_HEADER_LEN};

/// The system allocator, counting the live bytes each owner allocated (0: the attacker, 1: the attacked endpoint,
/// 2: anything else), in a header before each block. The owner is per thread: tests running beside this one count
/// as 2.
struct Counting;

const OTHER: u8 = 2;
static LIVE: [AtomicIsize; 3] = [const { AtomicIsize::new(0) }; 3];
thread_local! {
    static SIDE: Cell<u8> = const { Cell::new(OTHER) };
}

fn widened(l: Layout) -> (Layout, usize) {
    let off = l.align().max(16);
    (
        Layout::from_size_align(l.size() + off, off).expect("layout"),
        off,
    )
}

fn side() -> u8 {
    SIDE.try_with(Cell::get).unwrap_or(OTHER)
}

// SAFETY: every block is the system allocator's block with a header of `off` bytes in front; the owner is the byte
// just before the block handed out, written at allocation and read back (unchanged) at free and realloc.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let (w, off) = widened(l);
        let base = unsafe { System.alloc(w) };
        if base.is_null() {
            return base;
        }
        let s = side();
        LIVE[usize::from(s)].fetch_add(l.size() as isize, Relaxed);
        unsafe {
            *base.add(off - 1) = s;
            base.add(off)
        }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        let (w, off) = widened(l);
        let s = unsafe { *p.sub(1) };
        LIVE[usize::from(s)].fetch_sub(l.size() as isize, Relaxed);
        unsafe { System.dealloc(p.sub(off), w) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let (w, off) = widened(l);
        let s = unsafe { *p.sub(1) };
        let base = unsafe { System.realloc(p.sub(off), w, new + off) };
        if base.is_null() {
            return base;
        }
        LIVE[usize::from(s)].fetch_add(new as isize - l.size() as isize, Relaxed);
        unsafe { base.add(off) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn as_side<T>(s: u8, f: impl FnOnce() -> T) -> T {
    SIDE.with(|c| c.set(s));
    let r = f();
    SIDE.with(|c| c.set(OTHER));
    r
}

const ATTACKER: u8 = 0;
const VICTIM: u8 = 1;
const IKE: &str = "aes128gcm16-prfsha256-x25519";
/// Fragments per message, all but the last sent, and plaintext bytes per fragment: 64 x 1,020 = 65,280 bytes,
/// within the 64 KiB an SA may reassemble.
const TOTAL: u16 = 64;
const CHUNK: usize = 1020;

/// Datagrams each way until none is left; the events are kept.
fn settle(ep: &mut [Endpoint; 2], now: Instant, events: &mut [Vec<Event>; 2]) {
    let mut moved = true;
    while moved {
        moved = false;
        for i in 0..2 {
            let s = i as u8;
            while let Some(t) = as_side(s, || ep[i].poll_transmit()) {
                moved = true;
                as_side(1 - s, || {
                    ep[1 - i].handle_datagram(now, t.remote, t.local, &t.bytes)
                });
            }
            while let Some(e) = as_side(s, || ep[i].poll_event()) {
                events[i].push(e);
            }
        }
    }
}

/// The attacker's keys for each IKE SA (it initiated them all): (SPIi, SPIr, SK_ei), from `netveil keys
/// --wireshark`'s lines.
fn initiator_keys(ep: &Endpoint) -> Vec<(u64, u64, Vec<u8>)> {
    ep.wireshark_keys()
        .iter()
        .map(|(_, k)| {
            let f: Vec<&str> = k.line().split(',').collect();
            let spi = |s: &str| u64::from_str_radix(s, 16).unwrap();
            (spi(f[0]), spi(f[1]), hex::decode(f[2]).unwrap())
        })
        .collect()
}

/// Fragment `number` of `TOTAL` of an INFORMATIONAL request (message id 2) of the IKE SA (spi_i, spi_r), sealed
/// with the initiator's key: one Notify payload's worth of plaintext, cut in `CHUNK`s.
fn fragment(key: &mut SkKey, spi_i: u64, spi_r: u64, number: u16) -> Vec<u8> {
    let mut msg = Vec::with_capacity(IKE_HEADER_LEN + 8 + CHUNK + 64);
    msg.extend_from_slice(&spi_i.to_be_bytes());
    msg.extend_from_slice(&spi_r.to_be_bytes());
    // Next payload SKF, version 2.0, INFORMATIONAL, flags Initiator, message id 2, length (set by seal).
    msg.extend_from_slice(&[payload_type::SKF, 0x20, 37, 0x08, 0, 0, 0, 2, 0, 0, 0, 0]);
    let next = if number == 1 { payload_type::NOTIFY } else { 0 };
    msg.extend_from_slice(&[next, 0, 0, 0]);
    msg.extend_from_slice(&number.to_be_bytes());
    msg.extend_from_slice(&TOTAL.to_be_bytes());
    msg.resize(msg.len() + CHUNK, number as u8);
    key.seal(
        &mut SeededRng::new(u64::from(number)),
        &mut msg,
        IKE_HEADER_LEN,
        Encrypted::Skf,
    )
    .unwrap();
    msg
}

struct Attack {
    /// The victim's live heap before and after the fragments, bytes.
    heap: (isize, isize),
    /// What the victim says it holds: bytes, sets.
    held: (usize, usize),
    evicted: u64,
}

/// `n` IKE SAs from the attacker to the victim (whose reassembly budget is `budget`), then 63 of 64 fragments
/// on each; then a CREATE_CHILD_SA in fragments on the last SA, which must complete.
fn attack(n: usize, budget: usize) -> Attack {
    let (mut a, mut b) = pair(&[IKE], &["aes128gcm16"]);
    a.fragmentation = true;
    b.fragmentation = true;
    let now = Instant::now();
    // Small fragments: the attacker's CREATE_CHILD_SA at the end goes in several.
    let limits = Limits {
        fragment_len: 160,
        ..Limits::default()
    };
    let mut ep = [
        as_side(ATTACKER, || {
            Endpoint::new(vec![a], Box::new(SeededRng::new(1)), now).with_limits(limits)
        }),
        as_side(VICTIM, || {
            Endpoint::new(vec![b], Box::new(SeededRng::new(2)), now)
                .with_limits(limits)
                .with_reassembly_budget(budget)
        }),
    ];
    let mut events = [Vec::new(), Vec::new()];
    for _ in 0..n {
        as_side(ATTACKER, || ep[0].initiate("ab", None, now)).unwrap();
        settle(&mut ep, now, &mut events);
    }
    assert_eq!(
        (ep[0].ike_sa_count(), ep[1].ike_sa_count()),
        (n, n),
        "every IKE SA is up on both sides"
    );
    let suite = IkeSuite::from_proposal(&Proposal::parse(Protocol::Ike, IKE).unwrap()).unwrap();
    let keys = initiator_keys(&ep[0]);
    assert_eq!(keys.len(), n);
    let before = LIVE[usize::from(VICTIM)].load(Relaxed);
    for (spi_i, spi_r, sk_ei) in &keys {
        let mut key = SkKey::new(suite, sk_ei, &[]).unwrap();
        for number in 1..TOTAL {
            let f = fragment(&mut key, *spi_i, *spi_r, number);
            let (l, r) = (addr("10.0.0.2", 500), addr("10.0.0.1", 500));
            as_side(VICTIM, || ep[1].handle_datagram(now, l, r, &f));
            let (held, _) = ep[1].reassembly_held();
            assert!(held <= budget, "{held} bytes held, budget {budget}");
        }
    }
    let after = LIVE[usize::from(VICTIM)].load(Relaxed);
    let out = Attack {
        heap: (before, after),
        held: ep[1].reassembly_held(),
        evicted: ep[1].counters().reassemblies_evicted,
    };
    // The same peer's real CREATE_CHILD_SA, in fragments on one of its SAs, completes.
    let id = ep[0].status(now).last().unwrap().id;
    as_side(ATTACKER, || ep[0].create_child(id, "net", now)).unwrap();
    let up_before = events[1].len();
    settle(&mut ep, now, &mut events);
    assert!(
        events[1][up_before..]
            .iter()
            .any(|e| matches!(e, Event::ChildSaUp(_))),
        "a fragmented CREATE_CHILD_SA completes beside the partial sets: {:?}",
        &events[1][up_before..]
    );
    out
}

#[test]
fn partial_fragment_sets_of_many_sas_stay_within_the_budget() {
    let n: usize = std::env::var("NETVEIL_FRAGMENT_SAS")
        .ok()
        .map_or(96, |v| v.parse().expect("NETVEIL_FRAGMENT_SAS: a number"));
    let per_set = usize::from(TOTAL - 1) * CHUNK;
    assert!(
        n * per_set > REASSEMBLY_BUDGET,
        "{n} SAs must be able to hold more than the budget"
    );
    // Without a budget (as before): every SA holds its set.
    let open = attack(n, usize::MAX);
    let grown = open.heap.1 - open.heap.0;
    eprintln!(
        "no budget, {n} SAs: heap +{grown} bytes ({} per SA), {} bytes in {} sets held",
        grown / n as isize,
        open.held.0,
        open.held.1
    );
    assert_eq!(open.held.1, n, "a set per SA");
    assert!(open.held.0 >= n * per_set);
    assert!(grown >= (n * per_set) as isize);
    assert_eq!(open.evicted, 0);

    // The default budget.
    let capped = attack(n, REASSEMBLY_BUDGET);
    let grown = capped.heap.1 - capped.heap.0;
    eprintln!(
        "budget {REASSEMBLY_BUDGET}, {n} SAs: heap +{grown} bytes, {} bytes in {} sets held, {} sets evicted",
        capped.held.0, capped.held.1, capped.evicted
    );
    assert!(capped.held.0 <= REASSEMBLY_BUDGET);
    assert!(
        capped.held.0 + per_set > REASSEMBLY_BUDGET,
        "the budget is used, not wasted"
    );
    // The heap follows the count: nothing held that the budget does not see (1% for what the count leaves out).
    assert!(
        grown <= (REASSEMBLY_BUDGET + REASSEMBLY_BUDGET / 100) as isize,
        "heap +{grown} bytes over a budget of {REASSEMBLY_BUDGET}"
    );
    assert_eq!(
        capped.evicted as usize,
        n - capped.held.1,
        "each set that went was counted"
    );

    // A small budget: two sets at most.
    let small = 2 * (per_set + 2048);
    let tight = attack(n, small);
    assert!(tight.held.0 <= small && tight.held.1 <= 2);
    assert!(tight.heap.1 - tight.heap.0 <= (small + small / 100) as isize);
}

#[test]
fn a_set_goes_with_its_sa_and_gives_its_bytes_back() {
    // Fragments were counted on SAs that then go: the count comes back to zero (no hook needed in each way an SA
    // is removed).
    let (mut a, mut b) = pair(&[IKE], &["aes128gcm16"]);
    a.fragmentation = true;
    b.fragmentation = true;
    let now = Instant::now();
    let mut ep = [
        Endpoint::new(vec![a], Box::new(SeededRng::new(1)), now),
        Endpoint::new(vec![b], Box::new(SeededRng::new(2)), now),
    ];
    let mut events = [Vec::new(), Vec::new()];
    for _ in 0..3 {
        ep[0].initiate("ab", None, now).unwrap();
        settle(&mut ep, now, &mut events);
    }
    let suite = IkeSuite::from_proposal(&Proposal::parse(Protocol::Ike, IKE).unwrap()).unwrap();
    for (spi_i, spi_r, sk_ei) in initiator_keys(&ep[0]) {
        let mut key = SkKey::new(suite, &sk_ei, &[]).unwrap();
        for number in 1..4 {
            let f = fragment(&mut key, spi_i, spi_r, number);
            ep[1].handle_datagram(now, addr("10.0.0.2", 500), addr("10.0.0.1", 500), &f);
        }
    }
    let (held, sets) = ep[1].reassembly_held();
    assert_eq!(sets, 3);
    assert!(held >= 3 * 3 * CHUNK);
    // The SAs go (the attacker deletes them).
    for s in ep[0].status(now) {
        ep[0].terminate(s.id, now).unwrap();
    }
    settle(&mut ep, now, &mut events);
    assert_eq!(ep[1].ike_sa_count(), 0);
    assert_eq!(ep[1].reassembly_held(), (0, 0));
}
