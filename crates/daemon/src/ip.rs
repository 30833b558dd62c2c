//! `netveil up`: the data plane.
//!
//! ```text
//!   apps ──► TUN ──► [tx thread] policy out ─► ESP/AH encapsulate ─► raw IP socket (fwmark) ──► wire
//!   apps ◄── TUN ◄── [rx thread] policy in  ◄─ ESP/AH decapsulate ◄─ raw ESP/AH + UDP 4500   ◄── wire
//! ```
//!
//! Setup is all-or-nothing: configuration is validated and every key schedule built before the first system change;
//! system changes (TUN, addresses, routes, rules, nftables) are recorded and undone if a later step fails and on
//! exit. Packets are read in batches into pre-allocated buffers with head- and tailroom and transformed in place.

use crate::config::{Config, ConfigError};
use crate::engine::{nft_install, nft_table_exists, remove_fwmark_rules, run, Engine, Undo};
use crate::filters::FilterSock;
use crate::filters::{STORM_AUTH_FAILURES_PER_S, STORM_HOLD};
use crate::ip_db::{Db, Installed, Snapshot, Sockets};
use crate::ip_drop::Drop;
use crate::psp_kx::{self, PspState};
use crate::{Error, Result};
use netveil_io::filter::Layout;
use netveil_io::tun::Span;
use netveil_io::{PacketBuf, RawSocket, Tun, TunConfig, UdpGroMeta, UdpSocket};
use netveil_ipsec::bundle::{self, OutIdx, Protected, Sad, UdpUnprotected, Unprotected};
use netveil_ipsec::Drop as IpsecDrop;
use netveil_ipsec::Mode;
use netveil_sa::counters::DropCounters;
use netveil_sa::policy::{Action, Direction, FlowKey};
use netveil_wire::ip_proto;
use std::io::IoSlice;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes in front of every packet: outer IPv6 (40) + UDP (8) + ESP (8) + IV (16), AH (12 + 32) and a second outer
/// header for nested bundles, plus the virtio-net header.
pub const HEADROOM: usize = 256;
/// Bytes after every packet: ESP padding (up to 255) + trailer (2) + ICV (up to 32), twice for bundles.
pub const TAILROOM: usize = 640;
/// Packets per batch.
pub const BATCH: usize = 64;

/// Everything the data-plane threads share. Built once; all mutable state is atomic or inside the SAs.
pub struct Shared {
    /// The configuration as started (`interface`, `psp`); the SAs and policies in force are in `db`.
    pub config: Config,
    /// The SAs and policies, changed at runtime (see [`crate::ip_db`]).
    pub db: Db,
    pub tx_drops: DropCounters<Drop>,
    pub rx_drops: DropCounters<Drop>,
    pub tx_packets: AtomicU64,
    pub tx_bytes: AtomicU64,
    pub rx_packets: AtomicU64,
    pub rx_bytes: AtomicU64,
    pub bypassed: AtomicU64,
    pub started: Instant,
    pub stop: AtomicBool,
    pub tun_name: String,
    /// PSP (the `[psp]` section): the device, the transmit SA and the key-exchange state.
    pub psp: Option<Arc<PspState>>,
    /// The receive sockets, for the packets the kernel dropped before them (socket filter, full buffer).
    pub(crate) rx_sockets: Vec<FilterSock>,
    /// A storm of authentication failures is on (see [`STORM_AUTH_FAILURES_PER_S`]).
    pub storm: AtomicBool,
}

/// How a processed outbound packet leaves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Out {
    /// As the raw IP packet it now is.
    Raw,
    /// ESP-in-UDP on the NAT-T socket (transport mode: the packet's IP and UDP headers say where to).
    NatT,
    /// ESP-in-UDP of a tunnel on the NAT-T socket: the packet is the datagram's payload, between the ends of
    /// this outbound SA (of the snapshot's SAD, [`netveil_ipsec::OutboundSa::udp_tunnel_ends`]).
    NatTPayload(OutIdx),
    /// PSP on the UDP port 1000 socket (transport mode: the packet's IP and UDP headers say where to).
    Psp,
    /// PSP of a tunnel on the UDP port 1000 socket: the packet is the datagram's payload, to the peer, from this
    /// source port (the flow's, which picks the socket of the pool).
    PspPayload(u16),
}

impl Shared {
    pub fn new(config: Config) -> std::result::Result<Shared, ConfigError> {
        let (sad, at) = config.build_sad(0)?;
        Ok(Shared::with_sas(config, Installed::of(&sad, &at), None))
    }

    /// With SAs built elsewhere (in the configuration's order), with the stores that made their sequence
    /// reservations and receive floors (see [`crate::state::start`]).
    pub fn with_sas(
        config: Config,
        sas: Vec<Installed>,
        seq: Option<(crate::state::SeqStore, crate::state::RxStore)>,
    ) -> Shared {
        Shared {
            db: Db::new(&config, sas, seq),
            tun_name: config.interface.name.clone(),
            psp: config.psp.clone().map(|c| {
                let mut st = PspState::new(c);
                st.mtu = config.interface.mtu;
                Arc::new(st)
            }),
            config,
            tx_drops: DropCounters::default(),
            rx_drops: DropCounters::default(),
            tx_packets: AtomicU64::new(0),
            tx_bytes: AtomicU64::new(0),
            rx_packets: AtomicU64::new(0),
            rx_bytes: AtomicU64::new(0),
            bypassed: AtomicU64::new(0),
            started: Instant::now(),
            stop: AtomicBool::new(false),
            rx_sockets: Vec::new(),
            storm: AtomicBool::new(false),
        }
    }

    /// Packets the kernel dropped on their way to the receive sockets: refused by the socket filters (unknown SPI,
    /// left of the replay window) or with a receive buffer full.
    pub fn kernel_drops(&self) -> u64 {
        self.rx_sockets
            .iter()
            .map(|s| u64::from(s.kernel_drops().unwrap_or(0)))
            .sum()
    }

    pub fn now(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// Outbound: a packet read from the TUN becomes the packet to send (in place), or a drop; returns how it
    /// leaves.
    ///
    /// Fragments (RFC 4301 section 7): a later fragment carries no ports, so it gets the decision its packet's first
    /// fragment got (remembered in `frags`); if that is not known and some policy selects by port, it is dropped.
    ///
    /// `snap`: the SAs and policies in force (loaded once per batch). Traffic for a protect policy whose SAs are not
    /// installed is dropped and reported (acquire).
    pub fn process_out(
        &self,
        snap: &Snapshot,
        pkt: &mut PacketBuf,
        now: u64,
        frags: &mut FragCache,
    ) -> std::result::Result<Out, Drop> {
        let (key, frag) = flow_key_frag(pkt.data()).ok_or(IpsecDrop::Malformed)?;
        let action = self.decide(snap, Direction::Out, &key, frag, now, frags)?;
        if let Some(f) = frag.filter(|f| f.first) {
            frags.insert(&key, f.ident, action, now);
        }
        match action {
            Action::Protect(i) if snap.policies[i].psp => self.psp_out(pkt),
            Action::Protect(i) => {
                // Only outbound SAs: an outbound policy's bundle cannot hold anything else.
                let sas = snap.policies[i].sas.outbound();
                if sas.is_empty() {
                    if snap.acquire_due(i, now) {
                        self.db
                            .report(crate::ip_db::acquire(&snap.policies[i].name, &key));
                    }
                    return Err(Drop::NoSa);
                }
                Ok(
                    match bundle::protect_for_sockets(&snap.sad, sas, pkt, now)? {
                        // The SA that says where (looked up again by the sender: a small value to pass around).
                        Protected::UdpPayload { .. } => Out::NatTPayload(sas[sas.len() - 1]),
                        Protected::Packet
                            if sas
                                .last()
                                .is_some_and(|&o| snap.sad.out(o).params.encap.is_some()) =>
                        {
                            Out::NatT
                        }
                        Protected::Packet => Out::Raw,
                    },
                )
            }
            Action::Bypass => {
                // Bypassed traffic from the TUN is forwarded like a router would: the TTL or hop limit goes down, so
                // that a packet whose route leads back into the TUN cannot circle forever.
                decrement_ttl(pkt.data_mut())?;
                self.bypassed.fetch_add(1, Relaxed);
                Ok(Out::Raw)
            }
            Action::Discard => Err(Drop::PolicyDiscard),
        }
    }

    /// Inbound: a received ESP/AH packet becomes the packet to deliver to the TUN (in place), or a drop.
    /// Decapsulated traffic must match an inbound protect policy whose SAs are exactly the ones it came through.
    pub fn process_in(
        &self,
        snap: &Snapshot,
        pkt: &mut PacketBuf,
        now: u64,
        frags: &mut FragCache,
    ) -> std::result::Result<(), Drop> {
        match bundle::unprotect(&snap.sad, pkt, self.config.interface.nat_t_port, now)? {
            Unprotected::Packet(used) => {
                self.check_in(snap, pkt.data(), now, frags, came_through(used))
            }
            Unprotected::Clear | Unprotected::NotEsp => Err(IpsecDrop::Unsupported.into()),
        }
    }

    /// The policy decision for a packet of `key` in `dir`. A later fragment (no ports) gets the decision its first
    /// fragment got, from `frags`; if that is not known, it is dropped where some policy selects by port, else looked
    /// up like any packet.
    fn decide(
        &self,
        snap: &Snapshot,
        dir: Direction,
        key: &FlowKey,
        frag: Option<netveil_wire::ip::Fragment>,
        now: u64,
        frags: &mut FragCache,
    ) -> std::result::Result<Action, Drop> {
        match frag {
            Some(f) if !f.first => match frags.get(key, f.ident, now) {
                Some(a) => Ok(a),
                None if snap.port_selective => Err(Drop::FragmentNoState),
                None => Ok(frags.lookup(snap, dir, key)),
            },
            _ => Ok(frags.lookup(snap, dir, key)),
        }
    }

    /// The inbound policy check of a decapsulated packet: the first matching rule must be a protect policy that
    /// `came_through` accepts (its SAs, or PSP). A later fragment is checked against its first fragment's policy
    /// (see [`Shared::process_out`]).
    fn check_in(
        &self,
        snap: &Snapshot,
        p: &[u8],
        now: u64,
        frags: &mut FragCache,
        came_through: impl Fn(&crate::config::PolicyRule) -> bool,
    ) -> std::result::Result<(), Drop> {
        let (key, frag) = flow_key_frag(p).ok_or(IpsecDrop::Malformed)?;
        let action = self.decide(snap, Direction::In, &key, frag, now, frags)?;
        let r = match action {
            Action::Protect(i) if came_through(&snap.policies[i]) => Ok(()),
            Action::Discard => Err(Drop::PolicyDiscard),
            _ => Err(Drop::PolicyMismatch),
        };
        if let (Ok(()), Some(f)) = (r, frag) {
            if f.first {
                frags.insert(&key, f.ident, action, now);
            }
        }
        r
    }
}

impl Shared {
    /// PSP outbound: encapsulate with the transmit SA the peer handed us (tunnel: outer addresses set to ours and
    /// the peer's). Counted in the device's tx counters.
    fn psp_out(&self, pkt: &mut PacketBuf) -> std::result::Result<Out, Drop> {
        let st = self.psp.as_ref().ok_or(Drop::PolicyDiscard)?;
        let len = pkt.len();
        let r = {
            // No lock: a snapshot of the current transmit SA (the key exchange swaps it), whose IV counter is
            // atomic.
            let tx = st.tx.load();
            match tx.as_deref() {
                None => {
                    st.tx_no_sa.fetch_add(1, Relaxed);
                    return Err(Drop::NoSa);
                }
                Some(sa) => {
                    let tunnel = psp_kx::is_tunnel(&st.cfg);
                    if tunnel
                        && (netveil_wire::ip::version(pkt.data()) == Some(4))
                            != st.cfg.local.is_ipv4()
                    {
                        // The outer header is a copy of the inner one: tunnels stay within one family.
                        Err(netveil_psp::Error::Malformed)
                    } else {
                        if tunnel {
                            // The datagram's payload: the socket writes the outer headers.
                            sa.encapsulate_udp_payload(pkt).map(Some)
                        } else {
                            sa.encapsulate(pkt).map(|()| None)
                        }
                    }
                }
            }
        };
        st.stats.count_tx(r.map(|_| len));
        Ok(match r? {
            Some(sport) => Out::PspPayload(sport),
            None => Out::Psp,
        })
    }

    /// PSP inbound: `pkt` is a datagram from the PSP socket with its IP and UDP headers restored. Decapsulated
    /// traffic must come from the peer and match an inbound PSP protect policy.
    fn psp_in(
        &self,
        snap: &Snapshot,
        pkt: &mut PacketBuf,
        now: u64,
        frags: &mut FragCache,
    ) -> std::result::Result<(), Drop> {
        let st = self.psp.as_ref().ok_or(IpsecDrop::Unsupported)?;
        let from_peer = netveil_wire::ip::Packet::new_checked(pkt.data())
            .is_ok_and(|p| p.src_addr() == st.cfg.remote);
        if !from_peer {
            return Err(IpsecDrop::UnknownSpi.into());
        }
        // No lock: the device's receive SAs as last published (the key exchange swaps them).
        st.rx.decapsulate(pkt)?;
        self.check_in(snap, pkt.data(), now, frags, |p| p.psp)
    }
}

impl Shared {
    /// [`Shared::psp_in`] for the payload of a datagram from `src`, which `pkt` holds without its IP and UDP
    /// headers (see [`UdpRx::deliver`]). `None`: transport mode, which needs the headers (`pkt` untouched).
    fn psp_in_payload(
        &self,
        snap: &Snapshot,
        pkt: &mut PacketBuf,
        src: IpAddr,
        now: u64,
        frags: &mut FragCache,
    ) -> Option<std::result::Result<(), Drop>> {
        let Some(st) = self.psp.as_ref() else {
            return Some(Err(IpsecDrop::Unsupported.into()));
        };
        if src != st.cfg.remote {
            return Some(Err(IpsecDrop::UnknownSpi.into()));
        }
        match st.rx.decapsulate_udp_payload(pkt) {
            Ok(None) => None,
            Ok(Some(_)) => Some(self.check_in(snap, pkt.data(), now, frags, |p| p.psp)),
            Err(e) => Some(Err(e.into())),
        }
    }
}

/// The inbound policy check of ESP/AH traffic: a protect policy whose SAs are exactly the ones `used` (see
/// [`Shared::check_in`]).
fn came_through(used: bundle::Used) -> impl Fn(&crate::config::PolicyRule) -> bool {
    move |p| !p.psp && !p.sas.inbound().is_empty() && used.matches(p.sas.inbound())
}

/// Decrements the IPv4 TTL/// Decrements the IPv4 TTL (updating the header checksum, RFC 1624) or the IPv6 hop limit.
fn decrement_ttl(p: &mut [u8]) -> std::result::Result<(), Drop> {
    netveil_wire::ip::decrement_hop_limit(p).map_err(|e| match e {
        netveil_wire::ip::HopLimitError::Exceeded => Drop::TtlExceeded,
        netveil_wire::ip::HopLimitError::Malformed => IpsecDrop::Malformed.into(),
    })
}

/// The policy-relevant fields of an IP packet (ports 0 for protocols without ports and for non-first fragments);
/// `None` for a packet whose headers do not parse.
pub fn flow_key(p: &[u8]) -> Option<FlowKey> {
    flow_key_frag(p).map(|(k, _)| k)
}

/// [`flow_key`], and for a fragment what identifies its packet.
pub fn flow_key_frag(p: &[u8]) -> Option<(FlowKey, Option<netveil_wire::ip::Fragment>)> {
    let f = netveil_wire::ip::flow_key(p).ok()?;
    Some((
        FlowKey {
            src: f.src,
            dst: f.dst,
            proto: f.proto,
            src_port: f.src_port,
            dst_port: f.dst_port,
        },
        f.frag,
    ))
}

/// How long a first fragment's decision is remembered (the IPv4 reassembly timeout).
const FRAG_SECONDS: u64 = 30;
/// Packets whose fragments are remembered at once (per thread); a newer packet takes an older one's slot.
const FRAG_SLOTS: usize = 4096;

/// The policy decisions of first fragments, by (source, destination, protocol, identification), so that later
/// fragments (without ports) get the same (RFC 4301 section 7): a fixed table owned by one data-plane thread, no
/// allocation per packet. A slot taken by another packet makes that packet's later fragments unknown (dropped
/// where policies select by port, never sent in clear).
///
/// It also remembers the last policy decision with its flow and snapshot, since a batch mostly holds segments of
/// one flow: the same flow under the same snapshot gets it again without a walk through the policies.
pub struct FragCache {
    slots: Vec<Option<FragSlot>>,
    hasher: std::collections::hash_map::RandomState,
    /// (snapshot generation, direction, flow, decision) of the last lookup.
    last: Option<(u64, Direction, FlowKey, Action)>,
}

#[derive(Clone, Copy)]
struct FragSlot {
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    ident: u32,
    action: Action,
    expires: u64,
}

impl Default for FragCache {
    fn default() -> Self {
        FragCache {
            slots: vec![None; FRAG_SLOTS],
            hasher: Default::default(),
            last: None,
        }
    }
}

impl FragCache {
    fn index(&self, k: &FlowKey, ident: u32) -> usize {
        use std::hash::BuildHasher;
        self.hasher.hash_one((k.src, k.dst, k.proto, ident)) as usize % FRAG_SLOTS
    }

    /// The policy decision for a flow in `dir` under `snap`: the last one if it was for the same, else looked up
    /// (and remembered).
    fn lookup(&mut self, snap: &Snapshot, dir: Direction, key: &FlowKey) -> Action {
        if let Some((g, d, k, a)) = &self.last {
            if *g == snap.generation && *d == dir && k == key {
                return *a;
            }
        }
        let a = snap.spd.lookup(dir, key).1;
        self.last = Some((snap.generation, dir, *key, a));
        a
    }

    /// Remembers the decision for the packet of a first fragment.
    pub fn insert(&mut self, k: &FlowKey, ident: u32, action: Action, now: u64) {
        let i = self.index(k, ident);
        self.slots[i] = Some(FragSlot {
            src: k.src,
            dst: k.dst,
            proto: k.proto,
            ident,
            action,
            expires: now + FRAG_SECONDS,
        });
    }

    /// The decision of the first fragment of a later fragment's packet, if remembered.
    pub fn get(&self, k: &FlowKey, ident: u32, now: u64) -> Option<Action> {
        let s = self.slots[self.index(k, ident)]?;
        (s.src == k.src
            && s.dst == k.dst
            && s.proto == k.proto
            && s.ident == ident
            && now < s.expires)
            .then_some(s.action)
    }
}

/// The nftables match of a selector: addresses, protocol and ports (`None` for a selector nftables cannot express
/// in one family).
/// The IP engine's configuration, checked and with its key schedules and sequence reservations made, before any
/// change to the system.
pub struct Prepared {
    config: Config,
    tls: Option<psp_kx::Tls>,
    seq_store: Option<(crate::state::SeqStore, crate::state::RxStore)>,
    sas: Vec<Installed>,
}

/// Checks what `up` needs of the IP sections (certificates and keys, the host: addresses, the TUN name, the state
/// directory) and builds every key schedule, changing nothing on the system.
pub fn prepare(config: Config) -> Result<Prepared> {
    // Certificates and keys are read and checked before any change to the system, and before the host checks.
    let tls = match &config.psp {
        Some(c) => Some(psp_kx::tls(c)?),
        None => None,
    };
    preflight(&config)?;
    // Outbound SAs with static keys continue above every sequence number they ever sent (marks in the state
    // directory, reserved ahead and synced before use): a restart never repeats a nonce, and the peer's replay
    // window accepts the restarted side at once.
    // Inbound SAs likewise keep a receive floor there: nothing accepted before a restart is accepted again.
    let (seq_store, sas) = if !config.sas.is_empty() {
        let dir = crate::state::StateDir::open(&config.interface.state_dir, "interface.state_dir")?;
        let (seq, rx, starts) = crate::state::start(dir, &config.sas)?;
        let (sad, at) = config.build_sad_reserved(0, &starts)?;
        (Some((seq, rx)), Installed::of(&sad, &at))
    } else {
        let (sad, at) = config.build_sad(0)?;
        (None, Installed::of(&sad, &at))
    };
    Ok(Prepared {
        config,
        tls,
        seq_store,
        sas,
    })
}

impl Prepared {
    /// The control socket the configuration names.
    pub fn control_socket(&self) -> &Path {
        Path::new(&self.config.interface.control_socket)
    }

    /// The control group's id, if the configuration names one.
    pub fn control_group(&self) -> Option<u32> {
        self.config.interface.control_group
    }
}

/// The running IP engine: its shared state (also what the control answers read) and its threads.
pub struct IpEngine {
    shared: Arc<Shared>,
    iface: crate::config::Interface,
    table: String,
    tx: std::thread::JoinHandle<()>,
    rx: std::thread::JoinHandle<()>,
    tick: u64,
    failures_before: u64,
    storm_until: Option<Instant>,
    /// Drop-storm warnings (looked at once a second).
    watch: crate::log::DropWatch,
    looked: Instant,
}

/// Sets up the TUN device, routes, rules, the fail-closed nftables table and the sockets (each change recorded in
/// `undo`) and starts the data-plane threads (and the PSP key exchange). `control`: the control socket, for the
/// startup line.
pub fn start(p: Prepared, undo: &mut Undo, control: &Path) -> Result<IpEngine> {
    let Prepared {
        config,
        tls,
        seq_store,
        sas,
    } = p;
    let mut shared = Shared::with_sas(config, sas, seq_store);
    let iface = shared.config.interface.clone();
    let table = iface.nft_table();

    // First the fail-closed filters (replacing, in one transaction, those a crashed or stopped instance left): from
    // now until `netveil down`, covered traffic leaves only through the TUN or the daemon's own sockets.
    let table_existed = nft_table_exists(&table);
    // What a killed (or blocking-stopped) predecessor had added at runtime stays covered.
    shared.db.restore_runtime_policies()?;
    let nft_text = shared.db.nft_text(&table);
    if let Some(rules) = &nft_text {
        nft_install(&table, rules)?;
        if !table_existed {
            undo.push(&["nft", "delete", "table", "inet", &table]);
        }
    } else if table_existed {
        // A previous instance's rules, for a config that covered more: they would block what this one does not.
        run(&["nft", "delete", "table", "inet", &table])?;
    }

    // TUN device with its addresses, MTU and routes.
    let tun = Tun::open(&TunConfig {
        name: iface.name.clone(),
        mtu: iface.mtu,
        addresses: vec![],
        offload: iface.offload,
        multi_queue: false,
    })
    .map_err(Error::io(format!(
        "cannot create TUN device {}",
        iface.name
    )))?;
    for a in &iface.addresses {
        let s = a.to_string();
        if a.addr().is_ipv6() {
            run(&["ip", "-6", "addr", "add", &s, "dev", &iface.name, "nodad"])?;
        } else {
            run(&["ip", "addr", "add", &s, "dev", &iface.name])?;
        }
    }
    // No IPv6 link-local address (and so no router solicitations or MLD reports) on the point-to-point TUN.
    let _ = run(&[
        "ip",
        "link",
        "set",
        "dev",
        &iface.name,
        "addrgenmode",
        "none",
    ]);
    run(&[
        "ip",
        "link",
        "set",
        "dev",
        &iface.name,
        "mtu",
        &iface.mtu.to_string(),
        "up",
    ])?;
    let mark = iface.fwmark.map(|m| m.to_string());
    if let Some(m) = &mark {
        // A previous instance killed before it could clean up left its rules: reclaim them.
        remove_fwmark_rules(m);
        for fam in ["-4", "-6"] {
            run(&[
                "ip", fam, "rule", "add", "not", "fwmark", m, "table", m, "pref", "1000",
            ])?;
            undo.push(&[
                "ip", fam, "rule", "del", "not", "fwmark", m, "table", m, "pref", "1000",
            ]);
        }
    }
    for r in &iface.routes {
        let s = r.to_string();
        let fam = if r.addr().is_ipv6() { "-6" } else { "-4" };
        let mut cmd = vec!["ip", fam, "route", "add", &s, "dev", &iface.name];
        if let Some(m) = &mark {
            cmd.extend(["table", m.as_str()]);
        }
        run(&cmd)?;
    }

    // Sockets.
    let mut rx: Vec<RxSock> = Vec::new();
    // A configuration with neither SAs nor PSP is driven at runtime (`netveil sa add`): it gets the sockets of
    // both families and ESP-in-UDP.
    let driven = shared.config.sas.is_empty() && shared.config.psp.is_none();
    let v4 = driven
        || shared.config.sas.iter().any(|s| match s.mode {
            Mode::Tunnel { local, .. } => local.is_ipv4(),
            Mode::Transport => true,
        });
    let v6 = driven
        || shared.config.sas.iter().any(|s| match s.mode {
            Mode::Tunnel { local, .. } => local.is_ipv6(),
            Mode::Transport => true,
        });
    let mut sockets = Sockets::default();
    // PSP: UDP port 1000 on our outer address, and the key-exchange listener.
    let mut psp_out = UdpOut::default();
    let mut psp_listener = None;
    if let Some(c) = &shared.config.psp {
        let io = |what: &str| Error::io(format!("cannot open {what} socket"));
        let udp_sock = |port: u16| -> Result<Arc<UdpSocket>> {
            let s = UdpSocket::bind(SocketAddr::new(c.local, port))
                .map_err(io("PSP UDP (port 1000)"))?;
            s.set_buffer_sizes(8 << 20).ok();
            s.set_mark(iface.socket_mark())
                .map_err(io("PSP UDP (SO_MARK)"))?;
            Ok(Arc::new(s))
        };
        // Receive on port 1000; send from a pool of sockets on ephemeral ports, one picked per inner flow, so that
        // the source port carries the flow's entropy (as the specification asks) while UDP GSO still batches.
        let s = udp_sock(netveil_psp::UDP_PORT)?;
        s.enable_gro().ok();
        let pool = (0..PSP_TX_SOCKETS)
            .map(|_| udp_sock(0))
            .collect::<Result<Vec<_>>>()?;
        if c.local.is_ipv6() {
            psp_out.v6 = pool;
        } else {
            psp_out.v4 = pool;
        }
        rx.push(RxSock::Udp(s.clone(), UdpKind::Psp));
        if let Some(st) = &shared.psp {
            // Only the SPIs the device handed out pass the socket (refreshed on every association and rotation).
            st.set_rx_socket(s);
        }
        if !psp_kx::is_initiator(c) {
            psp_listener = Some(psp_kx::listen(c, iface.socket_mark())?);
        }
    }
    let udp = driven || shared.config.sas.iter().any(|s| s.encap.is_some());
    let mut udp_out = UdpOut::default();
    // The ESP receive sockets that get socket filters (see `esp_filter`).
    let mut filters: Vec<(Layout, FilterSock)> = Vec::new();
    let io = |what: &str| Error::io(format!("cannot open {what} socket"));
    for (fam_ok, is6) in [(v4, false), (v6, true)] {
        if !fam_ok {
            continue;
        }
        for proto in [ip_proto::ESP, ip_proto::AH] {
            let s = if is6 {
                RawSocket::recv_v6(proto)
            } else {
                RawSocket::recv_v4(proto)
            };
            match s {
                Ok(s) => {
                    s.set_buffer_sizes(8 << 20).ok();
                    let s = Arc::new(s);
                    if let Some(l) = Layout::raw(proto, is6) {
                        filters.push((l, FilterSock::Raw(s.clone())));
                    }
                    if proto == ip_proto::ESP {
                        if is6 {
                            sockets.v6 = true;
                        } else {
                            sockets.v4 = true;
                        }
                    }
                    rx.push(RxSock::Raw(s));
                }
                Err(e) if is6 && !v4 => return Err(io("raw IPv6")(e)),
                Err(e) if !is6 => return Err(io("raw IPv4")(e)),
                Err(_) => {}
            }
        }
        if udp {
            let addr: SocketAddr = if is6 {
                (std::net::Ipv6Addr::UNSPECIFIED, iface.nat_t_port).into()
            } else {
                (std::net::Ipv4Addr::UNSPECIFIED, iface.nat_t_port).into()
            };
            let s = UdpSocket::bind(addr).map_err(io("UDP (NAT-T)"))?;
            s.set_buffer_sizes(8 << 20).ok();
            s.enable_gro().ok();
            s.set_mark(iface.socket_mark())
                .map_err(io("UDP (SO_MARK)"))?;
            let s = Arc::new(s);
            if is6 {
                udp_out.v6 = vec![s.clone()];
            } else {
                udp_out.v4 = vec![s.clone()];
            }
            filters.push((Layout::EspInUdp, FilterSock::Udp(s.clone())));
            sockets.nat_t = true;
            rx.push(RxSock::Udp(s, UdpKind::NatT));
        }
    }
    let send4 = RawSocket::send_v4().map_err(io("raw IPv4 send"))?;
    let send6 = RawSocket::send_v6().ok();
    for s in [Some(&send4), send6.as_ref()].into_iter().flatten() {
        s.set_buffer_sizes(8 << 20).ok();
        // The daemon's mark: the fail-closed filters let these packets out (and with `fwmark`, they bypass the
        // TUN's routing table).
        s.set_mark(iface.socket_mark())
            .map_err(io("raw (SO_MARK)"))?;
    }

    shared.rx_sockets = rx
        .iter()
        .map(|s| match s {
            RxSock::Raw(r) => FilterSock::Raw(r.clone()),
            RxSock::Udp(u, _) => FilterSock::Udp(u.clone()),
        })
        .collect();

    let shared = Arc::new(shared);
    let tun = Arc::new(tun);
    tun.set_recv_timeout(Duration::from_millis(200))
        .map_err(Error::io("TUN timeout"))?;

    shared.db.attach(sockets, filters, table.clone(), nft_text);
    shared.db.arm();
    let tx = {
        let (sh, tun) = (shared.clone(), tun.clone());
        std::thread::Builder::new()
            .name("nv-tx".into())
            .spawn(move || tx_loop(&sh, &tun, &send4, send6.as_ref(), &udp_out, &psp_out))
            .map_err(Error::io("thread"))?
    };
    let rxh = {
        let (sh, tun) = (shared.clone(), tun.clone());
        std::thread::Builder::new()
            .name("nv-rx".into())
            .spawn(move || rx_loop(&sh, &tun, &rx))
            .map_err(Error::io("thread"))?
    };
    if let (Some(st), Some(tls)) = (shared.psp.clone(), tls) {
        let sh = shared.clone();
        let l = psp_listener;
        let mark = iface.socket_mark();
        std::thread::Builder::new()
            .name("nv-psp".into())
            .spawn(move || psp_kx::run(&st, &tls, l, mark, &sh.stop))
            .map_err(Error::io("thread"))?;
    }
    tracing::info!(
        "{}: up ({} SAs, {} policies, default {}{}, MTU {}); control socket {}",
        iface.name,
        shared.config.sas.len(),
        shared.config.policies.len(),
        if matches!(iface.default_action, netveil_sa::policy::Action::Bypass) {
            "bypass"
        } else {
            "discard"
        },
        match &shared.psp {
            Some(st) => format!(
                ", PSP v{} {} with {}",
                st.cfg.version.number(),
                if psp_kx::is_tunnel(&st.cfg) {
                    "tunnel"
                } else {
                    "transport"
                },
                st.cfg.remote
            ),
            None => String::new(),
        },
        iface.mtu,
        control.display()
    );
    for sa in &shared.config.sas {
        tracing::info!(
            "{}: SA {} {} SPI {:#010x} {}",
            iface.name,
            sa.name,
            if sa.direction == netveil_ipsec::sa::Direction::Out {
                "out"
            } else {
                "in"
            },
            sa.spi,
            match &sa.suite {
                netveil_ipsec::sa::Suite::Esp(e) => e.name(),
                netveil_ipsec::sa::Suite::Ah(a) => a.name(),
            }
        );
    }

    let failures_before = auth_failures(&shared);
    Ok(IpEngine {
        shared,
        iface,
        table,
        tx,
        rx: rxh,
        tick: 0,
        failures_before,
        storm_until: None,
        watch: crate::log::DropWatch::new(Instant::now()),
        looked: Instant::now(),
    })
}

/// Every drop counter by its status name, for the drop-storm warnings.
fn drop_counts(sh: &Shared) -> Vec<(String, u64)> {
    let mut c: Vec<(String, u64)> = Vec::new();
    for (dir, d) in [("tx", &sh.tx_drops), ("rx", &sh.rx_drops)] {
        c.extend(
            d.snapshot()
                .into_iter()
                .map(|(k, n)| (format!("{dir}:{k}"), n)),
        );
    }
    // PSP's drops are among these (the device's own counters count them a second time).
    c.push(("rx:socket-filter-or-full".into(), sh.kernel_drops()));
    c
}

/// Authentication failures so far (ESP/AH and PSP).
fn auth_failures(sh: &Shared) -> u64 {
    // PSP's failures are counted here too (the device's `rx_auth_fail` counts them a second time).
    sh.rx_drops.get(IpsecDrop::AuthFailed.into())
}

impl IpEngine {
    /// The state the data plane and the control answers share.
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }
}

impl Engine for IpEngine {
    fn tick(&mut self) -> bool {
        if self.tx.is_finished() || self.rx.is_finished() {
            return false;
        }
        if self.tick == 0 {
            // Storm: forged packets with the right SPI fail authentication by the thousand.
            let f = auth_failures(&self.shared);
            if f.saturating_sub(self.failures_before) * 10 >= STORM_AUTH_FAILURES_PER_S {
                if self.storm_until.is_none() {
                    tracing::warn!(
                        "{}: authentication failures above {}/s: socket filters refuse counters far ahead of the windows",
                        self.iface.name, STORM_AUTH_FAILURES_PER_S
                    );
                }
                self.storm_until = Some(Instant::now() + STORM_HOLD);
            } else if self.storm_until.is_some_and(|t| Instant::now() > t) {
                self.storm_until = None;
                tracing::info!(
                    "{}: the authentication-failure storm is over",
                    self.iface.name
                );
            }
            self.failures_before = f;
            let storm = self.storm_until.is_some();
            self.shared.storm.store(storm, Relaxed);
            if let Some(st) = &self.shared.psp {
                st.storm.store(storm, Relaxed);
                st.refresh_filter_now();
            }
        }
        let t = Instant::now();
        if t.saturating_duration_since(self.looked) >= Duration::from_secs(1) {
            self.looked = t;
            if let Some(w) = self.watch.look(t, drop_counts(&self.shared)) {
                tracing::warn!("{}: {w}", self.iface.name);
            }
        }
        // Socket filters (every 100 ms: only our SPIs, and only sequence numbers not already left of the window),
        // events, lifetimes, retired SAs and sequence reservations.
        let now = self.shared.now();
        let storm = self.storm_until.is_some();
        for e in self.shared.db.tick(now, self.tick == 0, storm) {
            tracing::warn!("{}: {e}", self.iface.name);
        }
        self.tick = (self.tick + 1) % 5;
        true
    }

    fn stop(self: Box<Self>, undo: &mut Undo, down: bool) {
        self.shared.stop.store(true, Relaxed);
        let _ = self.tx.join();
        let _ = self.rx.join();
        self.shared.db.finish();
        let nft_table = self.shared.db.nft_table();
        let (iface, table) = (&self.iface, &self.table);
        if down || !iface.block_when_stopped {
            undo.push(&["nft", "delete", "table", "inet", table]);
            self.shared.db.forget_runtime_policies();
        } else if nft_table.is_some() {
            undo.keep(&["nft", "delete", "table", "inet", table]);
        }
        if nft_table.is_some() && !down && iface.block_when_stopped {
            tracing::info!(
                "{} stopped; covered traffic stays blocked until `netveil down`",
                iface.name
            );
        } else {
            tracing::info!("{} down", iface.name);
        }
    }
}

/// The IP addresses configured on this host's interfaces (in the current network namespace).
pub fn host_addresses() -> Result<Vec<IpAddr>> {
    let out = std::process::Command::new("ip")
        .args(["-j", "addr", "show"])
        .output()
        .map_err(Error::io("cannot run ip"))?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::Other(format!("cannot read `ip -j addr show`: {e}")))?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a["local"].as_str().and_then(|s| s.parse().ok()))
        .collect())
}

/// What `netveil up` would fail on and can be known without changing anything: the TUN name held by another device
/// (or a running daemon), the control socket in use, tunnel and PSP `local` addresses that are not this host's,
/// and a state directory that cannot be written. Errors name the key (exit code 2).
pub fn preflight(cfg: &Config) -> Result<()> {
    preflight_with(cfg, false).map(|_| ())
}

/// [`preflight`] for `netveil check`, which may run beside the config's own daemon (to check an edit before a
/// restart): a daemon that answers on the config's control socket holds its TUN name and socket, so those two
/// checks give way to a note (returned) saying `up` needs a `down` first; everything else is checked as for `up`.
pub fn preflight_check(cfg: &Config) -> Result<Option<String>> {
    preflight_with(cfg, true)
}

fn preflight_with(cfg: &Config, live_ok: bool) -> Result<Option<String>> {
    let bad = |key: String, reason: String| Error::Config(ConfigError { key, reason });
    cfg.check_distinct_keys()?;
    let i = &cfg.interface;
    let mut note = None;
    if std::os::unix::net::UnixStream::connect(&i.control_socket).is_ok() {
        if !live_ok {
            return Err(bad(
                "interface.control_socket".into(),
                format!(
                    "{} answers: a netveil daemon already runs with it (`netveil down -c` stops it)",
                    i.control_socket
                ),
            ));
        }
        note = Some(format!(
            "a netveil daemon runs with this config's control socket ({}) and interface {}: `up` needs `netveil down -c` first",
            i.control_socket, i.name
        ));
    } else if Path::new("/sys/class/net").join(&i.name).exists() {
        return Err(bad(
            "interface.name".into(),
            format!("'{}' is in use by another network device", i.name),
        ));
    }
    let mine = host_addresses()?;
    for (k, s) in cfg.sas.iter().enumerate() {
        if let Mode::Tunnel { local, .. } = s.mode {
            if !mine.contains(&local) {
                return Err(bad(
                    format!("sa[{k}].local"),
                    format!("{local} is not an address of this host"),
                ));
            }
        }
    }
    if let Some(p) = &cfg.psp {
        if !mine.contains(&p.local) {
            return Err(bad(
                "psp.local".into(),
                format!("{} is not an address of this host", p.local),
            ));
        }
    }
    if cfg
        .sas
        .iter()
        .any(|s| s.direction == netveil_ipsec::sa::Direction::Out)
    {
        if let Some(n) = crate::state::StateDir::check(&i.state_dir, "interface.state_dir")? {
            note = Some(match note {
                Some(m) => format!("{m}; {n}"),
                None => n,
            });
        }
    }
    Ok(note)
}

/// A receiving socket. Built once per protocol and family, so the size difference of the variants is irrelevant.
#[allow(clippy::large_enum_variant)]
enum RxSock {
    Raw(Arc<RawSocket>),
    Udp(Arc<UdpSocket>, UdpKind),
}

/// What a UDP socket receives.
#[derive(Clone, Copy, PartialEq, Eq)]
enum UdpKind {
    /// ESP-in-UDP (RFC 3948) on the NAT-T port.
    NatT,
    /// PSP on port 1000.
    Psp,
}

impl RxSock {
    fn fd(&self) -> i32 {
        match self {
            RxSock::Raw(s) => s.as_raw_fd(),
            RxSock::Udp(s, _) => s.as_raw_fd(),
        }
    }
}

fn new_bufs(n: usize, cap: usize) -> Vec<PacketBuf> {
    (0..n).map(|_| PacketBuf::new(cap, HEADROOM)).collect()
}

/// How a processed outbound packet leaves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Egress {
    Raw4,
    Raw6,
    Udp,
    Psp,
}

/// How a processed outbound packet leaves, and for the payload of a datagram, from where to where.
#[derive(Clone, Copy)]
struct TxMeta {
    egress: Egress,
    /// The packet is a datagram's payload, not a whole IP packet: where it goes.
    payload_of: Option<PayloadOf>,
}

/// Where a datagram's payload goes.
#[derive(Clone, Copy)]
enum PayloadOf {
    /// Between the ends of this SA (an index into the snapshot's SAD, see [`Out::NatTPayload`]).
    Sa(OutIdx),
    /// To the PSP peer, from this source port (see [`Out::PspPayload`]).
    PspPeer(u16),
}

/// What the addresses of datagram payloads are looked up in.
struct PayloadEnds<'a> {
    sad: &'a Sad,
    /// The PSP tunnel's local address and the peer's socket address.
    psp: Option<(IpAddr, SocketAddr)>,
}

/// Moves the packets of kind `k` among `bufs[from..to]` to the front of that range; returns where they end.
fn partition(
    bufs: &mut [PacketBuf],
    meta: &mut [TxMeta],
    from: usize,
    to: usize,
    k: Egress,
) -> usize {
    let mut n = from;
    for i in from..to {
        if meta[i].egress == k {
            if n != i {
                bufs.swap(n, i);
                meta.swap(n, i);
            }
            n += 1;
        }
    }
    n
}

/// The outbound UDP sockets (NAT-T), by family.
/// The UDP sockets packets leave on, per family; with several, the packet's UDP source port (a flow hash) picks
/// one.
#[derive(Default)]
pub struct UdpOut {
    pub v4: Vec<Arc<UdpSocket>>,
    pub v6: Vec<Arc<UdpSocket>>,
}

/// PSP transmit sockets (source ports) per family.
pub const PSP_TX_SOCKETS: usize = 8;

fn tx_loop(
    sh: &Shared,
    tun: &Tun,
    send4: &RawSocket,
    send6: Option<&RawSocket>,
    udp: &UdpOut,
    psp: &UdpOut,
) {
    let mtu = tun.mtu() as usize;
    let mut scratch = vec![0u8; netveil_io::tun::RECV_SCRATCH_LEN];
    let n_bufs = netveil_io::tun::MAX_SEGMENTS;
    // Room for TFC padding up to the largest an SA may ask for (SAs come and go while this runs).
    let mut bufs = new_bufs(
        n_bufs,
        HEADROOM + mtu.max(crate::config::TFC_PAD_MAX.into()) + TAILROOM,
    );
    let mut meta = vec![
        TxMeta {
            egress: Egress::Raw4,
            payload_of: None
        };
        n_bufs
    ];
    let mut gso = GsoSender::new();
    // Where PSP tunnel payloads go (the configuration does not change while this runs).
    let psp_ends = sh.psp.as_ref().map(|st| {
        (
            st.cfg.local,
            SocketAddr::new(st.cfg.remote, netveil_psp::UDP_PORT),
        )
    });
    let mut frags = FragCache::default();
    while !sh.stop.load(Relaxed) {
        let n = match tun.recv_batch(&mut scratch, &mut bufs, HEADROOM) {
            Ok(n) => n,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::Interrupted =>
            {
                continue
            }
            Err(_) => {
                sh.tx_drops.count(IpsecDrop::Malformed.into());
                continue;
            }
        };
        let now = sh.now();
        let snap = sh.db.load();
        // Process in place; keep the good packets at the front.
        let mut good = 0;
        for i in 0..n {
            match sh.process_out(&snap, &mut bufs[i], now, &mut frags) {
                Ok(out) => {
                    sh.tx_packets.fetch_add(1, Relaxed);
                    sh.tx_bytes.fetch_add(bufs[i].len() as u64, Relaxed);
                    meta[i] = match out {
                        Out::NatT => TxMeta {
                            egress: Egress::Udp,
                            payload_of: None,
                        },
                        Out::NatTPayload(sa) => TxMeta {
                            egress: Egress::Udp,
                            payload_of: Some(PayloadOf::Sa(sa)),
                        },
                        Out::PspPayload(sport) => TxMeta {
                            egress: Egress::Psp,
                            payload_of: Some(PayloadOf::PspPeer(sport)),
                        },
                        Out::Psp => TxMeta {
                            egress: Egress::Psp,
                            payload_of: None,
                        },
                        Out::Raw => TxMeta {
                            egress: if netveil_wire::ip::version(bufs[i].data()) == Some(4) {
                                Egress::Raw4
                            } else {
                                Egress::Raw6
                            },
                            payload_of: None,
                        },
                    };
                    if good != i {
                        bufs.swap(good, i);
                        meta.swap(good, i);
                    }
                    good += 1;
                }
                Err(d) => sh.tx_drops.count(d),
            }
        }
        let n4 = partition(&mut bufs, &mut meta, 0, good, Egress::Raw4);
        let n6 = partition(&mut bufs, &mut meta, n4, good, Egress::Raw6);
        if n4 > 0 {
            let _ = send4.send_batch(&bufs[..n4]);
        }
        if n6 > n4 {
            if let Some(s6) = send6 {
                let _ = s6.send_batch(&bufs[n4..n6]);
            }
        }
        let nu = partition(&mut bufs, &mut meta, n6, good, Egress::Udp);
        let ends = PayloadEnds {
            sad: &snap.sad,
            psp: psp_ends,
        };
        if nu > n6 {
            gso.send(&bufs[n6..nu], &meta[n6..nu], &ends, udp);
        }
        if good > nu {
            gso.send(&bufs[nu..good], &meta[nu..good], &ends, psp);
        }
    }
}

/// Sends ESP-in-UDP and PSP packets with UDP GSO: consecutive packets to the same peer with the same size (the
/// last of a run may be shorter) go out as one send that the kernel gathers from the packets' buffers, where
/// they lie, and splits into datagrams.
struct GsoSender {
    /// The runs of the batch being sent.
    runs: Vec<GsoRun>,
}

/// Consecutive packets of a batch that go out as one GSO send.
#[derive(Clone, Copy)]
struct GsoRun {
    /// The first packet's index among the batch's UDP payloads, and how many follow it (itself included).
    start: usize,
    len: usize,
    /// The first payload's length; `last` the latest one's.
    seg: usize,
    last: usize,
    to: SocketAddr,
    src: IpAddr,
    sock: usize,
}

/// The payload of the UDP datagram that `p` is, its source address, destination and source port: those of the
/// SA `m` names for a payload, else read from the packet's IP and UDP headers (which the engine built: they are
/// whole).
fn udp_datagram<'p>(
    p: &'p PacketBuf,
    m: &TxMeta,
    ends: &PayloadEnds,
) -> Option<(&'p [u8], IpAddr, SocketAddr, u16)> {
    match m.payload_of {
        Some(PayloadOf::Sa(sa)) => {
            let (src, sport, to) = ends.sad.out(sa).udp_tunnel_ends()?;
            return Some((p.data(), src, to, sport));
        }
        Some(PayloadOf::PspPeer(sport)) => {
            let (src, to) = ends.psp?;
            return Some((p.data(), src, to, sport));
        }
        None => {}
    }
    let ip = netveil_wire::ip::Packet::new_checked(p.data()).ok()?;
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    if ip.payload().len() <= netveil_wire::udp::HEADER_LEN {
        return None;
    }
    let dgram = netveil_wire::udp::Packet::new_unchecked(ip.payload());
    let (sport, dport) = (dgram.src_port(), dgram.dst_port());
    // The UDP payload as a slice of the packet's buffer (the view's borrow ends here): what follows the headers,
    // up to the IP length.
    let end = ip.total_len().min(p.len());
    let payload_len = ip.payload().len() - netveil_wire::udp::HEADER_LEN;
    let payload = p.data().get(end - payload_len..end)?;
    Some((payload, src, SocketAddr::new(dst, dport), sport))
}

/// The most packets one [`GsoSender::send`] call gathers at once (a TUN read's segments).
const GSO_GATHER: usize = netveil_io::tun::MAX_SEGMENTS;

impl GsoSender {
    fn new() -> Self {
        GsoSender {
            runs: Vec::with_capacity(GSO_GATHER),
        }
    }

    /// Sends `pkts`: UDP payloads where `meta` gives their addresses, else whole IP/UDP packets.
    fn send(&mut self, pkts: &[PacketBuf], meta: &[TxMeta], ends: &PayloadEnds, udp: &UdpOut) {
        for (chunk, meta) in pkts.chunks(GSO_GATHER).zip(meta.chunks(GSO_GATHER)) {
            self.send_chunk(chunk, meta, ends, udp);
        }
    }

    fn send_chunk(
        &mut self,
        pkts: &[PacketBuf],
        meta: &[TxMeta],
        ends: &PayloadEnds,
        udp: &UdpOut,
    ) {
        let mut payloads = [IoSlice::new(&[]); GSO_GATHER];
        let mut k = 0;
        self.runs.clear();
        for (p, m) in pkts.iter().zip(meta) {
            let Some((payload, src, to, sport)) = udp_datagram(p, m, ends) else {
                continue;
            };
            if payload.len() > netveil_io::udp::GSO_MAX_PAYLOAD {
                continue;
            }
            let dst = to.ip();
            let len = payload.len();
            let n_socks = if dst.is_ipv6() {
                udp.v6.len()
            } else {
                udp.v4.len()
            };
            if n_socks == 0 {
                continue;
            }
            // The source port is the flow's hash (PSP's pool); one socket needs no division.
            let sock = if n_socks == 1 {
                0
            } else {
                sport as usize % n_socks
            };
            payloads[k] = IoSlice::new(payload);
            // Append to the current run if it continues it: same peer and socket, every datagram so far of the
            // first one's size, and this one no longer (a shorter one closes the run).
            match self.runs.last_mut() {
                Some(r)
                    if r.to == to
                        && r.src == src
                        && r.sock == sock
                        && r.last == r.seg
                        && len <= r.seg =>
                {
                    r.len += 1;
                    r.last = len;
                }
                _ => self.runs.push(GsoRun {
                    start: k,
                    len: 1,
                    seg: len,
                    last: len,
                    to,
                    src,
                    sock,
                }),
            }
            k += 1;
        }
        // One gathered send per socket that has runs (usually one), in the runs' order.
        let mut done = 0;
        while done < self.runs.len() {
            let first = self.runs[done];
            let fam6 = first.to.is_ipv6();
            let mut items = [(
                &[][..],
                SocketAddr::from(([0, 0, 0, 0], 0)),
                IpAddr::from([0u8, 0, 0, 0]),
            ); GSO_GATHER];
            let mut n = 0;
            for r in self.runs[done..].iter_mut() {
                if r.len > 0 && r.to.is_ipv6() == fam6 && r.sock == first.sock {
                    items[n] = (&payloads[r.start..r.start + r.len], r.to, r.src);
                    n += 1;
                    // Sent: the next round skips it.
                    r.len = 0;
                }
            }
            let socks = if fam6 { &udp.v6 } else { &udp.v4 };
            let _ = socks[first.sock].send_gathered_from(&items[..n]);
            while done < self.runs.len() && self.runs[done].len == 0 {
                done += 1;
            }
        }
    }
}

fn rx_loop(sh: &Shared, tun: &Tun, socks: &[RxSock]) {
    // Received packets (raw sockets), or received GRO messages (UDP) that are split into `out`.
    let mut bufs = new_bufs(BATCH, HEADROOM + 65535 + TAILROOM);
    let mut out = new_bufs(2 * BATCH, HEADROOM + 65535 + TAILROOM);
    let mut meta = vec![UdpGroMeta::default(); BATCH];
    let mut frags = FragCache::default();
    // Where the datagrams of coalesced receives, opened where they lie, are.
    let mut spans: Vec<Span> = Vec::with_capacity(BATCH * netveil_io::udp::GSO_MAX_SEGMENTS);
    let mut pfds: Vec<libc::pollfd> = socks
        .iter()
        .map(|s| libc::pollfd {
            fd: s.fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    while !sh.stop.load(Relaxed) {
        if !matches!(netveil_io::os::poll(&mut pfds, 200), Ok(n) if n > 0) {
            continue;
        }
        for (k, s) in socks.iter().enumerate() {
            if pfds[k].revents & libc::POLLIN == 0 {
                continue;
            }
            match s {
                RxSock::Raw(r) => {
                    let Ok(n) = r.recv_batch(&mut bufs, HEADROOM) else {
                        continue;
                    };
                    let now = sh.now();
                    let snap = sh.db.load();
                    let mut good = 0;
                    for i in 0..n {
                        if sh.deliver_in(&snap, &mut bufs[i], now, UdpKind::NatT, &mut frags) {
                            bufs.swap(good, i);
                            good += 1;
                        }
                    }
                    if good > 0 {
                        let _ = tun.send_batch(&mut bufs[..good]);
                    }
                }
                RxSock::Udp(u, kind) => {
                    let Ok(n) = u.recv_gro(&mut bufs, &mut meta, HEADROOM) else {
                        continue;
                    };
                    let mut d = Delivery {
                        tun,
                        out: &mut out,
                        good: 0,
                        spans: &mut spans,
                    };
                    let rx = UdpRx {
                        sh,
                        snap: &sh.db.load(),
                        now: sh.now(),
                        kind: *kind,
                        port: match kind {
                            UdpKind::NatT => sh.config.interface.nat_t_port,
                            UdpKind::Psp => netveil_psp::UDP_PORT,
                        },
                    };
                    for (m, meta) in meta[..n].iter().enumerate() {
                        rx.deliver(&mut bufs, m, meta, &mut d, &mut frags);
                    }
                    d.finish(&mut bufs);
                }
            }
        }
    }
}

impl Shared {
    /// Inbound processing with accounting: true if the packet is to be written to the TUN.
    fn deliver_in(
        &self,
        snap: &Snapshot,
        pkt: &mut PacketBuf,
        now: u64,
        kind: UdpKind,
        frags: &mut FragCache,
    ) -> bool {
        let len = pkt.len();
        let r = match kind {
            UdpKind::Psp => self.psp_in(snap, pkt, now, frags),
            UdpKind::NatT => self.process_in(snap, pkt, now, frags),
        };
        self.count_in(r, len)
    }

    /// Counts a received packet of `len` bytes as delivered or dropped: true if it is to be written to the TUN.
    fn count_in(&self, r: std::result::Result<(), Drop>, len: usize) -> bool {
        match r {
            Ok(()) => {
                self.rx_packets.fetch_add(1, Relaxed);
                self.rx_bytes.fetch_add(len as u64, Relaxed);
                true
            }
            Err(d) => {
                self.rx_drops.count(d);
                false
            }
        }
    }
}

/// Pushes an IP and a UDP header (checksum 0) in front of a UDP payload received on the NAT-T socket.
fn synth_udp_headers(b: &mut PacketBuf, src: SocketAddr, dst: IpAddr, port: u16) -> Option<()> {
    let len = b.len();
    let hdr = b.push_front(netveil_wire::ip::ip_udp_header_len(src.ip()))?;
    netveil_wire::ip::emit_ip_udp(hdr, src, SocketAddr::new(dst, port), len).ok()
}

/// The packets a receive batch delivers to the TUN, in the order they came: copied (or swapped) into `out`, or
/// opened where they lie in the receive buffers (`spans`). At most one of the two holds packets at a time, so
/// that writing them keeps the order.
struct Delivery<'a> {
    tun: &'a Tun,
    out: &'a mut [PacketBuf],
    /// Packets in `out` to write.
    good: usize,
    spans: &'a mut Vec<Span>,
}

impl Delivery<'_> {
    /// The next `out` buffer to fill (then [`Delivery::keep`] it); call [`Delivery::write_spans`] first.
    fn next_out(&mut self) -> &mut PacketBuf {
        debug_assert!(self.spans.is_empty());
        if self.good == self.out.len() {
            self.write_out();
        }
        &mut self.out[self.good]
    }

    /// Keeps the buffer [`Delivery::next_out`] gave, to be written.
    fn keep(&mut self) {
        self.good += 1;
    }

    /// Adds a packet opened where it lies.
    fn push_span(&mut self, s: Span) {
        self.write_out();
        self.spans.push(s);
    }

    fn write_out(&mut self) {
        if self.good > 0 {
            let _ = self.tun.send_batch(&mut self.out[..self.good]);
            self.good = 0;
        }
    }

    /// Writes the packets opened in `bufs`.
    fn write_spans(&mut self, bufs: &mut [PacketBuf]) {
        if !self.spans.is_empty() {
            let _ = self.tun.send_spans(bufs, self.spans);
            self.spans.clear();
        }
    }

    fn finish(&mut self, bufs: &mut [PacketBuf]) {
        self.write_spans(bufs);
        self.write_out();
    }
}

/// Inbound processing of the messages of one receive on a UDP socket (NAT-T or PSP).
struct UdpRx<'a> {
    sh: &'a Shared,
    snap: &'a Snapshot,
    now: u64,
    kind: UdpKind,
    /// The socket's port, for the UDP header a datagram is given back.
    port: u16,
}

impl UdpRx<'_> {
    /// Delivers message `m` of `bufs`: one datagram, or datagrams of `meta.segment_size` bytes (GRO; the last may
    /// be shorter). Coalesced datagrams of tunnel mode (ESP in UDP of a tunnel SA, PSP with an IP packet inside)
    /// are opened where they lie ([`Delivery::push_span`]); any other datagram gets back its IP and UDP headers,
    /// in its own buffer (swapped out) or a copy, so that one code path handles it.
    fn deliver(
        &self,
        bufs: &mut [PacketBuf],
        m: usize,
        meta: &UdpGroMeta,
        d: &mut Delivery,
        frags: &mut FragCache,
    ) {
        let sh = self.sh;
        let (src, dst) = (meta.src, meta.dst);
        let total = bufs[m].len();
        if meta.segment_size == 0 || meta.segment_size >= total {
            d.write_spans(bufs);
            let b = d.next_out();
            std::mem::swap(&mut bufs[m], b);
            if synth_udp_headers(b, src, dst, self.port).is_none() {
                sh.rx_drops.count(IpsecDrop::Malformed.into());
            } else if sh.deliver_in(self.snap, b, self.now, self.kind, frags) {
                d.keep();
            }
            return;
        }
        // The bytes a datagram's IP and UDP headers had, which the counters include.
        let hdrs = netveil_wire::ip::ip_udp_header_len(src.ip());
        let start = bufs[m].headroom();
        let mut at = start;
        while at < start + total {
            let len = meta.segment_size.min(start + total - at);
            let seg = at..at + len;
            at += len;
            let b = &mut bufs[m];
            b.reset(seg.start);
            b.set_len(len);
            let opened = match self.kind {
                UdpKind::NatT => {
                    match bundle::unprotect_udp_payload(&self.snap.sad, b, dst, self.now) {
                        Ok(UdpUnprotected::Packet(used)) => Some(sh.check_in(
                            self.snap,
                            b.data(),
                            self.now,
                            frags,
                            came_through(used),
                        )),
                        Ok(UdpUnprotected::NotEsp) => Some(Err(IpsecDrop::Unsupported.into())),
                        Err(e) => Some(Err(e.into())),
                        Ok(UdpUnprotected::NeedsHeaders) => None,
                    }
                }
                UdpKind::Psp => sh.psp_in_payload(self.snap, b, src.ip(), self.now, frags),
            };
            if let Some(r) = opened {
                if sh.count_in(r, len + hdrs) {
                    d.push_span(Span {
                        buf: m,
                        start: b.headroom(),
                        end: b.headroom() + b.len(),
                    });
                }
                continue;
            }
            // Untouched, and needs its headers: copied out with them.
            d.write_spans(bufs);
            let b = d.next_out();
            b.reset(HEADROOM);
            let Some(room) = b.push_back(len) else {
                continue;
            };
            room.copy_from_slice(&bufs[m].storage()[seg]);
            if synth_udp_headers(b, src, dst, self.port).is_none() {
                sh.rx_drops.count(IpsecDrop::Malformed.into());
            } else if sh.deliver_in(self.snap, b, self.now, self.kind, frags) {
                d.keep();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_decrement_keeps_the_ipv4_checksum_valid() {
        let mut h = [
            0x45, 0x00, 0x00, 0x54, 0x12, 0x34, 0x40, 0x00, 0x40, 0x01, 0x00, 0x00, 198, 51, 100,
            1, 198, 51, 100, 2,
        ];
        let c = netveil_wire::checksum::checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        for ttl in (2..=64).rev() {
            assert_eq!(h[8], ttl);
            decrement_ttl(&mut h).unwrap();
            assert_eq!(netveil_wire::checksum::checksum(&h), 0, "ttl {ttl}");
        }
        assert_eq!(decrement_ttl(&mut h), Err(Drop::TtlExceeded));
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        v6[7] = 2;
        decrement_ttl(&mut v6).unwrap();
        assert_eq!(v6[7], 1);
        assert_eq!(decrement_ttl(&mut v6), Err(Drop::TtlExceeded));
    }

    /// An IPv4 UDP fragment 198.51.100.1 -> 198.51.100.2, identification 0x4242.
    fn fragment(offset8: u16, more: bool, payload: &[u8]) -> PacketBuf {
        let mut h = vec![
            0x45, 0, 0, 0, 0x42, 0x42, 0, 0, 64, 17, 0, 0, 198, 51, 100, 1, 198, 51, 100, 2,
        ];
        let len = (20 + payload.len()) as u16;
        h[2..4].copy_from_slice(&len.to_be_bytes());
        let fo = offset8 | if more { 0x2000 } else { 0 };
        h[6..8].copy_from_slice(&fo.to_be_bytes());
        let c = netveil_wire::checksum::checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h.extend_from_slice(payload);
        PacketBuf::from_slice(&h, HEADROOM, TAILROOM)
    }

    /// RFC 4301 section 7: later fragments (no ports) of a packet that a port-selective policy protects are
    /// protected too, never bypassed in clear; without their first fragment they are dropped.
    #[test]
    fn later_fragments_follow_their_first_fragment() {
        let cfg = Config::parse(
            r#"
[interface]
default_policy = "bypass"
[[sa]]
name = "out"
direction = "out"
spi = 0x1001
local = "192.0.2.1"
remote = "192.0.2.2"
suite = "aes128gcm16"
enc_key = "00112233445566778899aabbccddeeff01020304"
[[policy]]
direction = "out"
src = "198.51.100.1/32"
dst = "198.51.100.2/32"
proto = "udp"
dst_ports = 5000
action = "protect"
sas = ["out"]
"#,
        )
        .unwrap();
        let sh = Shared::new(cfg).unwrap();
        let snap = sh.db.load();
        let mut frags = FragCache::default();
        let proto = |b: &PacketBuf| b.data()[9];
        // First fragment: UDP header to port 5000 and data.
        let mut udp = vec![0x13, 0x88, 0x13, 0x88, 0x05, 0xdc, 0, 0];
        udp.extend_from_slice(&[7u8; 1472]);
        let mut first = fragment(0, true, &udp);
        assert_eq!(
            sh.process_out(&snap, &mut first, 0, &mut frags),
            Ok(Out::Raw)
        );
        assert_eq!(proto(&first), ip_proto::ESP);
        let mut later = fragment(185, false, &[8u8; 20]);
        assert_eq!(
            sh.process_out(&snap, &mut later, 0, &mut frags),
            Ok(Out::Raw)
        );
        assert_eq!(
            proto(&later),
            ip_proto::ESP,
            "a later fragment left unprotected"
        );
        // A later fragment of a packet whose first fragment was not seen: dropped, not bypassed.
        let mut orphan = fragment(185, false, &[8u8; 20]);
        orphan.data_mut()[4] = 0x11;
        assert_eq!(
            sh.process_out(&snap, &mut orphan, 0, &mut FragCache::default()),
            Err(Drop::FragmentNoState)
        );
        // Forgotten after the reassembly timeout.
        let mut late = fragment(185, false, &[8u8; 20]);
        assert_eq!(
            sh.process_out(&snap, &mut late, FRAG_SECONDS + 1, &mut frags),
            Err(Drop::FragmentNoState)
        );
        // Unfragmented traffic to another port is bypassed as configured.
        let mut other = vec![0x13, 0x88, 0x00, 0x35, 0, 12, 0, 0, 1, 2, 3, 4];
        other.truncate(12);
        let mut p = fragment(0, false, &other);
        assert_eq!(sh.process_out(&snap, &mut p, 0, &mut frags), Ok(Out::Raw));
        assert_eq!(proto(&p), ip_proto::UDP);
    }

    /// The socket-filter rule of a window: a floor twice the window below the top, and a ceiling only in a storm
    /// and only once the window has a top (a sender far ahead of a window that saw nothing is never refused).

    #[test]
    fn flow_key_reads_ports_behind_ipv6_extension_headers() {
        let mut p = vec![0x60, 0, 0, 0, 0, 16, 0 /* hop-by-hop */, 64];
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        p.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]); // hop-by-hop: next header UDP, PadN
        p.extend_from_slice(&[0x13, 0x88, 0x00, 0x35, 0, 8, 0, 0]);
        let k = flow_key(&p).unwrap();
        assert_eq!((k.proto, k.src_port, k.dst_port), (17, 5000, 53));
    }
}
