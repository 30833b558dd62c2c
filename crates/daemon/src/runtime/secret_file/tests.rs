//! [`read`]'s checks, one by one: each refused file is refused for its own reason, and the same file made right is
//! read. As root, files are handed to `nobody` (65534) to test the owner; otherwise that part is skipped.

use super::*;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};

/// What a key file holds in these tests: it must never show in an error.
pub(crate) const CONTENT: &str = "SECRETVALUE123 0x5345435245545641";

pub(crate) fn is_root() -> bool {
    netveil_io::os::euid() == 0
}

/// A scratch directory with `f` (mode `mode`, contents [`CONTENT`]).
fn file(tag: &str, mode: u32) -> (PathBuf, PathBuf) {
    let d = crate::runtime::state::test_dir(&format!("secret-file-{tag}"));
    let f = d.join("f");
    std::fs::write(&f, CONTENT).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
    (d, f)
}

fn refused(path: &Path, level: Level) -> String {
    let e = read(path, level).err().expect("refused");
    let shown = e.to_string();
    assert!(!shown.contains("SECRETVALUE123"), "{shown}");
    assert!(!shown.contains("5345435245545641"), "{shown}");
    assert!(shown.contains(&path.display().to_string()), "{shown}");
    shown
}

#[test]
fn a_good_file_is_read_whole() {
    for (level, mode) in [
        (Level::Secret, 0o600),
        (Level::Secret, 0o400),
        (Level::Rules, 0o644),
        (Level::Rules, 0o600),
    ] {
        let (d, f) = file("good", mode);
        let c = read(&f, level).unwrap();
        assert_eq!(c.text().unwrap(), CONTENT);
        assert_eq!(c.mode, mode);
        assert_eq!(c.readable_by_others(), mode & 0o044 != 0);
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_secret_readable_or_writable_by_others_is_refused() {
    for mode in [0o644, 0o640, 0o604, 0o660, 0o606, 0o666, 0o620, 0o602] {
        let (d, f) = file("secret-mode", mode);
        let e = refused(&f, Level::Secret);
        assert!(e.contains("0600"), "{e}");
        assert!(e.contains(&format!("{mode:04o}")), "{e}");
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn rules_writable_by_others_are_refused() {
    for mode in [0o666, 0o664, 0o646, 0o662, 0o620, 0o602] {
        let (d, f) = file("rules-mode", mode);
        let e = refused(&f, Level::Rules);
        assert!(e.contains("writable by its group or others"), "{e}");
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_file_of_another_owner_is_refused() {
    if !is_root() {
        return;
    }
    for (level, mode) in [(Level::Secret, 0o600), (Level::Rules, 0o644)] {
        let (d, f) = file("owner", mode);
        std::os::unix::fs::chown(&f, Some(65534), Some(65534)).unwrap();
        let e = refused(&f, level);
        assert!(e.contains("owned by user 65534, not by root"), "{e}");
        // Root's again: read.
        std::os::unix::fs::chown(&f, Some(0), Some(0)).unwrap();
        assert!(read(&f, level).is_ok());
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_symlink_in_place_of_a_secret_is_refused_and_a_rules_link_is_followed_and_checked() {
    let (d, f) = file("link", 0o600);
    let link = d.join("link");
    std::os::unix::fs::symlink(&f, &link).unwrap();
    let e = refused(&link, Level::Secret);
    assert!(e.contains("symbolic link"), "{e}");
    // Rules: the file the link reaches is read, and checked.
    assert_eq!(read(&link, Level::Rules).unwrap().text().unwrap(), CONTENT);
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(refused(&link, Level::Rules).contains("writable"));
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_fifo_a_directory_and_a_socket_are_refused_without_blocking() {
    let d = crate::runtime::state::test_dir("secret-file-kinds");
    let fifo = d.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg("-m")
        .arg("0600")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    let dir = d.join("dir");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    let sock = d.join("sock");
    let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    for level in [Level::Secret, Level::Rules] {
        if made {
            // No writer: an open without O_NONBLOCK would wait for ever (the test fails after 5 s instead).
            let (tx, rx) = std::sync::mpsc::channel();
            let f = fifo.clone();
            std::thread::spawn(move || tx.send(refused(&f, level)));
            let e = match rx.recv_timeout(std::time::Duration::from_secs(5)) {
                Ok(e) => e,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    panic!("the open of a FIFO blocked")
                }
                Err(_) => panic!("a FIFO was not refused (the panic above)"),
            };
            assert!(e.contains("is a FIFO, not a regular file"), "{e}");
        }
        assert!(refused(&dir, level).contains("is a directory, not a regular file"));
        // (open(2) itself refuses a socket: ENXIO.)
        refused(&sock, level);
    }
    assert!(made, "mkfifo did not run");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_missing_file_and_one_not_text_are_errors_naming_the_file() {
    let (d, f) = file("missing", 0o600);
    assert!(refused(&d.join("none"), Level::Secret).contains("cannot be opened"));
    std::fs::write(&f, [0xff, 0xfe, 0x00]).unwrap();
    let c = read(&f, Level::Secret).unwrap();
    assert_eq!(&c.bytes[..], &[0xff, 0xfe, 0x00]);
    let e = c.text().err().unwrap().to_string();
    assert!(e.contains("not text"), "{e}");
    let _ = std::fs::remove_dir_all(d);
}

/// Every check of [`read`] through one kind of file as its loader reads it (`load`: the error a configuration that
/// names `path` gives, as the operator sees it, or `Ok`): `good` (contents that load, holding `secret`) at mode
/// 0600 (0644 for rules) loads; each refusal names `key` and the file and never shows `secret`: modes that let
/// others read (secrets) or write, another owner (as root: `nobody`), a symbolic link (secrets; for rules, the link
/// is followed and its target checked), a FIFO and a directory. `shows_path`: whether errors name the file (the
/// l2sec section shows no path).
pub(crate) fn every_refusal(
    tag: &str,
    level: Level,
    key: &str,
    good: &[u8],
    secret: &str,
    shows_path: bool,
    load: &dyn Fn(&Path) -> Result<(), String>,
) {
    let d = crate::runtime::state::test_dir(&format!("refusals-{tag}"));
    let f = d.join("file");
    let ok_mode = match level {
        Level::Secret => 0o600,
        Level::Rules => 0o644,
    };
    let set =
        |mode: u32| std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
    std::fs::write(&f, good).unwrap();
    set(ok_mode);
    load(&f).unwrap_or_else(|e| panic!("{tag}: the good file is refused: {e}"));
    let check = |path: &Path, want: &str| {
        let e = load(path)
            .err()
            .unwrap_or_else(|| panic!("{tag}: {want}: accepted"));
        assert!(e.contains(key), "{tag}: {e}");
        assert!(e.contains(want), "{tag}: wanted {want:?}: {e}");
        assert!(!e.contains(secret), "{tag}: shows the secret: {e}");
        if shows_path {
            assert!(e.contains(&path.display().to_string()), "{tag}: {e}");
        }
    };
    let bad_modes: &[u32] = match level {
        Level::Secret => &[0o640, 0o604, 0o620, 0o602, 0o666],
        Level::Rules => &[0o664, 0o646, 0o666],
    };
    for &m in bad_modes {
        set(m);
        check(&f, &format!("mode {m:04o}"));
    }
    set(ok_mode);
    if is_root() {
        std::os::unix::fs::chown(&f, Some(65534), Some(65534)).unwrap();
        check(&f, "owned by user 65534, not by root");
        // World-writable and nobody's, as issue 40 found a PILSC key file: refused (for one reason or the other).
        set(0o666);
        check(&f, "");
        std::os::unix::fs::chown(&f, Some(0), Some(0)).unwrap();
        set(ok_mode);
    }
    let link = d.join("link");
    std::os::unix::fs::symlink(&f, &link).unwrap();
    match level {
        Level::Secret => check(&link, "symbolic link"),
        Level::Rules => {
            load(&link).unwrap_or_else(|e| panic!("{tag}: a link to a good file is refused: {e}"));
            set(0o666);
            check(&link, "writable by its group or others");
            set(ok_mode);
        }
    }
    let fifo = d.join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg("-m")
        .arg(format!("{ok_mode:o}"))
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success()));
    check(&fifo, "is a FIFO, not a regular file");
    let dir = d.join("dir");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    check(&dir, "is a directory, not a regular file");
    load(&f).unwrap_or_else(|e| panic!("{tag}: the good file is refused at the end: {e}"));
    let _ = std::fs::remove_dir_all(d);
}

/// An l2sec configuration that writes its group secret.
const L2_CONFIG: &str = "[l2sec]\ninterface = \"eth0\"\naddress = \"192.0.2.10/24\"\n\
    group_secret = \"53454352455456414c5545313233535345435245545641\"\n";

/// The configuration file (`netveil up -c`, `check`, `down`, PILSC's reload of `[[pilsc.rule]]`) is read as rules:
/// every refusal says why and names the file, never a key written in it.
#[test]
fn the_configuration_file_is_checked_as_opened() {
    let load = |p: &Path| {
        crate::load_all(p).map(|_| ()).map_err(|es| {
            es.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        })
    };
    every_refusal(
        "config",
        Level::Rules,
        "",
        L2_CONFIG.as_bytes(),
        "53454352455456414c55",
        true,
        &load,
    );
    // The IP engine's own loader (`netveil pcap` reads SAs with it) and l2sec's: the same check.
    every_refusal(
        "config-ip",
        Level::Rules,
        "",
        b"[interface]\nname = \"nv0\"\n",
        "SECRETVALUE123",
        true,
        &|p| {
            crate::engines::ip::config::Config::load(p)
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    );
    every_refusal(
        "config-l2",
        Level::Rules,
        "",
        L2_CONFIG.as_bytes(),
        "53454352455456414c55",
        true,
        &|p| {
            crate::engines::l2::L2Config::load(p)
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    );
}

/// A configuration that writes keys (a static SA, a group secret, a PSK, PILSC rules with keys) and that others may
/// read loads with a warning naming the file and its mode, never a key; one readable by its owner only, or one
/// that only names files of keys, loads without one.
#[test]
fn a_configuration_with_keys_readable_by_others_is_warned_about() {
    let d = crate::runtime::state::test_dir("config-warn");
    let f = d.join("netveil.toml");
    let warnings = |text: &str, mode: u32| {
        std::fs::write(&f, text).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        crate::load_all(&f).unwrap().warnings
    };
    let w = warnings(L2_CONFIG, 0o644);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains(&f.display().to_string()), "{w:?}");
    assert!(
        w[0].contains("mode 0644") && w[0].contains("chmod 600"),
        "{w:?}"
    );
    assert!(!w[0].contains("53454352"), "{w:?}");
    assert!(warnings(L2_CONFIG, 0o640).len() == 1);
    assert!(warnings(L2_CONFIG, 0o600).is_empty());
    let pilsc = |key: &str| {
        format!(
            "[pilsc]\nstate_dir = \"/nonexistent\"\n[[pilsc.rule]]\nrule = 1\nsecurity = true\nip = \"10.0.0.2\"\n\
             protocol = \"any\"\nencryption = 1\nkey = \"{key}\"\n"
        )
    };
    assert_eq!(
        warnings(&pilsc("0x000102030405060708090a0b0c0d0e0f"), 0o644).len(),
        1
    );
    let ip = "[interface]\nname = \"nv0\"\naddresses = [\"198.51.100.1/24\"]\nstate_dir = \"/nonexistent\"\n\n\
        [[sa]]\nname = \"a\"\ndirection = \"out\"\nspi = 0x1001\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
        suite = \"aes128gcm16\"\nenc_key = \"00112233445566778899aabbccddeeff01020304\"\n";
    assert_eq!(warnings(ip, 0o644).len(), 1);
    // Names of keys only: nothing to warn about.
    assert!(warnings("[interface]\nname = \"nv0\"\n", 0o644).is_empty());
    let _ = std::fs::remove_dir_all(d);
}
