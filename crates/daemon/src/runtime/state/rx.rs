//! Receive floors of inbound SAs with static keys.

use super::*;

/// The smallest block of sequence numbers a receive floor is reserved ahead by (see [`RxStore`]).
pub const RX_MIN_BLOCK: u64 = 8;
/// A receive floor is reserved ahead by about this many milliseconds of the SA's recent rate.
pub const RX_BLOCK_MILLIS: u64 = 250;

/// The receive floors of inbound SAs with static keys: the counterpart of [`SeqStore`], so that no packet accepted
/// before a restart, a crash or a re-add of the same keys is ever accepted again. For each key, a file named after
/// the same fingerprint as the sequence marks (`rx-...`) holds a number that is at least every sequence number ever
/// accepted under those keys:
///
/// - at start, the SA's window takes everything up to the floor as seen, and it may accept numbers up to a
///   *ceiling* written (synced) before the first packet;
/// - while it runs, [`RxStore::top_up`] raises the ceiling ahead of what arrives, in blocks of about
///   [`RX_BLOCK_MILLIS`] of the SA's recent rate (at least [`RX_MIN_BLOCK`]), before the window gets there; for an
///   authenticated packet above the ceiling (the peer restarted after a crash and jumped ahead, or a burst outran
///   the tick) the receiving thread writes a floor above it at once (synced) and accepts it; only if that write
///   fails is it dropped (`rx:seq-not-reserved`);
/// - on a clean stop, [`RxStore::finish`] writes the highest number accepted, so a restart loses nothing.
///
/// The price of a crash: a receiver that restarts after kill -9 or a power loss refuses the numbers between what it
/// had accepted and its last ceiling, so a live sender that did not restart loses at most one block: about
/// [`RX_BLOCK_MILLIS`] of traffic at its recent rate, or [`RX_MIN_BLOCK`] packets at low rates, then is accepted
/// again. Within one run, an SA removed and added again with the same keys keeps its window (exactly).
pub struct RxStore {
    dir: StateDir,
    slots: Vec<RxSlot>,
    armed: bool,
}

struct RxSlot {
    state: Option<Arc<RxState>>,
    name: String,
    live: usize,
    file: String,
    /// The floor read at start (given back by a start that never received).
    floor: u64,
    limit: u64,
    failed: bool,
    /// The rate estimate: the top and time it was last taken, and packets per second since.
    rate_top: u64,
    rate_at: std::time::Instant,
    rate: u64,
    /// The floor on disk: written only with this lock held (by the tick's top-ups and by the receiving thread when a
    /// packet is above the ceiling), so that it only grows while the daemon runs.
    durable: Arc<std::sync::Mutex<u64>>,
    /// The block the floor is reserved ahead by now (sized by the tick to the recent rate).
    block: Arc<std::sync::atomic::AtomicU64>,
}

/// Where an inbound SA starts: its floor and ceiling, or the receive state of an SA with the same keys built
/// earlier in this run, to continue.
#[derive(Clone)]
pub struct RxStart {
    pub floor: u64,
    pub ceiling: u64,
    pub state: Option<Arc<RxState>>,
}

impl std::fmt::Debug for RxStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxStart")
            .field("floor", &self.floor)
            .field("ceiling", &self.ceiling)
            .field("shared", &self.state.is_some())
            .finish()
    }
}

impl RxStart {
    /// The receive state an SA of `p` starts with.
    pub fn state(&self, p: &SaParams) -> Arc<RxState> {
        self.state.clone().unwrap_or_else(|| {
            Arc::new(RxState::with_floor(
                p.replay_window,
                p.esn,
                self.floor,
                self.ceiling,
            ))
        })
    }
}

impl RxStore {
    /// A store with no SA yet, in `dir`.
    pub fn open(dir: StateDir) -> RxStore {
        RxStore {
            dir,
            slots: Vec::new(),
            armed: false,
        }
    }

    /// Reads the floor of an inbound SA with the keys of `p` and makes its first ceiling durable. Keys that an SA
    /// of this run already used continue that SA's receive state. The SA, once built, goes to [`RxStore::track`].
    ///
    /// `fresh`: the keys were negotiated for this SA (see [`crate::runtime::sa_port::KeyOrigin::Negotiated`]), so a missing
    /// floor is 0 even where the directory holds no record.
    pub fn start(&mut self, p: &SaParams, key: &str, fresh: bool) -> Result<RxStart, ConfigError> {
        let file = rx_file(p);
        let limit = space_limit(p.esn);
        if let Some(s) = self.slots.iter().find(|s| s.file == file) {
            return match &s.state {
                Some(st) if st.esn() == p.esn => Ok(RxStart {
                    floor: st.top(),
                    ceiling: st.ceiling(),
                    state: Some(st.clone()),
                }),
                Some(_) => Err(space_changed(key, p.esn)),
                None => Err(cerr(
                    &format!("{key}.enc_key"),
                    "another SA with these keys is being installed".into(),
                )),
            };
        }
        let floor = if fresh {
            self.dir
                .read_u64(&file)
                .map_err(|e| cerr(&format!("{key}.enc_key"), e))?
                .unwrap_or(0)
        } else {
            self.dir
                .read_floor(&file, &format!("{key}.enc_key"), &p.name)?
        };
        if floor >= limit {
            return Err(cerr(
                &format!("{key}.enc_key"),
                format!(
                    "these keys have used up their sequence space (floor {floor} in {}): configure new keys",
                    self.dir.path().join(&file).display()
                ),
            ));
        }
        let ceiling = floor.saturating_add(RX_MIN_BLOCK).min(limit);
        self.dir
            .write_u64(&file, ceiling)
            .map_err(|e| write_error(&self.dir, &file, e))?;
        self.slots.push(RxSlot {
            state: None,
            name: p.name.clone(),
            live: 0,
            file,
            floor,
            limit,
            failed: false,
            rate_top: floor,
            rate_at: std::time::Instant::now(),
            rate: 0,
            durable: Arc::new(std::sync::Mutex::new(ceiling)),
            block: Arc::new(std::sync::atomic::AtomicU64::new(RX_MIN_BLOCK)),
        });
        Ok(RxStart {
            floor,
            ceiling,
            state: None,
        })
    }

    /// Follows the SA built with a start from [`RxStore::start`]: it is installed.
    pub fn track(&mut self, sa: &Arc<InboundSa>) {
        let file = rx_file(&sa.params);
        if let Some(s) = self.slots.iter_mut().find(|s| s.file == file) {
            if s.state.is_none() {
                let st = sa.rx_state().clone();
                // A packet above the ceiling (the sender restarted after a crash and jumped ahead) gets a floor
                // above it at once, durably, instead of waiting for the next tick.
                let (dir, file, durable, block, limit) = (
                    self.dir.clone(),
                    s.file.clone(),
                    s.durable.clone(),
                    s.block.clone(),
                    s.limit,
                );
                // Each time this happens the block doubles (up to SEQ_BLOCK): a flow that starts or speeds up
                // costs a few synced writes on the receiving thread, not one per block of the old rate, until the
                // tick sizes the block to the new rate again.
                st.on_ceiling(Box::new(move |seq| {
                    use std::sync::atomic::Ordering::Relaxed;
                    let mut d = durable.lock().ok()?;
                    if seq <= *d {
                        return Some(*d);
                    }
                    let b = block
                        .load(Relaxed)
                        .saturating_mul(2)
                        .clamp(RX_MIN_BLOCK, SEQ_BLOCK);
                    block.store(b, Relaxed);
                    let next = seq.saturating_add(b).min(limit);
                    dir.write_u64(&file, next).ok()?;
                    *d = next;
                    Some(next)
                }));
                s.state = Some(st);
            }
            s.name = sa.params.name.clone();
            s.live += 1;
        }
    }

    /// The SA was removed (or retired, or not installed after all): its floor stays, and its receive state stays
    /// for an SA with the same keys to continue.
    pub fn forget(&mut self, sa: &Arc<InboundSa>) {
        if let Some(s) = self.slots.iter_mut().find(|s| {
            s.state
                .as_ref()
                .is_some_and(|c| Arc::ptr_eq(c, sa.rx_state()))
        }) {
            s.live = s.live.saturating_sub(1);
        }
    }

    /// Raises the ceiling of every installed SA's keys ahead of what arrives (durably, then in memory): when less
    /// than half a block is left, or an authenticated packet was refused above it. Returns a message for each floor
    /// that could not be written (once per key until a write succeeds again).
    pub fn top_up(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        let now = std::time::Instant::now();
        for s in &mut self.slots {
            let Some(st) = &s.state else { continue };
            if s.live == 0 {
                continue;
            }
            let top = st.top();
            let elapsed = now.duration_since(s.rate_at);
            let rate_block = |rate: u64| {
                (rate.saturating_mul(RX_BLOCK_MILLIS) / 1000).clamp(RX_MIN_BLOCK, SEQ_BLOCK)
            };
            if elapsed >= std::time::Duration::from_millis(250) {
                let n = top.saturating_sub(s.rate_top);
                s.rate = (u128::from(n) * 1000 / elapsed.as_millis().max(1)) as u64;
                s.rate_top = top;
                s.rate_at = now;
                // A new estimate: the block follows it (down too, after a burst the receiving thread doubled it).
                s.block
                    .store(rate_block(s.rate), std::sync::atomic::Ordering::Relaxed);
            }
            let block = rate_block(s.rate).max(s.block.load(std::sync::atomic::Ordering::Relaxed));
            let ceiling = st.ceiling();
            let wanted = st.wanted();
            if ceiling >= s.limit || (wanted <= ceiling && ceiling - top.min(ceiling) > block / 2) {
                continue;
            }
            let next = top.max(wanted).saturating_add(block).min(s.limit);
            if next <= ceiling {
                continue;
            }
            let Ok(mut d) = s.durable.lock() else {
                continue;
            };
            let written = if next > *d {
                self.dir.write_u64(&s.file, next).map(|()| {
                    *d = next;
                })
            } else {
                Ok(())
            };
            match written {
                Ok(()) => {
                    st.raise(*d);
                    s.failed = false;
                }
                Err(e) if !s.failed => {
                    s.failed = true;
                    errors.push(format!(
                        "SA '{}': cannot write its receive floor {}: {e} (it accepts nothing above {ceiling})",
                        s.name,
                        self.dir.path().join(&s.file).display()
                    ));
                }
                Err(_) => {}
            }
        }
        errors
    }

    /// The data plane is about to receive: from now on the ceilings stay (see [`RxStore::finish`]).
    pub fn arm(&mut self) {
        self.armed = true;
    }

    /// After the data plane stopped: the floors become the highest numbers accepted, so the next start refuses
    /// exactly what was accepted.
    pub fn finish(&mut self) {
        for s in &self.slots {
            if let Some(st) = &s.state {
                let Ok(mut d) = s.durable.lock() else {
                    continue;
                };
                let top = st.top().max(s.floor);
                if self.dir.write_u64(&s.file, top).is_ok() {
                    *d = top;
                }
            }
        }
    }
}

impl Drop for RxStore {
    fn drop(&mut self) {
        if !self.armed {
            // Nothing was received under these ceilings: the floors go back to what they were.
            for s in &self.slots {
                let _ = self.dir.write_u64(&s.file, s.floor);
            }
        }
    }
}
