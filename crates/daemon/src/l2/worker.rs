//! The two data-plane threads, and how a round trip crosses as few of them as it can.
//!
//! Each direction is a lane (its buffers behind a mutex): outbound (TAP → seal → port) and inbound (port → open
//! → TAP). Each thread has a home lane whose descriptor it waits on (`poll`, never holding a lane or the node):
//! `l2-tx` the TAP, `l2-rx` the port (and the node's timers, every [`super::timer::TICK`]). A thread serves its lane
//! by reading what is waiting, without waiting (the TAP is non-blocking; the port blocks, for its sends, and is
//! read only when `poll` says a frame is there).
//!
//! Latency is mostly wake-ups: a ping through two hosts crosses four threads if each direction waits for its own.
//! So, after a round that moved frames, a thread keeps serving for a short while ([`SPIN`]) without sleeping,
//! its home lane and the other one too when the other's thread sleeps: the answer to what it just sent or
//! delivered usually comes back within that window, on the other lane (the echo reply that the host's stack
//! writes to the TAP during our write to it; the peer's answer arriving at the port). The thread that wrote the
//! request then reads the answer itself, and the sleeping thread's wake-up is off the round trip. Lanes are
//! taken with `try_lock` by the visiting thread, so frames of one direction never overtake each other, and
//! nobody waits for a busy lane it does not own. Under load every thread is busy with its own lane: nobody spins,
//! nobody visits.

use netveil_io::{PacketSocket, Tap};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::timer::Timers;
use super::{rx, tx, State};

/// How long a thread keeps serving without sleeping after a round that moved frames. About the time the peer
/// takes to answer on a quiet LAN: long enough that a round trip's answer finds the thread awake, short enough
/// to cost little when nothing comes back.
pub(super) const SPIN: Duration = Duration::from_micros(60);

/// The lane whose descriptor a thread waits on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Home {
    /// The TAP: outbound frames (`l2-tx`).
    Tap,
    /// The port: inbound frames, and the node's timers (`l2-rx`).
    Port,
}

/// Whether each lane's own thread sleeps (waits on its descriptor): only then is the lane worth a visit.
#[derive(Default)]
pub(super) struct Sleeping {
    tx: AtomicBool,
    rx: AtomicBool,
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

/// Whether `fd` has something to read, waiting up to `ms` milliseconds for it.
pub(super) fn readable(fd: RawFd, ms: i32) -> bool {
    let mut pfd = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }];
    matches!(netveil_io::os::poll(&mut pfd, ms), Ok(n) if n > 0)
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
    while !st.stop.load(Relaxed) {
        let Some(mut moved) = round(st, home, true, tap, sock) else {
            return;
        };
        if (moved > 0 || awake_until.is_some()) && theirs.load(Relaxed) {
            let Some(m) = round(st, other, false, tap, sock) else {
                return;
            };
            moved += m;
        }
        let now = Instant::now();
        if let Some(t) = timers.as_mut() {
            if t.run(st, sock, now).is_none() {
                return;
            }
        }
        if moved > 0 {
            awake_until = Some(now + SPIN);
            continue;
        }
        if awake_until.is_some_and(|t| now < t) {
            std::thread::yield_now();
            continue;
        }
        awake_until = None;
        let ms = timers.as_ref().map_or(200, |t| t.wait_ms(now));
        mine.store(true, Relaxed);
        readable(fd, ms);
        mine.store(false, Relaxed);
    }
}
