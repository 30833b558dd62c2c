//! The typed SA and policy interface of an engine that carries SAs (the IP engine): what key-exchange drivers
//! (PSP's TLS exchange today, IKE next) and the control socket install SAs and policies through.
//!
//! - Inbound and outbound SA parameters are distinct types ([`InboundSaParams`], [`OutboundSaParams`]): an SA
//!   negotiated for one direction can never be installed as the other, by the type checker (see [`SaPort`]). An
//!   outbound SA has no replay window; an inbound one has no TFC padding. Neither has a sequence start: the engine
//!   takes it from the state directory (outbound SAs continue above their keys' mark, inbound SAs above their
//!   receive floor), as for the configuration file's SAs.
//! - Every call is checked whole (the configuration file's rules; errors name the key at fault as the file's
//!   `[[sa]]` and `[[policy]]` keys, `sa.enc_key`, `policy.sas[0]`, and never show a value), then applied or
//!   refused as a whole (see [`crate::engines::ip::db`]).
//! - The control socket's `sa add|update|del` and `policy add|del` requests (TOML/JSON tables) are an adapter that
//!   parses the table into these types and makes the same calls ([`crate::engines::ip::db::Db::sa_add`] and its siblings).
//!
//! PSP's key exchange changes the data plane through the same port: the device's receive SAs
//! ([`SaPort::psp_rx`], under the device's lock, the socket filter following before anything is sent to the peer)
//! and the transmit SA ([`SaPort::psp_install_tx`]).

use crate::runtime::config::ConfigError;
use netveil_ipsec::sa::{Direction, Suite, UdpEncap};
use netveil_ipsec::{Mode, SaParams};
use netveil_sa::lifetime::Lifetime;
use netveil_sa::policy::{Direction as PolicyDirection, PortRange, Selector};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::Arc;
use zeroize::Zeroizing;

/// A refused change: the key at fault (as in the configuration file: `sa.spi`, `policy.sas[0]`) and why.
pub type ChangeError = ConfigError;

/// What SAs of both directions have.
#[derive(Clone)]
pub struct SaCommon {
    /// The SA's name (the rule of [`crate::runtime::names`]): policies name their SAs by it.
    pub name: String,
    pub spi: u32,
    pub suite: Suite,
    pub mode: Mode,
    /// Encryption key material (an AEAD's salt at its end); empty for AH and NULL encryption.
    pub enc_key: Zeroizing<Vec<u8>>,
    /// Integrity key; empty for AEADs.
    pub auth_key: Zeroizing<Vec<u8>>,
    pub esn: bool,
    pub lifetime: Lifetime,
    /// ESP-in-UDP (RFC 3948).
    pub encap: Option<UdpEncap>,
    /// Where the keys come from: what makes a restart safe for them.
    pub keys: KeyOrigin,
}

/// Where an SA's keys come from, which decides how the engine keeps a restart from repeating sequence numbers
/// or accepting replays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOrigin {
    /// Written by a user (the configuration file, the control socket's `sa add|update`): the keys may have been
    /// used before, by this daemon or an earlier one, so the state directory's sequence mark (outbound) or
    /// receive floor (inbound) applies, and a directory without its record refuses keys it has neither for.
    Configured,
    /// Derived by a key exchange for this SA alone (IKE's KEYMAT from fresh nonces and a new DH secret): never
    /// used before, so sequence numbers start at 1 and the replay window is empty with no record to consult.
    /// A restart cannot reuse them either: the daemon that held them is gone with them, and the peers negotiate
    /// new keys. Only key-exchange drivers hold a [`Negotiated`] to claim this.
    Negotiated(Negotiated),
}

/// The proof that keys were negotiated (see [`KeyOrigin::Negotiated`]): made only by key-exchange drivers in
/// this crate; the control socket's adapter ([`AnySaParams::from_params`]) always says [`KeyOrigin::Configured`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated(());

impl Negotiated {
    /// For a key-exchange driver's freshly derived keys only.
    pub(crate) fn keys() -> KeyOrigin {
        KeyOrigin::Negotiated(Negotiated(()))
    }
}

impl KeyOrigin {
    pub fn is_negotiated(self) -> bool {
        matches!(self, KeyOrigin::Negotiated(_))
    }
}

impl std::fmt::Debug for SaCommon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("SaCommon")
            .field("name", &self.name)
            .field("spi", &format_args!("{:#010x}", self.spi))
            .field("suite", &self.suite)
            .field("mode", &self.mode)
            .field("esn", &self.esn)
            .field("encap", &self.encap)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

/// An outbound SA: ours to seal with.
#[derive(Clone, Debug)]
pub struct OutboundSaParams {
    pub sa: SaCommon,
    /// ESP TFC padding in tunnel mode: inner packets padded up to this many bytes (0: off).
    pub tfc_pad_to: u16,
}

/// An inbound SA: the peer's sending keys, to open with.
#[derive(Clone, Debug)]
pub struct InboundSaParams {
    pub sa: SaCommon,
    /// The anti-replay window (64 to 2^20 packets).
    pub replay_window: u32,
}

/// The parameters of an SA of either direction (what `sa update` replaces an SA of its name with: the same
/// direction as before).
#[derive(Clone, Debug)]
pub enum AnySaParams {
    Out(OutboundSaParams),
    In(InboundSaParams),
}

impl OutboundSaParams {
    /// The parameters the ipsec crate builds an SA of.
    pub fn into_params(self) -> SaParams {
        let c = self.sa;
        SaParams {
            name: c.name,
            spi: c.spi,
            direction: Direction::Out,
            suite: c.suite,
            mode: c.mode,
            enc_key: c.enc_key,
            auth_key: c.auth_key,
            esn: c.esn,
            replay_window: DEFAULT_REPLAY_WINDOW,
            lifetime: c.lifetime,
            encap: c.encap,
            tfc_pad_to: self.tfc_pad_to,
            first_seq: 1,
        }
    }
}

impl InboundSaParams {
    /// The parameters the ipsec crate builds an SA of.
    pub fn into_params(self) -> SaParams {
        let c = self.sa;
        SaParams {
            name: c.name,
            spi: c.spi,
            direction: Direction::In,
            suite: c.suite,
            mode: c.mode,
            enc_key: c.enc_key,
            auth_key: c.auth_key,
            esn: c.esn,
            replay_window: self.replay_window,
            lifetime: c.lifetime,
            encap: c.encap,
            tfc_pad_to: 0,
            first_seq: 1,
        }
    }
}

impl AnySaParams {
    /// Splits parsed parameters (a `[[sa]]` table's) by their direction: what an outbound SA has no use for (a
    /// replay window) and an inbound one neither (TFC padding, a sequence start) is left behind.
    pub fn from_params(p: SaParams) -> AnySaParams {
        let out = p.direction == Direction::Out;
        let (replay_window, tfc_pad_to) = (p.replay_window, p.tfc_pad_to);
        let sa = SaCommon {
            name: p.name,
            spi: p.spi,
            suite: p.suite,
            mode: p.mode,
            enc_key: p.enc_key,
            auth_key: p.auth_key,
            esn: p.esn,
            lifetime: p.lifetime,
            encap: p.encap,
            keys: KeyOrigin::Configured,
        };
        if out {
            AnySaParams::Out(OutboundSaParams { sa, tfc_pad_to })
        } else {
            AnySaParams::In(InboundSaParams { sa, replay_window })
        }
    }

    /// Where the SA's keys come from.
    pub fn keys(&self) -> KeyOrigin {
        match self {
            AnySaParams::Out(o) => o.sa.keys,
            AnySaParams::In(i) => i.sa.keys,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            AnySaParams::Out(o) => &o.sa.name,
            AnySaParams::In(i) => &i.sa.name,
        }
    }

    pub fn into_params(self) -> SaParams {
        match self {
            AnySaParams::Out(o) => o.into_params(),
            AnySaParams::In(i) => i.into_params(),
        }
    }
}

/// What a policy does with the traffic it selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyAction {
    /// Protected by these IPsec SAs (by name, innermost first, all of the policy's direction; up to 4). They may
    /// be installed later: until then the policy's traffic is dropped and reported as acquires.
    Protect(Vec<String>),
    /// Protected by PSP with the `[psp]` peer (keys from the key exchange).
    ProtectPsp,
    Bypass,
    Discard,
}

/// A policy: its name (the rule of [`crate::runtime::names`]), direction, selector and action.
#[derive(Clone, Debug)]
pub struct PolicyParams {
    pub name: String,
    pub direction: PolicyDirection,
    pub selector: Selector,
    pub action: PolicyAction,
}

impl PolicyParams {
    /// The policy as a `[[policy]]` table (how the policies added at runtime are kept in the state directory: the
    /// configuration's parser reads them back).
    pub fn to_table(&self) -> toml::Table {
        use toml::Value as V;
        let mut t = toml::Table::new();
        let s = &self.selector;
        t.insert("name".into(), V::String(self.name.clone()));
        t.insert(
            "direction".into(),
            V::String(
                match self.direction {
                    PolicyDirection::Out => "out",
                    PolicyDirection::In => "in",
                }
                .into(),
            ),
        );
        t.insert("src".into(), V::String(s.src.to_string()));
        t.insert("dst".into(), V::String(s.dst.to_string()));
        if let Some(p) = s.proto {
            t.insert("proto".into(), V::Integer(p.into()));
        }
        let ports = |r: &PortRange| V::String(format!("{}-{}", r.start, r.end));
        if !s.src_ports.is_any() {
            t.insert("src_ports".into(), ports(&s.src_ports));
        }
        if !s.dst_ports.is_any() {
            t.insert("dst_ports".into(), ports(&s.dst_ports));
        }
        let action = match &self.action {
            PolicyAction::Protect(sas) => {
                t.insert(
                    "sas".into(),
                    V::Array(sas.iter().map(|n| V::String(n.clone())).collect()),
                );
                "protect"
            }
            PolicyAction::ProtectPsp => {
                t.insert("protocol".into(), V::String("psp".into()));
                "protect"
            }
            PolicyAction::Bypass => "bypass",
            PolicyAction::Discard => "discard",
        };
        t.insert("action".into(), V::String(action.into()));
        t
    }
}

/// One change of a batch ([`SaPort::batch`]).
pub enum SaOp {
    AddIn(InboundSaParams),
    AddOut(OutboundSaParams),
    /// A policy bound in memory under the policy `cover` (see [`SaPort::policy_bind`]).
    Bind {
        policy: PolicyParams,
        cover: String,
    },
    DelPolicy(String),
    DelSa(String),
}

impl SaOp {
    /// Applies this change alone through `port`'s single calls.
    fn apply(self, port: &(impl SaPort + ?Sized)) -> Result<(), ChangeError> {
        match self {
            SaOp::AddIn(p) => port.sa_add_in(p),
            SaOp::AddOut(p) => port.sa_add_out(p),
            SaOp::Bind { policy, cover } => port.policy_bind(policy, &cover),
            SaOp::DelPolicy(n) => port.policy_del(&n),
            SaOp::DelSa(n) => port.sa_del(&n),
        }
    }
}

/// An acquire (see [`SaPort::acquires`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acquire {
    /// The protect policy that has no SAs.
    pub policy: String,
    /// The flow, as events show it (`10.1.0.1 -> 10.2.0.1 proto 1`).
    pub flow: String,
}

pub const DEFAULT_REPLAY_WINDOW: u32 = 1024;

/// The peers a key-exchange driver will install SAs with (the IKE connections' fixed `remote_addrs`), and whether
/// its SAs may be ESP-in-UDP: part of the peer filter from the driver's start, so that installing a negotiated
/// CHILD_SA does not change (and reload) the nftables table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KxPeers {
    pub addrs: Vec<std::net::IpAddr>,
    pub nat_t: bool,
}

/// Whether selector `a` selects nothing that `b` does not (addresses within, protocol the same or `b` any, ports
/// within).
pub fn selector_within(a: &netveil_sa::policy::Selector, b: &netveil_sa::policy::Selector) -> bool {
    let net = |inner: &ipnet::IpNet, outer: &ipnet::IpNet| {
        inner.addr().is_ipv4() == outer.addr().is_ipv4() && outer.trunc().contains(&inner.trunc())
    };
    let ports = |i: &netveil_sa::policy::PortRange, o: &netveil_sa::policy::PortRange| {
        o.start <= i.start && i.end <= o.end
    };
    net(&a.src, &b.src)
        && net(&a.dst, &b.dst)
        && (b.proto.is_none() || a.proto == b.proto)
        && ports(&a.src_ports, &b.src_ports)
        && ports(&a.dst_ports, &b.dst_ports)
}

/// The key exchange's state that the engine's `status` and `rotate` answers share with PSP's driver.
#[derive(Default, Debug)]
pub struct PspKxState {
    pub connected: AtomicBool,
    /// Rotation requests (`netveil rotate`): the driver rotates when this moves.
    pub rotate_requests: AtomicU64,
    pub rotations: AtomicU64,
    pub assoc_sent: AtomicU64,
    pub assoc_received: AtomicU64,
    /// Our latest receive SPI handed to the peer.
    pub rx_spi: AtomicU32,
}

/// The typed SA and policy interface of an engine (see the module documentation). Each call is applied whole or
/// refused whole; `Err` names the key at fault.
///
/// Inbound parameters cannot be installed as an outbound SA (nor the other way round):
///
/// ```compile_fail
/// use netveil_daemon::runtime::sa_port::{InboundSaParams, SaPort};
/// fn install(port: &dyn SaPort, peer_keys: InboundSaParams) {
///     let _ = port.sa_add_out(peer_keys);
/// }
/// ```
///
/// while the same call with the right direction compiles:
///
/// ```
/// use netveil_daemon::runtime::sa_port::{InboundSaParams, SaPort};
/// fn install(port: &dyn SaPort, peer_keys: InboundSaParams) {
///     let _ = port.sa_add_in(peer_keys);
/// }
/// ```
pub trait SaPort: Send + Sync {
    /// A new outbound SA (its name not taken).
    fn sa_add_out(&self, p: OutboundSaParams) -> Result<(), ChangeError>;
    /// A new inbound SA (its name not taken, its SPI not taken by another inbound SA of its protocol).
    fn sa_add_in(&self, p: InboundSaParams) -> Result<(), ChangeError>;
    /// Replaces the SA of `p`'s name (same direction; new SPI and keys), make-before-break.
    fn sa_update(&self, p: AnySaParams) -> Result<(), ChangeError>;
    /// Removes the SA `name`: policies naming it drop their traffic until one of that name is added.
    fn sa_del(&self, name: &str) -> Result<(), ChangeError>;
    /// A new policy at `position` (0: first; `None`: last), kept in the state directory so that a successor of a
    /// killed daemon covers its traffic too.
    fn policy_add(&self, p: PolicyParams, position: Option<usize>) -> Result<(), ChangeError>;
    fn policy_del(&self, name: &str) -> Result<(), ChangeError>;
    /// A policy in memory only, bound under the policy `cover` (placed before it and before the policies already
    /// bound under it: the newest first; its selector within
    /// `cover`'s, same direction, both IPsec protect): `cover`'s nftables rules keep its traffic fail-closed, so
    /// nothing is reloaded or stored. Removed with [`SaPort::policy_del`].
    fn policy_bind(&self, p: PolicyParams, cover: &str) -> Result<(), ChangeError> {
        let _ = (p, cover);
        Err(ChangeError {
            key: "policy".into(),
            reason: "this engine binds no policies in memory".into(),
        })
    }
    /// Several changes applied as one: checked in order (each against the tables as the earlier ones left them),
    /// then put in force together (one new snapshot for the data plane), or none of them if one is refused. What
    /// a key-exchange driver installs a CHILD_SA with (its two SAs and its bound policies) and removes it with.
    /// This default applies them one by one and undoes nothing (for ports without a database of their own).
    fn batch(&self, ops: Vec<SaOp>) -> Result<(), ChangeError> {
        for op in ops {
            op.apply(self)?;
        }
        Ok(())
    }
    /// Packets authenticated so far on the inbound ESP SA with SPI `spi` (`None`: no such SA, or an engine that
    /// does not count): what tells a key-exchange driver that the peer is alive (dead peer detection waits).
    fn inbound_packets(&self, spi: u32) -> Option<u64> {
        let _ = spi;
        None
    }
    /// The acquires from now on: traffic for a protect policy that has no SAs (the policy's name and the flow), at
    /// most one per policy and second, as `netveil monitor` shows them. `None`: the engine reports none.
    fn acquires(&self) -> Option<std::sync::mpsc::Receiver<Acquire>> {
        None
    }
    /// The peers a key-exchange driver will negotiate SAs with, for the engine's peer filter (set once, at the
    /// driver's start: the SAs installed later then do not change the nftables table).
    fn set_kx_peers(&self, peers: KxPeers) -> Result<(), ChangeError> {
        let _ = peers;
        Ok(())
    }
    /// The caller owns the SAs and policies whose names start with `prefix` (`owner`: who, as the control socket's
    /// refusals name it; `None`: released): `netveil sa|policy add|update|del` on them are refused.
    fn claim(&self, prefix: &str, owner: Option<&str>) {
        let _ = (prefix, owner);
    }
    /// The policies added at runtime and kept in the state directory whose names start with `prefix`: at a
    /// driver's start, those a killed predecessor left (restored by the engine), which only the driver that owns
    /// the prefix can tell from its own.
    fn runtime_policies(&self, prefix: &str) -> Vec<String> {
        let _ = prefix;
        Vec::new()
    }

    /// PSP: runs `f` on the device's receive side (allocate a receive SPI and key, rotate the master keys, expire
    /// old SAs) under the device's lock; the receive socket's filter follows before this returns, so an SPI
    /// handed out after it is never refused. `Err`: no `[psp]` section, or the device is unusable.
    fn psp_rx(&self, f: &mut dyn FnMut(&mut netveil_psp::Device)) -> Result<(), String>;
    /// PSP: the transmit SA to the peer (replacing the previous one; packets under way finish with it).
    fn psp_install_tx(&self, sa: netveil_psp::TxSa) -> Result<(), String>;
    /// PSP: the key exchange's state the engine's answers show and drive (`status`, `rotate`).
    fn psp_kx_state(&self) -> Option<Arc<PspKxState>>;
}

#[cfg(test)]
mod tests;
