//! The configuration generator: [`HostPair`], the options of a two-host setup, turned into the two `netveil.toml`
//! texts (random keys of the right lengths).

use super::process::{netveil_binary, run_ok};
use crate::{Error, Result};
use std::io::Read;
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;

/// The fwmark (and routing table) used for transport mode.
pub const TRANSPORT_FWMARK: u32 = 20054;

fn random_bytes(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    if n > 0 {
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut v))
            .expect("/dev/urandom");
    }
    v
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Esp,
    Ah,
    /// PSP; `suite` is the PSP version name (e.g. "aes-gcm-128").
    Psp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Tunnel,
    Transport,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

/// Options of a two-host setup; [`HostPair::configs`] turns them into the two `netveil.toml` texts.
#[derive(Debug, Clone)]
pub struct HostPair {
    /// ESP suite (e.g. "aes128gcm16", "aes256-sha256", "null-null") or AH suite ("sha256").
    pub suite: String,
    pub protocol: Protocol,
    pub mode: Mode,
    /// Family of the veth (outer) addresses.
    pub outer: Family,
    /// Family of the inner (TUN) addresses in tunnel mode.
    pub inner: Family,
    pub esn: bool,
    pub udp_encap: bool,
    pub allow_null_null: bool,
    /// With `Some(ah_suite)`: an ESP+AH bundle, ESP (in `mode`) innermost, then AH in transport mode.
    pub bundle_ah: Option<String>,
    /// TUN device name.
    pub tun: String,
    pub mtu: u16,
    /// PSP: netveil's IV replay window (0: off; `None`: the default, on in tunnel mode).
    pub psp_replay_window: Option<u32>,
    /// PSP: master-key rotation interval in seconds (0: only on request).
    pub psp_rotate_seconds: u64,
    /// The daemons' `log_level` (`None`: the default, info).
    pub log_level: Option<String>,
    /// A router between the hosts (its own namespace, see `Router`): side b's outer address is then on a
    /// second subnet (203.0.113.0/24 or 2001:db8:3::/64), reached through it.
    pub routed: bool,
}

impl Default for HostPair {
    fn default() -> Self {
        HostPair {
            suite: "aes128gcm16".into(),
            protocol: Protocol::Esp,
            mode: Mode::Tunnel,
            outer: Family::V4,
            inner: Family::V4,
            esn: false,
            udp_encap: false,
            allow_null_null: false,
            bundle_ah: None,
            tun: "nv0".into(),
            mtu: 1400,
            psp_replay_window: None,
            psp_rotate_seconds: 0,
            log_level: None,
            routed: false,
        }
    }
}

/// The addresses of one side.
#[derive(Debug, Clone)]
pub struct HostAddrs {
    /// Address on the veth.
    pub outer: IpAddr,
    pub outer_prefix: u8,
    /// Address the traffic is between: the TUN address in tunnel mode, the veth address in transport mode.
    pub inner: IpAddr,
    pub inner_prefix: u8,
}

/// The Wireshark-decryptable ESP suites of tshark 4.0 (no ChaCha20-Poly1305, no GMAC).
pub fn wireshark_can_decrypt(suite: &str) -> bool {
    let s = suite.to_ascii_lowercase();
    !(s.contains("chacha") || s.contains("gmac"))
}

impl HostPair {
    pub fn esp(suite: &str) -> HostPair {
        HostPair {
            suite: suite.into(),
            allow_null_null: suite.eq_ignore_ascii_case("null-null"),
            ..Default::default()
        }
    }

    /// PSP with `version` ("aes-gcm-128", "aes-gcm-256", "aes-gmac-128", "aes-gmac-256").
    pub fn psp(version: &str) -> HostPair {
        HostPair {
            suite: version.into(),
            protocol: Protocol::Psp,
            ..Default::default()
        }
    }

    pub fn ah(suite: &str) -> HostPair {
        HostPair {
            suite: suite.into(),
            protocol: Protocol::Ah,
            ..Default::default()
        }
    }

    /// The same pair with a router between the hosts ([`HostPair::routed`]).
    pub fn via_router(mut self) -> HostPair {
        self.routed = true;
        self
    }

    /// The addresses of side 0 ("a") or 1 ("b").
    pub fn addrs(&self, side: usize) -> HostAddrs {
        let host = side as u8 + 1;
        // Routed, side b is on the router's second link.
        let far = self.routed && side == 1;
        let (outer, outer_prefix): (IpAddr, u8) = match (self.outer, far) {
            (Family::V4, false) => ([192, 0, 2, host].into(), 24),
            (Family::V4, true) => ([203, 0, 113, host].into(), 24),
            (Family::V6, false) => (format!("2001:db8:1::{host}").parse().expect("address"), 64),
            (Family::V6, true) => (format!("2001:db8:3::{host}").parse().expect("address"), 64),
        };
        let (inner, inner_prefix): (IpAddr, u8) = match (self.mode, self.inner) {
            (Mode::Transport, _) => (outer, outer_prefix),
            (Mode::Tunnel, Family::V4) => ([198, 51, 100, host].into(), 24),
            (Mode::Tunnel, Family::V6) => {
                (format!("2001:db8:2::{host}").parse().expect("address"), 64)
            }
        };
        HostAddrs {
            outer,
            outer_prefix,
            inner,
            inner_prefix,
        }
    }

    /// (enc_key, auth_key) lengths for the suite.
    pub fn key_lens(&self, suite: &str, protocol: Protocol) -> Result<(usize, usize)> {
        match protocol {
            Protocol::Esp => {
                let s = netveil_ipsec::suite::EspSuite::parse(suite, true)
                    .map_err(|e| Error::Usage(e.to_string()))?;
                Ok((s.enc.key_len(), s.integ.map_or(0, |i| i.key_len())))
            }
            Protocol::Ah => {
                let s = netveil_ipsec::suite::AhSuite::parse(suite)
                    .map_err(|e| Error::Usage(e.to_string()))?;
                Ok((0, s.integ.key_len()))
            }
            Protocol::Psp => Ok((0, 0)),
        }
    }

    /// The two configuration texts (side a, side b) with fresh random keys; `sockets` are the control sockets.
    pub fn configs(&self, sockets: [&Path; 2]) -> Result<[String; 2]> {
        self.configs_with(&netveil_binary(), sockets)
    }

    /// [`HostPair::configs`], with `netveil` making PSP's certificates (`netveil keygen`): a lab's own binary.
    pub fn configs_with(&self, netveil: &Path, sockets: [&Path; 2]) -> Result<[String; 2]> {
        if self.protocol == Protocol::Psp {
            return self.psp_configs(netveil, sockets);
        }
        let (ek, ak) = self.key_lens(&self.suite, self.protocol)?;
        // Keys per direction: [a->b, b->a].
        let keys: Vec<(String, String)> = (0..2)
            .map(|_| (hex::encode(random_bytes(ek)), hex::encode(random_bytes(ak))))
            .collect();
        let ah_keys: Option<(String, Vec<String>)> = match &self.bundle_ah {
            Some(s) => {
                let (_, l) = self.key_lens(s, Protocol::Ah)?;
                Some((
                    s.clone(),
                    (0..2).map(|_| hex::encode(random_bytes(l))).collect(),
                ))
            }
            None => None,
        };
        let mut out = [String::new(), String::new()];
        for (side, text) in out.iter_mut().enumerate() {
            let me = self.addrs(side);
            let peer = self.addrs(1 - side);
            let (me_n, peer_n) = (["a", "b"][side], ["a", "b"][1 - side]);
            let mut t = self.interface_section(side, sockets[side]);
            if self.allow_null_null {
                t.push_str("allow_null_null = true\n");
            }
            let sa = |t: &mut String,
                      name: &str,
                      dir: &str,
                      proto: &str,
                      spi: u32,
                      mode: Mode,
                      suite: &str,
                      enc: &str,
                      auth: &str| {
                t.push_str("\n[[sa]]\n");
                t.push_str(&format!("name = \"{name}\"\ndirection = \"{dir}\"\n"));
                t.push_str(&format!("protocol = \"{proto}\"\nspi = {spi:#x}\n"));
                match mode {
                    Mode::Tunnel => t.push_str(&format!(
                        "mode = \"tunnel\"\nlocal = \"{}\"\nremote = \"{}\"\n",
                        me.outer, peer.outer
                    )),
                    Mode::Transport => t.push_str("mode = \"transport\"\n"),
                }
                t.push_str(&format!("suite = \"{suite}\"\n"));
                if !enc.is_empty() {
                    t.push_str(&format!("enc_key = \"{enc}\"\n"));
                }
                if !auth.is_empty() {
                    t.push_str(&format!("auth_key = \"{auth}\"\n"));
                }
                if self.esn {
                    t.push_str("esn = true\n");
                }
                if self.udp_encap && proto == "esp" {
                    t.push_str("encap = \"udp\"\n");
                }
            };
            let proto = match self.protocol {
                Protocol::Esp => "esp",
                Protocol::Ah | Protocol::Psp => "ah",
            };
            // SPIs: a->b 0x1001, b->a 0x2001 (AH of a bundle: 0x3001, 0x4001).
            let (out_i, in_i) = (side, 1 - side);
            let spi = |dir_i: usize, base: u32| base + 0x1000 * dir_i as u32;
            let out_name = format!("{me_n}-to-{peer_n}");
            let in_name = format!("{peer_n}-to-{me_n}");
            sa(
                &mut t,
                &out_name,
                "out",
                proto,
                spi(out_i, 0x1001),
                self.mode,
                &self.suite,
                &keys[out_i].0,
                &keys[out_i].1,
            );
            sa(
                &mut t,
                &in_name,
                "in",
                proto,
                spi(in_i, 0x1001),
                self.mode,
                &self.suite,
                &keys[in_i].0,
                &keys[in_i].1,
            );
            let (mut out_sas, mut in_sas) = (vec![out_name.clone()], vec![in_name.clone()]);
            if let Some((ah_suite, ah)) = &ah_keys {
                let (o, i) = (format!("{out_name}-ah"), format!("{in_name}-ah"));
                sa(
                    &mut t,
                    &o,
                    "out",
                    "ah",
                    spi(out_i, 0x3001),
                    Mode::Transport,
                    ah_suite,
                    "",
                    &ah[out_i],
                );
                sa(
                    &mut t,
                    &i,
                    "in",
                    "ah",
                    spi(in_i, 0x3001),
                    Mode::Transport,
                    ah_suite,
                    "",
                    &ah[in_i],
                );
                out_sas.push(o);
                in_sas.push(i);
            }
            let host = if me.inner.is_ipv4() { 32 } else { 128 };
            let list = |v: &[String]| {
                v.iter()
                    .map(|s| format!("\"{s}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            t.push_str(&format!(
                "\n[[policy]]\nname = \"out\"\ndirection = \"out\"\nsrc = \"{}/{host}\"\ndst = \"{}/{host}\"\naction = \"protect\"\nsas = [{}]\n",
                me.inner, peer.inner, list(&out_sas)
            ));
            t.push_str(&format!(
                "\n[[policy]]\nname = \"in\"\ndirection = \"in\"\nsrc = \"{}/{host}\"\ndst = \"{}/{host}\"\naction = \"protect\"\nsas = [{}]\n",
                peer.inner, me.inner, list(&in_sas)
            ));
            *text = t;
        }
        Ok(out)
    }
}

impl HostPair {
    /// The `[interface]` section of side `side`.
    fn interface_section(&self, side: usize, socket: &Path) -> String {
        let me = self.addrs(side);
        let peer = self.addrs(1 - side);
        // The daemon's state (sequence-number marks) stays in the lab's directory, next to the control socket.
        let state = socket
            .parent()
            .unwrap_or(Path::new("."))
            .join(format!("state-{}", ["a", "b"][side]));
        let mut t = match &self.log_level {
            Some(l) => format!("log_level = \"{l}\"\n"),
            None => String::new(),
        };
        t += &format!(
            "[interface]\nname = \"{}\"\nmtu = {}\ncontrol_socket = \"{}\"\nstate_dir = \"{}\"\n",
            self.tun,
            self.mtu,
            socket.display(),
            state.display()
        );
        match self.mode {
            Mode::Tunnel => t.push_str(&format!(
                "addresses = [\"{}/{}\"]\n",
                me.inner, me.inner_prefix
            )),
            Mode::Transport => {
                let host = if peer.outer.is_ipv4() { 32 } else { 128 };
                t.push_str(&format!("fwmark = {TRANSPORT_FWMARK}\n"));
                t.push_str(&format!("routes = [\"{}/{host}\"]\n", peer.outer));
            }
        }
        t
    }

    /// PSP configurations: certificates for "a" and "b" made with `netveil keygen` next to the control sockets,
    /// each side trusting the other's self-signed certificate.
    fn psp_configs(&self, netveil: &Path, sockets: [&Path; 2]) -> Result<[String; 2]> {
        let dir = sockets[0]
            .parent()
            .ok_or_else(|| Error::internal("control socket without a directory"))?;
        for n in ["a", "b"] {
            if !dir.join(format!("{n}.crt")).exists() {
                run_ok(
                    Command::new(netveil)
                        .args(["keygen", "-n", n, "-o"])
                        .arg(dir),
                )?;
            }
        }
        let mut out = [String::new(), String::new()];
        for (side, text) in out.iter_mut().enumerate() {
            let me = self.addrs(side);
            let peer = self.addrs(1 - side);
            let (me_n, peer_n) = (["a", "b"][side], ["a", "b"][1 - side]);
            let mut t = self.interface_section(side, sockets[side]);
            let mode = match self.mode {
                Mode::Tunnel => "tunnel",
                Mode::Transport => "transport",
            };
            t.push_str(&format!(
                "\n[psp]\nversion = \"{}\"\nmode = \"{mode}\"\nlocal = \"{}\"\nremote = \"{}\"\n",
                self.suite, me.outer, peer.outer
            ));
            t.push_str(&format!(
                "cert = \"{d}/{me_n}.crt\"\nkey = \"{d}/{me_n}.key\"\npeer_ca = \"{d}/{peer_n}.crt\"\npeer_name = \"{peer_n}\"\n",
                d = dir.display()
            ));
            if let Some(w) = self.psp_replay_window {
                t.push_str(&format!("replay_window = {w}\n"));
            }
            if self.psp_rotate_seconds > 0 {
                t.push_str(&format!("rotate_seconds = {}\n", self.psp_rotate_seconds));
            }
            let host = if me.inner.is_ipv4() { 32 } else { 128 };
            for (name, src, dst) in [
                ("out", &me.inner, &peer.inner),
                ("in", &peer.inner, &me.inner),
            ] {
                t.push_str(&format!(
                    "\n[[policy]]\nname = \"{name}\"\ndirection = \"{name}\"\nsrc = \"{src}/{host}\"\ndst = \"{dst}/{host}\"\naction = \"protect\"\nprotocol = \"psp\"\n"
                ));
            }
            *text = t;
        }
        Ok(out)
    }
}
