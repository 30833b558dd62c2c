//! Randomness from the OS.

/// Fills `out` from the operating system's CSPRNG. Panics only if the OS RNG is unavailable.
pub fn fill_random(out: &mut [u8]) {
    getrandom::getrandom(out).expect("OS random number generator unavailable");
}
