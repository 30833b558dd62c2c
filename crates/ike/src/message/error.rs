//! What the codec caps (payloads, proposals, transforms, attributes, selectors) and how parsing or emitting fails.

/// Most payloads in one chain (the clear chain of a message, or the chain inside an SK payload).
pub const MAX_PAYLOADS: usize = 64;
/// Most proposals in one SA payload.
pub const MAX_PROPOSALS: usize = 64;
/// Most transforms in one proposal.
pub const MAX_TRANSFORMS: usize = 128;
/// Most attributes of one transform (RFC 7296 defines one, the key length).
pub const MAX_TRANSFORM_ATTRIBUTES: usize = 8;
/// Most selectors in one TS payload.
pub const MAX_TRAFFIC_SELECTORS: usize = 64;
/// Most attributes in one CP payload.
pub const MAX_CP_ATTRIBUTES: usize = 64;

/// What is wrong with a message (on parse) or a representation (on emit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Fewer bytes than the named structure needs.
    #[error("truncated {what}")]
    Truncated { what: &'static str },
    /// A length field below its structure's minimum, or one that disagrees with what it frames.
    #[error("bad length of {what}")]
    BadLength { what: &'static str },
    /// The header's length is not the datagram's.
    #[error("the IKE header says {header} bytes, the datagram has {datagram}")]
    LengthMismatch { header: u32, datagram: usize },
    /// A major version other than 2 (a higher one is answered with INVALID_MAJOR_VERSION, RFC 7296 2.5).
    #[error("IKE version {major}.{minor} (this speaks 2)")]
    BadVersion { major: u8, minor: u8 },
    /// A payload of an unknown type with the critical bit set (answered with UNSUPPORTED_CRITICAL_PAYLOAD
    /// carrying the type, RFC 7296 2.5).
    #[error("unsupported critical payload of type {payload_type}")]
    UnsupportedCriticalPayload { payload_type: u8 },
    /// More of something than the named cap allows.
    #[error("more {what} than {cap}")]
    TooMany { what: &'static str, cap: usize },
    /// A field holds a value the RFC forbids.
    #[error("bad value: {what}")]
    BadValue { what: &'static str },
    /// Bytes after the last payload of a chain.
    #[error("{len} bytes after the last payload")]
    TrailingBytes { len: usize },
    /// A payload after an SK or SKF payload, which must be last.
    #[error("a payload after the encrypted payload")]
    PayloadAfterEncrypted,
    /// Emit: the buffer is shorter than `buffer_len()`.
    #[error("buffer too small")]
    BufferTooSmall,
    /// Emit: the named structure is longer than its length field can say.
    #[error("{what} too long")]
    TooLong { what: &'static str },
}
