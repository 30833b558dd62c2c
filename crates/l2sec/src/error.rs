//! Why a frame was dropped ([`Drop`]) or could not be sealed ([`SealError`]), and why a session could not be
//! built ([`ConfigError`]); re-exported at the crate root.

netveil_sa::drop_reasons! {
    /// Why a received frame was dropped by what the frame itself shows ([`peek`](crate::peek),
    /// [`RxSession::open`](crate::RxSession::open)). A [`Node`](crate::Node) counts these and its own reasons as
    /// [`NodeDrop`](crate::NodeDrop). [`Drop::name`] gives stable names for counters.
    pub enum Drop {
        /// Not the l2sec EtherType: not a failure of l2sec, the caller may pass the frame on.
        NotL2sec => "not-l2sec",
        /// Too short, inconsistent lengths, or the reserved flag set.
        Malformed => "malformed",
        /// A version this implementation does not know (2..=7).
        UnknownVersion => "unknown-version",
        /// A known version other than the session's.
        WrongVersion => "wrong-version",
        /// Version 1: a key id (or a group epoch) other than the session's.
        UnknownKeyId => "unknown-key-id",
        /// The frame lacks what the receiver's configuration requires (encryption, signature, security number,
        /// timestamp; the epoch of a version-1 group frame).
        Policy => "policy",
        /// The session has no keys, and the frame is encrypted or not signed.
        NoKey => "no-key",
        /// The frame is signed and the caller gave no verifying key for its sender.
        NoPeerKey => "no-peer-key",
        /// The sequence number was already received.
        Replayed => "replayed",
        /// The sequence number is left of the replay window.
        TooOld => "too-old",
        /// The sequence number is 0 or its inferred high bits leave the 64-bit space.
        InvalidSequence => "invalid-sequence",
        /// The HMAC or AEAD tag did not verify.
        AuthFailed => "auth-failed",
        /// The signature did not verify.
        BadSignature => "bad-signature",
        /// The pad size or the padding bytes are wrong (after authentication: a sender bug).
        BadPadding => "bad-padding",
        /// The security number is not one the receiver accepts.
        WrongSecurityNumber => "wrong-security-number",
        /// The timestamp is further from `now` than the tolerance.
        StaleTimestamp => "stale-timestamp",
    }
}

/// Why a frame could not be sealed (the frame is left unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// Shorter than an Ethernet header.
    #[error("frame shorter than an Ethernet header")]
    Malformed,
    /// Not enough head- or tailroom (see [`TxSession::overhead`](crate::TxSession::overhead)).
    #[error("not enough head- or tailroom")]
    NoRoom,
    /// The sequence number space is used up: the session must be rekeyed.
    #[error("sequence number space exhausted")]
    SeqExhausted,
    /// A keyless session can only send signed, unencrypted frames.
    #[error("keyless session: frames must be signed and cannot be encrypted")]
    NoKey,
    /// The security number does not fit in 24 bits.
    #[error("security number above 24 bits")]
    SecurityNumberRange,
}

/// A session could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{what} must be {expected} bytes, got {got}")]
    KeyLength {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("ECB suites need the insecure_ecb switch")]
    EcbNotAllowed,
    #[error("the null suite (no encryption, no integrity) needs the insecure_null switch")]
    NullNotAllowed,
    #[error("key derivation context too long")]
    ContextTooLong,
    #[error("the group epoch must be at least 1")]
    ZeroEpoch,
    #[error("{0} is bound to two MAC addresses")]
    IpBoundTwice(std::net::Ipv4Addr),
    #[error(transparent)]
    Crypto(#[from] netveil_crypto::KeyError),
}
