//! The PILSC engine's entry in the registry: its section, `netveil check`, `down` and `prepare`.

use super::config::{literal_keys, mode_name, PilscConfig, SECTIONS};
use super::marks::{mark_file, MARK_BLOCK};
use super::rules::{iptables, remove_rules};
use super::setup::PilscPrepared;
use crate::runtime::config::ConfigError;
use crate::runtime::registry::{Checked, EngineSection, Prepared, Section, UpOptions};
use crate::runtime::state::{StateDir, StateLocation};
use crate::{Error, Result};
use netveil_pilsc::packet::Mode;
use netveil_pilsc::table::Table;
use std::path::Path;

/// The PILSC engine in the registry.
pub struct PilscSection;

impl EngineSection for PilscSection {
    fn name(&self) -> &'static str {
        "pilsc"
    }

    fn keys(&self) -> &'static [&'static str] {
        &SECTIONS
    }

    fn describe(&self) -> &'static str {
        "[pilsc]"
    }

    fn parse(
        &self,
        mut table: toml::Table,
        base: &Path,
    ) -> std::result::Result<Box<dyn Section>, Vec<ConfigError>> {
        let v = table
            .remove("pilsc")
            .unwrap_or_else(|| toml::Value::Table(Default::default()));
        Ok(Box::new(
            PilscConfig::from_section(v, base).map_err(|e| vec![e])?,
        ))
    }

    fn holds_keys(&self, table: &toml::Table) -> bool {
        // `[[pilsc.rule]]` tables that write a key themselves (errors are the parser's to report).
        let tables: Vec<toml::Table> = table
            .get("pilsc")
            .and_then(|p| p.get("rule"))
            .and_then(|r| r.as_array())
            .map(|a| a.iter().filter_map(|t| t.as_table().cloned()).collect())
            .unwrap_or_default();
        netveil_pilsc::rules::from_toml(&tables).is_ok_and(|f| literal_keys(&f) > 0)
    }
}

impl Section for PilscConfig {
    fn check(&self) -> Result<Checked> {
        iptables(self)?;
        StateDir::check(&self.state_location(false), "pilsc.state_dir")?;
        let protected = self
            .file
            .rules
            .iter()
            .filter(|r| r.protect.is_some())
            .count();
        let mut notes = self.warnings.clone();
        if self.mode == Mode::Confidential {
            notes.push(
                "pilsc.mode = \"confidential\": encryption only, no integrity (a flipped ciphertext bit flips the \
                 same plaintext bit)"
                    .to_string(),
            );
        }
        for d in &self.file.duplicates {
            notes.push(format!(
                "{}: rule {} ({} {}) says the same as rule {} ({} {}): dropped",
                self.source,
                d.number,
                self.source.unit(),
                d.line,
                d.same_as,
                self.source.unit(),
                d.same_as_line
            ));
        }
        Ok(Checked {
            summary: format!(
                "PILSC: {} rules ({protected} protected), {} mode",
                self.file.rules.len(),
                mode_name(self.mode)
            ),
            notes,
        })
    }

    fn prepare(self: Box<Self>, opts: &UpOptions) -> Result<Box<dyn Prepared>> {
        for w in &self.warnings {
            tracing::warn!("pilsc: {w}");
        }
        let ipt = iptables(&self)?;
        let dir = StateDir::open(&self.state_location(opts.fresh_keys), "pilsc.state_dir")?;
        // Each key's mark, and its first reservation made durable before anything is sealed.
        let mut marks: Vec<(String, u64)> = Vec::new();
        let mut errors: Vec<ConfigError> = Vec::new();
        let table = Table::build(
            &self.file,
            &self.keys,
            &self.settings(),
            |id, cipher, key| {
                let name = mark_file(cipher, key);
                match dir.read_mark(&name, "pilsc.state_dir", &format!("pilsc key {id:#06x}")) {
                    Ok(m) => {
                        let reserved = m.saturating_add(MARK_BLOCK);
                        marks.push((name, reserved));
                        (m + 1, reserved.saturating_add(1))
                    }
                    Err(e) => {
                        errors.push(e);
                        (1, 1)
                    }
                }
            },
        )
        .map_err(|e| Error::Config(self.source.error(&e)))?;
        if let Some(e) = errors.into_iter().next() {
            return Err(e.into());
        }
        for (name, reserved) in &marks {
            dir.write_u64(name, *reserved).map_err(Error::io(format!(
                "cannot write {name} in {}",
                dir.path().display()
            )))?;
        }
        let db = netveil_pilsc::policy::compile(&self.file, &table.rule_key);
        Ok(Box::new(PilscPrepared {
            cfg: *self,
            ipt,
            dir,
            table,
            db,
            marks,
            config: opts.config.clone(),
        }))
    }

    fn down(&self) -> Option<Result<()>> {
        Some(down(self))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl PilscConfig {
    fn state_location(&self, fresh_keys: bool) -> StateLocation {
        StateLocation {
            allow_volatile: self.allow_volatile_state,
            fresh_keys,
            ..StateLocation::new(&self.state_dir)
        }
    }
}

pub(super) fn down(cfg: &PilscConfig) -> Result<()> {
    crate::runtime::engine::stop_running(&cfg.control_socket)?;
    let ipt = iptables(cfg)?;
    remove_rules(&ipt, cfg);
    println!(
        "PILSC queue rules {} and {} removed: the host's traffic passes in clear",
        cfg.chains().0,
        cfg.chains().1
    );
    Ok(())
}
