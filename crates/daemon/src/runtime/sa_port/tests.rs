//! Tests of the typed port: installs, checks and the stored form of policies.

use super::*;
use crate::engines::ip::port::IpPort;
use crate::engines::ip::{FragCache, Shared};
use netveil_ipsec::suite::EspSuite;
use netveil_sa::policy::Direction as PDir;
use netveil_wire::PacketBuf;

/// An engine with no SA and no policy in its file, its state directory new (as `netveil up --fresh-keys`).
fn engine(dir: &std::path::Path) -> Arc<Shared> {
    let mut c = crate::engines::ip::config::Config::parse(&format!(
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
        keys: KeyOrigin::Configured,
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
        0x45, 0, 0, 32, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 1, 0, 1, 10, 2, 0, 1, 0x13, 0x88, 0x13,
        0x89, 0, 12, 0, 0,
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
    let dir = crate::runtime::state::test_dir("sa-port");
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
    assert_eq!(
        seal(1).err(),
        Some(crate::engines::ip::drop::Drop::NoSa),
        "no SA yet"
    );
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
    assert_eq!(seal(8).err(), Some(crate::engines::ip::drop::Drop::NoSa));
    drop((pa, pb, a, b));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The typed calls keep the rules of the file: an outbound policy never names an inbound SA (nor an inbound SA
/// comes under a name an outbound policy uses), a bad replay window or key length is refused naming the key,
/// and a refused call changes nothing.
#[test]
fn typed_calls_are_checked_as_the_file_is() {
    let dir = crate::runtime::state::test_dir("sa-port-checks");
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
            crate::engines::ip::config::policy_from_table(p.to_table(), true, &[]).unwrap(),
        );
        assert_eq!(back.name, p.name);
        assert_eq!(back.direction, p.direction);
        assert_eq!(back.selector, p.selector);
        assert_eq!(back.action, p.action);
    }
}

/// A state directory that was never initialised (no `--fresh-keys`, no record): SAs with configured keys are
/// refused (no sequence mark, no receive floor: the keys may have been used before), the same SAs with keys a
/// key exchange negotiated are installed and start at sequence 1, and `sa update` of a negotiated SA (a rekey)
/// too. The control socket's tables always give configured keys.
#[test]
fn negotiated_keys_need_no_mark_or_floor_on_a_new_state_dir() {
    let dir = crate::runtime::state::test_dir("sa-port-new-dir");
    let c = crate::engines::ip::config::Config::parse(&format!(
        "[interface]\nstate_dir = \"{}\"\n",
        dir.join("a").display()
    ))
    .unwrap();
    assert!(!c.interface.state_dir.fresh_keys);
    let e = Arc::new(Shared::new(c).unwrap());
    let port: Arc<dyn SaPort> = Arc::new(IpPort(e.clone()));
    let out = |keys: KeyOrigin, spi: u32| {
        let mut sa = common("o", spi, "192.0.2.1", "192.0.2.2");
        sa.keys = keys;
        OutboundSaParams { sa, tfc_pad_to: 0 }
    };
    let inb = |keys: KeyOrigin, spi: u32| {
        let mut sa = common("i", spi, "192.0.2.1", "192.0.2.2");
        sa.keys = keys;
        InboundSaParams {
            sa,
            replay_window: 64,
        }
    };
    let err = port
        .sa_add_in(inb(KeyOrigin::Configured, 0x1010))
        .unwrap_err();
    assert!(err.reason.contains("no receive floor"), "{err:?}");
    let err = port
        .sa_add_out(out(KeyOrigin::Configured, 0x1011))
        .unwrap_err();
    assert!(err.reason.contains("no sequence mark"), "{err:?}");
    port.sa_add_in(inb(Negotiated::keys(), 0x1010)).unwrap();
    port.sa_add_out(out(Negotiated::keys(), 0x1011)).unwrap();
    // A rekey: new SPIs and keys in place.
    port.sa_update(AnySaParams::In(inb(Negotiated::keys(), 0x1020)))
        .unwrap();
    port.sa_update(AnySaParams::Out(out(Negotiated::keys(), 0x1021)))
        .unwrap();
    // The control socket's adapter (a `[[sa]]` table parsed into SaParams, then split by direction): configured
    // keys, whatever the parameters came from.
    let p = inb(Negotiated::keys(), 0x1030).into_params();
    assert_eq!(AnySaParams::from_params(p).keys(), KeyOrigin::Configured);
}

/// A batch is all or nothing, in every order of refusal: a refused op late in the batch (here a policy bound
/// under a policy that does not exist, then a duplicate SPI, then the removal of an unknown policy) undoes the SAs
/// added, the policy bound and the policy and SA removed before it, with no snapshot published in between; the
/// same ops without the bad one go in together.
#[test]
fn a_refused_op_undoes_the_whole_batch() {
    let dir = crate::runtime::state::test_dir("sa-port-batch");
    let a = engine(&dir);
    let port: Arc<dyn SaPort> = Arc::new(IpPort(a.clone()));
    let out_policy = |name: &str, sa: &str, sel: &str| PolicyParams {
        name: name.into(),
        direction: PDir::Out,
        selector: selector("10.1.0.0/16", sel),
        action: PolicyAction::Protect(vec![sa.into()]),
    };
    port.policy_add(out_policy("cover", "none", "10.2.0.0/16"), None)
        .unwrap();
    port.sa_add_out(OutboundSaParams {
        sa: common("old", 0x500, "192.0.2.1", "192.0.2.2"),
        tfc_pad_to: 0,
    })
    .unwrap();
    port.batch(vec![SaOp::Bind {
        policy: out_policy("old-o", "old", "10.2.9.0/24"),
        cover: "cover".into(),
    }])
    .unwrap();
    let state = |s: &Shared| {
        let snap = s.db.load();
        let sas: Vec<String> = snap
            .sad
            .iter()
            .map(|r| r.base().params.name.clone())
            .collect();
        let pols: Vec<String> = snap.policies.iter().map(|p| p.rule.name.clone()).collect();
        (sas, pols, snap.generation)
    };
    let before = state(&a);
    let new_ops = |bad: Option<SaOp>| {
        let mut ops = vec![
            SaOp::DelPolicy("old-o".into()),
            SaOp::DelSa("old".into()),
            SaOp::AddIn(InboundSaParams {
                sa: common("n-in", 0x600, "192.0.2.1", "192.0.2.2"),
                replay_window: 64,
            }),
            SaOp::AddOut(OutboundSaParams {
                sa: common("n-out", 0x601, "192.0.2.1", "192.0.2.2"),
                tfc_pad_to: 0,
            }),
            SaOp::Bind {
                policy: out_policy("n-o", "n-out", "10.2.1.0/24"),
                cover: "cover".into(),
            },
        ];
        ops.extend(bad);
        ops
    };
    for (bad, key) in [
        (
            SaOp::Bind {
                policy: out_policy("n-o2", "n-out", "10.2.2.0/24"),
                cover: "missing".into(),
            },
            "policy.cover",
        ),
        (
            SaOp::AddIn(InboundSaParams {
                sa: common("n-in2", 0x600, "192.0.2.1", "192.0.2.2"),
                replay_window: 64,
            }),
            "sa.spi",
        ),
        (SaOp::DelPolicy("nope".into()), "name"),
    ] {
        let e = port.batch(new_ops(Some(bad))).unwrap_err();
        assert_eq!(e.key, key, "{e:?}");
        assert_eq!(
            state(&a),
            before,
            "refused ({key}): nothing changed, nothing published"
        );
    }
    port.batch(new_ops(None)).unwrap();
    let (sas, pols, generation) = state(&a);
    assert_eq!(sas, ["n-in", "n-out"]);
    assert_eq!(pols, ["n-o", "cover"]);
    assert_ne!(generation, before.2, "published");
    drop((port, a));
    let _ = std::fs::remove_dir_all(&dir);
}
