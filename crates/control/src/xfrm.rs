//! The client half of `netveil sa`, `netveil policy` and `netveil monitor`: change and watch a running daemon's SAs
//! and policies, the way `ip xfrm state`, `ip xfrm policy` and `ip xfrm monitor` do for the kernel's.
//!
//! An SA or policy is given with the keys of the configuration file's `[[sa]]` or `[[policy]]` table, as
//! `KEY=VALUE` arguments, from a file (a TOML table), or both (arguments win): [`table`] makes the request's table
//! of them. `enc_key=-` and `auth_key=-` read the key from standard input, so that it does not show in the process
//! list.

use crate::status::{render_policies, render_sas};
use crate::{request, Error, Event, Request, Result};
use serde_json::{Map, Value};
use std::path::Path;
use std::time::Duration;

/// Keys whose values are always strings (a key of hex digits or an address is never read as a number).
const STRING_KEYS: [&str; 13] = [
    "name",
    "direction",
    "protocol",
    "mode",
    "local",
    "remote",
    "suite",
    "enc_key",
    "auth_key",
    "encap",
    "src",
    "dst",
    "action",
];

/// The table of an SA or policy: the keys of the file `from` (a TOML table; `-`: standard input), then the
/// `KEY=VALUE` arguments `pairs`. Errors say which argument or file and why, never a value.
pub fn table(pairs: &[String], from: Option<&Path>) -> Result<Map<String, Value>> {
    let usage = |m: String| Error::Usage(m);
    let mut t = Map::new();
    if let Some(f) = from {
        let text = if f.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin())
        } else {
            std::fs::read_to_string(f)
        }
        .map_err(|e| usage(format!("cannot read {}: {e}", f.display())))?;
        let v: toml::Table = toml::from_str(&text)
            .map_err(|e| usage(format!("{}: {}", f.display(), e.message().trim_end())))?;
        match serde_json::to_value(v) {
            Ok(Value::Object(m)) => t = m,
            _ => return Err(usage(format!("{}: not a table", f.display()))),
        }
    }
    let mut stdin_lines = None;
    for (n, pair) in pairs.iter().enumerate() {
        // Errors say which argument and why, never its value (it may be a key typed without `enc_key=`).
        let (k, v) = pair.split_once('=').ok_or_else(|| {
            usage(format!(
                "argument {} is not KEY=VALUE (value not shown)",
                n + 1
            ))
        })?;
        let value = if v == "-" && (k == "enc_key" || k == "auth_key") {
            let lines = stdin_lines.get_or_insert_with(|| {
                std::io::read_to_string(std::io::stdin())
                    .unwrap_or_default()
                    .lines()
                    .map(|l| l.trim().to_string())
                    .collect::<Vec<_>>()
                    .into_iter()
            });
            Value::String(
                lines
                    .next()
                    .ok_or_else(|| usage(format!("{k}: no line left on standard input")))?,
            )
        } else if STRING_KEYS.contains(&k) {
            Value::String(v.to_string())
        } else if k == "sas" {
            Value::Array(
                v.split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| Value::String(s.trim().to_string()))
                    .collect(),
            )
        } else {
            // A TOML value (0x1001, true, 1000, "x"); anything else is a string.
            toml::from_str::<toml::Table>(&format!("v = {v}"))
                .ok()
                .and_then(|mut t| t.remove("v"))
                .and_then(|v| serde_json::to_value(v).ok())
                .unwrap_or_else(|| Value::String(v.to_string()))
        };
        // `lifetime.soft_bytes=...` goes into the `lifetime` table.
        match k.split_once('.') {
            Some((outer, inner)) => {
                let e = t
                    .entry(outer.to_string())
                    .or_insert_with(|| Value::Object(Map::new()));
                match e {
                    Value::Object(m) => {
                        m.insert(inner.to_string(), value);
                    }
                    _ => return Err(usage(format!("{outer} is not a table"))),
                }
            }
            None => {
                t.insert(k.to_string(), value);
            }
        }
    }
    Ok(t)
}

/// `netveil sa list`: the SAs in force, as JSON or as a table.
pub fn list_sas(socket: &Path, json: bool) -> Result<()> {
    list(socket, Request::SaList, "sas", json, render_sas)
}

/// `netveil policy list`: the policies in force, as JSON or as a table.
pub fn list_policies(socket: &Path, json: bool) -> Result<()> {
    list(
        socket,
        Request::PolicyList,
        "policies",
        json,
        render_policies,
    )
}

/// A list request: its answer's `member`, as JSON or as the table `render` makes.
fn list<T: serde::de::DeserializeOwned + serde::Serialize>(
    socket: &Path,
    req: Request,
    member: &str,
    json: bool,
    render: fn(&[T]) -> String,
) -> Result<()> {
    let mut v = request(socket, &req)?;
    let items: Vec<T> = serde_json::from_value(v[member].take()).map_err(|e| Error::BadAnswer {
        request: member.to_string(),
        cause: e.to_string(),
    })?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&items).unwrap_or_default()
        );
    } else {
        print!("{}", render(&items));
    }
    Ok(())
}

/// `netveil monitor`: the daemon's events, as they come (polled every 200 ms), one JSON object per line with
/// `json`; with `once`, the events kept so far, then it returns.
pub fn monitor(socket: &Path, json: bool, once: bool) -> Result<()> {
    let mut since = 0;
    loop {
        let mut v = request(socket, &Request::Events { since })?;
        let events: Vec<Event> =
            serde_json::from_value(v["events"].take()).map_err(|e| Error::BadAnswer {
                request: "events".into(),
                cause: e.to_string(),
            })?;
        for e in events {
            since = since.max(e.id);
            if json {
                println!("{}", serde_json::to_string(&e).unwrap_or_default());
            } else {
                println!("{e}");
            }
        }
        if once {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A malformed argument or `--from` file is refused without its value (a key typed without `enc_key=`, or a
    /// bare word in the file).
    #[test]
    fn errors_never_show_a_value() {
        let table = |pairs: &[&str], from: Option<PathBuf>| {
            let pairs: Vec<String> = pairs.iter().map(|s| s.to_string()).collect();
            table(&pairs, from.as_deref())
        };
        let e = table(&["name=a", "SECRETVALUE123"], None).unwrap_err();
        assert!(e.to_string().contains("argument 2"), "{e}");
        assert!(!e.to_string().contains("SECRETVALUE"), "{e}");
        let f = std::env::temp_dir().join(format!("netveil-xfrm-{}.toml", std::process::id()));
        for text in [
            "enc_key = SECRETVALUE123\n",
            "enc_key = \"SECRETVALUE123\nx",
            "enc_key = 0xSECRETVALUE123\n",
            "SECRETVALUE123\n",
        ] {
            std::fs::write(&f, text).unwrap();
            let e = table(&[], Some(f.clone())).unwrap_err();
            assert!(!e.to_string().contains("SECRETVALUE"), "{text:?}: {e}");
        }
        let _ = std::fs::remove_file(&f);
    }
}
