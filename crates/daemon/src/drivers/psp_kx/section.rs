//! PSP's key exchange in the registry: an attached driver of the IP engine that reads its `[psp]` section.

use super::driver::start_driver;
use super::tls::{tls, Tls};
use crate::engines::ip::config::PspConfig;
use crate::runtime::sa_port::SaPort;
use crate::Result;
use std::sync::Arc;

/// PSP's key exchange as an attached driver of the IP engine: it reads the engine's `[psp]` section (see
/// [`crate::runtime::registry::AttachedDriver`]).
pub struct PspKx;

impl PspKx {
    /// The `[psp]` section of `section` (`None`: another engine's sections, or no `[psp]`).
    fn psp(section: &dyn crate::runtime::registry::Section) -> Option<(&PspConfig, u32)> {
        let c = section
            .as_any()
            .downcast_ref::<crate::engines::ip::config::Config>()?;
        Some((c.psp.as_ref()?, c.interface.socket_mark()))
    }
}

impl crate::runtime::registry::AttachedDriver for PspKx {
    fn name(&self) -> &'static str {
        "psp-kx"
    }

    fn check(&self, section: &dyn crate::runtime::registry::Section) -> Result<()> {
        // The certificates and key are read and checked too.
        match Self::psp(section) {
            Some((p, _)) => tls(p).map(drop),
            None => Ok(()),
        }
    }

    fn prepare(
        &self,
        section: &dyn crate::runtime::registry::Section,
    ) -> Result<Option<Box<dyn crate::runtime::registry::DriverConfig>>> {
        let Some((cfg, mark)) = Self::psp(section) else {
            return Ok(None);
        };
        let tls = tls(cfg)?;
        Ok(Some(Box::new(PspDriverConfig {
            cfg: cfg.clone(),
            tls,
            mark,
        })))
    }
}

/// PSP's key exchange as the registry starts it: `[psp]`, its TLS certificates and key (read and checked before
/// the IP engine was prepared) and the daemon's socket mark.
pub struct PspDriverConfig {
    pub cfg: PspConfig,
    pub tls: Tls,
    pub mark: u32,
}

impl crate::runtime::registry::DriverConfig for PspDriverConfig {
    fn start(
        self: Box<Self>,
        port: Arc<dyn SaPort>,
    ) -> Result<Box<dyn crate::runtime::engine::Engine>> {
        let PspDriverConfig { cfg, tls, mark } = *self;
        Ok(Box::new(start_driver(cfg, tls, port, mark)?))
    }
}
