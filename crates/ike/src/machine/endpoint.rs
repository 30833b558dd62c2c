//! The [`Endpoint`]: every IKE SA of a host, found by SPI and by the initiator's address, the queues of datagrams
//! to send and events to report, the API calls (initiate, start a child, terminate) and the dispatch of received
//! datagrams and timeouts to the exchanges, whose handlers (`impl Endpoint` blocks) are in the modules beside it.
//! Its fields and helpers are `pub(super)`: those modules are part of it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

use netveil_crypto::rand::Rng;

use super::frag::{self, REASSEMBLY_BUDGET};
use super::limits::Limits;
use super::sa::{self, IkeSa, Outcome, State};
use crate::config::{AuthMethod, Connection};
use crate::event::{Event, Failure, IkeSaId, Transmit};
use crate::keys::Role;
use crate::message::{header, ExchangeType, Header};

/// What the endpoint dropped or repeated, for diagnostics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests sent again after a timeout.
    pub retransmits: u64,
    /// Cached responses sent again for a retransmitted request.
    pub responses_resent: u64,
    /// Datagrams that did not parse, did not authenticate, or had no SA.
    pub dropped: u64,
    /// Messages of an exchange type, or with a message id, the SA's state does not expect.
    pub unexpected: u64,
    /// COOKIE notifies sent.
    pub cookies_sent: u64,
    /// CERT payloads that did not parse (or not X.509), and malformed CERTREQ payloads: dropped.
    pub certs_dropped: u64,
    /// Peers authenticated with AUTH method 1 (RSA with SHA-1, RFC 7296's legacy method; RFC 7427 is preferred).
    pub legacy_auth: u64,
    /// Partial fragment sets dropped to keep all SAs' sets within the reassembly budget
    /// ([`Endpoint::with_reassembly_budget`]).
    pub reassemblies_evicted: u64,
}

/// Why an API call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("no connection named '{0}'")]
    UnknownConnection(String),
    #[error("connection '{connection}' has no child named '{child}'")]
    UnknownChild { connection: String, child: String },
    #[error("connection '{0}' has no child to start")]
    NoChild(String),
    #[error("connection '{0}' has no remote address to initiate to")]
    NoRemoteAddress(String),
    #[error("connection '{0}' uses auth = psk but has no pre-shared key")]
    NoPsk(String),
    #[error("no IKE SA {0:?}")]
    UnknownIkeSa(IkeSaId),
    #[error("too many IKE SAs")]
    TooManySas,
    #[error("the IKE SA is not established, has a request outstanding, or has no such CHILD_SA")]
    Busy,
}

/// Where [`Endpoint::start_child`] put a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// In a new IKE SA (IKE_SA_INIT sent; the child goes in its IKE_AUTH).
    New(IkeSaId),
    /// In this IKE SA of the connection, with CREATE_CHILD_SA: sent, queued until the SA is up and idle, or
    /// already under way.
    Queued(IkeSaId),
    /// Already up in this IKE SA: nothing was sent.
    Up(IkeSaId),
}

impl Started {
    /// The IKE SA the child is (or goes) in.
    pub fn ike_sa(&self) -> IkeSaId {
        match self {
            Started::New(id) | Started::Queued(id) | Started::Up(id) => *id,
        }
    }
}

/// The secret the responder's cookies are keyed with (RFC 7296 2.6), and the previous one.
pub(super) struct CookieSecret {
    pub(super) version: u8,
    pub(super) current: [u8; 32],
    pub(super) previous: Option<(u8, [u8; 32])>,
    pub(super) since: Instant,
}

/// Responder SAs by the initiator's SPI and the address its IKE_SA_INIT came from ([`IkeSa::init_remote`]), as a
/// map by both would have them, in 16 bytes a slot (a map by both took 48, about 100 bytes per IKE SA with the
/// table's room): by the SPI alone, the address checked against the SA; the rare SA whose SPI another peer's SA
/// already has (random 64-bit SPIs meet only where a peer reuses one it saw) by both.
#[derive(Default)]
pub(super) struct InitIndex {
    pub(super) by_spi: HashMap<u64, IkeSaId>,
    pub(super) more: HashMap<(u64, SocketAddr), IkeSaId>,
}

impl InitIndex {
    pub(super) fn get(
        &self,
        spi: u64,
        remote: SocketAddr,
        sas: &BTreeMap<IkeSaId, Box<IkeSa>>,
    ) -> Option<IkeSaId> {
        self.by_spi
            .get(&spi)
            .filter(|id| sas.get(id).is_some_and(|sa| sa.init_remote == remote))
            .or_else(|| self.more.get(&(spi, remote)))
            .copied()
    }

    pub(super) fn insert(
        &mut self,
        spi: u64,
        remote: SocketAddr,
        id: IkeSaId,
        sas: &BTreeMap<IkeSaId, Box<IkeSa>>,
    ) {
        match self.by_spi.get(&spi).and_then(|o| sas.get(o)) {
            Some(other) if other.init_remote != remote => {
                self.more.insert((spi, remote), id);
            }
            _ => {
                self.by_spi.insert(spi, id);
            }
        }
    }

    pub(super) fn remove(&mut self, spi: u64, remote: SocketAddr, id: IkeSaId) {
        if self.by_spi.get(&spi) == Some(&id) {
            self.by_spi.remove(&spi);
        } else if self.more.get(&(spi, remote)) == Some(&id) {
            self.more.remove(&(spi, remote));
        }
    }
}

/// Every IKE SA of this host, with the queues of datagrams to send and events to report.
pub struct Endpoint {
    pub(super) connections: Vec<Connection>,
    pub(super) rng: Box<dyn Rng + Send>,
    pub(super) limits: Limits,
    /// Boxed: an IkeSa is about 1.3 KB, and the map's nodes keep room for eleven of them inline, about half used.
    pub(super) sas: BTreeMap<IkeSaId, Box<IkeSa>>,
    /// Our SPI (SPIi when we initiated, SPIr when we responded) to the SA.
    pub(super) by_spi: HashMap<u64, IkeSaId>,
    /// Responder SAs by the initiator's SPI and address (a retransmitted IKE_SA_INIT gets the same answer).
    pub(super) by_init: InitIndex,
    /// Responder SAs in state HalfOpen.
    pub(super) half_open: usize,
    /// Inbound ESP SPIs in use on this endpoint.
    pub(super) inbound_spis: HashSet<u32>,
    pub(super) next_id: u64,
    pub(super) cookie: CookieSecret,
    pub(super) transmits: VecDeque<Transmit>,
    pub(super) events: VecDeque<Event>,
    pub(super) counters: Counters,
    /// An instant and the wall-clock time then, for certificate validity ([`Endpoint::with_wall_clock`]).
    pub(super) wall: Option<(Instant, SystemTime)>,
    /// What all SAs' partial fragment sets hold, under one cap.
    pub(super) frags: frag::Budget,
}

impl Endpoint {
    /// `connections` as configured; `rng`: all randomness (SPIs, nonces, DH keys, IVs) comes from it.
    pub fn new(
        connections: Vec<Connection>,
        mut rng: Box<dyn Rng + Send>,
        now: Instant,
    ) -> Endpoint {
        let mut current = [0u8; 32];
        rng.fill(&mut current);
        Endpoint {
            connections,
            rng,
            limits: Limits::default(),
            sas: BTreeMap::new(),
            by_spi: HashMap::new(),
            by_init: InitIndex::default(),
            half_open: 0,
            inbound_spis: HashSet::new(),
            next_id: 1,
            cookie: CookieSecret {
                version: 0,
                current,
                previous: None,
                since: now,
            },
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
            wall: None,
            frags: frag::Budget::new(REASSEMBLY_BUDGET),
        }
    }

    /// The wall-clock time `wall` at `at`: certificates are checked against it (the machine reads no clock).
    /// Without it, certificate authentication fails ("no wall-clock time").
    pub fn with_wall_clock(mut self, at: Instant, wall: SystemTime) -> Endpoint {
        self.wall = Some((at, wall));
        self
    }

    /// [`Endpoint::with_wall_clock`] on a running endpoint (the driver keeps it current: the monotonic clock
    /// drifts from the wall clock across suspends and time adjustments).
    pub fn set_wall_clock(&mut self, at: Instant, wall: SystemTime) {
        self.wall = Some((at, wall));
    }

    /// The endpoint with other caps and timers.
    pub fn with_limits(mut self, limits: Limits) -> Endpoint {
        self.limits = limits;
        self
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The endpoint with another budget for the partial fragment sets (RFC 7383) of all its SAs together, in
    /// bytes ([`REASSEMBLY_BUDGET`] by default; each SA's set is also capped at 64 KiB of plaintext): the oldest
    /// sets are dropped to keep within it (see the `frag` module).
    pub fn with_reassembly_budget(mut self, bytes: usize) -> Endpoint {
        self.frags.set_cap(bytes);
        self
    }

    /// Bytes the partial fragment sets of all SAs hold now (never above the reassembly budget), and how many sets.
    pub fn reassembly_held(&self) -> (usize, usize) {
        (self.frags.held(), self.frags.sets())
    }

    pub fn counters(&self) -> Counters {
        Counters {
            reassemblies_evicted: self.frags.evicted(),
            ..self.counters
        }
    }

    /// Half-open responder SAs now (never above [`Limits::half_open_max`]).
    pub fn half_open(&self) -> usize {
        self.half_open
    }

    /// IKE SAs now, in every state.
    pub fn ike_sa_count(&self) -> usize {
        self.sas.len()
    }

    /// The chosen IKE proposal of one IKE SA, in strongSwan's syntax (what [`Endpoint::status`] shows for it,
    /// without building every SA's status).
    pub fn ike_proposal(&self, ike_sa: IkeSaId) -> Option<String> {
        self.sas
            .get(&ike_sa)
            .and_then(|sa| sa.proposal())
            .map(|p| p.to_string())
    }

    /// Starts an IKE SA for `connection` with its first child `child` (None: its first configured child). Err:
    /// unknown names.
    pub fn initiate(
        &mut self,
        connection: &str,
        child: Option<&str>,
        now: Instant,
    ) -> Result<IkeSaId, EndpointError> {
        let ci = self
            .connections
            .iter()
            .position(|c| c.name == connection)
            .ok_or_else(|| EndpointError::UnknownConnection(connection.to_string()))?;
        let conn = &self.connections[ci];
        let child_i = match child {
            Some(name) => conn
                .children
                .iter()
                .position(|c| c.name == name)
                .ok_or_else(|| EndpointError::UnknownChild {
                    connection: connection.to_string(),
                    child: name.to_string(),
                })?,
            None if conn.children.is_empty() => {
                return Err(EndpointError::NoChild(connection.to_string()))
            }
            None => 0,
        };
        let remote_ip = *conn
            .remote_addrs
            .first()
            .ok_or_else(|| EndpointError::NoRemoteAddress(connection.to_string()))?;
        let psk_used = [&conn.local.method, &conn.remote.method].contains(&&AuthMethod::Psk);
        if psk_used && conn.psk.is_none() {
            return Err(EndpointError::NoPsk(connection.to_string()));
        }
        if self.sas.len() >= self.limits.ike_sa_max {
            return Err(EndpointError::TooManySas);
        }
        let local_ip = conn
            .local_addrs
            .first()
            .copied()
            .unwrap_or(match remote_ip {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            });
        let local = SocketAddr::new(local_ip, 500);
        let remote = SocketAddr::new(remote_ip, conn.remote_port);
        let id = self.new_id();
        let spi_i = self.new_ike_spi();
        let mut sa = IkeSa::new(id, ci, Role::Initiator, spi_i, 0, local, remote, now);
        sa.hs_mut().first_child = Some(child_i);
        self.by_spi.insert(spi_i, id);
        self.start_init(&mut sa, now);
        self.sas.insert(id, Box::new(sa));
        Ok(id)
    }

    /// Starts `child` of `connection` (None: its first configured child) as strongSwan does with its default
    /// `reuse_ikesa = yes`: the children of a connection share its IKE SA. If the connection has an IKE SA here
    /// (as initiator, or as responder once up) that is not going (deleted, rekeyed away, replaced by a
    /// reauthentication), the child goes into it with CREATE_CHILD_SA: at once if the SA is up and idle, else
    /// queued until it is up (a second child asked for while IKE_SA_INIT or IKE_AUTH is under way) and its
    /// outstanding request is answered; if that SA fails, the queued children fail with it (its `Failed` event).
    /// A child already up in it, or already on its way, is not started again. Without such an SA: a new IKE SA
    /// with the child in its IKE_AUTH ([`Endpoint::initiate`], which always starts a new IKE SA). Err: unknown
    /// names, or what `initiate` refuses.
    pub fn start_child(
        &mut self,
        connection: &str,
        child: Option<&str>,
        now: Instant,
    ) -> Result<Started, EndpointError> {
        let ci = self
            .connections
            .iter()
            .position(|c| c.name == connection)
            .ok_or_else(|| EndpointError::UnknownConnection(connection.to_string()))?;
        let conn = &self.connections[ci];
        let k = match child {
            Some(name) => conn
                .children
                .iter()
                .position(|c| c.name == name)
                .ok_or_else(|| EndpointError::UnknownChild {
                    connection: connection.to_string(),
                    child: name.to_string(),
                })?,
            None if conn.children.is_empty() => {
                return Err(EndpointError::NoChild(connection.to_string()))
            }
            None => 0,
        };
        let open = |sa: &IkeSa| {
            let state_ok = match sa.state {
                State::Established => true,
                State::InitSent | State::AuthSent => sa.role == Role::Initiator,
                _ => false,
            };
            state_ok
                && sa.conn == ci
                && !sa.delete_queued
                && sa.reauth.as_ref().is_none_or(|r| r.by.is_none())
                && (conn.remote_addrs.is_empty() || conn.remote_addrs.contains(&sa.remote.ip()))
        };
        // An established one before one being set up, then the newest.
        let Some(id) = self
            .sas
            .values()
            .filter(|sa| open(sa))
            .max_by_key(|sa| (sa.state == State::Established, sa.id))
            .map(|sa| sa.id)
        else {
            return self.initiate(connection, child, now).map(Started::New);
        };
        let Some(mut sa) = self.sas.remove(&id) else {
            return Err(EndpointError::UnknownIkeSa(id));
        };
        let up = sa.children.iter().any(|c| c.cfg == k);
        let coming = sa.hs().first_child == Some(k) && sa.state != State::Established
            || sa.queued_children.as_ref().is_some_and(|q| q.contains(&k))
            || sa.reauth.as_ref().is_some_and(|r| r.queue.contains(&k))
            || matches!(
                sa.pending.as_deref(),
                Some(sa::Pending { purpose: sa::Purpose::CreateChild { cfg, rekey: None, .. }, .. })
                    if *cfg == k
            );
        let r = if up {
            Started::Up(id)
        } else {
            if !coming {
                sa.queued_children.get_or_insert_default().push(k);
                self.after_response(&mut sa, now);
            }
            Started::Queued(id)
        };
        self.sas.insert(id, sa);
        Ok(r)
    }

    /// Tells the endpoint that the data plane received authentic traffic of one of `ike_sa`'s CHILD_SAs: the
    /// peer is alive, and dead peer detection waits another `dpd_delay` (as strongSwan counts inbound ESP).
    pub fn peer_traffic(&mut self, ike_sa: IkeSaId, now: Instant) {
        if let Some(sa) = self.sas.get_mut(&ike_sa) {
            sa.last_heard = sa.last_heard.max(now);
        }
    }

    /// [`Endpoint::peer_traffic`] by CHILD_SA: the data plane received authentic traffic on the inbound SAs
    /// `inbound_spis` (those of CHILD_SAs of this endpoint; others are ignored), whichever IKE SA holds them now
    /// (a rekeyed IKE SA hands its children to its successor).
    pub fn child_traffic(&mut self, inbound_spis: &[u32], now: Instant) {
        if inbound_spis.is_empty() {
            return;
        }
        let spis: HashSet<u32> = inbound_spis.iter().copied().collect();
        for sa in self.sas.values_mut() {
            if sa.children.iter().any(|c| spis.contains(&c.inbound_spi)) {
                sa.last_heard = sa.last_heard.max(now);
            }
        }
    }

    /// Deletes an IKE SA (INFORMATIONAL DELETE; its children go with it).
    pub fn terminate(&mut self, ike_sa: IkeSaId, now: Instant) -> Result<(), EndpointError> {
        let mut sa = self
            .sas
            .remove(&ike_sa)
            .ok_or(EndpointError::UnknownIkeSa(ike_sa))?;
        if sa.state == State::Established {
            self.send_delete_ike(&mut sa, now);
            self.sas.insert(ike_sa, sa);
        } else {
            // Nothing authenticated to tell the peer: the SA just goes.
            self.destroy(*sa, None);
        }
        Ok(())
    }

    /// One received IKE datagram (without the non-ESP marker), with the addresses it came to and from.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        bytes: &[u8],
    ) {
        let Some(hdr) = header::Packet::new_checked(bytes)
            .ok()
            .and_then(|p| Header::parse(&p).ok())
        else {
            self.counters.dropped += 1;
            return;
        };
        if hdr.exchange_type == ExchangeType::IKE_SA_INIT {
            if hdr.flags.response {
                self.init_response(now, local, remote, &hdr, bytes);
            } else {
                self.init_request(now, local, remote, &hdr, bytes);
            }
            return;
        }
        // Our SPI: the responder's when the sender is the original initiator.
        let (ours, theirs) = if hdr.flags.initiator {
            (hdr.responder_spi, hdr.initiator_spi)
        } else {
            (hdr.initiator_spi, hdr.responder_spi)
        };
        let Some(&id) = self.by_spi.get(&ours) else {
            self.counters.dropped += 1;
            return;
        };
        let Some(mut sa) = self.sas.remove(&id) else {
            self.counters.dropped += 1;
            return;
        };
        let role_ok = (sa.role == Role::Responder) == hdr.flags.initiator;
        if !role_ok || sa.peer_spi() != theirs || sa.keys().is_none() {
            self.counters.dropped += 1;
            self.sas.insert(id, sa);
            return;
        }
        match self.protected(&mut sa, now, local, remote, &hdr, bytes) {
            Outcome::Keep | Outcome::Ignore => {
                self.sas.insert(id, sa);
            }
            Outcome::Forget => self.forget(*sa),
            Outcome::Destroy(why) => self.destroy(*sa, why),
        }
    }

    /// Retransmissions, half-open expiry, DPD.
    pub fn handle_timeout(&mut self, now: Instant) {
        let ids: Vec<IkeSaId> = self.sas.keys().copied().collect();
        for id in ids {
            let Some(mut sa) = self.sas.remove(&id) else {
                continue;
            };
            if self.sa_timeout(&mut sa, now) {
                self.sas.insert(id, sa);
            }
        }
    }

    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When handle_timeout is next due (retransmissions, DPD, half-open expiry).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.sas
            .values()
            .filter_map(|sa| sa.next_timeout(&self.limits, self.dpd_delay(sa)))
            .min()
    }

    // ---- helpers shared by the exchanges ----

    /// A random part of `rand` (uniform in `[0, rand)`; zero for zero), what rekey and reauthentication times
    /// are brought forward by. Draws 8 bytes from the RNG in every case.
    pub(super) fn jitter(&mut self, rand: Duration) -> Duration {
        let mut r = [0u8; 8];
        self.rng.fill(&mut r);
        let rand = rand.as_nanos().min(u128::from(u64::MAX)) as u64;
        if rand == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(u64::from_be_bytes(r) % rand)
        }
    }

    pub(super) fn new_id(&mut self) -> IkeSaId {
        let id = IkeSaId(self.next_id);
        self.next_id += 1;
        id
    }

    /// A random IKE SPI: never 0, not one of ours already.
    pub(super) fn new_ike_spi(&mut self) -> u64 {
        loop {
            let spi = u64::from_be_bytes(netveil_crypto::rand::array(&mut *self.rng));
            if spi != 0 && !self.by_spi.contains_key(&spi) {
                return spi;
            }
        }
    }

    /// A random inbound ESP SPI: never below 256 (0 is invalid, 1..=255 reserved, RFC 4303 2.1), unique on this
    /// endpoint; reserved until the CHILD_SA goes.
    pub(super) fn new_child_spi(&mut self) -> u32 {
        loop {
            let spi = u32::from_be_bytes(netveil_crypto::rand::array(&mut *self.rng));
            if spi >= 256 && self.inbound_spis.insert(spi) {
                return spi;
            }
        }
    }

    pub(super) fn dpd_delay(&self, sa: &IkeSa) -> Option<Duration> {
        self.connections[sa.conn].dpd_delay
    }

    pub(super) fn send(&mut self, local: SocketAddr, remote: SocketAddr, bytes: Vec<u8>) {
        self.transmits.push_back(Transmit {
            local,
            remote,
            bytes,
        });
    }

    /// The IKE SA (or its setup) failed.
    pub(super) fn fail(&mut self, conn: usize, ike_sa: Option<IkeSaId>, failure: Failure) {
        self.fail_child(conn, ike_sa, None, failure);
    }

    /// A failure; `child`: the child config whose CHILD_SA was not created (the IKE SA stays).
    pub(super) fn fail_child(
        &mut self,
        conn: usize,
        ike_sa: Option<IkeSaId>,
        child: Option<usize>,
        failure: Failure,
    ) {
        let c = self.connections.get(conn);
        let connection = c.map(|c| c.name.clone()).unwrap_or_default();
        let child = child.and_then(|k| c?.children.get(k).map(|ch| ch.name.clone()));
        self.events.push_back(Event::Failed {
            connection,
            ike_sa,
            child,
            failure,
        });
    }

    /// Removes an SA's bookkeeping without events (for SAs that never came up).
    pub(super) fn forget(&mut self, sa: IkeSa) {
        self.by_spi.remove(&sa.our_spi());
        if sa.role == Role::Responder {
            self.by_init.remove(sa.spi_i, sa.init_remote, sa.id);
            if sa.state == State::HalfOpen {
                self.half_open -= 1;
            }
        }
        for c in &sa.children {
            self.inbound_spis.remove(&c.inbound_spi);
        }
        if let Some(sa::Pending {
            purpose: sa::Purpose::RekeyIke { spi },
            ..
        }) = sa.pending.as_deref()
        {
            self.by_spi.remove(spi);
        }
        if let Some(spi) = sa.hs().first_child_spi {
            self.inbound_spis.remove(&spi);
        }
        self.reauth_gone(&sa);
    }

    /// The name of a child of `sa` (its config's).
    pub(super) fn child_name(&self, sa: &IkeSa, c: &sa::Child) -> String {
        self.connections[sa.conn]
            .children
            .get(c.cfg)
            .map_or_else(String::new, |cfg| cfg.name.clone())
    }

    /// Removes an SA: ChildSaDown for each child, IkeSaDown if it was up, and a Failed event if `why`.
    pub(super) fn destroy(&mut self, sa: IkeSa, why: Option<Failure>) {
        for c in &sa.children {
            self.events.push_back(Event::ChildSaDown {
                ike_sa: sa.id,
                child: self.child_name(&sa, c),
                inbound_spi: c.inbound_spi,
                outbound_spi: c.outbound_spi,
            });
        }
        if let Some(f) = why {
            self.fail(sa.conn, Some(sa.id), f);
        }
        if sa.was_up {
            self.events.push_back(Event::IkeSaDown {
                ike_sa: sa.id,
                connection: self.connections[sa.conn].name.clone(),
            });
        }
        self.forget(sa);
    }

    /// Timers of one SA; false when it is gone.
    pub(super) fn sa_timeout(&mut self, sa: &mut IkeSa, now: Instant) -> bool {
        if sa.state == State::Rekeyed && now >= sa.last_heard + sa::REKEYED_LINGER {
            let sa = std::mem::replace(sa, IkeSa::placeholder(now));
            self.destroy(sa, None);
            return false;
        }
        if sa.state == State::HalfOpen && now >= sa.created + self.limits.half_open_timeout {
            let sa = std::mem::replace(sa, IkeSa::placeholder(now));
            self.forget(sa);
            return false;
        }
        if let Some(p) = &mut sa.pending {
            if now >= p.next_at {
                let retransmit = self.connections[sa.conn].retransmit;
                if p.retries >= retransmit.tries {
                    // A DELETE that is not answered ends the SA all the same (RFC 7296 2.4).
                    let why = (p.purpose != sa::Purpose::DeleteIke).then_some(Failure::Timeout);
                    let sa = std::mem::replace(sa, IkeSa::placeholder(now));
                    self.destroy(sa, why);
                    return false;
                }
                p.retries += 1;
                p.next_at = now + sa::backoff(&retransmit, p.retries);
                let (l, r, b) = (sa.local, sa.remote, p.bytes.clone());
                self.counters.retransmits += 1;
                for b in b {
                    self.send(l, r, b);
                }
            }
            return true;
        }
        if sa.state == State::Established {
            self.after_response(sa, now);
            if sa.pending.is_some() || self.child_timers(sa, now) {
                return true;
            }
            let replacing = self.reauth_timers(sa, now);
            if sa.pending.is_some() || sa.state != State::Established {
                return true;
            }
            if now >= sa.ike_rekey_at && !replacing {
                self.send_rekey_ike(sa, now);
                if sa.pending.is_some() {
                    return true;
                }
            }
            if let Some(d) = self.dpd_delay(sa) {
                if now >= sa.last_heard + d {
                    self.send_dpd(sa, now);
                }
            }
        }
        true
    }
}
