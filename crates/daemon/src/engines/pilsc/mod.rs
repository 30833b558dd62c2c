//! The PILSC engine (`[pilsc]`): protects the host's own IPv4 packets as a rule file says, inside the host's stack
//! (not a tunnel), through two netfilter queues (see [`netveil_io::nfqueue`]).
//!
//! ```text
//! output: socket -> OUTPUT (conntrack sees the clear packet) -> routing -> mangle POSTROUTING: queue `queue`
//!         -> this engine seals (option 130, payload encrypted) -> verdict with the new bytes -> NAT, the wire
//! input:  the wire -> defragmentation -> raw PREROUTING: queue `queue + 1` -> this engine opens (option gone,
//!         payload clear) -> verdict with the new bytes -> conntrack, routing, INPUT -> socket
//! ```
//!
//! - **What is queued**: the host's own unicast packets (`addrtype`: source local going out, destination local
//!   coming in; loopback never) to and from the peers of the rule file's `Security = true` rules (one iptables rule
//!   per distinct peer prefix; above [`MAX_QUEUE_PREFIXES`] of them, all of the host's own unicast traffic), and
//!   the host's own ICMP errors to and from anywhere (types 3, 4, 5, 11, 12). The paper's classification: broadcast,
//!   multicast and packets for other hosts pass untouched. Everything else never reaches user space.
//! - **Per packet** (rules compiled into [`netveil_sa::policy`] by [`netveil_pilsc::policy`]): going out, a packet
//!   whose most specific rule is `Security = true` is sealed with that rule's key ([`netveil_pilsc::packet`]);
//!   coming in, a packet with option 130 is opened with the key its key id and source name, then its clear headers
//!   must select a protected rule of that key; a packet without the option whose headers select a protected rule
//!   is dropped (covered traffic is never accepted in clear). An ICMP error is judged by the packet it quotes
//!   (RFC 4301 section 6.2; see [`netveil_pilsc::policy`]): sealed under that packet's rule going out, dropped
//!   coming in without the option when that packet's flow is protected. Drops are counted by reason
//!   (`netveil status`).
//! - **Fail closed**: the queues are bound without fail-open and the `NFQUEUE` rules have no `--queue-bypass`, so
//!   while no daemon listens, queued (covered) packets are dropped. A clean stop (SIGTERM) leaves the rules in
//!   place, as the IP engine leaves its fail-closed filters; `netveil down` removes them; a restart replaces them.
//! - **iptables**: the kernels we target have the xtables `NFQUEUE` target (through `NFT_COMPAT`) but not always
//!   nftables' own `queue` statement, so the rules go in with `iptables-nft` or `iptables-legacy` (Debian's
//!   `iptables` package), whichever works here (`pilsc.iptables` picks one).
//! - **Counters across restarts**: each key's sealer continues from a mark in the state directory, reserved
//!   [`MARK_BLOCK`] counters ahead and synced before use, as static ESP keys' sequence numbers are (see
//!   [`crate::runtime::state`]); a clean stop writes the last counter used.

// layers: section > setup > worker > control > rules > config, marks
mod config;
mod control;
mod marks;
mod rules;
mod section;
mod setup;
#[cfg(test)]
mod tests;
mod worker;

pub use config::{PilscConfig, RuleSource, MAX_QUEUE_PREFIXES, SECTIONS};
pub use control::{PilscStatus, RuleStatus};
pub use marks::MARK_BLOCK;
pub use section::PilscSection;

use crate::runtime::engine::{Engine, Undo};
use control::Shared;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Packets per receive batch.
const BATCH: usize = 32;

pub(super) struct PilscEngine {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    /// The undo commands of the queue rules (kept unless `down`).
    keep: Vec<Vec<String>>,
}

impl Engine for PilscEngine {
    fn tick(&mut self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }

    fn reload(&mut self) -> Option<std::result::Result<String, String>> {
        Some(self.shared.reload().map_err(|e| e.to_string()))
    }

    fn stop(mut self: Box<Self>, undo: &mut Undo, down: bool) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        if !down {
            for c in &self.keep {
                let c: Vec<&str> = c.iter().map(String::as_str).collect();
                undo.keep(&c);
            }
        }
    }
}
