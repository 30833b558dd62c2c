//! The requests a client sends ([`Request`]): one line, a bare word or a JSON object; parsed and written here.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::time::Duration;

/// How long `initiate` and `terminate` wait by default (swanctl waits until done; a stuck peer is given up on
/// after the retransmissions, some 2 minutes with the default timers).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// A request to the daemon: one line, either a bare word (`status`, `keys`, `rotate`, `stop`) or a JSON object
/// whose `request` member names it (`{"request":"sa-del","name":"a-to-b"}`). The JSON form is stable: see the
/// README's "Control socket" section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "kebab-case")]
pub enum Request {
    /// Every engine's status in one object (`netveil status --json`).
    Status,
    /// The running ESP SAs' keys (`netveil keys`).
    Keys,
    /// Rotate the PSP master keys (`netveil rotate`).
    Rotate,
    /// Stop, removing the fail-closed filters (`netveil down`).
    Stop,
    /// Read the rule files again and put them in force without a restart (`netveil reload`, SIGHUP).
    Reload,
    /// Add an SA: the keys of a `[[sa]]` table of the configuration file.
    SaAdd { sa: Map<String, Value> },
    /// Replace the SA `name` (same direction; a new SPI and keys).
    SaUpdate {
        name: String,
        sa: Map<String, Value>,
    },
    /// Remove the SA `name`.
    SaDel { name: String },
    /// The SAs in force, as in `status`.
    SaList,
    /// Add a policy (the keys of a `[[policy]]` table) at `position` (0: first; default: last).
    PolicyAdd {
        policy: Map<String, Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        position: Option<usize>,
    },
    /// Remove the policy `name`.
    PolicyDel { name: String },
    /// The policies in force, in order.
    PolicyList,
    /// The events after `since` (`netveil monitor`).
    Events {
        #[serde(default)]
        since: u64,
    },
    /// Start an IKE connection (its first child, or `child`) and answer once the CHILD_SA is up or the
    /// negotiation failed, at most `timeout_ms` later (`netveil initiate`).
    IkeInitiate {
        connection: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        child: Option<String>,
        #[serde(default = "default_wait_ms")]
        timeout_ms: u64,
    },
    /// Delete the IKE SAs of a connection, one IKE SA, or the CHILD_SAs of a name (exactly one of the three), and
    /// answer once they are gone, at most `timeout_ms` later (`netveil terminate`).
    IkeTerminate {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        connection: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ike_id: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        child: Option<String>,
        #[serde(default = "default_wait_ms")]
        timeout_ms: u64,
    },
    /// The IKE SAs' keys as lines of Wireshark's `ikev2_decryption_table` (`netveil keys --wireshark`).
    IkeKeys,
}

fn default_wait_ms() -> u64 {
    DEFAULT_WAIT.as_millis() as u64
}

impl Request {
    /// Parses a request line. The error never repeats the line (it may hold keys).
    pub fn parse(line: &str) -> std::result::Result<Request, String> {
        let line = line.trim();
        match line {
            "status" => return Ok(Request::Status),
            "keys" => return Ok(Request::Keys),
            "rotate" => return Ok(Request::Rotate),
            "stop" => return Ok(Request::Stop),
            "reload" => return Ok(Request::Reload),
            _ => {}
        }
        if !line.starts_with('{') {
            return Err(
                "unknown request (known: status, keys, rotate, stop, reload, or a JSON request object)"
                    .into(),
            );
        }
        serde_json::from_str(line).map_err(|e| {
            // serde's messages may quote what was sent: only "missing field `x`" (our own names) is passed on.
            let m = e.to_string();
            match m.split(" at line").next() {
                Some(f) if f.starts_with("missing field") => format!("bad request: {f}"),
                _ if m.contains("unknown variant") => "unknown request".into(),
                _ => "bad request: not a request object of the README's form".into(),
            }
        })
    }

    /// The request as one line (JSON).
    pub fn line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}
