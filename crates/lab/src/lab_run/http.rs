//! `netveil lab`'s `http` and `smtp` experiments, as the IPsec web/email study: files of 1 KB to 10 MB,
//! compressible (text) or not (random bytes), through each path.
//!
//! - `http`: downloaded from nginx with curl (text is sent gzip-compressed to `curl --compressed`).
//! - The paths: clear, TLS 1.3 and 1.2 on it, netveil's protocols and suites (manual keys), netveil's ESP tunnel
//!   keyed by its IKEv2 (automatic keying), and strongSwan at both ends.
//! - `smtp`: sent as an e-mail attachment from the server side to a Postfix on the client side ([`super::smtp`]:
//!   the study's East mailing the client; base64, so text and random files alike grow by a third).
//!
//! Per transfer the bytes and packets on the wire (IP bytes; both directions together, and down and up apart: down
//! is server side to client side, the file's direction in both), the transfer time, and the bytes over the clear
//! transfer of the same file; and what the programs used: `client cpu` (curl, user and system, from its `wait4`
//! resource usage, to the microsecond, taken by a Python wrapper: GNU `time` prints 10 ms steps), `server cpu` (what runs in the server's namespace, netveil's daemon left
//! out: nginx's master and worker, or Postfix's processes; the scheduler's time of each thread, to the nanosecond,
//! and each process's reaped children's, so that helpers that come and go are counted; before and after) and
//! through netveil `daemon cpu` (both daemons, the scheduler's time of their threads), ms per transfer;
//! per path `client peak memory` (curl's largest), `server peak memory` (the server's largest process) and `daemon
//! peak memory` (KiB, `VmHWM`).
//!
//! The wire: both veths have `gso_max_segs 1`, so every packet crosses them at its real size (no segmentation
//! offload super-packets, which a real Ethernet never carries), and the counts are the client veth's own counters
//! (`/sys/class/net/DEV/statistics`, read before and after each download; IP bytes = the counted bytes less 14 per
//! packet for the Ethernet header). They count every packet of the transfer: the TCP handshake and teardown, the
//! request (or the SMTP dialogue) and the acknowledgements, and for TLS its handshake.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::lab::{Family, HostPair, Lab, Mode, Protocol, TwoHosts};
use crate::lab_report::Cell;
use crate::Result;

use super::transfer::{
    make_files, real_wire, server, sizes, transfer, Download, Procs, Workload, KINDS,
};

/// The programs' peak resident memory over a path's transfers, KiB: curl's (the largest), the server's (its largest
/// process), the daemons' (the larger; `None` without them).
#[derive(Debug, Clone, Copy)]
struct Peaks {
    client: f64,
    server: f64,
    daemon: Option<f64>,
}

/// What carries a path's transfers.
#[derive(Debug, Clone)]
enum Carrier {
    /// The clear veth.
    Clear,
    /// netveil's daemons, set up as the pair says.
    Netveil(HostPair),
    /// strongSwan at both ends (two charons with kernel-libipsec: ESP in UDP, AES-GCM-128, the child negotiated
    /// by IKEv2 with a PSK), as `ping-rtt`'s strongSwan path.
    StrongSwan,
    /// netveil's ESP tunnel (AES-GCM-128) keyed by its own IKEv2 (PSK, x25519), as `ping-rtt`'s IKE path: the
    /// study's automatic keying beside the manual keys of the other netveil paths.
    NetveilIke,
}

/// The IKE-keyed tunnel's name.
pub const IKE_PATH: &str = "netveil esp tunnel aes128gcm16 (ike)";

/// The strongSwan path's name.
pub const STRONGSWAN_PATH: &str = "strongswan esp-in-udp tunnel aes128gcm16 (libipsec)";

/// (path, what carries it, TLS version for HTTPS or SMTP's STARTTLS).
type PathCase = (&'static str, Carrier, Option<&'static str>);

/// The paths of workload `w`: clear, TLS 1.3 and 1.2 (HTTPS, or SMTP with STARTTLS), netveil's, and strongSwan's.
fn paths(w: Workload) -> Vec<PathCase> {
    let esp = |suite: &str, mode: Mode, ah: Option<&str>| HostPair {
        mode,
        outer: Family::V4,
        inner: Family::V4,
        bundle_ah: ah.map(str::to_string),
        allow_null_null: suite == "null-null",
        ..HostPair::esp(suite)
    };
    let ah = HostPair {
        suite: "sha1".into(),
        protocol: Protocol::Ah,
        mode: Mode::Transport,
        ..HostPair::default()
    };
    let tls = match w {
        Workload::Http => ["https tls1.3", "https tls1.2"],
        Workload::Smtp => ["smtp starttls tls1.3", "smtp starttls tls1.2"],
    };
    vec![
        ("clear", Carrier::Clear, None),
        (tls[0], Carrier::Clear, Some("tls1.3")),
        (tls[1], Carrier::Clear, Some("tls1.2")),
        (
            "netveil esp tunnel aes128gcm16",
            Carrier::Netveil(HostPair::esp("aes128gcm16")),
            None,
        ),
        // The framing alone (no encryption, no integrity: the L2 study's noENC-noHMAC category), to tell framing
        // from crypto.
        (
            "netveil esp tunnel null-null",
            Carrier::Netveil(esp("null-null", Mode::Tunnel, None)),
            None,
        ),
        (
            "netveil esp transport aes128-sha1",
            Carrier::Netveil(esp("aes128-sha1", Mode::Transport, None)),
            None,
        ),
        ("netveil ah transport sha1", Carrier::Netveil(ah), None),
        (
            "netveil esp+ah transport aes128-sha1 + sha1",
            Carrier::Netveil(esp("aes128-sha1", Mode::Transport, Some("sha1"))),
            None,
        ),
        // ESP's authentication against AH's, without encryption (which netveil's ESP never leaves out when it
        // authenticates alone): the study's ESP-3DES-SHA1 against ESP-3DES + AH-SHA1, with null in place of 3DES.
        (
            ESP_AUTH_PATH,
            Carrier::Netveil(esp("null-sha1", Mode::Transport, None)),
            None,
        ),
        (
            AH_AUTH_PATH,
            Carrier::Netveil(esp("null-null", Mode::Transport, Some("sha1"))),
            None,
        ),
        (
            "netveil psp aes-gcm-128",
            Carrier::Netveil(HostPair::psp("aes-gcm-128")),
            None,
        ),
        (IKE_PATH, Carrier::NetveilIke, None),
        (STRONGSWAN_PATH, Carrier::StrongSwan, None),
    ]
}

/// The paths `smtp --quick` runs (every path in the full run): the clear one, one TLS version, netveil's default
/// tunnel, the two authentication paths and AH, PSP and strongSwan. `http --quick` runs them all.
const QUICK_SMTP: [&str; 8] = [
    "clear",
    "smtp starttls tls1.3",
    "netveil esp tunnel aes128gcm16",
    "netveil ah transport sha1",
    ESP_AUTH_PATH,
    AH_AUTH_PATH,
    "netveil psp aes-gcm-128",
    STRONGSWAN_PATH,
];

/// The path that authenticates with ESP (HMAC-SHA1-96, no encryption).
pub const ESP_AUTH_PATH: &str = "netveil esp transport null-sha1";
/// The path that authenticates with AH (HMAC-SHA1-96) over ESP without encryption.
pub const AH_AUTH_PATH: &str = "netveil esp+ah transport null-null + sha1";

/// Per (kind, size): the transfers' (bytes, packets, seconds).
type Downloads = Vec<((usize, usize), Vec<Download>)>;

/// Every file, `reps` times (a small one at least three), through `h`: `files` in (kind, size) order
/// ([`make_files`]).
fn transfers(
    lab: &Lab,
    h: &TwoHosts,
    w: Workload,
    addrs: (&str, &str),
    tls: Option<&str>,
    files: &[PathBuf],
    reps: usize,
    procs: &Procs,
) -> Result<Downloads> {
    let mut out = Vec::new();
    let sizes = files.len() / KINDS.len();
    for k in 0..KINDS.len() {
        for s in 0..sizes {
            // (make_files writes per size the text file, then the random one.)
            let file = &files[s * KINDS.len() + k];
            // A file under 100 KB goes at least three times: one segment sent twice (a tail-loss probe on a busy
            // machine) is most of its load, and the median keeps it out of the overhead.
            let n = if std::fs::metadata(file).map_or(0, |m| m.len()) < 100_000 {
                reps.max(3)
            } else {
                reps
            };
            let mut v = Vec::new();
            for _ in 0..n {
                v.push(transfer(lab, h, w, addrs, tls, file, procs)?);
            }
            out.push(((k, s), v));
        }
    }
    Ok(out)
}

fn run_path(
    bin: &Path,
    www: &Path,
    w: Workload,
    case: &PathCase,
    files: &[PathBuf],
    reps: usize,
) -> Result<(Downloads, Peaks)> {
    let (_, carrier, tls) = case;
    let pair = match carrier {
        Carrier::Clear => None,
        Carrier::Netveil(p) => Some(p),
        Carrier::NetveilIke => {
            return super::paths::with_ike_on(bin, &HostPair::default(), |lab, h, pids| {
                let mut procs = Procs::of(h, w);
                procs.daemons = pids.to_vec();
                measure(lab, h, w, true, *tls, (www, files, reps), &procs)
            });
        }
        Carrier::StrongSwan => {
            return super::paths::with_strongswan_on(&HostPair::default(), |lab, h, pids| {
                // The transfers run between the inner addresses the child covers; the charons are the daemons.
                let mut procs = Procs::of(h, w);
                procs.daemons = pids.to_vec();
                measure(lab, h, w, true, *tls, (www, files, reps), &procs)
            });
        }
    };
    let mut lab = Lab::new("nvlab")?;
    let (h, tunnel) = match pair {
        None => (TwoHosts::topology(&mut lab, &HostPair::default())?, false),
        Some(pair) => {
            lab = lab.with_netveil(bin);
            let h = TwoHosts::up(&mut lab, pair)?;
            if pair.protocol == Protocol::Psp {
                h.wait_psp_associated(Duration::from_secs(15))?;
            }
            (h, pair.mode == Mode::Tunnel)
        }
    };
    let procs = Procs::of(&h, w);
    measure(&lab, &h, w, tunnel, *tls, (www, files, reps), &procs)
}

/// The transfers of every file on a path that is up (`tunnel`: between the inner addresses), and the programs'
/// peak memory.
fn measure(
    lab: &Lab,
    h: &TwoHosts,
    w: Workload,
    tunnel: bool,
    tls: Option<&str>,
    (www, files, reps): (&Path, &[PathBuf], usize),
    procs: &Procs,
) -> Result<(Downloads, Peaks)> {
    real_wire(lab, h)?;
    // The ends' addresses: the tunnel's inner ones in tunnel mode, the veths' otherwise.
    let (client, server_addr) = if tunnel {
        (h.addrs[0].inner.to_string(), h.addrs[1].inner.to_string())
    } else {
        (h.addrs[0].outer.to_string(), h.addrs[1].outer.to_string())
    };
    let addrs = (client.as_str(), server_addr.as_str());
    let _s = server(lab, h, w, addrs, www)?;
    let d = transfers(lab, h, w, addrs, tls, files, reps, procs)?;
    let peaks = Peaks {
        client: d
            .iter()
            .flat_map(|(_, v)| v.iter().map(|x| x.client_peak_kib))
            .fold(0.0, f64::max),
        server: crate::lab_proc::ns_peak_kib(&procs.server_ns, &procs.daemons)?,
        daemon: if procs.daemons.is_empty() {
            None
        } else {
            Some(crate::lab_proc::max_peak_kib(&procs.daemons)?)
        },
    };
    Ok((d, peaks))
}

fn metric(what: &str, kind: &str, name: &str) -> String {
    format!("{what} {kind} {name}")
}

/// The IPsec web/email study's Table 4.6 (network load, slow testbed, scenario 7MA against 5MA): the load's change
/// from ESP authentication to AH authentication (%), per file size, HTTP and SMTP without Ident.
fn paper_auth_change(w: Workload, size: &str) -> Option<f64> {
    match (w, size) {
        (Workload::Http, "1KB") => Some(4.47),
        (Workload::Http, "10KB") => Some(1.81),
        (Workload::Http, "10MB") => Some(1.25),
        (Workload::Smtp, "1KB") => Some(5.41),
        (Workload::Smtp, "10KB") => Some(2.7),
        (Workload::Smtp, "10MB") => Some(1.8),
        _ => None,
    }
}

const PAPER_AUTH: &str =
    "IPsec web/email study, Table 4.6 (network load, 5MA to 7MA; SMTP without Ident)";

/// The `http` or `smtp` experiment's cells.
pub fn run(bin: &Path, quick: bool, work: &Path, w: Workload) -> Vec<Cell> {
    let experiment = w.experiment();
    let sizes = sizes(quick);
    let reps = if quick { 1 } else { 3 };
    let www: PathBuf = work.join("www");
    let files = make_files(&www, &sizes).and_then(|files| {
        if w == Workload::Smtp {
            super::smtp::make_mails(&files)?;
        }
        Ok(files)
    });
    let files = match files {
        Ok(f) => f,
        Err(e) => {
            return vec![Cell::missing(
                experiment,
                "all",
                "files",
                "B",
                &format!("{e}"),
            )]
        }
    };
    let mut cells = Vec::new();
    let mut clear: Option<Downloads> = None;
    // The median bytes of the two authentication paths, per (path, kind, size).
    let mut auth: Vec<((&str, usize, usize), f64)> = Vec::new();
    for case in paths(w) {
        if quick && w == Workload::Smtp && !QUICK_SMTP.contains(&case.0) {
            continue;
        }
        crate::say!("{experiment}: {}", case.0);
        let tunnel = !matches!(case.1, Carrier::Clear);
        let (r, peaks) = match run_path(bin, &www, w, &case, &files, reps) {
            Ok((d, p)) => (Ok(d), Ok(p)),
            Err(e) => {
                let why = format!("the path did not run: {e}");
                (Err(e), Err(why))
            }
        };
        for (k, (kind, _)) in KINDS.iter().enumerate() {
            for (s, (_, name)) in sizes.iter().enumerate() {
                let m = |w: &str| metric(w, kind, name);
                let got = r
                    .as_ref()
                    .map(|d| d.iter().find(|(at, _)| *at == (k, s)).map(|x| x.1.clone()));
                match got {
                    Ok(Some(v)) => {
                        let bytes: Vec<f64> = v.iter().map(Download::bytes).collect();
                        let mut series: Vec<(&str, &str, Vec<f64>)> = vec![
                            ("bytes", "B", bytes.clone()),
                            ("bytes down", "B", v.iter().map(|x| x.down).collect()),
                            ("bytes up", "B", v.iter().map(|x| x.up).collect()),
                            (
                                "packets",
                                "packets",
                                v.iter().map(|x| x.down_packets + x.up_packets).collect(),
                            ),
                            (
                                "packets down",
                                "packets",
                                v.iter().map(|x| x.down_packets).collect(),
                            ),
                            (
                                "packets up",
                                "packets",
                                v.iter().map(|x| x.up_packets).collect(),
                            ),
                            ("time", "ms", v.iter().map(|x| x.secs * 1e3).collect()),
                            (
                                "client cpu",
                                "ms",
                                v.iter().map(|x| x.client_cpu_ms).collect(),
                            ),
                            (
                                "server cpu",
                                "ms",
                                v.iter().map(|x| x.server_cpu_ms).collect(),
                            ),
                        ];
                        if tunnel {
                            series.push((
                                "daemon cpu",
                                "ms",
                                v.iter().filter_map(|x| x.daemon_cpu_ms).collect(),
                            ));
                        }
                        if [ESP_AUTH_PATH, AH_AUTH_PATH].contains(&case.0) {
                            auth.push(((case.0, k, s), crate::bench::ping::median(&bytes)));
                        }
                        for (w, unit, runs) in series {
                            cells.push(Cell::measured(experiment, case.0, &m(w), unit, runs));
                        }
                        if case.0 != "clear" {
                            // Over the clear download of the same file: all bytes (the study's network load) and
                            // the data direction's alone (the acknowledgements going up vary with timing).
                            let clear_runs = clear
                                .as_ref()
                                .and_then(|d| d.iter().find(|(at, _)| *at == (k, s)))
                                .map(|x| x.1.clone());
                            for (w, of) in [
                                ("overhead", Download::bytes as fn(&Download) -> f64),
                                ("overhead down", |x: &Download| x.down),
                            ] {
                                let med = |runs: &[Download]| {
                                    crate::bench::ping::median(
                                        &runs.iter().map(of).collect::<Vec<_>>(),
                                    )
                                };
                                cells.push(match &clear_runs {
                                    Some(c) if med(c) > 0.0 => Cell::measured(
                                        experiment,
                                        case.0,
                                        &m(w),
                                        "%",
                                        vec![(med(&v) / med(c) - 1.0) * 100.0],
                                    ),
                                    _ => Cell::missing(
                                        experiment,
                                        case.0,
                                        &m(w),
                                        "%",
                                        "no clear transfer of this file",
                                    ),
                                });
                            }
                        }
                    }
                    other => {
                        let why = match other {
                            Err(e) => format!("the path did not run: {e}"),
                            _ => "no transfer".into(),
                        };
                        for (w, unit) in [
                            ("bytes", "B"),
                            ("bytes down", "B"),
                            ("bytes up", "B"),
                            ("packets", "packets"),
                            ("packets down", "packets"),
                            ("packets up", "packets"),
                            ("time", "ms"),
                            ("client cpu", "ms"),
                            ("server cpu", "ms"),
                            ("daemon cpu", "ms"),
                        ]
                        .into_iter()
                        .filter(|(w, _)| tunnel || *w != "daemon cpu")
                        {
                            cells.push(Cell::missing(experiment, case.0, &m(w), unit, &why));
                        }
                        if case.0 != "clear" {
                            for w in ["overhead", "overhead down"] {
                                cells.push(Cell::missing(experiment, case.0, &m(w), "%", &why));
                            }
                        }
                    }
                }
            }
        }
        // The programs' peak memory over the path's transfers.
        let mut peak_cells = vec![
            ("client peak memory", peaks.as_ref().map(|p| Some(p.client))),
            ("server peak memory", peaks.as_ref().map(|p| Some(p.server))),
        ];
        if tunnel {
            peak_cells.push(("daemon peak memory", peaks.as_ref().map(|p| p.daemon)));
        }
        for (m, v) in peak_cells {
            cells.push(match v {
                Ok(Some(v)) => Cell::measured(experiment, case.0, m, "KiB", vec![v]),
                Ok(None) => Cell::missing(experiment, case.0, m, "KiB", "no daemon ran"),
                Err(why) => Cell::missing(experiment, case.0, m, "KiB", why),
            });
        }
        if case.0 == "clear" {
            clear = r.ok();
        }
    }
    // AH's authentication against ESP's: the load's change from the one to the other, per file.
    for (k, (kind, _)) in KINDS.iter().enumerate() {
        for (s, (_, name)) in sizes.iter().enumerate() {
            let get = |p: &str| auth.iter().find(|(at, _)| *at == (p, k, s)).map(|x| x.1);
            let metric = metric("auth esp to ah", kind, name);
            let c = match (get(ESP_AUTH_PATH), get(AH_AUTH_PATH)) {
                (Some(e), Some(a)) if e > 0.0 => Cell::measured(
                    experiment,
                    AH_AUTH_PATH,
                    &metric,
                    "%",
                    vec![(a / e - 1.0) * 100.0],
                ),
                _ => Cell::missing(
                    experiment,
                    AH_AUTH_PATH,
                    &metric,
                    "%",
                    "a path of the two did not run",
                ),
            };
            cells.push(match paper_auth_change(w, name) {
                Some(p) if *kind == "random" => c.paper(p, PAPER_AUTH),
                _ => c,
            });
        }
    }
    let _ = std::fs::remove_dir_all(work);
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `smtp --quick` picks its paths by name: each name it keeps is one of smtp's paths (a path renamed would
    /// otherwise drop out of the quick run unnoticed).
    #[test]
    fn the_quick_smtp_paths_are_smtp_paths() {
        let names: Vec<&str> = paths(Workload::Smtp).iter().map(|p| p.0).collect();
        for q in QUICK_SMTP {
            assert!(names.contains(&q), "{q} is not an smtp path: {names:?}");
        }
    }

    #[test]
    fn the_files_are_their_sizes_and_text_compresses_random_does_not() {
        let dir = std::env::temp_dir().join(format!("nv-http-files-{}", std::process::id()));
        let files = make_files(&dir, &[(1_000, "1KB"), (100_000, "100KB")]).unwrap();
        // Per size the text file, then the random one (what `transfers` expects).
        let names: Vec<_> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().to_string())
            .collect();
        assert_eq!(names, ["1KB.txt", "1KB.bin", "100KB.txt", "100KB.bin"]);
        for (name, size) in [("1KB", 1_000), ("100KB", 100_000)] {
            for ext in ["txt", "bin"] {
                let b = std::fs::read(dir.join(format!("{name}.{ext}"))).unwrap();
                assert_eq!(b.len(), size, "{name}.{ext}");
            }
        }
        let text = std::fs::read_to_string(dir.join("100KB.txt")).unwrap();
        assert!(text.split_whitespace().count() > 10_000);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(sizes(false).len(), 5);
        assert_eq!(metric("bytes", "text", "1KB"), "bytes text 1KB");
    }
}
