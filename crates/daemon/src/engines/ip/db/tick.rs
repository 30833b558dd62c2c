//! The control plane's periodic work.

use super::*;

impl Db {
    /// The events after `since` (oldest first) that are still kept.
    pub fn events_since(&self, since: u64) -> Vec<Event> {
        self.tables()
            .log
            .iter()
            .filter(|e| e.id > since)
            .cloned()
            .collect()
    }

    /// The control plane's periodic work (the engine's tick): events from the data plane, lifetimes and sequence
    /// space, retired SAs, sequence reservations; with `filters`, the socket filters (windows move). Returns the
    /// problems to log.
    pub fn tick(&self, now: u64, filters: bool, storm: bool) -> Vec<String> {
        let mut t = self.tables();
        let arrived: Vec<Event> = match self.events_in.lock() {
            Ok(rx) => rx.try_iter().collect(),
            Err(_) => Vec::new(),
        };
        for e in arrived {
            t.push_event(e, now);
        }
        let mut found = Vec::new();
        let mut flagged = Vec::new();
        for installed in t.sas.iter() {
            let sa = installed.base();
            let key = installed.addr();
            let done = t.reported.get(&key).copied().unwrap_or(0);
            let mut flags = done;
            match sa.lifetime_state(now) {
                LifetimeState::Expired if done & REPORTED_HARD == 0 => {
                    flags |= REPORTED_HARD | REPORTED_SOFT;
                    found.push(sa_event("hard-lifetime", sa));
                }
                LifetimeState::Soft if done & REPORTED_SOFT == 0 => {
                    flags |= REPORTED_SOFT;
                    found.push(sa_event("soft-lifetime", sa));
                }
                _ => {}
            }
            if let Installed::Out(o) = installed {
                if done & REPORTED_SEQ == 0
                    && o.seq_limit() - o.seq_last() < o.seq_limit() / SEQ_WARN_FRACTION
                {
                    flags |= REPORTED_SEQ;
                    found.push(sa_event("seq-nearly-spent", sa));
                }
            }
            if flags != done {
                flagged.push((key, flags));
            }
        }
        t.reported.extend(flagged);
        for e in found {
            t.push_event(e, now);
        }
        if t.retiring.iter().any(|r| r.until <= now) {
            let gone: Vec<Arc<InboundSa>> = t
                .retiring
                .iter()
                .filter(|r| r.until <= now)
                .map(|r| r.sa.clone())
                .collect();
            t.retiring.retain(|r| r.until > now);
            self.snap.store(Arc::new(Snapshot::build(&t)));
            for sa in &gone {
                t.untrack(&Installed::In(sa.clone()));
            }
            for sa in gone {
                t.push_event(sa_event("sa-retired", &sa), now);
            }
        }
        let mut problems = match t.seq.as_mut() {
            Some(s) => s.top_up(),
            None => Vec::new(),
        };
        if let Some(r) = t.rx.as_mut() {
            problems.extend(r.top_up());
        }
        if filters {
            t.storm = storm;
            problems.extend(refresh_filters(&mut t, &self.snap.load().sad, false));
        }
        problems
    }
}

/// Installs the socket filters for the current SAs and windows where they changed (`force`: after a change of
/// SAs, before the change is reported done). Returns the problems to log.
pub(super) fn refresh_filters(t: &mut Tables, sad: &Sad, force: bool) -> Vec<String> {
    let (storm, mtu) = (t.storm, t.interface.mtu);
    let mut problems = Vec::new();
    for (layout, sock, installed) in t.filters.iter_mut() {
        let p = esp_filter_for(sad, *layout, storm, mtu, sock.family(*layout));
        if force || p != *installed {
            // A failed attach leaves the kernel's program (still `installed`), so the next refresh tries again.
            match sock.attach(p.as_ref()) {
                Ok(()) => *installed = p,
                Err(e) => problems.push(format!("cannot attach a socket filter: {e}")),
            }
        }
    }
    problems
}
