//! [`Repr`]: a parsed IPv4 header or IPv6 fixed header, and [`push_outer`] (a tunnel's outer headers).

use std::net::IpAddr;

use super::packet::Packet;
use crate::buf::PacketBuf;
use crate::error::{Error, Result};
use crate::{ip_proto, ipv4, ipv6, udp};

/// A parsed IPv4 header or IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    V4(ipv4::Repr),
    V6(ipv6::Repr),
}

impl Repr {
    /// Parses the header of a checked packet.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&T>) -> Result<Repr> {
        Ok(match p {
            Packet::V4(h) => Repr::V4(ipv4::Repr::parse(h)?),
            Packet::V6(h) => Repr::V6(ipv6::Repr::parse(h)?),
        })
    }

    pub fn src_addr(&self) -> IpAddr {
        match self {
            Repr::V4(r) => r.src.into(),
            Repr::V6(r) => r.src.into(),
        }
    }

    pub fn dst_addr(&self) -> IpAddr {
        match self {
            Repr::V4(r) => r.dst.into(),
            Repr::V6(r) => r.dst.into(),
        }
    }

    /// The IPv4 protocol or the IPv6 next header.
    pub fn next_header(&self) -> u8 {
        match self {
            Repr::V4(r) => r.protocol,
            Repr::V6(r) => r.next_header,
        }
    }

    pub fn set_next_header(&mut self, v: u8) {
        match self {
            Repr::V4(r) => r.protocol = v,
            Repr::V6(r) => r.next_header = v,
        }
    }

    pub fn payload_len(&self) -> usize {
        match self {
            Repr::V4(r) => r.payload_len,
            Repr::V6(r) => r.payload_len,
        }
    }

    pub fn set_payload_len(&mut self, v: usize) {
        match self {
            Repr::V4(r) => r.payload_len = v,
            Repr::V6(r) => r.payload_len = v,
        }
    }

    /// 20 (IPv4, no options) or 40.
    pub fn header_len(&self) -> usize {
        match self {
            Repr::V4(r) => r.header_len(),
            Repr::V6(r) => r.header_len(),
        }
    }

    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len()
    }

    /// True if the payload length fits the header's length field.
    fn fits(&self) -> bool {
        match self {
            Repr::V4(r) => r.buffer_len() <= usize::from(u16::MAX),
            Repr::V6(r) => r.payload_len <= usize::from(u16::MAX),
        }
    }

    /// Writes the header (IPv4 with its checksum) at the start of `buf`. Fails (`Truncated`) if `buf` is shorter
    /// than the header, (`Malformed`) if the payload length does not fit the length field.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < self.header_len() {
            return Err(Error::Truncated);
        }
        if !self.fits() {
            return Err(Error::Malformed);
        }
        match self {
            Repr::V4(r) => r.emit(&mut ipv4::Packet::new_unchecked(buf)),
            Repr::V6(r) => r.emit(&mut ipv6::Packet::new_unchecked(buf)),
        }
        Ok(())
    }
}

/// Pushes the outer header `ip` in front of the packet in `pkt` (tunnel mode), and with `udp` a UDP header from and
/// to these ports between the two (then `ip`'s next header becomes UDP). `ip`'s payload length is set to what
/// follows it. The UDP checksum is computed over IPv6, where it is mandatory (RFC 8200 section 8.1), and left zero
/// over IPv4 (as RFC 3948 section 3.1.2 sends ESP in UDP). Fails (`Truncated`) without the headroom, (`Malformed`)
/// if the result would not fit the length fields.
pub fn push_outer(pkt: &mut PacketBuf, mut ip: Repr, udp: Option<(u16, u16)>) -> Result<()> {
    if let Some((src_port, dst_port)) = udp {
        let payload_len = pkt.len();
        if udp::HEADER_LEN + payload_len > usize::from(u16::MAX) {
            return Err(Error::Malformed);
        }
        let h = pkt.push_front(udp::HEADER_LEN).ok_or(Error::Truncated)?;
        udp::Repr {
            src_port,
            dst_port,
            payload_len,
        }
        .emit(&mut udp::Packet::new_unchecked(h));
        ip.set_next_header(ip_proto::UDP);
    }
    ip.set_payload_len(pkt.len());
    if !ip.fits() {
        return Err(Error::Malformed);
    }
    let h = pkt.push_front(ip.header_len()).ok_or(Error::Truncated)?;
    ip.emit(h)?;
    if let (Some(_), Repr::V6(r)) = (udp, ip) {
        udp::Packet::new_unchecked(&mut pkt.data_mut()[ipv6::HEADER_LEN..])
            .fill_checksum(r.src.into(), r.dst.into());
    }
    Ok(())
}
