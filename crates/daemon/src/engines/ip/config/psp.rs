//! `[psp]`: PSP to one peer, keys exchanged over TLS 1.3 (the key exchange reads the same parsed section).

use super::values::*;
use super::*;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPsp {
    version: Option<String>,
    mode: Option<String>,
    local: Option<String>,
    remote: Option<String>,
    control_port: Option<i64>,
    cert: Option<String>,
    key: Option<String>,
    peer_ca: Option<String>,
    peer_name: Option<String>,
    rotate_seconds: Option<i64>,
    replay_window: Option<i64>,
    crypt_offset: Option<i64>,
    #[serde(default)]
    vc: bool,
}

/// The `[psp]` section: PSP to one peer, keys exchanged over a mutually authenticated TLS 1.3 connection.
#[derive(Debug, Clone)]
pub struct PspConfig {
    pub version: netveil_psp::Version,
    pub mode: netveil_psp::Mode,
    /// Our outer address and the peer's.
    pub local: IpAddr,
    pub remote: IpAddr,
    /// TCP port of the TLS key-exchange connection (both sides listen; the lower address connects).
    pub control_port: u16,
    /// Our certificate chain and private key (PEM), the trust anchor for the peer's certificate (PEM: the peer's
    /// self-signed certificate from `netveil keygen`, or a CA) and the name the peer's certificate must carry.
    pub cert: String,
    pub key: String,
    pub peer_ca: String,
    pub peer_name: String,
    /// Master-key rotation interval (0: only on `netveil rotate`).
    pub rotate_seconds: u64,
    /// netveil's IV replay check (tunnel mode; default [`DEFAULT_REPLAY_WINDOW`]; 0: off, as PSP specifies).
    pub replay_window: u32,
    /// Crypt offset in 4-byte units (transport mode and both tunnel families).
    pub crypt_offset: u8,
    /// Send an 8-byte virtualization cookie (all zero).
    pub vc: bool,
}

pub const PSP_CONTROL_PORT: u16 = 1001;

pub(crate) fn parse_psp(r: RawPsp) -> Result<PspConfig, ConfigError> {
    use netveil_psp::{Mode as PMode, Version};
    let version = match r.version.as_deref().unwrap_or("aes-gcm-128") {
        "aes-gcm-128" | "0" => Version::AesGcm128,
        "aes-gcm-256" | "1" => Version::AesGcm256,
        "aes-gmac-128" | "2" => Version::AesGmac128,
        "aes-gmac-256" | "3" => Version::AesGmac256,
        _ => {
            return err(
                "psp.version",
                "must be aes-gcm-128, aes-gcm-256, aes-gmac-128 or aes-gmac-256",
            )
        }
    };
    let mode = match r.mode.as_deref().unwrap_or("tunnel") {
        "tunnel" => PMode::Tunnel,
        "transport" => PMode::Transport,
        _ => return err("psp.mode", "must be 'tunnel' or 'transport'"),
    };
    let ip = |key: &str, v: &Option<String>| match v {
        Some(s) => parse_ip(key, s),
        None => err(key, "missing (the outer address)"),
    };
    let local = ip("psp.local", &r.local)?;
    let remote = ip("psp.remote", &r.remote)?;
    if local.is_ipv4() != remote.is_ipv4() {
        return err(
            "psp.remote",
            "local and remote must be of the same address family",
        );
    }
    if local == remote {
        return err("psp.remote", "must differ from psp.local");
    }
    let file = |key: &str, v: Option<String>| match v {
        Some(s) if !s.is_empty() => Ok(s),
        _ => err(key, "missing (a PEM file; `netveil keygen` makes one)"),
    };
    let peer_name = match r.peer_name {
        Some(n) if !n.is_empty() => n,
        _ => {
            return err(
                "psp.peer_name",
                "missing (the name in the peer's certificate)",
            )
        }
    };
    if rustls::pki_types::ServerName::try_from(peer_name.as_str()).is_err() {
        return err("psp.peer_name", "is not a valid DNS name (value not shown)");
    }
    // netveil's extension: on by default in tunnel mode (PSP itself has no replay check; 0 switches it off).
    let replay_window = match r.replay_window {
        None if mode == PMode::Tunnel => DEFAULT_REPLAY_WINDOW,
        None | Some(0) => 0,
        Some(v) => int_in("psp.replay_window", v, 64, 1 << 20)? as u32,
    };
    if replay_window > 0 && mode != PMode::Tunnel {
        return err(
            "psp.replay_window",
            "the IV replay check is for tunnel mode (transport mode leaves replay protection to TCP)",
        );
    }
    Ok(PspConfig {
        version,
        mode,
        local,
        remote,
        control_port: int_in(
            "psp.control_port",
            r.control_port.unwrap_or(PSP_CONTROL_PORT as i64),
            1,
            65535,
        )? as u16,
        cert: file("psp.cert", r.cert)?,
        key: file("psp.key", r.key)?,
        peer_ca: file("psp.peer_ca", r.peer_ca)?,
        peer_name,
        rotate_seconds: int_in(
            "psp.rotate_seconds",
            r.rotate_seconds.unwrap_or(0),
            0,
            365 * 86400,
        )? as u64,
        replay_window,
        crypt_offset: int_in("psp.crypt_offset", r.crypt_offset.unwrap_or(0), 0, 63)? as u8,
        vc: r.vc,
    })
}

#[cfg(test)]
mod tests {
    use crate::engines::ip::config::*;

    fn psp(mode: &str, extra: &str) -> Result<Config, ConfigError> {
        Config::parse(&format!(
            "[interface]\n[psp]\nmode = \"{mode}\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\ncert = \"a.crt\"\n\
             key = \"a.key\"\npeer_ca = \"b.crt\"\npeer_name = \"b\"\n{extra}"
        ))
    }

    /// PSP tunnel mode has netveil's replay window unless it is switched off; transport mode has none.
    #[test]
    fn psp_replay_window_defaults() {
        let w = |c: Config| c.psp.unwrap().replay_window;
        assert_eq!(w(psp("tunnel", "").unwrap()), DEFAULT_REPLAY_WINDOW);
        assert_eq!(w(psp("tunnel", "replay_window = 0").unwrap()), 0);
        assert_eq!(w(psp("tunnel", "replay_window = 4096").unwrap()), 4096);
        assert_eq!(w(psp("transport", "").unwrap()), 0);
        assert_eq!(
            psp("transport", "replay_window = 1024").unwrap_err().key,
            "psp.replay_window"
        );
    }
}
