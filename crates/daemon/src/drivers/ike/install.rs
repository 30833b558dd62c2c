//! CHILD_SAs into the data plane: what the IKE state machine negotiated ([`ChildSa`]) becomes an inbound SA, an
//! outbound SA and a pair of policies per selector pair, through the engine's typed port ([`SaPort`]) only.
//!
//! Each CHILD_SA gets an instance number when it first comes up; its SAs are named `ike-N-in` and `ike-N-out`
//! and its policies `ike-N-oI` / `ike-N-iI`. A rekeyed CHILD_SA (`replaces`: the old inbound SPI) keeps the
//! instance: its SAs are replaced in place ([`SaPort::sa_update`], make-before-break: the engine keeps the old
//! inbound SA for packets under way, and the policies, which name the SAs by name, never point at nothing). Its
//! policies are swapped only when the narrowed selectors changed. When a CHILD_SA goes down
//! ([`remove`](Installer::remove)) its policies go first (no packet selected for an SA about to go), then both
//! SAs. A `ChildSaDown` for an inbound SPI that a rekey replaced is a no-op: the replacement already retired it.
//!
//! **Policies at start** ([`Installer::install_traps`]): when the driver starts, every configured child gets its
//! protect policies from its configured selectors (`ike-cK-oI` / `ike-cK-iI`, K the child's number in the
//! configuration, naming SAs `ike-cK-out` / `ike-cK-in` that are never installed), whatever its `start_action`:
//! covered traffic is dropped (fail-closed, in the nftables table too) and reported as acquires, never sent in
//! clear, before any negotiation. A negotiated CHILD_SA then only adds its two SAs and binds its (narrowed)
//! selectors as policies **in memory only** under the configured one that covers them
//! ([`SaPort::policy_bind`]): the configured policy's nftables rules already cover that traffic, so installing a
//! child runs no `nft` (with the connection's peers in the peer filter from the start, [`SaPort::set_kx_peers`]).
//! Selectors that no configured policy covers get policies of their own, as before (`ike-N-oI`, with their
//! nftables rules).
//!
//! **Traps**: the acquires of a configured child's policies say which child the traffic is for
//! ([`Installer::trap_of`]); the driver initiates it when the child is trapped (`start_action = trap`, or
//! `dpd_action` / `close_action = trap` after its CHILD_SA went down) and not up.
//!
//! A rekey replaces the inbound SA at once but the outbound SA only when the old CHILD_SA goes (its
//! `ChildSaDown`: the rekey's DELETE, sent by the rekey's initiator after it installed the new SAs, answered by the
//! responder). So neither side sends with the new keys before the other can open them: the responder's answer
//! (which the driver sends after installing) tells the initiator that the responder's new inbound SA is in, and the
//! DELETE tells the responder the same of the initiator's. Switching the outbound SA with the answer lost the
//! packets sent in the millisecond before the peer installed its inbound SA (up to 0.7 ms of a 10,000 packets/s
//! stream per rekey). Until then the old outbound SA seals: its keys stay valid at the peer, whose replaced
//! inbound SA retires for [`RETIRE_SECONDS`](crate::engines::ip::db::RETIRE_SECONDS).

use super::config::esp_suite;
use crate::runtime::sa_port::{
    AnySaParams, ChangeError, InboundSaParams, OutboundSaParams, PolicyAction, PolicyParams,
    SaCommon, SaOp, SaPort,
};
use netveil_ike::config::{Action, Connection, Mode as IkeMode, TsSpec};
use netveil_ike::event::IkeSaId;
use netveil_ike::event::{ChildSa, EspSa};
use netveil_ike::proposal::Esn;
use netveil_ipsec::sa::{Suite, UdpEncap};
use netveil_ipsec::Mode;
use netveil_sa::lifetime::Lifetime;
use netveil_sa::policy::{Direction, PortRange, Selector};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use zeroize::Zeroizing;

/// One installed CHILD_SA (a gateway keeps thousands: no heap of its own in the usual case).
#[derive(Debug, Clone)]
struct Installed {
    instance: u64,
    /// Packets its inbound SA had authenticated when [`Installer::traffic`] last looked.
    packets: u64,
    outbound_spi: u32,
    /// Its (connection, child), shared by every CHILD_SA of the configured child ([`Installer::intern`]).
    names: Arc<(String, String)>,
    /// Its negotiated selectors (a rekey compares them).
    ts: Ts,
    policies: Policies,
}

/// A CHILD_SA's traffic selectors: one on each side inline (the usual case), any others boxed.
#[derive(Debug, Clone, PartialEq)]
enum Ts {
    One([TsSpec; 2]),
    Many(Box<(Vec<TsSpec>, Vec<TsSpec>)>),
}

impl Ts {
    fn new(local: &[TsSpec], remote: &[TsSpec]) -> Ts {
        match (local, remote) {
            ([l], [r]) => Ts::One([*l, *r]),
            _ => Ts::Many(Box::new((local.to_vec(), remote.to_vec()))),
        }
    }

    /// Whether these are `local` and `remote`.
    fn is(&self, local: &[TsSpec], remote: &[TsSpec]) -> bool {
        match self {
            Ts::One([l, r]) => local == [*l] && remote == [*r],
            Ts::Many(b) => b.0 == local && b.1 == remote,
        }
    }
}

/// The policies of an installed CHILD_SA, in the order added.
#[derive(Debug, Clone)]
enum Policies {
    /// `n` pairs bound under configured policies (the usual case), named as [`policy_pairs`] names them:
    /// `ike-N-o0`, `ike-N-i0`, `ike-N-o1`, ... (not stored: a gateway has thousands of CHILD_SAs).
    Bound(u32),
    /// Any others (policies of their own, a rekey's moved selectors), by name.
    Named(Vec<String>),
}

impl Policies {
    /// Their names, for instance `instance`.
    fn names(&self, instance: u64) -> Vec<String> {
        match self {
            Policies::Bound(n) => (0..*n)
                .flat_map(|k| {
                    [
                        format!("ike-{instance}-o{k}"),
                        format!("ike-{instance}-i{k}"),
                    ]
                })
                .collect(),
            Policies::Named(v) => v.clone(),
        }
    }
}

/// A configured child's policies installed at start, and its actions.
#[derive(Debug, Clone)]
pub struct Trap {
    pub connection: String,
    pub child: String,
    /// Its configured policies.
    policies: Vec<PolicyParams>,
    pub start_action: Action,
    pub dpd_action: Action,
    pub close_action: Action,
    /// Whether an acquire initiates it now: `start_action = trap`, or trap as the action after it went down.
    pub armed: bool,
    /// When the driver last initiated it for an acquire (until it came up or failed: no second initiation).
    pub pending: Option<std::time::Instant>,
}

/// What the driver installed, by the CHILD_SA's current inbound SPI.
pub struct Installer {
    port: Arc<dyn SaPort>,
    /// Boxed: the map's table (kept at most half full at times, as it grows) holds a pointer per slot, not a
    /// whole record.
    by_inbound: HashMap<u32, Box<Installed>>,
    next: u64,
    /// The configured children's policies (see the module documentation), in configuration order.
    pub traps: Vec<Trap>,
    /// The acquires of the IP engine (subscribed at [`Installer::install_traps`]).
    pub acquires: Option<std::sync::mpsc::Receiver<crate::runtime::sa_port::Acquire>>,
    /// The established IKE SAs and their connection.
    pub ike_sas: IkeSas,
    /// IKE SAs this side is deleting (stop, `netveil terminate`): their children going down is no close by the
    /// peer, so no `close_action`.
    pub closing: HashSet<IkeSaId>,
    /// CHILD_SAs (inbound SPI) this side is deleting alone (`netveil terminate --child`): no `close_action` either.
    pub closing_children: HashSet<u32>,
    /// How long the last new CHILD_SA took to install (the SaPort calls), for the logs and tests.
    pub last_install: Option<std::time::Duration>,
    /// Children gone down in the batch of events being applied (IKE SA, connection, child), and the IKE SAs that
    /// died of a timeout in it: the driver applies their actions after the batch.
    pub downs: Vec<(IkeSaId, String, String)>,
    pub dead: HashSet<IkeSaId>,
    /// When [`Installer::traffic`] looks next.
    traffic_at: Option<std::time::Instant>,
    /// Rekeyed CHILD_SAs' outbound SAs not switched to yet, by the inbound SPI of the CHILD_SA they replace (whose
    /// `ChildSaDown` switches them): the rekeyed CHILD_SA's inbound SPI and its outbound SA.
    pending_out: HashMap<u32, (u32, OutboundSaParams)>,
    /// The (connection, child) of the installed CHILD_SAs, each pair stored once (names of the configuration).
    names: Vec<Arc<(String, String)>>,
}

/// The established IKE SAs and their connection, whose name is stored once per connection, not per IKE SA.
#[derive(Default)]
pub struct IkeSas {
    by_id: HashMap<IkeSaId, Arc<String>>,
    names: Vec<Arc<String>>,
}

impl IkeSas {
    pub fn insert(&mut self, id: IkeSaId, connection: String) {
        let name = match self.names.iter().find(|n| ***n == connection) {
            Some(n) => n.clone(),
            None => {
                let n = Arc::new(connection);
                self.names.push(n.clone());
                n
            }
        };
        self.by_id.insert(id, name);
    }

    pub fn remove(&mut self, id: &IkeSaId) -> Option<Arc<String>> {
        self.by_id.remove(id)
    }

    pub fn contains_key(&self, id: &IkeSaId) -> bool {
        self.by_id.contains_key(id)
    }

    /// Each IKE SA and its connection.
    pub fn iter(&self) -> impl Iterator<Item = (&IkeSaId, &Arc<String>)> {
        self.by_id.iter()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// How often the driver asks the IP engine which CHILD_SAs received packets ([`Installer::traffic`]).
pub const TRAFFIC_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The owner named when the control socket's changes to the driver's SAs and policies are refused.
pub const OWNER: &str = "the IKE driver";

/// Why a CHILD_SA could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("the negotiated ESP proposal {0} has no suite the IP engine installs")]
    Suite(String),
    #[error("the IP engine refused {what}: {err}")]
    Refused { what: String, err: ChangeError },
}

fn refused(what: impl Into<String>) -> impl FnOnce(ChangeError) -> InstallError {
    let what = what.into();
    move |err| InstallError::Refused { what, err }
}

impl Installer {
    pub fn new(port: Arc<dyn SaPort>) -> Installer {
        Installer {
            port,
            by_inbound: HashMap::new(),
            next: 1,
            traps: Vec::new(),
            acquires: None,
            ike_sas: IkeSas::default(),
            closing: HashSet::new(),
            closing_children: HashSet::new(),
            last_install: None,
            downs: Vec::new(),
            dead: HashSet::new(),
            pending_out: HashMap::new(),
            names: Vec::new(),
            traffic_at: None,
        }
    }

    /// At the driver's start: claims the `ike-` names, puts the connections' fixed peers in the peer filter,
    /// subscribes to acquires, and installs every configured child's policies (and, where they cover the IKE
    /// addresses, the bypass for the peer's IKE datagrams on port 500 first). A policy of the same name that a
    /// killed predecessor left (restored from the state directory) is replaced.
    pub fn install_traps(&mut self, connections: &[Connection]) -> Result<(), InstallError> {
        self.port.claim("ike-", Some(OWNER));
        let mut peers = crate::runtime::sa_port::KxPeers::default();
        // A connection open to any peer (no remote_addrs) leaves the peer filter to the SAs: a list of the fixed
        // peers would drop its peers' ESP.
        let open = connections.iter().any(|c| c.remote_addrs.is_empty());
        for c in connections.iter().filter(|_| !open) {
            for a in &c.remote_addrs {
                if !peers.addrs.contains(a) {
                    peers.addrs.push(*a);
                }
            }
            // Any connection may move to UDP 4500 (NAT, or encap forced): ESP-in-UDP from the peers.
            peers.nat_t = true;
        }
        if !peers.addrs.is_empty() {
            self.port
                .set_kx_peers(peers)
                .map_err(refused("the IKE peers in the peer filter"))?;
        }
        self.acquires = self.port.acquires();
        // What a killed predecessor added at runtime under our prefix (restored by the engine at its start): the
        // configured children's policies are replaced below, the rest removed after.
        let left = self.port.runtime_policies("ike-");
        let mut ours = Vec::new();
        let mut k = 0;
        for c in connections {
            for ch in &c.children {
                k += 1;
                let (in_name, out_name) = (format!("ike-c{k}-in"), format!("ike-c{k}-out"));
                let mut policies = Vec::new();
                let mut bypasses = Vec::new();
                let pairs = policy_pairs(
                    &ch.local_ts,
                    &ch.remote_ts,
                    &format!("ike-c{k}"),
                    &out_name,
                    &in_name,
                );
                for (l, r, out, inb) in pairs {
                    for la in &c.local_addrs {
                        for ra in &c.remote_addrs {
                            let ike = (
                                std::net::SocketAddr::new(*la, super::config::IKE_PORT),
                                std::net::SocketAddr::new(*ra, c.remote_port),
                            );
                            let name = format!("ike-c{k}-b{}", bypasses.len());
                            if let Some(b) = bypass(l, r, ike, name) {
                                bypasses.push(b);
                            }
                        }
                    }
                    policies.push(out);
                    policies.push(inb);
                }
                for (p, position) in bypasses
                    .into_iter()
                    .map(|b| (b, Some(0)))
                    .chain(policies.iter().cloned().map(|p| (p, None)))
                {
                    ours.push(p.name.clone());
                    self.add_replacing(p, position)?;
                }
                self.traps.push(Trap {
                    connection: c.name.clone(),
                    child: ch.name.clone(),
                    policies,
                    start_action: ch.start_action,
                    dpd_action: ch.dpd_action,
                    close_action: ch.close_action,
                    armed: ch.start_action == Action::Trap,
                    pending: None,
                });
            }
        }
        self.remove_left(left, &ours);
        Ok(())
    }

    /// Removes the policies of a predecessor (`left`) that are not among the configured children's (`ours`):
    /// those of the CHILD_SAs it had negotiated (their SAs went with it: keys are never stored), and of children
    /// no longer configured. The configured children's policies cover the traffic of the first until their
    /// CHILD_SAs are negotiated again. (`netveil policy del` refuses these names: the driver owns them.)
    fn remove_left(&self, left: Vec<String>, ours: &[String]) {
        let mut removed = Vec::new();
        for name in left.into_iter().filter(|n| !ours.contains(n)) {
            match self.port.policy_del(&name) {
                Ok(()) => removed.push(name),
                Err(e) => tracing::warn!(
                    "ike: policy {name}, left by the previous instance, not removed: {}",
                    e.reason
                ),
            }
        }
        if !removed.is_empty() {
            tracing::info!(
                "ike: removed {} policies the previous instance had added ({}): the configured children's policies \
                 cover their traffic until their CHILD_SAs are negotiated again",
                removed.len(),
                removed.join(", ")
            );
        }
    }

    /// Adds a policy; one of its name left by a predecessor is removed first.
    fn add_replacing(&self, p: PolicyParams, position: Option<usize>) -> Result<(), InstallError> {
        let name = p.name.clone();
        match self.port.policy_add(p.clone(), position) {
            Err(e) if e.key == "policy.name" => {
                let _ = self.port.policy_del(&name);
                self.port.policy_add(p, position)
            }
            r => r,
        }
        .map_err(refused(format!("policy {name}")))
    }

    /// The configured child whose policy `policy` is, if it is one.
    pub fn trap_of(&mut self, policy: &str) -> Option<&mut Trap> {
        self.traps
            .iter_mut()
            .find(|t| t.policies.iter().any(|p| p.name == policy))
    }

    /// The configured child (connection, child).
    pub fn trap(&mut self, connection: &str, child: &str) -> Option<&mut Trap> {
        self.traps
            .iter_mut()
            .find(|t| t.connection == connection && t.child == child)
    }

    /// Whether a CHILD_SA of this configured child is installed.
    pub fn child_up(&self, connection: &str, child: &str) -> bool {
        self.by_inbound
            .values()
            .any(|i| i.names.0 == connection && i.names.1 == child)
    }

    /// The (connection, child) of an installed CHILD_SA.
    pub fn child_of(&self, inbound_spi: u32) -> Option<(String, String)> {
        self.by_inbound
            .get(&inbound_spi)
            .map(|i| (*i.names).clone())
    }

    /// The configured policy that covers `p` (same direction and its selector within), the child's own first.
    fn cover_of(&self, p: &PolicyParams, connection: &str, child: &str) -> Option<String> {
        let own = |t: &&Trap| t.connection == connection && t.child == child;
        self.traps
            .iter()
            .filter(own)
            .chain(self.traps.iter().filter(|t| !own(t)))
            .flat_map(|t| t.policies.iter())
            .find(|t| {
                t.direction == p.direction
                    && crate::runtime::sa_port::selector_within(&p.selector, &t.selector)
            })
            .map(|t| t.name.clone())
    }

    /// (`connection`, `child`) as stored in the installed CHILD_SAs' records: one allocation per configured
    /// child, not per CHILD_SA.
    fn intern(&mut self, connection: &str, child: &str) -> Arc<(String, String)> {
        if let Some(n) = self
            .names
            .iter()
            .find(|n| n.0 == connection && n.1 == child)
        {
            return n.clone();
        }
        let n = Arc::new((connection.to_string(), child.to_string()));
        self.names.push(n.clone());
        n
    }

    /// The SA names of an instance.
    pub fn sa_names(instance: u64) -> (String, String) {
        (format!("ike-{instance}-in"), format!("ike-{instance}-out"))
    }

    /// The policy pairs of a negotiated CHILD_SA (see [`policy_pairs`]), named after its instance and SAs.
    fn child_pairs(
        instance: u64,
        c: &ChildSa,
    ) -> Vec<(&TsSpec, &TsSpec, PolicyParams, PolicyParams)> {
        let (in_name, out_name) = Self::sa_names(instance);
        policy_pairs(
            &c.local_ts,
            &c.remote_ts,
            &format!("ike-{instance}"),
            &out_name,
            &in_name,
        )
    }

    /// The instance that carries the CHILD_SA of this inbound SPI, if installed.
    pub fn instance(&self, inbound_spi: u32) -> Option<u64> {
        self.by_inbound.get(&inbound_spi).map(|i| i.instance)
    }

    /// How many CHILD_SAs are installed.
    pub fn len(&self) -> usize {
        self.by_inbound.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_inbound.is_empty()
    }

    /// Installs (or, with `replaces`, rekeys in place) one CHILD_SA. On an error the SAs of a new instance that
    /// were added are removed again.
    pub fn install(&mut self, c: &ChildSa) -> Result<u64, InstallError> {
        let t0 = std::time::Instant::now();
        let r = self.install_timed(c);
        if c.replaces.is_none() {
            self.last_install = Some(t0.elapsed());
        }
        r
    }

    /// The SA parameters of CHILD_SA `c` as instance `instance` (inbound, outbound).
    fn sa_params(
        c: &ChildSa,
        instance: u64,
    ) -> Result<(InboundSaParams, OutboundSaParams), InstallError> {
        let p = &c.proposal;
        let encr = *p
            .encr()
            .first()
            .ok_or_else(|| InstallError::Suite(p.to_string()))?;
        let integ = p.integ().first().copied();
        let suite = esp_suite(encr, integ).ok_or_else(|| InstallError::Suite(p.to_string()))?;
        let esn = p.esn().first() == Some(&Esn::Yes);
        let (mode_in, mode_out) = match c.mode {
            IkeMode::Transport => (Mode::Transport, Mode::Transport),
            IkeMode::Tunnel => (
                Mode::Tunnel {
                    local: c.local.ip(),
                    remote: c.remote.ip(),
                },
                Mode::Tunnel {
                    local: c.local.ip(),
                    remote: c.remote.ip(),
                },
            ),
        };
        let encap = c.udp_encap.then(|| UdpEncap {
            local_port: c.local.port(),
            remote_port: c.remote.port(),
        });
        let common = |name: String, sa: &EspSa, mode: Mode| SaCommon {
            name,
            spi: sa.spi,
            suite: Suite::Esp(suite),
            mode,
            enc_key: Zeroizing::new(sa.encr_key.expose().to_vec()),
            auth_key: Zeroizing::new(sa.integ_key.expose().to_vec()),
            esn,
            // Rekeying and expiry are the IKE SA's: the machine rekeys before the configured life_time.
            lifetime: Lifetime::default(),
            encap,
            // IKE's KEYMAT: new for every CHILD_SA and rekey, so no sequence mark or receive floor is needed.
            keys: crate::runtime::sa_port::Negotiated::keys(),
        };
        let (in_name, out_name) = Self::sa_names(instance);
        Ok((
            InboundSaParams {
                sa: common(in_name, &c.inbound, mode_in),
                replay_window: c.replay_window.max(64),
            },
            OutboundSaParams {
                sa: common(out_name, &c.outbound, mode_out),
                tfc_pad_to: 0,
            },
        ))
    }

    /// A new CHILD_SA (not a rekey) whose selectors are all under configured policies: its instance, the one
    /// change that installs it (both SAs and the bound policies), and its record. `None`: it needs policies of
    /// its own ([`Installer::add_policies`]).
    fn prepare_new(
        &mut self,
        c: &ChildSa,
    ) -> Result<Option<(u64, Vec<SaOp>, Installed)>, InstallError> {
        let instance = self.next;
        let Some(binds) = self.bound_pairs(instance, c) else {
            return Ok(None);
        };
        let (inbound, outbound) = Self::sa_params(c, instance)?;
        self.next += 1;
        let installed = Installed {
            instance,
            packets: 0,
            outbound_spi: c.outbound.spi,
            names: self.intern(&c.connection, &c.child),
            ts: Ts::new(&c.local_ts, &c.remote_ts),
            policies: Policies::Bound(
                u32::try_from(binds.len() / 2).expect("fewer than 2^32 pairs"),
            ),
        };
        let mut ops = vec![SaOp::AddIn(inbound), SaOp::AddOut(outbound)];
        ops.extend(
            binds
                .into_iter()
                .map(|(policy, cover)| SaOp::Bind { policy, cover }),
        );
        Ok(Some((instance, ops, installed)))
    }

    /// Installs new CHILD_SAs (`cs`, none a rekey: those go to [`Installer::install`]) that came in one batch of
    /// events: those whose selectors are all under configured policies as one change (one snapshot for the data
    /// plane however many there are), the others, and all of them if that change is refused, one by one.
    /// Results in the order of `cs`.
    pub fn install_many(&mut self, cs: &[&ChildSa]) -> Vec<Result<u64, InstallError>> {
        let t0 = std::time::Instant::now();
        let mut results: Vec<Option<Result<u64, InstallError>>> = cs.iter().map(|_| None).collect();
        let mut staged = Vec::new();
        for (k, c) in cs.iter().enumerate() {
            if c.replaces.is_some() || self.by_inbound.contains_key(&c.inbound.spi) {
                continue;
            }
            match self.prepare_new(c) {
                Ok(Some(x)) => staged.push((k, x)),
                Ok(None) => {}
                Err(e) => results[k] = Some(Err(e)),
            }
        }
        if staged.len() > 1 {
            let mut ops = Vec::new();
            let mut records = Vec::new();
            for (k, (instance, o, rec)) in staged {
                ops.extend(o);
                records.push((k, instance, rec));
            }
            if self.port.batch(ops).is_ok() {
                for (k, instance, rec) in records {
                    self.by_inbound.insert(cs[k].inbound.spi, Box::new(rec));
                    results[k] = Some(Ok(instance));
                }
                self.last_install = Some(t0.elapsed());
            }
        }
        cs.iter()
            .zip(results)
            .map(|(c, r)| r.unwrap_or_else(|| self.install(c)))
            .collect()
    }

    fn install_timed(&mut self, c: &ChildSa) -> Result<u64, InstallError> {
        if c.replaces.is_none() {
            // The usual case: every pair of selectors under a configured policy. Both SAs and the bound policies
            // go in as one change (one snapshot for the data plane; all or nothing).
            if let Some((instance, ops, record)) = self.prepare_new(c)? {
                let (i, o) = Self::sa_names(instance);
                self.port
                    .batch(ops)
                    .map_err(refused(format!("CHILD_SA {i} and {o}")))?;
                self.by_inbound.insert(c.inbound.spi, Box::new(record));
                return Ok(instance);
            }
        }
        let old = c.replaces.and_then(|spi| self.by_inbound.remove(&spi));
        let instance = old.as_ref().map_or_else(
            || {
                let n = self.next;
                self.next += 1;
                n
            },
            |o| o.instance,
        );
        let (in_name, out_name) = Self::sa_names(instance);
        let (inbound, outbound) = Self::sa_params(c, instance)?;
        let mut installed = Installed {
            instance,
            packets: 0,
            outbound_spi: c.outbound.spi,
            names: self.intern(&c.connection, &c.child),
            ts: Ts::new(&c.local_ts, &c.remote_ts),
            policies: Policies::Named(Vec::new()),
        };
        if let Some(old) = old {
            // Rekey: the inbound SA replaced in place now, the outbound one when the old CHILD_SA goes; the
            // policies follow only if the selectors moved.
            let replaced = c.replaces.expect("a rekey");
            // A rekey of the old CHILD_SA's own pending switch supersedes it.
            self.pending_out.retain(|_, (owner, _)| *owner != replaced);
            let r = (|| {
                self.port
                    .sa_update(AnySaParams::In(inbound))
                    .map_err(refused(format!("rekeyed inbound SA {in_name}")))?;
                if old.ts.is(&c.local_ts, &c.remote_ts) {
                    installed.policies = old.policies.clone();
                } else {
                    for p in &old.policies.names(instance) {
                        let _ = self.port.policy_del(p);
                    }
                    installed.policies = Policies::Named(self.add_policies(instance, c)?);
                }
                Ok(())
            })();
            if let Err(e) = r {
                // Keep track of what is still there (the old SAs, maybe updated) under the new SPI: a later
                // ChildSaDown of either removes the instance.
                installed.policies = old.policies;
                self.by_inbound.insert(c.inbound.spi, Box::new(installed));
                return Err(e);
            }
            self.pending_out.insert(replaced, (c.inbound.spi, outbound));
        } else {
            self.port
                .sa_add_in(inbound)
                .map_err(refused(format!("inbound SA {in_name}")))?;
            if let Err(e) = self.port.sa_add_out(outbound) {
                let _ = self.port.sa_del(&in_name);
                return Err(refused(format!("outbound SA {out_name}"))(e));
            }
            match self.add_policies(instance, c) {
                Ok(p) => installed.policies = Policies::Named(p),
                Err(e) => {
                    let _ = self.port.sa_del(&out_name);
                    let _ = self.port.sa_del(&in_name);
                    return Err(e);
                }
            }
        }
        self.by_inbound.insert(c.inbound.spi, Box::new(installed));
        Ok(instance)
    }

    /// The policies of [`Installer::add_policies`] when every pair of selectors is covered by a configured
    /// policy, each with the policy it is bound under; `None` if a pair is not (then it needs policies of its
    /// own, which [`Installer::add_policies`] adds).
    fn bound_pairs(&self, instance: u64, c: &ChildSa) -> Option<Vec<(PolicyParams, String)>> {
        let mut binds = Vec::new();
        for (_, _, out, inb) in Self::child_pairs(instance, c) {
            let co = self.cover_of(&out, &c.connection, &c.child)?;
            let ci = self.cover_of(&inb, &c.connection, &c.child)?;
            binds.push((out, co));
            binds.push((inb, ci));
        }
        Some(binds)
    }

    /// One outbound and one inbound policy per pair of selectors of the same family (the rest cannot carry
    /// traffic), each bound in memory under the configured policy that covers it ([`SaPort::policy_bind`]: no
    /// nftables change). A pair no configured policy covers gets policies of its own, at the end, with their
    /// nftables rules; where such a pair covers the IKE SA's own addresses (transport mode, or a tunnel whose
    /// selectors include the outer addresses), an inbound bypass for the peer's IKE datagrams comes first
    /// (`ike-N-bI`, at the top): the inbound protect policy's fail-closed input rule would otherwise drop them in
    /// clear, and with them every later exchange of the IKE SA (DELETE, rekeys, liveness checks). IKE's own
    /// datagrams are never ESP-protected (the outbound ones carry the socket mark). On an error the ones added are
    /// removed again.
    fn add_policies(&self, instance: u64, c: &ChildSa) -> Result<Vec<String>, InstallError> {
        let mut added: Vec<String> = Vec::new();
        let undo = |added: &[String]| {
            for a in added.iter().rev() {
                let _ = self.port.policy_del(a);
            }
        };
        for (n, (l, r, out, inb)) in Self::child_pairs(instance, c).into_iter().enumerate() {
            let covers = (
                self.cover_of(&out, &c.connection, &c.child),
                self.cover_of(&inb, &c.connection, &c.child),
            );
            if let (Some(co), Some(ci)) = covers {
                for (p, cover) in [(out, co), (inb, ci)] {
                    let name = p.name.clone();
                    if let Err(e) = self.port.policy_bind(p, &cover) {
                        undo(&added);
                        return Err(refused(format!("policy {name} under {cover}"))(e));
                    }
                    added.push(name);
                }
                continue;
            }
            let bypass = bypass(l, r, (c.local, c.remote), format!("ike-{instance}-b{n}"));
            for (p, position) in bypass
                .into_iter()
                .map(|b| (b, Some(0)))
                .chain([(out, None), (inb, None)])
            {
                let name = p.name.clone();
                // A policy of this name that is not ours is a killed predecessor's, restored by the engine
                // to keep its traffic blocked (it names SAs that are gone): ours replaces it.
                let stale = || {
                    self.by_inbound
                        .values()
                        .all(|i| !i.policies.names(i.instance).contains(&name))
                };
                let r = match self.port.policy_add(p.clone(), position) {
                    Err(_) if stale() && self.port.policy_del(&name).is_ok() => {
                        tracing::info!("ike: policy {name} of a previous instance replaced");
                        self.port.policy_add(p, position)
                    }
                    r => r,
                };
                if let Err(e) = r {
                    undo(&added);
                    return Err(refused(format!("policy {name}"))(e));
                }
                added.push(name);
            }
        }
        Ok(added)
    }

    /// Removes the CHILD_SA whose inbound SPI is `inbound_spi`: its policies, then both SAs. `Ok(false)`: not
    /// installed, or replaced by a rekey, whose outbound SA now takes over.
    pub fn remove(&mut self, inbound_spi: u32, outbound_spi: u32) -> Result<bool, InstallError> {
        let Some(i) = self.by_inbound.get(&inbound_spi) else {
            if let Some((_, out)) = self.pending_out.remove(&inbound_spi) {
                let name = out.sa.name.clone();
                self.port
                    .sa_update(AnySaParams::Out(out))
                    .map_err(refused(format!("rekeyed outbound SA {name}")))?;
            }
            return Ok(false);
        };
        if i.outbound_spi != outbound_spi {
            // A rekey moved the instance to a new outbound SPI under the same inbound one: not this pair.
            return Ok(false);
        }
        let i = self.by_inbound.remove(&inbound_spi).expect("looked up");
        self.pending_out
            .retain(|_, (owner, _)| *owner != inbound_spi);
        let (in_name, out_name) = Self::sa_names(i.instance);
        // As one change (one snapshot); if it is refused, one by one, as far as each goes.
        let policies = i.policies.names(i.instance);
        let mut ops: Vec<SaOp> = policies.iter().cloned().map(SaOp::DelPolicy).collect();
        ops.push(SaOp::DelSa(out_name.clone()));
        ops.push(SaOp::DelSa(in_name.clone()));
        if self.port.batch(ops).is_ok() {
            return Ok(true);
        }
        let mut first_err = None;
        for p in &policies {
            if let Err(e) = self.port.policy_del(p) {
                first_err.get_or_insert(refused(format!("removal of policy {p}"))(e));
            }
        }
        for n in [out_name, in_name] {
            if let Err(e) = self.port.sa_del(&n) {
                first_err.get_or_insert(refused(format!("removal of SA {n}"))(e));
            }
        }
        first_err.map_or(Ok(true), Err)
    }

    /// The inbound SPIs of the installed CHILD_SAs whose inbound SA authenticated packets since the last look (at
    /// most once per [`TRAFFIC_EVERY`]; an empty list in between): for dead peer detection, which waits while the
    /// peer's ESP comes in, as strongSwan's does.
    pub fn traffic(&mut self, now: std::time::Instant) -> Vec<u32> {
        if self.traffic_at.is_some_and(|t| now < t) {
            return Vec::new();
        }
        self.traffic_at = Some(now + TRAFFIC_EVERY);
        let mut got = Vec::new();
        for (spi, i) in self.by_inbound.iter_mut() {
            if let Some(n) = self.port.inbound_packets(*spi) {
                if n > i.packets {
                    i.packets = n;
                    got.push(*spi);
                }
            }
        }
        got
    }

    /// Removes every installed CHILD_SA (the driver stops).
    pub fn remove_all(&mut self) {
        let all: Vec<(u32, u32)> = self
            .by_inbound
            .iter()
            .map(|(i, v)| (*i, v.outbound_spi))
            .collect();
        for (i, o) in all {
            let _ = self.remove(i, o);
        }
    }
}

mod selectors;
use selectors::*;

#[cfg(test)]
mod tests;
