//! The algorithms a PILSC rule can name, by the paper's number (`Encryption = 1`) or by name
//! (`Encryption = AES-128`), with the key lengths each accepts.
//!
//! | number | name | key bytes |
//! |---|---|---|
//! | 1 | `AES-128` (the paper's example: `Encryption = 1` is AES) | 16 |
//! | 2 | `AES-256` | 32 |
//! | 3 | `3DES` (legacy: 64-bit blocks) | 24 |
//! | 4 | `RC5` (RC5-32/12/16, legacy: 64-bit blocks) | 16 |
//! | 5 | `Blowfish` (legacy: 64-bit blocks) | 16 to 56 |
//! | 6 | `ChaCha20` | 32 |
//!
//! Names are matched without regard to case, and `AES128`, `AES256`, `TripleDES` and `CHACHA20` are accepted too.
//! DES (in the paper's list) is not offered: its 56-bit key is searched exhaustively in hours.

use std::fmt;
use std::ops::RangeInclusive;

/// An algorithm of the rule file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cipher {
    Aes128,
    Aes256,
    TripleDes,
    Rc5,
    Blowfish,
    ChaCha20,
}

impl Cipher {
    /// Every algorithm, in the order of their numbers.
    pub const ALL: [Cipher; 6] = [
        Cipher::Aes128,
        Cipher::Aes256,
        Cipher::TripleDes,
        Cipher::Rc5,
        Cipher::Blowfish,
        Cipher::ChaCha20,
    ];

    /// The number a rule file gives it (`Encryption = 1`).
    pub fn number(self) -> u32 {
        match self {
            Cipher::Aes128 => 1,
            Cipher::Aes256 => 2,
            Cipher::TripleDes => 3,
            Cipher::Rc5 => 4,
            Cipher::Blowfish => 5,
            Cipher::ChaCha20 => 6,
        }
    }

    /// The algorithm of number `n`.
    pub fn from_number(n: u32) -> Option<Cipher> {
        Cipher::ALL.into_iter().find(|c| c.number() == n)
    }

    /// The name a rule file and `netveil status` use.
    pub fn name(self) -> &'static str {
        match self {
            Cipher::Aes128 => "AES-128",
            Cipher::Aes256 => "AES-256",
            Cipher::TripleDes => "3DES",
            Cipher::Rc5 => "RC5",
            Cipher::Blowfish => "Blowfish",
            Cipher::ChaCha20 => "ChaCha20",
        }
    }

    /// The algorithm a name or number stands for (`AES-128`, `aes128`, `1`, `0x1`).
    pub fn parse(s: &str) -> Option<Cipher> {
        if let Some(n) = parse_number(s) {
            return u32::try_from(n).ok().and_then(Cipher::from_number);
        }
        let lower = s.to_ascii_lowercase();
        match lower.as_str() {
            "aes-128" | "aes128" => Some(Cipher::Aes128),
            "aes-256" | "aes256" => Some(Cipher::Aes256),
            "3des" | "tripledes" | "3des-cbc" => Some(Cipher::TripleDes),
            "rc5" => Some(Cipher::Rc5),
            "blowfish" => Some(Cipher::Blowfish),
            "chacha20" => Some(Cipher::ChaCha20),
            _ => None,
        }
    }

    /// Key lengths (bytes) the algorithm takes.
    pub fn key_len(self) -> RangeInclusive<usize> {
        match self {
            Cipher::Aes128 => 16..=16,
            Cipher::Aes256 | Cipher::ChaCha20 => 32..=32,
            Cipher::TripleDes => 24..=24,
            Cipher::Rc5 => 16..=16,
            Cipher::Blowfish => 16..=56,
        }
    }

    /// Whether the algorithm is kept for the paper's sake only (64-bit blocks: birthday-bound limits, see
    /// [`crate::packet`]).
    pub fn legacy(self) -> bool {
        matches!(self, Cipher::TripleDes | Cipher::Blowfish | Cipher::Rc5)
    }
}

impl fmt::Display for Cipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A decimal or `0x`-prefixed hexadecimal number (the rule file's numbers: the paper writes ports as `<0..ffff>`).
pub(crate) fn parse_number(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        if h.is_empty() || h.len() > 16 {
            return None;
        }
        u64::from_str_radix(h, 16).ok()
    } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}
