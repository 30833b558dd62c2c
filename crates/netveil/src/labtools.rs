//! `netveil flood` and `netveil delay`, the lab's hidden tools: their arguments. The tools are
//! `netveil_labtools::flood` and `netveil_labtools::delay`.

use netveil_labtools::{delay, flood};
use std::net::Ipv4Addr;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Closed,
    Random,
    UnknownSpi,
    BadIcv,
    Replay,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// ESP in UDP (RFC 3948).
    Esp,
    Psp,
}

#[derive(clap::Args, Debug)]
pub struct FloodArgs {
    /// The interface to send on.
    #[arg(long)]
    pub interface: String,
    /// The destination MAC address (the receiver's interface).
    #[arg(long)]
    pub dst_mac: String,
    #[arg(long)]
    pub src: Ipv4Addr,
    #[arg(long)]
    pub dst: Ipv4Addr,
    #[arg(long, value_enum)]
    pub kind: Kind,
    /// The protocol whose port and header the flood uses.
    #[arg(long, value_enum, default_value = "esp")]
    pub proto: Proto,
    /// The UDP port (default: 4500 for ESP, 1000 for PSP; `closed`: 9).
    #[arg(long)]
    pub port: Option<u16>,
    /// The UDP source port (default: 4500 for ESP, which is where the peer's ESP-in-UDP comes from; for PSP the
    /// flow-hash ports 40000-40999).
    #[arg(long)]
    pub sport: Option<u16>,
    /// bad-icv: the receiver's SPI.
    #[arg(long, default_value_t = 0)]
    pub spi: u32,
    /// bad-icv: the first sequence number (ESP) or IV (PSP); the default lies far ahead of any window (a blind
    /// forger); just above the receiver's window it is what a forger who sees the wire sends.
    #[arg(long, default_value_t = 1 << 31)]
    pub counter_start: u64,
    /// bad-icv: how much the counter grows per packet.
    #[arg(long, default_value_t = 1)]
    pub counter_step: u64,
    /// replay: a pcap (Ethernet) whose UDP datagrams to the port are sent again.
    #[arg(long)]
    pub pcap: Option<std::path::PathBuf>,
    /// Packets per second (0: as fast as possible).
    #[arg(long, default_value_t = 600_000)]
    pub pps: u64,
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Stop once this many packets are sent (0: no limit; `--seconds` bounds the time either way).
    #[arg(long, default_value_t = 0)]
    pub count: u64,
    /// UDP payload bytes of generated packets.
    #[arg(long, default_value_t = 100)]
    pub size: usize,
}

impl From<Kind> for flood::Kind {
    fn from(k: Kind) -> flood::Kind {
        match k {
            Kind::Closed => flood::Kind::Closed,
            Kind::Random => flood::Kind::Random,
            Kind::UnknownSpi => flood::Kind::UnknownSpi,
            Kind::BadIcv => flood::Kind::BadIcv,
            Kind::Replay => flood::Kind::Replay,
        }
    }
}

impl From<Proto> for flood::Proto {
    fn from(p: Proto) -> flood::Proto {
        match p {
            Proto::Esp => flood::Proto::Esp,
            Proto::Psp => flood::Proto::Psp,
        }
    }
}

pub fn flood(a: FloodArgs) -> netveil_labtools::Result<()> {
    flood::run(&flood::Flood {
        interface: a.interface,
        dst_mac: a.dst_mac,
        src: a.src,
        dst: a.dst,
        kind: a.kind.into(),
        proto: a.proto.into(),
        port: a.port,
        sport: a.sport,
        spi: a.spi,
        counter_start: a.counter_start,
        counter_step: a.counter_step,
        pcap: a.pcap,
        pps: a.pps,
        seconds: a.seconds,
        count: a.count,
        size: a.size,
    })
}

#[derive(clap::Args, Debug)]
pub struct DelayArgs {
    /// The netfilter queue to serve (iptables `-j NFQUEUE --queue-num N`).
    #[arg(long)]
    pub queue: u16,
    /// How long each packet is held, in milliseconds (fractions allowed).
    #[arg(long)]
    pub ms: f64,
    /// The most packets held at once (the kernel's queue length; beyond it, packets are dropped).
    #[arg(long, default_value_t = 65536)]
    pub max_held: u32,
}

pub fn delay(a: DelayArgs) -> netveil_labtools::Result<()> {
    delay::run(delay::Delay {
        queue: a.queue,
        ms: a.ms,
        max_held: a.max_held,
    })
}
