//! `netveil lab`'s `loss` experiment, as the PSP study's Figs. 4.4 and 4.5: goodput under packet loss, for
//! datagrams (iperf3 UDP at a fixed rate) and for TCP (iperf3 TCP; TLS 1.2 and 1.3 downloads), through the clear
//! veth, netveil PSP, netveil ESP-in-UDP, netveil's raw ESP tunnel keyed by its IKEv2 (not in `--quick`),
//! wireguard-go when installed, strongSwan at both ends, and TLS (OpenSSL's `s_server`, `curl`) on the clear veth.
//!
//! How loss is made: every path runs on a routed lab (client, router, server, each its own namespace: see
//! [`crate::lab::Router`]), and the router drops that share of the packets of more than [`LOSS_MIN_LEN`] bytes that
//! arrive from the server (nftables, `numgen random` in a netdev ingress chain on its port toward the server): data
//! flows from the server to the client (iperf3 `-R`, downloads), so the data packets (and the tunnels' packets that
//! carry them) are the ones lost. Small packets (handshakes, acknowledgements, iperf3's control messages) pass, so
//! that every run completes and what is measured is the data's loss; the study does not say what its tool dropped.
//! Both hosts' links carry packets at their real size (`gso_max_segs 1`, as in `http`): with segmentation offload a
//! sender's batch of up to 64 KB crosses the router as one unit and would be dropped or kept whole.
//!
//! Every path also gets the latency-under-load test at 0% loss: `rtt idle` and `rtt under load` (ms; 100 pings of
//! 56 bytes, 5 ms apart, before and during a TCP bulk flow from server to client).
//!
//! For the tunnels (netveil's and wireguard-go), one more TCP run at 0% loss gives `daemon cpu per GB` (ms of CPU,
//! user and system, of both sides' daemons per GB moved, from `/proc/PID/stat`) and `daemon peak memory` (the larger
//! `VmHWM`, KiB).
//!
//! The router is the capture point between the hosts: on the clear path, one more UDP run per level above 0 with
//! both its ports captured gives `loss made L% loss` (%: the longer packets that arrived from the server and did not
//! leave toward the client), with the level set as its expected value: how exact the loss was.
//!
//! Cells per path and loss level: `udp goodput L% loss` and `tcp goodput L% loss` (Mbit/s; the repetitions are
//! iperf3's one-second intervals, or the downloads), and `udp kept L% loss` / `tcp kept L% loss` (%: the median
//! goodput over the same path's at 0% loss), with the study's figures beside PSP's and TLS's.

use std::process::Stdio;
use std::time::Duration;

use crate::lab::{HostPair, Lab, TwoHosts};
use crate::lab_report::Cell;
use crate::{Error, Result};

/// Packets of at most this many bytes (IP length) are never dropped.
pub const LOSS_MIN_LEN: u32 = 200;
/// iperf3 UDP's offered rate, Mbit/s, and its datagram size (fits the tunnels' MTU of 1,400).
pub const UDP_RATE_MBIT: u32 = 100;
const UDP_LEN: u32 = 1200;

/// The study's own numbers: PSP (UDP file transfer) and TLS throughput at 0.1 and 0.2% loss over 0% (Fig. 4.4), and
/// PSP at 25% (Fig. 4.5), as percentages kept.
const PSP_FIG44: &str =
    "PSP study, Fig. 4.4: 279.09 Mbit/s at 0%, 271.82 at 0.1%, 280.70 at 0.2% (from text)";
const PSP_FIG45: &str =
    "PSP study, Fig. 4.5: 227.94 Mbit/s at 25% loss, 18.8% below ideal (from text)";
const TLS13_FIG44: &str =
    "PSP study, Fig. 4.4: TLS 1.3 584.65 Mbit/s at 0%, 158.05 at 0.1%, 95.45 at 0.2%";
const TLS12_FIG44: &str =
    "PSP study, Fig. 4.4: TLS 1.2 440.48 Mbit/s at 0%, 186.89 at 0.1%, 147.70 at 0.2%";

/// The loss levels, percent.
pub fn levels(quick: bool) -> Vec<f64> {
    if quick {
        vec![0.0, 25.0]
    } else {
        vec![0.0, 0.1, 0.2, 1.0, 5.0, 25.0]
    }
}

/// The study's share kept at `level` for a path (`kind` "udp" or "tcp"), with its source.
fn paper_kept(path: &str, kind: &str, level: f64) -> Option<(f64, &'static str)> {
    let at = |l: f64| (level - l).abs() < 1e-9;
    // One decimal, as the study's text gives its percentages.
    let r = |(v, src): (f64, &'static str)| ((v * 10.0).round() / 10.0, src);
    let got = match (path, kind) {
        ("netveil psp aes-gcm-128", "udp") if at(0.1) => Some((271.82 / 279.09 * 100.0, PSP_FIG44)),
        ("netveil psp aes-gcm-128", "udp") if at(0.2) => Some((280.70 / 279.09 * 100.0, PSP_FIG44)),
        ("netveil psp aes-gcm-128", "udp") if at(25.0) => {
            Some((227.94 / 280.70 * 100.0, PSP_FIG45))
        }
        ("tls1.3", "tcp") if at(0.1) => Some((158.05 / 584.65 * 100.0, TLS13_FIG44)),
        ("tls1.3", "tcp") if at(0.2) => Some((95.45 / 584.65 * 100.0, TLS13_FIG44)),
        ("tls1.2", "tcp") if at(0.1) => Some((186.89 / 440.48 * 100.0, TLS12_FIG44)),
        ("tls1.2", "tcp") if at(0.2) => Some((147.70 / 440.48 * 100.0, TLS12_FIG44)),
        _ => None,
    };
    got.map(r)
}

/// A level as the cells name it: "0", "0.1", "25".
fn pct(level: f64) -> String {
    format!("{level}")
}

/// Makes the router drop `level` percent of the longer packets it receives from the server (replacing an earlier
/// rule).
fn set_loss(lab: &Lab, h: &TwoHosts, level: f64) -> Result<()> {
    let r = h
        .router
        .as_ref()
        .ok_or_else(|| Error::internal("the loss lab has no router"))?;
    let (ns, dev) = (r.ns.as_str(), r.ports[1]);
    let _ = lab.exec(ns, &["nft", "delete", "table", "netdev", "nvloss"]);
    if level <= 0.0 {
        return Ok(());
    }
    let per_10k = (level * 100.0).round() as u32;
    let rules = format!(
        "table netdev nvloss {{\n chain ingress {{\n  type filter hook ingress device \"{dev}\" priority 0; policy accept;\n  \
         meta length > {LOSS_MIN_LEN} numgen random mod 10000 < {per_10k} drop\n }}\n}}\n"
    );
    let file = lab.dir().join(format!("loss-{ns}.nft"));
    std::fs::write(&file, rules).map_err(Error::io("write the loss rules"))?;
    lab.exec_ok(ns, &["nft", "-f", &file.to_string_lossy()])
        .map(|_| ())
}

/// One iperf3 run from `client` to the server at `dst` in `server`, reversed (the server sends): the goodput of
/// each one-second interval as the client received it, Mbit/s (UDP: sent at [`UDP_RATE_MBIT`]).
fn iperf_intervals(
    lab: &Lab,
    server: &str,
    client: &str,
    dst: &str,
    secs: u32,
    udp: bool,
) -> Result<Vec<f64>> {
    let mut last = None;
    // Setup packets are small and never dropped, but a run that fails anyway is tried again, up to three times.
    for _ in 0..3 {
        let mut srv = crate::lab::iperf3_server(lab, server, dst)?;
        let secs_s = secs.to_string();
        let rate = format!("{UDP_RATE_MBIT}M");
        let len = UDP_LEN.to_string();
        let mut args = vec![
            "timeout", "30", "iperf3", "-c", dst, "-R", "-t", &secs_s, "-J",
        ];
        if udp {
            args.extend(["-u", "-b", &rate, "-l", &len]);
        }
        let o = lab.exec(client, &args);
        let _ = srv.kill();
        let _ = srv.wait();
        let o = o?;
        let v: serde_json::Value = match serde_json::from_slice(&o.stdout) {
            Ok(v) => v,
            Err(e) => {
                last = Some(Error::output("iperf3", format!("bad JSON: {e}")));
                continue;
            }
        };
        if let Some(err) = v["error"].as_str() {
            last = Some(Error::command("iperf3", None, err));
            continue;
        }
        let intervals: Vec<f64> = v["intervals"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|i| {
                        // The client receives (-R): its intervals count the bytes that arrived (UDP: net of the
                        // datagrams lost).
                        Some(i["sum"]["bits_per_second"].as_f64()? / 1e6)
                    })
                    .collect()
            })
            .unwrap_or_default();
        if intervals.is_empty() {
            last = Some(Error::output("iperf3", "no interval"));
            continue;
        }
        return Ok(intervals);
    }
    Err(last.unwrap_or_else(|| Error::internal("iperf3: no run")))
}

/// TLS downloads from OpenSSL's `s_server -WWW` at `dst` (in `server`) with curl (in `client`) for `secs` seconds
/// each, `runs` times: Mbit/s per download.
fn tls_downloads(
    lab: &Lab,
    server: &str,
    client: &str,
    dst: &str,
    version: &str,
    secs: u32,
    runs: usize,
) -> Result<Vec<f64>> {
    let dir = lab.dir().join("tls");
    std::fs::create_dir_all(&dir).map_err(Error::io("tls dir"))?;
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    if !cert.exists() {
        crate::lab::self_signed_cert(&dir)?;
        // Sparse: as long as any download takes, without writing it.
        let f = std::fs::File::create(dir.join("big.bin")).map_err(Error::io("big.bin"))?;
        f.set_len(64 << 30).map_err(Error::io("big.bin"))?;
    }
    let accept = format!("{dst}:4433");
    let mut srv = lab
        .command(
            server,
            &["openssl", "s_server", "-accept", &accept, "-WWW", "-quiet"],
        )
        .arg("-cert")
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(Error::io("cannot start openssl s_server"))?;
    std::thread::sleep(Duration::from_millis(400));
    let url = format!("https://{dst}:4433/big.bin");
    let secs_s = secs.to_string();
    let flags: &[&str] = match version {
        "tls1.3" => &["--tlsv1.3"],
        _ => &["--tlsv1.2", "--tls-max", "1.2"],
    };
    let mut out = Vec::new();
    let mut err = None;
    for _ in 0..runs {
        let mut args = vec!["curl", "-sk", "--max-time", &secs_s, "-o", "/dev/null"];
        args.extend(flags);
        args.extend(["-w", "%{speed_download} %{size_download} %{exitcode}", &url]);
        match lab.exec(client, &args) {
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stdout).to_string();
                let mut it = text.split_whitespace();
                match (
                    it.next().and_then(|s| s.parse::<f64>().ok()),
                    it.next().and_then(|s| s.parse::<f64>().ok()),
                    it.next(),
                ) {
                    // Every download ends at the time limit (28), the file being longer than any: what came in
                    // by then, nothing included (at high loss the handshake may not finish in time).
                    (Some(bps), Some(_), Some("28")) => out.push(bps * 8.0 / 1e6),
                    _ => err = Some(Error::command("curl", Some(o.status), text)),
                }
            }
            Err(e) => err = Some(e),
        }
    }
    let _ = srv.kill();
    let _ = srv.wait();
    match (out.is_empty(), err) {
        (true, Some(e)) => Err(e),
        (true, None) => Err(Error::measurement("TLS downloads", "no download")),
        _ => Ok(out),
    }
}

/// A path's measurement at one level: (udp, tcp) goodputs, each per repetition.
type Measured = (Result<Vec<f64>>, Result<Vec<f64>>);

/// The cells of one path: goodput per level and kind, and the share kept over 0% loss.
fn path_cells(path: &str, levels: &[f64], got: Result<Vec<Measured>>) -> Vec<Cell> {
    let mut cells = Vec::new();
    let got: Vec<Measured> = match got {
        Ok(g) => g,
        Err(e) => levels
            .iter()
            .map(|_| {
                let why = e.clone().within("the path did not run");
                (Err(why.clone()), Err(why))
            })
            .collect(),
    };
    for (k, kind) in ["udp", "tcp"].iter().enumerate() {
        let of = |m: &Measured| -> std::result::Result<Vec<f64>, String> {
            let r = if k == 0 { &m.0 } else { &m.1 };
            match r {
                Ok(v) => Ok(v.clone()),
                Err(e) => Err(e.to_string()),
            }
        };
        let base = got
            .first()
            .and_then(|m| of(m).ok())
            .map(|v| crate::bench::ping::median(&v))
            .filter(|b| *b > 0.0);
        for (level, m) in levels.iter().zip(&got) {
            let metric = format!("{kind} goodput {}% loss", pct(*level));
            let kept_metric = format!("{kind} kept {}% loss", pct(*level));
            match of(m) {
                Ok(v) if !v.is_empty() => {
                    let med = crate::bench::ping::median(&v);
                    cells.push(Cell::measured("loss", path, &metric, "Mbit/s", v));
                    let kept = match base {
                        Some(b) => {
                            Cell::measured("loss", path, &kept_metric, "%", vec![med / b * 100.0])
                        }
                        None => {
                            Cell::missing("loss", path, &kept_metric, "%", "no goodput at 0% loss")
                        }
                    };
                    cells.push(match paper_kept(path, kind, *level) {
                        Some((p, src)) => kept.paper(p, src),
                        None => kept,
                    });
                }
                other => {
                    let why = match other {
                        Err(e) => e,
                        Ok(_) => "no value".into(),
                    };
                    cells.push(Cell::missing("loss", path, &metric, "Mbit/s", &why));
                    cells.push(Cell::missing("loss", path, &kept_metric, "%", &why));
                }
            }
        }
    }
    cells
}

/// Runs iperf3 UDP and TCP at every level on a built lab: the client is `h.ns[0]`, the server `dst` in `h.ns[1]`.
fn sweep(lab: &Lab, h: &TwoHosts, dst: &str, levels: &[f64], secs: u32) -> Result<Vec<Measured>> {
    // Packets cross the hosts' links at their real size, not as segmentation-offload batches of up to 64 KB: the
    // router's drop decides per packet, as a lossy link does (a batch would be lost or kept whole).
    super::transfer::real_wire(lab, h)?;
    let mut out = Vec::new();
    for &l in levels {
        set_loss(lab, h, l)?;
        let udp = iperf_intervals(lab, &h.ns[1], &h.ns[0], dst, secs, true);
        let tcp = iperf_intervals(lab, &h.ns[1], &h.ns[0], dst, secs, false);
        out.push((udp, tcp));
    }
    set_loss(lab, h, 0.0)?;
    Ok(out)
}

/// The loss the router made at `level`, seen from the capture point between the hosts: one UDP run from the server
/// to the client with the router's two ports captured, the longer packets (IP length over [`LOSS_MIN_LEN`])
/// arriving from the server (a capture sees them before the drop) against those leaving toward the client: the
/// share that did not leave, %.
fn loss_made(lab: &Lab, h: &TwoHosts, dst: &str, level: f64, secs: u32) -> Result<f64> {
    let r = h
        .router
        .as_ref()
        .ok_or_else(|| Error::internal("the loss lab has no router"))?;
    // (tcpdump's `greater` counts the Ethernet header: 14 bytes more than the IP length.)
    let longer = (LOSS_MIN_LEN + 15).to_string();
    let filter = ["udp", "and", "greater", longer.as_str()];
    set_loss(lab, h, level)?;
    let tag = pct(level);
    let mut arriving = r.capture(lab, 1, &format!("made-{tag}-in.pcap"), 64, &filter)?;
    let mut leaving = r.capture(lab, 0, &format!("made-{tag}-out.pcap"), 64, &filter)?;
    let run = iperf_intervals(lab, &h.ns[1], &h.ns[0], dst, secs, true);
    let (a, l) = (arriving.stop(), leaving.stop());
    set_loss(lab, h, 0.0)?;
    run?;
    let count = |p: std::path::PathBuf| -> Result<usize> {
        Ok(netveil_pcap::read_file(&p)
            .map_err(Error::file(&p))?
            .records
            .len())
    };
    let (a, l) = (count(a?)?, count(l?)?);
    if a == 0 {
        return Err(Error::measurement(
            "loss made",
            "no datagram reached the router",
        ));
    }
    Ok(100.0 * a.saturating_sub(l) as f64 / a as f64)
}

/// The daemons' CPU time per GB moved by one TCP run at 0% loss (ms/GB, both sides together) and the larger of
/// their peak resident memories after it (KiB). The daemons: whatever runs in the two namespaces before the run
/// (netveil's daemons, or wireguard-go).
fn daemon_cost(lab: &Lab, h: &TwoHosts, dst: &str, secs: u32) -> Result<Cost> {
    let mut pids: Vec<u32> = Vec::new();
    for ns in &h.ns {
        pids.extend(crate::lab_proc::ns_pids(ns, &[])?);
    }
    if pids.is_empty() {
        return Err(Error::measurement(
            "the daemons' cost",
            "no daemon runs in the lab",
        ));
    }
    let before = crate::lab_proc::sum_cpu_ms(&pids)?;
    let runs = iperf_intervals(lab, &h.ns[1], &h.ns[0], dst, secs, false)?;
    let used = crate::lab_proc::sum_cpu_ms(&pids)? - before;
    // Each interval is one second: Mbit/s summed is Mbit moved.
    let gb = runs.iter().sum::<f64>() / 8.0 / 1e3;
    if gb <= 0.0 {
        return Err(Error::measurement("the daemons' cost", "nothing moved"));
    }
    Ok((used / gb, crate::lab_proc::max_peak_kib(&pids)?))
}

/// The latency-under-load test: ping round-trip times (56-byte payload, 100 pings 5 ms apart) from the client to
/// the server at `dst` while idle, then while the server sends a TCP bulk flow to the client (iperf3 `-R`), ms per
/// ping: (idle, loaded). Run at 0% loss.
fn rtt_under_load(lab: &Lab, h: &TwoHosts, dst: &str) -> Result<(Vec<f64>, Vec<f64>)> {
    let idle = crate::bench::ping::ping(lab, &h.ns[0], dst, 56, 100)?.times;
    let mut srv = crate::lab::iperf3_server(lab, &h.ns[1], dst)?;
    let cli = lab
        .command(&h.ns[0], &["iperf3", "-c", dst, "-R", "-t", "3"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let loaded = cli
        .map_err(Error::io("cannot start iperf3"))
        .and_then(|mut c| {
            // The flow at full speed first.
            std::thread::sleep(Duration::from_millis(700));
            let r = crate::bench::ping::ping(lab, &h.ns[0], dst, 56, 100);
            // (The flow has done its part once the pings are answered: no need to wait out its 3 s.)
            let _ = c.kill();
            let _ = c.wait();
            r
        });
    let _ = srv.kill();
    let _ = srv.wait();
    Ok((idle, loaded?.times))
}

/// The latency-under-load cells of a path: `rtt idle` and `rtt under load` (ms, each ping a repetition).
fn load_cells(name: &str, r: Result<(Vec<f64>, Vec<f64>)>) -> Vec<Cell> {
    match r {
        Ok((idle, loaded)) => vec![
            Cell::measured("loss", name, "rtt idle", "ms", idle),
            Cell::measured("loss", name, "rtt under load", "ms", loaded),
        ],
        Err(e) => {
            let why = e.to_string();
            vec![
                Cell::missing("loss", name, "rtt idle", "ms", &why),
                Cell::missing("loss", name, "rtt under load", "ms", &why),
            ]
        }
    }
}

/// The `loss` experiment's cells.
pub fn run(bin: &std::path::Path, quick: bool) -> Vec<Cell> {
    let levels = levels(quick);
    let secs = if quick { 1 } else { 3 };
    let mut cells = Vec::new();
    crate::say!("loss: clear veth, and TLS 1.3 and 1.2 on it");
    let mut tls: Vec<(&str, Vec<Measured>)> = vec![("tls1.3", Vec::new()), ("tls1.2", Vec::new())];
    let clear = (|| -> Result<_> {
        let mut lab = Lab::new("nvlab")?;
        let h = TwoHosts::topology(&mut lab, &HostPair::default().via_router())?;
        let dst = h.addrs[1].outer.to_string();
        let r = sweep(&lab, &h, &dst, &levels, secs)?;
        for (version, got) in tls.iter_mut() {
            for &l in &levels {
                set_loss(&lab, &h, l)?;
                let runs = if quick { 1 } else { 3 };
                let t = tls_downloads(&lab, &h.ns[1], &h.ns[0], &dst, version, secs.max(2), runs);
                got.push((
                    Err(Error::measurement("TLS", "runs over TCP: no datagram row")),
                    t,
                ));
            }
        }
        set_loss(&lab, &h, 0.0)?;
        // How exact the loss was: what the router dropped at each level, seen from the capture point.
        let made: Vec<(f64, Result<f64>)> = levels
            .iter()
            .filter(|&&l| l > 0.0)
            .map(|&l| (l, loss_made(&lab, &h, &dst, l, secs)))
            .collect();
        Ok((r, rtt_under_load(&lab, &h, &dst), made))
    })();
    let (clear, load, made, clear_failed) = match clear {
        Ok((r, load, made)) => (Ok(r), load, made, None),
        Err(e) => {
            let why = e.clone().within("the path did not run");
            let made = levels
                .iter()
                .filter(|&&l| l > 0.0)
                .map(|&l| (l, Err(why.clone())))
                .collect();
            (Err(e), Err(why.clone()), made, Some(why))
        }
    };
    for (l, m) in made {
        let metric = format!("loss made {}% loss", pct(l));
        cells.push(match m {
            // (The level set is what it should be: `expected`.)
            Ok(v) => Cell::measured("loss", "clear", &metric, "%", vec![v]).expected(l),
            Err(e) => Cell::missing("loss", "clear", &metric, "%", &format!("{e}")),
        });
    }
    cells.extend(path_cells("clear", &levels, clear));
    cells.extend(load_cells("clear", load));
    for (version, got) in tls {
        let r = if got.is_empty() {
            Err(clear_failed
                .clone()
                .unwrap_or_else(|| Error::internal("the clear lab ran no TLS download")))
        } else {
            Ok(got)
        };
        // TLS has no datagram row: only its TCP cells.
        cells.extend(
            path_cells(version, &levels, r)
                .into_iter()
                .filter(|c| c.metric.starts_with("tcp")),
        );
    }
    let esp_udp = HostPair {
        udp_encap: true,
        ..HostPair::esp("aes128gcm16")
    };
    for (name, pair) in [
        ("netveil psp aes-gcm-128", HostPair::psp("aes-gcm-128")),
        ("netveil esp-in-udp aes128gcm16", esp_udp),
    ] {
        crate::say!("loss: {name}");
        let r = (|| {
            let mut lab = Lab::new("nvlab")?.with_netveil(bin);
            let h = TwoHosts::up(&mut lab, &pair.clone().via_router())?;
            if pair.protocol == crate::lab::Protocol::Psp {
                h.wait_psp_associated(Duration::from_secs(15))?;
            }
            let dst = h.addrs[1].inner.to_string();
            let got = sweep(&lab, &h, &dst, &levels, secs)?;
            let cost = daemon_cost(&lab, &h, &dst, secs);
            Ok((got, cost, rtt_under_load(&lab, &h, &dst)))
        })();
        cells.extend(with_cost(name, &levels, r));
    }
    let wg = match crate::bench::find_wireguard_go() {
        Some(wg_go) => {
            crate::say!("loss: wireguard-go");
            crate::bench::with_wireguard_go_on(
                &wg_go,
                &HostPair::default().via_router(),
                |lab, h| {
                    let dst = h.addrs[1].inner.to_string();
                    let got = sweep(lab, h, &dst, &levels, secs)?;
                    let cost = daemon_cost(lab, h, &dst, secs);
                    Ok((got, cost, rtt_under_load(lab, h, &dst)))
                },
            )
        }
        None => Err(super::tools::wireguard_go_missing()),
    };
    cells.extend(with_cost("wireguard-go", &levels, wg));
    // netveil's ESP tunnel keyed by its IKEv2 on the same routed lab (the full run only: `--quick` keeps to its
    // three minutes).
    if !quick {
        let name = super::http::IKE_PATH;
        crate::say!("loss: {name}");
        let ike = super::paths::with_ike_on(bin, &HostPair::default().via_router(), |lab, h, _| {
            let dst = h.addrs[1].inner.to_string();
            let got = sweep(lab, h, &dst, &levels, secs)?;
            let cost = daemon_cost(lab, h, &dst, secs);
            Ok((got, cost, rtt_under_load(lab, h, &dst)))
        });
        cells.extend(with_cost(name, &levels, ike));
    }
    // strongSwan at both ends (the peer of ping-rtt and http) on the same routed lab; its daemons are the charons.
    let swan = match crate::strongswan::missing_tool() {
        None => {
            crate::say!("loss: {STRONGSWAN_PATH}");
            super::paths::with_strongswan_on(&HostPair::default().via_router(), |lab, h, _| {
                let dst = h.addrs[1].inner.to_string();
                let got = sweep(lab, h, &dst, &levels, secs)?;
                let cost = daemon_cost(lab, h, &dst, secs);
                Ok((got, cost, rtt_under_load(lab, h, &dst)))
            })
        }
        Some(e) => Err(e),
    };
    cells.extend(with_cost(STRONGSWAN_PATH, &levels, swan));
    cells
}

/// The strongSwan path's name (two charons with kernel-libipsec: ESP in UDP, AES-GCM-128, IKEv2 with a PSK).
pub const STRONGSWAN_PATH: &str = "strongswan esp-in-udp aes128gcm16 (libipsec)";

/// A tunnel's daemons' CPU per GB (ms/GB) and peak memory (KiB), see [`daemon_cost`].
type Cost = (f64, f64);

/// What a tunnel's lab measured: the sweep, the daemons' cost, the round-trip times idle and under load.
type Tunnel = (Vec<Measured>, Result<Cost>, Result<(Vec<f64>, Vec<f64>)>);

/// A tunnel's cells: its sweep's ([`path_cells`]), its round-trip times idle and under load ([`rtt_under_load`])
/// and its daemons' cost ([`daemon_cost`]).
fn with_cost(name: &str, levels: &[f64], r: Result<Tunnel>) -> Vec<Cell> {
    let (r, cost, load) = match r {
        Ok((got, cost, load)) => (Ok(got), cost, load),
        Err(e) => {
            let why = e.clone().within("the path did not run");
            (Err(e), Err(why.clone()), Err(why))
        }
    };
    let mut cells = path_cells(name, levels, r);
    cells.extend(load_cells(name, load));
    match cost {
        Ok((per_gb, peak)) => {
            cells.push(Cell::measured(
                "loss",
                name,
                "daemon cpu per GB",
                "ms/GB",
                vec![per_gb],
            ));
            cells.push(Cell::measured(
                "loss",
                name,
                "daemon peak memory",
                "KiB",
                vec![peak],
            ));
        }
        Err(e) => {
            let why = e.to_string();
            cells.push(Cell::missing(
                "loss",
                name,
                "daemon cpu per GB",
                "ms/GB",
                &why,
            ));
            cells.push(Cell::missing(
                "loss",
                name,
                "daemon peak memory",
                "KiB",
                &why,
            ));
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_studys_shares_are_its_figures() {
        let (p, _) = paper_kept("netveil psp aes-gcm-128", "udp", 25.0).unwrap();
        assert_eq!(p, 81.2);
        let (t, _) = paper_kept("tls1.3", "tcp", 0.2).unwrap();
        assert_eq!(t, 16.3);
        assert!(paper_kept("clear", "udp", 25.0).is_none());
        assert_eq!(levels(false), [0.0, 0.1, 0.2, 1.0, 5.0, 25.0]);
        assert_eq!(pct(0.1), "0.1");
        assert_eq!(pct(25.0), "25");
    }
}
