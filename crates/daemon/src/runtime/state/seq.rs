//! Sequence-number reservations of outbound SAs with static keys.

use super::*;

/// Sequence numbers reserved ahead per block: a restart skips at most this many numbers of an SA, and at line rate
/// (about 0.6 M packets per second per SA) a block lasts well over a second, so the mark is synced about once a
/// second under full load and never otherwise.
pub const SEQ_BLOCK: u64 = 1 << 20;

/// The sequence-number marks of outbound SAs with static keys. For each key, a file named after a fingerprint of the
/// SA's protocol and keys holds a number that is at least every sequence number ever sent under those keys:
///
/// - at start, the SA continues at `mark + 1` and may use numbers up to `mark + SEQ_BLOCK`, written (synced)
///   before the first packet;
/// - while it runs, [`SeqStore::top_up`] writes the next block's end once half of the current block is used, and
///   only then lets the data plane go on (a data plane that catches up drops, never sends an unreserved number);
/// - on a clean stop, [`SeqStore::finish`] writes the last number used, so no numbers are skipped.
///
/// A crash (kill -9, power loss) skips at most one block (the next one is reserved one block above what is used),
/// and an `up` that fails before it sends gives its first block back. Since every restart continues above anything
/// ever sent, the peer's replay window accepts the restarted side at once.
///
/// Within one run, the keys have one sequence counter: an SA replaced by one with the same keys (`sa update` that
/// keeps them), or removed and added again, continues the same counter ([`SeqStart::counter`]) instead of reserving
/// a new block, so no-op changes neither use up the space nor put the sender far ahead of its peer's window.
pub struct SeqStore {
    dir: StateDir,
    slots: Vec<SeqSlot>,
    /// Set once the data plane may send: until then, dropping the store (a failed `up`) gives the first blocks
    /// back, so a setup that fails again and again does not use up the sequence space.
    armed: bool,
}

struct SeqSlot {
    /// The counter of the SAs with these keys, once one is built (see [`SeqStore::track`]).
    counter: Option<Arc<SeqCounter>>,
    /// The last SA built with these keys (for messages), and how many with them are installed now.
    name: String,
    live: usize,
    file: String,
    first: u64,
    limit: u64,
    failed: bool,
}

/// Where an outbound SA starts: the first sequence number and the reservation it may use up to, or the counter of
/// an SA with the same keys built earlier in this run, to continue.
#[derive(Debug, Clone)]
pub struct SeqStart {
    pub first: u64,
    pub reserved: u64,
    pub counter: Option<Arc<SeqCounter>>,
}

impl SeqStore {
    /// A store with no SA yet, in `dir`.
    pub fn open(dir: StateDir) -> SeqStore {
        SeqStore {
            dir,
            slots: Vec::new(),
            armed: false,
        }
    }

    /// Reads the marks of the outbound SAs among `sas` (index `i` of the result for `sas[i]`; `None` for inbound
    /// SAs) and makes the first reservation of each durable (see [`SeqStore::reserve`]). Each SA is then built with
    /// its start and handed to [`SeqStore::track`].
    pub fn start(
        dir: StateDir,
        sas: &[SaParams],
    ) -> Result<(SeqStore, Vec<Option<SeqStart>>), ConfigError> {
        let mut store = SeqStore::open(dir);
        let mut starts = Vec::new();
        for (i, p) in sas.iter().enumerate() {
            starts.push(if p.direction == Direction::Out {
                Some(store.reserve(p, &format!("sa[{i}]"), false)?)
            } else {
                None
            });
        }
        Ok((store, starts))
    }

    /// Reserves, durably, the first block of sequence numbers of an outbound SA with the keys of `p`: it continues
    /// above every number ever sent under them. Keys that an SA of this run already used continue that SA's counter
    /// (nothing reserved). Keys that have used up their sequence space are refused (the error names `key`.enc_key).
    /// The SA, once built with this start, is handed to [`SeqStore::track`].
    ///
    /// `fresh`: the keys were negotiated for this SA (see [`crate::runtime::sa_port::KeyOrigin::Negotiated`]), so a missing
    /// mark is 0 even where the directory holds no record.
    pub fn reserve(
        &mut self,
        p: &SaParams,
        key: &str,
        fresh: bool,
    ) -> Result<SeqStart, ConfigError> {
        let file = seq_file(p);
        let limit = space_limit(p.esn);
        if let Some(s) = self.slots.iter().find(|s| s.file == file) {
            return match &s.counter {
                Some(c) if c.limit() == limit => Ok(SeqStart {
                    first: c.last() + 1,
                    reserved: c.reserved(),
                    counter: Some(c.clone()),
                }),
                Some(_) => Err(space_changed(key, p.esn)),
                // Reserved and not built yet: two SAs of one configuration with the same keys are refused before.
                None => Err(cerr(
                    &format!("{key}.enc_key"),
                    "another SA with these keys is being installed".into(),
                )),
            };
        }
        let mark = if fresh {
            self.dir
                .read_u64(&file)
                .map_err(|e| cerr(&format!("{key}.enc_key"), e))?
                .unwrap_or(0)
        } else {
            self.dir
                .read_mark(&file, &format!("{key}.enc_key"), &p.name)?
        };
        if mark >= limit {
            return Err(cerr(
                &format!("{key}.enc_key"),
                format!(
                    "these keys have used up their sequence space (mark {mark} in {}): configure new keys",
                    self.dir.path().join(&file).display()
                ),
            ));
        }
        let first = (mark + 1).max(p.first_seq);
        let reserved = first.saturating_add(SEQ_BLOCK - 1).min(limit);
        self.dir
            .write_u64(&file, reserved)
            .map_err(|e| write_error(&self.dir, &file, e))?;
        self.slots.push(SeqSlot {
            counter: None,
            name: p.name.clone(),
            live: 0,
            file,
            first,
            limit,
            failed: false,
        });
        Ok(SeqStart {
            first,
            reserved,
            counter: None,
        })
    }

    /// Follows the SA built with a start from [`SeqStore::reserve`] (matched by its keys): it is installed.
    pub fn track(&mut self, sa: Arc<OutboundSa>) {
        let file = seq_file(&sa.params);
        if let Some(s) = self.slots.iter_mut().find(|s| s.file == file) {
            if s.counter.is_none() {
                s.counter = Some(sa.counter().clone());
            }
            s.name = sa.params.name.clone();
            s.live += 1;
        }
    }

    /// The SA was removed (or not installed after all): its mark stays where it is (at or above every number it
    /// may still send from a batch in flight), and its counter stays for an SA with the same keys to continue.
    pub fn forget(&mut self, sa: &Arc<OutboundSa>) {
        if let Some(s) = self.slots.iter_mut().find(|s| {
            s.counter
                .as_ref()
                .is_some_and(|c| Arc::ptr_eq(c, sa.counter()))
        }) {
            s.live = s.live.saturating_sub(1);
        }
    }

    /// Reserves the next block of every installed SA's keys that have used half of their current one (durably, then
    /// in memory). Returns a message for each mark that could not be written (once per key until a write succeeds
    /// again): its SAs stop sending when the reservation runs out.
    pub fn top_up(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        for s in &mut self.slots {
            let Some(c) = &s.counter else { continue };
            if s.live == 0 {
                continue;
            }
            let reserved = c.reserved();
            let used = c.last().max(s.first - 1);
            if reserved >= s.limit || reserved - used > SEQ_BLOCK / 2 {
                continue;
            }
            // One block above what is used (not above the reservation): a crash right after this write skips at
            // most one block.
            let next = used.saturating_add(SEQ_BLOCK).min(s.limit);
            match self.dir.write_u64(&s.file, next) {
                Ok(()) => {
                    c.reserve_to(next);
                    s.failed = false;
                }
                Err(e) if !s.failed => {
                    s.failed = true;
                    errors.push(format!(
                        "SA '{}': cannot write its sequence mark {}: {e} (it stops sending at {reserved})",
                        s.name,
                        self.dir.path().join(&s.file).display()
                    ));
                }
                Err(_) => {}
            }
        }
        errors
    }

    /// The data plane is about to send: from now on the reservations stay (see [`SeqStore::finish`]).
    pub fn arm(&mut self) {
        self.armed = true;
    }

    /// After the data plane stopped: the marks become the last numbers used, so the next start skips none.
    pub fn finish(&mut self) {
        for s in &self.slots {
            if let Some(c) = &s.counter {
                let used = c.last().max(s.first - 1);
                let _ = self.dir.write_u64(&s.file, used);
            }
        }
    }
}

impl Drop for SeqStore {
    fn drop(&mut self) {
        if !self.armed {
            // Nothing was sent under these reservations: the marks go back to what they were.
            for s in &self.slots {
                let _ = self.dir.write_u64(&s.file, s.first - 1);
            }
        }
    }
}
