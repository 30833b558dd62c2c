//! `netveil sa`, `netveil policy` and `netveil monitor`: their arguments. The requests' tables, the lists and the
//! events are made and read in `netveil_control::xfrm`.

use clap::{Args, Subcommand};
use netveil_control::xfrm::{list_policies, list_sas, table};
use netveil_control::{request, Request, Result};
use std::path::PathBuf;

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

pub fn sa(cmd: SaCmd) -> Result<()> {
    match cmd {
        SaCmd::Add { target, spec } => {
            request(
                &target.socket(),
                &Request::SaAdd {
                    sa: table(&spec.pairs, spec.from.as_deref())?,
                },
            )?;
        }
        SaCmd::Update { name, target, spec } => {
            request(
                &target.socket(),
                &Request::SaUpdate {
                    name,
                    sa: table(&spec.pairs, spec.from.as_deref())?,
                },
            )?;
        }
        SaCmd::Del { name, target } => {
            request(&target.socket(), &Request::SaDel { name })?;
        }
        SaCmd::List { target, json } => list_sas(&target.socket(), json)?,
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
                    policy: table(&spec.pairs, spec.from.as_deref())?,
                    position,
                },
            )?;
        }
        PolicyCmd::Del { name, target } => {
            request(&target.socket(), &Request::PolicyDel { name })?;
        }
        PolicyCmd::List { target, json } => list_policies(&target.socket(), json)?,
    }
    Ok(())
}

/// `netveil monitor`: the daemon's events, as they come.
pub fn monitor(a: MonitorArgs) -> Result<()> {
    netveil_control::xfrm::monitor(&a.target.socket(), a.json, a.once)
}
