//! Reauthentication of an IKE SA (swanctl's `reauth_time`, strongSwan's `make_before_break = yes`): when it is
//! due, a new IKE SA for the same connection comes up with a full IKE_SA_INIT and IKE_AUTH (new key exchange, new
//! authentication; no INITIAL_CONTACT, as another IKE SA with the peer exists, see [`Endpoint::send_auth`]). The
//! first CHILD_SA of the old one is re-created in IKE_AUTH, the others with CREATE_CHILD_SA, one after the other;
//! only then is the old IKE SA deleted (its children with it): the data plane always has a CHILD_SA of each.
//! Either side whose `reauth_time` is set does it, whichever was the original initiator (to the peer's current
//! address at `remote_port`). If the new IKE SA fails, the old one stays until `over_time` after its reauth time,
//! then is deleted; the failure names both. A rekey of the old IKE SA keeps its reauth time (a rekey is no new
//! authentication, as strongSwan's `inherit_post`).
//!
//! Both sides may reauthenticate the same IKE SA at the same moment (both have `reauth_time`, with little or no
//! `rand_time`): each one's new IKE SA comes up, and each would be reauthenticated by both sides again, doubling
//! the IKE SAs every period. [`Endpoint::resolve_twins`] keeps one of the two.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::sa::{IkeSa, Reauth, State};
use super::Endpoint;
use crate::event::{Failure, IkeSaId};
use crate::keys::Role;

/// "Never" for a timer.
const FAR: Duration = Duration::from_secs(86400 * 365);

/// Two full handshakes of one connection with one peer are twins (see [`Endpoint::resolve_twins`]) when each
/// started before the other was up, or at most this long after: the two sides' reauthentication timers fire at
/// the same moment give or take a driver's poll, far less than this; any sensible `reauth_time` (and the peer's) is
/// far more. (A window on the start times alone, 30 s before, took a reauthentication with a `reauth_time` below
/// it for a twin of the very SA it replaces.)
const TWINS_SLACK: Duration = Duration::from_secs(1);

impl Endpoint {
    /// When an IKE SA of connection `conn` that comes up now is reauthenticated, and when it goes if that fails:
    /// `reauth - random(0..rand_time)` (the jitter rule of [`Endpoint::ike_rekey_time`]), and `over_time` after
    /// that. `None` without `reauth_time`.
    fn reauth_times(&mut self, conn: usize, now: Instant) -> Option<(Instant, Instant)> {
        let c = &self.connections[conn];
        let (reauth, l) = (c.reauth, c.lifetimes);
        if reauth.is_zero() {
            return None;
        }
        let over = l.life.saturating_sub(l.rekey);
        let jitter = self.jitter(l.rand);
        let at = match reauth.saturating_sub(jitter) {
            d if d.is_zero() => reauth,
            d => d,
        };
        Some((now + at, now + at + over))
    }

    /// Sets the reauthentication times of an SA that just came up (keeping what a replacing SA still has to do).
    pub(super) fn reauth_up(&mut self, sa: &mut IkeSa, now: Instant) {
        match (self.reauth_times(sa.conn, now), &mut sa.reauth) {
            (Some((at, expire)), Some(r)) => {
                r.at = at;
                r.expire = expire;
            }
            (Some((at, expire)), r @ None) => *r = Some(Box::new(Reauth::new(at, expire))),
            (None, Some(r)) => {
                r.at = now + FAR;
                r.expire = now + FAR;
            }
            (None, None) => {}
        }
    }

    /// A rekey replaced `old` by `new` (same authentication): the reauth times and any reauthentication under way
    /// move over.
    pub(super) fn reauth_rekeyed(&mut self, old: &mut IkeSa, new: &mut IkeSa) {
        new.reauth = old.reauth.take();
        let Some(r) = &new.reauth else { return };
        if let Some(by) = r.by {
            if let Some(n) = self.sas.get_mut(&by).and_then(|n| n.reauth.as_mut()) {
                n.of = Some(new.id);
            }
        }
    }

    /// The reauthentication timers of an established SA without a request outstanding: its expiry after a failed
    /// reauthentication (DELETE), or the start of a new IKE SA. True when the SA is being replaced (no IKE rekey
    /// then).
    pub(super) fn reauth_timers(&mut self, sa: &mut IkeSa, now: Instant) -> bool {
        let Some(r) = &sa.reauth else { return false };
        if now >= r.expire {
            self.send_delete_ike(sa, now);
            return true;
        }
        if now >= r.at && r.by.is_none() {
            self.start_reauth(sa, now);
        }
        sa.reauth.as_ref().is_some_and(|r| r.by.is_some())
    }

    /// Starts the new IKE SA that replaces `old`: its first child in IKE_AUTH, the others queued.
    fn start_reauth(&mut self, old: &mut IkeSa, now: Instant) {
        let conn = &self.connections[old.conn];
        let mut cfgs: Vec<usize> = old
            .children
            .iter()
            .filter(|c| !c.replaced)
            .map(|c| c.cfg)
            .collect();
        if cfgs.is_empty() {
            cfgs.push(0);
        }
        if let Some(r) = &mut old.reauth {
            // Not again (a failed one is not retried: the SA goes at its expiry).
            r.at = now + FAR;
        }
        if conn.children.is_empty() || self.sas.len() >= self.limits.ike_sa_max {
            self.reauth_failed(old.conn, old.id);
            return;
        }
        let first = cfgs.remove(0);
        let remote = SocketAddr::new(old.remote.ip(), conn.remote_port);
        let local = SocketAddr::new(old.local.ip(), 500);
        let id = self.new_id();
        let spi_i = self.new_ike_spi();
        let mut sa = IkeSa::new(id, old.conn, Role::Initiator, spi_i, 0, local, remote, now);
        sa.hs_mut().first_child = Some(first);
        sa.by_reauth = true;
        let mut r = Reauth::new(now + FAR, now + FAR);
        r.of = Some(old.id);
        r.queue = cfgs;
        sa.reauth = Some(Box::new(r));
        self.by_spi.insert(spi_i, id);
        self.start_init(&mut sa, now);
        self.sas.insert(id, Box::new(sa));
        if let Some(r) = &mut old.reauth {
            r.by = Some(id);
        }
    }

    /// On a new IKE SA replacing an old one, once a response completed: the next child to re-create, or, all of
    /// them done, the DELETE of the old IKE SA.
    pub(super) fn reauth_next(&mut self, sa: &mut IkeSa, now: Instant) {
        let old = loop {
            if sa.pending.is_some() || sa.state != State::Established {
                return;
            }
            let Some(r) = sa.reauth.as_mut() else { return };
            let Some(old) = r.of else { return };
            if r.queue.is_empty() {
                r.of = None;
                break old;
            }
            let cfg = r.queue.remove(0);
            self.send_create_child(sa, cfg, None, now);
        };
        if let Some(mut o) = self.sas.remove(&old) {
            if let Some(r) = &mut o.reauth {
                r.by = None;
            }
            if o.state == State::Established {
                self.send_delete_ike(&mut o, now);
            }
            self.sas.insert(old, o);
        }
    }

    /// A new IKE SA replacing `sa.reauth.of` went before it was done: the old one stays until its expiry.
    pub(super) fn reauth_gone(&mut self, sa: &IkeSa) {
        let Some(old) = sa.reauth.as_ref().and_then(|r| r.of) else {
            return;
        };
        let Some(o) = self.sas.get_mut(&old) else {
            return;
        };
        if let Some(r) = &mut o.reauth {
            r.by = None;
        }
        let conn = o.conn;
        self.reauth_failed(conn, old);
    }

    /// `sa` just came up with a full handshake. Another IKE SA of the same connection with the same peer (address
    /// and authenticated identity) that also came up with a full handshake, the two concurrent (each started before
    /// the other was up, give or take [`TWINS_SLACK`]), one of the two a reauthentication of ours and neither the SA
    /// the other replaces, is its twin: both sides reauthenticated at the same moment.
    /// (Many IKE SAs of one connection from one address and identity, none of them reauthenticating another, are
    /// left alone, as strongSwan's default `unique = no` does.) One of the two is one too many: the
    /// one that holds the lowest of the four SPIs goes, deleted by the side that initiated it, as RFC 7296 2.8.1
    /// settles colliding rekeys by the lowest nonce (the nonces are gone once an SA is up; the SPIs, random as well,
    /// are known to both sides, which therefore pick the same one). The other side only stops its own
    /// reauthentication timer of the one that goes. A reauthentication of ours whose new SA goes leaves the old SA
    /// to the peer's reauthentication (or to its expiry), without a failure.
    pub(super) fn resolve_twins(&mut self, sa: &mut IkeSa, now: Instant) {
        sa.set_up_at(now);
        let replaces = |a: &IkeSa, b: &IkeSa| a.reauth.as_ref().is_some_and(|r| r.of == Some(b.id));
        // Each started before the other was up (give or take TWINS_SLACK): concurrent handshakes.
        let concurrent = |a: &IkeSa, b: &IkeSa| b.created <= a.up_at() + TWINS_SLACK;
        let twin = self
            .sas
            .values()
            .filter(|o| {
                o.id != sa.id
                    && (o.by_reauth || sa.by_reauth)
                    && o.handshake
                    && o.state == State::Established
                    && o.conn == sa.conn
                    && o.remote.ip() == sa.remote.ip()
                    && o.peer_id == sa.peer_id
                    && !replaces(sa, o)
                    && !replaces(o, sa)
                    && concurrent(sa, o)
                    && concurrent(o, sa)
            })
            .map(|o| o.id)
            .next();
        let Some(twin) = twin else { return };
        let Some(mut t) = self.sas.remove(&twin) else {
            return;
        };
        let low = |s: &IkeSa| s.spi_i.min(s.spi_r);
        let loser: &mut IkeSa = if low(sa) < low(&t) { sa } else { &mut t };
        if let Some(r) = &mut loser.reauth {
            // Never reauthenticated by us: it goes.
            r.at = now + FAR;
            r.expire = now + FAR;
        }
        if loser.role == Role::Initiator {
            if let Some(old) = loser.reauth.as_mut().and_then(|r| r.of.take()) {
                if let Some(r) = self.sas.get_mut(&old).and_then(|o| o.reauth.as_mut()) {
                    r.by = None;
                }
            }
            self.send_delete_ike(loser, now);
        }
        self.sas.insert(twin, t);
    }

    fn reauth_failed(&mut self, conn: usize, old: IkeSaId) {
        self.fail(conn, Some(old), Failure::ReauthFailed);
    }
}
