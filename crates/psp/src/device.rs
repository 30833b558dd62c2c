//! A PSP device, modelled on the Linux kernel's (`Documentation/networking/psp.rst`) and the specification's.
//!
//! - Two 256-bit master keys and a 7-bit generation. The SPI's top bit (the *phase*) selects the master key
//!   that derives the SA key, so a receiver needs no per-SA key storage in principle.
//! - [`Device::rx_assoc`] allocates a receive SPI under the active master key (low 31 bits non-zero, counted
//!   up, never reused under one master key) and hands out the derived key for the peer's transmit side. The
//!   derived key's schedule is built once and cached with the SA; per packet nothing is derived.
//! - [`Device::rotate`] flips the phase: the inactive master key (the one that derived SAs of two rotations ago)
//!   is replaced by a fresh random key and becomes active; its SAs are forgotten, so they no longer decrypt.
//!   SAs made before the latest rotation keep working, which is what lets peers re-associate without loss.
//! - [`Device::decapsulate`] finds the SA by SPI, verifies and decrypts, and keeps the specification's
//!   counters ([`Stats`]). Unknown SPIs are dropped before any cryptography. Data-plane threads do the same
//!   through a [`Receiver`] ([`Device::receiver`]): a snapshot of the receive SAs that every change of the
//!   device republishes atomically, so receiving takes no lock while the key exchange changes the device.
//! - netveil's extension: an optional receive-side replay check on the strictly increasing IV (PSP itself
//!   leaves replay protection to TCP). Only meaningful where the sender keeps one IV counter per SA, as
//!   [`crate::TxSa`] does.
//!
//! The device does no I/O and reads no clock; new master keys are drawn from the generator its creator gave it
//! ([`Device::new`], [`Device::with_master_keys`]: the OS generator in the daemon, a seeded one in tests), or
//! passed in ([`Device::rotate_with`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use netveil_crypto::rand::Rng;
use netveil_sa::replay::ReplayWindow;
use netveil_wire::PacketBuf;
use zeroize::Zeroizing;

use crate::kdf;
use crate::xform::{is_tunnel, locate, locate_payload, peek, Decapsulated, Located, RxSa};
use crate::{Error, Version};

/// The largest SPI value of a phase (low 31 bits).
const SPI_MAX: u32 = 0x7fff_ffff;

/// The specification's device counters (names as in the kernel's `psp` netlink family), plus netveil's
/// breakdown of the drops. Atomic: read while the data plane runs.
#[derive(Debug, Default)]
pub struct Stats {
    /// Packets decrypted and authenticated.
    pub rx_packets: AtomicU64,
    /// Bytes of those packets after decapsulation.
    pub rx_bytes: AtomicU64,
    /// Packets whose ICV did not verify.
    pub rx_auth_fail: AtomicU64,
    /// Packets with length or framing errors.
    pub rx_error: AtomicU64,
    /// Packets with other errors: unknown or stale SPI, unsupported version, replayed IV.
    pub rx_bad: AtomicU64,
    /// Of `rx_bad`: SPIs this device did not hand out, or whose master key has been rotated away.
    pub rx_unknown_spi: AtomicU64,
    /// Of `rx_bad`: IVs seen before or left of the window (netveil's replay check).
    pub rx_replay: AtomicU64,
    /// Packets encapsulated.
    pub tx_packets: AtomicU64,
    /// Bytes of those packets before encapsulation.
    pub tx_bytes: AtomicU64,
    /// Packets that could not be encapsulated.
    pub tx_error: AtomicU64,
}

/// A copy of [`Stats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_auth_fail: u64,
    pub rx_error: u64,
    pub rx_bad: u64,
    pub rx_unknown_spi: u64,
    pub rx_replay: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_error: u64,
}

impl Stats {
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            rx_packets: self.rx_packets.load(Relaxed),
            rx_bytes: self.rx_bytes.load(Relaxed),
            rx_auth_fail: self.rx_auth_fail.load(Relaxed),
            rx_error: self.rx_error.load(Relaxed),
            rx_bad: self.rx_bad.load(Relaxed),
            rx_unknown_spi: self.rx_unknown_spi.load(Relaxed),
            rx_replay: self.rx_replay.load(Relaxed),
            tx_packets: self.tx_packets.load(Relaxed),
            tx_bytes: self.tx_bytes.load(Relaxed),
            tx_error: self.tx_error.load(Relaxed),
        }
    }

    /// Counts an encapsulated packet of `bytes` bytes (before encapsulation), or a failure.
    pub fn count_tx(&self, r: Result<usize, Error>) {
        match r {
            Ok(bytes) => {
                self.tx_packets.fetch_add(1, Relaxed);
                self.tx_bytes.fetch_add(bytes as u64, Relaxed);
            }
            Err(_) => {
                self.tx_error.fetch_add(1, Relaxed);
            }
        }
    }
}

netveil_sa::drop_reasons! {
    /// Why the device dropped a received packet: the transform's reasons ([`Error`], under its names) and the
    /// device's own.
    pub enum RxDrop {
        /// A PSP transform error (malformed, unsupported version, crypt offset, authentication).
        Psp(Error),
        /// No SA with this SPI: never handed out, forgotten, or two rotations old.
        UnknownSpi => "unknown-spi",
        /// The SA exists with another version.
        WrongVersion => "wrong-version",
        /// The IV was seen before or is left of the replay window (netveil's extension).
        Replay => "replay",
    }
}

/// What [`Device::rx_assoc`] hands out: the SPI and key the peer must send with.
pub struct RxAssoc {
    pub spi: u32,
    pub version: Version,
    /// The derived SA key (16 or 32 bytes), zeroized on drop.
    pub key: Zeroizing<Vec<u8>>,
    /// The device generation at allocation.
    pub generation: u8,
}

impl core::fmt::Debug for RxAssoc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RxAssoc")
            .field("spi", &format_args!("{:#010x}", self.spi))
            .field("version", &self.version)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

/// A receive SA held by the device.
struct RxEntry {
    sa: RxSa,
    generation: u8,
    replay: Option<Mutex<ReplayWindow>>,
}

type SpiMap<V> = netveil_sa::spi::SpiMap<u32, V>;

/// A PSP device: master keys, SPI allocation, the receive SA table and the counters.
pub struct Device {
    master: [Zeroizing<[u8; 32]>; 2],
    /// The next SPI counter (low 31 bits) under each master key.
    next_spi: [u32; 2],
    /// The active master key (the phase bit of new SPIs).
    phase: u8,
    generation: u8,
    /// Replay window size for new receive SAs (0: no check).
    replay_window: u32,
    /// Where fresh master keys come from.
    rng: Box<dyn Rng>,
    rx: SpiMap<Arc<RxEntry>>,
    /// What data-plane threads decapsulate with: a snapshot of `rx`, republished by every change of it.
    receiver: Arc<Receiver>,
    /// The counters, shared: a transmit path counts through a clone of this `Arc` without holding the device.
    pub stats: Arc<Stats>,
}

/// The receive side of a [`Device`] for data-plane threads ([`Device::receiver`]): it decapsulates against a
/// snapshot of the device's receive SAs, which the device swaps atomically on every association, rotation and
/// forgotten SA, so no lock is taken per packet. Counts into the device's [`Stats`].
pub struct Receiver {
    table: ArcSwap<SpiMap<Arc<RxEntry>>>,
    stats: Arc<Stats>,
}

impl core::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Receiver")
            .field("rx_sas", &self.table.load().len())
            .finish_non_exhaustive()
    }
}

impl core::fmt::Debug for Device {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Device")
            .field("phase", &self.phase)
            .field("generation", &self.generation)
            .field("rx_sas", &self.rx.len())
            .finish_non_exhaustive()
    }
}

fn random_key(rng: &mut dyn Rng) -> Zeroizing<[u8; 32]> {
    let mut k = Zeroizing::new([0u8; 32]);
    rng.fill(&mut k[..]);
    k
}

impl Device {
    /// A device with two fresh master keys drawn from `rng`, generation 0, phase 0. The device keeps `rng` for
    /// the master keys of [`Device::rotate`].
    pub fn new(mut rng: Box<dyn Rng>) -> Self {
        let (k0, k1) = (random_key(&mut *rng), random_key(&mut *rng));
        Self::with_master_keys(k0, k1, rng)
    }

    /// A device with the given master keys (for tests and reference vectors); `rng` draws the master keys of
    /// [`Device::rotate`].
    pub fn with_master_keys(
        key0: Zeroizing<[u8; 32]>,
        key1: Zeroizing<[u8; 32]>,
        rng: Box<dyn Rng>,
    ) -> Self {
        let stats = Arc::<Stats>::default();
        Device {
            rng,
            master: [key0, key1],
            next_spi: [1, 1],
            phase: 0,
            generation: 0,
            replay_window: 0,
            rx: SpiMap::default(),
            receiver: Arc::new(Receiver {
                table: ArcSwap::from_pointee(SpiMap::default()),
                stats: stats.clone(),
            }),
            stats,
        }
    }

    /// The receive side for data-plane threads: follows every later change of this device.
    pub fn receiver(&self) -> Arc<Receiver> {
        self.receiver.clone()
    }

    /// Publishes the receive SAs to the [`Receiver`] (after every change of `rx`).
    fn publish(&self) {
        self.receiver.table.store(Arc::new(self.rx.clone()));
    }

    /// Enables netveil's IV replay check with a window of `size` packets (0 disables) for SAs made from now on.
    pub fn set_replay_window(&mut self, size: u32) {
        self.replay_window = size;
    }

    /// The 7-bit generation: incremented (mod 128) by every rotation.
    pub fn generation(&self) -> u8 {
        self.generation
    }

    /// The phase bit of SPIs allocated now.
    pub fn phase(&self) -> u8 {
        self.phase
    }

    /// The number of receive SAs held.
    pub fn rx_sa_count(&self) -> usize {
        self.rx.len()
    }

    /// The SPIs of the receive SAs held, with their generation, sorted.
    pub fn rx_spis(&self) -> Vec<(u32, u8)> {
        let mut v: Vec<_> = self.rx.iter().map(|(&s, e)| (s, e.generation)).collect();
        v.sort_unstable();
        v
    }

    /// For a socket filter in front of the device: every receive SPI and, with the replay window, the window's
    /// highest IV accepted and its size (`None` without the window).
    pub fn rx_windows(&self) -> Vec<(u32, Option<(u64, u32)>)> {
        let mut v: Vec<_> = self
            .rx
            .iter()
            .map(|(&spi, e)| {
                let w = e
                    .replay
                    .as_ref()
                    .and_then(|w| w.lock().ok().map(|w| (w.top(), w.size())));
                (spi, w)
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// Allocates a receive SPI under the active master key, derives its key, builds and keeps the SA, and
    /// returns what the peer needs. `Err(NoRoom)` when the phase's 2^31 - 1 SPIs are used up (rotate first).
    pub fn rx_assoc(&mut self, version: Version) -> Result<RxAssoc, Error> {
        let p = self.phase as usize;
        let n = self.next_spi[p];
        if n == 0 || n > SPI_MAX {
            return Err(Error::NoRoom);
        }
        self.next_spi[p] = n + 1;
        let spi = (p as u32) << 31 | n;
        let key = kdf::derive(&self.master[p], spi, version);
        let sa = RxSa::with_key(&key, spi, version)?;
        let replay = (self.replay_window > 0)
            .then(|| Mutex::new(ReplayWindow::new(self.replay_window, true)));
        self.rx.insert(
            spi,
            Arc::new(RxEntry {
                sa,
                generation: self.generation,
                replay,
            }),
        );
        self.publish();
        Ok(RxAssoc {
            spi,
            version,
            key,
            generation: self.generation,
        })
    }

    /// Forgets one receive SA (e.g. when its peer is gone).
    pub fn forget(&mut self, spi: u32) -> bool {
        let gone = self.rx.remove(&spi).is_some();
        if gone {
            self.publish();
        }
        gone
    }

    /// Rotates the master keys: the inactive key is replaced by `fresh` (or a key drawn from the device's
    /// generator) and becomes active, the generation goes up, and the SAs the replaced key derived (two rotations
    /// old) are forgotten.
    pub fn rotate_with(&mut self, fresh: Option<Zeroizing<[u8; 32]>>) {
        let next = 1 - self.phase;
        self.master[next as usize] = match fresh {
            Some(k) => k,
            None => random_key(&mut *self.rng),
        };
        self.next_spi[next as usize] = 1;
        self.rx.retain(|&spi, _| (spi >> 31) as u8 != next);
        self.publish();
        self.phase = next;
        self.generation = (self.generation + 1) & 0x7f;
    }

    /// [`Device::rotate_with`] a key drawn from the device's generator.
    pub fn rotate(&mut self) {
        self.rotate_with(None)
    }

    /// Looks up the SA of a received packet: its SPI and version. The first step of [`Device::decapsulate`],
    /// public so that benchmarks can time it alone.
    pub fn lookup(&self, pkt: &[u8]) -> Result<&RxSa, RxDrop> {
        let (spi, version) = peek(pkt).map_err(RxDrop::Psp)?;
        let e = self.rx.get(&spi).ok_or(RxDrop::UnknownSpi)?;
        if e.sa.version() != version {
            return Err(RxDrop::WrongVersion);
        }
        Ok(&e.sa)
    }

    /// Verifies and decapsulates a received PSP packet in place and counts the outcome. `Err(Psp(NotPsp))`
    /// (not counted) for packets that are not UDP to port 1000. The same as the [`Receiver`]'s.
    pub fn decapsulate(&self, pkt: &mut PacketBuf) -> Result<Decapsulated, RxDrop> {
        self.receiver.decapsulate(pkt)
    }
}

impl Receiver {
    /// Verifies and decapsulates a received PSP packet in place and counts the outcome, as
    /// [`Device::decapsulate`].
    pub fn decapsulate(&self, pkt: &mut PacketBuf) -> Result<Decapsulated, RxDrop> {
        let r = locate(pkt.data())
            .map_err(RxDrop::Psp)
            .and_then(|loc| self.decapsulate_uncounted(pkt, loc));
        self.count(r, pkt)
    }

    /// [`Receiver::decapsulate`] for the payload of a datagram received on port 1000, which `pkt` holds without
    /// its IP and UDP headers (a datagram of a coalesced receive, opened where it lies). Only tunnel mode can be
    /// opened so: a transport-mode packet (the PSP header's next header is not IP) is `Ok(None)`, untouched and
    /// not counted; give it its headers and call [`Receiver::decapsulate`].
    pub fn decapsulate_udp_payload(
        &self,
        pkt: &mut PacketBuf,
    ) -> Result<Option<Decapsulated>, RxDrop> {
        let loc = match locate_payload(pkt.data()) {
            Ok(loc) if !is_tunnel(&loc) => return Ok(None),
            r => r,
        };
        let r = loc
            .map_err(RxDrop::Psp)
            .and_then(|loc| self.decapsulate_uncounted(pkt, loc));
        self.count(r, pkt).map(Some)
    }

    /// Counts the outcome of a decapsulation (`pkt`: what it left).
    fn count(
        &self,
        r: Result<Decapsulated, RxDrop>,
        pkt: &PacketBuf,
    ) -> Result<Decapsulated, RxDrop> {
        let s = &self.stats;
        match r {
            Ok(_) => {
                s.rx_packets.fetch_add(1, Relaxed);
                s.rx_bytes.fetch_add(pkt.len() as u64, Relaxed);
            }
            Err(RxDrop::Psp(Error::NotPsp)) => {}
            Err(RxDrop::Psp(Error::Auth)) => {
                s.rx_auth_fail.fetch_add(1, Relaxed);
            }
            Err(RxDrop::Psp(Error::Malformed | Error::CryptOffset | Error::NoRoom)) => {
                s.rx_error.fetch_add(1, Relaxed);
            }
            Err(RxDrop::UnknownSpi) => {
                s.rx_bad.fetch_add(1, Relaxed);
                s.rx_unknown_spi.fetch_add(1, Relaxed);
            }
            Err(RxDrop::Replay) => {
                s.rx_bad.fetch_add(1, Relaxed);
                s.rx_replay.fetch_add(1, Relaxed);
            }
            Err(RxDrop::Psp(_) | RxDrop::WrongVersion) => {
                s.rx_bad.fetch_add(1, Relaxed);
            }
        }
        r
    }

    /// The header is parsed once (`loc`): the SA lookup and the transform share it.
    fn decapsulate_uncounted(
        &self,
        pkt: &mut PacketBuf,
        loc: Located,
    ) -> Result<Decapsulated, RxDrop> {
        let rx = self.table.load();
        let e = rx.get(&loc.hdr.spi).ok_or(RxDrop::UnknownSpi)?;
        if e.sa.version() != loc.hdr.version {
            return Err(RxDrop::WrongVersion);
        }
        match &e.replay {
            None => e.sa.decapsulate_located(pkt, loc).map_err(RxDrop::Psp),
            Some(w) => {
                // The check before the (costly) decryption rejects most replays cheaply; the window moves only
                // for an authenticated packet. IVs are 64-bit, so the window works on full values.
                if w.lock()
                    .map(|w| w.check_full(loc.hdr.iv).is_err())
                    .unwrap_or(true)
                {
                    return Err(RxDrop::Replay);
                }
                let d = e.sa.decapsulate_located(pkt, loc).map_err(RxDrop::Psp)?;
                let mut w = w.lock().map_err(|_| RxDrop::Replay)?;
                w.update(d.iv).map_err(|_| RxDrop::Replay)?;
                Ok(d)
            }
        }
    }
}
