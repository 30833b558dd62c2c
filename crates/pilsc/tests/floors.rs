//! A receiver's replay protection across its restarts and crashes ([`Floors`]), against a model: random sequences
//! of packets sealed by a sender, deliveries of any packet sealed so far (in order, reordered, replayed), the
//! receiver's store raising ceilings ahead, clean restarts (the store keeps each source's highest counter) and
//! crashes (the store keeps only what was reserved). No counter is ever accepted twice, and after a clean restart
//! the next new packet is accepted at once.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;

use netveil_pilsc::cipher::Cipher;
use netveil_pilsc::packet::{Floors, Mode, OpenError, Opener, Sealer};
use netveil_wire::checksum;
use proptest::prelude::*;

const HEAD: usize = 64;
const KEY: [u8; 16] = [7; 16];
const BLOCK: u64 = 4;

/// A UDP packet from 10.0.0.1 to 10.0.0.2 with valid checksums.
fn udp(data: &[u8]) -> Vec<u8> {
    let (src, dst) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let mut t = vec![0x13, 0x88, 0x00, 0x35, 0, 0, 0, 0];
    t.extend_from_slice(data);
    let l = t.len() as u16;
    t[4..6].copy_from_slice(&l.to_be_bytes());
    let ph = checksum::pseudo_header(&src, &dst, 17, t.len() as u32);
    let c = checksum::finish(checksum::sum(ph, &t));
    t[6..8].copy_from_slice(&c.to_be_bytes());
    let mut h = vec![0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&((20 + t.len()) as u16).to_be_bytes());
    h[8] = 64;
    h[9] = 17;
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
    let c = checksum::checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(&t);
    h
}

/// The receiver's durable store: one number per source, at least every counter accepted.
#[derive(Default)]
struct Store {
    stored: HashMap<Ipv4Addr, u64>,
}

impl Floors for Store {
    fn load(&mut self, src: Ipv4Addr) -> Option<u64> {
        Some(self.stored.get(&src).copied().unwrap_or(0))
    }
    fn reserve(&mut self, src: Ipv4Addr, counter: u64) -> Option<u64> {
        let c = counter + BLOCK;
        self.stored.insert(src, c);
        Some(c)
    }
}

#[derive(Debug, Clone)]
enum Op {
    Seal(u8),
    Deliver(usize),
    TopUp,
    Restart,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u8..6).prop_map(Op::Seal),
        8 => any::<usize>().prop_map(Op::Deliver),
        1 => Just(Op::TopUp),
        1 => Just(Op::Restart),
        1 => Just(Op::Crash),
    ]
}

fn opener(mode: Mode) -> Opener {
    Opener::new(Cipher::Aes128, mode, &KEY, 64, 16).unwrap()
}

fn run(mode: Mode, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut s = Sealer::new(Cipher::Aes128, mode, &KEY, 1, u64::MAX).unwrap();
    let mut o = opener(mode);
    let mut store = Store::default();
    let mut sealed: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut accepted: HashSet<u64> = HashSet::new();
    for op in ops {
        match op {
            Op::Seal(n) => {
                for _ in 0..*n {
                    let c = s.next_counter();
                    let pkt = udp(&c.to_be_bytes());
                    let mut b = vec![0; HEAD];
                    b.extend_from_slice(&pkt);
                    let (st, l) = s.seal(&mut b, HEAD, pkt.len()).unwrap();
                    sealed.push((c, b[st..st + l].to_vec()));
                }
            }
            Op::Deliver(i) if !sealed.is_empty() => {
                let (c, pkt) = &sealed[i % sealed.len()];
                let mut b = vec![0; HEAD];
                b.extend_from_slice(pkt);
                match o.open_with(&mut b, HEAD, pkt.len(), &mut store) {
                    Ok(_) => {
                        prop_assert!(accepted.insert(*c), "counter {c} accepted twice");
                    }
                    // Seen, or refused after a crash (the price of a crash: up to a block of new counters).
                    Err(OpenError::Replay) => {}
                    Err(e) => prop_assert!(false, "{e:?}"),
                }
            }
            Op::Deliver(_) => {}
            Op::TopUp => {
                let due: Vec<_> = o
                    .sources()
                    .filter(|(_, top, c)| top + BLOCK / 2 > *c)
                    .collect();
                for (src, top, _) in due {
                    let c = top + BLOCK;
                    store.stored.insert(src, c);
                    o.set_ceiling(src, c);
                }
            }
            Op::Restart => {
                for (src, top, _) in o.sources() {
                    store.stored.insert(src, top);
                }
                o = opener(mode);
                // The next new packet is accepted at once if it is above what the store holds (always after
                // a clean restart that followed no crash; after a crash, counters up to the last reservation are
                // the price).
                let c = s.next_counter();
                let pkt = udp(&c.to_be_bytes());
                let mut b = vec![0; HEAD];
                b.extend_from_slice(&pkt);
                let (st, l) = s.seal(&mut b, HEAD, pkt.len()).unwrap();
                let fresh = b[st..st + l].to_vec();
                let mut b = vec![0; HEAD];
                b.extend_from_slice(&fresh);
                let held = store.stored.values().copied().max().unwrap_or(0);
                match o.open_with(&mut b, HEAD, fresh.len(), &mut store) {
                    Ok(_) => prop_assert!(accepted.insert(c)),
                    Err(e) => prop_assert!(
                        c <= held,
                        "new counter {c} above the store's {held} refused: {e:?}"
                    ),
                }
                sealed.push((c, fresh));
            }
            Op::Crash => o = opener(mode),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn no_counter_is_accepted_twice_across_restarts_and_crashes(
        ops in proptest::collection::vec(op(), 1..80),
        authenticated in any::<bool>(),
    ) {
        let mode = if authenticated { Mode::Authenticated } else { Mode::Confidential };
        run(mode, &ops)?;
    }
}

/// Without a store (every restart forgets), the model above finds the replay: the property test can fail.
#[test]
fn without_floors_a_restart_accepts_a_replay() {
    let mut s = Sealer::new(Cipher::Aes128, Mode::Authenticated, &KEY, 1, u64::MAX).unwrap();
    let pkt = udp(b"x");
    let mut b = vec![0; HEAD];
    b.extend_from_slice(&pkt);
    let (st, l) = s.seal(&mut b, HEAD, pkt.len()).unwrap();
    let sealed = b[st..st + l].to_vec();
    let open = |o: &mut Opener, store: &mut dyn Floors| {
        let mut b = vec![0; HEAD];
        b.extend_from_slice(&sealed);
        o.open_with(&mut b, HEAD, sealed.len(), store)
    };
    let mut o = opener(Mode::Authenticated);
    assert!(open(&mut o, &mut netveil_pilsc::packet::NoFloors).is_ok());
    let mut o = opener(Mode::Authenticated);
    assert!(
        open(&mut o, &mut netveil_pilsc::packet::NoFloors).is_ok(),
        "forgotten"
    );
    let mut store = Store::default();
    let mut o = opener(Mode::Authenticated);
    assert!(open(&mut o, &mut store).is_ok());
    let mut o = opener(Mode::Authenticated);
    assert_eq!(
        open(&mut o, &mut store),
        Err(OpenError::Replay),
        "crash: refused"
    );
}
