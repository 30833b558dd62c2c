//! Tests of the state directory and its stores.

use super::*;

/// A location whose keys are confirmed fresh (as `netveil up --fresh-keys`).
fn fresh(p: &Path) -> StateLocation {
    StateLocation {
        fresh_keys: true,
        ..StateLocation::new(p)
    }
}

fn out_sa(name: &str) -> netveil_ipsec::SaParams {
    let cfg = crate::engines::ip::config::Config::parse(&format!(
        "[interface]\nallow_null_null = true\n[[sa]]\nname = \"{name}\"\ndirection = \"out\"\nspi = 0x1001\n\
         local = \"192.0.2.1\"\nremote = \"192.0.2.2\"\nsuite = \"null-null\"\n"
    ))
    .unwrap();
    cfg.sas[0].clone()
}

/// Marks: the first block is synced before use and given back by a start that never sent; a block is topped
/// up one block above what is used (so a crash skips at most one block), and a clean stop writes what was
/// used.
#[test]
fn sequence_marks_across_starts_crashes_and_stops() {
    let dir = test_dir("seq-test").join("state");
    let open = || StateDir::open(&fresh(&dir), "state_dir").unwrap();
    let p = out_sa("a");
    let file = seq_file(&p);
    let (store, starts) = SeqStore::start(open(), std::slice::from_ref(&p)).unwrap();
    let s = starts[0].clone().unwrap();
    assert_eq!((s.first, s.reserved), (1, SEQ_BLOCK));
    assert_eq!(open().read_u64(&file), Ok(Some(SEQ_BLOCK)));
    // A failed start (never armed) gives its block back.
    drop(store);
    assert_eq!(open().read_u64(&file), Ok(Some(0)));
    // A started, armed daemon with its SAD.
    let run = || {
        let (mut store, starts) = SeqStore::start(open(), std::slice::from_ref(&p)).unwrap();
        store.arm();
        let s = starts[0].clone().unwrap();
        let mut sad = netveil_ipsec::bundle::Sad::default();
        let mut q = p.clone();
        q.first_seq = s.first;
        let i = sad.insert_out(
            netveil_ipsec::OutboundSa::with_reservation(
                q,
                0,
                s.reserved,
                &mut netveil_crypto::rand::OsRng,
            )
            .unwrap(),
        );
        store.track(sad.out_arc(i).clone());
        (store, sad, s.first)
    };
    // A real run: send past half the block, top up.
    let (mut store, sad, _) = run();
    let pkt = [
        0x45u8, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 51, 100, 1, 198, 51, 100, 2, 0, 1, 0,
        2, 0, 8, 0, 0,
    ];
    let send = |sad: &netveil_ipsec::bundle::Sad, n: u64| {
        for _ in 0..n {
            let mut b = netveil_wire::PacketBuf::from_slice(&pkt, 256, 640);
            let i = sad.outbound_indices().next().unwrap();
            netveil_ipsec::bundle::protect(sad, &[i], &mut b, 0).unwrap();
        }
    };
    send(&sad, SEQ_BLOCK / 2 + 10);
    assert!(store.top_up().is_empty());
    let sa = sad.outbound().next().unwrap();
    let used = sa.seq_last();
    assert_eq!(used, SEQ_BLOCK / 2 + 10);
    assert_eq!(sa.seq_reserved(), used + SEQ_BLOCK);
    assert_eq!(open().read_u64(&file), Ok(Some(used + SEQ_BLOCK)));
    // A crash now (no finish): the next start continues above everything sent, at most one block ahead.
    drop(store);
    let (store2, starts) = SeqStore::start(open(), std::slice::from_ref(&p)).unwrap();
    let first = starts[0].clone().unwrap().first;
    assert!(
        first > used && first <= used + SEQ_BLOCK + 1,
        "{first} after {used}"
    );
    // (Given back: it sent nothing.)
    drop(store2);
    // A clean stop writes the last number used.
    let (mut store, sad, first) = run();
    send(&sad, 3);
    store.finish();
    assert_eq!(open().read_u64(&file), Ok(Some(first + 2)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn values_survive_and_damage_is_an_error() {
    let dir = test_dir("state-test");
    let s = StateDir::open(&StateLocation::new(dir.join("sub")), "state_dir").unwrap();
    assert_eq!(
        std::fs::metadata(s.path()).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(s.read_u64("x"), Ok(None));
    s.write_u64("x", 42).unwrap();
    s.write_u64("x", 1 << 40).unwrap();
    let again = StateDir::open(&StateLocation::new(dir.join("sub")), "state_dir").unwrap();
    assert_eq!(again.read_u64("x"), Ok(Some(1 << 40)));
    std::fs::write(dir.join("sub/x"), "garbage").unwrap();
    assert!(again.read_u64("x").unwrap_err().contains("damaged"));
    // A directory that cannot be created is refused with the key named.
    let e = StateDir::open(
        &StateLocation::new("/proc/netveil-nope"),
        "interface.state_dir",
    )
    .unwrap_err();
    assert_eq!(e.key, "interface.state_dir");
    let _ = std::fs::remove_dir_all(&dir);
}

fn sh(args: &[&str]) {
    let st = std::process::Command::new(args[0])
        .args(&args[1..])
        .status()
        .unwrap();
    assert!(st.success(), "{args:?}");
}

/// What a state directory without its record does with marks: a key without one is refused (the error names
/// the key and says what to do, and nothing is written), a key with one continues above it; `--fresh-keys`
/// writes the record once, and from then on a key without a mark is a new one (starts at 1) without it.
#[test]
fn a_missing_mark_needs_the_record_or_a_confirmation() {
    let dir = test_dir("fresh").join("state");
    let (p, q) = (out_sa("a"), {
        let mut q = out_sa("b");
        q.enc_key = zeroize::Zeroizing::new(vec![1; 20]);
        q
    });
    assert_ne!(seq_file(&p), seq_file(&q));
    let plain = StateLocation::new(&dir);
    let d = StateDir::open(&plain, "interface.state_dir").unwrap();
    assert!(!d.is_known());
    let e = SeqStore::start(d, std::slice::from_ref(&p)).err().unwrap();
    assert_eq!(e.key, "sa[0].enc_key");
    assert!(
        e.reason.contains("SA 'a'")
            && e.reason.contains("no sequence mark")
            && e.reason.contains("--fresh-keys"),
        "{}",
        e.reason
    );
    assert!(!dir.join(seq_file(&p)).exists());
    assert!(!dir.join(SENTINEL).exists());
    let note = StateDir::check(&plain, "interface.state_dir")
        .unwrap()
        .unwrap();
    assert!(note.contains("--fresh-keys"), "{note}");
    // A key that has a mark (an older netveil wrote no record) continues above it.
    StateDir::open(&plain, "k")
        .unwrap()
        .write_u64(&seq_file(&q), 41)
        .unwrap();
    let (store, starts) = SeqStore::start(
        StateDir::open(&plain, "k").unwrap(),
        std::slice::from_ref(&q),
    )
    .unwrap();
    assert_eq!(starts[0].as_ref().unwrap().first, 42);
    drop(store);
    // Confirmed: the record is written, and the key starts at 1.
    let d = StateDir::open(&fresh(&dir), "interface.state_dir").unwrap();
    assert!(d.is_known());
    let rec = std::fs::read_to_string(dir.join(SENTINEL)).unwrap();
    assert!(
        rec.starts_with("netveil state directory") && rec.contains("\nid "),
        "{rec}"
    );
    let (store, starts) = SeqStore::start(d, std::slice::from_ref(&p)).unwrap();
    assert_eq!(starts[0].as_ref().unwrap().first, 1);
    drop(store);
    // Later starts need no confirmation, and the record is not rewritten.
    let d = StateDir::open(&plain, "interface.state_dir").unwrap();
    assert!(d.is_known());
    assert_eq!(std::fs::read_to_string(dir.join(SENTINEL)).unwrap(), rec);
    let mut r = out_sa("r");
    r.enc_key = zeroize::Zeroizing::new(vec![2; 20]);
    assert!(SeqStore::start(d, std::slice::from_ref(&r)).is_ok());
    assert_eq!(
        StateDir::check(&plain, "interface.state_dir").unwrap(),
        None
    );
    // The record lost (as a tmpfs after a reboot): refused again.
    std::fs::remove_file(dir.join(SENTINEL)).unwrap();
    std::fs::remove_file(dir.join(seq_file(&p))).unwrap();
    let d = StateDir::open(&plain, "interface.state_dir").unwrap();
    assert!(SeqStore::start(d, std::slice::from_ref(&p)).is_err());
}

/// A directory, or a directory above it, owned by another user than root is refused by `open` and `check`,
/// naming the key and the owner; owned by root again, it is accepted.
#[test]
fn a_foreign_owner_is_refused() {
    if !netveil_testkit::require_root_for(&netveil_testkit::this_test(), "chown") {
        return;
    }
    let base = test_dir("owner");
    let dir = base.join("state");
    let loc = StateLocation::new(&dir);
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    sh(&["chown", "65534:65534", dir.to_str().unwrap()]);
    let e = StateDir::open(&loc, "interface.state_dir").unwrap_err();
    assert_eq!(e.key, "interface.state_dir");
    assert!(e.reason.contains("owned by user 65534"), "{}", e.reason);
    let e = StateDir::check(&loc, "interface.state_dir").unwrap_err();
    assert!(e.reason.contains("owned by user 65534"), "{}", e.reason);
    // Nothing was written into it.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    // A foreign parent: the directory below it would not be created.
    sh(&["chown", "0:0", dir.to_str().unwrap()]);
    assert!(StateDir::open(&loc, "interface.state_dir").is_ok());
    sh(&["chown", "65534:65534", base.to_str().unwrap()]);
    let sub = StateLocation::new(base.join("new"));
    let e = StateDir::open(&sub, "l2sec.state_dir").unwrap_err();
    assert_eq!(e.key, "l2sec.state_dir");
    assert!(e.reason.contains("owned by user 65534"), "{}", e.reason);
    assert!(!base.join("new").exists());
    sh(&["chown", "0:0", base.to_str().unwrap()]);
    assert!(StateDir::open(&sub, "l2sec.state_dir").is_ok());
    let _ = std::fs::remove_dir_all(&base);
}

/// A group-writable directory above the state directory, a group-writable state directory, and a sticky
/// world-writable one (/tmp) are refused; the same paths with mode 0755 are accepted.
#[test]
fn writable_by_others_is_refused() {
    let base = test_dir("mode");
    let dir = base.join("state");
    let loc = StateLocation::new(&dir);
    let mode =
        |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    mode(&base, 0o775);
    for e in [
        StateDir::open(&loc, "interface.state_dir").unwrap_err(),
        StateDir::check(&loc, "interface.state_dir").unwrap_err(),
    ] {
        assert_eq!(e.key, "interface.state_dir");
        assert!(
            e.reason
                .contains("writable by its group or others (mode 775)"),
            "{}",
            e.reason
        );
    }
    assert!(!dir.exists());
    mode(&base, 0o755);
    assert!(StateDir::open(&loc, "interface.state_dir").is_ok());
    mode(&dir, 0o770);
    let e = StateDir::open(&loc, "interface.state_dir").unwrap_err();
    assert!(e.reason.contains("mode 770"), "{}", e.reason);
    mode(&dir, 0o700);
    assert!(StateDir::open(&loc, "interface.state_dir").is_ok());
    // Sticky and world-writable (the system's temporary directory, where there is one like that).
    let tmp = std::env::temp_dir();
    if std::fs::metadata(&tmp).unwrap().mode() & 0o1002 == 0o1002 {
        let t = StateLocation::new(tmp.join(format!("netveil-sticky-{}", std::process::id())));
        let e = StateDir::check(&t, "interface.state_dir").unwrap_err();
        assert!(e.reason.contains("sticky"), "{}", e.reason);
        assert!(StateDir::open(&t, "interface.state_dir").is_err());
        assert!(!t.path.exists());
    }
    // Through a symbolic link from a safe place into an unsafe one.
    let unsafe_dir = base.join("open");
    std::fs::create_dir(&unsafe_dir).unwrap();
    mode(&unsafe_dir, 0o777);
    std::os::unix::fs::symlink(&unsafe_dir, base.join("link")).unwrap();
    let e = StateDir::open(&StateLocation::new(base.join("link/state")), "k").unwrap_err();
    assert!(e.reason.contains("mode 777"), "{}", e.reason);
    let _ = std::fs::remove_dir_all(&base);
}

/// Captures what `f` logs (at warn and above).
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let w = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || w.clone())
        .finish();
    let r = tracing::subscriber::with_default(sub, f);
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (r, text)
}

/// A state directory on a tmpfs (mounted for the test) is refused, naming the key and `allow_volatile_state`;
/// allowed, every open warns and `check` notes it; the same directory on the disk opens without a warning.
#[test]
fn a_volatile_directory_needs_allow_volatile_state_and_warns() {
    if !netveil_testkit::require_root_for(&netveil_testkit::this_test(), "mount") {
        return;
    }
    let base = test_dir("volatile");
    let mnt = base.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let dir = mnt.join("state");
    let loc = StateLocation::new(&dir);
    // On the disk first (positive control): no warning.
    let (r, log) = logged(|| StateDir::open(&loc, "interface.state_dir"));
    assert!(r.is_ok() && log.is_empty(), "{log}");
    std::fs::remove_dir_all(&dir).unwrap();
    sh(&[
        "mount",
        "-t",
        "tmpfs",
        "-o",
        "size=1m,mode=0755",
        "tmpfs",
        mnt.to_str().unwrap(),
    ]);
    struct Umount(PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Umount(mnt.clone());
    for e in [
        StateDir::check(&loc, "interface.state_dir").unwrap_err(),
        StateDir::open(&loc, "interface.state_dir").unwrap_err(),
    ] {
        assert_eq!(e.key, "interface.state_dir");
        assert!(
            e.reason.contains("is on a tmpfs") && e.reason.contains("allow_volatile_state = true"),
            "{}",
            e.reason
        );
    }
    assert!(!dir.exists(), "a refused open created {}", dir.display());
    let allowed = StateLocation {
        allow_volatile: true,
        ..loc.clone()
    };
    for _ in 0..2 {
        let (r, log) = logged(|| StateDir::open(&allowed, "interface.state_dir"));
        assert!(r.is_ok());
        assert!(
            log.contains("WARN") && log.contains("is on a tmpfs") && log.contains("--fresh-keys"),
            "{log}"
        );
    }
    let note = StateDir::check(&allowed, "interface.state_dir")
        .unwrap()
        .unwrap();
    assert!(note.contains("tmpfs"), "{note}");
    drop(_u);
    let _ = std::fs::remove_dir_all(&base);
}
