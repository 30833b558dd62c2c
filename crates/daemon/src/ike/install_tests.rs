//! CHILD_SAs as the state machine reports them, installed in two real IP engines (their typed ports, no TUN):
//! after install each side seals with its outbound SA and the other opens with its inbound one; a rekey
//! (`replaces`) swaps the keys in place, packets sealed before it still open (make-before-break), the policies
//! are not duplicated; after ChildSaDown the traffic is dropped for want of an SA, and both SAs and every
//! policy are gone.

use super::*;
use crate::ip::{FragCache, Shared, TxRecord};
use crate::ip_db::IpPort;
use netveil_ike::config::Mode as IkeMode;
use netveil_ike::event::IkeSaId;
use netveil_ike::keys::Secret;
use netveil_ike::proposal::{Proposal, Protocol};
use netveil_wire::PacketBuf;
use std::net::SocketAddr;

fn engine(dir: &std::path::Path) -> Arc<Shared> {
    let mut c =
        crate::config::Config::parse(&format!("[interface]\nstate_dir = \"{}\"\n", dir.display()))
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

fn seal(s: &Shared, p: PacketBuf) -> Result<(PacketBuf, TxRecord), crate::ip_drop::Drop> {
    let mut p = p;
    let snap = s.db.load();
    s.process_out(&snap, &mut p, s.now(), &mut FragCache::default())
        .map(|r| (p, r))
}

fn open(s: &Shared, mut p: PacketBuf) -> Result<u32, crate::ip_drop::Drop> {
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
    let mut pols: Vec<String> = snap.policies.iter().map(|p| p.name.clone()).collect();
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
    let dir = crate::state::test_dir(&format!("ike-install-{proposal}"));
    let (a, b) = (engine(&dir.join("a")), engine(&dir.join("b")));
    let mut ia = Installer::new(Arc::new(IpPort(a.clone())));
    let mut ib = Installer::new(Arc::new(IpPort(b.clone())));
    assert_eq!(
        seal(&a, packet([10, 1, 0, 1], [10, 2, 0, 1], 0)).err(),
        Some(crate::ip_drop::Drop::PolicyDiscard),
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
            Some(crate::ip_drop::Drop::PolicyDiscard),
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
        Some(crate::ip_drop::Drop::PolicyDiscard),
        "the old selectors' policies are gone"
    );
    let (w, _) = seal(&a, packet([10, 1, 0, 1], [10, 9, 0, 1], 5)).unwrap();
    assert_eq!(spi_of(&w), 0xb000_0003);
    ia.remove_all();
    ib.remove_all();
    drop((a, b, ia, ib));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn udp_encapsulated_child_leaves_on_the_nat_t_ports() {
    let dir = crate::state::test_dir("ike-install-encap");
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
    let dir = crate::state::test_dir("ike-install-refused");
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
        Some(crate::ip_drop::Drop::NoSa),
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
