//! The load generator: many IKE SAs of one Endpoint over UDP 500 and 4500, as one charon drives many.

use super::suites::CONN;
use crate::{Error, Result};
use netveil_ike::config::Connection;
use netveil_ike::event::Event;
use netveil_ike::machine::Endpoint;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// A received datagram: our port, the sender, the IKE message (the non-ESP marker stripped on 4500).
type Datagram = (u16, SocketAddr, Vec<u8>);

/// One Endpoint with sockets on UDP 500 and 4500 of the initiator's address; a reader thread per socket feeds a
/// channel (stopped on drop).
pub(super) struct Loader {
    ep: Endpoint,
    local: IpAddr,
    s500: UdpSocket,
    s4500: UdpSocket,
    rx: mpsc::Receiver<Datagram>,
    stop: Arc<AtomicBool>,
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

impl Loader {
    /// Binds the sockets (call it on a thread inside the initiator's namespace).
    pub(super) fn open(conn: Connection) -> Result<Loader> {
        let local = *conn
            .local_addrs
            .first()
            .ok_or_else(|| Error::internal("load generator: no local address"))?;
        let s500 = UdpSocket::bind((local, 500)).map_err(Error::io("load generator: bind 500"))?;
        let s4500 =
            UdpSocket::bind((local, 4500)).map_err(Error::io("load generator: bind 4500"))?;
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        for (s, port) in [(&s500, 500u16), (&s4500, 4500u16)] {
            let s = s.try_clone().map_err(Error::io("load generator: socket"))?;
            s.set_read_timeout(Some(Duration::from_millis(50)))
                .map_err(Error::io("load generator: socket"))?;
            let (tx, stop) = (tx.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("ike-load-{port}"))
                .spawn(move || {
                    let mut buf = vec![0u8; 65536];
                    while !stop.load(Relaxed) {
                        let Ok((n, from)) = s.recv_from(&mut buf) else {
                            continue;
                        };
                        let b = &buf[..n];
                        let msg = if port == 4500 {
                            match b.strip_prefix(&[0u8; 4]) {
                                Some(m) => m,
                                None => continue,
                            }
                        } else {
                            b
                        };
                        if tx.send((port, from, msg.to_vec())).is_err() {
                            break;
                        }
                    }
                })
                .map_err(Error::io("load generator: thread"))?;
        }
        // The wall clock for certificate validity (a run lasts minutes: no need to keep it current).
        let now = Instant::now();
        let ep = Endpoint::new(vec![conn], Box::new(netveil_crypto::rand::OsRng), now)
            .with_wall_clock(now, SystemTime::now());
        Ok(Loader {
            ep,
            local,
            s500,
            s4500,
            rx,
            stop,
        })
    }

    fn send_all(&mut self) -> Result<()> {
        while let Some(t) = self.ep.poll_transmit() {
            let r = if t.local.port() == 4500 {
                let mut b = Vec::with_capacity(4 + t.bytes.len());
                b.extend_from_slice(&[0; 4]);
                b.extend_from_slice(&t.bytes);
                self.s4500.send_to(&b, t.remote)
            } else {
                self.s500.send_to(&t.bytes, t.remote)
            };
            r.map_err(Error::io(format!("load generator: send to {}", t.remote)))?;
        }
        Ok(())
    }

    /// Waits up to `max` (or the Endpoint's next timeout) for datagrams, hands in what came, runs due timeouts,
    /// sends, and appends the events to `out`.
    fn turn(&mut self, max: Duration, out: &mut Vec<Event>) -> Result<()> {
        let now = Instant::now();
        let wait = self
            .ep
            .poll_timeout()
            .map_or(max, |t| t.saturating_duration_since(now).min(max));
        let mut got = Vec::new();
        match self.rx.recv_timeout(wait) {
            Ok(d) => got.push(d),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Error::internal(
                    "load generator: the socket readers stopped",
                ))
            }
        }
        while let Ok(d) = self.rx.try_recv() {
            got.push(d);
        }
        let now = Instant::now();
        for (port, from, bytes) in got {
            self.ep
                .handle_datagram(now, SocketAddr::new(self.local, port), from, &bytes);
        }
        if self.ep.poll_timeout().is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
        }
        self.send_all()?;
        while let Some(e) = self.ep.poll_event() {
            out.push(e);
        }
        Ok(())
    }

    /// `n` sequential setups, each deleted before the next: ms from `initiate` (the first IKE_SA_INIT sent) to
    /// the CHILD_SA event (the IKE_AUTH response processed). Between two, after the DELETE's answer, a pause (20
    /// ms plus the last setup's time, at most 500 ms): the responder removes the child after it answered, and
    /// that removal would otherwise delay the next IKE_SA_INIT and count in its setup.
    pub(super) fn sequential(&mut self, n: usize) -> Result<Vec<f64>> {
        let mut out: Vec<f64> = Vec::with_capacity(n);
        let mut ev = Vec::new();
        for i in 0..n {
            if let Some(last) = out.last() {
                let pause = Duration::from_secs_f64((20.0 + last).min(500.0) / 1e3);
                let t = Instant::now();
                while t.elapsed() < pause {
                    self.turn(pause.saturating_sub(t.elapsed()), &mut ev)?;
                }
                ev.clear();
            }
            let t0 = Instant::now();
            let id = self
                .ep
                .initiate(CONN, None, t0)
                .map_err(|e| Error::refused("initiate", e))?;
            self.send_all()?;
            let mut took = None;
            while took.is_none() {
                if t0.elapsed() > Duration::from_secs(10) {
                    return Err(Error::timeout(format!("setup {i}: no CHILD_SA"), 10.0, ""));
                }
                self.turn(Duration::from_millis(100), &mut ev)?;
                let t = t0.elapsed();
                for e in ev.drain(..) {
                    match e {
                        Event::ChildSaUp(c) if c.ike_sa == id => took = Some(t),
                        Event::Failed { failure, .. } => {
                            return Err(Error::refused(
                                format!("setup {i}"),
                                format!("{failure:?}"),
                            ))
                        }
                        _ => {}
                    }
                }
            }
            out.push(took.unwrap_or_default().as_secs_f64() * 1e3);
            let t1 = Instant::now();
            self.ep
                .terminate(id, t1)
                .map_err(|e| Error::refused("terminate", e))?;
            self.send_all()?;
            let mut down = false;
            while !down && t1.elapsed() < Duration::from_secs(5) {
                self.turn(Duration::from_millis(100), &mut ev)?;
                down = ev
                    .drain(..)
                    .any(|e| matches!(e, Event::IkeSaDown { ike_sa, .. } if ike_sa == id));
            }
            if !down {
                return Err(Error::timeout(
                    format!("setup {i}: the DELETE was not answered"),
                    5.0,
                    "",
                ));
            }
        }
        Ok(out)
    }

    /// `total` setups with `window` in flight; the IKE SAs stay up. Handshakes per second from the first
    /// request to the last CHILD_SA event.
    pub(super) fn concurrent(&mut self, total: usize, window: usize) -> Result<f64> {
        let deadline = Duration::from_secs(10 + total as u64 / 2);
        let t0 = Instant::now();
        let mut started = 0;
        let mut up = 0;
        let mut ev = Vec::new();
        let fire = |ep: &mut Endpoint, started: &mut usize| -> Result<()> {
            ep.initiate(CONN, None, Instant::now())
                .map_err(|e| Error::refused("initiate", e))?;
            *started += 1;
            Ok(())
        };
        while started < window.clamp(1, total.max(1)) {
            fire(&mut self.ep, &mut started)?;
        }
        self.send_all()?;
        while up < total {
            if t0.elapsed() > deadline {
                return Err(Error::timeout(
                    format!("only {up} of {total} children up"),
                    deadline.as_secs_f64(),
                    "",
                ));
            }
            self.turn(Duration::from_millis(100), &mut ev)?;
            for e in ev.drain(..) {
                match e {
                    Event::ChildSaUp(_) => {
                        up += 1;
                        if started < total {
                            fire(&mut self.ep, &mut started)?;
                        }
                    }
                    Event::Failed { failure, .. } => {
                        return Err(Error::refused(
                            format!("a setup after {up} of {total}"),
                            format!("{failure:?}"),
                        ))
                    }
                    _ => {}
                }
            }
            self.send_all()?;
        }
        Ok(total as f64 / t0.elapsed().as_secs_f64())
    }
}
