//! TAP → seal → AF_PACKET.

use netveil_io::packet::{MAX_SEGMENTS, TAP_SCRATCH_LEN};
use netveil_io::{PacketSocket, Tap};
use netveil_l2sec::node::Outbound;
use netveil_wire::PacketBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use super::State;

pub(super) fn tx_loop(st: &State, tap: &Tap, sock: &PacketSocket) {
    let (head, tail) = st.node.lock().map(|n| n.overhead()).unwrap_or((16, 80));
    let headroom = head + 16;
    let cap = headroom + st.mtu as usize + 14 + tail + 16;
    // Room for a super-frame's segments (up to MAX_SEGMENTS) and then some.
    let batch = 2 * MAX_SEGMENTS;
    let mut bufs: Vec<PacketBuf> = (0..batch).map(|_| PacketBuf::new(cap, headroom)).collect();
    let mut scratch = vec![0u8; TAP_SCRATCH_LEN];
    let mut send: Vec<usize> = Vec::with_capacity(batch);
    let mut extra: Vec<PacketBuf> = Vec::new();
    let mut out: Vec<PacketBuf> = Vec::with_capacity(batch);
    while !st.stop.load(Relaxed) {
        let mut n = match tap.recv_batch(&mut scratch, &mut bufs, headroom, true) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => {
                if st.stop.load(Relaxed) {
                    return;
                }
                continue;
            }
        };
        // More of what is waiting, without waiting, while a whole super-frame still fits.
        while batch - n >= MAX_SEGMENTS {
            match tap.recv_batch(&mut scratch, &mut bufs[n..], headroom, false) {
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => continue,
            }
        }
        send.clear();
        let (ticket, seen);
        {
            let Ok(mut node) = st.node.lock() else { return };
            let now = Instant::now();
            for (i, b) in bufs.iter_mut().enumerate().take(n) {
                if let Ok(Outbound::Send) = node.handle_outbound(b, now) {
                    send.push(i);
                }
            }
            ticket = st.order.take_ready(&mut node, &mut extra);
            seen = st.order.issued();
        }
        if let Some(t) = ticket {
            st.order.send(t, sock, &mut extra, &st.stop);
        }
        if !st.order.wait_sent(seen, &st.stop) {
            return;
        }
        if send.len() == n {
            let _ = sock.send_batch(&bufs[..n]);
        } else {
            // Rare (frames queued for SEP or dropped): send the sealed ones in order.
            out.clear();
            out.extend(
                send.iter()
                    .map(|&i| std::mem::replace(&mut bufs[i], PacketBuf::new(0, 0))),
            );
            let _ = sock.send_batch(&out);
            for (&i, b) in send.iter().zip(out.drain(..)) {
                bufs[i] = b;
            }
        }
    }
}
