//! Traffic between namespaces: TCP transfers checked byte by byte, iperf3, and a certificate for the lab's TLS
//! servers.

use super::netns::Lab;
use super::process::{command_line, spawn_in_ns};
use crate::{Error, Result};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The result of a [`tcp_transfer`].
#[derive(Debug, Clone, Copy)]
pub struct Transfer {
    /// Bytes received and verified by the receiver.
    pub bytes: u64,
    pub seconds: f64,
}

impl Transfer {
    pub fn mbit_per_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.seconds.max(1e-9) / 1e6
    }
}

fn pattern_fill(buf: &mut [u8], offset: u64) {
    // Byte i of the stream is a cheap function of i, so the receiver can check every byte.
    for (k, b) in buf.iter_mut().enumerate() {
        let i = offset + k as u64;
        *b = (i ^ (i >> 8) ^ (i >> 16).wrapping_mul(31)) as u8;
    }
}

/// Sends `bytes` bytes of a known pattern over TCP from namespace `src_ns` to `dst:port` in namespace `dst_ns` with
/// built-in sender and receiver threads; the receiver checks every byte. Time limit: 120 s.
pub fn tcp_transfer(
    src_ns: &str,
    dst_ns: &str,
    dst: IpAddr,
    port: u16,
    bytes: u64,
) -> Result<Transfer> {
    let addr = SocketAddr::new(dst, port);
    let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
    let receiver = spawn_in_ns(dst_ns, move || -> Result<u64> {
        let l = match std::net::TcpListener::bind(addr) {
            Ok(l) => {
                let _ = tx.send(Ok(()));
                l
            }
            Err(e) => {
                let e = Error::Io {
                    context: format!("bind {addr}"),
                    source: e,
                };
                let _ = tx.send(Err(e.clone()));
                return Err(e);
            }
        };
        let t0 = Instant::now();
        // Waits in poll(2) for the connection, so that accepting it costs no time of the transfer (a sleeping
        // retry loop added up to its sleep to every transfer's time: 5 ms, most of a 1 KB transfer).
        {
            use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
            use std::os::fd::AsFd;
            let mut fds = [PollFd::new(l.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(20_000u16)) {
                Ok(0) => return Err(Error::timeout("TCP receiver: no connection", 20.0, "")),
                Ok(_) => {}
                Err(e) => {
                    return Err(Error::Io {
                        context: "TCP receiver: poll".into(),
                        source: e.into(),
                    })
                }
            }
        }
        let (mut s, _) = l.accept().map_err(Error::io("TCP receiver: accept"))?;
        s.set_read_timeout(Some(Duration::from_secs(20))).ok();
        let mut buf = vec![0u8; 256 * 1024];
        let mut want = vec![0u8; 256 * 1024];
        let mut got: u64 = 0;
        loop {
            let n = match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(Error::Io {
                        context: format!("TCP receiver: receive after {got} bytes"),
                        source: e,
                    })
                }
            };
            pattern_fill(&mut want[..n], got);
            if buf[..n] != want[..n] {
                return Err(Error::measurement(
                    "TCP receiver",
                    format!("corrupted data near byte {got}"),
                ));
            }
            got += n as u64;
            if t0.elapsed() > Duration::from_secs(120) {
                return Err(Error::timeout(
                    format!("TCP receiver: too slow, {got} bytes and no end"),
                    120.0,
                    "",
                ));
            }
        }
        Ok(got)
    })?;
    match rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(Error::internal("receiver thread ended early")),
    }
    let sender = spawn_in_ns(src_ns, move || -> Result<f64> {
        let t0 = Instant::now();
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .map_err(Error::io(format!("TCP sender: connect {addr}")))?;
        s.set_write_timeout(Some(Duration::from_secs(20))).ok();
        let mut buf = vec![0u8; 256 * 1024];
        let mut sent: u64 = 0;
        while sent < bytes {
            let n = (bytes - sent).min(buf.len() as u64) as usize;
            pattern_fill(&mut buf[..n], sent);
            s.write_all(&buf[..n])
                .map_err(Error::io(format!("TCP sender: send after {sent} bytes")))?;
            sent += n as u64;
        }
        s.shutdown(std::net::Shutdown::Write).ok();
        // Wait for the receiver to close (it has read everything then).
        let mut one = [0u8; 1];
        s.set_read_timeout(Some(Duration::from_secs(30))).ok();
        let _ = s.read(&mut one);
        Ok(t0.elapsed().as_secs_f64())
    })?;
    let secs = sender
        .join()
        .map_err(|_| Error::internal("sender panicked"))???;
    let got = receiver
        .join()
        .map_err(|_| Error::internal("receiver panicked"))???;
    if got != bytes {
        return Err(Error::measurement(
            "TCP transfer",
            format!("received {got} of {bytes} bytes"),
        ));
    }
    Ok(Transfer {
        bytes: got,
        seconds: secs,
    })
}

/// A one-shot iperf3 server (`-s -1`) bound to `bind` in `ns`, its output discarded; returned once it listens
/// (on port 5201; after 2 s without, returned anyway: the client's connection then fails and says so).
pub fn iperf3_server(lab: &Lab, ns: &str, bind: &str) -> Result<Child> {
    let child = lab
        .command(ns, &["iperf3", "-s", "-1", "-B", bind])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(Error::io("cannot start iperf3"))?;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
        let listening = lab
            .exec(ns, &["ss", "-Hltn", "sport", "=", ":5201"])
            .map(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
            .unwrap_or(false);
        if listening {
            break;
        }
    }
    Ok(child)
}

/// A throw-away P-256 key and self-signed certificate (`CN=lab`, one day) for the lab's TLS servers, written into
/// `dir` by `openssl req`: (key, certificate).
pub fn self_signed_cert(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    let mut req = Command::new("openssl");
    req.args([
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
    ])
    .args(["-nodes", "-subj", "/CN=lab", "-days", "1", "-keyout"])
    .arg(&key)
    .arg("-out")
    .arg(&cert)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let st = req.status().map_err(Error::io("openssl req"))?;
    if !st.success() {
        return Err(Error::command(command_line(&req), Some(st), ""));
    }
    Ok((key, cert))
}

/// Runs iperf3 for `secs` seconds with `streams` TCP streams from `client_ns` to a server at `dst` in `server_ns`;
/// returns the receiver's goodput in Gbit/s and the sender's retransmits.
pub fn iperf(
    lab: &Lab,
    server_ns: &str,
    client_ns: &str,
    dst: &str,
    secs: u32,
    streams: u32,
) -> Result<(f64, u64)> {
    let mut server = iperf3_server(lab, server_ns, dst)?;
    // Wait for the server to listen.
    let mut out = None;
    let (secs, streams) = (secs.to_string(), streams.to_string());
    let client = ["iperf3", "-c", dst, "-t", &secs, "-P", &streams, "-J"];
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let o = lab.exec(client_ns, &client)?;
        if o.status.success() {
            out = Some(o);
            break;
        }
        let text = String::from_utf8_lossy(&o.stdout);
        if !text.contains("Connection refused") && !text.contains("unable to connect") {
            let _ = server.kill();
            return Err(Error::command(client.join(" "), Some(o.status), text));
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    let o = out
        .ok_or_else(|| Error::timeout(format!("iperf3 server at {dst} did not start"), 5.0, ""))?;
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .map_err(|e| Error::output("iperf3", format!("bad JSON: {e}")))?;
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    let retr = v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    Ok((bps / 1e9, retr))
}
