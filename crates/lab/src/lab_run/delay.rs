//! `netveil lab` experiment `delay`: the round-trip time of a 500-byte message against added link delay, as the
//! PSP study's Figs. 4.6 and 4.7 (its latency test: one 500-byte payload and its answer, the delay set on both
//! sides, the x axis the one-side delay).
//!
//! - The delay: every path runs on a routed lab (client, router, server: [`crate::lab::Router`]). This kernel has
//!   no netem, so `netveil delay` (a lab tool of the `netveil` binary: it holds every packet of a netfilter queue
//!   for the time, then accepts it, in order) runs in the router's namespace, and `iptables -A FORWARD -j NFQUEUE`
//!   sends it every packet the router forwards: the request waits D on its way to the server, the answer D on its
//!   way back, so a round trip gains twice the one-side delay, as in the study (which set the delay on both ends).
//! - How exact: the clear path's `added delay error at D ms` is what the round trip gained beyond twice the delay
//!   (median at D less median at 0, less 2 D).
//! - The message: a ping with a 500-byte payload (its echo is the answer), 50 per delay (`--quick`: 10), through
//!   the clear path, netveil PSP (AES-GCM-128), netveil ESP (AES-GCM-128, tunnel), the same tunnel keyed by
//!   netveil's IKEv2 (`netveil esp tunnel aes128gcm16 (ike)`, as in `ping-rtt`), wireguard-go when installed and
//!   strongSwan at both ends (two charons, kernel-libipsec) when installed.
//!   The study's TLS rows are not here: a ping is not a TLS message.
//! - Cells per path and one-side delay D (0, 2, 5, 10 and 20 ms; `--quick`: 0 and 10): `rtt at D ms` (every ping a
//!   repetition) and `rtt less the added delay at D ms` (the median less 2 D: the protocol's own latency, the
//!   study's Fig. 4.7).

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::bench::ping as bench_ping;
use crate::lab::{HostPair, Lab, Protocol, TwoHosts};
use crate::lab_report::Cell;
use crate::{Error, Result};

const EXPERIMENT: &str = "delay";
/// The study's message: a 500-byte payload.
pub const PAYLOAD: u32 = 500;
/// The netfilter queue the delay tool serves.
const QUEUE: &str = "7";

/// The one-side delays, ms.
pub fn delays(quick: bool) -> Vec<f64> {
    if quick {
        vec![0.0, 10.0]
    } else {
        vec![0.0, 2.0, 5.0, 10.0, 20.0]
    }
}

/// `netveil delay` on what a router namespace forwards: the tool, then the rule; on drop the rule, then the tool.
struct Delayed<'a> {
    lab: &'a Lab,
    ns: String,
    child: Child,
}

fn rule(op: &str) -> [&str; 7] {
    [
        "iptables",
        op,
        "FORWARD",
        "-j",
        "NFQUEUE",
        "--queue-num",
        QUEUE,
    ]
}

impl Drop for Delayed<'_> {
    fn drop(&mut self) {
        let _ = self.lab.exec(&self.ns, &rule("-D"));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn delayed<'a>(lab: &'a Lab, bin: &Path, ns: &str, ms: f64) -> Result<Delayed<'a>> {
    let log = lab.dir().join(format!("delay-{ns}.log"));
    let errf = std::fs::File::create(&log).map_err(Error::io("delay log"))?;
    let child = lab
        .command(ns, &[])
        .arg(bin)
        .args(["delay", "--queue", QUEUE, "--ms", &ms.to_string()])
        .stdout(Stdio::null())
        .stderr(errf)
        .spawn()
        .map_err(Error::io("cannot start netveil delay"))?;
    let mut d = Delayed {
        lab,
        ns: ns.to_string(),
        child,
    };
    // Bound to its queue when it says so; only then may packets go to the queue (without a listener it drops).
    let t0 = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("netveil delay: queue") {
            break;
        }
        if let Ok(Some(st)) = d.child.try_wait() {
            return Err(Error::command(
                format!("netveil delay --queue {QUEUE} --ms {ms}"),
                Some(st),
                text,
            ));
        }
        if t0.elapsed() > Duration::from_secs(5) {
            return Err(Error::timeout(
                "netveil delay did not start",
                5.0,
                text.trim(),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    lab.exec_ok(ns, &rule("-A"))?;
    Ok(d)
}

/// The pings of each delay, on a path whose hosts are up: `ms` of delay on every packet the router forwards,
/// 500-byte pings from the first host to `dst`.
fn sweep(
    lab: &Lab,
    bin: &Path,
    h: &TwoHosts,
    dst: &str,
    delays: &[f64],
    count: u32,
) -> Result<Vec<Vec<f64>>> {
    let router = h
        .router
        .as_ref()
        .ok_or_else(|| Error::internal("the delay lab has no router"))?;
    let mut out = Vec::new();
    for &ms in delays {
        let _d = if ms > 0.0 {
            Some(delayed(lab, bin, &router.ns, ms)?)
        } else {
            None
        };
        out.push(bench_ping::ping(lab, &h.ns[0], dst, PAYLOAD, count)?.times);
    }
    Ok(out)
}

/// The paths: (name, host pair; `None`: the clear veth).
fn paths() -> Vec<(&'static str, Option<HostPair>)> {
    vec![
        ("clear", None),
        (
            "netveil psp aes-gcm-128",
            Some(HostPair::psp("aes-gcm-128")),
        ),
        (
            "netveil esp aes128gcm16 tunnel",
            Some(HostPair::esp("aes128gcm16")),
        ),
    ]
}

fn path_sweep(
    bin: &Path,
    pair: &Option<HostPair>,
    delays: &[f64],
    count: u32,
) -> Result<Vec<Vec<f64>>> {
    let mut lab = Lab::new("nvlab")?.with_netveil(bin);
    match pair {
        None => {
            let h = TwoHosts::topology(&mut lab, &HostPair::default().via_router())?;
            sweep(&lab, bin, &h, &h.addrs[1].outer.to_string(), delays, count)
        }
        Some(pair) => {
            let h = TwoHosts::up(&mut lab, &pair.clone().via_router())?;
            if pair.protocol == Protocol::Psp {
                h.wait_psp_associated(Duration::from_secs(15))?;
            }
            sweep(&lab, bin, &h, &h.addrs[1].inner.to_string(), delays, count)
        }
    }
}

/// The `delay` experiment's cells.
pub fn run(bin: &Path, quick: bool) -> Vec<Cell> {
    let delays = delays(quick);
    let count = if quick { 10 } else { 50 };
    let bin: PathBuf = bin.to_path_buf();
    let mut results: Vec<(String, Result<Vec<Vec<f64>>>)> = Vec::new();
    for (name, pair) in paths() {
        crate::say!("delay: {name}");
        results.push((name.to_string(), path_sweep(&bin, &pair, &delays, count)));
    }
    let wg = match crate::bench::find_wireguard_go() {
        Some(wg_go) => {
            crate::say!("delay: wireguard-go");
            crate::bench::with_wireguard_go_on(
                &wg_go,
                &HostPair::default().via_router(),
                |lab, h| sweep(lab, &bin, h, &h.addrs[1].inner.to_string(), &delays, count),
            )
        }
        None => Err(super::tools::wireguard_go_missing()),
    };
    results.push(("wireguard-go".into(), wg));
    // netveil's ESP tunnel keyed by its IKEv2 on the same routed lab.
    crate::say!("delay: {}", super::http::IKE_PATH);
    let ike = super::paths::with_ike_on(&bin, &HostPair::default().via_router(), |lab, h, _| {
        sweep(lab, &bin, h, &h.addrs[1].inner.to_string(), &delays, count)
    });
    results.push((super::http::IKE_PATH.into(), ike));
    // strongSwan at both ends on the same routed lab.
    let swan = match crate::strongswan::missing_tool() {
        None => {
            crate::say!("delay: {}", super::loss::STRONGSWAN_PATH);
            super::paths::with_strongswan_on(&HostPair::default().via_router(), |lab, h, _| {
                sweep(lab, &bin, h, &h.addrs[1].inner.to_string(), &delays, count)
            })
        }
        Some(e) => Err(e),
    };
    results.push((super::loss::STRONGSWAN_PATH.into(), swan));
    let mut cells = Vec::new();
    for (name, r) in results {
        match r {
            Ok(per_delay) => {
                let base = bench_ping::median(&per_delay[0]);
                for (times, &ms) in per_delay.into_iter().zip(&delays) {
                    let med = bench_ping::median(&times);
                    cells.push(Cell::measured(
                        EXPERIMENT,
                        &name,
                        &format!("rtt at {ms} ms"),
                        "ms",
                        times,
                    ));
                    cells.push(Cell::measured(
                        EXPERIMENT,
                        &name,
                        &format!("rtt less the added delay at {ms} ms"),
                        "ms",
                        vec![med - 2.0 * ms],
                    ));
                    if name == "clear" && ms > 0.0 {
                        cells.push(Cell::measured(
                            EXPERIMENT,
                            &name,
                            &format!("added delay error at {ms} ms"),
                            "ms",
                            vec![med - base - 2.0 * ms],
                        ));
                    }
                }
            }
            Err(e) => {
                let why = format!("the path did not run: {e}");
                for &ms in &delays {
                    for m in ["rtt at", "rtt less the added delay at"] {
                        cells.push(Cell::missing(
                            EXPERIMENT,
                            &name,
                            &format!("{m} {ms} ms"),
                            "ms",
                            &why,
                        ));
                    }
                    if name == "clear" && ms > 0.0 {
                        cells.push(Cell::missing(
                            EXPERIMENT,
                            &name,
                            &format!("added delay error at {ms} ms"),
                            "ms",
                            &why,
                        ));
                    }
                }
            }
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_sends_what_the_router_forwards_to_the_queue() {
        assert_eq!(
            rule("-A").join(" "),
            "iptables -A FORWARD -j NFQUEUE --queue-num 7"
        );
        assert_eq!(delays(true), [0.0, 10.0]);
        assert!(delays(false).windows(2).all(|w| w[0] < w[1]));
        assert_eq!(delays(false)[0], 0.0);
    }
}
