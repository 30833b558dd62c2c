//! The IKE driver's part of the status (`engines.ike` in `netveil status --json`), its rendering as `swanctl
//! --list-sas` shows it, and the clients of `netveil initiate`, `netveil terminate` and the IKE half of `netveil
//! keys --wireshark`.
//!
//! The JSON form is stable (README, "Control socket"): the member names follow those of strongSwan's vici
//! `list-sas` answer, in snake case (`unique_id`, `initiator_spi`, `child_sas`, `bytes_in`, `rekey_time`, ...);
//! members are added, never renamed or removed. Times are whole seconds: `established` and `install_time` since,
//! `rekey_time` and `life_time` until.

use crate::client::ask_for;
use crate::error::{Error, Result};
use crate::request::Request;

pub use crate::request::DEFAULT_WAIT;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

/// The IKE driver's status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IkeStatus {
    pub ike_sas: Vec<IkeSa>,
}

/// One IKE SA.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IkeSa {
    /// The connection's name.
    pub name: String,
    /// The IKE SA's number in this daemon (`netveil terminate --ike-id N`), never reused.
    pub unique_id: u64,
    /// `IKEv2`.
    pub version: String,
    /// `CONNECTING`, `ESTABLISHED`, `DELETING` or `REKEYED`.
    pub state: String,
    /// This side initiated it.
    pub initiator: bool,
    /// 16 hex digits each.
    pub initiator_spi: String,
    pub responder_spi: String,
    pub local_host: String,
    pub local_port: u16,
    /// As configured (`%any` accepts whatever the peer authenticated as).
    pub local_id: String,
    pub remote_host: String,
    pub remote_port: u16,
    pub remote_id: String,
    pub nat_local: bool,
    pub nat_remote: bool,
    /// The selected IKE proposal in strongSwan's syntax (empty before IKE_SA_INIT completes).
    pub proposal: String,
    /// Seconds since it was created.
    pub established: u64,
    /// Seconds until it is rekeyed (`null`: not established, or no rekey planned).
    pub rekey_time: Option<u64>,
    pub child_sas: Vec<IkeChild>,
}

/// One CHILD_SA.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IkeChild {
    pub name: String,
    /// The instance number its SAs and policies are named by (`ike-N-in`, `ike-N-out`); `null`: not installed.
    pub unique_id: Option<u64>,
    /// `INSTALLED` or `NOT_INSTALLED` (negotiated, but the IP engine refused it: see the log).
    pub state: String,
    /// `TUNNEL` or `TRANSPORT`.
    pub mode: String,
    /// `ESP`.
    pub protocol: String,
    /// ESP in UDP.
    pub encap: bool,
    /// 8 hex digits each.
    pub spi_in: String,
    pub spi_out: String,
    /// The selected ESP proposal in strongSwan's syntax.
    pub proposal: String,
    /// From the IP engine's counters of its SAs.
    pub bytes_in: u64,
    pub packets_in: u64,
    pub bytes_out: u64,
    pub packets_out: u64,
    /// Seconds since it was installed, until its rekey, until it expires.
    pub install_time: u64,
    pub rekey_time: u64,
    pub life_time: u64,
    pub local_ts: Vec<String>,
    pub remote_ts: Vec<String>,
    /// The names of its SAs in the IP engine's part (`sas`).
    pub sa_in: Option<String>,
    pub sa_out: Option<String>,
}

/// The IKE SAs as `swanctl --list-sas` shows them.
pub fn render_ike_status(s: &IkeStatus) -> String {
    let mut o = String::new();
    if s.ike_sas.is_empty() {
        o.push_str("ike: no IKE SAs\n");
    }
    for sa in &s.ike_sas {
        let mark = |ours: bool| if ours { "*" } else { "" };
        o.push_str(&format!(
            "{}: #{}, {}, {}, {}_i{} {}_r{}\n",
            sa.name,
            sa.unique_id,
            sa.state,
            sa.version,
            sa.initiator_spi,
            mark(sa.initiator),
            sa.responder_spi,
            mark(!sa.initiator)
        ));
        let nat = |b: bool| if b { " [NAT]" } else { "" };
        o.push_str(&format!(
            "  local  '{}' @ {}[{}]{}\n  remote '{}' @ {}[{}]{}\n",
            sa.local_id,
            sa.local_host,
            sa.local_port,
            nat(sa.nat_local),
            sa.remote_id,
            sa.remote_host,
            sa.remote_port,
            nat(sa.nat_remote)
        ));
        if !sa.proposal.is_empty() {
            o.push_str(&format!("  {}\n", sa.proposal));
        }
        o.push_str(&format!("  established {}s ago", sa.established));
        match sa.rekey_time {
            Some(r) => o.push_str(&format!(", rekeying in {r}s\n")),
            None => o.push('\n'),
        }
        for c in &sa.child_sas {
            o.push_str(&format!(
                "  {}: #{}, {}, {}, {}{}:{}\n",
                c.name,
                c.unique_id.map_or("-".to_string(), |n| n.to_string()),
                c.state,
                c.mode,
                c.protocol,
                if c.encap { " in UDP" } else { "" },
                c.proposal
            ));
            o.push_str(&format!(
                "    installed {}s ago, rekeying in {}s, expires in {}s\n",
                c.install_time, c.rekey_time, c.life_time
            ));
            o.push_str(&format!(
                "    in  {}, {:>10} bytes, {:>7} packets\n    out {}, {:>10} bytes, {:>7} packets\n",
                c.spi_in, c.bytes_in, c.packets_in, c.spi_out, c.bytes_out, c.packets_out
            ));
            o.push_str(&format!(
                "    local  {}\n    remote {}\n",
                c.local_ts.join(" "),
                c.remote_ts.join(" ")
            ));
        }
    }
    o
}

/// A request that waits for its outcome: answered within `wait` (and a margin for the daemon's own answer).
fn waited(socket: &Path, req: &Request, wait: Duration) -> Result<String> {
    let v = ask_for(socket, &req.line(), wait + Duration::from_secs(5))?;
    if let Some(e) = v["error"].as_str() {
        // A refusal (unknown name, nothing to do) is the user's to fix: exit 2; a failed negotiation or no
        // outcome in time: exit 1.
        return Err(if v["timeout"] == true || v["failed"] == true {
            Error::Failed {
                request: req.line(),
                reason: e.to_string(),
            }
        } else {
            Error::Usage(e.to_string())
        });
    }
    Ok(v["message"].as_str().unwrap_or("done").to_string())
}

/// `netveil initiate CONNECTION [--child NAME]`: starts the connection and waits until its CHILD_SA is
/// established (or the negotiation failed: the error says why, as the log does), at most `wait`.
pub fn initiate(
    socket: &Path,
    connection: &str,
    child: Option<&str>,
    wait: Duration,
) -> Result<()> {
    let req = Request::IkeInitiate {
        connection: connection.into(),
        child: child.map(String::from),
        timeout_ms: wait.as_millis().min(u128::from(u64::MAX)) as u64,
    };
    println!("{}", waited(socket, &req, wait)?);
    Ok(())
}

/// What `netveil terminate` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminateTarget {
    Connection(String),
    IkeId(u64),
    Child(String),
}

/// `netveil terminate CONNECTION | --ike-id N | --child NAME`: deletes the IKE SAs (with their children) or the
/// CHILD_SAs and waits until they are gone, at most `wait`.
pub fn terminate(socket: &Path, target: TerminateTarget, wait: Duration) -> Result<()> {
    let (connection, ike_id, child) = match target {
        TerminateTarget::Connection(c) => (Some(c), None, None),
        TerminateTarget::IkeId(i) => (None, Some(i), None),
        TerminateTarget::Child(c) => (None, None, Some(c)),
    };
    let req = Request::IkeTerminate {
        connection,
        ike_id,
        child,
        timeout_ms: wait.as_millis().min(u128::from(u64::MAX)) as u64,
    };
    println!("{}", waited(socket, &req, wait)?);
    Ok(())
}

/// The file `netveil keys --wireshark` writes the IKE SAs' keys to.
pub const IKEV2_TABLE: &str = "ikev2_decryption_table";
/// Lines kept in the table at most (the oldest go first).
pub const MAX_TABLE_LINES: usize = 4096;

/// The `ikev2_decryption_table` after adding `new` lines to the `old` file's: an old line for the same SPIs is
/// replaced, the others are kept (the keys of IKE SAs rekeyed or deleted since still decrypt an older capture), at
/// most [`MAX_TABLE_LINES`], the oldest dropped first.
pub fn merge_table(old: &str, new: &[impl AsRef<str>]) -> zeroize::Zeroizing<String> {
    let spis = |l: &str| l.splitn(3, ',').take(2).collect::<Vec<_>>().join(",");
    let fresh: Vec<String> = new.iter().map(|l| spis(l.as_ref())).collect();
    let mut lines: Vec<&str> = old
        .lines()
        .filter(|l| !l.trim().is_empty() && !fresh.contains(&spis(l)))
        .collect();
    lines.extend(new.iter().map(|l| l.as_ref()));
    let skip = lines.len().saturating_sub(MAX_TABLE_LINES);
    let mut out = zeroize::Zeroizing::new(String::new());
    for l in &lines[skip..] {
        out.push_str(l);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> IkeStatus {
        IkeStatus {
            ike_sas: vec![IkeSa {
                name: "host".into(),
                unique_id: 3,
                version: "IKEv2".into(),
                state: "ESTABLISHED".into(),
                initiator: true,
                initiator_spi: "6a07171ce9185c57".into(),
                responder_spi: "e41b74885d5ae38e".into(),
                local_host: "192.0.2.1".into(),
                local_port: 4500,
                local_id: "a.lab.test".into(),
                remote_host: "192.0.2.2".into(),
                remote_port: 4500,
                remote_id: "b.lab.test".into(),
                nat_local: false,
                nat_remote: false,
                proposal: "aes128gcm16-prfsha256-x25519".into(),
                established: 12,
                rekey_time: Some(3500),
                child_sas: vec![IkeChild {
                    name: "net".into(),
                    unique_id: Some(1),
                    state: "INSTALLED".into(),
                    mode: "TUNNEL".into(),
                    protocol: "ESP".into(),
                    encap: true,
                    spi_in: "c1234567".into(),
                    spi_out: "c7654321".into(),
                    proposal: "aes128gcm16".into(),
                    bytes_in: 840,
                    packets_in: 10,
                    bytes_out: 420,
                    packets_out: 5,
                    install_time: 12,
                    rekey_time: 3000,
                    life_time: 3948,
                    local_ts: vec!["10.1.0.0/16".into()],
                    remote_ts: vec!["10.2.0.0/16".into(), "10.3.0.0/16[6/80]".into()],
                    sa_in: Some("ike-1-in".into()),
                    sa_out: Some("ike-1-out".into()),
                }],
            }],
        }
    }

    /// The text form shows what `swanctl --list-sas` shows, from these values.
    #[test]
    fn text_is_like_swanctl() {
        let t = render_ike_status(&sample());
        for want in [
            "host: #3, ESTABLISHED, IKEv2, 6a07171ce9185c57_i* e41b74885d5ae38e_r\n",
            "  local  'a.lab.test' @ 192.0.2.1[4500]\n",
            "  remote 'b.lab.test' @ 192.0.2.2[4500]\n",
            "  aes128gcm16-prfsha256-x25519\n",
            "  established 12s ago, rekeying in 3500s\n",
            "  net: #1, INSTALLED, TUNNEL, ESP in UDP:aes128gcm16\n",
            "    installed 12s ago, rekeying in 3000s, expires in 3948s\n",
            "    in  c1234567,        840 bytes,      10 packets\n",
            "    out c7654321,        420 bytes,       5 packets\n",
            "    local  10.1.0.0/16\n",
            "    remote 10.2.0.0/16 10.3.0.0/16[6/80]\n",
        ] {
            assert!(t.contains(want), "{want:?} in\n{t}");
        }
        assert_eq!(
            render_ike_status(&IkeStatus::default()),
            "ike: no IKE SAs\n"
        );
    }

    /// The JSON member names are the documented ones (the README's list), and it reads back.
    #[test]
    fn json_names_are_stable() {
        let v = serde_json::to_value(sample()).unwrap();
        let sa = &v["ike_sas"][0];
        let keys: Vec<&str> = sa.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "child_sas",
                "established",
                "initiator",
                "initiator_spi",
                "local_host",
                "local_id",
                "local_port",
                "name",
                "nat_local",
                "nat_remote",
                "proposal",
                "rekey_time",
                "remote_host",
                "remote_id",
                "remote_port",
                "responder_spi",
                "state",
                "unique_id",
                "version"
            ]
        );
        let c: Vec<&str> = sa["child_sas"][0]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(
            c,
            [
                "bytes_in",
                "bytes_out",
                "encap",
                "install_time",
                "life_time",
                "local_ts",
                "mode",
                "name",
                "packets_in",
                "packets_out",
                "proposal",
                "protocol",
                "rekey_time",
                "remote_ts",
                "sa_in",
                "sa_out",
                "spi_in",
                "spi_out",
                "state",
                "unique_id"
            ]
        );
        assert_eq!(serde_json::from_value::<IkeStatus>(v).unwrap(), sample());
    }

    /// A line for the same SPIs is replaced, others are kept, the newest last.
    #[test]
    fn the_table_keeps_older_sas() {
        let old = "aa,bb,1,2,\"X\",3,4,\"Y\"\ncc,dd,5,6,\"X\",7,8,\"Y\"\n";
        let new = vec![
            "cc,dd,9,9,\"X\",9,9,\"Y\"".to_string(),
            "ee,ff,0,0,\"X\",0,0,\"Y\"".to_string(),
        ];
        assert_eq!(
            merge_table(old, &new).as_str(),
            "aa,bb,1,2,\"X\",3,4,\"Y\"\ncc,dd,9,9,\"X\",9,9,\"Y\"\nee,ff,0,0,\"X\",0,0,\"Y\"\n"
        );
        let many: Vec<String> = (0..MAX_TABLE_LINES + 5)
            .map(|i| format!("{i:016x},0,k"))
            .collect();
        let t = merge_table("", &many);
        assert_eq!(t.lines().count(), MAX_TABLE_LINES);
        assert!(t.starts_with(&format!("{:016x},", 5)));
    }
}
