//! `netveil bench`: throughput through netveil and in clear, measured in one run in a namespace lab.

#[derive(clap::Args, Debug)]
pub struct BenchArgs {}

pub fn run(_a: BenchArgs) -> crate::Result<()> {
    Err(crate::Error::Other("bench: not built yet".into()))
}
