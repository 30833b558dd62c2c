//! RFC 6479 anti-replay window with 64-bit (ESN) or 32-bit sequence numbers.

/// Why a sequence number was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayError {
    /// Already received.
    Replayed,
    /// Left of the window.
    TooOld,
    /// Sequence number 0 (never sent) or an inference that wrapped the 64-bit space.
    Invalid,
}

const BLOCK_BITS: u64 = 64;
const BLOCK_SHIFT: u32 = 6;

/// Bitmap window of `size` bits (rounded up to a multiple of 64; plus one spare 64-bit block as RFC 6479 does).
///
/// The ring holds `ceil(size / 64).next_power_of_two() + 1` blocks. Bit `s % 64` of block `(s / 64) % blocks`
/// records sequence number `s`. Sliding the window clears whole blocks; the spare block guarantees that the blocks
/// still covered by the window are never cleared. The bitmap is allocated once, in [`ReplayWindow::new`].
pub struct ReplayWindow {
    /// Window size in packets (as configured, at least 64).
    size: u32,
    esn: bool,
    /// Highest accepted sequence number (0: none yet).
    top: u64,
    bitmap: Box<[u64]>,
}

impl ReplayWindow {
    /// `size`: window size in packets (>= 64); `esn`: whether sequence numbers are 64-bit with only the low 32 bits on
    /// the wire.
    ///
    /// Sizes below 64 are raised to 64.
    pub fn new(size: u32, esn: bool) -> Self {
        let size = size.max(64);
        let blocks = (u64::from(size).div_ceil(BLOCK_BITS) as usize).next_power_of_two() + 1;
        ReplayWindow {
            size,
            esn,
            top: 0,
            bitmap: vec![0u64; blocks].into_boxed_slice(),
        }
    }

    /// A window that takes every sequence number up to `floor` as seen already (a receiver that continues after
    /// a restart or a re-add of the same keys: nothing at or below the floor is accepted again), and accepts what is
    /// above it as a fresh window would.
    pub fn with_floor(size: u32, esn: bool, floor: u64) -> Self {
        let mut w = ReplayWindow::new(size, esn);
        if floor == 0 {
            return w;
        }
        w.top = floor;
        w.bitmap.fill(u64::MAX);
        // The numbers above the floor in its own block are not seen yet (the blocks above it are cleared as the
        // window slides into them).
        let (block, bit) = w.position(floor);
        w.bitmap[block] &= bit | (bit - 1);
        w
    }

    /// The configured window size in packets.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Highest sequence number accepted so far (0 if none).
    pub fn top(&self) -> u64 {
        self.top
    }

    /// Whether sequence numbers are 64-bit (ESN).
    pub fn esn(&self) -> bool {
        self.esn
    }

    /// Infers the full sequence number from the low 32 bits, per RFC 4303 Appendix A3 (with ESN), or returns them
    /// as they are (without ESN). Does not check the window. `Invalid` if the inference leaves the 64-bit space.
    pub fn infer(&self, seq_lo: u32) -> Result<u64, ReplayError> {
        if !self.esn {
            return Ok(u64::from(seq_lo));
        }
        let th = (self.top >> 32) as u32;
        let tl = self.top as u32;
        let w = self.size;
        // Tl - W + 1 (mod 2^32)
        let edge = tl.wrapping_sub(w).wrapping_add(1);
        let seqh = if tl >= w - 1 {
            // Case A: the window lies within one 2^32 block.
            if seq_lo >= edge {
                Some(th)
            } else {
                th.checked_add(1)
            }
        } else {
            // Case B: the window spans two 2^32 blocks.
            if seq_lo >= edge {
                th.checked_sub(1)
            } else {
                Some(th)
            }
        };
        match seqh {
            Some(h) => Ok((u64::from(h) << 32) | u64::from(seq_lo)),
            None => Err(ReplayError::Invalid),
        }
    }

    /// Before the ICV check: infers the full sequence number from the 32 bits on the wire (with ESN, RFC 4303
    /// Appendix A) and checks that it is neither replayed nor too old. Does not change the window.
    pub fn check(&self, seq_lo: u32) -> Result<u64, ReplayError> {
        let seq = self.infer(seq_lo)?;
        self.check_full(seq)?;
        Ok(seq)
    }

    /// Checks a full sequence number against the window without changing it.
    pub fn check_full(&self, seq: u64) -> Result<(), ReplayError> {
        if seq == 0 || (!self.esn && seq > u64::from(u32::MAX)) {
            return Err(ReplayError::Invalid);
        }
        if seq > self.top {
            return Ok(());
        }
        // seq <= top here, so top - seq does not underflow.
        if self.top - seq >= u64::from(self.size) {
            return Err(ReplayError::TooOld);
        }
        let (block, bit) = self.position(seq);
        if self.bitmap[block] & bit != 0 {
            return Err(ReplayError::Replayed);
        }
        Ok(())
    }

    /// After the ICV verified: records `seq` (as returned by `check`), sliding the window if needed. Checks again, so
    /// that two packets with the same number racing between check and update cannot both pass.
    pub fn update(&mut self, seq: u64) -> Result<(), ReplayError> {
        self.check_full(seq)?;
        if seq > self.top {
            let n = self.bitmap.len() as u64;
            let cur = self.top >> BLOCK_SHIFT;
            let new = seq >> BLOCK_SHIFT;
            let diff = new - cur;
            if diff >= n {
                self.bitmap.fill(0);
            } else {
                for i in 1..=diff {
                    let idx = ((cur + i) % n) as usize;
                    self.bitmap[idx] = 0;
                }
            }
            self.top = seq;
        }
        let (block, bit) = self.position(seq);
        self.bitmap[block] |= bit;
        Ok(())
    }

    fn position(&self, seq: u64) -> (usize, u64) {
        let block = ((seq >> BLOCK_SHIFT) % self.bitmap.len() as u64) as usize;
        (block, 1u64 << (seq & (BLOCK_BITS - 1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// A window with a floor refuses every number up to it (replayed or too old) and takes every number above it
    /// once, in any order within the window, as a fresh window takes numbers above its top.
    #[test]
    fn a_floor_is_as_if_everything_up_to_it_was_seen() {
        for floor in [1u64, 63, 64, 65, 127, 1000, 4096, (1 << 32) - 1] {
            let mut w = ReplayWindow::with_floor(128, false, floor);
            assert_eq!(w.top(), floor);
            for s in floor.saturating_sub(300).max(1)..=floor {
                assert!(w.check_full(s).is_err(), "floor {floor}: {s} accepted");
            }
            if floor >= u64::from(u32::MAX) {
                continue;
            }
            // Above the floor, out of order within the window: each once.
            let above: Vec<u64> = (1..=100u64).rev().map(|d| floor + d).collect();
            for &s in &above {
                assert_eq!(w.check_full(s), Ok(()), "floor {floor}: {s}");
                w.update(s).unwrap();
            }
            for &s in &above {
                assert_eq!(
                    w.check_full(s),
                    Err(ReplayError::Replayed),
                    "floor {floor}: {s}"
                );
            }
        }
        // With ESN, across the 2^32 boundary.
        let mut w = ReplayWindow::with_floor(64, true, (1 << 32) + 5);
        assert_eq!(w.check(5), Err(ReplayError::Replayed));
        assert_eq!(w.check(6), Ok((1 << 32) + 6));
        w.update((1 << 32) + 6).unwrap();
        assert_eq!(w.check(6), Err(ReplayError::Replayed));
        // Floor 0 is a fresh window.
        assert_eq!(ReplayWindow::with_floor(64, false, 0).check_full(1), Ok(()));
    }

    fn accept(w: &mut ReplayWindow, seq_lo: u32) -> Result<u64, ReplayError> {
        let s = w.check(seq_lo)?;
        w.update(s)?;
        Ok(s)
    }

    #[test]
    fn sizes_and_blocks() {
        for (size, blocks) in [
            (1, 2),
            (64, 2),
            (65, 3),
            (100, 3),
            (128, 3),
            (1024, 17),
            (4096, 65),
            (65536, 1025),
        ] {
            let w = ReplayWindow::new(size, false);
            assert_eq!(w.size(), size.max(64));
            assert_eq!(w.bitmap.len(), blocks, "size {size}");
            assert_eq!(w.top(), 0);
        }
    }

    #[test]
    fn zero_is_invalid() {
        for esn in [false, true] {
            let mut w = ReplayWindow::new(64, esn);
            assert_eq!(w.check(0), Err(ReplayError::Invalid));
            assert_eq!(w.update(0), Err(ReplayError::Invalid));
            accept(&mut w, 1).unwrap();
            assert_eq!(w.check(0), Err(ReplayError::Invalid));
        }
        let w = ReplayWindow::new(64, false);
        assert_eq!(w.check_full(1 << 32), Err(ReplayError::Invalid));
    }

    #[test]
    fn in_order_and_duplicates() {
        for size in [64, 1024, 4096, 65536] {
            let mut w = ReplayWindow::new(size, false);
            for s in 1..=10_000u32 {
                assert_eq!(w.check(s), Ok(u64::from(s)));
                w.update(u64::from(s)).unwrap();
                assert_eq!(w.top(), u64::from(s));
                assert_eq!(w.check(s), Err(ReplayError::Replayed));
                assert_eq!(w.update(u64::from(s)), Err(ReplayError::Replayed));
            }
            assert_eq!(
                w.check(10_000 - size.min(9_999) + 1),
                Err(ReplayError::Replayed)
            );
        }
    }

    #[test]
    fn reordering_within_window() {
        let mut w = ReplayWindow::new(1024, false);
        accept(&mut w, 2000).unwrap();
        for s in (1000..2000).rev().step_by(3) {
            accept(&mut w, s).unwrap();
            assert_eq!(w.check(s), Err(ReplayError::Replayed));
        }
        assert_eq!(w.top(), 2000);
        assert_eq!(w.check(1001), Ok(1001));
        assert_eq!(w.check(1000), Err(ReplayError::Replayed));
    }

    #[test]
    fn left_edge() {
        for size in [64u32, 100, 1024, 4096] {
            let mut w = ReplayWindow::new(size, false);
            let top = 10_000u32;
            accept(&mut w, top).unwrap();
            let edge = top - size + 1;
            assert_eq!(w.check(edge - 1), Err(ReplayError::TooOld), "size {size}");
            assert_eq!(w.update(u64::from(edge - 1)), Err(ReplayError::TooOld));
            assert_eq!(w.check(edge), Ok(u64::from(edge)));
            accept(&mut w, edge).unwrap();
            assert_eq!(w.check(edge), Err(ReplayError::Replayed));
            // Slide by one: the old edge falls out.
            accept(&mut w, top + 1).unwrap();
            assert_eq!(w.check(edge), Err(ReplayError::TooOld));
            assert_eq!(w.check(edge + 1), Ok(u64::from(edge + 1)));
        }
    }

    #[test]
    fn big_jumps_clear_bitmap() {
        for size in [64u32, 1024, 4096] {
            let mut w = ReplayWindow::new(size, false);
            for s in 1..=size {
                accept(&mut w, s).unwrap();
            }
            // Jump by exactly the ring size and by much more; every number in the new window must be fresh.
            let ring = w.bitmap.len() as u32 * 64;
            for jump in [size, ring, ring + 1, 3 * ring + 17, 1_000_000] {
                let top = w.top() as u32 + jump;
                accept(&mut w, top).unwrap();
                for s in (top - size + 1)..top {
                    assert_eq!(
                        w.check(s),
                        Ok(u64::from(s)),
                        "size {size} jump {jump} s {s}"
                    );
                }
                assert_eq!(w.check(top - size), Err(ReplayError::TooOld));
            }
        }
    }

    #[test]
    fn slide_keeps_bits_in_window() {
        let mut w = ReplayWindow::new(128, false);
        accept(&mut w, 100).unwrap();
        accept(&mut w, 200).unwrap();
        assert_eq!(w.check(100), Err(ReplayError::Replayed));
        accept(&mut w, 228).unwrap();
        assert_eq!(w.check(100), Err(ReplayError::TooOld));
        assert_eq!(w.check(200), Err(ReplayError::Replayed));
        assert_eq!(w.check(150), Ok(150));
    }

    #[test]
    fn no_esn_top_of_space() {
        let mut w = ReplayWindow::new(64, false);
        accept(&mut w, u32::MAX).unwrap();
        assert_eq!(w.check(u32::MAX), Err(ReplayError::Replayed));
        // Without ESN there is no rollover: small numbers are simply too old.
        assert_eq!(w.check(5), Err(ReplayError::TooOld));
        assert_eq!(w.check(u32::MAX - 63), Ok(u64::from(u32::MAX - 63)));
    }

    #[test]
    fn esn_inference_rollover() {
        // Top just past a 2^32 boundary: a late packet from before it infers high 0.
        let mut w = ReplayWindow::new(64, true);
        w.update(0x1_0000_0005).unwrap();
        assert_eq!(w.check(0xFFFF_FFF0), Ok(0xFFFF_FFF0));
        assert_eq!(w.check(6), Ok(0x1_0000_0006));
        assert_eq!(w.check(5), Err(ReplayError::Replayed));
        w.update(0xFFFF_FFF0).unwrap();
        assert_eq!(w.check(0xFFFF_FFF0), Err(ReplayError::Replayed));
        // 0x1_0000_0005 - 64 + 1 = 0xFFFF_FFC6 is the left edge; one less is too old as a full number, but on the
        // wire its low half infers the next 2^32 block (RFC 4303 A3: the window decides, the ICV then rejects it).
        assert_eq!(w.check(0xFFFF_FFC6), Ok(0xFFFF_FFC6));
        assert_eq!(w.check_full(0xFFFF_FFC5), Err(ReplayError::TooOld));
        assert_eq!(w.update(0xFFFF_FFC5), Err(ReplayError::TooOld));
        assert_eq!(w.check(0xFFFF_FFC5), Ok(0x1_FFFF_FFC5));
        // Low part 0 just after the boundary: high 1, full number 2^32 (valid, inside the window).
        assert_eq!(w.check(0), Ok(0x1_0000_0000));

        // Top just before the boundary: a small number infers high 1 (a jump forward).
        let mut w = ReplayWindow::new(1024, true);
        w.update(0xFFFF_FFF0).unwrap();
        assert_eq!(w.check(5), Ok(0x1_0000_0005));
        assert_eq!(w.check(0xFFFF_FFF1), Ok(0xFFFF_FFF1));
        assert_eq!(w.check(0xFFFF_FFF0), Err(ReplayError::Replayed));
        assert_eq!(w.check(0xFFFF_FFF0 - 1023), Ok(0xFFFF_FFF0 - 1023));
        // One left of the window wraps forward to the next 2^32 block (RFC 4303 A3 behaviour).
        assert_eq!(w.check(0xFFFF_FFF0 - 1024), Ok(0x1_FFFF_FBF0));
        w.update(0x1_0000_0005).unwrap();
        assert_eq!(w.top(), 0x1_0000_0005);
        assert_eq!(w.check(5), Err(ReplayError::Replayed));
        assert_eq!(w.check(0xFFFF_FFF0), Err(ReplayError::Replayed));
        assert_eq!(w.check(0xFFFF_FFF2), Ok(0xFFFF_FFF2));
    }

    #[test]
    fn esn_inference_wrapping_64_bits_is_invalid() {
        // Fresh window (top 0): case B with Th = 0; numbers "before" the window would need high -1.
        let w = ReplayWindow::new(64, true);
        assert_eq!(w.check(u32::MAX), Err(ReplayError::Invalid));
        assert_eq!(w.check(u32::MAX - 62), Err(ReplayError::Invalid));
        assert_eq!(w.check(u32::MAX - 63), Ok(u64::from(u32::MAX - 63)));
        assert_eq!(w.check(1), Ok(1));

        // Top near 2^64: a jump forward would need high 2^32.
        let mut w = ReplayWindow::new(64, true);
        w.update(u64::MAX - 10).unwrap();
        assert_eq!(w.check(u32::MAX), Ok(u64::MAX));
        assert_eq!(w.check(0), Err(ReplayError::Invalid));
        assert_eq!(w.check(5), Err(ReplayError::Invalid));
        w.update(u64::MAX).unwrap();
        assert_eq!(w.check(u32::MAX), Err(ReplayError::Replayed));
        assert_eq!(w.check(u32::MAX - 1), Ok(u64::MAX - 1));
    }

    /// Tiny xorshift64* generator (deterministic, no dependencies).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Reference model: a set of accepted numbers and the top.
    struct Model {
        size: u64,
        top: u64,
        seen: HashSet<u64>,
    }
    impl Model {
        fn check(&self, s: u64) -> Result<(), ReplayError> {
            if s == 0 {
                Err(ReplayError::Invalid)
            } else if u128::from(s) + u128::from(self.size) <= u128::from(self.top) {
                Err(ReplayError::TooOld)
            } else if self.seen.contains(&s) {
                Err(ReplayError::Replayed)
            } else {
                Ok(())
            }
        }
        fn update(&mut self, s: u64) {
            self.seen.insert(s);
            self.top = self.top.max(s);
        }
        /// The unique number congruent to `lo` mod 2^32 in `[top - size + 1, top - size + 2^32]`.
        fn infer(&self, lo: u32) -> Option<u64> {
            let base = i128::from(self.top) - i128::from(self.size) + 1;
            let off = (i128::from(lo) - base).rem_euclid(1 << 32);
            u64::try_from(base + off).ok()
        }
    }

    fn random_run(size: u32, esn: bool, start: u64, seed: u64, steps: usize) {
        let mut rng = Rng(seed);
        let mut w = ReplayWindow::new(size, esn);
        let mut m = Model {
            size: u64::from(size),
            top: 0,
            seen: HashSet::new(),
        };
        if start != 0 {
            w.update(start).unwrap();
            m.update(start);
        }
        let span = 3 * u64::from(size);
        for step in 0..steps {
            // Mostly near the top (behind or ahead), sometimes a far jump, sometimes an exact repeat.
            let s = match rng.below(10) {
                0 => m.top.saturating_add(rng.below(16 * span)),
                1 => m.top.saturating_sub(rng.below(4)),
                _ => m
                    .top
                    .saturating_add(span)
                    .saturating_sub(rng.below(2 * span)),
            };
            let s = if esn { s } else { s.min(u64::from(u32::MAX)) };
            let lo = s as u32;
            let got = w.check(lo);
            let want = if esn {
                match m.infer(lo) {
                    Some(full) => m.check(full).map(|()| full),
                    None => Err(ReplayError::Invalid),
                }
            } else {
                m.check(s).map(|()| s)
            };
            assert_eq!(
                got, want,
                "step {step} seq {s:#x} top {:#x} size {size} esn {esn}",
                m.top
            );
            // The full-number check must agree with the model too.
            assert_eq!(
                w.check_full(s).is_ok(),
                m.check(s).is_ok(),
                "check_full step {step} seq {s:#x}"
            );
            if let Ok(full) = got {
                // Simulate an ICV failure now and then: check without update.
                if rng.below(8) != 0 {
                    w.update(full).unwrap();
                    m.update(full);
                    // A racing duplicate must be caught by update's re-check.
                    assert_eq!(w.update(full), Err(ReplayError::Replayed));
                }
            }
            assert_eq!(w.top(), m.top);
        }
    }

    #[test]
    fn randomized_against_model() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for size in [64u32, 100, 1024, 4096, 65536] {
            for (esn, start) in [
                (false, 0),
                (false, u64::from(u32::MAX) - 5 * u64::from(size)),
                (true, 0),
                (true, (1u64 << 32) - 2 * u64::from(size)),
                (true, (7u64 << 32) + 3),
                (true, u64::MAX - 40 * u64::from(size)),
            ] {
                seed = seed.wrapping_add(0x1234_5678_9ABC_DEF1);
                let steps = if size >= 65536 { 4_000 } else { 20_000 };
                random_run(size, esn, start, seed, steps);
            }
        }
    }
}
