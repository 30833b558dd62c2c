//! TAP → seal → AF_PACKET.

use netveil_io::packet::{MAX_SEGMENTS, TAP_SCRATCH_LEN};
use netveil_io::{PacketSocket, Tap};
use netveil_l2sec::node::Outbound;
use netveil_wire::PacketBuf;
use std::time::Instant;

use super::State;

/// The outbound direction's buffers, owned by whichever thread serves it (see [`super::worker`]).
pub(super) struct TxLane {
    bufs: Vec<PacketBuf>,
    scratch: Vec<u8>,
    headroom: usize,
    send: Vec<usize>,
    out: Vec<PacketBuf>,
    ready: Vec<PacketBuf>,
    /// The last round found frames: traffic flows, so a round reads on (without waiting) to fill its batch.
    flowing: bool,
}

impl TxLane {
    /// Buffers for frames of `mtu` sealed with the node's `overhead` (head, tail).
    pub(super) fn new(overhead: (usize, usize), mtu: u16) -> TxLane {
        let (head, tail) = overhead;
        let headroom = head + 16;
        let cap = headroom + mtu as usize + 14 + tail + 16;
        // Room for a super-frame's segments (up to MAX_SEGMENTS) and then some.
        let batch = 2 * MAX_SEGMENTS;
        TxLane {
            bufs: (0..batch).map(|_| PacketBuf::new(cap, headroom)).collect(),
            scratch: vec![0u8; TAP_SCRATCH_LEN],
            headroom,
            send: Vec::with_capacity(batch),
            out: Vec::with_capacity(batch),
            ready: Vec::new(),
            flowing: false,
        }
    }
}

/// One round, without waiting: what the host sent is read from the TAP, sealed (in the node's lock) and sent
/// (after it). Returns how many frames were read (0: none was waiting), or `None` if the engine must stop.
pub(super) fn serve(st: &State, l: &mut TxLane, tap: &Tap, sock: &PacketSocket) -> Option<usize> {
    let batch = l.bufs.len();
    let mut n = match tap.recv_batch(&mut l.scratch, &mut l.bufs, l.headroom, false) {
        Ok(n) => n,
        // Nothing waiting; or one malformed super-frame (the next read is unaffected).
        Err(_) => {
            l.flowing = false;
            return Some(0);
        }
    };
    // While traffic flows, more of what is waiting while a whole super-frame still fits (at low load a single
    // frame goes at once, without a read that finds nothing).
    if l.flowing {
        while batch - n >= MAX_SEGMENTS {
            match tap.recv_batch(&mut l.scratch, &mut l.bufs[n..], l.headroom, false) {
                Ok(k) => n += k,
                Err(_) => break,
            }
        }
    }
    l.flowing = n > 0;
    l.send.clear();
    let (ticket, seen) = {
        let Ok(mut node) = st.node.lock() else {
            return None;
        };
        let now = Instant::now();
        for (i, b) in l.bufs.iter_mut().enumerate().take(n) {
            if let Ok(Outbound::Send) = node.handle_outbound(b, now) {
                l.send.push(i);
            }
        }
        (
            st.order.take_ready(&mut node, &mut l.ready),
            st.order.issued(),
        )
    };
    if let Some(t) = ticket {
        st.order.send(t, sock, &mut l.ready, &st.stop);
    }
    if !st.order.wait_sent(seen, &st.stop) {
        return None;
    }
    if l.send.len() == n {
        let _ = sock.send_batch(&l.bufs[..n]);
    } else {
        // Rare (frames queued for SEP or dropped): send the sealed ones in order.
        l.out.clear();
        let bufs = &mut l.bufs;
        l.out.extend(
            l.send
                .iter()
                .map(|&i| std::mem::replace(&mut bufs[i], PacketBuf::new(0, 0))),
        );
        let _ = sock.send_batch(&l.out);
        for (&i, b) in l.send.iter().zip(l.out.drain(..)) {
            l.bufs[i] = b;
        }
    }
    Some(n)
}
