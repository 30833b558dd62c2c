//! Changes applied as one ([`Db::batch`]): each checked against the tables as the earlier ones left them and
//! applied to the tables in place, with what undoes it noted; then one publication (the nftables table only when
//! the batch can change it, one snapshot, the socket filters). A refused change or a failed publication undoes
//! the batch in reverse, so the tables are as before, and nothing was published.
//!
//! This is what makes a negotiated CHILD_SA cheap to install: no table is copied (the old way copied the SA,
//! retiring and policy tables for every change), one snapshot is built for the CHILD_SA's two SAs and its bound
//! policies, and the nftables text is not even regenerated when the batch provably leaves it as it is (see
//! [`Neutral`]).

use super::check::{check_policy, check_sa};
use super::*;
use crate::runtime::sa_port::SaOp;

/// What undoes one applied change.
enum Undo {
    SaPushed,
    SaRemoved {
        at: usize,
        sa: Installed,
        /// The retiring inbound SAs that went with it, each with its index at its removal.
        gone: Vec<(usize, Retiring)>,
    },
    /// A policy inserted (bound or not) at this index.
    PolicyInserted(usize),
    PolicyRemoved {
        at: usize,
        rule: Arc<PolicyRule>,
    },
}

/// What a batch does once it is in force.
enum After {
    Event(Event),
    /// An SA removed: its sequence mark or receive floor is no longer followed, its reports forgotten.
    Forget(Installed),
    /// A policy added at runtime was removed: the state directory's list follows.
    Runtime(String),
}

/// What the changes of a batch applied so far leave to do: undo them (a later one refused), or follow them up.
struct Staged {
    undo: Vec<Undo>,
    after: Vec<After>,
    /// The SAs built (untracked again if the batch is undone).
    built: Vec<Installed>,
    neutral: Neutral,
}

/// Whether the changes so far provably leave the nftables table's text as it is, so that it need not be
/// regenerated and compared. The text depends on the SAs only through the peer filter, over the inbound SAs
/// (see [`crate::engines::ip::nft::nft_peer_filter_with`]): a tunnel-mode inbound SA adds its remote address (and, if
/// UDP-encapsulated, the ESP-in-UDP port), which is already there when the key-exchange drivers' expected peers
/// ([`crate::engines::ip::nft::KxPeers`]) list the address (and allow UDP encapsulation). Bound policies get no rules of their
/// own; they count only through the transport-mode inbound SAs they name (whose peers are the sources of the
/// policies naming them). Everything else (a transport-mode inbound SA, a policy of its own) regenerates the text.
struct Neutral(bool);

impl Neutral {
    fn sa(&mut self, p: &SaParams, kx: &crate::engines::ip::nft::KxPeers) {
        let covered = match (p.direction, p.mode) {
            (SaDir::Out, _) => true,
            (SaDir::In, netveil_ipsec::Mode::Tunnel { remote, .. }) => {
                kx.addrs.contains(&remote) && (p.encap.is_none() || kx.nat_t)
            }
            (SaDir::In, netveil_ipsec::Mode::Transport) => false,
        };
        self.0 &= covered;
    }

    /// A bound policy naming `names`: neutral unless one of them is a transport-mode inbound SA.
    fn bound(&mut self, t: &Tables, names: &[String]) {
        let transport_in = |n: &String| {
            t.sas.iter().any(|s| {
                let p = s.params();
                &p.name == n && p.direction == SaDir::In && p.mode == netveil_ipsec::Mode::Transport
            })
        };
        self.0 &= !names.iter().any(transport_in);
    }
}

impl Db {
    /// Applies `ops` as one (see the module documentation and [`crate::runtime::sa_port::SaPort::batch`]).
    pub fn batch(&self, ops: Vec<SaOp>, now: u64) -> Result<(), ChangeError> {
        let mut t = self.tables();
        let mut st = Staged {
            undo: Vec::new(),
            after: Vec::new(),
            built: Vec::new(),
            neutral: Neutral(true),
        };
        let mut r = Ok(());
        for op in ops {
            r = Self::stage(&mut t, op, now, &mut st);
            if r.is_err() {
                break;
            }
        }
        let Staged {
            undo,
            after,
            built,
            neutral,
        } = st;
        let r = r.and_then(|()| {
            if undo.is_empty() {
                Ok(())
            } else {
                self.publish_in_place(&mut t, neutral.0)
            }
        });
        if let Err(e) = r {
            for u in undo.into_iter().rev() {
                match u {
                    Undo::SaPushed => {
                        t.sas.pop();
                    }
                    Undo::SaRemoved { at, sa, gone } => {
                        for (k, r) in gone.into_iter().rev() {
                            t.retiring.insert(k, r);
                        }
                        t.sas.insert(at, sa);
                    }
                    Undo::PolicyInserted(at) => {
                        t.policies.remove(at);
                    }
                    Undo::PolicyRemoved { at, rule } => {
                        t.policies.insert(at, rule);
                    }
                }
            }
            for sa in &built {
                t.untrack(sa);
            }
            return Err(e);
        }
        let mut runtime_changed = false;
        for a in after {
            match a {
                After::Event(e) => t.push_event(e, now),
                After::Forget(sa) => {
                    t.untrack(&sa);
                    t.reported.remove(&sa.addr());
                }
                After::Runtime(name) => {
                    t.runtime.retain(|(n, _)| n != &name);
                    runtime_changed = true;
                }
            }
        }
        if runtime_changed {
            // Stored after it took effect (a crash in between restores it: more covered, never less).
            if let Err(e) = t.save_runtime(&t.policies, &t.runtime) {
                tracing::warn!("{}: {e}", t.interface.name);
            }
        }
        Ok(())
    }

    /// Checks one change against the tables as they stand and applies it to them, noting what undoes it.
    fn stage(t: &mut Tables, op: SaOp, now: u64, st: &mut Staged) -> Result<(), ChangeError> {
        match op {
            SaOp::AddIn(p) => {
                let keys = p.sa.keys;
                Self::stage_add(t, p.into_params(), keys, now, st)
            }
            SaOp::AddOut(p) => {
                let keys = p.sa.keys;
                Self::stage_add(t, p.into_params(), keys, now, st)
            }
            SaOp::DelSa(name) => {
                crate::runtime::names::check_name("name", &name)?;
                let at = t.index(&name).ok_or_else(|| super::change::no_sa(&name))?;
                let sa = t.sas.remove(at);
                st.neutral.sa(sa.params(), &t.kx_peers);
                let mut gone = Vec::new();
                let mut k = 0;
                while k < t.retiring.len() {
                    if t.retiring[k].successor == name {
                        let r = t.retiring.remove(k);
                        st.neutral.sa(&r.sa.params, &t.kx_peers);
                        gone.push((k, r));
                    } else {
                        k += 1;
                    }
                }
                st.after
                    .push(After::Event(sa_event("sa-removed", sa.base())));
                st.after.push(After::Forget(sa.clone()));
                for (_, r) in &gone {
                    st.after.push(After::Forget(Installed::In(r.sa.clone())));
                }
                st.undo.push(Undo::SaRemoved { at, sa, gone });
                Ok(())
            }
            SaOp::Bind { policy, cover } => {
                let sas: Vec<&SaParams> = t.sas.iter().map(|s| s.params()).collect();
                let mut p = check_policy(&policy, t.psp.is_some(), &sas)?;
                if t.policies.iter().any(|o| o.name == p.name) {
                    return Err(ConfigError {
                        key: "policy.name".into(),
                        reason: format!("'{}' is used by another policy", p.name),
                    });
                }
                let at = t
                    .policies
                    .iter()
                    .position(|o| o.name == cover)
                    .ok_or_else(|| ConfigError {
                        key: "policy.cover".into(),
                        reason: format!("no policy named '{cover}' to bind '{}' under", p.name),
                    })?;
                let c = &t.policies[at];
                let protect = |r: &PolicyRule| matches!(r.action, Action::Protect(_)) && !r.psp;
                if c.cover.is_some()
                    || c.direction != p.direction
                    || !protect(c)
                    || !protect(&p)
                    || !selector_within(&p.selector, &c.selector)
                {
                    return Err(ConfigError {
                        key: "policy.cover".into(),
                        reason: format!(
                            "'{}' is not covered by policy '{cover}' (same direction, both protect with IPsec \
                             SAs, its selector within '{cover}''s)",
                            p.name
                        ),
                    });
                }
                st.neutral.bound(t, &p.sa_names);
                // Newest first, ahead of those already bound under `cover`: where a new CHILD_SA's selectors
                // repeat an older one's (reauthentication, a peer's restart), traffic moves to the new SAs the
                // moment they are in, as the peer's does when it answers (the old ones go shortly after).
                let under = |o: &Arc<PolicyRule>| o.cover.as_ref().is_some_and(|c| **c == *cover);
                let first = t.policies[..at].iter().position(under);
                // The name shared by all bound under `cover`: no allocation per CHILD_SA.
                p.cover = match first {
                    Some(k) => t.policies[k].cover.clone(),
                    None => Some(Arc::new(cover)),
                };
                let at = first.unwrap_or(at);
                let name = p.name.clone();
                t.policies.insert(at, Arc::new(p));
                st.undo.push(Undo::PolicyInserted(at));
                st.after.push(After::Event(Event {
                    policy: Some(name),
                    ..Event::new("policy-added")
                }));
                Ok(())
            }
            SaOp::DelPolicy(name) => {
                crate::runtime::names::check_name("name", &name)?;
                if let Some(b) = t
                    .policies
                    .iter()
                    .find(|r| r.cover.as_ref().is_some_and(|c| **c == *name))
                {
                    return Err(ConfigError {
                        key: "name".into(),
                        reason: format!(
                            "policy '{}' is bound under '{name}': remove it first",
                            b.name
                        ),
                    });
                }
                let at = t
                    .policies
                    .iter()
                    .position(|p| p.name == name)
                    .ok_or_else(|| ConfigError {
                        key: "name".into(),
                        reason: format!("no policy named '{name}'"),
                    })?;
                let rule = t.policies.remove(at);
                if rule.cover.is_some() {
                    st.neutral.bound(t, &rule.sa_names);
                } else {
                    st.neutral.0 = false;
                }
                if t.runtime.iter().any(|(n, _)| *n == name) {
                    st.after.push(After::Runtime(name.clone()));
                }
                st.after.push(After::Event(Event {
                    policy: Some(name),
                    ..Event::new("policy-removed")
                }));
                st.undo.push(Undo::PolicyRemoved { at, rule });
                Ok(())
            }
        }
    }

    fn stage_add(
        t: &mut Tables,
        p: SaParams,
        keys: KeyOrigin,
        now: u64,
        st: &mut Staged,
    ) -> Result<(), ChangeError> {
        {
            let others: Vec<&SaParams> = t.sas.iter().map(|s| s.params()).collect();
            check_sa(&p, &t.interface, &others)?;
        }
        if let Some(r) = t.retiring.iter().find(|r| {
            p.direction == SaDir::In && r.sa.spi() == p.spi && r.sa.protocol() == p.protocol()
        }) {
            return Err(super::change::spi_taken(&p, &r.sa));
        }
        t.check_policies_of(&p)?;
        t.check_new(&p, None)?;
        st.neutral.sa(&p, &t.kx_peers);
        let sa = t.build_sa(p, keys, now)?;
        st.built.push(sa.clone());
        st.after.push(After::Event(sa_event("sa-added", sa.base())));
        t.sas.push(sa);
        st.undo.push(Undo::SaPushed);
        Ok(())
    }

    /// Puts the tables as they stand in force: the nftables table first unless `neutral` (then it provably would
    /// not change), then the snapshot, then the socket filters. On an error nothing was published (the caller
    /// undoes its changes to the tables).
    pub(super) fn publish_in_place(
        &self,
        t: &mut Tables,
        neutral: bool,
    ) -> Result<(), ChangeError> {
        if let Some(table) = t.nft_table.clone() {
            if neutral {
                debug_assert_eq!(
                    crate::engines::ip::nft::nft_table_text_with(&t.view(), &table, &t.kx_peers),
                    t.nft_text,
                    "a change judged neutral for the nftables table changed it"
                );
            } else {
                let text =
                    crate::engines::ip::nft::nft_table_text_with(&t.view(), &table, &t.kx_peers);
                if text != t.nft_text {
                    let r = match &text {
                        Some(x) => crate::runtime::engine::nft_install(&table, x),
                        None => {
                            crate::runtime::engine::run(&["nft", "delete", "table", "inet", &table])
                        }
                    };
                    if let Err(e) = r {
                        return Err(ConfigError {
                            key: "policy".into(),
                            reason: format!("cannot update the nftables table {table}: {e}"),
                        });
                    }
                    t.nft_text = text;
                }
            }
        }
        let spare = t.spare.take();
        let snap = Arc::new(Snapshot::build_in(t, spare));
        let old = self.snap.swap(snap.clone());
        // Unless a data-plane thread still reads it (then it goes when that one is done), the snapshot replaced
        // is emptied now and its tables kept for the next.
        t.spare = Arc::try_unwrap(old).ok().map(Snapshot::into_spare);
        for e in refresh_filters(t, &snap.sad, false) {
            tracing::warn!("{}: {e}", t.interface.name);
        }
        Ok(())
    }
}
