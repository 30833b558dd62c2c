//! The l2sec clear header: a zero-copy view ([`Header`]) and a parsed form ([`Repr`]) for both versions.
//!
//! Byte 0 is shared by every version: the version in the top 3 bits, then five flags ([`FLAG_SN`] 0x10,
//! [`FLAG_TS`] 0x08, [`FLAG_EPOCH`] 0x04, [`FLAG_SIG`] 0x02, [`FLAG_ENC`] 0x01). The rest depends on the
//! version (multi-byte fields big-endian):
//!
//! | version | byte 1 | then | then, if EP | then, if SN | then, if TS | length |
//! |---|---|---|---|---|---|---|
//! | 0 | sequence number (4 B, bytes 1..5) | | (none: 0x04 is reserved) | security number (3 B) | timestamp (4 B) | 5, 8, 9 or 12 |
//! | 1 | key id (1 B) | sequence number (4 B, bytes 2..6) | epoch (8 B) | security number (3 B) | timestamp (4 B) | 6 + 8·EP + 3·SN + 4·TS (6..=21) |
//!
//! In version 1 the 0x04 flag (EP) says that the sender's 64-bit epoch follows the sequence number: group frames
//! carry it (see [`crate::node`]), unicast frames do not. In version 0 (the thesis' format) the bit is reserved:
//! it takes no room and frames with it set are refused ([`Repr::reserved`]).
//!
//! See the crate documentation for the byte diagrams.

use netveil_wire::{Error, Result};

/// l2sec's default EtherType: 0x88B5, IEEE 802 local experimental EtherType 1.
pub const DEFAULT_ETHERTYPE: u16 = 0x88b5;
/// The EtherType the thesis used.
pub const THESIS_ETHERTYPE: u16 = 0x1982;

/// Flag: a 24-bit security number follows the sequence number.
pub const FLAG_SN: u8 = 0x10;
/// Flag: a 32-bit timestamp follows (after the security number, if any).
pub const FLAG_TS: u8 = 0x08;
/// Version 1: an 8-byte epoch follows the sequence number (group frames).
pub const FLAG_EPOCH: u8 = 0x04;
/// Version 0: the same bit is reserved (sent as zero; frames with it set are refused by
/// [`crate::RxSession::open`]).
pub const FLAG_RESERVED: u8 = FLAG_EPOCH;
/// Flag: the ICV is (or ends with) the sender's Ed25519 signature.
pub const FLAG_SIG: u8 = 0x02;
/// Flag: the encrypted section is encrypted (clear: authenticated only).
pub const FLAG_ENC: u8 = 0x01;
/// All five flag bits.
pub const FLAG_MASK: u8 = 0x1f;

/// Length of the optional epoch (version 1).
pub const EPOCH_LEN: usize = 8;
/// Length of the optional security number.
pub const SN_LEN: usize = 3;
/// Length of the optional timestamp.
pub const TS_LEN: usize = 4;
/// Largest security number (24 bits).
pub const SN_MAX: u32 = 0x00ff_ffff;

/// The header versions this crate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// 0: the thesis' protocol (CBC or ECB block ciphers with HMAC-SHA1, or an Ed25519 signature).
    V0,
    /// 1: netveil's modern default (AEAD: AES-GCM, ChaCha20-Poly1305), with a key id.
    V1,
}

impl Version {
    pub fn from_number(n: u8) -> Option<Version> {
        match n {
            0 => Some(Version::V0),
            1 => Some(Version::V1),
            _ => None,
        }
    }
    pub fn number(self) -> u8 {
        match self {
            Version::V0 => 0,
            Version::V1 => 1,
        }
    }
    /// Length of the header without the optional fields (5 or 6).
    pub fn base_len(self) -> usize {
        match self {
            Version::V0 => 5,
            Version::V1 => 6,
        }
    }
    /// Offset of the sequence number.
    fn seq_at(self) -> usize {
        self.base_len() - 4
    }
}

/// Length of the epoch field for a version and the flags byte (8 with EP in version 1, else 0).
fn epoch_len(version: Version, flags: u8) -> usize {
    if version == Version::V1 && flags & FLAG_EPOCH != 0 {
        EPOCH_LEN
    } else {
        0
    }
}

/// Header length for a version and the flags byte (EP in version 1, SN and TS change it).
pub fn header_len(version: Version, flags: u8) -> usize {
    version.base_len()
        + epoch_len(version, flags)
        + if flags & FLAG_SN != 0 { SN_LEN } else { 0 }
        + if flags & FLAG_TS != 0 { TS_LEN } else { 0 }
}

/// A view of an l2sec clear header at the start of `buffer` (the bytes after the l2sec EtherType).
#[derive(Debug, Clone)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps `buffer` without checking it; accessors may panic until [`Header::check_len`] succeeded.
    pub fn new_unchecked(buffer: T) -> Self {
        Header { buffer }
    }

    /// Wraps `buffer`, checking that it holds a whole header of a known version; afterwards no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let h = Header { buffer };
        h.check_len()?;
        Ok(h)
    }

    /// `Truncated` if the buffer is empty or shorter than the header its first byte announces; `Malformed` for
    /// an unknown version (2..=7), whose layout is not known.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        let Some(&first) = b.first() else {
            return Err(Error::Truncated);
        };
        let Some(v) = Version::from_number(first >> 5) else {
            return Err(Error::Malformed);
        };
        if b.len() < header_len(v, first) {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The 3-bit version number (also for unknown versions; needs one byte).
    pub fn version_number(&self) -> u8 {
        self.buffer.as_ref()[0] >> 5
    }
    /// The version (checked headers always have one).
    pub fn version(&self) -> Version {
        Version::from_number(self.version_number()).unwrap_or(Version::V0)
    }
    /// The five flag bits (byte 0 without the version).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[0] & FLAG_MASK
    }
    pub fn has_security_number(&self) -> bool {
        self.flags() & FLAG_SN != 0
    }
    pub fn has_timestamp(&self) -> bool {
        self.flags() & FLAG_TS != 0
    }
    /// Version 0: the reserved bit is set (never in version 1, where the bit is EP).
    pub fn reserved(&self) -> bool {
        self.version() == Version::V0 && self.flags() & FLAG_RESERVED != 0
    }
    /// Version 1: the EP flag is set (an 8-byte epoch follows the sequence number).
    pub fn has_epoch(&self) -> bool {
        epoch_len(self.version(), self.flags()) != 0
    }
    /// The 64-bit epoch, if the header has one (version 1 with EP).
    pub fn epoch(&self) -> Option<u64> {
        if !self.has_epoch() {
            return None;
        }
        let at = self.version().base_len();
        let mut e = [0u8; EPOCH_LEN];
        e.copy_from_slice(&self.buffer.as_ref()[at..at + EPOCH_LEN]);
        Some(u64::from_be_bytes(e))
    }
    fn sn_at(&self) -> usize {
        self.version().base_len() + epoch_len(self.version(), self.flags())
    }
    pub fn signed(&self) -> bool {
        self.flags() & FLAG_SIG != 0
    }
    pub fn encrypted(&self) -> bool {
        self.flags() & FLAG_ENC != 0
    }
    /// The key id (version 1; 0 for version 0, which has none).
    pub fn key_id(&self) -> u8 {
        match self.version() {
            Version::V0 => 0,
            Version::V1 => self.buffer.as_ref()[1],
        }
    }
    /// The 32-bit sequence number on the wire.
    pub fn seq(&self) -> u32 {
        let at = self.version().seq_at();
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    /// The 24-bit security number, if the SN flag is set.
    pub fn security_number(&self) -> Option<u32> {
        if !self.has_security_number() {
            return None;
        }
        let at = self.sn_at();
        let b = self.buffer.as_ref();
        Some(u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]]))
    }
    /// The 32-bit timestamp, if the TS flag is set.
    pub fn timestamp(&self) -> Option<u32> {
        if !self.has_timestamp() {
            return None;
        }
        let at = self.ts_at();
        let b = self.buffer.as_ref();
        Some(u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]))
    }
    /// Length of this header (from its version and flags).
    pub fn header_len(&self) -> usize {
        header_len(self.version(), self.flags())
    }
    fn ts_at(&self) -> usize {
        self.sn_at()
            + if self.has_security_number() {
                SN_LEN
            } else {
                0
            }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    /// Writes byte 0: the version and the five flags (higher bits of `flags` ignored).
    pub fn set_version_flags(&mut self, version: Version, flags: u8) {
        self.buffer.as_mut()[0] = (version.number() << 5) | (flags & FLAG_MASK);
    }
    /// Writes the key id (version 1 only; ignored for version 0).
    pub fn set_key_id(&mut self, v: u8) {
        if self.version() == Version::V1 {
            self.buffer.as_mut()[1] = v;
        }
    }
    pub fn set_seq(&mut self, v: u32) {
        let at = self.version().seq_at();
        self.buffer.as_mut()[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    /// Writes the epoch (version 1 with the EP flag set; ignored otherwise).
    pub fn set_epoch(&mut self, v: u64) {
        if self.has_epoch() {
            let at = self.version().base_len();
            self.buffer.as_mut()[at..at + EPOCH_LEN].copy_from_slice(&v.to_be_bytes());
        }
    }
    /// Writes the low 24 bits of `v` as security number (the SN flag must be set).
    pub fn set_security_number(&mut self, v: u32) {
        let at = self.sn_at();
        self.buffer.as_mut()[at..at + SN_LEN].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    /// Writes the timestamp (the TS flag must be set).
    pub fn set_timestamp(&mut self, v: u32) {
        let at = self.ts_at();
        self.buffer.as_mut()[at..at + TS_LEN].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed l2sec clear header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub version: Version,
    /// Version 0: the reserved flag (sent as zero; kept here so that every flag combination round-trips). Not
    /// written for version 1, where the bit is EP.
    pub reserved: bool,
    /// Version 1: the sender's 64-bit epoch (EP flag; group frames). Not written for version 0, which has no such
    /// field.
    pub epoch: Option<u64>,
    pub signed: bool,
    pub encrypted: bool,
    /// Key id (version 1); must be 0 for version 0, which has no such field.
    pub key_id: u8,
    /// Low 32 bits of the sequence number.
    pub seq: u32,
    /// 24-bit security number (SN flag).
    pub security_number: Option<u32>,
    /// 32-bit timestamp (TS flag).
    pub timestamp: Option<u32>,
}

impl Repr {
    /// Parses a header (checking its length first).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &Header<&T>) -> Result<Repr> {
        h.check_len()?;
        Ok(Repr {
            version: h.version(),
            reserved: h.reserved(),
            epoch: h.epoch(),
            signed: h.signed(),
            encrypted: h.encrypted(),
            key_id: h.key_id(),
            seq: h.seq(),
            security_number: h.security_number(),
            timestamp: h.timestamp(),
        })
    }

    /// The flags byte (without the version) this header has.
    pub fn flags(&self) -> u8 {
        let bit2 = match self.version {
            Version::V0 => self.reserved,
            Version::V1 => self.epoch.is_some(),
        };
        (if self.security_number.is_some() {
            FLAG_SN
        } else {
            0
        }) | if self.timestamp.is_some() { FLAG_TS } else { 0 }
            | if bit2 { FLAG_EPOCH } else { 0 }
            | if self.signed { FLAG_SIG } else { 0 }
            | if self.encrypted { FLAG_ENC } else { 0 }
    }

    pub fn buffer_len(&self) -> usize {
        header_len(self.version, self.flags())
    }

    /// Writes the header into the first `buffer_len()` bytes. Panics if the buffer is shorter. A security number
    /// above 24 bits is truncated to its low 24 bits; a key id and an epoch are not written for version 0.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, h: &mut Header<&mut T>) {
        h.set_version_flags(self.version, self.flags());
        h.set_key_id(self.key_id);
        h.set_seq(self.seq);
        if let Some(e) = self.epoch {
            h.set_epoch(e);
        }
        if let Some(sn) = self.security_number {
            h.set_security_number(sn);
        }
        if let Some(ts) = self.timestamp {
            h.set_timestamp(ts);
        }
    }
}
