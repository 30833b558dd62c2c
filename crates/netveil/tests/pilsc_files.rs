//! PILSC's files as another user could leave them (issue 40): two hosts (network namespaces) protect ICMP with a
//! key named in a key file. A's key file is then replaced with a different key and handed to `nobody`, mode 0666,
//! and its rule file gains a rule: `netveil reload` and SIGHUP refuse it (exit code 2, the key and the reason
//! named, no key shown), and the daemon keeps running with the old rules and key (pings still come back, `status`
//! still shows one rule). Put right (root's, 0600), the same files reload. Needs root, iptables (Debian's package).

use netveil_lab::lab::{self, Lab};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");
const ADDR: [&str; 2] = ["10.78.0.1", "10.78.0.2"];
const KEY: &str = "0x000102030405060708090a0b0c0d0e0f";
/// The key the tampered file holds: never shown, never put in force.
const OTHER_KEY: &str = "0x53454352455456415345435245545641";

fn rules(side: usize, extra: &str) -> String {
    format!(
        "Rule = 1; Security = true; IP = {}; Protocol = ICMP; Encryption = AES-128; Key = icmp;\n{extra}",
        ADDR[1 - side]
    )
}

fn put(path: &Path, text: &str, mode: u32, owner: u32) {
    std::fs::write(path, text).unwrap();
    std::os::unix::fs::chown(path, Some(owner), Some(owner)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn ping(lab: &Lab, ns: &str, dst: &str) -> String {
    lab.exec_ok(ns, &["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", dst])
        .unwrap_or_else(|e| e.to_string())
}

#[test]
fn a_reload_refuses_a_key_file_another_user_could_change_and_keeps_the_old_rules() {
    assert!(lab::is_root(), "the namespace tests need root");
    for t in ["ip", "ping", "iptables"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    let mut lab = Lab::new("pk").unwrap().with_netveil(NETVEIL);
    let a = lab.add_ns("a").unwrap();
    let b = lab.add_ns("b").unwrap();
    lab.veth(&a, "veth-a", &b, "veth-b").unwrap();
    lab.addr(&a, "veth-a", &format!("{}/24", ADDR[0])).unwrap();
    lab.addr(&b, "veth-b", &format!("{}/24", ADDR[1])).unwrap();
    let ns = [a, b];
    let dir = lab.dir().to_path_buf();
    let file = |side: usize, ext: &str| dir.join(format!("pk-{side}.{ext}"));
    let d: Vec<lab::Daemon> = (0..2)
        .map(|s| {
            put(&file(s, "rules"), &rules(s, ""), 0o644, 0);
            put(&file(s, "keys"), &format!("icmp = {KEY}\n"), 0o600, 0);
            let config = format!(
                "[pilsc]\nrules = \"{}\"\nkeys = \"{}\"\nqueue = 20\ncontrol_socket = \"{}\"\nstate_dir = \"{}\"\n",
                file(s, "rules").display(),
                file(s, "keys").display(),
                lab.socket_path(&format!("pk{s}")).display(),
                dir.join(format!("state-{s}")).display(),
            );
            lab.start_daemon(&ns[s], &format!("pk{s}"), &config).unwrap()
        })
        .collect();
    let logs = || format!("{}\n{}", d[0].log(), d[1].log());
    let out = ping(&lab, &ns[0], ADDR[1]);
    assert!(out.contains("3 received"), "{out}\n{}", logs());
    let rules_in_force = |daemon: &lab::Daemon| {
        daemon.status_json().unwrap()["engines"]["pilsc"]["rules"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(rules_in_force(&d[0]), 1);

    // A's files as another user could leave them: another key, nobody's and world-writable; one more rule.
    let tampered_rules = rules(
        0,
        "Rule = 2; Security = false; IP = 10.78.0.0/24; Protocol = UDP;\n",
    );
    put(&file(0, "rules"), &tampered_rules, 0o644, 0);
    put(
        &file(0, "keys"),
        &format!("icmp = {OTHER_KEY}\n"),
        0o666,
        65534,
    );
    let reload = || {
        Command::new(NETVEIL)
            .args(["reload", "--socket"])
            .arg(lab.socket_path("pk0"))
            .output()
            .unwrap()
    };
    let out = reload();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("reload refused, nothing changed: pilsc.keys: ")
            && err.contains(&file(0, "keys").display().to_string())
            && err.contains("is owned by user 65534, not by root"),
        "{err}"
    );
    assert!(!err.contains(&OTHER_KEY[2..18]), "{err}");
    // SIGHUP: the same refusal, logged.
    Command::new("kill")
        .args(["-HUP", &d[0].pid().unwrap().to_string()])
        .status()
        .unwrap();
    netveil_testkit::wait_until(
        Duration::from_secs(10),
        "the SIGHUP reload's refusal in the log",
        || {
            d[0].log()
                .contains("SIGHUP: reload refused, nothing changed: pilsc.keys: ")
        },
    );
    let log = d[0].log();
    assert!(!log.contains(&OTHER_KEY[2..18]), "{log}");
    // Root's, but others may write it: refused for that.
    put(&file(0, "keys"), &format!("icmp = {OTHER_KEY}\n"), 0o666, 0);
    let out = reload();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("(mode 0666)"), "{err}");
    // The old rules and key are still in force: one rule, and B (which has the old key) still answers.
    assert_eq!(rules_in_force(&d[0]), 1);
    let out = ping(&lab, &ns[0], ADDR[1]);
    assert!(out.contains("3 received"), "{out}\n{}", logs());

    // Put right (root's, 0600, the old key): the new rule file reloads.
    put(&file(0, "keys"), &format!("icmp = {KEY}\n"), 0o600, 0);
    let out = reload();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(rules_in_force(&d[0]), 2);
    let out = ping(&lab, &ns[0], ADDR[1]);
    assert!(out.contains("3 received"), "{out}\n{}", logs());
}
