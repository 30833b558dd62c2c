//! The SA database and SA bundles: outbound, apply a policy's SAs in order (innermost first); inbound, peel ESP/AH
//! headers off one by one, remembering which SAs were used, so the policy check can compare them with the bundle
//! that the inbound policy requires.

use crate::inbound::{classify, esp_in_udp_spi, Classified};
use crate::sa::{Direction, Mode, Sa};
use crate::{ah, esp, Drop, Protocol};
use netveil_sa::spi::SpiMap;
use netveil_wire::PacketBuf;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The most SAs one bundle may have (ESP inside AH is two).
pub const MAX_BUNDLE: usize = 4;

/// All installed SAs, indexed by (protocol, SPI) for inbound lookup. SAs carry their own thread-safe state and are
/// shared (`Arc`), so the database is read-only for the data-plane threads, and a new database (an SA added,
/// replaced or removed) keeps the state of every SA it takes over.
///
/// Policies name SAs by index. An inbound SA that was replaced stays for a while as an *alias* of its successor's
/// index (see [`Sad::insert_alias`]): packets the peer still sends under the old SPI are accepted and pass the
/// policy check as if they came through the new SA (make-before-break).
#[derive(Default, Clone)]
pub struct Sad {
    sas: Vec<Arc<Sa>>,
    /// The index policies know `sas[i]` by: `i`, or the successor's index for an alias.
    known_as: Vec<usize>,
    inbound: SpiMap<(Protocol, u32), usize>,
}

impl Sad {
    /// Adds an SA; returns its index. Fails on an inbound (protocol, SPI) that exists already.
    pub fn insert(&mut self, sa: Sa) -> Result<usize, String> {
        self.insert_arc(Arc::new(sa))
    }
    /// Adds a shared SA (taken over from another database); returns its index.
    pub fn insert_arc(&mut self, sa: Arc<Sa>) -> Result<usize, String> {
        let idx = self.sas.len();
        self.insert_known_as(sa, idx)
    }
    /// Adds an inbound SA that policies know as the SA at `of` (a replaced SA kept until the peer has switched).
    pub fn insert_alias(&mut self, sa: Arc<Sa>, of: usize) -> Result<usize, String> {
        if of >= self.sas.len() {
            return Err(format!("no SA at index {of} to alias"));
        }
        self.insert_known_as(sa, of)
    }
    fn insert_known_as(&mut self, sa: Arc<Sa>, known_as: usize) -> Result<usize, String> {
        let idx = self.sas.len();
        if sa.params.direction == Direction::In {
            let key = (sa.protocol(), sa.spi());
            if self.inbound.contains_key(&key) {
                return Err(format!("two inbound SAs with SPI {:#010x}", sa.spi()));
            }
            self.inbound.insert(key, idx);
        }
        self.sas.push(sa);
        self.known_as.push(known_as);
        Ok(idx)
    }
    pub fn get(&self, idx: usize) -> &Sa {
        &self.sas[idx]
    }
    /// The shared handle of the SA at `idx`.
    pub fn arc(&self, idx: usize) -> &Arc<Sa> {
        &self.sas[idx]
    }
    /// The index policies know the SA at `idx` by (itself, or its successor for an alias).
    pub fn known_as(&self, idx: usize) -> usize {
        self.known_as[idx]
    }
    /// Whether the SA at `idx` is an alias of a successor.
    pub fn is_alias(&self, idx: usize) -> bool {
        self.known_as[idx] != idx
    }
    pub fn len(&self) -> usize {
        self.sas.len()
    }
    pub fn is_empty(&self) -> bool {
        self.sas.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = &Sa> {
        self.sas.iter().map(|s| &**s)
    }
    pub fn lookup_inbound(&self, proto: Protocol, spi: u32) -> Option<usize> {
        self.inbound.get(&(proto, spi)).copied()
    }
}

/// Applies the SAs `bundle` (indices into `sad`, innermost first) to the packet.
pub fn protect(sad: &Sad, bundle: &[usize], pkt: &mut PacketBuf, now: u64) -> Result<(), Drop> {
    for &i in bundle {
        let sa = sad.get(i);
        match sa.protocol() {
            Protocol::Esp => esp::encapsulate(sa, pkt, now)?,
            Protocol::Ah => ah::encapsulate(sa, pkt, now)?,
        }
    }
    Ok(())
}

/// Where [`protect_for_sockets`] left a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protected {
    /// The complete IP packet to send.
    Packet,
    /// The payload of a datagram from `src` (port `sport`) to `to`, for a UDP socket to send: the outermost SA is
    /// tunnel-mode ESP in UDP, whose outer IP and UDP headers the socket writes.
    UdpPayload {
        src: IpAddr,
        sport: u16,
        to: SocketAddr,
    },
}

/// [`protect`] for a sender that has UDP sockets: an outermost tunnel-mode ESP-in-UDP SA leaves the packet as its
/// datagram's payload, without outer headers to write and parse back (see [`Protected::UdpPayload`]).
pub fn protect_for_sockets(
    sad: &Sad,
    bundle: &[usize],
    pkt: &mut PacketBuf,
    now: u64,
) -> Result<Protected, Drop> {
    let Some((&last, inner)) = bundle.split_last() else {
        return Ok(Protected::Packet);
    };
    let sa = sad.get(last);
    match sa.udp_tunnel_ends() {
        Some((src, sport, to)) => {
            protect(sad, inner, pkt, now)?;
            esp::encapsulate_udp_payload(sa, pkt, now)?;
            Ok(Protected::UdpPayload { src, sport, to })
        }
        None => protect(sad, bundle, pkt, now).map(|()| Protected::Packet),
    }
}

/// The SAs an inbound packet came through, outermost first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Used {
    sas: [usize; MAX_BUNDLE],
    len: usize,
}

impl Used {
    pub fn as_slice(&self) -> &[usize] {
        &self.sas[..self.len]
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Whether these SAs are exactly `bundle` (given innermost first, as policies list them).
    pub fn matches(&self, bundle: &[usize]) -> bool {
        self.len == bundle.len() && self.as_slice().iter().rev().eq(bundle.iter())
    }
}

/// Result of inbound processing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unprotected {
    /// `pkt` now holds the decapsulated packet; these SAs were used.
    Packet(Used),
    /// The packet was not protected at all (the caller's policy decides).
    Clear,
    /// An IKE message or NAT keepalive on the NAT-T port.
    NotEsp,
}

/// Removes every ESP/AH layer of the packet in `pkt`. On error, the drop is already counted on the SA concerned
/// (if any); the caller counts it globally.
pub fn unprotect(
    sad: &Sad,
    pkt: &mut PacketBuf,
    nat_t_port: u16,
    now: u64,
) -> Result<Unprotected, Drop> {
    let mut used = Used::default();
    loop {
        match classify(pkt, nat_t_port)? {
            Classified::Clear(_) if used.is_empty() => return Ok(Unprotected::Clear),
            Classified::Clear(_) => return Ok(Unprotected::Packet(used)),
            Classified::NotEsp if used.is_empty() => return Ok(Unprotected::NotEsp),
            Classified::NotEsp => return Err(Drop::Unsupported),
            Classified::Protected(loc) => {
                if used.len == MAX_BUNDLE {
                    return Err(Drop::Unsupported);
                }
                let idx = sad
                    .lookup_inbound(loc.protocol, loc.spi)
                    .ok_or(Drop::UnknownSpi)?;
                let sa = sad.get(idx);
                // As the kernel's SA lookup by (destination, SPI, protocol): a tunnel SA takes only packets addressed to
                // its local end; ESP-in-UDP only for an SA configured for it, and raw ESP only for one that is not.
                if let Mode::Tunnel { local, .. } = sa.params.mode {
                    if netveil_wire::ip::dst_addr(pkt.data()) != Some(local) {
                        return Err(sa.count_drop(Drop::UnknownSpi));
                    }
                }
                if loc.udp != sa.params.encap.is_some() {
                    return Err(sa.count_drop(Drop::Unsupported));
                }
                let d = match loc.protocol {
                    Protocol::Esp => esp::decapsulate(sa, pkt, &loc, now)?,
                    Protocol::Ah => ah::decapsulate(sa, pkt, &loc, now)?,
                };
                used.sas[used.len] = sad.known_as(idx);
                used.len += 1;
                if d.tunnel {
                    return Ok(Unprotected::Packet(used));
                }
            }
        }
    }
}

/// What [`unprotect_udp_payload`] made of a datagram's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpUnprotected {
    /// `pkt` now holds the inner packet of a tunnel-mode SA, which was used.
    Packet(Used),
    /// An IKE message or NAT keepalive.
    NotEsp,
    /// Its SA needs the outer headers (transport mode): `pkt` is untouched; give it its IP and UDP headers and
    /// call [`unprotect`].
    NeedsHeaders,
}

/// [`unprotect`] for the payload of a datagram received on the NAT-T port to `dst`, which `pkt` holds without
/// its IP and UDP headers (a datagram of a coalesced receive, opened where it lies). The same checks, in the same
/// order: an ESP-in-UDP SA for the SPI, a tunnel SA's local address equal to `dst`.
pub fn unprotect_udp_payload(
    sad: &Sad,
    pkt: &mut PacketBuf,
    dst: IpAddr,
    now: u64,
) -> Result<UdpUnprotected, Drop> {
    let Some(spi) = esp_in_udp_spi(pkt.data())? else {
        return Ok(UdpUnprotected::NotEsp);
    };
    let idx = sad
        .lookup_inbound(Protocol::Esp, spi)
        .ok_or(Drop::UnknownSpi)?;
    let sa = sad.get(idx);
    match sa.params.mode {
        Mode::Tunnel { local, .. } if local != dst => return Err(sa.count_drop(Drop::UnknownSpi)),
        Mode::Tunnel { .. } => {}
        Mode::Transport => return Ok(UdpUnprotected::NeedsHeaders),
    }
    if sa.params.encap.is_none() {
        return Err(sa.count_drop(Drop::Unsupported));
    }
    esp::decapsulate_udp_payload(sa, pkt, now)?;
    let mut used = Used::default();
    used.sas[0] = sad.known_as(idx);
    used.len = 1;
    Ok(UdpUnprotected::Packet(used))
}
