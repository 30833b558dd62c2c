//! SA lifetimes: bytes, packets and seconds, each with an optional soft limit (signal: rekey) and hard limit
//! (the SA must no longer be used). Time is passed in by the caller (seconds since the SA was installed).

/// Limits; `None` means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    pub bytes: Option<u64>,
    pub packets: Option<u64>,
    pub seconds: Option<u64>,
}

impl Limits {
    /// Whether any limit is reached (usage >= limit).
    pub fn reached(&self, bytes: u64, packets: u64, seconds: u64) -> bool {
        let hit = |limit: Option<u64>, used: u64| limit.is_some_and(|l| used >= l);
        hit(self.bytes, bytes) || hit(self.packets, packets) || hit(self.seconds, seconds)
    }
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
        if self.hard.reached(bytes, packets, seconds) {
            LifetimeState::Expired
        } else if self.soft.reached(bytes, packets, seconds) {
            LifetimeState::Soft
        } else {
            LifetimeState::Ok
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(bytes: Option<u64>, packets: Option<u64>, seconds: Option<u64>) -> Limits {
        Limits {
            bytes,
            packets,
            seconds,
        }
    }

    #[test]
    fn unlimited() {
        let l = Lifetime::default();
        assert_eq!(l.state(0, 0, 0), LifetimeState::Ok);
        assert_eq!(l.state(u64::MAX, u64::MAX, u64::MAX), LifetimeState::Ok);
    }

    #[test]
    fn each_limit() {
        let l = Lifetime {
            soft: lim(Some(800), Some(80), Some(3000)),
            hard: lim(Some(1000), Some(100), Some(3600)),
        };
        assert_eq!(l.state(0, 0, 0), LifetimeState::Ok);
        assert_eq!(l.state(799, 79, 2999), LifetimeState::Ok);
        assert_eq!(l.state(800, 0, 0), LifetimeState::Soft);
        assert_eq!(l.state(0, 80, 0), LifetimeState::Soft);
        assert_eq!(l.state(0, 0, 3000), LifetimeState::Soft);
        assert_eq!(l.state(999, 99, 3599), LifetimeState::Soft);
        assert_eq!(l.state(1000, 0, 0), LifetimeState::Expired);
        assert_eq!(l.state(0, 100, 0), LifetimeState::Expired);
        assert_eq!(l.state(0, 0, 3600), LifetimeState::Expired);
        assert_eq!(l.state(5000, 5000, 5000), LifetimeState::Expired);
    }

    #[test]
    fn hard_wins_and_mixed() {
        // Only a hard byte limit and a soft time limit.
        let l = Lifetime {
            soft: lim(None, None, Some(10)),
            hard: lim(Some(100), None, None),
        };
        assert_eq!(l.state(99, u64::MAX, 9), LifetimeState::Ok);
        assert_eq!(l.state(99, 0, 10), LifetimeState::Soft);
        assert_eq!(l.state(100, 0, 0), LifetimeState::Expired);
        assert_eq!(l.state(100, 0, 10), LifetimeState::Expired);
        // A soft limit above the hard one never shows as Soft before Expired.
        let l = Lifetime {
            soft: lim(None, Some(200), None),
            hard: lim(None, Some(100), None),
        };
        assert_eq!(l.state(0, 150, 0), LifetimeState::Expired);
        // Zero limits are reached at once.
        let l = Lifetime {
            soft: lim(Some(0), None, None),
            hard: Limits::default(),
        };
        assert_eq!(l.state(0, 0, 0), LifetimeState::Soft);
        assert!(
            LifetimeState::Ok < LifetimeState::Soft && LifetimeState::Soft < LifetimeState::Expired
        );
    }
}
