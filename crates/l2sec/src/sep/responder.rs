//! The responder's side of an exchange: REQUEST, OFFER, KEY_EXCHANGE and FINISH received.

use std::time::{Duration, Instant};

use hmac::Mac as HmacMac;
use netveil_crypto::dh::KeyPair;
use netveil_crypto::rand::array as random;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::machine::{later, Exchange, Pending, Sep, Stage, MAX_RESPONDERS};
use super::schedule::{absorb, hmac, Schedule};
use super::types::{Established, Mac, SepError, SepEvent};
use super::wire::{
    dh_group, group_code, header, ip_at, nonce_at, parse_offer, public_len, suite_code, ty, u32_at,
    Hdr, CONFIRM_LEN, NONCE_LEN, REJECT_NO_GROUP, REJECT_NO_SUITE,
};

impl Sep {
    pub(super) fn on_request(
        &mut self,
        from: Mac,
        h: &Hdr,
        body: &[u8],
        msg: &[u8],
        now: Instant,
    ) -> Result<(), SepError> {
        if body.len() != 8 + NONCE_LEN {
            return Err(SepError::Malformed);
        }
        let ip_i = ip_at(&body[0..4]);
        let target = ip_at(&body[4..8]);
        let ni = nonce_at(&body[8..]);
        if !target.is_unspecified() && target != self.cfg.ip {
            return Err(SepError::NotTarget);
        }
        if !self.on_subnet(ip_i) {
            return Err(SepError::NotOnSubnet);
        }
        let span = self.span();
        match self.exchanges.get_mut(&from) {
            Some(x) if x.initiator() => {
                // Simultaneous initiation: the lower MAC keeps its initiator role.
                if self.cfg.mac < from {
                    return Err(SepError::Unexpected);
                }
            }
            Some(x) if x.id == h.id => {
                if x.stage == Stage::Accepted && x.last_rx.as_slice() == msg {
                    x.deadline = later(now, span);
                    let answer = x.last_tx.clone();
                    self.transmit(from, answer);
                    return Ok(());
                }
                return Err(SepError::Unexpected);
            }
            // A new exchange id: the peer restarted; the new request replaces the old exchange.
            Some(_) => {}
            None => {
                let responders = self.exchanges.values().filter(|x| !x.initiator()).count();
                if responders >= MAX_RESPONDERS {
                    return Err(SepError::Busy);
                }
            }
        }
        if !self.take_token(now) {
            return Err(SepError::RateLimited);
        }
        self.exchanges.remove(&from);
        self.lingers.remove(&from);
        let nr = random::<NONCE_LEN>(&mut *self.rng);
        let mut m2 = header(ty::ACCEPT, self.cfg.mac, from, &h.id);
        m2.extend_from_slice(&nr);
        m2.extend_from_slice(&self.cfg.ip.octets());
        let mut transcript = Sha256::new();
        absorb(&mut transcript, msg);
        absorb(&mut transcript, &m2);
        let x = Exchange {
            id: h.id,
            stage: Stage::Accepted,
            target_ip: None,
            peer_ip: ip_i,
            ni,
            nr,
            key_id: 0,
            suite: None,
            group: None,
            lifetime_offer: 0,
            transcript,
            keypair: None,
            pending: None,
            last_rx: msg.to_vec(),
            last_tx: m2.clone(),
            sends: 1,
            retransmits: false,
            deadline: later(now, span),
        };
        self.exchanges.insert(from, x);
        self.transmit(from, m2);
        Ok(())
    }

    /// OFFER, KEY_EXCHANGE and FINISH: messages to a responder.
    pub(super) fn on_responder(
        &mut self,
        from: Mac,
        h: &Hdr,
        body: &[u8],
        msg: &[u8],
        now: Instant,
    ) -> Result<(), SepError> {
        let span = self.span();
        let own = self.cfg.mac;
        let x = match self.exchanges.get_mut(&from) {
            Some(x) if x.id == h.id && !x.initiator() => x,
            _ => return Err(SepError::Unexpected),
        };
        if x.last_rx.as_slice() == msg {
            // A duplicate of the message we answered: the same answer again.
            if !x.retransmits {
                x.deadline = later(now, span);
            }
            let answer = x.last_tx.clone();
            self.transmit(from, answer);
            return Ok(());
        }
        match (h.ty, x.stage) {
            (ty::OFFER, Stage::Accepted) => {
                let offer = parse_offer(body)?;
                let suite = offer
                    .suites
                    .iter()
                    .copied()
                    .find(|s| self.cfg.suites.contains(s));
                let group = offer
                    .groups
                    .iter()
                    .copied()
                    .find(|g| self.cfg.groups.contains(g));
                let (suite, group) = match (suite, group) {
                    (Some(s), Some(g)) => (s, g),
                    (s, _) => {
                        let (code, reason) = if s.is_none() {
                            (REJECT_NO_SUITE, SepError::NoCommonSuite)
                        } else {
                            (REJECT_NO_GROUP, SepError::NoCommonGroup)
                        };
                        let mut rej = header(ty::REJECT, own, from, &h.id);
                        rej.push(code);
                        let id = h.id;
                        self.exchanges.remove(&from);
                        self.transmit(from, rej.clone());
                        self.events
                            .push_back(SepEvent::Failed { peer: from, reason });
                        self.linger(from, id, msg.to_vec(), rej, now);
                        return Ok(());
                    }
                };
                let mut m4 = header(ty::SELECT, own, from, &h.id);
                m4.extend_from_slice(&[offer.key_id, suite_code(suite), group_code(group)]);
                absorb(&mut x.transcript, msg);
                absorb(&mut x.transcript, &m4);
                x.key_id = offer.key_id;
                x.suite = Some(suite);
                x.group = Some(group);
                x.stage = Stage::Selected;
                x.last_rx = msg.to_vec();
                x.last_tx = m4.clone();
                x.deadline = later(now, span);
                self.transmit(from, m4);
                Ok(())
            }
            (ty::KEY_EXCHANGE, Stage::Selected) => {
                let (Some(suite), Some(group)) = (x.suite, x.group) else {
                    return Err(SepError::Unexpected);
                };
                if body.len() != 4 + public_len(group) {
                    return Err(SepError::Malformed);
                }
                let offer = u32_at(body);
                if offer == 0 {
                    return Err(SepError::Malformed);
                }
                let kei = &body[4..];
                let kp = KeyPair::generate(dh_group(group), &mut *self.rng);
                let z = kp.agree(kei).map_err(|_| SepError::BadKeyShare)?;
                let own_lifetime = self.cfg.lifetime.as_secs().clamp(1, u32::MAX as u64) as u32;
                let accepted = offer.min(own_lifetime);
                let mut m6 = header(ty::KEY_EXCHANGE_ACCEPT, own, from, &h.id);
                m6.extend_from_slice(&accepted.to_be_bytes());
                m6.extend_from_slice(kp.public());
                drop(kp);
                let mut t = x.transcript.clone();
                absorb(&mut t, msg);
                absorb(&mut t, &m6);
                let hash: [u8; 32] = t.finalize().into();
                let sched = Schedule::new(&z, &x.ni, &x.nr, &hash);
                let (i2r, r2i) = sched.session_keys(suite, x.key_id)?;
                let mac_r = hmac(sched.confirm_r(), b"responder", &hash)
                    .finalize()
                    .into_bytes();
                m6.extend_from_slice(&mac_r);
                let mut confirm_i = Zeroizing::new([0u8; 32]);
                confirm_i.copy_from_slice(sched.confirm_i());
                x.pending = Some(Pending {
                    est: Box::new(Established {
                        peer: from,
                        peer_ip: x.peer_ip,
                        initiator: false,
                        key_id: x.key_id,
                        suite,
                        tx: r2i,
                        rx: i2r,
                        lifetime: Duration::from_secs(accepted.into()),
                    }),
                    confirm_i,
                    h: hash,
                });
                x.stage = Stage::KeyAccepted;
                x.last_rx = msg.to_vec();
                x.last_tx = m6.clone();
                x.sends = 1;
                x.retransmits = true;
                let wait = self.backoff(1);
                let x = self.exchanges.get_mut(&from).expect("exchange present");
                x.deadline = later(now, wait);
                self.transmit(from, m6);
                Ok(())
            }
            (ty::FINISH, Stage::KeyAccepted) => {
                if body.len() != CONFIRM_LEN {
                    return Err(SepError::Malformed);
                }
                let Some(p) = x.pending.as_ref() else {
                    return Err(SepError::Unexpected);
                };
                let ok = hmac(&p.confirm_i[..], b"initiator", &p.h)
                    .verify_slice(body)
                    .is_ok();
                let id = x.id;
                let Some(x) = self.exchanges.remove(&from) else {
                    return Err(SepError::Unexpected);
                };
                if ok {
                    if let Some(p) = x.pending {
                        self.events.push_back(SepEvent::Established(p.est));
                    }
                    self.linger(from, id, msg.to_vec(), Vec::new(), now);
                } else {
                    self.events.push_back(SepEvent::Failed {
                        peer: from,
                        reason: SepError::BadConfirm,
                    });
                }
                Ok(())
            }
            _ => Err(SepError::Unexpected),
        }
    }
}
