//! The control socket: `netveil status` and `netveil keys` ask a running daemon over a Unix socket.
use std::path::Path;

pub fn status(_socket: &Path, _json: bool) -> crate::Result<()> {
    Err(crate::Error::Other("status: not built yet".into()))
}

pub fn keys_wireshark(_socket: &Path, _dir: &Path) -> crate::Result<()> {
    Err(crate::Error::Other("keys: not built yet".into()))
}
