//! The protocol logic of netveil's PSP key exchange, sans-I/O: what each host sends on its side of a mutually
//! authenticated TLS 1.3 connection, when it rotates, which receive SAs it keeps, and what it installs.
//!
//! The caller (the daemon's driver) owns the socket, the TLS session and the clock. It tells the machine when the
//! connection comes up ([`KeyExchange::connected`]) and goes down ([`KeyExchange::disconnected`]), passes the
//! connection's plaintext bytes in as they arrive ([`KeyExchange::handle_input`], any split), writes what
//! [`KeyExchange::poll_transmit`] returns, applies what [`KeyExchange::poll_event`] returns, calls
//! [`KeyExchange::handle_timeout`] when [`KeyExchange::poll_timeout`] is due and [`KeyExchange::rotate`] when asked
//! to rotate. Time is passed in; the machine reads no clock, opens no socket and starts no thread. Methods that
//! change the receive side take the [`Device`] (`&mut`): the caller decides how it shares the device with its data
//! plane (the daemon holds it under a lock for the length of the call).
//!
//! # Exchange
//!
//! Each side is a sender of associations ([`crate::assoc`]: version, SPI, generation, key) and nothing else; the
//! two directions are independent, there is no request, answer or acknowledgement.
//!
//! - **On connect** the machine allocates a receive SA on the device ([`Device::rx_assoc`]) and queues its
//!   association for the peer ([`Event::AssocSent`]).
//! - **On an association from the peer** with our PSP version, it builds the transmit SA from it and the
//!   configured template ([`KxConfig::tx`]) and hands it out ([`Event::InstallTx`]): the caller replaces its
//!   transmit SA. The previous transmit SA is dropped; packets in flight with it still open at the peer, whose
//!   device keeps the SA of the previous association.
//! - **Rotation**, every [`KxConfig::rotate_every`] since the last rotation (a time jump past several periods
//!   rotates once) or on [`KeyExchange::rotate`]: the device rotates its master keys ([`Device::rotate`]: the SAs
//!   of two rotations ago are forgotten, those of the previous one stay valid), [`Event::Rotated`], and while
//!   connected a new receive SA is allocated under the new key and sent. Rotation also runs while disconnected
//!   (the next connection sends an association under the new key anyway).
//! - **Receive SAs kept**: the latest [`KEEP`] SPIs handed out (the one the peer may still be sending with while
//!   the newest travels, and the newest); older ones are forgotten from the device, so neither reconnections nor
//!   rotations grow the SA table. An SPI value comes back under a fresh master key (a phase's counter restarts
//!   after two rotations), so a value is forgotten only if it is not among the kept ones: forgetting it would
//!   remove the newer SA of the same value.
//! - **The (key, IV) pair of the transmit side.** A new [`TxSa`] starts its IV counter at 1, so installing the
//!   same key twice would repeat IVs under it. The machine remembers the SPI and key it installed last; an
//!   association equal to it (a duplicated message, or a peer sending the same association again, also on a
//!   later connection) is ignored: no event, no error, the installed SA keeps counting. A well-behaved peer never
//!   hands out one key twice otherwise (each association is a fresh SPI, and a reused SPI value comes with a key
//!   from a fresh master key).
//!
//! # Errors and connection life
//!
//! A message that does not decode (unknown type, oversized, unknown version, wrong length, zero SPI) or an
//! association with another PSP version than ours is a protocol error: [`Event::Failed`] with a [`KxError`]
//! saying who is at fault; the machine then ignores further input and sends nothing more on this connection, and
//! the caller closes it. [`KeyExchange::disconnected`] drops the partial input and the unsent messages (their
//! SAs stay handed out: they count among the kept ones); the installed transmit SA, the handed SPIs and the
//! rotation timer survive reconnections, as the data plane keeps its SAs while the connection is down.
//!
//! # Secrets and bounds
//!
//! Received bytes wait in one buffer of fixed capacity (two messages: input is taken one message's length at a
//! time), never reallocated, zeroized as messages are consumed and when the connection ends. Outgoing messages
//! ([`Transmit`]) and the remembered key are zeroized on drop. No `Debug` or `Display` of this module shows key
//! bytes, and no error carries any.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use zeroize::{Zeroize, Zeroizing};

use crate::assoc::{self, Assoc, DecodeError};
use crate::{Device, Error, TxConfig, TxSa, Version};

/// How many receive SPIs handed to the peer are kept (the newest and the one before).
pub const KEEP: usize = 2;

/// The longest message (type, length, body).
const MAX_MSG: usize = 3 + assoc::MAX_BODY;

/// What the key exchange needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KxConfig {
    /// The transmit SAs built from the peer's associations: mode, crypt offsets, cookie, and the PSP version,
    /// which is also ours (the receive SAs we allocate) and the one the peer's associations must carry. Its
    /// `spi` is not used (each association brings its own).
    pub tx: TxConfig,
    /// Rotate the master keys this long after the last rotation (`None` or zero: only on request).
    pub rotate_every: Option<Duration>,
}

impl KxConfig {
    fn version(&self) -> Version {
        self.tx.version
    }
}

/// Why the connection must be closed. The text names the fault; it never carries key material.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KxError {
    /// The peer sent bytes that are not a valid message (the peer is at fault).
    Malformed(DecodeError),
    /// The peer's association is for another PSP version than ours (the peer's configuration does not match).
    VersionMismatch { ours: Version, peer: Version },
    /// No receive SA could be allocated even after a rotation (an internal fault; not expected).
    NoSpi(Error),
    /// The peer's association makes no transmit SA (an internal fault: decoding checked the key length).
    BadAssoc(Error),
}

impl core::fmt::Display for KxError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            KxError::Malformed(e) => write!(f, "the peer sent an invalid message: {e}"),
            KxError::VersionMismatch { ours, peer } => write!(
                f,
                "the peer uses PSP version {}, we are configured for {}",
                peer.number(),
                ours.number()
            ),
            KxError::NoSpi(e) => write!(f, "cannot allocate a receive SPI: {e}"),
            KxError::BadAssoc(e) => write!(f, "the peer's association makes no SA: {e}"),
        }
    }
}

impl std::error::Error for KxError {}

/// What the caller must act on.
#[derive(Debug)]
pub enum Event {
    /// A receive SA was allocated on the device and its association queued for the peer
    /// ([`KeyExchange::poll_transmit`]). The device's receive SAs changed (this one added, an old one perhaps
    /// forgotten): a socket filter derived from them must be updated before the message is sent, so that it
    /// lets the peer's first packets with `spi` in.
    AssocSent { spi: u32, generation: u8 },
    /// The peer's association: install this as the transmit SA, replacing the previous one.
    InstallTx(TxSa),
    /// The device's master keys rotated; `generation` is the device's new generation. The device's receive SAs
    /// changed (those of two rotations ago are gone).
    Rotated { generation: u8 },
    /// A protocol error: close the connection (then [`KeyExchange::disconnected`]).
    Failed(KxError),
}

/// One message for the peer, to be written to the connection as it is. Zeroized when dropped (it holds one of our
/// receive keys); its `Debug` shows only its length.
pub struct Transmit(Zeroizing<Vec<u8>>);

impl core::ops::Deref for Transmit {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl core::fmt::Debug for Transmit {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Transmit")
            .field("len", &self.0.len())
            .finish_non_exhaustive()
    }
}

/// One host's side of the key exchange with one peer (see the module documentation).
pub struct KeyExchange {
    cfg: KxConfig,
    connected: bool,
    /// A protocol error ended this connection: input is ignored until the next one.
    failed: bool,
    /// Received bytes not consumed yet: less than one message, plus at most one message's length being parsed.
    rbuf: Zeroizing<Vec<u8>>,
    transmit: VecDeque<Transmit>,
    events: VecDeque<Event>,
    /// Receive SPIs handed to the peer, oldest first, at most [`KEEP`].
    handed: VecDeque<u32>,
    /// The SPI and key of the transmit SA installed last (to recognise the same association again).
    installed: Option<(u32, Zeroizing<Vec<u8>>)>,
    last_rotation: Instant,
}

impl core::fmt::Debug for KeyExchange {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KeyExchange")
            .field("connected", &self.connected)
            .field("failed", &self.failed)
            .field("handed", &self.handed)
            .field("installed_spi", &self.installed.as_ref().map(|(s, _)| *s))
            .field("last_rotation", &self.last_rotation)
            .finish_non_exhaustive()
    }
}

impl KeyExchange {
    /// A machine, not connected, whose rotation timer starts at `now`. Refuses a template whose crypt offsets
    /// exceed 63 (`Error::CryptOffset`), which no association could turn into an SA.
    pub fn new(cfg: KxConfig, now: Instant) -> Result<Self, Error> {
        let t = &cfg.tx;
        if [
            t.crypt_offset_transport,
            t.crypt_offset_tunnel_v4,
            t.crypt_offset_tunnel_v6,
        ]
        .iter()
        .any(|&o| o > 0x3f)
        {
            return Err(Error::CryptOffset);
        }
        Ok(KeyExchange {
            cfg,
            connected: false,
            failed: false,
            rbuf: Zeroizing::new(Vec::with_capacity(2 * MAX_MSG)),
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            handed: VecDeque::with_capacity(KEEP + 1),
            installed: None,
            last_rotation: now,
        })
    }

    pub fn config(&self) -> &KxConfig {
        &self.cfg
    }

    /// Whether a connection is up (between [`KeyExchange::connected`] and [`KeyExchange::disconnected`]).
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// The receive SPIs handed to the peer and kept, oldest first.
    pub fn handed(&self) -> impl Iterator<Item = u32> + '_ {
        self.handed.iter().copied()
    }

    /// The connection is up (TLS handshake done, peer checked): allocates a receive SA and queues its
    /// association. A call while connected starts over as for a new connection.
    pub fn connected(&mut self, now: Instant, dev: &mut Device) {
        self.reset_connection();
        self.connected = true;
        self.hand(now, dev);
    }

    /// The connection is gone: partial input and unsent messages are dropped.
    pub fn disconnected(&mut self) {
        self.reset_connection();
    }

    fn reset_connection(&mut self) {
        self.connected = false;
        self.failed = false;
        self.rbuf.zeroize();
        self.transmit.clear();
    }

    /// Plaintext bytes from the connection, in order, split anywhere. Ignored when not connected or after a
    /// protocol error on this connection. `now` is not used today: it is part of the shape, so that a timer tied
    /// to input would not change the callers.
    pub fn handle_input(&mut self, now: Instant, mut bytes: &[u8]) {
        let _ = now;
        while !bytes.is_empty() && self.connected && !self.failed {
            // One message's length at a time: the buffer never outgrows its capacity (no reallocation leaving
            // copies of keys behind).
            let (chunk, rest) = bytes.split_at(bytes.len().min(MAX_MSG));
            self.rbuf.extend_from_slice(chunk);
            bytes = rest;
            self.parse();
        }
    }

    /// Consumes the complete messages at the start of the buffer.
    fn parse(&mut self) {
        let mut buf = core::mem::take(&mut self.rbuf);
        let mut at = 0;
        let result = loop {
            match assoc::decode(&buf[at..]) {
                Ok(None) => break Ok(()),
                Ok(Some((a, used))) => {
                    at += used;
                    if let Err(e) = self.receive(&a) {
                        break Err(e);
                    }
                }
                Err(e) => break Err(KxError::Malformed(e)),
            }
        };
        // Keep the incomplete rest at the front; zero what was consumed.
        let rest = buf.len() - at;
        buf.copy_within(at.., 0);
        buf[rest..].zeroize();
        buf.truncate(rest);
        self.rbuf = buf;
        if let Err(e) = result {
            self.fail(e);
        }
    }

    /// An association from the peer.
    fn receive(&mut self, a: &Assoc<'_>) -> Result<(), KxError> {
        if a.version != self.cfg.version() {
            return Err(KxError::VersionMismatch {
                ours: self.cfg.version(),
                peer: a.version,
            });
        }
        // Both sides of this comparison came from the peer: no timing to protect.
        if let Some((spi, key)) = &self.installed {
            if *spi == a.spi && key[..] == *a.key {
                return Ok(());
            }
        }
        let sa = TxSa::with_key(
            a.key,
            TxConfig {
                spi: a.spi,
                ..self.cfg.tx
            },
        )
        .map_err(KxError::BadAssoc)?;
        self.installed = Some((a.spi, Zeroizing::new(a.key.to_vec())));
        self.events.push_back(Event::InstallTx(sa));
        Ok(())
    }

    fn fail(&mut self, e: KxError) {
        self.failed = true;
        self.rbuf.zeroize();
        self.transmit.clear();
        self.events.push_back(Event::Failed(e));
    }

    /// Rotates now (a request, e.g. `netveil rotate`): see the module documentation. Restarts the timer.
    pub fn rotate(&mut self, now: Instant, dev: &mut Device) {
        self.rotate_device(now, dev);
        if self.connected && !self.failed {
            self.hand(now, dev);
        }
    }

    fn rotate_device(&mut self, now: Instant, dev: &mut Device) {
        dev.rotate();
        self.last_rotation = now;
        self.events.push_back(Event::Rotated {
            generation: dev.generation(),
        });
    }

    /// Rotates if the timer is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant, dev: &mut Device) {
        if self.poll_timeout().is_some_and(|t| now >= t) {
            self.rotate(now, dev);
        }
    }

    /// When [`KeyExchange::handle_timeout`] is due (`None`: no timer).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.cfg
            .rotate_every
            .filter(|d| !d.is_zero())
            .map(|d| self.last_rotation + d)
    }

    /// The next message to write to the connection.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmit.pop_front()
    }

    /// The next event to apply.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Allocates a receive SA, keeps the latest [`KEEP`] handed SPIs, and queues the association.
    fn hand(&mut self, now: Instant, dev: &mut Device) {
        let version = self.cfg.version();
        let a = match dev.rx_assoc(version) {
            Ok(a) => a,
            Err(_) => {
                // The active master key's 2^31 - 1 SPIs are used up: a fresh key has them all again.
                self.rotate_device(now, dev);
                match dev.rx_assoc(version) {
                    Ok(a) => a,
                    Err(e) => return self.fail(KxError::NoSpi(e)),
                }
            }
        };
        self.handed.push_back(a.spi);
        while self.handed.len() > KEEP {
            if let Some(old) = self.handed.pop_front() {
                // The same value may be kept as a newer SA (under a fresh master key): forget only a value no
                // longer handed.
                if !self.handed.contains(&old) {
                    dev.forget(old);
                }
            }
        }
        let mut m = Zeroizing::new(Vec::with_capacity(MAX_MSG));
        Assoc {
            version: a.version,
            spi: a.spi,
            generation: a.generation,
            key: &a.key,
        }
        .encode(&mut m);
        self.transmit.push_back(Transmit(m));
        self.events.push_back(Event::AssocSent {
            spi: a.spi,
            generation: a.generation,
        });
    }
}
