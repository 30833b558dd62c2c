//! Protected messages after IKE_SA_INIT: message ids and the window of 1 (RFC 7296 2.1-2.3), the dispatch by
//! state and exchange type, and INFORMATIONAL (1.4: DELETE of the IKE SA or of CHILD_SAs, liveness checks).

use std::net::SocketAddr;
use std::time::Instant;

use super::framing::Opened;
use super::sa::{backoff, IkeSa, Outcome, Pending, Purpose, State};
use super::Endpoint;
use crate::cert::Certificate;
use crate::config::AuthMethod;
use crate::event::{Event, Failure};
use crate::message::sa::protocol_id;
use crate::message::{Delete, ExchangeType, Header, Notify, NotifyType, Payload};

impl Endpoint {
    /// Sends a request of ours in `sa` (message id `my_mid`) and keeps it for retransmission.
    pub(super) fn request(
        &mut self,
        sa: &mut IkeSa,
        exchange: ExchangeType,
        purpose: Purpose,
        inner: &[Payload],
        now: Instant,
    ) {
        let mid = sa.my_mid;
        let bytes = sa.sealed_message(&mut *self.rng, exchange, false, mid, inner);
        let retransmit = self.connections[sa.conn].retransmit;
        sa.pending = Some(Box::new(Pending {
            message_id: mid,
            purpose,
            bytes: bytes.clone(),
            retries: 0,
            next_at: now + backoff(&retransmit, 0),
        }));
        for b in bytes {
            self.send(sa.local, sa.remote, b);
        }
    }

    /// Sends our response to the peer's request `mid`, and caches it for a retransmitted request.
    pub(super) fn respond(
        &mut self,
        sa: &mut IkeSa,
        exchange: ExchangeType,
        mid: u32,
        inner: &[Payload],
    ) {
        let bytes = sa.sealed_message(&mut *self.rng, exchange, true, mid, inner);
        sa.cache_response(mid, exchange, inner, &bytes, self.local_certs(sa.conn));
        sa.peer_mid = mid.wrapping_add(1);
        for b in bytes {
            self.send(sa.local, sa.remote, b);
        }
    }

    /// The certificates connection `conn` sends (none with a PSK): what a cached response leaves out.
    fn local_certs(&self, conn: usize) -> &[Certificate] {
        match self.connections.get(conn).map(|c| &c.local.method) {
            Some(AuthMethod::PubKey(c)) => &c.certs,
            _ => &[],
        }
    }

    /// After a response completed our request: a queued DELETE goes out (of an old CHILD_SA first).
    pub(super) fn after_response(&mut self, sa: &mut IkeSa, now: Instant) {
        if sa.pending.is_some() || sa.state != State::Established {
            return;
        }
        while let Some(spi) = sa.queued_child_deletes.as_mut().and_then(|q| q.pop()) {
            if sa
                .queued_child_deletes
                .as_ref()
                .is_some_and(|q| q.is_empty())
            {
                sa.queued_child_deletes = None;
            }
            if sa.children.iter().any(|c| c.inbound_spi == spi) {
                self.send_delete_child(sa, spi, now);
                return;
            }
        }
        if sa.delete_queued {
            sa.delete_queued = false;
            self.send_delete_ike(sa, now);
            return;
        }
        // Children started while the SA was being set up or busy (`start_child`): one CREATE_CHILD_SA at a time.
        if let Some(q) = sa.queued_children.as_mut() {
            let cfg = (!q.is_empty()).then(|| q.remove(0));
            if q.is_empty() {
                sa.queued_children = None;
            }
            if let Some(cfg) = cfg {
                self.send_create_child(sa, cfg, None, now);
                return;
            }
        }
        self.reauth_next(sa, now);
    }

    /// An INFORMATIONAL DELETE of our CHILD_SA with inbound SPI `spi`; ChildSaDown follows the answer.
    pub(super) fn send_delete_child(&mut self, sa: &mut IkeSa, spi: u32, now: Instant) {
        let d = Payload::Delete(Delete::child(protocol_id::ESP, &[spi]));
        self.request(
            sa,
            ExchangeType::INFORMATIONAL,
            Purpose::DeleteChild(spi),
            &[d],
            now,
        );
    }

    /// A protected (SK) message for `sa`.
    pub(super) fn protected(
        &mut self,
        sa: &mut IkeSa,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        _hdr: &Header,
        bytes: &[u8],
    ) -> Outcome {
        let sas = &mut self.sas;
        let evict = |id| {
            sas.get_mut(&id)
                .is_some_and(|o| o.reassembly.take().is_some())
        };
        let Some(o) = sa.open_within(bytes, &self.frags, evict) else {
            if self.intermediate_resend(sa, _hdr, bytes) {
                return Outcome::Ignore;
            }
            self.counters.dropped += 1;
            return Outcome::Ignore;
        };
        let h = o.header;
        if !h.flags.response {
            if h.message_id != sa.peer_mid {
                match &sa.last_response {
                    Some(c) if c.message_id() == h.message_id && !c.is_empty() => {
                        let b = sa.cached_datagrams(self.local_certs(sa.conn));
                        let (l, r) = (sa.local, sa.remote);
                        self.counters.responses_resent += 1;
                        for b in b {
                            self.send(l, r, b);
                        }
                    }
                    _ => self.counters.unexpected += 1,
                }
                return Outcome::Ignore;
            }
            sa.last_heard = now;
            return match (sa.state, h.exchange_type) {
                (State::HalfOpen, ExchangeType::IKE_AUTH) if !sa.intermediate_owed() => {
                    self.auth_request(sa, now, local, remote, &o)
                }
                (State::HalfOpen, ExchangeType::IKE_INTERMEDIATE) => {
                    self.intermediate_request(sa, local, remote, &o)
                }
                (State::HalfOpen, ExchangeType::IKE_AUTH) => self.intermediate_refuse(sa, &o),
                (
                    State::Established | State::Deleting | State::Rekeyed,
                    ExchangeType::INFORMATIONAL,
                ) => self.info_request(sa, &o),
                (State::Established, ExchangeType::CREATE_CHILD_SA) => {
                    self.child_request(sa, now, &o)
                }
                (State::Deleting | State::Rekeyed, ExchangeType::CREATE_CHILD_SA) => {
                    // We are deleting the IKE SA: no new CHILD_SAs (RFC 7296 2.25).
                    let n = Payload::Notify(Notify::new(NotifyType::TEMPORARY_FAILURE, vec![]));
                    self.respond(sa, h.exchange_type, h.message_id, &[n]);
                    Outcome::Keep
                }
                _ => {
                    self.counters.unexpected += 1;
                    Outcome::Ignore
                }
            };
        }
        let Some(p) = &sa.pending else {
            self.counters.unexpected += 1;
            return Outcome::Ignore;
        };
        if p.message_id != h.message_id {
            self.counters.unexpected += 1;
            return Outcome::Ignore;
        }
        let purpose = p.purpose;
        sa.last_heard = now;
        match (purpose, h.exchange_type) {
            (Purpose::Auth, ExchangeType::IKE_AUTH) => self.auth_response(sa, now, &o),
            (Purpose::Intermediate, ExchangeType::IKE_INTERMEDIATE) => {
                self.intermediate_response(sa, now, &o)
            }
            (Purpose::CreateChild { cfg, spi, rekey }, ExchangeType::CREATE_CHILD_SA) => {
                self.child_response(sa, now, &o, (cfg, spi, rekey))
            }
            (Purpose::RekeyIke { spi }, ExchangeType::CREATE_CHILD_SA) => {
                self.rekey_response(sa, now, &o, spi)
            }
            (
                Purpose::DeleteIke | Purpose::DeleteChild(_) | Purpose::Liveness,
                ExchangeType::INFORMATIONAL,
            ) => self.info_response(sa, now, purpose),
            _ => {
                self.counters.unexpected += 1;
                Outcome::Ignore
            }
        }
    }

    /// The peer's INFORMATIONAL request: DELETEs, or an empty liveness check.
    fn info_request(&mut self, sa: &mut IkeSa, o: &Opened) -> Outcome {
        let (ex, mid) = (o.header.exchange_type, o.header.message_id);
        let deletes: Vec<&Delete> = o
            .payloads
            .iter()
            .filter_map(|p| match p {
                Payload::Delete(d) => Some(d),
                _ => None,
            })
            .collect();
        if deletes.iter().any(|d| d.protocol_id() == protocol_id::IKE) {
            self.respond(sa, ex, mid, &[]);
            return Outcome::Destroy(None);
        }
        // The initiator refused our IKE_AUTH answer after all (RFC 7296 2.21.2: our authentication, or our
        // identity): the SA goes, as with a DELETE (strongSwan's reaction too).
        if o.notifies()
            .any(|n| n.notify_type == NotifyType::AUTHENTICATION_FAILED)
        {
            self.respond(sa, ex, mid, &[]);
            let id = crate::machine::glue::identity_string(&self.connections[sa.conn].local.id);
            return Outcome::Destroy(Some(Failure::AuthenticationFailed { id, by_peer: true }));
        }
        // The peer names its inbound SPIs: our outbound ones. We answer with our inbound SPIs of those children.
        let mut ours = Vec::new();
        for d in deletes
            .iter()
            .filter(|d| d.protocol_id() == protocol_id::ESP)
        {
            for spi in d.spis_u32().unwrap_or_default() {
                if let Some(i) = sa.children.iter().position(|c| c.outbound_spi == spi) {
                    let c = sa.children.remove(i);
                    ours.push(c.inbound_spi);
                    self.child_down(sa, c);
                }
            }
        }
        let inner = if ours.is_empty() {
            Vec::new()
        } else {
            vec![Payload::Delete(Delete::child(protocol_id::ESP, &ours))]
        };
        self.respond(sa, ex, mid, &inner);
        Outcome::Keep
    }

    fn child_down(&mut self, sa: &IkeSa, c: super::sa::Child) {
        self.inbound_spis.remove(&c.inbound_spi);
        self.events.push_back(Event::ChildSaDown {
            ike_sa: sa.id,
            child: self.child_name(sa, &c),
            inbound_spi: c.inbound_spi,
            outbound_spi: c.outbound_spi,
        });
    }

    fn info_response(&mut self, sa: &mut IkeSa, now: Instant, purpose: Purpose) -> Outcome {
        sa.pending = None;
        sa.my_mid = sa.my_mid.wrapping_add(1);
        match purpose {
            Purpose::DeleteIke => return Outcome::Destroy(None),
            Purpose::DeleteChild(spi) => {
                if let Some(i) = sa.children.iter().position(|c| c.inbound_spi == spi) {
                    let c = sa.children.remove(i);
                    self.child_down(sa, c);
                }
            }
            _ => {}
        }
        self.after_response(sa, now);
        Outcome::Keep
    }

    pub(super) fn send_dpd(&mut self, sa: &mut IkeSa, now: Instant) {
        self.request(sa, ExchangeType::INFORMATIONAL, Purpose::Liveness, &[], now);
    }

    pub(super) fn send_delete_ike(&mut self, sa: &mut IkeSa, now: Instant) {
        if sa.pending.is_some() {
            sa.delete_queued = true;
            return;
        }
        let d = Payload::Delete(Delete::ike());
        self.request(
            sa,
            ExchangeType::INFORMATIONAL,
            Purpose::DeleteIke,
            &[d],
            now,
        );
        sa.state = State::Deleting;
    }

    /// Deletes one CHILD_SA (by our inbound SPI) with an INFORMATIONAL DELETE; ChildSaDown follows the answer.
    pub fn delete_child(
        &mut self,
        ike_sa: crate::event::IkeSaId,
        inbound_spi: u32,
        now: Instant,
    ) -> Result<(), super::EndpointError> {
        let mut sa = self
            .sas
            .remove(&ike_sa)
            .ok_or(super::EndpointError::UnknownIkeSa(ike_sa))?;
        let ok = sa.state == State::Established
            && sa.pending.is_none()
            && sa.children.iter().any(|c| c.inbound_spi == inbound_spi);
        if ok {
            self.send_delete_child(&mut sa, inbound_spi, now);
        }
        self.sas.insert(ike_sa, sa);
        if ok {
            Ok(())
        } else {
            Err(super::EndpointError::Busy)
        }
    }
}
