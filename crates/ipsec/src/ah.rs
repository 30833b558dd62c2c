//! AH (RFC 4302): integrity for the whole IP packet, including the immutable fields of the IP header and of IPv6
//! extension headers. Transport and tunnel mode, IPv4 and IPv6, with ESN.
//!
//! The ICV is computed over the packet as sent, with mutable fields (IPv4 TOS, flags/fragment offset, TTL,
//! checksum and mutable options; IPv6 traffic class, flow label, hop limit and the data of options marked "may
//! change en route") and the ICV field itself taken as zero. Nothing is copied or zeroed in the packet: the MAC is
//! fed a list of slices in which those fields are replaced by zeros.

use crate::esp::Decapsulated;
use crate::iphdr;
use crate::sa::{Keys, Mode, Sa};
use crate::{inbound::Located, Drop};
use netveil_crypto::Mac;
use netveil_sa::lifetime::LifetimeState;
use netveil_wire::{ip_proto, PacketBuf};
use std::sync::atomic::Ordering::Relaxed;

static ZEROS: [u8; 256] = [0; 256];
const MAX_PARTS: usize = 64;

fn mac(sa: &Sa) -> Result<&dyn Mac, Drop> {
    match &sa.keys {
        Keys::Ah(m) => Ok(m.as_ref()),
        Keys::Esp(_) => Err(Drop::Unsupported),
    }
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
        let ihl = ((p[0] & 0x0f) as usize) * 4;
        if ihl > 60 || ihl > ah_off {
            return Err(Drop::Malformed);
        }
        hdr[..ihl].copy_from_slice(&p[..ihl]);
        hdr[1] = 0; // TOS
        hdr[6] = 0; // flags, fragment offset
        hdr[7] = 0;
        hdr[8] = 0; // TTL
        hdr[10] = 0; // checksum
        hdr[11] = 0;
        // Options: immutable ones stay, every other option is zeroed whole.
        let mut i = 20;
        while i < ihl {
            let t = hdr[i];
            if t == 0 {
                break;
            }
            if t == 1 {
                i += 1;
                continue;
            }
            let len = if i + 1 < ihl { hdr[i + 1] as usize } else { 0 };
            if len < 2 || i + len > ihl {
                return Err(Drop::Malformed);
            }
            if !v4_option_immutable(t) {
                hdr[i..i + len].fill(0);
            }
            i += len;
        }
        parts[n] = &hdr[..ihl];
        n += 1;
    } else {
        hdr[..40].copy_from_slice(&p[..40]);
        hdr[0] &= 0xf0; // traffic class, flow label
        hdr[1] = 0;
        hdr[2] = 0;
        hdr[3] = 0;
        hdr[7] = 0; // hop limit
        parts[n] = &hdr[..40];
        n += 1;
        // Extension headers between the fixed header and AH.
        let mut off = 40;
        let mut nh = p[6];
        while off < ah_off {
            if off + 8 > ah_off {
                return Err(Drop::Malformed);
            }
            let len = match nh {
                ip_proto::IPV6_FRAG => 8,
                _ => (p[off + 1] as usize + 1) * 8,
            };
            if off + len > ah_off {
                return Err(Drop::Malformed);
            }
            if nh == ip_proto::HOPOPT || nh == ip_proto::IPV6_OPTS {
                // Walk the options: data of options with the "may change" bit (0x20) is zeroed.
                let mut i = off + 2;
                let mut run_start = off;
                while i < off + len {
                    let t = p[i];
                    if t == 0 {
                        i += 1;
                        continue;
                    }
                    if i + 2 > off + len {
                        return Err(Drop::Malformed);
                    }
                    let dl = p[i + 1] as usize;
                    if i + 2 + dl > off + len {
                        return Err(Drop::Malformed);
                    }
                    if t & 0x20 != 0 && dl > 0 {
                        if n + 2 >= MAX_PARTS - 4 || dl > ZEROS.len() {
                            return Err(Drop::Unsupported);
                        }
                        parts[n] = &p[run_start..i + 2];
                        parts[n + 1] = &ZEROS[..dl];
                        n += 2;
                        run_start = i + 2 + dl;
                    }
                    i += 2 + dl;
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
            nh = p[off];
            off += len;
        }
        if nh != ip_proto::AH || off != ah_off {
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
pub fn encapsulate(sa: &Sa, pkt: &mut PacketBuf, now: u64) -> Result<(), Drop> {
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
            let (tos, df) = iphdr::tos_df(pkt.data());
            let nh = match pkt.data().first().map(|b| b >> 4) {
                Some(4) => ip_proto::IPIP,
                Some(6) => ip_proto::IPV6,
                _ => return Err(Drop::Malformed),
            };
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
            (v6, if v6 { 40 } else { 20 }, nh)
        }
        Mode::Transport => {
            let ip = iphdr::parse(pkt.data())?;
            pkt.truncate(ip.total_len);
            let ah_len = header_len(icv_len, ip.v6);
            pkt.insert_gap(ip.l3_len, ah_len).ok_or(Drop::TooBig)?;
            let data = pkt.data_mut();
            data[ip.proto_off] = ip_proto::AH;
            iphdr::fix_lengths(data, ip.v6)?;
            (ip.v6, ip.l3_len, ip.proto)
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
    sa: &Sa,
    pkt: &mut PacketBuf,
    loc: &Located,
    now: u64,
) -> Result<Decapsulated, Drop> {
    decap(sa, pkt, loc, now).map_err(|d| sa.count_drop(d))
}

fn decap(sa: &Sa, pkt: &mut PacketBuf, loc: &Located, now: u64) -> Result<Decapsulated, Drop> {
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
        .replay
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
    sa.replay
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
            if pkt.data().first().map(|b| b >> 4) != Some(want) {
                return Err(Drop::BadNextHeader);
            }
            let own = iphdr::own_len(pkt.data()).ok_or(Drop::Malformed)?;
            pkt.truncate(own);
            sa.counters.add(own);
            Ok(Decapsulated {
                next_header: nh,
                tunnel: true,
            })
        }
        Mode::Transport => {
            pkt.remove_gap(off, ah_len).ok_or(Drop::Malformed)?;
            let data = pkt.data_mut();
            data[loc.ip.proto_off] = nh;
            iphdr::fix_lengths(data, loc.ip.v6)?;
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
