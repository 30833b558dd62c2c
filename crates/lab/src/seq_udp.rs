//! A sequenced UDP stream for loss tests: [`send`] paces datagrams carrying a sequence number and their send time
//! at a fixed rate; a [`Receiver`] records which sequence numbers arrived and when, and its [`Report`] counts the
//! lost, duplicated and reordered ones and lists the gaps with their send times (wall clock, to set against the
//! daemons' log lines: which rekey or restart a gap belongs to).
//!
//! A datagram is `SEQ (u64 BE) | SENT (u64 BE: ns since the Unix epoch) | MAGIC (u64 BE)`, padded to
//! [`PAYLOAD`] bytes.

use crate::{Error, Result};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Bytes of one datagram's payload.
pub const PAYLOAD: usize = 64;
const MAGIC: u64 = 0x6e76_7365_7175_6470; // "nvsequdp"

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Socket buffers of 8 MiB (the kernel caps them at `net.core.[rw]mem_max` unless root: the tests are root), so
/// that a receiver descheduled for a while on a busy machine does not drop what the tunnel delivered.
fn big_buffers(s: &UdpSocket) {
    use nix::sys::socket::{setsockopt, sockopt};
    let _ = setsockopt(s, sockopt::RcvBufForce, &(8 << 20));
    let _ = setsockopt(s, sockopt::SndBufForce, &(8 << 20));
}

/// What [`send`] did.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    pub packets: u64,
    /// Datagrams the kernel refused (`sendto` errors: no route, a full queue); their sequence numbers are
    /// skipped, not resent.
    pub errors: u64,
    pub elapsed: Duration,
}

/// Sends `count` datagrams to `dst` at `pps` per second (paced in 1 ms slots; a late slot catches up in a burst,
/// so the average rate holds on a busy machine), sequence numbers from 0. Runs in the caller's namespace.
pub fn send(dst: SocketAddr, pps: u32, count: u64) -> Result<Sent> {
    let bind: SocketAddr = if dst.is_ipv4() {
        "0.0.0.0:0".parse().expect("address")
    } else {
        "[::]:0".parse().expect("address")
    };
    let s = UdpSocket::bind(bind).map_err(Error::io("seq-udp bind"))?;
    big_buffers(&s);
    s.connect(dst).map_err(Error::io("seq-udp connect"))?;
    let t0 = Instant::now();
    let mut buf = [0u8; PAYLOAD];
    buf[16..24].copy_from_slice(&MAGIC.to_be_bytes());
    let (mut seq, mut errors) = (0u64, 0u64);
    while seq < count {
        // How many should have gone by now.
        let due = ((t0.elapsed().as_nanos() * u128::from(pps)) / 1_000_000_000) as u64 + 1;
        let due = due.min(count);
        while seq < due {
            buf[..8].copy_from_slice(&seq.to_be_bytes());
            buf[8..16].copy_from_slice(&unix_ns().to_be_bytes());
            if s.send(&buf).is_err() {
                errors += 1;
            }
            seq += 1;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    Ok(Sent {
        packets: count,
        errors,
        elapsed: t0.elapsed(),
    })
}

/// Records a stream's datagrams.
pub struct Receiver {
    sock: UdpSocket,
    count: u64,
}

/// One run of missing sequence numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub first: u64,
    pub last: u64,
    /// When the packet before the gap was sent (ns since the epoch; 0 if the gap starts the stream).
    pub after_ns: u64,
    /// When the packet after it was sent (0 if it ends the stream).
    pub before_ns: u64,
}

/// What arrived of a stream of `count`.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub count: u64,
    pub received: u64,
    pub lost: u64,
    pub duplicates: u64,
    /// Datagrams that arrived after one with a higher sequence number.
    pub reordered: u64,
    /// Datagrams that were not the stream's (wrong size or magic).
    pub foreign: u64,
    pub gaps: Vec<Gap>,
}

impl Receiver {
    /// Binds `addr` in the caller's namespace for a stream of `count` datagrams.
    pub fn bind(addr: SocketAddr, count: u64) -> Result<Receiver> {
        let sock = UdpSocket::bind(addr).map_err(Error::io(format!("seq-udp bind {addr}")))?;
        big_buffers(&sock);
        Ok(Receiver { sock, count })
    }

    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.sock.local_addr().map_err(Error::io("seq-udp address"))
    }

    /// Receives until the last sequence number arrived and then `idle` passed without a datagram, or `idle`
    /// passed without any once the stream has begun, or `limit` passed in all.
    pub fn run(self, idle: Duration, limit: Duration) -> Result<Report> {
        let n = usize::try_from(self.count).map_err(|_| {
            Error::measurement(
                "seq-udp",
                format!("a stream of {} datagrams is too long here", self.count),
            )
        })?;
        let mut seen = vec![0u8; n];
        let mut sent_ns = vec![0u64; n];
        let mut r = Report {
            count: self.count,
            ..Default::default()
        };
        let t0 = Instant::now();
        let mut last = Instant::now();
        let mut highest: Option<u64> = None;
        let mut buf = [0u8; 2048];
        self.sock
            .set_read_timeout(Some(Duration::from_millis(50)))
            .map_err(Error::io("seq-udp timeout"))?;
        loop {
            if t0.elapsed() > limit || (r.received > 0 && last.elapsed() > idle) {
                break;
            }
            let len = match self.sock.recv(&mut buf) {
                Ok(l) => l,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(Error::io("seq-udp receive")(e)),
            };
            last = Instant::now();
            let word = |i: usize| u64::from_be_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
            if len != PAYLOAD || word(16) != MAGIC || word(0) >= self.count {
                r.foreign += 1;
                continue;
            }
            let seq = word(0);
            let i = seq as usize;
            if seen[i] != 0 {
                r.duplicates += 1;
                continue;
            }
            seen[i] = 1;
            sent_ns[i] = word(8);
            r.received += 1;
            match highest {
                Some(h) if seq < h => r.reordered += 1,
                _ => highest = Some(seq),
            }
            if seq + 1 == self.count && r.received == self.count {
                break;
            }
        }
        let mut i = 0;
        while i < n {
            if seen[i] == 0 {
                let first = i;
                while i < n && seen[i] == 0 {
                    i += 1;
                }
                r.gaps.push(Gap {
                    first: first as u64,
                    last: (i - 1) as u64,
                    after_ns: if first > 0 { sent_ns[first - 1] } else { 0 },
                    before_ns: if i < n { sent_ns[i] } else { 0 },
                });
                r.lost += (i - first) as u64;
            } else {
                i += 1;
            }
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_gaps_duplicates_and_reorders() {
        let rx = Receiver::bind("127.0.0.1:0".parse().unwrap(), 10).unwrap();
        let to = rx.local_addr().unwrap();
        let h =
            std::thread::spawn(move || rx.run(Duration::from_millis(300), Duration::from_secs(5)));
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let pkt = |seq: u64| {
            let mut b = [0u8; PAYLOAD];
            b[..8].copy_from_slice(&seq.to_be_bytes());
            b[8..16].copy_from_slice(&(1000 + seq).to_be_bytes());
            b[16..24].copy_from_slice(&MAGIC.to_be_bytes());
            b
        };
        // 0 1 3 2 2 5 6 (4, 7, 8, 9 missing), one foreign datagram.
        for seq in [0, 1, 3, 2, 2, 5, 6] {
            s.send_to(&pkt(seq), to).unwrap();
        }
        s.send_to(b"not ours", to).unwrap();
        let r = h.join().unwrap().unwrap();
        assert_eq!(
            (r.received, r.lost, r.duplicates, r.reordered, r.foreign),
            (6, 4, 1, 1, 1),
            "{r:?}"
        );
        assert_eq!(
            r.gaps,
            vec![
                Gap {
                    first: 4,
                    last: 4,
                    after_ns: 1003,
                    before_ns: 1005
                },
                Gap {
                    first: 7,
                    last: 9,
                    after_ns: 1006,
                    before_ns: 0
                }
            ]
        );
    }

    #[test]
    fn a_paced_stream_on_loopback_arrives_whole() {
        let rx = Receiver::bind("127.0.0.1:0".parse().unwrap(), 2000).unwrap();
        let to = rx.local_addr().unwrap();
        let h =
            std::thread::spawn(move || rx.run(Duration::from_millis(500), Duration::from_secs(10)));
        let sent = send(to, 10_000, 2000).unwrap();
        assert_eq!((sent.packets, sent.errors), (2000, 0));
        assert!(sent.elapsed >= Duration::from_millis(190), "{sent:?}");
        let r = h.join().unwrap().unwrap();
        assert_eq!((r.received, r.lost, r.duplicates), (2000, 0, 0), "{r:?}");
    }
}
