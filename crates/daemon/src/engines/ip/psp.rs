//! PSP in the IP engine's data plane: encapsulation with the transmit SA, decapsulation with the device.

use super::pmtu::PathMtu;
use super::policy::{fits_len, FragCache};
use super::shared::{Datagram, Shared, TxRecord};
use crate::engines::ip::db::Snapshot;
use crate::engines::ip::drop::Drop;
use crate::engines::ip::psp_state;
use netveil_io::PacketBuf;
use netveil_ipsec::Drop as IpsecDrop;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;

impl Shared {
    /// PSP outbound: encapsulate with the transmit SA the peer handed us (tunnel: outer addresses set to ours and
    /// the peer's). Counted in the device's tx counters. A packet that would not fit the route to the peer is not
    /// encapsulated (see [`super::pmtu`]). `hdrs`: the packet's headers as the policy lookup parsed them (the
    /// packet is unchanged since).
    pub(super) fn psp_out(
        &self,
        pkt: &mut PacketBuf,
        hdrs: &netveil_wire::ip::Headers,
        key: &netveil_sa::policy::FlowKey,
        now: u64,
        pmtu: &mut PathMtu,
    ) -> std::result::Result<TxRecord, Drop> {
        let st = self.psp.as_ref().ok_or(Drop::PolicyDiscard)?;
        let len = pkt.len();
        let r = {
            // No lock: a snapshot of the current transmit SA (the key exchange swaps it), whose IV counter is
            // atomic.
            let tx = st.tx.load();
            match tx.as_deref() {
                None => {
                    st.tx_no_sa.fetch_add(1, Relaxed);
                    return Err(Drop::NoSa);
                }
                Some(sa) => {
                    let tunnel = psp_state::is_tunnel(&st.cfg);
                    let dst = if tunnel { st.cfg.remote } else { key.dst };
                    let p = pkt.data();
                    if let Some(len) = sa.udp_wire_len_parsed(hdrs, p.len()) {
                        fits_len(hdrs, p, dst, true, len, now, pmtu, |l| {
                            sa.udp_wire_len_parsed(hdrs, l)
                        })?;
                    }
                    if tunnel && key.src.is_ipv4() != st.cfg.local.is_ipv4() {
                        // The outer header is a copy of the inner one: tunnels stay within one family.
                        Err(netveil_psp::Error::Malformed)
                    } else {
                        // The datagram's payload: the socket writes the IP and UDP headers (tunnel: between the
                        // tunnel's ends; transport: between the packet's).
                        sa.encapsulate_udp_payload_parsed(pkt, hdrs)
                    }
                }
            }
        };
        st.stats.count_tx(r.map(|_| len));
        let sport = r?;
        let (src, dst) = if psp_state::is_tunnel(&st.cfg) {
            (st.cfg.local, st.cfg.remote)
        } else {
            (key.src, key.dst)
        };
        Ok(TxRecord::Psp(Datagram {
            src,
            sport,
            to: SocketAddr::new(dst, netveil_psp::UDP_PORT),
        }))
    }

    /// PSP inbound: `pkt` is a datagram from the PSP socket with its IP and UDP headers restored. Decapsulated
    /// traffic must come from the peer and match an inbound PSP protect policy.
    pub(super) fn psp_in(
        &self,
        snap: &Snapshot,
        pkt: &mut PacketBuf,
        now: u64,
        frags: &mut FragCache,
    ) -> std::result::Result<(), Drop> {
        let st = self.psp.as_ref().ok_or(IpsecDrop::Unsupported)?;
        let from_peer = netveil_wire::ip::Packet::new_checked(pkt.data())
            .is_ok_and(|p| p.src_addr() == st.cfg.remote);
        if !from_peer {
            return Err(IpsecDrop::UnknownSpi.into());
        }
        // No lock: the device's receive SAs as last published (the key exchange swaps them).
        st.rx.decapsulate(pkt)?;
        self.check_in(snap, pkt.data(), now, frags, |p| p.rule.psp)
    }
}

impl Shared {
    /// [`Shared::psp_in`] for the payload of a datagram from `src`, which `pkt` holds without its IP and UDP
    /// headers (see [`UdpRx::deliver`]). `None`: transport mode, which needs the headers (`pkt` untouched).
    pub(super) fn psp_in_payload(
        &self,
        snap: &Snapshot,
        pkt: &mut PacketBuf,
        src: IpAddr,
        now: u64,
        frags: &mut FragCache,
    ) -> Option<std::result::Result<(), Drop>> {
        let Some(st) = self.psp.as_ref() else {
            return Some(Err(IpsecDrop::Unsupported.into()));
        };
        if src != st.cfg.remote {
            return Some(Err(IpsecDrop::UnknownSpi.into()));
        }
        match st.rx.decapsulate_udp_payload(pkt) {
            Ok(None) => None,
            Ok(Some(_)) => Some(self.check_in(snap, pkt.data(), now, frags, |p| p.rule.psp)),
            Err(e) => Some(Err(e.into())),
        }
    }
}
