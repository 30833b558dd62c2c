//! PSP key exchange driver: a mutually authenticated TLS 1.3 connection (rustls) between the two hosts, on which
//! each side allocates its receive SPI and key (`rx-assoc`) and sends them to its peer, which installs them as its
//! transmit SA (`tx-assoc`), as the kernel's PSP documentation and the specification's authors describe.
//!
//! The protocol logic (what to send on connect, when to rotate, which receive SAs to keep, version checks,
//! decoding) is the sans-I/O machine [`netveil_psp::kx::KeyExchange`]; this driver owns the sockets, the TLS
//! session and the clock, and only moves bytes and applies the machine's events:
//!
//! - The daemon with the higher outer address listens on `psp.control_port`; the one with the lower address
//!   connects, from the same port (so the connection is exactly `local:port <-> remote:port`, and the input
//!   filter lets nothing else of the peer's through), and reconnects every second while the peer is unreachable.
//!   Connections close with a reset (SO_LINGER 0), also when a daemon is killed, so that no TIME_WAIT state holds
//!   the fixed ports and a restarted daemon reconnects at once. The data plane keeps its SAs while the connection
//!   is down.
//! - The TLS handshake must finish within [`HANDSHAKE_DEADLINE`] as a whole (not only per read), so a peer that
//!   trickles bytes cannot hold the key exchange.
//! - Each side checks the other's certificate against `psp.peer_ca` and the name `psp.peer_name` (the client
//!   by TLS server-name verification, the server by checking the client certificate's names).
//! - It runs as a driver beside the IP engine ([`start_driver`]): its own thread, sockets and clock. It changes
//!   the data plane only through the engine's typed port ([`SaPort`]): calls of the machine that change the
//!   device's receive SAs go through [`SaPort::psp_rx`], which runs them under the device's write lock (the data
//!   plane does not take it: it decapsulates through the receive SAs the device republishes atomically) and
//!   refreshes the PSP socket's filter under the same lock, before the association that hands a new SPI out is
//!   written: the filter never refuses the peer's first packets with it.
//! - Once the connection is up, the machine is told so ([`KeyExchange::connected`]); the plaintext the peer sends
//!   goes to [`KeyExchange::handle_input`], what [`KeyExchange::poll_transmit`] returns is written.
//! - Events: `InstallTx` swaps the data plane's transmit SA ([`SaPort::psp_install_tx`]: read per packet without
//!   a lock), `AssocSent`/`InstallTx`/`Rotated` move the `status` counters ([`PspKxState`], shared with the
//!   engine's answers), `Failed` closes the connection (then the usual reconnection).
//! - Rotation (every `psp.rotate_seconds` since the last one, or on `netveil rotate`): the device rotates its
//!   master keys, then allocates a new receive SPI under the new key and sends it. The peer switches its
//!   transmit SA when the message arrives; packets still in flight with the old SPI decrypt because SAs one
//!   rotation old stay valid. Requests and the timer are served every 100 ms, also while disconnected.
//!
//! Messages (inside TLS): [`netveil_psp::assoc`].
//! Key material is zeroized after use and never logged.

use crate::engines::ip::config::PspConfig;
use crate::runtime::engine::{Engine, Undo};
use crate::runtime::sa_port::{PspKxState, SaPort};
use crate::{Error, Result};
use netveil_psp::kx::{Event, KeyExchange, KxConfig};
use netveil_psp::TxConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// The key exchange's configuration from `[psp]`.
fn kx_config(c: &PspConfig) -> KxConfig {
    KxConfig {
        tx: TxConfig {
            spi: 0,
            version: c.version,
            mode: c.mode,
            crypt_offset_transport: c.crypt_offset,
            crypt_offset_tunnel_v4: c.crypt_offset,
            crypt_offset_tunnel_v6: c.crypt_offset,
            vc: c.vc,
        },
        rotate_every: (c.rotate_seconds > 0).then(|| Duration::from_secs(c.rotate_seconds)),
    }
}

/// Every warning of the key exchange goes through here. Never pass key material: the machine's errors carry none.
fn log_warn(msg: &str) {
    tracing::warn!("{msg}");
}

/// The TLS configurations, built (and so checked) before the daemon changes anything on the system.
pub struct Tls {
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
    peer_name: ServerName<'static>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Loads the certificates and key of `cfg` and builds TLS 1.3-only client and server configurations that
/// require and verify the peer's certificate. Errors name the configuration key (exit code 2).
pub fn tls(cfg: &PspConfig) -> Result<Tls> {
    let bad = |key: &str, why: String| {
        Error::Config(crate::runtime::config::ConfigError {
            key: key.into(),
            reason: why,
        })
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cfg.cert)
        .and_then(|i| i.collect::<std::result::Result<_, _>>())
        .map_err(|e| {
            bad(
                "psp.cert",
                format!("cannot read certificates from {}: {e}", cfg.cert),
            )
        })?;
    if certs.is_empty() {
        return Err(bad("psp.cert", format!("no certificate in {}", cfg.cert)));
    }
    // The key is a secret and the CA decides whom we trust: each read once, checked through its descriptor
    // (crate::runtime::secret_file: root's, the key 0600 or 0400, the CA writable by root only).
    use crate::runtime::secret_file::{read, Level};
    let key_file =
        read(Path::new(&cfg.key), Level::Secret).map_err(|e| bad("psp.key", e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(&key_file.bytes).map_err(|e| {
        bad(
            "psp.key",
            format!(
                "cannot read a private key from {}: {e}",
                crate::runtime::secret_file::shown(Path::new(&cfg.key))
            ),
        )
    })?;
    let mut roots = rustls::RootCertStore::empty();
    let ca_file = read(Path::new(&cfg.peer_ca), Level::Rules)
        .map_err(|e| bad("psp.peer_ca", e.to_string()))?;
    let anchors: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&ca_file.bytes)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| {
            bad(
                "psp.peer_ca",
                format!("cannot read certificates from {}: {e}", cfg.peer_ca),
            )
        })?;
    for c in anchors {
        roots.add(c).map_err(|e| {
            bad(
                "psp.peer_ca",
                format!("{}: not a usable trust anchor: {e}", cfg.peer_ca),
            )
        })?;
    }
    if roots.is_empty() {
        return Err(bad(
            "psp.peer_ca",
            format!("no certificate in {}", cfg.peer_ca),
        ));
    }
    let roots = Arc::new(roots);
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| bad("psp.peer_ca", e.to_string()))?;
    let server = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| Error::Other(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs.clone(), key.clone_key())
        .map_err(|e| bad("psp.key", format!("does not match psp.cert: {e}")))?;
    let client = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| Error::Other(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(|e| bad("psp.key", format!("does not match psp.cert: {e}")))?;
    let peer_name = ServerName::try_from(cfg.peer_name.clone())
        .map_err(|e| bad("psp.peer_name", e.to_string()))?;
    Ok(Tls {
        server: Arc::new(server),
        client: Arc::new(client),
        peer_name,
    })
}

/// `netveil keygen --name NAME --out DIR`: a P-256 key and a self-signed certificate for `NAME` (DNS name),
/// written as `DIR/NAME.key` (mode 0600) and `DIR/NAME.crt`. Existing files are not overwritten. Returns the
/// paths (certificate, key).
pub fn keygen(name: &str, dir: &Path) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    if ServerName::try_from(name).is_err() || name.contains('/') {
        return Err(Error::Usage(
            "--name: is not a valid DNS name (value not shown)".into(),
        ));
    }
    let (crt, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    for p in [&crt, &key] {
        if p.exists() {
            return Err(Error::Usage(format!(
                "{} exists; not overwriting it",
                p.display()
            )));
        }
    }
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()])
        .map_err(|e| Error::Usage(format!("--name: {e}")))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let kp = rcgen::KeyPair::generate().map_err(|e| Error::Other(e.to_string()))?;
    let cert = params
        .self_signed(&kp)
        .map_err(|e| Error::Other(e.to_string()))?;
    std::fs::create_dir_all(dir).map_err(Error::io(format!("cannot create {}", dir.display())))?;
    let key_pem = Zeroizing::new(kp.serialize_pem());
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key)
            .map_err(Error::io(format!("cannot create {}", key.display())))?;
        f.write_all(key_pem.as_bytes())
            .map_err(Error::io(format!("cannot write {}", key.display())))?;
    }
    std::fs::write(&crt, cert.pem())
        .map_err(Error::io(format!("cannot write {}", crt.display())))?;
    Ok((crt, key))
}

/// The whole TLS handshake must finish within this time.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);

/// Whether this side connects (the lower outer address) rather than listens.
pub fn is_initiator(cfg: &PspConfig) -> bool {
    cfg.local < cfg.remote
}

/// Binds the key-exchange listener on our outer address (with `mark`, which accepted connections inherit).
pub fn listen(cfg: &PspConfig, mark: u32) -> Result<TcpListener> {
    let l = TcpListener::bind(SocketAddr::new(cfg.local, cfg.control_port)).map_err(Error::io(
        format!(
            "cannot listen on {} port {} (psp.control_port)",
            cfg.local, cfg.control_port
        ),
    ))?;
    netveil_io::os::set_mark(&l, mark)
        .map_err(Error::io("SO_MARK on the PSP key-exchange socket"))?;
    Ok(l)
}

/// PSP's key exchange as a driver beside the IP engine: its thread, its sockets (the listener, bound here, or
/// the connections it makes) and its clock; the data plane changes only through the engine's port.
pub struct PspDriver {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Engine for PspDriver {
    fn tick(&mut self) -> bool {
        !self.thread.is_finished()
    }

    fn stop(self: Box<Self>, _undo: &mut Undo, _down: bool) {
        self.stop.store(true, Relaxed);
        let _ = self.thread.join();
    }
}

/// PSP's key exchange as an attached driver of the IP engine: it reads the engine's `[psp]` section (see
/// [`crate::runtime::registry::AttachedDriver`]).
pub struct PspKx;

impl PspKx {
    /// The `[psp]` section of `section` (`None`: another engine's sections, or no `[psp]`).
    fn psp(section: &dyn crate::runtime::registry::Section) -> Option<(&PspConfig, u32)> {
        let c = section
            .as_any()
            .downcast_ref::<crate::engines::ip::config::Config>()?;
        Some((c.psp.as_ref()?, c.interface.socket_mark()))
    }
}

impl crate::runtime::registry::AttachedDriver for PspKx {
    fn name(&self) -> &'static str {
        "psp-kx"
    }

    fn check(&self, section: &dyn crate::runtime::registry::Section) -> Result<()> {
        // The certificates and key are read and checked too.
        match Self::psp(section) {
            Some((p, _)) => tls(p).map(drop),
            None => Ok(()),
        }
    }

    fn prepare(
        &self,
        section: &dyn crate::runtime::registry::Section,
    ) -> Result<Option<Box<dyn crate::runtime::registry::DriverConfig>>> {
        let Some((cfg, mark)) = Self::psp(section) else {
            return Ok(None);
        };
        let tls = tls(cfg)?;
        Ok(Some(Box::new(PspDriverConfig {
            cfg: cfg.clone(),
            tls,
            mark,
        })))
    }
}

/// PSP's key exchange as the registry starts it: `[psp]`, its TLS certificates and key (read and checked before
/// the IP engine was prepared) and the daemon's socket mark.
pub struct PspDriverConfig {
    pub cfg: PspConfig,
    pub tls: Tls,
    pub mark: u32,
}

impl crate::runtime::registry::DriverConfig for PspDriverConfig {
    fn start(
        self: Box<Self>,
        port: Arc<dyn SaPort>,
    ) -> Result<Box<dyn crate::runtime::engine::Engine>> {
        let PspDriverConfig { cfg, tls, mark } = *self;
        Ok(Box::new(start_driver(cfg, tls, port, mark)?))
    }
}

/// Starts PSP's key exchange with the `[psp]` peer of `cfg` (`tls`: its checked TLS configurations), changing the
/// data plane through `port` (the IP engine's, which carries PSP); its sockets carry `mark`. The responder (the
/// higher outer address) binds its listener here: a port taken fails the start.
pub fn start_driver(
    cfg: PspConfig,
    tls: Tls,
    port: Arc<dyn SaPort>,
    mark: u32,
) -> Result<PspDriver> {
    let st = port
        .psp_kx_state()
        .ok_or_else(|| Error::Other("the IP engine carries no PSP ([psp] section)".into()))?;
    let kx = KeyExchange::new(kx_config(&cfg), Instant::now()).map_err(|e| {
        Error::Config(crate::runtime::config::ConfigError {
            key: "psp.crypt_offset".into(),
            reason: e.to_string(),
        })
    })?;
    let listener = if is_initiator(&cfg) {
        None
    } else {
        Some(listen(&cfg, mark)?)
    };
    let stop = Arc::new(AtomicBool::new(false));
    let cx = Ctx { cfg, port, st };
    let thread = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("nv-psp".into())
            .spawn(move || run(&cx, kx, &tls, listener, mark, &stop))
            .map_err(Error::io("thread"))?
    };
    Ok(PspDriver { stop, thread })
}

/// What the driver works with: the `[psp]` section, the engine's port, and the key-exchange state that the
/// engine's `status` and `rotate` answers share.
struct Ctx {
    cfg: PspConfig,
    port: Arc<dyn SaPort>,
    st: Arc<PspKxState>,
}

impl Ctx {
    /// Applies the key exchange's events: the transmit SA (through the port), the counters. Returns the protocol
    /// error, if any (after applying the other events).
    fn apply(&self, kx: &mut KeyExchange) -> std::result::Result<(), String> {
        let mut failed = None;
        while let Some(e) = kx.poll_event() {
            match e {
                Event::AssocSent { spi, generation } => {
                    self.st.rx_spi.store(spi, Relaxed);
                    self.st.assoc_sent.fetch_add(1, Relaxed);
                    tracing::info!(
                        "psp {}: association sent: receive SPI {spi:#010x} (generation {generation})",
                        self.cfg.remote
                    );
                }
                Event::InstallTx(sa) => {
                    let spi = sa.config().spi;
                    match self.port.psp_install_tx(sa) {
                        Ok(()) => {
                            self.st.assoc_received.fetch_add(1, Relaxed);
                            tracing::info!(
                                "psp {}: the peer's association installed: transmit SPI {spi:#010x}",
                                self.cfg.remote
                            );
                        }
                        Err(e) => failed = failed.or(Some(e)),
                    }
                }
                Event::Rotated { generation } => {
                    self.st.rotations.fetch_add(1, Relaxed);
                    tracing::info!(
                        "psp {}: master keys rotated (generation {generation})",
                        self.cfg.remote
                    );
                }
                Event::Failed(e) => failed = failed.or(Some(e.to_string())),
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

/// Runs the key exchange until `stop`: connects or accepts, associates, rotates, re-associates.
fn run(
    cx: &Ctx,
    mut kx: KeyExchange,
    tls: &Tls,
    listener: Option<TcpListener>,
    mark: u32,
    stop: &AtomicBool,
) {
    let peer = SocketAddr::new(cx.cfg.remote, cx.cfg.control_port);
    let me = SocketAddr::new(cx.cfg.local, cx.cfg.control_port);
    if let Some(l) = &listener {
        let _ = l.set_nonblocking(true);
    }
    let mut rot = Rotation::new(cx);
    while !stop.load(Relaxed) {
        // Rotation requests and the timer, also while disconnected (nothing to send then).
        if let Err(e) = rot.service(cx, &mut kx) {
            log_warn(&format!("PSP key exchange: {e}"));
        }
        let stream = match &listener {
            // From our key-exchange port, marked (the fail-closed filters let it out; in transport mode it bypasses
            // the TUN), SO_LINGER 0 (no TIME_WAIT on the fixed ports).
            None => {
                match netveil_io::os::tcp_connect_from(me, peer, mark, Duration::from_secs(1)) {
                    Ok(s) => s,
                    Err(_) => {
                        sleep_unless(stop, Duration::from_secs(1));
                        continue;
                    }
                }
            }
            Some(listener) => match listener.accept() {
                // Only the configured peer, from the key-exchange port, may connect.
                Ok((s, from)) if from == peer => {
                    let _ = s.set_nonblocking(false);
                    let _ = netveil_io::os::set_linger_zero(&s);
                    s
                }
                Ok(_) => continue,
                Err(_) => {
                    sleep_unless(stop, Duration::from_millis(100));
                    continue;
                }
            },
        };
        let initiator = listener.is_none();
        let mut link = Link {
            cx,
            kx: &mut kx,
            rot: &mut rot,
        };
        let r = if initiator {
            rustls::ClientConnection::new(tls.client.clone(), tls.peer_name.clone())
                .map_err(|e| e.to_string())
                .and_then(|c| link.session(rustls::StreamOwned::new(c, stream), stop))
        } else {
            rustls::ServerConnection::new(tls.server.clone())
                .map_err(|e| e.to_string())
                .and_then(|c| {
                    let mut s = rustls::StreamOwned::new(c, stream);
                    handshake(&mut s.conn, &mut s.sock)?;
                    check_client_name(&s.conn, &tls.peer_name)?;
                    link.session(s, stop)
                })
        };
        if cx.st.connected.swap(false, Relaxed) {
            tracing::info!("psp {peer}: key exchange disconnected");
        }
        kx.disconnected();
        // Events the machine queued before the connection ended (a rotation) still count.
        let r = r.and(cx.apply(&mut kx));
        if let Err(e) = r {
            log_warn(&format!("PSP key exchange with {peer}: {e}"));
            sleep_unless(stop, Duration::from_secs(1));
        }
    }
}

fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let end = Instant::now() + d;
    while !stop.load(Relaxed) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Rotation requests (`netveil rotate`) seen so far.
struct Rotation {
    seen: u64,
}

impl Rotation {
    fn new(cx: &Ctx) -> Self {
        Rotation {
            seen: cx.st.rotate_requests.load(Relaxed),
        }
    }

    /// Rotates on a new request, or when the machine's timer is due (the device lock is taken only then), and
    /// applies the events.
    fn service(&mut self, cx: &Ctx, kx: &mut KeyExchange) -> std::result::Result<(), String> {
        let now = Instant::now();
        let req = cx.st.rotate_requests.load(Relaxed);
        if req != self.seen {
            self.seen = req;
            cx.port.psp_rx(&mut |d| kx.rotate(now, d))?;
        } else if kx.poll_timeout().is_some_and(|t| now >= t) {
            cx.port.psp_rx(&mut |d| kx.handle_timeout(now, d))?;
        }
        cx.apply(kx)
    }
}

fn handshake<C, D>(conn: &mut C, sock: &mut TcpStream) -> std::result::Result<(), String>
where
    C: core::ops::DerefMut<Target = rustls::ConnectionCommon<D>>,
    D: rustls::SideData,
{
    let deadline = Instant::now() + HANDSHAKE_DEADLINE;
    while conn.is_handshaking() {
        // Every read waits at most until the deadline of the whole handshake.
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "TLS handshake: not finished within {} s",
                HANDSHAKE_DEADLINE.as_secs()
            ));
        }
        sock.set_read_timeout(Some(left.min(Duration::from_secs(1))))
            .map_err(|e| e.to_string())?;
        match conn.complete_io(sock) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(format!("TLS handshake: {e}")),
        }
    }
    Ok(())
}

/// The server side checks that the client's (already chain-verified) certificate names the configured peer.
fn check_client_name(
    conn: &rustls::ServerConnection,
    name: &ServerName<'static>,
) -> std::result::Result<(), String> {
    let der = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or("the peer sent no certificate")?;
    let ee =
        webpki::EndEntityCert::try_from(der).map_err(|e| format!("peer certificate: {e:?}"))?;
    ee.verify_is_valid_for_subject_name(name)
        .map_err(|_| format!("the peer's certificate is not for {}", name.to_str()))
}

/// One connection's plumbing: the driver's context, the machine and the rotation requests.
struct Link<'a> {
    cx: &'a Ctx,
    kx: &'a mut KeyExchange,
    rot: &'a mut Rotation,
}

impl Link<'_> {
    /// One connected session: moves bytes between the TLS connection and the machine until the connection ends,
    /// the machine reports a protocol error, or `stop`.
    fn session<C, D>(
        &mut self,
        mut s: rustls::StreamOwned<C, TcpStream>,
        stop: &AtomicBool,
    ) -> std::result::Result<(), String>
    where
        C: core::ops::DerefMut<Target = rustls::ConnectionCommon<D>>,
        D: rustls::SideData,
    {
        handshake(&mut s.conn, &mut s.sock)?;
        s.sock
            .set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(|e| e.to_string())?;
        self.cx.st.connected.store(true, Relaxed);
        tracing::info!(
            "psp {}: key exchange connected ({}, TLS 1.3, the peer's certificate is for {})",
            self.cx.cfg.remote,
            s.conn
                .negotiated_cipher_suite()
                .map_or("?".into(), |c| format!("{:?}", c.suite())),
            self.cx.cfg.peer_name
        );
        let kx = &mut *self.kx;
        let now = Instant::now();
        self.cx.port.psp_rx(&mut |d| kx.connected(now, d))?;
        self.exchange(&mut s)?;
        let mut chunk = Zeroizing::new([0u8; 256]);
        while !stop.load(Relaxed) {
            self.rot.service(self.cx, self.kx)?;
            self.exchange(&mut s)?;
            match s.read(&mut chunk[..]) {
                Ok(0) => return Err("the peer closed the connection".into()),
                Ok(n) => self.kx.handle_input(Instant::now(), &chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e.to_string()),
            }
            self.exchange(&mut s)?;
        }
        s.conn.send_close_notify();
        let _ = s.flush();
        Ok(())
    }

    /// Applies the machine's events (a protocol error ends the session), then writes what it has to send.
    fn exchange<S: Write>(&mut self, s: &mut S) -> std::result::Result<(), String> {
        self.cx.apply(self.kx)?;
        let mut any = false;
        while let Some(m) = self.kx.poll_transmit() {
            s.write_all(&m).map_err(|e| e.to_string())?;
            any = true;
        }
        if any {
            s.flush().map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
