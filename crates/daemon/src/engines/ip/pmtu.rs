//! Path MTU on the transmit path (RFC 4301 section 8.2, as Linux's IPsec does it), for ESP, AH and PSP: a packet
//! whose sealed form would not fit the route to its peer is not sealed; its sender gets an ICMP "fragmentation needed" (IPv4) or "packet
//! too big" (IPv6) with the largest size that fits, so that TCP lowers its segments instead of stalling on packets
//! the kernel refuses to send (raw ESP and AH are not fragmented after encapsulation), or datagrams the kernel
//! fragments (ESP in UDP, PSP).
//!
//! Left to the sockets as before, where the datagram socket fragments the outer packet: an IPv4 packet without DF
//! through ESP in UDP or PSP, and an IPv6 packet of 1,280 bytes or less (IPv6's minimum MTU: its sender cannot go lower).
//! The route's MTU is the kernel's (`IP_MTU` of a connected socket: the path MTU it learned for the peer, else the
//! interface's), asked once per [`REFRESH_S`] per peer and again after the kernel refused a send.

use netveil_wire::icmp::{too_big, TOO_BIG_MAX};
use std::net::IpAddr;

/// How long a route's MTU is used before it is asked again: a link's MTU may rise (a fall shows at once, as a
/// refused send, which makes every route be asked again).
pub(super) const REFRESH_S: u64 = 10;
/// The most "too big" messages a thread sends per second (ICMP errors are rate-limited: RFC 1812 4.3.2.8, RFC 4443
/// 2.4 f); one per flow is enough for its sender to learn.
pub(super) const ICMP_PER_S: usize = 20;
/// The most peers whose route MTU is remembered; beyond, the one asked longest ago is replaced.
const ROUTES: usize = 64;

#[derive(Clone, Copy)]
struct Route {
    dst: IpAddr,
    /// `None`: the kernel could not say (no route); the send will.
    mtu: Option<u32>,
    at: u64,
}

/// One transmit thread's path-MTU state: the routes' MTUs, and the "too big" messages that wait to be written to
/// the TUN after the batch. Allocated once per thread.
pub(crate) struct PathMtu {
    /// The sockets' mark: the route asked about is the one the daemon's marked packets take.
    mark: Option<u32>,
    routes: Vec<Route>,
    /// Fixed MTUs (tests), or none: no route limits anything (`routes` unused).
    fixed: Option<Vec<(IpAddr, u32)>>,
    msgs: Vec<[u8; TOO_BIG_MAX]>,
    lens: [usize; ICMP_PER_S],
    pending: usize,
    /// The second whose messages `sent` counts.
    second: u64,
    sent: usize,
}

impl PathMtu {
    /// The state of a thread whose sockets carry `mark`.
    pub fn new(mark: Option<u32>) -> PathMtu {
        PathMtu {
            mark,
            routes: Vec::with_capacity(ROUTES),
            fixed: None,
            msgs: vec![[0u8; TOO_BIG_MAX]; ICMP_PER_S],
            lens: [0; ICMP_PER_S],
            pending: 0,
            second: 0,
            sent: 0,
        }
    }

    /// Routes with the given MTUs and none other limited (tests; `&[]`: nothing is limited).
    pub fn fixed(mtus: &[(IpAddr, u32)]) -> PathMtu {
        PathMtu {
            fixed: Some(mtus.to_vec()),
            ..PathMtu::new(None)
        }
    }

    /// The MTU of the route to `dst` at `now` (seconds), or `None` where the kernel cannot say.
    pub fn mtu(&mut self, dst: IpAddr, now: u64) -> Option<u32> {
        if let Some(f) = &self.fixed {
            return f.iter().find(|r| r.0 == dst).map(|r| r.1);
        }
        if let Some(r) = self.routes.iter().find(|r| r.dst == dst) {
            if now.saturating_sub(r.at) < REFRESH_S {
                return r.mtu;
            }
        }
        let mtu = netveil_io::udp::route_mtu(dst, self.mark).ok();
        let r = Route { dst, mtu, at: now };
        let at = match self.routes.iter().position(|r| r.dst == dst) {
            Some(i) => Some(i),
            None if self.routes.len() < ROUTES => None,
            // (The one asked longest ago makes room.)
            None => self
                .routes
                .iter()
                .enumerate()
                .min_by_key(|(_, r)| r.at)
                .map(|(i, _)| i),
        };
        match at {
            Some(i) => self.routes[i] = r,
            None => self.routes.push(r),
        }
        mtu
    }

    /// Every route is asked again before its next use (a send was refused: some route's MTU may have fallen).
    pub fn forget(&mut self) {
        self.routes.clear();
    }

    /// Whether a message may be sent at `now` (seconds): this second's are not all sent.
    pub fn may_answer(&mut self, now: u64) -> bool {
        if now != self.second {
            self.second = now;
            self.sent = 0;
        }
        self.sent < ICMP_PER_S && self.pending < ICMP_PER_S
    }

    /// Queues the "too big" message that answers `original` with `mtu`, unless this second's messages are all
    /// sent or none may answer it ([`too_big`]). Returns whether it is queued.
    pub fn answer(&mut self, original: &[u8], mtu: u32, now: u64) -> bool {
        if !self.may_answer(now) {
            return false;
        }
        match too_big(original, mtu, &mut self.msgs[self.pending]) {
            Some(n) => {
                self.lens[self.pending] = n;
                self.pending += 1;
                self.sent += 1;
                true
            }
            None => false,
        }
    }

    /// Hands each queued message to `write` (the TUN's), then forgets them.
    pub fn flush(&mut self, mut write: impl FnMut(&[u8])) {
        for i in 0..self.pending {
            write(&self.msgs[i][..self.lens[i]]);
        }
        self.pending = 0;
    }
}
