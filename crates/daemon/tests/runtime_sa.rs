//! SAs and policies changed while traffic flows, in memory: two engines' data planes (`Shared`) pass packets to
//! each other while their SAs are replaced (`sa update`), removed and added, and policies added, through the same
//! calls the control socket makes.

use netveil_daemon::config::Config;
use netveil_daemon::ip::{FragCache, Shared};
use netveil_daemon::ip_drop::Drop as IpDrop;
use netveil_wire::PacketBuf;

fn key(n: u32) -> String {
    format!("{n:08x}00112233445566778899aabb01020304")
}

fn config(me: &str, peer: &str, state: &std::path::Path) -> String {
    let (mine, theirs) = if me == "a" {
        ("10.1.0.0/16", "10.2.0.0/16")
    } else {
        ("10.2.0.0/16", "10.1.0.0/16")
    };
    let (l, r) = if me == "a" {
        ("192.0.2.1", "192.0.2.2")
    } else {
        ("192.0.2.2", "192.0.2.1")
    };
    let (out_name, in_name) = (format!("{me}-to-{peer}"), format!("{peer}-to-{me}"));
    let spi = |n: &str| if n == "a-to-b" { 0x1001 } else { 0x2001 };
    format!(
        r#"[interface]
state_dir = "{}"
[[sa]]
name = "{out_name}"
direction = "out"
spi = {}
local = "{l}"
remote = "{r}"
suite = "aes128gcm16"
enc_key = "{}"
[[sa]]
name = "{in_name}"
direction = "in"
spi = {}
local = "{l}"
remote = "{r}"
suite = "aes128gcm16"
enc_key = "{}"
[[policy]]
direction = "out"
src = "{mine}"
dst = "{theirs}"
action = "protect"
sas = ["{out_name}"]
[[policy]]
direction = "in"
src = "{theirs}"
dst = "{mine}"
action = "protect"
sas = ["{in_name}"]
"#,
        state.display(),
        spi(&out_name),
        key(spi(&out_name)),
        spi(&in_name),
        key(spi(&in_name)),
    )
}

fn sa_table(dir: &str, spi: u32, l: &str, r: &str) -> toml::Table {
    toml::from_str(&format!(
        "direction = \"{dir}\"\nspi = {spi}\nlocal = \"{l}\"\nremote = \"{r}\"\nsuite = \"aes128gcm16\"\nenc_key = \"{}\"\n",
        key(spi)
    ))
    .unwrap()
}

/// A UDP packet 10.1.0.1 -> `dst` carrying `n`.
fn packet(dst: [u8; 4], n: u32) -> PacketBuf {
    let mut p = vec![
        0x45, 0, 0, 32, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 1, 0, 1, dst[0], dst[1], dst[2], dst[3],
        0x13, 0x88, 0x13, 0x89, 0, 12, 0, 0,
    ];
    p.extend_from_slice(&n.to_be_bytes());
    let c = netveil_wire::checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    PacketBuf::from_slice(&p, 256, 640)
}

/// A scratch directory that may hold state (not the system's temporary directory: see `netveil_daemon::state`).
fn scratch(tag: &str) -> std::path::PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("netveil-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// As `netveil up --fresh-keys`: the state directories are new, and so are the keys.
fn fresh(mut c: Config) -> Config {
    c.interface.state_dir.fresh_keys = true;
    c
}

struct Pair {
    a: Shared,
    b: Shared,
    dir: std::path::PathBuf,
}

fn pair(tag: &str) -> Pair {
    let dir = scratch(&format!("rt-{tag}"));
    let a = fresh(Config::parse(&config("a", "b", &dir.join("a"))).unwrap());
    let b = fresh(Config::parse(&config("b", "a", &dir.join("b"))).unwrap());
    Pair {
        a: Shared::new(a).unwrap(),
        b: Shared::new(b).unwrap(),
        dir,
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// a seals packet `n`; the result is what goes on the wire.
fn seal(a: &Shared, n: u32, now: u64) -> PacketBuf {
    let mut p = packet([10, 2, 0, 1], n);
    let snap = a.db.load();
    a.process_out(&snap, &mut p, now, &mut FragCache::default())
        .expect("sealed");
    p
}

/// b opens a packet from the wire and returns the number it carried.
fn open(b: &Shared, mut p: PacketBuf, now: u64) -> Result<u32, IpDrop> {
    let snap = b.db.load();
    b.process_in(&snap, &mut p, now, &mut FragCache::default())?;
    let d = p.data();
    Ok(u32::from_be_bytes(d[28..32].try_into().unwrap()))
}

fn spi_of(p: &PacketBuf) -> u32 {
    u32::from_be_bytes(p.data()[20..24].try_into().unwrap())
}

/// Three rekeys of a -> b, each in the order two key managers would do it (the receiver first, then the sender),
/// with packets sealed under the old SA delivered after both switched: every packet opens, in order, and nothing
/// is dropped. After the retire delay the old SPI is gone.
#[test]
fn sa_update_is_make_before_break() {
    let p = pair("update");
    let mut n = 0u32;
    let mut now = 0u64;
    for round in 1..=3u32 {
        let new_spi = 0x1001 + 0x100 * round;
        // In flight under the old SA.
        let early: Vec<PacketBuf> = (0..5)
            .map(|_| {
                n += 1;
                seal(&p.a, n, now)
            })
            .collect();
        let old_spi = spi_of(&early[0]);
        // The receiver installs the new inbound SA first; the old one keeps taking packets.
        p.b.db
            .sa_update(
                "a-to-b",
                sa_table("in", new_spi, "192.0.2.2", "192.0.2.1"),
                now,
            )
            .unwrap();
        n += 1;
        let between = seal(&p.a, n, now);
        assert_eq!(spi_of(&between), old_spi);
        // Then the sender switches.
        p.a.db
            .sa_update(
                "a-to-b",
                sa_table("out", new_spi, "192.0.2.1", "192.0.2.2"),
                now,
            )
            .unwrap();
        n += 1;
        let after = seal(&p.a, n, now);
        assert_eq!(spi_of(&after), new_spi, "round {round}");
        let first = n - 6;
        for (i, pkt) in early.into_iter().chain([between, after]).enumerate() {
            assert_eq!(open(&p.b, pkt, now), Ok(first + i as u32), "round {round}");
        }
        // The retire delay passes: the old SPI is no longer taken.
        now += netveil_daemon::ip_db::RETIRE_SECONDS;
        p.b.db.tick(now, false, false);
        assert!(p.b.db.load().sad.iter().all(|s| s.spi() != old_spi));
    }
    for s in [&p.a, &p.b] {
        for (reason, count) in s
            .rx_drops
            .snapshot()
            .into_iter()
            .chain(s.tx_drops.snapshot())
        {
            assert_eq!(count, 0, "{reason}");
        }
    }
    // A packet under a retired SPI is an unknown SPI.
    let mut stale = packet([10, 2, 0, 1], 0);
    let snap = p.a.db.load();
    p.a.process_out(&snap, &mut stale, now, &mut FragCache::default())
        .unwrap();
    p.b.db
        .sa_update(
            "a-to-b",
            sa_table("in", 0x5001, "192.0.2.2", "192.0.2.1"),
            now,
        )
        .unwrap();
    p.b.db
        .tick(now + netveil_daemon::ip_db::RETIRE_SECONDS, false, false);
    assert_eq!(
        open(&p.b, stale, now),
        Err(netveil_ipsec::Drop::UnknownSpi.into())
    );
    // The events tell the story.
    let events = p.b.db.events_since(0);
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "sa-replaced").count(), 4);
    assert_eq!(kinds.iter().filter(|k| **k == "sa-retired").count(), 4);
}

/// Changes that do not hold are refused whole, naming the key, and change nothing.
#[test]
fn bad_changes_are_refused_and_change_nothing() {
    let p = pair("refuse");
    let before = p.a.db.load().sad.len();
    let e =
        p.a.db
            .sa_update(
                "a-to-b",
                sa_table("in", 0x7001, "192.0.2.1", "192.0.2.2"),
                0,
            )
            .unwrap_err();
    assert_eq!(e.key, "sa.direction");
    let e =
        p.a.db
            .sa_update("nope", sa_table("out", 0x7001, "192.0.2.1", "192.0.2.2"), 0)
            .unwrap_err();
    assert!(e.reason.contains("no SA named 'nope'"), "{e}");
    // The inbound SA's own SPI, a second SA with the same keys, a missing name, a bad key length.
    let e =
        p.a.db
            .sa_update(
                "b-to-a",
                sa_table("in", 0x2001, "192.0.2.1", "192.0.2.2"),
                0,
            )
            .unwrap_err();
    assert_eq!(e.key, "sa.spi");
    let mut t = sa_table("in", 0x7002, "192.0.2.1", "192.0.2.2");
    t.insert("name".into(), "x".into());
    t.insert("enc_key".into(), key(0x1001).into());
    assert_eq!(p.a.db.sa_add(t.clone(), 0).unwrap_err().key, "sa.enc_key");
    t.remove("name");
    assert_eq!(p.a.db.sa_add(t.clone(), 0).unwrap_err().key, "sa.name");
    t.insert("name".into(), "x".into());
    t.insert("enc_key".into(), "0011".into());
    let e = p.a.db.sa_add(t, 0).unwrap_err();
    assert_eq!(e.key, "sa.enc_key");
    assert!(!e.reason.contains("0011"), "{e}");
    assert_eq!(p.a.db.load().sad.len(), before);
    assert!(p.a.db.events_since(0).is_empty());
}

/// A policy whose SAs are not installed drops its traffic and reports an acquire (once per second); once the SA
/// is added, traffic flows at once. A policy added in front takes precedence.
#[test]
fn policy_added_live_reports_acquire_until_its_sa_comes() {
    let p = pair("policy");
    let pol: toml::Table = toml::from_str(
        "name = \"to-c\"\ndirection = \"out\"\nsrc = \"10.1.0.0/16\"\ndst = \"10.3.0.0/16\"\naction = \"protect\"\nsas = [\"a-to-c\"]\n",
    )
    .unwrap();
    p.a.db.policy_add(pol, None, 0).unwrap();
    let snap = p.a.db.load();
    for _ in 0..3 {
        let mut pkt = packet([10, 3, 0, 1], 1);
        assert_eq!(
            p.a.process_out(&snap, &mut pkt, 0, &mut FragCache::default()),
            Err(IpDrop::NoSa)
        );
    }
    p.a.db.tick(0, false, false);
    let ev = p.a.db.events_since(0);
    let acq: Vec<_> = ev.iter().filter(|e| e.event == "acquire").collect();
    assert_eq!(acq.len(), 1, "{ev:?}");
    assert_eq!(acq[0].policy.as_deref(), Some("to-c"));
    assert_eq!(
        acq[0].flow.as_deref(),
        Some("10.1.0.1 -> 10.3.0.1 proto 17 5000 -> 5001")
    );
    let mut t = sa_table("out", 0x3001, "192.0.2.1", "192.0.2.3");
    t.insert("name".into(), "a-to-c".into());
    p.a.db.sa_add(t, 0).unwrap();
    let mut pkt = packet([10, 3, 0, 1], 1);
    let snap = p.a.db.load();
    p.a.process_out(&snap, &mut pkt, 0, &mut FragCache::default())
        .unwrap();
    assert_eq!(spi_of(&pkt), 0x3001);
    // Discard 10.3.0.9 ahead of it.
    let d: toml::Table = toml::from_str(
        "name = \"not-c9\"\ndirection = \"out\"\nsrc = \"10.1.0.0/16\"\ndst = \"10.3.0.9/32\"\naction = \"discard\"\n",
    )
    .unwrap();
    p.a.db.policy_add(d, Some(0), 0).unwrap();
    let snap = p.a.db.load();
    let mut pkt = packet([10, 3, 0, 9], 1);
    assert_eq!(
        p.a.process_out(&snap, &mut pkt, 0, &mut FragCache::default()),
        Err(IpDrop::PolicyDiscard)
    );
    // Removing the SA makes the policy wait again; removing the policy lets the default (discard) apply.
    p.a.db.sa_del("a-to-c", 1).unwrap();
    let mut pkt = packet([10, 3, 0, 1], 1);
    let snap = p.a.db.load();
    assert_eq!(
        p.a.process_out(&snap, &mut pkt, 1, &mut FragCache::default()),
        Err(IpDrop::NoSa)
    );
    p.a.db.policy_del("to-c", 1).unwrap();
    let snap = p.a.db.load();
    assert_eq!(
        p.a.process_out(&snap, &mut pkt, 1, &mut FragCache::default()),
        Err(IpDrop::PolicyDiscard)
    );
}

/// The configuration's outbound SAs, built with their sequence reservations, are followed by the database: past
/// half a block, the engine's tick tops the reservation up (durably), so sending goes on past the first block.
#[test]
fn configured_sas_get_their_reservations_topped_up() {
    use netveil_daemon::state::{seq_file, SeqStore, StateDir, StateLocation, SEQ_BLOCK};
    let dir = scratch("rt-seq");
    let cfg = fresh(Config::parse(&config("a", "b", &dir)).unwrap());
    let file = seq_file(&cfg.sas[0]);
    let (store, starts) = SeqStore::start(
        StateDir::open(&cfg.interface.state_dir, "state_dir").unwrap(),
        &cfg.sas,
    )
    .unwrap();
    let sad = cfg.build_sad_reserved(0, &starts).unwrap();
    let a = Shared::with_sad(cfg, &sad, Some(store));
    a.db.arm();
    let out = a.db.load().sad.arc(0).clone();
    assert_eq!(out.seq_reserved(), SEQ_BLOCK);
    let mut n = 0;
    while out.seq_last() <= SEQ_BLOCK / 2 {
        seal(&a, n, 0);
        n += 1;
    }
    a.db.tick(0, false, false);
    let used = out.seq_last();
    assert_eq!(out.seq_reserved(), used + SEQ_BLOCK);
    let mark = StateDir::open(&StateLocation::new(&dir), "state_dir")
        .unwrap()
        .read_u64(&file);
    assert_eq!(mark, Ok(Some(used + SEQ_BLOCK)));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A data-plane thread keeps one `FragCache` for its life, which remembers the last flow's policy decision: a
/// policy added or removed in a new snapshot changes the decision for that very flow at once.
#[test]
fn a_threads_remembered_decision_follows_policy_changes() {
    let p = pair("memo");
    let mut cache = FragCache::default();
    let mut out = |n: u32| {
        let mut pkt = packet([10, 2, 0, 7], n);
        let snap = p.a.db.load();
        p.a.process_out(&snap, &mut pkt, 0, &mut cache).map(|_| ())
    };
    assert_eq!(out(1), Ok(()));
    assert_eq!(out(2), Ok(()));
    let d: toml::Table = toml::from_str(
        "name = \"not-7\"\ndirection = \"out\"\nsrc = \"10.1.0.0/16\"\ndst = \"10.2.0.7/32\"\naction = \"discard\"\n",
    )
    .unwrap();
    p.a.db.policy_add(d, Some(0), 0).unwrap();
    assert_eq!(out(3), Err(IpDrop::PolicyDiscard));
    assert_eq!(out(4), Err(IpDrop::PolicyDiscard));
    p.a.db.policy_del("not-7", 0).unwrap();
    assert_eq!(out(5), Ok(()));
}

/// An outbound SA added at runtime to a daemon whose state directory holds no record (new, or its contents lost)
/// and that was not started with `--fresh-keys` is refused, naming its key and the confirmation; once the directory
/// holds its record, the same SA is added and starts at 1.
#[test]
fn an_sa_added_at_runtime_needs_the_state_record_or_a_confirmation() {
    use netveil_daemon::state::{StateDir, StateLocation, SENTINEL};
    let dir = scratch("rt-record");
    let a = Config::parse(&config("a", "b", &dir)).unwrap();
    assert!(!a.interface.state_dir.fresh_keys);
    let a = Shared::new(a).unwrap();
    let mut t = sa_table("out", 0x3001, "192.0.2.1", "192.0.2.3");
    t.insert("name".into(), "a-to-c".into());
    let e = a.db.sa_add(t.clone(), 0).unwrap_err();
    assert_eq!(e.key, "sa.enc_key");
    assert!(
        e.reason.contains("SA 'a-to-c'") && e.reason.contains("--fresh-keys"),
        "{e}"
    );
    assert!(!dir.join(SENTINEL).exists());
    let confirmed = StateLocation {
        fresh_keys: true,
        ..StateLocation::new(&dir)
    };
    StateDir::open(&confirmed, "interface.state_dir").unwrap();
    a.db.sa_add(t, 0).unwrap();
    let snap = a.db.load();
    let out = snap.sad.iter().find(|s| s.params.name == "a-to-c").unwrap();
    assert_eq!(out.params.first_seq, 1);
    let _ = std::fs::remove_dir_all(&dir);
}
