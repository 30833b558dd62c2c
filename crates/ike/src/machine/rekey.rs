//! Rekeying the IKE SA (RFC 7296 1.3.2, 2.18): a CREATE_CHILD_SA in the old IKE SA with an IKE proposal carrying
//! the new SPI, a nonce and a KE. The new IKE SA gets a new [`IkeSaId`], new SPIs and keys (`SKEYSEED =
//! prf(SK_d (old), g^ir (new) | Ni | Nr)` with the old SA's PRF, as 2.18 says; prf+ with the new one), message ids
//! from 0, and the CHILD_SAs of the old one, which move without any CHILD_SA event. IkeSaUp names the new SA; the
//! rekey's initiator then deletes the old SA, whose IkeSaDown (and nothing else) follows. Who initiated the rekey
//! is the new SA's original initiator (its I flag).

use std::time::{Duration, Instant};

use netveil_crypto::dh::KeyPair;

use super::framing::Opened;
use super::glue;
use super::init::{dh_group, NONCE_LEN};
use super::sa::{ChildExchange, Chosen, IkeSa, Outcome, Purpose, State};
use super::{Endpoint, EndpointError};
use crate::event::{Event, Failure, IkeSaId};
use crate::keys::{skeyseed_rekey, IkeKeys, IkeSuite, Role};
use crate::message::{ExchangeType, Ke, Nonce, Notify, NotifyType, Payload};
use crate::proposal::{self, Preference, Proposal, Protocol};

/// The IKE proposals of a rekey's SA payload, with their index and 8-byte SPI (not 0).
fn rekey_proposals(sa: &crate::message::Sa) -> Vec<(usize, Proposal, u64)> {
    sa.proposals
        .iter()
        .enumerate()
        .filter_map(|(i, w)| {
            let spi = u64::from_be_bytes(w.spi.as_slice().try_into().ok()?);
            (spi != 0).then_some(())?;
            glue::from_wire(w, Protocol::Ike).map(|p| (i, p, spi))
        })
        .collect()
}

/// What the new IKE SA is made of.
struct NewIke<'a> {
    role: Role,
    spi_i: u64,
    spi_r: u64,
    chosen: Proposal,
    shared: &'a [u8],
    ni: &'a [u8],
    nr: &'a [u8],
}

impl Endpoint {
    /// Rekeys an established IKE SA (CREATE_CHILD_SA with a new SPI and key exchange).
    pub fn rekey_ike(&mut self, ike_sa: IkeSaId, now: Instant) -> Result<(), EndpointError> {
        let mut sa = self
            .sas
            .remove(&ike_sa)
            .ok_or(EndpointError::UnknownIkeSa(ike_sa))?;
        let ok = sa.state == State::Established && sa.pending.is_none();
        if ok {
            self.send_rekey_ike(&mut sa, now);
        }
        self.sas.insert(ike_sa, sa);
        if ok {
            Ok(())
        } else {
            Err(EndpointError::Busy)
        }
    }

    /// When the IKE SA is rekeyed: its rekey time less a random part of `rand`.
    pub(super) fn ike_rekey_time(&mut self, conn: usize, now: Instant) -> Instant {
        let l = self.connections[conn].lifetimes;
        let jitter = self.jitter(l.rand);
        match l.rekey.saturating_sub(jitter) {
            d if d.is_zero() => now + Duration::from_secs(86400 * 365),
            d => now + d,
        }
    }

    pub(super) fn send_rekey_ike(&mut self, sa: &mut IkeSa, now: Instant) {
        let proposals = super::intermediate::classic(&self.connections[sa.conn].proposals);
        let x = match sa.child_x.take() {
            Some(x) => x,
            None => {
                let mut ni = vec![0u8; NONCE_LEN];
                self.rng.fill(&mut ni);
                let group = proposals
                    .iter()
                    .find_map(|p| p.ke().first().copied())
                    .and_then(dh_group);
                let Some(g) = group else { return };
                Box::new(ChildExchange {
                    ni,
                    dh: Some(KeyPair::generate(g, &mut *self.rng)),
                    ke_retried: false,
                })
            }
        };
        let Some(dh) = &x.dh else { return };
        let method = crate::proposal::Ke::ALL
            .iter()
            .copied()
            .find(|m| dh_group(*m) == Some(dh.group()))
            .expect("a group we generate has an id");
        let spi = self.new_ike_spi();
        // Reserved until the new SA exists (or the rekey fails).
        self.by_spi.insert(spi, sa.id);
        let inner = vec![
            Payload::Sa(glue::sa_payload(&proposals, &spi.to_be_bytes())),
            Payload::Nonce(Nonce::new(x.ni.clone()).expect("32-byte nonce")),
            Payload::Ke(Ke {
                group: method.id(),
                data: dh.public().to_vec(),
            }),
        ];
        sa.child_x = Some(x);
        // Not again on the timer while this one runs (or if it fails).
        sa.ike_rekey_at = now + Duration::from_secs(86400 * 365);
        self.request(
            sa,
            ExchangeType::CREATE_CHILD_SA,
            Purpose::RekeyIke { spi },
            &inner,
            now,
        );
    }

    /// The new IKE SA from a completed rekey: children moved over, IkeSaUp.
    fn new_ike(&mut self, old: &mut IkeSa, n: NewIke<'_>, now: Instant) -> Option<IkeSaId> {
        let old_keys = old.keys()?;
        let old_prf = old_keys.suite().prf();
        let suite = IkeSuite::from_proposal(&n.chosen).ok()?;
        let seed = skeyseed_rekey(old_prf, old_keys.sk_d(), &[n.shared], n.ni, n.nr);
        let keys = IkeKeys::derive(
            suite,
            &seed,
            n.ni,
            n.nr,
            &n.spi_i.to_be_bytes(),
            &n.spi_r.to_be_bytes(),
        )
        .ok()?;
        let mut sa = IkeSa::new(
            IkeSaId(0),
            old.conn,
            n.role,
            n.spi_i,
            n.spi_r,
            old.local,
            old.remote,
            now,
        );
        if !sa.set_keys(keys) {
            return None;
        }
        let id = self.new_id();
        sa.id = id;
        sa.state = State::Established;
        sa.was_up = true;
        sa.chosen = Some(Chosen::new(&n.chosen));
        sa.nat_local = old.nat_local;
        sa.nat_remote = old.nat_remote;
        sa.children = std::mem::take(&mut old.children);
        // Children waiting to be created go with them.
        sa.queued_children = old.queued_children.take();
        sa.ike_rekey_at = self.ike_rekey_time(old.conn, now);
        self.reauth_rekeyed(old, &mut sa);
        self.by_spi.insert(sa.our_spi(), id);
        self.events.push_back(Event::IkeSaUp {
            ike_sa: id,
            connection: self.connections[old.conn].name.clone(),
        });
        self.sas.insert(id, Box::new(sa));
        Some(id)
    }

    /// The answer to our IKE SA rekey.
    pub(super) fn rekey_response(
        &mut self,
        sa: &mut IkeSa,
        now: Instant,
        o: &Opened,
        spi: u64,
    ) -> Outcome {
        sa.pending = None;
        sa.my_mid = sa.my_mid.wrapping_add(1);
        let x = sa.child_x.take();
        let release = |this: &mut Endpoint, sa: &IkeSa| {
            if this.by_spi.get(&spi) == Some(&sa.id) {
                this.by_spi.remove(&spi);
            }
        };
        if let Some(n) = o.notifies().find(|n| n.notify_type.is_error()) {
            if let (Some(g), Some(mut x)) = (n.invalid_ke_group(), x) {
                let offered = self.connections[sa.conn]
                    .proposals
                    .iter()
                    .flat_map(|p| p.ke())
                    .find(|k| k.id() == g);
                if let (false, Some(group)) = (x.ke_retried, offered.and_then(|k| dh_group(*k))) {
                    release(self, sa);
                    x.ke_retried = true;
                    x.dh = Some(KeyPair::generate(group, &mut *self.rng));
                    sa.child_x = Some(x);
                    self.send_rekey_ike(sa, now);
                    return Outcome::Keep;
                }
            }
            release(self, sa);
            if n.notify_type == NotifyType::TEMPORARY_FAILURE {
                // A collision we lost, or a peer busy: tried again a little later.
                sa.ike_rekey_at = now + self.retry_delay();
                self.after_response(sa, now);
                return Outcome::Keep;
            }
            let f = Failure::PeerError {
                notify: n.notify_type.0,
                name: n.notify_type.name().unwrap_or("unknown").to_string(),
            };
            self.fail(sa.conn, Some(sa.id), f);
            self.after_response(sa, now);
            return Outcome::Keep;
        }
        let got = o.one_sa();
        let nr = o.one_nonce();
        let ke = o.one_ke();
        let ours = &self.connections[sa.conn].proposals;
        let chosen = got.and_then(|s| match &rekey_proposals(s)[..] {
            [(_, p, peer_spi)] if s.proposals.len() == 1 && p.is_single() => {
                proposal::select(ours, std::slice::from_ref(p), Preference::Ours)
                    .filter(|sel| &sel.chosen == p)
                    .map(|_| (p.clone(), *peer_spi))
            }
            _ => None,
        });
        let shared = match (&chosen, &x, ke) {
            (Some((p, _)), Some(x), Some(ke)) => {
                x.dh.as_ref()
                    .filter(|k| p.ke().first().and_then(|m| dh_group(*m)) == Some(k.group()))
                    .filter(|_| p.ke().first().map(|m| m.id()) == Some(ke.group))
                    .and_then(|k| k.agree(&ke.data).ok())
            }
            _ => None,
        };
        let (Some((chosen, peer_spi)), Some(nr), Some(shared), Some(x)) = (chosen, nr, shared, &x)
        else {
            release(self, sa);
            let f = Failure::PeerError {
                notify: NotifyType::INVALID_SYNTAX.0,
                name: "INVALID_SYNTAX".into(),
            };
            self.fail(sa.conn, Some(sa.id), f);
            self.after_response(sa, now);
            return Outcome::Keep;
        };
        self.by_spi.remove(&spi);
        let n = NewIke {
            role: Role::Initiator,
            spi_i: spi,
            spi_r: peer_spi,
            chosen,
            shared: &shared,
            ni: &x.ni,
            nr: nr.as_bytes(),
        };
        if self.new_ike(sa, n, now).is_some() {
            // The old SA goes (RFC 7296 2.18: the rekey's initiator deletes it).
            self.send_delete_ike(sa, now);
        }
        Outcome::Keep
    }

    /// The peer's IKE SA rekey (a CREATE_CHILD_SA whose SA payload has IKE proposals).
    pub(super) fn rekey_request(&mut self, sa: &mut IkeSa, now: Instant, o: &Opened) -> Outcome {
        let (ex, mid) = (o.header.exchange_type, o.header.message_id);
        let refuse = |this: &mut Endpoint, sa: &mut IkeSa, n: Notify| {
            this.respond(sa, ex, mid, &[Payload::Notify(n)]);
            Outcome::Keep
        };
        let got = o.one_sa();
        let ni = o.one_nonce();
        let ke = o.one_ke();
        let (Some(got), Some(ni), Some(ke)) = (got, ni, ke) else {
            return refuse(self, sa, Notify::new(NotifyType::INVALID_SYNTAX, vec![]));
        };
        // A rekey collision (both ends rekey the IKE SA at once): the exchange with the higher initiator nonce
        // goes on, the other is refused with TEMPORARY_FAILURE; both ends decide alike, so one new SA results.
        // While we rekey a CHILD_SA, the peer's IKE rekey waits too (RFC 7296 2.25).
        if let (Some(p), Some(x)) = (&sa.pending, &sa.child_x) {
            let lose = match p.purpose {
                Purpose::RekeyIke { .. } => x.ni.as_slice() > ni.as_bytes(),
                Purpose::CreateChild { .. } => true,
                _ => false,
            };
            if lose {
                return refuse(self, sa, Notify::new(NotifyType::TEMPORARY_FAILURE, vec![]));
            }
        }
        let theirs = rekey_proposals(got);
        let list: Vec<Proposal> = theirs.iter().map(|(_, p, _)| p.clone()).collect();
        let ours = super::intermediate::classic(&self.connections[sa.conn].proposals);
        let sel = proposal::select(&ours, &list, Preference::Ours)
            .filter(|s| s.chosen.ke().first().and_then(|&m| dh_group(m)).is_some());
        let Some(sel) = sel else {
            let f = Failure::NoProposalChosen {
                ours: glue::names(&ours),
                theirs: glue::names(&list),
            };
            self.fail(sa.conn, Some(sa.id), f);
            return refuse(
                self,
                sa,
                Notify::new(NotifyType::NO_PROPOSAL_CHOSEN, vec![]),
            );
        };
        let method = sel.chosen.ke()[0];
        if ke.group != method.id() {
            return refuse(self, sa, Notify::invalid_ke_payload(method.id()));
        }
        let dh = KeyPair::generate(dh_group(method).expect("filtered above"), &mut *self.rng);
        let Ok(shared) = dh.agree(&ke.data) else {
            return refuse(self, sa, Notify::new(NotifyType::INVALID_SYNTAX, vec![]));
        };
        let (idx, _, peer_spi) = theirs[sel.peer];
        let number = got.proposals[idx].number;
        let spi = self.new_ike_spi();
        let mut nr = vec![0u8; NONCE_LEN];
        self.rng.fill(&mut nr);
        let out = vec![
            Payload::Sa(crate::message::Sa {
                proposals: vec![glue::to_wire(&sel.chosen, number, &spi.to_be_bytes())],
            }),
            Payload::Nonce(Nonce::new(nr.clone()).expect("32-byte nonce")),
            Payload::Ke(Ke {
                group: method.id(),
                data: dh.public().to_vec(),
            }),
        ];
        let n = NewIke {
            role: Role::Responder,
            spi_i: peer_spi,
            spi_r: spi,
            chosen: sel.chosen,
            shared: &shared,
            ni: ni.as_bytes(),
            nr: &nr,
        };
        if self.new_ike(sa, n, now).is_none() {
            return refuse(
                self,
                sa,
                Notify::new(NotifyType::NO_PROPOSAL_CHOSEN, vec![]),
            );
        }
        self.respond(sa, ex, mid, &out);
        // The old SA waits for the peer's DELETE; it has no children any more and starts nothing.
        sa.ike_rekey_at = now + Duration::from_secs(86400 * 365);
        sa.state = State::Rekeyed;
        Outcome::Keep
    }
}
