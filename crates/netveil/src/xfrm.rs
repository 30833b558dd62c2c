//! `netveil sa`, `netveil policy` and `netveil monitor`: change and watch a running daemon's SAs and policies, the
//! way `ip xfrm state`, `ip xfrm policy` and `ip xfrm monitor` do for the kernel's.
//!
//! An SA or policy is given with the keys of the configuration file's `[[sa]]` or `[[policy]]` table, as
//! `KEY=VALUE` arguments, from a file (`--from FILE`, a TOML table), or both (arguments win). `enc_key=-` and
//! `auth_key=-` read the key from standard input, so that it does not show in the process list.

use clap::{Args, Subcommand};
use netveil_control::status::{render_policies, render_sas};
use netveil_control::{request, Error, Event, Request, Result};
use serde_json::{Map, Value};
use std::path::PathBuf;
use std::time::Duration;

/// Which daemon: its interface (control socket /run/netveil/NAME.sock) or its control socket.
#[derive(Args, Clone)]
pub struct Target {
    /// Interface name of the daemon (its control socket is /run/netveil/NAME.sock).
    #[arg(short, long, default_value = "nv0")]
    interface: String,
    /// Control socket path (overrides --interface).
    #[arg(long)]
    socket: Option<PathBuf>,
}

impl Target {
    fn socket(&self) -> PathBuf {
        crate::socket_path(&self.interface, self.socket.clone())
    }
}

/// What to change: `KEY=VALUE` arguments and/or a TOML file.
#[derive(Args)]
pub struct Spec {
    /// Keys of the table, e.g. `spi=0x1001 suite=aes128gcm16 enc_key=-` (`-`: read the value from stdin).
    #[arg(value_name = "KEY=VALUE")]
    pairs: Vec<String>,
    /// A TOML file with the table's keys (as inside `[[sa]]` or `[[policy]]`); `-` for stdin.
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
}

#[derive(Subcommand)]
pub enum SaCmd {
    /// Add an SA (the keys of a `[[sa]]` table; `name` required).
    Add {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        spec: Spec,
    },
    /// Replace the SA NAME (same direction; new SPI and keys). A replaced inbound SA keeps taking packets under
    /// its old SPI for 5 seconds, so the peer may switch a little later.
    Update {
        name: String,
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        spec: Spec,
    },
    /// Remove the SA NAME.
    Del {
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// List the SAs in force.
    List {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum PolicyCmd {
    /// Add a policy (the keys of a `[[policy]]` table; `name` required; `sas=a,b`). Its SAs may come later:
    /// until then its traffic is dropped and reported (`acquire` in `netveil monitor`).
    Add {
        /// Where in the list (0: first, decides before all others); default: last.
        #[arg(long)]
        position: Option<usize>,
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        spec: Spec,
    },
    /// Remove the policy NAME.
    Del {
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// List the policies in force, in order.
    List {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
pub struct MonitorArgs {
    #[command(flatten)]
    target: Target,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
    /// Print the events kept so far and exit (instead of following).
    #[arg(long)]
    once: bool,
}

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

/// The table of `spec`: the file's keys, then the arguments.
fn table(spec: &Spec) -> Result<Map<String, Value>> {
    let usage = |m: String| Error::Usage(m);
    let mut t = Map::new();
    if let Some(f) = &spec.from {
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
    for (n, pair) in spec.pairs.iter().enumerate() {
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

pub fn sa(cmd: SaCmd) -> Result<()> {
    match cmd {
        SaCmd::Add { target, spec } => {
            request(&target.socket(), &Request::SaAdd { sa: table(&spec)? })?;
        }
        SaCmd::Update { name, target, spec } => {
            request(
                &target.socket(),
                &Request::SaUpdate {
                    name,
                    sa: table(&spec)?,
                },
            )?;
        }
        SaCmd::Del { name, target } => {
            request(&target.socket(), &Request::SaDel { name })?;
        }
        SaCmd::List { target, json } => list(&target, Request::SaList, "sas", json, render_sas)?,
    }
    Ok(())
}

pub fn policy(cmd: PolicyCmd) -> Result<()> {
    match cmd {
        PolicyCmd::Add {
            position,
            target,
            spec,
        } => {
            request(
                &target.socket(),
                &Request::PolicyAdd {
                    policy: table(&spec)?,
                    position,
                },
            )?;
        }
        PolicyCmd::Del { name, target } => {
            request(&target.socket(), &Request::PolicyDel { name })?;
        }
        PolicyCmd::List { target, json } => list(
            &target,
            Request::PolicyList,
            "policies",
            json,
            render_policies,
        )?,
    }
    Ok(())
}

/// A list request: its answer's `member`, as JSON or as the table `render` makes.
fn list<T: serde::de::DeserializeOwned + serde::Serialize>(
    target: &Target,
    req: Request,
    member: &str,
    json: bool,
    render: fn(&[T]) -> String,
) -> Result<()> {
    let mut v = request(&target.socket(), &req)?;
    let items: Vec<T> = serde_json::from_value(v[member].take())
        .map_err(|e| Error::Other(format!("bad answer from the daemon: {e}")))?;
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

/// `netveil monitor`: the daemon's events, as they come (polled every 200 ms).
pub fn monitor(a: MonitorArgs) -> Result<()> {
    let socket = a.target.socket();
    let mut since = 0;
    loop {
        let mut v = request(&socket, &Request::Events { since })?;
        let events: Vec<Event> = serde_json::from_value(v["events"].take())
            .map_err(|e| Error::Other(format!("bad answer from the daemon: {e}")))?;
        for e in events {
            since = since.max(e.id);
            if a.json {
                println!("{}", serde_json::to_string(&e).unwrap_or_default());
            } else {
                println!("{e}");
            }
        }
        if a.once {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A malformed argument or `--from` file is refused without its value (a key typed without `enc_key=`, or a
    /// bare word in the file).
    #[test]
    fn errors_never_show_a_value() {
        let spec = |pairs: &[&str], from: Option<PathBuf>| Spec {
            pairs: pairs.iter().map(|s| s.to_string()).collect(),
            from,
        };
        let e = table(&spec(&["name=a", "SECRETVALUE123"], None)).unwrap_err();
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
            let e = table(&spec(&[], Some(f.clone()))).unwrap_err();
            assert!(!e.to_string().contains("SECRETVALUE"), "{text:?}: {e}");
        }
        let _ = std::fs::remove_file(&f);
    }
}
