//! Payload types (RFC 7296 3.2; RFC 7383 for SKF).

/// No next payload.
pub const NONE: u8 = 0;
pub const SA: u8 = 33;
pub const KE: u8 = 34;
pub const IDI: u8 = 35;
pub const IDR: u8 = 36;
pub const CERT: u8 = 37;
pub const CERTREQ: u8 = 38;
pub const AUTH: u8 = 39;
pub const NONCE: u8 = 40;
pub const NOTIFY: u8 = 41;
pub const DELETE: u8 = 42;
pub const VENDOR_ID: u8 = 43;
pub const TSI: u8 = 44;
pub const TSR: u8 = 45;
pub const SK: u8 = 46;
pub const CP: u8 = 47;
pub const EAP: u8 = 48;
pub const SKF: u8 = 53;

/// Whether the codec knows (parses into a typed payload) the type `t`.
pub fn is_known(t: u8) -> bool {
    matches!(t, SA..=EAP | SKF)
}
