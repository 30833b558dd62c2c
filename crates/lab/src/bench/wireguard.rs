//! wireguard-go, the bench's and the lab's user-space reference: found on PATH or in ~/go/bin, brought up between
//! two namespaces as netveil's paths have them.

use crate::lab::{self, HostPair, Lab, TwoHosts};
use crate::{Error, Result};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// wireguard-go: on PATH, or built from the Go module proxy into ~/go/bin (where `go install` names it
/// `wireguard`).
pub fn find_wireguard_go() -> Option<PathBuf> {
    if lab::have_tool("wireguard-go") {
        return Some(PathBuf::from("wireguard-go"));
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    ["wireguard-go", "wireguard"]
        .iter()
        .flat_map(|n| {
            [
                home.join("go/bin").join(n),
                PathBuf::from("/root/go/bin").join(n),
            ]
        })
        .find(|p| p.exists())
}

/// Runs `f` with wireguard-go (the binary `wg_go`) between two fresh namespaces as the bench's other paths have
/// them (same addresses: `inner` on the tunnel; same MTU), then stops it.
pub fn with_wireguard_go<T>(
    wg_go: &std::path::Path,
    f: impl FnOnce(&Lab, &TwoHosts) -> Result<T>,
) -> Result<T> {
    with_wireguard_go_on(wg_go, &HostPair::default(), f)
}

/// [`with_wireguard_go`] on the topology of `pair` (its addresses, and its router when it is routed).
pub fn with_wireguard_go_on<T>(
    wg_go: &std::path::Path,
    pair: &HostPair,
    f: impl FnOnce(&Lab, &TwoHosts) -> Result<T>,
) -> Result<T> {
    let mut lab = Lab::new("nvbench")?;
    let h = TwoHosts::topology(&mut lab, pair)?;
    let mut keys = Vec::new();
    for _ in 0..2 {
        let k = Command::new("wg")
            .arg("genkey")
            .output()
            .map_err(Error::io("wg genkey"))?;
        let private = String::from_utf8_lossy(&k.stdout).trim().to_string();
        let mut p = Command::new("wg")
            .arg("pubkey")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(Error::io("wg pubkey"))?;
        use std::io::Write;
        p.stdin.take().map(|mut s| s.write_all(private.as_bytes()));
        let public =
            String::from_utf8_lossy(&p.wait_with_output().map_err(Error::io("wg pubkey"))?.stdout)
                .trim()
                .to_string();
        keys.push((private, public));
    }
    let mut children = Vec::new();
    for i in 0..2 {
        let ns = &h.ns[i];
        let keyfile = lab.dir().join(format!("wg{i}.key"));
        std::fs::write(&keyfile, &keys[i].0).map_err(Error::io("write wg key"))?;
        // wireguard-go's control socket (/var/run/wireguard/NAME.sock) is not per namespace: one name per side.
        let dev = format!("nvwg{i}");
        let mut cmd = lab.command(ns, &[wg_go.to_str().unwrap_or("wireguard-go"), "-f", &dev]);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        children.push(cmd.spawn().map_err(Error::io("start wireguard-go"))?);
        for _ in 0..50 {
            if lab
                .exec(ns, &["ip", "link", "show", &dev])
                .map(|o| o.status.success())
                .unwrap_or(false)
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let peer = format!("{}:51820", h.addrs[1 - i].outer);
        let allowed = format!("{}/32", h.addrs[1 - i].inner);
        lab.exec_ok(
            ns,
            &[
                "wg",
                "set",
                &dev,
                "private-key",
                keyfile.to_str().unwrap_or(""),
                "listen-port",
                "51820",
                "peer",
                &keys[1 - i].1,
                "allowed-ips",
                &allowed,
                "endpoint",
                &peer,
            ],
        )?;
        lab.exec_ok(
            ns,
            &[
                "ip",
                "addr",
                "add",
                &format!("{}/24", h.addrs[i].inner),
                "dev",
                &dev,
            ],
        )?;
        lab.exec_ok(
            ns,
            &[
                "ip",
                "link",
                "set",
                &dev,
                "mtu",
                &pair.mtu.to_string(),
                "up",
            ],
        )?;
    }
    let r = f(&lab, &h);
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    r
}
