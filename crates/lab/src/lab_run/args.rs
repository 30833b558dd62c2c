//! `netveil lab`'s arguments and its experiments.

use std::path::PathBuf;

/// The experiments, in the order they run.
pub const EXPERIMENTS: [&str; 12] = [
    "ping-rtt", "overhead", "loss", "delay", "http", "smtp", "mtu", "pilsc", "iperf", "scp",
    "voip", "ops",
];

#[derive(clap::Args, Debug)]
pub struct LabArgs {
    /// A small matrix (for CI: under a few minutes).
    #[arg(long)]
    pub quick: bool,
    /// Experiments to run, comma-separated (default: all): ping-rtt, overhead, loss, delay, http, smtp, mtu, pilsc,
    /// iperf, scp, voip, ops.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Where the report goes (report.json, report.csv, report.md, index.html and one SVG per figure).
    #[arg(long)]
    pub out: PathBuf,
    /// The netveil binary whose daemons run (default: this one).
    #[arg(long)]
    pub netveil_bin: Option<PathBuf>,
    /// An earlier run's report.json: after this run, what changed, cell by cell (printed, and DIR/compare.md).
    #[arg(long)]
    pub compare: Option<PathBuf>,
    /// Install what the experiments need and is missing first (Debian packages with apt-get; wireguard-go with
    /// `go install` when Go is there). Without it, a missing required tool stops the run, naming its package.
    #[arg(long)]
    pub install: bool,
}
