//! The lab's errors: their texts (a report's cells and the tests read some), their sources and exit codes.

use super::Error;
use std::error::Error as _;
use std::os::unix::process::ExitStatusExt;

#[test]
fn a_missing_peer_says_it_is_not_installed_and_how_to_get_it() {
    let e = crate::lab_run::tools::wireguard_go_missing();
    assert_eq!(
        e.to_string(),
        "wireguard-go is not installed (go install golang.zx2c4.com/wireguard@latest)"
    );
    assert_eq!(e.exit_code(), 1);
}

#[test]
fn a_failed_command_shows_its_line_how_it_ended_and_what_it_printed() {
    let st = std::process::ExitStatus::from_raw(2 << 8);
    let e = Error::command("ip netns add x", Some(st), "  File exists\n");
    assert_eq!(
        e.to_string(),
        "'ip netns add x' failed (exit status: 2): File exists"
    );
    assert_eq!(
        Error::command("iperf3", None, "").to_string(),
        "'iperf3' failed"
    );
    assert_eq!(e.exit_code(), 1);
}

#[test]
fn a_timeout_says_what_did_not_happen_within_how_long() {
    assert_eq!(
        Error::timeout("tcpdump did not start", 10.0, "").to_string(),
        "tcpdump did not start within 10 s"
    );
    assert_eq!(
        Error::timeout("sshd did not listen on 10.0.0.2:22", 2.5, "see /x/sshd.log").to_string(),
        "sshd did not listen on 10.0.0.2:22 within 2.5 s: see /x/sshd.log"
    );
}

#[test]
fn dropped_packets_keep_their_text_and_exit_code() {
    let e = Error::Dropped {
        dropped: 1,
        read: 3,
    };
    assert_eq!(
        e.to_string(),
        "1 of 3 packets dropped (use --allow-drops to accept this)"
    );
    assert_eq!(e.exit_code(), 1);
    assert_eq!(Error::Usage("--seq: 0".into()).exit_code(), 2);
}

#[test]
fn a_step_and_a_log_wrap_an_error_that_stays_the_source() {
    let e = Error::measurement("arping", "no reply")
        .logged("\n--- log ---")
        .within("demo: ping");
    assert_eq!(e.to_string(), "demo: ping: arping: no reply\n--- log ---");
    assert!(e.source().is_some());
    let Error::Context { source, .. } = &e else {
        panic!("{e:?}")
    };
    let Error::Logged { source, .. } = &**source else {
        panic!("{source:?}")
    };
    assert!(matches!(&**source, Error::Measurement { what, .. } if what == "arping"));
}

#[test]
fn a_copy_says_the_same() {
    let io = Error::io("/proc/1/stat")(std::io::Error::from_raw_os_error(2));
    let copy = io.clone();
    assert_eq!(copy.to_string(), io.to_string());
    assert!(
        matches!(copy, Error::Io { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    );
    let e = io.within("the path did not run");
    assert_eq!(e.clone().to_string(), e.to_string());
}
