//! Big-endian field helpers shared by the header views. Callers guarantee bounds.

#[inline]
pub(crate) fn get_u16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

#[inline]
pub(crate) fn get_u32(d: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
}

#[inline]
pub(crate) fn set_u16(d: &mut [u8], at: usize, v: u16) {
    d[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn set_u32(d: &mut [u8], at: usize, v: u32) {
    d[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Pseudo-header sum for either address family (mixed families use each address's own octets).
pub(crate) fn pseudo(src: std::net::IpAddr, dst: std::net::IpAddr, proto: u8, len: u32) -> u32 {
    use std::net::IpAddr;
    let s = match src {
        IpAddr::V4(a) => crate::checksum::sum(0, &a.octets()),
        IpAddr::V6(a) => crate::checksum::sum(0, &a.octets()),
    };
    let d = match dst {
        IpAddr::V4(a) => crate::checksum::sum(0, &a.octets()),
        IpAddr::V6(a) => crate::checksum::sum(0, &a.octets()),
    };
    crate::checksum::pseudo_header(&[], &[], proto, len)
        .wrapping_add(s)
        .wrapping_add(d)
}
