//! `netveil bench --ike`: IKEv2 setup latency, handshakes per second and memory per IKE SA, netveil and strongSwan
//! in the same run, per suite (PSK with X25519, PSK with MODP-2048, ECDSA P-256 certificates with ECP-256).
//!
//! Each suite gets three measurements per implementation, in a fresh two-namespace lab (`a` initiator, `b`
//! responder, a veth pair between them; the [`SwanPair`] addresses and ids; UDP encapsulation on, as
//! kernel-libipsec needs it; child `aes128gcm16` between the inner addresses):
//!
//! - **setup ms** (median, p99): `--ike-setups` sequential IKE SA + first child setups from one initiator, each
//!   deleted before the next. netveil: from the first IKE_SA_INIT sent to the IKE_AUTH response processed (the
//!   CHILD_SA event) in the load generator; strongSwan: vici `initiate` to its answer, which charon gives once the
//!   child is installed on the initiator ([`Charon::handshake_ms`](strongswan::Charon::handshake_ms)), so strongSwan's figure includes its own
//!   initiator-side install into libipsec.
//! - **handshakes/s**: `--ike-handshakes` setups with `--ike-window` in flight at any time, each a new IKE SA,
//!   timed from the first request to the last child up on the initiator. netveil: a `netveil up` responder with an
//!   `[ike]` connection whose children install into its IP engine, and a load generator in this process driving
//!   many IKE SAs through one `netveil_ike` Endpoint (the daemon's state machine) over UDP 500/4500, as one charon
//!   drives many ([`Charon::handshakes_per_s`](strongswan::Charon::handshakes_per_s)); strongSwan: charon to charon.
//! - **memory**: the responder's resident set (`VmRSS`) after the sequential setups and again with every IKE SA +
//!   child of the handshakes/s run established, divided by their number (at least 1000 outside `--quick`).
//!
//! And one row per suite that the daemons cannot have: netveil's exchange alone, initiator and responder Endpoints
//! in this process passing datagrams in memory (no sockets, no install): the time of one setup and the
//! responder's share of it, which bounds the handshakes per second of one core. (The state machine's heap per IKE
//! SA + child is counted exactly by `crates/ike/tests/memory.rs`; this process's RSS would not show it, the
//! allocator reusing what the measured exchanges freed.)

use crate::bench_args::BenchArgs;
use crate::bench_ping;
use crate::lab::{self, Daemon, Lab};
use crate::strongswan::{
    self, CharonOptions, Credential, KeyType, Pki, SwanAuth, SwanPair, SwanPsk, Unique, PAIR_IDS,
};
use crate::{Error, Result};
use netveil_crypto::sig::PrivateKey;
use netveil_ike::cert::Certificate;
use netveil_ike::config::{
    Action, AuthMethod, AuthRound, ChildConfig, Connection, Identity, Lifetimes, Mode, PubKeyCreds,
    Retransmit, TsSpec,
};
use netveil_ike::event::{Event, IkeSaId};
use netveil_ike::keys::Secret;
use netveil_ike::machine::Endpoint;
use netveil_ike::proposal::{Proposal, Protocol};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The suites, in table order.
pub const SUITES: &[&str] = &["psk-x25519", "psk-modp2048", "ecdsa-p256"];

/// The child's ESP proposal in every row.
const ESP: &str = "aes128gcm16";
/// The PSK of the lab (test key).
const PSK: &str = "netveil-bench-ike-psk-0123456789";
/// The connection and child names on both sides.
const CONN: &str = "site";
const CHILD: &str = "net";

/// A suite's IKE proposal and authentication.
struct Suite {
    name: &'static str,
    /// strongSwan's syntax, the same on both implementations.
    ike: &'static str,
    /// Certificates (ECDSA P-256) instead of the PSK.
    cert: bool,
}

fn suite(name: &str) -> Option<Suite> {
    let (name, ike, cert) = match name {
        "psk-x25519" => ("psk-x25519", "aes128-sha256-x25519", false),
        "psk-modp2048" => ("psk-modp2048", "aes128-sha256-modp2048", false),
        "ecdsa-p256" => ("ecdsa-p256", "aes128-sha256-ecp256", true),
        _ => return None,
    };
    Some(Suite { name, ike, cert })
}

/// The credentials of a `cert` suite, None for PSK suites: a CA made with strongSwan's `pki` in `dir/pki` and one
/// ECDSA P-256 certificate per side (`CN` and subjectAltName the side's FQDN id of [`PAIR_IDS`]), as the
/// strongSwan row has them.
fn suite_creds(s: &Suite, dir: &Path) -> Result<Option<[Credential; 2]>> {
    if !s.cert {
        return Ok(None);
    }
    let pki = Pki::new(&dir.join("pki"), KeyType::EcdsaP256)?;
    Ok(Some([pki.issue(PAIR_IDS[0])?, pki.issue(PAIR_IDS[1])?]))
}

/// The `auth = pubkey` methods of side `side` with `creds`: ours, our certificate and key; the peer's, our CA.
fn pubkey_methods(creds: &[Credential; 2], side: usize) -> Result<(AuthMethod, AuthMethod)> {
    let read = |p: &Path| {
        std::fs::read(p)
            .map(zeroize::Zeroizing::new)
            .map_err(Error::io(format!("read {}", p.display())))
    };
    let certs =
        |p: &Path| Certificate::load(&read(p)?).map_err(|e| other(format!("{}: {e}", p.display())));
    let c = &creds[side];
    let key = PrivateKey::from_pem_or_der(&read(&c.key)?)
        .map_err(|e| other(format!("{}: {e}", c.key.display())))?;
    Ok((
        AuthMethod::PubKey(PubKeyCreds {
            certs: certs(&c.cert)?,
            cacerts: Vec::new(),
            key: Some(Arc::new(key)),
        }),
        AuthMethod::PubKey(PubKeyCreds {
            certs: Vec::new(),
            cacerts: certs(&c.ca)?,
            key: None,
        }),
    ))
}

/// One row of the table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct IkeRow {
    /// `netveil ike psk-x25519`, `strongswan ike psk-x25519`, ...
    pub row: String,
    /// Sequential setups measured, and their median and 99th percentile (nearest rank), ms.
    pub setups: usize,
    pub median_ms: f64,
    pub p99_ms: f64,
    /// Concurrent setups, how many in flight, and the rate.
    pub handshakes: usize,
    pub window: usize,
    pub handshakes_per_s: f64,
    /// The responder's VmRSS (KiB) before and with `handshakes` IKE SAs + children established.
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    pub bytes_per_sa: f64,
    /// IKE SAs with their child that the responder holds at the end (its own count).
    pub responder_sas: Option<usize>,
    /// In-process rows: the responder's share of one setup, ms (median).
    pub responder_ms: Option<f64>,
    /// netveil rows: the responder's CHILD_SA installs into its IP engine (median ms, from its log), part of
    /// every setup and handshake.
    pub install_ms: Option<f64>,
    /// Why the row has no figures.
    pub cannot_run: Option<String>,
    /// What failed after the sequential setups (the row keeps their figures).
    pub note: Option<String>,
}

impl IkeRow {
    fn empty(row: String) -> IkeRow {
        IkeRow {
            row,
            setups: 0,
            median_ms: f64::NAN,
            p99_ms: f64::NAN,
            handshakes: 0,
            window: 0,
            handshakes_per_s: f64::NAN,
            rss_before_kib: 0,
            rss_after_kib: 0,
            bytes_per_sa: f64::NAN,
            responder_sas: None,
            responder_ms: None,
            install_ms: None,
            cannot_run: None,
            note: None,
        }
    }

    fn setups(&mut self, ms: &[f64]) {
        self.setups = ms.len();
        self.median_ms = bench_ping::median(ms);
        self.p99_ms = bench_ping::percentile(ms, 99.0);
    }

    fn memory(&mut self, before: u64, after: u64) {
        self.rss_before_kib = before;
        self.rss_after_kib = after;
        self.bytes_per_sa =
            (after as f64 - before as f64) * 1024.0 / (self.handshakes.max(1) as f64);
    }
}

/// The sizes of a run.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    setups: usize,
    handshakes: usize,
    window: usize,
}

fn other(msg: impl Into<String>) -> Error {
    Error::Other(msg.into())
}

/// A process's VmRSS in KiB.
pub fn rss_kib(pid: u32) -> Result<u64> {
    let p = format!("/proc/{pid}/status");
    let s = std::fs::read_to_string(&p).map_err(Error::io(format!("read {p}")))?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| other(format!("{p}: no VmRSS")))
}

// ---------------------------------------------------------------------------------------------------------------
// Connections of the netveil side
// ---------------------------------------------------------------------------------------------------------------

fn host_ts(a: IpAddr) -> TsSpec {
    TsSpec {
        addr: a,
        prefix: if a.is_ipv4() { 32 } else { 128 },
        protocol: 0,
        ports: (0, 65535),
    }
}

/// Side `side`'s connection (0: the initiator in `a`, 1: the responder in `b`) for the in-process rows and the
/// load generator: what [`netveil_responder_config`] says in TOML. `creds`: those of [`suite_creds`].
fn initiator_conn(s: &Suite, side: usize, creds: Option<&[Credential; 2]>) -> Result<Connection> {
    let o = 1 - side;
    let (local, remote, psk) = match creds {
        Some(c) => {
            let (l, r) = pubkey_methods(c, side)?;
            (l, r, None)
        }
        None if s.cert => return Err(other(format!("suite {} needs certificates", s.name))),
        None => (
            AuthMethod::Psk,
            AuthMethod::Psk,
            Some(Secret::new(PSK.as_bytes())),
        ),
    };
    let parse = |p: Protocol, t: &str| {
        Proposal::parse(p, t).map_err(|e| other(format!("proposal {t}: {e}")))
    };
    let hour = Duration::from_secs(3600);
    Ok(Connection {
        name: CONN.into(),
        local_addrs: vec![SwanPair::outer(side)],
        remote_addrs: vec![SwanPair::outer(o)],
        remote_port: 500,
        proposals: vec![parse(Protocol::Ike, s.ike)?],
        encap: true,
        fragmentation: false,
        local: AuthRound {
            id: Identity::Fqdn(PAIR_IDS[side].into()),
            method: local,
        },
        remote: AuthRound {
            id: Identity::Fqdn(PAIR_IDS[o].into()),
            method: remote,
        },
        psk,
        dpd_delay: None,
        lifetimes: Lifetimes {
            rekey: 4 * hour,
            life: 5 * hour,
            rand: Duration::ZERO,
        },
        reauth: Duration::ZERO,
        retransmit: Retransmit {
            timeout: Duration::from_secs(2),
            base: 1.8,
            tries: 3,
        },
        children: vec![ChildConfig {
            name: CHILD.into(),
            local_ts: vec![host_ts(SwanPair::inner(side))],
            remote_ts: vec![host_ts(SwanPair::inner(o))],
            esp_proposals: vec![parse(Protocol::Esp, ESP)?],
            mode: Mode::Tunnel,
            lifetimes: Lifetimes {
                rekey: hour,
                life: 2 * hour,
                rand: Duration::ZERO,
            },
            start_action: Action::None,
            dpd_action: Action::None,
            close_action: Action::None,
            replay_window: 32,
        }],
    })
}

/// The responder daemon's configuration: a TUN with the inner address, and `[ike]` with the connection (PSK, or
/// with `creds` the responder's certificate and key and the CA).
fn netveil_responder_config(lab: &Lab, s: &Suite, creds: Option<&[Credential; 2]>) -> String {
    let (me, peer) = (SwanPair::inner(1), SwanPair::inner(0));
    let (lid, rid) = (PAIR_IDS[1], PAIR_IDS[0]);
    let auth = match creds {
        Some([_, c]) => format!(
            "local = {{ id = \"@{lid}\", auth = \"pubkey\", certs = [\"{}\"], key = \"{}\" }}\n\
             remote = {{ id = \"@{rid}\", auth = \"pubkey\", cacerts = [\"{}\"] }}\n",
            c.cert.display(),
            c.key.display(),
            c.ca.display()
        ),
        None => format!(
            "psk = \"{PSK}\"\nlocal = {{ id = \"@{lid}\", auth = \"psk\" }}\n\
             remote = {{ id = \"@{rid}\", auth = \"psk\" }}\n"
        ),
    };
    format!(
        "# netveil bench --ike: the responder\nlog_level = \"info\"\n\
         [interface]\nname = \"nvbike0\"\nmtu = 1400\ncontrol_socket = \"{sock}\"\nstate_dir = \"{state}\"\n\
         addresses = [\"{me}/32\"]\nroutes = [\"{peer}/32\"]\n\n[ike]\n\n\
         [[ike.connection]]\nname = \"{CONN}\"\nlocal_addrs = [\"{lo}\"]\nremote_addrs = [\"{ro}\"]\n\
         proposals = [\"{ike}\"]\nencap = true\n{auth}\n\
         [[ike.connection.children]]\nname = \"{CHILD}\"\nlocal_ts = [\"{me}/32\"]\nremote_ts = [\"{peer}/32\"]\n\
         esp_proposals = [\"{ESP}\"]\nstart_action = \"none\"\n",
        sock = lab.socket_path("nvbike").display(),
        state = lab.dir().join("state-nvbike").display(),
        lo = SwanPair::outer(1),
        ro = SwanPair::outer(0),
        ike = s.ike,
    )
}

// ---------------------------------------------------------------------------------------------------------------
// The in-process exchange
// ---------------------------------------------------------------------------------------------------------------

/// `n` setups between two Endpoints in this process (datagrams handed over in memory, no install): per setup the
/// time from `initiate` to the initiator's CHILD_SA event, and the time spent in the responder's
/// `handle_datagram`; each IKE SA deleted before the next (not timed).
fn exchange_in_process(
    s: &Suite,
    creds: Option<&[Credential; 2]>,
    n: usize,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let now = Instant::now();
    let mut ep = [
        Endpoint::new(
            vec![initiator_conn(s, 0, creds)?],
            Box::new(netveil_crypto::rand::OsRng),
            now,
        )
        .with_wall_clock(now, SystemTime::now()),
        Endpoint::new(
            vec![initiator_conn(s, 1, creds)?],
            Box::new(netveil_crypto::rand::OsRng),
            now,
        )
        .with_wall_clock(now, SystemTime::now()),
    ];
    let mut total = Vec::with_capacity(n);
    let mut responder = Vec::with_capacity(n);
    // Delivers until nothing is in flight; returns the responder's time and whether `id` got its child.
    fn pump(ep: &mut [Endpoint; 2], id: IkeSaId) -> Result<(Duration, bool)> {
        let mut resp = Duration::ZERO;
        let mut up = false;
        for _ in 0..64 {
            let mut moved = false;
            for i in 0..2 {
                while let Some(t) = ep[i].poll_transmit() {
                    moved = true;
                    let t0 = Instant::now();
                    ep[1 - i].handle_datagram(t0, t.remote, t.local, &t.bytes);
                    if i == 0 {
                        resp += t0.elapsed();
                    }
                }
                while let Some(e) = ep[i].poll_event() {
                    match e {
                        Event::ChildSaUp(c) if i == 0 && c.ike_sa == id => up = true,
                        Event::Failed { failure, .. } => {
                            return Err(other(format!("in-process exchange failed: {failure:?}")))
                        }
                        _ => {}
                    }
                }
            }
            if !moved || up {
                return Ok((resp, up));
            }
        }
        Err(other("in-process exchange: no end to the datagrams"))
    }
    for _ in 0..n {
        let t0 = Instant::now();
        let id = ep[0]
            .initiate(CONN, None, t0)
            .map_err(|e| other(format!("initiate: {e}")))?;
        let (resp, up) = pump(&mut ep, id)?;
        let t = t0.elapsed();
        if !up {
            return Err(other("in-process exchange: no CHILD_SA"));
        }
        total.push(t.as_secs_f64() * 1e3);
        responder.push(resp.as_secs_f64() * 1e3);
        ep[0]
            .terminate(id, Instant::now())
            .map_err(|e| other(format!("terminate: {e}")))?;
        pump(&mut ep, id)?;
    }
    Ok((total, responder))
}

fn measure_in_process(s: &Suite, z: Sizes) -> Result<IkeRow> {
    let mut row = IkeRow::empty(format!("netveil ike {} (exchange, in process)", s.name));
    // Certificates need a directory (no namespaces are made): a lab's, removed with it.
    let lab = if s.cert {
        Some(Lab::new("nvbikp")?)
    } else {
        None
    };
    let creds = match &lab {
        Some(l) => suite_creds(s, l.dir())?,
        None => None,
    };
    let creds = creds.as_ref();
    // Warm-up (first-use costs of the allocator and the crypto library), then the measured runs.
    exchange_in_process(s, creds, 5)?;
    let (total, resp) = exchange_in_process(s, creds, z.setups.max(z.handshakes / 4))?;
    row.setups(&total);
    row.responder_ms = Some(bench_ping::median(&resp));
    let mean_resp = resp.iter().sum::<f64>() / resp.len().max(1) as f64;
    row.handshakes_per_s = 1e3 / mean_resp.max(1e-9);
    Ok(row)
}

// ---------------------------------------------------------------------------------------------------------------
// The load generator: many IKE SAs of one Endpoint over UDP
// ---------------------------------------------------------------------------------------------------------------

/// A received datagram: our port, the sender, the IKE message (the non-ESP marker stripped on 4500).
type Datagram = (u16, SocketAddr, Vec<u8>);

/// One Endpoint with sockets on UDP 500 and 4500 of the initiator's address; a reader thread per socket feeds a
/// channel (stopped on drop).
struct Loader {
    ep: Endpoint,
    local: IpAddr,
    s500: UdpSocket,
    s4500: UdpSocket,
    rx: mpsc::Receiver<Datagram>,
    stop: Arc<AtomicBool>,
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

impl Loader {
    /// Binds the sockets (call it on a thread inside the initiator's namespace).
    fn open(conn: Connection) -> Result<Loader> {
        let local = *conn
            .local_addrs
            .first()
            .ok_or_else(|| other("load generator: no local address"))?;
        let s500 = UdpSocket::bind((local, 500)).map_err(Error::io("load generator: bind 500"))?;
        let s4500 =
            UdpSocket::bind((local, 4500)).map_err(Error::io("load generator: bind 4500"))?;
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        for (s, port) in [(&s500, 500u16), (&s4500, 4500u16)] {
            let s = s.try_clone().map_err(Error::io("load generator: socket"))?;
            s.set_read_timeout(Some(Duration::from_millis(50)))
                .map_err(Error::io("load generator: socket"))?;
            let (tx, stop) = (tx.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("ike-load-{port}"))
                .spawn(move || {
                    let mut buf = vec![0u8; 65536];
                    while !stop.load(Relaxed) {
                        let Ok((n, from)) = s.recv_from(&mut buf) else {
                            continue;
                        };
                        let b = &buf[..n];
                        let msg = if port == 4500 {
                            match b.strip_prefix(&[0u8; 4]) {
                                Some(m) => m,
                                None => continue,
                            }
                        } else {
                            b
                        };
                        if tx.send((port, from, msg.to_vec())).is_err() {
                            break;
                        }
                    }
                })
                .map_err(Error::io("load generator: thread"))?;
        }
        // The wall clock for certificate validity (a run lasts minutes: no need to keep it current).
        let now = Instant::now();
        let ep = Endpoint::new(vec![conn], Box::new(netveil_crypto::rand::OsRng), now)
            .with_wall_clock(now, SystemTime::now());
        Ok(Loader {
            ep,
            local,
            s500,
            s4500,
            rx,
            stop,
        })
    }

    fn send_all(&mut self) -> Result<()> {
        while let Some(t) = self.ep.poll_transmit() {
            let r = if t.local.port() == 4500 {
                let mut b = Vec::with_capacity(4 + t.bytes.len());
                b.extend_from_slice(&[0; 4]);
                b.extend_from_slice(&t.bytes);
                self.s4500.send_to(&b, t.remote)
            } else {
                self.s500.send_to(&t.bytes, t.remote)
            };
            r.map_err(Error::io(format!("load generator: send to {}", t.remote)))?;
        }
        Ok(())
    }

    /// Waits up to `max` (or the Endpoint's next timeout) for datagrams, hands in what came, runs due timeouts,
    /// sends, and appends the events to `out`.
    fn turn(&mut self, max: Duration, out: &mut Vec<Event>) -> Result<()> {
        let now = Instant::now();
        let wait = self
            .ep
            .poll_timeout()
            .map_or(max, |t| t.saturating_duration_since(now).min(max));
        let mut got = Vec::new();
        match self.rx.recv_timeout(wait) {
            Ok(d) => got.push(d),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(other("load generator: the socket readers stopped"))
            }
        }
        while let Ok(d) = self.rx.try_recv() {
            got.push(d);
        }
        let now = Instant::now();
        for (port, from, bytes) in got {
            self.ep
                .handle_datagram(now, SocketAddr::new(self.local, port), from, &bytes);
        }
        if self.ep.poll_timeout().is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
        }
        self.send_all()?;
        while let Some(e) = self.ep.poll_event() {
            out.push(e);
        }
        Ok(())
    }

    /// `n` sequential setups, each deleted before the next: ms from `initiate` (the first IKE_SA_INIT sent) to
    /// the CHILD_SA event (the IKE_AUTH response processed). Between two, after the DELETE's answer, a pause (20
    /// ms plus the last setup's time, at most 500 ms): the responder removes the child after it answered, and
    /// that removal would otherwise delay the next IKE_SA_INIT and count in its setup.
    fn sequential(&mut self, n: usize) -> Result<Vec<f64>> {
        let mut out: Vec<f64> = Vec::with_capacity(n);
        let mut ev = Vec::new();
        for i in 0..n {
            if let Some(last) = out.last() {
                let pause = Duration::from_secs_f64((20.0 + last).min(500.0) / 1e3);
                let t = Instant::now();
                while t.elapsed() < pause {
                    self.turn(pause.saturating_sub(t.elapsed()), &mut ev)?;
                }
                ev.clear();
            }
            let t0 = Instant::now();
            let id = self
                .ep
                .initiate(CONN, None, t0)
                .map_err(|e| other(format!("initiate: {e}")))?;
            self.send_all()?;
            let mut took = None;
            while took.is_none() {
                if t0.elapsed() > Duration::from_secs(10) {
                    return Err(other(format!("setup {i}: no CHILD_SA after 10 s")));
                }
                self.turn(Duration::from_millis(100), &mut ev)?;
                let t = t0.elapsed();
                for e in ev.drain(..) {
                    match e {
                        Event::ChildSaUp(c) if c.ike_sa == id => took = Some(t),
                        Event::Failed { failure, .. } => {
                            return Err(other(format!("setup {i}: {failure:?}")))
                        }
                        _ => {}
                    }
                }
            }
            out.push(took.unwrap_or_default().as_secs_f64() * 1e3);
            let t1 = Instant::now();
            self.ep
                .terminate(id, t1)
                .map_err(|e| other(format!("terminate: {e}")))?;
            self.send_all()?;
            let mut down = false;
            while !down && t1.elapsed() < Duration::from_secs(5) {
                self.turn(Duration::from_millis(100), &mut ev)?;
                down = ev
                    .drain(..)
                    .any(|e| matches!(e, Event::IkeSaDown { ike_sa, .. } if ike_sa == id));
            }
            if !down {
                return Err(other(format!("setup {i}: the DELETE was not answered")));
            }
        }
        Ok(out)
    }

    /// `total` setups with `window` in flight; the IKE SAs stay up. Handshakes per second from the first
    /// request to the last CHILD_SA event.
    fn concurrent(&mut self, total: usize, window: usize) -> Result<f64> {
        let deadline = Duration::from_secs(10 + total as u64 / 2);
        let t0 = Instant::now();
        let mut started = 0;
        let mut up = 0;
        let mut ev = Vec::new();
        let fire = |ep: &mut Endpoint, started: &mut usize| -> Result<()> {
            ep.initiate(CONN, None, Instant::now())
                .map_err(|e| other(format!("initiate: {e}")))?;
            *started += 1;
            Ok(())
        };
        while started < window.clamp(1, total.max(1)) {
            fire(&mut self.ep, &mut started)?;
        }
        self.send_all()?;
        while up < total {
            if t0.elapsed() > deadline {
                return Err(other(format!(
                    "{up} of {total} children up after {deadline:?}"
                )));
            }
            self.turn(Duration::from_millis(100), &mut ev)?;
            for e in ev.drain(..) {
                match e {
                    Event::ChildSaUp(_) => {
                        up += 1;
                        if started < total {
                            fire(&mut self.ep, &mut started)?;
                        }
                    }
                    Event::Failed { failure, .. } => {
                        return Err(other(format!("after {up} of {total}: {failure:?}")))
                    }
                    _ => {}
                }
            }
            self.send_all()?;
        }
        Ok(total as f64 / t0.elapsed().as_secs_f64())
    }
}

/// The CHILD_SAs a netveil daemon has installed by the IKE driver (its inbound SAs `ike-N-in`), from `status`.
fn ike_children(d: &Daemon) -> Result<usize> {
    fn walk(v: &serde_json::Value, n: &mut usize) {
        match v {
            serde_json::Value::Object(m) => {
                if m.get("name")
                    .and_then(|x| x.as_str())
                    .is_some_and(|x| x.starts_with("ike-") && x.ends_with("-in"))
                {
                    *n += 1;
                }
                m.values().for_each(|x| walk(x, n));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, n)),
            _ => {}
        }
    }
    let mut n = 0;
    walk(&d.ask("status")?, &mut n);
    Ok(n)
}

/// The install times (ms) of the CHILD_SAs in a daemon's log (`..., install 1.234 ms)`).
fn install_times(log: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| l.contains("ike: CHILD_SA "))
        .filter_map(|l| {
            l.rsplit_once(", install ")?
                .1
                .strip_suffix(" ms)")?
                .parse()
                .ok()
        })
        .collect()
}

/// Two namespaces joined by a veth pair with the [`SwanPair`] addresses (inner ones on `lo` of `a` only: `b`'s
/// is on the daemon's TUN).
fn two_namespaces(lab: &mut Lab) -> Result<[String; 2]> {
    let a = lab.add_ns("a")?;
    let b = lab.add_ns("b")?;
    for ns in [&a, &b] {
        for k in ["all", "default"] {
            lab.exec_ok(
                ns,
                &[
                    "sysctl",
                    "-qw",
                    &format!("net.ipv6.conf.{k}.disable_ipv6=1"),
                ],
            )?;
        }
    }
    lab.veth(&a, "veth-a", &b, "veth-b")?;
    for (i, (ns, dev)) in [(&a, "veth-a"), (&b, "veth-b")].into_iter().enumerate() {
        lab.addr(ns, dev, &format!("{}/24", SwanPair::outer(i)))?;
    }
    lab.addr(&a, "lo", &format!("{}/32", SwanPair::inner(0)))?;
    Ok([a, b])
}

fn measure_netveil(bin: &Path, s: &Suite, z: Sizes) -> Result<IkeRow> {
    let mut row = IkeRow::empty(format!("netveil ike {}", s.name));
    let mut lab = Lab::new("nvbike")?.with_netveil(bin);
    let creds = suite_creds(s, lab.dir())?;
    let ns = two_namespaces(&mut lab)?;
    let config = netveil_responder_config(&lab, s, creds.as_ref());
    let daemon = lab.start_daemon(&ns[1], "nvbike", &config)?;
    let pid = daemon
        .pid()
        .ok_or_else(|| other("the responder daemon has no pid"))?;
    let conn = initiator_conn(s, 0, creds.as_ref())?;
    let setups = z.setups;
    let fail = |e: Error| {
        let log = daemon.log();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        other(format!(
            "{e}; responder log: {}",
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ))
    };
    let (mut loader, ms) = lab::spawn_in_ns(&ns[0], move || -> Result<(Loader, Vec<f64>)> {
        let mut l = Loader::open(conn)?;
        l.sequential(2)?;
        let ms = l.sequential(setups)?;
        Ok((l, ms))
    })?
    .join()
    .map_err(|_| other("the load generator panicked"))?
    .and_then(|r| r)
    .map_err(fail)?;
    row.setups(&ms);
    let before = rss_kib(pid)?;
    row.handshakes = z.handshakes;
    row.window = z.window;
    match loader.concurrent(z.handshakes, z.window) {
        Ok(r) => {
            row.handshakes_per_s = r;
            // The last IKE_AUTH answers left the responder after its children were installed (the driver
            // installs first); give its loop a moment to finish the turn, then read.
            std::thread::sleep(Duration::from_millis(200));
            let after = rss_kib(pid)?;
            row.memory(before, after);
        }
        Err(e) => row.note = Some(format!("handshakes/s: {}", fail(e))),
    }
    row.responder_sas = ike_children(&daemon).ok();
    let installs = install_times(&daemon.log());
    if !installs.is_empty() {
        row.install_ms = Some(bench_ping::median(&installs));
    }
    drop(loader);
    Ok(row)
}

// ---------------------------------------------------------------------------------------------------------------
// strongSwan
// ---------------------------------------------------------------------------------------------------------------

fn measure_strongswan(s: &Suite, z: Sizes) -> Result<IkeRow> {
    let mut row = IkeRow::empty(format!("strongswan ike {}", s.name));
    if let Some(why) = strongswan::missing() {
        row.cannot_run = Some(why);
        return Ok(row);
    }
    let mut lab = Lab::new("nvbiks")?;
    let opts = CharonOptions {
        // As a bench runs it: errors only in the log; every initiate a new IKE SA; no COOKIEs or drops at many
        // half-open SAs from one address.
        log_level: 0,
        log_subsystems: Vec::new(),
        reuse_ikesa: false,
        dos_protection: false,
        ..CharonOptions::default()
    };
    let p = SwanPair::up(&mut lab, &opts)?;
    let auth: [SwanAuth; 2] = if s.cert {
        let pki = Pki::new(&lab.dir().join("pki"), KeyType::EcdsaP256)?;
        [
            SwanAuth::Pubkey(pki.issue(PAIR_IDS[0])?),
            SwanAuth::Pubkey(pki.issue(PAIR_IDS[1])?),
        ]
    } else {
        let k = SwanPsk::new(PSK)?;
        [SwanAuth::Psk(k.clone()), SwanAuth::Psk(k)]
    };
    let [a0, a1] = auth;
    let conn = |side, auth| {
        let mut c = SwanPair::conn(side, CONN, auth, s.ike, CHILD, ESP);
        c.unique = Unique::Never;
        c
    };
    p.load([&[conn(0, a0)], &[conn(1, a1)]])?;
    let [a, b] = &p.charons;
    let pid = b.pid().ok_or_else(|| other("charon has no pid"))?;
    a.handshake_ms(CONN, CHILD, 2)?;
    let ms = a.handshake_ms(CONN, CHILD, z.setups)?;
    row.setups(&ms);
    let before = rss_kib(pid)?;
    row.handshakes = z.handshakes;
    row.window = z.window;
    match a.handshakes_per_s(CHILD, z.handshakes, z.window) {
        Ok(r) => {
            row.handshakes_per_s = r;
            std::thread::sleep(Duration::from_millis(200));
            let after = rss_kib(pid)?;
            row.memory(before, after);
        }
        Err(e) => row.note = Some(format!("handshakes/s: {e}")),
    }
    row.responder_sas = b.list_sas().ok().map(|v| {
        v.iter()
            .filter(|s| {
                s.state == strongswan::IkeState::Established
                    && s.child(CHILD)
                        .is_some_and(|c| c.state == strongswan::ChildState::Installed)
            })
            .count()
    });
    Ok(row)
}

// ---------------------------------------------------------------------------------------------------------------
// The command
// ---------------------------------------------------------------------------------------------------------------

fn fmt(v: f64, prec: usize) -> String {
    if v.is_finite() {
        format!("{v:.prec$}")
    } else {
        "-".into()
    }
}

/// The table.
pub fn render(rows: &[IkeRow]) -> String {
    let mut t = format!(
        "{:<48} {:>9} {:>9} {:>13} {:>10} {:>10} {:>10}\n",
        "row", "ms", "p99 ms", "handshakes/s", "B per SA", "responder", "install ms"
    );
    for r in rows {
        if let Some(why) = &r.cannot_run {
            t += &format!("{:<48} {why}\n", r.row);
            continue;
        }
        let resp = match (r.responder_ms, r.responder_sas) {
            (Some(ms), _) => format!("{} ms", fmt(ms, 3)),
            (None, Some(n)) => format!("{n}/{}", r.handshakes),
            _ => "-".into(),
        };
        t += &format!(
            "{:<48} {:>9} {:>9} {:>13} {:>10} {:>10} {:>10}\n",
            r.row,
            fmt(r.median_ms, 3),
            fmt(r.p99_ms, 3),
            fmt(r.handshakes_per_s, 0),
            fmt(r.bytes_per_sa, 0),
            resp,
            r.install_ms.map_or("-".into(), |v| fmt(v, 3))
        );
    }
    t
}

/// The issue's goals against the rows: setup at most 1 ms (PSK+X25519), at least 2x strongSwan's handshakes per
/// second, at most 4 KB per IKE SA + child. One line per goal and suite that both sides measured.
pub fn goals(rows: &[IkeRow]) -> Vec<String> {
    let find = |name: &str| {
        rows.iter()
            .find(|r| r.row == name && r.cannot_run.is_none())
    };
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let mut out = Vec::new();
    if let Some(r) = find("netveil ike psk-x25519") {
        out.push(format!(
            "setup at most 1 ms (psk-x25519): median {} ms: {}",
            fmt(r.median_ms, 3),
            verdict(r.median_ms <= 1.0)
        ));
    }
    for s in SUITES {
        let (Some(n), Some(w)) = (
            find(&format!("netveil ike {s}")),
            find(&format!("strongswan ike {s}")),
        ) else {
            continue;
        };
        let x = n.handshakes_per_s / w.handshakes_per_s;
        out.push(format!(
            "at least 2x strongSwan's handshakes/s ({s}): {} vs {} = {}x: {}",
            fmt(n.handshakes_per_s, 0),
            fmt(w.handshakes_per_s, 0),
            fmt(x, 2),
            verdict(x >= 2.0)
        ));
        out.push(format!(
            "at most 4 KB per IKE SA + child ({s}): {} B (strongSwan {} B): {}",
            fmt(n.bytes_per_sa, 0),
            fmt(w.bytes_per_sa, 0),
            verdict(n.bytes_per_sa <= 4096.0)
        ));
    }
    out
}

pub fn run(a: &BenchArgs, bin: PathBuf) -> Result<Vec<IkeRow>> {
    let suites: Vec<Suite> = if a.ike_suites.is_empty() {
        SUITES.iter().filter_map(|s| suite(s)).collect()
    } else {
        a.ike_suites
            .iter()
            .map(|s| {
                suite(s).ok_or_else(|| {
                    Error::Usage(format!(
                        "--ike-suites: unknown suite '{s}' (one of {})",
                        SUITES.join(", ")
                    ))
                })
            })
            .collect::<Result<_>>()?
    };
    let z = if a.quick {
        Sizes {
            setups: a.ike_setups.unwrap_or(20),
            handshakes: a.ike_handshakes.unwrap_or(200),
            window: a.ike_window,
        }
    } else {
        Sizes {
            setups: a.ike_setups.unwrap_or(200),
            handshakes: a.ike_handshakes.unwrap_or(1000),
            window: a.ike_window,
        }
    };
    if z.setups == 0 || z.handshakes == 0 || z.window == 0 {
        return Err(Error::Usage(
            "--ike-setups, --ike-handshakes and --ike-window: at least 1".into(),
        ));
    }
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "netveil bench --ike: IKEv2 between two network namespaces on one machine ({cpus} CPUs), child {ESP}, UDP \
         encapsulation; per suite {} sequential setups (ms: first IKE_SA_INIT to the IKE_AUTH response processed; \
         strongSwan: vici initiate to child installed), {} setups {} at a time (handshakes/s), and the responder's \
         resident memory per established IKE SA + child",
        z.setups, z.handshakes, z.window
    );
    println!(
        "  netveil rows: responder `netveil up` of {}",
        bin.display()
    );
    let mut rows = Vec::new();
    let mut fails = 0;
    for s in &suites {
        let measured = [
            measure_netveil(&bin, s, z),
            measure_in_process(s, z),
            measure_strongswan(s, z),
        ];
        let names = [
            format!("netveil ike {}", s.name),
            format!("netveil ike {} (exchange, in process)", s.name),
            format!("strongswan ike {}", s.name),
        ];
        for (r, name) in measured.into_iter().zip(names) {
            match r {
                Ok(row) => {
                    println!(
                        "  {}",
                        render(std::slice::from_ref(&row))
                            .lines()
                            .nth(1)
                            .unwrap_or("")
                    );
                    rows.push(row);
                }
                Err(e) => {
                    fails += 1;
                    println!("  {name}: measurement failed: {e}");
                    let mut row = IkeRow::empty(name);
                    row.cannot_run = Some(format!("measurement failed: {e}"));
                    rows.push(row);
                }
            }
        }
    }
    println!();
    print!("{}", render(&rows));
    println!(
        "(ms, p99 ms: sequential setups; B per SA: the responder's VmRSS growth over the handshakes/s run per IKE SA \
         + child (for the state machine's own heap per IKE SA + child, exact: cargo test -p netveil-ike --test memory); responder: the SAs it holds at the end, or for in-process rows its share of one setup, whose \
         handshakes/s is what one core would do on the responder's side alone; install ms: the netveil \
         responder's CHILD_SA install into its IP engine, median, from its log)"
    );
    for r in &rows {
        if let Some(n) = &r.note {
            println!("  {}: {n}", r.row);
            fails += 1;
        }
    }
    let g = goals(&rows);
    if !g.is_empty() {
        println!();
        println!("goals of issue 23 on this machine:");
        for l in g {
            println!("  {l}");
        }
    }
    if let Some(p) = &a.json {
        let v = serde_json::json!({ "ike": rows });
        std::fs::write(p, serde_json::to_string_pretty(&v).unwrap_or_default())
            .map_err(Error::io(format!("cannot write {}", p.display())))?;
    }
    if fails > 0 {
        return Err(Error::Other("some IKE measurements failed".into()));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suite_has_a_proposal_both_sides_parse() {
        for name in SUITES {
            let s = suite(name).unwrap();
            for side in 0..2 {
                if s.cert {
                    assert!(initiator_conn(&s, side, None).is_err());
                    continue;
                }
                let c = initiator_conn(&s, side, None).unwrap();
                assert_eq!(c.proposals.len(), 1);
            }
        }
        assert!(suite("psk-nope").is_none());
    }

    #[test]
    fn the_in_process_exchange_sets_up_children() {
        let s = suite("psk-x25519").unwrap();
        let (total, resp) = exchange_in_process(&s, None, 3).unwrap();
        assert_eq!((total.len(), resp.len()), (3, 3));
        assert!(total.iter().zip(&resp).all(|(t, r)| *r > 0.0 && r < t));
    }

    #[test]
    fn install_times_come_from_the_drivers_child_line() {
        let log = "2026-11-26T02:00:00Z INFO ike: CHILD_SA net of connection site installed (AES_GCM_16_128, SPIs \
                   in 0xc1 out 0xc2, SAs ike-1-in and ike-1-out, UDP-encapsulated, install 12.500 ms)\n\
                   INFO ike: IKE SA 1 of connection site established, install 3 ms)\n";
        assert_eq!(install_times(log), vec![12.5]);
    }

    #[test]
    fn goals_compare_netveil_with_strongswan_of_the_same_suite() {
        let mut n = IkeRow::empty("netveil ike psk-x25519".into());
        n.median_ms = 0.8;
        n.handshakes_per_s = 900.0;
        n.bytes_per_sa = 5000.0;
        let mut w = IkeRow::empty("strongswan ike psk-x25519".into());
        w.handshakes_per_s = 400.0;
        w.bytes_per_sa = 9000.0;
        let mut e = IkeRow::empty("netveil ike ecdsa-p256".into());
        e.cannot_run = Some("measurement failed: no charon".into());
        let g = goals(&[n, w, e]);
        assert_eq!(g.len(), 3, "{g:?}");
        assert!(g[0].ends_with(": met"), "{}", g[0]);
        assert!(g[1].contains("2.25x: met"), "{}", g[1]);
        assert!(g[2].ends_with("NOT met"), "{}", g[2]);
        let t = render(&[IkeRow::empty("x".into())]);
        assert!(t.lines().count() == 2);
    }
}
