//! The control socket (a Unix socket, mode 0600, under /run/netveil): `netveil status` and `netveil keys` ask a
//! running daemon. One request line (`status` or `keys`), one JSON answer.

use crate::daemon::Shared;
use crate::{Error, Result};
use netveil_ipsec::sa::{Direction, Suite};
use netveil_ipsec::Mode;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Longest request line accepted (the known requests are a few bytes).
pub const MAX_REQUEST: usize = 256;
/// Clients served at once; more wait in the listen queue.
pub const MAX_CLIENTS: usize = 8;
/// How long a client may take to send its request, and to take its answer.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// Binds the control socket (replacing a stale one), mode 0600, in a directory created mode 0700 (the default
/// directory is made 0700 if it exists with wider permissions).
pub fn listen(path: &Path) -> Result<UnixListener> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() && !dir.is_dir() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(Error::io(format!("cannot create {}", dir.display())))?;
        }
        if dir == Path::new(crate::config::RUN_DIR) {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(Error::io(format!("cannot restrict {}", dir.display())))?;
        }
    }
    if UnixStream::connect(path).is_ok() {
        return Err(Error::Usage(format!(
            "{} is in use: is another netveil running on this interface?",
            path.display()
        )));
    }
    let _ = std::fs::remove_file(path);
    // The socket is created 0600 (no moment with wider permissions); the daemon has no other thread yet, so the
    // process-wide umask can be narrowed around the bind.
    let l = netveil_io::os::with_umask(0o177, || UnixListener::bind(path));
    let l = l.map_err(Error::io(format!("cannot bind {}", path.display())))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(Error::io("chmod control socket"))?;
    Ok(l)
}

/// Reads one request line of at most [`MAX_REQUEST`] bytes (the newline optional at the end of the stream).
fn read_request(c: &mut UnixStream) -> std::result::Result<String, &'static str> {
    let mut buf = [0u8; MAX_REQUEST + 1];
    let mut n = 0;
    // One deadline for the whole request: a client that trickles a byte now and then is cut off too.
    let deadline = std::time::Instant::now() + CLIENT_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || c.set_read_timeout(Some(left)).is_err() {
            return Err("no complete request in time");
        }
        match c.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if buf[..n].contains(&b'\n') {
                    break;
                }
                if n > MAX_REQUEST {
                    return Err("request too long");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err("no complete request in time"),
        }
    }
    let line = buf[..n].split(|&b| b == b'\n').next().unwrap_or(&[]);
    std::str::from_utf8(line)
        .map(|s| s.trim().to_string())
        .map_err(|_| "the request is not text")
}

/// Answers one-line requests with `answer` until `stop` is set (checked at each connection). Up to
/// [`MAX_CLIENTS`] clients are served at once, each with [`CLIENT_TIMEOUT`] to send its request and take the
/// answer, so an idle or slow client never holds the others. Requests longer than [`MAX_REQUEST`] are refused.
/// `answer` must not repeat the request in its reply (a request line may hold anything).
pub fn serve_lines(
    l: UnixListener,
    stop: &std::sync::atomic::AtomicBool,
    answer: impl Fn(&str) -> Value + Sync,
) {
    let active = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for conn in l.incoming() {
            if stop.load(Relaxed) {
                return;
            }
            let Ok(mut c) = conn else { continue };
            let _ = c.set_write_timeout(Some(CLIENT_TIMEOUT));
            if active.load(Relaxed) >= MAX_CLIENTS {
                let _ = c.write_all(
                    json!({ "error": "busy: too many control clients" })
                        .to_string()
                        .as_bytes(),
                );
                continue;
            }
            active.fetch_add(1, Relaxed);
            let (active, answer) = (&active, &answer);
            let spawned = std::thread::Builder::new()
                .name("nv-ctl-client".into())
                .spawn_scoped(scope, move || {
                    let a = match read_request(&mut c) {
                        Ok(req) => answer(&req),
                        Err(why) => json!({ "error": why }),
                    };
                    let _ = c.write_all(a.to_string().as_bytes());
                    active.fetch_sub(1, Relaxed);
                });
            if spawned.is_err() {
                active.fetch_sub(1, Relaxed);
            }
        }
    });
}

/// Answers requests until the daemon stops.
pub fn serve(sh: &Shared, l: UnixListener) {
    serve_lines(l, &sh.stop, |req| match req {
        "status" => status_json(sh),
        "keys" => keys_json(sh),
        "rotate" => match &sh.psp {
            Some(st) => {
                let before = st.rotations.load(Relaxed);
                st.rotate_requests.fetch_add(1, Relaxed);
                // Wait (briefly) for the key exchange to carry it out, so that `netveil rotate` returns after.
                let t = std::time::Instant::now();
                while st.rotations.load(Relaxed) == before
                    && t.elapsed() < std::time::Duration::from_secs(3)
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                let d = st.device.read().map(|d| d.generation()).unwrap_or(0);
                json!({ "rotated": st.rotations.load(Relaxed) != before, "generation": d })
            }
            None => json!({ "error": "no [psp] section: nothing to rotate" }),
        },
        "stop" => {
            // `netveil down`: stop, and remove the fail-closed filters on the way out.
            crate::daemon::DOWN.store(true, Relaxed);
            netveil_io::os::stop_flag().store(true, Relaxed);
            json!({ "stopping": true })
        }
        _ => json!({ "error": "unknown request (known: status, keys, rotate, stop)" }),
    })
}

/// Asks a running daemon to stop and remove its setup, fail-closed filters included (`netveil down`).
pub fn request_stop(socket: &Path) -> Result<()> {
    let v = ask(socket, "stop")?;
    if v["stopping"] == true {
        Ok(())
    } else {
        Err(Error::Other(format!(
            "the daemon on {} did not accept the stop request: {}",
            socket.display(),
            v["error"].as_str().unwrap_or("no reason given")
        )))
    }
}

fn suite_name(s: &Suite) -> String {
    match s {
        Suite::Esp(e) => e.name(),
        Suite::Ah(a) => a.name(),
    }
}

/// The daemon's state as JSON (what `netveil status --json` prints).
pub fn status_json(sh: &Shared) -> Value {
    let now = sh.now();
    let sas: Vec<Value> = sh
        .sad
        .iter()
        .map(|sa| {
            let p = &sa.params;
            let c = sa.counters.snapshot();
            let (mode, local, remote) = match p.mode {
                Mode::Transport => ("transport", None, None),
                Mode::Tunnel { local, remote } => {
                    ("tunnel", Some(local.to_string()), Some(remote.to_string()))
                }
            };
            json!({
                "name": p.name,
                "direction": if p.direction == Direction::Out { "out" } else { "in" },
                "protocol": match p.suite { Suite::Esp(_) => "esp", Suite::Ah(_) => "ah" },
                "spi": format!("{:#010x}", p.spi),
                "mode": mode,
                "local": local,
                "remote": remote,
                "suite": suite_name(&p.suite),
                "esn": p.esn,
                "encap": p.encap.map(|u| format!("udp {}->{}", u.local_port, u.remote_port)),
                "packets": c.packets,
                "bytes": c.bytes,
                "dropped": c.dropped,
                "auth_failed": c.auth_failed,
                "replayed": c.replayed,
                "seq": if p.direction == Direction::Out { sa.seq_last() } else { sa.replay_top() },
                "replay_window": p.replay_window,
                "lifetime": format!("{:?}", sa.lifetime_state(now)).to_lowercase(),
                "rekey_needed": sa.rekey_needed.load(Relaxed),
            })
        })
        .collect();
    let mut drops = serde_json::Map::new();
    for (name, n) in sh.tx_drops.snapshot() {
        drops.insert(format!("tx:{name}"), json!(n));
    }
    for (name, n) in sh.rx_drops.snapshot() {
        drops.insert(format!("rx:{name}"), json!(n));
    }
    drops.insert("rx:socket-filter-or-full".into(), json!(sh.kernel_drops()));
    if let Some(t) = &sh.nft_table {
        drops.insert(
            "rx:clear-but-protected".into(),
            json!(crate::daemon::nft_drops(t, "input")),
        );
        drops.insert(
            "rx:not-from-a-peer".into(),
            json!(crate::daemon::nft_drops(t, "prerouting")),
        );
        drops.insert(
            "tx:outside-tun-blocked".into(),
            json!(crate::daemon::nft_drops(t, "output") + crate::daemon::nft_drops(t, "forward")),
        );
    }
    json!({
        "interface": sh.tun_name,
        "uptime_seconds": now,
        "psp": sh.psp.as_ref().map(|st| psp_json(st)),
        "tx": { "packets": sh.tx_packets.load(Relaxed), "bytes": sh.tx_bytes.load(Relaxed), "bypassed": sh.bypassed.load(Relaxed) },
        "rx": { "packets": sh.rx_packets.load(Relaxed), "bytes": sh.rx_bytes.load(Relaxed) },
        "sas": sas,
        "drops": drops,
        "policies": sh.config.policies.iter().map(|p| json!({
            "name": p.name,
            "direction": format!("{:?}", p.direction).to_lowercase(),
            "src": p.selector.src.to_string(),
            "dst": p.selector.dst.to_string(),
            "proto": p.selector.proto,
            "action": match p.action { netveil_sa::policy::Action::Protect(_) => "protect", netveil_sa::policy::Action::Bypass => "bypass", netveil_sa::policy::Action::Discard => "discard" },
            "sas": p.sas.iter().map(|i| sh.config.sas[*i].name.clone()).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// PSP: the device (generation, phase, receive SAs), the association and the specification's counters.
fn psp_json(st: &crate::psp_ctl::PspState) -> Value {
    let (gen, phase, rx_sas, windows, c) = match st.device.read() {
        Ok(d) => (
            d.generation(),
            d.phase(),
            d.rx_spis(),
            d.rx_windows(),
            d.stats.snapshot(),
        ),
        Err(_) => return json!(null),
    };
    let top = |spi: u32| {
        windows
            .iter()
            .find(|(s, _)| *s == spi)
            .and_then(|(_, w)| w.map(|(top, _)| top))
    };
    json!({
        "peer": st.cfg.remote.to_string(),
        "local": st.cfg.local.to_string(),
        "mode": if st.cfg.mode == netveil_psp::Mode::Tunnel { "tunnel" } else { "transport" },
        "version": st.cfg.version.number(),
        "connected": st.connected.load(Relaxed),
        "generation": gen,
        "phase": phase,
        "rotations": st.rotations.load(Relaxed),
        "tx_spi": format!("{:#010x}", st.tx_spi.load(Relaxed)),
        "rx_spi": format!("{:#010x}", st.rx_spi.load(Relaxed)),
        "rx_sas": rx_sas.iter().map(|(s, g)| json!({"spi": format!("{s:#010x}"), "generation": g, "replay_top": top(*s)})).collect::<Vec<_>>(),
        "assoc_sent": st.assoc_sent.load(Relaxed),
        "assoc_received": st.assoc_received.load(Relaxed),
        "replay_window": st.cfg.replay_window,
        "stats": {
            "rx_packets": c.rx_packets, "rx_bytes": c.rx_bytes, "rx_auth_fail": c.rx_auth_fail,
            "rx_error": c.rx_error, "rx_bad": c.rx_bad, "rx_unknown_spi": c.rx_unknown_spi,
            "rx_replay": c.rx_replay, "tx_packets": c.tx_packets, "tx_bytes": c.tx_bytes,
            "tx_error": c.tx_error, "tx_no_sa": st.tx_no_sa.load(Relaxed),
        },
    })
}

/// `netveil rotate`: rotates the PSP master keys of a running daemon and re-associates with the peer.
pub fn rotate(socket: &Path) -> Result<()> {
    let v = ask(socket, "rotate")?;
    if let Some(e) = v["error"].as_str() {
        return Err(Error::Usage(e.to_string()));
    }
    println!(
        "rotated: {}, generation {}",
        v["rotated"].as_bool().unwrap_or(false),
        v["generation"]
    );
    Ok(())
}

/// The running SAs' keys, with Wireshark's algorithm names (only over the root-only control socket).
fn keys_json(sh: &Shared) -> Value {
    let sas: Vec<Value> = sh
        .sad
        .iter()
        .filter_map(|sa| {
            let p = &sa.params;
            let Suite::Esp(es) = p.suite else { return None };
            let (fam, src, dst) = match p.mode {
                Mode::Tunnel { local, remote } => {
                    let (s, d) = if p.direction == Direction::Out {
                        (local, remote)
                    } else {
                        (remote, local)
                    };
                    (
                        if s.is_ipv4() { "IPv4" } else { "IPv6" },
                        s.to_string(),
                        d.to_string(),
                    )
                }
                Mode::Transport => ("Any", "*".to_string(), "*".to_string()),
            };
            Some(json!({
                "name": p.name,
                "family": fam,
                "src": src,
                "dst": dst,
                "spi": format!("{:#010x}", p.spi),
                "enc_alg": es.enc.wireshark_name(),
                "enc_key": format!("0x{}", hex::encode(&p.enc_key[..])),
                "auth_alg": es.integ.map_or("NULL", |i| i.rfc_name()),
                "auth_key": format!("0x{}", hex::encode(&p.auth_key[..])),
                "esn": p.esn,
            }))
        })
        .collect();
    json!({ "sas": sas })
}

/// The message for a failed connection to the control socket: what is wrong, and what to do.
pub fn connect_error(socket: &Path, e: &std::io::Error) -> Error {
    use std::io::ErrorKind::*;
    Error::Usage(match e.kind() {
        NotFound | ConnectionRefused => format!(
            "no netveil daemon at {}: is `netveil up` running (and is this its interface or --socket)?",
            socket.display()
        ),
        PermissionDenied => format!(
            "permission denied on {}: the control socket is for root only (run as root)",
            socket.display()
        ),
        _ => format!("cannot reach the netveil daemon at {}: {e}", socket.display()),
    })
}

fn ask(socket: &Path, req: &str) -> Result<Value> {
    let mut s = UnixStream::connect(socket).map_err(|e| connect_error(socket, &e))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    s.write_all(format!("{req}\n").as_bytes())
        .map_err(Error::io("control socket"))?;
    s.shutdown(std::net::Shutdown::Write).ok();
    let mut buf = String::new();
    std::io::Read::read_to_string(&mut s, &mut buf).map_err(Error::io("control socket"))?;
    serde_json::from_str(&buf).map_err(|e| Error::Other(format!("bad answer from daemon: {e}")))
}

/// `netveil status`.
pub fn status(socket: &Path, json_out: bool) -> Result<()> {
    let v = ask(socket, "status")?;
    if json_out {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    print!("{}", render_status(&v));
    Ok(())
}

pub(crate) fn human_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut f = b as f64;
    let mut u = 0;
    while f >= 1024.0 && u + 1 < units.len() {
        f /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{f:.2} {}", units[u])
    }
}

/// The human-readable status table.
pub fn render_status(v: &Value) -> String {
    if v.get("l2sec").is_some() {
        return crate::l2::render_status(v);
    }
    let mut o = String::new();
    let up = v["uptime_seconds"].as_u64().unwrap_or(0);
    o.push_str(&format!(
        "interface: {}  up {}h{:02}m{:02}s\n  tx: {} packets, {}   rx: {} packets, {}\n\n",
        v["interface"].as_str().unwrap_or("?"),
        up / 3600,
        up / 60 % 60,
        up % 60,
        v["tx"]["packets"],
        human_bytes(v["tx"]["bytes"].as_u64().unwrap_or(0)),
        v["rx"]["packets"],
        human_bytes(v["rx"]["bytes"].as_u64().unwrap_or(0)),
    ));
    o.push_str(&format!(
        "{:<14} {:<3} {:<5} {:<10} {:<9} {:<22} {:>10} {:>11} {:>7} {:>12}\n",
        "SA", "DIR", "PROTO", "SPI", "MODE", "SUITE", "PACKETS", "BYTES", "DROPS", "SEQ"
    ));
    for sa in v["sas"].as_array().into_iter().flatten() {
        let mut suite = sa["suite"].as_str().unwrap_or("").to_string();
        if sa["esn"].as_bool() == Some(true) {
            suite.push_str("-esn");
        }
        o.push_str(&format!(
            "{:<14} {:<3} {:<5} {:<10} {:<9} {:<22} {:>10} {:>11} {:>7} {:>12}{}\n",
            sa["name"].as_str().unwrap_or(""),
            sa["direction"].as_str().unwrap_or(""),
            sa["protocol"].as_str().unwrap_or(""),
            sa["spi"].as_str().unwrap_or(""),
            sa["mode"].as_str().unwrap_or(""),
            suite,
            sa["packets"].as_u64().unwrap_or(0),
            human_bytes(sa["bytes"].as_u64().unwrap_or(0)),
            sa["dropped"].as_u64().unwrap_or(0),
            sa["seq"].as_u64().unwrap_or(0),
            if sa["rekey_needed"].as_bool() == Some(true) {
                "  (rekey needed)"
            } else {
                ""
            }
        ));
        if let (Some(l), Some(r)) = (sa["local"].as_str(), sa["remote"].as_str()) {
            o.push_str(&format!("{:<14} {} <-> {}\n", "", l, r));
        }
    }
    let p = &v["psp"];
    if p.is_object() {
        let st = &p["stats"];
        let n = |k: &str| st[k].as_u64().unwrap_or(0);
        o.push_str(&format!(
            "\nPSP {} v{} {} <-> {}  peer {}  generation {} (phase {}, {} rotations)\n  tx SPI {}  rx SPI {}  receive SAs {}\n",
            p["mode"].as_str().unwrap_or(""),
            p["version"],
            p["local"].as_str().unwrap_or(""),
            p["peer"].as_str().unwrap_or(""),
            if p["connected"].as_bool() == Some(true) { "connected" } else { "not connected" },
            p["generation"],
            p["phase"],
            p["rotations"],
            p["tx_spi"].as_str().unwrap_or(""),
            p["rx_spi"].as_str().unwrap_or(""),
            p["rx_sas"].as_array().map(|a| a.len()).unwrap_or(0),
        ));
        o.push_str(&format!(
            "  rx: {} packets, {}, auth-fail {}, error {}, bad {} (unknown SPI {}, replay {})\n  tx: {} packets, {}, error {} (no SA {})\n",
            n("rx_packets"),
            human_bytes(n("rx_bytes")),
            n("rx_auth_fail"),
            n("rx_error"),
            n("rx_bad"),
            n("rx_unknown_spi"),
            n("rx_replay"),
            n("tx_packets"),
            human_bytes(n("tx_bytes")),
            n("tx_error"),
            n("tx_no_sa"),
        ));
    }
    let drops: Vec<(String, u64)> = v["drops"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, n)| n.as_u64().filter(|n| *n > 0).map(|n| (k.clone(), n)))
                .collect()
        })
        .unwrap_or_default();
    o.push_str("\ndrops:");
    if drops.is_empty() {
        o.push_str(" none\n");
    } else {
        o.push('\n');
        for (k, n) in drops {
            o.push_str(&format!("  {k:<28} {n}\n"));
        }
    }
    o
}

/// `netveil keys --wireshark DIR`: writes DIR/esp_sa (Wireshark's ESP SA table).
pub fn keys_wireshark(socket: &Path, dir: &Path) -> Result<()> {
    let v = ask(socket, "keys")?;
    let mut out = zeroize::Zeroizing::new(String::new());
    for sa in v["sas"].as_array().into_iter().flatten() {
        let f = |k: &str| sa[k].as_str().unwrap_or("").to_string();
        // Wireshark's table knows only "IPv4" and "IPv6" (an unknown value makes it ignore the line silently): a
        // transport-mode SA (family "Any", wildcard addresses) gets one line per family.
        let families = match f("family").as_str() {
            "Any" => vec!["IPv4".to_string(), "IPv6".to_string()],
            fam => vec![fam.to_string()],
        };
        for fam in families {
            out.push_str(&format!(
                "\"{}\",\"{}\",\"{}\",\"{}\",\"{}\",\"{}\",\"{}\",\"{}\"\n",
                fam,
                f("src"),
                f("dst"),
                f("spi"),
                f("enc_alg"),
                f("enc_key"),
                f("auth_alg"),
                f("auth_key")
            ));
        }
    }
    std::fs::create_dir_all(dir).map_err(Error::io(format!("cannot create {}", dir.display())))?;
    let path = dir.join("esp_sa");
    // A new file (mode 0600) renamed over the old one: a symlink planted at esp_sa is replaced, not followed, and an
    // existing file's wider permissions are not kept.
    crate::state::write_private(&path, out.as_bytes())
        .map_err(Error::io(format!("cannot write {}", path.display())))?;
    eprintln!(
        "wrote {} SAs to {}; decrypt with: tshark -o esp.enable_encryption_decode:TRUE -o esp.enable_authentication_check:TRUE ... (with {} as the Wireshark configuration directory)",
        v["sas"].as_array().map_or(0, |a| a.len()),
        path.display(),
        dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The control socket's directory is created 0700 and the socket is 0600.
    #[test]
    fn socket_directory_is_private() {
        let base = std::env::temp_dir().join(format!("netveil-ctl-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let sock = base.join("run/x.sock");
        let l = listen(&sock).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&base.join("run")), 0o700);
        assert_eq!(mode(&sock), 0o600);
        drop(l);
        let _ = std::fs::remove_dir_all(&base);
    }

    /// A client that sends a byte now and then, never a whole line, is cut off after [`CLIENT_TIMEOUT`] in all.
    #[test]
    fn a_trickling_client_is_cut_off() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let t = std::time::Instant::now();
        let writer = std::thread::spawn(move || {
            for _ in 0..12 {
                if a.write_all(b"s").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(400));
            }
        });
        assert_eq!(read_request(&mut b), Err("no complete request in time"));
        let took = t.elapsed();
        assert!(
            took >= CLIENT_TIMEOUT && took < CLIENT_TIMEOUT + Duration::from_millis(1500),
            "{took:?}"
        );
        drop(b);
        writer.join().unwrap();
    }
}
