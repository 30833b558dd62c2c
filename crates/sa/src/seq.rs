//! Outbound sequence numbers: 1, 2, 3, ... up to 2^32-1 (or 2^64-1 with ESN); never wraps.

/// Sending must stop: the sequence space is used up and the SA must be rekeyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqExhausted;

/// A lock-free outbound counter shared by all sending threads of one SA.
pub struct SeqCounter {
    _todo: (),
}

impl SeqCounter {
    /// A counter whose first `next()` returns `first` (normally 1); `esn` selects a 64- or 32-bit space.
    pub fn new(first: u64, esn: bool) -> Self {
        let _ = (first, esn);
        todo!()
    }
    /// The next sequence number, or `SeqExhausted` once the space is used up (and on every call after).
    pub fn next(&self) -> Result<u64, SeqExhausted> {
        todo!()
    }
    /// The last number handed out (0 if none).
    pub fn last(&self) -> u64 {
        todo!()
    }
    /// Whether `next` has started failing.
    pub fn exhausted(&self) -> bool {
        todo!()
    }
}
