//! `netveil lab` experiment `scp`: the L2 study's SCP test (its Figs. 6.35-6.46): a file of zeros copied with
//! OpenSSH's `scp` from one station to the other on the wired-LAN lab (two hosts on a Linux bridge), over the plain
//! bridge and through l2sec (AES-GCM-128, and Blowfish-CBC with HMAC-SHA1, the thesis' suite).
//!
//! - The file: 209,715,200 bytes of zeros, the study's `dd if=/dev/zero bs=209715200 count=1` (`--quick`: 20 MiB),
//!   made sparse (it reads as zeros and takes no disk). It is written to a file in the lab's directory on the
//!   receiving station (the same file system; removed with the lab).
//! - The server: the lab's own `sshd` on the receiving station: host key, authorized key and configuration in the
//!   lab's directory, key login for root only, `UseDNS no` (the study's one extra run without the reverse lookups
//!   that its default configuration made), no PAM.
//! - The client: `scp` under GNU `time`: the copy's wall time, and the CPU time (user and system) and peak resident
//!   memory of `scp` and the `ssh` it runs (Linux reports a waited-for process's descendants with it).
//! - The server's CPU: what the connection's processes (sshd's session processes, its SFTP server) used, read as the
//!   listening sshd's children's time (`cutime` + `cstime` in `/proc/PID/stat`) before and after the copy: they
//!   are its reaped descendants.
//! - l2sec's cost: its daemons' CPU time over the copy (both stations) and the larger peak resident memory.
//! - Duplicate ACKs (the study's Table 6.2): one more copy per path under capture (headers only, on the sending
//!   station's side of the protection: its LAN port on the plain bridge, l2sec's TAP through l2sec, where the TCP
//!   segments are in clear), counted by tshark's TCP analysis (`tcp.analysis.duplicate_ack`) as a share of the TCP
//!   packets captured. The capture runs on its own copy, so that it does not slow the timed ones.
//!
//! Cells per path (`plain bridge`, `l2sec SUITE`), each copy a repetition (3; `--quick`: 1): `scp time` (s), `scp
//! rate` (MB/s, 10^6 bytes), `scp client cpu` and `sshd cpu` (ms), `scp client peak memory` (KiB), and for l2sec
//! `daemon cpu` (ms) and `daemon peak memory` (KiB), and `scp rate of the bridge's` (%); and `duplicate acks` (% of
//! the captured TCP packets, the study's Table 6.2 beside: 0% on plain Ethernet, 0.759% with its protocol and full
//! crypto, which used Blowfish-CBC with HMAC-SHA1) with `captured packets`. The study gives its other SCP results
//! as figures only (no number in its text), so no paper value stands beside them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::lab::Lab;
use crate::lab_report::Cell;
use crate::lan::{L2Opts, Lan};
use crate::{Error, Result};

const EXPERIMENT: &str = "scp";
/// The study's file: `dd if=/dev/zero of=dummyfile bs=209715200 count=1`.
pub const FULL_BYTES: u64 = 209_715_200;
pub const QUICK_BYTES: u64 = 20 * 1024 * 1024;
/// The paths: (name, l2sec suite; `None`: the plain bridge). The null suite is the study's noENC-noHMAC category.
pub const PATHS: [(&str, Option<&str>); 4] = [
    ("plain bridge", None),
    ("l2sec aes128gcm", Some("aes128gcm")),
    ("l2sec blowfish-cbc-sha1", Some("blowfish-cbc-sha1")),
    (super::paths::L2SEC_NULL_PATH, Some("null-null")),
];

/// The paths of a run: `--quick` leaves out Blowfish (the slowest suite; the full run has it).
pub fn paths(quick: bool) -> Vec<(&'static str, Option<&'static str>)> {
    PATHS
        .into_iter()
        .filter(|p| !quick || p.1 != Some("blowfish-cbc-sha1"))
        .collect()
}

/// The study's Table 6.2 (SCP, 200 MB): duplicate ACKs as a share of the captured packets.
const TABLE_6_2_ETHERNET: &str = "L2 study, Table 6.2: 1-Ethernet, 0 of 23,320 captured packets";
const TABLE_6_2_FULL: &str =
    "L2 study, Table 6.2: 4-PSP-FULL (Blowfish-CBC, HMAC-SHA1), 1,695 of 223,188 captured packets";
const TABLE_6_2_NULL: &str =
    "L2 study, Table 6.2: 3-PSP-noENC-noHMAC, 228 of 132,133 captured packets";
/// The study's SCP CPU figures for its program (of one core, `top`): our `daemon cpu share` beside them.
const FIG_6_36_NULL: &str =
    "L2 study, Fig. 6.36: its program 21% CPU, PSP-noENC-noHMAC (from text)";
const FIG_6_36_FULL: &str =
    "L2 study, Fig. 6.36: its program 78% CPU, full crypto (Blowfish-CBC, HMAC-SHA1; from text)";

/// One copy's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Copied {
    pub seconds: f64,
    /// scp and its ssh, user + system, ms.
    pub client_cpu_ms: f64,
    pub client_peak_kib: f64,
    /// The connection's server processes, ms.
    pub sshd_cpu_ms: f64,
    /// l2sec's daemons (both stations), ms; `None` on the plain bridge.
    pub daemon_cpu_ms: Option<f64>,
    pub daemon_peak_kib: Option<f64>,
}

fn keygen(path: &Path) -> Result<()> {
    let _ = std::fs::remove_file(path);
    let out = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output()
        .map_err(Error::io(
            "cannot run ssh-keygen (apt-get install openssh-client)",
        ))?;
    if !out.status.success() {
        return Err(Error::command(
            "ssh-keygen",
            Some(out.status),
            String::from_utf8_lossy(&out.stderr),
        ));
    }
    Ok(())
}

/// Starts the lab's sshd on `addr` in `ns`, its files in `dir`; ready when it listens.
fn sshd(lab: &Lab, ns: &str, addr: &str, dir: &Path) -> Result<crate::lab::Held> {
    keygen(&dir.join("host_key"))?;
    let d = dir.display();
    let conf = format!(
        "Port 22\nListenAddress {addr}\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
         AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n\
         KbdInteractiveAuthentication no\nUsePAM no\nUseDNS no\nStrictModes no\nSubsystem sftp internal-sftp\n"
    );
    let conf_path = dir.join("sshd_config");
    std::fs::write(&conf_path, conf).map_err(Error::io("sshd_config"))?;
    // sshd refuses to start without its privilege separation directory (the package's service makes it).
    std::fs::create_dir_all("/run/sshd").map_err(Error::io("/run/sshd"))?;
    let child = lab
        .command(ns, &["/usr/sbin/sshd", "-D", "-e", "-f"])
        .arg(&conf_path)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("sshd.log")).map_err(Error::io("sshd.log"))?)
        .spawn()
        .map_err(Error::io(
            "cannot start sshd (apt-get install openssh-server)",
        ))?;
    let s = crate::lab::Held(child);
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(50));
        let o = lab.exec_ok(ns, &["ss", "-Hltn", "sport", "= :22"])?;
        if o.contains(&format!("{addr}:22")) {
            return Ok(s);
        }
    }
    Err(Error::timeout(
        format!("sshd did not listen on {addr}:22"),
        2.5,
        format!("see {d}/sshd.log"),
    ))
}

/// Parses GNU time's `-f '%e %U %S %M'` line: (wall s, CPU ms, peak KiB).
pub fn parse_time(line: &str) -> Option<(f64, f64, f64)> {
    let v: Vec<f64> = line
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<Vec<f64>>>()?;
    match v[..] {
        [e, u, s, m] => Some((e, (u + s) * 1e3, m)),
        _ => None,
    }
}

/// One copy of `file` from `ns` to `root@addr` (the received file in `dir`), with the sshd's pid and the daemons'.
fn copy_once(
    lab: &Lab,
    ns: &str,
    addr: &str,
    dir: &Path,
    file: &Path,
    sshd_pid: u32,
    daemons: &[u32],
) -> Result<Copied> {
    let dest = dir.join("received");
    let daemon_cpu = || crate::lab_proc::sum_cpu_ms(daemons);
    let (sshd0, daemons0) = (crate::lab_proc::children_cpu_ms(sshd_pid)?, daemon_cpu()?);
    let t = Instant::now();
    let out = lab
        .command(
            ns,
            &["/usr/bin/time", "-f", "%e %U %S %M", "scp", "-q", "-i"],
        )
        .arg(dir.join("id"))
        .args([
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
        ])
        .arg(file)
        .arg(format!("root@{addr}:{}", dest.display()))
        .output()
        .map_err(Error::io(
            "cannot run scp (apt-get install openssh-client time)",
        ))?;
    let wall = t.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(Error::command("scp", Some(out.status), err));
    }
    let (_, client_cpu_ms, client_peak_kib) =
        err.lines().rev().find_map(parse_time).ok_or_else(|| {
            Error::output(
                "/usr/bin/time",
                format!("no GNU time line in: {}", err.trim()),
            )
        })?;
    let got = std::fs::metadata(&dest)
        .map_err(Error::io("the received file"))?
        .len();
    let sent = std::fs::metadata(file)
        .map_err(Error::io("the file"))?
        .len();
    let _ = std::fs::remove_file(&dest);
    if got != sent {
        return Err(Error::measurement(
            "scp",
            format!("moved {got} of {sent} bytes"),
        ));
    }
    // (The listening sshd has reaped the connection's processes once the client is done; a moment for it.)
    std::thread::sleep(Duration::from_millis(100));
    let sshd_cpu_ms = crate::lab_proc::children_cpu_ms(sshd_pid)? - sshd0;
    let (daemon_cpu_ms, daemon_peak_kib) = if daemons.is_empty() {
        (None, None)
    } else {
        let peak = crate::lab_proc::max_peak_kib(daemons)?;
        (Some(daemon_cpu()? - daemons0), Some(peak))
    };
    Ok(Copied {
        seconds: wall,
        client_cpu_ms,
        client_peak_kib,
        sshd_cpu_ms,
        daemon_cpu_ms,
        daemon_peak_kib,
    })
}

/// TCP packets in a capture, and how many of them tshark's TCP analysis calls duplicate ACKs.
pub fn duplicate_acks(pcap: &Path) -> Result<(u64, u64)> {
    let count = |filter: &str| -> Result<u64> {
        let out = crate::lab::run_ok(
            std::process::Command::new("tshark")
                .args(["-n", "-r"])
                .arg(pcap)
                .args(["-Y", filter, "-T", "fields", "-e", "frame.number"]),
        )?;
        Ok(out.lines().filter(|l| !l.trim().is_empty()).count() as u64)
    };
    Ok((count("tcp")?, count("tcp.analysis.duplicate_ack")?))
}

/// A table's count as a share of its total, %, to four decimals (as the study's tables give them).
pub fn share(count: f64, total: f64) -> f64 {
    (count / total * 1e6).round() / 1e4
}

/// The cells of a captured run's duplicate ACKs for `path`: `captured packets` and `duplicate acks` (% of them,
/// beside the study's `paper`), or both without value and why.
pub fn ack_cells(
    experiment: &str,
    path: &str,
    acks: Result<(u64, u64)>,
    paper: (f64, &str),
) -> [Cell; 2] {
    match acks {
        Ok((captured, dup)) if captured > 0 => [
            Cell::measured(
                experiment,
                path,
                "captured packets",
                "packets",
                vec![captured as f64],
            ),
            Cell::measured(
                experiment,
                path,
                "duplicate acks",
                "%",
                vec![100.0 * dup as f64 / captured as f64],
            )
            .paper(paper.0, paper.1),
        ],
        other => {
            let why = match other {
                Err(e) => format!("{e}"),
                _ => "the capture holds no TCP packet".into(),
            };
            [
                Cell::missing(experiment, path, "captured packets", "packets", &why),
                Cell::missing(experiment, path, "duplicate acks", "%", &why)
                    .paper(paper.0, paper.1),
            ]
        }
    }
}

/// What a path's copies gave: the timed copies, and (captured TCP packets, duplicate ACKs) of the captured one.
type PathResult = (Vec<Copied>, Result<(u64, u64)>);

/// `reps` copies of a `bytes` file over a fresh LAN lab, plain (`suite` None) or through l2sec, and one more under
/// capture.
fn path_runs(bin: &Path, suite: Option<&str>, bytes: u64, reps: usize) -> Result<PathResult> {
    let mut lab = Lab::new("nvlab")?.with_netveil(bin);
    let (lan, daemons) = Lan::pair(&mut lab, suite.map(L2Opts::suite))?;
    let pids = crate::lan::daemon_pids(&daemons)?;
    let (h1, h2) = (lan.station("h1")?.clone(), lan.station("h2")?.clone());
    let dir: PathBuf = lab.dir().join("scp");
    std::fs::create_dir_all(&dir).map_err(Error::io("scp dir"))?;
    keygen(&dir.join("id"))?;
    std::fs::copy(dir.join("id.pub"), dir.join("authorized_keys"))
        .map_err(Error::io("authorized_keys"))?;
    let addr = h2.ip.to_string();
    let server = sshd(&lab, &h2.ns, &addr, &dir)?;
    let file = dir.join("zero");
    std::fs::File::create(&file)
        .and_then(|f| f.set_len(bytes))
        .map_err(Error::io("the file to copy"))?;
    let sshd_pid = server.id();
    let runs = (0..reps)
        .map(|_| copy_once(&lab, &h1.ns, &addr, &dir, &file, sshd_pid, &pids))
        .collect::<Result<Vec<Copied>>>()?;
    // The sender's view of the TCP segments: its LAN port, or l2sec's TAP (the port carries sealed frames).
    let dev = if suite.is_some() {
        crate::lan::TAP
    } else {
        crate::lan::PORT
    };
    let acks = lab
        .capture(&h1.ns, dev, "scp.pcap", 96, &["tcp", "port", "22"])
        .and_then(|mut cap| {
            let copied = copy_once(&lab, &h1.ns, &addr, &dir, &file, sshd_pid, &pids);
            let pcap = cap.stop()?;
            copied?;
            duplicate_acks(&pcap)
        });
    Ok((runs, acks))
}

/// The `scp` experiment's cells.
pub fn run(bin: &Path, quick: bool) -> Vec<Cell> {
    let (bytes, reps) = if quick {
        (QUICK_BYTES, 1)
    } else {
        (FULL_BYTES, 3)
    };
    let mut cells = Vec::new();
    let mut bridge_rate: Option<f64> = None;
    for (name, suite) in paths(quick) {
        crate::say!("scp: {name}");
        let metrics = [
            ("scp time", "s"),
            ("scp rate", "MB/s"),
            ("scp client cpu", "ms"),
            ("scp client peak memory", "KiB"),
            ("sshd cpu", "ms"),
        ];
        let daemon_metrics = [("daemon cpu", "ms"), ("daemon peak memory", "KiB")];
        match path_runs(bin, suite, bytes, reps) {
            Ok((runs, acks)) => {
                let (paper, source) = match suite {
                    None => (0.0, TABLE_6_2_ETHERNET),
                    Some("null-null") => (share(228.0, 132_133.0), TABLE_6_2_NULL),
                    Some(_) => (0.759, TABLE_6_2_FULL),
                };
                cells.extend(ack_cells(EXPERIMENT, name, acks, (paper, source)));
                let col = |f: &dyn Fn(&Copied) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
                let rates = col(&|c| bytes as f64 / 1e6 / c.seconds);
                let values = [
                    col(&|c| c.seconds),
                    rates.clone(),
                    col(&|c| c.client_cpu_ms),
                    col(&|c| c.client_peak_kib),
                    col(&|c| c.sshd_cpu_ms),
                ];
                for ((m, unit), v) in metrics.iter().zip(values) {
                    cells.push(Cell::measured(EXPERIMENT, name, m, unit, v));
                }
                let rate = crate::bench::ping::median(&rates);
                if suite.is_none() {
                    bridge_rate = Some(rate);
                    continue;
                }
                let daemon: [fn(&Copied) -> Option<f64>; 2] =
                    [|c| c.daemon_cpu_ms, |c| c.daemon_peak_kib];
                for ((m, unit), f) in daemon_metrics.into_iter().zip(daemon) {
                    cells.push(Cell::measured(
                        EXPERIMENT,
                        name,
                        m,
                        unit,
                        runs.iter().filter_map(f).collect(),
                    ));
                }
                // The busier daemon's share of one core can't be told from the sum; half the sum over the copy's
                // time is the two stations' mean.
                let (cpu_paper, cpu_source) = if suite == Some("null-null") {
                    (21.0, FIG_6_36_NULL)
                } else {
                    (78.0, FIG_6_36_FULL)
                };
                cells.push(
                    Cell::measured(
                        EXPERIMENT,
                        name,
                        "daemon cpu share",
                        "%",
                        runs.iter()
                            .filter_map(|c| Some(c.daemon_cpu_ms? / 2.0 / (c.seconds * 10.0)))
                            .collect(),
                    )
                    .paper(cpu_paper, cpu_source),
                );
                cells.push(match bridge_rate {
                    Some(b) if b > 0.0 => Cell::measured(
                        EXPERIMENT,
                        name,
                        "scp rate of the bridge's",
                        "%",
                        vec![100.0 * rate / b],
                    ),
                    _ => Cell::missing(
                        EXPERIMENT,
                        name,
                        "scp rate of the bridge's",
                        "%",
                        "the plain bridge gave no rate (see its cells)",
                    ),
                });
            }
            Err(e) => {
                let why = format!("{e}");
                for (m, unit) in metrics
                    .into_iter()
                    .chain([("captured packets", "packets"), ("duplicate acks", "%")])
                {
                    cells.push(Cell::missing(EXPERIMENT, name, m, unit, &why));
                }
                if suite.is_some() {
                    for (m, unit) in daemon_metrics
                        .into_iter()
                        .chain([("scp rate of the bridge's", "%"), ("daemon cpu share", "%")])
                    {
                        cells.push(Cell::missing(EXPERIMENT, name, m, unit, &why));
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
    fn gnu_time_lines_are_read() {
        let (e, cpu, peak) = parse_time("0.58 0.09 0.03 9980").unwrap();
        assert_eq!((e, peak), (0.58, 9980.0));
        assert!((cpu - 120.0).abs() < 1e-9, "{cpu}");
        assert_eq!(parse_time("scp: something"), None);
        assert_eq!(parse_time("1 2 3"), None);
    }

    #[test]
    fn the_file_is_the_studys() {
        assert_eq!(FULL_BYTES, 209_715_200);
        assert_eq!(PATHS[0].1, None);
        assert_eq!(paths(false).len(), 4);
        assert!(paths(true).iter().all(|p| p.1 != Some("blowfish-cbc-sha1")));
    }
}
