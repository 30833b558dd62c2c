//! The wire order of the node's own frames against sealed data, without holding the node across a system call.
//!
//! The node's lock is held only while the node decides (seals, opens, runs its timers) and hands over what it
//! has ready ([`Node::poll_transmit`]: SEP messages, frames that waited for a session); the frames are sent after
//! the lock is released. What must not happen: a new session's first data frames overtaking the SEP message that
//! completes the session at the peer (the initiator's FINISH), sealed by another thread right after the node
//! released that message. So every hand-over of ready frames takes a ticket (in the node's lock, hence in the
//! node's order), tickets go out in order, and data sealed in a later node section waits until every ticket
//! issued before it went out. Ready frames are rare (SEP): in steady state nothing waits.

use netveil_io::PacketSocket;
use netveil_l2sec::node::Node;
use netveil_wire::PacketBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Tickets of ready-frame hand-overs: issued in the node's lock, marked sent in order.
#[derive(Default)]
pub(super) struct WireOrder {
    issued: AtomicU64,
    sent: AtomicU64,
}

impl WireOrder {
    /// In the node's lock: moves the node's ready frames into `out` (owned buffers) and returns their ticket, or
    /// `None` if the node had nothing ready.
    pub(super) fn take_ready(&self, node: &mut Node, out: &mut Vec<PacketBuf>) -> Option<u64> {
        let had = out.len();
        while let Some(f) = node.poll_transmit() {
            out.push(PacketBuf::from_slice(&f, 0, 0));
        }
        (out.len() > had).then(|| self.issue())
    }

    /// In the node's lock: the next ticket.
    fn issue(&self) -> u64 {
        // Only ever written in the node's lock: no two sections race on it.
        let t = self.issued.load(Ordering::Relaxed) + 1;
        self.issued.store(t, Ordering::Relaxed);
        t
    }

    /// In the node's lock: the last ticket issued, which the data sealed in this section must wait for.
    pub(super) fn issued(&self) -> u64 {
        self.issued.load(Ordering::Relaxed)
    }

    /// Waits until every ticket up to `upto` went out (at once in steady state). False if the engine stops
    /// meanwhile (a thread that took a ticket and died would otherwise hold everyone).
    pub(super) fn wait_sent(&self, upto: u64, stop: &AtomicBool) -> bool {
        let mut spins = 0u32;
        while self.sent.load(Ordering::Acquire) < upto {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        true
    }

    /// Sends the ready frames of `ticket` (after every earlier ticket) and marks it sent; `frames` is emptied.
    pub(super) fn send(
        &self,
        ticket: u64,
        sock: &PacketSocket,
        frames: &mut Vec<PacketBuf>,
        stop: &AtomicBool,
    ) {
        if self.wait_sent(ticket - 1, stop) {
            let _ = sock.send_batch(frames);
        }
        frames.clear();
        self.sent.store(ticket, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// Data sealed after two hand-overs goes out only once both went out, in order; a stopping engine frees it.
    #[test]
    fn data_waits_for_the_tickets_issued_before_it() {
        let o = Arc::new(WireOrder::default());
        let stop = Arc::new(AtomicBool::new(false));
        assert!(o.wait_sent(o.issued(), &stop), "nothing issued: no wait");
        assert_eq!((o.issue(), o.issue()), (1, 2));
        let seen = o.issued();
        let waiter = {
            let (o, stop) = (o.clone(), stop.clone());
            std::thread::spawn(move || o.wait_sent(seen, &stop))
        };
        std::thread::sleep(Duration::from_millis(30));
        assert!(!waiter.is_finished(), "went before ticket 1");
        o.sent.store(1, Ordering::Release);
        std::thread::sleep(Duration::from_millis(30));
        assert!(!waiter.is_finished(), "went before ticket 2");
        o.sent.store(2, Ordering::Release);
        assert!(waiter.join().unwrap());
        // A ticket that never goes out (its thread died) holds the others until the engine stops.
        let t = o.issue();
        let waiter = {
            let (o, stop) = (o.clone(), stop.clone());
            std::thread::spawn(move || o.wait_sent(t, &stop))
        };
        std::thread::sleep(Duration::from_millis(30));
        assert!(!waiter.is_finished());
        stop.store(true, Ordering::Relaxed);
        assert!(!waiter.join().unwrap());
    }
}
