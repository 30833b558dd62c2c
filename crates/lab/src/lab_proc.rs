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
        .ok_or_else(|| Error::File {
            path: format!("/proc/{pid}/stat").into(),
            why: format!("no command name in {stat:?}"),
        })?;
    Ok(rest.split_whitespace().map(str::to_string).collect())
}

/// The number at index `i` of [`stat_fields`] (field `i + 3` of `/proc/PID/stat`).
fn stat_field(pid: u32, f: &[String], i: usize) -> Result<f64> {
    f.get(i)
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| Error::File {
            path: format!("/proc/{pid}/stat").into(),
            why: format!("field {} is not a number", i + 3),
        })
}

/// CPU time (user and system) of a process so far, ms (`/proc/PID/stat`, in USER_HZ = 100 ticks per second).
pub fn cpu_ms(pid: u32) -> Result<f64> {
    let f = stat_fields(pid)?;
    let tick = |i: usize| stat_field(pid, &f, i);
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
        .ok_or_else(|| Error::File {
            path: format!("/proc/{pid}/status").into(),
            why: "no VmHWM".into(),
        })
}

/// The children's CPU time (`cutime` + `cstime`) of a process, ms: what its reaped descendants used.
pub fn children_cpu_ms(pid: u32) -> Result<f64> {
    let f = stat_fields(pid)?;
    let tick = |i: usize| stat_field(pid, &f, i);
    Ok((tick(13)? + tick(14)?) * 10.0)
}

/// The time a process's threads have spent on a CPU so far, ms, to the nanosecond: the first field of each
/// `/proc/PID/task/TID/schedstat` (the scheduler's own account; `/proc/PID/stat` counts in 10 ms ticks). Threads
/// that ended are not in it: for processes whose threads live as long as they do (the daemons, the servers).
pub fn precise_cpu_ms(pid: u32) -> Result<f64> {
    let mut ns = 0u64;
    for (path, s) in thread_files(&pid.to_string(), "schedstat")? {
        ns += s
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| Error::File {
                path: path.clone(),
                why: format!("no CPU time in {s:?}"),
            })?;
    }
    Ok(ns as f64 / 1e6)
}

/// The file `name` of each of the threads of process `pid` (`/proc/PID/task/TID/NAME`), with its path; a thread
/// that ends between the listing and the reading is left out.
pub fn thread_files(pid: &str, name: &str) -> Result<Vec<(std::path::PathBuf, String)>> {
    let dir = format!("/proc/{pid}/task");
    let mut out = Vec::new();
    for t in std::fs::read_dir(&dir).map_err(Error::io(dir.clone()))? {
        let path = t.map_err(Error::io(dir.clone()))?.path().join(name);
        if let Ok(s) = std::fs::read_to_string(&path) {
            out.push((path, s));
        }
    }
    Ok(out)
}

/// What a program used, from `wait4`'s resource usage: CPU time (user and system, its waited-for descendants
/// included, to the microsecond; GNU `time` prints 10 ms steps) and peak resident memory.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    pub cpu_ms: f64,
    pub peak_kib: f64,
}

/// Runs `cmd` (stdin null) on this thread's namespaces, collects its output and waits for it with `wait4`: its
/// exit status and output, and what it used ([`Usage`]). Nothing stands between the lab and the program, so the
/// usage is the program's alone (a Python wrapper took 100 ms to start, and its own memory was the child's until
/// the `exec`).
pub fn output_with_usage(mut cmd: std::process::Command) -> Result<(std::process::Output, Usage)> {
    use std::io::Read;
    use std::process::Stdio;
    use wait4::Wait4;
    let what = format!("{:?}", cmd.get_program());
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::io(format!("cannot run {what}")))?;
    let (Some(mut out), Some(mut err)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(Error::internal(format!("{what}: no pipes")));
    };
    // Both pipes drain at once: a program that fills one while the lab reads the other would stall.
    let errs = std::thread::spawn(move || {
        let mut v = Vec::new();
        err.read_to_end(&mut v).map(|_| v)
    });
    let mut stdout = Vec::new();
    let read = out.read_to_end(&mut stdout);
    let stderr = errs
        .join()
        .map_err(|_| Error::internal(format!("{what}: the reader panicked")))?;
    let r = child
        .wait4()
        .map_err(Error::io(format!("cannot wait for {what}")))?;
    read.map_err(Error::io(format!("{what}: stdout")))?;
    let stderr = stderr.map_err(Error::io(format!("{what}: stderr")))?;
    Ok((
        std::process::Output {
            status: r.status,
            stdout,
            stderr,
        },
        Usage {
            cpu_ms: (r.rusage.utime + r.rusage.stime).as_secs_f64() * 1e3,
            peak_kib: r.rusage.maxrss as f64 / 1024.0,
        },
    ))
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
        // Spinning until the account moves by 20 ms (a busy machine may give the loop less than its wall time);
        // were the account blind to it, the loop would run to its 10 s deadline and the assertion fail.
        let t0 = precise_cpu_ms(me).unwrap();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while precise_cpu_ms(me).unwrap() - t0 < 20.0
            && t.elapsed() < std::time::Duration::from_secs(10)
        {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        assert!(precise_cpu_ms(me).unwrap() - t0 >= 20.0);
    }

    #[test]
    fn a_programs_usage_and_status_come_from_its_wait() {
        let mut c = std::process::Command::new("sh");
        c.args([
            "-c",
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo out; echo err >&2; exit 3",
        ]);
        let (o, u) = output_with_usage(c).unwrap();
        assert_eq!(o.status.code(), Some(3));
        assert_eq!(String::from_utf8_lossy(&o.stdout), "out\n");
        assert_eq!(String::from_utf8_lossy(&o.stderr), "err\n");
        assert!(u.cpu_ms > 0.0 && u.peak_kib > 0.0, "{u:?}");
        // A program that is not there is an error that names it.
        let e = output_with_usage(std::process::Command::new("/nonexistent-nv")).unwrap_err();
        assert!(e.to_string().contains("nonexistent-nv"), "{e}");
    }
}
