//! `netveil demo`'s arguments.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// ESP suite (strongSwan proposal name), e.g. aes128gcm16, aes256-sha256, chacha20poly1305.
    #[arg(long, default_value = "aes128gcm16")]
    pub suite: String,
    /// Use PSP instead of ESP, with this version (aes-gcm-128, aes-gcm-256, aes-gmac-128, aes-gmac-256); keys
    /// are exchanged over TLS 1.3 with certificates from `netveil keygen`.
    #[arg(long, value_name = "VERSION", num_args = 0..=1, default_missing_value = "aes-gcm-128")]
    pub psp: Option<String>,
    /// Protect a wired LAN (a switch, three hosts, an eavesdropper and an ARP-spoofing attacker) with l2sec
    /// instead, with this suite (aes128gcm, aes256gcm, chacha20poly1305, or the thesis' blowfish-cbc-sha1, ...).
    #[arg(long, value_name = "SUITE", num_args = 0..=1, default_missing_value = "aes128gcm", conflicts_with = "psp")]
    pub l2sec: Option<String>,
    /// Protect two hosts' own traffic with PILSC instead (rule file, option 130 on the wire, a tamper attempt
    /// against each mode).
    #[arg(long, conflicts_with_all = ["psp", "l2sec"])]
    pub pilsc: bool,
    /// Megabytes to transfer over TCP [default: 50, with --l2sec 32, with --pilsc 8].
    #[arg(long)]
    pub megabytes: Option<u64>,
    /// The netveil binary to run the daemons with (default: this executable).
    #[arg(long)]
    pub netveil: Option<PathBuf>,
    /// Keep the namespaces and files after the demo (for exploring; delete with `ip netns del`).
    #[arg(long)]
    pub keep: bool,
}
