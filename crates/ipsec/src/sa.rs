//! One IPsec SA: what it protects with (suite, keys), how (protocol, mode, encapsulation), and its state
//! (outbound sequence counter or inbound anti-replay window, lifetime, counters).

use crate::suite::{AhSuite, EspKeys, EspSuite, SuiteError};
use netveil_crypto::rand::Rng;
use netveil_crypto::{IvGen, Mac};
use netveil_sa::counters::SaCounters;
use netveil_sa::lifetime::{Lifetime, LifetimeState};
use netveil_sa::replay::ReplayWindow;
use netveil_sa::seq::SeqCounter;
use std::net::IpAddr;
use std::sync::atomic::{
    AtomicBool, AtomicU16, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Esp,
    Ah,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    Transport,
    /// Tunnel between these outer addresses (both of the same family).
    Tunnel {
        local: IpAddr,
        remote: IpAddr,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Out,
    In,
}

impl Direction {
    /// The other direction.
    pub fn flip(self) -> Direction {
        match self {
            Direction::Out => Direction::In,
            Direction::In => Direction::Out,
        }
    }
}

/// ESP in UDP (RFC 3948): the ports of the outer UDP header of packets this SA sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpEncap {
    pub local_port: u16,
    pub remote_port: u16,
}

/// The suite of an SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suite {
    Esp(EspSuite),
    Ah(AhSuite),
}

/// Everything needed to install an SA.
#[derive(Clone)]
pub struct SaParams {
    pub name: String,
    pub spi: u32,
    pub direction: Direction,
    pub suite: Suite,
    pub mode: Mode,
    /// Encryption key material (with the AEAD salt at the end); empty for AH and NULL.
    pub enc_key: zeroize::Zeroizing<Vec<u8>>,
    /// Integrity key; empty for AEADs.
    pub auth_key: zeroize::Zeroizing<Vec<u8>>,
    pub esn: bool,
    pub replay_window: u32,
    pub lifetime: Lifetime,
    pub encap: Option<UdpEncap>,
    /// ESP TFC padding (RFC 4303 2.7) in tunnel mode: pad the inner packet up to this many bytes. 0 = off.
    pub tfc_pad_to: u16,
    /// The first outbound sequence number (normally 1); for tests of exhaustion.
    pub first_seq: u64,
}

impl core::fmt::Debug for SaParams {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SaParams")
            .field("name", &self.name)
            .field("spi", &format_args!("{:#010x}", self.spi))
            .field("direction", &self.direction)
            .field("suite", &self.suite)
            .field("mode", &self.mode)
            .field("esn", &self.esn)
            .field("encap", &self.encap)
            .finish_non_exhaustive()
    }
}

impl SaParams {
    /// ESP or AH, by the suite.
    pub fn protocol(&self) -> Protocol {
        match self.suite {
            Suite::Esp(_) => Protocol::Esp,
            Suite::Ah(_) => Protocol::Ah,
        }
    }
}

// Built once per SA and never moved per packet: the size difference between the variants does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Keys {
    Esp(EspKeys),
    Ah(Box<dyn Mac>),
}

/// Why an SA could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SaError {
    /// The keys do not fit the suite.
    Suite(SuiteError),
    /// The parameters are of the other direction than the type asked for (an inbound SA's keys are the peer's
    /// sending keys: sealing with them would repeat the peer's nonces).
    Direction,
    /// Shared sequence or replay state of another sequence space (32-bit against ESN's 64-bit).
    SpaceMismatch,
}

impl core::fmt::Display for SaError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SaError::Suite(e) => e.fmt(f),
            SaError::Direction => f.write_str("the SA's direction does not match"),
            SaError::SpaceMismatch => {
                f.write_str("the keys were used with the other sequence-number size (esn)")
            }
        }
    }
}

impl std::error::Error for SaError {}

impl From<SuiteError> for SaError {
    fn from(e: SuiteError) -> Self {
        SaError::Suite(e)
    }
}

/// What both directions of SA have: parameters, key schedule, counters, lifetime. Never built on its own: an SA is an
/// [`OutboundSa`] (which alone has a sequence counter, and so alone can seal) or an [`InboundSa`] (which alone has an
/// anti-replay window, and so alone can open); both dereference to this.
pub struct SaBase {
    pub params: SaParams,
    /// The key schedule, built from `params`' keys when the SA first seals or opens (checked when the SA was
    /// built): an SA that carries no traffic holds no cipher context (about 700 bytes for AES-GCM), which is what
    /// most of a gateway's many negotiated SAs are at any time. Boxed: a pointer in every SA (32 bytes less),
    /// the contexts' handles only in those that carried traffic.
    keys: std::sync::OnceLock<Box<Keys>>,
    pub counters: SaCounters,
    /// Set once a soft lifetime limit or sequence exhaustion says that a rekey is due.
    pub rekey_needed: AtomicBool,
    /// Seconds (of the caller's clock) when the SA was installed.
    pub installed_at: u64,
}

impl SaBase {
    fn build(params: SaParams, now: u64, want: Direction) -> Result<SaBase, SaError> {
        if params.direction != want {
            return Err(SaError::Direction);
        }
        // Built once here so that keys that do not fit are refused now, then dropped (see `keys`).
        drop(Self::schedule(&params)?);
        Ok(SaBase {
            keys: std::sync::OnceLock::new(),
            counters: SaCounters::default(),
            rekey_needed: AtomicBool::new(false),
            installed_at: now,
            params,
        })
    }

    fn schedule(params: &SaParams) -> Result<Keys, SaError> {
        Ok(match params.suite {
            Suite::Esp(s) => Keys::Esp(s.build(&params.enc_key, &params.auth_key)?),
            Suite::Ah(s) => Keys::Ah(s.integ.build(&params.auth_key).map_err(SuiteError::from)?),
        })
    }

    /// The key schedule (built on first use; see `keys`). `None` only if the keys no longer build, which they
    /// did when the SA was built.
    pub(crate) fn keys(&self) -> Option<&Keys> {
        if let Some(k) = self.keys.get() {
            return Some(&**k);
        }
        let k = Self::schedule(&self.params).ok()?;
        // Two threads may build it at once: one wins, the other's is dropped.
        let _ = self.keys.set(Box::new(k));
        self.keys.get().map(|k| &**k)
    }

    /// Whether the key schedule is built (the SA sealed or opened something).
    pub fn keyed(&self) -> bool {
        self.keys.get().is_some()
    }

    pub fn spi(&self) -> u32 {
        self.params.spi
    }
    pub fn protocol(&self) -> Protocol {
        self.params.protocol()
    }

    /// Lifetime state after the traffic so far, at `now`; flags a due rekey.
    pub fn lifetime_state(&self, now: u64) -> LifetimeState {
        let c = &self.counters;
        let st = self.params.lifetime.state(
            c.bytes.load(Relaxed),
            c.packets.load(Relaxed),
            now.saturating_sub(self.installed_at),
        );
        if st != LifetimeState::Ok {
            self.rekey_needed.store(true, Relaxed);
        }
        st
    }
}

/// An installed outbound SA: the only kind that seals ([`crate::esp::encapsulate`], [`crate::ah::encapsulate`] take
/// nothing else). Shared between threads: the sequence counter is lock-free.
pub struct OutboundSa {
    base: SaBase,
    /// Shared with every other SA built with the same keys while the process runs (a replaced or re-added SA
    /// continues the same sequence space: see [`OutboundSa::with_counter`]).
    pub(crate) seq: Arc<SeqCounter>,
    /// IPv4 identification for outer headers this SA builds.
    ip_id: AtomicU16,
    /// CBC IVs: for the CBC suites only (an AES key schedule, about 700 bytes, that AEAD SAs do without).
    pub(crate) ivgen: Option<Box<IvGen>>,
}

impl core::ops::Deref for OutboundSa {
    type Target = SaBase;
    fn deref(&self) -> &SaBase {
        &self.base
    }
}

impl OutboundSa {
    /// An outbound SA whose sequence numbers are bounded only by their space: for offline tools and tests, which
    /// choose their first number (`params.first_seq`) themselves. A daemon with static keys uses
    /// [`OutboundSa::with_reservation`], so that a restart never repeats a number. `now` is the caller's clock in
    /// seconds. `rng` (the caller's: the OS generator in production) keys the CBC IV generator and picks the first
    /// IPv4 identification. Parameters of an inbound SA are refused ([`SaError::Direction`]).
    pub fn new(params: SaParams, now: u64, rng: &mut dyn Rng) -> Result<OutboundSa, SaError> {
        let seq = SeqCounter::new(params.first_seq.max(1), params.esn);
        Self::build(params, now, Arc::new(seq), rng)
    }

    /// An SA that continues the sequence space of another SA with the same keys (`counter`, from
    /// [`OutboundSa::counter`]): an SA replaced by one with the same keys, or removed and added again, goes on
    /// where the other stopped, with no number handed out twice (also to a batch of the other still under way) and
    /// none skipped. Refused if the counter is of the other sequence-number size.
    pub fn with_counter(
        params: SaParams,
        now: u64,
        counter: Arc<SeqCounter>,
        rng: &mut dyn Rng,
    ) -> Result<OutboundSa, SaError> {
        let limit = if params.esn {
            u64::MAX
        } else {
            u64::from(u32::MAX)
        };
        if counter.limit() != limit {
            return Err(SaError::SpaceMismatch);
        }
        Self::build(params, now, counter, rng)
    }

    /// Like [`OutboundSa::new`], for an SA whose sequence numbers may go only up to `reserved` until
    /// [`OutboundSa::reserve_seq`] raises it (the caller keeps the durable high-water mark: see
    /// [`netveil_sa::seq::SeqCounter::reserve_to`]).
    pub fn with_reservation(
        params: SaParams,
        now: u64,
        reserved: u64,
        rng: &mut dyn Rng,
    ) -> Result<OutboundSa, SaError> {
        let seq = SeqCounter::with_reservation(params.first_seq.max(1), params.esn, reserved);
        Self::build(params, now, Arc::new(seq), rng)
    }

    fn build(
        params: SaParams,
        now: u64,
        seq: Arc<SeqCounter>,
        rng: &mut dyn Rng,
    ) -> Result<OutboundSa, SaError> {
        let base = SaBase::build(params, now, Direction::Out)?;
        let id = netveil_crypto::rand::array::<2>(rng);
        // The suites whose keys are EspKeys::CbcHmac (CBC or NULL encryption): NULL needs no IV, but a generator
        // for it costs nothing worth a second rule.
        let ivgen = matches!(base.params.suite, Suite::Esp(s) if !s.enc.is_aead())
            .then(|| Box::new(IvGen::new(rng)));
        Ok(OutboundSa {
            base,
            seq,
            ip_id: AtomicU16::new(u16::from_be_bytes(id)),
            ivgen,
        })
    }

    /// The sequence counter (shared with SAs built later with the same keys: [`OutboundSa::with_counter`]).
    pub fn counter(&self) -> &Arc<SeqCounter> {
        &self.seq
    }

    /// The last sequence number used.
    pub fn seq_last(&self) -> u64 {
        self.seq.last()
    }
    /// The largest sequence number that may be used now (see [`OutboundSa::with_reservation`]).
    pub fn seq_reserved(&self) -> u64 {
        self.seq.reserved()
    }
    /// Raises the reservation to `upto` once it is durable.
    pub fn reserve_seq(&self, upto: u64) {
        self.seq.reserve_to(upto)
    }
    /// The largest number the sequence space has (2^32-1, or 2^64-1 with ESN).
    pub fn seq_limit(&self) -> u64 {
        self.seq.limit()
    }
    /// The first sequence number this SA was built to send.
    pub fn seq_first(&self) -> u64 {
        self.params.first_seq.max(1)
    }

    pub(crate) fn next_ip_id(&self) -> u16 {
        self.ip_id.fetch_add(1, Relaxed)
    }
}

/// An installed inbound SA: the only kind that opens ([`crate::esp::decapsulate`], [`crate::ah::decapsulate`]).
/// Shared between threads: the replay window sits behind a mutex held for its check, the decryption and its update.
pub struct InboundSa {
    base: SaBase,
    /// Shared with every other SA built with the same keys while the process runs ([`InboundSa::with_state`]).
    pub(crate) rx: Arc<RxState>,
}

/// An inbound key's receive state: the anti-replay window, and the highest sequence number it may accept now.
///
/// The ceiling is the counterpart of an outbound SA's sequence reservation: the caller (the daemon) keeps a durable
/// *floor* for the keys and raises the ceiling only once a floor at least that high is on disk, so a receiver that
/// restarts (or crashes) refuses everything it may have accepted before. A packet above the ceiling is dropped
/// after it authenticated, without moving the window ([`crate::Drop::SeqNotReserved`]), and its number is noted
/// ([`RxState::wanted`]) for the caller to reserve.
pub struct RxState {
    pub(crate) window: Mutex<ReplayWindow>,
    ceiling: AtomicU64,
    wanted: AtomicU64,
    /// The caller's way to raise the ceiling at once, durably (see [`RxState::on_ceiling`]).
    reserve: std::sync::OnceLock<Box<ReserveFn>>,
}

/// Given an authenticated sequence number above the ceiling, makes a floor of at least that number durable and
/// returns it (the new ceiling), or `None` if it could not.
pub type ReserveFn = dyn Fn(u64) -> Option<u64> + Send + Sync;

impl RxState {
    /// A fresh window without a ceiling (tests and offline tools).
    pub fn new(size: u32, esn: bool) -> RxState {
        Self::with_floor(size, esn, 0, u64::MAX)
    }

    /// A window that refuses everything up to `floor` and accepts up to `ceiling` until [`RxState::raise`].
    pub fn with_floor(size: u32, esn: bool, floor: u64, ceiling: u64) -> RxState {
        RxState {
            window: Mutex::new(ReplayWindow::with_floor(size.max(64), esn, floor)),
            ceiling: AtomicU64::new(ceiling),
            wanted: AtomicU64::new(0),
            reserve: std::sync::OnceLock::new(),
        }
    }

    /// Raises the ceiling to `upto` (never lowers it). Call only once a floor of `upto` is durable.
    pub fn raise(&self, upto: u64) {
        self.ceiling.fetch_max(upto, Release);
    }

    /// The highest sequence number that may be accepted now.
    pub fn ceiling(&self) -> u64 {
        self.ceiling.load(Acquire)
    }

    /// The highest authenticated sequence number refused because it was above the ceiling (0: none).
    pub fn wanted(&self) -> u64 {
        self.wanted.load(Relaxed)
    }

    /// The highest sequence number accepted.
    pub fn top(&self) -> u64 {
        self.window.lock().map(|w| w.top()).unwrap_or(0)
    }

    /// Whether the window's sequence numbers are 64-bit.
    pub fn esn(&self) -> bool {
        self.window.lock().map(|w| w.esn()).unwrap_or(false)
    }

    /// After the ICV verified: whether `seq` is at most the ceiling (else it is noted as wanted).
    pub(crate) fn admits(&self, seq: u64) -> bool {
        if seq <= self.ceiling.load(Acquire) {
            return true;
        }
        // Rare (a sender that restarted after a crash jumps ahead; a burst outruns the caller's top-ups): the caller
        // makes a higher floor durable now, and the packet goes on.
        if let Some(upto) = self.reserve.get().and_then(|r| r(seq)) {
            self.raise(upto);
            if seq <= self.ceiling.load(Acquire) {
                return true;
            }
        }
        self.wanted.fetch_max(seq, Relaxed);
        false
    }

    /// Installs the caller's way to raise the ceiling at once when an authenticated packet is above it (once; later
    /// calls are ignored). Without it, such a packet is dropped and noted as [`RxState::wanted`] for the caller's
    /// next top-up. The function does the caller's I/O (a durable write) on the receiving thread, with the window
    /// held: it is for the rare case, the caller's top-ups keeping the ceiling ahead of steady traffic.
    pub fn on_ceiling(&self, f: Box<ReserveFn>) {
        let _ = self.reserve.set(f);
    }
}

impl core::ops::Deref for InboundSa {
    type Target = SaBase;
    fn deref(&self) -> &SaBase {
        &self.base
    }
}

impl InboundSa {
    /// Builds the key schedule and an empty replay window. `now` is the caller's clock in seconds. Parameters of an
    /// outbound SA are refused ([`SaError::Direction`]).
    pub fn new(params: SaParams, now: u64) -> Result<InboundSa, SaError> {
        let rx = RxState::new(params.replay_window, params.esn);
        Self::with_state(params, now, Arc::new(rx))
    }

    /// An SA whose receive state is `rx`: one with a durable floor and ceiling ([`RxState::with_floor`]), or that of
    /// an SA with the same keys that was replaced or removed ([`InboundSa::rx_state`]), so that nothing it accepted
    /// is accepted again. Refused if `rx` is of the other sequence-number size.
    pub fn with_state(params: SaParams, now: u64, rx: Arc<RxState>) -> Result<InboundSa, SaError> {
        if rx.esn() != params.esn {
            return Err(SaError::SpaceMismatch);
        }
        let base = SaBase::build(params, now, Direction::In)?;
        Ok(InboundSa { rx, base })
    }

    /// The receive state (shared with SAs built later with the same keys: [`InboundSa::with_state`]).
    pub fn rx_state(&self) -> &Arc<RxState> {
        &self.rx
    }

    /// For a socket filter in front of this SA: the replay window's highest sequence number accepted and its
    /// size; `None` with ESN (the high bits are not on the wire).
    pub fn replay_state(&self) -> Option<(u64, u32)> {
        if self.params.esn {
            return None;
        }
        let w = self.rx.window.lock().ok()?;
        Some((w.top(), w.size()))
    }

    /// The highest sequence number accepted.
    pub fn replay_top(&self) -> u64 {
        self.rx.top()
    }

    /// Counts a drop on this SA (and under auth-failed / replayed where it applies); returns it.
    pub(crate) fn count_drop(&self, d: crate::Drop) -> crate::Drop {
        self.counters.dropped.fetch_add(1, Relaxed);
        match d {
            crate::Drop::AuthFailed => self.counters.auth_failed.fetch_add(1, Relaxed),
            crate::Drop::Replayed | crate::Drop::TooOld => {
                self.counters.replayed.fetch_add(1, Relaxed)
            }
            _ => 0,
        };
        d
    }
}
