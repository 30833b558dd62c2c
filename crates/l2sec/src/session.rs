//! Sealing and opening Ethernet frames in place on a [`PacketBuf`]: [`TxSession::seal`] and
//! [`RxSession::open`], plus [`peek`] to pick the session of a received frame.

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use netveil_crypto::rand::Rng;
use netveil_sa::replay::{ReplayError, ReplayWindow};
use netveil_sa::seq::SeqCounter;
use netveil_wire::ethernet::{self, Address};
use netveil_wire::PacketBuf;

use crate::engine::{block_decrypt, block_encrypt, Engine};
use crate::error::{ConfigError, Drop, SealError};
use crate::header::{self, Header, Repr, Version, DEFAULT_ETHERTYPE, SN_MAX};
use crate::keys::SessionKeys;
use crate::suite::{Suite, SIG_LEN, TAG_LEN};

/// Offset of the clear header: after the MAC addresses and the l2sec EtherType.
const HDR_AT: usize = ethernet::HEADER_LEN;
/// Original EtherType (2) and padding size (1) at the start of the encrypted section.
const SECTION_PREFIX: usize = 3;

/// How a transmit session is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxConfig {
    /// The EtherType of l2sec frames ([`DEFAULT_ETHERTYPE`] 0x88B5, or the thesis' 0x1982).
    pub ethertype: u16,
    /// Version 1: the key id sent in every frame (the receiver's selector across rekeys).
    pub key_id: u8,
    /// Version 1: the 64-bit epoch sent in every frame (EP flag): group senders set it (it is also in their key
    /// derivation, see [`crate::node`]); sessions leave it `None`. Ignored in version 0, which has no such field.
    pub epoch: Option<u64>,
    /// Allow the ECB suites (insecure: equal plaintext blocks give equal ciphertext blocks).
    pub insecure_ecb: bool,
    /// Allow the null suite (insecure: frames travel in clear and unauthenticated, the framing alone).
    pub insecure_null: bool,
    /// The first sequence number (low 32 bits on the wire). `None`: random in 1..=2^31, as the thesis
    /// prescribes a random start (at most 2^31 keeps the receiver's inference of the high bits simple).
    pub first_seq: Option<u64>,
}

impl Default for TxConfig {
    fn default() -> Self {
        TxConfig {
            ethertype: DEFAULT_ETHERTYPE,
            key_id: 0,
            epoch: None,
            insecure_ecb: false,
            insecure_null: false,
            first_seq: None,
        }
    }
}

/// Per-frame choices for [`TxSession::seal`].
#[derive(Clone, Copy)]
pub struct SealOpts<'a> {
    /// Send this 24-bit security number (SN flag).
    pub security_number: Option<u32>,
    /// Send this timestamp (TS flag): seconds, normally the Unix time modulo 2^32, passed in by the caller.
    pub timestamp: Option<u32>,
    /// Sign the frame with this key (SIG flag): version 0 sends the signature instead of the HMAC, version 1
    /// after the AEAD tag (keyed sessions) or alone (keyless sessions).
    pub signer: Option<&'a SigningKey>,
    /// Encrypt the section (ENC flag). Clear: authenticated only. Keyless sessions cannot encrypt; the null
    /// suite never does (its frames go without the flag).
    pub encrypt: bool,
}

impl Default for SealOpts<'_> {
    fn default() -> Self {
        SealOpts {
            security_number: None,
            timestamp: None,
            signer: None,
            encrypt: true,
        }
    }
}

impl core::fmt::Debug for SealOpts<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SealOpts")
            .field("security_number", &self.security_number)
            .field("timestamp", &self.timestamp)
            .field("signed", &self.signer.is_some())
            .field("encrypt", &self.encrypt)
            .finish()
    }
}

fn random_first_seq(rng: &mut dyn Rng) -> u64 {
    let b = netveil_crypto::rand::array::<4>(rng);
    u64::from(u32::from_be_bytes(b) & 0x7fff_ffff) + 1
}

/// ICV length for a version, keyed or not, signed or not.
fn icv_len(version: Version, suite: Option<Suite>, signed: bool) -> usize {
    match (version, signed) {
        (Version::V0, true) => SIG_LEN,
        (Version::V0, false) => suite.map_or(0, |s| s.icv_len()),
        (Version::V1, s) => suite.map_or(0, |_| TAG_LEN) + if s { SIG_LEN } else { 0 },
    }
}

/// The sending side of a session (or of a group sender): cipher state built once, the sequence counter.
pub struct TxSession {
    cfg: TxConfig,
    version: Version,
    suite: Option<Suite>,
    engine: Option<Engine>,
    seq: SeqCounter,
}

impl core::fmt::Debug for TxSession {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TxSession")
            .field("version", &self.version)
            .field("suite", &self.suite)
            .field("ethertype", &self.cfg.ethertype)
            .field("key_id", &self.cfg.key_id)
            .field("last_seq", &self.seq.last())
            .finish_non_exhaustive()
    }
}

impl TxSession {
    /// A keyed session with `keys` (whose suite fixes the version). Without `cfg.first_seq`, the first sequence
    /// number is drawn from `rng` (the caller's: the OS generator in production).
    pub fn new(keys: &SessionKeys, cfg: TxConfig, rng: &mut dyn Rng) -> Result<Self, ConfigError> {
        let engine = Engine::new(keys, cfg.insecure_ecb, cfg.insecure_null)?;
        Ok(TxSession {
            version: keys.suite().version(),
            suite: Some(keys.suite()),
            engine: Some(engine),
            seq: SeqCounter::new(cfg.first_seq.unwrap_or_else(|| random_first_seq(rng)), true),
            cfg,
        })
    }

    /// A session without keys (hosts without a session, before or for the session establishment): every frame
    /// must be signed and cannot be encrypted. Without `cfg.first_seq`, the first sequence number is drawn from
    /// `rng`.
    pub fn keyless(version: Version, cfg: TxConfig, rng: &mut dyn Rng) -> Self {
        TxSession {
            version,
            suite: None,
            engine: None,
            seq: SeqCounter::new(cfg.first_seq.unwrap_or_else(|| random_first_seq(rng)), true),
            cfg,
        }
    }

    pub fn version(&self) -> Version {
        self.version
    }
    pub fn suite(&self) -> Option<Suite> {
        self.suite
    }
    /// The last sequence number sent (0 before the first frame).
    pub fn last_seq(&self) -> u64 {
        self.seq.last()
    }

    /// Bytes of headroom and tailroom a frame needs to be sealed with these options (at most 24 and 80).
    pub fn overhead(&self, opts: &SealOpts<'_>) -> (usize, usize) {
        let h = header::header_len(self.version, self.flags(opts));
        let pad = match self.suite {
            Some(s) if self.encrypts(opts) => s.block_len() - 1,
            _ => 0,
        };
        (
            h + SECTION_PREFIX,
            pad + icv_len(self.version, self.suite, opts.signer.is_some()),
        )
    }

    /// The epoch this session sends (version 1 only).
    fn epoch(&self) -> Option<u64> {
        match self.version {
            Version::V0 => None,
            Version::V1 => self.cfg.epoch,
        }
    }

    /// Whether a frame sealed with `opts` is encrypted: as asked, but never with the null suite.
    fn encrypts(&self, opts: &SealOpts<'_>) -> bool {
        opts.encrypt && !matches!(self.engine, Some(Engine::Null))
    }

    fn flags(&self, opts: &SealOpts<'_>) -> u8 {
        Repr {
            version: self.version,
            reserved: false,
            epoch: self.epoch(),
            signed: opts.signer.is_some(),
            encrypted: self.encrypts(opts),
            key_id: 0,
            seq: 0,
            security_number: opts.security_number,
            timestamp: opts.timestamp,
        }
        .flags()
    }

    /// Turns the clear Ethernet frame in `frame` (destination MAC, source MAC, EtherType, payload) into an l2sec
    /// frame in place. On error the frame is unchanged (and no sequence number is used, except for
    /// `SeqExhausted`).
    pub fn seal(&mut self, frame: &mut PacketBuf, opts: &SealOpts<'_>) -> Result<(), SealError> {
        if frame.len() < ethernet::HEADER_LEN {
            return Err(SealError::Malformed);
        }
        if opts.security_number.is_some_and(|sn| sn > SN_MAX) {
            return Err(SealError::SecurityNumberRange);
        }
        let signed = opts.signer.is_some();
        if self.engine.is_none() && (opts.encrypt || !signed) {
            return Err(SealError::NoKey);
        }
        let encrypt = self.encrypts(opts);
        let l3_len = frame.len() - ethernet::HEADER_LEN;
        let block = match (self.suite, encrypt) {
            (Some(s), true) => s.block_len(),
            _ => 1,
        };
        let pad = (block - (SECTION_PREFIX + l3_len) % block) % block;
        let icv = icv_len(self.version, self.suite, signed);
        let repr = Repr {
            version: self.version,
            reserved: false,
            epoch: self.epoch(),
            signed,
            encrypted: encrypt,
            key_id: if self.version == Version::V1 {
                self.cfg.key_id
            } else {
                0
            },
            seq: 0,
            security_number: opts.security_number,
            timestamp: opts.timestamp,
        };
        let h = repr.buffer_len();
        if frame.headroom() < h + SECTION_PREFIX || frame.tailroom() < pad + icv {
            return Err(SealError::NoRoom);
        }
        let seq = self.seq.next().map_err(|_| SealError::SeqExhausted)?;
        let repr = Repr {
            seq: seq as u32,
            ..repr
        };
        let seq_hi = ((seq >> 32) as u32).to_be_bytes();

        // [MACs][type][L3] -> [MACs][l2sec type][header][type][pad len][L3][padding][ICV]
        frame
            .insert_gap(ethernet::HEADER_LEN, h + SECTION_PREFIX)
            .ok_or(SealError::NoRoom)?;
        let s = HDR_AT + h;
        {
            let d = frame.data_mut();
            // The frame's EtherType moves into the section; the Ethernet header gets l2sec's.
            let mut eth = ethernet::Packet::new_unchecked(&mut *d);
            let inner = eth.ethertype();
            eth.set_ethertype(self.cfg.ethertype);
            d[s..s + 2].copy_from_slice(&inner.to_be_bytes());
            d[s + 2] = pad as u8;
            repr.emit(&mut Header::new_unchecked(&mut d[HDR_AT..s]));
        }
        if pad > 0 {
            let p = frame.push_back(pad).ok_or(SealError::NoRoom)?;
            for (i, b) in p.iter_mut().enumerate() {
                *b = i as u8 + 1;
            }
        }
        let body_end = frame.len();
        let icv_area = frame.push_back(icv).ok_or(SealError::NoRoom)?;
        icv_area.fill(0);
        let d = frame.data_mut();
        let mut sig_at = body_end;
        match &self.engine {
            Some(Engine::Block {
                cipher,
                mac,
                ecb,
                block,
                bivn,
            }) => {
                if encrypt {
                    let iv = Engine::iv(&**cipher, bivn, *block, seq);
                    block_encrypt(&**cipher, *ecb, &iv[..*block], &mut d[s..body_end]);
                }
                if !signed {
                    let (msg, tag) = d.split_at_mut(body_end);
                    mac.compute(&[msg, &seq_hi], tag);
                }
            }
            Some(Engine::Aead { aead, salt }) => {
                let nonce = Engine::nonce(salt, seq);
                let (front, tail) = d.split_at_mut(body_end);
                let tag = &mut tail[..TAG_LEN];
                if encrypt {
                    let (aad, section) = front.split_at_mut(s);
                    aead.seal(&nonce, aad, section, tag);
                } else {
                    aead.seal(&nonce, front, &mut [], tag);
                }
                sig_at = body_end + TAG_LEN;
            }
            Some(Engine::Null) | None => {}
        }
        if let Some(key) = opts.signer {
            // The signature covers the frame before it and the high 32 bits of the sequence number, placed
            // where the signature goes while signing.
            d[sig_at..sig_at + 4].copy_from_slice(&seq_hi);
            let sig = key.sign(&d[..sig_at + 4]);
            d[sig_at..sig_at + SIG_LEN].copy_from_slice(&sig.to_bytes());
        }
        Ok(())
    }
}

/// How a receive session checks frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxConfig {
    /// The EtherType of l2sec frames.
    pub ethertype: u16,
    /// Version 1: the key id frames must carry.
    pub key_id: u8,
    /// Version 1: the epoch frames must carry (group senders); `None`: frames must carry none.
    pub epoch: Option<u64>,
    /// Allow the ECB suites.
    pub insecure_ecb: bool,
    /// Allow the null suite (no encryption, no integrity check: any frame with a fresh sequence number is
    /// accepted).
    pub insecure_null: bool,
    /// Anti-replay window in frames (at least 64).
    pub replay_window: u32,
    /// Refuse frames without the ENC flag (ignored by keyless sessions, which cannot decrypt).
    pub require_encryption: bool,
    /// Refuse frames without a signature.
    pub require_signature: bool,
    /// Refuse frames without a security number.
    pub require_security_number: bool,
    /// Refuse frames without a timestamp.
    pub require_timestamp: bool,
    /// Largest accepted difference, in seconds, between a frame's timestamp and the caller's `now`.
    pub timestamp_tolerance: u32,
    /// The security numbers accepted (typically the current one and, around a change, the previous one); a
    /// frame carrying any other is dropped.
    pub security_numbers: [Option<u32>; 2],
}

impl Default for RxConfig {
    fn default() -> Self {
        RxConfig {
            ethertype: DEFAULT_ETHERTYPE,
            key_id: 0,
            epoch: None,
            insecure_ecb: false,
            insecure_null: false,
            replay_window: 1024,
            require_encryption: true,
            require_signature: false,
            require_security_number: false,
            require_timestamp: false,
            timestamp_tolerance: 30,
            security_numbers: [None, None],
        }
    }
}

/// What [`RxSession::open`] found in a frame that it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    pub version: Version,
    pub dst: Address,
    pub src: Address,
    /// The original EtherType, now in the frame again.
    pub ethertype: u16,
    /// The full (64-bit) sequence number.
    pub seq: u64,
    pub key_id: u8,
    /// Version 1 group frames: the sender's epoch.
    pub epoch: Option<u64>,
    pub signed: bool,
    pub encrypted: bool,
    pub security_number: Option<u32>,
    pub timestamp: Option<u32>,
}

/// The receiving side of a session with one peer (or of one group sender): cipher state built once, the
/// replay window, and a scratch buffer for what a signature covers.
pub struct RxSession {
    cfg: RxConfig,
    version: Version,
    suite: Option<Suite>,
    engine: Option<Engine>,
    /// `None` for a candidate ([`RxSession::candidate`]) until a frame authenticated.
    window: Option<ReplayWindow>,
    /// Version 1, signed frames: a copy of the bytes the signature covers (the frame before the signature and the
    /// high sequence bits), taken before the AEAD decrypts in place and checked after the tag. Reused: it grows to
    /// the largest signed frame once.
    scratch: Vec<u8>,
}

impl core::fmt::Debug for RxSession {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RxSession")
            .field("version", &self.version)
            .field("suite", &self.suite)
            .field("cfg", &self.cfg)
            .field("top_seq", &self.top_seq())
            .finish_non_exhaustive()
    }
}

/// A frame located and its header parsed, before any cryptographic check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peeked {
    pub dst: Address,
    pub src: Address,
    pub header: Repr,
    /// Length of the clear header.
    pub header_len: usize,
}

/// Reads the addresses and the clear header of an l2sec frame with EtherType `ethertype`, so that the caller
/// can pick the session (source MAC, group or unicast destination, key id) and the sender's verifying key.
pub fn peek(frame: &[u8], ethertype: u16) -> Result<Peeked, Drop> {
    let eth = ethernet::Packet::new_checked(frame).map_err(|_| Drop::Malformed)?;
    if eth.ethertype() != ethertype {
        return Err(Drop::NotL2sec);
    }
    let h = &frame[HDR_AT..];
    let Some(&first) = h.first() else {
        return Err(Drop::Malformed);
    };
    if Version::from_number(first >> 5).is_none() {
        return Err(Drop::UnknownVersion);
    }
    let hv = Header::new_checked(h).map_err(|_| Drop::Malformed)?;
    let header = Repr::parse(&hv).map_err(|_| Drop::Malformed)?;
    Ok(Peeked {
        dst: eth.dst_addr(),
        src: eth.src_addr(),
        header,
        header_len: hv.header_len(),
    })
}

impl RxSession {
    /// A keyed session with `keys` (whose suite fixes the version).
    pub fn new(keys: &SessionKeys, cfg: RxConfig) -> Result<Self, ConfigError> {
        let mut s = Self::candidate(keys, cfg)?;
        s.window = Some(ReplayWindow::new(cfg.replay_window, true));
        Ok(s)
    }

    /// A keyed session that has no replay window yet: it gets one (empty, then updated with the frame's number)
    /// only when a frame authenticated. For a sender not heard yet (or a new epoch of one): a frame that does not
    /// authenticate leaves nothing behind but the cipher state, which the caller drops.
    pub fn candidate(keys: &SessionKeys, cfg: RxConfig) -> Result<Self, ConfigError> {
        let engine = Engine::new(keys, cfg.insecure_ecb, cfg.insecure_null)?;
        Ok(RxSession {
            version: keys.suite().version(),
            suite: Some(keys.suite()),
            engine: Some(engine),
            window: None,
            scratch: Vec::new(),
            cfg,
        })
    }

    /// A session without keys: only signed, unencrypted frames are accepted.
    pub fn keyless(version: Version, cfg: RxConfig) -> Self {
        RxSession {
            version,
            suite: None,
            engine: None,
            window: Some(ReplayWindow::new(cfg.replay_window, true)),
            scratch: Vec::new(),
            cfg,
        }
    }

    pub fn version(&self) -> Version {
        self.version
    }
    pub fn suite(&self) -> Option<Suite> {
        self.suite
    }
    pub fn config(&self) -> &RxConfig {
        &self.cfg
    }
    /// Replaces the accepted security numbers (when the network's number changes on its schedule).
    pub fn set_security_numbers(&mut self, accepted: [Option<u32>; 2]) {
        self.cfg.security_numbers = accepted;
    }
    /// The highest sequence number accepted so far (0 if none).
    pub fn top_seq(&self) -> u64 {
        self.window.as_ref().map_or(0, |w| w.top())
    }

    /// The replay window exists (a candidate gets it with its first authentic frame).
    pub fn has_window(&self) -> bool {
        self.window.is_some()
    }

    /// Checks and decrypts the l2sec frame in `frame` in place, leaving the original Ethernet frame. `now` is the
    /// caller's clock in seconds (compared with a timestamp when the frame has one); `peer_key` the sender's
    /// verifying key (looked up by source MAC), needed for signed frames. On error the frame is not to be used.
    ///
    /// Order of the checks, cheapest first: header, version, key id and epoch, policy, lengths; the replay window
    /// (before any cryptography); the HMAC or AEAD tag (decrypting); then, for signed frames, the signature
    /// (version 1: over the copy of the ciphertext taken before decryption; version 0 and keyless sessions, where
    /// the signature is the only check, first); then security number, timestamp and padding. The window is
    /// updated only when everything passed.
    pub fn open(
        &mut self,
        frame: &mut PacketBuf,
        now: u32,
        peer_key: Option<&VerifyingKey>,
    ) -> Result<Opened, Drop> {
        let p = peek(frame.data(), self.cfg.ethertype)?;
        let hdr = p.header;
        if hdr.version != self.version {
            return Err(Drop::WrongVersion);
        }
        if hdr.reserved {
            return Err(Drop::Malformed);
        }
        if hdr.version == Version::V1 {
            if hdr.key_id != self.cfg.key_id {
                return Err(Drop::UnknownKeyId);
            }
            match (hdr.epoch, self.cfg.epoch) {
                (None, None) => {}
                (Some(a), Some(b)) if a == b => {}
                (None, Some(_)) => return Err(Drop::Policy),
                _ => return Err(Drop::UnknownKeyId),
            }
        }
        if self.engine.is_none() && (hdr.encrypted || !hdr.signed) {
            return Err(Drop::NoKey);
        }
        // The null suite has nothing to decrypt with: an encrypted frame is not its peer's. Encryption cannot be
        // required of it.
        let null = matches!(self.engine, Some(Engine::Null));
        if null && hdr.encrypted {
            return Err(Drop::Policy);
        }
        if (self.cfg.require_encryption && self.engine.is_some() && !null && !hdr.encrypted)
            || (self.cfg.require_signature && !hdr.signed)
            || (self.cfg.require_security_number && hdr.security_number.is_none())
            || (self.cfg.require_timestamp && hdr.timestamp.is_none())
        {
            return Err(Drop::Policy);
        }
        let peer_key = match (hdr.signed, peer_key) {
            (true, None) => return Err(Drop::NoPeerKey),
            (true, Some(k)) => Some(k),
            (false, _) => None,
        };
        let icv = icv_len(self.version, self.suite, hdr.signed);
        let s = HDR_AT + p.header_len;
        let len = frame.len();
        if len < s + SECTION_PREFIX + icv {
            return Err(Drop::Malformed);
        }
        let body_end = len - icv;
        let block = match (self.suite, hdr.encrypted) {
            (Some(su), true) => su.block_len(),
            _ => 1,
        };
        let partial = (body_end - s) % block; // (no is_multiple_of: rust-version is 1.80)
        if partial != 0 {
            return Err(Drop::Malformed);
        }
        let seq = match &self.window {
            Some(w) => {
                let seq = w.check(hdr.seq).map_err(replay_drop)?;
                // With 64-bit inference a number left of the window reads as one from the next 2^32 block. No
                // sender jumps 2^31 ahead, so call it what it most likely is (it could not authenticate anyway).
                let top = w.top();
                if top != 0 && seq > top && seq - top > 1 << 31 {
                    return Err(Drop::TooOld);
                }
                seq
            }
            // A candidate: an empty window infers the high bits as 0 (checked again when the window is made).
            None if hdr.seq == 0 => return Err(Drop::InvalidSequence),
            None => u64::from(hdr.seq),
        };
        let seq_hi = ((seq >> 32) as u32).to_be_bytes();
        let d = frame.data_mut();

        // The signature: checked now where it is the only check (version 0, keyless sessions); after the cheaper
        // AEAD tag in version 1, over a copy of what it covers (the AEAD decrypts the section in place).
        let mut deferred = None;
        if let Some(key) = peer_key {
            let sig_at = len - SIG_LEN;
            let mut sig = [0u8; SIG_LEN];
            sig.copy_from_slice(&d[sig_at..]);
            let sig = Signature::from_bytes(&sig);
            if matches!(self.engine, Some(Engine::Aead { .. })) {
                self.scratch.clear();
                self.scratch.extend_from_slice(&d[..sig_at]);
                self.scratch.extend_from_slice(&seq_hi);
                deferred = Some((key, sig));
            } else {
                d[sig_at..sig_at + 4].copy_from_slice(&seq_hi);
                key.verify_strict(&d[..sig_at + 4], &sig)
                    .map_err(|_| Drop::BadSignature)?;
            }
        }
        match &self.engine {
            Some(Engine::Block {
                cipher,
                mac,
                ecb,
                block,
                bivn,
            }) => {
                if !hdr.signed {
                    let (msg, tag) = d.split_at(body_end);
                    mac.verify(&[msg, &seq_hi], tag)
                        .map_err(|_| Drop::AuthFailed)?;
                }
                if hdr.encrypted {
                    let iv = Engine::iv(&**cipher, bivn, *block, seq);
                    block_decrypt(&**cipher, *ecb, &iv[..*block], &mut d[s..body_end]);
                }
            }
            Some(Engine::Aead { aead, salt }) => {
                let nonce = Engine::nonce(salt, seq);
                let (front, tail) = d.split_at_mut(body_end);
                let tag = &tail[..TAG_LEN];
                let r = if hdr.encrypted {
                    let (aad, section) = front.split_at_mut(s);
                    aead.open(&nonce, aad, section, tag)
                } else {
                    aead.open(&nonce, front, &mut [], tag)
                };
                r.map_err(|_| Drop::AuthFailed)?;
            }
            Some(Engine::Null) | None => {}
        }
        if let Some((key, sig)) = deferred {
            key.verify_strict(&self.scratch, &sig)
                .map_err(|_| Drop::BadSignature)?;
        }
        if let Some(sn) = hdr.security_number {
            if !self.cfg.security_numbers.contains(&Some(sn)) {
                return Err(Drop::WrongSecurityNumber);
            }
        }
        if let Some(ts) = hdr.timestamp {
            if (now.wrapping_sub(ts) as i32).unsigned_abs() > self.cfg.timestamp_tolerance {
                return Err(Drop::StaleTimestamp);
            }
        }
        let section = &d[s..body_end];
        let pad = section[2] as usize;
        if pad >= block || SECTION_PREFIX + pad > section.len() {
            return Err(Drop::BadPadding);
        }
        let pad_start = section.len() - pad;
        if section[pad_start..]
            .iter()
            .enumerate()
            .any(|(i, &b)| b as usize != i + 1)
        {
            return Err(Drop::BadPadding);
        }
        let ethertype = u16::from_be_bytes([section[0], section[1]]);
        let l3_len = section.len() - SECTION_PREFIX - pad;
        match &mut self.window {
            Some(w) => w.update(seq).map_err(replay_drop)?,
            None => {
                let mut w = ReplayWindow::new(self.cfg.replay_window, true);
                w.update(seq).map_err(replay_drop)?;
                self.window = Some(w);
            }
        }

        // [MACs][l2sec type][header][type][pad len][L3]... -> [MACs][type][L3]
        ethernet::Packet::new_unchecked(&mut *d).set_ethertype(ethertype);
        frame
            .remove_gap(ethernet::HEADER_LEN, p.header_len + SECTION_PREFIX)
            .ok_or(Drop::Malformed)?;
        frame.truncate(ethernet::HEADER_LEN + l3_len);
        Ok(Opened {
            version: hdr.version,
            dst: p.dst,
            src: p.src,
            ethertype,
            seq,
            key_id: hdr.key_id,
            epoch: hdr.epoch,
            signed: hdr.signed,
            encrypted: hdr.encrypted,
            security_number: hdr.security_number,
            timestamp: hdr.timestamp,
        })
    }
}

fn replay_drop(e: ReplayError) -> Drop {
    match e {
        ReplayError::Replayed => Drop::Replayed,
        ReplayError::TooOld => Drop::TooOld,
        ReplayError::Invalid => Drop::InvalidSequence,
    }
}
