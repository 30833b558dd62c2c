//! What the data plane reads ([`Snapshot`]), and the SAs as the control plane keeps them ([`Installed`]).

use super::*;

/// What the data plane reads: built by the control plane, never changed once published.
pub struct Snapshot {
    /// Every SA: the named ones at the indices policies use, then the retiring inbound ones (aliases).
    pub sad: Sad,
    /// Policies in order, each with its SAs resolved against `sad` (empty for a protect policy whose SAs are not
    /// all there).
    pub policies: Vec<SnapPolicy>,
    pub spd: PolicyDb,
    /// Some policy selects by port: later fragments (no ports) need their first fragment's decision.
    pub port_selective: bool,
    /// Per protect policy without SAs (by index, in order): 1 + the second of its last acquire. (Only those can
    /// have acquires: a gateway's thousands of policies with their SAs need no entry in every snapshot.)
    acquired: Vec<(usize, AtomicU64)>,
    /// Unique per snapshot built in this process: what a data-plane thread's remembered decision was made under
    /// (see [`crate::engines::ip::FragCache`]).
    pub generation: u64,
}

/// A policy as the data plane uses it: the control plane's rule (shared, not copied per snapshot) and its SAs
/// in this snapshot. The rule's own `sas` are not resolved (always empty): only `sas` here are.
pub struct SnapPolicy {
    pub rule: Arc<PolicyRule>,
    pub sas: Bundle,
}

/// The generation of the next snapshot built.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

impl Snapshot {
    /// Policies resolve their SAs by name among the SAs of their own direction only: an outbound policy can never
    /// reach an inbound SA (whose keys are the peer's sending keys), whatever was added or removed in between. A
    /// policy whose SAs are not all installed in its direction gets none (its traffic is dropped).
    pub(super) fn build(t: &Tables) -> Snapshot {
        Self::build_in(t, None)
    }

    /// [`Snapshot::build`] into the tables of `spare` (a snapshot emptied by [`Snapshot::into_spare`]), if any:
    /// one is built for every change, and a gateway's thousands of negotiated CHILD_SAs make its tables large. Built
    /// afresh each time, the new tables (allocated while the snapshot in force still holds its own) never fit where
    /// the ones before were freed, and the heap kept growing by freed room; reused, the two alternate.
    pub(super) fn build_in(t: &Tables, spare: Option<Snapshot>) -> Snapshot {
        let (mut sad, mut spd, mut policies, mut acquired) = match spare {
            Some(s) => (s.sad, s.spd, s.policies, s.acquired),
            None => (
                Sad::default(),
                PolicyDb::new(t.default_action),
                Vec::new(),
                Vec::new(),
            ),
        };
        debug_assert!(sad.iter().next().is_none() && policies.is_empty() && acquired.is_empty());
        spd.clear(t.default_action);
        // Rebuilt for every change: a fast hasher (the names are ours, not an attacker's choice), and one map for
        // both directions (names are unique), sized for the SAs (two maps sized so were twice the room, and that
        // room stays in the heap for the next rebuild: 100 bytes per CHILD_SA).
        let mut by_name: HashMap<&str, SaIdx, ahash::RandomState> =
            HashMap::with_capacity_and_hasher(t.sas.len(), Default::default());
        for sa in &t.sas {
            match sa {
                Installed::Out(o) => {
                    by_name.insert(&o.params.name, SaIdx::Out(sad.insert_out_arc(o.clone())));
                }
                Installed::In(i) => {
                    // Clashes were refused when the SA was added.
                    if let Ok(x) = sad.insert_in_arc(i.clone()) {
                        by_name.insert(&i.params.name, SaIdx::In(x));
                    }
                }
            }
        }
        let out = |n: &String| match by_name.get(n.as_str()) {
            Some(&SaIdx::Out(x)) => Some(x),
            _ => None,
        };
        let inb = |n: &String| match by_name.get(n.as_str()) {
            Some(&SaIdx::In(x)) => Some(x),
            _ => None,
        };
        for r in &t.retiring {
            if let Some(i) = inb(&r.successor) {
                let _ = sad.insert_alias(r.sa.clone(), i);
            }
        }
        policies.reserve(t.policies.len());
        for (j, p) in t.policies.iter().enumerate() {
            let mut sas = Bundle::None;
            let mut action = p.action;
            if let Action::Protect(_) = p.action {
                action = Action::Protect(j);
                if !p.psp {
                    sas = match p.direction {
                        netveil_sa::policy::Direction::Out => p
                            .sa_names
                            .iter()
                            .map(out)
                            .collect::<Option<_>>()
                            .map_or(Bundle::None, Bundle::Out),
                        netveil_sa::policy::Direction::In => p
                            .sa_names
                            .iter()
                            .map(inb)
                            .collect::<Option<_>>()
                            .map_or(Bundle::None, Bundle::In),
                    };
                }
            }
            spd.push(Rule {
                direction: p.direction,
                selector: p.selector.clone(),
                action,
            });
            policies.push(SnapPolicy {
                rule: p.clone(),
                sas,
            });
        }
        Snapshot {
            port_selective: policies.iter().any(|p| {
                !p.rule.selector.src_ports.is_any() || !p.rule.selector.dst_ports.is_any()
            }),
            acquired: {
                acquired.extend(
                    policies
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| {
                            matches!(p.rule.action, Action::Protect(_))
                                && !p.rule.psp
                                && p.sas.is_empty()
                        })
                        .map(|(i, _)| (i, AtomicU64::new(0))),
                );
                acquired
            },
            generation: NEXT_GENERATION.fetch_add(1, Relaxed),
            sad,
            policies,
            spd,
        }
    }

    /// This snapshot emptied (its SAs and policies released at once), its tables kept for [`Snapshot::build_in`].
    pub(super) fn into_spare(mut self) -> Snapshot {
        self.sad.clear();
        self.policies.clear();
        self.spd.clear(Action::Discard);
        self.acquired.clear();
        self
    }

    /// Whether traffic for protect policy `i`, which has no SAs, is to be reported now: at most once per policy
    /// and second.
    pub fn acquire_due(&self, i: usize, now: u64) -> bool {
        let Ok(k) = self.acquired.binary_search_by_key(&i, |(j, _)| *j) else {
            return false;
        };
        let a = &self.acquired[k].1;
        let prev = a.load(Relaxed);
        prev != now + 1 && a.compare_exchange(prev, now + 1, Relaxed, Relaxed).is_ok()
    }
}

/// An installed SA of either direction, as the control plane keeps them (by name, in the order added).
#[derive(Clone)]
pub enum Installed {
    Out(Arc<OutboundSa>),
    In(Arc<InboundSa>),
}

impl Installed {
    /// What both directions have.
    pub fn base(&self) -> &SaBase {
        match self {
            Installed::Out(s) => s,
            Installed::In(s) => s,
        }
    }
    pub fn params(&self) -> &SaParams {
        &self.base().params
    }
    pub(super) fn addr(&self) -> usize {
        self.base() as *const SaBase as usize
    }
    /// The SAs of a database built from a configuration (`at`: where each of its SAs went, in file order).
    pub fn of(sad: &Sad, at: &[SaIdx]) -> Vec<Installed> {
        at.iter()
            .map(|x| match *x {
                SaIdx::Out(i) => Installed::Out(sad.out_arc(i).clone()),
                SaIdx::In(i) => Installed::In(sad.in_arc(i).clone()),
            })
            .collect()
    }
}

/// An event of an SA (`sa-added`, `soft-lifetime`, ...).
pub(super) fn sa_event(event: &str, sa: &SaBase) -> Event {
    Event {
        sa: Some(sa.params.name.clone()),
        spi: Some(format!("{:#010x}", sa.spi())),
        ..Event::new(event)
    }
}

/// An acquire: traffic of `flow` for protect policy `policy`, which has no SA.
pub fn acquire(policy: &str, flow: &FlowKey) -> Event {
    let ports = if netveil_sa::policy::has_ports(flow.proto) {
        format!(" {} -> {}", flow.src_port, flow.dst_port)
    } else {
        String::new()
    };
    Event {
        policy: Some(policy.to_string()),
        flow: Some(format!(
            "{} -> {} proto {}{ports}",
            flow.src, flow.dst, flow.proto
        )),
        ..Event::new("acquire")
    }
}
