//! Randomness, passed in: the [`Rng`] trait, the operating system's generator [`OsRng`], and (feature
//! `test-rng`, for tests and fuzzing only) the deterministic `SeededRng`.
//!
//! The protocol crates (`ipsec`, `psp`, `l2sec`) never reach for randomness themselves: whatever draws random
//! bytes there (keys, nonces, exchange ids, first sequence numbers, IV-generator keys) takes a `&mut dyn Rng` or
//! a `Box<dyn Rng>` from its caller. The daemon passes [`OsRng`]; in-memory tests pass a `SeededRng`, so that a
//! key exchange run twice with the same seed gives the same transcript and keys. `scripts/check-rng` keeps the
//! protocol crates' sources free of the OS generator and of [`fill_random`].

/// A cryptographically secure source of random bytes, object-safe (`&mut dyn Rng`, `Box<dyn Rng>`).
///
/// Implementations must give output that is unpredictable to anyone who does not hold their state: keys and
/// nonces are drawn from it. `Send + Sync` so that an object holding a `Box<dyn Rng>` (a PSP device, an l2sec
/// node) can live behind a lock shared between threads; drawing takes `&mut self`, so no implementation needs
/// interior locking.
pub trait Rng: Send + Sync {
    /// Fills `out` with random bytes. Never fails: a generator that cannot deliver panics (the OS one only if
    /// the system has no random source at all), rather than hand out predictable bytes.
    fn fill(&mut self, out: &mut [u8]);
}

impl<R: Rng + ?Sized> Rng for &mut R {
    fn fill(&mut self, out: &mut [u8]) {
        (**self).fill(out)
    }
}

impl<R: Rng + ?Sized> Rng for Box<R> {
    fn fill(&mut self, out: &mut [u8]) {
        (**self).fill(out)
    }
}

/// `N` random bytes from `rng`.
pub fn array<const N: usize>(rng: &mut dyn Rng) -> [u8; N] {
    let mut b = [0u8; N];
    rng.fill(&mut b);
    b
}

/// The operating system's CSPRNG (`getrandom(2)` on Linux), through the `getrandom` crate. Stateless: every
/// value is the same generator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OsRng;

impl Rng for OsRng {
    fn fill(&mut self, out: &mut [u8]) {
        getrandom::getrandom(out).expect("OS random number generator unavailable");
    }
}

/// Fills `out` from the operating system's CSPRNG ([`OsRng`]). A convenience for the runtime (the daemon's
/// state ids, key generation by the `netveil` command); protocol crates take an [`Rng`] instead.
pub fn fill_random(out: &mut [u8]) {
    OsRng.fill(out)
}

/// **Not for production.** A deterministic generator for tests and fuzz targets: the ChaCha20 keystream (the
/// `chacha20` crate's `ChaCha20Rng`) of a 32-byte seed. Its output is as good as ChaCha20's, but anyone who knows
/// the seed knows every byte it will give, so every key drawn from it is known: it exists only with the crate
/// feature `test-rng`, which production builds do not enable (the workspace's crates name it in
/// `[dev-dependencies]` only; the fuzz targets enable it).
#[cfg(any(test, feature = "test-rng"))]
pub struct SeededRng(chacha20::ChaCha20Rng);

#[cfg(any(test, feature = "test-rng"))]
impl SeededRng {
    /// The generator of `seed` (the ChaCha20 key; stream 0, from position 0).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        use chacha20::rand_core::SeedableRng;
        SeededRng(chacha20::ChaCha20Rng::from_seed(seed))
    }

    /// The generator of a small seed: `seed` little-endian in the first 8 bytes of the key, the rest zero.
    pub fn new(seed: u64) -> Self {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        Self::from_seed(key)
    }

    /// A new generator seeded from this one (32 bytes drawn): for handing independent, still reproducible
    /// generators to several parties of one test.
    pub fn fork(&mut self) -> Self {
        Self::from_seed(array(self))
    }
}

#[cfg(any(test, feature = "test-rng"))]
impl Rng for SeededRng {
    fn fill(&mut self, out: &mut [u8]) {
        use chacha20::rand_core::Rng as _;
        self.0.fill_bytes(out)
    }
}

#[cfg(any(test, feature = "test-rng"))]
impl core::fmt::Debug for SeededRng {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("SeededRng(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draw(rng: &mut dyn Rng, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        rng.fill(&mut v);
        v
    }

    /// The seeded generator is the ChaCha20 keystream of its seed: RFC 8439 section 2.4.2's cipher with the
    /// all-zero key and nonce and counter 0 has this first block (RFC 7539 appendix A.1, test vector #1), so
    /// drawing from `from_seed([0; 32])` must give it (a different construction would not).
    #[test]
    fn seeded_is_the_chacha20_keystream() {
        let mut r = SeededRng::from_seed([0; 32]);
        assert_eq!(
            hex(&draw(&mut r, 64)),
            "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7\
             da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586"
        );
    }

    #[test]
    fn seeded_is_reproducible_and_seeds_differ() {
        let a = draw(&mut SeededRng::new(7), 100);
        assert_eq!(a, draw(&mut SeededRng::new(7), 100));
        assert_ne!(a, draw(&mut SeededRng::new(8), 100));
        // The same sequence of draws gives the same bytes (a draw that ends inside a 4-byte word discards the
        // word's rest: the stream depends on the draws' lengths, not only on the total).
        let mut r = SeededRng::new(7);
        let b = [draw(&mut r, 33), draw(&mut r, 67)].concat();
        let mut r = SeededRng::new(7);
        assert_eq!(b, [draw(&mut r, 33), draw(&mut r, 67)].concat());
        assert_eq!(a[..33], b[..33]);
        // A fork is reproducible and differs from its parent's continuation.
        let (mut p, mut q) = (SeededRng::new(7), SeededRng::new(7));
        let (f, g) = (draw(&mut p.fork(), 32), draw(&mut q.fork(), 32));
        assert_eq!(f, g);
        assert_ne!(f, draw(&mut p, 32));
    }

    #[test]
    fn os_rng_fills() {
        // 32 random bytes are all zero or equal twice with probability 2^-256.
        let (a, b) = (draw(&mut OsRng, 32), draw(&mut OsRng, 32));
        assert_ne!(a, vec![0u8; 32]);
        assert_ne!(a, b);
        let mut c = [0u8; 32];
        fill_random(&mut c);
        assert_ne!(c, [0u8; 32]);
        // Through a Box and a &mut (the blanket impls).
        let mut boxed: Box<dyn Rng> = Box::new(OsRng);
        assert_ne!(draw(&mut boxed, 32), vec![0u8; 32]);
        assert_ne!(array::<16>(&mut &mut OsRng), [0u8; 16]);
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
