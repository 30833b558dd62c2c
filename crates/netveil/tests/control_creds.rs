//! Who may use the control socket. At the command line: `control_group` names a group of this host, or `netveil
//! check` refuses the file with the key named and exit code 2. On a daemon (in its own network namespace, the lab
//! prefix `nvcc`): the daemon's umask is private whatever it was started with, its socket is 0660 of the control
//! group, and it answers a client whose group id is that group's, but not one that is only a supplementary
//! member (the file modes let it connect; the credentials do not). The server and client checks themselves are
//! tested in the control crate. Needs root.

use std::os::unix::fs::MetadataExt;
use std::process::Command;

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");

fn check(group: &str) -> (Option<i32>, String) {
    let dir = std::env::temp_dir().join(format!("nvcc-{}-{group}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("c.toml");
    // An interface name no other test uses; nothing is applied by `check`.
    std::fs::write(
        &f,
        format!("[interface]\nname = \"nvcc0\"\ncontrol_group = \"{group}\"\n"),
    )
    .unwrap();
    let out = std::process::Command::new(NETVEIL)
        .args(["check", "-c"])
        .arg(&f)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout),
    )
}

#[test]
fn an_unknown_control_group_is_a_config_error() {
    let (code, out) = check("netveil-no-such-group");
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("interface.control_group") && out.contains("no group"),
        "{out}"
    );
    // The control: a group of this host passes that key.
    let (_, out) = check("root");
    assert!(!out.contains("control_group"), "{out}");
}

/// `netveil status --json --socket SOCK` run as user nobody with group id `gid` and supplementary `groups` (a
/// comma-separated list, or none).
fn status_as_nobody(sock: &std::path::Path, gid: u32, groups: &str) -> std::process::Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            &format!("--regid={gid}"),
            &if groups.is_empty() {
                "--clear-groups".to_string()
            } else {
                format!("--groups={groups}")
            },
            "--",
            NETVEIL,
            "status",
            "--json",
            "--socket",
        ])
        .arg(sock)
        .output()
        .unwrap()
}

#[test]
fn a_daemon_answers_its_control_group() {
    assert!(netveil_lab::lab::is_root(), "the namespace tests need root");
    let mut lab = netveil_lab::lab::Lab::new("nvcc")
        .unwrap()
        .with_netveil(NETVEIL);
    let ns = lab.add_ns("a").unwrap();
    let sock = lab.socket_path("a");
    let config = format!(
        "[interface]\nname = \"nvcc0\"\ncontrol_socket = \"{}\"\nstate_dir = \"{}\"\ncontrol_group = \"nogroup\"\n",
        sock.display(),
        lab.dir().join("state").display()
    );
    // Started with the widest umask: the daemon sets its own before anything else.
    let old = netveil_io::os::set_umask(0);
    let started = lab.start_daemon(&ns, "a", &config);
    netveil_io::os::set_umask(old);
    let d = started.unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid().unwrap())).unwrap();
    let umask = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
    assert_eq!(umask.split_whitespace().nth(1), Some("0077"), "{status}");
    let m = std::fs::metadata(&sock).unwrap();
    assert_eq!((m.mode() & 0o777, m.gid()), (0o660, 65534));
    // nobody with the control group (nogroup) as its group id: answered.
    let out = status_as_nobody(&sock, 65534, "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(st.is_object(), "{st}");
    // nobody with another group id, in nogroup only as a supplementary group: the socket's mode lets it connect,
    // the daemon refuses it (and says so in its log, by ids).
    let out = status_as_nobody(&sock, 12345, "65534");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("permission denied: the control socket answers root"),
        "{err}"
    );
    let log = d.log();
    assert!(
        log.contains("refused a client (uid 65534, gid 12345"),
        "{log}"
    );
}
