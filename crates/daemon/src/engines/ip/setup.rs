//! The IP engine's setup: checks before any change (preflight), the TUN, routes, rules, nftables and sockets,
//! its threads, its housekeeping tick and its stop.

use super::rx::{rx_loop, RxSock, UdpKind};
use super::shared::Shared;
use super::tx::{tx_loop, TxPath, UdpOut, PSP_TX_SOCKETS};
use crate::engines::ip::config::{Config, ConfigError, Interface};
use crate::engines::ip::db::{Installed, Sockets};
use crate::engines::ip::filters::FilterSock;
use crate::engines::ip::filters::{STORM_AUTH_FAILURES_PER_S, STORM_HOLD};
use crate::runtime::engine::{
    nft_install, nft_table_exists, remove_fwmark_rules, run, Engine, Undo,
};
use crate::{Error, Result};
use netveil_io::filter::Layout;
use netveil_io::{RawSocket, Tun, TunConfig, UdpSocket};
use netveil_ipsec::Drop as IpsecDrop;
use netveil_ipsec::Mode;
use netveil_wire::ip_proto;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The IP engine's configuration, checked and with its key schedules and sequence reservations made, before any
/// change to the system.
pub struct Prepared {
    config: Config,
    seq_store: Option<(
        crate::runtime::state::SeqStore,
        crate::runtime::state::RxStore,
    )>,
    sas: Vec<Installed>,
}

/// Checks what `up` needs of the IP sections (certificates and keys, the host: addresses, the TUN name, the state
/// directory) and builds every key schedule, changing nothing on the system.
pub fn prepare(config: Config) -> Result<Prepared> {
    // PSP's certificates and key were read and checked before this, by its key-exchange driver
    // (`crate::runtime::registry::AttachedDriver`), before the host checks.
    preflight(&config)?;
    // Outbound SAs with static keys continue above every sequence number they ever sent (marks in the state
    // directory, reserved ahead and synced before use): a restart never repeats a nonce, and the peer's replay
    // window accepts the restarted side at once.
    // Inbound SAs likewise keep a receive floor there: nothing accepted before a restart is accepted again.
    let (seq_store, sas) = if !config.sas.is_empty() {
        let dir = crate::runtime::state::StateDir::open(
            &config.interface.state_dir,
            "interface.state_dir",
        )?;
        let (seq, rx, starts) = crate::runtime::state::start(dir, &config.sas)?;
        let (sad, at) = config.build_sad_reserved(0, &starts)?;
        (Some((seq, rx)), Installed::of(&sad, &at))
    } else {
        let (sad, at) = config.build_sad(0)?;
        (None, Installed::of(&sad, &at))
    };
    Ok(Prepared {
        config,
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
    iface: crate::engines::ip::config::Interface,
    table: String,
    tx: std::thread::JoinHandle<()>,
    rx: std::thread::JoinHandle<()>,
    tick: u64,
    failures_before: u64,
    storm_until: Option<Instant>,
    /// Drop-storm warnings (looked at once a second).
    watch: crate::runtime::log::DropWatch,
    looked: Instant,
}

/// Sets up the TUN device, routes, rules, the fail-closed nftables table and the sockets (each change recorded in
/// `undo`) and starts the data-plane threads (PSP's key exchange is a driver beside the engine, which
/// reads `[psp]` itself). `control`: the control socket, for the startup line.
pub fn start(p: Prepared, undo: &mut Undo, control: &Path) -> Result<IpEngine> {
    let Prepared {
        config,
        seq_store,
        sas,
    } = p;
    let mut shared = Shared::with_sas(config, sas, seq_store);
    let iface = shared.config.interface.clone();
    let table = iface.nft_table();

    let nft_text = fail_closed(&mut shared, &table, undo)?;
    let tun = tun_up(&iface, undo)?;
    let Opened {
        rx,
        sockets,
        psp_out,
        udp_out,
        filters,
        send4,
        send6,
    } = open_sockets(&shared, &iface)?;
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
    // Both threads send what they read from the TUN (the receive thread the kernel's immediate answers).
    let path = Arc::new(
        TxPath::new(send4, send6, udp_out, psp_out).map_err(Error::io("cannot open an eventfd"))?,
    );
    let tx = {
        let (sh, tun, path) = (shared.clone(), tun.clone(), path.clone());
        std::thread::Builder::new()
            .name("nv-tx".into())
            .spawn(move || tx_loop(&sh, &tun, &path))
            .map_err(Error::io("thread"))?
    };
    let rxh = {
        let (sh, tun) = (shared.clone(), tun.clone());
        std::thread::Builder::new()
            .name("nv-rx".into())
            .spawn(move || rx_loop(&sh, &tun, &rx, &path))
            .map_err(Error::io("thread"))?
    };
    log_up(&shared, &iface, control);
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
        watch: crate::runtime::log::DropWatch::new(Instant::now()),
        looked: Instant::now(),
    })
}

/// The fail-closed filters first (replacing, in one transaction, those a crashed or stopped instance left): from
/// now until `netveil down`, covered traffic leaves only through the TUN or the daemon's own sockets. Returns the
/// table's text (`None`: nothing is covered).
fn fail_closed(shared: &mut Shared, table: &str, undo: &mut Undo) -> Result<Option<String>> {
    let table_existed = nft_table_exists(table);
    // What a killed (or blocking-stopped) predecessor had added at runtime stays covered.
    shared.db.restore_runtime_policies()?;
    let nft_text = shared.db.nft_text(table);
    if let Some(rules) = &nft_text {
        nft_install(table, rules)?;
        if !table_existed {
            undo.push(&["nft", "delete", "table", "inet", table]);
        }
    } else if table_existed {
        // A previous instance's rules, for a config that covered more: they would block what this one does not.
        run(&["nft", "delete", "table", "inet", table])?;
    }

    Ok(nft_text)
}

/// The TUN device with its addresses, MTU, routes and (with `fwmark`) routing rules, each change in `undo`.
fn tun_up(iface: &Interface, undo: &mut Undo) -> Result<Tun> {
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

    Ok(tun)
}

/// The engine's sockets, opened and marked.
struct Opened {
    rx: Vec<RxSock>,
    sockets: Sockets,
    psp_out: UdpOut,
    udp_out: UdpOut,
    /// The ESP receive sockets that get socket filters (see `esp_filter`).
    filters: Vec<(Layout, FilterSock)>,
    send4: RawSocket,
    send6: Option<RawSocket>,
}

/// Opens the receive sockets (raw ESP and AH of the families the SAs use, UDP for NAT-T and PSP) and the send
/// sockets, each with the daemon's mark.
fn open_sockets(shared: &Shared, iface: &Interface) -> Result<Opened> {
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
            // SO_REUSEPORT: a key-exchange driver (IKE) may share the port, steering what is not ESP to its own
            // socket (see `UdpSocket::steer_non_esp`).
            let s = UdpSocket::bind_shared(addr).map_err(io("UDP (NAT-T)"))?;
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

    Ok(Opened {
        rx,
        sockets,
        psp_out,
        udp_out,
        filters,
        send4,
        send6,
    })
}

/// The startup lines: the engine, then each SA.
fn log_up(shared: &Shared, iface: &Interface, control: &Path) {
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
                if crate::engines::ip::psp_state::is_tunnel(&st.cfg) {
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

    /// The engine's typed SA and policy interface, for key-exchange drivers.
    pub fn sa_port(&self) -> Arc<dyn crate::runtime::sa_port::SaPort> {
        Arc::new(crate::engines::ip::port::IpPort(self.shared.clone()))
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
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| Error::Command {
        command: "ip -j addr show".into(),
        stderr: format!("unreadable output: {e}"),
    })?;
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
        if let Some(n) =
            crate::runtime::state::StateDir::check(&i.state_dir, "interface.state_dir")?
        {
            note = Some(match note {
                Some(m) => format!("{m}; {n}"),
                None => n,
            });
        }
    }
    Ok(note)
}
