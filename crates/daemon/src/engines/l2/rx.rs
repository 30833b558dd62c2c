//! AF_PACKET → open → TAP.

use netveil_io::{PacketSocket, Tap};
use netveil_l2sec::node::Inbound;
use netveil_wire::PacketBuf;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Instant;

use super::{State, BATCH};

/// The inbound direction's buffers, owned by whichever thread serves it (see [`super::worker`]).
pub(super) struct RxLane {
    bufs: Vec<PacketBuf>,
    ready: Vec<PacketBuf>,
}

impl RxLane {
    /// Buffers for frames of `mtu`; with TAP offloads, segments are coalesced into the first one's buffer:
    /// room for 64 KiB.
    pub(super) fn new(mtu: u16, offload: bool) -> RxLane {
        let cap = if offload {
            65536 + 256
        } else {
            mtu as usize + 14 + 320
        };
        RxLane {
            bufs: (0..BATCH).map(|_| PacketBuf::new(cap, 0)).collect(),
            ready: Vec::new(),
        }
    }
}

/// One round, without waiting: what the port received is read (one `recvmmsg`, when `poll` says a frame is there), opened (in the node's lock) and
/// written to the TAP (after it). Returns how many frames were read (0: none was waiting), or `None` if the
/// engine must stop.
pub(super) fn serve(st: &State, l: &mut RxLane, tap: &Tap, sock: &PacketSocket) -> Option<usize> {
    // The socket blocks on receive (its sends must): a poll that does not wait tells whether a frame is there,
    // and as only the lane's holder reads, it still is for the recvmmsg.
    if !readable(sock.as_fd().as_raw_fd(), 0) {
        return Some(0);
    }
    let n = match sock.recv_batch(&mut l.bufs, 0) {
        Ok(n) => n,
        Err(_) => return Some(0),
    };
    // The frames for the host, moved to the front of `bufs` in order.
    let mut k = 0;
    let ticket = {
        let Ok(mut node) = st.node.lock() else {
            return None;
        };
        let now = Instant::now();
        for i in 0..n {
            if let Ok(Inbound::Deliver) = node.handle_inbound(&mut l.bufs[i], now) {
                l.bufs.swap(k, i);
                k += 1;
            }
        }
        st.order.take_ready(&mut node, &mut l.ready)
    };
    if let Some(t) = ticket {
        st.order.send(t, sock, &mut l.ready, &st.stop);
    }
    let _ = tap.send_batch(&mut l.bufs[..k]);
    Some(n)
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
