//! The IP engine's heap per negotiated CHILD_SA (both SAs with their key schedules, the two bound policies, the
//! snapshot's share, the IKE installer's record), the daemon's part of what `netveil bench --ike` counts in the
//! responder's memory per IKE SA + child: live bytes allocated by this test's thread (every install runs on it)
//! over 1000 CHILD_SAs (as many as the bench's), each a /32 pair bound under the configured child's policy as the
//! bench's are (aws-lc's key contexts, allocated by its C code, are not counted here: about 600 bytes per AES-GCM
//! SA; nor are they allocated before the SA carries traffic). Bounded where it stands now (2.35 KB, of which about
//! 0.4 KB is the emptied snapshot kept for the next rebuild and 0.2 KB the event log filling up; 2.7 KB with a
//! map of bound policies beside the rules, unresolved bundles in every rule, 32-byte bundles, acquire times for
//! every policy, the key schedule's handles inline in every SA and the installer's selectors in lists), so that a
//! change that makes CHILD_SAs bigger fails here.
//!
//! What the bench's resident set sees is the allocator's heap, which also holds the room freed and not reused, and
//! each small block's header and rounding. With glibc, the heap the allocator holds (in use and free, in its
//! arenas and mapped) is bounded too: 2.8 KB per CHILD_SA (3.4 KB before the cuts above and with a name map per
//! direction, each sized for all SAs, built for every snapshot; 4.6 KB when every snapshot was built afresh, the
//! replaced one's tables freed into holes the next could not use, with the covering policy's and the connection's
//! names copied per CHILD_SA and the policy names stored).

use netveil_daemon::drivers::ike::install::Installer;
use netveil_daemon::engines::ip::port::IpPort;
use netveil_daemon::engines::ip::Shared;
use netveil_ike::config::{Mode, TsSpec};
use netveil_ike::event::{ChildSa, EspSa, IkeSaId};
use netveil_ike::keys::Secret;
use netveil_ike::proposal::{Proposal, Protocol};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::Arc;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
}

/// Counts the live heap bytes of each thread.
struct Counting;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let _ = LIVE.try_with(|c| c.set(c.get() + l.size() as i64));
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        let _ = LIVE.try_with(|c| c.set(c.get() - l.size() as i64));
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            let _ = LIVE.try_with(|c| c.set(c.get() + new as i64 - l.size() as i64));
        }
        q
    }
}

#[global_allocator]
static A: Counting = Counting;

/// The heap glibc's allocator holds (in use or free, in its arenas and mapped), in bytes.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn held() -> Option<i64> {
    // SAFETY: mallinfo2 takes no arguments and returns a plain struct (glibc 2.33 and later).
    let m = unsafe { libc::mallinfo2() };
    Some((m.arena + m.hblkhd) as i64)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn held() -> Option<i64> {
    None
}

fn live() -> i64 {
    LIVE.with(|c| c.get())
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

/// A distinct key per `k` (the engine refuses two SAs with the same keys).
fn key(k: u32, n: usize) -> Secret {
    let mut v = vec![0x5au8; n];
    v[..4].copy_from_slice(&k.to_be_bytes());
    Secret::new(&v)
}

/// CHILD_SA `k` as the responder (192.0.2.2) installs it: 10.2.x.y/32 <-> 10.1.x.y/32, AES-GCM-128, UDP.
fn child(k: u32) -> ChildSa {
    let p = Proposal::parse(Protocol::Esp, "aes128gcm16").unwrap();
    let host = |net: u8| ts(&format!("10.{net}.{}.{}/32", k / 250, k % 250));
    ChildSa {
        ike_sa: IkeSaId(u64::from(k)),
        connection: "site".into(),
        child: "net".into(),
        proposal: p,
        mode: Mode::Tunnel,
        local: SocketAddr::new("192.0.2.2".parse().unwrap(), 4500),
        remote: SocketAddr::new("192.0.2.1".parse().unwrap(), 4500),
        udp_encap: true,
        inbound: EspSa {
            spi: 0x1000_0000 + k,
            encr_key: key(k, 20),
            integ_key: Secret::new(&[]),
        },
        outbound: EspSa {
            spi: 0x2000_0000 + k,
            encr_key: key(k + 1_000_000, 20),
            integ_key: Secret::new(&[]),
        },
        local_ts: vec![host(2)],
        remote_ts: vec![host(1)],
        replay_window: 64,
        replaces: None,
    }
}

#[test]
fn heap_per_child_sa_in_the_ip_engine() {
    // The state directory: in a private directory on a path only root can write (the build's target/tmp lies
    // under a checkout that may be in /tmp, which netveil refuses above a state directory).
    let base = netveil_testkit::private_dir("netveil-child-memory");
    let dir = base.join("state");
    let mut c = netveil_daemon::engines::ip::config::Config::parse(&format!(
        "[interface]\nstate_dir = \"{}\"\n",
        dir.display()
    ))
    .unwrap();
    c.interface.state_dir.fresh_keys = true;
    let engine = Arc::new(Shared::new(c).unwrap());
    let mut installer = Installer::new(Arc::new(IpPort(engine.clone())));
    let conf = toml::from_str::<toml::Value>(
        r#"
[[connection]]
name = "site"
local_addrs = ["192.0.2.2"]
remote_addrs = ["192.0.2.1"]
proposals = ["aes128-sha256-x25519"]
psk = "0x000102030405060708090a0b0c0d0e0f10111213"
local = { id = "192.0.2.2", auth = "psk" }
remote = { id = "192.0.2.1", auth = "psk" }

[[connection.children]]
name = "net"
local_ts = ["10.2.0.0/16"]
remote_ts = ["10.1.0.0/16"]
esp_proposals = ["aes128gcm16"]
start_action = "none"
"#,
    )
    .unwrap();
    let connections = netveil_daemon::drivers::ike::config::parse(conf, std::path::Path::new("/"))
        .unwrap()
        .connections;
    installer.install_traps(&connections).unwrap();
    const N: u32 = 1000;
    let children: Vec<ChildSa> = (0..N + 20).map(child).collect();
    // Warm up (the tables' first growth), then count.
    for c in &children[..20] {
        installer.install(c).unwrap();
    }
    let held_before = held();
    let before = live();
    for c in &children[20..] {
        installer.install(c).unwrap();
    }
    let per = (live() - before) as f64 / f64::from(N);
    println!("IP engine heap per CHILD_SA: {per:.0} bytes");
    if let (Some(a), Some(b)) = (held_before, held()) {
        let per = (b - a) as f64 / f64::from(N);
        println!("heap held by glibc per CHILD_SA: {per:.0} bytes");
        assert!(
            per <= 2_950.0,
            "{per:.0} bytes of heap held by the allocator per CHILD_SA"
        );
    }
    assert_eq!(
        engine.db.load().sad.iter().count(),
        2 * (N as usize + 20),
        "every CHILD_SA installed"
    );
    assert!(
        per <= 2_450.0,
        "{per:.0} bytes of the IP engine's heap per CHILD_SA"
    );
    drop((installer, engine));
}
