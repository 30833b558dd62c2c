//! The control socket (a Unix socket, mode 0600, under /run/netveil): `netveil status`, `keys`, `rotate` and
//! `down` ask a running daemon. One request line, one JSON answer. The server half ([`listen`], [`serve_lines`])
//! runs in the daemon, which answers each request; the client half runs in the `netveil` command and the lab.

#![forbid(unsafe_code)]

pub mod status;
pub use status::{human_bytes, render_status, Event, Status};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
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

/// A failed control-socket operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing to talk to, no permission, or a request the daemon refuses: the user's to fix.
    #[error("{0}")]
    Usage(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    /// The daemon answered something unexpected.
    #[error("{0}")]
    Other(String),
}

impl Error {
    fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Longest request line accepted (an SA with its keys is a few hundred bytes).
pub const MAX_REQUEST: usize = 16 * 1024;
/// Clients served at once; more wait in the listen queue.
pub const MAX_CLIENTS: usize = 8;
/// How long a client may take to send its request, and to take its answer.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// Binds the control socket (replacing a stale one), mode 0600, in a directory created mode 0700 (the default
/// directory is made 0700 if it exists with wider permissions). `bind` binds the socket: the daemon narrows its
/// umask around it, so that the socket never exists with wider permissions.
pub fn listen(
    path: &Path,
    bind: impl FnOnce(&Path) -> std::io::Result<UnixListener>,
) -> Result<UnixListener> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() && !dir.is_dir() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(Error::io(format!("cannot create {}", dir.display())))?;
        }
        if dir == Path::new(RUN_DIR) {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
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
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(Error::io("chmod control socket"))?;
    Ok(l)
}

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
pub fn serve_lines(
    l: UnixListener,
    stop: &std::sync::atomic::AtomicBool,
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
                    let a = match read_request(&mut c) {
                        Ok(req) => answer(&req),
                        Err(why) => json!({ "error": why }),
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
        Err(Error::Other(format!(
            "the daemon on {} did not accept the stop request: {}",
            socket.display(),
            v["error"].as_str().unwrap_or("no reason given")
        )))
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

/// The message for a failed connection to the control socket: what is wrong, and what to do.
pub fn connect_error(socket: &Path, e: &std::io::Error) -> Error {
    use std::io::ErrorKind::*;
    Error::Usage(match e.kind() {
        NotFound | ConnectionRefused => format!(
            "no netveil daemon at {}: is `netveil up` running (and is this its interface or --socket)?",
            socket.display()
        ),
        PermissionDenied => format!(
            "permission denied on {}: the control socket is for root only (run as root)",
            socket.display()
        ),
        _ => format!("cannot reach the netveil daemon at {}: {e}", socket.display()),
    })
}

/// A request to the daemon: one line, either a bare word (`status`, `keys`, `rotate`, `stop`) or a JSON object
/// whose `request` member names it (`{"request":"sa-del","name":"a-to-b"}`). The JSON form is stable: see the
/// README's "Control socket" section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "kebab-case")]
pub enum Request {
    /// Every engine's status in one object (`netveil status --json`).
    Status,
    /// The running ESP SAs' keys (`netveil keys`).
    Keys,
    /// Rotate the PSP master keys (`netveil rotate`).
    Rotate,
    /// Stop, removing the fail-closed filters (`netveil down`).
    Stop,
    /// Add an SA: the keys of a `[[sa]]` table of the configuration file.
    SaAdd { sa: Map<String, Value> },
    /// Replace the SA `name` (same direction; a new SPI and keys).
    SaUpdate {
        name: String,
        sa: Map<String, Value>,
    },
    /// Remove the SA `name`.
    SaDel { name: String },
    /// The SAs in force, as in `status`.
    SaList,
    /// Add a policy (the keys of a `[[policy]]` table) at `position` (0: first; default: last).
    PolicyAdd {
        policy: Map<String, Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        position: Option<usize>,
    },
    /// Remove the policy `name`.
    PolicyDel { name: String },
    /// The policies in force, in order.
    PolicyList,
    /// The events after `since` (`netveil monitor`).
    Events {
        #[serde(default)]
        since: u64,
    },
}

impl Request {
    /// Parses a request line. The error never repeats the line (it may hold keys).
    pub fn parse(line: &str) -> std::result::Result<Request, String> {
        let line = line.trim();
        match line {
            "status" => return Ok(Request::Status),
            "keys" => return Ok(Request::Keys),
            "rotate" => return Ok(Request::Rotate),
            "stop" => return Ok(Request::Stop),
            _ => {}
        }
        if !line.starts_with('{') {
            return Err(
                "unknown request (known: status, keys, rotate, stop, or a JSON request object)"
                    .into(),
            );
        }
        serde_json::from_str(line).map_err(|e| {
            // serde's messages may quote what was sent: only "missing field `x`" (our own names) is passed on.
            let m = e.to_string();
            match m.split(" at line").next() {
                Some(f) if f.starts_with("missing field") => format!("bad request: {f}"),
                _ if m.contains("unknown variant") => "unknown request".into(),
                _ => "bad request: not a request object of the README's form".into(),
            }
        })
    }

    /// The request as one line (JSON).
    pub fn line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Sends `req` and returns the answer; an answer with an `error` is an [`Error::Usage`] (naming its `key`).
pub fn request(socket: &Path, req: &Request) -> Result<Value> {
    let v = ask(socket, &req.line())?;
    if let Some(e) = v["error"].as_str() {
        return Err(Error::Usage(match v["key"].as_str() {
            Some(k) if !k.is_empty() => format!("{k}: {e}"),
            _ => e.to_string(),
        }));
    }
    Ok(v)
}

fn ask(socket: &Path, req: &str) -> Result<Value> {
    let mut s = UnixStream::connect(socket).map_err(|e| connect_error(socket, &e))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    s.write_all(format!("{req}\n").as_bytes())
        .map_err(Error::io("control socket"))?;
    s.shutdown(std::net::Shutdown::Write).ok();
    let mut buf = String::new();
    std::io::Read::read_to_string(&mut s, &mut buf).map_err(Error::io("control socket"))?;
    serde_json::from_str(&buf).map_err(|e| Error::Other(format!("bad answer from daemon: {e}")))
}

/// The status of the daemon at `socket`, typed.
pub fn get_status(socket: &Path) -> Result<Status> {
    let v = request(socket, &Request::Status)?;
    serde_json::from_value(v).map_err(|e| Error::Other(format!("bad status from daemon: {e}")))
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

    /// The control socket's directory is created 0700 and the socket is 0600.
    #[test]
    fn socket_directory_is_private() {
        let base = std::env::temp_dir().join(format!("netveil-ctl-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let sock = base.join("run/x.sock");
        let l = listen(&sock, |p| UnixListener::bind(p)).unwrap();
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
}
