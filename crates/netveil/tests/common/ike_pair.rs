//! Two `netveil up` daemons with `[ike]` sections in two network namespaces `a` and `b` joined by a veth pair
//! (`veth-a` 192.0.2.1/24, `veth-b` 192.0.2.2/24, IPv4 only: no neighbour discovery on the veth to tell from the
//! tunnel's traffic), each side's configuration written from a small typed description ([`Config`], [`Conn`],
//! [`Child`]) of what differs between the tests. The namespaces and the lab directory go when the [`IkePair`] is
//! dropped (after the daemons a test holds, which it declares later). Namespace names are the lab's: the test's
//! prefix, the process id and a counter, so tests running at the same time never share one.
//!
//! They need root (CI runs them as root) and the tools installed by .ci/setup.

// Each test file uses part of this module.
#![allow(dead_code)]

use netveil_lab::lab::{self, Daemon, Lab, TRANSPORT_FWMARK};
use serde_json::Value;

pub const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");
/// The veth addresses of sides a and b.
pub const VETH: [&str; 2] = ["192.0.2.1", "192.0.2.2"];
/// The IKE identities of sides a and b.
pub const IDS: [&str; 2] = ["@a.lab.test", "@b.lab.test"];
pub const PSK: &str = "netveil-ike-psk-0123456789";

/// What the daemons' TUN carries.
#[derive(Clone, Copy)]
pub enum Net {
    /// Transport mode between the veth addresses: the peer's address is routed into the TUN in the `fwmark`
    /// table and the IKE sockets carry the same mark (`ike.socket_mark`), so IKE itself bypasses the TUN.
    Transport,
    /// Tunnel mode: the TUN has the side's inner address and routes the peer's.
    Tunnel { inner: [&'static str; 2] },
}

/// `[ike]`'s retransmission settings (strongswan.conf's charon.retransmit_*).
#[derive(Clone, Copy)]
pub struct Retransmit {
    pub timeout_s: u32,
    pub base: f64,
    pub tries: u32,
}

/// One side's configuration: the log level, `[ike]` and its connections.
pub struct Config {
    pub log_level: &'static str,
    pub retransmit: Option<Retransmit>,
    pub connections: Vec<Conn>,
}

impl Config {
    pub fn new(connections: Vec<Conn>) -> Config {
        Config {
            log_level: "info",
            retransmit: None,
            connections,
        }
    }
}

/// An `[[ike.connection]]` (durations in whole seconds; `None`: the key is left out, the daemon's default).
#[derive(Clone)]
pub struct Conn {
    pub name: &'static str,
    pub local_addr: &'static str,
    /// Empty: a responder for any address.
    pub remote_addrs: Vec<&'static str>,
    pub proposals: Vec<&'static str>,
    pub psk: &'static str,
    pub encap: Option<bool>,
    pub local_id: &'static str,
    pub remote_id: &'static str,
    pub rekey_time: Option<u32>,
    pub rand_time: Option<u32>,
    pub over_time: Option<u32>,
    pub dpd_delay: Option<u32>,
    pub children: Vec<Child>,
}

impl Conn {
    /// Side `side`'s connection `name` to the other side's veth address: PSK [`PSK`] with the sides' [`IDS`],
    /// `aes128gcm16-prfsha256-x25519`, raw ESP (`encap = false`), no children.
    pub fn new(name: &'static str, side: usize) -> Conn {
        Conn {
            name,
            local_addr: VETH[side],
            remote_addrs: vec![VETH[1 - side]],
            proposals: vec!["aes128gcm16-prfsha256-x25519"],
            psk: PSK,
            encap: Some(false),
            local_id: IDS[side],
            remote_id: IDS[1 - side],
            rekey_time: None,
            rand_time: None,
            over_time: None,
            dpd_delay: None,
            children: Vec::new(),
        }
    }

    pub fn child(mut self, c: Child) -> Conn {
        self.children.push(c);
        self
    }
}

/// The traffic a child covers.
#[derive(Clone)]
pub enum Mode {
    /// `mode = "transport"` between the hosts' own addresses (swanctl's `dynamic`).
    Transport,
    /// Tunnel mode with these traffic selectors (CIDRs).
    Tunnel { local_ts: String, remote_ts: String },
}

/// An `[[ike.connection.children]]` (durations in whole seconds; `None`: the key is left out).
#[derive(Clone)]
pub struct Child {
    pub name: &'static str,
    pub mode: Mode,
    pub esp_proposals: Vec<&'static str>,
    pub start_action: Option<&'static str>,
    pub dpd_action: Option<&'static str>,
    pub rekey_time: Option<u32>,
    pub rand_time: Option<u32>,
    pub life_time: Option<u32>,
}

impl Child {
    /// A child `name` in `mode` with `aes128gcm16` and nothing else set.
    pub fn new(name: &'static str, mode: Mode) -> Child {
        Child {
            name,
            mode,
            esp_proposals: vec!["aes128gcm16"],
            start_action: None,
            dpd_action: None,
            rekey_time: None,
            rand_time: None,
            life_time: None,
        }
    }

    pub fn start(mut self, action: &'static str) -> Child {
        self.start_action = Some(action);
        self
    }
}

fn list(v: &[&str]) -> String {
    v.iter()
        .map(|s| format!("\"{s}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

fn secs(out: &mut String, key: &str, v: Option<u32>) {
    if let Some(v) = v {
        *out += &format!("{key} = \"{v}s\"\n");
    }
}

/// The two namespaces and their lab (see the module's documentation).
pub struct IkePair {
    pub lab: Lab,
    pub ns: [String; 2],
    pub net: Net,
    prefix: String,
}

impl IkePair {
    /// Checks root and the tools, then builds the namespaces (named after `prefix`, unique per test).
    pub fn new(prefix: &str, net: Net) -> IkePair {
        assert!(
            lab::is_root(),
            "the netns tests need root: run them as root (CI does)"
        );
        for t in ["ip", "ping", "tcpdump", "tshark", "nft"] {
            assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
        }
        let mut lab = Lab::new(prefix).unwrap().with_netveil(NETVEIL);
        let a = lab.add_ns("a").unwrap();
        let b = lab.add_ns("b").unwrap();
        for ns in [&a, &b] {
            for k in ["all", "default"] {
                lab.exec_ok(
                    ns,
                    &[
                        "sysctl",
                        "-qw",
                        &format!("net.ipv6.conf.{k}.disable_ipv6=1"),
                    ],
                )
                .unwrap();
            }
        }
        lab.veth(&a, "veth-a", &b, "veth-b").unwrap();
        lab.addr(&a, "veth-a", &format!("{}/24", VETH[0])).unwrap();
        lab.addr(&b, "veth-b", &format!("{}/24", VETH[1])).unwrap();
        IkePair {
            lab,
            ns: [a, b],
            net,
            prefix: prefix.to_string(),
        }
    }

    /// The name of side `side`'s TUN (the prefix and the side).
    pub fn tun(&self, side: usize) -> String {
        format!("{}{side}", self.prefix)
    }

    /// Side `side`'s configuration text.
    pub fn config(&self, side: usize, c: &Config) -> String {
        let mut t = format!(
            "log_level = \"{}\"\n[interface]\nname = \"{}\"\nmtu = 1400\ncontrol_socket = \"{}\"\n\
             state_dir = \"{}\"\n",
            c.log_level,
            self.tun(side),
            self.lab.socket_path(&format!("nv{side}")).display(),
            self.lab.dir().join(format!("state-{side}")).display(),
        );
        match self.net {
            Net::Transport => {
                t += &format!(
                    "fwmark = {TRANSPORT_FWMARK}\nroutes = [\"{}/32\"]\n\n[ike]\nsocket_mark = {TRANSPORT_FWMARK}\n",
                    VETH[1 - side]
                )
            }
            Net::Tunnel { inner } => {
                t += &format!(
                    "addresses = [\"{}/32\"]\nroutes = [\"{}/32\"]\n\n[ike]\n",
                    inner[side],
                    inner[1 - side]
                )
            }
        }
        if let Some(r) = c.retransmit {
            t += &format!(
                "retransmit_timeout = \"{}s\"\nretransmit_base = {:?}\nretransmit_tries = {}\n",
                r.timeout_s, r.base, r.tries
            );
        }
        for k in &c.connections {
            t += &format!(
                "\n[[ike.connection]]\nname = \"{}\"\nlocal_addrs = [\"{}\"]\nremote_addrs = [{}]\n\
                 proposals = [{}]\npsk = \"{}\"\n",
                k.name,
                k.local_addr,
                list(&k.remote_addrs),
                list(&k.proposals),
                k.psk
            );
            if let Some(e) = k.encap {
                t += &format!("encap = {e}\n");
            }
            secs(&mut t, "rekey_time", k.rekey_time);
            secs(&mut t, "rand_time", k.rand_time);
            secs(&mut t, "over_time", k.over_time);
            secs(&mut t, "dpd_delay", k.dpd_delay);
            t += &format!(
                "local = {{ id = \"{}\", auth = \"psk\" }}\nremote = {{ id = \"{}\", auth = \"psk\" }}\n",
                k.local_id, k.remote_id
            );
            for ch in &k.children {
                t += &format!("\n[[ike.connection.children]]\nname = \"{}\"\n", ch.name);
                match &ch.mode {
                    Mode::Transport => t += "mode = \"transport\"\n",
                    Mode::Tunnel {
                        local_ts,
                        remote_ts,
                    } => {
                        t +=
                            &format!("local_ts = [\"{local_ts}\"]\nremote_ts = [\"{remote_ts}\"]\n")
                    }
                }
                t += &format!("esp_proposals = [{}]\n", list(&ch.esp_proposals));
                if let Some(a) = ch.start_action {
                    t += &format!("start_action = \"{a}\"\n");
                }
                if let Some(a) = ch.dpd_action {
                    t += &format!("dpd_action = \"{a}\"\n");
                }
                secs(&mut t, "rekey_time", ch.rekey_time);
                secs(&mut t, "rand_time", ch.rand_time);
                secs(&mut t, "life_time", ch.life_time);
            }
        }
        t
    }

    /// Starts side `side`'s daemon `nv{side}` (no `--fresh-keys`: negotiated keys need no state record).
    pub fn try_start(&self, side: usize, c: &Config) -> netveil_lab::Result<Daemon> {
        self.lab.start_daemon_with(
            &self.ns[side],
            &format!("nv{side}"),
            &self.config(side, c),
            &[],
        )
    }

    /// [`IkePair::try_start`], panicking with the daemon's log if it does not come up.
    pub fn start(&self, side: usize, c: &Config) -> Daemon {
        self.try_start(side, c).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// Both daemons' logs for a failure message (read from their files: it works after a daemon is stopped or moved).
pub fn logs(d: [&Daemon; 2]) -> impl Fn() -> String {
    let (la, lb) = (d[0].log.clone(), d[1].log.clone());
    move || {
        let r = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
        format!("\n--- a ---\n{}\n--- b ---\n{}", r(&la), r(&lb))
    }
}

/// The SA objects named `ike-*` (the IKE driver's) in a daemon's status JSON, in the answer's order (none if the
/// daemon does not answer).
pub fn ike_sa_objects(d: &Daemon) -> Vec<Value> {
    fn walk(v: &Value, out: &mut Vec<Value>) {
        match v {
            Value::Object(m) => {
                if m.get("name")
                    .and_then(|n| n.as_str())
                    .is_some_and(|n| n.starts_with("ike-"))
                    && m.contains_key("spi")
                {
                    out.push(v.clone());
                }
                m.values().for_each(|x| walk(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&d.status_json().unwrap_or_default(), &mut out);
    out
}

/// [`ike_sa_objects`] as (name, SPI), the SPI a number or hex text (with or without `0x`).
pub fn ike_sa_spis(d: &Daemon) -> Vec<(String, u64)> {
    ike_sa_objects(d)
        .iter()
        .filter_map(|s| {
            let spi = &s["spi"];
            let spi = spi.as_u64().or_else(|| {
                spi.as_str()
                    .and_then(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok())
            })?;
            Some((s["name"].as_str()?.to_string(), spi))
        })
        .collect()
}
