//! The control socket's access setting at the command line (no namespace, no daemon): `control_group` names a
//! group of this host, or `netveil check` refuses the file with the key named and exit code 2. The credential
//! checks themselves are tested in the control crate (a server and a client run as nobody).

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
