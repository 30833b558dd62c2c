//! The IP engine in the registry ([`crate::runtime::registry`]): its sections (`[interface]`, `[[sa]]`, `[[policy]]`,
//! `[psp]`), `check`, `prepare`, `start` (its control answers: [`crate::engines::ip::control::IpControl`]) and `down`.

use crate::engines::ip::config::{Config, ConfigError, IP_SECTIONS};
use crate::runtime::engine::{remove_fwmark_rules, Undo};
use crate::runtime::registry::{Checked, EngineSection, Section, Started, UpOptions};
use crate::Result;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The IP engine: ESP, AH and PSP over a TUN.
pub struct IpSection;

impl EngineSection for IpSection {
    fn name(&self) -> &'static str {
        "ip"
    }

    fn keys(&self) -> &'static [&'static str] {
        &IP_SECTIONS
    }

    fn describe(&self) -> &'static str {
        "[interface] (ESP, AH, PSP)"
    }

    fn parse(
        &self,
        table: toml::Table,
        _base: &Path,
    ) -> std::result::Result<Box<dyn Section>, Vec<ConfigError>> {
        Ok(Box::new(Config::from_sections(table)?))
    }

    fn holds_keys(&self, table: &toml::Table) -> bool {
        // Static SAs write their keys (enc_key, auth_key).
        table.contains_key("sa")
    }

    fn offers_sa_port(&self) -> bool {
        // `IpEngine::sa_port`: PSP's key-exchange driver and the IKE driver install SAs through it.
        true
    }
}

impl Section for Config {
    fn check(&self) -> Result<Checked> {
        let notes = super::preflight_check(self)?.into_iter().collect();
        Ok(Checked {
            summary: format!(
                "{} SAs, {} policies{}",
                self.sas.len(),
                self.policies.len(),
                if self.psp.is_some() { ", PSP" } else { "" }
            ),
            notes,
        })
    }

    fn prepare(
        mut self: Box<Self>,
        opts: &UpOptions,
    ) -> Result<Box<dyn crate::runtime::registry::Prepared>> {
        self.interface.state_dir.fresh_keys = opts.fresh_keys;
        Ok(Box::new(super::prepare(*self)?))
    }

    fn down(&self) -> Option<Result<()>> {
        Some(down(self))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl crate::runtime::registry::Prepared for super::Prepared {
    fn control_socket(&self) -> &Path {
        super::Prepared::control_socket(self)
    }

    fn control_group(&self) -> Option<u32> {
        super::Prepared::control_group(self)
    }

    fn start(self: Box<Self>, undo: &mut Undo, control: &Path) -> Result<Started> {
        let e = super::start(*self, undo, control)?;
        Ok(Started {
            control: Arc::new(crate::engines::ip::control::IpControl(e.shared())),
            sa_port: Some(e.sa_port()),
            engine: Box::new(e),
        })
    }
}

/// `netveil down` of the IP sections: stops a running daemon of this configuration (it removes its setup), then
/// removes the fail-closed filters and whatever a killed instance left (its routing rules, a stale control
/// socket): covered traffic is no longer blocked.
fn down(config: &Config) -> Result<()> {
    let iface = &config.interface;
    let sock = Path::new(&iface.control_socket);
    let mut stopped = false;
    if let Some(t) = crate::runtime::engine::stop_running(sock)? {
        // Its undo runs after the socket is gone: wait for the TUN to go too.
        let dev = Path::new("/sys/class/net").join(&iface.name);
        while dev.exists() && t.elapsed() < Duration::from_secs(15) {
            std::thread::sleep(Duration::from_millis(50));
        }
        stopped = true;
    }
    let table = iface.nft_table();
    let had_table = crate::runtime::engine::nft_table_exists(&table);
    if had_table {
        // The daemon may be removing it now (its undo runs after its socket and TUN are gone).
        crate::runtime::engine::nft_remove(&table)?;
    }
    if let Some(m) = iface.fwmark {
        remove_fwmark_rules(&m.to_string());
    }
    // The policies a killed instance had added at runtime: no longer restored (their block is lifted too).
    let _ = std::fs::remove_file(
        iface
            .state_dir
            .path
            .join(crate::runtime::state::policies_file(&iface.name)),
    );
    let _ = std::fs::remove_file(sock);
    eprintln!(
        "netveil: {} down{}",
        iface.name,
        match (stopped, had_table) {
            (true, _) => " (daemon stopped; nothing blocked any more)",
            (false, true) => " (covered traffic no longer blocked)",
            (false, false) => " (nothing was running or blocked)",
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::engines::ip::config::Config;
    use crate::parse;
    use std::path::Path;

    /// `control_group` is resolved to its group id when the file is read; an unknown or malformed name is an error
    /// naming the key.
    #[test]
    fn the_control_group_is_a_group_of_this_host() {
        let ip = |g: &str| {
            parse(
                &format!("[interface]\ncontrol_group = \"{g}\"\n"),
                Path::new("."),
            )
            .map(|s| s.get::<Config>("ip").unwrap().interface.control_group)
        };
        assert_eq!(ip("root").ok(), Some(Some(0)));
        assert_eq!(ip("nogroup").ok(), Some(Some(65534)));
        for bad in ["netveil-no-such-group", "-x", "a b", ""] {
            let e = ip(bad).err().unwrap();
            assert_eq!(e.key, "interface.control_group", "{bad}");
        }
        let none = parse("[interface]\n", Path::new(".")).ok().unwrap();
        assert_eq!(
            none.get::<Config>("ip").unwrap().interface.control_group,
            None
        );
    }
}
