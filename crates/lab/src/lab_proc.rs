//! What the lab reads of its processes in `/proc`: CPU time and peak memory of one process, of a process's reaped
//! children, and of everything that runs in a namespace.

use crate::{Error, Result};

/// The fields of `/proc/PID/stat` after the command name: the first is field 3 (state), utime (14) is at index 11,
/// stime 12, cutime 13, cstime 14.
pub fn stat_fields(pid: u32) -> Result<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(Error::io(format!("/proc/{pid}/stat")))?;
    // After the command name's closing parenthesis (the name itself may hold spaces and parentheses).
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| Error::Other(format!("/proc/{pid}/stat: {stat:?}")))?;
    Ok(rest.split_whitespace().map(str::to_string).collect())
}

/// CPU time (user and system) of a process so far, ms (`/proc/PID/stat`, in USER_HZ = 100 ticks per second).
pub fn cpu_ms(pid: u32) -> Result<f64> {
    let f = stat_fields(pid)?;
    let tick = |i: usize| -> Result<f64> {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| Error::Other(format!("/proc/{pid}/stat field {}", i + 3)))
    };
    Ok((tick(11)? + tick(12)?) * 10.0)
}

/// A process's peak resident memory, KiB (`VmHWM` in `/proc/PID/status`).
pub fn peak_kib(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(Error::io(format!("/proc/{pid}/status")))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Error::Other(format!("/proc/{pid}/status: no VmHWM")))
}

/// The children's CPU time (`cutime` + `cstime`) of a process, ms: what its reaped descendants used.
pub fn children_cpu_ms(pid: u32) -> Result<f64> {
    let f = stat_fields(pid)?;
    let tick = |i: usize| -> Result<f64> {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| Error::Other(format!("/proc/{pid}/stat field {}", i + 3)))
    };
    Ok((tick(13)? + tick(14)?) * 10.0)
}

/// The time a process's threads have spent on a CPU so far, ms, to the nanosecond: the first field of each
/// `/proc/PID/task/TID/schedstat` (the scheduler's own account; `/proc/PID/stat` counts in 10 ms ticks). Threads
/// that ended are not in it: for processes whose threads live as long as they do (the daemons, the servers).
pub fn precise_cpu_ms(pid: u32) -> Result<f64> {
    let dir = format!("/proc/{pid}/task");
    let mut ns = 0u64;
    for t in std::fs::read_dir(&dir).map_err(Error::io(dir.clone()))? {
        let path = t.map_err(Error::io(dir.clone()))?.path().join("schedstat");
        // (A thread may end between the listing and the reading.)
        if let Ok(s) = std::fs::read_to_string(&path) {
            ns += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| Error::Other(format!("{}: {s:?}", path.display())))?;
        }
    }
    Ok(ns as f64 / 1e6)
}

/// A Python wrapper that runs a program (its arguments after the script's) and prints, as the last line of its
/// standard error, `netveil-lab-usage CPU_MS PEAK_KIB`: the program's CPU time (user and system, its waited-for
/// descendants included, to the microsecond) and peak resident memory, from `wait4`'s resource usage (GNU
/// `time` prints 10 ms steps). It exits with the program's status (128 + the signal when one ended it).
pub const USAGE_WRAPPER: &str = "import os, sys\n\
pid = os.fork()\n\
if pid == 0:\n    \
    os.execvp(sys.argv[1], sys.argv[1:])\n\
_, status, ru = os.wait4(pid, 0)\n\
sys.stderr.write('\\nnetveil-lab-usage %.3f %d\\n' % ((ru.ru_utime + ru.ru_stime) * 1e3, ru.ru_maxrss))\n\
code = os.waitstatus_to_exitcode(status)\n\
sys.exit(code if code >= 0 else 128 - code)\n";

/// The `python3 -c WRAPPER` arguments that put [`USAGE_WRAPPER`] before a program's.
pub fn usage_wrapped<'a>(args: &[&'a str]) -> Vec<&'a str> {
    ["python3", "-c", USAGE_WRAPPER]
        .into_iter()
        .chain(args.iter().copied())
        .collect()
}

/// (CPU ms, peak KiB) from the wrapper's last line in a program's standard error.
pub fn parse_usage(stderr: &str) -> Option<(f64, f64)> {
    let line = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("netveil-lab-usage "))?;
    let mut it = line.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some((it.next()??, it.next()??))
}

/// The processes that run in namespace `ns` (`ip netns pids`), less `except`.
pub fn ns_pids(ns: &str, except: &[u32]) -> Result<Vec<u32>> {
    let out = crate::lab::run_ok(std::process::Command::new("ip").args(["netns", "pids", ns]))?;
    Ok(out
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p| !except.contains(p))
        .collect())
}

/// The CPU time of what runs in `ns` (less `except`) and of what it ran and reaped, ms: each process's own time
/// ([`precise_cpu_ms`]) and its reaped children's (in 10 ms ticks). A process that ended is in its parent's
/// children's time once reaped, so a sum taken before and after some work counts the work of short-lived helpers
/// too. A process that vanishes between the listing and the reading is left out.
pub fn ns_cpu_ms(ns: &str, except: &[u32]) -> Result<f64> {
    Ok(ns_pids(ns, except)?
        .into_iter()
        .filter_map(|p| Some(precise_cpu_ms(p).ok()? + children_cpu_ms(p).ok()?))
        .sum())
}

/// The largest peak resident memory (`VmHWM`) of what runs in `ns` (less `except`), KiB; 0 when nothing does.
pub fn ns_peak_kib(ns: &str, except: &[u32]) -> Result<f64> {
    Ok(ns_pids(ns, except)?
        .into_iter()
        .filter_map(|p| peak_kib(p).ok())
        .fold(0.0, f64::max))
}

/// The summed CPU time of `pids`, ms ([`precise_cpu_ms`]).
pub fn sum_cpu_ms(pids: &[u32]) -> Result<f64> {
    pids.iter().map(|&p| precise_cpu_ms(p)).sum()
}

/// The largest peak resident memory of `pids`, KiB.
pub fn max_peak_kib(pids: &[u32]) -> Result<f64> {
    Ok(pids
        .iter()
        .map(|&p| peak_kib(p))
        .collect::<Result<Vec<f64>>>()?
        .into_iter()
        .fold(0.0, f64::max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let me = std::process::id();
        let f = stat_fields(me).unwrap();
        assert!(f.len() > 20);
        assert!(cpu_ms(me).unwrap() >= 0.0);
        assert!(peak_kib(me).unwrap() > 0.0);
        assert!(children_cpu_ms(me).unwrap() >= 0.0);
        // (The peak only grows: another test's thread may raise it between the two reads.)
        let peak = peak_kib(me).unwrap();
        assert!(max_peak_kib(&[me]).unwrap() >= peak);
        // The scheduler's account is to the nanosecond: a busy loop shows, a sleep does not.
        let t0 = precise_cpu_ms(me).unwrap();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(precise_cpu_ms(me).unwrap() - t0 >= 20.0);
    }

    #[test]
    fn the_wrapper_gives_a_programs_usage_and_status() {
        let args = usage_wrapped(&[
            "sh",
            "-c",
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo out; exit 3",
        ]);
        let o = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(3));
        assert_eq!(String::from_utf8_lossy(&o.stdout), "out\n");
        let (cpu, peak) = parse_usage(&String::from_utf8_lossy(&o.stderr)).unwrap();
        assert!(cpu > 0.0 && peak > 0.0, "{cpu} {peak}");
        assert_eq!(parse_usage("curl: (7) failed"), None);
    }
}
