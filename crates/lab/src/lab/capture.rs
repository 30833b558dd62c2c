//! Captures: [`Capture`], a running tcpdump writing a pcap file, and [`tshark_frames`], tshark's view of one.

use super::process::{run_ok, stop_child};
use crate::Result;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

/// A running tcpdump writing a pcap file; stopped with SIGINT (so that the file is complete) on [`Capture::stop`]
/// or drop.
pub struct Capture {
    pub(super) child: Option<Child>,
    pub path: PathBuf,
}

impl Capture {
    /// Stops tcpdump cleanly and returns the pcap path.
    pub fn stop(&mut self) -> Result<PathBuf> {
        if let Some(mut c) = self.child.take() {
            // Give the last packets a moment to reach the capture.
            std::thread::sleep(Duration::from_millis(100));
            stop_child(&mut c, libc::SIGINT, Duration::from_secs(5));
        }
        Ok(self.path.clone())
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// One frame of a capture as tshark sees it (without keys unless given).
#[derive(Debug, Clone, Default)]
pub struct Frame {
    /// frame.protocols, e.g. "eth:ethertype:ip:esp".
    pub protocols: String,
    /// All IPv4/IPv6 source and destination addresses in the frame (outer and, if dissected, inner).
    pub addrs: Vec<String>,
    /// The outer source and destination addresses.
    pub src: String,
    pub dst: String,
    /// The ICMPv6 types in the frame (to tell neighbour discovery from inner traffic).
    pub icmpv6_types: Vec<u8>,
    /// The first (outer) IP protocol / next header.
    pub outer_proto: Option<u8>,
    pub esp_spi: Option<String>,
    pub esp_seq: Option<u64>,
    /// esp.icv_good (Some(true) when tshark verified the ICV).
    pub icv_good: Option<bool>,
    pub udp_ports: Vec<u16>,
    pub tcp_ports: Vec<u16>,
}

/// Reads a pcap with tshark. With `keys_dir`, ESP decryption and ICV checking are on and the ESP SA table
/// (`esp_sa`, as written by `netveil keys --wireshark`) is taken from that directory (used as tshark's
/// configuration directory through WIRESHARK_CONFIG_DIR).
pub fn tshark_frames(
    pcap: &Path,
    keys_dir: Option<&Path>,
    filter: Option<&str>,
) -> Result<Vec<Frame>> {
    let mut c = Command::new("tshark");
    c.arg("-n").arg("-r").arg(pcap);
    if let Some(d) = keys_dir {
        c.env("WIRESHARK_CONFIG_DIR", d).args([
            "-o",
            "esp.enable_encryption_decode:TRUE",
            "-o",
            "esp.enable_authentication_check:TRUE",
        ]);
    } else {
        // A configuration directory of its own, so that the user's settings cannot change the result.
        c.env("WIRESHARK_CONFIG_DIR", pcap.with_extension("wsconf"));
    }
    if let Some(f) = filter {
        c.args(["-Y", f]);
    }
    c.args(["-T", "fields", "-E", "separator=|", "-E", "occurrence=a"]);
    for f in [
        "frame.protocols",
        "ip.src",
        "ip.dst",
        "ipv6.src",
        "ipv6.dst",
        "ip.proto",
        "ipv6.nxt",
        "esp.spi",
        "esp.sequence",
        "esp.icv_good",
        "udp.port",
        "icmpv6.type",
        "tcp.port",
    ] {
        c.args(["-e", f]);
    }
    let out = run_ok(&mut c)?;
    let mut frames = Vec::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('|').collect();
        if f.len() < 13 {
            continue;
        }
        let list = |s: &str| -> Vec<String> {
            s.split(',')
                .filter(|x| !x.is_empty())
                .map(|x| x.to_string())
                .collect()
        };
        let mut addrs = Vec::new();
        for field in &f[1..=4] {
            addrs.extend(list(field));
        }
        // The outer header: IPv4 or IPv6, whichever comes first in frame.protocols.
        let (outer_proto, src, dst) = {
            let p = f[0];
            let v4 = p.find(":ip:").or(p.strip_suffix(":ip").map(|s| s.len()));
            let v6 = p
                .find(":ipv6:")
                .or(p.strip_suffix(":ipv6").map(|s| s.len()));
            let (pr, s, d) = match (v4, v6) {
                (Some(a), Some(b)) if a < b => (f[5], f[1], f[2]),
                (Some(_), None) => (f[5], f[1], f[2]),
                (_, Some(_)) => (f[6], f[3], f[4]),
                _ => ("", "", ""),
            };
            let first = |x: &str| list(x).first().cloned().unwrap_or_default();
            (
                list(pr).first().and_then(|x| x.parse().ok()),
                first(s),
                first(d),
            )
        };
        frames.push(Frame {
            protocols: f[0].to_string(),
            addrs,
            src,
            dst,
            icmpv6_types: list(f[11]).iter().filter_map(|x| x.parse().ok()).collect(),
            outer_proto,
            esp_spi: list(f[7]).first().cloned(),
            esp_seq: list(f[8]).first().and_then(|x| x.parse().ok()),
            icv_good: list(f[9]).first().map(|x| x == "1" || x == "True"),
            udp_ports: list(f[10]).iter().filter_map(|x| x.parse().ok()).collect(),
            tcp_ports: list(f[12]).iter().filter_map(|x| x.parse().ok()).collect(),
        });
    }
    Ok(frames)
}
