//! The IKE driver's sockets: UDP 500 and UDP 4500, one of each per address family of the configured local
//! addresses, bound to the wildcard address (the local address of each datagram comes from `IP_PKTINFO`; those
//! to an address not configured are dropped, and replies leave from the address they came to).
//!
//! Port 4500 is shared with the IP engine's ESP-in-UDP socket: both are bound with `SO_REUSEPORT` into one group
//! ([`UdpSocket::bind_shared`]), and this driver attaches the group's steering program
//! ([`UdpSocket::steer_non_esp`]): datagrams with the non-ESP marker (four zero bytes) and NAT-T keepalives come
//! here, ESP goes to the engine, which knows nothing of IKE. The engine's socket joined first (engines start
//! before drivers): it is the group's socket 0, this one 1. Without an engine socket on the port this one is alone
//! and gets everything (ESP is dropped here, as an engine without NAT-T would).

use netveil_ike::event::Transmit;
use netveil_io::{PacketBuf, UdpMeta, UdpSocket};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// The non-ESP marker (RFC 3948 2.2).
pub const MARKER: [u8; 4] = [0; 4];

/// The largest IKE datagram read (IKE messages above the path MTU come fragmented, RFC 7383).
const MAX_DATAGRAM: usize = 65535;

struct Sock {
    sock: UdpSocket,
    /// Whether it is the NAT-T port's (the marker in front of every IKE message).
    nat_t: bool,
}

/// Where the sockets are bound (see [`Sockets::open`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    Wildcard,
    Each,
}

/// A received IKE message, without the marker.
#[derive(Debug)]
pub struct Datagram {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub bytes: Vec<u8>,
}

pub struct Sockets {
    socks: Vec<Sock>,
    locals: Vec<IpAddr>,
    /// Receive buffers, allocated once.
    bufs: Vec<PacketBuf>,
    meta: Vec<UdpMeta>,
}

/// Datagrams read per socket and turn.
const BATCH: usize = 8;

impl Sockets {
    /// Binds `ike_port` and `nat_t_port` (500 and 4500) for each family of `locals` on the wildcard address
    /// (`Bind::Wildcard`, what the daemon does), or on each of `locals` (`Bind::Each`: tests that run two drivers
    /// on one host; no port sharing with an engine then), with `mark` as `SO_MARK`.
    pub fn open(
        locals: &[IpAddr],
        ike_port: u16,
        nat_t_port: u16,
        mark: Option<u32>,
        bind: Bind,
    ) -> io::Result<Sockets> {
        let mut socks = Vec::new();
        let addrs: Vec<IpAddr> = match bind {
            Bind::Wildcard => [false, true]
                .into_iter()
                .filter(|v6| locals.iter().any(|a| a.is_ipv6() == *v6))
                .map(|v6| {
                    if v6 {
                        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
                    } else {
                        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
                    }
                })
                .collect(),
            Bind::Each => locals.to_vec(),
        };
        for any in addrs {
            let ctx = |port: u16| {
                move |e: io::Error| {
                    io::Error::new(e.kind(), format!("UDP port {port} ({any}): {e}"))
                }
            };
            let ike = UdpSocket::bind(SocketAddr::new(any, ike_port)).map_err(ctx(ike_port))?;
            let nat = UdpSocket::bind_shared(SocketAddr::new(any, nat_t_port))
                .map_err(ctx(nat_t_port))?;
            nat.steer_non_esp(1, 0).map_err(ctx(nat_t_port))?;
            for s in [&ike, &nat] {
                if let Some(m) = mark {
                    s.set_mark(m).map_err(ctx(s.local_addr().port()))?;
                }
                // A receive on a socket polled readable returns at once; the timeout only bounds one whose
                // datagram went meanwhile. Set once here: per receive it was a syscall per datagram.
                s.set_recv_timeout(Duration::from_millis(1))
                    .map_err(ctx(s.local_addr().port()))?;
            }
            socks.push(Sock {
                sock: ike,
                nat_t: false,
            });
            socks.push(Sock {
                sock: nat,
                nat_t: true,
            });
        }
        Ok(Sockets {
            socks,
            locals: locals.to_vec(),
            bufs: vec![PacketBuf::new(MAX_DATAGRAM, 0); BATCH],
            meta: vec![UdpMeta::default(); BATCH],
        })
    }

    /// Waits up to `wait` and reads what the sockets have: each datagram as an IKE message (`Err(())`: dropped,
    /// not to a configured address, or on the NAT-T port without the marker).
    pub fn receive(
        &mut self,
        wait: Duration,
        out: &mut Vec<Result<Datagram, ()>>,
    ) -> io::Result<()> {
        let refs: Vec<&UdpSocket> = self.socks.iter().map(|s| &s.sock).collect();
        let ready = UdpSocket::poll_readable(&refs, Some(wait))?;
        for (s, ready) in self.socks.iter().zip(ready) {
            if !ready {
                continue;
            }
            for b in &mut self.bufs {
                b.reset(0);
            }
            let n = match s.sock.recv_batch(&mut self.bufs, &mut self.meta, 0) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) => return Err(e),
            };
            let port = s.sock.local_addr().port();
            for (b, m) in self.bufs[..n].iter().zip(&self.meta[..n]) {
                out.push(accept(&self.locals, s.nat_t, b.data(), m, port));
            }
        }
        Ok(())
    }
}

/// One received datagram as an IKE message, or `Err(())`: not to one of `locals`, or on the NAT-T port without
/// the marker (ESP, a keepalive).
fn accept(
    locals: &[IpAddr],
    nat_t: bool,
    data: &[u8],
    m: &UdpMeta,
    port: u16,
) -> Result<Datagram, ()> {
    if !locals.contains(&m.dst) {
        return Err(());
    }
    let bytes = if nat_t {
        // Keepalives (1 byte) and ESP (non-zero SPI) carry no IKE message.
        match data.strip_prefix(&MARKER) {
            Some(rest) if !rest.is_empty() => rest,
            _ => return Err(()),
        }
    } else {
        data
    };
    Ok(Datagram {
        local: SocketAddr::new(m.dst, port),
        remote: m.src,
        bytes: bytes.to_vec(),
    })
}

impl Sockets {
    /// Sends one message from the socket of its local port and family (the marker in front on the NAT-T port).
    pub fn send(&self, t: &Transmit) -> io::Result<()> {
        let s = self
            .socks
            .iter()
            .find(|s| {
                let a = s.sock.local_addr();
                a.port() == t.local.port()
                    && a.is_ipv6() == t.local.is_ipv6()
                    && (a.ip().is_unspecified() || a.ip() == t.local.ip())
            })
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    format!("no IKE socket for {}", t.local),
                )
            })?;
        let mut data = Vec::with_capacity(t.bytes.len() + 4);
        if s.nat_t {
            data.extend_from_slice(&MARKER);
        }
        data.extend_from_slice(&t.bytes);
        let pkt = PacketBuf::from_slice(&data, 0, 0);
        match s
            .sock
            .send_batch_from(&[pkt], &[t.remote], &[t.local.ip()])?
        {
            1 => Ok(()),
            _ => Err(io::Error::new(io::ErrorKind::WouldBlock, "not sent")),
        }
    }

    /// The bound addresses (tests).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.socks.iter().map(|s| s.sock.local_addr()).collect()
    }
}
