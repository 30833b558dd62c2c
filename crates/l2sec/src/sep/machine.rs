//! The state machine of one host ([`Sep`]): its exchanges, one per peer, the finished ones remembered, the
//! freshness of requests and the rate limit; messages handed to the responder's or the initiator's side; timers.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use netveil_crypto::dh::KeyPair;
use netveil_crypto::rand::{array as random, Rng};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::schedule::absorb;
use super::types::{DhGroup, Established, Mac, SepConfig, SepError, SepEvent};
use super::wire::{header, parse_header, ty, BROADCAST, NONCE_LEN};
use crate::suite::Suite;

/// Most responder exchanges in progress at once.
pub const MAX_RESPONDERS: usize = 256;

/// Most finished exchanges remembered (for retransmitted last messages).
const MAX_LINGER: usize = 1024;

/// Most peers whose freshest REQUEST is remembered.
pub const MAX_FRESHNESS: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// Initiator: REQUEST sent, waiting for ACCEPT.
    Requested,
    /// Initiator: OFFER sent, waiting for SELECT (or REJECT).
    Offered,
    /// Initiator: KEY_EXCHANGE sent, waiting for KEY_EXCHANGE_ACCEPT.
    KeySent,
    /// Responder: ACCEPT sent, waiting for OFFER.
    Accepted,
    /// Responder: SELECT sent, waiting for KEY_EXCHANGE.
    Selected,
    /// Responder: KEY_EXCHANGE_ACCEPT sent, waiting for FINISH.
    KeyAccepted,
}

/// A responder's result of stage 3, installed when FINISH confirms it.
pub(super) struct Pending {
    pub(super) est: Box<Established>,
    pub(super) confirm_i: Zeroizing<[u8; 32]>,
    pub(super) h: [u8; 32],
}

pub(super) struct Exchange {
    pub(super) id: [u8; 8],
    pub(super) stage: Stage,
    /// Initiator: the target address given to `initiate`.
    pub(super) target_ip: Option<Ipv4Addr>,
    /// The peer's stated address (initiator: known from ACCEPT on).
    pub(super) peer_ip: Ipv4Addr,
    pub(super) ni: [u8; NONCE_LEN],
    pub(super) nr: [u8; NONCE_LEN],
    pub(super) key_id: u8,
    pub(super) suite: Option<Suite>,
    pub(super) group: Option<DhGroup>,
    pub(super) lifetime_offer: u32,
    /// Over the messages of the exchange so far.
    pub(super) transcript: Sha256,
    /// Initiator in stage 3: its key pair.
    pub(super) keypair: Option<KeyPair>,
    /// Responder in stage 3.
    pub(super) pending: Option<Pending>,
    /// The last message received and handled (a copy of it is a duplicate).
    pub(super) last_rx: Vec<u8>,
    /// The last message sent (retransmitted, or resent on a duplicate).
    pub(super) last_tx: Vec<u8>,
    /// Transmissions of `last_tx` so far (when this side retransmits).
    pub(super) sends: u32,
    /// This side waits for an answer and retransmits; otherwise `deadline` is when the exchange is forgotten.
    pub(super) retransmits: bool,
    pub(super) deadline: Instant,
}

impl Exchange {
    pub(super) fn initiator(&self) -> bool {
        matches!(
            self.stage,
            Stage::Requested | Stage::Offered | Stage::KeySent
        )
    }
}

/// A finished (or refused) exchange, remembered for a retransmission span.
pub(super) struct Linger {
    id: [u8; 8],
    last_rx: Vec<u8>,
    /// Resent when `last_rx` comes again (empty: nothing to send).
    answer: Vec<u8>,
    until: Instant,
}

/// A token bucket for exchanges started.
#[derive(Default)]
struct Bucket {
    tokens: u32,
    last: Option<Instant>,
}

impl Bucket {
    /// Takes a token if there is one (`rate` per second, burst `rate`; 0: no limit).
    fn take(&mut self, rate: u32, now: Instant) -> bool {
        if rate == 0 {
            return true;
        }
        let interval = Duration::from_secs(1) / rate;
        match self.last {
            None => {
                self.tokens = rate;
                self.last = Some(now);
            }
            Some(last) => {
                let n = now.saturating_duration_since(last).as_nanos() / interval.as_nanos().max(1);
                if n >= u128::from(rate) {
                    self.tokens = rate;
                    self.last = Some(now);
                } else if n > 0 {
                    self.tokens = (self.tokens + n as u32).min(rate);
                    self.last = Some(last + interval * n as u32);
                }
            }
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

/// The SEP state of one host: the exchanges in progress, one per peer.
pub struct Sep {
    pub(super) cfg: SepConfig,
    pub(super) exchanges: HashMap<Mac, Exchange>,
    pub(super) lingers: HashMap<Mac, Linger>,
    pub(super) events: VecDeque<SepEvent>,
    /// Per peer, the (epoch, sequence number) of the freshest REQUEST seen, and when.
    freshest: HashMap<Mac, ((u64, u64), Instant)>,
    bucket: Bucket,
    rate_limited: u64,
    /// Exchange ids, nonces and Diffie-Hellman private keys are drawn from this (the caller's) generator.
    pub(super) rng: Box<dyn Rng>,
}

pub(super) fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(u32::MAX as u64)))
        .unwrap_or(now)
}

impl Sep {
    /// A host's SEP state; `rng` (the OS generator in the daemon, a seeded one in tests) draws its exchange ids,
    /// nonces and Diffie-Hellman private keys.
    pub fn new(cfg: SepConfig, rng: Box<dyn Rng>) -> Sep {
        Sep {
            rng,
            cfg,
            exchanges: HashMap::new(),
            lingers: HashMap::new(),
            events: VecDeque::new(),
            freshest: HashMap::new(),
            bucket: Bucket::default(),
            rate_limited: 0,
        }
    }

    pub fn config(&self) -> &SepConfig {
        &self.cfg
    }

    /// The generator (the node draws its sessions' first sequence numbers from it too).
    pub(crate) fn rng(&mut self) -> &mut dyn Rng {
        &mut *self.rng
    }

    /// Exchanges not started (initiations postponed, requests refused) because of the rate limit.
    pub fn rate_limited(&self) -> u64 {
        self.rate_limited
    }

    pub(super) fn take_token(&mut self, now: Instant) -> bool {
        let ok = self.bucket.take(self.cfg.max_starts_per_second, now);
        if !ok {
            self.rate_limited += 1;
        }
        ok
    }

    /// Records the freshness of a REQUEST from `from`; `Stale` if it is not fresher than the freshest seen.
    pub(super) fn fresh_request(
        &mut self,
        from: Mac,
        order: (u64, u64),
        now: Instant,
    ) -> Result<(), SepError> {
        if let Some((seen, at)) = self.freshest.get_mut(&from) {
            if order <= *seen {
                return Err(SepError::Stale);
            }
            *seen = order;
            *at = now;
            return Ok(());
        }
        if self.freshest.len() >= MAX_FRESHNESS {
            if let Some(old) = self
                .freshest
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(m, _)| *m)
            {
                self.freshest.remove(&old);
            }
        }
        self.freshest.insert(from, (order, now));
        Ok(())
    }

    pub(super) fn attempts(&self) -> u32 {
        self.cfg.attempts.clamp(1, 32)
    }

    /// The wait after the `sends`-th transmission.
    pub(super) fn backoff(&self, sends: u32) -> Duration {
        let base = self.cfg.retransmit.max(Duration::from_millis(1));
        base.saturating_mul(1u32 << sends.saturating_sub(1).min(31))
    }

    /// `retransmit · (2^attempts − 1)`: from a first transmission to the give-up.
    pub(super) fn span(&self) -> Duration {
        (1..=self.attempts()).fold(Duration::ZERO, |acc, k| acc.saturating_add(self.backoff(k)))
    }

    pub(super) fn lifetime_secs(&self) -> u32 {
        self.cfg.lifetime.as_secs().clamp(1, u32::MAX as u64) as u32
    }

    pub(super) fn on_subnet(&self, ip: Ipv4Addr) -> bool {
        let pl = u32::from(self.cfg.prefix_len.min(32));
        if pl == 0 {
            return true;
        }
        let mask = u32::MAX << (32 - pl);
        u32::from(ip) & mask == u32::from(self.cfg.ip) & mask
    }

    pub(super) fn transmit(&mut self, to: Mac, msg: Vec<u8>) {
        self.events.push_back(SepEvent::Transmit { to, msg });
    }

    pub(super) fn linger(
        &mut self,
        peer: Mac,
        id: [u8; 8],
        last_rx: Vec<u8>,
        answer: Vec<u8>,
        now: Instant,
    ) {
        if self.lingers.len() >= MAX_LINGER && !self.lingers.contains_key(&peer) {
            self.lingers.retain(|_, l| l.until > now);
            if self.lingers.len() >= MAX_LINGER {
                return;
            }
        }
        let until = later(now, self.span());
        self.lingers.insert(
            peer,
            Linger {
                id,
                last_rx,
                answer,
                until,
            },
        );
    }

    /// Starts an exchange with `peer` (whose IPv4 address the caller may know from the frame that needs the
    /// session), proposing `key_id` (1..=255) for the new session. Returns false (and does nothing) if an
    /// exchange with `peer` is already in progress (also if `key_id` is 0, `peer` is this host or a group
    /// address, the configuration has no suite or no group, or the rate limit allows no exchange now).
    pub fn initiate(
        &mut self,
        peer: Mac,
        peer_ip: Option<Ipv4Addr>,
        key_id: u8,
        now: Instant,
    ) -> bool {
        self.try_initiate(peer, peer_ip, key_id, now).is_ok()
    }

    /// [`Sep::initiate`], saying why not: `Unexpected` (an exchange in progress, or arguments it cannot use) or
    /// `RateLimited`.
    pub fn try_initiate(
        &mut self,
        peer: Mac,
        peer_ip: Option<Ipv4Addr>,
        key_id: u8,
        now: Instant,
    ) -> Result<(), SepError> {
        if self.exchanges.contains_key(&peer)
            || key_id == 0
            || peer == self.cfg.mac
            || peer[0] & 1 == 1
            || self.cfg.suites.is_empty()
            || self.cfg.groups.is_empty()
        {
            return Err(SepError::Unexpected);
        }
        if !self.take_token(now) {
            return Err(SepError::RateLimited);
        }
        self.lingers.remove(&peer);
        let id = random::<8>(&mut *self.rng);
        let ni = random::<NONCE_LEN>(&mut *self.rng);
        let mut m1 = header(ty::REQUEST, self.cfg.mac, peer, &id);
        m1.extend_from_slice(&self.cfg.ip.octets());
        m1.extend_from_slice(&peer_ip.unwrap_or(Ipv4Addr::UNSPECIFIED).octets());
        m1.extend_from_slice(&ni);
        let mut transcript = Sha256::new();
        absorb(&mut transcript, &m1);
        let x = Exchange {
            id,
            stage: Stage::Requested,
            target_ip: peer_ip.filter(|ip| !ip.is_unspecified()),
            peer_ip: peer_ip.unwrap_or(Ipv4Addr::UNSPECIFIED),
            ni,
            nr: [0; NONCE_LEN],
            key_id,
            suite: None,
            group: None,
            lifetime_offer: self.lifetime_secs(),
            transcript,
            keypair: None,
            pending: None,
            last_rx: Vec::new(),
            last_tx: m1.clone(),
            sends: 1,
            retransmits: true,
            deadline: later(now, self.backoff(1)),
        };
        self.exchanges.insert(peer, x);
        self.transmit(peer, m1);
        Ok(())
    }

    /// Forgets the exchange with `peer` (in progress or finished), without an event.
    pub fn abort(&mut self, peer: &Mac) {
        self.exchanges.remove(peer);
        self.lingers.remove(peer);
    }

    /// A SEP message received from `from` (the frame's source MAC, already authenticated as a group frame) in
    /// the group frame numbered `order` = (the sender's epoch, the frame's sequence number): strictly increasing
    /// for one sender, so that a stale REQUEST is recognised (see the module documentation). On error nothing is
    /// sent (silent drop); the caller counts the reason.
    pub fn handle_message(
        &mut self,
        from: Mac,
        msg: &[u8],
        order: (u64, u64),
        now: Instant,
    ) -> Result<(), SepError> {
        let (h, body) = parse_header(msg)?;
        if h.ty == ty::ANNOUNCE {
            if h.receiver != BROADCAST || h.id != [0; 8] || !body.is_empty() {
                return Err(SepError::Malformed);
            }
            if h.sender != from || from == self.cfg.mac {
                return Err(SepError::WrongSender);
            }
            return Ok(());
        }
        if h.receiver != self.cfg.mac {
            return Err(SepError::NotTarget);
        }
        if h.sender != from || from == self.cfg.mac {
            return Err(SepError::WrongSender);
        }
        if h.ty == ty::REQUEST {
            self.fresh_request(from, order, now)?;
        }
        let in_exchange = self.exchanges.get(&from).is_some_and(|x| x.id == h.id);
        if !in_exchange {
            if let Some(l) = self.lingers.get(&from).filter(|l| l.id == h.id) {
                if l.last_rx.as_slice() == msg {
                    if !l.answer.is_empty() {
                        let answer = l.answer.clone();
                        self.transmit(from, answer);
                    }
                    return Ok(());
                }
                return Err(SepError::Unexpected);
            }
        }
        match h.ty {
            ty::REQUEST => self.on_request(from, &h, body, msg, now),
            ty::OFFER | ty::KEY_EXCHANGE | ty::FINISH => {
                self.on_responder(from, &h, body, msg, now)
            }
            _ => self.on_initiator(from, &h, body, msg, now),
        }
    }

    /// Retransmissions and give-ups due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due: Vec<Mac> = self
            .exchanges
            .iter()
            .filter(|(_, x)| x.deadline <= now)
            .map(|(m, _)| *m)
            .collect();
        due.sort_unstable();
        let attempts = self.attempts();
        for peer in due {
            let Some(x) = self.exchanges.get(&peer) else {
                continue;
            };
            if !x.retransmits {
                self.exchanges.remove(&peer);
            } else if x.sends < attempts {
                let sends = x.sends + 1;
                let wait = self.backoff(sends);
                if let Some(x) = self.exchanges.get_mut(&peer) {
                    x.sends = sends;
                    x.deadline = later(now, wait);
                    let msg = x.last_tx.clone();
                    self.transmit(peer, msg);
                }
            } else {
                self.exchanges.remove(&peer);
                self.events.push_back(SepEvent::Failed {
                    peer,
                    reason: SepError::Timeout,
                });
            }
        }
        self.lingers.retain(|_, l| l.until > now);
    }

    /// When [`Sep::handle_timeout`] should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let x = self.exchanges.values().map(|x| x.deadline);
        let l = self.lingers.values().map(|l| l.until);
        x.chain(l).min()
    }

    /// The next thing to do.
    pub fn poll_event(&mut self) -> Option<SepEvent> {
        self.events.pop_front()
    }

    /// An exchange with `peer` is in progress.
    pub fn in_progress(&self, peer: &Mac) -> bool {
        self.exchanges.contains_key(peer)
    }
}
