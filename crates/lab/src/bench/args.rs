//! The arguments of `netveil bench`.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// ESP suites to measure, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    pub suites: Vec<String>,
    /// Encapsulations: raw (IP protocol 50), udp (RFC 3948, port 4500) or both.
    #[arg(long, default_value = "both")]
    pub encap: String,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 4)]
    pub seconds: u32,
    /// Parallel TCP streams (iperf3 -P).
    #[arg(long, default_value_t = 1)]
    pub streams: u32,
    /// PSP versions to measure, comma-separated (aes-gcm-128, aes-gcm-256, aes-gmac-128, aes-gmac-256), or
    /// "none".
    #[arg(long, value_delimiter = ',', default_value = "aes-gcm-128,aes-gcm-256")]
    pub psp: Vec<String>,
    /// Packets for the in-process per-packet time split of PSP (0: skip it).
    #[arg(long, default_value_t = 200_000)]
    pub split_packets: usize,
    /// l2sec suites to measure on the wired-LAN lab (a Linux bridge between two hosts), against the plain
    /// bridge, comma-separated (e.g. aes128gcm, chacha20poly1305, blowfish-cbc-sha1), or "none".
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "aes128gcm,blowfish-cbc-sha1"
    )]
    pub l2sec: Vec<String>,
    /// Skip the wireguard-go comparison even if wireguard-go and wg are installed.
    #[arg(long)]
    pub no_peers: bool,
    /// Measure goodput under floods instead (ESP-in-UDP and PSP; see `bench::flood`): a baseline, the closed-port
    /// control, and random data, unknown SPIs, bad ICVs and replays from a non-peer and from the spoofed peer.
    #[arg(long)]
    pub flood: bool,
    /// Packets per second of each flood; 0 (the default): line rate, i.e. the closed-port control runs unpaced,
    /// as fast as this machine sends it, and every other flood is paced to the rate it reached (equal rates,
    /// comparable rows).
    #[arg(long, default_value_t = 0)]
    pub flood_pps: u64,
    /// The floods to run (closed is the control): closed, random, unknown-spi, bad-icv (sequence numbers far
    /// ahead: a blind forger), bad-icv-aimed (just above the window: a forger who sees the wire), replay; random,
    /// unknown-spi and bad-icv from a non-peer and from the spoofed peer, the others as their names say.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "closed,random,unknown-spi,bad-icv,bad-icv-aimed,replay"
    )]
    pub flood_kinds: Vec<String>,
    /// Rounds of every measurement (each with its own baseline); the table shows medians.
    #[arg(long, default_value_t = 3)]
    pub flood_rounds: u32,
    /// The tunnels to flood: esp (ESP-in-UDP aes128gcm16), psp (aes-gcm-128).
    #[arg(long, value_delimiter = ',', default_value = "esp,psp")]
    pub flood_tunnels: Vec<String>,
    /// Pings per payload size (56 and 1000 bytes) and row, 5 ms apart, for the round-trip times (median, p99);
    /// 0: no pings.
    #[arg(long, default_value_t = 300)]
    pub pings: u32,
    /// The `netveil` binary that runs the daemons of the netveil rows (default: this program).
    #[arg(long, value_name = "PATH")]
    pub daemon_bin: Option<PathBuf>,
    /// Also measure every netveil row (ESP, PSP, l2sec) with the daemons of this `netveil` binary, right after the
    /// same row with --daemon-bin, labelled "(base)": a before/after table from one run.
    #[arg(long, value_name = "PATH")]
    pub compare: Option<PathBuf>,
    /// Rounds of every tunnel and l2sec row (each round with its own clear, wireguard-go and plain-bridge rows,
    /// and with --compare the two binaries taking turns at going first); the tables show the median Gbit/s and
    /// the round-trip times of all rounds pooled [default: 1].
    #[arg(long)]
    pub rounds: Option<u32>,
    /// Measure IKEv2 instead (see `bench::ike`): setup latency, handshakes per second and memory per IKE SA +
    /// child, netveil and strongSwan side by side, per suite (psk-x25519, psk-modp2048, ecdsa-p256).
    #[arg(long)]
    pub ike: bool,
    /// Measure PILSC instead (see `bench::pilsc`): per-packet classification time (flow key, policy lookup naming
    /// rule and key) at 10, 160, 1,600 and 100,000 rules, beside the linear scan of the same rules.
    #[arg(long)]
    pub pilsc: bool,
    /// Short runs for CI (with --ike: 20 sequential setups, 200 concurrent ones; with --pilsc: a few thousand
    /// lookups, one run).
    #[arg(long)]
    pub quick: bool,
    /// IKE suites to measure, comma-separated: psk-x25519, psk-modp2048, ecdsa-p256 (default: all).
    #[arg(long, value_delimiter = ',')]
    pub ike_suites: Vec<String>,
    /// Sequential IKE SA + child setups per row for the latency [default: 200; --quick: 20].
    #[arg(long)]
    pub ike_setups: Option<usize>,
    /// Concurrent setups per row for handshakes/s and memory [default: 1000; --quick: 200].
    #[arg(long)]
    pub ike_handshakes: Option<usize>,
    /// Setups in flight at once in the handshakes/s runs.
    #[arg(long, default_value_t = 16)]
    pub ike_window: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}
