//! Outbound sequence numbers: 1, 2, 3, ... up to 2^32-1 (or 2^64-1 with ESN); never wraps.
//!
//! A counter may also be bounded by a *reservation*: the caller (the daemon) keeps a high-water mark on disk and
//! raises the reservation only after the new mark is durable, so a restart or a crash can continue above every
//! number ever handed out ([`SeqCounter::with_reservation`], [`SeqCounter::reserve_to`]). Numbers beyond the
//! reservation are refused ([`SeqError::NotReserved`]) without being consumed.

use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

/// Why no sequence number was handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqError {
    /// Sending must stop: the sequence space is used up and the SA must be rekeyed.
    Exhausted,
    /// The next number is above the reservation (the durable high-water mark has not been raised yet): nothing
    /// was consumed; try again once the reservation moves.
    NotReserved,
}

impl core::fmt::Display for SeqError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            SeqError::Exhausted => "sequence number space exhausted",
            SeqError::NotReserved => "sequence number not reserved yet",
        })
    }
}

impl std::error::Error for SeqError {}

/// A lock-free outbound counter shared by all sending threads of one SA.
///
/// The state is the last number handed out (`first - 1` before the first `next`); `next` advances it with a
/// compare-exchange loop that refuses to go past the limit, so no number is handed out twice and the counter never
/// wraps, whatever the number of concurrent callers.
#[derive(Debug)]
pub struct SeqCounter {
    last: AtomicU64,
    first: u64,
    limit: u64,
    /// The largest number that may be handed out now (`limit` without a reservation).
    reserved: AtomicU64,
}

impl SeqCounter {
    /// A counter whose first `next()` returns `first` (normally 1); `esn` selects a 64- or 32-bit space.
    ///
    /// `first` 0 is treated as 1 (0 is never sent). A `first` above the space's maximum yields a counter that is
    /// exhausted from the start.
    pub fn new(first: u64, esn: bool) -> Self {
        let first = first.max(1);
        let limit = if esn { u64::MAX } else { u64::from(u32::MAX) };
        SeqCounter {
            last: AtomicU64::new(first - 1),
            first,
            limit,
            reserved: AtomicU64::new(limit),
        }
    }

    /// A counter like [`SeqCounter::new`] that hands out numbers only up to `reserved` until
    /// [`SeqCounter::reserve_to`] raises it.
    pub fn with_reservation(first: u64, esn: bool, reserved: u64) -> Self {
        let c = SeqCounter::new(first, esn);
        c.reserved.store(reserved.min(c.limit), Relaxed);
        c
    }

    /// The next sequence number; `Exhausted` once the space is used up (and on every call after), `NotReserved`
    /// (nothing consumed) while the next number is above the reservation.
    pub fn next(&self) -> Result<u64, SeqError> {
        let limit = self.limit;
        let reserved = self.reserved.load(Acquire);
        let mut not_reserved = false;
        self.last
            .fetch_update(Relaxed, Relaxed, |last| {
                if last >= limit {
                    None
                } else if last >= reserved {
                    not_reserved = true;
                    None
                } else {
                    not_reserved = false;
                    Some(last + 1)
                }
            })
            .map(|prev| prev + 1)
            .map_err(|_| {
                if not_reserved {
                    SeqError::NotReserved
                } else {
                    SeqError::Exhausted
                }
            })
    }

    /// Raises the reservation to `upto` (never lowers it; capped at the space's maximum). Call only once `upto` is
    /// durable wherever the next start reads its first number from.
    pub fn reserve_to(&self, upto: u64) {
        self.reserved.fetch_max(upto.min(self.limit), Release);
    }

    /// The largest number that may be handed out now.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Acquire)
    }

    /// The last number handed out (0 if none).
    pub fn last(&self) -> u64 {
        let last = self.last.load(Relaxed);
        if last < self.first {
            0
        } else {
            last
        }
    }

    /// Whether `next` has started failing: true once the last number of the space has been handed out (every
    /// further `next` fails).
    pub fn exhausted(&self) -> bool {
        self.last.load(Relaxed) >= self.limit
    }

    /// The largest number this counter can hand out (2^32-1, or 2^64-1 with ESN).
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_from_first() {
        let c = SeqCounter::new(1, false);
        assert_eq!(c.last(), 0);
        assert!(!c.exhausted());
        assert_eq!(c.next(), Ok(1));
        assert_eq!(c.next(), Ok(2));
        assert_eq!(c.last(), 2);

        let c = SeqCounter::new(100, true);
        assert_eq!(c.last(), 0);
        assert_eq!(c.next(), Ok(100));
        assert_eq!(c.last(), 100);

        let c = SeqCounter::new(0, false);
        assert_eq!(c.next(), Ok(1));
    }

    #[test]
    fn exhaustion_32() {
        let c = SeqCounter::new(u64::from(u32::MAX) - 2, false);
        assert_eq!(c.next(), Ok(u64::from(u32::MAX) - 2));
        assert_eq!(c.next(), Ok(u64::from(u32::MAX) - 1));
        assert!(!c.exhausted());
        assert_eq!(c.next(), Ok(u64::from(u32::MAX)));
        assert!(c.exhausted());
        for _ in 0..3 {
            assert_eq!(c.next(), Err(SeqError::Exhausted));
        }
        assert_eq!(c.last(), u64::from(u32::MAX));
        assert!(c.exhausted());
    }

    #[test]
    fn exhaustion_64() {
        let c = SeqCounter::new(u64::MAX - 1, true);
        assert_eq!(c.next(), Ok(u64::MAX - 1));
        assert_eq!(c.next(), Ok(u64::MAX));
        assert!(c.exhausted());
        assert_eq!(c.next(), Err(SeqError::Exhausted));
        assert_eq!(c.next(), Err(SeqError::Exhausted));
        assert_eq!(c.last(), u64::MAX);
    }

    #[test]
    fn esn_passes_32_bit_boundary() {
        let c = SeqCounter::new(u64::from(u32::MAX), true);
        assert_eq!(c.next(), Ok(u64::from(u32::MAX)));
        assert_eq!(c.next(), Ok(1 << 32));
        assert!(!c.exhausted());
    }

    #[test]
    fn first_beyond_space() {
        let c = SeqCounter::new(1 << 32, false);
        assert!(c.exhausted());
        assert_eq!(c.next(), Err(SeqError::Exhausted));
        assert_eq!(c.last(), 0);
    }

    #[test]
    fn reservation_bounds_and_consumes_nothing_beyond() {
        let c = SeqCounter::with_reservation(10, false, 12);
        assert_eq!(c.next(), Ok(10));
        assert_eq!(c.next(), Ok(11));
        assert_eq!(c.next(), Ok(12));
        assert_eq!(c.next(), Err(SeqError::NotReserved));
        assert_eq!(c.next(), Err(SeqError::NotReserved));
        assert_eq!(c.last(), 12);
        assert!(!c.exhausted());
        c.reserve_to(11); // never lowers
        assert_eq!(c.reserved(), 12);
        c.reserve_to(14);
        assert_eq!(c.next(), Ok(13));
        assert_eq!(c.next(), Ok(14));
        assert_eq!(c.next(), Err(SeqError::NotReserved));
        // The space's end still wins over a larger reservation.
        let c = SeqCounter::with_reservation(u64::from(u32::MAX), false, u64::MAX);
        assert_eq!(c.reserved(), u64::from(u32::MAX));
        assert_eq!(c.next(), Ok(u64::from(u32::MAX)));
        assert_eq!(c.next(), Err(SeqError::Exhausted));
    }

    #[test]
    fn concurrent_reservation_never_exceeded() {
        let c = Arc::new(SeqCounter::with_reservation(1, false, 5_000));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    for _ in 0..5_000 {
                        if let Ok(s) = c.next() {
                            got.push(s);
                        }
                    }
                    got
                })
            })
            .collect();
        let mut all: Vec<u64> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
        all.sort_unstable();
        assert_eq!(all, (1..=5_000).collect::<Vec<_>>());
    }

    fn concurrent(first: u64, esn: bool, threads: usize, per_thread: usize) -> (Vec<u64>, usize) {
        let c = Arc::new(SeqCounter::new(first, esn));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    let mut got = Vec::with_capacity(per_thread);
                    let mut failed = 0;
                    for _ in 0..per_thread {
                        match c.next() {
                            Ok(s) => got.push(s),
                            Err(_) => failed += 1,
                        }
                    }
                    (got, failed)
                })
            })
            .collect();
        let mut all = Vec::new();
        let mut failed = 0;
        for h in handles {
            let (g, f) = h.join().unwrap();
            all.extend(g);
            failed += f;
        }
        all.sort_unstable();
        (all, failed)
    }

    #[test]
    fn concurrent_unique() {
        let (all, failed) = concurrent(1, false, 4, 20_000);
        assert_eq!(failed, 0);
        assert_eq!(all, (1..=80_000).collect::<Vec<_>>());
    }

    #[test]
    fn concurrent_exhaustion_32() {
        let first = u64::from(u32::MAX) - 999;
        let (all, failed) = concurrent(first, false, 4, 1_000);
        assert_eq!(all, (first..=u64::from(u32::MAX)).collect::<Vec<_>>());
        assert_eq!(failed, 3_000);
    }

    #[test]
    fn concurrent_exhaustion_64() {
        let first = u64::MAX - 999;
        let (all, failed) = concurrent(first, true, 4, 1_000);
        assert_eq!(all, (first..=u64::MAX).collect::<Vec<_>>());
        assert_eq!(failed, 3_000);
    }
}
