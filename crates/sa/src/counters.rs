//! Lock-free counters for SAs and drop reasons.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Traffic counters of one SA (one direction).
#[derive(Debug, Default)]
pub struct SaCounters {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    /// Packets dropped for this SA (any reason).
    pub dropped: AtomicU64,
    pub auth_failed: AtomicU64,
    pub replayed: AtomicU64,
}

impl SaCounters {
    pub fn add(&self, bytes: usize) {
        self.packets.fetch_add(1, Relaxed);
        self.bytes.fetch_add(bytes as u64, Relaxed);
    }
    pub fn snapshot(&self) -> SaCountersSnapshot {
        SaCountersSnapshot {
            packets: self.packets.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
            auth_failed: self.auth_failed.load(Relaxed),
            replayed: self.replayed.load(Relaxed),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SaCountersSnapshot {
    pub packets: u64,
    pub bytes: u64,
    pub dropped: u64,
    pub auth_failed: u64,
    pub replayed: u64,
}

/// Counters indexed by a reason enum `R` that maps itself to `0..R::COUNT`.
pub trait Reason: Copy {
    const COUNT: usize;
    fn index(self) -> usize;
    fn name(index: usize) -> &'static str;
}

/// One atomic counter per drop reason.
pub struct DropCounters<R: Reason> {
    counts: Box<[AtomicU64]>,
    _r: core::marker::PhantomData<R>,
}

impl<R: Reason> Default for DropCounters<R> {
    fn default() -> Self {
        DropCounters {
            counts: (0..R::COUNT).map(|_| AtomicU64::new(0)).collect(),
            _r: core::marker::PhantomData,
        }
    }
}

impl<R: Reason> DropCounters<R> {
    pub fn count(&self, r: R) {
        self.counts[r.index()].fetch_add(1, Relaxed);
    }
    pub fn get(&self, r: R) -> u64 {
        self.counts[r.index()].load(Relaxed)
    }
    /// (name, count) of every reason, in index order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        self.counts
            .iter()
            .enumerate()
            .map(|(i, c)| (R::name(i), c.load(Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Clone, Copy)]
    enum Why {
        Short,
        Auth,
        Replay,
    }

    impl Reason for Why {
        const COUNT: usize = 3;
        fn index(self) -> usize {
            self as usize
        }
        fn name(index: usize) -> &'static str {
            ["short", "auth", "replay"][index]
        }
    }

    #[test]
    fn sa_counters() {
        let c = SaCounters::default();
        assert_eq!(c.snapshot(), SaCountersSnapshot::default());
        c.add(100);
        c.add(50);
        c.dropped.fetch_add(2, Relaxed);
        c.auth_failed.fetch_add(1, Relaxed);
        c.replayed.fetch_add(1, Relaxed);
        assert_eq!(
            c.snapshot(),
            SaCountersSnapshot {
                packets: 2,
                bytes: 150,
                dropped: 2,
                auth_failed: 1,
                replayed: 1
            }
        );
    }

    #[test]
    fn sa_counters_concurrent() {
        let c = Arc::new(SaCounters::default());
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || (0..1000).for_each(|_| c.add(10)))
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        let s = c.snapshot();
        assert_eq!((s.packets, s.bytes), (4000, 40_000));
    }

    #[test]
    fn drop_counters() {
        let d = DropCounters::<Why>::default();
        d.count(Why::Auth);
        d.count(Why::Auth);
        d.count(Why::Replay);
        assert_eq!(d.get(Why::Short), 0);
        assert_eq!(d.get(Why::Auth), 2);
        assert_eq!(d.get(Why::Replay), 1);
        assert_eq!(d.snapshot(), vec![("short", 0), ("auth", 2), ("replay", 1)]);
    }
}
