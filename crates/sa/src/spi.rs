//! Tables keyed by SPI: an SPI is chosen by the receiver (at random, or counted up as PSP does) and is already
//! well spread, so it is hashed as itself, spread by one multiplication, instead of through SipHash per packet.
//! Only lookups take SPIs from the wire; the keys inserted are the receiver's own, so a sender cannot crowd a
//! bucket.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The hasher of [`SpiMap`]: the SPI (and any small integer hashed before it) as the hash, times a 64-bit odd
/// constant so that the table's index bits see every bit of it.
#[derive(Default, Clone, Copy, Debug)]
pub struct SpiHasher(u64);

impl Hasher for SpiHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = (self.0 << 32) | i as u64;
    }
}

/// A hash map keyed by SPI (or by a key whose last hashed part is the SPI, e.g. `(protocol, spi)`).
pub type SpiMap<K, V> = HashMap<K, V, BuildHasherDefault<SpiHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn an_spi_hashes_as_itself_spread_and_a_prefix_changes_the_hash() {
        let b = BuildHasherDefault::<SpiHasher>::default();
        assert_eq!(b.hash_one(1u32), 0x9e37_79b9_7f4a_7c15);
        assert_ne!(b.hash_one((1u8, 7u32)), b.hash_one((2u8, 7u32)));
        let mut m: SpiMap<(u8, u32), usize> = SpiMap::default();
        m.insert((50, 0x1000), 1);
        m.insert((51, 0x1000), 2);
        assert_eq!(m.get(&(50, 0x1000)), Some(&1));
        assert_eq!(m.get(&(51, 0x1000)), Some(&2));
        assert_eq!(m.get(&(50, 0x1001)), None);
    }
}
