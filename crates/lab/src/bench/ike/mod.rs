//! `netveil bench --ike`: IKEv2 setup latency, handshakes per second and memory per IKE SA, netveil and strongSwan
//! in the same run, per suite (PSK with X25519, PSK with MODP-2048, ECDSA P-256 certificates with ECP-256).
//!
//! Each suite gets three measurements per implementation, in a fresh two-namespace lab (`a` initiator, `b` responder,
//! a veth pair between them; the [`SwanPair`](crate::strongswan::SwanPair) addresses and ids; UDP encapsulation on,
//! as kernel-libipsec needs it; child `aes128gcm16` between the inner addresses):
//!
//! - **setup ms** (median, p99): `--ike-setups` sequential IKE SA + first child setups from one initiator, each
//!   deleted before the next. netveil: from the first IKE_SA_INIT sent to the IKE_AUTH response processed (the
//!   CHILD_SA event) in the load generator; strongSwan: vici `initiate` to its answer, which charon gives once the
//!   child is installed on the initiator ([`Charon::handshake_ms`](crate::strongswan::Charon::handshake_ms)), so
//!   strongSwan's figure includes its own initiator-side install into libipsec.
//! - **handshakes/s**: `--ike-handshakes` setups with `--ike-window` in flight at any time, each a new IKE SA, timed
//!   from the first request to the last child up on the initiator. netveil: a `netveil up` responder with an `[ike]`
//!   connection whose children install into its IP engine, and a load generator in this process driving many IKE SAs
//!   through one `netveil_ike` Endpoint (the daemon's state machine) over UDP 500/4500, as one charon drives many
//!   ([`Charon::handshakes_per_s`](crate::strongswan::Charon::handshakes_per_s)); strongSwan: charon to charon.
//! - **memory**: the responder's resident set (`VmRSS`) after the sequential setups and again with every IKE SA +
//!   child of the handshakes/s run established, divided by their number (at least 1000 outside `--quick`).
//!
//! And one row per suite that the daemons cannot have: netveil's exchange alone, initiator and responder Endpoints
//! in this process passing datagrams in memory (no sockets, no install): the time of one setup and the
//! responder's share of it, which bounds the handshakes per second of one core. (The state machine's heap per IKE
//! SA + child is counted exactly by `crates/ike/tests/memory.rs`; this process's RSS would not show it, the
//!
//! The files: the suites and connections (`suite`), a row (`row`), the in-process exchange (`in_process`), the
//! load generator (`loader`) and the measurements in namespaces (`measure`).

mod in_process;
mod loader;
mod measure;
mod row;
mod suites;

#[cfg(test)]
mod tests;

pub use measure::rss_kib;
pub use row::IkeRow;
pub use suites::SUITES;

use crate::bench::args::BenchArgs;
use crate::{Error, Result};
use in_process::measure_in_process;
use measure::{measure_netveil, measure_strongswan};
use row::Sizes;
use std::path::PathBuf;
use suites::{suite, Suite, ESP};

fn fmt(v: f64, prec: usize) -> String {
    if v.is_finite() {
        format!("{v:.prec$}")
    } else {
        "-".into()
    }
}

/// The table.
pub fn render(rows: &[IkeRow]) -> String {
    let mut t = format!(
        "{:<48} {:>9} {:>9} {:>13} {:>10} {:>10} {:>10}\n",
        "row", "ms", "p99 ms", "handshakes/s", "B per SA", "responder", "install ms"
    );
    for r in rows {
        if let Some(why) = &r.cannot_run {
            t += &format!("{:<48} {why}\n", r.row);
            continue;
        }
        let resp = match (r.responder_ms, r.responder_sas) {
            (Some(ms), _) => format!("{} ms", fmt(ms, 3)),
            (None, Some(n)) => format!("{n}/{}", r.handshakes),
            _ => "-".into(),
        };
        t += &format!(
            "{:<48} {:>9} {:>9} {:>13} {:>10} {:>10} {:>10}\n",
            r.row,
            fmt(r.median_ms, 3),
            fmt(r.p99_ms, 3),
            fmt(r.handshakes_per_s, 0),
            fmt(r.bytes_per_sa, 0),
            resp,
            r.install_ms.map_or("-".into(), |v| fmt(v, 3))
        );
    }
    t
}

/// The goals against the rows: setup at most 1 ms (PSK+X25519), at least 2x strongSwan's handshakes per
/// second, at most 4 KB per IKE SA + child. One line per goal and suite that both sides measured.
pub fn goals(rows: &[IkeRow]) -> Vec<String> {
    let find = |name: &str| {
        rows.iter()
            .find(|r| r.row == name && r.cannot_run.is_none())
    };
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let mut out = Vec::new();
    if let Some(r) = find("netveil ike psk-x25519") {
        out.push(format!(
            "setup at most 1 ms (psk-x25519): median {} ms: {}",
            fmt(r.median_ms, 3),
            verdict(r.median_ms <= 1.0)
        ));
    }
    for s in SUITES {
        let (Some(n), Some(w)) = (
            find(&format!("netveil ike {s}")),
            find(&format!("strongswan ike {s}")),
        ) else {
            continue;
        };
        let x = n.handshakes_per_s / w.handshakes_per_s;
        out.push(format!(
            "at least 2x strongSwan's handshakes/s ({s}): {} vs {} = {}x: {}",
            fmt(n.handshakes_per_s, 0),
            fmt(w.handshakes_per_s, 0),
            fmt(x, 2),
            verdict(x >= 2.0)
        ));
        out.push(format!(
            "at most 4 KB per IKE SA + child ({s}): {} B (strongSwan {} B): {}",
            fmt(n.bytes_per_sa, 0),
            fmt(w.bytes_per_sa, 0),
            verdict(n.bytes_per_sa <= 4096.0)
        ));
    }
    out
}

pub fn run(a: &BenchArgs, bin: PathBuf) -> Result<Vec<IkeRow>> {
    let suites: Vec<Suite> = if a.ike_suites.is_empty() {
        SUITES.iter().filter_map(|s| suite(s)).collect()
    } else {
        a.ike_suites
            .iter()
            .map(|s| {
                suite(s).ok_or_else(|| {
                    Error::Usage(format!(
                        "--ike-suites: unknown suite '{s}' (one of {})",
                        SUITES.join(", ")
                    ))
                })
            })
            .collect::<Result<_>>()?
    };
    let z = if a.quick {
        Sizes {
            setups: a.ike_setups.unwrap_or(20),
            handshakes: a.ike_handshakes.unwrap_or(200),
            window: a.ike_window,
        }
    } else {
        Sizes {
            setups: a.ike_setups.unwrap_or(200),
            handshakes: a.ike_handshakes.unwrap_or(1000),
            window: a.ike_window,
        }
    };
    if z.setups == 0 || z.handshakes == 0 || z.window == 0 {
        return Err(Error::Usage(
            "--ike-setups, --ike-handshakes and --ike-window: at least 1".into(),
        ));
    }
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "netveil bench --ike: IKEv2 between two network namespaces on one machine ({cpus} CPUs), child {ESP}, UDP \
         encapsulation; per suite {} sequential setups (ms: first IKE_SA_INIT to the IKE_AUTH response processed; \
         strongSwan: vici initiate to child installed), {} setups {} at a time (handshakes/s), and the responder's \
         resident memory per established IKE SA + child",
        z.setups, z.handshakes, z.window
    );
    println!(
        "  netveil rows: responder `netveil up` of {}",
        bin.display()
    );
    let mut rows = Vec::new();
    let mut fails = 0;
    for s in &suites {
        let measured = [
            measure_netveil(&bin, s, z),
            measure_in_process(s, z),
            measure_strongswan(s, z),
        ];
        let names = [
            format!("netveil ike {}", s.name),
            format!("netveil ike {} (exchange, in process)", s.name),
            format!("strongswan ike {}", s.name),
        ];
        for (r, name) in measured.into_iter().zip(names) {
            match r {
                Ok(row) => {
                    println!(
                        "  {}",
                        render(std::slice::from_ref(&row))
                            .lines()
                            .nth(1)
                            .unwrap_or("")
                    );
                    rows.push(row);
                }
                Err(e) => {
                    fails += 1;
                    println!("  {name}: measurement failed: {e}");
                    let mut row = IkeRow::empty(name);
                    row.cannot_run = Some(format!("measurement failed: {e}"));
                    rows.push(row);
                }
            }
        }
    }
    println!();
    print!("{}", render(&rows));
    println!(
        "(ms, p99 ms: sequential setups; B per SA: the responder's VmRSS growth over the handshakes/s run per IKE SA \
         + child (for the state machine's own heap per IKE SA + child, exact: cargo test -p netveil-ike --test memory); responder: the SAs it holds at the end, or for in-process rows its share of one setup, whose \
         handshakes/s is what one core would do on the responder's side alone; install ms: the netveil \
         responder's CHILD_SA install into its IP engine, median, from its log)"
    );
    for r in &rows {
        if let Some(n) = &r.note {
            println!("  {}: {n}", r.row);
            fails += 1;
        }
    }
    let g = goals(&rows);
    if !g.is_empty() {
        println!();
        println!("goals of issue 23 on this machine:");
        for l in g {
            println!("  {l}");
        }
    }
    if let Some(p) = &a.json {
        let v = serde_json::json!({ "ike": rows });
        std::fs::write(p, serde_json::to_string_pretty(&v).unwrap_or_default())
            .map_err(Error::io(format!("cannot write {}", p.display())))?;
    }
    if fails > 0 {
        return Err(Error::measurement(
            "netveil bench",
            format!("{fails} IKE measurements failed"),
        ));
    }
    Ok(rows)
}
