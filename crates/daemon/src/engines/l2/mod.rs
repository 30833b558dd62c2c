//! `netveil up` for l2sec: a host's LAN port protected frame by frame.
//!
//! ```toml
//! [l2sec]
//! interface = "eth0"               # the LAN port: it carries only l2sec frames from now on
//! tap = "l2s0"                     # the host-side TAP device (gets the port's MAC and the address)
//! address = "192.0.2.10/24"        # default: the port's IPv4 address, moved to the TAP
//! group_secret = "hex..."          # the network's group secret (at least 16 bytes), or:
//! # group_secret_file = "/etc/netveil/lan.secret"
//! group_suite = "aes128gcm"        # group traffic (ARP, broadcast, multicast, SEP)
//! suites = ["aes128gcm"]           # session suites, preference order (blowfish-cbc-sha1 for the thesis' v0)
//! dh_groups = ["x25519"]           # SEP stage 3: x25519, modp2048, modp3072
//! lifetime_seconds = 3600          # session lifetime offered (and longest accepted)
//! rekey_margin_seconds = 300
//! ethertype = 0x88b5               # or 0x1982, the thesis'
//! signing_key = "h1.l2key"         # Ed25519 key (netveil keygen --ed25519): group frames are signed
//! # require_signatures = true      # refuse group frames not signed by a known peer (default: true when
//!                                  # [[l2sec.peer]] entries are listed, false otherwise)
//! # state_dir = "/var/lib/netveil" # where the group epoch (l2sec-<interface>.epoch) persists: only root's,
//!                                  #   not on a tmpfs (see the daemon's `state` module)
//! # allow_volatile_state = false   # accept a state_dir on a tmpfs/ramfs (every start warns)
//! replay_window = 1024
//! # security_number = 0x00abcd     # send and require this 24-bit number
//! # timestamps = true              # send timestamps, accept within timestamp_tolerance seconds
//! # insecure_ecb = true            # allow the ECB suites (the thesis' pattern demonstration only)
//! # insecure_null = true           # allow the null suite "null-null" (no encryption, no integrity: the
//!                                  #   framing alone, the L2 study's noENC-noHMAC; measurements only)
//! # offload = false                # TAP offloads (TCP super-frames split here, segments coalesced; default on)
//!
//! [[l2sec.peer]]                   # verifying keys of the other hosts (for signatures)
//! mac = "02:00:5e:00:53:0b"
//! public_key = "hex (32 bytes)"
//! ip = "192.0.2.11"                # optional: the only IPv4 address this host may claim (ARP, SEP)
//! ```
//!
//! The group epoch: at every start, `max(Unix time in µs, last epoch + 1)`, written durably to
//! `state_dir/l2sec-<interface>.epoch` before the first frame goes out, so that it strictly increases across
//! restarts even when the clock goes back (see [`netveil_l2sec::node`]).
//!
//! Setup, all of it undone on exit or on a failure: the TAP device with the port's MAC address and an MTU that
//! leaves room for l2sec's overhead; the address moved from the port to the TAP; ARP and IPv6 off on the port;
//! and an nftables `netdev` table on the port that drops (and counts) every frame that is not l2sec, in both
//! directions, so that nothing leaves or enters the host in clear.
//!
//! Threads: `l2-tx` (TAP → seal → AF_PACKET, `sendmmsg` per batch) and `l2-rx` (AF_PACKET, `recvmmsg` per batch →
//! open → TAP, and the node's timers: SEP retransmissions and rekeys), each of which also serves the other
//! direction while it is awake and the other thread sleeps (see `worker`); and the control socket (`netveil
//! status`). The protocol state is one [`netveil_l2sec::Node`] behind a mutex, taken once per batch for the
//! node's decisions only, never across a system call: frames are sealed and opened in buffers the threads own, the
//! node's own frames (SEP) handed over in order (see `order`), and the system calls made after the lock is
//! released.

// layers: section, control > setup > worker > config, order, rx, timer, tx
mod config;
mod control;
mod order;
mod rx;
mod section;
mod setup;
#[cfg(test)]
mod tests;
mod timer;
mod tx;
mod worker;

pub use config::{parse_mac, read_signing_key, L2Config, L2_SECTIONS};
pub use section::L2Section;
pub use setup::{check, next_epoch, prepare, start, Prepared};

use crate::runtime::engine::{Control, Engine, Undo};
use crate::{Error, Result};
use netveil_io::Tap;
use netveil_l2sec::ed25519_dalek::SigningKey;
use netveil_l2sec::node::Node;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

struct State {
    node: Mutex<Node>,
    cfg: L2Config,
    mac: [u8; 6],
    ip: (Ipv4Addr, u8),
    mtu: u16,
    started: Instant,
    nft: String,
    stop: AtomicBool,
    /// The wire order of the node's ready frames against sealed data (see [`order`]).
    order: order::WireOrder,
    /// The two directions' buffers (see [`worker`]).
    tx: Mutex<tx::TxLane>,
    rx: Mutex<rx::RxLane>,
    sleeping: worker::Sleeping,
}

const BATCH: usize = 64;

/// The running L2 engine.
pub struct L2Engine {
    st: Arc<State>,
    tx: std::thread::JoinHandle<()>,
    rx: std::thread::JoinHandle<()>,
    tap: Arc<Tap>,
    /// Drop-storm warnings (looked at once a second).
    watch: crate::runtime::log::DropWatch,
    looked: Instant,
}

impl L2Engine {
    /// The engine's answers on the control socket.
    pub fn control(&self) -> Arc<dyn Control> {
        self.st.clone()
    }
}

impl Engine for L2Engine {
    fn tick(&mut self) -> bool {
        let now = Instant::now();
        if now.saturating_duration_since(self.looked) >= Duration::from_secs(1) {
            self.looked = now;
            let counts = self.st.node.lock().ok().map(|n| {
                let s = n.stats();
                let mut c: Vec<(String, u64)> = Vec::new();
                for (dir, d) in [("tx", &s.tx_drops), ("rx", &s.rx_drops)] {
                    c.extend(
                        d.snapshot()
                            .into_iter()
                            .map(|(k, n)| (format!("{dir}:{k}"), n)),
                    );
                }
                c.extend(s.sep_errors.iter().map(|(k, n)| (format!("sep:{k}"), *n)));
                c
            });
            if let Some(w) = counts.and_then(|c| self.watch.look(now, c)) {
                tracing::warn!("{}: {w}", self.st.cfg.interface);
            }
        }
        !self.tx.is_finished() && !self.rx.is_finished()
    }

    fn stop(self: Box<Self>, _undo: &mut Undo, _down: bool) {
        let L2Engine {
            st, tx, rx, tap, ..
        } = *self;
        st.stop.store(true, Relaxed);
        let _ = tx.join();
        let _ = rx.join();
        drop(tap);
        tracing::info!("{}: l2sec down", st.cfg.interface);
    }
}

fn mac_str(m: &[u8; 6]) -> String {
    netveil_wire::ethernet::Address(*m).to_string()
}

/// `netveil keygen --ed25519 --name NAME`: writes `NAME.l2key` (the 32-byte seed in hex, mode 0600) into `dir`
/// and returns its path and the public key in hex (for the other hosts' `[[l2sec.peer]]`).
pub fn keygen(name: &str, dir: &Path) -> Result<(PathBuf, String)> {
    use std::os::unix::fs::OpenOptionsExt;
    if name.is_empty() || name.contains('/') {
        return Err(Error::Usage(
            "--name: is not a usable file name (empty or with a '/'; value not shown)".into(),
        ));
    }
    let mut seed = Zeroizing::new([0u8; 32]);
    netveil_crypto::rand::fill_random(&mut seed[..]);
    let key = SigningKey::from_bytes(&seed);
    let path = dir.join(format!("{name}.l2key"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(Error::io(format!("cannot create {}", path.display())))?;
    let text = Zeroizing::new(format!("{}\n", hex::encode(&seed[..])));
    f.write_all(text.as_bytes())
        .map_err(Error::io(format!("cannot write {}", path.display())))?;
    Ok((path, hex::encode(key.verifying_key().as_bytes())))
}
