//! AH (RFC 4302): integrity for the whole IP packet, including the immutable fields of the IP header and of IPv6
//! extension headers. Transport and tunnel mode, IPv4 and IPv6, with ESN.
//!
//! The ICV is computed over the packet as sent, with mutable fields (IPv4 TOS, flags/fragment offset, TTL,
//! checksum and mutable options; IPv6 traffic class, flow label, hop limit and the data of options marked "may
//! change en route") and the ICV field itself taken as zero. Nothing is copied or zeroed in the packet: the MAC is
//! fed a list of slices in which those fields are replaced by zeros.

use crate::esp::Decapsulated;
use crate::iphdr::{self, Hdr};
use crate::sa::{InboundSa, Keys, Mode, OutboundSa, SaBase};
use crate::{inbound::Located, Drop};
use netveil_crypto::Mac;
use netveil_sa::lifetime::LifetimeState;
use netveil_wire::ip::Headers;
use netveil_wire::{ip, ip_proto, ipv4, ipv6, PacketBuf};
use std::sync::atomic::Ordering::Relaxed;

static ZEROS: [u8; 256] = [0; 256];
const MAX_PARTS: usize = 64;

fn mac(sa: &SaBase) -> Result<&dyn Mac, Drop> {
    match sa.keys() {
        Some(Keys::Ah(m)) => Ok(m.as_ref()),
        _ => Err(Drop::Unsupported),
    }
}

/// The ICV length of the AH SA `sa`.
pub(crate) fn icv_len(sa: &SaBase) -> Result<usize, Drop> {
    Ok(mac(sa)?.tag_len())
}

/// Length of the AH header for this ICV length: 12 + ICV, padded to 4 (IPv4) or 8 (IPv6) bytes.
pub fn header_len(icv_len: usize, v6: bool) -> usize {
    let a = if v6 { 8 } else { 4 };
    (12 + icv_len).div_ceil(a) * a
}

/// IPv4 options that RFC 4302 Appendix A1 lists as immutable (and so included in the ICV as they are).
fn v4_option_immutable(t: u8) -> bool {
    matches!(t, 0 | 1 | 130 | 133 | 134 | 148 | 149)
}

/// Feeds the MAC the packet `p` with the AH header at `ah_off` of length `ah_len`, mutable fields as zeros.
fn icv(
    mac: &dyn Mac,
    p: &[u8],
    v6: bool,
    ah_off: usize,
    ah_len: usize,
    seq_hi: Option<[u8; 4]>,
    out: &mut [u8],
) -> Result<(), Drop> {
    let mut hdr = [0u8; 60];
    let mut parts: [&[u8]; MAX_PARTS] = [&[]; MAX_PARTS];
    let mut n = 0usize;
    let seq_hi_buf;
    // The IP header (and IPv6 extension headers).
    if !v6 {
        let ip = ipv4::Packet::new_unchecked(p);
        let ihl = ip.header_len();
        if ihl > ah_off || ihl < ipv4::MIN_HEADER_LEN {
            return Err(Drop::Malformed);
        }
        hdr[..ihl].copy_from_slice(&p[..ihl]);
        let mut h = ipv4::Packet::new_unchecked(&mut hdr[..ihl]);
        h.set_dscp_ecn(0);
        h.set_flags(0);
        h.set_frag_offset(0);
        h.set_ttl(0);
        h.set_checksum(0);
        // Options: immutable ones stay, every other option is zeroed whole.
        for o in ip.options_iter() {
            let o = o.map_err(|_| Drop::Malformed)?;
            if !v4_option_immutable(o.kind) {
                let at = ipv4::MIN_HEADER_LEN + o.offset;
                hdr[at..at + o.len()].fill(0);
            }
        }
        parts[n] = &hdr[..ihl];
        n += 1;
    } else {
        hdr[..ipv6::HEADER_LEN].copy_from_slice(&p[..ipv6::HEADER_LEN]);
        let mut h = ipv6::Packet::new_unchecked(&mut hdr[..ipv6::HEADER_LEN]);
        h.set_traffic_class(0);
        h.set_flow_label(0);
        h.set_hop_limit(0);
        parts[n] = &hdr[..ipv6::HEADER_LEN];
        n += 1;
        // Extension headers between the fixed header and AH.
        let mut exts = ipv6::ExtHeaderIter::new(p)
            .map_err(|_| Drop::Malformed)?
            .stop_at_ah();
        for e in exts.by_ref() {
            let e = e.map_err(|_| Drop::Malformed)?;
            let (off, len) = (e.offset, e.len);
            if off + len > ah_off {
                return Err(Drop::Malformed);
            }
            if e.kind == ip_proto::HOPOPT || e.kind == ip_proto::IPV6_OPTS {
                // Walk the options: data of options with the "may change" bit (0x20) is zeroed.
                let mut run_start = off;
                let opts = ipv6::options(&p[off..off + len]).map_err(|_| Drop::Malformed)?;
                for o in opts {
                    let o = o.map_err(|_| Drop::Malformed)?;
                    let dl = o.data.len();
                    if o.may_change() && dl > 0 {
                        if n + 2 >= MAX_PARTS - 4 || dl > ZEROS.len() {
                            return Err(Drop::Unsupported);
                        }
                        let data_at = off + o.data_offset();
                        parts[n] = &p[run_start..data_at];
                        parts[n + 1] = &ZEROS[..dl];
                        n += 2;
                        run_start = data_at + dl;
                    }
                }
                if n >= MAX_PARTS - 4 {
                    return Err(Drop::Unsupported);
                }
                parts[n] = &p[run_start..off + len];
                n += 1;
            } else {
                if n >= MAX_PARTS - 4 {
                    return Err(Drop::Unsupported);
                }
                parts[n] = &p[off..off + len];
                n += 1;
            }
        }
        if exts.next_proto() != ip_proto::AH || exts.offset() != ah_off {
            return Err(Drop::Malformed);
        }
    }
    // AH header with the ICV field zeroed, then everything after it. The padding that aligns the header (IPv6,
    // or ICVs that are not a multiple of 4) is not part of the ICV field: RFC 4302 2.6 and 3.3.3.2.1 include it
    // in the ICV computation as it is, so that it cannot be altered unnoticed.
    let icv_len = out.len();
    if ah_len < 12 + icv_len || icv_len > ZEROS.len() || p.len() < ah_off + ah_len {
        return Err(Drop::Malformed);
    }
    parts[n] = &p[ah_off..ah_off + 12];
    parts[n + 1] = &ZEROS[..icv_len];
    parts[n + 2] = &p[ah_off + 12 + icv_len..];
    n += 3;
    if let Some(h) = seq_hi {
        seq_hi_buf = h;
        parts[n] = &seq_hi_buf;
        n += 1;
    }
    mac.compute(&parts[..n], out);
    Ok(())
}

/// Protects the IP packet in `pkt` with the outbound AH SA `sa` (in place).
pub fn encapsulate(sa: &OutboundSa, pkt: &mut PacketBuf, now: u64) -> Result<(), Drop> {
    encap(sa, pkt, now, Hdr::Bytes)
}

/// [`encapsulate`] of a packet whose headers the caller parsed already: `hdrs` is the view of the packet in `pkt`
/// as it is now (not changed since it was parsed). The version, DSCP/ECN and DF (tunnel mode) and the layout
/// before AH with the total length (transport mode) come from it, not from the bytes; the ICV is computed over the
/// bytes as they are sent.
pub fn encapsulate_parsed(
    sa: &OutboundSa,
    pkt: &mut PacketBuf,
    now: u64,
    hdrs: &Headers,
) -> Result<(), Drop> {
    encap(sa, pkt, now, Hdr::Parsed(hdrs))
}

/// `hdr`: where the IP header is read (before the packet changes).
pub(crate) fn encap(
    sa: &OutboundSa,
    pkt: &mut PacketBuf,
    now: u64,
    hdr: Hdr<'_>,
) -> Result<(), Drop> {
    let mac = mac(sa)?;
    if sa.lifetime_state(now) == LifetimeState::Expired {
        return Err(Drop::SaExpired);
    }
    let icv_len = mac.tag_len();
    let seq = match sa.seq.next() {
        Ok(s) => s,
        Err(netveil_sa::seq::SeqError::NotReserved) => return Err(Drop::SeqNotReserved),
        Err(netveil_sa::seq::SeqError::Exhausted) => {
            sa.rekey_needed.store(true, Relaxed);
            return Err(Drop::SeqExhausted);
        }
    };
    let inner_len = pkt.len();
    let (v6, ah_off, nh) = match sa.params.mode {
        Mode::Tunnel { local, remote } => {
            let (tos, df) = hdr.dscp_ecn_df(pkt.data());
            let nh = hdr.tunnel_next_header(pkt.data())?;
            let v6 = local.is_ipv6();
            let ah_len = header_len(icv_len, v6);
            pkt.push_front(ah_len).ok_or(Drop::TooBig)?;
            iphdr::push_outer(
                pkt,
                local,
                remote,
                ip_proto::AH,
                tos,
                df,
                sa.next_ip_id(),
                None,
            )?;
            let outer_len = if v6 {
                ipv6::HEADER_LEN
            } else {
                ipv4::MIN_HEADER_LEN
            };
            (v6, outer_len, nh)
        }
        Mode::Transport => {
            let ip = hdr.layout(pkt.data())?;
            pkt.truncate(ip.total_len);
            let ah_len = header_len(icv_len, ip.v6);
            pkt.insert_gap(ip.header_len, ah_len).ok_or(Drop::TooBig)?;
            iphdr::fix_header(&ip, pkt.data_mut(), ip_proto::AH)?;
            (ip.v6, ip.header_len, ip.next_header)
        }
    };
    let ah_len = header_len(icv_len, v6);
    {
        let a = &mut pkt.data_mut()[ah_off..ah_off + ah_len];
        a[0] = nh;
        a[1] = (ah_len / 4 - 2) as u8;
        a[2] = 0;
        a[3] = 0;
        a[4..8].copy_from_slice(&sa.params.spi.to_be_bytes());
        a[8..12].copy_from_slice(&(seq as u32).to_be_bytes());
        a[12..].fill(0);
    }
    let seq_hi = sa.params.esn.then(|| ((seq >> 32) as u32).to_be_bytes());
    let mut tag = [0u8; 64];
    icv(
        mac,
        pkt.data(),
        v6,
        ah_off,
        ah_len,
        seq_hi,
        &mut tag[..icv_len],
    )?;
    pkt.data_mut()[ah_off + 12..ah_off + 12 + icv_len].copy_from_slice(&tag[..icv_len]);
    sa.counters.add(inner_len);
    Ok(())
}

/// Verifies and removes the AH header of the packet in `pkt` (located by [`crate::inbound::classify`]).
pub fn decapsulate(
    sa: &InboundSa,
    pkt: &mut PacketBuf,
    loc: &Located,
    now: u64,
) -> Result<Decapsulated, Drop> {
    decap(sa, pkt, loc, now).map_err(|d| sa.count_drop(d))
}

fn decap(
    sa: &InboundSa,
    pkt: &mut PacketBuf,
    loc: &Located,
    now: u64,
) -> Result<Decapsulated, Drop> {
    let mac = mac(sa)?;
    if sa.lifetime_state(now) == LifetimeState::Expired {
        return Err(Drop::SaExpired);
    }
    let icv_len = mac.tag_len();
    let off = loc.off;
    let p = pkt.data();
    if p.len() < off + 12 {
        return Err(Drop::Malformed);
    }
    let ah_len = (p[off + 1] as usize + 2) * 4;
    if ah_len != header_len(icv_len, loc.ip.v6) || p.len() < off + ah_len {
        return Err(Drop::Malformed);
    }
    let nh = p[off];
    let seq_lo = u32::from_be_bytes([p[off + 8], p[off + 9], p[off + 10], p[off + 11]]);
    let seq = sa
        .rx
        .window
        .lock()
        .map_err(|_| Drop::Malformed)?
        .check(seq_lo)
        .map_err(crate::esp::replay_drop)?;
    let seq_hi = sa.params.esn.then(|| ((seq >> 32) as u32).to_be_bytes());
    let mut tag = [0u8; 64];
    icv(mac, p, loc.ip.v6, off, ah_len, seq_hi, &mut tag[..icv_len])?;
    let got = &p[off + 12..off + 12 + icv_len];
    if !constant_time_eq(&tag[..icv_len], got) {
        return Err(Drop::AuthFailed);
    }
    if !sa.rx.admits(seq) {
        return Err(Drop::SeqNotReserved);
    }
    sa.rx
        .window
        .lock()
        .map_err(|_| Drop::Malformed)?
        .update(seq)
        .map_err(crate::esp::replay_drop)?;
    match sa.params.mode {
        Mode::Tunnel { .. } => {
            let want = match nh {
                ip_proto::IPIP => 4,
                ip_proto::IPV6 => 6,
                _ => return Err(Drop::BadNextHeader),
            };
            pkt.pull_front(off + ah_len).ok_or(Drop::Malformed)?;
            if ip::version(pkt.data()) != Some(want) {
                return Err(Drop::BadNextHeader);
            }
            let own = ip::own_len(pkt.data()).ok_or(Drop::Malformed)?;
            pkt.truncate(own);
            sa.counters.add(own);
            Ok(Decapsulated {
                next_header: nh,
                tunnel: true,
            })
        }
        Mode::Transport => {
            pkt.remove_gap(off, ah_len).ok_or(Drop::Malformed)?;
            iphdr::fix_header(&loc.ip, pkt.data_mut(), nh)?;
            sa.counters.add(pkt.len());
            Ok(Decapsulated {
                next_header: nh,
                tunnel: false,
            })
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
