//! UDP encapsulation of ESP (RFC 3948) on port 4500.

use crate::esp;

/// The NAT-T UDP port.
pub const PORT: u16 = 4500;

/// Length of the non-ESP marker that prefixes IKE messages on port 4500.
pub const NON_ESP_MARKER_LEN: usize = 4;

/// The NAT-keepalive payload.
pub const KEEPALIVE: u8 = 0xff;

/// What a UDP payload on the NAT-T port carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classified {
    /// ESP: a non-zero SPI and at least the 8-byte ESP header.
    Esp,
    /// IKE: a 4-byte zero non-ESP marker; the IKE message starts at offset 4.
    Ike,
    /// A NAT-keepalive: the single byte 0xFF.
    Keepalive,
    /// Anything else.
    Invalid,
}

/// Classifies the payload of a UDP datagram received on the NAT-T port.
pub fn classify(udp_payload: &[u8]) -> Classified {
    match udp_payload {
        [KEEPALIVE] => Classified::Keepalive,
        [0, 0, 0, 0, ..] => Classified::Ike,
        p if p.len() >= esp::HEADER_LEN => Classified::Esp,
        _ => Classified::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(classify(&[0xff]), Classified::Keepalive);
        assert_eq!(classify(&[0, 0, 0, 0]), Classified::Ike);
        assert_eq!(classify(&[0, 0, 0, 0, 1, 2, 3]), Classified::Ike);
        assert_eq!(classify(&[0, 0, 0, 1, 0, 0, 0, 1]), Classified::Esp);
        assert_eq!(classify(&[0, 0, 0, 1, 0, 0, 0]), Classified::Invalid);
        assert_eq!(classify(&[]), Classified::Invalid);
        assert_eq!(classify(&[0xfe]), Classified::Invalid);
        assert_eq!(classify(&[0xff, 0xff]), Classified::Invalid);
        assert_eq!(classify(&[0, 0, 0]), Classified::Invalid);
    }
}
