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

use crate::config::{self, Config, ConfigError, Interface, PolicyRule, PspConfig};
use crate::filters::{esp_filter, FilterSock};
use crate::state::{RxStore, SeqStore, StateDir};
use arc_swap::{ArcSwap, Guard};
pub use netveil_control::Event;
use netveil_crypto::rand::OsRng;
use netveil_io::filter::{Layout, Program};
use netveil_ipsec::bundle::{Bundle, InIdx, OutIdx, SaIdx, Sad};
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

/// What the data plane reads: built by the control plane, never changed once published.
pub struct Snapshot {
    /// Every SA: the named ones at the indices policies use, then the retiring inbound ones (aliases).
    pub sad: Sad,
    /// Policies in order; `sas` resolved against `sad` (empty for a protect policy whose SAs are not all there).
    pub policies: Vec<PolicyRule>,
    pub spd: PolicyDb,
    /// Some policy selects by port: later fragments (no ports) need their first fragment's decision.
    pub port_selective: bool,
    /// Per policy: 1 + the second of its last acquire.
    acquired: Vec<AtomicU64>,
    /// Unique per snapshot built in this process: what a data-plane thread's remembered decision was made under
    /// (see [`crate::ip::FragCache`]).
    pub generation: u64,
}

/// The generation of the next snapshot built.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

impl Snapshot {
    /// Policies resolve their SAs by name among the SAs of their own direction only: an outbound policy can never
    /// reach an inbound SA (whose keys are the peer's sending keys), whatever was added or removed in between. A
    /// policy whose SAs are not all installed in its direction gets none (its traffic is dropped).
    fn build(t: &Tables) -> Snapshot {
        let mut sad = Sad::default();
        let mut outs: HashMap<&str, OutIdx> = HashMap::new();
        let mut ins: HashMap<&str, InIdx> = HashMap::new();
        for sa in &t.sas {
            match sa {
                Installed::Out(o) => {
                    outs.insert(&o.params.name, sad.insert_out_arc(o.clone()));
                }
                Installed::In(i) => {
                    // Clashes were refused when the SA was added.
                    if let Ok(x) = sad.insert_in_arc(i.clone()) {
                        ins.insert(&i.params.name, x);
                    }
                }
            }
        }
        for r in &t.retiring {
            if let Some(&i) = ins.get(r.successor.as_str()) {
                let _ = sad.insert_alias(r.sa.clone(), i);
            }
        }
        let mut spd = PolicyDb::new(t.default_action);
        let mut policies = Vec::with_capacity(t.policies.len());
        for (j, p) in t.policies.iter().enumerate() {
            let mut p = p.clone();
            p.sas = Bundle::None;
            if let Action::Protect(_) = p.action {
                p.action = Action::Protect(j);
                if !p.psp {
                    p.sas = match p.direction {
                        netveil_sa::policy::Direction::Out => p
                            .sa_names
                            .iter()
                            .map(|n| outs.get(n.as_str()).copied())
                            .collect::<Option<Vec<_>>>()
                            .map_or(Bundle::None, Bundle::Out),
                        netveil_sa::policy::Direction::In => p
                            .sa_names
                            .iter()
                            .map(|n| ins.get(n.as_str()).copied())
                            .collect::<Option<Vec<_>>>()
                            .map_or(Bundle::None, Bundle::In),
                    };
                }
            }
            spd.push(Rule {
                name: p.name.clone(),
                direction: p.direction,
                selector: p.selector.clone(),
                action: p.action,
            });
            policies.push(p);
        }
        Snapshot {
            port_selective: policies
                .iter()
                .any(|p| !p.selector.src_ports.is_any() || !p.selector.dst_ports.is_any()),
            acquired: policies.iter().map(|_| AtomicU64::new(0)).collect(),
            generation: NEXT_GENERATION.fetch_add(1, Relaxed),
            sad,
            policies,
            spd,
        }
    }

    /// Whether traffic for protect policy `i`, which has no SAs, is to be reported now: at most once per policy
    /// and second.
    pub fn acquire_due(&self, i: usize, now: u64) -> bool {
        let Some(a) = self.acquired.get(i) else {
            return false;
        };
        let prev = a.load(Relaxed);
        prev != now + 1 && a.compare_exchange(prev, now + 1, Relaxed, Relaxed).is_ok()
    }
}

/// An installed SA of either direction, as the control plane keeps them (by name, in the order added).
#[derive(Clone)]
pub enum Installed {
    Out(Arc<OutboundSa>),
    In(Arc<InboundSa>),
}

impl Installed {
    /// What both directions have.
    pub fn base(&self) -> &SaBase {
        match self {
            Installed::Out(s) => s,
            Installed::In(s) => s,
        }
    }
    pub fn params(&self) -> &SaParams {
        &self.base().params
    }
    fn addr(&self) -> usize {
        self.base() as *const SaBase as usize
    }
    /// The SAs of a database built from a configuration (`at`: where each of its SAs went, in file order).
    pub fn of(sad: &Sad, at: &[SaIdx]) -> Vec<Installed> {
        at.iter()
            .map(|x| match *x {
                SaIdx::Out(i) => Installed::Out(sad.out_arc(i).clone()),
                SaIdx::In(i) => Installed::In(sad.in_arc(i).clone()),
            })
            .collect()
    }
}

/// An event of an SA (`sa-added`, `soft-lifetime`, ...).
fn sa_event(event: &str, sa: &SaBase) -> Event {
    Event {
        sa: Some(sa.params.name.clone()),
        spi: Some(format!("{:#010x}", sa.spi())),
        ..Event::new(event)
    }
}

/// An acquire: traffic of `flow` for protect policy `policy`, which has no SA.
pub fn acquire(policy: &str, flow: &FlowKey) -> Event {
    let ports = if netveil_sa::policy::has_ports(flow.proto) {
        format!(" {} -> {}", flow.src_port, flow.dst_port)
    } else {
        String::new()
    };
    Event {
        policy: Some(policy.to_string()),
        flow: Some(format!(
            "{} -> {} proto {}{ports}",
            flow.src, flow.dst, flow.proto
        )),
        ..Event::new("acquire")
    }
}

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
    policies: Vec<PolicyRule>,
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
        let snap = Snapshot::build(self);
        Config {
            interface: self.interface.clone(),
            sas: self
                .sas
                .iter()
                .map(|s| s.params().clone())
                .chain(self.retiring.iter().map(|r| r.sa.params.clone()))
                .collect(),
            policies: snap.policies,
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

    /// Stores the policies added at runtime as they stand in `policies` (see [`crate::state::save_runtime_policies`]).
    fn save_runtime(
        &self,
        policies: &[PolicyRule],
        runtime: &[(String, toml::Table)],
    ) -> Result<(), ConfigError> {
        let saved: Vec<crate::state::SavedPolicy> = runtime
            .iter()
            .filter_map(|(n, t)| {
                policies
                    .iter()
                    .position(|p| &p.name == n)
                    .map(|i| crate::state::SavedPolicy {
                        position: i,
                        policy: t.clone(),
                    })
            })
            .collect();
        let dir = StateDir::open(&self.interface.state_dir, "interface.state_dir")?;
        crate::state::save_runtime_policies(&dir, &self.interface.name, &saved).map_err(|e| {
            ConfigError {
                key: "interface.state_dir".into(),
                reason: format!(
                    "cannot store the policies added at runtime in {}: {e}",
                    dir.path().display()
                ),
            }
        })
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
    fn build_sa(&mut self, p: SaParams, now: u64) -> Result<Installed, ConfigError> {
        let cant = |e: netveil_ipsec::SaError| ConfigError {
            key: "sa".into(),
            reason: format!("cannot install: {e}"),
        };
        if p.direction == SaDir::Out {
            let start = self.seq()?.reserve(&p, "sa")?;
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
            let start = self.rx()?.start(&p, "sa")?;
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

    /// Refuses an SA of `p`'s name whose direction differs from that of a policy naming it: an outbound policy must
    /// never come to name an inbound SA (it would seal with the peer's keys), nor an inbound one an outbound SA.
    fn check_policies_of(&self, p: &SaParams) -> Result<(), ConfigError> {
        let want = match p.direction {
            SaDir::Out => netveil_sa::policy::Direction::Out,
            SaDir::In => netveil_sa::policy::Direction::In,
        };
        if let Some(pol) = self
            .policies
            .iter()
            .find(|pol| pol.direction != want && pol.sa_names.contains(&p.name))
        {
            return Err(ConfigError {
                key: "sa.direction".into(),
                reason: format!(
                    "policy '{}' is an {}bound policy and names SA '{}': it can use only {}bound SAs, and this one \
                     is {}bound",
                    pol.name,
                    config::dir_word(p.direction.flip()),
                    p.name,
                    config::dir_word(p.direction.flip()),
                    config::dir_word(p.direction),
                ),
            });
        }
        Ok(())
    }

    /// What an SA needs of the engine's sockets, and keys of its own.
    fn check_new(&self, p: &SaParams, replacing: Option<&str>) -> Result<(), ConfigError> {
        let e = |key: &str, reason: String| {
            Err(ConfigError {
                key: key.into(),
                reason,
            })
        };
        let sockets = self.sockets.unwrap_or(Sockets {
            v4: true,
            v6: true,
            nat_t: true,
        });
        if p.encap.is_some() && !sockets.nat_t {
            return e(
                "sa.encap",
                format!(
                    "this daemon has no ESP-in-UDP socket (port {}): it opens one when its configuration file has an \
                     SA with encap = \"udp\"",
                    self.interface.nat_t_port
                ),
            );
        }
        if let (netveil_ipsec::Mode::Tunnel { local, .. }, SaDir::In) = (p.mode, p.direction) {
            if (local.is_ipv4() && !sockets.v4) || (local.is_ipv6() && !sockets.v6) {
                return e(
                    "sa.local",
                    format!("this daemon has no receive socket for {local}'s address family"),
                );
            }
        }
        let keyed = !(p.enc_key.is_empty() && p.auth_key.is_empty());
        if let Some(o) = self
            .sas
            .iter()
            .map(|s| s.base())
            .chain(self.retiring.iter().map(|r| &**r.sa))
            .filter(|o| {
                Some(o.params.name.as_str()) != replacing || o.params.direction == SaDir::In
            })
            .find(|o| {
                keyed
                    && o.params.enc_key[..] == p.enc_key[..]
                    && o.params.auth_key[..] == p.auth_key[..]
            })
        {
            return e(
                if p.enc_key.is_empty() {
                    "sa.auth_key"
                } else {
                    "sa.enc_key"
                },
                format!(
                    "SA '{}' has the same keys: every SA needs its own",
                    o.params.name
                ),
            );
        }
        Ok(())
    }
}

/// The SA and policy database of a running IP engine (see the module documentation).
pub struct Db {
    snap: ArcSwap<Snapshot>,
    tables: Mutex<Tables>,
    events: Sender<Event>,
    events_in: Mutex<Receiver<Event>>,
}

/// A failed change: the key at fault (as in the configuration file, `sa.spi`, `policy.sas`) and why.
pub type ChangeError = ConfigError;

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
            policies: config.policies.clone(),
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
        };
        let (tx, rx) = channel();
        Db {
            snap: ArcSwap::from_pointee(Snapshot::build(&t)),
            tables: Mutex::new(t),
            events: tx,
            events_in: Mutex::new(rx),
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
        let _ = self.events.send(e);
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
        crate::nft::nft_table_text(&self.tables().view(), table)
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
        let saved = crate::state::load_runtime_policies(&dir, &t.interface.name)?;
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
            t.policies.insert(at, p);
        }
        if !restored.is_empty() {
            self.snap.store(Arc::new(Snapshot::build(&t)));
            let names = restored.join(", ");
            tracing::warn!(
                "{}: restored {} policies the previous instance had added at runtime ({names}): their traffic \
                 stays blocked until their SAs are added, `netveil policy del`, or `netveil down`",
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
            let _ = crate::state::save_runtime_policies(&dir, &t.interface.name, &[]);
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
        if let Some(table) = t.nft_table.clone() {
            let text = crate::nft::nft_table_text(&t.view(), &table);
            if text != t.nft_text {
                let r = match &text {
                    Some(x) => crate::engine::nft_install(&table, x),
                    None => crate::engine::run(&["nft", "delete", "table", "inet", &table]),
                };
                if let Err(e) = r {
                    (t.sas, t.retiring, t.policies) = old;
                    return Err(ConfigError {
                        key: "policy".into(),
                        reason: format!("cannot update the nftables table {table}: {e}"),
                    });
                }
                t.nft_text = text;
            }
        }
        let snap = Arc::new(Snapshot::build(t));
        self.snap.store(snap.clone());
        for e in refresh_filters(t, &snap.sad, true) {
            tracing::warn!("{}: {e}", t.interface.name);
        }
        Ok(())
    }

    fn next(t: &Tables) -> Tables2 {
        Tables2 {
            sas: t.sas.clone(),
            retiring: t.retiring.clone(),
            policies: t.policies.clone(),
        }
    }

    /// `sa add`: a new SA (the keys of a `[[sa]]` table).
    pub fn sa_add(&self, table: toml::Table, now: u64) -> Result<(), ChangeError> {
        let mut t = self.tables();
        let others = t.params();
        let p = config::sa_from_table(table, &t.interface, &others)?;
        if let Some(r) = t.retiring.iter().find(|r| {
            p.direction == SaDir::In && r.sa.spi() == p.spi && r.sa.protocol() == p.protocol()
        }) {
            return Err(spi_taken(&p, &r.sa));
        }
        t.check_policies_of(&p)?;
        t.check_new(&p, None)?;
        let sa = t.build_sa(p, now)?;
        let mut next = Self::next(&t);
        next.sas.push(sa.clone());
        self.publish(&mut t, next).inspect_err(|_| t.untrack(&sa))?;
        t.push_event(sa_event("sa-added", sa.base()), now);
        Ok(())
    }

    /// `sa update NAME`: replaces the SA named `name` (same direction; new SPI and keys). Make-before-break: see
    /// the module documentation.
    pub fn sa_update(&self, name: &str, table: toml::Table, now: u64) -> Result<(), ChangeError> {
        let mut t = self.tables();
        let i = t.index(name).ok_or_else(|| no_sa(name))?;
        let old = t.sas[i].clone();
        let old_dir = old.params().direction;
        if table.get("name").is_some_and(|n| n.as_str() != Some(name)) {
            return Err(ConfigError {
                key: "sa.name".into(),
                reason: format!("an update keeps the SA's name ('{name}')"),
            });
        }
        let mut table = table;
        table.insert("name".into(), toml::Value::String(name.into()));
        let others: Vec<SaParams> = t
            .sas
            .iter()
            .filter(|s| s.params().name != name)
            .map(|s| s.params().clone())
            .collect();
        let p = config::sa_from_table(table, &t.interface, &others)?;
        if p.direction != old_dir {
            return Err(ConfigError {
                key: "sa.direction".into(),
                reason: format!(
                    "'{name}' is an {}bound SA: an update keeps the direction",
                    config::dir_word(old_dir)
                ),
            });
        }
        if p.direction == SaDir::In {
            if let Some(o) = t
                .retiring
                .iter()
                .map(|r| &**r.sa)
                .chain(std::iter::once(old.base()))
                .find(|o| o.spi() == p.spi && o.protocol() == p.protocol())
            {
                return Err(spi_taken(&p, o));
            }
        }
        t.check_policies_of(&p)?;
        t.check_new(&p, Some(name))?;
        let sa = t.build_sa(p, now)?;
        let mut next = Self::next(&t);
        next.sas[i] = sa.clone();
        if let Installed::In(o) = &old {
            next.retiring.push(Retiring {
                sa: o.clone(),
                successor: name.to_string(),
                until: now + RETIRE_SECONDS,
            });
        }
        self.publish(&mut t, next).inspect_err(|_| t.untrack(&sa))?;
        // A replaced inbound SA keeps receiving (and its floor followed) until it retires.
        if let Installed::Out(_) = old {
            t.untrack(&old);
        }
        t.push_event(sa_event("sa-replaced", sa.base()), now);
        Ok(())
    }

    /// `sa del NAME`: removes the SA (and the inbound SAs it replaced that are still retiring). Policies that use
    /// it keep their place and drop their traffic (reported as acquires) until an SA of that name is added.
    pub fn sa_del(&self, name: &str, now: u64) -> Result<(), ChangeError> {
        let mut t = self.tables();
        let i = t.index(name).ok_or_else(|| no_sa(name))?;
        let old = t.sas[i].clone();
        let mut next = Self::next(&t);
        next.sas.remove(i);
        let gone: Vec<Arc<InboundSa>> = t
            .retiring
            .iter()
            .filter(|r| r.successor == name)
            .map(|r| r.sa.clone())
            .collect();
        next.retiring.retain(|r| r.successor != name);
        self.publish(&mut t, next)?;
        t.untrack(&old);
        for sa in gone {
            t.untrack(&Installed::In(sa));
        }
        t.reported.remove(&old.addr());
        t.push_event(sa_event("sa-removed", old.base()), now);
        Ok(())
    }

    /// `policy add`: a new policy (the keys of a `[[policy]]` table) at `position` (0: first; default: last).
    pub fn policy_add(
        &self,
        table: toml::Table,
        position: Option<usize>,
        now: u64,
    ) -> Result<(), ChangeError> {
        let mut t = self.tables();
        let sas = t.params();
        let table_copy = table.clone();
        let p = config::policy_from_table(table, t.psp.is_some(), &sas)?;
        if t.policies.iter().any(|o| o.name == p.name) {
            return Err(ConfigError {
                key: "policy.name".into(),
                reason: format!("'{}' is used by another policy", p.name),
            });
        }
        let at = position.unwrap_or(t.policies.len());
        if at > t.policies.len() {
            return Err(ConfigError {
                key: "position".into(),
                reason: format!(
                    "{at} is past the end (there are {} policies)",
                    t.policies.len()
                ),
            });
        }
        let name = p.name.clone();
        let mut next = Self::next(&t);
        next.policies.insert(at, p);
        // Stored before it takes effect: a crash from here on leaves it covered by the successor too.
        let mut runtime = t.runtime.clone();
        runtime.push((name.clone(), table_copy));
        t.save_runtime(&next.policies, &runtime)?;
        if let Err(e) = self.publish(&mut t, next) {
            let _ = t.save_runtime(&t.policies, &t.runtime);
            return Err(e);
        }
        t.runtime = runtime;
        t.push_event(
            Event {
                policy: Some(name),
                ..Event::new("policy-added")
            },
            now,
        );
        Ok(())
    }

    /// `policy del NAME`.
    pub fn policy_del(&self, name: &str, now: u64) -> Result<(), ChangeError> {
        let mut t = self.tables();
        let i = t
            .policies
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| ConfigError {
                key: "name".into(),
                reason: format!("no policy named '{name}'"),
            })?;
        let mut next = Self::next(&t);
        next.policies.remove(i);
        self.publish(&mut t, next)?;
        // Stored after it took effect (a crash in between restores it: more covered, never less).
        if t.runtime.iter().any(|(n, _)| n == name) {
            t.runtime.retain(|(n, _)| n != name);
            if let Err(e) = t.save_runtime(&t.policies, &t.runtime) {
                tracing::warn!("{}: {e}", t.interface.name);
            }
        }
        t.push_event(
            Event {
                policy: Some(name.to_string()),
                ..Event::new("policy-removed")
            },
            now,
        );
        Ok(())
    }

    /// The events after `since` (oldest first) that are still kept.
    pub fn events_since(&self, since: u64) -> Vec<Event> {
        self.tables()
            .log
            .iter()
            .filter(|e| e.id > since)
            .cloned()
            .collect()
    }

    /// The control plane's periodic work (the engine's tick): events from the data plane, lifetimes and sequence
    /// space, retired SAs, sequence reservations; with `filters`, the socket filters (windows move). Returns the
    /// problems to log.
    pub fn tick(&self, now: u64, filters: bool, storm: bool) -> Vec<String> {
        let mut t = self.tables();
        let arrived: Vec<Event> = match self.events_in.lock() {
            Ok(rx) => rx.try_iter().collect(),
            Err(_) => Vec::new(),
        };
        for e in arrived {
            t.push_event(e, now);
        }
        let mut found = Vec::new();
        let mut flagged = Vec::new();
        for installed in t.sas.iter() {
            let sa = installed.base();
            let key = installed.addr();
            let done = t.reported.get(&key).copied().unwrap_or(0);
            let mut flags = done;
            match sa.lifetime_state(now) {
                LifetimeState::Expired if done & REPORTED_HARD == 0 => {
                    flags |= REPORTED_HARD | REPORTED_SOFT;
                    found.push(sa_event("hard-lifetime", sa));
                }
                LifetimeState::Soft if done & REPORTED_SOFT == 0 => {
                    flags |= REPORTED_SOFT;
                    found.push(sa_event("soft-lifetime", sa));
                }
                _ => {}
            }
            if let Installed::Out(o) = installed {
                if done & REPORTED_SEQ == 0
                    && o.seq_limit() - o.seq_last() < o.seq_limit() / SEQ_WARN_FRACTION
                {
                    flags |= REPORTED_SEQ;
                    found.push(sa_event("seq-nearly-spent", sa));
                }
            }
            if flags != done {
                flagged.push((key, flags));
            }
        }
        t.reported.extend(flagged);
        for e in found {
            t.push_event(e, now);
        }
        if t.retiring.iter().any(|r| r.until <= now) {
            let gone: Vec<Arc<InboundSa>> = t
                .retiring
                .iter()
                .filter(|r| r.until <= now)
                .map(|r| r.sa.clone())
                .collect();
            t.retiring.retain(|r| r.until > now);
            self.snap.store(Arc::new(Snapshot::build(&t)));
            for sa in &gone {
                t.untrack(&Installed::In(sa.clone()));
            }
            for sa in gone {
                t.push_event(sa_event("sa-retired", &sa), now);
            }
        }
        let mut problems = match t.seq.as_mut() {
            Some(s) => s.top_up(),
            None => Vec::new(),
        };
        if let Some(r) = t.rx.as_mut() {
            problems.extend(r.top_up());
        }
        if filters {
            t.storm = storm;
            problems.extend(refresh_filters(&mut t, &self.snap.load().sad, false));
        }
        problems
    }
}

/// The three tables a change replaces.
struct Tables2 {
    sas: Vec<Installed>,
    retiring: Vec<Retiring>,
    policies: Vec<PolicyRule>,
}

/// Installs the socket filters for the current SAs and windows where they changed (`force`: after a change of
/// SAs, before the change is reported done). Returns the problems to log.
fn refresh_filters(t: &mut Tables, sad: &Sad, force: bool) -> Vec<String> {
    let (storm, mtu) = (t.storm, t.interface.mtu);
    let mut problems = Vec::new();
    for (layout, sock, installed) in t.filters.iter_mut() {
        let p = esp_filter(sad, *layout, storm, mtu);
        if force || p != *installed {
            if let Err(e) = sock.attach(p.as_ref()) {
                problems.push(format!("cannot attach a socket filter: {e}"));
            }
            *installed = p;
        }
    }
    problems
}

fn no_sa(name: &str) -> ConfigError {
    ConfigError {
        key: "name".into(),
        reason: format!("no SA named '{name}'"),
    }
}

fn spi_taken(_p: &SaParams, o: &SaBase) -> ConfigError {
    ConfigError {
        key: "sa.spi".into(),
        reason: format!(
            "still taken by inbound SA '{}' (a replaced SA keeps its SPI for {RETIRE_SECONDS} s): use a new SPI",
            o.params.name
        ),
    }
}
