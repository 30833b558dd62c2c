//! Which connection serves a peer's IKE_AUTH request (responder), and what to say when none does.
//!
//! The best match, as strongSwan chooses its peer config, not the first one listed: among the connections whose
//! addresses, IKE proposal and credentials fit, the one whose remote id names the peer's IDi exactly beats one
//! with `%any`; then the one whose local id is the IDr the peer asked for (if it asked); then the one with
//! addresses configured over one open to any. A `%any` connection serves only identities that no connection names:
//! a peer claiming an id that a specific connection names is that connection's or no one's (with its pre-shared
//! key, its certificate constraints). Otherwise a peer holding only the wildcard connection's PSK could claim any
//! named identity and show as it in `status` (strongSwan, which looks PSKs up by identity, refuses it too).

use std::net::IpAddr;

use super::sa::IkeSa;
use super::{glue, Endpoint};
use crate::config::{AuthMethod, Connection, Identity};
use crate::event::NoMatch;
use crate::id;
use crate::message::Id;
use crate::proposal::{self, Preference};

/// How well a configured identity fits a received one: 0 not at all, 1 as `%any`, 2 exactly.
fn id_score(conf: &Identity, got: &Id) -> u8 {
    match conf {
        Identity::Any => 1,
        _ if id::id_matches(conf, got) => 2,
        _ => 0,
    }
}

/// A connection's addresses as text: `%any` when open.
fn addrs(a: &[IpAddr]) -> String {
    if a.is_empty() {
        return "%any".into();
    }
    a.iter()
        .map(IpAddr::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A connection as `name: local[id]...remote[id]`, strongSwan's way of printing both ends.
pub(super) fn describe(c: &Connection) -> String {
    format!(
        "{}: {}[{}]...{}[{}]",
        c.name,
        addrs(&c.local_addrs),
        glue::identity_string(&c.local.id),
        addrs(&c.remote_addrs),
        glue::identity_string(&c.remote.id)
    )
}

impl Endpoint {
    /// The failure's details for a peer at `remote` that reached us at `local`, claiming `idi` and asking for
    /// `idr` (both `None` before IKE_AUTH).
    pub(super) fn no_match(
        &self,
        local: IpAddr,
        remote: IpAddr,
        idi: Option<&Id>,
        idr: Option<&Id>,
        why: Option<String>,
    ) -> Box<NoMatch> {
        let n = NoMatch::SHOWN.min(self.connections.len());
        Box::new(NoMatch {
            local,
            remote,
            local_id: idr.map(glue::id_string),
            remote_id: idi.map(glue::id_string),
            expected: self.connections[..n].iter().map(describe).collect(),
            more: self.connections.len() - n,
            why,
        })
    }

    /// The connection that serves the IKE_AUTH request of responder SA `sa` from a peer claiming `idi` and asking
    /// for `idr` (see the module's documentation), or why none does.
    pub(super) fn pick_connection(
        &self,
        sa: &IkeSa,
        idi: &Id,
        idr: Option<&Id>,
    ) -> Result<usize, Box<NoMatch>> {
        let chosen_ike = sa.proposal();
        let (local, remote) = (sa.local.ip(), sa.init_remote.ip());
        // Some connection names the claimed identity: no wildcard one serves it.
        let named = self
            .connections
            .iter()
            .any(|c| id_score(&c.remote.id, idi) == 2);
        let mut best: Option<((u8, u8, u8), usize)> = None;
        // Why the connections that name the identity were not taken.
        let mut why = Vec::new();
        let mut wildcard_skipped = false;
        for (ci, c) in self.connections.iter().enumerate() {
            let r = id_score(&c.remote.id, idi);
            if r == 1 && named {
                wildcard_skipped = true;
                continue;
            }
            if r == 0 {
                continue;
            }
            let l = idr.map_or(1, |idr| id_score(&c.local.id, idr));
            let addrs_ok = (c.local_addrs.is_empty() || c.local_addrs.contains(&local))
                && (c.remote_addrs.is_empty() || c.remote_addrs.contains(&remote));
            let ike_ok = chosen_ike.as_ref().is_some_and(|p| {
                proposal::select(&c.proposals, std::slice::from_ref(p), Preference::Ours)
                    .is_some_and(|s| &s.chosen == p)
            });
            let creds = c.psk.is_some() || matches!(c.remote.method, AuthMethod::PubKey(_));
            let not = if l == 0 {
                Some("its local id is not the one the peer asked for")
            } else if !addrs_ok {
                Some("its addresses do not match")
            } else if !ike_ok {
                Some("it does not take the IKE proposal chosen in IKE_SA_INIT")
            } else if !creds {
                Some("it has no pre-shared key")
            } else {
                None
            };
            if let Some(not) = not {
                if r == 2 {
                    why.push(format!("connection {} names it, but {not}", c.name));
                }
                continue;
            }
            let specific =
                u8::from(!c.remote_addrs.is_empty()) + u8::from(!c.local_addrs.is_empty());
            let score = (r, l, specific);
            if best.is_none_or(|(b, _)| score > b) {
                best = Some((score, ci));
            }
        }
        if let Some((_, ci)) = best {
            return Ok(ci);
        }
        if wildcard_skipped {
            why.push("a %any connection does not serve an id that a connection names".into());
        }
        let why = (!why.is_empty()).then(|| why.join("; "));
        Err(self.no_match(local, remote, Some(idi), idr, why))
    }
}
