//! The IKE driver in the registry: the `[ike]` section, `netveil check`'s line, and the start: the traps
//! installed, the sockets opened, the loop on its own thread.

use super::{config, control, driver, endpoint, install, sockets};
use crate::runtime::config::ConfigError;
use crate::runtime::engine::{Engine, Undo};
use crate::runtime::registry::{Checked, DriverConfig, DriverSection};
use crate::runtime::sa_port::SaPort;
use crate::{Error, Result};
use netveil_ike::config::Action;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

/// The registry's entry: the `[ike]` section.
pub struct IkeSection;

impl DriverSection for IkeSection {
    fn name(&self) -> &'static str {
        "IKEv2"
    }
    fn keys(&self) -> &'static [&'static str] {
        &["ike"]
    }
    fn parse(
        &self,
        mut table: toml::Table,
        base: &Path,
    ) -> std::result::Result<Box<dyn DriverConfig>, Vec<ConfigError>> {
        let v = table
            .remove("ike")
            .unwrap_or(toml::Value::Table(Default::default()));
        Ok(Box::new(config::parse(v, base)?))
    }

    fn holds_keys(&self, table: &toml::Table) -> bool {
        // A connection's `psk` written in the file (not psk_file).
        table
            .get("ike")
            .and_then(|i| i.get("connection"))
            .and_then(|c| c.as_array())
            .is_some_and(|a| a.iter().any(|c| c.get("psk").is_some()))
    }
}

impl DriverConfig for config::IkeConfig {
    fn check(&self) -> Result<Checked> {
        let children: usize = self.connections.iter().map(|c| c.children.len()).sum();
        Ok(Checked {
            summary: format!(
                "{} IKE connection{}, {children} child{}",
                self.connections.len(),
                if self.connections.len() == 1 { "" } else { "s" },
                if children == 1 { "" } else { "ren" }
            ),
            notes: Vec::new(),
        })
    }

    fn start(self: Box<Self>, port: Arc<dyn SaPort>) -> Result<Box<dyn Engine>> {
        let cfg = *self;
        let mut locals: Vec<std::net::IpAddr> = Vec::new();
        for c in &cfg.connections {
            for a in &c.local_addrs {
                if !locals.contains(a) {
                    locals.push(*a);
                }
            }
        }
        let start: Vec<(String, String)> = cfg
            .connections
            .iter()
            .flat_map(|c| {
                c.children
                    .iter()
                    .filter(|ch| ch.start_action == Action::Start)
                    .map(|ch| (c.name.clone(), ch.name.clone()))
            })
            .collect();
        // Every configured child's policies before anything is negotiated (fail-closed for every start_action,
        // and the traps of start_action = trap).
        let mut installer = install::Installer::new(port);
        installer
            .install_traps(&cfg.connections)
            .map_err(|e| Error::Driver {
                driver: "IKE",
                cause: e.to_string(),
            })?;
        let (hook, control) = control::pair(
            cfg.connections
                .iter()
                .map(|c| {
                    (
                        c.name.clone(),
                        c.children.iter().map(|ch| ch.name.clone()).collect(),
                    )
                })
                .collect(),
        );
        let machine = endpoint::new(cfg.connections).map_err(|cause| Error::Driver {
            driver: "IKE",
            cause,
        })?;
        let sockets = sockets::Sockets::open(
            &locals,
            config::IKE_PORT,
            config::NAT_T_PORT,
            Some(cfg.socket_mark),
            sockets::Bind::Wildcard,
        )
        .map_err(Error::io("IKE sockets"))?;
        let d = driver::Driver {
            preinstalled: Default::default(),
            machine,
            sockets,
            installer,
            start,
            counters: Default::default(),
            ike_sas: Vec::new(),
            control: Some(hook),
        };
        let mut running = spawn(d)?;
        running.control = Some(Arc::new(control));
        Ok(Box::new(running))
    }
}

/// The running driver.
pub struct IkeDriver {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
    control: Option<Arc<control::IkeControl>>,
}

/// Starts the loop on its own thread.
pub fn spawn(d: driver::Driver) -> Result<IkeDriver> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let thread = std::thread::Builder::new()
        .name("ike".into())
        .spawn(move || d.run(&s))
        .map_err(Error::io("IKE thread"))?;
    Ok(IkeDriver {
        stop,
        thread,
        control: None,
    })
}

impl Engine for IkeDriver {
    fn tick(&mut self) -> bool {
        !self.thread.is_finished()
    }
    fn stop(self: Box<Self>, _undo: &mut Undo, _down: bool) {
        self.stop.store(true, Relaxed);
        let _ = self.thread.join();
    }
    fn control(&self) -> Option<Arc<dyn crate::runtime::engine::Control>> {
        self.control
            .clone()
            .map(|c| c as Arc<dyn crate::runtime::engine::Control>)
    }
}
