//! PSP encapsulation and decapsulation in place on a [`PacketBuf`] holding one IP packet.
//!
//! Transport mode: `IP | UDP | PSP | [clear part] | encrypted | ICV`, the original IP header kept (protocol set to
//! UDP, lengths and the IPv4 checksum fixed; the PSP next header holds the old protocol). Tunnel mode:
//! `outer IP | UDP | PSP | inner IP packet`, the outer header a copy of the inner one (IPv4: first 20 bytes, IHL
//! 5, MF and fragment offset cleared) with protocol UDP and lengths adjusted. Both: UDP destination port 1000,
//! source port = inner source port XOR inner destination port (1000 unless the inner packet is TCP or UDP),
//! checksum 0. The crypt offset counts 4-byte units from the end of the IV; `[PSP header start, IV end +
//! 4·offset)` is authenticated in clear, the rest up to the ICV encrypted (GMAC versions: all in clear, all
//! authenticated).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use netveil_crypto::{new_aead, Aead, AeadAlg};
use netveil_wire::ip::{self, Headers, Layout};
use netveil_wire::{ip_proto, ipv4, ipv6, udp, PacketBuf};

use crate::header::{Header, Repr, Version, BASE_LEN, ICV_LEN, VC_LEN};
use crate::kdf::MasterKeys;
use crate::{Error, UDP_PORT};

const UDP_LEN: usize = udp::HEADER_LEN;

/// Transport or tunnel mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Transport,
    Tunnel,
}

/// How an outbound SA encapsulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxConfig {
    pub spi: u32,
    pub version: Version,
    pub mode: Mode,
    /// Crypt offset (4-byte units, at most 63) in transport mode.
    pub crypt_offset_transport: u8,
    /// Crypt offset in tunnel mode for an IPv4 inner packet.
    pub crypt_offset_tunnel_v4: u8,
    /// Crypt offset in tunnel mode for an IPv6 inner packet.
    pub crypt_offset_tunnel_v6: u8,
    /// Send an (all-zero) 8-byte virtualization cookie.
    pub vc: bool,
}

fn aead_for(version: Version, key: &[u8]) -> Box<dyn Aead> {
    let alg = match version.key_len() {
        16 => AeadAlg::AesGcm128 { tag_len: ICV_LEN },
        _ => AeadAlg::AesGcm256 { tag_len: ICV_LEN },
    };
    new_aead(alg, key).expect("derived key has the version's length")
}

/// The IP header of `p` (IPv4 with its options; IPv6: the fixed header, extension headers are payload), checking
/// that the header's length fields match the packet.
fn ip_header(p: &[u8]) -> Result<Layout, Error> {
    match Layout::fixed(p) {
        Ok(l) if l.total_len == p.len() => Ok(l),
        _ => Err(Error::Malformed),
    }
}

/// The UDP source port for a packet whose transport header (protocol `proto`) starts at `l4`.
fn src_port(proto: u8, l4: &[u8]) -> u16 {
    match (proto, ip::ports(l4)) {
        (ip_proto::TCP | ip_proto::UDP, Some((s, d))) => s ^ d,
        _ => UDP_PORT,
    }
}

/// Seals the PSP part `psp` (header through ICV) in place.
fn seal(aead: &dyn Aead, version: Version, crypt_offset: u8, psp: &mut [u8]) {
    let nonce = Header::new_unchecked(&*psp).nonce();
    let (body, icv) = psp.split_at_mut(psp.len() - ICV_LEN);
    let clear = if version.is_gmac() {
        body.len()
    } else {
        BASE_LEN + 4 * crypt_offset as usize
    };
    let (aad, enc) = body.split_at_mut(clear);
    aead.seal(&nonce, aad, enc, icv);
}

/// An outbound SA: the key object, built once, and the IV counter.
///
/// [`TxSa::encapsulate`] takes `&self`, so that several transmit threads can share one SA (e.g. behind an
/// `Arc`) without a lock: each packet takes its IV from the atomic counter, so no two packets ever get the same IV
/// under the SA's key, whichever thread seals them. (Packets of two threads may then reach the wire slightly out of
/// IV order; a receiver's replay window absorbs that.)
pub struct TxSa {
    cfg: TxConfig,
    aead: Box<dyn Aead>,
    /// The next IV to use; 0 once the counter is exhausted (it never wraps back to a used value).
    next_iv: AtomicU64,
}

impl core::fmt::Debug for TxSa {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TxSa")
            .field("cfg", &self.cfg)
            .field("next_iv", &self.next_iv())
            .finish_non_exhaustive()
    }
}

impl TxSa {
    /// Derives the SA key from the master keys. The IV counter starts at 1. Crypt offsets above 63 are refused.
    pub fn new(master: &MasterKeys, cfg: TxConfig) -> Result<Self, Error> {
        Self::with_key(&master.derive(cfg.spi, cfg.version), cfg)
    }

    /// With an explicit SA key (16 or 32 bytes as the version says).
    pub fn with_key(key: &[u8], cfg: TxConfig) -> Result<Self, Error> {
        let offs = [
            cfg.crypt_offset_transport,
            cfg.crypt_offset_tunnel_v4,
            cfg.crypt_offset_tunnel_v6,
        ];
        if offs.iter().any(|&o| o > 0x3f) {
            return Err(Error::CryptOffset);
        }
        if key.len() != cfg.version.key_len() {
            return Err(Error::Malformed);
        }
        Ok(TxSa {
            cfg,
            aead: aead_for(cfg.version, key),
            next_iv: AtomicU64::new(1),
        })
    }

    pub fn config(&self) -> &TxConfig {
        &self.cfg
    }

    /// The IV the next packet will carry (0: the counter is exhausted).
    pub fn next_iv(&self) -> u64 {
        self.next_iv.load(Relaxed)
    }

    /// Takes the next IV: each value once, 1 up to `u64::MAX`, then `IvExhausted` for good. The uniqueness needs
    /// only the atomicity of the update (no ordering with other memory), hence `Relaxed`.
    fn take_iv(&self) -> Result<u64, Error> {
        self.next_iv
            .fetch_update(Relaxed, Relaxed, |iv| (iv != 0).then(|| iv.wrapping_add(1)))
            .map_err(|_| Error::IvExhausted)
    }

    /// Encapsulates the IP packet in `pkt` (which must be exactly one IP packet, its length fields matching).
    /// On error the packet is unchanged and no IV is used. Safe to call from several threads at once.
    pub fn encapsulate(&self, pkt: &mut PacketBuf) -> Result<(), Error> {
        self.encap(pkt, true, None).map(|_| ())
    }

    /// [`TxSa::encapsulate`] of a packet whose headers the caller parsed already: `hdrs` is the view of the packet
    /// in `pkt` as it is now (not changed since it was parsed). The IP header's layout (the fixed header: family,
    /// length, protocol, fragment) and its total length are read from it, not from the bytes; the transport
    /// header's ports and the header copied to the outer one (tunnel mode) are the bytes'. The result is the same
    /// as [`TxSa::encapsulate`]'s.
    pub fn encapsulate_parsed(&self, pkt: &mut PacketBuf, hdrs: &Headers) -> Result<(), Error> {
        self.encap(pkt, true, Some(hdrs)).map(|_| ())
    }

    /// As [`TxSa::encapsulate`], for a UDP socket to send: `pkt` becomes the datagram's payload (PSP header, inner
    /// packet or transport payload, ICV), without the IP and UDP headers, which the socket writes (transport mode:
    /// from the packet's source to its destination; its IP header is consumed). Returns the UDP source port the
    /// packet would carry (the flow's).
    pub fn encapsulate_udp_payload(&self, pkt: &mut PacketBuf) -> Result<u16, Error> {
        self.encap(pkt, false, None)
    }

    /// [`TxSa::encapsulate_udp_payload`] of a packet whose headers the caller parsed already, as
    /// [`TxSa::encapsulate_parsed`].
    pub fn encapsulate_udp_payload_parsed(
        &self,
        pkt: &mut PacketBuf,
        hdrs: &Headers,
    ) -> Result<u16, Error> {
        self.encap(pkt, false, Some(hdrs))
    }

    /// The length of the IP packet that leaves for the IP packet `p` if its length were `len` (its headers as they
    /// are), sent as [`TxSa::encapsulate_udp_payload`] makes it: the socket's IP and UDP headers, the PSP header,
    /// the inner packet (tunnel) or the transport payload, the ICV. Computed without encapsulating: no IV is used.
    /// `None` where `p` is not an IP packet.
    pub fn udp_wire_len(&self, p: &[u8], len: usize) -> Option<usize> {
        self.wire_len_of(&Layout::fixed(p).ok()?, len)
    }

    /// [`TxSa::udp_wire_len`] of the packet whose headers `hdrs` are (its fixed header's layout is all that is
    /// read).
    pub fn udp_wire_len_parsed(&self, hdrs: &Headers, len: usize) -> Option<usize> {
        self.wire_len_of(&hdrs.fixed(), len)
    }

    fn wire_len_of(&self, ip: &Layout, len: usize) -> Option<usize> {
        let psp_hlen = BASE_LEN + if self.cfg.vc { VC_LEN } else { 0 };
        let body = match self.cfg.mode {
            Mode::Transport => len.checked_sub(ip.header_len)?,
            Mode::Tunnel => len,
        };
        let ip_hlen = if ip.v6 {
            ipv6::HEADER_LEN
        } else {
            ipv4::MIN_HEADER_LEN
        };
        Some(ip_hlen + UDP_LEN + psp_hlen + body + ICV_LEN)
    }

    /// `outer`: write the outer IP and UDP headers (else the packet starts at the PSP header). `hdrs`: the view of
    /// the packet's headers, if the caller parsed them (its layout is read before anything changes). Returns the
    /// UDP source port.
    fn encap(
        &self,
        pkt: &mut PacketBuf,
        outer: bool,
        hdrs: Option<&Headers>,
    ) -> Result<u16, Error> {
        let ip = match hdrs {
            Some(h) if h.total_len() == pkt.len() => h.fixed(),
            Some(_) => return Err(Error::Malformed),
            None => ip_header(pkt.data())?,
        };
        let ihl = ip.header_len;
        let psp_hlen = BASE_LEN + if self.cfg.vc { VC_LEN } else { 0 };
        let sport = src_port(ip.next_header, &pkt.data()[ihl..]);
        let (ip_hlen, offset, next_header, added) = match self.cfg.mode {
            Mode::Transport => {
                // An IPv4 fragment cannot be carried: its header (MF, offset) would become the outer header of a
                // whole UDP datagram, which receivers would try to reassemble. (Tunnel mode carries fragments.)
                if ip.fragment {
                    return Err(Error::Fragment);
                }
                (
                    ihl,
                    self.cfg.crypt_offset_transport,
                    ip.next_header,
                    UDP_LEN + psp_hlen,
                )
            }
            Mode::Tunnel => {
                let (outer, off, nh) = if ip.v6 {
                    (
                        ipv6::HEADER_LEN,
                        self.cfg.crypt_offset_tunnel_v6,
                        ip_proto::IPV6,
                    )
                } else {
                    (
                        ipv4::MIN_HEADER_LEN,
                        self.cfg.crypt_offset_tunnel_v4,
                        ip_proto::IPIP,
                    )
                };
                (outer, off, nh, outer + UDP_LEN + psp_hlen)
            }
        };
        // Without the outer headers, the packet grows by the PSP header only (the limit on the whole is the same).
        let (ip_hlen, pushed) = if outer {
            (ip_hlen, added)
        } else {
            (0, psp_hlen)
        };
        // Bytes after the IV: VC + payload (transport) or VC + inner packet (tunnel).
        let after_iv = psp_hlen - BASE_LEN
            + match self.cfg.mode {
                Mode::Transport => pkt.len() - ihl,
                Mode::Tunnel => pkt.len(),
            };
        if 4 * offset as usize > after_iv {
            return Err(Error::CryptOffset);
        }
        let new_len = pkt.len() + added + ICV_LEN;
        if new_len > 0xffff || pkt.headroom() < pushed || pkt.tailroom() < ICV_LEN {
            return Err(Error::NoRoom);
        }
        // The IV is taken once every check passed, before the packet changes: a refused packet uses none (and
        // none of the steps below fails).
        let iv = self.take_iv()?;
        match self.cfg.mode {
            Mode::Transport if !outer => {
                pkt.pull_front(ihl).ok_or(Error::Malformed)?;
                pkt.push_front(pushed).ok_or(Error::NoRoom)?;
                pkt.push_back(ICV_LEN).ok_or(Error::NoRoom)?;
            }
            Mode::Transport => {
                pkt.insert_gap(ihl, added).ok_or(Error::NoRoom)?;
                pkt.push_back(ICV_LEN).ok_or(Error::NoRoom)?;
                ip.fix_header(pkt.data_mut(), ip_proto::UDP)
                    .map_err(|_| Error::Malformed)?;
            }
            Mode::Tunnel if !outer => {
                pkt.push_front(pushed).ok_or(Error::NoRoom)?;
                pkt.push_back(ICV_LEN).ok_or(Error::NoRoom)?;
            }
            Mode::Tunnel => {
                pkt.push_front(added).ok_or(Error::NoRoom)?;
                pkt.push_back(ICV_LEN).ok_or(Error::NoRoom)?;
                let d = pkt.data_mut();
                // The outer header is a copy of the inner one's fixed part (IPv4 without options), carrying UDP,
                // and whole even when the inner packet is a fragment (DF kept; MF and the offset not). Its next
                // header sits where the inner one's does: `ip` fixes it.
                d.copy_within(added..added + ip_hlen, 0);
                if !ip.v6 {
                    let mut h = ipv4::Packet::new_unchecked(&mut *d);
                    h.set_header_len(ipv4::MIN_HEADER_LEN);
                    h.set_flags(h.flags() & ipv4::flags::DF);
                    h.set_frag_offset(0);
                }
                ip.fix_header(d, ip_proto::UDP)
                    .map_err(|_| Error::Malformed)?;
            }
        }
        let d = pkt.data_mut();
        let psp = if outer {
            ip::emit_udp_header(d, ip_hlen, sport, UDP_PORT, false)
                .map_err(|_| Error::Malformed)?;
            &mut d[ip_hlen + UDP_LEN..]
        } else {
            d
        };
        let repr = Repr {
            next_header,
            crypt_offset: offset,
            sample: false,
            drop: false,
            version: self.cfg.version,
            spi: self.cfg.spi,
            iv,
            vc: self.cfg.vc.then_some(0),
        };
        repr.emit(&mut Header::new_unchecked(&mut *psp));
        seal(&*self.aead, self.cfg.version, offset, psp);
        Ok(sport)
    }
}

/// What a decapsulation found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decapsulated {
    pub mode: Mode,
    pub spi: u32,
    pub version: Version,
    pub iv: u64,
}

/// An inbound SA: SPI, version and the key object, built once.
pub struct RxSa {
    spi: u32,
    version: Version,
    aead: Box<dyn Aead>,
}

impl core::fmt::Debug for RxSa {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RxSa")
            .field("spi", &self.spi)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// The located PSP part of a packet: IP header (`None`: the buffer holds the UDP payload alone), PSP header
/// (parsed), its length, and where it starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Located {
    pub(crate) ip: Option<Layout>,
    pub(crate) hdr: Repr,
    pub(crate) psp_hlen: usize,
    pub(crate) psp_off: usize,
}

/// Finds and checks the PSP header of an IP packet (UDP to port 1000). `Err(NotPsp)` for other packets.
#[inline]
pub(crate) fn locate(p: &[u8]) -> Result<Located, Error> {
    let ip = ip_header(p)?;
    if ip.next_header != ip_proto::UDP {
        return Err(Error::NotPsp);
    }
    let dgram = p.get(ip.header_len..).ok_or(Error::Malformed)?;
    if dgram.len() < UDP_LEN {
        return Err(Error::Malformed);
    }
    let u = udp::Packet::new_unchecked(dgram);
    if u.dst_port() != UDP_PORT {
        return Err(Error::NotPsp);
    }
    if usize::from(u.len()) != dgram.len() {
        return Err(Error::Malformed);
    }
    locate_psp(&dgram[UDP_LEN..], Some(ip), ip.header_len + UDP_LEN)
}

/// Finds and checks the PSP header of a UDP payload received on port 1000, which a buffer holds without its IP
/// and UDP headers (a datagram of a coalesced receive, opened where it lies).
#[inline]
pub(crate) fn locate_payload(psp: &[u8]) -> Result<Located, Error> {
    locate_psp(psp, None, 0)
}

/// Checks the PSP header at the start of `psp`, which is at `psp_off` in its packet.
#[inline]
fn locate_psp(psp: &[u8], ip: Option<Layout>, psp_off: usize) -> Result<Located, Error> {
    let h = Header::new_checked(psp).map_err(|_| Error::Malformed)?;
    if h.version().is_none() {
        return Err(Error::UnsupportedVersion);
    }
    let hdr = Repr::parse(&h).map_err(|_| Error::Malformed)?;
    let psp_hlen = h.header_len();
    if psp.len() < psp_hlen + ICV_LEN {
        return Err(Error::Malformed);
    }
    if BASE_LEN + 4 * hdr.crypt_offset as usize > psp.len() - ICV_LEN {
        return Err(Error::CryptOffset);
    }
    Ok(Located {
        ip,
        hdr,
        psp_hlen,
        psp_off,
    })
}

/// Whether a PSP header's next header is an IP packet (tunnel mode).
pub(crate) fn is_tunnel(loc: &Located) -> bool {
    matches!(loc.hdr.next_header, ip_proto::IPIP | ip_proto::IPV6)
}

/// The SPI and version of the PSP header of an IP packet, to pick the SA (`Err(NotPsp)` if not PSP).
pub fn peek(p: &[u8]) -> Result<(u32, Version), Error> {
    locate(p).map(|l| (l.hdr.spi, l.hdr.version))
}

/// The IV of the PSP header of an IP packet (`Err(NotPsp)` if not PSP).
pub fn peek_iv(p: &[u8]) -> Result<u64, Error> {
    locate(p).map(|l| l.hdr.iv)
}

impl RxSa {
    pub fn new(master: &MasterKeys, spi: u32, version: Version) -> Self {
        Self::with_key(&master.derive(spi, version), spi, version).expect("derived key length")
    }

    pub fn with_key(key: &[u8], spi: u32, version: Version) -> Result<Self, Error> {
        if key.len() != version.key_len() {
            return Err(Error::Malformed);
        }
        Ok(RxSa {
            spi,
            version,
            aead: aead_for(version, key),
        })
    }

    pub fn spi(&self) -> u32 {
        self.spi
    }
    pub fn version(&self) -> Version {
        self.version
    }

    /// Verifies the ICV (always, also when nothing is encrypted), decrypts, and removes the encapsulation:
    /// next header 4 or 41 means tunnel mode (the inner packet is left), anything else transport mode (the IP
    /// header is kept with the next header as protocol). On error the packet is not to be used.
    pub fn decapsulate(&self, pkt: &mut PacketBuf) -> Result<Decapsulated, Error> {
        let loc = locate(pkt.data())?;
        self.decapsulate_located(pkt, loc)
    }

    /// [`RxSa::decapsulate`] with the header already located (so that a device parses it once per packet).
    #[inline]
    pub(crate) fn decapsulate_located(
        &self,
        pkt: &mut PacketBuf,
        loc: Located,
    ) -> Result<Decapsulated, Error> {
        if loc.hdr.spi != self.spi || loc.hdr.version != self.version {
            return Err(Error::Auth);
        }
        // Transport mode rebuilds the packet around its IP header: without one, nothing can be done (checked
        // before anything is decrypted).
        if loc.ip.is_none() && !is_tunnel(&loc) {
            return Err(Error::Malformed);
        }
        let d = pkt.data_mut();
        let psp = &mut d[loc.psp_off..];
        let nonce = Header::new_unchecked(&*psp).nonce();
        let (body, icv) = psp.split_at_mut(psp.len() - ICV_LEN);
        let clear = if self.version.is_gmac() {
            body.len()
        } else {
            BASE_LEN + 4 * loc.hdr.crypt_offset as usize
        };
        let (aad, enc) = body.split_at_mut(clear);
        self.aead
            .open(&nonce, aad, enc, icv)
            .map_err(|_| Error::Auth)?;
        let strip = UDP_LEN + loc.psp_hlen;
        let nh = loc.hdr.next_header;
        let len = pkt.len();
        pkt.truncate(len - ICV_LEN);
        let mode = match (nh, loc.ip) {
            (ip_proto::IPIP | ip_proto::IPV6, _) => {
                pkt.pull_front(loc.psp_off + loc.psp_hlen)
                    .ok_or(Error::Malformed)?;
                let want = if nh == ip_proto::IPIP { 4 } else { 6 };
                if ip::version(pkt.data()) != Some(want) || ip_header(pkt.data()).is_err() {
                    return Err(Error::Malformed);
                }
                Mode::Tunnel
            }
            (_, Some(ip)) => {
                pkt.remove_gap(ip.header_len, strip)
                    .ok_or(Error::Malformed)?;
                ip.fix_header(pkt.data_mut(), nh)
                    .map_err(|_| Error::Malformed)?;
                Mode::Transport
            }
            (_, None) => return Err(Error::Malformed),
        };
        Ok(Decapsulated {
            mode,
            spi: loc.hdr.spi,
            version: loc.hdr.version,
            iv: loc.hdr.iv,
        })
    }
}

/// Decapsulates with SAs derived from the master keys on first use of an (SPI, version) and kept. The cache is
/// unbounded and searched linearly: fine for offline tools; a data plane needs a bounded SA table instead.
#[derive(Debug)]
pub struct Decrypter {
    master: MasterKeys,
    sas: Vec<RxSa>,
}

impl Decrypter {
    pub fn new(master: MasterKeys) -> Self {
        Decrypter {
            master,
            sas: Vec::new(),
        }
    }

    /// The inbound SA for `spi`/`version`, derived and kept on first use.
    pub fn sa(&mut self, spi: u32, version: Version) -> &RxSa {
        let i = match self
            .sas
            .iter()
            .position(|s| s.spi == spi && s.version == version)
        {
            Some(i) => i,
            None => {
                self.sas.push(RxSa::new(&self.master, spi, version));
                self.sas.len() - 1
            }
        };
        &self.sas[i]
    }

    pub fn decapsulate(&mut self, pkt: &mut PacketBuf) -> Result<Decapsulated, Error> {
        let (spi, version) = peek(pkt.data())?;
        self.sa(spi, version).decapsulate(pkt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last IV is used once, then the SA refuses for good: the counter never wraps to a used value, and a
    /// refused packet is left as it was.
    #[test]
    fn iv_counter_exhausts_without_wrapping() {
        let cfg = TxConfig {
            spi: 1,
            version: Version::AesGcm128,
            mode: Mode::Tunnel,
            crypt_offset_transport: 0,
            crypt_offset_tunnel_v4: 0,
            crypt_offset_tunnel_v6: 0,
            vc: false,
        };
        let sa = TxSa::with_key(&[9; 16], cfg).unwrap();
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&28u16.to_be_bytes());
        p[9] = ip_proto::UDP;
        sa.next_iv.store(u64::MAX - 1, Relaxed);
        for want in [u64::MAX - 1, u64::MAX] {
            let mut b = PacketBuf::from_slice(&p, 128, 64);
            sa.encapsulate(&mut b).unwrap();
            assert_eq!(peek_iv(b.data()), Ok(want));
        }
        assert_eq!(sa.next_iv(), 0);
        for _ in 0..3 {
            let mut b = PacketBuf::from_slice(&p, 128, 64);
            assert_eq!(sa.encapsulate(&mut b), Err(Error::IvExhausted));
            assert_eq!(b.data(), &p[..]);
        }
        assert_eq!(sa.next_iv(), 0);
    }

    /// The headers parsed once by the caller give what the bytes give: the same packets (two SAs with one key and
    /// IV counter), the same refusals, the same length on the wire; for both modes, families, VC or not, a
    /// fragment, extension headers, and bytes past the packet's own length.
    #[test]
    fn parsed_headers_encapsulate_as_the_bytes_do() {
        let mut pkts = Vec::new();
        for n in [0usize, 3, 100, 1400] {
            for (v6, proto) in [
                (false, ip_proto::UDP),
                (false, ip_proto::TCP),
                (true, ip_proto::UDP),
            ] {
                let hl = if v6 { 40 } else { 20 };
                let mut p: Vec<u8> = (0..hl + 8 + n).map(|i| (i * 7) as u8).collect();
                let total = p.len() as u16;
                if v6 {
                    p[0] = 0x60;
                    p[4..6].copy_from_slice(&(total - 40).to_be_bytes());
                    p[6] = proto;
                } else {
                    p[0] = 0x45;
                    p[1] = 0xb8;
                    p[2..4].copy_from_slice(&total.to_be_bytes());
                    p[6] = 0x40;
                    p[7] = 0;
                    p[9] = proto;
                }
                pkts.push(p.clone());
                if !v6 {
                    // A first fragment (transport mode refuses it).
                    let mut f = p.clone();
                    f[6] = 0x20;
                    pkts.push(f);
                } else {
                    // A Destination Options header before UDP.
                    let mut e = p[..40].to_vec();
                    e[6] = ip_proto::IPV6_OPTS;
                    e.extend_from_slice(&[ip_proto::UDP, 0, 1, 4, 0, 0, 0, 0]);
                    e.extend_from_slice(&p[40..]);
                    let pl = (e.len() - 40) as u16;
                    e[4..6].copy_from_slice(&pl.to_be_bytes());
                    pkts.push(e);
                }
                // Bytes past the packet's own length: refused either way.
                p.extend_from_slice(&[0xee; 3]);
                pkts.push(p);
            }
        }
        for mode in [Mode::Transport, Mode::Tunnel] {
            for vc in [false, true] {
                let cfg = TxConfig {
                    spi: 7,
                    version: Version::AesGcm256,
                    mode,
                    crypt_offset_transport: 1,
                    crypt_offset_tunnel_v4: 2,
                    crypt_offset_tunnel_v6: 3,
                    vc,
                };
                let (a, b) = (
                    TxSa::with_key(&[3; 32], cfg).unwrap(),
                    TxSa::with_key(&[3; 32], cfg).unwrap(),
                );
                let mut sealed = 0;
                for p in &pkts {
                    let h = netveil_wire::ip::Headers::parse(p).unwrap();
                    for len in [p.len(), p.len() + 9] {
                        assert_eq!(a.udp_wire_len(p, len), b.udp_wire_len_parsed(&h, len));
                    }
                    let (mut x, mut y) = (
                        PacketBuf::from_slice(p, 128, 64),
                        PacketBuf::from_slice(p, 128, 64),
                    );
                    let r = a.encapsulate(&mut x);
                    assert_eq!(
                        r,
                        b.encapsulate_parsed(&mut y, &h),
                        "{mode:?} {vc} {p:02x?}"
                    );
                    assert_eq!(x.data(), y.data());
                    sealed += r.is_ok() as usize;
                    let (mut x, mut y) = (
                        PacketBuf::from_slice(p, 128, 64),
                        PacketBuf::from_slice(p, 128, 64),
                    );
                    assert_eq!(
                        a.encapsulate_udp_payload(&mut x),
                        b.encapsulate_udp_payload_parsed(&mut y, &h)
                    );
                    assert_eq!(x.data(), y.data());
                }
                assert_eq!(a.next_iv(), b.next_iv());
                assert!(sealed >= pkts.len() / 3, "{mode:?} {vc} {sealed}");
            }
        }
    }

    /// `udp_wire_len` is what leaves: the payload `encapsulate_udp_payload` makes, with the socket's IP and UDP
    /// headers, for both modes, both families, with and without the VC field; and it uses no IV.
    #[test]
    fn udp_wire_len_is_the_datagram_that_leaves() {
        for mode in [Mode::Transport, Mode::Tunnel] {
            for vc in [false, true] {
                let cfg = TxConfig {
                    spi: 1,
                    version: Version::AesGcm128,
                    mode,
                    crypt_offset_transport: 0,
                    crypt_offset_tunnel_v4: 0,
                    crypt_offset_tunnel_v6: 0,
                    vc,
                };
                let sa = TxSa::with_key(&[9; 16], cfg).unwrap();
                for v6 in [false, true] {
                    for n in [0usize, 1, 100, 1400] {
                        let hl = if v6 { 40 } else { 20 };
                        let mut p = vec![0u8; hl + 8 + n];
                        let total = p.len() as u16;
                        if v6 {
                            p[0] = 0x60;
                            p[4..6].copy_from_slice(&(total - 40).to_be_bytes());
                            p[6] = ip_proto::UDP;
                        } else {
                            p[0] = 0x45;
                            p[2..4].copy_from_slice(&total.to_be_bytes());
                            p[9] = ip_proto::UDP;
                        }
                        let iv = sa.next_iv();
                        let want = sa.udp_wire_len(&p, p.len()).unwrap();
                        assert_eq!(sa.next_iv(), iv);
                        let mut b = PacketBuf::from_slice(&p, 128, 64);
                        sa.encapsulate_udp_payload(&mut b).unwrap();
                        assert_eq!(hl + 8 + b.len(), want, "{mode:?} vc {vc} v6 {v6} {n}");
                        assert_eq!(sa.udp_wire_len(&p, p.len() + 5), Some(want + 5));
                    }
                }
            }
        }
    }
}
