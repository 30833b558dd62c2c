//! The control socket (a Unix socket, mode 0600, under /run/netveil): `netveil status`, `keys`, `rotate` and
//! `down` ask a running daemon. One request line, one JSON answer. The server half ([`listen`], [`serve_lines`])
//! runs in the daemon, which answers each request; the client half runs in the `netveil` command and the lab.
//!
//! Both ends check who is at the other end (`SO_PEERCRED`, see [`peer_credentials`]), not only the file modes:
//! the server answers root and, if the configuration names a control group, the processes whose group id is that
//! group's (the socket is then mode 0660 of that group); the client sends nothing (requests may carry keys) to a
//! server that does not run as root.
//!
//! [`ike`] holds the clients of `netveil initiate` and `terminate`, [`xfrm`] those of `netveil sa`, `policy` and
//! `monitor`.

#![forbid(unsafe_code)]

// layers: xfrm > status > ike > client > error, request
mod client;
mod error;
pub mod ike;
mod request;
pub mod status;
pub mod xfrm;

use client::ask;
pub use client::{connect_error, peer_credentials, request};
pub use error::{Error, Result};
pub use request::Request;
pub use status::{human_bytes, render_status, Event, Status};

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// The directory of the control sockets by default (`/run/netveil/NAME.sock`).
pub const RUN_DIR: &str = "/run/netveil";

/// Longest request line accepted (an SA with its keys is a few hundred bytes).
pub const MAX_REQUEST: usize = 16 * 1024;
/// Clients served at once; more wait in the listen queue.
pub const MAX_CLIENTS: usize = 8;
/// How long a client may take to send its request, and to take its answer.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// Binds the control socket (replacing a stale one), mode 0600, in a directory created mode 0700 (the default
/// directory is made 0700 if it exists with wider permissions). With a control `group` (its group id), the socket
/// is mode 0660 of that group, and the directory (created, or the default one) 0750 of that group. `bind` binds the
/// socket; the daemon's umask (0077, set before any thread starts) keeps it private until its mode is set here.
pub fn listen(
    path: &Path,
    group: Option<u32>,
    bind: impl FnOnce(&Path) -> std::io::Result<UnixListener>,
) -> Result<UnixListener> {
    if let Some(dir) = path.parent() {
        let mut ours = dir == Path::new(RUN_DIR);
        if !dir.as_os_str().is_empty() && !dir.is_dir() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(Error::io(format!("cannot create {}", dir.display())))?;
            ours = true;
        }
        if ours {
            restrict_dir(dir, group)
                .map_err(Error::io(format!("cannot restrict {}", dir.display())))?;
        }
    }
    if UnixStream::connect(path).is_ok() {
        return Err(Error::Usage(format!(
            "{} is in use: is another netveil running on this interface?",
            path.display()
        )));
    }
    let _ = std::fs::remove_file(path);
    let l = bind(path).map_err(Error::io(format!("cannot bind {}", path.display())))?;
    // The group first, then the mode that lets it in.
    let mode = match group {
        Some(g) => {
            std::os::unix::fs::chown(path, None, Some(g))
                .map_err(Error::io("chown control socket"))?;
            0o660
        }
        None => 0o600,
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(Error::io("chmod control socket"))?;
    Ok(l)
}

/// The control socket's directory: 0750 of `group`, or without one 0700 (but for the group's read and search bits
/// when the directory belongs to a group other than root's: another daemon shares it with its control group; the
/// sockets in it keep their own modes).
fn restrict_dir(dir: &Path, group: Option<u32>) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mode = match group {
        Some(g) => {
            std::os::unix::fs::chown(dir, None, Some(g))?;
            0o750
        }
        None => {
            let m = std::fs::metadata(dir)?;
            0o700 | if m.gid() != 0 { m.mode() & 0o050 } else { 0 }
        }
    };
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
}

/// Why a client of the control socket is refused, if it is: it must run as root (user id 0) or with the control
/// group's id as its group id (`SO_PEERCRED`: the effective group id when it connected; supplementary groups are
/// not taken, see the README).
fn refusal(c: &UnixStream, group: Option<u32>) -> Option<String> {
    match peer_credentials(c) {
        Err(e) => Some(format!("no peer credentials ({e})")),
        Ok((0, _, _)) => None,
        Ok((_, gid, _)) if Some(gid) == group => None,
        Ok((uid, gid, pid)) => Some(format!(
            "uid {uid}, gid {gid}, pid {pid}: neither root nor {}",
            match group {
                Some(g) => format!("of the control group (gid {g})"),
                None => "allowed (no control group is configured)".into(),
            }
        )),
    }
}

/// The answer to a client that [`serve_lines`] refuses (whatever it sent, which is not looked at).
pub const REFUSED: &str =
    "permission denied: the control socket answers root and the members of its control group only";

/// Reads one request line of at most [`MAX_REQUEST`] bytes (the newline optional at the end of the stream).
fn read_request(c: &mut UnixStream) -> std::result::Result<String, &'static str> {
    let mut buf = [0u8; MAX_REQUEST + 1];
    let mut n = 0;
    // One deadline for the whole request: a client that trickles a byte now and then is cut off too.
    let deadline = std::time::Instant::now() + CLIENT_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || c.set_read_timeout(Some(left)).is_err() {
            return Err("no complete request in time");
        }
        match c.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if buf[..n].contains(&b'\n') {
                    break;
                }
                if n > MAX_REQUEST {
                    return Err("request too long");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err("no complete request in time"),
        }
    }
    let line = buf[..n].split(|&b| b == b'\n').next().unwrap_or(&[]);
    std::str::from_utf8(line)
        .map(|s| s.trim().to_string())
        .map_err(|_| "the request is not text")
}

/// Answers one-line requests with `answer` until `stop` is set (checked at each connection). Up to
/// [`MAX_CLIENTS`] clients are served at once, each with [`CLIENT_TIMEOUT`] to send its request and take the
/// answer, so an idle or slow client never holds the others. Requests longer than [`MAX_REQUEST`] are refused.
/// `answer` must not repeat the request in its reply (a request line may hold anything).
///
/// A client that is neither root nor of the control `group` (by its `SO_PEERCRED` user and group id, see
/// [`peer_credentials`]) gets [`REFUSED`] as its answer: what it sent is never looked at (nor logged), and a
/// warning names its user, group and process ids.
pub fn serve_lines(
    l: UnixListener,
    stop: &std::sync::atomic::AtomicBool,
    group: Option<u32>,
    answer: impl Fn(&str) -> Value + Sync,
) {
    let active = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for conn in l.incoming() {
            if stop.load(Relaxed) {
                return;
            }
            let Ok(mut c) = conn else { continue };
            let _ = c.set_write_timeout(Some(CLIENT_TIMEOUT));
            let refused = refusal(&c, group);
            if active.load(Relaxed) >= MAX_CLIENTS {
                let _ = c.write_all(
                    json!({ "error": "busy: too many control clients" })
                        .to_string()
                        .as_bytes(),
                );
                continue;
            }
            active.fetch_add(1, Relaxed);
            let (active, answer) = (&active, &answer);
            let spawned = std::thread::Builder::new()
                .name("nv-ctl-client".into())
                .spawn_scoped(scope, move || {
                    let a = match (refused, read_request(&mut c)) {
                        (Some(why), _) => {
                            // Read (so that closing does not reset the connection before the client has the
                            // answer) but never looked at.
                            tracing::warn!("control socket: refused a client ({why})");
                            json!({ "error": REFUSED })
                        }
                        (None, Ok(req)) => answer(&req),
                        (None, Err(why)) => json!({ "error": why }),
                    };
                    let _ = c.write_all(a.to_string().as_bytes());
                    active.fetch_sub(1, Relaxed);
                });
            if spawned.is_err() {
                active.fetch_sub(1, Relaxed);
            }
        }
    });
}

/// Asks a running daemon to stop and remove its setup, fail-closed filters included (`netveil down`).
pub fn request_stop(socket: &Path) -> Result<()> {
    let v = ask(socket, "stop")?;
    if v["stopping"] == true {
        Ok(())
    } else {
        Err(Error::Refused {
            request: format!(
                "the daemon on {} did not accept the stop request",
                socket.display()
            ),
            reason: v["error"].as_str().unwrap_or("no reason given").to_string(),
        })
    }
}

/// `netveil reload`: the daemon reads its rule files again and puts them in force; returns what it says it did.
pub fn reload(socket: &Path) -> Result<String> {
    let v = ask(socket, "reload")?;
    if let Some(e) = v["error"].as_str() {
        // The files did not load ("config": their errors name the key): a bad configuration, exit code 2.
        if v["config"].as_bool() == Some(true) {
            return Err(Error::Usage(format!(
                "reload refused, nothing changed: {e}"
            )));
        }
        return Err(Error::Refused {
            request: "reload refused".into(),
            reason: e.to_string(),
        });
    }
    match v["reloaded"].as_str() {
        Some(m) => Ok(m.to_string()),
        None => Err(Error::Refused {
            request: "reload".into(),
            reason: "the daemon has nothing to reload (no engine of it reads rule files)".into(),
        }),
    }
}

/// `netveil rotate`: rotates the PSP master keys of a running daemon and re-associates with the peer.
pub fn rotate(socket: &Path) -> Result<()> {
    let v = ask(socket, "rotate")?;
    if let Some(e) = v["error"].as_str() {
        return Err(Error::Usage(e.to_string()));
    }
    println!(
        "rotated: {}, generation {}",
        v["rotated"].as_bool().unwrap_or(false),
        v["generation"]
    );
    Ok(())
}

/// The status of the daemon at `socket`, typed.
pub fn get_status(socket: &Path) -> Result<Status> {
    let v = request(socket, &Request::Status)?;
    serde_json::from_value(v).map_err(|e| Error::BadAnswer {
        request: "status".into(),
        cause: e.to_string(),
    })
}

/// `netveil status`: the table, or the JSON form (pretty-printed).
pub fn status(socket: &Path, json_out: bool) -> Result<()> {
    let s = get_status(socket)?;
    if json_out {
        println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default());
        return Ok(());
    }
    print!("{}", render_status(&s));
    Ok(())
}

/// `netveil keys --wireshark DIR`: writes DIR/esp_sa (Wireshark's ESP SA table).
pub fn keys_wireshark(socket: &Path, dir: &Path) -> Result<()> {
    let v = ask(socket, "keys")?;
    let mut out = zeroize::Zeroizing::new(String::new());
    for sa in v["sas"].as_array().into_iter().flatten() {
        let f = |k: &str| sa[k].as_str().unwrap_or("").to_string();
        // Wireshark's table knows only "IPv4" and "IPv6" (an unknown value makes it ignore the line silently): a
        // transport-mode SA (family "Any", wildcard addresses) gets one line per family.
        let families = match f("family").as_str() {
            "Any" => vec!["IPv4".to_string(), "IPv6".to_string()],
            fam => vec![fam.to_string()],
        };
        for fam in families {
            out.push_str(&format!(
                "\"{}\",\"{}\",\"{}\",\"{}\",\"{}\",\"{}\",\"{}\",\"{}\"\n",
                fam,
                f("src"),
                f("dst"),
                f("spi"),
                f("enc_alg"),
                f("enc_key"),
                f("auth_alg"),
                f("auth_key")
            ));
        }
    }
    std::fs::create_dir_all(dir).map_err(Error::io(format!("cannot create {}", dir.display())))?;
    keys_ike(socket, dir)?;
    let path = dir.join("esp_sa");
    // A new file (mode 0600) renamed over the old one: a symlink planted at esp_sa is replaced, not followed, and an
    // existing file's wider permissions are not kept.
    write_private(&path, out.as_bytes())
        .map_err(Error::io(format!("cannot write {}", path.display())))?;
    eprintln!(
        "wrote {} SAs to {}; decrypt with: tshark -o esp.enable_encryption_decode:TRUE -o esp.enable_authentication_check:TRUE ... (with {} as the Wireshark configuration directory)",
        v["sas"].as_array().map_or(0, |a| a.len()),
        path.display(),
        dir.display()
    );
    Ok(())
}

/// The IKE half of `keys --wireshark`: DIR/ikev2_decryption_table (strongSwan's save-keys format), merged with the
/// lines already there ([`ike::merge_table`]). Nothing when the daemon runs no IKE driver.
fn keys_ike(socket: &Path, dir: &Path) -> Result<()> {
    let v = ask(socket, &Request::IkeKeys.line())?;
    if v["error"]
        .as_str()
        .is_some_and(|e| e.starts_with("no engine"))
    {
        return Ok(());
    }
    if let Some(e) = v["error"].as_str() {
        return Err(Error::Refused {
            request: "IKE keys".into(),
            reason: e.to_string(),
        });
    }
    let new: Vec<zeroize::Zeroizing<String>> = v["ike_sas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_str())
        // A line of the daemon's is one table row: anything that could add a row or break the CSV is refused.
        .filter(|l| !l.contains(['\n', '\r']))
        .map(|l| zeroize::Zeroizing::new(l.to_string()))
        .collect();
    let path = dir.join(ike::IKEV2_TABLE);
    // The old table, if it is a file of ours (a symlink there is not followed: it is replaced).
    let old = match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_file() => {
            zeroize::Zeroizing::new(std::fs::read_to_string(&path).unwrap_or_default())
        }
        _ => zeroize::Zeroizing::new(String::new()),
    };
    let table = ike::merge_table(&old, &new);
    write_private(&path, table.as_bytes())
        .map_err(Error::io(format!("cannot write {}", path.display())))?;
    // (Named arguments: a positional {0} here once printed the number of SAs as the directory.)
    eprintln!(
        "wrote {n} IKE SAs to {path} (the lines of older SAs kept); tshark decrypts IKE with {dir} as its Wireshark \
         configuration directory (WIRESHARK_CONFIG_DIR={dir})",
        n = new.len(),
        path = path.display(),
        dir = dir.display()
    );
    Ok(())
}

/// Replaces the file at `path` with `bytes`, atomically and durably: a new file (mode 0600, never opened through a
/// symlink) in the same directory, synced, renamed over the old one (a symlink there is replaced, not followed),
/// and the directory synced.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let r = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    /// The control socket's directory is created 0700 and the socket is 0600.
    #[test]
    fn socket_directory_is_private() {
        let base = std::env::temp_dir().join(format!("netveil-ctl-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let sock = base.join("run/x.sock");
        let l = listen(&sock, None, |p| UnixListener::bind(p)).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&base.join("run")), 0o700);
        assert_eq!(mode(&sock), 0o600);
        drop(l);
        let _ = std::fs::remove_dir_all(&base);
    }

    /// A client that sends a byte now and then, never a whole line, is cut off after [`CLIENT_TIMEOUT`] in all.
    #[test]
    fn a_trickling_client_is_cut_off() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let t = std::time::Instant::now();
        let writer = std::thread::spawn(move || {
            for _ in 0..12 {
                if a.write_all(b"s").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(400));
            }
        });
        assert_eq!(read_request(&mut b), Err("no complete request in time"));
        let took = t.elapsed();
        assert!(
            took >= CLIENT_TIMEOUT && took < CLIENT_TIMEOUT + Duration::from_millis(1500),
            "{took:?}"
        );
        drop(b);
        writer.join().unwrap();
    }

    /// With a control group, the socket is 0660 and the directory 0750, both of that group.
    #[test]
    fn a_control_group_opens_the_socket_to_it() {
        use std::os::unix::fs::MetadataExt;
        let base = std::env::temp_dir().join(format!("netveil-ctl-group-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let sock = base.join("run/x.sock");
        let l = listen(&sock, Some(NOBODY), |p| UnixListener::bind(p)).unwrap();
        let meta = |p: &Path| std::fs::metadata(p).unwrap();
        assert_eq!(meta(&base.join("run")).mode() & 0o777, 0o750);
        assert_eq!(meta(&base.join("run")).gid(), NOBODY);
        assert_eq!(meta(&sock).mode() & 0o777, 0o660);
        assert_eq!(meta(&sock).gid(), NOBODY);
        drop(l);
        let _ = std::fs::remove_dir_all(&base);
    }

    /// nobody's user and group id (Debian's nobody and nogroup): the other user of the credential tests.
    const NOBODY: u32 = 65534;

    /// Runs this test binary's `helper` (an ignored test that acts only with `NETVEIL_CTL_HELPER` set) as user and
    /// group nobody, without supplementary groups (`setpriv`).
    fn as_nobody(helper: &str, sock: &Path) -> std::process::Command {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the credential tests need root (they run servers and clients as nobody)"
        );
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(std::env::current_exe().unwrap())
            .args([
                helper,
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("NETVEIL_CTL_HELPER", sock);
        c
    }

    /// A private directory for one test's socket, which nobody may enter (`open`: and bind in).
    fn test_dir(name: &str, open: bool) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("netveil-ctl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let mode = if open { 0o777 } else { 0o755 };
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        d
    }

    /// A server of `group` on a socket in `dir`, opened to every user for the test (0666 in a 0755 directory: only
    /// the credential check stands between nobody and the answer). Returns the socket, how many requests were
    /// answered, and the function that stops it.
    fn test_server(
        dir: &Path,
        group: Option<u32>,
    ) -> (
        std::path::PathBuf,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
        impl FnOnce(),
    ) {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        use std::sync::Arc;
        let sock = dir.join("s.sock");
        let l = listen(&sock, group, |p| UnixListener::bind(p)).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
        let answered = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, st) = (answered.clone(), stop.clone());
        let t = std::thread::spawn(move || {
            serve_lines(l, &st, group, |req| {
                a.fetch_add(1, Relaxed);
                json!({ "ok": true, "len": req.len() })
            })
        });
        let s2 = sock.clone();
        let stopper = move || {
            stop.store(true, Relaxed);
            let _ = UnixStream::connect(&s2);
            t.join().unwrap();
        };
        (sock, answered, stopper)
    }

    /// Helper (run as nobody by the tests): sends `status` on the socket named by `NETVEIL_CTL_HELPER` without the
    /// client's checks and prints the answer.
    #[test]
    #[ignore = "helper: run as nobody by the credential tests"]
    fn helper_raw_client() {
        let Some(sock) = std::env::var_os("NETVEIL_CTL_HELPER") else {
            return;
        };
        let mut s = UnixStream::connect(sock).unwrap();
        s.write_all(b"status\n").unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut a = String::new();
        s.read_to_string(&mut a).unwrap();
        println!("ANSWER {a}");
    }

    /// Runs [`helper_raw_client`] as nobody against `sock`: the answer it got.
    fn nobody_asks(sock: &Path) -> String {
        let out = as_nobody("tests::helper_raw_client", sock)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.lines()
            .find_map(|l| l.split_once("ANSWER ").map(|(_, a)| a))
            .unwrap_or_else(|| panic!("no answer: {text}"))
            .to_string()
    }

    /// The server answers nobody only if nobody's group is the control group (whatever the file modes let
    /// through), and root always; a refused client gets the refusal, and its request is not answered.
    #[test]
    fn the_server_answers_root_and_the_control_group_only() {
        for (group, nobody_in) in [(None, false), (Some(12345), false), (Some(NOBODY), true)] {
            let dir = test_dir("server", false);
            let (sock, answered, stop) = test_server(&dir, group);
            let a: Value = serde_json::from_str(&nobody_asks(&sock)).unwrap();
            if nobody_in {
                assert_eq!(a, json!({ "ok": true, "len": 6 }), "{group:?}");
                assert_eq!(answered.load(Relaxed), 1);
            } else {
                assert_eq!(a, json!({ "error": REFUSED }), "{group:?}");
                assert_eq!(answered.load(Relaxed), 0, "{group:?}");
            }
            // Root (this test) is always answered.
            let before = answered.load(Relaxed);
            assert_eq!(ask(&sock, "status").unwrap()["ok"], true);
            assert_eq!(answered.load(Relaxed), before + 1);
            stop();
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    /// Helper (run as nobody by the tests): serves the socket named by `NETVEIL_CTL_HELPER` (answering
    /// `{"ok":true}`), appending every request line it gets to the file `got` beside it, for 20 s at most.
    #[test]
    #[ignore = "helper: run as nobody by the credential tests"]
    fn helper_server() {
        let Some(sock) = std::env::var_os("NETVEIL_CTL_HELPER") else {
            return;
        };
        let sock = std::path::PathBuf::from(sock);
        let got = sock.with_file_name("got");
        let l = listen(&sock, None, |p| UnixListener::bind(p)).unwrap();
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_secs(20));
            std::process::exit(0);
        });
        let stop = std::sync::atomic::AtomicBool::new(false);
        serve_lines(l, &stop, None, |req| {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&got)
                .unwrap();
            writeln!(f, "{req}").unwrap();
            json!({ "ok": true })
        });
    }

    /// The client sends nothing to a server that is not root: the request (here one carrying a key) never
    /// reaches it. The control: the same server gets and answers a request sent without the check.
    #[test]
    fn the_client_sends_nothing_to_a_server_that_is_not_root() {
        let dir = test_dir("client", true);
        let sock = dir.join("s.sock");
        let got = dir.join("got");
        let mut server = as_nobody("tests::helper_server", &sock).spawn().unwrap();
        let t = std::time::Instant::now();
        while UnixStream::connect(&sock).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the helper server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let secret = "00112233445566778899aabbccddeeff00112233";
        let mut sa = Map::new();
        sa.insert("enc_key".into(), json!(secret));
        let e = request(&sock, &Request::SaAdd { sa })
            .unwrap_err()
            .to_string();
        assert!(e.contains("not root") && e.contains("uid 65534"), "{e}");
        assert!(!e.contains(secret), "{e}");
        // The control: a request sent without the check arrives (as root, which the server answers).
        let mut raw = UnixStream::connect(&sock).unwrap();
        raw.write_all(b"status\n").unwrap();
        raw.shutdown(std::net::Shutdown::Write).unwrap();
        let mut a = String::new();
        raw.read_to_string(&mut a).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&a).unwrap(),
            json!({ "ok": true })
        );
        let lines = std::fs::read_to_string(&got).unwrap();
        server.kill().unwrap();
        server.wait().unwrap();
        // Every connection the server took got answered: the refused client's as an empty request.
        assert!(lines.contains("status"), "{lines:?}");
        assert!(
            !lines.contains(secret) && !lines.contains("sa-add"),
            "{lines:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
