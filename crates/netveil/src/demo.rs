//! `netveil demo`: a two-host lab in network namespaces.

#[derive(clap::Args, Debug)]
pub struct DemoArgs {}

pub fn run(_a: DemoArgs) -> crate::Result<()> {
    Err(crate::Error::Other("demo: not built yet".into()))
}
