//! SAs and policies changed while traffic flows, in memory: two engines' data planes (`Shared`) pass packets to
//! each other while their SAs are replaced (`sa update`), removed and added, and policies added, through the same
//! calls the control socket makes.

use netveil_daemon::engines::ip::config::Config;
use netveil_daemon::engines::ip::db::Installed;
use netveil_daemon::engines::ip::drop::Drop as IpDrop;
use netveil_daemon::engines::ip::{FragCache, Shared};
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

/// A scratch directory that may hold state (not the system's temporary directory: see `netveil_daemon::runtime::state`).
fn scratch(tag: &str) -> std::path::PathBuf {
    let d = netveil_daemon::runtime::state::test_scratch_base(std::path::Path::new(env!(
        "CARGO_TARGET_TMPDIR"
    )))
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
        now += netveil_daemon::engines::ip::db::RETIRE_SECONDS;
        p.b.db.tick(now, false, false);
        assert!(p.b.db.load().sad.iter().all(|s| s.base().spi() != old_spi));
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
    p.b.db.tick(
        now + netveil_daemon::engines::ip::db::RETIRE_SECONDS,
        false,
        false,
    );
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
    // Every table as `sa list --json` and `policy list --json` show it (names, SPIs, keys' suites, directions,
    // order, sequence numbers, windows, retiring marks; policies with their SAs and whether installed).
    let tables = |s: &Shared| {
        let st = netveil_daemon::engines::ip::control::status(s);
        (
            serde_json::to_string(&st.sas).unwrap(),
            serde_json::to_string(&st.policies).unwrap(),
        )
    };
    let before = tables(&p.a);
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
    // A policy naming an SA of the other direction, a duplicate policy name, a position past the end.
    let pol = |extra: &str| -> toml::Table {
        toml::from_str(&format!(
            "name = \"p\"\ndirection = \"out\"\nsrc = \"10.1.0.0/16\"\ndst = \"10.9.0.0/16\"\naction = \"protect\"\n{extra}"
        ))
        .unwrap()
    };
    assert_eq!(
        p.a.db
            .policy_add(pol("sas = [\"b-to-a\"]"), None, 0)
            .unwrap_err()
            .key,
        "policy.sas[0]"
    );
    assert_eq!(
        p.a.db
            .policy_add(pol("sas = [\"a-to-b\"]"), Some(9), 0)
            .unwrap_err()
            .key,
        "position"
    );
    assert_eq!(tables(&p.a), before);
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
    use netveil_daemon::runtime::state::{seq_file, StateDir, SEQ_BLOCK};
    let dir = scratch("rt-seq");
    let cfg = fresh(Config::parse(&config("a", "b", &dir)).unwrap());
    let file = seq_file(&cfg.sas[0]);
    let (seq, rx, starts) = netveil_daemon::runtime::state::start(
        StateDir::open(&cfg.interface.state_dir, "state_dir").unwrap(),
        &cfg.sas,
    )
    .unwrap();
    let (sad, at) = cfg.build_sad_reserved(0, &starts).unwrap();
    let a = Shared::with_sas(cfg, Installed::of(&sad, &at), Some((seq, rx)));
    a.db.arm();
    let out = a.db.load().sad.outbound_indices().next().unwrap();
    let out = a.db.load().sad.out_arc(out).clone();
    assert_eq!(out.seq_reserved(), SEQ_BLOCK);
    let mut n = 0;
    while out.seq_last() <= SEQ_BLOCK / 2 {
        seal(&a, n, 0);
        n += 1;
    }
    a.db.tick(0, false, false);
    let used = out.seq_last();
    assert_eq!(out.seq_reserved(), used + SEQ_BLOCK);
    let mark = StateDir::open(
        &netveil_daemon::runtime::state::StateLocation::new(&dir),
        "state_dir",
    )
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

/// The sequence an attacker with the control socket's rights (or a confused key manager) tried: an outbound policy
/// naming an SA that is not installed yet, then an inbound SA of that name carrying the peer's sending key. Before,
/// the policy resolved the name whatever its direction and sealed with the peer's key from sequence number 1,
/// repeating the peer's nonces. Now the change is refused (naming the policy and the SA), and whatever the order
/// of changes, an outbound policy never seals with an inbound SA: its traffic waits (no-sa) until an outbound SA
/// of that name comes.
#[test]
fn an_outbound_policy_never_seals_with_an_inbound_sa() {
    let p = pair("direction");
    // The peer's sending key: what a's inbound SA b-to-a holds.
    let peer_key = key(0x2001);
    let pol: toml::Table = toml::from_str(
        "name = \"to-x\"\ndirection = \"out\"\nsrc = \"10.1.0.0/16\"\ndst = \"10.3.0.0/16\"\naction = \"protect\"\nsas = [\"x\"]\n",
    )
    .unwrap();
    p.a.db.policy_add(pol, Some(0), 0).unwrap();
    p.a.db.sa_del("b-to-a", 0).unwrap();
    let mut t = sa_table("in", 0x2001, "192.0.2.1", "192.0.2.2");
    t.insert("name".into(), "x".into());
    t.insert("enc_key".into(), peer_key.clone().into());
    let e = p.a.db.sa_add(t.clone(), 0).unwrap_err();
    assert_eq!(e.key, "sa.direction");
    assert!(
        e.reason.contains("'to-x'") && e.reason.contains("'x'"),
        "{e}"
    );
    assert!(!e.reason.contains(&peer_key), "{e}");
    let sealed_none = |now| {
        let snap = p.a.db.load();
        let mut pkt = packet([10, 3, 0, 1], 1);
        p.a.process_out(&snap, &mut pkt, now, &mut FragCache::default())
    };
    assert_eq!(sealed_none(0), Err(IpDrop::NoSa));
    // The other order: the inbound SA first, then the outbound policy naming it.
    t.insert("name".into(), "y".into());
    p.a.db.sa_add(t, 0).unwrap();
    let pol: toml::Table = toml::from_str(
        "name = \"to-y\"\ndirection = \"out\"\nsrc = \"10.1.0.0/16\"\ndst = \"10.4.0.0/16\"\naction = \"protect\"\nsas = [\"y\"]\n",
    )
    .unwrap();
    let e = p.a.db.policy_add(pol, Some(0), 0).unwrap_err();
    assert_eq!(e.key, "policy.sas[0]");
    // Replacing the outbound SA that an outbound policy uses by an inbound one of the same name: `sa del` +
    // `sa add` is refused too (an update keeps the direction anyway).
    p.a.db.sa_del("a-to-b", 0).unwrap();
    let mut t = sa_table("in", 0x2002, "192.0.2.1", "192.0.2.2");
    t.insert("name".into(), "a-to-b".into());
    t.insert("enc_key".into(), key(0x2002).into());
    assert_eq!(p.a.db.sa_add(t, 0).unwrap_err().key, "sa.direction");
    let snap = p.a.db.load();
    let mut pkt = packet([10, 2, 0, 1], 1);
    assert_eq!(
        p.a.process_out(&snap, &mut pkt, 0, &mut FragCache::default()),
        Err(IpDrop::NoSa)
    );
    // Every outbound policy's bundle holds outbound SAs only (the type says so; and nothing sealed so far).
    assert!(snap.sad.outbound().all(|s| s.seq_last() == 0));
}

/// An engine started from `text` with the stores of its state directory (as `netveil up` does): outbound SAs above
/// their sequence marks, inbound SAs above their receive floors.
fn started(text: &str) -> Shared {
    let cfg = fresh(Config::parse(text).unwrap());
    let dir = netveil_daemon::runtime::state::StateDir::open(&cfg.interface.state_dir, "state_dir")
        .unwrap();
    let (seq, rx, starts) = netveil_daemon::runtime::state::start(dir, &cfg.sas).unwrap();
    let (sad, at) = cfg.build_sad_reserved(0, &starts).unwrap();
    let s = Shared::with_sas(cfg, Installed::of(&sad, &at), Some((seq, rx)));
    s.db.arm();
    s
}

fn seq_of(p: &PacketBuf) -> u32 {
    u32::from_be_bytes(p.data()[24..28].try_into().unwrap())
}

/// Item 8 of the runtime-safety issue: `sa update` that keeps the keys, and `sa del` + `sa add` with them, continue
/// the keys' sequence counter instead of reserving a new block each (which used up the space in about 4096 no-op
/// changes and put the sender past the peer's storm-mode ceiling): the mark does not move and the next packet
/// carries the next number.
#[test]
fn no_op_changes_continue_the_sequence_and_burn_no_block() {
    use netveil_daemon::runtime::state::{seq_file, StateDir, SEQ_BLOCK};
    let dir = scratch("rt-noop");
    let text = config("a", "b", &dir);
    let a = started(&text);
    let file = seq_file(&Config::parse(&text).unwrap().sas[0]);
    let mark = || {
        StateDir::open(
            &netveil_daemon::runtime::state::StateLocation::new(&dir),
            "state_dir",
        )
        .unwrap()
        .read_u64(&file)
        .unwrap()
        .unwrap()
    };
    assert_eq!(mark(), SEQ_BLOCK);
    let mut last = 0;
    for i in 0..5u32 {
        for _ in 0..3 {
            let p = seal(&a, 0, 0);
            assert_eq!(seq_of(&p), last + 1, "change {i}");
            last += 1;
        }
        // The same keys under a new SPI, then removed and added again.
        let mut t = sa_table("out", 0x1101 + i, "192.0.2.1", "192.0.2.2");
        t.insert("enc_key".into(), key(0x1001).into());
        a.db.sa_update("a-to-b", t, 0).unwrap();
        assert_eq!(seq_of(&seal(&a, 0, 0)), last + 1);
        last += 1;
        a.db.sa_del("a-to-b", 0).unwrap();
        let mut t = sa_table("out", 0x1001, "192.0.2.1", "192.0.2.2");
        t.insert("name".into(), "a-to-b".into());
        a.db.sa_add(t, 0).unwrap();
        a.db.tick(0, false, false);
        assert_eq!(mark(), SEQ_BLOCK, "change {i}: a new block was reserved");
    }
    // A clean stop writes the last number used: the next start continues right above it.
    a.db.finish();
    drop(a);
    assert_eq!(mark(), u64::from(last));
    let a = started(&text);
    assert_eq!(seq_of(&seal(&a, 0, 0)), last + 1);
    drop(a);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Item 2 of the runtime-safety issue: recorded packets are never accepted twice, whatever happens to the
/// receiver: `sa del` + `sa add` with the same keys and SPI, a clean restart, a crash (no `finish`). A live sender
/// that did not restart is accepted at once after a clean restart of the receiver, and after a crash loses at most
/// the receive floor's block (here the minimum, the rate being low).
#[test]
fn replayed_packets_are_refused_across_re_adds_restarts_and_crashes() {
    use netveil_daemon::runtime::state::RX_MIN_BLOCK;
    let dir = scratch("rt-replay");
    let a = started(&config("a", "b", &dir.join("a")));
    let text_b = config("b", "a", &dir.join("b"));
    let b = started(&text_b);
    let mut recorded = Vec::new();
    for n in 1..=10u32 {
        let p = seal(&a, n, 0);
        recorded.push(p.data().to_vec());
        assert_eq!(open(&b, p, 0), Ok(n));
    }
    let replay = |b: &Shared| {
        recorded
            .iter()
            .filter(|r| open(b, PacketBuf::from_slice(r, 256, 640), 0).is_ok())
            .count()
    };
    assert_eq!(replay(&b), 0, "replayed in the same window");
    // Removed and added again with the same keys and SPI.
    b.db.sa_del("a-to-b", 0).unwrap();
    let mut t = sa_table("in", 0x1001, "192.0.2.2", "192.0.2.1");
    t.insert("name".into(), "a-to-b".into());
    b.db.sa_add(t, 0).unwrap();
    assert_eq!(replay(&b), 0, "replayed after sa del + sa add");
    assert_eq!(open(&b, seal(&a, 11, 0), 0), Ok(11), "the live sender");
    // A clean restart: the floor is what was accepted, the live sender goes on at once.
    b.db.finish();
    drop(b);
    let b = started(&text_b);
    assert_eq!(replay(&b), 0, "replayed after a clean restart");
    assert_eq!(
        open(&b, seal(&a, 12, 0), 0),
        Ok(12),
        "after a clean restart"
    );
    // A crash: the floor is the last ceiling; the live sender loses at most one block, then is accepted.
    b.db.tick(0, false, false);
    drop(b);
    let b = started(&text_b);
    assert_eq!(replay(&b), 0, "replayed after a crash");
    let mut lost = 0;
    let mut n = 12;
    loop {
        n += 1;
        match open(&b, seal(&a, n, 0), 0) {
            Ok(got) => {
                assert_eq!(got, n);
                break;
            }
            Err(_) => lost += 1,
        }
        assert!(lost <= RX_MIN_BLOCK, "still refused after {lost} packets");
    }
    assert!(
        lost > 0,
        "a crash left no gap: the floor was not reserved ahead"
    );
    // The sender crashes and restarts: it continues above its mark, a block ahead, far above the receiver's
    // ceiling. Its first packet authenticates, the receiver makes a floor above it durable at once, and accepts it:
    // a restarted sender is accepted at once. A crash of the receiver right after still refuses it.
    drop(a);
    let a = started(&config("a", "b", &dir.join("a")));
    let jumped = seal(&a, 100, 0);
    let jumped_seq = u64::from(seq_of(&jumped));
    assert!(jumped_seq > netveil_daemon::runtime::state::SEQ_BLOCK);
    let jumped_copy = jumped.data().to_vec();
    assert_eq!(open(&b, jumped, 0), Ok(100));
    assert_eq!(open(&b, seal(&a, 101, 0), 0), Ok(101));
    assert_eq!(replay(&b), 0);
    drop(b);
    let b = started(&text_b);
    assert!(
        open(&b, PacketBuf::from_slice(&jumped_copy, 256, 640), 0).is_err(),
        "the jumped packet was accepted again after a crash"
    );
    assert_eq!(replay(&b), 0);
    drop(b);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The engine's tick keeps sending going past one sequence block, and only the tick: without a top-up the sender
/// stops at its reservation (dropping, never sending an unreserved number).
#[test]
fn sealing_goes_past_one_block_only_with_top_ups() {
    use netveil_daemon::runtime::state::SEQ_BLOCK;
    let dir = scratch("rt-block");
    let a = started(&config("a", "b", &dir));
    let snap = a.db.load();
    let out = snap.sad.outbound().next().unwrap();
    let mut frags = FragCache::default();
    let mut pkt = packet([10, 2, 0, 1], 0);
    let template = pkt.data().to_vec();
    let mut sealed = 0u64;
    let refused = loop {
        pkt = PacketBuf::from_slice(&template, 256, 640);
        match a.process_out(&snap, &mut pkt, 0, &mut frags) {
            Ok(_) => sealed += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(refused, IpDrop::Ipsec(netveil_ipsec::Drop::SeqNotReserved));
    assert_eq!(sealed, SEQ_BLOCK);
    assert_eq!(out.seq_last(), SEQ_BLOCK);
    a.db.tick(0, false, false);
    for _ in 0..10 {
        pkt = PacketBuf::from_slice(&template, 256, 640);
        a.process_out(&snap, &mut pkt, 0, &mut frags).unwrap();
    }
    assert_eq!(out.seq_last(), SEQ_BLOCK + 10);
    drop(snap);
    drop(a);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Item 3 of the runtime-safety issue: the covered set never shrinks across a crash. A policy added at runtime is
/// stored (without keys) before it takes effect; the successor of a killed daemon puts it back where it stood, in
/// its fail-closed table too, with its traffic dropped (no-sa) until its SA is added again; `policy del` and
/// `netveil down` (or a stop that lifts the block) forget it.
#[test]
fn runtime_policies_stay_covered_across_a_crash() {
    let dir = scratch("rt-cover");
    let text = config("a", "b", &dir);
    let a = started(&text);
    let pol: toml::Table = toml::from_str(
        "name = \"to-c\"\ndirection = \"out\"\nsrc = \"10.1.0.0/16\"\ndst = \"10.3.0.0/16\"\naction = \"protect\"\nsas = [\"a-to-c\"]\n",
    )
    .unwrap();
    a.db.policy_add(pol, Some(0), 0).unwrap();
    let mut t = sa_table("out", 0x3001, "192.0.2.1", "192.0.2.3");
    t.insert("name".into(), "a-to-c".into());
    a.db.sa_add(t, 0).unwrap();
    let snap = a.db.load();
    let mut pkt = packet([10, 3, 0, 1], 1);
    a.process_out(&snap, &mut pkt, 0, &mut FragCache::default())
        .unwrap();
    drop(snap);
    let covered = |s: &Shared| {
        s.db.nft_text("netveil_t")
            .is_some_and(|t| t.contains("10.3.0.0/16") && t.contains("\"to-c\""))
    };
    assert!(covered(&a));
    // kill -9: nothing runs on the way out.
    drop(a);
    let a = started(&text);
    assert!(
        !covered(&a),
        "the configuration file alone does not cover it"
    );
    assert_eq!(a.db.restore_runtime_policies().unwrap(), ["to-c"]);
    assert!(covered(&a), "the successor's fail-closed table covers it");
    let snap = a.db.load();
    assert_eq!(snap.policies[0].rule.name, "to-c");
    let mut pkt = packet([10, 3, 0, 1], 2);
    assert_eq!(
        a.process_out(&snap, &mut pkt, 0, &mut FragCache::default()),
        Err(IpDrop::NoSa),
        "its traffic waits for its SA, never leaves in clear"
    );
    drop(snap);
    // Restored policies are stored again: a second crash keeps them.
    drop(a);
    let a = started(&text);
    assert_eq!(a.db.restore_runtime_policies().unwrap(), ["to-c"]);
    // `policy del` forgets it.
    a.db.policy_del("to-c", 0).unwrap();
    drop(a);
    let a = started(&text);
    assert!(a.db.restore_runtime_policies().unwrap().is_empty());
    // A lifted block (`netveil down`, block_when_stopped = false) forgets them too.
    let pol: toml::Table = toml::from_str(
        "name = \"to-d\"\ndirection = \"out\"\nsrc = \"10.1.0.0/16\"\ndst = \"10.4.0.0/16\"\naction = \"discard\"\n",
    )
    .unwrap();
    a.db.policy_add(pol, None, 0).unwrap();
    a.db.forget_runtime_policies();
    drop(a);
    let a = started(&text);
    assert!(a.db.restore_runtime_policies().unwrap().is_empty());
    drop(a);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An outbound SA added at runtime to a daemon whose state directory holds no record (new, or its contents lost)
/// and that was not started with `--fresh-keys` is refused, naming its key and the confirmation; once the directory
/// holds its record, the same SA is added and starts at 1.
#[test]
fn an_sa_added_at_runtime_needs_the_state_record_or_a_confirmation() {
    use netveil_daemon::runtime::state::{StateDir, StateLocation, SENTINEL};
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
    let out = snap
        .sad
        .iter()
        .find(|s| s.base().params.name == "a-to-c")
        .unwrap();
    assert_eq!(out.base().params.first_seq, 1);
    let _ = std::fs::remove_dir_all(&dir);
}
