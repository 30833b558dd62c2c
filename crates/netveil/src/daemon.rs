//! `netveil up`.
use std::path::Path;

pub fn up(_config: &Path) -> crate::Result<()> {
    Err(crate::Error::Other("up: not built yet".into()))
}
