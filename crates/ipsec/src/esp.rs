//! ESP (RFC 4303): encapsulation and decapsulation in place, tunnel and transport mode, IPv4 and IPv6, raw or in
//! UDP (RFC 3948), with 32- or 64-bit (ESN, RFC 4304) sequence numbers and optional TFC padding.
//!
//! Packet layout on the wire: `[outer IP][UDP]? SPI(4) Seq(4) IV(iv_len) | payload padding pad_len next_hdr | ICV`,
//! where the part between `|` is encrypted (with AEADs, SPI and Seq, plus the high sequence bits with ESN, are the
//! AAD; with GMAC everything is authenticated and nothing encrypted).

use crate::iphdr::{self, Hdr};
use crate::sa::{InboundSa, Keys, Mode, OutboundSa, SaBase};
use crate::suite::EspKeys;
use crate::{inbound::Located, Drop};
use netveil_sa::lifetime::LifetimeState;
use netveil_wire::ip::{Headers, Layout};
use netveil_wire::{ip, ip_proto, udp, PacketBuf};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;

/// Largest explicit IV + ICV + header + trailer overhead ESP can add (for buffer sizing).
pub const MAX_OVERHEAD: usize = 40 + 8 + 8 + 16 + 255 + 2 + 32;

/// Scratch bytes in front of the ESP header while a tunnel-mode packet is sealed (no more than the UDP and IP headers
/// that later take their place).
const TUNNEL_LEAD: usize = 8;

fn esp_keys(sa: &SaBase) -> Result<&EspKeys, Drop> {
    match sa.keys() {
        Some(Keys::Esp(k)) => Ok(k),
        _ => Err(Drop::Unsupported),
    }
}

/// What decides the length of an ESP packet of the SA `sa`: (IV, ICV, cipher block, TFC padding target) lengths.
pub(crate) fn lengths(sa: &SaBase) -> Result<(usize, usize, usize, usize), Drop> {
    esp_keys(sa)?;
    let s = suite(sa);
    Ok((
        s.enc.iv_len(),
        s.icv_len(),
        s.enc.block_len(),
        sa.params.tfc_pad_to as usize,
    ))
}

fn suite(sa: &SaBase) -> crate::suite::EspSuite {
    match sa.params.suite {
        crate::sa::Suite::Esp(s) => s,
        crate::sa::Suite::Ah(_) => unreachable!("esp_keys checked the protocol"),
    }
}

/// Computes (seal = true) or verifies the protection of the ESP packet at `esp_off` of `pkt`, whose body is already
/// in place (plaintext to encrypt, or ciphertext to decrypt). `body_len` counts the bytes between IV and ICV.
fn protect(
    keys: &EspKeys,
    pkt: &mut PacketBuf,
    esp_off: usize,
    iv_len: usize,
    body_len: usize,
    icv_len: usize,
    seq: u64,
    esn: bool,
    seal: bool,
) -> Result<(), Drop> {
    let seq_hi = ((seq >> 32) as u32).to_be_bytes();
    match keys {
        EspKeys::Aead {
            aead,
            salt,
            gmac: false,
        } => {
            let esp = &mut pkt.data_mut()[esp_off..];
            let mut nonce = [0u8; 12];
            nonce[..4].copy_from_slice(salt);
            nonce[4..].copy_from_slice(&esp[8..8 + iv_len]);
            let mut aad = [0u8; 12];
            let aad_len = if esn {
                aad[..4].copy_from_slice(&esp[..4]);
                aad[4..8].copy_from_slice(&seq_hi);
                aad[8..12].copy_from_slice(&esp[4..8]);
                12
            } else {
                aad[..8].copy_from_slice(&esp[..8]);
                8
            };
            let (body, icv) = esp[8 + iv_len..].split_at_mut(body_len);
            let icv = &mut icv[..icv_len];
            if seal {
                aead.seal(&nonce, &aad[..aad_len], body, icv);
                Ok(())
            } else {
                aead.open(&nonce, &aad[..aad_len], body, icv)
                    .map_err(|_| Drop::AuthFailed)
            }
        }
        EspKeys::Aead {
            aead,
            salt,
            gmac: true,
        } => {
            // RFC 4543: AAD = SPI, [Seq high], Seq low, IV, payload; nothing is encrypted. With ESN the high bits
            // must sit between SPI and Seq low for the AAD to be contiguous. With at least 4 bytes in front of the
            // ESP header (always on the receive path, where an IP header precedes it, and on the send path, which
            // lays the header out behind scratch room), the SPI is moved 4 bytes forward over them and the high bits
            // written where it was; both are restored afterwards. This needs no headroom and moves nothing but
            // 8 bytes. Only without bytes in front (laid-out packets at offset 0) is a gap opened in the headroom.
            let mut nonce = [0u8; 12];
            nonce[..4].copy_from_slice(salt);
            let iv_at = esp_off + 8;
            nonce[4..].copy_from_slice(&pkt.data()[iv_at..iv_at + iv_len]);
            let aad_end = iv_at + iv_len + body_len;
            let run = |data: &mut [u8], start: usize, aad_end: usize| -> Result<(), Drop> {
                let (aad, rest) = data[start..].split_at_mut(aad_end - start);
                let icv = &mut rest[..icv_len];
                if seal {
                    aead.seal(&nonce, aad, &mut [], icv);
                    Ok(())
                } else {
                    aead.open(&nonce, aad, &mut [], icv)
                        .map_err(|_| Drop::AuthFailed)
                }
            };
            if !esn {
                run(pkt.data_mut(), esp_off, aad_end)
            } else if esp_off >= 4 {
                let data = pkt.data_mut();
                let mut saved = [0u8; 4];
                saved.copy_from_slice(&data[esp_off - 4..esp_off]);
                data.copy_within(esp_off..esp_off + 4, esp_off - 4);
                data[esp_off..esp_off + 4].copy_from_slice(&seq_hi);
                let r = run(data, esp_off - 4, aad_end);
                data.copy_within(esp_off - 4..esp_off, esp_off);
                data[esp_off - 4..esp_off].copy_from_slice(&saved);
                r
            } else {
                // insert_gap keeps the bytes in front of the gap at their offsets: the ESP header stays at esp_off.
                // The 4 headroom bytes it takes are restored afterwards: they may be another packet's (the
                // datagrams of a coalesced receive lie back to back, and are opened where they lie).
                let head = pkt.headroom();
                let mut saved = [0u8; 4];
                if let Some(b) = head.checked_sub(4).map(|h| &pkt.storage()[h..head]) {
                    saved.copy_from_slice(b);
                }
                pkt.insert_gap(esp_off + 4, 4)
                    .ok_or(Drop::TooBig)?
                    .copy_from_slice(&seq_hi);
                let r = run(pkt.data_mut(), esp_off, aad_end + 4);
                pkt.remove_gap(esp_off + 4, 4).ok_or(Drop::Malformed)?;
                pkt.storage_mut()[head - 4..head].copy_from_slice(&saved);
                r
            }
        }
        EspKeys::CbcHmac { cipher, mac, .. } => {
            let esp = &mut pkt.data_mut()[esp_off..];
            let (authed, icv) = esp.split_at_mut(8 + iv_len + body_len);
            let icv = &mut icv[..icv_len];
            if seal {
                if let Some(c) = cipher {
                    let (head, body) = authed.split_at_mut(8 + iv_len);
                    c.encrypt(&head[8..], body);
                }
                if let Some(m) = mac {
                    if esn {
                        m.compute(&[authed, &seq_hi], icv);
                    } else {
                        m.compute(&[authed], icv);
                    }
                }
                Ok(())
            } else {
                if let Some(m) = mac {
                    let ok = if esn {
                        m.verify(&[authed, &seq_hi], icv)
                    } else {
                        m.verify(&[authed], icv)
                    };
                    ok.map_err(|_| Drop::AuthFailed)?;
                }
                if let Some(c) = cipher {
                    let (head, body) = authed.split_at_mut(8 + iv_len);
                    c.decrypt(&head[8..], body);
                }
                Ok(())
            }
        }
    }
}

/// Seals an ESP packet that the caller laid out at `esp_off` of `pkt` (SPI, sequence number, IV, plaintext body
/// with trailer, room for the ICV up to the end of `pkt`) with the full sequence number `seq`: for known-answer tests
/// and tools that need a given IV. The data plane uses [`encapsulate`].
pub fn seal_laid_out(
    sa: &OutboundSa,
    pkt: &mut PacketBuf,
    esp_off: usize,
    seq: u64,
) -> Result<(), Drop> {
    let (keys, iv_len, icv_len, body_len) = laid_out(sa, pkt, esp_off)?;
    protect(
        keys,
        pkt,
        esp_off,
        iv_len,
        body_len,
        icv_len,
        seq,
        sa.params.esn,
        true,
    )
}

/// Verifies and decrypts, in place, the ESP packet at `esp_off` of `pkt` with the full sequence number `seq`,
/// without touching the anti-replay window: for known-answer tests and offline tools.
pub fn open_laid_out(
    sa: &InboundSa,
    pkt: &mut PacketBuf,
    esp_off: usize,
    seq: u64,
) -> Result<(), Drop> {
    let (keys, iv_len, icv_len, body_len) = laid_out(sa, pkt, esp_off)?;
    protect(
        keys,
        pkt,
        esp_off,
        iv_len,
        body_len,
        icv_len,
        seq,
        sa.params.esn,
        false,
    )
}

fn laid_out<'a>(
    sa: &'a SaBase,
    pkt: &PacketBuf,
    esp_off: usize,
) -> Result<(&'a EspKeys, usize, usize, usize), Drop> {
    let keys = esp_keys(sa)?;
    let suite = suite(sa);
    let (iv_len, icv_len) = (suite.enc.iv_len(), suite.icv_len());
    let body_len = pkt
        .len()
        .checked_sub(esp_off + 8 + iv_len + icv_len)
        .ok_or(Drop::Malformed)?;
    Ok((keys, iv_len, icv_len, body_len))
}

/// Protects the IP packet in `pkt` with the outbound ESP SA `sa`, turning it into the complete ESP packet to send
/// (outer IP header included). `now` is the caller's clock in seconds (for lifetimes).
pub fn encapsulate(sa: &OutboundSa, pkt: &mut PacketBuf, now: u64) -> Result<(), Drop> {
    encap(sa, pkt, now, true, Hdr::Bytes)
}

/// [`encapsulate`] of a packet whose headers the caller parsed already: `hdrs` is the view of the packet in `pkt`
/// as it is now (not changed since it was parsed). What the transform reads of the IP header comes from it, not
/// from the bytes: the version, DSCP/ECN and DF (tunnel mode, for the outer header), the layout before ESP and
/// the total length (transport mode). The result is the same as [`encapsulate`]'s.
pub fn encapsulate_parsed(
    sa: &OutboundSa,
    pkt: &mut PacketBuf,
    now: u64,
    hdrs: &Headers,
) -> Result<(), Drop> {
    encap(sa, pkt, now, true, Hdr::Parsed(hdrs))
}

/// As [`encapsulate`] with an ESP-in-UDP SA, for a UDP socket to send: `pkt` becomes the datagram's payload (the
/// ESP packet), without the IP and UDP headers, which the socket writes; returns where the datagram goes: from
/// the source address and port to the destination. Tunnel mode: between the SA's ends. Transport mode: from the
/// packet's source to its destination (the IP header and any IPv6 extension headers before ESP are consumed; a
/// socket cannot send them). Any other SA is `Unsupported` (with nothing consumed).
pub fn encapsulate_udp_payload(
    sa: &OutboundSa,
    pkt: &mut PacketBuf,
    now: u64,
) -> Result<(IpAddr, u16, SocketAddr), Drop> {
    encap_udp_payload(sa, pkt, now, Hdr::Bytes)
}

/// [`encapsulate_udp_payload`] of a packet whose headers the caller parsed already, as [`encapsulate_parsed`]
/// (transport mode also takes the addresses from `hdrs`).
pub fn encapsulate_udp_payload_parsed(
    sa: &OutboundSa,
    pkt: &mut PacketBuf,
    now: u64,
    hdrs: &Headers,
) -> Result<(IpAddr, u16, SocketAddr), Drop> {
    encap_udp_payload(sa, pkt, now, Hdr::Parsed(hdrs))
}

pub(crate) fn encap_udp_payload(
    sa: &OutboundSa,
    pkt: &mut PacketBuf,
    now: u64,
    hdr: Hdr<'_>,
) -> Result<(IpAddr, u16, SocketAddr), Drop> {
    let Some(u) = sa.params.encap else {
        return Err(Drop::Unsupported);
    };
    let (src, dst) = match sa.params.mode {
        Mode::Tunnel { local, remote } => (local, remote),
        Mode::Transport => hdr.addrs(pkt.data()).ok_or(Drop::Malformed)?,
    };
    encap(sa, pkt, now, false, hdr)?;
    Ok((src, u.local_port, SocketAddr::new(dst, u.remote_port)))
}

/// `outer`: push the outer headers of tunnel mode, keep the IP header (and write the UDP header) of transport mode;
/// else the packet ends as the ESP packet. `hdr`: where the IP header is read (every read comes before the packet
/// changes).
pub(crate) fn encap(
    sa: &OutboundSa,
    pkt: &mut PacketBuf,
    now: u64,
    outer: bool,
    hdr: Hdr<'_>,
) -> Result<(), Drop> {
    let keys = esp_keys(sa)?;
    let suite = suite(sa);
    if sa.lifetime_state(now) == LifetimeState::Expired {
        return Err(Drop::SaExpired);
    }
    let iv_len = suite.enc.iv_len();
    let icv_len = suite.icv_len();
    let block = suite.enc.block_len();
    let udp = sa.params.encap;
    // The UDP header of transport mode, unless the socket writes it.
    let udp_len = if udp.is_some() && outer {
        udp::HEADER_LEN
    } else {
        0
    };
    let (tos, df) = hdr.dscp_ecn_df(pkt.data());

    // Where the payload starts, and what the ESP next header will say.
    let (payload_off, next_header, ip) = match sa.params.mode {
        Mode::Tunnel { .. } => (0, hdr.tunnel_next_header(pkt.data())?, None),
        Mode::Transport => {
            let ip = hdr.layout(pkt.data())?;
            pkt.truncate(ip.total_len);
            (ip.header_len, ip.next_header, Some(ip))
        }
    };
    let mut payload_len = pkt.len() - payload_off;
    let inner_len = payload_len;
    let tfc = sa.params.tfc_pad_to as usize;
    let tfc_extra = if matches!(sa.params.mode, Mode::Tunnel { .. }) && tfc > payload_len {
        tfc - payload_len
    } else {
        0
    };
    payload_len += tfc_extra;
    let pad = (block - (payload_len + 2) % block) % block;
    let body_len = payload_len + pad + 2;

    let seq = match sa.seq.next() {
        Ok(s) => s,
        Err(netveil_sa::seq::SeqError::NotReserved) => return Err(Drop::SeqNotReserved),
        Err(netveil_sa::seq::SeqError::Exhausted) => {
            sa.rekey_needed.store(true, Relaxed);
            return Err(Drop::SeqExhausted);
        }
    };

    // Trailer: TFC padding, padding 1, 2, 3, ..., pad length, next header, room for the ICV.
    {
        let t = pkt
            .push_back(tfc_extra + pad + 2 + icv_len)
            .ok_or(Drop::TooBig)?;
        let (tfc_bytes, rest) = t.split_at_mut(tfc_extra);
        tfc_bytes.fill(0);
        for (i, b) in rest[..pad].iter_mut().enumerate() {
            *b = (i + 1) as u8;
        }
        rest[pad] = pad as u8;
        rest[pad + 1] = next_header;
    }
    // Header: SPI, sequence number (low 32 bits), IV; in transport mode after the IP header (and UDP header).
    // In tunnel mode the header goes behind TUNNEL_LEAD scratch bytes (dropped again before the outer headers are
    // pushed, so no extra headroom is needed), which GMAC with ESN borrows for its AAD.
    let esp_off = match sa.params.mode {
        Mode::Tunnel { .. } => {
            pkt.push_front(TUNNEL_LEAD + 8 + iv_len)
                .ok_or(Drop::TooBig)?;
            TUNNEL_LEAD
        }
        Mode::Transport => {
            pkt.insert_gap(payload_off, udp_len + 8 + iv_len)
                .ok_or(Drop::TooBig)?;
            payload_off + udp_len
        }
    };
    {
        let esp = &mut pkt.data_mut()[esp_off..];
        esp[0..4].copy_from_slice(&sa.params.spi.to_be_bytes());
        esp[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
        let iv = &mut esp[8..8 + iv_len];
        match keys {
            // Counter IVs: unique per key because sequence numbers never repeat (RFC 4106 section 3.1).
            EspKeys::Aead { .. } => iv.copy_from_slice(&seq.to_be_bytes()),
            EspKeys::CbcHmac { .. } => {
                if iv_len > 0 {
                    // Every outbound SA with CBC keys has its generator (OutboundSa::build).
                    if let Some(g) = &sa.ivgen {
                        g.fill(seq, iv)
                    }
                }
            }
        }
    }
    protect(
        keys,
        pkt,
        esp_off,
        iv_len,
        body_len,
        icv_len,
        seq,
        sa.params.esn,
        true,
    )?;

    match (sa.params.mode, ip) {
        (Mode::Tunnel { .. }, _) if !outer => {
            pkt.pull_front(TUNNEL_LEAD).ok_or(Drop::Malformed)?;
        }
        (Mode::Tunnel { local, remote }, _) => {
            // Drop the scratch room again and let push_outer write the UDP and IP headers.
            pkt.pull_front(TUNNEL_LEAD).ok_or(Drop::Malformed)?;
            let proto = if udp.is_some() {
                ip_proto::UDP
            } else {
                ip_proto::ESP
            };
            let ports = udp.map(|u| (u.local_port, u.remote_port));
            iphdr::push_outer(pkt, local, remote, proto, tos, df, sa.next_ip_id(), ports)?;
        }
        (Mode::Transport, Some(ip)) if !outer => {
            // The socket writes the IP and UDP headers.
            pkt.pull_front(ip.header_len).ok_or(Drop::Malformed)?;
        }
        (Mode::Transport, Some(ip)) => {
            let data = pkt.data_mut();
            let proto = if udp.is_some() {
                ip_proto::UDP
            } else {
                ip_proto::ESP
            };
            iphdr::fix_header(&ip, data, proto)?;
            if let Some(u) = udp {
                iphdr::write_udp_encap(data, ip.header_len, u.local_port, u.remote_port)?;
            }
        }
        (Mode::Transport, None) => unreachable!("transport mode parsed the IP header"),
    }
    sa.counters.add(inner_len);
    Ok(())
}

/// What decapsulation produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decapsulated {
    /// The protocol of the payload (IPv4/IPv6 in tunnel mode, the upper layer in transport mode).
    pub next_header: u8,
    pub tunnel: bool,
}

/// Verifies and removes the ESP protection of the packet in `pkt`, located by [`crate::inbound::classify`], with the
/// inbound SA `sa` (looked up by the caller from `loc.spi`). On success `pkt` holds the inner IP packet (tunnel) or
/// the original IP packet (transport). On failure nothing in `pkt` is plaintext that failed authentication.
pub fn decapsulate(
    sa: &InboundSa,
    pkt: &mut PacketBuf,
    loc: &Located,
    now: u64,
) -> Result<Decapsulated, Drop> {
    decap(sa, pkt, loc.off, Some(&loc.ip), now).map_err(|d| sa.count_drop(d))
}

/// As [`decapsulate`], for an ESP packet that `pkt` holds from its SPI on, without the IP and UDP headers it came
/// in: a datagram of a coalesced (GRO) receive on the NAT-T port, opened where it lies. Only a tunnel-mode SA
/// can be opened so (transport mode rebuilds the packet around its IP header); any other is `Unsupported`,
/// with `pkt` untouched. The caller checks the outer destination against the SA ([`crate::bundle`] does).
pub fn decapsulate_udp_payload(
    sa: &InboundSa,
    pkt: &mut PacketBuf,
    now: u64,
) -> Result<Decapsulated, Drop> {
    decap(sa, pkt, 0, None, now).map_err(|d| sa.count_drop(d))
}

/// `ip`: the outer IP header's layout, which transport mode needs (`None`: the buffer holds no IP header).
fn decap(
    sa: &InboundSa,
    pkt: &mut PacketBuf,
    esp_off: usize,
    ip: Option<&Layout>,
    now: u64,
) -> Result<Decapsulated, Drop> {
    let transport_ip = match (sa.params.mode, ip) {
        (Mode::Tunnel { .. }, _) => None,
        (Mode::Transport, Some(ip)) => Some(ip),
        (Mode::Transport, None) => return Err(Drop::Unsupported),
    };
    let keys = esp_keys(sa)?;
    let suite = suite(sa);
    if sa.lifetime_state(now) == LifetimeState::Expired {
        return Err(Drop::SaExpired);
    }
    let iv_len = suite.enc.iv_len();
    let icv_len = suite.icv_len();
    let block = suite.enc.block_len();
    let esp_len = pkt.len().checked_sub(esp_off).ok_or(Drop::Malformed)?;
    let body_len = esp_len
        .checked_sub(8 + iv_len + icv_len)
        .ok_or(Drop::Malformed)?;
    if body_len < 2 || body_len % block != 0 {
        return Err(Drop::Malformed);
    }
    let seq_lo = {
        let e = &pkt.data()[esp_off..];
        u32::from_be_bytes([e[4], e[5], e[6], e[7]])
    };
    // One lock for the window per packet: checked before the decryption, advanced only after the ICV verified.
    // It is held across the decryption; one thread receives for an SA.
    {
        let mut w = sa.rx.window.lock().map_err(|_| Drop::Malformed)?;
        let seq = w.check(seq_lo).map_err(replay_drop)?;
        protect(
            keys,
            pkt,
            esp_off,
            iv_len,
            body_len,
            icv_len,
            seq,
            sa.params.esn,
            false,
        )?;
        // Authenticated: accepted only up to the ceiling the caller made durable (see `RxState`).
        if !sa.rx.admits(seq) {
            return Err(Drop::SeqNotReserved);
        }
        w.update(seq).map_err(replay_drop)?;
    }

    let body_at = esp_off + 8 + iv_len;
    let (pad_len, nh) = {
        let body = &pkt.data()[body_at..body_at + body_len];
        let pad_len = body[body_len - 2] as usize;
        let nh = body[body_len - 1];
        if pad_len + 2 > body_len {
            return Err(Drop::BadPadding);
        }
        let pad = &body[body_len - 2 - pad_len..body_len - 2];
        if pad.iter().enumerate().any(|(i, b)| *b as usize != i + 1) {
            return Err(Drop::BadPadding);
        }
        (pad_len, nh)
    };
    if nh == ip_proto::NO_NEXT_HEADER {
        return Err(Drop::Dummy);
    }
    let payload_len = body_len - pad_len - 2;
    match transport_ip {
        None => {
            let want = match nh {
                ip_proto::IPIP => 4,
                ip_proto::IPV6 => 6,
                _ => return Err(Drop::BadNextHeader),
            };
            pkt.pull_front(body_at).ok_or(Drop::Malformed)?;
            pkt.truncate(payload_len);
            if ip::version(pkt.data()) != Some(want) {
                return Err(Drop::BadNextHeader);
            }
            // TFC padding may follow the inner packet: its own header says how long it is.
            let own = ip::own_len(pkt.data()).ok_or(Drop::Malformed)?;
            pkt.truncate(own);
            sa.counters.add(own);
            Ok(Decapsulated {
                next_header: nh,
                tunnel: true,
            })
        }
        Some(ip) => {
            pkt.truncate(body_at + payload_len);
            let l3 = ip.header_len;
            pkt.remove_gap(l3, body_at - l3).ok_or(Drop::Malformed)?;
            iphdr::fix_header(ip, pkt.data_mut(), nh)?;
            sa.counters.add(payload_len);
            Ok(Decapsulated {
                next_header: nh,
                tunnel: false,
            })
        }
    }
}

pub(crate) fn replay_drop(e: netveil_sa::replay::ReplayError) -> Drop {
    match e {
        netveil_sa::replay::ReplayError::Replayed => Drop::Replayed,
        netveil_sa::replay::ReplayError::TooOld => Drop::TooOld,
        netveil_sa::replay::ReplayError::Invalid => Drop::TooOld,
    }
}
