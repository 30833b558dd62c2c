//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).

/// One's-complement sum of `data` (as big-endian 16-bit words) added to `initial`, not folded.
pub fn sum(initial: u32, data: &[u8]) -> u32 {
    let mut acc = initial as u64;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u16::from_be_bytes([c[0], c[1]]) as u64;
    }
    if let [last] = chunks.remainder() {
        acc += (*last as u64) << 8;
    }
    while acc >> 32 != 0 {
        acc = (acc & 0xffff_ffff) + (acc >> 32);
    }
    acc as u32
}

/// Folds a 32-bit sum into 16 bits and complements it.
pub fn finish(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The Internet checksum of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum(0, data))
}

/// The pseudo-header sum for TCP/UDP/ICMPv6 over IPv4 or IPv6 addresses (4 or 16 bytes each).
pub fn pseudo_header(src: &[u8], dst: &[u8], proto: u8, len: u32) -> u32 {
    let mut acc = sum(0, src);
    acc = sum(acc, dst);
    acc = acc.wrapping_add(proto as u32);
    acc = acc.wrapping_add(len >> 16).wrapping_add(len & 0xffff);
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2 (before complement).
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(checksum(&d), !0xddf2);
    }

    #[test]
    fn ipv4_header_checksum_verifies_to_zero() {
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0);
    }
}
