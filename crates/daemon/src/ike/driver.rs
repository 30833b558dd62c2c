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
use super::sockets::Sockets;
use netveil_ike::event::{Event, Failure, IkeSaId, Transmit};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest wait of one turn (how soon a stop request is seen).
pub const TURN: Duration = Duration::from_millis(100);

/// What the driver needs of the IKE state machine: `netveil_ike::machine::Endpoint`'s API (crates/ike, see
/// `api.md`), as a trait so that the loop is tested with a scripted machine.
pub trait Machine: Send {
    fn initiate(
        &mut self,
        connection: &str,
        child: Option<&str>,
        now: Instant,
    ) -> Result<IkeSaId, String>;
    /// Deletes an IKE SA (INFORMATIONAL DELETE; its children go with it).
    fn terminate(&mut self, ike_sa: IkeSaId, now: Instant) -> Result<(), String>;
    fn handle_datagram(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        bytes: &[u8],
    );
    fn handle_timeout(&mut self, now: Instant);
    fn poll_transmit(&mut self) -> Option<Transmit>;
    fn poll_event(&mut self) -> Option<Event>;
    fn poll_timeout(&self) -> Option<Instant>;
}

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
}

impl Driver {
    /// Runs until `stop`; then deletes every IKE SA that is up (the peer hears of it: one try, no wait for the
    /// answer) and removes every CHILD_SA it installed.
    pub fn run(mut self, stop: &AtomicBool) {
        let now = Instant::now();
        for (conn, child) in std::mem::take(&mut self.start) {
            match self.machine.initiate(&conn, Some(&child), now) {
                Ok(id) => tracing::info!(
                    "ike: initiating connection {conn} (child {child}) as IKE SA {}",
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
        if self.machine.poll_timeout().is_some_and(|t| t <= now) {
            self.machine.handle_timeout(now);
        }
        self.flush();
    }

    /// Sends what the machine queued and applies its events. A new CHILD_SA is installed before the datagrams go
    /// out: as responder, the IKE_AUTH or CREATE_CHILD_SA answer is what tells the peer to start sending, and its
    /// first packets would otherwise meet no SA or policy here (installing takes tens of milliseconds with the
    /// nftables policy rules). A rekey keeps the old order: answer first, so that the peer has the new inbound SA
    /// soon after this side's outbound SA moves to it.
    fn flush(&mut self) {
        let mut events = Vec::new();
        while let Some(ev) = self.machine.poll_event() {
            events.push(ev);
        }
        let install_first = events
            .iter()
            .any(|e| matches!(e, Event::ChildSaUp(c) if c.replaces.is_none()));
        if install_first {
            for ev in events.drain(..) {
                self.apply(ev);
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
    }

    fn apply(&mut self, ev: Event) {
        match ev {
            Event::IkeSaUp { ike_sa, connection } => {
                if !self.ike_sas.contains(&ike_sa) {
                    self.ike_sas.push(ike_sa);
                }
                tracing::info!("ike: IKE SA {} of connection {connection} established", ike_sa.0)
            }
            Event::IkeSaDown { ike_sa, connection } => {
                self.ike_sas.retain(|i| *i != ike_sa);
                tracing::info!("ike: IKE SA {} of connection {connection} deleted", ike_sa.0)
            }
            Event::ChildSaUp(c) => match (Instant::now(), self.installer.install(&c)) {
                (t0, Ok(n)) => {
                    self.counters.children_up.fetch_add(1, Relaxed);
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
                        t0.elapsed().as_secs_f64() * 1e3
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
            } => match self.installer.remove(inbound_spi, outbound_spi) {
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
                failure,
            } => {
                let sa = ike_sa.map_or(String::new(), |s| format!(" (IKE SA {})", s.0));
                tracing::warn!("ike: connection {connection}{sa}: {}", explain(&failure));
            }
        }
    }
}

/// A failure as a user can act on it.
pub fn explain(f: &Failure) -> String {
    let ts = |v: &[netveil_ike::config::TsSpec]| {
        v.iter()
            .map(|t| {
                let mut s = format!("{}/{}", t.addr, t.prefix);
                if t.protocol != 0 || t.ports != (0, 65535) {
                    s.push_str(&format!("[{}/{}-{}]", t.protocol, t.ports.0, t.ports.1));
                }
                s
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match f {
        Failure::NoProposalChosen { ours, theirs } => format!(
            "no proposal in common: ours {}, the peer's {} (align proposals / esp_proposals with the peer's)",
            ours.join(", "),
            theirs.join(", ")
        ),
        Failure::TsUnacceptable { ours, theirs } => format!(
            "traffic selectors do not intersect: ours {}, the peer's {} (check local_ts / remote_ts on both sides)",
            ts(ours),
            ts(theirs)
        ),
        Failure::AuthenticationFailed { id, by_peer: false } => format!(
            "the peer failed to authenticate as {id} (check the pre-shared key and remote.id)"
        ),
        Failure::AuthenticationFailed { id, by_peer: true } => format!(
            "the peer refused our authentication as {id} (check the pre-shared key and local.id, and the peer's \
             remote id)"
        ),
        Failure::Timeout => "the peer did not answer after every retransmission (is it reachable on UDP 500 \
                             and 4500, and does it run?)"
            .into(),
        Failure::PeerError { notify, name } => format!("the peer answered with error {name} ({notify})"),
        Failure::NoMatchingConnection => "no connection matches the peer's addresses and identities \
                                           (check local_addrs, remote_addrs and the ids)"
            .into(),
    }
}
