//! The initiator's side of an exchange: ACCEPT, SELECT, KEY_EXCHANGE_ACCEPT and REJECT received.

use std::time::{Duration, Instant};

use hmac::Mac as HmacMac;
use netveil_crypto::dh::KeyPair;
use sha2::Digest;

use super::machine::{later, Sep, Stage};
use super::schedule::{absorb, hmac, Schedule};
use super::types::{Established, Mac, SepError, SepEvent};
use super::wire::{
    dh_group, group_code, group_from_code, header, ip_at, nonce_at, public_len, suite_code,
    suite_from_code, ty, u32_at, Hdr, CONFIRM_LEN, NONCE_LEN, REJECT_NO_GROUP, REJECT_NO_SUITE,
};

impl Sep {
    /// ACCEPT, SELECT, KEY_EXCHANGE_ACCEPT and REJECT: messages to an initiator.
    pub(super) fn on_initiator(
        &mut self,
        from: Mac,
        h: &Hdr,
        body: &[u8],
        msg: &[u8],
        now: Instant,
    ) -> Result<(), SepError> {
        let own = self.cfg.mac;
        let first_wait = self.backoff(1);
        let x = match self.exchanges.get_mut(&from) {
            Some(x) if x.id == h.id && x.initiator() => x,
            _ => return Err(SepError::Unexpected),
        };
        if x.last_rx.as_slice() == msg {
            // A duplicate of an answer already handled.
            return Ok(());
        }
        match (h.ty, x.stage) {
            (ty::ACCEPT, Stage::Requested) => {
                if body.len() != NONCE_LEN + 4 {
                    return Err(SepError::Malformed);
                }
                let nr = nonce_at(body);
                let ip_r = ip_at(&body[NONCE_LEN..]);
                if x.target_ip.is_some_and(|t| t != ip_r) {
                    return Err(SepError::NotTarget);
                }
                let suites: Vec<u8> = self
                    .cfg
                    .suites
                    .iter()
                    .take(255)
                    .map(|s| suite_code(*s))
                    .collect();
                let groups: Vec<u8> = self
                    .cfg
                    .groups
                    .iter()
                    .take(255)
                    .map(|g| group_code(*g))
                    .collect();
                let mut m3 = header(ty::OFFER, own, from, &h.id);
                m3.push(x.key_id);
                m3.push(suites.len() as u8);
                m3.extend_from_slice(&suites);
                m3.push(groups.len() as u8);
                m3.extend_from_slice(&groups);
                absorb(&mut x.transcript, msg);
                absorb(&mut x.transcript, &m3);
                x.nr = nr;
                x.peer_ip = ip_r;
                x.stage = Stage::Offered;
                x.last_rx = msg.to_vec();
                x.last_tx = m3.clone();
                x.sends = 1;
                x.deadline = later(now, first_wait);
                self.transmit(from, m3);
                Ok(())
            }
            (ty::SELECT, Stage::Offered) => {
                if body.len() != 3 {
                    return Err(SepError::Malformed);
                }
                let suite = suite_from_code(body[1]).ok_or(SepError::Malformed)?;
                let group = group_from_code(body[2]).ok_or(SepError::Malformed)?;
                if body[0] != x.key_id {
                    return Err(SepError::Unexpected);
                }
                if !self.cfg.suites.iter().take(255).any(|s| *s == suite) {
                    return Err(SepError::NoCommonSuite);
                }
                if !self.cfg.groups.iter().take(255).any(|g| *g == group) {
                    return Err(SepError::NoCommonGroup);
                }
                let kp = KeyPair::generate(dh_group(group), &mut *self.rng);
                let mut m5 = header(ty::KEY_EXCHANGE, own, from, &h.id);
                m5.extend_from_slice(&x.lifetime_offer.to_be_bytes());
                m5.extend_from_slice(kp.public());
                absorb(&mut x.transcript, msg);
                absorb(&mut x.transcript, &m5);
                x.suite = Some(suite);
                x.group = Some(group);
                x.keypair = Some(kp);
                x.stage = Stage::KeySent;
                x.last_rx = msg.to_vec();
                x.last_tx = m5.clone();
                x.sends = 1;
                x.deadline = later(now, first_wait);
                self.transmit(from, m5);
                Ok(())
            }
            (ty::REJECT, Stage::Offered) => {
                let reason = match body {
                    [REJECT_NO_SUITE] => SepError::NoCommonSuite,
                    [REJECT_NO_GROUP] => SepError::NoCommonGroup,
                    _ => return Err(SepError::Malformed),
                };
                self.exchanges.remove(&from);
                self.events
                    .push_back(SepEvent::Failed { peer: from, reason });
                Ok(())
            }
            (ty::KEY_EXCHANGE_ACCEPT, Stage::KeySent) => {
                let (Some(suite), Some(group), Some(kp)) = (x.suite, x.group, x.keypair.as_ref())
                else {
                    return Err(SepError::Unexpected);
                };
                let plen = public_len(group);
                if body.len() != 4 + plen + CONFIRM_LEN {
                    return Err(SepError::Malformed);
                }
                let accepted = u32_at(body);
                if accepted == 0 || accepted > x.lifetime_offer {
                    return Err(SepError::Malformed);
                }
                let ker = &body[4..4 + plen];
                let mac_r = &body[4 + plen..];
                let z = kp.agree(ker).map_err(|_| SepError::BadKeyShare)?;
                let m6_without_mac = &msg[..msg.len() - CONFIRM_LEN];
                let mut t = x.transcript.clone();
                absorb(&mut t, m6_without_mac);
                let hash: [u8; 32] = t.finalize().into();
                let sched = Schedule::new(&z, &x.ni, &x.nr, &hash);
                let confirmed = hmac(sched.confirm_r(), b"responder", &hash)
                    .verify_slice(mac_r)
                    .is_ok();
                let keys = if confirmed {
                    Some(sched.session_keys(suite, x.key_id)?)
                } else {
                    None
                };
                let Some(x) = self.exchanges.remove(&from) else {
                    return Err(SepError::Unexpected);
                };
                let Some((i2r, r2i)) = keys else {
                    self.events.push_back(SepEvent::Failed {
                        peer: from,
                        reason: SepError::BadConfirm,
                    });
                    return Ok(());
                };
                let mac_i = hmac(sched.confirm_i(), b"initiator", &hash)
                    .finalize()
                    .into_bytes();
                let mut m7 = header(ty::FINISH, own, from, &h.id);
                m7.extend_from_slice(&mac_i);
                self.transmit(from, m7.clone());
                self.events
                    .push_back(SepEvent::Established(Box::new(Established {
                        peer: from,
                        peer_ip: x.peer_ip,
                        initiator: true,
                        key_id: x.key_id,
                        suite,
                        tx: i2r,
                        rx: r2i,
                        lifetime: Duration::from_secs(accepted.into()),
                    })));
                self.linger(from, x.id, msg.to_vec(), m7, now);
                Ok(())
            }
            _ => Err(SepError::Unexpected),
        }
    }
}
