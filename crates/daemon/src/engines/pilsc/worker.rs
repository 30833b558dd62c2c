//! The PILSC engine's queue worker: reads the two netfilter queues, seals and opens packets as the rules say,
//! and keeps the counters' marks and the receive windows' floors in the state directory.

use super::control::{rule_infos, Reason, ReloadMsg, Shared, Stats};
use super::marks::{mark_file, rx_file, RxFloors, MARK_BLOCK, RX_BLOCK_MILLIS, RX_MIN_BLOCK};
use super::BATCH;
use crate::runtime::state::StateDir;
use netveil_io::nfqueue::{NfQueue, Queued, Verdict, HEADROOM, MESSAGE_MAX};
use netveil_pilsc::packet::{marking, Mode, OpenError, SealError};
use netveil_pilsc::policy::{decide as policy_decide, file_rule, judged_parsed, Unjudged};
use netveil_pilsc::rules::{Keys, RuleFile};
use netveil_pilsc::table::{Settings, Table};
use netveil_sa::flow_cache::CachedPolicy;
use netveil_sa::policy::{Action, Direction};
use netveil_wire::ip::Headers;
use netveil_wire::PacketBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(super) struct Worker {
    /// Scratch of [`Worker::rx_top_up`]: a key's sources (kept: no allocation per batch).
    pub(super) due: Vec<(std::net::Ipv4Addr, u64, u64)>,
    pub(super) reload_rx: std::sync::mpsc::Receiver<ReloadMsg>,
    pub(super) shared: Arc<Shared>,
    pub(super) settings: Settings,
    /// Per key and source: the window's top and the time at the last rate estimate, and the block it gave.
    pub(super) rates:
        std::collections::HashMap<(usize, std::net::Ipv4Addr), (u64, std::time::Instant, u64)>,
    pub(super) mode: Mode,
    pub(super) q: NfQueue,
    pub(super) table: Table,
    /// The rule file's policy with a flow cache in front (a flow's later packets skip the rule tables).
    pub(super) db: CachedPolicy,
    pub(super) dir: StateDir,
    pub(super) marks: Vec<(String, u64)>,
    pub(super) stats: Arc<Stats>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) qout: u16,
}

/// What the rules say of a clear IPv4 packet going `dir`: the lookup's answer and whether an ICMP error's quoted
/// flow gave it ([`netveil_pilsc::policy::decide`]); or why it cannot be judged.
pub(super) fn decide(
    db: &mut CachedPolicy,
    dir: Direction,
    pkt: &[u8],
) -> std::result::Result<((Option<usize>, Action), bool), Reason> {
    let h = Headers::parse(pkt).map_err(|_| Reason::Malformed)?;
    decide_parsed(db, dir, pkt, &h)
}

/// [`decide`] of a packet whose headers `h` are (parsed from `pkt` as it is).
pub(super) fn decide_parsed(
    db: &mut CachedPolicy,
    dir: Direction,
    pkt: &[u8],
    h: &Headers,
) -> std::result::Result<((Option<usize>, Action), bool), Reason> {
    let j = judged_parsed(pkt, h).map_err(|e| match e {
        Unjudged::Malformed => Reason::Malformed,
        Unjudged::UnreadableError => Reason::IcmpErrorUnreadable,
    })?;
    Ok(policy_decide(&j, |k| db.lookup(dir, k)))
}

/// [`clamp_mss_parsed`] of a packet whose headers are read here (tests).
#[cfg(test)]
pub(super) fn clamp_mss(pkt: &mut [u8], by: u16) {
    if let Ok(h) = Headers::parse(pkt) {
        clamp_mss_parsed(pkt, &h, by);
    }
}

/// Lowers the MSS option of a TCP SYN by `by` bytes (and mends its checksum): a protected packet grows by the
/// option after the host sized it, and the kernel would drop a full-sized segment with DF set, telling TCP an MTU
/// it already uses. Each side's sealed SYN (or SYN-ACK) asks its peer for segments small enough to grow. Other
/// packets are left alone. `h`: the packet's headers, parsed from `pkt` as it is (this changes only the TCP
/// header: `h` stays true of the IP header).
pub(super) fn clamp_mss_parsed(pkt: &mut [u8], h: &Headers, by: u16) {
    if h.version() != 4 || h.protocol() != 6 || h.fragment().is_some() {
        return;
    }
    let (src, dst) = h.addrs();
    let Some(l4) = pkt.get_mut(h.header_len()..h.total_len()) else {
        return;
    };
    let Ok(mut t) = netveil_wire::tcp::Packet::new_checked(l4) else {
        return;
    };
    if !t.syn() {
        return;
    }
    let o = t.options_mut();
    let mut i = 0;
    let mut changed = false;
    while i < o.len() {
        match o[i] {
            0 => break,
            1 => i += 1,
            kind => {
                let Some(&len) = o.get(i + 1) else { break };
                let len = len as usize;
                if len < 2 || i + len > o.len() {
                    break;
                }
                if kind == 2 && len == 4 {
                    let mss = u16::from_be_bytes([o[i + 2], o[i + 3]]); // check-ip-offsets: allow (a TCP option)
                    let new = mss.saturating_sub(by).max(536.min(mss));
                    o[i + 2..i + 4].copy_from_slice(&new.to_be_bytes());
                    changed = true;
                }
                i += len;
            }
        }
    }
    if changed {
        t.fill_checksum(src, dst);
    }
}

/// Puts `n` bytes of NOP options back where the opened packet's option 130 was (after its header's other options):
/// the kernel parsed the protected packet's header length before the input hook and keeps its transport offset,
/// so a packet given back with a shorter header would be read from the wrong place (its transport checksum then
/// fails). The header keeps its length; its options say nothing. `h`: the opened packet's header length (the
/// fixed header's: a protected packet carries option 130 and nothing else). False if the buffer has no room (it
/// always has: the option was there).
pub(super) fn nop_in_place_of_option(b: &mut PacketBuf, h: usize, n: usize) -> bool {
    if h > b.len() || h + n > 60 || b.push_front(n).is_none() {
        return false;
    }
    let d = b.data_mut();
    d.copy_within(n..n + h, 0);
    d[h..h + n].fill(1);
    let total = d.len();
    let mut p = netveil_wire::ipv4::Packet::new_unchecked(d);
    p.set_header_len(h + n);
    p.set_total_len(total as u16);
    p.fill_checksum();
    true
}

impl Worker {
    pub(super) fn run(mut self) {
        let mut bufs: Vec<PacketBuf> = (0..BATCH)
            .map(|_| PacketBuf::new(HEADROOM + MESSAGE_MAX, HEADROOM))
            .collect();
        let mut meta = vec![Queued::default(); BATCH];
        let mut verdicts = [Verdict::Drop; BATCH];
        while !self.stop.load(Ordering::Relaxed) {
            let n = match self.q.recv_batch(&mut bufs, &mut meta) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    tracing::warn!(
                        "pilsc: the kernel dropped queued packets (receive buffer full)"
                    );
                    0
                }
                Err(e) => {
                    tracing::error!("pilsc: netfilter queue: {e}");
                    break;
                }
            };
            for i in 0..n {
                verdicts[i] = if meta[i].queue == self.qout {
                    self.outbound(&mut bufs[i])
                } else {
                    self.inbound(&mut bufs[i])
                };
            }
            if n > 0 {
                if let Err(e) = self
                    .q
                    .verdicts(n, |i| (meta[i], verdicts[i], bufs[i].data()))
                {
                    tracing::warn!("pilsc: verdicts: {e}");
                }
            }
            self.top_up();
            self.rx_top_up();
            if let Ok(m) = self.reload_rx.try_recv() {
                let r = self.apply(m.file, m.keys);
                let _ = m.reply.send(r);
            }
        }
        self.finish();
    }

    /// Reserves the next block of a key whose sealer used half of its current one (synced before it goes on).
    pub(super) fn top_up(&mut self) {
        for (slot, (name, reserved)) in self.table.keys.iter_mut().zip(self.marks.iter_mut()) {
            let next = slot.sealer.next_counter();
            if next.saturating_add(MARK_BLOCK / 2) > *reserved {
                let r = reserved.saturating_add(MARK_BLOCK);
                match self.dir.write_u64(name, r) {
                    Ok(()) => {
                        *reserved = r;
                        slot.sealer.extend(r.saturating_add(1));
                    }
                    Err(e) => tracing::error!("pilsc: cannot write the counter mark {name}: {e}"),
                }
            }
        }
    }

    /// Raises the receive ceilings of sources whose traffic nears them: by about [`RX_BLOCK_MILLIS`] of the
    /// source's recent rate (at least [`RX_MIN_BLOCK`]), synced before the window gets there.
    pub(super) fn rx_top_up(&mut self) {
        let now = std::time::Instant::now();
        for (k, slot) in self.table.keys.iter_mut().enumerate() {
            let name = &self.marks[k].0;
            self.due.clear();
            self.due.extend(slot.opener.sources());
            for &(src, top, ceiling) in &self.due {
                let r = self
                    .rates
                    .entry((k, src))
                    .or_insert((top, now, RX_MIN_BLOCK));
                let dt = now.duration_since(r.1);
                // The rate, measured over at least 20 ms (a burst right after a start gets its block at once).
                if dt >= Duration::from_millis(20) {
                    let per_block = (top.saturating_sub(r.0) as u128 * RX_BLOCK_MILLIS as u128
                        / dt.as_millis().max(1)) as u64;
                    *r = (top, now, per_block.max(RX_MIN_BLOCK));
                }
                let block = r.2;
                if top.saturating_add(block / 2) > ceiling {
                    let c = top.saturating_add(block);
                    match self.dir.write_u64(&rx_file(name, src), c) {
                        Ok(()) => slot.opener.set_ceiling(src, c),
                        Err(e) => tracing::error!("pilsc: cannot write a receive floor: {e}"),
                    }
                }
            }
        }
    }

    /// Puts a reloaded rule file in force (between two batches). Keys of the old table (same bytes, same
    /// algorithm) move over with their sealer and opener: counters and replay windows continue; new keys start
    /// above their marks, reserved and synced first. Nothing changes if that fails.
    pub(super) fn apply(
        &mut self,
        file: RuleFile,
        keys: Keys,
    ) -> std::result::Result<String, String> {
        let old: std::collections::HashMap<String, usize> = self
            .marks
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), i))
            .collect();
        let mut marks: Vec<(String, u64, Option<usize>)> = Vec::new();
        let mut errors = Vec::new();
        let dir = &self.dir;
        let mut table = Table::build(&file, &keys, &self.settings, |id, cipher, key| {
            let name = mark_file(cipher, key);
            if let Some(&i) = old.get(&name) {
                marks.push((name, 0, Some(i)));
                return (1, 2);
            }
            match dir.read_mark(&name, "pilsc.state_dir", &format!("pilsc key {id:#06x}")) {
                Ok(m) => {
                    let reserved = m.saturating_add(MARK_BLOCK);
                    marks.push((name, reserved, None));
                    (m + 1, reserved.saturating_add(1))
                }
                Err(e) => {
                    errors.push(e.reason);
                    (1, 1)
                }
            }
        })
        .map_err(|e| e.to_string())?;
        if let Some(e) = errors.into_iter().next() {
            return Err(e);
        }
        for (name, reserved, was) in &marks {
            if was.is_none() {
                dir.write_u64(name, *reserved)
                    .map_err(|e| format!("cannot write {name}: {e}"))?;
            }
        }
        // Committed from here on.
        let (mut kept, mut new) = (0, 0);
        let mut new_marks = Vec::with_capacity(marks.len());
        for (i, (name, reserved, was)) in marks.into_iter().enumerate() {
            match was {
                Some(j) => {
                    let (a, b) = (&mut table.keys[i], &mut self.table.keys[j]);
                    std::mem::swap(&mut a.sealer, &mut b.sealer);
                    std::mem::swap(&mut a.opener, &mut b.opener);
                    new_marks.push(self.marks[j].clone());
                    kept += 1;
                }
                None => {
                    new_marks.push((name, reserved));
                    new += 1;
                }
            }
        }
        // Keys that go: their marks become the last counter used.
        let staying: std::collections::HashSet<&String> =
            new_marks.iter().map(|(n, _)| n).collect();
        for (j, (name, _)) in self.marks.iter().enumerate() {
            if !staying.contains(name) {
                let used = self.table.keys[j].sealer.next_counter().saturating_sub(1);
                let _ = self.dir.write_u64(name, used);
            }
        }
        let db = netveil_pilsc::policy::compile(&file, &table.rule_key);
        let stats = Arc::new(Stats::new(file.rules.len()));
        stats
            .passed
            .store(self.stats.passed.load(Ordering::Relaxed), Ordering::Relaxed);
        for (a, b) in stats.drops.iter().zip(&self.stats.drops) {
            a.store(b.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        let n_keys = table.keys.len();
        self.table = table;
        // (The cache forgets every flow: its answers name the old table's keys.)
        self.db.replace(db);
        self.marks = new_marks;
        self.rates.clear();
        self.stats = stats.clone();
        *self.shared.view.lock().unwrap_or_else(|e| e.into_inner()) =
            (stats, Arc::new(rule_infos(&file)), n_keys);
        Ok(format!(
            "{} rules, {n_keys} keys ({kept} kept with their counters, {new} new)",
            file.rules.len()
        ))
    }

    /// A clean stop: each key's mark becomes the last counter used, each source's receive floor the highest
    /// counter accepted (nothing above it was).
    pub(super) fn finish(&mut self) {
        for (k, slot) in self.table.keys.iter().enumerate() {
            for (src, top, _) in slot.opener.sources() {
                if let Err(e) = self.dir.write_u64(&rx_file(&self.marks[k].0, src), top) {
                    tracing::error!("pilsc: cannot write a receive floor: {e}");
                }
            }
        }
        for (slot, (name, _)) in self.table.keys.iter().zip(&self.marks) {
            let used = slot.sealer.next_counter().saturating_sub(1);
            if let Err(e) = self.dir.write_u64(name, used) {
                tracing::error!("pilsc: cannot write the counter mark {name}: {e}");
            }
        }
    }

    pub(super) fn outbound(&mut self, b: &mut PacketBuf) -> Verdict {
        // Not IPv4 we can read: the queue holds only IPv4, so a packet we cannot parse goes nowhere. An ICMP
        // error is judged by the flow it quotes: the kernel's "port unreachable" for a datagram we opened quotes
        // its plaintext, and is sealed under that datagram's rule. The headers are parsed once, here: the rules,
        // the MSS clamp and the sealer read them (the clamp changes only the TCP header).
        let hdrs = match Headers::parse(b.data()) {
            Ok(h) => h,
            Err(_) => return self.stats.dropped(Reason::Malformed),
        };
        let d = match decide_parsed(&mut self.db, Direction::Out, b.data(), &hdrs) {
            Ok((d, _)) => d,
            Err(r) => return self.stats.dropped(r),
        };
        // The action names the key itself (see `compile`); `Discard` is a protected rule without one.
        let (r, k) = match d {
            (Some(at), Action::Protect(k)) => (file_rule(at), k),
            (_, Action::Discard) => return self.stats.dropped(Reason::Policy),
            _ => {
                self.stats.passed.fetch_add(1, Ordering::Relaxed);
                return Verdict::Accept;
            }
        };
        clamp_mss_parsed(b.data_mut(), &hdrs, self.mode.option_len() as u16);
        let (start, len) = (b.headroom(), b.len());
        match self.table.keys[k]
            .sealer
            .seal_parsed(b.storage_mut(), start, len, &hdrs)
        {
            Ok((s, l)) => {
                b.reset(s);
                b.set_len(l);
                self.stats.hit(r, false, l);
                Verdict::AcceptChanged
            }
            Err(SealError::Exhausted) => self.stats.dropped(Reason::Exhausted),
            Err(SealError::Options) => self.stats.dropped(Reason::IpOptions),
            Err(_) => self.stats.dropped(Reason::SealFailed),
        }
    }

    pub(super) fn inbound(&mut self, b: &mut PacketBuf) -> Verdict {
        let m = match marking(b.data()) {
            Ok(m) => m,
            Err(_) => return self.stats.dropped(Reason::Malformed),
        };
        let Some(m) = m else {
            // Clear: only where no protected rule covers it; an ICMP error, only where it quotes no protected flow
            // (from whatever source: errors are queued from everywhere).
            return match decide(&mut self.db, Direction::In, b.data()) {
                Err(r) => self.stats.dropped(r),
                Ok(((_, Action::Protect(_) | Action::Discard), true)) => {
                    self.stats.dropped(Reason::IcmpErrorInClear)
                }
                Ok(((_, Action::Protect(_) | Action::Discard), false)) => {
                    self.stats.dropped(Reason::ClearCovered)
                }
                Ok(_) => {
                    self.stats.passed.fetch_add(1, Ordering::Relaxed);
                    Verdict::Accept
                }
            };
        };
        // The marking is of this very header, checked: its source and the fields the opener reads come with it.
        let src = m.src();
        let Some(k) = self.table.key_for(m.key_id, src) else {
            return self.stats.dropped(Reason::UnknownKey);
        };
        let (start, len) = (b.headroom(), b.len());
        let mut floors = RxFloors {
            dir: &self.dir,
            name: &self.marks[k].0,
        };
        match self.table.keys[k]
            .opener
            .open_marked(b.storage_mut(), start, len, &m, &mut floors)
        {
            Ok((s, l)) => {
                b.reset(s);
                b.set_len(l);
                let opened_header = netveil_wire::ipv4::MIN_HEADER_LEN;
                if !nop_in_place_of_option(b, opened_header, self.mode.option_len()) {
                    return self.stats.dropped(Reason::Malformed);
                }
            }
            Err(e) => {
                return self.stats.dropped(match e {
                    OpenError::Replay => Reason::Replay,
                    OpenError::Auth => Reason::Auth,
                    OpenError::Checksum => Reason::Checksum,
                    OpenError::WrongMode => Reason::WrongMode,
                    OpenError::WrongKey => Reason::UnknownKey,
                    OpenError::TooManySources => Reason::TooManySources,
                    OpenError::State => Reason::RxState,
                    OpenError::Options => Reason::IpOptions,
                    OpenError::Malformed | OpenError::Fragment | OpenError::Unmarked => {
                        Reason::Malformed
                    }
                })
            }
        }
        // The clear headers (an ICMP error's: those it quotes) must select a protected rule of this very key.
        match decide(&mut self.db, Direction::In, b.data()) {
            Ok(((Some(at), Action::Protect(key)), _)) if key == k => {
                self.stats.hit(file_rule(at), true, b.len());
                Verdict::AcceptChanged
            }
            Ok(_) => self.stats.dropped(Reason::Policy),
            Err(r) => self.stats.dropped(r),
        }
    }
}
