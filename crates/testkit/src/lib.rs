//! Test plumbing shared by netveil's tests (a dev-dependency only, never linked into netveil itself).
//!
//! - **Skips** go through [`skip`] (or [`require`], [`require_root`], [`require_program`]): outside CI a skipped
//!   test prints `SKIPPED <test>: <why>` and passes, and the line is appended to the file that `NETVEIL_SKIP_LOG`
//!   names (`scripts/test.sh` lists them in its last line); under CI ([`in_ci`]: `CI=true`, which `.ci/run`
//!   exports) a skip panics instead, so that a run in CI never passes with tests left out.
//! - **Waiting** is a poll against a deadline ([`poll`], [`try_poll`], [`wait_until`]), never a fixed sleep before
//!   an assertion: it returns as soon as the condition holds and fails with what it waited for when it does not.
//! - **Scratch directories** that netveil checks for ownership (state directories, configurations with keys) come
//!   from [`private_dir`]: a fresh 0700 directory of the test's own on a path only root can write
//!   (`/var/lib/netveil-test` when root), wherever the checkout lies: a clone under `/tmp` (sticky and
//!   world-writable, which netveil refuses above a state directory) runs the tests as well as any other.

use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Whether `CI`'s value means a CI run: set, and neither empty nor `0` nor `false` (CI systems set `CI=true`).
pub fn ci_value_means_ci(v: Option<&str>) -> bool {
    match v.map(str::trim) {
        None | Some("") | Some("0") => false,
        Some(v) => !v.eq_ignore_ascii_case("false"),
    }
}

/// Whether this is a CI run (`CI=true`; see [`ci_value_means_ci`]), where no test may be skipped.
pub fn in_ci() -> bool {
    ci_value_means_ci(std::env::var("CI").ok().as_deref())
}

/// The running test's name: libtest names each test's thread after it (the path within the crate); `"?"` on a
/// thread without a name.
pub fn this_test() -> String {
    std::thread::current().name().unwrap_or("?").to_string()
}

/// Skips `test` because of `why`. Under CI ([`in_ci`]) that is a failure: this panics, naming the test and why.
/// Otherwise it prints `SKIPPED <test>: <why>` to stderr and appends `<test>: <why>` to the file named by
/// `NETVEIL_SKIP_LOG` (if set); the caller then returns (passes).
#[track_caller]
pub fn skip(test: &str, why: &str) {
    let why = why.replace('\n', " ");
    if in_ci() {
        panic!(
            "{test}: may not be skipped in CI (CI={}): {why}",
            std::env::var("CI").unwrap_or_default()
        );
    }
    eprintln!("SKIPPED {test}: {why}");
    if let Some(log) = std::env::var_os("NETVEIL_SKIP_LOG").filter(|l| !l.is_empty()) {
        // One short write per line in append mode: lines of tests running side by side do not interleave.
        let line = format!("{test}: {why}\n");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!(
                "{test}: cannot record the skip in NETVEIL_SKIP_LOG ({}): {e}",
                Path::new(&log).display()
            );
        }
    }
}

/// Whether `test` may run: `missing` is `None` when nothing it needs is missing; else the test is skipped with
/// that reason ([`skip`]: a failure under CI) and this returns false.
#[track_caller]
pub fn require(test: &str, missing: Option<String>) -> bool {
    match missing {
        None => true,
        Some(why) => {
            skip(test, &why);
            false
        }
    }
}

/// Whether this process runs as root (effective user id 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether `test` may run as far as root goes: when not root it is skipped ([`skip`]: a failure under CI).
#[track_caller]
pub fn require_root(test: &str) -> bool {
    require(
        test,
        (!is_root()).then(|| "not root (run the tests as root, as CI does)".to_string()),
    )
}

/// [`require_root`] saying what root is needed for (`for_what`: "chown", "SO_MARK", ...).
#[track_caller]
pub fn require_root_for(test: &str, for_what: &str) -> bool {
    require(
        test,
        (!is_root()).then(|| {
            format!("not root, needed for {for_what} (run the tests as root, as CI does)")
        }),
    )
}

/// Whether `program` is installed: a file on `PATH` (or in `/usr/sbin` and `/sbin`, which a non-root `PATH` may
/// lack), or, given as a path, a file there.
pub fn have_program(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).is_file();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .any(|d| d.join(program).is_file())
}

/// Whether `test` may run as far as `program` goes: when it is not installed the test is skipped ([`skip`]: a
/// failure under CI).
#[track_caller]
pub fn require_program(test: &str, program: &str) -> bool {
    require(
        test,
        (!have_program(program))
            .then(|| format!("'{program}' is not installed (.ci/setup installs it)")),
    )
}

/// Calls `f` until it returns `Some`, for at most `within`: its value, or `None` when the deadline passed first
/// (`f` is called once more at the deadline). The pause between calls grows from 2 ms to 50 ms.
pub fn try_poll<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// [`try_poll`] that panics when the deadline passes first, saying what it waited for and how long.
#[track_caller]
pub fn poll<T>(within: Duration, what: impl Display, f: impl FnMut() -> Option<T>) -> T {
    match try_poll(within, f) {
        Some(v) => v,
        None => panic!("timed out after {within:?} waiting for {what}"),
    }
}

/// Waits until `f` holds, for at most `within`; panics when the deadline passes first, saying what it waited for.
#[track_caller]
pub fn wait_until(within: Duration, what: impl Display, mut f: impl FnMut() -> bool) {
    poll(within, what, || f().then_some(()))
}

/// Where [`private_dir`] makes its directories: `/var/lib/netveil-test` when root (root's, persistent: neither
/// `/tmp`, which is sticky and world-writable, nor a tmpfs such as `/run`, both of which netveil refuses for state);
/// otherwise `netveil-test` in the build's target directory (this user's; its parents must then not be writable
/// by others for the ownership checks to pass).
pub fn private_base() -> PathBuf {
    if is_root() {
        return PathBuf::from("/var/lib/netveil-test");
    }
    let exe = std::env::current_exe().expect("the test executable");
    // target/<profile>/deps/<test binary> (or target/<profile>/<binary>).
    let target = exe
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "deps"))
        .and_then(|d| d.parent()?.parent())
        .or_else(|| exe.parent()?.parent())
        .expect("a target directory above the test executable");
    target.join("netveil-test")
}

/// A fresh directory of one test's own (see [`private_dir`]), removed with everything in it on drop (kept when
/// `NETVEIL_TEST_KEEP` is set, for a look after a failure).
#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path, and the directory is kept: the caller removes it.
    pub fn keep(self) -> PathBuf {
        let p = self.path.clone();
        std::mem::forget(self);
        p
    }
}

impl std::ops::Deref for PrivateDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for PrivateDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        if std::env::var_os("NETVEIL_TEST_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// A fresh, empty directory mode 0700 named `<name>-<pid>-<n>` under [`private_base`] (made 0755 if missing), for
/// what netveil checks for ownership: state directories, configurations and key files. Panics when it cannot be
/// made, or when the base is not a directory that only its owner (root, or this user) can write.
#[track_caller]
pub fn private_dir(name: &str) -> PrivateDir {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    static N: AtomicU64 = AtomicU64::new(0);
    let base = private_base();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&base)
        .unwrap_or_else(|e| panic!("cannot make {}: {e}", base.display()));
    let meta = std::fs::symlink_metadata(&base)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", base.display()));
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    assert!(
        meta.is_dir() && meta.uid() == me && meta.mode() & 0o022 == 0,
        "{} must be a directory of user {me} that others cannot write (mode {:o}, owner {})",
        base.display(),
        meta.mode() & 0o7777,
        meta.uid()
    );
    let n = N.fetch_add(1, Ordering::Relaxed);
    let path = base.join(format!("{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&path)
        .unwrap_or_else(|e| panic!("cannot make {}: {e}", path.display()));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
        .unwrap_or_else(|e| panic!("cannot set the mode of {}: {e}", path.display()));
    PrivateDir { path }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::process::Command;

    #[test]
    fn what_counts_as_ci() {
        for v in ["true", "TRUE", "1", "yes", "github"] {
            assert!(ci_value_means_ci(Some(v)), "{v}");
        }
        for v in [None, Some(""), Some("0"), Some("false"), Some("False")] {
            assert!(!ci_value_means_ci(v), "{v:?}");
        }
    }

    /// Acts only when the test below runs it (in a child process) with NETVEIL_TESTKIT_HELPER set: skips.
    #[test]
    #[ignore = "a helper that the skip tests run in a child process"]
    fn skip_helper() {
        if std::env::var_os("NETVEIL_TESTKIT_HELPER").is_none() {
            return;
        }
        if !require_program("skip_helper", "netveil-no-such-program") {
            println!("returned after the skip");
            return;
        }
        panic!("a missing program was found");
    }

    /// This test binary's `skip_helper` with `CI` set to `ci` (or removed) and the skip log in `log`: exit
    /// status and output.
    fn run_helper(ci: Option<&str>, log: &Path) -> (bool, String) {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["tests::skip_helper", "--exact", "--ignored", "--nocapture"])
            .env("NETVEIL_TESTKIT_HELPER", "1")
            .env("NETVEIL_SKIP_LOG", log);
        match ci {
            Some(v) => c.env("CI", v),
            None => c.env_remove("CI"),
        };
        let out = c.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// Under CI a skip fails the test, naming the test and why, and logs nothing; outside CI it prints why,
    /// passes, and appends the test and why to NETVEIL_SKIP_LOG.
    #[test]
    fn a_skip_fails_under_ci_and_is_logged_outside_it() {
        let d = private_dir("testkit-skip");
        let log = d.join("skipped");
        let (ok, text) = run_helper(Some("true"), &log);
        assert!(!ok, "a skip passed under CI=true:\n{text}");
        assert!(
            text.contains("skip_helper: may not be skipped in CI (CI=true): 'netveil-no-such-program' is not installed"),
            "{text}"
        );
        assert!(!text.contains("returned after the skip"), "{text}");
        assert!(!log.exists(), "a skip under CI was logged as a skip");
        for ci in [None, Some("false"), Some("")] {
            let (ok, text) = run_helper(ci, &log);
            assert!(ok, "CI={ci:?}: a skip failed outside CI:\n{text}");
            assert!(
                text.contains("SKIPPED skip_helper: 'netveil-no-such-program' is not installed")
                    && text.contains("returned after the skip"),
                "{text}"
            );
        }
        let logged = std::fs::read_to_string(&log).unwrap();
        assert_eq!(logged.lines().count(), 3, "{logged}");
        assert!(logged.lines().all(|l| l
            == "skip_helper: 'netveil-no-such-program' is not installed (.ci/setup installs it)"));
    }

    #[test]
    fn programs_are_found_on_the_path() {
        assert!(have_program("sh"));
        assert!(have_program("/bin/sh"));
        assert!(!have_program("netveil-no-such-program"));
        assert!(!have_program("/netveil/no/such/program"));
    }

    #[test]
    fn polls_return_at_once_or_time_out() {
        let mut n = 0;
        let v = poll(Duration::from_secs(5), "the third call", || {
            n += 1;
            (n == 3).then_some(n * 10)
        });
        assert_eq!((v, n), (30, 3), "no call after the value came");
        let t0 = Instant::now();
        assert_eq!(try_poll(Duration::from_millis(100), || None::<()>), None);
        assert!(t0.elapsed() >= Duration::from_millis(100));
        let e = std::panic::catch_unwind(|| {
            wait_until(Duration::from_millis(20), "nothing in particular", || false)
        })
        .unwrap_err();
        let msg = e.downcast_ref::<String>().unwrap();
        assert!(
            msg.contains("timed out after 20ms waiting for nothing in particular"),
            "{msg}"
        );
    }

    #[test]
    fn private_dirs_are_0700_fresh_and_removed_on_drop() {
        let a = private_dir("testkit-a");
        let b = private_dir("testkit-a");
        assert_ne!(a.path(), b.path());
        let m = std::fs::metadata(&*a).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.permissions().mode() & 0o7777, 0o700);
        // SAFETY: geteuid has no preconditions.
        assert_eq!(m.uid(), unsafe { libc::geteuid() });
        assert_eq!(std::fs::read_dir(&*a).unwrap().count(), 0);
        std::fs::write(a.join("f"), "x").unwrap();
        let p = a.path().to_path_buf();
        drop(a);
        assert!(!p.exists());
        let kept = b.keep();
        assert!(kept.is_dir());
        std::fs::remove_dir(&kept).unwrap();
        if is_root() {
            assert!(p.starts_with("/var/lib/netveil-test"));
        }
    }
}
