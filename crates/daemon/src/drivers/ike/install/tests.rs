//! CHILD_SAs as the state machine reports them, installed in two real IP engines (their typed ports, no TUN):
//! after install each side seals with its outbound SA and the other opens with its inbound one; a rekey
//! (`replaces`) swaps the keys in place, packets sealed before it still open (make-before-break), the policies
//! are not duplicated; after ChildSaDown the traffic is dropped for want of an SA, and both SAs and every
//! policy are gone.

use super::*;
use crate::engines::ip::port::IpPort;
use crate::engines::ip::{FragCache, Shared, TxRecord};
use netveil_ike::config::Mode as IkeMode;
use netveil_ike::event::IkeSaId;
use netveil_ike::keys::Secret;
use netveil_ike::proposal::{Proposal, Protocol};
use netveil_wire::PacketBuf;
use std::net::SocketAddr;

fn engine(dir: &std::path::Path) -> Arc<Shared> {
    let mut c = crate::engines::ip::config::Config::parse(&format!(
        "[interface]\nstate_dir = \"{}\"\n",
        dir.display()
    ))
    .unwrap();
    c.interface.state_dir.fresh_keys = true;
    Arc::new(Shared::new(c).unwrap())
}

fn ts(s: &str) -> TsSpec {
    let n: ipnet::IpNet = s.parse().unwrap();
    TsSpec {
        addr: n.addr(),
        prefix: n.prefix_len(),
        protocol: 0,
        ports: (0, 65535),
    }
}

fn key(seed: u8, n: usize) -> Secret {
    Secret::new(
        &(0..n)
            .map(|i| seed.wrapping_add(i as u8))
            .collect::<Vec<u8>>(),
    )
}

/// The CHILD_SA as `me` sees it: (a's spi, b's spi) = the SPIs a and b receive on; keys per direction.
#[allow(clippy::too_many_arguments)]
fn child(
    proposal: &str,
    a_side: bool,
    spi_a: u32,
    spi_b: u32,
    seed: u8,
    encap: bool,
    replaces: Option<u32>,
) -> ChildSa {
    let p = Proposal::parse(Protocol::Esp, proposal).unwrap();
    let (ek, ik) = {
        let e = p.encr()[0];
        (e.keymat_len(), p.integ().first().map_or(0, |i| i.key_len()))
    };
    // a -> b keys and b -> a keys.
    let ab = EspSa {
        spi: spi_b,
        encr_key: key(seed, ek),
        integ_key: key(seed.wrapping_add(100), ik),
    };
    let ba = EspSa {
        spi: spi_a,
        encr_key: key(seed.wrapping_add(50), ek),
        integ_key: key(seed.wrapping_add(150), ik),
    };
    let port = if encap { 4500 } else { 500 };
    let a: SocketAddr = SocketAddr::new("192.0.2.1".parse().unwrap(), port);
    let b: SocketAddr = SocketAddr::new("192.0.2.2".parse().unwrap(), port);
    let (local, remote, inbound, outbound, lts, rts) = if a_side {
        (a, b, ba, ab, "10.1.0.0/16", "10.2.0.0/16")
    } else {
        (b, a, ab, ba, "10.2.0.0/16", "10.1.0.0/16")
    };
    ChildSa {
        ike_sa: IkeSaId(1),
        connection: "site".into(),
        child: "net".into(),
        proposal: p,
        mode: IkeMode::Tunnel,
        local,
        remote,
        udp_encap: encap,
        inbound,
        outbound,
        local_ts: vec![ts(lts)],
        remote_ts: vec![ts(rts)],
        replay_window: 64,
        replaces,
    }
}

/// A UDP packet `src` -> `dst` carrying `n`.
fn packet(src: [u8; 4], dst: [u8; 4], n: u32) -> PacketBuf {
    let mut p = vec![
        0x45, 0, 0, 32, 0, 0, 0x40, 0, 64, 17, 0, 0, src[0], src[1], src[2], src[3], dst[0],
        dst[1], dst[2], dst[3], 0x13, 0x88, 0x13, 0x89, 0, 12, 0, 0,
    ];
    p.extend_from_slice(&n.to_be_bytes());
    let c = netveil_wire::checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    PacketBuf::from_slice(&p, 256, 640)
}

fn seal(s: &Shared, p: PacketBuf) -> Result<(PacketBuf, TxRecord), crate::engines::ip::drop::Drop> {
    let mut p = p;
    let snap = s.db.load();
    s.process_out(&snap, &mut p, s.now(), &mut FragCache::default())
        .map(|r| (p, r))
}

fn open(s: &Shared, mut p: PacketBuf) -> Result<u32, crate::engines::ip::drop::Drop> {
    let snap = s.db.load();
    s.process_in(&snap, &mut p, s.now(), &mut FragCache::default())?;
    Ok(u32::from_be_bytes(p.data()[28..32].try_into().unwrap()))
}

fn spi_of(p: &PacketBuf) -> u32 {
    u32::from_be_bytes(p.data()[20..24].try_into().unwrap())
}

fn names(s: &Shared) -> (Vec<String>, Vec<String>) {
    let snap = s.db.load();
    let mut sas: Vec<String> = snap
        .sad
        .iter()
        .map(|r| r.base().params.name.clone())
        .collect();
    sas.sort();
    let mut pols: Vec<String> = snap.policies.iter().map(|p| p.rule.name.clone()).collect();
    pols.sort();
    (sas, pols)
}

fn both_ways(
    proposal: &str,
) -> (
    std::path::PathBuf,
    Arc<Shared>,
    Arc<Shared>,
    Installer,
    Installer,
) {
    // One directory per call: several tests run the same proposal at once, in one process.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = crate::runtime::state::test_dir(&format!("ike-install-{proposal}-{n}"));
    let (a, b) = (engine(&dir.join("a")), engine(&dir.join("b")));
    let mut ia = Installer::new(Arc::new(IpPort(a.clone())));
    let mut ib = Installer::new(Arc::new(IpPort(b.clone())));
    assert_eq!(
        seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 0)).err(),
        Some(crate::engines::ip::drop::Drop::PolicyDiscard),
        "no policy yet: dropped"
    );
    ia.install(&child(
        proposal,
        true,
        0xa000_0001,
        0xb000_0001,
        1,
        false,
        None,
    ))
    .unwrap();
    ib.install(&child(
        proposal,
        false,
        0xa000_0001,
        0xb000_0001,
        1,
        false,
        None,
    ))
    .unwrap();
    (dir, a, b, ia, ib)
}

#[test]
fn installed_child_carries_traffic_both_ways_and_down_removes_it() {
    for proposal in [
        "aes256gcm16",
        "aes128-sha256",
        "chacha20poly1305",
        "3des-sha1",
    ] {
        let (dir, a, b, mut ia, mut ib) = both_ways(proposal);
        let (w, _) = seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 7)).expect(proposal);
        assert_eq!(w.data()[9], 50, "ESP");
        assert_eq!(
            spi_of(&w),
            0xb000_0001,
            "a seals with its outbound SA (b's SPI)"
        );
        assert_eq!(
            open(&b, w),
            Ok(7),
            "{proposal}: b opens with its inbound SA"
        );
        let (w, _) = seal(&b, packet([10, 2, 0, 1], [10, 1, 0, 1], 8)).unwrap();
        assert_eq!(spi_of(&w), 0xa000_0001);
        assert_eq!(open(&a, w), Ok(8));
        // A packet sealed with keys other than b's inbound SA's does not open.
        let mut w = seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 9)).unwrap().0;
        let n = w.data().len();
        w.data_mut()[n - 1] ^= 1;
        assert!(open(&b, w).is_err());
        assert_eq!(
            names(&a),
            (
                vec!["ike-1-in".to_string(), "ike-1-out".into()],
                vec!["ike-1-i0".to_string(), "ike-1-o0".into()]
            )
        );
        // Down: wrong outbound SPI is not this child; the right pair removes everything.
        assert!(!ia.remove(0xa000_0001, 0x1234).unwrap());
        assert!(ia.remove(0xa000_0001, 0xb000_0001).unwrap());
        assert_eq!(names(&a), (vec![], vec![]));
        assert!(ia.is_empty());
        assert_eq!(
            seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 10)).err(),
            Some(crate::engines::ip::drop::Drop::PolicyDiscard),
            "after down: dropped, never sent in clear"
        );
        let w = seal(&b, packet([10, 2, 0, 1], [10, 1, 0, 1], 10))
            .unwrap()
            .0;
        assert!(open(&a, w).is_err(), "a's inbound SA is gone");
        assert!(
            !ia.remove(0xa000_0001, 0xb000_0001).unwrap(),
            "twice: no-op"
        );
        ib.remove_all();
        assert_eq!(names(&b), (vec![], vec![]));
        drop((a, b, ia, ib));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn rekey_replaces_in_place_make_before_break() {
    let (dir, a, b, mut ia, mut ib) = both_ways("aes128gcm16");
    let before = seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 1)).unwrap().0;
    // The rekeyed CHILD_SA: new SPIs and keys, replacing the old inbound SPIs.
    let n_a = child(
        "aes128gcm16",
        true,
        0xa000_0002,
        0xb000_0002,
        9,
        false,
        Some(0xa000_0001),
    );
    let n_b = child(
        "aes128gcm16",
        false,
        0xa000_0002,
        0xb000_0002,
        9,
        false,
        Some(0xb000_0001),
    );
    assert_eq!(ib.install(&n_b).unwrap(), 1, "same instance");
    assert_eq!(ia.install(&n_a).unwrap(), 1);
    // The old outbound SA seals until the old CHILD_SA goes (the peer may not have the new inbound SA yet); the
    // peer's replaced inbound SA still opens it.
    let (w, _) = seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 2)).unwrap();
    assert_eq!(
        spi_of(&w),
        0xb000_0001,
        "the old outbound SA seals until the DELETE"
    );
    assert_eq!(open(&b, w), Ok(2));
    assert_eq!(
        open(&b, before),
        Ok(1),
        "a packet under way with the old SA still opens"
    );
    assert_eq!(names(&a).1.len(), 2, "policies not duplicated");
    // The old CHILD_SA's ChildSaDown (the rekey's DELETE) moves the outbound SA to the new keys.
    assert!(!ia.remove(0xa000_0001, 0xb000_0001).unwrap());
    let mut sas = names(&a).0;
    sas.dedup(); // the engine lists the retiring old inbound SA under its name too, until it expires
    assert_eq!(sas, ["ike-1-in", "ike-1-out"]);
    let (w, _) = seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 3)).unwrap();
    assert_eq!(spi_of(&w), 0xb000_0002, "the new outbound SA seals");
    assert_eq!(open(&b, w), Ok(3));
    // A second ChildSaDown of the old CHILD_SA changes nothing.
    assert!(!ia.remove(0xa000_0001, 0xb000_0001).unwrap());
    // A rekey with other selectors moves the policies.
    let mut n2 = child(
        "aes128gcm16",
        true,
        0xa000_0003,
        0xb000_0003,
        5,
        false,
        Some(0xa000_0002),
    );
    n2.remote_ts = vec![ts("10.9.0.0/16")];
    ia.install(&n2).unwrap();
    assert!(!ia.remove(0xa000_0002, 0xb000_0002).unwrap());
    assert_eq!(names(&a).1.len(), 2);
    assert_eq!(
        seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 4)).err(),
        Some(crate::engines::ip::drop::Drop::PolicyDiscard),
        "the old selectors' policies are gone"
    );
    let (w, _) = seal(&a, packet([10, 1, 0, 1], [10, 9, 0, 1], 5)).unwrap();
    assert_eq!(spi_of(&w), 0xb000_0003);
    ia.remove_all();
    ib.remove_all();
    drop((a, b, ia, ib));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Anti-replay on SAs the IKE installer adds (built from negotiated keys: `KeyOrigin::Negotiated`, another
/// constructor than static SAs' with their durable floors), with a 64-packet window: a duplicate inside the window,
/// a packet left of it and a jump far ahead of it, for a new CHILD_SA, after another CHILD_SA's install (a change of
/// the engine's tables), and for a rekeyed one, through the retiring SA too. Each refusal is counted on the SA.
#[test]
fn installed_child_refuses_replays() {
    use crate::engines::ip::drop::Drop;
    use netveil_ipsec::Drop as D;
    const WINDOW: u32 = 64;
    let (dir, a, b, mut ia, mut ib) = both_ways("aes128gcm16");
    let sealed = |from: &Shared, n: u32| {
        let w = seal(from, packet([10, 1, 0, 1], [10, 2, 0, 1], n))
            .unwrap()
            .0;
        assert_eq!(spi_of(&w), 0xb000_0001);
        w
    };
    let replayed = |s: &Shared| {
        let snap = s.db.load();
        let sa = snap
            .sad
            .iter()
            .find(|r| r.base().params.name == "ike-1-in")
            .expect("b's inbound SA");
        sa.base()
            .counters
            .replayed
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    // a's packets, sequence numbers 1 ..= 1000: packet k has ESP sequence k, payload k.
    let w: Vec<PacketBuf> = (1..=1000).map(|k| sealed(&a, k)).collect();
    let seq = |p: &PacketBuf| u32::from_be_bytes(p.data()[24..28].try_into().unwrap());
    assert_eq!((seq(&w[0]), seq(&w[999])), (1, 1000));
    let at = |k: u32| w[k as usize - 1].clone();

    // In-window duplicate.
    assert_eq!(open(&b, at(1)), Ok(1));
    assert_eq!(
        open(&b, at(1)),
        Err(Drop::Ipsec(D::Replayed)),
        "a duplicate"
    );
    assert_eq!(open(&b, at(3)), Ok(3));
    assert_eq!(open(&b, at(2)), Ok(2), "out of order inside the window");
    assert_eq!(open(&b, at(2)), Err(Drop::Ipsec(D::Replayed)));
    // Far ahead: taken, and the window moves with it.
    assert_eq!(open(&b, at(900)), Ok(900), "far ahead of the window");
    assert_eq!(open(&b, at(900)), Err(Drop::Ipsec(D::Replayed)));
    // Old: left of the window (never seen, or seen) is refused.
    assert_eq!(
        open(&b, at(900 - WINDOW)),
        Err(Drop::Ipsec(D::TooOld)),
        "left of the window, never seen"
    );
    assert_eq!(open(&b, at(3)), Err(Drop::Ipsec(D::TooOld)), "old and seen");
    assert_eq!(
        open(&b, at(900 - WINDOW + 1)),
        Ok(900 - WINDOW + 1),
        "the window's left edge"
    );
    assert_eq!(replayed(&b), 5);

    // Another CHILD_SA's install changes the engine's tables: this one's window survives it.
    let mut other = child(
        "aes128gcm16",
        false,
        0xa000_0009,
        0xb000_0009,
        7,
        false,
        None,
    );
    other.local_ts = vec![ts("10.7.0.0/16")];
    other.remote_ts = vec![ts("10.8.0.0/16")];
    assert_eq!(ib.install(&other).unwrap(), 2);
    assert_eq!(
        open(&b, at(900)),
        Err(Drop::Ipsec(D::Replayed)),
        "after a change"
    );
    assert_eq!(
        open(&b, at(1)),
        Err(Drop::Ipsec(D::TooOld)),
        "after a change"
    );
    assert_eq!(open(&b, at(901)), Ok(901));

    // Rekeyed: the old inbound SA retires (still opens packets under way, once each); the new one has a window of
    // its own.
    let n_b = child(
        "aes128gcm16",
        false,
        0xa000_0002,
        0xb000_0002,
        9,
        false,
        Some(0xb000_0001),
    );
    let n_a = child(
        "aes128gcm16",
        true,
        0xa000_0002,
        0xb000_0002,
        9,
        false,
        Some(0xa000_0001),
    );
    ib.install(&n_b).unwrap();
    ia.install(&n_a).unwrap();
    assert_eq!(open(&b, at(902)), Ok(902), "under way with the old SA");
    assert_eq!(
        open(&b, at(902)),
        Err(Drop::Ipsec(D::Replayed)),
        "the retiring SA's window"
    );
    assert_eq!(open(&b, at(901)), Err(Drop::Ipsec(D::Replayed)));
    assert!(!ia.remove(0xa000_0001, 0xb000_0001).unwrap());
    let fresh: Vec<PacketBuf> = (1..=200)
        .map(|k| seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], k)).unwrap().0)
        .collect();
    assert_eq!(spi_of(&fresh[0]), 0xb000_0002, "the new outbound SA seals");
    assert_eq!(open(&b, fresh[0].clone()), Ok(1));
    assert_eq!(open(&b, fresh[0].clone()), Err(Drop::Ipsec(D::Replayed)));
    assert_eq!(open(&b, fresh[199].clone()), Ok(200));
    assert_eq!(open(&b, fresh[1].clone()), Err(Drop::Ipsec(D::TooOld)));
    ia.remove_all();
    ib.remove_all();
    drop((a, b, ia, ib));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn udp_encapsulated_child_leaves_on_the_nat_t_ports() {
    let dir = crate::runtime::state::test_dir("ike-install-encap");
    let a = engine(&dir);
    let mut ia = Installer::new(Arc::new(IpPort(a.clone())));
    ia.install(&child("aes128gcm16", true, 0xa100, 0xb100, 3, true, None))
        .unwrap();
    let (w, rec) = seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 1)).unwrap();
    match rec {
        TxRecord::NatT(d) => {
            assert_eq!(d.sport, 4500);
            assert_eq!(d.to, "192.0.2.2:4500".parse().unwrap());
        }
        _ => panic!("not ESP-in-UDP"),
    }
    assert_eq!(
        &w.data()[..4],
        &0xb100u32.to_be_bytes(),
        "the UDP payload is ESP"
    );
    drop((a, ia));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A refused install leaves nothing behind: the outbound SA's name is taken, so the inbound one added first is
/// removed again.
#[test]
fn refused_install_changes_nothing() {
    let dir = crate::runtime::state::test_dir("ike-install-refused");
    let a = engine(&dir);
    let port: Arc<dyn SaPort> = Arc::new(IpPort(a.clone()));
    let mut ia = Installer::new(port.clone());
    let c = child("aes128gcm16", true, 0xa100, 0xb100, 3, false, None);
    // Occupy ike-1-out.
    let mut blocker = child("aes128gcm16", true, 0xa700, 0xb700, 3, false, None);
    blocker.replay_window = 64;
    let mut other = Installer::new(port.clone());
    other.install(&blocker).unwrap();
    port.policy_del("ike-1-o0").unwrap();
    port.policy_del("ike-1-i0").unwrap();
    port.sa_del("ike-1-in").unwrap();
    let e = ia.install(&c).unwrap_err();
    assert!(e.to_string().contains("ike-1-out"), "{e}");
    assert_eq!(names(&a), (vec!["ike-1-out".to_string()], vec![]));
    assert!(ia.is_empty());
    drop((a, ia, other, port));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_killed_predecessors_policies_of_the_same_name_are_replaced() {
    let (dir, a, b, ia, ib) = both_ways("aes128gcm16");
    // The predecessor dies (no cleanup): its SAs are gone, its policies stay (the engine restores them from the
    // state directory), and a new driver starts with a new installer.
    drop(ia);
    let port = Arc::new(IpPort(a.clone()));
    port.sa_del("ike-1-out").unwrap();
    port.sa_del("ike-1-in").unwrap();
    assert_eq!(names(&a).1.len(), 2);
    assert_eq!(
        seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 1)).err(),
        Some(crate::engines::ip::drop::Drop::NoSa),
        "the stale policies keep the traffic blocked"
    );
    let mut ia = Installer::new(port);
    let n = child(
        "aes128gcm16",
        true,
        0xa000_0002,
        0xb000_0002,
        4,
        false,
        None,
    );
    assert_eq!(ia.install(&n).unwrap(), 1);
    assert_eq!(
        names(&a),
        (
            vec!["ike-1-in".to_string(), "ike-1-out".into()],
            vec!["ike-1-i0".to_string(), "ike-1-o0".into()]
        )
    );
    let (w, _) = seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 2)).unwrap();
    assert_eq!(spi_of(&w), 0xb000_0002, "the new CHILD_SA's SA seals");
    drop((a, b, ia, ib));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `[ike]` connection `site` (child `net`, 10.1.0.0/16 <-> 10.2.0.0/16, peer 192.0.2.2) as side a sees it.
fn site(start_action: &str) -> Vec<netveil_ike::config::Connection> {
    let text = format!(
        r#"
[[connection]]
name = "site"
local_addrs = ["192.0.2.1"]
remote_addrs = ["192.0.2.2"]
proposals = ["aes256gcm16-prfsha384-x25519"]
psk = "0x000102030405060708090a0b0c0d0e0f10111213"
local = {{ id = "192.0.2.1", auth = "psk" }}
remote = {{ id = "192.0.2.2", auth = "psk" }}

[[connection.children]]
name = "net"
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.2.0.0/16"]
esp_proposals = ["aes128gcm16"]
start_action = "{start_action}"
"#
    );
    let v: toml::Value = toml::from_str(&text).unwrap();
    super::super::config::parse(v, std::path::Path::new("/"))
        .unwrap()
        .connections
}

/// A narrowed copy of side a's child: 10.1.2.0/24 <-> 10.2.3.0/24.
fn narrowed(mut c: ChildSa) -> ChildSa {
    c.local_ts = vec![ts("10.1.2.0/24")];
    c.remote_ts = vec![ts("10.2.3.0/24")];
    c
}

/// Policies at start: before anything is negotiated the configured child's traffic is dropped and reported as an
/// acquire (naming the configured policy, which says the child); a negotiated CHILD_SA (narrowed) binds its
/// policies in memory just before the configured ones and leaves the nftables table's text as it was (the SAs'
/// peer is in the peer filter from the start): installing it runs no `nft`. The old path (no configured policy
/// covers the selectors) changes the table. Down removes the bound policies only; the configured ones stay and
/// drop the traffic again.
#[test]
fn child_binds_under_start_policies_and_leaves_the_nft_table_alone() {
    let dir = crate::runtime::state::test_dir("ike-install-traps");
    let a = engine(&dir.join("a"));
    let mut ia = Installer::new(Arc::new(IpPort(a.clone())));
    let acquires = a.db.acquires();
    let nft = || a.db.nft_text("netveil_t").unwrap_or_default();
    let empty = nft();
    ia.install_traps(&site("trap")).unwrap();
    assert_eq!(
        names(&a).1,
        vec!["ike-c1-i0".to_string(), "ike-c1-o0".into()]
    );
    assert!(ia.traps[0].armed);
    let with_traps = nft();
    assert_ne!(
        with_traps, empty,
        "the configured policies have nftables rules"
    );
    assert!(
        with_traps.contains("192.0.2.2"),
        "the peer is in the peer filter from the start: {with_traps}"
    );
    assert_eq!(
        seal(&a, packet([10, 1, 2, 1], [10, 2, 3, 1], 1)).err(),
        Some(crate::engines::ip::drop::Drop::NoSa),
        "covered, no SA yet: dropped, never sent in clear"
    );
    let got = acquires.try_recv().expect("an acquire");
    assert_eq!(got.policy, "ike-c1-o0");
    assert!(got.flow.starts_with("10.1.2.1 -> 10.2.3.1"), "{}", got.flow);
    assert_eq!(ia.trap_of(&got.policy).unwrap().child, "net");

    let c = narrowed(child(
        "aes128gcm16",
        true,
        0xa000_0001,
        0xb000_0001,
        1,
        false,
        None,
    ));
    ia.install(&c).unwrap();
    assert_eq!(
        nft(),
        with_traps,
        "a negotiated child changes no nftables rule"
    );
    let order: Vec<String> =
        a.db.load()
            .policies
            .iter()
            .map(|p| p.rule.name.clone())
            .collect();
    assert_eq!(order, ["ike-1-o0", "ike-c1-o0", "ike-1-i0", "ike-c1-i0"]);
    assert!(ia.child_up("site", "net"));
    let (w, _) = seal(&a, packet([10, 1, 2, 1], [10, 2, 3, 1], 2)).expect("sealed");
    assert_eq!(spi_of(&w), 0xb000_0001);
    assert_eq!(
        seal(&a, packet([10, 1, 9, 1], [10, 2, 3, 1], 3)).err(),
        Some(crate::engines::ip::drop::Drop::NoSa),
        "outside the narrowed selectors, inside the configured ones: still dropped"
    );
    // Down: the bound policies go, the configured ones stay.
    assert!(ia.remove(0xa000_0001, 0xb000_0001).unwrap());
    assert_eq!(
        names(&a),
        (vec![], vec!["ike-c1-i0".to_string(), "ike-c1-o0".into()])
    );
    assert_eq!(nft(), with_traps);
    assert_eq!(
        seal(&a, packet([10, 1, 2, 1], [10, 2, 3, 1], 4)).err(),
        Some(crate::engines::ip::drop::Drop::NoSa)
    );
    // The configured policy cannot go while a child is bound under it.
    ia.install(&narrowed(child(
        "aes128gcm16",
        true,
        0xa000_0002,
        0xb000_0002,
        2,
        false,
        None,
    )))
    .unwrap();
    let e = a.db.policy_del("ike-c1-o0", a.now()).unwrap_err();
    assert!(e.reason.contains("bound under"), "{}", e.reason);
    ia.remove_all();

    // The old path: selectors no configured policy covers get policies of their own, with nftables rules.
    let mut other = child(
        "aes128gcm16",
        true,
        0xa000_0003,
        0xb000_0003,
        3,
        false,
        None,
    );
    other.local_ts = vec![ts("10.7.0.0/16")];
    ia.install(&other).unwrap();
    assert_ne!(nft(), with_traps, "uncovered selectors: rules of their own");
    ia.remove_all();
    assert_eq!(nft(), with_traps);
    drop((a, ia));
    let _ = std::fs::remove_dir_all(&dir);
}

/// ESN negotiated (`aes128gcm16-esn`): both SAs are installed with extended sequence numbers and carry traffic.
#[test]
fn esn_proposal_installs_esn_sas() {
    let (dir, a, b, ia, ib) = both_ways("aes128gcm16-esn");
    for s in [&a, &b] {
        let snap = s.db.load();
        let sas: Vec<_> = snap.sad.iter().map(|r| r.base().params.esn).collect();
        assert_eq!(sas, [true, true], "both SAs use ESN");
    }
    let (w, _) = seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 5)).unwrap();
    assert_eq!(open(&b, w), Ok(5));
    drop((a, b, ia, ib));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The control socket's changes to the driver's `ike-*` SAs and policies are refused once it claimed them.
#[test]
fn claimed_names_have_an_owner() {
    let dir = crate::runtime::state::test_dir("ike-install-claim");
    let a = engine(&dir.join("a"));
    let mut ia = Installer::new(Arc::new(IpPort(a.clone())));
    assert_eq!(a.db.owner_of("ike-c1-o0"), None);
    ia.install_traps(&site("none")).unwrap();
    assert!(!ia.traps[0].armed, "start_action = none: not trapped");
    assert_eq!(a.db.owner_of("ike-c1-o0").as_deref(), Some(OWNER));
    assert_eq!(a.db.owner_of("mine"), None);
    drop((a, ia));
    let _ = std::fs::remove_dir_all(&dir);
}

/// After a restart: the `ike-*` policies a killed predecessor had added (restored from the state directory) that
/// are not the configured children's are removed when the driver starts (`netveil policy del` refuses them: the
/// driver owns them); the configured ones are replaced, a user's own runtime policy is left alone.
#[test]
fn a_predecessors_ike_policies_are_removed_at_start() {
    let dir = crate::runtime::state::test_dir("ike-install-left");
    let a = engine(&dir.join("a"));
    let port = IpPort(a.clone());
    let (l, r) = (ts("10.1.2.0/24"), ts("10.2.3.0/24"));
    for (prefix, out, inb) in [
        ("ike-9", "ike-9-out", "ike-9-in"),
        ("ike-c1", "ike-c1-out", "ike-c1-in"),
        ("ike-c4", "ike-c4-out", "ike-c4-in"),
        ("mine", "mine-out", "mine-in"),
    ] {
        for (_, _, o, i) in policy_pairs(&[l], &[r], prefix, out, inb) {
            port.policy_add(o, None).unwrap();
            port.policy_add(i, None).unwrap();
        }
    }
    assert_eq!(a.db.runtime_policies("ike-").len(), 6);
    let mut ia = Installer::new(Arc::new(IpPort(a.clone())));
    ia.install_traps(&site("none")).unwrap();
    let mut left = a.db.runtime_policies("ike-");
    left.sort();
    assert_eq!(
        left,
        ["ike-c1-i0", "ike-c1-o0"],
        "only the configured child's"
    );
    assert_eq!(a.db.runtime_policies("mine").len(), 2);
    drop((a, ia));
    let _ = std::fs::remove_dir_all(&dir);
}

fn in_netns(f: impl FnOnce() + Send + 'static) {
    let h = std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
        f()
    });
    if let Err(p) = h.join() {
        std::panic::resume_unwind(p);
    }
}

/// The child install time with a real nftables table (in a network namespace of its own), the same child installed
/// 5 times each way in the same run: the old path (SAs, then policies of its own: the table rewritten per policy)
/// and the new one (SAs, then policies bound under the configured ones: no `nft`). Prints both medians.
#[test]
fn child_install_time_with_nftables() {
    in_netns(|| {
        let dir = crate::runtime::state::test_dir("ike-install-time");
        let a = engine(&dir.join("a"));
        a.db.attach(
            crate::engines::ip::db::Sockets {
                v4: true,
                v6: true,
                nat_t: true,
            },
            Vec::new(),
            "netveil_ike_time".into(),
            None,
        );
        let median = |ia: &mut Installer, base: u32| {
            let mut t: Vec<std::time::Duration> = (0..5)
                .map(|i| {
                    let c = child(
                        "aes128gcm16",
                        true,
                        base + i,
                        base + 0x100 + i,
                        i as u8,
                        false,
                        None,
                    );
                    ia.install(&c).unwrap();
                    let d = ia.last_install.unwrap();
                    assert!(ia.remove(c.inbound.spi, c.outbound.spi).unwrap());
                    d
                })
                .collect();
            t.sort();
            t[2]
        };
        let mut old = Installer::new(Arc::new(IpPort(a.clone())));
        let before = median(&mut old, 0xa000_0000);
        let mut new = Installer::new(Arc::new(IpPort(a.clone())));
        new.install_traps(&site("none")).unwrap();
        let after = median(&mut new, 0xa100_0000);
        println!(
            "child install (2 SAs + 2 policies), median of 5: before (policies with nftables rules) {} us, \
             after (bound under the start policies) {} us",
            before.as_micros(),
            after.as_micros()
        );
        assert!(after < before, "before {before:?}, after {after:?}");
        let _ =
            crate::runtime::engine::run(&["nft", "delete", "table", "inet", "netveil_ike_time"]);
        drop((a, old, new));
        let _ = std::fs::remove_dir_all(&dir);
    })
}

/// Dead peer detection's input: `traffic` names the CHILD_SAs whose inbound SA authenticated packets since it
/// last looked (at most once per TRAFFIC_EVERY), and nothing once the traffic stops; a packet that fails to
/// open (here: replayed) does not count.
#[test]
fn traffic_names_the_children_that_received_packets() {
    let (dir, a, b, _ia, mut ib) = both_ways("aes256gcm16");
    let t0 = std::time::Instant::now();
    assert!(ib.traffic(t0).is_empty(), "nothing received yet");
    let (w, _) = seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 1)).unwrap();
    let copy = PacketBuf::from_slice(w.data(), 256, 640);
    assert_eq!(open(&b, w), Ok(1));
    assert!(
        ib.traffic(t0 + TRAFFIC_EVERY / 2).is_empty(),
        "not looked at again before TRAFFIC_EVERY"
    );
    assert_eq!(ib.traffic(t0 + TRAFFIC_EVERY), vec![0xb000_0001]);
    assert!(open(&b, copy).is_err(), "a replay is dropped");
    assert!(
        ib.traffic(t0 + TRAFFIC_EVERY * 2).is_empty(),
        "a replayed packet is no sign of life"
    );
    let (w, _) = seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 2)).unwrap();
    assert_eq!(open(&b, w), Ok(2));
    assert_eq!(ib.traffic(t0 + TRAFFIC_EVERY * 3), vec![0xb000_0001]);
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
}
