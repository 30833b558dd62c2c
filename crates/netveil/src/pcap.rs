//! Offline tools over pcap files (`netveil pcap ...`).

#[derive(clap::Subcommand, Debug)]
pub enum PcapCmd {}

pub fn run(cmd: PcapCmd) -> crate::Result<()> {
    match cmd {}
}
