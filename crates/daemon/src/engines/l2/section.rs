//! The L2 engine in the registry ([`crate::runtime::registry`]): its section (`[l2sec]`), `check`, `prepare` and `start`,
//! calling [`crate::engines::l2`]'s own functions.

use crate::engines::l2::{L2Config, L2_SECTIONS};
use crate::runtime::config::ConfigError;
use crate::runtime::engine::Undo;
use crate::runtime::registry::{Checked, EngineSection, Section, Started, UpOptions};
use crate::Result;
use std::path::Path;

/// The L2 engine: l2sec on a LAN port (TAP + AF_PACKET).
pub struct L2Section;

impl EngineSection for L2Section {
    fn name(&self) -> &'static str {
        "l2sec"
    }

    fn keys(&self) -> &'static [&'static str] {
        &L2_SECTIONS
    }

    fn describe(&self) -> &'static str {
        "[l2sec]"
    }

    fn parse(
        &self,
        mut table: toml::Table,
        base: &Path,
    ) -> std::result::Result<Box<dyn Section>, Vec<ConfigError>> {
        let l2 = table
            .remove("l2sec")
            .unwrap_or_else(|| toml::Value::Table(Default::default()));
        Ok(Box::new(
            L2Config::from_section(l2, base).map_err(|e| vec![e])?,
        ))
    }

    fn holds_keys(&self, table: &toml::Table) -> bool {
        // The group secret written in the file (not group_secret_file).
        table
            .get("l2sec")
            .is_some_and(|l| l.get("group_secret").is_some())
    }

    fn down_unsupported(&self) -> String {
        "netveil down is for [interface] configurations: an l2sec daemon gives its port back when it stops \
         (SIGTERM), and a killed one when `netveil up` runs again"
            .into()
    }
}

impl Section for L2Config {
    fn check(&self) -> Result<Checked> {
        crate::engines::l2::check(self)?;
        Ok(Checked {
            summary: format!(
                "l2sec on {}, {} suites, {} peer keys",
                self.interface,
                self.suites.len(),
                self.peers.len()
            ),
            notes: Vec::new(),
        })
    }

    fn prepare(
        self: Box<Self>,
        _opts: &UpOptions,
    ) -> Result<Box<dyn crate::runtime::registry::Prepared>> {
        Ok(Box::new(crate::engines::l2::prepare(*self)?))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl crate::runtime::registry::Prepared for crate::engines::l2::Prepared {
    fn control_socket(&self) -> &Path {
        crate::engines::l2::Prepared::control_socket(self)
    }

    fn control_group(&self) -> Option<u32> {
        crate::engines::l2::Prepared::control_group(self)
    }

    fn start(self: Box<Self>, undo: &mut Undo, control: &Path) -> Result<Started> {
        let e = crate::engines::l2::start(*self, undo, control)?;
        Ok(Started {
            control: e.control(),
            engine: Box::new(e),
            sa_port: None,
        })
    }
}
