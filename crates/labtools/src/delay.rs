//! `netveil delay`: a lab tool (`netveil lab`'s added link delay; this kernel has no netem): it holds every packet
//! of a netfilter queue for a fixed time, then accepts it, in arrival order. The lab sends a host's outgoing
//! packets to it with `iptables -A OUTPUT -o DEV -j NFQUEUE --queue-num N` in that host's namespace.
//!
//! How exact: a packet is released on the first wake-up at or after its due time. The tool waits for the next
//! packet or until the oldest held one is due, whichever comes first (`ppoll`, a high-resolution timer: a socket
//! receive timeout counts in the kernel's ticks, 4 ms here), so a release is late by the wake-up's latency (tens
//! of microseconds on an idle machine) plus the time to verdict a batch. The lab measures the delay it gets on
//! the clear path (`added delay error`). The queue copies each packet to user space whole (its one
//! mode) though the verdict needs only its id: that caps the rate it can delay, which pings do not come near.
//!
//! The queue is fail-closed (a full queue drops), so at most `--max-held` packets wait at once. On SIGTERM or
//! SIGINT it accepts what it holds and exits.

use crate::{Error, Result};
use netveil_io::nfqueue::{NfQueue, Queued, Verdict, HEADROOM, MESSAGE_MAX};
use netveil_io::PacketBuf;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// A delay: the netfilter queue to serve, how long each packet is held, and how many may wait at once (`netveil
/// delay`'s options).
#[derive(Clone, Copy, Debug)]
pub struct Delay {
    /// The netfilter queue (iptables `-j NFQUEUE --queue-num N`).
    pub queue: u16,
    /// How long each packet is held, in milliseconds (fractions allowed, at most 60,000).
    pub ms: f64,
    /// The most packets held at once (the kernel's queue length; beyond it, packets are dropped).
    pub max_held: u32,
}

/// Packets received per system call.
const BATCH: usize = 64;
/// The longest wait (how soon a stop signal is seen when nothing is held).
const MAX_WAIT: Duration = Duration::from_millis(20);

/// `netveil delay`: serves the queue until SIGTERM or SIGINT, then accepts what it holds and returns.
pub fn run(a: Delay) -> Result<()> {
    if !(a.ms.is_finite() && (0.0..=60_000.0).contains(&a.ms)) {
        return Err(Error::Usage(format!(
            "--ms: {} is not a delay from 0 to 60000 ms",
            a.ms
        )));
    }
    if a.max_held == 0 {
        return Err(Error::Usage("--max-held must be at least 1".into()));
    }
    let delay = Duration::from_secs_f64(a.ms / 1e3);
    let stop = netveil_io::os::stop_on_signals();
    let q = NfQueue::open(&[a.queue], a.max_held).map_err(Error::io(format!(
        "cannot bind netfilter queue {}",
        a.queue
    )))?;
    let mut bufs: Vec<PacketBuf> = (0..BATCH)
        .map(|_| PacketBuf::new(HEADROOM + MESSAGE_MAX, HEADROOM))
        .collect();
    let mut meta = [Queued::default(); BATCH];
    let mut held: VecDeque<(Queued, Instant)> = VecDeque::new();
    let mut due: Vec<Queued> = Vec::with_capacity(BATCH);
    // A receive only follows a wait that found a packet: its own timeout (in ticks) is a backstop.
    q.set_recv_timeout(Duration::from_millis(1))
        .map_err(Error::io("cannot set the queue's receive timeout"))?;
    eprintln!("netveil delay: queue {}, {} ms", a.queue, a.ms);
    loop {
        let stopping = stop.load(Relaxed);
        let wait = held
            .front()
            .map_or(MAX_WAIT, |(_, t)| {
                t.saturating_duration_since(Instant::now())
            })
            .min(MAX_WAIT);
        let ready = !stopping
            && q.wait_readable(wait)
                .map_err(Error::io("cannot wait on the queue"))?;
        if ready {
            match q.recv_batch(&mut bufs, &mut meta) {
                Ok(n) => {
                    let at = Instant::now() + delay;
                    held.extend(meta[..n].iter().map(|m| (*m, at)));
                    for b in bufs.iter_mut().take(n) {
                        b.reset(HEADROOM);
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(Error::io("cannot receive from the queue")(e)),
            }
        }
        // Release, in order, every packet that is due (all of them when stopping).
        let now = Instant::now();
        while held.front().is_some_and(|(_, t)| stopping || *t <= now) {
            due.clear();
            while due.len() < BATCH {
                match held.front() {
                    Some((m, t)) if stopping || *t <= now => {
                        due.push(*m);
                        held.pop_front();
                    }
                    _ => break,
                }
            }
            q.verdicts(due.len(), |i| (due[i], Verdict::Accept, &[][..]))
                .map_err(Error::io("cannot give the queue its verdicts"))?;
        }
        if stopping {
            return Ok(());
        }
    }
}
