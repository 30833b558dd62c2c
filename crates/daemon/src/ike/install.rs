//! CHILD_SAs into the data plane: what the IKE state machine negotiated ([`ChildSa`]) becomes an inbound SA, an
//! outbound SA and a pair of policies per selector pair, through the engine's typed port ([`SaPort`]) only.
//!
//! Each CHILD_SA gets an instance number when it first comes up; its SAs are named `ike-N-in` and `ike-N-out`
//! and its policies `ike-N-oI` / `ike-N-iI`. A rekeyed CHILD_SA (`replaces`: the old inbound SPI) keeps the
//! instance: its SAs are replaced in place ([`SaPort::sa_update`], make-before-break: the engine keeps the old
//! inbound SA for packets under way, and the policies, which name the SAs by name, never point at nothing). Its
//! policies are swapped only when the narrowed selectors changed. When a CHILD_SA goes down
//! ([`remove`](Installer::remove)) its policies go first (no packet selected for an SA about to go), then both
//! SAs.
//!
//! A rekey replaces the inbound SA at once but the outbound SA only when the old CHILD_SA goes (its
//! `ChildSaDown`: the rekey's DELETE, sent by the rekey's initiator after it installed the new SAs, answered by the
//! responder). So neither side sends with the new keys before the other can open them: the responder's answer
//! (which the driver sends after installing) tells the initiator that the responder's new inbound SA is in, and the
//! DELETE tells the responder the same of the initiator's. Switching the outbound SA with the answer lost the
//! packets sent in the millisecond before the peer installed its inbound SA (up to 0.7 ms of a 10,000 packets/s
//! stream per rekey). Until then the old outbound SA seals: its keys stay valid at the peer, whose replaced
//! inbound SA retires for [`RETIRE_SECONDS`](crate::ip_db::RETIRE_SECONDS).

use super::config::esp_suite;
use crate::sa_api::{
    AnySaParams, ChangeError, InboundSaParams, OutboundSaParams, PolicyAction, PolicyParams,
    SaCommon, SaPort,
};
use netveil_ike::config::{Mode as IkeMode, TsSpec};
use netveil_ike::event::{ChildSa, EspSa};
use netveil_ike::proposal::Esn;
use netveil_ipsec::sa::{Suite, UdpEncap};
use netveil_ipsec::Mode;
use netveil_sa::lifetime::Lifetime;
use netveil_sa::policy::{Direction, PortRange, Selector};
use std::collections::HashMap;
use std::sync::Arc;
use zeroize::Zeroizing;

/// One installed CHILD_SA.
#[derive(Debug, Clone)]
struct Installed {
    instance: u64,
    outbound_spi: u32,
    local_ts: Vec<TsSpec>,
    remote_ts: Vec<TsSpec>,
    policies: Vec<String>,
}

/// What the driver installed, by the CHILD_SA's current inbound SPI.
pub struct Installer {
    port: Arc<dyn SaPort>,
    by_inbound: HashMap<u32, Installed>,
    next: u64,
    /// Rekeyed CHILD_SAs' outbound SAs not switched to yet, by the inbound SPI of the CHILD_SA they replace (whose
    /// `ChildSaDown` switches them): the rekeyed CHILD_SA's inbound SPI and its outbound SA.
    pending_out: HashMap<u32, (u32, OutboundSaParams)>,
}

/// Why a CHILD_SA could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("the negotiated ESP proposal {0} has no suite the IP engine installs")]
    Suite(String),
    #[error("the IP engine refused {what}: {err}")]
    Refused { what: String, err: ChangeError },
}

fn refused(what: impl Into<String>) -> impl FnOnce(ChangeError) -> InstallError {
    let what = what.into();
    move |err| InstallError::Refused { what, err }
}

impl Installer {
    pub fn new(port: Arc<dyn SaPort>) -> Installer {
        Installer {
            port,
            by_inbound: HashMap::new(),
            next: 1,
            pending_out: HashMap::new(),
        }
    }

    /// The SA names of an instance.
    pub fn sa_names(instance: u64) -> (String, String) {
        (format!("ike-{instance}-in"), format!("ike-{instance}-out"))
    }

    /// The instance that carries the CHILD_SA of this inbound SPI, if installed.
    pub fn instance(&self, inbound_spi: u32) -> Option<u64> {
        self.by_inbound.get(&inbound_spi).map(|i| i.instance)
    }

    /// How many CHILD_SAs are installed.
    pub fn len(&self) -> usize {
        self.by_inbound.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_inbound.is_empty()
    }

    /// Installs (or, with `replaces`, rekeys in place) one CHILD_SA. On an error the SAs of a new instance that
    /// were added are removed again.
    pub fn install(&mut self, c: &ChildSa) -> Result<u64, InstallError> {
        let p = &c.proposal;
        let encr = *p
            .encr()
            .first()
            .ok_or_else(|| InstallError::Suite(p.to_string()))?;
        let integ = p.integ().first().copied();
        let suite = esp_suite(encr, integ).ok_or_else(|| InstallError::Suite(p.to_string()))?;
        let esn = p.esn().first() == Some(&Esn::Yes);
        let (mode_in, mode_out) = match c.mode {
            IkeMode::Transport => (Mode::Transport, Mode::Transport),
            IkeMode::Tunnel => (
                Mode::Tunnel {
                    local: c.local.ip(),
                    remote: c.remote.ip(),
                },
                Mode::Tunnel {
                    local: c.local.ip(),
                    remote: c.remote.ip(),
                },
            ),
        };
        let encap = c.udp_encap.then(|| UdpEncap {
            local_port: c.local.port(),
            remote_port: c.remote.port(),
        });
        let common = |name: String, sa: &EspSa, mode: Mode| SaCommon {
            name,
            spi: sa.spi,
            suite: Suite::Esp(suite),
            mode,
            enc_key: Zeroizing::new(sa.encr_key.expose().to_vec()),
            auth_key: Zeroizing::new(sa.integ_key.expose().to_vec()),
            esn,
            // Rekeying and expiry are the IKE SA's: the machine rekeys before the configured life_time.
            lifetime: Lifetime::default(),
            encap,
            // IKE's KEYMAT: new for every CHILD_SA and rekey, so no sequence mark or receive floor is needed.
            keys: crate::sa_api::Negotiated::keys(),
        };
        let old = c.replaces.and_then(|spi| self.by_inbound.remove(&spi));
        let instance = old.as_ref().map_or_else(
            || {
                let n = self.next;
                self.next += 1;
                n
            },
            |o| o.instance,
        );
        let (in_name, out_name) = Self::sa_names(instance);
        let inbound = InboundSaParams {
            sa: common(in_name.clone(), &c.inbound, mode_in),
            replay_window: c.replay_window.max(64),
        };
        let outbound = OutboundSaParams {
            sa: common(out_name.clone(), &c.outbound, mode_out),
            tfc_pad_to: 0,
        };
        let mut installed = Installed {
            instance,
            outbound_spi: c.outbound.spi,
            local_ts: c.local_ts.clone(),
            remote_ts: c.remote_ts.clone(),
            policies: Vec::new(),
        };
        if let Some(old) = old {
            // Rekey: the inbound SA replaced in place now, the outbound one when the old CHILD_SA goes; the
            // policies follow only if the selectors moved.
            let replaced = c.replaces.expect("a rekey");
            // A rekey of the old CHILD_SA's own pending switch supersedes it.
            self.pending_out.retain(|_, (owner, _)| *owner != replaced);
            let r = (|| {
                self.port
                    .sa_update(AnySaParams::In(inbound))
                    .map_err(refused(format!("rekeyed inbound SA {in_name}")))?;
                if old.local_ts == c.local_ts && old.remote_ts == c.remote_ts {
                    installed.policies = old.policies.clone();
                } else {
                    for p in &old.policies {
                        let _ = self.port.policy_del(p);
                    }
                    installed.policies = self.add_policies(
                        instance,
                        &c.local_ts,
                        &c.remote_ts,
                        (c.local, c.remote),
                    )?;
                }
                Ok(())
            })();
            if let Err(e) = r {
                // Keep track of what is still there (the old SAs, maybe updated) under the new SPI: a later
                // ChildSaDown of either removes the instance.
                installed.policies = old.policies;
                self.by_inbound.insert(c.inbound.spi, installed);
                return Err(e);
            }
            self.pending_out.insert(replaced, (c.inbound.spi, outbound));
        } else {
            self.port
                .sa_add_in(inbound)
                .map_err(refused(format!("inbound SA {in_name}")))?;
            if let Err(e) = self.port.sa_add_out(outbound) {
                let _ = self.port.sa_del(&in_name);
                return Err(refused(format!("outbound SA {out_name}"))(e));
            }
            match self.add_policies(instance, &c.local_ts, &c.remote_ts, (c.local, c.remote)) {
                Ok(p) => installed.policies = p,
                Err(e) => {
                    let _ = self.port.sa_del(&out_name);
                    let _ = self.port.sa_del(&in_name);
                    return Err(e);
                }
            }
        }
        self.by_inbound.insert(c.inbound.spi, installed);
        Ok(instance)
    }

    /// One outbound and one inbound policy per pair of selectors of the same family (the rest cannot carry
    /// traffic). Where a pair covers the IKE SA's own addresses (transport mode, or a tunnel whose selectors include
    /// the outer addresses), an inbound bypass for the peer's IKE datagrams comes first (`ike-N-bI`, at the top):
    /// the inbound protect policy's fail-closed input rule would otherwise drop them in clear, and with them every
    /// later exchange of the IKE SA (DELETE, rekeys, liveness checks). IKE's own datagrams are never ESP-protected
    /// (the outbound ones carry the socket mark). On an error the ones added are removed again.
    fn add_policies(
        &self,
        instance: u64,
        local: &[TsSpec],
        remote: &[TsSpec],
        ike: (std::net::SocketAddr, std::net::SocketAddr),
    ) -> Result<Vec<String>, InstallError> {
        let (in_name, out_name) = Self::sa_names(instance);
        let mut added: Vec<String> = Vec::new();
        let mut n = 0;
        for l in local {
            for r in remote {
                if l.addr.is_ipv4() != r.addr.is_ipv4() {
                    continue;
                }
                // The protocol both sides allow (0: any); none in common, no traffic.
                let proto = match (l.protocol, r.protocol) {
                    (0, p) | (p, 0) => p,
                    (a, b) if a == b => a,
                    _ => continue,
                };
                let net = |t: &TsSpec| {
                    ipnet::IpNet::new(t.addr, t.prefix).expect("prefix checked by the parser")
                };
                let ports = |t: &TsSpec| PortRange {
                    start: t.ports.0,
                    end: t.ports.1,
                };
                let out = PolicyParams {
                    name: format!("ike-{instance}-o{n}"),
                    direction: Direction::Out,
                    selector: Selector {
                        src: net(l),
                        dst: net(r),
                        proto: (proto != 0).then_some(proto),
                        src_ports: ports(l),
                        dst_ports: ports(r),
                    },
                    action: PolicyAction::Protect(vec![out_name.clone()]),
                };
                let inb = PolicyParams {
                    name: format!("ike-{instance}-i{n}"),
                    direction: Direction::In,
                    selector: Selector {
                        src: net(r),
                        dst: net(l),
                        proto: (proto != 0).then_some(proto),
                        src_ports: ports(r),
                        dst_ports: ports(l),
                    },
                    action: PolicyAction::Protect(vec![in_name.clone()]),
                };
                let covers = |t: &TsSpec, a: std::net::SocketAddr| {
                    net(t).contains(&a.ip())
                        && matches!(t.protocol, 0 | 17)
                        && (t.ports.0..=t.ports.1).contains(&a.port())
                };
                let bypass = (covers(l, ike.0) && covers(r, ike.1)).then(|| {
                    let host = |a: std::net::IpAddr| {
                        ipnet::IpNet::new(a, if a.is_ipv4() { 32 } else { 128 })
                            .expect("a host prefix")
                    };
                    let port = |a: std::net::SocketAddr| PortRange {
                        start: a.port(),
                        end: a.port(),
                    };
                    PolicyParams {
                        name: format!("ike-{instance}-b{n}"),
                        direction: Direction::In,
                        selector: Selector {
                            src: host(ike.1.ip()),
                            dst: host(ike.0.ip()),
                            proto: Some(17),
                            src_ports: port(ike.1),
                            dst_ports: port(ike.0),
                        },
                        action: PolicyAction::Bypass,
                    }
                });
                n += 1;
                for (p, position) in bypass
                    .into_iter()
                    .map(|b| (b, Some(0)))
                    .chain([(out, None), (inb, None)])
                {
                    let name = p.name.clone();
                    // A policy of this name that is not ours is a killed predecessor's, restored by the engine
                    // to keep its traffic blocked (it names SAs that are gone): ours replaces it.
                    let stale = || {
                        self.by_inbound
                            .values()
                            .all(|i| !i.policies.contains(&name))
                    };
                    let r = match self.port.policy_add(p.clone(), position) {
                        Err(_) if stale() && self.port.policy_del(&name).is_ok() => {
                            tracing::info!("ike: policy {name} of a previous instance replaced");
                            self.port.policy_add(p, position)
                        }
                        r => r,
                    };
                    if let Err(e) = r {
                        for a in &added {
                            let _ = self.port.policy_del(a);
                        }
                        return Err(refused(format!("policy {name}"))(e));
                    }
                    added.push(name);
                }
            }
        }
        Ok(added)
    }

    /// Removes the CHILD_SA whose inbound SPI is `inbound_spi`: its policies, then both SAs. `Ok(false)`: not
    /// installed, or replaced by a rekey, whose outbound SA now takes over.
    pub fn remove(&mut self, inbound_spi: u32, outbound_spi: u32) -> Result<bool, InstallError> {
        let Some(i) = self.by_inbound.get(&inbound_spi) else {
            if let Some((_, out)) = self.pending_out.remove(&inbound_spi) {
                let name = out.sa.name.clone();
                self.port
                    .sa_update(AnySaParams::Out(out))
                    .map_err(refused(format!("rekeyed outbound SA {name}")))?;
            }
            return Ok(false);
        };
        if i.outbound_spi != outbound_spi {
            // A rekey moved the instance to a new outbound SPI under the same inbound one: not this pair.
            return Ok(false);
        }
        let i = self.by_inbound.remove(&inbound_spi).expect("looked up");
        self.pending_out
            .retain(|_, (owner, _)| *owner != inbound_spi);
        let mut first_err = None;
        for p in &i.policies {
            if let Err(e) = self.port.policy_del(p) {
                first_err.get_or_insert(refused(format!("removal of policy {p}"))(e));
            }
        }
        let (in_name, out_name) = Self::sa_names(i.instance);
        for n in [out_name, in_name] {
            if let Err(e) = self.port.sa_del(&n) {
                first_err.get_or_insert(refused(format!("removal of SA {n}"))(e));
            }
        }
        first_err.map_or(Ok(true), Err)
    }

    /// Removes every installed CHILD_SA (the driver stops).
    pub fn remove_all(&mut self) {
        let all: Vec<(u32, u32)> = self
            .by_inbound
            .iter()
            .map(|(i, v)| (*i, v.outbound_spi))
            .collect();
        for (i, o) in all {
            let _ = self.remove(i, o);
        }
    }
}

#[cfg(test)]
#[path = "install_tests.rs"]
mod tests;
