//! `netveil keys --wireshark DIR` against a stand-in daemon (a control socket that answers `keys` with one ESP SA
//! and the IKE keys request with one line): the files it writes (0600) and what it says on stderr, word for word
//! where it names the directory (issue 40: it printed `WIRESHARK_CONFIG_DIR=1`, the number of IKE SAs). No
//! namespace; needs root (the client and the server each check that the other is root).

use netveil_control::{serve_lines, Request};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");

#[test]
fn keys_wireshark_writes_both_tables_and_names_the_directory() {
    if netveil_io::os::euid() != 0 {
        eprintln!("skipped: needs root (the control socket's peers are checked)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("nv-keys-wireshark-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("daemon.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let stop: &'static std::sync::atomic::AtomicBool =
        Box::leak(Box::new(std::sync::atomic::AtomicBool::new(false)));
    let ike_line = "0123456789abcdef,fedcba9876543210,00,11,\"AES-CBC-256 [RFC3602]\",22,33,\
                    \"HMAC_SHA2_256_128 [RFC4868]\",44,55";
    std::thread::spawn(move || {
        serve_lines(listener, stop, None, |line| match Request::parse(line) {
            Ok(Request::Keys) => json!({"sas": [{
                "family": "IPv4", "src": "192.0.2.1", "dst": "192.0.2.2", "spi": "0x00001001",
                "enc_alg": "AES-GCM with 16 octet ICV [RFC4106]", "enc_key": "0x00112233",
                "auth_alg": "NULL", "auth_key": ""
            }]}),
            Ok(Request::IkeKeys) => json!({ "ike_sas": [ike_line] }),
            _ => json!({"error": "not in this test"}),
        })
    });
    let conf = dir.join("wireshark");
    let out = Command::new(NETVEIL)
        .args(["keys", "--wireshark"])
        .arg(&conf)
        .arg("--socket")
        .arg(&sock)
        .output()
        .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let (esp, ike) = (conf.join("esp_sa"), conf.join("ikev2_decryption_table"));
    assert!(
        err.contains(&format!(
            "wrote 1 IKE SAs to {} (the lines of older SAs kept); tshark decrypts IKE with {} as its Wireshark \
             configuration directory (WIRESHARK_CONFIG_DIR={})\n",
            ike.display(),
            conf.display(),
            conf.display()
        )),
        "{err}"
    );
    assert!(!err.contains("WIRESHARK_CONFIG_DIR=1"), "{err}");
    assert!(
        err.contains(&format!("wrote 1 SAs to {}", esp.display())),
        "{err}"
    );
    for f in [&esp, &ike] {
        assert_eq!(
            std::fs::metadata(f).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    assert_eq!(
        std::fs::read_to_string(&ike).unwrap(),
        format!("{ike_line}\n")
    );
    assert!(std::fs::read_to_string(&esp)
        .unwrap()
        .starts_with("\"IPv4\",\"192.0.2.1\",\"192.0.2.2\",\"0x00001001\""));
    let _ = std::fs::remove_dir_all(&dir);
}
