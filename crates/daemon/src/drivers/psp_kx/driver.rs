//! The driver: its thread, the TCP connection to the peer (initiator or listener), the sans-I/O machine's
//! events applied through the port, rotations.

use super::tls::{check_client_name, handshake, Tls};
use crate::engines::ip::config::PspConfig;
use crate::runtime::engine::{Engine, Undo};
use crate::runtime::sa_port::{PspKxState, SaPort};
use crate::{Error, Result};
use netveil_psp::kx::{Event, KeyExchange, KxConfig};
use netveil_psp::TxConfig;
use std::io::Read;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// The key exchange's configuration from `[psp]`.
pub(super) fn kx_config(c: &PspConfig) -> KxConfig {
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
pub(super) fn log_warn(msg: &str) {
    tracing::warn!("{msg}");
}

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

/// Starts PSP's key exchange with the `[psp]` peer of `cfg` (`tls`: its checked TLS configurations), changing the
/// data plane through `port` (the IP engine's, which carries PSP); its sockets carry `mark`. The responder (the
/// higher outer address) binds its listener here: a port taken fails the start.
pub fn start_driver(
    cfg: PspConfig,
    tls: Tls,
    port: Arc<dyn SaPort>,
    mark: u32,
) -> Result<PspDriver> {
    let st = port.psp_kx_state().ok_or_else(|| Error::Driver {
        driver: "PSP key exchange",
        cause: "the IP engine carries no PSP ([psp] section)".into(),
    })?;
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
pub(super) struct Ctx {
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
pub(super) fn run(
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

pub(super) fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let end = Instant::now() + d;
    while !stop.load(Relaxed) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Rotation requests (`netveil rotate`) seen so far.
pub(super) struct Rotation {
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

/// One connection's plumbing: the driver's context, the machine and the rotation requests.
pub(super) struct Link<'a> {
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
