//! CREATE_CHILD_SA for CHILD_SAs (RFC 7296 1.3.1 new, 1.3.3 rekey, 2.17 keys with PFS): both roles, and the
//! rekey timers. A rekey installs the new CHILD_SA (`replaces` names the old one's inbound SPI) and then its
//! initiator deletes the old one with an INFORMATIONAL DELETE (2.8). Rekeying the IKE SA itself is in `rekey`.

use std::time::Instant;

use netveil_crypto::dh::KeyPair;

use super::auth::NewChild;
use super::framing::Opened;
use super::glue::{self, Range};
use super::init::{dh_group, NONCE_LEN};
use super::sa::{ChildExchange, IkeSa, Outcome, Purpose, State};
use super::{Endpoint, EndpointError};
use crate::config::{Mode, TsSpec};
use crate::event::{Failure, IkeSaId};
use crate::message::sa::protocol_id;
use crate::message::{ExchangeType, Ke, Nonce, Notify, NotifyType, Payload, Ts};
use crate::proposal::{self, Preference, Proposal};

fn notify(t: NotifyType) -> Payload {
    Payload::Notify(Notify::new(t, Vec::new()))
}

fn within(got: &Ts, ours: &[TsSpec]) -> bool {
    got.selectors.iter().all(|s| {
        Range::of_selector(s).is_some_and(|r| ours.iter().any(|o| r.within(&Range::of_spec(o))))
    })
}

impl Endpoint {
    /// Starts a new CHILD_SA of `child` (a name in the IKE SA's connection) in an established IKE SA.
    pub fn create_child(
        &mut self,
        ike_sa: IkeSaId,
        child: &str,
        now: Instant,
    ) -> Result<(), EndpointError> {
        let mut sa = self
            .sas
            .remove(&ike_sa)
            .ok_or(EndpointError::UnknownIkeSa(ike_sa))?;
        let cfg = self.connections[sa.conn]
            .children
            .iter()
            .position(|c| c.name == child);
        let r = match cfg {
            None => Err(EndpointError::UnknownChild {
                connection: self.connections[sa.conn].name.clone(),
                child: child.to_string(),
            }),
            Some(_) if sa.state != State::Established || sa.pending.is_some() => {
                Err(EndpointError::Busy)
            }
            Some(cfg) => {
                self.send_create_child(&mut sa, cfg, None, now);
                Ok(())
            }
        };
        self.sas.insert(ike_sa, sa);
        r
    }

    /// Rekeys the CHILD_SA whose inbound SPI is `inbound_spi` (with PFS when its proposals have a KE group).
    pub fn rekey_child(
        &mut self,
        ike_sa: IkeSaId,
        inbound_spi: u32,
        now: Instant,
    ) -> Result<(), EndpointError> {
        let mut sa = self
            .sas
            .remove(&ike_sa)
            .ok_or(EndpointError::UnknownIkeSa(ike_sa))?;
        let child = sa
            .children
            .iter()
            .find(|c| c.inbound_spi == inbound_spi && !c.replaced)
            .map(|c| c.cfg);
        let r = match child {
            Some(cfg) if sa.state == State::Established && sa.pending.is_none() => {
                self.send_create_child(&mut sa, cfg, Some(inbound_spi), now);
                Ok(())
            }
            _ => Err(EndpointError::Busy),
        };
        self.sas.insert(ike_sa, sa);
        r
    }

    /// Our CREATE_CHILD_SA request: [REKEY_SA], [USE_TRANSPORT_MODE], SA, Ni, [KEi], TSi, TSr.
    pub(super) fn send_create_child(
        &mut self,
        sa: &mut IkeSa,
        cfg: usize,
        rekey: Option<u32>,
        now: Instant,
    ) {
        let child = &self.connections[sa.conn].children[cfg];
        let (local_ts, remote_ts) =
            match rekey.and_then(|s| sa.children.iter().find(|c| c.inbound_spi == s)) {
                Some(old) => (old.local_ts.clone(), old.remote_ts.clone()),
                None => (
                    child.local_ts.clone().into(),
                    child.remote_ts.clone().into(),
                ),
            };
        let proposals = child.esp_proposals.clone();
        let mode = child.mode;
        let x = match sa.child_x.take() {
            // An INVALID_KE retry keeps the nonce; its group is already set in `dh`.
            Some(x) => x,
            None => {
                let mut ni = vec![0u8; NONCE_LEN];
                self.rng.fill(&mut ni);
                let group = proposals
                    .iter()
                    .find_map(|p| p.ke().first().copied())
                    .and_then(dh_group);
                Box::new(ChildExchange {
                    ni,
                    dh: group.map(|g| KeyPair::generate(g, &mut *self.rng)),
                    ke_retried: false,
                })
            }
        };
        let spi = self.new_child_spi();
        let mut inner = Vec::new();
        if let Some(old) = rekey {
            inner.push(Payload::Notify(Notify {
                protocol_id: protocol_id::ESP,
                spi: old.to_be_bytes().to_vec(),
                notify_type: NotifyType::REKEY_SA,
                data: Vec::new(),
            }));
        }
        if mode == Mode::Transport {
            inner.push(notify(NotifyType::USE_TRANSPORT_MODE));
        }
        inner.push(Payload::Sa(glue::sa_payload(
            &proposals,
            &spi.to_be_bytes(),
        )));
        inner.push(Payload::Nonce(
            Nonce::new(x.ni.clone()).expect("32-byte nonce"),
        ));
        if let Some(k) = &x.dh {
            let method = crate::proposal::Ke::ALL
                .iter()
                .copied()
                .find(|m| dh_group(*m) == Some(k.group()))
                .expect("a group we generate has an id");
            inner.push(Payload::Ke(Ke {
                group: method.id(),
                data: k.public().to_vec(),
            }));
        }
        inner.push(Payload::TsI(glue::ts_payload(&local_ts)));
        inner.push(Payload::TsR(glue::ts_payload(&remote_ts)));
        sa.child_x = Some(x);
        self.request(
            sa,
            ExchangeType::CREATE_CHILD_SA,
            Purpose::CreateChild { cfg, spi, rekey },
            &inner,
            now,
        );
    }

    /// The answer to our CREATE_CHILD_SA.
    pub(super) fn child_response(
        &mut self,
        sa: &mut IkeSa,
        now: Instant,
        o: &Opened,
        (cfg, spi, rekey): (usize, u32, Option<u32>),
    ) -> Outcome {
        sa.pending = None;
        sa.my_mid = sa.my_mid.wrapping_add(1);
        let x = sa.child_x.take();
        let fail = |this: &mut Endpoint, sa: &mut IkeSa, f: Failure| {
            this.inbound_spis.remove(&spi);
            this.fail_child(sa.conn, Some(sa.id), Some(cfg), f);
        };
        let child = self.connections[sa.conn].children[cfg].clone();
        if let Some(n) = o.notifies().find(|n| n.notify_type.is_error()) {
            // INVALID_KE_PAYLOAD: once more with the group asked for, if we offer it.
            if let (Some(g), Some(mut x)) = (n.invalid_ke_group(), x) {
                let offered = child
                    .esp_proposals
                    .iter()
                    .flat_map(|p| p.ke())
                    .find(|k| k.id() == g);
                if let (false, Some(group)) = (x.ke_retried, offered.and_then(|k| dh_group(*k))) {
                    self.inbound_spis.remove(&spi);
                    x.ke_retried = true;
                    x.dh = Some(KeyPair::generate(group, &mut *self.rng));
                    sa.child_x = Some(x);
                    self.send_create_child(sa, cfg, rekey, now);
                    return Outcome::Keep;
                }
            }
            if let (NotifyType::TEMPORARY_FAILURE, Some(old)) = (n.notify_type, rekey) {
                // A collision we lost, or a peer busy: the rekey is tried again a little later.
                self.inbound_spis.remove(&spi);
                let wait = self.retry_delay();
                if let Some(c) = sa.children.iter_mut().find(|c| c.inbound_spi == old) {
                    c.rekey_at = (now + wait).min(c.expire_at);
                }
                self.after_response(sa, now);
                return Outcome::Keep;
            }
            let f = glue::peer_refusal(
                n,
                || glue::names(&child.esp_proposals),
                || {
                    child
                        .local_ts
                        .iter()
                        .chain(&child.remote_ts)
                        .copied()
                        .collect()
                },
            );
            fail(self, sa, f);
            self.after_response(sa, now);
            return Outcome::Keep;
        }
        let Some(x) = x else {
            return Outcome::Keep;
        };
        let got = o.one_sa();
        let nr = o.one_nonce();
        let tsi = o.one_ts(true);
        let tsr = o.one_ts(false);
        let ours = child.esp_proposals.clone();
        let chosen = got.and_then(|s| match &glue::esp_proposals(s)[..] {
            [(_, p, peer_spi)] if s.proposals.len() == 1 && p.is_single() => {
                proposal::select(&ours, std::slice::from_ref(p), Preference::Ours)
                    .filter(|sel| &sel.chosen == p)
                    .map(|_| (p.clone(), *peer_spi))
            }
            _ => None,
        });
        let (Some((chosen, peer_spi)), Some(nr), Some(tsi), Some(tsr)) = (chosen, nr, tsi, tsr)
        else {
            let theirs = got.map(|s| {
                glue::esp_proposals(s)
                    .iter()
                    .map(|(_, p, _)| p.to_string())
                    .collect()
            });
            fail(
                self,
                sa,
                Failure::NoProposalChosen {
                    ours: glue::names(&ours),
                    theirs: theirs.unwrap_or_default(),
                },
            );
            self.after_response(sa, now);
            return Outcome::Keep;
        };
        // PFS: the responder's KE in the chosen group, validated.
        let shared = match (chosen.ke().first(), &x.dh) {
            (None, _) => None,
            (Some(m), Some(k)) if dh_group(*m) == Some(k.group()) => {
                let ke = o.one_ke();
                ke.filter(|ke| ke.group == m.id())
                    .and_then(|ke| k.agree(&ke.data).ok())
            }
            _ => None,
        };
        if !chosen.ke().is_empty() && shared.is_none() {
            fail(
                self,
                sa,
                Failure::PeerError {
                    notify: NotifyType::INVALID_SYNTAX.0,
                    name: "INVALID_SYNTAX".into(),
                },
            );
            self.after_response(sa, now);
            return Outcome::Keep;
        }
        let (want_l, want_r) =
            match rekey.and_then(|s| sa.children.iter().find(|c| c.inbound_spi == s)) {
                Some(old) => (old.local_ts.clone(), old.remote_ts.clone()),
                None => (
                    child.local_ts.clone().into(),
                    child.remote_ts.clone().into(),
                ),
            };
        if !within(tsi, &want_l) || !within(tsr, &want_r) {
            let mut theirs = glue::ts_specs(tsi);
            theirs.extend(glue::ts_specs(tsr));
            let ours_ts = want_l.iter().chain(&want_r).copied().collect();
            fail(
                self,
                sa,
                Failure::TsUnacceptable {
                    ours: ours_ts,
                    theirs,
                },
            );
            self.after_response(sa, now);
            return Outcome::Keep;
        }
        let mode = if child.mode == Mode::Transport
            && o.notifies()
                .any(|n| n.notify_type == NotifyType::USE_TRANSPORT_MODE)
        {
            Mode::Transport
        } else {
            Mode::Tunnel
        };
        let n = NewChild {
            cfg,
            chosen,
            inbound_spi: spi,
            outbound_spi: peer_spi,
            mode,
            local_ts: glue::ts_specs(tsi),
            remote_ts: glue::ts_specs(tsr),
            we_initiated: true,
            ni: &x.ni,
            nr: nr.as_bytes(),
            shared: shared.as_ref().map(|s| s.as_slice()),
            replaces: rekey,
        };
        if !self.child_up(sa, n, now) {
            self.inbound_spis.remove(&spi);
        } else if let Some(old) = rekey {
            // The old CHILD_SA goes once the new one is in (RFC 7296 2.8).
            if let Some(c) = sa.children.iter_mut().find(|c| c.inbound_spi == old) {
                c.replaced = true;
            }
            sa.queued_child_deletes.get_or_insert_default().push(old);
        }
        self.after_response(sa, now);
        Outcome::Keep
    }

    /// The peer's CREATE_CHILD_SA request.
    pub(super) fn child_request(&mut self, sa: &mut IkeSa, now: Instant, o: &Opened) -> Outcome {
        let (ex, mid) = (o.header.exchange_type, o.header.message_id);
        let refuse = |this: &mut Endpoint, sa: &mut IkeSa, t: NotifyType| {
            this.respond(sa, ex, mid, &[notify(t)]);
            Outcome::Keep
        };
        let got = o.one_sa();
        let ni = o.one_nonce();
        let tsi = o.one_ts(true);
        let tsr = o.one_ts(false);
        let Some(got) = got else {
            return refuse(self, sa, NotifyType::INVALID_SYNTAX);
        };
        // An IKE SA rekey (IKE proposals with 8-byte SPIs).
        if got
            .proposals
            .iter()
            .any(|p| p.protocol_id == protocol_id::IKE)
        {
            return self.rekey_request(sa, now, o);
        }
        let (Some(ni), Some(tsi), Some(tsr)) = (ni, tsi, tsr) else {
            return refuse(self, sa, NotifyType::INVALID_SYNTAX);
        };
        // While we rekey the IKE SA, no CHILD_SA is made or rekeyed in it (RFC 7296 2.25).
        if matches!(&sa.pending, Some(p) if matches!(p.purpose, Purpose::RekeyIke { .. })) {
            return refuse(self, sa, NotifyType::TEMPORARY_FAILURE);
        }
        let conn = &self.connections[sa.conn];
        // A rekey names the old CHILD_SA by the peer's inbound SPI: our outbound one.
        let rekey = o.notifies().find(|n| n.notify_type == NotifyType::REKEY_SA);
        let old = match rekey {
            None => None,
            Some(n) => {
                let spi = <[u8; 4]>::try_from(n.spi.as_slice())
                    .map(u32::from_be_bytes)
                    .ok();
                match sa.children.iter().find(|c| Some(c.outbound_spi) == spi) {
                    // Already replaced by a rekey that completed (ours, or the peer's a moment ago): its DELETE
                    // is under way; a second replacement would be redundant.
                    Some(c) if c.replaced => {
                        return refuse(self, sa, NotifyType::TEMPORARY_FAILURE)
                    }
                    Some(c) => Some((c.inbound_spi, c.cfg)),
                    None => return refuse(self, sa, NotifyType::CHILD_SA_NOT_FOUND),
                }
            }
        };
        // A rekey collision (both ends rekey this CHILD_SA at once): the exchange with the higher initiator
        // nonce goes on, the other end's is refused with TEMPORARY_FAILURE; both ends decide alike.
        if let (Some((old_in, _)), Some(p), Some(x)) = (old, &sa.pending, &sa.child_x) {
            let ours =
                matches!(p.purpose, Purpose::CreateChild { rekey: Some(r), .. } if r == old_in);
            if ours && x.ni.as_slice() > ni.as_bytes() {
                return refuse(self, sa, NotifyType::TEMPORARY_FAILURE);
            }
        }
        let (k, ts_i, ts_r) =
            match glue::pick_child(conn, tsi, tsr, |k| old.is_none_or(|(_, cfg)| cfg == k)) {
                Ok(p) => p,
                Err(failure) => {
                    self.fail(sa.conn, Some(sa.id), failure);
                    return refuse(self, sa, NotifyType::TS_UNACCEPTABLE);
                }
            };
        let child = &conn.children[k];
        let theirs = glue::esp_proposals(got);
        let their_list: Vec<Proposal> = theirs.iter().map(|(_, p, _)| p.clone()).collect();
        let Some(sel) = proposal::select(&child.esp_proposals, &their_list, Preference::Ours)
        else {
            let f = Failure::NoProposalChosen {
                ours: glue::names(&child.esp_proposals),
                theirs: glue::names(&their_list),
            };
            self.fail_child(sa.conn, Some(sa.id), Some(k), f);
            return refuse(self, sa, NotifyType::NO_PROPOSAL_CHOSEN);
        };
        let mode = if child.mode == Mode::Transport
            && o.notifies()
                .any(|n| n.notify_type == NotifyType::USE_TRANSPORT_MODE)
        {
            Mode::Transport
        } else {
            Mode::Tunnel
        };
        // PFS: the initiator's KE must be of the chosen group; ours answers it.
        let mut ke_out = None;
        let mut shared = None;
        if let Some(&m) = sel.chosen.ke().first() {
            let ke = o.one_ke();
            let Some(group) = dh_group(m) else {
                return refuse(self, sa, NotifyType::NO_PROPOSAL_CHOSEN);
            };
            match ke {
                Some(ke) if ke.group == m.id() => {
                    let kp = KeyPair::generate(group, &mut *self.rng);
                    match kp.agree(&ke.data) {
                        Ok(s) => shared = Some(s),
                        Err(_) => return refuse(self, sa, NotifyType::INVALID_SYNTAX),
                    }
                    ke_out = Some(Ke {
                        group: m.id(),
                        data: kp.public().to_vec(),
                    });
                }
                _ => {
                    self.respond(
                        sa,
                        ex,
                        mid,
                        &[Payload::Notify(Notify::invalid_ke_payload(m.id()))],
                    );
                    return Outcome::Keep;
                }
            }
        }
        let (idx, _, peer_spi) = theirs[sel.peer];
        let number = got.proposals[idx].number;
        let spi = self.new_child_spi();
        let mut nr = vec![0u8; NONCE_LEN];
        self.rng.fill(&mut nr);
        let mut out = Vec::new();
        if mode == Mode::Transport {
            out.push(notify(NotifyType::USE_TRANSPORT_MODE));
        }
        out.push(Payload::Sa(crate::message::Sa {
            proposals: vec![glue::to_wire(&sel.chosen, number, &spi.to_be_bytes())],
        }));
        out.push(Payload::Nonce(
            Nonce::new(nr.clone()).expect("32-byte nonce"),
        ));
        if let Some(k) = ke_out {
            out.push(Payload::Ke(k));
        }
        out.push(Payload::TsI(Ts {
            selectors: ts_i.iter().map(Range::selector).collect(),
        }));
        out.push(Payload::TsR(Ts {
            selectors: ts_r.iter().map(Range::selector).collect(),
        }));
        let ni = ni.as_bytes().to_vec();
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
            shared: shared.as_ref().map(|s| s.as_slice()),
            replaces: old.map(|(spi, _)| spi),
        };
        if !self.child_up(sa, n, now) {
            self.inbound_spis.remove(&spi);
            return refuse(self, sa, NotifyType::NO_PROPOSAL_CHOSEN);
        }
        if let Some((old_in, _)) = old {
            if let Some(c) = sa.children.iter_mut().find(|c| c.inbound_spi == old_in) {
                c.replaced = true;
            }
        }
        self.respond(sa, ex, mid, &out);
        Outcome::Keep
    }

    /// A random 2 to 10 s before a refused rekey is tried again.
    pub(super) fn retry_delay(&mut self) -> std::time::Duration {
        let mut r = [0u8; 2];
        self.rng.fill(&mut r);
        std::time::Duration::from_millis(2000 + u64::from(u16::from_be_bytes(r)) % 8000)
    }

    /// Rekeys and expiries of children, when no request is outstanding. True if a request went out.
    pub(super) fn child_timers(&mut self, sa: &mut IkeSa, now: Instant) -> bool {
        if let Some(c) = sa.children.iter().find(|c| now >= c.expire_at) {
            let spi = c.inbound_spi;
            self.send_delete_child(sa, spi, now);
            return true;
        }
        if let Some(c) = sa
            .children
            .iter()
            .find(|c| !c.replaced && now >= c.rekey_at)
        {
            let (spi, cfg) = (c.inbound_spi, c.cfg);
            // Not again before it expires (a failed rekey is not retried in a loop).
            if let Some(c) = sa.children.iter_mut().find(|c| c.inbound_spi == spi) {
                c.rekey_at = c.expire_at;
            }
            self.send_create_child(sa, cfg, Some(spi), now);
            return true;
        }
        false
    }
}
