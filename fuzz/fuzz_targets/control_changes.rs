//! The control socket's request parser and the runtime-change path behind it (issue 21): request lines go through
//! `Request::parse` and the IP engine's `IpControl::answer`, exactly as the control socket hands them over, to an
//! engine in memory (a fresh one per input, its state directory emptied first). The first byte picks the mode:
//! even, the rest is raw request lines; odd, the rest drives a builder of well-formed JSON requests (`sa-add`,
//! `sa-update`, `sa-del`, `policy-add`, `policy-del`, listings) from small pools of names, SPIs, addresses,
//! suites and keys with the fuzzer's values mixed in, so that most inputs reach the checks of a change.
//!
//! Beyond "no panic", after every request:
//! - an outbound policy's bundle reaches only outbound SAs of the names it lists, an inbound policy's only inbound
//!   ones;
//! - a refused request (an answer with `error`) and a request that changes nothing by its nature (listings, events)
//!   leave the SAs, the policies and the nftables table text exactly as they were;
//! - an error answer never holds a key (`enc_key`, `auth_key`) of the request, and a parse error never the line;
//! - every SA and policy name in force, and every SA name a policy lists, follows the name rule (1-64 of
//!   `[A-Za-z0-9._-]`: what reaches nftables comments, logs and events).
#![no_main]
use libfuzzer_sys::arbitrary::{Result as AResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use netveil_control::Request;
use netveil_daemon::engines::ip::config::Config;
use netveil_daemon::runtime::engine::Control;
use netveil_daemon::engines::ip::Shared;
use netveil_daemon::engines::ip::control::IpControl;
use netveil_ipsec::bundle::{Bundle, SaRef};
use netveil_ipsec::sa::Direction as SaDir;
use netveil_sa::policy::Direction;
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// The state directory (tmpfs where there is one: sequence marks are synced on every outbound SA added) and the
/// configuration file's text naming it.
///
/// A state directory on tmpfs is right only for a fuzzer: the daemon keeps sequence-number marks there that must
/// survive a reboot, so the file says `allow_volatile_state = true`. The directory is under /run (root's, not
/// writable by others, as a state directory's parents must be; /dev/shm is everyone's).
fn setup() -> &'static (PathBuf, String) {
    static S: OnceLock<(PathBuf, String)> = OnceLock::new();
    S.get_or_init(|| {
        let base = if std::path::Path::new("/run").is_dir() {
            PathBuf::from("/run")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("netveil-fuzz-control-{}", std::process::id()));
        let text = format!(
            r#"[interface]
state_dir = "{}"
allow_volatile_state = true
[[sa]]
name = "a-to-b"
direction = "out"
spi = 0x1001
local = "192.0.2.1"
remote = "192.0.2.2"
suite = "aes128gcm16"
enc_key = "{}"
[[sa]]
name = "b-to-a"
direction = "in"
spi = 0x2001
local = "192.0.2.1"
remote = "192.0.2.2"
suite = "aes128gcm16"
enc_key = "{}"
[[policy]]
name = "p-out"
direction = "out"
src = "10.1.0.0/16"
dst = "10.2.0.0/16"
action = "protect"
sas = ["a-to-b"]
[[policy]]
name = "p-in"
direction = "in"
src = "10.2.0.0/16"
dst = "10.1.0.0/16"
action = "protect"
sas = ["b-to-a"]
"#,
            dir.display(),
            key(0, 20),
            key(1, 20),
        );
        (dir, text)
    })
}

/// Key number `id` of `len` bytes, as hex.
fn key(id: u8, len: usize) -> String {
    let mut k = vec![0xa5u8; len];
    if let Some(b) = k.first_mut() {
        *b = id;
    }
    if len > 4 {
        k[len - 1] = id ^ 0x5a;
    }
    k.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SA and policy name rule, as every entry checks it.
fn is_name(s: &str) -> bool {
    netveil_daemon::runtime::names::is_name(s)
}

/// What a change may alter: the SAs (name, outbound, SPI, retiring), the policies (name, direction, SAs listed,
/// installed) and the nftables table's text.
type Listing = (
    Vec<(String, bool, u32, bool)>,
    Vec<(String, bool, Vec<String>, bool)>,
    Option<String>,
);

fn listing(sh: &Shared) -> Listing {
    let snap = sh.db.load();
    (
        snap.sad
            .iter()
            .map(|r| {
                let b = r.base();
                (
                    b.params.name.clone(),
                    b.params.direction == SaDir::Out,
                    b.spi(),
                    matches!(r, SaRef::In(_, true)),
                )
            })
            .collect(),
        snap.policies
            .iter()
            .map(|p| {
                (
                    p.rule.name.clone(),
                    p.rule.direction == Direction::Out,
                    p.rule.sa_names.clone(),
                    !p.sas.is_empty(),
                )
            })
            .collect(),
        sh.db.nft_text("netveil_fuzz"),
    )
}

/// The invariants of the snapshot in force.
fn check_snapshot(sh: &Shared) {
    let snap = sh.db.load();
    for s in snap.sad.iter() {
        let n = &s.base().params.name;
        assert!(is_name(n), "SA name {n:?} in force");
    }
    for sp in &snap.policies {
        let (p, sas) = (&*sp.rule, &sp.sas);
        assert!(is_name(&p.name), "policy name {:?} in force", p.name);
        for n in &p.sa_names {
            assert!(is_name(n), "policy {:?} lists SA name {n:?}", p.name);
        }
        match p.direction {
            Direction::Out => {
                assert!(!matches!(sas, Bundle::In(_)), "{}", p.name);
                for (j, &i) in sas.outbound().iter().enumerate() {
                    let sa = snap.sad.out(i);
                    assert_eq!(sa.params.direction, SaDir::Out, "{}", p.name);
                    assert_eq!(sa.params.name, p.sa_names[j], "{}", p.name);
                }
            }
            Direction::In => {
                assert!(!matches!(sas, Bundle::Out(_)), "{}", p.name);
                for (j, &i) in sas.inbound().iter().enumerate() {
                    let sa = snap.sad.inb(i);
                    assert_eq!(sa.params.direction, SaDir::In, "{}", p.name);
                    assert_eq!(sa.params.name, p.sa_names[j], "{}", p.name);
                }
            }
        }
    }
}

/// Every string of a JSON value (map keys included), but the values of `enc_key` and `auth_key`.
fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(m) => {
            for (k, x) in m {
                out.push(k);
                if k != "enc_key" && k != "auth_key" {
                    strings(x, out);
                }
            }
        }
        _ => {}
    }
}

/// The key values (strings of 8 or more characters) of a request's tables.
fn keys_of(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Array(a) => a.iter().for_each(|x| keys_of(x, out)),
        Value::Object(m) => {
            for (k, x) in m {
                match x {
                    Value::String(s) if (k == "enc_key" || k == "auth_key") && s.len() >= 8 => {
                        out.push(s.clone())
                    }
                    _ => keys_of(x, out),
                }
            }
        }
        _ => {}
    }
}

/// One request line through the parser and the IP engine's answer, with the checks.
fn one(ctl: &IpControl, line: &str) {
    let line = line.trim();
    let req = match Request::parse(line) {
        Ok(r) => r,
        Err(e) => {
            if line.starts_with('{') {
                assert!(!e.contains(line), "a parse error repeats the line");
            }
            return;
        }
    };
    let sh = &ctl.0;
    let before = listing(sh);
    let Some(answer) = ctl.answer(&req) else {
        return;
    };
    check_snapshot(sh);
    let after = listing(sh);
    let changes = matches!(
        req,
        Request::SaAdd { .. }
            | Request::SaUpdate { .. }
            | Request::SaDel { .. }
            | Request::PolicyAdd { .. }
            | Request::PolicyDel { .. }
    );
    if let Some(err) = answer.get("error") {
        assert_eq!(after, before, "a refused request changed something");
        let text = answer.to_string();
        let req_v = serde_json::to_value(&req).unwrap_or(Value::Null);
        let mut others = Vec::new();
        strings(&req_v, &mut others);
        let mut keys = Vec::new();
        keys_of(&req_v, &mut keys);
        for k in keys {
            // A key that is also another value of the request (a name, a suite) or a name in force may show as that.
            let shown_otherwise = others.iter().any(|o| o.contains(k.as_str()))
                || after.0.iter().any(|s| s.0.contains(k.as_str()))
                || after.1.iter().any(|p| p.0.contains(k.as_str()));
            assert!(
                shown_otherwise || !text.contains(k.as_str()),
                "an error answer shows a key of the request: {err}"
            );
        }
    } else if !changes {
        assert_eq!(after, before, "{line}");
    } else {
        assert_eq!(answer, json!({ "ok": true }));
        // An SA added or replaced is in force as asked: its name, direction and SPI.
        let (name, sa) = match &req {
            Request::SaAdd { sa } => (sa.get("name").and_then(Value::as_str), sa),
            Request::SaUpdate { name, sa } => (Some(name.as_str()), sa),
            _ => return,
        };
        let out = sa.get("direction").and_then(Value::as_str) == Some("out");
        let spi = sa.get("spi").and_then(Value::as_i64);
        assert!(
            after.0.iter().any(|s| Some(s.0.as_str()) == name
                && !s.3
                && s.1 == out
                && Some(i64::from(s.2)) == spi),
            "an SA added or replaced is not in force as asked"
        );
    }
}

const SA_NAMES: [&str; 6] = ["a-to-b", "b-to-a", "x", "y", "p-out", "a-to-c"];
const POLICY_NAMES: [&str; 5] = ["p-out", "p-in", "to-x", "p0", "p1"];
const SPIS: [i64; 6] = [0x1001, 0x2001, 0x3001, 0x3002, 0x2002, 255];
/// Tunnel ends (weighted: mostly ours and the peer's).
const LOCALS: [&str; 5] = ["192.0.2.1", "192.0.2.1", "192.0.2.1", "2001:db8::1", "any"];
const REMOTES: [&str; 5] = [
    "192.0.2.2",
    "192.0.2.2",
    "198.51.100.7",
    "2001:db8::2",
    "192.0.2.1",
];
const NETS: [&str; 7] = [
    "10.1.0.0/16",
    "10.2.0.0/16",
    "10.3.0.0/16",
    "10.3.0.9/32",
    "10.0.0.0/8",
    "2001:db8:1::/48",
    "any",
];
/// Suites and their key lengths (enc, auth).
const SUITES: [(&str, usize, usize); 7] = [
    ("aes128gcm16", 20, 0),
    ("aes256gcm16", 36, 0),
    ("chacha20poly1305", 36, 0),
    ("aes128-sha256", 16, 32),
    ("aes256-sha1", 32, 20),
    ("sha256", 0, 32),
    ("null-null", 0, 0),
];

/// True about once in `d` times, and never once the data is used up (where `ratio` says yes for ever): a request
/// built from the last bytes is then the plain one.
fn rarely(u: &mut Unstructured, d: u32) -> AResult<bool> {
    Ok(!u.ratio(d - 1, d)?)
}

/// A string: mostly from `pool`, sometimes the fuzzer's own.
fn pick_str(u: &mut Unstructured, pool: &[&str]) -> AResult<Value> {
    Ok(if rarely(u, 8)? {
        Value::String(u.arbitrary::<String>()?)
    } else {
        Value::String((*u.choose(pool)?).to_string())
    })
}

/// A value of any JSON kind (wrong types, nulls, nesting).
fn any_value(u: &mut Unstructured, depth: u8) -> AResult<Value> {
    Ok(match u.int_in_range(0..=6u8)? {
        1 => Value::Null,
        2 => Value::Bool(u.arbitrary()?),
        3 => json!(u.arbitrary::<i64>()?),
        // (Not finite: null.)
        4 => json!(u.arbitrary::<f64>()?),
        5 if depth > 0 => Value::Array(vec![any_value(u, depth - 1)?, any_value(u, depth - 1)?]),
        6 if depth > 0 => {
            let mut m = Map::new();
            m.insert(u.arbitrary()?, any_value(u, depth - 1)?);
            Value::Object(m)
        }
        _ => Value::String(u.arbitrary()?),
    })
}

/// A key for `len` bytes: from the pool, of a wrong length, not hex, or the fuzzer's.
fn key_value(u: &mut Unstructured, len: usize) -> AResult<Value> {
    Ok(match u.int_in_range(0..=9u8)? {
        6 => Value::String(key(u.int_in_range(0..=3)?, u.int_in_range(0..=40)?)),
        7 => {
            let mut k = key(u.int_in_range(0..=3)?, len.max(8));
            k.replace_range(0..2, "zz");
            Value::String(k)
        }
        8 => Value::String(u.arbitrary()?),
        9 => any_value(u, 1)?,
        _ => Value::String(key(u.int_in_range(0..=5)?, len)),
    })
}

/// The keys of an `[[sa]]` table.
fn sa_table(u: &mut Unstructured, update: bool) -> AResult<Map<String, Value>> {
    let mut m = Map::new();
    if !update || rarely(u, 8)? {
        m.insert("name".into(), pick_str(u, &SA_NAMES)?);
    }
    m.insert(
        "direction".into(),
        pick_str(u, &["out", "in", "out", "in", "both"])?,
    );
    m.insert(
        "spi".into(),
        if rarely(u, 8)? {
            any_value(u, 0)?
        } else {
            json!(*u.choose(&SPIS)?)
        },
    );
    let (suite, enc_len, auth_len) = *u.choose(&SUITES)?;
    if !rarely(u, 16)? {
        m.insert("suite".into(), Value::String(suite.into()));
    }
    if suite == "sha256" || rarely(u, 16)? {
        m.insert("protocol".into(), pick_str(u, &["ah", "esp"])?);
    }
    if enc_len > 0 || rarely(u, 16)? {
        m.insert("enc_key".into(), key_value(u, enc_len)?);
    }
    if auth_len > 0 || rarely(u, 16)? {
        m.insert("auth_key".into(), key_value(u, auth_len)?);
    }
    if rarely(u, 6)? {
        m.insert("mode".into(), pick_str(u, &["transport", "tunnel"])?);
    }
    if !rarely(u, 10)? {
        m.insert("local".into(), pick_str(u, &LOCALS)?);
        m.insert("remote".into(), pick_str(u, &REMOTES)?);
    }
    // Up to two of the rarer keys (none once the data is used up), now and then one that is not a key of an SA.
    let rare = u.int_in_range(0..=5u8)?.saturating_sub(3);
    for _ in 0..rare {
        let k = if rarely(u, 10)? {
            *u.choose(&["first_seq", "nonsense"])?
        } else {
            *u.choose(&[
                "esn",
                "replay_window",
                "encap",
                "local_port",
                "remote_port",
                "tfc_pad_to",
                "lifetime",
            ])?
        };
        let v = match k {
            "esn" => Value::Bool(u.arbitrary()?),
            "encap" => pick_str(u, &["udp", "none"])?,
            "lifetime" => {
                let f =
                    *u.choose(&["soft_seconds", "hard_seconds", "soft_packets", "hard_bytes"])?;
                let mut l = Map::new();
                l.insert(f.into(), json!(u.int_in_range(0..=100i64)?));
                Value::Object(l)
            }
            _ if rarely(u, 6)? => any_value(u, 1)?,
            _ => json!(u.int_in_range(-1..=70000i64)?),
        };
        m.insert(k.into(), v);
    }
    Ok(m)
}

/// The keys of a `[[policy]]` table.
fn policy_table(u: &mut Unstructured) -> AResult<Map<String, Value>> {
    let mut m = Map::new();
    if !rarely(u, 16)? {
        m.insert("name".into(), pick_str(u, &POLICY_NAMES)?);
    }
    m.insert(
        "direction".into(),
        pick_str(u, &["out", "in", "out", "in", "fwd"])?,
    );
    m.insert("src".into(), pick_str(u, &NETS)?);
    m.insert("dst".into(), pick_str(u, &NETS)?);
    let action = pick_str(u, &["protect", "protect", "discard", "bypass"])?;
    if action == "protect" || rarely(u, 8)? {
        let n = if rarely(u, 8)? {
            u.int_in_range(0..=5)?
        } else {
            1
        };
        let mut sas = Vec::new();
        for _ in 0..n {
            sas.push(pick_str(u, &SA_NAMES)?);
        }
        m.insert("sas".into(), Value::Array(sas));
    }
    m.insert("action".into(), action);
    let rare = u.int_in_range(0..=5u8)?.saturating_sub(3);
    for _ in 0..rare {
        let k = *u.choose(&["proto", "src_ports", "dst_ports", "protocol", "nonsense"])?;
        let v = match k {
            "proto" => pick_str(u, &["udp", "tcp", "icmp", "sctp", "253"])?,
            "src_ports" | "dst_ports" => pick_str(u, &["5000", "5000-5010", "0-65535", "9-1"])?,
            "protocol" => pick_str(u, &["ipsec", "psp"])?,
            _ => any_value(u, 1)?,
        };
        m.insert(k.into(), v);
    }
    Ok(m)
}

/// One request built from the fuzzer's choices.
fn request(u: &mut Unstructured) -> AResult<String> {
    let name = |u: &mut Unstructured, pool: &[&str]| -> AResult<Value> { pick_str(u, pool) };
    let v = match u.int_in_range(0..=12u8)? {
        0..=3 => json!({ "request": "sa-add", "sa": sa_table(u, false)? }),
        4 | 5 => {
            json!({ "request": "sa-update", "name": name(u, &SA_NAMES)?, "sa": sa_table(u, true)? })
        }
        6 => json!({ "request": "sa-del", "name": name(u, &SA_NAMES)? }),
        7 | 8 => {
            let mut r = json!({ "request": "policy-add", "policy": policy_table(u)? });
            if rarely(u, 3)? {
                r["position"] = json!(u.int_in_range(0..=4u8)?);
            }
            r
        }
        9 => json!({ "request": "policy-del", "name": name(u, &POLICY_NAMES)? }),
        10 => json!({ "request": *u.choose(&["sa-list", "policy-list", "events"])? }),
        11 => {
            // A request object with a field of the wrong kind, or one too many.
            let mut r =
                json!({ "request": *u.choose(&["sa-add", "sa-update", "policy-add", "sa-del"])? });
            r[u.choose(&["sa", "policy", "name", "position", "extra"])?
                .to_string()] = any_value(u, 2)?;
            r
        }
        _ => return u.arbitrary::<String>(),
    };
    Ok(v.to_string())
}

fuzz_target!(|data: &[u8]| {
    let (dir, text) = setup();
    let _ = std::fs::remove_dir_all(dir);
    // The file parsed once (TOML was a fifth of each input's time), a copy per input.
    static PARSED: OnceLock<Config> = OnceLock::new();
    let mut cfg = PARSED
        .get_or_init(|| Config::parse(text).expect("the file"))
        .clone();
    // As `netveil up --fresh-keys`: the directory is new for every input, and so are the keys.
    cfg.interface.state_dir.fresh_keys = true;
    let sh = Arc::new(Shared::new(cfg).expect("the engine"));
    let ctl = IpControl(sh);
    check_snapshot(&ctl.0);
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        // As the control socket reads a request: one line, text.
        for line in rest.split(|&b| b == b'\n') {
            if let Ok(line) = std::str::from_utf8(line) {
                one(&ctl, line);
            }
        }
    } else {
        let mut u = Unstructured::new(rest);
        while !u.is_empty() {
            match request(&mut u) {
                Ok(line) => one(&ctl, &line),
                Err(_) => break,
            }
        }
    }
});
