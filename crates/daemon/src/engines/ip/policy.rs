//! The IP engine's policy decisions: outbound and inbound checks, first-fragment memory.

use super::pmtu::PathMtu;
use super::shared::{Datagram, Shared, TxRecord};
use crate::engines::ip::db::Snapshot;
use crate::engines::ip::drop::Drop;
use netveil_io::PacketBuf;
use netveil_ipsec::bundle::{self, Protected, Unprotected};
use netveil_ipsec::Drop as IpsecDrop;
use netveil_sa::policy::{decide_error, Action, Direction, FlowKey};
use netveil_wire::ip::Headers;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;

impl Shared {
    /// Outbound: a packet read from the TUN becomes the packet to send (in place), or a drop; returns its record
    /// (how it leaves, and for a datagram from where to where).
    ///
    /// Fragments (RFC 4301 section 7): a later fragment carries no ports, so it gets the decision its packet's first
    /// fragment got (remembered in `frags`); if that is not known and some policy selects by port, it is dropped.
    ///
    /// ICMP errors (RFC 4301 section 6.2): an error is decided by the flow of the packet it quotes, reversed
    /// (`policy_keys`), where a policy protects or discards that flow: the host's "port unreachable" for a datagram
    /// of a port-selective protect policy quotes the decrypted datagram, and goes through that policy's SAs instead
    /// of a bypass policy (in clear) or a discard. The inbound check after decapsulation reads it the same way.
    ///
    /// `snap`: the SAs and policies in force (loaded once per batch). Traffic for a protect policy whose SAs are not
    /// installed is dropped and reported (acquire).
    ///
    /// No route's MTU limits what this seals (the transmit threads check it: see `process_out_on_path`).
    pub fn process_out(
        &self,
        snap: &Snapshot,
        pkt: &mut PacketBuf,
        now: u64,
        frags: &mut FragCache,
    ) -> std::result::Result<TxRecord, Drop> {
        self.process_out_on_path(snap, pkt, now, frags, &mut PathMtu::fixed(&[]))
    }

    /// [`Shared::process_out`], where a packet that sealed would not fit the route to its peer is not sealed and
    /// its sender is told the size that fits ([`super::pmtu`]).
    pub(crate) fn process_out_on_path(
        &self,
        snap: &Snapshot,
        pkt: &mut PacketBuf,
        now: u64,
        frags: &mut FragCache,
        pmtu: &mut PathMtu,
    ) -> std::result::Result<TxRecord, Drop> {
        // The packet's headers, parsed once: the policy lookup, the path's MTU and the transforms read them here.
        let hdrs = Headers::parse(pkt.data()).map_err(|_| IpsecDrop::Malformed)?;
        let (key, frag, quoted) = policy_keys_of(pkt.data(), &hdrs)?;
        let action = self.decide(
            snap,
            Direction::Out,
            &key,
            quoted.as_ref(),
            frag,
            now,
            frags,
        )?;
        if let Some(f) = frag.filter(|f| f.first) {
            frags.insert(&key, f.ident, action, now);
        }
        match action {
            Action::Protect(i) if snap.policies[i].rule.psp => {
                self.psp_out(pkt, &hdrs, &key, now, pmtu)
            }
            Action::Protect(i) => {
                // Only outbound SAs: an outbound policy's bundle cannot hold anything else.
                let sas = snap.policies[i].sas.outbound();
                if sas.is_empty() {
                    if snap.acquire_due(i, now) {
                        self.db.report(crate::engines::ip::db::acquire(
                            &snap.policies[i].rule.name,
                            &key,
                        ));
                    }
                    return Err(Drop::NoSa);
                }
                fits_path(&snap.sad, sas, &hdrs, pkt.data(), now, pmtu)?;
                Ok(
                    match bundle::protect_for_sockets_parsed(&snap.sad, sas, pkt, now, &hdrs)? {
                        Protected::UdpPayload { src, sport, to } => {
                            TxRecord::NatT(Datagram { src, sport, to })
                        }
                        // The outermost tunnel SA says the family, else (transport mode only) the packet's own.
                        Protected::Packet => TxRecord::raw(
                            sas.iter()
                                .rev()
                                .find_map(|&o| match snap.sad.out(o).params.mode {
                                    netveil_ipsec::Mode::Tunnel { remote, .. } => {
                                        Some(remote.is_ipv6())
                                    }
                                    netveil_ipsec::Mode::Transport => None,
                                })
                                .unwrap_or(key.dst.is_ipv6()),
                        ),
                    },
                )
            }
            Action::Bypass => {
                // Bypassed traffic from the TUN is forwarded like a router would: the TTL or hop limit goes down, so
                // that a packet whose route leads back into the TUN cannot circle forever.
                decrement_ttl(pkt.data_mut())?;
                self.bypassed.fetch_add(1, Relaxed);
                Ok(TxRecord::raw(key.dst.is_ipv6()))
            }
            Action::Discard => Err(Drop::PolicyDiscard),
        }
    }

    /// Inbound: a received ESP/AH packet becomes the packet to deliver to the TUN (in place), or a drop.
    /// Decapsulated traffic must match an inbound protect policy whose SAs are exactly the ones it came through.
    pub fn process_in(
        &self,
        snap: &Snapshot,
        pkt: &mut PacketBuf,
        now: u64,
        frags: &mut FragCache,
    ) -> std::result::Result<(), Drop> {
        match bundle::unprotect(&snap.sad, pkt, self.config.interface.nat_t_port, now)? {
            Unprotected::Packet(used) => {
                self.check_in(snap, pkt.data(), now, frags, came_through(used))
            }
            Unprotected::Clear | Unprotected::NotEsp => Err(IpsecDrop::Unsupported.into()),
        }
    }

    /// The policy decision for a packet of `key` in `dir`; for an ICMP error, `quoted` is the flow of the packet it
    /// quotes, reversed, which decides where a policy protects or discards it (RFC 4301 section 6.2, see
    /// [`netveil_sa::policy::decide_error`]). A later fragment (no ports) gets the decision its first fragment got,
    /// from `frags`; if that is not known, it is dropped where some policy selects by port, else looked up like any
    /// packet.
    #[allow(clippy::too_many_arguments)]
    fn decide(
        &self,
        snap: &Snapshot,
        dir: Direction,
        key: &FlowKey,
        quoted: Option<&FlowKey>,
        frag: Option<netveil_wire::ip::Fragment>,
        now: u64,
        frags: &mut FragCache,
    ) -> std::result::Result<Action, Drop> {
        match frag {
            Some(f) if !f.first => match frags.get(key, f.ident, now) {
                Some(a) => Ok(a),
                None if snap.port_selective => Err(Drop::FragmentNoState),
                None => Ok(frags.lookup(snap, dir, key)),
            },
            _ => Ok(
                decide_error(key, quoted, |k| (None, frags.lookup(snap, dir, k)))
                    .0
                     .1,
            ),
        }
    }

    /// The inbound policy check of a decapsulated packet: the first matching rule must be a protect policy that
    /// `came_through` accepts (its SAs, or PSP). A later fragment is checked against its first fragment's policy
    /// (see [`Shared::process_out`]).
    pub(super) fn check_in(
        &self,
        snap: &Snapshot,
        p: &[u8],
        now: u64,
        frags: &mut FragCache,
        came_through: impl Fn(&crate::engines::ip::db::SnapPolicy) -> bool,
    ) -> std::result::Result<(), Drop> {
        let (key, frag, quoted) = policy_keys(p)?;
        let action = self.decide(snap, Direction::In, &key, quoted.as_ref(), frag, now, frags)?;
        let r = match action {
            Action::Protect(i) if came_through(&snap.policies[i]) => Ok(()),
            Action::Discard => Err(Drop::PolicyDiscard),
            _ => Err(Drop::PolicyMismatch),
        };
        if let (Ok(()), Some(f)) = (r, frag) {
            if f.first {
                frags.insert(&key, f.ident, action, now);
            }
        }
        r
    }
}

/// The inbound policy check of ESP/AH traffic: a protect policy whose SAs are exactly the ones `used` (see
/// [`Shared::check_in`]).
pub(super) fn came_through(
    used: bundle::Used,
) -> impl Fn(&crate::engines::ip::db::SnapPolicy) -> bool {
    move |p| !p.rule.psp && !p.sas.inbound().is_empty() && used.matches(p.sas.inbound())
}

/// Decrements the IPv4 TTL (updating the header checksum, RFC 1624) or the IPv6 hop limit.
pub(super) fn decrement_ttl(p: &mut [u8]) -> std::result::Result<(), Drop> {
    netveil_wire::ip::decrement_hop_limit(p).map_err(|e| match e {
        netveil_wire::ip::HopLimitError::Exceeded => Drop::TtlExceeded,
        netveil_wire::ip::HopLimitError::Malformed => IpsecDrop::Malformed.into(),
    })
}

/// The policy-relevant fields of an IP packet (ports 0 for protocols without ports and for non-first fragments);
/// `None` for a packet whose headers do not parse.
pub fn flow_key(p: &[u8]) -> Option<FlowKey> {
    flow_key_frag(p).map(|(k, _)| k)
}

/// [`flow_key`], and for a fragment what identifies its packet.
pub fn flow_key_frag(p: &[u8]) -> Option<(FlowKey, Option<netveil_wire::ip::Fragment>)> {
    let f = netveil_wire::ip::flow_key(p).ok()?;
    Some((
        FlowKey {
            src: f.src,
            dst: f.dst,
            proto: f.proto,
            src_port: f.src_port,
            dst_port: f.dst_port,
        },
        f.frag,
    ))
}

/// What a packet's policy decision reads, from one parse of its headers: its flow, for a fragment what identifies
/// its packet, and for an ICMP or ICMPv6 error the flow of the packet it quotes, reversed: the flow the error goes
/// back along, which its decision follows (see [`Shared::process_out`]). A packet whose headers do not parse is
/// malformed; so is an error whose quote cannot be read: whether it quotes a protected flow cannot be told (Linux
/// sends none such).
pub type PolicyKeys = (FlowKey, Option<netveil_wire::ip::Fragment>, Option<FlowKey>);

/// The [`PolicyKeys`] of the IP packet `p`.
pub fn policy_keys(p: &[u8]) -> std::result::Result<PolicyKeys, Drop> {
    let h = Headers::parse(p).map_err(|_| IpsecDrop::Malformed)?;
    policy_keys_of(p, &h)
}

/// The [`PolicyKeys`] of the IP packet `p`, whose headers `h` are (parsed from `p` as it is).
pub(super) fn policy_keys_of(p: &[u8], h: &Headers) -> std::result::Result<PolicyKeys, Drop> {
    use netveil_wire::icmp::{error_quote_of, ErrorQuote};
    let f = h.flow();
    let quoted = match error_quote_of(p, &f) {
        ErrorQuote::NotAnError => None,
        ErrorQuote::Unreadable => return Err(IpsecDrop::Malformed.into()),
        ErrorQuote::Quotes(q) => {
            let r = q.reversed();
            Some(FlowKey {
                src: r.src,
                dst: r.dst,
                proto: r.proto,
                src_port: r.src_port,
                dst_port: r.dst_port,
            })
        }
    };
    let key = FlowKey {
        src: f.src,
        dst: f.dst,
        proto: f.proto,
        src_port: f.src_port,
        dst_port: f.dst_port,
    };
    Ok((key, f.frag, quoted))
}

/// How long a first fragment's decision is remembered (the IPv4 reassembly timeout).
pub(super) const FRAG_SECONDS: u64 = 30;
/// Packets whose fragments are remembered at once (per thread); a newer packet takes an older one's slot.
const FRAG_SLOTS: usize = 4096;

/// The policy decisions of first fragments, by (source, destination, protocol, identification), so that later
/// fragments (without ports) get the same (RFC 4301 section 7): a fixed table owned by one data-plane thread, no
/// allocation per packet. A slot taken by another packet makes that packet's later fragments unknown (dropped
/// where policies select by port, never sent in clear).
///
/// It also remembers the last policy decision with its flow and snapshot, since a batch mostly holds segments of
/// one flow: the same flow under the same snapshot gets it again without a walk through the policies.
pub struct FragCache {
    slots: Vec<Option<FragSlot>>,
    hasher: std::collections::hash_map::RandomState,
    /// (snapshot generation, direction, flow, decision) of the last lookup.
    last: Option<(u64, Direction, FlowKey, Action)>,
}

#[derive(Clone, Copy)]
struct FragSlot {
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    ident: u32,
    action: Action,
    expires: u64,
}

impl Default for FragCache {
    fn default() -> Self {
        FragCache {
            slots: vec![None; FRAG_SLOTS],
            hasher: Default::default(),
            last: None,
        }
    }
}

impl FragCache {
    fn index(&self, k: &FlowKey, ident: u32) -> usize {
        use std::hash::BuildHasher;
        self.hasher.hash_one((k.src, k.dst, k.proto, ident)) as usize % FRAG_SLOTS
    }

    /// The policy decision for a flow in `dir` under `snap`: the last one if it was for the same, else looked up
    /// (and remembered).
    fn lookup(&mut self, snap: &Snapshot, dir: Direction, key: &FlowKey) -> Action {
        if let Some((g, d, k, a)) = &self.last {
            if *g == snap.generation && *d == dir && k == key {
                return *a;
            }
        }
        let a = snap.spd.lookup(dir, key).1;
        self.last = Some((snap.generation, dir, *key, a));
        a
    }

    /// Remembers the decision for the packet of a first fragment.
    pub fn insert(&mut self, k: &FlowKey, ident: u32, action: Action, now: u64) {
        let i = self.index(k, ident);
        self.slots[i] = Some(FragSlot {
            src: k.src,
            dst: k.dst,
            proto: k.proto,
            ident,
            action,
            expires: now + FRAG_SECONDS,
        });
    }

    /// The decision of the first fragment of a later fragment's packet, if remembered.
    pub fn get(&self, k: &FlowKey, ident: u32, now: u64) -> Option<Action> {
        let s = self.slots[self.index(k, ident)]?;
        (s.src == k.src
            && s.dst == k.dst
            && s.proto == k.proto
            && s.ident == ident
            && now < s.expires)
            .then_some(s.action)
    }
}

/// Whether the IP packet `p` (whose headers are `hdrs`), sealed by `sas`, fits the route to its peer (see
/// [`fits_len`]).
pub(super) fn fits_path(
    sad: &netveil_ipsec::bundle::Sad,
    sas: &[netveil_ipsec::bundle::OutIdx],
    hdrs: &Headers,
    p: &[u8],
    now: u64,
    pmtu: &mut PathMtu,
) -> std::result::Result<(), Drop> {
    let w = bundle::on_wire_parsed(sad, sas, hdrs, p.len())?;
    let in_udp = sas
        .last()
        .is_some_and(|&o| sad.out(o).params.encap.is_some());
    fits_len(hdrs, p, w.dst, in_udp, w.len, now, pmtu, |len| {
        bundle::on_wire_parsed(sad, sas, hdrs, len)
            .ok()
            .map(|w| w.len)
    })
}

/// Whether the IP packet `p` (whose headers are `hdrs`: its family and DF are read there), `len` bytes once
/// sealed, fits the route to `dst`, `wire_len` giving what leaves for a packet of another length like `p` (see
/// [`super::pmtu`]). A packet that does not is refused (`too-big-for-path`) and its
/// sender told the largest size that fits; except an IPv4 packet without DF sent by UDP (`in_udp`) and an IPv6
/// packet of at most 1,280 bytes, which go on to the socket as before (the datagram socket fragments the outer
/// packet), and a packet for which nothing down to the protocol's minimum MTU (68 or 1,280 bytes) would fit.
pub(super) fn fits_len(
    hdrs: &Headers,
    p: &[u8],
    dst: IpAddr,
    in_udp: bool,
    len: usize,
    now: u64,
    pmtu: &mut PathMtu,
    wire_len: impl Fn(usize) -> Option<usize>,
) -> std::result::Result<(), Drop> {
    let Some(mtu) = pmtu.mtu(dst, now).map(|m| m as usize) else {
        return Ok(());
    };
    if len <= mtu {
        return Ok(());
    }
    let v6 = hdrs.is_ipv6();
    let df = !v6 && hdrs.dscp_ecn_df().1;
    if (v6 && p.len() <= IPV6_MIN_MTU) || (!v6 && !df && in_udp) {
        return Ok(());
    }
    let fits = |l: usize| wire_len(l).is_some_and(|w| w <= mtu);
    // Where not even the protocol's minimum would fit (a tiny link, large TFC padding), no size can be offered.
    let floor = if v6 { IPV6_MIN_MTU } else { IPV4_MIN_MTU };
    if !fits(floor) {
        return Ok(());
    }
    if pmtu.may_answer(now) {
        // The largest length that fits: the sealed length grows with the packet's, a byte for a byte but for the
        // padding of each layer (less than SLACK in all), so it lies within SLACK of the length less the excess;
        // from above that, down to the first that fits.
        let mut fit = (p.len() + SLACK)
            .saturating_sub(len - mtu)
            .min(p.len() - 1)
            .max(floor);
        while !fits(fit) {
            fit -= 1;
        }
        pmtu.answer(p, fit as u32, now);
    }
    Err(Drop::TooBigForPath)
}

/// More than the padding of a bundle's layers together (ESP's up to a cipher block of 16 bytes less one, AH's up to
/// 7, at most [`netveil_ipsec::bundle::MAX_BUNDLE`] layers).
const SLACK: usize = 16 * netveil_ipsec::bundle::MAX_BUNDLE;

/// IPv6's minimum link MTU (RFC 8200 section 5).
const IPV6_MIN_MTU: usize = 1280;
/// The smallest datagram every IPv4 host must forward unfragmented (RFC 791).
const IPV4_MIN_MTU: usize = 68;
