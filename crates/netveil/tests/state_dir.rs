//! The state directory as an operator meets it (issue 21, item 5), end to end in network namespaces (root; the
//! tools of .ci/setup): a `state_dir` on a tmpfs is refused (exit code 2, nothing applied) unless
//! `allow_volatile_state = true`; with it, after a "reboot" (the tmpfs unmounted and mounted again) the same keys
//! are refused until `--fresh-keys` confirms new ones, so sequence numbers 1, 2, 3 are never sent twice under one
//! key: the capture on the wire shows every (SPI, sequence number) pair once.

use netveil_lab::lab::{self, HostPair, Lab, TwoHosts};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    assert!(lab::is_root(), "the state directory tests need root");
    for t in ["ip", "ping", "tcpdump", "tshark", "mount"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn ping_once(lab: &Lab, ns: &str, dst: &str) -> bool {
    lab.exec(ns, &["ping", "-n", "-c", "1", "-W", "2", dst])
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A tmpfs mounted at a directory of the lab (mode 0755, root's), unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs"])
            .arg(at)
            .status()
            .unwrap();
        assert!(st.success(), "mount tmpfs at {}", at.display());
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

fn with_state_dir(text: &str, dir: &Path, extra: &str) -> String {
    let mut out: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with("state_dir = ") {
                format!("state_dir = \"{}\"{extra}", dir.display())
            } else {
                l.to_string()
            }
        })
        .collect();
    out.push(String::new());
    out.join("\n")
}

fn up_refused(lab: &Lab, ns: &str, config: &str, args: &[&str]) -> (Option<i32>, String) {
    let path = lab.dir().join("refused.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = vec![NETVEIL, "up"];
    cmd.extend_from_slice(args);
    cmd.extend_from_slice(&["-c", path.to_str().unwrap()]);
    let out = lab
        .command(ns, &["timeout", "10"])
        .args(&cmd)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn a_volatile_state_dir_is_refused_and_a_reboot_never_repeats_a_sequence_number() {
    let _g = serial();
    let mut lab = Lab::new("nvsd").expect("lab").with_netveil(NETVEIL);
    let pair = HostPair::esp("aes128gcm16");
    let mut hosts = TwoHosts::topology(&mut lab, &pair).expect("setup");
    let (a, b) = (hosts.ns[0].clone(), hosts.ns[1].clone());
    let b_in = hosts.addrs[1].inner.to_string();
    let a_out = hosts.addrs[0].outer.to_string();
    let mnt = lab.dir().join("volatile");
    let tmpfs = Tmpfs::mount(&mnt);
    let state = mnt.join("state");

    // 1. On a tmpfs: refused, naming the key and the way out; nothing applied (even with --fresh-keys).
    let volatile = with_state_dir(&hosts.configs[0], &state, "");
    let (code, err) = up_refused(&lab, &a, &volatile, &["--fresh-keys"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("interface.state_dir")
            && err.contains("tmpfs")
            && err.contains("allow_volatile_state = true"),
        "{err}"
    );
    assert!(
        !state.exists(),
        "the refused up created {}",
        state.display()
    );
    assert!(
        !lab.exec(&a, &["ip", "link", "show", "nv0"])
            .unwrap()
            .status
            .success(),
        "the refused up created the TUN device"
    );
    let out = lab
        .exec(
            &a,
            &[
                NETVEIL,
                "check",
                "-c",
                lab.dir().join("refused.toml").to_str().unwrap(),
            ],
        )
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "check");

    // 2. The operator knows: allowed, with a warning; the first start confirms its (new) keys.
    let allowed = with_state_dir(&hosts.configs[0], &state, "\nallow_volatile_state = true");
    let mut cap = lab
        .capture(&a, "veth-a", "state.pcap", 96, &["esp"])
        .expect("tcpdump");
    hosts.daemons.push(
        lab.start_daemon(&a, "a", &allowed)
            .expect("a with allow_volatile_state"),
    );
    hosts
        .daemons
        .push(lab.start_daemon(&b, "b", &hosts.configs[1]).expect("b"));
    let log = hosts.daemon(0).log();
    assert!(
        log.contains("WARN") && log.contains("is on a tmpfs"),
        "{log}"
    );
    for i in 0..3 {
        assert!(ping_once(&lab, &a, &b_in), "ping {i}");
    }
    hosts.daemons[0].stop();

    // 3. "Reboot": the tmpfs loses everything. The same keys are refused without the confirmation, naming the SA's
    //    key and what to do; the attempt sends nothing.
    drop(tmpfs);
    let tmpfs = Tmpfs::mount(&mnt);
    let again = lab.start_daemon_with(&a, "a", &allowed, &[]);
    let refused = match again {
        Ok(d) => {
            // Without the refusal: what it would send (shows on the wire below).
            hosts.daemons[0] = d;
            let _ = ping_once(&lab, &a, &b_in);
            None
        }
        Err(e) => Some(e.to_string()),
    };
    let err = refused.expect("up started with the same keys after their marks were lost");
    assert!(
        err.contains("exit status: 2")
            && err.contains("sa[0].enc_key")
            && err.contains("no sequence mark")
            && err.contains("--fresh-keys"),
        "{err}"
    );
    assert!(
        !lab.exec(&a, &["ip", "link", "show", "nv0"])
            .unwrap()
            .status
            .success(),
        "the refused up created the TUN device"
    );
    assert!(
        !ping_once(&lab, &a, &b_in),
        "a ping went through with no daemon"
    );

    // 4. New keys (and SPIs), confirmed: traffic flows again, starting at 1 under the new SPI.
    let fresh = pair
        .configs([&lab.socket_path("a"), &lab.socket_path("b")])
        .unwrap()
        .map(|c| {
            c.replace("spi = 0x1001", "spi = 0x1101")
                .replace("spi = 0x2001", "spi = 0x2101")
        });
    assert!(fresh[0].contains("spi = 0x1101") && fresh[1].contains("spi = 0x1101"));
    hosts.daemons[1].stop();
    hosts.daemons[1] = lab.start_daemon(&b, "b", &fresh[1]).expect("b, new keys");
    hosts.daemons[0] = lab
        .start_daemon(
            &a,
            "a",
            &with_state_dir(&fresh[0], &state, "\nallow_volatile_state = true"),
        )
        .expect("a, new keys, --fresh-keys");
    for i in 0..3 {
        assert!(ping_once(&lab, &a, &b_in), "ping {i} with the new keys");
    }
    hosts.daemons[0].stop();
    hosts.daemons[1].stop();
    drop(tmpfs);

    let pcap = cap.stop().unwrap();
    let frames = lab::tshark_frames(&pcap, None, Some("esp")).expect("tshark");
    let sent: Vec<(String, u64)> = frames
        .iter()
        .filter(|f| f.src == a_out)
        .filter_map(|f| Some((f.esp_spi.clone()?, f.esp_seq?)))
        .collect();
    let by_spi = |spi: &str| -> Vec<u64> {
        sent.iter()
            .filter(|(s, _)| s.ends_with(spi))
            .map(|(_, n)| *n)
            .collect()
    };
    // (The positive control of the capture: both runs are on it.)
    assert_eq!(by_spi("1001"), vec![1, 2, 3], "{sent:?}");
    assert_eq!(by_spi("1101"), vec![1, 2, 3], "{sent:?}");
    let unique: HashSet<&(String, u64)> = sent.iter().collect();
    assert_eq!(
        unique.len(),
        sent.len(),
        "an (SPI, sequence number) pair was sent twice: {sent:?}"
    );
}
