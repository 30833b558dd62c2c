//! `netveil pcap`: its arguments. The tools are `netveil_lab::pcap_tools`; the ESP/AH ones take their SAs from a
//! `netveil.toml`, which the daemon's configuration reads.

use netveil_daemon::engines::ip::config::Config;
use netveil_lab::pcap_tools::{self as pt, Files, Op};
use std::path::PathBuf;

#[derive(clap::Subcommand, Debug)]
pub enum PcapCmd {
    /// Protect every IP packet of a capture with outbound SAs (ESP/AH, as configured) and write the result.
    EspEncrypt(XformArgs),
    /// Remove every ESP/AH layer of the packets of a capture with the configuration's inbound SAs and write the
    /// decapsulated packets.
    EspDecrypt(XformArgs),
    /// Protect every IP packet of a capture with PSP (configuration in the format of Google's reference
    /// psp_encrypt: master keys, SPI, mode, algorithm, crypt offsets, vc). The IV counter starts at 1.
    PspEncrypt(PspArgs),
    /// Remove the PSP encapsulation of every PSP packet (UDP port 1000) of a capture, verifying its ICV
    /// (configuration: the two master keys, as for Google's reference psp_decrypt).
    PspDecrypt(PspArgs),
}

#[derive(clap::Args, Debug)]
pub struct PspArgs {
    /// A reference-tool PSP configuration file.
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// The pcap file to read.
    #[arg(short, long, value_name = "IN.pcap")]
    pub input: PathBuf,
    /// The pcap file to write.
    #[arg(short, long, value_name = "OUT.pcap")]
    pub output: PathBuf,
    /// Succeed even if packets were dropped.
    #[arg(long)]
    pub allow_drops: bool,
}

#[derive(clap::Args, Debug)]
pub struct XformArgs {
    /// A netveil.toml: only its `[[sa]]` tables and interface.allow_null_null are used (a bare `[interface]` suffices).
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// An SA to apply (repeatable, innermost first). Encrypt: required, "out" SAs. Decrypt: optional, "in" SAs;
    /// if given, packets must have come through exactly these SAs.
    #[arg(long = "sa", value_name = "NAME")]
    pub sa: Vec<String>,
    /// The pcap file to read.
    #[arg(short, long, value_name = "IN.pcap")]
    pub input: PathBuf,
    /// The pcap file to write.
    #[arg(short, long, value_name = "OUT.pcap")]
    pub output: PathBuf,
    /// Succeed even if packets were dropped.
    #[arg(long)]
    pub allow_drops: bool,
    /// esp-encrypt: the first sequence number (required). Under one key a sequence number, and so the nonce, must
    /// never be used twice: give a number these keys have never sent with (a running daemon with the same keys
    /// continues from its mark in the state directory, so do not reuse a live configuration's keys here).
    #[arg(long, value_name = "N")]
    pub seq: Option<u64>,
}

pub fn run(cmd: PcapCmd) -> Result<(), crate::Error> {
    let (args, op) = match cmd {
        PcapCmd::EspEncrypt(a) => (a, Op::Encrypt),
        PcapCmd::EspDecrypt(a) => (a, Op::Decrypt),
        PcapCmd::PspEncrypt(a) => {
            return Ok(pt::psp(
                &a.config,
                Op::Encrypt,
                &files(a.input, a.output, a.allow_drops),
            )?)
        }
        PcapCmd::PspDecrypt(a) => {
            return Ok(pt::psp(
                &a.config,
                Op::Decrypt,
                &files(a.input, a.output, a.allow_drops),
            )?)
        }
    };
    // The configuration's SAs: the bundle chosen by name, its first sequence number set, the database built.
    let mut cfg = Config::load(&args.config).map_err(netveil_daemon::Error::from)?;
    let sas: Vec<_> = cfg
        .sas
        .iter()
        .map(|s| (s.name.as_str(), s.direction))
        .collect();
    let bundle = pt::select_sas(&sas, &args.sa, op)?;
    if let Some(n) = pt::first_seq(op, args.seq)? {
        for &i in &bundle {
            cfg.sas[i].first_seq = n;
        }
    }
    let (sad, at) = cfg.build_sad(0).map_err(netveil_daemon::Error::from)?;
    let files = files(args.input, args.output, args.allow_drops);
    Ok(pt::esp(&sad, &pt::typed(&at, &bundle), op, &files)?)
}

fn files(input: PathBuf, output: PathBuf, allow_drops: bool) -> Files {
    Files {
        input,
        output,
        allow_drops,
    }
}
