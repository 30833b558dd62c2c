//! The typed status of a running daemon (what `status` answers and `netveil status --json` prints), the SA and
//! policy lists, the events, and their human-readable renderings.
//!
//! The JSON form is stable (the README's "Control socket" section lists it): members are added, never renamed or
//! removed. One object holds every engine's part: the IP engine's members at the top level (`interface`, `sas`,
//! `drops`, ...), the L2 engine's under `l2sec`, any other engine's under `engines`, by the engine's name (its own
//! typed value, written with [`Status::set_part`], read back with [`Status::part`], and rendered generically: an
//! engine added to the daemon shows up here without a change to this crate). Clients ignore members they do not
//! know.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Every engine's status in one object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// The IP engine (ESP/AH/PSP over a TUN), its members at the top level.
    #[serde(flatten)]
    pub ip: Option<IpStatus>,
    /// The L2 engine (l2sec over a TAP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2sec: Option<L2Status>,
    /// Every other engine's part, by engine name (absent when there is none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub engines: BTreeMap<String, serde_json::Value>,
}

impl Status {
    /// Sets engine `name`'s part to its typed status (an engine without a member of its own in [`Status`]).
    pub fn set_part<T: Serialize>(&mut self, name: &str, part: &T) {
        let v = serde_json::to_value(part)
            .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }));
        self.engines.insert(name.to_string(), v);
    }

    /// Engine `name`'s part as its typed status (`None`: absent, or not of that type).
    pub fn part<T: serde::de::DeserializeOwned>(&self, name: &str) -> Option<T> {
        serde_json::from_value(self.engines.get(name)?.clone()).ok()
    }
}

/// Drop counters by stable reason name (`tx:no-sa`, `rx:auth-failed`, ...), every reason listed, 0 included.
pub type Drops = BTreeMap<String, u64>;

/// The IP engine's status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpStatus {
    /// The TUN device.
    pub interface: String,
    pub uptime_seconds: u64,
    /// `null` without a `[psp]` section.
    pub psp: Option<PspStatus>,
    pub tx: TxTotals,
    pub rx: Totals,
    pub sas: Vec<SaStatus>,
    /// `tx:REASON` and `rx:REASON`.
    pub drops: Drops,
    pub policies: Vec<PolicyStatus>,
}

/// Packets and bytes through the TUN.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub packets: u64,
    pub bytes: u64,
}

/// Packets and bytes sent, and the packets a bypass policy let through in clear.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxTotals {
    pub packets: u64,
    pub bytes: u64,
    pub bypassed: u64,
}

/// One SA in force (`status`, `sa-list`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SaStatus {
    pub name: String,
    /// `in` or `out`.
    pub direction: String,
    /// `esp` or `ah`.
    pub protocol: String,
    /// `0x` and 8 hex digits.
    pub spi: String,
    /// `transport` or `tunnel`.
    pub mode: String,
    /// Tunnel mode: the outer addresses (`null` in transport mode).
    pub local: Option<String>,
    pub remote: Option<String>,
    /// The suite's name as in the configuration (`aes128gcm16`).
    pub suite: String,
    pub esn: bool,
    /// ESP-in-UDP: `udp LOCAL->REMOTE` (ports); `null` otherwise.
    pub encap: Option<String>,
    pub packets: u64,
    pub bytes: u64,
    pub dropped: u64,
    pub auth_failed: u64,
    pub replayed: u64,
    /// Outbound: the last sequence number sent; inbound: the highest received.
    pub seq: u64,
    pub replay_window: u32,
    /// `fresh`, `soft` (a rekey is due) or `expired`.
    pub lifetime: String,
    pub rekey_needed: bool,
    /// A replaced inbound SA still taking its peer's packets (for 5 s).
    pub retiring: bool,
}

/// One policy in force, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyStatus {
    pub name: String,
    /// `in` or `out`.
    pub direction: String,
    pub src: String,
    pub dst: String,
    /// The IP protocol number (`null`: any).
    pub proto: Option<u8>,
    /// `protect`, `bypass` or `discard`.
    pub action: String,
    /// `ipsec` or `psp`.
    pub protocol: String,
    /// The SAs a protect policy names.
    pub sas: Vec<String>,
    /// A protect policy whose SAs are all installed (always true for the others).
    pub installed: bool,
}

/// PSP: the device, the association with the peer, and the specification's counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PspStatus {
    pub peer: String,
    pub local: String,
    /// `tunnel` or `transport`.
    pub mode: String,
    pub version: u8,
    /// The key exchange's TLS connection is up.
    pub connected: bool,
    pub generation: u8,
    pub phase: u8,
    pub rotations: u64,
    /// `0x` and 8 hex digits; `0x00000000` before the first association.
    pub tx_spi: String,
    pub rx_spi: String,
    pub rx_sas: Vec<PspRxSa>,
    pub assoc_sent: u64,
    pub assoc_received: u64,
    pub replay_window: u32,
    pub stats: PspStats,
}

/// A PSP receive SA.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PspRxSa {
    pub spi: String,
    pub generation: u8,
    /// The highest IV received (`null`: none yet, or no replay window).
    pub replay_top: Option<u64>,
}

/// PSP's device counters (the kernel's names), and the packets not sent for want of a transmit SA.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PspStats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_auth_fail: u64,
    pub rx_error: u64,
    pub rx_bad: u64,
    pub rx_unknown_spi: u64,
    pub rx_replay: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_error: u64,
    pub tx_no_sa: u64,
}

/// The L2 engine's status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct L2Status {
    /// The Ethernet port.
    pub interface: String,
    pub tap: String,
    pub mac: String,
    /// `ADDRESS/PREFIX` of the TAP.
    pub address: String,
    pub mtu: u32,
    /// `0x88b5`.
    pub ethertype: String,
    pub group_suite: String,
    pub suites: Vec<String>,
    pub dh_groups: Vec<String>,
    pub epoch: u64,
    pub state_dir: String,
    pub signing: bool,
    pub require_signatures: bool,
    pub uptime_seconds: u64,
    pub group_senders: u64,
    pub peers: Vec<L2Peer>,
    pub counters: L2Counters,
    /// Reasons with a count above 0 only.
    pub tx_drops: Drops,
    pub rx_drops: Drops,
    /// SEP messages refused (or for other hosts), by reason.
    pub sep_errors: Drops,
}

/// A host on the port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct L2Peer {
    pub mac: String,
    pub ip: Option<String>,
    /// The address bound to the peer (configured, or from SEP).
    pub bound_ip: Option<String>,
    pub epoch: u64,
    pub session: Option<L2Session>,
    /// A previous session still accepted (during a rekey).
    pub previous_key_id: Option<u8>,
    pub handshaking: bool,
    pub queued: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub sessions: u64,
    pub failures: u64,
    pub dropped: u64,
}

/// A peer's current session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct L2Session {
    pub key_id: u8,
    pub suite: String,
    pub age_seconds: u64,
    pub expires_in_seconds: u64,
    pub initiator: bool,
    pub tx_seq: u64,
    pub rx_seq: u64,
}

/// The L2 engine's counters of the whole host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct L2Counters {
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub tx_group: u64,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub rx_group: u64,
    pub sep_messages: u64,
    pub sessions_established: u64,
    pub peer_restarts: u64,
    pub announces: u64,
    pub group_key_derivations: u64,
    pub sep_rate_limited: u64,
    /// Clear frames the port's nftables table dropped.
    pub clear_dropped_in: u64,
    pub clear_dropped_out: u64,
}

/// An event of the IP engine (`events`, `netveil monitor`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Increasing from 1; `events` requests take the last one seen.
    pub id: u64,
    /// Seconds since the daemon started.
    pub uptime: u64,
    /// `acquire`, `soft-lifetime`, `hard-lifetime`, `seq-nearly-spent`, `sa-added`, `sa-replaced`, `sa-removed`,
    /// `sa-retired`, `policy-added`, `policy-removed`.
    pub event: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sa: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spi: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The packet that caused an acquire: `SRC -> DST proto P [SPORT -> DPORT]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<String>,
}

impl Event {
    /// An event of kind `event`, numbered and timed when the daemon logs it.
    pub fn new(event: &str) -> Event {
        Event {
            event: event.to_string(),
            ..Event::default()
        }
    }

    /// The event without its number and time: `acquire policy=to-c flow=...`.
    pub fn line(&self) -> String {
        let mut l = self.event.clone();
        for (k, v) in [
            ("sa", &self.sa),
            ("spi", &self.spi),
            ("policy", &self.policy),
            ("flow", &self.flow),
        ] {
            if let Some(v) = v {
                l.push_str(&format!(" {k}={v}"));
            }
        }
        l
    }
}

impl core::fmt::Display for Event {
    /// `[    12s] acquire policy=to-c flow=...`
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "[{:>6}s] {}", self.uptime, self.line())
    }
}

pub fn human_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut f = b as f64;
    let mut u = 0;
    while f >= 1024.0 && u + 1 < units.len() {
        f /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{f:.2} {}", units[u])
    }
}

/// The human-readable status: the L2 engine's table, then the IP engine's.
pub fn render_status(s: &Status) -> String {
    let mut o = String::new();
    if let Some(l) = &s.l2sec {
        o.push_str(&render_l2_status(l));
        if s.ip.is_some() {
            o.push('\n');
        }
    }
    if let Some(ip) = &s.ip {
        o.push_str(&render_ip_status(ip));
    }
    for (name, part) in &s.engines {
        if !o.is_empty() {
            o.push('\n');
        }
        // The IKE driver's part as `swanctl --list-sas` shows it; any other generically.
        match (name.as_str(), serde_json::from_value(part.clone())) {
            ("ike", Ok(ike)) => o.push_str(&crate::ike::render_ike_status(&ike)),
            _ => o.push_str(&render_part(name, part)),
        }
    }
    o
}

/// Another engine's part, generically: its name, then one line per member (`name: value`, nested values as
/// compact JSON).
fn render_part(name: &str, part: &serde_json::Value) -> String {
    let mut o = format!("{name}:");
    match part {
        serde_json::Value::Object(m) => {
            o.push('\n');
            for (k, v) in m {
                match v {
                    serde_json::Value::String(s) => o.push_str(&format!("  {k}: {s}\n")),
                    v => o.push_str(&format!("  {k}: {v}\n")),
                }
            }
        }
        v => o.push_str(&format!(" {v}\n")),
    }
    o
}

fn render_ip_status(v: &IpStatus) -> String {
    let up = v.uptime_seconds;
    let mut o = format!(
        "interface: {}  up {}h{:02}m{:02}s\n  tx: {} packets, {}   rx: {} packets, {}\n\n",
        v.interface,
        up / 3600,
        up / 60 % 60,
        up % 60,
        v.tx.packets,
        human_bytes(v.tx.bytes),
        v.rx.packets,
        human_bytes(v.rx.bytes),
    );
    o.push_str(&format!(
        "{:<14} {:<3} {:<5} {:<10} {:<9} {:<22} {:>10} {:>11} {:>7} {:>12}\n",
        "SA", "DIR", "PROTO", "SPI", "MODE", "SUITE", "PACKETS", "BYTES", "DROPS", "SEQ"
    ));
    for sa in &v.sas {
        let mut suite = sa.suite.clone();
        if sa.esn {
            suite.push_str("-esn");
        }
        o.push_str(&format!(
            "{:<14} {:<3} {:<5} {:<10} {:<9} {:<22} {:>10} {:>11} {:>7} {:>12}{}\n",
            sa.name,
            sa.direction,
            sa.protocol,
            sa.spi,
            sa.mode,
            suite,
            sa.packets,
            human_bytes(sa.bytes),
            sa.dropped,
            sa.seq,
            if sa.rekey_needed {
                "  (rekey needed)"
            } else {
                ""
            }
        ));
        if let (Some(l), Some(r)) = (&sa.local, &sa.remote) {
            o.push_str(&format!("{:<14} {} <-> {}\n", "", l, r));
        }
    }
    if let Some(p) = &v.psp {
        let n = &p.stats;
        o.push_str(&format!(
            "\nPSP {} v{} {} <-> {}  peer {}  generation {} (phase {}, {} rotations)\n  tx SPI {}  rx SPI {}  receive SAs {}\n",
            p.mode,
            p.version,
            p.local,
            p.peer,
            if p.connected { "connected" } else { "not connected" },
            p.generation,
            p.phase,
            p.rotations,
            p.tx_spi,
            p.rx_spi,
            p.rx_sas.len(),
        ));
        o.push_str(&format!(
            "  rx: {} packets, {}, auth-fail {}, error {}, bad {} (unknown SPI {}, replay {})\n  tx: {} packets, {}, error {} (no SA {})\n",
            n.rx_packets,
            human_bytes(n.rx_bytes),
            n.rx_auth_fail,
            n.rx_error,
            n.rx_bad,
            n.rx_unknown_spi,
            n.rx_replay,
            n.tx_packets,
            human_bytes(n.tx_bytes),
            n.tx_error,
            n.tx_no_sa,
        ));
    }
    let drops: Vec<(&String, &u64)> = v.drops.iter().filter(|(_, n)| **n > 0).collect();
    o.push_str("\ndrops:");
    if drops.is_empty() {
        o.push_str(" none\n");
    } else {
        o.push('\n');
        for (k, n) in drops {
            o.push_str(&format!("  {k:<28} {n}\n"));
        }
    }
    o
}

fn render_l2_status(l: &L2Status) -> String {
    let c = &l.counters;
    let mut o = format!(
        "l2sec: {} (TAP {}, {} {}, MTU {})  EtherType {}  up {}s\n  group: {} epoch {}{}, {} senders known, {} peer restarts seen\n  sessions: {} (dh {})\n  tx: {} frames, {} ({} group)   rx: {} frames, {} ({} group)   SEP messages: {}, exchanges postponed or refused by the rate limit: {}\n  clear frames dropped on the port: {} in, {} out\n",
        l.interface,
        l.tap,
        l.mac,
        l.address,
        l.mtu,
        l.ethertype,
        l.uptime_seconds,
        l.group_suite,
        l.epoch,
        if l.signing { ", signed" } else { "" },
        l.group_senders,
        c.peer_restarts,
        l.suites.join(" "),
        l.dh_groups.join(" "),
        c.tx_frames,
        human_bytes(c.tx_bytes),
        c.tx_group,
        c.rx_frames,
        human_bytes(c.rx_bytes),
        c.rx_group,
        c.sep_messages,
        c.sep_rate_limited,
        c.clear_dropped_in,
        c.clear_dropped_out,
    );
    o.push_str(&format!(
        "\n{:<18} {:<15} {:<4} {:<18} {:>7} {:>9} {:>10} {:>11} {:>10} {:>11}\n",
        "PEER",
        "IP",
        "KEY",
        "SUITE",
        "AGE",
        "EXPIRES",
        "TX FRAMES",
        "TX BYTES",
        "RX FRAMES",
        "RX BYTES"
    ));
    for p in &l.peers {
        let (key, suite, age, exp) = match &p.session {
            None => (
                "-".to_string(),
                if p.handshaking {
                    "(SEP running)"
                } else {
                    "(none)"
                }
                .to_string(),
                "-".to_string(),
                "-".to_string(),
            ),
            Some(s) => (
                format!("{}{}", s.key_id, if s.initiator { "i" } else { "r" }),
                s.suite.clone(),
                format!("{}s", s.age_seconds),
                format!("{}s", s.expires_in_seconds),
            ),
        };
        o.push_str(&format!(
            "{:<18} {:<15} {:<4} {:<18} {:>7} {:>9} {:>10} {:>11} {:>10} {:>11}\n",
            p.mac,
            p.ip.as_deref().unwrap_or("-"),
            key,
            suite,
            age,
            exp,
            p.tx_frames,
            human_bytes(p.tx_bytes),
            p.rx_frames,
            human_bytes(p.rx_bytes),
        ));
    }
    for (what, m) in [
        ("tx drops", &l.tx_drops),
        ("rx drops", &l.rx_drops),
        ("SEP (refused, or for other hosts)", &l.sep_errors),
    ] {
        if !m.is_empty() {
            let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k} {v}")).collect();
            o.push_str(&format!("{what}: {}\n", parts.join(", ")));
        }
    }
    o
}

/// `netveil sa list`.
pub fn render_sas(sas: &[SaStatus]) -> String {
    let mut out = format!(
        "{:<16} {:<3} {:<5} {:<10} {:<9} {:<31} {:<16} {:>10} {:>10} {:>10} {}\n",
        "NAME",
        "DIR",
        "PROTO",
        "SPI",
        "MODE",
        "ENDPOINTS",
        "SUITE",
        "PACKETS",
        "BYTES",
        "SEQ",
        "STATE"
    );
    for s in sas {
        let ends = match (&s.local, &s.remote) {
            (Some(l), Some(r)) => format!("{l} -> {r}"),
            _ => "-".into(),
        };
        let mut state = s.lifetime.clone();
        if s.retiring {
            state.push_str(", retiring");
        }
        out.push_str(&format!(
            "{:<16} {:<3} {:<5} {:<10} {:<9} {:<31} {:<16} {:>10} {:>10} {:>10} {state}\n",
            s.name,
            s.direction,
            s.protocol,
            s.spi,
            s.mode,
            ends,
            s.suite,
            s.packets,
            human_bytes(s.bytes),
            s.seq,
        ));
    }
    out
}

/// `netveil policy list`.
pub fn render_policies(ps: &[PolicyStatus]) -> String {
    let mut out = format!(
        "{:<16} {:<3} {:<20} {:<20} {:<5} {:<8} {}\n",
        "NAME", "DIR", "SRC", "DST", "PROTO", "ACTION", "SAS"
    );
    for p in ps {
        let sas = if p.protocol == "psp" {
            "psp".to_string()
        } else {
            let mut s = p.sas.join(",");
            if !p.installed {
                s.push_str(" (waiting for its SAs)");
            }
            s
        };
        out.push_str(&format!(
            "{:<16} {:<3} {:<20} {:<20} {:<5} {:<8} {sas}\n",
            p.name,
            p.direction,
            p.src,
            p.dst,
            p.proto.map_or("any".into(), |x| x.to_string()),
            p.action,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The stable JSON form: an IP engine's status at the top level, the L2 engine's under `l2sec`, `psp` null when
    /// absent; parsed back, it is the same value; a status with only the L2 engine has no IP members.
    #[test]
    fn json_form_is_stable() {
        let ip = IpStatus {
            interface: "nv0".into(),
            uptime_seconds: 7,
            sas: vec![SaStatus {
                name: "a-to-b".into(),
                direction: "out".into(),
                protocol: "esp".into(),
                spi: "0x00001001".into(),
                mode: "tunnel".into(),
                local: Some("192.0.2.1".into()),
                remote: Some("192.0.2.2".into()),
                suite: "aes128gcm16".into(),
                lifetime: "fresh".into(),
                ..Default::default()
            }],
            drops: [("rx:auth-failed".to_string(), 0u64)].into(),
            ..Default::default()
        };
        let s = Status {
            ip: Some(ip),
            l2sec: None,
            ..Default::default()
        };
        let v = serde_json::to_value(&s).unwrap();
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "drops",
                "interface",
                "policies",
                "psp",
                "rx",
                "sas",
                "tx",
                "uptime_seconds"
            ]
        );
        assert_eq!(v["psp"], json!(null));
        assert_eq!(v["tx"], json!({"packets": 0, "bytes": 0, "bypassed": 0}));
        assert_eq!(v["sas"][0]["spi"], "0x00001001");
        assert_eq!(v["sas"][0]["encap"], json!(null));
        assert_eq!(v["drops"]["rx:auth-failed"], 0);
        let back: Status = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);

        let l2 = Status {
            ip: None,
            l2sec: Some(L2Status {
                interface: "eth0".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let v = serde_json::to_value(&l2).unwrap();
        assert_eq!(v.as_object().unwrap().keys().collect::<Vec<_>>(), ["l2sec"]);
        let back: Status = serde_json::from_value(v).unwrap();
        assert_eq!(back, l2);
        // A client reads members it knows and ignores new ones.
        let mut v = serde_json::to_value(&s).unwrap();
        v["future_member"] = json!(1);
        assert_eq!(serde_json::from_value::<Status>(v).unwrap(), s);
    }

    /// The text form shows both engines, the drops above zero only, and the PSP block when there is one.
    #[test]
    fn text_form_shows_what_is_there() {
        let mut ip = IpStatus {
            interface: "nv0".into(),
            uptime_seconds: 3723,
            drops: [
                ("rx:auth-failed".to_string(), 3u64),
                ("tx:no-sa".to_string(), 0),
            ]
            .into(),
            ..Default::default()
        };
        let t = render_status(&Status {
            ip: Some(ip.clone()),
            l2sec: None,
            ..Default::default()
        });
        assert!(t.starts_with("interface: nv0  up 1h02m03s\n"), "{t}");
        assert!(t.contains("rx:auth-failed"), "{t}");
        assert!(!t.contains("tx:no-sa"), "{t}");
        assert!(!t.contains("PSP"), "{t}");
        ip.psp = Some(PspStatus {
            mode: "tunnel".into(),
            version: 0,
            connected: true,
            ..Default::default()
        });
        let t = render_status(&Status {
            ip: Some(ip),
            l2sec: Some(L2Status {
                interface: "eth0".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(t.starts_with("l2sec: eth0"), "{t}");
        assert!(t.contains("\ninterface: nv0"), "{t}");
        assert!(t.contains("PSP tunnel v0"), "{t}");
        assert!(t.contains("peer connected"), "{t}");
    }

    /// An engine without a member of its own: its typed part under `engines`, by name, read back as its type, and
    /// rendered generically after the others; a status without one has no `engines` member.
    #[test]
    fn other_engines_have_a_part_of_their_own() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Echo {
            port: u16,
            name: String,
        }
        let mut s = Status {
            l2sec: Some(L2Status {
                interface: "eth0".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(serde_json::to_value(&s).unwrap().get("engines").is_none());
        let echo = Echo {
            port: 7,
            name: "e0".into(),
        };
        s.set_part("echo", &echo);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["engines"]["echo"], json!({"port": 7, "name": "e0"}));
        let back: Status = serde_json::from_value(v).unwrap();
        assert_eq!(back.part::<Echo>("echo"), Some(echo));
        assert_eq!(back.part::<Echo>("other"), None);
        let t = render_status(&back);
        assert!(t.starts_with("l2sec: eth0"), "{t}");
        assert!(t.ends_with("\necho:\n  name: e0\n  port: 7\n"), "{t}");
    }
}
