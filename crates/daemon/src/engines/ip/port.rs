//! The IP engine's typed port ([`crate::runtime::sa_port::SaPort`]): what key-exchange drivers change the engine through.

use super::shared::Shared;
use crate::runtime::sa_port::{
    AnySaParams, ChangeError, InboundSaParams, OutboundSaParams, PolicyParams, PspKxState, SaOp,
    SaPort,
};
use std::sync::Arc;

/// The port of a running IP engine (its SA and policy database, its PSP device and transmit SA), at the engine's
/// clock.
pub struct IpPort(pub Arc<Shared>);

impl SaPort for IpPort {
    fn sa_add_out(&self, p: OutboundSaParams) -> Result<(), ChangeError> {
        self.0.db.sa_add_out(p, self.0.now())
    }

    fn sa_add_in(&self, p: InboundSaParams) -> Result<(), ChangeError> {
        self.0.db.sa_add_in(p, self.0.now())
    }

    fn sa_update(&self, p: AnySaParams) -> Result<(), ChangeError> {
        self.0.db.sa_replace(p, self.0.now())
    }

    fn sa_del(&self, name: &str) -> Result<(), ChangeError> {
        self.0.db.sa_del(name, self.0.now())
    }

    fn policy_add(&self, p: PolicyParams, position: Option<usize>) -> Result<(), ChangeError> {
        self.0.db.policy_add_params(p, position, self.0.now())
    }

    fn policy_del(&self, name: &str) -> Result<(), ChangeError> {
        self.0.db.policy_del(name, self.0.now())
    }

    fn policy_bind(&self, p: PolicyParams, cover: &str) -> Result<(), ChangeError> {
        self.0.db.policy_bind(p, cover, self.0.now())
    }

    fn inbound_packets(&self, spi: u32) -> Option<u64> {
        let snap = self.0.db.load();
        let i = snap.sad.lookup_inbound(netveil_ipsec::Protocol::Esp, spi)?;
        Some(
            snap.sad
                .inb(i)
                .counters
                .packets
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    fn batch(&self, ops: Vec<SaOp>) -> Result<(), ChangeError> {
        self.0.db.batch(ops, self.0.now())
    }

    fn acquires(&self) -> Option<std::sync::mpsc::Receiver<crate::runtime::sa_port::Acquire>> {
        Some(self.0.db.acquires())
    }

    fn set_kx_peers(&self, peers: crate::engines::ip::nft::KxPeers) -> Result<(), ChangeError> {
        self.0.db.set_kx_peers(peers)
    }

    fn claim(&self, prefix: &str, owner: Option<&str>) {
        self.0.db.claim(prefix, owner)
    }

    fn runtime_policies(&self, prefix: &str) -> Vec<String> {
        self.0.db.runtime_policies(prefix)
    }

    fn psp_rx(&self, f: &mut dyn FnMut(&mut netveil_psp::Device)) -> Result<(), String> {
        match &self.0.psp {
            Some(st) => st.with_device(f),
            None => Err("no [psp] section".into()),
        }
    }

    fn psp_install_tx(&self, sa: netveil_psp::TxSa) -> Result<(), String> {
        match &self.0.psp {
            Some(st) => {
                st.install_tx(sa);
                Ok(())
            }
            None => Err("no [psp] section".into()),
        }
    }

    fn psp_kx_state(&self) -> Option<Arc<PspKxState>> {
        self.0.psp.as_ref().map(|st| st.kx.clone())
    }
}
