//! AF_PACKET → open → TAP.

use netveil_io::{PacketSocket, Tap};
use netveil_l2sec::node::Inbound;
use netveil_wire::PacketBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::{State, BATCH};

pub(super) fn rx_loop(st: &State, tap: &Tap, sock: &PacketSocket) {
    // With offloads, segments are coalesced into the first one's buffer: room for 64 KiB.
    let cap = if tap.offload() {
        65536 + 256
    } else {
        st.mtu as usize + 14 + 320
    };
    let mut bufs: Vec<PacketBuf> = (0..BATCH).map(|_| PacketBuf::new(cap, 0)).collect();
    let mut extra: Vec<PacketBuf> = Vec::new();
    while !st.stop.load(Relaxed) {
        let n = match sock.recv_batch(&mut bufs, 0) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        // The frames for the host, moved to the front of `bufs` in order.
        let mut k = 0;
        let ticket;
        {
            let Ok(mut node) = st.node.lock() else { return };
            let now = Instant::now();
            for i in 0..n {
                if let Ok(Inbound::Deliver) = node.handle_inbound(&mut bufs[i], now) {
                    bufs.swap(k, i);
                    k += 1;
                }
            }
            ticket = st.order.take_ready(&mut node, &mut extra);
        }
        if let Some(t) = ticket {
            st.order.send(t, sock, &mut extra, &st.stop);
        }
        let _ = tap.send_batch(&mut bufs[..k]);
    }
}
