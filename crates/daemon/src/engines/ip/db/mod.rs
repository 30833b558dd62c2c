//! The IP engine's SAs and policies while it runs: added, replaced and removed by name (`netveil sa`, `netveil
//! policy`, the control socket), with traffic flowing.
//!
//! - The data plane reads an immutable [`Snapshot`] (SA database, policies, policy lookup), loaded once per batch
//!   from an atomically swapped pointer: no lock on the data path. SAs are shared between snapshots, so one that
//!   survives a change keeps its sequence counter, replay window and counters.
//! - The control plane keeps the tables in [`Db`] behind a mutex that only it takes. Every change is checked whole
//!   (the configuration file's rules), prepared (key schedules, sequence reservations, the nftables table), and only
//!   then published as a new snapshot; then the socket filters follow. A change that fails changes nothing.
//! - Make-before-break: an outbound SA replaced by `sa update` is swapped in one step (packets of a batch already
//!   under way finish with the old one); an inbound SA replaced keeps taking the peer's packets under its old SPI
//!   for [`RETIRE_SECONDS`], as if they came through its successor, so the two ends need not switch at the same
//!   instant.
//! - Events ([`Event`]): the data plane reports traffic for a protect policy that has no SA (acquire, at most one
//!   per policy and second); the engine's tick reports soft and hard lifetimes and sequence space nearly spent, and
//!   each change. `netveil monitor` reads them.

use crate::engines::ip::config::{self, Config, ConfigError, Interface, PolicyRule, PspConfig};
use crate::engines::ip::filters::{esp_filter_for, FilterSock};
use crate::runtime::sa_port::KeyOrigin;
use crate::runtime::state::{RxStore, SeqStore, StateDir};
use arc_swap::{ArcSwap, Guard};
pub use netveil_control::Event;
use netveil_crypto::rand::OsRng;
use netveil_io::filter::{Layout, Program};
use netveil_ipsec::bundle::{Bundle, SaIdx, Sad};
use netveil_ipsec::sa::Direction as SaDir;
use netveil_ipsec::{InboundSa, OutboundSa, SaBase, SaParams};
use netveil_sa::lifetime::LifetimeState;
use netveil_sa::policy::{Action, FlowKey, PolicyDb, Rule};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};

/// How long an inbound SA replaced by `sa update` still takes packets under its old SPI (as strongSwan's
/// `charon.delete_rekeyed_delay`, 5 s).
pub const RETIRE_SECONDS: u64 = 5;
/// Events kept for `netveil monitor`.
pub const EVENT_LOG: usize = 1024;
/// An outbound SA reports `seq-nearly-spent` once less than 1/`SEQ_WARN_FRACTION` of its sequence space is left.
pub const SEQ_WARN_FRACTION: u64 = 8;

mod batch;
mod change;
mod check;
mod snapshot;
mod tick;

pub(crate) use crate::runtime::sa_port::selector_within;
pub use crate::runtime::sa_port::ChangeError;
use snapshot::sa_event;
pub use snapshot::{acquire, Installed, SnapPolicy, Snapshot};
use tick::refresh_filters;

/// The receive sockets the engine opened: an SA added later must arrive on one of them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sockets {
    pub v4: bool,
    pub v6: bool,
    pub nat_t: bool,
}

#[derive(Clone)]
struct Retiring {
    sa: Arc<InboundSa>,
    successor: String,
    until: u64,
}

/// The control plane's tables (behind [`Db`]'s mutex).
struct Tables {
    interface: Interface,
    psp: Option<PspConfig>,
    default_action: Action,
    sas: Vec<Installed>,
    retiring: Vec<Retiring>,
    /// Shared with the snapshots (which add what each resolves to). Those with a `cover` are in memory only (a
    /// key-exchange driver's negotiated CHILD_SAs, see [`Db::policy_bind`]): they get no nftables rules of their
    /// own and are not stored in the state directory.
    policies: Vec<Arc<PolicyRule>>,
    /// The policies added at runtime (by name, with the table they were given as), kept in the state directory so
    /// that a successor of a killed daemon covers their traffic too (see [`Db::restore_runtime_policies`]).
    runtime: Vec<(String, toml::Table)>,
    seq: Option<SeqStore>,
    rx: Option<RxStore>,
    armed: bool,
    /// `None` until the engine attaches its sockets (a database in memory, as in tests, takes any SA).
    sockets: Option<Sockets>,
    filters: Vec<(Layout, FilterSock, Option<Program>)>,
    storm: bool,
    /// The nftables table's name once the engine manages it, and the text installed.
    nft_table: Option<String>,
    nft_text: Option<String>,
    log: VecDeque<Event>,
    next_id: u64,
    /// Per SA (by address): the lifetime and sequence events already reported.
    reported: HashMap<usize, u8>,
    /// The key-exchange drivers' expected peers, in the peer filter (see [`crate::engines::ip::nft::KxPeers`]).
    kx_peers: crate::engines::ip::nft::KxPeers,
    /// Name prefixes a key-exchange driver owns while it runs (prefix, owner): the control socket's changes to
    /// such SAs and policies are refused (see [`Db::owner_of`]).
    owners: Vec<(String, String)>,
    /// The tables of the snapshot last replaced, emptied, for the next one (see [`Snapshot::build_in`]).
    spare: Option<Snapshot>,
}

const REPORTED_SOFT: u8 = 1;
const REPORTED_HARD: u8 = 2;
const REPORTED_SEQ: u8 = 4;

impl Tables {
    fn index(&self, name: &str) -> Option<usize> {
        self.sas.iter().position(|s| s.params().name == name)
    }

    /// The configuration these tables amount to (for the nftables table and the checks of the file's rules).
    fn view(&self) -> Config {
        // Policies bound in memory have no rules of their own: their covering policy's rules cover their traffic.
        // The SAs they name count as the covering policy's for the peer filter (a transport-mode SA's peers are
        // the sources of the inbound policies naming them).
        let mut policies: Vec<PolicyRule> = self
            .policies
            .iter()
            .filter(|p| p.cover.is_none())
            .map(|p| (**p).clone())
            .collect();
        for r in &self.policies {
            if let Some(cover) = &r.cover {
                if let Some(c) = policies.iter_mut().find(|p| *p.name == **cover) {
                    c.sa_names.extend(r.sa_names.iter().cloned());
                }
            }
        }
        Config {
            interface: self.interface.clone(),
            sas: self
                .sas
                .iter()
                .map(|s| s.params().clone())
                .chain(self.retiring.iter().map(|r| r.sa.params.clone()))
                .collect(),
            policies,
            psp: self.psp.clone(),
        }
    }

    fn params(&self) -> Vec<SaParams> {
        self.sas.iter().map(|s| s.params().clone()).collect()
    }

    fn push_event(&mut self, mut e: Event, now: u64) {
        self.next_id += 1;
        e.id = self.next_id;
        e.uptime = now;
        match e.event.as_str() {
            "hard-lifetime" | "seq-nearly-spent" => {
                tracing::warn!("{}: {}", self.interface.name, e.line())
            }
            _ => tracing::info!("{}: {}", self.interface.name, e.line()),
        }
        if self.log.len() == EVENT_LOG {
            self.log.pop_front();
        }
        self.log.push_back(e);
    }

    /// Stores the policies added at runtime as they stand in `policies` (see [`crate::runtime::state::save_runtime_policies`]).
    fn save_runtime(
        &self,
        policies: &[Arc<PolicyRule>],
        runtime: &[(String, toml::Table)],
    ) -> Result<(), ConfigError> {
        let saved: Vec<crate::runtime::state::SavedPolicy> = runtime
            .iter()
            .filter_map(|(n, t)| {
                policies.iter().position(|p| &p.name == n).map(|i| {
                    crate::runtime::state::SavedPolicy {
                        position: i,
                        policy: t.clone(),
                    }
                })
            })
            .collect();
        let dir = StateDir::open(&self.interface.state_dir, "interface.state_dir")?;
        crate::runtime::state::save_runtime_policies(&dir, &self.interface.name, &saved).map_err(
            |e| ConfigError {
                key: "interface.state_dir".into(),
                reason: format!(
                    "cannot store the policies added at runtime in {}: {e}",
                    dir.path().display()
                ),
            },
        )
    }

    /// The sequence and receive-floor stores, opened on first use (a daemon started without SAs has none yet).
    fn open_stores(&mut self) -> Result<(), ConfigError> {
        if self.seq.is_none() || self.rx.is_none() {
            let dir = StateDir::open(&self.interface.state_dir, "interface.state_dir")?;
            let mut s = SeqStore::open(dir.clone());
            let mut r = RxStore::open(dir);
            if self.armed {
                s.arm();
                r.arm();
            }
            self.seq.get_or_insert(s);
            self.rx.get_or_insert(r);
        }
        Ok(())
    }

    fn seq(&mut self) -> Result<&mut SeqStore, ConfigError> {
        self.open_stores()?;
        Ok(self.seq.as_mut().expect("opened above"))
    }

    fn rx(&mut self) -> Result<&mut RxStore, ConfigError> {
        self.open_stores()?;
        Ok(self.rx.as_mut().expect("opened above"))
    }

    /// Builds an SA (key schedule; an outbound one continues above its keys' sequence mark).
    fn build_sa(
        &mut self,
        p: SaParams,
        keys: KeyOrigin,
        now: u64,
    ) -> Result<Installed, ConfigError> {
        let fresh = keys.is_negotiated();
        let cant = |e: netveil_ipsec::SaError| ConfigError {
            key: "sa".into(),
            reason: format!("cannot install: {e}"),
        };
        if fresh {
            // Negotiated keys (see KeyOrigin::Negotiated): never used before and gone with this daemon, so there is
            // no mark to continue above, no floor to keep, and nothing worth a record: the SA starts at sequence 1
            // with an empty window and the state directory is not written (two fsyncs per SA, tens of milliseconds
            // on a busy disk, in every CHILD_SA's installation).
            return Ok(if p.direction == SaDir::Out {
                Installed::Out(Arc::new(OutboundSa::new(p, now, &mut OsRng).map_err(cant)?))
            } else {
                Installed::In(Arc::new(InboundSa::new(p, now).map_err(cant)?))
            });
        }
        if p.direction == SaDir::Out {
            let start = self.seq()?.reserve(&p, "sa", fresh)?;
            let sa = Arc::new(
                match start.counter {
                    Some(c) => OutboundSa::with_counter(p, now, c, &mut OsRng),
                    None => {
                        let mut p = p;
                        p.first_seq = start.first;
                        OutboundSa::with_reservation(p, now, start.reserved, &mut OsRng)
                    }
                }
                .map_err(cant)?,
            );
            self.seq()?.track(sa.clone());
            Ok(Installed::Out(sa))
        } else {
            let start = self.rx()?.start(&p, "sa", fresh)?;
            let st = start.state(&p);
            let sa = Arc::new(InboundSa::with_state(p, now, st).map_err(cant)?);
            self.rx()?.track(&sa);
            Ok(Installed::In(sa))
        }
    }

    /// An SA removed, retired, or built for a change that failed: its sequence mark or receive floor is no longer
    /// followed (it stays where it is), and its state stays for SAs with the same keys.
    fn untrack(&mut self, sa: &Installed) {
        match sa {
            Installed::Out(o) => {
                if let Some(s) = self.seq.as_mut() {
                    s.forget(o);
                }
            }
            Installed::In(i) => {
                if let Some(r) = self.rx.as_mut() {
                    r.forget(i);
                }
            }
        }
    }
}

/// The SA and policy database of a running IP engine (see the module documentation).
pub struct Db {
    snap: ArcSwap<Snapshot>,
    tables: Mutex<Tables>,
    events: Sender<Event>,
    events_in: Mutex<Receiver<Event>>,
    /// Who hears of acquires as they happen (key-exchange drivers, see [`Db::acquires`]).
    acquire_subs: Mutex<Vec<Sender<crate::runtime::sa_port::Acquire>>>,
}

impl Db {
    /// The database of a configuration whose SAs are built (`sad`, SA `i` of `config.sas` at index `i`), with the
    /// sequence store that reserved the outbound ones (tracking them).
    pub fn new(config: &Config, sas: Vec<Installed>, stores: Option<(SeqStore, RxStore)>) -> Db {
        let (mut seq, mut rx) = match stores {
            Some((s, r)) => (Some(s), Some(r)),
            None => (None, None),
        };
        for sa in &sas {
            match sa {
                Installed::Out(o) => {
                    if let Some(s) = seq.as_mut() {
                        s.track(o.clone());
                    }
                }
                Installed::In(i) => {
                    if let Some(r) = rx.as_mut() {
                        r.track(i);
                    }
                }
            }
        }
        let t = Tables {
            interface: config.interface.clone(),
            psp: config.psp.clone(),
            default_action: config.interface.default_action,
            sas,
            retiring: Vec::new(),
            policies: config.policies.iter().cloned().map(Arc::new).collect(),
            runtime: Vec::new(),
            seq,
            rx,
            armed: false,
            sockets: None,
            filters: Vec::new(),
            storm: false,
            nft_table: None,
            nft_text: None,
            log: VecDeque::new(),
            next_id: 0,
            reported: HashMap::new(),
            kx_peers: Default::default(),
            owners: Vec::new(),
            spare: None,
        };
        let (tx, rx) = channel();
        Db {
            snap: ArcSwap::from_pointee(Snapshot::build(&t)),
            tables: Mutex::new(t),
            events: tx,
            events_in: Mutex::new(rx),
            acquire_subs: Mutex::new(Vec::new()),
        }
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        // A panic while holding the lock leaves tables that are still whole (every change is published last).
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current snapshot (for the data plane: once per batch).
    pub fn load(&self) -> Guard<Arc<Snapshot>> {
        self.snap.load()
    }

    /// Reports an event from the data plane (cheap, never blocks).
    pub fn report(&self, e: Event) {
        if e.event == "acquire" {
            // At most one per policy and second (the data plane's limit): the lock is not on the packet path.
            if let (Some(policy), Ok(mut subs)) = (&e.policy, self.acquire_subs.lock()) {
                let a = crate::runtime::sa_port::Acquire {
                    policy: policy.clone(),
                    flow: e.flow.clone().unwrap_or_default(),
                };
                subs.retain(|s| s.send(a.clone()).is_ok());
            }
        }
        let _ = self.events.send(e);
    }

    /// A channel of the acquires from now on (see [`crate::runtime::sa_port::SaPort::acquires`]).
    pub fn acquires(&self) -> Receiver<crate::runtime::sa_port::Acquire> {
        let (tx, rx) = channel();
        if let Ok(mut subs) = self.acquire_subs.lock() {
            subs.push(tx);
        }
        rx
    }

    /// The engine's sockets and filters, and the nftables table it installed (`Some` also when none was needed:
    /// then a later change may create it).
    pub(crate) fn attach(
        &self,
        sockets: Sockets,
        filters: Vec<(Layout, FilterSock)>,
        nft_table: String,
        nft_text: Option<String>,
    ) {
        let mut t = self.tables();
        t.sockets = Some(sockets);
        t.filters = filters.into_iter().map(|(l, s)| (l, s, None)).collect();
        t.nft_table = Some(nft_table);
        t.nft_text = nft_text;
    }

    /// The data plane is about to send (see [`SeqStore::arm`]).
    pub fn arm(&self) {
        let mut t = self.tables();
        t.armed = true;
        if let Some(s) = t.seq.as_mut() {
            s.arm();
        }
        if let Some(r) = t.rx.as_mut() {
            r.arm();
        }
    }

    /// After the data plane stopped: the sequence marks become the numbers used, the receive floors the numbers
    /// accepted.
    pub fn finish(&self) {
        let mut t = self.tables();
        if let Some(s) = t.seq.as_mut() {
            s.finish();
        }
        if let Some(r) = t.rx.as_mut() {
            r.finish();
        }
    }

    /// The text of the engine's nftables table `table` for the policies and SAs in force (`None`: no rule needed).
    pub fn nft_text(&self, table: &str) -> Option<String> {
        let t = self.tables();
        crate::engines::ip::nft::nft_table_text_with(&t.view(), table, &t.kx_peers)
    }

    /// At start, before the fail-closed table is installed: the policies that a previous instance had added at
    /// runtime and that nothing removed since (it was killed, or stopped with `block_when_stopped`), put back where
    /// they stood, so that the traffic they covered stays covered: without their SAs (never stored: keys stay out of
    /// the state directory) their traffic is dropped and reported as acquires until the SAs are added, `netveil
    /// policy del` removes them, or `netveil down` lifts everything. A policy of the configuration file with the
    /// same name wins. Returns the names restored.
    pub fn restore_runtime_policies(&self) -> Result<Vec<String>, ChangeError> {
        let mut t = self.tables();
        let dir = StateDir::open(&t.interface.state_dir, "interface.state_dir")?;
        let saved = crate::runtime::state::load_runtime_policies(&dir, &t.interface.name)?;
        let mut restored = Vec::new();
        for s in saved {
            let sas = t.params();
            let p = config::policy_from_table(s.policy.clone(), t.psp.is_some(), &sas).map_err(
                |e| ConfigError {
                    key: "interface.state_dir".into(),
                    reason: format!(
                        "a policy stored by the previous instance does not load ({}: {}); `netveil down` lifts \
                         the previous instance's policies",
                        e.key, e.reason
                    ),
                },
            )?;
            if t.policies.iter().any(|o| o.name == p.name) {
                continue;
            }
            let at = s.position.min(t.policies.len());
            restored.push(p.name.clone());
            t.runtime.push((p.name.clone(), s.policy));
            t.policies.insert(at, Arc::new(p));
        }
        if !restored.is_empty() {
            self.snap.store(Arc::new(Snapshot::build(&t)));
            let names = restored.join(", ");
            tracing::warn!(
                "{}: restored {} policies the previous instance had added at runtime ({names}): their traffic \
                 stays blocked until their SAs are added, `netveil policy del` removes them, or `netveil down` (a \
                 key-exchange driver's own, such as the IKE driver's ike-*, it replaces or removes when it starts)",
                t.interface.name,
                restored.len()
            );
        }
        Ok(restored)
    }

    /// The engine stops and lifts its block (`netveil down`, or `block_when_stopped = false`): the policies added
    /// at runtime are forgotten with it.
    pub fn forget_runtime_policies(&self) {
        let t = self.tables();
        if let Ok(dir) = StateDir::open(&t.interface.state_dir, "interface.state_dir") {
            let _ = crate::runtime::state::save_runtime_policies(&dir, &t.interface.name, &[]);
        }
    }

    /// Whether the engine's nftables table exists now.
    pub fn nft_table(&self) -> Option<String> {
        let t = self.tables();
        t.nft_text.as_ref().and(t.nft_table.clone())
    }

    /// Puts `next` in force: the nftables table first (a failure changes nothing), then the snapshot, then the
    /// socket filters.
    fn publish(&self, t: &mut Tables, next: Tables2) -> Result<(), ChangeError> {
        let Tables2 {
            sas,
            retiring,
            policies,
        } = next;
        let old = (
            std::mem::replace(&mut t.sas, sas),
            std::mem::replace(&mut t.retiring, retiring),
            std::mem::replace(&mut t.policies, policies),
        );
        self.publish_in_place(t, false).inspect_err(|_| {
            (t.sas, t.retiring, t.policies) = old;
        })
    }

    fn next(t: &Tables) -> Tables2 {
        Tables2 {
            sas: t.sas.clone(),
            retiring: t.retiring.clone(),
            policies: t.policies.clone(),
        }
    }
}

/// The three tables a change replaces.
struct Tables2 {
    sas: Vec<Installed>,
    retiring: Vec<Retiring>,
    policies: Vec<Arc<PolicyRule>>,
}
