//! The `netveil` command.

#![forbid(unsafe_code)]

// layers: keygen, labtools, pcap, xfrm
mod keygen;
mod labtools;
mod pcap;
mod xfrm;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "netveil",
    version,
    about = "User-space packet security for Linux (IPsec ESP/AH and PSP over TUN, l2sec on Ethernet LANs)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Bring up the data plane described by a configuration file (runs in the foreground).
    Up {
        /// The configuration file (netveil.toml).
        #[arg(short, long)]
        config: PathBuf,
        /// More log lines: -v debug, -vv trace (overrides the file's `log_level`).
        #[arg(short, long, action = clap::ArgAction::Count, conflicts_with = "quiet")]
        verbose: u8,
        /// Only warnings and errors in the log (overrides the file's `log_level`).
        #[arg(short, long)]
        quiet: bool,
        /// Confirm that outbound SAs whose keys have no sequence mark in the state directory use new keys. Needed
        /// once for a state directory without its netveil-state record (a new one, or one whose contents were
        /// lost, e.g. a tmpfs after a reboot), which this records; never put it in a service's command line.
        #[arg(long)]
        fresh_keys: bool,
    },
    /// Stop the daemon of a configuration (if it runs) and remove what keeps covered traffic blocked: after a
    /// crash, a kill or a stop, netveil drops the traffic its policies cover until this command (fail closed).
    Down {
        /// The configuration file (netveil.toml) the daemon was started with.
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Check a configuration file without applying anything (also what `up` would fail on here: the TUN name in
    /// use, local addresses not on this host, an unwritable state directory).
    Check {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Show SAs, policies and counters of a running daemon.
    Status {
        /// Interface name of the daemon (its control socket is /run/netveil/NAME.sock).
        #[arg(short, long, default_value = "nv0")]
        interface: String,
        /// Control socket path (overrides --interface).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Start an IKE connection of a running daemon and wait until its CHILD_SA is up (as `swanctl --initiate`).
    Initiate {
        /// The connection's name (`[[ike.connection]] name`).
        connection: String,
        /// The child to start (default: the connection's first).
        #[arg(long)]
        child: Option<String>,
        /// Seconds to wait for the outcome (at most 300).
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=300))]
        timeout: u64,
        #[arg(short, long, default_value = "nv0")]
        interface: String,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Delete IKE SAs (with their children) or CHILD_SAs of a running daemon and wait until they are gone (as
    /// `swanctl --terminate`).
    Terminate {
        /// Every IKE SA of this connection.
        #[arg(required_unless_present_any = ["ike_id", "child"], conflicts_with_all = ["ike_id", "child"])]
        connection: Option<String>,
        /// One IKE SA by its unique id (`netveil status`: `name: #N`).
        #[arg(long, conflicts_with = "child")]
        ike_id: Option<u64>,
        /// Every CHILD_SA of this name (their IKE SAs stay).
        #[arg(long)]
        child: Option<String>,
        /// Seconds to wait for the outcome (at most 300).
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=300))]
        timeout: u64,
        #[arg(short, long, default_value = "nv0")]
        interface: String,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Export the running SAs' keys.
    Keys {
        /// Write Wireshark's ESP SA table (esp_sa) into this directory (a Wireshark/tshark profile or config dir),
        /// and with IKE its IKEv2 decryption table (ikev2_decryption_table, strongSwan's save-keys format; the
        /// lines of IKE SAs since gone are kept).
        #[arg(long, value_name = "DIR")]
        wireshark: PathBuf,
        #[arg(short, long, default_value = "nv0")]
        interface: String,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Make a running daemon read its rule files again (PILSC) and put them in force without a restart (as SIGHUP).
    Reload {
        #[arg(short, long, default_value = "pilsc0")]
        interface: String,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Rotate the PSP master keys of a running daemon (and re-associate with the peer).
    Rotate {
        #[arg(short, long, default_value = "nv0")]
        interface: String,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Add, replace, remove and list the SAs of a running daemon (as `ip xfrm state`).
    Sa {
        #[command(subcommand)]
        cmd: xfrm::SaCmd,
    },
    /// Add, remove and list the policies of a running daemon (as `ip xfrm policy`).
    Policy {
        #[command(subcommand)]
        cmd: xfrm::PolicyCmd,
    },
    /// Follow a running daemon's events: SAs and policies changed, lifetimes reached, sequence space nearly spent,
    /// traffic for a policy without SAs (acquire) (as `ip xfrm monitor`).
    Monitor(xfrm::MonitorArgs),
    /// Make keys, certificate requests and certificates. Without a subcommand: a private key and a self-signed
    /// certificate for the PSP key exchange (NAME.key, NAME.crt); with --ed25519 an l2sec signing key (NAME.l2key,
    /// and its public key printed for the peers' [[l2sec.peer]]); with --type a private key only (NAME.key, as
    /// `pki --gen`). The subcommands csr, ca and issue make an IKE PKI as `pki --req`, `--self --ca` and `--issue`.
    Keygen(keygen::KeygenArgs),
    /// Offline packet tools on pcap files.
    Pcap {
        #[command(subcommand)]
        cmd: pcap::PcapCmd,
    },
    /// Measure throughput and ping round-trip time through netveil, in clear and through wireguard-go, in a lab of
    /// network namespaces.
    Bench(netveil_lab::bench::BenchArgs),
    /// Lab tool: flood an interface with packets aimed at a tunnel endpoint (what `netveil bench --flood` uses).
    #[command(hide = true)]
    Flood(labtools::FloodArgs),
    /// Lab tool: hold every packet of a netfilter queue for a fixed time, then accept it (what `netveil lab`'s
    /// `delay` experiment adds to a link; this kernel has no netem).
    #[command(hide = true)]
    Delay(labtools::DelayArgs),
    /// Run a lab in network namespaces: bring up ESP (or PSP, or l2sec on a wired LAN), ping, transfer data, show
    /// what an eavesdropper sees (and, for l2sec, an ARP-spoofing attack failing).
    Demo(netveil_lab::demo::DemoArgs),
    /// The overhead lab: the studies' experiments (ping round-trip time by payload size, bytes added per packet)
    /// for netveil's protocols and wireguard-go, with the papers' numbers beside; writes report.json, .csv and .md.
    Lab(netveil_lab::lab_run::LabArgs),
}

/// A failed command: the daemon's, the lab's or a lab tool's, the control client's or the PKI tool's error. Bad input
/// exits with code 2.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Daemon(#[from] netveil_daemon::Error),
    #[error(transparent)]
    Pki(#[from] netveil_pki::Error),
    #[error(transparent)]
    Lab(#[from] netveil_lab::Error),
    #[error(transparent)]
    Labtools(#[from] netveil_labtools::Error),
    #[error(transparent)]
    Control(#[from] netveil_control::Error),
}

impl Error {
    fn exit_code(&self) -> u8 {
        match self {
            Error::Daemon(e) => e.exit_code(),
            Error::Pki(e) => e.exit_code(),
            Error::Lab(e) => e.exit_code(),
            Error::Labtools(e) => e.exit_code(),
            Error::Control(netveil_control::Error::Usage(_)) => 2,
            Error::Control(_) => 1,
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse().cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("netveil: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn run(cmd: Cmd) -> Result<(), Error> {
    match cmd {
        Cmd::Up {
            config,
            verbose,
            quiet,
            fresh_keys,
        } => netveil_daemon::up(&config, verbose, quiet, fresh_keys)?,
        Cmd::Down { config } => netveil_daemon::down(&config)?,
        Cmd::Check { config } => println!("{}", netveil_daemon::check(&config)?),
        Cmd::Status {
            interface,
            socket,
            json,
        } => netveil_control::status(&socket_path(&interface, socket), json)?,
        Cmd::Keys {
            wireshark,
            interface,
            socket,
        } => netveil_control::keys_wireshark(&socket_path(&interface, socket), &wireshark)?,
        Cmd::Initiate {
            connection,
            child,
            timeout,
            interface,
            socket,
        } => netveil_control::ike::initiate(
            &socket_path(&interface, socket),
            &connection,
            child.as_deref(),
            std::time::Duration::from_secs(timeout),
        )?,
        Cmd::Terminate {
            connection,
            ike_id,
            child,
            timeout,
            interface,
            socket,
        } => {
            use netveil_control::ike::TerminateTarget as T;
            let target = match (connection, ike_id, child) {
                (Some(c), _, _) => T::Connection(c),
                (_, Some(i), _) => T::IkeId(i),
                (_, _, Some(c)) => T::Child(c),
                _ => {
                    return Err(netveil_control::Error::Usage(
                        "terminate: name a connection, --ike-id N or --child NAME".into(),
                    )
                    .into())
                }
            };
            netveil_control::ike::terminate(
                &socket_path(&interface, socket),
                target,
                std::time::Duration::from_secs(timeout),
            )?
        }
        Cmd::Reload { interface, socket } => {
            println!(
                "{}",
                netveil_control::reload(&socket_path(&interface, socket))?
            )
        }
        Cmd::Rotate { interface, socket } => {
            netveil_control::rotate(&socket_path(&interface, socket))?
        }
        Cmd::Keygen(a) => keygen::run(a)?,
        Cmd::Sa { cmd } => xfrm::sa(cmd)?,
        Cmd::Policy { cmd } => xfrm::policy(cmd)?,
        Cmd::Monitor(a) => xfrm::monitor(a)?,
        Cmd::Pcap { cmd } => pcap::run(cmd)?,
        Cmd::Bench(a) => netveil_lab::bench::run(a)?,
        Cmd::Demo(a) => netveil_lab::demo::run(a)?,
        Cmd::Lab(a) => {
            netveil_lab::lab_run::run(a)?;
        }
        Cmd::Flood(a) => labtools::flood(a)?,
        Cmd::Delay(a) => labtools::delay(a)?,
    }
    Ok(())
}

fn socket_path(interface: &str, socket: Option<PathBuf>) -> PathBuf {
    socket
        .unwrap_or_else(|| PathBuf::from(format!("{}/{interface}.sock", netveil_control::RUN_DIR)))
}
