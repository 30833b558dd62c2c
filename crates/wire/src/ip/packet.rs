//! [`Packet`]: an IPv4 or IPv6 packet view, chosen by the version nibble.

use std::net::IpAddr;

use crate::error::{Error, Result};
use crate::{ipv4, ipv6};

/// An IPv4 or IPv6 packet view, chosen by the version nibble.
#[derive(Debug, Clone)]
pub enum Packet<T: AsRef<[u8]>> {
    V4(ipv4::Packet<T>),
    V6(ipv6::Packet<T>),
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Dispatches on the version nibble and runs that version's `new_checked`.
    pub fn new_checked(buffer: T) -> Result<Self> {
        match buffer.as_ref().first().map(|b| b >> 4) {
            None => Err(Error::Truncated),
            Some(4) => Ok(Packet::V4(ipv4::Packet::new_checked(buffer)?)),
            Some(6) => Ok(Packet::V6(ipv6::Packet::new_checked(buffer)?)),
            Some(_) => Err(Error::Malformed),
        }
    }

    pub fn into_inner(self) -> T {
        match self {
            Packet::V4(p) => p.into_inner(),
            Packet::V6(p) => p.into_inner(),
        }
    }

    pub fn version(&self) -> u8 {
        match self {
            Packet::V4(_) => 4,
            Packet::V6(_) => 6,
        }
    }

    pub fn src_addr(&self) -> IpAddr {
        match self {
            Packet::V4(p) => p.src_addr().into(),
            Packet::V6(p) => p.src_addr().into(),
        }
    }

    pub fn dst_addr(&self) -> IpAddr {
        match self {
            Packet::V4(p) => p.dst_addr().into(),
            Packet::V6(p) => p.dst_addr().into(),
        }
    }

    /// Length of the packet per its header (bytes beyond it are ignored).
    pub fn total_len(&self) -> usize {
        match self {
            Packet::V4(p) => p.total_len() as usize,
            Packet::V6(p) => p.total_len(),
        }
    }

    /// TTL or hop limit.
    pub fn hop_limit(&self) -> u8 {
        match self {
            Packet::V4(p) => p.ttl(),
            Packet::V6(p) => p.hop_limit(),
        }
    }

    /// The IPv4 protocol or the IPv6 fixed header's next header.
    pub fn next_header(&self) -> u8 {
        match self {
            Packet::V4(p) => p.protocol(),
            Packet::V6(p) => p.next_header(),
        }
    }

    /// The bytes after the IPv4 header or the IPv6 fixed header.
    pub fn payload(&self) -> &[u8] {
        match self {
            Packet::V4(p) => p.payload(),
            Packet::V6(p) => p.payload(),
        }
    }
}
