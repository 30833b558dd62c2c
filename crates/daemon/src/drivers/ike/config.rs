//! The `[ike]` section: IKEv2 connections as swanctl.conf writes them, in TOML.
//!
//! ```toml
//! [ike]
//! retransmit_timeout = "4s"       # strongswan.conf's charon.retransmit_* (all connections)
//! retransmit_base = 1.8
//! retransmit_tries = 5
//!
//! [[ike.connection]]
//! name = "site"
//! local_addrs = ["192.0.2.1"]
//! remote_addrs = ["198.51.100.1"]
//! proposals = ["aes256gcm16-prfsha384-ecp384"]
//! psk_file = "/etc/netveil/site.psk"    # or psk = "..." (0x... for hex)
//! local = { id = "192.0.2.1", auth = "psk" }
//! remote = { id = "198.51.100.1", auth = "psk" }
//! # or with certificates (PEM or DER; the key file root's and mode 0600/0400, as psk_file):
//! # local = { id = "C=CH, O=example, CN=gw1", auth = "pubkey", certs = ["gw1.pem"], key = "gw1.key" }
//! # remote = { id = "gw2.example.org", auth = "pubkey", cacerts = ["ca.pem"] }   # or certs = ["gw2.pem"]
//!
//! [[ike.connection.children]]
//! name = "net"
//! local_ts = ["10.1.0.0/16"]
//! remote_ts = ["10.2.0.0/16", "10.3.0.1/32[tcp/80]"]
//! esp_proposals = ["aes256gcm16-ecp384"]
//! start_action = "start"
//! ```
//!
//! The shape is swanctl.conf's (`connections.<name>` with `local`, `remote`, `children.<name>`, the same key
//! names and values) except that connections and children are arrays of tables with a `name` key: swanctl's
//! order is meaningful (the first child is the one IKE_AUTH creates, connections are matched in order) and TOML
//! tables are unordered. Every error names its key (`ike.connection[0].children[1].esp_proposals`) and never shows
//! a value; a pre-shared key appears in no message.

pub use super::values::esp_suite;
use super::values::*;
use crate::runtime::config::{typed, ConfigError, Secret, DEFAULT_SOCKET_MARK};
use netveil_ike::config::{
    Action, AuthMethod, AuthRound, ChildConfig, Connection, Lifetimes, Mode, Retransmit, TsSpec,
};
use netveil_ike::proposal::{Proposal, Protocol};
use serde::Deserialize;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

/// The IKE port (RFC 7296 2.) and the NAT-T port (RFC 3948).
pub const IKE_PORT: u16 = 500;
pub const NAT_T_PORT: u16 = 4500;

/// The parsed `[ike]` section.
#[derive(Debug, Clone)]
pub struct IkeConfig {
    pub connections: Vec<Connection>,
    /// `SO_MARK` of the IKE sockets (`socket_mark`): the IP engine's (`[interface] fwmark`, default
    /// [`DEFAULT_SOCKET_MARK`]), so that the fail-closed filters let IKE out and a `fwmark` routing rule keeps it
    /// off the TUN.
    pub socket_mark: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIke {
    connection: Option<Vec<toml::Value>>,
    retransmit_timeout: Option<toml::Value>,
    retransmit_base: Option<f64>,
    retransmit_tries: Option<i64>,
    socket_mark: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConn {
    name: String,
    #[serde(default)]
    local_addrs: Vec<String>,
    #[serde(default)]
    remote_addrs: Vec<String>,
    remote_port: Option<i64>,
    proposals: Option<Vec<String>>,
    #[serde(default)]
    encap: bool,
    fragmentation: Option<bool>,
    local: Option<toml::Value>,
    remote: Option<toml::Value>,
    psk: Option<Secret>,
    psk_file: Option<String>,
    dpd_delay: Option<toml::Value>,
    rekey_time: Option<toml::Value>,
    reauth_time: Option<toml::Value>,
    over_time: Option<toml::Value>,
    rand_time: Option<toml::Value>,
    children: Option<Vec<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChild {
    name: String,
    local_ts: Option<Vec<String>>,
    remote_ts: Option<Vec<String>>,
    esp_proposals: Option<Vec<String>>,
    mode: Option<String>,
    rekey_time: Option<toml::Value>,
    life_time: Option<toml::Value>,
    rand_time: Option<toml::Value>,
    start_action: Option<String>,
    dpd_action: Option<String>,
    close_action: Option<String>,
    replay_window: Option<i64>,
}

/// Parses the `[ike]` table (its value: the section's keys). Every error found, each naming its key.
pub fn parse(v: toml::Value, base: &Path) -> Result<IkeConfig, Vec<ConfigError>> {
    let raw: RawIke = typed(v, "ike").map_err(|e| vec![e])?;
    let mut errors = Vec::new();
    let mut retransmit = Retransmit::default();
    if let Some(t) = raw.retransmit_timeout {
        match duration(t, "ike.retransmit_timeout") {
            Ok(d) if !d.is_zero() => retransmit.timeout = d,
            Ok(_) => errors.push(e("ike.retransmit_timeout", "must be above zero")),
            Err(x) => errors.push(x),
        }
    }
    if let Some(b) = raw.retransmit_base {
        if (1.0..=10.0).contains(&b) {
            retransmit.base = b;
        } else {
            errors.push(e("ike.retransmit_base", "must be 1.0 to 10.0"));
        }
    }
    if let Some(t) = raw.retransmit_tries {
        match u32::try_from(t) {
            Ok(t @ 0..=100) => retransmit.tries = t,
            _ => errors.push(e("ike.retransmit_tries", "must be 0 to 100")),
        }
    }
    let socket_mark = match raw.socket_mark {
        None => DEFAULT_SOCKET_MARK,
        Some(m) => u32::try_from(m)
            .ok()
            .filter(|m| *m != 0)
            .unwrap_or_else(|| {
                errors.push(e(
                    "ike.socket_mark",
                    "must be 1 to 4294967295 (the [interface] fwmark)",
                ));
                DEFAULT_SOCKET_MARK
            }),
    };
    let conns = raw.connection.unwrap_or_default();
    if conns.is_empty() {
        errors.push(e(
            "ike.connection",
            "no connection: add at least one [[ike.connection]]",
        ));
    }
    let mut connections = Vec::new();
    for (i, c) in conns.into_iter().enumerate() {
        let key = format!("ike.connection[{i}]");
        match connection(c, &key, base, retransmit) {
            Ok(c) => {
                if connections.iter().any(|o: &Connection| o.name == c.name) {
                    errors.push(e(format!("{key}.name"), "names another connection too"));
                }
                connections.push(c);
            }
            Err(es) => errors.extend(es),
        }
    }
    if errors.is_empty() {
        Ok(IkeConfig {
            connections,
            socket_mark,
        })
    } else {
        Err(errors)
    }
}

/// Where a connection's or a child's checks put an error they find (all are collected, in the order found).
type Report<'a> = &'a dyn Fn(Result<(), ConfigError>);
/// Names a key under the connection's or the child's (`k("proposals")`: `ike.connection[0].proposals`).
type KeyOf<'a> = &'a dyn Fn(&str) -> String;

fn connection(
    v: toml::Value,
    key: &str,
    base: &Path,
    retransmit: Retransmit,
) -> Result<Connection, Vec<ConfigError>> {
    let mut r: RawConn = typed(v, key).map_err(|e| vec![e])?;
    let k = |s: &str| format!("{key}.{s}");
    let errors = std::cell::RefCell::new(Vec::new());
    let ok = |x: Result<(), ConfigError>| {
        if let Err(x) = x {
            errors.borrow_mut().push(x)
        }
    };
    ok(name(&r.name, &k("name")));
    let mut local_addrs = Vec::new();
    let mut remote_addrs = Vec::new();
    ok(addrs(&r.local_addrs, "local_addrs", &k).map(|a| local_addrs = a));
    ok(addrs(&r.remote_addrs, "remote_addrs", &k).map(|a| remote_addrs = a));
    if local_addrs.is_empty() {
        ok(Err(e(
            k("local_addrs"),
            "is required (the addresses the IKE sockets bind to)",
        )));
    }
    let remote_port = match r.remote_port {
        None => IKE_PORT,
        Some(p) => u16::try_from(p)
            .ok()
            .filter(|p| *p != 0)
            .unwrap_or_else(|| {
                ok(Err(e(k("remote_port"), "must be 1 to 65535")));
                IKE_PORT
            }),
    };
    let proposals = ike_proposals(r.proposals.as_deref(), &k, &ok);
    let (local, remote) = sides(r.local.take(), r.remote.take(), base, &k, &ok);
    let psk = psk(r.psk.take(), r.psk_file.take(), base, &k, &ok);
    let uses_psk = [&local, &remote].iter().any(|a| {
        matches!(
            a,
            Some(AuthRound {
                method: AuthMethod::Psk,
                ..
            })
        )
    });
    if uses_psk
        && psk.is_none()
        && errors
            .borrow()
            .iter()
            .all(|x| !x.key.starts_with(&k("psk")))
    {
        ok(Err(e(
            k("psk"),
            "auth = \"psk\" needs a pre-shared key (psk or psk_file)",
        )));
    }
    let (dpd_delay, lifetimes, reauth) = ike_times(&mut r, &k, &ok);
    let children = children(r.children.take(), &local_addrs, &remote_addrs, &k, &ok);
    let errors = errors.into_inner();
    if !errors.is_empty() {
        return Err(errors);
    }
    let (Some(local), Some(remote)) = (local, remote) else {
        unreachable!("both sides parsed when there is no error")
    };
    Ok(Connection {
        name: r.name,
        local_addrs,
        remote_addrs,
        remote_port,
        proposals,
        encap: r.encap,
        fragmentation: r.fragmentation.unwrap_or(true),
        local,
        remote,
        psk,
        dpd_delay,
        lifetimes,
        reauth,
        retransmit,
        children,
    })
}

/// A connection's `local_addrs` or `remote_addrs` (`what`): IP addresses.
fn addrs(list: &[String], what: &str, k: KeyOf) -> Result<Vec<IpAddr>, ConfigError> {
    list.iter()
        .enumerate()
        .map(|(i, a)| {
            a.parse::<IpAddr>().map_err(|_| {
                e(
                    format!("{}[{i}]", k(what)),
                    "is not an IP address (hostnames and ranges are not supported)",
                )
            })
        })
        .collect()
}

/// A connection's `proposals` (required, not empty): the IKE proposals, each with key exchanges supported.
fn ike_proposals(list: Option<&[String]>, k: KeyOf, ok: Report) -> Vec<Proposal> {
    let mut proposals = Vec::new();
    match list {
        None => ok(Err(e(
            k("proposals"),
            "is required (e.g. [\"aes256gcm16-prfsha384-ecp384\"])",
        ))),
        Some([]) => ok(Err(e(k("proposals"), "is empty"))),
        Some(p) => {
            for (i, s) in p.iter().enumerate() {
                match Proposal::parse(Protocol::Ike, s) {
                    Ok(p) => match ke_supported(&p) {
                        Ok(()) => proposals.push(p),
                        Err(why) => ok(Err(e(format!("{}[{i}]", k("proposals")), why))),
                    },
                    Err(x) => ok(Err(e(
                        format!("{}[{i}]", k("proposals")),
                        proposal_error(s, &x),
                    ))),
                }
            }
        }
    }
    proposals
}

/// A connection's `local` and `remote` sides (both required): `(None, None)` unless both parse.
fn sides(
    local: Option<toml::Value>,
    remote: Option<toml::Value>,
    base: &Path,
    k: KeyOf,
    ok: Report,
) -> (Option<AuthRound>, Option<AuthRound>) {
    let local = local.map(|v| auth(v, &k("local"), false, base));
    let remote = remote.map(|v| auth(v, &k("remote"), true, base));
    match (local, remote) {
        (Some(Ok(l)), Some(Ok(r))) => (Some(l), Some(r)),
        (l, r) => {
            for (x, what) in [(l, "local"), (r, "remote")] {
                match x {
                    None => ok(Err(e(
                        k(what),
                        "is required (id and auth = \"psk\" or \"pubkey\" of this side)",
                    ))),
                    Some(Err(x)) => ok(Err(x)),
                    Some(Ok(_)) => {}
                }
            }
            (None, None)
        }
    }
}

/// A connection's pre-shared key: `psk` or `psk_file` (relative to `base`), not both; `None` if neither.
fn psk(
    psk: Option<Secret>,
    psk_file: Option<String>,
    base: &Path,
    k: KeyOf,
    ok: Report,
) -> Option<netveil_ike::keys::Secret> {
    match (psk, psk_file) {
        (Some(_), Some(_)) => {
            ok(Err(e(k("psk_file"), "give psk or psk_file, not both")));
            None
        }
        (Some(s), None) => match decode_psk(&s) {
            Ok(s) => Some(s),
            Err(why) => {
                ok(Err(e(k("psk"), why)));
                None
            }
        },
        (None, Some(f)) => match read_psk_file(&base.join(f)) {
            Ok(s) => Some(s),
            Err(why) => {
                ok(Err(e(k("psk_file"), why)));
                None
            }
        },
        (None, None) => None,
    }
}

/// A connection's times: `dpd_delay` (`None`: off), the IKE SA's lifetimes (`rekey_time`, `over_time`,
/// `rand_time`) and `reauth_time`.
fn ike_times(r: &mut RawConn, k: KeyOf, ok: Report) -> (Option<Duration>, Lifetimes, Duration) {
    let dur = |v: Option<toml::Value>, what: &str, default: Duration| -> Duration {
        match v.map(|v| duration(v, &k(what))) {
            None => default,
            Some(Ok(d)) => d,
            Some(Err(x)) => {
                ok(Err(x));
                default
            }
        }
    };
    let dpd = dur(r.dpd_delay.take(), "dpd_delay", Duration::ZERO);
    let rekey = dur(
        r.rekey_time.take(),
        "rekey_time",
        Duration::from_secs(4 * 3600),
    );
    let reauth = dur(r.reauth_time.take(), "reauth_time", Duration::ZERO);
    // swanctl: over_time defaults to 10% of rekey_time or reauth_time (the longer), rand_time to over_time (here
    // at most 10% of the shorter, so that the defaults of `rekey_time = "1h"`, `reauth_time = "24h"` are valid).
    let over = dur(r.over_time.take(), "over_time", rekey.max(reauth) / 10);
    let shortest = [rekey, reauth].into_iter().filter(|d| !d.is_zero()).min();
    let rand_default = match shortest {
        Some(s) if over >= s => s / 10,
        _ => over,
    };
    let rand = dur(r.rand_time.take(), "rand_time", rand_default);
    if !rekey.is_zero() && rand >= rekey {
        ok(Err(e(k("rand_time"), "must be below rekey_time")));
    }
    if !reauth.is_zero() && rand >= reauth {
        ok(Err(e(k("rand_time"), "must be below reauth_time")));
    }
    let lifetimes = Lifetimes {
        rekey,
        life: rekey + over,
        rand,
    };
    ((!dpd.is_zero()).then_some(dpd), lifetimes, reauth)
}

/// A connection's `children` (at least one), each named once.
fn children(
    raw: Option<Vec<toml::Value>>,
    local_addrs: &[IpAddr],
    remote_addrs: &[IpAddr],
    k: KeyOf,
    ok: Report,
) -> Vec<ChildConfig> {
    let mut children = Vec::new();
    let raw_children = raw.unwrap_or_default();
    if raw_children.is_empty() {
        ok(Err(e(
            k("children"),
            "no child: add at least one [[ike.connection.children]]",
        )));
    }
    for (i, c) in raw_children.into_iter().enumerate() {
        let ck = format!("{}[{i}]", k("children"));
        match child(c, &ck, local_addrs, remote_addrs) {
            Ok(c) => {
                if children.iter().any(|o: &ChildConfig| o.name == c.name) {
                    ok(Err(e(format!("{ck}.name"), "names another child too")));
                }
                children.push(c);
            }
            Err(es) => es.into_iter().for_each(|x| ok(Err(x))),
        }
    }
    children
}

fn child(
    v: toml::Value,
    key: &str,
    local_addrs: &[IpAddr],
    remote_addrs: &[IpAddr],
) -> Result<ChildConfig, Vec<ConfigError>> {
    let r: RawChild = typed(v, key).map_err(|e| vec![e])?;
    let k = |s: &str| format!("{key}.{s}");
    let errors = std::cell::RefCell::new(Vec::new());
    let ok = |x: Result<(), ConfigError>| {
        if let Err(x) = x {
            errors.borrow_mut().push(x)
        }
    };
    ok(name(&r.name, &k("name")));
    let ts_list = |list: Option<Vec<String>>, what: &str, own: &[IpAddr]| -> Vec<TsSpec> {
        let list = list.unwrap_or_else(|| vec!["dynamic".into()]);
        if list.is_empty() {
            ok(Err(e(k(what), "is empty")));
        }
        let mut out = Vec::new();
        for (i, s) in list.iter().enumerate() {
            match ts(s, own) {
                Ok(t) => out.push(t),
                Err(why) => ok(Err(e(format!("{}[{i}]", k(what)), why))),
            }
        }
        out
    };
    let local_ts = ts_list(r.local_ts, "local_ts", local_addrs);
    let remote_ts = ts_list(r.remote_ts, "remote_ts", remote_addrs);
    let mut esp_proposals = Vec::new();
    match &r.esp_proposals {
        None => ok(Err(e(
            k("esp_proposals"),
            "is required (e.g. [\"aes256gcm16-ecp384\"])",
        ))),
        Some(p) if p.is_empty() => ok(Err(e(k("esp_proposals"), "is empty"))),
        Some(p) => {
            for (i, s) in p.iter().enumerate() {
                let pk = format!("{}[{i}]", k("esp_proposals"));
                match Proposal::parse(Protocol::Esp, s) {
                    Ok(p) => match engine_supports(&p).and_then(|()| ke_supported(&p)) {
                        Ok(()) => esp_proposals.push(p),
                        Err(why) => ok(Err(e(pk, why))),
                    },
                    Err(x) => ok(Err(e(pk, proposal_error(s, &x)))),
                }
            }
        }
    }
    let mode = match r.mode.as_deref() {
        None | Some("tunnel") => Mode::Tunnel,
        Some("transport") => Mode::Transport,
        Some(_) => {
            ok(Err(e(k("mode"), "must be tunnel or transport")));
            Mode::Tunnel
        }
    };
    let dur = |v: Option<toml::Value>, what: &str, default: Duration| -> Duration {
        match v.map(|v| duration(v, &k(what))) {
            None => default,
            Some(Ok(d)) => d,
            Some(Err(x)) => {
                ok(Err(x));
                default
            }
        }
    };
    // swanctl's defaults: rekey after 1 h, life_time 110% of rekey_time, rand_time life - rekey.
    let rekey = dur(r.rekey_time, "rekey_time", Duration::from_secs(3600));
    let life = dur(r.life_time, "life_time", rekey + rekey / 10);
    let rand = dur(r.rand_time, "rand_time", life.saturating_sub(rekey));
    if life <= rekey && !rekey.is_zero() {
        ok(Err(e(k("life_time"), "must be above rekey_time")));
    }
    if !rekey.is_zero() && rand >= rekey {
        ok(Err(e(k("rand_time"), "must be below rekey_time")));
    }
    let act = |s: &Option<String>, what: &str, allowed: &[&str]| -> Action {
        action(s.as_deref(), &k(what), allowed).unwrap_or_else(|x| {
            ok(Err(x));
            Action::None
        })
    };
    let start_action = act(&r.start_action, "start_action", &["start", "trap"]);
    let dpd_action = act(&r.dpd_action, "dpd_action", &["start", "trap"]);
    let close_action = act(&r.close_action, "close_action", &["start", "trap"]);
    for (what, a) in [
        ("start_action", start_action),
        ("dpd_action", dpd_action),
        ("close_action", close_action),
    ] {
        if a == Action::Trap && remote_addrs.is_empty() {
            // A trap initiates: it needs the peer's address.
            ok(Err(e(
                k(what),
                "trap needs the connection's remote_addrs (a responder-only connection cannot initiate)",
            )));
        }
    }
    // The IP engine's window: 64 to 2^20 packets (swanctl's default 32 is raised to 64).
    let replay_window = match r.replay_window {
        None => 64,
        Some(n @ 0..=1_048_576) => (n as u32).max(64),
        Some(_) => {
            ok(Err(e(k("replay_window"), "must be 0 to 1048576 packets")));
            64
        }
    };
    let errors = errors.into_inner();
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(ChildConfig {
        name: r.name,
        local_ts,
        remote_ts,
        esp_proposals,
        mode,
        lifetimes: Lifetimes { rekey, life, rand },
        start_action,
        dpd_action,
        close_action,
        replay_window,
    })
}

#[cfg(test)]
mod tests;
