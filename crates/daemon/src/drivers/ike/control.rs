//! The IKE driver on the control socket: `netveil status` (its IKE SAs and their children, as `swanctl
//! --list-sas`), `netveil initiate`, `netveil terminate` and the IKE half of `netveil keys --wireshark`.
//!
//! The driver's thread owns the state machine, so the control socket's threads never touch it: each request is a
//! [`Command`] sent down a channel with a channel for its answer; the driver takes the commands at each turn of its
//! loop ([`Hook::service`], at most [`super::driver::TURN`] late) and watches its events for the outcomes that
//! `initiate` and `terminate` wait for ([`Hook::notice`]). No lock is held across the machine's work.
//!
//! The keys go only to the `ike-keys` request (root's control socket, `netveil keys --wireshark`), never to a log.

use super::install::Installer;
use super::machine::{explain, Machine};
use crate::runtime::engine::Control;
use netveil_control::ike::{IkeChild, IkeSa, IkeStatus};
use netveil_control::{Request, Status};
use netveil_ike::event::{Event, IkeSaId};
use netveil_ike::machine::Started;
use serde_json::{json, Value};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::time::{Duration, Instant};

/// How long a status or keys request waits for the driver (a turn is 100 ms; the driver is stuck if it takes this).
const ANSWER_WAIT: Duration = Duration::from_secs(2);
/// The longest `initiate` / `terminate` wait a request may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(300);
/// Outstanding waits at most (a client gone leaves its wait until the outcome or [`MAX_WAIT`]).
const MAX_WAITERS: usize = 64;

/// One IKE SA's state as the driver sees it: the machine's status, and per child the instance its SAs are
/// installed as (`ike-N-in` / `ike-N-out`; `None`: not installed).
pub struct Snapshot {
    pub sa: netveil_ike::machine::IkeSaStatus,
    pub instances: Vec<Option<u64>>,
}

/// What `terminate` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every IKE SA of a connection.
    Connection(String),
    /// One IKE SA by its unique id.
    IkeSa(u64),
    /// Every CHILD_SA of this name (the IKE SAs stay).
    Child(String),
}

/// A request to the driver's thread.
pub enum Command {
    Status(SyncSender<Vec<Snapshot>>),
    /// Each IKE SA's line of Wireshark's `ikev2_decryption_table`.
    Keys(SyncSender<Vec<zeroize::Zeroizing<String>>>),
    Initiate {
        connection: String,
        child: Option<String>,
        done: SyncSender<Outcome>,
    },
    Terminate {
        target: Target,
        done: SyncSender<Outcome>,
    },
}

/// The answer to `initiate` or `terminate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Established, or gone.
    Done(String),
    /// Refused at once: an unknown name, nothing to terminate (the user's to fix).
    Refused(String),
    /// The negotiation failed (as the log says why).
    Failed(String),
}

/// What a waiting `initiate` or `terminate` waits for.
enum Goal {
    /// A CHILD_SA of this IKE SA up (of this name, or any).
    ChildUp(IkeSaId, Option<String>),
    /// These IKE SAs down.
    IkeDown(Vec<IkeSaId>),
    /// The CHILD_SAs of these inbound SPIs down.
    ChildDown(Vec<(IkeSaId, u32)>),
}

struct Waiter {
    goal: Goal,
    done: SyncSender<Outcome>,
    until: Instant,
    /// Events seen that settle it: failures first.
    failure: Option<String>,
    success: Option<String>,
}

/// The driver's end: commands to take, and the waits outstanding.
pub struct Hook {
    rx: Receiver<Command>,
    /// The configured connections and their children's names.
    connections: Vec<(String, Vec<String>)>,
    waiters: Vec<Waiter>,
}

/// The control socket's end: sends commands to the driver.
pub struct IkeControl {
    tx: Sender<Command>,
}

/// A connected pair: the driver's [`Hook`] and the control socket's [`IkeControl`].
pub fn pair(connections: Vec<(String, Vec<String>)>) -> (Hook, IkeControl) {
    let (tx, rx) = mpsc::channel();
    (
        Hook {
            rx,
            connections,
            waiters: Vec::new(),
        },
        IkeControl { tx },
    )
}

impl Hook {
    /// Takes the commands sent since the last turn (on the driver's thread).
    pub fn service(&mut self, m: &mut dyn Machine, installer: &mut Installer, now: Instant) {
        while let Ok(c) = self.rx.try_recv() {
            match c {
                Command::Status(reply) => {
                    let v = m
                        .status(now)
                        .into_iter()
                        .map(|sa| Snapshot {
                            instances: sa
                                .children
                                .iter()
                                .map(|c| installer.instance(c.inbound_spi))
                                .collect(),
                            sa,
                        })
                        .collect();
                    let _ = reply.try_send(v);
                }
                Command::Keys(reply) => {
                    let v = m
                        .wireshark_keys()
                        .into_iter()
                        .map(|(_, k)| zeroize::Zeroizing::new(k.line().to_string()))
                        .collect();
                    let _ = reply.try_send(v);
                }
                Command::Initiate {
                    connection,
                    child,
                    done,
                } => {
                    // The child waited for: the one named, else the connection's first (what the machine starts).
                    let want = child.clone().or_else(|| {
                        self.connections
                            .iter()
                            .find(|(c, _)| *c == connection)
                            .and_then(|(_, ch)| ch.first().cloned())
                    });
                    let name = want.as_deref().unwrap_or("?");
                    match m.start_child(&connection, child.as_deref(), now) {
                        Ok(Started::Up(id)) => {
                            let _ = done.try_send(Outcome::Done(format!(
                                "CHILD_SA {name} of connection {connection} is up already (IKE SA #{})",
                                id.0
                            )));
                        }
                        Ok(s) => {
                            let id = s.ike_sa().0;
                            match s {
                                Started::New(_) => tracing::info!(
                                    "ike: initiating connection {connection} (child {name}) as IKE SA {id} \
                                     (control request)"
                                ),
                                _ => tracing::info!(
                                    "ike: initiating child {name} of connection {connection} in IKE SA {id} \
                                     (control request)"
                                ),
                            }
                            self.wait(Goal::ChildUp(s.ike_sa(), want), done, now);
                        }
                        Err(e) => {
                            let _ = done.try_send(Outcome::Refused(e));
                        }
                    }
                }
                Command::Terminate { target, done } => {
                    self.terminate(m, installer, target, done, now)
                }
            }
        }
        // Waits that timed out or whose client is gone.
        self.waiters.retain(|w| w.until > now);
    }

    fn wait(&mut self, goal: Goal, done: SyncSender<Outcome>, now: Instant) {
        if self.waiters.len() >= MAX_WAITERS {
            self.waiters.remove(0);
        }
        self.waiters.push(Waiter {
            goal,
            done,
            until: now + MAX_WAIT,
            failure: None,
            success: None,
        });
    }

    /// Our own delete: the SAs it takes down are noted in `installer` (`closing`), so that their children going
    /// down gets no `close_action` (which would start or trap them again).
    fn terminate(
        &mut self,
        m: &mut dyn Machine,
        installer: &mut Installer,
        target: Target,
        done: SyncSender<Outcome>,
        now: Instant,
    ) {
        let refuse = |why: String| {
            let _ = done.try_send(Outcome::Refused(why));
        };
        let sas = m.status(now);
        match target {
            Target::Connection(name) if !self.connections.iter().any(|(c, _)| *c == name) => {
                refuse(format!("no connection named '{name}'"))
            }
            Target::Child(name) if !self.connections.iter().any(|(_, ch)| ch.contains(&name)) => {
                refuse(format!("no child named '{name}' in any connection"))
            }
            Target::Connection(_) | Target::IkeSa(_) => {
                let ids: Vec<IkeSaId> = sas
                    .iter()
                    .filter(|s| match &target {
                        Target::Connection(n) => s.connection == *n,
                        Target::IkeSa(id) => s.id.0 == *id,
                        Target::Child(_) => false,
                    })
                    .map(|s| s.id)
                    .collect();
                if ids.is_empty() {
                    return refuse(match target {
                        Target::IkeSa(id) => format!("no IKE SA #{id}"),
                        _ => "no IKE SA of this connection to terminate".into(),
                    });
                }
                for id in &ids {
                    installer.closing.insert(*id);
                    if let Err(e) = m.terminate(*id, now) {
                        installer.closing.remove(id);
                        return refuse(format!("IKE SA #{}: {e}", id.0));
                    }
                    tracing::info!("ike: terminating IKE SA {} (control request)", id.0);
                }
                self.wait(Goal::IkeDown(ids), done, now);
            }
            Target::Child(name) => {
                let mut spis = Vec::new();
                for s in &sas {
                    for c in s.children.iter().filter(|c| c.name == name) {
                        installer.closing_children.insert(c.inbound_spi);
                        if let Err(e) = m.delete_child(s.id, c.inbound_spi, now) {
                            installer.closing_children.remove(&c.inbound_spi);
                            return refuse(format!(
                                "CHILD_SA {name} of IKE SA #{}: {e} (try again)",
                                s.id.0
                            ));
                        }
                        tracing::info!(
                            "ike: deleting CHILD_SA {name} of IKE SA {} (control request)",
                            s.id.0
                        );
                        spis.push((s.id, c.inbound_spi));
                    }
                }
                if spis.is_empty() {
                    return refuse(format!("no CHILD_SA named '{name}' to terminate"));
                }
                self.wait(Goal::ChildDown(spis), done, now);
            }
        }
    }

    /// Watches one event of the machine's (on the driver's thread, before it is applied).
    pub fn notice(&mut self, ev: &Event) {
        for w in &mut self.waiters {
            match (&mut w.goal, ev) {
                (Goal::ChildUp(id, want), Event::ChildSaUp(c))
                    if c.ike_sa == *id && want.as_ref().is_none_or(|w| *w == c.child) =>
                {
                    w.success = Some(format!(
                        "CHILD_SA {} of connection {} established (IKE SA #{}, SPIs in {:08x} out {:08x}, {})",
                        c.child, c.connection, id.0, c.inbound.spi, c.outbound.spi, c.proposal
                    ));
                }
                // The IKE SA's failure (`child` None) fails every child started in it; a child's only its own.
                (
                    Goal::ChildUp(id, want),
                    Event::Failed {
                        ike_sa,
                        child,
                        failure,
                        ..
                    },
                ) if *ike_sa == Some(*id)
                    && (child.is_none() || want.is_none() || child == want) =>
                {
                    w.failure = Some(explain(failure));
                }
                (Goal::ChildUp(id, _), Event::IkeSaDown { ike_sa, .. }) if ike_sa == id => {
                    w.failure
                        .get_or_insert_with(|| format!("IKE SA #{} went down", id.0));
                }
                (Goal::IkeDown(ids), Event::IkeSaDown { ike_sa, .. }) => {
                    ids.retain(|i| i != ike_sa);
                    if ids.is_empty() {
                        w.success = Some("IKE SA terminated".into());
                    }
                }
                (
                    Goal::ChildDown(spis),
                    Event::ChildSaDown {
                        ike_sa,
                        inbound_spi,
                        ..
                    },
                ) => {
                    spis.retain(|(i, s)| !(i == ike_sa && s == inbound_spi));
                    if spis.is_empty() {
                        w.success = Some("CHILD_SA terminated".into());
                    }
                }
                // An IKE SA going down takes its children (their ChildSaDown come first).
                (Goal::IkeDown(_) | Goal::ChildDown(_), _) => {}
                _ => {}
            }
        }
    }

    /// Answers the waits that events settled (after a batch of events: a failure reported beside an IKE SA's
    /// end wins over the end).
    pub fn settle(&mut self) {
        self.waiters.retain(|w| {
            let r = match (&w.failure, &w.success) {
                (Some(f), _) => Outcome::Failed(f.clone()),
                (None, Some(s)) => Outcome::Done(s.clone()),
                (None, None) => return true,
            };
            let _ = w.done.try_send(r);
            false
        });
    }
}

impl IkeControl {
    fn ask<T>(&self, make: impl FnOnce(SyncSender<T>) -> Command, wait: Duration) -> Option<T> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.tx.send(make(tx)).ok()?;
        rx.recv_timeout(wait).ok()
    }

    /// The outcome of an `initiate` or `terminate` within `wait`.
    fn waited(&self, make: impl FnOnce(SyncSender<Outcome>) -> Command, wait: u64) -> Value {
        let wait = Duration::from_millis(wait).min(MAX_WAIT);
        match self.ask(make, wait + ANSWER_WAIT) {
            Some(Outcome::Done(s)) => json!({ "ok": true, "message": s }),
            Some(Outcome::Refused(e)) => json!({ "error": e }),
            Some(Outcome::Failed(e)) => json!({ "error": e, "failed": true }),
            None => {
                json!({ "error": format!("no outcome within {} s (it may still complete: see netveil status)", wait.as_secs()), "timeout": true })
            }
        }
    }
}

/// The child's part of the status, with its SAs' counters from the IP engine's part (`ike-N-in` / `-out`).
fn child(
    c: &netveil_ike::machine::ChildStatus,
    instance: Option<u64>,
    ip: &[netveil_control::status::SaStatus],
) -> IkeChild {
    let (sa_in, sa_out) = instance.map_or((None, None), |n| {
        let (i, o) = Installer::sa_names(n);
        (Some(i), Some(o))
    });
    let sa = |name: &Option<String>| name.as_ref().and_then(|n| ip.iter().find(|s| s.name == *n));
    let counters = |name: &Option<String>| sa(name).map_or((0, 0), |s| (s.bytes, s.packets));
    // ESP in UDP as the IP engine has it installed.
    let encap = sa(&sa_out).is_some_and(|s| s.encap.is_some());
    let (bytes_in, packets_in) = counters(&sa_in);
    let (bytes_out, packets_out) = counters(&sa_out);
    IkeChild {
        name: c.name.clone(),
        unique_id: instance,
        state: if instance.is_some() {
            "INSTALLED"
        } else {
            "NOT_INSTALLED"
        }
        .into(),
        mode: match c.mode {
            netveil_ike::config::Mode::Tunnel => "TUNNEL",
            netveil_ike::config::Mode::Transport => "TRANSPORT",
        }
        .into(),
        protocol: "ESP".into(),
        encap,
        spi_in: format!("{:08x}", c.inbound_spi),
        spi_out: format!("{:08x}", c.outbound_spi),
        proposal: c.proposal.clone(),
        bytes_in,
        packets_in,
        bytes_out,
        packets_out,
        install_time: c.installed.as_secs(),
        rekey_time: c.rekey_in.as_secs(),
        life_time: c.expire_in.as_secs(),
        local_ts: c.local_ts.iter().map(ts).collect(),
        remote_ts: c.remote_ts.iter().map(ts).collect(),
        sa_in,
        sa_out,
    }
}

/// A traffic selector as swanctl prints it: `10.1.0.0/16`, with `[proto/ports]` when not all.
pub fn ts(t: &netveil_ike::config::TsSpec) -> String {
    let mut s = format!("{}/{}", t.addr, t.prefix);
    if t.protocol != 0 || t.ports != (0, 65535) {
        let ports = if t.ports.0 == t.ports.1 {
            t.ports.0.to_string()
        } else {
            format!("{}-{}", t.ports.0, t.ports.1)
        };
        s.push_str(&format!("[{}/{ports}]", t.protocol));
    }
    s
}

impl Control for IkeControl {
    fn answer(&self, req: &Request) -> Option<Value> {
        Some(match req {
            Request::IkeInitiate {
                connection,
                child,
                timeout_ms,
            } => self.waited(
                |done| Command::Initiate {
                    connection: connection.clone(),
                    child: child.clone(),
                    done,
                },
                *timeout_ms,
            ),
            Request::IkeTerminate {
                connection,
                ike_id,
                child,
                timeout_ms,
            } => {
                let target = match (connection, ike_id, child) {
                    (Some(c), None, None) => Target::Connection(c.clone()),
                    (None, Some(i), None) => Target::IkeSa(*i),
                    (None, None, Some(c)) => Target::Child(c.clone()),
                    _ => {
                        return Some(
                            json!({ "error": "name exactly one of connection, ike_id and child" }),
                        )
                    }
                };
                self.waited(|done| Command::Terminate { target, done }, *timeout_ms)
            }
            Request::IkeKeys => match self.ask(Command::Keys, ANSWER_WAIT) {
                Some(lines) => {
                    let v: Vec<&str> = lines.iter().map(|l| l.as_str()).collect();
                    json!({ "ike_sas": v })
                }
                None => json!({ "error": "the IKE driver did not answer" }),
            },
            _ => return None,
        })
    }

    fn status(&self, status: &mut Status) {
        let Some(snaps) = self.ask(Command::Status, ANSWER_WAIT) else {
            status.set_part("ike", &json!({ "error": "the IKE driver did not answer" }));
            return;
        };
        let ip = status
            .ip
            .as_ref()
            .map(|i| i.sas.clone())
            .unwrap_or_default();
        let ike_sas = snaps
            .iter()
            .map(|s| {
                let sa = &s.sa;
                IkeSa {
                    name: sa.connection.clone(),
                    unique_id: sa.id.0,
                    version: "IKEv2".into(),
                    state: sa.state.into(),
                    initiator: sa.initiator,
                    initiator_spi: format!("{:016x}", sa.spi_i),
                    responder_spi: format!("{:016x}", sa.spi_r),
                    local_host: sa.local.ip().to_string(),
                    local_port: sa.local.port(),
                    local_id: sa.local_id.clone(),
                    remote_host: sa.remote.ip().to_string(),
                    remote_port: sa.remote.port(),
                    remote_id: sa.remote_id.clone(),
                    nat_local: sa.nat_local,
                    nat_remote: sa.nat_remote,
                    proposal: sa.proposal.clone(),
                    established: sa.age.as_secs(),
                    rekey_time: sa.rekey_in.map(|d| d.as_secs()),
                    child_sas: sa
                        .children
                        .iter()
                        .zip(&s.instances)
                        .map(|(c, i)| child(c, *i, &ip))
                        .collect(),
                }
            })
            .collect();
        status.set_part("ike", &IkeStatus { ike_sas });
    }
}

#[cfg(test)]
mod tests;
