//! `netveil flood`: a packet flood for the lab (`netveil bench --flood`): Ethernet frames written with AF_PACKET
//! `sendmmsg` on one interface, paced to a rate, for a time (or up to a count). The kinds are what an attacker on the wire can send
//! at a tunnel endpoint:
//!
//! | kind | what |
//! |---|---|
//! | `closed` | UDP to a closed port (the control: what the kernel's own work costs) |
//! | `random` | random bytes as UDP datagrams to the protocol's port (4500: ESP-in-UDP, 1000: PSP) |
//! | `unknown-spi` | well-formed ESP or PSP headers with SPIs the receiver does not have |
//! | `bad-icv` | the receiver's SPI with fresh sequence numbers (ESP) or IVs (PSP) and a wrong ICV: each passes the replay check and costs the receiver its decryption (`--counter-start`: far ahead by default, a blind forger; just above the window, one who sees the wire) |
//! | `replay` | packets recorded from the real peer (a pcap), sent again |
//!
//! The source address is the attacker's own, or spoofs the peer's (`--src`).

use crate::{Error, Result};
use netveil_io::PacketSocket;
use netveil_wire::ethernet::{self, Address};
use netveil_wire::{ipv4, udp, PacketBuf};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What the flood sends (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Closed,
    Random,
    UnknownSpi,
    BadIcv,
    Replay,
}

/// The protocol whose port and header the flood uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// ESP in UDP (RFC 3948).
    Esp,
    Psp,
}

/// A flood: where, what, how fast and how long (`netveil flood`'s options).
#[derive(Clone, Debug)]
pub struct Flood {
    /// The interface to send on.
    pub interface: String,
    /// The destination MAC address (the receiver's interface), as `aa:bb:cc:dd:ee:ff`.
    pub dst_mac: String,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub kind: Kind,
    pub proto: Proto,
    /// The UDP port (`None`: 4500 for ESP, 1000 for PSP; `closed`: 9).
    pub port: Option<u16>,
    /// The UDP source port (`None`: 4500 for ESP, where the peer's ESP-in-UDP comes from; for PSP the flow-hash
    /// ports 40000-40999).
    pub sport: Option<u16>,
    /// bad-icv: the receiver's SPI.
    pub spi: u32,
    /// bad-icv: the first sequence number (ESP) or IV (PSP).
    pub counter_start: u64,
    /// bad-icv: how much the counter grows per packet.
    pub counter_step: u64,
    /// replay: a pcap (Ethernet) whose UDP datagrams to the port are sent again.
    pub pcap: Option<PathBuf>,
    /// Packets per second (0: as fast as possible).
    pub pps: u64,
    pub seconds: f64,
    /// Stop once this many packets are sent (0: no limit; `seconds` bounds the time either way).
    pub count: u64,
    /// UDP payload bytes of generated packets.
    pub size: usize,
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let v: Vec<u8> = s
        .split(':')
        .map(|p| u8::from_str_radix(p, 16).ok())
        .collect::<Option<_>>()?;
    v.try_into().ok()
}

fn random(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    netveil_crypto::rand::fill_random(&mut v);
    v
}

/// An Ethernet + IPv4 + UDP frame around `payload`.
fn frame(a: &Flood, dst_mac: [u8; 6], sport: u16, dport: u16, payload: &[u8]) -> PacketBuf {
    let ulen = udp::HEADER_LEN + payload.len();
    let total = ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN + ulen;
    let mut b = PacketBuf::new(total, 0);
    let d = b.push_back(total).expect("sized above");
    ethernet::Repr {
        src: Address([0x02, 0, 0, 0, 0, 0x66]),
        dst: Address(dst_mac),
        ethertype: ethernet::ethertype::IPV4,
    }
    .emit(&mut ethernet::Packet::new_unchecked(&mut d[..]));
    let ip = &mut d[ethernet::HEADER_LEN..];
    ipv4::Repr {
        src: a.src,
        dst: a.dst,
        protocol: netveil_wire::ip_proto::UDP,
        payload_len: ulen,
        ttl: 64,
        dscp_ecn: 0,
        ident: 0,
        dont_frag: true,
    }
    .emit(&mut ipv4::Packet::new_unchecked(&mut ip[..]));
    let u = &mut ip[ipv4::MIN_HEADER_LEN..];
    udp::Repr {
        src_port: sport,
        dst_port: dport,
        payload_len: payload.len(),
    }
    .emit(&mut udp::Packet::new_unchecked(&mut u[..]));
    u[udp::HEADER_LEN..].copy_from_slice(payload);
    b
}

/// Where, in a generated frame, the per-packet counter goes (ESP sequence number, PSP IV), if anywhere.
const COUNTER_AT: usize = ethernet::HEADER_LEN + ipv4::MIN_HEADER_LEN + udp::HEADER_LEN;

fn payload(a: &Flood, spi: u32) -> Vec<u8> {
    let n = a.size.max(32);
    let mut p = random(n);
    match a.proto {
        Proto::Esp => {
            p[..4].copy_from_slice(&spi.max(256).to_be_bytes());
            p[4..8].copy_from_slice(&1u32.to_be_bytes());
        }
        Proto::Psp => {
            let h = netveil_psp::header::Repr {
                next_header: netveil_wire::ip_proto::UDP,
                crypt_offset: 0,
                sample: false,
                drop: false,
                version: netveil_psp::Version::AesGcm128,
                spi,
                iv: 1,
                vc: None,
            };
            h.emit(&mut netveil_psp::header::Header::new_unchecked(&mut p[..]));
        }
    }
    p
}

/// The frames to send, and whether a counter (sequence number / IV) is rewritten per packet at `COUNTER_AT`.
/// Where the per-packet counter is rewritten: (offset, length).
type Counter = Option<(usize, usize)>;

fn frames(a: &Flood) -> Result<(Vec<PacketBuf>, Counter)> {
    let mac = parse_mac(&a.dst_mac)
        .ok_or_else(|| Error::Usage(format!("--dst-mac: '{}' is not a MAC address", a.dst_mac)))?;
    let port = a.port.unwrap_or(match (a.kind, a.proto) {
        (Kind::Closed, _) => 9,
        (_, Proto::Esp) => 4500,
        (_, Proto::Psp) => netveil_psp::UDP_PORT,
    });
    let sport = |i: usize| match (a.sport, a.proto) {
        (Some(p), _) => p,
        // ESP-in-UDP comes from the peer's NAT-T port; PSP from the flow-hash ports.
        (None, Proto::Esp) => 4500,
        (None, Proto::Psp) => 40000 + (i % 1000) as u16,
    };
    let mut out = Vec::new();
    match a.kind {
        Kind::Closed | Kind::Random => {
            for i in 0..256 {
                let mut p = random(a.size.max(8));
                // Not a NAT keepalive (0xff) or a non-ESP marker (four zero bytes).
                p[0] |= 1;
                out.push(frame(a, mac, sport(i), port, &p));
            }
        }
        Kind::UnknownSpi => {
            for i in 0..256 {
                let mut spi = [0u8; 4];
                netveil_crypto::rand::fill_random(&mut spi);
                let spi = u32::from_be_bytes(spi) | 0x0100_0000;
                out.push(frame(a, mac, sport(i), port, &payload(a, spi)));
            }
        }
        Kind::BadIcv => {
            if a.spi == 0 {
                return Err(Error::Usage("--kind bad-icv needs --spi".into()));
            }
            for i in 0..64 {
                out.push(frame(a, mac, sport(i), port, &payload(a, a.spi)));
            }
            let (at, len) = match a.proto {
                Proto::Esp => (COUNTER_AT + 4, 4),
                Proto::Psp => (COUNTER_AT + 8, 8),
            };
            return Ok((out, Some((at, len))));
        }
        Kind::Replay => {
            let path = a
                .pcap
                .as_ref()
                .ok_or_else(|| Error::Usage("--kind replay needs --pcap".into()))?;
            let p = netveil_pcap::read_file(path)?;
            for r in &p.records {
                let d = &r.data;
                if r.orig_len as usize != d.len() {
                    continue; // truncated by the capture
                }
                // Ethernet, IPv4, UDP to the port.
                let Ok(eth) = ethernet::Packet::new_checked(&d[..]) else {
                    continue;
                };
                if eth.ethertype() != ethernet::ethertype::IPV4 {
                    continue;
                }
                let Ok(ip) = ipv4::Packet::new_checked(eth.payload()) else {
                    continue;
                };
                if ip.protocol() != netveil_wire::ip_proto::UDP
                    || !udp::Packet::new_checked(ip.payload()).is_ok_and(|u| u.dst_port() == port)
                {
                    continue;
                }
                let mut f = PacketBuf::from_slice(d, 0, 0);
                ethernet::Packet::new_unchecked(f.data_mut()).set_dst_addr(Address(mac));
                out.push(f);
            }
            if out.is_empty() {
                return Err(Error::Usage(format!(
                    "{}: no UDP datagram to port {port} to replay",
                    path.display()
                )));
            }
        }
    }
    Ok((out, None))
}

/// `netveil flood`: sends the flood `a`, then prints what it sent.
pub fn run(a: &Flood) -> Result<()> {
    let (mut frames, counter) = frames(a)?;
    let sock = PacketSocket::bind(&a.interface, netveil_io::packet::ETH_P_ALL).map_err(
        Error::io(format!("cannot open a packet socket on {}", a.interface)),
    )?;
    sock.set_buffer_sizes(4 << 20).ok();
    let batch = 64.min(frames.len()).max(1);
    let t0 = Instant::now();
    let end = Duration::from_secs_f64(a.seconds.max(0.0));
    let mut sent: u64 = 0;
    let mut next: u64 = a.counter_start;
    let mut at = 0;
    while t0.elapsed() < end && (a.count == 0 || sent < a.count) {
        if a.pps > 0 {
            // Pace: never ahead of the schedule.
            let due = Duration::from_secs_f64(sent as f64 / a.pps as f64);
            let now = t0.elapsed();
            if due > now {
                std::thread::sleep((due - now).min(Duration::from_millis(2)));
                continue;
            }
        }
        let mut n = batch.min(frames.len() - at);
        if a.count > 0 {
            n = n.min(usize::try_from(a.count - sent).unwrap_or(usize::MAX));
        }
        if let Some((off, len)) = counter {
            for f in &mut frames[at..at + n] {
                let v = next.to_be_bytes();
                f.data_mut()[off..off + len].copy_from_slice(&v[8 - len..]);
                next = next.wrapping_add(a.counter_step);
            }
        }
        sent += sock.send_batch(&frames[at..at + n]).unwrap_or(0) as u64;
        at = (at + n) % frames.len();
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{sent} packets in {secs:.2} s ({:.0} packets/s)",
        sent as f64 / secs.max(1e-9)
    );
    Ok(())
}
