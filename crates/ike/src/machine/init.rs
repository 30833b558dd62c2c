//! IKE_SA_INIT (RFC 7296 1.2), both roles: proposals, key exchange, nonces, NAT detection (2.23), cookies (2.6)
//! and INVALID_KE_PAYLOAD (1.3).
//!
//! INVALID_KE_PAYLOAD: the initiator retries once, with the group the responder asked for if it is in one of its
//! proposals, keeping its SPI and message id 0 and sending a new KE (and the same nonce), as RFC 7296 1.2 / 2.7
//! allow and strongSwan does (the responder keeps no state for the refused request, so nothing on its side
//! depends on the SPI). COOKIE: the initiator sends the same request again with the COOKIE notify first.

use std::net::SocketAddr;
use std::time::Instant;

use netveil_crypto::dh::{Group, KeyPair};

use super::sa::{backoff, Chosen, IkeSa, Pending, Purpose, State};
use super::Endpoint;
use super::{glue, intermediate};
use crate::event::Failure;
use crate::keys::{skeyseed, IkeKeys, IkeSuite, Role};
use crate::message::notify::hash_algorithm;
use crate::message::{
    payload_type, ExchangeType, Header, Ke, Message, Nonce, Notify, NotifyType, Payload,
};
use crate::proposal::{self, Ke as KeMethod, Preference, Protocol};

/// Bytes of our nonces.
pub const NONCE_LEN: usize = 32;
/// Longest cookie the initiator takes (RFC 7296 2.6: 1 to 64 bytes).
const MAX_COOKIE: usize = 64;
/// IKE_SA_INIT restarts (cookie or INVALID_KE) an initiator makes before it gives up.
const MAX_RESTARTS: u32 = 4;

/// The DH group of a key exchange method (`None`: not one this endpoint computes).
pub fn dh_group(k: KeMethod) -> Option<Group> {
    match k {
        KeMethod::Curve25519 => Some(Group::X25519),
        KeMethod::Modp2048 => Some(Group::Modp2048),
        KeMethod::Modp3072 => Some(Group::Modp3072),
        KeMethod::Ecp256 => Some(Group::Ecp256),
        KeMethod::Ecp384 => Some(Group::Ecp384),
        KeMethod::MlKem768 => None,
    }
}

fn ke_method(id: u16) -> Option<KeMethod> {
    KeMethod::ALL.iter().copied().find(|k| k.id() == id)
}

fn sig_hash_notify() -> Notify {
    let algs = [
        hash_algorithm::SHA2_256,
        hash_algorithm::SHA2_384,
        hash_algorithm::SHA2_512,
        hash_algorithm::IDENTITY,
    ];
    Notify::new(
        NotifyType::SIGNATURE_HASH_ALGORITHMS,
        algs.iter().flat_map(|a| a.to_be_bytes()).collect(),
    )
}

/// Whether one of the NAT detection notifies of type `t` carries `expected` (`None`: there is none of that type).
fn nat_matches(msg: &Message, t: NotifyType, expected: &[u8]) -> Option<bool> {
    let mut any = false;
    for n in msg.notifies().filter(|n| n.notify_type == t) {
        any = true;
        if n.data == expected {
            return Some(true);
        }
    }
    any.then_some(false)
}

fn count(msg: &Message, t: u8) -> usize {
    msg.payloads_of(t).count()
}

impl Endpoint {
    /// Sends (again) the initiator's IKE_SA_INIT request with the SA's cookie, group and nonce.
    pub(super) fn start_init(&mut self, sa: &mut IkeSa, now: Instant) {
        let conn = &self.connections[sa.conn];
        let group = sa
            .hs()
            .group
            .or_else(|| conn.proposals.iter().find_map(|p| p.ke().first().copied()));
        let Some((method, g)) = group.and_then(|m| dh_group(m).map(|g| (m, g))) else {
            return;
        };
        if sa.dh.as_ref().map(|k| k.group()) != Some(g) {
            sa.dh = Some(Box::new(KeyPair::generate(g, &mut *self.rng)));
        }
        sa.hs_mut().group = Some(method);
        if sa.hs().ni.is_empty() {
            sa.hs_mut().ni = vec![0u8; NONCE_LEN].into();
            self.rng.fill(&mut sa.hs_mut().ni);
        }
        let conn = &self.connections[sa.conn];
        let mut payloads = Vec::new();
        if let Some(c) = &sa.hs().cookie {
            payloads.push(Payload::Notify(Notify::new(NotifyType::COOKIE, c.to_vec())));
        }
        payloads.push(Payload::Sa(glue::sa_payload(&conn.proposals, &[])));
        payloads.push(Payload::Ke(Ke {
            group: method.id(),
            data: sa
                .dh
                .as_ref()
                .map(|k| k.public().to_vec())
                .unwrap_or_default(),
        }));
        payloads.push(Payload::Nonce(
            Nonce::new(sa.hs().ni.to_vec()).expect("32-byte nonce"),
        ));
        let source = if conn.encap {
            // strongSwan's `encap`: a source hash that matches no address, so that the peer sees a NAT.
            let mut fake = vec![0u8; 20];
            self.rng.fill(&mut fake);
            fake
        } else {
            glue::nat_hash(sa.spi_i, 0, sa.local)
        };
        payloads.push(Payload::Notify(Notify::new(
            NotifyType::NAT_DETECTION_SOURCE_IP,
            source,
        )));
        payloads.push(Payload::Notify(Notify::new(
            NotifyType::NAT_DETECTION_DESTINATION_IP,
            glue::nat_hash(sa.spi_i, 0, sa.remote),
        )));
        if conn.fragmentation {
            payloads.push(Payload::Notify(Notify::new(
                NotifyType::IKEV2_FRAGMENTATION_SUPPORTED,
                Vec::new(),
            )));
        }
        if conn.proposals.iter().any(intermediate::has_add_ke) {
            payloads.push(intermediate::supported_notify());
        }
        payloads.push(Payload::Notify(sig_hash_notify()));
        let bytes = sa.clear_message(ExchangeType::IKE_SA_INIT, false, 0, payloads);
        sa.hs_mut().init_sent = bytes.as_slice().into();
        let retransmit = conn.retransmit;
        sa.pending = Some(Box::new(Pending {
            message_id: 0,
            purpose: Purpose::Init,
            bytes: vec![bytes.clone()],
            retries: 0,
            next_at: now + backoff(&retransmit, 0),
        }));
        self.send(sa.local, sa.remote, bytes);
    }

    // ---- responder ----

    /// A clear IKE_SA_INIT response carrying only `notify` (no state is kept).
    fn init_refuse(&mut self, local: SocketAddr, remote: SocketAddr, hdr: &Header, notify: Notify) {
        let msg = Message {
            header: Header {
                responder_spi: 0,
                flags: crate::message::Flags {
                    initiator: false,
                    version: false,
                    response: true,
                },
                ..*hdr
            },
            payloads: vec![Payload::Notify(notify)],
        };
        if let Ok(b) = msg.to_vec() {
            self.send(local, remote, b);
        }
    }

    fn matches_addrs(&self, ci: usize, local: SocketAddr, remote: SocketAddr) -> bool {
        let c = &self.connections[ci];
        (c.local_addrs.is_empty() || c.local_addrs.contains(&local.ip()))
            && (c.remote_addrs.is_empty() || c.remote_addrs.contains(&remote.ip()))
    }

    pub(super) fn init_request(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        hdr: &Header,
        bytes: &[u8],
    ) {
        if hdr.responder_spi != 0
            || hdr.message_id != 0
            || !hdr.flags.initiator
            || hdr.initiator_spi == 0
        {
            self.counters.unexpected += 1;
            return;
        }
        // A retransmission of a request we answered: the same answer.
        if let Some(id) = self.by_init.get(hdr.initiator_spi, remote, &self.sas) {
            match self.sas.get(&id) {
                Some(sa) if *sa.hs().init_received == *bytes => {
                    let (l, r, b) = (sa.local, sa.remote, sa.hs().init_sent.to_vec());
                    self.counters.responses_resent += 1;
                    self.send(l, r, b);
                }
                _ => self.counters.dropped += 1,
            }
            return;
        }
        let Ok(msg) = Message::parse(bytes) else {
            self.counters.dropped += 1;
            return;
        };
        let candidates: Vec<usize> = (0..self.connections.len())
            .filter(|&ci| self.matches_addrs(ci, local, remote))
            .collect();
        if candidates.is_empty() {
            self.counters.dropped += 1;
            let m = self.no_match(local.ip(), remote.ip(), None, None, None);
            self.fail(usize::MAX, None, Failure::NoMatchingConnection(m));
            return;
        }
        let (Some(Payload::Sa(sa_p)), Some(Payload::Ke(ke)), Some(Payload::Nonce(ni))) = (
            msg.payloads_of(payload_type::SA).next(),
            msg.payloads_of(payload_type::KE).next(),
            msg.payloads_of(payload_type::NONCE).next(),
        ) else {
            self.init_refuse(
                local,
                remote,
                hdr,
                Notify::new(NotifyType::INVALID_SYNTAX, vec![]),
            );
            return;
        };
        if count(&msg, payload_type::SA) != 1
            || count(&msg, payload_type::KE) != 1
            || count(&msg, payload_type::NONCE) != 1
        {
            self.init_refuse(
                local,
                remote,
                hdr,
                Notify::new(NotifyType::INVALID_SYNTAX, vec![]),
            );
            return;
        }
        // Cookies under load (RFC 7296 2.6): the COOKIE notify must come first.
        self.rotate_cookie_secret(now);
        if self.half_open >= self.limits.cookie_threshold {
            let ok = match msg.payloads.first() {
                Some(Payload::Notify(n)) if n.notify_type == NotifyType::COOKIE => {
                    self.cookie_valid(&n.data, ni.as_bytes(), remote, hdr.initiator_spi)
                }
                _ => false,
            };
            if !ok {
                let c = Self::cookie_for(
                    &self.cookie.current,
                    self.cookie.version,
                    ni.as_bytes(),
                    remote,
                    hdr.initiator_spi,
                );
                self.counters.cookies_sent += 1;
                self.init_refuse(local, remote, hdr, Notify::new(NotifyType::COOKIE, c));
                return;
            }
        }
        if self.half_open >= self.limits.half_open_max || self.sas.len() >= self.limits.ike_sa_max {
            self.counters.dropped += 1;
            return;
        }
        // Proposals: the first connection (by address) that has one in common.
        let theirs = glue::ike_proposals(sa_p);
        let their_list: Vec<_> = theirs.iter().map(|(_, p)| p.clone()).collect();
        let peer_ies = msg
            .notifies()
            .any(|n| n.notify_type == NotifyType::INTERMEDIATE_EXCHANGE_SUPPORTED);
        let found = candidates.iter().find_map(|&ci| {
            proposal::select(
                &intermediate::usable(&self.connections[ci].proposals, peer_ies),
                &their_list,
                Preference::Ours,
            )
            .filter(|s| s.chosen.ke().first().and_then(|&k| dh_group(k)).is_some())
            .map(|s| (ci, s))
        });
        let Some((ci, sel)) = found else {
            let ours = glue::names(&self.connections[candidates[0]].proposals);
            self.init_refuse(
                local,
                remote,
                hdr,
                Notify::new(NotifyType::NO_PROPOSAL_CHOSEN, vec![]),
            );
            self.fail(
                candidates[0],
                None,
                Failure::NoProposalChosen {
                    ours,
                    theirs: glue::names(&their_list),
                },
            );
            return;
        };
        let method = sel.chosen.ke()[0];
        if ke.group != method.id() {
            self.init_refuse(local, remote, hdr, Notify::invalid_ke_payload(method.id()));
            return;
        }
        let group = dh_group(method).expect("filtered above");
        let dh = KeyPair::generate(group, &mut *self.rng);
        let Ok(shared) = dh.agree(&ke.data) else {
            self.init_refuse(
                local,
                remote,
                hdr,
                Notify::new(NotifyType::INVALID_SYNTAX, vec![]),
            );
            return;
        };
        let Ok(suite) = IkeSuite::from_proposal(&sel.chosen) else {
            self.counters.dropped += 1;
            return;
        };
        let mut nr = vec![0u8; NONCE_LEN];
        self.rng.fill(&mut nr);
        let spi_r = self.new_ike_spi();
        let spi_i = hdr.initiator_spi;
        let seed = skeyseed(suite.prf(), ni.as_bytes(), &nr, &shared);
        let Ok(keys) = IkeKeys::derive(
            suite,
            &seed,
            ni.as_bytes(),
            &nr,
            &spi_i.to_be_bytes(),
            &spi_r.to_be_bytes(),
        ) else {
            self.counters.dropped += 1;
            return;
        };
        let id = self.new_id();
        let mut sa = IkeSa::new(id, ci, Role::Responder, spi_i, spi_r, local, remote, now);
        if !sa.set_keys(keys) {
            self.counters.dropped += 1;
            return;
        }
        sa.nat_remote = nat_matches(
            &msg,
            NotifyType::NAT_DETECTION_SOURCE_IP,
            &glue::nat_hash(spi_i, 0, remote),
        ) == Some(false);
        sa.nat_local = nat_matches(
            &msg,
            NotifyType::NAT_DETECTION_DESTINATION_IP,
            &glue::nat_hash(spi_i, 0, local),
        ) == Some(false);
        sa.hs_mut().ni = ni.as_bytes().into();
        sa.hs_mut().nr = nr.as_slice().into();
        sa.hs_mut().group = Some(method);
        sa.chosen = Some(Chosen::new(&sel.chosen));
        sa.peer_mid = 1;
        sa.hs_mut().init_received = bytes.into();
        let number = sa_p.proposals[theirs[sel.peer].0].number;
        let mut payloads = vec![
            Payload::Sa(crate::message::Sa {
                proposals: vec![glue::to_wire(&sel.chosen, number, &[])],
            }),
            Payload::Ke(Ke {
                group: method.id(),
                data: dh.public().to_vec(),
            }),
            Payload::Nonce(Nonce::new(nr).expect("32-byte nonce")),
            Payload::Notify(Notify::new(
                NotifyType::NAT_DETECTION_SOURCE_IP,
                glue::nat_hash(spi_i, spi_r, local),
            )),
            Payload::Notify(Notify::new(
                NotifyType::NAT_DETECTION_DESTINATION_IP,
                glue::nat_hash(spi_i, spi_r, remote),
            )),
        ];
        let peer_frag = msg
            .notifies()
            .any(|n| n.notify_type == NotifyType::IKEV2_FRAGMENTATION_SUPPORTED);
        if self.connections[ci].fragmentation && peer_frag {
            sa.fragment_len = Some(u32::try_from(self.limits.fragment_len).unwrap_or(u32::MAX));
            payloads.push(Payload::Notify(Notify::new(
                NotifyType::IKEV2_FRAGMENTATION_SUPPORTED,
                Vec::new(),
            )));
        }
        if peer_ies {
            payloads.push(intermediate::supported_notify());
        }
        if intermediate::has_add_ke(&sel.chosen) {
            sa.intermediate = Some(Box::default());
        }
        payloads.push(Payload::Notify(sig_hash_notify()));
        payloads.extend(super::pubkey::certreq(&self.connections));
        let out = sa.clear_message(ExchangeType::IKE_SA_INIT, true, 0, payloads);
        sa.hs_mut().init_sent = out.as_slice().into();
        self.by_spi.insert(spi_r, id);
        self.by_init.insert(spi_i, remote, id, &self.sas);
        self.half_open += 1;
        self.sas.insert(id, Box::new(sa));
        self.send(local, remote, out);
    }

    // ---- initiator ----

    pub(super) fn init_response(
        &mut self,
        now: Instant,
        _local: SocketAddr,
        _remote: SocketAddr,
        hdr: &Header,
        bytes: &[u8],
    ) {
        let id = match self.by_spi.get(&hdr.initiator_spi) {
            Some(&id) => id,
            None => {
                self.counters.dropped += 1;
                return;
            }
        };
        let Some(mut sa) = self.sas.remove(&id) else {
            return;
        };
        let waiting = sa.role == Role::Initiator
            && sa.state == State::InitSent
            && hdr.message_id == 0
            && !hdr.flags.initiator;
        if !waiting {
            self.counters.unexpected += 1;
            self.sas.insert(id, sa);
            return;
        }
        match self.init_response_for(&mut sa, now, hdr, bytes) {
            Ok(()) => {
                self.sas.insert(id, sa);
            }
            Err(Some(f)) => self.destroy(*sa, Some(f)),
            Err(None) => {
                // Not a usable answer: ignored; retransmissions go on (a forged reply cannot end the attempt).
                self.counters.dropped += 1;
                self.sas.insert(id, sa);
            }
        }
    }

    /// `Err(Some)`: the attempt fails; `Err(None)`: the message is ignored.
    fn init_response_for(
        &mut self,
        sa: &mut IkeSa,
        now: Instant,
        hdr: &Header,
        bytes: &[u8],
    ) -> Result<(), Option<Failure>> {
        let msg = Message::parse(bytes).map_err(|_| None)?;
        let restarts = u32::from(sa.hs().cookie.is_some()) + u32::from(sa.hs().ke_retried);
        if let Some(c) = msg.notifies().find(|n| n.notify_type == NotifyType::COOKIE) {
            if count(&msg, payload_type::SA) == 0
                && restarts < MAX_RESTARTS
                && !c.data.is_empty()
                && c.data.len() <= MAX_COOKIE
            {
                sa.hs_mut().cookie = Some(c.data.as_slice().into());
                self.start_init(sa, now);
                return Ok(());
            }
            return Err(None);
        }
        if let Some(n) = msg.notifies().find(|n| n.notify_type.is_error()) {
            if let Some(g) = n.invalid_ke_group() {
                let offered = self.connections[sa.conn]
                    .proposals
                    .iter()
                    .flat_map(|p| p.ke())
                    .any(|k| k.id() == g);
                let method = ke_method(g).filter(|&m| dh_group(m).is_some());
                if let (false, true, Some(m)) = (sa.hs().ke_retried, offered, method) {
                    if Some(m) != sa.hs().group {
                        sa.hs_mut().ke_retried = true;
                        sa.hs_mut().group = Some(m);
                        self.start_init(sa, now);
                        return Ok(());
                    }
                }
            }
            let conn = &self.connections[sa.conn];
            return Err(Some(glue::peer_refusal(
                n,
                || glue::names(&conn.proposals),
                Vec::new,
            )));
        }
        if hdr.responder_spi == 0
            || count(&msg, payload_type::SA) != 1
            || count(&msg, payload_type::KE) != 1
            || count(&msg, payload_type::NONCE) != 1
        {
            return Err(None);
        }
        let (Some(Payload::Sa(sa_p)), Some(Payload::Ke(ke)), Some(Payload::Nonce(nr))) = (
            msg.payloads_of(payload_type::SA).next(),
            msg.payloads_of(payload_type::KE).next(),
            msg.payloads_of(payload_type::NONCE).next(),
        ) else {
            return Err(None);
        };
        // The responder's choice: one proposal, one of each transform, among what we offered.
        let [w] = &sa_p.proposals[..] else {
            return Err(None);
        };
        let chosen = glue::from_wire(w, Protocol::Ike)
            .filter(|p| p.is_single() && w.spi.is_empty())
            .ok_or(None)?;
        let ours = &self.connections[sa.conn].proposals;
        match proposal::select(ours, std::slice::from_ref(&chosen), Preference::Ours) {
            Some(s) if s.chosen == chosen => {}
            _ => return Err(None),
        }
        let method = chosen.ke()[0];
        if Some(method) != sa.hs().group || ke.group != method.id() {
            return Err(None);
        }
        let peer_ies = msg
            .notifies()
            .any(|n| n.notify_type == NotifyType::INTERMEDIATE_EXCHANGE_SUPPORTED);
        if intermediate::has_add_ke(&chosen) && !peer_ies {
            return Err(None);
        }
        let shared = sa
            .dh
            .as_ref()
            .ok_or(None)?
            .agree(&ke.data)
            .map_err(|_| None)?;
        let suite = IkeSuite::from_proposal(&chosen).map_err(|_| None)?;
        let seed = skeyseed(suite.prf(), &sa.hs().ni, nr.as_bytes(), &shared);
        let keys = IkeKeys::derive(
            suite,
            &seed,
            &sa.hs().ni,
            nr.as_bytes(),
            &sa.spi_i.to_be_bytes(),
            &hdr.responder_spi.to_be_bytes(),
        )
        .map_err(|_| None)?;
        if !sa.set_keys(keys) {
            return Err(None);
        }
        sa.spi_r = hdr.responder_spi;
        sa.hs_mut().nr = nr.as_bytes().into();
        sa.dh = None;
        sa.chosen = Some(Chosen::new(&chosen));
        sa.hs_mut().init_received = bytes.into();
        sa.nat_remote = nat_matches(
            &msg,
            NotifyType::NAT_DETECTION_SOURCE_IP,
            &glue::nat_hash(sa.spi_i, sa.spi_r, sa.remote),
        ) == Some(false);
        sa.nat_local = nat_matches(
            &msg,
            NotifyType::NAT_DETECTION_DESTINATION_IP,
            &glue::nat_hash(sa.spi_i, sa.spi_r, sa.local),
        ) == Some(false);
        if sa.nat_local || sa.nat_remote || self.connections[sa.conn].encap {
            sa.local.set_port(4500);
            sa.remote.set_port(4500);
        }
        let peer_frag = msg
            .notifies()
            .any(|n| n.notify_type == NotifyType::IKEV2_FRAGMENTATION_SUPPORTED);
        if self.connections[sa.conn].fragmentation && peer_frag {
            sa.fragment_len = Some(u32::try_from(self.limits.fragment_len).unwrap_or(u32::MAX));
        }
        sa.pending = None;
        sa.my_mid = 1;
        sa.last_heard = now;
        self.after_init(sa, now);
        Ok(())
    }
}
