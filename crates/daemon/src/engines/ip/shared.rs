//! What the IP engine's data-plane threads share ([`Shared`]), the record of a processed outbound packet
//! ([`TxRecord`]) and the buffer sizes.

use crate::engines::ip::config::{Config, ConfigError};
use crate::engines::ip::db::{Db, Installed};
use crate::engines::ip::drop::Drop;
use crate::engines::ip::filters::FilterSock;
use crate::engines::ip::psp_state::PspState;
use netveil_sa::counters::DropCounters;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Instant;

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
    /// The SAs and policies, changed at runtime (see [`crate::engines::ip::db`]).
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
    /// A storm of authentication failures is on (see [`crate::engines::ip::filters::STORM_AUTH_FAILURES_PER_S`]).
    pub storm: AtomicBool,
}

/// The record of a processed outbound packet: how it leaves, with what the batch sender needs (kept beside the
/// packet buffers, one per buffer, so that nothing is looked up or parsed again).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TxRecord {
    /// The IPv4 packet it now is, on the raw IPv4 socket.
    Raw4,
    /// The IPv6 packet it now is, on the raw IPv6 socket.
    Raw6,
    /// ESP in UDP: the buffer holds the datagram's payload, for a NAT-T socket.
    NatT(Datagram),
    /// PSP: the buffer holds the datagram's payload, for a PSP socket (the source port picks one of the pool).
    Psp(Datagram),
}

/// Where a datagram whose payload a buffer holds goes: from `src`, port `sport`, to `to`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Datagram {
    pub src: std::net::IpAddr,
    pub sport: u16,
    pub to: std::net::SocketAddr,
}

impl TxRecord {
    /// The raw record of an IP packet of this family.
    pub fn raw(v6: bool) -> TxRecord {
        if v6 {
            TxRecord::Raw6
        } else {
            TxRecord::Raw4
        }
    }

    /// The datagram, for the UDP records.
    pub fn datagram(&self) -> Option<&Datagram> {
        match self {
            TxRecord::NatT(d) | TxRecord::Psp(d) => Some(d),
            TxRecord::Raw4 | TxRecord::Raw6 => None,
        }
    }

    /// Which sender takes it: raw IPv4, raw IPv6, NAT-T, PSP.
    pub(crate) fn class(&self) -> u8 {
        match self {
            TxRecord::Raw4 => 0,
            TxRecord::Raw6 => 1,
            TxRecord::NatT(_) => 2,
            TxRecord::Psp(_) => 3,
        }
    }
}

impl Shared {
    pub fn new(config: Config) -> std::result::Result<Shared, ConfigError> {
        let (sad, at) = config.build_sad(0)?;
        Ok(Shared::with_sas(config, Installed::of(&sad, &at), None))
    }

    /// With SAs built elsewhere (in the configuration's order), with the stores that made their sequence
    /// reservations and receive floors (see [`crate::runtime::state::start`]).
    pub fn with_sas(
        config: Config,
        sas: Vec<Installed>,
        seq: Option<(
            crate::runtime::state::SeqStore,
            crate::runtime::state::RxStore,
        )>,
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
}
