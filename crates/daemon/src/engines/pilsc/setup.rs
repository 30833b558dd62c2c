//! The netfilter queues' iptables rules (fail closed, no bypass) and the engine's start.

use super::config::mode_name;
use super::config::PilscConfig;
use super::control::{rule_infos, PilscControl, Shared, Stats};
use super::rules::{install_rules, remove_rules};
use super::worker::Worker;
use super::PilscEngine;
use crate::runtime::engine::Undo;
use crate::runtime::registry::{Prepared, Started};
use crate::runtime::state::StateDir;
use crate::{Error, Result};
use netveil_io::nfqueue::NfQueue;
use netveil_pilsc::packet::Mode;
use netveil_pilsc::table::Table;
use netveil_sa::flow_cache::CachedPolicy;
use netveil_sa::policy::PolicyDb;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

pub(super) struct PilscPrepared {
    pub(super) cfg: PilscConfig,
    pub(super) ipt: String,
    pub(super) dir: StateDir,
    pub(super) table: Table,
    pub(super) db: PolicyDb,
    /// Per key slot (in order): its mark file and the counter reserved.
    pub(super) marks: Vec<(String, u64)>,
    /// The configuration file (a reload of `[[pilsc.rule]]` tables reads it again).
    pub(super) config: Option<PathBuf>,
}

impl Prepared for PilscPrepared {
    fn control_socket(&self) -> &Path {
        &self.cfg.control_socket
    }

    fn control_group(&self) -> Option<u32> {
        self.cfg.control_group
    }

    fn start(self: Box<Self>, undo: &mut Undo, control: &Path) -> Result<Started> {
        let p = *self;
        let (qo, qi) = (p.cfg.queue, p.cfg.queue + 1);
        let q = NfQueue::open(&[qo, qi], 4096).map_err(Error::io(format!(
            "cannot bind netfilter queues {qo} and {qi} (another daemon holds them, or no \
             NETFILTER_NETLINK_QUEUE)"
        )))?;
        q.set_recv_timeout(Duration::from_millis(100))
            .map_err(Error::io("netfilter queue receive timeout"))?;
        // A crashed run's rules first (its chains would hold ours back), then ours; a failed start leaves none.
        remove_rules(&p.ipt, &p.cfg);
        let (out, inp) = p.cfg.chains();
        let ipt = p.ipt.clone();
        for (table, hook, chain) in [("mangle", "POSTROUTING", &out), ("raw", "PREROUTING", &inp)] {
            undo.push(&[&ipt, "-w", "-t", table, "-X", chain]);
            undo.push(&[&ipt, "-w", "-t", table, "-F", chain]);
            undo.push(&[&ipt, "-w", "-t", table, "-D", hook, "-j", chain]);
        }
        install_rules(&ipt, &p.cfg)?;
        let stats = Arc::new(Stats::new(p.cfg.file.rules.len()));
        let stop = Arc::new(AtomicBool::new(false));
        let (reload_tx, reload_rx) = std::sync::mpsc::channel();
        let shared = Arc::new(Shared {
            view: std::sync::Mutex::new((
                stats.clone(),
                Arc::new(rule_infos(&p.cfg.file)),
                p.table.keys.len(),
            )),
            mode: p.cfg.mode,
            queues: (qo, qi),
            iptables: ipt.clone(),
            source: p.cfg.source.clone(),
            config: p.config.clone(),
            keys_path: p.cfg.keys_path.clone(),
            settings: p.cfg.settings(),
            reload_tx: std::sync::Mutex::new(reload_tx),
            chains: p.cfg.chains(),
        });
        let worker = Worker {
            due: Vec::new(),
            reload_rx,
            shared: shared.clone(),
            settings: p.cfg.settings(),
            rates: Default::default(),
            mode: p.cfg.mode,
            q,
            table: p.table,
            db: CachedPolicy::new(p.db),
            dir: p.dir,
            marks: p.marks,
            stats,
            stop: stop.clone(),
            qout: qo,
        };
        let handle = std::thread::Builder::new()
            .name("pilsc".into())
            .spawn(move || worker.run())
            .map_err(Error::io("cannot start the PILSC thread"))?;
        tracing::info!(
            "pilsc: up ({} rules, {} mode, queues {qo}/{qi} via {ipt}); control socket {}",
            p.cfg.file.rules.len(),
            mode_name(shared.mode),
            control.display()
        );
        if p.cfg.mode == Mode::Confidential {
            tracing::warn!("pilsc: confidential mode: encryption only, no integrity");
        }
        // The rules stay after a clean stop (fail closed); `netveil down` removes them.
        let keep: Vec<Vec<String>> = [("mangle", "POSTROUTING", &out), ("raw", "PREROUTING", &inp)]
            .iter()
            .flat_map(|(table, hook, chain)| {
                [
                    vec![
                        ipt.clone(),
                        "-w".into(),
                        "-t".into(),
                        table.to_string(),
                        "-X".into(),
                        chain.to_string(),
                    ],
                    vec![
                        ipt.clone(),
                        "-w".into(),
                        "-t".into(),
                        table.to_string(),
                        "-F".into(),
                        chain.to_string(),
                    ],
                    vec![
                        ipt.clone(),
                        "-w".into(),
                        "-t".into(),
                        table.to_string(),
                        "-D".into(),
                        hook.to_string(),
                        "-j".into(),
                        chain.to_string(),
                    ],
                ]
            })
            .collect();
        Ok(Started {
            engine: Box::new(PilscEngine {
                shared: shared.clone(),
                handle: Some(handle),
                stop,
                keep,
            }),
            control: Arc::new(PilscControl(shared)),
            sa_port: None,
        })
    }
}
