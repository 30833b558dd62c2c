//! The packet transform: the IPv4 security option (type 130) and the payload's encryption, in place.
//!
//! A protected packet keeps its IP header (addresses, protocol, TTL, identification) and its payload length; it
//! gains one option, the only one its header holds:
//!
//! ```text
//! confidentiality only (the paper's mode): 12 bytes
//!   0        1        2        3
//!  +--------+--------+--------+--------+
//!  |  130   |   12   |     key id      |
//!  +--------+--------+--------+--------+
//!  |     counter (64 bits, big-endian) |
//!  |                                   |
//!  +--------+--------+--------+--------+
//!
//! authenticated (the default): 28 bytes, the same and a 16-byte tag
//!  +--------+--------+--------+--------+
//!  |  130   |   28   |     key id      |
//!  +--------+--------+--------+--------+
//!  |     counter (64 bits, big-endian) |
//!  |                                   |
//!  +--------+--------+--------+--------+
//!  |         tag (128 bits)            |
//!  |                                   |
//!  |                                   |
//!  |                                   |
//!  +--------+--------+--------+--------+
//! ```
//!
//! - **Key id**: the first two bytes of HKDF-SHA-256 of the key (salt `netveil pilsc key id`): both ends of a
//!   rule find the same id without agreeing on rule numbers, and the receiver finds the key of a packet whose
//!   ports it cannot read yet.
//! - **Nonce**: the source address (4 bytes) and the counter (8 bytes). The counter is the sender's, per key:
//!   one key never sees a counter twice from one address, and two hosts that share a key (a rule with a
//!   prefix) differ in their addresses. Across restarts the daemon continues the counter from a mark it wrote
//!   ahead (as for static ESP keys); [`Sealer`] refuses to go past its end rather than wrap.
//! - **Payload**: everything after the IP header (transport header and data), encrypted in place, length kept:
//!   AES-128/256 in CTR mode and ChaCha20 for confidentiality only ([`netveil_crypto::stream`]); AES-128/256-GCM
//!   and ChaCha20-Poly1305 when authenticated, with the tag in the option. The paper's 64-bit block ciphers
//!   (3DES, RC5-32/12/16, Blowfish) run in CTR mode from an encrypted nonce, authenticated with HMAC-SHA-256-128
//!   over the same data, the counter and the ciphertext (encrypt-then-MAC, the MAC key derived from the rule's
//!   key); their counters stop at [`LEGACY_PACKETS`]. The tag covers the payload and the
//!   header's fields that no router changes: source, destination, protocol, payload length, and the option's
//!   type, length and key id (the counter is in the nonce). TOS/ECN, TTL, identification, flags and the header
//!   checksum are left out: routers change them.
//! - **Replay**: a window per key and source ([`netveil_sa::replay`]), checked before decryption and advanced
//!   only after the tag verified (authenticated) or, for confidentiality only, after the decrypted transport
//!   checksum verified: without a tag, a forged counter decrypts to noise whose TCP, UDP or ICMP checksum holds
//!   with probability 2^-16, so a forger cannot push the window forward at will. (Confidentiality only has no
//!   integrity: a flipped ciphertext bit flips the same plaintext bit, and a flip that keeps the checksum right
//!   is accepted. `netveil status` and the docs say so.)
//! - **Checksums**: the header checksum is recomputed after the option goes in or out; the transport checksum is
//!   encrypted with the payload and holds again after decryption (addresses, protocol and length are unchanged).
//!
//! Fragments are refused: the host's own packets are taken whole, before fragmentation on output and after
//! reassembly on input. So is a packet that already carries option 130.
//!
//! **Other IPv4 options are refused**, in both modes and both directions: a protected packet carries option 130
//! and nothing else. The tag cannot cover options that routers change (record route, timestamps), and an option
//! left out of it could be inserted on the way and acted on by the receiving host once the packet is opened
//! (router alert, a source route); so a packet with options is not sealed ([`SealError::Options`]), and a sealed
//! packet whose header holds anything besides option 130 is not opened ([`OpenError::Options`]), before any
//! decryption. The host's own TCP and UDP carry no options unless an application sets `IP_OPTIONS`; `ping -R`
//! (record route) over a protected ICMP rule is refused.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use netveil_crypto::stream::{new_stream, StreamAlg, StreamCipher};
use netveil_crypto::{new_aead, new_mac, Aead, AeadAlg, HashAlg, KeyError, Mac};
use netveil_sa::replay::ReplayWindow;
use netveil_wire::ip::Headers;
use netveil_wire::ipv4::Packet;
use netveil_wire::{icmpv4, tcp, udp};

use crate::cipher::Cipher;

/// The option's type: RFC 791's security option (copied flag set, class 0, number 2), as the paper uses it.
pub const OPTION_TYPE: u8 = 130;
/// Length of the tag in the authenticated option.
pub const TAG_LEN: usize = 16;
/// An IPv4 header without options.
const MIN_HEADER_LEN: usize = netveil_wire::ipv4::MIN_HEADER_LEN;
/// The most packets one sender may seal under one key of a 64-bit block cipher (3DES, RC5, Blowfish): their nonce
/// holds a 32-bit counter, and their keystreams start at pseudo-random blocks, so the chance that two packets'
/// keystreams overlap grows with the square of the packets (about 0.3% at 2^24 full-size packets, the cap: about
/// 24 GB). Then the key must be changed ([`SealError::Exhausted`]).
pub const LEGACY_PACKETS: u64 = 1 << 24;

/// Whether protected packets are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The paper's mode: 12 bytes, encryption only.
    Confidential,
    /// netveil's default: 28 bytes, with a tag over the payload and the header's invariant fields.
    Authenticated,
}

impl Mode {
    /// Bytes the option adds to a packet: 12 or 28.
    pub fn option_len(self) -> usize {
        match self {
            Mode::Confidential => 12,
            Mode::Authenticated => 12 + TAG_LEN,
        }
    }
}

/// The key id of a key (see the module documentation).
pub fn key_id(key: &[u8]) -> u16 {
    let mut id = [0u8; 2];
    netveil_crypto::kdf::hkdf_sha256(b"netveil pilsc key id", key, b"", &mut id);
    u16::from_be_bytes(id)
}

/// Why a packet was not sealed (the engine drops it: covered traffic never leaves in clear).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealError {
    /// Not an IPv4 packet this transform can read (version, lengths).
    Malformed,
    /// A fragment.
    Fragment,
    /// With the option, its length would pass 65535.
    NoRoom,
    /// It carries option 130 already.
    Marked,
    /// It carries other IPv4 options (see the module documentation).
    Options,
    /// Fewer bytes of headroom before the packet than the option needs.
    Headroom,
    /// The key's counter reached its end: the key must be changed.
    Exhausted,
}

/// Why a received packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// Not an IPv4 packet this transform can read, or its option 130 is not one of ours.
    Malformed,
    /// A fragment.
    Fragment,
    /// No option 130: not protected (the engine decides whether clear traffic is allowed).
    Unmarked,
    /// The option's length is the other mode's.
    WrongMode,
    /// Its header holds other IPv4 options besides option 130 (see the module documentation).
    Options,
    /// The option names another key.
    WrongKey,
    /// Counter 0, already seen, left of the window, or beyond what the key's algorithm can carry.
    Replay,
    /// The tag did not verify.
    Auth,
    /// Confidentiality only: the decrypted transport checksum is wrong (a forgery or corruption).
    Checksum,
    /// A new source while the key's table of sources is full.
    TooManySources,
    /// The receiver's store could not read a new source's floor or reserve counters above its ceiling.
    State,
}

/// What a protected packet's option says, found without decrypting anything, and the header fields
/// [`Opener::open_marked`] reads (from the same parse of the header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marking {
    pub key_id: u16,
    pub counter: u64,
    /// Its mode, from its length.
    pub mode: Mode,
    /// Offset of the option's type byte from the packet's start.
    offset: usize,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    header_len: usize,
    total_len: usize,
    fragment: bool,
}

impl Marking {
    /// The packet's source address (whose window the counter is checked against).
    pub fn src(&self) -> Ipv4Addr {
        self.src
    }

    /// The option's length.
    fn len(&self) -> usize {
        self.mode.option_len()
    }
}

/// The fields of a checked IPv4 header that sealing reads.
struct Fields {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    header_len: usize,
    total_len: usize,
    fragment: bool,
}

/// Reads option 130 of an IPv4 packet: `Ok(None)` if it has none.
pub fn marking(packet: &[u8]) -> Result<Option<Marking>, OpenError> {
    let p = Packet::new_checked(packet).map_err(|_| OpenError::Malformed)?;
    if p.version() != 4 {
        return Err(OpenError::Malformed);
    }
    let mut found = None;
    for o in p.options_iter() {
        let o = o.map_err(|_| OpenError::Malformed)?;
        if o.kind != OPTION_TYPE {
            continue;
        }
        if found.is_some() {
            return Err(OpenError::Malformed);
        }
        let mode = match o.len() {
            12 => Mode::Confidential,
            28 => Mode::Authenticated,
            _ => return Err(OpenError::Malformed),
        };
        let d = o.data;
        found = Some(Marking {
            key_id: u16::from_be_bytes([d[0], d[1]]),
            counter: u64::from_be_bytes(d[2..10].try_into().map_err(|_| OpenError::Malformed)?),
            mode,
            offset: 20 + o.offset,
            src: p.src_addr(),
            dst: p.dst_addr(),
            proto: p.protocol(),
            header_len: p.header_len(),
            total_len: usize::from(p.total_len()),
            fragment: p.more_frags() || p.frag_offset() != 0,
        });
    }
    Ok(found)
}

enum Transform {
    Stream(Box<dyn StreamCipher>),
    Aead(Box<dyn Aead>),
    /// The 64-bit block ciphers, authenticated: CTR, then HMAC-SHA-256-128 (encrypt-then-MAC) over the
    /// authenticated data, the counter and the ciphertext, under a MAC key derived from the rule's key.
    StreamMac(Box<dyn StreamCipher>, Box<dyn Mac>),
}

impl Transform {
    fn new(cipher: Cipher, mode: Mode, key: &[u8]) -> Result<Transform, KeyError> {
        Ok(match (mode, cipher) {
            (Mode::Confidential, Cipher::Aes128) => {
                Transform::Stream(new_stream(StreamAlg::Aes128Ctr, key)?)
            }
            (Mode::Confidential, Cipher::Aes256) => {
                Transform::Stream(new_stream(StreamAlg::Aes256Ctr, key)?)
            }
            (Mode::Confidential, Cipher::ChaCha20) => {
                Transform::Stream(new_stream(StreamAlg::ChaCha20, key)?)
            }
            (Mode::Authenticated, Cipher::Aes128) => {
                Transform::Aead(new_aead(AeadAlg::AesGcm128 { tag_len: TAG_LEN }, key)?)
            }
            (Mode::Authenticated, Cipher::Aes256) => {
                Transform::Aead(new_aead(AeadAlg::AesGcm256 { tag_len: TAG_LEN }, key)?)
            }
            (Mode::Authenticated, Cipher::ChaCha20) => {
                Transform::Aead(new_aead(AeadAlg::ChaCha20Poly1305, key)?)
            }
            (mode, legacy) => {
                let alg = match legacy {
                    Cipher::TripleDes => StreamAlg::TdesCtr,
                    Cipher::Rc5 => StreamAlg::Rc5Ctr,
                    _ => StreamAlg::BlowfishCtr,
                };
                let s = new_stream(alg, key)?;
                if mode == Mode::Confidential {
                    Transform::Stream(s)
                } else {
                    let mut mk = zeroize::Zeroizing::new([0u8; 32]);
                    netveil_crypto::kdf::hkdf_sha256(b"netveil pilsc mac", key, b"", &mut mk[..]);
                    Transform::StreamMac(s, new_mac(HashAlg::Sha256, &mk[..], TAG_LEN)?)
                }
            }
        })
    }
}

/// What both sides of a key hold: its transform, the mode and the key id.
struct Keyed {
    t: Transform,
    mode: Mode,
    key_id: u16,
    /// Counters at or above this are never sealed, and refused before anything is decrypted
    /// ([`LEGACY_PACKETS`] for the 64-bit block ciphers, whose nonce cannot hold more).
    limit: u64,
}

impl Keyed {
    fn new(cipher: Cipher, mode: Mode, key: &[u8]) -> Result<Keyed, KeyError> {
        Ok(Keyed {
            t: Transform::new(cipher, mode, key)?,
            mode,
            key_id: key_id(key),
            limit: if cipher.legacy() {
                LEGACY_PACKETS
            } else {
                u64::MAX
            },
        })
    }
}

fn nonce(src: Ipv4Addr, counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(&src.octets());
    n[4..].copy_from_slice(&counter.to_be_bytes());
    n
}

/// The authenticated data: source, destination, protocol, payload length, and the option's type, length and
/// key id.
fn aad(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    payload_len: usize,
    mode: Mode,
    key_id: u16,
) -> [u8; 15] {
    let mut a = [0u8; 15];
    a[..4].copy_from_slice(&src.octets());
    a[4..8].copy_from_slice(&dst.octets());
    a[8] = proto;
    a[9..11].copy_from_slice(&(payload_len as u16).to_be_bytes());
    a[11] = OPTION_TYPE;
    a[12] = mode.option_len() as u8;
    a[13..15].copy_from_slice(&key_id.to_be_bytes());
    a
}

/// The outbound side of one key: seals packets, each under the next counter. Built with the counter to start
/// from (the daemon's mark after a restart); it never gives a counter twice and stops at `end`.
pub struct Sealer {
    k: Keyed,
    next: u64,
    end: u64,
}

impl Sealer {
    /// A sealer for `key` under `cipher`, whose first packet gets counter `next` (at least 1) and whose last
    /// gets `end - 1`.
    pub fn new(
        cipher: Cipher,
        mode: Mode,
        key: &[u8],
        next: u64,
        end: u64,
    ) -> Result<Sealer, KeyError> {
        let k = Keyed::new(cipher, mode, key)?;
        let end = end.min(k.limit);
        Ok(Sealer {
            k,
            next: next.max(1),
            end,
        })
    }

    /// The counter the next packet gets (for the daemon's mark).
    pub fn next_counter(&self) -> u64 {
        self.next
    }

    /// The end it stops before (the daemon's reservation).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Moves the end it stops before up to `end` (a new reservation; never down, never past the algorithm's limit).
    pub fn extend(&mut self, end: u64) {
        self.end = self.end.max(end.min(self.k.limit));
    }

    /// Seals the IPv4 packet at `buf[start..start + len]`, which needs [`Mode::option_len`] bytes of headroom
    /// before `start`: the header moves forward into it. Returns the protected packet's start and length.
    pub fn seal(
        &mut self,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> Result<(usize, usize), SealError> {
        let end = start
            .checked_add(len)
            .filter(|e| *e <= buf.len())
            .ok_or(SealError::Malformed)?;
        let p = Packet::new_checked(&buf[start..end]).map_err(|_| SealError::Malformed)?;
        if p.version() != 4 {
            return Err(SealError::Malformed);
        }
        let fields = Fields {
            src: p.src_addr(),
            dst: p.dst_addr(),
            proto: p.protocol(),
            header_len: p.header_len(),
            total_len: usize::from(p.total_len()),
            fragment: p.more_frags() || p.frag_offset() != 0,
        };
        self.seal_fields(buf, start, end, &fields)
    }

    /// [`Sealer::seal`] of a packet whose headers the caller parsed already: `hdrs` is the view of the packet at
    /// `buf[start..start + len]` as it is now (its IP header not changed since it was parsed; a change to the
    /// transport header, as the MSS clamp's, does not matter). The version, addresses, protocol, lengths and
    /// fragment fields come from it; only a header with options is read again (to tell option 130 from others).
    /// The result is the same as [`Sealer::seal`]'s.
    pub fn seal_parsed(
        &mut self,
        buf: &mut [u8],
        start: usize,
        len: usize,
        hdrs: &Headers,
    ) -> Result<(usize, usize), SealError> {
        let end = start
            .checked_add(len)
            .filter(|e| *e <= buf.len())
            .ok_or(SealError::Malformed)?;
        let (IpAddr::V4(src), IpAddr::V4(dst)) = hdrs.addrs() else {
            return Err(SealError::Malformed);
        };
        // (A view of these bytes says so; one of other bytes must not lead the slicing below astray.)
        if hdrs.total_len() > len {
            return Err(SealError::Malformed);
        }
        let fields = Fields {
            src,
            dst,
            proto: hdrs.protocol(),
            header_len: hdrs.header_len(),
            total_len: hdrs.total_len(),
            fragment: hdrs.fragment().is_some(),
        };
        self.seal_fields(buf, start, end, &fields)
    }

    /// Seals the packet at `buf[start..end]`, whose checked IPv4 header says `f`.
    fn seal_fields(
        &mut self,
        buf: &mut [u8],
        start: usize,
        end: usize,
        f: &Fields,
    ) -> Result<(usize, usize), SealError> {
        let ol = self.k.mode.option_len();
        if f.fragment {
            return Err(SealError::Fragment);
        }
        let (hl, tl) = (f.header_len, f.total_len);
        if hl != MIN_HEADER_LEN {
            // Options: option 130 already there, or others (or ones that do not parse).
            let p = Packet::new_checked(&buf[start..end]).map_err(|_| SealError::Malformed)?;
            for o in p.options_iter() {
                match o {
                    Ok(o) if o.kind == OPTION_TYPE => return Err(SealError::Marked),
                    Ok(_) => {}
                    Err(_) => return Err(SealError::Malformed),
                }
            }
            return Err(SealError::Options);
        }
        if tl + ol > usize::from(u16::MAX) {
            return Err(SealError::NoRoom);
        }
        if start < ol {
            return Err(SealError::Headroom);
        }
        if self.next >= self.end {
            return Err(SealError::Exhausted);
        }
        let (src, dst, proto) = (f.src, f.dst, f.proto);
        let counter = self.next;
        self.next += 1;

        // The header moves forward by the option's length; the option follows the fixed header.
        let ns = start - ol;
        buf.copy_within(start..start + hl, ns);
        let opt = ns + hl;
        buf[opt] = OPTION_TYPE;
        buf[opt + 1] = ol as u8;
        buf[opt + 2..opt + 4].copy_from_slice(&self.k.key_id.to_be_bytes());
        buf[opt + 4..opt + 12].copy_from_slice(&counter.to_be_bytes());
        let payload_len = tl - hl;
        let n = nonce(src, counter);
        let (head, rest) = buf[ns..].split_at_mut(hl + ol);
        let payload = &mut rest[..payload_len];
        match &self.k.t {
            Transform::Stream(s) => s.apply(&n, payload),
            Transform::Aead(a) => {
                let aad = aad(src, dst, proto, payload_len, self.k.mode, self.k.key_id);
                a.seal(&n, &aad, payload, &mut head[hl + 12..hl + ol]);
            }
            Transform::StreamMac(s, mac) => {
                s.apply(&n, payload);
                let aad = aad(src, dst, proto, payload_len, self.k.mode, self.k.key_id);
                mac.compute(&[&aad, &n[4..], payload], &mut head[hl + 12..hl + ol]);
            }
        }
        let mut h = Packet::new_unchecked(&mut buf[ns..ns + tl + ol]);
        h.set_header_len(hl + ol);
        h.set_total_len((tl + ol) as u16);
        h.fill_checksum();
        Ok((ns, tl + ol))
    }
}

/// The inbound side of one key: a replay window per source, bounded in number.
pub struct Opener {
    k: Keyed,
    window: u32,
    max_sources: usize,
    sources: HashMap<Ipv4Addr, Source>,
}

/// One source's window, and the counter up to which the receiver's store may accept (its ceiling).
struct Source {
    window: ReplayWindow,
    ceiling: u64,
}

/// What a receiver keeps across its restarts, per key and source (the daemon's state directory): so that no packet
/// accepted before a restart or a crash is accepted again, every counter accepted is at most a number stored
/// durably before it was accepted (the source's *ceiling*), and a restart takes everything up to the stored number
/// as seen. [`Opener::open_with`] asks it when a source is first seen and when an authenticated packet is above its
/// ceiling; the daemon raises ceilings ahead of the traffic between packets ([`Opener::sources`],
/// [`Opener::set_ceiling`]).
pub trait Floors {
    /// Source `src`'s floor (every counter up to it counts as seen), read when the source is first seen in this
    /// run; nothing is reserved above it yet (a packet that does not authenticate must not change the store).
    /// `None`: its state cannot be read (the packet is dropped).
    fn load(&mut self, src: Ipv4Addr) -> Option<u64>;
    /// Reserves, durably, counters up to at least `counter` for `src`: the new ceiling, or `None` if that could not
    /// be written (the packet is dropped).
    fn reserve(&mut self, src: Ipv4Addr, counter: u64) -> Option<u64>;
}

/// No state across restarts: every source starts with an empty window and no ceiling (tests, tools).
pub struct NoFloors;

impl Floors for NoFloors {
    fn load(&mut self, _: Ipv4Addr) -> Option<u64> {
        Some(0)
    }
    fn reserve(&mut self, _: Ipv4Addr, _: u64) -> Option<u64> {
        Some(u64::MAX)
    }
}

impl Opener {
    /// An opener for `key` under `cipher`, with replay windows of `window` packets for at most `max_sources`
    /// sources (a new source beyond them is refused, not let in without a window).
    pub fn new(
        cipher: Cipher,
        mode: Mode,
        key: &[u8],
        window: u32,
        max_sources: usize,
    ) -> Result<Opener, KeyError> {
        Ok(Opener {
            k: Keyed::new(cipher, mode, key)?,
            window,
            max_sources,
            sources: HashMap::new(),
        })
    }

    pub fn key_id(&self) -> u16 {
        self.k.key_id
    }

    /// [`Opener::open_with`] without state across restarts ([`NoFloors`]).
    pub fn open(
        &mut self,
        buf: &mut [u8],
        start: usize,
        len: usize,
    ) -> Result<(usize, usize), OpenError> {
        self.open_with(buf, start, len, &mut NoFloors)
    }

    /// Every source seen: its highest counter accepted and its ceiling.
    pub fn sources(&self) -> impl Iterator<Item = (Ipv4Addr, u64, u64)> + '_ {
        self.sources
            .iter()
            .map(|(a, s)| (*a, s.window.top(), s.ceiling))
    }

    /// Raises source `src`'s ceiling to `ceiling` (stored durably by the caller first); never lowers it.
    pub fn set_ceiling(&mut self, src: Ipv4Addr, ceiling: u64) {
        if let Some(s) = self.sources.get_mut(&src) {
            s.ceiling = s.ceiling.max(ceiling);
        }
    }

    /// Opens the protected IPv4 packet at `buf[start..start + len]` in place: checks, decrypts, and removes the
    /// option (the header moves back by its length). Returns the clear packet's start and length. A new source's
    /// floor and ceiling come from `floors`, and so does a reservation for an authenticated packet above its
    /// ceiling.
    pub fn open_with(
        &mut self,
        buf: &mut [u8],
        start: usize,
        len: usize,
        floors: &mut dyn Floors,
    ) -> Result<(usize, usize), OpenError> {
        let end = start
            .checked_add(len)
            .filter(|e| *e <= buf.len())
            .ok_or(OpenError::Malformed)?;
        let m = marking(&buf[start..end])?.ok_or(OpenError::Unmarked)?;
        self.open_marked(buf, start, len, &m, floors)
    }

    /// [`Opener::open_with`] of a packet whose option the caller read already: `m` is [`marking`]'s answer for
    /// the packet at `buf[start..start + len]` as it is now, and its header fields are not read again. The result
    /// is the same as [`Opener::open_with`]'s.
    pub fn open_marked(
        &mut self,
        buf: &mut [u8],
        start: usize,
        len: usize,
        m: &Marking,
        floors: &mut dyn Floors,
    ) -> Result<(usize, usize), OpenError> {
        let end = start
            .checked_add(len)
            .filter(|e| *e <= buf.len())
            .ok_or(OpenError::Malformed)?;
        // (A marking of these bytes says so; one of other bytes must not lead the slicing below astray.)
        if m.total_len > len || m.header_len > m.total_len || m.offset + m.len() > m.header_len {
            return Err(OpenError::Malformed);
        }
        if m.fragment {
            return Err(OpenError::Fragment);
        }
        if m.mode != self.k.mode {
            return Err(OpenError::WrongMode);
        }
        // Option 130 right after the fixed header and nothing else: an option inserted on the way is not covered by
        // the tag and would act on the receiving host (router alert, a source route).
        if m.header_len != MIN_HEADER_LEN + m.mode.option_len() {
            return Err(OpenError::Options);
        }
        if m.key_id != self.k.key_id {
            return Err(OpenError::WrongKey);
        }
        let (src, dst, proto) = (m.src, m.dst, m.proto);
        let (hl, tl) = (m.header_len, m.total_len);
        // Cheap checks first: the counter against the key's range and the source's window, before any decryption.
        if m.counter >= self.k.limit {
            return Err(OpenError::Replay);
        }
        // A new source's stored floor, read now (its window is made only once a packet of it authenticated).
        let mut fresh = None;
        match self.sources.get(&src) {
            Some(w) => w
                .window
                .check_full(m.counter)
                .map_err(|_| OpenError::Replay)?,
            None if m.counter == 0 => return Err(OpenError::Replay),
            None if self.sources.len() >= self.max_sources => {
                return Err(OpenError::TooManySources)
            }
            None => {
                let floor = floors.load(src).ok_or(OpenError::State)?;
                if m.counter <= floor {
                    return Err(OpenError::Replay);
                }
                fresh = Some(floor);
            }
        }
        let ol = self.k.mode.option_len();
        let payload_len = tl - hl;
        let n = nonce(src, m.counter);
        let (head, rest) = buf[start..end].split_at_mut(hl);
        let payload = &mut rest[..payload_len];
        match &self.k.t {
            Transform::Stream(s) => {
                s.apply(&n, payload);
                if !transport_checksum_ok(src, dst, proto, payload) {
                    // Back to what came in: nothing of a refused packet stays decrypted.
                    s.apply(&n, payload);
                    return Err(OpenError::Checksum);
                }
            }
            Transform::Aead(a) => {
                let tag_at = m.offset + 12;
                let aad = aad(src, dst, proto, payload_len, self.k.mode, self.k.key_id);
                a.open(&n, &aad, payload, &head[tag_at..tag_at + TAG_LEN])
                    .map_err(|_| OpenError::Auth)?;
            }
            Transform::StreamMac(s, mac) => {
                // The tag first (on the ciphertext): nothing is decrypted for a forgery.
                let tag_at = m.offset + 12;
                let aad = aad(src, dst, proto, payload_len, self.k.mode, self.k.key_id);
                mac.verify(&[&aad, &n[4..], payload], &head[tag_at..tag_at + TAG_LEN])
                    .map_err(|_| OpenError::Auth)?;
                s.apply(&n, payload);
            }
        }
        // Authenticated (or checksummed): now the window moves, within what the store reserved.
        let window = self.window;
        let w = self.sources.entry(src).or_insert_with(|| {
            let floor = fresh.unwrap_or(0);
            Source {
                window: ReplayWindow::with_floor(window, true, floor),
                ceiling: floor,
            }
        });
        if m.counter > w.ceiling {
            w.ceiling = floors
                .reserve(src, m.counter)
                .filter(|c| *c >= m.counter)
                .ok_or(OpenError::State)?;
        }
        w.window.update(m.counter).map_err(|_| OpenError::Replay)?;

        // The option leaves: the bytes before it move back by its length.
        buf.copy_within(start..start + m.offset, start + ol);
        let ns = start + ol;
        let mut h = Packet::new_unchecked(&mut buf[ns..end]);
        h.set_header_len(hl - ol);
        h.set_total_len((tl - ol) as u16);
        h.fill_checksum();
        Ok((ns, tl - ol))
    }
}

/// Whether a decrypted transport header's checksum holds (TCP, UDP with a checksum, ICMP; through `wire`'s
/// views); other protocols, and UDP without a checksum, have none to check.
fn transport_checksum_ok(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, payload: &[u8]) -> bool {
    let (s, d) = (IpAddr::V4(src), IpAddr::V4(dst));
    match proto {
        6 => tcp::Packet::new_checked(payload).is_ok_and(|t| t.verify_checksum(s, d)),
        17 => udp::Packet::new_checked(payload).is_ok_and(|u| u.verify_checksum(s, d)),
        1 => icmpv4::Packet::new_checked(payload).is_ok_and(|i| i.verify_checksum()),
        _ => true,
    }
}
