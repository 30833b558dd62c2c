//! Shared test helpers: a private network namespace per test, and packet building.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::process::Command;

/// Runs `f` on a fresh thread that first moved into its own network namespace (the namespace is per thread
/// until it exits; threads spawned from it inherit it) with `lo` up. Panics in `f` fail the test.
pub fn in_netns<F: FnOnce() + Send + 'static>(f: F) {
    let h = std::thread::spawn(move || {
        // SAFETY: unshare only changes this thread's namespace membership.
        let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            r,
            0,
            "unshare(CLONE_NEWNET): {}",
            std::io::Error::last_os_error()
        );
        ip(&["link", "set", "lo", "up"]);
        f()
    });
    if let Err(p) = h.join() {
        std::panic::resume_unwind(p);
    }
}

/// Runs `ip ARGS` (in the calling thread's namespace) and asserts success.
pub fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().expect("run ip");
    assert!(st.success(), "ip {args:?} failed");
}

/// Whether `ip link show DEV` succeeds.
pub fn link_exists(dev: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", dev])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Internet checksum of `data` with an initial (unfolded) sum.
pub fn csum(init: u32, data: &[u8]) -> u16 {
    let mut s = init;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        s += w as u32;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: usize) -> u32 {
    let mut p = Vec::with_capacity(12);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&[0, proto]);
    p.extend_from_slice(&(len as u16).to_be_bytes());
    p.chunks(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]) as u32)
        .sum()
}

/// An IPv4 header (20 bytes, valid checksum) followed by `payload`.
pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, id: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 20];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    p[4..6].copy_from_slice(&id.to_be_bytes());
    p[8] = 64;
    p[9] = proto;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = csum(0, &p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// A complete IPv4/UDP packet with valid checksums.
pub fn udp4(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16, data: &[u8]) -> Vec<u8> {
    let len = 8 + data.len();
    let mut u = Vec::with_capacity(len);
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&(len as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(data);
    let mut c = csum(pseudo_v4(src, dst, 17, len), &u);
    if c == 0 {
        c = 0xffff;
    }
    u[6..8].copy_from_slice(&c.to_be_bytes());
    ipv4(src, dst, 17, 1, &u)
}

/// A complete IPv4/TCP packet with valid checksums. `opts` must be a multiple of 4 bytes.
#[allow(clippy::too_many_arguments)]
pub fn tcp4(
    src: Ipv4Addr,
    sport: u16,
    dst: Ipv4Addr,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    opts: &[u8],
    data: &[u8],
) -> Vec<u8> {
    let hlen = 20 + opts.len();
    let mut t = Vec::with_capacity(hlen + data.len());
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.push(((hlen / 4) as u8) << 4);
    t.push(flags);
    t.extend_from_slice(&65535u16.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0]);
    t.extend_from_slice(opts);
    t.extend_from_slice(data);
    let c = csum(pseudo_v4(src, dst, 6, t.len()), &t);
    t[16..18].copy_from_slice(&c.to_be_bytes());
    ipv4(src, dst, 6, 0, &t)
}

/// Whether the IPv4 packet's header checksum and TCP/UDP checksum are valid.
pub fn checksums_ok_v4(p: &[u8]) -> bool {
    let ihl = ((p[0] & 0xf) as usize) * 4;
    if csum(0, &p[..ihl]) != 0 {
        return false;
    }
    let tot = u16::from_be_bytes([p[2], p[3]]) as usize;
    let src = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
    let dst = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
    csum(pseudo_v4(src, dst, p[9], tot - ihl), &p[ihl..tot]) == 0
}
