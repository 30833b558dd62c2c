//! The PSP header: next header (1 B), header extension length (1 B, 8-byte units beyond the first 8), 2 reserved
//! bits + 6-bit crypt offset (4-byte units counted from the end of the IV), S | D | version (4 bits) | V | 1, SPI
//! (4 B), IV (8 B), then the 8-byte virtualization cookie when V is set.

use netveil_wire::{Error, Result};

/// The UDP destination port of PSP.
pub const UDP_PORT: u16 = 1000;

/// Length of the header without the virtualization cookie.
pub const BASE_LEN: usize = 16;
/// Length of the virtualization cookie.
pub const VC_LEN: usize = 8;
/// Length of the ICV of every PSP version.
pub const ICV_LEN: usize = 16;

const S_BIT: u8 = 0x80;
const D_BIT: u8 = 0x40;
const V_BIT: u8 = 0x02;
const ONE_BIT: u8 = 0x01;

/// The PSP versions of the specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// 0: AES-GCM-128.
    AesGcm128,
    /// 1: AES-GCM-256.
    AesGcm256,
    /// 2: AES-GMAC-128 (authentication only).
    AesGmac128,
    /// 3: AES-GMAC-256 (authentication only).
    AesGmac256,
}

impl Version {
    pub fn from_number(n: u8) -> Option<Version> {
        Some(match n {
            0 => Version::AesGcm128,
            1 => Version::AesGcm256,
            2 => Version::AesGmac128,
            3 => Version::AesGmac256,
            _ => return None,
        })
    }
    pub fn number(self) -> u8 {
        match self {
            Version::AesGcm128 => 0,
            Version::AesGcm256 => 1,
            Version::AesGmac128 => 2,
            Version::AesGmac256 => 3,
        }
    }
    /// Length of the SA key in bytes (16 or 32).
    pub fn key_len(self) -> usize {
        match self {
            Version::AesGcm128 | Version::AesGmac128 => 16,
            Version::AesGcm256 | Version::AesGmac256 => 32,
        }
    }
    /// True for the GMAC versions: nothing is encrypted, everything is authenticated.
    pub fn is_gmac(self) -> bool {
        matches!(self, Version::AesGmac128 | Version::AesGmac256)
    }
}

/// A view of a PSP header at the start of `buffer`.
#[derive(Debug, Clone)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Header { buffer }
    }

    /// Checks that the buffer holds the whole header (as its extension length and V bit say); afterwards no
    /// accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let h = Header { buffer };
        h.check_len()?;
        Ok(h)
    }

    /// Verifies the lengths: at least 16 bytes, header extension length at least 1 (2 with V set), the buffer
    /// holds `header_len()` bytes, and the always-one bit is set.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < BASE_LEN {
            return Err(Error::Truncated);
        }
        let min_ext = if b[3] & V_BIT != 0 { 2 } else { 1 };
        if (b[1] as usize) < min_ext || b[3] & ONE_BIT == 0 {
            return Err(Error::Malformed);
        }
        if b.len() < self.header_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    pub fn hdr_ext_len(&self) -> u8 {
        self.buffer.as_ref()[1]
    }
    /// Length of the header including the extension (VC): 8 + 8 * hdr_ext_len.
    pub fn header_len(&self) -> usize {
        8 + 8 * self.hdr_ext_len() as usize
    }
    /// The 2 reserved bits above the crypt offset (covered by the ICV).
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[2] >> 6
    }
    /// Crypt offset in 4-byte units, counted from the end of the IV.
    pub fn crypt_offset(&self) -> u8 {
        self.buffer.as_ref()[2] & 0x3f
    }
    pub fn sample(&self) -> bool {
        self.buffer.as_ref()[3] & S_BIT != 0
    }
    pub fn drop_bit(&self) -> bool {
        self.buffer.as_ref()[3] & D_BIT != 0
    }
    /// The 4-bit version number.
    pub fn version_number(&self) -> u8 {
        (self.buffer.as_ref()[3] >> 2) & 0x0f
    }
    pub fn version(&self) -> Option<Version> {
        Version::from_number(self.version_number())
    }
    pub fn vc_present(&self) -> bool {
        self.buffer.as_ref()[3] & V_BIT != 0
    }
    pub fn spi(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[4], b[5], b[6], b[7]])
    }
    pub fn iv(&self) -> u64 {
        let b = self.buffer.as_ref();
        u64::from_be_bytes(b[8..16].try_into().unwrap())
    }
    /// The virtualization cookie, if V is set.
    pub fn vc(&self) -> Option<u64> {
        let b = self.buffer.as_ref();
        self.vc_present()
            .then(|| u64::from_be_bytes(b[16..24].try_into().unwrap()))
    }
    /// The nonce: SPI ‖ IV as on the wire.
    pub fn nonce(&self) -> [u8; 12] {
        let mut n = [0u8; 12];
        n.copy_from_slice(&self.buffer.as_ref()[4..16]);
        n
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }
    pub fn set_hdr_ext_len(&mut self, v: u8) {
        self.buffer.as_mut()[1] = v;
    }
    /// Sets the 6-bit crypt offset, keeping the reserved bits.
    pub fn set_crypt_offset(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[2];
        *b = (*b & 0xc0) | (v & 0x3f);
    }
    /// Sets byte 3 from its fields (the always-one bit included).
    pub fn set_flags(&mut self, sample: bool, drop: bool, version: u8, vc: bool) {
        self.buffer.as_mut()[3] = if sample { S_BIT } else { 0 }
            | if drop { D_BIT } else { 0 }
            | ((version & 0x0f) << 2)
            | if vc { V_BIT } else { 0 }
            | ONE_BIT;
    }
    pub fn set_spi(&mut self, v: u32) {
        self.buffer.as_mut()[4..8].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_iv(&mut self, v: u64) {
        self.buffer.as_mut()[8..16].copy_from_slice(&v.to_be_bytes());
    }
    /// Writes the VC (the caller has set V and made room for it).
    pub fn set_vc(&mut self, v: u64) {
        self.buffer.as_mut()[16..24].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed PSP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub next_header: u8,
    /// Crypt offset in 4-byte units (0..=63).
    pub crypt_offset: u8,
    pub sample: bool,
    pub drop: bool,
    pub version: Version,
    pub spi: u32,
    pub iv: u64,
    pub vc: Option<u64>,
}

impl Repr {
    /// Parses a checked header. Headers longer than their VC (extension bytes beyond it) are refused, as are
    /// unknown versions. The reserved bits are ignored (they are covered by the ICV).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &Header<&T>) -> Result<Repr> {
        h.check_len()?;
        let want = if h.vc_present() {
            BASE_LEN + VC_LEN
        } else {
            BASE_LEN
        };
        if h.header_len() != want {
            return Err(Error::Malformed);
        }
        Ok(Repr {
            next_header: h.next_header(),
            crypt_offset: h.crypt_offset(),
            sample: h.sample(),
            drop: h.drop_bit(),
            version: h.version().ok_or(Error::Malformed)?,
            spi: h.spi(),
            iv: h.iv(),
            vc: h.vc(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        if self.vc.is_some() {
            BASE_LEN + VC_LEN
        } else {
            BASE_LEN
        }
    }

    /// Writes the header into the first `buffer_len()` bytes (reserved bits zero). Panics if shorter.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, h: &mut Header<&mut T>) {
        let len = self.buffer_len();
        h.set_next_header(self.next_header);
        h.set_hdr_ext_len((len / 8 - 1) as u8);
        h.buffer.as_mut()[2] = 0;
        h.set_crypt_offset(self.crypt_offset);
        h.set_flags(
            self.sample,
            self.drop,
            self.version.number(),
            self.vc.is_some(),
        );
        h.set_spi(self.spi);
        h.set_iv(self.iv);
        if let Some(vc) = self.vc {
            h.set_vc(vc);
        }
    }
}
