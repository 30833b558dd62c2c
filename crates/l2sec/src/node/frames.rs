//! The frames: sealed on the way out (group frames, sessions, queued until a session is up) and opened on the
//! way in (sessions, group senders and their epochs, SEP messages, ARP checked against the bindings).

use std::net::Ipv4Addr;
use std::time::Instant;

use ed25519_dalek::SigningKey;
use netveil_wire::ethernet::{self, ethertype, Address};
use netveil_wire::{arp, ipv4, PacketBuf};

use super::config::{group_keys, BROADCAST, MAX_GROUP_SENDERS, MAX_PEERS};
use super::host::Node;
use super::peer::GroupSender;
use super::report::{Inbound, NodeDrop, Outbound};
use crate::error::Drop;
use crate::header::{Repr, Version};
use crate::sep::{self, Mac, SepError};
use crate::session::{peek, RxConfig, RxSession, SealOpts};

fn is_group(mac: &Mac) -> bool {
    mac[0] & 1 == 1
}

/// The IPv4 address a frame is for, when it shows one (IPv4 destination, ARP target).
fn target_ipv4(frame: &[u8]) -> Option<Ipv4Addr> {
    // Only the address is read: the rest of the IPv4 header or ARP packet is not checked.
    let eth = ethernet::Packet::new_checked(frame).ok()?;
    let l3 = eth.payload();
    match eth.ethertype() {
        ethertype::IPV4 if l3.len() >= ipv4::MIN_HEADER_LEN => {
            Some(ipv4::Packet::new_unchecked(l3).dst_addr())
        }
        ethertype::ARP => Some(arp::Packet::new_checked(l3).ok()?.target_proto_addr()),
        _ => None,
    }
}

/// An Ethernet/IPv4 ARP packet's sender hardware and protocol addresses (`None` for anything else).
fn arp_sender(frame: &[u8]) -> Option<(Mac, Ipv4Addr)> {
    let eth = ethernet::Packet::new_checked(frame).ok()?;
    if eth.ethertype() != ethertype::ARP {
        return None;
    }
    let a = arp::Packet::new_checked(eth.payload()).ok()?;
    if (
        a.hardware_type(),
        a.protocol_type(),
        a.hardware_len(),
        a.protocol_len(),
    ) != (arp::HTYPE_ETHERNET, ethertype::IPV4, 6, 4)
    {
        return None;
    }
    Some((a.sender_hw_addr().0, a.sender_proto_addr()))
}

impl Node {
    fn unix(&self, now: Instant) -> u32 {
        let (i, u) = self.unix_base;
        (u + now.saturating_duration_since(i).as_secs()) as u32
    }

    pub(super) fn rx_config(&self, key_id: u8, group_epoch: Option<u64>) -> RxConfig {
        let group = group_epoch.is_some();
        RxConfig {
            ethertype: self.cfg.ethertype,
            key_id,
            epoch: group_epoch.filter(|_| self.cfg.group_suite.version() == Version::V1),
            insecure_ecb: self.cfg.insecure_ecb,
            insecure_null: self.cfg.insecure_null,
            replay_window: self.cfg.replay_window,
            require_encryption: true,
            require_signature: group && self.cfg.require_signatures,
            require_security_number: self.cfg.security_number.is_some(),
            require_timestamp: self.cfg.timestamps,
            timestamp_tolerance: self.cfg.timestamp_tolerance,
            security_numbers: [self.cfg.security_number, None],
        }
    }

    /// Bytes of head- and tailroom a frame from the host side needs (the largest of every mode in use).
    pub fn overhead(&self) -> (usize, usize) {
        let signer = self.cfg.signing_key.as_ref();
        let opts = SealOpts {
            security_number: self.cfg.security_number,
            timestamp: self.cfg.timestamps.then_some(0),
            signer,
            encrypt: true,
        };
        let (h, t) = self.group_tx.overhead(&opts);
        // Sessions: up to 16 bytes of header and, unsigned, at most a block of padding plus a 20-byte HMAC.
        (h.max(16), t.max(15 + 20))
    }

    /// The per-frame options (security number, timestamp) of this host; `signer` for group frames.
    fn seal_opts<'k>(&self, now: Instant, signer: Option<&'k SigningKey>) -> SealOpts<'k> {
        SealOpts {
            security_number: self.cfg.security_number,
            timestamp: self.cfg.timestamps.then(|| self.unix(now)),
            signer,
            encrypt: true,
        }
    }

    fn seal_group(&mut self, frame: &mut PacketBuf, now: Instant) -> Result<(), NodeDrop> {
        let opts = self.seal_opts(now, self.cfg.signing_key.as_ref());
        self.group_tx
            .seal(frame, &opts)
            .map_err(|_| NodeDrop::TxFailed)?;
        self.stats.tx_group += 1;
        Ok(())
    }

    /// A frame the host sent (from the TAP device). `Ok(Send)`: sealed in place; `Ok(Queued)`: copied and kept;
    /// `Err`: dropped (counted).
    pub fn handle_outbound(
        &mut self,
        frame: &mut PacketBuf,
        now: Instant,
    ) -> Result<Outbound, NodeDrop> {
        let r = self.outbound(frame, now);
        match r {
            Ok(Outbound::Send) => {
                self.stats.tx_frames += 1;
                self.stats.tx_bytes += frame.len() as u64;
            }
            Ok(Outbound::Queued) => {}
            Err(d) => self.stats.tx_drops.count(d),
        }
        r
    }

    pub(super) fn outbound(
        &mut self,
        frame: &mut PacketBuf,
        now: Instant,
    ) -> Result<Outbound, NodeDrop> {
        let eth = ethernet::Packet::new_checked(frame.data()).map_err(|_| Drop::Malformed)?;
        let dst: Mac = eth.dst_addr().0;
        if eth.src_addr().0 != self.cfg.mac {
            // The host only sends with its own address (the TAP device has the port's MAC).
            return Err(Drop::Malformed.into());
        }
        if is_group(&dst) {
            self.seal_group(frame, now)?;
            return Ok(Outbound::Send);
        }
        let opts = self.seal_opts(now, None);
        if let Some(p) = self.peers.get_mut(&dst) {
            if let Some(s) = p.cur.as_mut().filter(|s| now < s.expires) {
                s.tx.seal(frame, &opts).map_err(|_| NodeDrop::TxFailed)?;
                p.stats.tx_frames += 1;
                p.stats.tx_bytes += frame.len() as u64;
                return Ok(Outbound::Send);
            }
        }
        // No session: keep the frame and set one up.
        if !self.peers.contains_key(&dst) && self.peers.len() >= MAX_PEERS {
            return Err(NodeDrop::QueueFull);
        }
        let ip = target_ipv4(frame.data());
        let limit = self.cfg.queue_limit;
        let p = self.peers.entry(dst).or_default();
        if ip.is_some() {
            p.ip = ip;
        }
        if p.queue.len() >= limit {
            p.stats.dropped += 1;
            return Err(NodeDrop::QueueFull);
        }
        p.queue.push_back(frame.data().to_vec());
        let ip = p.ip;
        self.start_sep(dst, ip, now);
        Ok(Outbound::Queued)
    }

    /// Seals a SEP message as a group frame to the broadcast address and queues it.
    pub(super) fn send_control(&mut self, msg: &[u8], now: Instant) {
        let mut b = PacketBuf::new(msg.len() + ethernet::HEADER_LEN + 256, 32);
        if let Some(d) = b.push_back(ethernet::HEADER_LEN + msg.len()) {
            let mut eth = ethernet::Packet::new_unchecked(d);
            ethernet::Repr {
                src: Address(self.cfg.mac),
                dst: Address(BROADCAST),
                ethertype: self.cfg.ethertype,
            }
            .emit(&mut eth);
            eth.payload_mut().copy_from_slice(msg);
        }
        if self.seal_group(&mut b, now).is_ok() {
            self.ready.push_back(b.data().to_vec());
        } else {
            self.stats.tx_drops.count(NodeDrop::TxFailed);
        }
    }

    /// A frame from the wire. `Ok(Deliver)`: opened in place, for the host; `Ok(Control)`: a SEP message,
    /// consumed; `Err`: dropped (counted).
    pub fn handle_inbound(
        &mut self,
        frame: &mut PacketBuf,
        now: Instant,
    ) -> Result<Inbound, NodeDrop> {
        let r = self.inbound(frame, now);
        match r {
            Ok(Inbound::Deliver) => {
                self.stats.rx_frames += 1;
                self.stats.rx_bytes += frame.len() as u64;
            }
            Ok(Inbound::Control) => self.stats.sep_messages += 1,
            Err(d) => self.stats.rx_drops.count(d),
        }
        r
    }

    fn inbound(&mut self, frame: &mut PacketBuf, now: Instant) -> Result<Inbound, NodeDrop> {
        let p = peek(frame.data(), self.cfg.ethertype)?;
        let (src, dst) = (p.src.0, p.dst.0);
        if src == self.cfg.mac || is_group(&src) {
            return Err(Drop::Malformed.into());
        }
        if is_group(&dst) {
            return self.group_inbound(frame, src, &p.header, now);
        }
        if dst != self.cfg.mac {
            return Err(NodeDrop::NotForUs);
        }
        let unix = self.unix(now);
        let v1 = p.header.version == Version::V1;
        let key_id = p.header.key_id;
        // Only a peer with a session is looked at: nothing is created, nothing started for anyone else.
        let Some(peer) = self.peers.get_mut(&src) else {
            return Err(NodeDrop::NoSession);
        };
        let mut result = Err(NodeDrop::NoSession);
        for s in [peer.cur.as_mut(), peer.prev.as_mut()]
            .into_iter()
            .flatten()
        {
            if now >= s.expires {
                continue;
            }
            if v1 && s.key_id != key_id {
                result = Err(Drop::UnknownKeyId.into());
                continue;
            }
            result = s.rx.open(frame, unix, None).map_err(NodeDrop::from);
            // Version 0 has no key id: a frame that fails under the current session may be one of the previous.
            if result != Err(Drop::AuthFailed.into()) {
                break;
            }
        }
        result?;
        peer.stats.rx_frames += 1;
        peer.stats.rx_bytes += frame.len() as u64;
        self.check_arp(frame.data(), src)?;
        Ok(Inbound::Deliver)
    }

    /// A group frame from `src` (see the module documentation: epochs, authentication before state).
    fn group_inbound(
        &mut self,
        frame: &mut PacketBuf,
        src: Mac,
        hdr: &Repr,
        now: Instant,
    ) -> Result<Inbound, NodeDrop> {
        let unix = self.unix(now);
        let ep = match self.cfg.group_suite.version() {
            // (A version-0 session refuses a frame with the bit set as malformed.)
            Version::V0 => 0,
            Version::V1 => hdr.epoch.ok_or(Drop::Policy)?,
        };
        // What the header alone refuses is refused before any key is derived or any state looked up: an unsigned
        // frame where signatures are required, a signed one from a sender without a listed key.
        if self.cfg.require_signatures && !hdr.signed {
            return Err(Drop::Policy.into());
        }
        if hdr.signed && !self.cfg.peer_keys.contains_key(&src) {
            return Err(Drop::NoPeerKey.into());
        }
        let known = self.group_rx.get(&src).map(|g| g.epoch);
        let peer_epoch = self.peers.get(&src).map_or(0, |p| p.epoch);
        if ep < known.unwrap_or(0).max(peer_epoch) {
            return Err(NodeDrop::OldEpoch);
        }
        let peer_key = self.cfg.peer_keys.get(&src);
        let (opened, restarted) = match self.group_rx.get_mut(&src) {
            Some(g) if g.epoch == ep => {
                let o = g.rx.open(frame, unix, peer_key)?;
                g.seen = now;
                (o, false)
            }
            _ => {
                // A sender not heard yet, or a newer epoch of one: keys derived now, a window only once the frame
                // authenticated.
                self.stats.group_key_derivations += 1;
                let keys = group_keys(&self.cfg, src, ep).map_err(|_| Drop::NoKey)?;
                let mut rx = RxSession::candidate(&keys, self.rx_config(0, Some(ep)))
                    .map_err(|_| Drop::NoKey)?;
                let o = rx.open(frame, unix, peer_key)?;
                let restarted =
                    known.is_some_and(|k| k < ep) || (peer_epoch != 0 && peer_epoch < ep);
                if known.is_none() && self.group_rx.len() >= MAX_GROUP_SENDERS {
                    if let Some(k) = self
                        .group_rx
                        .iter()
                        .min_by_key(|(_, g)| g.seen)
                        .map(|(k, _)| *k)
                    {
                        self.group_rx.remove(&k);
                    }
                }
                self.group_rx.insert(
                    src,
                    GroupSender {
                        epoch: ep,
                        rx,
                        seen: now,
                    },
                );
                (o, restarted)
            }
        };
        self.stats.rx_group += 1;
        let resume = restarted && self.peer_restarted(src);
        let r = if opened.ethertype == self.cfg.ethertype {
            self.control(frame, src, (ep, opened.seq), now)
        } else {
            self.check_arp(frame.data(), src).map(|_| Inbound::Deliver)
        };
        if resume && !self.sep.in_progress(&src) {
            let ip = self.peers.get(&src).and_then(|p| p.ip);
            self.start_sep(src, ip, now);
        }
        r
    }

    /// A SEP message (an opened group frame with the l2sec EtherType inside) from `src`.
    fn control(
        &mut self,
        frame: &PacketBuf,
        src: Mac,
        order: (u64, u64),
        now: Instant,
    ) -> Result<Inbound, NodeDrop> {
        let msg = frame
            .data()
            .get(ethernet::HEADER_LEN..)
            .unwrap_or(&[])
            .to_vec();
        if let Some(ip) = sep::stated_ip(&msg, self.cfg.mac) {
            if !self.binding_allows(src, ip) {
                self.stats.sep_error(SepError::IpBound);
                return Err(NodeDrop::SepRefused);
            }
        }
        let r = self.sep.handle_message(src, &msg, order, now);
        self.drain_sep(now);
        match r {
            Ok(()) => Ok(Inbound::Control),
            // Every host sees every SEP message (broadcast); those for others are not a failure.
            Err(SepError::NotTarget) => {
                self.stats.sep_error(SepError::NotTarget);
                Ok(Inbound::Control)
            }
            Err(e) => {
                self.stats.sep_error(e);
                Err(NodeDrop::SepRefused)
            }
        }
    }

    /// An opened frame from `src`: if it is ARP, may `src` say what it says?
    fn check_arp(&self, frame: &[u8], src: Mac) -> Result<(), NodeDrop> {
        let Some((sha, spa)) = arp_sender(frame) else {
            return Ok(());
        };
        if sha != src {
            return Err(NodeDrop::ArpSpoofed);
        }
        if spa.is_unspecified() {
            return Ok(());
        }
        if self.binding(&src).is_some_and(|b| b != spa) {
            return Err(NodeDrop::ArpSpoofed);
        }
        if self.bound.get(&spa).is_some_and(|m| *m != src) {
            return Err(NodeDrop::ArpSpoofed);
        }
        Ok(())
    }
}
