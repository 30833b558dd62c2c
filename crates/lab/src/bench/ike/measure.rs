//! The measurements in namespaces: netveil (a `netveil up` responder, the load generator as initiator) and
//! strongSwan (charon to charon), each in a fresh two-namespace lab.

use super::loader::Loader;
use super::row::{IkeRow, Sizes};
use super::suites::{
    initiator_conn, netveil_responder_config, suite_creds, Suite, CHILD, CONN, ESP, PSK,
};
use crate::bench::ping;
use crate::lab::{self, Daemon, Lab};
use crate::strongswan::{
    self, CharonOptions, KeyType, Pki, SwanAuth, SwanPair, SwanPsk, Unique, PAIR_IDS,
};
use crate::{Error, Result};
use std::path::Path;
use std::time::Duration;

/// A process's VmRSS in KiB.
pub fn rss_kib(pid: u32) -> Result<u64> {
    let p = format!("/proc/{pid}/status");
    let s = std::fs::read_to_string(&p).map_err(Error::io(format!("read {p}")))?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| Error::File {
            path: p.into(),
            why: "no VmRSS".into(),
        })
}

/// The CHILD_SAs a netveil daemon has installed by the IKE driver (its inbound SAs `ike-N-in`), from `status`.
fn ike_children(d: &Daemon) -> Result<usize> {
    fn walk(v: &serde_json::Value, n: &mut usize) {
        match v {
            serde_json::Value::Object(m) => {
                if m.get("name")
                    .and_then(|x| x.as_str())
                    .is_some_and(|x| x.starts_with("ike-") && x.ends_with("-in"))
                {
                    *n += 1;
                }
                m.values().for_each(|x| walk(x, n));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, n)),
            _ => {}
        }
    }
    let mut n = 0;
    walk(&d.ask("status")?, &mut n);
    Ok(n)
}

/// The install times (ms) of the CHILD_SAs in a daemon's log (`..., install 1.234 ms)`).
pub(super) fn install_times(log: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| l.contains("ike: CHILD_SA "))
        .filter_map(|l| {
            l.rsplit_once(", install ")?
                .1
                .strip_suffix(" ms)")?
                .parse()
                .ok()
        })
        .collect()
}

/// Two namespaces joined by a veth pair with the [`SwanPair`] addresses (inner ones on `lo` of `a` only: `b`'s
/// is on the daemon's TUN).
fn two_namespaces(lab: &mut Lab) -> Result<[String; 2]> {
    let a = lab.add_ns("a")?;
    let b = lab.add_ns("b")?;
    for ns in [&a, &b] {
        for k in ["all", "default"] {
            lab.exec_ok(
                ns,
                &[
                    "sysctl",
                    "-qw",
                    &format!("net.ipv6.conf.{k}.disable_ipv6=1"),
                ],
            )?;
        }
    }
    lab.veth(&a, "veth-a", &b, "veth-b")?;
    for (i, (ns, dev)) in [(&a, "veth-a"), (&b, "veth-b")].into_iter().enumerate() {
        lab.addr(ns, dev, &format!("{}/24", SwanPair::outer(i)))?;
    }
    lab.addr(&a, "lo", &format!("{}/32", SwanPair::inner(0)))?;
    Ok([a, b])
}

pub(super) fn measure_netveil(bin: &Path, s: &Suite, z: Sizes) -> Result<IkeRow> {
    let mut row = IkeRow::empty(format!("netveil ike {}", s.name));
    let mut lab = Lab::new("nvbike")?.with_netveil(bin);
    let creds = suite_creds(s, lab.dir())?;
    let ns = two_namespaces(&mut lab)?;
    let config = netveil_responder_config(&lab, s, creds.as_ref());
    let daemon = lab.start_daemon(&ns[1], "nvbike", &config)?;
    let pid = daemon
        .pid()
        .ok_or_else(|| Error::internal("the responder daemon has no pid"))?;
    let conn = initiator_conn(s, 0, creds.as_ref())?;
    let setups = z.setups;
    let fail = |e: Error| {
        let log = daemon.log();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        e.logged(format!(
            "; responder log: {}",
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ))
    };
    let (mut loader, ms) = lab::spawn_in_ns(&ns[0], move || -> Result<(Loader, Vec<f64>)> {
        let mut l = Loader::open(conn)?;
        l.sequential(2)?;
        let ms = l.sequential(setups)?;
        Ok((l, ms))
    })?
    .join()
    .map_err(|_| Error::internal("the load generator panicked"))?
    .and_then(|r| r)
    .map_err(fail)?;
    row.setups(&ms);
    let before = rss_kib(pid)?;
    row.handshakes = z.handshakes;
    row.window = z.window;
    match loader.concurrent(z.handshakes, z.window) {
        Ok(r) => {
            row.handshakes_per_s = r;
            // The last IKE_AUTH answers left the responder after its children were installed (the driver
            // installs first); give its loop a moment to finish the turn, then read.
            std::thread::sleep(Duration::from_millis(200));
            let after = rss_kib(pid)?;
            row.memory(before, after);
        }
        Err(e) => row.note = Some(format!("handshakes/s: {}", fail(e))),
    }
    row.responder_sas = ike_children(&daemon).ok();
    let installs = install_times(&daemon.log());
    if !installs.is_empty() {
        row.install_ms = Some(ping::median(&installs));
    }
    drop(loader);
    Ok(row)
}

// ---------------------------------------------------------------------------------------------------------------
// strongSwan
// ---------------------------------------------------------------------------------------------------------------

pub(super) fn measure_strongswan(s: &Suite, z: Sizes) -> Result<IkeRow> {
    let mut row = IkeRow::empty(format!("strongswan ike {}", s.name));
    if let Some(why) = strongswan::missing() {
        row.cannot_run = Some(why);
        return Ok(row);
    }
    let mut lab = Lab::new("nvbiks")?;
    let opts = CharonOptions {
        // As a bench runs it: errors only in the log; every initiate a new IKE SA; no COOKIEs or drops at many
        // half-open SAs from one address.
        log_level: 0,
        log_subsystems: Vec::new(),
        reuse_ikesa: false,
        dos_protection: false,
        ..CharonOptions::default()
    };
    let p = SwanPair::up(&mut lab, &opts)?;
    let auth: [SwanAuth; 2] = if s.cert {
        let pki = Pki::new(&lab.dir().join("pki"), KeyType::EcdsaP256)?;
        [
            SwanAuth::Pubkey(pki.issue(PAIR_IDS[0])?),
            SwanAuth::Pubkey(pki.issue(PAIR_IDS[1])?),
        ]
    } else {
        let k = SwanPsk::new(PSK)?;
        [SwanAuth::Psk(k.clone()), SwanAuth::Psk(k)]
    };
    let [a0, a1] = auth;
    let conn = |side, auth| {
        let mut c = SwanPair::conn(side, CONN, auth, s.ike, CHILD, ESP);
        c.unique = Unique::Never;
        c
    };
    p.load([&[conn(0, a0)], &[conn(1, a1)]])?;
    let [a, b] = &p.charons;
    let pid = b
        .pid()
        .ok_or_else(|| Error::internal("charon has no pid"))?;
    a.handshake_ms(CONN, CHILD, 2)?;
    let ms = a.handshake_ms(CONN, CHILD, z.setups)?;
    row.setups(&ms);
    let before = rss_kib(pid)?;
    row.handshakes = z.handshakes;
    row.window = z.window;
    match a.handshakes_per_s(CHILD, z.handshakes, z.window) {
        Ok(r) => {
            row.handshakes_per_s = r;
            std::thread::sleep(Duration::from_millis(200));
            let after = rss_kib(pid)?;
            row.memory(before, after);
        }
        Err(e) => row.note = Some(format!("handshakes/s: {e}")),
    }
    row.responder_sas = b.list_sas().ok().map(|v| {
        v.iter()
            .filter(|s| {
                s.state == strongswan::IkeState::Established
                    && s.child(CHILD)
                        .is_some_and(|c| c.state == strongswan::ChildState::Installed)
            })
            .count()
    });
    Ok(row)
}
