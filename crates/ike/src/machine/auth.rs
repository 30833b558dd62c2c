//! IKE_AUTH (RFC 7296 1.2, 2.15) with pre-shared keys or certificates (the signatures in [`super::pubkey`]), and the first CHILD_SA (2.9 narrowing, 2.17 keys).

use std::net::SocketAddr;
use std::time::Instant;

use super::framing::Opened;
use super::glue::{self, Range};
use super::sa::{Child, Chosen, IkeSa, Outcome, Purpose, State};
use super::{pubkey, Endpoint};
use crate::config::{AuthMethod, Mode, TsSpec};
use crate::event::{ChildSa, EspSa, Event, Failure};
use crate::id;
use crate::keys::{ChildKeys, ChildSuite, Role};
use crate::message::{payload_type, Id, Notify, NotifyType, Payload, Ts};
use crate::proposal::{self, Preference, Proposal};

/// A CHILD_SA that an exchange set up, for [`Endpoint::child_up`].
pub(super) struct NewChild<'a> {
    pub cfg: usize,
    pub chosen: Proposal,
    pub inbound_spi: u32,
    pub outbound_spi: u32,
    pub mode: Mode,
    pub local_ts: Vec<TsSpec>,
    pub remote_ts: Vec<TsSpec>,
    /// Whether we initiated the exchange that creates it (its Ni is ours).
    pub we_initiated: bool,
    pub ni: &'a [u8],
    pub nr: &'a [u8],
    pub shared: Option<&'a [u8]>,
    pub replaces: Option<u32>,
}

/// The ID payload body (type, reserved, data) as it is emitted.
fn id_body(id: &Id) -> Vec<u8> {
    let mut v = vec![0u8; id.buffer_len()];
    let n = id.emit(&mut v).unwrap_or(0);
    v.truncate(n);
    v
}

fn notify(t: NotifyType) -> Payload {
    Payload::Notify(Notify::new(t, Vec::new()))
}

fn ts_of(o: &Opened, t: u8) -> Option<&Ts> {
    o.payloads.iter().find_map(|p| match p {
        Payload::TsI(ts) if t == payload_type::TSI => Some(ts),
        Payload::TsR(ts) if t == payload_type::TSR => Some(ts),
        _ => None,
    })
}

fn sa_of(o: &Opened) -> Option<&crate::message::Sa> {
    o.payloads.iter().find_map(|p| match p {
        Payload::Sa(s) => Some(s),
        _ => None,
    })
}

fn has_notify(o: &Opened, t: NotifyType) -> bool {
    o.notifies().any(|n| n.notify_type == t)
}

/// Every selector of `got` lies inside one of `ours`.
fn within(got: &Ts, ours: &[TsSpec]) -> bool {
    got.selectors.iter().all(|s| {
        Range::of_selector(s).is_some_and(|r| ours.iter().any(|o| r.within(&Range::of_spec(o))))
    })
}

impl Endpoint {
    /// Initiator: IKE_AUTH with IDi, [IDr], AUTH, INITIAL_CONTACT, the child's SA and selectors. INITIAL_CONTACT
    /// asserts that this is our only IKE SA with the peer (RFC 7296 3.16): it goes only when no other IKE SA with
    /// the peer's address exists here, in any state, of the connection or of another with the same two ids (as
    /// strongSwan's `has_contact`, which looks by ids), so that a second IKE SA does not make the peer drop the
    /// first (strongSwan drops every IKE SA of the same ids on it).
    pub(super) fn send_auth(&mut self, sa: &mut IkeSa, now: Instant) {
        let me = &self.connections[sa.conn];
        let contact = self.sas.values().any(|o| {
            let c = &self.connections[o.conn];
            o.id != sa.id
                && o.remote.ip() == sa.remote.ip()
                && (o.conn == sa.conn || (c.local.id == me.local.id && c.remote.id == me.remote.id))
        });
        let conn = &self.connections[sa.conn];
        let (Some(keys), Some(ci)) = (sa.keys(), sa.hs().first_child) else {
            return;
        };
        let child = &conn.children[ci];
        let idi = pubkey::local_id(&conn.local, sa.local);
        let mut signed = keys.signed_octets(
            Role::Initiator,
            &sa.hs().init_sent,
            &sa.hs().nr,
            &id_body(&idi),
        );
        signed.extend(sa.int_auth(sa.my_mid));
        let prf = keys.suite().prf();
        let Some((auth, certs)) = pubkey::local_auth(conn, prf, &signed, &sa.hs().init_received)
        else {
            return;
        };
        let mut inner = vec![Payload::IdI(idi)];
        inner.extend(certs);
        if !contact {
            inner.push(notify(NotifyType::INITIAL_CONTACT));
        }
        if matches!(conn.remote.method, AuthMethod::PubKey(_)) {
            inner.extend(pubkey::certreq(std::slice::from_ref(conn)));
        }
        if let Some(idr) = glue::id_payload(&conn.remote.id) {
            inner.push(Payload::IdR(idr));
        }
        inner.push(Payload::Auth(auth));
        if child.mode == Mode::Transport {
            inner.push(notify(NotifyType::USE_TRANSPORT_MODE));
        }
        let esp: Vec<Proposal> = child.esp_proposals.iter().map(glue::without_ke).collect();
        let (local_ts, remote_ts) = (child.local_ts.clone(), child.remote_ts.clone());
        let spi = match sa.hs().first_child_spi {
            Some(s) => s,
            None => {
                let s = self.new_child_spi();
                sa.hs_mut().first_child_spi = Some(s);
                s
            }
        };
        inner.push(Payload::Sa(glue::sa_payload(&esp, &spi.to_be_bytes())));
        inner.push(Payload::TsI(glue::ts_payload(&local_ts)));
        inner.push(Payload::TsR(glue::ts_payload(&remote_ts)));
        sa.state = State::AuthSent;
        self.request(
            sa,
            crate::message::ExchangeType::IKE_AUTH,
            Purpose::Auth,
            &inner,
            now,
        );
    }

    /// The CHILD_SA event, and the child recorded in the SA. Keys: KEYMAT from the creating exchange's nonces
    /// (and PFS shared secret), the first half for the direction from that exchange's initiator.
    pub(super) fn child_up(&mut self, sa: &mut IkeSa, n: NewChild<'_>, now: Instant) -> bool {
        let conn = &self.connections[sa.conn];
        let child = &conn.children[n.cfg];
        let Some(keys) = sa.keys() else { return false };
        let Ok(suite) = ChildSuite::from_proposal(&n.chosen) else {
            return false;
        };
        let shared: Vec<&[u8]> = n.shared.into_iter().collect();
        let Ok(k) = ChildKeys::derive(suite, keys.suite().prf(), keys.sk_d(), &shared, n.ni, n.nr)
        else {
            return false;
        };
        let (i_to_r, r_to_i) = (
            (k.encr_i().clone(), k.integ_i().clone()),
            (k.encr_r().clone(), k.integ_r().clone()),
        );
        let (inb, outb) = if n.we_initiated {
            (r_to_i, i_to_r)
        } else {
            (i_to_r, r_to_i)
        };
        let udp_encap = sa.nat_local || sa.nat_remote || conn.encap;
        let ev = ChildSa {
            ike_sa: sa.id,
            connection: conn.name.clone(),
            child: child.name.clone(),
            proposal: n.chosen.clone(),
            mode: n.mode,
            local: sa.local,
            remote: sa.remote,
            udp_encap,
            inbound: EspSa {
                spi: n.inbound_spi,
                encr_key: inb.0,
                integ_key: inb.1,
            },
            outbound: EspSa {
                spi: n.outbound_spi,
                encr_key: outb.0,
                integ_key: outb.1,
            },
            local_ts: n.local_ts.clone(),
            remote_ts: n.remote_ts.clone(),
            replay_window: child.replay_window,
            replaces: n.replaces,
        };
        let l = child.lifetimes;
        let jitter = self.jitter(l.rand);
        let rekey = l.rekey.saturating_sub(jitter);
        // Room for exactly one more: a first push would make room for four (1.7 KB, mostly never used). The
        // selectors: one a side inline, more in a list of their exact size (see `Tss`).
        sa.children.reserve_exact(1);
        let (local_ts, remote_ts) = (n.local_ts.into(), n.remote_ts.into());
        sa.children.push(Child {
            cfg: n.cfg,
            rekey_at: now + if rekey.is_zero() { l.life } else { rekey },
            expire_at: now + l.life.max(rekey),
            inbound_spi: n.inbound_spi,
            outbound_spi: n.outbound_spi,
            mode: n.mode,
            proposal: Chosen::new(&n.chosen),
            local_ts,
            remote_ts,
            replaced: false,
        });
        self.events.push_back(Event::ChildSaUp(Box::new(ev)));
        true
    }

    fn ike_up(&mut self, sa: &mut IkeSa, now: Instant) {
        sa.state = State::Established;
        sa.was_up = true;
        // The handshake state goes once the first child is done (IkeSa::forget_handshake): a late copy of the
        // IKE_SA_INIT request then no longer matches and is dropped (the peer has moved on).
        sa.ike_rekey_at = self.ike_rekey_time(sa.conn, now);
        self.reauth_up(sa, now);
        sa.handshake = true;
        self.events.push_back(Event::IkeSaUp {
            ike_sa: sa.id,
            connection: self.connections[sa.conn].name.clone(),
        });
        self.resolve_twins(sa, now);
    }

    /// INITIAL_CONTACT (RFC 7296 2.4): the peer has no other IKE SA with us; the old ones of this connection and
    /// address go (their children with them), without a DELETE.
    fn initial_contact(&mut self, sa: &IkeSa) {
        let old: Vec<_> = self
            .sas
            .values()
            .filter(|o| {
                o.id != sa.id && o.conn == sa.conn && o.was_up && o.remote.ip() == sa.remote.ip()
            })
            .map(|o| o.id)
            .collect();
        for id in old {
            if let Some(o) = self.sas.remove(&id) {
                self.destroy(*o, None);
            }
        }
    }

    /// Responder: checks AUTH, picks the connection and the child, answers.
    pub(super) fn auth_request(
        &mut self,
        sa: &mut IkeSa,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        o: &Opened,
    ) -> Outcome {
        // Answer where the request came from (the initiator may have moved to port 4500).
        sa.local = local;
        sa.remote = remote;
        let mid = o.header.message_id;
        let ex = o.header.exchange_type;
        let one = |t| o.count(t) == 1;
        let (Some(idi), Some(idi_body), Some(Payload::Auth(auth))) = (
            o.idi(),
            o.idi_body.as_ref(),
            o.payloads
                .iter()
                .find(|p| p.payload_type() == payload_type::AUTH),
        ) else {
            self.respond(sa, ex, mid, &[notify(NotifyType::INVALID_SYNTAX)]);
            return Outcome::Forget;
        };
        if !one(payload_type::IDI) || !one(payload_type::AUTH) || o.count(payload_type::IDR) > 1 {
            self.respond(sa, ex, mid, &[notify(NotifyType::INVALID_SYNTAX)]);
            return Outcome::Forget;
        }
        let ci = match self.pick_connection(sa, idi, o.idr()) {
            Ok(ci) => ci,
            Err(m) => {
                self.respond(sa, ex, mid, &[notify(NotifyType::AUTHENTICATION_FAILED)]);
                self.fail(sa.conn, Some(sa.id), Failure::NoMatchingConnection(m));
                return Outcome::Forget;
            }
        };
        sa.conn = ci;
        let Some(keys) = sa.keys() else {
            return Outcome::Forget;
        };
        let prf = keys.suite().prf();
        let mut signed = keys.signed_octets(
            Role::Initiator,
            &sa.hs().init_received,
            &sa.hs().nr,
            idi_body,
        );
        signed.extend(sa.int_auth(mid));
        if let Err(failure) = self.check_peer_auth(ci, idi, auth, o, &signed, prf, now) {
            self.respond(sa, ex, mid, &[notify(NotifyType::AUTHENTICATION_FAILED)]);
            self.fail(ci, Some(sa.id), failure);
            return Outcome::Forget;
        }
        let conn = &self.connections[ci];
        let peer_id = glue::authenticated_id(&conn.remote.id, idi);
        let idr = pubkey::local_id(&conn.local, sa.local);
        let mut signed_r = keys.signed_octets(
            Role::Responder,
            &sa.hs().init_sent,
            &sa.hs().ni,
            &id_body(&idr),
        );
        signed_r.extend(sa.int_auth(mid));
        let Some((our_auth, certs)) =
            pubkey::local_auth(conn, prf, &signed_r, &sa.hs().init_received)
        else {
            self.respond(sa, ex, mid, &[notify(NotifyType::AUTHENTICATION_FAILED)]);
            return Outcome::Forget;
        };
        let mut inner = vec![Payload::IdR(idr)];
        inner.extend(certs);
        inner.push(Payload::Auth(our_auth));
        sa.peer_id = peer_id;
        self.half_open -= 1;
        self.ike_up(sa, now);
        if has_notify(o, NotifyType::INITIAL_CONTACT) {
            self.initial_contact(sa);
        }
        inner.extend(self.responder_child(sa, o, now));
        sa.forget_handshake();
        self.respond(sa, ex, mid, &inner);
        Outcome::Keep
    }

    /// Responder: the child's payloads for the IKE_AUTH response (or the notify that refuses it).
    fn responder_child(&mut self, sa: &mut IkeSa, o: &Opened, now: Instant) -> Vec<Payload> {
        let conn = &self.connections[sa.conn];
        let (Some(sa_p), Some(tsi), Some(tsr)) = (
            sa_of(o),
            ts_of(o, payload_type::TSI),
            ts_of(o, payload_type::TSR),
        ) else {
            // A childless IKE SA (RFC 6023 style): nothing to add.
            return Vec::new();
        };
        if o.count(payload_type::SA) != 1
            || o.count(payload_type::TSI) != 1
            || o.count(payload_type::TSR) != 1
        {
            return vec![notify(NotifyType::INVALID_SYNTAX)];
        }
        let (k, ts_i, ts_r) = match glue::pick_child(conn, tsi, tsr, |_| true) {
            Ok(p) => p,
            Err(failure) => {
                self.fail(sa.conn, Some(sa.id), failure);
                return vec![notify(NotifyType::TS_UNACCEPTABLE)];
            }
        };
        let child = &conn.children[k];
        let theirs = glue::esp_proposals(sa_p);
        let their_list: Vec<Proposal> = theirs.iter().map(|(_, p, _)| p.clone()).collect();
        let ours: Vec<Proposal> = child.esp_proposals.iter().map(glue::without_ke).collect();
        let Some(sel) = proposal::select(&ours, &their_list, Preference::Ours) else {
            self.fail_child(
                sa.conn,
                Some(sa.id),
                Some(k),
                Failure::NoProposalChosen {
                    ours: glue::names(&ours),
                    theirs: glue::names(&their_list),
                },
            );
            return vec![notify(NotifyType::NO_PROPOSAL_CHOSEN)];
        };
        let (idx, _, peer_spi) = theirs[sel.peer];
        let number = sa_p.proposals[idx].number;
        let mode = if child.mode == Mode::Transport && has_notify(o, NotifyType::USE_TRANSPORT_MODE)
        {
            Mode::Transport
        } else {
            Mode::Tunnel
        };
        let spi = self.new_child_spi();
        let mut out = Vec::new();
        if mode == Mode::Transport {
            out.push(notify(NotifyType::USE_TRANSPORT_MODE));
        }
        out.push(Payload::Sa(crate::message::Sa {
            proposals: vec![glue::to_wire(&sel.chosen, number, &spi.to_be_bytes())],
        }));
        out.push(Payload::TsI(Ts {
            selectors: ts_i.iter().map(Range::selector).collect(),
        }));
        out.push(Payload::TsR(Ts {
            selectors: ts_r.iter().map(Range::selector).collect(),
        }));
        let (ni, nr) = (sa.hs().ni.clone(), sa.hs().nr.clone());
        let n = NewChild {
            cfg: k,
            chosen: sel.chosen,
            inbound_spi: spi,
            outbound_spi: peer_spi,
            mode,
            local_ts: glue::specs(&ts_r),
            remote_ts: glue::specs(&ts_i),
            we_initiated: false,
            ni: &ni,
            nr: &nr,
            shared: None,
            replaces: None,
        };
        if !self.child_up(sa, n, now) {
            self.inbound_spis.remove(&spi);
            return vec![notify(NotifyType::NO_PROPOSAL_CHOSEN)];
        }
        out
    }

    /// Initiator: the IKE_AUTH response.
    pub(super) fn auth_response(&mut self, sa: &mut IkeSa, now: Instant, o: &Opened) -> Outcome {
        let conn = &self.connections[sa.conn];
        let auth = o.payloads.iter().find_map(|p| match p {
            Payload::Auth(a) => Some(a),
            _ => None,
        });
        if auth.is_none() {
            let failure = match o.notifies().find(|n| n.notify_type.is_error()) {
                Some(n) if n.notify_type == NotifyType::AUTHENTICATION_FAILED => {
                    Failure::AuthenticationFailed {
                        id: glue::identity_string(&conn.local.id),
                        by_peer: true,
                    }
                }
                Some(n) => Failure::PeerError {
                    notify: n.notify_type.0,
                    name: n.notify_type.name().unwrap_or("unknown").to_string(),
                },
                None => return Outcome::Ignore,
            };
            return Outcome::Destroy(Some(failure));
        }
        let (Some(auth), Some(idr), Some(idr_body), Some(keys)) =
            (auth, o.idr(), o.idr_body.as_ref(), sa.keys())
        else {
            let f = Failure::Malformed("IKE_AUTH response (an AUTH payload without an IDr)".into());
            return self.refuse_responder(sa, now, f);
        };
        if o.count(payload_type::AUTH) != 1 || o.count(payload_type::IDR) != 1 {
            let f = Failure::Malformed("IKE_AUTH response (more than one AUTH or IDr)".into());
            return self.refuse_responder(sa, now, f);
        }
        let mut signed = keys.signed_octets(
            Role::Responder,
            &sa.hs().init_received,
            &sa.hs().ni,
            idr_body,
        );
        signed.extend(sa.int_auth(o.header.message_id));
        if !id::id_matches(&conn.remote.id, idr) {
            let f = Failure::UnexpectedId {
                got: glue::id_string(idr),
                want: glue::identity_string(&conn.remote.id),
            };
            return self.refuse_responder(sa, now, f);
        }
        let prf = keys.suite().prf();
        if let Err(failure) = self.check_peer_auth(sa.conn, idr, auth, o, &signed, prf, now) {
            return self.refuse_responder(sa, now, failure);
        }
        let peer_id = glue::authenticated_id(&self.connections[sa.conn].remote.id, idr);
        sa.peer_id = peer_id;
        sa.pending = None;
        sa.my_mid += 1;
        self.ike_up(sa, now);
        self.initiator_child(sa, o, now);
        sa.forget_handshake();
        self.after_response(sa, now);
        Outcome::Keep
    }

    /// Initiator: we refuse the responder's IKE_AUTH answer (its authentication, its identity, or a malformed
    /// answer) for `failure`. The responder took our authentication and holds an established IKE SA with a child
    /// installed: it is told, as RFC 7296 2.21.2 has it, in an INFORMATIONAL request on the new SA with
    /// AUTHENTICATION_FAILED (what strongSwan's initiator sends; charon 5.x deletes its IKE SA on it and answers).
    /// The SA stays here as `Deleting` (never reported up, no child) only to retransmit that request until it is
    /// answered or given up, then goes without further events; `failure` is reported now.
    fn refuse_responder(&mut self, sa: &mut IkeSa, now: Instant, failure: Failure) -> Outcome {
        self.fail(sa.conn, Some(sa.id), failure);
        sa.pending = None;
        sa.my_mid = sa.my_mid.wrapping_add(1);
        if let Some(spi) = sa.hs_mut().first_child_spi.take() {
            self.inbound_spis.remove(&spi);
        }
        sa.queued_children = None;
        sa.forget_handshake();
        self.request(
            sa,
            crate::message::ExchangeType::INFORMATIONAL,
            Purpose::DeleteIke,
            &[notify(NotifyType::AUTHENTICATION_FAILED)],
            now,
        );
        sa.state = State::Deleting;
        Outcome::Keep
    }

    /// Initiator: the first child from the IKE_AUTH response, if the responder's choices are among ours.
    fn initiator_child(&mut self, sa: &mut IkeSa, o: &Opened, now: Instant) {
        let Some(spi) = sa.hs_mut().first_child_spi.take() else {
            return;
        };
        let conn = &self.connections[sa.conn];
        let Some(ci) = sa.hs().first_child else {
            return;
        };
        let child = &conn.children[ci];
        if let Some(n) = o.notifies().find(|n| n.notify_type.is_error()) {
            self.inbound_spis.remove(&spi);
            let failure = glue::peer_refusal(
                n,
                || {
                    let offered: Vec<Proposal> =
                        child.esp_proposals.iter().map(glue::without_ke).collect();
                    glue::names(&offered)
                },
                || {
                    child
                        .local_ts
                        .iter()
                        .chain(&child.remote_ts)
                        .copied()
                        .collect()
                },
            );
            self.fail_child(sa.conn, Some(sa.id), Some(ci), failure);
            return;
        }
        let ours: Vec<Proposal> = child.esp_proposals.iter().map(glue::without_ke).collect();
        let got = sa_of(o).map(glue::esp_proposals).unwrap_or_default();
        let (tsi, tsr) = (ts_of(o, payload_type::TSI), ts_of(o, payload_type::TSR));
        let chosen = match &got[..] {
            [(_, p, peer_spi)]
                if p.is_single() && sa_of(o).is_some_and(|s| s.proposals.len() == 1) =>
            {
                proposal::select(&ours, std::slice::from_ref(p), Preference::Ours)
                    .filter(|s| &s.chosen == p)
                    .map(|_| (p.clone(), *peer_spi))
            }
            _ => None,
        };
        let Some((chosen, peer_spi)) = chosen else {
            self.inbound_spis.remove(&spi);
            let theirs = got.iter().map(|(_, p, _)| p.to_string()).collect();
            let f = Failure::NoProposalChosen {
                ours: glue::names(&ours),
                theirs,
            };
            self.fail_child(sa.conn, Some(sa.id), Some(ci), f);
            return;
        };
        let ts_ok = match (tsi, tsr) {
            (Some(i), Some(r)) => within(i, &child.local_ts) && within(r, &child.remote_ts),
            _ => false,
        };
        if !ts_ok {
            let ours = child
                .local_ts
                .iter()
                .chain(&child.remote_ts)
                .copied()
                .collect();
            let mut theirs = tsi.map(glue::ts_specs).unwrap_or_default();
            theirs.extend(tsr.map(glue::ts_specs).unwrap_or_default());
            self.inbound_spis.remove(&spi);
            self.fail_child(
                sa.conn,
                Some(sa.id),
                Some(ci),
                Failure::TsUnacceptable { ours, theirs },
            );
            return;
        }
        let mode = if child.mode == Mode::Transport && has_notify(o, NotifyType::USE_TRANSPORT_MODE)
        {
            Mode::Transport
        } else {
            Mode::Tunnel
        };
        let (l, r) = (
            tsi.map(glue::ts_specs).unwrap_or_default(),
            tsr.map(glue::ts_specs).unwrap_or_default(),
        );
        let (ni, nr) = (sa.hs().ni.clone(), sa.hs().nr.clone());
        let n = NewChild {
            cfg: ci,
            chosen,
            inbound_spi: spi,
            outbound_spi: peer_spi,
            mode,
            local_ts: l,
            remote_ts: r,
            we_initiated: true,
            ni: &ni,
            nr: &nr,
            shared: None,
            replaces: None,
        };
        if !self.child_up(sa, n, now) {
            self.inbound_spis.remove(&spi);
        }
    }
}
