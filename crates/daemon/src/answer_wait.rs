//! Staying awake for a peer's answer: how a data-plane thread that just sent sparse traffic (an echo request, a
//! request of a request-response exchange) saves the wake-up of the thread that would otherwise receive the
//! answer. Used by the IP engine's receive thread and by both of l2sec's threads.
//!
//! A round trip through two hosts wakes a sleeping thread at every hop; on a virtual machine whose idle vCPUs
//! halt, each wake-up is tens of microseconds. A thread that sent what its host wrote (to the TUN or the TAP)
//! while traffic is sparse polls for the answer without sleeping for [`AWAIT_ANSWER`], yielding to any thread
//! that has work, so that the answer finds it awake. Waits that get no answer back off (see [`AwaitAnswer`]).

use std::time::{Duration, Instant};

/// How long a thread stays awake for the answer: about a round trip to a peer on the LAN whose own thread has to
/// wake up to answer (between namespaces on a 2-core virtual machine: a median of 150-250 µs, of which the
/// answer takes all but the last few tens of microseconds to reach this thread).
pub const AWAIT_ANSWER: Duration = Duration::from_micros(250);

/// The most sends in a row that do not wait after waits that got no answer (see [`AwaitAnswer`]).
pub const AWAIT_SKIP_MAX: u32 = 64;

/// Whether a thread stays awake (polls without sleeping, yielding to any thread that has work) after it sent what
/// its host wrote: the caller starts a wait only for sparse traffic (under a stream nobody waits), and the waits
/// go on only while they get answers. A wait that gets none makes the next sends skip waiting (1, 2, 4, ... up to
/// [`AWAIT_SKIP_MAX`]), so one-way traffic (datagrams nobody answers, at a rate too low to count as a stream)
/// costs at most one wait in 65 sends; an answer clears the penalty, also one that came after its wait ran out
/// (a slow peer is still worth waiting for: the wait costs this thread's time, never the answer's).
#[derive(Default)]
pub struct AwaitAnswer {
    /// Awake until then.
    until: Option<Instant>,
    /// The last wait ran out, and nothing came in since.
    missed: bool,
    /// Sends left that do not wait.
    skip: u32,
    /// What the next unanswered wait sets `skip` to (doubled each time).
    penalty: u32,
}

impl AwaitAnswer {
    /// Something the host wrote was sent at `now`: a wait starts (or restarts), unless this send skips it.
    pub fn sent(&mut self, now: Instant) {
        if self.skip > 0 {
            self.skip -= 1;
        } else {
            self.until = Some(now + AWAIT_ANSWER);
            self.missed = false;
        }
    }

    /// Something came in from a peer (and was delivered to the host): the wait, if any, is over and was
    /// answered; after a wait that ran out, the answer came late, and the next send waits again.
    pub fn answered(&mut self) {
        if self.until.take().is_some() || std::mem::take(&mut self.missed) {
            self.penalty = 0;
            self.skip = 0;
        }
    }

    /// The next `poll`'s timeout: 0 while the wait lasts, `idle_ms` otherwise. A wait that ran out unanswered
    /// ends here and counts against the next ones.
    pub fn timeout_ms(&mut self, now: Instant, idle_ms: i32) -> i32 {
        match self.until {
            Some(t) if now < t => 0,
            Some(_) => {
                self.until = None;
                self.missed = true;
                self.penalty = (self.penalty * 2).clamp(1, AWAIT_SKIP_MAX);
                self.skip = self.penalty;
                idle_ms
            }
            None => idle_ms,
        }
    }

    /// Whether a wait is on.
    pub fn waiting(&self) -> bool {
        self.until.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The receive thread's wait for an answer: on after a send, off once answered or run out; waits that get no
    /// answer make the next 1, 2, 4, ... up to 64 sends skip waiting; an answer clears that, a late one too.
    #[test]
    fn waits_for_answers_back_off_while_none_come() {
        use std::time::Duration;
        let t0 = Instant::now();
        let mut a = AwaitAnswer::default();
        assert_eq!(a.timeout_ms(t0, 200), 200);
        // Answered waits: every send waits.
        for _ in 0..3 {
            a.sent(t0);
            assert!(a.waiting());
            assert_eq!(a.timeout_ms(t0 + AWAIT_ANSWER / 2, 200), 0);
            a.answered();
            assert!(!a.waiting());
            assert_eq!(a.timeout_ms(t0, 200), 200);
        }
        // Unanswered waits (nothing comes in at all): the sends skipped between two waits double, up to 64.
        let late = t0 + AWAIT_ANSWER + Duration::from_micros(1);
        let mut skipped = Vec::new();
        a.sent(t0);
        for _ in 0..8 {
            assert!(a.waiting());
            assert_eq!(a.timeout_ms(late, 200), 200, "a wait that ran out ends");
            assert!(!a.waiting());
            let mut k = 0;
            loop {
                a.sent(t0);
                if a.waiting() {
                    break;
                }
                k += 1;
            }
            skipped.push(k);
        }
        assert_eq!(skipped, [1, 2, 4, 8, 16, 32, 64, 64]);
        // An answered wait clears the penalty: the next unanswered one skips a single send.
        a.answered();
        a.sent(t0);
        assert_eq!(a.timeout_ms(late, 200), 200);
        a.sent(t0);
        assert!(!a.waiting());
        a.sent(t0);
        assert!(a.waiting());
        // A late answer (after the wait ran out, before the next send) clears it too: the next send waits.
        assert_eq!(a.timeout_ms(late, 200), 200);
        a.answered();
        a.sent(t0);
        assert!(a.waiting());
        // A wait that ran out, then skipped sends, then something coming in: waits resume at the next send.
        assert_eq!(a.timeout_ms(late, 200), 200);
        assert_eq!(a.timeout_ms(late, 200), 200, "no wait on: nothing changes");
        a.sent(t0);
        assert!(!a.waiting(), "one send skips after a miss");
        assert_eq!(a.timeout_ms(late, 200), 200);
        a.answered();
        a.sent(t0);
        assert!(a.waiting());
    }
}
