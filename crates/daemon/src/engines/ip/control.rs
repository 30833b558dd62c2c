//! The IP engine's answers on the control socket (ESP, AH, PSP): status, keys, rotate.

use crate::engines::ip::Shared;
use crate::runtime::engine::Control;
use netveil_control::status::{
    Drops, IpStatus, PolicyStatus, PspRxSa, PspStats, PspStatus, SaStatus, Totals, TxTotals,
};
use netveil_control::{Request, Status};
use netveil_ipsec::bundle::SaRef;
use netveil_ipsec::sa::{Direction, Suite};
use netveil_ipsec::Mode;
use serde_json::{json, Map, Value};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The IP engine's answers: `keys` (the running SAs' keys, for Wireshark), `rotate` (PSP master keys), and its
/// part of `status`.
pub struct IpControl(pub Arc<Shared>);

impl Control for IpControl {
    fn answer(&self, req: &Request) -> Option<Value> {
        let sh = &self.0;
        let now = sh.now();
        let done = |r: Result<(), crate::engines::ip::config::ConfigError>| match r {
            Ok(()) => json!({ "ok": true }),
            Err(e) => json!({ "error": e.reason, "key": e.key }),
        };
        // SAs and policies a key-exchange driver owns (the IKE driver's `ike-*`) change only through it: a change
        // here would desync it (an SA it rekeys or deletes by name gone or replaced under it).
        let owned = |name: Option<&str>, what: &str| -> Option<Value> {
            let name = name?;
            let owner = sh.db.owner_of(name)?;
            Some(json!({
                "error": format!(
                    "{what} '{name}' is owned by {owner}; use netveil terminate (or change the configuration and \
                     restart) instead"
                ),
                "key": "name",
            }))
        };
        let refused = match req {
            Request::SaAdd { sa } => owned(sa.get("name").and_then(|n| n.as_str()), "SA"),
            Request::SaUpdate { name, .. } | Request::SaDel { name } => owned(Some(name), "SA"),
            Request::PolicyAdd { policy, .. } => {
                owned(policy.get("name").and_then(|n| n.as_str()), "policy")
            }
            Request::PolicyDel { name } => owned(Some(name), "policy"),
            _ => None,
        };
        if refused.is_some() {
            return refused;
        }
        Some(match req {
            Request::SaAdd { sa } => match table(sa, "sa") {
                Ok(t) => done(sh.db.sa_add(t, now)),
                Err(e) => e,
            },
            // A name is checked before it is looked up (errors and events may show it), as the tables' names are.
            Request::SaUpdate { name, sa } => match table(sa, "sa") {
                Ok(t) => done(checked_name(name).and_then(|()| sh.db.sa_update(name, t, now))),
                Err(e) => e,
            },
            Request::SaDel { name } => {
                done(checked_name(name).and_then(|()| sh.db.sa_del(name, now)))
            }
            Request::SaList => json!({ "sas": sas(sh) }),
            Request::PolicyAdd { policy, position } => match table(policy, "policy") {
                Ok(t) => done(sh.db.policy_add(t, *position, now)),
                Err(e) => e,
            },
            Request::PolicyDel { name } => {
                done(checked_name(name).and_then(|()| sh.db.policy_del(name, now)))
            }
            Request::PolicyList => json!({ "policies": policies(sh) }),
            Request::Events { since } => json!({ "events": sh.db.events_since(*since) }),
            Request::Keys => keys_json(sh),
            Request::Rotate => match &sh.psp {
                Some(st) => {
                    let before = st.kx.rotations.load(Relaxed);
                    st.kx.rotate_requests.fetch_add(1, Relaxed);
                    // Wait (briefly) for the key exchange to carry it out, so that `netveil rotate` returns after.
                    let t = std::time::Instant::now();
                    while st.kx.rotations.load(Relaxed) == before
                        && t.elapsed() < std::time::Duration::from_secs(3)
                    {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    let d = st.device.read().map(|d| d.generation()).unwrap_or(0);
                    json!({ "rotated": st.kx.rotations.load(Relaxed) != before, "generation": d })
                }
                None => json!({ "error": "no [psp] section: nothing to rotate" }),
            },
            _ => return None,
        })
    }

    fn status(&self, status: &mut Status) {
        status.ip = Some(self::status(&self.0));
    }
}

/// The `name` of a request that names an SA or a policy, checked by the rule of [`crate::runtime::names`].
fn checked_name(name: &str) -> Result<(), crate::engines::ip::config::ConfigError> {
    crate::runtime::names::check_name("name", name)
}

/// The keys of a `[[sa]]` or `[[policy]]` table sent as JSON, as TOML (what the configuration's parser reads).
fn table(m: &Map<String, Value>, what: &str) -> Result<toml::Table, Value> {
    serde_json::from_value(Value::Object(m.clone())).map_err(|_| {
        json!({ "error": "values must be strings, numbers, booleans, arrays or tables (no null)", "key": what })
    })
}

fn suite_name(s: &Suite) -> String {
    match s {
        Suite::Esp(e) => e.name(),
        Suite::Ah(a) => a.name(),
    }
}

/// The IP engine's status (what `netveil status --json` prints).
pub fn status(sh: &Shared) -> IpStatus {
    let now = sh.now();
    let mut drops = Drops::new();
    for (name, n) in sh.tx_drops.snapshot() {
        drops.insert(format!("tx:{name}"), n);
    }
    for (name, n) in sh.rx_drops.snapshot() {
        drops.insert(format!("rx:{name}"), n);
    }
    drops.insert("rx:socket-filter-or-full".into(), sh.kernel_drops());
    if let Some(t) = &sh.db.nft_table() {
        // Clear traffic a protect policy covers never reaches the data plane: the input chain counts it.
        drops.insert(
            format!("rx:{}", crate::engines::ip::drop::Drop::ClearCovered),
            crate::runtime::engine::nft_drops(t, "input"),
        );
        drops.insert(
            "rx:not-from-a-peer".into(),
            crate::runtime::engine::nft_drops(t, "prerouting"),
        );
        drops.insert(
            "tx:outside-tun-blocked".into(),
            crate::runtime::engine::nft_drops(t, "output")
                + crate::runtime::engine::nft_drops(t, "forward"),
        );
    }
    IpStatus {
        interface: sh.tun_name.clone(),
        uptime_seconds: now,
        psp: sh.psp.as_ref().and_then(|st| psp_status(st)),
        tx: TxTotals {
            packets: sh.tx_packets.load(Relaxed),
            bytes: sh.tx_bytes.load(Relaxed),
            bypassed: sh.bypassed.load(Relaxed),
        },
        rx: Totals {
            packets: sh.rx_packets.load(Relaxed),
            bytes: sh.rx_bytes.load(Relaxed),
        },
        sas: sas(sh),
        drops,
        policies: policies(sh),
    }
}

/// The SAs in force (a replaced inbound SA still taking its peer's packets is marked `retiring`).
fn sas(sh: &Shared) -> Vec<SaStatus> {
    let now = sh.now();
    let snap = sh.db.load();
    snap.sad
        .iter()
        .map(|r| {
            let sa = r.base();
            let p = &sa.params;
            let c = sa.counters.snapshot();
            let (mode, local, remote) = match p.mode {
                Mode::Transport => ("transport", None, None),
                Mode::Tunnel { local, remote } => {
                    ("tunnel", Some(local.to_string()), Some(remote.to_string()))
                }
            };
            SaStatus {
                name: p.name.clone(),
                direction: if p.direction == Direction::Out {
                    "out"
                } else {
                    "in"
                }
                .into(),
                protocol: match p.suite {
                    Suite::Esp(_) => "esp",
                    Suite::Ah(_) => "ah",
                }
                .into(),
                spi: format!("{:#010x}", p.spi),
                mode: mode.into(),
                local,
                remote,
                suite: suite_name(&p.suite),
                esn: p.esn,
                encap: p
                    .encap
                    .map(|u| format!("udp {}->{}", u.local_port, u.remote_port)),
                packets: c.packets,
                bytes: c.bytes,
                dropped: c.dropped,
                auth_failed: c.auth_failed,
                replayed: c.replayed,
                seq: match r {
                    SaRef::Out(o) => o.seq_last(),
                    SaRef::In(i, _) => i.replay_top(),
                },
                replay_window: p.replay_window,
                lifetime: format!("{:?}", sa.lifetime_state(now)).to_lowercase(),
                rekey_needed: sa.rekey_needed.load(Relaxed),
                retiring: matches!(r, SaRef::In(_, true)),
            }
        })
        .collect()
}

/// The policies in force, in order (`installed`: a protect policy whose SAs are all there).
fn policies(sh: &Shared) -> Vec<PolicyStatus> {
    use netveil_sa::policy::Action;
    let snap = sh.db.load();
    snap.policies
        .iter()
        .map(|sp| {
            let p = &*sp.rule;
            let protect = matches!(p.action, Action::Protect(_));
            PolicyStatus {
                name: p.name.clone(),
                direction: format!("{:?}", p.direction).to_lowercase(),
                src: p.selector.src.to_string(),
                dst: p.selector.dst.to_string(),
                proto: p.selector.proto,
                action: match p.action {
                    Action::Protect(_) => "protect",
                    Action::Bypass => "bypass",
                    Action::Discard => "discard",
                }
                .into(),
                protocol: if p.psp { "psp" } else { "ipsec" }.into(),
                sas: p.sa_names.clone(),
                installed: !protect || p.psp || !sp.sas.is_empty(),
            }
        })
        .collect()
}

/// PSP: the device (generation, phase, receive SAs), the association and the specification's counters.
fn psp_status(st: &crate::engines::ip::psp_state::PspState) -> Option<PspStatus> {
    let (gen, phase, rx_sas, windows, c) = match st.device.read() {
        Ok(d) => (
            d.generation(),
            d.phase(),
            d.rx_spis(),
            d.rx_windows(),
            d.stats.snapshot(),
        ),
        Err(_) => return None,
    };
    let top = |spi: u32| {
        windows
            .iter()
            .find(|(s, _)| *s == spi)
            .and_then(|(_, w)| w.map(|(top, _)| top))
    };
    Some(PspStatus {
        peer: st.cfg.remote.to_string(),
        local: st.cfg.local.to_string(),
        mode: if st.cfg.mode == netveil_psp::Mode::Tunnel {
            "tunnel"
        } else {
            "transport"
        }
        .into(),
        version: st.cfg.version.number(),
        connected: st.kx.connected.load(Relaxed),
        generation: gen,
        phase,
        rotations: st.kx.rotations.load(Relaxed),
        tx_spi: format!("{:#010x}", st.tx_spi.load(Relaxed)),
        rx_spi: format!("{:#010x}", st.kx.rx_spi.load(Relaxed)),
        rx_sas: rx_sas
            .iter()
            .map(|(s, g)| PspRxSa {
                spi: format!("{s:#010x}"),
                generation: *g,
                replay_top: top(*s),
            })
            .collect(),
        assoc_sent: st.kx.assoc_sent.load(Relaxed),
        assoc_received: st.kx.assoc_received.load(Relaxed),
        replay_window: st.cfg.replay_window,
        stats: PspStats {
            rx_packets: c.rx_packets,
            rx_bytes: c.rx_bytes,
            rx_auth_fail: c.rx_auth_fail,
            rx_error: c.rx_error,
            rx_bad: c.rx_bad,
            rx_unknown_spi: c.rx_unknown_spi,
            rx_replay: c.rx_replay,
            tx_packets: c.tx_packets,
            tx_bytes: c.tx_bytes,
            tx_error: c.tx_error,
            tx_no_sa: st.tx_no_sa.load(Relaxed),
        },
    })
}

/// The running SAs' keys, with Wireshark's algorithm names (only over the root-only control socket).
fn keys_json(sh: &Shared) -> Value {
    let snap = sh.db.load();
    let sas: Vec<Value> = snap
        .sad
        .iter()
        .filter_map(|r| {
            let p = &r.base().params;
            let Suite::Esp(es) = p.suite else { return None };
            let (fam, src, dst) = match p.mode {
                Mode::Tunnel { local, remote } => {
                    let (s, d) = if p.direction == Direction::Out {
                        (local, remote)
                    } else {
                        (remote, local)
                    };
                    (
                        if s.is_ipv4() { "IPv4" } else { "IPv6" },
                        s.to_string(),
                        d.to_string(),
                    )
                }
                Mode::Transport => ("Any", "*".to_string(), "*".to_string()),
            };
            Some(json!({
                "name": p.name,
                "family": fam,
                "src": src,
                "dst": dst,
                "spi": format!("{:#010x}", p.spi),
                "enc_alg": es.enc.wireshark_name(),
                "enc_key": format!("0x{}", hex::encode(&p.enc_key[..])),
                "auth_alg": es.integ.map_or("NULL", |i| i.rfc_name()),
                "auth_key": format!("0x{}", hex::encode(&p.auth_key[..])),
                "esn": p.esn,
            }))
        })
        .collect();
    json!({ "sas": sas })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::ip::drop::Drop;

    /// Hostile names are refused at every request that takes one (`sa add|update|del`, `policy add|del`), by the
    /// one rule of names, naming the key, without the value: never looked up, never shown in an error or event.
    #[test]
    fn hostile_names_in_requests_are_refused() {
        let dir = std::env::temp_dir().join(format!("netveil-ipctl-names-{}", std::process::id()));
        let cfg = format!("[interface]\nstate_dir = \"{}\"\n", dir.display());
        let ctl = IpControl(Arc::new(
            Shared::new(crate::engines::ip::config::Config::parse(&cfg).unwrap()).unwrap(),
        ));
        let evil = "x\"\nmeta l4proto != 255 accept comment \"";
        let table = |pairs: &[(&str, &str)]| -> Map<String, Value> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
                .collect()
        };
        let policy = table(&[
            ("name", evil),
            ("direction", "out"),
            ("dst", "10.0.0.0/8"),
            ("action", "discard"),
        ]);
        for (req, key) in [
            (Request::SaDel { name: evil.into() }, "name"),
            (Request::PolicyDel { name: evil.into() }, "name"),
            (
                Request::SaUpdate {
                    name: evil.into(),
                    sa: Map::new(),
                },
                "name",
            ),
            (
                Request::SaAdd {
                    sa: table(&[("name", evil)]),
                },
                "sa.name",
            ),
            (
                Request::PolicyAdd {
                    policy,
                    position: Some(0),
                },
                "policy.name",
            ),
        ] {
            let a = ctl.answer(&req).unwrap();
            assert_eq!(a["key"], key, "{req:?}: {a}");
            assert!(
                a["error"].as_str().unwrap().contains("A-Z a-z 0-9 . _ -"),
                "{a}"
            );
            assert!(!a.to_string().contains("l4proto"), "{a}");
        }
        assert!(ctl.0.db.load().policies.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Every drop counter `netveil status` shows (without the nftables table, which adds its chains' counters as
    /// `rx:clear-but-protected`, `rx:not-from-a-peer` and `tx:outside-tun-blocked`): the IP engine's reasons in both
    /// directions and the kernel's drops before the sockets, each under the name scripts read, and a counted drop
    /// under its reason's name in the JSON and the text.
    #[test]
    fn status_shows_every_drop_reason_by_name() {
        let dir = std::env::temp_dir().join(format!("netveil-ipctl-{}", std::process::id()));
        let cfg = format!("[interface]\nstate_dir = \"{}\"\n", dir.display());
        let sh = Shared::new(crate::engines::ip::config::Config::parse(&cfg).unwrap()).unwrap();
        sh.tx_drops.count(Drop::NoSa);
        sh.rx_drops.count(netveil_ipsec::Drop::AuthFailed.into());
        sh.rx_drops.count(netveil_ipsec::Drop::AuthFailed.into());
        let st = status(&sh);
        let v = serde_json::to_value(&st).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let keys: Vec<&str> = v["drops"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        let reasons = [
            "auth-failed",
            "bad-next-header",
            "bad-padding",
            "clear-but-protected",
            "fragment-without-first",
            "malformed",
            "no-sa",
            "policy-discard",
            "policy-mismatch",
            "replayed",
            "sa-expired",
            "send-refused",
            "seq-exhausted",
            "seq-not-reserved",
            "tfc-dummy",
            "too-big",
            "too-big-for-path",
            "too-old",
            "ttl-exceeded",
            "unknown-spi",
            "unsupported",
        ];
        let mut want: Vec<String> = ["rx", "tx"]
            .iter()
            .flat_map(|d| reasons.iter().map(move |r| format!("{d}:{r}")))
            .collect();
        want.push("rx:socket-filter-or-full".into());
        want.sort();
        assert_eq!(keys, want);
        assert_eq!(v["drops"]["tx:no-sa"], 1);
        assert_eq!(v["drops"]["rx:auth-failed"], 2);
        assert_eq!(v["drops"]["rx:no-sa"], 0);
        let text = netveil_control::render_status(&Status {
            ip: Some(st),
            l2sec: None,
            ..Default::default()
        });
        let lines: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("drops:"))
            .skip(1)
            .map(|l| l.trim())
            .collect();
        assert_eq!(
            lines,
            [
                format!("{:<28} 2", "rx:auth-failed"),
                format!("{:<28} 1", "tx:no-sa")
            ],
            "{text}"
        );
    }
}
