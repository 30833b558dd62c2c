//! The client half: one request line to the daemon and its JSON answer ([`request`]), after checking that root
//! serves the socket ([`peer_credentials`]); the messages for a socket that cannot be reached.

use serde_json::Value;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::request::Request;

/// The credentials of the process at the other end of a connected Unix stream socket (`SO_PEERCRED`): (user id,
/// group id, process id), as they were when it connected (a client) or called `listen` (a server). The group id is
/// the effective one; supplementary groups are not included.
pub fn peer_credentials(s: &UnixStream) -> std::io::Result<(u32, u32, i32)> {
    let c = nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(std::io::Error::from)?;
    Ok((c.uid(), c.gid(), c.pid()))
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
            "permission denied on {}: the control socket is for root and its control group only",
            socket.display()
        ),
        _ => format!("cannot reach the netveil daemon at {}: {e}", socket.display()),
    })
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

pub(crate) fn ask(socket: &Path, req: &str) -> Result<Value> {
    ask_for(socket, req, Duration::from_secs(10))
}

/// [`ask`], waiting at most `wait` for the answer.
pub(crate) fn ask_for(socket: &Path, req: &str, wait: Duration) -> Result<Value> {
    let mut s = UnixStream::connect(socket).map_err(|e| connect_error(socket, &e))?;
    server_is_root(socket, &s)?;
    s.set_read_timeout(Some(wait)).ok();
    s.write_all(format!("{req}\n").as_bytes())
        .map_err(Error::io("control socket"))?;
    s.shutdown(std::net::Shutdown::Write).ok();
    let mut buf = String::new();
    std::io::Read::read_to_string(&mut s, &mut buf).map_err(Error::io("control socket"))?;
    serde_json::from_str(&buf).map_err(|e| Error::BadAnswer {
        // Its verb only: a request may carry keys.
        request: req
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string(),
        cause: e.to_string(),
    })
}

/// Checks that the server at the other end of `s` runs as root (`SO_PEERCRED`: who called `listen`), before
/// anything is sent: a request may carry keys, and a socket file that root's daemon left behind may since have
/// been bound by someone else.
fn server_is_root(socket: &Path, s: &UnixStream) -> Result<()> {
    match peer_credentials(s) {
        Ok((0, _, _)) => Ok(()),
        Ok((uid, _, pid)) => Err(Error::Usage(format!(
            "{} is served by uid {uid} (pid {pid}), not root: not a netveil daemon, nothing sent",
            socket.display()
        ))),
        Err(e) => Err(Error::Io {
            context: format!("cannot check who serves {}", socket.display()),
            source: e,
        }),
    }
}
