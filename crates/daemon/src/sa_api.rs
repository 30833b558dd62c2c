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
//!   refused as a whole (see [`crate::ip_db`]).
//! - The control socket's `sa add|update|del` and `policy add|del` requests (TOML/JSON tables) are an adapter that
//!   parses the table into these types and makes the same calls ([`crate::ip_db::Db::sa_add`] and its siblings).
//!
//! PSP's key exchange changes the data plane through the same port: the device's receive SAs
//! ([`SaPort::psp_rx`], under the device's lock, the socket filter following before anything is sent to the peer)
//! and the transmit SA ([`SaPort::psp_install_tx`]).

use crate::config::{ConfigError, Interface, PolicyRule, DEFAULT_REPLAY_WINDOW, TFC_PAD_MAX};
use netveil_ipsec::sa::{Direction, Suite, UdpEncap};
use netveil_ipsec::suite::{Enc, SuiteError};
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
    /// The SA's name (the rule of [`crate::names`]): policies name their SAs by it.
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
        };
        if out {
            AnySaParams::Out(OutboundSaParams { sa, tfc_pad_to })
        } else {
            AnySaParams::In(InboundSaParams { sa, replay_window })
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

/// A policy: its name (the rule of [`crate::names`]), direction, selector and action.
#[derive(Clone, Debug)]
pub struct PolicyParams {
    pub name: String,
    pub direction: PolicyDirection,
    pub selector: Selector,
    pub action: PolicyAction,
}

impl PolicyParams {
    /// The parameters of a parsed policy (a `[[policy]]` table's).
    pub fn from_rule(p: PolicyRule) -> PolicyParams {
        use netveil_sa::policy::Action;
        PolicyParams {
            action: match p.action {
                Action::Protect(_) if p.psp => PolicyAction::ProtectPsp,
                Action::Protect(_) => PolicyAction::Protect(p.sa_names),
                Action::Bypass => PolicyAction::Bypass,
                Action::Discard => PolicyAction::Discard,
            },
            name: p.name,
            direction: p.direction,
            selector: p.selector,
        }
    }

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
/// use netveil_daemon::sa_api::{InboundSaParams, SaPort};
/// fn install(port: &dyn SaPort, peer_keys: InboundSaParams) {
///     let _ = port.sa_add_out(peer_keys);
/// }
/// ```
///
/// while the same call with the right direction compiles:
///
/// ```
/// use netveil_daemon::sa_api::{InboundSaParams, SaPort};
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

    /// PSP: runs `f` on the device's receive side (allocate a receive SPI and key, rotate the master keys, expire
    /// old SAs) under the device's lock; the receive socket's filter follows before this returns, so an SPI
    /// handed out after it is never refused. `Err`: no `[psp]` section, or the device is unusable.
    fn psp_rx(&self, f: &mut dyn FnMut(&mut netveil_psp::Device)) -> Result<(), String>;
    /// PSP: the transmit SA to the peer (replacing the previous one; packets under way finish with it).
    fn psp_install_tx(&self, sa: netveil_psp::TxSa) -> Result<(), String>;
    /// PSP: the key exchange's state the engine's answers show and drive (`status`, `rotate`).
    fn psp_kx_state(&self) -> Option<Arc<PspKxState>>;
}

fn err<T>(key: &str, reason: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError {
        key: key.into(),
        reason: reason.into(),
    })
}

/// Checks an SA by the configuration file's rules (errors name `sa.KEY`, as for a table added at runtime, and show
/// no value). `others`: the SAs it must not clash with (name; an inbound SA's SPI of the same protocol).
pub fn check_sa(
    p: &SaParams,
    interface: &Interface,
    others: &[SaParams],
) -> Result<(), ConfigError> {
    crate::names::check_name("sa.name", &p.name)?;
    if others.iter().any(|o| o.name == p.name) {
        return err("sa.name", "is used by another SA");
    }
    if p.spi < 256 {
        return err("sa.spi", format!("must be between 256 and {}", u32::MAX));
    }
    if let Mode::Tunnel { local, remote } = p.mode {
        if local.is_ipv4() != remote.is_ipv4() {
            return err(
                "sa.remote",
                "local and remote must be of the same address family",
            );
        }
    }
    let (enc_key, auth_key) = (&p.enc_key[..], &p.auth_key[..]);
    match p.suite {
        Suite::Esp(es) => {
            if es.enc == Enc::Null && es.integ.is_none() && !interface.allow_null_null {
                return err("sa.suite", SuiteError::NullNull.to_string());
            }
            if es.enc.is_aead() && es.integ.is_some() {
                return err("sa.suite", "an AEAD suite takes no integrity algorithm");
            }
            if !es.enc.is_aead() && es.enc != Enc::Null && es.integ.is_none() {
                return err(
                    "sa.suite",
                    "needs an integrity algorithm (e.g. aes128-sha256; value not shown)",
                );
            }
            let want = es.enc.key_len();
            if enc_key.len() != want {
                let salt = if es.enc.is_aead() {
                    ", key followed by the 4-byte salt"
                } else {
                    ""
                };
                return err(
                    "sa.enc_key",
                    format!(
                        "{} needs {want} bytes ({} hex digits{salt}), got {}",
                        es.name(),
                        want * 2,
                        enc_key.len()
                    ),
                );
            }
            let want = es.integ.map_or(0, |i| i.key_len());
            if auth_key.len() != want {
                return err(
                    "sa.auth_key",
                    format!(
                        "{} needs {want} bytes ({} hex digits), got {}",
                        es.name(),
                        want * 2,
                        auth_key.len()
                    ),
                );
            }
        }
        Suite::Ah(a) => {
            if !enc_key.is_empty() {
                return err("sa.enc_key", "AH does not encrypt: remove enc_key");
            }
            let want = a.integ.key_len();
            if auth_key.len() != want {
                return err(
                    "sa.auth_key",
                    format!(
                        "{} needs {want} bytes ({} hex digits), got {}",
                        a.name(),
                        want * 2,
                        auth_key.len()
                    ),
                );
            }
        }
    }
    if p.direction == Direction::In && !(64..=1 << 20).contains(&p.replay_window) {
        return err("sa.replay_window", "must be between 64 and 1048576");
    }
    if let Some(u) = p.encap {
        if matches!(p.suite, Suite::Ah(_)) {
            return err(
                "sa.encap",
                "UDP encapsulation (RFC 3948) is defined for ESP only",
            );
        }
        if u.local_port == 0 {
            return err("sa.local_port", "must be between 1 and 65535");
        }
        if u.remote_port == 0 {
            return err("sa.remote_port", "must be between 1 and 65535");
        }
    }
    if p.tfc_pad_to > TFC_PAD_MAX {
        return err(
            "sa.tfc_pad_to",
            format!("must be between 0 and {TFC_PAD_MAX}"),
        );
    }
    if p.tfc_pad_to > 0 && (p.mode == Mode::Transport || matches!(p.suite, Suite::Ah(_))) {
        return err("sa.tfc_pad_to", "TFC padding needs ESP in tunnel mode");
    }
    let l = &p.lifetime;
    for (soft, hard, f) in [
        (l.soft.bytes, l.hard.bytes, "bytes"),
        (l.soft.packets, l.hard.packets, "packets"),
        (l.soft.seconds, l.hard.seconds, "seconds"),
    ] {
        if soft == Some(0) {
            return err(&format!("sa.lifetime.soft_{f}"), "must be positive");
        }
        if hard == Some(0) {
            return err(&format!("sa.lifetime.hard_{f}"), "must be positive");
        }
        if let (Some(s), Some(h)) = (soft, hard) {
            if s >= h {
                return err(
                    &format!("sa.lifetime.soft_{f}"),
                    format!("must be below lifetime.hard_{f}"),
                );
            }
        }
    }
    if p.direction == Direction::In
        && others
            .iter()
            .any(|o| o.direction == Direction::In && o.spi == p.spi && o.protocol() == p.protocol())
    {
        return err(
            "sa.spi",
            "is used by another inbound SA of the same protocol",
        );
    }
    Ok(())
}

/// Checks a policy by the configuration file's rules (errors name `policy.KEY`, show no value). `sas`: the SAs
/// installed (a protect policy's SAs may be missing, never of the other direction); `has_psp`: a `[psp]` section.
/// Returns the policy as the engine keeps it.
pub fn check_policy(
    p: &PolicyParams,
    has_psp: bool,
    sas: &[SaParams],
) -> Result<PolicyRule, ConfigError> {
    use netveil_sa::policy::Action;
    crate::names::check_name("policy.name", &p.name)?;
    let names: &[String] = match &p.action {
        PolicyAction::Protect(n) => n,
        _ => &[],
    };
    for (j, n) in names.iter().enumerate() {
        crate::names::check_name(&format!("policy.sas[{j}]"), n)?;
    }
    let s = &p.selector;
    if s.src.addr().is_ipv4() != s.dst.addr().is_ipv4() {
        return err(
            "policy.dst",
            "src and dst must be of the same address family",
        );
    }
    for (r, key) in [
        (&s.src_ports, "policy.src_ports"),
        (&s.dst_ports, "policy.dst_ports"),
    ] {
        if r.start > r.end {
            return err(key, "is an empty port range (its start above its end)");
        }
    }
    if (!s.src_ports.is_any() || !s.dst_ports.is_any())
        && !matches!(s.proto, Some(6) | Some(17) | Some(132) | Some(136))
    {
        return err(
            "policy.proto",
            "port ranges need proto = \"tcp\", \"udp\" or \"sctp\"",
        );
    }
    let (action, psp) = match &p.action {
        PolicyAction::ProtectPsp => {
            if !has_psp {
                return err("policy.protocol", "'psp' needs a [psp] section");
            }
            (Action::Protect(0), true)
        }
        PolicyAction::Protect(names) => {
            if names.is_empty() {
                return err(
                    "policy.sas",
                    "a protect policy needs the SAs to use (e.g. sas = [\"a-to-b\"])",
                );
            }
            if names.len() > netveil_ipsec::bundle::MAX_BUNDLE {
                return err("policy.sas", "at most 4 SAs in a bundle");
            }
            let want = match p.direction {
                PolicyDirection::Out => Direction::Out,
                PolicyDirection::In => Direction::In,
            };
            for (j, n) in names.iter().enumerate() {
                if let Some(sa) = sas.iter().find(|s| &s.name == n) {
                    if sa.direction != want {
                        let w = crate::config::dir_word;
                        return err(
                            &format!("policy.sas[{j}]"),
                            format!(
                                "SA '{n}' is an {}bound SA: an {}bound policy uses only {}bound SAs",
                                w(sa.direction),
                                w(want),
                                w(want)
                            ),
                        );
                    }
                }
            }
            (Action::Protect(0), false)
        }
        PolicyAction::Bypass => (Action::Bypass, false),
        PolicyAction::Discard => (Action::Discard, false),
    };
    Ok(PolicyRule {
        name: p.name.clone(),
        direction: p.direction,
        selector: p.selector.clone(),
        action,
        sas: netveil_ipsec::bundle::Bundle::None,
        sa_names: names.to_vec(),
        psp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::{FragCache, Shared};
    use crate::ip_db::IpPort;
    use netveil_ipsec::suite::EspSuite;
    use netveil_sa::policy::Direction as PDir;
    use netveil_wire::PacketBuf;

    /// An engine with no SA and no policy in its file, its state directory new (as `netveil up --fresh-keys`).
    fn engine(dir: &std::path::Path) -> Arc<Shared> {
        let mut c = crate::config::Config::parse(&format!(
            "[interface]\nstate_dir = \"{}\"\n",
            dir.display()
        ))
        .unwrap();
        c.interface.state_dir.fresh_keys = true;
        Arc::new(Shared::new(c).unwrap())
    }

    fn common(name: &str, spi: u32, local: &str, remote: &str) -> SaCommon {
        let mut key = vec![0u8; 20];
        key[..4].copy_from_slice(&spi.to_be_bytes());
        SaCommon {
            name: name.into(),
            spi,
            suite: Suite::Esp(EspSuite::parse("aes128gcm16", false).unwrap()),
            mode: Mode::Tunnel {
                local: local.parse().unwrap(),
                remote: remote.parse().unwrap(),
            },
            enc_key: Zeroizing::new(key),
            auth_key: Zeroizing::new(Vec::new()),
            esn: false,
            lifetime: Lifetime::default(),
            encap: None,
        }
    }

    fn selector(src: &str, dst: &str) -> Selector {
        Selector {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            proto: None,
            src_ports: PortRange::ANY,
            dst_ports: PortRange::ANY,
        }
    }

    /// A UDP packet 10.1.0.1 -> 10.2.0.1 carrying `n`.
    fn packet(n: u32) -> PacketBuf {
        let mut p = vec![
            0x45, 0, 0, 32, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 1, 0, 1, 10, 2, 0, 1, 0x13, 0x88,
            0x13, 0x89, 0, 12, 0, 0,
        ];
        p.extend_from_slice(&n.to_be_bytes());
        let c = netveil_wire::checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        PacketBuf::from_slice(&p, 256, 640)
    }

    /// An SA pair and policies installed through the typed port alone (no TOML anywhere): a's outbound SA and
    /// policy seal a packet under the SPI given, b's inbound SA and policy open it; before the SAs are there the
    /// packet is dropped for want of an SA, and after the outbound SA is removed again too.
    #[test]
    fn sa_pair_and_policies_through_the_typed_port() {
        let dir = crate::state::test_dir("sa-port");
        let (a, b) = (engine(&dir.join("a")), engine(&dir.join("b")));
        let (pa, pb): (Arc<dyn SaPort>, Arc<dyn SaPort>) =
            (Arc::new(IpPort(a.clone())), Arc::new(IpPort(b.clone())));
        let seal = |n: u32| {
            let mut p = packet(n);
            let snap = a.db.load();
            a.process_out(&snap, &mut p, a.now(), &mut FragCache::default())
                .map(|_| p)
        };
        pa.policy_add(
            PolicyParams {
                name: "a-out".into(),
                direction: PDir::Out,
                selector: selector("10.1.0.0/16", "10.2.0.0/16"),
                action: PolicyAction::Protect(vec!["a-to-b".into()]),
            },
            None,
        )
        .unwrap();
        assert_eq!(seal(1).err(), Some(crate::ip_drop::Drop::NoSa), "no SA yet");
        pa.sa_add_out(OutboundSaParams {
            sa: common("a-to-b", 0x4242, "192.0.2.1", "192.0.2.2"),
            tfc_pad_to: 0,
        })
        .unwrap();
        pb.sa_add_in(InboundSaParams {
            sa: common("a-to-b", 0x4242, "192.0.2.2", "192.0.2.1"),
            replay_window: 64,
        })
        .unwrap();
        pb.policy_add(
            PolicyParams {
                name: "b-in".into(),
                direction: PDir::In,
                selector: selector("10.1.0.0/16", "10.2.0.0/16"),
                action: PolicyAction::Protect(vec!["a-to-b".into()]),
            },
            Some(0),
        )
        .unwrap();
        let mut wire = seal(7).expect("sealed through the SA added by the port");
        assert_eq!(wire.data()[9], 50, "ESP");
        assert_eq!(
            u32::from_be_bytes(wire.data()[20..24].try_into().unwrap()),
            0x4242
        );
        let snap = b.db.load();
        b.process_in(&snap, &mut wire, b.now(), &mut FragCache::default())
            .expect("opened by b's inbound SA");
        assert_eq!(&wire.data()[28..32], &7u32.to_be_bytes());
        // The listing shows each SA in its direction.
        let sa = |s: &Shared| {
            s.db.load()
                .sad
                .iter()
                .map(|r| (r.base().params.name.clone(), r.base().params.direction))
                .collect::<Vec<_>>()
        };
        assert_eq!(sa(&a), [("a-to-b".to_string(), Direction::Out)]);
        assert_eq!(sa(&b), [("a-to-b".to_string(), Direction::In)]);
        pa.sa_del("a-to-b").unwrap();
        assert_eq!(seal(8).err(), Some(crate::ip_drop::Drop::NoSa));
        drop((pa, pb, a, b));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The typed calls keep the rules of the file: an outbound policy never names an inbound SA (nor an inbound SA
    /// comes under a name an outbound policy uses), a bad replay window or key length is refused naming the key,
    /// and a refused call changes nothing.
    #[test]
    fn typed_calls_are_checked_as_the_file_is() {
        let dir = crate::state::test_dir("sa-port-checks");
        let a = engine(&dir);
        let port: Arc<dyn SaPort> = Arc::new(IpPort(a.clone()));
        let inbound = |replay_window| InboundSaParams {
            sa: common("x", 0x777, "192.0.2.1", "192.0.2.2"),
            replay_window,
        };
        assert_eq!(
            port.sa_add_in(inbound(8)).unwrap_err().key,
            "sa.replay_window"
        );
        let mut short = common("y", 0x778, "192.0.2.1", "192.0.2.2");
        short.enc_key.truncate(16);
        assert_eq!(
            port.sa_add_out(OutboundSaParams {
                sa: short,
                tfc_pad_to: 0
            })
            .unwrap_err()
            .key,
            "sa.enc_key"
        );
        port.sa_add_in(inbound(64)).unwrap();
        let out_policy = PolicyParams {
            name: "p".into(),
            direction: PDir::Out,
            selector: selector("10.1.0.0/16", "10.2.0.0/16"),
            action: PolicyAction::Protect(vec!["x".into()]),
        };
        let e = port.policy_add(out_policy.clone(), None).unwrap_err();
        assert_eq!(e.key, "policy.sas[0]");
        assert!(a.db.load().policies.is_empty());
        // With the inbound SA gone, the policy may wait for an outbound "x"; an inbound one is then refused.
        port.sa_del("x").unwrap();
        port.policy_add(out_policy, None).unwrap();
        assert_eq!(port.sa_add_in(inbound(64)).unwrap_err().key, "sa.direction");
        assert!(a.db.load().sad.iter().next().is_none());
        // An update keeps the direction.
        port.sa_add_out(OutboundSaParams {
            sa: common("x", 0x779, "192.0.2.1", "192.0.2.2"),
            tfc_pad_to: 0,
        })
        .unwrap();
        assert_eq!(
            port.sa_update(AnySaParams::In(inbound(64)))
                .unwrap_err()
                .key,
            "sa.direction"
        );
        drop((port, a));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A policy added through the port is kept as a `[[policy]]` table that the configuration's parser reads back
    /// as the same policy (what a successor of a killed daemon restores).
    #[test]
    fn policy_params_round_trip_through_their_table() {
        let mut sel = selector("10.1.0.0/16", "2001:db8::/32");
        sel.dst = "10.2.0.9/32".parse().unwrap();
        sel.proto = Some(6);
        sel.dst_ports = PortRange {
            start: 443,
            end: 444,
        };
        for action in [
            PolicyAction::Protect(vec!["s1".into(), "s2".into()]),
            PolicyAction::ProtectPsp,
            PolicyAction::Bypass,
            PolicyAction::Discard,
        ] {
            let p = PolicyParams {
                name: "rt".into(),
                direction: PDir::In,
                selector: sel.clone(),
                action,
            };
            let back = PolicyParams::from_rule(
                crate::config::policy_from_table(p.to_table(), true, &[]).unwrap(),
            );
            assert_eq!(back.name, p.name);
            assert_eq!(back.direction, p.direction);
            assert_eq!(back.selector, p.selector);
            assert_eq!(back.action, p.action);
        }
    }
}
