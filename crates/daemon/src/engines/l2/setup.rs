//! Setup: the port, its nftables table, the group epoch, `check`, `prepare` and `start`.

use crate::runtime::engine::{run, run_stdin, Undo};
use crate::{Error, Result};
use netveil_io::{PacketSocket, Tap};
use netveil_l2sec::node::Node;
use serde_json::Value;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::config::cerr;
use super::config::{parse_mac, L2Config};
use super::rx::RxLane;
use super::tx::TxLane;
use super::worker::{self, Home};
use super::{mac_str, L2Engine, State};
use crate::runtime::config::ConfigError;
use crate::runtime::state::StateDir;

/// The port's MAC address and MTU (from `ip -j link`, which, unlike sysfs, answers for the current namespace).
fn port_link(name: &str) -> Result<([u8; 6], u32)> {
    let out = std::process::Command::new("ip")
        .args(["-j", "link", "show", "dev", name])
        .output()
        .map_err(Error::io("cannot run ip"))?;
    if !out.status.success() {
        return Err(Error::Usage(format!(
            "l2sec.interface: no interface '{name}'"
        )));
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let l = &v[0];
    let mac = l["address"].as_str().and_then(parse_mac).ok_or_else(|| {
        Error::Usage(format!("l2sec.interface: '{name}' has no Ethernet address"))
    })?;
    Ok((mac, l["mtu"].as_u64().unwrap_or(1500) as u32))
}

/// The port's IPv4 addresses (address, prefix length).
fn port_addrs(name: &str) -> Vec<(Ipv4Addr, u8)> {
    let Ok(out) = std::process::Command::new("ip")
        .args(["-j", "-4", "addr", "show", "dev", name])
        .output()
    else {
        return vec![];
    };
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v[0]["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| {
            Some((
                a["local"].as_str()?.parse().ok()?,
                a["prefixlen"].as_u64()? as u8,
            ))
        })
        .collect()
}

/// The nftables table that keeps the port l2sec-only.
pub(super) fn nft_table(tap: &str) -> String {
    format!("netveil_l2_{}", crate::runtime::engine::nft_ident(tap))
}

/// The port's `netdev` table: every frame that is not l2sec (`ethertype`) dropped and counted, in and out. The
/// interface name goes through [`crate::runtime::engine::nft_quote`], as every string in rule text.
pub(super) fn netdev_table_text(table: &str, interface: &str, ethertype: u16) -> String {
    format!(
        "table netdev {table} {{\n  chain ingress {{\n    type filter hook ingress device {i} priority -500; policy accept;\n    ether type != {et} counter drop comment {c}\n  }}\n  chain egress {{\n    type filter hook egress device {i} priority -500; policy accept;\n    ether type != {et} counter drop comment {c}\n  }}\n}}\n",
        i = crate::runtime::engine::nft_quote(interface),
        c = crate::runtime::engine::nft_quote("not l2sec"),
        et = format!("0x{ethertype:04x}"),
    )
}

/// Frames the port's nftables table dropped (not l2sec), in and out.
pub(super) fn nft_clear_drops(table: &str) -> (u64, u64) {
    let out = match std::process::Command::new("nft")
        .args(["-j", "list", "table", "netdev", table])
        .output()
    {
        Ok(o) if o.status.success() => o.stdout,
        _ => return (0, 0),
    };
    let v: Value = serde_json::from_slice(&out).unwrap_or(Value::Null);
    let (mut i, mut o) = (0, 0);
    for it in v["nftables"].as_array().into_iter().flatten() {
        let r = &it["rule"];
        for e in r["expr"].as_array().into_iter().flatten() {
            if let Some(n) = e["counter"]["packets"].as_u64() {
                if r["chain"] == "egress" {
                    o += n;
                } else {
                    i += n;
                }
            }
        }
    }
    (i, o)
}

/// The name of the file in the state directory that holds the group epoch of `interface`.
fn epoch_file(interface: &str) -> String {
    format!("l2sec-{interface}.epoch")
}

/// The group epoch of this start: `max(unix_us, last + 1)`, `last` being the epoch stored in `dir` for
/// `interface` (if any), written durably to `dir` before it is returned. Errors name `l2sec.state_dir`.
pub fn next_epoch(
    dir: &StateDir,
    interface: &str,
    unix_us: u64,
) -> std::result::Result<u64, ConfigError> {
    let name = epoch_file(interface);
    let last = dir
        .read_u64(&name)
        .or_else(|e| cerr("l2sec.state_dir", e))?;
    // (u64::MAX would take half a million years of microseconds: only a damaged or forged file holds it.)
    let Some(next) = last.map_or(Some(1), |l| l.checked_add(1)) else {
        let why =
            format!("{name} holds the last possible epoch: change the group secret, remove it");
        return cerr("l2sec.state_dir", why);
    };
    let epoch = next.max(unix_us);
    dir.write_u64(&name, epoch).or_else(|e| {
        cerr(
            "l2sec.state_dir",
            format!(
                "cannot store the group epoch in {}: {e}",
                dir.path().display()
            ),
        )
    })?;
    Ok(epoch)
}

/// `netveil check` of an l2sec configuration: the file, its key files, that the port exists, and, without
/// changing anything, that the state directory is not something else and that a stored epoch is readable.
pub fn check(cfg: &L2Config) -> Result<()> {
    port_link(&cfg.interface)?;
    let d = &cfg.state_dir;
    if d.exists() && !d.is_dir() {
        return Err(ConfigError {
            key: "l2sec.state_dir".into(),
            reason: format!("{} is not a directory", d.display()),
        }
        .into());
    }
    // Only root's and persistent (the note about fresh keys is for the IP engine's sequence marks).
    StateDir::check(&cfg.state_location(), "l2sec.state_dir")?;
    let f = d.join(epoch_file(&cfg.interface));
    if let Ok(t) = std::fs::read_to_string(&f) {
        if t.trim().parse::<u64>().is_err() {
            return Err(ConfigError {
                key: "l2sec.state_dir".into(),
                reason: format!("{} is damaged (not a number)", f.display()),
            }
            .into());
        }
    }
    Ok(())
}

/// The L2 engine's configuration, checked, with its node built and its epoch persisted, before any change to the
/// system.
pub struct Prepared {
    cfg: L2Config,
    node: Node,
    mac: [u8; 6],
    ip: (Ipv4Addr, u8),
    addrs: Vec<(Ipv4Addr, u8)>,
    mtu: u16,
    started: Instant,
}

impl Prepared {
    /// The control socket the configuration names.
    pub fn control_socket(&self) -> &Path {
        &self.cfg.control_socket
    }

    /// The control group's id, if the configuration names one.
    pub fn control_group(&self) -> Option<u32> {
        self.cfg.control_group
    }
}

/// Checks what `up` needs of the `[l2sec]` section (the port, its addresses, the state directory), persists the
/// next group epoch and builds the node, changing nothing on the system.
pub fn prepare(cfg: L2Config) -> Result<Prepared> {
    let (mac, port_mtu) = port_link(&cfg.interface)?;
    let addrs = port_addrs(&cfg.interface);
    let ip = match cfg.address.or_else(|| addrs.first().copied()) {
        Some(a) => a,
        None => {
            return Err(Error::Usage(format!(
                "l2sec.address: not given, and {} has no IPv4 address to take over",
                cfg.interface
            )))
        }
    };
    // The group epoch, persisted before anything is set up (a state directory that cannot be used is a
    // configuration error: nothing applied).
    let state = StateDir::open(&cfg.state_location(), "l2sec.state_dir")?;
    let since_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let epoch = next_epoch(&state, &cfg.interface, since_unix.as_micros() as u64)?;
    let started = Instant::now();
    let node = Node::new(
        cfg.node_config(mac, ip.0, ip.1, epoch),
        started,
        since_unix.as_secs(),
        Box::new(netveil_crypto::rand::OsRng),
    )
    .map_err(|e| Error::Usage(format!("l2sec: {e}")))?;
    let (head, tail) = node.overhead();
    let mtu = match cfg.mtu {
        Some(m) => m,
        None => (port_mtu as usize).saturating_sub(head + tail).max(576) as u16,
    };
    Ok(Prepared {
        cfg,
        node,
        mac,
        ip,
        addrs,
        mtu,
        started,
    })
}

/// Sets up the port, the TAP device and the port's nftables table (each change recorded in `undo`) and starts the
/// data-plane threads. `control`: the control socket, for the startup line.
pub fn start(p: Prepared, undo: &mut Undo, control: &Path) -> Result<L2Engine> {
    let Prepared {
        cfg,
        node,
        mac,
        ip,
        addrs,
        mtu,
        started,
    } = p;

    let tap = Tap::open_offload(&cfg.tap, mtu, Some(mac), cfg.offload)
        .map_err(Error::io(format!("cannot create TAP device {}", cfg.tap)))?;
    // First of all, the port carries nothing but l2sec, in and out (nothing escapes while the rest is set up).
    let table = nft_table(&cfg.tap);
    let _ = run(&["nft", "delete", "table", "netdev", &table]);
    run_stdin(
        &["nft", "-f", "-"],
        &netdev_table_text(&table, &cfg.interface, cfg.ethertype),
    )?;
    undo.push(&["nft", "delete", "table", "netdev", &table]);
    // The port: no ARP, no IPv6, its IPv4 addresses moved to the TAP.
    run(&["ip", "link", "set", "dev", &cfg.interface, "arp", "off"])?;
    undo.push(&["ip", "link", "set", "dev", &cfg.interface, "arp", "on"]);
    let v6 = format!("net.ipv6.conf.{}.disable_ipv6", cfg.interface);
    if let Ok(o) = std::process::Command::new("sysctl")
        .args(["-n", &v6])
        .output()
    {
        let old = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if old == "0" {
            let _ = run(&["sysctl", "-qw", &format!("{v6}=1")]);
            undo.push(&["sysctl", "-qw", &format!("{v6}=0")]);
        }
    }
    for (a, l) in &addrs {
        let s = format!("{a}/{l}");
        run(&["ip", "addr", "del", &s, "dev", &cfg.interface])?;
        undo.push(&["ip", "addr", "add", &s, "brd", "+", "dev", &cfg.interface]);
    }
    let _ = run(&[
        "sysctl",
        "-qw",
        &format!("net.ipv6.conf.{}.disable_ipv6=1", cfg.tap),
    ]);
    run(&[
        "ip",
        "addr",
        "add",
        &format!("{}/{}", ip.0, ip.1),
        "brd",
        "+",
        "dev",
        &cfg.tap,
    ])?;
    run(&["ip", "link", "set", "dev", &cfg.tap, "up"])?;
    run(&["ip", "link", "set", "dev", &cfg.interface, "up"])?;

    let sock = PacketSocket::bind(&cfg.interface, cfg.ethertype).map_err(Error::io(format!(
        "cannot open AF_PACKET socket on {}",
        cfg.interface
    )))?;
    sock.set_buffer_sizes(8 << 20).ok();
    // The threads wait with poll and read only what is waiting (see `worker`); sends block (no frame is lost to
    // a full queue), and the timeouts are a safety net.
    sock.set_recv_timeout(Duration::from_millis(200))
        .map_err(Error::io("socket timeout"))?;
    tap.set_recv_timeout(Duration::from_millis(200))
        .map_err(Error::io("TAP timeout"))?;
    let lanes = (
        TxLane::new(node.overhead(), mtu),
        RxLane::new(mtu, tap.offload()),
    );

    let st = Arc::new(State {
        node: Mutex::new(node),
        mac,
        ip,
        mtu,
        started,
        nft: table,
        stop: AtomicBool::new(false),
        order: Default::default(),
        tx: Mutex::new(lanes.0),
        rx: Mutex::new(lanes.1),
        sleeping: Default::default(),
        cfg,
    });
    let (tap, sock) = (Arc::new(tap), Arc::new(sock));
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .map_err(Error::io("thread"))
    };
    let worker = |name: &str, home: Home| {
        let (st, tap, sock) = (st.clone(), tap.clone(), sock.clone());
        spawn(name, Box::new(move || worker::run(&st, &tap, &sock, home)))
    };
    let tx = worker("l2-tx", Home::Tap)?;
    let rx = worker("l2-rx", Home::Port)?;
    let epoch = st.node.lock().map(|n| n.epoch()).unwrap_or(0);
    tracing::info!(
        "{}: l2sec up (TAP {}, {} {}/{}, MTU {}, EtherType 0x{:04x}, group {} epoch {}, suites {}, {} peer keys); control socket {}",
        st.cfg.interface,
        st.cfg.tap,
        mac_str(&st.mac),
        st.ip.0,
        st.ip.1,
        st.mtu,
        st.cfg.ethertype,
        st.cfg.group_suite.name(),
        epoch,
        st.cfg.suites.iter().map(|s| s.name()).collect::<Vec<_>>().join(" "),
        st.cfg.peers.len(),
        control.display()
    );
    let null = std::iter::once(&st.cfg.group_suite)
        .chain(&st.cfg.suites)
        .any(|s| s.is_null());
    if null {
        tracing::warn!(
            "{}: the null suite is configured (insecure_null): those frames go in clear and unauthenticated",
            st.cfg.interface
        );
    }
    let now = Instant::now();
    Ok(L2Engine {
        st,
        tx,
        rx,
        tap,
        watch: crate::runtime::log::DropWatch::new(now),
        looked: now,
    })
}
