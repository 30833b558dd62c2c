//! The SA database and SA bundles: outbound, apply a policy's SAs in order (innermost first); inbound, peel ESP/AH
//! headers off one by one, remembering which SAs were used, so the policy check can compare them with the bundle
//! that the inbound policy requires.

use crate::inbound::{classify, esp_in_udp_spi, Classified};
use crate::iphdr::Hdr;
use crate::sa::{InboundSa, Mode, OutboundSa, SaBase};
use crate::{ah, esp, Drop, Protocol};
use netveil_sa::spi::SpiMap;
use netveil_wire::ip::Headers;
use netveil_wire::PacketBuf;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The most SAs one bundle may have (ESP inside AH is two).
pub const MAX_BUNDLE: usize = 4;

/// An outbound SA's place in a [`Sad`]: what an outbound policy's bundle holds. Only [`Sad::insert_out`] makes one,
/// and it reaches only outbound SAs, so no sealing path can reach an inbound SA (whose keys are the peer's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OutIdx(u32);

/// An inbound SA's place in a [`Sad`]: what an inbound policy's bundle and [`Used`] hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InIdx(u32);

impl OutIdx {
    /// Its position among the database's outbound SAs (for tables indexed alike).
    pub fn get(self) -> usize {
        self.0 as usize
    }
}

impl InIdx {
    /// Its position among the database's inbound SAs (for tables indexed alike).
    pub fn get(self) -> usize {
        self.0 as usize
    }
}

/// An index into a [`Sad`] of one direction: [`Sad::get`] gives the SA of that direction's type.
pub trait SadIndex: Copy + private::Sealed {
    /// [`OutboundSa`] or [`InboundSa`].
    type Sa;
    #[doc(hidden)]
    fn get(self, sad: &Sad) -> &Self::Sa;
}

mod private {
    pub trait Sealed {}
    impl Sealed for super::OutIdx {}
    impl Sealed for super::InIdx {}
}

impl SadIndex for OutIdx {
    type Sa = OutboundSa;
    fn get(self, sad: &Sad) -> &OutboundSa {
        sad.out(self)
    }
}

impl SadIndex for InIdx {
    type Sa = InboundSa;
    fn get(self, sad: &Sad) -> &InboundSa {
        sad.inb(self)
    }
}

/// Where an SA of either direction is in a [`Sad`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SaIdx {
    Out(OutIdx),
    In(InIdx),
}

/// A policy's SAs, innermost first: outbound ones for an outbound policy, inbound ones for an inbound policy, and
/// never a mix (the types keep them apart).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Bundle {
    /// No SAs (not a protect policy, a PSP policy, or SAs not all installed).
    #[default]
    None,
    Out(Idxs<OutIdx>),
    In(Idxs<InIdx>),
}

/// A bundle's SA indices, in order: up to [`INLINE`] of them inline, more (a bundle of [`MAX_BUNDLE`], which
/// only a configuration file can ask for) on the heap. A snapshot of the engine's policies is rebuilt for every
/// change and holds a bundle per policy: inline, a gateway's thousands of negotiated CHILD_SAs cost no allocation
/// each per rebuild (and no 32-byte heap block each in the snapshot in force), and a bundle is 24 bytes (with
/// four inline it was 32).
#[derive(Clone)]
pub struct Idxs<T: Copy>(IdxsRepr<T>);

#[derive(Clone)]
enum IdxsRepr<T: Copy> {
    Empty,
    Inline(u8, [T; INLINE]),
    /// Behind a thin pointer (a boxed slice's is two words: the bundle was 8 bytes larger).
    #[allow(clippy::box_collection)]
    Heap(Box<Vec<T>>),
}

/// The most SA indices a bundle holds inline: ESP inside AH is two.
pub const INLINE: usize = 3;

impl<T: Copy> core::ops::Deref for Idxs<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.0 {
            IdxsRepr::Empty => &[],
            IdxsRepr::Inline(n, a) => &a[..usize::from(*n)],
            IdxsRepr::Heap(v) => v,
        }
    }
}

impl<T: Copy> FromIterator<T> for Idxs<T> {
    fn from_iter<I: IntoIterator<Item = T>>(it: I) -> Self {
        let mut it = it.into_iter();
        let Some(first) = it.next() else {
            return Idxs(IdxsRepr::Empty);
        };
        let mut a = [first; INLINE];
        let mut n = 1;
        while let Some(x) = it.next() {
            if n == INLINE {
                let mut v = a.to_vec();
                v.push(x);
                v.extend(it);
                return Idxs(IdxsRepr::Heap(Box::new(v)));
            }
            a[n] = x;
            n += 1;
        }
        Idxs(IdxsRepr::Inline(n as u8, a))
    }
}

impl<T: Copy> From<Vec<T>> for Idxs<T> {
    fn from(v: Vec<T>) -> Self {
        v.into_iter().collect()
    }
}

impl<T: Copy + PartialEq> PartialEq for Idxs<T> {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

impl<T: Copy + Eq> Eq for Idxs<T> {}

impl<T: Copy + core::fmt::Debug> core::fmt::Debug for Idxs<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Bundle {
    /// The outbound SAs (none for an inbound bundle).
    pub fn outbound(&self) -> &[OutIdx] {
        match self {
            Bundle::Out(v) => v,
            _ => &[],
        }
    }
    /// The inbound SAs (none for an outbound bundle).
    pub fn inbound(&self) -> &[InIdx] {
        match self {
            Bundle::In(v) => v,
            _ => &[],
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Bundle::None => 0,
            Bundle::Out(v) => v.len(),
            Bundle::In(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// In [`Sad::iter`]'s order: an inbound SA's index (a database holds fewer than 2^31 SAs of each direction).
const INBOUND: u32 = 1 << 31;

/// One SA of a [`Sad`], in the order they were inserted (for listings).
#[derive(Clone, Copy)]
pub enum SaRef<'a> {
    Out(&'a OutboundSa),
    /// An inbound SA, and whether it is an alias (a replaced SA still taking its peer's packets).
    In(&'a InboundSa, bool),
}

impl<'a> SaRef<'a> {
    /// What both directions have.
    pub fn base(self) -> &'a SaBase {
        match self {
            SaRef::Out(s) => s,
            SaRef::In(s, _) => s,
        }
    }
}

/// All installed SAs: outbound and inbound SAs in tables of their own (an index of one table never reaches the
/// other), inbound ones also by (protocol, SPI). SAs carry their own thread-safe state and are shared (`Arc`), so the
/// database is read-only for the data-plane threads, and a new database (an SA added, replaced or removed) keeps the
/// state of every SA it takes over.
///
/// An inbound SA that was replaced stays for a while as an *alias* of its successor (see [`Sad::insert_alias`]):
/// packets the peer still sends under the old SPI are accepted and pass the policy check as if they came through
/// the new SA (make-before-break).
#[derive(Default, Clone)]
pub struct Sad {
    out: Vec<Arc<OutboundSa>>,
    inb: Vec<Arc<InboundSa>>,
    /// The index policies know `inb[i]` by: `i`, or the successor's index for an alias.
    known_as: Vec<InIdx>,
    inbound: SpiMap<(Protocol, u32), InIdx>,
    /// Insertion order, for listings: an outbound SA's index, or an inbound SA's with [`INBOUND`] set (4 bytes an
    /// SA in every snapshot, not 8).
    order: Vec<u32>,
}

impl Sad {
    /// Empties the database (its SAs are released), keeping its tables' room: a database rebuilt for every change
    /// reuses its predecessor's instead of allocating its own.
    pub fn clear(&mut self) {
        self.out.clear();
        self.inb.clear();
        self.known_as.clear();
        self.inbound.clear();
        self.order.clear();
    }
    /// Adds an outbound SA; returns its index.
    pub fn insert_out(&mut self, sa: OutboundSa) -> OutIdx {
        self.insert_out_arc(Arc::new(sa))
    }
    /// Adds a shared outbound SA (taken over from another database); returns its index.
    pub fn insert_out_arc(&mut self, sa: Arc<OutboundSa>) -> OutIdx {
        let idx = OutIdx(self.out.len() as u32);
        self.out.push(sa);
        debug_assert!(idx.0 & INBOUND == 0);
        self.order.push(idx.0);
        idx
    }
    /// Adds an inbound SA; returns its index. Fails on a (protocol, SPI) that exists already.
    pub fn insert_in(&mut self, sa: InboundSa) -> Result<InIdx, String> {
        self.insert_in_arc(Arc::new(sa))
    }
    /// Adds a shared inbound SA (taken over from another database); returns its index.
    pub fn insert_in_arc(&mut self, sa: Arc<InboundSa>) -> Result<InIdx, String> {
        let idx = InIdx(self.inb.len() as u32);
        self.insert_known_as(sa, idx)
    }
    /// Adds an inbound SA that policies know as the inbound SA `of` (a replaced SA kept until the peer has
    /// switched).
    pub fn insert_alias(&mut self, sa: Arc<InboundSa>, of: InIdx) -> Result<InIdx, String> {
        if of.get() >= self.inb.len() {
            return Err(format!("no inbound SA at index {} to alias", of.get()));
        }
        self.insert_known_as(sa, of)
    }
    fn insert_known_as(&mut self, sa: Arc<InboundSa>, known_as: InIdx) -> Result<InIdx, String> {
        let idx = InIdx(self.inb.len() as u32);
        let key = (sa.protocol(), sa.spi());
        if self.inbound.contains_key(&key) {
            return Err(format!("two inbound SAs with SPI {:#010x}", sa.spi()));
        }
        self.inbound.insert(key, idx);
        self.inb.push(sa);
        self.known_as.push(known_as);
        debug_assert!(idx.0 & INBOUND == 0);
        self.order.push(INBOUND | idx.0);
        Ok(idx)
    }
    /// The SA at `idx`, of `idx`'s direction.
    pub fn get<I: SadIndex>(&self, idx: I) -> &I::Sa {
        idx.get(self)
    }
    /// The outbound SA at `idx`.
    pub fn out(&self, idx: OutIdx) -> &OutboundSa {
        &self.out[idx.get()]
    }
    /// The inbound SA at `idx`.
    pub fn inb(&self, idx: InIdx) -> &InboundSa {
        &self.inb[idx.get()]
    }
    /// The shared handle of the outbound SA at `idx`.
    pub fn out_arc(&self, idx: OutIdx) -> &Arc<OutboundSa> {
        &self.out[idx.get()]
    }
    /// The shared handle of the inbound SA at `idx`.
    pub fn in_arc(&self, idx: InIdx) -> &Arc<InboundSa> {
        &self.inb[idx.get()]
    }
    /// The index policies know the inbound SA at `idx` by (itself, or its successor for an alias).
    pub fn known_as(&self, idx: InIdx) -> InIdx {
        self.known_as[idx.get()]
    }
    /// Whether the inbound SA at `idx` is an alias of a successor.
    pub fn is_alias(&self, idx: InIdx) -> bool {
        self.known_as[idx.get()] != idx
    }
    /// Every SA, in the order inserted.
    pub fn iter(&self) -> impl Iterator<Item = SaRef<'_>> {
        self.order.iter().map(|&o| {
            if o & INBOUND == 0 {
                SaRef::Out(self.out(OutIdx(o)))
            } else {
                let i = InIdx(o & !INBOUND);
                SaRef::In(self.inb(i), self.is_alias(i))
            }
        })
    }
    /// The outbound SAs.
    pub fn outbound(&self) -> impl Iterator<Item = &OutboundSa> {
        self.out.iter().map(|s| &**s)
    }
    /// The outbound SAs' indices.
    pub fn outbound_indices(&self) -> impl Iterator<Item = OutIdx> {
        (0..self.out.len() as u32).map(OutIdx)
    }
    /// The inbound SAs (aliases included).
    pub fn inbound(&self) -> impl Iterator<Item = &InboundSa> {
        self.inb.iter().map(|s| &**s)
    }
    /// How many SAs, of both directions.
    pub fn len(&self) -> usize {
        self.order.len()
    }
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
    pub fn lookup_inbound(&self, proto: Protocol, spi: u32) -> Option<InIdx> {
        self.inbound.get(&(proto, spi)).copied()
    }
}

/// Applies the outbound SAs `bundle` (innermost first) to the packet.
pub fn protect(sad: &Sad, bundle: &[OutIdx], pkt: &mut PacketBuf, now: u64) -> Result<(), Drop> {
    protect_from(sad, bundle, pkt, now, Hdr::Bytes)
}

/// [`protect`] of a packet whose headers the caller parsed already (`hdrs`, the view of the packet in `pkt` as it
/// is now): the innermost SA reads the IP header from it (see [`esp::encapsulate_parsed`],
/// [`ah::encapsulate_parsed`]); an SA after it reads the header the one before it wrote, from the bytes.
pub fn protect_parsed(
    sad: &Sad,
    bundle: &[OutIdx],
    pkt: &mut PacketBuf,
    now: u64,
    hdrs: &Headers,
) -> Result<(), Drop> {
    protect_from(sad, bundle, pkt, now, Hdr::Parsed(hdrs))
}

/// `first`: where the innermost SA reads the IP header; the others read it from the bytes.
fn protect_from(
    sad: &Sad,
    bundle: &[OutIdx],
    pkt: &mut PacketBuf,
    now: u64,
    first: Hdr<'_>,
) -> Result<(), Drop> {
    let mut hdr = first;
    for &i in bundle {
        let sa = sad.out(i);
        match sa.protocol() {
            Protocol::Esp => esp::encap(sa, pkt, now, true, hdr)?,
            Protocol::Ah => ah::encap(sa, pkt, now, hdr)?,
        }
        hdr = Hdr::Bytes;
    }
    Ok(())
}

/// Where [`protect_for_sockets`] left a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protected {
    /// The complete IP packet to send.
    Packet,
    /// The payload of a datagram from `src` (port `sport`) to `to`, for a UDP socket to send: the outermost SA is
    /// ESP in UDP, whose IP and UDP headers the socket writes (tunnel mode: the SA's ends; transport mode: the
    /// packet's addresses).
    UdpPayload {
        src: IpAddr,
        sport: u16,
        to: SocketAddr,
    },
}

/// [`protect`] for a sender that has UDP sockets: an outermost ESP-in-UDP SA leaves the packet as its datagram's
/// payload, without headers to write and parse back (see [`Protected::UdpPayload`]).
pub fn protect_for_sockets(
    sad: &Sad,
    bundle: &[OutIdx],
    pkt: &mut PacketBuf,
    now: u64,
) -> Result<Protected, Drop> {
    protect_for_sockets_from(sad, bundle, pkt, now, Hdr::Bytes)
}

/// [`protect_for_sockets`] of a packet whose headers the caller parsed already, as [`protect_parsed`].
pub fn protect_for_sockets_parsed(
    sad: &Sad,
    bundle: &[OutIdx],
    pkt: &mut PacketBuf,
    now: u64,
    hdrs: &Headers,
) -> Result<Protected, Drop> {
    protect_for_sockets_from(sad, bundle, pkt, now, Hdr::Parsed(hdrs))
}

fn protect_for_sockets_from(
    sad: &Sad,
    bundle: &[OutIdx],
    pkt: &mut PacketBuf,
    now: u64,
    first: Hdr<'_>,
) -> Result<Protected, Drop> {
    let Some((&last, inner)) = bundle.split_last() else {
        return Ok(Protected::Packet);
    };
    let sa = sad.out(last);
    if sa.protocol() == Protocol::Esp && sa.params.encap.is_some() {
        protect_from(sad, inner, pkt, now, first)?;
        // The view is the outermost SA's only if no SA went before it.
        let hdr = if inner.is_empty() { first } else { Hdr::Bytes };
        let (src, sport, to) = esp::encap_udp_payload(sa, pkt, now, hdr)?;
        Ok(Protected::UdpPayload { src, sport, to })
    } else {
        protect_from(sad, bundle, pkt, now, first).map(|()| Protected::Packet)
    }
}

/// What [`protect_for_sockets`] makes of a packet, as it leaves the host: the IP packet's length (with the IP and
/// UDP headers that a socket writes for ESP in UDP) and its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnWire {
    pub len: usize,
    pub dst: IpAddr,
}

/// The length and destination of what `bundle` (innermost first) makes of the IP packet `p` if its length were
/// `len` (its headers as they are), without sealing anything: no sequence number is used, no key touched. A
/// sender compares it with the path's MTU before it seals, and finds with it the largest packet that fits.
pub fn on_wire(sad: &Sad, bundle: &[OutIdx], p: &[u8], len: usize) -> Result<OnWire, Drop> {
    let ip = crate::iphdr::parse(p)?;
    let dst = netveil_wire::ip::dst_addr(p).ok_or(Drop::Malformed)?;
    on_wire_from(sad, bundle, ip.header_len, ip.v6, dst, len)
}

/// [`on_wire`] of the packet whose headers `hdrs` are (its layout before ESP/AH, family and destination; nothing
/// else of the packet is read), as if its length were `len`.
pub fn on_wire_parsed(
    sad: &Sad,
    bundle: &[OutIdx],
    hdrs: &Headers,
    len: usize,
) -> Result<OnWire, Drop> {
    let ip = hdrs.before_ipsec();
    on_wire_from(sad, bundle, ip.header_len, ip.v6, hdrs.dst_addr(), len)
}

/// `hdr`: the length of the packet's headers before ESP/AH; `v6`, `dst`: its family and destination.
fn on_wire_from(
    sad: &Sad,
    bundle: &[OutIdx],
    hdr: usize,
    v6: bool,
    dst: IpAddr,
    len: usize,
) -> Result<OnWire, Drop> {
    // The IP packet so far: its length, its header's (with the IPv6 extension headers before ESP/AH), family.
    let (mut total, mut hdr, mut v6, mut dst) = (len, hdr, v6, dst);
    let plain = |v6: bool| {
        if v6 {
            netveil_wire::ipv6::HEADER_LEN
        } else {
            netveil_wire::ipv4::MIN_HEADER_LEN
        }
    };
    for (k, &i) in bundle.iter().enumerate() {
        let sa = sad.out(i);
        let tunnel = match sa.params.mode {
            Mode::Tunnel { remote, .. } => Some(remote),
            Mode::Transport => None,
        };
        match sa.protocol() {
            Protocol::Esp => {
                let (iv, icv, block, tfc) = esp::lengths(sa)?;
                let payload = match tunnel {
                    // (TFC padding only in tunnel mode, up to its target.)
                    Some(_) => total.max(tfc),
                    None => total.checked_sub(hdr).ok_or(Drop::Malformed)?,
                };
                let pad = (block - (payload + 2) % block) % block;
                let esp_len = 8 + iv + payload + pad + 2 + icv;
                let udp = if sa.params.encap.is_some() {
                    netveil_wire::udp::HEADER_LEN
                } else {
                    0
                };
                if let Some(remote) = tunnel {
                    v6 = remote.is_ipv6();
                    dst = remote;
                    hdr = plain(v6);
                } else if udp > 0 && k + 1 == bundle.len() {
                    // The socket writes a plain IP header in place of the packet's.
                    hdr = plain(v6);
                }
                total = hdr + udp + esp_len;
            }
            Protocol::Ah => {
                let icv = ah::icv_len(sa)?;
                if let Some(remote) = tunnel {
                    v6 = remote.is_ipv6();
                    dst = remote;
                    hdr = plain(v6);
                    total += hdr;
                }
                total += ah::header_len(icv, v6);
            }
        }
    }
    Ok(OnWire { len: total, dst })
}

/// The SAs an inbound packet came through, outermost first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Used {
    sas: [InIdx; MAX_BUNDLE],
    len: usize,
}

impl Default for Used {
    fn default() -> Self {
        Used {
            sas: [InIdx(0); MAX_BUNDLE],
            len: 0,
        }
    }
}

impl Used {
    pub fn as_slice(&self) -> &[InIdx] {
        &self.sas[..self.len]
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Whether these SAs are exactly `bundle` (given innermost first, as policies list them).
    pub fn matches(&self, bundle: &[InIdx]) -> bool {
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
                let sa = sad.inb(idx);
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
    let sa = sad.inb(idx);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_indices_keep_their_order_inline_and_past_max_bundle() {
        for n in 0..=MAX_BUNDLE + 2 {
            let v: Vec<OutIdx> = (0..n as u32).map(|i| OutIdx(i * 7 + 1)).collect();
            let x: Idxs<OutIdx> = v.iter().copied().collect();
            assert_eq!(&x[..], &v[..], "{n} indices");
            assert_eq!(Idxs::from(v.clone()), x);
            assert_eq!(Bundle::Out(x.clone()).outbound(), &v[..]);
            assert_eq!(Bundle::Out(x).len(), n);
        }
        // Equal by their indices only (the unused inline slots hold copies of the first).
        let a: Idxs<InIdx> = [InIdx(1), InIdx(2)].into_iter().collect();
        let b: Idxs<InIdx> = [InIdx(1), InIdx(2), InIdx(3)].into_iter().take(2).collect();
        assert_eq!(a, b);
        assert_ne!(a, [InIdx(1)].into_iter().collect());
        assert_eq!(format!("{a:?}"), "[InIdx(1), InIdx(2)]");
        // A snapshot holds a bundle per policy: up to INLINE indices inline in 24 bytes.
        assert!(std::mem::size_of::<Bundle>() <= 24);
    }
}
