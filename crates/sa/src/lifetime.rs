//! SA lifetimes: bytes, packets and seconds, each with an optional soft limit (signal: rekey) and hard limit
//! (the SA must no longer be used). Time is passed in by the caller (seconds since the SA was installed).

/// Limits; `None` means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    pub bytes: Option<u64>,
    pub packets: Option<u64>,
    pub seconds: Option<u64>,
}

/// Soft and hard limits of one SA.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lifetime {
    pub soft: Limits,
    pub hard: Limits,
}

/// Where an SA stands against its lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LifetimeState {
    Ok,
    /// A soft limit is reached: a rekey is due.
    Soft,
    /// A hard limit is reached: the SA must not protect or accept traffic.
    Expired,
}

impl Lifetime {
    /// Classifies usage so far.
    pub fn state(&self, bytes: u64, packets: u64, seconds: u64) -> LifetimeState {
        let _ = (bytes, packets, seconds);
        todo!()
    }
}
