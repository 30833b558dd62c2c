//! The Encrypted payload (SK, RFC 7296 section 3.14) and the Encrypted Fragment payload (SKF, RFC 7383 section
//! 2.5): seal and open a whole IKE message in place, on its raw bytes (the IKE header is 28 bytes; the caller
//! says where the SK or SKF payload's generic header starts and which of the two it is).
//!
//! Layout after the payload's header (4 bytes for SK; 8 for SKF, whose Fragment Number and Total Fragments follow
//! the generic header): IV, then the encrypted inner payloads, padding and the Pad Length byte, then the ICV.
//!
//! - AES-CBC (and 3DES) with HMAC integrity: a random IV of one block, drawn from the RNG passed in (RFC 7296
//!   requires unpredictable IVs); the ICV is the truncated HMAC over the whole message from the first byte of the
//!   IKE header through the last byte of the ciphertext (the IV included).
//! - AES-GCM-16 and ChaCha20-Poly1305 (RFC 5282, RFC 7634): an 8-byte explicit IV; the nonce is the 4-byte salt
//!   (the last 4 bytes of SK_e*) followed by the IV; the AAD is the message from the IKE header through the
//!   payload's header (for SKF its fragment fields included); a 16-byte ICV. The explicit IV is a counter kept by
//!   the [`SkKey`] (0, 1, 2, ...): never repeated under one key, whatever the message ids (a retransmission with
//!   new content, or a reply to the same message id, gets a new IV). An [`SkKey`] is not `Clone`; whoever builds
//!   one per message from the same key bytes carries the counter over ([`SkKey::next_iv`],
//!   [`SkKey::resume_at`]).
//!
//! Opening checks first what can be checked without the key (the header's and the payload's length fields
//! against the datagram, the lengths the cipher needs), then the ICV before anything is decrypted (CBC: HMAC
//! verified, then decrypted; AEAD: the AEAD's open), then the padding. An authentication failure carries no
//! detail ([`OpenError::Auth`]).

use core::fmt;
use core::ops::Range;

use netveil_crypto::rand::Rng;
use netveil_crypto::{new_aead, new_cbc, new_mac, Aead, CbcCipher, KeyError, Mac};

use crate::keys::{IkeKeys, IkeSuite, Role};
use crate::proposal::Encr;

/// Length of the IKE header (RFC 7296 section 3.1).
pub const IKE_HEADER_LEN: usize = 28;
/// Length of the AEADs' explicit IV (RFC 5282 section 3, RFC 7634 section 2).
pub const AEAD_IV_LEN: usize = 8;
/// Length of the AEADs' salt at the end of SK_e*.
pub const SALT_LEN: usize = 4;

/// Which payload carries the encrypted data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encrypted {
    /// The Encrypted payload (46): a 4-byte generic header.
    Sk,
    /// The Encrypted Fragment payload (53, RFC 7383): the generic header, Fragment Number and Total Fragments.
    Skf,
}

impl Encrypted {
    /// Bytes of the payload's header before the IV.
    pub fn header_len(self) -> usize {
        match self {
            Encrypted::Sk => 4,
            Encrypted::Skf => 8,
        }
    }
}

/// Why a message could not be opened. Only the unauthenticated length checks and, after authentication, the
/// padding say what was wrong; a failed ICV says nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("malformed encrypted message: {0}")]
    Malformed(&'static str),
    #[error("authentication failed")]
    Auth,
}

/// Why a message could not be sealed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("the encrypted payload's header does not fit at the given offset")]
    BadOffset,
    #[error("the sealed message would exceed the payload's 16-bit length")]
    TooLong,
    #[error("the explicit IVs of this key are used up: rekey the IKE SA")]
    IvsExhausted,
    /// [`SkKey::reseal`]: not the message sealed before (another plaintext or key, or an IV or ICV of another
    /// length).
    #[error("the message sealed again is not the one sealed before")]
    NotTheSame,
}

enum Cipher {
    Cbc {
        cipher: Box<dyn CbcCipher>,
        mac: Box<dyn Mac>,
    },
    Aead {
        aead: Box<dyn Aead>,
        salt: [u8; SALT_LEN],
    },
}

/// One direction's keys of an IKE SA, ready to seal or open messages. Not `Clone` (see the module's
/// documentation on explicit IVs); `Debug` names the cipher only.
pub struct SkKey {
    encr: Encr,
    cipher: Cipher,
    /// The next AEAD explicit IV.
    next_iv: u64,
}

impl fmt::Debug for SkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SkKey")
            .field("encr", &self.encr)
            .finish_non_exhaustive()
    }
}

impl SkKey {
    /// A key from an encryption key (for the AEADs: key and salt, as SK_e* holds them) and an integrity key
    /// (ignored, and expected empty, with an AEAD).
    pub fn new(suite: IkeSuite, encr_key: &[u8], integ_key: &[u8]) -> Result<SkKey, KeyError> {
        let encr = suite.encr();
        if encr_key.len() != encr.keymat_len() {
            return Err(KeyError::BadLength {
                alg: "IKE encryption key",
                expected: encr.keymat_len(),
                got: encr_key.len(),
            });
        }
        let cipher = match (encr.aead(), encr.cbc(), suite.integ()) {
            (Some(alg), _, None) => {
                let (key, salt) = encr_key.split_at(encr_key.len() - SALT_LEN);
                Cipher::Aead {
                    aead: new_aead(alg, key)?,
                    salt: salt.try_into().expect("4 bytes"),
                }
            }
            (None, Some(alg), Some(integ)) => Cipher::Cbc {
                cipher: new_cbc(alg, encr_key)?,
                mac: new_mac(integ.hash(), integ_key, integ.icv_len())?,
            },
            _ => {
                return Err(KeyError::Unusable(
                    "the suite's cipher and integrity do not fit",
                ))
            }
        };
        Ok(SkKey {
            encr,
            cipher,
            next_iv: 0,
        })
    }

    /// The key `role` seals its messages with: the initiator's SK_ei/SK_ai, the responder's SK_er/SK_ar.
    pub fn outbound(keys: &IkeKeys, role: Role) -> Result<SkKey, KeyError> {
        match role {
            Role::Initiator => {
                SkKey::new(keys.suite(), keys.sk_ei().expose(), keys.sk_ai().expose())
            }
            Role::Responder => {
                SkKey::new(keys.suite(), keys.sk_er().expose(), keys.sk_ar().expose())
            }
        }
    }

    /// The key `role` opens its peer's messages with.
    pub fn inbound(keys: &IkeKeys, role: Role) -> Result<SkKey, KeyError> {
        match role {
            Role::Initiator => SkKey::outbound(keys, Role::Responder),
            Role::Responder => SkKey::outbound(keys, Role::Initiator),
        }
    }

    pub fn encr(&self) -> Encr {
        self.encr
    }

    /// The key continuing a key of the same bytes whose next AEAD explicit IV was `next_iv` (an IKE SA keeps
    /// the counter, not the cipher contexts, and builds the key per message). Ignored with CBC.
    pub fn resume_at(mut self, next_iv: u64) -> SkKey {
        self.next_iv = next_iv;
        self
    }

    /// The next AEAD explicit IV this key seals with (see [`SkKey::resume_at`]).
    pub fn next_iv(&self) -> u64 {
        self.next_iv
    }

    /// IV length: one block for CBC, 8 for the AEADs.
    pub fn iv_len(&self) -> usize {
        match &self.cipher {
            Cipher::Cbc { cipher, .. } => cipher.block_len(),
            Cipher::Aead { .. } => AEAD_IV_LEN,
        }
    }

    /// ICV length: the truncated HMAC's, or the AEAD's tag.
    pub fn icv_len(&self) -> usize {
        match &self.cipher {
            Cipher::Cbc { mac, .. } => mac.tag_len(),
            Cipher::Aead { aead, .. } => aead.tag_len(),
        }
    }

    /// Bytes the ciphertext must be a multiple of (1 for the AEADs).
    fn block_len(&self) -> usize {
        match &self.cipher {
            Cipher::Cbc { cipher, .. } => cipher.block_len(),
            Cipher::Aead { .. } => 1,
        }
    }

    /// Seals `msg` in place. On entry `msg` holds the IKE header, any payloads before the encrypted one, the
    /// SK/SKF payload's header at `at` (its Next Payload, and for SKF the fragment fields, set by the caller), and
    /// then the plaintext inner payloads up to the end. On return the IV is inserted, the plaintext padded (the
    /// fewest bytes the cipher needs, zeros) and encrypted, the ICV appended, and the payload's and the IKE
    /// header's length fields set. `rng` gives the CBC IVs (the AEADs use the key's counter).
    pub fn seal(
        &mut self,
        rng: &mut dyn Rng,
        msg: &mut Vec<u8>,
        at: usize,
        kind: Encrypted,
    ) -> Result<(), SealError> {
        let (hdr_end, plain) = self.layout(msg, at, kind)?;
        let mut iv = [0u8; 16];
        let iv = &mut iv[..self.iv_len()];
        match &self.cipher {
            Cipher::Cbc { .. } => rng.fill(iv),
            Cipher::Aead { .. } => {
                if self.next_iv == u64::MAX {
                    return Err(SealError::IvsExhausted);
                }
                iv.copy_from_slice(&self.next_iv.to_be_bytes());
                self.next_iv += 1;
            }
        }
        self.seal_with(iv, msg, hdr_end, at, plain);
        Ok(())
    }

    /// Seals `msg` again as [`SkKey::seal`] sealed it before, with the IV `iv` it took then (from that message's
    /// bytes): the same key, IV and plaintext give the same bytes. Only if the result's ICV is `icv` (that
    /// message's) is it `Ok`; any other plaintext gives another ICV and an error, and the caller drops `msg`: an
    /// IV is never sent with a second plaintext. For a responder's cached response (RFC 7296 2.1) kept in fewer
    /// bytes than its datagram (see `machine::sa::CachedResponse`).
    pub fn reseal(
        &self,
        iv: &[u8],
        icv: &[u8],
        msg: &mut Vec<u8>,
        at: usize,
        kind: Encrypted,
    ) -> Result<(), SealError> {
        let (hdr_end, plain) = self.layout(msg, at, kind)?;
        if iv.len() != self.iv_len() || icv.len() != self.icv_len() {
            return Err(SealError::NotTheSame);
        }
        self.seal_with(iv, msg, hdr_end, at, plain);
        if !bool::from(subtle::ConstantTimeEq::ct_eq(
            &msg[msg.len() - icv.len()..],
            icv,
        )) {
            msg.clear();
            return Err(SealError::NotTheSame);
        }
        Ok(())
    }

    /// Where the plaintext of `msg` starts (after the SK/SKF payload's header at `at`) and its length; checks
    /// that the sealed message fits the payload's length field.
    fn layout(&self, msg: &[u8], at: usize, kind: Encrypted) -> Result<(usize, usize), SealError> {
        let hdr_end = match at.checked_add(kind.header_len()) {
            Some(end) if at >= IKE_HEADER_LEN && end <= msg.len() => end,
            _ => return Err(SealError::BadOffset),
        };
        let (iv_len, icv_len, block) = (self.iv_len(), self.icv_len(), self.block_len());
        let plain = msg.len() - hdr_end;
        let pad = (block - (plain + 1) % block) % block;
        let total = hdr_end + iv_len + plain + pad + 1 + icv_len;
        if total - at > usize::from(u16::MAX) {
            return Err(SealError::TooLong);
        }
        Ok((hdr_end, plain))
    }

    /// Both seals' common part: `msg` as [`SkKey::seal`] takes it, its `plain` bytes of plaintext from `hdr_end`
    /// on, sealed with `iv` (whose length, and the result's, were checked).
    fn seal_with(&self, iv: &[u8], msg: &mut Vec<u8>, hdr_end: usize, at: usize, plain: usize) {
        let (iv_len, icv_len, block) = (self.iv_len(), self.icv_len(), self.block_len());
        let pad = (block - (plain + 1) % block) % block;
        let ct_len = plain + pad + 1;
        let total = hdr_end + iv_len + ct_len + icv_len;
        msg.splice(hdr_end..hdr_end, iv.iter().copied());
        msg.resize(msg.len() + pad, 0);
        msg.push(pad as u8);
        msg.resize(total, 0);
        msg[at + 2..at + 4].copy_from_slice(&((total - at) as u16).to_be_bytes());
        msg[24..28].copy_from_slice(&(total as u32).to_be_bytes());
        let ct_at = hdr_end + iv_len;
        match &self.cipher {
            Cipher::Cbc { cipher, mac } => {
                let (head, rest) = msg.split_at_mut(ct_at);
                cipher.encrypt(&head[hdr_end..], &mut rest[..ct_len]);
                let (signed, icv) = msg.split_at_mut(total - icv_len);
                mac.compute(&[signed], icv);
            }
            Cipher::Aead { aead, salt } => {
                let nonce = aead_nonce(salt, &msg[hdr_end..ct_at]);
                let (aad, rest) = msg.split_at_mut(hdr_end);
                let (ct, icv) = rest[iv_len..].split_at_mut(ct_len);
                aead.seal(&nonce, aad, ct, icv);
            }
        }
    }

    /// Opens `msg` (the whole IKE message as received, from the IKE header on) in place: checks the lengths,
    /// the ICV, decrypts and checks the padding. Returns where the plaintext inner payloads lie in `msg`. On
    /// an authentication failure nothing is decrypted.
    pub fn open(
        &self,
        msg: &mut [u8],
        at: usize,
        kind: Encrypted,
    ) -> Result<Range<usize>, OpenError> {
        let malformed = |why| Err(OpenError::Malformed(why));
        let (iv_len, icv_len, block) = (self.iv_len(), self.icv_len(), self.block_len());
        let hdr_end = at.saturating_add(kind.header_len());
        if at < IKE_HEADER_LEN || msg.len().saturating_sub(iv_len + icv_len) < hdr_end {
            return malformed("too short for the encrypted payload");
        }
        let len = msg.len();
        if u32::from_be_bytes(msg[24..28].try_into().expect("4 bytes")) as usize != len {
            return malformed("IKE header length differs from the message's");
        }
        // The SK payload's own length field: an IKE payload header, not IP/UDP.
        let sk_len = u16::from_be_bytes([msg[at + 2], msg[at + 3]]); // check-ip-offsets: allow (IKE)
        if usize::from(sk_len) != len - at {
            return malformed("the encrypted payload is not the last one");
        }
        if kind == Encrypted::Skf {
            let number = u16::from_be_bytes([msg[at + 4], msg[at + 5]]);
            let total = u16::from_be_bytes([msg[at + 6], msg[at + 7]]);
            if number == 0 || number > total {
                return malformed("fragment number out of range");
            }
        }
        let ct_at = hdr_end + iv_len;
        let ct_len = len - icv_len - ct_at;
        if ct_len == 0 || !ct_len.is_multiple_of(block) {
            return malformed("ciphertext length does not fit the cipher");
        }
        match &self.cipher {
            Cipher::Cbc { cipher, mac } => {
                let (signed, icv) = msg.split_at(len - icv_len);
                mac.verify(&[signed], icv).map_err(|_| OpenError::Auth)?;
                let (head, rest) = msg.split_at_mut(ct_at);
                cipher.decrypt(&head[hdr_end..], &mut rest[..ct_len]);
            }
            Cipher::Aead { aead, salt } => {
                let nonce = aead_nonce(salt, &msg[hdr_end..ct_at]);
                let (aad, rest) = msg.split_at_mut(hdr_end);
                let (ct, icv) = rest[iv_len..].split_at_mut(ct_len);
                aead.open(&nonce, aad, ct, icv)
                    .map_err(|_| OpenError::Auth)?;
            }
        }
        let pad = usize::from(msg[ct_at + ct_len - 1]);
        if pad + 1 > ct_len {
            return malformed("pad length exceeds the plaintext");
        }
        Ok(ct_at..ct_at + ct_len - 1 - pad)
    }
}

fn aead_nonce(salt: &[u8; SALT_LEN], iv: &[u8]) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[..SALT_LEN].copy_from_slice(salt);
    n[SALT_LEN..].copy_from_slice(iv);
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::skeyseed;
    use crate::proposal::{Integ, Prf};
    use netveil_crypto::rand::SeededRng;

    fn keys(encr: Encr, integ: Option<Integ>) -> IkeKeys {
        let suite = IkeSuite::new(encr, Prf::HmacSha256, integ).unwrap();
        let seed = skeyseed(Prf::HmacSha256, &[1; 16], &[2; 16], &[3; 32]);
        IkeKeys::derive(suite, &seed, &[1; 16], &[2; 16], &[4; 8], &[5; 8]).unwrap()
    }

    /// An IKE header (28 bytes), an unencrypted 8-byte payload before the SK payload, and the plaintext.
    fn message(kind: Encrypted, plain: &[u8]) -> (Vec<u8>, usize) {
        let mut m = vec![0u8; IKE_HEADER_LEN];
        m[16] = 41;
        m.extend_from_slice(&[46, 0, 0, 8, 0xaa, 0xbb, 0xcc, 0xdd]);
        let at = m.len();
        m.extend_from_slice(&[41, 0, 0, 0]);
        if kind == Encrypted::Skf {
            m.extend_from_slice(&[0, 2, 0, 3]);
        }
        m.extend_from_slice(plain);
        (m, at)
    }

    const SUITES: [(Encr, Option<Integ>); 6] = [
        (Encr::AesCbc128, Some(Integ::HmacSha1_96)),
        (Encr::AesCbc256, Some(Integ::HmacSha512_256)),
        (Encr::TripleDes, Some(Integ::HmacSha384_192)),
        (Encr::AesGcm16_128, None),
        (Encr::AesGcm16_256, None),
        (Encr::ChaCha20Poly1305, None),
    ];

    #[test]
    fn seal_then_open_every_suite_and_every_bit_matters() {
        let mut rng = SeededRng::new(7);
        for (encr, integ) in SUITES {
            let k = keys(encr, integ);
            let mut tx = SkKey::outbound(&k, Role::Initiator).unwrap();
            let rx = SkKey::inbound(&k, Role::Responder).unwrap();
            let wrong = SkKey::inbound(&k, Role::Initiator).unwrap();
            for kind in [Encrypted::Sk, Encrypted::Skf] {
                for n in [0usize, 1, 15, 16, 17, 100] {
                    let plain: Vec<u8> = (0..n as u8).collect();
                    let (mut m, at) = message(kind, &plain);
                    let clear_prefix = m[..at + 2].to_vec();
                    tx.seal(&mut rng, &mut m, at, kind).unwrap();
                    assert_eq!(&m[28..at + 2], &clear_prefix[28..]);
                    assert_eq!(
                        u32::from_be_bytes(m[24..28].try_into().unwrap()) as usize,
                        m.len()
                    );
                    let ct = &m[at + kind.header_len() + tx.iv_len()..];
                    if n >= 4 {
                        assert!(
                            !ct.windows(4).any(|w| w == &plain[..4]),
                            "{encr:?}: plaintext visible"
                        );
                    }
                    let sealed = m.clone();
                    let r = rx.open(&mut m, at, kind).unwrap();
                    assert_eq!(&m[r], &plain[..], "{encr:?} {kind:?} {n}");
                    assert_eq!(
                        wrong.open(&mut sealed.clone(), at, kind),
                        Err(OpenError::Auth)
                    );
                    // Every bit from the IKE header to the ICV is covered (a flip either fails the length
                    // checks or the ICV).
                    for i in 0..sealed.len() {
                        let mut bad = sealed.clone();
                        bad[i] ^= 0x01;
                        let before = bad.clone();
                        let got = rx.open(&mut bad, at, kind);
                        assert!(
                            got.is_err(),
                            "{encr:?} {kind:?} n={n}: byte {i} not covered"
                        );
                        if got == Err(OpenError::Auth) && integ.is_some() {
                            assert_eq!(bad, before, "CBC decrypted before the ICV verified");
                        }
                    }
                }
            }
        }
    }

    /// A message sealed again with its IV and ICV is the same bytes, in every suite; another plaintext (one bit),
    /// another key, or an IV of another length gives nothing: the bytes sealed with the reused IV are cleared.
    #[test]
    fn reseal_gives_the_same_bytes_or_nothing() {
        let mut rng = SeededRng::new(9);
        for (encr, integ) in SUITES {
            let k = keys(encr, integ);
            let mut tx = SkKey::outbound(&k, Role::Responder).unwrap();
            let other = SkKey::outbound(&k, Role::Initiator).unwrap();
            let plain: Vec<u8> = (0..37).collect();
            let (mut m, at) = message(Encrypted::Sk, &plain);
            tx.seal(&mut rng, &mut m, at, Encrypted::Sk).unwrap();
            let ivr = at + 4..at + 4 + tx.iv_len();
            let (iv, icv) = (&m[ivr], &m[m.len() - tx.icv_len()..]);
            let (mut again, _) = message(Encrypted::Sk, &plain);
            tx.reseal(iv, icv, &mut again, at, Encrypted::Sk).unwrap();
            assert_eq!(again, m, "{encr:?}");
            let mut flipped = plain.clone();
            flipped[20] ^= 1;
            let (mut bad, _) = message(Encrypted::Sk, &flipped);
            let got = tx.reseal(iv, icv, &mut bad, at, Encrypted::Sk);
            assert_eq!(
                (got, bad.len()),
                (Err(SealError::NotTheSame), 0),
                "{encr:?}"
            );
            let (mut bad, _) = message(Encrypted::Sk, &plain);
            let got = other.reseal(iv, icv, &mut bad, at, Encrypted::Sk);
            assert_eq!(
                (got, bad.len()),
                (Err(SealError::NotTheSame), 0),
                "{encr:?}"
            );
            let (mut bad, _) = message(Encrypted::Sk, &plain);
            let got = tx.reseal(&iv[1..], icv, &mut bad, at, Encrypted::Sk);
            assert_eq!(got, Err(SealError::NotTheSame), "{encr:?}");
        }
    }

    #[test]
    fn aead_ivs_never_repeat_and_cbc_ivs_come_from_the_rng() {
        let mut rng = SeededRng::new(1);
        let k = keys(Encr::AesGcm16_128, None);
        let mut tx = SkKey::outbound(&k, Role::Responder).unwrap();
        let mut ivs = Vec::new();
        for _ in 0..3 {
            let (mut m, at) = message(Encrypted::Sk, b"same message id, same content");
            tx.seal(&mut rng, &mut m, at, Encrypted::Sk).unwrap();
            ivs.push(m[at + 4..at + 12].to_vec());
        }
        assert_eq!(
            ivs,
            [
                [0, 0, 0, 0, 0, 0, 0, 0],
                [0, 0, 0, 0, 0, 0, 0, 1],
                [0, 0, 0, 0, 0, 0, 0, 2]
            ]
        );
        // A key built again from the same bytes goes on where the counter says, not at 0.
        assert_eq!(tx.next_iv(), 3);
        let mut again = SkKey::outbound(&k, Role::Responder)
            .unwrap()
            .resume_at(tx.next_iv());
        let (mut m, at) = message(Encrypted::Sk, b"same message id, same content");
        again.seal(&mut rng, &mut m, at, Encrypted::Sk).unwrap();
        assert_eq!(m[at + 4..at + 12], [0, 0, 0, 0, 0, 0, 0, 3]);
        let mut tx = SkKey::outbound(&k, Role::Responder)
            .unwrap()
            .resume_at(u64::MAX);
        let (mut m, at) = message(Encrypted::Sk, b"x");
        assert_eq!(
            tx.seal(&mut rng, &mut m, at, Encrypted::Sk),
            Err(SealError::IvsExhausted)
        );

        let k = keys(Encr::AesCbc128, Some(Integ::HmacSha256_128));
        let mut tx = SkKey::outbound(&k, Role::Initiator).unwrap();
        let mut a = SeededRng::new(9);
        let (mut m, at) = message(Encrypted::Sk, b"x");
        tx.seal(&mut a, &mut m, at, Encrypted::Sk).unwrap();
        let mut b = SeededRng::new(9);
        let want: [u8; 16] = netveil_crypto::rand::array(&mut b);
        assert_eq!(&m[at + 4..at + 20], &want);
    }

    #[test]
    fn lengths_are_checked_before_the_key() {
        let k = keys(Encr::AesCbc128, Some(Integ::HmacSha1_96));
        let mut tx = SkKey::outbound(&k, Role::Initiator).unwrap();
        let rx = SkKey::inbound(&k, Role::Responder).unwrap();
        let mut rng = SeededRng::new(3);
        let (mut m, at) = message(Encrypted::Sk, b"payloads");
        tx.seal(&mut rng, &mut m, at, Encrypted::Sk).unwrap();
        let malformed =
            |r: Result<Range<usize>, OpenError>| matches!(r, Err(OpenError::Malformed(_)));
        // Truncated (the header's length no longer matches), cut to nothing, the payload not last.
        assert!(malformed(rx.open(
            &mut m.clone()[..m.len() - 1],
            at,
            Encrypted::Sk
        )));
        assert!(malformed(rx.open(
            &mut m.clone()[..at + 3],
            at,
            Encrypted::Sk
        )));
        assert!(malformed(rx.open(&mut m.clone(), 20, Encrypted::Sk)));
        let mut extra = m.clone();
        extra.extend_from_slice(&[0; 16]);
        let l = extra.len() as u32;
        extra[24..28].copy_from_slice(&l.to_be_bytes());
        assert!(malformed(rx.open(&mut extra, at, Encrypted::Sk)));
        // A ciphertext that is not whole blocks, with consistent length fields.
        let mut odd = m.clone();
        odd.insert(at + 4 + 16, 0);
        let l = odd.len();
        odd[24..28].copy_from_slice(&(l as u32).to_be_bytes());
        odd[at + 2..at + 4].copy_from_slice(&((l - at) as u16).to_be_bytes());
        assert_eq!(
            rx.open(&mut odd, at, Encrypted::Sk),
            Err(OpenError::Malformed(
                "ciphertext length does not fit the cipher"
            ))
        );
        // SKF with fragment number 0.
        let (mut f, at) = message(Encrypted::Skf, b"frag");
        f[at + 5] = 0;
        tx.seal(&mut rng, &mut f, at, Encrypted::Skf).unwrap();
        assert_eq!(
            rx.open(&mut f, at, Encrypted::Skf),
            Err(OpenError::Malformed("fragment number out of range"))
        );
        assert_eq!(
            tx.seal(&mut rng, &mut vec![0; 30], 28, Encrypted::Sk),
            Err(SealError::BadOffset)
        );
        assert_eq!(
            tx.seal(&mut rng, &mut vec![0; 80_000], 28, Encrypted::Sk),
            Err(SealError::TooLong)
        );
    }

    /// Hostile input: arbitrary bytes at arbitrary offsets, and sealed messages with random edits, through
    /// `open` for every suite. Nothing panics; only the untouched message opens, to its plaintext.
    #[test]
    fn hostile_input_never_panics_and_edits_never_open() {
        let mut rng = SeededRng::new(11);
        let mut r = |n: usize| -> usize {
            let b: [u8; 8] = netveil_crypto::rand::array(&mut rng);
            (u64::from_le_bytes(b) % n as u64) as usize
        };
        let mut seal_rng = SeededRng::new(12);
        for (encr, integ) in SUITES {
            let k = keys(encr, integ);
            let mut tx = SkKey::outbound(&k, Role::Initiator).unwrap();
            let rx = SkKey::inbound(&k, Role::Responder).unwrap();
            for round in 0..400 {
                let kind = if round % 2 == 0 {
                    Encrypted::Sk
                } else {
                    Encrypted::Skf
                };
                // Arbitrary bytes, arbitrary offset (also past the end and near usize::MAX).
                let mut junk: Vec<u8> = (0..r(120)).map(|_| r(256) as u8).collect();
                let at = [r(140), usize::MAX - r(8)][r(2)];
                let _ = rx.open(&mut junk, at, kind);
                // A sealed message, edited.
                let plain: Vec<u8> = (0..r(64)).map(|_| r(256) as u8).collect();
                let (mut m, at) = message(kind, &plain);
                tx.seal(&mut seal_rng, &mut m, at, kind).unwrap();
                let orig = m.clone();
                match r(4) {
                    0 => m.truncate(r(m.len())),
                    1 => m.extend((0..1 + r(20)).map(|_| r(256) as u8)),
                    _ => {
                        for _ in 0..1 + r(3) {
                            let i = r(m.len());
                            m[i] ^= 1 + r(255) as u8;
                        }
                    }
                }
                let got = rx.open(&mut m, at, kind);
                if m == orig {
                    assert_eq!(&m[got.unwrap()], &plain[..]);
                } else {
                    assert!(got.is_err(), "{encr:?}: an edited message opened");
                }
            }
        }
    }

    #[test]
    fn debug_names_the_cipher_only() {
        let k = keys(Encr::AesGcm16_256, None);
        let tx = SkKey::outbound(&k, Role::Initiator).unwrap();
        assert_eq!(format!("{tx:?}"), "SkKey { encr: AesGcm16_256, .. }");
    }
}
