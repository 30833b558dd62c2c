//! PSP in the IP engine: the device (receive SAs), the transmit SA and the receive socket's filter, which the data
//! plane reads per packet without a lock and PSP's key-exchange driver ([`crate::drivers::psp_kx`]) changes through the
//! engine's typed port ([`crate::runtime::sa_port::SaPort::psp_rx`], [`crate::runtime::sa_port::SaPort::psp_install_tx`]).

use crate::engines::ip::config::PspConfig;
use crate::runtime::sa_port::PspKxState;
use arc_swap::ArcSwapOption;
use netveil_psp::{Device, Mode, Stats, TxSa};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

/// The PSP state of the data plane, and the key exchange's state its answers show.
pub struct PspState {
    pub cfg: PspConfig,
    pub device: RwLock<Device>,
    /// The device's receive side for the data plane: decapsulates without the device's lock.
    pub rx: Arc<netveil_psp::Receiver>,
    /// The device's counters (the same `Arc` as the device's `stats`): the transmit path counts without taking
    /// the device's lock.
    pub stats: Arc<Stats>,
    /// The transmit SA to the peer (installed from the peer's association), with its key schedule. Replaced by
    /// the key exchange, loaded per packet without a lock; its IV counter is atomic, so threads may share it.
    pub tx: ArcSwapOption<TxSa>,
    /// The SPI of `tx` (0: none yet), for `status`.
    pub tx_spi: AtomicU32,
    /// The key exchange's state (connection, associations, rotations), shared with its driver.
    pub kx: Arc<PspKxState>,
    /// Outbound packets dropped because no transmit SA is installed yet.
    pub tx_no_sa: AtomicU64,
    /// A storm of authentication failures is on: the socket filter refuses IVs far above the windows.
    pub storm: AtomicBool,
    /// The tunnel MTU (for the longest single datagram, see [`crate::engines::ip::filters::single_datagram_max`]).
    pub mtu: u16,
    /// The PSP receive socket, whose socket filter passes only the device's SPIs (and IVs not left of the window).
    rx_socket: Mutex<
        Option<(
            Arc<netveil_io::UdpSocket>,
            Option<netveil_io::filter::Program>,
        )>,
    >,
}

impl PspState {
    pub fn new(cfg: PspConfig) -> PspState {
        let mut d = Device::new(Box::new(netveil_crypto::rand::OsRng));
        d.set_replay_window(cfg.replay_window);
        PspState {
            cfg,
            stats: d.stats.clone(),
            rx: d.receiver(),
            device: RwLock::new(d),
            tx: ArcSwapOption::empty(),
            tx_spi: AtomicU32::new(0),
            kx: Arc::new(PspKxState::default()),
            tx_no_sa: AtomicU64::new(0),
            rx_socket: Mutex::new(None),
            storm: AtomicBool::new(false),
            mtu: crate::engines::ip::config::DEFAULT_MTU,
        }
    }

    /// The socket PSP packets arrive on: from now on its filter follows the device's receive SAs.
    pub fn set_rx_socket(&self, s: Arc<netveil_io::UdpSocket>) {
        if let Ok(mut g) = self.rx_socket.lock() {
            *g = Some((s, None));
        }
        self.refresh_filter_now();
    }

    /// Re-attaches the receive socket's filter if the device's SPIs or replay floors changed.
    pub fn refresh_filter_now(&self) {
        if let Ok(d) = self.device.read() {
            self.refresh_filter(&d);
        }
    }

    /// As [`PspState::refresh_filter_now`], for a caller that holds the device. Called before a new receive SPI is
    /// handed to the peer, so the filter never refuses the peer's first packets with it.
    fn refresh_filter(&self, dev: &Device) {
        let Ok(mut g) = self.rx_socket.lock() else {
            return;
        };
        let Some((sock, installed)) = g.as_mut() else {
            return;
        };
        let storm = self.storm.load(Relaxed);
        let rules: Vec<netveil_io::filter::SpiRule> = dev
            .rx_windows()
            .into_iter()
            .map(|(spi, w)| crate::engines::ip::filters::window_rule(spi, w, storm))
            .collect();
        let p = netveil_io::filter::spi_filter_gro(
            netveil_io::filter::Layout::PspInUdp,
            &rules,
            crate::engines::ip::filters::single_datagram_max(self.mtu),
        );
        if p != *installed {
            match sock.attach_filter(p.as_ref()) {
                Ok(()) => *installed = p,
                Err(e) => tracing::warn!("cannot attach the PSP socket filter: {e}"),
            }
        }
    }

    /// Runs `f` on the device under its write lock (the data plane goes on through the published receive SAs),
    /// then refreshes the socket filter under the same lock: before anything the call queued (a new SPI) is sent
    /// to the peer.
    pub fn with_device(&self, f: &mut dyn FnMut(&mut Device)) -> Result<(), String> {
        let mut d = self.device.write().map_err(|_| "device lock poisoned")?;
        f(&mut d);
        self.refresh_filter(&d);
        Ok(())
    }

    /// Swaps the transmit SA (read per packet without a lock: packets under way finish with the old one).
    pub fn install_tx(&self, sa: TxSa) {
        let spi = sa.config().spi;
        self.tx.store(Some(Arc::new(sa)));
        self.tx_spi.store(spi, Relaxed);
    }
}

/// Whether the mode of `cfg` is tunnel mode.
pub fn is_tunnel(cfg: &PspConfig) -> bool {
    cfg.mode == Mode::Tunnel
}
