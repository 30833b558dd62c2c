//! Ping round-trip times for `netveil bench`: `ping` (iputils) run in a lab namespace, its per-packet `time=`
//! values parsed here, median and 99th percentile computed here (no external tools), and the time a tunnel adds
//! over its clear baseline.

use crate::lab::Lab;
use crate::{Error, Result};

/// The ICMP payload sizes every row is pinged with (ping's `-s`: 56 is ping's default, 1000 a mid-size packet that
/// fits every tunnel's MTU).
pub const PING_SIZES: [u32; 2] = [56, 1000];

/// The interval between pings (ping's `-i`; below 0.2 s needs root).
pub const PING_INTERVAL: &str = "0.005";

/// Pings sent (and not counted) before each measurement: neighbour resolution (ARP, and SEP with l2sec) and cold
/// caches would otherwise sit in the slowest percent.
const WARMUP_PINGS: u32 = 3;

/// The round-trip times of one ping run at one payload size.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PingStat {
    /// ICMP payload bytes (ping's `-s`).
    pub bytes: u32,
    pub sent: u32,
    pub received: u32,
    pub median_ms: f64,
    /// 99th percentile (nearest rank: the smallest time that at least 99% of the replies do not exceed).
    pub p99_ms: f64,
    /// This row's median minus its clear baseline's median at the same size (clear veth for IP rows, the plain
    /// bridge for l2sec rows); `None` for the baseline itself or when the baseline was not measured.
    pub added_median_ms: Option<f64>,
    /// `added_median_ms` over wireguard-go's (IP rows; `None` where either is missing or wireguard-go's is not
    /// above zero).
    pub x_wireguard_go: Option<f64>,
    /// Sleeps per reply: the voluntary context switches (a thread blocking, to be woken later) of every thread of
    /// every process in the tunnel's namespaces (both hosts: the daemons, wireguard-go) during the timed pings,
    /// over the replies. What a round trip costs in wake-ups, steadier than its time on a busy or virtual machine;
    /// 0 where nothing runs in the namespaces (the clear baselines); `None` where not watched.
    pub sleeps_per_reply: Option<f64>,
    /// The sleeps counted (for pooling rounds; not in the JSON).
    #[serde(skip)]
    pub sleeps: Option<u64>,
    /// The round-trip times the statistics come from (for pooling rounds; not in the JSON).
    #[serde(skip)]
    pub times: Vec<f64>,
}

/// The round-trip times (ms) of ping's reply lines, in order. Duplicates (`DUP!`) are left out; `time<X` (ping's
/// way of saying "below its resolution") counts as X, an upper bound. A value in `s` or `us`/`usec` is converted
/// to ms.
pub fn parse_times(out: &str) -> Vec<f64> {
    out.lines()
        .filter(|l| l.contains(" from ") && !l.contains("DUP!"))
        .filter_map(|l| {
            let i = l.find("time=").or_else(|| l.find("time<"))?;
            parse_time(&l[i + 5..])
        })
        .collect()
}

/// `0.123 ms`, `1ms`, `1.2 s`, `80 usec` -> ms.
fn parse_time(s: &str) -> Option<f64> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let v: f64 = s[..end].parse().ok()?;
    let unit = s[end..].split_whitespace().next().unwrap_or("ms");
    let scale = match unit {
        "ms" => 1.0,
        "s" | "sec" => 1000.0,
        "us" | "usec" | "µs" => 0.001,
        _ => return None,
    };
    v.is_finite().then_some(v * scale)
}

/// The median of `v` (the mean of the two middle values for an even count); NaN when `v` is empty.
pub fn median(v: &[f64]) -> f64 {
    let s = sorted(v);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The `p`-th percentile of `v` by nearest rank (the value at rank ceil(p/100 * n), 1-based): the smallest value
/// that at least p% of the values do not exceed. NaN when `v` is empty.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let s = sorted(v);
    if s.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    s.sort_by(f64::total_cmp);
    s
}

/// The statistics of `times` from `sent` pings of `bytes` payload.
pub fn stat(bytes: u32, sent: u32, times: &[f64]) -> PingStat {
    PingStat {
        bytes,
        sent,
        received: times.len() as u32,
        median_ms: median(times),
        p99_ms: percentile(times, 99.0),
        added_median_ms: None,
        x_wireguard_go: None,
        sleeps_per_reply: None,
        sleeps: None,
        times: times.to_vec(),
    }
}

/// [`stat`] with the sleeps counted during the run.
fn stat_with_sleeps(bytes: u32, sent: u32, times: &[f64], sleeps: Option<u64>) -> PingStat {
    let mut s = stat(bytes, sent, times);
    s.sleeps = sleeps;
    s.sleeps_per_reply = sleeps
        .filter(|_| !times.is_empty())
        .map(|n| n as f64 / times.len() as f64);
    s
}

/// The voluntary context switches so far of every thread of every process in the network namespaces `names`
/// (their `/run/netns` entries), from `/proc/PID/task/TID/status`; `None` if a namespace is not there. Processes
/// and threads that end are not counted (so a window's difference leaves out the ones that ended in it).
pub fn sleeps_in(names: &[&str]) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let inodes: Vec<u64> = names
        .iter()
        .map(|n| std::fs::metadata(format!("/run/netns/{n}")).map(|m| m.ino()))
        .collect::<std::io::Result<_>>()
        .ok()?;
    let mut total = 0;
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let pid = e.file_name();
        let Some(pid) = pid
            .to_str()
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(link) = std::fs::read_link(format!("/proc/{pid}/ns/net")) else {
            continue;
        };
        if !net_inode(&link.to_string_lossy()).is_some_and(|i| inodes.contains(&i)) {
            continue;
        }
        // (A process may end between the listing and the reading.)
        for (_, st) in crate::lab_proc::thread_files(pid, "status").unwrap_or_default() {
            total += voluntary_switches(&st).unwrap_or(0);
        }
    }
    Some(total)
}

/// The inode of a `/proc/PID/ns/net` link's target, `net:[4026531840]`.
fn net_inode(link: &str) -> Option<u64> {
    link.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

/// `voluntary_ctxt_switches` of a `/proc/.../status` text.
fn voluntary_switches(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The statistics of several runs (rounds) pooled: per size, every round's times together (and their pings sent).
pub fn pool<'a>(runs: impl IntoIterator<Item = &'a [PingStat]>) -> Vec<PingStat> {
    // Per size: pings sent, times, sleeps (counted only while every run counted them).
    let mut by_size: Vec<(u32, u32, Vec<f64>, Option<u64>)> = Vec::new();
    for run in runs {
        for s in run {
            match by_size.iter_mut().find(|(b, ..)| *b == s.bytes) {
                Some((_, sent, times, sleeps)) => {
                    *sent += s.sent;
                    times.extend_from_slice(&s.times);
                    *sleeps = sleeps.zip(s.sleeps).map(|(a, b)| a + b);
                }
                None => by_size.push((s.bytes, s.sent, s.times.clone(), s.sleeps)),
            }
        }
    }
    by_size
        .iter()
        .map(|(b, sent, times, sleeps)| stat_with_sleeps(*b, *sent, times, *sleeps))
        .collect()
}

/// `count` pings of `bytes` payload, [`PING_INTERVAL`] apart, from namespace `ns` to `dst`, after a few warm-up
/// pings. Fails if no reply came back (some lost ones are only counted: `received` < `sent`).
pub fn ping(lab: &Lab, ns: &str, dst: &str, bytes: u32, count: u32) -> Result<PingStat> {
    ping_watching(lab, ns, dst, bytes, count, &[])
}

/// [`ping`], counting the sleeps of the processes in the namespaces `watch` during the timed pings (see
/// [`PingStat::sleeps_per_reply`]; not counted when `watch` is empty).
pub fn ping_watching(
    lab: &Lab,
    ns: &str,
    dst: &str,
    bytes: u32,
    count: u32,
    watch: &[&str],
) -> Result<PingStat> {
    let size = bytes.to_string();
    let run = |n: u32| {
        let n = n.to_string();
        let args = [
            "ping",
            "-n",
            "-c",
            &n,
            "-i",
            PING_INTERVAL,
            "-s",
            &size,
            "-W",
            "2",
            dst,
        ];
        // ping exits 1 when some replies are missing: its output still holds the others.
        lab.exec(ns, &args)
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    run(WARMUP_PINGS)?;
    let before = if watch.is_empty() {
        None
    } else {
        sleeps_in(watch)
    };
    let out = run(count)?;
    // ping has ended: its own sleeps are not among these.
    let sleeps = before.and_then(|b| Some(sleeps_in(watch)?.saturating_sub(b)));
    let times = parse_times(&out);
    if times.is_empty() {
        return Err(Error::measurement(
            format!("ping {dst} ({bytes}-byte payload)"),
            "no reply",
        ));
    }
    Ok(stat_with_sleeps(bytes, count, &times, sleeps))
}

/// [`ping_watching`] at every size of [`PING_SIZES`]; nothing when `count` is 0.
pub fn ping_sizes(
    lab: &Lab,
    ns: &str,
    dst: &str,
    count: u32,
    watch: &[&str],
) -> Result<Vec<PingStat>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    PING_SIZES
        .iter()
        .map(|&b| ping_watching(lab, ns, dst, b, count, watch))
        .collect()
}

/// The stat of `stats` at `bytes`.
fn at(stats: &[PingStat], bytes: u32) -> Option<&PingStat> {
    stats.iter().find(|s| s.bytes == bytes)
}

/// Fills `added_median_ms` of `row` against `baseline` (same sizes), and `x_wireguard_go` against wireguard-go's
/// stats when given (those must have their own `added_median_ms` filled already).
pub fn fill_added(row: &mut [PingStat], baseline: &[PingStat], wireguard_go: Option<&[PingStat]>) {
    for s in row.iter_mut() {
        s.added_median_ms = at(baseline, s.bytes).map(|b| s.median_ms - b.median_ms);
        s.x_wireguard_go = match (s.added_median_ms, wireguard_go.and_then(|w| at(w, s.bytes))) {
            (Some(a), Some(w)) => w.added_median_ms.filter(|&w| w > 0.0).map(|w| a / w),
            _ => None,
        };
    }
}

fn ms(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.3}"),
        _ => "-".into(),
    }
}

fn ratio(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.2}x"),
        _ => "-".into(),
    }
}

/// The progress note of one row: `rtt 56 B 0.030/0.071 ms, 1000 B 0.034/0.090 ms` (median/p99).
pub fn brief(stats: &[PingStat]) -> String {
    if stats.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = stats
        .iter()
        .map(|s| {
            let lost = if s.received < s.sent {
                format!(" ({} lost)", s.sent - s.received)
            } else {
                String::new()
            };
            format!(
                "{} B {}/{} ms{lost}",
                s.bytes,
                ms(Some(s.median_ms)),
                ms(Some(s.p99_ms))
            )
        })
        .collect();
    format!("rtt {}", parts.join(", "))
}

/// The ping table: per row and size the median and p99, the added median, with `wireguard_go_column` the ratio
/// of the added median to wireguard-go's, and the sleeps per reply. Rows without stats are left out.
pub fn render(rows: &[(&str, &[PingStat])], wireguard_go_column: bool) -> String {
    let mut head = format!("{:<40}", "path");
    for b in PING_SIZES {
        head.push_str(&format!(" {:>10} {:>8}", format!("{b} B med"), "p99"));
    }
    for b in PING_SIZES {
        head.push_str(&format!(" {:>11}", format!("added {b}")));
    }
    if wireguard_go_column {
        for b in PING_SIZES {
            head.push_str(&format!(" {:>10}", format!("x wg {b}")));
        }
    }
    for b in PING_SIZES {
        head.push_str(&format!(" {:>11}", format!("sleeps {b}")));
    }
    let mut out = format!("{}\n", head.trim_end());
    for (path, stats) in rows.iter().filter(|(_, s)| !s.is_empty()) {
        let mut line = format!("{path:<40}");
        for b in PING_SIZES {
            let s = at(stats, b);
            line.push_str(&format!(
                " {:>10} {:>8}",
                ms(s.map(|s| s.median_ms)),
                ms(s.map(|s| s.p99_ms))
            ));
        }
        for b in PING_SIZES {
            line.push_str(&format!(
                " {:>11}",
                ms(at(stats, b).and_then(|s| s.added_median_ms))
            ));
        }
        if wireguard_go_column {
            for b in PING_SIZES {
                line.push_str(&format!(
                    " {:>10}",
                    ratio(at(stats, b).and_then(|s| s.x_wireguard_go))
                ));
            }
        }
        for b in PING_SIZES {
            line.push_str(&format!(
                " {:>11}",
                match at(stats, b).and_then(|s| s.sleeps_per_reply) {
                    Some(v) if v.is_finite() => format!("{v:.2}"),
                    _ => "-".into(),
                }
            ));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const IPUTILS: &str = "PING 10.0.0.2 (10.0.0.2) 1000(1028) bytes of data.
1008 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=0.124 ms
1008 bytes from 10.0.0.2: icmp_seq=2 ttl=64 time=0.008 ms
1008 bytes from 10.0.0.2: icmp_seq=2 ttl=64 time=0.009 ms (DUP!)
From 10.0.0.1 icmp_seq=3 Destination Host Unreachable
64 bytes from 10.0.0.2: icmp_seq=4 ttl=64 time<0.001 ms
64 bytes from 10.0.0.2: icmp_seq=5 ttl=64 time=12 ms
64 bytes from 10.0.0.2: icmp_seq=6 ttl=64 time=1.5ms

--- 10.0.0.2 ping statistics ---
6 packets transmitted, 5 received, +1 duplicates, 16% packet loss, time 10ms
rtt min/avg/max/mdev = 0.008/0.046/0.124/0.054 ms
";

    #[test]
    fn parses_reply_times_only() {
        // The duplicate, the unreachable line and the summary's min/avg/max are not replies.
        assert_eq!(parse_times(IPUTILS), vec![0.124, 0.008, 0.001, 12.0, 1.5]);
    }

    #[test]
    fn parses_units() {
        assert_eq!(parse_time("1.2 s"), Some(1200.0));
        assert_eq!(parse_time("80 usec"), Some(0.08));
        assert_eq!(parse_time("0.5 ms"), Some(0.5));
        assert_eq!(parse_time("x ms"), None);
        assert_eq!(parse_time("3 fortnights"), None);
    }

    #[test]
    fn median_and_nearest_rank_percentile() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
        // 300 values 1..=300: rank ceil(0.99 * 300) = 297.
        let v: Vec<f64> = (1..=300).rev().map(f64::from).collect();
        assert_eq!(percentile(&v, 99.0), 297.0);
        assert_eq!(median(&v), 150.5);
        // 10 values: rank ceil(9.9) = 10, the largest; one value is its own percentile.
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 99.0), 10.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!(percentile(&v, 50.0), 5.0);
        // 160 values: 158.4 rounds up to rank 159 (not to the nearest, 158).
        let v: Vec<f64> = (1..=160).map(f64::from).collect();
        assert_eq!(percentile(&v, 99.0), 159.0);
    }

    fn st(bytes: u32, median_ms: f64) -> PingStat {
        stat(bytes, 300, &[median_ms])
    }

    #[test]
    fn rounds_pool_their_times() {
        let a = stat(56, 3, &[1.0, 2.0, 3.0]);
        let b = stat(56, 4, &[10.0, 20.0]);
        let c = stat(1000, 1, &[5.0]);
        let p = pool([&[a, c][..], &[b][..]]);
        assert_eq!(p.len(), 2);
        // The median of all five times, not the median of the two rounds' medians (11.0).
        assert_eq!((p[0].bytes, p[0].sent, p[0].received), (56, 7, 5));
        assert_eq!((p[0].median_ms, p[0].p99_ms), (3.0, 20.0));
        assert_eq!((p[1].bytes, p[1].sent, p[1].median_ms), (1000, 1, 5.0));
    }

    #[test]
    fn added_and_ratio_to_wireguard_go() {
        let clear = vec![st(56, 0.010), st(1000, 0.020)];
        let mut wg = vec![st(56, 0.210), st(1000, 0.020)];
        fill_added(&mut wg, &clear, None);
        let mut esp = vec![st(56, 0.110), st(1000, 0.120)];
        fill_added(&mut esp, &clear, Some(&wg));
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
        assert!(close(esp[0].added_median_ms, 0.100));
        assert!(close(esp[0].x_wireguard_go, 0.5));
        assert!(close(esp[1].added_median_ms, 0.100));
        // wireguard-go added nothing at 1000 bytes: no ratio rather than infinity.
        assert_eq!(esp[1].x_wireguard_go, None);
        // No baseline: no added time.
        let mut alone = vec![st(56, 0.1)];
        fill_added(&mut alone, &[], Some(&wg));
        assert_eq!(
            (alone[0].added_median_ms, alone[0].x_wireguard_go),
            (None, None)
        );
    }

    #[test]
    fn table_shows_every_column() {
        let clear = vec![st(56, 0.010), st(1000, 0.020)];
        let mut wg = vec![st(56, 0.210), st(1000, 0.220)];
        fill_added(&mut wg, &clear, None);
        let mut esp = vec![st(56, 0.110), st(1000, 0.120)];
        fill_added(&mut esp, &clear, Some(&wg));
        esp[0].sleeps_per_reply = Some(3.0);
        esp[1].sleeps_per_reply = Some(2.5);
        let t = render(
            &[
                ("clear", &clear),
                ("wireguard-go", &wg),
                ("esp", &esp),
                ("failed", &[]),
            ],
            true,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(
            lines[0].contains("56 B med") && lines[0].contains("x wg 1000"),
            "{t}"
        );
        let esp_cols: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(
            esp_cols,
            [
                "esp", "0.110", "0.110", "0.120", "0.120", "0.100", "0.100", "0.50x", "0.50x",
                "3.00", "2.50"
            ]
        );
        assert!(lines[0].ends_with("sleeps 56 sleeps 1000"), "{t}");
        let clear_cols: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(clear_cols[5..], ["-", "-", "-", "-", "-", "-"]);
        assert!(!render(&[("esp", &esp)], false).contains("x wg"));
    }

    #[test]
    fn sleeps_come_from_proc_status_and_pool_per_reply() {
        assert_eq!(net_inode("net:[4026531840]"), Some(4026531840));
        assert_eq!(net_inode("mnt:[4026531840]"), None);
        assert_eq!(net_inode("net:[x]"), None);
        let status = "Name:\tnv-rx\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t575\nnonvoluntary_ctxt_switches:\t9\n";
        assert_eq!(voluntary_switches(status), Some(575));
        assert_eq!(voluntary_switches("Name:\tx\n"), None);
        // Per reply, not per ping sent: 3 replies of 4 pings, 9 sleeps.
        let a = stat_with_sleeps(56, 4, &[0.1, 0.2, 0.3], Some(9));
        assert_eq!(a.sleeps_per_reply, Some(3.0));
        assert_eq!(stat_with_sleeps(56, 4, &[], Some(9)).sleeps_per_reply, None);
        assert_eq!(stat(56, 1, &[0.1]).sleeps_per_reply, None);
        // Pooled: sleeps and replies add up; a round that did not count leaves the pool uncounted.
        let b = stat_with_sleeps(56, 2, &[0.1], Some(1));
        let p = pool([std::slice::from_ref(&a), std::slice::from_ref(&b)]);
        assert_eq!(p[0].sleeps_per_reply, Some(2.5));
        let c = stat(56, 2, &[0.1]);
        let p = pool([std::slice::from_ref(&a), std::slice::from_ref(&c)]);
        assert_eq!(p[0].sleeps_per_reply, None);
        // The table shows them per size, "-" where not counted.
        let t = render(
            &[
                ("x", std::slice::from_ref(&a)),
                ("y", std::slice::from_ref(&c)),
            ],
            false,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].ends_with("sleeps 56 sleeps 1000"), "{t}");
        assert!(lines[1].ends_with(" 3.00           -"), "{t}");
        assert!(lines[2].ends_with(" -           -"), "{t}");
    }

    /// `sleeps_in` counts the threads of the processes in a namespace, nobody else's (root: a namespace is made).
    #[test]
    fn sleeps_in_counts_the_processes_of_the_namespace() {
        use std::process::{Command, Stdio};
        let ns = format!("nvsleeps{}", std::process::id());
        assert!(Command::new("ip")
            .args(["netns", "add", &ns])
            .status()
            .unwrap()
            .success());
        let empty = sleeps_in(&[&ns]);
        // A shell in the namespace that sleeps 30 times (it waits for each `sleep` child: a voluntary switch).
        let mut sh = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "sh",
                "-c",
                "for i in $(seq 30); do sleep 0.01; done; sleep 10",
            ])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let before = sleeps_in(&[&ns]);
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let after = sleeps_in(&[&ns]);
        let missing = sleeps_in(&[&ns, "nvsleeps-no-such-namespace"]);
        let _ = sh.kill();
        let _ = sh.wait();
        let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        assert_eq!(empty, Some(0), "nothing runs in a new namespace");
        let (before, after) = (before.unwrap(), after.unwrap());
        assert!(after >= before + 30, "{before} -> {after}");
        assert_eq!(missing, None);
    }
}
