//! The two data-plane threads, and how a round trip crosses as few of them as it can.
//!
//! Each direction is a lane (its buffers behind a mutex): outbound (TAP → seal → port) and inbound (port → open
//! → TAP). Each thread has a home lane whose descriptor it waits on (`poll`, never holding a lane or the node):
//! `l2-tx` the TAP, `l2-rx` the port (and the node's timers, every [`super::timer::TICK`]). A thread serves its lane
//! by reading what is waiting, without waiting (the TAP is non-blocking; the port blocks, for its sends, and is
//! read only when `poll` says a frame is there).
//!
//! Latency is mostly wake-ups: a ping through two hosts crosses four threads if each direction waits for its own.
//! So a thread also serves the other lane when that lane's thread has slept a while ([`QUIET`]): the answer to
//! what it just delivered or sent usually comes back on the other lane (the echo reply that the host's stack
//! writes to the TAP during our write to it; the peer's answer arriving at the port), and the thread that is
//! awake reads it, the sleeping thread's wake-up off the round trip. And when sparse traffic (the first frames
//! after a wait of [`QUIET`] or more) woke a thread, it stays awake for a short while ([`SPIN`]), so that the
//! peer's answer finds it awake. Lanes are taken with `try_lock` by the visiting thread, so frames of one
//! direction never overtake each other, and nobody waits for a busy lane it does not own. Under a stream nobody
//! has slept that long: each thread keeps to its own lane (both directions in parallel), and nobody spins.

use netveil_io::{PacketSocket, Tap};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::timer::Timers;
use super::{rx, tx, State};

/// How long a thread woken by sparse traffic keeps serving without sleeping. About the time the peer takes to
/// answer on a quiet LAN: long enough that a round trip's answer finds the thread awake, short enough to cost
/// little when nothing comes back.
pub(super) const SPIN: Duration = Duration::from_micros(60);

/// The lane whose descriptor a thread waits on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Home {
    /// The TAP: outbound frames (`l2-tx`).
    Tap,
    /// The port: inbound frames, and the node's timers (`l2-rx`).
    Port,
}

/// How long a thread must have slept for the traffic to count as sparse (requests and answers, not a stream):
/// only then does a thread stay awake after a round, and only a lane whose thread slept that long is visited. 2 ms:
/// at 500 µs, the pauses of a TCP stream on a 2-core machine counted as sparse, and visits and short spins cost
/// 6-11% of l2sec's goodput (`netveil bench`, same run as the base binary); at 2 ms goodput equals the base's and
/// pings (5 ms apart in the bench, far sparser in real use) still cross fewer threads.
pub(super) const QUIET: Duration = Duration::from_millis(2);

/// Since when each lane's own thread sleeps (waits on its descriptor), in microseconds from the engine's start
/// plus one; 0 while it is awake.
#[derive(Default)]
pub(super) struct Sleeping {
    tx: AtomicU64,
    rx: AtomicU64,
}

/// Microseconds from `start` to `t`, plus one (never 0).
fn stamp(start: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(start).as_micros() as u64 + 1
}

/// One round of a lane, by its own thread (`own`: waiting for the lane if a visitor holds it) or a visitor (only
/// if the lane is free). `Some(frames)`, or `None` if the engine must stop (a poisoned lock).
fn round(st: &State, lane: Home, own: bool, tap: &Tap, sock: &PacketSocket) -> Option<usize> {
    match lane {
        Home::Tap => match st.tx.try_lock() {
            Ok(mut l) => tx::serve(st, &mut l, tap, sock),
            Err(std::sync::TryLockError::WouldBlock) if own => {
                tx::serve(st, &mut *st.tx.lock().ok()?, tap, sock)
            }
            Err(std::sync::TryLockError::WouldBlock) => Some(0),
            Err(std::sync::TryLockError::Poisoned(_)) => None,
        },
        Home::Port => match st.rx.try_lock() {
            Ok(mut l) => rx::serve(st, &mut l, tap, sock),
            Err(std::sync::TryLockError::WouldBlock) if own => {
                rx::serve(st, &mut *st.rx.lock().ok()?, tap, sock)
            }
            Err(std::sync::TryLockError::WouldBlock) => Some(0),
            Err(std::sync::TryLockError::Poisoned(_)) => None,
        },
    }
}

/// A data-plane thread: serves `home` until the engine stops (or a lock is poisoned).
pub(super) fn run(st: &State, tap: &Tap, sock: &PacketSocket, home: Home) {
    let (other, fd, mine, theirs) = match home {
        Home::Tap => (
            Home::Port,
            tap.as_fd().as_raw_fd(),
            &st.sleeping.tx,
            &st.sleeping.rx,
        ),
        Home::Port => (
            Home::Tap,
            sock.as_fd().as_raw_fd(),
            &st.sleeping.rx,
            &st.sleeping.tx,
        ),
    };
    let mut timers = (home == Home::Port).then(|| Timers::new(Instant::now()));
    let mut awake_until: Option<Instant> = None;
    // The last wait was long: what comes now is sparse traffic, whose answer is worth staying awake for.
    let mut quiet = false;
    while !st.stop.load(Relaxed) {
        let Some(mut moved) = round(st, home, true, tap, sock) else {
            return;
        };
        let now = Instant::now();
        if moved > 0 || awake_until.is_some() {
            // A visit only to a lane whose thread slept a while: under a stream, each thread keeps its own lane
            // (both directions in parallel).
            let since = theirs.load(Relaxed);
            if since != 0 && stamp(st.started, now) >= since + QUIET.as_micros() as u64 {
                let Some(m) = round(st, other, false, tap, sock) else {
                    return;
                };
                moved += m;
            }
        }
        if let Some(t) = timers.as_mut() {
            if t.run(st, sock, now).is_none() {
                return;
            }
        }
        if moved > 0 {
            if quiet || awake_until.is_some() {
                awake_until = Some(now + SPIN);
            }
            quiet = false;
            continue;
        }
        if awake_until.is_some_and(|t| now < t) {
            std::thread::yield_now();
            continue;
        }
        awake_until = None;
        let ms = timers.as_ref().map_or(200, |t| t.wait_ms(now));
        mine.store(stamp(st.started, now), Relaxed);
        rx::readable(fd, ms);
        let woke = Instant::now();
        mine.store(0, Relaxed);
        quiet = woke.saturating_duration_since(now) >= QUIET;
    }
}
