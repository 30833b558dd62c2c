//! What partial fragment sets (RFC 7383 reassembly) may hold, all IKE SAs of an endpoint together.
//!
//! Each IKE SA reassembles one message at a time, of at most [`MAX_FRAGMENTS`] fragments and
//! [`MAX_REASSEMBLED`] bytes of plaintext. A peer with keys (IKE_SA_INIT done: no authentication
//! needed yet where IKE_INTERMEDIATE or IKE_AUTH goes in fragments) can leave one set short of its last fragment
//! on every SA it has and make the endpoint hold about 64 KiB per SA for as long as the SA lives: 64 MiB for 1,024
//! SAs, 4 GiB at the default [`super::Limits::ike_sa_max`]. So the sets of all SAs share one budget
//! ([`super::Endpoint::with_reassembly_budget`], [`REASSEMBLY_BUDGET`] by default), counted as each fragment's
//! plaintext plus each set's bookkeeping ([`set_overhead`]).
//!
//! A fragment that would go over the budget (checked after it authenticated: a forged one evicts nothing) makes
//! room by dropping whole sets, the oldest first (by when their first fragment came), as the kernel's IP
//! reassembly evicts its oldest queues: a set that a peer leaves incomplete ages and goes, a message whose
//! fragments come together (a round trip's time) is young and stays. When the oldest set left is the one the
//! fragment belongs to, that set goes instead (with the fragment). A dropped set is counted
//! ([`super::Counters::reassemblies_evicted`]); its sender retransmits the message, or the exchange times out.
//!
//! Each set holds a [`Share`] of the budget, given back when the set is dropped, however it goes (completed,
//! replaced by another message's, evicted, or with its SA): the count is exact without a hook in every path that
//! removes an SA.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::event::IkeSaId;
use crate::message::ExchangeType;

/// The default budget: 4 MiB, room for 64 sets of the largest message at once, or about 800 IKE_AUTH messages of
/// 5 KB (a certificate chain) in fragments at the same instant.
pub const REASSEMBLY_BUDGET: usize = 4 << 20;

/// What a set of `total` fragments holds besides the fragments' plaintext: its record and its slot per fragment.
pub fn set_overhead(total: u16) -> usize {
    core::mem::size_of::<Reassembly>()
        + usize::from(total) * core::mem::size_of::<Option<Vec<u8>>>()
}

#[derive(Default)]
struct Held {
    bytes: usize,
    /// The sets held, by age (the order their first fragment came in): which SA holds each.
    by_age: BTreeMap<u64, IkeSaId>,
    next_age: u64,
    /// Sets dropped to stay within the cap.
    evicted: u64,
}

/// The endpoint's budget for partial fragment sets.
pub struct Budget {
    cap: usize,
    held: Arc<Mutex<Held>>,
}

fn lock(m: &Mutex<Held>) -> MutexGuard<'_, Held> {
    // Nothing panics while holding it; a poisoned count is still the count.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Budget {
    pub fn new(cap: usize) -> Budget {
        Budget {
            cap,
            held: Arc::default(),
        }
    }

    pub fn set_cap(&mut self, cap: usize) {
        self.cap = cap;
    }

    /// Bytes the sets of all SAs hold now.
    pub fn held(&self) -> usize {
        lock(&self.held).bytes
    }

    /// Sets held now.
    pub fn sets(&self) -> usize {
        lock(&self.held).by_age.len()
    }

    /// Sets dropped to stay within the cap so far (other SAs' sets evicted, and sets that went themselves).
    pub fn evicted(&self) -> u64 {
        lock(&self.held).evicted
    }

    /// A new set's share, for SA `sa`: the youngest, holding nothing yet.
    pub fn share(&self, sa: IkeSaId) -> Share {
        let mut h = lock(&self.held);
        let age = h.next_age;
        h.next_age += 1;
        h.by_age.insert(age, sa);
        Share {
            held: self.held.clone(),
            age,
            bytes: 0,
        }
    }

    /// Room for `need` more bytes in `share`'s set: true once they fit under the cap, the oldest other sets dropped
    /// as needed through `evict` (which drops SA `id`'s set, giving its share back; false if it has none). False
    /// when they do not fit unless `share`'s own set goes (it is the oldest left): the caller drops it. Every set
    /// that goes is counted ([`Budget::evicted`]).
    pub fn make_room(
        &self,
        share: &Share,
        need: usize,
        mut evict: impl FnMut(IkeSaId) -> bool,
    ) -> bool {
        loop {
            let (age, victim) = {
                let mut h = lock(&self.held);
                if h.bytes.saturating_add(need) <= self.cap {
                    return true;
                }
                h.evicted += 1;
                match h.by_age.first_key_value() {
                    Some((&age, &id)) if age != share.age => (age, id),
                    _ => return false,
                }
            };
            if !evict(victim) || lock(&self.held).by_age.contains_key(&age) {
                // Not where the budget says it is (cannot happen): stop rather than loop.
                return false;
            }
        }
    }
}

/// One set's part of the budget: what it holds, given back when it is dropped.
pub struct Share {
    held: Arc<Mutex<Held>>,
    age: u64,
    bytes: usize,
}

impl Share {
    /// Counts `n` more bytes (after [`Budget::make_room`] said they fit).
    pub fn add(&mut self, n: usize) {
        self.bytes += n;
        lock(&self.held).bytes += n;
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut h = lock(&self.held);
        h.bytes -= self.bytes;
        h.by_age.remove(&self.age);
    }
}

/// Most fragments of one message we take, and most bytes they may hold together.
pub const MAX_FRAGMENTS: u16 = 64;
pub const MAX_REASSEMBLED: usize = 65_536;

/// The fragments of one message (RFC 7383 2.6), each already authenticated and decrypted.
pub struct Reassembly {
    pub message_id: u32,
    pub response: bool,
    pub exchange: ExchangeType,
    pub first_inner: u8,
    pub parts: Vec<Option<Vec<u8>>>,
    pub bytes: usize,
    /// Its part of the endpoint's budget for all SAs' sets (see the module documentation).
    pub share: Share,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Shares of SAs 1..=4 under a cap of 100: the oldest go first to make room, never the share asking when
    /// others are older... unless it is the oldest left; dropping a share gives its bytes back.
    #[test]
    fn the_oldest_sets_go_first_and_shares_give_back_what_they_hold() {
        let b = Budget::new(100);
        let mut sets: HashMap<IkeSaId, Share> = HashMap::new();
        for i in 1..=4 {
            let mut s = b.share(IkeSaId(i));
            assert!(b.make_room(&s, 20, |_| unreachable!("room enough")));
            s.add(20);
            sets.insert(IkeSaId(i), s);
        }
        assert_eq!((b.held(), b.sets()), (80, 4));
        // SA 3 needs 50 more: SAs 1 and 2 (the oldest) go, 4 stays.
        let mut evicted = Vec::new();
        let s3 = sets.remove(&IkeSaId(3)).unwrap();
        assert!(b.make_room(&s3, 50, |id| {
            evicted.push(id);
            sets.remove(&id).is_some()
        }));
        assert_eq!(evicted, [IkeSaId(1), IkeSaId(2)]);
        assert_eq!((b.held(), b.sets(), b.evicted()), (40, 2, 2));
        let mut s3 = s3;
        s3.add(50);
        // SA 3's set is now the oldest: more than fits means it goes itself, SA 4's stays.
        assert!(!b.make_room(&s3, 20, |_| unreachable!("3 is the oldest")));
        assert_eq!(b.evicted(), 3, "the set that goes itself counts too");
        drop(s3);
        assert_eq!((b.held(), b.sets()), (20, 1));
        drop(sets);
        assert_eq!((b.held(), b.sets()), (0, 0));
        // More than the cap never fits.
        let s = b.share(IkeSaId(9));
        assert!(!b.make_room(&s, 101, |_| false));
    }
}
