//! Finding the ESP or AH header of a received IP packet.

use crate::iphdr;
use crate::{Drop, Protocol};
use netveil_wire::ip::Layout;
use netveil_wire::{ip_proto, udp, udp_encap, PacketBuf};

/// Where a received packet's ESP or AH header is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    pub protocol: Protocol,
    pub spi: u32,
    pub ip: Layout,
    /// Offset of the ESP or AH header. With UDP encapsulation, the UDP header is at `ip.header_len` and the ESP
    /// header 8 bytes later.
    pub off: usize,
    /// ESP in UDP (RFC 3948).
    pub udp: bool,
}

/// What a received IP packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classified {
    /// ESP or AH to process.
    Protected(Located),
    /// An IKE message on the NAT-T port (non-ESP marker) or a NAT keepalive: not for the data plane.
    NotEsp,
    /// Neither ESP, AH nor ESP-in-UDP: clear traffic.
    Clear(Layout),
}

/// Classifies the IP packet in `pkt` (truncating it to the length its IP header gives). `nat_t_port` is the UDP
/// port on which ESP-in-UDP is accepted (4500).
pub fn classify(pkt: &mut PacketBuf, nat_t_port: u16) -> Result<Classified, Drop> {
    let ip = iphdr::parse(pkt.data())?;
    pkt.truncate(ip.total_len);
    let p = pkt.data();
    let off = ip.header_len;
    let spi_at = |o: usize| -> Result<u32, Drop> {
        p.get(o..o + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or(Drop::Malformed)
    };
    match ip.next_header {
        ip_proto::ESP | ip_proto::AH if ip.fragment => Err(Drop::Unsupported),
        ip_proto::ESP => Ok(Classified::Protected(Located {
            protocol: Protocol::Esp,
            spi: spi_at(off)?,
            ip,
            off,
            udp: false,
        })),
        ip_proto::AH => Ok(Classified::Protected(Located {
            protocol: Protocol::Ah,
            spi: spi_at(off + 4)?,
            ip,
            off,
            udp: false,
        })),
        ip_proto::UDP if !ip.fragment && p.len() >= off + udp::HEADER_LEN => {
            // The UDP length field is not looked at: the datagram is what the IP header says.
            let dgram = udp::Packet::new_unchecked(&p[off..]);
            if dgram.dst_port() != nat_t_port {
                return Ok(Classified::Clear(ip));
            }
            let Some(spi) = esp_in_udp_spi(&p[off + udp::HEADER_LEN..])? else {
                return Ok(Classified::NotEsp);
            };
            Ok(Classified::Protected(Located {
                protocol: Protocol::Esp,
                spi,
                ip,
                off: off + udp::HEADER_LEN,
                udp: true,
            }))
        }
        _ => Ok(Classified::Clear(ip)),
    }
}

/// The SPI of the ESP packet that a UDP payload on the NAT-T port carries (RFC 3948), or `None` for an IKE message
/// (non-ESP marker) or a NAT keepalive. Shorter than an ESP header and not a keepalive: malformed.
pub fn esp_in_udp_spi(payload: &[u8]) -> Result<Option<u32>, Drop> {
    match udp_encap::classify(payload) {
        udp_encap::Classified::Esp => Ok(Some(u32::from_be_bytes([
            payload[0], payload[1], payload[2], payload[3],
        ]))),
        udp_encap::Classified::Keepalive => Ok(None),
        udp_encap::Classified::Ike if payload.len() >= netveil_wire::esp::HEADER_LEN => Ok(None),
        udp_encap::Classified::Ike | udp_encap::Classified::Invalid => Err(Drop::Malformed),
    }
}
