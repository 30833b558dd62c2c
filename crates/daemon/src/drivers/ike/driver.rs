//! The driver loop: one thread owns the IKE sockets and the clock and moves datagrams, timeouts and events
//! between them and the sans-I/O state machine ([`Machine`], which `netveil_ike::machine::Endpoint` implements;
//! see [`super::endpoint`]).
//!
//! Each turn: wait on every socket until the machine's next timeout (at most [`TURN`], to see a stop request);
//! hand it every datagram received (to a configured local address; on port 4500 only those with the non-ESP
//! marker, which is stripped); run its timeout when due; send what it queued (the marker added on 4500); apply
//! its events: CHILD_SAs installed and removed through the [`Installer`], everything logged with the reasons a
//! user can act on and never a key.

use super::install::Installer;
use super::machine::{explain, Machine};
use super::sockets::Sockets;
use netveil_ike::event::{Event, Failure, IkeSaId};
use netveil_ike::machine::Started;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest wait of one turn (how soon a stop request is seen).
pub const TURN: Duration = Duration::from_millis(100);
/// How long an initiation for an acquire keeps further acquires of its child from initiating again, if neither
/// its CHILD_SA nor a failure came (every retransmission of the default schedule is over by then).
pub const TRAP_PENDING: Duration = Duration::from_secs(60);

/// What the loop counts (tests, and `status` later).
#[derive(Debug, Default)]
pub struct Counters {
    pub received: std::sync::atomic::AtomicU64,
    pub dropped: std::sync::atomic::AtomicU64,
    pub sent: std::sync::atomic::AtomicU64,
    pub children_up: std::sync::atomic::AtomicU64,
    pub install_errors: std::sync::atomic::AtomicU64,
}

/// The loop's state.
pub struct Driver {
    pub machine: Box<dyn Machine>,
    pub sockets: Sockets,
    pub installer: Installer,
    /// (connection, child) to initiate at start (`start_action = start`).
    pub start: Vec<(String, String)>,
    pub counters: Arc<Counters>,
    /// The IKE SAs up (from the events), deleted at stop.
    pub ike_sas: Vec<IkeSaId>,
    /// The control socket's requests ([`super::control`]), if it is connected.
    pub control: Option<super::control::Hook>,
    /// New CHILD_SAs installed together ahead of their events ([`Installer::install_many`]): the result and the
    /// time the whole install took, by inbound SPI.
    pub preinstalled:
        std::collections::HashMap<u32, (Result<u64, super::install::InstallError>, Duration)>,
}

impl Driver {
    /// Runs until `stop`; then deletes every IKE SA that is up (the peer hears of it: one try, no wait for the
    /// answer) and removes every CHILD_SA it installed.
    pub fn run(mut self, stop: &AtomicBool) {
        let now = Instant::now();
        // The children of one connection share its IKE SA: the first starts it, the others go in it with
        // CREATE_CHILD_SA once it is up (strongSwan, with `unique = replace`, would let a second IKE SA replace the
        // first and take its children down).
        for (conn, child) in std::mem::take(&mut self.start) {
            match self.machine.start_child(&conn, Some(&child), now) {
                Ok(Started::New(id)) => tracing::info!(
                    "ike: initiating connection {conn} (child {child}) as IKE SA {}",
                    id.0
                ),
                Ok(Started::Queued(id) | Started::Up(id)) => tracing::info!(
                    "ike: initiating child {child} of connection {conn} in IKE SA {} (CREATE_CHILD_SA once it is up)",
                    id.0
                ),
                Err(e) => tracing::warn!("ike: cannot initiate connection {conn}: {e}"),
            }
        }
        self.flush();
        while !stop.load(Relaxed) {
            self.turn(TURN);
        }
        let now = Instant::now();
        // Our own deletes: no close_action, no trap.
        self.installer.closing.extend(self.ike_sas.iter().copied());
        for t in self.installer.traps.iter_mut() {
            t.armed = false;
            t.start_action = netveil_ike::config::Action::None;
            t.dpd_action = netveil_ike::config::Action::None;
            t.close_action = netveil_ike::config::Action::None;
        }
        for id in std::mem::take(&mut self.ike_sas) {
            if let Err(e) = self.machine.terminate(id, now) {
                tracing::debug!("ike: IKE SA {} at stop: {e}", id.0);
            }
        }
        self.flush();
        self.installer.remove_all();
    }

    /// One turn of the loop, waiting at most `max_wait` for a datagram.
    pub fn turn(&mut self, max_wait: Duration) {
        let now = Instant::now();
        let wait = self
            .machine
            .poll_timeout()
            .map_or(max_wait, |t| t.saturating_duration_since(now).min(max_wait));
        let mut got = Vec::new();
        if let Err(e) = self.sockets.receive(wait, &mut got) {
            tracing::warn!("ike: receiving: {e}");
            std::thread::sleep(wait.min(Duration::from_millis(10)));
        }
        let now = Instant::now();
        for d in got {
            match d {
                Ok(d) => {
                    self.counters.received.fetch_add(1, Relaxed);
                    self.machine
                        .handle_datagram(now, d.local, d.remote, &d.bytes);
                }
                Err(()) => {
                    self.counters.dropped.fetch_add(1, Relaxed);
                }
            }
        }
        let traffic = self.installer.traffic(now);
        if !traffic.is_empty() {
            self.machine.child_traffic(&traffic, now);
        }
        if self.machine.poll_timeout().is_some_and(|t| t <= now) {
            self.machine.handle_timeout(now);
        }
        self.acquired(now);
        if let Some(c) = &mut self.control {
            c.service(&mut *self.machine, &mut self.installer, now);
        }
        self.flush();
        if let Some(c) = &mut self.control {
            c.settle();
        }
    }

    /// The IP engine's acquires: traffic for a configured child's policy, which has no CHILD_SA. A trapped child
    /// that is not up and not being negotiated is initiated: CREATE_CHILD_SA in an established IKE SA of its
    /// connection, else a new IKE SA. The packet itself was dropped by the engine (not held: the sender's
    /// retransmission, or the next ping, goes through once the CHILD_SA is up, as with strongSwan's traps without
    /// a packet cache). Rate: the engine reports at most one acquire per policy and second, and a child being
    /// negotiated is not initiated again until it is up or failed (or [`TRAP_PENDING`] passed).
    fn acquired(&mut self, now: Instant) {
        let Some(rx) = self.installer.acquires.as_ref() else {
            return;
        };
        let got: Vec<crate::runtime::sa_port::Acquire> = rx.try_iter().collect();
        for a in got {
            let Some(t) = self.installer.trap_of(&a.policy) else {
                continue;
            };
            let (conn, child) = (t.connection.clone(), t.child.clone());
            if !t.armed {
                tracing::debug!(
                    "ike: traffic for child {child} of connection {conn} dropped (policy {}, {}): not trapped",
                    a.policy,
                    a.flow
                );
                continue;
            }
            if t.pending
                .is_some_and(|p| now.saturating_duration_since(p) < TRAP_PENDING)
            {
                continue;
            }
            if self.installer.child_up(&conn, &child) {
                continue;
            }
            tracing::info!(
                "ike: acquire for child {child} of connection {conn} (policy {}, {}): initiating",
                a.policy,
                a.flow
            );
            self.start_child(&conn, &child, now);
        }
    }

    /// Initiates `child` of `conn`: in the connection's IKE SA if it has one (CREATE_CHILD_SA, queued while that
    /// SA is being set up), else in a new IKE SA (see [`Machine::start_child`]).
    fn start_child(&mut self, conn: &str, child: &str, now: Instant) {
        if let Some(t) = self.installer.trap(conn, child) {
            t.pending = Some(now);
        }
        match self.machine.start_child(conn, Some(child), now) {
            Ok(Started::New(id)) => tracing::info!(
                "ike: initiating child {child} of connection {conn} as IKE SA {}",
                id.0
            ),
            Ok(Started::Queued(id)) => tracing::info!(
                "ike: initiating child {child} of connection {conn} in IKE SA {}",
                id.0
            ),
            Ok(Started::Up(id)) => {
                if let Some(t) = self.installer.trap(conn, child) {
                    t.pending = None;
                }
                tracing::debug!(
                    "ike: child {child} of connection {conn} is up in IKE SA {} already",
                    id.0
                )
            }
            Err(e) => {
                if let Some(t) = self.installer.trap(conn, child) {
                    t.pending = None;
                }
                tracing::warn!("ike: cannot initiate child {child} of connection {conn}: {e}")
            }
        }
    }

    /// After a batch of events: the children that went down (not by a rekey, not by our own delete) get their
    /// action: `dpd_action` when their IKE SA died of a timeout (the peer did not answer), else `close_action`
    /// (the peer deleted them). Start initiates again now; trap arms the child for the next acquire.
    fn after_events(&mut self, now: Instant) {
        let downs = std::mem::take(&mut self.installer.downs);
        let dead = std::mem::take(&mut self.installer.dead);
        for (ike_sa, conn, child) in downs {
            if self.installer.closing.contains(&ike_sa) {
                continue;
            }
            let Some(t) = self.installer.trap(&conn, &child) else {
                continue;
            };
            let (why, action) = if dead.contains(&ike_sa) {
                ("dpd_action", t.dpd_action)
            } else {
                ("close_action", t.close_action)
            };
            match action {
                netveil_ike::config::Action::None => {}
                netveil_ike::config::Action::Trap => {
                    t.armed = true;
                    t.pending = None;
                    tracing::info!(
                        "ike: child {child} of connection {conn} down: trapped ({why}), the next covered packet                          initiates it"
                    );
                }
                netveil_ike::config::Action::Start => {
                    tracing::info!(
                        "ike: child {child} of connection {conn} down: restarting ({why})"
                    );
                    if !self.installer.child_up(&conn, &child) {
                        self.start_child(&conn, &child, now);
                    }
                }
            }
        }
        let up = &self.installer.ike_sas;
        self.installer.closing.retain(|id| up.contains_key(id));
    }

    /// Sends what the machine queued and applies its events. A new or rekeyed CHILD_SA is installed before the
    /// datagrams go out: as responder, the IKE_AUTH or CREATE_CHILD_SA answer is what tells the peer to start
    /// sending, and its first packets would otherwise meet no SA or policy here (installing takes tens of
    /// milliseconds with the nftables policy rules). A rekey's outbound SA moves only when the old CHILD_SA goes
    /// (see [`Installer`]), so installing first never sends with keys the peer lacks. The new CHILD_SAs' events
    /// (their log lines) are applied after the answer went, which they no longer delay.
    fn flush(&mut self) {
        let mut events = Vec::new();
        while let Some(ev) = self.machine.poll_event() {
            events.push(ev);
        }
        let install_first = events.iter().any(|e| matches!(e, Event::ChildSaUp(_)));
        if install_first {
            let rekey = events
                .iter()
                .any(|e| matches!(e, Event::ChildSaUp(c) if c.replaces.is_some()));
            // The events before the first new CHILD_SA (its IKE SA's IkeSaUp) keep their place before it.
            let first = events
                .iter()
                .position(|e| matches!(e, Event::ChildSaUp(_)))
                .unwrap_or(0);
            for ev in events.drain(..first) {
                self.apply(ev);
            }
            // The new CHILD_SAs of the batch go in as one change (under load, the answers of many IKE_AUTH
            // requests received in one turn: one snapshot for all of them).
            let new: Vec<&netveil_ike::event::ChildSa> = events
                .iter()
                .filter_map(|e| match e {
                    Event::ChildSaUp(c) if c.replaces.is_none() => Some(&**c),
                    _ => None,
                })
                .collect();
            let t0 = Instant::now();
            let results = match new[..] {
                [] => Vec::new(),
                [c] => vec![self.installer.install(c)],
                _ => self.installer.install_many(&new),
            };
            let took = t0.elapsed();
            for (c, r) in new.iter().zip(results) {
                self.preinstalled.insert(c.inbound.spi, (r, took));
            }
            // The rest of the events (their log lines, a few microseconds each) follow the answer, unless a rekey
            // is among them: its install keeps its place among the batch's events, all before the answer.
            if rekey {
                for ev in events.drain(..) {
                    self.apply(ev);
                }
            }
        }
        while let Some(t) = self.machine.poll_transmit() {
            match self.sockets.send(&t) {
                Ok(()) => {
                    self.counters.sent.fetch_add(1, Relaxed);
                }
                Err(e) => tracing::warn!(
                    "ike: sending {} bytes from {} to {}: {e}",
                    t.bytes.len(),
                    t.local,
                    t.remote
                ),
            }
        }
        for ev in events {
            self.apply(ev);
        }
        self.after_events(Instant::now());
        // What the actions initiated goes out now.
        while let Some(t) = self.machine.poll_transmit() {
            match self.sockets.send(&t) {
                Ok(()) => {
                    self.counters.sent.fetch_add(1, Relaxed);
                }
                Err(e) => tracing::warn!("ike: sending to {}: {e}", t.remote),
            }
        }
    }

    /// Removes a CHILD_SA; one that really went (not replaced by a rekey) is noted for its action after the batch.
    fn remove_child(
        &mut self,
        ike_sa: IkeSaId,
        inbound_spi: u32,
        outbound_spi: u32,
    ) -> Result<bool, super::install::InstallError> {
        let of = self.installer.child_of(inbound_spi);
        let ours = self.installer.closing_children.remove(&inbound_spi);
        let r = self.installer.remove(inbound_spi, outbound_spi);
        if let (Ok(true), Some((conn, ch)), false) = (&r, of, ours) {
            self.installer.downs.push((ike_sa, conn, ch));
        }
        r
    }

    fn apply(&mut self, ev: Event) {
        if let Some(c) = &mut self.control {
            c.notice(&ev);
        }
        match ev {
            Event::IkeSaUp { ike_sa, connection } => {
                if !self.ike_sas.contains(&ike_sa) {
                    self.ike_sas.push(ike_sa);
                }
                self.installer.ike_sas.insert(ike_sa, connection.clone());
                let p = self.machine.ike_proposal(ike_sa).unwrap_or_default();
                tracing::info!(
                    "ike: IKE SA {} of connection {connection} established ({p})",
                    ike_sa.0
                )
            }
            Event::IkeSaDown { ike_sa, connection } => {
                self.ike_sas.retain(|i| *i != ike_sa);
                self.installer.ike_sas.remove(&ike_sa);
                tracing::info!("ike: IKE SA {} of connection {connection} deleted", ike_sa.0)
            }
            Event::ChildSaUp(c) => match self
                .preinstalled
                .remove(&c.inbound.spi)
                .map_or_else(
                    || {
                        let t0 = Instant::now();
                        let r = self.installer.install(&c);
                        (t0.elapsed(), r)
                    },
                    |(r, took)| (took, r),
                ) {
                (took, Ok(n)) => {
                    self.counters.children_up.fetch_add(1, Relaxed);
                    if let Some(t) = self.installer.trap(&c.connection, &c.child) {
                        t.pending = None;
                        t.armed = t.start_action == netveil_ike::config::Action::Trap;
                    }
                    if c.replaces.is_none() {
                        if let Some(d) = self.installer.last_install {
                            tracing::debug!(
                                "ike: CHILD_SA {} installed in {} us (SAs added, policies bound)",
                                c.child,
                                d.as_micros()
                            );
                        }
                    }
                    let (i, o) = Installer::sa_names(n);
                    // The install's time (`netveil bench --ike` reads it: the exchange and the install apart).
                    tracing::info!(
                        "ike: CHILD_SA {} of connection {} {} ({}, SPIs in {:#010x} out {:#010x}, SAs {i} and {o}{}, install {:.3} ms)",
                        c.child,
                        c.connection,
                        if c.replaces.is_some() { "rekeyed" } else { "installed" },
                        c.proposal,
                        c.inbound.spi,
                        c.outbound.spi,
                        if c.udp_encap { ", UDP-encapsulated" } else { "" },
                        took.as_secs_f64() * 1e3
                    )
                }
                (_, Err(e)) => {
                    self.counters.install_errors.fetch_add(1, Relaxed);
                    tracing::error!(
                        "ike: CHILD_SA {} of connection {} negotiated but not installed: {e}",
                        c.child,
                        c.connection
                    )
                }
            },
            Event::ChildSaDown {
                ike_sa,
                child,
                inbound_spi,
                outbound_spi,
            } => match self.remove_child(ike_sa, inbound_spi, outbound_spi) {
                Ok(true) => tracing::info!(
                    "ike: CHILD_SA {child} of IKE SA {} removed (SPIs in {inbound_spi:#010x} out {outbound_spi:#010x})",
                    ike_sa.0
                ),
                Ok(false) => tracing::debug!(
                    "ike: CHILD_SA {child} (SPI {inbound_spi:#010x}) was not installed or already replaced"
                ),
                Err(e) => tracing::error!("ike: CHILD_SA {child}: {e}"),
            },
            Event::Failed {
                connection,
                ike_sa,
                child,
                failure,
            } => {
                if let (Some(id), Failure::Timeout) = (ike_sa, &failure) {
                    self.installer.dead.insert(id);
                }
                // A child's failure ends that child's initiation; an IKE SA's, those of every child in it.
                for t in self.installer.traps.iter_mut() {
                    if t.connection == connection && child.as_ref().is_none_or(|c| *c == t.child) {
                        t.pending = None;
                    }
                }
                let sa = ike_sa.map_or(String::new(), |s| format!(" (IKE SA {})", s.0));
                let ch = child.map_or(String::new(), |c| format!(", child {c}"));
                tracing::warn!("ike: connection {connection}{sa}{ch}: {}", explain(&failure));
            }
        }
    }
}
